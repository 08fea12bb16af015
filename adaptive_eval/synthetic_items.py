"""Synthetic traces with per-item ground truth for eval suites: an item-response model.

Each suite has items with a difficulty ``b_i`` (Normal(``shift``, ``spread``)); the policy has an ability
``theta(t)`` that moves over training as the eval accuracy of a :mod:`adaptive_eval.synthetic` trace of the
same kind does (rise, collapse, recovery, silent degradation, ...: the usual events), and item ``i``
is solved with probability ``p_i(t) = sigmoid(theta(t) - b_i)`` (a Rasch model).  So the items of a
suite differ a lot (an AIME problem is solved either almost always or almost never) and the samples of
one item are correlated: what a multi-sample evaluation has to cope with.

The trace carries the cheap streams of the underlying synthetic trace and, every ``record_every`` steps,
each item's true probability as the column ``eval/<suite>/<metric>@<item>`` (carried forward by replay,
which then draws ``Binomial(samples, p_i)`` per requested item: see :mod:`adaptive_eval.replay`).
``ItemTrace.truth[suite]`` is the suite's true accuracy (the mean of its ``p_i``) at every step.

>>> it = make_item_trace("collapse", steps=200, seed=1, suites={"math500": (500, 0.0), "aime24": (30, 2.5)})
>>> sorted(it.truth), it.truth["math500"].shape, bool(it.truth["aime24"].mean() < it.truth["math500"].mean())
(['aime24', 'math500'], (200,), True)
>>> len([c for c in it.trace.eval_names() if c.startswith("eval/aime24/acc@")])
30
"""

from __future__ import annotations

import dataclasses

import numpy as np

from adaptive_eval.synthetic import KINDS, Event, make_trace
from adaptive_eval.trace import Trace, TraceRecord

__all__ = ["ItemTrace", "item_column", "make_item_trace"]

DEFAULT_SUITES = {"math500": (500, 0.0), "aime24": (30, 2.5)}


def item_column(suite: str, metric: str, item: int) -> str:
    """The trace column of one item's ground truth: ``eval/<suite>/<metric>@<item>``."""
    return f"eval/{suite}/{metric}@{item}"


@dataclasses.dataclass
class ItemTrace:
    """A generated trace with per-item ground truth, and what is known about it.

    ``truth[suite][t]`` is the suite's true accuracy at step ``t`` (the mean of its items' probabilities),
    ``difficulty[suite]`` the items' difficulties, ``ability[t]`` the policy's ability, ``events`` the
    onsets of the underlying synthetic trace.
    """

    name: str
    kind: str
    trace: Trace
    events: list[Event]
    truth: dict[str, np.ndarray]
    difficulty: dict[str, np.ndarray]
    ability: np.ndarray
    metric: str = "acc"

    def probabilities(self, suite: str, step: int) -> np.ndarray:
        """Every item's true probability of success at ``step``."""
        return _sigmoid(self.ability[step] - self.difficulty[suite])


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def make_item_trace(kind: str = "rise_plateau", *, steps: int = 1000, seed: int = 0,
                    suites: dict[str, tuple[int, float]] | None = None, spread: float = 1.5,
                    record_every: int = 10, metric: str = "acc") -> ItemTrace:
    """Generate an item-response trace of ``kind`` (a :data:`adaptive_eval.synthetic.KINDS` kind).

    ``suites`` maps a suite name to ``(items, shift)``: the suite's size and how much harder its items are
    than the ability scale's zero (default: MATH500-like 500 items at 0, AIME24-like 30 items at +2.5).
    ``spread`` is the standard deviation of the difficulties.  Item truths are written every
    ``record_every`` steps, and at every step from an event's onset to 50 steps after it (so replay's
    carried-forward truth is never late by construction).
    """
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; choose from {list(KINDS)}")
    suites = dict(DEFAULT_SUITES if suites is None else suites)
    base = make_trace(kind, steps=steps, seed=seed)
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(seed), 12, KINDS.index(kind)])))
    acc = np.clip(base.truth, 1e-3, 1.0 - 1e-3)
    ability = np.log(acc / (1.0 - acc))  # the ability whose easiest-suite accuracy follows the base trace
    difficulty = {name: rng.normal(shift, spread, int(size)) for name, (size, shift) in suites.items()}
    truth = {name: _sigmoid(ability[:, None] - b[None, :]).mean(axis=1) for name, b in difficulty.items()}
    # Every step around an event (the ability may fall within a few steps), else every record_every steps.
    dense = {t for e in base.events for t in range(e.step - 1, e.step + 50)}
    records = []
    for rec in base.trace.records:
        metrics = {k: v for k, v in rec.metrics.items() if not k.startswith("eval/")}
        t = rec.step
        if t % record_every == 0 or t in dense:
            for name, b in difficulty.items():
                p = _sigmoid(ability[t] - b)
                metrics.update({item_column(name, metric, i): float(v) for i, v in enumerate(p.tolist())})
        records.append(TraceRecord(rec.step, metrics, rec.epoch, rec.time))
    name = f"items-{kind}-s{seed}"
    return ItemTrace(name=name, kind=kind, trace=Trace(records, f"synthetic:{name}"), events=list(base.events),
                     truth=truth, difficulty=difficulty, ability=ability, metric=metric)

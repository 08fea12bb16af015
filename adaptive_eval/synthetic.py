"""Synthetic training traces with known events, for benchmarks and tests.

Every trace has three cheap per-step streams with autocorrelated (AR(1)) noise on realistic scales:

- ``train/reward``: the mean reward of a batch of rollouts (a proportion; binomial sampling noise on top of a
  slowly wandering latent success rate), a little above the eval accuracy (the training set is easier);
- ``train/loss``: a cross-entropy-like loss around 1, falling as the model learns;
- ``train/response_length``: mean tokens per response (a few hundred, capped at ``length_cap``);

a ``time`` per record (seconds since start; a step takes longer when responses are longer), an optional
``epoch``, and ``eval/accuracy``: the true eval accuracy at every step (a proportion), which replay samples
from and checkpoint selection is scored against (``SyntheticTrace.truth``).

Kinds (``KINDS``) and their events (the onsets a good evaluator should catch):

======================  =====================================================  ================================
kind                    what happens                                           events
======================  =====================================================  ================================
``rise_plateau``        accuracy rises (saturating) and plateaus               none
``collapse``            within a few steps accuracy and reward fall to ~0,     ``collapse`` on ``train/reward``
                        responses run to the length cap, loss jumps
``collapse_recovery``   a collapse, then a gradual recovery                    ``collapse``, ``recovery``
``silent_degradation``  eval accuracy falls while training reward keeps        ``degradation`` on
                        rising (reward hacking); responses lengthen slightly   ``eval/accuracy``
``spikes``              one-step loss spikes (``distractors``, not events)     none
``nan``                 loss and reward are NaN from the onset on              ``nan`` on ``train/loss``
``flat``                no learning: noise around a constant                   none
======================  =====================================================  ================================

``Event.stream`` is the column where the change first shows (``eval/accuracy`` when no cheap stream does).
Every parameter not given is drawn from the seed (onsets between 30% and 70% of the run, magnitudes,
scales), so a policy cannot be tuned to fixed steps; the same kind, steps, seed and parameters give the
same trace.

>>> st = make_trace("collapse", steps=400, seed=3)
>>> st.events
[Event(step=..., kind='collapse', stream='train/reward')]
>>> len(st.trace), st.trace.stream_names(), st.trace.eval_names()
(400, ['train/reward', 'train/loss', 'train/response_length'], ['eval/accuracy'])
>>> bool(st.truth[st.events[0].step - 1] > st.truth[-1] + 0.1)
True
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from adaptive_eval.trace import Trace, TraceRecord

__all__ = ["KINDS", "Event", "SyntheticTrace", "make_trace", "suite"]

KINDS = ("rise_plateau", "collapse", "collapse_recovery", "silent_degradation", "spikes", "nan", "flat")

REWARD, LOSS, LENGTH, ACCURACY = "train/reward", "train/loss", "train/response_length", "eval/accuracy"


@dataclasses.dataclass(frozen=True)
class Event:
    """A change at ``step`` of a given ``kind``, first visible on column ``stream``."""

    step: int
    kind: str
    stream: str


@dataclasses.dataclass
class SyntheticTrace:
    """A generated trace and what is known about it.

    ``truth[i]`` is the true eval value at ``trace.records[i]`` (here step ``i``); ``events`` are the onsets to
    catch; ``distractors`` are anomalies that are not events (the one-step spikes); ``params`` every
    parameter used, drawn or given.
    """

    name: str
    kind: str
    trace: Trace
    events: list[Event]
    truth: np.ndarray
    distractors: list[Event]
    params: dict
    eval_metric: str = ACCURACY
    higher_is_better: bool = True


def _ar1(rng: np.random.Generator, n: int, phi: float, sd: float) -> np.ndarray:
    """Stationary AR(1) noise with marginal standard deviation ``sd``."""
    innovations = rng.normal(0.0, sd * math.sqrt(1.0 - phi * phi), n)
    first = rng.normal(0.0, sd)
    from scipy.signal import lfilter  # (here: importing scipy.signal takes 1.5 s, which every CLI call paid)

    out, _ = lfilter([1.0], [1.0, -phi], innovations, zi=[phi * first])
    return out


# Parameters every kind has, with how the default is drawn (in this order, always, so that giving one
# parameter does not shift the draws of the others).
def _draw_common(rng: np.random.Generator, steps: int) -> dict:
    acc_start = rng.uniform(0.05, 0.25)
    return {
        "acc_start": acc_start,                              # eval accuracy at step 0
        "acc_peak": min(0.9, acc_start + rng.uniform(0.2, 0.45)),  # where the rise levels off
        "rise_steps": rng.uniform(0.08, 0.3) * steps,        # time constant of the rise
        "reward_offset": rng.uniform(0.03, 0.15),            # training reward above eval accuracy
        "reward_noise": rng.uniform(0.02, 0.06),             # sd of the latent success-rate wander
        "rollouts": int(rng.choice([16, 32, 64, 128])),      # reward = successes / rollouts
        "phi": rng.uniform(0.6, 0.9),                        # AR(1) coefficient of the stream noise
        "loss_start": rng.uniform(0.9, 1.6),
        "loss_drop": rng.uniform(0.3, 0.6),                  # share of the loss learned away
        "loss_noise": rng.uniform(0.01, 0.03),
        "length_base": rng.uniform(200.0, 500.0),            # mean response tokens at step 0
        "length_growth": rng.uniform(0.0, 0.5),              # relative growth as the model learns
        "length_noise": rng.uniform(0.05, 0.12),             # relative sd
        "length_cap": 1024.0,
        "step_seconds": rng.uniform(6.0, 14.0),              # seconds per step at the base length
        "truth_wiggle": rng.uniform(0.002, 0.008),           # slow wander of the true accuracy
        "onset": int(round(rng.uniform(0.3, 0.7) * steps)),  # the event, for kinds that have one
        "steps_per_epoch": None,
    }


def _draw_kind(kind: str, rng: np.random.Generator, steps: int) -> dict:
    if kind in ("collapse", "collapse_recovery"):
        p = {"floor": rng.uniform(0.0, 0.04), "collapse_steps": int(rng.integers(1, 8))}
        if kind == "collapse_recovery":
            p["recovery_gap"] = int(round(max(30, rng.uniform(0.05, 0.15) * steps)))
            p["recovery_steps"] = rng.uniform(20.0, 80.0)
            p["recovered_share"] = rng.uniform(0.7, 1.0)
        return p
    if kind == "silent_degradation":
        return {"drop": rng.uniform(0.12, 0.3), "degrade_steps": rng.uniform(0.1, 0.25) * steps,
                "hacking_gain": rng.uniform(0.05, 0.15), "length_drift": rng.uniform(0.0, 0.3)}
    if kind == "spikes":
        return {"n_spikes": int(rng.integers(3, 9)), "spike_min": 1.5, "spike_max": 2.5}
    return {}


def make_trace(kind: str, *, steps: int = 1000, seed: int = 0, **params) -> SyntheticTrace:
    """Generate a trace of ``kind`` (one of ``KINDS``) over steps ``0 .. steps - 1``.

    ``params`` override the drawn defaults (see ``SyntheticTrace.params`` of any trace for the names);
    an unknown name raises ``TypeError``.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; choose from {list(KINDS)}")
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 20:
        raise ValueError(f"steps must be an int >= 20, got {steps!r}")
    steps = int(steps)
    seq = np.random.SeedSequence([int(seed), KINDS.index(kind)])
    param_rng, noise_rng = (np.random.Generator(np.random.PCG64(s)) for s in seq.spawn(2))
    p = {**_draw_common(param_rng, steps), **_draw_kind(kind, param_rng, steps)}
    unknown = sorted(set(params) - set(p))
    if unknown:
        raise TypeError(f"make_trace({kind!r}): unknown parameter(s) {unknown}; known: {sorted(p)}")
    p.update(params)
    if kind in ("collapse", "collapse_recovery", "silent_degradation", "nan") and not 1 <= p["onset"] < steps - 1:
        raise ValueError(f"onset must lie in [1, {steps - 2}], got {p['onset']}")

    t = np.arange(steps, dtype=np.float64)
    progress = 1.0 - np.exp(-t / max(p["rise_steps"], 1e-9))
    if kind == "flat":
        progress = np.zeros(steps)
    acc = p["acc_start"] + (p["acc_peak"] - p["acc_start"]) * progress
    acc = acc + _ar1(noise_rng, steps, 0.995, p["truth_wiggle"])
    reward_p = acc + p["reward_offset"]
    loss = p["loss_start"] * (1.0 - p["loss_drop"] * progress)
    length = p["length_base"] * (1.0 + p["length_growth"] * progress)
    loss_scale = np.ones(steps)  # multiplies the loss noise (a collapsed run is noisier)

    events: list[Event] = []
    distractors: list[Event] = []
    onset = int(p["onset"])
    after = t >= onset
    if kind in ("collapse", "collapse_recovery"):
        # Within collapse_steps steps everything falls to the floor; responses run to the cap.
        fall = np.clip((t - onset + 1) / max(p["collapse_steps"], 1), 0.0, 1.0)
        level = 1.0 - fall  # 1 before the onset, 0 once collapsed
        if kind == "collapse_recovery":
            start = onset + int(p["recovery_gap"])
            if start >= steps - 1:
                raise ValueError(f"onset + recovery_gap = {start} leaves no room to recover in {steps} steps")
            back = np.where(t >= start, 1.0 - np.exp(-(t - start) / max(p["recovery_steps"], 1e-9)), 0.0)
            level = np.maximum(level, p["recovered_share"] * back)
            events.append(Event(onset, "collapse", REWARD))
            events.append(Event(start, "recovery", REWARD))
        else:
            events.append(Event(onset, "collapse", REWARD))
        acc = p["floor"] + (acc - p["floor"]) * level
        reward_p = p["floor"] * 0.5 + (reward_p - p["floor"] * 0.5) * level
        length = p["length_cap"] * 0.97 + (length - p["length_cap"] * 0.97) * level
        loss = loss * (1.0 + 0.6 * (1.0 - level))
        loss_scale = 1.0 + 3.0 * (1.0 - level)
    elif kind == "silent_degradation":
        ramp = np.clip((t - onset) / max(p["degrade_steps"], 1.0), 0.0, 1.0)
        acc = acc - p["drop"] * ramp
        reward_p = reward_p + p["hacking_gain"] * ramp + p["drop"] * ramp  # reward ignores the loss of skill
        length = length * (1.0 + p["length_drift"] * ramp)
        events.append(Event(onset, "degradation", ACCURACY))
    elif kind == "nan":
        events.append(Event(onset, "nan", LOSS))
        acc = np.where(after, 0.0, acc)
    truth = np.clip(acc, 0.0, 1.0)

    reward_latent = np.clip(reward_p + _ar1(noise_rng, steps, p["phi"], p["reward_noise"]), 0.0, 1.0)
    reward = noise_rng.binomial(int(p["rollouts"]), reward_latent) / int(p["rollouts"])
    loss = loss * (1.0 + loss_scale * _ar1(noise_rng, steps, p["phi"], p["loss_noise"]))
    length = np.minimum(length * np.exp(_ar1(noise_rng, steps, p["phi"], p["length_noise"])), p["length_cap"])
    if kind == "spikes":
        n = int(p["n_spikes"])
        lo, hi = int(0.1 * steps), int(0.95 * steps)
        candidates = np.arange(lo, hi, max(1, (hi - lo) // max(4 * n, 1)))
        where = np.sort(noise_rng.choice(candidates, size=min(n, len(candidates)), replace=False))
        loss[where] *= noise_rng.uniform(p["spike_min"], p["spike_max"], size=len(where))
        distractors = [Event(int(s), "spike", LOSS) for s in where]
    if kind == "nan":
        loss = np.where(after, np.nan, loss)
        reward = np.where(after, np.nan, reward)
        length = np.where(after, p["length_cap"], length)  # garbage until the cap
    seconds = p["step_seconds"] * (0.5 + 0.5 * length / p["length_base"])
    seconds = seconds * np.exp(noise_rng.normal(0.0, 0.05, steps))
    time = np.cumsum(seconds)

    spe = p["steps_per_epoch"]
    epochs = [None] * steps if spe is None else (np.arange(steps) // int(spe)).tolist()
    records = [
        TraceRecord(i, {REWARD: r, LOSS: lo_, LENGTH: le, ACCURACY: a}, e, tm)
        for i, (r, lo_, le, a, e, tm) in enumerate(zip(reward.tolist(), loss.tolist(), length.tolist(),
                                                        truth.tolist(), epochs, time.tolist()))
    ]
    name = f"{kind}-s{seed}"
    return SyntheticTrace(name=name, kind=kind, trace=Trace(records, f"synthetic:{name}"), events=events,
                          truth=truth, distractors=distractors, params=p)


def suite(seed: int = 0, *, steps: int = 1000, per_kind: int = 2) -> list[SyntheticTrace]:
    """``per_kind`` traces of every kind, each with its own seed drawn from ``seed``.

    >>> [st.name for st in suite(0, steps=100, per_kind=1)][:2]
    ['rise_plateau-s...', 'collapse-s...']
    """
    seeds = np.random.SeedSequence(int(seed)).generate_state(len(KINDS) * per_kind).tolist()
    out = []
    for k, kind in enumerate(KINDS):
        for j in range(per_kind):
            out.append(make_trace(kind, steps=steps, seed=int(seeds[k * per_kind + j])))
    return out

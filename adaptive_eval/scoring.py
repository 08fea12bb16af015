"""Scoring an evaluation schedule against known events and ground truth (benchmarks and tests share these).

An *evaluation* here is a mapping with ``step``, ``sample_size`` (None: the whole eval set) and
``metrics`` {name: measured mean}, as in ``evals.jsonl``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

__all__ = ["best_eval", "caught_within", "detection_delay", "detection_delays", "eval_samples", "selection_regret"]


def _size(e: Mapping, full_size: int | None) -> float:
    n = e.get("sample_size")
    if n is None:
        return math.inf if full_size is None else full_size
    return n if full_size is None else min(n, full_size)


def detection_delay(evals: Sequence[Mapping], event_step: int, *, min_samples: int = 32,
                    full_size: int | None = None) -> int | None:
    """Steps from ``event_step`` to the first evaluation of at least ``min_samples`` at or after it.

    None when no such evaluation follows (the event was never caught).

    >>> evals = [{"step": 10, "sample_size": 16}, {"step": 12, "sample_size": 64}, {"step": 40, "sample_size": None}]
    >>> detection_delay(evals, 9), detection_delay(evals, 13), detection_delay(evals, 41)
    (3, 27, None)
    """
    for e in evals:
        if e["step"] >= event_step and _size(e, full_size) >= min_samples:
            return int(e["step"] - event_step)
    return None


def detection_delays(evals: Sequence[Mapping], event_steps: Sequence[int], **kw) -> list[int | None]:
    """:func:`detection_delay` for each event."""
    return [detection_delay(evals, s, **kw) for s in event_steps]


def caught_within(delays: Sequence[int | None], steps: int) -> float:
    """Share of events caught within ``steps`` steps (an event never caught is missed).

    >>> caught_within([0, 10, 30, None], 25)
    0.5
    """
    if not delays:
        return math.nan
    return sum(d is not None and d <= steps for d in delays) / len(delays)


def eval_samples(evals: Sequence[Mapping], full_size: int) -> int:
    """Items evaluated in total (a whole-set evaluation counts ``full_size``)."""
    return int(sum(_size(e, full_size) for e in evals))


def best_eval(evals: Sequence[Mapping], metric: str, *, higher_is_better: bool = True,
              by: str = "bound") -> Mapping | None:
    """The evaluation to pick a checkpoint by.

    ``by="mean"``: the best measured mean.  ``by="bound"``: the best pessimistic bound of the confidence
    interval (the lower bound when higher is better), so that a lucky small sample does not beat a
    precise large one; an evaluation without a finite interval counts by its mean.

    >>> evals = [{"step": 1, "metrics": {"acc": 1.0}, "ci": {"acc": [0.89, 1.0]}},
    ...          {"step": 2, "metrics": {"acc": 0.97}, "ci": {"acc": [0.95, 0.98]}}]
    >>> best_eval(evals, "acc", by="mean")["step"], best_eval(evals, "acc")["step"]
    (1, 2)
    """
    if by not in ("mean", "bound"):
        raise ValueError(f"by must be 'mean' or 'bound', got {by!r}")
    sign = 1.0 if higher_is_better else -1.0
    measured = [e for e in evals if metric in e.get("metrics", {}) and math.isfinite(e["metrics"][metric])]

    def key(e):
        if by == "bound":
            ci = e.get("ci", {}).get(metric)
            if ci is not None and all(math.isfinite(c) for c in ci):
                return ci[0] if higher_is_better else -ci[1]
        return sign * e["metrics"][metric]

    return max(measured, key=key, default=None)


def selection_regret(evals: Sequence[Mapping], truth: Mapping[int, float] | Sequence[float], metric: str, *,
                     higher_is_better: bool = True, by: str = "mean") -> float:
    """True value of the best step minus the true value of the step whose eval was best (see
    :func:`best_eval` for ``by``).

    ``truth`` maps each step to the metric's true value (a sequence is indexed by step).  NaN when no
    evaluation measured ``metric``.

    >>> truth = [0.1, 0.5, 0.9, 0.6]
    >>> selection_regret([{"step": 1, "metrics": {"acc": 0.7}}, {"step": 3, "metrics": {"acc": 0.65}}], truth, "acc")
    0.4
    """
    sign = 1.0 if higher_is_better else -1.0
    values = truth.values() if isinstance(truth, Mapping) else truth
    finite = [sign * v for v in values if v is not None and math.isfinite(v)]
    picked = best_eval(evals, metric, higher_is_better=higher_is_better, by=by)
    if not finite or picked is None:
        return math.nan
    true_at_pick = truth[picked["step"]]
    return round(max(finite) - sign * true_at_pick, 12)

"""Scoring an evaluation schedule against known events and ground truth (benchmarks and tests share these).

An *evaluation* here is a mapping with ``step``, ``sample_size`` (None: the whole eval set),
``metrics`` {name: measured mean} and ``ci`` {name: [low, high]}, as in ``evals.jsonl``.

Two ways to score detection: :func:`detection_delay` counts the first evaluation of some size after an
event, whether or not it could see the change; :func:`confirmed_delay` counts only an evaluation whose
interval shows the change (the honest one: an evaluation too small to see it does not count).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

__all__ = ["best_eval", "caught_within", "confirmed_delay", "confirmed_delays", "detection_delay", "detection_delays",
           "eval_samples", "selection_regret"]


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


def _finite(x) -> bool:
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def confirmed_delay(evals: Sequence[Mapping], event_step: int, metric: str, *, pre_level: float | None = None,
                    direction: str | None = None) -> int | None:
    """Steps from ``event_step`` to the first evaluation at or after it whose interval for ``metric``
    excludes ``pre_level``: the first result that *shows* the change at its own confidence.

    ``pre_level`` defaults to the last measured mean of ``metric`` before the event (None when nothing
    was measured before it: then nothing can confirm).  ``direction`` "down" needs the interval wholly
    below ``pre_level``, "up" wholly above it, None either.  An evaluation without a finite interval
    for ``metric`` confirms nothing.  None when no evaluation confirms the change.

    >>> evals = [{"step": 5, "metrics": {"acc": 0.80}, "ci": {"acc": [0.70, 0.90]}},
    ...          {"step": 12, "metrics": {"acc": 0.70}, "ci": {"acc": [0.50, 0.90]}},   # too wide: no
    ...          {"step": 20, "metrics": {"acc": 0.60}, "ci": {"acc": [0.55, 0.65]}}]
    >>> confirmed_delay(evals, 10, "acc"), confirmed_delay(evals, 10, "acc", direction="up")
    (10, None)
    >>> confirmed_delay(evals, 10, "acc", pre_level=0.68), confirmed_delay(evals, 2, "acc")
    (10, None)
    """
    if direction not in (None, "up", "down"):
        raise ValueError(f"direction must be 'up', 'down' or None, got {direction!r}")
    ordered = sorted((e for e in evals if metric in e.get("metrics", {})), key=lambda e: e["step"])
    if pre_level is None:
        before = [e for e in ordered if e["step"] < event_step and _finite(e["metrics"][metric])]
        if not before:
            return None
        pre_level = float(before[-1]["metrics"][metric])
    if not _finite(pre_level):
        return None
    for e in ordered:
        if e["step"] < event_step:
            continue
        ci = (e.get("ci") or {}).get(metric)
        if ci is None or len(ci) != 2 or not (_finite(ci[0]) and _finite(ci[1])):
            continue
        low, high = float(ci[0]), float(ci[1])
        if (direction != "up" and high < pre_level) or (direction != "down" and low > pre_level):
            return int(e["step"] - event_step)
    return None


def confirmed_delays(evals: Sequence[Mapping], events: Sequence, metric: str, **kw) -> list[int | None]:
    """:func:`confirmed_delay` for each event (an int step, or an object with a ``step`` attribute)."""
    return [confirmed_delay(evals, getattr(ev, "step", ev), metric, **kw) for ev in events]


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

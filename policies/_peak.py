"""Peak tracking: while the eval metric still improves, do not relax the schedule."""

from __future__ import annotations

import dataclasses

import math
from collections.abc import Mapping

from adaptive_eval.types import Decision, EvalResult

from adaptive_eval.policies._base import Context, Policy, primary_metric

__all__ = ["PeakPolicy"]


class PeakPolicy(Policy):
    """While the tracked metric reaches new bests: cap the interval at ``improving_factor`` x base, and give
    the next evaluation at least ``confirm_size`` items.

    Model selection is a main reason to evaluate: a relaxed schedule during the climb could step over the
    best checkpoint, and a small sample that looks best by luck would be picked over a better one.  A new
    best is judged by the pessimistic bound of the confidence interval (the lower bound when
    ``higher_is_better``; the mean when there is no interval), so only a real improvement counts and the
    region of the best checkpoint gets measured precisely.

    >>> from adaptive_eval.types import EvalResult, MetricSummary
    >>> p = PeakPolicy(improving_factor=1.0)
    >>> ctx = Context(step=0, elapsed=0.0, eval_seconds=0.0)
    >>> r = lambda m: EvalResult(step=0, sample_size=1, reason="", seconds=0.0, metrics={"acc": MetricSummary(m, 100, (m, m))})
    >>> p.on_eval(r(0.5), ctx); p.scale(3.0)
    1.0
    >>> p.on_eval(r(0.4), ctx); p.scale(3.0)
    3.0
    """

    name = "peak"

    def __init__(self, improving_factor: float = 1.0, confirm_size: int = 0, metric: str | None = None,
                 higher_is_better: bool = True):
        if not improving_factor > 0:
            raise ValueError(f"improving_factor must be positive, got {improving_factor}")
        if confirm_size < 0:
            raise ValueError(f"confirm_size must be >= 0, got {confirm_size}")
        self.improving_factor = float(improving_factor)
        self.confirm_size = int(confirm_size)
        self.metric = metric
        self.higher_is_better = bool(higher_is_better)
        self._reset()

    def _reset(self) -> None:
        self.best = -math.inf
        self.improving = False

    def scale(self, scale: float) -> float:
        return min(scale, self.improving_factor) if self.improving else scale

    def propose(self, decision: Decision, ctx: Context) -> Decision:
        if not (self.improving and self.confirm_size and decision.evaluate):
            return decision
        if decision.sample_size is not None and decision.sample_size >= self.confirm_size:
            return decision
        return dataclasses.replace(decision, evaluate=True, sample_size=self.confirm_size)

    def on_eval(self, result: EvalResult, ctx: Context) -> None:
        found = primary_metric(result, self.metric)
        if found is None:  # nothing measured (a failed evaluation): nothing learned
            return
        if not math.isfinite(found[1].mean):
            self.improving = False
            return
        m = found[1]
        if self.higher_is_better:
            value = m.ci[0] if math.isfinite(m.ci[0]) else m.mean
        else:
            value = -m.ci[1] if math.isfinite(m.ci[1]) else -m.mean
        self.improving = value > self.best
        self.best = max(self.best, value)

    def state_dict(self) -> dict:
        return {"best": self.best if math.isfinite(self.best) else None, "improving": self.improving}

    def load_state_dict(self, sd: Mapping) -> None:
        best = sd.get("best")
        self.best = float(best) if best is not None else -math.inf
        self.improving = bool(sd.get("improving", False))

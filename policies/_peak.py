"""Peak tracking: while the eval metric still improves, do not relax the schedule."""

from __future__ import annotations

import math
from collections.abc import Mapping

from adaptive_eval.types import EvalResult

from adaptive_eval.policies._base import Context, Policy, primary_metric

__all__ = ["PeakPolicy"]


class PeakPolicy(Policy):
    """Cap the interval at ``improving_factor`` x base while the tracked metric reaches new bests.

    Model selection is a main reason to evaluate: a relaxed schedule during the climb could step over the
    best checkpoint.  "Improving" means the last evaluation set a new best (``higher_is_better`` sets
    the direction).

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

    def __init__(self, improving_factor: float = 1.0, metric: str | None = None, higher_is_better: bool = True):
        if not improving_factor > 0:
            raise ValueError(f"improving_factor must be positive, got {improving_factor}")
        self.improving_factor = float(improving_factor)
        self.metric = metric
        self.higher_is_better = bool(higher_is_better)
        self._reset()

    def _reset(self) -> None:
        self.best = -math.inf
        self.improving = False

    def scale(self, scale: float) -> float:
        return min(scale, self.improving_factor) if self.improving else scale

    def on_eval(self, result: EvalResult, ctx: Context) -> None:
        found = primary_metric(result, self.metric)
        if found is None or not math.isfinite(found[1].mean):
            self.improving = False
            return
        value = found[1].mean if self.higher_is_better else -found[1].mean
        self.improving = value > self.best
        self.best = max(self.best, value)

    def state_dict(self) -> dict:
        return {"best": self.best if math.isfinite(self.best) else None, "improving": self.improving}

    def load_state_dict(self, sd: Mapping) -> None:
        best = sd.get("best")
        self.best = float(best) if best is not None else -math.inf
        self.improving = bool(sd.get("improving", False))

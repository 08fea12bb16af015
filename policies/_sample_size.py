"""Sample-size policy: size each evaluation for a target confidence-interval half-width."""

from __future__ import annotations

import math
from collections.abc import Mapping

from adaptive_eval.stats import mean_sample_size, wilson_sample_size
from adaptive_eval.types import Decision, EvalResult

from adaptive_eval.policies._base import Context, Policy, primary_metric

__all__ = ["SampleSizePolicy"]


class SampleSizePolicy(Policy):
    """Choose the next evaluation's size from the last one's variance, widened after an alarm.

    Proportions use the Wilson interval's width at the last measured proportion; other metrics the
    normal approximation with the last measured standard deviation.  After an alarm (or for an
    alarm-driven evaluation) the size is multiplied by ``alarm_factor`` so the suspected change can be
    confirmed.  Always within [``min``, ``max``]; ``initial`` before anything is known.  Samples are
    nested (``EvalRequest.indices``), so a larger size extends the same items.

    >>> from adaptive_eval.types import Decision
    >>> p = SampleSizePolicy(initial=100, min=32, max=1000, target_half_width=0.05)
    >>> ctx = Context(step=0, elapsed=0.0, eval_seconds=0.0)
    >>> p.propose(Decision(True, reason="trigger:steps"), ctx).sample_size
    100
    >>> p.propose(Decision(True, reason="alarm:train/reward:cusum:down"), ctx).sample_size
    200
    """

    name = "sample_size"

    def __init__(self, initial: int = 128, min: int = 32, max: int = 1024, target_half_width: float = 0.05,
                 alarm_factor: float = 2.0, confidence: float = 0.95, metric: str | None = None):
        if not 0 < min <= max:
            raise ValueError(f"min ({min}) must be positive and <= max ({max})")
        if not target_half_width > 0:
            raise ValueError(f"target_half_width must be positive, got {target_half_width}")
        if not alarm_factor >= 1:
            raise ValueError(f"alarm_factor must be >= 1, got {alarm_factor}")
        self.initial, self.min, self.max = int(initial), int(min), int(max)
        self.target_half_width, self.alarm_factor = float(target_half_width), float(alarm_factor)
        self.confidence, self.metric = float(confidence), metric
        self._reset()

    def _reset(self) -> None:
        self.base = self._clamp(self.initial)
        self._widen = False
        self.last_why = "initial"

    def _clamp(self, n: float) -> int:
        return int(min(self.max, max(self.min, math.ceil(n))))

    def on_alarm(self, alarm, ctx: Context) -> None:
        self._widen = True

    def propose(self, decision: Decision, ctx: Context) -> Decision:
        if not decision.evaluate:
            return decision
        n = self.base
        if self._widen or decision.reason.startswith("alarm:"):
            n = self._clamp(n * self.alarm_factor)
        return Decision(True, n, decision.reason, decision.urgent)

    def on_eval(self, result: EvalResult, ctx: Context) -> None:
        self._widen = False
        found = primary_metric(result, self.metric)
        if found is None:
            return
        s = found[1]
        if s.binary and math.isfinite(s.mean):
            self.base = self._clamp(wilson_sample_size(s.mean, self.target_half_width, self.confidence))
            self.last_why = f"wilson(p={s.mean:.3f})"
        elif math.isfinite(s.std) and s.std > 0:
            self.base = self._clamp(mean_sample_size(s.std, self.target_half_width, self.confidence))
            self.last_why = f"normal(sd={s.std:.3g})"

    def state_dict(self) -> dict:
        return {"base": self.base, "widen": self._widen, "last_why": self.last_why}

    def load_state_dict(self, sd: Mapping) -> None:
        self.base = int(sd.get("base", self._clamp(self.initial)))
        self._widen = bool(sd.get("widen", False))
        self.last_why = str(sd.get("last_why", "initial"))

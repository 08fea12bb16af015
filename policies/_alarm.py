"""Alarm policy: an alarm on a watched stream brings the evaluation forward to the current step."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from adaptive_eval.types import Decision

from adaptive_eval.policies._base import Context, Policy

__all__ = ["AlarmPolicy"]


def alarm_reason(stream: str, detector: str, direction: str | None) -> str:
    return f"alarm:{stream}:{detector}" + (f":{direction}" if direction else "")


class AlarmPolicy(Policy):
    """Evaluate at the step an alarm arrives; a burst of alarms within ``cooldown_steps`` costs one eval.

    Alarms from ``urgent_detectors`` (default: ``nonfinite``) are urgent: the decision is marked urgent
    (so the budget may let it through) and they ignore the cooldown of other alarms, with their own
    cooldown per stream, so a stream stuck at NaN does not evaluate at every step.

    >>> from types import SimpleNamespace as A
    >>> from adaptive_eval.types import Decision
    >>> p = AlarmPolicy(cooldown_steps=10)
    >>> ctx = lambda s: Context(step=s, elapsed=0.0, eval_seconds=0.0)
    >>> p.on_alarm(A(stream="train/reward", detector="cusum", direction="down", step=5), ctx(5))
    >>> p.propose(Decision(False), ctx(5)).reason
    'alarm:train/reward:cusum:down'
    """

    name = "alarm"

    def __init__(self, cooldown_steps: int = 20, urgent_detectors: Sequence[str] = ("nonfinite",)):
        if cooldown_steps < 0:
            raise ValueError(f"cooldown_steps must be >= 0, got {cooldown_steps}")
        self.cooldown_steps = int(cooldown_steps)
        self.urgent_detectors = tuple(urgent_detectors)
        self._reset()

    def _reset(self) -> None:
        self._pending: list[tuple[str, str, str | None, bool]] = []  # (stream, detector, direction, urgent)
        self._last_alarm_eval: int | None = None
        self._last_urgent_eval: dict[str, int] = {}
        self.absorbed = 0  # alarms that cost no evaluation (cooldown)

    def _cooling(self, last: int | None, step: int) -> bool:
        return last is not None and step - last < self.cooldown_steps

    def on_alarm(self, alarm, ctx: Context) -> None:
        urgent = alarm.detector in self.urgent_detectors
        if urgent:
            cooling = self._cooling(self._last_urgent_eval.get(alarm.stream), ctx.step)
        else:
            cooling = self._cooling(self._last_alarm_eval, ctx.step)
        if cooling:
            self.absorbed += 1
            return
        self._pending.append((alarm.stream, alarm.detector, alarm.direction, urgent))

    def propose(self, decision: Decision, ctx: Context) -> Decision:
        if not self._pending:
            return decision
        urgent = [p for p in self._pending if p[3]]
        stream, detector, direction, _ = (urgent or self._pending)[0]
        return Decision(True, decision.sample_size, alarm_reason(stream, detector, direction),
                        urgent=bool(urgent) or decision.urgent)

    def on_eval(self, result, ctx: Context) -> None:
        if self._pending:
            self._last_alarm_eval = ctx.step
            for stream, _, _, urgent in self._pending:
                if urgent:
                    self._last_urgent_eval[stream] = ctx.step
        self._pending = []

    @property
    def pending(self) -> bool:
        return bool(self._pending)

    def state_dict(self) -> dict:
        return {"pending": [list(p) for p in self._pending], "last_alarm_eval": self._last_alarm_eval,
                "last_urgent_eval": dict(self._last_urgent_eval), "absorbed": self.absorbed}

    def load_state_dict(self, sd: Mapping) -> None:
        self._pending = [tuple(p) for p in sd.get("pending", [])]
        self._last_alarm_eval = sd.get("last_alarm_eval")
        self._last_urgent_eval = {str(k): int(v) for k, v in sd.get("last_urgent_eval", {}).items()}
        self.absorbed = int(sd.get("absorbed", 0))

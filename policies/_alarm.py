"""Alarm policy: an alarm on a watched stream brings the evaluation forward to the current step."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from adaptive_eval.types import Decision

from adaptive_eval.policies._base import Context, Policy, primary_metric
from adaptive_eval.policies._interval import change_p, loaded_summary, remembered

__all__ = ["AlarmPolicy"]


_ANSWERED_KEPT = 16  # evaluations in flight whose alarms a failure puts back (asynchronous: a few at most)


def alarm_reason(stream: str, detector: str, direction: str | None) -> str:
    return f"alarm:{stream}:{detector}" + (f":{direction}" if direction else "")


class AlarmPolicy(Policy):
    """Evaluate at the step an alarm arrives; a burst of alarms within ``cooldown_steps`` costs one eval.

    Alarms from ``urgent_detectors`` (default: ``nonfinite`` and ``stuck``) are urgent: the decision is marked urgent
    (so the budget may let it through) and they ignore the cooldown of other alarms, with their own
    cooldown per stream, so a stream stuck at NaN does not evaluate at every step.

    **Corroboration** (``corroborate`` > 1): a non-urgent alarm brings the evaluation forward only once
    alarms from ``corroborate`` different streams have arrived within ``corroborate_steps`` steps of each
    other (a real collapse moves reward, loss and response length together; a false alarm on one noisy
    stream stays alone).  Until then the alarm is *held* (:meth:`admit` says so): the other policies see it
    through ``on_held_alarm`` only (the sample-size policy widens the next scheduled evaluation), so a
    lone alarm neither runs an evaluation nor tightens the schedule.  Fewer streams able to alarm than
    ``corroborate`` (``Context.streams``: those whose detectors are past warm-up): all of them must agree.

    **Habituation** (``habituate``): when the evaluation an urgent alarm brought shows the tracked metric
    unchanged (no significant difference from the evaluation before it), that stream's later urgent alarms wait
    for another stream to agree, as a non-urgent alarm does (the abrupt rule aside), and a held one widens
    nothing.  Admitted (another stream alarming within ``corroborate_steps``, a change just taken, or the only
    stream that can alarm), it is urgent as before; an evaluation an urgent alarm brought that shows a change
    undoes every stream's habituation.  A mixed-precision loss
    scaler's skipped steps put bursts of inf in ``grad_norm`` that each bought a whole evaluation while the
    accuracy never moved (an outside reviewer's traces: 10 of 17 needless evaluations); a run that dies still
    makes its loss or reward alarm too.

    ``corroborate_steps`` and ``abrupt_steps`` count the streams' own updates: on a run whose metrics are
    observed every k steps (``Context.stride``, a trace logged every k steps) each counts k steps, so an
    abrupt shift caught on the second value after it still counts alone.

    >>> from types import SimpleNamespace as A
    >>> from adaptive_eval.types import Decision
    >>> p = AlarmPolicy(cooldown_steps=10)
    >>> ctx = lambda s: Context(step=s, elapsed=0.0, eval_seconds=0.0)
    >>> p.on_alarm(A(stream="train/reward", detector="cusum", direction="down", step=5), ctx(5))
    >>> p.propose(Decision(False), ctx(5)).reason
    'alarm:train/reward:cusum:down'

    >>> q = AlarmPolicy(cooldown_steps=10, corroborate=2, corroborate_steps=5)
    >>> c = lambda s: Context(step=s, elapsed=0.0, eval_seconds=0.0, streams=3)
    >>> q.admit(A(stream="train/loss", detector="cusum", direction="up", step=5, location=5), c(5)), q.pending
    (False, False)
    >>> q.admit(A(stream="train/reward", detector="cusum", direction="down", step=8, location=8), c(8))
    True
    >>> q.on_alarm(A(stream="train/reward", detector="cusum", direction="down", step=8), c(8)); q.pending
    True
    """

    name = "alarm"

    def __init__(self, cooldown_steps: int = 20, urgent_detectors: Sequence[str] = ("nonfinite", "stuck"),
                 corroborate: int = 1, corroborate_steps: int = 0, abrupt_steps: int | None = None,
                 habituate: bool = False, significance: float = 0.05, metric: str | None = None):
        if cooldown_steps < 0:
            raise ValueError(f"cooldown_steps must be >= 0, got {cooldown_steps}")
        if corroborate < 1:
            raise ValueError(f"corroborate must be >= 1, got {corroborate}")
        if corroborate_steps < 0:
            raise ValueError(f"corroborate_steps must be >= 0, got {corroborate_steps}")
        self.cooldown_steps = int(cooldown_steps)
        self.urgent_detectors = tuple(urgent_detectors)
        self.corroborate = int(corroborate)
        self.corroborate_steps = int(corroborate_steps)
        if abrupt_steps is not None and abrupt_steps < 0:
            raise ValueError(f"abrupt_steps must be >= 0 or None, got {abrupt_steps}")
        self.abrupt_steps = None if abrupt_steps is None else int(abrupt_steps)
        if not 0 < significance < 1:
            raise ValueError(f"significance must lie in (0, 1), got {significance}")
        self.habituate = bool(habituate)
        self.significance = float(significance)
        self.metric = metric
        self._reset()

    def _reset(self) -> None:
        self._pending: list[tuple[str, str, str | None, bool]] = []  # (stream, detector, direction, urgent)
        # step -> [the alarms its evaluation answered, whether they were answered once already]: put back once
        # when that evaluation fails (settle)
        self._answered: dict[int, list] = {}  # step -> [(alarm, whether it was a retry already)]
        self._retried: list[tuple] = []  # pending alarms put back after a failed evaluation (not again)
        self._last_alarm_eval: int | None = None
        self._last_urgent_eval: dict[str, int] = {}
        # the detector of each stream's last urgent evaluation (habituation is of the pair), and each urgent
        # detector's last evaluation but nonfinite's (a cooldown its streams share: see on_alarm)
        self._urgent_detector: dict[str, str] = {}
        self._last_urgent_by: dict[str, int] = {}
        self.absorbed = 0  # alarms that cost no evaluation (cooldown)
        self._recent: list[tuple[str, int, str | None]] = []  # (stream, step, direction): alarms in the window
        self._moved: dict[str, str] = {}  # stream -> direction of its last corroborated alarm
        self._taken: int | None = None  # step of the last alarm taken after corroboration (or abrupt)
        self.held = 0  # alarms held for want of corroboration
        self._habituated: set[tuple[str, str]] = set()  # (stream, detector): urgent alarms whose evaluation showed
        #                                                   no change
        self._last_summary: dict | None = None  # the tracked metric at the last evaluation learned from

    def admit(self, alarm, ctx: Context) -> bool:
        """Whether ``alarm`` counts now (False: held, waiting for another stream to agree).  Urgent alarms
        always count; with ``corroborate`` 1 every alarm does."""
        quiet = self.quiet(alarm)
        if not quiet and (self.corroborate <= 1 or alarm.detector in self.urgent_detectors):
            return True
        step, stream, direction = ctx.step, alarm.stream, alarm.direction
        stride = ctx.stride if ctx.stride > 1 else 1
        window = self.corroborate_steps * stride
        if direction is not None and self._moved.get(stream) not in (None, direction):
            # The stream moves back against a change that was taken (a recovery after a collapse): the
            # change is known, its undoing needs no second witness.
            del self._moved[stream]
            return True
        if self._taken is not None and 0 <= step - self._taken <= window:
            # Soon after a change was taken: another witness of it (absorbed by the cooldown), remembered so
            # that the stream's move back later (a recovery) is recognised.
            if direction is not None:
                self._moved[stream] = direction
            return True
        keep = [r for r in self._recent if step - r[1] <= window and r[0] != stream]
        keep.append((stream, step, direction))
        need = self.corroborate if ctx.streams is None else max(1, min(self.corroborate, ctx.streams))
        location = alarm.location
        abrupt = (self.abrupt_steps is not None and location is not None and not quiet
                  and alarm.step - location <= self.abrupt_steps * stride)
        if abrupt or len({r[0] for r in keep}) >= need:
            # Taken: an abrupt shift (the detector crossed its threshold within a few steps of the change),
            # or enough streams agree.
            self._recent = []
            self._taken = step
            self._moved.update({r[0]: r[2] for r in keep if r[2] is not None})
            return True
        self._recent = keep
        self.held += 1
        return False

    def quiet(self, alarm) -> bool:
        """An urgent detector's alarm on a stream habituated to that detector's alarms: it waits for another stream
        and widens nothing.  (Of the pair: a stuck alarm whose evaluation showed nothing held the stream's later
        NaN, which then brought no evaluation; a probe.)"""
        return (alarm.stream, alarm.detector) in self._habituated and alarm.detector in self.urgent_detectors

    def learn(self, result) -> None:
        """What the evaluation of ``result.step`` showed (synchronous: from :meth:`on_eval`; asynchronous: when
        its result comes back): habituate the streams whose urgent alarms brought it when the tracked metric did
        not change; when it did, un-habituate every stream."""
        found = primary_metric(result, self.metric) if result is not None and result.metrics else None
        if found is None:
            return
        name, cur = found
        streams = [s for s, at in self._last_urgent_eval.items() if at == result.step]
        if streams and self.habituate:
            p = change_p(result, name, cur, self._last_summary)
            if p == p and p >= self.significance:
                self._habituated.update((s, self._urgent_detector.get(s, d)) for s in streams
                                        for d in ((self._urgent_detector[s],) if s in self._urgent_detector
                                                  else self.urgent_detectors))
            elif p == p:  # a change: what was learned of every stream no longer holds (a habituated grad_norm
                self._habituated.clear()  # that goes NaN beside the dying loss was not undone; found in review)
        self._last_summary = remembered(cur)

    def _cooling(self, last: int | None, step: int) -> bool:
        return last is not None and step - last < self.cooldown_steps

    def on_alarm(self, alarm, ctx: Context) -> None:
        # (a habituated stream's alarm that was admitted, another stream agreeing, is urgent as ever: the run may be
        # dying, and the evaluation it brings may undo the habituation; found in review)
        urgent = alarm.detector in self.urgent_detectors
        if urgent:
            # Its own cooldown per stream (a stream stuck at NaN does not evaluate at every step); an urgent detector
            # other than nonfinite shares one across its streams too: one verifier scoring everything 0 freezes the
            # reward, its spread, the loss and the grad norm a few steps apart, and each stuck alarm bought an
            # evaluation of its own, over budget, of the same weights (5 in 40 steps; a probe).  (A NaN on one stream
            # and then on another still brings each its evaluation.)
            cooling = self._cooling(self._last_urgent_eval.get(alarm.stream), ctx.step) or (
                alarm.detector != "nonfinite" and self._cooling(self._last_urgent_by.get(alarm.detector), ctx.step))
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
            for stream, detector, _, urgent in self._pending:
                if urgent:
                    self._last_urgent_eval[stream] = ctx.step
                    self._urgent_detector[stream] = detector
                    if detector != "nonfinite":
                        self._last_urgent_by[detector] = ctx.step
            self._answered[ctx.step] = [(tuple(p), tuple(p) in self._retried) for p in self._pending]
            for old in sorted(self._answered)[:-_ANSWERED_KEPT]:
                del self._answered[old]
        self._pending = []
        self._retried = []
        self.learn(result)

    def settle(self, step: int, failed: bool) -> bool:
        """The evaluation of ``step`` (the one that answered the alarms pending then) finished; when it
        ``failed``, its alarms are pending again, once: the next evaluation is brought forward for them, and a
        second failure drops them (a transient error in the evaluation an alarm brought threw the alarm away,
        and the next evaluation was 56 steps later; found by a new user).  True when they were put back."""
        answered = self._answered.pop(step, None)
        # (each alarm once: one that was a retry already is dropped, one that came with it is not; found in review)
        alarms = [a for a, retried in (answered or ()) if not retried] if failed else []
        if not alarms:
            return False
        self._pending = alarms + [p for p in self._pending if tuple(p) not in alarms]
        self._retried = self._retried + [a for a in alarms if a not in self._retried]
        return True

    @property
    def pending(self) -> bool:
        return bool(self._pending)

    def urgent_streams_at(self, step: int) -> list[str]:
        """The streams whose urgent alarms brought the evaluation of ``step`` (the same on every rank)."""
        return [stream for stream, at in self._last_urgent_eval.items() if at == step]

    def state_dict(self) -> dict:
        return {"pending": [list(p) for p in self._pending], "last_alarm_eval": self._last_alarm_eval,
                "last_urgent_eval": dict(self._last_urgent_eval), "urgent_detector": dict(self._urgent_detector),
                "last_urgent_by": dict(self._last_urgent_by), "absorbed": self.absorbed,
                "recent": [list(r) for r in self._recent], "moved": dict(self._moved), "taken": self._taken,
                "held": self.held, "retried": [list(a) for a in self._retried],
                "answered": {str(k): [[list(a), r] for a, r in v] for k, v in self._answered.items()},
                "habituated": [list(p) for p in sorted(self._habituated)], "last_summary": self._last_summary}

    def load_state_dict(self, sd: Mapping) -> None:
        self._pending = [tuple(p) for p in sd.get("pending", [])]
        last = sd.get("last_alarm_eval")
        self._last_alarm_eval = None if last is None else int(last)
        self._last_urgent_eval = {str(k): int(v) for k, v in sd.get("last_urgent_eval", {}).items()}
        self._urgent_detector = {str(k): str(v) for k, v in sd.get("urgent_detector", {}).items()}
        self._last_urgent_by = {str(k): int(v) for k, v in sd.get("last_urgent_by", {}).items()}
        self.absorbed = int(sd.get("absorbed", 0))
        self._recent = [(str(r[0]), int(r[1]), None if r[2] is None else str(r[2])) for r in sd.get("recent", [])]
        self._moved = {str(k): str(v) for k, v in sd.get("moved", {}).items()}
        taken = sd.get("taken")
        self._taken = None if taken is None else int(taken)
        self.held = int(sd.get("held", 0))
        try:
            self._answered = {int(k): [(tuple(a), bool(r)) for a, r in v] for k, v in sd.get("answered", {}).items()}
        except (TypeError, ValueError):  # (a state of this session's first format, never released: no retry)
            self._answered = {}
        self._retried = [tuple(a) for a in sd.get("retried", [])]
        habituated = sd.get("habituated", [])
        if isinstance(habituated, (str, bytes)) or not isinstance(habituated, (list, tuple, set)):
            raise TypeError(f"habituated: a list of [stream, detector] pairs, got {type(habituated).__name__}")
        # (a state from before the pairs: a stream name, habituated to every urgent detector as it then was)
        self._habituated = {(str(x), d) for x in habituated if isinstance(x, str) for d in self.urgent_detectors}
        self._habituated |= {(str(x[0]), str(x[1])) for x in habituated
                             if isinstance(x, (list, tuple)) and len(x) == 2}
        self._last_summary = loaded_summary(sd.get("last_summary"))

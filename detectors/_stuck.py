"""``stuck``: a stream that repeats one exact value for longer than its own history makes plausible."""

from __future__ import annotations

import collections
import itertools
import math
import operator

from adaptive_eval.detectors._base import Alarm, Detector, check_arl0, check_int

__all__ = ["Stuck"]

_NEVER = 2**62  # a run length no run reaches (plain int: state_dict stays JSON-able)


class Stuck(Detector):
    """Alarm when the stream has held one exact value for a run its own history makes implausible.

    A verifier that returns 0 for every answer, a reward pinned at its maximum, a response length pinned at
    ``max_new_tokens``, a loss that stopped moving because the parameters are frozen: the stream goes
    *constant*, which a level detector misses when the constant lies within the noise (a GRPO batch of 8 whose
    mean reward falls from 0.3 to exactly 0.0 is a drop of 1.3 sd).  Repeats are judged against the stream's own
    history, so a stream that repeats by nature (a reward of a few possible values, a loss logged only every
    fourth call) learns how often it does.

    The test: from the last ``window`` values before the current run, the chance that a value ``v`` repeats is
    taken as the larger of its share of those values (``(occurrences + 1) / (n + 1)``: what i.i.d. values repeat
    with) and its own repeat rate, ``(repeats of v + 2 q) / (occurrences of v + 2)``, shrunk towards the stream's
    pooled repeat rate ``q = (repeats + 1) / (transitions + 2)`` (a stream logged every fourth call repeats more
    than its values' shares say).  A run of ``v`` alarms at the length ``r`` where ``q_v ** (r - 1) <= 1 / arl0``
    (and ``r >= min_run``): with values that repeat as in their history, a run begins at most once a step and
    lasts that long with probability at most ``1 / arl0``, so false alarms come at most once in ``arl0`` steps.
    A float stream that never repeated alarms after ``min_run`` equal values; a 0/1 stream half ones after 16.

    One alarm per run, located at the run's first value, with no direction; a different value re-arms it.  A
    run that begins before ``warmup`` values have been seen never alarms (a KL of exactly 0 before the first
    update, a stream constant from the start).  NaN and inf are ignored (neither a repeat nor a break).

    Parameters
    ----------
    arl0
        In-control average run length: expected steps between false alarms on a stream whose values repeat
        as in its history.
    window
        Values the repeat rates are counted over.
    min_run
        No alarm on a run shorter than this, however rare its repeats.
    warmup
        Values seen before a run can alarm.
    stream
        Name of the watched stream.

    Examples
    --------
    >>> import random
    >>> rng = random.Random(0)
    >>> det = Stuck(stream="train/reward")
    >>> values = [rng.choice([0.0, 0.125, 0.25, 0.375, 0.5]) for _ in range(100)] + [0.0] * 30
    >>> [(a.step, a.location) for step, x in enumerate(values) if (a := det.update(x, step))]
    [(108, 100)]
    """

    name = "stuck"
    _state = ("_values", "_last", "_run", "_start", "_run_start", "_need_at", "_judged")

    def __init__(self, arl0: float = 30000.0, window: int = 500, min_run: int = 4, warmup: int = 30,
                 stream: str = ""):
        owner = self.name
        self.arl0 = check_arl0(owner, arl0)
        self.window = check_int(owner, "window", window, 10, 1_000_000)
        self.min_run = check_int(owner, "min_run", min_run, 2, 1_000_000)
        self.warmup = check_int(owner, "warmup", warmup, 2, self.window)
        self.stream = stream
        self._log_arl = math.log(self.arl0)
        self._reset()

    def _reset(self) -> None:
        self._values: collections.deque = collections.deque(maxlen=self.window)
        self._last: float | None = None
        self._run = 0  # values in the current run (counted from its first repeat on)
        self._start = -1  # the step of the last new value: the current run's first
        self._run_start = -1  # the run that _run counts (its first step)
        self._need_at = self.min_run  # the run length of the next look (the first: min_run)
        self._judged = False  # this run's alarm length is known (_need_at holds it)
        self._q: float | None = None  # that run's repeat chance (for the message)

    @property
    def armed(self) -> bool:
        return len(self._values) - self._current_run() >= self.warmup

    def _current_run(self) -> int:
        """The length of the run the last value is in (1: it is new)."""
        return self._run if self._run_start == self._start else min(1, len(self._values))

    def update(self, value: float, step: int) -> Alarm | None:
        if type(value) is not float:
            value = self._float(value)
        if value - value != 0.0:  # NaN or inf: ignored
            return None
        return self._update_finite(value, step)

    def _finite_path(self):
        return self._update_finite

    def _update_finite(self, value: float, step: int) -> Alarm | None:
        self._values.append(value)
        if value != self._last:  # most steps: a new value
            self._last = value
            self._start = step
            return None
        return self._repeated(value, step)

    def _chain(self, then):
        """:meth:`_update_finite` followed by ``then`` (the next detector's finite path) in one call: the per-step
        hot path of ``AdaptiveEvaluator.observe`` for a stream this detector watches before another (the default
        preset's stuck, then cusum: 0.15 us a stream less than two calls).  It returns the alarm of either, or
        both in a list when both alarm at once."""
        def update(value: float, step: int):
            self._values.append(value)
            if value != self._last:
                self._last = value
                self._start = step
                return then(value, step)
            alarm, other = self._repeated(value, step), then(value, step)
            return other if alarm is None else alarm if other is None else [alarm, other]

        return update

    def _repeated(self, value: float, step: int) -> Alarm | None:
        """The update of a value equal to the one before it."""
        if self._run_start != self._start:  # the first repeat of a new run
            self._run_start = self._start
            self._run = 2
            self._need_at = self.min_run
            self._judged = False
            self._q = None
        else:
            self._run += 1
        if self._run >= self._need_at:
            return self._judge(value, step)
        return None

    def repeat_rates(self, value: float) -> tuple[float, float, int]:
        """``(q_v, q, n)``: the chance taken that ``value`` repeats, the pooled repeat rate, and the number of
        values before the current run that they come from (the current run, when ``value`` is its value, is
        left out)."""
        run = self._current_run() if value == self._last else 0
        values = list(self._values)
        if run:
            del values[-run:]
        n = len(values)
        after = itertools.islice(values, 1, None)
        q = (sum(map(operator.eq, values, after)) + 1.0) / (max(n - 1, 0) + 2.0)
        is_v = list(map(value.__eq__, values))
        repeats_v = sum(map(operator.and_, is_v, itertools.islice(is_v, 1, None)))
        seen = sum(is_v)
        # (the last value before the run differs from it: each of v's occurrences there has a successor).  At
        # least v's share of the values: what i.i.d. values repeat with, and steadier than v's few transitions (a
        # batch mean of 0.25 seen 14 times in 58 without a repeat read 0.013, and a run of 4 alarmed; a test)
        q_v = max((repeats_v + 2.0 * q) / (seen + 2.0), (seen + 1.0) / (n + 1.0))
        return q_v, q, n

    def _judge(self, value: float, step: int) -> Alarm | None:
        run = self._run
        if not self._judged:
            self._judged = True
            q_v, q, n = self.repeat_rates(value)
            if n < self.warmup:
                self._need_at = _NEVER
                return None
            need = 1 + math.ceil(self._log_arl / -math.log(q_v))
            self._need_at = max(need, self.min_run)
            self._q = q_v
            if run < self._need_at:
                return None
        self._need_at = _NEVER  # one alarm per run
        q_v = self._q
        if q_v is None:  # (a state loaded mid-run: the rate again, from the loaded window)
            q_v = self.repeat_rates(value)[0]
        return Alarm(step, self.name, self.stream, None, self._start,
                     f"{self.stream or 'stream'} has been exactly {value:.6g} for {run} values since step "
                     f"{self._start} (before, {value:.6g} repeated with chance {q_v:.2g}: a run this long once in "
                     f"more than {self.arl0:g} steps)")

    def _after_load(self) -> None:
        self._q = None

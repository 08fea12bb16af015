"""``stuck``: a stream that repeats one exact value for longer than its own history makes plausible."""

from __future__ import annotations

import collections
import itertools
import math

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
    taken as the largest of: its share of those values (``(occurrences + 1) / (n + 1)``: what i.i.d. values
    repeat with); its own repeat rate, ``(repeats of v + 2 q) / (occurrences of v + 2)``, shrunk towards the
    stream's pooled repeat rate ``q = (repeats + 1) / (transitions + 2)`` (a stream logged every fourth call
    repeats more than its values' shares say); and ``q`` itself, over the window and over its last 50 values (a
    bf16 loss drifting down repeats its few current values as often as the stream repeats anything, however
    rarely the window saw them: read by their shares, 33 false alarms in 50,000 steps; a review).  A run of ``v``
    alarms at the length ``r`` where ``q_v ** (r - 1) <= 1 / arl0`` (and ``r >= min_run``): with values that
    repeat as in their history, a run begins at most once a step and lasts that long with probability at most
    ``1 / arl0``, so false alarms come at most once in ``arl0`` steps.  A float stream that never repeated
    alarms after ``min_run`` equal values; a 0/1 stream half ones after 16.

    Cost: a float stream's update is an append and a comparison (~0.1 us); a stream that repeats by nature
    counts its window (C-level ``deque.count``) at each run that reaches ``min_run``, a few microseconds a step.

    One alarm per run, located at the run's first value, with no direction; a different value re-arms it.  A
    run that begins before ``warmup`` values have been seen never alarms (a KL of exactly 0 before the first
    update, a stream constant from the start).  NaN and inf are ignored (neither a repeat nor a break).

    Parameters
    ----------
    arl0
        In-control average run length: expected steps between false alarms on a stream whose values repeat
        as in its history.
    window
        Values the repeat rates are counted over (the cost of a count grows with it).
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
    [(109, 100)]
    """

    name = "stuck"
    sees_level = False
    _state = ("_values", "_reps", "_last", "_run", "_start", "_need_at", "_q")
    _RECENT = 50  # the values of the recent pooled repeat rate

    def __init__(self, arl0: float = 100000.0, window: int = 200, min_run: int = 4, warmup: int = 30,
                 stream: str = ""):
        owner = self.name
        self.arl0 = check_arl0(owner, arl0)
        self.window = check_int(owner, "window", window, 10, 1_000_000)
        self.min_run = check_int(owner, "min_run", min_run, 2, max(self.window - 2, 2))
        # (a run is judged on the window's values before it, at most window - min_run: a warmup above that was
        # accepted and never alarmed; a probe)
        most = self.window - self.min_run
        warmup = check_int(owner, "warmup", warmup, 2, 1_000_000)
        if warmup > most:
            raise ValueError(f"{owner}: warmup must be an integer in [2, {most}] (window {self.window} - min_run "
                             f"{self.min_run}: the values a run is judged on), got {warmup!r}")
        self.warmup = warmup
        self.stream = stream
        self._log_arl = math.log(self.arl0)
        self._reset()

    def _reset(self) -> None:
        self._values: collections.deque = collections.deque(maxlen=self.window)
        # the value at each position that repeats the one before it, else None: its count(v) is v's repeats
        self._reps: collections.deque = collections.deque(maxlen=self.window)
        self._last: float | None = None
        self._run = 0  # values in the current run (a new value: 1)
        self._start = -1  # the step of the current run's first value
        self._need_at = self.min_run  # the run length of the next look (the first: min_run)
        self._q: float | None = None  # the current run's repeat chance, once judged

    @property
    def armed(self) -> bool:
        return len(self._values) - self._run >= self.warmup

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
            self._reps.append(None)
            self._last = value
            self._start = step
            self._run = 1  # (a run is counted in values, not told by its step: several calls at one step are
            return None    # several values; a review)
        return self._repeated(value, step)

    def _repeated(self, value: float, step: int) -> Alarm | None:
        """The update of a value equal to the one before it (already in the window)."""
        self._reps.append(value)
        run = self._run = self._run + 1
        if run == 2:  # the first repeat of a new run
            self._need_at = self.min_run
            self._q = None
        if run >= self._need_at:
            return self._judge(value, step)
        return None

    def repeat_rates(self, value: float) -> tuple[float, float, int]:
        """``(q_v, q, n)``: the chance taken that ``value`` repeats, the pooled repeat rate, and the number of
        values before the current run that they come from (the current run, when ``value`` is its value, is
        left out)."""
        run = self._run if value == self._last else 0
        values, reps = self._values, self._reps
        n = max(len(values) - run, 0)
        inside = max(run - 1, 0)  # the run's own repeats, at the end of reps
        repeats = len(reps) - reps.count(None) - inside
        q = (repeats + 1.0) / (max(n - 1, 0) + 2.0)
        lo = max(n - self._RECENT, 0)
        recent = sum(x is not None for x in itertools.islice(reps, lo + 1, n))
        q_recent = (recent + 1.0) / (max(n - lo - 1, 0) + 2.0)
        seen = max(values.count(value) - run, 0)
        # (the last value before the run differs from it: each of v's occurrences there has a successor)
        repeats_v = max(reps.count(value) - inside, 0)
        q_v = max((repeats_v + 2.0 * q) / (seen + 2.0), (seen + 1.0) / (n + 1.0), q, q_recent)
        return q_v, q, n

    def _judge(self, value: float, step: int) -> Alarm | None:
        run = self._run
        if self._q is None:
            q_v, _, n = self.repeat_rates(value)
            if n < self.warmup:
                self._need_at = _NEVER
                return None
            self._q = q_v
            need = 1 + math.ceil(self._log_arl / -math.log(q_v))
            self._need_at = max(need, self.min_run)
            if run < self._need_at:
                return None
        self._need_at = _NEVER  # one alarm per run
        return Alarm(step, self.name, self.stream, None, self._start,
                     f"{self.stream or 'stream'} has been exactly {value!r} for {run} values since step "
                     f"{self._start} (a value repeating with chance {self._q:.2g}, as the stream's history has it: a "
                     f"run this long once in more than {self.arl0:g} steps)")

"""``spike``: one-step outliers against a rolling robust level."""

from __future__ import annotations

import collections
import math
from bisect import bisect_left, bisect_right, insort

from adaptive_eval.detectors._base import (
    _DIRECTIONS,
    Alarm,
    Detector,
    check_choice,
    check_float,
    check_in_control,
    check_int,
    tiny_scale,
)

__all__ = ["Spike"]

_INF = math.inf
_IQR_TO_SD = 1.0 / 1.3489795003921634  # IQR of the standard normal


def _recurring_gap(s: list[float]) -> float:
    """The smallest gap between two distinct values of the sorted ``s`` that each occur at least twice (0 when
    fewer than two values recur)."""
    gap, last, i, n = math.inf, None, 0, len(s)
    while i < n:
        j = i + 1
        while j < n and s[j] == s[i]:
            j += 1
        if j - i >= 2:
            if last is not None and s[i] - last < gap:
                gap = s[i] - last
            last = s[i]
        i = j
    return gap if math.isfinite(gap) else 0.0


class Spike(Detector):
    """Flag one-step outliers: a value far from the rolling median of the last ``window`` values.

    The level is the median of the window and the scale its interquartile range / 1.349 (both robust, and
    O(1) to read from the sorted window).  A value more than ``threshold`` scales from the level is a
    spike.  Spikes enter the window like any value, which the median and IQR shrug off, so a spike is not
    taken for a level change; a run of consecutive outliers on the same side raises one alarm, at its
    first value (a genuine level shift thus gives one alarm and is absorbed within ``window / 2`` steps).
    OLMo's stability monitor flags mean + 6 sigma over 128 values, hence the defaults; ``max_ratio``
    adds Megatron's rule (a value more than ``max_ratio`` times the largest magnitude in the window).

    Calibration: ``arl0`` instead of ``threshold`` assumes i.i.d. in-control values (standard normal;
    level and scale do not matter) or a block bootstrap of ``in_control``.  Real loss curves have heavy
    tails, so a threshold calibrated on normal data alarms far more often on them: the default is the fixed
    ``threshold=6`` (about one alarm per 200 steps of a real pre-training loss), not an ``arl0``.

    Parameters
    ----------
    window
        Number of recent values the level and scale come from.
    threshold
        Distance from the rolling median, in robust standard deviations, beyond which a value is a spike.
    arl0
        In-control average run length to calibrate ``threshold`` for (instead of ``threshold``).
    direction
        ``"both"``, ``"up"`` or ``"down"``.
    min_samples
        No alarm before the window holds this many values.
    max_ratio
        Also alarm when ``|value| > max_ratio * max|window|`` (None: off).
    in_control, block_size
        Optional in-control segment (and bootstrap block length) to calibrate ``arl0`` on.
    stream
        Name of the watched stream.

    Examples
    --------
    >>> import random
    >>> rng = random.Random(3)
    >>> det = Spike(stream="train/loss")
    >>> values = [rng.gauss(3.0, 0.05) for _ in range(200)]
    >>> values[150] = 5.7
    >>> [(a.step, a.direction) for step, x in enumerate(values) if (a := det.update(x, step))]
    [(150, 'up')]
    """

    name = "spike"
    _threshold_param = "threshold"
    _state = ("_ring", "_run", "_hush")
    _default_threshold = 6.0
    _table_max_arl = 30000.0
    _calibration_runs = 300
    _simulated_max_arl = 2000.0  # 300 runs x 6,000 updates of ~1.1 us
    _table_runs = 800

    def __init__(self, window: int = 128, threshold: float | None = None, arl0: float | None = None,
                 direction: str = "both", min_samples: int = 32, max_ratio: float | None = None,
                 in_control=None, block_size: int | None = None, stream: str = ""):
        owner = self.name
        self.window = check_int(owner, "window", window, 8, 1_000_000)
        self.threshold = threshold
        self.arl0 = arl0
        self.direction = check_choice(owner, "direction", direction, _DIRECTIONS)
        self.min_samples = check_int(owner, "min_samples", min_samples, 8, self.window)
        self.max_ratio = None if max_ratio is None else check_float(owner, "max_ratio", max_ratio, 1.0, 1e12,
                                                                     lo_open=True)
        self.in_control, self.block_size = check_in_control(owner, in_control, block_size)
        self.stream = stream
        check = lambda v: check_float(owner, "threshold", v, 0.0, 1e6, lo_open=True)  # noqa: E731
        if threshold is None and arl0 is None:
            h = self._default_threshold
        else:
            h = self._threshold_from(threshold, arl0, None, check)
        self.threshold_ = h
        self._reset()

    @classmethod
    def _table_variants(cls) -> list[dict]:
        return [{}, {"direction": "up"}, {"direction": "down"}]

    def _calibration_params(self) -> dict:
        return {"window": self.window, "direction": self.direction, "min_samples": self.min_samples,
                "max_ratio": self.max_ratio}

    @property
    def threshold_(self) -> float:
        return self._h

    @threshold_.setter
    def threshold_(self, h: float) -> None:
        self._h = h
        self._hi = h if self.direction != "down" else _INF
        self._lo = -h if self.direction != "up" else -_INF

    def _reset(self) -> None:
        self._ring: collections.deque = collections.deque(maxlen=self.window)
        self._sorted: list[float] = []
        self._run = 0  # +1 / -1 while consecutive outliers above / below continue
        self._z = 0.0
        # While the window is mostly one value (its IQR 0), no new alarm before this step: a stream leaving an exact
        # constant (a KL of 0 before the first update) read every value of its noise as a spike, 24 alarms in 80
        # steps for one change, until the constant left the window (a probe)
        self._hush = -1

    def _after_load(self) -> None:
        self._sorted = sorted(self._ring)

    def _statistic(self) -> float:
        z = self._z
        if self.direction == "both":
            return z if z > 0.0 else -z
        return z if self.direction == "up" else -z

    def _level_scale(self) -> tuple[float, float]:
        s = self._sorted
        n = len(s)
        level = (s[(n - 1) >> 1] + s[n >> 1]) * 0.5
        scale = (s[(3 * n) >> 2] - s[n >> 2]) * _IQR_TO_SD
        if scale > 0.0:
            return level, scale
        scale = 1.2533141373155001 * sum(abs(v - level) for v in s) / n
        # A quantized stream (counts, or float64's steps of 0.125 at 1e15): more than half the window is one value
        # and the mean deviation is below the spacing of the values, so an ordinary neighbour of the mode read as a
        # spike (Poisson(0.3): 30 alarms in 3,000; found in review).  The scale is at least the smallest gap between
        # two values that each recur in the window; a value seen once (a spike of 2000 in a stream at 512) sets none.
        gap = _recurring_gap(s)
        if gap > scale:
            scale = gap
        return level, scale if scale > 0.0 else tiny_scale(level)

    def update(self, value: float, step: int) -> Alarm | None:
        if type(value) is not float:
            value = self._float(value)
        if value - value != 0.0:  # NaN or inf: ignored
            return None
        s = self._sorted
        n = len(s)
        alarm = None
        if n >= self.min_samples:
            level = (s[(n - 1) >> 1] + s[n >> 1]) * 0.5
            scale = (s[(3 * n) >> 2] - s[n >> 2]) * _IQR_TO_SD
            if not scale > 0.0:
                level, scale = self._level_scale()
            z = self._z = (value - level) / scale
            hushed = False
            if (z > self._hi or z < self._lo) and (bisect_right(s, level) - bisect_left(s, level)) * 4 >= n:
                # an outlier of a window a quarter or more of which is one value (the level): a stream leaving an
                # exact constant; its first alarm hushes the next ones for half a window, and each outlier in it on
                hushed = step < self._hush
                if hushed or self._run != (1 if z > 0 else -1):  # (hushed, or about to alarm)
                    self._hush = step + self.window // 2
            if z > self._hi:
                if self._run != 1 and not hushed:
                    alarm = self._alarm(step, "up", value, level, z)
                self._run = 1
            elif z < self._lo:
                if self._run != -1 and not hushed:
                    alarm = self._alarm(step, "down", value, level, z)
                self._run = -1
            elif self._run:
                self._run = 0
            if self.max_ratio is not None and alarm is None and self._run != 1:
                top = s[-1] if s[-1] > -s[0] else -s[0]
                if (value if value > 0.0 else -value) > self.max_ratio * top and top > 0.0:
                    alarm = self._alarm(step, "up", value, level, z, ratio=True)
                    self._run = 1
        ring = self._ring
        if len(ring) == self.window:
            del s[bisect_left(s, ring[0])]
        ring.append(value)
        insort(s, value)
        return alarm

    def _alarm(self, step, direction, value, level, z, ratio=False) -> Alarm:
        why = (f"|value| > {self.max_ratio:g} x max|recent|" if ratio
               else f"{z:+.1f} robust sd from the rolling median {level:.6g}")
        return Alarm(step, self.name, self.stream, direction, step,
                     f"{self.stream or 'stream'}: spike {direction} to {value:.6g} at step {step} ({why})")

"""Thin adapters over river's drift detectors: ``page_hinkley``, ``adwin``, ``kswin``.

river's detectors are built for classification error streams; their defaults suit that use poorly (a
Page-Hinkley threshold of 50 in the stream's own units, ADWIN checking only every 32 values, KSWIN seeded
from the clock).  The adapters expose what matters, give the ``update(value, step) -> Alarm`` contract,
calibrate to ``arl0``, and carry river's internal state in ``state_dict`` as plain values.
"""

from __future__ import annotations

import base64
import collections
import functools
import math
import warnings
import zlib
from typing import TYPE_CHECKING

import numpy as np

from adaptive_eval.detectors._base import (
    _DIRECTIONS,
    Alarm,
    Detector,
    best_split,
    check_choice,
    check_float,
    check_in_control,
    check_int,
    huge_factor,
    screened_moments,
    t_to_z,
)

if TYPE_CHECKING:
    from river import drift as river_drift

__all__ = ["ADWIN", "KSWIN", "PageHinkley"]


def _drift():
    """``river.drift``, imported when a river detector is first built: importing it also imports river's datasets
    and scikit-learn (about 3 s on the 2-core test machine), which every process that builds only the default
    preset's detectors (a CLI call, a spawned rank) paid for nothing."""
    from river import drift

    return drift


_INF = math.inf
# ADWIN sees values beyond this as this (an explosion to 1e200 is still a jump; its squares, summed over a
# window, stay finite).
_ADWIN_MAX = 1e100
_ADWIN_LOCATION_WINDOW = 1024
# Page-Hinkley's scale learns from a value only while the test statistic stays below this (a constant, so the
# in-control path does not depend on the threshold, as calibration requires).
_FREEZE = 3.0


def _num(v: float) -> float | None:
    """A float for JSON: +-inf as None (the only non-finite values river keeps are its initial extremes)."""
    return None if v - v != 0.0 else v


class PageHinkley(Detector):
    """Page-Hinkley test (river's ``PageHinkley``) on standardized values.

    river's test compares each value with the running mean of all values since the last reset and keeps
    the cumulative deviations ``m_T = sum(x_t - mean_t - delta)`` (decayed by the forgetting factor ``alpha``);
    it alarms when ``m_T - min(m)`` (increase) or ``max(m') - m'_T`` (decrease) exceeds ``threshold``.  Here the
    first ``min_instances`` values also fix a scale (screened sd, see ``cusum``) so that ``delta`` and
    ``threshold`` are in standard deviations whatever the stream's units (``standardize=False`` feeds raw
    values, river-style).  As for ``cusum``, the level and scale keep improving over the next values, up to
    ``reference`` in all, while the test statistic stays below 3, with the self-starting (Student-t to
    normal) correction meanwhile: a scale fixed from 30 values alone makes false alarms bunch up early on
    some runs and almost never come on others.  The alarm's ``location`` is the step after the extreme of the cumulative sum (where the excursion began).
    After an alarm the detector re-arms from scratch (river resets; the scale is estimated again).

    Calibration: ``arl0`` instead of ``threshold`` (default ``arl0=5000``), simulated on i.i.d. in-control
    values (standard normal) or a block bootstrap of ``in_control``.  With ``standardize=False`` the
    calibrated threshold assumes unit variance.

    Parameters
    ----------
    delta
        Magnitude of change tolerated (in sd when standardized), like CUSUM's ``k``.
    threshold
        Decision threshold (lambda).
    arl0
        In-control average run length to calibrate ``threshold`` for.
    alpha
        river's forgetting factor for the cumulative sums.  river's default 0.9999 bounds the sums near
        ``-delta / (1 - alpha)`` after about ``1 / (1 - alpha)`` values, after which the test loses its drift
        and false alarms come at a rate no threshold calibrated on shorter runs foresees; the default here
        is 1 (no forgetting, the classical test).
    min_instances
        Values before the first possible alarm (and that estimate the scale).
    reference
        With ``standardize``, the scale is refined until this many values have been seen.
    mode
        ``"both"``, ``"up"`` or ``"down"``.
    standardize
        Divide by the warm-up scale (and subtract the warm-up level) before river sees the value.
    in_control, block_size
        Optional in-control segment (and bootstrap block length) to calibrate ``arl0`` on.
    stream
        Name of the watched stream.

    Examples
    --------
    >>> import random
    >>> rng = random.Random(5)
    >>> det = PageHinkley(arl0=1000, stream="train/loss")
    >>> values = [rng.gauss(2.0, 0.1) for _ in range(300)] + [rng.gauss(2.15, 0.1) for _ in range(100)]
    >>> for step, x in enumerate(values):
    ...     alarm = det.update(x, step)
    ...     if alarm:
    ...         print(alarm.step, alarm.direction, alarm.location)
    308 up 300
    """

    name = "page_hinkley"
    _threshold_param = "threshold"
    _state = ("_warm", "_warm_steps", "_level", "_scale", "_n", "_m2", "_factor", "_learning", "_inc_from",
              "_dec_from", "_inc_new", "_dec_new")
    _default_arl0 = 5000.0
    _table_max_arl = 30000.0
    _calibration_runs = 400
    _simulated_max_arl = 800.0  # 400 runs x 2,400 updates of ~3 us
    _table_runs = 1000

    def __init__(self, delta: float = 0.5, threshold: float | None = None, arl0: float | None = None,
                 alpha: float = 1.0, min_instances: int = 30, reference: int = 500, mode: str = "both",
                 standardize: bool = True, in_control=None, block_size: int | None = None, stream: str = ""):
        owner = self.name
        self.delta = check_float(owner, "delta", delta, 0.0, 1e6)
        self.threshold = threshold
        self.arl0 = arl0
        self.alpha = check_float(owner, "alpha", alpha, 0.0, 1.0, lo_open=True)
        self.min_instances = check_int(owner, "min_instances", min_instances, 3, 1_000_000)
        self.reference = check_int(owner, "reference", reference, self.min_instances, 100_000_000)
        self.mode = check_choice(owner, "mode", mode, _DIRECTIONS)
        if not isinstance(standardize, bool):
            raise ValueError(f"{owner}: standardize must be true or false, got {standardize!r}")
        self.standardize = standardize
        self.in_control, self.block_size = check_in_control(owner, in_control, block_size)
        self.stream = stream
        h = self._threshold_from(threshold, arl0, self._default_arl0,
                                 lambda v: check_float(owner, "threshold", v, 0.0, 1e12, lo_open=True))
        self.threshold_ = h
        self._reset()

    @classmethod
    def _table_variants(cls) -> list[dict]:
        return [{}, {"mode": "up"}, {"mode": "down"}]

    def _calibration_params(self) -> dict:
        return {"delta": self.delta, "alpha": self.alpha, "min_instances": self.min_instances,
                "reference": self.reference, "mode": self.mode, "standardize": self.standardize}

    def _disable_alarms(self) -> None:
        self.threshold_ = _INF
        self._ph.threshold = _INF

    def _new_river(self) -> river_drift.PageHinkley:
        return _drift().PageHinkley(min_instances=self.min_instances, delta=self.delta, threshold=self.threshold_,
                                    alpha=self.alpha, mode=self.mode)

    def _reset(self) -> None:
        self._ph = self._new_river()
        self._warm: list[float] | None = [] if self.standardize else None
        self._warm_steps: list[int] | None = [] if self.standardize else None
        self._level = 0.0
        self._scale = 1.0
        self._inv = 1.0
        self._n = 0
        self._m2 = 0.0
        self._factor = 1.0  # the running variance is kept scaled by it (see huge_factor)
        self._learning = False
        self._inc_from: int | None = None  # where the current excursion above the minimum began
        self._dec_from: int | None = None
        self._inc_new = True  # the last update set a new extreme: the next step starts an excursion
        self._dec_new = True

    def state_dict(self) -> dict:
        sd = super().state_dict()
        ph = self._ph
        sd["river"] = {"drift_detected": ph._drift_detected, "n": ph._x_mean.n, "mean": ph._x_mean._mean,
                       "sum_increase": ph._sum_increase, "sum_decrease": ph._sum_decrease,
                       "min_increase": _num(ph._min_increase), "max_decrease": _num(ph._max_decrease)}
        return sd

    def load_state_dict(self, sd) -> None:
        super().load_state_dict(sd)
        r = sd.get("river")
        if r:
            ph = self._ph
            ph._drift_detected = r["drift_detected"]
            ph._x_mean.n, ph._x_mean._mean = r["n"], r["mean"]
            ph._sum_increase, ph._sum_decrease = r["sum_increase"], r["sum_decrease"]
            ph._min_increase = _INF if r["min_increase"] is None else r["min_increase"]
            ph._max_decrease = -1 if r["max_decrease"] is None else r["max_decrease"]

    def _statistic(self) -> float:
        ph = self._ph
        if ph._x_mean.n < self.min_instances:
            return 0.0
        up = ph._sum_increase - ph._min_increase
        down = ph._max_decrease - ph._sum_decrease
        if self.mode == "up":
            return up
        if self.mode == "down":
            return down
        return up if up > down else down

    def update(self, value: float, step: int) -> Alarm | None:
        if type(value) is not float:
            value = self._float(value)
        if value - value != 0.0:  # NaN or inf: ignored
            return None
        if self._warm is not None:
            return self._warm_up(value, step)
        if self._learning:
            return self._learn(value, step)
        return self._feed((value - self._level) * self._inv, step)

    def _after_load(self) -> None:
        self._inv = 1.0 / self._scale

    def _learn(self, value: float, step: int) -> Alarm | None:
        n = self._n
        z = t_to_z((value - self._level) * self._inv / math.sqrt(1.0 + 1.0 / n), max(n - 1, 2))
        alarm = self._feed(z, step)
        if alarm is not None:
            return alarm
        if self._statistic() < _FREEZE:
            n += 1
            delta = value - self._level
            self._level += delta / n
            f = self._factor
            self._m2 += (delta * f) * ((value - self._level) * f)
            self._n = n
            scale = math.sqrt(self._m2 / (n - 1)) / f if self._m2 > 0.0 else 0.0  # inf - inf: not learnable
            if scale > 0.0:
                self._scale, self._inv = scale, 1.0 / scale
            if n >= self.reference:
                self._learning = False
        return None

    def _feed(self, z: float, step: int) -> Alarm | None:
        ph = self._ph
        ph.update(z)
        if self._inc_new:
            self._inc_from = step
        if self._dec_new:
            self._dec_from = step
        self._inc_new = ph._sum_increase <= ph._min_increase
        self._dec_new = ph._sum_decrease >= ph._max_decrease
        if ph._drift_detected:
            return self._alarm(step)
        return None

    def _warm_up(self, value: float, step: int) -> Alarm | None:
        warm = self._warm
        warm.append(value)
        steps = self._warm_steps
        if steps is None:  # (a state from before the warm-up's steps were kept)
            steps = self._warm_steps = []
        steps.append(step)
        if len(warm) < self.min_instances:
            return None
        self._level, self._scale, self._n = screened_moments(warm)
        f = self._factor = huge_factor(self._scale)
        self._m2 = (self._scale * f) * (self._scale * f) * (self._n - 1)
        self._inv = 1.0 / self._scale
        self._learning = self._n < self.reference
        self._warm = self._warm_steps = None
        # (a state from before the warm-up's steps were kept holds fewer steps than values: the first stands in)
        steps = [steps[0]] * (len(warm) - len(steps)) + steps
        alarm = None
        for v, s in zip(warm, steps):  # river sees the warm-up values too (standardized), so it is armed at once,
            # each at its own step, so that an excursion begun in the warm-up is located where it began
            alarm = self._feed((v - self._level) * self._inv, s) or alarm
        return alarm

    def _alarm(self, step: int) -> Alarm:
        ph = self._ph
        up = ph._sum_increase - ph._min_increase
        down = ph._max_decrease - ph._sum_decrease
        is_up = self.mode == "up" or (self.mode == "both" and up > self.threshold_ and up >= down)
        direction = "up" if is_up else "down"
        location = self._inc_from if is_up else self._dec_from
        stat = up if is_up else down
        self._reset()
        return Alarm(step, self.name, self.stream, direction, location,
                     f"{self.stream or 'stream'}: level {direction} (Page-Hinkley {stat:.2f} > {self.threshold_:.2f}), "
                     f"change near step {location}")


class ADWIN(Detector):
    """ADWIN (river's ``ADWIN``) on standardized values: adaptive windowing, alarms when two sub-windows have
    different means.

    ADWIN keeps a window of recent values (compressed into exponential buckets) and drops its older part
    when the means of the two parts differ by more than a bound that holds with confidence ``delta``.
    The alarm's ``location`` is the least-squares split of the values since the last alarm (the last 1,024
    at most) and its direction compares the means on either side; the detector then restarts.

    river's bound, ``sqrt(2 / m var ln(2 / delta')) + 2 / (3 m) ln(2 / delta')``, has a second term in the
    stream's own units that assumes values of order 1: on raw values a stream in the thousands alarmed 5x
    as often as one of order 1, and one in the thousandths was never alarmed on.  So, as for
    ``page_hinkley``, the first ``warmup`` values fix a level and a scale (screened mean and sd, see
    ``cusum``) and river sees ``(x - level) / scale``, clipped to ``+-clip`` (the warm-up values too, once
    the scale is known, so it is armed at once); the alarms are the same whatever the stream's units
    (``standardize=False`` feeds raw values, river-style).  The clip keeps one wild value from inflating
    the window's variance for good: a single value of 1,000 sd among the first couple of hundred used to
    blind ADWIN to every later change.  After an alarm the scale is estimated again.

    ``clock`` is how often (in values) the cut is checked: river's default of 32 delays detection by up to
    32 steps, so the default here is 1 (about 0.5 us per update).

    Calibration: ``arl0`` instead of ``delta`` (default ``arl0=5000``), by bisection on ``delta`` with
    simulated i.i.d. standard normal in-control data or a block bootstrap of ``in_control``.  ADWIN's bound
    is conservative: ``delta=1`` (the largest allowed) still gives an ARL of a few hundred, so smaller
    ``arl0`` cannot be reached and are served with ``delta=1``.  With ``standardize=False`` the calibrated
    ``delta`` assumes unit variance.

    Parameters
    ----------
    delta
        Confidence of the cut test (smaller: fewer false alarms).
    arl0
        In-control average run length to calibrate ``delta`` for.
    warmup
        Values that estimate the level and scale (with ``standardize``).
    clip
        Standardized values are clipped to ``[-clip, clip]`` (None: no clipping; not used without
        ``standardize``).
    standardize
        Subtract the warm-up level and divide by the warm-up scale before river sees the value.
    clock, max_buckets, min_window_length, grace_period
        river's parameters.
    in_control, block_size
        Optional in-control segment (and bootstrap block length) to calibrate ``arl0`` on.
    stream
        Name of the watched stream.

    Examples
    --------
    A drop of 3 sd at step 300 is caught 2 steps later.  At ``arl0=1000`` about one false alarm comes per
    1,000 in-control values: here one at step 104, on a run of high values from step 90 (ADWIN on raw values
    of sd 0.1 saw neither so soon: 310 for the drop, nothing at 104).

    >>> import random
    >>> rng = random.Random(2)
    >>> det = ADWIN(arl0=1000, stream="train/reward")
    >>> values = [rng.gauss(0.6, 0.1) for _ in range(300)] + [rng.gauss(0.3, 0.1) for _ in range(100)]
    >>> for step, x in enumerate(values):
    ...     alarm = det.update(x, step)
    ...     if alarm:
    ...         print(alarm.step, alarm.direction, alarm.location)
    104 up 90
    302 down 300
    """

    name = "adwin"
    _threshold_param = "delta"
    _calibration_method = "bisection"
    _stat_range = (0.0, 30.0)  # -log(delta): delta from 1 down to 1e-13
    _state = ("_warm", "_level", "_scale", "_n", "_recent", "_recent_steps")
    _default_arl0 = 5000.0
    _dummy_threshold = 0.002
    _table_max_arl = 20000.0
    _calibration_runs = 100

    def __init__(self, delta: float | None = None, arl0: float | None = None, warmup: int = 30,
                 clip: float | None = 8.0, standardize: bool = True, clock: int = 1, max_buckets: int = 5,
                 min_window_length: int = 5, grace_period: int = 10, in_control=None, block_size: int | None = None,
                 stream: str = ""):
        owner = self.name
        self.delta = delta
        self.arl0 = arl0
        self.warmup = check_int(owner, "warmup", warmup, 3, 1_000_000)
        self.clip = None if clip is None else check_float(owner, "clip", clip, 0.0, 1e6, lo_open=True)
        if not isinstance(standardize, bool):
            raise ValueError(f"{owner}: standardize must be true or false, got {standardize!r}")
        self.standardize = standardize
        self.clock = check_int(owner, "clock", clock, 1, 1_000_000)
        self.max_buckets = check_int(owner, "max_buckets", max_buckets, 2, 1000)
        self.min_window_length = check_int(owner, "min_window_length", min_window_length, 1, 1_000_000)
        self.grace_period = check_int(owner, "grace_period", grace_period, 1, 1_000_000)
        self.in_control, self.block_size = check_in_control(owner, in_control, block_size)
        self.stream = stream
        # Standardized values are clipped to +-_clip; raw ones (standardize=False) only clamped to +-_ADWIN_MAX.
        self._clip = _ADWIN_MAX if self.clip is None or not standardize else min(self.clip, _ADWIN_MAX)
        d = self._threshold_from(delta, arl0, self._default_arl0,
                                 lambda v: check_float(owner, "delta", v, 0.0, 1.0, lo_open=True))
        self.delta_ = d
        self._reset()

    @classmethod
    def _table_variants(cls) -> list[dict]:
        return [{}, {"standardize": False}]

    @classmethod
    def _threshold_of(cls, stat: float) -> float:
        return math.exp(-stat)

    def _dead_time(self) -> tuple[int, str, str]:
        # (river tests only once its window holds more than grace_period values; the warm-up comes first)
        if self.standardize and self.warmup >= self.grace_period:
            return self.warmup, f"warmup {self.warmup}", "warmup"
        return self.grace_period, f"grace_period {self.grace_period}", "grace_period"

    def _calibration_params(self) -> dict:
        params = {"clock": self.clock, "max_buckets": self.max_buckets, "min_window_length": self.min_window_length,
                  "grace_period": self.grace_period}
        if self.standardize:  # only then, so the raw (river-style) setting keeps its shipped curve's key
            params.update(standardize=True, warmup=self.warmup, clip=self.clip)
        return params

    def _new_river(self) -> river_drift.ADWIN:
        return _drift().ADWIN(delta=self.delta_, clock=self.clock, max_buckets=self.max_buckets,
                              min_window_length=self.min_window_length, grace_period=self.grace_period)

    def _reset(self) -> None:
        self._adwin = self._new_river()
        self._warm: list[float] | None = [] if self.standardize else None  # raw warm-up values
        self._level = 0.0
        self._scale = 1.0
        self._inv = 1.0
        self._n = 0  # values fed to river since the last alarm
        # The recent values as river saw them (standardized, not clipped) and their steps, to estimate where
        # the change happened when ADWIN cuts its window (the steps of warm-up values are kept as they come).
        self._recent: collections.deque = collections.deque(maxlen=_ADWIN_LOCATION_WINDOW)
        self._recent_steps: collections.deque = collections.deque(maxlen=_ADWIN_LOCATION_WINDOW)

    @property
    def armed(self) -> bool:
        return self._warm is None

    def state_dict(self) -> dict:
        sd = super().state_dict()
        helper = self._adwin._helper
        # river's ADWIN lives in Rust; its own serialization (bytes) is the only complete state there is.
        sd["river"] = {"drift_detected": self._adwin._drift_detected,
                       "helper": base64.b64encode(helper.__getstate__()).decode("ascii")}
        return sd

    def load_state_dict(self, sd) -> None:
        super().load_state_dict(sd)
        if "warm" not in sd and "river" in sd and self.standardize:
            # A state from before ADWIN standardized: river's window holds raw values, which cannot be
            # mixed with standardized ones.  Start afresh (a new warm-up).
            self._reset()
            return
        r = sd.get("river")
        if r:
            self._adwin._helper.__setstate__(base64.b64decode(r["helper"]))
            self._adwin._drift_detected = r["drift_detected"]

    def _after_load(self) -> None:
        self._inv = 1.0 / self._scale

    def update(self, value: float, step: int) -> Alarm | None:
        if type(value) is not float:
            value = self._float(value)
        if value - value != 0.0:  # NaN or inf: ignored
            return None
        if self._warm is not None:
            return self._warm_up(value, step)
        return self._feed((value - self._level) * self._inv, step, step)

    def _feed(self, z: float, at: int, step: int) -> Alarm | None:
        """River sees ``z`` (the value of step ``at``, standardized) on the update of step ``step``."""
        # river's window variance squares values: inf above ~1e154, so they are clamped (to +-1e100, or to
        # +-clip when standardized); an overflow of (value - level) to +-inf is clamped too.
        if not -_ADWIN_MAX <= z <= _ADWIN_MAX:
            z = _ADWIN_MAX if z > 0.0 else -_ADWIN_MAX
        self._recent.append(z)
        self._recent_steps.append(at)
        c = self._clip
        adwin = self._adwin
        adwin.update(z if -c <= z <= c else (c if z > 0.0 else -c))
        self._n += 1
        if adwin.drift_detected:
            return self._alarm(step)
        return None

    def _warm_up(self, value: float, step: int) -> Alarm | None:
        warm = self._warm
        warm.append(value)
        self._recent_steps.append(step)  # (the steps of the warm-up values wait here)
        if len(warm) < self.warmup:
            return None
        self._level, self._scale, _ = screened_moments(warm)
        self._inv = 1.0 / self._scale
        self._warm = None
        steps = list(self._recent_steps)
        steps = [steps[0]] * (len(warm) - len(steps)) + steps  # (a warm-up longer than the location window)
        self._recent_steps.clear()
        for i, v in enumerate(warm):  # river sees the warm-up values too (standardized), so it is armed at once
            alarm = self._feed((v - self._level) * self._inv, steps[i], step)
            if alarm is not None:
                # A change within the warm-up: the values after it start the next warm-up.
                self._warm.extend(warm[i + 1:])
                self._recent_steps.extend(steps[i + 1:])
                return alarm
        return None

    def _alarm(self, step: int) -> Alarm:
        m = min(self._n, len(self._recent))
        values = list(self._recent)[-m:]
        c = self._clip
        seen = [v if -c <= v <= c else (c if v > 0.0 else -c) for v in values]  # as river saw them
        cut = best_split(seen)
        direction = "up" if sum(seen[cut:]) / (m - cut) > sum(seen[:cut]) / cut else "down"
        location = list(self._recent_steps)[-m:][cut]
        # The means in the stream's units (not clipped: a jump to 1e6 reads as one).
        old_mean = self._level + self._scale * (sum(values[:cut]) / cut)
        new_mean = self._level + self._scale * (sum(values[cut:]) / (m - cut))
        # river resets its ADWIN on the next update anyway; do it now so the state is plain.  The scale is
        # estimated again on the new level.
        self._reset()
        return Alarm(step, self.name, self.stream, direction, location,
                     f"{self.stream or 'stream'}: mean {direction} from {old_mean:.6g} to {new_mean:.6g} "
                     f"(ADWIN, delta {self.delta_:.3g}), change near step {location}")


@functools.lru_cache(maxsize=16)
def _ks_pvalues(stat_size: int) -> tuple[float, ...]:
    """p-value of scipy's two-sample KS test (as river calls it) for each D = k / stat_size, k = 0..stat_size."""
    from scipy import stats

    x = np.arange(stat_size, dtype=float)
    out = [1.0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # river silences the same warning
        for k in range(1, stat_size + 1):
            out.append(float(stats.ks_2samp(x, x + (k - 0.5), method="auto").pvalue))
    return tuple(out)


class KSWIN(Detector):
    """KSWIN (river's ``KSWIN``): Kolmogorov-Smirnov test between recent values and a sample of older ones.

    river keeps a sliding window of ``window_size`` values and tests the last ``stat_size`` of them against
    ``stat_size`` drawn at random from the rest; it alarms when the KS p-value is at most ``alpha`` (and the
    statistic exceeds 0.1).  It detects any change of distribution, not only of the mean, so the alarm has no
    direction; its ``location`` is the split of the window whose two parts differ most (the scaled two-sample KS
    statistic; before, the start of the recent part, ``stat_size - 1`` values after a step change it caught
    at once).  Each update runs a KS test (about 0.2 ms):
    use it on eval streams or as a second stage rather than on every per-step stream.

    Calibration: ``arl0`` instead of ``alpha`` (default ``arl0=5000``), simulated on i.i.d. standard normal
    in-control values (the test is distribution-free, so only dependence matters) or a block bootstrap of
    ``in_control``.  With ``stat_size`` values the statistic takes only ``stat_size + 1`` values, so the
    achieved ARL is the next achievable one at or above ``arl0`` (up to about twice it).

    Parameters
    ----------
    alpha
        Significance level of the KS test.
    arl0
        In-control average run length to calibrate ``alpha`` for.
    window_size, stat_size
        Sliding window and the size of each of the two compared samples (``stat_size`` None: 30, or half the
        window when that is less).
    seed
        Seed of river's sampling of the reference values (fixed for reproducible alarms).
    in_control, block_size
        Optional in-control segment (and bootstrap block length) to calibrate ``arl0`` on.
    stream
        Name of the watched stream.

    Examples
    --------
    >>> import random
    >>> rng = random.Random(4)
    >>> det = KSWIN(arl0=1000, stream="eval/acc")
    >>> values = [rng.gauss(0.0, 1.0) for _ in range(200)] + [rng.gauss(1.0, 3.0) for _ in range(100)]
    >>> for step, x in enumerate(values):
    ...     alarm = det.update(x, step)
    ...     if alarm:
    ...         print(alarm.step, alarm.direction, alarm.location)
    231 None 200
    """

    name = "kswin"
    _threshold_param = "alpha"
    _discrete_statistic = True
    _state = ("_steps",)
    _default_arl0 = 5000.0
    _dummy_threshold = 0.005
    _table_max_arl = 10000.0
    _calibration_runs = 200
    _simulated_max_arl = 750.0  # 200 runs x 2,250 updates of ~6.5 us

    def __init__(self, alpha: float | None = None, arl0: float | None = None, window_size: int = 100,
                 stat_size: int | None = None, seed: int = 0, in_control=None, block_size: int | None = None,
                 stream: str = ""):
        owner = self.name
        self.alpha = alpha
        self.arl0 = arl0
        self.window_size = check_int(owner, "window_size", window_size, 4, 100_000)
        if stat_size is None:  # (30, or half the window when that is less: window_size 4 alone was refused as
            stat_size = min(30, self.window_size // 2)  # "stat_size ... in [2, 2], got 30", never set; a probe)
        self.stat_size = check_int(owner, "stat_size", stat_size, 2, self.window_size // 2)
        self.seed = check_int(owner, "seed", seed, 0, 2**63 - 1)
        self.in_control, self.block_size = check_in_control(owner, in_control, block_size)
        self.stream = stream
        a = self._threshold_from(alpha, arl0, self._default_arl0,
                                 lambda v: check_float(owner, "alpha", v, 0.0, 1.0, lo_open=True, hi_open=True))
        self.alpha_ = a
        self._reset()

    @classmethod
    def _threshold_of(cls, stat: float) -> float:
        # Strictly between the achievable p-values at and above the threshold statistic.
        return math.exp(-stat) * (1.0 - 1e-9)

    def _dead_time(self) -> tuple[int, str, str]:
        # (river tests once its window is full: at value window_size, alarming there at any alpha near 1)
        return self.window_size, f"window_size {self.window_size}", "window_size"

    def _calibration_params(self) -> dict:
        return {"window_size": self.window_size, "stat_size": self.stat_size, "seed": self.seed}

    def _disable_alarms(self) -> None:
        self.alpha_ = 0.0
        self._kswin.alpha = -1.0

    def _new_river(self) -> river_drift.KSWIN:
        return _drift().KSWIN(alpha=self.alpha_, window_size=self.window_size, stat_size=self.stat_size,
                              seed=self.seed)

    def _reset(self) -> None:
        self._kswin = self._new_river()
        self._steps: list[int] = []  # steps of the values in river's window

    def state_dict(self) -> dict:
        sd = super().state_dict()
        k = self._kswin
        version, internal, gauss = k._rng.getstate()
        # river keeps p_value as a numpy float64, which torch.load(weights_only=True) refuses: plain values only.
        sd["river"] = {"drift_detected": bool(k._drift_detected), "p_value": float(k.p_value), "n": int(k.n),
                       "window": [float(v) for v in k.window],
                       "rng": [version, list(internal), gauss]}
        return sd

    def load_state_dict(self, sd) -> None:
        super().load_state_dict(sd)
        r = sd.get("river")
        if r:
            k = self._kswin
            k._drift_detected, k.p_value, k.n = r["drift_detected"], r["p_value"], r["n"]
            k.window.extend(r["window"])
            version, internal, gauss = r["rng"]
            k._rng.setstate((version, tuple(internal), gauss))

    def _statistic(self) -> float:
        k = self._kswin
        if len(k.window) < self.window_size and not k._drift_detected:
            return 0.0
        p = k.p_value
        if p > self._p_max():
            return 0.0  # river also requires the KS statistic to exceed 0.1
        return -math.log(p) if p > 0.0 else 745.0

    def _p_max(self) -> float:
        r = self.stat_size
        k_min = math.floor(0.1 * r + 1e-9) + 1  # smallest k with k / r > 0.1
        return _ks_pvalues(r)[min(k_min, r)] * (1.0 + 1e-9)

    @classmethod
    def _statistic_path(cls, params: dict, values: np.ndarray) -> np.ndarray:
        """The statistic after each update of a never-alarming KSWIN on ``values``, vectorized (for calibration).

        Same distribution as river's (the reference sample is drawn with numpy, not river's generator).
        """
        w, r = params["window_size"], params["stat_size"]
        n = len(values)
        out = np.zeros(n)
        if n < w:
            return out
        pvals = np.array(_ks_pvalues(r))
        k_min = math.floor(0.1 * r + 1e-9) + 1
        stat_of_k = np.where(np.arange(r + 1) >= k_min, -np.log(np.maximum(pvals, 1e-300)), 0.0)
        rng = np.random.Generator(np.random.PCG64([params["seed"], zlib.crc32(values[:16].tobytes())]))
        windows = np.lib.stride_tricks.sliding_window_view(values, w)  # row i ends at value i + w - 1
        for lo in range(0, len(windows), 4096):
            win = windows[lo:lo + 4096]
            m = len(win)
            pick = np.argsort(rng.random((m, w - r)), axis=1)[:, :r]
            ref = np.take_along_axis(win[:, : w - r], pick, axis=1)
            rec = win[:, w - r:]
            both = np.concatenate([ref, rec], axis=1)
            order = np.argsort(both, axis=1, kind="stable")
            sorted_vals = np.take_along_axis(both, order, axis=1)
            steps = np.where(order < r, 1, -1)
            diff = np.cumsum(steps, axis=1)
            last_of_tie = np.ones_like(diff, dtype=bool)
            last_of_tie[:, :-1] = sorted_vals[:, 1:] != sorted_vals[:, :-1]
            k = np.max(np.abs(diff) * last_of_tie, axis=1)
            out[lo + w - 1: lo + w - 1 + m] = stat_of_k[k]
        return out

    def _location(self, window: list[float] | None, value: float, step: int) -> int:
        """Where the distribution changed: the split of the window (at least 5 values a side) whose two parts
        differ most by the two-sample KS statistic scaled by sqrt(n1 n2 / (n1 + n2)), the scale under which
        splits of different sizes compare; the start of the recent part when the window is too short."""
        r = self.stat_size
        steps = self._steps
        values = (window + [value])[-len(steps):] if window is not None else []
        n = len(values)
        if n < 10 or len(steps) != n:
            return steps[-r] if len(steps) >= r else step
        x = np.asarray(values, dtype=float)
        order = np.argsort(x, kind="stable")
        xs = x[order]
        last = np.ones(n, dtype=bool)  # the empirical CDFs are compared at the last of tied values only
        last[:-1] = xs[1:] != xs[:-1]
        best, where = -1.0, n - r
        for t in range(5, n - 4):
            left = (order < t).astype(float)  # which sorted values lie left of the split
            f_left = np.cumsum(left) / t
            f_right = np.cumsum(1.0 - left) / (n - t)
            d = float(np.max(np.abs(f_left - f_right)[last])) * math.sqrt(t * (n - t) / n)
            if d > best:
                best, where = d, t
        return int(steps[where])

    def update(self, value: float, step: int) -> Alarm | None:
        if type(value) is not float:
            value = self._float(value)
        if value - value != 0.0:  # NaN or inf: ignored
            return None
        k = self._kswin
        if k._drift_detected:
            self._steps = []  # river restarts its window on this update
        window = list(k.window) if len(k.window) >= self.window_size - 1 else None
        k.update(value)
        self._steps.append(step)
        if len(self._steps) > self.window_size:
            del self._steps[0]
        if k._drift_detected:
            r = self.stat_size
            old = (window + [value])[-self.window_size:][: self.window_size - r] if window is not None else []
            new = list(k.window)
            location = self._location(window, value, step)
            self._steps = self._steps[-r:]
            up = sum(new) / len(new) > sum(old) / len(old) if old else None
            return Alarm(step, self.name, self.stream, None, location,
                         f"{self.stream or 'stream'}: distribution changed near step {location} "
                         f"(KS p-value {k.p_value:.3g} <= {self.alpha_:.3g}; recent mean "
                         f"{'above' if up else 'below'} the older values)")
        return None

"""``cusum``: two-sided CUSUM on values standardized by a robust warm-up."""

from __future__ import annotations

import math
from collections.abc import Sequence

from adaptive_eval.detectors._base import (
    _DIRECTIONS,
    Alarm,
    Detector,
    check_choice,
    check_float,
    check_in_control,
    check_int,
    huge_factor,
    last_regime,
    screened_moments,
    check_warmup_test,
    t_to_z,
)

__all__ = ["CUSUM"]

_INF = math.inf
_FIXED, _WARMUP, _LEARNING = 0, 1, 2
# The estimates learn from a value only while every sum stays below this (sd units): no change suspected.
# A constant, not a fraction of the threshold, so the in-control path does not depend on the threshold
# (which calibration relies on).
_FREEZE = 3.0


def _log_arl(k: float, h: float) -> float:
    """log of Siegmund's approximation of a one-sided CUSUM's in-control ARL (N(0,1) data, known parameters)."""
    b = h + 1.166
    if k < 1e-6:
        return 2.0 * math.log(b)
    x = 2.0 * k * b
    if x > 700.0:
        return x - math.log(2.0 * k * k)
    return math.log((math.expm1(x) - x) / (2.0 * k * k))


def _h_for_log_arl(k: float, log_arl: float) -> float:
    """The threshold of a one-sided CUSUM with allowance ``k`` whose Siegmund log-ARL is ``log_arl``."""
    lo, hi = -1.166 + 1e-9, 1.0
    while _log_arl(k, hi) < log_arl:
        hi *= 2.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if _log_arl(k, mid) < log_arl:
            lo = mid
        else:
            hi = mid
    return hi


class CUSUM(Detector):
    """Two-sided CUSUM (Page 1954) for a shift of the mean, on robustly standardized values.

    The first ``warmup`` finite values give the in-control level and scale: the median and MAD screen out
    outliers, and the mean and standard deviation of the rest are the estimates.  After that each value
    becomes ``z = (x - level) / scale``, clipped to ``+-clip`` so that one wild value cannot raise a level
    alarm by itself (that is the ``spike`` detector's job), and the one-sided sums
    ``S+ = max(0, S+ + z - k)`` and ``S- = max(0, S- - z - k)`` run.  An alarm is raised when one exceeds
    its threshold; its ``location`` is the step at which that sum last left zero (the classical CUSUM
    estimate of the change point).  After an alarm the detector re-arms on the new level: the sums restart
    and a fresh warm-up estimates the new level and scale, so one change gives one alarm.

    The estimates keep improving (running mean and variance) over the next values, up to ``reference`` in
    all, while every sum stays below 3 (no change suspected), then freeze: a 50-value warm-up alone leaves
    errors in level and scale that make false alarms come much earlier than ``arl0`` on some runs.

    ``k`` is half the shift (in standard deviations) a chart is tuned for.  Several values run several
    charts at once (a multi-chart CUSUM): the default ``(0.5, 1.5)`` is near-optimal for shifts of 1 and of
    3 sd alike, where one ``k = 0.5`` chart needs nearly twice the optimal delay for a 3 sd jump.  The
    ``threshold`` ``h`` is that of the first chart; the others get thresholds with the same one-sided ARL
    under Siegmund's approximation, so each chart contributes about equally to false alarms.

    Calibration: give ``arl0`` (mean number of updates before a false alarm) instead of ``threshold``;
    neither gives ``arl0=5000``.  The threshold is found by simulation, warm-up included, assuming the
    in-control stream is **i.i.d.** (standard normal; the standardization makes level and scale
    irrelevant), or, with ``in_control``, a circular block bootstrap of that segment (blocks of
    ``block_size`` values, default n^(1/3)) so that its autocorrelation and tails count.  Real metric
    streams are autocorrelated: calibrated on i.i.d. data, false alarms on them come sooner than ``arl0``.
    The thresholds for the default settings are shipped; other settings are simulated once (seconds) and
    cached.

    Parameters
    ----------
    k
        Allowance (reference value) in standard deviations, or a sequence of them (one chart each).
    threshold
        Decision threshold ``h`` of the first chart, in standard deviations (instead of ``arl0``).
    arl0
        In-control average run length to calibrate ``threshold`` for.
    warmup
        Number of values that estimate the in-control level and scale (again after each alarm).
    reference
        The estimates are refined until this many in-control values have been seen (>= ``warmup``; None: 500, or
        ``warmup`` when that is more).
    clip
        Standardized values are clipped to ``[-clip, clip]`` (None: no clipping).
    adapt
        0 (default): the reference level and scale are fixed once estimated.  A rate in (0, 0.5]: after the
        warm-up they follow the stream as exponentially weighted estimates with this rate (an effective
        memory of about ``1/adapt`` steps), so a slow trend or wander (a reward that keeps climbing, an
        autocorrelated loss) is not taken for a change, while an abrupt shift still is: it moves the
        clipped statistic by up to ``clip`` per step and the level by only ``adapt * clip`` sd.
    trend
        0 (default): the tracked level lags a steady climb by about ``slope / adapt``, and that lag widens the
        tracked scale, so a drop after a steady climb must be larger to be seen (a reward that climbs 0.1 sd a
        step and then falls 8 sd went unalarmed).  A rate in (0, 1] (with ``adapt``; ignored when it is 0, the
        reference fixed): the reference also follows the level's slope, as Holt's linear method does (its beta:
        the slope moves by ``trend`` times the level's correction at each step; at adapt 0.05 and trend 0.02 it
        has 54% of a new climb's slope 50 steps in, 92% by 100, learned anew after each warm-up and alarm), so a
        long climb leaves no lag and the scale stays the noise's; each value is compared with the level
        extrapolated one step; such a detector takes the general update, not the unrolled one-chart path.  A sum
        that crosses the threshold against the reference's own move (down while it climbs) alarms only if it
        still would with that move taken back: a climb that stops is not a drop.  Off in the presets: where a
        steep climb stops, the slope overshoots the plateau and widens the scale for about 100 steps, so a
        collapse there is missed (README, *Detectors*); 0.02 is the value measured.
    direction
        ``"both"``, ``"up"`` (increases only) or ``"down"``.
    in_control, block_size
        Optional in-control segment (and bootstrap block length) to calibrate ``arl0`` on.
    warmup_test
        Test the warm-up itself for a change of the mean when it ends (after each alarm too): a change there
        would otherwise be averaged into the reference level and scale and never alarmed on (the Nile's 1898
        drop, 28 values into a 50-value warm-up).  The test is a permutation test of the largest two-sample t
        over the splits (:func:`warmup_change`, exact for any i.i.d. stream) at the false-alarm probability
        the charts have over as many steps, ``warmup / arl0`` (with a raw ``threshold``, the ARL of its shipped
        calibration curve, else Siegmund's, which is longer; at most 0.05), so it adds about that share to the
        false alarms.  On a change it alarms at once with the split as its location, and the values after the
        split start the next warm-up.  None (default): on when ``adapt`` is 0; a tracking detector takes early
        movement for the trend it follows.  A number in (0, 0.05]: on, at that significance level.
    stream
        Name of the watched stream.

    Examples
    --------
    A shift of one standard deviation at step 300:

    >>> import random
    >>> rng = random.Random(7)
    >>> det = CUSUM(arl0=1000, stream="train/reward")
    >>> values = [rng.gauss(0.5, 0.1) for _ in range(300)] + [rng.gauss(0.4, 0.1) for _ in range(100)]
    >>> for step, x in enumerate(values):
    ...     alarm = det.update(x, step)
    ...     if alarm:
    ...         print(alarm.step, alarm.direction, alarm.location)
    320 down 299
    """

    name = "cusum"
    # What the per-step update reads and writes lives in slots.  CPython (3.11+) keeps an instance's
    # attributes in a compact, fast-to-index layout only up to 30 of them; a CUSUM has more (its
    # hyper-parameters, calibration and chart constants), and then every attribute access goes through a
    # dict lookup.  Slot access stays an indexed load whatever the count (about 10% of the hot path).
    __slots__ = ("_phase", "_level", "_scale", "_inv", "_sums", "_starts", "_adapt", "_floor", "_clip",
                 "_nclip", "_band", "_nband", "_k0", "_nk0", "_h0", "_one_chart", "_slope", "_trend", "_anchors")
    _threshold_param = "threshold"
    _state = ("_phase", "_warm", "_warm_steps", "_level", "_scale", "_n", "_m2", "_factor", "_sums", "_starts",
              "_floor", "_restarted", "_after_alarm", "_slope", "_anchors")
    _default_arl0 = 5000.0
    _table_max_arl = 30000.0
    _calibration_runs = 400
    _table_runs = 1000
    # 400 runs x 15,000 updates of ~2.5 us, about 10 s once (then cached): the default arl0 is simulated, not
    # extrapolated (bounded at 1,000, a warmup-30 CUSUM at arl0 5,000 ran 1.75x the in-control run asked)
    _simulated_max_arl = 5000.0

    def __init__(self, k: float | Sequence[float] = (0.5, 1.5), threshold: float | None = None,
                 arl0: float | None = None, warmup: int = 50, reference: int | None = None, clip: float | None = 4.0,
                 adapt: float = 0.0, direction: str = "both", in_control=None, block_size: int | None = None,
                 warmup_test: bool | float | None = None, trend: float = 0.0, stream: str = ""):
        owner = self.name
        if isinstance(k, (str, bytes)) or not isinstance(k, Sequence):
            k = check_float(owner, "k", k, 0.0, 10.0)
            ks = (k,)
        else:
            if not 1 <= len(k) <= 8:
                raise ValueError(f"{owner}: k must be a number or a list of 1 to 8 numbers, got {k!r}")
            ks = tuple(check_float(owner, "k", v, 0.0, 10.0) for v in k)
            k = ks
        self.k = k
        self.threshold = threshold
        self.arl0 = arl0
        self.warmup = check_int(owner, "warmup", warmup, 3, 1_000_000)
        # (None: 500, or the warm-up when longer; a warm-up of 1,000,000 alone was refused as "reference must be an
        # integer in [1000000, ...], got 500", a parameter the user never set; a probe)
        if reference is None:
            reference = max(500, self.warmup)
        self.reference = check_int(owner, "reference", reference, self.warmup, 100_000_000)
        self.clip = None if clip is None else check_float(owner, "clip", clip, 0.0, 1e6, lo_open=True)
        self.adapt = check_float(owner, "adapt", adapt, 0.0, 0.5)
        self._adapt = self.adapt
        self.trend = check_float(owner, "trend", trend, 0.0, 1.0)
        # (with adapt 0 the reference is fixed and trend does nothing: `--set streams.watch...adapt=0` on a spec that
        # sets trend gives the fixed-reference CUSUM it asks for, with no error for the trend left in it)
        self._trend = self.trend if self.adapt else 0.0
        self.direction = check_choice(owner, "direction", direction, _DIRECTIONS)
        self.warmup_test = warmup_test = check_warmup_test(owner, warmup_test)
        self._warmup_test = (not self.adapt) if warmup_test is None else warmup_test is not False
        self.in_control, self.block_size = check_in_control(owner, in_control, block_size)
        self.stream = stream
        self._ks = ks
        # One "side" per chart and direction: (allowance, sign of z, direction name).
        signs = {"both": (1.0, -1.0), "up": (1.0,), "down": (-1.0,)}[direction]
        self._sides = tuple((kk, sign) for kk in ks for sign in signs)
        self._clip = _INF if self.clip is None else self.clip
        h = self._threshold_from(threshold, arl0, self._default_arl0,
                                 lambda v: check_float(owner, "threshold", v, 0.0, 1e6, lo_open=True))
        self.threshold_ = h
        self._reset()

    @classmethod
    def _table_variants(cls) -> list[dict]:
        return [{}, {"direction": "up"}, {"direction": "down"}, {"k": 0.5}]

    def _calibration_params(self) -> dict:
        params = {"k": list(self._ks), "warmup": self.warmup, "reference": self.reference, "clip": self.clip,
                  "direction": self.direction}
        if self.adapt:  # only then, so the shipped curves of fixed-reference settings keep their keys
            params["adapt"] = self.adapt
        if self._trend:  # (likewise)
            params["trend"] = self._trend
        return params

    # The calibration statistic is the largest Siegmund log-ARL of the sums, so that one number orders the
    # alarms of every chart; _threshold_of turns its threshold back into the first chart's h.
    def _threshold_of(self, stat: float) -> float:
        return _h_for_log_arl(self._ks[0], stat)

    def _statistic(self) -> float:
        best = -_INF
        for (kk, _), s in zip(self._sides, self._sums):
            if s > 0.0:
                v = _log_arl(kk, s)
                if v > best:
                    best = v
        return best

    @property
    def threshold_(self) -> float:
        return self._h

    @threshold_.setter
    def threshold_(self, h: float) -> None:
        self._h = h
        if h == _INF:
            self._hs = [_INF] * len(self._sides)
        else:
            target = _log_arl(self._ks[0], h)
            self._hs = [h if kk == self._ks[0] else _h_for_log_arl(kk, target) for kk, _ in self._sides]
        self._plan = tuple((i, kk, sign, hh) for i, ((kk, sign), hh) in enumerate(zip(self._sides, self._hs)))
        self._two_charts = len(self._ks) == 2 and self.direction == "both"
        # (a slope-following detector, trend > 0, takes the general path: the unrolled one below is the presets',
        # and the slope's two more operations a step there cost every preset user 3-5% of the step for nothing)
        self._one_chart = len(self._ks) == 1 and self.direction == "both" and not self._trend
        self._pairs = tuple((kk, sign, hh) for _, kk, sign, hh in self._plan[::2])
        self._k0, _, self._h0 = self._pairs[0]  # the one chart of _one_chart
        # The one-chart path's quiet band: with both sums at zero, a z within +-band leaves them at zero and
        # needs no clipping (band <= k and band <= clip), so nothing but the tracking step runs.
        self._band = min(self._k0, self._clip)
        # The negations, kept: on the hot path a negation costs more than the comparison that uses it.
        self._nband, self._nk0, self._nclip = -self._band, -self._k0, -self._clip

    def _reset(self) -> None:
        self._phase = _WARMUP
        self._warm: list[float] | None = []
        self._warm_steps: list[int] | None = []
        self._level = 0.0
        self._slope = 0.0  # with trend: the tracked level's slope per value
        self._scale = 1.0
        self._inv = 1.0
        self._n = 0
        self._m2 = 0.0
        self._factor = 1.0  # the running variance is kept scaled by it (see huge_factor)
        self._sums = [0.0] * len(self._sides)
        self._starts: list[int | None] = [None] * len(self._sides)
        self._anchors = [0.0] * len(self._sides)  # the reference each sum's first value was compared with
        self._floor = 0.0  # with adapt: the tracked scale stays above this share of the warm-up's
        self._restarted = False  # this warm-up began again on its last regime (last_regime; once a warm-up)
        self._after_alarm = False  # this warm-up follows an alarm (_two_regimes; set by the alarms)

    def _track(self, z: float) -> None:
        """Follow a slowly moving stream (``adapt``): EWMA steps of the level and of the scale (an M-estimate
        from the clipped |z|, unbiased for normal data), so trends and slow wander are not alarmed on; with
        ``trend``, Holt's steps of the level and its slope (``z`` is then the distance from the level
        extrapolated one step)."""
        scale = self._scale
        gain = self._adapt * scale
        e = gain * z
        self._level = self._level + self._slope + e  # (the one-chart path's order of operations: the same floats)
        self._slope += self._trend * e
        # scale * (1 + a * (c |z| - 1)), as scale + (c |e| - a scale) (the same in fewer operations)
        scale += (1.2533141373155001 * e if e >= 0.0 else -1.2533141373155001 * e) - gain
        if scale < self._floor:
            scale = self._floor
        elif scale > 1.7976931348623157e308:  # (inf: see the one-chart path)
            scale = 1.7976931348623157e308
        self._scale = scale  # (the updates divide by it; the learning phase, never tracking, keeps its 1 / scale)

    def _after_load(self) -> None:
        if not self._scale > 0.0:  # (0 raised a bare ZeroDivisionError naming nothing; a probe)
            raise ValueError(f"{self.stream or 'stream'}: cusum state field 'scale': expected a number > 0, "
                             f"got {self._scale!r}")
        self._inv = 1.0 / self._scale
        if not self._trend:  # (a slope saved with trend, loaded without it, was added to the level at every step)
            self._slope = 0.0
        elif self._slope == 0.0 and not any(self._anchors):
            # A state saved without a slope (trend 0, or from before trend): its sums in progress were measured
            # against the level, which is their reference.  (Left at 0, _beyond_trend read the level's distance
            # from 0 as the reference's move and held back for good the alarm of a collapse under way; a probe.)
            self._anchors = [self._level if s else 0.0 for s in self._sums]

    def _beyond_trend(self, step: int, side: int, sign: float, stat: float) -> bool:
        """Whether a sum that crossed its threshold while the tracked reference moved against it (rose, for a down
        sum) still crosses it with that move taken back: over the sum's n values the reference moved ``rise`` (the
        slope's extrapolation, less the corrections), and each value is credited the whole move, ``stat - |rise| n
        / scale`` (half of it, the average of a linear move, left 8% of such plateaus alarmed).  A climb that stops
        (a reward reaching its ceiling) leaves the extrapolated reference above the values and its down sum
        growing: 70% of steady climbs of 0.2 sd a step that stopped brought a false "level down" alarm, none
        without the slope (a review).  A drop passes, the reference falling with it.  A sum with the reference's
        move, or none, always passes."""
        rise = self._level + self._slope - self._anchors[side]
        if sign * rise >= 0.0:
            return True
        start = self._starts[side]
        n = step - start + 1 if start is not None else 1
        return stat - (rise if rise > 0.0 else -rise) * n / self._scale > self._hs[side]

    @property
    def armed(self) -> bool:
        return self._phase != _WARMUP

    def update(self, value: float, step: int) -> Alarm | None:
        if type(value) is not float:
            value = self._float(value)
        if value - value != 0.0:  # NaN or inf: ignored
            return None
        return self._update_finite(value, step)

    def _finite_path(self):
        """The update for a value already known to be a finite ``float`` (see :meth:`Detector._finite_path`):
        the unrolled one-chart path where the charts allow it, else :meth:`_update_finite`.  (``_one_chart``
        depends only on ``k`` and ``direction``, which never change, so the choice holds for good.)"""
        return self._update_one_chart if self._one_chart else self._update_finite

    def _update_one_chart(self, value: float, step: int) -> Alarm | None:
        """:meth:`_update_finite` for one chart in both directions (the default preset's), unrolled with the
        tracking step inlined: the per-step hot path of ``AdaptiveEvaluator.observe``.  The chart's k and h
        are plain attributes (see threshold_), which saves the tuple unpacking."""
        if self._phase:
            return self._update_slow(value, step)
        level = self._level  # (no slope: a detector with trend takes _update_finite)
        # (divided by the scale, kept in a local for the tracking step below: one load, and no stored 1 / scale to
        # update, against multiplying by that stored inverse: about 5% of the update)
        scale = self._scale
        z = (value - level) / scale
        sums = self._sums
        s0, s1 = sums
        if s0 == 0.0 and s1 == 0.0 and self._nband <= z <= self._band:
            # Most steps: both sums at zero and |z| <= band (band <= k and band <= clip).  Then z needs no
            # clipping and both sums stay at zero (0 + z - k <= 0 and 0 - z - k <= 0): only the tracking
            # step below runs.  (A NaN z fails the band and takes the full step, as before.)
            pass
        else:
            if z > self._clip:
                z = self._clip
            elif z < self._nclip:
                z = self._nclip
            # A sum at zero only needs a comparison: 0 + z - k > 0 exactly when z > k, and 0 - z - k > 0
            # exactly when z < -k (IEEE subtraction is exact in sign), so the sums, their starts and the
            # alarms are those of the plain recursion in _update_finite.
            k0 = self._k0
            if s0 != 0.0 or z > k0:
                v = s0 + z - k0
                if v > 0.0:
                    if s0 == 0.0:
                        self._starts[0] = step
                    if v > self._h0 and (alarm := self._alarm(step, 0, v)) is not None:
                        return alarm
                    sums[0] = v
                else:
                    sums[0] = 0.0
            if s1 != 0.0 or z < self._nk0:
                v = s1 - z - k0
                if v > 0.0:
                    if s1 == 0.0:
                        self._starts[1] = step
                    if v > self._h0 and (alarm := self._alarm(step, 1, v)) is not None:
                        return alarm
                    sums[1] = v
                else:
                    sums[1] = 0.0
        a = self._adapt
        if a:
            a *= scale
            e = a * z
            self._level = level + e
            # scale * (1 + adapt * (c |z| - 1)) as scale - adapt scale + c |e|, in fewer operations (-c * e is c * -e
            # exactly: the negation is folded into the constant)
            scale += (1.2533141373155001 * e if e >= 0.0 else -1.2533141373155001 * e) - a
            if scale < self._floor:
                scale = self._floor
            elif scale > 1.7976931348623157e308:
                # (the largest float: values alternating at +-1.79e308 grew it past, to inf, then the level and sums
                # to NaN, a detector blind for good whose own saved state was refused at load; a review)
                scale = 1.7976931348623157e308
            self._scale = scale
        return None

    def _update_finite(self, value: float, step: int) -> Alarm | None:
        """:meth:`update` of a value already known to be a finite ``float``.

        ``AdaptiveEvaluator.observe`` has checked that once for all of a stream's detectors and calls
        :meth:`_finite_path`'s choice directly (see benchmarks/overhead.py).
        """
        if self._one_chart:
            return self._update_one_chart(value, step)
        if self._phase:
            return self._update_slow(value, step)
        pred = self._level + self._slope
        z = (value - pred) / self._scale  # (as the one-chart path rounds it)
        sums = self._sums
        c = self._clip
        if z > c:
            z = c
        elif z < -c:
            z = -c
        if self._two_charts:
            # The default (two charts, both directions), unrolled: this is the per-step hot path.
            (k0, _, h0), (k1, _, h1) = self._pairs
            s = sums[0]
            v = s + z - k0
            if v > 0.0:
                if s == 0.0:
                    self._starts[0] = step
                    if self._trend:  # (only a slope-following sum needs it: _beyond_trend)
                        self._anchors[0] = pred
                if v > h0 and (alarm := self._alarm(step, 0, v)) is not None:
                    return alarm
                sums[0] = v
            elif s != 0.0:
                sums[0] = 0.0
            s = sums[1]
            v = s - z - k0
            if v > 0.0:
                if s == 0.0:
                    self._starts[1] = step
                    if self._trend:  # (only a slope-following sum needs it: _beyond_trend)
                        self._anchors[1] = pred
                if v > h0 and (alarm := self._alarm(step, 1, v)) is not None:
                    return alarm
                sums[1] = v
            elif s != 0.0:
                sums[1] = 0.0
            s = sums[2]
            v = s + z - k1
            if v > 0.0:
                if s == 0.0:
                    self._starts[2] = step
                    if self._trend:  # (only a slope-following sum needs it: _beyond_trend)
                        self._anchors[2] = pred
                if v > h1 and (alarm := self._alarm(step, 2, v)) is not None:
                    return alarm
                sums[2] = v
            elif s != 0.0:
                sums[2] = 0.0
            s = sums[3]
            v = s - z - k1
            if v > 0.0:
                if s == 0.0:
                    self._starts[3] = step
                    if self._trend:  # (only a slope-following sum needs it: _beyond_trend)
                        self._anchors[3] = pred
                if v > h1 and (alarm := self._alarm(step, 3, v)) is not None:
                    return alarm
                sums[3] = v
            elif s != 0.0:
                sums[3] = 0.0
            if self._adapt:
                self._track(z)
            return None
        for i, kk, sign, h in self._plan:
            s = sums[i]
            v = s + sign * z - kk
            if v > 0.0:
                if s == 0.0:
                    self._starts[i] = step
                    if self._trend:
                        self._anchors[i] = pred
                if v > h and (alarm := self._alarm(step, i, v)) is not None:
                    return alarm
                sums[i] = v
            elif s != 0.0:
                sums[i] = 0.0
        if self._adapt:
            self._track(z)
        return None

    def _update_slow(self, value: float, step: int) -> Alarm | None:
        if self._phase == _WARMUP:
            warm = self._warm
            warm.append(value)
            self._warm_steps.append(step)
            if len(warm) >= self.warmup:
                if self._warmup_test and self._h != _INF:
                    alarm = self._warmup_alarm(warm, step)
                    if alarm is not None:
                        return alarm
                elif not self._restarted and self._h != _INF and (i := last_regime(warm)):
                    # Without the warm-up test (a tracking detector): a warm-up of two regimes far apart warms up
                    # again on the last one, once.  Its moments, floored at 5% for good, made the stream's scale
                    # 8.6e36 against an sd of 0.05 after a burst of huge values (the burst's first value alarmed,
                    # this warm-up began inside it): every later change went unalarmed for the rest of the run (a
                    # probe).  See _two_regimes for when the split is an alarm.
                    return self._two_regimes(warm, i, step)
                self._level, self._scale, self._n = screened_moments(warm)
                f = self._factor = huge_factor(self._scale)
                self._m2 = (self._scale * f) * (self._scale * f) * (self._n - 1)
                self._inv = 1.0 / self._scale
                self._warm = self._warm_steps = None
                self._restarted = False
                self._floor = 0.05 * self._scale if self._adapt else 0.0
                # A tracking detector (adapt > 0) follows the stream from here instead of refining fixed estimates.
                self._phase = _LEARNING if self._n < self.reference and not self._adapt else _FIXED
            return None
        # While learning, standardize as a self-starting CUSUM does (Hawkins 1987): the value's distance from
        # the running mean, over its predictive sd, is Student-t with n - 1 degrees of freedom; mapping it to
        # the normal quantile makes in-control z's nearly i.i.d. N(0, 1) from the start, so false alarms do
        # not bunch up right after (re-)arming.
        n = self._n
        t = (value - self._level) * self._inv / math.sqrt(1.0 + 1.0 / n)
        z = t_to_z(t, max(n - 1, 2))
        c = self._clip
        z = c if z > c else (-c if z < -c else z)
        sums = self._sums
        for i, kk, sign, h in self._plan:
            s = sums[i]
            v = s + sign * z - kk
            if v > 0.0:
                if s == 0.0:
                    self._starts[i] = step
                if v > h and (alarm := self._alarm(step, i, v)) is not None:
                    return alarm
                sums[i] = v
            elif s != 0.0:
                sums[i] = 0.0
        if max(sums) < _FREEZE:
            n += 1
            delta = value - self._level
            level = self._level + delta / n
            f = self._factor
            self._m2 += (delta * f) * ((value - level) * f)
            self._n, self._level = n, level
            scale = math.sqrt(self._m2 / (n - 1)) / f if self._m2 > 0.0 else 0.0  # inf - inf: not learnable
            if scale > 0.0:  # a constant warm-up keeps its tiny scale
                self._scale, self._inv = scale, 1.0 / scale
            if n >= self.reference:
                self._phase = _FIXED
        return None

    def _warmup_level(self) -> float | None:
        """The warm-up test's level (see :meth:`Detector._warmup_test_level`); a raw threshold without a
        shipped curve takes Siegmund's ARL, which ignores the warm-up's estimation error and is much longer
        (the test is then the stricter, and off past a threshold of about 8 at k = 1)."""
        siegmund = math.exp(min(_log_arl(self._ks[0], self._h), 700.0)) / len(self._sides)
        return self._warmup_test_level(siegmund)

    def _statistic_threshold(self) -> float:
        return _log_arl(self._ks[0], self._h)

    def _warmup_alarm(self, warm: list[float], step: int) -> Alarm | None:
        """A change inside the warm-up (see ``warmup_test``): an alarm now, at the split, and the values after it
        start the next warm-up; None when the warm-up is one regime."""
        found = self._warmup_split(warm, self._warm_steps or [], step, self._warmup_level(), self.direction)
        if found is None:
            return None
        i, side, location, steps, message = found
        self._reset()
        self._warm, self._warm_steps = list(warm[i:]), list(steps[i:])
        return Alarm(step, self.name, self.stream, side, location, message)

    def _two_regimes(self, warm: list[float], i: int, step: int) -> Alarm | None:
        """A warm-up whose values from ``i`` on lie far from those before (:func:`last_regime`): those values start
        the next warm-up, which does not split again.  An alarm only for a change late in the first warm-up (the
        earlier regime more than half of it), in a direction the detector watches, the warm-up test not turned off
        (``warmup_test: false``): a warm-up after an alarm (a burst's end: it alarmed twice per burst) and a
        start-up transient (a grad norm high for its first 4 steps brought an urgent evaluation at step 29; a
        review) only warm up again."""
        steps, before, after = self._split(warm, self._warm_steps, step, i)
        m = len(warm) - i
        side = "up" if after > before else "down"
        alarm = (not self._after_alarm and 2 * i > len(warm) and self.warmup_test is not False
                 and self.direction in ("both", side))
        self._reset()
        self._restarted = True
        self._warm, self._warm_steps = list(warm[i:]), steps[i:]
        if not alarm:
            return None
        self._after_alarm = True
        return Alarm(step, self.name, self.stream, side, steps[i],
                     f"{self.stream or 'stream'}: level {side} inside the warm-up (mean {before:.6g} over {i} values, "
                     f"then {after:.6g} over {m}: two regimes far apart), change near step {steps[i]}")

    def _alarm(self, step: int, side: int, stat: float) -> Alarm | None:
        """The alarm of chart ``side`` whose sum ``stat`` crossed its threshold; None (no alarm yet, the sum kept) when
        that sum opposes the tracked slope and would not cross it against the level held flat since the sum left
        zero: the end of a climb, not a change of level (see :meth:`_beyond_trend`)."""
        kk, sign = self._sides[side]
        if self._trend and not self._beyond_trend(step, side, sign, stat):
            return None
        direction = "up" if sign > 0 else "down"
        location = self._starts[side]
        level, scale, h = self._level, self._scale, self._hs[side]
        self._reset()
        self._after_alarm = True
        chart = f"k={kk:g} " if len(self._ks) > 1 else ""
        return Alarm(step, self.name, self.stream, direction, location,
                     f"{self.stream or 'stream'}: level {direction} (CUSUM {chart}{stat:.2f} > {h:.2f} sd-units; "
                     f"reference level {level:.6g}, scale {scale:.3g}), change near step {location}")

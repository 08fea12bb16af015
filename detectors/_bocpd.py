"""``bocpd``: Bayesian online change-point detection (Adams & MacKay 2007)."""

from __future__ import annotations

import collections
import math

import numpy as np

from adaptive_eval.detectors._base import (
    Alarm,
    Detector,
    check_float,
    check_in_control,
    check_int,
    check_warmup_test,
    screened_moments,
)

__all__ = ["BOCPD"]

_LOG_2PI = math.log(2.0 * math.pi)
_HUGE = 1e150
_CLIP = 1e100
# The reference estimates learn from a value only while the posterior odds of a change stay below e^2
# (a constant, so the in-control path does not depend on the threshold; calibration relies on that).
_FREEZE_LOG_ODDS = 2.0


def _logit(p: float) -> float:
    return math.log(p) - math.log1p(-p)


class BOCPD(Detector):
    """Bayesian online change-point detection with a constant hazard and a conjugate Normal model.

    The run length ``r`` (number of values since the last change) gets a posterior that is updated with
    each value (Adams & MacKay 2007): a change happens before any value with probability ``hazard``; within
    a run, values are Normal with the run's unknown mean (prior: Normal around the reference level, sd
    ``prior_scale`` reference scales) and the reference variance.  The posterior is truncated at
    ``max_run_length`` (the last bin holds every longer run), so an update costs O(``max_run_length``).

    The reference level and scale come from a warm-up, as for ``cusum`` (screened mean and sd of the first
    ``warmup`` values, refined while no change is suspected until ``reference`` values are seen), and the
    warm-up values form the initial run.  The alarm statistic is the posterior probability that a change
    happened since the current run began, i.e. that the run length is shorter than the time since the
    detector was (re-)armed; an alarm is raised when it exceeds ``threshold``.  The alarm's ``location`` is the
    start of the most probable shorter run and its direction the sign of that run's mean; the detector then
    re-arms with the values since that location as the new warm-up.

    Calibration: ``arl0`` instead of ``threshold`` (default ``arl0=5000``), simulated assuming i.i.d.
    in-control values (standard normal; level and scale do not matter) or a block bootstrap of
    ``in_control``.  Autocorrelated streams give earlier false alarms than ``arl0`` unless calibrated on them.

    Parameters
    ----------
    hazard
        Prior probability of a change before each value (1 / expected run length).
    threshold
        Posterior probability of a change that raises an alarm, in (0, 1).
    arl0
        In-control average run length to calibrate ``threshold`` for.
    max_run_length
        Truncation of the run-length posterior (cost per update is linear in it).
    prior_scale
        Prior sd of a new run's mean, in reference standard deviations.
    warmup, reference
        Values for the initial estimates of level and scale, and until which they are refined.
    in_control, block_size
        Optional in-control segment (and bootstrap block length) to calibrate ``arl0`` on.
    warmup_test
        As CUSUM's: test the warm-up for a change of the mean when it ends (a change there is otherwise taken
        into the reference level and scale), a permutation test at ``warmup / arl0`` (a raw ``threshold``: the
        ARL of its shipped calibration curve, and without one the test is off), alarming at the split and
        re-warming on the values after it.  None or true (default): on; false: off; a number in (0, 0.05]:
        that level.
    stream
        Name of the watched stream.

    Examples
    --------
    >>> import random
    >>> rng = random.Random(11)
    >>> det = BOCPD(arl0=1000, stream="eval/acc")
    >>> values = [rng.gauss(0.40, 0.02) for _ in range(200)] + [rng.gauss(0.37, 0.02) for _ in range(50)]
    >>> for step, x in enumerate(values):
    ...     alarm = det.update(x, step)
    ...     if alarm:
    ...         print(alarm.step, alarm.direction, alarm.location)
    202 down 200
    """

    name = "bocpd"
    _threshold_param = "threshold"
    _state = ("_warm", "_warm_steps", "_level", "_scale", "_n", "_m2", "_learning", "_logp", "_sums",
              "_last_count", "_age", "_recent", "_recent_steps", "_factor")
    _default_arl0 = 5000.0
    _dummy_threshold = 0.5
    _table_max_arl = 12000.0
    _calibration_runs = 150
    _simulated_max_arl = 250.0  # 150 runs x 750 updates of ~35 us

    def __init__(self, hazard: float = 1 / 250, threshold: float | None = None, arl0: float | None = None,
                 max_run_length: int = 256, prior_scale: float = 2.0, warmup: int = 50, reference: int = 500,
                 in_control=None, block_size: int | None = None, warmup_test: bool | float | None = None,
                 stream: str = ""):
        owner = self.name
        self.hazard = check_float(owner, "hazard", hazard, 0.0, 0.5, lo_open=True)
        self.threshold = threshold
        self.arl0 = arl0
        self.max_run_length = check_int(owner, "max_run_length", max_run_length, 4, 100_000)
        self.prior_scale = check_float(owner, "prior_scale", prior_scale, 0.0, 1e6, lo_open=True)
        self.warmup = check_int(owner, "warmup", warmup, 3, 1_000_000)
        self.reference = check_int(owner, "reference", reference, self.warmup, 100_000_000)
        self.in_control, self.block_size = check_in_control(owner, in_control, block_size)
        self.warmup_test = check_warmup_test(owner, warmup_test)
        self.stream = stream
        p = self._threshold_from(threshold, arl0, self._default_arl0,
                                 lambda v: check_float(owner, "threshold", v, 0.0, 1.0, lo_open=True,
                                                       hi_open=True))
        self.threshold_ = p
        size = self.max_run_length
        self._prec0 = 1.0 / (self.prior_scale * self.prior_scale)
        self._counts = np.arange(1.0, size + 1.0)
        self._log_h = math.log(self.hazard)
        self._log_1mh = math.log1p(-self.hazard)
        self._reset()

    def _statistic_threshold(self) -> float:
        return self._logit_p

    def _warmup_alarm(self, step: int) -> Alarm | None:
        """A change inside the warm-up (see ``warmup_test``): an alarm now, at the split, and the values after it
        start the next warm-up; None when the warm-up is one regime."""
        warm = self._warm
        # (the warm-up's own steps: the deque of recent ones holds max_run_length, which a warm-up can exceed;
        # a state saved before they were kept has fewer)
        steps = self._warm_steps if len(self._warm_steps or ()) >= len(warm) else self._recent_steps
        found = self._warmup_split(warm, steps, step, self._warmup_test_level())
        if found is None:
            return None
        i, side, location, steps, message = found
        self._reset()
        self._warm, self._warm_steps = list(warm[i:]), list(steps[i:])
        self._recent.extend(warm[i:])
        self._recent_steps.extend(steps[i:])
        return Alarm(step, self.name, self.stream, side, location, message)

    def _calibration_params(self) -> dict:
        return {"hazard": self.hazard, "max_run_length": self.max_run_length, "prior_scale": self.prior_scale,
                "warmup": self.warmup, "reference": self.reference}

    @classmethod
    def _threshold_of(cls, stat: float) -> float:
        return 1.0 / (1.0 + math.exp(-stat))

    @property
    def threshold_(self) -> float:
        return self._p

    @threshold_.setter
    def threshold_(self, p: float) -> None:
        self._p = p
        self._logit_p = _logit(p) if 0.0 < p < 1.0 else math.inf

    def _disable_alarms(self) -> None:
        self._p, self._logit_p = 1.0, math.inf

    def _reset(self) -> None:
        self._warm: list[float] | None = []
        self._warm_steps: list[int] | None = []  # the steps of _warm
        self._level = 0.0
        self._scale = 1.0
        self._n = 0
        self._m2 = 0.0
        self._learning = True
        size = self.max_run_length
        self._logp = np.full(size, -np.inf)
        self._sums = np.zeros(size)
        self._last_count = float(size)
        self._age = 0  # values in the current run (warm-up included)
        self._log_odds = -math.inf
        self._factor = 1.0  # a power of two the values are scaled by (1 unless they are huge: see _start)
        self._recent: collections.deque = collections.deque(maxlen=size)
        self._recent_steps: collections.deque = collections.deque(maxlen=size)

    def state_dict(self) -> dict:
        sd = super().state_dict()
        sd["logp"] = [None if v == -math.inf else v for v in self._logp.tolist()]
        sd["sums"] = self._sums.tolist()
        return sd

    def _after_load(self) -> None:
        self._logp = np.array([-math.inf if v is None else v for v in self._logp], dtype=float)
        self._sums = np.array(self._sums, dtype=float)
        self._log_odds = self._odds()

    def _statistic(self) -> float:
        return self._log_odds

    def _odds(self) -> float:
        if self._warm is not None:
            return -math.inf
        lf = float(self._logp[min(self._age, self.max_run_length) - 1])
        if lf >= 0.0:
            return -math.inf
        return math.log(-math.expm1(lf)) - lf

    def update(self, value: float, step: int) -> Alarm | None:
        if type(value) is not float:
            value = self._float(value)
        if value - value != 0.0:  # NaN or inf: ignored
            return None
        self._recent.append(value)
        self._recent_steps.append(step)
        if self._warm is not None:
            self._warm.append(value)
            self._warm_steps.append(step)
            if len(self._warm) >= self.warmup:
                if self.warmup_test is not False and self._logit_p != math.inf:
                    alarm = self._warmup_alarm(step)
                    if alarm is not None:
                        return alarm
                self._start(self._warm)
            return None
        level, scale = self._level, self._scale
        value *= self._factor
        # A value beyond 1e100 reference scales is a change whatever its size; clipped, its square stays finite.
        if not level - _CLIP * scale <= value <= level + _CLIP * scale:
            value = min(max(value, level - _CLIP * scale), level + _CLIP * scale)
        var0 = scale * scale
        old_logp, old_sums = self._logp, self._sums
        prec = self._prec0 + self._counts
        prec[-1] = self._prec0 + self._last_count
        mean = (self._prec0 * level + old_sums) / prec
        var = var0 * (1.0 + 1.0 / prec)
        ll = -0.5 * (_LOG_2PI + np.log(var) + (value - mean) ** 2 / var)
        v_new = var0 * (1.0 + 1.0 / self._prec0)
        ll_new = -0.5 * (_LOG_2PI + math.log(v_new) + (value - level) ** 2 / v_new)
        grown = old_logp + ll + self._log_1mh
        logp = np.empty_like(grown)
        logp[0] = self._log_h + ll_new  # a change before this value: the run restarts with it
        logp[1:] = grown[:-1]
        logp[-1] = np.logaddexp(grown[-2], grown[-1])
        top = logp.max()
        logp -= top + math.log(np.exp(logp - top).sum())
        sums = np.empty_like(old_sums)
        sums[0] = 0.0
        sums[1:] = old_sums[:-1]
        # The last bin holds every run longer than the truncation; it keeps the statistics of whichever of
        # the two runs merging into it carries more mass.
        if grown[-2] > grown[-1]:
            self._last_count = self._counts[-2]
        else:
            sums[-1] = old_sums[-1]
        sums += value
        self._logp, self._sums = logp, sums
        self._last_count += 1.0
        self._age += 1
        self._log_odds = odds = self._odds()
        if odds > self._logit_p:
            return self._alarm(step, odds)
        if self._learning and odds < _FREEZE_LOG_ODDS:
            self._learn(value)
        return None

    def _start(self, values: list[float]) -> None:
        """End of warm-up: reference estimates, and the warm-up values as the initial run."""
        level, scale, self._n = screened_moments(values)  # (huge values handled there)
        # Huge values (1e160 and up) are data: the model runs on them scaled by a power of two (exact), since
        # the model is scale-free and their squares would overflow.  The factor comes from the screened level
        # and scale, not from the largest value: one wild 1e160 among values near 1 scaled them to 1e-160,
        # below the scale's floor, and the detector never alarmed again (found in review).
        big = max(abs(level), scale)
        self._factor = 2.0 ** -math.frexp(big)[1] if big > _HUGE else 1.0
        self._level, self._scale = level * self._factor, scale * self._factor
        self._m2 = self._scale * self._scale * (self._n - 1)
        self._learning = self._n < self.reference
        size = self.max_run_length
        age = len(values)
        self._logp = np.full(size, -np.inf)
        self._sums = np.zeros(size)
        self._last_count = float(max(size, age))
        self._logp[min(age, size) - 1] = 0.0
        # The warm-up run sits exactly at the reference level: outliers the screening dropped must not
        # make the no-change hypothesis look wrong at the next value.
        self._sums[min(age, size) - 1] = self._level * age
        self._age = age
        self._warm = self._warm_steps = None
        self._log_odds = -math.inf

    def _learn(self, value: float) -> None:
        n = self._n + 1
        delta = value - self._level
        level = self._level + delta / n
        self._m2 += delta * (value - level)
        scale = math.sqrt(self._m2 / (n - 1))
        self._n, self._level = n, level
        if scale > 0.0:
            self._scale = scale
        if n >= self.reference:
            self._learning = False

    def _alarm(self, step: int, odds: float) -> Alarm:
        size = self.max_run_length
        full = min(self._age, size) - 1
        logp = self._logp.copy()
        logp[full] = -np.inf
        j = int(np.argmax(logp))
        run = j + 1  # values in the most probable new run
        recent = list(self._recent)
        steps = list(self._recent_steps)
        run = min(run, len(recent))
        location = steps[-run]
        prec = self._prec0 + run
        post_mean = (self._prec0 * self._level + float(self._sums[j])) / prec
        direction = "up" if post_mean > self._level else "down"
        prob = 1.0 / (1.0 + math.exp(-odds))
        factor = self._factor
        level, scale, post_mean = self._level / factor, self._scale / factor, post_mean / factor
        self._reset()
        self._warm, self._warm_steps = recent[-run:], steps[-run:]
        self._recent.extend(recent[-run:])
        self._recent_steps.extend(steps[-run:])
        if len(self._warm) >= self.warmup:
            self._start(self._warm)
        return Alarm(step, self.name, self.stream, direction, location,
                     f"{self.stream or 'stream'}: change {direction} near step {location} (posterior probability "
                     f"{prob:.6f} > {self._p:.6f}; new run mean {post_mean:.6g} vs reference {level:.6g}, "
                     f"scale {scale:.3g})")

"""``window_test``: a two-sample test on the windows before and after a split (a confirmation stage)."""

from __future__ import annotations

import collections
import math
import warnings

import numpy as np

from adaptive_eval.detectors._base import (
    Alarm,
    Detector,
    best_split,
    check_choice,
    check_float,
    check_in_control,
    check_int,
)

__all__ = ["WindowTest"]

_METHODS = ("mannwhitneyu", "ks", "cusum_ols")


def _pvalue(method: str, before, after) -> float:
    from scipy import stats

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if method == "mannwhitneyu":
            return float(stats.mannwhitneyu(before, after, alternative="two-sided").pvalue)
        if method == "ks":
            return float(stats.ks_2samp(before, after).pvalue)
    from statsmodels.stats.diagnostic import breaks_cusumolsresid

    values = np.concatenate([before, after])
    resid = values - values.mean()  # OLS residuals of a constant-mean model
    if not np.any(resid):
        return 1.0
    return float(breaks_cusumolsresid(resid, ddof=1)[1])


class WindowTest(Detector):
    """Confirm (or detect) a change with a two-sample test on windows before and after a split.

    The detector keeps the last ``2 * window`` values.  Every ``every`` updates, once full, it tests the
    older half against the newer half and alarms when the p-value is at most ``alpha``:

    * ``method="mannwhitneyu"``: scipy's Mann-Whitney U test (a shift in location, distribution-free);
    * ``method="ks"``: scipy's two-sample Kolmogorov-Smirnov test (any change in distribution);
    * ``method="cusum_ols"``: statsmodels' CUSUM test of parameter stability
      (``breaks_cusumolsresid``) on the residuals of a constant-mean fit over the whole trailing window.

    The alarm's ``location`` is the least-squares split of the window (the step where one change in mean
    fits best) and its direction the sign of the change in median across it.  After an alarm the values
    before the location are dropped, so the new regime becomes the reference for the next test.

    As a second stage, call :meth:`test` with the step of a suspected change (a first-stage alarm's
    ``location``) to get the p-value of the values before against the values after it.

    Calibration: ``arl0`` instead of ``alpha`` (default ``arl0=5000``), simulated on i.i.d. standard normal
    in-control values or a block bootstrap of ``in_control``.  Successive tests overlap, so ``alpha`` is much
    smaller than ``every / arl0``; on autocorrelated data the tests reject far more often than on i.i.d. data.

    Parameters
    ----------
    method
        ``"mannwhitneyu"``, ``"ks"`` or ``"cusum_ols"``.
    window
        Values on each side of the split.
    alpha
        p-value at or below which the detector alarms.
    arl0
        In-control average run length to calibrate ``alpha`` for.
    every
        Test every this many updates (each test costs 0.05 to 0.5 ms).
    in_control, block_size
        Optional in-control segment (and bootstrap block length) to calibrate ``arl0`` on.
    stream
        Name of the watched stream.

    Examples
    --------
    >>> import random
    >>> rng = random.Random(8)
    >>> det = WindowTest(arl0=1000, stream="eval/acc")
    >>> values = [rng.gauss(0.5, 0.05) for _ in range(300)] + [rng.gauss(0.45, 0.05) for _ in range(100)]
    >>> for step, x in enumerate(values):
    ...     alarm = det.update(x, step)
    ...     if alarm:
    ...         print(alarm.step, alarm.direction, alarm.location)
    319 down 289
    >>> det = WindowTest(alpha=1e-12)
    >>> for step, x in enumerate(values[200:330], start=200):
    ...     _ = det.update(x, step)
    >>> det.test(300) < 1e-3
    True
    """

    name = "window_test"
    _threshold_param = "alpha"
    _state = ("_values", "_steps", "_count")
    _default_arl0 = 5000.0
    _dummy_threshold = 0.01
    _table_max_arl = 30000.0
    _calibration_runs = 200
    _simulated_max_arl = 2000.0  # 200 runs x 6,000 updates of ~1.8 us

    def __init__(self, method: str = "mannwhitneyu", window: int = 50, alpha: float | None = None,
                 arl0: float | None = None, every: int = 10, in_control=None, block_size: int | None = None,
                 stream: str = ""):
        owner = self.name
        self.method = check_choice(owner, "method", method, _METHODS)
        self.window = check_int(owner, "window", window, 5, 100_000)
        self.alpha = alpha
        self.arl0 = arl0
        self.every = check_int(owner, "every", every, 1, 1_000_000)
        self.in_control, self.block_size = check_in_control(owner, in_control, block_size)
        self.stream = stream
        a = self._threshold_from(alpha, arl0, self._default_arl0,
                                 lambda v: check_float(owner, "alpha", v, 0.0, 1.0, lo_open=True, hi_open=True))
        self.alpha_ = a
        self._reset()

    @classmethod
    def _table_variants(cls) -> list[dict]:
        return [{}, {"method": "ks"}, {"method": "cusum_ols"}]

    def _calibration_params(self) -> dict:
        return {"method": self.method, "window": self.window, "every": self.every}

    @classmethod
    def _threshold_of(cls, stat: float) -> float:
        return math.exp(-stat)

    def _disable_alarms(self) -> None:
        self.alpha_ = 0.0

    def _reset(self) -> None:
        self._values: collections.deque = collections.deque(maxlen=2 * self.window)
        self._steps: collections.deque = collections.deque(maxlen=2 * self.window)
        self._count = 0  # updates since the buffer was last cut
        self._stat = 0.0

    def _statistic(self) -> float:
        return self._stat

    def _dead_time(self) -> tuple[int, str, str]:
        return 2 * self.window, f"the {2 * self.window} values before the first test (2 x window)", "window"

    def update(self, value: float, step: int) -> Alarm | None:
        if type(value) is not float:
            value = self._float(value)
        if value - value != 0.0:  # NaN or inf: ignored
            return None
        self._values.append(value)
        self._steps.append(step)
        self._count += 1
        w = self.window
        if len(self._values) < 2 * w or (self._count - 2 * w) % self.every:
            return None
        values = np.fromiter(self._values, float, 2 * w)
        # (values near 1.7e308 overflow numpy's sums: its RuntimeWarning, an exception under warnings-as-errors, was
        # raised inside observe(); the test's result stands on inf; a probe)
        with np.errstate(over="ignore", invalid="ignore"):
            p = _pvalue(self.method, values[:w], values[w:])
            self._stat = -math.log(p) if p > 0.0 else 745.0
            if p <= self.alpha_ and self.alpha_ > 0.0:
                return self._alarm(step, values, p)
        return None

    def test(self, split: int | None = None) -> float:
        """p-value of the values before ``split`` (a step) against those from it on (default: the middle).

        ``nan`` when either side has fewer than 3 values.  For ``cusum_ols`` the split is ignored: the test
        runs on the whole buffer.
        """
        steps = list(self._steps)
        values = np.fromiter(self._values, float, len(self._values))
        cut = len(values) // 2 if split is None else sum(1 for s in steps if s < split)
        if min(cut, len(values) - cut) < 3:
            return math.nan
        return _pvalue(self.method, values[:cut], values[cut:])

    def _alarm(self, step: int, values: np.ndarray, p: float) -> Alarm:
        steps = list(self._steps)
        cut = best_split(values)  # the test says something changed; least squares says where
        before, after = values[:cut], values[cut:]
        direction = "up" if np.median(after) > np.median(before) else "down"
        location = steps[cut]
        # The values after the change become the reference for the next test.
        kept_v, kept_s = list(self._values)[cut:], steps[cut:]
        self._reset()
        self._values.extend(kept_v)
        self._steps.extend(kept_s)
        self._count = len(kept_v)
        return Alarm(step, self.name, self.stream, direction, location,
                     f"{self.stream or 'stream'}: {direction} change near step {location} "
                     f"({self.method} p-value {p:.3g} <= {self.alpha_:.3g})")

    @classmethod
    def _statistic_path(cls, params: dict, values: np.ndarray) -> np.ndarray:
        """The statistic after each update of a never-alarming detector on ``values`` (vectorized, for calibration)."""
        from scipy import stats

        w, every, method = params["window"], params["every"], params["method"]
        n = len(values)
        out = np.zeros(n)
        ends = np.arange(2 * w, n + 1, every)  # the count of values at each test
        if len(ends) == 0:
            return out
        wins = np.lib.stride_tricks.sliding_window_view(values, 2 * w)[ends - 2 * w]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            if method == "mannwhitneyu":
                p = stats.mannwhitneyu(wins[:, :w], wins[:, w:], alternative="two-sided", axis=1).pvalue
            elif method == "ks":
                p = stats.ks_2samp(wins[:, :w], wins[:, w:], axis=1).pvalue
            else:
                p = np.array([_pvalue(method, row[:w], row[w:]) for row in wins])
        p = np.asarray(p, dtype=float)
        stat = np.where(p > 0.0, -np.log(np.where(p > 0.0, p, 1.0)), 745.0)
        # The statistic holds between tests; only the test updates can set a new record.
        out[ends - 1] = stat
        return out

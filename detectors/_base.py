"""The detector contract: :class:`Alarm`, the :class:`Detector` base class and shared helpers."""

from __future__ import annotations

import collections
import dataclasses
import math
import numbers
import sys
from collections.abc import Mapping, Sequence

__all__ = ["Alarm", "Detector"]

_DIRECTIONS = ("both", "up", "down")


@dataclasses.dataclass(frozen=True)
class Alarm:
    """One alarm raised by a detector.

    ``step`` is the step of the update that raised it; ``location`` the estimated step of the change
    (None where the detector cannot tell); ``direction`` is ``"up"``, ``"down"`` or None (no direction:
    a non-finite value, a change in distribution rather than level).
    """

    step: int
    detector: str
    stream: str
    direction: str | None
    location: int | None
    message: str


class Detector:
    """Base class of every detector.

    A detector watches one stream: :meth:`update` takes one value and its step and returns an
    :class:`Alarm` or None.  Hyper-parameters are stored under their constructor names; all mutable state
    is created by ``_reset()`` (called by ``__init__`` and :meth:`reset`), and listed in ``_state`` so that
    :meth:`state_dict` / :meth:`load_state_dict` carry it as plain values.

    Every detector accepts any real number: ``float`` directly (the fast path), ints, numpy scalars and
    one-element arrays or tensors.  NaN and inf are ignored (state unchanged) except by ``nonfinite``;
    anything else (strings, None, booleans, arrays of several values) raises ``TypeError`` naming the stream.
    """

    name: str = ""
    # Attribute names of the mutable state, saved by state_dict (without the leading underscore).
    _state: tuple[str, ...] = ()
    # Name of the raw threshold parameter that arl0 calibrates (None: the detector has no threshold).
    _threshold_param: str | None = None
    # Whether its alarms are of a change in the stream's level or distribution: such a detector past its warm-up
    # makes its stream a witness that can corroborate another's alarm (not nonfinite's NaN, nor stuck's repeats).
    sees_level: bool = True

    stream: str

    # ---- calibration hooks (see _calibration.py); only thresholded detectors use them
    _calibration_method = "first_passage"  # or "bisection" for detectors without a statistic
    _discrete_statistic = False  # the statistic takes few values: pick the next achievable threshold up
    _dummy_threshold: float = 1.0  # a valid raw threshold, used to build instances for simulation
    _table_max_arl = 30000.0  # shipped curves reach this ARL; beyond, extrapolated
    # Other settings are simulated up to this ARL at most (a few seconds of pure-Python updates on 2 cores; a
    # larger arl0 is extrapolated from it, as the shipped curves are beyond theirs): a simulation costs runs x
    # 3 arl0 updates, which at arl0 1e6 took an hour (found in review).  Set per class from its update's cost.
    _simulated_max_arl = 1000.0
    _calibration_runs = 200
    _stat_range = (0.0, 1.0)  # bisection range of the statistic threshold

    @classmethod
    def _table_variants(cls) -> list[dict]:
        """Parameter variants whose calibration curves ship with the package."""
        return [{}]

    def _calibration_params(self) -> dict:
        """The hyper-parameters that change the in-control statistic path (JSON-able)."""
        raise NotImplementedError

    @classmethod
    def _threshold_of(cls, stat: float) -> float:
        """Raw threshold value for a threshold on the statistic (identity unless overridden)."""
        return stat

    @classmethod
    def _calibration_instance(cls, params: dict, threshold: float | None = None) -> "Detector":
        """A detector for simulation: with ``threshold``, or never alarming (``_statistic`` still moves)."""
        det = cls(**params, **{cls._threshold_param: cls._dummy_threshold if threshold is None else threshold})
        if threshold is None:
            det._disable_alarms()
        return det

    def _threshold_from(self, threshold, arl0, default_arl0, check_threshold) -> float:
        """The raw threshold: ``threshold`` if given (checked), else calibrated for ``arl0`` (or
        ``default_arl0``) by simulation, from the shipped table or the on-disk cache when they have it."""
        value, arl0 = resolve_threshold(self.name, threshold, arl0, default_arl0, check_threshold)
        dead, what, param = self._dead_time()
        if value is None and arl0 <= dead:
            # (else the calibration returns the lowest threshold, which still alarms later than asked: a
            # degenerate detector, window_test's alpha 1 alarming at every test; found in review)
            raise ValueError(f"{self.name}: arl0 {arl0:g} is not above {what}: the run length counts the "
                             f"values before the first alarm can come, so every threshold reaches it; give a "
                             f"larger arl0, a smaller {param} or a raw {self._threshold_param}")
        if value is None:
            from adaptive_eval.detectors._calibration import calibrate_threshold

            value = calibrate_threshold(self, arl0)
        return value

    def _dead_time(self) -> tuple[int, str, str]:
        """An ``arl0`` must be above this many values (no alarm can come within them), what they are in words,
        and the parameter that sets them."""
        warmup = getattr(self, "warmup", None)
        return (warmup, f"warmup {warmup}", "warmup") if isinstance(warmup, int) else (0, "0", "")

    def _disable_alarms(self) -> None:
        self.threshold_ = math.inf

    # ---- the warm-up test (detectors with a ``warmup_test`` parameter: cusum, bocpd)
    def _statistic_threshold(self) -> float:
        """The calibration statistic's threshold of the current raw threshold (see ``_threshold_of``)."""
        raise NotImplementedError

    def _warmup_test_level(self, fallback_arl: float | None = None) -> float | None:
        """The significance level of the warm-up test: ``warmup_test`` when it is a number, else the false-alarm
        probability the detector has over as many steps, ``warmup / ARL``.  The ARL: ``arl0`` when the
        threshold was calibrated for it; for a raw ``threshold``, its shipped calibration curve's ARL (so that
        both give the same alarms), else ``fallback_arl`` (None: no level, the test is off)."""
        wt = self.warmup_test
        if wt is not None and not isinstance(wt, bool):
            return float(wt)
        if self.threshold is None:
            arl = self.arl0 if self.arl0 is not None else self._default_arl0
        else:
            from adaptive_eval.detectors._calibration import shipped_arl

            arl = shipped_arl(self, self._statistic_threshold())
            if arl is None:
                arl = fallback_arl
        if arl is None:
            return None
        # (12 digits: a raw threshold read back from the curve gives the arl0's level to the last bit or two,
        # which must not decide a p-value that lands exactly on it)
        return min(_MAX_LEVEL, float(f"{self.warmup / arl:.12g}"))

    def _warmup_split(self, warm: list[float], steps, step: int, level: float | None,
                      direction: str = "both") -> tuple | None:
        """Run the warm-up test on ``warm`` (values at ``steps``, the last ``len(warm)`` of them): None, or
        ``(i, side, location, steps, message)`` where ``warm[i:]`` (at ``steps[i:]``) is the new regime."""
        if level is None:
            return None
        found = warmup_change(warm, level, direction, max(3, self.warmup // 10))
        if found is None:
            return None
        i, side, p = found
        steps, before, after = self._split(warm, steps, step, i)
        m = len(warm) - i
        message = (f"{self.stream or 'stream'}: level {side} inside the warm-up (mean {before:.6g} over {i} "
                   f"values, then {after:.6g} over {m}; permutation p {p:.2g} <= {level:.2g}), change near step "
                   f"{steps[i]}")
        return i, side, steps[i], steps, message

    @staticmethod
    def _split(warm: list[float], steps, step: int, i: int) -> tuple[list, float, float]:
        """``(steps, mean before i, mean from i on)`` of a warm-up split at ``i``: ``steps`` the warm-up values'
        own, the last ``len(warm)`` of them (a state saved before warm-up steps were kept, or a longer warm-up:
        padded with the first)."""
        steps = list(steps or [])[-len(warm):]
        if len(steps) < len(warm):
            steps = [steps[0] if steps else step] * (len(warm) - len(steps)) + steps
        m = len(warm) - i
        return steps, sum(v / i for v in warm[:i]), sum(v / m for v in warm[i:])  # (no overflow)

    def _statistic(self) -> float:
        """The alarm statistic: the detector alarms on the first update where it exceeds the threshold."""
        raise NotImplementedError

    @property
    def armed(self) -> bool:
        """Whether the detector can raise a level alarm now (False while it is still warming up)."""
        return True

    def update(self, value: float, step: int) -> Alarm | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _finite_path(self):
        """The update to call with a value already known to be a finite ``float``: :meth:`update` without
        its type and finiteness checks, where a detector has such a method (``AdaptiveEvaluator.observe``
        and the calibration simulations call it on every value).  Same alarms and states as :meth:`update`
        on those values.  By default :meth:`update` itself."""
        return self.update

    def _reset(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def reset(self) -> None:
        """Forget everything seen so far (hyper-parameters and calibrated thresholds are kept)."""
        self._reset()

    # ----------------------------------------------------------------- state
    def state_dict(self) -> dict:
        """The mutable state as plain (JSON-able) values."""
        sd = {"type": self.name, "version": 1}
        for attr in self._state:
            sd[attr.lstrip("_")] = _plain(getattr(self, attr))
        return sd

    def load_state_dict(self, sd: Mapping) -> None:
        """Restore a state taken by :meth:`state_dict`; missing fields keep their fresh values."""
        if not isinstance(sd, Mapping):
            raise TypeError(f"{self.name}: state_dict must be a mapping, got {type(sd).__name__}")
        kind = sd.get("type", self.name)
        if kind != self.name:
            raise ValueError(f"state_dict is for detector {kind!r}, not {self.name!r}")
        self._reset()
        for attr in self._state:
            key = attr.lstrip("_")
            if key in sd:
                current = getattr(self, attr)
                value = sd[key]
                _check_kind(self, key, current, value)
                if value is not None and isinstance(current, collections.deque):
                    value = collections.deque(value, maxlen=current.maxlen)
                elif value is not None and isinstance(current, list):
                    value = list(value)
                setattr(self, attr, value)
        self._after_load()
        self._try_loaded()

    def _try_loaded(self) -> None:
        """Update a copy of this freshly loaded detector with a few values, so that a state that does not fit
        together (lists of different lengths, a value of the wrong kind where a fresh detector has None) is a
        ``ValueError`` at load, not a ``TypeError`` in a later ``observe()`` (found by fuzzing saved states: 6%
        of single-value edits loaded, then raised inside the training step)."""
        import copy

        probe = copy.deepcopy(self)
        level = getattr(self, "_level", None)
        level = level if type(level) is float and math.isfinite(level) else 0.0
        try:
            for i, value in enumerate((level, level + 1.0, level - 1.0, math.nan)):
                probe.update(value, 2**40 + i)
        except Exception as exc:  # noqa: BLE001 - any: the state is what failed
            raise ValueError(f"{self.stream or 'stream'}: {self.name} state does not load: {type(exc).__name__}: "
                             f"{exc}") from exc

    def _after_load(self) -> None:
        """Rebuild derived state after :meth:`load_state_dict` (override where needed)."""

    # ----------------------------------------------------------------- helpers
    def _float(self, value) -> float:
        """Slow path of the input check: anything that is not exactly a ``float``."""
        return to_float(value, self.stream, self.name)

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self._params().items())
        return f"{type(self).__name__}({params})"

    def _params(self) -> dict:
        import inspect

        out = {}
        for p in inspect.signature(type(self).__init__).parameters.values():
            if p.name != "self" and hasattr(self, p.name):
                value = getattr(self, p.name)
                if p.default is inspect.Parameter.empty or value is not p.default and value != p.default:
                    out[p.name] = value
        return out


def _check_kind(det: Detector, key: str, fresh, value) -> None:
    """A saved field's ``value`` is of the kind of the ``fresh`` detector's (a number, a flag, a list of numbers or
    of lists, text); where the fresh value is None anything plain goes (the trial update checks it)."""
    def number(v):
        return isinstance(v, numbers.Real) and not isinstance(v, bool)

    if not _all_finite(value):
        # (no detector holds NaN or inf in its state, whatever it was fed: a saved level edited to NaN loaded and
        # blinded the detector for good, never alarming again; found in review)
        raise ValueError(f"{det.stream or 'stream'}: {det.name} state field {key!r}: expected finite numbers, "
                         f"got {_plain(value)!r}")
    if value is None or fresh is None:
        return
    if isinstance(fresh, bool):
        ok = isinstance(value, bool)
    elif number(fresh):
        ok = number(value)
    elif isinstance(fresh, str):
        ok = isinstance(value, str)
    elif isinstance(fresh, (list, collections.deque)):
        ok = isinstance(value, (list, tuple, collections.deque)) and (
            all(number(v) or v is None for v in value) or all(isinstance(v, (list, tuple)) for v in value))
        # (a list a fresh detector sizes, one entry per side, keeps its length: cusum's starts one short raised
        # IndexError at its next alarm)
        ok = ok and (not fresh or isinstance(fresh, collections.deque) or len(value) == len(fresh))
    else:
        return
    if not ok:
        raise ValueError(f"{det.stream or 'stream'}: {det.name} state field {key!r}: expected a value like "
                         f"{_plain(fresh)!r}, got {value!r}")


def _all_finite(value) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (list, tuple, collections.deque)):
        return all(_all_finite(v) for v in value)
    return True


def _plain(value):
    if isinstance(value, (collections.deque, list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0:  # torch.load(weights_only) refuses it
        return value.item()
    return value


def to_float(value, stream: str = "", detector: str = "") -> float:
    """``value`` as a float, or ``TypeError`` naming the stream.  Overflowing integers become +-inf."""
    tp = type(value)
    if tp is float:
        return value
    if tp is int:
        try:
            return float(value)
        except OverflowError:
            return math.inf if value > 0 else -math.inf
    where = f"{detector} on stream {stream!r}" if detector else f"stream {stream!r}"
    if tp is bool or value is None or isinstance(value, (str, bytes, bytearray, bool)):
        raise TypeError(f"{where}: expected a real number, got {tp.__name__} {value!r}")
    item = getattr(value, "item", None)
    if callable(item):  # numpy scalars and arrays, torch tensors
        numel = getattr(value, "numel", None)
        size = numel() if callable(numel) else getattr(value, "size", 1)
        if callable(size):
            size = size()
        if size != 1:
            shape = getattr(value, "shape", None)
            raise TypeError(f"{where}: expected one number, got {tp.__name__} of {size} elements"
                            + (f" (shape {tuple(shape)})" if shape is not None else ""))
        try:
            inner = item()
        except Exception as exc:  # noqa: BLE001 - any failure to extract is a type problem
            raise TypeError(f"{where}: cannot read a number from {tp.__name__}: {exc}") from None
        if type(inner) is float:
            return inner
        if type(inner) is tp:  # (np.longdouble's item() is itself: recursing on it raised RecursionError)
            try:
                return float(inner)
            except (TypeError, ValueError, OverflowError):
                raise TypeError(f"{where}: cannot read a number from {tp.__name__}") from None
        return to_float(inner, stream, detector)
    if isinstance(value, numbers.Real) or hasattr(value, "__float__"):
        try:
            return float(value)
        except OverflowError:
            return math.inf if value > 0 else -math.inf
        except (TypeError, ValueError):
            pass
    raise TypeError(f"{where}: expected a real number, got {tp.__name__}")


# --------------------------------------------------------------------- validation helpers
def check_int(owner: str, name: str, value, lo: int, hi: int) -> int:
    """``value`` as an int in [lo, hi], or ``ValueError`` naming the parameter."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ValueError(f"{owner}: {name} must be an integer in [{lo}, {hi}], got {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"{owner}: {name} must be an integer in [{lo}, {hi}], got {value!r}")
    return int(value)


def check_float(owner: str, name: str, value, lo: float = -math.inf, hi: float = math.inf, *,
                lo_open: bool = False, hi_open: bool = False) -> float:
    """``value`` as a finite float within the bounds, or ``ValueError`` naming the parameter."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if ok:
        value = float(value)
        ok = math.isfinite(value) or (value == hi and not hi_open and math.isinf(hi))
        ok = ok and (value > lo if lo_open else value >= lo) and (value < hi if hi_open else value <= hi)
    if not ok:
        left = "(" if lo_open else "["
        right = ")" if hi_open else "]"
        raise ValueError(f"{owner}: {name} must be a number in {left}{lo}, {hi}{right}, got {value!r}")
    return value


def check_choice(owner: str, name: str, value, choices: Sequence[str]) -> str:
    if value not in choices:
        raise ValueError(f"{owner}: {name} must be one of {', '.join(map(repr, choices))}; got {value!r}")
    return value


def check_arl0(owner: str, arl0) -> float:
    return check_float(owner, "arl0", arl0, 1.0, 1e7, lo_open=True)


def check_in_control(owner: str, in_control, block_size) -> tuple[list[float] | None, int | None]:
    """Validate the optional in-control segment used to calibrate ``arl0`` by block bootstrap."""
    if in_control is None:
        if block_size is not None:
            check_int(owner, "block_size", block_size, 1, 100_000)
        return None, block_size
    if isinstance(in_control, (str, bytes)) or not hasattr(in_control, "__len__"):
        raise ValueError(f"{owner}: in_control must be a sequence of numbers, got {type(in_control).__name__}")
    values = []
    for i, v in enumerate(in_control):
        try:
            values.append(to_float(v))
        except TypeError:  # (it said "cusum on stream 'in_control'", a stream the user never named; a probe)
            raise ValueError(f"{owner}: in_control[{i}] must be a number, got {type(v).__name__} {v!r}") from None
    values = [v for v in values if math.isfinite(v)]
    if len(values) < 20:
        raise ValueError(f"{owner}: in_control needs at least 20 finite values, got {len(values)}")
    if min(values) == max(values):
        # (a bootstrap of it never varies: cusum's calibration failed with a bare RuntimeError, spike's gave a
        # threshold of 0 and 485 alarms in 1,000 steps of noise; a probe)
        raise ValueError(f"{owner}: in_control is constant (every value {values[0]!r}): there is no in-control noise "
                         "to calibrate a threshold on; give a segment of the stream as it varies, or a threshold")
    if block_size is not None:
        block_size = check_int(owner, "block_size", block_size, 1, len(values))
    return values, block_size


def resolve_threshold(owner, threshold, arl0, default_arl0, check_threshold):
    """Exactly one of a raw ``threshold`` and ``arl0`` (neither: ``default_arl0``).

    Returns ``(threshold or None, arl0 or None)`` after validation; the caller calibrates when the first is None.
    """
    if threshold is not None and arl0 is not None:
        raise ValueError(f"{owner}: give either threshold or arl0, not both")
    if threshold is not None:
        return check_threshold(threshold), None
    if arl0 is None:
        if default_arl0 is None:
            raise ValueError(f"{owner}: needs a threshold or an arl0")
        arl0 = default_arl0
    return None, check_arl0(owner, arl0)


def robust_level_scale(values: Sequence[float]) -> tuple[float, float]:
    """Median and a robust standard deviation of ``values``.

    The scale is 1.4826 x the median absolute deviation; where more than half the values are equal (MAD 0,
    common for discrete metrics such as a reward averaged over 8 samples) it falls back to 1.2533 x the mean
    absolute deviation, then to a tiny fraction of the level, so that a constant stream still has a scale and
    any later departure from the constant counts as a (large) change.
    """
    s = sorted(values)
    n = len(s)
    mid = n // 2
    med = s[mid] if n % 2 else 0.5 * (s[mid - 1] + s[mid])
    dev = sorted(abs(v - med) for v in s)
    mad = dev[mid] if n % 2 else 0.5 * (dev[mid - 1] + dev[mid])
    scale = 1.482602218505602 * mad
    if not scale > 0.0:
        scale = 1.2533141373155001 * sum(dev) / n
    if not scale > 0.0:
        scale = tiny_scale(med)
    return med, scale


def t_to_z(t: float, nu: float) -> float:
    """A Student-t value with ``nu`` degrees of freedom mapped to the standard normal scale.

    Fisher's approximation ``t (1 - 1/(4 nu)) / sqrt(1 + t^2 / (2 nu))``: within 0.01 of the exact normal
    quantile for ``nu >= 20`` and ``|t| <= 5``, and cheap enough for a per-update path.  Beyond ``|t| = 1e150``
    (where ``t * t`` overflows and the formula would give 0) it is the formula's limit, ``+-(1 - 1/(4 nu))
    sqrt(2 nu)``: a huge deviation stays a huge deviation.

    >>> t_to_z(1e201, 30) == t_to_z(1e300, 30) > t_to_z(50.0, 30) > 7
    True
    """
    if -1e150 < t < 1e150:
        return t * (1.0 - 0.25 / nu) / math.sqrt(1.0 + t * t / (2.0 * nu))
    if t != t:
        return t
    return math.copysign((1.0 - 0.25 / nu) * math.sqrt(2.0 * nu), t)


def best_split(values) -> int:
    """Where one change in mean best splits ``values``: the ``i`` minimizing the squared error of
    ``values[:i]`` and ``values[i:]`` about their own means (least squares; 0 < i < len(values))."""
    import numpy as np

    x = np.asarray(values, dtype=float)
    n = len(x)
    if n < 2:
        return max(n - 1, 0)
    # Centred first: the split is shift-free, and far from zero (1e9 + N(0, 1)) the cumulative sums of the raw
    # values lost the differences to rounding and put the split anywhere (found in review).
    big = np.max(np.abs(x))
    if big > _HUGE or 0.0 < big < 1.0 / _HUGE:  # the split is scale-free; squares of huge values would overflow,
        x = x / big  # those of tiny ones underflow to 0 (every split then equal: an alarm at every step after one)
    x = x - x[n // 2]
    x = x - np.mean(x)
    csum = np.cumsum(x)
    i = np.arange(1, n)
    left = csum[:-1]
    right = csum[-1] - left
    # Maximizing the between-segment sum of squares is minimizing the within-segment one.
    gain = left * left / i + right * right / (n - i)
    return int(np.argmax(gain)) + 1


def tiny_scale(level: float) -> float:
    """The scale given to a constant stream: any visible departure from the constant is a large change.  Relative to
    the level, so that a stream's units change nothing: with a floor of 1e-9 in absolute units (of 1e-9 x the level
    above 1), a stream whose spread was below it (a KL of 1e-12, any metric in units a thousand million times smaller,
    1e11 + N(0, 1)) was taken for a constant and every detector was blind to it (found by a probe on rescaled real
    series).  1e-12 of the level is still thousands of float64 rounding steps: a constant computed in another order
    stays a constant."""
    return 1e-12 * max(1e-30, abs(level))


_HUGE = 1e150  # beyond this a square may overflow


def huge_factor(scale: float) -> float:
    """1, or for a huge ``scale`` the power of two that brings it near 1: the running variance of values that
    large is kept scaled by it (exact), since their squares would overflow to inf and blind the detector."""
    return 2.0 ** -math.frexp(scale)[1] if scale > _HUGE else 1.0


def last_regime(values: Sequence[float], ratio: float = 50.0, least: int = 3) -> int:
    """The index where the last of two regimes of ``values`` begins, or 0 for one regime: at the largest jump
    between neighbours, when every value after it lies more than ``ratio`` times the typical step between
    neighbours (the median non-zero one, the jump left out) away from every value before it, each side at least
    ``least`` values.  A trend, a spike that comes back, one odd first value (a first step's grad norm) or a noisy
    stream is one regime; a burst of huge values and then the stream again is two.

    >>> last_regime([3.4e38] * 5 + [3.0, 3.1, 2.9]), last_regime([1.0, 2.0, 3.0, 4.0]), last_regime([0, 0, 9, 0, 0])
    (5, 0, 0)
    >>> last_regime([50.0, 2.0, 2.1, 1.9, 2.0])
    0
    """
    n = len(values)
    if n < 2 * least:
        return 0
    steps = [abs(b - a) for a, b in zip(values, values[1:])]  # (inf beyond float range: still the largest)
    j = max(range(n - 1), key=steps.__getitem__)
    rest = sorted(d for i, d in enumerate(steps) if i != j and d > 0.0)
    typical = rest[len(rest) // 2] if rest else 0.0
    before, after = values[: j + 1], values[j + 1:]
    if len(before) < least or len(after) < least:
        return 0
    gap = max(min(after) - max(before), min(before) - max(after))
    return j + 1 if gap > ratio * typical and gap > 0.0 else 0


def screened_moments(values: Sequence[float], cut: float = 4.0) -> tuple[float, float, int]:
    """Mean, standard deviation and count of ``values`` after dropping outliers.

    Outliers are values more than ``cut`` robust standard deviations (median / MAD, see
    :func:`robust_level_scale`) from the median.  The moments of the rest are robust to a few wild values
    and, unlike the median and MAD, nearly as efficient as the plain mean and sd on clean data, which
    matters: estimation error in the level and scale is what shortens a CUSUM's in-control run length.
    """
    med, scale = robust_level_scale(values)
    kept = [v for v in values if abs(v - med) <= cut * scale]
    if len(kept) < len(values) and math.isfinite(cut) and all(v == kept[0] for v in kept):
        # Every value kept is one constant.  A value dropped that occurs twice or more is not a wild value but
        # another outcome of a discrete stream (a sparse 0/1 reward: 45 zeros, 5 ones): screened, its scale
        # fell to the tiny scale of a constant and every later 1 was a change (CUSUM on a stationary
        # Bernoulli(0.1) stream: 8 alarms per 1,000 steps instead of 0.2; tests/test_detectors.py).  So is a
        # lone value within ``cut`` units of the constant (one 1 among the zeros of a sparser reward); a lone
        # value further off (a spike of 2000 in a stream constant at 512) is still screened out.
        counts = collections.Counter(values)
        if all(counts[v] >= 2 or abs(v - med) <= cut for v in values if v != kept[0]):
            kept = list(values)
    elif len(kept) < len(values) and math.isfinite(cut):
        kept = _discrete_kept(values, kept, cut)
    n = len(kept)
    big = max(map(abs, kept))
    if big > _HUGE:
        # Huge finite values (a perplexity exp(loss) of a diverging run) are data: squares of 1e160 overflow,
        # so take the moments of the values scaled by a power of two (exact) and scale them back.
        factor = 2.0 ** -math.frexp(big)[1]
        mean, sd, _ = screened_moments([v * factor for v in kept], cut=math.inf)
        return mean / factor, min(sd / factor, sys.float_info.max), n
    mean = sum(kept) / n
    var = sum((v - mean) ** 2 for v in kept) / (n - 1) if n > 1 else 0.0
    sd = math.sqrt(var)
    if not sd > tiny_scale(mean):
        sd = tiny_scale(mean)
    return mean, sd, n


def _discrete_kept(values, kept, cut: float) -> list[float]:
    """``kept``, or all of ``values`` when the stream is discrete and the values dropped are its own outcomes.

    Discrete: the kept values repeat (at most half of them distinct) and lie on one lattice, multiples of the
    smallest gap between them (a count: 0, 1, 2).  A dropped value on that lattice within ``cut`` steps of
    the kept range is another outcome, not a wild value: a lone 2 among the 0s and 1s of a Poisson(0.3) count
    was screened, the scale fell to 0.42 (true 0.55) and every later 2 was a change (CUSUM 121 false alarms on
    20,000 values, 4 expected; found in review).  A float stream never repeats, so it is screened as before;
    a value far off (2000 in a count near 512) is still screened out.
    """
    distinct = sorted(set(kept))
    if len(distinct) < 2 or 2 * len(distinct) > len(kept):
        return kept
    step = min(b - a for a, b in zip(distinct, distinct[1:]))
    if not (math.isfinite(step) and step > 0.0):
        return kept
    lo, hi = distinct[0], distinct[-1]

    def on_lattice(v: float) -> bool:
        q = (v - lo) / step
        return math.isfinite(q) and abs(q - round(q)) <= 1e-6  # (huge values: q is inf)

    if not all(on_lattice(v) for v in distinct):
        return kept
    if all(on_lattice(v) and lo - cut * step <= v <= hi + cut * step for v in values):
        return list(values)
    return kept


_PERMUTATIONS = 4999  # a warm-up test draws up to this many permutations, or 2 / level
_MAX_PERMUTATIONS = 19999  # but never more: a level below 1 / 20,000 turns the test off
_MAX_LEVEL = 0.05  # and never at a higher level (a long warm-up's share of arl0 would make it a coin toss)
_MAX_POINTS = 500  # a longer warm-up is tested on this many equal block means (a step in the mean stays one)
_BATCH_VALUES = 400_000  # permutation rows x values per batch: the temporaries stay within tens of MB


def _split_t(x, lo: int, sign: float):
    """The largest two-sample t statistic (pooled variance) over the splits ``lo <= i <= n - lo`` of each row
    of ``x`` (2-D), signed by ``sign`` (+1: later mean higher, -1: lower, 0: either), and where it falls."""
    import numpy as np

    n = x.shape[1]
    c1 = np.cumsum(x, axis=1)
    c2 = np.cumsum(x * x, axis=1)
    i = np.arange(lo, n - lo + 1)
    s1a, s2a = c1[:, i - 1], c2[:, i - 1]
    s1b, s2b = c1[:, -1:] - s1a, c2[:, -1:] - s2a
    ma, mb = s1a / i, s1b / (n - i)
    within = np.maximum((s2a - s1a * ma) + (s2b - s1b * mb), 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (mb - ma) / np.sqrt(within / (n - 2) * (1.0 / i + 1.0 / (n - i)))
    t = np.where(np.isnan(t), 0.0, t)  # 0 / 0: no difference in two constant segments
    t = np.abs(t) if sign == 0.0 else sign * t
    j = np.argmax(t, axis=1)
    return t[np.arange(len(t)), j], i[j]


_WANDER = 0.5  # lag-1 autocorrelation of what a step leaves that says wander, not a step (i.i.d.: about +-0.14)
_BESIDE_TREND = 1.96  # |t| the step must keep with a straight line fitted beside it


def _not_a_step(x, split: int) -> bool:
    """Whether the best step through ``x`` (centred) is rather a trend or a slow wander: with a straight line
    fitted beside it the step is no longer significant (|t| < 1.96), or the values about the two means stay
    strongly autocorrelated (lag 1 above 0.5).  The permutation test is exact for i.i.d. values only, and took
    a trend for a change at the end of every warm-up in turn (a trend of 0.1 sd a step: 29 alarms in 800 steps
    against the charts' 13)."""
    import numpy as np

    n = len(x)
    e = np.concatenate([x[:split] - x[:split].mean(), x[split:] - x[split:].mean()])
    rss_step = float(e @ e)
    # Below 1e-20 of the sum of squares, what the step leaves is rounding (two constant segments: x - mean is
    # the same error on every value of a segment), whose autocorrelation is near 1 and says nothing of a wander.
    if rss_step > 1e-20 * float(x @ x) and float(e[1:] @ e[:-1]) / rss_step > _WANDER:
        return True
    design = np.column_stack([np.ones(n), np.arange(n) - (n - 1) / 2.0, (np.arange(n) >= split) * 1.0])
    coef, rss, rank, _ = np.linalg.lstsq(design, x, rcond=None)
    if rank < 3 or n <= 3:
        return False
    resid = x - design @ coef
    sigma2 = float(resid @ resid) / (n - 3)
    if not sigma2 > 0.0:
        return False  # the step and the line fit exactly: a step in a constant stream is a step
    cov = np.linalg.inv(design.T @ design)
    return abs(float(coef[2])) / math.sqrt(sigma2 * float(cov[2, 2])) < _BESIDE_TREND


def warmup_change(values, level: float, direction: str = "both", min_segment: int = 3,
                  seed: int = 0) -> tuple[int, str, float] | None:
    """A change of the mean inside a warm-up, tested at significance ``level``: ``(i, direction, p)`` where
    ``values[i:]`` is the new regime, or None.

    The statistic is the largest two-sample t over the splits that leave ``min_segment`` values on each side
    (pooled within-segment variance, so the change does not hide itself by inflating the scale); its p-value is
    a permutation test's (seeded, so the same values give the same answer), exact for any i.i.d. stream,
    sparse 0/1 rewards and heavy tails included.  The permutations are drawn in batches and stop as soon as the
    count above the observed statistic rules out ``level``: a quiet warm-up costs a few milliseconds.  At
    most 19,999 permutations: a ``level`` below 1/20,000 is beyond their resolution, and the test is off; and
    at most level 0.05.  A warm-up of more than 500 values is tested on the means of equal blocks of them (at
    most 500; the first ``n mod block`` values are left out), which keeps memory within tens of MB and time
    within about 0.2 s (all 4,999 permutations, a warm-up that holds a change; 0.8 s for 19,999 at a level
    below 4e-4), and the split to a block's resolution.
    """
    import numpy as np

    x = np.asarray(values, dtype=float)
    n = len(x)
    level = min(level, _MAX_LEVEL)
    if n < 2 * min_segment or not 0.0 < level < 1.0:
        return None
    big = float(np.max(np.abs(x)))
    if big == 0.0 or not math.isfinite(big):
        return None
    x = x / big  # the test is scale-free; squares (and sums) of huge values would overflow
    block = -(-n // _MAX_POINTS)  # ceil: a long warm-up becomes equal blocks' means (i.i.d. values stay i.i.d.)
    skip = n % block if block > 1 else 0
    if block > 1:  # the first n mod block values (fewer than a block) are left out
        x = x[skip:].reshape(-1, block).mean(axis=1)
        min_segment = max(2, -(-min_segment // block))
    x = x - x.mean()
    sign = {"both": 0.0, "up": 1.0, "down": -1.0}[direction]
    t_obs, split = _split_t(x[None, :], min_segment, sign)
    t_obs, split = float(t_obs[0]), int(split[0])
    if not t_obs > 0.0:
        return None
    if _not_a_step(x, split):
        return None
    total = min(_MAX_PERMUTATIONS, max(_PERMUTATIONS, int(math.ceil(2.0 / level))))
    if level * (total + 1) < 1.0:  # no p-value of this many permutations is that small: the test is off
        return None
    rng = np.random.default_rng(seed)
    above = drawn = 0
    batch = 100
    most = max(1, _BATCH_VALUES // len(x))
    while drawn < total:
        m = min(batch, total - drawn, most)
        perm = rng.permuted(np.broadcast_to(x, (m, len(x))), axis=1)
        t, _ = _split_t(perm, min_segment, sign)
        above += int(np.count_nonzero(t >= t_obs * (1.0 - 1e-12)))
        drawn += m
        if (above + 1.0) / (total + 1.0) > level:  # p > level whatever the rest do (the final test, exactly:
            return None  # level * (total + 1) - 1 rounds below an exact count, 0.0006 x 5000 - 1 = 1.9999...)
        batch *= 4
    p = (above + 1.0) / (drawn + 1.0)
    if p > level:
        return None
    mean_a, mean_b = float(np.mean(x[:split])), float(np.mean(x[split:]))
    return skip + split * block, ("up" if mean_b > mean_a else "down"), p


def check_warmup_test(owner: str, value) -> bool | float | None:
    """``warmup_test``: None (the detector's default), true, false, or a significance level in (0, 0.05]."""
    if value is None or isinstance(value, bool):
        return value
    try:
        return check_float(owner, "warmup_test", value, 0.0, _MAX_LEVEL, lo_open=True)
    except (TypeError, ValueError):
        raise ValueError(f"{owner}: warmup_test must be true, false, null (the default) or a significance level in "
                         f"(0, {_MAX_LEVEL:g}], got {value!r}") from None

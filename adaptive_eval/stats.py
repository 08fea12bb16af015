"""Statistics of evaluation results: summaries, confidence intervals, sample sizes.

The intervals come from statsmodels (Wilson for proportions) and scipy (Student t otherwise); these are
imported on first use so that importing adaptive_eval stays cheap.
"""

from __future__ import annotations

import collections
import dataclasses
import decimal
import functools
import logging
import math
import numbers
import re
import sys
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from adaptive_eval.types import MetricSummary, error_text, log_once

log = logging.getLogger("adaptive_eval")

__all__ = [
    "as_float",
    "best_at_k",
    "clopper_pearson",
    "clustered_interval",
    "mean_over_items_var",
    "aggregate_summary",
    "quantile_interval",
    "two_stage_size",
    "combine",
    "from_sums",
    "higher_moments",
    "kurtosis_df",
    "metric_values",
    "pass_at_k",
    "pass_at_k_var",
    "pooled_m2",
    "pooled_moments",
    "shard_m2",
    "summarize",
    "summarize_rows",
    "summarize_outputs",
    "t_interval",
    "wilson_interval",
    "wilson_sample_size",
    "mean_sample_size",
]


@functools.lru_cache(maxsize=64)
def normal_quantile(confidence: float) -> float:
    """The two-sided standard normal quantile for ``confidence`` (scipy), cached: it sits on the eval path."""
    from scipy.stats import norm

    return float(norm.ppf(0.5 + confidence / 2.0))


def warm_statistics(confidence: float = 0.95) -> None:
    """Import and compute now what summarizing a result needs first (scipy.stats, the normal quantile), so that a
    process's first evaluation is not timed with a one-off import of about a second: the budget's cost model
    learns from evaluations' measured seconds (an evaluator and an eval rank call this before their first one)."""
    normal_quantile(confidence)
    t_quantile(confidence, 1)


@functools.lru_cache(maxsize=4096)
def t_quantile(confidence: float, df: int) -> float:
    """The two-sided Student-t quantile (scipy), cached by degrees of freedom."""
    from scipy.stats import t

    return float(t.ppf(0.5 + confidence / 2.0, df))


def _is_bool_dtype(dtype) -> bool:
    """A numpy (kind ``b``) or torch bool dtype; cheap (``str(np.dtype)`` cost 4 us a metric in ``observe``)."""
    if dtype is None:
        return False
    if getattr(dtype, "kind", None) == "b":
        return True
    torch = sys.modules.get("torch")
    return torch is not None and dtype is torch.bool


def as_float(key: str, value) -> float:
    """A metric value as a float; ``TypeError`` naming ``key`` for anything that is not one real number.

    Ints, numpy scalars and one-element arrays or tensors are numbers; booleans (bool tensors and arrays
    too), strings, None and containers of several values are not.  An int beyond float range is infinite, as a float is.

    >>> as_float("loss", 3), as_float("n", 10**400)
    (3.0, inf)
    """
    if isinstance(value, (bool, np.bool_, str, bytes)) or value is None:
        raise TypeError(f"metric {key!r}: expected a number, got {type(value).__name__} {value!r}")
    if _is_bool_dtype(getattr(value, "dtype", None)):  # a bool tensor or array is a bool, as True is
        raise TypeError(f"metric {key!r}: expected a number, got a {type(value).__name__} of dtype {value.dtype}")
    if isinstance(value, (complex, np.complexfloating)) or getattr(getattr(value, "dtype", None), "kind", "") == "c" \
            or getattr(getattr(value, "dtype", None), "is_complex", False):
        # (float() of a numpy complex dropped the imaginary part with only a ComplexWarning, where a Python complex
        # and every detector refused it; found in review)
        raise TypeError(f"metric {key!r}: expected a real number, got a complex {type(value).__name__}")
    if isinstance(value, decimal.Decimal) and value.is_snan():  # (float() refuses a signalling NaN: a NaN still)
        return math.nan
    if getattr(value, "requires_grad", False):
        # a loss tensor still in the graph: torch warns on float() of it (found by a new-user probe)
        value = value.detach()
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf
    except (TypeError, ValueError, RuntimeError):
        pass
    # One-element arrays and tensors (NumPy 2 no longer converts 1-D arrays with float()).
    numel = getattr(value, "numel", None)  # torch
    size = numel() if callable(numel) else getattr(value, "size", None)  # numpy
    if size == 1 and hasattr(value, "item"):
        try:
            item = value.item()
        except Exception as exc:  # noqa: BLE001 - a meta tensor's RuntimeError named no metric (a new user's probe)
            raise TypeError(f"metric {key!r}: its {type(value).__name__} cannot be read as a number: "
                            f"{error_text(exc)}") from None
        return as_float(key, item)
    raise TypeError(f"metric {key!r}: expected one number, got {type(value).__name__}")


def wilson_interval(successes: float, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for ``successes`` out of ``n``.

    The closed form statsmodels' ``proportion_confint(method="wilson")`` computes (the tests check the
    two agree), with the normal quantile cached, because replay computes thousands of these.

    >>> tuple(round(x, 4) for x in wilson_interval(8, 10))
    (0.4902, 0.9433)
    """
    if n <= 0:
        return (math.nan, math.nan)
    z = normal_quantile(confidence)
    p = successes / n
    z2n = z * z / n
    center = (p + z2n / 2.0) / (1.0 + z2n)
    half = z / (1.0 + z2n) * math.sqrt(max(p * (1.0 - p) / n + z2n / (4.0 * n), 0.0))
    # The interval must contain the estimate (rounding can put a bound a hair inside it at 0% or 100%).
    return (max(0.0, min(center - half, p)), min(1.0, max(center + half, p)))


def t_interval(mean: float, std: float, n: int, confidence: float = 0.95, df: int | None = None) -> tuple[float, float]:
    """Student-t interval of a mean from ``n`` samples with sample standard deviation ``std``, on ``df``
    degrees of freedom (default ``n - 1``; fewer for heavy-tailed values: :func:`kurtosis_df`).

    >>> tuple(round(x, 4) for x in t_interval(1.0, 2.0, 16))
    (-0.0657, 2.0657)
    """
    if n < 2 or not math.isfinite(std):
        return (math.nan, math.nan)
    half = t_quantile(confidence, n - 1 if df is None else df) * std / math.sqrt(n)
    return (mean - half, mean + half)


def _variance(total: float, total_sq: float, n: int, m2: float | None) -> float:
    if m2 is not None and math.isfinite(m2):
        return max(m2, 0.0) / (n - 1)
    if m2 == math.inf:  # deviations beyond float range when squared: an unbounded spread, not NaN
        return math.inf
    mean = total / n
    return max(total_sq - n * mean * mean, 0.0) / (n - 1)


def stable_mean(values: np.ndarray) -> float:
    """The mean of ``values``; finite when every value is and the sum overflows (200 values of 1e306).

    >>> stable_mean(np.array([1e306] * 200)) == 1e306
    True
    """
    if values.size == 0:
        return math.nan
    with np.errstate(over="ignore", invalid="ignore"):
        mean = float(values.mean())
        if not math.isfinite(mean) and bool(np.all(np.isfinite(values))):
            scale = float(np.max(np.abs(values)))
            mean = scale * float(np.mean(values / scale))
    return mean


def deviations(values: np.ndarray, mean: float | None = None) -> float:
    """Sum of squared deviations of ``values`` from their mean (``mean`` when given), in two passes
    (numerically stable)."""
    if values.size == 0:
        return 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        d = values - (values.mean() if mean is None else mean)
        return float(np.dot(d, d))


def scaled_std(values: np.ndarray, mean: float) -> float:
    """The sample standard deviation of ``values`` about ``mean``, computed on deviations scaled by the largest
    one: finite where their squares overflow (values near 1e160 and beyond, whose :func:`deviations` is inf); inf
    when the deviations themselves overflow.

    >>> round(scaled_std(np.array([1e160, 3e160, 2e160]), 2e160) / 1e160, 6)
    1.0
    """
    if values.size < 2:
        return math.nan
    with np.errstate(over="ignore", invalid="ignore"):
        d = values - mean
        scale = float(np.max(np.abs(d)))
        if scale == 0.0 or not math.isfinite(scale):
            return 0.0 if scale == 0.0 else math.inf
        d = d / scale
        return scale * math.sqrt(float(np.dot(d, d)) / (values.size - 1))


def higher_moments(values: np.ndarray, mean: float | None = None) -> tuple[float, float]:
    """``(m3, m4)``: the sums of cubed and fourth-power deviations of ``values`` from their mean (``mean`` when
    given), what :func:`kurtosis_df` and :func:`pooled_moments` need; inf or NaN when they overflow (huge values
    are data: the adjustment is then left out)."""
    if values.size == 0:
        return (0.0, 0.0)
    with np.errstate(over="ignore", invalid="ignore"):
        d = values - (values.mean() if mean is None else mean)
        d2 = d * d
        return (float(np.dot(d2, d)), float(np.dot(d2, d2)))


def pooled_moments(parts: Iterable[tuple[int, float, float, float, float]]) -> tuple[float, float]:
    """``(m3, m4)`` of the union of disjoint shards, from each shard's ``(n, total, m2, m3, m4)`` (Pebay's
    pairwise update, 2008): what one pass over all the values gives, to rounding.  NaN when a shard with values
    lacks them.

    >>> a, b = np.array([0.0, 0.1, 0.9]), np.array([0.2, 0.0])
    >>> parts = [(x.size, x.sum(), deviations(x), *higher_moments(x)) for x in (a, b)]
    >>> [round(v, 12) for v in pooled_moments(parts)] == [round(v, 12) for v in higher_moments(np.r_[a, b])]
    True
    """
    n = 0
    mean = m2 = m3 = m4 = 0.0
    for nb, total, m2b, m3b, m4b in parts:
        nb = int(nb)
        if nb <= 0:
            continue
        if not all(math.isfinite(float(x)) for x in (total, m2b, m3b, m4b)):
            return (math.nan, math.nan)
        mb = float(total) / nb
        if n == 0:
            n, mean, m2, m3, m4 = nb, mb, float(m2b), float(m3b), float(m4b)
            continue
        na, nt = n, n + nb
        fa, fb = na / nt, nb / nt  # (shares, not products of the counts: 1e5 values and a d of 1e74 overflowed)
        d = mb - mean
        d2 = d * d  # (products, not ``**``, which raises on overflow: huge values are data)
        m4 = (m4 + m4b + d2 * d2 * na * fb * (fa * fa - fa * fb + fb * fb)
              + 6.0 * d2 * (fa * fa * m2b + fb * fb * m2) + 4.0 * d * (fa * m3b - fb * m3))
        m3 = m3 + m3b + d2 * d * na * fb * (fa - fb) + 3.0 * d * (fa * m2b - fb * m2)
        m2 = m2 + m2b + d2 * na * fb
        mean, n = mean + d * nb / nt, nt
    if not n or not (math.isfinite(m3) and math.isfinite(m4)):
        return (math.nan, math.nan)
    return (m3, m4)


def kurtosis_df(n: int, m2: float, m4: float, weight: float = 1.0) -> int:
    """Degrees of freedom for the t quantile of a mean of ``n`` values whose sums of squared and fourth-power
    deviations are ``m2`` and ``m4``: ``n - 1``, fewer when the values are heavy-tailed.

    The sample variance of values with excess kurtosis g2 varies as a chi-square with ``2 / (2 / (n - 1) +
    g2 / n)`` degrees of freedom (the usual Satterthwaite match of its variance); the floor of that, between 1
    and ``n - 1`` (g2 <= 0 leaves ``n - 1``); ``weight`` scales g2 (the share of the spread it is taken for:
    see :func:`_clustered_from_sums`).  Per-problem solve rates from a skewed pool (most problems never
    or always solved, a rare one in between) are such values: 30 of them seldom hold the rare ones, and
    their spread then understates the variance of their mean; with ``n - 1`` the interval of mean@k over 30
    problems x 16 answers drawn from Beta(0.1, 1.9) rates covered 0.912 (SIMULATED; 0.935 with this, the
    proportion's weighting included, benchmarks/pass_at_k_coverage.py), while pools that are not skewed widen
    at most 1.06x.

    >>> def df(x):
    ...     return kurtosis_df(len(x), deviations(x), higher_moments(x)[1])
    >>> df(np.linspace(0.0, 1.0, 30)), df(np.r_[np.zeros(27), 0.1, 0.2, 0.5])  # flat; a rare solved one
    (29, 3)
    """
    if n < 3:
        return max(n - 1, 1)
    if not (math.isfinite(m2) and math.isfinite(m4)) or m2 <= 0.0:
        return n - 1
    # sum d^4 <= (sum d^2)^2, so the ratio is at most 1; dividing twice keeps m2 * m2 from underflowing to 0
    # (three values of which one is 1e-133) or overflowing
    ratio = m4 / m2 / m2
    if not math.isfinite(ratio):
        return n - 1
    g2 = (n * min(ratio, 1.0) - 3.0) * weight
    if not g2 > 0.0:
        return n - 1
    # the floor with a tolerance: shards pool m4 to within rounding of one pass (18 against 18.000000000000004
    # at g2 = 0), which must not cost a degree of freedom (found in review)
    return int(min(max(2.0 / (2.0 / (n - 1) + g2 / n) + 1e-9, 1.0), n - 1.0))


def from_sums(total: float, total_sq: float, n: int, binary: bool, confidence: float = 0.95, *,
              clustered: bool = False, samples: int = 0, within_ss: float = math.nan,
              nan_count: int = 0, population: int = 0, m2: float | None = None,
              mean: float | None = None, k: int = 1, m3: float = math.nan, m4: float = math.nan,
              std: float | None = None, within_ss2: float = math.nan,
              inv_samples: float = math.nan) -> MetricSummary:
    """Summary from the sufficient statistics of per-sample values (exact across shards).

    ``mean``: the values' mean when it is known better than ``total / n`` (finite values whose sum
    overflows: :func:`stable_mean`).

    ``m2``: the sum of squared deviations from the mean, when the values are at hand (:func:`deviations`).
    The variance then comes from it, not from ``total_sq - n * mean^2``, which cancels catastrophically for
    values far from 0 relative to their spread (``1e9 + N(0, 1)`` gave a zero-width interval).

    ``clustered``: the values are per-item means of several samples each (``samples`` in all); the
    interval is then over items (:func:`clustered_interval`), for a suite of ``population`` items (0: an
    unbounded population of problems) with the finite population correction.  ``k``: the values are the
    items' pass@k (see :func:`clustered_interval`'s ``trials``).  ``within_ss2``: the sum over items of
    ``SS_i^2 / (m_i - 1)``, ``SS_i`` an item's share of ``within_ss`` and ``m_i`` its samples (NaN: unknown), from
    which the within-item variance's degrees of freedom are read (:func:`_within_df`).  ``inv_samples``: the sum
    over items of ``1 / m_i`` (NaN: unknown, the counts taken as equal), for items of different counts
    (:attr:`MetricSummary.effective_samples_per_item`).

    ``m3``, ``m4``: the sums of cubed and fourth-power deviations (:func:`higher_moments`), when known: a
    Student t interval (and a proportion's over items) then takes :func:`kurtosis_df` degrees of freedom.

    ``std``: the values' standard deviation (:func:`scaled_std`), used where ``m2`` overflowed (values near
    1e160 and beyond: an eval perplexity of a diverging run gave a NaN interval around a finite mean).
    """
    if clustered:
        return _clustered_from_sums(total, total_sq, n, binary, confidence, samples, within_ss, nan_count,
                                    population, m2, mean, k, m3, m4, within_ss2, inv_samples)
    if n <= 0:
        return MetricSummary(mean=math.nan, n=0, ci=(math.nan, math.nan), total=0.0, total_sq=0.0, binary=binary,
                             nan_count=nan_count)
    if mean is None or not math.isfinite(mean):
        mean = total / n
    if n > 1:
        var = _variance(total, total_sq, n, m2)
        std = std if m2 == math.inf and std is not None and math.isfinite(std) else math.sqrt(var)
    else:
        std = math.nan
    if binary:
        ci = wilson_interval(total, n, confidence)
    else:
        ci = t_interval(mean, std, n, confidence, df=kurtosis_df(n, _m2(std, n), m4))
    return MetricSummary(mean=mean, n=n, ci=ci, std=std, total=total, total_sq=total_sq, binary=binary,
                         nan_count=nan_count, m3=float(m3), m4=float(m4))


def _m2(std: float, n: int) -> float:
    return std * std * (n - 1) if n > 1 and math.isfinite(std) else math.nan


def _finite_ints(value):
    """``value`` with every int beyond float range replaced by +-inf (numpy raises ``OverflowError`` on it):
    a huge metric is data."""
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            float(value)
            return value
        except OverflowError:
            return math.inf if value > 0 else -math.inf
    if isinstance(value, (list, tuple)):
        return [_finite_ints(v) for v in value]
    if isinstance(value, np.ndarray) and value.dtype == object:
        return [_finite_ints(v) for v in value.tolist()]
    return value


def _text_in(value) -> object | None:
    """The first string (or bytes) in a (nested) list, tuple or object array, else None."""
    if isinstance(value, (str, bytes)):
        return value
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "US":
            return value.ravel()[0] if value.size else None
        if value.dtype != object:
            return None
        value = value.ravel().tolist()
    if isinstance(value, (list, tuple)):
        for v in value:
            found = _text_in(v)
            if found is not None:
                return found
    return None


def float_array(value) -> np.ndarray:
    """``np.asarray(value, dtype=float64)``, with ints beyond float range as +-inf instead of ``OverflowError``.

    Text is refused (``TypeError``): numpy would read ``"42"`` as 42, and answers returned where their scores
    belong would silently average (``[["42", "17"], ["3", "3"]]`` read 16.25).  A masked array's masked values are
    NaN: samples skipped, and counted as such (its mean left them out, its n and interval did not; a probe)."""
    if isinstance(value, np.ma.MaskedArray):  # (its data as any array, so text is refused as ever; a review)
        out = np.array(float_array(np.ma.getdata(value)), dtype=np.float64)
        out[np.ma.getmaskarray(value)] = np.nan
        return out
    if isinstance(value, np.ndarray) and value.dtype.kind in "fiub":
        return value.astype(np.float64, copy=False)
    if isinstance(value, (list, tuple)):
        try:  # numbers only (the common case): no scan for text
            arr = np.asarray(value)
        except (ValueError, OverflowError):  # ragged, or an int beyond any dtype: scanned below
            arr = None
        if arr is not None and arr.dtype.kind in "fiub":
            return arr.astype(np.float64, copy=False)
    found = _text_in(value)
    if found is not None:
        raise TypeError(f"text {found!r:.40} where a number belongs (answers go in '<metric>:answers')")
    try:
        return np.asarray(value, dtype=np.float64)
    except OverflowError:
        return np.asarray(_finite_ints(value), dtype=np.float64)


def metric_values(name: str, value: object) -> tuple[np.ndarray | None, float | None]:
    """Split what an ``evaluate_fn`` returned for one metric into per-sample values or a scalar.

    Returns ``(values, None)`` for per-sample values and ``(None, scalar)`` for a scalar; anything else
    raises ``TypeError`` naming the metric.
    """
    if isinstance(value, (bool, np.bool_)):
        return None, float(value)
    if isinstance(value, (numbers.Real, decimal.Decimal, np.integer, np.floating)):  # also Fraction, Decimal
        return None, as_float(name, value)
    if isinstance(value, (list, tuple)) and any(type(v).__module__.startswith("torch") for v in value):
        # per-item tensors ([loss_fn(m(x), y) for ...]: with grad, or on the GPU), read as item_rows reads them
        value = [v.detach().to("cpu").double().numpy() if type(v).__module__.startswith("torch") else v
                 for v in value]
    if isinstance(value, (list, tuple, np.ndarray)):
        try:
            arr = float_array(value)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"metric {name!r}: per-sample values must be numbers ({exc})") from None
        if arr.ndim == 0:
            return None, float(arr)
        if arr.ndim != 1:
            raise TypeError(f"metric {name!r}: expected a scalar or a 1-D sequence of per-sample values, got shape {arr.shape}")
        return arr, None
    # torch tensors without importing torch here.
    if type(value).__module__.startswith("torch"):
        if getattr(value, "is_complex", lambda: False)():  # (.double() kept the real part, unsaid; a probe)
            raise TypeError(f"metric {name!r}: a complex tensor is not a score")
        arr = value.detach().to("cpu").double().numpy()
        if arr.ndim == 0:
            return None, float(arr)
        if arr.ndim != 1:
            raise TypeError(f"metric {name!r}: expected a scalar or a 1-D tensor of per-sample values, got shape {tuple(arr.shape)}")
        return arr, None
    raise TypeError(
        f"metric {name!r}: expected a number or per-sample values (list, numpy array or tensor), got {type(value).__name__}"
    )


def summarize(values: Iterable[float] | np.ndarray, confidence: float = 0.95, kind: str | None = None,
              name: str = "") -> MetricSummary:
    """Summary of per-sample values: Wilson interval when they are all 0/1, Student t otherwise.

    ``kind`` (``evaluation.metric_kinds``) overrides the guess: ``"proportion"`` (Wilson; values in [0, 1])
    or ``"mean"`` (Student t, even for 0/1 values).  NaN values are skipped and counted in ``nan_count``, as
    within items x samples (a grader that timed out on one item of 500); all NaN: a NaN mean, ``n = 0``.  A
    proportion with a value outside [0, 1] is a ``ValueError`` naming metric ``name`` (its interval read (3.65, 1.0),
    the low end above the high; a new user's probe).

    >>> s = summarize([1, 0, 1, 1])
    >>> s.mean, s.n, s.binary
    (0.75, 4, True)
    >>> summarize([1, 0, 1, 1], kind="mean").binary
    False
    >>> s = summarize([1, float("nan"), 0, 1])
    >>> round(s.mean, 4), s.n, s.nan_count, s.binary
    (0.6667, 3, 1, True)
    """
    arr = float_array(values)
    nan = np.isnan(arr)
    nan_count = int(nan.sum())
    if nan_count:
        arr = arr[~nan]
    if kind == "proportion":
        binary = True
        _check_proportion(name, arr)
    elif kind == "mean":
        binary = False
    else:
        binary = bool(arr.size) and bool(np.all((arr == 0.0) | (arr == 1.0)))
    with np.errstate(over="ignore", invalid="ignore"):  # huge values are data: inf sums, not a warning
        total, total_sq = float(arr.sum()), float(np.dot(arr, arr))
    mean = stable_mean(arr)
    m2 = deviations(arr, mean)
    out = from_sums(total, total_sq, int(arr.size), binary, confidence, m2=m2, mean=mean,
                    nan_count=nan_count, std=scaled_std(arr, mean) if m2 == math.inf else None, **_moments(arr, mean))
    if kind is None and not binary and arr.size and (out.ci[0] < 0.0 or out.ci[1] > 1.0) \
            and 0.0 <= float(arr.min()) and float(arr.max()) <= 1.0:
        # (a token accuracy, k of 7 per item: 0.0089 [-0.0083, 0.026], an accuracy below 0, and nothing said the
        # fix; a probe)
        log_once(("bounded", name), "metric %r: its values lie in [0, 1] but are not all 0/1, so its interval is "
                 "Student t's, which here leaves [0, 1] (%.4g, %.4g); if it is a proportion (a share per item), "
                 "declare evaluation.metric_kinds.%s: proportion for a Wilson-type interval inside it (said once)",
                 name or "?", out.ci[0], out.ci[1], name or "NAME")
    return out


def _moments(values: np.ndarray, mean: float) -> dict:
    m3, m4 = higher_moments(values, mean)
    return {"m3": m3, "m4": m4}


def _not_a_proportion(name: str, value: float) -> str:
    return (f"metric {name or '?'!r} is declared a proportion (evaluation.metric_kinds) but has the value {value:g}, "
            "outside [0, 1]: declare it 'mean', or return values in [0, 1]")


def _check_proportion(name: str, values: np.ndarray) -> None:
    outside = values[(values < 0.0) | (values > 1.0)]
    if outside.size:
        raise ValueError(_not_a_proportion(name, float(outside[0])))


def scalar_summary(value: float, n_items: int | None, confidence: float = 0.95,
                   kind: str | None = None, name: str = "") -> MetricSummary:
    """Summary of a metric reported as one number over ``n_items`` items.

    Only a metric declared a proportion (``kind="proportion"``, from ``evaluation.metric_kinds``) gets a
    Wilson interval over the items; any other scalar has unknown spread, so its interval is NaN.  A value
    that merely lies in [0, 1] is not taken for a proportion (a loss of 0.4, a runtime of 0.2 s).

    >>> scalar_summary(0.4, 100).ci
    (nan, nan)
    >>> tuple(round(x, 3) for x in scalar_summary(0.4, 100, kind="proportion").ci)
    (0.309, 0.498)
    """
    n = n_items if n_items and n_items > 0 else 1
    if kind == "proportion" and not 0.0 <= value <= 1.0 and value == value:
        raise ValueError(_not_a_proportion(name, value))
    if kind == "proportion" and 0.0 <= value <= 1.0 and n_items:
        ci = wilson_interval(value * n, n, confidence)
        return MetricSummary(mean=value, n=n, ci=ci, total=value * n, binary=True, per_sample=False)
    return MetricSummary(mean=value, n=n, ci=(math.nan, math.nan), total=value * n, per_sample=False)


_COMPANIONS = (":answers", ":reference", ":weights")


def summarize_outputs(
    outputs: Mapping[str, object], n_items: int | None, confidence: float = 0.95, *, pass_at_k=(1,),
    suites: Mapping[str, Sequence[int]] | None = None, populations: Mapping[str, int] | None = None,
    ids: Sequence[int] | None = None, item_values: dict | None = None, kinds: Mapping[str, str] | None = None,
    aggregations: Mapping[str, Sequence[str]] | None = None, strata: Mapping[str, Sequence[str]] | None = None,
    samples_asked: Mapping[str, int] | None = None, sharded: bool = False, items_of: Mapping[str, int] | None = None,
) -> dict[str, MetricSummary]:
    """Summaries of everything an ``evaluate_fn`` returned (a mapping of metric name to values).

    A value is a scalar, per-item values (1-D) or items x samples (2-D, see :func:`summarize_rows`).
    ``pass_at_k``: the k of pass@k (best@k, worst@k, maj@k), or with suites a mapping of suite name to
    its k.  ``suites`` (when eval suites are configured) maps each suite due in this evaluation to this
    rank's item indices: every name must then be ``"<suite>/<metric>"`` of a due suite, and per-item
    values need one row per index; ``populations`` gives each suite's size (finite population correction).
    Without suites, a 2-D value needs one row per item handed (``n_items``, when known), and ``ids`` are
    the indices of those items, if known.  A scalar is over ``n_items`` items, or over ``items_of[name]`` where
    that is given (a framework adapter scoring several eval sets: each set's aggregate over its own items).

    **maj@k**: for a metric ``m``, ``"m:answers"`` holds each item's sampled answers (items x samples of
    strings or numbers) and ``"m:reference"`` each item's reference answer (one per item); the result has
    ``"m/maj@<k>"``: whether the most frequent of the item's first k answers (ties: the one seen first)
    equals the reference, averaged over items, with the interval over items.  NaN and None answers are skipped (an
    item with none left is not evaluated), as NaN scores are for pass@k.

    ``aggregations`` (``evaluation.aggregations``) maps a metric (its full name, or with suites the part
    after the suite) to extra aggregations over its per-item values: ``weighted_mean`` (weights in
    ``"<metric>:weights"``, one per item) and quantiles ``p<q>``, reported as ``"<metric>/<aggregation>"``
    (see :func:`aggregate_summary`).

    ``item_values``, when given, receives ``{metric: {item index: per-item mean}}`` for the items x samples
    metrics whose items are known and for the per-item metrics of suites (the paired comparison of
    successive evaluations uses them).
    ``kinds`` maps a metric name to ``"proportion"`` or ``"mean"`` (``evaluation.metric_kinds``): the interval
    of a 1-D or scalar value; without it only per-sample 0/1 values are proportions, never a bare scalar.

    ``strata`` (with suites) maps a suite to one stratum label per item of the suite: each of its per-item and
    items x samples metrics is then also reported per stratum present among this rank's items, as
    ``"<suite>/<metric>/stratum=<label>"`` (mean, or mean@k, with its interval over that stratum's items).

    ``samples_asked`` (with suites) maps a suite to the answers per item its request asked for: items x samples
    rows shorter than that, or than the largest k, are logged as a warning (:func:`short_rows_warning`).
    """
    summaries = {}
    kinds = kinds or {}
    for name, value in outputs.items():
        if not isinstance(name, str) or not name:  # (an empty name was taken, though observe() refuses one; a probe)
            raise TypeError(f"metric names must be non-empty strings, got {name!r}")
        label, rows_expected, item_ids, items, population = f"metric {name!r}", None, ids, n_items, 0
        if suites is not None:
            suite, _, metric = name.partition("/")
            if suite not in suites or not metric:
                raise ValueError(f"evaluate_fn returned {name!r}, which names no suite of this evaluation: expected "
                                 f"'<suite>/<metric>' with a suite among {sorted(suites)} (evaluation.suites; "
                                 "the request's suites are the ones due now)")
            item_ids = list(suites[suite])
            label, rows_expected, items = f"suite {suite!r}, metric {metric!r}", len(item_ids), len(item_ids)
            population = int((populations or {}).get(suite, 0))
        ks = pass_at_k.get(name.partition("/")[0], ()) if isinstance(pass_at_k, Mapping) else pass_at_k
        if name.endswith(_COMPANIONS):
            if name.endswith(":answers"):
                summaries.update(_majority(label, name[: -len(":answers")], value, outputs, ks, confidence,
                                           rows_expected if rows_expected is not None else n_items, item_ids,
                                           population, (samples_asked or {}).get(name.partition("/")[0])))
            continue
        rows = item_rows(label, value)
        if rows is not None:
            if rows_expected is None and n_items is not None and suites is None:
                rows_expected = n_items
            _check_rows(label, rows[0].shape[0], rows_expected, item_ids)
            if kinds.get(name) == "proportion":  # (as summarize checks a 1-D one)
                _check_proportion(name, rows[0])
            derived = summarize_rows(label, name, rows[0], rows[1], ks, confidence, population, ids=item_ids,
                                     both=sharded, kind=kinds.get(name))
            summaries.update({k: v for k, v in derived.items() if k == name or k not in outputs})
            _say_nearly_binary(label, name, rows[0], item_ids)
            scored = np.sum(~np.isnan(rows[0]), axis=1)  # (NaN answers are not scored: a NaN-padded row is short)
            # (a reward's is best@m and worst@m: it said pass@m of a metric reporting no pass@k; a probe)
            counts = ("best@m and worst@m of its m" if any("/best@" in k for k in derived) else "pass@m of its m")
            short = short_rows_warning(label, scored, ks, (samples_asked or {}).get(name.partition("/")[0]),
                                       item_ids, nan=bool(np.any(scored < rows[1])), counts=counts)
            if short:
                log.warning(short)
            _say_more_answers(label, name, int(rows[1].max(initial=0)),
                              (samples_asked or {}).get(name.partition("/")[0]))
            for key, mask, size in _stratum_masks(strata, name, item_ids):  # (pass@k too; the stratum's own FPC)
                # (a k above every answer list of the stratum, the others' reaching it, is no pass@k of the
                # stratum: it raised, which failed the whole evaluation for a stratum shown, not watched; a probe)
                # (sharded: every k, each shard's stratum judged with the others' once they combine,
                # answers_short_of_k; a shard's own filter made the ranks' keys differ)
                most = int(rows[1][mask].max(initial=0))
                summaries.update(summarize_rows(label, key, rows[0][mask], rows[1][mask],
                                                [k for k in ks if sharded or int(k) <= most], confidence,
                                                size if population else 0, both=sharded,
                                                ids=None if item_ids is None else np.asarray(item_ids)[mask],
                                                kind=kinds.get(name)))
            aggs = _aggregations(aggregations, name)
            if aggs:
                per_item = _row_means(rows[0])
                summaries.update(_aggregate(label, name, aggs, per_item, outputs, confidence))
            if item_values is not None and item_ids is not None and len(item_ids) == rows[0].shape[0]:
                means = _row_means(rows[0])
                item_values[name] = {int(i): float(v) for i, v in zip(item_ids, means) if v == v}
            continue
        values, scalar = metric_values(name, value)
        if values is not None:
            if suites is not None:
                _check_rows(label, values.size, rows_expected, item_ids)
                if values.size:  # (a rank handed no item returns []: no per-item values to speak of; a probe)
                    _say_no_pass_at_k(label, name, ks, (samples_asked or {}).get(name.partition("/")[0]))
            summaries[name] = summarize(values, confidence, kinds.get(name), name)
            if suites is not None and len(item_ids) == values.size:
                for key, mask, _ in _stratum_masks(strata, name, item_ids):
                    summaries[key] = summarize(values[mask], confidence, kinds.get(name), name)
            aggs = _aggregations(aggregations, name)
            if aggs:
                summaries.update(_aggregate(label, name, aggs, values, outputs, confidence))
            # Paired only in a suite, where one value per requested item is checked (a plain 1-D list may
            # be per-sample values in any order).
            if item_values is not None and suites is not None and len(item_ids) == values.size:
                item_values[name] = {int(i): float(v) for i, v in zip(item_ids, values) if v == v}
        else:
            summaries[name] = scalar_summary(scalar, (items_of or {}).get(name, items), confidence, kinds.get(name),
                                             name)
    if suites is None and not isinstance(pass_at_k, Mapping) and max(map(int, pass_at_k or (1,))) > 1 and summaries \
            and not any(v.clustered for v in summaries.values()) \
            and not (sharded and not any(v.n or v.nan_count for v in summaries.values())):  # (a rank of no items)
        # (the trainer's own evaluation, one value per item: pass@4 vanished without a word, where a suite's is
        # said; a probe)
        log_once(("1-D", "pass_at_k"), "evaluation.pass_at_k asks for %s, but this evaluation returned no items x "
                 "answers metric (one value per item, or a scalar): no pass@k; return a row of each item's answers' "
                 "scores per item for it (said once)", "/".join(f"pass@{int(k)}" for k in pass_at_k if int(k) > 1))
    return summaries


def _say_no_pass_at_k(label: str, name: str, ks, asked: int | None) -> None:
    """A suite metric returned as one value per item when its request asked for several answers per item and
    evaluation.pass_at_k has a k above 1: it is summarized as a per-item value, with no pass@k; say so once (its
    pass@k vanished without a word, while items x 1 of the same values is an error)."""
    lost = [int(k) for k in ks]
    if max(lost, default=1) <= 1 or not asked or int(asked) <= 1:
        return
    log_once(("1-D", name), "%s: one value per item, while the request asked for %d answers per item: summarized "
             "as a per-item value with no %s; return items x answers (a row of the answers' scores per item, "
             "request.suites[suite].samples_per_item of them) for pass@k (said once)", label, int(asked),
             "/".join(f"pass@{k}" for k in lost))


def _say_more_answers(label: str, name: str, most: int, asked: int | None) -> None:
    """More answers per item than the request asked (a cache of 8 answers whatever the plan chose): all are used
    in the estimates, but the budget counted what was asked, and a pass@k above the plan's answers is not
    reported; it passed unsaid, and the pass@k warning said the items had fewer answers (found by a new user)."""
    if not asked or most <= int(asked):
        return
    log_once(("more", name), "%s: up to %d answers per item, where the request asked for %d "
             "(request.suites[suite].samples_per_item, the sample-size plan's choice): all are used in the estimates, "
             "but the budget counts %d per item, and pass@k is reported for k up to %d only; generate the answers "
             "asked (said once)", label, most, int(asked), int(asked), int(asked))


def _say_nearly_binary(label: str, name: str, padded: np.ndarray, ids) -> None:
    """Answers' scores that are 0/1 but for a few (a partial credit of 0.5, a -1 for an answer that did not parse,
    a judge's 1 - 1e-12) turn every pass@k of the metric into best@k/worst@k and average the odd values into its
    mean, with nothing said (found by a new-user probe): say once per metric, naming how many and the first.  A
    metric whose scores are mostly not 0/1 (a reward) is meant as it is: nothing said."""
    scored = ~np.isnan(padded)
    odd = scored & (padded != 0.0) & (padded != 1.0)
    count, total = int(np.count_nonzero(odd)), int(np.count_nonzero(scored))
    if not count or count > 0.1 * total:
        return
    row, col = (int(v[0]) for v in np.nonzero(odd))
    log_once(("0/1", name), "%s: %d of %d answers' scores are not 0 or 1 (the first: %r, answer %d of %s), so it "
             "reports best@k/worst@k, not pass@k, and its mean counts them as they are; score every answer 0 or 1 "
             "for pass@k (said once)", label, count, total, float(padded[row, col]), col,
             _item_name(row, ids, padded.shape[0]))


def _stratum_masks(strata, name: str, item_ids):
    """``("<name>/stratum=<label>", mask over this rank's items, the stratum's items in the whole suite)`` for
    each stratum present, in label order."""
    labels = (strata or {}).get(name.partition("/")[0])
    if not labels or item_ids is None:
        return []
    mine = np.array([str(labels[int(i)]) for i in item_ids])
    present = sorted(set(mine.tolist()))
    sizes = collections.Counter(map(str, labels))
    return [(f"{name}/stratum={label}", mine == label, sizes[label]) for label in present]


def _aggregations(aggregations, name: str) -> list[str]:
    if not aggregations:
        return []
    aggs = aggregations.get(name)
    if aggs is None and "/" in name:
        aggs = aggregations.get(name.partition("/")[2])
    return [k for k in (aggs or ()) if k != "mean"]


def _aggregate(label, name, aggs, per_item, outputs, confidence) -> dict[str, MetricSummary]:
    weights = outputs.get(f"{name}:weights")
    if weights is not None and type(weights).__module__.startswith("torch"):
        weights = weights.detach().to("cpu").double().numpy()
    if weights is not None and not isinstance(weights, np.ndarray):
        try:
            weights = np.asarray(weights, dtype=np.float64)
        except (TypeError, ValueError):
            raise TypeError(f"{label}: {name}:weights must be one number per item (1-D)") from None
    return {f"{name}/{kind}": aggregate_items(label, kind, per_item, weights, confidence) for kind in aggs}


def _is_nan_answer(a) -> bool:
    """No answer: NaN, or None (what an answer parser returns for one it could not read: counted as a vote of its
    own, two unparsed answers outvoted one right one; a new user's probe)."""
    return a is None or (isinstance(a, (float, np.floating)) and a != a)


def _majority(label, name, answers, outputs, ks, confidence, rows_expected, ids, population, asked=None):
    """``<name>/maj@<k>`` from ``<name>:answers`` and ``<name>:reference`` (see :func:`summarize_outputs`)."""
    ref_key = f"{name}:reference"
    if ref_key not in outputs:
        raise ValueError(f"{label}: {name}:answers needs {ref_key} (each item's reference answer) for maj@k")
    reference = outputs[ref_key]
    if type(answers).__module__.startswith("torch"):
        answers = answers.tolist()
    if type(reference).__module__.startswith("torch") or isinstance(reference, np.ndarray):
        reference = reference.tolist()
    if isinstance(answers, np.ndarray):
        answers = answers.tolist()
    if not isinstance(answers, (list, tuple)) or not all(isinstance(r, (list, tuple, np.ndarray)) for r in answers):
        raise TypeError(f"{label}: {name}:answers must be items x samples (a list of per-item lists of answers)")
    if not isinstance(reference, (list, tuple)) or any(isinstance(r, (list, tuple, np.ndarray)) for r in reference):
        raise TypeError(f"{label}: {ref_key} must hold one reference answer per item (1-D)")
    if len(reference) != len(answers):
        raise ValueError(f"{label}: {len(answers)} rows of answers but {len(reference)} reference answers; item "
                         f"index {min(len(answers), len(reference))} lacks one")
    _check_rows(label, len(answers), rows_expected, ids)
    # A NaN answer is no answer (as a NaN score is for pass@k): each NaN object counted as a vote of its own,
    # and one np.nan repeated as the same vote, so the same answers gave maj@5 1.0 as an array, 0.0 as a list.
    returned = [len(row) for row in answers]
    answers = [[a for a in row if not _is_nan_answer(a)] for row in answers]
    mismatch = _kinds_apart(answers, reference)
    if mismatch:
        log.warning(f"{label}: {name}/maj@k compares each item's majority answer with its reference by ==, and "
                    f"every answer is {mismatch[0]} while every reference is {mismatch[1]}, which never compare "
                    f"equal ('42' == 42 is False): maj@k reads 0; give both as the same type (str(reference), "
                    "or the answers parsed)")
    out = {}
    for k in ks:
        per_item = []
        if returned and max(returned) < k:  # (answers returned: NaN answers are data, maj@m of the rest)
            i = max(range(len(returned)), key=returned.__getitem__)
            raise ValueError(f"{label}: k={k} (evaluation.pass_at_k) is larger than the answers returned for every "
                             f"item (at most {returned[i]}, for {_item_name(i, ids, len(answers))})")
        for row, ref in zip(answers, reference):
            row = list(row)[:k]  # (a shorter row, an item that returned fewer answers: maj@m of its m)
            if not row:
                continue  # an item with no answer was not evaluated (as an item of NaN scores)
            counts: dict = {}
            for a in row:
                counts[a] = counts.get(a, 0) + 1
            top = max(counts.values())
            vote = next(a for a in row if counts[a] == top)  # ties: the answer seen first
            per_item.append(1.0 if vote == ref else 0.0)
        v = np.asarray(per_item)
        out[f"{name}/maj@{k}"] = from_sums(float(v.sum()), float(np.dot(v, v)), int(v.size), True, confidence,
                                           clustered=True, samples=sum(min(len(r), k) for r in answers),
                                           population=population)
    # (the scores of the same generations, when given, warn of the same short items: said once, not twice)
    short = None if name in outputs else short_rows_warning(
        label, np.array([len(r) for r in answers], dtype=np.int64), ks, asked, ids,
        nan=any(len(a) < n for a, n in zip(answers, returned)), counts="maj@m of its m")
    if short:
        log.warning(short)
    return out


def _kind(value) -> str:
    if isinstance(value, (str, np.str_)):
        return "text"
    if isinstance(value, (bytes, np.bytes_)):
        return "bytes"
    if isinstance(value, (bool, int, float, np.number, np.bool_)):
        return "a number"
    return "other"


def _kinds_apart(answers, reference) -> tuple[str, str] | None:
    """(the answers' kind, the references') when every answer is text and every reference a number, or the
    other way round: their majority vote never equals the reference (maj@k silently read 0; found in review)."""
    got = {_kind(a) for row in answers for a in row}
    want = {_kind(r) for r in reference}
    if len(got) == 1 and len(want) == 1 and got != want and {*got, *want} <= {"text", "bytes", "a number"}:
        return next(iter(got)), next(iter(want))
    return None


def _check_rows(label: str, got: int, expected: int | None, ids) -> None:
    if expected is None or got == expected:
        return
    if got < expected:
        where = f"; the first item without a row is index {ids[got]}" if ids is not None else ""
        raise ValueError(f"{label}: {got} rows of per-item values for the {expected} items requested{where}")
    # (it said "item index 199 is beyond the request" of row 199 of 50 items x 4 answers flattened; a probe)
    flat = (f"; {got} = {expected} x {got // expected}: answers flattened into one row each? return them items x "
            "answers, one row per item (a list of lists or a 2-D array)" if expected and got % expected == 0 else "")
    raise ValueError(f"{label}: {got} rows of per-item values for the {expected} items requested (row {got - 1} is "
                     f"beyond the request){flat}")


def shard_m2(summary: MetricSummary) -> float:
    """Sum of squared deviations of a summary's values from their mean, ``(n - 1) std^2`` (0 for one value,
    NaN when unknown): what :func:`pooled_m2` needs of each shard."""
    if summary.n == 1:
        return 0.0
    if summary.n > 1 and math.isfinite(summary.std):
        return summary.std * summary.std * (summary.n - 1)
    return math.nan


def fsum(values: Iterable[float]) -> float:
    """``math.fsum``, or the plain sum (an infinity) where the exact sum of finite values overflows: ``math.fsum``
    raises ``OverflowError`` there, and two shards of 1e308 raised it out of an evaluation in a process group (a
    fuzzing probe; huge values are data)."""
    values = list(values)
    try:
        return math.fsum(values)
    except OverflowError:  # finite values whose exact sum leaves float range on the way: scaled, exact (review)
        top = max(math.frexp(v)[1] for v in values)
        try:
            return math.ldexp(math.fsum(math.ldexp(v, -top) for v in values), top)
        except OverflowError:
            return math.copysign(math.inf, math.fsum(math.ldexp(v, -top) for v in values))
    except ValueError:  # inf + -inf: no sum (NaN), as numpy's
        return math.nan


def pooled_m2(parts: Iterable[tuple[int, float, float]]) -> float:
    """The sum of squared deviations of the union of disjoint shards, from each shard's ``(n, total, m2)``.

    Chan, Golub & LeVeque's parallel combination, ``sum m2_i + sum n_i (mean_i - mean)^2``: only differences
    of nearby numbers, so it stays exact where ``sum total_sq - n mean^2`` cancels (values ``1e9 + N(0, 1)``).
    NaN when a shard with values has no finite ``m2`` (the caller then falls back to the raw sums).

    >>> round(pooled_m2([(2, 2e9 + 1.0, 0.5), (2, 2e9 - 1.0, 0.5)]), 6)  # {1e9, 1e9+1} and {1e9-1, 1e9}
    2.0
    """
    live = [(int(n), float(t), float(m)) for n, t, m in parts if n > 0]
    if not live:
        return math.nan
    n = sum(k for k, _, _ in live)
    mean = fsum(t for _, t, _ in live) / n
    if not math.isfinite(mean) or not all(math.isfinite(m) and math.isfinite(t) for _, t, m in live):
        return math.nan
    return fsum(m + k * (t / k - mean) * (t / k - mean) for k, t, m in live)  # ``** 2`` raises on overflow


def pooled_std(parts: Iterable[tuple[int, float, float]]) -> float:
    """The standard deviation of the union of disjoint shards from each one's ``(n, mean, std)``, on values scaled
    by the largest spread (:func:`pooled_m2`'s sum, where its squares overflow: values near 1e160 and beyond).

    >>> round(pooled_std([(2, 1e160, 0.0), (2, 3e160, 0.0)]) / 1e160, 6)  # {1, 1, 3, 3} x 1e160
    1.154701
    """
    live = [(int(n), float(m), float(s) if n > 1 else 0.0) for n, m, s in parts if n > 0]
    n = sum(k for k, _, _ in live)
    if n < 2 or not all(math.isfinite(m) and math.isfinite(s) for _, m, s in live):
        return math.nan
    mean = fsum(k * (m / n) for k, m, _ in live)  # (weights first: the products could overflow)
    scale = max(max(s, abs(m - mean)) for _, m, s in live)
    if scale == 0.0 or not math.isfinite(scale):
        return 0.0 if scale == 0.0 else math.inf
    ss = fsum((k - 1) * (s / scale) ** 2 + k * ((m - mean) / scale) ** 2 for k, m, s in live)
    return scale * math.sqrt(ss / (n - 1))


def overflowed_spread(m2: float, parts: Iterable[tuple[int, float, float]]) -> tuple[float, float | None]:
    """``(m2, std)`` for :func:`from_sums` from shards' ``(n, mean, std)``: where the pooled ``m2`` is not finite
    while every shard's spread is (squared deviations beyond float range, values near 1e160), ``(inf, the pooled
    std computed scaled)``, as :func:`summarize` gives one process; else ``(m2, None)``."""
    parts = list(parts)
    if math.isfinite(m2) or not all(math.isfinite(s) for n, _, s in parts if n > 1):
        return m2, None
    std = pooled_std(parts)
    return (math.inf, std) if math.isfinite(std) else (m2, None)


def combine(parts: Iterable[MetricSummary], confidence: float = 0.95) -> MetricSummary:
    """One summary from the summaries of disjoint shards (as if computed on all their samples at once); the
    variance by :func:`pooled_m2` from each shard's ``std``, not from the raw sums of squares."""
    parts = list(parts)
    n = sum(p.n for p in parts)
    total = sum(p.total for p in parts)
    total_sq = sum(p.total_sq for p in parts)
    live = [p for p in parts if p.n > 0]  # (an empty shard, a rank handed no item, reads as not 0/1)
    binary = all(p.binary for p in live or parts)
    m2 = pooled_m2((p.n, p.total, shard_m2(p)) for p in parts)
    m3, m4 = pooled_moments((p.n, p.total, shard_m2(p), p.m3, p.m4) for p in parts)
    std = None
    if not any(p.clustered for p in parts):
        m2, std = overflowed_spread(m2, [(p.n, p.mean, p.std) for p in parts])
    return from_sums(total, total_sq, n, binary, confidence, clustered=any(p.clustered for p in parts),
                     samples=sum(p.samples for p in parts), within_ss=sum(p.within_ss for p in parts),
                     within_ss2=sum(p.within_ss2 for p in parts), inv_samples=sum(p.inv_samples for p in parts),
                     nan_count=sum(p.nan_count for p in parts), population=max(p.population for p in parts),
                     m2=m2, k=max((p.k for p in parts), default=1), m3=m3, m4=m4, std=std)


def wilson_sample_size(p: float, half_width: float, confidence: float = 0.95) -> int:
    """Smallest n whose Wilson interval around proportion ``p`` has at most ``half_width``.

    >>> wilson_sample_size(0.5, 0.05)
    381
    """
    z = normal_quantile(confidence)
    p = min(max(p, 0.0), 1.0)
    # Wilson half-width: z/(1+z^2/n) * sqrt(p(1-p)/n + z^2/(4 n^2)); it falls with n, so bisect.
    def hw(n: int) -> float:
        return z / (1.0 + z * z / n) * math.sqrt(p * (1.0 - p) / n + z * z / (4.0 * n * n))

    lo, hi = 1, 2
    while hw(hi) > half_width:
        hi *= 2
        if hi > 1 << 40:
            return hi
    while lo < hi:
        mid = (lo + hi) // 2
        if hw(mid) <= half_width:
            hi = mid
        else:
            lo = mid + 1
    return lo


def mean_sample_size(std: float, half_width: float, confidence: float = 0.95) -> int:
    """Samples needed for a normal-approximation interval of the mean to have at most ``half_width``.

    >>> mean_sample_size(1.0, 0.1)
    385
    """
    z = normal_quantile(confidence)
    if half_width <= 0:
        raise ValueError("half_width must be positive")
    ratio = z * std / half_width
    n = ratio * ratio  # a float product: inf on overflow (``** 2`` would raise), as is a huge std / half_width
    if not n < 1 << 40:
        return 1 << 40  # beyond any eval set, as wilson_sample_size caps it; the policy clamps to its max
    return max(1, math.ceil(n))


# --------------------------------------------------------------------------------------------------
# Multi-sample results: items x samples, the item is the statistical unit.


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimator of pass@k from ``n`` samples of which ``c`` are correct (Chen et al. 2021):
    ``1 - C(n-c, k) / C(n, k)``, the chance that at least one of ``k`` samples drawn without replacement
    from the ``n`` is correct.

    >>> pass_at_k(10, 3, 1), round(pass_at_k(10, 3, 5), 4), pass_at_k(4, 0, 2), pass_at_k(4, 3, 2)
    (0.3, 0.9167, 0.0, 1.0)
    """
    for name, v in (("n", n), ("c", c), ("k", k)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"pass_at_k: {name} must be an integer, got {v!r}")
    if not 0 <= c <= n:
        raise ValueError(f"pass_at_k: need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k: need 1 <= k <= n, got n={n}, k={k}")
    if n - c < k:
        return 1.0
    total = math.comb(int(n), int(k))
    return (total - math.comb(int(n - c), int(k))) / total


def best_at_k(values, k: int) -> float:
    """Unbiased estimator of the expected best of ``k`` samples drawn without replacement from ``values``
    (best@k for non-binary values such as a reward; pass@k is its 0/1 case).  ``worst@k`` is
    ``-best_at_k(-values, k)``.

    >>> best_at_k([0.0, 1.0, 2.0], 1), best_at_k([0.0, 1.0, 2.0], 2), best_at_k([0.0, 1.0, 2.0], 3)
    (1.0, 1.6666666666666667, 2.0)
    """
    x = np.sort(np.asarray(values, dtype=np.float64))
    m = x.size
    if not 1 <= k <= m:
        raise ValueError(f"best_at_k: need 1 <= k <= {m} (the number of values), got k={k}")
    # The j-th smallest (1-based) is the best of a k-subset in C(j-1, k-1) of the C(m, k) subsets.  Past
    # float range (C(1100, 512) overflows; found in review) the weights come from log-gamma, and values whose
    # weighted sum would overflow (1e308) are scaled by their largest magnitude first.
    scale = float(np.max(np.abs(x)))
    if math.isfinite(scale) and scale > _HUGE_VALUE:
        return best_at_k(x / scale, k) * scale
    total = math.comb(m, k)
    if total < 1e300:  # (the k - 1 smallest weigh 0: left out, as 0 x -inf is NaN; worst@k of [1, inf, 2] read NaN)
        w = np.array([math.comb(j - 1, k - 1) for j in range(k, m + 1)], dtype=np.float64)
        return float(np.dot(w, x[k - 1:]) / total)
    from scipy.special import gammaln

    j = np.arange(k, m + 1, dtype=np.float64)
    log_w = (gammaln(j) - gammaln(k) - gammaln(j - k + 1)) - (gammaln(m + 1) - gammaln(k + 1) - gammaln(m - k + 1))
    return float(np.dot(np.exp(log_w), x[k - 1:]))


_HUGE_VALUE = 1e150  # values beyond this are scaled before sums that could overflow


def clustered_interval(mean: float, var_mean: float, n: int, samples: int, proportion: bool,
                       confidence: float = 0.95, *, cap: bool = True, df: int | None = None,
                       extreme: float | None = None) -> tuple[float, float]:
    """Interval of a mean over ``n`` independent items, given the variance ``var_mean`` of that mean.

    The unit is the item: the samples of one item are correlated, so the variance comes from the spread
    of the per-item means (``std^2 / n``, cluster-robust; see :func:`mean_over_items_var`).  Other metrics:
    Student t with ``n - 1`` degrees of freedom.  Proportions (per-sample 0/1): the Korn & Graubard (1998)
    interval, a Clopper-Pearson interval at the effective sample size ``p(1-p) / var_mean`` (the samples
    over the design effect, kept between 1 and ``samples``) scaled by ``(z / t_{n-1})^2`` for few items.
    At p = 0 or 1 the effective size is ``n`` (the samples of an item may be one answer repeated; ``p(1-p)``
    reads 0 there whatever the variance), and ``samples`` when the item means do not vary otherwise.  One
    item gives no between-item spread: effective size 1 for a proportion, a NaN interval otherwise, unless a
    finite ``var_mean`` comes with ``df`` (a whole suite of one problem: its answers' variance).
    ``cap=False`` (a suite with the finite population correction: the spread left is the answers' within each
    item, which is below a Bernoulli's) lets the effective size exceed ``samples``.  For pass@k the caller
    passes the answers' k-answer trials as ``samples`` (:func:`from_sums`).  ``df``: the degrees of freedom
    of both t quantiles (default ``n - 1``; fewer for a heavy-tailed spread of item means: :func:`kurtosis_df`).
    ``extreme``: the effective size at p = 0 or 1 instead of ``n`` (a suite with the finite population
    correction, :func:`_clustered_from_sums`).
    Coverage is checked by simulation (tests/test_multisample.py, benchmarks/llm_eval.py,
    benchmarks/pass_at_k_coverage.py).

    >>> tuple(round(x, 3) for x in clustered_interval(0.5, 0.3 ** 2 / 30, 30, 480, proportion=True))
    (0.383, 0.617)
    >>> tuple(round(x, 3) for x in clustered_interval(0.5, 0.3 ** 2 / 30, 30, 480, proportion=False))
    (0.388, 0.612)
    """
    if n <= 0 or not math.isfinite(mean):
        return (math.nan, math.nan)
    # One item: no interval from a spread between items, unless the caller has the variance and its degrees of
    # freedom otherwise (a whole suite of one problem: its answers', :func:`_clustered_from_sums`).
    alone = n < 2 and not (df is not None and df > 0 and math.isfinite(var_mean))
    if not proportion:
        if alone or not math.isfinite(var_mean):
            return (math.nan, math.nan)
        half = t_quantile(confidence, n - 1 if df is None else df) * math.sqrt(max(var_mean, 0.0))
        return (mean - half, mean + half)
    p = min(max(mean, 0.0), 1.0)
    limit = max(float(samples), float(n))
    if alone or not math.isfinite(var_mean):
        n_eff = 1.0
    elif var_mean > 1e-12 * p * (1.0 - p) and 0.0 < p < 1.0:
        # (a spread of rounding residue, ~1e-33 where every problem's mean read 2/3, is none: it read n_eff ~1e31,
        # a zero-width interval, where an exact 0 read the answers' count; a new-user probe)
        n_eff = max(p * (1.0 - p) / var_mean, 1.0)
        if cap:
            n_eff = min(n_eff, limit)
    else:
        n_eff = (float(n) if extreme is None else float(extreme)) if p in (0.0, 1.0) else limit
    if not alone:
        n_eff *= (normal_quantile(confidence) / t_quantile(confidence, n - 1 if df is None else df)) ** 2
    return clopper_pearson(p * n_eff, n_eff, confidence)


def mean_over_items_var(std: float, n: int, within_var: float = math.nan, samples_per_item: float = 1.0,
                        population: int = 0, *, cap_within: bool = True) -> float:
    """Variance of the mean of ``n`` item means whose sample standard deviation is ``std``.

    ``std^2 / n`` for items drawn from an unbounded population (the items are a sample of problems).  For
    a suite of ``population`` items sampled without replacement, the between-item part shrinks by the
    finite population correction ``1 - n / population`` (all items evaluated: only the sampling of
    answers remains), which needs the within-item variance (two or more samples per item); with one sample
    per item the two parts cannot be told apart and no correction is made (conservative).

    With ``cap_within`` (mean@k) it is the two-stage estimator (Cochran), ``((1 - f) S^2 + f W) / n`` with ``S^2``
    the item means' variance and ``W`` the within part, which never subtracts one estimate from the other: where
    the item means happen to spread less than their answers' noise says (``S^2 < W``) it lies between the two,
    and a whole suite's is ``W / n``.  (It capped ``W`` at ``S^2``, so that a whole suite of 10 problems whose
    partial-credit answers varied, sd 0.41, but whose means all read 0.5 had an interval of zero width; a probe.)
    ``cap_within=False`` for pass@k, whose item estimates all read 1 where the answers cannot tell a problem
    solved 16 times in 16 from one solved 80% of the time, so that their spread bounds nothing: the between part
    is ``S^2 - W`` at least 0 (its caller bounds the interval instead: :func:`from_sums`).

    >>> mean_over_items_var(0.4, 30), mean_over_items_var(0.4, 30, within_var=0.16, samples_per_item=16, population=30)
    (0.005333333333333334, 0.0003333333333333333)
    """
    if n <= 0:
        return math.nan
    if not math.isfinite(std):  # (one item: no spread between items)
        whole = population and population > 0 and n >= population
        # a whole suite of one problem has the variance of its answers left (it was NaN, an effective size of 1:
        # [0.0004, 0.9996] for 8 of 16 answers right, whatever the answers; a probe)
        return within_var / samples_per_item / n if whole and math.isfinite(within_var) and samples_per_item > 0 \
            else math.nan
    var_means = std * std
    if population and population > 0 and math.isfinite(within_var) and samples_per_item > 0:
        within = within_var / samples_per_item
        f = min(n / population, 1.0)
        if cap_within:
            return ((1.0 - f) * var_means + f * within) / n
        return ((1.0 - f) * max(var_means - within, 0.0) + within) / n
    return var_means / n


def clopper_pearson(successes: float, n: float, confidence: float = 0.95) -> tuple[float, float]:
    """Clopper-Pearson interval through the beta quantiles (scipy); ``successes`` and ``n`` may be
    fractional (an effective sample size).

    >>> tuple(round(x, 4) for x in clopper_pearson(8, 10))
    (0.4439, 0.9748)
    """
    from scipy.special import betaincinv

    if n <= 0:
        return (math.nan, math.nan)
    a = (1.0 - confidence) / 2.0
    lo = float(betaincinv(successes, n - successes + 1.0, a)) if successes > 0 else 0.0
    hi = float(betaincinv(successes + 1.0, n - successes, 1.0 - a)) if successes < n else 1.0
    p = successes / n
    return (min(lo, p), max(hi, p))


def _clustered_from_sums(total, total_sq, n, proportion, confidence, samples, within_ss, nan_count,
                         population=0, m2=None, mean=None, k=1, m3=math.nan, m4=math.nan,
                         within_ss2=math.nan, inv_samples=math.nan) -> MetricSummary:
    extra = {"clustered": True, "samples": int(samples), "within_ss": float(within_ss), "nan_count": int(nan_count),
             "population": int(population), "k": int(k), "m3": float(m3), "m4": float(m4),
             "within_ss2": float(within_ss2), "inv_samples": float(inv_samples)}
    if n <= 0:
        return MetricSummary(mean=math.nan, n=0, ci=(math.nan, math.nan), total=0.0, total_sq=0.0,
                             binary=proportion, **extra)
    if mean is None or not math.isfinite(mean):
        mean = total / n
    std = math.sqrt(_variance(total, total_sq, n, m2)) if n > 1 else math.nan
    summary = MetricSummary(mean=mean, n=n, ci=(math.nan, math.nan), std=std, total=total, total_sq=total_sq,
                            binary=proportion, **extra)
    spi = summary.effective_samples_per_item  # (the harmonic mean of the items' answers: unequal counts)
    fpc = population > 0 and math.isfinite(summary.within_var) and spi > 0
    # pass@k in a suite: its within part (the jackknife, at least the variance at a smoothed solve rate:
    # _pass_within_ss) is not capped at the item estimates' spread, which reads 0 where they all read 1; the
    # interval is instead never wider than a sample of problems' (below).
    pass_fpc = proportion and k > 1 and fpc and n >= 2
    var_mean = mean_over_items_var(std, n, summary.within_var, spi, population, cap_within=not pass_fpc)
    # With the finite population correction the answers' own spread is what is left, and answers to one
    # problem vary less than a Bernoulli at the overall mean: capping the effective size at the answers made
    # a whole 30-problem suite's interval about 1.2x too wide (simulated coverage 0.98-0.99 at 95%; uncapped
    # 0.95-0.97, tests/test_multisample.py).
    limit, cap = samples, not fpc
    # Heavy-tailed item means (a skewed pool of problems) make their spread a poor estimate of the variance:
    # fewer degrees of freedom (kurtosis_df), unless the whole suite was evaluated (the spread between its
    # items is then not sampled at all).  Not for pass@k, whose cap at the answers' k-answer trials (below)
    # already covers such pools (0.97-1.00, SIMULATED): both would widen it up to 2.7x.  For a proportion the
    # kurtosis is weighted by the share of the item means' variance that lies between items: the rest is the
    # answers' binomial noise, whose shape the Clopper-Pearson interval already has (with one answer per item,
    # where that share is unknown, none: the item means are Bernoulli draws and the full kurtosis widened the
    # interval of 30 problems at accuracy 0.05 from +-0.10 to +-0.17).
    whole = fpc and n >= population
    weight = 1.0
    if proportion:
        between, var_means = summary.between_var, std * std
        weight = min(between / var_means, 1.0) if math.isfinite(between) and var_means > 0 and math.isfinite(
            summary.within_var) else 0.0
    df = n - 1 if whole or (proportion and k > 1) else kurtosis_df(n, _m2(std, n), m4, weight)
    if fpc and whole and n < 2:
        # one problem, the whole suite: its answers' degrees of freedom (their count less one where they do not
        # vary: 16 alike read NaN, or an effective size of 1 for a proportion, beside 15 of 16's [0.65, 1]; a
        # review).  (Several problems keep the cap at n - 1 below: lifted for whole suites, mean@k's coverage fell
        # to 0.945-0.952 on rows of benchmarks/pass_at_k_coverage.py, SIMULATED.)
        df = _within_df(std, n, summary.within_var, spi, population, within_ss, within_ss2, df,
                        cap_within=not pass_fpc) if within_ss > 0 else max(int(samples) - 1, 0)
    elif fpc:
        df = min(df, _within_df(std, n, summary.within_var, spi, population, within_ss,
                                within_ss2, df, cap_within=not pass_fpc))
    if proportion and k > 1:
        # pass@k: an item's m answers hold m / k disjoint k-answer trials, and the effective size is capped at
        # those, not at the answers.  The spread of per-item pass@k, mostly near 1 with a rare hard problem
        # far below, is what a sample of 30 problems misses; capped at the answers, pass@8 of 16 answers on
        # 30 MATH-like problems covered 73% (simulated, tests/test_multisample.py).  With the finite population
        # correction the cap loosens with the share of the suite evaluated (none when it is all evaluated).
        f = min(n / population, 1.0) if fpc else 0.0
        if f < 1.0:
            limit, cap = samples / k / (1.0 - f), True
    # Every answer wrong (or right) in a suite with the finite population correction: the effective size was the
    # items, as for a sample of problems (whose unseen problems may be solved), so 0 of 30 AIME problems x 16
    # answers read [0, 0.125] while 1 of 480 read [0, 0.012] (found by a new-user probe: a collapse to 0 could
    # not be confirmed below 0.1).  With the items sampled from a finite suite the between-item part shrinks by
    # 1 - f, and a mean of [0, 1] values varies at most p(1-p) between items, so n / (1 - f) items, at most the
    # answers (all of them evaluated: the answers; by AM-GM no mixture of solve rates makes all of them wrong
    # likelier than the answers' binomial at the mean rate; with answers repeated, greedy decoding, the value is
    # known exactly).  For pass@k its k-answer trials.
    extreme = None
    if proportion and fpc and (n >= 2 or whole):  # (one problem, the whole suite: its answers; a review)
        f = min(n / population, 1.0)
        trials = samples / k
        extreme = trials if f >= 1.0 else min(n / (1.0 - f), trials)
    ci = clustered_interval(mean, var_mean, n, limit, proportion, confidence, cap=cap, df=df, extreme=extreme)
    if pass_fpc:
        # The interval of the same items seen as a sample of an unbounded population: its effective size is
        # capped at the m / k disjoint k-answer trials per item, a bound that holds for a suite too (an item's
        # pass@k estimate varies less than the mean of its trials, g(1-g) / (m/k) with g its true pass@k, and
        # the items' average g(1-g) is at most that of their mean g).
        free = clustered_interval(mean, std * std / n, n, samples / k, proportion, confidence)
        if free[1] - free[0] < ci[1] - ci[0]:
            ci = free
    return dataclasses.replace(summary, ci=ci)


def _within_df(std, n, within_var, samples_per_item, population, within_ss, within_ss2, df, *, cap_within):
    """The degrees of freedom of :func:`mean_over_items_var` under the finite population correction
    (Satterthwaite): n times that variance is ``(1 - f) S^2 + f W``, f the share of the suite evaluated, ``S^2`` the
    item means' variance (``df``) and ``W`` the within-item part (``within_ss^2 / within_ss2``, as many as the items
    whose answers vary when they vary alike, fewer when a few items hold it; a review caught W weighted 1, not f,
    which made a half-evaluated suite's interval 1.2x wider than it needs).  A whole suite of 100
    problems x 2 answers, 95 always or never solved and 5 solved half the time, leaves only the within part, on
    1-5 items: read on n - 1 = 99, mean@k's 95% interval covered 0.84 [0.81, 0.86] of draws (0.36 where one item's
    answers differed; a new-user probe; continuous scores with 3 noisy items of 30: 0.87; SIMULATED,
    tests/test_multisample.py).  ``df`` as it was where ``within_ss2`` is unknown (NaN: a state or a shard from
    before it) or nothing varies within items."""
    if not (math.isfinite(within_ss2) and within_ss2 > 0 and math.isfinite(within_ss) and within_ss > 0):
        return df
    var_means = std * std if math.isfinite(std) else 0.0
    within = within_var / samples_per_item
    if not within > 0:
        return df
    f = min(n / population, 1.0)
    # ((1 - f) S^2 + f W, as mean_over_items_var; pass@k's (1 - f) (S^2 - W) + W: where S^2 < W, its between part
    # is 0 and W is all)
    spread, inside = ((1.0 - f) * var_means, f * within) if cap_within or var_means >= within else (0.0, within)
    df_within = within_ss * within_ss / within_ss2
    return (spread + inside) ** 2 / (spread * spread / max(df, 1) + inside * inside / df_within)


def _row_means(rows: np.ndarray) -> np.ndarray:
    """Each row's mean over its non-NaN values; NaN for a row with none (numpy's nanmean warns "Mean of empty
    slice" there, into the user's logs: an item whose answers all failed is data, not a warning)."""
    counts = np.sum(~np.isnan(rows), axis=1)
    sums = np.nansum(rows, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def item_rows(label: str, value: object) -> tuple[np.ndarray, np.ndarray] | None:
    """``(padded, lengths)`` for a 2-D (items x samples) value, else None (a scalar or 1-D value).

    ``padded`` is items x (longest row) with NaN padding, ``lengths`` the number of samples returned per
    item.  Accepts a 2-D numpy array or tensor, or a sequence of per-item sequences of equal or unequal
    length.  Anything deeper than 2-D, or rows that are not numbers, is a ``TypeError`` naming ``label``.
    """
    if type(value).__module__.startswith("torch"):
        if value.dim() < 2:
            return None
        value = value.detach().to("cpu").double().numpy()
    if isinstance(value, np.ndarray):
        if value.ndim < 2 and value.dtype != object:
            return None
        if value.ndim == 2 and value.dtype != object:
            try:  # (a string array is text, refused: astype read [["42", "17"], ["3", "3"]] as 16.25)
                arr = float_array(value)
            except (TypeError, ValueError):
                raise TypeError(f"{label}: per-sample values must be numbers, got a {value.dtype} array "
                                f"{value.ravel()[:4].tolist()!r:.80} (answers go in '<metric>:answers')") from None
            return arr, np.full(arr.shape[0], arr.shape[1], dtype=np.int64)
        if value.ndim > 2:
            raise TypeError(f"{label}: expected per-item values (1-D) or items x samples (2-D), got shape {value.shape}")
        value = list(value)
    if not isinstance(value, (list, tuple)) or not value:
        return None
    if not any(isinstance(r, (list, tuple)) or getattr(r, "ndim", 0) > 0 for r in value):
        # (per-item 0-d tensors or arrays, [pred == y for ...], are per-item numbers: they failed every
        # evaluation as "a number where the other items have a list of samples"; a new user's probe)
        return None
    rows = []
    for i, r in enumerate(value):
        if type(r).__module__.startswith("torch"):
            r = r.detach().to("cpu").double().numpy()
        try:
            a = float_array(r)
        except (TypeError, ValueError):
            raise TypeError(f"{label}, item {i}: per-sample values must be numbers, got {r!r:.80}") from None
        if a.ndim == 0:
            raise TypeError(f"{label}, item {i}: a number where the other items have a list of samples "
                            "(give every item a list, or every item one number)")
        if a.ndim > 1:
            raise TypeError(f"{label}, item {i}: expected a list of samples, got shape {a.shape}")
        rows.append(a)
    lengths = np.array([a.size for a in rows], dtype=np.int64)
    padded = np.full((len(rows), int(lengths.max(initial=0))), np.nan)
    for i, a in enumerate(rows):
        padded[i, : a.size] = a
    return padded, lengths


def _item_name(i: int, ids, rows: int) -> str:
    """Row ``i`` as the dataset index the request gave (``ids``), not the row, where that differs."""
    return f"item {ids[i]} (row {i})" if ids is not None and len(ids) == rows and ids[i] != i else f"item {i}"


def short_rows_warning(label: str, lengths: np.ndarray, ks=(1,), asked: int | None = None, ids=None,
                       nan: bool = False, counts: str = "pass@m of its m") -> str | None:
    """The warning for items that returned fewer answers than asked (``asked``, a suite's ``samples_per_item``)
    or than the largest k of pass@k, or None.  Such an item still counts, with what it returned (its mean@k over
    its answers, pass@m of its m): a generation that dropped answers should be seen, not fail the evaluation.
    ``lengths`` are the scored answers per item (``nan``: some rows held NaN answers, which do not count); an
    item with none is left out (not evaluated), and the warning says so.  ``asked`` is what the request asked for
    (``SuiteRequest.samples_per_item``: the sample-size plan's choice, which may exceed the suite's configured
    ``samples_per_item`` up to its ``max_samples_per_item``); ``counts``: how a short item counts.

    >>> short_rows_warning("metric 'acc'", np.array([4, 4, 2]), ks=(1, 4))
    "metric 'acc': 1 of 3 items returned fewer than 4 answers (the largest k of evaluation.pass_at_k); the fewest: 2, for item 2; each counts with the answers it returned (pass@m of its m)"
    """
    need = max([int(asked or 0), *(int(k) for k in ks)])
    short = np.nonzero(lengths < need)[0]
    if not short.size:
        return None
    i = int(short[np.argmin(lengths[short])])
    why = ("asked (the request's samples_per_item, the plan's choice)" if asked and need == int(asked)
           else "(the largest k of evaluation.pass_at_k)")
    scored = " (NaN answers not counted)" if nan else ""
    if need == 1:  # (only items with none are short: "fewer than 1 answers asked" read oddly; a probe)
        return (f"{label}: {short.size} of {lengths.size} items returned no answer{scored}, "
                f"{_item_name(i, ids, lengths.size)} among them: left out (not evaluated)")
    none = int(np.sum(lengths == 0))
    left_out = (f"; {none} item{'s' if none > 1 else ''} with no answer {'are' if none > 1 else 'is'} left out "
                "(not evaluated)") if none else ""
    return (f"{label}: {short.size} of {lengths.size} items returned fewer than {need} answers {why}{scored}; the "
            f"fewest: {int(lengths[i])}, for {_item_name(i, ids, lengths.size)}; each counts with the answers it "
            f"returned ({counts}){left_out}")


def summarize_rows(label: str, name: str, padded: np.ndarray, lengths: np.ndarray, ks=(1,),
                   confidence: float = 0.95, population: int = 0, ids=None,
                   both: bool = False, kind: str | None = None) -> dict[str, MetricSummary]:
    """The summaries of one items x samples metric: ``name`` (mean@k: the mean of the per-item means) and,
    for 0/1 values, ``name/pass@<k>`` for each k in ``ks``, else ``name/best@<k>`` and ``name/worst@<k>``;
    ``both``: best@k and worst@k for 0/1 values too (a shard of a process group, whose 0/1 values may be another
    shard's rewards in [0, 1]: :func:`adaptive_eval.distributed.combine_rank_summaries` keeps the kind the whole
    evaluation has).

    NaN samples are data: skipped within their item and counted in ``nan_count`` (an item with no finite
    sample counts as not evaluated); so does a shorter row (an item that returned fewer answers than the others):
    its pass@k is pass@m of its m answers.  A k above the samples returned for *every* item is a ``ValueError``
    naming ``label`` and the longest row's item (its index in ``ids``, the request's, when given).

    ``kind`` (``evaluation.metric_kinds``) sets mean@k's interval as declared: ``"proportion"`` for answers in [0, 1]
    (partial credit), ``"mean"`` for 0/1 answers taken as a mean (Student t over the problems); None: a
    proportion where every answer is 0 or 1.  pass@k (0/1 answers) and best@k/worst@k (others) go by the values.
    (It was ignored for items x samples metrics, silently; a probe.)
    """
    finite = ~np.isnan(padded)
    m = finite.sum(axis=1)
    nan_count = int(lengths.sum() - m.sum())
    live = m > 0
    filled = np.where(finite, padded, 0.0)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):  # (huge values are data)
        means = filled.sum(axis=1) / np.maximum(m, 1)
        if not np.all(np.isfinite(means[m > 0])) and np.all(np.isfinite(filled)):
            scale = float(np.max(np.abs(filled)))  # finite answers whose sum overflows: a finite item mean
            means = (filled / scale).sum(axis=1) / np.maximum(m, 1) * scale
        dev = np.where(finite, padded - means[:, None], 0.0)
        item_ss = np.sum(dev[live] ** 2, axis=1)
        within_ss = float(np.sum(item_ss))
        several = m[live] > 1
        within_ss2 = float(np.sum(item_ss[several] ** 2 / (m[live][several] - 1)))
    values = padded[finite]
    binary = bool(values.size) and bool(np.all((values == 0.0) | (values == 1.0)))
    # A shard with no scored answer reports both kinds empty, so that its NaN answers count in the combined
    # pass@k (or best@k) too (they were dropped from it; a review); the combination keeps the kind the others have.
    unscored = both and not values.size
    im = means[live]
    samples = int(m.sum())
    with np.errstate(over="ignore", invalid="ignore"):  # huge values are data: inf sums, not a warning
        sums = float(im.sum()), float(np.dot(im, im))
    im_mean = stable_mean(im)
    inv_samples = float(np.sum(1.0 / m[live]))  # (items of unequal counts: MetricSummary.effective_samples_per_item)
    proportion = binary if kind is None else kind == "proportion"
    out = {name: from_sums(*sums, int(im.size), proportion, confidence, clustered=True, samples=samples,
                           within_ss=within_ss, within_ss2=within_ss2, nan_count=nan_count, population=population,
                           inv_samples=inv_samples,
                           m2=deviations(im, im_mean), mean=im_mean, **_moments(im, im_mean))}
    for k in ks:
        # The answers returned (row lengths), not those scored: k above what every item returned is a request
        # the evaluate_fn did not meet; NaN answers (a grader's timeouts) are data, and an item short of k by
        # them counts as pass@m with the warning of short_rows_warning (an error there dropped the whole
        # evaluation, every metric of every suite, for one NaN answer per item; found in review).
        # (A shard's rows are judged with every rank's, after they combine: answers_short_of_k.  One rank whose items
        # all came back short, or empty, failed the whole evaluation that one process takes; a probe.)
        if not both and lengths.size and int(lengths.max()) == 0:  # (it read "k=1 is larger than the samples")
            raise ValueError(f"{label}: every item's list of answers is empty ({lengths.size} items): evaluate_fn "
                             "returned no answer at all")
        if not both and lengths.size and int(lengths.max()) < k:
            i = int(np.argmax(lengths))
            raise ValueError(f"{label}: k={k} (evaluation.pass_at_k) is larger than the samples returned for every "
                             f"item (at most {int(lengths[i])}, for {_item_name(i, ids, lengths.size)})")
        # Every item with a scored answer counts; one with fewer scored answers than k (NaN answers, or a
        # shorter list: see :func:`short_rows_warning`) with what it has, pass@m of its m (a lower bound on its
        # pass@k): leaving it out biased the mean up, as the answers that fail to score are mostly the hard
        # problems'.
        ok = np.nonzero(live)[0]
        if binary or unscored:
            c = filled.sum(axis=1)
            per_item = np.array([pass_at_k(int(m[i]), int(c[i]), min(int(k), int(m[i]))) for i in ok],
                                dtype=np.float64)
            # (its spread from the deviations, as mean@k's: total_sq - n mean^2 left a rounding residue where
            # every item reads the same, and with the finite population correction pass@1 of six items
            # answered [1, 0, 1] read 0.667 [0.6667, 0.6667] beside mean@k's [0.326, 0.912]; found in review)
            per_mean = stable_mean(per_item)
            out[f"{name}/pass@{k}"] = from_sums(float(per_item.sum()), float(np.dot(per_item, per_item)),
                                                int(per_item.size), True, confidence, clustered=True,
                                                samples=int(m[ok].sum()), nan_count=nan_count,
                                                population=population,
                                                **dict(zip(("within_ss", "within_ss2"),
                                                           _pass_within_ss(m[ok], c[ok], int(k)))), k=int(k),
                                                inv_samples=inv_samples,  # (k > 1 too: 0.90 -> 0.96; review)
                                                m2=deviations(per_item, per_mean), mean=per_mean,
                                                **_moments(per_item, per_mean))
        extremes = ()
        if (binary or unscored) and both and k > 1:
            # (0/1 answers: best@k is pass@k, worst@k the chance that k answers are all right, 1 - pass@k of the
            # wrong ones; the general loop below cost 4-5x the shard's summary; review)
            extremes = (("best", per_item), ("worst", np.array(
                [1.0 - pass_at_k(int(m[i]), int(m[i] - c[i]), min(int(k), int(m[i]))) for i in ok], dtype=np.float64)))
        elif not binary and k > 1 and values.size:
            extremes = ((kind, np.array([sign * best_at_k(sign * padded[i][finite[i]], min(int(k), int(m[i])))
                                         for i in ok])) for kind, sign in (("best", 1.0), ("worst", -1.0)))
        for kind, per_item in extremes:
            with np.errstate(over="ignore", invalid="ignore"):  # (huge values are data, as for mean@k)
                sums = float(per_item.sum()), float(np.dot(per_item, per_item))
            per_mean = stable_mean(per_item)
            out[f"{name}/{kind}@{k}"] = from_sums(*sums, int(per_item.size), False, confidence, clustered=True,
                                                  samples=int(m[ok].sum()), nan_count=nan_count,
                                                  population=population, m2=deviations(per_item, per_mean),
                                                  mean=per_mean, **_moments(per_item, per_mean))
    most = int(lengths.max(initial=0))  # (in one process too: a summary does not depend on the world size; review)
    return {key: dataclasses.replace(v, most=most) for key, v in out.items()}


def _pass_within_ss(m: np.ndarray, c: np.ndarray, k: int) -> tuple[float, float]:
    """The within-item part of pass@k's spread, as the ``within_ss`` of :func:`from_sums` (so that a suite's
    finite population correction applies to it as to mean@k).

    Item i's estimate (:func:`pass_at_k` of its ``m`` answers, ``c`` correct) varies with the draw of its
    answers; its jackknife variance over the answers, ``(m-1)/m * c(m-c)/m * (t1 - t0)^2`` with ``t1``, ``t0``
    the estimate without one correct, one wrong answer (conservative for a U-statistic: Efron-Stein), is
    stored as ``V m (m-1)``: for k = 1 that is the item's sum of squared deviations, so pass@1 gets mean@k's
    interval, and a sum over items, so shards combine exactly.  NaN (no correction) when an item has no
    more than k answers (nothing to leave out).

    For k > 1 an item's ``V`` is at least :func:`pass_at_k_var`, the exact variance of its estimate, read at the
    smoothed solve rate ``(c + 1/2) / (m + 1)``.  The jackknife is blind where the estimate does not move with one
    answer more or less: with ``c > m - k`` right it reads 1 whatever the answers, and the jackknife 0, though a
    problem solved 16 times in 16 may be one solved 80% of the time; and a few answers short of that it is
    tiny.  A whole 30-problem suite, 16 answers each, covered its true pass@4 0.69 of the time with solve rates
    near 0.95 (Beta(9.5, 0.5)), its pass@8 0.77 with MATH-like ones (Beta(2, 0.6)) and 0.80 with 40% never and
    30% always solved (SIMULATED, 1,000 draws each, benchmarks/pass_at_k_coverage.py; now 1.000, 0.956, 0.930;
    the floor only where ``c > m - k``, c = m among them, left the last 0.82).  An item with no right answer
    keeps 0, as in mean@k: floored there too, AIME-like suites (Beta(0.3, 1.5)), already covered, read 1.2-1.4x
    wider.  Elsewhere the jackknife is often the larger, and is kept: the floor alone, without it, covered
    AIME-like pass@8 0.90.
    """
    total = squares = 0.0
    for mi, ci in zip(m.tolist(), c.tolist()):
        mi, ci = int(mi), int(round(ci))
        if k == 1 and mi == 1:
            continue  # one answer: nothing within it (as for mean@k, whose sum of squares it adds 0 to)
        if mi - 1 < k:
            return math.nan, math.nan
        if ci == 0 or (ci == mi and k == 1):
            continue
        v = 0.0
        if ci < mi:
            d = pass_at_k(mi - 1, ci - 1, k) - pass_at_k(mi - 1, ci, k)
            v = (mi - 1) / mi * ci * (mi - ci) / mi * d * d
        if k > 1:
            v = max(v, pass_at_k_var(mi, k, (ci + 0.5) / (mi + 1.0)))
        total += mi * (mi - 1) * v
        squares += mi * mi * (mi - 1) * v * v  # (the item's term squared over its m - 1: see within_ss2)
    return total, squares


@functools.lru_cache(maxsize=4096)
def pass_at_k_var(n: int, k: int, p: float) -> float:
    """The variance of :func:`pass_at_k` of ``n`` answers each correct with probability ``p`` (its sampling
    variance over the draw of the answers; exact).

    The estimate is ``1 - a`` with ``a = C(n-c, k) / C(n, k)``, the chance that k answers drawn without
    replacement are all wrong; ``a^2`` is that chance for two independent draws, whose overlap ``i`` is
    hypergeometric, so ``E[a^2] = sum_i h(i) q^(2k-i)`` with ``q = 1 - p`` and the variance
    ``sum_i h(i) q^(2k-i) (1 - q^i)``: k + 1 terms, each non-negative (no cancellation).  For k = 1, ``p q / n``.
    NaN for ``p`` NaN; a ``ValueError`` for ``p`` outside [0, 1].

    >>> round(pass_at_k_var(16, 1, 0.25) * 16 / (0.25 * 0.75), 12), round(pass_at_k_var(16, 4, 0.5), 6)
    (1.0, 0.005192)
    """
    from scipy.special import gammaln

    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k_var: need 1 <= k <= n, got n={n}, k={k}")
    if math.isnan(p):
        return math.nan
    if not 0.0 <= p <= 1.0:  # (read 0 before: a variance for an input that is no probability; found in review)
        raise ValueError(f"pass_at_k_var: p must lie in [0, 1], got {p!r}")
    if p == 0.0 or p == 1.0:
        return 0.0
    i = np.arange(max(0, 2 * k - n), k + 1, dtype=np.float64)  # the overlap of two k-subsets of n

    def log_comb(a, b):
        return gammaln(a + 1.0) - gammaln(b + 1.0) - gammaln(a - b + 1.0)

    log_h = log_comb(float(k), i) + log_comb(float(n - k), k - i) - log_comb(float(n), float(k))
    log_q = math.log1p(-p)
    return float(np.sum(np.exp(log_h + (2 * k - i) * log_q) * -np.expm1(i * log_q)))


def two_stage_size(between_var: float, within_var: float, half_width: float, *, cost_per_sample: float = 1.0,
                   cost_per_item: float = 0.0, population: int = 0, max_samples_per_item: int = 32,
                   min_items: int = 1, max_items: int | None = None,
                   confidence: float = 0.95, proportion_mean: float | None = None,
                   min_samples_per_item: int = 1) -> tuple[int, int, str]:
    """``(items, samples_per_item, why)``: the cheapest two-stage sample whose interval of the mean reaches
    ``half_width`` (normal approximation), given the between-item variance (of the items' true means) and
    the within-item variance (of one sample around its item's mean).

    The variance of the mean of ``n`` items x ``m`` samples is ``(1 - n/N) sb2/n + sw2/(n m)`` for a suite
    of ``N`` items (``population``; 0: unbounded), the cost ``n (cost_per_item + m cost_per_sample)``.
    Every ``m`` up to ``max_samples_per_item`` is tried with the fewest items that reach the target (with
    the interval's t quantile; no finite population correction at ``m = 1``, where the interval cannot
    make one); the cheapest wins.  More samples per item pay only when the items run out (a small suite) or an item is
    expensive beside a sample (long prompts): the classic optimum is ``m = sqrt(cost_per_item sw2 /
    (cost_per_sample sb2))``.  When no size reaches the target, the largest (all items x the most samples).
    ``proportion_mean`` (a proportion's last mean): the plan is checked against the interval the result
    will really get (:func:`clustered_interval`, wider than the normal one near 0 or 1), adding items
    until it reaches the target.  ``min_samples_per_item``: no plan with fewer (the largest k of a pass@k
    the suite reports: with fewer answers per item it could not be reported).

    >>> two_stage_size(0.05, 0.20, 0.05)[:2]                  # a large suite: one sample per item
    (387, 1)
    >>> two_stage_size(0.05, 0.20, 0.05, population=30)[:2]   # 30 items: all of them, more samples each
    (30, 12)
    >>> two_stage_size(0.05, 0.20, 0.05, cost_per_item=8.0)[:2]  # expensive prompts: a few samples each
    (141, 5)
    """
    z = normal_quantile(confidence)
    sb2 = max(float(between_var), 0.0) if math.isfinite(between_var) else 0.0
    sw2 = max(float(within_var), 0.0) if math.isfinite(within_var) else 0.0

    def predicted(n: int, m: int) -> float:
        """The half-width the result of ``n`` items x ``m`` samples will report, as :func:`_clustered_from_sums`
        computes it: with the finite population correction (a suite, ``m > 1``) the effective size is not capped
        at the answers.  (The plan capped it: a whole 5-problem suite was asked 5x64 answers where 5x25 reached the
        target, and a 10-problem one 10x12-14 where 10x5 did; a probe.)"""
        f = n / population if population and population > 0 and m > 1 else 0.0
        var = ((1.0 - f) * sb2 + sw2 / m) / n
        if proportion_mean is not None and 0.0 < proportion_mean < 1.0:
            lo, hi = clustered_interval(proportion_mean, var, n, n * m, True, confidence, cap=f == 0.0)
            return (hi - lo) / 2.0
        return (t_quantile(confidence, n - 1) if n >= 2 else z) * math.sqrt(max(var, 0.0))

    cap = population if population and population > 0 else None
    if max_items is not None:
        cap = max_items if cap is None else min(cap, max_items)
    best = None
    least = max(int(min_samples_per_item), 1)
    max_samples_per_item = max(int(max_samples_per_item), least)
    for m in range(least, max_samples_per_item + 1):
        # With one sample per item the interval cannot tell the two variances apart, so it makes no finite
        # population correction (mean_over_items_var): neither may the plan.
        fpc = sb2 / population if population and population > 0 and m > 1 else 0.0
        n = 1
        for _ in range(3):  # the interval's t quantile at the planned item count
            q = t_quantile(confidence, n - 1) if n >= 2 else z
            n = max(int(min_items), math.ceil((sb2 + sw2 / m) / ((half_width / q) ** 2 + fpc) - 1e-9), 1)
        if cap is not None and n > cap:
            continue
        if proportion_mean is not None and 0.0 < proportion_mean < 1.0:
            while predicted(n, m) > half_width and (cap is None or n < cap):
                n = n + max(1, n // 50) if cap is None else min(cap, n + max(1, n // 50))
            if predicted(n, m) > half_width:
                continue
        cost = n * (cost_per_item + m * cost_per_sample)
        if best is None or cost < best[2] - 1e-12:
            best = (n, m, cost)
    detail = (f"sb2={sb2:.3g} sw2={sw2:.3g}" + (f" N={population}" if population else "")
              + (f" item_cost/sample_cost={cost_per_item / cost_per_sample:.3g}" if cost_per_item else ""))
    if best is None:
        n, m = (cap if cap is not None else int(min_items)), max(int(max_samples_per_item), 1)
        # (the half-width the result will report: it said the normal one, +-0.032 "at 5x64" beside "+-0.075
        # unreachable", where the result reported +-0.046; a probe)
        return n, m, f"two-stage {detail}: +-{half_width:g} unreachable, +-{predicted(n, m):.3g} at {n}x{m}"
    n, m, cost = best
    return n, m, f"two-stage {detail}: {n}x{m} reach +-{half_width:g} at least cost ({cost:.4g})"


# --------------------------------------------------------------------------------------------------
# Custom aggregations over items (evaluation.aggregations): weighted mean, quantiles.

_QUANTILE = re.compile(r"^p(\d{1,2})$")


def aggregation_problem(kind: str) -> str | None:
    """Why ``kind`` is not an aggregation (None if it is): ``mean``, ``weighted_mean`` or ``p1``..``p99``."""
    if kind in ("mean", "weighted_mean"):
        return None
    found = _QUANTILE.match(str(kind))
    if found is not None and 1 <= int(found[1]) <= 99:
        return None
    return f"unknown aggregation {kind!r} (mean, weighted_mean, p1..p99)"


def quantile_interval(values, q: float, confidence: float = 0.95) -> tuple[float, float, float]:
    """``(estimate, low, high)``: the ``q`` quantile of ``values`` (independent items) and its
    distribution-free interval from order statistics (the number of values below the true quantile is
    Binomial(n, q)); an end is infinite when ``n`` is too small for that side.

    >>> est, lo, hi = quantile_interval(range(1, 101), 0.5)
    >>> est, lo, hi
    (50.5, 40.0, 61.0)
    """
    from scipy.stats import binom

    x = np.sort(np.asarray(values, dtype=np.float64))
    x = x[~np.isnan(x)]
    n = x.size
    if n == 0:
        return (math.nan, math.nan, math.nan)
    a = (1.0 - confidence) / 2.0
    lo_rank = int(binom.ppf(a, n, q))  # P(B < lo_rank) <= a: x_(lo_rank) is a lower bound (1-based)
    hi_rank = int(binom.ppf(1.0 - a, n, q)) + 1
    low = float(x[lo_rank - 1]) if lo_rank >= 1 else -math.inf
    high = float(x[hi_rank - 1]) if hi_rank <= n else math.inf
    return float(np.quantile(x, q)), low, high


# The aggregations a framework adapter makes of one rank's items (Lightning's reduce_fx): shards combine as such.
REDUCED_KINDS = ("sum", "max", "min")


def aggregate_summary(kind: str, payload: tuple, confidence: float = 0.95) -> MetricSummary:
    """The summary of an aggregation from its sufficient statistics (exact across shards: weighted sums
    add up, quantile values concatenate).

    ``weighted_mean``: ``sum(w y) / sum(w)`` over items (``y`` the item's mean), with the linearised
    (ratio-estimator) variance ``n/(n-1) sum(w^2 (y - R)^2) / sum(w)^2`` and a t interval over items.
    ``p<q>``: the quantile over items with :func:`quantile_interval`.  ``sum``, ``max``, ``min``: one value over
    ``n`` items (a framework adapter's reduction of its rank's items, ``payload`` ``(value, n)``), no interval.
    """
    if kind in REDUCED_KINDS:
        value, n = float(payload[0]), int(payload[1])
        return MetricSummary(mean=value, n=n, ci=(math.nan, math.nan), total=value * n, per_sample=False,
                             aggregate=kind, payload=(value, float(n)))
    if kind == "weighted_mean":
        n, sw, swy, sw2, sw2y, sw2y2 = payload
        n = int(n)
        if n <= 0 or not sw > 0:
            return MetricSummary(mean=math.nan, n=n, ci=(math.nan, math.nan), aggregate=kind, payload=tuple(payload))
        r = swy / sw
        if n >= 2:
            ss = max(sw2y2 - 2.0 * r * sw2y + r * r * sw2, 0.0)
            se = math.sqrt(n / (n - 1) * ss) / sw
            half = t_quantile(confidence, n - 1) * se
            ci, std = (r - half, r + half), se * math.sqrt(n)
        else:
            ci, std = (math.nan, math.nan), math.nan
        return MetricSummary(mean=r, n=n, ci=ci, std=std, total=r * n, aggregate=kind, payload=tuple(payload))
    q = int(kind[1:]) / 100.0
    est, lo, hi = quantile_interval(payload, q, confidence)
    return MetricSummary(mean=est, n=len(payload), ci=(lo, hi), total=est * len(payload), aggregate=kind,
                         payload=tuple(payload))


def aggregate_items(label: str, kind: str, item_values: np.ndarray, weights=None,
                    confidence: float = 0.95) -> MetricSummary:
    """One aggregation of per-item values (NaN items skipped); ``weights`` for ``weighted_mean``."""
    y = np.asarray(item_values, dtype=np.float64)
    if kind == "weighted_mean":
        if weights is None:
            raise ValueError(f"{label}: the weighted_mean aggregation needs per-item weights (the key "
                             "'<metric>:weights', one non-negative number per item)")
        w = np.asarray(weights, dtype=np.float64)
        if w.ndim != 1:
            raise TypeError(f"{label}: weights must be one number per item (1-D), got shape {w.shape}")
        if w.size != y.size:
            raise ValueError(f"{label}: {w.size} weights for {y.size} items; item index {min(w.size, y.size)} "
                             "has no " + ("weight" if w.size < y.size else "value"))
        bad = np.nonzero(~(w >= 0) | ~np.isfinite(w))[0]
        if bad.size:
            raise ValueError(f"{label}: weight of item {int(bad[0])} is {float(w[bad[0]])!r}; weights must be finite "
                             "and non-negative")
        ok = ~np.isnan(y)
        y, w = y[ok], w[ok]
        payload = (int(y.size), float(w.sum()), float(np.dot(w, y)), float(np.dot(w, w)), float(np.dot(w * w, y)),
                   float(np.dot(w * w, y * y)))
        return aggregate_summary(kind, payload, confidence)
    return aggregate_summary(kind, tuple(float(v) for v in y[~np.isnan(y)]), confidence)

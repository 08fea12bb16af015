"""Statistics of evaluation results: summaries, confidence intervals, sample sizes.

The intervals come from statsmodels (Wilson for proportions) and scipy (Student t otherwise); these are
imported on first use so that importing adaptive_eval stays cheap.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping

import numpy as np

from adaptive_eval.types import MetricSummary

__all__ = [
    "as_float",
    "combine",
    "from_sums",
    "metric_values",
    "summarize",
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


@functools.lru_cache(maxsize=4096)
def t_quantile(confidence: float, df: int) -> float:
    """The two-sided Student-t quantile (scipy), cached by degrees of freedom."""
    from scipy.stats import t

    return float(t.ppf(0.5 + confidence / 2.0, df))


def as_float(key: str, value) -> float:
    """A metric value as a float; ``TypeError`` naming ``key`` for anything that is not one real number.

    Ints, numpy scalars and one-element arrays or tensors are numbers; booleans, strings, None and
    containers of several values are not.  An int beyond float range is infinite, as a float is.

    >>> as_float("loss", 3), as_float("n", 10**400)
    (3.0, inf)
    """
    if isinstance(value, (bool, np.bool_, str, bytes)) or value is None:
        raise TypeError(f"metric {key!r}: expected a number, got {type(value).__name__} {value!r}")
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
        return as_float(key, value.item())
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


def t_interval(mean: float, std: float, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Student-t interval of a mean from ``n`` samples with sample standard deviation ``std``.

    >>> tuple(round(x, 4) for x in t_interval(1.0, 2.0, 16))
    (-0.0657, 2.0657)
    """
    if n < 2 or not math.isfinite(std):
        return (math.nan, math.nan)
    half = t_quantile(confidence, n - 1) * std / math.sqrt(n)
    return (mean - half, mean + half)


def from_sums(total: float, total_sq: float, n: int, binary: bool, confidence: float = 0.95) -> MetricSummary:
    """Summary from the sufficient statistics of per-sample values (exact across shards)."""
    if n <= 0:
        return MetricSummary(mean=math.nan, n=0, ci=(math.nan, math.nan), total=0.0, total_sq=0.0, binary=binary)
    mean = total / n
    if n > 1:
        var = max(total_sq - n * mean * mean, 0.0) / (n - 1)
        std = math.sqrt(var)
    else:
        std = math.nan
    if binary:
        ci = wilson_interval(total, n, confidence)
    else:
        ci = t_interval(mean, std, n, confidence)
    return MetricSummary(mean=mean, n=n, ci=ci, std=std, total=total, total_sq=total_sq, binary=binary)


def metric_values(name: str, value: object) -> tuple[np.ndarray | None, float | None]:
    """Split what an ``evaluate_fn`` returned for one metric into per-sample values or a scalar.

    Returns ``(values, None)`` for per-sample values and ``(None, scalar)`` for a scalar; anything else
    raises ``TypeError`` naming the metric.
    """
    if isinstance(value, bool):
        return None, float(value)
    if isinstance(value, (int, float, np.integer, np.floating)):
        return None, float(value)
    if isinstance(value, (list, tuple, np.ndarray)):
        try:
            arr = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"metric {name!r}: per-sample values must be numbers ({exc})") from None
        if arr.ndim == 0:
            return None, float(arr)
        if arr.ndim != 1:
            raise TypeError(f"metric {name!r}: expected a scalar or a 1-D sequence of per-sample values, got shape {arr.shape}")
        return arr, None
    # torch tensors without importing torch here.
    if type(value).__module__.startswith("torch"):
        arr = value.detach().to("cpu").double().numpy()
        if arr.ndim == 0:
            return None, float(arr)
        if arr.ndim != 1:
            raise TypeError(f"metric {name!r}: expected a scalar or a 1-D tensor of per-sample values, got shape {tuple(arr.shape)}")
        return arr, None
    raise TypeError(
        f"metric {name!r}: expected a number or per-sample values (list, numpy array or tensor), got {type(value).__name__}"
    )


def summarize(values: Iterable[float] | np.ndarray, confidence: float = 0.95, kind: str | None = None) -> MetricSummary:
    """Summary of per-sample values: Wilson interval when they are all 0/1, Student t otherwise.

    ``kind`` (``evaluation.metric_kinds``) overrides the guess: ``"proportion"`` (Wilson; values in [0, 1])
    or ``"mean"`` (Student t, even for 0/1 values).

    >>> s = summarize([1, 0, 1, 1])
    >>> s.mean, s.n, s.binary
    (0.75, 4, True)
    >>> summarize([1, 0, 1, 1], kind="mean").binary
    False
    """
    arr = np.asarray(values, dtype=np.float64)
    if kind == "proportion":
        binary = True
    elif kind == "mean":
        binary = False
    else:
        binary = bool(arr.size) and bool(np.all((arr == 0.0) | (arr == 1.0)))
    return from_sums(float(arr.sum()), float(np.dot(arr, arr)), int(arr.size), binary, confidence)


def scalar_summary(value: float, n_items: int | None, confidence: float = 0.95,
                   kind: str | None = None) -> MetricSummary:
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
    if kind == "proportion" and 0.0 <= value <= 1.0 and n_items:
        ci = wilson_interval(value * n, n, confidence)
        return MetricSummary(mean=value, n=n, ci=ci, total=value * n, binary=True, per_sample=False)
    return MetricSummary(mean=value, n=n, ci=(math.nan, math.nan), total=value * n, per_sample=False)


def summarize_outputs(
    outputs: Mapping[str, object], n_items: int | None, confidence: float = 0.95,
    kinds: Mapping[str, str] | None = None,
) -> dict[str, MetricSummary]:
    """Summaries of everything an ``evaluate_fn`` returned (a mapping of metric name to values).

    ``kinds`` maps a metric name to ``"proportion"`` or ``"mean"`` (``evaluation.metric_kinds``)."""
    summaries = {}
    kinds = kinds or {}
    for name, value in outputs.items():
        if not isinstance(name, str):
            raise TypeError(f"metric names must be strings, got {name!r}")
        values, scalar = metric_values(name, value)
        if values is not None:
            summaries[name] = summarize(values, confidence, kinds.get(name))
        else:
            summaries[name] = scalar_summary(scalar, n_items, confidence, kinds.get(name))
    return summaries


def combine(parts: Iterable[MetricSummary], confidence: float = 0.95) -> MetricSummary:
    """One summary from the summaries of disjoint shards (as if computed on all their samples at once)."""
    parts = list(parts)
    n = sum(p.n for p in parts)
    total = sum(p.total for p in parts)
    total_sq = sum(p.total_sq for p in parts)
    binary = all(p.binary for p in parts)
    return from_sums(total, total_sq, n, binary, confidence)


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
    return max(1, math.ceil((z * std / half_width) ** 2))

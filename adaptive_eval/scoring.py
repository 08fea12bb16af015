"""Scoring an evaluation schedule against known events and ground truth (benchmarks and tests share these).

An *evaluation* here is a mapping with ``step``, ``sample_size`` (None: the whole eval set),
``metrics`` {name: measured mean} and ``ci`` {name: [low, high]}, as in ``evals.jsonl``.

Two ways to score detection: :func:`detection_delay` counts the first evaluation of some size after an
event, whether or not it could see the change; :func:`confirmed_delay` counts only an evaluation whose
interval, or whose paired difference on the items it shares with the previous evaluation, shows the change
(the honest one: an evaluation too small to see it does not count).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Mapping, Sequence

from adaptive_eval.types import reason_cause

__all__ = ["PAIRED_MIN_ITEMS", "Pick", "RunScore", "best_eval", "event_direction", "needless_evals", "pick_best", "score_run", "shrunk_estimates", "caught_within", "confirmed_delay", "confirmed_delays", "detection_delay", "detection_delays",
           "eval_samples", "selection_regret"]


def _size(e: Mapping, full_size: int | None) -> float:
    n = e.get("sample_size")
    if n is None:
        return math.inf if full_size is None else full_size
    return n if full_size is None else min(n, full_size)


def detection_delay(evals: Sequence[Mapping], event_step: int, *, min_samples: int = 32,
                    full_size: int | None = None) -> int | None:
    """Steps from ``event_step`` to the first evaluation of at least ``min_samples`` at or after it.

    None when no such evaluation follows (the event was never caught).

    >>> evals = [{"step": 10, "sample_size": 16}, {"step": 12, "sample_size": 64}, {"step": 40, "sample_size": None}]
    >>> detection_delay(evals, 9), detection_delay(evals, 13), detection_delay(evals, 41)
    (3, 27, None)
    """
    for e in evals:
        if e["step"] >= event_step and _size(e, full_size) >= min_samples:
            return int(e["step"] - event_step)
    return None


def detection_delays(evals: Sequence[Mapping], event_steps: Sequence[int], **kw) -> list[int | None]:
    """:func:`detection_delay` for each event."""
    return [detection_delay(evals, s, **kw) for s in event_steps]


def _finite(x) -> bool:
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def _interval(ci) -> tuple[float, float] | None:
    """``[low, high]`` as floats when it is a pair of finite numbers, else None (a NaN or a number there raised
    TypeError; a fuzzing probe)."""
    try:
        low, high = ci  # (a list, a tuple, a numpy array)
    except (TypeError, ValueError):
        return None
    if not (_finite(low) and _finite(high)):
        return None
    return float(low), float(high)


def _eval_interval(e: Mapping, metric: str) -> tuple[float, float] | None:
    """An evaluation's finite interval for ``metric`` (None without one)."""
    return _interval((e.get("ci") or {}).get(metric))


def _rows(evals) -> list:
    """``evals`` as mappings: the evaluator's own ``history`` (:class:`~adaptive_eval.types.EvalResult`
    objects) is taken as its ``to_dict()`` rows, as ``evals.jsonl`` holds them (it raised AttributeError).  A row
    whose ``metrics`` is None measured nothing (it raised TypeError; a fuzzing probe)."""
    rows = [e if isinstance(e, Mapping) or not hasattr(e, "to_dict") else e.to_dict() for e in evals]
    return [{**e, "metrics": {}} if isinstance(e, Mapping) and e.get("metrics", {}) is None else e for e in rows]


def _warn_unknown(rows: Sequence[Mapping], metric: str, what: str) -> None:
    """Warn when evaluations measured metrics but never ``metric``: a misnamed metric (``"acc"`` for a suite's
    ``"math/acc"``) read as "never confirmed" / "no pick", silently (found by a new-user probe)."""
    if not rows or any(metric in e.get("metrics", {}) for e in rows):
        return
    names = sorted({k for e in rows for k in e.get("metrics", {})})
    if names:
        warnings.warn(f"{what}: no evaluation measured {metric!r} (they measured {', '.join(names[:8])}"
                      f"{' ...' if len(names) > 8 else ''}), so it returns None; a suite's metric is "
                      "'<suite>/<metric>'", RuntimeWarning, stacklevel=3)


def _measured(evals: Sequence[Mapping], metric: str) -> list:
    """The evaluations with a finite mean for ``metric``, less those without a finite interval when others have
    one: an evaluation whose interval is missing (a t interval of one item, NaN) has an unknown precision, and
    taken as exact it won every pick with a zero-width interval (found in review).  When none has an interval
    (a bare scalar metric), all of them, each taken as exact."""
    rows = [e for e in evals if metric in e.get("metrics", {}) and _finite(e["metrics"][metric])]
    with_ci = [e for e in rows if _eval_interval(e, metric) is not None]
    return with_ci if with_ci else rows


PAIRED_MIN_ITEMS = 10  # a paired difference on fewer shared items confirms nothing (its t interval is no test)


def _paired_interval(e: Mapping, metric: str) -> tuple[float, float] | None:
    """The finite 95% interval of an evaluation's paired difference for ``metric`` (``paired`` in
    ``evals.jsonl``: this evaluation minus the previous one that measured it, on the items both share); None
    on fewer than :data:`PAIRED_MIN_ITEMS` shared items or a zero-width interval (every shared item moved
    alike: a t interval of no spread says nothing)."""
    d = (e.get("paired") or {}).get(metric)
    ci = _interval(d.get("ci")) if isinstance(d, Mapping) else None
    n = d.get("n") if ci is not None else None
    if ci is None or not isinstance(n, (int, float)) or isinstance(n, bool) or n < PAIRED_MIN_ITEMS or ci[1] <= ci[0]:
        return None
    return ci


def confirmed_delay(evals: Sequence[Mapping], event_step: int, metric: str, *, pre_level: float | None = None,
                    direction: str | None = None, paired: bool = True) -> int | None:
    """Steps from ``event_step`` to the first evaluation at or after it that *shows* the change at its own
    confidence: its interval for ``metric`` excludes ``pre_level``, or (``paired``, the default) its paired
    difference on the items it shares with the previous evaluation of ``metric`` excludes 0.

    ``pre_level`` defaults to the last evaluation of ``metric`` before the event (None when nothing was measured
    before it: then the interval rule confirms nothing), and that evaluation's own error counts: the difference of
    the two means must exclude 0, its interval the two intervals' margins added in quadrature (MOVER, Newcombe's
    square-and-add).  Taking its mean for the true level made a no-change run of 48 then 576 items "confirm" a fall
    in 0.32 of its evaluations against the 0.025 asked (a new user's probe); a level given is taken as known.  The
    two evaluations are taken as independent: where they share items (a fixed seed's nested sample, the whole set)
    their errors are positively correlated and this test is conservative; the paired test below uses the sharing.
    ``direction`` "down" needs the interval
    wholly below ``pre_level`` (or the paired difference wholly below 0), "up" wholly above, None either.  The
    paired test counts only against a previous evaluation (before the event, or after it: a significant
    move the same way since then shows the change under way), on at least :data:`PAIRED_MIN_ITEMS` shared
    items and an interval of some width; with ``direction`` None it counts on the side the evaluation lies
    from ``pre_level``.  It is there only for suites and items x samples metrics, whose items are known, and it
    is the stronger test when items differ in difficulty (the between-item spread cancels).  Two tests per
    evaluation, and the paired one again at each evaluation after the event: under no change a false confirmation
    is more likely than by the interval alone (simulated against the true level, five evaluations after a placebo
    event: 0.055-0.085 of evaluations against 0.021-0.044, 0.13-0.26 of runs against 0.02-0.13; a probe's).  An
    evaluation without a finite interval confirms nothing, nor does a kept checkpoint evaluated later
    (``evaluated_at``, ``policy.lookback``: its result came after the evaluation that prompted it), nor a
    replayed one that measured a model from before the event (``truth_step``: with ground truth logged every k
    steps, an evaluation between two records of it measures the earlier one).  An asynchronous evaluation's delay
    counts to the step its result came back (``integrated_step``).  None when no evaluation confirms the change.

    >>> evals = [{"step": 5, "metrics": {"acc": 0.80}, "ci": {"acc": [0.70, 0.90]}},
    ...          {"step": 12, "metrics": {"acc": 0.70}, "ci": {"acc": [0.50, 0.90]}},   # too wide: no
    ...          {"step": 20, "metrics": {"acc": 0.60}, "ci": {"acc": [0.55, 0.65]}}]
    >>> confirmed_delay(evals, 10, "acc"), confirmed_delay(evals, 10, "acc", direction="up")
    (10, None)
    >>> confirmed_delay(evals, 10, "acc", pre_level=0.68), confirmed_delay(evals, 2, "acc")
    (10, None)
    >>> evals[1]["paired"] = {"acc": {"diff": -0.1, "ci": [-0.16, -0.04], "n": 64}}   # the same items: lower
    >>> confirmed_delay(evals, 10, "acc"), confirmed_delay(evals, 10, "acc", paired=False)
    (2, 10)
    """
    if direction not in (None, "up", "down"):
        raise ValueError(f"direction must be 'up', 'down' or None, got {direction!r}")
    rows = _rows(evals)
    _warn_unknown(rows, metric, "confirmed_delay")
    ordered = sorted((e for e in rows if metric in e.get("metrics", {})), key=lambda e: e["step"])
    margins = (0.0, 0.0)  # the level's own error below and above it (a measured level's interval)
    if pre_level is None:
        before = [e for e in ordered if e["step"] < event_step and _finite(e["metrics"][metric])]
        if before:
            pre_level = float(before[-1]["metrics"][metric])
            ref = _eval_interval(before[-1], metric)
            if ref is not None:
                margins = (max(pre_level - ref[0], 0.0), max(ref[1] - pre_level, 0.0))
    level = float(pre_level) if pre_level is not None and _finite(pre_level) else None
    if level is None and not paired:
        return None
    for i, e in enumerate(ordered):
        if e["step"] < event_step or _before(e, event_step, metric) or e.get("evaluated_at") is not None:
            continue
        ci = _eval_interval(e, metric) if level is not None else None
        if ci is not None:
            low, high, mean = ci[0], ci[1], e["metrics"][metric]
            mean = float(mean) if _finite(mean) else 0.5 * (low + high)  # (an interval alone: its midpoint)
            # (the difference's interval, MOVER: each side's margin with the level's opposite one; for a level
            # known exactly, the evaluation's own interval)
            if margins == (0.0, 0.0):
                below, above = high - level, low - level
            else:
                below = mean - level + math.hypot(max(high - mean, 0.0), margins[0])
                above = mean - level - math.hypot(max(mean - low, 0.0), margins[1])
            if (direction != "up" and below < 0.0) or (direction != "down" and above > 0.0):
                return int(_came_back(e) - event_step)
        pair = _paired_interval(e, metric) if paired and i > 0 else None
        if pair is not None:
            side = direction
            if side is None and level is not None and _finite(e["metrics"][metric]):
                # Either way: the side this evaluation lies on from the level before (a move back does not count).
                side = "down" if float(e["metrics"][metric]) < level else "up"
            if (side != "up" and pair[1] < 0.0) or (side != "down" and pair[0] > 0.0):
                return int(_came_back(e) - event_step)
    return None


def _came_back(e: Mapping) -> int:
    """The step an evaluation's result was known at: an asynchronous one's integration step, else its own (the
    delay of an asynchronous run's confirmation counted to its weights' step: 2 steps at any latency; a probe)."""
    back = e.get("integrated_step")
    return int(back) if back is not None else int(e["step"])


def truth_step(e: Mapping, metric: str) -> int | None:
    """The step whose ground truth a replayed evaluation drew ``metric`` from (``truth_step`` in
    ``evals.jsonl``, written per metric only where it is not the evaluation's own step; None: no ground truth
    yet).  The evaluation's own step when it says nothing."""
    marks = e.get("truth_step") or {}
    return marks[metric] if metric in marks else int(e["step"])


def _before(e: Mapping, event_step: int, metric: str) -> bool:
    """A replayed evaluation that measured ``metric`` on the model of a step before ``event_step`` (ground
    truth logged every k steps: an evaluation between two of them measures the earlier one).  It cannot show
    the change, whatever its interval says."""
    t = truth_step(e, metric)
    return t is None or t < event_step


def confirmed_delays(evals: Sequence[Mapping], events: Sequence, metric: str, **kw) -> list[int | None]:
    """:func:`confirmed_delay` for each event (an int step, or an object with a ``step`` attribute)."""
    return [confirmed_delay(evals, getattr(ev, "step", ev), metric, **kw) for ev in events]


def caught_within(delays: Sequence[int | None], steps: int) -> float:
    """Share of events caught within ``steps`` steps (an event never caught is missed).

    >>> caught_within([0, 10, 30, None], 25)
    0.5
    """
    if not delays:
        return math.nan
    return sum(d is not None and d <= steps for d in delays) / len(delays)


def eval_samples(evals: Sequence[Mapping], full_size: int) -> int:
    """Items evaluated in total (a whole-set evaluation counts ``full_size``)."""
    return int(sum(_size(e, full_size) for e in evals))


_Z95 = 1.959963984540054


def _observation(e: Mapping, metric: str) -> tuple[float, float]:
    """(value, sampling variance) of an evaluation: its interval's midpoint and (half-width / z)^2, or its
    mean and 0 without an interval.  The first pass of the smoother (see :func:`_proportion_sizes` for what
    replaces it for proportions, whose midpoint is pulled towards 0.5)."""
    ci = _eval_interval(e, metric)
    if ci is None:
        return float(e["metrics"][metric]), 0.0
    low, high = ci
    return 0.5 * (low + high), (max(high - low, 0.0) / (2.0 * _Z95)) ** 2


def _proportion_sizes(rows: Sequence[Mapping], metric: str) -> list[float] | None:
    """For a proportion (every evaluation's mean and interval within [0, 1], and some interval lopsided about
    its mean, as a Wilson or Clopper-Pearson interval is and a t interval never is): each evaluation's
    ``t = z^2 / n_eff``, the effective size at which a Wilson interval at its mean has its interval's width
    (exact for a Wilson interval: half-width^2 = (p(1-p) t + t^2/4) / (1+t)^2, solved for t; approximate for
    the Clopper-Pearson intervals of items x samples proportions, which only weigh the evaluations here).
    None otherwise.

    Why: the midpoint of such an interval is pulled towards 0.5 (a 32-item Wilson interval of 0.1 is centred
    near 0.14), and pooling many evaluations keeps that bias: a run flat at 0.03, evaluated on 32 items 40
    times, was estimated at 0.07 and its picked checkpoint's interval never held 0.03.  The mean is unbiased,
    but its own interval's variance is not a fair weight (a lucky high score near 1 has a narrower interval
    and would weigh more), so each evaluation is weighed by the variance its effective size gives at the
    smoothed estimate instead (:meth:`_Fit.of`)."""
    out, lopsided = [], False
    for e in rows:
        ci = _eval_interval(e, metric)
        m = float(e["metrics"][metric])
        if ci is None or not (0.0 <= ci[0] <= m <= ci[1] <= 1.0):
            return None
        h = 0.5 * (ci[1] - ci[0])
        lopsided = lopsided or abs((ci[0] + ci[1]) - 2.0 * m) > 1e-9 * max(h, 1e-300)
        if not 0.0 < h < 0.5:
            return None
        # (h^2 - 1/4) t^2 + (2 h^2 - p(1-p)) t + h^2 = 0: the one positive root (the product of the roots is < 0)
        a, b, c = h * h - 0.25, 2.0 * h * h - m * (1.0 - m), h * h
        out.append((-b - math.sqrt(b * b - 4.0 * a * c)) / (2.0 * a))
    return out if lopsided else None


def _wilson_variance(p: float, t: float) -> float:
    """(Wilson half-width / z)^2 at a proportion ``p`` and ``t = z^2 / n``."""
    p = min(max(p, 0.0), 1.0)
    return (p * (1.0 - p) * t + 0.25 * t * t) / ((1.0 + t) ** 2 * _Z95 * _Z95)


_BREAK_Z = 4.0  # an evaluation this many sd from its prediction starts a new segment (a collapse, a NaN run)


def _kalman(y, r, steps, q, forced=None):
    """Random walk (variance ``q`` per step) observed with noise ``r``, restarted (a flat prior) at every
    evaluation more than ``_BREAK_Z`` sd from its prediction and at every ``forced[i]``: filtered and
    predicted moments, the segment starts, and the log-likelihood of the observations that were not breaks."""
    n = len(y)
    m_f, p_f, m_p, p_p = [0.0] * n, [0.0] * n, [0.0] * n, [0.0] * n
    starts = [False] * n
    loglik = 0.0
    for i in range(n):
        if forced is not None and forced[i]:
            starts[i] = True
        elif i > 0:
            m_p[i], p_p[i] = m_f[i - 1], p_f[i - 1] + q * max(steps[i] - steps[i - 1], 1.0)
            s = p_p[i] + r[i]
            v = y[i] - m_p[i]
            if s > 0 and v * v <= _BREAK_Z * _BREAK_Z * s:
                loglik -= 0.5 * (math.log(s) + v * v / s)
            else:
                starts[i] = True
                loglik -= 0.5 * (math.log(s) + _BREAK_Z * _BREAK_Z) if s > 0 else 0.0
        else:
            starts[i] = True
        if starts[i]:
            m_p[i], p_p[i] = y[i], math.inf
            m_f[i], p_f[i] = y[i], r[i]
        elif r[i] == 0.0:
            m_f[i], p_f[i] = y[i], 0.0
        else:
            gain = p_p[i] / (p_p[i] + r[i])
            m_f[i], p_f[i] = m_p[i] + gain * (y[i] - m_p[i]), (1.0 - gain) * p_p[i]
    return m_f, p_f, m_p, p_p, starts, loglik


def shrunk_estimates(evals: Sequence[Mapping], metric: str) -> list[tuple[Mapping, float, float]]:
    """Each measured evaluation with its shrunk estimate and that estimate's standard error, in step order.
    (Evaluations without a finite interval are left out when others have one: see :func:`pick_best`.)

    The true value is modelled as a random walk over steps and each evaluation as that value plus its own
    sampling noise (the variance its interval implies); the Kalman filter and Rauch-Tung-Striebel smoother
    give every evaluation's posterior mean and sd given *all* evaluations (empirical Bayes: the walk's
    variance is the one that makes the evaluations most likely, on a grid).  An evaluation more than 4 sd
    from what the others predict starts a new segment (a collapse is not smoothed over), and so does an
    evaluation an alarm brought forward (``reason`` ``alarm:...``): a detector saw the model change since the
    previous one, so the evaluations after it say nothing about the checkpoints before it (on the tuning half of
    the synthetic suite this halves the regret on collapses: a partly collapsed evaluation two steps into the
    fall no longer drags the last good checkpoint's estimate down).  A small, noisy evaluation is pulled towards
    its neighbours; a large one hardly moves.  Non-finite means are left out.

    >>> evals = [{"step": s, "metrics": {"acc": m}, "ci": {"acc": ci}} for s, m, ci in
    ...          [(0, .50, [.40, .60]), (10, .52, [.42, .62]), (20, .80, [.55, .95]), (30, .53, [.50, .56])]]
    >>> [round(est, 2) for _, est, _ in shrunk_estimates(evals, "acc")]
    [0.53, 0.53, 0.53, 0.53]
    """
    fit = _fit(evals, metric, "shrunk_estimates: each evaluation's own value instead")
    if fit is _TOO_LARGE:  # each evaluation as it is: its interval's midpoint, and its half-width / z
        rows = sorted(_measured(_rows(evals), metric), key=lambda e: e["step"])
        out = []
        for e in rows:
            ci = _eval_interval(e, metric)
            mid = float(e["metrics"][metric]) if ci is None else 0.5 * ci[0] + 0.5 * ci[1]
            out.append((e, mid, 0.0 if ci is None else max(ci[1] - ci[0], 0.0) / (2.0 * _Z95)))
        return out
    if fit is None:
        return []
    m_s, p_s, _, _ = fit.smooth(fit.grid[fit.best])
    return [(e, m, math.sqrt(max(v, 0.0))) for e, m, v in zip(fit.rows, m_s, p_s)]


_TOO_LARGE = object()


def _fit(evals, metric: str, instead: str):
    """``_Fit.of(evals, metric)``, or ``_TOO_LARGE`` (warned, with what is done ``instead``) where its values are
    too large to smooth: squared, they overflow (items of 1e200 raised OverflowError from ``best()``, after
    training; a huge metric is data; a probe)."""
    try:
        return _Fit.of(evals, metric)
    except (OverflowError, ZeroDivisionError):
        warnings.warn(f"the values of {metric!r} are too large to smooth (their squares overflow): {instead}",
                      RuntimeWarning, stacklevel=3)
        return _TOO_LARGE


@dataclasses.dataclass
class _Fit:
    """The evaluations of one metric in step order, their observations, and the random walk's log-likelihood at
    every walk variance of the grid (``best``: the index of the most likely one)."""

    rows: list
    y: list
    r: list
    steps: list
    forced: list
    grid: list
    loglik: list
    best: int

    @classmethod
    def of(cls, evals: Sequence[Mapping], metric: str) -> _Fit | None:
        rows = sorted(_measured(_rows(evals), metric), key=lambda e: e["step"])
        if not rows:
            return None
        obs = [_observation(e, metric) for e in rows]
        y, r = [o[0] for o in obs], [o[1] for o in obs]
        steps = [float(e["step"]) for e in rows]
        forced = [i > 0 and reason_cause(str(e.get("reason", ""))).startswith("alarm:") for i, e in enumerate(rows)]
        fit = cls._fit(rows, y, r, steps, forced)
        sizes = _proportion_sizes(rows, metric)
        if sizes is not None:
            # A proportion: its measured means, each weighed by the variance its effective size gives at the
            # estimate of the pass before (see _proportion_sizes); two passes settle it to ~1e-4.
            y = [float(e["metrics"][metric]) for e in rows]
            for _ in range(2):
                m_s = fit.smooth(fit.grid[fit.best])[0]
                r = [_wilson_variance(m, t) for m, t in zip(m_s, sizes)]
                fit = cls._fit(rows, y, r, steps, forced)
        return fit

    @classmethod
    def _fit(cls, rows, y, r, steps, forced) -> _Fit:
        span = max(steps[-1] - steps[0], 1.0)
        spread = max((max(y) - min(y)) ** 2, max(r), 1e-12)
        # Walk variances from "the value hardly moves over the run" to "it moves by the whole spread each step".
        grid = [spread / span * 10.0 ** (-k / 4.0) for k in range(0, 33)] + [spread]
        loglik = [_kalman(y, r, steps, q, forced)[5] for q in grid]
        best = max(range(len(grid)), key=loglik.__getitem__)  # (the first of equals, as max over the grid was)
        return cls(rows, y, r, steps, forced, grid, loglik, best)

    def smooth(self, q: float) -> tuple[list, list, list, list]:
        """Rauch-Tung-Striebel smoothing within each segment at walk variance ``q``: posterior means and
        variances, and each evaluation's smoother gain ``c[i]`` and conditional variance ``v[i]``: given all
        evaluations and the true value at the next evaluation of its segment, the true value at ``i`` is
        Normal(m[i] + c[i] (value[i+1] - m[i+1]), v[i]) (``c[i]`` 0 and ``v[i]`` the posterior variance at a
        segment's last evaluation).  Together they give the joint posterior: Cov(i, i+1) = c[i] P[i+1]."""
        m_f, p_f, m_p, p_p, starts, _ = _kalman(self.y, self.r, self.steps, q, self.forced)
        n = len(self.y)
        m_s, p_s = m_f[:], p_f[:]
        gain, cond = [0.0] * n, [0.0] * n
        cond[-1] = max(p_f[-1], 0.0)
        for i in range(n - 2, -1, -1):
            if starts[i + 1]:
                cond[i] = max(p_f[i], 0.0)
                continue
            c = p_f[i] / p_p[i + 1] if p_p[i + 1] > 0 else 0.0
            m_s[i] = m_f[i] + c * (m_s[i + 1] - m_p[i + 1])
            p_s[i] = p_f[i] + c * c * (p_s[i + 1] - p_p[i + 1])
            gain[i], cond[i] = c, max(p_f[i] * (1.0 - c), 0.0)  # = p_s[i] - c^2 p_s[i+1]
        return m_s, p_s, gain, cond


# The shrunk pick's interval (see pick_best).  The walk variance it is computed at: the largest on the grid whose
# log-likelihood is within this of the best's (the upper end of the walk variance's one-standard-error likelihood
# interval).  And the simultaneous critical value's Monte Carlo: draws and a fixed seed of its own (the same
# evaluations always give the same interval; no global random state is read or moved).
_Q_LOGLIK_DROP = 0.5
_SIM_DRAWS = 2000
_SIM_SEED = 20240611


def _max_abs_quantile(p_s: Sequence[float], gain: Sequence[float], cond: Sequence[float],
                      level: float = 0.95) -> float:
    """The ``level`` quantile of max_i |value_i - m_i| / sd_i over every evaluation with sd_i > 0, under the
    smoother's joint Gaussian posterior (:meth:`_Fit.smooth`): seeded Monte Carlo, drawing the chain backwards
    (value_n, then each value_i given value_{i+1}), so memory and time are O(evaluations x draws) without a
    covariance matrix.  Independent segments are independent here too.  0 when every evaluation is exact."""
    import numpy as np

    rng = np.random.Generator(np.random.PCG64(_SIM_SEED))
    dev, top, scaled = np.zeros(_SIM_DRAWS), np.zeros(_SIM_DRAWS), np.empty(_SIM_DRAWS)
    block = np.empty((0, _SIM_DRAWS))
    for k, i in enumerate(range(len(p_s) - 1, -1, -1)):
        if k % 256 == 0:  # the normals in blocks: fewer calls, bounded memory
            block = rng.standard_normal((min(256, i + 1), _SIM_DRAWS))
        dev *= gain[i]
        dev += math.sqrt(cond[i]) * block[k % 256]
        if p_s[i] > 0:
            np.abs(dev, out=scaled)
            scaled *= 1.0 / math.sqrt(p_s[i])
            np.maximum(top, scaled, out=top)
    return float(np.quantile(top, level))


def _shrunk_interval(fit: _Fit, i: int, est: float, *, drop: float | None = None,
                     simultaneous: bool = True) -> tuple[float, float]:
    """The 95% interval of the shrunk pick ``i`` (estimate ``est``): see :func:`pick_best`.  ``drop`` and
    ``simultaneous`` are there for benchmarks/pick_coverage.py, which measures the alternatives."""
    drop = _Q_LOGLIK_DROP if drop is None else drop
    top = fit.loglik[fit.best]
    q = max(q for q, ll in zip(fit.grid, fit.loglik) if ll >= top - drop)
    m_s, p_s, gain, cond = fit.smooth(q)
    z = _max_abs_quantile(p_s, gain, cond) if simultaneous else _Z95
    half = z * math.sqrt(max(p_s[i], 0.0))
    return min(est, m_s[i] - half), max(est, m_s[i] + half)


@dataclasses.dataclass(frozen=True)
class Pick:
    """The checkpoint picked: its evaluation's ``step``, the ``estimate`` it was picked by, a 95% ``interval``
    for the picked checkpoint's true value that allows for its having been picked as the best of many (see
    :func:`pick_best`; it always holds ``estimate``), the rule (``by``), the ``metric``, the evaluation, and the
    direction it was picked in."""

    step: int
    estimate: float
    interval: tuple[float, float]
    by: str
    metric: str
    eval: Mapping
    higher_is_better: bool = True

    def to_dict(self) -> dict:
        """Plain values for ``summary.json``."""
        return {"metric": self.metric, "higher_is_better": bool(self.higher_is_better), "step": int(self.step),
                "estimate": float(self.estimate),
                "interval": [float(self.interval[0]), float(self.interval[1])], "by": self.by,
                "measured": float(self.eval["metrics"][self.metric]),
                # (the picked metric's items: with suites, its suite's, not every suite's)
                "sample_size": (self.eval.get("n") or {}).get(self.metric, self.eval.get("sample_size")),
                **({"truth_step": truth_step(self.eval, self.metric)}
                   if self.metric in (self.eval.get("truth_step") or {}) else {})}


PICK_RULES = ("shrunk", "bound", "mean")


def _direction(metric: str, higher_is_better: bool | None) -> bool:
    """``higher_is_better`` as given, else read off the name as HF's ``greater_is_better`` is: a name that reads
    lower-is-better (``eval_loss``, ``wer``, ``perplexity``) is lower-is-better (the README's ``pick_best(history,
    "eval_loss")`` picked the collapsed model's highest loss; a new user's probe)."""
    if higher_is_better is not None:
        return bool(higher_is_better)
    from adaptive_eval.policies._base import looks_lower_is_better

    return looks_lower_is_better(metric) is None


def pick_best(evals: Sequence[Mapping], metric: str, *, higher_is_better: bool | None = None,
              by: str = "shrunk", steps=None) -> Pick | None:
    """The evaluation to pick a checkpoint by, with the estimate that picked it.

    ``higher_is_better``: None (default) reads it off the name, as Hugging Face's ``greater_is_better`` does:
    a metric named like a loss (``eval_loss``, ``val/ppl``, ``wer``, ``error``) is lower-is-better, any other
    higher-is-better (``Pick.higher_is_better`` says which it took).  ``steps``: pick only among evaluations of
    these steps (the checkpoints you kept); every evaluation still informs the shrunk estimates.

    ``by="shrunk"`` (default): the best shrunk estimate (:func:`shrunk_estimates`): many small noisy
    evaluations each get pulled towards their neighbours, so the luckiest of them does not win (the
    winner's curse), while a precise evaluation keeps its own value.  ``by="bound"``: the best pessimistic
    bound of the evaluation's own interval (the lower bound when higher is better).  ``by="mean"``: the
    best measured mean (what a plain fixed schedule does; prone to the winner's curse).  None when no
    evaluation measured ``metric``.  An evaluation without a finite interval for ``metric`` (NaN: a t interval
    of one item) is left out when others have one, its precision unknown; when none has one, each is taken as
    exact.  ``evals``: mappings as in ``evals.jsonl``, or the evaluator's ``history`` (``EvalResult`` objects).

    ``Pick.interval`` is a 95% interval for the picked checkpoint's true value *after* the selection: the
    pick is the best of many estimates, so an interval that would hold for one evaluation chosen in advance
    misses the truth of the one that looked best far more often (benchmarks/pick_coverage.py, simulated:
    estimate +- 1.96 posterior sd covered it in 76% of runs of 32 items every 25 steps, 86% over four
    schedules).  For ``by="shrunk"`` it is simultaneous over every evaluation, from the smoother's joint
    Gaussian posterior (the lag-one cross-covariances c[i] P[i+1]): the 95% quantile of
    max_i |value_i - m_i| / sd_i (seeded Monte Carlo, 2,000 draws, its own fixed seed: deterministic), times
    the pick's sd, at the largest walk variance within 0.5 log-likelihood of the most likely one (the
    empirical-Bayes variance can be too small to follow a rise or a flat run's wander, and then every
    estimate is pulled the same way), and widened to hold the estimate.  98% / 96% / 98% / 100% coverage on
    those four schedules, about 1.7x the old width.  For ``by="mean"`` and ``by="bound"`` it is the
    evaluation's own interval widened from its measured mean to the Sidak level over the n evaluations
    (their own intervals covered 53-86%).  The estimate and the pick are the same either way.

    >>> evals = [{"step": s, "sample_size": n, "metrics": {"acc": m}, "ci": {"acc": ci}} for s, n, m, ci in
    ...          [(10, 32, .90, [.75, .97]), (20, 32, 1.0, [.89, 1.0]), (21, 512, .93, [.91, .95]),
    ...           (30, 32, .91, [.76, .97])]]
    >>> m = pick_best(evals, "acc", by="mean"); m.step, m.estimate
    (20, 1.0)
    >>> p = pick_best(evals, "acc"); p.step, round(p.estimate, 3), [round(x, 3) for x in p.interval]
    (21, 0.931, [0.907, 0.956])

    (The lucky 32-item 1.0 at step 20 is estimated at 0.931, what the precise evaluation a step later says;
    the two estimates tie, and the tie goes to the precise one.)
    """
    if by not in PICK_RULES:
        raise ValueError(f"by must be one of {', '.join(PICK_RULES)}, got {by!r}")
    evals = _rows(evals)
    _warn_unknown(evals, metric, "pick_best")
    higher_is_better = _direction(metric, higher_is_better)
    sign = 1.0 if higher_is_better else -1.0
    among = None if steps is None else _steps_among(steps)
    fit = _fit(evals, metric, "picked by the bound of each evaluation's own interval (by='bound')") if (
        by == "shrunk") else None
    if fit is _TOO_LARGE:
        by = "bound"
    if by == "shrunk":
        if fit is None:
            return None
        m_s, p_s, _, _ = fit.smooth(fit.grid[fit.best])
        candidates = [j for j in range(len(m_s)) if among is None or _kept(fit.rows[j], among)]
        if not candidates:
            return _none_among(among, fit.rows)
        # The best posterior mean (the Bayes pick under a random-walk prior); an exact tie goes to the more
        # precise estimate.  No wider tie band: the smoothed estimates of a plateau differ by small amounts that
        # still carry the trend, and resolving a band of them by precision prefers Wilson intervals away from 0.5
        # and the middle of a run (on the tuning half that raised every fixed schedule's regret by a third).
        # ("Exact" up to rounding: estimates pooled to one value differ in the 9th digit, 1e-6 sd here.)
        top = max(sign * m_s[j] for j in candidates)
        tol = 1e-6 * math.sqrt(max(min(p_s), 0.0)) + 1e-12 * abs(top)
        i = min((j for j in candidates if sign * m_s[j] >= top - tol), key=lambda j: (p_s[j], -sign * m_s[j]))
        est = m_s[i]
        return Pick(int(fit.rows[i]["step"]), est, _clipped(_shrunk_interval(fit, i, est), fit.rows, metric), by,
                    metric, fit.rows[i], higher_is_better)
    measured = _measured(_rows(evals), metric)
    if among is not None and measured:
        kept = [e for e in measured if _kept(e, among)]
        if not kept:
            return _none_among(among, measured)
        measured = kept
    if not measured:
        return None

    def interval(e):
        ci = _eval_interval(e, metric)
        if ci is not None:
            return ci
        m = float(e["metrics"][metric])
        return m, m

    def key(e):
        if by == "bound":
            low, high = interval(e)
            return low if higher_is_better else -high
        return sign * e["metrics"][metric]

    e = max(measured, key=key)
    low, high = interval(e)
    est = (low if higher_is_better else high) if by == "bound" else float(e["metrics"][metric])
    # The best of n evaluations: its own 95% interval would be a post-selection interval (the luckiest draw is
    # picked, so the truth lies below it far more often than 2.5%).  Each side is widened, from the measured
    # mean, to the Sidak level over the n evaluations (independent draws; shared items correlate them
    # positively, which only makes this more conservative).
    mean = float(e["metrics"][metric])
    widen = _sidak_z(len(measured)) / _Z95
    low, high = min(low, mean - widen * max(mean - low, 0.0)), max(high, mean + widen * max(high - mean, 0.0))
    return Pick(int(e["step"]), est, _clipped((low, high), measured, metric), by, metric, e, higher_is_better)


def _steps_among(steps) -> set[int]:
    """``steps=`` as a set of step numbers; a checkpoint's name (``"checkpoint-10"``) is a ``TypeError`` saying what
    a step is (a new user's probe: a bare "invalid literal for int()")."""
    import numbers

    if isinstance(steps, (str, bytes)) or not hasattr(steps, "__iter__"):
        raise TypeError(f"steps= takes the step numbers to pick among (a list), got {steps!r}")
    bad = [s for s in steps if isinstance(s, bool) or not isinstance(s, numbers.Integral)]
    if bad:
        raise TypeError(f"steps= takes the step numbers to pick among, got {bad[0]!r}: the steps your loop passed to "
                        "evaluate() (with the Hugging Face and Lightning adapters, 0-based: HF's checkpoint-N folder "
                        "holds step N - 1)")
    return {int(s) for s in steps}


def _kept(row: Mapping, among: set[int]) -> bool:
    """An evaluation of one of the checkpoints kept (``steps=``): its step among them, and not the initial weights'
    (``trigger.eval_before_train``, reason ``before_train``): those are recorded at the first step, which names the
    weights after it, and no checkpoint holds them (HF's checkpoint-1 was picked, at 125.2 loss, for the initial
    weights' 2.45; a probe)."""
    return int(row["step"]) in among and row.get("reason") != "before_train"


def _none_among(among: set[int], rows: Sequence[Mapping]) -> None:
    """None, said: no evaluation measured the metric at any of the steps given (a silent None read as "no best";
    the usual cause, checkpoints named 1-based against 0-based steps, or saved between evaluations).  The initial
    weights' evaluation is not among the steps' (see :func:`_kept`), and said so: "none of the steps given was
    evaluated (the evaluations are at steps 0, ...)" read as a contradiction (a review)."""
    evaluated = {int(r["step"]) for r in rows if r.get("reason") != "before_train"}
    initial = sorted({int(r["step"]) for r in rows if r.get("reason") == "before_train"} & among)
    shown = ", ".join(str(s) for s in sorted(evaluated)[:12]) + (" ..." if len(evaluated) > 12 else "")
    warnings.warn(f"pick_best: none of the {len(among)} steps given was evaluated (the evaluations are at steps "
                  f"{shown or 'none'}"
                  + (f"; the one at step {initial[0]} is the initial weights' (before_train), which no checkpoint "
                     "holds" if initial else "")
                  + "), so it returns None; an evaluation's step is the step passed to evaluate() (with the "
                  "Hugging Face and Lightning adapters, 0-based: HF's checkpoint-N folder holds step N - 1), and a "
                  "checkpoint saved between two evaluations was not evaluated", RuntimeWarning, stacklevel=3)
    return None


def _clipped(interval: tuple[float, float], evals: Sequence[Mapping], metric: str) -> tuple[float, float]:
    """A widened interval clipped to [0, 1] when every evaluation's mean and interval lie there (a proportion,
    such as accuracy: an end at 1.02 says nothing more than 1.0).

    >>> _clipped((0.9, 1.03), [{"metrics": {"acc": 0.95}, "ci": {"acc": [0.9, 0.99]}}], "acc")
    (0.9, 1.0)
    >>> _clipped((0.9, 1.03), [{"metrics": {"r": 0.95}, "ci": {"r": [0.9, 1.01]}}], "r")
    (0.9, 1.03)
    """
    for e in evals:
        values = [float(e["metrics"][metric]), *(_eval_interval(e, metric) or ())]
        if not all(0.0 <= v <= 1.0 for v in values):
            return interval
    return max(interval[0], 0.0), min(interval[1], 1.0)


def _sidak_z(n: int, level: float = 0.95) -> float:
    """The two-sided normal quantile that covers ``n`` independent estimates at once with probability ``level``.

    >>> round(_sidak_z(1), 3), round(_sidak_z(40), 2)
    (1.96, 3.22)
    """
    from adaptive_eval.stats import normal_quantile

    return normal_quantile(level ** (1.0 / max(n, 1)))


def best_eval(evals: Sequence[Mapping], metric: str, *, higher_is_better: bool | None = None,
              by: str = "shrunk", steps=None) -> Mapping | None:
    """The evaluation :func:`pick_best` picks (None when nothing measured ``metric``; the direction from the
    name unless given; ``steps``: among those steps only).

    >>> evals = [{"step": 1, "metrics": {"acc": 1.0}, "ci": {"acc": [0.89, 1.0]}},
    ...          {"step": 2, "metrics": {"acc": 0.97}, "ci": {"acc": [0.95, 0.98]}}]
    >>> best_eval(evals, "acc", by="mean")["step"], best_eval(evals, "acc", by="bound")["step"]
    (1, 2)
    >>> best_eval(evals, "acc")["step"]
    2
    """
    rows = _rows(evals)
    pick = pick_best(rows, metric, higher_is_better=higher_is_better, by=by, steps=steps)
    if pick is None:
        return None
    # (an EvalResult of the evaluator's history comes back as itself)
    return next((e for e, row in zip(evals, rows) if row is pick.eval), pick.eval)


def selection_regret(evals: Sequence[Mapping], truth: Mapping[int, float] | Sequence[float], metric: str, *,
                     higher_is_better: bool | None = None, by: str = "mean") -> float:
    """True value of the best step minus the true value of the step whose eval was best (see
    :func:`best_eval` for ``by``).

    ``truth`` maps each step to the metric's true value (a sequence is indexed by step); a mapping of the steps
    where it was recorded (``ReplayRun.truth``, every 50 steps) gives a step between two of them the earlier one's,
    as replay simulates it (a raw ``KeyError`` for the pick at step 63; a probe).  NaN when no evaluation measured
    ``metric``.

    >>> truth = [0.1, 0.5, 0.9, 0.6]
    >>> selection_regret([{"step": 1, "metrics": {"acc": 0.7}}, {"step": 3, "metrics": {"acc": 0.65}}], truth, "acc")
    0.4
    """
    higher_is_better = _direction(metric, higher_is_better)
    sign = 1.0 if higher_is_better else -1.0
    values = truth.values() if isinstance(truth, Mapping) else truth
    finite = [sign * v for v in values if v is not None and math.isfinite(v)]
    picked = best_eval(evals, metric, higher_is_better=higher_is_better, by=by)
    if not finite or picked is None:
        return math.nan
    step = picked["step"]
    if isinstance(truth, Mapping) and step not in truth:
        earlier = [k for k in truth if k <= step]
        if not earlier:
            raise ValueError(f"selection_regret: the pick is step {step}, before the first step of truth "
                             f"({min(truth)}): no true value for it")
        step = max(earlier)
    true_at_pick = truth[step]
    return round(max(finite) - sign * true_at_pick, 12)


def needless_evals(evals: Sequence[Mapping], events: Sequence, *, steps: int | None = None) -> tuple[int, int]:
    """(evaluations an alarm brought forward, all evaluations) on the event-free stretch of a run: before
    its first event, or the whole run when it has none.  An alarm-driven evaluation there was needless, and so was
    a kept checkpoint's evaluation (``policy.lookback``, after an alarm's evaluation showed a fall) that ran
    there (``evaluated_at``).

    >>> evals = [{"step": 5, "reason": "trigger:steps"}, {"step": 7, "reason": "alarm:loss:cusum:up"},
    ...          {"step": 30, "reason": "alarm:loss:nonfinite"}]
    >>> needless_evals(evals, [20]), needless_evals(evals, [])
    ((1, 2), (2, 3))
    """
    first = min((getattr(ev, "step", ev) for ev in events), default=math.inf)
    # A kept checkpoint evaluated later (policy.lookback) counts where it ran, evaluated_at: it was brought by an alarm.
    quiet = [e for e in evals if (e["step"] if e.get("evaluated_at") is None else e["evaluated_at"]) < first]
    return sum(reason_cause(str(e.get("reason", ""))).startswith(("alarm:", "lookback:")) for e in quiet), len(quiet)


@dataclasses.dataclass
class RunScore:
    """How one replayed run scores: cost, confirmed delays of its events, needless evaluations on its
    event-free stretch, and the regret of the checkpoint it picks (a share of the run's range of true values).
    """

    steps: int
    evals: int
    samples: int
    delays: list
    needless: int
    quiet_evals: int
    regret: float
    regret_points: float = math.nan  # the same regret in the metric's own units
    pick: dict | None = None
    # Each event's delay confirmed against the last evaluation before it (its own error counted), as a user who
    # does not know the true level before the event can: beside ``delays``, which use that true level when known
    # (a sceptical review: the true level favours a schedule whose last look before an event is old or small)
    delays_measured: list = dataclasses.field(default_factory=list)
    # Trace steps per record, for delays in steps of a trace logged every k steps: tune's cap of 100 is 100
    # records' worth (in steps it made 400 steps, 2 records late, score as a miss; a review)
    step_scale: float = 1.0


def event_direction(truth: Sequence[float], index: int, *, higher_is_better: bool = True,
                    horizon: int = 50) -> tuple[float | None, str | None]:
    """(true level just before ``index``, "up"/"down" by the mean true value over the next ``horizon``).

    >>> event_direction([0.5, 0.5, 0.1, 0.1, 0.1], 2)
    (0.5, 'down')
    """
    before = [float(v) for v in truth[max(index - 1, 0):index] if _finite(v)]
    after = [float(v) for v in truth[index:index + horizon] if _finite(v)]
    if not before:
        return None, None
    if not after:
        return before[-1], None
    return before[-1], ("up" if sum(after) / len(after) > before[-1] else "down")


def score_run(evals: Sequence[Mapping], *, steps: int, full_size: int, events: Sequence = (),
              truth: Sequence[float] | None = None, metric: str | None = None, higher_is_better: bool = True,
              by: str = "shrunk", paired: bool = True,
              directions: Sequence[str | None] | None = None) -> RunScore:
    """Score a run's evaluations (steps are record indices, ``truth[i]`` the true value at index ``i``).

    Each event's delay is :func:`confirmed_delay` against the true level just before it, in the direction
    the truth moves (:func:`event_direction`), or the event's own (``directions[i]``, or an event's
    ``direction`` attribute: an events file's ``direction: down``; the truth read 50 records on took a silent
    degradation whose first checkpoints still rose for "up"); without truth, against the last evaluation before it
    (its own error counted), either way; ``paired``: a paired difference on shared items confirms too.

    A run with truth where no evaluation measured ``metric`` has no pick: its regret is that of a checkpoint
    picked at random (the mean over the run of the true best minus the truth), not NaN, which the averages
    over runs left out (a fixed schedule that never evaluated a short run scored 0% regret).
    """
    if isinstance(truth, Mapping):
        raise TypeError("score_run: truth is a sequence indexed by record (truth[i], the true value at record i, "
                        "as steps are record indices), not a mapping; for a mapping of steps use selection_regret")
    delays, measured = [], []
    for i, ev in enumerate(events):
        step = int(getattr(ev, "step", ev))
        pre, direction = (event_direction(truth, step, higher_is_better=higher_is_better)
                          if truth is not None else (None, None))
        own = directions[i] if directions is not None and i < len(directions) else getattr(ev, "direction", None)
        if own is not None:
            direction = own  # (confirmed_delay refuses anything but "up", "down" and None)
        delays.append(confirmed_delay(evals, step, metric, pre_level=pre, direction=direction, paired=paired)
                      if metric is not None else None)
        measured.append(delays[-1] if pre is None else
                        confirmed_delay(evals, step, metric, pre_level=None, direction=direction, paired=paired)
                        if metric is not None else None)
    needless, quiet = needless_evals(evals, events)
    regret, points, pick = math.nan, math.nan, None
    if metric is not None and truth is not None:
        p = pick_best(evals, metric, higher_is_better=higher_is_better, by=by)
        finite = [float(v) for v in truth if _finite(v)]
        if finite:
            sign = 1.0 if higher_is_better else -1.0
            best = max(sign * v for v in finite)
            spread = max(finite) - min(finite)
            if p is not None:
                at = float(truth[p.step]) if _finite(truth[p.step]) else math.nan
                points = best - sign * at
                pick = {**p.to_dict(), "true": at}
            else:  # nothing measured: a pick at random
                points = best - sign * sum(finite) / len(finite)
            regret = points / spread if spread > 0 else 0.0
    return RunScore(steps=int(steps), evals=len(evals), samples=eval_samples(evals, full_size), delays=delays,
                    needless=needless, quiet_evals=quiet, regret=regret, regret_points=points, pick=pick,
                    delays_measured=measured)

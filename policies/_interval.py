"""Interval policy: tighten the base interval after alarms or a significant change, relax it when quiet."""

from __future__ import annotations

import math
from collections.abc import Mapping

from adaptive_eval.types import EvalResult, MetricSummary, reason_cause

from adaptive_eval.policies._base import Context, Policy, primary_metric

__all__ = ["IntervalPolicy", "change_p", "differs", "loaded_summary", "paired_differs", "remembered"]


def differs(prev: MetricSummary, cur: MetricSummary) -> float:
    """p-value of "these two evaluations measure the same value" (NaN when it cannot be tested).

    Proportions: two-proportion z-test (statsmodels); other metrics, and items x samples metrics (whose
    ``std`` is that of the per-item means), Welch's t-test from the summary statistics (scipy).  Successive evaluations share items (nested samples), so the unpaired test is
    conservative: a change it calls significant is real.

    >>> from adaptive_eval.stats import summarize
    >>> round(differs(summarize([1] * 80 + [0] * 20), summarize([1] * 40 + [0] * 60)), 6)
    0.0
    """
    if prev.n < 2 or cur.n < 2:
        return math.nan
    if prev.binary and cur.binary and not (prev.clustered or cur.clustered):
        # The pooled two-proportion z-test (statsmodels' proportions_ztest; the tests check they agree),
        # in closed form because it runs at every evaluation of a replay.
        k1, k2 = round(prev.mean * prev.n), round(cur.mean * cur.n)
        if k1 + k2 == 0 or k1 + k2 == prev.n + cur.n:
            return 1.0
        pooled = (k1 + k2) / (prev.n + cur.n)
        se = math.sqrt(pooled * (1.0 - pooled) * (1.0 / prev.n + 1.0 / cur.n))
        z = (k1 / prev.n - k2 / cur.n) / se
        return math.erfc(abs(z) / math.sqrt(2.0))
    if not (math.isfinite(prev.std) and math.isfinite(cur.std)):
        return math.nan
    if prev.std == 0 and cur.std == 0:
        return 1.0 if prev.mean == cur.mean else 0.0
    import numpy as np
    from scipy.stats import ttest_ind_from_stats

    with np.errstate(all="ignore"):  # (huge values are data: an overflow is a NaN p-value, not a RuntimeWarning,
        # which -W error raised out of evaluate() into the training step; a probe)
        return float(ttest_ind_from_stats(prev.mean, prev.std, prev.n, cur.mean, cur.std, cur.n,
                                          equal_var=False).pvalue)


def paired_differs(diff: MetricSummary) -> float:
    """p-value of "no change" from the paired differences on the items two evaluations share (a paired t
    test over items: each item is compared with itself, so the between-item spread cancels); NaN with
    fewer than two shared items.

    >>> from adaptive_eval.stats import from_sums
    >>> round(paired_differs(from_sums(-2.0, 0.5, 20, False)), 4)  # 20 shared items, mean -0.1, sd 0.126
    0.0021
    >>> paired_differs(from_sums(2.0, 2.0, 2, True)), paired_differs(from_sums(8.0, 8.0, 8, True))  # all +1
    (0.5, 0.0078125)
    >>> paired_differs(from_sums(0.3 + 0.3 + 0.3, 3 * 0.09, 3, False))  # all +0.3 (sums that leave a residue)
    0.25
    """
    if diff.n < 2 or not math.isfinite(diff.std):
        return math.nan
    if diff.std <= 1e-6 * abs(diff.mean) or diff.std == 0:
        # Every shared item moved alike: no spread for a t test (or a rounding residue of the sums, of the order
        # of 1e-8 of the mean: 3 items up by 0.3 read sd 5e-9), so the exact sign test (2 items both 0 -> 1 read
        # p = 0, "changed", where a sign test says 0.5; found by a statistics probe).
        return 1.0 if diff.mean == 0 else min(1.0, 2.0 * 0.5 ** diff.n)
    from scipy.stats import t

    stat = diff.mean / (diff.std / math.sqrt(diff.n))
    return float(2.0 * t.sf(abs(stat), diff.n - 1))


def remembered(summary: MetricSummary) -> dict:
    """What :func:`change_p` needs of an evaluation's tracked metric, as plain values (a policy's state)."""
    return {"mean": summary.mean, "n": summary.n, "ci": list(summary.ci), "std": summary.std,
            "binary": summary.binary, "clustered": summary.clustered}


def loaded_summary(prev) -> dict | None:
    """A remembered summary from a saved state, checked as :func:`change_p` reads it (a damaged one loaded, then
    raised in evaluate())."""
    if prev is None:
        return None
    prev = dict(prev)
    MetricSummary.from_dict({**prev, "ci": list(prev["ci"])})
    return prev


def change_p(result: EvalResult, name: str, cur: MetricSummary, prev: dict | None) -> float:
    """p-value of "no change" of metric ``name`` (``cur``) since the evaluation ``prev`` remembered: the paired test
    on the shared items when the result carries one (the same items measured again, far more sensitive than two
    independent means), else :func:`differs`; NaN when it cannot be tested."""
    pair = result.paired.get(name)
    if pair is not None and pair.n >= 2:
        return paired_differs(pair)
    if prev is None:
        return math.nan
    return differs(MetricSummary(**{**prev, "ci": tuple(prev["ci"])}), cur)


class IntervalPolicy(Policy):
    """Scale the base interval: x ``tighten`` after an alarm or an evaluation that differs significantly
    from the previous one, x ``relax`` after a quiet evaluation; always within [``min_factor``, ``max_factor``].
    "Differs" is the paired test on the shared items (:func:`paired_differs`) when the result carries a
    paired difference for the tracked metric, else the unpaired :func:`differs`.  Between two evaluations an alarm
    tightens once; with ``tighten_per_stream`` once for each stream that alarms (more streams agreeing, the next look
    sooner).

    >>> from adaptive_eval.types import EvalResult
    >>> from adaptive_eval.stats import summarize
    >>> p = IntervalPolicy(min_factor=0.25, max_factor=4.0, relax=2.0, tighten=0.5)
    >>> ctx = Context(step=0, elapsed=0.0, eval_seconds=0.0)
    >>> quiet = EvalResult(step=0, sample_size=100, reason="", seconds=1.0, metrics={"acc": summarize([1, 0] * 50)})
    >>> for _ in range(3):
    ...     p.on_eval(quiet, ctx)
    >>> p.scale(1.0)
    4.0
    """

    name = "interval"

    def __init__(self, min_factor: float = 0.25, max_factor: float = 4.0, relax: float = 1.5, tighten: float = 0.5,
                 significance: float = 0.05, metric: str | None = None, max_run_fraction: float | None = None,
                 tighten_per_stream: bool = False):
        if not 0 < min_factor <= max_factor:
            raise ValueError(f"min_factor ({min_factor}) must be positive and <= max_factor ({max_factor})")
        if max_run_fraction is not None and not 0 < max_run_fraction < math.inf:
            raise ValueError(f"max_run_fraction must be positive or None, got {max_run_fraction}")
        if relax < 1:
            raise ValueError(f"relax must be >= 1, got {relax}")
        if not 0 < tighten <= 1:
            raise ValueError(f"tighten must lie in (0, 1], got {tighten}")
        self.min_factor, self.max_factor = float(min_factor), float(max_factor)
        self.relax, self.tighten, self.significance = float(relax), float(tighten), float(significance)
        self.metric = metric
        # (the evaluator applies it: it knows the run's total steps; see hold_within)
        self.max_run_fraction = None if max_run_fraction is None else float(max_run_fraction)
        self.tighten_per_stream = bool(tighten_per_stream)
        self._reset()

    def _reset(self) -> None:
        self.factor = 1.0
        self._alarmed = False  # an alarm since the last evaluation
        self._streams: set[str] = set()  # the streams that alarmed since (tighten_per_stream)
        self._prev: dict | None = None  # summary of the tracked metric at the last evaluation
        self.last_change = ""  # why the factor last changed

    def _clamp(self, x: float) -> float:
        return min(self.max_factor, max(self.min_factor, x))

    def scale(self, scale: float) -> float:
        return self.factor

    def hold_within(self, most: float) -> None:
        """Keep the factor at or below ``most`` (``max_run_fraction`` of a run of known length, as the evaluator
        reckons it), so that an alarm tightens from the interval in use: from 4.4, one halving left 2.2, still above
        a cap of 1.2, and the first alarm changed nothing (found in review)."""
        if self.factor > most:
            self.factor = most

    def on_alarm(self, alarm, ctx: Context) -> None:
        # tighten_per_stream: each stream that alarms since the last evaluation tightens once more.  A gradual
        # collapse moves one stream first (kl, 2 steps in), whose evaluation finds little; the others follow
        # within the alarm cooldown, which let them bring nothing, and the next look came 30 steps on (an outside
        # reviewer's traces: 46% -> 69% of their events confirmed within 25 steps, the same cost on ours)
        if self.tighten_per_stream and alarm.stream not in self._streams:
            self._streams.add(alarm.stream)
        elif self._alarmed:
            return
        self._alarmed = True
        self.factor = self._clamp(self.factor * self.tighten)
        self.last_change = "tightened:alarm"

    def on_eval(self, result: EvalResult, ctx: Context) -> None:
        found = primary_metric(result, self.metric)
        changed = False
        if found is not None:
            name, cur = found
            p = change_p(result, name, cur, self._prev)
            changed = p == p and p < self.significance
            self._prev = remembered(cur)
        if changed:
            self.factor = self._clamp(self.factor * self.tighten)
            self.last_change = "tightened:change"
        elif found is None:
            # No measurement (a failed evaluation, or one that returned nothing): no evidence of quiet.  A
            # tightened schedule still drifts back to the base, but does not relax past it.
            if self.factor < 1.0 and not self._alarmed:
                self.factor = min(1.0, self._clamp(self.factor * self.relax))
                self.last_change = "relaxed:unmeasured"
        elif not self._alarmed and not reason_cause(result.reason).startswith(("alarm:", "peak:")):
            self.factor = self._clamp(self.factor * self.relax)
            self.last_change = "relaxed:quiet"
        self._alarmed = False
        self._streams.clear()

    def state_dict(self) -> dict:
        return {"factor": self.factor, "alarmed": self._alarmed, "prev": self._prev, "last_change": self.last_change,
                "streams": sorted(self._streams)}

    def load_state_dict(self, sd: Mapping) -> None:
        self.factor = float(sd.get("factor", 1.0))
        self._alarmed = bool(sd.get("alarmed", False))
        self._prev = loaded_summary(sd.get("prev"))
        self.last_change = str(sd.get("last_change", ""))
        streams = sd.get("streams", ())
        if isinstance(streams, (str, bytes)) or not isinstance(streams, (list, tuple, set)):
            raise TypeError(f"streams: a list of stream names, got {type(streams).__name__}")
        self._streams = {str(x) for x in streams}

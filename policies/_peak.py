"""Peak tracking: while the eval metric still improves, do not relax the schedule; re-measure a candidate
best precisely before calling it best."""

from __future__ import annotations

import dataclasses

import math
from collections.abc import Mapping

from adaptive_eval.types import Decision, EvalResult, reason_cause

from adaptive_eval.policies._base import Context, Policy, primary_metric

__all__ = ["PeakPolicy"]


class PeakPolicy(Policy):
    """While the tracked metric reaches new bests, cap the interval at ``improving_factor`` x base; and when a
    small evaluation's mean beats the best precise one (a *candidate* best), re-measure it with
    ``confirm_size`` items within ``confirm_steps`` steps (reason ``peak:confirm``) before calling it best.

    Model selection is a main reason to evaluate, and it suffers from the winner's curse: of many small
    noisy evaluations the luckiest looks best (a 32-item sample scoring 1.000 where the truth is 0.924).
    So only an evaluation of at least ``confirm_size`` items (or of the whole set, or a re-measure) sets the
    best (its mean); a smaller one can only nominate a candidate.  ``confirm_steps: 0`` does not bring the re-measure forward: the next
    scheduled evaluation is widened instead.  "Improving" (for the cap) is judged by the pessimistic bound
    of the interval (the lower bound when ``higher_is_better``), so only a real improvement counts.
    ``confirm_size: 0`` turns the re-measure off.

    >>> from adaptive_eval.types import EvalResult, MetricSummary
    >>> p = PeakPolicy(improving_factor=1.0, confirm_size=256, confirm_steps=1)
    >>> ctx = lambda s: Context(step=s, elapsed=0.0, eval_seconds=0.0)
    >>> r = lambda s, m, n: EvalResult(step=s, sample_size=n, reason="", seconds=0.0,
    ...                                metrics={"acc": MetricSummary(m, n, (m - 0.05, m + 0.05))})
    >>> p.on_eval(r(10, 0.5, 32), ctx(10)); p.scale(3.0), p.pending
    (1.0, True)
    >>> p.propose(Decision(False), ctx(11))
    Decision(evaluate=True, sample_size=256, reason='peak:confirm', urgent=False, suites=(),
             widened_from=None, deferred='')
    >>> p.on_eval(r(11, 0.45, 256), ctx(11)); p.best_value, p.pending
    (0.45, False)
    >>> p.on_eval(r(20, 0.44, 32), ctx(20)); p.pending     # below the best: no candidate
    False
    """

    name = "peak"

    def __init__(self, improving_factor: float = 1.0, confirm_size: int = 0, confirm_steps: int = 1,
                 metric: str | None = None, higher_is_better: bool = True):
        if not improving_factor > 0:
            raise ValueError(f"improving_factor must be positive, got {improving_factor}")
        if confirm_size < 0:
            raise ValueError(f"confirm_size must be >= 0, got {confirm_size}")
        if confirm_steps < 0:
            raise ValueError(f"confirm_steps must be >= 0, got {confirm_steps}")
        self.improving_factor = float(improving_factor)
        self.confirm_size = int(confirm_size)
        self.confirm_steps = int(confirm_steps)
        self.metric = metric
        self.higher_is_better = bool(higher_is_better)
        self._reset()

    def _reset(self) -> None:
        self.best = -math.inf  # best pessimistic bound so far (sign-adjusted), for "improving"
        self.improving = False
        self.best_precise = -math.inf  # best mean of an evaluation of >= confirm_size items (sign-adjusted)
        self._confirm_at: int | None = None  # step by which a candidate best is re-measured

    @property
    def pending(self) -> bool:
        """A candidate best waits to be re-measured (the evaluator then asks the policies every step)."""
        return self._confirm_at is not None and self.confirm_steps > 0

    @property
    def best_value(self) -> float | None:
        """The best precisely measured mean so far, in the metric's own sign (None before one)."""
        if not math.isfinite(self.best_precise):
            return None
        return self.best_precise if self.higher_is_better else -self.best_precise

    def scale(self, scale: float) -> float:
        return min(scale, self.improving_factor) if self.improving else scale

    def propose(self, decision: Decision, ctx: Context) -> Decision:
        if not self.confirm_size:
            return decision
        if not decision.evaluate:
            if self.pending and ctx.step >= self._confirm_at and not decision.reason.startswith("budget:"):
                return Decision(True, self.confirm_size, "peak:confirm", decision.urgent)
            return decision
        if not (self.improving or self._confirm_at is not None):
            return decision
        if decision.sample_size is None or decision.sample_size >= self.confirm_size:
            # (None, the whole eval set, is as precise as it gets: it was cut to confirm_size, 500 of 20,000 items,
            # at every evaluation after the first; a probe)
            return decision
        # (the size it had: over budget it may shrink back towards it, policy.budget.shrink_widened)
        widened_from = decision.widened_from if decision.widened_from is not None else decision.sample_size
        return dataclasses.replace(decision, evaluate=True, sample_size=self.confirm_size, widened_from=widened_from)

    def on_eval(self, result: EvalResult, ctx: Context) -> None:
        found = primary_metric(result, self.metric)
        if found is None:  # nothing measured (a failed evaluation): nothing learned
            return
        m = found[1]
        if not math.isfinite(m.mean):
            self.improving = False
            self._confirm_at = None
            return
        sign = 1.0 if self.higher_is_better else -1.0
        if self.higher_is_better:
            value = m.ci[0] if math.isfinite(m.ci[0]) else m.mean
        else:
            value = -m.ci[1] if math.isfinite(m.ci[1]) else -m.mean
        self.improving = value > self.best
        self.best = max(self.best, value)
        if not self.confirm_size:
            return
        # Precise: enough items, the whole eval set (asked for, or all a smaller set had: fewer items than
        # requested), a re-measure already (a small eval set cannot give more), or a bare scalar (nothing to
        # re-measure more precisely).  (Suites and items x samples metrics: their plans size them, not this.)
        # (With suites the reason carries the plans, "peak:confirm [math: every, ...]": read as a re-measure that
        # never came, a candidate was re-measured again at every step.)
        exhausted = (result.sample_size is not None and m.n < result.sample_size and not m.clustered
                     and not m.population)
        precise = (m.n >= self.confirm_size or result.sample_size is None or reason_cause(result.reason).startswith("peak:confirm")
                   or exhausted or m.n <= 1 or not math.isfinite(m.ci[0]))
        if precise:
            self.best_precise = max(self.best_precise, sign * m.mean)
            self._confirm_at = None
        elif sign * m.mean > self.best_precise and self._confirm_at is None:
            self._confirm_at = ctx.step + self.confirm_steps

    def state_dict(self) -> dict:
        return {"best": self.best if math.isfinite(self.best) else None, "improving": self.improving,
                "best_precise": self.best_precise if math.isfinite(self.best_precise) else None,
                "confirm_at": self._confirm_at}

    def load_state_dict(self, sd: Mapping) -> None:
        best = sd.get("best")
        self.best = float(best) if best is not None else -math.inf
        self.improving = bool(sd.get("improving", False))
        bp = sd.get("best_precise")
        self.best_precise = float(bp) if bp is not None else -math.inf
        at = sd.get("confirm_at")
        self._confirm_at = int(at) if at is not None else None

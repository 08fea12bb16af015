"""Sample-size policy: size each evaluation for a target confidence-interval half-width."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from adaptive_eval.stats import mean_sample_size, two_stage_size, wilson_sample_size
from adaptive_eval.types import Decision, EvalResult, log_once

from adaptive_eval.policies._base import Context, Policy, primary_metric

# A suite's max_samples_per_item when null (or its samples_per_item, if more): the cap on the answers per item a
# plan may ask for (samples_per_item is only the first plan's, not a cap).
DEFAULT_MAX_SAMPLES_PER_ITEM = 32

__all__ = ["SampleSizePolicy"]


def _max_samples_per_item(suite: Mapping) -> int:
    """A suite's ``max_samples_per_item``; null (the default): 32, or the answers generated per item when more."""
    top = suite.get("max_samples_per_item")
    return int(top) if top is not None else max(DEFAULT_MAX_SAMPLES_PER_ITEM, int(suite.get("samples_per_item", 1)))


class SampleSizePolicy(Policy):
    """Choose the next evaluation's size from the last one's variance, widened after an alarm.

    Proportions use the Wilson interval's width at the last measured proportion; other metrics the
    normal approximation with the last measured standard deviation.  After an alarm (or for an
    alarm-driven evaluation) the size is multiplied by ``alarm_factor`` so the suspected change can be
    confirmed; for a proportion, no more than the half-width that gives near 0.5 needs (``sqrt(alarm_factor)``
    times tighter), which near 0 or 1 is fewer items: the Wilson interval narrows faster there (a collapsed
    accuracy of 0.0 gets 85 items for +-0.022, not 12 x the 48-item minimum).  Always within
    [``min``, ``max``]; ``initial`` before anything is known.  Samples are nested (``EvalRequest.indices``),
    so a larger size extends the same items.

    With eval suites (``evaluation.suites``, those without a fixed ``sample_size``), each suite is sized
    on its own: items and samples per item from the between- and within-item variances of its tracked
    metric, at the least cost (:func:`~adaptive_eval.stats.two_stage_size`, the suite's ``cost``,
    ``item_cost``, ``size`` and ``max_samples_per_item``); the decision carries the plans and the reason
    says why (``decision.suites``), never below the suite's ``min_samples_per_item`` (null: 1; set it to the
    largest k of ``evaluation.pass_at_k`` to have that pass@k in every evaluation: with fewer answers per item
    it is not reported, and the evaluator says so once).  A suite's ``samples_per_item`` is only its first
    plan's answers per item, not a cap: later plans may ask for more, up to ``max_samples_per_item`` (null:
    32, or ``samples_per_item`` when more), so an ``evaluate_fn`` with only k answers per item on disk needs
    ``max_samples_per_item: k``.

    >>> from adaptive_eval.types import Decision
    >>> p = SampleSizePolicy(initial=100, min=32, max=1000, target_half_width=0.05)
    >>> ctx = Context(step=0, elapsed=0.0, eval_seconds=0.0)
    >>> p.propose(Decision(True, reason="trigger:steps"), ctx).sample_size
    100
    >>> p.propose(Decision(True, reason="alarm:train/reward:cusum:down"), ctx).sample_size
    200
    """

    name = "sample_size"

    def __init__(self, initial: int = 128, min: int = 32, max: int = 1024, target_half_width: float = 0.05,
                 alarm_factor: float = 2.0, confidence: float = 0.95, metric: str | None = None,
                 suites: Mapping | None = None, widen_held: bool = True):
        if not 0 < min <= max:
            raise ValueError(f"min ({min}) must be positive and <= max ({max})")
        if not target_half_width > 0:
            raise ValueError(f"target_half_width must be positive, got {target_half_width}")
        if not alarm_factor >= 1:
            raise ValueError(f"alarm_factor must be >= 1, got {alarm_factor}")
        self.initial, self.min, self.max = int(initial), int(min), int(max)
        if not self.min <= self.initial <= self.max:
            # (clamped, as it always was, but the config printed 1000 and the first evaluation asked for 512; a probe)
            log_once(("sample-size-initial", self.initial, self.min, self.max), "policy.sample_size.initial %d is "
                     "outside [policy.sample_size.min %d, policy.sample_size.max %d]: the first evaluation asks for %d "
                     "(said once)", self.initial, self.min, self.max, self._clamp(self.initial))
        self.target_half_width, self.alarm_factor = float(target_half_width), float(alarm_factor)
        self.confidence, self.metric = float(confidence), metric
        self.widen_held = bool(widen_held)
        # Eval suites the policy sizes (those without a fixed sample_size): plain config mappings.
        self.suites = {k: dict(v) for k, v in (suites or {}).items() if v.get("sample_size") is None}
        for name, s in self.suites.items():
            s["max_samples_per_item"] = _max_samples_per_item(s)
            least = int(s.get("min_samples_per_item") or 1)  # (min and max are parameters here)
            s["min_samples_per_item"] = least if least < s["max_samples_per_item"] else s["max_samples_per_item"]
        self._suite_names = set(suites or {})  # (all of them, the fixed-size ones too: evaluation.metric may name one)
        self._reset()

    def _reset(self) -> None:
        self.base = self._clamp(self.initial)
        self.widened: int | None = None  # the size after an alarm (None: base x alarm_factor)
        self._widen = False
        self.last_why = "initial"
        # Per suite: [items, samples per item, why] for its next evaluation.
        self.plans = {name: [min(self._clamp(self.initial), int(s["size"])),
                             max(int(s["samples_per_item"]), s["min_samples_per_item"]), "initial"]
                      for name, s in self.suites.items()}

    def _clamp(self, n: float) -> int:
        return int(min(self.max, max(self.min, math.ceil(n))))

    @property
    def alarm_half_width(self) -> float:
        """The half-width an alarm's evaluation is sized for: what ``alarm_factor`` x the items gives near 0.5."""
        return self.target_half_width / math.sqrt(self.alarm_factor)

    def on_alarm(self, alarm, ctx: Context) -> None:
        self._widen = True

    def on_held_alarm(self, alarm, ctx: Context) -> None:
        self._widen = self._widen or self.widen_held

    def propose(self, decision: Decision, ctx: Context) -> Decision:
        if not decision.evaluate:
            return decision
        n = self.base
        widen = self._widen or decision.reason.startswith("alarm:")
        if widen:
            n = self._clamp(n * self.alarm_factor if self.widened is None else self.widened)
        suites = ()
        if self.plans:
            plans = []
            for name, (items, m, why, *alarm) in self.plans.items():
                if widen and alarm and alarm[0] is not None:  # the precision an alarm wants, for less
                    items, m = alarm
                    why = (f"{why}; after an alarm {items}x{m} reach "
                           f"+-{self.alarm_half_width:.3g} (fewer than "
                           f"x{self.alarm_factor:g})")
                elif widen:
                    size = int(self.suites[name]["size"])
                    wanted = math.ceil(items * self.alarm_factor)
                    items = min(wanted, size)
                    why = f"{why}; x{self.alarm_factor:g} after an alarm" + (
                        f" (capped at the whole suite, {size} items)" if wanted > size else "")
                plans.append((name, int(items), int(m), why))
            suites = tuple(plans)
        # A scheduled evaluation widened after an alarm (one held for corroboration, or one whose own evaluation
        # already ran; the plain size): the budget may shrink it back towards the size it had without the alarm.
        widened_from = self.base if widen and not suites and not decision.reason.startswith("alarm:") else None
        return dataclasses.replace(decision, sample_size=n, suites=suites, widened_from=widened_from)

    def _tracked(self, result: EvalResult, suite: str):
        if self.metric is not None:
            # evaluation.metric names one suite's metric (math500/acc): the others are sized by their own metric
            # of that name (aime/acc); "aime/math500/acc" matched nothing and left aime at its first size.
            head, _, rest = self.metric.partition("/")
            base = rest if rest and head in self._suite_names else self.metric
            found = result.metrics.get(f"{suite}/{base}")
            if found is not None:
                return found
        for name, s in result.metrics.items():  # the suite's first metric (not a pass@k / best@k of it)
            if name.startswith(suite + "/") and "@" not in name:
                return s
        return None

    def _size_suite(self, name: str, s) -> None:
        """Two-stage sizing of one suite from its last measurement (between- and within-item variances)."""
        suite = self.suites[name]
        wv, bv = s.within_var, s.between_var
        if not math.isfinite(bv):
            return
        lo, hi = self.min, self.max
        # Every answer the same (all right or all wrong): no evidence how the variance splits between and within
        # items; a two-stage plan would read "no within-item variance" and drop to 1 answer per item, where the
        # within-item variance can never be measured again (found by a new user: one all-correct evaluation
        # locked a suite at 1 answer per item, and its pass@4, for the rest of the run).
        degenerate = wv == 0.0 and bv == 0.0
        if math.isfinite(wv) and not degenerate:
            items, m, why = two_stage_size(bv, wv, self.target_half_width, cost_per_sample=float(suite["cost"]),
                                           cost_per_item=float(suite["item_cost"]), population=int(suite["size"]),
                                           max_samples_per_item=int(suite["max_samples_per_item"]),
                                           min_items=min(lo, int(suite["size"])), max_items=hi,
                                           confidence=self.confidence,
                                           proportion_mean=s.mean if s.binary else None,
                                           min_samples_per_item=suite["min_samples_per_item"])
        else:
            # One sample per item: between- and within-item variation cannot be told apart, so no evidence
            # that more samples would pay; size the items for the total variance, samples per item kept.
            m = max(int(s.samples_per_item) if s.clustered else 1, suite["min_samples_per_item"])
            least = suite["min_samples_per_item"]
            if degenerate:  # at least 2 answers per item (as measured), so the next one can split the variance
                least = max(least, min(m, 2))
            items, m, why = two_stage_size(bv, 0.0, self.target_half_width, population=int(suite["size"]),
                                           max_samples_per_item=m, min_items=min(lo, int(suite["size"])),
                                           max_items=hi, confidence=self.confidence,
                                           proportion_mean=s.mean if s.binary else None,
                                           min_samples_per_item=least)
            why = (f"{why} (every answer the same: {m} answers per item, to measure how the variance splits)"
                   if degenerate else
                   f"{why} (within-item variance unknown at {m} sample per item)")
        self.plans[name] = [int(items), int(m), why, *self._alarm_plan(suite, s, int(items), int(m))]

    def _alarm_plan(self, suite, s, items: int, m: int) -> tuple:
        """(items, samples per item) for an alarm's evaluation of a suite: the plan that reaches the half-width
        ``alarm_factor`` x the items gives near 0.5 (``target_half_width / sqrt(alarm_factor)``) at the last
        measured variances, when it costs less than ``alarm_factor`` x the items (a collapsed suite scoring
        0.0 needs fewer answers than a suite near 0.5); else (None, None): ``alarm_factor`` x the items."""
        size, lo = int(suite["size"]), min(self.min, int(suite["size"]))
        tight = self.alarm_half_width
        wv = s.within_var if math.isfinite(s.within_var) else 0.0
        top = m if not math.isfinite(s.within_var) else int(suite["max_samples_per_item"])
        n, k, _ = two_stage_size(s.between_var, wv, tight, cost_per_sample=float(suite["cost"]),
                                 cost_per_item=float(suite["item_cost"]), population=size, max_samples_per_item=top,
                                 min_items=lo, max_items=self.max, confidence=self.confidence,
                                 proportion_mean=s.mean if s.binary else None,
                                 min_samples_per_item=suite["min_samples_per_item"])
        if s.binary and not 0.0 < s.mean < 1.0:  # no variance to size by: the Wilson size of the answers
            n, k = min(size, max(lo, math.ceil(wilson_sample_size(s.mean, tight, self.confidence) / m))), m

        def cost(n, k):
            return n * (float(suite["item_cost"]) + k * float(suite["cost"]))

        if cost(n, k) < cost(min(math.ceil(items * self.alarm_factor), size), m):
            return int(n), int(k)
        return None, None

    def on_eval(self, result: EvalResult, ctx: Context) -> None:
        self._widen = False
        for name in self.plans:
            s = self._tracked(result, name)
            if s is not None and s.n >= 2:
                self._size_suite(name, s)
        found = primary_metric(result, self.metric)
        if found is None:
            return
        s = found[1]
        tight = self.alarm_half_width
        if s.binary and math.isfinite(s.mean):
            self.base = self._clamp(wilson_sample_size(s.mean, self.target_half_width, self.confidence))
            self.widened = min(self._clamp(self.base * self.alarm_factor),
                               self._clamp(wilson_sample_size(s.mean, tight, self.confidence)))
            self.last_why = f"wilson(p={s.mean:.3f})"
        elif math.isfinite(s.std) and s.std > 0:
            self.base = self._clamp(mean_sample_size(s.std, self.target_half_width, self.confidence))
            self.widened = None  # the normal interval: alarm_factor x the items is that half-width already
            self.last_why = f"normal(sd={s.std:.3g})"

    def state_dict(self) -> dict:
        return {"base": self.base, "widened": self.widened, "widen": self._widen, "last_why": self.last_why,
                "plans": {k: list(v) for k, v in self.plans.items()}}

    def load_state_dict(self, sd: Mapping) -> None:
        self.base = int(sd.get("base", self._clamp(self.initial)))
        widened = sd.get("widened")
        self.widened = None if widened is None else int(widened)
        self._widen = bool(sd.get("widen", False))
        self.last_why = str(sd.get("last_why", "initial"))
        for name, plan in sd.get("plans", {}).items():
            if name in self.plans:
                alarm = [None if v is None else int(v) for v in plan[3:5]] if len(plan) >= 5 else []
                self.plans[name] = [int(plan[0]), int(plan[1]), str(plan[2]), *alarm]

"""Budget policy: keep evaluation wall time under a share of elapsed time."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import numpy as np

from adaptive_eval.types import Decision, EvalResult

from adaptive_eval.policies._base import Context, Policy

__all__ = ["BudgetPolicy"]

_WINDOW = 12  # evaluations the fixed cost is fitted over
_SPREAD = 1.5  # their sizes must differ by this factor for a fixed cost to be fitted
_NEGLIGIBLE = 0.01  # a fitted fixed cost under this share of the cheapest evaluation is taken as none


def fixed_cost(observations) -> float:
    """The fixed seconds per evaluation that a line fitted by least squares through ``(units, seconds)`` pairs
    implies; 0 when the sizes hardly differ, when the line falls with size or puts more than 90% of the
    cheapest evaluation's seconds in the fixed part, or when it finds (almost) no fixed part.

    >>> fixed_cost([(32, 6.6), (384, 24.2), (32, 6.6)])
    5.0
    >>> fixed_cost([(32, 1.6), (384, 19.2)]), fixed_cost([(32, 6.6), (40, 7.0)])
    (0.0, 0.0)
    >>> fixed_cost([(32, 60.0), (384, 24.0)])  # (a warm-up: no line, the plain proportion)
    0.0
    """
    obs = [(float(u), float(s)) for u, s in observations]
    if len(obs) < 2:
        return 0.0
    units, seconds = [o[0] for o in obs], [o[1] for o in obs]
    if max(units) < _SPREAD * min(units):
        return 0.0
    slope, fixed = (float(v) for v in np.polyfit(units, seconds, 1))
    cheapest = min(seconds)
    if slope <= 0 or fixed > 0.9 * cheapest:
        # Not a line through these (a first evaluation slowed by warm-up, timing noise): the plain proportion,
        # which overestimates large evaluations rather than underestimating them.
        return 0.0
    return round(fixed, 9) if fixed >= _NEGLIGIBLE * cheapest else 0.0


_SNAP = 1e-6  # items: the rounding of clock readings (a POSIX time's last bits) below what a budget can tell apart
# ... and in seconds: a clock at a POSIX time (1.7e9) reads in steps of 2.4e-7 s, which for items of 0.02 s is more
# than _SNAP items (the sample shrunk to 164 or 163 by where the clock started; a review)
_SNAP_SECONDS = 1e-5


class BudgetPolicy(Policy):
    """Defer a non-urgent evaluation while running it would push eval time over ``max_eval_fraction``.

    The cost of the next evaluation is estimated from the last one, in proportion to its sample size.  With
    eval suites (:meth:`cost_model`, set by :class:`~adaptive_eval.AdaptiveEvaluator`) it is in the suites'
    cost units instead, items x (samples per item x ``cost`` + ``item_cost``) over the suites that evaluation
    covers: an AIME problem answered 16 times at cost 4 is not one MATH answer (counted in items, an
    evaluation with the dear suite made every later one look dear, and the budget deferred them for hundreds
    of steps at a fifth of its share).
    **A fixed cost per evaluation** (loading weights into an inference engine, warming it up) is learnt once the
    evaluations' sizes differ: seconds = fixed + per-unit x units, the fixed part fitted by least squares over the
    last ``_WINDOW`` evaluations (none when that line falls with size or its fixed part exceeds 90% of the
    cheapest one's seconds: a warm-up, noise), the per-unit part from the last evaluation.  In proportion only, a 32-item evaluation of 5 s + 0.05 s per item made a widened 384-item one
    look 79 s long instead of 24 s.  Costs in proportion to the size (or sizes that never differ) keep the plain
    proportion.
    The first evaluation always runs (nothing is known of its cost).  Urgent evaluations (a NaN, say) run
    regardless when ``bypass_urgent``.  A deferred evaluation stays due and runs as soon as the budget
    allows.

    **An alarm's evaluation does not wait for its whole sample** (``alarm_min_size``, default 48): over budget,
    it runs at once on the largest sample the budget affords, as soon as that is at least ``alarm_min_size``
    items (until then it is deferred like any evaluation; with eval suites every suite's items shrink in
    proportion; a whole-set request shrinks once a whole-set evaluation has shown its size).  The budget stays a
    cap.  An alarm's sample is widened (``policy.sample_size.alarm_factor``), so when evaluations are dear
    (minutes of generation) the whole of it fitted only hundreds of steps later; now a suspected collapse is
    looked at on what the budget affords.  ``None``: it waits for its whole sample.  The reason says so:
    ``... (budget: 62 of 512 items)``.

    **Nor does a widened scheduled evaluation** (``shrink_widened``, default True): one that a held alarm or
    the peak policy's re-measure of a new best widened (``Decision.widened_from``: the size it had before) runs
    over budget on the largest sample the budget affords, never below the size it had before; only when not
    even that fits is it deferred.  Early in a run the budget has little room (11% of a few minutes), and the
    peak policy's 500-item re-measure waited for all of it: on runs of 300 steps one at step 80 waited until a
    NaN at step 105, so the run's last evaluation before the fall was its first, at step 24; with dear
    evaluations (a 500-item one = 50 training steps) a run had 2 evaluations in 700 steps.  An evaluation that
    was not widened keeps its size and waits (shrinking those cost precision where it matters: slower
    confirmation of silent degradations under benchmarks/llm_eval.py's cost model).  False: a widened one
    waits for its whole sample (the behaviour before).

    **Asynchronous evaluation** (``asynchronous``): evaluations run beside training on ``eval_workers``
    workers, so they cost eval-device time, not training time.  The policy then caps the workers' busy
    share instead: (eval-device seconds so far + the next one's) / (elapsed x ``eval_workers``) must stay
    within ``max_eval_device_fraction``.  ``ctx.eval_seconds`` is then the eval-device seconds.

    >>> q = BudgetPolicy(asynchronous=True, eval_workers=1, max_eval_device_fraction=0.5)
    >>> q.on_eval(EvalResult(step=0, sample_size=100, reason="", seconds=10.0), Context(0, 10.0, 10.0))
    >>> q.propose(Decision(True, 100, "trigger:steps"), Context(5, 30.0, 10.0)).reason
    'budget:deferred'
    >>> q.propose(Decision(True, 100, "trigger:steps"), Context(9, 40.0, 10.0)).evaluate
    True

    >>> from adaptive_eval.types import Decision, EvalResult
    >>> p = BudgetPolicy(max_eval_fraction=0.1)
    >>> p.on_eval(EvalResult(step=0, sample_size=100, reason="", seconds=10.0), Context(0, 10.0, 10.0))
    >>> p.propose(Decision(True, 100, "trigger:steps"), Context(5, 60.0, 10.0)).reason
    'budget:deferred'
    >>> p.propose(Decision(True, 100, "trigger:steps"), Context(50, 200.0, 10.0)).evaluate
    True
    >>> d = p.propose(Decision(True, 400, "alarm:loss:cusum:up"), Context(5, 160.0, 10.0))
    >>> d.evaluate, d.sample_size, d.reason
    (True, 66, 'alarm:loss:cusum:up (budget: 66 of 400 items)')
    """

    name = "budget"

    def __init__(self, max_eval_fraction: float = 0.15, bypass_urgent: bool = True, *,
                 max_eval_device_fraction: float = 1.0, asynchronous: bool = False, eval_workers: int = 1,
                 alarm_min_size: int | None = 48, shrink_widened: bool = True):
        if not 0 < max_eval_fraction <= 1:
            raise ValueError(f"max_eval_fraction must lie in (0, 1], got {max_eval_fraction}")
        if not 0 < max_eval_device_fraction <= 1:
            raise ValueError(f"max_eval_device_fraction must lie in (0, 1], got {max_eval_device_fraction}")
        if isinstance(eval_workers, bool) or not isinstance(eval_workers, int) or eval_workers < 1:
            raise ValueError(f"eval_workers must be a positive integer, got {eval_workers!r}")
        self.max_eval_fraction = float(max_eval_fraction)
        self.bypass_urgent = bool(bypass_urgent)
        self.max_eval_device_fraction = float(max_eval_device_fraction)
        self.asynchronous = bool(asynchronous)
        self.eval_workers = eval_workers
        if alarm_min_size is not None and (isinstance(alarm_min_size, bool) or not isinstance(alarm_min_size, int)
                                           or alarm_min_size < 1):
            raise ValueError(f"alarm_min_size must be a positive integer or None, got {alarm_min_size!r}")
        self.alarm_min_size = alarm_min_size
        if not isinstance(shrink_widened, bool):  # (bool("no") is True)
            raise ValueError(f"shrink_widened must be true or false, got {shrink_widened!r}")
        self.shrink_widened = shrink_widened
        self._planned = self._measured = None  # the cost model with eval suites (cost_model)
        self._reset()

    def cost_model(self, planned, measured) -> None:
        """Reckon in cost units: ``planned(decision)`` is ``(units, items)`` of the evaluation the decision would
        run, ``measured(metrics)`` the units an evaluation's results cost (None: none of its suites' metrics).
        Not state: the evaluator sets it from its config, the same on every run."""
        self._planned, self._measured = planned, measured

    def _reset(self) -> None:
        self._seconds_per_sample: float | None = None  # per unit, beyond the fixed cost
        self._fixed_seconds = 0.0
        self._observed: list[list[float]] = []  # the last _WINDOW [units, seconds]
        self._last_seconds: float | None = None
        self._whole_items: int | None = None  # items of a whole-set evaluation, once one ran
        self.deferred = 0

    def expected_seconds(self, sample_size: int | None) -> float:
        if self._last_seconds is None:
            return 0.0
        if sample_size is not None and self._seconds_per_sample is not None:
            return self._fixed_seconds + self._seconds_per_sample * sample_size
        return self._last_seconds

    def propose(self, decision: Decision, ctx: Context) -> Decision:
        if not decision.evaluate or self._last_seconds is None or (decision.urgent and self.bypass_urgent):
            return decision
        if self.expected_seconds(self._items(decision)) > self._room(ctx) + _SNAP_SECONDS:
            shrunk = self._shrink(decision, ctx)
            if shrunk is not None:
                return shrunk
            self.deferred += 1
            return Decision(False, decision.sample_size, "budget:deferred", decision.urgent,
                            deferred=decision.reason)
        return decision

    @staticmethod
    def _alarm(decision: Decision) -> bool:
        return decision.reason.startswith("alarm:")

    def _items(self, decision: Decision) -> float | None:
        """What the decision asks for: cost units of the suites it will cover (with a cost model), else items
        (None: the whole set, size unknown)."""
        if self._planned is not None:
            return self._planned(decision)[0]
        if decision.suites and self._alarm(decision):  # (no cost model: all the suites' planned items)
            return sum(int(plan[1]) for plan in decision.suites)
        if decision.sample_size is None and self._alarm(decision):
            return self._whole_items
        return decision.sample_size

    def _room(self, ctx: Context) -> float:
        """Eval seconds the budget still affords now (an evaluation costing more is over budget)."""
        if self.asynchronous:  # eval-device time against the workers' capacity; training time is not spent
            return self.max_eval_device_fraction * ctx.elapsed * self.eval_workers - ctx.eval_seconds
        f = self.max_eval_fraction  # (eval + c) / (elapsed + c) <= f  <=>  c <= (f * elapsed - eval) / (1 - f)
        return (f * ctx.elapsed - ctx.eval_seconds) / (1.0 - f) if f < 1 else math.inf

    def _shrink(self, decision: Decision, ctx: Context) -> Decision | None:
        """An alarm's evaluation on the largest sample that fits the budget, when at least ``alarm_min_size``
        items fit, and a widened one (``shrink_widened``) when at least the size it was widened from fits; None
        (deferred) otherwise, for any other evaluation, or when nothing is known to size it by.  The budget stays
        a cap: a shrunk evaluation is within it."""
        if self._alarm(decision):
            least = self.alarm_min_size
        elif (self.shrink_widened and decision.widened_from is not None and decision.sample_size is not None
              and not decision.suites):  # (with suites their plans size an evaluation, which nothing widened)
            least = max(int(decision.widened_from), 1)
        else:
            least = None
        if least is None:
            return None
        asked = self._items(decision)
        spp = self._seconds_per_sample
        if asked is None or not spp or not math.isfinite(spp) or spp <= 0:
            return None
        room = self._room(ctx)
        room -= self._fixed_seconds
        afford = room / spp if room > 0 else 0.0  # (inf when the budget is all of the time: never int() it)
        # (a whole number of items the clock's rounding put a hair below: 163.9999999 or 164.0000001 by where the
        # clock starts, so a run resumed with its clock counting from 0 again shrank to 163, not 164; a fuzzer)
        afford += max(_SNAP, _SNAP_SECONDS / spp)
        if afford >= asked:
            return decision
        if self._planned is not None:
            return self._shrink_units(decision, afford, least)
        fit = int(afford)  # reckoning in items: whole ones
        if fit < least:
            return None
        ratio = fit / asked
        if decision.suites:  # (the suites are sized by their plans; the plain size shrinks alike)
            suites = self._scaled(decision.suites, ratio)
            sample_size = None if decision.sample_size is None else max(1, math.floor(decision.sample_size * ratio))
        else:
            suites, sample_size = decision.suites, fit
        return dataclasses.replace(decision, sample_size=sample_size, suites=suites,
                                   reason=f"{decision.reason} (budget: {fit} of {asked} items)")

    @staticmethod
    def _scaled(suites, ratio: float) -> tuple:
        return tuple((name, max(1, min(int(items), math.floor(int(items) * ratio))), *rest)
                     for name, items, *rest in suites)

    def _shrink_units(self, decision: Decision, afford: float, least: int) -> Decision | None:
        """In cost units: the largest share of every shrinkable plan (the sample-size policy's suites, the plain
        size) whose evaluation fits ``afford`` units, found by bisection (a suite of fixed size or at its whole
        set costs the same at every share); None when fewer than ``least`` items fit."""
        base = decision.sample_size if decision.sample_size is not None else self._whole_items
        wanted = self._planned(decision)[1]

        def at(ratio):
            sample_size = None if base is None else max(1, math.floor(base * ratio))
            return dataclasses.replace(decision, sample_size=sample_size, suites=self._scaled(decision.suites, ratio))

        lo, best = 0.0, None
        hi = 1.0
        for _ in range(40):
            mid = 0.5 * (lo + hi)
            shrunk = at(mid)
            units, items = self._planned(shrunk)
            if units <= afford:
                lo, best = mid, (shrunk, items)
            else:
                hi = mid
        if best is None or best[1] < least:
            return None
        shrunk, fit = best
        return dataclasses.replace(shrunk, reason=f"{decision.reason} (budget: {fit} of {wanted} items)")

    def on_eval(self, result: EvalResult, ctx: Context) -> None:
        if not result.seconds > 0:  # a failed asynchronous evaluation reports 0 s: it says nothing of the next
            return
        self._last_seconds = float(result.seconds)
        if self._measured is not None:  # cost units; None when no suite's metric came back (a failure): unknown
            items = self._measured(result.metrics)
        else:
            items = result.sample_size or result.items
        if items:
            self._observed = [*self._observed, [float(items), float(result.seconds)]][-_WINDOW:]
            self._fixed_seconds = fixed_cost(self._observed)
            self._seconds_per_sample = (float(result.seconds) - self._fixed_seconds) / items
        if result.sample_size is None and result.items:
            self._whole_items = int(result.items)

    def _unit(self) -> str:
        return "item" if self._planned is None else "cost"

    def state_dict(self) -> dict:
        return {"seconds_per_sample": self._seconds_per_sample, "unit": self._unit(),
                "fixed_seconds": self._fixed_seconds, "observed": [list(o) for o in self._observed],
                "last_seconds": self._last_seconds,
                "whole_items": self._whole_items, "deferred": self.deferred}

    def load_state_dict(self, sd: Mapping) -> None:
        # (a state saved with the other unit, items or cost units, is relearned from the next evaluation)
        same_unit = sd.get("unit", "item") == self._unit()
        def opt(read, v):  # (read as used: a damaged value loaded, then raised in evaluate(); found by fuzzing)
            return None if v is None else read(v)

        self._seconds_per_sample = opt(float, sd.get("seconds_per_sample")) if same_unit else None
        self._fixed_seconds = float(sd.get("fixed_seconds", 0.0)) if same_unit else 0.0
        self._observed = [[float(u), float(t)] for u, t in sd.get("observed", [])] if same_unit else []
        self._last_seconds = opt(float, sd.get("last_seconds"))
        self._whole_items = opt(int, sd.get("whole_items"))
        self.deferred = int(sd.get("deferred", 0))

"""The adaptive evaluator: the base trigger, detectors on the per-step streams, and the policies.

Per training step the user calls ``observe(metrics, global_step)`` (cheap streams: reward, loss, response
length, ...) and ``evaluate(evaluate_fn, epoch, step, global_step)`` (AReaL's signature).  Detectors turn
stream values into alarms; the policies turn alarms, the base schedule and past results into a
:class:`~adaptive_eval.types.Decision` (evaluate or not, how many samples, why), which the resource
scheduler may defer while the machine is short of memory.  This class is the only place that reads the
clock, the resource monitor and torch.distributed, and calls the logger; the policies and detectors are pure.

In a process group the decision is kept rank-consistent like this (see :meth:`AdaptiveEvaluator.evaluate`):

* every step, one all-reduce (max) of a few numbers: "this rank has new alarms", "something may be due
  here", this rank's elapsed time, the asynchronous vote and policy.lookback's agreement values.  When neither flag is set on any rank, every rank returns None:
  that is the only collective of a step with nothing due;
* otherwise the new alarms of every rank are gathered (only if there are any) and fed, in rank order,
  to the policies of every rank, so the policies' state stays identical everywhere; then one all-gather
  carries rank 0's decision and each rank's resource shortage, and every rank follows rank 0's decision.
  Every branch that leads to a collective is taken on values all ranks hold (reduced or gathered).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import logging
import math
import numbers
import os
import sys
import time
import warnings
import weakref
from threading import Lock as _Lock
from threading import get_ident as _get_ident
from collections.abc import Callable, Mapping, Sequence

from omegaconf import OmegaConf

from adaptive_eval.config import ConfigError, as_config
from adaptive_eval.distributed import CollectiveError, DistContext
from adaptive_eval.asynchronous import job_step
from adaptive_eval.evaluators import EvalTimeout, _wants_request, check_step, run_evaluation_outcome
from adaptive_eval.loggers import MetricLogger, NullLogger
from adaptive_eval.policies import Context, PolicySet, make_policies
from adaptive_eval.scheduler import ResourceMonitor, ResourceScheduler
from adaptive_eval.stats import REDUCED_KINDS, as_float, warm_statistics
from adaptive_eval.trigger import EpochStepTimeFreqCtl
from adaptive_eval.types import Decision, EvalRequest, EvalResult, error_text

log = logging.getLogger("adaptive_eval")

_KEPT_PLANS = 16  # the latest scheduled evaluations whose suite plans are kept for a look back

__all__ = ["AdaptiveEvaluator"]

_SCHEDULED = ("trigger:steps", "trigger:time", "trigger:epochs")
_NOT_DUE = Decision(False)
_RESERVED = frozenset(("step", "epoch", "time"))  # a trace's own columns (adaptive_eval.trace.RESERVED)
# The last part of a metric name that is a schedule or a counter, not a stream to watch (see is_schedule).
_SCHEDULE_NAMES = frozenset(("lr", "learning_rate", "epoch", "global_step", "step"))


def is_schedule(name: str) -> bool:
    """A learning rate (``actor/lr``, ``train/learning_rate``, Lightning's ``lr-Adam``, ``lr-Adam/pg1``) or an epoch or
    step counter (``training/epoch``, ``training/global_step``): what the trainer sets, not what the run shows."""
    parts = name.lower().split("/")
    # (any part for a learning rate: LearningRateMonitor's lr-Adam/pg1 of several parameter groups; a review)
    return parts[-1] in _SCHEDULE_NAMES or any(p.startswith(("lr-", "lr_")) for p in parts)


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_DEFERRING = 20  # budget deferrals, and over 3 for each evaluation run, before they are said (_say_budget_deferring)
_FRAMEWORKS = ("lightning", "pytorch_lightning", "lightning_fabric", "transformers", "accelerate", "trl")


def _inside_dirs() -> tuple[str, ...]:
    """This package's folder and those of the frameworks loaded (a warning is attributed to the user's line)."""
    dirs = [_PACKAGE_DIR]
    for name in _FRAMEWORKS:
        file = getattr(sys.modules.get(name), "__file__", None)
        if file:
            dirs.append(os.path.dirname(os.path.abspath(file)) + os.sep)
    return tuple(dirs)


def _group_exists(group) -> bool:
    """Whether a process group of more than one rank is set up, without importing torch when it is not."""
    if group is None and "torch.distributed" not in sys.modules:
        return False  # nobody imported torch.distributed, so nobody initialised a process group
    return DistContext(group).distributed


def _group_gone(job, outcome, failed: str | None = None):
    """close() after the process group was destroyed (``accelerator.end_training()`` first), or after one of its
    collectives failed (``failed``: when and why): an evaluation in flight cannot be combined across the ranks, so it
    fails, saying why (each rank integrated its own shard as the whole result, n halved and the ranks' histories
    apart, without a word; a new user's probe)."""
    from adaptive_eval.evaluators import EvalOutcome

    if failed is not None:
        return EvalOutcome(None, RuntimeError(
            f"the asynchronous evaluation of step {job.step} was in flight when the process group failed ({failed}): "
            "its ranks' shards cannot be combined"), attempts=outcome.attempts)
    return EvalOutcome(None, RuntimeError(
        f"the asynchronous evaluation of step {job.step} was in flight when the process group was destroyed: its "
        "ranks' shards cannot be combined; call close() before destroy_process_group() (accelerate's "
        "end_training())"), attempts=outcome.attempts)


def _no_alarm(value: float, step: int) -> None:
    """The update of a stream no detector watches on finite values (see ``AdaptiveEvaluator._index``)."""
    return None


def _alarm_from_wire(wire):
    from adaptive_eval.detectors import Alarm

    step, detector, stream, direction, location, message = wire
    return Alarm(step=step, detector=detector, stream=stream, direction=direction, location=location,
                 message=message)


# observe() calls from other threads waiting for the training thread's next call: the oldest dropped beyond this,
# and at most _HANDED_PER_CALL applied a call (another thread observing in a tight loop does not stall training)
_HANDED_MAX = 100_000
_HANDED_PER_CALL = 1_000
EXCEPTION_DRAIN_S = 5.0  # leaving the evaluator's `with` block on an exception: the longest wait for what is in flight


def _decision_state(d: Decision) -> dict:
    """A decision as plain values (a synchronous evaluation interrupted by a saved state)."""
    return {**dataclasses.asdict(d), "suites": [list(p) for p in d.suites]}


class _FiniteClock:
    """An injected ``clock=`` whose readings are checked: one that is no finite number (``inf`` once switched the
    time trigger off for the rest of the run, ``None`` raised a TypeError from inside evaluate(); a probe) reads as
    the last good one, said once; one that goes back (a wall clock set back) counts on from the last good one, said
    once (set back 100 s during an evaluation, it took -100 s and the budget read evaluation as free; set back
    below the run's start, the budget and the time trigger never evaluated again; a probe).  (The default
    ``time.monotonic`` is called as it is: the hot path.)"""

    __slots__ = ("fn", "last", "said", "offset", "back_said", "lock", "reading")

    def __init__(self, fn):
        self.fn, self.last, self.said, self.offset, self.back_said = fn, None, False, 0.0, False
        # (an asynchronous evaluation's worker reads it too: a reading taken before the other thread's, stored
        # after it, read as the clock going back; a review)
        self.lock = _Lock()
        self.reading: set = set()  # the threads in a reading, from before they take the lock to after they leave it

    def __call__(self) -> float:
        me = _get_ident()
        if me in self.reading:
            # Re-entered by a signal handler of the thread inside a reading (a preemption handler's state_dict()):
            # waiting for the lock that thread holds hung forever (a review; marked before the lock is taken and
            # unmarked after it is left: a handler between the two hung too); the last reading stands in
            return self.last if self.last is not None else 0.0
        self.reading.add(me)
        try:
            with self.lock:
                return self._read()
        finally:
            self.reading.discard(me)

    def __getstate__(self):  # (a lock does not pickle: an evaluator built with clock= could not be; a review)
        return {name: getattr(self, name) for name in _FiniteClock.__slots__ if name not in ("lock", "reading")}

    def __setstate__(self, state):
        for name, value in state.items():
            setattr(self, name, value)
        self.lock, self.reading = _Lock(), set()

    def _read(self) -> float:
        value = self.fn()
        try:
            if math.isfinite(value):
                now = float(value) + self.offset
                if self.last is not None and now < self.last:
                    if not self.back_said:
                        self.back_said = True
                        log.warning("clock= went back %g s (to %g): the time since the run started counts on from "
                                    "its last reading, so the budget and trigger.freq_secs see no time pass in the "
                                    "jump (said once)", self.last - now, float(value))
                    self.offset += self.last - now
                    now = self.last
                self.last = now
                return now
        except TypeError:
            pass
        if not self.said:
            self.said = True
            log.warning("clock= returned %r, not a finite number of seconds: its last finite reading (%g) is used "
                        "instead (said once)", value, self.last or 0.0)
        return self.last if self.last is not None else 0.0

    def __getattr__(self, name):  # (the clock's own attributes: a FakeClock's advance(), a SimClock's time)
        if name in _FiniteClock.__slots__:
            raise AttributeError(name)
        return getattr(self.fn, name)


class _Reading(dict):
    """A state being loaded that notes the key last read (``where[0]``): a load's error names it."""

    def __init__(self, sd: Mapping, where: list):
        super().__init__(sd)
        self.where = where

    def __getitem__(self, key):
        self.where[0] = key
        return super().__getitem__(key)

    def get(self, key, default=None):
        self.where[0] = key
        return super().get(key, default)


def _interrupted_state(waiting: tuple) -> dict:
    step, decision, lookback = waiting
    return {"step": step, **({"decision": _decision_state(decision)} if decision is not None else {}),
            **({"lookback": list(lookback)} if lookback is not None else {})}


def _decision_from_state(state: Mapping) -> Decision:
    return Decision(**{**state, "suites": tuple(tuple(p) for p in state.get("suites", ()))})


def _alarm_to_wire(alarm) -> tuple:
    return (alarm.step, alarm.detector, alarm.stream, alarm.direction, alarm.location, alarm.message)


_FLOAT_TAG = "__float__"  # a non-finite float in a state_dict: {"__float__": "nan" | "inf" | "-inf"}


def _strict(obj):
    """``obj`` with every NaN and infinity as ``{"__float__": "nan"}`` (or "inf", "-inf"): strict JSON, which
    a checkpoint's JSON file (AReaL's, HF's trainer_state.json) read by any other tool must be."""
    if type(obj) is float:
        return obj if math.isfinite(obj) else {_FLOAT_TAG: repr(obj)}
    if isinstance(obj, Mapping):
        return {k: _strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_strict(v) for v in obj)
    return obj


def _answers(result: EvalResult, suites: Mapping) -> int:
    """The answers an evaluation scored: per suite its metric of the most answers (``suites.result_units`` at one
    unit an answer), without suites the metric of the most answers."""
    from adaptive_eval.suites import answers_of, result_units

    if suites:
        return int(result_units({name: {"cost": 1.0, "item_cost": 0.0} for name in suites}, result.metrics) or 0)
    # (a derived aggregation, weighted_mean or p<q>, counts no answers of its own; a framework adapter's sum, max or
    # min over a rank's items is the metric itself: under DDP its answers read 0, a review)
    return max((answers_of(m) for m in result.metrics.values() if m.aggregate in ("", *REDUCED_KINDS)), default=0)


def _unstrict(obj, path: str = "state_dict"):
    """The inverse of :func:`_strict` (a state without tags, from an older version, is unchanged); a tag that does
    not read as a number is a ``ValueError`` naming where it is."""
    if isinstance(obj, Mapping):
        if len(obj) == 1 and _FLOAT_TAG in obj:
            try:
                return float(obj[_FLOAT_TAG])
            except (TypeError, ValueError):
                raise ValueError(f"{path}: {dict(obj)!r} is not a number") from None
        return {k: _unstrict(v, f"{path}[{k!r}]") for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_unstrict(v, f"{path}[{i}]") for i, v in enumerate(obj))
    return obj


def _with_nonfinite(streams: dict) -> dict:
    """``streams`` with a ``nonfinite`` detector first in every non-empty detector list that has none (``default``,
    each of ``watch``, ``eval``): a NaN or inf is always an alarm.  (A stream given its own list in ``watch``,
    ``[{type: cusum, arl0: 2000}]`` as the README's first preset does, lost the default list's nonfinite, and a
    NaN reward went by without a word; found by a new-user probe.)  An empty list, or ``ignore``, watches nothing."""
    def with_it(specs):
        if not specs or any(isinstance(s, Mapping) and s.get("type") == "nonfinite" for s in specs):
            return specs
        return [{"type": "nonfinite"}, *specs]

    return {**streams, "default": with_it(streams["default"]), "eval": with_it(streams["eval"]),
            "watch": {name: with_it(specs) for name, specs in (streams["watch"] or {}).items()}}


_MANY_STREAMS = 1000  # more metric names than this: said once (they are most likely made per step)


def _backwards(where: str, last: int, step: int) -> str:
    """The message of a step that went backwards: a loop that restarted without a new evaluator, or a resume from
    a checkpoint older than the evaluator state loaded (found by a new-user probe: the advice said to do what
    they had just done)."""
    return (f"global_step went backwards{where} ({last} -> {step}): this evaluator has already seen step {last}.  "
            "To resume a run, load_state_dict() into a new AdaptiveEvaluator the state saved with the checkpoint you "
            f"resume from (a state saved at step {last} belongs to a later checkpoint than step {step})")


class AdaptiveEvaluator:
    """Decides at every training step whether to evaluate, with how many samples, and why.

    Build it with :meth:`from_config`.  ``observe`` and ``evaluate`` run every step and cost a few
    microseconds when nothing happens.  ``evaluate`` runs at most one evaluation per ``global_step``,
    returns its :class:`~adaptive_eval.types.EvalResult` (or None), and never lets an exception from
    ``evaluate_fn`` through unless ``evaluation.on_error`` is ``raise``.  With ``evaluation.timeout_s`` a
    single process runs ``evaluate_fn`` in a daemon thread and gives up on it after that long (``TimeoutError``,
    an evaluation error like any other); see :class:`~adaptive_eval.evaluators.EvalTimeout`.

    **Resources.**  With ``resources.enabled``, an evaluation that is due but finds the machine short
    (``resource_monitor``, default a :class:`~adaptive_eval.scheduler.ResourceMonitor` of this machine) is
    deferred (``resources:deferred (...)``) for at most ``resources.max_deferral_steps`` steps, then runs
    (reason ``resources:forced (<the reason it was due for>)``); with ``resources.alarm_bypass`` one that an
    alarm brought forward (``alarm:...``) or an urgent one runs at once.  The monitor is read only at steps
    where an evaluation is due and does not bypass; in a process group rank 0's decision says whether it does.

    **Process groups.**  Build it after ``init_process_group``, on every rank of ``group`` (default: the
    world), and call ``observe`` and ``evaluate`` on every rank at every step.  Detectors watch each rank's
    own streams; an alarm on any rank counts on all of them, the largest elapsed time of any rank drives
    the time trigger, and every rank takes rank 0's decision (same step, sample size, seed and reason).
    Each rank evaluates its shard (``EvalRequest.indices``); the results are reduced exactly, so every
    rank gets the same :class:`~adaptive_eval.types.EvalResult`.  An exception
    in ``evaluate_fn`` on any rank makes all ranks skip (or all raise, with ``on_error: raise``).  With
    ``distributed.rank_discrepancy_threshold`` a rank whose mean of a metric deviates from the others'
    raises a ``rank_discrepancy`` alarm naming it.  A step with nothing due costs one small all-reduce;
    collectives wait at most ``distributed.timeout_s``.  Only rank 0 writes the TensorBoard log.  In a
    group of one, or without a process group, nothing of this costs anything.

    >>> from adaptive_eval import load_config
    >>> ev = AdaptiveEvaluator.from_config(load_config("areal", ["trigger.freq_steps=3"]))
    >>> [g for g in range(7) if ev.evaluate(lambda: {"acc": 0.5}, 0, g, g)]
    [2, 5]
    """

    # What observe() and a not-due evaluate() read every step lives in slots: CPython (3.11+) keeps an
    # instance's attributes in its compact, fast-to-index layout only up to 30 of them, and an evaluator has
    # more (then every access is a dict lookup).  Everything else stays in the instance dict.
    __slots__ = ("_last_step", "_stride", "_on_finite", "_outputs", "_async_poll", "_last_call_step",
                 "_distributed", "_async", "steps_per_epoch", "trigger", "total_steps", "_alarm_pending",
                 "_eval_at_end", "_owner", "_handed", "__dict__", "__weakref__")

    def __init__(self, cfg=None, *, steps_per_epoch: int | None = None, total_steps: int | None = None,
                 clock: Callable[[], float] | None = None, logger: MetricLogger | None = None, group=None,
                 resource_monitor=None, executor=None, eval_ranks=None, eval_clock=None, _simulated: bool = False):
        self.cfg = as_config(cfg)
        trig = self.cfg.trigger
        if trig.freq_epochs is not None and steps_per_epoch is None:
            raise ValueError("trigger.freq_epochs is set, so AdaptiveEvaluator needs steps_per_epoch")
        if steps_per_epoch is not None and check_step("steps_per_epoch", steps_per_epoch) <= 0:
            raise ValueError(f"steps_per_epoch must be positive, got {steps_per_epoch}")
        self.steps_per_epoch = steps_per_epoch
        self.total_steps = check_step("total_steps", total_steps) if total_steps is not None else None
        if self.total_steps is not None and self.total_steps < 1:  # (0 and -1 were taken: no final evaluation)
            raise ValueError(f"total_steps must be >= 1 (the run's number of steps) or None, got {self.total_steps}")
        self.clock = _FiniteClock(clock) if clock is not None else time.monotonic
        if eval_ranks is not None and getattr(eval_ranks, "is_eval_rank", False):
            # (before the group's own check, whose "not a member of the given process group" said nothing of it)
            raise RuntimeError(f"rank {eval_ranks.rank} is an eval rank (distributed.eval_ranks): it runs "
                               "EvalRanks.serve(...), not an AdaptiveEvaluator")
        if eval_ranks is not None and group is None:
            # The training ranks' group is the only one that fits: without it the evaluator took the whole world,
            # the eval ranks included, and its first collective waited distributed.timeout_s (600 s) for a rank
            # that never calls evaluate(), then raised CollectiveError into the training step (a probe).
            group = eval_ranks.train_group
        self.dist = DistContext.from_config(self.cfg, group)
        # Decided once: a single process pays nothing for the distributed machinery, step after step.
        self._distributed = _group_exists(group)
        self._rank, self._world = self.dist.rank_world() if self._distributed else (0, 1)
        self._now = 0.0  # in a group: the run's elapsed seconds, the same on every rank (max over ranks)
        if logger is None and self.cfg.logging.tensorboard_dir is not None:
            from adaptive_eval.tensorboard import make_logger

            try:
                logger = make_logger(self.cfg.logging.tensorboard_dir, flush_secs=self.cfg.logging.flush_secs,
                                     group=group)
            except OSError as exc:  # an unwritable folder must not stop the training run
                log.error("TensorBoard logging is off: %s", exc)
                logger = None
        self.logger = logger if logger is not None else NullLogger()
        self._logger = _GuardedLogger(self.logger)  # (what the evaluator itself calls: never raises)
        self._logging = not isinstance(self.logger, NullLogger)
        self._log_streams = self._logging and bool(self.cfg.logging.log_streams)
        self._recorder = None  # see record_to()
        self._recorded_epoch = None  # the epoch evaluate() was last told, written with each recorded row
        self._record_errors = 0
        self._listener_errors = 0
        self._renamed: set[str] = set()
        self._outputs = self._log_streams  # anything to write per observed step
        self.trigger = EpochStepTimeFreqCtl(
            freq_epoch=trig.freq_epochs, freq_step=trig.freq_steps, freq_sec=trig.freq_secs,
            initial_epoch_value=trig.eval_before_train,
            # In a group the trigger's time is the group's: every rank then fires at the same step.
            clock=self._group_time if self._distributed else self.clock, sync_time=False,
            independent=trig.independent, steps_per_epoch=steps_per_epoch,
        )
        if resource_monitor is None and self.cfg.resources.enabled:
            resource_monitor = ResourceMonitor()  # built now: its first CPU reading needs a reference point
        elif resource_monitor is not None and not self.cfg.resources.enabled and self._rank == 0:
            # (it was ignored without a word; found by a new user)
            log.warning("a resource_monitor was given, but resources.enabled is false: it is never read; set "
                        "resources.enabled: true for the scheduler to defer evaluations on its readings")
        self.resources = ResourceScheduler(self.cfg.resources, resource_monitor)
        self.resources.says = self._rank == 0  # (its deferrals are the group's: said by one rank, not each; a review)
        self.resources.where = f"rank {self._rank}: " if self._world > 1 else ""  # (which rank's monitor; a probe)
        self._eval_at_end = bool(trig.eval_at_end)
        # With the adaptive interval, a scheduled evaluation due this few steps before the final one (the
        # shortest interval the policy ever takes) is left to it: it would measure nearly the same weights
        # twice.  (A plain trigger keeps AReaL's schedule exactly.)
        iv = self.cfg.policy.interval
        self._final_window = (int(float(iv.min_factor) * trig.freq_steps)
                              if iv.enabled and trig.freq_steps and trig.eval_at_end else 0)
        self._resources_enabled = self.resources.enabled
        self._discrepancy_threshold = self.cfg.distributed.rank_discrepancy_threshold
        plain = OmegaConf.to_container(self.cfg, resolve=True)
        self._evaluation = plain["evaluation"]
        # The statistics of a result need scipy.stats: imported here, once, not inside the first evaluation, whose
        # measured seconds the budget learns the cost of evaluations from (importing it took 1 s there; the first
        # evaluation of examples/hf_trainer.py looked 10x its cost, and the budget held an alarm's evaluation from
        # step 63 to the run's end).  See warm_statistics.
        warm_statistics(self._evaluation["confidence"])
        if self._evaluation["precision"] != "none" and not _simulated:  # (replay's evaluations are numbers)
            # evaluate_fn runs under torch.inference_mode: an asynchronous evaluation's timeout_s counts from its
            # submission, and importing torch in the worker made a process that had not imported it time out
            # its first evaluation (1.7 s against timeout_s 1; found by a new-user probe).  A synchronous one
            # imported it in the training step of its first evaluation, where a Ctrl-C during the import (seconds)
            # left torch half imported: evaluate() then raised, or the process crashed, on the notebook cell's
            # re-run (a probe).  Here, at the set-up, not in a step.
            import torch  # noqa: F401
        self._suites = self._evaluation["suites"]  # {} without eval suites: nothing of them runs
        named = self._evaluation["metric"]
        if named and self._evaluation["higher_is_better"] and self._rank == 0:
            from adaptive_eval.policies._base import looks_lower_is_better

            # (as when it is null and the evaluator picks one: an explicit loss was tracked as higher-is-better, its
            # highest value picked as the best checkpoint, unsaid; found by a probe of the HF adapter)
            if (word := looks_lower_is_better(str(named))) is not None:
                log.warning("evaluation.metric %r reads like a %s, yet evaluation.higher_is_better is true: a rise "
                            "reads as improving, the best checkpoint is its highest; set evaluation.higher_is_better: "
                            "false if lower is better", named, word)
        self._dropped_pass_at_k: set = set()  # (suite, k) said once (see _say_dropped_pass_at_k)
        self._untracked_said = False  # evaluation.metric absent from a result: said once (see _say_untracked)
        self._names_said = False  # metric_kinds/aggregations naming no metric returned (see _say_unmatched_names)
        self._missing_said: set[str] = set()  # due suites with no result back: said once each
        self._closed = False  # close() ran: observe/evaluate after it are said once (_say_closed)
        self._due_in_flight: dict[int, list[str]] = {}  # asynchronous: submission step -> the suites due
        self._lookback_said = False  # checkpoint_saved where lookback cannot run: said once
        self._budget_alarm_said = False  # an alarm's evaluation the budget holds back: said once (_say_held_alarm)
        self._logged_pick = 0  # evaluations the last "picked" text was over (close() twice writes it once)
        self._failures_said: dict = {}  # evaluate_fn failures logged with their traceback (a repeat is one line)
        from adaptive_eval.suites import reported_strata

        self._strata = reported_strata(self._suites)  # suites reported per stratum too (report_strata)
        if self._suites and hasattr(self.logger, "set_groups"):
            self._logger.set_groups(self._suites)  # the dashboard groups the eval charts by suite
        # evaluation.timeout_s: a worker thread per evaluation in a single process; none in a group, where
        # distributed.timeout_s bounds the collectives that wait for a late rank (see EvalTimeout).
        timeout_s = self._evaluation["timeout_s"]
        self._eval_timeout = EvalTimeout(timeout_s) if timeout_s is not None and not self._distributed else None
        self.policies: PolicySet = make_policies(plain["policy"], self._evaluation)
        budget = self.policies.by_name.get("budget")
        if budget is not None and self._suites:
            # With suites an item of one is not an item of another (an AIME problem x 16 answers at 4x the
            # cost against a MATH problem x 1): the budget reckons in the suites' cost units, over the suites
            # the evaluation will cover.
            from functools import partial

            from adaptive_eval.suites import result_units

            budget.cost_model(self._planned_units, partial(result_units, self._suites))
        self._streams = _with_nonfinite(plain["streams"])
        self._ignore = frozenset(self._streams["ignore"])
        self._schedule_said: set[str] = set()  # (schedules and counters given to observe(): each said once)
        self._slow_said = False  # (an evaluation longer than trigger.freq_secs: said once)
        self._listeners: list[Callable[[dict], None]] = []
        # evaluation.asynchronous: the evaluations in flight (adaptive_eval.asynchronous); None: synchronous.
        self._async = None
        if self._evaluation["asynchronous"] or executor is not None or eval_ranks is not None:
            from adaptive_eval.asynchronous import build_async

            self._async = build_async(plain, executor=executor, eval_ranks=eval_ranks, clock=self.clock,
                                      eval_clock=eval_clock, distributed=self._distributed, rank=self._rank,
                                      world=self._world)
        self._async_poll = self._async is not None and not self._async.fixed_latency and not self._distributed
        if (timeout_s := self._evaluation["timeout_s"]) is not None and self._distributed and self._rank == 0 and self._async is None:
            # (documented, yet a new user set it in a group and waited on a slow rank for 8 s against 2 without a word)
            log.warning("evaluation.timeout_s (%g s) does not bound a synchronous evaluation in a process group (no "
                        "thread is left behind there); distributed.timeout_s (%g s) bounds how long the ranks wait "
                        "for a late one, after which evaluate() raises CollectiveError", timeout_s,
                        self.cfg.distributed.timeout_s)
        budget_cfg = self.cfg.policy.budget
        if (self._async is not None and self._async.owner and clock is not None and eval_clock is None
                and budget_cfg.enabled):
            # (two runs of one seed with a fixed latency decided differently: the evaluation's thread read the
            # injected clock while the training loop moved it; an asynchronous probe.  Also at the default
            # fraction 1: evaluations in flight together, timed by a clock the loop moves, sum past the elapsed
            # time, and the budget shrank a sample to 316 of 500 items in one run, 225 in the next; a probe)
            log.warning("asynchronous evaluation times each evaluation with eval_clock, by default the clock= you "
                        "gave, read in the evaluation's own thread while your loop moves it: the eval seconds that "
                        "policy.budget.max_eval_device_fraction (%g) caps then vary from run to run, and so may the "
                        "decisions; pass eval_clock= (a clock your evaluate_fn advances, or one that reads the eval "
                        "device's time) for the same decisions on every run", budget_cfg.max_eval_device_fraction)
        # (an asynchronous evaluator never closed lost the evaluations in flight at exit without a word; found by a
        # new user: said when it is collected or the interpreter exits, unless close() ran)
        # (a weak reference: the jobs hold failed evaluations' tracebacks, whose frames may hold the evaluator's owner,
        # and a strong one from the finalizer's registry kept them all alive; found in review)
        self._pid = os.getpid()
        # The thread that last called evaluate() (the training loop's), until then the one that built it: observe()
        # and checkpoint_saved() from any other (a monitor thread, an asynchronous evaluate_fn) are handed to it,
        # applied at its next observe(), evaluate() or state_dict() (see _hand_over).
        self._owner: int = _get_ident()
        self._handed: collections.deque = collections.deque(maxlen=_HANDED_MAX)
        _EVALUATORS.add(self)  # (close() in a forked child that never used it leaves the parent's alone)
        self._in_fn = False  # a synchronous evaluate_fn is running (an evaluate() from inside it is refused)
        self._budget_deferring_said = False  # the budget deferring far more than it runs: said once
        self.no_metric_hint: str | None = None  # a framework adapter's words for "evaluate_fn returned no metric"
        self._close_lock = _Lock()  # close() from two threads at once: one after the other
        self._closing: int | None = None  # the thread in close() (a signal handler's close() inside it returns)
        self._alarms_at = -1  # the last step controller/alarms was written at (_alarms_point)
        self._unclosed = (weakref.finalize(self, _say_lost_in_flight, weakref.ref(self._async), self._rank,
                                           self._pid) if self._async is not None else None)
        self._reset()
        if self._logging:
            self._logger.log_config(OmegaConf.to_yaml(self.cfg))

    def _reset(self) -> None:
        self._detectors: dict[str, list] = {}
        self._watchers: dict[str, tuple] = {}  # stream -> (updates on a finite value, all updates); see _index
        self._in_nonfinite_run: set[str] = set()  # streams whose last value was NaN/inf
        # observe()'s fast path: stream -> the one call to make on a finite float (for a stream in a run of
        # NaN/inf: the general path, which ends the run); kept in step with _watchers and _in_nonfinite_run by
        # _index and _observe_one.
        self._on_finite: dict[str, Callable] = {}
        self._eval_detectors: dict[str, list] = {}
        self._unsynced: list[tuple] = []  # in a group: this rank's alarms not yet shared, (alarm, step)
        self._divergences = 0
        self._start = self.clock()
        self._now = 0.0
        self._eval_seconds = 0.0
        self._sync_eval_seconds = 0.0  # (the training's own clock stood still for these: see _record)
        self._eval_errors = 0
        self._deferrals = 0
        self._cancelled = 0  # asynchronous evaluations cancelled to make room for an urgent one
        self._alarm_count = 0
        self._alarm_pending = False
        self._last_step: int | None = None
        self._stride = 1  # steps between the latest two observe() calls (Context.stride)
        self._last_eval_step: int | None = None
        self._last_call_step: int | None = None
        self._waiting_said = None  # the step of a timed-out evaluation a due one waits for: said once
        self._gap_said = False  # evaluate() called with steps skipped: said once (replay notes strides itself)
        self._loaded_last: int | None = None  # the last call step of the state last loaded (_say_gap)
        self._evals_run = 0  # evaluations run (failed ones too): the suites' every-m-th schedule counts them
        # Suites whose turn measured nothing (the evaluation failed or was cancelled, or returned none of their
        # metrics): covered by the next evaluation, whatever its turn (a failure at an every-4th suite's turn left it
        # unmeasured for 8 evaluations, the reason reading "skipped, due in 2 evals"; a probe).  name -> None (owed)
        # or the step of the evaluation that retries it (in flight: not asked again meanwhile; a review)
        self._owed_suites: dict[str, int | None] = {}
        # A synchronous evaluation running: (step, its decision, evals_run before it), which a state_dict() taken
        # meanwhile (a preemption's handler) saves as interrupted, and the resumed run's call at that step runs
        # again (it was skipped as a repeat, and every later decision came a step late; a new user's probe).
        self._running: tuple | None = None
        self._looking: tuple | None = None  # a look back running: (step, what it evaluates), as _running
        self._interrupted: tuple | None = None  # loaded: (step, decision or None, look back or None)
        self._taking: int | None = None  # the step whose evaluate() waits for a due asynchronous result
        self._sources_checked = False  # in a group: every rank's seed and suite sizes compared (_follow_sources)
        self._eval_armed: set = set()  # (streams.eval stream, detector index) ever past its warm-up: said at close
        self._item_values: dict[str, dict[int, float]] = {}  # this rank's last per-item means, by metric
        # With eval suites: the plans (items x answers per item, over all ranks) the latest scheduled evaluations
        # asked for, by step: a look back asks for the plan of the evaluation it is set beside (what it returned
        # can be fewer: items whose every answer was NaN)
        self._suite_plans: dict[int, dict[str, list[int]]] = {}
        self.history: list[EvalResult] = []
        self.last_decision = Decision(False)
        self.last_outcome = None  # the EvalOutcome of the last evaluation (per-rank details in a group)
        self._unreturned: EvalResult | None = None  # integrated in observe(), returned by the next evaluate()
        self._track(self._evaluation["metric"])  # (evaluation.metric: null is chosen at the first evaluation)
        self._deferred_error: BaseException | None = None  # on_error: raise, integrated: raised at the step's end
        self._async_down_logged = False
        self._deferring: tuple[int, str] | None = None  # the logged deferral still going on: (first step, key)
        self._deferred_span: list[int] | None = None  # its [first, last] step as controller/deferred charts it
        self._group_failed: str | None = None  # a collective of evaluate() failed (CollectiveError): why
        if self._async is not None:
            self._async.load_state_dict({})

    @classmethod
    def from_config(cls, cfg=None, *, steps_per_epoch: int | None = None, total_steps: int | None = None,
                    clock: Callable[[], float] | None = None, logger: MetricLogger | None = None,
                    group=None, resource_monitor=None, executor=None, eval_ranks=None,
                    eval_clock=None) -> "AdaptiveEvaluator":
        """Build from ``load_config()``'s result, a :class:`~adaptive_eval.Config`, a nested dict, or None
        (the default preset).  ``total_steps`` (optional) lets ``trigger.eval_at_end`` evaluate the last step.

        ``group``: the torch process group whose ranks evaluate together (None: the world, when one is
        initialised).  ``resource_monitor``: anything with ``snapshot() -> ResourceSnapshot`` (tests pass a
        :class:`~adaptive_eval.scheduler.FakeResourceMonitor`); used when ``resources.enabled``.  A
        ``logger`` given here is used as given on every rank; one built from ``logging.tensorboard_dir``
        writes on rank 0 only.

        Asynchronous evaluation (``evaluation.asynchronous``, see :mod:`adaptive_eval.asynchronous`):
        ``executor`` (a ``concurrent.futures.Executor``; default a daemon thread per evaluation) or
        ``eval_ranks`` (an :class:`~adaptive_eval.asynchronous.EvalRanks`, with ``distributed.eval_ranks``)
        runs the evaluations; ``eval_clock`` times them (eval-device seconds; default ``clock``).
        """
        return cls(cfg, steps_per_epoch=steps_per_epoch, total_steps=total_steps, clock=clock, logger=logger,
                   group=group, resource_monitor=resource_monitor, executor=executor, eval_ranks=eval_ranks,
                   eval_clock=eval_clock)

    # ----------------------------------------------------------------------------------------------
    # Streams and detectors

    def _specs_for(self, stream: str) -> list:
        if stream in self._ignore:
            return []
        specs = self._streams["watch"].get(stream)
        if specs is not None:
            return specs
        if is_schedule(stream):
            # (a verl-style stats dict given whole: its learning rate's warm-up and decay and its epoch and step
            # counters alarmed, 19 evaluations brought forward in a quiet run under the default preset, 3.6x its
            # samples; the trace readers and the HF adapter already leave them out; a probe)
            if stream not in self._schedule_said:
                self._schedule_said.add(stream)
                log.info("observe(): %r is bookkeeping (its name reads as a learning rate, an epoch or a step "
                         "count), not a stream the run's health shows in: not watched (list it in streams.watch to "
                         "watch it)", stream)
            return []
        if stream.startswith("critic/rewards/"):
            # verl's critic/rewards/<stat>: its critic/score/<stat> (less the KL penalty, when the reward has one): the
            # two corroborated each other, one moving reward bringing an evaluation forward that one alone would not
            # (policy.alarm.corroborate; a probe), as TRL's rewards/<f>/mean twin did.  By its name alone: decided by
            # which of the two came first, a sorted CSV watched it, and a sorted state did not load (a review).
            twin = f"critic/score/{stream[len('critic/rewards/'):]}"
            if stream not in self._schedule_said:
                self._schedule_said.add(stream)
                log.info("observe(): %r is verl's twin of %r (the same reward, less any KL penalty): not watched, so "
                         "that a reward alarm is not corroborated by its own twin (list it in streams.watch to watch "
                         "it)", stream, twin)
            return []
        return self._streams["default"]

    def _build(self, stream: str, specs) -> list:
        if not specs:
            return []
        from adaptive_eval.detectors import make_detector

        return [make_detector(spec, stream=stream) for spec in specs]

    def _watch(self, stream) -> list:
        if not isinstance(stream, str) or not stream:  # ('' cannot be a trace column: record_to lost every row)
            raise TypeError(f"metric names must be non-empty strings, got {stream!r}")
        dets = self._detectors[stream] = self._build(stream, self._specs_for(stream))
        if len(self._detectors) == _MANY_STREAMS:
            # (a name made per step, "loss_step_123", grew the state, the memory and every evaluation's cost without
            # a word, and a CSV trace by a rewrite of the file per name; a long-run probe)
            log.warning("%d metric names observed so far (the latest %r): each name is a stream with detectors of its "
                        "own, kept in memory and in state_dict(), and a column of a recorded trace (a CSV trace is "
                        "rewritten for each new one): if names are made per step or per item (an id in the name), keep "
                        "them out of observe(); a fixed set this large (per-layer norms) is fine, at about 0.5 us a "
                        "stream a step (said once)", _MANY_STREAMS, stream)
        return self._index(stream, dets)

    def _index(self, stream: str, dets: list) -> tuple:
        """The per-step view of a stream's detectors: the bound ``update`` methods to call on a finite value
        (every detector but ``nonfinite``, which does nothing on one unless it is in a run of NaN/inf, when
        it is called to re-arm) and those to call on a non-finite value (all, in their configured order).

        On a finite value a detector's ``_finite_path()`` is called: ``update`` without the type and
        finiteness checks, which ``observe`` has already made (for the CUSUM of every preset, its unrolled
        one-chart update).  ``observe``'s fast path makes one
        call per finite float (the one detector's, in every preset), except in a run of NaN/inf, where the
        call is :meth:`_observe_one`, which ends the run."""
        from adaptive_eval.detectors._nonfinite import NonFinite

        finite = tuple(d._finite_path() for d in dets if type(d) is not NonFinite)
        entry = self._watchers[stream] = (finite, tuple(d.update for d in dets))
        if stream in self._in_nonfinite_run:
            self._on_finite[stream] = functools.partial(self._observe_one, stream)
        elif len(finite) == 1:
            self._on_finite[stream] = finite[0]
        else:
            self._on_finite[stream] = functools.partial(self._update_each, finite) if finite else _no_alarm
        return entry

    def _update_each(self, updates: tuple, value: float, step: int) -> None:
        """The fast-path call of a stream with several detectors on finite values: each, in order."""
        for update in updates:
            alarm = update(value, step)
            if alarm is not None:
                self._raised(alarm, step)

    def checkpoint_saved(self, global_step: int, ref=None) -> None:
        """Say that a checkpoint of the model at ``global_step`` is kept, so that it can be evaluated later.

        When an evaluation an alarm brought forward shows the tracked metric fell (a collapse, a NaN run), the
        evaluator then evaluates at once the last kept checkpoint from before the alarm (``policy.lookback``),
        calling ``evaluate_fn`` with ``request.checkpoint = ref`` and ``request.step`` = its step: the
        function loads that checkpoint (``ref``: its path or name, a plain value kept in ``state_dict``;
        left out, the step itself) when ``request.checkpoint`` is not None, and evaluates the current model
        otherwise.  (``ref`` once defaulted to None, so a look back at a checkpoint saved without one asked
        ``evaluate_fn`` for the current model: a NaN'd model's 0.48 entered the pick as the checkpoint's; found
        by a new-user probe.)  With eval suites
        the request covers the tracked metric's suite (every suite, for a ``suite_aggregate`` metric) on the
        plan of the evaluation before the checkpoint that measured it (``request.suites``).  Without calls to
        this method nothing of the kind happens.  Only the synchronous path looks back (not
        ``evaluation.asynchronous``: there it is said once and ignored); in a process group call it on every
        rank alike (ranks told of different checkpoints turn the look back off, with a warning).

        A bad ``global_step`` or ``ref`` raises ``TypeError`` (a bug in the caller's code, not data).
        """
        try:  # (a 0-d integer tensor too, as observe() and evaluate() take it)
            if isinstance(global_step, bool):
                raise TypeError
            global_step = global_step.__index__()
        except (TypeError, AttributeError):
            raise TypeError(f"checkpoint_saved: global_step must be an integer, got {global_step!r}") from None
        if _get_ident() != self._owner:  # (an asynchronous checkpointer's: its ref checked here)
            from adaptive_eval.policies._lookback import plain_ref

            self._handed.append(("checkpoint_saved", (global_step, plain_ref(ref))))
            return
        policy = self.policies.by_name.get("lookback")
        if policy is None:
            return
        if self._async is not None:
            if not self._lookback_said and self._rank == 0:
                log.warning("checkpoint_saved: kept checkpoints are not evaluated with evaluation.asynchronous "
                            "(policy.lookback runs in the synchronous path); ignored (said once)")
            self._lookback_said = True
            return
        ref = int(global_step) if ref is None else ref
        over = [s for s, r in policy.kept if r == ref and s != global_step and not isinstance(ref, bool)]
        if over and self._rank == 0 and not self.__dict__.get("_same_ref_said"):
            self._same_ref_said = True
            log.warning("checkpoint_saved(%d, %r): the checkpoint of step %s was kept under the same name, so it no "
                        "longer holds that step's weights: forgotten (a look back at it would evaluate step %d's "
                        "weights as its own).  Keep each step's checkpoint under its own name (checkpoint-<step>) for "
                        "policy.lookback (said once)", global_step, ref, ", ".join(map(str, over)), global_step)
        policy.saved(int(global_step), ref)

    def observe(self, metrics: Mapping[str, float], global_step: int) -> None:
        """Feed this step's cheap metrics (any names).  A NaN or inf is data, never an exception.

        ``global_step`` may repeat (several ``observe`` calls in one step) but not go backwards: that
        raises ``ValueError``.  To resume a run, build a new evaluator and ``load_state_dict``.

        Called from a thread other than the one that calls :meth:`evaluate` (a monitor thread; an asynchronous
        ``evaluate_fn``), the values are checked here and handed to that thread: its next ``observe`` or
        ``evaluate`` applies them, at the later of ``global_step`` and its own step.
        """
        if type(global_step) is not int:
            global_step = check_step("global_step", global_step)
        if _get_ident() != self._owner:
            return self._hand_over(metrics, global_step)
        if self._handed and self._interrupted is None:
            self._apply_handed(global_step)
        if self._closed:
            self._say_closed("observe")
        last = self._last_step
        if last is not None and global_step != last:
            if global_step < last:
                raise ValueError(_backwards("", last, global_step))
            self._stride = global_step - last  # a run logged every k steps: the alarm windows count k steps each
        elif self._interrupted is not None and global_step == self._interrupted[0]:
            # the step whose evaluation a saved state interrupted, run again by the resumed loop: its values are in
            # the state (fed twice, a CUSUM moved: an alarm a step early; a new user's probe)
            return
        self._last_step = global_step
        try:
            items = metrics.items()
        except AttributeError:
            raise TypeError(f"metrics must be a mapping of name to number, got {type(metrics).__name__}") from None
        # The fast path: a finite float on a known stream, nearly every value of every step, makes one call
        # (see _index).  Everything else (a new stream, an int or numpy scalar, NaN/inf) goes through
        # _observe_one, which makes the same updates.
        on_finite = self._on_finite
        bad = None  # (entries refused, (name, error): the others are applied, written and recorded, then it raises)
        for name, value in items:
            try:
                update = on_finite[name]
            except KeyError:  # a new stream
                try:
                    self._observe_one(name, value, global_step)
                except TypeError as exc:
                    bad = [*(bad or ()), (name, exc)]
                continue
            if type(value) is float and value - value == 0.0:  # finite (NaN - NaN and inf - inf are NaN)
                alarm = update(value, global_step)
                if alarm is not None:
                    self._raised(alarm, global_step)
            else:
                try:
                    self._observe_one(name, value, global_step)
                except TypeError as exc:
                    bad = [*(bad or ()), (name, exc)]
        if self._outputs:
            if bad is None:
                self._write_streams(metrics, global_step)
            else:
                refused = {n for n, _ in bad}
                self._write_streams({k: v for k, v in items if k not in refused}, global_step)
        if self._async_poll and self._async.jobs and self._async.ready(global_step):
            # (an evaluation's error, on_error: raise, is raised by this step's evaluate() once the step has counted)
            self._unreturned = self._integrate(self._async.take(global_step), global_step) or self._unreturned
        if bad is not None:
            # (the values before it reached the detectors, the rest neither them nor the trace: a replay of the trace
            # could not find the alarm they raised; a long-run probe)
            raise bad[0][1]

    def _hand_over(self, metrics: Mapping, global_step: int) -> None:
        """observe() from another thread: its values, checked and read as floats in the caller's thread (a bad one
        raises there, not in the training step), wait for the owner's next call.  Neither observe() nor the
        detectors are thread-safe: a monitor thread's observe() beside the training loop's made a state_dict()
        raise "dictionary changed size", and record_to() write steps out of order (a new user's probe)."""
        try:
            items = metrics.items()
        except AttributeError:
            raise TypeError(f"metrics must be a mapping of name to number, got {type(metrics).__name__}") from None
        values = {k: v if type(v) is float else as_float(k, v) for k, v in items}
        if len(self._handed) == _HANDED_MAX and not self.__dict__.get("_handed_full_said"):
            self._handed_full_said = True
            log.warning("observe() from another thread: %d calls wait for the training thread's next observe() or "
                        "evaluate(), which applies at most %d a call; the oldest are dropped (said once)",
                        _HANDED_MAX, _HANDED_PER_CALL)
        self._handed.append(("observe", (values, global_step)))

    def _apply_handed(self, step: int) -> None:
        """Apply, in the owner's thread and in the order they came, the calls handed over by other threads, at
        the later of their step and the last one seen, never past ``step`` (the owner's call's).  Not while a
        loaded state's interrupted evaluation waits to run again: in the run that went on they came after it."""
        if self.__dict__.get("_applying"):
            return  # (a handed call's own observe(): the rest come after it, in order)
        self._applying = True
        try:
            for _ in range(min(len(self._handed), _HANDED_PER_CALL)):
                method, (first, second) = self._handed.popleft()
                if method == "observe":  # (an asynchronous evaluate_fn's step is in the past; a monitor's may be
                    # ahead of the loop's, whose next observe() then went "backwards")
                    second = min(second if self._last_step is None else max(second, self._last_step), step)
                try:
                    (self.observe if method == "observe" else self.checkpoint_saved)(first, second)
                except Exception:  # noqa: BLE001 - another thread's call: never raised into the training step
                    if not self.__dict__.get("_handed_said"):
                        self._handed_said = True
                        log.warning("%s() from another thread, applied in the training thread, failed; it is "
                                    "dropped (said once)", method, exc_info=True)
        finally:
            self._applying = False

    def watches(self, name: str) -> bool:
        """Whether ``name`` is a stream :meth:`observe` has had (or a loaded state had): an adapter reads a value
        the framework logs as None on such a stream as NaN, not as nothing."""
        return name in self._detectors

    def _observe_one(self, name, value, global_step: int) -> None:
        """One metric of :meth:`observe`, by the general path (any value; any stream, new ones included)."""
        if type(value) is not float:
            value = as_float(name, value)  # (first: a name whose value is refused is no stream)
        entry = self._watchers.get(name)
        if entry is None:
            entry = self._watch(name)
        if value - value == 0.0:  # finite (NaN - NaN and inf - inf are NaN)
            updates = entry[0]
            if name in self._in_nonfinite_run:  # the run ends: every detector sees it (nonfinite re-arms)
                self._in_nonfinite_run.discard(name)
                updates = entry[1]
                self._index(name, self._detectors[name])  # the fast path again
        else:
            if name not in self._in_nonfinite_run:
                self._in_nonfinite_run.add(name)
                self._index(name, self._detectors[name])  # a finite value next ends the run here
            updates = entry[1]
        for update in updates:
            alarm = update(value, global_step)
            if alarm is not None:
                self._raised(alarm, global_step)

    def _raised(self, alarm, global_step: int) -> None:
        if self._distributed:  # shared with the other ranks at the next evaluate()
            self._unsynced.append((alarm, global_step))
        else:
            self._on_alarm(alarm, global_step)

    def _write_streams(self, metrics: Mapping, step: int) -> None:
        values = {k: as_float(k, v) for k, v in metrics.items()}
        if self._log_streams:
            self._logger.log(step, {f"streams/{k}": v for k, v in values.items()})
        if self._recorder is not None:
            self._record(step, values)

    def _record(self, step: int, values: dict) -> None:
        """Append to the trace of :meth:`record_to`; a failure is logged, never raised into the training step."""
        if not _RESERVED.isdisjoint(values):
            # 'step', 'epoch' and 'time' are the trace's own columns: such a metric is recorded as 'epoch_'.
            for name in _RESERVED.intersection(values):
                if name not in self._renamed:
                    self._renamed.add(name)
                    log.warning("metric %r is recorded in the trace as %r: 'step', 'epoch' and 'time' are the "
                                "trace's own columns", name, f"{name}_")
            values = {(f"{k}_" if k in _RESERVED else k): v for k, v in values.items()}
        try:
            # The time column is the training's: the seconds this evaluator's own synchronous evaluations took are
            # left out, since replay simulates each evaluation's seconds on top of it (recorded with them, a replay
            # counted each twice, and its budget sized evaluations smaller than the live run's; a new-user probe).
            self._recorder.record(step, values, epoch=self._recorded_epoch,
                                  time=self.clock() - self._start - self._sync_eval_seconds)
        except Exception as exc:  # noqa: BLE001 - recording must never stop training
            self._record_errors += 1
            if self._record_errors == 1:
                log.error("recording the trace failed at step %d (%s: %s); training goes on, later failures "
                          "are counted in summary()['record_errors']", step, type(exc).__name__, exc)

    def record_to(self, path, *, fsync: bool = False):
        """Record what this evaluator observes and measures as a replayable trace (CSV or JSONL by suffix).

        Each ``observe`` appends the step's metrics; each evaluation appends ``eval/<metric>`` (the measured
        mean) and, for metrics that are not proportions, ``eval/<metric>:std``, so that ``adaptive-eval
        replay`` can re-run the run under another policy.  Every record is one appended line, written
        before the call returns (crash-safe; ``fsync`` for power loss too).  Closed by :meth:`close`.  The
        ``time`` column is the training's seconds since the start: the seconds of this evaluator's synchronous
        evaluations are left out, as replay simulates each evaluation's own.  In a process group rank 0 records (call
        it on every rank alike, as everything else; the others return None): every rank writing one file
        interleaved their rows into a trace no reader took (a new user's probe).
        """
        from adaptive_eval.trace import TraceRecorder

        if self._distributed and self._rank != 0:
            return None
        if self._recorder is not None:
            self._recorder.close()
        self._recorder = TraceRecorder(path, fsync=fsync)
        self._recorded_epoch = None
        self._outputs = True
        if self._record_eval not in self._listeners:  # (once: each record_to() added another, and a trace rotated
            self.add_listener(self._record_eval)       # five times wrote each evaluation five times; a probe)
        return self._recorder

    def _record_eval(self, event: dict) -> None:
        if event["kind"] != "eval" or self._recorder is None or "evaluated_at" in event:
            # (a kept checkpoint's, policy.lookback: its step is past, and a trace only goes forward; replay
            # simulates it from the ground truth recorded at that step)
            return
        values = {}
        for name, m in event["result"].metrics.items():
            values[f"eval/{name}"] = m.mean
            if not m.binary and m.std == m.std:
                values[f"eval/{name}:std"] = m.std
        step = event["step"]
        if "integrated_step" in event:  # asynchronous: recorded where it arrived (a trace only goes forward),
            step = event["integrated_step"]  # with the latency, which replay takes as its latency model
            values["async/latency_steps"] = float(step - event["step"])
        if values:
            self._record(step, values)

    def _group_time(self) -> float:
        return self._now

    def _elapsed(self) -> float:
        """Seconds since the run started: this process's clock, or in a group the group's time."""
        return self._now if self._distributed else self.clock() - self._start

    def _ctx(self, step: int) -> Context:
        return Context(step=step, elapsed=self._elapsed(), eval_seconds=self._eval_seconds,
                       last_eval_step=self._last_eval_step, streams=self._witnesses(), stride=self._stride)

    def _on_alarm(self, alarm, step: int, rank: int | None = None, to_policies: bool = True,
                  repeat: bool = False) -> None:
        """Feed one alarm to the policies (unless ``to_policies`` is False), listeners and logger (in a group: on
        every rank alike; ``rank`` names the rank that saw it, None for alarms every rank saw).  ``repeat``: the
        same alarm an earlier rank raised at the same step (a stream every rank logs alike): the policies get it
        as before, but it is not counted, nor told to listeners and the logger again."""
        alarm_policy = self.policies.by_name.get("alarm")
        absorbed, held = (alarm_policy.absorbed, alarm_policy.held) if alarm_policy is not None else (0, 0)
        if to_policies:
            self.policies.on_alarm(alarm, self._ctx(step))
            self._alarm_pending = self._alarm_pending or self._policy_pending()
            self.trigger.scale = self._scale()
        if repeat:
            return
        self._alarm_count += 1
        event = {"kind": "alarm", "step": alarm.step, "stream": alarm.stream, "detector": alarm.detector,
                 "direction": alarm.direction, "location": alarm.location, "message": alarm.message}
        if rank is not None:
            event["rank"] = rank
        self._emit(event)
        if self._logging:
            where = f"rank {rank}: " if rank is not None and alarm.detector != "rank_discrepancy" else ""
            message = alarm.message or ""
            if message.startswith(f"{alarm.stream}: "):  # (a detector's message names its stream first)
                message = message[len(alarm.stream) + 2:]
            # (never below a step it was written at: an asynchronous result's alarm is at the evaluation's earlier step,
            # and TensorBoard drops the points after a step written out of order; a review)
            self._alarms_point(step)
            self._logger.log(self._alarms_at, {"controller/alarms": float(self._alarm_count)})
            head = " ".join(x for x in (alarm.stream, alarm.detector, alarm.direction) if x)
            why = ""  # (an alarm that brings no evaluation says why: no decision does; found by new users)
            if alarm_policy is not None and alarm_policy.held > held:
                # ("when raised": another stream's alarm at the same step may admit it, and the evaluation then runs;
                # "[held: no evaluation ...]" beside that evaluation misled a probe)
                why = (f" [held when raised: no evaluation unless another stream agrees within "
                       f"policy.alarm.corroborate_steps={alarm_policy.corroborate_steps} (policy.alarm.corroborate="
                       f"{alarm_policy.corroborate}; the decisions say whether one did)"
                       + ("; an earlier one's evaluation showed no change, policy.alarm.habituate"
                          if alarm_policy.quiet(alarm) else "") + "]")
            elif alarm_policy is not None and alarm_policy.absorbed > absorbed:
                why = (f" [no evaluation of its own: within policy.alarm.cooldown_steps="
                       f"{alarm_policy.cooldown_steps} of the last alarm's evaluation]")
            self._logger.text(step, "alarms", f"{where}{head}: {message}".strip() + why)

    def _witnesses(self) -> int:
        """Streams whose level detectors (``Detector.sees_level``) are past their warm-up (``Context.streams``: those
        that could corroborate an alarm; a stream logged every few hundred steps is not one of them for a long while).
        (Not stuck's: counted, it made a stream a witness while its CUSUM warmed up again, and a lone CUSUM alarm of
        another stream then waited for it: 11 of 40 runs lost an evaluation when stuck was added; a review.)"""
        return sum(1 for dets in self._detectors.values() if any(d.sees_level and d.armed for d in dets))

    def _alarms_waiting(self) -> bool:
        alarm_policy = self.policies.by_name.get("alarm")
        return alarm_policy is not None and alarm_policy.pending

    def _say_gap(self, last: int, global_step: int) -> None:
        """evaluate() skipped steps: the step trigger counts calls (AReaL's does), so say what that does to the
        schedule, once (found by a new user: calls every 100 steps at freq_steps 100 evaluated never)."""
        self._gap_said = True
        k = global_step - last
        if k == 2 and last == self._loaded_last:
            # (AReaL's trainers save the state, RecoverHandler.dump, before the step's evaluate() call and resume at
            # the step after: "call evaluate() at every training step" blamed a loop that does; a new user's probe)
            # (or a loop that calls evaluate() every 2 steps, resumed: it was told to save after evaluate(), which it
            # did, and never that its schedule doubles; a review.  Which of the two is known only later: both said)
            freq = self.trigger.freq_step
            log.warning("resumed at global_step %d from a state saved after step %d's evaluate() call: the call of "
                        "step %d, and any evaluation it made, are not in it (AReaL's RecoverHandler saves the state "
                        "before the step's evaluate()), so the schedule goes on from step %d's, as AReaL's own "
                        "Evaluator's does; save the state after evaluate() for a resumed run that decides as the "
                        "uninterrupted one.  If this loop calls evaluate() every 2 steps instead: %scall it at every "
                        "training step (said once)", global_step, last, last + 1, last,
                        f"trigger.freq_steps ({freq}) counts calls, so an evaluation is due every {2 * freq} steps; "
                        if freq else "")
            return
        freq = self.trigger.freq_step
        then = (f"trigger.freq_steps ({freq}) counts evaluate() calls, as AReaL's Evaluator does, so with a call "
                f"every {k} steps an evaluation is due every {freq * k} steps; " if freq else "")
        log.warning("evaluate() was called at global_step %d after %d (%d steps skipped): %scall evaluate() at "
                    "every training step (with nothing due it costs microseconds) (said once)",
                    global_step, last, k - 1, then)

    def _policy_pending(self) -> bool:
        """A policy wants an evaluation before the trigger is due: an alarm, or a candidate best to re-measure."""
        alarm_policy = self.policies.by_name.get("alarm")
        peak = self.policies.by_name.get("peak")
        return (alarm_policy is not None and alarm_policy.pending) or (peak is not None and peak.pending)

    # ----------------------------------------------------------------------------------------------
    # Deciding and evaluating

    _fn_checked = False  # evaluate()'s evaluate_fn checked once, at the first call (not at the first due step)

    def _check_fn(self, evaluate_fn) -> None:
        """At the first evaluate() call: with eval ranks, a plain ``evaluate_fn`` cannot be sent to them; refused
        here, at the run's first step, not at the first due one (after 49 steps with freq_steps 50, hours into a
        run with freq_secs 3600; a probe)."""
        needs = getattr(self._async, "needs_snapshot", None) if self._async is not None else None
        if needs is not None:
            from adaptive_eval.asynchronous import SnapshotEval

            if not isinstance(evaluate_fn, SnapshotEval):
                raise ValueError(needs)
        self._fn_checked = True

    def evaluate(self, evaluate_fn: Callable, epoch: int, step: int, global_step: int) -> EvalResult | None:
        """Evaluate if due at this step (AReaL's signature; ``step`` is the step within the epoch).

        In a process group every rank must call this at every step (it is a collective): see the class
        docstring.  All ranks then return the same result (or None) at the same steps.  A repeated
        ``global_step`` returns None; one below the previous call's raises ``ValueError``.
        """
        if type(global_step) is not int:
            global_step = check_step("global_step", global_step)
        if type(step) is not int:
            step = check_step("step", step)
        if type(epoch) is not int:
            epoch = check_step("epoch", epoch)
        if self._in_fn or (self._async is not None and job_step(self._async) is not None):
            # (a nested evaluation ran, the history came out of order, and the loop's own call was a no-op; a probe)
            raise RuntimeError(f"evaluate() called from inside evaluate_fn (at global_step {global_step}): the "
                               "evaluation it runs in is not done; call evaluate() from the training loop only")
        self._owner = _get_ident()
        if self._interrupted is not None and global_step != self._interrupted[0]:
            # (resumed past the interrupted step: not run again; its alarm is still pending)
            self._interrupted = None
        if self._handed and self._interrupted is None:
            self._apply_handed(global_step)
        if self._closed:
            self._say_closed("evaluate")
        if not self._fn_checked:
            self._check_fn(evaluate_fn)
        last = self._last_call_step
        if last is not None and global_step <= last:
            if global_step == last:  # called again in the same step: counted once
                if self._interrupted is not None and self._interrupted[0] == global_step:
                    _, decision, wanted = self._interrupted  # (unless its evaluation was interrupted by a saved
                    self._interrupted = None  # state: then it runs, the rest as it went on)
                    if decision is not None:
                        out = self._run(evaluate_fn, decision, epoch, global_step)
                        if self._async is None:
                            return out
                        out, self._unreturned = self._unreturned, None  # (what this step integrated before)
                        return out
                    self._look_back_at(evaluate_fn, wanted, epoch, global_step)
                    # (the step's own result, as the uninterrupted call returned it after its look back: the loop
                    # got None and never received it; found by a resume fuzzer)
                    return next((r for r in reversed(self.history) if r.step == global_step
                                 and r.evaluated_at is None), None)
                return None
            # else a step could be evaluated twice (5, 3, 5)
            raise ValueError(_backwards(" in evaluate()", last, global_step))
        if last is not None and global_step > last + 1 and not self._gap_said:
            self._say_gap(last, global_step)
        if self._recorder is not None and epoch != self._recorded_epoch:
            # The trace's epoch column: each row carries the epoch of the last call, and a row here corrects this
            # step's where it changed (observe() comes first, and knows no epoch); it was always empty, and replay
            # refused a freq_epochs schedule on a recorded run (a new user's probe)
            self._recorded_epoch = epoch
            self._record(global_step, {})
        if self._distributed:
            self._last_call_step = global_step
            if self._group_failed is not None:
                return None  # (no collective: the ranks are out of step since the failure)
            try:
                out = self._evaluate_in_group(evaluate_fn, epoch, step, global_step)
            except BaseException as exc:
                self._deferred_error = None  # (the step's own exception goes up; the evaluation's error was logged)
                if not isinstance(exc, CollectiveError):
                    raise
                # Raised, as documented.  A loop that catches it and goes on would pair this rank's next
                # collectives with different ones of the others (wrong results, a hang at exit): no more.
                self._group_failed = f"step {global_step}: {exc}"
                log.error("the process group failed at step %d (%s): raised into the training step; if it is caught "
                          "and training goes on, no more evaluations on rank %d of this run (its collectives would no "
                          "longer match the other ranks'); resume from a checkpoint to evaluate again", global_step,
                          exc, self._rank)
                raise
            if self._deferred_error is not None:  # (on_error: raise; every rank alike, once the step is done)
                raised, self._deferred_error = self._deferred_error, None
                raise raised
            return out
        # A single process.  Asynchronously, what finished is integrated first and returned; what is decided
        # at this step is submitted.  (The not-due path, taken nearly every step, calls nothing but the trigger.)
        got = raised = None
        if self._async is not None:
            self._interrupted = None  # (a state saved in take() below: this is the call it makes again)
            got = self._unreturned
            if self._async.jobs and self._async.ready(global_step):
                # This step's call counts once the due results are in: a state_dict() taken while take() waited
                # for one (a preemption's handler) is that of the step before, whose resumed run makes this call
                # again (it said "called again in the same step" and skipped it: every later decision came a
                # step late).  It holds this step as interrupted, so that the step's observe() run again is a repeat,
                # as after a synchronous evaluation interrupted (fed twice: a CUSUM alarm a step early; a fuzzer).
                self._taking = global_step
                open_before = not self._closed
                try:
                    pairs = self._async.take(global_step)
                finally:
                    self._taking = None
                if open_before and self._closed:
                    # close() in a signal handler while take() waited (a graceful shutdown) drained and integrated
                    # every evaluation in flight, the one waited for among them: integrated again, history held it
                    # twice (a review)
                    pairs = []
                self._last_call_step = global_step
                got = self._integrate(pairs, global_step) or got
            self._unreturned = None
            raised, self._deferred_error = self._deferred_error, None  # (integrated here or in observe())
        try:  # (free in the not-due path)
            self._last_call_step = global_step
            trigger = self.trigger
            since = trigger._steps_since + 1
            if since < trigger._quiet_below:
                # A step trigger alone that is not due at this step (nearly every step): what advance() does
                # then, inlined, a call less (see EpochStepTimeFreqCtl._set_quiet_below).
                trigger._steps_since = since
                reason = None
            else:
                spe = self.steps_per_epoch
                reason = trigger.advance(1 if spe is not None and step == spe - 1 else 0, 1)
            final = False
            if (total := self.total_steps) is not None and global_step >= total - 1:
                if global_step == total - 1:
                    final = self._eval_at_end
                else:
                    self._say_past_end(global_step)
            if reason is not None and self._final_window and self._near_final(reason, global_step):
                reason = None  # (still due: the final step takes it)
            if reason is None:
                if not self._alarm_pending:
                    if not final:
                        return got
                    reason = "trigger:final"
                elif final and not self._alarms_waiting():
                    reason = "trigger:final"  # a candidate best re-measured at the last step is the final eval
            elif final and reason in _SCHEDULED:
                reason = "trigger:final"  # (one due at the last step, or left to it, is the final one: every suite)
            elif reason in _SCHEDULED and self.trigger.scale != 1.0:
                reason = "interval:tightened" if self.trigger.scale < 1.0 else "interval:relaxed"
            out = self._decide_and_run(evaluate_fn, reason, epoch, global_step, final)  # (async: submits, None)
            return out if self._async is None else got
        except BaseException:
            raised = None  # (the step's own exception, a Ctrl-C, goes up as it is; the evaluation's error was logged)
            if got is not None and self._async is not None:
                self._unreturned = got  # (integrated at this step: returned by the call that runs it again; a review)
            raise
        finally:
            if raised is not None:
                # An evaluation's own error (on_error: raise) is raised once this step has counted and decided: the
                # schedule went on a step late after it, and one integrated at the last step lost the final
                # evaluation (an asynchronous probe).  A result integrated with it is returned by the next call.
                if got is not None:
                    self._unreturned = got
                raise raised

    def _say_past_end(self, global_step: int) -> None:
        """Say once that steps go past ``total_steps - 1`` (a loop counting from 1, or one that runs longer than it
        said): the final evaluation went to step ``total_steps - 1``, and the last weights were never evaluated
        (found by a new user's probe; nothing said it)."""
        if self.__dict__.get("_past_end_said") or self._rank != 0 or not self._eval_at_end:
            return  # (without trigger.eval_at_end no final evaluation was missed)
        self._past_end_said = True
        log.warning("evaluate() at step %d, past total_steps - 1 = %d (steps count from 0: total_steps=%d is steps "
                    "0-%d): the final evaluation (trigger:final) was due at step %d, not at the last step of this "
                    "run.  For a loop counting from 1, pass total_steps=%d; for one that ends elsewhere, call "
                    "after_train(evaluate_fn, last_step) (said once)", global_step, self.total_steps - 1,
                    self.total_steps, self.total_steps - 1, self.total_steps - 1, self.total_steps + 1)

    def _say_steps_differ(self, global_step: int, low: int, high: int) -> None:
        """Say once, on every rank, that the ranks called ``evaluate`` with different ``global_step`` values."""
        if self.__dict__.get("_steps_differ_said"):
            return
        self._steps_differ_said = True
        log.warning("rank %d: the ranks called evaluate() with different global_step values at the same call (%d to "
                    "%d; this rank's %d): every rank must pass the same step at every call (a loop counting from 1 "
                    "on one rank, or a skipped call), or their evaluations are stored under different steps and "
                    "their best checkpoints differ (said once)", self._rank, low, high, global_step)

    def _scale(self) -> float:
        """The policies' multiplier of the base interval, within ``policy.interval.max_run_fraction`` of the run
        (in evaluate() calls: with streams logged every k steps, a call is k steps), never below 1."""
        interval = self.policies.by_name.get("interval")
        fraction = interval.max_run_fraction if interval is not None else None
        freq = self.trigger.freq_step
        if fraction is None or not self.total_steps or not freq:
            return self.policies.scale()
        # (a 300-step run relaxed to 110-step intervals had 3 evaluations)
        most = max(fraction * self.total_steps / (freq * self._stride), 1.0)
        interval.hold_within(most)
        return min(self.policies.scale(), most)

    def _near_final(self, reason: str, global_step: int) -> bool:
        """A scheduled ``reason`` within ``policy.interval.min_factor x trigger.freq_steps`` calls before the
        final evaluation (``trigger.eval_at_end`` with a known ``total_steps``): left to that one."""
        if reason not in _SCHEDULED or self.total_steps is None:
            return False
        # (the trigger counts evaluate() calls: with streams logged every k steps, the window is k steps a call)
        return 0 < self.total_steps - 1 - global_step <= self._final_window * self._stride

    def _evaluate_in_group(self, evaluate_fn: Callable, epoch: int, step: int, global_step: int) -> EvalResult | None:
        """``evaluate`` in a process group: every branch before a collective is on values all ranks hold."""
        spe = self.steps_per_epoch
        # This rank's own view first: its elapsed time (never behind the group's) and whether anything is due.
        self._now = max(self._now, self.clock() - self._start)
        reason = self.trigger.advance(1 if spe is not None and step == spe - 1 else 0, 1)
        final = self.total_steps is not None and global_step == self.total_steps - 1 and self._eval_at_end
        if self.total_steps is not None and global_step > self.total_steps - 1:
            self._say_past_end(global_step)
        mine = self._unsynced
        maybe_due = reason is not None or self._alarm_pending or final
        ready = self._async is not None and self._async.ready(global_step)
        # Sharded asynchronous evaluation integrates once every rank has its shard: the vote is "not yet".
        sharded = self._async is not None and self._async.sharded and bool(self._async.jobs)
        vote = (not ready) if sharded else ready
        # The one collective of a step with nothing due (it also carries what each rank was told of its kept
        # checkpoints and whether it can load one: policy.lookback, see _lookback_votes).
        # (and the step each rank was given: ranks one step apart stored the same evaluations under different steps
        # and picked different bests, said 30 steps later if ever; found by a probe)
        # (its length is the same whatever the config: a rank whose evaluation.asynchronous alone differed sent a
        # shorter one, and gloo aborted its process, "collective mismatch"; a probe.  The mode rides it, compared.)
        mode = 1.0 if self._async is not None else 0.0
        new_alarms, due, self._now, vote, top, bottom, on, off, *lookback = self.dist.all_reduce_max(
            [1.0 if mine else 0.0, 1.0 if maybe_due else 0.0, self._now, 1.0 if vote else 0.0,
             float(global_step), -float(global_step), mode, -mode, *self._lookback_votes(evaluate_fn)])
        if on != -off:
            # (no collective after it, close() included: the asynchronous rank's drain raised a CollectiveError there,
            # which hid this error in a `finally: close()`; a review)
            self._group_failed = f"step {global_step}: evaluation.asynchronous differs between the ranks"
            raise ConfigError([f"evaluation.asynchronous differs between the ranks of the group (it is "
                               f"{'true' if mode else 'false'} on rank {self._rank} and {'false' if mode else 'true'} "
                               "on another): give every rank the same configuration"])
        if top != -bottom:
            self._say_steps_differ(global_step, int(-bottom), int(top))
        self._lookback_agreed(lookback, global_step)
        got = None
        if (vote < 0.5) if sharded else (vote >= 0.5):  # identical on every rank (the records are), so is what
            # it changes: the trigger, the pending alarms
            got = self._integrate_in_group(global_step)
            due = max(due, 1.0 if self.trigger.due() is not None or self._alarm_pending else 0.0)
        if new_alarms < 0.5 and due < 0.5:
            return got
        if new_alarms >= 0.5:
            # Every rank feeds every rank's new alarms, in rank order, to its policies: their state stays equal.
            self._unsynced = []
            per_rank = self.dist.gather_objects([(_alarm_to_wire(a), s) for a, s in mine])
            # One alarm several ranks raised alike (a reward all-reduced before it is logged) is counted once, named
            # by its first rank, or by none when every rank raised it.
            raised_by: dict = {}
            for r, alarms in enumerate(per_rank):
                for wire, s in alarms:
                    raised_by.setdefault((tuple(wire), s), []).append(r)
            seen = set()
            for r, alarms in enumerate(per_rank):
                for wire, s in alarms:
                    key = (tuple(wire), s)
                    everyone = len(raised_by[key]) == len(per_rank)
                    self._on_alarm(_alarm_from_wire(wire), s, rank=None if everyone else r, repeat=key in seen)
                    seen.add(key)
        reason = self.trigger.due()  # again, with the group's time and the alarms of every rank
        if reason is not None and self._final_window and self._near_final(reason, global_step):
            reason = None  # (still due: the final step takes it; alike on ranks that observe at the same steps)
        if reason is None:
            if final and not (self._alarm_pending and self._alarms_waiting()):
                reason = "trigger:final"
        elif final and reason in _SCHEDULED:
            reason = "trigger:final"  # (one due at the last step, or left to it, is the final one: every suite)
        elif reason in _SCHEDULED and self.trigger.scale != 1.0:
            reason = "interval:tightened" if self.trigger.scale < 1.0 else "interval:relaxed"
        decision = (self.decide(reason, global_step, urgent=final) if reason is not None or self._alarm_pending
                    else _NOT_DUE)
        needs_resources = (self._resources_enabled and decision.evaluate
                           and not self.resources.bypasses(decision.urgent, decision.reason))
        shortage = self.resources.shortage() if needs_resources else None
        # Rank 0's decision and every rank's shortage, in one all-gather; every rank follows rank 0.  And the step
        # of an asynchronous evaluation that timed out and still runs in this rank's thread: no evaluation starts
        # beside it on any rank (in a group none was held up: a rank whose grader hung piled up 8 threads, each
        # holding its snapshot; a probe).
        busy = self._async.still_running() if self._async is not None and not final else None
        # (and what every rank's sample is drawn from: a per-rank evaluation.seed, a "seed = base + rank" habit, drew
        # another sample on each rank, shards overlapping, n=40 of 35 distinct items, unsaid; a probe)
        everyone = self.dist.gather_objects((decision if self._rank == 0 else None, shortage, busy,
                                             self._sample_source() if not self._sources_checked else None))
        if not self._sources_checked:
            self._sources_checked = True
            self._follow_sources(everyone[0][3], [e[3] for e in everyone])
        agreed = everyone[0][0]
        if agreed != decision:
            self._divergences += 1
            if self._divergences == 1:
                log.warning("rank %d decided %s at step %d, rank 0 %s; following rank 0 (were the ranks given "
                            "different steps, configs or states?)", self._rank, decision, global_step, agreed)
        decision = agreed
        if self._resources_enabled and decision.evaluate:
            if self.resources.bypasses(decision.urgent, decision.reason):  # (rank 0's decision: every rank alike)
                verdict = self.resources.decide(global_step, decision.urgent, decision.reason)  # reads no monitor
            else:
                short = "; ".join(f"rank {r}: {e[1]}" for r, e in enumerate(everyone) if e[1]) or None
                verdict = self.resources.decide_with(global_step, short, final)
            decision = self._gate(decision, verdict)
        stuck = [e[2] for e in everyone if e[2] is not None]
        if decision.evaluate and not final and stuck:
            decision = self._wait_for_timed_out(decision, global_step, min(stuck))
        out = self._act(evaluate_fn, decision, reason, epoch, global_step, final)
        return out if out is not None else got

    def _sample_source(self) -> tuple:
        """What each evaluation's items are drawn from, which every rank of a group must share: the seed and each
        suite's size."""
        return int(self._evaluation["seed"]), sorted((str(n), int(x["size"])) for n, x in self._suites.items())

    def _follow_sources(self, zero: tuple, everyone: list) -> None:
        """Rank 0's seed on every rank (said, on the ranks that had another); suites of other sizes are said (their
        items' orders differ: each rank's shard is another sample)."""
        if zero is None:  # (rank 0 checked at an earlier gather, this rank not: a rebuilt evaluator; a review)
            return
        seed, sizes = zero
        if self._evaluation["seed"] != seed:
            log.warning("rank %d: evaluation.seed is %s here and %s on rank 0: every rank draws its shard from one "
                        "sample, so this rank follows rank 0's seed (a seed per rank drew overlapping shards, items "
                        "counted twice); give every rank the same evaluation.seed", self._rank,
                        self._evaluation["seed"], seed)
            self._evaluation = {**self._evaluation, "seed": seed}
        other = [r for r, e in enumerate(everyone)
                 if e is not None and [list(x) for x in e[1]] != [list(x) for x in sizes]]
        if other and self._rank == 0:
            log.error("the eval suites' sizes differ between ranks (rank 0: %s; rank %d: %s): each rank's shard comes "
                      "from another order of the items, so some are evaluated twice and others never; give every rank "
                      "the same evaluation.suites", dict(sizes), other[0], dict(everyone[other[0]][1]))

    def before_train(self, evaluate_fn: Callable, global_step: int = 0) -> EvalResult | None:
        """Evaluate the initial weights before ``global_step`` is trained, if ``trigger.eval_before_train``."""
        global_step = check_step("global_step", global_step)
        if self._distributed:
            self._now = max(self._now, self.clock() - self._start)
            pending, self._now = self.dist.all_reduce_max([1.0 if self.trigger._initial_pending else 0.0,
                                                           self._now])
            if pending < 0.5:
                return None
            if not self._sources_checked:  # (rank 0's seed: it drew each rank's own here, shards overlapping; a review)
                self._sources_checked = True
                everyone = self.dist.gather_objects(self._sample_source())
                self._follow_sources(everyone[0], everyone)
        elif not self.trigger._initial_pending:
            return None
        # Sized by the policies like any evaluation (within policy.sample_size.max), never deferred.
        size = self.decide("before_train", global_step, urgent=True).sample_size
        spe = self.trigger.steps_per_epoch  # (its epoch as after_train's: it was None; a review)
        return self._run(evaluate_fn, Decision(True, size, "before_train"), global_step // spe if spe else None,
                         global_step, resumable=False)

    def after_train(self, evaluate_fn: Callable, global_step: int, *, epoch: int | None = None) -> EvalResult | None:
        """Evaluate the last trained weights (``global_step``) when training stopped before ``total_steps``
        (early stopping, a stop on a condition) or ran without a known total, if ``trigger.eval_at_end`` and
        that step has no evaluation yet; reason ``trigger:final``, urgent (through the budget and the resource
        check), sized by the policies.  None otherwise: a run that reached its last step evaluated it in
        :meth:`evaluate`.  In a process group every rank calls it (the same decision on every rank: the same
        steps).  Asynchronously it submits; :meth:`close` waits for it.  ``epoch``: the evaluation's epoch (by
        default ``global_step // steps_per_epoch`` where that is known: it was None, in the results and the trace,
        after an early stop; a probe)."""
        self._after_train_at = global_step  # (tried, even if it raises: close() gives no advice to call it again)
        try:
            result = self._after_train(evaluate_fn, check_step("global_step", global_step),
                                       None if epoch is None else check_step("epoch", epoch))
        except BaseException:
            self._deferred_error = None  # (its own exception goes up; the evaluation's error was logged)
            raise
        self._raise_deferred()  # (one integrated by the last observe(): nothing else raises it)
        return result

    def _raise_deferred(self) -> None:
        """Raise the error of an asynchronous evaluation integrated under ``on_error: raise`` and not raised yet (by
        the last step's ``observe()``, which no ``evaluate()`` followed: HF's on_log comes after on_step_end); not
        while another exception goes up (a ``finally: close()`` after the training loop's own)."""
        error, self._deferred_error = self._deferred_error, None
        if error is not None and sys.exc_info()[1] is None:
            raise error

    def _after_train(self, evaluate_fn: Callable, global_step: int, epoch: int | None) -> EvalResult | None:
        if not self._eval_at_end or self._last_eval_step == global_step:
            return None
        if self.total_steps is not None and global_step >= self.total_steps - 1 == self._last_call_step:
            return None  # the last step: evaluate() took it (unless evaluate() itself went past it: a loop that
            # ran longer than total_steps said; an after_train(total_steps) after it did not, the same weights; or
            # never reached it: resumed from a state saved before the last step's evaluate(), AReaL's order)
        if self._last_call_step is not None and global_step < self._last_call_step:
            raise ValueError(f"after_train: global_step {global_step} is below the last step evaluate() saw "
                             f"({self._last_call_step})")
        size = self.decide("trigger:final", global_step, urgent=True).sample_size
        if epoch is None and self.trigger.steps_per_epoch:
            epoch = global_step // self.trigger.steps_per_epoch
        return self._run(evaluate_fn, Decision(True, size, "trigger:final", urgent=True), epoch, global_step,
                         resumable=False)

    def decide(self, reason: str | None, global_step: int, *, urgent: bool = False) -> Decision:
        """The policies' decision for this step given the base trigger's ``reason`` (None: not due), without
        running (and without the resource check).  ``urgent`` (the last step, with ``trigger.eval_at_end``)
        lets the evaluation through the budget and the resource check."""
        ctx = self._ctx(global_step)
        decision = Decision(reason is not None, self._evaluation["sample_size"], reason or "", urgent=urgent)
        decision = self.policies.propose(decision, ctx)
        if urgent and not decision.urgent:
            decision = dataclasses.replace(decision, urgent=True)
        return decision

    @staticmethod
    def _gate(decision: Decision, verdict: tuple[bool, str]) -> Decision:
        """Apply the resource scheduler's verdict ``(may run, why)`` to an evaluating decision."""
        ok, why = verdict
        if not ok:
            return Decision(False, decision.sample_size, why, decision.urgent, deferred=decision.reason)
        if why == "resources:forced":  # (the prefix for whoever counts forced evaluations; the cause kept after it)
            return dataclasses.replace(decision, reason=f"{why} ({decision.reason})")
        return decision  # allowed (a bypass keeps the alarm's reason)

    def _decide_and_run(self, evaluate_fn, reason, epoch, global_step, final: bool = False) -> EvalResult | None:
        decision = self.decide(reason, global_step, urgent=final)
        if self._resources_enabled and decision.evaluate:
            decision = self._gate(decision, self.resources.decide(global_step, decision.urgent, decision.reason,
                                                                  final))
        if decision.evaluate and not final:
            if self._async is not None:
                # (asynchronously too: a new user's hung evaluate_fn left 7 threads running beside each other, each
                # holding what it holds, with evaluation.max_in_flight=1; in a group only the owner knows its
                # threads)
                if not self._async.group:
                    decision = self._wait_for_timed_out(decision, global_step, self._async.still_running())
            elif self._eval_timeout is not None and self._evaluation["on_error"] != "raise":
                decision = self._wait_for_timed_out(decision, global_step, self._eval_timeout.still_running)
        return self._act(evaluate_fn, decision, reason, epoch, global_step, final)

    def _wait_for_timed_out(self, decision: Decision, global_step: int, busy: int | None) -> Decision:
        """An evaluation due while one that timed out still runs in its thread waits (deferred, still due) and runs
        at the first step after that thread returns: it was skipped, so an urgent evaluation (a NaN loss) was
        lost, and the next one came with the schedule, 15 steps later or at the run's end (found by a new-user
        probe).  ``on_error: raise`` keeps raising ``EvaluationStillRunning`` (the caller does not wait); the final
        evaluation is not held.  ``busy``: the step of a timed-out evaluation whose thread still runs, else None."""
        if busy is None:
            return decision
        if self._waiting_said != busy and self._rank == 0:
            log.warning("the evaluation due at step %d (%s) waits: the one that timed out at step %d is still "
                        "running (in its thread, or its executor's worker); it runs at the first step after that "
                        "returns (%s)", global_step, decision.reason, busy,
                        "evaluation.timeout_s" if self._evaluation["timeout_s"] is not None else
                        "it failed by the wait for its result, distributed.timeout_s")
        self._waiting_said = busy
        return Decision(False, decision.sample_size, f"waiting:timed-out-eval-still-running (step {busy}; "
                        f"{decision.reason})", decision.urgent, deferred=decision.deferred or decision.reason)

    def _act(self, evaluate_fn, decision: Decision, reason, epoch, global_step, final: bool = False
             ) -> EvalResult | None:
        forced = self._resources_enabled and "resources:forced" in decision.reason  # (forced, perhaps held below)
        if decision.evaluate and self._async is not None:
            decision, victim = self._async.admit(decision, final)  # the same on every rank: same records
            if victim is not None:
                self._cancel(victim, global_step)
            self._check_down(global_step)
            if not decision.evaluate and decision.reason.startswith("async:waiting"):
                said = self._async.held_up(global_step)  # (a warning once per run; decides nothing)
                if said is not None and self._rank == 0:
                    log.warning("%s", said)
        self.last_decision = decision
        if not decision.evaluate:
            if forced:  # (forced, it could not start: a full slot, a timed-out one still running; it starts at the
                self.resources.held()  # first free step, not after a new deferral)
            if decision.reason == "budget:deferred" and (decision.deferred or "").startswith("alarm:"):
                self._say_held_alarm(decision, global_step)
            if decision.reason:
                self._deferrals += 1
                if (decision.reason == "budget:deferred" and not self._budget_deferring_said
                        and self._deferrals >= _DEFERRING and self._deferrals > 3 * self._evals_run):
                    self._say_budget_deferring(global_step)
                self._emit({"kind": "deferred", "step": global_step, "reason": decision.reason})
                if self._logging:
                    # A deferral's first step and (when it ends) its last: a 1 at every step it lasted crowded
                    # the evaluations' 0s out of TensorBoard's 1,000 points a chart keeps (a new user's probe)
                    if self._deferred_span is None:
                        zero = self.__dict__.get("_deferred_zero")
                        if zero is not None and zero < global_step - 1:
                            # (a 0 the step before: from the last evaluation's 0 the chart rose as a slope, 0.5
                            # halfway, where nothing was deferred; the rising edge a step, as the falling one is)
                            self._logger.log(global_step - 1, {"controller/deferred": 0.0})
                        self._logger.log(global_step, {"controller/deferred": 1.0})
                        self._deferred_span = [global_step, global_step]
                    self._deferred_span[1] = global_step
                    # (what was due: the policy's reason, else the trigger's; "(was None)" hid a peak:confirm)
                    was = decision.deferred or reason or "due"
                    # Once per deferral, not at every step it lasts (nor is controller/deferred's 1: see above); a
                    # new line when its cause or what was due changes, not its reading ("accelerator free 1.1 GB"
                    # after 1.0 wrote a line a step and moved "deferred since" on: a probe), and its first step kept
                    key = f"{decision.reason.split(' (', 1)[0]} (was {was})"
                    if self._deferring is None or self._deferring[1] != key:
                        self._deferring = (global_step if self._deferring is None else self._deferring[0], key)
                        self._logger.text(global_step, "decisions", f"deferred: {decision.reason} (was {was})")
            else:
                self._deferring = None  # nothing due any more
                if self._deferred_span is not None:
                    self._end_deferred_span(global_step)
            return None
        if self._resources_enabled:
            self.resources.ran()
        return self._run(evaluate_fn, decision, epoch, global_step)

    def _due_plans(self, decision: Decision) -> tuple[int, dict, list]:
        """The index of the next evaluation, the suites it covers (with why) and each one's plan."""
        from adaptive_eval.suites import SuitePlan, due_suites

        index = self._evals_run
        due = due_suites(self._suites, index, decision.reason,
                         owed={name for name, at in self._owed_suites.items() if at is None})
        sized = {p[0]: SuitePlan(*p) for p in decision.suites}
        plans = []
        for name in due:
            suite = self._suites[name]
            items = suite["sample_size"] or (decision.sample_size if decision.sample_size is not None else suite["size"])
            default = SuitePlan(name, min(items, suite["size"]), suite["samples_per_item"])
            plans.append(sized.get(name, default))
        return index, due, plans

    def _planned_units(self, decision: Decision) -> tuple[float, int]:
        """The budget's estimate of an evaluation with suites: its due suites' plans in cost units, and items."""
        from adaptive_eval.suites import plan_units

        plans = self._due_plans(decision)[2]
        return plan_units(self._suites, plans), sum(int(p[1]) for p in plans)

    def _suite_plan(self, decision: Decision, rank: int | None = None, world: int | None = None
                    ) -> tuple[Decision, dict]:
        """The due suites' requests for this rank (or ``rank`` of ``world``), and the decision with its reason
        saying which and why."""
        from adaptive_eval.suites import suite_requests, suites_reason

        index, due, plans = self._due_plans(decision)
        requests = suite_requests(self._suites, plans, self._evaluation["seed"],
                                  self._rank if rank is None else rank, self._world if world is None else world)
        reason = suites_reason(decision.reason, self._suites, due, index, {p.name: p for p in plans})
        total = sum(r.sample_size for r in requests.values())
        self._say_dropped_pass_at_k(requests)
        return Decision(True, total, reason, decision.urgent, tuple(plans)), requests

    def _say_dropped_pass_at_k(self, requests) -> None:
        """A pass@k that the suite's plans can reach but this evaluation's plan does not (fewer answers per item
        than k) is not reported: say so once per suite and k (it vanished without a word), also for a k above
        the suite's samples_per_item (the first evaluation's answers, not a cap).  A k above the most the
        suite's plans can ask for is another suite's (pass@16 of a 16-answer suite beside a 4-answer one): not
        said; load_config refuses a k that no suite reaches."""
        from adaptive_eval.suites import most_answers_per_item

        sized = "sample_size" in self.policies.by_name
        for name, req in requests.items():
            suite = self._suites[name]
            for k in self._evaluation["pass_at_k"]:
                k = int(k)
                if req.samples_per_item >= k or (name, k) in self._dropped_pass_at_k:
                    continue
                top, why = most_answers_per_item(suite, sized)
                if k > top:
                    continue
                self._dropped_pass_at_k.add((name, k))
                if self._rank == 0:
                    log.warning("suite %r: pass@%d is not reported by an evaluation with fewer than %d answers per "
                                "item (this one's plan: %d; samples_per_item: %d is the first evaluation's count, "
                                "not a cap: the sample-size policy chooses later ones, up to %s); set "
                                "evaluation.suites.%s.min_samples_per_item: %d to keep it (said once)", name, k, k,
                                req.samples_per_item, int(suite["samples_per_item"]), why, name, k)

    def _retrying(self, due: Sequence[str], global_step: int) -> None:
        """An evaluation of ``global_step`` covering ``due`` starts: the owed suites among them are being retried."""
        for name in due:
            if name in self._owed_suites and self._owed_suites[name] is None:
                self._owed_suites[name] = global_step

    def _settle_suites(self, due: Sequence[str], result: EvalResult | None, step: int) -> None:
        """The suites ``due`` in the evaluation of ``step`` that ended (``result`` None: failed or cancelled): those
        it measured are settled, the others owed to the next evaluation (:func:`adaptive_eval.suites.due_suites`),
        once: a retry that measures nothing either leaves the suite to its own turns (a grader that is down for good
        would otherwise have it asked at every evaluation); one whose retry is in flight waits for that."""
        for name in due:
            if int(self._suites[name]["every"]) <= 1:
                continue  # (due at every evaluation anyway)
            at = self._owed_suites.get(name, -1)
            if result is not None and any(key.startswith(f"{name}/") for key in result.metrics) or at == step:
                self._owed_suites.pop(name, None)
            elif at == -1:
                self._owed_suites[name] = None

    def _say_missing_suites(self, result: EvalResult, due: Sequence[str]) -> None:
        """A suite due in this evaluation none of whose metrics came back (an evaluate_fn that forgot it, or
        returned None for it): said once per suite (only the tracked metric's suite was; found by a new user)."""
        missing = [name for name in due if name not in self._missing_said
                   and not any(key.startswith(f"{name}/") for key in result.metrics)]
        if not missing:
            return
        self._missing_said.update(missing)
        if self._rank == 0:
            log.warning("evaluate_fn returned no result for suite%s %s at step %d, though due (request.suites names "
                        "each suite due, with its items): %s missing from this evaluation (said once per suite)",
                        "s" if len(missing) > 1 else "", ", ".join(map(repr, missing)), result.step,
                        "they are" if len(missing) > 1 else "it is")

    def _say_unmatched_names(self, result: EvalResult) -> None:
        """``evaluation.metric_kinds`` or ``evaluation.aggregations`` naming a metric the first evaluation with
        metrics did not return (misspelt, or with suites a bare ``acc`` in ``metric_kinds``, which takes
        ``math/acc``): the setting did nothing, without a word (a new user's probe).  Said once, on rank 0."""
        names = [n for n in result.metrics if "/stratum=" not in n]
        if not names:
            return
        self._names_said = True
        ev = self._evaluation
        said = []
        for key, table, bare in (("metric_kinds", ev["metric_kinds"], False), ("aggregations", ev["aggregations"],
                                                                               True)):
            for name in table or {}:
                if name in names or (bare and any(n.partition("/")[2] == name for n in names if self._suites)):
                    continue
                head = name.partition("/")[0]
                if self._suites and head in self._suites and not any(n.startswith(head + "/") for n in names):
                    continue  # (a suite this evaluation did not measure)
                import difflib

                full = [n for n in names if n.partition("/")[2] == name] if self._suites else []
                close = full[:1] or difflib.get_close_matches(name, names, n=1, cutoff=0.6)
                said.append(f"evaluation.{key}.{name}: no metric {name!r} was returned"
                            + (f" (did you mean {close[0]!r}?)" if close else "")
                            + (" (with suites, name it '<suite>/<metric>')" if full else ""))
        if said and self._rank == 0:
            log.warning("%s; it does nothing (returned: %s; said once)", "; ".join(said),
                        ", ".join(repr(n) for n in names[:20]) + (" ..." if len(names) > 20 else ""))

    def _say_unobserved_streams(self) -> None:
        """``streams.watch`` or ``streams.ignore`` naming a stream never observed in the run (a typo,
        ``train/rewrad``): the stream it meant ran the default detectors, or was watched, without a word (a probe).
        Said at :meth:`close` (at the first evaluation, a stream logged later, HF's grad_norm at its first
        logging step, read as missing; a review), on rank 0, with the nearest name observed.  Never raises."""
        seen = [n for n in self._detectors if not n.startswith("eval/")]
        if not seen or self._rank != 0 or self.__dict__.get("_streams_said"):
            return
        self._streams_said = True
        import difflib

        said = []
        for key, names in (("watch", self._streams["watch"]), ("ignore", self._ignore)):
            for name in sorted(n for n in names if n not in self._detectors):
                close = difflib.get_close_matches(name, seen, n=1, cutoff=0.6)
                said.append(f"streams.{key}: {name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        if said:
            log.warning("%s: no such stream observed in this run (up to step %s; observed: %s): it did nothing",
                        "; ".join(said), self._last_step,
                        ", ".join(repr(n) for n in seen[:20]) + (" ..." if len(seen) > 20 else ""))
        # streams.eval's level detectors see one value per evaluation: a warm-up of 50 outlasted a run of 32
        # evaluations, and they watched nothing, unsaid (a probe)
        from adaptive_eval.detectors._nonfinite import NonFinite

        armed = self._eval_armed
        blind = sorted({f"{type(d).name} on {name}" for name, dets in self._eval_detectors.items()
                        for i, d in enumerate(dets) if type(d) is not NonFinite and not d.armed
                        and (name, i) not in armed})
        if blind:
            n = len(self.history)
            log.warning("streams.eval: %s never passed its warm-up in this run's %d evaluation%s: it watched nothing; "
                        "give it a warmup below the evaluations a run makes (said at close)", ", ".join(blind[:4])
                        + (f" and {len(blind) - 4} more" if len(blind) > 4 else ""), n, "" if n == 1 else "s")

    def _track(self, name: str | None) -> None:
        """The metric the policies track (interval, peak, sample size, look back), the pick and the look back's
        suite: ``evaluation.metric``, or with it null the one :meth:`_choose_tracked` chose (None until then)."""
        self._tracked = name
        for policy in self.policies.policies:
            if hasattr(policy, "metric"):
                policy.metric = name

    def _choose_tracked(self, result: EvalResult) -> None:
        """``evaluation.metric: null``: the metric tracked for the rest of the run, chosen from its first
        evaluation with a metric (:func:`adaptive_eval.policies.tracked_metric`; each evaluation tracked its own
        first metric before, so two suites returned in varying order were compared with each other, and a loss
        returned first was tracked as higher-is-better: new users' probes).  Said at INFO, and as a warning when
        what it chose reads lower-is-better while ``evaluation.higher_is_better`` is true."""
        from adaptive_eval.policies._base import looks_lower_is_better, tracked_metric

        higher = bool(self._evaluation["higher_is_better"])
        name = tracked_metric(result, tuple(self._suites), higher)
        if name is None:
            return
        self._track(name)
        if self._rank != 0:
            return
        word = looks_lower_is_better(name) if higher else None
        if word is not None:
            log.warning("evaluation.metric is null: the policies track %r as higher-is-better, yet it reads like a %s: "
                        "a rise reads as improving, the best checkpoint is its highest; set evaluation.metric: %s and "
                        "evaluation.higher_is_better: false, or evaluation.metric to another metric", name, word, name)
        else:
            log.info("evaluation.metric is null: the policies track %r (%s-is-better) for the rest of the run; set "
                     "evaluation.metric to choose", name, "higher" if higher else "lower")

    def _say_untracked(self, result: EvalResult, due: Sequence[str] | None = None, takes_request: bool = True
                       ) -> None:
        """``evaluation.metric`` absent from an evaluation's results: the policies that track it (interval,
        sample size, peak) learn nothing from it.  Said once (a ``RuntimeWarning``; never raised into the
        training step, even under ``-W error``), unless the evaluation did not cover the metric's suite
        (``every``), or for ``<suite_aggregate>/<m>`` every suite.  An ``evaluate_fn`` that returned a bare
        number (kept as ``raw``, AReaL style: no metric) is said too, whatever ``evaluation.metric`` is (it passed
        unsaid, and nothing was tracked; found by a new-user probe).  ``due``: the suites this evaluation asked for,
        where known (a due suite whose results did not come back is said: an evaluate_fn that forgot it, or
        returned {} or None, passed unsaid); else a suite none of whose metrics came back counts as not due."""
        if self._untracked_said:
            return
        metric = self._tracked  # (evaluation.metric, or the one chosen for it at the first evaluation)
        if not result.metrics and result.raw is not None:
            message = (f"evaluate_fn returned a bare {type(result.raw).__name__} ({result.raw!r}), kept as raw with "
                       "no metric: the policies that track one (interval, sample size, peak) learn nothing from it; "
                       "return a mapping, {'accuracy': per_item_values} (said once)")
        elif not result.metrics and not self._suites and takes_request:  # (AReaL's evaluate_fn() returns None)
            # (None or {}: passed as an evaluation of its whole sample with nothing said; found by a new user)
            message = ("evaluate_fn returned no metric (None or an empty mapping): the evaluation counts, and the "
                       "policies that track a metric (interval, sample size, peak) learn nothing from it; a missing "
                       "`return`?  Return {'accuracy': per_item_values} (said once)")
            if self.no_metric_hint is not None:  # (a framework adapter's evaluate_fn: the user wrote none)
                message = f"{self.no_metric_hint}: {message.partition(': ')[2].partition('; a missing')[0]} (said once)"
        elif metric is None or metric in result.metrics:
            return
        else:
            if self._suites:
                head = metric.partition("/")[0]
                wanted = list(self._suites) if head == self._evaluation["suite_aggregate"] else [head]
                if due is not None:
                    if not all(s in due for s in wanted):
                        return  # a suite not asked for at this evaluation: its metrics are absent by design
                elif not all(any(n.startswith(f"{s}/") for n in result.metrics) for s in wanted):
                    return  # (as far as can be told) a suite skipped at this evaluation
            import difflib

            names = list(result.metrics)
            shown = ", ".join(repr(n) for n in names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20
                                                              else "")
            close = difflib.get_close_matches(metric, names, n=1, cutoff=0.6)
            named = (f"evaluation.metric {metric!r}" if self._evaluation["metric"] is not None else
                     f"the tracked metric {metric!r} (evaluation.metric: null chose it at the first evaluation)")
            message = (f"{named} is not among an evaluation's metrics (returned: "
                       f"{shown or 'none'}){f'; did you mean {close[0]!r}?' if close else ''}: the policies that "
                       "track it (interval, sample size, peak) learn nothing from an evaluation without it (said once)")
        self._untracked_said = True
        if self._rank != 0:
            return
        # Attributed to the caller's line (the training loop's evaluate() call), not to this package's, nor to a
        # framework's that an adapter runs in (it read lightning/pytorch/trainer/call.py:228, and the common filter
        # of Lightning's warnings, module="lightning", hid it; a new user's probe)
        level, frame, inside = 1, sys._getframe(0), _inside_dirs()
        while frame is not None and frame.f_code.co_filename.startswith(inside):
            level, frame = level + 1, frame.f_back
        try:
            if frame is None:
                warnings.warn(message, RuntimeWarning, stacklevel=level)
            else:
                # (without the caller's registry, which shows one text once per line: a second evaluator with the same
                # mistake, called from the same loop line, was told nothing; a new user's probe.  Once per evaluator:
                # _untracked_said)
                warnings.warn_explicit(message, RuntimeWarning, frame.f_code.co_filename, frame.f_lineno,
                                       module=frame.f_globals.get("__name__"), registry=None,
                                       module_globals=frame.f_globals)
        except Warning:  # warnings turned into errors: a message, never an exception in the training step
            log.warning("%s", message)

    def _run(self, evaluate_fn, decision: Decision, epoch, global_step, *, resumable: bool = True
             ) -> EvalResult | None:
        """Run the evaluation ``decision`` asks for.  ``resumable``: a state saved while it runs holds it as
        interrupted (an evaluation evaluate() decided; before_train and after_train run again when called again)."""
        if self._async is not None:
            return self._submit(evaluate_fn, decision, epoch, global_step, resumable=resumable)
        ev = self._evaluation
        suites = {}
        # (and the owed suites before it: a state saved while it runs resumes to decide it alike)
        running = (global_step, decision, self._evals_run, dict(self._owed_suites)) if resumable else None
        due = []
        if self._suites:
            decision, suites = self._suite_plan(decision)
            self.last_decision = decision
            due = [str(p[0]) for p in decision.suites]
            self._retrying(due, global_step)
        self._evals_run += 1
        request = EvalRequest(step=global_step, sample_size=decision.sample_size, seed=ev["seed"],
                              reason=decision.reason, rank=self._rank, world_size=self._world, suites=suites)
        self._running = running
        # (the time trigger's interval counts from the decision, the evaluation's own time in it, as AReaL's: from
        # its end, freq_secs=30 with 8 s evaluations evaluated at steps 5, 11, 17 where AReaL did at 5, 10, 15; a probe)
        decided_at = self.trigger.clock() if self.trigger.freq_sec is not None else None
        try:
            outcome, seconds = self._evaluate_request(evaluate_fn, request, epoch, ev["on_error"])
        except Exception as exc:
            self._running = None
            if ev["on_error"] == "raise":
                # raised as asked, and counted and recorded as the asynchronous path does (a loop that catches it
                # and trains on kept no record of it; found by a new-user probe); the evaluation stays due
                self._eval_errors += 1
                self._emit({"kind": "error", "step": global_step, "reason": decision.reason,
                            "error": error_text(exc)})
                if self._logging:  # (in TensorBoard as under skip, as the asynchronous path writes it; a probe)
                    self._log_eval(global_step, decision, None, exc)
                self._settle_suites(due, None, global_step)  # (its suites owed, as under skip; a review)
            raise
        except BaseException:  # (an interrupt: the state saved by its handler holds the evaluation as interrupted)
            self._running = None
            if running is not None and not self._distributed:
                # A Ctrl-C in evaluate_fn, the loop run again from this step (a notebook cell): evaluate() at this
                # step runs the evaluation, as after a resume from a state saved in it; it came a step late (a probe)
                self._evals_run, self._interrupted = running[2], (global_step, running[1], None)
                self._owed_suites = dict(running[3])
            raise
        self._running = None
        self.last_outcome = outcome
        result, error = outcome.result, outcome.error
        if result is not None:
            result = self._with_aggregate(self._pair(result, outcome.item_values))
        self.trigger.fired(decided_at)
        self._last_eval_step = global_step
        self._eval_seconds += seconds
        self._sync_eval_seconds += seconds
        if (decided_at is not None and not self._slow_said and self._rank == 0 and self.trigger.freq_sec > 0
                and seconds >= self.trigger.freq_sec * self.trigger.scale):
            # (the interval counts from the decision, as AReaL's: an evaluation longer than it leaves the next due at
            # once, every step evaluated, 91% of the time; a review)
            self._slow_said = True
            log.warning("the evaluation at step %d took %.3g s, at least trigger.freq_secs (%g s%s): the time "
                        "trigger's interval counts from the decision, as AReaL's does, so the next evaluation is due "
                        "at once; raise trigger.freq_secs above an evaluation's time (said once)", global_step,
                        seconds, self.trigger.freq_sec * self.trigger.scale,
                        "" if self.trigger.scale == 1.0 else f", scaled x{self.trigger.scale:g}")
        if self._suites:
            self._settle_suites(due, result if error is None else None, global_step)
        if error is not None:
            self._eval_errors += 1
            self._emit({"kind": "error", "step": global_step, "reason": decision.reason,
                        "error": error_text(error)})
            # The policies see an evaluation without metrics: alarms are consumed, nothing is learned (not its
            # cost either: 0 s; its seconds count in the eval time the budget caps).
            outcome_result = EvalResult(step=global_step, sample_size=decision.sample_size,
                                        reason=decision.reason, seconds=0.0, epoch=epoch)
        else:
            outcome_result = result
            self.history.append(result)
            if self._tracked is None:
                self._choose_tracked(result)
            self._say_untracked(result, [str(p[0]) for p in decision.suites] if self._suites else None,
                                takes_request=_wants_request(evaluate_fn))
            if not self._names_said:
                self._say_unmatched_names(result)
            if self._suites:
                self._say_missing_suites(result, [str(p[0]) for p in decision.suites])
            if decision.suites:
                self._suite_plans[global_step] = {str(p[0]): [int(p[1]), int(p[2])] for p in decision.suites}
                for old in sorted(self._suite_plans)[:-_KEPT_PLANS]:
                    del self._suite_plans[old]
        self.policies.on_eval(outcome_result, self._ctx(global_step))
        self._settle_alarms(global_step, error, global_step)
        self._alarm_pending = self._policy_pending()
        if result is not None:
            # After on_eval, so that an alarm on the result is pending for the next evaluation (brought forward,
            # with a wider sample) instead of being consumed by this one.
            for name, summary in result.metrics.items():
                self._update_eval_detectors(name, summary.mean, global_step)
            for found in outcome.discrepancies:  # identical on every rank, like the result
                self._on_alarm(found.to_alarm(), global_step, rank=found.rank)
        self.trigger.scale = self._scale()
        if result is not None:
            self._emit({"kind": "eval", "step": global_step, "result": result})
        if self._logging:
            self._log_eval(global_step, decision, result, error)
        wanted = self._lookback_wanted(evaluate_fn)
        if wanted is not None:
            self._look_back_at(evaluate_fn, self.policies.by_name["lookback"].take(), epoch, global_step)
        return result

    def _settle_alarms(self, step: int, error, global_step: int) -> None:
        """The evaluation of ``step`` is done: when it failed, the alarms it answered are pending again, once (the
        next ``evaluate`` brings an evaluation for them), said in the alarms text."""
        policy = self.policies.by_name.get("alarm")
        if policy is None or not policy.settle(step, error is not None):
            return
        self._alarm_pending = self._policy_pending()
        if self._logging:
            self._logger.text(global_step, "alarms", f"the evaluation of step {step} for the alarm failed: "
                              "its alarm is pending again (once)")

    def _lookback_wanted(self, evaluate_fn):
        """The kept checkpoint the lookback policy wants evaluated, ``(step, ref, items, reason)``, if this
        ``evaluate_fn`` can evaluate one; None otherwise (a want it cannot serve is dropped, said once)."""
        policy = self.policies.by_name.get("lookback")
        if policy is None or self._async is not None:
            return None
        wanted = policy.peek()
        if wanted is None:
            return None
        # evaluate_fn() cannot be told which checkpoint, and an adapter's own evaluation (evaluates_checkpoints =
        # False) runs the model in memory: either would measure the model of now under the checkpoint's step.
        why = ("takes no request" if not _wants_request(evaluate_fn) else "evaluates the model in memory "
               "(evaluates_checkpoints = False: an adapter's own evaluation)"
               if getattr(evaluate_fn, "evaluates_checkpoints", True) is False else None)
        if why is None:
            return wanted
        policy.take()
        if not self._lookback_said and self._rank == 0:
            log.warning("policy.lookback: evaluate_fn %s, so it cannot load a kept checkpoint (request.checkpoint); "
                        "kept checkpoints are not evaluated (said once)", why)
        self._lookback_said = True
        return None

    def _look_back_at(self, evaluate_fn, wanted, epoch, global_step: int) -> None:
        """Evaluate at once the kept checkpoint ``wanted`` (the evaluation just run asked for it) and report it;
        one found gone (``CheckpointUnavailable``: ``save_total_limit`` deleted it) gives way to the next older one
        the same fall allows, while there is one.  In a process group every rank asks for the same one (see
        :meth:`_lookback_votes`), and goes on alike: ``outcome.gone`` is decided on what every rank gathered (a
        rank's own error is not: gone on one rank, another error on the other, the first tried the next one alone
        and the group failed; a review).  Never past ``policy.lookback.keep`` tries."""
        while wanted is not None:
            looked = self._run_look_back(evaluate_fn, wanted, epoch, global_step)
            if looked is None:
                return
            self._report_look_back(*looked, global_step)
            _, outcome, result = looked
            if result is not None or not outcome.gone:
                return
            wanted = self.policies.by_name["lookback"].gone()

    def _lookback_votes(self, evaluate_fn) -> list[float]:
        """In a process group, for the step's one all-reduce (max): what the trainer told this rank of its kept
        checkpoints (the count of ``checkpoint_saved`` calls and a hash of their steps in order), whether this
        ``evaluate_fn`` can load one and whether the look back is off, each also negated (their minimum).  Equal on every rank, the ranks' look backs are too: the policy decides
        on shared values.  Zeros without the policy, or asynchronously (the all-reduce is as long on every rank)."""
        policy = self.policies.by_name.get("lookback")
        if policy is None or self._async is not None:
            return [0.0] * 8  # (the all-reduce's length is the same on every rank, whatever the config)
        can = 1.0  # (asked only once checkpoints were given: signature inspection is not free on every step)
        if policy.told[0] and not (_wants_request(evaluate_fn)
                                   and getattr(evaluate_fn, "evaluates_checkpoints", True) is not False):
            can = 0.0
        values = [float(policy.told[0]), float(policy.told[1]), can, 1.0 if policy.off is not None else 0.0]
        return [x for v in values for x in (v, -v)]

    def _lookback_agreed(self, votes: list[float], global_step: int) -> None:
        """After the step's all-reduce: ranks told of different checkpoints (or one whose evaluate_fn cannot load
        them) turn the look back off on every rank for the rest of the run, said once."""
        policy = self.policies.by_name.get("lookback")
        if policy is None or self._async is not None:
            return
        if policy.off is None and any(votes[i] != -votes[i + 1] for i in range(0, len(votes), 2)):
            policy.off = f"the ranks disagreed at step {global_step}"
            policy.take()
            if self._rank == 0:
                log.warning("policy.lookback is off for the rest of the run: at step %d the ranks had not been told of "
                            "the same kept checkpoints (checkpoint_saved on every rank alike), or an evaluate_fn could "
                            "not load one", global_step)

    def _look_back_suites(self, step: int, items: int | None) -> tuple[dict, str]:
        """With eval suites: this rank's requests for a look back at the checkpoint of ``step``, and what they
        cover for its reason.  The tracked metric's suite (every suite, for a ``suite_aggregate`` metric) on the
        plan of the latest evaluation before the checkpoint that measured it: its items and answers per item,
        so the checkpoint is measured as precisely as the evaluation it is set beside (``items``, else the
        suite's initial plan, when there is none); ``policy.lookback.sample_size``, where set, is each suite's
        items (at most its size) on that plan's answers per item."""
        from adaptive_eval.policies._base import primary_metric
        from adaptive_eval.suites import SuitePlan, suite_requests

        metric = self._tracked
        before = next((r for r in reversed(self.history) if r.evaluated_at is None and r.step < step
                       and primary_metric(r, metric) is not None), None)
        tracked = primary_metric(before, metric)[0] if before is not None else (metric or "")
        head = tracked.partition("/")[0]
        names = [head] if head in self._suites else list(self._suites)
        asked = self._suite_plans.get(before.step, {}) if before is not None else {}
        plans = []
        for name in names:
            suite = self._suites[name]
            if before is not None:
                if name in asked:  # the plan it asked for (its metrics' n can be fewer: all-NaN items)
                    plans.append(SuitePlan(name, *asked[name]))
                    continue
                # not kept (a state saved before plans were): read off what it measured
                summary = before.metrics.get(tracked) if head == name else next(
                    (m for k, m in before.metrics.items() if k.partition("/")[0] == name and m.n > 0), None)
                if summary is not None and summary.n > 0:
                    plans.append(SuitePlan(name, min(int(summary.n), int(suite["size"])),
                                           max(1, round(summary.samples_per_item))))
            else:
                plans.append(SuitePlan(name, min(int(items or suite["size"]), int(suite["size"])),
                                       int(suite["samples_per_item"])))
        fixed = self.policies.by_name["lookback"].sample_size
        if fixed is not None:  # policy.lookback.sample_size: the items of each suite (it was ignored with suites)
            plans = [SuitePlan(p[0], min(int(fixed), int(self._suites[p[0]]["size"])), p[2]) for p in plans]
        requests = suite_requests(self._suites, plans, self._evaluation["seed"], self._rank, self._world)
        return requests, "; ".join(f"{p.name}: {p.items}x{p.samples_per_item}" for p in plans)

    def _run_look_back(self, evaluate_fn, wanted, epoch, global_step: int):
        step, ref, items, why = wanted
        ev = self._evaluation
        # the alarm evaluation's reason without its notes (what its suites covered, what the budget let it have):
        # they were that evaluation's, not this one's
        why = why.split(" [", 1)[0].split(" (budget: ", 1)[0]
        suites, reason = {}, f"lookback:{why}"
        if self._suites:
            suites, covered = self._look_back_suites(step, items)
            if not suites:
                return None  # (no suite of the tracked metric was measured before: nothing to set it beside)
            reason = f"lookback:{why} [{covered}]"
            items = sum(r.sample_size for r in suites.values())
        request = EvalRequest(step=step, sample_size=items, seed=ev["seed"], reason=reason,
                              rank=self._rank, world_size=self._world, checkpoint=ref, suites=suites)
        # An evaluation the library chose to add: a failure (a checkpoint deleted by save_total_limit) is skipped
        # and counted even under evaluation.on_error: raise, which is for the evaluations the user scheduled.
        self._looking = (global_step, wanted)  # (a state saved meanwhile holds it as interrupted, as _running)
        try:
            outcome, seconds = self._evaluate_request(evaluate_fn, request, epoch,
                                                      "skip" if ev["on_error"] == "raise" else ev["on_error"])
        finally:
            self._looking = None
        result = outcome.result
        self._eval_seconds += seconds  # (the budget counts it like any evaluation)
        self._sync_eval_seconds += seconds
        if result is not None:
            # (not paired with the evaluation before: the items of its suites are not the next one's baseline)
            result = dataclasses.replace(self._with_aggregate(result), evaluated_at=global_step)
            self.history.append(result)  # (not to the policies or the eval detectors: its step is past)
        else:
            self._eval_errors += 1
        return request, outcome, result

    def _report_look_back(self, request: EvalRequest, outcome, result: EvalResult | None, global_step: int) -> None:
        if result is None:
            self._emit({"kind": "error", "step": request.step, "evaluated_at": global_step, "reason": request.reason,
                        "error": error_text(outcome.error)})
        else:
            self._emit({"kind": "eval", "step": request.step, "evaluated_at": global_step, "result": result})
        if not self._logging:
            return
        if result is not None:
            from adaptive_eval.tensorboard import EVAL_PREFIX, eval_scalars

            # On the checkpoint's step, under lookback/ (eval/ has points after it: TensorBoard drops the later
            # points of a tag written at an earlier step).
            self._logger.log(request.step, {"lookback/" + k[len(EVAL_PREFIX):]: v
                                            for k, v in eval_scalars(result).items()})
        what = f"n={result.items}" if result is not None else f"failed: {type(outcome.error).__name__}"
        self._logger.text(global_step, "decisions", f"evaluated the checkpoint of step {request.step} "
                                                   f"({request.reason}, {what})")

    def _evaluate_request(self, evaluate_fn, request: EvalRequest, epoch, on_error: str):
        """Run ``evaluate_fn`` on ``request`` (sharded in a group): ``(outcome, seconds)``, the seconds every rank
        agrees on (the group's clock moves by them)."""
        ev = self._evaluation
        # evaluate_fn runs under torch.inference_mode (and autocast for evaluation.precision bf16/fp16):
        # import torch before the clock starts, so the first evaluation is not billed seconds for it.
        if ev["precision"] != "none":
            import torch  # noqa: F401

        start = self.clock()
        self._in_fn = True  # (an evaluate() from inside it is refused: see evaluate)
        try:
            outcome = run_evaluation_outcome(
                evaluate_fn, request, epoch=epoch, clock=self.clock, confidence=ev["confidence"],
                on_error=on_error, max_retries=ev["max_retries"], retry_backoff_s=ev["retry_backoff_s"],
                dist_context=self.dist, precision=ev["precision"],
                rank_discrepancy_threshold=self._discrepancy_threshold if self._distributed else None,
                timeout=self._eval_timeout, pass_at_k=ev["pass_at_k"], suites=tuple(self._suites),
                metric_kinds=ev["metric_kinds"], aggregations=ev["aggregations"], strata=self._strata,
                failures_said=self._failures_said,
            )
        finally:
            self._in_fn = False
        if not self._distributed:
            return outcome, self.clock() - start
        # The slowest rank's: the reduced result carries them; after a failure, which every rank saw, one more
        # all-reduce finds them.
        if outcome.result is not None:
            seconds = outcome.result.seconds
        else:
            seconds = self.dist.all_reduce_max([self.clock() - start])[0]
        self._now += seconds
        return outcome, seconds

    def _with_aggregate(self, result: EvalResult) -> EvalResult:
        """With suites: the result knowing them (so that its ``items`` adds up the suites'), and with
        ``evaluation.suite_aggregate`` ``<suite_aggregate>/<metric>`` added (see
        :func:`~adaptive_eval.suites.weighted_aggregate`), synchronous or integrated alike."""
        ev = self._evaluation
        if not self._suites:
            return result
        extra = {}
        if ev["suite_aggregate"]:
            from adaptive_eval.suites import weighted_aggregate

            extra = weighted_aggregate(result.metrics, self._suites, ev["suite_aggregate"], ev["confidence"])
        return dataclasses.replace(result, metrics={**result.metrics, **extra}, suites=tuple(self._suites))

    def _pair(self, result: EvalResult, item_values: Mapping[str, dict]) -> EvalResult:
        """The result with its paired differences against the previous measurement of each metric, on the
        items both share (this rank's items; in a group one all-gather combines the ranks' sums: an item
        keeps its rank from one evaluation to the next, see ``EvalRequest.indices``)."""
        from adaptive_eval.distributed import combine_rank_summaries, summaries_to_wire
        from adaptive_eval.stats import from_sums, fsum

        local = {}
        for name, values in item_values.items():
            prev = self._item_values.get(name)
            if prev:
                shared = [i for i in values if i in prev]
                if shared:
                    d = [values[i] - prev[i] for i in shared]
                    # (stats.fsum: math.fsum raised OverflowError into the training step on items of 1e308; a probe)
                    local[name] = from_sums(fsum(d), fsum(x * x for x in d), len(d), False,
                                            self._evaluation["confidence"])
            self._item_values[name] = dict(values)
        # Items are known only for suites and items x samples metrics; the result (the same on every rank)
        # says whether there are any, so every rank takes this collective or none does.
        pairable = bool(self._suites) or any(m.clustered for m in result.metrics.values())
        if self._distributed and not pairable:
            return result
        if self._distributed:
            per_rank = self.dist.gather_objects(summaries_to_wire(local))
            paired, _, _ = combine_rank_summaries(per_rank, self._evaluation["confidence"])
        else:
            paired = local
        paired = {k: v for k, v in paired.items() if v.n > 0}
        return dataclasses.replace(result, paired=paired) if paired else result

    # ----------------------------------------------------------------------------------------------
    # Asynchronous evaluation: the machinery is adaptive_eval.asynchronous; here only what it means for the
    # decisions (submitted: the trigger fires and the alarms are consumed; integrated: the policies learn).

    def _submit(self, evaluate_fn, decision: Decision, epoch, global_step, *, resumable: bool = True) -> None:
        suites = {}
        asked = decision
        # Sharded (a group without eval ranks): each rank's worker evaluates its shard; else one worker all of it.
        rank, world = (self._rank, self._world) if self._async.sharded else (0, 1)
        if self._suites:
            decision, suites = self._suite_plan(decision, rank=rank, world=world)
            self.last_decision = decision
            # (the suites due: the warning on a due suite with no result back when it is integrated, and the suites
            # owed when it failed; in the state with the jobs in flight)
            self._due_in_flight[global_step] = list(suites)
            for old in sorted(self._due_in_flight)[:-64]:
                del self._due_in_flight[old]
        request = EvalRequest(step=global_step, sample_size=decision.sample_size, seed=self._evaluation["seed"],
                              reason=decision.reason, rank=rank, world_size=world, suites=suites)
        try:
            self._async.submit(evaluate_fn, request, epoch=epoch, urgent=decision.urgent)
        except BaseException:
            # (a Ctrl-C before it was handed to its worker: nothing ran, nothing counts, the suites' every-m-th
            # schedule included; a review)
            if not any(job.step == global_step for job in self._async.jobs):
                self._due_in_flight.pop(global_step, None)
                if resumable and not self._distributed:  # (the loop run again from this step submits it: it read
                    self._interrupted = (global_step, asked, None)  # as a repeat, never evaluated; a review.  Not
                    # before_train/after_train's, called again as they are: their step's observe() was dropped)
                raise
            self._evals_run += 1
            self._retrying(list(suites), global_step)
            raise
        self._evals_run += 1
        self._retrying(list(suites), global_step)  # (once submitted: a Ctrl-C before it left the mark; a review)
        self.trigger.fired()
        self._last_eval_step = global_step
        self._alarm_pending = False
        alarm_policy = self.policies.by_name.get("alarm")
        if alarm_policy is not None:  # the alarms are answered by this submission (cooldown from now)
            alarm_policy.on_eval(EvalResult(step=global_step, sample_size=decision.sample_size,
                                            reason=decision.reason, seconds=0.0), self._ctx(global_step))
        self._emit({"kind": "submitted", "step": global_step, "reason": decision.reason,
                    "sample_size": decision.sample_size})
        if self._logging:
            # (deferred 0 here, as a synchronous evaluation writes it: a deferral's 1 stayed up to the run's end)
            self._end_deferred_span(global_step, zero=False)
            self._logger.log(global_step, {"controller/async_in_flight": float(len(self._async.jobs)),
                                           "controller/deferred": 0.0})
            self._deferred_zero = global_step
            self._logger.text(global_step, "decisions",
                              f"submitted: {decision.reason} (n="
                              f"{'all' if decision.sample_size is None else decision.sample_size})"
                              f"{self._deferred_since()}")
        self._check_down(global_step)

    def _say_budget_deferring(self, global_step: int) -> None:
        """Once a run: the budget defers far more evaluations than it runs (a fast loop on the wall clock, where any
        evaluation is dear against the training's milliseconds: the quick start run as a toy loop evaluated twice in
        300 steps and deferred 207 times, unsaid; replay said so of a trace, the live evaluator did not; a probe)."""
        self._budget_deferring_said = True
        budget = self.policies.by_name.get("budget")
        if budget is None or self._rank != 0:
            return
        key = "max_eval_device_fraction" if budget.asynchronous else "max_eval_fraction"
        # (steps, not evaluations: one due evaluation held back 20 steps read "deferred 20 due evaluations"; and the
        # advice to pass clock= went to a loop that passes one too; a review)
        way = ("raise" if isinstance(self.clock, _FiniteClock) else  # (a clock= given)
               "on the wall clock of a fast loop any evaluation is dear: pass clock= (a clock your loop advances by a "
               "step's real time), or raise")
        log.warning("step %d: the budget has held due evaluations back at %d steps and run %d evaluation%s: they "
                    "took %.3g s of the run's %.3g s, and policy.budget.%s is %.3g; %s %s, or set "
                    "policy.budget.enabled: false (said once)", global_step, self._deferrals, self._evals_run,
                    "" if self._evals_run == 1 else "s", self._eval_seconds,
                    self._elapsed(), key, getattr(budget, key), way, key)

    def _say_held_alarm(self, decision: Decision, global_step: int) -> None:
        """Once a run: the budget holds back the evaluation an alarm asked for (found by a new user: with
        evaluations as dear as a few training steps it waited 54 steps, and only summary()['deferrals'] said so)."""
        if self._budget_alarm_said or self._rank != 0:
            return
        budget = self.policies.by_name.get("budget")
        if budget is None:
            return
        self._budget_alarm_said = True
        key = "max_eval_device_fraction" if budget.asynchronous else "max_eval_fraction"
        least = (f"policy.budget.alarm_min_size={budget.alarm_min_size} items" if budget.alarm_min_size is not None
                 else "its whole sample (policy.budget.alarm_min_size: null)")
        log.warning("step %d: the budget holds back the evaluation the alarm asked for (%s): evaluation took %.3g s "
                    "of the run's %.3g s so far, and policy.budget.%s is %.3g; it runs once the budget affords %s. "
                    "To look at once, raise %s, lower alarm_min_size, or set policy.budget.enabled: false (said once)",
                    global_step, decision.deferred, self._eval_seconds, self._elapsed(), key, getattr(budget, key),
                    least, key)

    def _cancel(self, job, global_step: int) -> None:
        self._async.cancel(job)
        self._cancelled += 1
        if job.step in self._due_in_flight:  # (its suites measured nothing: the next evaluation covers them)
            self._settle_suites(self._due_in_flight.pop(job.step), None, job.step)
        if self._rank == 0:  # (the group's decision: said by one rank, as its deferrals are, not by each; a probe)
            log.warning("step %d: the asynchronous evaluation of step %d (%s) is cancelled to make room for an "
                        "urgent one (evaluation.max_in_flight=%d)", global_step, job.step, job.reason,
                        self._async.max_in_flight)
        self._emit({"kind": "cancelled", "step": job.step, "reason": job.reason, "at_step": global_step})
        if self._logging:  # (the decisions text said only "submitted" for it: a result that never came, unexplained)
            self._logger.text(global_step, "decisions",
                              f"cancelled: the evaluation submitted at step {job.step} ({job.reason}), to make room "
                              f"for an urgent one (evaluation.max_in_flight={self._async.max_in_flight})")

    def _check_down(self, global_step: int) -> None:
        down = self._async.is_down
        if down is None or self._async_down_logged:
            return
        self._async_down_logged = True
        log.error("asynchronous evaluation is DOWN at step %d: %s; training goes on WITHOUT evaluations",
                  global_step, down)
        self._emit({"kind": "async_down", "step": global_step, "error": down})
        if self._logging:
            self._logger.log(global_step, {"controller/async_down": 1.0})
            self._logger.text(global_step, "decisions", f"asynchronous evaluation down: {down}; no more evaluations")

    def _combine_shards(self, pairs: list) -> list:
        """Sharded (a group without eval ranks): this rank's (job, outcome) pairs, all-gathered and combined
        into the group's, the same on every rank."""
        everyone = self.dist.gather_objects(self._async.shards_to_wire(pairs))
        return self._async.combine_shards(pairs, everyone, self._rank, self._evaluation["confidence"],
                                          self._discrepancy_threshold, suites=bool(self._suites))

    def _integrate_in_group(self, global_step: int) -> EvalResult | None:
        """The first training rank's outcomes, broadcast (sharded: every rank's shards, all-gathered and
        combined), integrated by every training rank at this step."""
        if self._async.sharded:
            pairs = self._combine_shards(self._async.take_head(global_step))
        elif self._async.owner:
            pairs = self._async.take(global_step)
            self.dist.broadcast_object(self._async.outcomes_to_wire(pairs), src=0)
        else:
            pairs = self._async.outcomes_from_wire(self.dist.broadcast_object(None, src=0))
        return self._integrate(pairs, global_step)

    def _integrate(self, pairs, global_step: int, *, may_raise: bool = True) -> EvalResult | None:
        """Integrate finished asynchronous evaluations (in submission order) at ``global_step``."""
        import dataclasses

        last, raised = None, None
        for job, outcome in pairs:
            result, error = outcome.result, outcome.error
            if error is not None and may_raise and self._evaluation["on_error"] == "raise" and raised is None:
                # raised once every pair taken is integrated, this one as failed (counted, an error event): the
                # pairs after it were taken off the queue too, and were lost (found by a new-user probe)
                raised = error
            ctx = self._ctx(global_step)
            if error is not None:
                self._eval_errors += 1
                log.error("asynchronous evaluation of step %d failed (noticed at step %d): %s", job.step,
                          global_step, error_text(error))
                self._emit({"kind": "error", "step": job.step, "integrated_step": global_step,
                            "reason": job.reason, "error": error_text(error)})
                learned = EvalResult(step=job.step, sample_size=job.sample_size, reason=job.reason, seconds=0.0,
                                     epoch=job.epoch)
            else:
                result = dataclasses.replace(result, step=job.step, epoch=job.epoch, submitted_step=job.step,
                                             integrated_step=global_step)
                # (in a group every rank pairs with the per-item values it holds: the owner's, an eval rank's sent
                # back to it, or this rank's shard; one all-gather combines them, as for a synchronous evaluation)
                result = self._with_aggregate(self._pair(result, outcome.item_values))
                self._eval_seconds += result.seconds  # eval-device seconds
                self.history.append(result)
                if self._tracked is None:
                    self._choose_tracked(result)
                self._say_untracked(result)
                if not self._names_said:
                    self._say_unmatched_names(result)
                if job.step in self._due_in_flight:
                    self._say_missing_suites(result, self._due_in_flight[job.step])
                learned = result
                last = result
            if job.step in self._due_in_flight:
                self._settle_suites(self._due_in_flight.pop(job.step), result if error is None else None, job.step)
            self.last_outcome = outcome
            for p in self.policies.policies:  # the alarm policy learned at submission, but for what the result showed
                if p.name != "alarm":
                    p.on_eval(learned, ctx)
                else:
                    p.learn(learned)
            self._settle_alarms(job.step, error, global_step)
            if result is not None and error is None:
                for name, summary in result.metrics.items():
                    self._update_eval_detectors(name, summary.mean, job.step)
                for found in outcome.discrepancies:  # sharded in a group: identical on every rank
                    self._on_alarm(found.to_alarm(), global_step, rank=found.rank)
            self.trigger.scale = self._scale()
            if error is None:
                self._emit({"kind": "eval", "step": job.step, "integrated_step": global_step, "result": result})
            if self._logging:
                self._log_async_eval(global_step, job, result if error is None else None, error)
        self._check_down(global_step)
        if raised is not None and self._deferred_error is None:  # (raised by this step's evaluate(), at its end)
            self._deferred_error = raised
        return last

    def _log_async_eval(self, global_step: int, job, result: EvalResult | None, error=None) -> None:
        # Eval metrics on the step axis of the weights; controller scalars and text where it happened (a
        # tag written at an earlier step than before would make TensorBoard drop the later points).
        scalars = {"controller/sample_size": float(result.items if result is not None else 0),
                   "controller/eval_fraction": self.eval_fraction,
                   "controller/eval_errors": float(self._eval_errors),
                   "controller/async_latency_steps": float(global_step - job.step),
                   "controller/async_in_flight": float(len(self._async.jobs))}
        if self.interval is not None:
            scalars["controller/interval"] = self.interval
        # (the alarm count at each evaluation, as a synchronous run writes it: it was written at alarms only, so a
        # run without alarms had no chart of them and the count's line stopped at the last; a probe)
        if self._alarms_point(global_step):
            scalars["controller/alarms"] = float(self._alarm_count)
        self._logger.log(global_step, scalars)
        if result is not None:
            from adaptive_eval.tensorboard import eval_scalars

            self._logger.log(job.step, eval_scalars(result))
        if result is None:  # (measured nothing: n was the asked size, as if it had run)
            why = f"; {_short(error_text(error))}" if error is not None else ""
            self._logger.text(global_step, "decisions", f"failed: evaluation of step {job.step} ({job.reason}, "
                              f"{_asked(job.sample_size)}{why})")
            return
        self._logger.text(global_step, "decisions", f"integrated: evaluation of step {job.step} ({job.reason}, "
                          f"n={result.items})")

    def _update_eval_detectors(self, metric: str, value: float, step: int) -> None:
        if "/stratum=" in metric:  # a few items each (report_strata): shown, not watched
            return
        stream = f"eval/{metric}"
        dets = self._eval_detectors.get(stream)
        if dets is None:
            dets = self._eval_detectors[stream] = self._build(stream, self._streams["eval"])
        armed = self._eval_armed
        for i, det in enumerate(dets):
            alarm = det.update(value, step)
            if alarm is not None or det.armed:
                armed.add((stream, i))
            if alarm is not None:
                # A NaN or inf result of an evaluation a training stream's urgent alarm brought (its loss went NaN:
                # the model is dead) is shown and counted, but brings no evaluation forward: it asked at once for
                # another evaluation of the same dead model, and the tightened schedule for more (found by a
                # new-user probe).  A NaN result of a healthy run (a grader that failed) is re-measured at once, as
                # before.  (Read from the alarm policy's record, the same on every rank, so that ranks whose own
                # streams differ still decide alike.)
                dead = alarm.detector == "nonfinite" and self._brought_by_training_alarm(step)
                self._on_alarm(alarm, step, to_policies=not dead)

    def _brought_by_training_alarm(self, step: int) -> bool:
        """Whether a training stream's urgent alarm (not an eval metric's) brought the evaluation of ``step``."""
        alarm_policy = self.policies.by_name.get("alarm")
        return alarm_policy is not None and any(
            s not in self._eval_detectors for s in alarm_policy.urgent_streams_at(step))

    # ----------------------------------------------------------------------------------------------
    # What it did, for logs and replay

    @property
    def interval(self) -> float | None:
        """The current interval in steps (the base ``freq_steps`` x the policies' scale), if step-based."""
        f = self.cfg.trigger.freq_steps
        return f * self.trigger.scale if f is not None else None

    @property
    def eval_fraction(self) -> float:
        elapsed = self._elapsed()
        return self._eval_seconds / elapsed if elapsed > 0 else 0.0

    def summary(self) -> dict:
        """Counts of what happened so far (plain values); ``samples``: items evaluated (problems, over all suites);
        ``answers``: the answers scored, items x answers per item (per suite, its metric of the most answers:
        what generating them cost, which ``samples`` did not say; a new user's probe); ``lookbacks``: of ``evals``,
        those of a kept checkpoint (``policy.lookback``); ``cancelled``: asynchronous evaluations cancelled to
        make room for an urgent one (never integrated, not in ``evals``)."""
        return {"evals": len(self.history), "samples": sum(r.items for r in self.history),
                "answers": sum(_answers(r, self._suites) for r in self.history),
                "lookbacks": sum(r.evaluated_at is not None for r in self.history),
                "eval_seconds": self._eval_seconds, "elapsed_seconds": self._elapsed(),
                "alarms": self._alarm_count, "deferrals": self._deferrals, "cancelled": self._cancelled,
                "eval_errors": self._eval_errors, "record_errors": self._record_errors,
                "listener_errors": self._listener_errors, "logger_errors": self._logger.errors}

    def best(self, metric: str | None = None, *, by: str = "shrunk", steps=None):
        """The checkpoint to ship, as :func:`adaptive_eval.scoring.pick_best` picks it from :attr:`history` (a
        :class:`~adaptive_eval.scoring.Pick`: ``step``, ``estimate``, ``interval`` allowing for the pick, the
        evaluation; None before any evaluation measured the metric).  ``metric``: the tracked one by default, in
        ``evaluation.higher_is_better``'s direction (another metric: its name's, as ``pick_best`` reads it);
        ``steps``: only among these steps, the checkpoints you still have (an evaluation's step need not be one you
        saved; every evaluation still informs the estimates).  In a process group every rank gets the same pick."""
        from adaptive_eval.scoring import pick_best

        name = metric if metric is not None else self._tracked
        if name is None or (metric is None and not any(name in r.metrics for r in self.history)):
            return None  # (the tracked metric never measured: said once already, see _say_untracked)
        higher = bool(self._evaluation["higher_is_better"]) if name == self._tracked else None
        return pick_best(self.history, name, higher_is_better=higher, by=by, steps=steps)

    def add_listener(self, fn: Callable[[dict], None]) -> None:
        """Call ``fn(event)`` for every alarm, evaluation, deferral and evaluation error (plain dicts).  An
        exception in ``fn`` is logged (the first with its traceback) and counted in ``summary()["listener_errors"]``,
        never raised into the training step.  ``fn`` that cannot be called is a ``TypeError`` here (it was taken,
        and failed at the first event)."""
        if not callable(fn):
            raise TypeError(f"add_listener takes a function of one event (a dict), got {type(fn).__name__} {fn!r}")
        self._listeners.append(fn)

    def _emit(self, event: dict) -> None:
        for fn in self._listeners:
            try:
                fn(event)
            except Exception:  # noqa: BLE001 - a listener never stops training (nor, in a group, one rank of it)
                self._listener_errors += 1
                if self._listener_errors == 1:
                    log.exception("a listener (%r) raised on a %r event at step %s; training goes on and the other "
                                  "listeners still get every event; later failures are counted in "
                                  "summary()['listener_errors']", fn, event.get("kind"), event.get("step"))

    def _log_eval(self, step: int, decision: Decision, result: EvalResult | None, error=None) -> None:
        # (a failed evaluation measured nothing: it read "evaluated: ... (n=500)" of a 100-item set, and
        # controller/sample_size 500, the asked size; only controller/eval_errors said otherwise: a new user's probe)
        failed = result is None and error is not None
        items = result.items if result is not None else 0 if failed else (decision.sample_size or 0)
        self._end_deferred_span(step, zero=False)
        scalars = {"controller/sample_size": float(items),
                   "controller/eval_fraction": self.eval_fraction, "controller/deferred": 0.0,
                   "controller/eval_errors": float(self._eval_errors)}
        self._deferred_zero = max(step, self.__dict__.get("_deferred_zero") or step)
        if self._alarms_point(step):
            scalars["controller/alarms"] = float(self._alarm_count)
        if self.interval is not None:
            scalars["controller/interval"] = self.interval
        if result is not None:
            from adaptive_eval.tensorboard import eval_scalars

            scalars.update(eval_scalars(result))
        self._logger.log(step, scalars)
        asked = decision.sample_size
        if decision.suites:  # (its items, suite by suite, are in the reason's plans; n is their sum)
            n = f"n={asked}"
        elif result is None or asked is None or items == asked:
            n = f"n={items}"
        else:
            n = f"n={items} of {asked} asked"
        if failed:
            self._logger.text(step, "decisions", f"failed: {decision.reason} ({_asked(asked)}; "
                              f"{_short(error_text(error))}){self._deferred_since()}")
            return
        self._logger.text(step, "decisions", f"evaluated: {decision.reason} ({n}){self._deferred_since()}")

    def _alarms_point(self, step: int) -> bool:
        """Move the step ``controller/alarms`` is written at to ``step`` unless it was written later already (then
        False): a tag written at a step below an earlier one makes TensorBoard drop the points after it."""
        if self._alarms_at > step:
            return False
        self._alarms_at = step
        return True

    def _end_deferred_span(self, step: int, zero: bool = True) -> None:
        """The chart's end of a deferral going on (``controller/deferred`` 1 at its last step, then ``zero``: 0 at
        ``step``), so that TensorBoard draws it as a step, not a slope from its first step."""
        span, self._deferred_span = self._deferred_span, None
        if span is None:
            return
        if span[0] < span[1] < step:
            self._logger.log(span[1], {"controller/deferred": 1.0})
        if zero:
            self._logger.log(step, {"controller/deferred": 0.0})
            self._deferred_zero = step

    def _say_unevaluated_at_close(self, crashing: bool) -> None:
        """What ``close()`` finds never evaluated, said once (each was lost unsaid; probes): an evaluation still
        deferred at the last ``evaluate()`` (the resources, the budget, a full slot); else the run's last step of a
        state saved before that step's ``evaluate()`` (AReaL's RecoverHandler saves there) resumed with no step left;
        else the last weights of a loop that stopped early (a ``break``).  Each with the ``after_train`` call that
        evaluates them.  Not on the way out of an exception (``crashing``: a ``with`` block a crash leaves, an
        adapter's close on an exception: advice there is noise, and a framework's user never calls after_train)."""
        d, total, called, last = self.last_decision, self.total_steps, self._last_call_step, self._loaded_last
        done = self._last_eval_step
        tried = self.__dict__.get("_after_train_at")
        if crashing or called is None or self._rank != 0 or self._closed or (
                isinstance(tried, int) and tried >= called):  # (after_train was called: raised, under raise)
            return
        then = (f"; evaluator.after_train(evaluate_fn, {called}) before close() evaluates the last weights"
                if self._eval_at_end else "; trigger.eval_at_end is false")
        if (d is not None and not d.evaluate and d.reason and not d.reason.startswith("async:down")
                and (done is None or done < called)):
            # (what was due: every deferring decision keeps it, as the decisions line says it)
            was = d.deferred or "due"
            since = f" since step {self._deferring[0]}" if self._deferring is not None else ""
            text = f"closed while deferred: the evaluation due{since} ({d.reason}, was {was}) never ran" + then
        elif total is None or not self._eval_at_end:
            return
        elif called == last and total - 2 <= last < total - 1 and (done is None or done < total - 1):
            text = (f"closed with no evaluate() call since the state loaded, saved after step {last}'s call: the "
                    f"run's last step, {total - 1} (total_steps {total}), was not evaluated (trigger:final); a state "
                    f"saved before the last step's evaluate(), as AReaL's RecoverHandler saves it, resumes with no "
                    f"step left. evaluator.after_train(evaluate_fn, {total - 1}) before close() evaluates it")
        elif called < total - 1 and (done is None or done < called) and called != last:
            text = (f"closed at step {called}, before the run's last step ({total - 1}, total_steps {total}): the "
                    f"last weights trained were not evaluated (trigger:final)" + then)
        else:
            return
        log.warning("%s", text)
        if self._logging:
            self._logger.text(called, "decisions", text)

    def _deferred_since(self) -> str:
        """", deferred since step S" for the decisions text of an evaluation that ends a deferral."""
        if self._deferring is None:
            return ""
        first = self._deferring[0]
        self._deferring = None
        return f", deferred since step {first}"

    # ----------------------------------------------------------------------------------------------
    # State

    def state_dict(self, timeout_s: float | None = None) -> dict:
        """Everything the decisions depend on, as plain values that are strict JSON (a NaN or infinity, say a
        metric's, is ``{"__float__": "nan"}``).

        Asynchronous evaluations in flight are waited for, so that the state holds their results (at most
        ``timeout_s`` in all; default ``distributed.timeout_s``, and never past ``evaluation.timeout_s``); one
        still running then is saved as lost, and the resumed run counts it as a failed evaluation.  A
        preemption's handler gives the time its grace period leaves (SLURM's SIGTERM: 30 s before SIGKILL)."""
        if timeout_s is not None and (isinstance(timeout_s, bool) or not isinstance(timeout_s, numbers.Real)
                                      or not timeout_s >= 0):
            raise ValueError(f"state_dict(timeout_s=...) takes a number of seconds >= 0 or None, got {timeout_s!r}")
        self._not_inside_a_job("state_dict")
        try:
            state = self._state_dict(timeout_s)
        except RuntimeError as exc:
            if "changed size during iteration" not in str(exc) or _get_ident() == self._owner:
                raise
            # (a checkpoint-saving thread's call raced with the training thread: a bare RuntimeError; a probe)
            raise RuntimeError(f"state_dict() was called from another thread than the training loop's, and the loop "
                               f"changed the state while it was read ({exc}): take it in the training thread (a "
                               "checkpoint hook of the trainer runs there)") from exc
        if self._logging and _get_ident() == self._owner and _own_tensorboard(self.logger):
            # What the state covers is on disk too: a run killed after its checkpoint lost the stream points logged
            # since the last flush for good, though the state had them (a probe: steps 89-98 of train/loss).  Only
            # the library's own writer, which takes no lock: a user's logger that does deadlocked when a preemption
            # handler's state_dict() came while the training thread was inside its log() (a review).
            self._logger.flush()  # (guarded: a checkpoint is never failed by its log)
        return state

    def _not_inside_a_job(self, what: str) -> None:
        """Refuse ``what`` from inside an asynchronous evaluation: it waits for the evaluations in flight, its own
        among them (it waited distributed.timeout_s, 600 s, and close() integrated it twice; a probe)."""
        if self._async is not None and (step := job_step(self._async)) is not None:
            raise RuntimeError(f"{what}() called from inside the asynchronous evaluation of step {step}: it waits for "
                               "the evaluations in flight, this one among them; call it from the training loop")

    def _state_dict(self, timeout_s: float | None) -> dict:
        return _strict({
            # 2: evaluations carry within_ss2 (twenty-fourth session), which the release before refuses; its
            # message then says a later library wrote the state (it said "another config or version?")
            "version": 2,
            "trigger": self.trigger.state_dict(),
            "policies": self.policies.state_dict(),
            "detectors": {k: [d.state_dict() for d in v] for k, v in self._detectors.items()},
            "eval_detectors": {k: [d.state_dict() for d in v] for k, v in self._eval_detectors.items()},
            "elapsed": self._elapsed(),
            "eval_seconds": self._eval_seconds,
            "sync_eval_seconds": self._sync_eval_seconds,
            "eval_errors": self._eval_errors,
            "deferrals": self._deferrals,
            "cancelled": self._cancelled,
            "alarms": self._alarm_count,
            "alarm_pending": self._alarm_pending,
            "last_step": self._last_step,
            "stride": self._stride,
            "scale": self.trigger.scale,
            "last_eval_step": self._last_eval_step,
            "last_call_step": self._last_call_step,
            "evals_run": self._evals_run if (running := self._running) is None or self._distributed else running[2],
            "owed_suites": dict(sorted((self._owed_suites if running is None or self._distributed
                                        else running[3]).items())),
            # the suites due in the asynchronous evaluations in flight (integrated after a resume: owed if failed)
            "suites_in_flight": {str(job.step): list(self._due_in_flight[job.step])
                                 for job in (self._async.jobs if self._async is not None else ())
                                 if job.step in self._due_in_flight},
            # (a loaded one not yet run again is saved again: preempted twice, it ran a step late)
            **({"interrupted": _interrupted_state(waiting)}
               if (waiting := self._waiting_to_run()) is not None and not self._distributed else {}),
            # calls from other threads not yet applied (applying them here changed the run: see _apply_handed)
            **({"handed": [[m, a, b] for m, (a, b) in list(self._handed.copy())]} if self._handed else {}),
            "item_values": {m: {str(i): v for i, v in vals.items()} for m, vals in self._item_values.items()},
            "suite_plans": {str(s): {n: list(p) for n, p in plans.items()} for s, plans in self._suite_plans.items()},
            "history": [r.state() for r in self.history],
            "resources": self.resources.state_dict(),
            "unshared_alarms": [[*_alarm_to_wire(a), s] for a, s in self._unsynced],
            # (the deferral logged and still going on: a resumed run wrote it again, and "deferred since" its step)
            **({"deferring": list(self._deferring)} if self._deferring is not None else {}),
            **({"async": self._async.state_dict(timeout_s)} if self._async is not None else {}),
            # (integrated in observe(): the next evaluate() returns it, in the resumed run too)
            **({"unreturned": i} if (i := next((i for i, r in enumerate(self.history) if r is self._unreturned),
                                               None)) is not None else {}),
            "shape": self._shape(),
            # (evaluation.metric: null: the metric chosen at the first evaluation, which the resumed run tracks)
            **({"tracked": self._tracked} if self._evaluation["metric"] is None and self._tracked is not None else {}),
        })

    def _waiting_to_run(self) -> tuple | None:
        """The evaluation a state saved now holds as interrupted, ``(step, decision, look back)``: the one running
        (a preemption's handler saving in the middle of it), else a loaded one not yet run again."""
        if self._running is not None:
            return self._running[0], self._running[1], None
        if self._looking is not None:
            return self._looking[0], None, self._looking[1]
        if self._taking is not None:  # (waiting for a due asynchronous result: the step's call is made again)
            return self._taking, None, None
        return self._interrupted

    def _shape(self) -> dict:
        """What a state only means under (checked at load): asynchronous or not, the suites, the tracked metric, the
        sample's seed; and the rank that took it, in a group of how many."""
        return {"asynchronous": self._async is not None, "suites": sorted(self._suites),
                # (a suite's size changed, 500 -> 300, loaded unsaid, and the first plan still read N=500; a probe)
                "sizes": {str(n): int(suite["size"]) for n, suite in self._suites.items()},
                "metric": self._evaluation["metric"], "seed": self._evaluation["seed"], "rank": self._rank,
                "world": self._world}

    def _say_other_shape(self, sd: Mapping) -> None:
        """A state taken under another config loads (a changed frequency is meant to), but what it cannot carry
        over is said: found by a new user, an asynchronous run's state loaded into a synchronous evaluator dropped
        the evaluation in flight without a word."""
        saved, now = sd.get("shape"), self._shape()
        if not isinstance(saved, Mapping):
            return  # (a state from before the check)
        if "rank" in saved and saved["rank"] != self._rank:
            # (rank 0's state loaded on every rank: found in review; the adapters load each rank its own)
            log.warning("load_state_dict on rank %d: the state was taken on rank %s; it is loaded, but this rank's "
                        "detectors go on from that rank's streams, and the next paired difference finds no earlier "
                        "value of this rank's items (the state holds that rank's shard), and an asynchronous "
                        "evaluation in flight at the save fails: save state_dict() on every rank and load each "
                        "rank its own", self._rank, saved["rank"])
        changed = [f"{k}: {saved.get(k)!r} -> {now[k]!r}" for k in now
                   if k not in ("rank", "world", "sizes") and k in saved and saved.get(k) != now[k]]
        sizes = saved.get("sizes") if isinstance(saved.get("sizes"), Mapping) else {}
        changed += [f"evaluation.suites.{n}.size: {sizes[n]!r} -> {size!r}" for n, size in now["sizes"].items()
                    if n in sizes and sizes[n] != size]
        if saved.get("world", self._world) != self._world and self._rank == 0:
            # (an elastic restart, 4 ranks to 2: each rank's last per-item values are of its old shard, and a sharded
            # asynchronous evaluation's held outcomes are the old ranks' shards: the first paired difference used a
            # third of the items, the evaluation in flight came back on half of them as the whole; a new user's probe)
            log.warning("load_state_dict: the state was taken in a group of %s processes, loaded in %d; it is loaded, "
                        "and the run goes on, but the next evaluation is not paired with the one before (each rank's "
                        "items change with the group's size), and an asynchronous evaluation in flight at the save, if "
                        "any, fails", saved["world"], self._world)
        lost = [job.get("step") for job in (sd.get("async") or {}).get("jobs", [])] if self._async is None else []
        if changed and self._rank == 0:
            log.warning("load_state_dict: the state was taken under another config (%s); it is loaded, and the run "
                        "goes on under this one%s", "; ".join(changed),
                        f": the asynchronous evaluations of steps {lost} in flight at the save are dropped"
                        if lost else "")

    def load_state_dict(self, state_dict: Mapping) -> None:
        """Restore a state from :meth:`state_dict` (also after a JSON round trip); later decisions are
        the same as those of the run that never stopped.  A state that does not load (another config's, or
        edited) is a ``ValueError`` naming its key, and leaves this evaluator as it was (it was left half-loaded:
        a fixed schedule resumed "relaxed"; a new user's probe).  (The parameter is AReaL's name, so that
        ``load_state_dict(state_dict=...)`` works as on AReaL's ``Evaluator``; a probe.)"""
        sd = state_dict
        if isinstance(sd, (str, bytes)):
            raise ValueError("load_state_dict takes the state_dict mapping, not its JSON text: "
                             "load_state_dict(json.loads(text))")
        if not isinstance(sd, Mapping) or "trigger" not in sd:
            raise ValueError("not an AdaptiveEvaluator state_dict (no 'trigger' key)")
        version = sd.get("version", 1)
        if version not in (1, 2):
            raise ValueError(f"state_dict version {version!r}: this adaptive_eval reads versions 1 and 2; it was "
                             "written by another version of the library")
        sd = _unstrict(sd)
        for key in ("last_step", "last_call_step", "last_eval_step"):
            if sd.get(key) is not None and (type(sd[key]) is not int):
                raise ValueError(f"state_dict[{key!r}] must be an integer step or None, got {sd[key]!r}")
        # What a failed load puts back: the state (nothing is in flight where a state is loaded, at a resume; what
        # is, its live jobs, are kept as they are) and what no state holds
        saved = set(self._async.saved) if self._async is not None else None
        before = AdaptiveEvaluator.state_dict(self, timeout_s=0)  # (a subclass's own state_dict() takes no timeout)
        kept = {k: self.__dict__[k] for k in ("last_decision", "last_outcome", "_deferring", "_group_failed")
                if k in self.__dict__}
        jobs = list(self._async.jobs) if self._async is not None else None
        where = ["(the top level)"]
        try:
            self._load(sd, where)
        except Exception as exc:
            self._load(_unstrict(before), [""], say=False)
            self.__dict__.update(kept)
            if self._async is not None:
                self._async.jobs[:] = jobs
                self._async.saved = saved
            if isinstance(exc, ValueError) and where[0] in ("detectors", "eval_detectors"):
                raise  # (its own message names the stream)
            raise ValueError(f"load_state_dict: state_dict[{where[0]!r}] does not load into this evaluator: "
                             f"{error_text(exc)}; the evaluator is left as it was (a state of another config or "
                             "version, or edited?)") from exc
        note = getattr(self.logger, "note_resumed", None)  # (its folder may hold this run's own earlier files)
        if note is not None:
            note()
        self._loaded_last = self._last_call_step

    def _load(self, sd: Mapping, where: list, say: bool = True) -> None:
        """The body of :meth:`load_state_dict`; ``where[0]``: the key being loaded (for its error); ``say``: what
        another config's state cannot carry over (not when a failed load puts back the state from before it)."""
        sd = _Reading(sd, where)
        self._reset()
        elapsed = float(sd.get("elapsed", 0.0))
        self._start = self.clock() - elapsed
        self._now = elapsed  # in a group: the group's time (the trigger reads it)
        self.trigger.load_state_dict(sd["trigger"])
        self.policies.load_state_dict(sd.get("policies", {}))
        self._stride = int(sd.get("stride", 1))
        # The scale in use when the state was taken (policy.interval.max_run_fraction reads the stride of that
        # moment; found in review: recomputed here with a stride not yet restored, a resumed run relaxed further)
        scale = sd.get("scale")
        self.trigger.scale = float(scale) if isinstance(scale, (int, float)) and scale > 0 else self._scale()
        for table, key, specs_for in ((self._detectors, "detectors", self._specs_for),
                                      (self._eval_detectors, "eval_detectors", lambda _: self._streams["eval"])):
            for stream, det_states in sd.get(key, {}).items():
                dets = table[stream] = self._build(stream, specs_for(stream))
                from adaptive_eval.detectors._nonfinite import NonFinite

                if len(dets) == len(det_states) + 1 and type(dets[0]) is NonFinite and det_states and \
                        det_states[0].get("type") != "nonfinite":
                    # saved before a list without nonfinite got one (_with_nonfinite): the others resume as saved
                    dets = dets[1:]
                # (the config's detectors changed since the save: said with the way to resume under it; a new user's
                # probe found no way but starting over)
                # (both keys: the first pop named one, and the load then failed on the other; a resume probe)
                hint = ("; to resume under this config, load the state without the detectors (state.pop('detectors'); "
                        "state.pop('eval_detectors')): every stream's detectors then start afresh, with a warm-up, and "
                        "the rest resumes as saved")
                if not dets and key == "detectors" and is_schedule(stream) and stream not in self._ignore:
                    continue  # (a schedule a state of an earlier release watched: watched no more, see _specs_for)
                if len(dets) != len(det_states):
                    raise ValueError(f"state_dict has {len(det_states)} detectors for stream {stream!r}, "
                                     f"the config {len(dets)}{hint}")
                for det, st in zip(dets, det_states):
                    saved_type = st.get("type") if isinstance(st, Mapping) else None
                    if saved_type is not None and saved_type != det.name:
                        raise ValueError(f"state_dict holds a {saved_type!r} detector for stream {stream!r} where the "
                                         f"config has {det.name!r}{hint}")
                    det.load_state_dict(st)
        for stream, dets in self._detectors.items():
            if any(getattr(d, "_in_run", False) for d in dets):
                self._in_nonfinite_run.add(stream)
            self._index(stream, dets)  # (after: a stream in a run of NaN/inf has no fast path)
        self._eval_seconds = float(sd.get("eval_seconds", 0.0))
        # (a state saved before the key: 0, so the recorded time goes on from where it was, which held the
        # evaluations then; eval_seconds set it back, below zero after an asynchronous run's; a review)
        self._sync_eval_seconds = float(sd.get("sync_eval_seconds", 0.0))
        self._eval_errors = int(sd.get("eval_errors", 0))
        self._deferrals = int(sd.get("deferrals", 0))
        self._cancelled = int(sd.get("cancelled", 0))
        self._alarm_count = int(sd.get("alarms", 0))
        self._alarm_pending = bool(sd.get("alarm_pending", False))
        self._last_step = sd.get("last_step")
        self._stride = int(sd.get("stride", 1))
        self._last_eval_step = sd.get("last_eval_step")
        self._last_call_step = sd.get("last_call_step")
        self._evals_run = int(sd.get("evals_run", len(sd.get("history", []))))
        owed = sd.get("owed_suites", {})
        owed = dict.fromkeys(owed) if isinstance(owed, list) else owed  # (a list: this round's first form)
        self._owed_suites = {str(n): (None if at is None else int(at)) for n, at in owed.items()
                             if n in self._suites}  # (another config's suites: not)
        self._due_in_flight = {int(step): [str(n) for n in names if n in self._suites]
                               for step, names in sd.get("suites_in_flight", {}).items()}
        got = sd.get("interrupted")
        self._interrupted = (int(got["step"]), _decision_from_state(got["decision"]) if got.get("decision") else None,
                             tuple(got["lookback"]) if got.get("lookback") else None) if got else None
        self._handed = collections.deque(((str(m), (a, b)) for m, a, b in sd.get("handed", [])), maxlen=_HANDED_MAX)
        deferring = sd.get("deferring")
        self._deferring = None if deferring is None else (check_step("deferring", deferring[0]), str(deferring[1]))
        self._deferred_span = None  # (this writer charts a deferral going on from its next step)
        self._item_values = {m: {int(i): float(v) for i, v in vals.items()}
                             for m, vals in sd.get("item_values", {}).items()}
        self.history = [EvalResult.from_state(r) for r in sd.get("history", [])]
        shape = sd.get("shape")
        regrouped = isinstance(shape, Mapping) and shape.get("world", self._world) != self._world
        if regrouped:
            self._item_values = {}  # (this rank's shard of another group: see _say_other_shape)
        if self._evaluation["metric"] is None:
            tracked = sd.get("tracked")
            if tracked is not None:
                self._track(str(tracked))
            else:  # (a state from before the choice was kept: chosen again from the run's first evaluation)
                first = next((r for r in self.history if r.evaluated_at is None and r.metrics), None)
                if first is not None:
                    from adaptive_eval.policies._base import tracked_metric

                    self._track(tracked_metric(first, tuple(self._suites),
                                               bool(self._evaluation["higher_is_better"])))
        unreturned = sd.get("unreturned")  # (a synchronous evaluator returns its results at once: none waits)
        self._unreturned = (self.history[int(unreturned)] if unreturned is not None and self._async is not None
                            and 0 <= int(unreturned) < len(self.history) else None)
        self._suite_plans = {int(s): {str(n): [int(p[0]), int(p[1])] for n, p in plans.items()}
                             for s, plans in sd.get("suite_plans", {}).items()}
        self.resources.load_state_dict(sd.get("resources", {}))
        self._unsynced = [(_alarm_from_wire(w[:6]), int(w[6])) for w in sd.get("unshared_alarms", [])]
        if self._async is not None:
            shape = sd.get("shape")
            held = sd.get("async", {})  # (read last: a failure loading it names 'async', not 'shape'; a probe)
            if regrouped or (self._async.sharded and isinstance(shape, Mapping)
                             and shape.get("rank", self._rank) != self._rank):
                # Another rank's state (accelerate's register_for_checkpointing saves the main process's only): the
                # outcomes it holds are that rank's shards, which combined with the others' counted its items twice
                # as the whole result (a new user's probe); those evaluations fail instead, on every rank alike.  So
                # in a group of another size, even in one process (4 ranks to 1: rank 0's shard of 76 items came back
                # as the whole evaluation of 301).
                # (one that had finished was said "in flight when the state was saved and did not finish": it did,
                # and its result is dropped for another reason; a probe)
                whose = (f"rank {shape.get('rank')} of a group of {shape.get('world')}" if isinstance(shape, Mapping)
                         else "another rank")
                held = {**held, "jobs": [
                    {k: v for k, v in rec.items() if k != "outcome"} if rec.get("outcome") is None else
                    {**rec, "outcome": [None, ["builtins.RuntimeError", (
                        f"the evaluation of step {rec.get('step')} had finished when the state was saved, on {whose}: "
                        f"its result is that rank's shard of the items, which cannot be used on rank {self._rank} of "
                        f"{self._world}")], 0]}
                    for rec in held.get("jobs", [])]}
            self._async.load_state_dict(held)
        # A retry whose evaluation this state does not hold (an asynchronous state loaded synchronously, its jobs
        # dropped; a group's state saved inside the evaluation, which the resumed run does not run again) left its
        # suite neither owed nor retried for good: owed again, the next evaluation covers it (a review)
        live = {job.step for job in self._async.jobs} if self._async is not None else set()
        self._due_in_flight = {step: names for step, names in self._due_in_flight.items() if step in live}
        for name, at in self._owed_suites.items():
            if at is not None and at not in live:
                self._owed_suites[name] = None
        if say:
            self._say_other_shape(sd)

    def close(self, timeout_s: float | None = None) -> None:
        """Flush and close the logger (and the trace recorder of :meth:`record_to`).

        In a forked child that never called observe or evaluate it does nothing (the evaluations, logger and
        recorder are the parent's).  Asynchronous
        evaluations still in flight are waited for (at most ``timeout_s`` in all; default
        ``evaluation.timeout_s``, else ``distributed.timeout_s``; a wait past a second logs a warning that says
        how long it may last and why) and integrated at the last step seen;
        one that does not finish counts as failed (logged).  With ``on_error: raise`` the first failure among them,
        or one the last ``observe()`` integrated that no ``evaluate()`` raised, is raised once everything is closed
        (as a synchronous run raises its final evaluation's), unless another exception goes up.  Leaving a ``with``
        block on an exception, the wait is at most :data:`EXCEPTION_DRAIN_S` unless ``timeout_s`` is given (a crash
        in the training step showed only after the evaluation in flight, up to 600 s); in a ``finally:`` of your
        own, pass ``close(timeout_s=...)`` for that.
        In a process group, call it on every training rank (the drained results are shared: all-gathered shards, or
        the first rank's broadcast with eval ranks); with
        eval ranks it also tells them to stop serving.  An asynchronous evaluator evaluates no more after it:
        a due evaluation fails and evaluation is down (``async:down (the evaluator was closed: ...)``, logged as
        an error, raised only with ``on_error: raise``), as when its executor breaks.
        """
        self._not_inside_a_job("close")
        me = _get_ident()
        if self._closing == me:
            return  # (a signal handler's close() inside this thread's close(): the one under way finishes; review)
        with self._close_lock:  # (a second caller, a watchdog thread, integrated every evaluation twice; a probe)
            self._closing = me
            try:
                self._close(timeout_s)
            finally:
                self._closing = None

    def __getstate__(self) -> tuple[dict, dict]:
        # (pickled, as ddp_spawn pickles a framework callback: the lock is made anew.  The slots too: the instance
        # dict alone lost them, and the copy had no _async, trigger, ...: its state_dict() raised; a review)
        if self._async is not None and self._async.jobs:
            # (an internal "Can't pickle local object" or "cannot pickle '_thread.lock'" said nothing of why; a probe)
            raise TypeError(f"cannot copy an evaluator with asynchronous evaluations in flight (of steps "
                            f"{', '.join(str(job.step) for job in self._async.jobs)}): close() it first, or take "
                            "state_dict() and load it into a new evaluator")
        state = self.__dict__.copy()
        state.pop("_close_lock", None)
        slots = {name: getattr(self, name) for name in AdaptiveEvaluator.__slots__
                 if name not in ("__dict__", "__weakref__") and hasattr(self, name)}
        return state, slots

    def __setstate__(self, state) -> None:
        state, slots = state if isinstance(state, tuple) else (state, {})
        self.__dict__.update(state)
        for name, value in slots.items():
            setattr(self, name, value)
        self._close_lock = _Lock()

    def _close(self, timeout_s: float | None) -> None:
        crashing = (self.__dict__.get("_going_up") is not None or sys.exc_info()[1] is not None
                    or self.__dict__.get("_exception_close", False))
        if self._unclosed is not None:  # (close() was called, whatever its drain meets)
            self._unclosed.detach()
        if self.__dict__.get("_forked_at") == (self._last_step, self._last_call_step):
            # A forked child (a DataLoader worker, os.fork) that never used it, leaving a `with` block: the
            # evaluations, the logger and the recorder are its parent's.  It waited for an evaluation thread that
            # does not exist in it (a hang, its parent blocked in waitpid), and flushing its copies of their buffers
            # wrote them twice.  (A child that trains with it closes it: the pid alone skipped that, found in review.)
            self._closed = self._closed or True
            return
        if self._handed and _get_ident() == self._owner and self._interrupted is None and self._last_step is not None:
            self._apply_handed(self._last_step)  # (what other threads observed last: recorded and logged too)
        if self._async is not None:
            step = max(s for s in (self._last_call_step, self._last_step, -1) if s is not None)
            going_up, self._going_up = self.__dict__.get("_going_up"), None
            if timeout_s is None and going_up is not None and self._async.jobs:
                # (a `with` block that a crash of the training step leaves: it waited up to 600 s for an evaluation
                # in flight before the crash showed; a new user's probe.  Only there: a close() in an `except` block
                # that handled its exception looks the same to sys.exc_info(), and lost what was in flight; a review)
                timeout_s = min(EXCEPTION_DRAIN_S, self._async.wait_limit_s)
                log.warning("leaving the evaluator's `with` block on %s: close() waits at most %g s for the %d "
                            "asynchronous evaluation(s) in flight, not evaluation.timeout_s or distributed.timeout_s",
                            type(going_up).__name__, timeout_s, len(self._async.jobs))
            try:
                if self._distributed and self._group_failed is not None:
                    # (no collective after the group failed, as evaluate() runs none: close() ran one more, which
                    # waited distributed.timeout_s again and left one more unmatched operation in gloo; a probe)
                    pairs = [(job, _group_gone(job, outcome, self._group_failed))
                             for job, outcome in self._async.drain(timeout_s)]
                elif self._distributed and self._async.jobs and not self.dist.distributed:
                    pairs = self._async.drain(timeout_s)
                    pairs = [(job, _group_gone(job, outcome)) for job, outcome in pairs]
                elif self._distributed and self._async.sharded:
                    pairs = self._combine_shards(self._async.drain(timeout_s))
                elif self._distributed:
                    if self._async.owner:
                        pairs = self._async.drain(timeout_s)
                        self.dist.broadcast_object(self._async.outcomes_to_wire(pairs), src=0)
                    else:
                        pairs = self._async.outcomes_from_wire(self.dist.broadcast_object(None, src=0))
                else:
                    pairs = self._async.drain(timeout_s)
                self._integrate(pairs, step)  # (on_error: raise: the first failure is raised below, at the end)
            finally:
                self._async.close(timeout_s)
        if self._deferred_span is not None and self._logging:  # (a deferral going on at the end: its last step's 1)
            self._end_deferred_span(self._deferred_span[1] + 1, zero=False)
        self._say_unevaluated_at_close(crashing)
        self._log_pick()
        try:
            self._say_unobserved_streams()
        except Exception:  # noqa: BLE001 - a note never stops the user's shutdown
            pass
        self._logger.close()  # (the recorder is closed all the same: a failure is said, and counted)
        if self._recorder is not None:
            self._recorder.close()
            self._recorder = None
        self._closed = self._closed or True  # (a second close keeps "said")
        self._raise_deferred()  # (integrated by an observe() no evaluate() followed, or by this drain)

    def _say_closed(self, what: str) -> None:
        """Once: a call after :meth:`close`, which went on deciding with nothing written (found by a new user)."""
        if self._closed == "said":
            return
        self._closed = "said"
        if self._rank == 0:
            log.warning("%s() after close(): the evaluator still decides, but writes nothing more (its TensorBoard "
                        "file and trace are closed%s); call close() once, at the end of training (said once)", what,
                        "; an asynchronous evaluator evaluates no more" if self._async is not None else "")

    def _log_pick(self) -> None:
        """The checkpoint :func:`adaptive_eval.scoring.pick_best` picks on the tracked metric, as the text
        ``picked`` at the last step (found by a new-user probe: the pick was in the demo's ``summary.json`` but
        nowhere in TensorBoard).  Never raises: close() runs in the user's shutdown."""
        if isinstance(self.logger, NullLogger) or not self.history or self._logged_pick == len(self.history):
            return
        try:
            pick = self.best()
            if pick is None:
                return
            name = pick.metric
            self._logged_pick = len(self.history)
            lo, hi = pick.interval
            measured = pick.eval["metrics"][name]
            items = (pick.eval.get("n") or {}).get(name, pick.eval.get("sample_size"))
            step = max(s for s in (self._last_call_step, self._last_step, pick.step) if s is not None)
            self._logger.text(step, "picked", f"step {pick.step}: {name} {pick.estimate:.4g} [{lo:.4g}, {hi:.4g}] "
                              f"(the best {pick.by} estimate, {'higher' if pick.higher_is_better else 'lower'} is "
                              f"better, of {len(self.history)} evaluations; its interval allows "
                              f"for the pick; measured {measured:.4g} on {items} items)")
        except Exception:  # noqa: BLE001 - a summary never stops the user's shutdown
            log.exception("writing the picked checkpoint to TensorBoard failed; the run's results are kept")

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._going_up = exc  # (close() then waits at most EXCEPTION_DRAIN_S for what is in flight)
        if (exc is not None and self._distributed and self._async is not None and self._group_failed is None
                and not isinstance(exc, CollectiveError)):
            # One rank's exception (a Ctrl-C, an OOM): close()'s gather of what is in flight would run on this rank
            # alone, waiting out distributed.timeout_s, then raise CollectiveError over the exception itself (a
            # probe, two gloo ranks); what is in flight fails here instead, as the Lightning adapter's close does.
            self._group_failed = f"rank {self._rank} left its `with` block on {type(exc).__name__}"
        self.close()


def _asked(size) -> str:
    """A failed evaluation's size as asked, for its decisions row."""
    return "the whole set asked" if size is None else f"n={size} asked"


def _short(text: str, most: int = 200) -> str:
    """``text`` on one line, at most ``most`` characters (a decisions row beside others)."""
    text = " ".join(text.split())
    return text if len(text) <= most else text[:most - 3] + "..."


class _GuardedLogger:
    """The evaluator's calls into its logger (``log``, ``text``, ``set_groups``, ``log_config``, ``close``): an
    exception there (a logger's bug, a user's logger, a value it cannot take) is logged once with its traceback and
    counted in ``summary()["logger_errors"]``, never raised into the training step (a TensorBoard logger's error went
    up through ``observe()``: found in review of a new user's probe)."""

    __slots__ = ("inner", "errors")

    def __init__(self, inner):
        self.inner = inner
        self.errors = 0

    def _failed(self, what: str) -> None:
        self.errors += 1
        if self.errors == 1:
            log.exception("the logger (%r) raised in %s(); training goes on, what it was to write is lost, and later "
                          "failures are counted in summary()['logger_errors']", self.inner, what)

    def _call(self, what: str, *args) -> None:
        try:
            getattr(self.inner, what)(*args)
        except Exception:  # noqa: BLE001 - logging never stops training
            self._failed(what)

    def log(self, step, scalars) -> None:
        self._call("log", step, scalars)

    def text(self, step, tag, text) -> None:
        self._call("text", step, tag, text)

    def set_groups(self, groups) -> None:
        self._call("set_groups", groups)

    def log_config(self, config_yaml) -> None:
        self._call("log_config", config_yaml)

    def flush(self) -> None:
        if callable(getattr(self.inner, "flush", None)):  # (a logger of the user's may have none)
            self._call("flush")

    def close(self) -> None:
        self._call("close")


_EVALUATORS: weakref.WeakSet = weakref.WeakSet()


def _mark_forked() -> None:
    """In a forked child: what each evaluator had seen at the fork, so that close() tells the parent's copy (a
    child leaving a ``with`` block) from one the child trains with."""
    for ev in list(_EVALUATORS):
        try:
            ev._forked_at = (ev._last_step, ev._last_call_step)
            # the child's one thread is the training thread (one that forked from another thread handed every
            # observe() to a thread the child does not have)
            ev._owner = _get_ident()
            ev._handed.clear()
        except Exception:  # noqa: BLE001 - at fork: nothing may raise
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_mark_forked)


def _own_tensorboard(logger) -> bool:
    """Whether ``logger`` is the library's own TensorBoard writer (imported only if the module was)."""
    module = sys.modules.get("adaptive_eval.tensorboard")
    return module is not None and isinstance(logger, module.TensorBoardLogger)


def _say_lost_in_flight(evaluations, rank: int, pid: int) -> None:
    """An asynchronous evaluator left at exit (or collected) without :meth:`AdaptiveEvaluator.close`: the
    evaluations still in flight are never integrated; said (it lost them without a word).  Not in a forked child
    (its parent goes on and closes it)."""
    try:
        evaluations = evaluations()
        if evaluations is None or os.getpid() != pid:
            return
        steps = [job.step for job in evaluations.jobs if job.id not in evaluations.saved]
        if steps and rank == 0:
            log.warning("an asynchronous AdaptiveEvaluator was never closed: the evaluation%s of step%s %s, still in "
                        "flight, %s never integrated (no result, nothing in TensorBoard); call close() at the end of "
                        "training: it waits for them", "s" if len(steps) > 1 else "", "s" if len(steps) > 1 else "",
                        ", ".join(map(str, steps)), "were" if len(steps) > 1 else "was")
        saved = [job.step for job in evaluations.jobs if job.id in evaluations.saved]
        if saved and rank == 0:  # (it said "never integrated" of a result the state held: found by a new user)
            log.warning("an asynchronous AdaptiveEvaluator was never closed: the outcome%s of the evaluation%s of "
                        "step%s %s, in the state state_dict() saved, %s integrated by a run resumed from it, not by "
                        "this one (nothing in this run's TensorBoard)", *(["s" if len(saved) > 1 else ""] * 3),
                        ", ".join(map(str, saved)), "are" if len(saved) > 1 else "is")
    except Exception:  # noqa: BLE001 - at exit: nothing may raise
        pass

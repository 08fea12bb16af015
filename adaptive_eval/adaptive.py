"""The adaptive evaluator: the base trigger, detectors on the per-step streams, and the policies.

Per training step the user calls ``observe(metrics, global_step)`` (cheap streams: reward, loss, response
length, ...) and ``evaluate(evaluate_fn, epoch, step, global_step)`` (AReaL's signature).  Detectors turn
stream values into alarms; the policies turn alarms, the base schedule and past results into a
:class:`~adaptive_eval.types.Decision` (evaluate or not, how many samples, why).  This class is the only
place that reads the clock and calls the logger; the policies and detectors are pure.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping

from omegaconf import OmegaConf

from adaptive_eval.config import as_config
from adaptive_eval.evaluators import _rank_world, check_step, run_evaluation
from adaptive_eval.loggers import MetricLogger, NullLogger
from adaptive_eval.policies import Context, PolicySet, make_policies
from adaptive_eval.trigger import EpochStepTimeFreqCtl
from adaptive_eval.types import Decision, EvalRequest, EvalResult

__all__ = ["AdaptiveEvaluator"]

_SCHEDULED = ("trigger:steps", "trigger:time", "trigger:epochs")


def _as_float(key, value) -> float:
    """A metric value as a float; ``TypeError`` naming the key for anything that is not one number."""
    if isinstance(value, (bool, str, bytes)) or value is None:
        raise TypeError(f"metric {key!r}: expected a number, got {type(value).__name__} {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError, RuntimeError):
        pass
    # One-element arrays and tensors (NumPy 2 no longer converts 1-D arrays with float()).
    numel = getattr(value, "numel", None)  # torch
    size = numel() if callable(numel) else getattr(value, "size", None)  # numpy
    if size == 1 and hasattr(value, "item"):
        return _as_float(key, value.item())
    raise TypeError(f"metric {key!r}: expected one number, got {type(value).__name__}")


class AdaptiveEvaluator:
    """Decides at every training step whether to evaluate, with how many samples, and why.

    Build it with :meth:`from_config`.  ``observe`` and ``evaluate`` run every step and cost a few
    microseconds when nothing happens.  ``evaluate`` runs at most one evaluation per ``global_step``,
    returns its :class:`~adaptive_eval.types.EvalResult` (or None), and never lets an exception from
    ``evaluate_fn`` through unless ``evaluation.on_error`` is ``raise``.

    >>> from adaptive_eval import load_config
    >>> ev = AdaptiveEvaluator.from_config(load_config("areal", ["trigger.freq_steps=3"]))
    >>> [g for g in range(7) if ev.evaluate(lambda: {"acc": 0.5}, 0, g, g)]
    [2, 5]
    """

    def __init__(self, cfg=None, *, steps_per_epoch: int | None = None, total_steps: int | None = None,
                 clock: Callable[[], float] | None = None, logger: MetricLogger | None = None):
        self.cfg = as_config(cfg)
        trig = self.cfg.trigger
        if trig.freq_epochs is not None and steps_per_epoch is None:
            raise ValueError("trigger.freq_epochs is set, so AdaptiveEvaluator needs steps_per_epoch")
        if steps_per_epoch is not None and check_step("steps_per_epoch", steps_per_epoch) <= 0:
            raise ValueError(f"steps_per_epoch must be positive, got {steps_per_epoch}")
        self.steps_per_epoch = steps_per_epoch
        self.total_steps = check_step("total_steps", total_steps) if total_steps is not None else None
        self.clock = clock if clock is not None else time.monotonic
        if logger is None and self.cfg.logging.tensorboard_dir is not None:
            from adaptive_eval.tensorboard import make_logger

            logger = make_logger(self.cfg.logging.tensorboard_dir, flush_secs=self.cfg.logging.flush_secs)
        self.logger = logger if logger is not None else NullLogger()
        self._logging = not isinstance(self.logger, NullLogger)
        self._log_streams = self._logging and bool(self.cfg.logging.log_streams)
        self.trigger = EpochStepTimeFreqCtl(
            freq_epoch=trig.freq_epochs, freq_step=trig.freq_steps, freq_sec=trig.freq_secs,
            initial_epoch_value=trig.eval_before_train, clock=self.clock, sync_time=False,
        )
        plain = OmegaConf.to_container(self.cfg, resolve=True)
        self._evaluation = plain["evaluation"]
        self.policies: PolicySet = make_policies(plain["policy"], self._evaluation)
        self._streams = plain["streams"]
        self._ignore = frozenset(self._streams["ignore"])
        self._listeners: list[Callable[[dict], None]] = []
        self._reset()
        if self._logging:
            self.logger.log_config(OmegaConf.to_yaml(self.cfg))

    def _reset(self) -> None:
        self._detectors: dict[str, list] = {}
        self._eval_detectors: dict[str, list] = {}
        self._start = self.clock()
        self._eval_seconds = 0.0
        self._eval_errors = 0
        self._deferrals = 0
        self._alarm_count = 0
        self._alarm_pending = False
        self._last_step: int | None = None
        self._last_eval_step: int | None = None
        self._last_call_step: int | None = None
        self.history: list[EvalResult] = []
        self.last_decision = Decision(False)

    @classmethod
    def from_config(cls, cfg=None, *, steps_per_epoch: int | None = None, total_steps: int | None = None,
                    clock: Callable[[], float] | None = None,
                    logger: MetricLogger | None = None) -> "AdaptiveEvaluator":
        """Build from ``load_config()``'s result, a :class:`~adaptive_eval.Config`, a nested dict, or None
        (the default preset).  ``total_steps`` (optional) lets ``trigger.eval_at_end`` evaluate the last step."""
        return cls(cfg, steps_per_epoch=steps_per_epoch, total_steps=total_steps, clock=clock, logger=logger)

    # ----------------------------------------------------------------------------------------------
    # Streams and detectors

    def _specs_for(self, stream: str) -> list:
        if stream in self._ignore:
            return []
        return self._streams["watch"].get(stream, self._streams["default"])

    def _build(self, stream: str, specs) -> list:
        if not specs:
            return []
        from adaptive_eval.detectors import make_detector

        return [make_detector(spec, stream=stream) for spec in specs]

    def _watch(self, stream) -> list:
        if not isinstance(stream, str):
            raise TypeError(f"metric names must be strings, got {stream!r}")
        dets = self._detectors[stream] = self._build(stream, self._specs_for(stream))
        return dets

    def observe(self, metrics: Mapping[str, float], global_step: int) -> None:
        """Feed this step's cheap metrics (any names).  A NaN or inf is data, never an exception.

        ``global_step`` may repeat (several ``observe`` calls in one step) but not go backwards: that
        raises ``ValueError``.  To resume a run, build a new evaluator and ``load_state_dict``.
        """
        if type(global_step) is not int:
            global_step = check_step("global_step", global_step)
        last = self._last_step
        if last is not None and global_step < last:
            raise ValueError(f"global_step went backwards ({last} -> {global_step}); to resume a run, "
                             "load_state_dict() into a new AdaptiveEvaluator")
        self._last_step = global_step
        try:
            items = metrics.items()
        except AttributeError:
            raise TypeError(f"metrics must be a mapping of name to number, got {type(metrics).__name__}") from None
        detectors = self._detectors
        for name, value in items:
            dets = detectors.get(name)
            if dets is None:
                dets = self._watch(name)
            if type(value) is not float:
                value = _as_float(name, value)
            for det in dets:
                alarm = det.update(value, global_step)
                if alarm is not None:
                    self._on_alarm(alarm, global_step)
        if self._log_streams:
            self.logger.log(global_step, {f"streams/{k}": _as_float(k, v) for k, v in metrics.items()})

    def _ctx(self, step: int) -> Context:
        return Context(step=step, elapsed=self.clock() - self._start, eval_seconds=self._eval_seconds,
                       last_eval_step=self._last_eval_step)

    def _on_alarm(self, alarm, step: int) -> None:
        self._alarm_count += 1
        self.policies.on_alarm(alarm, self._ctx(step))
        self._alarm_pending = self._alarm_pending or self._policy_pending()
        self.trigger.scale = self.policies.scale()
        event = {"kind": "alarm", "step": alarm.step, "stream": alarm.stream, "detector": alarm.detector,
                 "direction": alarm.direction, "location": alarm.location, "message": alarm.message}
        self._emit(event)
        if self._logging:
            from adaptive_eval.tensorboard import alarm_scalar

            self.logger.log(step, {f"alarms/{alarm.stream}": alarm_scalar(alarm.direction)})
            self.logger.text(step, "alarms", f"{alarm.stream} {alarm.detector} {alarm.direction or ''}: "
                                             f"{alarm.message}".strip())

    def _policy_pending(self) -> bool:
        alarm_policy = self.policies.by_name.get("alarm")
        return alarm_policy is not None and alarm_policy.pending

    # ----------------------------------------------------------------------------------------------
    # Deciding and evaluating

    def evaluate(self, evaluate_fn: Callable, epoch: int, step: int, global_step: int) -> EvalResult | None:
        """Evaluate if due at this step (AReaL's signature; ``step`` is the step within the epoch)."""
        if type(global_step) is not int:
            global_step = check_step("global_step", global_step)
        if type(step) is not int:
            step = check_step("step", step)
        if type(epoch) is not int:
            epoch = check_step("epoch", epoch)
        if global_step == self._last_call_step:  # called again in the same step: counted once
            return None
        self._last_call_step = global_step
        spe = self.steps_per_epoch
        reason = self.trigger.advance(1 if spe is not None and step == spe - 1 else 0, 1)
        if reason is None:
            if not self._alarm_pending:
                if self.total_steps is None or global_step != self.total_steps - 1 or not self.cfg.trigger.eval_at_end:
                    return None
                reason = "trigger:final"
        elif reason in _SCHEDULED and self.trigger.scale != 1.0:
            reason = "interval:tightened" if self.trigger.scale < 1.0 else "interval:relaxed"
        return self._decide_and_run(evaluate_fn, reason, epoch, global_step)

    def before_train(self, evaluate_fn: Callable, global_step: int = 0) -> EvalResult | None:
        """Evaluate the initial weights before ``global_step`` is trained, if ``trigger.eval_before_train``."""
        global_step = check_step("global_step", global_step)
        if not self.trigger._initial_pending:
            return None
        return self._run(evaluate_fn, Decision(True, self._evaluation["sample_size"], "before_train"), None,
                         global_step)

    def decide(self, reason: str | None, global_step: int) -> Decision:
        """The decision for this step given the base trigger's ``reason`` (None: not due), without running."""
        ctx = self._ctx(global_step)
        decision = Decision(reason is not None, self._evaluation["sample_size"], reason or "")
        return self.policies.propose(decision, ctx)

    def _decide_and_run(self, evaluate_fn, reason, epoch, global_step) -> EvalResult | None:
        decision = self.decide(reason, global_step)
        self.last_decision = decision
        if not decision.evaluate:
            if decision.reason:
                self._deferrals += 1
                self._emit({"kind": "deferred", "step": global_step, "reason": decision.reason})
                if self._logging:
                    self.logger.log(global_step, {"controller/deferred": 1.0})
                    self.logger.text(global_step, "decisions", f"deferred: {decision.reason} (was {reason})")
            return None
        return self._run(evaluate_fn, decision, epoch, global_step)

    def _run(self, evaluate_fn, decision: Decision, epoch, global_step) -> EvalResult | None:
        ev = self._evaluation
        rank, world = _rank_world(None)
        request = EvalRequest(step=global_step, sample_size=decision.sample_size, seed=ev["seed"],
                              reason=decision.reason, rank=rank, world_size=world)
        start = self.clock()
        result, error = run_evaluation(
            evaluate_fn, request, epoch=epoch, clock=self.clock, confidence=ev["confidence"],
            on_error=ev["on_error"], max_retries=ev["max_retries"], retry_backoff_s=ev["retry_backoff_s"],
        )
        seconds = self.clock() - start
        self.trigger.fired()
        self._last_eval_step = global_step
        self._eval_seconds += seconds
        if error is not None:
            self._eval_errors += 1
            self._emit({"kind": "error", "step": global_step, "reason": decision.reason,
                        "error": f"{type(error).__name__}: {error}"})
            # The policies see an evaluation without metrics: alarms are consumed, nothing is learned.
            outcome = EvalResult(step=global_step, sample_size=decision.sample_size, reason=decision.reason,
                                 seconds=seconds, epoch=epoch)
        else:
            outcome = result
            self.history.append(result)
            for name, summary in result.metrics.items():
                self._update_eval_detectors(name, summary.mean, global_step)
        self._alarm_pending = False
        self.policies.on_eval(outcome, self._ctx(global_step))
        self.trigger.scale = self.policies.scale()
        if result is not None:
            self._emit({"kind": "eval", "step": global_step, "result": result})
        if self._logging:
            self._log_eval(global_step, decision, result)
        return result

    def _update_eval_detectors(self, metric: str, value: float, step: int) -> None:
        stream = f"eval/{metric}"
        dets = self._eval_detectors.get(stream)
        if dets is None:
            dets = self._eval_detectors[stream] = self._build(stream, self._streams["eval"])
        for det in dets:
            alarm = det.update(value, step)
            if alarm is not None:
                self._on_alarm(alarm, step)

    # ----------------------------------------------------------------------------------------------
    # What it did, for logs and replay

    @property
    def interval(self) -> float | None:
        """The current interval in steps (the base ``freq_steps`` x the policies' scale), if step-based."""
        f = self.cfg.trigger.freq_steps
        return f * self.trigger.scale if f is not None else None

    @property
    def eval_fraction(self) -> float:
        elapsed = self.clock() - self._start
        return self._eval_seconds / elapsed if elapsed > 0 else 0.0

    def summary(self) -> dict:
        """Counts of what happened so far (plain values)."""
        return {"evals": len(self.history), "samples": sum(r.items for r in self.history),
                "eval_seconds": self._eval_seconds, "elapsed_seconds": self.clock() - self._start,
                "alarms": self._alarm_count, "deferrals": self._deferrals, "eval_errors": self._eval_errors}

    def add_listener(self, fn: Callable[[dict], None]) -> None:
        """Call ``fn(event)`` for every alarm, evaluation, deferral and evaluation error (plain dicts)."""
        self._listeners.append(fn)

    def _emit(self, event: dict) -> None:
        for fn in self._listeners:
            fn(event)

    def _log_eval(self, step: int, decision: Decision, result: EvalResult | None) -> None:
        items = result.items if result is not None else (decision.sample_size or 0)
        scalars = {"controller/sample_size": float(items),
                   "controller/eval_fraction": self.eval_fraction, "controller/deferred": 0.0,
                   "controller/eval_errors": float(self._eval_errors)}
        if self.interval is not None:
            scalars["controller/interval"] = self.interval
        if result is not None:
            from adaptive_eval.tensorboard import eval_scalars

            scalars.update(eval_scalars(result))
        self.logger.log(step, scalars)
        self.logger.text(step, "decisions", f"evaluated: {decision.reason} (n={decision.sample_size})")

    # ----------------------------------------------------------------------------------------------
    # State

    def state_dict(self) -> dict:
        """Everything the decisions depend on, as plain (JSON-able) values."""
        return {
            "version": 1,
            "trigger": self.trigger.state_dict(),
            "policies": self.policies.state_dict(),
            "detectors": {k: [d.state_dict() for d in v] for k, v in self._detectors.items()},
            "eval_detectors": {k: [d.state_dict() for d in v] for k, v in self._eval_detectors.items()},
            "elapsed": self.clock() - self._start,
            "eval_seconds": self._eval_seconds,
            "eval_errors": self._eval_errors,
            "deferrals": self._deferrals,
            "alarms": self._alarm_count,
            "alarm_pending": self._alarm_pending,
            "last_step": self._last_step,
            "last_eval_step": self._last_eval_step,
            "last_call_step": self._last_call_step,
            "history": [r.state() for r in self.history],
        }

    def load_state_dict(self, sd: Mapping) -> None:
        """Restore a state from :meth:`state_dict` (also after a JSON round trip); later decisions are
        the same as those of the run that never stopped."""
        if not isinstance(sd, Mapping) or "trigger" not in sd:
            raise ValueError("not an AdaptiveEvaluator state_dict (no 'trigger' key)")
        self._reset()
        self.trigger.load_state_dict(sd["trigger"])
        self.policies.load_state_dict(sd.get("policies", {}))
        self.trigger.scale = self.policies.scale()
        for table, states, specs_for in ((self._detectors, sd.get("detectors", {}), self._specs_for),
                                         (self._eval_detectors, sd.get("eval_detectors", {}),
                                          lambda _: self._streams["eval"])):
            for stream, det_states in states.items():
                dets = table[stream] = self._build(stream, specs_for(stream))
                if len(dets) != len(det_states):
                    raise ValueError(f"state_dict has {len(det_states)} detectors for stream {stream!r}, "
                                     f"the config {len(dets)}")
                for det, st in zip(dets, det_states):
                    det.load_state_dict(st)
        self._start = self.clock() - float(sd.get("elapsed", 0.0))
        self._eval_seconds = float(sd.get("eval_seconds", 0.0))
        self._eval_errors = int(sd.get("eval_errors", 0))
        self._deferrals = int(sd.get("deferrals", 0))
        self._alarm_count = int(sd.get("alarms", 0))
        self._alarm_pending = bool(sd.get("alarm_pending", False))
        self._last_step = sd.get("last_step")
        self._last_eval_step = sd.get("last_eval_step")
        self._last_call_step = sd.get("last_call_step")
        self.history = [EvalResult.from_state(r) for r in sd.get("history", [])]

    def close(self) -> None:
        """Flush and close the logger."""
        self.logger.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

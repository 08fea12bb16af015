"""The adaptive evaluator: the base trigger plus detectors and policies (filled in by later issues)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from adaptive_eval.config import as_config
from adaptive_eval.evaluators import check_step, run_evaluation
from adaptive_eval.loggers import MetricLogger, NullLogger
from adaptive_eval.trigger import EpochStepTimeFreqCtl
from adaptive_eval.types import EvalRequest, EvalResult

__all__ = ["AdaptiveEvaluator"]


def _as_float(key: str, value) -> float:
    if isinstance(value, float):
        return value
    if isinstance(value, (bool, str, bytes)) or value is None:
        raise TypeError(f"metric {key!r}: expected a number, got {type(value).__name__} {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"metric {key!r}: expected a number, got {type(value).__name__}") from None


class AdaptiveEvaluator:
    """Decides at every training step whether to evaluate and with how many samples.

    Build it with :meth:`from_config`; call :meth:`observe` with the cheap per-step metrics and
    :meth:`evaluate` (AReaL's signature) once per step.
    """

    def __init__(self, cfg, *, steps_per_epoch: int | None = None, clock: Callable[[], float] | None = None,
                 logger: MetricLogger | None = None):
        self.cfg = as_config(cfg)
        trig = self.cfg.trigger
        if trig.freq_epochs is not None and steps_per_epoch is None:
            raise ValueError("trigger.freq_epochs is set, so AdaptiveEvaluator needs steps_per_epoch")
        self.steps_per_epoch = steps_per_epoch
        self.clock = clock if clock is not None else time.monotonic
        self.logger = logger if logger is not None else NullLogger()
        self.trigger = EpochStepTimeFreqCtl(
            freq_epoch=trig.freq_epochs, freq_step=trig.freq_steps, freq_sec=trig.freq_secs,
            initial_epoch_value=trig.eval_before_train, clock=self.clock, sync_time=False,
        )
        self._last_step: int | None = None
        self._last_eval_step: int | None = None
        self.history: list[EvalResult] = []

    @classmethod
    def from_config(cls, cfg=None, *, steps_per_epoch: int | None = None, clock: Callable[[], float] | None = None,
                    logger: MetricLogger | None = None) -> "AdaptiveEvaluator":
        """Build from a config (``load_config()``'s result, a :class:`~adaptive_eval.Config`, a dict, or None)."""
        return cls(cfg, steps_per_epoch=steps_per_epoch, clock=clock, logger=logger)

    def observe(self, metrics: Mapping[str, float], global_step: int) -> None:
        """Feed this step's cheap metrics.  Non-finite values are data, never an exception."""
        check_step("global_step", global_step)
        if not isinstance(metrics, Mapping):
            raise TypeError(f"metrics must be a mapping of name to number, got {type(metrics).__name__}")
        for key, value in metrics.items():
            _as_float(key, value)

    def evaluate(self, evaluate_fn: Callable, epoch: int, step: int, global_step: int) -> EvalResult | None:
        """Evaluate if due at this step (AReaL's signature); returns the result or None."""
        check_step("epoch", epoch)
        step = check_step("step", step)
        global_step = check_step("global_step", global_step)
        if self._last_eval_step == global_step:
            return None
        epochs = int(self.steps_per_epoch is not None and step == self.steps_per_epoch - 1)
        reason = self.trigger.poll(epochs, 1)
        if reason is None:
            return None
        ev = self.cfg.evaluation
        request = EvalRequest(step=global_step, sample_size=ev.sample_size, seed=ev.seed, reason=reason)
        result, _ = run_evaluation(evaluate_fn, request, epoch=epoch, clock=self.clock, confidence=ev.confidence,
                                   on_error=ev.on_error, max_retries=ev.max_retries,
                                   retry_backoff_s=ev.retry_backoff_s)
        self._last_eval_step = global_step
        if result is not None:
            self.history.append(result)
        return result

    def state_dict(self) -> dict:
        return {"version": 1, "trigger": self.trigger.state_dict(), "last_eval_step": self._last_eval_step}

    def load_state_dict(self, sd: Mapping) -> None:
        self.trigger.load_state_dict(sd["trigger"])
        self._last_eval_step = sd.get("last_eval_step")

    def close(self) -> None:
        self.logger.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()



"""Running an ``evaluate_fn`` and the AReaL drop-in :class:`Evaluator`."""

from __future__ import annotations

import inspect
import logging
import time
import traceback
from collections.abc import Callable, Mapping

from adaptive_eval.stats import summarize_outputs
from adaptive_eval.trigger import EpochStepTimeFreqCtl
from adaptive_eval.types import EvalRequest, EvalResult

__all__ = ["Evaluator", "call_evaluate_fn", "check_step", "run_evaluation"]

log = logging.getLogger("adaptive_eval")


def check_step(name: str, value) -> int:
    """Steps are integers; anything else is a ``ValueError`` naming the argument."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    return value.__index__()


def _wants_request(evaluate_fn: Callable) -> bool:
    try:
        params = inspect.signature(evaluate_fn).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature: assume the request form
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
    return bool(positional)


def call_evaluate_fn(evaluate_fn: Callable, request: EvalRequest):
    """Call ``evaluate_fn()`` (AReaL style) or ``evaluate_fn(request)``, by its signature."""
    if _wants_request(evaluate_fn):
        return evaluate_fn(request)
    return evaluate_fn()


def run_evaluation(
    evaluate_fn: Callable,
    request: EvalRequest,
    *,
    epoch: int | None = None,
    clock: Callable[[], float] = time.monotonic,
    confidence: float = 0.95,
    on_error: str = "skip",
    max_retries: int = 0,
    retry_backoff_s: float = 0.0,
    sleep: Callable[[float], None] = time.sleep,
    num_items: int | None = None,
) -> tuple[EvalResult | None, BaseException | None]:
    """Run one evaluation and summarize what it returned.

    Returns ``(result, None)``, or ``(None, error)`` when ``evaluate_fn`` raised and ``on_error`` is
    ``skip`` (or ``retry`` and the retries ran out); with ``raise`` the exception propagates.
    ``num_items`` (if known) is how many items the request covers, used for metrics given as one scalar.
    """
    attempts = 1 + (max_retries if on_error == "retry" else 0)
    start = clock()
    error = None
    for attempt in range(attempts):
        try:
            outputs = call_evaluate_fn(evaluate_fn, request)
            break
        except Exception as exc:  # noqa: BLE001 - the user's code may raise anything
            if on_error == "raise":
                raise
            error = exc
            log.error(
                "evaluate_fn failed at step %d (attempt %d/%d, reason %s):\n%s",
                request.step, attempt + 1, attempts, request.reason,
                "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
            )
            if attempt + 1 < attempts:
                sleep(retry_backoff_s * (2**attempt))
    else:
        return None, error
    seconds = clock() - start
    raw = None
    if outputs is None or not isinstance(outputs, Mapping):
        if outputs is not None and not _is_plain(outputs):
            raise TypeError(
                f"evaluate_fn must return a mapping of metric name to values (or None), got {type(outputs).__name__}"
            )
        raw = outputs
        metrics = {}
    else:
        if num_items is None:
            num_items = request.items_handed
        metrics = summarize_outputs(outputs, num_items, confidence)
    return (
        EvalResult(step=request.step, sample_size=request.sample_size, reason=request.reason, seconds=seconds,
                   metrics=metrics, epoch=epoch, raw=raw),
        None,
    )


def _is_plain(value) -> bool:
    return isinstance(value, (bool, int, float, str))


def _freqs_from(config) -> tuple:
    src = getattr(config, "trigger", config)
    try:
        return (getattr(src, "freq_epochs", None), getattr(src, "freq_steps", None),
                getattr(src, "freq_secs", None), bool(getattr(src, "eval_before_train", False)))
    except Exception as exc:  # noqa: BLE001 - odd config objects
        raise ValueError(f"cannot read the trigger frequencies from {type(config).__name__}: {exc}") from None


class Evaluator:
    """AReaL's ``Evaluator``, as a drop-in: ``evaluate(evaluate_fn, epoch, step, global_step)``.

    ``config`` is AReaL's ``EvaluatorConfig`` or anything with ``freq_epochs``, ``freq_steps``,
    ``freq_secs`` and ``eval_before_train`` (an adaptive_eval config works too: its ``trigger`` section
    is used).  ``evaluate_fn`` takes no argument (AReaL style) or one :class:`EvalRequest`.  It returns
    an :class:`EvalResult`, or None when no evaluation was due (or ``evaluate_fn`` failed and
    ``on_error`` is ``skip``, the default: a failing evaluation never stops training).

    With ``eval_before_train``, call :meth:`before_train` before the first training step to evaluate the
    initial weights; if you do not, the first call of ``evaluate`` evaluates (as AReaL does).  Given
    ``total_steps``, the last step is always evaluated.

    >>> from types import SimpleNamespace
    >>> cfg = SimpleNamespace(freq_epochs=None, freq_steps=2, freq_secs=None, eval_before_train=False)
    >>> ev = Evaluator(cfg, steps_per_epoch=5)
    >>> [g for g in range(6) if ev.evaluate(lambda: {"acc": 1.0}, 0, g, g) is not None]
    [1, 3, 5]
    """

    def __init__(
        self,
        config,
        steps_per_epoch: int | None = None,
        *,
        total_steps: int | None = None,
        clock: Callable[[], float] | None = None,
        group=None,
    ):
        freq_epochs, freq_steps, freq_secs, eval_before_train = _freqs_from(config)
        if freq_epochs is not None and steps_per_epoch is None:
            raise ValueError("freq_epochs is set, so Evaluator needs steps_per_epoch to know where epochs end")
        if steps_per_epoch is not None:
            steps_per_epoch = check_step("steps_per_epoch", steps_per_epoch)
            if steps_per_epoch <= 0:
                raise ValueError(f"steps_per_epoch must be positive, got {steps_per_epoch}")
        if total_steps is not None:
            total_steps = check_step("total_steps", total_steps)
        self.config = config
        self.steps_per_epoch = steps_per_epoch
        self.total_steps = total_steps
        self.clock = clock if clock is not None else time.monotonic
        self.group = group
        self.freq_ctl = EpochStepTimeFreqCtl(
            freq_epoch=freq_epochs, freq_step=freq_steps, freq_sec=freq_secs,
            initial_epoch_value=eval_before_train, group=group, clock=self.clock,
        )
        evaluation = getattr(config, "evaluation", None)
        self.sample_size = getattr(evaluation, "sample_size", None) if evaluation is not None else None
        self.seed = getattr(evaluation, "seed", 0) if evaluation is not None else 0
        self.confidence = getattr(evaluation, "confidence", 0.95) if evaluation is not None else 0.95
        self.on_error = getattr(evaluation, "on_error", "skip") if evaluation is not None else "skip"
        self.max_retries = getattr(evaluation, "max_retries", 0) if evaluation is not None else 0
        self.last_error: BaseException | None = None

    def _request(self, step: int, reason: str) -> EvalRequest:
        rank, world = _rank_world(self.group)
        return EvalRequest(step=step, sample_size=self.sample_size, seed=self.seed, reason=reason,
                           rank=rank, world_size=world)

    def _run(self, evaluate_fn: Callable, request: EvalRequest, epoch: int | None) -> EvalResult | None:
        result, self.last_error = run_evaluation(
            evaluate_fn, request, epoch=epoch, clock=self.clock, confidence=self.confidence,
            on_error=self.on_error, max_retries=self.max_retries,
        )
        return result

    def before_train(self, evaluate_fn: Callable, global_step: int = 0) -> EvalResult | None:
        """Evaluate the initial weights (before ``global_step`` is trained), if ``eval_before_train``."""
        global_step = check_step("global_step", global_step)
        if not self.freq_ctl.initial_epoch_value or not self.freq_ctl._initial_pending:
            return None
        self.freq_ctl._initial_pending = False
        self.freq_ctl.fired()
        return self._run(evaluate_fn, self._request(global_step, "before_train"), None)

    def evaluate(self, evaluate_fn: Callable, epoch: int, step: int, global_step: int) -> EvalResult | None:
        """Evaluate if due at this step; AReaL's signature (``step`` is the step within the epoch)."""
        check_step("epoch", epoch)
        step = check_step("step", step)
        global_step = check_step("global_step", global_step)
        epochs = int(self.steps_per_epoch is not None and step == self.steps_per_epoch - 1)
        reason = self.freq_ctl.poll(epochs, 1)
        if reason is None and self.total_steps is not None and global_step == self.total_steps - 1:
            reason = "trigger:final"
            self.freq_ctl.fired()
        if reason is None:
            return None
        return self._run(evaluate_fn, self._request(global_step, reason), epoch)

    def state_dict(self) -> dict:
        return self.freq_ctl.state_dict()

    def load_state_dict(self, state_dict: Mapping) -> None:
        """Restore the schedule; also accepts the state of AReaL's ``Evaluator``."""
        self.freq_ctl.load_state_dict(state_dict)


def _rank_world(group) -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(group), dist.get_world_size(group)
    return 0, 1

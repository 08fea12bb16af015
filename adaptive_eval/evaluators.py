"""Running an ``evaluate_fn`` and the AReaL drop-in :class:`Evaluator`."""

from __future__ import annotations

import atexit
import dataclasses
import difflib
import inspect
import logging
import os
import re
import sys
import threading
import time
import traceback
import types
import typing
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence

from omegaconf import DictConfig

from adaptive_eval.distributed import (
    DistContext,
    combine_rank_summaries,
    eval_context,
    mixed_shapes,
    rank_discrepancies,
    rank_world,
    summaries_to_wire,
    warn_missing_shards,
)
from adaptive_eval.stats import summarize_outputs
from adaptive_eval.trigger import EpochStepTimeFreqCtl
from adaptive_eval.types import SAID_IN, EvalRequest, EvalResult, error_text, log_once

__all__ = [
    "CheckpointUnavailable",
    "EvalOutcome",
    "EvalTimeout",
    "EvaluationStillRunning",
    "Evaluator",
    "RemoteEvaluationError",
    "call_evaluate_fn",
    "check_step",
    "run_evaluation_outcome",
]

log = logging.getLogger("adaptive_eval")


MAX_BACKOFF_S = 60.0


def backoff_seconds(base: float, attempt: int) -> float:
    """The sleep before retry ``attempt + 1`` under ``on_error: retry``: ``base`` x 2^attempt, the doubling capped
    at a minute (or at ``base`` when that is longer).  (Uncapped, max_retries 1,100 raised OverflowError inside the
    training step, and the default 1 s with max_retries 40 would have slept 2^39 s; a probe.)"""
    return min(base * 2.0 ** min(attempt, 64), max(base, MAX_BACKOFF_S))


def check_step(name: str, value) -> int:
    """Steps are integers; anything else is a ``ValueError`` naming the argument."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        hint = ""
        if name == "steps_per_epoch" and hasattr(value, "steps_per_epoch"):
            # AReaL's call, Evaluator(config.evaluator, ft_spec): a FinetuneSpec in the place of the count
            # (found by a new-user probe: the message gave no hint)
            hint = (f" (AReaL's FinetuneSpec? pass steps_per_epoch=ft_spec.steps_per_epoch, or use "
                    "adaptive_eval.integrations.areal.Evaluator(config, ft_spec), which takes AReaL's arguments)")
        raise ValueError(f"{name} must be an integer, got {value!r}{hint}")
    return value.__index__()


# Python functions' answers, held weakly: a fresh ``functools.partial(run_eval, model=ckpt)`` per step must not
# keep its checkpoint alive (a strong cache of the callables would).  Keyed by the function (for a bound method,
# its ``__func__``); the answer depends on the function's code and defaults and on whether it is bound.
_WANTS_REQUEST: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_WANTS_REQUEST_LOCK = threading.Lock()


def _wants_request(evaluate_fn: Callable) -> bool:
    """Whether ``evaluate_fn`` takes the request: it has a positional parameter without a default (or ``*args``),
    or one named ``request`` or annotated ``EvalRequest``, default or not (``evaluate_fn(request=None)`` was called
    with no argument, and every evaluation failed on ``None.indices``: a new user's probe).

    ``evaluate_fn()`` (AReaL style) and ``evaluate_fn(verbose=False)`` are called with no argument.
    """
    bound = inspect.ismethod(evaluate_fn)
    func = evaluate_fn.__func__ if bound else evaluate_fn
    if not isinstance(func, types.FunctionType):  # partials, callable objects, builtins: inspected each time
        return _inspect_wants_request(evaluate_fn)
    key = (func.__code__, func.__defaults__ is not None and len(func.__defaults__), bound)
    with _WANTS_REQUEST_LOCK:
        cached = _WANTS_REQUEST.get(func)
    if cached is not None and cached[0] == key:
        return cached[1]
    answer = _inspect_wants_request(evaluate_fn)
    if getattr(func, "__signature__", None) is None and getattr(func, "__wrapped__", None) is None:
        with _WANTS_REQUEST_LOCK:
            _WANTS_REQUEST[func] = (key, answer)
    return answer


def _inspect_wants_request(evaluate_fn: Callable) -> bool:
    try:
        params = inspect.signature(evaluate_fn).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature: assume the request form
        return True
    return any(p.kind is p.VAR_POSITIONAL
               or (p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                   and (p.default is p.empty or p.name == "request" or _names_request(p.annotation)))
               for p in params)


def _names_request(annotation) -> bool:
    """``EvalRequest`` as an annotation: the class, or its name as a string (``from __future__ import annotations``),
    optional or not."""
    if annotation is EvalRequest:
        return True
    if not isinstance(annotation, str):
        return EvalRequest in typing.get_args(annotation)  # (EvalRequest | None, Optional[EvalRequest])
    text = re.sub(r"(typing\.)?(Optional|Union)\[|[\]'\"]", "", annotation)
    return any(part.strip().split(".")[-1] == "EvalRequest" for part in re.split(r"[|,]", text))


def call_evaluate_fn(evaluate_fn: Callable, request: EvalRequest):
    """Call ``evaluate_fn()`` (AReaL style) or ``evaluate_fn(request)``, by its signature; an ``async def`` one
    (an async inference engine's client) is run to its result (:func:`_run_awaitable`)."""
    out = evaluate_fn(request) if _wants_request(evaluate_fn) else evaluate_fn()
    if inspect.isawaitable(out):
        return _run_awaitable(out)
    return out


_LOOP: list = [None, None, None]  # [the event loop async evaluate_fns run on, its thread, the pid that made it]
_LOOP_LOCK = threading.Lock()
_AWAITING: dict = {}  # thread ident -> the concurrent future of the coroutine it waits for (see EvalTimeout)
_IN_LOOP_SAY_S = 10.0  # called from inside a running loop: said when the coroutine has not returned by then


def _background_loop():
    """The event loop every async ``evaluate_fn`` of this process runs on, in a daemon thread of its own, made at the
    first one: one loop from one evaluation to the next and across threads (the training loop's, an asynchronous
    evaluation's worker, a timeout's), so that what the function keeps (a client, a lock, a worker task) stays on
    its loop; and the caller can wait for it from inside a running loop of its own (a notebook cell)."""
    import asyncio

    with _LOOP_LOCK:
        loop, thread, pid = _LOOP
        if loop is not None and pid == os.getpid() and thread.is_alive():
            return loop
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="adaptive_eval-async-loop", daemon=True)
        thread.start()
        if _LOOP[0] is None:
            atexit.register(_close_background_loop)
        _LOOP[:] = [loop, thread, os.getpid()]
        return loop


def _close_background_loop() -> None:
    loop, thread, pid = _LOOP
    if loop is None or pid != os.getpid() or loop.is_closed():
        return
    loop.call_soon_threadsafe(loop.stop)
    thread.join(1.0)
    if not thread.is_alive():
        loop.close()


def _run_awaitable(awaitable):
    """An async ``evaluate_fn``'s result (it failed every evaluation: "must return a mapping ..., got coroutine";
    a new user's check), run on :func:`_background_loop`.  The caller waits as for any evaluation; a Ctrl-C in
    the wait, or ``evaluation.timeout_s`` running out (:class:`EvalTimeout`), cancels the coroutine (an
    interrupted one resumed inside the next evaluation, a timed-out one kept every later evaluation waiting: a new
    user's probe)."""
    import asyncio

    async def wait():
        return await awaitable

    future = asyncio.run_coroutine_threadsafe(wait(), _background_loop())
    me = threading.get_ident()
    _AWAITING[me] = future
    try:
        if asyncio._get_running_loop() is not None:  # (public get_running_loop raises where none runs)
            import concurrent.futures

            try:
                return future.result(timeout=_IN_LOOP_SAY_S)
            except concurrent.futures.TimeoutError:
                # (a client made on the caller's own loop, which waits here, never answers: a silent deadlock; a
                # new user's probe)
                log_once("async-in-loop", "an async evaluate_fn called from inside a running event loop (a notebook "
                         "cell) runs on adaptive_eval's own loop and has not returned after %g s: if it awaits "
                         "something of your loop (a client made there), it waits forever, as your loop waits for it; "
                         "make such a client inside evaluate_fn, on first use", _IN_LOOP_SAY_S)
        return future.result()
    except BaseException:
        future.cancel()
        raise
    finally:
        _AWAITING.pop(me, None)


@dataclasses.dataclass(frozen=True)
class EvalOutcome:
    """Everything one (possibly sharded) evaluation produced.

    ``result`` is None when the evaluation failed (on any rank) and was skipped; ``error`` is then this
    rank's exception, or a :class:`RemoteEvaluationError` when only other ranks failed.  In a process
    group, ``per_rank_means`` / ``per_rank_n`` give each rank's mean and item count per metric, and
    ``discrepancies`` the ranks whose mean deviated beyond the configured threshold; ``failed_ranks``
    lists the ranks whose ``evaluate_fn`` raised at the last attempt; ``gone``: it failed because a kept
    checkpoint was not there (``CheckpointUnavailable`` on every rank that failed).  All of it, ``error`` aside,
    is identical on every rank.
    """

    result: EvalResult | None
    error: BaseException | None = None
    per_rank_means: Mapping[str, list] = dataclasses.field(default_factory=dict)
    per_rank_n: Mapping[str, list] = dataclasses.field(default_factory=dict)
    discrepancies: tuple = ()
    failed_ranks: tuple = ()
    attempts: int = 1
    # This rank's per-item means by metric ({metric: {item index: mean}}), where the items are known (rank-local).
    item_values: Mapping[str, dict] = dataclasses.field(default_factory=dict)
    gone: bool = False


class CheckpointUnavailable(LookupError):
    """An ``evaluate_fn`` asked for a kept checkpoint (``request.checkpoint``) that it cannot find any more, or that
    holds another step (deleted by a keep-last-k rule, written again since): the look back is skipped, said in one
    line (no traceback: a kept file being gone is expected, not a bug).  The adapters raise it; so may yours."""


class RemoteEvaluationError(RuntimeError):
    """``evaluate_fn`` raised on another rank of the process group (its message says which and what)."""


class EvaluationStillRunning(RuntimeError):
    """An evaluation was due while one that timed out earlier still runs in its thread: it is skipped
    (reason ``error:previous-eval-still-running``) rather than started beside it."""

    reason = "error:previous-eval-still-running"


class EvalTimeout:
    """Bounds a single-process evaluation to ``timeout_s`` seconds (``evaluation.timeout_s``).

    ``evaluate_fn`` runs in a daemon worker thread and the caller waits at most ``timeout_s``; past that it
    gets a ``TimeoutError`` and training goes on.  Python cannot kill a thread: the timed-out ``evaluate_fn``
    keeps running (and holding what it holds, GPU memory included) until it returns by itself; as a daemon it
    does not keep the process alive at exit.  While it still runs, the next evaluation is not started beside
    it but skipped with :class:`EvaluationStillRunning`.  Keep one instance per evaluator: it remembers that
    thread.  Without a timeout (None) nobody builds one, and ``evaluate_fn`` runs in the caller's thread.

    Not used for a sharded evaluation (a process group): there the other ranks give up on a rank that never
    reaches the next collective after ``distributed.timeout_s`` (``CollectiveError``), and no thread is added.
    """

    def __init__(self, timeout_s: float):
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
            raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
        self.timeout_s = float(timeout_s)
        self._abandoned: threading.Event | None = None  # set when the abandoned thread's evaluate_fn returns
        self._abandoned_step: int | None = None
        self._interrupted_box: dict | None = None  # where the thread a Ctrl-C left running puts its outcome

    def rejoins(self, step: int) -> bool:
        """Whether the evaluation of ``step`` a Ctrl-C left running in its thread is still running: the same step's
        evaluation run again (the loop retrying the interrupted step) waits for it and takes its outcome (it was
        skipped as "the one that timed out ... is still running"; a new user's probe)."""
        return self._interrupted_box is not None and self.still_running == step

    @property
    def still_running(self) -> int | None:
        """The step of a timed-out evaluation whose thread has not returned yet, else None."""
        # (its own flag, not Thread.is_alive(): a Ctrl-C in Thread.join() marks the thread stopped while it runs on,
        # CPython 3.11's _wait_for_tstate_lock, and the next evaluation ran beside it; found by a probe)
        if self._abandoned is not None and self._abandoned.is_set():
            self._abandoned = self._abandoned_step = None
        return self._abandoned_step

    def call(self, fn: Callable, *args, step: int):
        """``fn(*args)`` in a daemon thread: its value or exception, or ``TimeoutError`` after ``timeout_s``.  The
        evaluation of ``step`` a Ctrl-C left running (:meth:`rejoins`) is waited for instead of run again."""
        if self.rejoins(step):
            box, done, self._interrupted_box = self._interrupted_box, self._abandoned, None
            if not done.wait(min(self.timeout_s, threading.TIMEOUT_MAX)):
                log.error("evaluate_fn, interrupted at step %d and left running, is still running after "
                          "evaluation.timeout_s=%g s more", step, self.timeout_s)
                raise TimeoutError(f"evaluate_fn did not return within evaluation.timeout_s={self.timeout_s:g} s at "
                                   f"step {step} (interrupted, then waited for); it is left running in its thread")
            self._abandoned = self._abandoned_step = None
            return self._outcome(box)
        box: dict = {}
        began, done = threading.Event(), threading.Event()

        def target():
            began.set()
            try:
                box["value"] = fn(*args)
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
                box["error"] = exc
            finally:
                done.set()

        thread = threading.Thread(target=target, name=f"adaptive_eval-evaluate-step{step}", daemon=True)
        try:
            thread.start()
            thread.join(min(self.timeout_s, threading.TIMEOUT_MAX))
        except BaseException:
            # A Ctrl-C in the start or the wait: the evaluation runs on in its thread, and a due one waits for it, as
            # for a timed out one (the next ones ran beside it; found by a probe).  (still_running forgets a thread
            # that has ended.)  (A thread that never starts is none: the Ctrl-C came before it ran anything; one that
            # is about to, its start interrupted after the thread was made, is seen to begin within a moment.)
            if began.wait(1.0):
                self._abandoned, self._abandoned_step, self._interrupted_box = done, step, box
            raise
        awaiting = _AWAITING.get(thread.ident)
        if not done.is_set() and awaiting is not None:
            # an async evaluate_fn: its coroutine is cancelled, and its thread returns (Python cannot stop a thread,
            # but asyncio can stop a coroutine at its next await)
            awaiting.cancel()
            if done.wait(1.0):
                box.clear()
                log.error("evaluate_fn (async) did not return at step %d within evaluation.timeout_s=%g s: its "
                          "coroutine was cancelled", step, self.timeout_s)
                raise TimeoutError(f"evaluate_fn did not return within evaluation.timeout_s={self.timeout_s:g} s at "
                                   f"step {step}; its coroutine was cancelled")
        if not done.is_set():
            self._abandoned, self._abandoned_step, self._interrupted_box = done, step, None
            frame = sys._current_frames().get(thread.ident)
            stack = traceback.extract_stack(frame) if frame is not None else []
            names = [f.name for f in stack]
            stack = stack[names.index("target") + 1:] if "target" in names else stack  # from _attempt on
            where = "".join(traceback.format_list(stack)) or "(not known)\n"
            log.error("evaluate_fn is still running at step %d after evaluation.timeout_s=%g s; left running in "
                      "daemon thread %r (Python cannot stop a thread), it is at:\n%s", step, self.timeout_s,
                      thread.name, where)
            raise TimeoutError(f"evaluate_fn did not return within evaluation.timeout_s={self.timeout_s:g} s at "
                               f"step {step}; it is left running in daemon thread {thread.name!r}")
        return self._outcome(box)

    @staticmethod
    def _outcome(box: dict):
        if "error" in box:
            error = box.pop("error")
            try:
                raise error
            finally:
                del error  # no reference cycle through the traceback
        return box["value"]


def _attempt(evaluate_fn: Callable, request: EvalRequest, precision: str | None):
    if precision is None or precision == "none":
        return call_evaluate_fn(evaluate_fn, request)
    # Autocast on CUDA when there is a GPU (where the model is, whatever the group's backend), else CPU.
    with eval_context(precision):
        return call_evaluate_fn(evaluate_fn, request)


def _seen_before(exc: BaseException, request: EvalRequest, said: dict | None) -> int | None:
    """The step at which the same failure (its type, message and the line that raised it) was logged with its
    traceback, or None (then this one is, and ``said`` remembers it).  A compute_metrics bug raised at every
    evaluation printed its 40-line traceback each time (found by a new-user probe)."""
    if said is None:
        return None
    try:
        frames = traceback.extract_tb(exc.__traceback__)
        key = (type(exc).__qualname__, error_text(exc), (frames[-1].filename, frames[-1].lineno) if frames else None)
    except Exception:  # noqa: BLE001 - an exception whose __str__ fails: logged in full, as before
        return None
    first = said.get(key)
    if first is None:
        said[key] = request.step
    return first


def evaluation_name(evaluate_fn) -> str:
    """What ``evaluate_fn`` is called in messages: ``evaluate_fn``, or a framework adapter's own words for the
    evaluation it runs, its ``_adaptive_eval_name`` (a name no user's object holds; ``evaluation_name`` renamed a
    user's failures after their own field; a review): Lightning's ``validation_step``, whose failures read
    "evaluate_fn failed", a function the user never wrote (a probe)."""
    try:
        name = getattr(evaluate_fn, "_adaptive_eval_name", None)
        if name is None:  # (a bound method of such an object: the asynchronous worker's fn(request, weights))
            name = getattr(getattr(evaluate_fn, "__self__", None), "_adaptive_eval_name", None)
    except Exception:  # noqa: BLE001 - a user's object whose __getattr__ raises: the usual words
        return "evaluate_fn"
    return name if isinstance(name, str) and name else "evaluate_fn"


def _log_failure(exc: BaseException, request: EvalRequest, attempt: int, attempts: int, where: str = "",
                 said: dict | None = None, what: str = "evaluate_fn") -> None:
    if isinstance(exc, CheckpointUnavailable):
        log.warning("the kept checkpoint of step %d was not evaluated%s (reason %s): %s", request.step, where,
                    request.reason, exc)
        return
    first = _seen_before(exc, request, said)
    # (an attempt with another to come is a warning: a retry that then succeeded was logged as an error; a probe)
    say = log.warning if attempt + 1 < attempts else log.error
    if first is not None:
        say("%s failed%s at step %d (attempt %d/%d, reason %s): %s (the same failure as at step "
            "%d, whose traceback is logged there)", what, where, request.step, attempt + 1, attempts, request.reason,
            error_text(exc), first)
        return
    say(
        "%s failed%s at step %d (attempt %d/%d, reason %s):\n%s",
        what, where, request.step, attempt + 1, attempts, request.reason,
        "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
    )


def _log_bad_output(exc: BaseException, request: EvalRequest, said: dict | None = None) -> None:
    first = _seen_before(exc, request, said)
    if first is not None:
        log.error("evaluate_fn returned a value that cannot be summarized at step %d (reason %s): %s (the "
                  "evaluation counts as failed; the same problem as at step %d, whose traceback is logged there)",
                  request.step, request.reason, error_text(exc), first)
        return
    log.error("evaluate_fn returned a value that cannot be summarized at step %d (reason %s); the evaluation "
              "counts as failed (evaluation.on_error: raise raises it):\n%s", request.step, request.reason,
              "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))


def _suite_ks(request: EvalRequest, pass_at_k):
    """The k of pass@k per due suite: those the suite's samples per item allow (AdaptiveEvaluator says once
    when a plan's answers per item leave one out)."""
    return {name: tuple(k for k in pass_at_k if k <= s.samples_per_item) for name, s in request.suites.items()}


def _summaries(outputs, request: EvalRequest, num_items: int | None, confidence: float, pass_at_k=(1,),
               suites=False, item_values: dict | None = None, kinds=None, aggregations=None, strata=None):
    """(metrics, raw) from what evaluate_fn returned; TypeError for anything that is not a mapping or None.
    ``item_values`` (a dict) receives this rank's per-item means by metric, where the items are known."""
    if outputs is None or not isinstance(outputs, Mapping):
        if type(outputs).__module__.startswith(("torch", "numpy")) and getattr(outputs, "ndim", None) == 0:
            try:  # a 0-d tensor or numpy number is a bare number (AReaL style), as a float is
                outputs = outputs.item()
            except Exception as exc:  # noqa: BLE001 - a meta or otherwise unreadable tensor
                raise TypeError(f"evaluate_fn returned a {type(outputs).__name__} that cannot be read: "
                                f"{error_text(exc)}") from exc
        if outputs is not None and not _is_plain(outputs):
            raise TypeError(
                f"evaluate_fn must return a mapping of metric name to values (or None), got {type(outputs).__name__}"
            )
        return {}, outputs
    nones = [k for k, v in outputs.items() if v is None]
    if nones and len(nones) < len(outputs):
        # A metric that could not be computed this time (one suite's grader down) beside others that could: left
        # out, said once per name; its TypeError failed the whole evaluation, every other metric with it (found by
        # a new user).  (Every metric None is still a failed evaluation: nothing came back.)
        for name in nones if request.rank == 0 else ():
            log_once(("none", name), "evaluate_fn returned None for %r at step %s: left out of the evaluation, the "
                     "other metrics kept (give NaN per item to keep an item that could not be scored as data; said "
                     "once per metric)", name, request.step)
        outputs = {k: v for k, v in outputs.items() if v is not None}
    if num_items is None:
        num_items = request.items_handed
    try:
        return _summarized(outputs, request, num_items, confidence, pass_at_k, suites, item_values, kinds,
                           aggregations, strata)
    except (TypeError, ValueError):
        raise
    except Exception as exc:  # noqa: BLE001 - a value that cannot be read (a meta tensor's NotImplementedError)
        raise TypeError(f"evaluate_fn returned a value that cannot be read: {error_text(exc)}") from exc


_NOT_DUE_SAID: set = set()  # ("not due", suite) whose results came back when not due: said once (SAID_IN)


def _drop_suites_not_due(outputs, request, configured) -> Mapping:
    """``outputs`` without the results of configured suites that are not due in this evaluation, said once per
    suite: an evaluate_fn that scores every suite each time (from a cache) had the whole evaluation refused,
    the due suite's results with it (found by a new-user probe: 3 of 5 evaluations lost)."""
    extra = sorted({k.partition("/")[0] for k in outputs if isinstance(k, str) and "/" in k
                    and k.partition("/")[0] in configured and k.partition("/")[0] not in request.suites})
    if not extra:
        return outputs
    said = SAID_IN.get()
    said = _NOT_DUE_SAID if said is None else said
    new = [name for name in extra if ("not due", name) not in said]
    if new:
        said.update(("not due", name) for name in new)
        log.warning("evaluate_fn returned results of suite%s %s, not due in this evaluation (step %s; due: %s): "
                    "left out, as at every evaluation that does not ask for them (request.suites names the suites "
                    "due; said once)", "s" if len(new) > 1 else "", ", ".join(map(repr, new)), request.step,
                    ", ".join(sorted(request.suites)) or "none")
    return {k: v for k, v in outputs.items() if not (isinstance(k, str) and k.partition("/")[0] in extra)}


def _summarized(outputs, request, num_items, confidence, pass_at_k, suites, item_values, kinds, aggregations,
                strata):
    items_of = request._handed.get("metric_items") or {}  # (EvalRequest._scored: an adapter's aggregates per set)
    if suites:
        if not isinstance(suites, bool):  # (the configured suites' names)
            outputs = _drop_suites_not_due(outputs, request, suites)
        metrics = summarize_outputs(outputs, None, confidence, pass_at_k=_suite_ks(request, pass_at_k),
                                    suites={name: s.indices for name, s in request.suites.items()},
                                    populations={name: s.size for name, s in request.suites.items()},
                                    item_values=item_values, kinds=kinds, aggregations=aggregations,
                                    strata=strata, sharded=request.world_size > 1,
                                    samples_asked={name: s.samples_per_item for name, s in request.suites.items()})
    else:
        metrics = summarize_outputs(outputs, num_items, confidence, pass_at_k=tuple(pass_at_k),
                                    ids=request._handed.get("indices"), item_values=item_values,
                                    kinds=kinds, aggregations=aggregations, sharded=request.world_size > 1,
                                    items_of=items_of)
        _check_not_empty(outputs, metrics, request, num_items)
        _check_not_gathered(outputs, metrics, request, num_items)
        if request.world_size > 1 and not request._handed.get("calls") and any(m.per_sample for m in metrics.values()):
            # (an AReaL-style evaluate_fn of no argument on two ranks, each scoring the whole set: n 402 for 201
            # items, the interval sqrt(2) too narrow, unsaid; a probe)
            log_once(("unsharded",), "evaluate_fn did not call request.indices on rank %d of %d (step %s): its values "
                     "are combined with the other ranks' as this rank's shard of the items; if every rank scores the "
                     "whole eval set (or values gathered from every rank), each item counts %d times and the interval "
                     "is too narrow: shard with request.indices(len(dataset)) (a DistributedSampler of your own "
                     "shards too; then ignore this; said once)", request.rank, request.world_size, request.step,
                     request.world_size)
    if request.world_size > 1:
        # A rank handed no items contributes nothing, whatever scalar it reported.
        metrics = {k: (v if v.per_sample or items_of.get(k, num_items) != 0 else dataclasses.replace(v, n=0, total=0.0))
                   for k, v in metrics.items()}
        # An adapter's sum, max or min over this rank's items combines across the ranks as such (EvalRequest._reduced)
        for k, how in (request._handed.get("metric_reduce") or {}).items():
            v = metrics.get(k)
            if v is not None and not v.per_sample and not v.aggregate:
                metrics[k] = dataclasses.replace(v, aggregate=how, payload=(float(v.mean), float(v.n)))
    return metrics, None


def mixed_shapes_error(per_rank) -> ValueError | None:
    """The error of a metric returned in different shapes on different ranks (:func:`mixed_shapes` of their wires),
    or None; synchronous and asynchronous evaluations say it alike."""
    mixed = mixed_shapes(per_rank)
    if mixed is None:
        return None
    return ValueError(f"evaluate_fn returned a different shape on different ranks: {mixed}; return each metric the "
                      "same way on every rank (k answers per item, or one value)")


def answers_short_of_k(per_rank: list) -> tuple[ValueError | None, list]:
    """Sharded: the error of a pass@k whose k lies above the answers of every item on every rank (one process's,
    judged on its rows; :func:`adaptive_eval.distributed.short_of_k`), and the ranks' wires without a stratum's
    pass@k of the same kind, which one process leaves out."""
    from adaptive_eval.distributed import short_of_k

    text, drop = short_of_k(per_rank)
    if drop:
        per_rank = [{k: v for k, v in row.items() if k not in drop} for row in per_rank]
    return (None if text is None else ValueError(text)), per_rank


def no_value_on_any_rank(metrics, step: int, sample_size: int | None) -> ValueError | None:
    """Sharded, without suites: the error of :func:`_check_not_empty` for the ranks' combined ``metrics`` when
    every per-sample metric came back with no value at all from every rank (each rank may return empty lists for a
    shard of no items, so only the whole says it: it read as a NaN result, the nonfinite alarm, where one process
    fails the evaluation; found in review)."""
    per = {name: m for name, m in metrics.items() if m.per_sample}
    if sample_size == 0 or not per or any(m.n or m.nan_count for m in per.values()):
        return None
    return ValueError(f"evaluate_fn returned no value for {', '.join(map(repr, per))} at step {step} on any rank, "
                      "though the request asked for "
                      f"{'the whole eval set' if sample_size is None else f'{sample_size} items'}: an empty list or "
                      "array is not a result (give NaN for an item that could not be scored; it is kept as data)")


def _check_not_gathered(outputs, metrics, request: EvalRequest, num_items: int | None) -> None:
    """More per-item values of a metric than the items ``request.indices`` handed this process (asked once).  In a
    process group, as many as every rank's items together: values gathered from every rank (accelerate's
    ``gather_for_metrics``, an all_gather) counted each item once per rank, n doubled and the interval too narrow,
    without a word (a new user's probe): a ValueError.  Otherwise (k answers per item flattened, a probe set scored
    beside the sample, per-token values) each value counts as an item: said once per metric."""
    if num_items is None or request._handed.get("calls") != 1:
        return
    for name in outputs:
        m = metrics.get(name)
        if m is None or not m.per_sample or m.clustered or m.n + m.nan_count <= num_items:
            continue
        got = m.n + m.nan_count
        if request.world_size > 1 and got in (request._handed.get("selected"), num_items * request.world_size):
            raise ValueError(f"evaluate_fn returned {got} values for {name!r} at step {request.step} on rank "
                             f"{request.rank} of {request.world_size}, every rank's items, but request.indices "
                             f"handed this rank {num_items}: return this rank's own values, not gathered from every "
                             "rank (the evaluator combines the ranks itself)")
        log_once(("more values", name), "evaluate_fn returned %d values for %r at step %s for the %d items "
                 "request.indices handed: each value counts as one item (n %d); if they are k answers per item, "
                 "return them items x k (a 2-D value) so that the item is the interval's unit (said once per "
                 "metric)", got, name, request.step, num_items, got)


def _check_not_empty(outputs, metrics, request: EvalRequest, num_items: int | None) -> None:
    """ValueError when every per-sample metric came back with no value at all (empty lists, not even a NaN) though
    this process was asked for items: it read as a NaN result, which the eval detectors took for a collapse (found
    by a new-user probe).  One empty metric beside others with values is a result (a subset that drew no item;
    AReaL's rewards when every trajectory was rejected, beside ``rejected``).  A rank of a sharded evaluation
    handed no items (``num_items`` 0) may return empty lists, and so may one that did not ask ``request.indices``
    which items are its own."""
    if num_items == 0 or request.sample_size == 0 or (num_items is None and request.world_size > 1):
        return
    per_sample = {}  # output name -> the per-sample metrics summarized from it (NAME:answers: NAME/maj@k)
    for name in outputs:
        if not isinstance(name, str):
            continue
        if name in metrics and metrics[name].per_sample:
            per_sample[name] = [metrics[name]]
        elif name.endswith(":answers"):
            head = name[: -len(":answers")] + "/maj@"
            per_sample[name] = [m for k, m in metrics.items() if k.startswith(head) and m.per_sample]
    empty = [name for name, ms in per_sample.items() if ms and all(m.n == 0 and m.nan_count == 0 for m in ms)]
    if empty and len(empty) == len(per_sample):
        asked = (f"{num_items} items" if num_items is not None else
                 "the whole eval set" if request.sample_size is None else f"{request.sample_size} items")
        raise ValueError(f"evaluate_fn returned no value for {', '.join(map(repr, empty))} at step {request.step}, "
                         f"though the request asked for {asked}: an empty list or array is not a result (give NaN for an "
                         "item that could not be scored; it is kept as data)")


def run_evaluation_outcome(evaluate_fn: Callable, request: EvalRequest, **options) -> EvalOutcome:
    """:func:`_run_evaluation_outcome`, with what it says once said once for the evaluator whose
    ``failures_said`` it is given (:data:`adaptive_eval.types.SAID_IN`), not once per process."""
    said = options.get("failures_said")
    if said is None:
        return _run_evaluation_outcome(evaluate_fn, request, **options)
    token = SAID_IN.set(said.setdefault("said once", set()))
    try:
        return _run_evaluation_outcome(evaluate_fn, request, **options)
    finally:
        SAID_IN.reset(token)


def _run_evaluation_outcome(
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
    dist_context: DistContext | None = None,
    precision: str | None = None,
    rank_discrepancy_threshold: float | None = None,
    timeout: EvalTimeout | None = None,
    pass_at_k=(1,),
    suites=False,
    metric_kinds: Mapping[str, str] | None = None,
    aggregations: Mapping | None = None,
    local: bool = False,
    strata: Mapping[str, Sequence[str]] | None = None,
    failures_said: dict | None = None,
) -> EvalOutcome:
    """Run one evaluation (this rank's shard of it, in a process group) and summarize it.

    ``local``: summarize this rank's shard only, with no collective (an asynchronous evaluation in a worker
    thread; the shards are combined later, in the training thread).

    ``metric_kinds`` (``evaluation.metric_kinds``): metric name -> ``proportion`` or ``mean``.  The outcome holds ``result`` (an :class:`EvalResult`), or ``error`` when ``evaluate_fn`` raised and
    ``on_error`` is ``skip`` (or ``retry`` and the retries ran out); with ``raise`` the exception propagates.
    ``num_items`` (if known) is how many items the request covers, used for metrics given as one scalar.

    ``precision`` (``fp32|bf16|fp16``) runs ``evaluate_fn`` under ``torch.inference_mode`` and, for the
    half precisions, autocast (see :func:`adaptive_eval.distributed.eval_context`); None or ``"none"`` runs it as is.

    **Sharded** when ``request.world_size > 1`` (every rank of ``dist_context``'s group, default the
    world, must call this at the same step with a request for its rank).  After each attempt the ranks
    exchange their outcome in one all-gather: either ``ok`` with the sufficient statistics of each
    metric, or ``error`` with the exception's text.  So a rank whose ``evaluate_fn`` raised never leaves
    the others waiting, and all ranks then act alike: all retry (``on_error=retry``, retries left), all
    skip (``skip``; retries exhausted) or all raise (``raise``: the failing rank re-raises its own
    exception, the others a :class:`RemoteEvaluationError` naming it).  On success every rank returns
    the same :class:`EvalResult`: sums, sums of squares and counts combined exactly (metric names
    in the order evaluate_fn returned them; a metric missing on a rank counts n=0 there), ``seconds`` the slowest rank's.  ``raw`` stays
    rank-local.  A return value that is not a mapping raises ``TypeError`` on every rank.

    **Timeout** (``timeout``, single process only; see :class:`EvalTimeout`): each attempt runs in a worker
    thread and fails with ``TimeoutError`` after ``timeout.timeout_s``; that error is handled like any other
    (logged with the step, skipped, or raised with ``on_error=raise``), except that it is not retried while
    the timed-out call still runs.  While it still runs, a later evaluation does not call ``evaluate_fn``:
    it fails at once with :class:`EvaluationStillRunning`.  Ignored for a sharded request, which the
    collective timeout bounds.

    **Multi-sample values** (items x samples) are summarized over items with ``pass@k`` for each k in
    ``pass_at_k`` (see :func:`adaptive_eval.stats.summarize_outputs`).  ``suites``: eval suites are
    configured (true, or their names), so every metric must be ``"<suite>/<metric>"`` of a suite in
    ``request.suites``, with one row per item of that suite's request; given the names, the results of a
    configured suite not due now are left out (said once), not an error.  A value of the wrong shape or count (a ``TypeError`` or
    ``ValueError``) is a failed evaluation, as if ``evaluate_fn`` had raised it, but not retried (on every rank
    of a group alike).
    """
    if dist_context is None:
        dist_context = DistContext()
    sharded = request.world_size > 1 and not local
    if sharded:
        rank, world = dist_context.rank_world()
        if (rank, world) != (request.rank, request.world_size):
            raise ValueError(
                f"the request is for rank {request.rank} of {request.world_size}, but this process is rank {rank} "
                f"of {world} in the process group"
            )
    if sharded or timeout is None:
        timeout = None
    elif (busy := timeout.still_running) is not None and not timeout.rejoins(request.step):
        error = EvaluationStillRunning(f"{EvaluationStillRunning.reason}: the evaluation due at step {request.step} "
                                       f"is skipped: the one that timed out at step {busy} is still running")
        log.error("%s", error)
        if on_error == "raise":
            raise error
        return EvalOutcome(None, error, attempts=0)
    attempts = 1 + (max_retries if on_error == "retry" else 0)
    start = clock()
    error: BaseException | None = None
    for attempt in range(attempts):
        outputs = None
        error = None
        item_values: dict = {}
        request._handed.pop("calls", None)  # (the indices asked in this attempt)
        try:
            if timeout is None:
                outputs = _attempt(evaluate_fn, request, precision)
            else:
                from adaptive_eval.asynchronous import SnapshotEval, _WithWeights

                fn = evaluate_fn
                if isinstance(evaluate_fn, SnapshotEval) and evaluate_fn.fn is not None \
                        and not timeout.rejoins(request.step):  # (a re-run step takes the running one's outcome)
                    # The step's weights copied here, in the training thread, before the timed thread starts: copied
                    # in it, a copy longer than timeout_s went on reading weights the optimizer was updating.
                    fn = _WithWeights(evaluate_fn.fn, evaluate_fn.snapshot(request.step))
                outputs = timeout.call(_attempt, fn, request, precision, step=request.step)
        except BaseException as exc:  # noqa: BLE001 - the user's code may raise anything
            if not evaluation_failure(exc):
                raise  # (a Ctrl-C, a SystemExit: the user's, as ever)
            from adaptive_eval.asynchronous import EvaluationCancelled

            if isinstance(exc, EvaluationCancelled) and not sharded:
                # (cancelled, it stopped at a batch: its result was never to be integrated; not an error to log or
                # retry)
                return EvalOutcome(None, exc, attempts=attempt + 1)
            if on_error == "raise" and not sharded:
                raise
            error = exc
        if not sharded:
            if error is None:
                break
            _log_failure(error, request, attempt, attempts, said=failures_said, what=evaluation_name(evaluate_fn))
            if timeout is not None and timeout.still_running is not None:
                return EvalOutcome(None, error, attempts=attempt + 1)  # no retry beside the running call
            if isinstance(error, CheckpointUnavailable):
                return EvalOutcome(None, error, attempts=attempt + 1, gone=True)  # a retry would only sleep here
            if attempt + 1 < attempts:
                sleep(backoff_seconds(retry_backoff_s, attempt))
            continue
        # Sharded: one all-gather of this attempt's outcome, whether it succeeded or not.
        seconds = clock() - start
        shape_error = None
        metrics, raw = {}, None
        if error is None:
            try:
                metrics, raw = _summaries(outputs, request, num_items, confidence, pass_at_k, suites, item_values, metric_kinds,
                                          aggregations, strata)
            except (TypeError, ValueError) as exc:
                shape_error = exc
        if error is not None:
            mine = ("error", seconds, error_text(error))
        elif shape_error is not None:
            mine = ("bad_output", seconds, f"{type(shape_error).__name__}: {shape_error}")
        else:
            mine = ("ok", seconds, summaries_to_wire(metrics))
        if error is not None:
            # Said before the exchange: a rank still inside a collective of evaluate_fn's own (AReaL's ends in a
            # barrier) holds it up to the group's timeout, and the error was said after it, so never (a probe)
            _log_failure(error, request, attempt, attempts, where=f" on rank {request.rank}", said=failures_said,
                         what=evaluation_name(evaluate_fn))
        everyone = dist_context.gather_objects(mine)
        bad = [(r, kind, text) for r, (kind, _, text) in enumerate(everyone) if kind == "bad_output"]
        mixed = None if bad else mixed_shapes_error([p if kind == "ok" else {} for kind, _, p in everyone])
        if mixed is not None:  # (alike on every rank: from what they all gathered)
            bad = [(r, "bad_output", "") for r in range(len(everyone))]
            shape_error = mixed
        if bad:
            r, _, text = bad[0]
            if shape_error is None:
                shape_error = (ValueError if text.startswith("ValueError: ") else TypeError)(
                    f"evaluate_fn returned a wrong value on rank {r}: {text.partition(': ')[2]}")
            if on_error == "raise":
                raise shape_error
            # (every rank alike: not retried, the same code returns it again)
            _log_bad_output(shape_error, request, failures_said)
            return EvalOutcome(None, shape_error, failed_ranks=tuple(r for r, _, _ in bad), attempts=attempt + 1)
        failed = tuple(r for r, (kind, _, _) in enumerate(everyone) if kind == "error")
        if not failed:
            empty, wires = answers_short_of_k([payload for _, _, payload in everyone])
            combined, means, counts = combine_rank_summaries(wires, confidence)
            if empty is None and not request.suites:
                empty = no_value_on_any_rank(combined, request.step, request.sample_size)
            if empty is not None:  # (alike on every rank: from what they all gathered)
                if on_error == "raise":
                    raise empty
                if request.rank == 0:
                    _log_bad_output(empty, request, failures_said)
                return EvalOutcome(None, empty, failed_ranks=tuple(range(len(everyone))), attempts=attempt + 1)
            if request.rank == 0:
                warn_missing_shards(counts, request.step)
            found = ()
            if rank_discrepancy_threshold is not None:
                found = tuple(rank_discrepancies(means, counts, rank_discrepancy_threshold, step=request.step))
                if found and request.rank == 0:
                    for d in found:
                        log.warning("rank discrepancy at step %d: %s", request.step, d.message)
            result = EvalResult(step=request.step, sample_size=request.sample_size, reason=request.reason,
                                seconds=max(s for _, s, _ in everyone), metrics=combined, epoch=epoch, raw=raw,
                                sets=_sets_of(request))
            return EvalOutcome(result, None, means, counts, found, (), attempt + 1, item_values)
        remote = "; ".join(f"rank {r}: {everyone[r][2]}" for r in failed)
        # a kept checkpoint gone on every rank that failed (a node without the file): said in one warning line, not
        # retried (decided on what every rank gathered, so alike on all)
        gone = all(everyone[r][2].startswith(f"{CheckpointUnavailable.__name__}: ") for r in failed)
        if error is None:
            # (gone: its type is the error's own, not repeated in its text)
            error = (CheckpointUnavailable("on " + "; ".join(f"rank {r}: {everyone[r][2].partition(': ')[2]}"
                                                             for r in failed)) if gone else
                     RemoteEvaluationError(f"evaluate_fn failed at step {request.step} on {remote}"))
        if on_error == "raise":
            raise error
        if request.rank in failed:
            pass  # (said before the exchange)
        elif request.rank == min(r for r in range(request.world_size) if r not in failed):
            if gone:
                # (one warning line: CheckpointUnavailable)
                _log_failure(error, request, attempt, attempts, said=failures_said)
            else:
                (log.warning if attempt + 1 < attempts else log.error)(
                    "evaluate_fn failed at step %d (attempt %d/%d): %s", request.step, attempt + 1, attempts, remote)
        if attempt + 1 < attempts and not gone:
            sleep(backoff_seconds(retry_backoff_s, attempt))
        else:
            return EvalOutcome(None, error, failed_ranks=failed, attempts=attempt + 1, gone=gone)
    if error is not None:
        return EvalOutcome(None, error, attempts=attempts)
    seconds = clock() - start
    try:
        metrics, raw = _summaries(outputs, request, num_items, confidence, pass_at_k, suites, item_values,
                                  metric_kinds, aggregations, strata)
    except (TypeError, ValueError) as exc:
        if on_error == "raise":
            raise
        _log_bad_output(exc, request, failures_said)  # a failed evaluation, as if evaluate_fn raised it; not retried
        return EvalOutcome(None, exc, attempts=attempt + 1)
    return EvalOutcome(
        EvalResult(step=request.step, sample_size=request.sample_size, reason=request.reason, seconds=seconds,
                   metrics=metrics, epoch=epoch, raw=raw, sets=_sets_of(request)),
        None,
        attempts=attempt + 1,
        item_values=item_values,
    )


def _sets_of(request) -> dict:
    """The eval sets of each metric a framework adapter noted (:meth:`EvalRequest._from_set`); {} without."""
    return dict(request._handed.get("metric_sets") or {})


def evaluation_failure(exc: BaseException) -> bool:
    """Whether ``exc`` from ``evaluate_fn`` fails the evaluation (handled by ``on_error``), rather than going up as a
    Ctrl-C or a SystemExit does: any ``Exception``, and asyncio's ``CancelledError`` (a ``BaseException``: an
    evaluate_fn's ``asyncio.run(...)`` whose request was cancelled killed training under ``on_error: skip``; found
    by a probe)."""
    cancelled = getattr(sys.modules.get("asyncio"), "CancelledError", ())  # (only if asyncio was imported)
    return isinstance(exc, (Exception, cancelled))


def _is_plain(value) -> bool:
    """A bare number evaluate_fn may return (kept as ``EvalResult.raw``, AReaL style); not text: a string
    there is a mistake (it was kept as raw and counted as a good evaluation)."""
    return isinstance(value, (bool, int, float))


_FREQ_KEYS = ("freq_epochs", "freq_steps", "freq_secs", "eval_before_train", "independent")


def _plain_config(config):
    """A plain dict config as the object :class:`Evaluator` reads: an adaptive_eval config (it has ``trigger``)
    typed and checked as ``load_config`` would (every section of it is read: ``evaluation``, ``distributed``),
    else AReaL's frequencies as attributes.  An unknown key, or none of the three frequencies, is an error: it
    read as "never evaluate" (found by a new-user probe: ``Evaluator({"freq_steps": 5})`` never evaluated)."""
    if isinstance(config, DictConfig):
        from adaptive_eval.config import areal_view

        return areal_view(config) or config  # (AReaL's EvaluatorConfig as an OmegaConf node: its fields)
    if not isinstance(config, Mapping):
        return config
    if "trigger" in config:
        from adaptive_eval.config import as_config

        return as_config(dict(config))
    from adaptive_eval.config import _AREAL_FIELDS, areal_view

    if any(str(k) in _AREAL_FIELDS and k not in _FREQ_KEYS for k in config):
        # AReaL's EvaluatorConfig as a dict (dataclasses.asdict, a YAML section): its experiment_name, trial_name
        # and fileroot were "unknown keys" here, where the shim took them (a probe)
        return areal_view(config)
    unknown = sorted(str(k) for k in config if k not in _FREQ_KEYS)
    if unknown:
        hints = [f"{k!r} (did you mean {close[0]!r}?)" if close else repr(k)
                 for k in unknown for close in [difflib.get_close_matches(k, _FREQ_KEYS, n=1)]]
        raise ValueError(f"Evaluator config: unknown key{'s' if len(unknown) > 1 else ''} "
                         f"{', '.join(hints)}; the keys are {', '.join(_FREQ_KEYS)}")
    if not any(k in config for k in _FREQ_KEYS[:3]):
        raise ValueError(f"Evaluator config {dict(config)!r} has none of freq_epochs, freq_steps, freq_secs: it would "
                         "never evaluate (None disables one)")
    return types.SimpleNamespace(**{k: config.get(k) for k in _FREQ_KEYS})


def _freqs_from(config) -> tuple:
    """(freq_epochs, freq_steps, freq_secs, eval_before_train, independent) of AReaL's ``EvaluatorConfig``, an
    adaptive_eval config (its ``trigger`` section) or AReaL's frequencies as attributes (a dict: through
    :func:`_plain_config` first).  An object with none of the three frequencies (a misspelt ``freq_step``) is an
    error: it read as "never evaluate"."""
    src = getattr(config, "trigger", config)
    from adaptive_eval.config import areal_flag

    try:
        if not any(hasattr(src, k) for k in _FREQ_KEYS[:3]):
            names = [n for n in dir(src) if not n.startswith("_")]
            near = sorted({m for n in names for m in difflib.get_close_matches(n, _FREQ_KEYS[:3], n=1)})
            raise ValueError(f"{type(config).__name__} has none of freq_epochs, freq_steps, freq_secs (None "
                             "disables one; AReaL's EvaluatorConfig has all three)"
                             + (f": did you mean {', '.join(near)}?" if near else ""))
        # AReaL's EvaluatorConfig (no trigger section, no ``independent``): its counters fire on their own, as in
        # AReaL's Evaluator and as every other evaluator reads it (this one counted two frequencies jointly)
        independent = getattr(src, "independent", None)
        return (getattr(src, "freq_epochs", None), getattr(src, "freq_steps", None),
                getattr(src, "freq_secs", None), areal_flag(getattr(src, "eval_before_train", False)),
                bool(independent) if independent is not None else src is config)
    except ValueError:
        raise
    except Exception as exc:  # noqa: BLE001 - odd config objects
        raise ValueError(f"cannot read the trigger frequencies from {type(config).__name__}: {exc}") from None


class Evaluator:
    """AReaL's ``Evaluator``, as a drop-in: ``evaluate(evaluate_fn, epoch, step, global_step)``.

    ``config`` is AReaL's ``EvaluatorConfig`` or anything with ``freq_epochs``, ``freq_steps``,
    ``freq_secs`` and ``eval_before_train`` (an adaptive_eval config works too: its ``trigger`` section
    is used), or a dict of either (an unknown key, or an object with none of the three frequencies, is a
    ``ValueError``: it read as "never evaluate").  Several frequencies of AReaL's config count on their own, as
    AReaL's do; those of an adaptive_eval config as its ``trigger.independent`` says.  ``evaluate_fn`` takes no
    argument (AReaL style) or one :class:`EvalRequest`.  It returns an :class:`EvalResult`, or None when no
    evaluation was due (or
    ``evaluate_fn`` failed and ``on_error`` is ``skip``, the default: a failing evaluation never stops training).

    With ``eval_before_train``, call :meth:`before_train` before the first training step to evaluate the
    initial weights; if you do not, the first call of ``evaluate`` evaluates (as AReaL does).  Given
    ``total_steps``, the last step is always evaluated.

    In a process group (``group``, default the world, with more than one rank) every rank calls
    ``evaluate`` at every step; the schedule is deterministic, so all ranks evaluate at the same steps.
    Each rank evaluates its shard (``request.indices``) and the results are reduced exactly: every rank
    gets the same :class:`EvalResult` (see :func:`run_evaluation_outcome`).  A step with no evaluation
    due issues no collective, except with ``freq_secs``: the time trigger takes the largest elapsed time
    over the ranks (one all-reduce per step) so that skewed clocks still agree.  Collectives wait at most
    ``config.distributed.timeout_s`` (else the group's timeout).  With ``rank_discrepancy_threshold``
    (or ``config.distributed.rank_discrepancy_threshold``), a rank whose mean of a metric deviates from
    the others' by more is reported in :attr:`last_discrepancies` (and logged).  ``evaluation.timeout_s``
    bounds one evaluation in a single process (see :class:`EvalTimeout`); in a group the collective timeout does.

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
        rank_discrepancy_threshold: float | None = None,
        independent: bool | None = None,
    ):
        config = _plain_config(config)
        freq_epochs, freq_steps, freq_secs, eval_before_train, cfg_independent = _freqs_from(config)
        independent = cfg_independent if independent is None else bool(independent)
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
            independent=independent, steps_per_epoch=steps_per_epoch,
        )
        evaluation = getattr(config, "evaluation", None)
        self.sample_size = getattr(evaluation, "sample_size", None) if evaluation is not None else None
        self.seed = getattr(evaluation, "seed", 0) if evaluation is not None else 0
        self.confidence = getattr(evaluation, "confidence", 0.95) if evaluation is not None else 0.95
        self.on_error = getattr(evaluation, "on_error", "skip") if evaluation is not None else "skip"
        self.max_retries = getattr(evaluation, "max_retries", 0) if evaluation is not None else 0
        self.pass_at_k = tuple(getattr(evaluation, "pass_at_k", (1,)) or (1,)) if evaluation is not None else (1,)
        timeout_s = getattr(evaluation, "timeout_s", None) if evaluation is not None else None
        self.timeout = EvalTimeout(timeout_s) if timeout_s is not None else None  # single process only
        # An AReaL config has no evaluation section: evaluate_fn then runs as is (no inference_mode).
        self.precision = getattr(evaluation, "precision", "fp32") if evaluation is not None else None
        kinds = getattr(evaluation, "metric_kinds", None) if evaluation is not None else None
        self.metric_kinds = dict(kinds) if kinds else {}
        aggs = getattr(evaluation, "aggregations", None) if evaluation is not None else None
        self.aggregations = {k: list(v) for k, v in aggs.items()} if aggs else {}
        # (read from the same config and not used: request.suites came back empty, the results {}, the evaluation
        # synchronous, without a word; a probe)
        unread = [key for key in ("suites", "asynchronous")
                  if evaluation is not None and getattr(evaluation, key, None)]
        if unread:
            keys = " or ".join("evaluation." + k for k in unread)
            what = "request.suites is empty" if "suites" in unread else "it evaluates synchronously"
            warnings.warn(f"Evaluator, the plain schedule, does not read {keys} (ignored here: {what}); "
                          "AdaptiveEvaluator.from_config(config) does", RuntimeWarning, stacklevel=2)
        self.dist = DistContext.from_config(config, group)
        if rank_discrepancy_threshold is None:
            rank_discrepancy_threshold = getattr(getattr(config, "distributed", None), "rank_discrepancy_threshold",
                                                 None)
        self.rank_discrepancy_threshold = rank_discrepancy_threshold
        self.last_error: BaseException | None = None
        self.last_outcome: EvalOutcome | None = None
        self._failures_said: dict = {}  # failures logged with their traceback (a repeat is one line)

    @property
    def last_discrepancies(self) -> tuple:
        """The rank discrepancies found by the last evaluation (empty when none or not sharded)."""
        return self.last_outcome.discrepancies if self.last_outcome is not None else ()

    def _request(self, step: int, reason: str) -> EvalRequest:
        rank, world = self.dist.rank_world()
        return EvalRequest(step=step, sample_size=self.sample_size, seed=self.seed, reason=reason,
                           rank=rank, world_size=world)

    def _run(self, evaluate_fn: Callable, request: EvalRequest, epoch: int | None) -> EvalResult | None:
        self.last_outcome = run_evaluation_outcome(
            evaluate_fn, request, epoch=epoch, clock=self.clock, confidence=self.confidence,
            on_error=self.on_error, max_retries=self.max_retries, dist_context=self.dist,
            precision=self.precision, rank_discrepancy_threshold=self.rank_discrepancy_threshold,
            timeout=self.timeout, pass_at_k=self.pass_at_k, metric_kinds=self.metric_kinds,
            aggregations=self.aggregations, failures_said=self._failures_said,
        )
        self.last_error = self.last_outcome.error
        return self.last_outcome.result

    def before_train(self, evaluate_fn: Callable, global_step: int = 0) -> EvalResult | None:
        """Evaluate the initial weights (before ``global_step`` is trained), if ``eval_before_train``."""
        global_step = check_step("global_step", global_step)
        if not self.freq_ctl.initial_epoch_value or not self.freq_ctl._initial_pending:
            return None
        self.freq_ctl.fired()  # AReaL's way: restarts the epoch counter only (see EpochStepTimeFreqCtl.fired)
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
    # Kept for callers of the old private name; see adaptive_eval.distributed.rank_world.
    return rank_world(group)

"""Asynchronous evaluation: submit at a due step, keep training, integrate the result at a later step.

With ``evaluation.asynchronous: true`` the :class:`~adaptive_eval.AdaptiveEvaluator` hands a due evaluation
to :class:`AsyncEvaluations` (this module) instead of running it in the training step.  What runs it:

* by default a daemon thread per evaluation (:class:`DaemonThreadExecutor`);
* any ``concurrent.futures.Executor`` given as ``AdaptiveEvaluator(..., executor=...)`` (a thread pool, a
  process pool: then ``evaluate_fn`` must be picklable, a client of an inference server);
* dedicated eval ranks of a torch.distributed world (``distributed.eval_ranks``, :class:`EvalRanks`): the
  first training rank sends the weights with :func:`~adaptive_eval.distributed.broadcast_tensor_container`
  over a two-rank group, the eval rank evaluates and sends the result back, and every training rank
  integrates it at the same step.
* :class:`InlineExecutor` runs the evaluation at submission (offline replay, where the latency is modelled).

In a process group without eval ranks every training rank runs its shard (``request.indices``) in its own
worker, with no collective there; the shards are combined exactly (one all-gather of their sums, in the
training thread) at the first step at which every rank has its part, or at the fixed latency.

**Weights that stay put.**  The model keeps training while an evaluation runs, so wrap the evaluation as
:class:`SnapshotEval` ``(module, fn)``: at submission it copies the module's parameters and buffers
(:func:`snapshot_weights`: to CPU, to pinned memory, or to a given device) and later calls
``fn(request, weights)`` on that copy.  An ``fn`` that changes the copy in place is caught
(:class:`SnapshotMutated`, from the tensors' version counters, which costs nothing).  A plain
``evaluate_fn`` is submitted as it is and sees whatever weights the model has when it runs.

**When a result counts.**  A result is integrated in submission order, before the decision of the step:

* ``evaluation.async_integrate_after_steps: L`` - exactly at the first ``evaluate`` at or after submission
  step + L, waiting there if it is not done yet: the same decisions on every run (the deterministic mode,
  the one replay and the tests use);
* null - at the first ``observe``/``evaluate`` after it completed (as soon as possible; decisions then
  depend on timing).

**Full.**  With ``evaluation.max_in_flight`` evaluations running, a due evaluation waits (it stays due,
reason ``async:waiting (N in flight)``); an urgent one instead cancels the oldest non-urgent one in flight
(the last step's cancels nothing: it runs beside them, and ``close`` waits for all)
(a cancelled evaluation is never integrated: listeners get a ``cancelled`` event; one that already runs
cannot be stopped in Python, it finishes in its thread and is dropped).  When every one in flight is urgent,
the urgent one waits too.  Results are integrated in submission order, so without a fixed latency one
evaluation that never finishes stops every later one: with ``evaluation.timeout_s`` null (the default) an
``evaluate_fn`` that hangs holds its slot for good.  Once due evaluations have waited for the oldest one in
flight at ``HELD_UP_WARN_CALLS`` (20) ``evaluate`` calls, a warning (once per run; a count of steps, so the
same run says it at the same step) names its step and ``evaluation.timeout_s``.  It decides nothing.

**Blocking waits.**  ``close()``, ``state_dict()`` and, with a fixed latency, the due step wait for an
unfinished evaluation (at most ``evaluation.timeout_s`` from its submission, else ``distributed.timeout_s``,
600 s by default, or ``close(timeout_s)``).  A wait longer than ``QUIET_WAIT_S`` (1 s) is announced by a
warning that says who waits, for how long at most, why, and the key that bounds it.

**Resume.**  :meth:`AsyncEvaluations.state_dict` waits (at most the drain timeout) for the evaluations in
flight and stores their finished results (with their per-item values, for the paired comparison), still to
be integrated at the step they would have been: a run resumed from that state decides exactly as the one
that never stopped.  An evaluation that does not finish
in time is stored as lost: after a resume it counts as a failed evaluation (``async:lost``) at its step.
They are not re-submitted: the resumed model no longer has the weights of their step.

**Faults.**  An exception (or ``evaluation.timeout_s`` passing since submission) is handled by
``on_error`` at the step where it is noticed, like a synchronous failure.  When the runner breaks (an eval
rank died or did not answer within ``distributed.timeout_s``, an executor was shut down), training goes on
without evaluations: due ones are skipped with reason ``async:down (...)``, logged as an error and as
``controller/async_down`` in TensorBoard; with ``on_error: raise`` the failure raises.  After
:meth:`~adaptive_eval.AdaptiveEvaluator.close` evaluation is down in the same way, with a message that says
the evaluator was closed (whatever the executor).
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import datetime
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from adaptive_eval.types import Decision, EvalRequest, EvalResult, error_message, error_text

log = logging.getLogger("adaptive_eval")

__all__ = [
    "AsyncEvaluations",
    "DaemonThreadExecutor",
    "EvalRanks",
    "InlineExecutor",
    "SnapshotEval",
    "SnapshotMutated",
    "WeightSnapshot",
    "build_async",
    "snapshot_weights",
]


# -- weights ------------------------------------------------------------------------------------------

class SnapshotMutated(RuntimeError):
    """``evaluate_fn`` changed the weight snapshot in place (the message names the tensor)."""


class WeightSnapshot(dict):
    """Name -> tensor copies of a module's parameters and buffers, taken at one step.

    Loadable with ``module.load_state_dict(snapshot)``.  :meth:`check` raises :class:`SnapshotMutated`
    when a tensor was changed in place since the snapshot (torch's version counters: no extra pass).
    """

    def __init__(self, tensors: Mapping, step: int | None = None):
        super().__init__(tensors)
        self.step = step
        # An inference tensor has no version counter (and cannot be changed in place outside inference mode).
        self._versions = {k: (None if t.is_inference() else t._version) for k, t in self.items()}

    def check(self) -> None:
        for name, t in self.items():
            version = self._versions.get(name)
            if version is not None and t._version != version:
                raise SnapshotMutated(f"evaluate_fn modified the weight snapshot in place (tensor {name!r} of "
                                      f"step {self.step}); evaluate a copy (module.load_state_dict(weights) "
                                      "copies)")

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.values())

    def __reduce__(self):  # versions restart in another process: take them afresh there
        return (WeightSnapshot, (dict(self), self.step))


def snapshot_weights(module, device="cpu", *, pin_memory: bool = False, step: int | None = None) -> WeightSnapshot:
    """Copy ``module``'s parameters and buffers (its ``state_dict``; or a mapping of tensors) to ``device``.

    ``pin_memory`` (CPU only) puts the copy in page-locked memory, so a later transfer to an accelerator can
    overlap; without an accelerator there is nothing to pin for and a plain CPU copy is made.  The copy is
    detached from autograd and independent of the module: training may go on at once.
    """
    import torch

    tensors = module.state_dict() if hasattr(module, "state_dict") else module
    if not isinstance(tensors, Mapping):
        raise TypeError(f"snapshot_weights needs a torch.nn.Module or a mapping of tensors, got "
                        f"{type(module).__name__}")
    device = torch.device(device)
    pin = pin_memory and device.type == "cpu" and torch.cuda.is_available()
    with torch.inference_mode(False):  # ordinary tensors even when called in an evaluation: they keep versions
        out = _copies(tensors, device, pin)
    if pin or device.type == "cuda":
        torch.cuda.synchronize()
    return WeightSnapshot(out, step)


def _copies(tensors: Mapping, device, pin: bool) -> dict:
    import torch

    out = {}
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"snapshot_weights: {name!r} is a {type(t).__name__}, not a tensor")
        t = t.detach()
        if pin:
            copy = torch.empty_like(t, device="cpu", pin_memory=True)
            copy.copy_(t, non_blocking=True)
        elif t.device == device:
            copy = t.clone()
        else:
            copy = t.to(device, copy=True)
        out[name] = copy
    return out


class SnapshotEval:
    """An ``evaluate_fn`` for asynchronous evaluation: ``fn(request, weights)`` on the weights of its step.

    At submission the evaluator calls :meth:`snapshot` (in the training thread, so the copy is of the step's
    weights); the worker then calls ``fn(request, weights)`` with that :class:`WeightSnapshot`.  Called
    directly (synchronous evaluation) it snapshots and evaluates at once, so one object serves both modes.
    With dedicated eval ranks ``fn`` runs on the eval rank (:meth:`EvalRanks.serve`) and may be None here.
    """

    def __init__(self, module, fn: Callable | None = None, *, device="cpu", pin_memory: bool = False):
        self.module = module
        self.fn = fn
        self.device = device
        self.pin_memory = pin_memory

    def snapshot(self, step: int | None = None) -> WeightSnapshot:
        return snapshot_weights(self.module, self.device, pin_memory=self.pin_memory, step=step)

    def __call__(self, request):
        if self.fn is None:
            raise ValueError("SnapshotEval has no fn to evaluate with (it only sends weights to eval ranks)")
        weights = self.snapshot(request.step)
        out = self.fn(request, weights)
        weights.check()
        return out


class _WithWeights:
    """``fn(request, weights)`` as a one-argument evaluate_fn, with the mutation check after it."""

    def __init__(self, fn: Callable, weights: WeightSnapshot):
        self.fn = fn
        self.weights = weights

    def __call__(self, request):
        out = self.fn(request, self.weights)
        self.weights.check()
        return out

    @property
    def _adaptive_eval_name(self) -> str:
        from adaptive_eval.evaluators import evaluation_name

        return evaluation_name(self.fn)


class _Inside(threading.local):
    job: tuple | None = None  # (a class default: the training thread never sets it, and a getattr default raised
    #                            and caught AttributeError inside every asynchronous evaluate(), 1 us; a review)


_INSIDE = _Inside()  # (whose, step) of the evaluation this worker thread runs (job_step)


def cancel_requested() -> bool:
    """Whether the asynchronous evaluation this thread runs was cancelled (an urgent one took its place,
    ``evaluation.max_in_flight``): an evaluate_fn that scores items in a loop may stop there (the adapters' own
    evaluations do, between batches, raising :class:`EvaluationCancelled`).  Python cannot stop a thread: one that
    ran on to its end held its replica beside the urgent one's, 3 evaluations running at ``max_in_flight: 1``
    (a probe).  False outside an asynchronous evaluation, and for one in another process."""
    job = _INSIDE.job
    return job is not None and job[2] is not None and job[2].is_set()


class EvaluationCancelled(RuntimeError):
    """Raised by an evaluation that stopped because it was cancelled (:func:`cancel_requested`); its result was
    never going to be integrated."""


def job_step(whose) -> int | None:
    """The step of the asynchronous evaluation of ``whose`` (an evaluator's evaluations) this thread is running, or
    None (not inside one of theirs: another evaluator's evaluation may call this one; a review)."""
    job = _INSIDE.job
    return job[1] if job is not None and job[0] == id(whose) else None


def _run_job(fn, request: EvalRequest, weights, options: Mapping):
    """Run one evaluation in a worker (a thread, another process, an eval rank): an EvalOutcome."""
    from adaptive_eval.evaluators import run_evaluation_outcome

    outer, _INSIDE.job = _INSIDE.job, (options.get("whose"), request.step, options.get("stop"))
    try:
        return _run_job_here(fn, request, weights, options, run_evaluation_outcome)
    finally:  # (the outer job's back: an evaluator run inline inside another's evaluation cleared its marker)
        _INSIDE.job = outer


def _run_job_here(fn, request: EvalRequest, weights, options: Mapping, run_evaluation_outcome):

    if weights is not None:
        if not isinstance(weights, WeightSnapshot):
            weights = WeightSnapshot(weights, request.step)
        fn = _WithWeights(fn, weights)
    clock = options.get("clock") or time.monotonic
    try:
        return run_evaluation_outcome(
            fn, request, epoch=options.get("epoch"), clock=clock, confidence=options["confidence"],
            on_error=options["on_error"], max_retries=options["max_retries"],
            retry_backoff_s=options["retry_backoff_s"], precision=options["precision"],
            pass_at_k=tuple(options.get("pass_at_k", (1,))), suites=tuple(options.get("suites") or ()),
            metric_kinds=options.get("metric_kinds"), aggregations=options.get("aggregations"), local=True,
            strata=options.get("strata"), failures_said=options.get("failures_said"))
    except BaseException as exc:
        if isinstance(exc, Exception):
            raise
        # In a worker a KeyboardInterrupt or SystemExit stops only the evaluation, as Python stops only the thread
        # that raises it: a failed evaluation, handled by on_error.  (Raised as it was, it came back into the
        # training loop at every later step and close() could never finish; found by a probe.)  So does any other
        # BaseException (GeneratorExit, a library's own): the future's waiter caught Exception only, and such a
        # one jammed the queue for good (a probe).
        message = error_message(exc)
        what = f"{type(exc).__name__}({message!r})" if message else type(exc).__name__
        raise RuntimeError(f"evaluate_fn raised {what} in the asynchronous evaluation of step {request.step}, in "
                           "its worker: it stopped that evaluation only") from exc


# -- where it runs --------------------------------------------------------------------------------------

class InlineExecutor(cf.Executor):
    """Runs each submitted call at once, in the caller's thread (replay: the latency is modelled instead)."""

    def submit(self, fn, /, *args, **kwargs):
        future: cf.Future = cf.Future()
        future.set_running_or_notify_cancel()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - handed over through the future
            future.set_exception(exc)
        return future


class DaemonThreadExecutor(cf.Executor):
    """A new daemon thread per call: a cancelled evaluation that already runs (Python cannot stop it) never holds
    up the next one, and none keeps the process alive at exit.  (One failed by ``evaluation.timeout_s`` that still
    runs does: AdaptiveEvaluator defers the next until it returns, as a synchronous run does.)"""

    def __init__(self) -> None:
        self._shutdown = False
        self._threads: list[tuple[threading.Thread, cf.Future]] = []  # (those alive at the last submit)

    def submit(self, fn, /, *args, **kwargs):
        if self._shutdown:
            raise RuntimeError("cannot schedule new futures after shutdown")
        future: cf.Future = cf.Future()

        def target():
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:  # noqa: BLE001
                future.set_exception(exc)

        thread = threading.Thread(target=target, name="adaptive_eval-async-eval", daemon=True)
        self._threads = [(t, f) for t, f in self._threads if t.is_alive()] + [(thread, future)]
        thread.start()
        return future

    def shutdown(self, wait=True, *, cancel_futures=False):
        self._shutdown = True

    def __getstate__(self) -> dict:  # (its threads do not pickle: a copy starts none; a probe)
        return {"_shutdown": self._shutdown, "_threads": []}

    def join_finished(self, timeout_s: float = 30.0) -> None:
        """Wait (at most ``timeout_s`` in all) for the threads whose evaluation is done to end: one still frees
        what it held (a weight snapshot) after its result is in, and a daemon thread killed in torch's C++ code
        at the interpreter's exit aborted the process (``terminate called without an active exception``, exit
        status 134, after close() returned; found by a probe with a 270 MB model).  A hung evaluation's thread
        is not waited for."""
        deadline = time.monotonic() + timeout_s
        for thread, future in self._threads:
            if future.done() and thread is not threading.current_thread():
                thread.join(min(max(0.0, deadline - time.monotonic()), threading.TIMEOUT_MAX))


_IN_PROCESS = (InlineExecutor, DaemonThreadExecutor, cf.ThreadPoolExecutor)


def check_executor(executor, replica: bool = False) -> None:
    """Refuse an executor that cannot take work, before training (a shut-down pool); with ``replica`` (an adapter's
    own evaluation, on a copy of the live module) one that runs it in another process."""
    if not isinstance(executor, cf.Executor):
        raise TypeError(f"executor must be a concurrent.futures.Executor, got {type(executor).__name__}")
    if replica and isinstance(executor, cf.ProcessPoolExecutor):
        # (accepted, then every evaluation of the run failed on "cannot pickle 'weakref.ReferenceType' object"; a
        # probe)
        raise TypeError("executor is a ProcessPoolExecutor: the trainer's own evaluation runs on a replica of the "
                        "module, which does not travel to another process (thread executors only); pass a "
                        "ThreadPoolExecutor, or an evaluate_fn= that pickles")
    if getattr(executor, "_shutdown", False) or getattr(executor, "_shutdown_thread", False):
        raise RuntimeError(f"executor {type(executor).__name__} is shut down: it cannot run asynchronous "
                           "evaluations (evaluation.asynchronous)")


# -- dedicated eval ranks -------------------------------------------------------------------------------

_BEFORE_RESUME = "before the resume"


def _outcome_to_wire(outcome, items: bool = False) -> list:
    """An EvalOutcome as plain values: ``[result state, [error type, text] or None, attempts]``, and with
    ``items`` its per-item values too, when it has any (``{metric: {"<item index>": mean}}``, string keys: a
    JSON object's), which the paired comparison at its integration needs (a resumed run pairs as the one that
    never stopped).  Values stay floats: a state_dict makes NaN and infinities strict JSON."""
    # (with its aggregations' payloads: a shard's result, in a process group, is combined with the other ranks' after
    # a resume; with none its sum, max, weighted_mean... failed the combination, a review)
    result = outcome.result.state(payloads=True) if outcome.result is not None else None
    # (lists, not tuples: a state_dict is what it is after a JSON round trip)
    error = None if outcome.error is None else [_error_kind(type(outcome.error)), error_message(outcome.error)]
    if not (items and outcome.item_values):
        return [result, error, outcome.attempts]
    values = {str(m): {str(i): float(v) for i, v in vals.items()} for m, vals in outcome.item_values.items()}
    return [result, error, outcome.attempts, values]


def _error_kind(cls) -> str:
    """An exception type's name for the wire: bare for a builtin (``ValueError``), else with its module."""
    return cls.__name__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def _restored_error(kind: str, text: str) -> Exception | None:
    """The exception a state_dict stored, as its own type where that type is loaded and takes the message back
    as it was (a resumed run's ``on_error: raise`` raises what the run that never stopped raises); else None."""
    import sys

    module, _, name = kind.rpartition(".")
    cls = getattr(sys.modules.get(module or "builtins"), name, None)
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        return None
    import ast

    tries = [lambda: text]
    if issubclass(cls, LookupError) and len(text) <= 10_000:  # (KeyError's message is its argument's repr)
        tries.append(lambda: ast.literal_eval(text))
    for arg in tries:
        try:
            exc = cls(arg())
        except Exception:  # noqa: BLE001 - a type that takes other arguments, a message that is no literal
            continue
        if error_message(exc) == text:  # (an exception whose __str__ raises: no load; a probe)
            return exc
    return None


def _outcome_from_wire(wire, where: str = "on the eval rank"):
    from adaptive_eval.evaluators import EvalOutcome, RemoteEvaluationError

    result, error, attempts, *rest = wire  # (a 4th element: the per-item values, see _outcome_to_wire)
    if error is not None:
        kind, text = error
        exc = _restored_error(kind, text) if where == _BEFORE_RESUME else None
        if exc is None:
            exc = RemoteEvaluationError(f"{kind} {where}: {text}")
        return EvalOutcome(None, exc, attempts=attempts)
    values = {str(m): {int(i): float(v) for i, v in vals.items()} for m, vals in (rest[0] if rest else {}).items()}
    return EvalOutcome(EvalResult.from_state(result), attempts=attempts, item_values=values)


class EvalRanks:
    """The world split into training ranks and dedicated eval ranks (``distributed.eval_ranks``).

    Build it on **every** rank after ``init_process_group`` (it creates process groups, a collective): the
    training ranks form :attr:`train_group` (give it to ``AdaptiveEvaluator.from_config(..., group=...,
    eval_ranks=...)``), and each eval rank shares a two-rank group with the first training rank, which sends
    it the weights and gets the results back.  On an eval rank call :meth:`serve` with
    ``evaluate_fn(request, weights)``; it returns when the training ranks close their evaluator.

    ``distributed.timeout_s`` bounds one evaluation on an eval rank (sending, evaluating, answering): past it,
    or when the eval rank dies, the training ranks get an error and go on without evaluations.
    ``idle_timeout_s`` bounds how long an eval rank waits for the next job (default one day).
    """

    def __init__(self, eval_ranks: Sequence[int], *, timeout_s: float = 600.0, idle_timeout_s: float = 86400.0):
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError("distributed.eval_ranks: no torch.distributed process group is initialised")
        world = dist.get_world_size()
        ranks = [int(r) for r in eval_ranks]
        for r in ranks:
            if not 0 <= r < world:
                raise ValueError(f"distributed.eval_ranks: rank {r} is outside the world of {world} ranks "
                                 f"(0..{world - 1})")
        if len(set(ranks)) != len(ranks):
            raise ValueError(f"distributed.eval_ranks: a rank is listed twice: {ranks}")
        train = [r for r in range(world) if r not in ranks]
        if not train:
            raise ValueError(f"distributed.eval_ranks: {ranks} covers every rank of the world of {world}; "
                             "at least one rank must train")
        if not ranks:
            raise ValueError("distributed.eval_ranks is empty: there is no eval rank")
        self.eval_ranks = ranks
        self.train_ranks = train
        self.leader = train[0]
        self.rank = dist.get_rank()
        self.timeout_s = float(timeout_s)
        self.train_group = dist.new_group(train)
        idle = datetime.timedelta(seconds=min(idle_timeout_s, threading.TIMEOUT_MAX))
        self._pairs = {e: dist.new_group(sorted([self.leader, e]), timeout=idle) for e in ranks}

    @classmethod
    def from_config(cls, cfg, **kw) -> "EvalRanks":
        return cls(list(cfg.distributed.eval_ranks), timeout_s=float(cfg.distributed.timeout_s), **kw)

    @property
    def is_eval_rank(self) -> bool:
        return self.rank in self.eval_ranks

    def _group_rank(self, pair, global_rank: int) -> int:
        import torch.distributed as dist

        return dist.get_group_rank(pair, global_rank)

    def serve(self, evaluate_fn: Callable) -> int:
        """On an eval rank: evaluate each job the training ranks send, until they stop; returns the count.

        Also returns (with a warning) when the training ranks do not take an evaluation's result within
        ``distributed.timeout_s``: they gave up on this eval rank (it hung) and send it nothing more, not even the
        stop, so waiting on would end in an error when they exit (a torchrun job whose training finished exited
        1; found by a new-user probe)."""
        from adaptive_eval.distributed import CollectiveError, DistContext, broadcast_tensor_container

        if not self.is_eval_rank:
            raise RuntimeError(f"serve() runs on an eval rank; rank {self.rank} trains "
                               f"(distributed.eval_ranks: {self.eval_ranks})")
        pair = self._pairs[self.rank]
        answer = DistContext(pair, self.timeout_s)
        me = self._group_rank(pair, self.rank)
        done = 0
        from adaptive_eval.stats import warm_statistics

        warm_statistics()  # (the first job's seconds are the training ranks' cost model's too)
        while True:
            try:
                msg = broadcast_tensor_container(None, src_rank=self.leader, group=pair)  # waits for the next job
            except CollectiveError as exc:
                # The training ranks went away without a stop: they gave up on this eval rank (its evaluation ran
                # past distributed.timeout_s; its answer was sent, but nobody took it) and then exited.  Raised, it
                # failed the eval rank's process at the end of a run whose training finished (a probe).
                log.warning("eval rank %d: the training ranks went away without a stop (%s): they gave up on this "
                            "eval rank after distributed.timeout_s, or exited; serve() returns", self.rank, exc)
                return done
            if msg.get("stop"):
                return done
            request = EvalRequest(**msg["request"])
            try:
                outcome = _run_job(evaluate_fn, request, msg["weights"], msg["options"])
            except Exception as exc:  # noqa: BLE001 - on_error raise: the training ranks decide what to do
                from adaptive_eval.evaluators import EvalOutcome

                outcome = EvalOutcome(None, exc)
            # (with its per-item values: the first training rank pairs them with the previous evaluation's)
            try:
                answer.broadcast_object(_outcome_to_wire(outcome, items=True), src=me)
            except CollectiveError as exc:
                log.warning("eval rank %d: the training ranks did not take the result of step %d (%s): they gave up "
                            "on this eval rank after distributed.timeout_s, or exited; serve() returns",
                            self.rank, request.step, exc)
                return done
            done += 1

    def executor(self) -> "_EvalRankExecutor":
        if self.rank != self.leader:
            raise RuntimeError(f"only the first training rank ({self.leader}) talks to the eval ranks")
        return _EvalRankExecutor(self)


_POLL_S = 0.002
# A due evaluation that waited this many evaluate() calls for one in flight is warned about (AsyncEvaluations.held_up).
HELD_UP_WARN_CALLS = 20
# A blocking wait for an evaluation in flight (close(), state_dict(), a fixed latency's due step) that lasts longer
# than this many seconds is announced by a warning that says how long it may wait and why (AsyncEvaluations._wait).
QUIET_WAIT_S = 1.0
_CLOSED = ("the evaluator was closed: evaluate() after AdaptiveEvaluator.close() runs no evaluation; build a new "
           "AdaptiveEvaluator to evaluate again (load_state_dict() continues the run)")


class _EvalRankExecutor(cf.Executor):
    """On the first training rank: one sender thread per eval rank, taking jobs from one queue."""

    def __init__(self, layout: EvalRanks):
        self.layout = layout
        self.broken: str | None = None
        self._alive = set(layout.eval_ranks)
        self._queue: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._serve, args=(e,), name=f"adaptive_eval-eval-rank{e}",
                                          daemon=True) for e in layout.eval_ranks]
        for t in self._threads:
            t.start()

    def submit(self, run, fn, request, weights, options):  # run and fn run on the eval rank (its own fn)
        if self.broken is not None:
            raise RuntimeError(self.broken)
        future: cf.Future = cf.Future()
        self._queue.put((future, request, weights, options))
        return future

    def _serve(self, e: int) -> None:
        from adaptive_eval.distributed import DistContext, broadcast_tensor_container

        layout = self.layout
        pair = layout._pairs[e]
        # Polling waits: a blocking Work.wait() holds the GIL and would stall the training thread meanwhile.
        answer = DistContext(pair, layout.timeout_s, poll_s=_POLL_S)
        src = layout._group_rank(pair, e)
        while True:
            item = self._queue.get()
            if item is None:
                try:
                    broadcast_tensor_container({"stop": True}, src_rank=layout.leader, group=pair,
                                               timeout_s=layout.timeout_s, poll_s=_POLL_S)
                except Exception:  # noqa: BLE001 - a dead eval rank needs no stop
                    pass
                return
            future, request, weights, options = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                fields = {f.name: getattr(request, f.name) for f in dataclasses.fields(request) if f.init
                          and not f.name.startswith("_")}
                opts = {k: v for k, v in options.items() if k != "clock"}
                broadcast_tensor_container({"request": fields, "weights": dict(weights), "options": opts},
                                           src_rank=layout.leader, group=pair, timeout_s=layout.timeout_s,
                                           poll_s=_POLL_S)
                wire = answer.broadcast_object(None, src=src)
                future.set_result(_outcome_from_wire(wire, f"on eval rank {e}"))
            except Exception as exc:  # noqa: BLE001 - a dead or hung eval rank
                with self._lock:
                    self._alive.discard(e)
                    if not self._alive:
                        self.broken = f"eval rank {e} failed: {exc}"
                future.set_exception(RuntimeError(f"eval rank {e} failed (distributed.timeout_s="
                                                  f"{layout.timeout_s:g}): {exc}"))
                if not self._alive:  # nobody left to take the queued jobs
                    while True:
                        try:
                            rest = self._queue.get_nowait()
                        except queue.Empty:
                            break
                        if rest is not None and rest[0].set_running_or_notify_cancel():
                            rest[0].set_exception(RuntimeError(self.broken))
                return

    def shutdown(self, wait=True, *, cancel_futures=False, timeout_s: float | None = None):
        for _ in self._threads:
            self._queue.put(None)
        if wait:
            for t in self._threads:
                t.join(None if timeout_s is None else min(timeout_s, threading.TIMEOUT_MAX))


# -- the engine ------------------------------------------------------------------------------------------

@dataclasses.dataclass
class _Job:
    id: int
    step: int  # the step of the weights (= the submission step)
    epoch: int | None
    sample_size: int | None
    reason: str
    urgent: bool
    due_step: int | None  # fixed latency: integrated at the first evaluate at or after this step
    submitted_at: float
    future: cf.Future | None = None  # None on training ranks other than the first, and after a resume
    outcome: object = None  # a finished EvalOutcome (restored from a state, or timed out)
    held_up: int = 0  # evaluate() calls at which a due evaluation waited for this one (async:waiting), for a log
    held_up_since: int | None = None  # the first of them
    stop: threading.Event | None = None  # set when cancelled: an evaluation in a thread of this process may stop

    def record(self) -> dict:
        return {"id": self.id, "step": self.step, "epoch": self.epoch, "sample_size": self.sample_size,
                "reason": self.reason, "urgent": self.urgent, "due_step": self.due_step}


class AsyncEvaluations:
    """The evaluations in flight: submission, the rules of integration, cancellation and state.

    Used by :class:`~adaptive_eval.AdaptiveEvaluator` (one per evaluator).  With dedicated eval ranks
    ``owner`` is False on training ranks other than the first: they keep the same records (every rank takes
    the same decisions) but run nothing, and learn the outcomes from the first rank
    (:meth:`outcomes_from_wire`).  ``sharded`` (a process group without eval ranks): every rank runs its
    shard of each evaluation in its own worker, and the shards are combined when every rank has its part
    (:meth:`shards_to_wire`, :meth:`combine_shards`: one all-gather in the training thread).
    """

    def __init__(self, *, max_in_flight: int = 1, latency: int | Callable[[int], int] | None = None,
                 executor: cf.Executor | None = None, clock: Callable[[], float] = time.monotonic,
                 eval_clock: Callable[[], float] | None = None, timeout_s: float | None = None,
                 wait_limit_s: float = 600.0, owner: bool = True, options: Mapping | None = None,
                 needs_snapshot: str | None = None, group: bool = False, sharded: bool = False):
        if isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int) or max_in_flight < 1:
            raise ValueError(f"evaluation.max_in_flight must be an integer >= 1, got {max_in_flight!r}")
        self.max_in_flight = max_in_flight
        self._latency = latency
        if owner:
            if executor is None:
                executor = DaemonThreadExecutor()
            check_executor(executor)
        self.executor = executor
        self.clock = clock
        self.eval_clock = eval_clock if eval_clock is not None else clock
        if owner and eval_clock is not None and not isinstance(executor, _IN_PROCESS):
            # (it was left out without a word, and the decisions followed real time: a resume probe with a wrapper
            # around a thread pool)
            log.warning("eval_clock= is not passed to a %s: only %s are known to run their evaluations in this "
                        "process, so its evaluations are timed with time.monotonic where they run (eval-device "
                        "seconds, which the budget caps, then vary from run to run)", type(executor).__name__,
                        ", ".join(c.__name__ for c in _IN_PROCESS))
        # evaluation.timeout_s counts real seconds from a submission, as a synchronous evaluation's does, whatever
        # clock= the run was given: on a clock the loop moves 60 s a step, an evaluation of 0.3 s timed out at 120 s
        # when its thread was slower than the loop's two steps, and not when it was quicker (a new user's probe)
        self.timer = time.monotonic
        self.timeout_s = timeout_s
        self.wait_limit_s = float(wait_limit_s)
        self.owner = owner
        self.options = dict(options or {})
        self.needs_snapshot = needs_snapshot  # why a plain evaluate_fn cannot be sent (eval ranks)
        self.jobs: list[_Job] = []
        self._next_id = 0
        self.down: str | None = None  # what this process knows: the runner broke
        self.group = group  # in a process group the training ranks learn it together, at an integration
        self.down_shared: str | None = None
        self.sharded = sharded
        self._warned_plain = False
        # What bounds a wait without evaluation.timeout_s, for the error of one that ran out (close(): its own).
        self._wait_bound = (f"the wait ({self.wait_limit_s:g} s, "
                            f"{'half of ' if group else ''}distributed.timeout_s)")
        self.closed = False  # close() was called: nothing more runs (see submit)
        self._said_held_up = False  # the warning of held_up(), once per run
        self._abandoned: list[tuple[cf.Future, int]] = []  # timed out, still running in their threads: (future, step)
        self.saved: set[int] = set()  # the ids of jobs whose outcome a state_dict() holds

    def set_latency(self, latency: int | Callable[[int], int] | None) -> None:
        """The latency model: integrate each result ``latency`` (or ``latency(step)``) steps after its
        submission; None: as soon as it completes.  Replay sets it from the config or the trace."""
        self._latency = latency

    @property
    def is_down(self) -> str | None:
        """Why evaluation is off (the runner broke), as every training rank knows it at this step."""
        return self.down_shared if self.group else self.down

    @property
    def fixed_latency(self) -> bool:
        return self._latency is not None

    def latency_for(self, step: int) -> int | None:
        lat = self._latency
        if lat is None:
            return None
        return int(lat(step)) if callable(lat) else int(lat)

    # -- admission ----------------------------------------------------------------------------------
    def admit(self, decision: Decision, final: bool = False) -> tuple[Decision, _Job | None]:
        """``(decision, job to cancel)``: when full, a non-urgent evaluation waits (a deferral); an urgent one
        takes the place of the oldest non-urgent one in flight (returned; the caller cancels it).  The last
        step's (``final``) cancels nothing: it runs beside them, as ``close`` waits for them all anyway (it
        cancelled an alarm's evaluation in flight at the end of training)."""
        down = self.is_down
        if down is not None:
            return Decision(False, decision.sample_size, f"async:down ({down})", decision.urgent), None
        if len(self.jobs) < self.max_in_flight or final:
            return decision, None
        if decision.urgent:
            victim = next((j for j in self.jobs if not j.urgent), None)
            if victim is not None:
                return decision, victim
        # (what waits kept as ``deferred``: close() said "was due" of it where the decisions line said its reason)
        return (Decision(False, decision.sample_size, f"async:waiting ({len(self.jobs)} in flight)",
                         decision.urgent, deferred=decision.deferred or decision.reason), None)

    def held_up(self, step: int) -> str | None:
        """A due evaluation waits at ``step`` (``async:waiting``): count it against the oldest evaluation in
        flight (results are integrated in submission order, so it holds the slots).  The warning to log, once
        per run, when one without a fixed latency has held up due evaluations at ``HELD_UP_WARN_CALLS``
        evaluate() calls (a count of steps, not seconds: the same run logs it at the same step); else None."""
        job = self.jobs[0]
        job.held_up += 1
        if job.held_up_since is None:
            job.held_up_since = step
        if self._said_held_up or job.held_up < HELD_UP_WARN_CALLS or job.due_step is not None:
            return None  # (a fixed latency integrates it, waiting if need be, at its due step)
        self._said_held_up = True
        limit = (f"evaluation.timeout_s is {self.timeout_s:g} s" if self.timeout_s is not None else
                 "evaluation.timeout_s is null: no limit, an evaluate_fn that hangs stops every later evaluation")
        return (f"step {step}: the asynchronous evaluation of step {job.step} ({job.reason}) still runs "
                f"{self.timer() - job.submitted_at:.3g} s after its submission, and due evaluations have waited for "
                f"it at {job.held_up} evaluate() calls since step {job.held_up_since} (async:waiting, "
                f"evaluation.max_in_flight={self.max_in_flight}): no evaluation starts until it finishes; {limit}"
                # (with timeout_s set it said "Set evaluation.timeout_s" all the same; a probe)
                + (". Set evaluation.timeout_s to fail an evaluation that takes longer (close() and state_dict() "
                   f"wait for it up to {self.wait_limit_s:g} s otherwise)" if self.timeout_s is None else
                   ", after which it fails") + " (said once)")

    def cancel(self, job: _Job) -> None:
        self.jobs.remove(job)
        if job.future is not None:
            job.future.cancel()  # only stops one that has not started; a running one is dropped when done
        if job.stop is not None:
            job.stop.set()  # (and asks a running one to stop: cancel_requested)

    def submit(self, evaluate_fn: Callable, request: EvalRequest, *, epoch, urgent: bool) -> _Job:
        """Record the evaluation of ``request.step`` and, on the owner, start it (the snapshot is taken
        here, in the caller's thread)."""
        lat = self.latency_for(request.step)
        if self.needs_snapshot is not None and not isinstance(evaluate_fn, SnapshotEval):
            raise ValueError(self.needs_snapshot)  # on every training rank alike, before any collective
        job = _Job(id=self._next_id, step=request.step, epoch=epoch, sample_size=request.sample_size,
                   reason=request.reason, urgent=urgent, due_step=None if lat is None else request.step + lat,
                   submitted_at=self.timer())
        self._next_id += 1
        try:
            self._start(job, evaluate_fn, request, epoch)
        except Exception as exc:  # noqa: BLE001 - the snapshot failed (out of memory)
            # A failed evaluation, handled by on_error where it is integrated (a job without a future read as
            # "async:lost ... in flight when the state was saved"; a review).
            job.future = cf.Future()
            job.future.set_exception(exc)
        except BaseException:
            # A Ctrl-C: before the evaluation was handed to its worker (in the weights' snapshot), nothing runs and
            # nothing is counted, as in a synchronous evaluation (it was a failed one, and under on_error: raise the
            # one Ctrl-C came back a step later as a RuntimeError; found by a probe); after, it runs and is
            # integrated as any other.
            if job.future is not None:
                self.jobs.append(job)
            raise
        # (listed once its future is set: a job listed without one reads as lost by a resume, and an observe() from
        # the evaluation's own thread, or another, between the two dropped it as "async:lost"; a new user's probe)
        self.jobs.append(job)
        return job

    def _start(self, job: _Job, evaluate_fn: Callable, request: EvalRequest, epoch) -> None:
        if self.owner:
            weights = None
            fn = evaluate_fn
            if isinstance(evaluate_fn, SnapshotEval):
                weights = evaluate_fn.snapshot(request.step)
                fn = evaluate_fn.fn
            elif not self._warned_plain and not isinstance(self.executor, InlineExecutor):
                self._warned_plain = True
                log.warning("asynchronous evaluation of a plain evaluate_fn: it sees the weights the model has "
                            "while it runs, not those of step %d; wrap it as adaptive_eval.asynchronous."
                            "SnapshotEval(model, fn) to evaluate the weights of its step", request.step)
            options = dict(self.options, epoch=epoch, whose=id(self))
            if isinstance(self.executor, _IN_PROCESS):  # another process times with its own monotonic clock
                options["clock"] = self.eval_clock
                job.stop = options["stop"] = threading.Event()
            try:
                if self.closed:
                    raise RuntimeError(_CLOSED)
                job.future = self.executor.submit(_run_job, fn, request, weights, options)
            except RuntimeError as exc:  # a shut-down executor, a broken eval rank, a closed evaluator
                self.down = str(exc) if self.closed else f"{type(self.executor).__name__}: {exc}"
                job.future = cf.Future()
                job.future.set_exception(RuntimeError(f"asynchronous evaluation of step {request.step} could "
                                                      f"not be submitted: {exc}"))

    def still_running(self) -> int | None:
        """The step of an evaluation that timed out (``evaluation.timeout_s``, or the wait limit) and still runs in its
        thread, else None: no evaluation starts beside it (AdaptiveEvaluator defers, as a synchronous one does)."""
        self._abandoned = [(f, step) for f, step in self._abandoned if not f.done()]
        return self._abandoned[0][1] if self._abandoned else None

    # -- integration --------------------------------------------------------------------------------
    def _timed_out(self, job: _Job) -> bool:
        return self.timeout_s is not None and self.timer() - job.submitted_at > self.timeout_s

    def ready(self, step: int) -> bool:
        """Whether the oldest evaluation in flight is to be integrated at ``step`` (by its due step, or,
        without a fixed latency and on the owner, because it finished or timed out)."""
        if self.group and self.owner and self.down != self.down_shared and not self.sharded:
            return True  # the others must hear of it (sharded: a broken runner fails its jobs, which are then ready)
        return self._head_ready(step)

    def _head_ready(self, step: int) -> bool:
        return bool(self.jobs) and self._job_ready(self.jobs[0], step)

    def _job_ready(self, head: _Job, step: int) -> bool:
        if head.due_step is not None:
            return step >= head.due_step
        if not self.owner:
            return False
        # (no future on the owner: a job in flight when the state was saved, lost by the resume: ready at once,
        # as a failed evaluation, or its slot would stay taken for good when no timeout_s ends it)
        return head.outcome is not None or head.future is None or head.future.done() or self._timed_out(head)

    def take(self, step: int) -> list[tuple[_Job, object]]:
        """On the owner: the (job, EvalOutcome) pairs to integrate at ``step``, in submission order.  A job due
        by its fixed latency is waited for (at most its timeout); the others only if they finished."""
        out = []
        while len(out) < len(self.jobs) and self._job_ready(self.jobs[len(out)], step):
            # (taken off the list once every outcome is in, each kept on its job meanwhile: a preemption handler
            # calling state_dict() during a wait saved the state without the jobs already taken, and the resumed
            # run never evaluated those steps; found by a new user)
            job = self.jobs[len(out)]
            job.outcome = self._outcome(job, f"evaluate() at step {step}")
            out.append((job, job.outcome))
        del self.jobs[:len(out)]
        return out

    def _outcome(self, job: _Job, who: str = "", why: str = ""):
        from adaptive_eval.evaluators import EvalOutcome

        if job.outcome is not None:
            return job.outcome
        if job.future is None:
            return EvalOutcome(None, RuntimeError(f"async:lost: the evaluation of step {job.step} was in flight "
                                                  "when the state was saved and did not finish"), attempts=0)
        limit, by_timeout = self.wait_limit_s, False
        if self.timeout_s is not None:
            left = max(0.0, self.timeout_s - (self.timer() - job.submitted_at))
            if left < limit:  # (the time left of it: the message names the configured value)
                limit, by_timeout = left, True
        try:
            return self._wait(job, limit, by_timeout, who or "evaluate()",
                              why or "its result is integrated at this step (evaluation.async_integrate_after_steps)")
        except cf.TimeoutError:
            # (a thread cannot be stopped: it runs on, and none starts beside it; one failed by the wait limit too,
            # in this process's threads: 4 piled up, a probe; an eval rank's is the rank's own, said down instead)
            if not job.future.cancel() and (by_timeout or isinstance(self.executor, _IN_PROCESS)):
                self._abandoned.append((job.future, job.step))
            what = f"evaluation.timeout_s ({self.timeout_s:g} s)" if by_timeout else self._wait_bound
            return EvalOutcome(None, TimeoutError(f"the asynchronous evaluation of step {job.step} did not finish "
                                                  f"within {what}"))
        except cf.CancelledError:
            return EvalOutcome(None, RuntimeError(f"the evaluation of step {job.step} was cancelled"))
        except Exception as exc:  # noqa: BLE001 - on_error raise in the worker, a broken runner
            if not _raised_by(job.future, exc):
                raise  # a signal handler's exception while this thread waited (a preemption): the training loop's
            if "eval rank" in error_message(exc) and getattr(self.executor, "broken", None):
                self.down = self.executor.broken
            return EvalOutcome(None, exc)

    def _wait(self, job: _Job, limit: float, by_timeout: bool, who: str, why: str):
        """``job.future.result(timeout=limit)``; a wait longer than ``QUIET_WAIT_S`` on an unfinished evaluation
        is announced first (a warning: who waits, how long at most, why, and the key that bounds it)."""
        future = job.future
        # (a distributed.timeout_s above threading.TIMEOUT_MAX, 1e10 for "no limit", raised OverflowError from
        # the wait, inside the training step and close(); a probe)
        limit = min(limit, threading.TIMEOUT_MAX)
        if limit <= QUIET_WAIT_S or future.done():
            return future.result(timeout=limit)
        try:
            return future.result(timeout=QUIET_WAIT_S)
        except cf.TimeoutError:
            pass
        limit -= QUIET_WAIT_S
        bound = (f"evaluation.timeout_s ({self.timeout_s:g} s since its submission)" if by_timeout else
                 f"{self._wait_bound}: evaluation.timeout_s is "  # (it said distributed.timeout_s, half in a group)
                 + ("null" if self.timeout_s is None else f"{self.timeout_s:g} s"))
        log.warning("%s waits up to %.3g s more for the asynchronous evaluation of step %d (%s), still running %.3g s "
                    "after its submission: %s. The bound is %s; set evaluation.timeout_s to give up on an evaluation "
                    "that hangs sooner", who, limit, job.step, job.reason, self.timer() - job.submitted_at, why, bound)
        return future.result(timeout=limit)

    def take_head(self, step: int) -> list[tuple[_Job, object]]:
        """Sharded: the oldest evaluation in flight and this rank's outcome of its shard (waited for when it
        is due by a fixed latency).  One per step, so that every rank takes the same one."""
        if not self._head_ready(step):
            return []
        job = self.jobs[0]
        job.outcome = self._outcome(job, f"evaluate() at step {step}")  # (off the list once in: take())
        return [(self.jobs.pop(0), job.outcome)]

    def shards_to_wire(self, pairs) -> tuple:
        """Sharded: this rank's part of each (job, outcome) as plain values, to all-gather."""
        from adaptive_eval.distributed import summaries_to_wire

        parts = []
        for job, outcome in pairs:
            if outcome.result is not None:
                parts.append((job.id, "ok", float(outcome.result.seconds), summaries_to_wire(outcome.result.metrics),
                              outcome.attempts))
            else:
                parts.append((job.id, "error", 0.0, error_text(outcome.error), outcome.attempts))
        return parts, self.down

    def combine_shards(self, pairs, everyone: Sequence, rank: int, confidence: float,
                       discrepancy_threshold: float | None = None, suites: bool = False) -> list:
        """Sharded: the (job, outcome) pairs of the whole group from every rank's parts (the same on every
        rank): the shards' summaries combined exactly, or an error when any rank's shard failed (or, without eval
        ``suites``, when no rank returned a value of any per-sample metric); with
        ``distributed.rank_discrepancy_threshold`` the ranks whose mean deviates, as a synchronous
        evaluation finds them."""
        from adaptive_eval.distributed import combine_rank_summaries, rank_discrepancies, warn_missing_shards
        from adaptive_eval.evaluators import (
            EvalOutcome,
            RemoteEvaluationError,
            answers_short_of_k,
            mixed_shapes_error,
            no_value_on_any_rank,
        )

        self.down = self.down_shared = next((down for _, down in everyone if down is not None), None)
        out = []
        for k, (job, mine) in enumerate(pairs):
            parts = [ranks_parts[k] for ranks_parts, _ in everyone]
            if any(p[0] != job.id for p in parts):  # the records are the same on every rank: a bug if not
                raise RuntimeError(f"asynchronous evaluation: the ranks integrate different jobs at once "
                                   f"({[p[0] for p in parts]})")
            failed = [(r, p[3]) for r, p in enumerate(parts) if p[1] == "error"]
            attempts = max(p[4] for p in parts)
            if failed:
                error = mine.error if mine.error is not None else RemoteEvaluationError(
                    f"evaluate_fn failed at step {job.step} on " + "; ".join(f"rank {r}: {t}" for r, t in failed))
                out.append((job, EvalOutcome(None, error, failed_ranks=tuple(r for r, _ in failed),
                                             attempts=attempts)))
                continue
            error = mixed_shapes_error([p[3] for p in parts])  # (as a synchronous evaluation says them)
            if error is None:
                error, wires = answers_short_of_k([p[3] for p in parts])
                combined, means, counts = combine_rank_summaries(wires, confidence)
                if error is None and not suites:
                    error = no_value_on_any_rank(combined, job.step, job.sample_size)
            if error is not None:
                out.append((job, EvalOutcome(None, error, failed_ranks=tuple(range(len(parts))), attempts=attempts)))
                continue
            if rank == 0:
                warn_missing_shards(counts, job.step)
            found = ()
            if discrepancy_threshold is not None:
                found = tuple(rank_discrepancies(means, counts, discrepancy_threshold, step=job.step))
            result = EvalResult(step=job.step, sample_size=job.sample_size, reason=job.reason,
                                seconds=max(p[2] for p in parts), metrics=combined, epoch=job.epoch,
                                sets=mine.result.sets if mine.result is not None else {})
            # (this rank's per-item values of its shard: the paired comparison combines the ranks' at integration)
            out.append((job, EvalOutcome(result, None, means, counts, found, attempts=attempts,
                                         item_values=mine.item_values)))
        return out

    def outcomes_to_wire(self, pairs) -> list:
        self.down_shared = self.down
        return [(job.id, _outcome_to_wire(outcome)) for job, outcome in pairs] + [("down", self.down)]

    def outcomes_from_wire(self, wire) -> list:
        """On a training rank that is not the owner: the owner's outcomes, matched to this rank's records."""
        pairs = []
        *items, (_, down) = wire
        self.down = self.down_shared = down
        for job_id, w in items:
            job = next(j for j in self.jobs if j.id == job_id)
            self.jobs.remove(job)
            pairs.append((job, _outcome_from_wire(w, "on the first training rank")))
        return pairs

    # -- state and shutdown -------------------------------------------------------------------------
    def state_dict(self, drain_timeout_s: float | None = None) -> dict:
        """The evaluations in flight, each with its finished result (waited for, at most ``drain_timeout_s``
        in all) or marked lost."""
        from adaptive_eval.evaluators import EvalOutcome

        deadline = time.monotonic() + (self.wait_limit_s if drain_timeout_s is None else drain_timeout_s)
        jobs = []
        for job in self.jobs:
            rec = job.record()
            if self.owner:
                if job.outcome is None and job.future is not None:
                    limit, by_timeout = max(0.0, deadline - time.monotonic()), False
                    if self.timeout_s is not None:  # no longer than the run that goes on would wait for it
                        left = max(0.0, self.timeout_s - (self.timer() - job.submitted_at))
                        if left <= limit:
                            limit, by_timeout = left, True
                    try:
                        job.outcome = self._wait(job, limit, by_timeout, "state_dict()",
                                                 "the state stores its result, so that a resumed run decides as "
                                                 "this one")
                    except cf.TimeoutError:
                        if by_timeout:  # failed, as it fails in the run that goes on
                            if not job.future.cancel():
                                self._abandoned.append((job.future, job.step))
                            job.outcome = EvalOutcome(None, TimeoutError(
                                f"the asynchronous evaluation of step {job.step} did not finish within "
                                f"evaluation.timeout_s ({self.timeout_s:g} s)"))
                    except Exception as exc:  # noqa: BLE001
                        if not _raised_by(job.future, exc):
                            raise  # (a signal handler's, as in _outcome)
                        job.outcome = EvalOutcome(None, exc)
                rec["outcome"] = _outcome_to_wire(job.outcome, items=True) if job.outcome is not None else None
                if job.outcome is not None:
                    self.saved.add(job.id)  # (a resumed run integrates it: the exit warning says so)
            jobs.append(rec)
        if isinstance(self.executor, DaemonThreadExecutor):
            # (a preemption's handler saves the state and exits, often without close(): a thread whose result is in,
            # still freeing its weight snapshot in torch, aborted the process at exit, status 134; a probe)
            self.executor.join_finished(max(0.0, deadline - time.monotonic()))
        # (whether the runner is down is this process's, not the run's: a resumed evaluator has its own; one saved
        # after close() or an executor's shutdown never evaluated again, a probe)
        return {"jobs": jobs, "next_id": self._next_id}

    def load_state_dict(self, sd: Mapping) -> None:
        self.jobs = []
        for rec in sd.get("jobs", []):
            job = _Job(id=int(rec["id"]), step=int(rec["step"]), epoch=rec.get("epoch"),
                       sample_size=rec.get("sample_size"), reason=str(rec["reason"]), urgent=bool(rec["urgent"]),
                       due_step=rec.get("due_step"), submitted_at=self.timer())
            wire = rec.get("outcome")
            if wire is not None:  # (a state from before the per-item values has 3 elements)
                job.outcome = _outcome_from_wire(wire, _BEFORE_RESUME)
            self.jobs.append(job)
        self._next_id = int(sd.get("next_id", len(self.jobs)))  # (an older state's "down" is not this runner's)

    def drain(self, timeout_s: float | None = None) -> list[tuple[_Job, object]]:
        """Wait for everything in flight (at most ``timeout_s`` in all) and return it to integrate."""
        total = self.wait_limit_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + total
        out = []
        for job in list(self.jobs):
            saved, bound = self.wait_limit_s, self._wait_bound
            self.wait_limit_s = max(0.0, deadline - time.monotonic())
            self._wait_bound = f"close()'s wait ({total:g} s in all)"
            try:
                out.append((job, self._outcome(job, "close()", "close() integrates the evaluations in flight")))
            finally:
                self.wait_limit_s, self._wait_bound = saved, bound
        stuck = [job.step for job in self.jobs if job.future is not None and not job.future.done()]
        stuck += [step for future, step in self._abandoned if not future.done() and step not in stuck]
        pool = next((kind for kind in (cf.ThreadPoolExecutor, cf.ProcessPoolExecutor)
                     if isinstance(self.executor, kind)), None)
        if stuck and pool is not None:
            # Its worker threads are not daemons: Python joins them at exit, so the process would wait for the
            # hung evaluation forever after training returned (found by a new user).  So it does a process pool's
            # workers, and one failed by evaluation.timeout_s runs on as well (a probe: not said).
            log.warning("the evaluation of step(s) %s still runs in your %s after the drain timeout: Python waits "
                        "for a %s's workers at exit, so this process will not exit until it returns; pass "
                        "executor=adaptive_eval.asynchronous.DaemonThreadExecutor() (or none: "
                        "evaluation.asynchronous uses daemon threads) and set evaluation.timeout_s",
                        ", ".join(map(str, sorted(stuck))), pool.__name__, pool.__name__)
        self.jobs = []
        return out

    def close(self, timeout_s: float | None = None) -> None:
        """Shut down what runs the evaluations (the default daemon threads, the eval ranks; a user's executor is
        the user's).  An evaluation due after this is not run: it fails, and evaluation is down (``_CLOSED``),
        whatever the executor."""
        self.closed = True
        ex = self.executor
        if isinstance(ex, _EvalRankExecutor):
            ex.shutdown(wait=True, timeout_s=timeout_s if timeout_s is not None else self.wait_limit_s)
        elif isinstance(ex, DaemonThreadExecutor):
            ex.shutdown(wait=False)
            ex.join_finished(30.0 if timeout_s is None else timeout_s)
        # A user's executor is the user's to shut down.


def build_async(plain: Mapping, *, executor=None, eval_ranks: EvalRanks | None = None,
                clock: Callable[[], float] = time.monotonic, eval_clock=None, distributed: bool = False,
                rank: int = 0, world: int = 1, latency: int | Callable[[int], int] | None = None
                ) -> AsyncEvaluations:
    """The :class:`AsyncEvaluations` of an evaluator, from its plain config (checked here, before training)."""
    ev, dist_cfg = plain["evaluation"], plain["distributed"]
    if not ev["asynchronous"]:
        what = "executor" if executor is not None else "eval_ranks"
        raise ValueError(f"an {what} was given but evaluation.asynchronous is false; set it to true")
    configured = list(dist_cfg.get("eval_ranks") or [])
    if executor is not None and eval_ranks is not None:
        raise ValueError("give either an executor or eval_ranks (distributed.eval_ranks), not both")
    needs_snapshot = None
    if configured or eval_ranks is not None:
        if eval_ranks is None:
            raise ValueError(f"distributed.eval_ranks is {configured}: build adaptive_eval.asynchronous.EvalRanks"
                             ".from_config(cfg) on every rank and pass it as eval_ranks= (and its train_group as "
                             "group=)")
        if list(eval_ranks.eval_ranks) != configured:
            raise ValueError(f"distributed.eval_ranks is {configured} but the EvalRanks given has "
                             f"{eval_ranks.eval_ranks}")
        # (an eval rank's own evaluator is refused by AdaptiveEvaluator before its process group is checked)
        needs_snapshot = ("distributed.eval_ranks: the training ranks send the weights to the eval ranks, so "
                          "evaluate_fn must be adaptive_eval.asynchronous.SnapshotEval(model) (the eval rank "
                          "runs its own fn(request, weights))")
    # In a process group without eval ranks every training rank evaluates its shard in its own worker.
    sharded = distributed and eval_ranks is None and world > 1
    owner = rank == 0 or sharded
    if owner and eval_ranks is not None:
        executor = eval_ranks.executor()
    timeout = float(dist_cfg["timeout_s"])
    if latency is None:
        latency = ev.get("async_integrate_after_steps")
    options = {k: ev[k] for k in ("confidence", "on_error", "max_retries", "retry_backoff_s", "precision")}
    options["pass_at_k"] = list(ev.get("pass_at_k", [1]))
    options["suites"] = sorted(ev.get("suites") or {})  # (their names: see run_evaluation_outcome)
    options["metric_kinds"] = dict(ev.get("metric_kinds") or {})
    options["aggregations"] = {k: list(v) for k, v in (ev.get("aggregations") or {}).items()}
    from adaptive_eval.suites import reported_strata

    options["strata"] = reported_strata(ev.get("suites") or {})
    # Failures logged with their traceback (a repeat is one line): shared by this process's worker threads; eval
    # ranks get a copy with each job, so there each failure logs its traceback.
    options["failures_said"] = {}
    return AsyncEvaluations(
        max_in_flight=int(ev["max_in_flight"]), latency=latency, executor=executor, clock=clock,
        eval_clock=eval_clock, timeout_s=ev.get("timeout_s"),
        # In a group the other training ranks wait for the first one's broadcast at most distributed.timeout_s:
        # the first one gives up on a late evaluation well before that.
        wait_limit_s=0.5 * timeout if distributed else timeout, owner=owner, options=options,
        needs_snapshot=needs_snapshot, group=distributed, sharded=sharded)


def _raised_by(future, exc: BaseException) -> bool:
    """Whether ``exc``, raised while waiting on ``future``, is the evaluation's failure (the future failed: its
    ``result()`` raises, perhaps wrapped by a user's executor), not one a signal handler raised in the waiting
    thread (a preemption's, which belongs to the training loop: it was logged as a failed evaluation, and
    training went on): the future still running, or done with a result."""
    try:
        return future.done() and not future.cancelled() and future.exception(timeout=0) is not None
    except Exception:  # noqa: BLE001 - a future that cannot say: the evaluation's, as before
        return True

"""torch.distributed helpers: rank-consistent decisions, flag agreement, exact reduction of eval results.

Everything here is safe to call without a process group (or in a group of one): it then does no
collective and returns the single-process answer.  In a group, every function is a collective that
**every rank must call at the same point**; each one costs one small collective (two only for an object
payload above :data:`INLINE_BYTES`).

Collectives are issued asynchronously and waited on with the :class:`DistContext` timeout (the
configured ``distributed.timeout_s``), or with the process group's own timeout when none is given.  A
timeout, a peer that died or any other transport failure raises :class:`CollectiveError` on the waiting
rank, so a failure never becomes a hang.  After such an error the group is not reliably usable again
(as with torch.distributed itself); the usual reaction is to stop the run.  A timeout cannot be made
symmetric: gloo does not cancel the timed-out collective (``ProcessGroup.abort()``/``shutdown()`` leave
it in flight), so a rank that arrives late could complete it from the buffered data while the rank that
waited has raised, and go on issuing collectives that pair with the other rank's own (a training
all-reduce, silently mixed with ours).  So an evaluator's context that fails sets a flag in the default
group's store, and one that was away from its collectives for half the timeout or more reads it before
the next: that rank raises :class:`CollectiveError` too.  A rank that died is seen at once ("Connection
closed by peer").

Backends: with NCCL the payloads travel as CUDA tensors on the current device; with gloo (or a mixed
``cpu:gloo,cuda:nccl`` group) small payloads travel as CPU tensors.

Exit: the tensors of a finished collective stay referenced here until the backend's worker thread has let
go of them (:func:`_hold`), so a process that exits without ``destroy_process_group`` (Lightning's
``ddp_spawn`` with gloo never destroys its group) does not abort at interpreter finalization.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import datetime
import itertools
import logging
import math
import pickle
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence

from adaptive_eval.stats import (REDUCED_KINDS, aggregate_summary, from_sums, fsum, overflowed_spread, pooled_m2,
                                 pooled_moments, shard_m2)
from adaptive_eval.types import MetricSummary

log = logging.getLogger("adaptive_eval")

__all__ = [
    "INLINE_BYTES",
    "LOCAL",
    "CollectiveError",
    "DistContext",
    "RankDiscrepancy",
    "all_reduce_flags",
    "any_true",
    "broadcast_object",
    "broadcast_tensor_container",
    "combine_rank_summaries",
    "comm_device_type",
    "eval_context",
    "is_distributed",
    "rank_discrepancies",
    "rank_world",
    "reduce_summaries",
    "summaries_to_wire",
]

INLINE_BYTES = 4088
"""Pickled payloads up to this size travel in one collective (a fixed 4 KiB buffer); larger ones in two."""

_HEADER = 8  # int64 byte count in front of each inline buffer


class CollectiveError(RuntimeError):
    """A collective failed on this rank: a timeout, a peer that died or a transport error."""


_EVALUATOR_CONTEXTS = itertools.count()  # the failure flag's key of each evaluator's context (from_config)
_NUMBERED_AT_FIRST = "numbered at its first collective"  # (DistContext.failed_key until then)


def _dist():
    import torch.distributed as dist

    return dist


# -- a finished collective's tensors --------------------------------------------------------------------
# The backend's work object references the tensors of a collective, and gloo's worker thread drops its
# reference a little after the work completed (after it woke the waiting thread).  When Python has dropped
# its own references by then, that thread frees the tensor's Python object, which takes the GIL; during
# interpreter finalization taking the GIL ends the thread, and the process aborts ("terminate called
# without an active exception", SIGABRT) after training finished, when its process group was never destroyed
# (Lightning's ddp_spawn with gloo, a torchrun script without destroy_process_group; pytorch/pytorch#179291).
# The thread is late only when it is starved of CPU, so this showed as a rare failure of a whole run under
# load.  Hence each collective's tensors stay referenced here until their use count is back to what it was
# before the collective (the worker has let go), and at exit the interpreter waits a moment for that.
_HELD: list = []  # (tensor, its use count before the collective)
_HELD_LOCK = threading.Lock()
_HELD_MAX = 64  # beyond this, the oldest go (long released; only a view of one still alive keeps its count up)
_HELD_AT_EXIT_S = 1.0
_held_at_exit = False


def _use_counts(tensors) -> list[int]:
    return [t._use_count() if hasattr(t, "_use_count") else 0 for t in tensors]


def _still_used(t, before: int) -> bool:
    return not hasattr(t, "_use_count") or t._use_count() > before


_HOLD_SPIN_BYTES = 1 << 20  # a buffer this large (a weight bucket) is waited for a moment instead of held
_HOLD_SPIN_S = 0.005


def _hold(tensors, before: Sequence[int]) -> None:
    """Keep ``tensors`` (of a collective that finished, its work object dropped) referenced until the
    backend no longer references them; ``before``: their use counts before the collective.  A large buffer
    still referenced is first waited for (at most 5 ms), so that a weight bucket is not kept alive until
    the next collective."""
    global _held_at_exit
    big = [(t, n) for t, n in zip(tensors, before)
           if _still_used(t, n) and getattr(t, "nbytes", 0) >= _HOLD_SPIN_BYTES]
    if big:
        deadline = time.monotonic() + _HOLD_SPIN_S
        while any(_still_used(t, n) for t, n in big) and time.monotonic() < deadline:
            time.sleep(0.0002)
    with _HELD_LOCK:
        _HELD[:] = [(t, n) for t, n in _HELD if _still_used(t, n)]
        _HELD.extend((t, n) for t, n in zip(tensors, before) if _still_used(t, n))
        del _HELD[:-_HELD_MAX]
        if _HELD and not _held_at_exit:
            _held_at_exit = True
            atexit.register(_release_held)


def _release_held(timeout_s: float | None = None) -> bool:
    """Wait (at most ``timeout_s``; at exit, before finalization) until the backend has let go of every
    tensor held; True when it has."""
    deadline = time.monotonic() + (_HELD_AT_EXIT_S if timeout_s is None else timeout_s)
    while True:
        with _HELD_LOCK:
            _HELD[:] = [(t, n) for t, n in _HELD if _still_used(t, n)]
            if not _HELD:
                return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.001)


class _Local:
    """:data:`LOCAL`."""

    def __repr__(self) -> str:
        return "adaptive_eval.distributed.LOCAL"

    def __reduce__(self):
        return "LOCAL"


LOCAL = _Local()
"""A ``group`` meaning this process alone, inside a process group or not (replay's evaluator: with the default
group, replay() on rank 0 of a live group joined its collectives, and the other ranks' aborted; a review)."""


def is_distributed(group=None) -> bool:
    """True when a process group is initialized and ``group`` (default: the world) has more than one rank."""
    if group is LOCAL:
        return False
    dist = _dist()
    if not (dist.is_available() and dist.is_initialized()):
        return False
    return rank_world(group)[1] > 1


def rank_world(group=None) -> tuple[int, int]:
    """This process's rank in ``group`` and the group's size; ``(0, 1)`` without a process group.

    Raises ``ValueError`` when this process is not a member of ``group``.
    """
    if group is LOCAL:
        return 0, 1
    dist = _dist()
    if not (dist.is_available() and dist.is_initialized()):
        return 0, 1
    rank = dist.get_rank(group)
    if rank < 0:
        raise ValueError("this process is not a member of the given process group")
    return rank, dist.get_world_size(group)


def _backend(group) -> str:
    return str(_dist().get_backend(group)).lower()


def _wire_device(group, tensor_device_type: str = "cpu"):
    """The device a payload must be on for ``group``'s backend (NCCL: CUDA; gloo: CPU)."""
    import torch

    backend = _backend(group)
    cuda_ok = "nccl" in backend
    cpu_ok = "gloo" in backend or "mpi" in backend or "ucc" in backend or not cuda_ok
    if tensor_device_type != "cpu" and cuda_ok:
        return torch.device("cuda", torch.cuda.current_device())
    if cpu_ok:
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())


def _all_gather_flat(out, tensor, group):
    """Async all-gather of equal-sized 1-D tensors into one flat tensor (``all_gather_single`` from torch 2.12)."""
    dist = _dist()
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    return gather(out, tensor, group=group, async_op=True)


def comm_device_type(group=None) -> str:
    """``"cuda"`` when ``group`` communicates through NCCL only, else ``"cpu"`` (what eval tensors should use)."""
    if not is_distributed(group):
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return _wire_device(group, "cuda").type


@contextlib.contextmanager
def eval_context(precision: str = "fp32", device_type: str | None = None) -> Iterator[None]:
    """``torch.inference_mode`` plus, for ``bf16``/``fp16``, autocast on ``device_type``.

    ``device_type`` defaults to ``"cuda"`` when CUDA is available, ``"cpu"`` otherwise.

    >>> import torch
    >>> with eval_context("bf16", "cpu"):
    ...     y = torch.ones(2, 2) @ torch.ones(2, 2)
    >>> y.dtype, y.requires_grad
    (torch.bfloat16, False)
    """
    import torch

    dtypes = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
    if precision not in dtypes:
        raise ValueError(f"evaluation.precision must be one of fp32, bf16, fp16 here (none runs evaluate_fn without "
                         f"eval_context); got {precision!r}")
    if device_type is None:
        device_type = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.inference_mode():
        if dtypes[precision] is None:
            yield
        else:
            with torch.autocast(device_type=device_type, dtype=dtypes[precision]):
                yield


class DistContext:
    """The collectives the evaluators use, over one process group, with one timeout.

    ``group`` is a torch ``ProcessGroup`` (None: the default group); ``timeout_s`` bounds every wait
    (None: the group's own timeout).  The group is looked up at each call, so a context may be built
    before ``init_process_group``.  ``collectives`` counts the collectives this context issued.

    Without a process group, or in a group of one, every method returns the local answer at once.
    """

    def __init__(self, group=None, timeout_s: float | None = None, *, poll_s: float | None = None,
                 failed_key: str | None = None):
        if timeout_s is not None and not (timeout_s > 0 and math.isfinite(timeout_s)):
            raise ValueError(f"timeout_s must be a positive number of seconds or None, got {timeout_s!r}")
        self.group = group
        self.timeout_s = timeout_s
        # poll_s: wait by polling, sleeping this long between looks.  For a collective waited on in a
        # background thread: Work.wait() holds the GIL while it blocks, which would stall the training thread.
        self.poll_s = poll_s
        self.collectives = 0
        # The key, in the process group's store, that a rank whose collective failed sets, and every rank reads
        # before each collective (see _wait); None: no such flag
        self.failed_key = failed_key
        self._store = None  # (looked up at the first collective: the group may not exist yet)
        self._last_done = None  # time.monotonic() when this context's last collective completed

    @classmethod
    def from_config(cls, cfg, group=None) -> "DistContext":
        """Timeout from ``cfg.distributed.timeout_s`` (absent: the group's own timeout); an evaluator's context,
        whose failure flag is the ``n``-th evaluator's of this process (every rank builds its evaluators alike)."""
        section = getattr(cfg, "distributed", None)
        # (numbered at its first collective, among the evaluators that issue collectives: one built on rank 0 alone,
        # or replay's, numbered at construction, put the ranks' keys out of step, and a late rank never read the
        # flag; a review)
        return cls(group, timeout_s=getattr(section, "timeout_s", None) if section is not None else None,
                   failed_key=_NUMBERED_AT_FIRST)

    def __getstate__(self) -> dict:  # (the store does not pickle: an evaluator that had read it did not; a review)
        return {**self.__dict__, "_store": None}

    def _flag_store(self):
        """The default group's store (a key-value store every rank reaches), or None where there is none."""
        if self._store is None:
            try:
                self._store = _dist().distributed_c10d._get_default_store()
            except Exception:  # noqa: BLE001 - a backend without one, a torch without this: no flag
                self._store = False
        return self._store or None

    def _refuse_after_failure(self, what: str) -> None:
        """A rank whose collective timed out raised and stopped; a rank that came late completed it from the data
        buffered and went on issuing collectives, which paired with the other's training all-reduce: its gradient
        silently mixed with our bookkeeping, or gloo aborted on a size mismatch (a probe).  So a failure is set in
        the store, and a collective after a long gap first reads it."""
        # Only a rank that was away from its collectives for a good part of the timeout can have left another rank
        # waiting past it (collectives end together): the store is read then, not at every step (+0.36 ms a step)
        last = self._last_done
        if (self.failed_key is None or last is None
                or time.monotonic() - last < 0.5 * (self.timeout_s if self.timeout_s is not None else 1800.0)):
            return
        store = self._flag_store()
        if store is None:
            return
        try:
            failed = store.check([self.failed_key])
            said = store.get(self.failed_key).decode(errors="replace") if failed else ""
        except Exception:  # noqa: BLE001 - the store unreachable: the collective itself will say what is wrong
            return
        if failed:
            rank, world = self.rank_world()
            raise CollectiveError(f"{what} not issued on rank {rank} of {world}: a collective of this evaluator "
                                  f"already failed on another rank ({said}); its collectives would pair with other "
                                  "ones (your training's all-reduce), so this rank issues no more of them either")

    def _say_failure(self, what: str) -> None:
        store = self._flag_store() if self.failed_key is not None else None
        if store is not None:
            try:
                store.set(self.failed_key, f"rank {self.rank}: {what}")
            except Exception:  # noqa: BLE001 - best effort: the error itself is raised on this rank anyway
                pass

    # -- where we are -------------------------------------------------------------------------------
    @property
    def distributed(self) -> bool:
        return is_distributed(self.group)

    def rank_world(self) -> tuple[int, int]:
        return rank_world(self.group)

    @property
    def rank(self) -> int:
        return self.rank_world()[0]

    @property
    def world_size(self) -> int:
        return self.rank_world()[1]

    # -- plumbing -----------------------------------------------------------------------------------
    def _wait(self, what: str, issue, *tensors) -> None:
        """Issue one async collective on ``tensors`` and wait for it; any failure becomes a CollectiveError.
        The tensors stay referenced until the backend has let go of them (see :func:`_hold`)."""
        if self.failed_key is _NUMBERED_AT_FIRST:
            self.failed_key = f"adaptive_eval/failed/{next(_EVALUATOR_CONTEXTS)}"
        self._refuse_after_failure(what)
        self.collectives += 1
        before = _use_counts(tensors)
        work = None
        try:
            work = issue()
            if self.poll_s is not None:
                self._poll(work)
            elif self.timeout_s is None:
                work.wait()
            else:
                work.wait(timeout=datetime.timedelta(seconds=min(self.timeout_s, threading.TIMEOUT_MAX)))
            self._last_done = time.monotonic()
        except Exception as exc:  # noqa: BLE001 - torch raises RuntimeError, DistBackendError, ...
            self._say_failure(what)
            rank, world = self.rank_world()
            limit = f"{self.timeout_s:g} s" if self.timeout_s is not None else "the process group's timeout"
            # (the usual cause in a user's loop: a call on the main process only, ``if is_main_process:``, which
            # the others never make; it read as a bare timeout or a closed connection: a new user's probe)
            raise CollectiveError(
                f"{what} failed on rank {rank} of {world} (timeout {limit}): {type(exc).__name__}: {exc}.  In a "
                "process group every rank calls observe(), evaluate() and close() at every step, with the same "
                "global_step (a call made on the main process only leaves the others out); or a rank's evaluate_fn "
                "ran longer than distributed.timeout_s (raise it above your slowest evaluation); or one rank's "
                "evaluate_fn failed while the others were in a collective of its own (a barrier in it: its error is "
                "in that rank's log); or a peer died"
            ) from exc
        finally:
            del work
            _hold(tensors, before)

    def _poll(self, work) -> None:
        import time

        deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s
        while not work.is_completed():
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"not completed after {self.timeout_s:g} s")
            time.sleep(self.poll_s)
        work.wait()  # raises what the collective failed with

    def _global_rank(self, group_rank: int) -> int:
        dist = _dist()
        if self.group is None or self.group is dist.group.WORLD:
            return group_rank
        return dist.get_global_rank(self.group, group_rank)

    def _pack(self, payload: bytes, device):
        import torch

        buf = torch.zeros(_HEADER + INLINE_BYTES, dtype=torch.uint8)
        buf[:_HEADER] = torch.tensor([len(payload)], dtype=torch.int64).view(torch.uint8)
        if len(payload) <= INLINE_BYTES and payload:
            buf[_HEADER:_HEADER + len(payload)] = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
        return buf.to(device)

    @staticmethod
    def _length(buf) -> int:
        import torch

        return int(buf[:_HEADER].cpu().view(torch.int64)[0])

    # -- objects ------------------------------------------------------------------------------------
    def broadcast_object(self, obj=None, src: int = 0):
        """``obj`` of group rank ``src`` (the decider), returned on every rank; other ranks' ``obj`` is ignored."""
        if not self.distributed:
            return obj
        import torch

        dist = _dist()
        rank, _ = self.rank_world()
        device = _wire_device(self.group)
        payload = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL) if rank == src else b""
        buf = self._pack(payload, device)
        src_global = self._global_rank(src)
        self._wait("broadcast_object", lambda: dist.broadcast(buf, src=src_global, group=self.group, async_op=True),
                   buf)
        n = self._length(buf)
        if n <= INLINE_BYTES:
            data = bytes(buf[_HEADER:_HEADER + n].cpu().numpy())
        else:
            big = (torch.frombuffer(bytearray(payload), dtype=torch.uint8) if rank == src
                   else torch.empty(n, dtype=torch.uint8)).to(device)
            self._wait("broadcast_object", lambda: dist.broadcast(big, src=src_global, group=self.group,
                                                                  async_op=True), big)
            data = bytes(big.cpu().numpy())
        return obj if rank == src else pickle.loads(data)

    def gather_objects(self, obj) -> list:
        """Every rank's ``obj``, in rank order, on every rank (an all-gather)."""
        if not self.distributed:
            return [obj]
        import torch

        _, world = self.rank_world()
        device = _wire_device(self.group)
        payload = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        buf = self._pack(payload, device)
        out = torch.empty(world * buf.numel(), dtype=torch.uint8, device=device)
        self._wait("gather_objects", lambda: _all_gather_flat(out, buf, self.group), out, buf)
        rows = out.view(world, -1).cpu()
        lengths = [self._length(row) for row in rows]
        longest = max(lengths)
        if longest <= INLINE_BYTES:
            chunks = [bytes(row[_HEADER:_HEADER + n].numpy()) for row, n in zip(rows, lengths)]
        else:
            mine = torch.zeros(longest, dtype=torch.uint8)
            mine[:len(payload)] = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
            mine = mine.to(device)
            big = torch.empty(world * longest, dtype=torch.uint8, device=device)
            self._wait("gather_objects", lambda: _all_gather_flat(big, mine, self.group), big, mine)
            big_rows = big.view(world, -1).cpu()
            chunks = [bytes(row[:n].numpy()) for row, n in zip(big_rows, lengths)]
        return [pickle.loads(c) for c in chunks]

    # -- flags and numbers --------------------------------------------------------------------------
    def all_reduce_max(self, values: Sequence[float]) -> list[float]:
        """Element-wise maximum over ranks of a short vector of floats, in one all-reduce.

        Carries everything a step needs to agree on at once: flags as 0/1 (any rank), elapsed
        seconds (the slowest clock), ...
        """
        values = [float(v) for v in values]
        if not self.distributed or not values:
            return values
        import torch

        dist = _dist()
        t = torch.tensor(values, dtype=torch.float64, device=_wire_device(self.group))
        self._wait("all_reduce_max", lambda: dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.group,
                                                             async_op=True), t)
        return [float(v) for v in t.cpu().tolist()]

    def all_reduce_flags(self, flags: Sequence[bool]) -> list[bool]:
        """For each position, whether any rank's flag is set (one all-reduce for all of them)."""
        return [v > 0.5 for v in self.all_reduce_max([1.0 if f else 0.0 for f in flags])]

    def any_true(self, flag: bool) -> bool:
        """Whether ``flag`` is set on any rank."""
        return self.all_reduce_flags([flag])[0]

    def all_true(self, flag: bool) -> bool:
        """Whether ``flag`` is set on every rank."""
        return not self.all_reduce_flags([not flag])[0]

    def barrier(self) -> None:
        """Wait for every rank (an all-reduce of one element, so the timeout applies on every backend)."""
        self.all_reduce_max([0.0])

    # -- eval results -------------------------------------------------------------------------------
    def reduce_summaries(
        self, summaries: Mapping[str, MetricSummary], confidence: float = 0.95
    ) -> tuple[dict[str, MetricSummary], dict[str, list[float]]]:
        """Combine each rank's per-metric summaries of its shard; see :func:`combine_rank_summaries`."""
        per_rank = self.gather_objects(summaries_to_wire(summaries))
        combined, means, _ = combine_rank_summaries(per_rank, confidence)
        return combined, means


# -- exact reduction of summaries ---------------------------------------------------------------------

def summaries_to_wire(summaries: Mapping[str, MetricSummary]) -> dict[str, tuple]:
    """The sufficient statistics of each metric as plain values: ``(total, total_sq, n, binary, per_sample,
    m2, m3, m4, std)`` (``m2``: the shard's sum of squared deviations from its own mean, computed in two passes;
    ``m3``, ``m4``: of cubed and fourth-power deviations, NaN when unknown; ``std``: the shard's standard
    deviation, finite where ``m2`` overflows, values near 1e160), and for a
    multi-sample (items x samples) metric also ``(samples, within_ss, nan_count, population, k,
    within_ss2, inv_samples)``, for a custom
    aggregation ``("agg:<kind>", payload)``, for per-sample values with NaN skipped ``("nan", nan_count)``."""
    out = {}
    for name, s in summaries.items():
        wire = (float(s.total), float(s.total_sq), int(s.n), bool(s.binary), bool(s.per_sample),
                float(shard_m2(s)), float(s.m3), float(s.m4), float(s.std))
        if s.aggregate:
            wire += (f"agg:{s.aggregate}", tuple(float(x) for x in s.payload))
        elif s.clustered:
            wire += (int(s.samples), float(s.within_ss), int(s.nan_count), int(s.population), int(s.k),
                     float(s.within_ss2), float(s.inv_samples), int(s.most))
        elif s.nan_count:
            wire += ("nan", int(s.nan_count))
        out[name] = wire
    return out


_EMPTY_WIRE = (0.0, 0.0, 0, False, True, math.nan, math.nan, math.nan, math.nan)
_EXTRA = len(_EMPTY_WIRE)  # where a wire's multi-sample or aggregation fields begin


def combine_rank_summaries(
    per_rank: Sequence[Mapping[str, tuple | MetricSummary]], confidence: float = 0.95
) -> tuple[dict[str, MetricSummary], dict[str, list[float]], dict[str, list[int]]]:
    """Combine the summaries of disjoint shards, one mapping per rank, into one summary per metric.

    Returns ``(combined, per_rank_means, per_rank_n)``.  Sums and counts add up and the variance pools each
    shard's own (:func:`adaptive_eval.stats.pooled_m2`, Chan et al.), so the mean and interval equal those
    computed on all items at once, also for values far from 0 relative to their spread (to the last bits of a
    float: sums added in another order round differently, 1e-14 apart at most in a probe's suites of 201 and 31
    items; every rank gets the same combined bits, so the ranks' decisions agree).  Metric names keep the
    order in which ``evaluate_fn`` returned them (rank 0's first, then any only later ranks reported), as in a
    single process, so ``evaluation.metric: null`` tracks the same first metric on 1 and on N ranks; a metric a
    rank did not report counts ``n=0`` there (its mean NaN).  A metric is a proportion
    (Wilson interval) when every rank that has items for it reported 0/1 values.  The computation is a
    pure function of its input, so every rank that runs it on the gathered data gets the same result.

    >>> from adaptive_eval.stats import summarize
    >>> combined, means, ns = combine_rank_summaries([{"acc": summarize([1, 0, 1])}, {"acc": summarize([1])}])
    >>> combined["acc"].mean, combined["acc"].n, combined["acc"].binary, means["acc"], ns["acc"]
    (0.75, 4, True, [0.6666666666666666, 1.0], [3, 1])
    """
    rows = [{name: (_wire(v)) for name, v in part.items()} for part in per_rank]
    names = list(dict.fromkeys(name for row in rows for name in row))
    combined: dict[str, MetricSummary] = {}
    means: dict[str, list[float]] = {}
    counts: dict[str, list[int]] = {}
    for name in names:
        parts = [row.get(name, _EMPTY_WIRE) for row in rows]
        live = [p for p in parts if p[2] > 0]
        total = fsum(p[0] for p in live)
        total_sq = fsum(p[1] for p in live) if all(math.isfinite(p[1]) for p in live) else math.nan
        n = sum(p[2] for p in live)
        m2 = pooled_m2((p[2], p[0], p[5]) for p in live)
        m3, m4 = pooled_moments((p[2], p[0], p[5], p[6], p[7]) for p in live)
        binary = bool(live) and all(p[3] for p in live)
        aggregated = [p for p in parts if len(p) > _EXTRA and isinstance(p[_EXTRA], str) and p[_EXTRA] != "nan"]
        clustered = [p for p in parts if len(p) > _EXTRA and not isinstance(p[_EXTRA], str)]
        nans = sum(p[_EXTRA + 1] for p in parts if len(p) > _EXTRA and p[_EXTRA] == "nan")
        if aggregated:
            kind = aggregated[0][_EXTRA][len("agg:"):]
            payloads = [p[_EXTRA + 1] for p in aggregated]
            if kind == "weighted_mean":  # sums add up
                merged = tuple(fsum(x[i] for x in payloads) for i in range(6))
            elif kind in REDUCED_KINDS:  # (value, items) of each rank that scored items
                got = [x for x in payloads if x[1] > 0] or payloads
                merged = (reduce_values(kind, [x[0] for x in got]), fsum(x[1] for x in got))
            else:  # quantiles: the per-item values of every rank (in rank order)
                merged = tuple(v for x in payloads for v in x)
            summary = aggregate_summary(kind, merged, confidence)
        elif clustered:
            summary = from_sums(total, total_sq, n, binary, confidence, clustered=True,
                                samples=sum(p[_EXTRA] for p in clustered),
                                within_ss=fsum(p[_EXTRA + 1] for p in clustered),
                                nan_count=sum(p[_EXTRA + 2] for p in clustered),
                                population=max(p[_EXTRA + 3] for p in clustered), m2=m2,
                                k=max(p[_EXTRA + 4] for p in clustered), m3=m3, m4=m4,
                                within_ss2=fsum(p[_EXTRA + 5] if len(p) > _EXTRA + 5 else math.nan
                                                     for p in clustered),
                                inv_samples=fsum(p[_EXTRA + 6] if len(p) > _EXTRA + 6 else math.nan
                                                 for p in clustered))
            summary = dataclasses.replace(summary, most=max(p[_EXTRA + 7] if len(p) > _EXTRA + 7 else 0
                                                            for p in clustered))
        else:
            m2, std = overflowed_spread(m2, [(p[2], p[0] / p[2], p[8]) for p in live])
            summary = from_sums(total, total_sq, n, binary, confidence, m2=m2, nan_count=nans, m3=m3, m4=m4, std=std)
        per_sample = all(p[4] for p in live)
        if not per_sample:
            summary = dataclasses.replace(summary, per_sample=False)
        combined[name] = summary
        means[name] = [p[0] / p[2] if p[2] > 0 else math.nan for p in parts]
        counts[name] = [p[2] for p in parts]
    for name in _other_kind(combined):
        del combined[name], means[name], counts[name]
    return combined, means, counts


def reduce_values(kind: str, values: Sequence[float]) -> float:
    """``sum``, ``max`` or ``min`` of ``values`` as torch reduces a tensor of them: NaN when any is NaN (Python's
    ``max`` returned NaN or a number by where the NaN stood), and a sum of +inf and -inf is NaN.

    >>> reduce_values("max", [1.0, float("nan"), 3.0]), reduce_values("sum", [0.1] * 3), reduce_values("min", [2, 1])
    (nan, 0.30000000000000004, 1)
    """
    values = list(values)
    if not values or any(v != v for v in values):
        return math.nan
    if kind == "sum":
        return fsum(values) if all(math.isfinite(v) for v in values) else sum(values)
    return max(values) if kind == "max" else min(values)


_KIND_OF = re.compile(r"^(?P<base>.+)/(?P<kind>pass|best|worst)@(?P<k>\d+)$")


def _other_kind(combined: Mapping[str, MetricSummary]) -> list[str]:
    """The names a shard derived for the other kind than the whole evaluation's: each shard of an items x answers
    metric reports pass@k and best@k/worst@k where its own values are 0/1 (``summarize_rows(both=True)``), and the
    combined metric is 0/1 only if every shard's is.  A shard of rewards that happened to read all 0/1 reported pass@k
    alone, and the combined best@k counted the other shards' items only (n = 2 for 4; a fuzzing probe).  Only
    items x answers summaries are derived so (a metric of one value per item, or a scalar, that the user named so is
    kept); an items x answers metric of the user's named ``<m>/best@<k>`` beside ``<m>`` is taken for the derived one
    (the names are the library's).  With no item scored on any rank neither kind is kept, as in one process."""
    out = []
    for name, summary in combined.items():
        found = _KIND_OF.match(name)
        base = combined.get(found["base"]) if found is not None and summary.clustered else None
        if base is not None and base.clustered and ((found["kind"] == "pass") != base.binary or not base.n):
            out.append(name)
    return out


def short_of_k(per_rank: Sequence[Mapping[str, tuple]]) -> tuple[str | None, set[str]]:
    """``(error text or None, names to leave out)`` for the derived ``<m>/pass@<k>`` (best@k, worst@k) of items x
    answers metrics, judged on every rank's shard together (their wires) as one process judges its rows: a k above
    the answers every item returned, on every rank, is an error (every list empty: "no answer at all"); a stratum's
    (``<m>/stratum=<label>/pass@<k>``) is left out, as one process leaves it out.  A shard judged alone failed the
    whole evaluation, on every rank, where its items alone came back short (a probe)."""
    most: dict[str, int] = {}
    k_of: dict[str, int] = {}
    for row in per_rank:
        for name, p in row.items():
            if _KIND_OF.match(name) and len(p) > _EXTRA + 7 and not isinstance(p[_EXTRA], str):
                most[name] = max(most.get(name, 0), int(p[_EXTRA + 7]))
                k_of[name] = max(k_of.get(name, 1), int(p[_EXTRA + 4]), int(_KIND_OF.match(name)["k"]))
    short = [name for name in most if most[name] < k_of[name]]
    drop = {name for name in short if "/stratum=" in name}
    errors = [name for name in short if name not in drop]
    if not errors:
        return None, drop
    name = errors[0]
    base = _KIND_OF.match(name)["base"]
    if most[name] == 0:
        return (f"metric {base!r}: every item's list of answers is empty on every rank: evaluate_fn returned no answer "
                "at all"), drop
    return (f"metric {base!r}: k={k_of[name]} (evaluation.pass_at_k) is larger than the samples returned for every "
            f"item on every rank (at most {most[name]})"), drop


def mixed_shapes(per_rank: Sequence[Mapping[str, tuple]]) -> str | None:
    """A metric some ranks returned as items x samples and others as one value per item (their wires, as
    :func:`summaries_to_wire` makes them), said as an error's text; None when every rank's shapes agree.  Combined,
    such shards read a mean@k over both kinds of items and a pass@k over one rank's (found by a new-user probe).

    >>> import numpy as np
    >>> from adaptive_eval.stats import summarize, summarize_rows
    >>> rows = summarize_rows("acc", "acc", np.array([[1.0, 0.0], [1.0, 1.0]]), np.array([2, 2]))
    >>> mixed_shapes([summaries_to_wire(rows), summaries_to_wire({"acc": summarize([1, 0])})])
    "metric 'acc': items x samples on rank(s) 0, one value per item on rank(s) 1"
    """
    kinds: dict[str, dict[int, bool]] = {}
    for rank, part in enumerate(per_rank):
        for name, w in part.items():
            if w[2] <= 0 or (len(w) > _EXTRA and isinstance(w[_EXTRA], str) and w[_EXTRA] != "nan"):
                continue  # (no items there; an aggregation's own form)
            kinds.setdefault(name, {})[rank] = len(w) > _EXTRA and not isinstance(w[_EXTRA], str)
    for name, by_rank in kinds.items():
        if len(set(by_rank.values())) > 1:
            many = ", ".join(str(r) for r, c in by_rank.items() if c)
            one = ", ".join(str(r) for r, c in by_rank.items() if not c)
            return f"metric {name!r}: items x samples on rank(s) {many}, one value per item on rank(s) {one}"
    return None


def missing_shards(counts: Mapping[str, Sequence[int]]) -> dict[str, list[int]]:
    """The metrics some ranks have no value of while the ranks together have at least one per rank (so each
    rank's shard had items: shards differ in size by at most one), with those ranks: their shards are missing
    from the combined result (a rank's ``evaluate_fn`` returned None, another name, or only NaN).

    >>> missing_shards({"acc": [4, 0], "loss": [4, 3], "tiny": [1, 0]})
    {'acc': [1]}
    """
    out = {}
    for name, ns in counts.items():
        if len(ns) > 1 and sum(ns) >= len(ns):
            empty = [r for r, n in enumerate(ns) if n == 0]
            if empty:
                out[name] = empty
    return out


def warn_missing_shards(counts: Mapping[str, Sequence[int]], step: int) -> None:
    """Log :func:`missing_shards` (on one rank: the caller's choice)."""
    for name, ranks in missing_shards(counts).items():
        have = sum(counts[name])
        # (a rank whose values were all NaN read only "Does evaluate_fn return it on every rank?"; a probe)
        log.warning("step %d: metric %r has no finite value from rank(s) %s (the other ranks: %d values); their "
                    "shards are left out of its result.  Does evaluate_fn return %r on every rank, and are its "
                    "values there all NaN?", step, name, ", ".join(map(str, ranks)), have, name)


def _wire(v) -> tuple:
    if isinstance(v, MetricSummary):
        return summaries_to_wire({"_": v})["_"]
    return tuple(v)


@dataclasses.dataclass(frozen=True)
class RankDiscrepancy:
    """A rank whose result for a metric deviates from the other ranks' beyond a threshold.

    Shaped like ``adaptive_eval.detectors.Alarm`` (``step``, ``detector``, ``stream``, ``direction``,
    ``location``, ``message``) so it can be handled as one, plus the details.
    """

    step: int
    rank: int
    metric: str
    rank_mean: float
    others_mean: float
    threshold: float
    rank_n: int
    others_n: int
    detector: str = "rank_discrepancy"
    location: int | None = None

    @property
    def stream(self) -> str:
        return f"eval/{self.metric}"

    @property
    def direction(self) -> str:
        return "up" if self.rank_mean > self.others_mean else "down"

    def to_alarm(self):
        """The same, as an ``adaptive_eval.detectors.Alarm`` (for the alarm handling of the evaluators)."""
        from adaptive_eval.detectors import Alarm

        return Alarm(step=self.step, detector=self.detector, stream=self.stream, direction=self.direction,
                     location=self.location, message=self.message)

    @property
    def message(self) -> str:
        return (f"rank {self.rank}: eval/{self.metric} mean {self.rank_mean:.6g} (n={self.rank_n}) deviates from "
                f"the other ranks' {self.others_mean:.6g} (n={self.others_n}) by "
                f"{abs(self.rank_mean - self.others_mean):.6g} > {self.threshold:g}")


def rank_discrepancies(
    per_rank_means: Mapping[str, Sequence[float]],
    per_rank_n: Mapping[str, Sequence[int]],
    threshold: float,
    *,
    step: int,
    min_n: int = 1,
) -> list[RankDiscrepancy]:
    """Ranks whose mean of a metric is farther than ``threshold`` from the pooled mean of the other ranks.

    Ranks with fewer than ``min_n`` items for a metric take no part.  With two ranks a deviation names
    both (neither can be told to be the odd one); with three or more the outlier stands out.  Sorted by
    metric, then rank; deterministic, so every rank finds the same list.  Per-stratum metrics
    (``"/stratum="``, ``report_strata``) are left out: each rank holds a few items of a stratum, and their
    means differ by chance far more than the whole shard's.

    >>> d = rank_discrepancies({"acc": [0.5, 0.5, 1.0]}, {"acc": [10, 10, 10]}, 0.3, step=7)
    >>> [(x.rank, x.direction) for x in d]
    [(2, 'up')]
    """
    if not threshold >= 0:
        raise ValueError(f"rank discrepancy threshold must be non-negative, got {threshold!r}")
    found = []
    for metric in sorted(per_rank_means):
        if "/stratum=" in metric:
            continue
        means = list(per_rank_means[metric])
        ns = list(per_rank_n[metric])
        live = [r for r, (m, n) in enumerate(zip(means, ns)) if n >= max(min_n, 1) and math.isfinite(m)]
        if len(live) < 2:
            continue
        for r in live:
            others = [o for o in live if o != r]
            others_n = sum(ns[o] for o in others)
            others_mean = fsum(means[o] * ns[o] for o in others) / others_n
            if abs(means[r] - others_mean) > threshold:
                found.append(RankDiscrepancy(step=step, rank=r, metric=metric, rank_mean=means[r],
                                             others_mean=others_mean, threshold=threshold, rank_n=ns[r],
                                             others_n=others_n))
    return found


# -- module-level shortcuts ---------------------------------------------------------------------------

def broadcast_object(obj=None, src: int = 0, group=None, timeout_s: float | None = None):
    """Group rank ``src``'s ``obj`` on every rank (rank 0 decides, everyone gets the same decision)."""
    return DistContext(group, timeout_s).broadcast_object(obj, src)


def all_reduce_flags(flags: Sequence[bool], group=None, timeout_s: float | None = None) -> list[bool]:
    """For each position, whether any rank's flag is set, in one all-reduce."""
    return DistContext(group, timeout_s).all_reduce_flags(flags)


def any_true(flag: bool, group=None, timeout_s: float | None = None) -> bool:
    """Whether ``flag`` is set on any rank."""
    return DistContext(group, timeout_s).any_true(flag)


def reduce_summaries(
    summaries: Mapping[str, MetricSummary], group=None, confidence: float = 0.95, timeout_s: float | None = None
) -> tuple[dict[str, MetricSummary], dict[str, list[float]]]:
    """Exact combination of every rank's shard summaries: ``(combined, per_rank_means)`` on every rank."""
    return DistContext(group, timeout_s).reduce_summaries(summaries, confidence)


# -- broadcast_tensor_container -----------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _Leaf:
    index: int  # position in the flat list of tensors
    shape: tuple
    dtype: object  # torch.dtype (picklable)
    device_type: str
    requires_grad: bool
    offset: int = 0  # byte offset in its bucket
    nbytes: int = 0


@dataclasses.dataclass(frozen=True)
class _Seq:
    kind: str  # "list" | "tuple"
    cls: type | None  # a namedtuple class, else None
    items: list


@dataclasses.dataclass(frozen=True)
class _Map:
    cls: type
    items: list  # [(key, node)]


@dataclasses.dataclass(frozen=True)
class _Obj:
    value: object


def _skeleton(data, tensors: list):
    import torch

    if isinstance(data, torch.Tensor) and data.layout == torch.strided and not data.is_quantized:
        tensors.append(data)
        return _Leaf(len(tensors) - 1, tuple(data.shape), data.dtype, data.device.type, bool(data.requires_grad))
    if isinstance(data, list):
        return _Seq("list", None, [_skeleton(x, tensors) for x in data])
    if isinstance(data, tuple):
        cls = type(data) if hasattr(data, "_fields") else None
        return _Seq("tuple", cls, [_skeleton(x, tensors) for x in data])
    if isinstance(data, dict):
        cls = type(data) if type(data) in (dict, OrderedDict) else dict
        return _Map(cls, [(k, _skeleton(v, tensors)) for k, v in data.items()])
    return _Obj(data)


def _rebuild(node, tensors: list):
    if isinstance(node, _Leaf):
        return tensors[node.index]
    if isinstance(node, _Seq):
        items = [_rebuild(x, tensors) for x in node.items]
        if node.kind == "list":
            return items
        return node.cls(*items) if node.cls is not None else tuple(items)
    if isinstance(node, _Map):
        return node.cls((k, _rebuild(v, tensors)) for k, v in node.items)
    return node.value


def _leaves(node) -> Iterator[_Leaf]:
    if isinstance(node, _Leaf):
        yield node
    elif isinstance(node, _Seq):
        for x in node.items:
            yield from _leaves(x)
    elif isinstance(node, _Map):
        for _, v in node.items:
            yield from _leaves(v)


def _target_device(device_type: str):
    """Where a received tensor goes: CPU stays CPU; an accelerator tensor goes to this rank's current one."""
    import torch

    if device_type == "cpu":
        return torch.device("cpu")
    acc = getattr(torch, "accelerator", None)
    if acc is not None and acc.is_available():
        current = acc.current_accelerator()
        if current is not None and current.type == device_type:
            return torch.device(device_type, acc.current_device_index())
    if device_type == "cuda" and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _as_bytes(t):
    import torch

    flat = t.detach().resolve_conj().resolve_neg().reshape(-1)
    if flat.numel() == 0:
        return torch.empty(0, dtype=torch.uint8, device=t.device)
    return flat.contiguous().view(torch.uint8)


def broadcast_tensor_container(data, src_rank: int = 0, group=None, *, timeout_s: float | None = None,
                               poll_s: float | None = None):
    """Rank ``src_rank``'s ``data`` on every rank: nested dicts, lists, tuples, tensors and plain objects.

    AReaL-compatible (``areal.utils.data.broadcast_tensor_container``): ``src_rank`` is a global rank, as
    in ``torch.distributed.broadcast``; the other ranks' ``data`` is ignored (pass None).  The structure
    and every non-tensor value travel pickled in one broadcast; the tensors travel as raw bytes, one
    broadcast per wire device (so any dtype works, including bool, bfloat16 and complex).  A received
    CPU tensor stays on CPU; an accelerator tensor lands on the receiving rank's current device (CPU
    if it has none).  Namedtuples keep their class; dict subclasses other than OrderedDict become dicts;
    ``requires_grad`` is kept.  The source rank gets ``data`` itself back.  Without a process group (or
    in a group of one) ``data`` is returned unchanged.  ``poll_s``: wait by polling (from a background
    thread; see :class:`DistContext`).
    """
    ctx = DistContext(group, timeout_s, poll_s=poll_s)
    if not ctx.distributed:
        return data
    import torch

    dist = _dist()
    is_src = dist.get_rank() == src_rank
    group_src = src_rank if group is None or group is dist.group.WORLD else dist.get_group_rank(group, src_rank)
    tensors: list = []
    skeleton = _skeleton(data, tensors) if is_src else None
    # Byte layout: one bucket per wire device, leaves packed in order.
    if is_src:
        offsets: dict[str, int] = {}
        nodes = []
        for leaf, t in zip(_leaves(skeleton), tensors):
            wire = _wire_device(group, t.device.type).type
            nbytes = t.numel() * t.element_size()
            nodes.append(dataclasses.replace(leaf, offset=offsets.get(wire, 0), nbytes=nbytes))
            offsets[wire] = offsets.get(wire, 0) + nbytes
        sizes = dict(offsets)
        meta = (skeleton, nodes, sizes)
    else:
        meta = None
    skeleton, nodes, sizes = ctx.broadcast_object(meta, src=group_src)
    buckets = {}
    for wire, size in sorted(sizes.items()):
        if size == 0:
            continue
        device = _wire_device(group, wire)
        if is_src:
            parts = [_as_bytes(t).to(device) for t, leaf in zip(tensors, nodes)
                     if _wire_device(group, t.device.type).type == wire]
            buf = torch.cat(parts) if parts else torch.empty(0, dtype=torch.uint8, device=device)
        else:
            buf = torch.empty(size, dtype=torch.uint8, device=device)
        ctx._wait("broadcast_tensor_container",
                  lambda b=buf: dist.broadcast(b, src=src_rank, group=group, async_op=True), buf)
        buckets[wire] = buf
    if is_src:
        return data
    received = []
    for leaf in nodes:
        wire = _wire_device(group, leaf.device_type).type
        target = _target_device(leaf.device_type)
        if leaf.nbytes == 0:
            t = torch.empty(leaf.shape, dtype=leaf.dtype, device=target)
        else:
            raw = buckets[wire][leaf.offset:leaf.offset + leaf.nbytes]
            t = raw.clone().view(leaf.dtype).reshape(leaf.shape).to(target)
        if leaf.requires_grad:
            t.requires_grad_(True)
        received.append(t)
    return _rebuild(skeleton, received)

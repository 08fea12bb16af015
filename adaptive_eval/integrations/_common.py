"""What the framework adapters share: config handling, the per-step guard, per-item metric helpers."""

from __future__ import annotations

import copy
import logging
import math
import os
import re
import threading
from collections.abc import Mapping

from omegaconf import DictConfig, OmegaConf

from adaptive_eval.adaptive import is_schedule
from adaptive_eval.asynchronous import SnapshotEval, WeightSnapshot
from adaptive_eval.config import Config, as_config, load_config


def checkpoint_path(path) -> str:
    """A checkpoint's path as handed to ``checkpoint_saved``: absolute and without links (a relative output folder
    would be read against whatever working folder a resumed run starts in), a URL as it is."""
    path = os.fspath(path)
    # (realpath: a resume from last.ckpt made by save_last="link" is the file it points to now, not the link,
    # which the next save moves on; found in review)
    return path if "://" in path else os.path.realpath(path)


def relocate_checkpoints(evaluator, resumed_from) -> None:
    """After a resume from ``resumed_from``: a kept checkpoint whose path no longer exists but whose namesake lies
    beside the checkpoint resumed from is that one (the run's folder was moved or copied before the resume; found
    by a new user: the look back failed on the old path)."""
    policy = evaluator.policies.by_name.get("lookback")
    if policy is None or not resumed_from or "://" in os.fspath(resumed_from):
        return
    folder = os.path.dirname(os.path.abspath(os.fspath(resumed_from)))

    def where(ref):
        if isinstance(ref, str) and "://" not in ref and not os.path.exists(ref):
            moved = os.path.join(folder, os.path.basename(ref.rstrip("/\\")))
            if os.path.exists(moved):
                return moved
        return ref

    policy.relocate(where)

log = logging.getLogger("adaptive_eval")

EXTRA = "integrations"

# Keys a trainer logs that are bookkeeping, not a signal about the model: never watched.  (Learning rates and
# epoch or step counters: adaptive_eval.adaptive.is_schedule, which observe() itself applies.)
UNWATCHED = ("total_flos", "num_input_tokens_seen", "num_tokens", "step_time")  # (TRL's token count, its timing)
UNWATCHED_SUFFIXES = ("_runtime", "_samples_per_second", "_steps_per_second", "_tokens_per_second", "_flos")


def missing(module: str, what: str, exc: BaseException) -> ModuleNotFoundError:
    err = ModuleNotFoundError(f"adaptive_eval.integrations.{module} needs {what}: "
                              f"pip install 'adaptive-eval[{EXTRA}]' ({exc})")
    err.name = getattr(exc, "name", None)
    return err


def plain_config(config) -> str | dict | None:
    """``config`` as a JSON-able value (a preset name or file path, or a nested dict), for a framework that
    rebuilds the callback from its saved arguments."""
    if isinstance(config, os.PathLike) or (isinstance(config, str) and config.endswith((".yaml", ".yml"))):
        # (a file named relative to the working directory: HF rebuilds the callback from this value on a resume,
        # which failed "no such config file" when run from another directory; a new user's probe)
        return os.path.abspath(os.fspath(config)) if os.path.isfile(config) else os.fspath(config)
    if config is None or isinstance(config, str):
        return config
    if isinstance(config, DictConfig):
        return OmegaConf.to_container(config, resolve=True)
    if isinstance(config, Config):
        return OmegaConf.to_container(OmegaConf.structured(config), resolve=True)
    if isinstance(config, Mapping):
        return OmegaConf.to_container(OmegaConf.create(dict(config)), resolve=True)
    return OmegaConf.to_container(as_config(config), resolve=True)


def flag(name: str, value) -> bool:
    """A switch of a callback's: True or False, not a string ("false" read as True; a new user's probe)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value


def build_config(config, overrides=(), defaults: Mapping | None = None) -> DictConfig:
    """The evaluator's config: a preset name or YAML path (``"default"``), a loaded config, a dict or None
    (the default preset), then ``overrides`` (dotlist).  ``defaults`` fills keys the user left at their
    schema default of null (an adapter's sensible choice, e.g. the tracked metric)."""
    if config is None or isinstance(config, str):
        cfg = load_config(config, list(overrides))
    else:
        cfg = as_config(config)
        if overrides:
            # Through load_config's checks, as for a preset name: a bare merge took "trigger.freq_steps" (no "=")
            # as null, the step trigger off, read 010 as 8, and a misspelt key was OmegaConf's error (a probe)
            cfg = load_config(cfg, list(overrides))
    if defaults:
        cfg = OmegaConf.merge(cfg, {})  # a copy, made writable (a loaded config is read-only)
        OmegaConf.set_readonly(cfg, False)
        for key, value in defaults.items():
            if OmegaConf.select(cfg, key) is None:
                OmegaConf.update(cfg, key, value, merge=False)
        cfg = as_config(cfg)
    return cfg


def watched(name: str) -> bool:
    """Whether a logged training key is a signal worth a detector (not a schedule or a counter)."""
    last = name.rsplit("/", 1)[-1]
    return (not is_schedule(name) and last not in UNWATCHED and not last.endswith(UNWATCHED_SUFFIXES)
            and not _EVAL_KEY.match(name))


# An evaluation's key (HF's eval_loss, eval/acc): "eval" then the end or a separator, not every key beginning with
# those letters ("evaluator_score" in training was never watched).
_EVAL_KEY = re.compile(r"^eval(?:uation)?(?![a-z])")


def scalar(value) -> float | None:
    """A logged value as a float, or None when it is not one number (a string, a histogram, ...)."""
    if isinstance(value, bool):
        return None
    try:
        if hasattr(value, "numel"):
            if value.numel() != 1:
                return None
            value = value.detach().item()
        out = float(value)
    except (TypeError, ValueError, RuntimeError):
        return None
    return out


class StepGuard:
    """Keeps every exception out of the user's training step, except the user's own ``on_error: raise``.

    An adapter calls the evaluator inside a framework hook: a failure there is logged once per kind
    (with its traceback) and counted, and training goes on.
    """

    def __init__(self, on_error: str = "skip"):
        self.reraise = on_error == "raise"
        self.errors = 0
        self._seen: set[str] = set()

    def __call__(self, what: str, fn, *args):
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - nothing may escape into the training step
            if self.reraise:
                raise
            self.errors += 1
            key = f"{what}:{type(exc).__name__}"
            if key not in self._seen:
                self._seen.add(key)
                log.exception("adaptive_eval: %s failed (training goes on; further %s errors are counted, "
                              "not logged)", what, type(exc).__name__)
            return None


def result_scalars(result, prefix: str = "") -> dict[str, float]:
    """An EvalResult as flat scalars for a trainer's loggers: mean, interval bounds and n per metric."""
    out: dict[str, float] = {}
    for name, m in result.metrics.items():
        key = f"{prefix}{name}"
        out[key] = float(m.mean)
        if math.isfinite(m.ci[0]) and math.isfinite(m.ci[1]):
            out[f"{key}_ci_low"] = float(m.ci[0])
            out[f"{key}_ci_high"] = float(m.ci[1])
        out[f"{key}_n"] = float(m.n)
    return out


class Integrated:
    """A listener keeping the results the evaluator integrated since they were last taken: an adapter reports
    them all, not only the one ``evaluate()`` returns (two asynchronous results integrated at one step, or one by
    the step's ``observe()``: the earlier never reached the trainer's loggers; a probe).  A plain object, so a
    callback holding the evaluator still pickles (Lightning's ``ddp_spawn``)."""

    def __init__(self) -> None:
        self.results: list = []

    def __call__(self, event: dict) -> None:
        if event.get("kind") == "eval":
            self.results.append(event["result"])

    def take(self) -> list:
        out, self.results = self.results, []
        return out


def close_and_drain(evaluator, guard: StepGuard, report, integrated: Integrated,
                    timeout_s: float | None = None) -> None:
    """At train end (or at an exception, waiting ``timeout_s`` at most): close ``evaluator`` under ``guard``
    (asynchronous evaluations still in flight, the final one among them, are waited for and integrated) and
    ``report(result)`` each result ``integrated`` (the adapter's :class:`Integrated`) holds not yet reported, those
    closing integrated among them: also when closing raises (``on_error: raise``, a failure among them), before it
    goes up (the results that came back beside the failure were lost to the trainer's logs; a review).  Taken, so
    that a later fit does not report them again."""
    try:
        guard("close", evaluator.close, *(() if timeout_s is None else (timeout_s,)))
    finally:
        for result in integrated.take():
            guard("report", report, result)


def load_or_start_afresh(evaluator, state, step: int) -> bool:
    """Load a checkpoint's adaptive ``state`` into ``evaluator``; one that does not load into its config is said and
    the evaluator starts afresh (False).  (It escaped the adapter's set-up half done: HF's training step was never
    wrapped, the loss went unwatched for the whole run; found by a probe.)"""
    try:
        evaluator.load_state_dict(state)
    except (ValueError, TypeError, KeyError) as exc:
        log.warning("adaptive_eval: the adaptive state in the checkpoint does not load into this config, so the "
                    "evaluator starts afresh at step %d (its detectors learn the streams again, its schedule counts "
                    "from here): %s", step, exc)
        return False
    return True


def say_suites_need_evaluate_fn(cfg, own: str) -> None:
    """``evaluation.suites`` with the trainer's own evaluation (``own``: what it scores), which scores no suite:
    every evaluation failed, each naming an evaluate_fn the user never wrote (found by a probe).  Said at the start."""
    log.warning("adaptive_eval: evaluation.suites (%s) needs AdaptiveEvalCallback(evaluate_fn=...) that scores each "
                "suite's requested items (request.suites): the trainer's own evaluation scores %s, not the suites, so "
                "every evaluation will fail", ", ".join(cfg.evaluation.suites), own)


def log_summary(evaluator) -> None:
    """The one-line account of a run at train end (the adapter calls it on the main process only)."""
    s = evaluator.summary()
    back = f" ({s['lookbacks']} of kept checkpoints)" if s["lookbacks"] else ""
    cancelled = f", {s['cancelled']} cancelled for an urgent one" if s["cancelled"] else ""
    log.info("adaptive_eval: %d evaluations%s, %d items, %d alarms, %d deferrals, %d eval errors%s",
             s["evals"], back, s["samples"], s["alarms"], s["deferrals"], s["eval_errors"], cancelled)


def asynchronous(cfg, executor) -> bool:
    """Whether the evaluator built from ``cfg`` (and ``executor=``) evaluates asynchronously."""
    return bool(cfg.evaluation.asynchronous) or executor is not None


def timed_alone(cfg, world: int) -> bool:
    """Whether a synchronous evaluation may be left running by ``evaluation.timeout_s`` (one process: in a group the
    collective timeout bounds it and no thread is left behind).  The adapters then evaluate a replica, as
    asynchronously: a timed-out evaluation went on running forward passes on the training model, in train mode once
    the trainer switched it back, its dropout drawing from the training's generator (two runs of one seed diverged
    from the step after it; a probe)."""
    return cfg.evaluation.timeout_s is not None and int(world or 1) <= 1


def forward_collectives(module) -> bool:
    """Whether a forward pass of ``module`` runs collectives every rank must join: FSDP (``FullyShardedDataParallel``
    or ``fully_shard``), DTensor (tensor-parallel) parameters, DeepSpeed ZeRO-3 parameters.  Then the ranks must
    make the same number of forward calls in an evaluation (:func:`lockstep_padding`), and a replica must not run
    them in a worker thread beside training's (the adapters then evaluate synchronously)."""
    kinds = []
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel

        kinds.append(FullyShardedDataParallel)
    except ImportError:  # a torch built without distributed
        pass
    try:
        from torch.distributed.fsdp import FSDPModule

        kinds.append(FSDPModule)
    except ImportError:
        pass
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:
        DTensor = ()
    kinds = tuple(kinds)
    if kinds and any(isinstance(m, kinds) for m in module.modules()):
        return True
    # (FSDP1's flat parameters; DTensor: fully_shard or tensor parallel; ds_id: DeepSpeed ZeRO-3)
    return any(isinstance(p, DTensor) or hasattr(p, "ds_id") or type(p).__name__ == "FlatParameter"
               for p in module.parameters())


def evaluation_mode(module) -> dict:
    """Put ``module`` in eval mode; returns every submodule's ``training`` flag, for :func:`restore_modes`.  As
    Lightning's own validation keeps them (``_ModuleMode``): ``module.train(was_training)`` after the evaluation set
    every submodule training, and a frozen BatchNorm the module kept in eval mode (a frozen backbone, a distillation
    teacher) trained on for the rest of the run, its running statistics moving (a probe)."""
    modes = {m: m.training for m in module.modules()}
    module.eval()
    return modes


def restore_modes(modes: dict) -> None:
    """Each submodule's ``training`` flag as :func:`evaluation_mode` found it (set, as Lightning sets it: no
    ``train()`` of a module of the user's called)."""
    for m, training in modes.items():
        m.training = training


def tensor_parallel(module) -> bool:
    """Whether ``module`` has tensor-parallel parameters (DTensors not sharded by FSDP2 alone: without a
    ``fully_shard`` module, or on a mesh of more than one dimension).  Every rank of its group must then see the
    same inputs, which a shard of the items per rank is not."""
    try:
        from torch.distributed.fsdp import FSDPModule
        from torch.distributed.tensor import DTensor
    except ImportError:
        return False
    fsdp2 = any(isinstance(m, FSDPModule) for m in module.modules())
    return any(isinstance(p, DTensor) and (not fsdp2 or p.device_mesh.ndim > 1) for p in module.parameters())


def refuse_tensor_parallel(module, request) -> None:
    """A ``ValueError`` for the adapters' own evaluation of a tensor-parallel model across ranks (it would
    blend the ranks' different items in one forward pass, silently)."""
    if request.world_size > 1 and tensor_parallel(module):
        raise ValueError("the model is tensor-parallel (DTensor parameters): every rank of its group computes one "
                         "forward pass together, so it cannot score its own shard of the items; pass an "
                         "evaluate_fn that feeds every rank the same items (all of request.indices over ranks)")


def lockstep_padding(request, num_items: int, mine: int, per_call: int = 1) -> int:
    """Forward calls this rank adds (on a dummy item, its result dropped) so that it makes as many as the rank
    with the largest shard: shards of a request differ by up to one item, and with a sharded model (FSDP,
    ZeRO-3) a rank that stops early leaves the others waiting in their next all-gather.  ``per_call``: items per
    forward call (a batch).

    >>> from adaptive_eval import EvalRequest
    >>> [lockstep_padding(EvalRequest(step=0, sample_size=5, seed=0, reason="", rank=r, world_size=2), 100, n)
    ...  for r, n in ((0, 3), (1, 2))]
    [0, 1]
    """
    largest = -(-request.num_selected(num_items) // request.world_size)
    return -(-largest // per_call) - -(-mine // per_call)


def synchronous_for_sharded(cfg):
    """The config without ``evaluation.asynchronous`` (and no executor), with a warning: a replica of a sharded
    model (FSDP, ZeRO-3, tensor parallel) would run its forward collectives in the worker thread beside the
    training thread's, which can hang or corrupt both."""
    log.warning("adaptive_eval: the model is sharded (FSDP, ZeRO-3 or tensor-parallel parameters: its forward runs "
                "collectives), so the trainer's own evaluation runs synchronously, in the training thread, with "
                "every rank in step; for asynchronous evaluation pass an evaluate_fn that evaluates elsewhere "
                "(a gathered copy, an inference server)")
    return load_config(cfg, ["evaluation.asynchronous=false"]), None


def _copy_the_rest(module, replica) -> None:
    """What ``load_state_dict`` leaves as the first copy had it: non-persistent buffers, and each submodule's own plain
    attributes of one value (a temperature, a counter, a cached length: ``int``, ``float``, ``bool``, ``str``, None;
    not those whose name begins with ``_``, the framework's).  A reused replica saw its first copy's forever (a probe:
    a buffer the training step updates read 19 at every asynchronous evaluation, 19 to 99 in the synchronous run).
    Of every submodule, so that a buffer and the attribute that goes with it (a rotary embedding's ``inv_freq`` and
    ``max_seq_len_cached``) come together; a buffer the evaluation's forward made an inference tensor is replaced,
    not copied into (that raised at every other submission; a review)."""
    saved = set(module.state_dict(keep_vars=True))
    plain = (int, float, bool, str, type(None))
    mine = dict(replica.named_modules())
    for prefix, sub in module.named_modules():
        twin = mine.get(prefix)
        if twin is None:
            continue
        for leaf, buf in sub._buffers.items():
            name = f"{prefix}.{leaf}" if prefix else leaf
            theirs = twin._buffers.get(leaf)
            if buf is None or name in saved or theirs is None:
                continue
            if theirs.shape == buf.shape and theirs.dtype == buf.dtype and not theirs.is_inference():
                theirs.copy_(buf)
            else:
                twin._buffers[leaf] = buf.detach().clone()
        for key, value in vars(sub).items():
            # (not ``training``: the replica stays in eval mode, the live module trains)
            if not key.startswith("_") and key != "training" and type(value) in plain and key in vars(twin):
                setattr(twin, key, value)


def _live_weights(step) -> WeightSnapshot:
    """The snapshot of no replica: :class:`ReplicaEval` evaluates the live module (synchronous, uncopyable)."""
    weights = WeightSnapshot({}, step)
    weights.replica = None
    return weights


class ReplicaEval(SnapshotEval):
    """The adapters' default evaluation made asynchronous: evaluate a copy of the live module, never the
    module that keeps training.

    At submission (in the training thread) the module's parameters and buffers are copied into a replica
    (``copy.deepcopy`` of the module the first time, then reused: one replica per evaluation in flight, on the
    module's device; a LightningModule's copy drops its trainer, see its ``__getstate__``), and the worker
    runs ``fn(request, replica)``.  The live module is neither switched to eval mode nor read by the worker.
    Thread executors only: the replica does not travel to another process.
    """

    def __init__(self, module, fn, stamp=None, live=None):
        super().__init__(module, self._run)
        self._user_fn = fn
        self._stamp = stamp  # () -> what the framework's state read at submission (the replica's own, at its run)
        self._free: list = []
        self._lock = threading.Lock()
        # Synchronous under evaluation.timeout_s: ``live(request)`` evaluates the training module itself when it
        # cannot be copied (said once), as without the timeout (every evaluation failed; a review)
        self._live = live
        self._uncopyable: str | None = None

    def snapshot(self, step=None) -> WeightSnapshot:
        import torch

        with self._lock:
            replica = self._free.pop() if self._free else None
        with torch.no_grad(), torch.inference_mode(False):
            if replica is None and self._uncopyable is not None:
                return _live_weights(step)
            if replica is None:
                try:
                    replica = copy.deepcopy(self.module)
                except Exception as exc:  # noqa: BLE001 - said with what to do (it read "cannot pickle ...")
                    what = f"{type(exc).__name__}: {exc}"
                    if self._live is not None:
                        self._uncopyable = what
                        log.warning("adaptive_eval: the module cannot be copied for the evaluation's replica (%s): "
                                    "under evaluation.timeout_s the evaluation runs on the training module itself, "
                                    "as without it, and one that times out runs on beside training (said once)",
                                    what)
                        return _live_weights(step)
                    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
                        raise  # (out of memory is said as such: "keep a lock off the module" misled; a review)
                    raise TypeError(f"the module cannot be copied for the evaluation's replica ({what}): "
                                    "asynchronously the evaluation runs on a copy of the weights of its step "
                                    "(copy.deepcopy of the module); keep what cannot be copied (a lock, an open "
                                    "file) off the module, or pass evaluate_fn=") from exc
                for p in replica.parameters():
                    p.grad = None
                    p.requires_grad_(False)
                replica.eval()
            else:
                replica.load_state_dict(self.module.state_dict())  # copies into the replica's own tensors
                _copy_the_rest(self.module, replica)
        weights = WeightSnapshot(replica.state_dict(), step)
        weights.replica = replica
        weights.stamp = self._stamp() if self._stamp is not None else None
        return weights

    def _run(self, request, weights):
        replica = weights.replica
        if replica is None:  # (the module could not be copied: the live one, synchronously)
            return self._live(request)
        replica._adaptive_eval_stamp = getattr(weights, "stamp", None)
        try:
            out = self._user_fn(request, replica)
            weights.check()  # here: once the replica is back in the pool the next submission overwrites it
            return out
        finally:
            replica._adaptive_eval_stamp = None
            weights._versions = {}
            with self._lock:
                self._free.append(replica)

"""Lightning: one callback.

.. code-block:: python

    from adaptive_eval.integrations.lightning import AdaptiveEvalCallback

    trainer = lightning.Trainer(max_steps=1000, callbacks=[AdaptiveEvalCallback("default")])
    trainer.fit(model, train_loader, val_loader)

What it does (see the README's table):

* builds the :class:`~adaptive_eval.AdaptiveEvaluator` at ``on_train_start`` (after the strategy set up the
  process group), from ``trainer.estimated_stepping_batches`` and the steps per epoch
  (``max(ceil(num_training_batches / accumulate_grad_batches), 1)``); skips sanity checks and non-fit runs;
* feeds each optimizer step's training loss (``train/loss``: the mean of the step's micro-batch losses,
  unscaled, i.e. ``outputs["loss"]`` times ``accumulate_grad_batches`` averaged over the accumulation window)
  and each scalar the module logged anew in that step (``trainer.callback_metrics`` that are not validation
  keys) to ``observe``, once per optimizer step (``on_train_batch_end`` fires per micro-batch: it acts only
  when ``trainer.global_step`` moved), on adaptive_eval's 0-based step axis (``global_step - 1``).  A logged
  value is observed once: Lightning keeps the last value of a key in ``callback_metrics`` until it is logged
  again (re-reading it gives a new ``detach()`` of the same storage), so a key whose tensor storage has not
  changed since the last step is skipped; ``name``/``name_step`` (``on_step`` and ``on_epoch``) share one
  storage and are observed once, under ``name``; epoch aggregates and what Lightning's own validation logs are
  not observed.  The loss is one stream: a training key whose fresh value is the step's loss (not 0) at 3
  optimizer steps in a row takes the place of ``outputs["loss"]`` until it stops being the step's loss, and
  another key logging the same loss is observed once;
* evaluates when the evaluator decides: by default through the module's own ``validation_step`` on the
  items the request names, taken from each validation dataloader's dataset (with several, each gets the
  request, ``validation_step`` gets ``dataloader_idx=i`` and the metrics are named as Lightning names them,
  ``<name>/dataloader_idx_<i>``), one item at a time (``per_item=False``: in batches, reduced as Lightning
  reduces its validation epoch, one value per metric), each rank
  only its shard, the values it ``self.log``-s (or returns) captured per item, so each metric has a real
  interval; a torchmetrics ``Metric`` logged as an object is computed over the items, as Lightning computes it
  at the end of its validation epoch (one value, n items; the module's metrics keep their state).  Lightning has no flag to request a validation run now, so the adapter runs it itself;
* evaluates the final weights (the last optimizer step is step ``estimated_stepping_batches - 1``);
* logs each result to every ``trainer.loggers[i].log_metrics`` at the step the trainer's own logging uses
  (``fit_loop.epoch_loop._batches_that_stepped``), as ``LearningRateMonitor`` does, never through
  ``pl_module.log`` (which loses or repeats one-off points); a ``TensorBoardLogger`` whose ``log_dir`` is the
  folder the evaluator's own TensorBoard file is in (``logging.tensorboard_dir``) is left out, since that file
  already holds the results as ``eval/<metric>`` (one metric, one tag series);
* checkpoints its state (``state_dict``: plain values, loads under ``torch.load(weights_only=True)``) and
  resumes with the same decisions; under DDP the checkpoint (written by global rank zero) holds every rank's
  state, gathered while Lightning dumps it on all ranks, and each rank resumes its own (its detectors saw its
  own losses);
* ``look_back=True``: every checkpoint the trainer writes (``ModelCheckpoint``, ``trainer.save_checkpoint``: what
  goes through ``trainer.strategy.save_checkpoint``, the step read from the checkpoint itself; of two files written
  at one step, the first, since ``last.ckpt`` is rewritten) is handed to the evaluator, so that after a fall it
  evaluates the last one from before it (``policy.lookback``): ``validation_step`` then runs on the checkpoint's
  weights, loaded as Lightning loads the weights to resume (the module's ``on_load_checkpoint`` hook, then its
  ``strict_loading``), the module's own (and the attributes the hook rebinds) kept and put back afterwards,
  whatever happens; its result goes to the loggers at the
  checkpoint's step as ``adaptive_eval/lookback/<metric>``.
  A file that no longer holds its step (overwritten, deleted by ``save_top_k``) is skipped; resumed from a moved
  run folder, a file is looked for beside the one resumed from.
  Under DDP every rank loads the file (a filesystem all ranks see, as Lightning's own resume needs) and scores
  its shard.  The synchronous path only, and not with weights sharded across ranks (FSDP, DeepSpeed), nor under
  ``evaluation.timeout_s`` (said once); with ``evaluate_fn`` it loads ``request.checkpoint`` itself;
* asynchronous evaluation (``executor=``, or ``evaluation.asynchronous`` in the config): ``validation_step``
  runs in the worker on a replica of the module holding the weights of its step (never the live module),
  results are logged when integrated (``adaptive_eval/step``: the weights' step), and ``on_train_end``
  waits for the evaluations still in flight and logs them.

A bad config is a ``ConfigError`` when the callback is built.  Nothing here raises inside the training step,
except the user's own ``evaluation.on_error: raise``.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import logging
import math
import os
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from adaptive_eval.integrations._common import (
    Integrated,
    ReplicaEval,
    StepGuard,
    asynchronous,
    build_config,
    evaluation_mode,
    restore_modes,
    flag,
    checkpoint_path,
    close_and_drain,
    forward_collectives,
    load_or_start_afresh,
    lockstep_padding,
    log_summary,
    missing,
    plain_config,
    refuse_tensor_parallel,
    relocate_checkpoints,
    result_scalars,
    say_suites_need_evaluate_fn,
    scalar,
    synchronous_for_sharded,
    timed_alone,
    watched,
)
from adaptive_eval.asynchronous import EvaluationCancelled, cancel_requested
from adaptive_eval.distributed import reduce_values
from adaptive_eval.types import log_once

try:
    import lightning
    from lightning.pytorch import Callback
except ImportError as _exc:
    raise missing("lightning", "lightning>=2.2", _exc) from _exc

_major, _minor = (int(x) for x in lightning.__version__.split(".")[:2])
if (_major, _minor) < (2, 2):
    raise ImportError(f"adaptive_eval.integrations.lightning needs lightning>=2.2 (found {lightning.__version__}): "
                      "pip install 'adaptive-eval[integrations]'")

__all__ = ["AdaptiveEvalCallback"]

log = logging.getLogger("adaptive_eval")

# The reduce_fx (a name, or torch.mean) the callback's per-item mean reports as Lightning does; any other was
# reported as a mean under the same name, unsaid (a new user's probe).
_MEANS = ("mean", "avg", "average")
# The other reduce_fx Lightning takes by name (or as torch.sum, torch.max, torch.min), reduced over the batches
# with ``per_item=False`` as Lightning reduces them (and across ranks likewise, as ``sync_dist=True`` does).
_REDUCES = ("sum", "max", "min")
# A validation key: one of these words, then the end or a separator ("val_loss", "val/acc", "valLoss"), not any
# key that starts with their letters ("value_loss", PPO's critic loss, and "validity_rate" were never watched;
# found by a new-user probe).
_VALIDATION_KEY = re.compile(r"^(?i:val|valid|validate|validation|eval|evaluate|evaluation|test|testing|tests)"
                             r"(?![a-z])")
# What a module holds its layers, weights and buffers in (put back after a look back's on_load_checkpoint hook)
_REGISTRIES = ("_modules", "_parameters", "_buffers", "_non_persistent_buffers_set")


def _their_tensorboard_folder(trainer) -> str | None:
    """The local folder of the trainer's first ``TensorBoardLogger`` (its ``log_dir``), or None."""
    from lightning.pytorch.loggers import TensorBoardLogger

    for logger in trainer.loggers:
        if isinstance(logger, TensorBoardLogger):
            theirs = logger.log_dir
            if theirs is not None and "://" not in str(theirs):
                return os.fspath(theirs)
    return None


def _tensorboard_beside(ours, trainer) -> set[int]:
    """``id()`` of the trainer's ``TensorBoardLogger``-s that write into the folder the evaluator's own TensorBoard
    logger (``ours``, from ``logging.tensorboard_dir``) writes to.  Its file there holds each result as
    ``eval/<metric>`` (with its interval, n and paired difference), so reporting it again as
    ``adaptive_eval/<metric>`` through that logger would show one metric as two tag series in one folder (found by
    a review).  Nothing is left out when the evaluator writes no file (no folder, or it could not open one) or the
    trainer's folder is remote (``s3://...``: the evaluator's logger writes local files only)."""
    from lightning.pytorch.loggers import TensorBoardLogger

    from adaptive_eval.tensorboard import TensorBoardLogger as Ours

    if not isinstance(ours, Ours):
        return set()
    folder = os.path.realpath(os.fspath(ours.log_dir))
    out = set()
    for logger in trainer.loggers:
        if isinstance(logger, TensorBoardLogger):
            theirs = logger.log_dir
            if theirs is not None and "://" not in str(theirs) and os.path.realpath(os.fspath(theirs)) == folder:
                out.add(id(logger))
    return out


class AdaptiveEvalCallback(Callback):
    """Adaptive evaluation inside a Lightning ``Trainer`` (see the module documentation).

    ``config``: a preset name or YAML path, a loaded config, a nested dict, or None (the default preset);
    ``overrides``: dotlist overrides.  ``evaluate_fn``: your own evaluation (``evaluate_fn(request)`` or
    ``evaluate_fn()``); without one, the module's ``validation_step`` runs on the requested items of
    ``val_dataset`` (default: the items of the trainer's validation dataloader, its sampler's where it has one).
    ``name`` tells two instances apart in a checkpoint and in the loggers (``adaptive_eval/<name>/<metric>``).
    ``executor``: a ``concurrent.futures.Executor`` (a thread pool) for asynchronous evaluation (turns
    ``evaluation.asynchronous`` on; yours to shut down); ``clock``: the evaluator's clock (tests).
    ``look_back``: tell the evaluator of every checkpoint the trainer writes, so that after a fall it evaluates the
    last one from before it (``policy.lookback``; see the module documentation).
    ``tensorboard``: with a ``TensorBoardLogger`` among the trainer's loggers (Lightning's default) and no
    ``logging.tensorboard_dir``, the evaluator writes its TensorBoard file (decisions, alarms, controller state) into
    that logger's ``log_dir``, one run with it; False: nowhere.
    ``resource_monitor``: what ``resources.enabled`` reads (anything with ``snapshot() -> ResourceSnapshot``;
    default: the accelerator's own memory), as :meth:`AdaptiveEvaluator.from_config` takes it.
    ``per_item=False``: ``validation_step`` runs on batches of the requested items (``batch_size`` of them, default
    each validation dataloader's batch size; required with ``val_dataset=``), in the set's order, and what it logs
    is reduced over the batches as Lightning reduces it (the mean weighted by each batch's size, or the
    ``reduce_fx`` "sum", "max", "min"; across the ranks of a process group the same way, as ``sync_dist=True``
    does): for a step that needs several items (a metric over the batch); one value per metric, without an
    interval.
    ``.evaluator`` is the :class:`~adaptive_eval.AdaptiveEvaluator`.
    """

    def __init__(self, config=None, evaluate_fn: Callable | None = None, *, overrides: Sequence[str] = (),
                 val_dataset=None, name: str | None = None, executor=None, clock=None, look_back: bool = False,
                 resource_monitor=None, per_item: bool = True, batch_size: int | None = None,
                 tensorboard: bool = True):
        # Plain values only: ddp_spawn pickles callbacks into its workers, and the evaluator must be built
        # inside the process group the strategy sets up.
        self.config = plain_config(config)
        self.overrides = list(overrides)
        # A bad config is the user's setup error: a ConfigError naming the key now, in their code, not one
        # logged inside on_train_start and then a whole run trained without an evaluation (found by a new user).
        build_config(self.config, self.overrides + (["evaluation.asynchronous=true"] if executor is not None else []))
        self.evaluate_fn = evaluate_fn
        self.val_dataset = val_dataset
        if executor is not None:  # (a shut-down pool: refused now, in the user's set-up, not logged at the start)
            from adaptive_eval.asynchronous import check_executor

            check_executor(executor, replica=evaluate_fn is None)
        self.name = name
        self.executor = executor
        self.clock = clock
        self.resource_monitor = resource_monitor
        self.look_back = flag("look_back", look_back)
        self.tensorboard = flag("tensorboard", tensorboard)
        if not isinstance(per_item, bool):
            raise TypeError(f"per_item must be True or False, got {per_item!r}")
        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int)
                                       or batch_size < 1):
            raise ValueError(f"batch_size must be a positive integer or None, got {batch_size!r}")
        if per_item and batch_size is not None:
            raise ValueError("batch_size= applies with per_item=False (per item, validation_step runs on one item)")
        if not per_item and batch_size is None and val_dataset is not None:
            raise ValueError("per_item=False with val_dataset= needs batch_size= (items per validation_step call)")
        self.per_item = per_item
        self.batch_size = batch_size
        self.evaluator = None
        self._wrapped_save = None  # (strategy, our save_checkpoint) while look_back hears of the checkpoints written
        self._kept_step: int | None = None  # the step of the last checkpoint handed over (the first file of a step)
        self._files_at: dict[int, list] = {}  # every file written at a recent step: the look back's other choices
        self._monitors_unsure = False  # a monitor with Lightning's validation off that the training may log
        self._stashed: dict | None = None
        self._at_exception: dict | None = None  # the evaluator's state at on_exception, before it closed
        self._twin_before: tuple | None = None  # the loss twin when this fit started (see on_train_start)
        self._stage = "fit"  # the stage Lightning set up last (setup): a checkpoint restored for another is not ours
        self._stashed_ranks: list | None = None  # every rank's state, from a checkpoint written under DDP
        self._stashed_twin: list | None = None  # [the key found to log the step's loss, its aliases] (_step_values)
        self._guard = StepGuard()
        self._last_global_step = -1
        self._per_batch = False  # (manual optimization with several optimizers: see _build)
        self._steps_per_epoch = 1
        # A GradientAccumulationScheduler's (its schedule, batches an epoch) and the epoch found last (epoch, its first
        # step, its steps): each epoch's steps differ, and one steps_per_epoch put the epoch trigger mid-epoch
        self._accumulation = None
        self._epoch_at = (0, 0, 1)
        self._module_eval = None
        self._integrated: Integrated | None = None
        self._async = False
        self._val = None  # [(dataset, collate_fn, batch size)] of this fit, one per validation dataloader
        self._fit_thread = None  # the thread that runs the fit (on_train_start): precision contexts only there
        self._pick_metric = False
        self._loss_warned = False
        self._reduce_said: set[str] = set()  # metrics logged with a reduce_fx other than the mean: said once each
        self._dropped_said: set[str] = set()  # values validation_step gave that are not one number: said once each
        self._one_item_said = False
        self._one_item_ran = False  # (a one-item validation_step call ran: a later failure is not for one item)
        self._beside: set[int] = set()  # id() of the trainer's loggers that _report leaves out (_tensorboard_beside)
        self._reset_stream_state()
        self.hooks_called: set[str] = set()

    def _reset_stream_state(self) -> None:
        # what on_train_batch_end needs between steps (plain values or tensors; reset at each fit's start)
        self._seen: dict[str, tuple] = {}  # key -> (the tensor last read, its data_ptr): holding it keeps its
        #                                    storage alive, so a new value cannot reuse the address
        self._kinds: dict[str, int] = {}  # key -> 0 not observed (validation, schedule, aggregate), 1 observed
        self._twin: str | None = None  # the key the module logs the step's loss under (then train/loss is not
        #                                observed too: one quantity under two names would corroborate itself)
        self._votes: dict[str, int] = {}  # key -> steps in a row its fresh value was the step's loss
        self._aliases: set[str] = set()  # other keys found logging the same loss: skipped while equal to it
        self._loss_sum = None  # the accumulation window's micro-batch losses (unscaled, float32)
        self._loss_last = None
        self._loss_n = 0

    @property
    def state_key(self) -> str:
        return self._generate_state_key(name=self.name)

    def _active(self, trainer) -> bool:
        return not trainer.sanity_checking and getattr(trainer.state.fn, "value", trainer.state.fn) == "fit"

    # -- hooks ------------------------------------------------------------------------------------------
    def on_train_start(self, trainer, pl_module):
        self.hooks_called.add("on_train_start")
        if not self._active(trainer):
            return
        # (the last fit's loss twin, for a fit() again that continues it: _build keeps it, as a resume from a
        # checkpoint does; read after the reset below, it was gone, and train/loss was observed beside it; a probe)
        self._twin_before = (self._twin, sorted(self._aliases)) if self._twin is not None else None
        self._reset_stream_state()
        self._fit_thread = threading.current_thread()
        self._guard("on_train_start", self._build, trainer)
        self._monitors_unsure = False
        if trainer.is_global_zero:
            self._monitors_unsure = bool(self._guard("on_train_start", _say_monitors, trainer))
        # Asynchronous: validation_step runs in the worker on a copy of the weights of its step; and so under
        # evaluation.timeout_s, which may leave it running beside training (timed_alone).
        timed = not self._async and (self.evaluator is not None
                                     and timed_alone(self.evaluator.cfg, getattr(trainer, "world_size", 1)))
        live = _ModuleEval(self, trainer, pl_module)
        self._module_eval = (ReplicaEval(pl_module, _ModuleEval(self, trainer, None).on,
                                         stamp=lambda: (trainer.global_step, trainer.current_epoch),
                                         live=live if timed else None) if self._async or timed else live)
        self._module_eval._adaptive_eval_name = _ModuleEval._adaptive_eval_name
        if self.look_back and self.evaluator is not None:
            self._guard("on_train_start", self._start_look_back, trainer, pl_module)
        if self.evaluator is not None and self.evaluate_fn is None:
            # The validation items now, in the user's setup, not at the first evaluation (thousands of steps in):
            # no validation data, or an IterableDataset, failed every evaluation of the run (found by a new user).
            self._val = None
            try:
                self._datasets(trainer, pl_module)
            except Exception as exc:  # noqa: BLE001 - said, never raised into the fit
                if trainer.is_global_zero:
                    log.warning("adaptive_eval: %s; every evaluation of this run will fail", exc)
        if self.evaluator is not None and self._done(trainer) > 0:
            self._guard("evaluate", self._rerun_interrupted, trainer)
        if self.evaluator is not None and self._done(trainer) == 0:
            # trigger.eval_before_train: the initial weights, before the first step (it came after the first
            # optimizer step, at that step's evaluate(); found by a probe of the HF adapter)
            fn = self.evaluate_fn if self.evaluate_fn is not None else self._module_eval
            self._guard("evaluate", self.evaluator.before_train, fn, 0)
            self._guard("report", self._report_integrated, trainer)  # (once: it was reported twice; a review)

    def _rerun_interrupted(self, trainer) -> None:
        """Resumed from a checkpoint written while the evaluation of its last step ran (``OnExceptionCheckpoint``
        after a Ctrl-C in it): the state holds that evaluation as interrupted and the weights are its step's, so
        its call is made again here, as the uninterrupted run made it.  (Lightning never repeats the step: it ran a
        step late, at the next one's, and every later decision moved; a probe.)"""
        global_step = self._done(trainer) - 1
        waiting = self.evaluator._waiting_to_run()
        last = self.evaluator._last_call_step
        if waiting is not None and waiting[0] == global_step:
            pass
        elif last is not None and last == global_step - 1 and waiting is None:
            # The checkpoint's last step trained, but its on_train_batch_end never reached the adapter (a callback
            # listed before it raised there: a Ctrl-C): its call is made here, on that step's weights, so that the
            # schedule goes on as the uninterrupted run's (every later evaluation came a step late, and the gap was
            # said as AReaL's save order; a probe).  That step's logged values are not in the checkpoint.
            if trainer.is_global_zero:
                log.info("adaptive_eval: resumed at step %d, whose end-of-step hook never reached the callback: its "
                         "evaluate() call is made now, on that step's weights (its logged values are lost)",
                         global_step)
        else:
            return
        epoch, step = (divmod(global_step, self._steps_per_epoch) if self._accumulation is None
                       else self._position(global_step))
        fn = self.evaluate_fn if self.evaluate_fn is not None else self._module_eval
        self.evaluator.evaluate(fn, epoch, step, global_step)
        self._report_integrated(trainer)

    def _start_look_back(self, trainer, pl_module) -> None:
        """``look_back``: hear of every checkpoint the trainer writes from now on (``strategy.save_checkpoint``,
        wrapped for this fit), unless the module's own evaluation of one could not be done safely here (said)."""
        why = ("manual optimization with several optimizers (a checkpoint's global_step counts each one's steps, "
               "not the batches this run's steps are)" if self._per_batch else self._no_look_back(trainer, pl_module))
        if why is not None:
            log.warning("adaptive_eval: look_back is off for this run: %s", why)
            return
        if self.evaluate_fn is None:
            self._module_eval.evaluates_checkpoints = True  # (an instance attribute: it loads request.checkpoint)
        lookback = self.evaluator.policies.by_name.get("lookback")
        path, step = trainer.ckpt_path, trainer.global_step - 1
        if lookback is not None and path and step >= 0 and all(s != step for s, _ in lookback.kept):
            # Resumed: the state in that checkpoint was taken before the file was written and handed over, which
            # the uninterrupted run did right after; so here.
            self.evaluator.checkpoint_saved(step, checkpoint_path(path))
        if path:
            relocate_checkpoints(self.evaluator, path)
        self._kept_step = step if step >= 0 else None
        strategy = trainer.strategy
        if self._wrapped_save is not None and vars(strategy).get("save_checkpoint") is self._wrapped_save[1]:
            return  # on_train_start again in one fit (a tuner's trial fit): wrapped already
        original = strategy.save_checkpoint

        def save_checkpoint(checkpoint, filepath, *args, **kwargs):
            original(checkpoint, filepath, *args, **kwargs)
            self._guard("checkpoint", self._checkpoint_written, checkpoint, filepath)

        strategy.save_checkpoint = save_checkpoint  # an instance attribute, removed at teardown
        self._wrapped_save = (strategy, save_checkpoint)
        savers = [c for c in trainer.checkpoint_callbacks if hasattr(c, "save_top_k") and hasattr(c, "monitor")]
        if savers and all(c.monitor is None and c.save_top_k in (0, 1) for c in savers):
            # (the default ModelCheckpoint: a new user's look backs were all skipped, and nothing said why at the start)
            log.warning("adaptive_eval: look_back: every ModelCheckpoint keeps only its latest file (save_top_k=%s, no "
                        "monitor), which the next save replaces, so a look back will mostly find the file from before a "
                        "fall gone; keep several (save_top_k=-1) and save every few steps (every_n_train_steps)",
                        savers[0].save_top_k)

    def _no_look_back(self, trainer, pl_module) -> str | None:
        """Why the module's own evaluation cannot evaluate a kept checkpoint here, or None."""
        if self.evaluate_fn is not None:
            return None  # yours: it loads request.checkpoint itself (every rank is told alike)
        if self._async:
            return "evaluation.asynchronous (kept checkpoints are evaluated in the synchronous path)"
        if self.evaluator.cfg.evaluation.timeout_s is not None:
            # The evaluation would run in a thread the step stops waiting for, with the checkpoint's weights in
            # the module that trains on; put back later, they would undo the updates made meanwhile.
            return "evaluation.timeout_s is set (a checkpoint's weights are loaded into the training module)"
        if _sharded(trainer, pl_module) or "deepspeed" in type(trainer.strategy).__name__.lower():
            return "the strategy shards the weights"
        return None

    def _checkpoint_written(self, checkpoint, filepath) -> None:
        step = checkpoint.get("global_step") if isinstance(checkpoint, Mapping) else None
        if isinstance(step, bool) or not isinstance(step, int) or step < 1:
            return
        step -= 1  # Lightning's global_step counts the optimizer steps done; adaptive_eval's axis is 0-based
        # (two checkpointers: the first file of a step may be one its top-k deletes while another keeps its own; the
        # look back lost it, "no such file any more", beside a kept file of that step; a new user's probe)
        self._files_at.setdefault(step, []).append(checkpoint_path(filepath))
        while len(self._files_at) > _FILES_AT_MOST:
            del self._files_at[min(self._files_at)]
        if step == self._kept_step:
            return  # a second file of the same weights (last.ckpt, which the next save rewrites): the first stays
        self._kept_step = step
        self.evaluator.checkpoint_saved(step, checkpoint_path(filepath))

    def on_exception(self, trainer, pl_module, exception):
        # (Lightning calls on_exception, not teardown nor on_train_end, when fit raises: the evaluator was never
        # closed, its TensorBoard file stale until the interpreter exited, and an asynchronous one said at exit "call
        # close() at the end of training", which the adapter is there to do; a new user's probe.  Closed as a with
        # block left on an exception closes: the evaluations in flight waited for EXCEPTION_DRAIN_S at most.)
        if self.evaluator is not None and not self.evaluator._closed:
            from adaptive_eval.adaptive import EXCEPTION_DRAIN_S

            left = EXCEPTION_DRAIN_S
            if self.evaluator._distributed and self.evaluator._group_failed is None:
                # (one rank's exception: a collective of close() would run on that rank alone, waiting out
                # distributed.timeout_s or meeting another rank's evaluate(); what is in flight fails instead; review)
                self.evaluator._group_failed = (f"the fit raised {type(exception).__name__} on rank "
                                                f"{trainer.global_rank}")
            else:
                # The state as the run stood at the exception: Lightning runs the checkpoint callbacks' on_exception
                # after this one (OnExceptionCheckpoint), and close() below integrates what is in flight at this
                # step, not at the one the run would have: a Ctrl-C'd run resumed from that checkpoint decided
                # otherwise than the run that never stopped (its alarm's evaluation at 102, not 105; a probe)
                # (within the drain's bound: state_dict() waits for the evaluations in flight, and unbounded it held
                # a Ctrl-C'd fit for a 20 s generation, where 5 s was the promise, before the checkpoint was written;
                # a review)
                began = time.monotonic()
                self._at_exception = self._guard(
                    "state", lambda: self.evaluator.state_dict(timeout_s=EXCEPTION_DRAIN_S))
                left = max(EXCEPTION_DRAIN_S - (time.monotonic() - began), 0.0)
            # (the results closing integrated reach the trainer's loggers as at train end: Lightning finalizes them
            # after this; they were in our TensorBoard file only; a probe)
            self.evaluator._exception_close = True  # (close() gives no after_train advice on an exception)
            try:
                close_and_drain(self.evaluator, self._guard, lambda result: self._report_drained(trainer, result),
                                self._integrated, timeout_s=left)
            except Exception:  # noqa: BLE001 - the training's own exception is the one that goes up
                log.exception("adaptive_eval: closing the evaluator after the training's exception failed")
        self.teardown(trainer, pl_module, "fit")

    def _report_drained(self, trainer, result) -> None:
        """A result ``close()`` integrated at an exception, on the loggers' axis at the last step trained: the step our
        hook handled last, where our own evaluate raised in it (on_error: raise), before Lightning counted it (one
        step early; a review)."""
        counted = trainer.fit_loop.epoch_loop._batches_that_stepped
        self._report(trainer, result, max(counted - 1, self._last_global_step - 1, 0))

    def teardown(self, trainer, pl_module, stage):
        self._fit_thread = None  # (a thread does not pickle: a later fit with ddp_spawn failed at its launch)
        if self._wrapped_save is not None:
            strategy, ours = self._wrapped_save
            if vars(strategy).get("save_checkpoint") is ours:
                del strategy.save_checkpoint  # back to the class's method
            self._wrapped_save = None

    def _build(self, trainer) -> None:
        from adaptive_eval import AdaptiveEvaluator

        previous = self.evaluator
        if (self._stashed is None and previous is not None and trainer.global_step > 0
                and previous._last_step == trainer.global_step - 1):
            # fit() again on the same trainer (max_epochs raised, in a notebook) continues the run: the evaluator
            # goes on from the state it had, as a resume from the checkpoint of that step does (it started afresh,
            # its detectors warming up again and the first fit's history gone from it; a new user's probe)
            # (this rank's own state: state_dict() would gather every rank's, a collective; review)
            self._stashed, self._stashed_ranks = (self._at_exception if self._at_exception is not None and
                                                  previous._closed else previous.state_dict()), None
            self._stashed_twin = self._twin_before
            if trainer.is_global_zero:
                log.info("adaptive_eval: fit() continues at step %d: the evaluator goes on from its state there",
                         trainer.global_step)
        overrides = self.overrides + (["evaluation.asynchronous=true"] if self.executor is not None else [])
        cfg = build_config(self.config, overrides)
        if cfg.logging.tensorboard_dir is None and self.tensorboard:
            # (the trainer logs to TensorBoard and no folder of ours is set: the decisions, alarms and errors reached
            # no TensorBoard; a run whose evaluations all failed left no adaptive_eval tag at all; a new user's probe)
            folder = _their_tensorboard_folder(trainer)
            if folder is not None and self.name is not None:
                # (a named callback: a run of its own under theirs, <log_dir>/<name>; two named ones shared theirs,
                # and one eval/val_acc series mixed both eval sets' points; a probe)
                folder = os.path.join(folder, *str(self.name).split("/"))
            if folder is not None:
                cfg = build_config(cfg, defaults={"logging.tensorboard_dir": folder})
        monitored = _monitored(trainer) if cfg.evaluation.metric is None and self.evaluate_fn is None else None
        if monitored is not None:  # (a copy: a config the user passed stays as it is)
            from omegaconf import OmegaConf

            from adaptive_eval.config import as_config

            cfg = as_config(OmegaConf.merge(cfg, {"evaluation": dict(zip(("metric", "higher_is_better"), monitored))}))
        self._guard.reraise = cfg.evaluation.on_error == "raise"
        if self.evaluate_fn is None and cfg.evaluation.suites and getattr(trainer, "is_global_zero", True):
            say_suites_need_evaluate_fn(cfg, "its val_dataloaders")
        total = trainer.estimated_stepping_batches
        total = int(total) if total is not None and math.isfinite(total) else None
        batches = trainer.num_training_batches
        if batches is not None and math.isfinite(batches):
            spe = max(math.ceil(batches / max(trainer.accumulate_grad_batches, 1)), 1)
        else:
            spe = total
        self._accumulation = None
        scheduler = next((c for c in getattr(trainer, "callbacks", None) or ()
                          if isinstance(c, lightning.pytorch.callbacks.GradientAccumulationScheduler)), None)
        if scheduler is not None and batches is not None and math.isfinite(batches) and int(batches) > 0:
            # (the accumulation changes by epoch: so do the optimizer steps of an epoch, and the run's total)
            self._accumulation = (scheduler, int(batches))
            self._epoch_at = (0, 0, self._epoch_steps(0))
            spe = self._epoch_at[2]
            epochs = getattr(trainer, "max_epochs", None)
            if epochs is not None and 0 < epochs < 100_000:
                by_epochs = sum(self._epoch_steps(e) for e in range(int(epochs)))
                max_steps = getattr(trainer, "max_steps", -1)
                total = min(by_epochs, int(max_steps)) if max_steps not in (-1, None) and max_steps > 0 else by_epochs
        self._steps_per_epoch = spe or 1
        # Manual optimization with several optimizers (a GAN's generator and discriminator): Lightning's global_step
        # counts every optimizer's step() (192 after 96 batches, past estimated_stepping_batches), so the steps
        # read 1, 3, 5, ..., the final evaluation came halfway and the epoch trigger mid-epoch (a new user's probe).
        # The batches that stepped are the steps then, as Lightning's loggers count them.
        module = getattr(trainer, "lightning_module", None)
        self._per_batch = bool(module is not None and not getattr(module, "automatic_optimization", True)
                               and len(getattr(trainer, "optimizers", ())) > 1)
        if self._per_batch and getattr(trainer, "max_steps", -1) not in (-1, None):
            total = None  # (max_steps counts every optimizer's steps: how many batches that makes is not known)
        executor = self.executor
        if (self.evaluate_fn is None and asynchronous(cfg, executor) and trainer.lightning_module is not None
                and _sharded(trainer, trainer.lightning_module)):
            cfg, executor = synchronous_for_sharded(cfg)
        self._integrated = Integrated()  # (every result integrated, reported: see _report_integrated)
        self.evaluator = AdaptiveEvaluator.from_config(cfg, steps_per_epoch=spe, total_steps=total, clock=self.clock,
                                                       executor=executor, resource_monitor=self.resource_monitor)
        self.evaluator.add_listener(self._integrated)
        self._at_exception = None
        # evaluation.metric null: the first metric validation_step logs is tracked; prefer one that is not a loss
        # (val_acc over val_loss, as the HF adapter prefers compute_metrics' keys over eval_loss), and say so
        # when only a loss is left to track as higher-is-better.
        if self.evaluate_fn is None:  # (its words were an evaluate_fn's, which the user never wrote; a probe)
            self.evaluator.no_metric_hint = ("validation_step logged no number and returned none (on the requested "
                                             "items of the val_dataloaders)")
            module = trainer.lightning_module
            if module is not None and (type(module).on_validation_epoch_end
                                       is not lightning.pytorch.LightningModule.on_validation_epoch_end):
                # (Lightning 2's pattern, outputs gathered in validation_step and the metric logged at the epoch's
                # end: "evaluated" with no metric, said as if nothing were logged anywhere; a probe)
                self.evaluator.no_metric_hint += (
                    "; what on_validation_epoch_end logs is not read: the callback runs validation_step alone, so log "
                    "the metric there (per item, self.log), or pass evaluate_fn=")
        self._beside = _tensorboard_beside(self.evaluator.logger, trainer)
        self._pick_metric = cfg.evaluation.metric is None
        self._loss_warned = not bool(cfg.evaluation.higher_is_better)
        self._async = asynchronous(cfg, executor)
        if self._stashed:
            state = self._own_state(self._stashed, self._stashed_ranks)
            self._stashed = self._stashed_ranks = None
            if load_or_start_afresh(self.evaluator, state, self._done(trainer)) and self._stashed_twin:
                # a resumed run whose module logged the step's loss itself keeps outputs["loss"] unobserved from its
                # first step, as the uninterrupted run did
                self._twin, self._aliases = self._stashed_twin[0], set(self._stashed_twin[1])
        self._last_global_step = self._done(trainer)

    def _done(self, trainer, in_batch: bool = False) -> int:
        """Steps done, on Lightning's count: its global_step, or under manual optimization with several optimizers
        the batches that stepped (``in_batch``: in ``on_train_batch_end``, before Lightning counts that batch; its
        own counter, which it corrects after a resume from a checkpoint written inside an epoch: a count of ours
        started from it was one step behind there; a review)."""
        if self._per_batch:
            return trainer.fit_loop.epoch_loop._batches_that_stepped + (1 if in_batch else 0)
        return trainer.global_step

    def on_train_epoch_start(self, trainer, pl_module):
        self.hooks_called.add("on_train_epoch_start")
        if self.evaluator is None:
            return
        # The epoch aggregates Lightning put in callback_metrics at the last epoch's end (on_epoch=True) are not
        # values the module logged in a step: mark them read.
        self._mark_read(trainer.callback_metrics)

    def on_train_epoch_end(self, trainer, pl_module):
        self.hooks_called.add("on_train_epoch_end")
        if self._monitors_unsure:  # (the monitors the training may log: said after its first epoch if it does not;
            self._monitors_unsure = False  # an on_epoch key, train_loss_epoch, is not there after the first step)
            self._guard("on_train_epoch_end", _say_monitors, trainer, set(trainer.callback_metrics))

    def _mark_read(self, metrics, unseen_kind: int | None = None) -> None:
        """Take every value now in ``metrics`` as read; a key not met before gets ``unseen_kind`` if given."""
        seen, kinds = self._seen, self._kinds
        for key, value in metrics.items():
            if hasattr(value, "data_ptr"):
                seen[key] = (value, value.data_ptr())
            if unseen_kind is not None:
                kinds.setdefault(key, unseen_kind)

    def on_validation_end(self, trainer, pl_module):
        self.hooks_called.add("on_validation_end")
        if self.evaluator is None:
            return
        # What Lightning's own validation logged (mid-epoch with val_check_interval) is not a training value,
        # whatever its name ("loss/val"): mark it read; a key only validation wrote is never observed.
        self._mark_read(trainer.callback_metrics, unseen_kind=0)

    def _add_loss(self, trainer, pl_module, outputs) -> None:
        """Add a micro-batch's loss to the window: unscaled (automatic optimization divides it by
        ``accumulate_grad_batches``, read now: a GradientAccumulationScheduler changes it by epoch), as float."""
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        if loss is None or not hasattr(loss, "detach") or loss.numel() != 1:
            return  # (nothing, a number that is not a tensor, or per-sample losses: not a step's loss)
        loss = loss.detach().float().reshape(())
        if getattr(pl_module, "automatic_optimization", True):
            loss = loss * max(int(getattr(trainer, "accumulate_grad_batches", 1) or 1), 1)
        self._loss_sum = loss if self._loss_sum is None else self._loss_sum + loss
        self._loss_last = loss
        self._loss_n += 1

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.hooks_called.add("on_train_batch_end")
        if self.evaluator is None:
            return
        self._guard("observe", self._add_loss, trainer, pl_module, outputs)  # train/loss: the window's mean
        done = self._done(trainer, in_batch=True)
        if done == self._last_global_step and not self._per_batch:
            return  # a micro-batch inside gradient accumulation: the optimizer did not step
        self._last_global_step = done
        global_step = done - 1
        values = self._guard("observe", self._step_values, trainer.callback_metrics)
        if values:
            self._guard("observe", self.evaluator.observe, values, global_step)
        epoch, step = (divmod(global_step, self._steps_per_epoch) if self._accumulation is None
                       else self._position(global_step))
        fn = self.evaluate_fn if self.evaluate_fn is not None else self._module_eval
        try:
            self._guard("evaluate", self.evaluator.evaluate, fn, epoch, step, global_step)
        finally:  # (on_error: raise: the results integrated beside the failure, reported before it goes up; a review)
            self._guard("report", self._report_integrated, trainer)

    def _epoch_steps(self, epoch: int) -> int:
        """The optimizer steps of ``epoch`` under the GradientAccumulationScheduler (a last window short of it steps
        too, as Lightning's)."""
        scheduler, batches = self._accumulation
        return max(math.ceil(batches / max(int(scheduler.get_accumulate_grad_batches(epoch)), 1)), 1)

    def _position(self, global_step: int) -> tuple[int, int]:
        """``(epoch, step within it)`` of ``global_step`` under the GradientAccumulationScheduler, and the
        evaluator's ``steps_per_epoch`` that epoch's (its epoch trigger fires at the epoch's last step).  From the
        schedule alone, so a resume finds the same; the epoch found last is kept (one step a call)."""
        epoch, first, steps = self._epoch_at
        if global_step < first:
            epoch, first, steps = 0, 0, self._epoch_steps(0)
        while global_step >= first + steps:
            epoch, first = epoch + 1, first + steps
            steps = self._epoch_steps(epoch)
        self._epoch_at = (epoch, first, steps)
        self._steps_per_epoch = steps
        if self.evaluator is not None:
            self.evaluator.steps_per_epoch = self.evaluator.trigger.steps_per_epoch = steps
        return epoch, global_step - first

    def _step_values(self, metrics) -> dict[str, float]:
        """What this optimizer step observes: ``train/loss`` (unless the module logs the step's loss itself)
        and each training key of ``metrics`` (``trainer.callback_metrics``) logged anew since the last step."""
        seen, kinds = self._seen, self._kinds
        fresh: dict[str, float] = {}
        ptrs = set()
        for key, value in metrics.items():
            kind = kinds.get(key)
            if kind is None:
                kind = kinds[key] = _kind(key)
            if not kind:
                continue
            prev = seen.get(key)
            if prev is not None and prev[0] is value:
                continue
            ptr = value.data_ptr() if hasattr(value, "data_ptr") else None
            seen[key] = (value, ptr)
            if ptr is not None:
                if prev is not None and prev[1] == ptr:
                    continue  # not logged again: Lightning's last value, re-read
                if ptr in ptrs:
                    continue  # the same logged tensor under a second name (name_step of on_step+on_epoch)
                ptrs.add(ptr)
            v = scalar(value)
            if v is not None:
                fresh[key] = v
        twin = self._twin
        if twin is not None and self._aliases and twin in fresh:  # the same loss under another name: once
            for key in self._aliases:
                if key in fresh and fresh[key] != 0 and _same(fresh[key], fresh[twin], 1e-6):
                    del fresh[key]
        if self._loss_n == 0:
            return fresh
        total, last, n = self._loss_sum, self._loss_last, self._loss_n
        self._loss_sum = self._loss_last = None
        self._loss_n = 0
        if twin is not None and twin not in fresh:
            return fresh  # (nothing to compare the loss with: no .item(), no device sync, this step)
        mean = scalar(total / n)
        if mean is None:
            return fresh
        last = scalar(last) if fresh else None

        def is_loss(v: float) -> bool:
            return v != 0 and any(x is not None and _same(v, x, 1e-5) for x in (last, mean))

        if twin is not None:
            if is_loss(fresh[twin]):
                if n > 1:  # (Lightning keeps the last micro-batch's: the stream is the window's mean, as train/loss)
                    fresh[twin] = mean
                return fresh
            # it no longer carries the step's loss (a part of it that equalled it while the rest was 0):
            # train/loss is observed again, and the search starts over
            self._twin, self._aliases = None, set()
            self._votes.pop(twin, None)
        # The module's own self.log of the step's loss (what Lightning keeps of an on_step log is the last
        # micro-batch's): a key whose fresh value is that loss, not zero, 3 optimizer steps in a row.  From then
        # on it is the loss stream and train/loss is not observed too.  (A name alone says nothing: "aux_loss" is
        # a part of the loss; one equal value says little: a KL term is 0 at the start.)
        votes = self._votes
        for key, v in fresh.items():  # (a key not logged this step keeps its count: a loss logged every k steps)
            if is_loss(v):
                votes[key] = votes.get(key, 0) + 1
                if n > 1:  # (the window's mean from the first step, as once it is known to be the loss; a review)
                    fresh[key] = mean
            else:
                votes.pop(key, None)
        confirmed = [key for key in fresh if votes.get(key, 0) >= 3]
        if confirmed:
            self._twin, self._aliases = confirmed[0], set(confirmed[1:])
            for key in confirmed[1:]:
                fresh.pop(key, None)
            return fresh  # (under accumulation the window's mean, set above, not the last micro-batch's: a probe)
        return {"train/loss": mean, **fresh}

    def on_train_end(self, trainer, pl_module):
        self.hooks_called.add("on_train_end")
        if self.evaluator is not None:
            # (on the loggers' axis at the last step trained, as the training metrics and a synchronous final
            # result: Lightning's counter is one past it now; a result drained here was logged at a step never
            # trained, found by a new user)
            last = max(trainer.fit_loop.epoch_loop._batches_that_stepped - 1, 0)
            if self._done(trainer) > 0:  # stopped early (EarlyStopping, should_stop): its last weights
                fn = self.evaluate_fn if self.evaluate_fn is not None else self._module_eval
                done = self._done(trainer) - 1
                epoch = (done // self._steps_per_epoch if self._accumulation is None else self._position(done)[0])
                self._guard("evaluate", functools.partial(self.evaluator.after_train, epoch=epoch), fn, done)
                self._guard("report", self._report_integrated, trainer, last)
            try:
                close_and_drain(self.evaluator, self._guard, lambda result: self._report(trainer, result, last),
                                self._integrated)
            finally:  # (on_error: raise, a failure closing integrated: the summary all the same, nothing kept)
                if trainer.is_global_zero:
                    log_summary(self.evaluator)
                self._module_eval = self._val = None
        self._module_eval = self._val = None  # hold the trainer and the data

    # -- evaluation through the module ------------------------------------------------------------------
    def _datasets(self, trainer, pl_module) -> list:
        """The validation sets (each with its collate_fn), one per validation dataloader: ``val_dataset``, else
        what ``fit`` was given (its ``val_dataloaders``, a datamodule's or the module's ``val_dataloader()``),
        looked up once per fit."""
        if self.val_dataset is not None:
            return [(self.val_dataset, None, self.batch_size or 1)]
        if self._val is not None:
            return self._val
        loaders = trainer.val_dataloaders  # None when Lightning itself never validates (limit_val_batches=0)
        if loaders is None:
            source = getattr(getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None), "val_loop", None)
            source = getattr(source, "_data_source", None)
            instance = getattr(source, "instance", None)
            try:
                if instance is None:
                    instance = trainer.datamodule if trainer.datamodule is not None else pl_module
                if isinstance(instance, (lightning.pytorch.LightningModule, lightning.pytorch.LightningDataModule)):
                    loaders = instance.val_dataloader()
                else:
                    loaders = instance
            except Exception as exc:  # noqa: BLE001 - Lightning raises several kinds for "not defined"
                raise ValueError("no validation data: pass val_dataloaders to fit(), val_dataset= or "
                                 f"evaluate_fn= ({exc})") from None
        combined = getattr(getattr(getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None), "val_loop", None),
                           "_combined_loader", None)
        if isinstance(loaders, lightning.pytorch.utilities.CombinedLoader):
            combined, loaders = loaders, loaders.iterables
        mode = getattr(combined, "_mode", "sequential")
        if mode != "sequential":  # (every evaluation failed in validation_step, unsaid; a new user's probe)
            raise ValueError(f"the validation data is a CombinedLoader in mode {mode!r}: validation_step takes one "
                             "batch of every loader at once, which the callback cannot score item by item; pass "
                             "evaluate_fn=, val_dataset=, or the loaders in mode 'sequential'")
        if isinstance(loaders, Mapping):  # named dataloaders: Lightning numbers them in this order
            loaders = list(loaders.values())
        if not isinstance(loaders, (list, tuple)):
            loaders = [loaders]
        loaders = [loader for loader in loaders if loader is not None]
        if not loaders:
            raise ValueError("no validation data: pass val_dataloaders to fit(), val_dataset= or evaluate_fn=")
        self._val = [(_items_of(loader, trainer), getattr(loader, "collate_fn", None),
                      self.batch_size or (1 if self.per_item else _batch_size(loader, i)))
                     for i, loader in enumerate(loaders)]
        return self._val

    def evaluate_checkpoint(self, trainer, pl_module, request) -> dict:
        """:meth:`evaluate_with_module` on the weights of the kept checkpoint ``request.checkpoint`` (``look_back``),
        loaded as Lightning loads the weights to resume (``strategy.load_checkpoint``, the module's
        ``on_load_checkpoint`` hook, ``load_model_state_dict`` with its ``strict_loading``); the module's own weights
        (and the attributes, layers and buffers the hook rebinds) are kept and put back afterwards, whatever happens
        (the optimizer's tensors are the module's own, written in place both ways).
        A file that no longer holds the request's step (``last.ckpt`` rewritten since) or is gone raises
        ``CheckpointUnavailable``: the look back is skipped."""
        from adaptive_eval.evaluators import CheckpointUnavailable

        strategy = trainer.strategy
        # This run's own file: its hyper-parameters may be any picklable object (a dataclass config), which torch's
        # default weights_only load refuses (found in review: every look back failed).  (An older lightning has no
        # such argument.)
        own_file = {"weights_only": False} if "weights_only" in inspect.signature(strategy.load_checkpoint).parameters \
            else {}
        problems, checkpoint = [], None
        others = [f for f in self._files_at.get(request.step, ()) if f != request.checkpoint]
        for path in [request.checkpoint, *others]:  # (the step's other files, where this run wrote several)
            try:
                checkpoint = strategy.load_checkpoint(path, **own_file)
            except FileNotFoundError:
                problems.append(f"{path}: no such file any more (save_top_k deletes files that leave its top k)")
                continue
            held = checkpoint.get("global_step") if isinstance(checkpoint, Mapping) else None
            if held == request.step + 1:
                break
            problems.append(f"{path}: holds global_step {held}, not {request.step + 1} (the step it was kept for): "
                            "written again since")
            checkpoint = None
        if checkpoint is None:
            raise CheckpointUnavailable("; ".join(problems))
        own = {k: v.detach().to("cpu", copy=True) for k, v in pl_module.state_dict().items()}
        # The module's own on_load_checkpoint hook first, as Lightning resumes (a module that renames or converts
        # keys there failed every look back: left undone last round).  What the hook binds on the module itself
        # (an attribute read from the checkpoint) is put back with the weights: the look back must not change
        # the run that trains on.
        hooked = type(pl_module).on_load_checkpoint is not lightning.pytorch.LightningModule.on_load_checkpoint
        attributes = dict(vars(pl_module)) if hooked else None
        # (and every module's registries, which the hook changes in place: a layer it replaces, a buffer it
        # registers; found in review: the replaced layer stayed, and a registered buffer made the restore raise)
        registries = [(m, {name: copy.copy(getattr(m, name)) for name in _REGISTRIES}) for m in pl_module.modules()] \
            if hooked else []
        try:
            if hooked:
                pl_module.on_load_checkpoint(checkpoint)
            strategy.load_model_state_dict(checkpoint, strict=getattr(pl_module, "strict_loading", True))
            del checkpoint
            return self.evaluate_with_module(trainer, pl_module, request)
        finally:
            if attributes is not None:
                for name in [n for n in vars(pl_module) if n not in attributes]:
                    delattr(pl_module, name)
                vars(pl_module).update(attributes)
            for module, saved in registries:
                for name, value in saved.items():
                    live = getattr(module, name)
                    live.clear()
                    live.update(value)
            pl_module.load_state_dict(own)

    def evaluate_with_module(self, trainer, pl_module, request) -> dict:
        """The default evaluation: ``validation_step`` on this rank's requested items, one at a time; what it
        logs (``self.log``/``log_dict``) or returns is captured per item (``per_item=False``: on batches of them,
        reduced over the batches as Lightning does)."""
        import torch
        from torch.utils.data import default_collate

        sets = self._datasets(trainer, pl_module)
        several = len(sets) > 1  # as Lightning: dataloader_idx passed, metrics named <name>/dataloader_idx_<i>
        captured: dict[str, list] = {}
        item_values: dict[str, float] = {}
        logged_metrics: dict = {}  # key -> a torchmetrics Metric logged as an object (computed over the items)
        returned: set[str] = set()  # keys validation_step returned (Lightning does not log those)
        batches: dict[str, list] = {}  # per_item=False: key -> [(value, weight) of each batch], over every loader
        counted: dict[str, int] = {}  # per_item=False: key -> the items of the batches that logged it
        reduce_of: dict[str, str] = {}  # per_item=False: key -> its reduce_fx ("mean", "sum", "max", "min")
        weight_of: dict[str, float] = {}  # per_item=False: key -> the batch_size self.log was given, this batch
        suffix = ""
        Metric = _metric_type()

        def capture(name, value, *args, add_dataloader_idx=True, reduce_fx="mean", **kwargs):
            key = name + suffix if add_dataloader_idx else name
            fx = str(getattr(reduce_fx, "__name__", reduce_fx)).lower()  # (a name, or torch.max)
            if not self.per_item:
                reduce_of[key] = fx if fx in _REDUCES else "mean"
                if kwargs.get("batch_size") is not None:
                    weight_of[key] = float(kwargs["batch_size"])
            if fx not in _MEANS and (self.per_item or fx not in _REDUCES) and name not in self._reduce_said:
                self._reduce_said.add(name)
                log.warning("adaptive_eval: %r is logged with reduce_fx=%s: the callback reports its mean over the "
                            "%s, not Lightning's %s over the validation batches; log a per-item value to compare, "
                            "or pass evaluate_fn= (said once)", name, fx,
                            "items it scores (with an interval)" if self.per_item else "batches", fx)
            if Metric is not None and isinstance(value, Metric):
                # self.log("val_acc", self.val_acc): Lightning computes the Metric over the validation items at
                # the epoch's end; so does the adapter, over the request's items (it was dropped: found by a new
                # user)
                logged_metrics[key] = value
                return
            v = scalar(value)
            if v is not None:
                item_values[key] = v
            elif name not in self._dropped_said:
                # (k answers per item returned as a (batch, k) tensor were left out unsaid, and the run tracked
                # another metric; a new user's probe)
                self._dropped_said.add(name)
                shape = getattr(value, "shape", None)
                # (a vector of one value per item under per_item=False was told of k answers per item; a probe)
                why = ("per_item=True reads one value per item (with an interval over items)"
                       if not self.per_item and shape is not None and len(tuple(shape)) == 1 else
                       "several answers per item (k samples) need evaluate_fn= returning an items x answers array "
                       "per metric (README: eval suites, k answers per problem)")
                log.warning("adaptive_eval: validation_step gave %r as %s, not one number%s: left out of the "
                            "evaluation; %s (said once)", name,
                            f"shape {tuple(shape)}" if shape is not None else type(value).__name__,
                            " per item" if self.per_item else " per batch", why)

        def capture_dict(dictionary, *args, add_dataloader_idx=True, **kwargs):
            for k, v in dictionary.items():
                capture(k, v, add_dataloader_idx=add_dataloader_idx, reduce_fx=kwargs.get("reduce_fx", "mean"),
                        batch_size=kwargs.get("batch_size"))

        precision = getattr(trainer, "precision_plugin", None) if trainer is not None else None
        elsewhere = threading.current_thread() is not (self._fit_thread or threading.current_thread())
        if precision is not None and elsewhere and not isinstance(precision,
                                                                  lightning.pytorch.plugins.precision.MixedPrecision):
            # Not the thread that runs the fit (an asynchronous evaluation's worker, or evaluation.timeout_s's): a
            # "-true" precision's context sets the process's default dtype (torch.set_default_dtype), under the
            # training thread's feet (found in review: bf16 leaked into the training steps and outlived the fit);
            # autocast (MixedPrecision) is the thread's own.
            step_context = contextlib.nullcontext
        else:
            step_context = precision.val_step_context if precision is not None else contextlib.nullcontext

        def call(batch, batch_idx, dl_idx):
            # As Lightning's own validation: the precision plugin converts the batch (bf16-true: to bf16) and
            # runs the step in its context (bf16-mixed: autocast); without them every evaluation of a bf16-true
            # module failed, and a bf16-mixed one ran in float32 (found by a new user).
            if not sharded and cancel_requested():  # (cancelled: it ran on to its end beside the urgent one)
                raise EvaluationCancelled(f"the evaluation of step {request.step} was cancelled (an urgent one took "
                                          "its place); it stopped at a batch")
            if precision is not None:
                batch = precision.convert_input(batch)
            batch = pl_module._apply_batch_transfer_handler(batch, dataloader_idx=dl_idx)
            with step_context():
                if several:
                    return pl_module.validation_step(batch, batch_idx, dataloader_idx=dl_idx)
                return pl_module.validation_step(batch, batch_idx)

        # A sharded module (FSDP) all-gathers in forward: every rank makes as many calls as the largest shard.
        refuse_tensor_parallel(pl_module, request)
        sharded = request.world_size > 1 and _sharded(trainer, pl_module)
        modes = evaluation_mode(pl_module)
        module_metrics = _MetricStates(pl_module, Metric)  # their state now, restored after: the user's to keep
        output_lists = _OutputLists(pl_module)  # (self.validation_step_outputs and the like: put back after)
        pl_module.log, pl_module.log_dict = capture, capture_dict  # instance attributes, removed below
        try:
            with torch.no_grad():
                for dl_idx, (dataset, collate, batch_size) in enumerate(sets):
                    collate = collate or default_collate
                    suffix = f"/dataloader_idx_{dl_idx}" if several else ""
                    indices = request.indices(len(dataset))
                    module_metrics.reset()
                    touched: set[str] = set()  # (the metrics of this loader: the evaluation's items add them up)
                    per_call = 1 if self.per_item else batch_size
                    calls = [indices[k:k + 1] for k in range(len(indices))] if self.per_item else \
                        _batches(sorted(indices), per_call, whole=len(indices) == len(dataset))  # (set order)
                    for n, chunk in enumerate(calls):
                        item_values.clear()
                        weight_of.clear()
                        batch = collate([dataset[i] for i in chunk])
                        try:
                            out = call(batch, n, dl_idx)
                        except Exception:
                            if self.per_item:
                                self._say_one_item()
                            raise
                        self._one_item_ran = self.per_item
                        # (a value returned under a name the step also logged: the logged one, as Lightning, which
                        # never logs what validation_step returns; the returned one replaced it: a new user's probe)
                        if isinstance(out, Mapping):
                            for k, v in out.items():
                                if k + suffix not in item_values:
                                    returned.add(k + suffix)
                                    capture(k, v)
                        elif out is not None and "val_loss" + suffix not in item_values:
                            returned.add("val_loss" + suffix)
                            capture("val_loss", out)
                        for k, v in item_values.items():
                            if self.per_item:
                                captured.setdefault(k, []).append(v)
                            else:
                                batches.setdefault(k, []).append((v, weight_of.get(k, len(chunk))))
                                counted[k] = counted.get(k, 0) + len(chunk)
                        touched.update(item_values)
                    for key, metric in logged_metrics.items():  # before the padding calls update them
                        value = module_metrics.compute(metric)
                        if value is not None:
                            captured[key] = value  # (over this loader's items: all read the last loader's count)
                            request._scored([key], len(indices))
                            touched.add(key)
                    logged_metrics.clear()
                    if several:
                        request._from_set(touched, str(dl_idx))
                    pad = lockstep_padding(request, len(dataset), len(indices), per_call) if sharded else 0
                    for n in range(pad):  # (results dropped)
                        call(collate([dataset[indices[0] if indices else 0]]), len(indices) + n, dl_idx)
        finally:
            del pl_module.log, pl_module.log_dict
            module_metrics.restore()
            output_lists.restore()
            restore_modes(modes)
        for k, pairs in batches.items():  # as Lightning reduces what a validation epoch logged
            how = reduce_of.get(k, "mean")
            total = sum(w for _, w in pairs)
            if how in _REDUCES:
                captured[k] = reduce_values(how, [v for v, _ in pairs])
                # (across the ranks too, as sync_dist=True reduces it: the ranks' values were averaged, weighted by
                # their items, so a max of 2.31 and 2.67 read 2.65; a new user's probe)
                request._reduced([k], how)
            else:
                captured[k] = sum(v * w for v, w in pairs) / total if total else float("nan")
            request._scored([k], counted[k])  # (the items of the batches that logged it, of every loader)
        if self._pick_metric and captured:
            captured = dict(sorted(captured.items(), key=lambda kv: "loss" in kv[0].lower()))  # (stable)
        if self._pick_metric and captured and not self._loss_warned:
            # what the evaluator tracks (it chooses once, and says so of a loss); a value validation_step only
            # returns is said here: only the adapter knows it for a guess
            from adaptive_eval.policies._base import looks_lower_is_better, tracked_name

            first = tracked_name(captured, lambda k: isinstance(captured[k], list))  # (higher is better here)
            if first in returned and looks_lower_is_better(first) is None:
                self._loss_warned = True
                log.warning("adaptive_eval: evaluation.metric is null: tracking %r as higher-is-better "
                            "(validation_step returns it; Lightning itself does not log a returned value, so what it "
                            "measures is a guess); for a loss set evaluation.metric: %s and "
                            "evaluation.higher_is_better: false, or set evaluation.metric to the metric to track",
                            first, first)
        return captured

    def _say_one_item(self) -> None:
        """Said once, at validation_step's first failure: it runs on batches of one item here (a ``squeeze()`` that
        drops the batch dimension failed every evaluation, with an error that did not say why; a new user's probe)."""
        if not self._one_item_said and not self._one_item_ran:  # (not after one-item calls that ran: a probe)
            self._one_item_said = True
            log.warning("adaptive_eval: validation_step failed on a batch of ONE item; if the error that follows is "
                        "about shapes or sizes, that may be why: the callback calls it one item at a time, so that "
                        "each metric has a per-item value and a real interval; "
                        "a step that needs several items (a squeeze() that drops the batch dimension, a metric over "
                        "the batch) fails or differs here: make it work on one item, pass per_item=False (batches, as "
                        "Lightning's own validation; no interval), or evaluate_fn= (said once; the error follows)")

    # -- reporting --------------------------------------------------------------------------------------
    @property
    def _prefix(self) -> str:
        """The loggers' tag prefix: ``adaptive_eval``, or ``adaptive_eval/<name>`` with ``name=`` (two callbacks
        on two eval sets logged into one series: found by a new user)."""
        return "adaptive_eval" if self.name is None else f"adaptive_eval/{self.name}"

    def _report(self, trainer, result, step: int | None = None) -> None:
        prefix = self._prefix
        scalars = {f"{prefix}/{k}": v for k, v in result_scalars(result).items()}
        scalars[f"{prefix}/items"] = float(result.items)
        scalars[f"{prefix}/step"] = float(result.step)  # the weights' step (0-based); asynchronous: before this one
        if step is None:
            step = trainer.fit_loop.epoch_loop._batches_that_stepped
        for logger in trainer.loggers:  # log_metrics is rank-zero only in every Lightning logger
            if id(logger) not in self._beside:
                logger.log_metrics(scalars, step=step)

    def _report_integrated(self, trainer, step: int | None = None) -> None:
        """Every result integrated since the last report (:class:`Integrated`: two asynchronous results integrated
        at one step, the earlier was lost to the loggers; a probe); a look back to every logger at the kept
        checkpoint's step on the trainer's axis, as ``adaptive_eval/lookback/<metric>`` (a tag of its own: under
        ``adaptive_eval/<metric>`` a point at an earlier step would interleave with the evaluations of now)."""
        for result in self._integrated.take() if self._integrated is not None else ():
            if result.evaluated_at is None:
                self._report(trainer, result, step)
                continue
            prefix = f"{self._prefix}/lookback"
            scalars = {f"{prefix}/{k}": v for k, v in result_scalars(result).items()}
            scalars[f"{prefix}/items"] = float(result.items)
            scalars[f"{prefix}/evaluated_at"] = float(result.evaluated_at)
            for logger in trainer.loggers:
                if id(logger) not in self._beside:
                    logger.log_metrics(scalars, step=result.step)

    # -- state ------------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        if self.evaluator is None:
            state, ranks = self._stashed, self._stashed_ranks
        elif self._at_exception is not None and self.evaluator._closed:  # (saved after on_exception closed it)
            state, ranks = self._at_exception, None
        else:
            state, ranks = self.evaluator.state_dict(), None
            if self.evaluator.dist.distributed:
                # Lightning dumps a checkpoint on every rank (Trainer.save_checkpoint "needs to be called on all
                # processes") and writes rank zero's: gather every rank's state into it.
                ranks = self._guard("state", self.evaluator.dist.gather_objects, state)
        out = {"evaluator": state} if ranks is None else {"evaluator": state, "ranks": ranks}
        twin = (self._twin, sorted(self._aliases)) if self.evaluator is not None else self._stashed_twin
        if twin is not None and twin[0] is not None:
            out["loss_twin"] = list(twin)
        return out

    def setup(self, trainer, pl_module, stage):
        self._stage = str(getattr(stage, "value", stage))  # (before Lightning restores a checkpoint's callbacks)

    def load_state_dict(self, state_dict) -> None:
        if self._stage != "fit":
            # trainer.validate(ckpt_path=...) restores the callbacks' states too: that checkpoint's is not this run's,
            # and the next fit() took it (a new run started at an old run's step 79, every call after refused as going
            # backwards; a fit continued after validating an earlier checkpoint lost its later evaluations; a probe)
            return
        # Restore runs before or after on_fit_start depending on the strategy: apply it in on_train_start.
        self._stashed = state_dict.get("evaluator")
        self._stashed_ranks = state_dict.get("ranks")
        self._stashed_twin = state_dict.get("loss_twin")

    def _own_state(self, zero_state: dict, ranks) -> dict:
        """This rank's state from a checkpoint holding every rank's; rank zero's (with a warning when the
        checkpoint was written by another number of ranks) otherwise."""
        rank, world = self.evaluator.dist.rank_world()
        if not ranks:
            return zero_state
        if len(ranks) == world and isinstance(ranks[rank], Mapping):
            return ranks[rank]
        log.warning("adaptive_eval: the checkpoint holds the states of %d ranks, this run has %d: rank %d resumes "
                    "with rank zero's (its detectors start from rank zero's view of the run)", len(ranks), world, rank)
        return zero_state


_FILES_AT_MOST = 64  # the recent steps whose files the adapter remembers (the look back keeps fewer)


def _metric_type():
    """torchmetrics' ``Metric`` (what ``self.log`` also accepts), or None without torchmetrics."""
    try:
        from torchmetrics import Metric
    except ImportError:
        return None
    return Metric


class _MetricStates:
    """The torchmetrics ``Metric`` modules of a module, for the adapter's own validation calls: their states are
    saved first and restored after (a metric the user accumulates is left as it was), reset before each
    validation set, and computed over this rank's items only (no sync across ranks: the evaluator combines the
    ranks' shards).  A metric built with ``dist_sync_on_step=True`` would all-gather across ranks at every item
    the adapter scores: ranks with shards of different sizes (and an asynchronous replica, from its worker
    thread, beside training's own collectives) would wait in a collective the others never join; it is turned
    off for the adapter's calls and restored after."""

    def __init__(self, module, metric_type):
        self.saved = []
        if metric_type is None:
            return
        for m in module.modules():
            if isinstance(m, metric_type):
                state = {name: _copy_state(getattr(m, name)) for name in getattr(m, "_defaults", {})}
                extra = {name: getattr(m, name) for name in ("_update_count", "_computed", "_forward_cache",
                                                             "dist_sync_on_step") if hasattr(m, name)}
                if getattr(m, "dist_sync_on_step", False):
                    m.dist_sync_on_step = False
                self.saved.append((m, state, extra))

    def reset(self) -> None:
        for m, _, _ in self.saved:
            m.reset()

    @staticmethod
    def compute(metric):
        to_sync = getattr(metric, "_to_sync", None)
        if to_sync is not None:
            metric._to_sync = False
        try:
            return scalar(metric.compute())
        finally:
            if to_sync is not None:
                metric._to_sync = to_sync

    def restore(self) -> None:
        for m, state, extra in self.saved:
            for name, value in state.items():
                setattr(m, name, value)
            for name, value in extra.items():
                setattr(m, name, value)


class _OutputLists:
    """The lists a module holds as plain attributes, which ``validation_step`` may append to for
    ``on_validation_epoch_end`` (Lightning 2's ``self.validation_step_outputs``): what the adapter's own calls appended
    to one named like that (``*output*``) is removed after them.  Left there, it went into Lightning's next validation
    epoch (250, 200, 600 items where it ran 200; its accuracy 0.8233 for 0.8300, which a ModelCheckpoint or
    EarlyStopping monitor then read), and with ``limit_val_batches=0`` nothing ever cleared it (1,250 tensors after a
    small run; a new user's probe).  Another list that grew (a record the user keeps) is left as it is, said once."""

    def __init__(self, module):
        self.lengths = [(name, value, len(value)) for name, value in vars(module).items() if type(value) is list]

    def restore(self) -> None:
        grew = []
        for name, value, length in self.lengths:
            if len(value) > length:
                if "output" in name.lower():
                    log.debug("adaptive_eval: removed the %d entries its evaluation's validation_step calls appended "
                              "to self.%s", len(value) - length, name)
                    del value[length:]
                else:
                    grew.append(name)
        if grew:
            log_once(("lists", tuple(grew)), "validation_step appended to self.%s in adaptive_eval's own evaluation "
                     "(self.trainer.validating is false there): if on_validation_epoch_end reads it, Lightning's "
                     "validation counts those items too; append only when self.trainer.validating (lists named like "
                     "validation_step_outputs are put back after the evaluation; said once)", ", self.".join(grew))


def _copy_state(value):
    if hasattr(value, "clone"):
        return value.clone()
    if isinstance(value, list):
        return list(value)
    return value


def _monitored(trainer) -> tuple[str, bool] | None:
    """With ``evaluation.metric`` null: ``(key, higher is better)`` of the first ``ModelCheckpoint``/``EarlyStopping``
    monitor, from its ``mode``, as the HF adapter reads ``metric_for_best_model`` (``val_loss`` was tracked as
    higher-is-better beside ``ModelCheckpoint(monitor="val_loss", mode="min")``; a new user's probe); None (the
    first metric logged) without one."""
    from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint

    # A ModelCheckpoint's first (it picks the checkpoints; Lightning moves them last), and only a validation key: a
    # monitor of "train_loss" or "step" (the latest-N pattern) tracked a metric no evaluation has (a review)
    for kind in (ModelCheckpoint, EarlyStopping):
        for cb in trainer.callbacks:
            monitor = getattr(cb, "monitor", None)
            if isinstance(cb, kind) and monitor and _VALIDATION_KEY.match(str(monitor)):
                higher = getattr(cb, "mode", "min") == "max"
                head, idx, tail = str(monitor).partition("/dataloader_idx_")
                if head.endswith("_epoch"):
                    # self.log(name, on_step=True, on_epoch=True) is monitored as name_epoch, and the callback's is
                    # name; a metric may be named name_epoch too: which one is not known here (it was skipped
                    # without a word, and the first metric logged tracked higher-is-better; a new user's probe)
                    log.warning("adaptive_eval: evaluation.metric is null and %s monitors %r: the callback's metric "
                                "is %r if validation_step logs it on_step and on_epoch, else %r; set "
                                "evaluation.metric to it and evaluation.higher_is_better: %s (the first metric "
                                "logged is tracked meanwhile)", type(cb).__name__, monitor,
                                head.removesuffix("_epoch") + idx + tail, monitor, str(higher).lower())
                    continue
                log.info("adaptive_eval: evaluation.metric is null: tracking %r (%s-is-better), the monitor of %s",
                         monitor, "higher" if higher else "lower", type(cb).__name__)
                return str(monitor), higher
    return None


def _say_monitors(trainer, logged=None) -> list[str]:
    """With Lightning's own validation off (``limit_val_batches=0``, the way to let the adapter decide alone), a
    ``ModelCheckpoint``/``EarlyStopping`` monitor finds no key: the adapter's results go to the loggers, not to
    ``callback_metrics``.  Lightning's own message ("could not find the monitored key", or EarlyStopping's
    RuntimeError) does not say why; found by a new-user probe.  So does a monitor of an ``adaptive_eval/...`` key with
    Lightning's validation on (EarlyStopping raised at the first validation).  Said once: at on_train_start, where
    ``logged`` is None and the monitors that the training may log are returned; for those, after the first epoch,
    with ``logged`` the keys logged by then (``trainer.callback_metrics``)."""
    from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint

    unsure: list[str] = []

    for cb in trainer.callbacks:
        monitor = getattr(cb, "monitor", None)
        if not isinstance(cb, (ModelCheckpoint, EarlyStopping)) or not monitor:
            continue
        if trainer.limit_val_batches == 0:
            # (a key the training logs, or ModelCheckpoint's own "step" and "epoch", is seen: the warning said a
            # working monitor never sees anything; a probe)
            if (isinstance(cb, ModelCheckpoint) and monitor in ("step", "epoch")) or monitor in (logged or ()):
                continue
            if logged is None:
                unsure.append(monitor)
                continue
            why = "with limit_val_batches=0: Lightning validates never, and the monitor never sees"
        elif str(monitor).startswith("adaptive_eval/"):  # (a crash at the first validation, unsaid; a probe)
            why = "names one of"  # (it read "names a key of AdaptiveEvalCallback's, which ... sees: ...'s results")
        else:
            continue
        log.warning("adaptive_eval: %s(monitor=%r) %s AdaptiveEvalCallback's results (they go to the loggers as "
                    "adaptive_eval/<metric>, not to callback_metrics); checkpoint by steps "
                    "(ModelCheckpoint(every_n_train_steps=...), no monitor) and pick with "
                    "callback.evaluator.best(steps=...), the kept files' steps less one",
                    type(cb).__name__, monitor, why)
    return unsure


def _same(a: float, b: float, rel_tol: float) -> bool:
    """``a`` and ``b`` are one value: close, or both NaN (an AMP step's NaN loss logged under the module's own name
    read as another stream than the loss: two nonfinite alarms for one, and the schedule tightened twice; a probe)."""
    return math.isclose(a, b, rel_tol=rel_tol) or (a != a and b != b)


def _kind(key: str) -> int:
    """0: a key the adapter does not observe (validation, schedule, epoch aggregate); 1: another."""
    if _VALIDATION_KEY.match(key) or not watched(key) or key.endswith("_epoch"):
        return 0
    return 1


def _batch_size(loader, i: int) -> int:
    """A validation dataloader's items per batch (``per_item=False``): its ``batch_size``, else its batch sampler's;
    a ValueError when neither says (a bucketing batch sampler of its own: it ran one item at a time, unsaid)."""
    size = getattr(loader, "batch_size", None) or getattr(getattr(loader, "batch_sampler", None), "batch_size", None)
    if isinstance(size, int) and size > 0:
        return size
    raise ValueError(f"per_item=False: validation dataloader {i} has no batch_size (a batch_sampler of its own); pass "
                     "AdaptiveEvalCallback(batch_size=...) for the items per validation_step call")


def _batches(indices: list, size: int, whole: bool) -> list[list]:
    """``indices`` in batches of ``size``, as a loader of that batch size gives them; of a sample (not ``whole``), a
    last batch of one item takes one from the batch before: the sample's size, not the set's, left one item over,
    and a step that needs several items (a squeeze()) failed on it where Lightning's own validation never runs
    one (a review)."""
    out = [indices[k:k + size] for k in range(0, len(indices), size)]
    if not whole and len(out) > 1 and len(out[-1]) == 1 and size > 2:
        out[-1].insert(0, out[-2].pop())
    return out


def _items_of(loader, trainer):
    """The validation items a dataloader draws, as a dataset the request's indices index: its dataset, or the
    items its sampler picks (a ``SubsetRandomSampler`` or sampler of one's own over a shared dataset: indexing the
    dataset itself scored training items, without a word; found by a new user), sorted (a sampler that shuffles
    picks the same items in another order).  Lightning's distributed samplers are seen through (the adapter shards
    by itself); an ``IterableDataset`` has no items to pick: a ``ValueError``.  ``fast_dev_run=N``: the first N
    batches' items, as Lightning validates on N batches.  ``limit_val_batches`` caps Lightning's own validation,
    not the callback's sample (``limit_val_batches=1`` keeps Lightning's validation cheap; read as Lightning reads
    it, it capped every evaluation at one batch in a trial)."""
    import torch.utils.data as data

    dataset = loader.dataset
    if isinstance(dataset, data.IterableDataset):
        raise ValueError(f"the validation dataloader's dataset is an IterableDataset ({type(dataset).__name__}): it "
                         "has no items to pick a sample from; pass a map-style val_dataset= (one with __len__ and "
                         "__getitem__) or evaluate_fn=")
    if isinstance(loader, data.DataLoader) and loader.batch_size is None and loader.batch_sampler is None:
        # (each item wrapped as a batch of one: every evaluation failed in validation_step, "not enough values to
        # unpack", with advice about per_item=False that did not apply; a new user's probe)
        raise ValueError("the validation dataloader has batch_size=None: each item of its dataset is a batch "
                         "already, and the callback, which picks the items to evaluate, cannot pick inside one; pass "
                         "a map-style val_dataset= of single items (and batch_size= for its batches) or evaluate_fn=")
    sampler = getattr(loader, "sampler", None)
    batches = getattr(loader, "batch_sampler", None)
    if batches is not None and not (type(batches) is data.BatchSampler and batches.sampler is sampler):
        sampler = batches  # (batch_sampler=: its batches' items; the loader's sampler is then a SequentialSampler)
    if isinstance(getattr(sampler, "dataset", None), _sampler_wrapper_type()):
        sampler = sampler.dataset._sampler  # Lightning's DistributedSamplerWrapper around the user's sampler
    items = None
    if sampler is not None and not isinstance(sampler, (data.SequentialSampler, data.RandomSampler,
                                                        data.DistributedSampler)):
        try:
            items = _drawn(sampler, len(dataset) + 1)
        except (TypeError, ValueError):
            items = None  # (a sampler that does not yield indices: the dataset as it is)
        if items is not None and len(set(items)) < len(items):
            raise ValueError(f"the validation dataloader's sampler ({type(sampler).__name__}) draws an item more "
                             "than once; pass val_dataset= (the items to evaluate) or evaluate_fn=")
        if items is not None:  # (sorted: a sampler that shuffles gives the same items in any order, resumed too)
            items = None if sorted(items) == list(range(len(dataset))) else sorted(items)
    fast = getattr(trainer, "fast_dev_run", False) if trainer is not None else False
    if fast:
        size = getattr(loader, "batch_size", None) or getattr(getattr(loader, "batch_sampler", None), "batch_size",
                                                                None)
        first = int(fast) * max(int(size or 1), 1)
        items = (items if items is not None else list(range(len(dataset))))[:first]
    return dataset if items is None else data.Subset(dataset, items)


def _drawn(sampler, most: int) -> list[int]:
    """The indices ``sampler`` yields (at most ``most``: one that never ends is cut there), drawn without moving
    the random state training draws from (torch's, numpy's, Python's): iterating a shuffling sampler advanced the
    global torch generator, and adding the callback changed the training batches (found in review)."""
    import operator
    import random

    import numpy as np
    import torch

    py, npy = random.getstate(), np.random.get_state()
    out: list[int] = []
    try:
        with torch.random.fork_rng(devices=[]):
            for i in iter(sampler):  # (an index, or a batch of them: batch_sampler=, or a sampler of batches)
                batch = i.tolist() if hasattr(i, "tolist") else i
                out.extend(operator.index(j) for j in (batch if isinstance(batch, (list, tuple)) else [batch]))
                if len(out) >= most:
                    break
            return out[:most]
    finally:
        random.setstate(py)
        np.random.set_state(npy)


def _sampler_wrapper_type():
    try:
        from lightning.fabric.utilities.distributed import _DatasetSamplerWrapper
    except ImportError:  # (another Lightning: no wrapper to see through)
        return ()
    return _DatasetSamplerWrapper


def _sharded(trainer, pl_module) -> bool:
    """The module's forward runs collectives: FSDP inside it, or wrapping it from outside (Lightning's
    ``FSDPStrategy`` without an auto-wrap policy wraps the whole module: ``trainer.strategy.model``)."""
    if forward_collectives(pl_module):
        return True
    wrapper = getattr(getattr(trainer, "strategy", None), "model", None) if trainer is not None else None
    return wrapper is not None and wrapper is not pl_module and forward_collectives(wrapper)


class _ModuleEval:
    """``evaluate_fn(request)`` running the module's ``validation_step`` (a class, not a lambda: the
    signature detection sees one positional parameter)."""

    _adaptive_eval_name = "validation_step"  # (its failures read "evaluate_fn failed", which the user never wrote)
    evaluates_checkpoints = False  # the module in memory, unless look_back sets it on the instance (it loads them)

    def __init__(self, callback, trainer, pl_module):
        self.callback, self.trainer, self.pl_module = callback, trainer, pl_module

    def __call__(self, request):
        if request.checkpoint is not None:  # (asked only when look_back set evaluates_checkpoints on this instance)
            return self.callback.evaluate_checkpoint(self.trainer, self.pl_module, request)
        return self.callback.evaluate_with_module(self.trainer, self.pl_module, request)

    def on(self, request, replica):
        """The same on ``replica`` (asynchronous evaluation: a copy of the module).  Its copy drops the trainer;
        the replica is attached to it for each ``validation_step`` call, so that ``self.trainer.validating``,
        ``self.global_step`` and ``self.current_epoch`` read as in a synchronous evaluation (the live trainer's;
        ``self.log`` is captured), and detached while its batch is moved to the device (with a trainer,
        Lightning would run the live module's transfer hooks from the worker thread)."""
        trainer = self.trainer
        # (the trainer as it stood when the evaluation was submitted, its global_step and current_epoch read then: the
        # live one's had moved on, item by item, 43.98 and 44.51 for the weights of step 39, and a generation seeded
        # with it measured other values than the synchronous run's; a probe)
        stamp = getattr(replica, "_adaptive_eval_stamp", None) or (
            request.step + 1, request.step // max(self.callback._steps_per_epoch, 1))
        at = None if trainer is None else _trainer_at(trainer, *stamp)
        if trainer is not None and "validation_step" not in vars(replica):
            step = type(replica).validation_step

            def validation_step(*args, **kwargs):  # (an instance attribute of the replica, kept with it)
                replica._trainer = replica._adaptive_eval_at
                try:
                    return step(replica, *args, **kwargs)
                finally:
                    replica._trainer = None

            replica.validation_step = validation_step
        replica._adaptive_eval_at = at
        try:
            return self.callback.evaluate_with_module(trainer, replica, request)
        finally:
            replica._adaptive_eval_at = None  # (a replica in the pool holds no trainer: it pickles, copies)


_AT_CLASSES: dict[type, type] = {}


def _trainer_at(live, global_step: int, current_epoch: int):
    """The live trainer as an asynchronous replica's ``validation_step`` sees it: an instance of the trainer's own
    class (``isinstance`` holds), every attribute read from and written to the live trainer, but ``global_step`` and
    ``current_epoch``, which are those read when the evaluation was submitted."""
    cls = _AT_CLASSES.get(type(live))
    if cls is None:
        def read(self, name):
            try:
                live = object.__getattribute__(self, "_at_live")
            except AttributeError:  # (a copy being made: nothing to forward to)
                raise AttributeError(name) from None
            return getattr(live, name)

        def write(self, name, value):
            if name.startswith("_at_"):
                object.__setattr__(self, name, value)
            else:
                setattr(object.__getattribute__(self, "_at_live"), name, value)

        cls = _AT_CLASSES[type(live)] = type(f"{type(live).__name__}AtStep", (type(live),), {
            "__getattr__": read, "__setattr__": write,
            "global_step": property(lambda self: object.__getattribute__(self, "_at_step")),
            "current_epoch": property(lambda self: object.__getattribute__(self, "_at_epoch")),
            "__reduce__": lambda self: (_live_of, (object.__getattribute__(self, "_at_live"),)),
        })
    at = object.__new__(cls)
    at._at_live, at._at_step, at._at_epoch = live, int(global_step), int(current_epoch)
    return at


def _live_of(live):
    """A copy or pickle of a trainer-at-step is the live trainer (it is never kept)."""
    return live

"""Hugging Face ``Trainer`` (and TRL's trainers, which are ``Trainer`` subclasses): one callback.

.. code-block:: python

    from adaptive_eval.integrations.hf import AdaptiveEvalCallback

    trainer = Trainer(model, args, train_dataset=train, eval_dataset=held_out, compute_metrics=accuracy,
                      callbacks=[AdaptiveEvalCallback("default")])
    trainer.train()

What it does (each step is something a user would otherwise write; see the README's table):

* builds the :class:`~adaptive_eval.AdaptiveEvaluator` at ``on_train_begin``, when ``state.max_steps`` and
  the steps per epoch are known (``max(ceil(len(train_dataloader) / gradient_accumulation_steps), 1)``, as
  ``Trainer`` computes it), and inside the process group the trainer set up;
* feeds **every** optimizer step's training loss to ``observe`` as ``train/loss`` (the sum of what
  ``training_step`` returned in that step, i.e. what ``Trainer`` adds to the loss it logs every
  ``logging_steps``), plus every other number the trainer logs (``train/grad_norm``, your own keys; not the
  schedule: ``learning_rate``, ``epoch``, runtimes), on adaptive_eval's 0-based step axis
  (``state.global_step - 1``);
* evaluates when the evaluator decides, on the items the request names, through the trainer's own
  ``eval_dataset``, ``data_collator``, ``prediction_step`` and ``compute_metrics``: each rank scores only
  its shard (``request.indices``) with the unwrapped model (no collective inside, no second sharding), one
  item at a time, so ``eval_loss`` and every ``compute_metrics`` key are per-item values with real
  intervals.  With ``per_item=False`` each rank's shard is scored in batches and ``compute_metrics`` runs
  once per shard: the metrics are aggregates, reported with n (items) but no interval, unless
  ``evaluation.metric_kinds`` declares one a proportion (a corpus-level metric failing on one item says so).
  The eval set is prepared as HF's own ``evaluate()`` prepares it (unused columns removed); a dict of eval sets
  is evaluated set by set, metrics ``eval_<name>_<metric>``; a ``compute_metrics`` key that is not one number
  is skipped (named once in a warning);
* evaluates the final weights (``trigger.eval_at_end``: the last ``on_step_end`` is step ``max_steps - 1``);
* logs each result through ``trainer.log`` as ``eval_<metric>``, ``eval_<metric>_ci_low/_ci_high/_n``, so
  it lands wherever ``report_to`` points (TensorBoard ``eval/...``, W&B, ``log_history``) without eating the
  step's training log (``control.should_log`` is restored);
* saves its state in checkpoints (``state()``: plain JSON) and resumes with the same decisions, also with
  ``restore_callback_states_from_checkpoint=True``.  HF keeps callback states from world process zero only,
  so under DDP every other rank writes its own (its detectors saw its own losses) to
  ``checkpoint-<step>/adaptive_eval_rank<r>.json`` at ``on_save``, beside HF's own per-rank
  ``rng_state_<r>.pth``, and resumes from it (a warning, and rank zero's state, when it is missing).  With
  ``restore_callback_states_from_checkpoint=True``: HF then replaces the callback by one rebuilt from
  ``state()["args"]``, which takes what is not a plain value (``evaluate_fn``, ``eval_dataset``,
  ``executor``, ``clock``, the trainer) from the instance it replaces (found in HF's
  ``Trainer._load_callback_state``; a warning when it cannot be);
* asynchronous evaluation (``executor=``, or ``evaluation.asynchronous`` in the config): the trainer's own
  evaluation runs in the worker on a replica holding the weights of its step (never the live model), results
  are logged when integrated (``eval_adaptive_step``: the weights' step), and ``on_train_end`` waits for
  the evaluations still in flight and logs them.

Tracked metric: ``evaluation.metric`` if set (``eval_`` put in front of a name without it, as HF does for
``metric_for_best_model``, unless ``evaluate_fn`` is yours); else ``args.metric_for_best_model`` (with
``greater_is_better``); else, without ``compute_metrics``, ``eval_loss`` (lower is better); else the first
``compute_metrics`` key (higher is better).  Never ``eval_runtime`` or ``epoch``.

The callback finds its ``Trainer`` when the trainer announces it (``on_init_end``, called from
``Trainer.__init__``) by looking one frame up the stack; where that cannot work (a callback added after the
trainer was built), pass ``trainer=``.  Nothing here raises inside the training step, except the user's own
``evaluation.on_error: raise``.
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import math
import os
import sys
import weakref
from collections.abc import Callable, Mapping, Sequence

from adaptive_eval.asynchronous import EvaluationCancelled, cancel_requested
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

try:
    import accelerate  # noqa: F401 - TrainingArguments needs it: fail here, naming the extra
    import transformers
    from transformers import TrainerCallback
    from transformers.trainer_callback import ExportableState
except ImportError as _exc:  # ModuleNotFoundError, or HF's ImportError for a too-old accelerate
    raise missing("hf", "transformers and accelerate>=1.1.0", _exc) from _exc

if int(transformers.__version__.split(".")[0]) < 5:
    raise ImportError(f"adaptive_eval.integrations.hf needs transformers>=5 (found {transformers.__version__}): "
                      "pip install 'adaptive-eval[integrations]'")

__all__ = ["AdaptiveEvalCallback"]

log = logging.getLogger("adaptive_eval")

# TRL's trainers whose model generates its training data: their prediction_step measures nothing to evaluate.
_GENERATING_TRAINERS = ("GRPOTrainer", "RLOOTrainer", "OnlineDPOTrainer", "PPOTrainer", "XPOTrainer", "NashMDTrainer")

# Keys HF logs that the per-step loss already covers, or that summarize the whole run.
_NOT_OBSERVED = ("loss", "train_loss")

# What the user passed that is not a plain value: not in state()["args"], so HF's rebuilt callback
# (restore_callback_states_from_checkpoint) takes it from the instance it replaces.
_LIVE = ("evaluate_fn", "eval_dataset", "executor", "clock", "resource_monitor", "_trainer_ref")

# Under DDP, each rank but world process zero keeps its own state beside the checkpoint (HF saves
# ``stateful_callbacks`` from process zero only): ``checkpoint-<step>/`` + this.
_RANK_STATE = "adaptive_eval_rank{rank}.json"


def _checkpoint_dir(args, global_step: int) -> str:
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    return os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{global_step}")


def _resumed_from() -> str | None:
    """The checkpoint folder ``Trainer.train`` is resuming from (its ``resume_from_checkpoint``, found on the
    call stack), or None."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name in ("_inner_training_loop", "train"):
            path = frame.f_locals.get("resume_from_checkpoint")
            if isinstance(path, (str, os.PathLike)):
                return os.fspath(path)
        frame = frame.f_back
    return None


def _replaced_instance(callback):
    """``(instance, trainer)`` when HF's ``Trainer._load_callback_state`` is building ``callback`` from a
    checkpoint's saved arguments to replace ``instance`` (the one the user passed); else ``(None, None)``."""
    try:
        frame = sys._getframe(2)
    except ValueError:  # built at the bottom of the stack
        return None, None
    for _ in range(4):  # a subclass's __init__ may sit in between
        if frame is None:
            break
        if frame.f_code.co_name == "_load_callback_state":
            old, trainer = frame.f_locals.get("callback"), frame.f_locals.get("self")
            if not isinstance(trainer, transformers.Trainer):
                trainer = None
            return (old if isinstance(old, type(callback)) and old is not callback else None), trainer or True
        frame = frame.f_back
    return None, None


def _strategy(value) -> str:
    return str(getattr(value, "value", value) or "no").lower()


def _say_hf_evaluation(args, trainer) -> None:
    """Say (once a run, at on_train_begin) what HF's own evaluation machinery does beside the callback, found by a
    new-user probe with no word from either: with ``eval_strategy`` "steps"/"epoch" HF evaluates on its own
    schedule too (every evaluation twice, two ``eval_*`` rows at some steps); with "no", HF's best-checkpoint
    tracking (``save_strategy="best"``, ``metric_for_best_model``) never runs, as it sees only HF's own
    evaluations (the callback's are not handed to it: picked by their raw means, its small evaluations would
    make the luckiest one the best, the winner's curse)."""
    evaluates = _strategy(getattr(args, "eval_strategy", "no")) != "no"
    if evaluates:
        log.warning("adaptive_eval: eval_strategy=%r: HF evaluates on its own schedule as well as "
                    "AdaptiveEvalCallback, so the eval set is evaluated twice and both write eval_* keys; set "
                    "eval_strategy='no' to let the callback decide (keep it only for HF's best-checkpoint tracking "
                    "or early stopping, which see HF's own evaluations only)", _strategy(args.eval_strategy))
    elif _strategy(getattr(args, "save_strategy", "no")) == "best":
        log.warning("adaptive_eval: save_strategy='best' with eval_strategy='no': HF's best-checkpoint tracking "
                    "sees only HF's own evaluations, so it never saves; AdaptiveEvalCallback's results are not "
                    "handed to it.  Save checkpoints by steps and pick with "
                    "callback.evaluator.best(steps=[n - 1 for each checkpoint-n kept]), which allows for many small noisy evaluations (the "
                    "TensorBoard text 'picked' has its pick)")


def _find_trainer(callback) -> object | None:
    """The ``Trainer`` whose ``__init__``/``train`` is calling us, found on the call stack."""
    frame = sys._getframe(2)
    while frame is not None:
        obj = frame.f_locals.get("self")
        if isinstance(obj, transformers.Trainer) and callback in obj.callback_handler.callbacks:
            return obj
        frame = frame.f_back
    return None


def _wants_metrics(trainer) -> bool:
    """Whether the trainer's evaluation computes ``compute_metrics`` (not with ``prediction_loss_only``, as HF)."""
    return trainer.compute_metrics is not None and not trainer.args.prediction_loss_only


class _Joined:
    """What HF's ``evaluation_loop`` hands ``compute_metrics``, batch by batch: predictions, labels, losses (the
    batch's loss once per item) and inputs, each joined across batches as HF joins them (``EvalLoopContainer``:
    padded with -100 where lengths differ, a causal LM's batches of another length failed to join; or kept as a
    list of batches with ``eval_do_concat_batches=False``); numpy arrays, or the tensors as they are with
    ``batch_eval_metrics`` (HF passes each batch's tensors)."""

    def __init__(self, concat: bool, tensors: bool):
        from transformers.trainer_pt_utils import EvalLoopContainer

        self.tensors = tensors
        self.parts = {k: EvalLoopContainer(concat, padding_index=-100)
                      for k in ("predictions", "label_ids", "losses", "inputs")}
        self.any = False
        self._last: dict = {}

    def add(self, loss, logits, labels, inputs, items: int) -> None:
        self.any = True
        losses = loss.detach().reshape(-1)[:1].repeat(items) if loss is not None else None
        self._last = {"predictions": logits, "label_ids": labels, "losses": losses, "inputs": inputs}
        if self.tensors:
            return  # (the last batch's tensors are what is handed over: nothing to join)
        for k, v in self._last.items():
            if v is not None:
                self.parts[k].add(v)

    def offload(self) -> None:
        for c in self.parts.values():
            c.to_cpu_and_numpy()

    def arrays(self) -> dict:
        if self.tensors:
            return dict(self._last)
        return {k: c.get_arrays() for k, c in self.parts.items()}


def _stop_if_cancelled(step: int | None) -> None:
    """Raise :class:`~adaptive_eval.asynchronous.EvaluationCancelled` when the asynchronous evaluation of ``step``
    this thread runs was cancelled (None: never: ranks in lockstep make every forward call)."""
    if step is not None and cancel_requested():
        raise EvaluationCancelled(f"the evaluation of step {step} was cancelled (an urgent one took its place); it "
                                  "stopped at a batch")


def _tensorboard_beside(cfg, trainer):
    """Our TensorBoard logger when ``logging.tensorboard_dir`` is the folder HF's own ``TensorBoardCallback``
    writes to (``report_to=["tensorboard"]``), else None (the evaluator makes its own).  There the results already
    reach HF's writer through ``trainer.log`` (``eval/accuracy``, ``eval/accuracy_ci_low``, ... on HF's 1-based
    step), so our file leaves them out: one metric is one tag series.  Before, the same points were also
    ``eval/eval_accuracy`` one step earlier (found by a new user).  Everything else (``controller/*``, alarms,
    decisions, ``eval/<m>/paired_diff``, ...) is still written."""
    folder = cfg.logging.tensorboard_dir
    if folder is None or trainer is None:
        return None
    theirs = _their_tensorboard_folder(trainer)
    if theirs is not None and (os.path.realpath(os.path.expanduser(theirs))
                               == os.path.realpath(os.path.expanduser(os.fspath(folder)))):  # (~/x is theirs too)
        from adaptive_eval.loggers import NullLogger
        from adaptive_eval.tensorboard import make_logger

        try:
            logger = make_logger(folder, flush_secs=cfg.logging.flush_secs)
        except OSError:
            return None  # (the evaluator tries again, says so once and logs nothing)
        return logger if isinstance(logger, NullLogger) else _WithoutTrainerResults(logger)
    return None


def _their_tensorboard_folder(trainer) -> str | None:
    """The folder HF's own ``TensorBoardCallback`` writes to (``report_to=["tensorboard"]``), or None."""
    from transformers.integrations import TensorBoardCallback

    for callback in trainer.callback_handler.callbacks:
        writer = getattr(callback, "tb_writer", None) if isinstance(callback, TensorBoardCallback) else None
        theirs = getattr(writer, "log_dir", None) or getattr(writer, "logdir", None)
        if theirs is not None:
            return os.fspath(theirs)
    return None


def _evaluating(trainer, model):
    """``trainer`` as the callback's own ``prediction_step`` calls need it.  Each rank scores its own shard: with HF's
    default ``average_tokens_across_devices`` and a model whose forward takes ``**kwargs`` (every stock HF model),
    ``prediction_step`` all-gathers the batch's label count at every call (``Trainer._get_num_items_in_batch``) and
    scales the loss by the number of processes.  Ranks scoring 32 and 31 items then made unmatched collectives (gloo
    aborted the run, or an asynchronous one hung), and an item's loss read the other rank's labels (a multi-process
    probe).  A ``Seq2SeqTrainer`` with ``predict_with_generate`` generates with the arguments'
    ``generation_max_length`` and ``generation_num_beams``, as its ``evaluate()`` sets them (``_gen_kwargs``) for
    HF's own evaluation: the callback's generated with the model's generation config instead (max_length 20,
    greedy) and scored other answers than HF's ``evaluate()``; and it generates with ``model`` (its
    ``prediction_step`` generates with ``self.model``, whatever model it is handed: an asynchronous evaluation
    generated with the live model, in training mode, and its dropout drew from the training run's random numbers;
    a probe).  A shallow copy where any of it applies (the training loop's trainer and args are left alone: an
    asynchronous evaluation runs beside it)."""
    args = trainer.args
    own_tokens = getattr(args, "average_tokens_across_devices", False) and getattr(args, "world_size", 1) > 1
    generating = getattr(args, "predict_with_generate", False) and isinstance(trainer, transformers.Seq2SeqTrainer)
    if not own_tokens and not generating:
        return trainer
    local = copy.copy(trainer)
    if own_tokens:
        local.args = copy.copy(args)
        local.args.average_tokens_across_devices = False
    if generating:  # (as Seq2SeqTrainer.evaluate() with no gen_kwargs: what HF's evaluation during training passes)
        local.model = model
        gen_kwargs = {}
        if getattr(args, "generation_max_length", None) is not None:
            gen_kwargs["max_length"] = args.generation_max_length
        if getattr(args, "generation_num_beams", None) is not None:
            gen_kwargs["num_beams"] = args.generation_num_beams
        local._gen_kwargs = gen_kwargs
    return local


_OTHER_SETS = ("test_", "val_", "validation_", "predict_")  # (HF's metric_key_prefix of an evaluation by hand)


def _logs_rl_stats(trainer) -> bool:
    """A TRL trainer (or one under a TRL trainer's name): it logs per-step stats worth watching (reward, kl,
    entropy, ...), where a plain Trainer logs only grad_norm beside the loss."""
    return trainer is not None and any(c.__module__.startswith("trl.") or c.__name__ in _GENERATING_TRAINERS
                                       for c in type(trainer).__mro__)


def _say_sparse_logging(args, cfg, total: int | None, steps_per_epoch: int | None = None) -> None:
    """The streams the trainer logs (all but ``train/loss``, observed every step) get one value per
    ``logging_steps``: say so when the detectors' warm-up then takes more than half the run (TRL's default of 10:
    19 of a GRPO run's 20 streams were still warming up at its end, unsaid; a probe), and under
    ``logging_strategy="epoch"`` (one value an epoch) or ``"no"`` (none; a review).  Only for a trainer that logs
    such streams (:func:`_logs_rl_stats`): said of every plain Trainer at HF's default of 500, it was noise."""
    strategy = _strategy(getattr(args, "logging_strategy", "steps"))
    fix = ("set logging_steps=1 (TrainingArguments, GRPOConfig)" if strategy == "steps" else
           "set logging_strategy='steps' and logging_steps=1 (TrainingArguments, GRPOConfig; logging_steps alone is "
           f"read only under logging_strategy='steps')")
    if strategy == "no":
        log.warning("adaptive_eval: logging_strategy='no': the trainer logs no values, so only train/loss is watched "
                    "(the reward, kl, entropy, ... it would log are not); %s to watch them", fix)
        return
    every = steps_per_epoch if strategy == "epoch" else getattr(args, "logging_steps", 1)
    if not total or not isinstance(every, (int, float)) or isinstance(every, bool) or every <= 0:
        return
    every = math.ceil(total * every) if every < 1 else int(every)  # (HF reads a value below 1 as a share of the run)
    from adaptive_eval.detectors._registry import warmup_of

    warmup = warmup_of(cfg.streams.default)
    if every <= 1 or warmup * every <= total / 2:
        return
    log.warning("adaptive_eval: %s: the streams the trainer logs (reward, kl, entropy, ...; train/loss is observed "
                "every step) get one value every %d steps, so a detector's %d-value warm-up takes %d of this run's %d "
                "steps; %s to watch them every step",
                f"logging_steps={every}" if strategy != "epoch" else "logging_strategy='epoch'", every, warmup,
                warmup * every, total, fix)


def _one_reward_function(logs: dict, watch) -> tuple[str, ...]:
    """TRL's per-function ``rewards/<f>/mean`` and ``/std`` when there is one reward function: ``reward`` and
    ``reward_std`` under other names (times its weight), left out unless ``streams.watch`` names them.  Watched as
    streams of their own, each reward alarm corroborated itself (policy.alarm.corroborate 2: a 4 sd shift brought
    an evaluation forward in 10 of 10 seeds under two names, 0 of 10 under one; a probe of GRPOTrainer)."""
    if "reward" not in logs:
        return ()
    means = [key for key in logs if key.startswith("rewards/") and key.endswith("/mean")]
    if len(means) != 1:
        return ()
    twins = (means[0], means[0][:-len("mean")] + "std")
    return tuple(key for key in twins if f"train/{key}" not in (watch or {}))


class _WithoutTrainerResults:
    """A logger that leaves out the result scalars ``trainer.log`` already sent to HF's TensorBoard writer, and charts
    them in its dashboard where HF writes them (``eval/eval_acc/ci_low`` is HF's ``eval/acc_ci_low``)."""

    _OURS_ONLY = ("/samples_per_item", "/nan")  # (eval tags trainer.log does not carry; nor a paired difference's)
    _THEIRS = {"": "", "/ci_low": "_ci_low", "/ci_high": "_ci_high", "/n": "_n"}  # (result_scalars' suffixes)

    def __init__(self, inner):
        self.inner = inner

    def log(self, step, scalars):
        kept, theirs = {}, {}
        for k, v in scalars.items():
            # (a paired difference's bounds and n were left out with HF's: only its bare value was written; a probe)
            if not k.startswith("eval/") or k.endswith(self._OURS_ONLY) or "/paired_diff" in k:
                kept[k] = v
                continue
            head, suffix = k, ""
            for ours in ("/ci_low", "/ci_high", "/n"):
                if k.endswith(ours):
                    head, suffix = k[:-len(ours)], ours
                    break
            if suffix in ("/ci_low", "/ci_high") and not math.isfinite(v):
                continue  # (result_scalars leaves a NaN bound out: charted, it was a band of tags never written)
            # trainer.log's eval_<metric>[_ci_low...] reaches HF's writer as eval/<metric>[_ci_low...] (rewrite_logs)
            theirs[k] = "eval/" + head[len("eval/"):].removeprefix("eval_") + self._THEIRS[suffix]
        if theirs and hasattr(self.inner, "written_as"):
            self.inner.written_as(step, theirs)
        if kept:
            self.inner.log(step, kept)

    def __getattr__(self, name):  # text, log_config, flush, close, set_groups, ...
        return getattr(self.inner, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.inner.close()


def _eval_sets(dataset) -> list:
    """``[(name, dataset)]``: ``[(None, dataset)]`` for one eval set, each ``(name, set)`` of a dict of them."""
    if dataset is None:
        raise ValueError("no eval_dataset: pass Trainer(eval_dataset=...), eval_dataset= or evaluate_fn=")
    sets = list(dataset.items()) if isinstance(dataset, Mapping) else [(None, dataset)]
    if not sets:
        raise ValueError("eval_dataset is an empty dict: pass at least one dataset, or evaluate_fn=")
    for name, one in sets:
        try:
            empty = len(one) == 0
        except TypeError:  # (an iterable dataset: every evaluation failed "object of type 'It' has no len()"; a probe)
            raise ValueError(f"eval_dataset{f'[{name!r}]' if name is not None else ''} is an iterable dataset "
                             f"({type(one).__name__}): it has no items to pick a sample from; pass a map-style "
                             "eval_dataset= (with __len__ and __getitem__), or evaluate_fn=") from None
        if empty:  # (it read as evaluations of 50 items with no metric, "a missing return?"; a probe)
            raise ValueError(f"eval_dataset{f'[{name!r}]' if name is not None else ''} has no items: pass one with "
                             "items, or evaluate_fn=")
    return sets


_REPORTING: list = []  # the callbacks logging a result now (Trainer.log calls every callback's on_log in it)


class AdaptiveEvalCallback(TrainerCallback, ExportableState):
    """Adaptive evaluation inside a Hugging Face ``Trainer`` (see the module documentation).

    ``config``: a preset name or YAML path (``"default"``), a loaded config, a nested dict, or None (the
    default preset); ``overrides``: dotlist overrides on top.  ``evaluate_fn``: your own evaluation
    (``evaluate_fn(request)`` or AReaL-style ``evaluate_fn()``); without one the trainer's
    ``eval_dataset``/``compute_metrics`` are used on the requested items (``eval_dataset=`` picks another
    set).  ``trainer``: only needed when the callback is added after the ``Trainer`` was built.
    ``executor``: a ``concurrent.futures.Executor`` (a thread pool) for asynchronous evaluation (turns
    ``evaluation.asynchronous`` on; yours to shut down); ``clock``: the evaluator's clock (tests).
    ``look_back``: tell the evaluator of every checkpoint the trainer saves (``checkpoint-<step>``), so that
    after a fall it evaluates the last one from before it (``policy.lookback``; synchronous; under DDP every rank
    loads it and scores its shard): the trainer's own evaluation then loads those weights into the model for that
    evaluation (the model's own kept on the CPU meanwhile and put back after), logged as
    ``eval_lookback_<metric>``; your ``evaluate_fn`` must load ``request.checkpoint`` itself.
    ``tensorboard``: with ``report_to=["tensorboard"]`` and no ``logging.tensorboard_dir``, the evaluator writes its
    TensorBoard file (decisions, alarms, controller state) into HF's folder, one run with HF's; False: nowhere.
    ``name``: for two callbacks on two eval sets: the results are logged as ``eval_<name>_<metric>`` (as HF names a
    dict of eval sets') and the evaluator's TensorBoard file is a run of its own, ``<HF's folder>/<name>``.
    ``resource_monitor``: what ``resources.enabled`` reads (anything with ``snapshot() -> ResourceSnapshot``;
    default: the accelerator's own memory), as :meth:`AdaptiveEvaluator.from_config` takes it.
    ``.evaluator`` is the :class:`~adaptive_eval.AdaptiveEvaluator` (None before training starts).
    """

    def __init__(self, config=None, evaluate_fn: Callable | None = None, *, overrides: Sequence[str] = (),
                 per_item: bool = True, eval_dataset=None, trainer=None, executor=None, clock=None,
                 look_back: bool = False, resource_monitor=None, tensorboard: bool = True, name: str | None = None):
        # Plain values only until training starts: HF calls state() already in Trainer.__init__, and the
        # evaluator must be built inside the process group the trainer sets up.
        self.config = plain_config(config)
        self.overrides = list(overrides)
        # A bad config is the user's setup error: a ConfigError naming the key now, in their code, not one
        # logged inside on_train_begin and then a whole run trained without an evaluation (found by a new user).
        build_config(self.config, self.overrides + (["evaluation.asynchronous=true"] if executor is not None else []))
        self.per_item = flag("per_item", per_item)
        if executor is not None:  # (a shut-down pool: refused now, in the user's set-up, not logged at the start)
            from adaptive_eval.asynchronous import check_executor

            check_executor(executor, replica=evaluate_fn is None)
        self.look_back = flag("look_back", look_back)
        self.tensorboard = flag("tensorboard", tensorboard)
        if name is not None and (not isinstance(name, str) or not name.strip("/ ")):
            raise TypeError(f"name must be a non-empty string (or None), got {name!r}")
        self.name = name
        self.evaluate_fn = evaluate_fn
        self.eval_dataset = eval_dataset
        self._trainer_ref = weakref.ref(trainer) if trainer is not None else None
        self.executor = executor
        self.clock = clock
        self.resource_monitor = resource_monitor
        self.evaluator = None
        self._saved_state: dict | None = None  # set by HF when it restores a callback from its arguments
        self._guard = StepGuard()
        self._step_loss = None
        self._pending: int | None = None  # a step whose decision waits for its logged values (on_step_end, on_log)
        self._steps_per_epoch = 1
        self._wrapped_training_step = None
        self.hooks_called: set[str] = set()  # which hooks ran (tests: a renamed hook is never called)
        self._default_fn = None
        self._integrated: Integrated | None = None
        self._warned_trial = False
        self._look_back_said = False
        self._prepared_cache: dict = {}  # id(eval set) -> (it, prepared as HF's evaluate() does, collator, ...)
        self._skipped_keys: set[str] = set()  # compute_metrics keys that are not numbers, said once
        self._followers: tuple[str, ...] = ()  # the callbacks after the one this rebuilt instance replaces
        replaced, trainer_found = _replaced_instance(self)
        if replaced is not None:
            for name in _LIVE:
                setattr(self, name, getattr(replaced, name))
            handler = getattr(trainer_found, "callback_handler", None)
            callbacks = list(getattr(handler, "callbacks", ()))
            if any(cb is replaced for cb in callbacks):
                at = next(i for i, cb in enumerate(callbacks) if cb is replaced)
                self._followers = tuple(type(cb).__name__ for cb in callbacks[at + 1:])
            # The instance the user holds (``cb.evaluator``, ``cb.evaluator.summary()``) is the one HF dropped:
            # it shares this one's attributes from now on, so it sees the evaluator this one builds.
            replaced.__dict__ = self.__dict__
        elif trainer_found is not None:
            log.warning("adaptive_eval: HF rebuilt AdaptiveEvalCallback from a checkpoint's saved arguments "
                        "(restore_callback_states_from_checkpoint) without the instance it replaces: evaluate_fn, "
                        "eval_dataset, executor, clock and resource_monitor are not restored; the trainer's own "
                        "evaluation is used")
        if self._trainer_ref is None and isinstance(trainer_found, transformers.Trainer):
            self._trainer_ref = weakref.ref(trainer_found)

    def _take_back_place(self, trainer) -> None:
        """Move this rebuilt instance back before the callbacks that followed the one it replaced: HF's
        ``_load_callback_state`` removes a restored callback and appends the rebuilt one at the end, so a user
        callback that ran after ours (one that edits the weights in ``on_step_end``) ran before our evaluation
        on a resumed run, and its decisions changed (found by a new-user probe).  Called from ``on_train_begin``,
        while HF iterates the list at this instance: moving it earlier neither skips nor repeats a callback."""
        callbacks = trainer.callback_handler.callbacks
        followers, self._followers = set(self._followers), ()
        mine = next((i for i, cb in enumerate(callbacks) if cb is self), None)
        first = next((i for i, cb in enumerate(callbacks) if cb is not self and type(cb).__name__ in followers), None)
        if mine is not None and first is not None and first < mine:
            callbacks.insert(first, callbacks.pop(mine))

    # -- the trainer ----------------------------------------------------------------------------------
    @property
    def trainer(self):
        return self._trainer_ref() if self._trainer_ref is not None else None

    def on_init_end(self, args, state, control, **kwargs):
        self.hooks_called.add("on_init_end")
        if self._trainer_ref is None:
            trainer = _find_trainer(self)
            if trainer is not None:
                self._trainer_ref = weakref.ref(trainer)

    def _config_defaults(self, args, trainer, cfg) -> list[str]:
        """The tracked metric, when the user's config leaves it null; one named without HF's ``eval_`` prefix, for
        the trainer's own evaluation, gets it, as ``metric_for_best_model`` does (``accuracy`` tracked nothing:
        the evaluation returns ``eval_accuracy``; found by a new-user probe)."""
        if self.evaluate_fn is not None or cfg.evaluation.suites:  # (suites: their own names; said in _build)
            return []
        if cfg.evaluation.metric is not None:
            named = str(cfg.evaluation.metric)
            return [] if named.startswith("eval_") else [f"evaluation.metric=eval_{named}"]
        best = getattr(args, "metric_for_best_model", None)
        if best:
            name = best if best.startswith("eval_") else f"eval_{best}"
            greater = args.greater_is_better if args.greater_is_better is not None else name != "eval_loss"
            return [f"evaluation.metric={name}", f"evaluation.higher_is_better={bool(greater)}"]
        if trainer is None or not _wants_metrics(trainer):  # (prediction_loss_only too: a review)
            sets = self.eval_dataset if self.eval_dataset is not None else getattr(trainer, "eval_dataset", None)
            first = next(iter(sets), None) if isinstance(sets, Mapping) else None
            loss = "eval_loss" if first is None else f"eval_{first}_loss"  # a dict of sets: the first one's loss
            return [f"evaluation.metric={loss}", "evaluation.higher_is_better=false"]
        return []  # null: the first compute_metrics key (per-item, so it has an interval)

    # -- hooks ------------------------------------------------------------------------------------------
    def _seat_state(self, state, trainer) -> None:
        """A checkpoint of a run without this callback, resumed with it: HF's TrainerState, read from the checkpoint,
        has no entry of ours in ``stateful_callbacks``, and its ``_save_checkpoint`` indexes it, so the first save
        raised ``KeyError: 'AdaptiveEvalCallback'`` and the run died, losing the steps since the last checkpoint (a
        probe; HF's own EarlyStoppingCallback fails so).  The entry is seated as HF's TrainerState seats it: each
        instance's state, a list of them for several."""
        name = type(self).__name__
        held = getattr(state, "stateful_callbacks", None)
        if not isinstance(held, dict) or name in held:
            return
        mine = [c for c in (trainer.callback_handler.callbacks if trainer is not None else [])
                if type(c).__name__ == name] or [self]
        held[name] = [c.state() for c in mine] if len(mine) > 1 else mine[0].state()

    def on_train_begin(self, args, state, control, **kwargs):
        self.hooks_called.add("on_train_begin")
        # (a run that died between on_step_end and on_log left its step pending: decided on the next train()'s
        # evaluator, it went back in steps and failed every step; a review)
        self._pending = None
        # (and its step's loss so far: added to the resumed run's first step, 4.24 where it was 2.87; a probe)
        self._step_loss = None
        trainer = _find_trainer(self)
        if trainer is not None:  # (the trainer that trains: one reused in a second Trainer kept the first; found by
            self._trainer_ref = weakref.ref(trainer)  # a new user; two built up front: the first that trains)
        trainer = self.trainer
        if self._followers and trainer is not None:
            self._guard("on_train_begin", self._take_back_place, trainer)
        if trainer is None:
            log.warning("adaptive_eval: AdaptiveEvalCallback did not find its Trainer; pass trainer=... to "
                        "evaluate through it and log through its loggers")
        self._guard("on_train_begin", self._build, args, state, trainer, kwargs.get("train_dataloader"))
        if self.evaluator is not None and state.global_step == 0:
            # trigger.eval_before_train: the initial weights, before the first step, as HF's eval_on_start (it came
            # after the first optimizer step, at that step's decision; found by a probe)
            fn = self.evaluate_fn if self.evaluate_fn is not None else self._default_fn
            self._guard("evaluate", self.evaluator.before_train, fn, 0)
            self._guard("report", self._report_integrated, control)  # (once: it was reported twice; a review)

    def _build(self, args, state, trainer, train_dataloader) -> None:
        from adaptive_eval import AdaptiveEvaluator

        overrides = self.overrides + (["evaluation.asynchronous=true"] if self.executor is not None else [])
        cfg = build_config(self.config, overrides)
        defaults = self._config_defaults(args, trainer, cfg)
        if defaults:
            cfg = build_config(cfg, defaults)
        self._guard.reraise = cfg.evaluation.on_error == "raise"
        if cfg.logging.tensorboard_dir is None and self.tensorboard and trainer is not None:
            # (report_to=["tensorboard"] and no folder of ours: the decisions and alarms reached no TensorBoard, and a
            # user saw results without the why; a new user's probe of the Lightning adapter, alike here)
            folder = _their_tensorboard_folder(trainer)
            if folder is not None and self.name is not None:
                # (a named callback: a run of its own under HF's, <logging_dir>/<name>, as the Lightning adapter's)
                folder = os.path.join(folder, *self.name.strip("/").split("/"))
            if folder is not None:
                cfg = build_config(cfg, defaults={"logging.tensorboard_dir": folder})
        if getattr(state, "is_world_process_zero", True):
            _say_hf_evaluation(args, trainer)
            if self.evaluate_fn is None and any(c.__name__ in _GENERATING_TRAINERS for c in type(trainer).__mro__):
                # (its prediction_step scores no generated answer: every evaluation failed with TRL's own shape
                # error, and nothing said to pass evaluate_fn; found by a new user)
                log.warning("adaptive_eval: %s's own evaluation (prediction_step) does not generate and score "
                            "answers: pass AdaptiveEvalCallback(evaluate_fn=...) that generates and scores the "
                            "requested prompts (request.indices)", type(trainer).__name__)
            if self.evaluate_fn is None and cfg.evaluation.suites:
                say_suites_need_evaluate_fn(cfg, "its eval_dataset")
            elif self.evaluate_fn is None and trainer is not None:
                # (now, not at the first evaluation, hours in: an iterable or missing eval set failed every one)
                try:
                    _eval_sets(self.eval_dataset if self.eval_dataset is not None else trainer.eval_dataset)
                except ValueError as exc:
                    log.warning("adaptive_eval: %s; every evaluation of this run will fail", exc)
        total = int(state.max_steps) if state.max_steps and state.max_steps > 0 else None
        spe = None
        try:
            spe = max(math.ceil(len(train_dataloader) / max(args.gradient_accumulation_steps, 1)), 1)
        except TypeError:  # an iterable dataset: no epochs known
            spe = total
        self._steps_per_epoch = spe or 1
        executor = self.executor
        if (self.evaluate_fn is None and trainer is not None and asynchronous(cfg, executor)
                and forward_collectives(trainer.model)):
            cfg, executor = synchronous_for_sharded(cfg)
        previous = self.evaluator
        if previous is not None and not previous._closed:
            # The last train() raised (a Ctrl-C) and HF has no hook for that: its evaluator was left open, and at
            # exit it said "never closed ... call close()", which an HF user never could (a probe).  Closed here,
            # waiting for nothing more than what the evaluation in flight still needs to finish (its outcome
            # belongs to a run that ended; HF's own state() at the exception already waited for it).
            log.info("adaptive_eval: the evaluator of the last train(), which ended without on_train_end (an "
                     "exception), is closed now")
            previous._exception_close = True  # (no after_train advice at this close: HF's user never calls it)
            self._guard("close", previous.close, 0.0)
        self.evaluator = AdaptiveEvaluator.from_config(cfg, steps_per_epoch=spe, total_steps=total, clock=self.clock,
                                                       executor=executor, logger=_tensorboard_beside(cfg, trainer),
                                                       resource_monitor=self.resource_monitor)
        self._integrated = Integrated()  # (every result integrated, reported: see _report_integrated)
        self.evaluator.add_listener(self._integrated)
        if getattr(state, "is_world_process_zero", True) and _logs_rl_stats(trainer):
            _say_sparse_logging(args, cfg, total, spe)
        # Asynchronous: the trainer's evaluation runs on a copy of the weights of its step, in the worker; and so
        # under evaluation.timeout_s, which may leave it running beside training (timed_alone).
        timed = not asynchronous(cfg, executor) and timed_alone(cfg, getattr(args, "world_size", 1))
        self._default_fn = (ReplicaEval(trainer.model, self._evaluate_on,
                                        live=self._evaluate_with_trainer if timed else None)
                            if trainer is not None and (timed or asynchronous(cfg, executor))
                            else self._evaluate_with_trainer)
        if isinstance(self._default_fn, ReplicaEval):  # (a bound method of ours is named by our property)
            self._default_fn._adaptive_eval_name = self._adaptive_eval_name
        saved = self._saved_state
        stored = (state.stateful_callbacks or {}).get(type(self).__name__)
        if isinstance(stored, list):
            # several instances: HF appends every instance's state at every save ([A, B] at __init__, then A@10,
            # B@10, ...), so the checkpoint's are the last k, in the callbacks' order (the first, an instance's
            # empty state from __init__, was taken: two callbacks resumed afresh, unsaid; found by a probe)
            mine = [c for c in (trainer.callback_handler.callbacks if trainer is not None else [])
                    if type(c).__name__ == type(self).__name__]
            k = max(len(mine), 1)
            at = next((i for i, c in enumerate(mine) if c is self), 0)
            # the instances that saved: as many as the states at the head of the list taken before any training
            saved_k = next((i for i, e in enumerate(stored) if not (isinstance(e, Mapping) and not
                                                                   e.get("attributes", {}).get("_saved_state"))),
                           len(stored))
            if 0 < saved_k != k:  # (another number of callbacks: which state is whose is not known; a review)
                if getattr(state, "is_world_process_zero", True) and at == 0:
                    log.warning("adaptive_eval: the checkpoint holds the states of %d AdaptiveEvalCallback instances "
                                "and this trainer has %d: each starts afresh", saved_k, k)
                stored = None
            else:
                stored = stored[-k:][at] if len(stored) >= k else (stored[-1] if stored else None)
        if isinstance(stored, Mapping) and stored.get("attributes", {}).get("_saved_state"):
            saved = stored["attributes"]["_saved_state"]
        self._guard("on_train_begin", self._seat_state, state, trainer)
        if saved and state.global_step > 0:  # resuming from a checkpoint
            if args.world_size > 1 and args.process_index > 0:
                saved = self._own_state(args, state, saved)
            if not load_or_start_afresh(self.evaluator, saved, state.global_step):
                saved = None
        if saved and state.global_step > 0:
            if self.look_back:
                # The state in checkpoint-N was taken before on_save handed checkpoint-N over: hand it over again,
                # as the uninterrupted run did.
                resumed = _resumed_from() or _checkpoint_dir(args, state.global_step)
                self._keep_checkpoint(args, state, resumed)
                relocate_checkpoints(self.evaluator, resumed)
        if self._wrapped_training_step is not None and self._wrapped_training_step[0] is not trainer:
            # (a train() that was interrupted never reached on_train_end: the callback, reused in a new Trainer,
            # kept the old one's wrapper and watched no training loss again, unsaid; a probe)
            self._wrapped_training_step[0].__dict__.pop("training_step", None)
            self._wrapped_training_step = None
        if trainer is not None and self._wrapped_training_step is None:
            self._wrap_training_step(trainer)
        if (self.look_back and "lookback" in self.evaluator.policies.by_name and getattr(args, "save_total_limit", None)
                == 1 and _strategy(getattr(args, "save_strategy", "no")) != "no"
                and getattr(state, "is_world_process_zero", True)):
            # (as the Lightning adapter says of save_top_k=1: a new user's look backs found checkpoint-95 gone, and
            # nothing had said why at the start)
            log.warning("adaptive_eval: look_back: save_total_limit=1 keeps only the latest checkpoint (and the best, "
                        "with load_best_model_at_end), which the next save replaces, so a look back will mostly find "
                        "the checkpoint from before a fall gone; keep several (save_total_limit=None or 4 and up) and "
                        "save every few steps (save_steps)")

    def _own_state(self, args, state, zero_state: dict) -> dict:
        """This rank's state saved beside the checkpoint being resumed (``on_save``); rank zero's, with a
        warning, when there is none for this rank, step and world size."""
        folder = _resumed_from() or _checkpoint_dir(args, state.global_step)
        path = os.path.join(folder, _RANK_STATE.format(rank=args.process_index))
        why = None
        try:
            with open(path, encoding="utf-8") as f:
                saved = json.load(f)
        except FileNotFoundError:
            why = "it is missing"
        except (OSError, ValueError) as exc:
            why = f"it cannot be read ({type(exc).__name__}: {exc})"
        else:
            expected = {"global_step": state.global_step, "world_size": args.world_size, "rank": args.process_index}
            found = {key: saved.get(key) for key in expected} if isinstance(saved, Mapping) else {}
            if found != expected or not isinstance(saved.get("state"), Mapping):
                why = f"it is for {found or 'something else'}, not {expected}"
            else:
                return saved["state"]
        log.warning("adaptive_eval: rank %d resumes with world process zero's state: its own, %s, %s (its "
                    "detectors start from rank zero's view of the run)", args.process_index, path, why)
        return zero_state

    def _wrap_training_step(self, trainer) -> None:
        original = trainer.training_step

        def training_step(*a, **kw):
            loss = original(*a, **kw)
            try:
                self._step_loss = loss.detach() if self._step_loss is None else self._step_loss + loss.detach()
            except Exception:  # noqa: BLE001 - an odd return value is not ours to fail on
                pass
            return loss

        trainer.training_step = training_step
        self._wrapped_training_step = (trainer, original)

    def on_step_end(self, args, state, control, **kwargs):
        self.hooks_called.add("on_step_end")
        if self.evaluator is None:
            return
        global_step = state.global_step - 1  # HF counts optimizer steps from 1 here
        loss, self._step_loss = self._step_loss, None
        if loss is not None:
            value = self._guard("loss", scalar, loss)
            if value is not None:
                self._guard("observe", self.evaluator.observe, {"train/loss": value}, global_step)
        self._decide_pending(control)
        if control.should_log:
            # HF logs this step's values (grad_norm, TRL's rewards) after on_step_end, in on_log: the decision waits
            # for them there, as a loop that observes a step's values before evaluate() decides (decided first, a
            # NaN in grad_norm was seen a step late: two evaluations for one event; found by a probe)
            self._pending = global_step
            return
        self._decide(global_step, control)

    def on_step_begin(self, args, state, control, **kwargs):
        # A step left for its log where no log came (a callback cleared should_log) is decided before the next step
        # trains: decided at the next on_step_end, it evaluated that step's weights (a review)
        self._decide_pending(control)

    def _decide(self, global_step: int, control) -> None:
        epoch, step = divmod(global_step, self._steps_per_epoch)
        fn = self.evaluate_fn if self.evaluate_fn is not None else self._default_fn
        try:
            self._guard("evaluate", self.evaluator.evaluate, fn, epoch, step, global_step)
        finally:  # (on_error: raise: the results integrated beside the failure, reported before it goes up; a review)
            self._guard("report", self._report_integrated, control)

    def _decide_pending(self, control) -> None:
        """The decision of a step left for its log (on_step_end), where no log came: before anything else."""
        pending, self._pending = self._pending, None
        if pending is not None and self.evaluator is not None:
            self._decide(pending, control)

    def on_log(self, args, state, control, logs=None, **kwargs):
        # Read only: a change to `logs` here would reach neither log_history nor the reporters.
        self.hooks_called.add("on_log")
        try:
            self._observe_log(state, logs)
        finally:  # (the step's decision, left for its logged values; reporting it logs again: not pending then)
            if not _REPORTING:
                # Another callback's result, logged from inside its on_log (two callbacks, name="a" and "b"): this
                # one's pending step waits for its own on_log of the step's values (decided in the nested call,
                # before them, b evaluated the step after a's NaN alarm; a probe)
                self._decide_pending(control)

    def _observe_log(self, state, logs) -> None:
        # (not after training: a trainer.evaluate() then was said "observe() after close()", a call the user never
        # made; a new user's probe)
        if self.evaluator is None or not logs or state.global_step < 1 or self.evaluator._closed:
            return
        values = {}
        twins = _one_reward_function(logs, self.evaluator.cfg.streams.watch)
        for key, value in logs.items():
            # (nor another set's evaluation by hand, trainer.evaluate(test_set, metric_key_prefix="test"): its keys
            # were watched as training streams; a probe)
            if key in _NOT_OBSERVED or not watched(key) or key.startswith(_OTHER_SETS) or key in twins:
                continue
            v = scalar(value)
            if v is None and value is None and key == "reward" and self.evaluator.watches("train/reward"):
                # TRL logs its reward as None when every reward function returned None for every sample (it
                # warns, too): NaN, an alarm; dropped, the stream fell silent (a new user's find).  Not the
                # per-function rewards/<f>/mean: in multi-task training a function returns None for the samples
                # it does not apply to, and a window without its task is None there, by design.
                v = math.nan
            if v is not None:
                values[f"train/{key}"] = v
        if values:
            self._guard("observe", self.evaluator.observe, values, state.global_step - 1)

    def on_save(self, args, state, control, **kwargs):
        # Called on every rank after the checkpoint was written; HF kept state() of process zero only.
        self.hooks_called.add("on_save")
        self._decide_pending(control)
        if self.evaluator is not None and self.look_back:
            self._guard("checkpoint", self._keep_checkpoint, args, state, _checkpoint_dir(args, state.global_step))
        if self.evaluator is not None and args.world_size > 1 and args.process_index != 0:
            self._guard("save", self._save_own_state, args, state)
        if self.evaluator is not None and control.should_training_stop:
            # (with eval_strategy="epoch", EarlyStoppingCallback stops training after on_epoch_end, at the evaluation
            # this checkpoint follows: the last weights before load_best_model_at_end loads the best; a review.  After
            # this step's state is saved, as rank zero's was in the checkpoint)
            self._evaluate_last(state, control)

    def _keep_checkpoint(self, args, state, folder: str) -> None:
        """``look_back``: hand the checkpoint just saved to the evaluator, unless the trainer's own evaluation
        of it could not be done safely here (said once)."""
        why = self._no_look_back(args, state)
        if why is None:
            self.evaluator.checkpoint_saved(state.global_step - 1, checkpoint_path(folder))
        elif not self._look_back_said:
            self._look_back_said = True
            log.warning("adaptive_eval: look_back is off for this run: %s", why)

    def _no_look_back(self, args, state) -> str | None:
        """Why the trainer's own evaluation cannot evaluate a kept checkpoint here, or None."""
        if self.evaluate_fn is not None:
            return None  # yours: it loads request.checkpoint itself
        trainer = self.trainer
        if getattr(state, "trial_name", None):
            return "a hyper-parameter search keeps its checkpoints under run-<trial>/"
        if self.evaluator.cfg.evaluation.timeout_s is not None:
            # The evaluation would run in a thread the step stops waiting for, with the checkpoint's weights in
            # the model that trains on; put back later, they would undo the updates made meanwhile.
            return "evaluation.timeout_s is set (a checkpoint's weights are loaded into the training model)"
        if trainer is None:
            return "no Trainer to evaluate with"
        if getattr(trainer, "is_deepspeed_enabled", False) or getattr(trainer, "is_fsdp_enabled", False):
            return "DeepSpeed or FSDP shards the weights"
        model = trainer.model
        if getattr(model, "is_quantized", False) or hasattr(model, "peft_config"):
            return "a quantized or PEFT model (its weights are not put back exactly by load_state_dict)"
        return None

    def _save_own_state(self, args, state) -> None:
        if getattr(state, "trial_name", None):  # a hyper-parameter search keeps checkpoints under run-<trial>/
            if not self._warned_trial:
                self._warned_trial = True
                log.warning("adaptive_eval: in a hyper-parameter search rank %d does not keep its own state beside "
                            "the checkpoints; resumed, it starts from rank zero's", args.process_index)
            return
        folder = _checkpoint_dir(args, state.global_step)
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, _RANK_STATE.format(rank=args.process_index))
        data = {"global_step": state.global_step, "world_size": args.world_size, "rank": args.process_index,
                "state": self.evaluator.state_dict()}
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def on_epoch_end(self, args, state, control, **kwargs):
        # Training stops here before HF's _finalize_training, which loads the best checkpoint into the model with
        # load_best_model_at_end: evaluated at on_train_end, a run stopped early scored that checkpoint under its
        # last step's name (a new user's probe).
        self.hooks_called.add("on_epoch_end")
        self._decide_pending(control)
        if self.evaluator is not None and control.should_training_stop:
            self._evaluate_last(state, control)

    def _evaluate_last(self, state, control) -> None:
        """The last weights of a run stopped early (EarlyStoppingCallback, should_training_stop); nothing where the
        final evaluation already ran at this step."""
        if state.global_step > 0:
            fn = self.evaluate_fn if self.evaluate_fn is not None else self._default_fn
            last = state.global_step - 1
            at_epoch = functools.partial(self.evaluator.after_train, epoch=last // self._steps_per_epoch)
            self._guard("evaluate", at_epoch, fn, last)
            self._guard("report", self._report_integrated, control)

    def on_train_end(self, args, state, control, **kwargs):
        self.hooks_called.add("on_train_end")
        self._decide_pending(control)
        if self._wrapped_training_step is not None:
            trainer, _ = self._wrapped_training_step
            trainer.__dict__.pop("training_step", None)  # back to the class's method
            self._wrapped_training_step = None
        if self.evaluator is not None:
            closed = self._closed_writers()
            self._evaluate_last(state, control)  # (done at on_epoch_end, unless training stopped elsewhere)
            try:
                close_and_drain(self.evaluator, self._guard, lambda result: self._report(result, control),
                                self._integrated)
            finally:  # (on_error: raise, a failure closing integrated: the state and the summary all the same)
                self._guard("report", self._close_reopened, closed)
                self._saved_state = self._guard("state", self.evaluator.state_dict)
                if state.is_world_process_zero:
                    log_summary(self.evaluator)

    # -- evaluation through the trainer -----------------------------------------------------------------
    def _evaluate_with_trainer(self, request):
        if request.checkpoint is None:
            return self._evaluate_on(request, None)
        return self._evaluate_checkpoint(request)

    def _evaluate_checkpoint(self, request):
        """The trainer's evaluation of a kept checkpoint (``look_back``): its weights loaded into the model as
        ``Trainer`` loads them to resume (``_load_from_checkpoint``: safetensors, sharded, PEFT adapters), the
        model's own weights kept on the CPU and put back afterwards, whatever happens (the optimizer's tensors
        are the model's own, written in place both ways)."""
        trainer = self.trainer
        if trainer is None:
            raise RuntimeError("AdaptiveEvalCallback has no Trainer to evaluate with: pass trainer= or evaluate_fn=")
        from adaptive_eval.evaluators import CheckpointUnavailable

        folder = str(request.checkpoint)
        if not os.path.isdir(folder):
            raise CheckpointUnavailable(f"{folder}: no such folder any more (save_total_limit deletes the oldest)")
        try:
            with open(os.path.join(folder, "trainer_state.json"), encoding="utf-8") as f:
                held = json.load(f).get("global_step")
        except (OSError, ValueError):
            held = None  # (no trainer state beside the weights: nothing to check them against)
        if held is not None and held != request.step + 1:
            # another run's checkpoint-N in a reused output folder (found in review)
            raise CheckpointUnavailable(f"{folder}: holds global_step {held}, not {request.step + 1} (the step it was "
                                        "kept for): written again since")
        model = trainer.model
        own = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
        try:
            trainer._load_from_checkpoint(str(request.checkpoint), model=model)
            return self._evaluate_on(request, model)
        finally:
            model.load_state_dict(own)

    def _evaluate_on(self, request, model):
        """The trainer's evaluation of ``request`` on ``model`` (None: the trainer's own, unwrapped).  A dict of
        eval datasets (``Trainer(eval_dataset={"a": ..., "b": ...})``) is evaluated as HF's ``evaluate()`` does,
        each set on the request's items of its own, its metrics named ``eval_<name>_<metric>``."""
        trainer = self.trainer
        if trainer is None:
            raise RuntimeError("AdaptiveEvalCallback has no Trainer to evaluate with: pass trainer= or evaluate_fn=")
        named = _eval_sets(self.eval_dataset if self.eval_dataset is not None else trainer.eval_dataset)
        if model is None:
            model = trainer.model  # unwrapped: a DDP wrapper would run collectives in forward (FSDP's still does)
        trainer = _evaluating(trainer, model)
        refuse_tensor_parallel(model, request)
        lockstep = request.world_size > 1 and forward_collectives(model)
        modes = evaluation_mode(model)
        out = {}
        # TRL's trainers keep their evaluation's per-batch metrics in _metrics["eval"] until their own log() pops
        # them; ours run through prediction_step too, and a user's trainer.evaluate() then averaged ours in
        # (eval_mean_token_accuracy 0.598 where it was 0.784; a probe): what ours add is taken back out.
        kept = getattr(self.trainer, "_metrics", None)
        kept = kept.get("eval") if isinstance(kept, dict) else None
        lengths = {k: len(v) for k, v in kept.items() if isinstance(v, list)} if isinstance(kept, dict) else None
        try:
            for name, raw in named:
                dataset, collator = self._prepared(trainer, raw)
                indices = request.indices(len(dataset))
                # (cancelled, an urgent evaluation taking its place, it stops at a batch: it ran on to its end beside
                # the urgent one, 3 replicas evaluating at max_in_flight 1; a probe.  Not in lockstep: every rank
                # must make its forward calls)
                stop = None if lockstep else request.step
                if self.per_item:
                    pad = lockstep_padding(request, len(dataset), len(indices)) if lockstep else 0
                    part = self._per_item(trainer, model, dataset, collator, indices, pad, stop)
                else:  # (batched in the set's order, as HF's: the token-weighted loss of a batch depends on it)
                    bs = max(int(trainer.args.per_device_eval_batch_size), 1)
                    pad = lockstep_padding(request, len(dataset), len(indices), bs) if lockstep else 0
                    part = self._aggregate(trainer, model, dataset, collator, sorted(indices), pad, stop)
                if name is not None:  # HF's metric_key_prefix f"eval_{name}": eval_<name>_<metric>
                    part = {f"eval_{name}_{k[len('eval_'):]}": v for k, v in part.items()}
                    request._from_set(part, name)  # (the evaluation's items: the sets' added up)
                if not self.per_item:  # (each set's aggregates over its own items: all read the last set's count)
                    request._scored(part, len(indices))
                out.update(part)
        finally:
            restore_modes(modes)
            if lengths is not None:
                for key in [k for k in kept if k not in lengths and isinstance(kept[k], list)]:
                    del kept[key]
                for key, n in lengths.items():
                    if isinstance(kept.get(key), list):
                        del kept[key][n:]
        return out

    def _prepared(self, trainer, dataset):
        """``(dataset, collator)`` prepared as ``Trainer._get_dataloader`` prepares HF's own evaluation: a
        ``datasets.Dataset`` without the columns the model's forward does not take (``_remove_unused_columns``),
        any other dataset with the trainer's collator wrapped to drop them (``_get_collator_with_removed_columns``).
        Without it a ``text`` column kept after tokenizing reached ``DataCollatorWithPadding`` and every
        evaluation failed (found by a new user).  Kept for the dataset it was made for."""
        cached = self._prepared_cache.get(id(dataset))
        if cached is not None and cached[0] is dataset and cached[3] is trainer.data_collator:
            return cached[1], cached[2]
        collator = trainer.data_collator
        try:
            import datasets
        except ImportError:
            datasets = None
        if datasets is not None and isinstance(dataset, datasets.Dataset):
            prepared = trainer._remove_unused_columns(dataset, description="Evaluation")
        else:
            prepared = dataset
            collator = trainer._get_collator_with_removed_columns(trainer.data_collator, description="Evaluation")
        self._prepared_cache[id(dataset)] = (dataset, prepared, collator, trainer.data_collator)
        return prepared, collator

    @staticmethod
    def _pad(trainer, model, dataset, collator, indices, pad: int, batch: int = 1) -> None:
        """``pad`` calls of ``batch`` items each, results dropped (see ``lockstep_padding``), made exactly as the
        real ones are (a ``Seq2SeqTrainer`` generating with ``synced_gpus`` runs collectives per token)."""
        loss_only = not _wants_metrics(trainer)
        for _ in range(pad):
            chunk = [dataset[indices[0] if indices else 0]] * batch
            trainer.prediction_step(model, collator(chunk), prediction_loss_only=loss_only)

    @staticmethod
    def _predict(trainer, model, batch, want: bool):
        """One batch as HF's ``evaluation_loop`` takes it: ``(loss, logits, labels, inputs)``, the logits through
        ``preprocess_logits_for_metrics`` per batch (before batches are joined: a model returning hidden states
        too failed to join them), ``inputs`` the model's main input where ``include_for_metrics`` asks for it (with
        ``batch_eval_metrics``, the batch's whole input dict, as HF hands it over)."""
        loss, logits, labels = trainer.prediction_step(model, batch, prediction_loss_only=not want)
        inputs = None
        if want and "inputs" in (trainer.args.include_for_metrics or ()):
            if trainer.args.batch_eval_metrics:  # (HF hands each batch's inputs over whole: the model's input dict)
                inputs = trainer._prepare_input(batch)
            else:
                inputs = batch.get(getattr(trainer.model, "main_input_name", "input_ids"))
        if want and logits is not None and trainer.preprocess_logits_for_metrics is not None:
            logits = trainer.preprocess_logits_for_metrics(logits, labels)
        if isinstance(logits, tuple) and len(logits) == 1:
            logits = logits[0]
        return loss, logits, labels, inputs

    def _metrics_of(self, trainer, prediction: dict, one_item: bool = False, last: bool = True) -> dict:
        """``compute_metrics``' scalar keys as ``eval_<key>``, called as HF's ``evaluation_loop`` calls it on
        ``prediction`` (``predictions``, ``label_ids``, ``losses``, ``inputs``; ``losses`` and ``inputs`` where
        ``include_for_metrics`` asks for them; with ``batch_eval_metrics``, ``compute_result=last``).  A key that is
        not one number (a list, a string: HF logs them as they are) is not a metric: skipped, with a warning naming
        it, once (such a key made every evaluation fail, the scalar metrics with it: found by a new user)."""
        from transformers import EvalPrediction

        include = trainer.args.include_for_metrics or ()
        pred = EvalPrediction(predictions=prediction["predictions"], label_ids=prediction["label_ids"],
                              losses=prediction["losses"] if "loss" in include else None,
                              inputs=prediction["inputs"] if "inputs" in include else None)
        try:
            if trainer.args.batch_eval_metrics:  # (compute_metrics(p) failed every evaluation: a new user's probe)
                metrics = trainer.compute_metrics(pred, compute_result=last)
            else:
                metrics = trainer.compute_metrics(pred)
        except Exception as exc:
            if not one_item:
                raise
            raise RuntimeError(
                f"compute_metrics failed on one item ({type(exc).__name__}: {exc}).  AdaptiveEvalCallback calls it "
                "once per item by default (per_item=True), so that each metric has a real interval: if it failed "
                "because a metric needs several items (a corpus-level metric: F1 macro, AUC, BLEU, ...), pass "
                "AdaptiveEvalCallback(..., per_item=False), which calls it once per batch of items") from exc
        if metrics is not None and not isinstance(metrics, Mapping):
            # (a list failed every evaluation with "'list' object has no attribute 'items'", naming neither; a probe)
            raise TypeError(f"compute_metrics must return a dict of metric name to number, as HF's Trainer takes it, "
                            f"got {type(metrics).__name__}")
        out, skipped = {}, []
        for k, v in (metrics or {}).items():
            value = float(v) if isinstance(v, bool) else scalar(v)  # (an exact match written bool(...): 0/1)
            if value is None:
                skipped.append(k)
                continue
            out[k if k.startswith("eval_") else f"eval_{k}"] = value
        new = [k for k in skipped if k not in self._skipped_keys]
        if new:
            self._skipped_keys.update(new)
            log.warning("adaptive_eval: compute_metrics returned %s that %s not one number each; skipped (not "
                        "evaluated, not logged by the callback); the other keys are metrics as usual",
                        ", ".join(repr(k) for k in new), "is" if len(new) == 1 else "are")
        return out

    def _per_item(self, trainer, model, dataset, collator, indices, pad: int = 0, stop: int | None = None) -> dict:
        metrics: dict[str, list] = {}
        losses: list[float] = []
        want = _wants_metrics(trainer)
        for i in indices:
            _stop_if_cancelled(stop)
            batch = collator([dataset[i]])
            loss, logits, labels, inputs = self._predict(trainer, model, batch, want)
            if loss is not None:
                losses.append(float(loss))
            if want and logits is not None and labels is not None:  # (as HF: no labels, no compute_metrics)
                prediction = _Joined(trainer.args.eval_do_concat_batches, trainer.args.batch_eval_metrics)
                prediction.add(loss, logits, labels, inputs, 1)
                for k, v in self._metrics_of(trainer, prediction.arrays(), one_item=True).items():
                    metrics.setdefault(k, []).append(v)
        self._pad(trainer, model, dataset, collator, indices, pad)
        if losses:
            metrics["eval_loss"] = losses  # after compute_metrics' keys: with metric null, those are tracked
        return metrics

    def _aggregate(self, trainer, model, dataset, collator, indices, pad: int = 0, stop: int | None = None) -> dict:
        bs = max(int(trainer.args.per_device_eval_batch_size), 1)
        want = _wants_metrics(trainer)
        batched = trainer.args.batch_eval_metrics
        loss_sum, n, out = 0.0, 0, {}
        every = trainer.args.eval_accumulation_steps
        joined = _Joined(trainer.args.eval_do_concat_batches, batched)
        for k, start in enumerate(range(0, len(indices), bs)):
            _stop_if_cancelled(stop)
            chunk = [dataset[i] for i in indices[start:start + bs]]
            loss, logits, labels, inputs = self._predict(trainer, model, collator(chunk), want)
            if loss is not None:  # (no loss returned: no eval_loss, as HF; it read 0.0)
                loss_sum += float(loss) * len(chunk)
                n += len(chunk)
            if want and logits is not None and labels is not None:
                if batched:  # (as HF: each batch as it comes, the result at the last one)
                    one = _Joined(True, True)
                    one.add(loss, logits, labels, inputs, len(chunk))
                    out = self._metrics_of(trainer, one.arrays(), last=start + bs >= len(indices))
                else:
                    joined.add(loss, logits, labels, inputs, len(chunk))
                    if every and (k + 1) % every == 0:  # (off the device every N batches, as HF)
                        joined.offload()
        self._pad(trainer, model, dataset, collator, indices, pad, bs)
        if want and not batched and joined.any:
            out.update(self._metrics_of(trainer, joined.arrays()))
        if n:
            out["eval_loss"] = loss_sum / n
        return out

    # -- reporting --------------------------------------------------------------------------------------
    def _closed_writers(self) -> list:
        """HF's TensorBoard callbacks whose writer its on_train_end closed already (it runs before ours)."""
        trainer = self.trainer
        callbacks = trainer.callback_handler.callbacks if trainer is not None else []
        return [cb for cb in callbacks if type(cb).__name__ == "TensorBoardCallback"
                and getattr(cb, "tb_writer", True) is None]

    @staticmethod
    def _close_reopened(closed: list) -> None:
        """A result reported at train end went through ``trainer.log`` to HF's TensorBoardCallback, whose on_log
        opened a new writer that nothing closed (a second event file, its writer thread alive after ``train()``; a
        soak probe): closed again here, its result written."""
        for cb in closed:
            writer, cb.tb_writer = cb.tb_writer, None
            if writer is not None:
                writer.close()

    def _report_integrated(self, control) -> None:
        """Every result integrated since the last report (:class:`Integrated`), through ``trainer.log`` at this step
        (its axis is the current step); a look back as ``eval_lookback_<metric>`` with ``eval_lookback_step``: the
        kept checkpoint's step (0-based)."""
        for result in self._integrated.take() if self._integrated is not None else ():
            self._report(result, control, look_back=result.evaluated_at is not None)

    def _report(self, result, control, look_back: bool = False) -> None:
        trainer = self.trainer
        if trainer is None:
            return
        # With name=, eval_<name>_<metric>, as HF names a dict of eval sets' (two callbacks on two eval sets logged
        # into one eval/accuracy series, their points mixed; a probe)
        prefix = "eval_" if self.name is None else f"eval_{self.name.strip('/')}_"
        scalars = {}
        for key, value in result_scalars(result).items():
            scalars[prefix + ("lookback_" if look_back else "") + key.removeprefix("eval_")] = value
        if not look_back:
            scalars[f"{prefix}adaptive_items"] = float(result.items)
            # the weights' step (0-based); asynchronous: before this
            scalars[f"{prefix}adaptive_step"] = float(result.step)
        else:
            scalars[f"{prefix}lookback_items"] = float(result.items)
            scalars[f"{prefix}lookback_step"] = float(result.step)  # the kept checkpoint's step (0-based)
        should_log = control.should_log
        # Trainer.log itself, not a subclass's override: TRL's GRPOTrainer.log averages and clears the metrics it
        # gathers over logging_steps, so logging through it cut TRL's window short at every result (found by a
        # new user).  Every rank, as HF itself does; the reporters write on world zero only.
        log = transformers.Trainer.log if isinstance(trainer, transformers.Trainer) else type(trainer).log
        _REPORTING.append(self)
        try:
            log(trainer, scalars)
        finally:
            _REPORTING.pop()
        control.should_log = should_log  # DefaultFlowCallback.on_log cleared it: keep this step's training log

    @property
    def _adaptive_eval_name(self) -> str:
        """What the trainer's own evaluation is called where it fails (it read "evaluate_fn failed", a function the
        user never wrote, as Lightning's did; a probe)."""
        return f"{type(self.trainer).__name__ if self.trainer is not None else 'the trainer'}'s own evaluation"

    # -- state ------------------------------------------------------------------------------------------
    def state(self) -> dict:
        """HF's ``{"args", "attributes"}``: the arguments rebuild the callback, the attribute is the
        evaluator's plain state (None before training started)."""
        saved = self.evaluator.state_dict() if self.evaluator is not None else self._saved_state
        return {"args": {"config": self.config, "overrides": list(self.overrides), "per_item": self.per_item,
                         "look_back": self.look_back, "tensorboard": self.tensorboard, "name": self.name},
                "attributes": {"_saved_state": saved}}

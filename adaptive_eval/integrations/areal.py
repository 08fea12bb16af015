"""AReaL: its ``Evaluator(config, ft_spec)`` constructor for the plain and the adaptive evaluator.

.. code-block:: python

    from adaptive_eval.integrations.areal import patch_areal

    patch_areal("default")        # before building the trainer: rl/sft/rw/dpo trainers now evaluate adaptively
    trainer = PPOTrainer(config, train_dataset, valid_dataset)

or, in your own AReaL loop, ``evaluator = AdaptiveEvaluator(config.evaluator, ft_spec)`` where the loop had
``Evaluator(config.evaluator, ft_spec)``.

* ``ft_spec`` is AReaL's ``FinetuneSpec`` or anything with ``steps_per_epoch`` and ``total_train_steps``
  (``total_train_steps=`` AReaL's ``config.total_train_steps`` where the loop stops there; ``patch_areal`` reads it)
  (zero steps per epoch is a :class:`~adaptive_eval.ConfigError` naming the field); ``config`` is AReaL's
  ``EvaluatorConfig``, or an OmegaConf node of it (its ``freq_epochs``, ``freq_steps``, ``freq_secs``,
  ``eval_before_train`` become
  ``trigger.*``; a negative frequency is a ``ConfigError`` naming the field; 0 fires at every step, as in
  AReaL), the rest of the configuration coming from ``preset``; an adaptive_eval config works too.
* State interoperates both ways: both evaluators load the state AReaL's ``Evaluator`` saved (its recover
  handler's ``evaluator_info.json``) and continue AReaL's schedule; what they save keeps the keys AReaL's
  ``Evaluator`` reads (``epoch``, ``step``, ``time``, each a ``FrequencyControl`` state), with ours under
  ``adaptive_eval``, so a run can switch back to AReaL's evaluator.
* :func:`rollout_evaluate_fn` is an ``evaluate_fn`` for AReaL's rollout-based evaluation that submits only the
  requested items, ``group_size = n_samples`` each, and returns per-item results.

Nothing here imports AReaL: it duck-types ``config.freq_*``, ``ft_spec.steps_per_epoch`` and
``ft_spec.total_train_steps``, so it needs no extra.
"""

from __future__ import annotations

import importlib
import logging
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence

from omegaconf import OmegaConf

from adaptive_eval import adaptive as _adaptive
from adaptive_eval import evaluators as _evaluators
from adaptive_eval.config import (ConfigError, areal_view, as_config, from_areal, is_areal_evaluator_config,
                                  load_config)
from adaptive_eval.trigger import _number, check_areal_state

__all__ = ["AREAL_TRAINER_MODULES", "AdaptiveEvaluator", "Evaluator", "areal_state", "patch_areal",
           "rollout_evaluate_fn", "spec_steps"]

log = logging.getLogger("adaptive_eval")

AREAL_TRAINER_MODULES = ("areal.trainer.rl_trainer", "areal.trainer.sft_trainer", "areal.trainer.rw_trainer",
                         "areal.trainer.dpo_trainer")


def spec_steps(ft_spec) -> tuple[int, int | None]:
    """``(steps_per_epoch, total_train_steps)`` of a ``FinetuneSpec`` (or anything with those attributes)."""
    name = type(ft_spec).__name__
    try:
        spe = ft_spec.steps_per_epoch
    except AttributeError:
        raise TypeError(f"ft_spec must be AReaL's FinetuneSpec or have steps_per_epoch and total_train_steps, "
                        f"got {name}") from None
    if isinstance(spe, bool) or not isinstance(spe, int) and not hasattr(spe, "__index__"):
        raise ConfigError([f"{name}.steps_per_epoch: must be a positive integer, got {spe!r}"])
    spe = spe.__index__()
    if spe <= 0:
        detail = ""
        if hasattr(ft_spec, "dataset_size") and hasattr(ft_spec, "train_batch_size"):
            detail = f" (dataset_size {ft_spec.dataset_size} // train_batch_size {ft_spec.train_batch_size})"
        raise ConfigError([f"{name}.steps_per_epoch: must be positive, got {spe}{detail}"])
    total = getattr(ft_spec, "total_train_steps", None)
    if total is not None:
        if isinstance(total, bool) or not hasattr(total, "__index__") or total.__index__() < 0:
            raise ConfigError([f"{name}.total_train_steps: must be a non-negative integer, got {total!r}"])
        total = total.__index__() or None
    return spe, total




def _last_of(spec_total: int | None, total_train_steps) -> int | None:
    """The steps the run makes: ``FinetuneSpec.total_train_steps`` (epochs x steps per epoch), cut to AReaL's
    ``config.total_train_steps`` when that is set and smaller (AReaL's trainers stop there)."""
    if total_train_steps is None:
        return spec_total
    if isinstance(total_train_steps, bool) or not hasattr(total_train_steps, "__index__") \
            or total_train_steps.__index__() <= 0:
        raise ConfigError([f"total_train_steps: must be a positive integer or None, got {total_train_steps!r}"])
    total_train_steps = total_train_steps.__index__()
    return total_train_steps if spec_total is None else min(spec_total, total_train_steps)


def _trainer_config(evaluator_config):
    """The config of the AReaL trainer building ``Evaluator(config.evaluator, ft_spec)`` (the trainers' ``__init__``
    holds its ``config`` as a local and in ``self.config``), or None (called from ``patch_areal``'s ``make``)."""
    frame = sys._getframe(2)
    for _ in range(4):
        if frame is None:
            break
        for candidate in (frame.f_locals.get("config"), getattr(frame.f_locals.get("self"), "config", None)):
            if candidate is not None and getattr(candidate, "evaluator", None) is evaluator_config:
                return candidate
        frame = frame.f_back
    return None


def _trainer_tensorboard(trainer_config) -> str | None:
    """The trainer's own TensorBoard folder, ``config.stats_logger.tensorboard.path`` (AReaL's StatsLogger writes
    there), or None."""
    path = getattr(getattr(getattr(trainer_config, "stats_logger", None), "tensorboard", None), "path", None)
    return path if isinstance(path, str) and path else None


def _frequency_control(freq, steps: int, last_steps: int, initial: bool, *, seconds: bool = False,
                       last_time: float | None = None, now: float | None = None) -> dict:
    now = time.time() if now is None else now
    return {
        "frequence_seconds": freq if seconds else None,  # (sic) AReaL's key
        "frequency_steps": None if seconds else freq,
        "start_time": now,
        "steps": int(steps),
        "last_time": now if last_time is None else last_time,
        "last_steps": int(last_steps),
        "interval_steps": None,
        "interval_seconds": None,
        "initial_value": bool(initial),
    }


def areal_state(trigger, steps_taken: int, steps_per_epoch: int | None) -> dict:
    """The state AReaL's ``EpochStepTimeFreqCtl`` would have after ``steps_taken`` calls, from our trigger's
    counters: ``{"epoch", "step", "time"}``, what AReaL's ``Evaluator.load_state_dict`` reads."""
    epochs = steps_taken // steps_per_epoch if steps_per_epoch else 0
    epochs_since = min(int(math.floor(trigger.epochs_since + 1e-9)), epochs)
    steps_since = min(int(trigger.steps_since), steps_taken)
    now = time.time()
    return {
        "epoch": _frequency_control(trigger.freq_epoch, epochs, epochs - epochs_since, trigger._initial_pending),
        "step": _frequency_control(trigger.freq_step, steps_taken, steps_taken - steps_since, False),
        "time": _frequency_control(trigger.freq_sec, 0, 0, False, seconds=True,
                                   last_time=now - trigger.seconds_since(), now=now),
    }


def _is_areal_state(sd) -> bool:
    return isinstance(sd, Mapping) and isinstance(sd.get("step"), Mapping) and "last_steps" in sd["step"]


class Evaluator(_evaluators.Evaluator):
    """AReaL's plain ``Evaluator`` with AReaL's constructor; its schedule is exactly AReaL's, several
    triggers included (each counts on its own), plus adaptive_eval's results (``EvalResult``) and error
    handling."""

    def __init__(self, config, ft_spec, *, clock: Callable[[], float] | None = None, group=None):
        spe, total = spec_steps(ft_spec)
        if is_areal_evaluator_config(config):
            config = areal_view(config)  # (an OmegaConf node of it: its fields as attributes)
            from_areal(config)  # validates: a negative frequency is a ConfigError naming the field
        super().__init__(config, steps_per_epoch=spe, clock=clock, group=group, independent=True)
        self.ft_spec = ft_spec
        self._calls = 0

    def evaluate(self, evaluate_fn, epoch: int, step: int, global_step: int):
        self._calls += 1
        return super().evaluate(evaluate_fn, epoch, step, global_step)

    def state_dict(self) -> dict:
        sd = areal_state(self.freq_ctl, self._calls, self.steps_per_epoch)
        sd["adaptive_eval"] = {"trigger": self.freq_ctl.state_dict(), "calls": self._calls}
        return sd

    def load_state_dict(self, state_dict: Mapping) -> None:
        if isinstance(state_dict, Mapping) and "adaptive_eval" in state_dict:
            ours = state_dict["adaptive_eval"]
            if not isinstance(ours, Mapping) or not isinstance(ours.get("trigger"), Mapping):
                # (a bare KeyError: 'trigger', or "state_dict must be a mapping, got int"; a probe)
                raise ValueError("load_state_dict: state_dict['adaptive_eval'] must be a mapping with a 'trigger' "
                                 f"mapping (as state_dict() writes it), got {ours!r}")
            calls = _number(ours, "calls", int, 0, "adaptive_eval", label="load_state_dict")  # (before any change)
            self.freq_ctl.load_state_dict(ours["trigger"])
            self._calls = calls
            return
        self.freq_ctl.load_state_dict(state_dict)
        if _is_areal_state(state_dict):
            self._calls = _number(state_dict["step"], "steps", int, 0, "step")


class AdaptiveEvaluator(_adaptive.AdaptiveEvaluator):
    """The adaptive evaluator with AReaL's constructor: ``AdaptiveEvaluator(config.evaluator, ft_spec)``.

    ``config``: AReaL's ``EvaluatorConfig`` (mapped onto ``trigger.*`` of ``preset``) or an adaptive_eval
    config.  ``total_steps`` is ``ft_spec.total_train_steps`` (epochs x steps per epoch), cut to
    ``total_train_steps`` when given and smaller: AReaL's trainers stop at their ``config.total_train_steps``, which
    ``FinetuneSpec`` does not know (``patch_areal`` reads it from the trainer building the evaluator).  So the last
    step trained is evaluated, with ``trigger.eval_at_end`` (the default preset's).  AReaL's default
    ``EvaluatorConfig``, every frequency None, is AReaL's "no evaluation": then the shim makes no final
    evaluation either (``trigger.eval_at_end`` off; an alarm from what you ``observe`` can still bring one).  ``evaluate(evaluate_fn, epoch, step, global_step)`` is AReaL's call; feed the
    step's training stats with ``observe(stats, global_step)`` (AReaL's ``stats_logger.commit`` has them).

    Asynchronous evaluation (``evaluation.asynchronous`` in ``preset``, or ``executor=``, which turns it on):
    ``executor`` and ``eval_ranks`` (with ``group=eval_ranks.train_group``) are passed to the evaluator.
    Give ``evaluate_fn`` as ``adaptive_eval.asynchronous.SnapshotEval(model, fn)`` to evaluate the weights of
    the due step, and call ``close()`` after the last step: it waits for the evaluations still in flight
    (AReaL's trainers do not call it).
    """

    def __init__(self, config, ft_spec, *, preset: str | None = "default", total_train_steps: int | None = None,
                 clock: Callable[[], float] | None = None, logger=None, group=None, resource_monitor=None,
                 executor=None, eval_ranks=None, eval_clock=None):
        spe, total = spec_steps(ft_spec)
        total = _last_of(total, total_train_steps)
        areal = areal_view(config)
        # AReaL's EvaluatorConfig: from_areal evaluates nothing when every frequency is None, as AReaL's Evaluator
        # (the preset's eval_at_end made one at the last step: found by a new user), and runs evaluate_fn as AReaL
        # calls it, precision none for the presets' fp32 (under torch.inference_mode a tensor the model cached
        # broke the next training step's backward, "Inference tensors cannot be saved for backward"; a new user's
        # probe; FSDP and ZeRO-3 fail so too).
        cfg = from_areal(areal, preset) if areal is not None else as_config(config)
        if cfg.evaluation.precision == "fp32":
            # so with a config of ours at its presets' fp32 too (a probe: a config given where AReaL's was still ran
            # it so); a precision that autocasts (bf16, fp16) is the user's ask.
            cfg = as_config(OmegaConf.merge(cfg, {"evaluation": {"precision": "none"}}))
        if executor is not None and not cfg.evaluation.asynchronous:
            cfg = as_config(OmegaConf.merge(cfg, {"evaluation": {"asynchronous": True}}))
        super().__init__(cfg, steps_per_epoch=spe, total_steps=total, clock=clock, logger=logger, group=group,
                         resource_monitor=resource_monitor, executor=executor, eval_ranks=eval_ranks,
                         eval_clock=eval_clock)
        self.ft_spec = ft_spec

    def _steps_taken(self) -> int:
        last = self._last_call_step if self._last_call_step is not None else self._last_step
        return last + 1 if last is not None else 0

    def state_dict(self) -> dict:
        sd = super().state_dict()
        sd.update(areal_state(self.trigger, self._steps_taken(), self.steps_per_epoch))
        return sd

    def load_state_dict(self, state_dict: Mapping) -> None:
        """Our state, or AReaL's (``evaluator_info.json``): the schedule continues from AReaL's counters."""
        sd = state_dict
        if isinstance(sd, Mapping) and "trigger" not in sd and "step" in sd:
            # AReaL's: checked before anything is reset (a refused one wiped the history; a review)
            check_areal_state(sd)
        if isinstance(sd, Mapping) and "trigger" not in sd and _is_areal_state(sd):
            self._reset()
            self.trigger.load_state_dict(sd)
            steps = _number(sd["step"], "steps", int, 0, "step")
            if steps > 0:
                self._last_step = self._last_call_step = steps - 1
            self._loaded_last = self._last_call_step
            return
        super().load_state_dict(sd)


def patch_areal(preset: str | None = "default", modules: Sequence[str] = AREAL_TRAINER_MODULES) -> list[str]:
    """Make AReaL's trainers build :class:`AdaptiveEvaluator` (with ``preset``) where they build
    ``Evaluator(config.evaluator, ft_spec)``: replaces the name ``Evaluator`` in each trainer module (and in
    ``areal.utils.recover``'s annotations nothing changes: it only calls ``state_dict``/``load_state_dict``).
    Call it before the trainer is built.  Returns the modules patched; a module that does not import is
    skipped with a warning (AReaL's trainers need its full set of dependencies).  A ``preset`` that does not load
    (a misspelt name, a bad file) is a :class:`~adaptive_eval.config.ConfigError` here, not when the trainer
    builds its evaluator, after minutes of loading the model (a probe)."""
    load_config(preset)

    def make(config, ft_spec):
        # AReaL's trainers stop at config.total_train_steps, which FinetuneSpec does not know: the last step
        # evaluated (trigger.eval_at_end) is the last step they train
        trainer_config = _trainer_config(config)
        chosen, tensorboard = preset, _trainer_tensorboard(trainer_config)
        if tensorboard is not None:
            # decisions and alarms beside the trainer's own charts, as the HF and Lightning adapters write them
            # (none reached TensorBoard under AReaL unless the preset named a folder; a probe)
            loaded = load_config(preset)
            if loaded.logging.tensorboard_dir is None:
                chosen = OmegaConf.merge(loaded, {"logging": {"tensorboard_dir": tensorboard}})
        evaluator = AdaptiveEvaluator(config, ft_spec, preset=chosen,
                                      total_train_steps=getattr(trainer_config, "total_train_steps", None))
        if evaluator.cfg.evaluation.asynchronous:
            log.warning("adaptive_eval: patch_areal with an asynchronous preset: AReaL's trainers evaluate the live "
                        "weights through their rollout engine and never call evaluator.close(), so results may "
                        "mix weight versions and the evaluation in flight at the end is lost; keep "
                        "evaluation.asynchronous for your own loop (SnapshotEval, close())")
        return evaluator

    patched = []
    for name in modules:
        try:
            module = importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - an AReaL install without some trainer's dependencies
            log.warning("adaptive_eval: patch_areal: cannot import %s (%s); not patched", name, exc)
            continue
        if not hasattr(module, "Evaluator"):
            log.warning("adaptive_eval: patch_areal: %s has no name Evaluator; not patched", name)
            continue
        module.Evaluator = make
        trainer = getattr(module, "PPOTrainer", None)
        if trainer is not None and callable(getattr(trainer, "train", None)):
            trainer.train = _with_total_epochs(trainer.train)
        patched.append(name)
    return patched


def _with_total_epochs(train: Callable) -> Callable:
    """AReaL's ``PPOTrainer.train`` that tells the trainer's adaptive evaluator its last step when ``total_epochs=``
    overrides ``config.total_train_epochs`` (the evaluator, built in ``__init__`` from the ``FinetuneSpec``, put the
    final evaluation at the config's last step: mid-run for more epochs, none at all for fewer; a session note).
    The run's steps as ``train`` counts them: ``total_epochs x len(train_dataloader)``, cut to
    ``config.total_train_steps``.  Wrapped once; nothing it does raises into ``train``."""
    import functools
    import inspect

    if getattr(train, "_adaptive_eval_total_epochs", False):
        return train
    try:
        signature = inspect.signature(train)
    except (TypeError, ValueError):
        return train
    if "total_epochs" not in signature.parameters:
        return train

    @functools.wraps(train)
    def wrapped(self, *args, **kwargs):
        try:
            epochs = signature.bind(self, *args, **kwargs).arguments.get("total_epochs")
            evaluator = getattr(self, "evaluator", None)
            if isinstance(evaluator, _adaptive.AdaptiveEvaluator) and isinstance(epochs, int) \
                    and not isinstance(epochs, bool) and epochs > 0:
                try:
                    per_epoch = len(self.train_dataloader)
                except Exception:  # noqa: BLE001 - no dataloader (AReaL's online mode): the spec's
                    per_epoch = evaluator.steps_per_epoch
                if per_epoch:
                    config = getattr(self, "config", None)
                    total = _last_of(epochs * int(per_epoch), getattr(config, "total_train_steps", None))
                    if total != evaluator.total_steps:
                        log.info("adaptive_eval: train(total_epochs=%d): the run's last step is %d (the evaluator "
                                 "was built for %s)", epochs, total - 1,
                                 "no known end" if evaluator.total_steps is None else evaluator.total_steps - 1)
                        evaluator.total_steps = total
        except Exception as exc:  # noqa: BLE001 - never into the user's train()
            log.warning("adaptive_eval: train(total_epochs=...): the evaluator's last step is left as it was (%s)",
                        exc)
        return train(self, *args, **kwargs)

    wrapped._adaptive_eval_total_epochs = True
    return wrapped


def rollout_evaluate_fn(engine, dataset, workflow, workflow_kwargs: Mapping | None = None, *, n_samples: int = 1,
                        reward_key: str = "rewards", timeout: float | None = None) -> Callable:
    """An ``evaluate_fn(request)`` for AReaL's rollout-based evaluation.

    ``engine`` is AReaL's eval rollout engine (``submit(data, workflow, workflow_kwargs, group_size=...,
    is_eval=True) -> task_id`` and ``wait_for_task(task_id, timeout=...)``); only the items the request
    names are submitted, each with ``group_size = n_samples``.  Returns per item: ``reward`` (the mean of its
    ``n_samples`` rewards: the item is the unit of the interval) and ``rejected`` (1 when the workflow
    rejected the item's trajectories; its reward is then not counted).
    """
    if isinstance(n_samples, bool) or not isinstance(n_samples, int) or n_samples < 1:
        raise ValueError(f"n_samples must be a positive integer, got {n_samples!r}")

    def evaluate_fn(request):
        indices = request.indices(len(dataset))
        tasks = [engine.submit(dataset[i], workflow, workflow_kwargs, group_size=n_samples, is_eval=True)
                 for i in indices]
        rewards, rejected = [], []
        for task in tasks:
            traj = engine.wait_for_task(task, timeout=timeout)
            if traj is None:
                rejected.append(1.0)
                continue
            rejected.append(0.0)
            value = traj[reward_key] if isinstance(traj, Mapping) else traj
            values = value.detach().to("cpu").double().flatten().tolist() if hasattr(value, "detach") \
                else [float(v) for v in (value if isinstance(value, (list, tuple)) else [value])]
            rewards.append(sum(values) / len(values) if values else math.nan)
        return {"reward": rewards, "rejected": rejected}

    return evaluate_fn

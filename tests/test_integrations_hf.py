"""The Hugging Face adapter on a real transformers Trainer (CPU, a tiny model built in the test, no download)."""

import json
import logging
import math
from types import SimpleNamespace

import numpy as np
import pytest

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import torch  # noqa: E402
from torch import nn  # noqa: E402
from transformers import Trainer, TrainerCallback, TrainingArguments  # noqa: E402

from adaptive_eval import EvalRequest, EvalResult  # noqa: E402
from adaptive_eval.integrations.hf import AdaptiveEvalCallback  # noqa: E402

FAST = ["policy.sample_size.initial=32", "policy.sample_size.min=16", "policy.sample_size.max=48",
        "policy.peak.confirm_size=0", "policy.budget.enabled=false"]  # no wall-clock budget: decisions repeat


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))

    def forward(self, x, labels=None):
        logits = self.net(x)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = nn.functional.cross_entropy(logits, labels)
        return out


class Points(torch.utils.data.Dataset):
    """4 classes: the largest of the first four coordinates.  ``corrupt`` (the injected fault) gives every
    item a random label from then on: a broken data pipeline."""

    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, 8, generator=g)
        self.y = self.x[:, :4].argmax(1)
        self.corrupt = False
        self.rng = np.random.default_rng(seed)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        label = int(self.rng.integers(4)) if self.corrupt else int(self.y[i])
        return {"x": self.x[i], "labels": label}


class Fault(TrainerCallback):
    def __init__(self, dataset, at):
        self.dataset, self.at = dataset, at

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.at:
            self.dataset.corrupt = True


def accuracy(pred):
    return {"accuracy": float((pred.predictions.argmax(-1) == pred.label_ids).mean())}


def make_args(out, **kw):
    base = dict(max_steps=60, per_device_train_batch_size=16, learning_rate=1e-2, eval_strategy="no",
                save_strategy="no", report_to=[], disable_tqdm=True, use_cpu=True, logging_steps=10, seed=0,
                data_seed=0)
    base.update(kw)
    return TrainingArguments(str(out), **base)


def test_a_trainer_run_catches_the_fault_evaluates_the_final_weights_and_logs_through_the_trainer(tmp_path,
                                                                                                 monkeypatch):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    torch.manual_seed(0)
    train, held_out = Points(2000, 0), Points(200, 1)
    tb = tmp_path / "tb"  # the trainer's SummaryWriter and ours write into the same folder
    cb = AdaptiveEvalCallback("default", overrides=FAST + [f"logging.tensorboard_dir={tb}"])
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tb))  # transformers 5's TensorBoardCallback folder
    args = make_args(tmp_path / "out", report_to=["tensorboard"])
    trainer = Trainer(Tiny(), args, train_dataset=train, eval_dataset=held_out, compute_metrics=accuracy,
                      callbacks=[cb, Fault(train, 30)])
    trainer.train()
    ev = cb.evaluator
    # every hook the adapter overrides fired (a renamed hook would simply never be called)
    assert cb.hooks_called == {"on_init_end", "on_train_begin", "on_step_end", "on_log", "on_epoch_end",
                               "on_train_end"}  # (on_save: the look_back tests)
    assert cb.trainer is trainer
    # the fault (labels scrambled from step 30 on, 0-based) is caught within 25 steps by an alarm on train/loss
    alarms = [r for r in ev.history if r.reason.startswith("alarm:train/loss")]
    assert alarms and 30 <= alarms[0].step <= 30 + 25, [(r.step, r.reason) for r in ev.history]
    # the tracked metric is compute_metrics' key, per item, so both metrics have real intervals
    last = ev.history[-1]
    assert ev.cfg.evaluation.metric is None
    assert all(math.isfinite(m.ci[0]) and m.per_sample for m in last.metrics.values())
    assert last["eval_accuracy"].binary and not last["eval_loss"].binary
    # the final weights are evaluated: the last step, and the numbers are those of the trained model
    assert (last.step, last.reason) == (59, "trigger:final")
    model = trainer.model.eval()
    with torch.no_grad():
        idx = list(range(len(held_out)))
        from adaptive_eval import EvalRequest

        idx = EvalRequest(step=59, sample_size=last.sample_size, seed=0, reason="").indices(len(held_out))
        x = held_out.x[idx]
        y = held_out.y[idx]
        logits = model.net(x)
        losses = nn.functional.cross_entropy(logits, y, reduction="none")
    assert last["eval_loss"].mean == pytest.approx(float(losses.mean()), rel=1e-5)
    assert last["eval_accuracy"].mean == pytest.approx(float((logits.argmax(1) == y).float().mean()))
    # results went through trainer.log (log_history, the reporters) and the training logs are all still there
    hist = trainer.state.log_history
    assert [h["step"] for h in hist if "loss" in h and "eval_loss" not in h] == [10, 20, 30, 40, 50, 60]
    logged = [h for h in hist if "eval_accuracy" in h]
    assert [h["step"] - 1 for h in logged] == [r.step for r in ev.history]
    assert {"eval_accuracy_ci_low", "eval_accuracy_ci_high", "eval_accuracy_n"} <= set(logged[-1])
    # TensorBoard beside the framework: two event files, both readable by TensorBoard's own reader
    files = sorted(p.name for p in tb.iterdir() if "tfevents" in p.name)
    assert len(files) == 2 and sum(".adaptive_eval" in f for f in files) == 1
    theirs = EventAccumulator(str(tb / next(f for f in files if ".adaptive_eval" not in f))).Reload()
    ours = EventAccumulator(str(tb / next(f for f in files if ".adaptive_eval" in f))).Reload()
    assert {"eval/accuracy", "eval/loss", "train/loss"} <= set(theirs.Tags()["scalars"])
    assert [e.step for e in theirs.Scalars("eval/accuracy")] == [r.step + 1 for r in ev.history]  # HF's 1-based axis
    # one metric is one tag series: the results reach HF's writer through trainer.log (eval/accuracy above), so
    # our file in the same folder leaves them out (it wrote eval/eval_accuracy one step earlier too: found by a
    # new user) and keeps what only it has
    assert not [t for t in ours.Tags()["scalars"] if t.startswith("eval/")]
    assert "controller/sample_size" in ours.Tags()["scalars"]
    # and its dashboard charts them where HF's file has them (it had no eval charts: a new user's probe)
    from tensorboard.plugins.custom_scalar import layout_pb2, metadata
    from tensorboard.util import tensor_util

    layout = layout_pb2.Layout.FromString(
        tensor_util.make_ndarray(ours.Tensors(metadata.CONFIG_SUMMARY_TAG)[-1].tensor_proto).item())
    charts = {c.title: c for cat in layout.category if cat.title == "eval" for c in cat.chart}
    acc = charts["eval_accuracy"].margin.series[0]
    assert (acc.value, acc.lower, acc.upper) == ("eval/accuracy", "eval/accuracy_ci_low", "eval/accuracy_ci_high")
    assert set(charts["samples per evaluation"].multiline.tag) == {"^eval/accuracy_n$", "^eval/loss_n$"}
    assert {"eval/accuracy_ci_low", "eval/accuracy_ci_high", "eval/accuracy_n", "eval/loss_n"} <= set(
        theirs.Tags()["scalars"])


def test_a_resumed_trainer_makes_the_decisions_of_the_uninterrupted_run(tmp_path):
    def run(out, **kw):
        torch.manual_seed(0)
        train, held_out = Points(2000, 0), Points(100, 1)
        cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=6"])
        trainer = Trainer(Tiny(), make_args(out, max_steps=40, save_strategy="steps", save_steps=20),
                          train_dataset=train, eval_dataset=held_out, callbacks=[cb])
        trainer.train(**kw)
        # HF may rebuild callbacks on resume: take the one the trainer ran
        (ran,) = [c for c in trainer.callback_handler.callbacks if isinstance(c, AdaptiveEvalCallback)]
        return [(r.step, r.reason, r.sample_size, round(r.mean("eval_loss"), 6)) for r in ran.evaluator.history]

    full = run(tmp_path / "a")
    resumed = run(tmp_path / "a", resume_from_checkpoint=str(tmp_path / "a" / "checkpoint-20"))
    assert resumed == full  # the history before the checkpoint comes back from the saved state
    assert len(full) >= 4 and full[-1][:2] == (39, "trigger:final")


def test_two_callbacks_each_resume_their_own_state_and_a_state_that_does_not_load_starts_afresh_watched(tmp_path,
                                                                                                       caplog):
    """Found by a probe: with two callbacks HF appends every instance's state at every save, and each resumed from
    the first entry, an empty state from __init__ (afresh, unsaid); and a saved state that did not load into the
    config escaped the set-up half done, the training step never wrapped: the loss went unwatched."""
    def run(out, overrides=(), **kw):
        torch.manual_seed(0)
        a = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=3", *overrides])
        b = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=7"], eval_dataset=Points(40, 2))
        trainer = Trainer(Tiny(), make_args(out, max_steps=24, save_strategy="steps", save_steps=10),
                          train_dataset=Points(800, 0), eval_dataset=Points(60, 1), callbacks=[a, b])
        trainer.train(**kw)
        ran = [c for c in trainer.callback_handler.callbacks if isinstance(c, AdaptiveEvalCallback)]
        return [[(r.step, r.reason) for r in c.evaluator.history] for c in ran], ran

    full, _ = run(tmp_path / "a")
    resumed, _ = run(tmp_path / "a", resume_from_checkpoint=str(tmp_path / "a" / "checkpoint-10"))
    assert resumed == full and full[0] != full[1]
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        _, ran = run(tmp_path / "a", ["streams.default=[{type: page_hinkley}]"],
                     resume_from_checkpoint=str(tmp_path / "a" / "checkpoint-10"))
    assert "the adaptive state in the checkpoint does not load into this config, so the evaluator starts afresh " \
           "at step 10" in caplog.text
    assert "train/loss" in ran[0].evaluator.state_dict()["detectors"]  # (observed: the training step was wrapped)
    # resumed with one callback where two saved: which state is whose is not known, so it starts afresh, said (it
    # took the second one's state; a review)
    caplog.clear()
    one = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=3"])
    trainer = Trainer(Tiny(), make_args(tmp_path / "a", max_steps=24, save_strategy="steps", save_steps=10),
                      train_dataset=Points(800, 0), eval_dataset=Points(60, 1), callbacks=[one])
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        trainer.train(resume_from_checkpoint=str(tmp_path / "a" / "checkpoint-10"))
    assert "holds the states of 2 AdaptiveEvalCallback instances and this trainer has 1" in caplog.text
    (ran,) = [c for c in trainer.callback_handler.callbacks if isinstance(c, AdaptiveEvalCallback)]
    assert all(r.step >= 10 for r in ran.evaluator.history)


@pytest.mark.parametrize("count", [1, 2])
def test_the_callback_added_to_a_run_resumed_from_a_checkpoint_saved_without_it_saves_its_state(tmp_path, count):
    """A probe: a run trained and saved without the callback, resumed with it, died at its first save with HF's
    ``KeyError: 'AdaptiveEvalCallback'`` (the checkpoint's TrainerState had no entry of ours in stateful_callbacks,
    which _save_checkpoint indexes), losing the steps since the last checkpoint."""
    torch.manual_seed(0)
    args = dict(max_steps=20, save_strategy="steps", save_steps=5)
    Trainer(Tiny(), make_args(tmp_path, **{**args, "max_steps": 10}), train_dataset=Points(400, 0)).train()
    cbs = [AdaptiveEvalCallback("default", overrides=FAST + [f"trigger.freq_steps={3 + i}"]) for i in range(count)]
    trainer = Trainer(Tiny(), make_args(tmp_path, **args), train_dataset=Points(400, 0),
                      eval_dataset=Points(60, 1), callbacks=cbs)
    trainer.train(resume_from_checkpoint=str(tmp_path / "checkpoint-10"))
    assert trainer.state.global_step == 20
    saved = json.loads((tmp_path / "checkpoint-20" / "trainer_state.json").read_text())["stateful_callbacks"]
    ours = saved["AdaptiveEvalCallback"]
    last = ours[-count:] if count > 1 else [ours]
    assert all(e["attributes"]["_saved_state"]["history"] for e in last)
    ran = [c for c in trainer.callback_handler.callbacks if isinstance(c, AdaptiveEvalCallback)]
    assert len(ran) == count and all(c.evaluator.history and c.evaluator.history[-1].step == 19 for c in ran)


def test_aggregates_only_are_reported_with_n_and_no_guessed_interval(tmp_path):
    from adaptive_eval import EvalRequest
    from adaptive_eval.evaluators import run_evaluation_outcome

    held_out = Points(120, 1)
    trainer = Trainer(Tiny(), make_args(tmp_path, per_device_eval_batch_size=16), eval_dataset=held_out,
                      compute_metrics=accuracy)
    cb = AdaptiveEvalCallback(per_item=False, trainer=trainer)
    request = EvalRequest(step=0, sample_size=50, seed=0, reason="test")
    result = run_evaluation_outcome(cb._evaluate_with_trainer, request).result
    assert result["eval_loss"].n == 50 and not result["eval_loss"].per_sample
    assert all(math.isnan(x) for x in result["eval_loss"].ci)  # a bare mean: no made-up interval
    assert all(math.isnan(x) for x in result["eval_accuracy"].ci)  # even though it lies in [0, 1]
    declared = run_evaluation_outcome(cb._evaluate_with_trainer, EvalRequest(step=0, sample_size=50, seed=0, reason=""),
                                      metric_kinds={"eval_accuracy": "proportion"}).result
    assert declared["eval_accuracy"].binary and math.isfinite(declared["eval_accuracy"].ci[0])


def test_rank_branches_and_the_state_before_training():
    calls = []

    def evaluate_fn(request):
        calls.append(request.step)
        return {"score": [1.0, 0.0]}

    cb = AdaptiveEvalCallback("areal", evaluate_fn, overrides=["trigger.freq_steps=2"])
    assert cb.state() == {"args": {"config": "areal", "overrides": ["trigger.freq_steps=2"], "per_item": True,
                                   "look_back": False, "tensorboard": True, "name": None},
                          "attributes": {"_saved_state": None}}  # HF calls state() in Trainer.__init__
    args = SimpleNamespace(gradient_accumulation_steps=1, metric_for_best_model=None)
    control = SimpleNamespace(should_log=False, should_evaluate=False)
    state = SimpleNamespace(max_steps=6, global_step=0, stateful_callbacks={}, is_world_process_zero=False)
    cb.on_train_begin(args, state, control, train_dataloader=[0] * 3)
    assert cb.evaluator.total_steps == 6 and cb.evaluator.steps_per_epoch == 3
    for g in range(1, 7):  # HF's global_step in on_step_end counts from 1
        state.global_step = g
        cb.on_step_end(args, state, control)
    assert calls == [1, 3, 5]  # on a rank that is not world zero too: every rank evaluates its shard
    import json

    assert json.loads(json.dumps(cb.state()))["attributes"]["_saved_state"]["last_call_step"] == 5


def test_a_tracked_metric_named_without_eval_prefix_is_hfs_eval_metric_as_metric_for_best_model_is():
    """Found by a new-user probe: overrides=["evaluation.metric=accuracy"] tracked nothing (the trainer's evaluation
    returns eval_accuracy), while metric_for_best_model="accuracy" means eval_accuracy in HF; your own evaluate_fn
    keeps its names."""
    args = SimpleNamespace(gradient_accumulation_steps=1, metric_for_best_model=None)
    state = SimpleNamespace(max_steps=4, global_step=0, stateful_callbacks={}, is_world_process_zero=True)
    for metric, fn, tracked in (("accuracy", None, "eval_accuracy"), ("eval_accuracy", None, "eval_accuracy"),
                                ("accuracy", lambda request: {"accuracy": [1.0]}, "accuracy")):
        cb = AdaptiveEvalCallback("default", fn, overrides=[f"evaluation.metric={metric}"])
        cb.on_train_begin(args, state, SimpleNamespace(should_log=False), train_dataloader=[0] * 4)
        assert cb.evaluator.cfg.evaluation.metric == tracked


def test_the_summary_line_is_written_on_world_zero_only(caplog):
    for zero in (False, True):
        cb = AdaptiveEvalCallback("areal")
        args = SimpleNamespace(gradient_accumulation_steps=1, metric_for_best_model=None)
        state = SimpleNamespace(max_steps=2, global_step=0, stateful_callbacks={}, is_world_process_zero=zero)
        cb.on_train_begin(args, state, SimpleNamespace(should_log=False))
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="adaptive_eval"):
            cb.on_train_end(args, state, SimpleNamespace())
        assert any("evaluations" in r.message for r in caplog.records) == zero


def test_a_failing_evaluation_never_reaches_the_training_step_unless_on_error_raise():
    def broken(request):
        raise RuntimeError("eval server down")

    args = SimpleNamespace(gradient_accumulation_steps=1, metric_for_best_model=None)
    for on_error, raises in (("skip", False), ("raise", True)):
        cb = AdaptiveEvalCallback("areal", broken, overrides=["trigger.freq_steps=1", f"evaluation.on_error={on_error}"])
        state = SimpleNamespace(max_steps=3, global_step=0, stateful_callbacks={}, is_world_process_zero=True)
        cb.on_train_begin(args, state, SimpleNamespace())
        state.global_step = 1
        if raises:
            with pytest.raises(RuntimeError, match="eval server down"):
                cb.on_step_end(args, state, SimpleNamespace(should_log=False))
        else:
            cb.on_step_end(args, state, SimpleNamespace(should_log=False))
            assert cb.evaluator.summary()["eval_errors"] == 1
    # anything failing inside the hook (here the evaluator itself) is logged and counted, not raised
    cb = AdaptiveEvalCallback("areal")
    cb.on_train_begin(args, SimpleNamespace(max_steps=3, global_step=0, stateful_callbacks={},
                                            is_world_process_zero=True), SimpleNamespace())

    def broken_observe(metrics, step):
        raise RuntimeError("observe broke")

    cb.evaluator.observe = broken_observe
    cb._step_loss = torch.tensor(0.5)
    cb.on_step_end(args, SimpleNamespace(global_step=1), SimpleNamespace(should_log=False))
    cb.on_step_end(args, SimpleNamespace(global_step=2), SimpleNamespace(should_log=False))
    cb._step_loss = torch.tensor(0.5)
    cb.on_step_end(args, SimpleNamespace(global_step=3), SimpleNamespace(should_log=False))
    assert cb._guard.errors == 2


def test_restore_callback_states_from_checkpoint_keeps_the_users_evaluate_fn_and_decides_as_the_uninterrupted_run(
        tmp_path):
    """With restore_callback_states_from_checkpoint=True HF rebuilds the callback from its saved arguments and
    drops the instance the user passed: the rebuilt one takes evaluate_fn (and eval_dataset) from it."""
    def run(out, **kw):
        torch.manual_seed(0)
        train, held_out = Points(2000, 0), Points(100, 1)
        box = {}

        def evaluate_fn(request):  # the user's own evaluation, on the trainer's current weights
            idx = request.indices(len(held_out))
            with torch.no_grad():
                logits = box["trainer"].model.net(held_out.x[idx])
            return {"acc": (logits.argmax(1) == held_out.y[idx]).double().tolist()}

        class Nudge(TrainerCallback):  # a user callback after ours that edits the weights after some steps
            def on_step_end(self, args, state, control, model=None, **kwargs):
                if state.global_step > 20:  # (every step after the checkpoint: an evaluation sees it before it)
                    with torch.no_grad():
                        model.net[2].weight.mul_(-1.0)

        cb = AdaptiveEvalCallback("default", evaluate_fn, overrides=FAST + ["trigger.freq_steps=6"])
        args = make_args(out, max_steps=40, save_strategy="steps", save_steps=20,
                         restore_callback_states_from_checkpoint=True)
        trainer = box["trainer"] = Trainer(Tiny(), args, train_dataset=train, callbacks=[cb, Nudge()])
        trainer.train(**kw)
        (ran,) = [c for c in trainer.callback_handler.callbacks if isinstance(c, AdaptiveEvalCallback)]
        order = [type(c).__name__ for c in trainer.callback_handler.callbacks]
        return ran, cb, [(r.step, r.reason, r.sample_size, round(r.mean("acc"), 6)) for r in ran.evaluator.history], \
            order

    ran, cb, full, order = run(tmp_path / "a")
    assert ran is cb and len(full) >= 4 and full[-1][:2] == (39, "trigger:final")
    assert order.index("AdaptiveEvalCallback") < order.index("Nudge")
    ran, cb, resumed, resumed_order = run(tmp_path / "a",
                                          resume_from_checkpoint=str(tmp_path / "a" / "checkpoint-20"))
    # HF appended the rebuilt callback at the end; it takes its place back before the user's callbacks that ran
    # after it, so Nudge edits the weights after our evaluation, as in the uninterrupted run (found by a probe)
    assert resumed_order == order, resumed_order
    assert ran is not cb  # HF rebuilt it from the checkpoint ...
    assert ran.evaluate_fn is cb.evaluate_fn and ran.evaluator.summary()["eval_errors"] == 0  # ... with our fn
    assert resumed == full
    # ... and the instance the user holds sees the rebuilt one's evaluator (cb.evaluator was None)
    assert cb.evaluator is ran.evaluator and cb.evaluator.history == ran.evaluator.history


class Weights(TrainerCallback):
    """The model's weights after each optimizer step, by adaptive_eval's 0-based step."""

    def __init__(self):
        self.at = {}

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.at[state.global_step - 1] = {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("executor", ["thread", "deferred"])
def test_asynchronous_evaluation_through_the_trainer_runs_on_the_weights_of_its_step_while_training_goes_on(
        tmp_path, executor):
    """On a real thread pool, and on an executor that runs each evaluation only at its integration, 3 steps
    later (so an evaluation of the live model would see later weights, every time)."""
    from concurrent.futures import ThreadPoolExecutor

    from conftest import DeferredExecutor

    torch.manual_seed(0)
    train, held_out = Points(2000, 0), Points(100, 1)
    weights = Weights()
    with ThreadPoolExecutor(1) if executor == "thread" else DeferredExecutor() as pool:
        cb = AdaptiveEvalCallback("default", executor=pool,  # executor= turns evaluation.asynchronous on
                                  overrides=FAST + ["trigger.freq_steps=6", "evaluation.async_integrate_after_steps=3"])
        trainer = Trainer(Tiny(), make_args(tmp_path, max_steps=30), train_dataset=train, eval_dataset=held_out,
                          callbacks=[weights, cb])
        trainer.train()
    ev = cb.evaluator
    history = ev.history
    assert len(history) >= 3 and (history[-1].step, history[-1].reason) == (29, "trigger:final")
    # each result was integrated 3 steps after its submission while the trainer kept training; the final one
    # (the last step's weights) was waited for at train end
    assert [r.integrated_step for r in history] == [min(r.step + 3, 29) for r in history]
    # ... and it is the evaluation of the weights of its step, not of the live model 3 steps later
    model = Tiny()
    for r in history:
        model.load_state_dict(weights.at[r.step])
        from adaptive_eval import EvalRequest

        idx = EvalRequest(step=r.step, sample_size=r.sample_size, seed=0, reason="").indices(len(held_out))
        with torch.no_grad():
            loss = nn.functional.cross_entropy(model.net(held_out.x[idx]), held_out.y[idx])
        assert r["eval_loss"].mean == pytest.approx(float(loss), rel=1e-6), r.step
    assert trainer.model.training  # the worker evaluated a replica; the live model was never put in eval mode
    # every result went through trainer.log, at the step it was integrated (HF's 1-based axis), with its weights' step
    logged = [h for h in trainer.state.log_history if "eval_loss" in h]
    assert [(h["eval_adaptive_step"], h["step"]) for h in logged] == [(r.step, r.integrated_step + 1) for r in history]


def test_train_again_after_a_ctrl_c_closes_the_evaluator_the_exception_left_open(tmp_path, caplog):
    """A probe: HF has no hook for an exception in train(), so a Ctrl-C with an asynchronous evaluation in flight
    left the evaluator open; at exit it said "never closed ... call close()", which an HF user never could.  A
    train() again (a notebook's next cell) closes it first, giving up what was in flight."""
    from conftest import DeferredExecutor

    class CtrlC(TrainerCallback):
        def __init__(self):
            self.armed = True

        def on_step_end(self, args, state, control, **kwargs):
            if self.armed and state.global_step == 9:
                self.armed = False
                raise KeyboardInterrupt

    torch.manual_seed(0)
    cb = AdaptiveEvalCallback("default", executor=DeferredExecutor(),
                              overrides=FAST + ["trigger.freq_steps=6", "evaluation.async_integrate_after_steps=5"])
    trainer = Trainer(Tiny(), make_args(tmp_path, max_steps=20), train_dataset=Points(400, 0),
                      eval_dataset=Points(100, 1), callbacks=[cb, CtrlC()])
    with pytest.raises(KeyboardInterrupt):
        trainer.train()
    first = cb.evaluator
    assert not first._closed and first._async.jobs  # (the evaluation of step 5, in flight)
    with caplog.at_level("INFO", logger="adaptive_eval"):
        trainer.train()
    assert first._closed and not first._async.jobs and cb.evaluator is not first
    assert any("is closed now" in r.getMessage() for r in caplog.records)
    assert cb.evaluator.history[-1].reason == "trigger:final"


def test_a_callback_rebuilt_without_the_instance_it_replaces_says_what_is_lost(caplog):
    def _load_callback_state():  # what HF's Trainer._load_callback_state would be if it named its local otherwise
        return AdaptiveEvalCallback(**{"config": "areal", "overrides": [], "per_item": True})

    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        cb = _load_callback_state()
    assert cb.evaluate_fn is None
    assert "evaluate_fn, eval_dataset, executor, clock and resource_monitor are not restored" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        AdaptiveEvalCallback("areal")  # built by the user: nothing to say
    assert caplog.text == ""


def test_a_rank_without_its_own_saved_state_resumes_with_rank_zeros_and_says_so(tmp_path, caplog):
    """Under DDP every rank but zero reads its own state beside the checkpoint (``on_save`` wrote it; the
    two-rank run is in test_integrations_hf_ddp.py).  Missing, unreadable, or for another step, rank or world
    size: rank zero's state, and a warning naming the file."""
    cb = AdaptiveEvalCallback("areal")
    args = SimpleNamespace(output_dir=str(tmp_path), world_size=2, process_index=1)
    state = SimpleNamespace(global_step=20)
    zero, mine = {"who": "zero"}, {"who": "rank 1"}
    path = tmp_path / "checkpoint-20" / "adaptive_eval_rank1.json"
    cases = [(None, "it is missing"), ("{not json", "it cannot be read"),
             ({"global_step": 10, "world_size": 2, "rank": 1, "state": mine}, "it is for"),
             ({"global_step": 20, "world_size": 4, "rank": 1, "state": mine}, "it is for"),
             ({"global_step": 20, "world_size": 2, "rank": 1, "state": mine}, None)]
    for content, why in cases:
        path.parent.mkdir(exist_ok=True)
        path.unlink(missing_ok=True)
        if content is not None:
            path.write_text(content if isinstance(content, str) else json.dumps(content))
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
            got = cb._own_state(args, state, zero)
        if why is None:
            assert got == mine and caplog.text == ""
        else:
            assert got == zero and why in caplog.text and str(path) in caplog.text, content


class StopAt(TrainerCallback):
    """Stops training at a step, as EarlyStoppingCallback does (control.should_training_stop)."""

    def __init__(self, at):
        self.at = at

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= self.at:
            control.should_training_stop = True


def test_a_run_stopped_early_evaluates_its_last_weights(tmp_path):
    """trigger:final fired only at max_steps - 1: a run stopped at step 30 of 200 never evaluated its last
    weights."""
    torch.manual_seed(0)
    train, held_out = Points(2000, 0), Points(100, 1)
    cb = AdaptiveEvalCallback("default", overrides=FAST)
    trainer = Trainer(Tiny(), make_args(tmp_path, max_steps=200), train_dataset=train, eval_dataset=held_out,
                      callbacks=[cb, StopAt(30)])
    trainer.train()
    assert trainer.state.global_step == 30
    last = cb.evaluator.history[-1]
    assert (last.step, last.reason) == (29, "trigger:final") and cb.evaluator.summary()["eval_errors"] == 0
    assert last.epoch == int(trainer.state.epoch)  # (it was None; a probe)


class Scramble(TrainerCallback):
    """From step ``at`` on, scrambles the output layer at every step (the accuracy falls: an early stop fires); keeps
    the weights of the last step trained."""

    def __init__(self, at):
        self.at, self.last = at, None

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step >= self.at:
            with torch.no_grad():
                model.net[2].weight.add_(torch.randn_like(model.net[2].weight) * 2.0)
        self.last = {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("strategy", ["steps", "epoch"])
def test_a_run_stopped_early_with_the_best_model_loaded_at_the_end_evaluates_its_last_weights(tmp_path, strategy):
    """A new user's probe: with load_best_model_at_end (EarlyStoppingCallback's setting) HF loads the best checkpoint
    before on_train_end, where the stopped run's evaluation ran: it scored that checkpoint under the last step's
    name (loss 1.16 for the last weights' 12.3).  With eval_strategy="epoch" training stops after on_epoch_end."""
    from transformers import EarlyStoppingCallback

    torch.manual_seed(0)
    held_out, scramble = Points(100, 1), Scramble(12)
    cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=100"])
    every = dict(eval_strategy="steps", eval_steps=5, save_strategy="steps", save_steps=5) if strategy == "steps" \
        else dict(eval_strategy="epoch", save_strategy="epoch")  # (160 items: an epoch of 10 steps)
    args = make_args(tmp_path, max_steps=60, load_best_model_at_end=True, metric_for_best_model="accuracy", **every)
    trainer = Trainer(Tiny(), args, train_dataset=Points(1000 if strategy == "steps" else 160, 0),
                      eval_dataset=held_out, compute_metrics=accuracy,
                      callbacks=[scramble, cb, EarlyStoppingCallback(early_stopping_patience=2)])
    trainer.train()
    stopped = trainer.state.global_step
    assert stopped < 60 and trainer.state.best_model_checkpoint.endswith("checkpoint-10")
    last = cb.evaluator.history[-1]
    assert (last.step, last.reason) == (stopped - 1, "trigger:final")
    items = EvalRequest(step=last.step, sample_size=last.sample_size, seed=0, reason="").indices(len(held_out))
    model = Tiny()
    model.load_state_dict(scramble.last)
    with torch.no_grad():
        loss = float(nn.functional.cross_entropy(model.net(held_out.x[items]), held_out.y[items], reduction="none")
                     .mean())
    assert last.mean("eval_loss") == pytest.approx(loss, rel=1e-5) and loss > 3.0


class Tokens(torch.utils.data.Dataset):
    """Token sequences of 3 to 11 tokens (a causal LM's evaluation set: batches of different lengths)."""

    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.items = [torch.randint(5, 100, (int(torch.randint(3, 12, (1,), generator=g)),), generator=g)
                      for _ in range(n)]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return {"input_ids": self.items[i]}


def pad_tokens(items):
    """Pads with 0 (labels -100), as DataCollatorForLanguageModeling(mlm=False) does."""
    longest = max(len(x["input_ids"]) for x in items)
    ids = torch.zeros(len(items), longest, dtype=torch.long)
    for row, x in enumerate(items):
        ids[row, :len(x["input_ids"])] = x["input_ids"]
    return {"input_ids": ids, "attention_mask": (ids != 0).long(), "labels": ids.masked_fill(ids == 0, -100)}


@pytest.mark.parametrize("case", ["batch_eval_metrics", "include_for_metrics", "prediction_loss_only", "joined"])
def test_the_callbacks_evaluation_reads_the_evaluation_arguments_as_hf_does(tmp_path, case):
    """A new user's probe of the evaluation arguments: batch_eval_metrics failed every evaluation (compute_metrics
    called without compute_result), include_for_metrics gave None for the inputs and losses, prediction_loss_only
    was ignored, and per_item=False failed on a causal LM's batches of different lengths and on a model's tuple of
    outputs (preprocess_logits_for_metrics ran after joining them); a bool metric was dropped.  A tiny GPT-2 built
    from config; the callback's evaluation of the whole set equals HF's own evaluate()."""
    from transformers import GPT2Config, GPT2LMHeadModel

    calls = []

    def token_metrics(p, compute_result=None):
        calls.append(compute_result)
        preds = p.predictions[0] if isinstance(p.predictions, tuple) else p.predictions
        preds, labels = np.asarray(preds)[:, :-1], np.asarray(p.label_ids)[:, 1:]
        mask = labels != -100
        out = {"token_accuracy": float((preds[mask] == labels[mask]).mean()),
               "any_right": bool((preds == labels).any())}
        if case == "include_for_metrics":
            out["mean_loss"] = float(np.mean(p.losses))
            out["mean_len"] = float((np.asarray(p.inputs) > 0).sum(-1).mean())
        if case == "batch_eval_metrics":  # (HF hands each batch's input dict over, not its input ids)
            out["mean_len"] = float((p.inputs["input_ids"] > 0).sum(-1).float().mean())
        return out

    def argmax(logits, labels):
        return (logits[0] if isinstance(logits, tuple) else logits).argmax(-1)

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=100, n_positions=64,
                                       output_hidden_states=case == "joined"))
    options = {"batch_eval_metrics": dict(batch_eval_metrics=True, include_for_metrics=["inputs"]),
               "include_for_metrics": dict(include_for_metrics=["inputs", "loss"]),
               "prediction_loss_only": dict(prediction_loss_only=True),
               "joined": dict(eval_accumulation_steps=2)}[case]
    cb = AdaptiveEvalCallback("default", per_item=case != "joined", overrides=[
        "policy.sample_size.enabled=false", "evaluation.sample_size=null", "policy.budget.enabled=false",
        "trigger.freq_steps=1000", "policy.peak.confirm_size=0", "evaluation.on_error=raise"])
    trainer = Trainer(model, make_args(tmp_path, max_steps=4, per_device_eval_batch_size=1, **options),
                      train_dataset=Tokens(32, 0), eval_dataset=Tokens(12, 1), data_collator=pad_tokens,
                      compute_metrics=token_metrics, preprocess_logits_for_metrics=argmax, callbacks=[cb])
    trainer.train()
    ours = {k: m.mean for k, m in cb.evaluator.history[-1].metrics.items()}
    calls.clear()
    theirs = {k: float(v) for k, v in trainer.evaluate().items() if k in ours or k == "eval_token_accuracy"}
    if case == "prediction_loss_only":  # (the loss tracked as a loss: it was higher-is-better; a review)
        assert set(ours) == {"eval_loss"} and calls == []
        evaluation = cb.evaluator.cfg.evaluation
        assert (evaluation.metric, evaluation.higher_is_better) == ("eval_loss", False)
    elif case == "joined":  # (one call on the items joined: token accuracy over every token, as HF's)
        assert ours == pytest.approx(theirs, rel=1e-5) and "eval_any_right" in ours
    else:  # (one call per item: its token accuracy, the mean over items)
        assert set(ours) == {*theirs, "eval_any_right"}
        assert ours["eval_loss"] == pytest.approx(theirs["eval_loss"], rel=1e-5)
        if case == "include_for_metrics":
            assert ours["eval_mean_loss"] == pytest.approx(theirs["eval_mean_loss"], rel=1e-5)
            assert ours["eval_mean_len"] == pytest.approx(theirs["eval_mean_len"], rel=1e-5)
        if case == "batch_eval_metrics":  # (HF's is its last batch's: compared where both are whole sets, above)
            assert "eval_mean_len" in ours and "eval_mean_len" in theirs


class Reversals(torch.utils.data.Dataset):
    """Sequence-to-sequence items: 6 tokens in, the last 2 to 5 of them reversed out (labels of several lengths)."""

    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randint(2, 20, (n, 6), generator=g)
        self.out = torch.randint(2, 6, (n,), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.x[i].flip(0)[:int(self.out[i])]}


def pad_labels(items):
    """Stacks the inputs and pads the labels with -100, as DataCollatorForSeq2Seq does."""
    longest = max(len(x["labels"]) for x in items)
    labels = torch.full((len(items), longest), -100)
    for row, x in enumerate(items):
        labels[row, :len(x["labels"])] = x["labels"]
    ids = torch.stack([x["input_ids"] for x in items])
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}


@pytest.mark.parametrize("mode", ["per_item", "aggregate", "asynchronous"])
def test_a_seq2seq_trainer_generates_with_the_generation_arguments_as_its_own_evaluate_does(tmp_path, monkeypatch,
                                                                                           mode):
    """Seq2SeqTrainer(predict_with_generate=True): the callback's evaluation generated with the model's generation
    config (max_length 20, greedy), not generation_max_length and generation_num_beams as HF's evaluate() does,
    and so scored other answers than HF's; asynchronously it generated with the live model (its prediction_step
    generates with self.model), in training mode (T5's dropout on); with per_item=False its batches were in the
    sample's order, and its token-weighted loss differed from HF's.  A tiny T5 built from config."""
    from conftest import DeferredExecutor
    from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments, T5Config, T5ForConditionalGeneration

    def first_two_right(p):  # (the first two generated tokens after the start token; the mean over items)
        preds, labels = np.asarray(p.predictions), np.asarray(p.label_ids)
        return {"right": float((preds[:, 1:3] == labels[:, :2]).mean())}

    torch.manual_seed(0)
    model = T5ForConditionalGeneration(T5Config(vocab_size=24, d_model=16, d_ff=32, num_layers=1, num_heads=2, d_kv=8,
                                                decoder_start_token_id=0, pad_token_id=0, eos_token_id=1))
    asked = []
    generate = T5ForConditionalGeneration.generate

    def spy(self, *a, **kw):
        asked.append((kw.get("max_length"), kw.get("num_beams"), self is model, self.training))
        return generate(self, *a, **kw)

    monkeypatch.setattr(T5ForConditionalGeneration, "generate", spy)
    args = Seq2SeqTrainingArguments(str(tmp_path), max_steps=4, per_device_train_batch_size=8, report_to=[],
                                    use_cpu=True, eval_strategy="no", save_strategy="no", disable_tqdm=True,
                                    predict_with_generate=True, generation_max_length=3, generation_num_beams=2,
                                    per_device_eval_batch_size=3)
    whole = ["evaluation.sample_size=null", "policy.sample_size.enabled=false", "trigger.freq_steps=1000"]
    cb = AdaptiveEvalCallback("default", overrides=FAST + whole + ["evaluation.on_error=raise"],
                              per_item=mode != "aggregate",
                              executor=DeferredExecutor() if mode == "asynchronous" else None)
    trainer = Seq2SeqTrainer(model, args, train_dataset=Reversals(32, 0), eval_dataset=Reversals(8, 1),
                             data_collator=pad_labels, compute_metrics=first_two_right, callbacks=[cb])
    trainer.train()
    ours = cb.evaluator.history[-1]
    assert ours.reason == "trigger:final" and ours["eval_right"].n == 8
    # every item generated as the arguments say, on a model in evaluation mode: asynchronously, a replica
    assert set(asked) == {(3, 2, mode != "asynchronous", False)}
    asked.clear()
    batches = []
    step = Seq2SeqTrainer.prediction_step

    def batch_loss(self, model, inputs, *a, **kw):
        out = step(self, model, inputs, *a, **kw)
        batches.append((float(out[0]), len(inputs["labels"])))
        return out

    monkeypatch.setattr(Seq2SeqTrainer, "prediction_step", batch_loss)
    theirs = trainer.evaluate()
    assert set(asked) == {(3, 2, True, False)}
    assert ours["eval_right"].mean == pytest.approx(theirs["eval_right"])
    if mode == "aggregate":  # HF's batches (3, 3 and 2 items), each weighted by its items (HF weights the last as 3)
        assert [n for _, n in batches] == [3, 3, 2]
        assert ours["eval_loss"].mean == pytest.approx(sum(x * n for x, n in batches) / 8, rel=1e-6)


class WindowedLog(Trainer):
    """As TRL's GRPOTrainer does: metrics gathered over logging_steps, averaged and cleared in its own log()."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.window = []
        self.flushed = []

    def training_step(self, *args, **kwargs):
        self.window.append(self.state.global_step)
        return super().training_step(*args, **kwargs)

    def log(self, logs, start_time=None):
        self.flushed.append((self.state.global_step, len(self.window), sorted(k for k in logs if k.startswith("eval_"))))
        self.window = []
        super().log(logs, start_time)


def test_results_are_logged_through_trainer_log_itself_not_a_subclass_window(tmp_path):
    """The callback reported each result through trainer.log: TRL's GRPOTrainer.log averages and clears the
    reward/KL it gathers over logging_steps, so every evaluation cut that window short (windows of 5, 2, 3 steps
    at logging_steps=5, and an off-schedule point in TensorBoard)."""
    train = Points(512, 0)
    cb = AdaptiveEvalCallback("areal", overrides=[*FAST, "trigger.freq_steps=7"])
    trainer = WindowedLog(Tiny(), make_args(tmp_path, max_steps=20, logging_steps=5), train_dataset=train,
                          eval_dataset=Points(120, 1), compute_metrics=accuracy, callbacks=[cb])
    trainer.train()
    evaluated = [h for h in trainer.state.log_history if "eval_adaptive_step" in h]
    assert [h["eval_adaptive_step"] for h in evaluated] == [6.0, 13.0]  # reported, in log_history
    windows = [(step, n) for step, n, evals in trainer.flushed if n]  # (not the closing summary's log)
    assert windows == [(5, 5), (10, 5), (15, 5), (20, 5)]  # the subclass's window: logging_steps, untouched
    assert not any(evals for _, _, evals in trainer.flushed)  # no result went through the override


# -- found by a new user trying the framework integrations ------------------------------------------------------
def tiny_run(tmp_path, cb, *, eval_dataset=None, compute_metrics=accuracy, max_steps=12, **kw):
    torch.manual_seed(0)
    args = make_args(tmp_path / "out", max_steps=max_steps, logging_steps=4)
    trainer = Trainer(Tiny(), args, train_dataset=Points(400, 0),
                      eval_dataset=eval_dataset if eval_dataset is not None else Points(100, 1),
                      compute_metrics=compute_metrics, callbacks=[cb], **kw)
    trainer.train()
    return trainer


@pytest.mark.parametrize("bad", [dict(overrides=["trigger.freq_stepz=10"]),
                                 dict(overrides=["policy.sample_size.max=32"]),  # below the preset's min of 48
                                 dict(config="no_such_preset")])
def test_a_bad_config_is_a_config_error_when_the_callback_is_built(bad):
    """It was accepted at construction, logged once inside on_train_begin, and the whole run trained with no
    evaluation (cb.evaluator None)."""
    from adaptive_eval import ConfigError

    with pytest.raises(ConfigError, match=r"trigger\.freq_stepz|policy\.sample_size\.m|no_such_preset"):
        AdaptiveEvalCallback(bad.get("config", "default"), overrides=bad.get("overrides", ()))


def test_a_datasets_text_column_is_removed_as_hfs_own_evaluate_removes_it(tmp_path):
    """The usual text-classification setup (a datasets.Dataset keeping its text column after tokenizing,
    DataCollatorWithPadding, remove_unused_columns=True): the raw rows reached the collator, so every evaluation
    failed while HF's own evaluate() worked."""
    datasets = pytest.importorskip("datasets")
    tokenizers = pytest.importorskip("tokenizers")
    from transformers import BertConfig, BertForSequenceClassification, DataCollatorWithPadding, PreTrainedTokenizerFast

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + [f"w{i}" for i in range(20)]
    tk = tokenizers.Tokenizer(tokenizers.models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tk.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="[PAD]", unk_token="[UNK]")
    rng = np.random.default_rng(0)

    def make(n):
        rows = []
        for _ in range(n):
            ws = [f"w{k}" for k in rng.integers(0, 20, rng.integers(2, 8))]
            rows.append({"text": " ".join(ws), "label": int("w3" in ws)})
        return datasets.Dataset.from_list(rows).map(lambda b: tok(b["text"], truncation=True), batched=True)

    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(vocab_size=len(words), hidden_size=16, num_hidden_layers=1,
                                                     num_attention_heads=2, intermediate_size=32,
                                                     max_position_embeddings=32, num_labels=2, pad_token_id=0))
    held_out = make(40)
    cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=4", "evaluation.on_error=raise"])
    trainer = Trainer(model, make_args(tmp_path, max_steps=8, logging_steps=4), train_dataset=make(200),
                      eval_dataset=held_out, compute_metrics=accuracy, data_collator=DataCollatorWithPadding(tok),
                      callbacks=[cb])
    trainer.train()
    assert "text" in held_out.column_names  # the user's dataset is left as it was
    last = cb.evaluator.history[-1]
    assert (last.step, last.reason) == (7, "trigger:final") and cb.evaluator.summary()["eval_errors"] == 0
    assert last["eval_accuracy"].n == 40  # the whole set (at most 48): the same numbers as HF's own evaluate()
    theirs = trainer.evaluate()
    assert last["eval_accuracy"].mean == pytest.approx(theirs["eval_accuracy"])
    assert last["eval_loss"].mean == pytest.approx(theirs["eval_loss"], rel=1e-4)


def test_non_scalar_compute_metrics_keys_are_skipped_with_one_warning_and_the_scalars_kept(tmp_path, caplog):
    """compute_metrics returning a list or a string beside the accuracy (HF logs them as they are) made every
    evaluation fail (float() of a list), eval_accuracy with it."""
    def metrics(pred):
        return {**accuracy(pred), "per_class_count": [1, 2, 3, 4], "note": "ok"}

    cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=4"])
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        tiny_run(tmp_path, cb, compute_metrics=metrics)
    ev = cb.evaluator
    assert ev.summary()["eval_errors"] == 0 and len(ev.history) >= 2
    assert all(set(r.metrics) == {"eval_accuracy", "eval_loss"} for r in ev.history)
    said = [r.getMessage() for r in caplog.records if "per_class_count" in r.getMessage()]
    assert len(said) == 1 and "'note'" in said[0] and "skipped" in said[0]


def test_compute_metrics_returning_no_dict_is_a_type_error_naming_it(tmp_path):
    """A list from compute_metrics failed every evaluation with "'list' object has no attribute 'items'", naming
    neither compute_metrics nor what it returned (a new user's probe)."""
    cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=4", "evaluation.on_error=raise"],
                              per_item=False)
    with pytest.raises(TypeError, match=r"compute_metrics must return a dict of metric name to number.*got list"):
        tiny_run(tmp_path, cb, compute_metrics=lambda pred: [accuracy(pred)["accuracy"]])


def test_a_corpus_level_metric_under_per_item_scoring_says_to_pass_per_item_false(tmp_path):
    """A metric that needs several items (F1 macro, AUC) failed every evaluation under the default per-item
    scoring with an error that did not say what to do."""
    def macro(pred):
        if len(pred.label_ids) < 2:
            raise ValueError("Number of classes in y_true not equal to the number of columns in 'y_score'")
        return accuracy(pred)

    cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=4", "evaluation.on_error=raise"])
    with pytest.raises(RuntimeError, match=r"per_item=False") as info:
        tiny_run(tmp_path / "a", cb, compute_metrics=macro)
    assert "Number of classes" in str(info.value)  # the user's own error is kept, and chained
    assert isinstance(info.value.__cause__, ValueError)
    cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=4", "evaluation.on_error=raise"],
                              per_item=False)
    tiny_run(tmp_path / "b", cb, compute_metrics=macro)  # as the message says
    assert cb.evaluator.summary()["eval_errors"] == 0 and "eval_accuracy" in cb.evaluator.history[-1].metrics


@pytest.mark.parametrize("with_metrics,per_item,asynchronous",
                         [(True, True, False), (False, True, False), (True, False, False), (True, True, True)])
def test_a_dict_of_eval_datasets_is_evaluated_each_named_as_hf_names_it(tmp_path, with_metrics, per_item, asynchronous):
    """Trainer(eval_dataset={"a": ..., "b": ...}) meant no evaluation: a traceback at every due step.  With
    per_item=False each set's aggregates were said to be over the last set's count of items (30 for a's 40)."""
    sets = {"a": Points(40, 1), "b": Points(30, 2)}
    whole = ["policy.sample_size.initial=48", "policy.sample_size.min=48"]  # every evaluation: each whole set
    cb = AdaptiveEvalCallback("default", overrides=FAST + whole + ["trigger.freq_steps=4", "evaluation.on_error=raise",
                                                                   f"evaluation.asynchronous={asynchronous}"],
                              per_item=per_item)
    trainer = tiny_run(tmp_path, cb, eval_dataset=sets, compute_metrics=accuracy if with_metrics else None,
                       max_steps=8)
    ev = cb.evaluator
    last = ev.history[-1]
    names = {"eval_a_loss", "eval_b_loss"} | ({"eval_a_accuracy", "eval_b_accuracy"} if with_metrics else set())
    assert set(last.metrics) == names and ev.summary()["eval_errors"] == 0
    assert (last["eval_a_loss"].n, last["eval_b_loss"].n) == (40, 30)  # each set on the request's items of its own
    # its cost is both sets' items (the budget and summary()["samples"] counted the largest set's, 40)
    assert last.items == 70 and ev.summary()["samples"] == 70 * len(ev.history)
    assert EvalResult.from_state(last.state()).items == 70  # (a resumed run's history counts them alike)
    if with_metrics:
        assert (last["eval_a_accuracy"].n, last["eval_b_accuracy"].n) == (40, 30)
    # the same names and numbers as HF's own evaluate() of the dict
    theirs = trainer.evaluate()
    for name in names:
        assert last[name].mean == pytest.approx(theirs[name], rel=1e-4), name
    assert any("eval_b_loss_ci_low" in h for h in trainer.state.log_history) == per_item  # (an aggregate: no interval)
    # tracked without compute_metrics: the first set's loss, lower is better (eval_loss is not among them)
    if not with_metrics:
        assert (ev.cfg.evaluation.metric, ev.cfg.evaluation.higher_is_better) == ("eval_a_loss", False)


class FlipWeights(TrainerCallback):
    """The injected fault: at HF step ``at`` the output layer is negated and tripled (a corrupted update): every logit changes
    sign, so the accuracy falls at once and the loss jumps."""

    def __init__(self, at):
        self.at = at

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step == self.at:
            with torch.no_grad():
                for p in model.net[-1].parameters():
                    p.mul_(-3.0)


def test_look_back_evaluates_the_saved_checkpoint_before_a_fall_and_training_goes_on_unchanged(tmp_path, caplog):
    def run(out, look_back, **kw):
        torch.manual_seed(0)
        train, held_out = Points(2000, 0), Points(300, 1)
        cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=25"], look_back=look_back)
        trainer = Trainer(Tiny(), make_args(out, max_steps=100, save_strategy="steps", save_steps=10),
                          train_dataset=train, eval_dataset=held_out, compute_metrics=accuracy,
                          callbacks=[cb, FlipWeights(60)])
        trainer.train(**kw)
        (ran,) = [c for c in trainer.callback_handler.callbacks if isinstance(c, AdaptiveEvalCallback)]
        return ran, trainer, held_out

    plain, plain_trainer, _ = run(tmp_path / "plain", False)
    with caplog.at_level(logging.INFO, logger="adaptive_eval"):
        cb, trainer, held_out = run(tmp_path / "kept", True)
    # The line at train end counts it among the evaluations
    assert any(r.getMessage().startswith(f"adaptive_eval: {len(cb.evaluator.history)} evaluations (1 of kept "
                                         "checkpoints), ") for r in caplog.records)
    assert "on_save" in cb.hooks_called
    [back] = [r for r in cb.evaluator.history if r.evaluated_at is not None]
    alarm = next(r for r in cb.evaluator.history if r.reason.startswith("alarm:"))
    assert back.evaluated_at == alarm.step and back.reason == f"lookback:{alarm.reason}"
    assert back.step % 10 == 9 and back.step < 59  # checkpoint-<step + 1>, saved before the weights were negated
    assert back["eval_accuracy"].mean > alarm["eval_accuracy"].mean + 0.3
    # The numbers are those of the checkpoint's weights, on the items the request named.
    from safetensors.torch import load_file

    from adaptive_eval import EvalRequest

    saved = Tiny()
    saved.load_state_dict(load_file(str(tmp_path / "kept" / f"checkpoint-{back.step + 1}" / "model.safetensors")))
    idx = EvalRequest(step=back.step, sample_size=back.sample_size, seed=0, reason="").indices(len(held_out))
    with torch.no_grad():
        logits = saved.eval().net(held_out.x[idx])
    assert back["eval_accuracy"].mean == pytest.approx(float((logits.argmax(1) == held_out.y[idx]).float().mean()))
    # Reported through trainer.log at the step it ran (HF's axis, 1-based), its checkpoint's step beside it
    [logged] = [h for h in trainer.state.log_history if "eval_lookback_accuracy" in h]
    assert (logged["step"], logged["eval_lookback_step"], logged["eval_lookback_items"]) == \
        (back.evaluated_at + 1, back.step, back.items)
    assert logged["eval_lookback_accuracy"] == pytest.approx(back["eval_accuracy"].mean)
    # The model's own weights were put back: training went on exactly as without the look back.
    for a, b in zip(trainer.model.parameters(), plain_trainer.model.parameters()):
        assert torch.equal(a, b)
    assert [(r.step, r.reason) for r in cb.evaluator.history if r.evaluated_at is None] == \
        [(r.step, r.reason) for r in plain.evaluator.history]
    assert not [r for r in plain.evaluator.history if r.evaluated_at is not None]
    # Resumed from the checkpoint saved just before the fall: the same decisions, the look back included (the
    # state in checkpoint-N was taken before checkpoint-N was handed over).
    resumed, _, _ = run(tmp_path / "kept", True, resume_from_checkpoint=str(tmp_path / "kept" / f"checkpoint-{back.step + 1}"))
    rows = lambda h: [(r.step, r.reason, r.evaluated_at, r.sample_size) for r in h]  # noqa: E731
    assert rows(resumed.evaluator.history) == rows(cb.evaluator.history)


def test_a_run_folder_moved_before_the_resume_looks_back_at_its_checkpoints_where_they_are_now(tmp_path):
    """Found by a new user: the kept checkpoints' paths were the old folder's, and the resumed run's look back
    failed on them ("Can't find a valid checkpoint"); they are now found beside the checkpoint resumed from."""
    import shutil

    def run(out, **kw):
        torch.manual_seed(0)
        cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=25"], look_back=True)
        trainer = Trainer(Tiny(), make_args(out, max_steps=100, save_strategy="steps", save_steps=10),
                          train_dataset=Points(2000, 0), eval_dataset=Points(300, 1), compute_metrics=accuracy,
                          callbacks=[cb, FlipWeights(60)])
        trainer.train(**kw)
        (ran,) = [c for c in trainer.callback_handler.callbacks if isinstance(c, AdaptiveEvalCallback)]
        return ran.evaluator.history

    rows = lambda h: [(r.step, r.reason, r.evaluated_at, r.sample_size, r.mean("eval_accuracy")) for r in h]  # noqa: E731
    full = run(tmp_path / "src")
    [back] = [r for r in full if r.evaluated_at is not None]
    assert back.step == 49  # kept before checkpoint-60, which the resume below starts from
    shutil.move(tmp_path / "src", tmp_path / "moved")
    resumed = run(tmp_path / "moved", resume_from_checkpoint=str(tmp_path / "moved" / "checkpoint-60"))
    assert rows(resumed) == rows(full)


def test_look_back_puts_the_weights_back_when_the_evaluation_fails_and_is_off_where_it_would_be_unsafe(tmp_path,
                                                                                                      caplog):
    from adaptive_eval import EvalRequest

    torch.manual_seed(0)
    train, held_out = Points(500, 0), Points(50, 1)
    cb = AdaptiveEvalCallback("default", overrides=FAST + ["evaluation.timeout_s=60"], look_back=True)
    trainer = Trainer(Tiny(), make_args(tmp_path, max_steps=20, save_strategy="steps", save_steps=10),
                      train_dataset=train, eval_dataset=held_out, compute_metrics=accuracy, callbacks=[cb])
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        trainer.train()
    # Under evaluation.timeout_s the evaluation runs in a thread the step may stop waiting for: no checkpoint
    # is handed over (its weights would sit in the training model meanwhile).
    assert cb.evaluator.policies.by_name["lookback"].kept == []
    assert sum("look_back is off for this run: evaluation.timeout_s" in r.getMessage() for r in caplog.records) == 1
    # The swap itself: whatever the evaluation raises, the model's own weights are back afterwards.
    own = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    seen = {}

    def broken(request, model):
        seen["weights"] = {k: v.clone() for k, v in model.state_dict().items()}
        raise RuntimeError("out of memory")

    cb._evaluate_on = broken
    with pytest.raises(RuntimeError, match="out of memory"):
        cb._evaluate_with_trainer(EvalRequest(step=9, sample_size=8, seed=0, reason="lookback:x",
                                              checkpoint=str(tmp_path / "checkpoint-10")))
    assert any(not torch.equal(seen["weights"][k], own[k]) for k in own)  # the checkpoint's were loaded
    assert all(torch.equal(v, own[k]) for k, v in trainer.model.state_dict().items())
    # A folder that holds another step (another run's checkpoint-10 in a reused output folder) is not evaluated
    from adaptive_eval.evaluators import CheckpointUnavailable

    state_file = tmp_path / "checkpoint-10" / "trainer_state.json"
    state_file.write_text(json.dumps({**json.loads(state_file.read_text()), "global_step": 20}))
    with pytest.raises(CheckpointUnavailable, match="holds global_step 20, not 10"):
        cb._evaluate_with_trainer(EvalRequest(step=9, sample_size=8, seed=0, reason="lookback:x",
                                              checkpoint=str(tmp_path / "checkpoint-10")))


@pytest.mark.parametrize("kw,said", [
    ({}, None),
    ({"eval_strategy": "steps", "eval_steps": 5}, "HF evaluates on its own schedule as well as AdaptiveEvalCallback"),
    ({"save_strategy": "best", "metric_for_best_model": "loss"}, "HF's best-checkpoint tracking sees only HF's own"),
])
def test_hf_own_evaluation_beside_the_callback_is_said_once(tmp_path, caplog, kw, said):
    """With eval_strategy "steps" every evaluation ran twice, and with save_strategy "best" and eval_strategy "no"
    no checkpoint was ever saved, without a word (found by a new-user probe)."""
    torch.manual_seed(0)
    cb = AdaptiveEvalCallback("areal", lambda: {"acc": [1.0]}, overrides=["trigger.freq_steps=5"])
    trainer = Trainer(Tiny(), make_args(tmp_path, max_steps=10, **kw), train_dataset=Points(200, 0),
                      eval_dataset=Points(20, 1), callbacks=[cb])
    with caplog.at_level("WARNING", logger="adaptive_eval"):
        trainer.train()
    found = [r.getMessage() for r in caplog.records if "adaptive_eval: " in r.getMessage()
             and ("eval_strategy" in r.getMessage() or "save_strategy" in r.getMessage())]
    assert len(found) == (0 if said is None else 1), found
    assert said is None or said in found[0]


def test_a_resource_monitor_given_to_the_callback_is_the_one_the_scheduler_reads(tmp_path):
    """The README's fake monitor could not be handed to a callback (it builds the evaluator): a new user's find."""
    from adaptive_eval.scheduler import FakeResourceMonitor

    short = FakeResourceMonitor([{"accelerator_free_gb": 1.0}])
    torch.manual_seed(0)
    cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=5", "resources.enabled=true",
                                                           "resources.min_free_accelerator_gb=4",
                                                           "resources.max_deferral_steps=3"],
                              resource_monitor=short)
    Trainer(Tiny(), make_args(tmp_path, max_steps=12), train_dataset=Points(400, 0), eval_dataset=Points(50, 1),
            compute_metrics=accuracy, callbacks=[cb]).train()
    assert short.calls > 0
    assert [r.reason for r in cb.evaluator.history][:1] == ["resources:forced (trigger:steps)"]


def test_a_callback_reused_in_a_second_trainer_evaluates_and_logs_through_that_one(tmp_path):
    """It kept the first trainer while that one was alive: it evaluated the old model and logged into the old
    trainer's history (a new user's find).  A shut-down executor is refused when the callback is built."""
    from concurrent.futures import ThreadPoolExecutor

    torch.manual_seed(0)
    cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=5"])
    first = Trainer(Tiny(), make_args(tmp_path / "a", max_steps=10), train_dataset=Points(200, 0),
                    eval_dataset=Points(40, 1), compute_metrics=accuracy, callbacks=[cb])
    first.train()
    logged_first = [dict(h) for h in first.state.log_history]
    second = Trainer(Tiny(), make_args(tmp_path / "b", max_steps=10), train_dataset=Points(200, 2),
                     eval_dataset=Points(40, 3), compute_metrics=accuracy, callbacks=[cb])
    second.train()
    assert cb.trainer is second
    Trainer(Tiny(), make_args(tmp_path / "c", max_steps=10), train_dataset=Points(200, 4), eval_dataset=Points(40, 5),
            compute_metrics=accuracy, callbacks=[cb])
    assert cb.trainer is second  # (one built, not trained: the callback stays with the trainer that trained)
    assert any("eval_accuracy" in h for h in second.state.log_history)
    assert first.state.log_history == logged_first  # (nothing more logged into the first)
    assert "train/loss" in cb.evaluator._detectors
    pool = ThreadPoolExecutor(1)
    pool.shutdown()
    with pytest.raises(RuntimeError, match="is shut down"):
        AdaptiveEvalCallback("default", executor=pool)


def test_a_callback_reused_after_an_interrupted_train_watches_the_new_trainers_loss_from_a_clean_step(tmp_path):
    """A probe: Ctrl-C in the first train() skipped on_train_end, so the first trainer kept the wrapper, the new
    Trainer was never wrapped, and its training loss was never observed (unsaid); and the interrupted step's loss
    so far was added to the next run's first step."""
    class Interrupt(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 5:
                raise KeyboardInterrupt

    torch.manual_seed(0)
    cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=5"])
    first = Trainer(Tiny(), make_args(tmp_path / "a", max_steps=10), train_dataset=Points(200, 0),
                    eval_dataset=Points(40, 1), compute_metrics=accuracy, callbacks=[cb, Interrupt()])
    with pytest.raises(KeyboardInterrupt):
        first.train()
    cb._step_loss = torch.tensor(100.0)  # (as an interrupted step's micro-batches leave it)
    second = Trainer(Tiny(), make_args(tmp_path / "b", max_steps=10), train_dataset=Points(200, 2),
                     eval_dataset=Points(40, 3), compute_metrics=accuracy, callbacks=[cb])
    seen = []
    original = AdaptiveEvalCallback._build

    def build(self, *a, **kw):
        original(self, *a, **kw)
        observe = self.evaluator.observe
        self.evaluator.observe = lambda stats, step, *x, **y: (seen.append((step, stats.get("train/loss"))),
                                                              observe(stats, step, *x, **y))[1]

    cb._build = build.__get__(cb)
    second.train()
    assert "training_step" not in first.__dict__  # (unwrapped)
    losses = [v for _, v in seen if v is not None]
    assert len(losses) == 10 and max(losses) < 10


def test_a_generating_trainer_without_evaluate_fn_is_told_to_pass_one(tmp_path, caplog):
    """TRL's GRPOTrainer without evaluate_fn failed every evaluation with TRL's own shape error (a new user's find):
    said at the start (a Trainer subclass under TRL's class name stands for it here)."""
    class GRPOTrainer(Trainer):
        pass

    torch.manual_seed(0)
    cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=5"])
    with caplog.at_level("WARNING", logger="adaptive_eval"):
        GRPOTrainer(Tiny(), make_args(tmp_path, max_steps=2), train_dataset=Points(100, 0),
                    eval_dataset=Points(20, 1), callbacks=[cb]).train()
    assert [r for r in caplog.records if "GRPOTrainer's own evaluation (prediction_step)" in r.getMessage()]


def test_look_back_with_save_total_limit_one_is_said_at_the_start(tmp_path, caplog):
    """A new user's probe: with save_total_limit=1 HF deletes each checkpoint at the next save, so the look back
    found the one before a fall gone, and only then said so; the Lightning adapter says it of save_top_k=1 at the
    start, and this one now does too (once; not for a limit of 2, nor without the look back)."""
    said = "look_back: save_total_limit=1 keeps only the latest checkpoint"
    for limit, look_back, expected in ((1, True, 1), (2, True, 0), (1, False, 0)):
        caplog.clear()
        cb = AdaptiveEvalCallback("default", overrides=FAST, look_back=look_back)
        trainer = Trainer(Tiny(), make_args(tmp_path / f"{limit}{look_back}", max_steps=4, save_strategy="steps",
                                            save_steps=2, save_total_limit=limit),
                          train_dataset=Points(100, 0), eval_dataset=Points(20, 1), compute_metrics=accuracy,
                          callbacks=[cb])
        with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
            trainer.train()
        assert sum(said in r.getMessage() for r in caplog.records) == expected, (limit, look_back)


def test_suites_without_an_evaluate_fn_are_said_at_the_start(tmp_path, caplog):
    """Found by a probe: evaluation.suites with the trainer's own evaluation built without a word, then every
    evaluation failed, each naming an evaluate_fn the user never wrote."""
    suites = ["evaluation.suites={a: {size: 30}, b: {size: 20}}", "evaluation.metric=a/accuracy"]
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        tiny_run(tmp_path, AdaptiveEvalCallback("default", overrides=FAST + suites))
    assert "evaluation.suites (a, b) needs AdaptiveEvalCallback(evaluate_fn=...)" in caplog.text
    caplog.clear()
    fn = lambda req: {f"{s}/accuracy": [1.0] * len(r.indices) for s, r in req.suites.items()}  # noqa: E731
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        tiny_run(tmp_path, AdaptiveEvalCallback("default", fn, overrides=FAST + suites))
    assert "needs AdaptiveEvalCallback(evaluate_fn" not in caplog.text


def test_an_empty_eval_dataset_fails_the_evaluation_saying_so(tmp_path, caplog):
    """Found by a probe: an eval_dataset of no items read as evaluations of 50 items with no metric ("a missing
    return?"), none of them failed."""
    cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=4"])
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        tiny_run(tmp_path, cb, eval_dataset=Points(0, 1))
    assert cb.evaluator.history == [] and cb.evaluator.summary()["eval_errors"] >= 1
    assert "eval_dataset has no items: pass one with items, or evaluate_fn=" in caplog.text
    # the failure is the trainer's own evaluation's, not an "evaluate_fn" the user never wrote (a probe, TRL's)
    assert "Trainer's own evaluation failed at step 3 (attempt 1/1" in caplog.text
    assert "evaluate_fn failed" not in caplog.text


class Poison(TrainerCallback):
    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step == 12:
            with torch.no_grad():
                for p in model.parameters():
                    p.fill_(float("nan"))


def test_a_steps_logged_values_are_observed_before_its_decision(tmp_path):
    """Found by a probe: HF logs grad_norm in on_log, after on_step_end had decided the step, so weights gone NaN
    cost two evaluations one step apart (the loss's alarm, then grad_norm's); one now, with logging_steps=1 too."""
    cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=8"])
    torch.manual_seed(0)
    args = make_args(tmp_path / "out", max_steps=20, logging_steps=1)
    Trainer(Tiny(), args, train_dataset=Points(400, 0), eval_dataset=Points(60, 1), compute_metrics=accuracy,
            callbacks=[cb, Poison()]).train()
    alarms = [(r.step, r.reason) for r in cb.evaluator.history if r.reason.startswith("alarm:")]
    assert len(alarms) == 1 and "nonfinite" in alarms[0][1], alarms


def test_eval_before_train_evaluates_the_initial_weights(tmp_path):
    """Found by a probe: trigger.eval_before_train's evaluation came after the first optimizer step (the adapter
    never called before_train); now the initial weights, before the first step, as HF's eval_on_start."""
    held_out = Points(100, 1)
    torch.manual_seed(0)
    with torch.no_grad():
        initial = float(nn.functional.cross_entropy(Tiny().net(held_out.x), held_out.y))
    cb = AdaptiveEvalCallback("default", overrides=["trigger.eval_before_train=true", "trigger.freq_steps=50",
                                                    "policy.sample_size.enabled=false", "evaluation.sample_size=null"])
    trainer = tiny_run(tmp_path, cb, eval_dataset=held_out, compute_metrics=None)
    first = cb.evaluator.history[0]
    assert (first.step, first.reason) == (0, "before_train")
    assert first.mean("eval_loss") == pytest.approx(initial, rel=1e-5)
    assert cb.evaluator.history[1].mean("eval_loss") != pytest.approx(initial, rel=1e-3)  # (trained since)
    # reported once each (the initial one came twice, at log steps 0 and 1; a review)
    logged = [h["eval_adaptive_step"] for h in trainer.state.log_history if "eval_adaptive_step" in h]
    assert logged == [r.step for r in cb.evaluator.history]


class NoLogAt(TrainerCallback):
    def __init__(self, at):
        self.at = at

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.at:
            control.should_log = False  # (after ours: the step's decision waits for a log that does not come)


def test_a_step_left_for_a_log_that_never_comes_is_decided_before_the_next_step_and_never_outlives_its_run(tmp_path):
    """From a review: a step whose decision waited for its log, where no log came, was decided at the next
    on_step_end, on the next step's weights; and one left pending by a run that died before its log was decided on
    the next train()'s evaluator, whose steps then went backwards (every evaluation failed)."""
    seen = []
    trainer = None

    def fn(request):
        seen.append((request.step, trainer.state.global_step))
        return {"acc": [1.0] * len(request.indices(20))}

    cb = AdaptiveEvalCallback("default", fn, overrides=FAST + ["trigger.freq_steps=8", "trigger.eval_at_end=false"])
    torch.manual_seed(0)
    trainer = Trainer(Tiny(), make_args(tmp_path / "out", max_steps=12, logging_steps=1),
                      train_dataset=Points(400, 0), callbacks=[cb, NoLogAt(8)])
    trainer.train()
    assert seen and seen[0] == (7, 8)  # (the weights of step 7, HF's global_step 8: not 9)
    cb._pending = 30  # (as a run that died between its on_step_end and on_log leaves it)
    trainer.train()
    assert cb.evaluator.summary()["eval_errors"] == 0 and cb.evaluator.history


def test_beside_hf_writer_our_file_keeps_the_paired_differences_interval_and_charts_hfs_tags(tmp_path):
    """In HF's TensorBoard folder our file leaves out what trainer.log sends to HF's writer; it also left out a paired
    difference's bounds and n (only its bare value was written), and its dashboard charted tags HF does not write
    (a new user's probe)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from adaptive_eval.integrations.hf import _WithoutTrainerResults
    from adaptive_eval.tensorboard import TensorBoardLogger, eval_scalars
    from adaptive_eval.types import MetricSummary

    result = EvalResult(step=9, sample_size=32, reason="trigger:steps", seconds=0.0,
                        metrics={"eval_acc": MetricSummary(mean=0.5, n=32, ci=(0.33, 0.67))},
                        paired={"eval_acc": MetricSummary(mean=-0.1, n=30, ci=(-0.2, 0.0))})
    logger = _WithoutTrainerResults(TensorBoardLogger(tmp_path))
    logger.log(9, eval_scalars(result))
    logger.inner.close()
    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    assert set(acc.Tags()["scalars"]) == {"eval/eval_acc/paired_diff", "eval/eval_acc/paired_diff/ci_low",
                                          "eval/eval_acc/paired_diff/ci_high", "eval/eval_acc/paired_diff/n"}
    assert logger.inner._renamed == {"eval/eval_acc": "eval/acc", "eval/eval_acc/ci_low": "eval/acc_ci_low",
                                     "eval/eval_acc/ci_high": "eval/acc_ci_high", "eval/eval_acc/n": "eval/acc_n"}


def test_with_report_to_tensorboard_the_decisions_go_into_hfs_folder_by_default(tmp_path, monkeypatch):
    """report_to=["tensorboard"] and no logging.tensorboard_dir: the results reached HF's TensorBoard, why each came
    (decisions, alarms, controller state) reached none (a new user's probe of the Lightning adapter, alike here).  The
    evaluator's file goes into HF's folder, unless tensorboard=False."""
    from adaptive_eval.tensorboard import read_texts

    def run(folder, **kw):
        monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(folder))
        torch.manual_seed(0)
        cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=5"], **kw)
        trainer = Trainer(Tiny(), make_args(tmp_path / "out", max_steps=12, report_to=["tensorboard"]),
                          train_dataset=Points(400, 0), eval_dataset=Points(64, 1), compute_metrics=accuracy,
                          callbacks=[cb])
        trainer.train()
        return cb

    cb = run(tmp_path / "on")
    decisions = read_texts(tmp_path / "on", "decisions")
    assert [s for s, t in decisions if t.startswith("evaluated: ")] == [r.step for r in cb.evaluator.history]
    assert cb.state()["args"]["tensorboard"] is True
    # Read back as a trace, HF's folder has each result at the step of the weights it measured, without its
    # bookkeeping (each came at HF's 1-based step, a step late, and accuracy_ci_low, _n, adaptive_step and
    # adaptive_items were eval metrics; a probe)
    from adaptive_eval.trace import read_trace

    trace = read_trace(tmp_path / "on")
    assert trace.eval_names() == ["eval/accuracy", "eval/loss"]
    measured = {r.step: r.metrics["eval/accuracy"] for r in trace.records if "eval/accuracy" in r.metrics}
    assert measured == {r.step: pytest.approx(r.mean("eval_accuracy")) for r in cb.evaluator.history}
    assert max(r.step for r in trace.records) == 11
    run(tmp_path / "off", tensorboard=False)
    assert list((tmp_path / "off").iterdir()) and not list((tmp_path / "off").glob("*.adaptive_eval"))


def test_a_relative_config_path_is_kept_absolute_for_hfs_rebuild_and_switches_are_booleans(tmp_path, monkeypatch):
    """HF rebuilds the callback from state()["args"] on a resume (restore_callback_states_from_checkpoint): a config
    named relative to the directory the first run started in failed "no such config file" from another; and
    per_item="false", look_back="no", tensorboard="off" read as True (a new user's probe)."""
    (tmp_path / "mine.yaml").write_text("trigger:\n  freq_steps: 7\n")
    monkeypatch.chdir(tmp_path)
    cb = AdaptiveEvalCallback("mine.yaml")
    monkeypatch.chdir(tmp_path.parent)
    rebuilt = AdaptiveEvalCallback(**cb.state()["args"])
    assert cb.state()["args"]["config"] == str(tmp_path / "mine.yaml") == rebuilt.config
    for key in ("per_item", "look_back", "tensorboard"):
        with pytest.raises(TypeError, match=f"{key} must be True or False, got 'false'"):
            AdaptiveEvalCallback("default", **{key: "false"})


def test_another_sets_evaluation_by_hand_is_not_watched_nor_said_after_training(tmp_path, caplog):
    """trainer.evaluate(test_set, metric_key_prefix="test") during training: test_loss and test_accuracy became
    training streams; after training it was said "observe() after close()", a call the user never made (a probe)."""
    class ByHand(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 5:
                self.trainer.evaluate(held_out, metric_key_prefix="test")

    torch.manual_seed(0)
    train, held_out = Points(400, 0), Points(64, 1)
    cb, hand = AdaptiveEvalCallback("default", overrides=FAST), ByHand()
    trainer = Trainer(Tiny(), make_args(tmp_path / "out", max_steps=12), train_dataset=train, eval_dataset=held_out,
                      compute_metrics=accuracy, callbacks=[cb, hand])
    hand.trainer = trainer
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        trainer.train()
        trainer.evaluate(held_out, metric_key_prefix="test")
    assert not [s for s in cb.evaluator.state_dict()["detectors"] if "test_" in s]
    assert not [r for r in caplog.records if "after close()" in r.getMessage()]


def test_beside_hf_writer_the_suites_counts_and_a_metric_without_an_interval_are_charted_as_hf_writes_them():
    """In HF's folder a suite's "items per evaluation" matched no tag (HF writes eval/<suite>/<m>_n), nor did a
    stratum's; and a metric without an interval got a band of bounds HF never writes (result_scalars leaves a NaN
    bound out) (a new user's probe)."""
    from adaptive_eval.integrations.hf import _WithoutTrainerResults
    from adaptive_eval.tensorboard import dashboard_layout

    renamed = {"eval/math/acc": "eval/math/acc", "eval/math/acc/n": "eval/math/acc_n",
               "eval/math/acc/pass@4/n": "eval/math/acc/pass@4_n",
               "eval/math/acc/stratum=hard/n": "eval/math/acc/stratum=hard_n"}
    layout = dashboard_layout(["math/acc", "math/acc/pass@4", "math/acc/stratum=hard"], groups=["math"],
                              renamed=renamed)["eval: math"]
    assert layout["items per evaluation"] == ("Multiline", ["^eval/math/acc_n$"])
    assert layout["items per stratum"] == ("Multiline", ["^eval/math/acc/stratum=hard_n$"])

    class Inner:
        def __init__(self):
            self.renamed = {}

        def written_as(self, step, renamed):
            self.renamed.update(renamed)

        def log(self, step, scalars):
            pass

    inner = Inner()
    _WithoutTrainerResults(inner).log(3, {"eval/eval_score": 0.5, "eval/eval_score/ci_low": math.nan,
                                          "eval/eval_score/ci_high": math.nan, "eval/eval_score/n": 1.0})
    assert inner.renamed == {"eval/eval_score": "eval/score", "eval/eval_score/n": "eval/score_n"}


class GRPOTrainer(Trainer):
    """A Trainer under TRL's class name (TRL's own runs in tests/test_integrations_trl.py): one that logs per-step
    RL stats."""


@pytest.mark.parametrize("logging_steps,said", [(4, True), (1, False), (0.5, True), ("epoch", True), ("no", True),
                                                ("plain", False)])
def test_logging_that_leaves_the_logged_streams_warming_up_most_of_the_run_is_said(tmp_path, caplog, logging_steps,
                                                                                   said):
    """A probe of GRPOTrainer at TRL's default logging_steps=10: 19 of its 20 streams were still warming up at the
    end of a 60-step run, and nothing said so (train/loss alone is observed every step); and a review: nor under
    logging_strategy "epoch" or "no", whose advice names logging_strategy too.  Not of a plain Trainer (it logs only
    grad_norm beside the loss: said at HF's default of 500, it was noise; a probe)."""
    cb = AdaptiveEvalCallback("default", overrides=[*FAST, "trigger.freq_steps=100"])
    strategy = {"logging_strategy": logging_steps} if logging_steps in ("epoch", "no") else {
        "logging_steps": 4 if logging_steps == "plain" else logging_steps}
    args = make_args(tmp_path, max_steps=12, **strategy)
    kind = Trainer if logging_steps == "plain" else GRPOTrainer
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        kind(Tiny(), args, train_dataset=Points(200, 0), eval_dataset=Points(40, 1), compute_metrics=accuracy,
             callbacks=[cb]).train()
    if logging_steps == "no":
        assert "logging_strategy='no': the trainer logs no values, so only train/loss is watched" in caplog.text
        assert "set logging_strategy='steps' and logging_steps=1" in caplog.text
        return
    every = {4: 4, 0.5: 6, "epoch": 13, 1: 1, "plain": 4}[logging_steps]  # (an epoch: 200 items in batches of 16)
    head = "logging_strategy='epoch'" if logging_steps == "epoch" else f"logging_steps={every}"
    assert (f"{head}: the streams the trainer logs" in caplog.text) == said, caplog.text
    if said:
        assert f"a detector's 30-value warm-up takes {30 * every} of this run's 12 steps" in caplog.text
        assert ("set logging_strategy='steps' and logging_steps=1" in caplog.text) == (logging_steps == "epoch")


def test_under_evaluation_timeout_s_the_trainers_evaluation_runs_on_a_replica_never_the_training_model(tmp_path):
    """A probe: a timed-out evaluation went on running forward passes on trainer.model in its daemon thread, in
    train mode once HF switched it back, its dropout drawing from the training's generator: two runs of one seed
    diverged from the step after it.  Under evaluation.timeout_s (one process) the evaluation runs on a copy of the
    weights of its step, as asynchronously; the training model sees no forward pass from an evaluation thread."""
    import threading

    calls = []
    release = threading.Event()

    def slow(pred):
        release.wait(5)  # (the first evaluation times out and runs on after the step stopped waiting)
        return accuracy(pred)

    torch.manual_seed(0)
    model = Tiny()
    model.register_forward_pre_hook(lambda m, a: calls.append((threading.current_thread().name, m is model)))
    cb = AdaptiveEvalCallback("default", overrides=FAST + ["evaluation.timeout_s=0.2", "trigger.freq_steps=4"])
    trainer = Trainer(model, make_args(tmp_path, max_steps=12), train_dataset=Points(400, 0),
                      eval_dataset=Points(100, 1), compute_metrics=slow, callbacks=[cb])
    trainer.train()
    release.set()
    for t in threading.enumerate():  # (a thread in torch code at interpreter exit aborts it)
        if t.name.startswith("adaptive_eval"):
            t.join(10)
    evaluating = [live for name, live in calls if name.startswith("adaptive_eval")]
    assert evaluating and not any(evaluating)  # forward passes of the evaluation, none on the training model
    assert cb.evaluator.summary()["eval_errors"] >= 1  # (the one that timed out)


def test_a_process_pool_for_the_trainers_own_evaluation_is_refused_at_construction():
    """A probe: accepted, then every evaluation of the run failed on "cannot pickle 'weakref.ReferenceType'
    object" (the replica does not travel to another process); with an evaluate_fn= of the user's it is fine."""
    import concurrent.futures as cf

    from adaptive_eval.integrations.lightning import AdaptiveEvalCallback as LightningCallback

    pool = cf.ProcessPoolExecutor(1)
    try:
        for callback in (AdaptiveEvalCallback, LightningCallback):
            with pytest.raises(TypeError, match=r"executor is a ProcessPoolExecutor: the trainer's own evaluation runs "
                                                r"on a replica .* \(thread executors only\)"):
                callback("default", executor=pool)
            assert callback("default", evaluate_fn=lambda: {"acc": 1.0}, executor=pool).executor is pool
    finally:
        pool.shutdown()


def test_under_evaluation_timeout_s_a_module_that_cannot_be_copied_is_evaluated_itself_said_once(tmp_path, caplog):
    """A review: the replica under evaluation.timeout_s made every evaluation fail for a model holding a lock
    (2 results before, none after).  It evaluates the training module itself, as without the timeout, said once."""
    import threading

    torch.manual_seed(0)
    model = Tiny()
    model.lock = threading.Lock()  # (what deepcopy cannot copy)
    cb = AdaptiveEvalCallback("default", overrides=FAST + ["evaluation.timeout_s=60", "trigger.freq_steps=4"])
    trainer = Trainer(model, make_args(tmp_path, max_steps=12), train_dataset=Points(400, 0),
                      eval_dataset=Points(100, 1), compute_metrics=accuracy, callbacks=[cb])
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        trainer.train()
    summary = cb.evaluator.summary()
    assert summary["evals"] >= 2 and summary["eval_errors"] == 0
    assert sum("the module cannot be copied for the evaluation's replica (TypeError" in m
               for m in caplog.messages) == 1


def test_the_second_of_two_callbacks_evaluates_an_alarms_step_as_the_first_does(tmp_path):
    """A probe (TRL, two named callbacks): the first one's result, logged from its on_log, re-entered every callback's
    on_log, and the second decided its pending step there, before that step's logged values: its NaN alarm's
    evaluation came a step late, on the next step's weights.  A logged stream (TRL's reward) goes NaN at step 6."""
    class Logging(Trainer):
        def log(self, logs, *args, **kwargs):
            if "loss" in logs:
                logs = {**logs, "reward": math.nan if self.state.global_step - 1 >= 6 else 0.5}
            return super().log(logs, *args, **kwargs)

    over = FAST + ["trigger.freq_steps=100"]
    torch.manual_seed(0)
    a = AdaptiveEvalCallback("default", overrides=over, eval_dataset=Points(40, 1), name="a")
    b = AdaptiveEvalCallback("default", overrides=over, eval_dataset=Points(40, 2), name="b")
    trainer = Logging(Tiny(), make_args(tmp_path, max_steps=10, logging_steps=1), train_dataset=Points(400, 0),
                      compute_metrics=accuracy, callbacks=[a, b])
    trainer.train()
    for cb in (a, b):
        assert [(r.step, r.reason) for r in cb.evaluator.history][:1] == [(6, "alarm:train/reward:nonfinite")]


def test_two_named_callbacks_on_two_eval_sets_log_two_series(tmp_path, monkeypatch):
    """A probe: two callbacks, each with its eval_dataset=, logged both sets' results as one eval/accuracy series in
    HF's TensorBoard and log_history (the Lightning adapter has name= for this).  With name= each is
    eval_<name>_<metric>, and each evaluator's own file is a run of its own under HF's folder."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "tb"))
    torch.manual_seed(0)
    a = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=4"], eval_dataset=Points(40, 1),
                             name="easy")
    b = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=5"], eval_dataset=Points(40, 2),
                             name="hard")
    trainer = Trainer(Tiny(), make_args(tmp_path / "out", max_steps=12, report_to=["tensorboard"]),
                      train_dataset=Points(400, 0), compute_metrics=accuracy, callbacks=[a, b])
    trainer.train()
    logged = {k for entry in trainer.state.log_history for k in entry}
    assert {"eval_easy_accuracy", "eval_hard_accuracy", "eval_easy_adaptive_step"} <= logged
    assert "eval_accuracy" not in logged
    steps = {name: [e["eval_" + name + "_adaptive_step"] for e in trainer.state.log_history
                    if "eval_" + name + "_adaptive_step" in e] for name in ("easy", "hard")}
    assert steps == {"easy": [r.step for r in a.evaluator.history], "hard": [r.step for r in b.evaluator.history]}
    hf = EventAccumulator(str(tmp_path / "tb"))
    hf.Reload()
    assert {"eval/easy_accuracy", "eval/hard_accuracy"} <= set(hf.Tags()["scalars"])
    for name, cb in (("easy", a), ("hard", b)):
        own = EventAccumulator(str(tmp_path / "tb" / name))
        own.Reload()
        assert [e.step for e in own.Scalars("eval/eval_accuracy")] == [r.step for r in cb.evaluator.history]
    assert a.state()["args"]["name"] == "easy"
    with pytest.raises(TypeError, match="name must be a non-empty string"):
        AdaptiveEvalCallback("default", name="")


@pytest.mark.parametrize("fails", [False, True])
def test_two_asynchronous_results_integrated_at_one_step_both_reach_the_trainers_log(tmp_path, fails):
    """A soak probe: with evaluations in flight side by side, a slow one and a later fast one came back together and
    were integrated at one step; evaluate() returns one, and only that one reached trainer.log (log_history, HF's
    TensorBoard, W&B): the other was in the evaluator's history alone.  Step 1's evaluation waits for step 3's; a
    callback before ours waits, with both in flight, until both are done.  ``fails``: step 3's fails under
    on_error: raise, which goes up at the step they are integrated: step 1's was lost to trainer.log (a review)."""
    from conftest import step_one_after_step_three

    cb = AdaptiveEvalCallback("default", evaluate_fn=step_one_after_step_three(fails), overrides=[
        "evaluation.asynchronous=true", "evaluation.max_in_flight=2", "trigger.freq_steps=2",
        "policy.budget.enabled=false", "policy.interval.enabled=false",
        f"evaluation.on_error={'raise' if fails else 'skip'}"])

    class BothDone(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            jobs = cb.evaluator._async.jobs
            if len(jobs) == 2:
                for job in jobs:
                    job.future.exception(30)

    torch.manual_seed(0)
    trainer = Trainer(Tiny(), make_args(tmp_path, max_steps=8, logging_steps=1), train_dataset=Points(400, 0),
                      callbacks=[BothDone(), cb])
    if fails:
        with pytest.raises(RuntimeError, match="grader down"):
            trainer.train()
    else:
        trainer.train()
    history = [(r.step, r.integrated_step) for r in cb.evaluator.history]
    assert history[:2] == ([(1, 4)] if fails else [(1, 4), (3, 4)])  # integrated at one step
    logged = [(int(h["eval_adaptive_step"]), h["step"] - 1) for h in trainer.state.log_history
              if "eval_adaptive_step" in h]
    assert logged == history


def test_a_result_reported_at_train_end_leaves_no_tensorboard_writer_open(tmp_path, monkeypatch):
    """A soak probe: the final asynchronous result, reported in on_train_end through trainer.log, reached HF's
    TensorBoardCallback after its on_train_end had closed its writer: its on_log opened a new one, which nothing
    closed (its writer thread alive after train()).  Closed again; the result is on disk."""
    import threading

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "tb"))
    before = set(threading.enumerate())
    cb = AdaptiveEvalCallback("default", evaluate_fn=lambda r: {"acc": [1.0, 0.0]},
                              overrides=["evaluation.asynchronous=true", "evaluation.async_integrate_after_steps=50"])
    trainer = Trainer(Tiny(), make_args(tmp_path / "out", max_steps=12, report_to=["tensorboard"]),
                      train_dataset=Points(400, 0), callbacks=[cb])
    trainer.train()
    left = [t for t in set(threading.enumerate()) - before if t.is_alive()]
    assert not left, left
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    assert [e.value for e in acc.Scalars("eval/adaptive_step")][-1] == 11  # the final one, drained at train end

"""The Lightning adapter on a real lightning.Trainer (CPU; BoringModel-based; two gloo ranks with ddp_spawn)."""

import collections
import csv
import dataclasses
import datetime
import json
import logging
import math
import os
import pickle
from types import SimpleNamespace

import pytest

L = pytest.importorskip("lightning")

import torch  # noqa: E402
from lightning.pytorch.callbacks import Callback, ModelCheckpoint  # noqa: E402
from lightning.pytorch.demos.boring_classes import BoringModel, RandomDataset  # noqa: E402
from lightning.pytorch.strategies import DDPStrategy  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from adaptive_eval import EvalRequest  # noqa: E402
from adaptive_eval.integrations.lightning import AdaptiveEvalCallback  # noqa: E402

FAST = ["policy.sample_size.initial=32", "policy.sample_size.min=16", "policy.sample_size.max=48",
        "policy.peak.confirm_size=0", "policy.budget.enabled=false"]
QUIET = dict(enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", limit_val_batches=0)


class Model(BoringModel):
    train_target = 1.0  # the fault moves it; validation always scores against 1

    def step(self, batch, target=1.0):
        out = self(batch)
        return torch.nn.functional.mse_loss(out, torch.full_like(out, target))

    def training_step(self, batch, batch_idx):
        loss = self.step(batch, self.train_target)
        self.log("train_loss", loss)
        return {"loss": loss}

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self.step(batch))


class DataFault(Callback):
    """The injected fault: from one step on, the training targets are wrong (-1 instead of 1: a broken label
    pipeline); the model drifts away from what validation measures."""

    def __init__(self, at):
        self.at = at

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == self.at:
            pl_module.train_target = -1.0


def loaders(seed=0, n_train=640, n_val=200):
    torch.manual_seed(seed)
    return DataLoader(RandomDataset(32, n_train), batch_size=4), DataLoader(RandomDataset(32, n_val), batch_size=4)


class StageModel(Model):
    """Records the trainer's stage in each validation_step call (what the README tells accumulating steps to check)."""

    def __init__(self):
        super().__init__()
        self.stages = collections.Counter()  # (not a list: what the adapter's calls append to a list is removed)

    def validation_step(self, batch, batch_idx):
        self.stages[(self.trainer.validating, self.trainer.training)] += 1
        super().validation_step(batch, batch_idx)


def test_a_lightning_run_catches_the_fault_evaluates_the_final_weights_and_logs_to_the_trainers_logger(tmp_path):
    from lightning.pytorch.loggers import CSVLogger

    train, val = loaders()
    torch.manual_seed(0)
    model = StageModel()
    cb = AdaptiveEvalCallback("default", overrides=FAST)
    trainer = L.Trainer(max_steps=70, logger=CSVLogger(tmp_path, name="run"), enable_checkpointing=False,
                        log_every_n_steps=5, callbacks=[cb, DataFault(35)], **QUIET)
    trainer.fit(model, train, val)
    ev = cb.evaluator
    assert cb.hooks_called == {"on_train_start", "on_train_epoch_start", "on_train_batch_end", "on_train_epoch_end",
                               "on_train_end"}
    alarms = [r for r in ev.history if r.reason.startswith("alarm:")]
    assert alarms and 35 <= alarms[0].step <= 35 + 25, [(r.step, r.reason) for r in ev.history]
    before = [r for r in ev.history if r.step < 35][-1]
    assert alarms[0]["val_loss"].ci[0] > before["val_loss"].ci[1]  # the damage shows in the eval, confirmed
    last = ev.history[-1]
    assert (last.step, last.reason) == (69, "trigger:final")
    idx = EvalRequest(step=69, sample_size=last.sample_size, seed=0, reason="").indices(len(val.dataset))
    with torch.no_grad():
        per_item = [float(model.step(val.dataset[i][None])) for i in idx]  # the final weights, item by item
    assert last["val_loss"].n == len(idx) and last["val_loss"].mean == pytest.approx(sum(per_item) / len(idx))
    assert math.isfinite(last["val_loss"].ci[0]) and not last["val_loss"].binary
    # logged through the trainer's logger, at the trainer's own step axis, once per evaluation
    with open(next(tmp_path.glob("run/*/metrics.csv"))) as f:
        rows = list(csv.DictReader(f))
    evals = [r for r in rows if r.get("adaptive_eval/val_loss")]
    # Lightning's axis here is _batches_that_stepped = global_step - 1: adaptive_eval's 0-based step, the step at
    # which the module's own self.log values of that batch are written too
    assert [int(r["step"]) for r in evals] == [r.step for r in ev.history]
    train_steps = {int(r["step"]) for r in rows if r.get("train_loss")}
    assert train_steps == set(range(4, 70, 5))
    assert float(evals[-1]["adaptive_eval/val_loss"]) == pytest.approx(last["val_loss"].mean)
    assert float(evals[-1]["adaptive_eval/val_loss_n"]) == len(idx)
    # the adapter's validation_step calls run inside training: a step that accumulates outputs for
    # on_validation_epoch_end can leave them out by checking self.trainer.validating
    assert sum(model.stages.values()) == sum(r.sample_size for r in ev.history)
    assert set(model.stages) == {(False, True)}


def test_a_resumed_fit_makes_the_decisions_of_the_uninterrupted_run(tmp_path, caplog):
    def run(ckpt_path=None, max_steps=40, extra=()):
        train, val = loaders(n_train=80, n_val=100)  # 20 optimizer steps per epoch
        torch.manual_seed(1)
        cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=6", *extra])
        saver = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_epochs=1, save_top_k=-1)
        trainer = L.Trainer(max_steps=max_steps, logger=False, callbacks=[cb, saver], **QUIET)
        trainer.fit(Model(), train, val, ckpt_path=ckpt_path)
        run.cb = cb
        return [(r.step, r.reason, r.sample_size, round(r.mean("val_loss"), 6)) for r in cb.evaluator.history]

    full = run()
    (first,) = [p for p in (tmp_path / "ckpt").iterdir() if "step=20" in p.name]
    state = torch.load(first, weights_only=True)  # plain values only: loads without unpickling code
    assert any("AdaptiveEvalCallback" in k for k in state["callbacks"])
    resumed = run(ckpt_path=str(first))
    # The same decisions (step, why, how many items); the values measured before the checkpoint come back from
    # the saved state.  (Lightning's resumed training itself is not bit-identical after an epoch-end checkpoint:
    # later losses differ in the third decimal, which changes no decision here.)
    assert [r[:3] for r in resumed] == [r[:3] for r in full]
    assert [r for r in resumed if r[0] < 20] == [r for r in full if r[0] < 20]
    assert len(full) >= 4 and full[-1][:2] == (39, "trigger:final")
    # a state that does not load into the config (other detectors) is said, and the run goes on afresh, watched (it
    # escaped the set-up half done; a probe of the HF adapter, whose loss then went unwatched)
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        afresh = run(ckpt_path=str(first), extra=["streams.default=[{type: page_hinkley}]"])
    assert "does not load into this config, so the evaluator starts afresh at step 20" in caplog.text
    assert afresh[-1][:2] == (39, "trigger:final") and "train/loss" in run.cb.evaluator.state_dict()["detectors"]


class RecordingCallback(AdaptiveEvalCallback):
    """Records what each rank was asked to score and what it got back (written by each spawned rank)."""

    def __init__(self, out, **kw):
        super().__init__("default", **kw)
        self.out, self.seen = str(out), []

    def evaluate_with_module(self, trainer, pl_module, request):
        self.seen.append([request.step, request.indices(200), pl_module is not trainer.lightning_module])
        return super().evaluate_with_module(trainer, pl_module, request)

    def on_train_end(self, trainer, pl_module):
        super().on_train_end(trainer, pl_module)
        history = [[r.step, r.reason, r.items, r.mean("val_loss"), list(r["val_loss"].ci)]
                   + ([r.mean("val_mse"), r["val_mse"].n] if "val_mse" in r.metrics else [])
                   for r in self.evaluator.history]
        with open(f"{self.out}/rank{trainer.global_rank}.json", "w") as f:
            json.dump({"history": history, "seen": self.seen, "world": self.evaluator._world}, f)


class RankSkewedModel(Model):
    def __init__(self):
        super().__init__()
        import torchmetrics

        # synced across ranks at every forward: the adapter's per-item calls must not (shards of different sizes,
        # and an asynchronous replica's worker thread beside training's collectives, would wait in an all-gather)
        self.val_mse = torchmetrics.MeanSquaredError(dist_sync_on_step=True)

    def validation_step(self, batch, batch_idx):
        out = self(batch)
        self.log("val_loss", torch.nn.functional.mse_loss(out, torch.ones_like(out)))
        self.val_mse(out, torch.ones_like(out))
        self.log("val_mse", self.val_mse)

    def training_step(self, batch, batch_idx):
        loss = self.step(batch, self.train_target)
        if self.global_rank == 1 and self.global_step >= 25:  # only rank 1's stream goes bad
            loss = loss * 0 + 40.0 + loss
        self.log("train_loss", loss)  # (the module's own loss: the loss stream observed)
        return {"loss": loss}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_two_gloo_ranks_score_each_item_once_and_agree(tmp_path, mode):
    """Asynchronous too: each spawned rank scores its shard on a replica in its worker thread while it trains,
    and both integrate each result 3 steps later (evaluation.asynchronous in the config: ddp_spawn pickles
    the callback, so no pool is passed)."""
    extra = ["evaluation.asynchronous=true", "evaluation.async_integrate_after_steps=3"] if mode == "async" else []
    train, val = loaders(n_train=320, n_val=200)
    odd = ["policy.sample_size.initial=47", "policy.sample_size.min=47", "policy.sample_size.max=47"]  # 24 + 23
    cb = RecordingCallback(tmp_path, overrides=FAST + odd + extra)
    # ddp_spawn with a 2-minute collective timeout instead of 30: a collective one rank never joins fails the test
    spawn = DDPStrategy(start_method="spawn", timeout=datetime.timedelta(seconds=120))
    trainer = L.Trainer(max_steps=40, strategy=spawn, devices=2, num_nodes=1, logger=False,
                        enable_checkpointing=False, callbacks=[cb], **QUIET)
    trainer.fit(RankSkewedModel(), train, val)
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0["world"] == r1["world"] == 2
    assert r0["history"] == r1["history"] and len(r0["history"]) >= 3  # identical results on both ranks
    assert any(h[1].startswith("alarm:train_loss") for h in r0["history"])  # rank 1's alarm moved both
    seen0, seen1 = ({s: idx for s, idx, _ in r["seen"]} for r in (r0, r1))
    # asynchronous: every evaluation ran on a replica of the module, never on the one training
    assert {replica for r in (r0, r1) for _, _, replica in r["seen"]} == {mode == "async"}
    if mode == "sync":
        assert [s for s, *_ in r0["seen"]] == [h[0] for h in r0["history"]] == [s for s, *_ in r1["seen"]]
    else:  # (an evaluation cancelled by the urgent final one may have run, and is not in the history)
        assert r0["history"][-1][:2] == [39, "trigger:final"]
    for h in r0["history"]:
        step, mine, theirs = h[0], seen0[h[0]], seen1[h[0]]
        assert not set(mine) & set(theirs)  # each item scored once
        assert sorted(mine + theirs) == sorted(EvalRequest(step=step, sample_size=h[2], seed=0,
                                                           reason="").indices(200))
        assert h[2] == len(mine) + len(theirs)
        # the torchmetrics metric (dist_sync_on_step=True), computed over each rank's shard and combined: the MSE of
        # all the items, which is the mean of their per-item losses (each item has 2 outputs)
        assert h[6] == h[2] and h[5] == pytest.approx(h[3], rel=1e-5)
    assert any(len(seen0[h[0]]) != len(seen1[h[0]]) for h in r0["history"])  # (shards of different sizes)


class StateRecording(AdaptiveEvalCallback):
    """Each spawned rank's own state at every checkpoint, and the state it resumed with."""

    def __init__(self, out, tag, **kw):
        super().__init__("default", **kw)
        self.out, self.tag, self.saved, self.resumed_with = str(out), tag, {}, []

    def on_train_start(self, trainer, pl_module):
        super().on_train_start(trainer, pl_module)
        if trainer.global_step > 0:
            self.resumed_with.append(json.dumps(self.evaluator.state_dict(), sort_keys=True))

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        self.saved[trainer.global_step] = json.dumps(self.evaluator.state_dict(), sort_keys=True)

    def on_train_end(self, trainer, pl_module):
        super().on_train_end(trainer, pl_module)
        history = [[r.step, r.reason, r.items] for r in self.evaluator.history]
        with open(f"{self.out}/{self.tag}{trainer.global_rank}.json", "w") as f:
            json.dump({"history": history, "saved": self.saved, "resumed_with": self.resumed_with}, f)


def test_under_ddp_every_rank_resumes_its_own_detectors(tmp_path):
    """Lightning writes global rank zero's checkpoint; each rank's detectors saw its own losses, so the checkpoint
    holds every rank's state (gathered while Lightning dumps it on all ranks) and each rank resumes its own."""
    def run(tag, ckpt_path=None):
        train, val = loaders(n_train=160, n_val=100)  # 20 optimizer steps per epoch on each of 2 ranks
        cb = StateRecording(tmp_path, tag, overrides=FAST + ["trigger.freq_steps=6"])
        saver = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_epochs=1, save_top_k=-1)
        trainer = L.Trainer(max_steps=40, strategy="ddp_spawn", devices=2, num_nodes=1, logger=False,
                            callbacks=[cb, saver], **QUIET)
        trainer.fit(Model(), train, val, ckpt_path=ckpt_path)
        return [json.loads((tmp_path / f"{tag}{r}.json").read_text()) for r in (0, 1)]

    full = run("full")
    (first,) = [p for p in (tmp_path / "ckpt").iterdir() if "step=20" in p.name]
    at_20 = [r["saved"]["20"] for r in full]
    assert at_20[0] != at_20[1]  # the ranks' detectors differ: a rank resumed with the other's would show
    (stored,) = [v for k, v in torch.load(first, weights_only=True)["callbacks"].items() if "StateRecording" in k]
    assert [json.dumps(s, sort_keys=True) for s in stored["ranks"]] == at_20
    resumed = run("resumed", ckpt_path=str(first))
    assert [r["resumed_with"] for r in resumed] == [[at_20[0]], [at_20[1]]]
    assert resumed[0]["history"] == resumed[1]["history"]
    assert [h[:2] for h in resumed[0]["history"]] == [h[:2] for h in full[0]["history"]]


def test_rank_branches_state_and_skipped_runs(caplog):
    calls = []

    def evaluate_fn(request):
        calls.append(request.step)
        return {"score": [1.0]}

    cb = AdaptiveEvalCallback("areal", evaluate_fn, overrides=["trigger.freq_steps=2"])
    assert cb.state_dict() == {"evaluator": None}  # before training: plain, no evaluator yet
    trainer = SimpleNamespace(sanity_checking=False, state=SimpleNamespace(fn="fit"), estimated_stepping_batches=8,
                              num_training_batches=8, accumulate_grad_batches=2, global_step=0, is_global_zero=False,
                              callback_metrics={"train_loss": torch.tensor(0.5), "val_acc": torch.tensor(1.0)},
                              loggers=[], fit_loop=SimpleNamespace(epoch_loop=SimpleNamespace(_batches_that_stepped=0)))
    cb.on_train_start(trainer, None)
    assert cb.evaluator.steps_per_epoch == 4 and cb.evaluator.total_steps == 8
    for micro in range(16):  # accumulation 2: on_train_batch_end fires twice per optimizer step
        trainer.global_step = (micro + 1) // 2
        trainer.callback_metrics["train_loss"] = torch.tensor(0.5 + micro)  # logged anew by each micro-batch
        cb.on_train_batch_end(trainer, None, {"loss": torch.tensor(1.0)}, None, micro)
    assert calls == [1, 3, 5, 7]  # once per optimizer step, on a rank that is not global zero too
    # outputs["loss"] and what the module logged (a train_loss that is not the step's loss does not take its
    # place); not validation keys (val_acc)
    assert set(cb.evaluator._detectors) == {"train/loss", "train_loss"}
    assert cb.evaluator._last_step == 7
    with caplog.at_level(logging.INFO, logger="adaptive_eval"):
        cb.on_train_end(trainer, None)
    assert not any("evaluations" in r.message for r in caplog.records)  # the summary: global zero only
    saved = json.loads(json.dumps(cb.state_dict()))
    again = AdaptiveEvalCallback("areal", evaluate_fn, overrides=["trigger.freq_steps=2"])
    again.load_state_dict(saved)
    trainer.global_step = 8
    again.on_train_start(trainer, None)
    assert again.evaluator.state_dict()["last_call_step"] == 7
    skipped = AdaptiveEvalCallback("areal")
    skipped.on_train_start(SimpleNamespace(sanity_checking=False, state=SimpleNamespace(fn="validate")), None)
    assert skipped.evaluator is None  # not a fit: nothing to do


class Weights(Callback):
    """The module's weights after each optimizer step, by adaptive_eval's 0-based step."""

    def __init__(self):
        self.at = {}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.at[trainer.global_step - 1] = {k: v.detach().clone() for k, v in pl_module.state_dict().items()}


@pytest.mark.parametrize("executor", ["thread", "deferred"])
def test_asynchronous_evaluation_through_the_module_runs_on_the_weights_of_its_step_while_training_goes_on(
        tmp_path, executor):
    """On a real thread pool, and on an executor that runs each evaluation only at its integration, 3 steps
    later (so an evaluation of the live module would see later weights, every time)."""
    from concurrent.futures import ThreadPoolExecutor

    from lightning.pytorch.loggers import CSVLogger

    from conftest import DeferredExecutor

    train, val = loaders(n_train=160, n_val=100)
    torch.manual_seed(1)
    weights = Weights()
    with ThreadPoolExecutor(1) if executor == "thread" else DeferredExecutor() as pool:
        cb = AdaptiveEvalCallback("default", executor=pool,  # executor= turns evaluation.asynchronous on
                                  overrides=FAST + ["trigger.freq_steps=6", "evaluation.async_integrate_after_steps=3"])
        logger = CSVLogger(tmp_path, name="csv")
        trainer = L.Trainer(max_steps=30, logger=logger, log_every_n_steps=5, callbacks=[weights, cb],
                            enable_checkpointing=False, **QUIET)
        model = Model()
        trainer.fit(model, train, val)
    history = cb.evaluator.history
    assert len(history) >= 3 and (history[-1].step, history[-1].reason) == (29, "trigger:final")
    # integrated 3 steps after submission while training went on; the final one waited for at train end
    assert [r.integrated_step for r in history] == [min(r.step + 3, 29) for r in history]
    # the evaluation of the weights of its step (per item: the mean of validation_step's per-item val_loss)
    check = Model()
    for r in history:
        check.load_state_dict(weights.at[r.step])
        idx = EvalRequest(step=r.step, sample_size=r.sample_size, seed=0, reason="").indices(100)
        with torch.no_grad():
            losses = [float(check.step(val.dataset[i][None])) for i in idx]
        assert r["val_loss"].mean == pytest.approx(sum(losses) / len(losses), rel=1e-6), r.step
    assert model.training  # the worker evaluated a replica; the live module was never put in eval mode
    # every result reached the trainer's logger, the final one included, with the step of its weights
    with open(logger.log_dir + "/metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("adaptive_eval/step")]
    assert [int(float(r["adaptive_eval/step"])) for r in rows] == [r.step for r in history]


def test_a_checkpoint_from_another_number_of_ranks_resumes_with_rank_zeros_state_and_says_so(caplog):
    from adaptive_eval import AdaptiveEvaluator, load_config

    cb = AdaptiveEvalCallback("default")
    cb.evaluator = AdaptiveEvaluator.from_config(load_config("default"))  # one process: rank 0 of 1
    zero = {"who": "zero"}
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        assert cb._own_state(zero, None) == zero and cb._own_state(zero, [{"who": "mine"}]) == {"who": "mine"}
    assert caplog.text == ""
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        assert cb._own_state(zero, [{"who": "a"}, {"who": "b"}]) == zero
    assert "holds the states of 2 ranks, this run has 1: rank 0 resumes with rank zero's" in caplog.text


def test_a_sharded_module_is_evaluated_with_every_rank_in_step(tmp_path):
    """FSDP2 over gloo (tests/lightning_fsdp_script.py, torchrun): shards of 5 and 1 items differ by one, and each
    rank's per-item losses on the sharded module equal the unsharded module's on its own items; without the
    padding forward the rank with more items waits in an all-gather the other never joins (timeout: a failure).
    A tensor-parallel module is refused (a ValueError naming it), not evaluated blended."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("torch.distributed.fsdp")
    script = Path(__file__).with_name("lightning_fsdp_script.py")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(script), str(tmp_path)], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-4000:]
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    for r, sizes in ((r0, {"5": 3, "1": 1}), (r1, {"5": 2, "1": 0})):
        for size, n in sizes.items():
            sharded, plain = r[size]
            assert sharded == plain and len(plain) == n
        assert "tensor-parallel" in r["tp"]  # refused: its ranks would blend their different items


class StopAt(Callback):
    """Stops training at a step, as EarlyStopping does (trainer.should_stop)."""

    def __init__(self, at):
        self.at = at

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step >= self.at:
            trainer.should_stop = True


def test_a_run_stopped_early_evaluates_its_last_weights():
    """trigger:final fired only at the planned last step: a run stopped at step 40 of 200 (EarlyStopping)
    ended with its last evaluation well before its last weights."""
    train, val = loaders()
    torch.manual_seed(0)
    cb = AdaptiveEvalCallback("default", overrides=FAST)
    trainer = L.Trainer(max_steps=200, logger=False, enable_checkpointing=False, callbacks=[cb, StopAt(40)], **QUIET)
    trainer.fit(Model(), train, val)
    assert trainer.global_step == 40
    last = cb.evaluator.history[-1]
    assert (last.step, last.reason) == (39, "trigger:final") and cb.evaluator.summary()["eval_errors"] == 0
    assert last.epoch == 39 // len(train) == 0  # (it was None; a probe; Lightning's current_epoch reads 1 once stopped)
    # A callback used in a fit pickles, as ddp_spawn pickles it for a later fit (it failed at that launch: the
    # listener close() was given, the fit's thread; a multi-process probe), its evaluator's results with it
    again = pickle.loads(pickle.dumps(cb))
    assert [r.step for r in again.evaluator.history] == [r.step for r in cb.evaluator.history]


SEEN_STEPS = []  # (not on the module: an asynchronous replica is a copy of it)


class AccModel(Model):
    """Logs its loss first and an accuracy-like score second, and reads the trainer in validation_step."""

    def validation_step(self, batch, batch_idx):
        assert not self.trainer.validating  # the README's guard for accumulating steps
        SEEN_STEPS.append(self.global_step)
        loss = self.step(batch)
        self.log("val_loss", loss)
        self.log("val_score", (loss < 1.0).float())


@pytest.mark.parametrize("asynchronous", [False, True])
def test_the_tracked_metric_is_not_the_loss_and_an_asynchronous_replica_sees_the_trainer(asynchronous):
    """With evaluation.metric null the first logged metric (val_loss) was tracked as higher-is-better; and the
    asynchronous replica was detached: self.trainer raised in every evaluation (evals 0, eval_errors 4) and
    self.global_step read 0."""
    from concurrent.futures import ThreadPoolExecutor

    train, val = loaders()
    torch.manual_seed(0)
    model = AccModel()
    SEEN_STEPS.clear()
    pool = ThreadPoolExecutor(1) if asynchronous else None
    cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=10"], executor=pool)
    trainer = L.Trainer(max_steps=40, logger=False, enable_checkpointing=False, callbacks=[cb], **QUIET)
    try:
        trainer.fit(model, train, val)
    finally:
        if pool is not None:
            pool.shutdown()
    s = cb.evaluator.summary()
    assert s["evals"] >= 2 and s["eval_errors"] == 0
    assert list(cb.evaluator.history[-1].metrics)[0] == "val_score"  # tracked, not val_loss
    assert SEEN_STEPS and max(SEEN_STEPS) > 0  # the trainer's step, not 0 on a detached replica


def test_with_the_metric_null_a_checkpoint_monitors_key_and_mode_are_tracked(tmp_path, caplog):
    """A new user's probe: beside ModelCheckpoint(monitor="val_loss", mode="min") the adapter tracked val_loss as
    higher-is-better (said in a warning); the HF adapter reads metric_for_best_model so."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    train, val = loaders()
    torch.manual_seed(0)
    cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=10"])
    ckpt = ModelCheckpoint(dirpath=tmp_path, monitor="val_loss", mode="min")
    with caplog.at_level("WARNING", logger="adaptive_eval"):
        L.Trainer(max_steps=20, logger=False, callbacks=[cb, ckpt], **{**QUIET, "limit_val_batches": 2}).fit(
            AccModel(), train, val)
    evaluation = cb.evaluator.cfg.evaluation
    assert (evaluation.metric, evaluation.higher_is_better) == ("val_loss", False)
    assert cb.evaluator.summary()["evals"] >= 2 and "higher-is-better" not in caplog.text
    # a monitor of a training key ("step": keep the latest) is no evaluation's metric: not taken (a review)
    cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=10"])
    ckpt = ModelCheckpoint(dirpath=tmp_path / "latest", monitor="step", mode="max")
    L.Trainer(max_steps=20, logger=False, callbacks=[cb, ckpt], **{**QUIET, "limit_val_batches": 2}).fit(
        AccModel(), train, val)
    assert list(cb.evaluator.history[-1].metrics)[0] == "val_score" and cb.evaluator.cfg.evaluation.metric is None


class Observing(AdaptiveEvalCallback):
    """Records every observe call: {stream: [(step, value), ...]}."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.observed = {}

    def on_train_start(self, trainer, pl_module):
        super().on_train_start(trainer, pl_module)
        observe = self.evaluator.observe

        def recording(values, step):
            for k, v in values.items():
                self.observed.setdefault(k, []).append((step, v))
            return observe(values, step)

        self.evaluator.observe = recording


class SparseLogModel(Model):
    """Logs a stationary noise every 10 steps (1 + 0.05 N(0,1)), a loss-free score with on_step and on_epoch, and an
    epoch-only aggregate; records what it logged, by adaptive_eval's 0-based step."""

    def __init__(self):
        super().__init__()
        self.logged = {"grad_scale": [], "score": []}
        self.noise = torch.Generator().manual_seed(0)

    def training_step(self, batch, batch_idx):
        loss = self.step(batch)
        if self.global_step % 10 == 0:
            v = 1.0 + 0.05 * float(torch.randn(1, generator=self.noise))
            self.log("grad_scale", v)
            self.logged["grad_scale"].append((self.global_step, v))
        score = float(torch.rand(1, generator=self.noise))
        self.log("score", score, on_step=True, on_epoch=True)
        self.logged["score"].append((self.global_step, score))
        self.log("weight_norm", self.layer.weight.norm(), on_step=False, on_epoch=True)
        return {"loss": loss}


class RLKeysModel(Model):
    """Logs PPO-style training keys that begin with the letters of a validation prefix, and a real validation key."""

    def training_step(self, batch, batch_idx):
        loss = self.step(batch)
        self.log_dict({"value_loss": loss.detach() * 2, "validity_rate": 0.5, "evaluator_score": 1.0,
                       "val_loss": loss.detach(), "Validation/acc": 0.5, "testing_loss": 1.0})
        return {"loss": loss}


def test_training_keys_that_begin_like_validation_keys_are_watched():
    """value_loss (PPO's critic loss) and validity_rate were never watched: a bare startswith("val") took them
    for validation keys, so a NaN value loss raised no alarm (found by a new-user probe).  val_loss is still not."""
    train, _ = loaders()
    torch.manual_seed(0)
    cb = Observing("default", evaluate_fn=lambda: {"score": [1.0]}, overrides=["trigger.freq_steps=1000"])
    L.Trainer(max_steps=6, logger=False, enable_checkpointing=False, callbacks=[cb], **QUIET).fit(RLKeysModel(), train)
    assert {"value_loss", "validity_rate", "evaluator_score"} <= set(cb.observed)
    assert [s for s, _ in cb.observed["value_loss"]] == list(range(6))
    assert not {"val_loss", "Validation/acc", "testing_loss"} & set(cb.observed)


def test_a_logged_metric_is_observed_once_per_value_it_was_logged_with():
    """Lightning keeps a key's last value in callback_metrics until it is logged again: a metric logged every 10
    steps was observed at every step, 10 times per real value (3 CUSUM alarms from 30 values of stationary noise in
    the user's run).  Also: name and name_step (on_step and on_epoch) are one value, and an epoch aggregate is not a
    step's value."""
    train, _ = loaders(n_train=100)  # 25 steps per epoch: two epoch boundaries in 60 steps
    torch.manual_seed(0)
    model = SparseLogModel()
    cb = Observing("default", evaluate_fn=lambda: {"score": [1.0]}, overrides=["trigger.freq_steps=1000"])
    trainer = L.Trainer(max_steps=60, logger=False, enable_checkpointing=False, callbacks=[cb], **QUIET)
    trainer.fit(model, train)
    assert trainer.current_epoch >= 2
    f32 = lambda pairs: [(s, pytest.approx(v, rel=1e-6)) for s, v in pairs]  # noqa: E731 - logged as float32
    assert cb.observed["grad_scale"] == f32(model.logged["grad_scale"])  # 6 values, each once, at its step
    assert len(cb.observed["grad_scale"]) == 6
    assert cb.observed["score"] == f32(model.logged["score"])  # every step, once
    assert "score_step" not in cb.observed and "weight_norm" not in cb.observed
    assert cb.hooks_called == {"on_train_start", "on_train_epoch_start", "on_train_batch_end", "on_train_epoch_end",
                               "on_train_end"}


class LoggedLossModel(Model):
    """Logs its loss in one of several ways; records each micro-batch's (unscaled) loss by optimizer step."""

    def __init__(self, how):
        super().__init__()
        self.how, self.losses = how, {}

    def training_step(self, batch, batch_idx):
        loss = self.step(batch, self.train_target)
        self.losses.setdefault(self.global_step, []).append(float(loss.detach()))
        if self.how == "train_loss":
            self.log("train_loss", loss)
        elif self.how == "objective":  # the loss under a name without "loss"
            self.log("objective", loss)
        elif self.how == "twice":  # the same loss under two loss names
            self.log("loss", loss)
            self.log("train_loss", loss)
        elif self.how == "sparse":  # its own loss, logged every 5 steps only
            if self.global_step % 5 == 0:
                self.log("train_loss", loss)
        elif self.how == "nan":  # its own loss, NaN at two steps (AMP's skipped steps: the weights unharmed)
            if self.global_step in (8, 12):
                loss = loss * 0.0 + float("nan")
                self.losses[self.global_step][-1] = float("nan")
            self.log("train_loss", loss)
        self.log("score", float(batch_idx % 7))
        return {"loss": loss}


ALL = list(range(20))


@pytest.mark.parametrize("how,streams", [
    ("none", {"train/loss": ALL}),
    ("train_loss", {"train/loss": [0, 1], "train_loss": ALL}),
    ("objective", {"train/loss": [0, 1], "objective": ALL}),
    ("twice", {"train/loss": [0, 1], "loss": ALL, "train_loss": [0, 1]}),
    ("sparse", {"train/loss": list(range(10)), "train_loss": [0, 5, 10, 15]}),
    # (a NaN loss broke the comparison: train/loss was observed again beside train_loss, two nonfinite alarms for
    # one and the schedule tightened twice; a new user's probe)
    ("nan", {"train/loss": [0, 1], "train_loss": ALL})])
def test_the_loss_is_one_stream_when_the_module_logs_it_too(how, streams):
    """outputs["loss"] (as train/loss) and the module's own self.log("train_loss", loss) were both watched: every
    loss alarm was doubled and corroborated itself (the default preset needs 2 streams to agree).  A key whose
    fresh value is the step's loss 3 times in a row (not 0) takes its place from then on, whatever its name; one
    loss under two names is one stream."""
    train, _ = loaders(n_train=160)
    torch.manual_seed(0)
    model = LoggedLossModel(how)
    cb = Observing("default", evaluate_fn=lambda: {"score": [1.0]}, overrides=["trigger.freq_steps=1000"])
    trainer = L.Trainer(max_steps=20, logger=False, enable_checkpointing=False, callbacks=[cb], **QUIET)
    trainer.fit(model, train)
    assert {k: [s for s, _ in v] for k, v in cb.observed.items() if k != "score"} == streams
    for stream, steps in streams.items():
        assert [v for _, v in cb.observed[stream]] == pytest.approx([model.losses[s][0] for s in steps], rel=1e-6,
                                                                    nan_ok=True)
    if how == "nan":
        assert cb.evaluator.summary()["alarms"] == 2  # one nonfinite alarm each, on the one loss stream


class PartsModel(Model):
    """Logs parts of its loss only: an auxiliary term, and a KL that is exactly 0 at first (the policy is still
    the reference), so that the NLL equals the total loss there."""

    def training_step(self, batch, batch_idx):
        nll = self.step(batch, self.train_target)
        kl = 0.0 * nll if self.global_step < 3 else 0.01 * nll.detach() ** 2
        aux = 0.01 * nll.detach() ** 2
        self.log("aux_loss", aux)
        self.log("train/nll_loss", nll)
        self.log("train/kl_loss", kl)
        return {"loss": nll + kl}


def test_a_part_of_the_loss_never_takes_the_losss_place():
    """Any training key named like a loss (aux_loss) turned train/loss off for good, and a KL term equal to 0 at
    the first step hid the NLL (equal to the total there) for the rest of the run (found in review)."""
    train, _ = loaders(n_train=160)
    torch.manual_seed(0)
    cb = Observing("default", evaluate_fn=lambda: {"score": [1.0]}, overrides=["trigger.freq_steps=1000"])
    trainer = L.Trainer(max_steps=20, logger=False, enable_checkpointing=False, callbacks=[cb], **QUIET)
    trainer.fit(PartsModel(), train)
    observed = {k: [s for s, _ in v] for k, v in cb.observed.items()}
    assert observed["aux_loss"] == ALL and observed["train/nll_loss"] == ALL and observed["train/kl_loss"] == ALL
    # the NLL equalled the loss at steps 0-2 (KL 0): it stood in for it at step 2, and gave the place back at
    # step 3, when the KL moved
    assert observed["train/loss"] == [0, 1, *range(3, 20)]


def test_a_fault_in_the_loss_is_not_corroborated_by_the_same_loss_under_another_name():
    """With the loss observed twice, the fault's alarm on train/loss and on train_loss were two streams agreeing."""
    train, _ = loaders()
    torch.manual_seed(0)
    cb = Observing("default", evaluate_fn=lambda: {"score": [1.0]}, overrides=FAST + ["trigger.freq_steps=1000"])
    trainer = L.Trainer(max_steps=60, logger=False, enable_checkpointing=False, callbacks=[cb, DataFault(30)],
                        **QUIET)
    trainer.fit(LoggedLossModel("train_loss"), train)
    assert set(cb.observed) == {"train_loss", "score", "train/loss"}
    assert [s for s, _ in cb.observed["train/loss"]] == [0, 1]  # until train_loss was the step's loss 3 times
    reasons = [r.reason for r in cb.evaluator.history]
    assert reasons[0].startswith("alarm:train_loss:") and cb.evaluator.summary()["alarms"] == 1, reasons


@pytest.mark.parametrize("how", ["none", "train_loss"])
def test_with_gradient_accumulation_the_loss_is_the_mean_of_the_steps_micro_batches(how):
    """With accumulate_grad_batches=2 the observed train/loss was the last micro-batch's loss divided by 2
    (Lightning scales outputs["loss"] for backward).  5 batches an epoch: the epoch's last step has one.  A module
    that logs its loss itself: its stream was the last micro-batch's, Lightning's value (a new user's probe)."""
    train, _ = loaders(n_train=20)  # 5 batches of 4: steps of 2, 2 and 1 micro-batches
    torch.manual_seed(0)
    model = LoggedLossModel(how)
    cb = Observing("default", evaluate_fn=lambda: {"score": [1.0]}, overrides=["trigger.freq_steps=1000"])
    trainer = L.Trainer(max_steps=9, accumulate_grad_batches=2, logger=False, enable_checkpointing=False,
                        callbacks=[cb], **QUIET)
    trainer.fit(model, train)
    observed = cb.observed["train/loss"]
    if how == "train_loss":  # (train/loss too until the module's is known to be the loss, 3 steps; then its name)
        assert [s for s, _ in observed] == [0, 1]
        observed = cb.observed["train_loss"]
    assert [s for s, _ in observed] == list(range(9))
    # the module's global_step during a step's micro-batches is the step's 0-based index
    assert [len(model.losses[s]) for s in range(9)] == [2, 2, 1] * 3
    assert [v for _, v in observed] == pytest.approx([sum(model.losses[s]) / len(model.losses[s]) for s in range(9)],
                                                     rel=1e-6)


class TwoLoaderModel(Model):
    """validation_step with a dataloader_idx without default (Lightning passes it with several loaders)."""

    def validation_step(self, batch, batch_idx, dataloader_idx):
        self.log("val_loss", self.step(batch, 1.0 + dataloader_idx))  # loader 1 scored against 2
        self.log("val_seen", float(dataloader_idx), add_dataloader_idx=False)


def test_every_validation_dataloader_is_evaluated_and_named_as_lightning_names_it():
    """Only the first validation dataloader was evaluated; and a validation_step whose dataloader_idx has no
    default failed every evaluation (TypeError: missing 'dataloader_idx'; 0 evaluations)."""
    from torch.utils.data import DataLoader as DL

    train, val0 = loaders(n_train=160, n_val=60)
    val1 = DL(RandomDataset(32, 30), batch_size=4)
    torch.manual_seed(0)
    model = TwoLoaderModel()
    cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=10", "evaluation.metric=val_loss/dataloader_idx_0",
                                                           "evaluation.higher_is_better=false"])
    trainer = L.Trainer(max_steps=20, logger=False, enable_checkpointing=False, callbacks=[cb], **QUIET)
    trainer.fit(model, train, [val0, val1])
    s = cb.evaluator.summary()
    assert s["evals"] >= 2 and s["eval_errors"] == 0
    last = cb.evaluator.history[-1]
    assert last.step == 19
    assert set(last.metrics) == {"val_loss/dataloader_idx_0", "val_loss/dataloader_idx_1", "val_seen"}
    for i, (ds, target) in enumerate(((val0.dataset, 1.0), (val1.dataset, 2.0))):
        idx = EvalRequest(step=19, sample_size=last.sample_size, seed=0, reason="").indices(len(ds))
        with torch.no_grad():
            per_item = [float(model.step(ds[j][None], target)) for j in idx]
        m = last[f"val_loss/dataloader_idx_{i}"]
        assert m.n == len(idx) and m.mean == pytest.approx(sum(per_item) / len(idx), rel=1e-6)
    n0, n1 = last["val_loss/dataloader_idx_0"].n, last["val_loss/dataloader_idx_1"].n
    assert last["val_seen"].n == n0 + n1 and last["val_seen"].mean == pytest.approx(n1 / (n0 + n1))


class ValLogModel(LoggedLossModel):
    """Logs its validation loss in the TensorBoard style, without a val/eval/test prefix."""

    def validation_step(self, batch, batch_idx):
        self.log("loss/val", self.step(batch))


def test_what_lightnings_own_validation_logs_is_not_a_training_stream():
    """With val_check_interval, a validation key without a val prefix ("loss/val") written mid-epoch was then
    observed as a training value (found in review)."""
    train, val = loaders(n_train=160, n_val=16)
    torch.manual_seed(0)
    cb = Observing("default", evaluate_fn=lambda: {"score": [1.0]}, overrides=["trigger.freq_steps=1000"])
    trainer = L.Trainer(max_steps=20, logger=False, enable_checkpointing=False, callbacks=[cb],
                        **{**QUIET, "limit_val_batches": 2}, val_check_interval=5)
    trainer.fit(ValLogModel("none"), train, val)
    assert set(cb.observed) == {"train/loss", "score"}
    assert [s for s, _ in cb.observed["train/loss"]] == ALL


class ManualModel(Model):
    """Manual optimization, an optimizer step every 2 batches, a per-sample loss vector returned."""

    def __init__(self):
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        out = self(batch)
        per_sample = ((out - 1.0) ** 2).mean(dim=1)
        self.manual_backward(per_sample.mean())
        if batch_idx % 2 == 1:
            opt.step()
            opt.zero_grad()
        return {"loss": per_sample}


class TwoOptimizerModel(Model):
    """Manual optimization with two optimizers, each stepping every batch (a GAN's generator and discriminator)."""

    def __init__(self):
        super().__init__()
        self.automatic_optimization = False
        self.other = torch.nn.Linear(32, 2)

    def training_step(self, batch, batch_idx):
        first, second = self.optimizers()
        for opt, out in ((first, self(batch)), (second, self.other(batch))):
            loss = torch.nn.functional.mse_loss(out, torch.ones_like(out))
            opt.zero_grad()
            self.manual_backward(loss)
            opt.step()
        self.log("train_loss", loss)

    def configure_optimizers(self):
        return torch.optim.SGD(self.layer.parameters(), lr=0.01), torch.optim.SGD(self.other.parameters(), lr=0.01)


def test_manual_optimization_with_two_optimizers_steps_once_a_batch(caplog):
    """Lightning's global_step counts every optimizer's step(): 2 a batch, so the steps read 1, 3, 5, ..., past
    estimated_stepping_batches; the final evaluation came halfway, a second one at the end, and the epoch trigger
    mid-epoch, with warnings blaming the user's calls (a new user's probe).  The batches that stepped are the steps,
    as Lightning's loggers count them."""
    torch.manual_seed(0)
    train = DataLoader(RandomDataset(32, 64), batch_size=4)  # 16 batches an epoch
    cb = Observing("default", evaluate_fn=lambda: {"score": [1.0]},
                   overrides=["trigger.freq_steps=null", "trigger.freq_epochs=1", "policy.interval.enabled=false",
                              "policy.alarm.enabled=false", "policy.budget.enabled=false"])
    trainer = L.Trainer(max_epochs=3, logger=False, enable_checkpointing=False, callbacks=[cb], **QUIET)
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        trainer.fit(TwoOptimizerModel(), train)
    assert trainer.global_step == 96 and trainer.estimated_stepping_batches == 48
    assert [s for s, _ in cb.observed["train_loss"]] == list(range(48))
    assert [(r.step, r.reason) for r in cb.evaluator.history] == [
        (15, "trigger:epochs"), (31, "trigger:epochs"), (47, "trigger:final")]
    assert "steps skipped" not in caplog.text and "total_steps" not in caplog.text


def test_manual_optimization_with_two_optimizers_resumes_from_a_checkpoint_inside_an_epoch(tmp_path):
    """A review: a count of the adapter's own, started from Lightning's at on_train_start, was one step behind after
    a resume from a checkpoint written inside an epoch (Lightning corrects its counter after that hook): the resumed
    run observed steps 4...30 for 5...31, and its final evaluation came at 30."""
    over = ["trigger.freq_steps=null", "trigger.freq_epochs=1", "policy.interval.enabled=false",
            "policy.alarm.enabled=false", "policy.budget.enabled=false"]

    def run(folder, max_epochs, ckpt_path=None):
        torch.manual_seed(0)
        cb = Observing("default", evaluate_fn=lambda: {"score": [1.0]}, overrides=over)
        saver = ModelCheckpoint(dirpath=folder, save_top_k=-1, every_n_train_steps=10, save_on_train_epoch_end=False)
        trainer = L.Trainer(max_epochs=max_epochs, logger=False, callbacks=[cb, saver], **QUIET)
        trainer.fit(TwoOptimizerModel(), DataLoader(RandomDataset(32, 64), batch_size=4), ckpt_path=ckpt_path)
        return cb

    whole = run(tmp_path / "whole", 2)
    run(tmp_path / "first", 1)
    first = min((tmp_path / "first").glob("*.ckpt"), key=lambda f: f.stat().st_mtime)  # after batch 5 (step 10)
    resumed = run(tmp_path / "resumed", 2, ckpt_path=first)
    assert [s for s, _ in resumed.observed["train_loss"]] == list(range(5, 32))
    assert [(r.step, r.reason) for r in resumed.evaluator.history] == [(r.step, r.reason)
                                                                        for r in whole.evaluator.history][-2:]
    assert resumed.evaluator.history[-1].step == 31


def test_a_per_sample_loss_from_manual_optimization_never_reaches_the_training_step():
    """The micro-batch accumulation ran outside the guard: a per-sample loss vector whose last batch was
    shorter raised "size of tensor a (2) must match ... b (4)" inside training (found in review)."""
    torch.manual_seed(0)
    train = DataLoader(RandomDataset(32, 22), batch_size=4)  # the last batch has 2 items
    cb = Observing("default", evaluate_fn=lambda: {"score": [1.0]}, overrides=["trigger.freq_steps=1000"])
    trainer = L.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, callbacks=[cb], **QUIET)
    trainer.fit(ManualModel(), train)
    assert "train/loss" not in cb.observed  # a vector is not a step's loss
    assert cb.evaluator is not None and cb.evaluator.summary()["eval_errors"] == 0


# -- found by a new user trying the framework integrations ------------------------------------------------------
def test_a_bad_config_is_a_config_error_when_the_callback_is_built():
    """It was accepted at construction, logged once inside on_train_start, and fit() trained with no evaluation."""
    from adaptive_eval import ConfigError

    with pytest.raises(ConfigError, match=r"trigger\.freq_stepz.*did you mean 'trigger\.freq_steps'"):
        AdaptiveEvalCallback("default", overrides=["trigger.freq_stepz=10"])
    with pytest.raises(ConfigError, match=r"policy\.sample_size\.min: 48 is larger than policy\.sample_size\.max: 32"):
        AdaptiveEvalCallback("default", overrides=["policy.sample_size.max=32"])
    with pytest.raises(ConfigError, match="no_such_preset"):
        AdaptiveEvalCallback("no_such_preset")


def test_a_tensorboard_logger_in_the_evaluators_folder_shows_each_result_as_one_tag_series(tmp_path):
    """Before, with TensorBoardLogger's log_dir as logging.tensorboard_dir, each result was in that folder twice:
    eval/val_loss from the evaluator and adaptive_eval/val_loss through the logger.  Now the evaluator's is the
    one; other loggers (CSV here) still get adaptive_eval/<metric>."""
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    train, val = loaders(n_train=160, n_val=40)
    torch.manual_seed(0)
    tb = TensorBoardLogger(tmp_path, name="tb", version=0)
    cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=5",
                                                           f"logging.tensorboard_dir={tb.log_dir}"])
    trainer = L.Trainer(max_steps=30, logger=[tb, CSVLogger(tmp_path, name="csv")], enable_checkpointing=False,
                        log_every_n_steps=5, callbacks=[cb], **QUIET)
    trainer.fit(Model(), train, val)
    steps = [r.step for r in cb.evaluator.history]
    assert len(steps) >= 3
    files = [p for p in (tmp_path / "tb" / "version_0").iterdir() if "tfevents" in p.name]
    assert len(files) == 2  # Lightning's and the evaluator's, in one folder
    scalars = {}
    for f in files:
        acc = EventAccumulator(str(f)).Reload()  # TensorBoard's own reader, default size guidance
        scalars.update({tag: [e.step for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]})
    assert "train_loss" in scalars and scalars["eval/val_loss"] == steps
    assert not [t for t in scalars if t.startswith("adaptive_eval/")]
    with open(next(tmp_path.glob("csv/*/metrics.csv"))) as f:
        rows = [r for r in csv.DictReader(f) if r.get("adaptive_eval/val_loss")]
    assert [int(r["step"]) for r in rows] == steps
    # The callback still pickles, as ddp_spawn pickles it for a later fit: its evaluator's TensorBoard logger held
    # an event file that does not pickle (a review: tensorboard=True, the default, broke a second ddp_spawn fit)
    again = pickle.loads(pickle.dumps(cb))
    assert again.evaluator.logger.closed and [r.step for r in again.evaluator.history] == steps


class Points(torch.utils.data.Dataset):
    """4 classes: the largest of the first four coordinates."""

    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, 8, generator=g)
        self.y = self.x[:, :4].argmax(1)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


class MetricObjectModel(L.LightningModule):
    """Lightning's documented pattern: self.val_acc(logits, y); self.log("val_acc", self.val_acc)."""

    def __init__(self):
        super().__init__()
        import torchmetrics

        self.net = torch.nn.Linear(8, 4)
        self.val_acc = torchmetrics.classification.MulticlassAccuracy(num_classes=4, average="micro")
        self.train_acc = torchmetrics.classification.MulticlassAccuracy(num_classes=4, average="micro")

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self.net(x)
        self.train_acc.update(logits, y)  # accumulated over the epoch: the adapter must leave it as it was
        return torch.nn.functional.cross_entropy(logits, y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self.net(x)
        self.log("val_loss", torch.nn.functional.cross_entropy(logits, y))
        self.val_acc(logits, y)
        self.log("val_acc", self.val_acc)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_a_torchmetrics_metric_logged_as_an_object_is_computed_over_the_items_as_lightning_computes_it():
    """self.log("val_acc", metric_object) was dropped silently (scalar() of a Metric is None)."""
    pytest.importorskip("torchmetrics")
    torch.manual_seed(0)
    train, val = Points(160, 0), Points(40, 1)
    model = MetricObjectModel()
    whole = ["policy.sample_size.initial=48", "policy.sample_size.min=48"]  # every evaluation: the whole set
    cb = AdaptiveEvalCallback("default", overrides=FAST + whole + ["trigger.freq_steps=10", "evaluation.metric=val_acc",
                                                                   "evaluation.on_error=raise"])
    trainer = L.Trainer(max_steps=20, logger=False, enable_checkpointing=False, callbacks=[cb], **QUIET)
    seen_before = []

    class TrainAccBefore(Callback):
        def on_train_batch_end(self, trainer, pl_module, *args):
            seen_before.append(int(pl_module.train_acc._update_count))

    trainer.callbacks.append(TrainAccBefore())
    trainer.fit(model, DataLoader(train, batch_size=8), DataLoader(val, batch_size=8))
    ev = cb.evaluator
    assert ev.summary()["eval_errors"] == 0 and [r.step for r in ev.history] == [9, 19]
    last = ev.history[-1]
    assert set(last.metrics) == {"val_loss", "val_acc"} and last["val_acc"].n == 40
    with torch.no_grad():  # the final weights on the whole set
        expected = float((model.net(val.x).argmax(1) == val.y).float().mean())
    assert last["val_acc"].mean == pytest.approx(expected)
    # the user's own metrics keep the state they accumulated in training (saved before, restored after)
    assert int(model.train_acc._update_count) == 20 and seen_before == list(range(1, 21))
    assert int(model.val_acc._update_count) == 0


class TwoLoaderMetricObjectModel(MetricObjectModel):
    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        super().validation_step(batch, batch_idx)


def test_a_torchmetrics_metric_of_each_validation_dataloader_is_over_that_loaders_items():
    """Each loader's metric object was said to be computed over the last loader's count of items (30 for the
    first loader's 40)."""
    pytest.importorskip("torchmetrics")
    torch.manual_seed(0)
    model = TwoLoaderMetricObjectModel()
    whole = ["policy.sample_size.initial=48", "policy.sample_size.min=48"]  # every evaluation: each whole set
    cb = AdaptiveEvalCallback("default", overrides=FAST + whole + ["trigger.freq_steps=10", "evaluation.on_error=raise",
                                                                   "evaluation.metric=val_acc/dataloader_idx_0"])
    trainer = L.Trainer(max_steps=10, logger=False, enable_checkpointing=False, callbacks=[cb], **QUIET)
    sets = Points(40, 1), Points(30, 2)
    trainer.fit(model, DataLoader(Points(160, 0), batch_size=8), [DataLoader(v, batch_size=8) for v in sets])
    last = cb.evaluator.history[-1]
    assert cb.evaluator.summary()["eval_errors"] == 0 and last.step == 9
    for i, val in enumerate(sets):
        with torch.no_grad():
            expected = float((model.net(val.x).argmax(1) == val.y).float().mean())
        acc = last[f"val_acc/dataloader_idx_{i}"]
        assert (acc.n, acc.mean) == (len(val), pytest.approx(expected))
    # its cost is both loaders' items (the budget and summary()["samples"] counted the largest loader's, 40)
    assert last.items == 70 and cb.evaluator.summary()["samples"] == 70 * len(cb.evaluator.history)


def test_a_tracked_metric_validation_step_only_returns_is_said_to_be_a_guess(caplog):
    """BoringModel's validation_step returns {"x": loss}: x was tracked as higher-is-better without a word (the
    warning needed "loss" in the name)."""
    train, val = loaders()
    torch.manual_seed(0)
    cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=10"])
    trainer = L.Trainer(max_steps=20, logger=False, enable_checkpointing=False, callbacks=[cb], **QUIET)
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        trainer.fit(BoringModel(), train, val)
    said = [r.getMessage() for r in caplog.records if "tracking 'x'" in r.getMessage()]
    assert len(said) == 1 and "validation_step returns it" in said[0]
    assert "evaluation.higher_is_better: false" in said[0]
    assert list(cb.evaluator.history[-1].metrics) == ["x"]


class FlipWeights(Callback):
    """The injected fault: at step ``at`` every weight is negated and tripled (a corrupted update): the loss jumps
    at once, in training and in validation."""

    def __init__(self, at):
        self.at = at

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == self.at:
            with torch.no_grad():
                for p in pl_module.parameters():
                    p.mul_(-3.0)


LOSS = ["evaluation.metric=val_loss", "evaluation.higher_is_better=false"]


def look_back_run(folder, look_back, ckpt_path=None, overrides=(), logger=False, model_class=None, **saver):
    train, val = loaders(n_train=80, n_val=100)  # 20 optimizer steps per epoch
    torch.manual_seed(1)
    model = (model_class or Model)()
    cb = AdaptiveEvalCallback("default", overrides=FAST + LOSS + ["trigger.freq_steps=25", *overrides],
                              look_back=look_back)
    saver = ModelCheckpoint(dirpath=folder, **(saver or dict(every_n_train_steps=10, save_top_k=-1, save_last=True)))
    trainer = L.Trainer(max_steps=80, logger=logger, callbacks=[cb, saver, FlipWeights(45)], **QUIET)
    # (a module with an object among its hyper-parameters resumes only with weights_only=False, Lightning's own rule)
    trainer.fit(model, train, val, ckpt_path=ckpt_path, weights_only=False if model_class else None)
    return cb, trainer, model, val.dataset


def test_look_back_evaluates_the_checkpoint_written_before_a_fall_and_training_goes_on_unchanged(tmp_path, caplog):
    from lightning.pytorch.loggers import CSVLogger

    plain, _, plain_model, _ = look_back_run(tmp_path / "plain", False)
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        cb, trainer, model, val = look_back_run(tmp_path / "kept", True, logger=CSVLogger(tmp_path, name="log"))
    assert not any("keeps only its latest file" in r.getMessage() for r in caplog.records)  # (save_top_k=-1)
    ev = cb.evaluator
    [back] = [r for r in ev.history if r.evaluated_at is not None]
    alarm = next(r for r in ev.history if r.reason.startswith("alarm:"))
    assert back.evaluated_at == alarm.step and back.reason == f"lookback:{alarm.reason}"
    assert back.step % 10 == 9 and back.step < 45  # a file ModelCheckpoint wrote before the weights were flipped
    assert back["val_loss"].mean < alarm["val_loss"].mean / 10
    # The numbers are those of the file's weights, on the items the request named.
    (path,) = tmp_path.glob(f"kept/*-step={back.step + 1}.ckpt")
    saved = Model()
    saved.load_state_dict(torch.load(path, weights_only=True)["state_dict"])
    idx = EvalRequest(step=back.step, sample_size=back.sample_size, seed=0, reason="").indices(len(val))
    with torch.no_grad():
        per_item = [float(saved.step(val[i][None])) for i in idx]
    assert back["val_loss"].n == len(idx) and back["val_loss"].mean == pytest.approx(sum(per_item) / len(idx))
    # Reported to the trainer's loggers at the checkpoint's step, under a tag of its own (it was not reported)
    with open(next(tmp_path.glob("log/*/metrics.csv"))) as f:
        rows = list(csv.DictReader(f))
    looked = [r for r in rows if r.get("adaptive_eval/lookback/val_loss")]
    assert [(int(r["step"]), float(r["adaptive_eval/lookback/val_loss"]), float(r["adaptive_eval/lookback/evaluated_at"]))
            for r in looked] == [(back.step, pytest.approx(back["val_loss"].mean), back.evaluated_at)]
    assert [int(r["step"]) for r in rows if r.get("adaptive_eval/val_loss")] == \
        [r.step for r in ev.history if r.evaluated_at is None]
    # The module's own weights were put back: training went on exactly as without the look back.
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), plain_model.parameters()))
    assert [(r.step, r.reason) for r in ev.history if r.evaluated_at is None] == \
        [(r.step, r.reason) for r in plain.evaluator.history]
    assert not [r for r in plain.evaluator.history if r.evaluated_at is not None]
    assert "save_checkpoint" not in vars(trainer.strategy)  # the wrapper is gone with the fit
    # Of the two files written at each step the first is kept: last.ckpt is written again at the next save.
    kept = cb.evaluator.policies.by_name["lookback"].kept
    assert [s for s, _ in kept] == list(range(9, 80, 10)) and all("step=" in ref for _, ref in kept)
    # Resumed from that very file: the same decisions, the look back included (the state in the file was taken
    # before the file was written and handed over).
    resumed, _, _, _ = look_back_run(tmp_path / "kept", True, ckpt_path=str(path))
    rows = lambda h: [(r.step, r.reason, r.evaluated_at, r.sample_size) for r in h]  # noqa: E731
    assert rows(resumed.evaluator.history) == rows(ev.history)


def test_look_back_skips_a_file_written_again_since_and_is_off_where_it_would_be_unsafe(tmp_path, caplog):
    # Only last.ckpt, rewritten every 5 steps: by the alarm (step 47) it holds step 44, not the one kept for
    # the look back (39, at least lag_steps before the alarm).
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        cb, _, model, _ = look_back_run(tmp_path / "last", True, every_n_train_steps=5, save_top_k=0,
                                        save_last=True)
    # the name kept again for each later step forgets the earlier one, said once (this session: the look back
    # found the file written again since only when it loaded it, with a warning of its own, kept below)
    assert cb.evaluator.policies.by_name["lookback"].kept == [(79, str(tmp_path / "last" / "last.ckpt"))]
    assert not [r for r in cb.evaluator.history if r.evaluated_at is not None]
    [said] = [r for r in caplog.records if "was kept under the same name" in r.getMessage()]
    # a kept file gone is expected: one warning line, not an error with a traceback (found by a new user)
    assert said.levelno == logging.WARNING and "Traceback" not in said.getMessage()
    assert said.getMessage().startswith("checkpoint_saved(9, ")
    assert "the checkpoint of step 4 was kept under the same name" in said.getMessage()
    plain, _, plain_model, _ = look_back_run(tmp_path / "plain", False)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), plain_model.parameters()))
    assert [(r.step, r.reason) for r in cb.evaluator.history] == [(r.step, r.reason) for r in plain.evaluator.history]
    # That set-up (and the default ModelCheckpoint) keeps only the latest file: said once at the start
    assert sum("every ModelCheckpoint keeps only its latest file" in r.getMessage() for r in caplog.records) == 1
    # Under evaluation.timeout_s the evaluation runs in a thread the step may stop waiting for: nothing is handed
    # over (a checkpoint's weights would sit in the training module meanwhile).
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        cb, _, _, _ = look_back_run(tmp_path / "timeout", True, overrides=["evaluation.timeout_s=60"])
    assert cb.evaluator.policies.by_name["lookback"].kept == []
    assert sum("look_back is off for this run: evaluation.timeout_s" in r.getMessage() for r in caplog.records) == 1


class LookBackRecording(RecordingCallback):
    """RecordingCallback with each evaluation's checkpoint and the rank's final weights."""

    def evaluate_checkpoint(self, trainer, pl_module, request):
        self.seen.append([request.step, request.indices(100), request.checkpoint])
        return super().evaluate_checkpoint(trainer, pl_module, request)

    def evaluate_with_module(self, trainer, pl_module, request):
        if not self.seen or self.seen[-1][0] != request.step or self.seen[-1][2] is None:
            self.seen.append([request.step, request.indices(100), None])
        return AdaptiveEvalCallback.evaluate_with_module(self, trainer, pl_module, request)

    def on_train_end(self, trainer, pl_module):
        AdaptiveEvalCallback.on_train_end(self, trainer, pl_module)
        history = [[r.step, r.reason, r.items, r.mean("val_loss"), r.evaluated_at] for r in self.evaluator.history]
        weights = [float(x) for p in pl_module.parameters() for x in p.detach().flatten()]
        with open(f"{self.out}/rank{trainer.global_rank}.json", "w") as f:
            json.dump({"history": history, "seen": self.seen, "weights": weights}, f)


def test_under_ddp_every_rank_loads_the_kept_checkpoint_and_scores_its_shard(tmp_path):
    def run(folder, look_back):
        folder.mkdir()
        train, val = loaders(n_train=160, n_val=100)  # 20 optimizer steps per epoch on each of 2 ranks
        torch.manual_seed(1)
        cb = LookBackRecording(folder, overrides=FAST + LOSS + ["trigger.freq_steps=25"], look_back=look_back)
        saver = ModelCheckpoint(dirpath=folder / "ckpt", every_n_train_steps=10, save_top_k=-1)
        spawn = DDPStrategy(start_method="spawn", timeout=datetime.timedelta(seconds=120))
        trainer = L.Trainer(max_steps=80, strategy=spawn, devices=2, num_nodes=1, logger=False,
                            callbacks=[cb, saver, FlipWeights(45)], **QUIET)
        trainer.fit(Model(), train, val)
        return [json.loads((folder / f"rank{r}.json").read_text()) for r in (0, 1)], val.dataset

    (r0, r1), val = run(tmp_path / "kept", True)
    assert r0["history"] == r1["history"]  # the same decisions and results on both ranks
    [back] = [h for h in r0["history"] if h[4] is not None]
    alarm = next(h for h in r0["history"] if h[1].startswith("alarm:"))
    assert back[4] == alarm[0] and back[1] == f"lookback:{alarm[1]}" and back[0] % 10 == 9 and back[0] < 45
    # each rank loaded the file and scored its own shard of the request's items
    mine, theirs = ([s for s in r["seen"] if s[2] is not None] for r in (r0, r1))
    assert [s[0] for s in mine] == [s[0] for s in theirs] == [back[0]]
    (path,) = (tmp_path / "kept" / "ckpt").glob(f"*-step={back[0] + 1}.ckpt")
    assert mine[0][2] == theirs[0][2] == str(path)
    asked = EvalRequest(step=back[0], sample_size=back[2], seed=0, reason="").indices(100)
    assert not set(mine[0][1]) & set(theirs[0][1]) and sorted(mine[0][1] + theirs[0][1]) == sorted(asked)
    saved = Model()
    saved.load_state_dict(torch.load(path, weights_only=True)["state_dict"])
    with torch.no_grad():
        per_item = [float(saved.step(val[i][None])) for i in asked]
    assert back[3] == pytest.approx(sum(per_item) / len(per_item), rel=1e-6)
    # and put its own weights back: both ranks trained on as without the look back
    (p0, p1), _ = run(tmp_path / "plain", False)
    assert r0["weights"] == r1["weights"] == p0["weights"] == p1["weights"]
    assert [h[:2] for h in r0["history"] if h[4] is None] == [h[:2] for h in p0["history"]]


def test_a_run_folder_moved_before_the_resume_looks_back_at_its_files_where_they_are_now(tmp_path):
    """Found by a new user: the kept files' paths were the old folder's, and the resumed run's look back failed on
    them (FileNotFoundError); they are now found beside the file resumed from."""
    import shutil

    every5 = dict(every_n_train_steps=5, save_top_k=-1)
    full, _, _, _ = look_back_run(tmp_path / "src", True, **every5)
    [back] = [r for r in full.evaluator.history if r.evaluated_at is not None]
    assert back.step == 39  # kept before the file of step 44, which the resume below starts from
    shutil.move(tmp_path / "src", tmp_path / "moved")
    (path,) = (tmp_path / "moved").glob("*-step=45.ckpt")
    resumed, _, _, _ = look_back_run(tmp_path / "moved", True, ckpt_path=str(path), **every5)
    # the same decisions; the look back's value is its file's (the values measured after the resume differ in
    # the fourth digit: Lightning does not resume mid-epoch bit for bit)
    rows = lambda h: [(r.step, r.reason, r.evaluated_at, r.sample_size)  # noqa: E731
                      + ((round(r.mean("val_loss"), 6),) if r.evaluated_at is not None or r.step < 44 else ())
                      for r in h]
    assert rows(resumed.evaluator.history) == rows(full.evaluator.history)



@dataclasses.dataclass
class Shape:
    width: int = 32


class RenamingModel(Model):
    """A module that writes its weights under other names and maps them back in ``on_load_checkpoint`` (a format
    migration), and binds an attribute from the checkpoint there."""

    def __init__(self):
        super().__init__()
        self.loaded_from = None

    def on_save_checkpoint(self, checkpoint):
        checkpoint["state_dict"] = {f"v1.{k}": v for k, v in checkpoint["state_dict"].items()}
        checkpoint["saved_at"] = self.trainer.global_step

    def on_load_checkpoint(self, checkpoint):
        checkpoint["state_dict"] = {k.removeprefix("v1."): v for k, v in checkpoint["state_dict"].items()}
        self.loaded_from = checkpoint["saved_at"]
        self.layer = torch.nn.Linear(32, 2)  # rebuilt to the checkpoint's shape, as a migration may
        self.register_buffer("migrated", torch.ones(1), persistent=False)


def test_look_back_calls_the_modules_on_load_checkpoint_hook_and_puts_back_what_it_binds(tmp_path, caplog):
    """Left undone last round: the look back loaded the weights without the module's on_load_checkpoint hook, so a
    module that renames its keys there failed every look back (strict loading) with an error."""
    plain, _, plain_model, _ = look_back_run(tmp_path / "plain", False, model_class=RenamingModel)
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        cb, trainer, model, val = look_back_run(tmp_path / "kept", True, model_class=RenamingModel)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    [back] = [r for r in cb.evaluator.history if r.evaluated_at is not None]
    assert back.step == 39 and cb.evaluator.summary()["eval_errors"] == 0
    (path,) = tmp_path.glob(f"kept/*-step={back.step + 1}.ckpt")
    saved = Model()
    saved.load_state_dict({k.removeprefix("v1."): v for k, v in torch.load(path, weights_only=False)["state_dict"].items()})
    idx = EvalRequest(step=back.step, sample_size=back.sample_size, seed=0, reason="").indices(len(val))
    with torch.no_grad():
        expected = sum(float(saved.step(val[i][None])) for i in idx) / len(idx)
    assert back["val_loss"].mean == pytest.approx(expected)
    # What the hook bound or registered is put back (the layer the optimizer updates, no new buffer), and training
    # went on as without the look back.
    assert model.loaded_from is None and "migrated" not in dict(model.named_buffers())
    assert any(model.layer.weight is p for p in trainer.optimizers[0].param_groups[0]["params"])
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), plain_model.parameters()))


class ConfiguredModel(Model):
    """A module whose hyper-parameters are an object (a dataclass), saved into every checkpoint."""

    def __init__(self, shape: Shape = Shape()):
        super().__init__()
        self.save_hyperparameters()


def test_look_back_follows_lightnings_links_and_objects_and_leaves_nothing_behind_when_fit_raises(tmp_path):
    """Found in review: resumed from a last.ckpt link (save_last="link") the link itself was kept, and the next save
    moved it on, so the look back was skipped; a module with an object among its hyper-parameters was never looked
    back at (torch's default weights_only load refuses it); a fit that raised left its strategy wrapped."""
    linked = dict(every_n_train_steps=5, save_top_k=-1, save_last="link")
    full, _, _, _ = look_back_run(tmp_path / "a", True, model_class=ConfiguredModel, **linked)
    rows = lambda h: [(r.step, r.reason, r.evaluated_at, r.sample_size) for r in h]  # noqa: E731
    assert [r.step for r in full.evaluator.history if r.evaluated_at is not None] == [39]
    last = tmp_path / "a" / "last.ckpt"
    last.unlink()
    last.symlink_to(next((tmp_path / "a").glob("*-step=40.ckpt")).name)  # as it was when the run stopped at 40
    resumed, _, _, _ = look_back_run(tmp_path / "a", True, ckpt_path=str(last), model_class=ConfiguredModel, **linked)
    assert rows(resumed.evaluator.history) == rows(full.evaluator.history)

    class Fails(Callback):
        def on_train_batch_end(self, trainer, *args):
            if trainer.global_step == 3:
                raise RuntimeError("the user's own bug")

    train, val = loaders(n_train=80, n_val=100)
    trainer = L.Trainer(max_steps=10, logger=False, enable_checkpointing=False, **QUIET,
                        callbacks=[AdaptiveEvalCallback("default", overrides=FAST + LOSS, look_back=True), Fails()])
    with pytest.raises(RuntimeError, match="the user's own bug"):
        trainer.fit(Model(), train, val)
    assert "save_checkpoint" not in vars(trainer.strategy)

    class Twice(AdaptiveEvalCallback):  # on_train_start twice in one fit, as under a tuner's trial fit
        def on_train_start(self, trainer, pl_module):
            super().on_train_start(trainer, pl_module)
            self.first = vars(trainer.strategy).get("save_checkpoint")
            super().on_train_start(trainer, pl_module)
            self.second = vars(trainer.strategy).get("save_checkpoint")

    twice = Twice("default", overrides=FAST + LOSS, look_back=True)
    trainer = L.Trainer(max_steps=5, logger=False, enable_checkpointing=False, callbacks=[twice], **QUIET)
    trainer.fit(Model(), train, val)
    assert twice.first is not None and twice.second is twice.first  # wrapped once
    assert "save_checkpoint" not in vars(trainer.strategy)


class EpochLoggingModel(Model):
    def training_step(self, batch, batch_idx):
        loss = self.step(batch, self.train_target)
        self.log("train_loss", loss, on_step=True, on_epoch=True)  # (train_loss_step, train_loss_epoch)
        return {"loss": loss}


def test_a_monitor_with_lightnings_validation_off_is_said_once(caplog, tmp_path):
    """ModelCheckpoint(monitor=...) with limit_val_batches=0 saved nothing and only Lightning's "could not find
    the monitored key" said so, not why (found by a new-user probe)."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    train, _ = loaders()
    torch.manual_seed(0)
    cb = AdaptiveEvalCallback("areal", evaluate_fn=lambda: {"score": [1.0]}, overrides=["trigger.freq_steps=3"])
    ckpt = ModelCheckpoint(monitor="adaptive_eval/score", save_top_k=1)
    with caplog.at_level("WARNING", logger="adaptive_eval"):
        L.Trainer(max_steps=6, logger=False, callbacks=[cb, ckpt], **QUIET).fit(Model(), train)  # (no validation)
    said = [r.getMessage() for r in caplog.records if "with limit_val_batches=0" in r.getMessage()]
    assert len(said) == 1 and "ModelCheckpoint(monitor='adaptive_eval/score')" in said[0]
    # A key the training logs, and ModelCheckpoint's own "step", are seen: not said (a probe: "the monitor never sees",
    # of monitors whose files were saved)
    caplog.clear()
    cb = AdaptiveEvalCallback("areal", evaluate_fn=lambda: {"score": [1.0]}, overrides=["trigger.freq_steps=3"])
    savers = [ModelCheckpoint(dirpath=tmp_path / key, monitor=key, mode="max", save_top_k=1, every_n_train_steps=2)
              for key in ("train_loss_step", "step", "train_loss_epoch")]  # (the last: at each epoch's end; a review)
    with caplog.at_level("WARNING", logger="adaptive_eval"):
        L.Trainer(max_steps=6, logger=False, callbacks=[cb, *savers], **QUIET).fit(EpochLoggingModel(), train)
    assert not [r for r in caplog.records if "with limit_val_batches=0" in r.getMessage()]
    # With Lightning's validation on, a monitor of the adapter's key raised at the first validation, unsaid (a probe)
    from lightning.pytorch.callbacks import EarlyStopping

    caplog.clear()
    cb = AdaptiveEvalCallback("areal", evaluate_fn=lambda: {"score": [1.0]}, overrides=["trigger.freq_steps=3"])
    with caplog.at_level("WARNING", logger="adaptive_eval"), pytest.raises(RuntimeError, match="adaptive_eval/score"):
        L.Trainer(max_steps=6, logger=False, enable_checkpointing=False, val_check_interval=3,
                  callbacks=[cb, EarlyStopping("adaptive_eval/score")],
                  **{**QUIET, "limit_val_batches": 2}).fit(Model(), *loaders())
    said = [r.getMessage() for r in caplog.records if "names one of AdaptiveEvalCallback's" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("adaptive_eval: EarlyStopping(monitor='adaptive_eval/score') names "
                                                 "one of AdaptiveEvalCallback's results (they go to the loggers")


# -- what a new user's Lightning set-up met (sixth probe of the adapters) ---------------------------------

class Indexed(torch.utils.data.Dataset):
    """Item i is a vector of i's: validation_step can tell which item it was handed."""

    def __len__(self):
        return 100

    def __getitem__(self, i):
        return torch.full((32,), float(i))


class ItemModel(Model):
    """Records the items and the precision context of the adapter's validation_step calls (not Lightning's)."""

    def __init__(self):
        super().__init__()
        self.items, self.contexts = [], []

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        if not self.trainer.validating:
            self.items.append(int(batch[0, 0].round()))
            out = self(batch)
            self.contexts.append((torch.is_autocast_enabled("cpu"), batch.dtype, out.dtype))
        self.log("val_loss", self.step(batch).float())


def test_the_items_of_a_validation_dataloaders_sampler_are_those_evaluated():
    """One dataset split by samplers (validation: items 80-99): the adapter indexed loader.dataset itself and
    scored training items, without a word (found by a new user)."""
    from torch.utils.data import SubsetRandomSampler

    data = Indexed()
    train = DataLoader(data, batch_size=4, sampler=SubsetRandomSampler(range(80)))
    val = DataLoader(data, batch_size=4, sampler=SubsetRandomSampler(range(80, 100)))
    torch.manual_seed(0)
    model = ItemModel()
    cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=10"])
    L.Trainer(max_steps=20, logger=False, enable_checkpointing=False, callbacks=[cb], **QUIET).fit(model, train, val)
    history = cb.evaluator.history
    assert history and history[-1].step == 19 and all(r.items == 20 for r in history)  # (the sampler's 20 items)
    assert sorted(set(model.items)) == list(range(80, 100)) and len(model.items) == 20 * len(history)


def test_lightnings_distributed_sampler_wrapper_is_seen_through_and_a_sampler_drawing_twice_is_refused():
    from lightning.fabric.utilities.distributed import DistributedSamplerWrapper
    from torch.utils.data import SubsetRandomSampler, WeightedRandomSampler

    from adaptive_eval.integrations.lightning import _items_of

    data = Indexed()
    wrapped = DataLoader(data, sampler=DistributedSamplerWrapper(SubsetRandomSampler(range(50, 60)), num_replicas=2,
                                                                 rank=1))
    view = _items_of(wrapped, None)
    assert [view[i][0].item() for i in range(len(view))] == list(range(50, 60))  # every rank's items, in order
    assert _items_of(DataLoader(data), None) is data  # (a plain loader: its dataset as it is)
    batches = _items_of(DataLoader(data, batch_sampler=[[90, 91], [92, 93, 94]]), None)  # (batch_sampler=)
    assert [batches[i][0].item() for i in range(len(batches))] == [90, 91, 92, 93, 94]
    with pytest.raises(ValueError, match="draws an item more than once"):
        _items_of(DataLoader(data, sampler=WeightedRandomSampler([1.0] * 100, 50)), None)


@pytest.mark.parametrize("precision", ["bf16-true", "bf16-mixed"])
def test_the_adapters_validation_step_runs_in_the_trainers_precision(precision):
    """As Lightning's own validation: bf16-true failed every evaluation (a float32 batch into bf16 weights), and
    bf16-mixed ran without autocast (found by a new user)."""
    train, val = loaders(n_val=40)
    torch.manual_seed(0)
    model = ItemModel()
    cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=10"],
                              val_dataset=Indexed())
    L.Trainer(max_steps=10, logger=False, enable_checkpointing=False, callbacks=[cb], precision=precision,
              **QUIET).fit(model, train, val)
    assert cb.evaluator.summary()["eval_errors"] == 0 and [r.step for r in cb.evaluator.history] == [9]
    expected = (False, torch.bfloat16, torch.bfloat16) if precision == "bf16-true" else (True, torch.float32,
                                                                                         torch.bfloat16)
    assert set(model.contexts) == {expected}


class Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter(torch.zeros(8, 32))


class _Marks(logging.Handler):
    def __init__(self):
        super().__init__()
        self.marks = []

    def emit(self, record):
        self.marks.append(record.getMessage())


class MarkedModel(Model):
    def training_step(self, batch, batch_idx):
        if batch_idx == 0:
            logging.getLogger("adaptive_eval").warning("first training step")
        return super().training_step(batch, batch_idx)


class NoValModel(MarkedModel):
    val_dataloader = L.LightningModule.val_dataloader  # (BoringModel has one)


@pytest.mark.parametrize("val", ["none", "iterable", "prebatched"])
def test_validation_data_the_adapter_cannot_use_is_said_before_the_first_step(val):
    """No validation data, or an IterableDataset: said only at the first evaluation (in a real run thousands of
    steps in), as "evaluate_fn failed" though the user gave none (found by a new user).  A loader of batch_size=None
    (each item a batch already) failed every evaluation in validation_step, with advice that did not apply."""
    batches = torch.utils.data.TensorDataset(torch.zeros(5, 4, 32))  # (5 items, each a batch of 4)
    train, _ = loaders()
    marks = _Marks()
    logging.getLogger("adaptive_eval").addHandler(marks)
    try:
        cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=5"])
        L.Trainer(max_steps=6, logger=False, enable_checkpointing=False, callbacks=[cb], **QUIET).fit(
            NoValModel() if val == "none" else MarkedModel(), train, None if val == "none" else DataLoader(
                Stream(), batch_size=4) if val == "iterable" else DataLoader(batches, batch_size=None))
    finally:
        logging.getLogger("adaptive_eval").removeHandler(marks)
    said = [m for m in marks.marks if "every evaluation of this run will fail" in m]
    assert len(said) == 1 and marks.marks.index(said[0]) < marks.marks.index("first training step")
    assert {"none": "no validation data", "iterable": "is an IterableDataset (Stream)",
            "prebatched": "has batch_size=None: each item of its dataset is a batch already"}[val] in said[0]


def test_fast_dev_run_evaluates_the_items_of_its_validation_batches_only():
    train, _ = loaders()
    model = ItemModel()
    cb = AdaptiveEvalCallback("default", overrides=FAST)
    trainer = L.Trainer(fast_dev_run=True, callbacks=[cb], enable_progress_bar=False, enable_model_summary=False,
                        accelerator="cpu")
    trainer.fit(model, train, DataLoader(Indexed(), batch_size=4))
    assert [(r.step, r.items) for r in cb.evaluator.history] == [(0, 4)]  # (one batch of 4, not 50 items)
    assert sorted(model.items) == [0, 1, 2, 3]


def test_named_callbacks_log_apart_and_an_asynchronous_final_result_at_the_last_step_trained(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from lightning.pytorch.loggers import CSVLogger

    from adaptive_eval.scheduler import FakeResourceMonitor

    train, val = loaders(n_val=40)
    torch.manual_seed(0)
    short = FakeResourceMonitor([{"accelerator_free_gb": 1.0}])
    easy = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=10"], name="easy")
    with ThreadPoolExecutor(1) as pool:
        hard = AdaptiveEvalCallback("default", overrides=FAST + [
            "trigger.freq_steps=10", "resources.enabled=true", "resources.min_free_accelerator_gb=4",
            "resources.max_deferral_steps=3"], name="hard", executor=pool, resource_monitor=short)
        logger = CSVLogger(str(tmp_path), name="run")
        L.Trainer(max_steps=20, logger=logger, enable_checkpointing=False, callbacks=[easy, hard], log_every_n_steps=1,
                  **QUIET).fit(Model(), train, val)
    rows = list(csv.DictReader(open(f"{logger.log_dir}/metrics.csv")))
    trained = max(int(r["step"]) for r in rows if r.get("train_loss"))
    for name, cb in (("easy", easy), ("hard", hard)):
        logged = [(int(r["step"]), float(r[f"adaptive_eval/{name}/step"])) for r in rows
                  if r.get(f"adaptive_eval/{name}/step")]
        assert [s for _, s in logged] == [r.step for r in cb.evaluator.history], name
        assert max(step for step, _ in logged) == trained == 19, name  # (asynchronous: it read 20, never trained)
    assert "adaptive_eval/val_loss" not in rows[0]
    assert short.calls > 0 and any(r.reason.startswith("resources:") for r in hard.evaluator.history)


class DtypeModel(Model):
    """Records the default dtype between training steps, where Lightning's own context is not entered."""

    def __init__(self):
        super().__init__()
        self.between = []

    def on_train_batch_end(self, *args):
        self.between.append(torch.get_default_dtype())
        import time

        time.sleep(0.005)  # (a worker thread's evaluation runs meanwhile)

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        import time

        time.sleep(0.01)
        self.log("val_loss", self.step(batch).float())


@pytest.mark.parametrize("how", ["asynchronous", "timeout"])
def test_an_evaluation_in_another_thread_leaves_the_processs_default_dtype_alone(how):
    """bf16-true's validation context sets the process's default dtype: entered from an asynchronous evaluation's
    worker thread, or evaluation.timeout_s's, bf16 leaked into the training thread between its steps and outlived
    the fit (found in review)."""
    from concurrent.futures import ThreadPoolExecutor

    train, val = loaders(n_val=100)
    torch.manual_seed(0)
    model = DtypeModel()
    with ThreadPoolExecutor(1) as pool:
        cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=5"] + (
            ["evaluation.timeout_s=0.1"] if how == "timeout" else []), executor=pool if how == "asynchronous" else None)
        L.Trainer(max_steps=30, logger=False, enable_checkpointing=False, callbacks=[cb], precision="bf16-true",
                  **QUIET).fit(model, train, val)
    assert torch.get_default_dtype() == torch.float32
    assert set(model.between) == {torch.float32}
    if how == "asynchronous":
        assert cb.evaluator.summary()["eval_errors"] == 0 and cb.evaluator.history[-1].step == 29
    else:  # (each evaluation of 32 items x 10 ms outlives its 0.1 s: timed out, it runs on beside training)
        assert cb.evaluator.summary()["eval_errors"] >= 1


def test_reading_a_shuffling_samplers_items_leaves_the_training_random_state_alone():
    """Iterating a custom validation sampler at on_train_start advanced the global torch generator: adding the
    callback changed the training batches (found in review)."""
    import random

    import numpy as np

    from adaptive_eval.integrations.lightning import _items_of

    class Shuffled(torch.utils.data.Sampler):
        def __init__(self, items):
            self.items = list(items)

        def __len__(self):
            return len(self.items)

        def __iter__(self):
            order = torch.randperm(len(self.items)).tolist()
            random.random()
            np.random.random()
            return iter([self.items[i] for i in order])

    torch.manual_seed(3)
    random.seed(3)
    np.random.seed(3)
    view = _items_of(DataLoader(Indexed(), sampler=Shuffled(range(40, 60))), None)
    after = (torch.rand(1).item(), random.random(), np.random.random())
    torch.manual_seed(3)
    random.seed(3)
    np.random.seed(3)
    assert after == (torch.rand(1).item(), random.random(), np.random.random())
    assert [view[i][0].item() for i in range(len(view))] == list(range(40, 60))


def test_a_shut_down_executor_is_refused_when_the_callback_is_built():
    """It was logged at on_train_start, and the run trained without an evaluation (a new user's find, with HF)."""
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(1)
    pool.shutdown()
    with pytest.raises(RuntimeError, match="is shut down"):
        AdaptiveEvalCallback("default", executor=pool)


class ReducedModel(Model):
    def validation_step(self, batch, batch_idx):
        loss = self.step(batch)
        self.log("val_loss", loss, on_step=True, on_epoch=True)  # Lightning's keys: val_loss_step, val_loss_epoch
        self.log("val_worst", loss, reduce_fx="max")


def test_an_epoch_monitor_and_a_reduce_fx_are_said_and_limit_val_batches_caps_lightnings_validation_only(
        tmp_path, caplog):
    """A new user's probe: a monitor of val_loss_epoch (logged on_step and on_epoch) was skipped without a word,
    and the first metric logged was tracked as higher-is-better; a metric logged with reduce_fx="max" was reported
    as a mean under its name, unsaid.  (Which of val_loss and a metric named val_loss_epoch the monitor means is
    not known before a result: said, not guessed; a review.)  limit_val_batches caps Lightning's own validation:
    limit_val_batches=1 keeps it cheap, and capped every evaluation at one batch when the callback read it."""
    train, val = loaders(n_train=160, n_val=40)  # batches of 4
    torch.manual_seed(0)
    model = ReducedModel()
    whole = ["policy.sample_size.initial=48", "policy.sample_size.min=48", "trigger.freq_steps=10"]  # all it may score
    cb = AdaptiveEvalCallback("default", overrides=FAST + whole + ["evaluation.on_error=raise"])
    saver = ModelCheckpoint(dirpath=tmp_path, monitor="val_loss_epoch", mode="min")
    trainer = L.Trainer(max_steps=10, logger=False, callbacks=[cb, saver], **{**QUIET, "limit_val_batches": 2})
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        trainer.fit(model, train, val)
    said = [r.getMessage() for r in caplog.records]
    assert any("monitors 'val_loss_epoch': the callback's metric is 'val_loss' if validation_step logs it on_step "
               "and on_epoch, else 'val_loss_epoch'" in m and "higher_is_better: false" in m for m in said)
    reduced = [m for m in said if "reduce_fx" in m]
    assert len(reduced) == 1 and "'val_worst' is logged with reduce_fx=max" in reduced[0]
    last = cb.evaluator.history[-1]
    assert last.step == 9 and last["val_loss"].n == 40  # the whole set, not Lightning's 2 batches of 4


class SqueezeModel(Model):
    """A binary head whose squeeze() drops the batch dimension of a batch of one item."""

    def validation_step(self, batch, batch_idx):
        logits = self(batch)[:, 0].squeeze()
        self.log("val_loss", torch.nn.functional.binary_cross_entropy_with_logits(logits, torch.ones(len(batch))))


@pytest.mark.parametrize("case", ["combined", "squeeze"])
def test_validation_data_or_steps_the_callback_cannot_score_item_by_item_say_why(case, caplog):
    """A new user's probe: a CombinedLoader in mode max_size_cycle, and a validation_step that fails on a batch of one
    item, failed every evaluation with an error that did not say why (Lightning's own validation works)."""
    from lightning.pytorch.utilities import CombinedLoader

    train, val = loaders(n_train=80, n_val=20)
    cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=10", "evaluation.on_error=raise"])
    trainer = L.Trainer(max_steps=10, logger=False, enable_checkpointing=False, callbacks=[cb], **QUIET)
    if case == "combined":
        with pytest.raises(ValueError, match=r"a CombinedLoader in mode 'max_size_cycle'.*evaluate_fn="):
            trainer.fit(Model(), train, CombinedLoader({"a": val, "b": val}, mode="max_size_cycle"))
    else:
        with caplog.at_level(logging.WARNING, logger="adaptive_eval"), pytest.raises(ValueError, match="Target size"):
            trainer.fit(SqueezeModel(), train, val)
        assert "validation_step failed on a batch of ONE item" in caplog.text


class BatchMetricModel(MetricObjectModel):
    """A validation_step whose metrics need the batch: a spread over its items (NaN on one item), and a worst case
    logged with reduce_fx="max"; its squeeze() drops the batch dimension of a batch of one item."""

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self.net(x).squeeze()
        self.log("val_loss", torch.nn.functional.cross_entropy(logits, y))
        self.log("val_spread", logits.std(0).mean())
        self.log("val_worst", torch.nn.functional.cross_entropy(logits, y, reduction="none").max(), reduce_fx="max")
        self.log_dict({"val_total": torch.nn.functional.cross_entropy(logits, y, reduction="sum")}, reduce_fx="sum")
        self.val_acc(logits, y)
        self.log("val_acc", self.val_acc)  # (a torchmetrics object: computed over the items, as ever)


class ShardReducedModel(L.LightningModule):
    """Logs a mean and, over the batch's items, a max, a min and a sum with the reduce_fx that says how to combine."""

    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(8, 4)

    def losses(self, x, y):
        return torch.nn.functional.cross_entropy(self.net(x), y, reduction="none")

    def training_step(self, batch, batch_idx):
        return self.losses(*batch).mean()

    def validation_step(self, batch, batch_idx):
        losses = self.losses(*batch)
        self.log("val_loss", losses.mean())
        self.log("val_worst", losses.max(), reduce_fx="max")
        self.log("val_best", losses.min(), reduce_fx=torch.min)
        self.log_dict({"val_total": losses.sum()}, reduce_fx="sum")

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class FinalRecording(AdaptiveEvalCallback):
    """Writes each spawned rank's last evaluation and final weights."""

    def __init__(self, out, **kw):
        super().__init__("default", **kw)
        self.out = str(out)

    def on_train_end(self, trainer, pl_module):
        super().on_train_end(trainer, pl_module)
        last = self.evaluator.history[-1]
        torch.save(pl_module.state_dict(), f"{self.out}/weights{trainer.global_rank}.pt")
        with open(f"{self.out}/rank{trainer.global_rank}.json", "w") as f:
            json.dump({"step": last.step, "items": last.items,
                       "metrics": {k: [m.mean, m.n] for k, m in last.metrics.items()}}, f)


def test_per_item_false_under_ddp_combines_a_max_a_min_and_a_sum_across_ranks_as_lightning_syncs_them(tmp_path):
    """Each rank reduces its shard's batches; the ranks' values were then averaged, weighted by their items, so a
    max of 2.31 and 2.67 read 2.65 and a sum read about half the total (a new user's probe): they combine as a max,
    a min and a sum now, over every item of the evaluation, as Lightning's sync_dist=True reduces them."""
    torch.manual_seed(0)
    train, val = Points(160, 0), Points(44, 1)  # 22 items a rank: batches of 8, 8 and 6
    whole = ["policy.sample_size.initial=48", "policy.sample_size.min=48"]  # every evaluation: the whole set
    cb = FinalRecording(tmp_path, overrides=FAST + whole + LOSS + ["trigger.freq_steps=10",
                                                                  "evaluation.on_error=raise"], per_item=False)
    spawn = DDPStrategy(start_method="spawn", timeout=datetime.timedelta(seconds=120))
    trainer = L.Trainer(max_steps=20, strategy=spawn, devices=2, num_nodes=1, logger=False,
                        enable_checkpointing=False, callbacks=[cb], **QUIET)
    trainer.fit(ShardReducedModel(), DataLoader(train, batch_size=8), DataLoader(val, batch_size=8))
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0 == r1 and r0["items"] == 44  # the same combined result on both ranks, over the whole set
    model = ShardReducedModel()
    model.load_state_dict(torch.load(tmp_path / "weights0.pt", weights_only=True))
    with torch.no_grad():
        losses = model.losses(val.x, val.y).double()
    got = r0["metrics"]
    assert got["val_worst"][0] == pytest.approx(float(losses.max()), rel=1e-6)
    assert got["val_best"][0] == pytest.approx(float(losses.min()), rel=1e-6)
    assert got["val_total"][0] == pytest.approx(float(losses.sum()), rel=1e-5)
    assert got["val_loss"][0] == pytest.approx(float(losses.mean()), rel=1e-5)  # (a mean was exact before too)
    assert {k: n for k, (_, n) in got.items()} == dict.fromkeys(got, 44)


def test_a_vector_of_one_value_per_item_under_per_item_false_is_said_as_such(caplog):
    """A probe: validation_step returning {"correct": (B,) tensor} with per_item=False was told that "several answers
    per item (k samples) need evaluate_fn="; it is one value per item, which per_item=True reads."""

    class Vector(Model):
        def validation_step(self, batch, batch_idx):
            super().validation_step(batch, batch_idx)
            return {"correct": (self(batch)[:, 0] > 0).float()}

    train, val = loaders(n_train=40, n_val=40)
    cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=5"], per_item=False)
    trainer = L.Trainer(max_steps=6, logger=False, enable_checkpointing=False, callbacks=[cb], **QUIET)
    with caplog.at_level("WARNING", logger="adaptive_eval"):
        trainer.fit(Vector(), train, val)
    said = [r.getMessage() for r in caplog.records if "'correct'" in r.getMessage()]
    assert said == ["adaptive_eval: validation_step gave 'correct' as shape (4,), not one number per batch: left out "
                    "of the evaluation; per_item=True reads one value per item (with an interval over items) (said "
                    "once)"]
    assert cb.evaluator.history and "val_loss" in cb.evaluator.history[0].metrics


def test_per_item_false_runs_validation_step_on_batches_and_reduces_as_lightnings_own_validation(caplog):
    """A step that needs several items (a metric over the batch, a squeeze()) could only be scored through an
    evaluate_fn of one's own: per_item=False batches the requested items as the validation loader does."""
    pytest.importorskip("torchmetrics")
    torch.manual_seed(0)
    train, val = Points(160, 0), Points(44, 1)  # 5 batches of 8 and one of 4: the weighted mean must weigh it less
    whole = ["policy.sample_size.initial=48", "policy.sample_size.min=48"]  # every evaluation: the whole set
    cb = AdaptiveEvalCallback("default", overrides=FAST + whole + ["trigger.freq_steps=10", "evaluation.on_error=raise",
                                                                   "evaluation.metric=val_loss",
                                                                   "evaluation.higher_is_better=false"],
                              per_item=False)
    model = BatchMetricModel()
    trainer = L.Trainer(max_steps=20, logger=False, enable_checkpointing=False, callbacks=[cb], **QUIET)
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        trainer.fit(model, DataLoader(train, batch_size=8), DataLoader(val, batch_size=8))
    assert "reduce_fx" not in caplog.text  # (max and sum are reduced as Lightning reduces them)
    ev = cb.evaluator
    last = ev.history[-1]
    assert ev.summary()["eval_errors"] == 0 and last.step == 19 and last.items == 44
    assert set(last.metrics) == {"val_loss", "val_spread", "val_worst", "val_total", "val_acc"}
    theirs = L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, accelerator="cpu").validate(
        model, DataLoader(val, batch_size=8), verbose=False)[0]
    for name in ("val_loss", "val_spread", "val_worst", "val_total", "val_acc"):
        assert last[name].n == 44 and last[name].mean == pytest.approx(theirs[name], rel=1e-5), name
    with pytest.raises(ValueError, match=r"per_item=False with val_dataset= needs batch_size="):
        AdaptiveEvalCallback(val_dataset=val, per_item=False)
    # per item, the same step fails on one item, and the warning says what to do
    cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=10", "evaluation.on_error=raise"])
    trainer = L.Trainer(max_steps=10, logger=False, enable_checkpointing=False, callbacks=[cb], **QUIET)
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"), pytest.raises(Exception):
        trainer.fit(BatchMetricModel(), DataLoader(train, batch_size=8), DataLoader(val, batch_size=8))
    assert "pass per_item=False" in caplog.text


class SharedKeyModel(BatchMetricModel):
    """Two loaders logging one key (add_dataloader_idx=False), and a returned value under a logged name."""

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x).squeeze(), y, reduction="none")
        self.log("val_shared", loss.mean(), add_dataloader_idx=False)
        self.log("val_total", loss.sum(), reduce_fx="sum")
        return {"val_total": loss.mean()}  # (Lightning logs nothing returned: the logged sum stands)


def test_per_item_false_pools_a_shared_key_keeps_a_logged_value_and_never_runs_a_lone_item_of_a_sample():
    """A review and a new user's probe: a key shared by two loaders read the last loader's value alone (n 30 of 70);
    a value validation_step returned under a logged name replaced the logged one; a sample of 17 items in batches
    of 8 left one item over, on which a squeeze() step failed (Lightning's own validation never runs one); a
    batch_size= per item, or a loader whose batch sampler has no batch size, went unsaid."""
    torch.manual_seed(0)
    sets = Points(40, 1), Points(30, 2)
    whole = ["policy.sample_size.initial=48", "policy.sample_size.min=48"]
    cb = AdaptiveEvalCallback("default", overrides=FAST + whole + ["trigger.freq_steps=10", "evaluation.on_error=raise",
                                                                   "evaluation.metric=val_shared",
                                                                   "evaluation.higher_is_better=false"],
                              per_item=False)
    model = SharedKeyModel()
    trainer = L.Trainer(max_steps=10, logger=False, enable_checkpointing=False, callbacks=[cb], **QUIET)
    trainer.fit(model, DataLoader(Points(160, 0), batch_size=8), [DataLoader(v, batch_size=8) for v in sets])
    last = cb.evaluator.history[-1]
    with torch.no_grad():
        losses = [torch.nn.functional.cross_entropy(model.net(v.x), v.y, reduction="none") for v in sets]
    pooled = torch.cat(losses)
    assert last["val_shared"].n == 70 and last["val_shared"].mean == pytest.approx(float(pooled.mean()), rel=1e-5)
    for i, loss in enumerate(losses):  # the logged sum of each loader, not the returned mean
        assert last[f"val_total/dataloader_idx_{i}"].mean == pytest.approx(float(loss.sum()), rel=1e-5)
    assert last.items == 70

    # a sample of 17 items in batches of 8: 8, 7 and 2, never a lone item for the squeeze() to drop
    class Sizes(BatchMetricModel):
        seen: list = []

        def validation_step(self, batch, batch_idx):
            self.seen.append(len(batch[0]))
            super().validation_step(batch, batch_idx)

    cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=10", "evaluation.on_error=raise",
                                                           "policy.sample_size.initial=17", "policy.sample_size.min=17",
                                                           "evaluation.metric=val_loss",
                                                           "evaluation.higher_is_better=false"], per_item=False)
    trainer = L.Trainer(max_steps=10, logger=False, enable_checkpointing=False, callbacks=[cb], **QUIET)
    trainer.fit(Sizes(), DataLoader(Points(160, 0), batch_size=8), DataLoader(Points(44, 1), batch_size=8))
    assert cb.evaluator.summary()["eval_errors"] == 0 and Sizes.seen[-3:] == [8, 7, 2]

    with pytest.raises(ValueError, match=r"batch_size= applies with per_item=False"):
        AdaptiveEvalCallback(batch_size=8)
    bucketed = DataLoader(Points(44, 1), batch_sampler=[list(range(0, 30)), list(range(30, 44))])
    cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=10", "evaluation.on_error=raise"],
                              per_item=False)
    trainer = L.Trainer(max_steps=10, logger=False, enable_checkpointing=False, callbacks=[cb], **QUIET)
    with pytest.raises(ValueError, match=r"dataloader 0 has no batch_size .*AdaptiveEvalCallback\(batch_size"):
        trainer.fit(BatchMetricModel(), DataLoader(Points(160, 0), batch_size=8), bucketed)


def test_suites_without_an_evaluate_fn_are_said_at_the_start(caplog):
    """As in the HF adapter (found by a probe there): evaluation.suites with the trainer's own validation failed
    every evaluation, each naming an evaluate_fn the user never wrote, and nothing said so at the start."""
    train, val = loaders(n_train=40, n_val=20)
    cb = AdaptiveEvalCallback("default", overrides=FAST + ["evaluation.suites={a: {size: 20}}",
                                                           "evaluation.metric=a/val_loss"])
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        L.Trainer(max_steps=4, logger=False, enable_checkpointing=False, callbacks=[cb], **QUIET).fit(Model(), train,
                                                                                                      val)
    assert "evaluation.suites (a) needs AdaptiveEvalCallback(evaluate_fn=...)" in caplog.text


def test_eval_before_train_evaluates_the_initial_weights(tmp_path):
    """As in the HF adapter (found by a probe there): trigger.eval_before_train's evaluation came after the first
    optimizer step; now the initial weights, before the first step."""
    train, val = loaders(n_train=40, n_val=20)
    torch.manual_seed(0)
    model = Model()
    with torch.no_grad():
        initial = float(torch.stack([model.step(val.dataset[i][None]) for i in range(len(val.dataset))]).mean())
    cb = AdaptiveEvalCallback("default", overrides=["trigger.eval_before_train=true", "trigger.freq_steps=50",
                                                    "policy.sample_size.enabled=false", "evaluation.sample_size=null"])
    from lightning.pytorch.loggers import CSVLogger

    logger = CSVLogger(tmp_path, name="run")
    L.Trainer(max_steps=6, logger=logger, enable_checkpointing=False, callbacks=[cb], **QUIET).fit(model, train, val)
    first = cb.evaluator.history[0]
    assert (first.step, first.reason) == (0, "before_train")
    assert first.mean("val_loss") == pytest.approx(initial, rel=1e-5)
    with open(os.path.join(logger.log_dir, "metrics.csv")) as f:  # reported once each (twice; a review)
        logged = [int(float(row["adaptive_eval/step"])) for row in csv.DictReader(f) if row.get("adaptive_eval/step")]
    assert logged == [r.step for r in cb.evaluator.history]


def test_what_the_adapters_calls_append_to_the_modules_lists_is_removed_after_them(caplog):
    """Lightning 2's pattern: validation_step appends to self.validation_step_outputs, on_validation_epoch_end reads
    and clears it.  The adapter's own calls appended to it too: Lightning's epochs read 250, 200, 600 items where it
    ran 200 (its accuracy off, which a ModelCheckpoint monitor then reads), and with limit_val_batches=0 the list
    grew for the whole run (a new user's probe)."""
    class Outputs(Model):
        def __init__(self):
            super().__init__()
            self.validation_step_outputs, self.epoch_sizes, self.record = [], [], []

        def validation_step(self, batch, batch_idx):
            loss = self.step(batch)
            self.validation_step_outputs.append(loss)
            self.record.append(self.trainer.validating)  # (a record of the user's own: kept, said)
            self.log("val_loss", loss)

        def on_validation_epoch_end(self):
            self.epoch_sizes.append(len(self.validation_step_outputs))
            self.validation_step_outputs.clear()

    train, val = loaders(n_val=40)
    cb = AdaptiveEvalCallback("default", overrides=FAST)
    model = Outputs()
    L.Trainer(max_epochs=3, logger=False, enable_checkpointing=False, callbacks=[cb], num_sanity_val_steps=0,
              enable_progress_bar=False, enable_model_summary=False, accelerator="cpu").fit(model, train, val)
    assert cb.evaluator.summary()["evals"] >= 2 and model.epoch_sizes == [10, 10, 10]  # (40 items, batches of 4)
    model, cb = Outputs(), AdaptiveEvalCallback("default", overrides=FAST)
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        L.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, callbacks=[cb], **QUIET).fit(model, train,
                                                                                                     val)
    assert cb.evaluator.summary()["samples"] > 0 and model.validation_step_outputs == []
    assert len(model.record) == cb.evaluator.summary()["samples"] and not any(model.record)
    assert "validation_step appended to self.record in adaptive_eval's own evaluation" in caplog.text


def test_a_fit_that_raises_closes_the_evaluator_and_its_tensorboard_file_holds_every_step(tmp_path):
    """A probe: when fit raised, Lightning called on_exception only, and the evaluator was never closed: its
    TensorBoard file ended steps before the crash until the interpreter exited (a notebook kept it stale), and an
    asynchronous one said at exit "call close() at the end of training"."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    class Crashes(Model):
        def training_step(self, batch, batch_idx):
            if self.global_step == 45:
                raise RuntimeError("the user's bug at step 45")
            return super().training_step(batch, batch_idx)

    train, val = loaders(n_val=40)
    cb = AdaptiveEvalCallback("default", overrides=[*FAST, f"logging.tensorboard_dir={tmp_path}",
                                                    "logging.flush_secs=3600"])
    with pytest.raises(RuntimeError, match="the user's bug at step 45"):
        L.Trainer(max_steps=100, logger=False, enable_checkpointing=False, callbacks=[cb], **QUIET).fit(
            Crashes(), train, val)
    assert cb.evaluator._closed and cb.evaluator.history
    acc = EventAccumulator(str(tmp_path)).Reload()
    assert acc.Scalars("streams/train_loss")[-1].step == 44


def test_a_validation_step_that_failed_after_one_item_calls_ran_is_not_blamed_on_one_item(caplog):
    """A probe: every failure of validation_step was said to be perhaps for its batch of one item, also one that
    came after one-item calls had run (an earlier evaluation of 50 items)."""
    class LateBug(Model):
        def validation_step(self, batch, batch_idx):
            if self.global_step >= 20:
                raise KeyError("a bug in the user's metric")
            super().validation_step(batch, batch_idx)

    train, val = loaders(n_train=160, n_val=20)
    cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=10"])
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        L.Trainer(max_steps=40, logger=False, enable_checkpointing=False, callbacks=[cb], **QUIET).fit(
            LateBug(), train, val)
    assert cb.evaluator.history and cb.evaluator.summary()["eval_errors"] >= 1
    assert "a bug in the user's metric" in caplog.text and "batch of ONE item" not in caplog.text


def test_fit_again_on_the_same_trainer_continues_the_evaluators_run():
    """A probe: fit() again on the same trainer (max_epochs raised, in a notebook) built a fresh evaluator, its
    detectors warming up again and the first fit's evaluations gone from it (its first one at freq_steps after the
    restart, 104), while a resume from the checkpoint of that step continued the schedule; it continues now."""
    train, val = loaders(n_train=160, n_val=40)
    cb, model = AdaptiveEvalCallback("default", overrides=FAST), Model()
    trainer = L.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, callbacks=[cb], **QUIET)
    trainer.fit(model, train, val)
    first = [(r.step, r.reason) for r in cb.evaluator.history]
    trainer.fit_loop.max_epochs = 4
    trainer.fit(model, train, val)
    again = [(r.step, r.reason) for r in cb.evaluator.history]
    assert again[:len(first)] == first and len(again) > len(first) and again[-1] == (159, "trigger:final")
    assert cb.evaluator.summary()["evals"] == len(again) and again[len(first)] != (104, "trigger:steps")


def test_fit_again_keeps_the_loss_twin_as_a_resume_does():
    """A probe: the module logs train_loss, which the adapter finds to be outputs["loss"] and observes alone; fit()
    again on the same trainer forgot that (the stream state was reset before it was kept), and train/loss was
    observed beside it again, one quantity under two names, which a checkpoint resume does not do."""
    seen = []

    class Spy(Callback):
        def on_train_start(self, trainer, pl_module):
            observe = cb.evaluator.observe
            cb.evaluator.observe = lambda metrics, step: (seen.append((step, sorted(metrics))), observe(metrics,
                                                                                                     step))[1]

    train, val = loaders(n_train=160, n_val=40)
    cb, model = AdaptiveEvalCallback("default", overrides=FAST), Model()
    trainer = L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, callbacks=[cb, Spy()], **QUIET)
    trainer.fit(model, train, val)
    assert seen[-1] == (39, ["train_loss"])
    trainer.fit_loop.max_epochs = 2
    trainer.fit(model, train, val)
    assert [names for step, names in seen if step >= 40] == [["train_loss"]] * 40


def test_ctrl_c_with_an_evaluation_in_flight_resumes_from_the_exception_checkpoint_as_the_run_that_never_stopped(
        tmp_path):
    """A probe: Lightning runs the checkpoint callbacks' on_exception last, after the adapter's, whose close()
    integrated the asynchronous evaluation in flight at the interrupted step: OnExceptionCheckpoint saved that
    closed state, and the resumed run's alarm evaluation came at 42, not where the uninterrupted run's came.  The
    results closing drained reach the trainer's logger too (they were in adaptive_eval's TensorBoard file only)."""
    from lightning.pytorch.callbacks import OnExceptionCheckpoint
    from lightning.pytorch.loggers import CSVLogger

    class CtrlC(Callback):
        def __init__(self, at):
            self.at = at

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if trainer.global_step == self.at:
                raise KeyboardInterrupt

    def run(name, stop=None, ckpt=None):
        train, val = loaders(n_train=320, n_val=100)
        # (every training batch alike: Lightning restarts an epoch's batches on a mid-epoch resume, so that only
        # the weights, which the checkpoint restores exactly, make the losses)
        train = DataLoader([train.dataset[0]] * 320, batch_size=4)
        torch.manual_seed(1)
        cb = AdaptiveEvalCallback("default", overrides=FAST + [
            "trigger.freq_steps=10", "evaluation.asynchronous=true", "evaluation.async_integrate_after_steps=8"])
        more = [CtrlC(stop)] if stop is not None else []
        trainer = L.Trainer(max_steps=70, logger=CSVLogger(tmp_path, name=name),
                            callbacks=[cb, DataFault(35), *more,
                                       OnExceptionCheckpoint(dirpath=tmp_path / name, filename="ctrlc")], **QUIET)
        run.cb = cb
        trainer.fit(Model(), train, val, ckpt_path=ckpt)
        return [(r.step, r.reason.split(" [")[0], r.sample_size) for r in cb.evaluator.history]

    full = run("full")
    pending = [s for s, _, _ in full if s <= 40 < s + 8]
    assert pending, full  # an evaluation in flight at the interrupted step
    with pytest.raises(SystemExit):
        run("stopped", stop=41)
    stopped = [r.step for r in run.cb.evaluator.history]
    with open(next(tmp_path.glob("stopped/*/metrics.csv"))) as f:
        logged = [int(r["step"]) for r in csv.DictReader(f) if r.get("adaptive_eval/val_loss")]
    # (the one in flight, integrated at close, logged at the last step trained, as a result drained at train end)
    assert stopped[-1] == pending[-1] and len(logged) == len(stopped) and logged[-1] == 40
    resumed = run("resumed", ckpt=str(tmp_path / "stopped" / "ctrlc.ckpt"))
    assert resumed == full


def test_ctrl_c_inside_the_adapters_own_evaluation_resumes_with_that_evaluation_at_its_step(tmp_path):
    """A probe: a Ctrl-C in validation_step while the adapter evaluated step 60 saved a checkpoint (global_step 61)
    whose state held that evaluation as interrupted; Lightning never repeats the step, so it ran a step late and
    every later decision moved, unsaid.  The weights are that step's: on_train_start makes its call again."""
    from lightning.pytorch.callbacks import OnExceptionCheckpoint

    class Interrupted(Model):
        at = None

        def validation_step(self, batch, batch_idx):
            if batch_idx == 3 and self.global_step - 1 == self.at:
                Interrupted.at = None  # (once)
                raise KeyboardInterrupt
            return super().validation_step(batch, batch_idx)

    def run(name, stop=None, ckpt=None):
        train, val = loaders(n_train=320, n_val=100)
        train = DataLoader([train.dataset[0]] * 320, batch_size=4)  # (see the asynchronous test above)
        torch.manual_seed(1)
        cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=10"])
        Interrupted.at = stop
        trainer = L.Trainer(max_steps=70, logger=False, callbacks=[
            cb, DataFault(35), OnExceptionCheckpoint(dirpath=tmp_path / name, filename="ctrlc")], **QUIET)
        run.cb = cb
        trainer.fit(Interrupted(), train, val, ckpt_path=ckpt)
        return [(r.step, r.reason, r.sample_size, r.metrics["val_loss"].mean) for r in cb.evaluator.history]

    full = run("full")
    at = full[1][0]  # the second evaluation's step
    with pytest.raises(SystemExit):
        run("stopped", stop=at)
    assert [r.step for r in run.cb.evaluator.history] == [full[0][0]]
    resumed = run("resumed", ckpt=str(tmp_path / "stopped" / "ctrlc.ckpt"))
    assert resumed == full


def test_ctrl_c_in_a_callback_before_the_adapter_resumes_with_the_steps_call_made_at_train_start(tmp_path, caplog):
    """A probe: a callback listed before the adapter raised KeyboardInterrupt in on_train_batch_end, so the
    checkpoint counted a step whose hook never reached the adapter; resumed, every later evaluation came a step late,
    and the gap was said as AReaL's save order.  The step's call is made at on_train_start, on its weights (its
    logged values are in no checkpoint: the detectors miss one value)."""
    from lightning.pytorch.callbacks import OnExceptionCheckpoint

    class CtrlC(Callback):
        def __init__(self, at):
            self.at = at

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.global_step == self.at:
                raise KeyboardInterrupt

    def run(name, stop=None, ckpt=None):
        train, val = loaders(n_train=320, n_val=100)
        train = DataLoader([train.dataset[0]] * 320, batch_size=4)  # (see the asynchronous test above)
        torch.manual_seed(1)
        cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=10"])
        first = [CtrlC(stop)] if stop is not None else []
        trainer = L.Trainer(max_steps=70, logger=False, callbacks=[
            *first, cb, DataFault(35), OnExceptionCheckpoint(dirpath=tmp_path / name, filename="ctrlc")], **QUIET)
        trainer.fit(Model(), train, val, ckpt_path=ckpt)
        return [(r.step, r.reason, r.sample_size, r.metrics["val_loss"].mean) for r in cb.evaluator.history]

    full = run("full")
    # (trainer.global_step counts the steps done: step 9's hook, an evaluation's, never reaches the adapter; its
    # loss is not observed, and the CUSUM's warm-up one value short moves its alarm a step here)
    assert full[0][:2] == (9, "trigger:steps")
    with pytest.raises(SystemExit):
        run("stopped", stop=10)
    caplog.clear()
    with caplog.at_level("INFO", logger="adaptive_eval"):
        resumed = run("resumed", ckpt=str(tmp_path / "stopped" / "ctrlc.ckpt"))
    assert resumed[0] == full[0]  # at its step, on its weights (it came at step 10, and every later one a step late)
    said = [r.getMessage() for r in caplog.records]
    assert not [m for m in said if "RecoverHandler" in m]
    assert [m for m in said if m.startswith("adaptive_eval: resumed at step 9, whose end-of-step hook never reached")]


class StateModel(Model):
    """Training state an evaluation may read: a non-persistent buffer and a plain attribute the training step sets,
    and the step itself (generation code seeds its sampling by it)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("seen", torch.zeros(()), persistent=False)
        self.temperature = 0.0

    def training_step(self, batch, batch_idx):
        self.seen.fill_(float(self.global_step))
        self.temperature = float(self.global_step)
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch, batch_idx):
        super().validation_step(batch, batch_idx)
        self.log("val_step", float(self.global_step))
        self.log("val_seen", float(self.seen))
        self.log("val_temperature", float(self.temperature))
        self.log("val_training", float(self.training))


def test_an_asynchronous_replica_reads_the_step_buffers_and_attributes_of_its_weights_as_a_synchronous_run():
    """A probe: the replica read self.global_step from the live trainer (43.98 for the weights of step 39, varying
    item by item), and kept its first copy's non-persistent buffers and plain attributes forever (19 at every
    evaluation, where the synchronous run read 19, 39, 59, ...)."""
    def run(extra):
        train, val = loaders(n_train=400, n_val=20)
        torch.manual_seed(1)
        cb = AdaptiveEvalCallback("default", overrides=FAST + [
            "trigger.freq_steps=20", "policy.interval.enabled=false", "policy.alarm.enabled=false",
            "trigger.eval_before_train=true", "evaluation.metric=val_loss", *extra])
        L.Trainer(max_steps=100, logger=False, enable_checkpointing=False, callbacks=[cb], **QUIET).fit(
            StateModel(), train, val)
        assert all(r.mean("val_training") == 0.0 for r in cb.evaluator.history)  # (in eval mode, both ways)
        return [(r.step, r.mean("val_step"), r.mean("val_seen"), r.mean("val_temperature"))
                for r in cb.evaluator.history]

    sync = run([])
    # (the initial weights, before any step, read 0: read as step + 1, an asynchronous one read 1; a review)
    assert sync[0] == (0, 0.0, 0.0, 0.0)
    assert [row[1:] for row in sync[1:]] == [(s + 1.0, float(s), float(s)) for s, *_ in sync[1:]]
    assert run(["evaluation.asynchronous=true", "evaluation.async_integrate_after_steps=5"]) == sync


def test_validating_a_checkpoint_by_hand_leaves_the_next_fit_its_own_run(tmp_path):
    """trainer.validate(ckpt_path=...) restores the callbacks' states too, and the next fit() took that checkpoint's:
    a new run started at the old run's step 79 (every call after refused as going backwards: no evaluation) and a
    continued fit lost its later evaluations (a new user's probe)."""
    saver = ModelCheckpoint(dirpath=tmp_path / "old", every_n_train_steps=20, save_top_k=-1, filename="{step}")
    train, val = loaders(n_train=160, n_val=40)
    L.Trainer(max_steps=40, logger=False, callbacks=[AdaptiveEvalCallback("default", overrides=FAST), saver],
              **QUIET).fit(Model(), train, val)

    def fresh(validate_first):
        train, val = loaders(n_train=160, n_val=40)
        torch.manual_seed(1)
        cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=6"])
        trainer = L.Trainer(max_steps=30, logger=False, enable_checkpointing=False, callbacks=[cb], **QUIET)
        if validate_first:
            trainer.validate(Model(), val, ckpt_path=str(tmp_path / "old" / "step=40.ckpt"), verbose=False)
        torch.manual_seed(2)
        trainer.fit(Model(), train, val)
        return [(r.step, r.reason) for r in cb.evaluator.history], cb._guard.errors

    plain = fresh(False)
    assert plain == fresh(True) and plain[0][-1] == (29, "trigger:final") and plain[1] == 0


def test_look_back_finds_the_steps_file_another_checkpointer_keeps_when_the_first_ones_is_gone(tmp_path):
    """Two ModelCheckpoints saving at the same steps, the first keeping its latest file only: the adapter kept the
    first file of each step, which was deleted, and the look back failed ("no such file any more") beside the
    second checkpointer's file of that step (a new user's probe)."""
    train, val = loaders(n_train=80, n_val=100)
    torch.manual_seed(1)
    cb = AdaptiveEvalCallback("default", overrides=FAST + LOSS + ["trigger.freq_steps=25"], look_back=True)
    latest = ModelCheckpoint(dirpath=tmp_path / "latest", monitor="step", mode="max", save_top_k=1,
                             every_n_train_steps=5)
    every = ModelCheckpoint(dirpath=tmp_path / "every", save_top_k=-1, every_n_train_steps=5)
    L.Trainer(max_steps=80, logger=False, callbacks=[cb, latest, every, FlipWeights(45)], **QUIET).fit(
        Model(), train, val)
    [back] = [r for r in cb.evaluator.history if r.evaluated_at is not None]
    assert back.step % 5 == 4 and back.step < 45 and cb.evaluator.summary()["eval_errors"] == 0
    assert len(list((tmp_path / "latest").iterdir())) == 1  # (the first checkpointer's file of that step is gone)


class KAnswersModel(Model):
    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self.step(batch))
        return {"val_correct": torch.ones(len(batch), 4)}  # (k = 4 answers per item)


def test_k_answers_per_item_from_validation_step_are_said_to_need_evaluate_fn(caplog):
    """validation_step returning a (batch, k) tensor of answers: left out without a word, and the run tracked val_loss
    (a new user's probe).  Said once, naming the key, its shape and what to do."""
    train, val = loaders(n_train=80, n_val=40)
    cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=5"])
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        L.Trainer(max_steps=12, logger=False, enable_checkpointing=False, callbacks=[cb], **QUIET).fit(
            KAnswersModel(), train, val)
    said = [r.getMessage() for r in caplog.records if "'val_correct' as shape (1, 4)" in r.getMessage()]
    assert len(said) == 1 and "need evaluate_fn=" in said[0]
    assert list(cb.evaluator.history[-1].metrics) == ["val_loss"]


class QuietModel(Model):
    def validation_step(self, batch, batch_idx):
        pass


def test_a_validation_step_giving_nothing_is_said_at_the_users_line_in_the_adapters_words():
    """Said as "evaluate_fn returned no metric ... a missing `return`?" (the user wrote no evaluate_fn) and attributed
    to lightning/pytorch/trainer/call.py, so the common filter of Lightning's warnings hid it: the run "evaluated"
    and tracked nothing, without a word (a new user's probe)."""
    import warnings

    train, val = loaders(n_train=80, n_val=40)
    cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=5"])
    trainer = L.Trainer(max_steps=12, logger=False, enable_checkpointing=False, callbacks=[cb], **QUIET)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", module="lightning")
        trainer.fit(QuietModel(), train, val)
    said = [w for w in caught if "validation_step logged no number and returned none" in str(w.message)]
    assert len(said) == 1 and said[0].filename == __file__ and "missing `return`" not in str(said[0].message)


def test_beside_lightnings_tensorboard_logger_the_decisions_and_alarms_are_written_there_by_default(tmp_path):
    """The README's set-up with Lightning's default logger (a TensorBoardLogger) and no logging.tensorboard_dir: the
    results reached TensorBoard as adaptive_eval/<metric>, but no decision, alarm or evaluation error did (a run whose
    evaluations all failed left no adaptive_eval tag at all; a new user's probe).  The evaluator's file goes into the
    logger's folder (one run), unless tensorboard=False."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from adaptive_eval.tensorboard import read_texts

    def run(folder, **kw):
        train, val = loaders(n_train=80, n_val=40)
        cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=5"], **kw)
        trainer = L.Trainer(max_steps=12, default_root_dir=folder, enable_checkpointing=False, callbacks=[cb],
                            log_every_n_steps=1, **QUIET)
        trainer.fit(Model(), train, val)
        return cb, trainer.logger.log_dir

    cb, folder = run(tmp_path / "on")
    assert [p.name for p in (tmp_path / "on").rglob("*.adaptive_eval")] and cb.evaluator.logger.log_dir.samefile(folder)
    decisions = read_texts(folder, "decisions")
    assert [s for s, t in decisions if t.startswith("evaluated: ")] == [r.step for r in cb.evaluator.history]
    acc = EventAccumulator(folder)
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert "controller/sample_size" in tags and not [t for t in tags if t.startswith("adaptive_eval/")]  # (once)
    cb, folder = run(tmp_path / "off", tensorboard=False)
    assert not list((tmp_path / "off").rglob("*.adaptive_eval"))

    # Two named callbacks (two eval sets): each evaluator's file a run of its own under the logger's folder, and
    # their results in the logger's run under adaptive_eval/<name>/ (both shared that folder: one eval/val_loss
    # series mixed the two sets' points, and the logger's run had no adaptive_eval/<name>/ tag; a probe)
    train, val = loaders(n_train=80, n_val=40)
    easy = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=5"], name="easy")
    hard = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=4"], name="hard")
    trainer = L.Trainer(max_steps=12, default_root_dir=tmp_path / "two", enable_checkpointing=False,
                        callbacks=[easy, hard], log_every_n_steps=1, **QUIET)
    trainer.fit(Model(), train, val)
    folder = trainer.logger.log_dir
    for cb in (easy, hard):
        mine = os.path.join(folder, cb.name)
        assert cb.evaluator.logger.log_dir.samefile(mine)
        acc = EventAccumulator(mine)
        acc.Reload()
        assert [e.step for e in acc.Scalars("eval/val_loss")] == [r.step for r in cb.evaluator.history]
    acc = EventAccumulator(folder)
    acc.Reload()
    for cb in (easy, hard):
        steps = [e.step for e in acc.Scalars(f"adaptive_eval/{cb.name}/val_loss")]
        assert steps == [r.step for r in cb.evaluator.history]


class SlowValModel(Model):
    """validation_step waits for ``release`` after its first batch: the evaluation times out and runs on."""

    release = None

    def validation_step(self, batch, batch_idx):
        out = super().validation_step(batch, batch_idx)
        if batch_idx == 0 and self.release is not None:
            self.release.wait(5)
        return out


def test_under_evaluation_timeout_s_validation_runs_on_a_replica_never_the_training_module(tmp_path):
    """As in the HF adapter (a probe): a timed-out evaluation left running in its thread went on calling the
    training module's forward beside training.  Under evaluation.timeout_s (one process) validation_step runs on a
    copy of the weights of its step."""
    import threading

    model = SlowValModel()
    SlowValModel.release = threading.Event()  # (off the instance: the replica is a deepcopy of it)
    calls = []
    model.register_forward_pre_hook(lambda m, a: calls.append((threading.current_thread().name, m is model)))
    cb = AdaptiveEvalCallback("default", overrides=FAST + ["evaluation.timeout_s=0.2", "trigger.freq_steps=4"])
    trainer = L.Trainer(max_steps=12, logger=False, callbacks=[cb], enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu")
    try:
        trainer.fit(model)
    finally:
        SlowValModel.release.set()
        SlowValModel.release = None
        for t in threading.enumerate():  # (a thread in torch code at interpreter exit aborts it)
            if t.name.startswith("adaptive_eval"):
                t.join(10)
    evaluating = [live for name, live in calls if name.startswith("adaptive_eval")]
    assert evaluating and not any(evaluating)
    assert cb.evaluator.summary()["eval_errors"] >= 1


def test_a_gradient_accumulation_scheduler_moves_the_epoch_trigger_to_each_epochs_last_step(tmp_path):
    """A session note: under a GradientAccumulationScheduler each epoch has its own optimizer steps (8 batches at
    accumulation 1, then 4: 8, 8, 2, 2, 2 steps), and one steps_per_epoch, read at the start, put the epoch trigger
    mid-epoch and the final evaluation past the run's end.  From the schedule: each epoch's last step, and the
    run's last one final."""
    from lightning.pytorch.callbacks import GradientAccumulationScheduler

    cb = AdaptiveEvalCallback("areal", overrides=FAST + ["trigger.freq_steps=null", "trigger.freq_epochs=1",
                                                         "trigger.eval_at_end=true"])
    trainer = L.Trainer(max_epochs=5, logger=False, enable_checkpointing=False, limit_train_batches=8,
                        callbacks=[GradientAccumulationScheduler({0: 1, 2: 4}), cb], **QUIET)
    trainer.fit(Model())
    assert trainer.global_step == 22 and cb.evaluator.total_steps == 22
    assert [(r.step, r.reason) for r in cb.evaluator.history] == [
        (7, "trigger:epochs"), (15, "trigger:epochs"), (17, "trigger:epochs"), (19, "trigger:epochs"),
        (21, "trigger:final")]


class FrozenNorm(Model):
    """A frozen BatchNorm the module keeps in eval mode (a pretrained backbone's, a distillation teacher's)."""

    def __init__(self):
        super().__init__()
        self.norm = torch.nn.BatchNorm1d(32)
        self.norm.requires_grad_(False)
        self.modes = []

    def forward(self, x):
        return super().forward(self.norm(x))

    def on_train_start(self):
        self.norm.eval()

    def training_step(self, batch, batch_idx):
        self.modes.append(self.norm.training)
        return super().training_step(batch, batch_idx)


def test_the_callbacks_evaluation_gives_every_submodule_back_its_own_mode(tmp_path):
    """A probe: the evaluation ended with ``pl_module.train(was_training)``, which set every submodule training, so
    a frozen BatchNorm kept in eval mode trained on after the first evaluation (35 of 60 steps), its running
    statistics moving.  Each submodule's mode is put back, as Lightning's own validation does."""
    train, _ = loaders()
    model = FrozenNorm()
    cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=10"])
    trainer = L.Trainer(max_steps=40, callbacks=[cb], logger=False, default_root_dir=tmp_path, **QUIET)
    trainer.fit(model, train, DataLoader(RandomDataset(32, 40), batch_size=4))
    assert len(cb.evaluator.history) >= 3 and len(model.modes) == 40
    assert not any(model.modes) and not model.norm.training
    assert float(model.norm.running_mean.abs().sum()) == 0.0


class MissingFeature(Model):
    def validation_step(self, batch, batch_idx):
        raise KeyError("missing_feature")


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_failing_validation_step_is_said_by_its_name_not_as_an_evaluate_fn_the_user_never_wrote(caplog,
                                                                                                   asynchronous):
    """A probe: every failure of the module's own validation_step was logged as "evaluate_fn failed at step 24"."""
    train, val = loaders(n_train=80, n_val=20)
    cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=5",
                                                           f"evaluation.asynchronous={str(asynchronous).lower()}"])
    trainer = L.Trainer(max_steps=12, logger=False, enable_checkpointing=False, callbacks=[cb], **QUIET)
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        trainer.fit(MissingFeature(), train, val)
    assert "validation_step failed at step 4 (attempt 1/1, reason trigger:steps)" in caplog.text
    assert "KeyError: 'missing_feature'" in caplog.text and "evaluate_fn failed" not in caplog.text
    assert trainer.global_step == 12 and cb.evaluator.summary()["eval_errors"] >= 2


class EpochEndMetric(Model):
    """Lightning 2's pattern: outputs gathered in validation_step, the metric logged in on_validation_epoch_end."""

    def __init__(self):
        super().__init__()
        self.validation_step_outputs = []

    def validation_step(self, batch, batch_idx):
        self.validation_step_outputs.append(self.step(batch))

    def on_validation_epoch_end(self):
        self.log("val_loss", torch.stack(self.validation_step_outputs).mean())
        self.validation_step_outputs.clear()


def test_a_metric_logged_at_the_validation_epochs_end_is_said_not_read():
    """A probe: the callback "evaluated" with no metric at all, and the one warning said validation_step logged no
    number, not that on_validation_epoch_end's log is what it does not read."""
    train, val = loaders(n_train=80, n_val=20)
    cb = AdaptiveEvalCallback("default", overrides=FAST + ["trigger.freq_steps=5"])
    trainer = L.Trainer(max_steps=10, logger=False, enable_checkpointing=False, callbacks=[cb], **QUIET)
    with pytest.warns(RuntimeWarning, match="what on_validation_epoch_end logs is not read: the callback runs "
                                            r"validation_step alone, so log the metric there \(per item, self.log\), "
                                            "or pass evaluate_fn="):
        trainer.fit(EpochEndMetric(), train, val)
    assert cb.evaluator.history and not any(r.metrics for r in cb.evaluator.history)


def test_two_asynchronous_results_integrated_at_one_step_both_reach_the_loggers(tmp_path):
    """A soak probe: two results integrated at one step (a slow one and a later fast one), and only the one
    evaluate() returns reached the trainer's loggers.  Step 1's evaluation waits for step 3's; a callback before ours
    waits, with both in flight, until both are done."""
    from lightning.pytorch.loggers import CSVLogger

    from conftest import step_one_after_step_three

    cb = AdaptiveEvalCallback("default", evaluate_fn=step_one_after_step_three(), overrides=[
        "evaluation.asynchronous=true", "evaluation.max_in_flight=2", "trigger.freq_steps=2",
        "policy.budget.enabled=false", "policy.interval.enabled=false"])

    class BothDone(Callback):
        def on_train_batch_end(self, *args, **kwargs):
            jobs = cb.evaluator._async.jobs
            if len(jobs) == 2:
                for job in jobs:
                    job.future.exception(30)

    train, val = loaders()
    logger = CSVLogger(tmp_path, name="run")
    trainer = L.Trainer(max_steps=8, logger=logger, enable_checkpointing=False, callbacks=[BothDone(), cb],
                        log_every_n_steps=1, **QUIET)
    trainer.fit(Model(), train, val)
    history = [(r.step, r.integrated_step) for r in cb.evaluator.history]
    assert history[:2] == [(1, 4), (3, 4)]  # integrated at one step
    with open(os.path.join(logger.log_dir, "metrics.csv")) as f:
        logged = [int(float(row["adaptive_eval/step"])) for row in csv.DictReader(f) if row.get("adaptive_eval/step")]
    assert logged == [step for step, _ in history]


def test_results_drained_at_our_own_on_error_raise_are_logged_at_the_step_they_were_integrated(tmp_path):
    """A review: step 4's evaluation fails under on_error: raise, raised at its integration (step 6) from our own
    hook; close() at the exception integrated steps 5 and 6, logged at step 5 (Lightning had not counted step 6 yet:
    the "last step trained" was read one early).  Each result is logged once, at the step it was integrated."""
    from lightning.pytorch.loggers import CSVLogger

    def fn(request):
        if request.step == 4:
            raise RuntimeError("grader down")
        return {"acc": [1.0, 0.0, 1.0]}

    cb = AdaptiveEvalCallback("default", evaluate_fn=fn, overrides=[
        "evaluation.asynchronous=true", "evaluation.max_in_flight=4", "trigger.freq_steps=1",
        "evaluation.async_integrate_after_steps=2", "policy.budget.enabled=false", "policy.interval.enabled=false",
        "evaluation.on_error=raise"])

    class AllDone(Callback):
        def on_train_batch_end(self, *args, **kwargs):
            for job in list(cb.evaluator._async.jobs):
                if job.future is not None:
                    job.future.exception(10)

    train, _ = loaders()
    logger = CSVLogger(tmp_path, name="run")
    with pytest.raises(RuntimeError, match="grader down"):
        L.Trainer(max_steps=20, logger=logger, enable_checkpointing=False, callbacks=[AllDone(), cb],
                  **QUIET).fit(Model(), train)
    history = [(r.step, r.integrated_step) for r in cb.evaluator.history]
    assert history[-2:] == [(5, 6), (6, 6)]
    with open(os.path.join(logger.log_dir, "metrics.csv")) as f:
        logged = [(int(float(r["adaptive_eval/step"])), int(r["step"])) for r in csv.DictReader(f)
                  if r.get("adaptive_eval/step")]
    assert logged == history

"""Run by tests/test_integrations_hf_ddp.py under ``torchrun --nproc_per_node=2``: a HF Trainer on two gloo
ranks with the callback; each rank writes what it was asked to score and what it got back.  A second
argument ``async`` evaluates asynchronously (results integrated 3 steps after submission); ``save`` checkpoints
every 10 steps and records each rank's state at every save, ``resume`` resumes from ``checkpoint-20`` and records
the state each rank resumed with.  Several modes (``save,async``) run one after the other in one launch."""

import gc
import json
import os
import sys

import torch
from transformers import Trainer, TrainingArguments

sys.path.insert(0, os.path.dirname(__file__))
from test_integrations_hf import FAST, FlipWeights, Points, Tiny, accuracy  # noqa: E402


class TinyKw(Tiny):
    """``Tiny`` with a stock HF model's forward: ``**kwargs`` (so the Trainer counts the labels of every batch, across
    the ranks with its default ``average_tokens_across_devices``), the loss over ``num_items_in_batch`` when given."""

    def forward(self, x, labels=None, num_items_in_batch=None, **kwargs):
        out = {"logits": self.net(x)}
        if labels is not None:
            loss = torch.nn.functional.cross_entropy(out["logits"], labels, reduction="sum")
            out["loss"] = loss / (num_items_in_batch if num_items_in_batch is not None else labels.numel())
        return out

from adaptive_eval.integrations.hf import AdaptiveEvalCallback  # noqa: E402


def plain(state) -> str:
    return json.dumps(state, sort_keys=True)  # (NaN != NaN: compare the text)


class Recording(AdaptiveEvalCallback):
    seen: list = []
    saved: dict = {}
    resumed_with: list = []

    def on_train_begin(self, args, state, control, **kwargs):
        super().on_train_begin(args, state, control, **kwargs)
        if state.global_step > 0:
            Recording.resumed_with.append(plain(self.evaluator.state_dict()))

    def on_save(self, args, state, control, **kwargs):
        super().on_save(args, state, control, **kwargs)
        Recording.saved[state.global_step] = plain(self.evaluator.state_dict())

    def _evaluate_on(self, request, model):
        # (model not None: a replica, or the model holding a kept checkpoint's weights)
        Recording.seen.append([request.step, request.indices(200), model is not None, request.checkpoint])
        got = super()._evaluate_on(request, model)
        if isinstance(self.trainer.model, TinyKw):  # each item's loss beside the plain forward's on it
            net, data = (model or self.trainer.model).net, self.trainer.eval_dataset
            with torch.no_grad():
                plain = [float(torch.nn.functional.cross_entropy(net(data.x[i]), data.y[i]))
                         for i in request.indices(200)]
            Recording.seen[-1].append([got["eval_loss"], plain])
        return got


def main(out: str, modes: str = "sync") -> None:
    """Each mode of ``modes`` (comma-separated) in turn, in this one launch (each into ``out/<mode>`` when there are
    several): a torchrun start (importing torch and transformers on both ranks) is most of a run's time."""
    for mode in modes.split(","):
        folder = out if "," not in modes else os.path.join(out, mode)
        os.makedirs(folder, exist_ok=True)
        Recording.seen, Recording.saved, Recording.resumed_with = [], {}, []
        run(folder, mode)
    # The Trainer leaves its gloo group alive.  Exiting with it (and the DDP reducer's pending work) can abort
    # the interpreter at finalization ("terminate called without an active exception", SIGABRT: gloo's worker
    # threads still hold work whose tensors need the GIL; pytorch/pytorch#179291), which made this test flaky
    # under load.  Drop what holds the group (run's trainers are gone with its frame), then destroy it on every rank.
    gc.collect()
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


def run(out: str, mode: str) -> None:
    rank = int(os.environ["RANK"])
    torch.manual_seed(0)
    train, held_out = Points(1600, rank), Points(200, 1)  # different training data per rank: different streams
    # lookback / flip: the output layer flipped at step 40 of 60, a checkpoint every 10 steps, with and without
    # look_back
    flip = mode in ("lookback", "flip")
    args = TrainingArguments(out, max_steps=60 if flip else 30, per_device_train_batch_size=8, learning_rate=1e-2,
                             eval_strategy="no", save_strategy="no" if mode in ("sync", "async") else "steps",
                             save_steps=10, report_to=[], disable_tqdm=True, use_cpu=True,
                             logging_steps=10, ddp_backend="gloo", seed=0)
    extra = ["evaluation.asynchronous=true", "evaluation.async_integrate_after_steps=3"] if mode == "async" else []
    if mode == "stock":  # 33 items: shards of 17 and 16
        extra = ["policy.sample_size.enabled=false", "evaluation.sample_size=33"]
    cb = Recording("default", overrides=FAST + ["trigger.freq_steps=25" if flip else "trigger.freq_steps=5"] + extra,
                   look_back=mode == "lookback")
    trainer = Trainer(TinyKw() if mode == "stock" else Tiny(), args, train_dataset=train, eval_dataset=held_out,
                      compute_metrics=accuracy, callbacks=[cb] + ([FlipWeights(40)] if flip else []))
    trainer.train(resume_from_checkpoint=os.path.join(out, "checkpoint-20") if mode == "resume" else None)
    cb = next(c for c in trainer.callback_handler.callbacks if isinstance(c, Recording))
    history = [[r.step, r.reason, r.items, r.mean("eval_accuracy"), list(r["eval_loss"].ci), r.integrated_step]
               + ([r.evaluated_at] if flip else []) for r in cb.evaluator.history]
    logged = [h["step"] for h in trainer.state.log_history if "eval_accuracy" in h]
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"history": history, "seen": Recording.seen, "world": cb.evaluator._world, "logged": logged,
                   "saved": Recording.saved, "resumed_with": Recording.resumed_with,
                   "weights": [float(x) for p in trainer.model.parameters() for x in p.detach().flatten()]}, f)
    del trainer, cb


if __name__ == "__main__":
    main(*sys.argv[1:])

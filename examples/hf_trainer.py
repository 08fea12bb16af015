"""adaptive_eval inside a Hugging Face Trainer: the three lines are marked.

A tiny classifier built from code (no download) learns a 4-class problem; at step 60 its training labels are
scrambled (a broken data pipeline).  The callback watches every step's training loss, brings an evaluation
forward when the loss jumps, evaluates the requested items of `eval_dataset` through `compute_metrics` (per
item, so each metric has an interval), evaluates the final weights, and logs through `trainer.log`, so the
results show up in `log_history` and wherever `report_to` points (here TensorBoard, in --out/tb, where
`logging.tensorboard_dir` puts why each evaluation came too: its `decisions` and `alarms` in the Text tab).

    python examples/hf_trainer.py [--steps 120] [--out runs/hf]
    torchrun --nproc_per_node=2 examples/hf_trainer.py     # two gloo ranks: each scores its shard
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import torch
from torch import nn
from transformers import Trainer, TrainerCallback, TrainingArguments

from adaptive_eval.integrations.hf import AdaptiveEvalCallback  # 1


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))

    def forward(self, x, labels=None):
        logits = self.net(x)
        return {"logits": logits} if labels is None else {"logits": logits,
                                                          "loss": nn.functional.cross_entropy(logits, labels)}


class Points(torch.utils.data.Dataset):
    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, 8, generator=g)
        self.y = self.x[:, :4].argmax(1)
        self.scrambled = False
        self.rng = np.random.default_rng(seed)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"x": self.x[i], "labels": int(self.rng.integers(4)) if self.scrambled else int(self.y[i])}


class ScrambleLabels(TrainerCallback):
    def __init__(self, dataset, at):
        self.dataset, self.at = dataset, at

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.at:
            self.dataset.scrambled = True


def accuracy(pred):
    return {"accuracy": float((pred.predictions.argmax(-1) == pred.label_ids).mean())}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--out", default="runs/hf")
    a = parser.parse_args()
    os.environ.setdefault("TENSORBOARD_LOGGING_DIR", os.path.join(a.out, "tb"))
    torch.manual_seed(0)
    train, held_out = Points(4000, 0), Points(500, 1)
    args = TrainingArguments(a.out, max_steps=a.steps, per_device_train_batch_size=16, learning_rate=1e-2,
                             eval_strategy="no", save_strategy="no", report_to=["tensorboard"], logging_steps=10,
                             disable_tqdm=True, use_cpu=True,
                             ddp_backend="gloo" if int(os.environ.get("WORLD_SIZE", "1")) > 1 else None)
    # A toy model trains in a millisecond a step, so scoring items one by one is relatively dear: let
    # evaluation take up to half the wall time (the default budget is 11%).
    cb = AdaptiveEvalCallback("default", overrides=["policy.sample_size.max=128",  # 2
                                                    "policy.budget.max_eval_fraction=0.5",
                                                    f"logging.tensorboard_dir={os.path.join(a.out, 'tb')}"])
    trainer = Trainer(Tiny(), args, train_dataset=train, eval_dataset=held_out, compute_metrics=accuracy,
                      callbacks=[cb, ScrambleLabels(train, a.steps // 2)])  # 3
    trainer.train()
    if trainer.is_world_process_zero():
        print(f"labels scrambled at step {a.steps // 2}; evaluations (step, why, items, accuracy [95% CI]):")
        for r in cb.evaluator.history:
            m = r["eval_accuracy"]
            print(f"  {r.step:4d}  {r.reason:28s} n={m.n:4d}  {m.mean:.3f} [{m.ci[0]:.3f}, {m.ci[1]:.3f}]")
    if torch.distributed.is_initialized():  # under torchrun the Trainer leaves its gloo group alive: exiting with
        del trainer, cb                     # it can abort at finalization (SIGABRT), so release it first
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()

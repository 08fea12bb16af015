"""adaptive_eval inside a Lightning Trainer: the three lines are marked.

Lightning's BoringModel regresses onto a constant; at step 60 its training target is flipped (a broken label
pipeline).  The callback watches every optimizer step's loss (and what the module logs), brings an evaluation
forward when it jumps, runs the module's own `validation_step` on the requested items of the validation set
(one item at a time: real intervals), evaluates the final weights, and writes the results to the trainer's
loggers (here a CSVLogger: --out/.../metrics.csv, columns adaptive_eval/...).

    python examples/lightning_trainer.py [--steps 120] [--out runs/lightning] [--devices 2]
"""

from __future__ import annotations

import argparse

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.demos.boring_classes import BoringModel, RandomDataset
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader

from adaptive_eval.integrations.lightning import AdaptiveEvalCallback  # 1


class Model(BoringModel):
    target = 1.0

    def step(self, batch, target=1.0):
        out = self(batch)
        return torch.nn.functional.mse_loss(out, torch.full_like(out, target))

    def training_step(self, batch, batch_idx):
        return {"loss": self.step(batch, self.target)}

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self.step(batch))


class FlipTarget(Callback):
    def __init__(self, at):
        self.at = at

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == self.at:
            pl_module.target = -1.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--out", default="runs/lightning")
    parser.add_argument("--devices", type=int, default=1)
    a = parser.parse_args()
    torch.manual_seed(0)
    train = DataLoader(RandomDataset(32, 4000), batch_size=4)
    val = DataLoader(RandomDataset(32, 500), batch_size=4)
    # A toy model trains in a millisecond a step, so scoring items one by one is relatively dear: let
    # evaluation take up to half the wall time (the default budget is 11%).  The tracked metric is a loss:
    # lower is better (else the peak policy and the pick would chase the worst checkpoint).
    cb = AdaptiveEvalCallback("default", overrides=["policy.sample_size.max=128",  # 2
                                                    "policy.budget.max_eval_fraction=0.5",
                                                    "evaluation.metric=val_loss", "evaluation.higher_is_better=false"])
    trainer = L.Trainer(max_steps=a.steps, callbacks=[cb, FlipTarget(a.steps // 2)],  # 3
                        logger=CSVLogger(a.out), limit_val_batches=0, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
                        devices=a.devices, strategy="ddp_spawn" if a.devices > 1 else "auto")
    log_dir = trainer.logger.log_dir  # (read before fit: after ddp_spawn the parent's logger picks the next version)
    trainer.fit(Model(), train, val)
    if a.devices == 1:
        print(f"target flipped at step {a.steps // 2}; evaluations (step, why, items, val_loss [95% CI]):")
        for r in cb.evaluator.history:
            m = r["val_loss"]
            print(f"  {r.step:4d}  {r.reason:28s} n={m.n:4d}  {m.mean:.3f} [{m.ci[0]:.3f}, {m.ci[1]:.3f}]")
    print(f"results also in {log_dir}/metrics.csv (adaptive_eval/* columns)")


if __name__ == "__main__":
    main()

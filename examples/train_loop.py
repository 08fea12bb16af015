"""The README's quick start as a complete, runnable loop: ``AdaptiveEvaluator`` with ``observe`` and ``evaluate``.

A logistic-regression classifier on a synthetic two-class problem, trained with SGD.  Every step the loop
hands the evaluator its cheap training statistics (``observe``: loss and gradient norm, watched by the
detectors) and asks it whether to evaluate (``evaluate``): the adaptive schedule decides when, and how many
held-out items to use, and each evaluation prints the accuracy with its 95% Wilson interval.  Halfway the
labels of the training stream flip (a fault), the detectors raise an alarm and an evaluation comes early.  That
evaluation, two steps in, still reads the old accuracy: the model has not learned the flipped labels yet, and the
accuracy falls only some 70-100 steps later, which the next looks show.  Seeded (``torch.manual_seed(0)``): the
same data and model every run.  Runs in a few seconds on a CPU, downloads nothing.
``python examples/train_loop.py [--tensorboard DIR]``
"""

from __future__ import annotations

import argparse

import torch

from adaptive_eval import AdaptiveEvaluator, EvalRequest, load_config


def make_data(n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(n, 8, generator=generator)
    w = torch.linspace(-1.0, 1.0, 8)
    y = ((x @ w + 0.5 * torch.randn(n, generator=generator)) > 0).float()
    return x, y


def main(steps: int = 600, steps_per_epoch: int = 50, tensorboard_dir: str | None = None) -> AdaptiveEvaluator:
    torch.manual_seed(0)  # the model's initial weights: the same run, the same decisions, every time
    g = torch.Generator().manual_seed(0)
    x_train, y_train = make_data(steps_per_epoch * 32, g)
    x_val, y_val = make_data(2000, g)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    overrides = ["trigger.freq_steps=50"]
    if tensorboard_dir is not None:
        overrides.append(f"logging.tensorboard_dir={tensorboard_dir}")
    evaluator = AdaptiveEvaluator.from_config(load_config(overrides=overrides), steps_per_epoch=steps_per_epoch,
                                              total_steps=steps)

    def evaluate_fn(request: EvalRequest) -> dict:  # your evaluation, on the items it is handed
        idx = torch.tensor(request.indices(len(x_val)))
        with torch.inference_mode():
            pred = (model(x_val[idx]).squeeze(-1) > 0).float()
        return {"acc": (pred == y_val[idx]).float()}  # per-sample 0/1 values

    for global_step in range(steps):
        epoch, step = divmod(global_step, steps_per_epoch)
        batch = slice(step * 32, (step + 1) * 32)
        labels = y_train[batch] if global_step < steps // 2 else 1.0 - y_train[batch]  # the fault: flipped labels
        loss = torch.nn.functional.binary_cross_entropy_with_logits(model(x_train[batch]).squeeze(-1), labels)
        opt.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        opt.step()
        evaluator.observe({"train/loss": loss.item(), "train/grad_norm": grad_norm.item()}, global_step)
        result = evaluator.evaluate(evaluate_fn, epoch, step, global_step)  # an EvalResult, or None
        if result is not None:
            acc = result["acc"]
            print(f"step {global_step:4d} ({result.reason:32s}) loss {loss.item():.3f}  "
                  f"acc {acc.mean:.3f} [{acc.ci[0]:.3f}, {acc.ci[1]:.3f}] on {acc.n} items")
    evaluator.close()
    s = evaluator.summary()
    print(f"{s['evals']} evaluations, {s['samples']} items, {s['alarms']} alarms")
    return evaluator


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--tensorboard", metavar="DIR", default=None)
    args = ap.parse_args()
    main(args.steps, tensorboard_dir=args.tensorboard)

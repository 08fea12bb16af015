"""A small training loop that wraps adaptive_eval's Evaluator (the AReaL drop-in).

A logistic-regression classifier on a synthetic two-class problem, trained with SGD; every `freq_steps`
steps the Evaluator runs `evaluate_fn` over a nested sample of a held-out set and prints the accuracy
with its 95% Wilson interval.  Runs in a few seconds on a CPU, downloads nothing.
"""

from __future__ import annotations

import torch

from adaptive_eval import EvalRequest, Evaluator, load_config


def make_data(n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(n, 8, generator=generator)
    w = torch.linspace(-1.0, 1.0, 8)
    y = ((x @ w + 0.5 * torch.randn(n, generator=generator)) > 0).float()
    return x, y


def main(steps: int = 300, steps_per_epoch: int = 50) -> None:
    g = torch.Generator().manual_seed(0)
    x_train, y_train = make_data(steps_per_epoch * 32, g)
    x_val, y_val = make_data(2000, g)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    cfg = load_config("areal", ["trigger.freq_steps=50", "evaluation.sample_size=400"])
    evaluator = Evaluator(cfg, steps_per_epoch=steps_per_epoch, total_steps=steps)

    def evaluate_fn(request: EvalRequest) -> dict:
        idx = torch.tensor(request.indices(len(x_val)))
        with torch.inference_mode():
            pred = (model(x_val[idx]).squeeze(-1) > 0).float()
        return {"acc": (pred == y_val[idx]).float()}  # per-sample 0/1 values

    first = evaluator.before_train(evaluate_fn)  # no-op unless trigger.eval_before_train
    if first is not None:
        print(f"before training: acc {first.mean('acc'):.3f}")
    for global_step in range(steps):
        epoch, step = divmod(global_step, steps_per_epoch)
        batch = slice(step * 32, (step + 1) * 32)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(
            model(x_train[batch]).squeeze(-1), y_train[batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
        result = evaluator.evaluate(evaluate_fn, epoch, step, global_step)
        if result is not None:
            acc = result["acc"]
            print(f"step {global_step:4d} ({result.reason:14s}) loss {loss.item():.3f}  "
                  f"acc {acc.mean:.3f} [{acc.ci[0]:.3f}, {acc.ci[1]:.3f}] on {acc.n} items")


if __name__ == "__main__":
    main()

"""Sharded evaluation under torchrun: every rank evaluates its part of the sample, all get the same result.

Run:  torchrun --nproc_per_node=2 examples/torchrun_eval.py  [--steps 200] [--sample-size 601]

gloo on CPU (NCCL with one GPU per rank when CUDA is available).  A logistic-regression model is trained
data-parallel (DDP); rank 0 owns the validation set and hands it to the other ranks with
``broadcast_tensor_container``; the AReaL drop-in ``Evaluator`` then evaluates a nested sample every
``freq_steps`` steps, each rank on its shard (``request.indices``), and reduces the per-sample sums
exactly, so the accuracy and its interval are those of one process evaluating the whole sample.
Every rank prints one line per evaluation, so you can see that they agree.
"""

from __future__ import annotations

import argparse
import datetime
import os

import torch
import torch.distributed as dist

from adaptive_eval import EvalRequest, Evaluator, load_config
from adaptive_eval.distributed import DistContext, broadcast_tensor_container, eval_context


def make_data(n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(n, 8, generator=generator)
    w = torch.linspace(-1.0, 1.0, 8)
    y = ((x @ w + 0.5 * torch.randn(n, generator=generator)) > 0).float()
    return x, y


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--sample-size", type=int, default=601)
    args = ap.parse_args(argv)

    use_cuda = torch.cuda.is_available()
    if use_cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    cfg = load_config(overrides=["trigger.freq_steps=50", f"evaluation.sample_size={args.sample_size}",
                                 "distributed.timeout_s=60"])
    dist.init_process_group("nccl" if use_cuda else "gloo",
                            timeout=datetime.timedelta(seconds=cfg.distributed.timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", torch.cuda.current_device()) if use_cuda else torch.device("cpu")
    try:
        torch.manual_seed(0)  # the same initial weights on every rank
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1).to(device))
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        g = torch.Generator().manual_seed(100 + rank)  # each rank trains on its own data
        x_train, y_train = make_data(args.steps * 16, g)

        # Rank 0 owns the validation set (say it read it from disk); the others receive it.
        val = None
        if rank == 0:
            x_val, y_val = make_data(2000, torch.Generator().manual_seed(7))
            val = {"x": x_val.to(device), "y": y_val.to(device), "name": "synthetic-val"}
        val = broadcast_tensor_container(val, src_rank=0)

        evaluator = Evaluator(cfg, total_steps=args.steps)
        ctx = DistContext.from_config(cfg)

        def evaluate_fn(request: EvalRequest) -> dict:
            idx = torch.tensor(request.indices(len(val["x"])), device=device)
            with eval_context(cfg.evaluation.precision, device.type):
                pred = (model.module(val["x"][idx]).squeeze(-1) > 0).float()
            return {"acc": (pred == val["y"][idx]).float()}  # this rank's per-sample 0/1 values

        for global_step in range(args.steps):
            batch = slice(global_step * 16, (global_step + 1) * 16)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(
                model(x_train[batch].to(device)).squeeze(-1), y_train[batch].to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
            result = evaluator.evaluate(evaluate_fn, 0, global_step, global_step)
            if result is not None:
                acc = result["acc"]
                mine = evaluator.last_outcome.per_rank_n["acc"][rank]
                print(f"[rank {rank}/{world}] step {global_step:4d} ({result.reason}) acc {acc.mean:.4f} "
                      f"[{acc.ci[0]:.4f}, {acc.ci[1]:.4f}] on {acc.n} items ({mine} evaluated here)", flush=True)
        # A flag seen on any rank, agreed in one small collective (how alarms are combined across ranks).
        diverged = ctx.any_true(not torch.isfinite(loss).item())
        if rank == 0:
            print(f"{val['name']}: {world} ranks, loss diverged on any rank: {diverged}")
    finally:
        # Everything that holds the process group (the DDP model's reducer, pending work) goes first: torch
        # can abort at exit ("terminate called without an active exception") when the group is destroyed
        # under a live DDP module.
        model = opt = None  # noqa: F841
        import gc

        gc.collect()
        try:
            dist.barrier()
        except Exception:  # noqa: BLE001 - a peer already gone: nothing left to wait for
            pass
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

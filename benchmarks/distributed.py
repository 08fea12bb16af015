"""Sharded evaluation speed-up on 1 and 2 ranks, and the per-step cost of the evaluators when no eval is due.

Run: python benchmarks/distributed.py [--items N] [--work K] [--steps S] [--repeat R] [--backend gloo|nccl]

A CPU-bound ``evaluate_fn`` does K small matrix products per item (one thread per rank, OMP_NUM_THREADS=1)
over N items; ``Evaluator`` shards the items over the ranks and reduces the per-sample sums exactly.
Rows:

* eval wall time on 1 and on 2 ranks (the slowest rank, best of R), the speed-up, and whether both runs
  gave the same mean to 1e-9;
* the machine's ceiling at the time of the run: the same work in 1 process and split over 2 plain
  processes (no torch.distributed).  On a shared machine this is what 2 ranks can hope for;
* per training step with no evaluation due: microseconds and torch.distributed collectives counted
  (every collective function is wrapped with a counter) for the plain ``Evaluator`` with a step
  trigger, with a time trigger (its one all-reduce keeps skewed clocks in agreement), for one
  ``DistContext.all_reduce_flags``, and for the ``AdaptiveEvaluator`` (default preset, a step trigger
  that is never due): ``evaluate`` alone, and ``observe`` of two noisy streams (the preset's detectors;
  the alarm policy off, so that a false alarm does not make an evaluation due) plus ``evaluate``.  In a
  group the adaptive evaluator spends one all-reduce per step (alarm flag, due flag, elapsed time); a
  detector alarm on any rank adds one all-gather (the alarms) and one more (rank 0's decision) at that step;
* the reduction itself: one evaluation of a trivial ``evaluate_fn`` (one all-gather).

With ``--backend nccl`` (one GPU per rank) the matrices live on the GPU; the speed-up then measures
GPU work, not CPU cores.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import os
import pickle
import tempfile
import time
from types import SimpleNamespace

from adaptive_eval.cli import _at_least

_COUNTED = ("all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "all_gather_single",
            "all_gather_object", "broadcast_object_list", "barrier", "gather", "scatter", "reduce",
            "monitored_barrier")


def _count_collectives(dist) -> collections.Counter:
    calls = collections.Counter()
    for name in _COUNTED:
        orig = getattr(dist, name, None)
        if orig is None:
            continue

        def wrapped(*args, _orig=orig, _name=name, **kwargs):
            calls[_name] += 1
            return _orig(*args, **kwargs)

        setattr(dist, name, wrapped)
    return calls


def _cfg(freq_steps=None, freq_secs=None):
    return SimpleNamespace(freq_epochs=None, freq_steps=freq_steps, freq_secs=freq_secs, eval_before_train=False)


def _rank_main(rank, world, init_file, out_dir, args):
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    from adaptive_eval import Evaluator
    from adaptive_eval.distributed import DistContext

    backend = args.backend
    if backend == "nccl":
        torch.cuda.set_device(rank)
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    ctx = DistContext(timeout_s=60)
    g = torch.Generator().manual_seed(0)
    mats = torch.randn(64, args.dim, args.dim, generator=g).to(device) / args.dim**0.5

    def evaluate_fn(request):
        values = []
        for i in request.indices(args.items):
            a = mats[i % 64]
            x = a
            for _ in range(args.work):
                x = torch.tanh(x @ a)
            values.append(float(x.sum()))
        return {"score": values}

    out = {}
    times = []
    for r in range(args.repeat):
        ev = Evaluator(_cfg(freq_steps=1))
        ctx.barrier()
        start = time.perf_counter()
        result = ev.evaluate(evaluate_fn, 0, 0, 0)
        if device.type == "cuda":
            torch.cuda.synchronize()
        elapsed = ctx.all_reduce_max([time.perf_counter() - start])[0]  # the slowest rank
        times.append(elapsed)
    out["eval_s"] = min(times)
    out["mean"] = result.mean("score")
    out["n"] = result["score"].n

    calls = _count_collectives(dist)

    def per_step(fn, steps):
        ctx.barrier()
        before = sum(calls.values())
        start = time.perf_counter()
        for s in range(steps):
            fn(s)
        us = (time.perf_counter() - start) / steps * 1e6
        return us, (sum(calls.values()) - before) / steps

    ev_steps = Evaluator(_cfg(freq_steps=10**9))
    out["step trigger"] = per_step(lambda s: ev_steps.evaluate(evaluate_fn, 0, s, s), args.steps)
    ev_time = Evaluator(_cfg(freq_secs=10**9))
    out["time trigger"] = per_step(lambda s: ev_time.evaluate(evaluate_fn, 0, s, s), args.steps)
    out["all_reduce_flags"] = per_step(lambda s: ctx.all_reduce_flags([False, s == -1]), args.steps)
    from adaptive_eval import AdaptiveEvaluator, load_config

    never_due = load_config(overrides=["trigger.freq_steps=1000000000"])
    tiny_fn = lambda req: {"x": [1.0] * len(req.indices(64))}  # noqa: E731 - runs only if an alarm fires
    adaptive = AdaptiveEvaluator.from_config(never_due)
    out["adaptive evaluate"] = per_step(lambda s: adaptive.evaluate(tiny_fn, 0, s, s), args.steps)
    AdaptiveEvaluator.from_config(never_due).observe({"train/loss": 1.0}, 0)  # imports the detectors: not timed
    adaptive = AdaptiveEvaluator.from_config(load_config(overrides=["trigger.freq_steps=1000000000",
                                                                     "policy.alarm.enabled=false"]))
    noise = torch.randn(args.steps, 2, generator=torch.Generator().manual_seed(rank)).tolist()

    def observe_and_evaluate(s):
        adaptive.observe({"train/loss": 1.0 + 0.1 * noise[s][0], "train/reward": 0.5 + 0.05 * noise[s][1]}, s)
        adaptive.evaluate(tiny_fn, 0, s, s)

    out["adaptive observe+evaluate"] = per_step(observe_and_evaluate, args.steps)
    out["adaptive alarms"] = adaptive.summary()["alarms"]
    ev_tiny = Evaluator(_cfg(freq_steps=1))
    out["reduction"] = per_step(lambda s: ev_tiny.evaluate(lambda req: {"x": [1.0] * len(req.indices(64))},
                                                         0, s, s), max(args.steps // 10, 10))
    dist.destroy_process_group()
    with open(os.path.join(out_dir, f"rank{rank}.pkl"), "wb") as f:
        pickle.dump(out, f)


def _plain_main(part, parts, out_dir, args):
    """The same evaluation work on this process's share of the items, without torch.distributed."""
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    mats = torch.randn(64, args.dim, args.dim, generator=g) / args.dim**0.5
    best = float("inf")
    for _ in range(args.repeat):
        start = time.perf_counter()
        for i in range(part, args.items, parts):
            a = mats[i % 64]
            x = a
            for _ in range(args.work):
                x = torch.tanh(x @ a)
            float(x.sum())
        best = min(best, time.perf_counter() - start)
    with open(os.path.join(out_dir, f"plain{part}.pkl"), "wb") as f:
        pickle.dump(best, f)


def ceiling(args) -> float:
    """What the machine gives now: the work on 1 process / on 2 processes at once (no collectives)."""
    import torch.multiprocessing as mp

    times = {}
    for parts in (1, 2):
        with tempfile.TemporaryDirectory() as tmp:
            procs = [mp.get_context("spawn").Process(target=_plain_main, args=(p, parts, tmp, args))
                     for p in range(parts)]
            for p in procs:
                p.start()
            for p in procs:
                p.join(600)
            times[parts] = max(pickle.load(open(os.path.join(tmp, f"plain{p}.pkl"), "rb")) for p in range(parts))
    return times[1] / times[2]


def run(world: int, args) -> dict:
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "init")
        ctx = mp.get_context("spawn")
        procs = [ctx.Process(target=_rank_main, args=(r, world, init_file, tmp, args)) for r in range(world)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(600)
        for p in procs:
            if p.is_alive():
                p.kill()
                raise TimeoutError(f"{world}-rank run did not finish")
            if p.exitcode != 0:
                raise RuntimeError(f"{world}-rank run failed (exit code {p.exitcode})")
        with open(os.path.join(tmp, "rank0.pkl"), "rb") as f:
            return pickle.load(f)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=_at_least(2), default=10000)
    ap.add_argument("--dim", type=int, default=48)
    ap.add_argument("--work", type=int, default=20, help="matrix products per item")
    ap.add_argument("--steps", type=_at_least(1), default=2000, help="training steps timed for the per-step rows")
    ap.add_argument("--repeat", type=_at_least(1), default=3)
    ap.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    args = ap.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = "1"
    one = run(1, args)
    two = run(2, args)
    limit = ceiling(args)
    same = abs(one["mean"] - two["mean"]) <= 1e-9 and one["n"] == two["n"]
    print(f"backend {args.backend}, {args.items} items x {args.work} products of {args.dim}x{args.dim}, "
          f"best of {args.repeat}; host CPUs: {os.cpu_count()}, load average {os.getloadavg()[0]:.2f}")
    print()
    print(f"{'sharded evaluation':40s} {'1 rank':>10s} {'2 ranks':>10s} {'speed-up':>9s}")
    print(f"{'eval wall time (s), slowest rank':40s} {one['eval_s']:10.3f} {two['eval_s']:10.3f} "
          f"{one['eval_s'] / two['eval_s']:8.2f}x")
    print(f"{'machine ceiling: 2 plain processes':40s} {'':10s} {'':10s} {limit:8.2f}x")
    print(f"{'same mean and n (to 1e-9)':40s} {'':10s} {str(same):>10s}")
    print()
    print(f"{'per step, no eval due':40s} {'us (1 rk)':>10s} {'us (2 rk)':>10s} {'colls/step':>11s}")
    for key, label in (("step trigger", "Evaluator, step trigger"),
                       ("time trigger", "Evaluator, time trigger (all-reduce)"),
                       ("all_reduce_flags", "DistContext.all_reduce_flags (alarms)"),
                       ("adaptive evaluate", "AdaptiveEvaluator.evaluate"),
                       ("adaptive observe+evaluate", "AdaptiveEvaluator observe(2)+evaluate"),
                       ("reduction", "one eval of a trivial fn (reduction)")):
        print(f"{label:40s} {one[key][0]:10.1f} {two[key][0]:10.1f} {two[key][1]:11.2f}")
    print(f"(detector alarms during the observe+evaluate row: {one['adaptive alarms']} on 1 rank, "
          f"{two['adaptive alarms']} on 2 ranks, every rank's counted)")


if __name__ == "__main__":
    main()

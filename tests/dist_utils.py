"""Run a function on N real CPU processes joined in a gloo process group (for tests)."""

from __future__ import annotations

import datetime
import os
import pickle
import tempfile
import traceback

import torch.distributed as dist
import torch.multiprocessing as mp


def _worker(rank, world, init_file, out_dir, fn, args, timeout_s):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    result = None
    try:
        try:
            dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                                    timeout=datetime.timedelta(seconds=timeout_s))
        except RuntimeError as exc:
            if "connectFullMesh" not in str(exc):
                raise
            # Gloo's TCP mesh set-up, before any of our code ran (torch's own CI sees it too: pytorch#53270).
            result = ("setup", f"{type(exc).__name__}: {exc}")
            return
        try:
            result = ("ok", fn(rank, world, *args))
        finally:
            if dist.is_initialized():  # (a case may destroy it itself: close() after end_training())
                dist.destroy_process_group()
    except BaseException as exc:  # noqa: BLE001 - report everything to the parent
        result = ("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
    finally:
        with open(os.path.join(out_dir, f"rank{rank}.pkl"), "wb") as f:
            pickle.dump(result, f)


def run_ranks(fn, *args, world: int = 2, timeout_s: float = 60.0, collective_timeout_s: float = 30.0):
    """Run ``fn(rank, world, *args)`` on ``world`` gloo ranks; return the list of per-rank results.

    ``fn`` must be importable (module level).  Raises ``AssertionError`` with the rank's traceback when
    a rank failed, and ``TimeoutError`` when the processes do not finish within ``timeout_s`` (a hang).
    When gloo fails to connect its TCP mesh in ``init_process_group`` (no rank has run ``fn``; a rare failure
    of gloo's set-up on a loaded machine: "Connection closed by peer"), the ranks start again, up to twice.
    """
    for attempt in range(3):
        results = _run_once(fn, args, world, timeout_s, collective_timeout_s, last=attempt == 2)
        if results is not None:
            return results
    raise AssertionError("unreachable")


_PRELOAD = ["torch", "torch.distributed", "numpy", "scipy.stats", "omegaconf", "adaptive_eval.adaptive",
            "adaptive_eval.distributed"]


def _context():
    """Ranks start from a fork server that imported torch and the library once (a spawned rank imported them
    again: about 3 s of every test's start); each rank is still a fresh process of its own, as under spawn."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)
    return ctx


def _run_once(fn, args, world, timeout_s, collective_timeout_s, last):
    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "init")
        ctx = _context()
        procs = [ctx.Process(target=_worker, args=(r, world, init_file, tmp, fn, args, collective_timeout_s))
                 for r in range(world)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout_s)
        hung = [i for i, p in enumerate(procs) if p.is_alive()]
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
        if hung:
            raise TimeoutError(f"ranks {hung} did not finish within {timeout_s} s")
        outcomes = []
        for r in range(world):
            path = os.path.join(tmp, f"rank{r}.pkl")
            if not os.path.exists(path):
                raise AssertionError(f"rank {r} died without a result (exit code {procs[r].exitcode})")
            with open(path, "rb") as f:
                outcomes.append(pickle.load(f))
        if not last and any(status == "setup" for status, _ in outcomes) \
                and all(status in ("setup", "error") for status, _ in outcomes):
            return None  # gloo's mesh set-up failed on a rank and nothing of fn ran to completion: again
        results = []
        for r, (status, value) in enumerate(outcomes):
            if status != "ok":
                raise AssertionError(f"rank {r} failed:\n{value}")
            results.append(value)
        return results


def scenario_getter(per_rank):
    """For ``run_ranks`` results that are dicts of scenario name -> ("ok", value) | ("error", traceback):
    ``get(name)`` gives every rank's value, failing with the rank's traceback if one failed."""

    def get(name):
        results = []
        for rank, res in enumerate(per_rank):
            status, value = res[name]
            assert status == "ok", f"scenario {name} failed on rank {rank}:\n{value}"
            results.append(value)
        return results

    return get

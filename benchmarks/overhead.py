"""Per-call cost of the hot path, in microseconds (printed as a table).

Run: python benchmarks/overhead.py [--number N] [--repeat R]

Rows: the plain trigger's ``check`` (step trigger; step + time trigger), the AReaL drop-in
``Evaluator.evaluate`` when no evaluation is due, and the ``AdaptiveEvaluator`` (default preset, never
due, no process group): ``evaluate`` alone, and ``observe`` of three streams through the preset's
detectors plus ``evaluate`` (the alarm policy off, so that a false alarm makes nothing due); last, AReaL's
own ``EpochStepTimeFreqCtl.check`` (its ``timeutil.py`` as shipped).

The rows are timed side by side: each of ``--repeat`` rounds times every row once (``--number`` calls),
so a change of machine load hits all rows of a round alike, and timed in CPU time of the process.  Each figure is a row's best round (the
minimum is the least noisy estimate on a shared machine); ratios compare rows of the same run.  The last
lines give the adaptive step's ratio to AReaL's ``check``: of the best rounds, and per round (median and
range over the rounds).
"""

from __future__ import annotations

import argparse
import statistics
import time
import timeit
from types import SimpleNamespace

from adaptive_eval.cli import _at_least


def rows(number: int, repeat: int) -> tuple[list[tuple[str, float]], list[float]]:
    """The table's rows ``(name, us per call)`` and the per-round ratios of the adaptive step to AReaL's check."""
    from adaptive_eval import EpochStepTimeFreqCtl, Evaluator

    stmts = []
    ctl = EpochStepTimeFreqCtl(freq_step=10**12)
    stmts.append(("EpochStepTimeFreqCtl.check (steps)", lambda: ctl.check(0, 1)))
    ctl_t = EpochStepTimeFreqCtl(freq_step=10**12, freq_sec=10**12)
    stmts.append(("EpochStepTimeFreqCtl.check (steps+time)", lambda: ctl_t.check(0, 1)))
    cfg = SimpleNamespace(freq_epochs=None, freq_steps=10**12, freq_secs=None, eval_before_train=False)
    ev = Evaluator(cfg)
    fn = lambda: None  # noqa: E731
    stmts.append(("Evaluator.evaluate, not due", lambda: ev.evaluate(fn, 0, 5, 5)))

    import itertools
    import random

    from adaptive_eval import AdaptiveEvaluator, load_config

    never_due = ["trigger.freq_steps=1000000000", "policy.alarm.enabled=false"]
    alone = AdaptiveEvaluator.from_config(load_config(overrides=never_due))
    alone_steps = itertools.count()
    stmts.append(("AdaptiveEvaluator.evaluate, not due", lambda: alone.evaluate(fn, 0, 0, next(alone_steps))))
    adaptive = AdaptiveEvaluator.from_config(load_config(overrides=never_due))
    rng = random.Random(0)
    noise = [{"train/loss": rng.gauss(1.0, 0.1), "train/reward": rng.gauss(0.5, 0.05),
              "train/response_length": rng.gauss(300.0, 20.0)} for _ in range(4096)]
    steps = itertools.count()

    def observe_and_evaluate():
        g = next(steps)
        adaptive.observe(noise[g & 4095], g)
        adaptive.evaluate(fn, 0, 0, g)

    stmts.append((ADAPTIVE_STEP, observe_and_evaluate))
    timeutil = load_areal_timeutil()
    # As AReaL's Evaluator builds it for a step schedule.  (With freq_sec set and no process group, AReaL's
    # FrequencyControl.check raises UnboundLocalError on `interval_seconds`, so the time control stays off.)
    areal = timeutil.EpochStepTimeFreqCtl(freq_epoch=None, freq_step=10**12, freq_sec=None)
    stmts.append((AREAL_CHECK, lambda: areal.check(0, 1)))
    # CPU time of this process, not wall time: on a shared machine the other processes' load then changes
    # the figures far less (on an idle machine the two are the same).
    timers = [(name, timeit.Timer(stmt, timer=time.process_time)) for name, stmt in stmts]
    rounds = {name: [] for name, _ in stmts}
    for _ in range(repeat):
        for name, timer in timers:
            rounds[name].append(timer.timeit(number) / number * 1e6)
    ratios = [ours / theirs for ours, theirs in zip(rounds[ADAPTIVE_STEP], rounds[AREAL_CHECK])]
    return [(name, min(rounds[name])) for name, _ in stmts], ratios


ADAPTIVE_STEP = "AdaptiveEvaluator observe(3 streams)+evaluate"
AREAL_CHECK = "AReaL's own EpochStepTimeFreqCtl.check"


def load_areal_timeutil():
    """AReaL's own ``areal.utils.timeutil`` module, from the installed ``areal`` package.

    ``pip install --no-deps areal`` leaves out what ``areal/__init__.py`` and ``areal.infra.platforms`` import
    (aiohttp, transformers, ...), none of which ``EpochStepTimeFreqCtl`` uses.  When the plain import fails for
    that reason, the package modules are bypassed (empty namespace modules) and ``current_platform`` (used only
    to place a tensor for the time all-reduce in a process group) is given as a CPU stand-in; the module
    measured, ``timeutil.py``, is AReaL's file as shipped.
    """
    import importlib
    import importlib.util
    import pathlib
    import sys
    import types

    try:
        return importlib.import_module("areal.utils.timeutil")
    except ImportError:
        pass
    spec = importlib.util.find_spec("areal")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("benchmarks/overhead.py compares with AReaL's own code: pip install --no-deps areal")
    root = pathlib.Path(list(spec.submodule_search_locations)[0])
    for name in ("areal", "areal.infra", "areal.utils"):
        if name not in sys.modules or not hasattr(sys.modules[name], "__path__"):
            mod = types.ModuleType(name)
            mod.__path__ = [str(root.joinpath(*name.split(".")[1:]))]
            sys.modules[name] = mod
    platforms = types.ModuleType("areal.infra.platforms")
    platforms.current_platform = types.SimpleNamespace(device_type="cpu")
    sys.modules.setdefault("areal.infra.platforms", platforms)
    path = root / "utils" / "timeutil.py"
    module_spec = importlib.util.spec_from_file_location("areal.utils.timeutil", path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules["areal.utils.timeutil"] = module
    module_spec.loader.exec_module(module)
    return module


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--number", type=_at_least(1), default=20_000, help="calls per timed loop")
    ap.add_argument("--repeat", type=_at_least(1), default=50, help="rounds (each times every row once)")
    args = ap.parse_args(argv)
    table, ratios = rows(args.number, args.repeat)
    base = table[0][1]
    areal = dict(table)[AREAL_CHECK]
    print(f"{'operation':48s} {'us/call':>9s} {'x plain':>8s} {'x AReaL':>8s}")
    for name, us in table:
        print(f"{name:48s} {us:9.3f} {us / base:8.2f} {us / areal:8.2f}")
    ratios.sort()
    median = statistics.median(ratios)
    print(f"\nadaptive step / AReaL's check: {dict(table)[ADAPTIVE_STEP] / areal:.2f}x (best rounds); per round "
          f"median {median:.2f}x, range [{ratios[0]:.2f}, {ratios[-1]:.2f}] over {len(ratios)} rounds "
          f"of {args.number} calls")


if __name__ == "__main__":
    main()

"""Per-call cost of the hot path, in microseconds (printed as a table).

Run: python benchmarks/overhead.py [--repeat N]

Rows: the plain trigger's ``check`` (step trigger; step + time trigger), the AReaL drop-in
``Evaluator.evaluate`` when no evaluation is due, and the ``AdaptiveEvaluator`` (default preset, never
due, no process group): ``evaluate`` alone, and ``observe`` of two streams through the preset's
detectors plus ``evaluate`` (the alarm policy off, so that a false alarm makes nothing due).  Each
figure is the best of ``--repeat`` timed loops (the minimum is the least noisy estimate on a shared
machine); ratios compare rows of the same run.
"""

from __future__ import annotations

import argparse
import timeit
from types import SimpleNamespace


def per_call_us(stmt, number: int, repeat: int) -> float:
    return min(timeit.repeat(stmt, number=number, repeat=repeat)) / number * 1e6


def rows(number: int, repeat: int) -> list[tuple[str, float]]:
    from adaptive_eval import EpochStepTimeFreqCtl, Evaluator

    out = []
    ctl = EpochStepTimeFreqCtl(freq_step=10**12)
    out.append(("EpochStepTimeFreqCtl.check (steps)", per_call_us(lambda: ctl.check(0, 1), number, repeat)))
    ctl_t = EpochStepTimeFreqCtl(freq_step=10**12, freq_sec=10**12)
    out.append(("EpochStepTimeFreqCtl.check (steps+time)", per_call_us(lambda: ctl_t.check(0, 1), number, repeat)))
    cfg = SimpleNamespace(freq_epochs=None, freq_steps=10**12, freq_secs=None, eval_before_train=False)
    ev = Evaluator(cfg)
    fn = lambda: None  # noqa: E731
    out.append(("Evaluator.evaluate, not due", per_call_us(lambda: ev.evaluate(fn, 0, 5, 5), number, repeat)))

    import itertools
    import random

    from adaptive_eval import AdaptiveEvaluator, load_config

    never_due = ["trigger.freq_steps=1000000000", "policy.alarm.enabled=false"]
    adaptive = AdaptiveEvaluator.from_config(load_config(overrides=never_due))
    steps = itertools.count()
    out.append(("AdaptiveEvaluator.evaluate, not due",
                per_call_us(lambda: adaptive.evaluate(fn, 0, 0, next(steps)), number, repeat)))
    adaptive = AdaptiveEvaluator.from_config(load_config(overrides=never_due))
    rng = random.Random(0)
    noise = [{"train/loss": rng.gauss(1.0, 0.1), "train/reward": rng.gauss(0.5, 0.05),
              "train/response_length": rng.gauss(300.0, 20.0)} for _ in range(4096)]
    steps = itertools.count()

    def observe_and_evaluate():
        g = next(steps)
        adaptive.observe(noise[g & 4095], g)
        adaptive.evaluate(fn, 0, 0, g)

    out.append(("AdaptiveEvaluator observe(3 streams)+evaluate", per_call_us(observe_and_evaluate, number, repeat)))
    timeutil = load_areal_timeutil()
    # As AReaL's Evaluator builds it for a step schedule.  (With freq_sec set and no process group, AReaL's
    # FrequencyControl.check raises UnboundLocalError on `interval_seconds`, so the time control stays off.)
    areal = timeutil.EpochStepTimeFreqCtl(freq_epoch=None, freq_step=10**12, freq_sec=None)
    out.append(("AReaL's own EpochStepTimeFreqCtl.check", per_call_us(lambda: areal.check(0, 1), number, repeat)))
    return out


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
    ap.add_argument("--number", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    table = rows(args.number, args.repeat)
    base = table[0][1]
    areal = dict(table)["AReaL's own EpochStepTimeFreqCtl.check"]
    print(f"{'operation':48s} {'us/call':>9s} {'x plain':>8s} {'x AReaL':>8s}")
    for name, us in table:
        print(f"{name:48s} {us:9.3f} {us / base:8.2f} {us / areal:8.2f}")


if __name__ == "__main__":
    main()

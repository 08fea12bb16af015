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
    noise = [{"train/loss": rng.gauss(1.0, 0.1), "train/reward": rng.gauss(0.5, 0.05)} for _ in range(4096)]
    steps = itertools.count()

    def observe_and_evaluate():
        g = next(steps)
        adaptive.observe(noise[g & 4095], g)
        adaptive.evaluate(fn, 0, 0, g)

    out.append(("AdaptiveEvaluator observe(2 streams)+evaluate", per_call_us(observe_and_evaluate, number, repeat)))
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--number", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    table = rows(args.number, args.repeat)
    base = table[0][1]
    print(f"{'operation':48s} {'us/call':>9s} {'x plain':>8s}")
    for name, us in table:
        print(f"{name:48s} {us:9.3f} {us / base:8.2f}")


if __name__ == "__main__":
    main()

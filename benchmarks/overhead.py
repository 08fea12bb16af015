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
    areal = ArealStyleCheck()
    out.append(("reference: AReaL-style check (3 controls)", per_call_us(lambda: areal.check(0, 1), number, repeat)))
    return out


class _ArealStyleControl:
    """What one of AReaL's FrequencyControl.check calls does per step: take a lock, read the wall clock
    with datetime.now(), count steps and compare (re-implemented here as a cost reference)."""

    def __init__(self, frequency_steps=None):
        import datetime
        import threading

        self._now = datetime.datetime.now
        self.frequency_steps = frequency_steps
        self.steps = self.last_steps = 0
        self.last_time = self._now()
        self.lock = threading.Lock()

    def check(self, steps=1):
        with self.lock:
            now = self._now()
            self.steps += steps
            interval_seconds = (now - self.last_time).total_seconds()
            interval_steps = self.steps - self.last_steps
            if self.frequency_steps is None:
                return False
            if interval_steps < self.frequency_steps:
                return False
            self.last_time, self.last_steps = now, self.steps
            return interval_seconds >= 0


class ArealStyleCheck:
    """AReaL's EpochStepTimeFreqCtl.check: three controls (epoch, step, time), each checked every step."""

    def __init__(self):
        self.ctls = (_ArealStyleControl(10**12), _ArealStyleControl(10**12), _ArealStyleControl(None))

    def check(self, epochs, steps):
        a, b, c = self.ctls
        return a.check(epochs) | b.check(steps) | c.check()


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

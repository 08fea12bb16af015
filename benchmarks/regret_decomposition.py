"""Where checkpoint-selection regret comes from: coverage (the run's true best minus the truest checkpoint a
schedule evaluated: what a perfect pick would still lose) and selection (the rest: picking among noisy estimates).

    python benchmarks/regret_decomposition.py [--half heldout|tune] [--steps 1000] [--seeds 3] [--quick]

The default preset against fixed schedules of 292 items every 50, 69 and 100 steps (about the default's
items per evaluation; 69 steps is about its cost at 1,000 steps), on the synthetic suite of
benchmarks/policies.py; evaluations SIMULATED (Binomial draws).  Points of accuracy, each run's figure averaged
over the seeds, 95% bootstrap over runs (2,000 resamples, seed 0); the paired rows difference the same runs.
About 4 minutes for the held-out half at 1,000 steps and 3 seeds.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from policies import MIN_STEPS, SPLIT, kind_of, synthetic_cases  # noqa: E402

from adaptive_eval import load_config  # noqa: E402
from adaptive_eval.tune import replay_case, score_case  # noqa: E402
from adaptive_eval.cli import _at_least  # noqa: E402

FIXED_K = (50, 69, 100)
FIXED_SIZE = 292


def decompose(case, cfg, seeds: int) -> tuple[float, float, float]:
    """(regret, coverage, samples per 1,000 steps) of one run, in points, averaged over ``seeds``."""
    truth, sign = case.truth, (1.0 if case.higher_is_better else -1.0)  # (as scoring.score_run reads regret)
    best = max(sign * v for v in truth if v == v)
    out = []
    for seed in range(seeds):
        evals = replay_case(case, cfg, seed=seed)
        score = score_case(case, evals)
        seen = [sign * truth[e["step"]] for e in evals
                if 0 <= e["step"] < len(truth) and truth[e["step"]] == truth[e["step"]]]
        coverage = best - max(seen) if seen else float("nan")
        out.append((100 * score.regret_points, 100 * coverage, score.samples * 1000 / score.steps))
    return tuple(float(v) for v in np.mean(out, axis=0))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--half", choices=sorted(SPLIT), default="heldout")
    ap.add_argument("--steps", type=_at_least(MIN_STEPS), default=1000)
    ap.add_argument("--seeds", type=_at_least(1), default=3)
    ap.add_argument("--quick", action="store_true", help="one run per kind and seed of the half, not two")
    args = ap.parse_args(argv)
    cases = synthetic_cases(args.half, args.steps, per_kind=1 if args.quick else 2)
    schedules = {"preset default": load_config("default")}
    for k in FIXED_K:
        schedules[f"fixed every {k}, {FIXED_SIZE} items"] = load_config(
            "areal", [f"trigger.freq_steps={k}", f"evaluation.sample_size={FIXED_SIZE}"])
    rows = {name: [(kind_of(c), *decompose(c, cfg, args.seeds)) for c in cases] for name, cfg in schedules.items()}
    idx = np.random.default_rng(0).integers(0, len(cases), size=(2000, len(cases)))

    def ci(values) -> str:
        v = np.asarray(values, dtype=float)
        b = v[idx].mean(axis=1)
        return f"{v.mean():.2f} [{np.percentile(b, 2.5):.2f}, {np.percentile(b, 97.5):.2f}]"

    print(f"{args.half} half, {args.steps} steps, n = {len(cases)} runs x {args.seeds} seeds (SIMULATED); points of "
          f"accuracy; 95% bootstrap over runs")
    print(f"{'schedule':28s} {'samples/1k':>10s}  {'regret':>18s}  {'coverage':>18s}  {'selection':>18s}")
    for name, r in rows.items():
        print(f"{name:28s} {np.mean([x[3] for x in r]):10.0f}  {ci([x[1] for x in r]):>18s}  "
              f"{ci([x[2] for x in r]):>18s}  {ci([x[1] - x[2] for x in r]):>18s}")
    ours = rows["preset default"]
    for name in list(rows)[1:]:
        d = [(a[2] - b[2], (a[1] - a[2]) - (b[1] - b[2])) for a, b in zip(ours, rows[name])]
        print(f"default - {name}: coverage {ci([x[0] for x in d])}, selection {ci([x[1] for x in d])}")
    print("per kind, coverage / selection (mean over its runs):")
    for kind in sorted({x[0] for x in ours}):
        line = f"  {kind:20s} n={sum(1 for x in ours if x[0] == kind):3d}"
        for name, r in rows.items():
            sel = [x for x in r if x[0] == kind]
            line += f"  {name.split(',')[0]:>16s} {np.mean([x[2] for x in sel]):.2f} / {np.mean([x[1] - x[2] for x in sel]):.2f}"
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

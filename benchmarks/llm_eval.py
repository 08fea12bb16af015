"""Multi-sample evaluation on item-response traces (all figures SIMULATED): interval coverage per item count
and samples per item, the cost to reach +-0.05 (our two-stage sizing against "all items x fixed k"), and the
detection delay on two suites of different cost against a fixed schedule of equal cost.

    python benchmarks/llm_eval.py [--reps 400] [--seeds 3] [--quick]

Items follow a Rasch model (adaptive_eval.synthetic_items): difficulty ~ Normal(shift, 1.5), ability from a
synthetic training trace; an item's samples are Bernoulli(p_i), so the samples of one item are correlated.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from adaptive_eval import load_config
from adaptive_eval.replay import replay
from adaptive_eval.scoring import confirmed_delay
from adaptive_eval.stats import summarize_outputs, two_stage_size, wilson_interval
from adaptive_eval.synthetic_items import make_item_trace
from adaptive_eval.cli import _at_least


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def coverage_table(reps: int, rng: np.random.Generator) -> None:
    """95% intervals of a suite's accuracy (500 items; the truth is the mean of its items' p_i)."""
    items_grid = (8, 16, 32, 64, 128, 256)
    k_grid = (1, 2, 4, 8, 16, 32)
    print(f"\n## Interval coverage at 95% (simulated: {reps} evaluations per cell; suite of 500 items, abilities "
          "-1.5..2, sampled per evaluation; coverage [Wilson 95% interval over the reps] / mean half-width)")
    print("| items \\ samples per item | " + " | ".join(f"k={k}" for k in k_grid) + " |")
    print("|---" * (len(k_grid) + 1) + "|")
    worst = (2.0, (0, 0))
    for n in items_grid:
        cells = []
        for k in k_grid:
            hits, width = 0, 0.0
            for _ in range(reps):
                theta = rng.uniform(-1.5, 2.0)
                p_all = _sigmoid(theta - rng.normal(0.0, 1.5, 500))
                idx = rng.choice(500, size=n, replace=False)
                x = (rng.random((n, k)) < p_all[idx][:, None]).astype(float)
                s = summarize_outputs({"s/acc": x}, None, suites={"s": idx.tolist()}, populations={"s": 500})["s/acc"]
                hits += s.ci[0] <= p_all.mean() <= s.ci[1]
                width += s.half_width
            lo, hi = wilson_interval(hits, reps)
            cov = hits / reps
            worst = min(worst, (cov, (n, k)))
            cells.append(f"{cov:.3f} [{lo:.3f}, {hi:.3f}] / {width / reps:.3f}")
        print(f"| {n} | " + " | ".join(cells) + " |")
    print(f"lowest cell: {worst[0]:.3f} at {worst[1][0]} items x {worst[1][1]} samples (goal >= 0.94)")


def cost_table(reps: int, rng: np.random.Generator) -> None:
    """Cost (samples x cost per sample) to reach +-0.05: our sizing from a 64 x 4 pilot vs all items x fixed k."""
    print(f"\n## Cost to reach +-0.05 (simulated: {reps} runs per row; ours = a 64x4 pilot, then the two-stage "
          "plan from its variances; cost in samples x cost per sample, the pilot included)")
    print("| suite (items, shift) | ability | policy | items x samples | cost | half-width (mean) | "
          "reached +-0.05 | coverage |")
    print("|---|---|---|---|---|---|---|---|")
    rows = [("math500", 500, 0.0, 1.0, 4), ("aime24", 30, 2.5, 4.0, 16)]
    for name, size, shift, cost, fixed_k in rows:
        for theta in (0.0, 2.0):
            stats = {"ours": [], "all items x k=%d" % fixed_k: []}
            for _ in range(reps):
                p_all = _sigmoid(theta - rng.normal(shift, 1.5, size))
                truth = p_all.mean()

                def measure(n, m):
                    idx = rng.choice(size, size=n, replace=False)
                    x = (rng.random((n, m)) < p_all[idx][:, None]).astype(float)
                    return summarize_outputs({"s/acc": x}, None, suites={"s": idx.tolist()},
                                             populations={"s": size})["s/acc"]

                pilot_n = min(64, size)
                pilot = measure(pilot_n, 4)
                n, m, _ = two_stage_size(pilot.between_var, pilot.within_var, 0.05, cost_per_sample=cost,
                                         population=size, max_samples_per_item=64, proportion_mean=pilot.mean)
                s = measure(n, m)
                stats["ours"].append((n, m, cost * (pilot_n * 4 + n * m), s.half_width, s.ci[0] <= truth <= s.ci[1]))
                s = measure(size, fixed_k)
                stats["all items x k=%d" % fixed_k].append((size, fixed_k, cost * size * fixed_k, s.half_width,
                                                            s.ci[0] <= truth <= s.ci[1]))
            for policy, runs in stats.items():
                a = np.array(runs, dtype=float)
                reached = float(np.mean(a[:, 3] <= 0.05))
                print(f"| {name} ({size}, +{shift:g}) | {theta:g} (acc {float(_sigmoid(theta - rng.normal(shift, 1.5, 20000)).mean()):.2f}) | "
                      f"{policy} | {np.median(a[:, 0]):.0f} x {np.median(a[:, 1]):.0f} (median) | "
                      f"{a[:, 2].mean():.0f} | {a[:, 3].mean():.3f} | {reached:.0%} | {a[:, 4].mean():.3f} |")


SUITES = ["evaluation.suites.math500.size=500", "evaluation.suites.math500.samples_per_item=4",
          "evaluation.suites.math500.cost=1", "evaluation.suites.aime24.size=30",
          "evaluation.suites.aime24.samples_per_item=16", "evaluation.suites.aime24.cost=4"]


def _eval_cost(evals, cfg) -> float:
    total = 0.0
    for e in evals:
        for suite, s in cfg.evaluation.suites.items():
            key = f"{suite}/acc"
            if key in e["n"]:
                total += e["n"][key] * e["samples_per_item"][key] * s.cost
    return total


def _same_size(evals) -> tuple[list[str], float]:
    """The fixed same-size schedule's suite settings, each suite at the adaptive run's mean items and mean
    samples per item per evaluation of it (aime24 every 4th evaluation, as the adaptive run), and the mean cost
    of one of its evaluations."""
    out, per_eval = ["evaluation.suites.aime24.every=4"], 0.0
    for suite, cost, every in (("math500", 1.0, 1), ("aime24", 4.0, 4)):
        key = f"{suite}/acc"
        rows = [e for e in evals if key in e["n"]]
        if rows:
            n = max(1, round(np.mean([e["n"][key] for e in rows])))
            k = max(1, round(np.mean([e["samples_per_item"][key] for e in rows])))
            out += [f"evaluation.suites.{suite}.sample_size={n}", f"evaluation.suites.{suite}.samples_per_item={k}"]
            per_eval += n * k * cost / every
    return out, per_eval


def delay_table(seeds: int, steps: int) -> None:
    print(f"\n## Detection delay (simulated: {seeds} item traces per kind, {steps} steps; math500 500 items cost 1, "
          "aime24 30 items cost 4 per sample; delay = steps from the onset to the first evaluation whose difference "
          "from the last one before it excludes 0 at 95% (both intervals' margins, MOVER), or whose paired "
          "difference does, scoring.confirmed_delay)")
    ours_cfg = load_config(overrides=SUITES + ["evaluation.suites.aime24.every=4", "trigger.freq_steps=25"])
    print("| kind | schedule | evals | eval cost (mean) | math500 delay (median, caught) | "
          "aime24 delay (median, caught) |")
    print("|---|---|---|---|---|---|")
    for kind in ("collapse", "silent_degradation"):
        same_label = "fixed, same size (ours' mean items x samples per suite, equal cost)"
        rows = {"ours (adaptive, two-stage, aime24 every 4th)": [], same_label: [],
                "fixed (all items x k, equal cost)": []}
        for seed in range(seeds):
            it = make_item_trace(kind, steps=steps, seed=100 + seed)
            onset = it.events[0].step
            ours = replay(it.trace, ours_cfg, seed=seed)
            cost = _eval_cost(ours.evals, ours_cfg)
            per_eval = 500 * 4 * 1.0 + 30 * 16 * 4.0
            freq = max(1, round(steps * per_eval / max(cost, 1.0)))
            fixed_cfg = load_config("areal", SUITES + [f"trigger.freq_steps={freq}"])
            fixed = replay(it.trace, fixed_cfg, seed=seed)
            # Each evaluation of ours' mean size per suite, as often as ours' cost affords.
            same_sizes, same_cost = _same_size(ours.evals)
            same_cfg = load_config("areal", SUITES + same_sizes
                                   + [f"trigger.freq_steps={max(1, round(steps * same_cost / max(cost, 1.0)))}"])
            same = replay(it.trace, same_cfg, seed=seed)
            for label, run, cfg in (("ours (adaptive, two-stage, aime24 every 4th)", ours, ours_cfg),
                                    (same_label, same, same_cfg),
                                    ("fixed (all items x k, equal cost)", fixed, fixed_cfg)):
                d = [confirmed_delay(run.evals, onset, f"{s}/acc", direction="down") for s in ("math500", "aime24")]
                rows[label].append((len(run.evals), _eval_cost(run.evals, cfg), *d))
        for label, runs in rows.items():
            def med(col):
                vals = [r[col] for r in runs if r[col] is not None]
                return f"{np.median(vals):.0f} ({len(vals)}/{len(runs)})" if vals else f"- (0/{len(runs)})"
            print(f"| {kind} | {label} | {np.mean([r[0] for r in runs]):.1f} | {np.mean([r[1] for r in runs]):.0f} | "
                  f"{med(2)} | {med(3)} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=_at_least(1), default=None, help="default 400 (--quick: 100)")
    ap.add_argument("--seeds", type=_at_least(1), default=None, help="default 3 (--quick: 1)")
    ap.add_argument("--steps", type=_at_least(20), default=600)
    ap.add_argument("--quick", action="store_true", help="100 reps, 1 seed, unless --reps or --seeds says")
    ap.add_argument("--delay-only", action="store_true", help="only the detection-delay table")
    args = ap.parse_args()
    # (a value given wins over --quick's: --quick --reps 5 ran 100 reps, unsaid; a probe)
    args.reps = args.reps if args.reps is not None else 100 if args.quick else 400
    args.seeds = args.seeds if args.seeds is not None else 1 if args.quick else 3
    rng = np.random.default_rng(2026)
    t0 = time.perf_counter()
    if not args.delay_only:
        coverage_table(args.reps, rng)
        cost_table(max(args.reps // 4, 20), rng)
    delay_table(args.seeds, args.steps)
    print(f"\n({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()

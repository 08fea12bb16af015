"""Does the picked checkpoint's 95% interval cover its true value?  Simulated coverage of ``Pick.interval``.

Run: python benchmarks/pick_coverage.py [--per-kind N] [--seed S] [--quick]

``scoring.pick_best`` picks the checkpoint with the best estimate among many evaluations, so an interval that
would be right for one evaluation chosen in advance is too narrow for the one picked for looking best (a
post-selection interval).  Here the true accuracy is known at every step, so coverage can be counted.

Runs (simulated): true accuracy curves of 1,000 steps from ``adaptive_eval.synthetic`` (kinds rise_plateau,
collapse, collapse_recovery, silent_degradation, flat; ``--per-kind`` curves each, seeds drawn from ``--seed``),
evaluated by ``adaptive_eval.tune.replay_case`` (what benchmarks/policies.py replays: Binomial draws from the true
accuracy, Wilson 95% intervals) on fixed AReaL schedules of small evaluations (32 or 100 items every 25 steps,
292 every 50) and under the default preset (adaptive: its own sizes and steps, alarms start smoother segments).

Per schedule and rule, over the runs (n): coverage = share of runs whose pick's interval holds the true value
at the picked step (``truth_step``), with a 95% Wilson interval over runs; the mean width; and how often the
truth lay below / above the interval.  Intervals of the shrunk pick (``by="shrunk"``, the default):

* before:      estimate +- 1.96 sd (the pick's own marginal posterior sd: the interval until this round);
* simult.:     the simultaneous critical value alone (95% quantile of max_i |value_i - m_i| / sd_i over every
               evaluation under the smoother's joint posterior), at the most likely walk variance;
* q+1.92:      simultaneous, at the largest walk variance within 1.92 log-likelihood of the best (a 95%
               profile-likelihood bound);
* after:       what ``pick_best`` reports now: simultaneous, at the largest walk variance within 0.5 of the best.

And of the other rules, ``by="mean"`` and ``by="bound"`` (the evaluation's own interval before; widened to the
Sidak level over the evaluations after).  Every pick (step and estimate) is the same before and after: only
the interval changed; the script checks that the picks match ``shrunk_estimates``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np

from adaptive_eval import load_config
from adaptive_eval.scoring import _Z95, _Fit, _shrunk_interval, pick_best, shrunk_estimates, truth_step
from adaptive_eval.stats import wilson_interval
from adaptive_eval.synthetic import make_trace
from adaptive_eval.tune import case_from_synthetic, replay_case
from adaptive_eval.cli import _at_least, _seed

KINDS = ("rise_plateau", "collapse", "collapse_recovery", "silent_degradation", "flat")
FIXED = ((32, 25), (100, 25), (292, 50))  # (items per evaluation, every k steps)
SHRUNK = ("before", "simult.", "q+1.92", "after")


def schedules(quick: bool) -> dict[str, object]:
    fixed = FIXED[:1] if quick else FIXED
    out = {f"fixed {n} items / {k} steps": load_config("areal", [f"trigger.freq_steps={k}", f"evaluation.sample_size={n}"])
           for n, k in fixed}
    if not quick:
        out["default preset (adaptive)"] = load_config("default")
    return out


def intervals(evals: list[dict], metric: str) -> dict[str, tuple[dict, tuple[float, float]]]:
    """{rule: (the picked evaluation, interval)} for every interval compared."""
    pick = pick_best(evals, metric)
    rows = shrunk_estimates(evals, metric)
    i = next(j for j, (e, _, _) in enumerate(rows) if e is pick.eval)
    e, est, sd = rows[i]  # (the argmax of the estimates, or one tied with it to rounding: the more precise)
    assert est == pick.estimate and est >= max(row[1] for row in rows) - 1e-6 * sd, "the pick moved"
    fit = _Fit.of(evals, metric)
    out = {"before": (e, (est - _Z95 * sd, est + _Z95 * sd)),
           "simult.": (e, _shrunk_interval(fit, i, est, drop=0.0)),
           "q+1.92": (e, _shrunk_interval(fit, i, est, drop=1.92)),
           "after": (e, pick.interval)}
    for by in ("mean", "bound"):
        p = pick_best(evals, metric, by=by)
        own = tuple((p.eval.get("ci") or {}).get(metric) or (p.eval["metrics"][metric],) * 2)
        out[f"{by}: before"] = (p.eval, own)
        out[f"{by}: after"] = (p.eval, p.interval)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-kind", type=_at_least(1), default=None,
                    help="true curves per kind (default 24; --quick: 2)")
    ap.add_argument("--seed", type=_seed, default=0, help="seed of the curves and the simulated evaluations")
    ap.add_argument("--quick", action="store_true",
                    help="2 curves per kind (unless --per-kind says), the 32-item schedule only")
    args = ap.parse_args(argv)
    per_kind = args.per_kind if args.per_kind is not None else 2 if args.quick else 24  # (a value given wins)
    t0 = time.perf_counter()
    seeds = np.random.SeedSequence(args.seed).generate_state(per_kind).tolist()
    cases = [(kind, case_from_synthetic(make_trace(kind, steps=1000, seed=int(s)))) for kind in KINDS for s in seeds]
    scheds = schedules(args.quick)
    print(f"SIMULATED: {len(cases)} true accuracy curves (adaptive_eval.synthetic, {per_kind} per kind: "
          f"{', '.join(KINDS)}; 1,000 steps; seed {args.seed}), evaluations replayed from them "
          f"(Binomial draws, Wilson 95% intervals); one run per curve and schedule")
    tally: dict[tuple[str, str], list] = {}
    for name, cfg in scheds.items():
        for r, (kind, case) in enumerate(cases):
            evals = replay_case(case, cfg, seed=r)
            for rule, (e, (low, high)) in intervals(evals, case.metric).items():
                t = truth_step(e, case.metric)
                true = case.truth[t] if t is not None else math.nan
                tally.setdefault((name, rule), []).append((low <= true <= high, high - low, true < low, true > high, kind))
    print(f"\ncoverage of the picked checkpoint's true value by Pick.interval (nominal 95%); n = runs; "
          f"[95% Wilson interval over runs]; width = mean interval width (accuracy)")
    print(f"{'schedule':34s} {'rule':14s} {'n':>4s} {'coverage':>22s} {'width':>7s} {'below':>5s} {'above':>5s}")
    for name in scheds:
        for rule in (*SHRUNK, "mean: before", "mean: after", "bound: before", "bound: after"):
            rows = tally[(name, rule)]
            n, k = len(rows), sum(row[0] for row in rows)
            low, high = wilson_interval(k, n)
            print(f"{name:34s} {rule:14s} {n:4d} {f'{k / n:.3f} [{low:.3f}, {high:.3f}]':>22s} "
                  f"{np.mean([row[1] for row in rows]):7.3f} {sum(row[2] for row in rows):5d} "
                  f"{sum(row[3] for row in rows):5d}")
    print(f"\nshrunk pick, per kind (all schedules): covered / n, before -> after")
    for kind in KINDS:
        cells = []
        for rule in ("before", "after"):
            rows = [row for name in scheds for row in tally[(name, rule)] if row[4] == kind]
            cells.append(f"{sum(row[0] for row in rows)}/{len(rows)}")
        print(f"  {kind:20s} {cells[0]:>8s} -> {cells[1]}")
    for rule in ("before", "after"):
        rows = [row for name in scheds for row in tally[(name, rule)]]
        n, k = len(rows), sum(row[0] for row in rows)
        low, high = wilson_interval(k, n)
        print(f"  {'all, ' + rule:20s} {k}/{n} = {k / n:.3f} [{low:.3f}, {high:.3f}], "
              f"mean width {np.mean([row[1] for row in rows]):.3f}")
    print(f"({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

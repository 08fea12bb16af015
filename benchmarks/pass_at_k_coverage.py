"""Coverage of the 95% interval of mean@k and pass@k on items x answers (all figures SIMULATED, seeded).

    python benchmarks/pass_at_k_coverage.py [--reps 1000] [--rows 0,2,7] [--markdown] [--json out.json]

Each row draws solve rates for 30 problems, m answers each (Bernoulli at the problem's rate), and checks the
interval of ``summarize_outputs`` against the truth it claims to cover:

- a whole suite (``suite of 30, all evaluated``, population = 30): the mean over *those* problems of their true
  pass@k, ``1 - (1 - p)^k``; the only noise is the answers.  The suite is redrawn each repetition (coverage
  averaged over suites) unless the row names a seed (one fixed suite, as measured in earlier rounds);
- 30 of a suite of 500 (finite population correction): the mean over the 500;
- 30 of a large pool (population 0): the pool's mean.

Rates: ``Beta(a,b)``; ``all0`` (never solved, p = 0); ``all1ish`` (p = 0.99); ``mix`` (40% never solved, p = 0,
30% always, p = 1, the rest Beta(2, 2)).  Per row and k: n draws, coverage with its Wilson interval, how often
the truth lay above / below the interval, and the mean interval width.  2 processes; about 25 s for 1,000 draws.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from multiprocessing import Pool

import numpy as np

from adaptive_eval.stats import summarize_outputs, wilson_interval
from adaptive_eval.cli import _at_least

# (solve rates, problems evaluated, population: 0 a large pool / N a suite of N, answers m, ks, suite seed)
ROWS = [
    ("Beta(19,1)", 30, 30, 16, (1, 4, 8), None),
    ("Beta(19,1)", 30, 30, 4, (1, 4), None),
    ("Beta(9.5,0.5)", 30, 30, 16, (1, 4, 8), 123),
    ("all0", 30, 30, 16, (1, 4, 8), None),
    ("all0", 30, 30, 4, (1, 4), None),
    ("all1ish", 30, 30, 16, (1, 4, 8), None),
    ("all1ish", 30, 30, 4, (1, 4), None),
    ("mix", 30, 30, 16, (1, 4, 8), None),
    ("mix", 30, 30, 16, (1, 4, 8), 123),
    ("Beta(2,0.6)", 30, 30, 16, (1, 4, 8), None),
    ("Beta(2,0.6)", 30, 30, 4, (1, 4), None),
    ("Beta(0.3,1.5)", 30, 30, 16, (1, 4, 8), None),
    ("Beta(0.7,0.7)", 30, 30, 16, (1, 4, 8), None),
    ("Beta(2,0.6)", 30, 500, 16, (1, 4, 8), 500),
    ("Beta(19,1)", 30, 0, 16, (1, 4, 8), None),
    ("Beta(2,0.6)", 30, 0, 16, (1, 4, 8), None),
    ("Beta(2,0.6)", 30, 0, 4, (1, 4), None),
    ("Beta(0.3,1.5)", 30, 0, 16, (1, 4, 8), None),
    ("Beta(0.1,1.9)", 30, 0, 16, (1, 4, 8), None),
    ("Beta(1.9,0.1)", 30, 0, 16, (1, 4, 8), None),
    ("Beta(0.1,1.9)", 30, 0, 4, (1, 4), None),
    ("Beta(0.1,1.9)", 30, 0, 1, (1,), None),
    ("Beta(1.9,0.1)", 30, 0, 1, (1,), None),
]


def rates(dist: str, size: int, rng: np.random.Generator) -> np.ndarray:
    if dist == "all0":
        return np.zeros(size)
    if dist == "all1ish":
        return np.full(size, 0.99)
    if dist == "mix":
        u, p = rng.random(size), rng.beta(2.0, 2.0, size)
        p[u < 0.4], p[u > 0.7] = 0.0, 1.0
        return p
    a, b = (float(x) for x in dist[len("Beta("):-1].split(","))
    return rng.beta(a, b, size)


def _pass(p: np.ndarray, k: int) -> np.ndarray:
    return 1.0 - (1.0 - p) ** k


def where(r: dict) -> str:
    if r["population"] == r["n"]:
        fixed = f", one suite (seed {r['fixed']})" if r["fixed"] is not None else ""
        return f"suite of {r['n']}, all evaluated{fixed}"
    return f"{r['n']} of {r['population'] or 'a large pool'}"


def one_row(args) -> list[dict]:
    i, (dist, n, population, m, ks, fixed), reps = args
    logging.disable(logging.WARNING)  # (no warnings expected; keep worker output to the table)
    rng = np.random.default_rng(10_000 + i)
    truth, suite, pool = {}, None, None
    if population == 0:
        pool = rates(dist, 200_000, np.random.default_rng(7))
    elif population > n:
        pool = rates(dist, population, np.random.default_rng(fixed))
    elif fixed is not None:
        suite = rates(dist, population, np.random.default_rng(fixed))
    if pool is not None:
        truth = {k: float(np.mean(_pass(pool, k))) for k in ks}
    above = {k: 0 for k in ks}
    below = {k: 0 for k in ks}
    widths = {k: [] for k in ks}
    for _ in range(reps):
        if population == 0:
            p = pool[rng.integers(0, pool.size, n)]
        elif population > n:
            p = pool[rng.choice(population, n, replace=False)]
        else:
            p = suite if suite is not None else rates(dist, population, rng)
            truth = {k: float(np.mean(_pass(p, k))) for k in ks}
        x = (rng.random((n, m)) < p[:, None]).astype(float)
        if population:
            out = summarize_outputs({"s/acc": x}, None, pass_at_k={"s": ks}, suites={"s": list(range(n))},
                                    populations={"s": population})
        else:
            out = summarize_outputs({"s/acc": x}, None, pass_at_k=ks)
        for k in ks:
            lo, hi = out[f"s/acc/pass@{k}" if k > 1 else "s/acc"].ci
            above[k] += truth[k] > hi
            below[k] += truth[k] < lo
            widths[k].append(hi - lo)
    res = []
    for k in ks:
        hits = reps - above[k] - below[k]
        lo, hi = wilson_interval(hits, reps)
        res.append(dict(row=i, rates=dist, n=n, population=population, m=m, k=k, fixed=fixed, reps=reps,
                        coverage=hits / reps, cov_lo=lo, cov_hi=hi, truth_above=above[k] / reps,
                        truth_below=below[k] / reps, width=float(np.mean(widths[k]))))
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=_at_least(1), default=1000, help="draws per row (default 1000)")
    ap.add_argument("--rows", default="", help="comma-separated row numbers (default: all)")
    ap.add_argument("--markdown", action="store_true", help="a markdown table")
    ap.add_argument("--json", default="", help="also write the rows here")
    args = ap.parse_args()
    try:
        # (a row given twice ran and printed twice; a probe)
        picked = list(dict.fromkeys(int(r) for r in args.rows.split(","))) if args.rows else range(len(ROWS))
    except ValueError:
        ap.error(f"--rows: comma-separated row numbers, got {args.rows!r}")
    if any(not 0 <= r < len(ROWS) for r in picked):
        ap.error(f"--rows: the rows are 0-{len(ROWS) - 1}, got {args.rows}")
    if args.json:  # (a folder that does not exist: a traceback after the whole computation; a probe)
        if os.path.isdir(args.json):
            ap.error(f"--json {args.json}: a folder; give the file to write")
        folder = os.path.dirname(os.path.abspath(args.json))
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as exc:
            ap.error(f"--json {args.json}: cannot write there ({exc})")
        if not os.access(folder, os.W_OK):
            ap.error(f"--json {args.json}: the folder {folder} is not writable")
    start, out = time.time(), []
    print(f"SIMULATED: seeded draws of items x answers, {args.reps} per row; coverage of the 95% interval")
    if args.markdown:
        print("| row | solve rates | problems | answers | metric | n | coverage [95%] | truth above / below | width |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    with Pool(2) as workers:
        for res in workers.imap(one_row, [(i, ROWS[i], args.reps) for i in picked]):
            for r in res:
                out.append(r)
                metric = "mean@k" if r["k"] == 1 else f"pass@{r['k']}"
                cov = f"{r['coverage']:.3f} [{r['cov_lo']:.3f}, {r['cov_hi']:.3f}]"
                miss = f"{r['truth_above']:.3f} / {r['truth_below']:.3f}"
                if args.markdown:
                    print(f"| {r['row']} | {r['rates']} | {where(r)} | {r['m']} | {metric} | {r['reps']} | {cov} | "
                          f"{miss} | {r['width']:.4f} |", flush=True)
                else:
                    print(f"{r['row']:2d} {r['rates']:14s} {where(r):44s} m={r['m']:2d} {metric:7s} n={r['reps']} "
                          f"coverage {cov}  truth above/below {miss}  width {r['width']:.4f}", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=0)
    print(f"{time.time() - start:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()

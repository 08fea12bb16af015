"""How often does a change that never happened get "confirmed"?  (SIMULATED.)

Run: python benchmarks/false_confirmations.py [--events-per-run 5] [--preset default]

``adaptive-eval check`` and ``assert_confirmed`` call an event confirmed at the first evaluation after it whose
95% interval lies wholly below the eval ground truth just before it (direction "down"; ``ReplayRun.
confirmed_after``, as the benchmarks score a delay).  That is one test per evaluation, not corrected for looking
again, and a run without a change still wanders: some made-up events are "confirmed" by chance, more the longer
the ``within`` window.  This prints how many, on the held-out half's runs without an event (flat, spikes and
rise_plateau; suite seeds 4-7, 2 runs per kind), made-up events at random steps 100-499 (seeded), the
preset's own replay (seed 0); 95% bootstrap intervals over runs (the events of one run share its evaluations).
"""

from __future__ import annotations

import argparse

import numpy as np

from adaptive_eval.synthetic import suite
from adaptive_eval.testing import Event, replay_trace

WINDOWS = (25, 50, 100, 500)
QUIET_KINDS = ("flat", "spikes", "rise_plateau")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events-per-run", type=int, default=5)
    ap.add_argument("--preset", default="default")
    ap.add_argument("--boot", type=int, default=2000)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    hits = []  # runs x windows x events
    for seed in (4, 5, 6, 7):
        for st in suite(seed, per_kind=2):
            if not st.name.startswith(QUIET_KINDS):
                continue
            run = replay_trace(st, args.preset)
            events = rng.integers(100, 500, size=args.events_per_run)
            row = []
            for direction in ("down", None):
                delays = [run.confirmed_after(Event(int(e), "made-up", direction)) for e in events]
                row.append([[d is not None and d <= w for d in delays] for w in WINDOWS])
            hits.append(row)
    a = np.asarray(hits, dtype=float)  # runs x direction x windows x events
    boot = np.random.default_rng(1)
    print(f"made-up events on runs without a change (SIMULATED): n = {a.shape[0]} runs x {a.shape[3]} events, "
          f"preset {args.preset}; 'confirmed' by chance, 95% interval over runs resampled")
    print(f"{'within':>8s}  {'direction down':>28s}  {'either way (no direction)':>28s}")
    for j, w in enumerate(WINDOWS):
        cells = []
        for k in range(2):
            x = a[:, k, j, :]
            bs = [x[boot.integers(0, len(x), len(x))].mean() for _ in range(args.boot)]
            cells.append(f"{int(x.sum())}/{x.size} = {x.mean():.0%} [{np.percentile(bs, 2.5):.0%}, "
                         f"{np.percentile(bs, 97.5):.0%}]")
        print(f"{w:8d}  {cells[0]:>28s}  {cells[1]:>28s}")


if __name__ == "__main__":
    main()

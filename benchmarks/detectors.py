"""Detectors on simulated streams: false-alarm run length, detection delay and speed (printed as a table).

Run: python benchmarks/detectors.py [--quick] [--jobs N] [--only cusum,bocpd]
     python benchmarks/detectors.py --real    (the real-stream table only; see real_streams)

For every registered detector built with ``arl0`` = 1,000 and 10,000 (its calibrated threshold):

* ARL0: the mean number of updates, from a fresh detector, to the first alarm on i.i.d. N(0, 1) data
  (each run is capped at 5 x arl0; capped runs count as the cap, so the figure errs low), with its
  standard error and the number of runs;
* delay: the median number of post-change values up to and including the alarming one (1 = the first
  shifted value raised it) for a mean shift of 0.5, 1, 2 and 3 sd at step 300, beside the asymptotic lower
  bound ln(ARL0) / (shift^2 / 2) (Lorden; the same convention counts post-change values); runs that alarm
  before the change are redrawn; a run that has not alarmed 2,000 values after the change counts as
  2,000 (">" marks a censored median);
* updates/s: plain ``update`` calls on N(0, 1) data in a loop (best of 3), one process.

Targets (issue 3): measured ARL0 >= 0.7 x arl0; cusum and bocpd delays within 1.5 x the bound for shifts
>= 1 sd; cusum, page_hinkley, spike and nonfinite at >= 200,000 updates/s.  ``nonfinite`` has no threshold
and never alarms on finite data, so it only gets a speed.  Slow detectors (bocpd, kswin, window_test) get
fewer runs; the run counts are printed.  Everything is seeded.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

SHIFTS = (0.5, 1.0, 2.0, 3.0)
ARL0S = (1000, 10000)
CHANGE_AT = 300
POST_CAP = 2000
# Runs per (detector, arl0) for the ARL and per shift for the delays: (ARL runs at 1e3, at 1e4, delay runs).
RUNS = {
    "cusum": (400, 200, 200),
    "page_hinkley": (400, 200, 200),
    "adwin": (300, 150, 200),
    "spike": (400, 200, 200),
    "bocpd": (300, 60, 100),
    "kswin": (40, 12, 40),
    "window_test": (200, 40, 100),
}
FAST = ("cusum", "page_hinkley", "spike", "nonfinite")
COST_US = {"cusum": 0.5, "page_hinkley": 1.0, "adwin": 0.7, "spike": 0.8, "bocpd": 27.0, "kswin": 200.0,
           "window_test": 50.0}  # rough time per update, to schedule the longest jobs first


def first_alarm(det, values, start=0) -> int | None:
    update = det.update
    for step, v in enumerate(values, start):
        if update(v, step) is not None:
            return step
    return None


def measure_arl(name: str, arl0: float, runs: int) -> tuple[float, float, int, int]:
    from adaptive_eval.detectors import make_detector

    cap = int(5 * arl0)
    lengths, capped = [], 0
    for r in range(runs):
        det = make_detector({"type": name, "arl0": arl0})
        rng = np.random.default_rng([7, int(arl0), r])
        length, done = 0, False
        while not done and length < cap:  # draw in chunks: most runs end long before the cap
            chunk = rng.standard_normal(min(4096, cap - length)).tolist()
            hit = first_alarm(det, chunk, length + 1)
            if hit is not None:
                length, done = hit, True
            else:
                length += len(chunk)
        if not done:
            capped += 1
        lengths.append(length)
    mean = statistics.fmean(lengths)
    se = statistics.stdev(lengths) / math.sqrt(runs) if runs > 1 else math.nan
    return mean, se, runs, capped


def measure_delays(name: str, arl0: float, runs: int) -> list[tuple[float, bool, int]]:
    from adaptive_eval.detectors import make_detector

    out = []
    for shift in SHIFTS:
        delays, redrawn, seed = [], 0, 0
        while len(delays) < runs and redrawn < 20 * runs:
            rng = np.random.default_rng([11, int(arl0), int(shift * 10), seed])
            seed += 1
            det = make_detector({"type": name, "arl0": arl0})
            if first_alarm(det, rng.standard_normal(CHANGE_AT).tolist()) is not None:
                redrawn += 1
                continue
            hit = first_alarm(det, (rng.standard_normal(POST_CAP) + shift).tolist(), CHANGE_AT)
            delays.append(POST_CAP if hit is None else hit - CHANGE_AT + 1)
        med = statistics.median(delays)
        out.append((med, med >= POST_CAP, redrawn))
    return out


def updates_per_second(name: str, n: int) -> float:
    from adaptive_eval.detectors import make_detector

    det = make_detector({"type": name, "arl0": 10000} if name != "nonfinite" else {"type": name})
    values = np.random.default_rng(3).standard_normal(n).tolist()
    update = det.update
    best = math.inf
    for _ in range(3):
        t0 = time.perf_counter()
        for step, v in enumerate(values):
            update(v, step)
        best = min(best, time.perf_counter() - t0)
    return n / best


def job(name: str, arl0: float, quick: bool) -> tuple:
    r1, r2, rd = RUNS[name]
    runs = r1 if arl0 == ARL0S[0] else r2
    if quick:
        runs, rd = max(5, runs // 8), max(10, rd // 5)
    t0 = time.perf_counter()
    arl = measure_arl(name, arl0, runs)
    delays = measure_delays(name, arl0, rd)
    return name, arl0, arl, delays, rd, time.perf_counter() - t0


def real_streams() -> None:
    """Detectors on the cheap streams of the real traces shipped in ``traces/`` (not simulated).

    Three families, each one detector per stream, fed every finite value in record order:
    the default preset's ``streams.default`` detectors (``adaptive_eval.load_config()``), and river's own
    ``river.drift.ADWIN()`` and ``river.drift.PageHinkley()`` at river's defaults.
    * false alarms per 1,000 steps: alarms on the quiet stretch of each trace (before its first annotated
      event; the whole trace when it has none) on any of its streams, per 1,000 quiet records x streams
      watched; exact Poisson 95% interval on the count;
    * delay: per annotated event (``convert.load_real``'s rules: GRPO collapses and degradations), records
      from the event to the first alarm at or after it on any stream; no alarm by the end = missed.
    """
    from river import drift
    from scipy.stats import chi2

    from adaptive_eval import load_config
    from adaptive_eval.convert import load_real, real_traces
    from adaptive_eval.detectors import make_detector

    specs = list(load_config().streams.default)
    families = {
        "default preset": lambda s: [make_detector(dict(spec), stream=s) for spec in specs],
        "river ADWIN()": lambda s: [drift.ADWIN()],
        "river PageHinkley()": lambda s: [drift.PageHinkley()],
    }
    totals = {f: {"alarms": 0, "exposure": 0, "delays": []} for f in families}
    rows = []
    for info in real_traces():
        rt = load_real(info.name)
        streams = rt.trace.stream_names()
        if not streams:
            continue
        index = [r.step for r in rt.trace.records]
        events = sorted(int(np.searchsorted(index, e.step)) for e in rt.events)
        quiet_end = events[0] if events else len(index)
        for fam, build in families.items():
            alarms = []  # record indices
            for stream in streams:
                dets = build(stream)
                for i, rec in enumerate(rt.trace.records):
                    v = rec.metrics.get(stream)
                    if v is None:
                        continue
                    for d in dets:
                        if isinstance(d, (drift.ADWIN, drift.PageHinkley)):
                            if not math.isfinite(v):
                                continue
                            d.update(v)
                            if d.drift_detected:
                                alarms.append(i)
                        elif d.update(v, rec.step) is not None:
                            alarms.append(i)
            false = sum(1 for a in alarms if a < quiet_end)
            exposure = quiet_end * len(streams)
            delays = []
            for e in events:
                after = [a - e for a in alarms if a >= e]
                delays.append(min(after) if after else None)
            t = totals[fam]
            t["alarms"] += false
            t["exposure"] += exposure
            t["delays"] += delays
            rows.append((info.name, fam, len(streams), quiet_end, false, delays))
    print("Detectors on the real traces' streams (per trace: quiet records x streams, false alarms, event delays)")
    print(f"{'trace':24s} {'detectors':20s} {'streams':>7s} {'quiet':>7s} {'false':>6s}  delays (records; - = missed)")
    for name, fam, n_streams, quiet, false, delays in rows:
        shown = ", ".join("-" if d is None else str(d) for d in delays) or "(no events)"
        print(f"{name:24s} {fam:20s} {n_streams:7d} {quiet:7d} {false:6d}  {shown}")
    print(f"\n{'detectors':20s} {'false alarms / 1k steps [95%]':>30s} {'n (steps x streams)':>20s} "
          f"{'events':>6s} {'caught':>6s} {'median delay':>12s}")
    for fam, t in totals.items():
        k, n = t["alarms"], t["exposure"]
        lo = chi2.ppf(0.025, 2 * k) / 2 if k else 0.0
        hi = chi2.ppf(0.975, 2 * (k + 1)) / 2
        ds = t["delays"]
        caught = [d for d in ds if d is not None]
        med = statistics.median(math.inf if d is None else d for d in ds) if ds else math.nan
        print(f"{fam:20s} {1000 * k / n:12.2f} [{1000 * lo / n:.2f}, {1000 * hi / n:.2f}]      {n:20,d} "
              f"{len(ds):6d} {len(caught):6d} {med:12.1f}")


def main(argv=None) -> None:
    if argv is None and "--real" in sys.argv[1:]:
        real_streams()
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="about 8x fewer runs (a rough check in well under a minute)")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="worker processes")
    ap.add_argument("--only", default="", help="comma-separated detector names")
    args = ap.parse_args(argv)

    from adaptive_eval.detectors import available

    names = [n for n in available() if not args.only or n in args.only.split(",")]
    thresholded = [n for n in names if n != "nonfinite"]
    # Longest jobs first, so the pool stays busy to the end.
    order = sorted(((n, a) for n in thresholded for a in ARL0S),
                   key=lambda na: -COST_US[na[0]] * na[1] * RUNS[na[0]][0 if na[1] == ARL0S[0] else 1])
    t_start = time.perf_counter()
    results = {}
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(job, n, a, args.quick) for n, a in order]
        for f in futures:
            name, arl0, arl, delays, rd, secs = f.result()
            results[(name, arl0)] = (arl, delays, rd, secs)
    speed = {n: updates_per_second(n, 200_000 if n in FAST or n == "adwin" else 2_000 if n == "kswin" else 20_000)
             for n in names}

    head = (f"{'detector':12s} {'arl0':>6s} {'ARL0 measured':>16s} {'ratio':>6s} {'runs':>9s}   "
            + "   ".join(f"{'d=' + format(s, 'g'):>13s}" for s in SHIFTS) + f"   {'updates/s':>10s}")
    print("delay columns: median delay / bound ln(arl0)/(d^2/2); runs = ARL runs (+capped), delay runs per shift")
    print(head)
    print("-" * len(head))
    problems = []
    for name in names:
        if name == "nonfinite":
            print(f"{name:12s} {'-':>6s} {'no threshold':>16s} {'':>6s} {'':>9s}   "
                  + "   ".join(f"{'-':>13s}" for _ in SHIFTS) + f"   {speed[name]:10,.0f}")
            continue
        for arl0 in ARL0S:
            (mean, se, runs, capped), delays, rd, _ = results[(name, arl0)]
            ratio = mean / arl0
            if ratio < 0.7:
                problems.append(f"{name} arl0={arl0}: measured ARL0 {mean:.0f} < 0.7 x target")
            cells = []
            for shift, (med, censored, _) in zip(SHIFTS, delays):
                bound = math.log(arl0) / (shift * shift / 2)
                cells.append(f"{'>' if censored else ''}{med:g}/{bound:.1f}".rjust(13))
                if name in ("cusum", "bocpd") and shift >= 1 and med > 1.5 * bound:
                    problems.append(f"{name} arl0={arl0} shift={shift:g}: delay {med:g} > 1.5 x bound {bound:.2f}")
            runs_cell = f"{runs}+{capped}c/{rd}" if capped else f"{runs}/{rd}"
            print(f"{name:12s} {arl0:6d} {mean:9.0f} +-{se:5.0f} {ratio:6.2f} {runs_cell:>9s}   "
                  + "   ".join(cells) + f"   {speed[name]:10,.0f}")
    for name in FAST:
        if name in speed and speed[name] < 200_000:
            problems.append(f"{name}: {speed[name]:,.0f} updates/s < 200,000")
    print(f"\n{len(names)} detectors, {time.perf_counter() - t_start:.0f} s, {args.jobs} process(es)"
          + (", --quick" if args.quick else ""))
    print("targets met" if not problems else "targets missed:\n  " + "\n  ".join(problems))


if __name__ == "__main__":
    sys.exit(main())

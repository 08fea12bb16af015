"""Detectors on simulated streams: false-alarm run length, detection delay and speed (printed as a table).

Run: python benchmarks/detectors.py [--quick] [--jobs N] [--only cusum,bocpd]
     python benchmarks/detectors.py --real [--config F] [--set K=V] [trace options] [TRACE...]
                                                (the real-stream tables only; see real_streams)
     python benchmarks/detectors.py --real --tcpd-annotations TCPD/annotations.json TCPD/datasets/*/*.json
                                                (the Turing Change Point Dataset, events by annotator consensus)
     python benchmarks/detectors.py --tradeoff  (the default CUSUM's settings on synthetic streams; see tradeoff)
     python benchmarks/detectors.py --warmup    (the test for a change inside the warm-up; see warmup_changes)
     python benchmarks/detectors.py --stuck     (stuck: false alarms on streams that repeat, and a reward stuck at 0)
     python benchmarks/detectors.py --climb     (a drop after a steady climb: the CUSUM's trend; see climb_tables)

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
and never alarms on finite data, so it only gets a speed; so does ``stuck`` (its arl0 is in closed form and it
never alarms on a float stream that does not repeat: ``--stuck`` has its tables).  Slow detectors (bocpd, kswin,
window_test) get fewer runs; the run counts are printed.  Everything is seeded.
"""

from __future__ import annotations

import argparse
import math
import os
import pathlib
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

    det = make_detector({"type": name, "arl0": 10000} if name not in ("nonfinite", "stuck") else {"type": name})
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


# --- Real streams (--real), with the synthetic quiet stretches the river baselines are re-thresholded on ---

WARM = 30  # records at the start of a stream in which no family can alarm yet (the CUSUM's warm-up, Page-Hinkley's
#            min_instances = 30, ADWIN's first check at 32): placebo onsets start here
TUNING_SEEDS = (0, 1, 2, 3)  # adaptive_eval.synthetic.suite seeds the defaults are tuned on (never the real traces)
HELDOUT_SEEDS = (4, 5, 6, 7)  # the held-out half (benchmarks/policies.py's split)


class _Preset:
    """A preset's detectors on one stream: True when any of them alarms at this value."""

    def __init__(self, specs, stream):
        from adaptive_eval.detectors import make_detector

        self._dets = [make_detector(dict(spec), stream=stream) for spec in specs]
        self._updates = [d.update for d in self._dets]

    @property
    def armed(self) -> bool:
        """Every detector is past its warm-up (``Detector.armed``) and can alarm on the next value."""
        return all(d.armed for d in self._dets)

    def __call__(self, value, step):
        hit = False
        for update in self._updates:
            if update(value, step) is not None:
                hit = True
        return hit


class _River:
    """A river drift detector on one stream's finite values.

    With ``standardize``, the values are first standardized by the screened mean and sd of the stream's first
    ``WARM`` finite values (what the CUSUM's warm-up learns): river's thresholds are in the stream's own units,
    so one threshold cannot serve a reward in [0, 1] and a response length in the hundreds.  The warm-up values
    are fed, standardized, once the scale is known (an alarm among them counts at that record), so the
    detector sees the same values in the same order as without standardizing.
    """

    def __init__(self, det, standardize=False):
        self._det = det
        self._warm = [] if standardize else None
        self._level, self._inv = 0.0, 1.0

    def _feed(self, value):
        det = self._det
        det.update((value - self._level) * self._inv)
        return det.drift_detected

    def __call__(self, value, step):
        if not math.isfinite(value):
            return False
        warm = self._warm
        if warm is None:
            return self._feed(value)
        if len(warm) < WARM:
            warm.append(value)
            if len(warm) < WARM:
                return False
            from adaptive_eval.detectors._base import screened_moments

            level, scale, _ = screened_moments(warm)
            self._level, self._inv = level, 1.0 / scale
            return any([self._feed(v) for v in warm])
        return self._feed(value)


def _scan(trace, streams, build, quiet_end: int) -> tuple[list[int], int, int]:
    """The alarms of ``build``'s detectors on each stream: (their record indices, one per stream and record at
    most, sorted; the false alarms; the exposure).  The exposure counts, per stream, the quiet records (before
    ``quiet_end``) where the stream has a value, after its first ``WARM`` finite values (where no family
    can alarm yet); the false alarms are the alarms on those same cells, so that both count the same thing.
    A non-finite value counts as a value: an alarm on it is an alarm, for the false alarms as for the delays
    and the placebo waits (it was left out of the first only, so missing values written ``nan`` alarmed
    uncounted, and a NaN cell right after an event "caught" it; found by a new-user probe)."""
    out, k, n = [], 0, 0
    for stream in streams:
        watch = build(stream)
        seen = 0
        for i, rec in enumerate(trace.records):
            v = rec.metrics.get(stream)
            if v is None:
                continue
            v = float(v)
            seen += math.isfinite(v)
            counted = seen > WARM and i < quiet_end
            n += counted
            if watch(v, rec.step):
                out.append(i)
                k += counted
    out.sort()
    return out, k, n


def _alarms(trace, streams, build) -> list[int]:
    """Record indices of the alarms on each stream (one per stream and record at most), sorted."""
    return _scan(trace, streams, build, 0)[0]


def _armed_from(trace, streams) -> int | float:
    """The first record index at which some stream is past its first ``WARM`` finite values (inf: none is):
    an event before it lies in every stream's warm-up, where its delay measures the warm-up's end."""
    first = math.inf
    for stream in streams:
        seen = 0
        for i, rec in enumerate(trace.records):
            v = rec.metrics.get(stream)
            if v is not None and math.isfinite(float(v)):
                seen += 1
                if seen == WARM:
                    first = min(first, i + 1)
                    break
    return first


def _warming(trace, streams, specs_for, at: list[int]) -> list[tuple[list[str], list[str]]]:
    """For each record index in ``at`` (an event onset): the streams whose preset detectors
    (``specs_for(stream)``) are still warming up there (the first warm-up or the one after an alarm), and the
    streams of the first alarm at or after it."""
    warming = {i: [] for i in at}
    first = {i: (math.inf, []) for i in at}
    for stream in streams:
        watch = _Preset(specs_for(stream), stream)
        for i, rec in enumerate(trace.records):
            if i in warming and not watch.armed:
                warming[i].append(stream)
            v = rec.metrics.get(stream)
            if v is not None and watch(float(v), rec.step):
                for e in at:
                    if e <= i < first[e][0]:
                        first[e] = (i, [stream])
                    elif i == first[e][0]:
                        first[e][1].append(stream)
    return [(warming[i], first[i][1]) for i in at]


def _synthetic_quiet(seeds=TUNING_SEEDS) -> list[tuple]:
    """(trace, streams, quiet_end, event record indices) of the synthetic suite at ``seeds``."""
    from adaptive_eval.synthetic import suite

    out = []
    for seed in seeds:
        for st in suite(seed):
            events = sorted(e.step for e in st.events)  # step i is record i
            out.append((st.trace, st.trace.stream_names(), events[0] if events else len(st.trace), events))
    return out


# Shipped real traces that log a run another one already holds: counted once, so that the events and quiet
# stretches are independent (grpo_tracking is grpo_no_kl's run with three more streams logged; sb3_pong_episodes
# holds sb3_pong's episode returns indexed by episode).
REPEATS = {"grpo_tracking": "grpo_no_kl", "sb3_pong_episodes": "sb3_pong"}


TRACE_DEFAULTS = argparse.Namespace(stream=[], eval=[], step_column="step", keep_last_run=False)


def _real_data(paths=(), trace_args=TRACE_DEFAULTS, tcpd_annotations=None) -> list[tuple]:
    """(name, trace, streams, quiet_end, event record indices) of the shipped real traces with streams, repeats
    of another trace's run (``REPEATS``) left out; or, given ``paths``, of those trace files read with the trace
    options ``trace_args`` (``adaptive_eval.cli._add_trace_args``: --stream, --eval, --step-column,
    --keep-last-run), their events from their sidecar files (``<trace>.events.yaml``, as ``adaptive-eval check``
    reads them; an event outside the trace is an error, as there), or, with ``tcpd_annotations`` (TCPD's
    ``annotations.json``), for a trace whose file stem names a dataset there (``datasets/nile/nile.json``), the
    change points at least two annotators agree on within 5 records (``convert.tcpd_events``)."""
    from adaptive_eval.convert import load_real, real_traces

    out = []
    if paths:
        from adaptive_eval.cli import _foreign, _load_trace_file, _refuse_repeated_traces
        from adaptive_eval.convert import tcpd_events
        from adaptive_eval.testing import Expectations, events_path, load_expectations
        from adaptive_eval.testing._core import _load

        _refuse_repeated_traces(paths, "its quiet values and events would count twice in the pooled rates")
        for path in paths:
            if os.path.exists(path) or _foreign(trace_args):
                trace, name = _load_trace_file(path, trace_args), pathlib.Path(path).name
                sidecar = events_path(path)
                exp = load_expectations(sidecar) if sidecar is not None else Expectations()
                where = sidecar
                if tcpd_annotations is not None and pathlib.Path(path).stem in tcpd_annotations:
                    if sidecar is not None:
                        raise ValueError(f"{path}: events both in {sidecar} and in the TCPD annotations; keep one")
                    from adaptive_eval.testing import Event

                    steps = tcpd_events(tcpd_annotations, pathlib.Path(path).stem)
                    exp = Expectations(events=[Event(step) for step in steps])
                    where = f"{path} (TCPD annotations)"
            else:  # a shipped real trace by name, with its events (as check reads it)
                trace, name, exp, _ = _load(path)
                where = name
            if len(trace) == 0:
                raise ValueError(f"{path}: the trace has no records")
            streams = trace.stream_names()
            if not streams:
                raise ValueError(f"{path}: no stream to watch (every column is step, epoch, time or eval/)")
            index = [r.step for r in trace.records]
            for e in exp.events:
                if not index[0] <= e.step <= index[-1]:
                    raise ValueError(f"{where}: event at step {e.step} lies outside the trace {path} "
                                     f"(steps {index[0]}..{index[-1]})")
            events = sorted(int(np.searchsorted(index, e.step)) for e in exp.events)
            if len(set(events)) < len(events):
                # (two annotators' same point merged into one list: the second copy left the first no window to
                # be caught in, and it was scored a miss; found by a new-user probe)
                twice = sorted({index[i] for i in events if events.count(i) > 1})
                print(f"note: {where}: event(s) at step {', '.join(map(str, twice))} given more than once, "
                      "counted once", file=sys.stderr)
                events = sorted(set(events))
            out.append((name, trace, streams, events[0] if events else len(index), events))
        return out
    for info in real_traces():
        if info.name in REPEATS:
            continue
        rt = load_real(info.name)
        streams = rt.trace.stream_names()
        if not streams:
            continue
        index = [r.step for r in rt.trace.records]
        events = sorted(int(np.searchsorted(index, e.step)) for e in rt.events)
        out.append((info.name, rt.trace, streams, events[0] if events else len(index), events))
    return out


def _quiet_counts(build, data) -> list[tuple[int, int]]:
    """(false alarms, exposure) of each trace of ``data`` (before its first event; see ``_scan``): the series
    that ``_rate`` resamples."""
    return [_scan(trace, streams, build, quiet_end)[1:] for trace, streams, quiet_end, _ in data]


def _quiet_rate(build, data) -> tuple[int, int]:
    """False alarms and exposure over ``data``, summed over its traces (see ``_quiet_counts``)."""
    per = _quiet_counts(build, data)
    return sum(k for k, _ in per), sum(n for _, n in per)


def _delays(build, data) -> list[int | None]:
    out = []
    for trace, streams, _, events in data:
        alarms = _alarms(trace, streams, build)
        for e in events:
            after = [a for a in alarms if a >= e]
            out.append(after[0] - e if after else None)
    return out


def _match_rate(make, target: float, data, lo: float, hi: float, increasing: bool, iters: int = 18) -> float:
    """The most sensitive parameter in [lo, hi] (log scale) whose false-alarm rate on ``data`` is <= ``target``.

    ``make(p)`` builds the family at parameter ``p``; the rate rises with ``p`` when ``increasing`` (ADWIN's
    delta) and falls otherwise (Page-Hinkley's threshold).  Bisection on log p: the rate is a step function
    of p, monotone up to simulation noise.
    """
    a, b = math.log(lo), math.log(hi)  # invariant: the "safe" end meets the target
    for _ in range(iters):
        mid = 0.5 * (a + b)
        k, n = _quiet_rate(make(math.exp(mid)), data)
        ok = k / n <= target
        if increasing:
            a, b = (mid, b) if ok else (a, mid)
        else:
            a, b = (a, mid) if ok else (mid, b)
    return math.exp(a if increasing else b)


def _poisson_ci(k: int, n: int) -> tuple[float, float]:
    """Exact (Garwood) 95% Poisson interval on the rate per 1,000 of ``k`` alarms in ``n`` values taken as
    independent; with k = 0 the upper end is 3.69 / n (the "rule of three" at 97.5%)."""
    from scipy.stats import chi2

    lo = chi2.ppf(0.025, 2 * k) / 2 if k else 0.0
    return 1000 * lo / n, 1000 * chi2.ppf(0.975, 2 * (k + 1)) / 2 / n


def _series_ci(per_series, resamples: int = 9999, seed: int = 0) -> tuple[float, float, int, bool]:
    """False alarms per 1,000 values, 95% interval over series: (low, high, n series, exact).

    ``per_series``: (false alarms, exposure) of each series (a trace: its streams share a run, and a detector
    that misfires on a hard series misfires there again, so the values are not independent; the series is the
    unit).  The rate is the ratio of the summed counts to the summed exposure, as the point estimate; the
    interval is scipy's percentile bootstrap resampling series with replacement (seeded), widened where needed
    to the exact Poisson interval of the count; a series with no exposure is left out.  No alarm at all (or a single series): the exact Poisson interval on the values
    (``_poisson_ci``, which takes them as independent) and ``exact`` True: a bootstrap of zeros has no width,
    and that bound is the only one zeros allow.
    """
    from scipy.stats import bootstrap

    kept = [(k, n) for k, n in per_series if n > 0]
    k = np.array([c for c, _ in kept], dtype=float)
    n = np.array([e for _, e in kept], dtype=float)
    if not kept:
        return math.nan, math.nan, 0, False
    if k.sum() == 0 or len(kept) < 2:
        return (*_poisson_ci(int(k.sum()), int(n.sum())), len(kept), True)
    res = bootstrap((k, n), lambda k, n, axis=-1: 1000 * k.sum(axis) / n.sum(axis), paired=True,
                    vectorized=True, n_resamples=resamples, method="percentile", rng=np.random.default_rng(seed))
    # A few alarms on one or two series leave the percentile bootstrap too narrow (its upper end below what the
    # count itself allows): never narrower than the exact Poisson interval of the count.
    low, high = _poisson_ci(int(k.sum()), int(n.sum()))
    return (min(float(res.confidence_interval.low), low), max(float(res.confidence_interval.high), high), len(kept),
            False)


def _rate(per_series) -> str:
    """False alarms per 1,000 with its 95% interval over series (``_series_ci``), "*" marking an exact bound;
    n/a when nothing was exposed."""
    k = sum(c for c, _ in per_series)
    n = sum(e for _, e in per_series)
    if not n:
        return "n/a (n = 0)"
    lo, hi, _, exact = _series_ci(per_series)
    return f"{1000 * k / n:.2f} [{lo:.2f}, {hi:.2f}]{'*' if exact else ''}"


EXACT_NOTE = ("intervals: 95% percentile bootstrap over series (traces resampled with replacement, ratio of summed "
              "alarms to summed values; seeded), never narrower than the exact Poisson one; * = no alarm (or one "
              "series): exact Poisson bound on the values instead, which takes them as independent")


def _placebo(alarms: list[int], quiet_end: int, delay: int | None) -> tuple[float, float | None]:
    """What the family's own quiet-stretch alarms give at placebo onsets p = WARM .. quiet_end - 1 of the same trace.

    Returns the median placebo delay (records from p to the next quiet alarm; inf when that median onset sees
    none before the quiet stretch ends) and q = the share of onsets p <= quiet_end - 1 - delay whose window
    [p, p + delay] holds an alarm: the chance that false alarms alone "detect" as fast as the real event was
    (None when the quiet stretch is too short for one such window, or the event was missed).
    """
    import bisect

    quiet = [a for a in alarms if WARM <= a < quiet_end]
    waits = []
    for p in range(WARM, quiet_end):
        j = bisect.bisect_left(quiet, p)
        waits.append(quiet[j] - p if j < len(quiet) else math.inf)
    med = statistics.median(waits) if waits else math.nan
    if delay is None or quiet_end - 1 - delay < WARM:
        return med, None
    onsets = range(WARM, quiet_end - delay)
    hits = 0
    for p in onsets:
        j = bisect.bisect_left(quiet, p)
        hits += j < len(quiet) and quiet[j] <= p + delay
    return med, hits / len(onsets)


def _median_ci(values: list[float]) -> tuple[float, float, float]:
    """Exact distribution-free interval for a median: order statistics (x_(j), x_(n+1-j)) with the largest j
    whose coverage 1 - 2 P(Bin(n, 1/2) < j) is >= 0.9 (n = 5: the min and max, 93.8%)."""
    from scipy.stats import binom

    xs, n = sorted(values), len(values)
    j = 1
    while j + 1 <= n // 2 and 1 - 2 * binom.cdf(j, n, 0.5) >= 0.9:
        j += 1
    return xs[j - 1], xs[n - j], 1 - 2 * binom.cdf(j - 1, n, 0.5)


def _preset_cusum() -> dict:
    """The default preset's CUSUM spec (so that a table labelled 'default cusum' follows the preset)."""
    from adaptive_eval import load_config

    return next(dict(s) for s in load_config().streams.default if s["type"] == "cusum")


def _specs_of(cfg):
    """stream -> its detector specs under ``cfg``: the evaluator's own resolution (``streams.ignore``: none;
    ``streams.watch``: its own list; else ``streams.default``)."""
    from adaptive_eval import AdaptiveEvaluator

    return AdaptiveEvaluator.from_config(cfg)._specs_for


def _preset_label(config=None, overrides=()) -> str:
    """The preset family's row label: "default preset", or the config's name with its overrides."""
    if config in (None, "default") and not overrides:
        return "default preset"
    name = "default" if config is None else pathlib.Path(config).name
    return " ".join([f"{name} preset", *(f"--set {o}" for o in overrides)])


def real_streams(paths=(), real=None, config=None, overrides=(), quick: bool = False) -> None:
    """Detectors on the cheap streams of the real traces shipped in ``traces/`` (not simulated).

    Families, each one detector set per stream, fed every value in record order (river's: the finite ones):
    the preset's detectors (``adaptive_eval.load_config(config, overrides)``, the default preset by default),
    per stream as ``AdaptiveEvaluator`` resolves them (``streams.watch``, ``streams.ignore``, else
    ``streams.default``); river's ``ADWIN()`` and ``PageHinkley()`` at river's defaults; and the same two
    re-thresholded to the preset's false-alarm rate on the SYNTHETIC tuning suite
    (``adaptive_eval.synthetic.suite`` seeds 0-3, their quiet stretches; nothing is chosen on the real traces),
    on values standardized by each stream's first 30 (see ``_River``): Page-Hinkley's ``threshold`` and
    ADWIN's ``delta`` by bisection.
    * false alarms per 1,000: alarms on the quiet stretch of each trace (before its first annotated event; the
      whole trace when it has none) on any of its streams, per 1,000 quiet values: per stream, the quiet
      records where it has a value (a NaN too: an alarm on it is one), after its first 30 finite ones (its
      warm-up, where no family can alarm; see ``_scan``); 95% interval over traces (``_series_ci``: alarms
      cluster on a hard series, so the trace is the unit resampled, not the value; no alarm at all: the exact Poisson bound, marked "*"); a trace that
      repeats another's run (``REPEATS``) is left out, so that events and quiet stretches are independent;
    * delay: per annotated event (``convert.load_real``'s rules: GRPO collapses and degradations), records
      from the event to the first alarm at or after it on any stream; no alarm by the end = missed.  The
      median carries the exact order-statistic interval (n = 4 events: min to max, 87.5%).  An event before
      any stream is past its first 30 values is flagged "(in warm-up)": its delay measures the warm-up's end;
    * chance: the same family's alarms on the same trace's quiet stretch, at placebo onsets (every record from
      30 to the event): their median wait to the next alarm, and q = the share of placebo onsets that get an
      alarm within the event's delay.  An event is caught beyond chance when q < 0.05: a family that alarms
      all the time gets short "delays" whether or not anything changed.  n/a: the quiet stretch is no longer
      than the warm-up.
    """
    from river import drift

    from adaptive_eval import load_config

    specs_for = _specs_of(load_config(config, overrides))
    label = _preset_label(config, overrides)
    t0 = time.perf_counter()
    synth = _synthetic_quiet(TUNING_SEEDS[:1] if quick else TUNING_SEEDS)  # (--quick: one seed to match on)
    preset = lambda s: _Preset(specs_for(s), s)  # noqa: E731
    k_syn, n_syn = _quiet_rate(preset, synth)
    target = k_syn / n_syn
    ph_h = _match_rate(lambda h: lambda s: _River(drift.PageHinkley(threshold=h), True), target, synth,
                       0.5, 5000.0, increasing=False)
    ad_d = _match_rate(lambda d: lambda s: _River(drift.ADWIN(delta=d), True), target, synth,
                       1e-30, 0.5, increasing=True)
    families = {
        label: preset,
        "river ADWIN()": lambda s: _River(drift.ADWIN()),
        "river PageHinkley()": lambda s: _River(drift.PageHinkley()),
        "ADWIN, matched FA": lambda s: _River(drift.ADWIN(delta=ad_d), True),
        "PageHinkley, matched FA": lambda s: _River(drift.PageHinkley(threshold=ph_h), True),
    }
    w = max(24, len(label))
    syn = {f: _quiet_counts(b, synth) for f, b in families.items()}
    seeds = f"seed {TUNING_SEEDS[0]}, --quick" if quick else f"seeds {TUNING_SEEDS[0]}-{TUNING_SEEDS[-1]}"
    print(f"Re-thresholded to the {label}'s rate on the synthetic tuning suite ({seeds}, {len(synth)} traces, quiet stretches, {n_syn:,d} values after each stream's first "
          f"{WARM}; standardized by those {WARM}): PageHinkley(threshold={ph_h:.4g}), ADWIN(delta={ad_d:.3g}).  "
          f"Synthetic false alarms / 1k [95% over the {_series_ci(syn[label])[2]} series with quiet values]:")
    for f, per in syn.items():
        print(f"  {f:{w}s} {_rate(per):>21s}  ({sum(k for k, _ in per)} alarms)")

    if real is None:
        real = _real_data(paths)
    totals = {f: {"alarms": 0, "exposure": 0, "series": [], "events": []} for f in families}
    rows = []
    in_warmup = 0
    for name, trace, streams, quiet_end, events in real:
        armed = _armed_from(trace, streams)
        in_warmup += sum(e < armed for e in events)
        for fam, build in families.items():
            alarms, false, exposure = _scan(trace, streams, build, quiet_end)
            cells = []
            for j, e in enumerate(events):
                # An event's alarm comes before the next event (a trace with one event: before the end).
                stop = events[j + 1] if j + 1 < len(events) else math.inf
                after = [a for a in alarms if e <= a < stop]
                d = after[0] - e if after else None
                med, q = _placebo(alarms, quiet_end, d)
                cells.append((d, med, q, e < armed))
                totals[fam]["events"].append((name, d, med, q))
            totals[fam]["alarms"] += false
            totals[fam]["exposure"] += exposure
            totals[fam]["series"].append((false, exposure))
            rows.append((name, fam, len(streams), quiet_end, exposure, false, cells))

    def cell(d, med, q, warm):
        c = "none" if med == math.inf else "n/a" if math.isnan(med) else f"{med:g}"
        if d is None:
            return "missed (in warm-up)" if warm else "missed"
        return f"{d} ({'in warm-up; ' if warm else ''}chance {c}, q {'n/a' if q is None else format(q, '.2f')})"

    print(f"\nDetectors on the real traces' streams (per trace: quiet records, n = quiet values counted (per stream: "
          f"records with a finite value, after its first {WARM}), false alarms on them; per event: delay in "
          "records,\nthe median placebo delay from the family's own quiet alarms, and q = P(placebo delay <= delay))")
    print(f"{'trace':22s} {'detectors':{w}s} {'streams':>7s} {'quiet':>6s} {'n':>7s} {'false':>6s}  events")
    for name, fam, n_streams, quiet, exposure, false, cells in rows:
        shown = "; ".join(cell(*c) for c in cells) or "(no events)"
        print(f"{name:22s} {fam:{w}s} {n_streams:7d} {quiet:6d} {exposure:7d} {false:6d}  {shown}")
    print(f"\nThe {label} at each event onset: streams still warming up (first warm-up or after an alarm) -> "
          "the streams of the first alarm")
    for name, trace, streams, _, events in real:
        for e, (warm, caught) in zip(events, _warming(trace, streams, specs_for, events)):
            print(f"  {name:22s} record {e:4d}: {len(warm)}/{len(streams)} warming {warm or ''} -> "
                  f"{', '.join(caught) or 'none'}" + (" (one of them warming)" if set(warm) & set(caught) else ""))

    base = [d for _, d, _, _ in totals[label]["events"]]
    inf = math.inf
    shown = lambda x: "-" if x == inf else "none" if x is None else "n/a" if math.isnan(x) else f"{x:g}"  # noqa: E731
    exposure = {t["exposure"] for t in totals.values()}.pop()
    n_series = f"n = {sum(e > 0 for _, e in totals[label]['series'])} of them with quiet values"
    counted = f"quiet values (per stream: the quiet records where it has a value, after its first {WARM} finite ones)"
    if not base:
        print("\nNo annotated events in these traces: false alarms only.")
        for fam, t in totals.items():
            print(f"  {fam:{w}s} {_rate(t['series'])} per 1k ({t['alarms']} alarms)")
        print(f"\nn = {exposure:,d} {counted} over {len(real)} traces ({n_series}); {EXACT_NOTE}; "
              f"{time.perf_counter() - t0:.0f} s")
        return
    cover = _median_ci([0.0] * len(base))[2] if len(base) > 1 else None
    versus_head = "default faster/slower" if label == "default preset" else "preset faster/slower"
    print(f"\n{'detectors':{w}s} {'false alarms/1k [95%]':>21s} {'caught':>6s} "
          f"{'median delay' + ('' if cover is None else f' [{100 * cover:.1f}%]'):>20s} "
          f"{'delay per event':>18s} {'placebo median':>26s} {'q < 0.05':>8s} {versus_head:>21s}")
    for fam, t in totals.items():
        k = t["alarms"]
        ev = t["events"]
        ds = [inf if d is None else d for _, d, _, _ in ev]
        beyond = sum(1 for _, d, _, q in ev if d is not None and q is not None and q < 0.05)
        known = sum(1 for _, d, _, q in ev if d is not None and q is not None)
        per = ", ".join(shown(d) for d in ds)
        chance = ", ".join("none" if m == inf else shown(m) for _, _, m, _ in ev)
        if len(ev) > 8:  # listed per trace above
            per = chance = "(per trace above)"
        if fam == label:
            versus = ""
        else:
            from scipy.stats import binomtest

            bd = [inf if d is None else d for d in base]
            win = sum(a < b for a, b in zip(bd, ds))
            loss = sum(a > b for a, b in zip(bd, ds))
            p = binomtest(win, win + loss, 0.5).pvalue if win + loss else 1.0
            versus = f"{win}/{loss} (p {p:.2f})"
        if cover is None:
            med = f"{shown(statistics.median(ds))} [-]"
        else:
            mlo, mhi, _ = _median_ci(ds)
            med = f"{shown(statistics.median(ds))} [{shown(mlo)}, {shown(mhi)}]"
        fa = _rate(t["series"])
        print(f"{fam:{w}s} {fa:>21s} {sum(d != inf for d in ds):4d}/{len(ds)} "
              f"{med:>20s} {per:>18s} {chance:>26s} {f'{beyond}/{known}':>8s} {versus:>21s}")
    where = (f"{len(real)} traces given, {len(base)} events from their sidecar files or TCPD annotations (an "
             "event's alarm must come before the next event)" if paths else f"{len(real)} real traces ("
             + ", ".join(f"{k} left out: the run of {v}" for k, v in REPEATS.items()) + f"), {len(base)} events (all GRPO)")
    warm_note = (f"; {in_warmup} event(s) in every stream's warm-up (flagged above: the delay measures its end)"
                 if in_warmup else "")
    print(f"\nn = {exposure:,d} {counted} over {where}{warm_note}; false alarms/1k: {n_series}, {EXACT_NOTE}; "
          + ("median delay: one event, no interval" if cover is None else
             f"median delay: exact order-statistic interval ({100 * cover:.1f}%)")
          + "; placebo median: the family's own quiet alarms from a random onset (none: most onsets see no alarm; "
          f"n/a: no quiet record after the first {WARM}); q < 0.05: events caught sooner than 5% of "
          f"placebo onsets would be (of those with a placebo window); faster/slower: per event, sign test two-sided; "
          f"{time.perf_counter() - t0:.0f} s")


# --- The CUSUM's trade-off on synthetic streams only (--tradeoff): is there a faster default at no more false alarms?

INJECT_SHIFTS = (1.0, 2.0, 3.0)
INJECT_CAP = 300
EARLY = (35, 120)  # shift points of the early shifts: soon after the first warm-up, as a change early in a run


def _injected(seeds=TUNING_SEEDS, window=(200, 700)) -> list[tuple]:
    """Level shifts injected into the synthetic suite's event-free traces (rise_plateau, spikes, flat) at ``seeds``.

    One case per trace and stream: a shift point s drawn uniformly in ``window`` and a sign, both seeded; the
    values from s on move by shift x the screened sd of the (up to) 50 values before s (the scale a warm-up
    there would learn).  Returns (values, s, sd, sign) per case; the autocorrelated, trending noise is the suite's.
    """
    from adaptive_eval.detectors._base import screened_moments
    from adaptive_eval.synthetic import suite

    out = []
    for seed in seeds:
        for t, st in enumerate(suite(seed)):
            if st.events:
                continue
            for j, stream in enumerate(st.trace.stream_names()):
                rng = np.random.default_rng([seed, t, j, *window])
                s = int(rng.integers(*window))
                values = [float(r.metrics[stream]) for r in st.trace.records]
                _, sd, _ = screened_moments(values[max(0, s - 50):s])
                out.append((values, s, sd, 1.0 if rng.random() < 0.5 else -1.0))
    return out


def _injected_delays(specs, cases, shift: float) -> list[float]:
    out = []
    for values, s, sd, sign in cases:
        watch = _Preset(specs, "x")
        hit = math.inf
        for i, v in enumerate(values[:s + INJECT_CAP]):
            if i >= s:
                v += sign * shift * sd
            if watch(v, i) and i >= s:
                hit = i - s
                break
        out.append(hit)
    return out


class _Synthetic:
    """The synthetic data of one half of the suite: quiet stretches, event kinds, injected shifts."""

    def __init__(self, seeds):
        from adaptive_eval.synthetic import suite

        self.seeds = seeds
        self.quiet = _synthetic_quiet(seeds)
        self.kinds = [e.kind for seed in seeds for st in suite(seed) for e in sorted(st.events, key=lambda e: e.step)]
        self.cases = _injected(seeds)
        self.early = _injected(seeds, EARLY)

    def false_alarms(self, specs) -> int:
        return _quiet_rate(lambda s: _Preset(specs, s), self.quiet)[0]

    def score(self, specs) -> tuple[int, int, list[list[float]], list[tuple[int, int]]]:
        """False alarms, exposure, the delays per column (collapse, recovery, each injected shift), and the
        false alarms and exposure per trace (for the interval over traces)."""
        build = lambda s: _Preset(specs, s)  # noqa: E731
        per = _quiet_counts(build, self.quiet)
        k, n = sum(c for c, _ in per), sum(e for _, e in per)
        ds = [math.inf if d is None else d for d in _delays(build, self.quiet)]
        cols = [[d for d, kd in zip(ds, self.kinds) if kd == kind] for kind in ("collapse", "recovery")]
        cols += [_injected_delays(specs, self.cases, d) for d in INJECT_SHIFTS]
        cols.append(_injected_delays(specs, self.early, INJECT_SHIFTS[-1]))
        return k, n, cols, per


def _cell(values: list[float]) -> str:
    f = lambda x: "-" if x == math.inf else f"{x:g}"  # noqa: E731
    lo, hi, _ = _median_ci(values)
    miss = sum(v == math.inf for v in values)
    return f"{f(statistics.median(values))} [{f(lo)}, {f(hi)}]" + (f" {miss}m" if miss else "")


def _dominates(a: list[list[float]], b: list[list[float]]) -> bool:
    """Delays ``a`` no worse than ``b`` in every column (median and missed count) and better in one."""
    key = lambda col: (statistics.median(col), sum(v == math.inf for v in col))  # noqa: E731
    pairs = [(key(x), key(y)) for x, y in zip(a, b)]
    return all(p[0] <= q[0] and p[1] <= q[1] for p, q in pairs) and any(p != q for p, q in pairs)


def tradeoff() -> None:
    """The default CUSUM's ``k`` / ``adapt`` / ``warmup`` against alternatives, on synthetic streams only (and the
    default with ``trend``, re-thresholded alike).

    For each setting the ``threshold`` is the lowest (bisection, 2-30) whose false alarms on the synthetic
    tuning suite's quiet stretches (seeds 0-3) are no more than the default preset's there; then its delays:
    on the suite's cheap-stream events (16 collapses, 8 recoveries; NaN events are caught at once by
    ``nonfinite`` whatever the CUSUM) and on level shifts of 1, 2 and 3 sd injected into the suite's event-free
    traces at steps 200-700 (``_injected``; a shift not caught within 300 records counts as missed), and of
    3 sd at steps 35-120 (early in a run, where a longer warm-up is still blind).  The settings that beat
    the default on every column there are then run, thresholds fixed, on the held-out half (suite seeds 4-7,
    the split of benchmarks/policies.py).  Nothing here reads a real trace.
    """
    from adaptive_eval import load_config

    t0 = time.perf_counter()
    base = [dict(s) for s in load_config().streams.default]
    cusum = next(s for s in base if s["type"] == "cusum")
    others = [s for s in base if s["type"] != "cusum"]
    specs_of = lambda cfg: others + [{**cusum, **cfg}]  # noqa: E731
    tune, held = _Synthetic(TUNING_SEEDS), _Synthetic(HELDOUT_SEEDS)
    default = {key: cusum.get(key, 0.0) for key in ("k", "threshold", "adapt", "warmup", "trend")}
    k0, n0, _, per0 = tune.score(specs_of(default))
    # (the default with the slope, --climb's CLIMB_TREND re-thresholded here; then the grid)
    settings = [default, {**default, "trend": CLIMB_TREND["trend"], "threshold": None}] + [
        dict(k=k, adapt=a, warmup=w) for k in (0.5, 0.75, 1.0, 1.5) for a in (0.02, 0.05, 0.1) for w in (30, 50)
        if (k, a, w) != (default["k"], default["adapt"], default["warmup"])]
    head = (f"{'k':>5s} {'adapt':>5s} {'trend':>5s} {'warmup':>6s} {'thresh':>6s} {'FA/1k [95%]':>17s} "
            f"{'collapse':>14s} {'recovery':>14s} " + " ".join(f"{f'shift {d:g} sd':>18s}" for d in INJECT_SHIFTS)
            + f" {f'early {INJECT_SHIFTS[-1]:g} sd':>18s}")

    def row(cfg, k, n, cols, per, mark=""):
        print(f"{cfg['k']:5g} {cfg['adapt']:5g} {cfg.get('trend', default['trend']):5g} {cfg['warmup']:6d} "
              f"{cfg['threshold']:6g} "
              f"{_rate(per):>18s} " + " ".join(f"{_cell(c):>14s}" for c in cols[:2]) + " "
              + " ".join(f"{_cell(c):>18s}" for c in cols[2:]) + mark, flush=True)

    print(f"CUSUM settings on synthetic streams only, tuning half (suite seeds {TUNING_SEEDS[0]}-{TUNING_SEEDS[-1]}): "
          f"threshold = the lowest with <= {k0} false alarms (the default's count) on its quiet stretches ({n0:,d} "
          f"values after each stream's first {WARM}; FA/1k: over the {_series_ci(per0)[2]} traces with quiet values, "
          f"{EXACT_NOTE}).\nDelays in records, median [exact ~90% interval]: "
          f"{tune.kinds.count('collapse')} "
          f"collapses, {tune.kinds.count('recovery')} recoveries, {len(tune.cases)} injected shifts per size")
    print(head)
    print("-" * len(head))
    results = []
    for cfg in settings:
        if cfg.get("threshold", None) is None:
            lo, hi = 2.0, 30.0  # invariant: hi meets the false-alarm count (or is the cap)
            for _ in range(10):
                mid = 0.5 * (lo + hi)
                if tune.false_alarms(specs_of({**cfg, "threshold": mid})) <= k0:
                    hi = mid
                else:
                    lo = mid
            cfg = {**cfg, "threshold": round(hi, 2)}
        k, n, cols, per = tune.score(specs_of(cfg))
        results.append((cfg, k, n, cols))
        row(cfg, k, n, cols, per, " (default)" if cfg is default else " (FA above the default's at threshold 30)"
            if k > k0 else f" (the default with trend {CLIMB_TREND['trend']:g})" if len(results) == 2 else "")
    ref = results[0][3]
    onsets = warming = offset = 0
    for trace, streams, _, events in tune.quiet:
        kinds = tune.kinds[offset:offset + len(events)]
        offset += len(events)
        st_events = [e for e, kd in zip(events, kinds) if kd in ("collapse", "recovery")]
        for e, (warm, _) in zip(st_events, _warming(trace, streams, lambda s: specs_of(default), st_events)):
            onsets += 1
            warming += "train/reward" in warm
    print(f"\nDefault: the event's stream (train/reward) was still warming up at {warming} of the tuning half's "
          f"{onsets} collapse and recovery onsets.")
    better = [r for r in results[2:] if r[1] <= k0 and _dominates(r[3], ref)]
    midrun = [r for r in results[2:] if r[1] <= k0 and r not in better and _dominates(r[3][:-1], ref[:-1])]
    print(f"\nBeat the default on every column of the tuning half at no more false alarms: {len(better)} setting(s); "
          f"on every column but the early shifts: {len(midrun)}.")
    print(f"Those on the held-out half (suite seeds {HELDOUT_SEEDS[0]}-{HELDOUT_SEEDS[-1]}), thresholds as above: "
          f"{held.kinds.count('collapse')} collapses, {held.kinds.count('recovery')} recoveries, "
          f"{len(held.cases)} injected shifts per size")
    print(head)
    print("-" * len(head))
    for i, (cfg, *_rest) in enumerate(results[:2] + better + midrun):
        row(cfg, *held.score(specs_of(cfg)), " (default)" if i == 0 else " (with trend)" if i == 1
            else " (all columns)" if i <= len(better) + 1 else " (all but early)")
    print(f"\n{time.perf_counter() - t0:.0f} s; 'Nm' = N missed (not caught within {INJECT_CAP} records / by the end)")


WARMUP_SHIFTS = (1.0, 2.0, 3.0)
WARMUP_AT = (10, 25, 40)  # where the shift starts, inside CUSUM's 50-value warm-up
WARMUP_RUNS = 200
WARMUP_WITHIN = 50  # "caught": an alarm within this many values of the warm-up's end (by step 100)


def _warmup_catch(spec: dict, d: float, at: int) -> tuple[int, list[int], int]:
    """Runs caught (alarm on the shift's side locating it within 5, by step 100), their steps, runs with any alarm."""
    from adaptive_eval.detectors import make_detector

    caught, steps, any_alarm = 0, [], 0
    for r in range(WARMUP_RUNS):
        rng = np.random.default_rng(10_000 + r)
        x = rng.standard_normal(at + 300)
        x[at:] += d
        det = make_detector(spec)
        alarmed = False
        for t, v in enumerate(x[:50 + WARMUP_WITHIN + 1].tolist()):
            a = det.update(v, t)
            if a is None:
                continue
            alarmed = True
            if a.direction == "up" and abs(a.location - at) <= 5:
                caught += 1
                steps.append(t)
                break
        any_alarm += alarmed
    return caught, steps, any_alarm


def warmup_changes() -> None:
    """CUSUM's and BOCPD's warm-up test (``warmup_test``): changes inside the warm-up, and its false alarms.

    Simulated, seeded.  Each detector at its defaults (arl0 5,000, warm-up 50) with the test on and off: a
    mean shift of d sd starting at value 10, 25 or 40 of N(0, 1) data, 300 values after it; "caught" = an
    alarm by step 100 (the warm-up's end + 50) on the shift's side with its location within 5 of the onset,
    and the median step of such alarms.  Then the test's false alarms at its warm-up's end on i.i.d. streams
    (2,000 warm-ups each, CUSUM), and the Nile's flow (statsmodels' copy), whose 1898 drop is value 28.
    """
    from adaptive_eval.detectors import make_detector
    from adaptive_eval.stats import wilson_interval

    t0 = time.perf_counter()
    print(f"A shift inside the 50-value warm-up, defaults (arl0 5000) (SIMULATED, N(0,1), {WARMUP_RUNS} seeded runs "
          f"per cell); caught = an alarm on its side by step {50 + WARMUP_WITHIN} locating it within 5 values")
    head = (f"{'detector':9s} {'shift':>6s} {'onset':>6s} {'test on: caught [95%]':>26s} {'median step':>12s} "
            f"{'test off: caught [95%]':>27s} {'off: any alarm by 100':>22s}")
    print(head)
    print("-" * len(head))
    for name in ("cusum", "bocpd"):
        for d in WARMUP_SHIFTS:
            for at in WARMUP_AT:
                cells = []
                for on in (True, False):
                    caught, steps, any_alarm = _warmup_catch({"type": name, "warmup_test": on}, d, at)
                    lo, hi = wilson_interval(caught, WARMUP_RUNS)
                    cells.append((f"{caught / WARMUP_RUNS:5.1%} [{lo:.0%}, {hi:.0%}]",
                                  statistics.median(steps) if steps else None, any_alarm))
                on_cell, on_med, _ = cells[0]
                off_cell, _, off_any = cells[1]
                med = "-" if on_med is None else format(on_med, "g")
                print(f"{name:9s} {d:6g} {at:6d} {on_cell:>26s} {med:>12s} "
                      f"{off_cell:>27s} {off_any / WARMUP_RUNS:22.1%}")
    det = make_detector({"type": "cusum"})
    level = det._warmup_level()
    print(f"\nfalse alarms of the test at the end of a fresh warm-up (CUSUM; level {level:.4f} = the warm-up / arl0; "
          f"2,000 seeded warm-ups each):")
    draws = {"N(0, 1)": lambda g: g.standard_normal(60), "Bernoulli(0.1)": lambda g: (g.random(60) < 0.1) * 1.0,
             "Student-t, 3 df": lambda g: g.standard_t(3, 60)}
    for label, draw in draws.items():
        hits = 0
        for r in range(2000):
            det = make_detector({"type": "cusum"})
            vals = draw(np.random.default_rng(20_000 + r)).tolist()
            if any(det.update(v, t) is not None for t, v in enumerate(vals[:50])):
                hits += 1
        lo, hi = wilson_interval(hits, 2000)
        print(f"  {label:16s} {hits:3d} / 2000 = {hits / 2000:.4f} [{lo:.4f}, {hi:.4f}]")
    from scipy.signal import lfilter

    print("\nalarms per 1,000 values on no step at all, 40 seeded series of 800 each (CUSUM; the test must not take a "
          "trend or a wander for a change at the end of every warm-up):")
    noise = {"trend 0.1 sd a step": lambda g: g.standard_normal(800) + 0.1 * np.arange(800),
             "AR(1) 0.9, unit variance": lambda g: lfilter([1.0], [1.0, -0.9], g.standard_normal(800)) * 0.19 ** 0.5,
             "N(0, 1)": lambda g: g.standard_normal(800)}
    for label, draw in noise.items():
        counts = {}
        for on in (True, False):
            total = 0
            for r in range(40):
                det = make_detector({"type": "cusum", "warmup_test": on})
                total += sum(det.update(v, t) is not None
                             for t, v in enumerate(draw(np.random.default_rng(500 + r)).tolist()))
            counts[on] = 1000 * total / (40 * 800)
        print(f"  {label:26s} test on {counts[True]:6.2f}   off {counts[False]:6.2f}")
    import statsmodels.api as sm

    flow = sm.datasets.nile.load_pandas().data["volume"].astype(float).tolist()
    for name in ("cusum", "bocpd"):
        for on in (True, False):
            det = make_detector({"type": name, "warmup_test": on})
            alarms = [(a.step, a.direction, a.location) for t, v in enumerate(flow) if (a := det.update(v, t))]
            print(f"Nile (100 values, the drop at value 28), {name}, test {'on ' if on else 'off'}: alarms (step, "
                  f"side, location) {alarms}")
    print(f"\n{time.perf_counter() - t0:.0f} s")


def _repeating_streams() -> dict:
    """Streams that repeat values by nature, as draws ``rng -> (i -> value)``."""
    def carried(rng):
        held = [0.0]

        def draw(i):
            if i % 4 == 0:
                held[0] = rng.gauss(0.0, 1.0)
            return held[0]
        return draw

    return {
        "N(0, 1)": lambda rng: lambda i: rng.gauss(0.0, 1.0),
        "5 levels, equal": lambda rng: lambda i: rng.choice((0.0, 0.25, 0.5, 0.75, 1.0)),
        "batch of 8, p 0.3": lambda rng: lambda i: sum(rng.random() < 0.3 for _ in range(8)) / 8,
        "0/1, half": lambda rng: lambda i: float(rng.random() < 0.5),
        "0/1, 0.9 ones": lambda rng: lambda i: float(rng.random() < 0.9),
        "0 in 80%, else U(0,1)": lambda rng: lambda i: 0.0 if rng.random() < 0.8 else rng.random(),
        "N(0, .02) to 2 places": lambda rng: lambda i: round(rng.gauss(0.0, 0.02), 2),
        "carried over 4 calls": carried,
    }


def _bf16(x: float) -> float:
    """``x`` as ``.item()`` of a bf16 tensor reads it."""
    import torch

    return torch.tensor(x, dtype=torch.bfloat16).item()


def _drifting_streams() -> dict:
    """Healthy streams that drift and are stored at low precision, as ``(rng, t) -> value`` (a review's)."""
    loss = lambda rng, t: 1.0 + 2.0 * math.exp(-t / 300) + rng.gauss(0, 0.003)  # noqa: E731
    return {
        "loss, bf16": lambda rng, t: _bf16(loss(rng, t)),
        "loss, fp16": lambda rng, t: float(np.float16(loss(rng, t))),
        "loss, 4 significant digits": lambda rng, t: float(f"{loss(rng, t):.4g}"),
        "grad norm, bf16, shrinking": lambda rng, t: _bf16(0.5 * math.exp(-t / 2000) + rng.gauss(0, 0.001)),
        "entropy, bf16, drifting": lambda rng, t: _bf16(0.3 + 0.0001 * t + rng.gauss(0, 0.002)),
        "reward to 2 places, drifting": lambda rng, t: round(0.3 + 0.0001 * t + rng.gauss(0, 0.01), 2),
        "reward 0 for 40 steps, then N(.5,.1)": lambda rng, t: 0.0 if t < 40 else rng.gauss(0.5, 0.1),
    }


def _stuck_delay(spec: dict, batch: int, p: float, seed: int, onset: int = 300, after: int = 200) -> int | None:
    """Values after ``onset`` up to and including the first alarm (1: the first stuck value) of a batch-mean reward
    (``batch`` answers right with chance ``p``) that is exactly 0 from ``onset`` on; None: none within ``after``.
    A run whose detector alarms before the onset is redrawn by the caller (None, -1)."""
    import random

    from adaptive_eval.detectors import make_detector

    rng = random.Random(seed)
    dets = [make_detector(d) for d in spec]
    for i in range(onset + after):
        x = sum(rng.random() < p for _ in range(batch)) / batch if i < onset else 0.0
        if any(d.update(x, i) is not None for d in dets):
            return -1 if i < onset else i - onset + 1
    return None


def stuck_tables(quick: bool = False) -> None:
    """SIMULATED.  The ``stuck`` detector's two promises: on streams that repeat by nature, false alarms at most
    one in ``arl0`` steps (mean steps to the first alarm from a fresh detector, runs capped at 5 x arl0); and a
    GRPO batch-mean reward that falls to exactly 0 (a verifier scoring everything 0) caught within a few steps
    whatever the batch, where the default CUSUM needs the drop to stand out of the batch noise."""
    import random

    from adaptive_eval.detectors import Stuck

    t0 = time.perf_counter()
    runs = 5 if quick else 20
    print(f"SIMULATED: stuck on streams that repeat by nature; mean steps to the first alarm ({runs} runs each, "
          "capped at 5 x arl0; 'c': capped runs)")
    head = f"{'stream':24s}" + "".join(f"{'arl0 ' + format(a, ','):>22s}" for a in ARL0S)
    print(head)
    print("-" * len(head))
    problems = []
    for name, make in _repeating_streams().items():
        cells = []
        for arl0 in ARL0S:
            lengths, capped = [], 0
            for r in range(runs):
                rng = random.Random(1000 * r + 7)
                draw, det, cap = make(rng), Stuck(arl0=arl0), 5 * int(arl0)
                n = next((i + 1 for i in range(cap) if det.update(draw(i), i) is not None), None)
                capped += n is None
                lengths.append(cap if n is None else n)
            mean = statistics.fmean(lengths)
            se = statistics.stdev(lengths) / math.sqrt(len(lengths))
            if mean < 0.7 * arl0:
                problems.append(f"{name} arl0={arl0}: {mean:.0f} steps to a false alarm < 0.7 x arl0")
            cells.append(f"{mean:>9,.0f} +-{se:6,.0f}{f' {capped}c':>4s}")
        print(f"{name:24s}" + "".join(f"{c:>22s}" for c in cells))
    seeds, steps = (3, 5000) if quick else (10, 5000)
    print(f"\nSIMULATED: stuck at its defaults (arl0 100,000) on healthy streams that drift and are stored at low "
          f"precision (a review's); false alarms in {seeds} runs x {steps:,} values [95% exact Poisson]")
    for name, draw in _drifting_streams().items():
        alarms = 0
        for seed in range(seeds):
            rng, det = random.Random(seed), Stuck()
            alarms += sum(det.update(draw(rng, t), t) is not None for t in range(steps))
        lo, hi = _poisson_ci(alarms, seeds * steps)
        print(f"{name:38s} {alarms:3d} alarms: {1000 * alarms / (seeds * steps):.3f} per 1,000 steps "
              f"[{lo:.3f}, {hi:.3f}]")
    n = 50 if quick else 200
    cusum = _preset_cusum()
    rows = (("default cusum", [cusum]), ("stuck", [{"type": "stuck"}]),
            ("stuck, then cusum", [{"type": "stuck"}, cusum]))
    print(f"\nSIMULATED: a batch-mean reward (answers right with chance 0.3) exactly 0 from value 300 on; median "
          "values after the onset to the first alarm [>= 90% CI, order statistics], and the share caught within 25; "
          f"n = {n} runs per cell (a run alarming before the onset redrawn: 'r', how many); default settings "
          "(stuck arl0 100,000)")
    batches = (4, 8, 16, 32, 128)
    head = f"{'detectors':20s}" + "".join(f"{'batch ' + str(b):>27s}" for b in batches)
    print(head)
    print("-" * len(head))
    for label, spec in rows:
        cells = []
        for batch in batches:
            delays, seed, redrawn = [], 0, 0
            while len(delays) < n:
                d = _stuck_delay(spec, batch, 0.3, seed)
                seed += 1
                redrawn += d == -1
                if d != -1:
                    delays.append(POST_CAP if d is None else d)
            lo, hi, _ = _median_ci(delays)
            within = sum(d <= 25 for d in delays) / n
            fmt = lambda v: ">200" if v >= POST_CAP else f"{v:g}"  # noqa: E731
            cells.append(f"{fmt(statistics.median(delays))} [{fmt(lo)}, {fmt(hi)}] {within:4.0%} {redrawn}r")
        print(f"{label:20s}" + "".join(f"{c:>27s}" for c in cells))
    print(f"\n{time.perf_counter() - t0:.0f} s")
    print("targets met" if not problems else "targets missed:\n  " + "\n  ".join(problems))


CLIMBS = (0.0, 0.03, 0.06, 0.1, 0.2, 0.3)  # sd of noise per step
CLIMB_TREND = {"trend": 0.02, "threshold": 7.8}  # the slope-following CUSUM (--tradeoff's threshold for it)
DROPS = (3.0, 5.0, 8.0)  # sd of noise
CLIMB_ONSET, CLIMB_WITHIN, CLIMB_FLAT = 150, 20, 100


def _climb_then_drop(seed: int, climb: float, drop: float, after: int = CLIMB_WITHIN, flat: int = 0) -> list[float]:
    """Noise N(0, 1) around a level that climbs ``climb`` a step for CLIMB_ONSET steps, stays ``flat`` steps, then
    falls ``drop`` (0: no drop), ``after`` values after the drop."""
    rng = np.random.default_rng([seed, int(1000 * climb), int(10 * drop), after, flat])
    n = CLIMB_ONSET + flat + after
    top = climb * CLIMB_ONSET
    level = [climb * t if t < CLIMB_ONSET else top - (drop if t >= CLIMB_ONSET + flat else 0.0) for t in range(n)]
    return [float(x + e) for x, e in zip(level, rng.normal(size=n))]


def climb_tables(quick: bool = False) -> None:
    """A reward that climbs steadily, then drops: caught within CLIMB_WITHIN steps, and false alarms on the climb.

    The presets' CUSUM tracks its stream (``adapt``): a tracked level alone lags a climb by slope / adapt, and that
    lag widens the tracked scale, so a drop right after a climb must be larger to be seen.  ``trend``
    (``CLIMB_TREND``) follows the slope too; its costs are the last two columns: a climb that stops with no drop
    (the extrapolated reference overshoots the level that stays; an alarm within CLIMB_FLAT values of the stop),
    and a drop of DROPS[1] sd CLIMB_FLAT values after the stop (the overshoot widened the scale).  Rows: the
    default preset's CUSUM, the same with ``CLIMB_TREND``, and river's ADWIN and Page-Hinkley at their defaults on
    values standardized by their first 30 (as ``--real`` feeds them).  Each run is one seeded series; a run that
    alarms before the drop counts as an alarm on the climb and, when it alarms again within the window after the
    drop, as caught.  Shares with 95% Wilson intervals over the runs (independent series).  SIMULATED.
    """
    from river import drift

    from adaptive_eval.stats import wilson_interval

    n = 20 if quick else 100
    cusum = _preset_cusum()
    rows = (("default preset", lambda: _Preset([cusum], "x")),
            ("trend 0.02, threshold 7.8", lambda: _Preset([{**cusum, **CLIMB_TREND}], "x")),
            ("river ADWIN()", lambda: _River(drift.ADWIN(), standardize=True)),
            ("river PageHinkley()", lambda: _River(drift.PageHinkley(), standardize=True)))
    print(f"SIMULATED: noise N(0, 1); the level climbs c sd a step for {CLIMB_ONSET} steps, then drops d sd; caught: "
          f"an alarm within {CLIMB_WITHIN} steps of the drop; n = {n} runs a cell; [95% Wilson over runs]")
    print(f"{'detector':26s} {'climb c':>7s} " + " ".join(f"{f'caught, drop {d:g}':>19s}" for d in DROPS)
          + f" {'alarm on the climb':>19s} {'climb stops: alarm':>19s} {f'+{CLIMB_FLAT}, drop {DROPS[1]:g}':>19s}")

    def share(k: int) -> str:
        lo, hi = wilson_interval(k, n)
        return f"{k / n:4.0%} [{lo:.0%}, {hi:.0%}]"

    def runs(build, c, d, after=CLIMB_WITHIN, flat=0) -> tuple[int, int]:
        """(runs alarmed from the drop on, runs alarmed before it)."""
        hit = early = 0
        for seed in range(n):
            det = build()
            alarms = [t for t, v in enumerate(_climb_then_drop(seed, c, d, after, flat)) if det(v, t)]
            hit += any(t >= CLIMB_ONSET + flat for t in alarms)
            early += any(t < CLIMB_ONSET for t in alarms)
        return hit, early

    for label, build in rows:
        for c in CLIMBS:
            cells = [runs(build, c, d) for d in DROPS]
            stops, _ = runs(build, c, 0.0, CLIMB_FLAT)
            later, _ = runs(build, c, DROPS[1], CLIMB_WITHIN, CLIMB_FLAT)
            print(f"{label:26s} {c:7g} " + " ".join(f"{share(k):>19s}" for k, _ in cells)
                  + f" {share(cells[0][1]):>19s} {share(stops):>19s} {share(later):>19s}", flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--real", action="store_true",
                      help="only the tables on the shipped real traces' streams, beside river's ADWIN and PageHinkley")
    mode.add_argument("--warmup", action="store_true",
                      help="only CUSUM's and BOCPD's warm-up test: shifts inside the warm-up, false alarms, the Nile")
    mode.add_argument("--stuck", action="store_true",
                      help="only the stuck detector: false alarms on streams that repeat by nature, and the delay to a "
                           "batch-mean reward stuck at exactly 0, beside the default CUSUM")
    mode.add_argument("--climb", action="store_true",
                      help="only a drop after a steady climb: the default CUSUM with and without its trend, beside "
                           "river's ADWIN and Page-Hinkley (SIMULATED)")
    mode.add_argument("--tradeoff", action="store_true",
                      help="only the default CUSUM's settings against alternatives, on synthetic streams")
    ap.add_argument("--quick", action="store_true", help="about 8x fewer runs (a rough check in well under a minute); "
                                                           "with --real: the river rows matched on one synthetic seed")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="worker processes")
    ap.add_argument("--only", default="", help="comma-separated detector names")
    ap.add_argument("traces", nargs="*", metavar="TRACE",
                    help="with --real: these trace files instead of the shipped real traces (CSV, JSONL or a "
                         "TensorBoard folder; events from each one's sidecar <trace>.events.yaml, as "
                         "adaptive-eval check reads it; the quiet stretch is what comes before the first event)")
    from adaptive_eval.cli import _add_config_args, _add_trace_args, _foreign

    real = ap.add_argument_group("with --real (as adaptive-eval replay reads them)")
    _add_config_args(real)
    _add_trace_args(real)
    real.add_argument("--tcpd-annotations", metavar="FILE",
                      help="TCPD's annotations.json: the events of each TRACE whose file stem names a dataset there "
                           "(TCPD's datasets/<name>/<name>.json, read as a trace), where at least 2 annotators "
                           "agree within 5 records, at the earliest point")
    args = ap.parse_args(argv)
    if args.jobs < 1:
        ap.error(f"--jobs must be at least 1, got {args.jobs}")
    if args.only:
        from adaptive_eval.detectors import available

        unknown = [n for n in args.only.split(",") if n not in available()]
        if unknown:  # (a typo ran no detector and printed "targets met"; a probe)
            ap.error(f"--only: unknown detector {unknown[0]!r} (known: {', '.join(available())})")
    if args.only and (args.real or args.stuck or args.climb):
        # (taken and ignored: --climb --only cusum still printed river's rows; a probe)
        ap.error("--only picks the detectors of the synthetic tables, not of --real, --stuck or --climb")
    if args.traces and not args.real:
        ap.error("trace files are read with --real only")
    if (args.config is not None or args.overrides) and not args.real:
        ap.error("--config and --set apply with --real only")
    if _foreign(args) and not args.traces:
        ap.error("--stream, --eval, --step-column and --keep-last-run apply to the TRACE files given with --real")
    if args.tcpd_annotations is not None and not args.traces:
        ap.error("--tcpd-annotations applies to the TRACE files given with --real (TCPD's dataset JSON files)")
    if args.real:
        try:
            from adaptive_eval import load_config

            load_config(args.config, args.overrides)  # a bad config or override: exit 2 before any work
            annotations = None
            if args.tcpd_annotations is not None:
                from adaptive_eval.convert import _read_json

                _, annotations = _read_json(args.tcpd_annotations)
                if not isinstance(annotations, dict):
                    raise ValueError(f"{args.tcpd_annotations}: not TCPD's annotations.json (an object of datasets)")
                unused = [p for p in args.traces if pathlib.Path(p).stem not in annotations]
                if len(unused) == len(args.traces):
                    raise ValueError(f"{args.tcpd_annotations}: annotates none of the traces given (by file stem: "
                                     f"{', '.join(pathlib.Path(p).stem for p in args.traces[:5])})")
                for p in unused:
                    print(f"note: {p}: not in {args.tcpd_annotations}; its events come from its sidecar, if any",
                          file=sys.stderr)
            data = _real_data(args.traces, args, annotations)
        except (OSError, ValueError) as e:
            ap.exit(2, f"detectors.py: {e}\n")
        real_streams(args.traces, data, args.config, args.overrides, quick=args.quick)
        return
    if args.tradeoff:
        tradeoff()
        return
    if args.warmup:
        warmup_changes()
        return
    if args.stuck:
        stuck_tables(quick=args.quick)
        return
    if args.climb:
        climb_tables(quick=args.quick)
        return

    from adaptive_eval.detectors import available

    names = [n for n in available() if not args.only or n in args.only.split(",")]
    thresholded = [n for n in names if n not in ("nonfinite", "stuck")]
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
    print("SIMULATED: seeded i.i.d. N(0, 1) streams, a mean shift of d sd at value 300 for the delays")
    print("delay columns: median delay / bound ln(arl0)/(d^2/2); runs = ARL runs (+capped), delay runs per shift")
    print(head)
    print("-" * len(head))
    problems = []
    for name in names:
        if name in ("nonfinite", "stuck"):
            what = "no threshold" if name == "nonfinite" else "see --stuck"
            print(f"{name:12s} {'-':>6s} {what:>16s} {'':>6s} {'':>9s}   "
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

"""Calibration of detector thresholds to an in-control average run length (``arl0``).

``arl0`` is the mean number of updates, counted from a fresh detector (warm-up included), before the first
false alarm on in-control data.  The threshold that gives it is found by simulation:

* in-control data is i.i.d. standard normal by default, or a circular block bootstrap of a given in-control
  segment (``in_control``, blocks of ``block_size`` values, default n^(1/3)), which keeps the segment's
  marginal distribution and its short-range autocorrelation;
* for a detector whose alarm rule is "statistic > threshold" and whose statistic does not depend on the
  threshold before the first alarm (CUSUM, Page-Hinkley, spike, BOCPD, the window tests, KSWIN), one
  simulated path gives the run length for every threshold at once: the first time the running maximum of the
  statistic passes it.  ``runs`` paths of ``3 x arl0`` updates give the curve ARL(threshold) (runs that do not
  alarm within the cap count as the cap, which errs towards a higher threshold);
* ADWIN exposes no statistic; its ``delta`` is found by bisection with common random numbers.

All simulation is seeded, so a calibration is deterministic.  Results are cached: the curves for each
detector's default settings ship in ``_calibration_table.py`` (regenerate with
``python -m adaptive_eval.detectors._calibration``), other settings are simulated once and kept in memory and
in ``$ADAPTIVE_EVAL_CACHE_DIR`` (default ``~/.cache/adaptive_eval``) as ``calibration.json``.
Beyond the simulated range the threshold is extrapolated linearly in log(arl0), which is what theory
predicts for CUSUM-type statistics.  Other settings are simulated only up to a bounded ARL (the class's
``_simulated_max_arl``, a few seconds of updates: 250 for BOCPD; 5,000, its default arl0, for CUSUM,
about 10 s), a larger arl0 extrapolated
from there the same way: a few seconds for any arl0, where the full simulation took 71 s at arl0 2e4 and an hour
at 1e6 (found in review).  Extrapolated from low ARLs, the threshold errs high (the curve bends down): on the
shipped curves cut at 1,000 and extrapolated, CUSUM's threshold at 30,000 comes out 0.4-0.8 above the
simulated one, a longer in-control run than asked, and fewer false alarms.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import math
import os
import pathlib
import tempfile

import numpy as np

__all__ = ["calibrate_threshold", "simulate_curve", "cache_path"]

CALIBRATION_VERSION = 1
DEFAULT_RUNS = 200
SEED = 20240607
_CAP_FACTOR = 3.0
_POINTS_PER_DECADE = 8

_memory: dict[str, dict] = {}


# --------------------------------------------------------------------------- keys and caches
def _bootstrap_digest(in_control, block_size) -> str | None:
    if in_control is None:
        return None
    h = hashlib.sha1(np.asarray(in_control, dtype=np.float64).tobytes())
    h.update(str(block_size).encode())
    return h.hexdigest()[:16]


def calibration_key(name: str, params: dict, in_control=None, block_size=None) -> str:
    """The cache key of one calibration problem (detector, its calibration-relevant parameters, data)."""
    return json.dumps([CALIBRATION_VERSION, name, params, _bootstrap_digest(in_control, block_size)],
                      sort_keys=True, separators=(",", ":"))


def cache_path() -> pathlib.Path:
    root = os.environ.get("ADAPTIVE_EVAL_CACHE_DIR")
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "adaptive_eval")
    return pathlib.Path(root) / "calibration.json"


def _read_disk() -> dict:
    try:
        with open(cache_path(), encoding="utf-8") as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_disk(key: str, entry: dict) -> None:
    path = cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = _read_disk()
        data[key] = entry
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".calibration.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home: the in-memory cache still works


def _table() -> dict:
    from adaptive_eval.detectors._calibration_table import TABLE

    return TABLE


# --------------------------------------------------------------------------- public entry point
def calibrate_threshold(det, arl0: float) -> float:
    """The raw threshold that gives ``det`` (a configured detector) an in-control ARL of ``arl0``."""
    cls = type(det)
    params = det._calibration_params()
    in_control, block_size = getattr(det, "in_control", None), getattr(det, "block_size", None)
    entry = _table().get(calibration_key(det.name, params)) if in_control is None else None
    if entry is None or not _covers(entry, arl0):
        # A setting's own curve, keyed by what it was simulated to as well: a curve simulated for a larger arl0
        # (another run cap), found in the cache, gave a smaller one another threshold than a fresh simulation, so
        # what a config decided depended on what this machine (or this process, for another stream) had calibrated
        # before (a probe: alarms [49, 238, 1095] on one machine, [49, 238, 1095, 2855] on another)
        bound = simulated_max_arl(det)
        to = float(arl0) if arl0 <= bound or cls._calibration_method == "bisection" else float(bound)
        key = calibration_key(det.name, {**params, "simulated_to": to}, in_control, block_size)
        entry = _memory.get(key)
        if entry is None:
            entry = _read_disk().get(key)
        if entry is None:
            entry = _simulate_bounded(det, params, arl0, in_control, block_size)
            _write_disk(key, entry)
        _memory[key] = entry
    return det._threshold_of(solve(entry, arl0, discrete=cls._discrete_statistic))


def simulated_max_arl(det) -> float:
    """The largest ARL that a setting without a shipped curve is simulated to: the class's bound (a few seconds
    of updates), or 5 dead times when that is more (the curve must rise some way above its floor there)."""
    return max(float(type(det)._simulated_max_arl), 5.0 * det._dead_time()[0])


def _simulate_bounded(det, params: dict, arl0: float, in_control, block_size) -> dict:
    """The curve of a setting without a shipped curve: simulated up to ``arl0`` when that is within
    :func:`simulated_max_arl`, else up to that bound and extrapolated beyond it like the shipped curves (a
    simulation costs runs x 3 arl0 updates: an hour at arl0 1e6, found in review).  Not ADWIN's bisection: its
    ARL at delta 1 is already hundreds, so a bounded curve would have no slope to extrapolate (a one-off
    bisection for the arl0 asked, as before: about 1.5 s per 300 of arl0)."""
    cls, bound = type(det), simulated_max_arl(det)
    if arl0 <= bound or cls._calibration_method == "bisection":
        return simulate_curve(cls, params, max_arl=arl0, in_control=in_control, block_size=block_size)
    entry = simulate_curve(cls, params, max_arl=bound, in_control=in_control, block_size=block_size, table=True)
    entry["extrapolate"] = True
    return entry


def _upper_slope(logs: list[float], stats: list[float]) -> float:
    """The slope of the statistic threshold against log ARL, least squares through the curve's upper half (how
    the curve is extrapolated beyond its last point); 0 when those log ARLs do not vary."""
    half = max(2, len(logs) // 2)
    xs, ys = logs[-half:], stats[-half:]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((a - mx) ** 2 for a in xs)
    return sum((a - mx) * (b - my) for a, b in zip(xs, ys)) / var if var > 0 else 0.0


def shipped_arl(det, stat: float) -> float | None:
    """The in-control ARL of ``det`` at statistic threshold ``stat`` read off its shipped calibration curve (the
    inverse of :func:`solve`), or None when the table has no curve for its settings.  Only the shipped table,
    never the on-disk cache: what a configuration decides must not depend on what this machine calibrated
    before."""
    if getattr(det, "in_control", None) is not None:
        return None
    entry = _table().get(calibration_key(det.name, det._calibration_params()))
    if entry is None or len(entry["curve"]) < 2:
        return None
    stats = [c[0] for c in entry["curve"]]
    logs = [math.log(c[1]) for c in entry["curve"]]
    if stat <= stats[0]:
        return math.exp(logs[0])
    i = bisect.bisect_left(stats, stat)
    if i >= len(stats):  # beyond the curve: the least squares line through its upper half, as solve extrapolates
        slope = _upper_slope(logs, stats)
        return math.exp(min(logs[-1] + (stat - stats[-1]) / slope, 700.0)) if slope > 0 else None
    x0, x1, y0, y1 = stats[i - 1], stats[i], logs[i - 1], logs[i]
    return math.exp(y0 if x1 == x0 else y0 + (y1 - y0) * (stat - x0) / (x1 - x0))


def _covers(entry: dict, arl0: float) -> bool:
    if entry.get("extrapolate", False):
        return True
    if len(entry["curve"]) == 1:
        # A one-off bisection (ADWIN) found the threshold of its own arl0 only: read for a smaller arl0 it
        # gave that same, stricter threshold (fewer alarms than asked; found in review).
        return abs(entry["max_arl"] - arl0) <= 1e-3 * arl0
    return entry["max_arl"] >= arl0 * 0.999


def solve(entry: dict, arl0: float, *, discrete: bool = False) -> float:
    """The statistic threshold for ``arl0`` on a curve of (threshold, ARL) points."""
    curve = entry["curve"]
    stats = [c[0] for c in curve]
    logs = [math.log(c[1]) for c in curve]
    x = math.log(arl0)
    if discrete:
        for s, lg in zip(stats, logs):
            if lg >= x - 1e-9:
                return s
    if x <= logs[0]:
        return stats[0]
    i = bisect.bisect_left(logs, x)
    if i >= len(logs):  # extrapolate from the upper half of the curve (least squares line)
        return stats[-1] + _upper_slope(logs, stats) * (x - logs[-1])
    x0, x1, y0, y1 = logs[i - 1], logs[i], stats[i - 1], stats[i]
    return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)


# --------------------------------------------------------------------------- simulation
def _paths(runs: int, length: int, seed: int, in_control, block_size):
    """Yield ``runs`` in-control paths (numpy arrays of ``length``), deterministically."""
    data = None if in_control is None else np.asarray(in_control, dtype=np.float64)
    if data is not None and block_size is None:
        block_size = max(1, round(len(data) ** (1 / 3)))
    for i in range(runs):
        rng = np.random.Generator(np.random.PCG64([seed, i]))
        if data is None:
            yield rng.standard_normal(length)
        else:
            n = len(data)
            blocks = -(-length // block_size)
            starts = rng.integers(0, n, size=blocks)
            idx = (starts[:, None] + np.arange(block_size)[None, :]) % n
            yield data[idx.ravel()[:length]]


def _records(det, values) -> tuple[list[float], list[int]]:
    """Record values of the running maximum of the statistic and the (1-based) update where each was set."""
    best = -math.inf
    rec_s: list[float] = []
    rec_t: list[int] = []
    # The simulated paths hold finite floats only, so update's checks can be skipped where a detector allows it.
    update, statistic = det._finite_path(), det._statistic
    for t, v in enumerate(values, 1):
        update(v, t)
        s = statistic()
        if s > best:
            best = s
            rec_s.append(s)
            rec_t.append(t)
    return rec_s, rec_t


def _records_from_path(stat: np.ndarray) -> tuple[list[float], list[int]]:
    run_max = np.maximum.accumulate(stat)
    new = np.empty(len(stat), dtype=bool)
    new[0] = True
    new[1:] = run_max[1:] > run_max[:-1]
    idx = np.flatnonzero(new)
    return run_max[idx].tolist(), (idx + 1).tolist()


def _mean_run_length(records, cap: int, h: float) -> float:
    total = 0
    for rec_s, rec_t in records:
        i = bisect.bisect_right(rec_s, h)
        total += rec_t[i] if i < len(rec_t) else cap
    return total / len(records)


def _solve_records(records, cap: int, target: float, pool: list[float]) -> float | None:
    """Smallest pooled record value h with mean run length >= target (None if even the largest falls short)."""
    lo, hi = 0, len(pool) - 1
    if not pool:  # no statistic ever moved
        return None
    if _mean_run_length(records, cap, pool[hi]) < target:
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if _mean_run_length(records, cap, pool[mid]) >= target:
            hi = mid
        else:
            lo = mid + 1
    return pool[lo]


def _targets(lo: float, hi: float) -> list[float]:
    out = []
    j = math.ceil(math.log10(lo) * _POINTS_PER_DECADE)
    while 10 ** (j / _POINTS_PER_DECADE) < hi:
        out.append(10 ** (j / _POINTS_PER_DECADE))
        j += 1
    out.append(hi)
    return out


def simulate_curve(cls, params: dict, *, max_arl: float, in_control=None, block_size=None, runs: int | None = None,
                   seed: int = SEED, min_arl: float = 20.0, table: bool = False) -> dict:
    """Simulate the curve of (statistic threshold, in-control ARL) for ``cls(**params)`` up to ``max_arl``."""
    runs = runs or getattr(cls, "_calibration_runs", DEFAULT_RUNS)
    max_arl = float(max_arl)
    # (past the warm-up, which can be longer than the ARL asked for: no statistic moves before it ends)
    cap = int(_CAP_FACTOR * max_arl) + 10 + 2 * int(params.get("warmup") or 0)
    if cls._calibration_method == "bisection":
        curve = _bisection_curve(cls, params, max_arl, cap, runs, seed, in_control, block_size, min_arl, table)
    else:
        records = []
        fast = getattr(cls, "_statistic_path", None)
        for values in _paths(runs, cap, seed, in_control, block_size):
            if fast is not None:
                records.append(_records_from_path(fast(params, values)))
            else:
                records.append(_records(cls._calibration_instance(params), values.tolist()))
        pool = sorted({s for rec_s, _ in records for s in rec_s})
        floor = _mean_run_length(records, cap, -math.inf)
        curve = []
        for target in _targets(max(min_arl, 1.2 * floor), max_arl):
            h = _solve_records(records, cap, target, pool)
            if h is None:
                break
            if curve and h <= curve[-1][0]:
                continue  # the same threshold already reaches a higher ARL: keep the curve strictly increasing
            curve.append([h, _mean_run_length(records, cap, h)])
        if not curve:
            # (a ValueError, named by the config's key and line: a RuntimeError came out of load_config, a traceback;
            # a probe with k: 4, where the statistic is 0 on nearly every in-control value)
            raise ValueError(f"{cls.name}: no threshold gives an in-control run of {max_arl:g} updates with these "
                             f"settings ({', '.join(f'{k} {v}' for k, v in params.items() if v is not None)}): give "
                             "a threshold instead of arl0, or change the settings (a smaller k)")
        if cls._discrete_statistic:
            # Exact ARL of each achievable threshold, so lookups can pick the next one up.
            curve = [[h, _mean_run_length(records, cap, h)] for h in pool]
            curve = _strictly_increasing([point for point in curve if point[1] >= min_arl])
    return {"curve": curve, "max_arl": max_arl, "runs": runs, "seed": seed}


def _strictly_increasing(curve):
    out = []
    for h, a in curve:
        if not out or (a > out[-1][1] and h > out[-1][0]):
            out.append([h, a])
    return out


def _first_alarm(cls, params, stat: float, values: list[float], cap: int) -> int:
    det = cls._calibration_instance(params, cls._threshold_of(stat))
    update = det._finite_path()  # finite floats only (see _records)
    for t, v in enumerate(values, 1):
        if update(v, t) is not None:
            return t
    return cap


def _bisection_curve(cls, params, max_arl, cap, runs, seed, in_control, block_size, min_arl, table):
    paths = [p.tolist() for p in _paths(runs, cap, seed, in_control, block_size)]
    lo_s, hi_s = cls._stat_range

    def arl(stat):
        return sum(_first_alarm(cls, params, stat, p, cap) for p in paths) / runs

    curve = []
    floor = arl(lo_s)
    # Bisection costs a simulation per step: the table gets 2 points a decade, a one-off request one point.
    targets = [t for t in _targets(max(min_arl, 1.2 * floor), max_arl) if t == max_arl or round(
        math.log10(t) * _POINTS_PER_DECADE) % (_POINTS_PER_DECADE // 2) == 0] if table else [max_arl]
    for target in targets:
        a, b = lo_s, hi_s
        if arl(b) < target:
            break
        for _ in range(14):
            mid = 0.5 * (a + b)
            if arl(mid) >= target:
                b = mid
            else:
                a = mid
        if not curve or b > curve[-1][0]:
            curve.append([b, target])
    if not curve:
        curve = [[lo_s, floor]]
    return curve


# --------------------------------------------------------------------------- the shipped table
def _default_problems():
    """(class, params, max_arl) of every default setting whose curve ships in the table."""
    from adaptive_eval.detectors._registry import _REGISTRY

    out = []
    for name, cls in _REGISTRY.items():
        if cls._threshold_param is None:
            continue
        for variant in cls._table_variants():
            det = cls(**variant, **{cls._threshold_param: cls._dummy_threshold})
            out.append((cls, det._calibration_params(), cls._table_max_arl))
    return out


def _read_table_file(path: pathlib.Path) -> dict:
    namespace: dict = {}
    try:
        exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), namespace)  # our own generated file
    except FileNotFoundError:
        return {}
    return dict(namespace.get("TABLE", {}))


def write_table(path: str | os.PathLike | None = None, only: str | None = None) -> None:
    """Simulate the curves of the default settings and write ``_calibration_table.py`` (slow: minutes).

    ``only`` restricts the work to one detector; the other entries of the file are kept.
    """
    import time

    path = pathlib.Path(path or pathlib.Path(__file__).with_name("_calibration_table.py"))
    fresh = {}
    for cls, params, max_arl in _default_problems():
        if only and cls.name != only:
            continue
        t0 = time.perf_counter()
        entry = simulate_curve(cls, params, max_arl=max_arl, table=True, runs=getattr(cls, "_table_runs", None))
        entry["extrapolate"] = True
        fresh[calibration_key(cls.name, params)] = entry
        print(f"{cls.name:12s} {json.dumps(params):70s} {len(entry['curve']):3d} points "
              f"{time.perf_counter() - t0:7.1f} s", flush=True)
    table = _read_table_file(path)  # read late: another process may have written other entries meanwhile
    table.update(fresh)
    _write_table_file(path, table)


def _write_table_file(path: pathlib.Path, table: dict) -> None:
    lines = ['"""Shipped calibration curves for the default detector settings (generated; do not edit).',
             "",
             "Regenerate with ``python -m adaptive_eval.detectors._calibration [DETECTOR]``.  Each entry maps a",
             "calibration key to the simulated curve of [statistic threshold, in-control ARL] points on i.i.d.",
             "N(0, 1) data (see ``_calibration.py``).",
             '"""',
             "",
             "# fmt: off",
             "TABLE = {"]
    for key in sorted(table):
        entry = table[key]
        lines.append(f"    {key!r}: {{")
        for k, v in entry.items():
            if k != "curve":
                lines.append(f"        {k!r}: {v!r},")
        lines.append("        'curve': [")
        points = [f"[{h!r}, {a!r}]" for h, a in entry["curve"]]
        for n in range(0, len(points), 3):
            lines.append("            " + ", ".join(points[n:n + 3]) + ",")
        lines.append("        ],")
        lines.append("    },")
    lines.append("}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    import sys

    write_table(only=sys.argv[1] if len(sys.argv) > 1 else None)

"""A one-picture summary of a run or replay folder: ``plot_run(run_dir) -> Path`` writes a PNG.

The folder is the one replay (and the demo) write: ``evals.jsonl`` (one line per evaluation:
``step``, ``epoch``, ``sample_size``, ``reason``, ``metrics`` {name: mean}, ``ci`` {name: [low, high]},
``seconds``), ``alarms.jsonl`` (``step``, ``stream``, ``detector``, ``direction``, ``location``),
``summary.json`` and ``tb/`` (TensorBoard event files, see :mod:`adaptive_eval.tensorboard`).
Everything but one of ``evals.jsonl`` and ``tb/`` may be missing.

The picture, on the training-step axis: one panel per eval metric (each evaluation a point with its
confidence interval, the marker's area proportional to the sample size, its colour the kind of
reason it ran for), then up to four watched streams from ``tb/`` (the streams that raised alarms
first); alarms are vertical lines in every panel, labelled by detector; stretches where an evaluation
was deferred are shaded; the title carries the summary figures.

matplotlib is imported only when a picture is drawn, and only its object-oriented Agg canvas is
used, so plotting neither needs a display nor touches pyplot's global state.
"""

from __future__ import annotations

import json
import math
import os
import re
import textwrap
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from adaptive_eval.convert import _count

__all__ = ["PlotError", "plot_run"]

MAX_STREAM_PANELS = 4
MAX_EVAL_PANELS = 3

_REASON_COLORS = {"trigger": "tab:blue", "alarm": "tab:red", "budget": "tab:orange", "resources": "tab:purple",
                  "lookback": "tab:green",  # (lookback: a kept checkpoint evaluated after a fall)
                  # (the policies' own: "peak (5)" and "interval (23)" were two grey legend entries; a probe)
                  "interval": "tab:cyan", "peak": "tab:olive", "before_train": "tab:brown", "async": "tab:pink"}
_OTHER_REASON_COLOR = "tab:gray"
_DETECTOR_COLORS = ["crimson", "darkorange", "darkviolet", "teal", "saddlebrown", "deeppink"]
_ARROWS = {"up": "\u2191", "down": "\u2193"}


class PlotError(ValueError):
    """A folder that cannot be plotted: no run in it, or a file in it that cannot be read."""


@dataclass
class _Run:
    name: str
    evals: list[dict] = field(default_factory=list)
    alarms: list[dict] = field(default_factory=list)
    summary: dict = field(default_factory=dict)
    streams: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # in order of appearance
    deferred: tuple[np.ndarray, np.ndarray] | None = None


# --- reading ---------------------------------------------------------------------------------------------

def _read_jsonl(path: Path) -> list[tuple[int, dict]]:
    """(line number, object) for every line; a torn last line (a crash mid-write) is skipped with a warning."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PlotError(f"{path}: cannot read: {exc}") from None
    lines = text.split("\n")
    out = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            if lineno == len(lines):  # no newline after it: the line being written when the run stopped
                warnings.warn(f"{path}:{lineno}: skipping an incomplete last line", stacklevel=3)
                continue
            raise PlotError(f"{path}:{lineno}: not valid JSON: {exc.msg}") from None
        if not isinstance(obj, dict):
            raise PlotError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
        out.append((lineno, obj))
    return out


def _number(value, where: str, key: str, *, optional: bool = True) -> float:
    if value is None and optional:
        return math.nan
    if value in ("inf", "-inf"):  # (replay writes strict JSON: +-inf as strings, NaN as null)
        return math.inf if value == "inf" else -math.inf
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PlotError(f"{where}: {key!r} must be a number, got {value!r}")
    return float(value)


def _step(obj: dict, where: str) -> int:
    step = obj.get("step")
    if isinstance(step, bool) or not isinstance(step, int):
        raise PlotError(f"{where}: 'step' must be an integer, got {step!r}" if "step" in obj
                        else f"{where}: missing key 'step'")
    return step


def _read_evals(path: Path) -> list[dict]:
    evals = []
    for lineno, obj in _read_jsonl(path):
        where = f"{path}:{lineno}"
        metrics = obj.get("metrics")
        if not isinstance(metrics, Mapping):
            raise PlotError(f"{where}: missing key 'metrics' (a mapping of metric name to mean)"
                            if metrics is None else f"{where}: 'metrics' must be a mapping, got {metrics!r}")
        ci = obj.get("ci") or {}
        counts = obj.get("n") or {}
        if not isinstance(ci, Mapping) or not isinstance(counts, Mapping):
            raise PlotError(f"{where}: 'ci' and 'n' must be mappings of metric name to values")
        record = {"step": _step(obj, where), "reason": str(obj.get("reason") or ""), "metrics": {}, "ci": {}}
        for name, mean in metrics.items():
            record["metrics"][name] = _number(mean, where, f"metrics.{name}")
            bounds = ci.get(name)
            if bounds is None:
                record["ci"][name] = (math.nan, math.nan)
            elif isinstance(bounds, (list, tuple)) and len(bounds) == 2:
                record["ci"][name] = (_number(bounds[0], where, f"ci.{name}"), _number(bounds[1], where, f"ci.{name}"))
            else:
                raise PlotError(f"{where}: 'ci.{name}' must be [low, high], got {bounds!r}")
        size = obj.get("sample_size")
        if size is None:  # the whole eval set: the per-metric counts say how much that was
            size = max((c for c in counts.values() if isinstance(c, (int, float))), default=None)
        record["sample_size"] = None if size is None else _number(size, where, "sample_size")
        record["n"] = {k: float(c) for k, c in counts.items()
                       if isinstance(c, (int, float)) and not isinstance(c, bool)}
        evals.append(record)
    return evals


def _read_alarms(path: Path) -> list[dict]:
    alarms = []
    for lineno, obj in _read_jsonl(path):
        where = f"{path}:{lineno}"
        alarms.append({"step": _step(obj, where), "stream": str(obj.get("stream") or "?"),
                       "detector": str(obj.get("detector") or "?"), "direction": obj.get("direction")})
    return alarms


def _read_tb(tb_dir: Path) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], dict[str, list[tuple[int, str]]]]:
    """All scalars (tag -> (steps, values)) and text markers (tag -> [(step, text)]) of the event files."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    from adaptive_eval.tensorboard import read_texts

    acc = EventAccumulator(str(tb_dir), size_guidance={"scalars": 0, "tensors": 0})
    try:
        acc.Reload()
    except Exception as exc:  # noqa: BLE001 - a damaged event file: say which folder
        raise PlotError(f"{tb_dir}: cannot read the TensorBoard event files: {exc}") from None
    # TensorBoard's reader ends a file at a damaged record without a word: a run damaged a third of the way in was
    # drawn as a run of 1 evaluation and no alarm (of 6 and 1), unsaid, where replay says it (a probe)
    from adaptive_eval.trace import _event_files, _say_damaged

    for file in _event_files(tb_dir):  # (its own read of the bytes: the events are read above, not again)
        _say_damaged(file)
    tags = acc.Tags()
    scalars = {}
    for tag in tags.get("scalars", []):
        events = acc.Scalars(tag)
        steps = np.array([e.step for e in events], dtype=np.int64)
        values = np.array([e.value for e in events], dtype=float)
        order = np.argsort(steps, kind="stable")
        scalars[tag] = (steps[order], values[order])
    texts = {}
    for tag in ("decisions", "alarms"):
        if tag in tags.get("tensors", []):  # a log written before text markers were paged
            texts[tag] = [(e.step, tensor_util.make_ndarray(e.tensor_proto).item().decode("utf-8", "replace"))
                          for e in acc.Tensors(tag)]
        else:
            texts[tag] = read_texts(acc, tag)
    return scalars, texts


# The decisions text (adaptive.py): "evaluated: <reason> (n=<size>[ of <asked> asked])[, deferred since step <s>]",
# asynchronously "submitted: ..." alike and "integrated: evaluation of step <s> (<reason>, n=<size>)", and for a
# kept checkpoint "evaluated the checkpoint of step <s> (<reason>, n=<size>)".
_EVALUATED_TEXT = re.compile(r"(?:evaluated|submitted): (.*) \(n=[^)]*\)(?:, deferred since step \d+)?$", re.DOTALL)
_INTEGRATED_TEXT = re.compile(r"integrated: evaluation of step (\d+) \((.*), n=([^)]*)\)$", re.DOTALL)
_LOOKBACK_TEXT = re.compile(r"evaluated the checkpoint of step (\d+) \((.*), (?:n=(\d+)|failed: .*)\)$", re.DOTALL)
# "[rank r: ]<stream> <detector>[ <direction>][: <message>]" (adaptive.py's _on_alarm)
_ALARM_TEXT = re.compile(r"(?:rank \d+: )?(.+?) (\S+?)(?: (up|down))?(?:: |:?$)", re.DOTALL)


def _hf_scalars(scalars: Mapping) -> dict:
    """The HF adapter's results as HF's TensorBoard folder holds them (``eval/[<name>_]<m>`` at HF's 1-based step,
    ``<m>_ci_low``/``_ci_high``/``_n`` beside it, ``adaptive_step`` the weights' step) as the evaluator's own tags
    (``eval/[<name>_]<m>``, ``/ci_low``, ``/ci_high``, ``/n``) at the weights' step; HF's own evaluations (no
    ``adaptive_step`` at their step) at the weights' 0-based step, ``step - 1``.  (Drawn as they were, the
    intervals were metrics of their own, every reason unknown and each point a step after its decision; a probe.)"""
    from adaptive_eval.trace import hf_eval_tags

    rows: dict[int, dict[str, float]] = {}
    for tag, (steps, values) in scalars.items():
        if tag.startswith("eval/"):
            for s, v in zip(steps.tolist(), values.tolist()):
                rows.setdefault(int(s), {})[tag] = v
    out: dict[str, dict[int, float]] = {}
    for step, row in rows.items():
        for tag, value, at, prefix, kind in hf_eval_tags(step, row):
            if kind != "hf" and prefix != "eval/":
                continue  # (a name= callback's results are drawn from its own run, with its reasons and sizes: here
                #          they took the unnamed one's at the same step)
            out.setdefault(tag if kind in ("hf", "metric") else f"{tag}/{kind}", {})[at] = value
    kept = {t: v for t, v in scalars.items() if not t.startswith("eval/")}
    for tag, points in out.items():
        steps = sorted(points)
        kept[tag] = (np.array(steps), np.array([points[s] for s in steps]))
    return kept


def _evals_from_tb(scalars: Mapping, texts: Mapping) -> list[dict]:
    """Evaluations rebuilt from ``eval/<m>`` scalars (and a kept checkpoint's, ``lookback/<m>``, on its step),
    for a folder with ``tb/`` but no ``evals.jsonl``: each metric's mean and interval, the reason from the
    decisions text, the evaluation's size from ``controller/sample_size`` (the look back's from its text).  The
    other per-metric tags (``/n``, ``/samples_per_item``, ``/nan``) and the paired differences are not metrics."""
    from adaptive_eval.tensorboard import (_EVAL_SUFFIXES, CI_HIGH_SUFFIX, CI_LOW_SUFFIX, COUNT_SUFFIX, EVAL_PREFIX,
                                           PAIRED_SUFFIX)
    from adaptive_eval.trace import _HF_TB_BOOKKEEPING

    if any(t.startswith("eval/") and t.endswith("adaptive_step") for t in scalars):
        scalars = _hf_scalars(scalars)
    reasons, looked_back, async_sizes = {}, {}, {}
    for step, text in texts.get("decisions", []):
        if back := _LOOKBACK_TEXT.match(text):
            looked_back[int(back.group(1))] = (back.group(2), None if back.group(3) is None else float(back.group(3)))
        elif done := _INTEGRATED_TEXT.match(text):
            # (its size: the text's; controller/sample_size is written where it was integrated, which several
            # evaluations may share: the drain at close)
            reasons[int(done.group(1))] = done.group(2)
            if done.group(3).isdigit():
                async_sizes[int(done.group(1))] = float(done.group(3))
        elif (ran := _EVALUATED_TEXT.match(text)) and step not in reasons:
            reasons[step] = ran.group(1)
    sizes = dict(zip(*(a.tolist() for a in scalars["controller/sample_size"]))) \
        if "controller/sample_size" in scalars else {}
    by_key: dict[tuple[int, str], dict] = {}
    for tag, (steps, values) in scalars.items():
        if tag in _HF_TB_BOOKKEEPING:  # (HF's eval/runtime, eval/samples_per_second: drawn as evaluated metrics, "12
            continue  # evaluations, 0 samples", in a folder HF's TensorBoardCallback wrote; a new user's probe)
        prefix = next((p for p in (EVAL_PREFIX, "lookback/") if tag.startswith(p)), None)
        name = tag[len(prefix):] if prefix else ""
        if not name or name.endswith(PAIRED_SUFFIX) or PAIRED_SUFFIX + "/" in name:
            continue
        suffix = next((x for x in _EVAL_SUFFIXES if name.endswith(x) and len(name) > len(x)), "")
        metric = name[:len(name) - len(suffix)]
        for s, v in zip(steps.tolist(), values.tolist()):
            rec = by_key.setdefault((s, prefix), {"step": s, "metrics": {}, "_lo": {}, "_hi": {}, "_n": {}})
            if suffix == CI_LOW_SUFFIX:
                rec["_lo"][metric] = v
            elif suffix == CI_HIGH_SUFFIX:
                rec["_hi"][metric] = v
            elif suffix == COUNT_SUFFIX:
                rec["_n"][metric] = v
            elif not suffix:
                rec["metrics"][metric] = v
    evals = []
    for (s, prefix), rec in sorted(by_key.items(), key=lambda kv: (kv[0][0], kv[0][1] == EVAL_PREFIX)):
        lo, hi, counts = rec.pop("_lo"), rec.pop("_hi"), rec.pop("_n")
        rec["ci"] = {m: (lo.get(m, math.nan), hi.get(m, math.nan)) for m in rec["metrics"]}
        largest = max(counts.values(), default=None)  # (without a size: the largest metric's count)
        if prefix == EVAL_PREFIX:
            rec["reason"], size = reasons.get(s, ""), async_sizes.get(s, sizes.get(s, largest))
        else:
            rec["reason"], size = looked_back.get(s, ("lookback", None))
            size = largest if size is None else size
        rec["sample_size"] = size
        rec["n"] = {m: float(c) for m, c in counts.items() if m in rec["metrics"]}  # (each suite's own items)
        if rec["metrics"]:
            evals.append(rec)
    return evals


def _alarms_from_tb(texts: Mapping) -> list[dict]:
    """Alarms rebuilt from the ``alarms`` text ("[rank r: ]<stream> <detector>[ <direction>]: <message>"), for
    a folder with ``tb/`` but no ``alarms.jsonl``."""
    alarms = []
    for step, text in texts.get("alarms", []):
        head = _ALARM_TEXT.match(text)
        stream, detector, direction = head.groups() if head else (text, "?", None)
        alarms.append({"step": int(step), "stream": stream, "detector": detector, "direction": direction})
    return alarms


def _stream_tags(scalars: Mapping, alarmed: set[str]) -> list[str]:
    """The ``streams/<name>`` tags that are streams, not detector statistics (``streams/<name>/<detector>``).

    Stream names may contain "/", so a tag counts as a detector statistic when the tag one level up is
    logged as well, unless an alarm names it as a stream.

    >>> _stream_tags({"streams/train/loss": 0, "streams/train/loss/cusum": 0, "streams/kl": 0}, set())
    ['streams/train/loss', 'streams/kl']
    """
    out = []
    for tag in scalars:
        if not tag.startswith("streams/"):
            continue
        name = tag[len("streams/"):]
        parent = tag.rsplit("/", 1)[0]
        if name in alarmed or parent == "streams" or parent not in scalars:
            out.append(tag)
    return out


def _choose_streams(names: list[str], alarms: list[dict], limit: int = MAX_STREAM_PANELS) -> list[str]:
    """At most ``limit`` streams, chosen by the alarms they raised (most first), then a reward's or a loss's first
    (the run's main signals: a demo without alarms left out its train/reward; a probe), then by name, drawn in name
    order: the same trace gives the same panels in the same order, from the demo's folder or a replay.

    >>> _choose_streams(["e", "b", "c", "d", "a"], [{"stream": "d", "step": 5}, {"stream": "d", "step": 9},
    ...                                              {"stream": "c", "step": 1}])
    ['a', 'b', 'c', 'd']
    >>> _choose_streams(["train/entropy", "train/kl", "train/loss", "train/length", "train/reward"], [])
    ['train/entropy', 'train/kl', 'train/loss', 'train/reward']
    """
    counts: dict[str, int] = {}
    for a in alarms:
        counts[a["stream"]] = counts.get(a["stream"], 0) + 1
    main = ("reward", "loss")

    def key(n):
        return -counts.get(n, 0), not any(w in n.lower() for w in main), n

    return sorted(sorted(names, key=key)[:limit])


def _deferred_spans(steps: np.ndarray, values: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) step spans where ``controller/deferred`` was on (a span open at the end closes there).

    >>> _deferred_spans(np.array([0, 1, 2, 3, 4, 5]), np.array([0, 1, 1, 0, 1, 1.0]))
    [(1, 3), (4, 5)]
    """
    spans = []
    start = None
    for s, v in zip(steps.tolist(), values.tolist()):
        on = v >= 0.5
        if on and start is None:
            start = s
        elif not on and start is not None:
            spans.append((start, s))
            start = None
    if start is not None:
        spans.append((start, int(steps[-1]) if steps[-1] > start else start + 1))
    return spans


def _tb_of(run_dir: Path) -> Path:
    """A run folder's TensorBoard logs: its ``tb/``, or the folder itself where it holds event files (your own run's
    ``logging.tensorboard_dir``: the README said plot draws it, and plot said "no run found")."""
    tb = run_dir / "tb"
    if not tb.is_dir() and next(run_dir.glob("events.out.tfevents.*"), None) is not None:
        return run_dir
    return tb


def _is_run(d: Path) -> bool:
    return (d / "evals.jsonl").is_file() or _tb_of(d).is_dir()


def _load(run_dir: Path) -> _Run:
    if not run_dir.is_dir():
        raise PlotError(_not_a_folder(run_dir))
    evals_path, alarms_path, summary_path, tb_dir = (run_dir / "evals.jsonl", run_dir / "alarms.jsonl",
                                                     run_dir / "summary.json", _tb_of(run_dir))
    if not evals_path.is_file() and not tb_dir.is_dir():
        below = sorted(p.name for p in run_dir.iterdir() if p.is_dir() and _is_run(p))
        hint = f"; runs below it: {', '.join(below)}" if below else ""
        raise PlotError(f"{run_dir}: no run found (expected evals.jsonl, TensorBoard event files or a tb/ folder of "
                        f"them){hint}")
    run = _Run(name=run_dir.resolve().name)
    if summary_path.is_file():
        try:
            summary = json.loads(summary_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise PlotError(f"{summary_path}: cannot read: {exc}") from None
        if not isinstance(summary, dict):
            raise PlotError(f"{summary_path}: expected a JSON object, got {type(summary).__name__}")
        run.summary = summary
    scalars, texts = _read_tb(tb_dir) if tb_dir.is_dir() else ({}, {})
    if not evals_path.is_file() and not any(texts.values()) and not any(t.startswith(("streams/", "controller/"))
                                                                         for t in scalars):
        # (another trainer's TensorBoard folder, nothing of adaptive_eval's in it, was drawn as its run: its eval/
        # scalars as "4 evaluations, 0 samples, 0 alarms", its streams not at all; found in review)
        raise PlotError(f"{tb_dir}: no adaptive_eval run in these event files (no decisions, alarms, streams/ or "
                        f"controller/ tags: another trainer's log?); to see what adaptive_eval decides on it, replay "
                        f"it and draw that: adaptive-eval replay {tb_dir} --out DIR, then adaptive-eval plot DIR")
    run.evals = _read_evals(evals_path) if evals_path.is_file() else _evals_from_tb(scalars, texts)
    run.alarms = _read_alarms(alarms_path) if alarms_path.is_file() else _alarms_from_tb(texts)
    alarmed = {a["stream"] for a in run.alarms}
    for tag in _stream_tags(scalars, alarmed):
        run.streams[tag[len("streams/"):]] = scalars[tag]
    if "controller/deferred" in scalars:
        run.deferred = scalars["controller/deferred"]
    return run


# --- drawing ---------------------------------------------------------------------------------------------

def _reason_kind(reason: str) -> str:
    return reason.split(":", 1)[0] if reason else "unknown"


def _smooth(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing mean over the finite values of the last ``window`` points (NaN where there are none)."""
    finite = np.isfinite(values)
    csum = np.concatenate([[0.0], np.cumsum(np.where(finite, values, 0.0))])
    ccount = np.concatenate([[0], np.cumsum(finite)])
    idx = np.arange(1, len(values) + 1)
    lo = np.maximum(idx - window, 0)
    total, count = csum[idx] - csum[lo], ccount[idx] - ccount[lo]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


_HUGE = 1e150  # beyond what an axis can span (matplotlib: "arange: cannot compute length" at 1e308)


def _drawable(values) -> np.ndarray:
    """``values`` as floats, a huge one (beyond ``_HUGE``) as an infinity of its sign: marked as one, not drawn (a
    huge metric is data: a value of 1e308 made plot exit 2 with matplotlib's "arange: cannot compute length";
    a probe)."""
    values = np.asarray(values, dtype=float)
    with np.errstate(invalid="ignore"):
        return np.where(np.abs(values) > _HUGE, np.sign(values) * np.inf, values)


def _mark_nonfinite(ax, steps, values) -> bool:
    bad = ~np.isfinite(values)
    if bad.any():
        ax.plot(steps[bad], np.full(bad.sum(), 0.02), linestyle="none", marker="|", markersize=10, color="red",
                transform=ax.get_xaxis_transform(), label="NaN / inf / huge")
        return True
    return False


def _area(sizes, size_range: tuple[float, float]):
    """Marker area proportional to the sample size (one middling size when all evaluations had the same)."""
    smin, smax = size_range
    if not smax > 0 or smin == smax:
        return np.full(np.shape(sizes), 70.0)
    return 20.0 + 180.0 * np.asarray(sizes, dtype=float) / smax


def _draw_eval_panel(ax, metric: str, evals: list[dict], size_range: tuple[float, float]) -> None:
    # By step: a kept checkpoint evaluated later (policy.lookback) comes after the evaluation that prompted it.
    rows = sorted((e for e in evals if metric in e["metrics"]), key=lambda e: e["step"])
    steps = np.array([e["step"] for e in rows])
    means = _drawable([e["metrics"][metric] for e in rows])
    lo = _drawable([e["ci"][metric][0] for e in rows])
    hi = _drawable([e["ci"][metric][1] for e in rows])
    smin, smax = size_range
    sizes = np.array([_size(e, metric) for e in rows])
    area = np.where(np.isfinite(sizes), _area(sizes, size_range), 40.0)
    ok = np.isfinite(means)
    # Join neighbouring evaluations only: across a gap wider than twice the usual spacing (a fixed schedule's
    # 200 steps) a line would draw a gradual change that nobody measured.
    xs, ys = steps[ok].astype(float), means[ok]
    if len(xs) > 2:
        gaps = np.diff(xs)
        cut = np.flatnonzero(gaps > 2.0 * np.median(gaps)) + 1
        xs, ys = np.insert(xs, cut, np.nan), np.insert(ys, cut, np.nan)
    ax.plot(xs, ys, color="0.6", linewidth=0.8, zorder=1)
    with np.errstate(invalid="ignore"):
        yerr = np.vstack([np.clip(means - lo, 0, None), np.clip(hi - means, 0, None)])
    has_ci = ok & np.isfinite(yerr).all(axis=0)
    ax.errorbar(steps[has_ci], means[has_ci], yerr=yerr[:, has_ci], fmt="none", ecolor="0.35", elinewidth=1.0,
                capsize=2.5, zorder=2)
    kinds = [_reason_kind(e["reason"]) for e in rows]
    for kind in dict.fromkeys(kinds):
        sel = ok & np.array([k == kind for k in kinds])
        if sel.any():
            ax.scatter(steps[sel], means[sel], s=area[sel], color=_REASON_COLORS.get(kind, _OTHER_REASON_COLOR),
                       edgecolor="black", linewidth=0.5, zorder=3, label=f"eval: {kind} ({int(sel.sum())})")
    _mark_nonfinite(ax, steps, means)
    ax.set_ylabel(_label(f"eval/{metric}"), fontsize=9)
    handles, labels = ax.get_legend_handles_labels()
    if np.isfinite(smax):  # a key to the marker sizes
        for n in sorted({smin, smax}):
            handles.append(ax.scatter([], [], s=_area(n, size_range), color="white", edgecolor="black",
                                      linewidth=0.5))
            labels.append(f"n = {n:,.0f}")
    # Below the curve's top, where the alarm labels are written (loc="best" could cover one).
    ax.legend(handles, labels, loc="lower left", fontsize=7, framealpha=0.85, ncol=2, scatterpoints=1)


def _draw_stream_panel(ax, name: str, steps: np.ndarray, values: np.ndarray) -> None:
    values = _drawable(values)
    if len(steps) > 200:
        ax.plot(steps, values, color="tab:blue", linewidth=0.6, alpha=0.35)
        window = max(5, len(steps) // 60)
        ax.plot(steps, _smooth(values, window), color="tab:blue", linewidth=1.4, label=f"mean of last {window}")
    else:
        ax.plot(steps, values, color="tab:blue", linewidth=1.0, marker="." if len(steps) < 60 else None)
    marked = _mark_nonfinite(ax, steps, values)
    ax.set_ylabel(_label(name), fontsize=9)
    if len(steps) > 200 or marked:
        ax.legend(loc="best", fontsize=7, framealpha=0.85)
    finite = values[np.isfinite(values)]
    if len(finite) > 20:  # keep a few wild values from flattening the picture
        # (nearest: actual values; interpolated, one 1e30 among 200 put the top at 5e27, the jump 1 -> 2 flat; a probe)
        low, high = np.percentile(finite, [0.5, 99.5], method="nearest")
        pad = 0.08 * (high - low) if high > low else max(abs(high), 1.0) * 0.05
        ax.set_ylim(low - pad, high + pad)
        # Say where values lie beyond the axis (a blow-up), instead of cutting them off without a sign.
        for beyond, y, marker, word in ((values > high + pad, 0.97, "^", "above"),
                                        (values < low - pad, 0.03, "v", "below")):
            if beyond.any():
                extreme = values[beyond].max() if word == "above" else values[beyond].min()
                ax.plot(steps[beyond], np.full(int(beyond.sum()), y), linestyle="none", marker=marker, markersize=4,
                        color="crimson", transform=ax.get_xaxis_transform(), zorder=4,
                        label=f"{int(beyond.sum())} off the axis ({word}; extreme {extreme:.3g})")
                ax.legend(loc="best", fontsize=7, framealpha=0.85)


def _draw_alarms(axes, alarms: list[dict], x_range: float) -> None:
    colors: dict[str, str] = {}
    for a in alarms:
        colors.setdefault(a["detector"], _DETECTOR_COLORS[len(colors) % len(_DETECTOR_COLORS)])
    for ax in axes:
        for a in alarms:
            ax.axvline(a["step"], color=colors[a["detector"]], linewidth=1.0, linestyle="--", alpha=0.8, zorder=0)
    # Alarms closer together than this share one label (its lines side by side), so labels never overlap.
    groups: list[list[dict]] = []
    for a in sorted(alarms, key=lambda a: a["step"]):
        if groups and a["step"] - groups[-1][0]["step"] < 0.025 * x_range:
            groups[-1].append(a)
        else:
            groups.append([a])
    top = axes[0]
    for group in groups:
        lines = list(dict.fromkeys(
            f"{a['detector']} {_ARROWS.get(a['direction'], '')} {a['stream']}".replace("  ", " ") for a in group))
        if len(lines) > 3:
            lines = lines[:2] + [f"+{len(lines) - 2} more"]
        color = colors[group[0]["detector"]] if len({a["detector"] for a in group}) == 1 else "0.2"
        # No box behind the label: it must not hide the evaluations just before the alarm; drawn under them.
        top.text(group[0]["step"], 0.98, "\n".join(lines), transform=top.get_xaxis_transform(), rotation=90,
                 ha="right", va="top", fontsize=7, color=color, alpha=0.9, zorder=0.5)


def _size(e: dict, metric: str) -> float:
    """The items an evaluation measured ``metric`` on: its own n where the row has one (with eval suites each
    suite's panel drew its markers at the evaluation's size, every suite's items: n = 70 for aime's 20; a new
    user's probe), else the evaluation's size (NaN: unknown)."""
    n = (e.get("n") or {}).get(metric)
    if n is None:
        n = e["sample_size"]
    return math.nan if n is None else float(n)


def _items(rows: list[dict], metric: str) -> int:
    """The items ``metric`` was measured on over ``rows`` (its own n where the row has one: with eval suites the
    evaluation's size is every suite's items, and the ood panel read "948 samples" for 4 x 30 items; a fresh-clone
    check), else the evaluation's size."""
    return int(sum((e.get("n") or {}).get(metric, e["sample_size"] or 0) for e in rows))


def _label(name: str, width: int = 28) -> str:
    """A panel's y-label: a long name (verl's eval/val-core/openai/gsm8k/reward/mean@1) broken at its slashes onto
    lines of about ``width`` characters (it ran into the panel above; a probe)."""
    if len(name) <= width:
        return name
    lines, line = [], ""
    for part in name.split("/"):
        piece = part if not line else "/" + part
        if line and len(line) + len(piece) > width:
            lines.append(line + "/")
            line = part
        else:
            line += piece
    return "\n".join(lines + [line])


def _title(run: _Run) -> str:
    s = run.summary
    evals = s.get("evals", len(run.evals))
    samples = s.get("samples", sum(e["sample_size"] or 0 for e in run.evals))
    alarms = s.get("alarms", len(run.alarms))
    if isinstance(alarms, (list, dict)):
        alarms = len(alarms)
    parts = [_count(evals, "evaluation"), _count(samples, "sample") if isinstance(samples, (int, float)) else None,
             _count(alarms, "alarm")]
    if isinstance(s.get("steps"), (int, float)):
        parts.append(_count(s["steps"], "step"))
    eval_s, train_s = s.get("eval_seconds"), s.get("train_seconds")
    if isinstance(eval_s, (int, float)):
        share = ""
        if isinstance(train_s, (int, float)) and train_s > 0:
            share = f" ({100.0 * eval_s / (eval_s + train_s):.1f}% of the run)"
        # summary.json comes from replay or the demo, whose clocks are simulated (replay.* seconds per step/item).
        parts.append(f"simulated eval time {eval_s:,.0f} s{share}")
    if str(s.get("simulated", "")).startswith("every evaluation drawn"):
        # (a replay's: its points looked like a real run's measured evaluations, "simulated" said only of the
        # eval time; a probe)
        measured = any(e.get("metrics") for e in run.evals)  # (with no ground truth they measured nothing; a probe)
        # (with no evaluation at all, a schedule that never fired, the title said the trace had no ground truth; a
        # probe)
        parts.insert(0, "SIMULATED schedule (no evaluation made)" if not run.evals else
                     "SIMULATED evaluations (drawn from the trace's ground truth)" if measured else
                     "SIMULATED schedule (the trace has no eval ground truth: nothing measured)")
    return f"{run.name}: " + ", ".join(p for p in parts if p)


def _panel_metrics(evals) -> list[str]:
    """The eval metrics in the order they get panels: the measured ones before what is derived from them
    (pass@k, maj@k, per stratum), and each suite's first metric before any suite's second, so that a second
    suite is not crowded out by the first one's pass@1 (the same number as its mean@1)."""
    from adaptive_eval.replay import _DERIVED

    metrics = list(dict.fromkeys(m for e in evals for m in e["metrics"]))
    primary = [m for m in metrics if not _DERIVED.search(m)]
    rank: dict[str, int] = {}
    order = []
    for m in primary:
        head = m.split("/", 1)[0] if "/" in m else ""
        order.append((rank.get(head, 0), len(order), m))
        rank[head] = rank.get(head, 0) + 1
    return [m for _, _, m in sorted(order)] + [m for m in metrics if _DERIVED.search(m)]


def _draw(run: _Run):
    from matplotlib.figure import Figure

    metrics = _panel_metrics(run.evals)
    eval_metrics = metrics[:MAX_EVAL_PANELS]
    stream_names = _choose_streams(list(run.streams), run.alarms)
    n_panels = max(1, len(eval_metrics) + len(stream_names))
    height = 1.2 + 2.1 * n_panels
    fig = Figure(figsize=(11, height), dpi=110, layout="constrained")
    fig.get_layout_engine().set(rect=(0, 0.25 / height, 1, 1 - 0.25 / height))  # room for the footnote
    axes = list(np.atleast_1d(fig.subplots(n_panels, 1, sharex=True, squeeze=False)[:, 0]))

    all_steps = [e["step"] for e in run.evals] + [a["step"] for a in run.alarms]
    for steps, _ in run.streams.values():
        if len(steps):
            all_steps += [int(steps[0]), int(steps[-1])]
    x_range = float(max(all_steps) - min(all_steps)) if all_steps else 1.0

    sizes = [n for e in run.evals for m in eval_metrics if m in e["metrics"] and math.isfinite(n := _size(e, m))]
    size_range = (min(sizes), max(sizes)) if sizes else (math.nan, math.nan)
    for ax, metric in zip(axes, eval_metrics):
        _draw_eval_panel(ax, metric, run.evals, size_range)
    for ax, name in zip(axes[len(eval_metrics):], stream_names):
        _draw_stream_panel(ax, name, *run.streams[name])
    if not eval_metrics and not stream_names:
        axes[0].text(0.5, 0.5, "nothing recorded yet: no evaluations and no watched streams",
                     transform=axes[0].transAxes, ha="center", va="center", color="0.4")

    if run.deferred is not None and len(run.deferred[0]):
        spans = _deferred_spans(*run.deferred)
        for ax in axes:
            for i, (a, b) in enumerate(spans):
                ax.axvspan(a, b, facecolor="orange", alpha=0.3, hatch="///", edgecolor="darkorange", linewidth=0,
                           zorder=0,
                           label="evaluation deferred" if i == 0 and ax is axes[-1] else None)
        if spans:
            axes[-1].legend(loc="best", fontsize=7, framealpha=0.85)
    if run.alarms:
        _draw_alarms(axes, run.alarms, x_range)

    for ax in axes:
        ax.grid(True, color="0.9", linewidth=0.6)
        ax.tick_params(labelsize=8)
    axes[-1].set_xlabel("training step", fontsize=9)
    notes = []
    if len(metrics) > len(eval_metrics):
        notes.append(f"{_count(len(metrics) - len(eval_metrics), 'more eval metric')} not shown")
    if len(run.streams) > len(stream_names):
        hidden = sorted(set(run.streams) - set(stream_names))
        notes.append(f"{_count(len(hidden), 'more stream')} not shown ({', '.join(hidden[:3])}"
                     f"{', ...' if len(hidden) > 3 else ''})")
    if run.alarms:
        notes.append("dashed lines: alarms (detector \u2191/\u2193 stream)")
    if run.deferred is not None and (run.deferred[1] >= 0.5).any():
        notes.append("shaded: evaluation deferred")
    if eval_metrics:
        notes.append("marker area \u221d sample size, colour: why it ran; bars: confidence interval")
    # (wrapped: a replay's title, with its SIMULATED, ran off both sides of the picture)
    fig.suptitle(textwrap.fill(_title(run), 105), fontsize=11, fontweight="bold")
    fig.text(0.01, 0.04 / height, "; ".join(notes), fontsize=7, color="0.35", ha="left", va="bottom")
    return fig


def plot_run(run_dir: str | os.PathLike, out_path: str | os.PathLike | None = None) -> Path:
    """Draw the run or replay in ``run_dir`` to a PNG (default ``<run_dir>/run.png``); return its path.

    Raises :class:`PlotError` for a folder with no run in it (neither ``evals.jsonl`` nor ``tb/``), and
    for a file in it that cannot be read (naming the file and line).
    """
    run_dir = Path(run_dir)
    out = Path(out_path) if out_path is not None else run_dir / "run.png"
    fig = _draw(_load(run_dir))
    _save(fig, out)
    return out


# --- several runs on shared axes ------------------------------------------------------------------------------

_RUN_COLORS = ["tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink"]


def _not_a_folder(path: Path) -> str:
    if not path.exists():
        return f"{path}: no such folder"
    return (f"{path}: a file, not a run folder (plot draws what replay, the demo or an evaluator's logging wrote; "
            f"a trace is drawn after `adaptive-eval replay {path} --out DIR`)")


def _save(fig, out: Path) -> None:
    """Write the picture in the format its name says (``.png`` when it has no suffix); a format matplotlib does
    not write is a :class:`PlotError` (``--out x.pdf`` was PNG bytes under a .pdf name)."""
    suffix = out.suffix.lower().lstrip(".")
    formats = fig.canvas.get_supported_filetypes()
    if suffix and suffix not in formats:
        raise PlotError(f"{out}: .{suffix} is not a picture format matplotlib writes ({', '.join(sorted(formats))})")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)  # (as replay makes its --out folder: it failed; a probe)
        fig.savefig(out, format=suffix or "png")
    except OSError as exc:
        raise PlotError(f"{out}: cannot write the picture: {exc.strerror or exc}") from None


def find_runs(dirs) -> list[Path]:
    """The run folders in ``dirs``: each one that holds a run, or else the runs right below it (a demo's output)."""
    runs = []
    for d in map(Path, dirs):
        if not d.is_dir():
            raise PlotError(_not_a_folder(d))
        if _is_run(d):
            runs.append(d)
            continue
        below = sorted(p for p in d.iterdir() if p.is_dir() and _is_run(p))
        if not below:
            raise PlotError(f"{d}: no run found (expected evals.jsonl, TensorBoard event files or a tb/ folder of "
                            "them, in it or in the folders right below it)")
        runs += below
    return runs


def _draw_comparison(runs: list[_Run]):
    from matplotlib.figure import Figure

    every_metric = _panel_metrics([e for r in runs for e in r.evals])
    metrics = every_metric[:MAX_EVAL_PANELS]
    with_streams = next((r for r in runs if r.streams), None)
    alarms = [a for r in runs for a in r.alarms]
    stream_names = _choose_streams(list(with_streams.streams), alarms) if with_streams else []
    n_panels = max(1, len(metrics) + len(stream_names))
    height = 1.4 + 2.1 * n_panels
    fig = Figure(figsize=(11, height), dpi=110, layout="constrained")
    axes = list(np.atleast_1d(fig.subplots(n_panels, 1, sharex=True, squeeze=False)[:, 0]))
    sizes = [n for r in runs for e in r.evals for m in metrics if m in e["metrics"] and math.isfinite(n := _size(e, m))]
    size_range = (min(sizes), max(sizes)) if sizes else (math.nan, math.nan)
    # Each run a little apart sideways: runs that evaluated the same steps alike (the demo's adaptive and async
    # runs) hid one under the other, the legend counting points nobody could see (a probe).
    every_step = [e["step"] for r in runs for e in r.evals]
    shift = 0.004 * max(max(every_step, default=1) - min(every_step, default=0), 1)
    for ax, metric in zip(axes, metrics):
        for i, run in enumerate(runs):
            rows = [e for e in run.evals if metric in e["metrics"] and abs(e["metrics"][metric]) <= _HUGE]
            if not rows:
                continue
            color = _RUN_COLORS[i % len(_RUN_COLORS)]
            steps = np.array([e["step"] for e in rows]) + (i - (len(runs) - 1) / 2) * shift
            means = np.array([e["metrics"][metric] for e in rows])
            lo = _drawable([e["ci"].get(metric, [math.nan, math.nan])[0] for e in rows])
            hi = _drawable([e["ci"].get(metric, [math.nan, math.nan])[1] for e in rows])
            n = np.array([_size(e, metric) for e in rows], dtype=float)
            ok = np.isfinite(lo) & np.isfinite(hi)
            ax.errorbar(steps[ok], means[ok], yerr=np.vstack([means[ok] - lo[ok], hi[ok] - means[ok]]).clip(0),
                        fmt="none", ecolor=color, elinewidth=0.9, alpha=0.7, capsize=2, zorder=2)
            # Markers only: a line between two evaluations 200 steps apart would draw a change nobody measured.
            ax.scatter(steps, means, s=np.where(np.isfinite(n), _area(n, size_range), 40.0), color=color,
                       edgecolor="black", linewidth=0.4, zorder=3, alpha=0.85,
                       label=f"{run.name}: {_count(len(rows), 'eval')}, {_count(_items(rows, metric), 'item')}")
        ax.set_ylabel(_label(f"eval/{metric}"), fontsize=9)
        ax.legend(loc="lower left", fontsize=7, framealpha=0.9)
    for ax, name in zip(axes[len(metrics):], stream_names):
        _draw_stream_panel(ax, f"{name} ({with_streams.name})", *with_streams.streams[name])
    for i, run in enumerate(runs):
        for a in run.alarms:
            for ax in axes:
                ax.axvline(a["step"], color=_RUN_COLORS[i % len(_RUN_COLORS)], linewidth=0.9, linestyle="--",
                           alpha=0.7, zorder=0)
    for ax in axes:
        ax.grid(True, color="0.9", linewidth=0.6)
        ax.tick_params(labelsize=8)
    axes[-1].set_xlabel("training step", fontsize=9)
    fig.suptitle(" vs ".join(r.name for r in runs) + ": evaluations on shared axes", fontsize=11,
                 fontweight="bold")
    notes = ["marker area \u221d sample size; bars: confidence interval; dashed: alarms, in the run's colour; "
             "runs drawn a little apart sideways"]
    if len(every_metric) > len(metrics):  # (as the single-run picture says; a run's metric may have no panel)
        hidden = every_metric[len(metrics):]
        notes.append(f"{_count(len(hidden), 'more eval metric')} not shown ({', '.join(hidden[:4])}"
                     f"{', ...' if len(hidden) > 4 else ''})")
    fig.supxlabel("; ".join(notes), fontsize=7, color="0.35")
    return fig


def plot_runs(dirs, out_path: str | os.PathLike | None = None) -> Path:
    """One picture of several runs: each folder of ``dirs`` that holds a run, or the runs right below it (the
    demo's ``runs/demo`` gives its adaptive and fixed runs).  One run is drawn as :func:`plot_run` draws it;
    several share their axes.  Default output: ``<the common folder>/runs.png`` (one run: its ``run.png``)."""
    found = list({p.resolve(): p for p in reversed(find_runs(dirs))}.values())[::-1]  # (a run given twice is one run:
    # `plot o/plain o/plain` drew it twice, "o/plain vs o/plain"; a probe)
    if len(found) == 1:
        return plot_run(found[0], out_path)
    out = Path(out_path) if out_path is not None else Path(os.path.commonpath([p.resolve() for p in found])) / "runs.png"
    names = [p.name for p in found]
    runs = []
    for p in found:
        run = _load(p)
        if names.count(p.name) > 1:
            run.name = f"{p.parent.name}/{p.name}"
        runs.append(run)
    fig = _draw_comparison(runs)
    _save(fig, out)
    return out

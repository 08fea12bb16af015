"""Converters from other projects' logs to native :class:`~adaptive_eval.trace.Trace` objects, and the
library of real recorded traces (``real_traces()``, ``load_real(name)``).

* :func:`from_columns`: any CSV, by naming its step column, the stream columns and the eval columns (with a
  scale, e.g. ``{"eval_acc": 0.01}`` for percent).  The CLI's ``--stream COL`` / ``--eval COL[:scale]``.
* :func:`from_item_results`: per-problem eval results in long form (step, problem, answer's score) as the
  per-item ground truth of an eval suite.
* :func:`convert_grpo`: rasbt/reasoning-from-scratch GRPO metrics (``eval_acc`` in percent every 50 steps).
* :func:`convert_nanogpt`: modded-nanogpt step logs (``train_loss`` per step, ``val_loss`` every 125 steps).
* :func:`convert_distill`: rasbt ch08 distillation metrics (``train_loss``/``val_loss`` every 50 steps).
* :func:`convert_sb3_monitor`, :func:`convert_sb3_evaluations`, :func:`convert_sb3_run`: Stable-Baselines3
  ``Monitor`` CSVs and ``EvalCallback`` results.
* :func:`convert_lm_eval_long`, :func:`convert_bigscience`: lm-eval-harness results per checkpoint.
* :func:`convert_tcpd`, :func:`tcpd_events`: a Turing Change Point Dataset series and its annotated change
  points (``read_trace`` reads a TCPD file too).

Save any of them with :func:`adaptive_eval.trace.write_trace`.

Eval columns follow ARCHITECTURE.md: ``eval/<metric>`` is the true value at that step (carried forward by
replay), ``eval/<metric>:std`` its per-sample standard deviation.  lm-eval reports the standard error of the
mean with the sample standard deviation (ddof 1), so for a proportion ``p`` over ``n`` items
``stderr = sqrt(p (1 - p) / (n - 1))``: ``n`` is recovered exactly from any proportion metric of a task
(ARC-Challenge gives 1172, its test-set size) and the per-sample std is ``stderr * sqrt(n)``.  Where ``n``
cannot be recovered (no proportion metric with ``0 < p < 1``, or no stderr) no ``:std`` column is written,
so replay returns the value itself.
"""

from __future__ import annotations

import csv
import dataclasses
import decimal
import json
import math
import numbers
import os
import pathlib
import re
import warnings
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from adaptive_eval.stats import fsum
from adaptive_eval.synthetic import Event
from adaptive_eval.trace import (
    MISSING_CELLS,
    RESERVED,
    VALIDATION_PREFIXES,
    Trace,
    TraceError,
    TraceRecord,
    _dates_relative,
    _merge,
    _parse_epoch,
    _parse_int,
    _parse_time,
    _WANDB_STEPS,
    _text_columns,
    check_separator,
    date_hint,
    warn_restarts,
    read_text,
    skip_comment_lines,
    warn_clashes,
    warn_text_columns,
)

_NO_CELL = MISSING_CELLS | {""}
# A trainer's own step, logged as a metric beside W&B's row counter: HF's and TRL's, verl's
_TRAINER_STEPS = ("train/global_step", "trainer/global_step", "training/global_step")
# Columns another tool writes for itself, not metrics of the run: W&B's bookkeeping and a pandas index.
_BOOKKEEPING = ("_step", "_runtime", "_timestamp", "_wandb", "")
# A clock column, when there is no ``time``: TensorBoard's CSV export, then W&B's (seconds since the run started;
# POSIX seconds, made relative to the first record's).
_TIME_COLUMNS = ("Wall time", "wall_time", "_runtime", "_timestamp")

__all__ = [
    "select_columns",
    "RealTrace", "RealTraceInfo", "convert_bigscience", "convert_distill", "convert_grpo", "convert_lm_eval_long",
    "from_item_results",
    "convert_nanogpt", "convert_sb3_evaluations", "convert_sb3_monitor", "convert_sb3_run", "default_traces_dir",
    "from_columns", "load_real", "real_traces", "convert_tcpd", "tcpd_events",
]


# ------------------------------------------------------------------------------------------- generic CSV


def _read_rows(path: pathlib.Path) -> tuple[list[str], int, list[tuple[int, list[str]]]]:
    """(header, header line number, [(line number, cells)]) of a CSV file.

    Leading lines that start with ``#`` are skipped (SB3 Monitor files carry a JSON comment there); blank
    lines are skipped; an unterminated last line with the wrong number of cells is a torn write: dropped
    with a warning.
    """
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    text = read_text(path)
    skip, body = skip_comment_lines(text)
    reader = csv.reader(body.splitlines(keepends=True), skipinitialspace=True)
    header = next(reader, None)
    if header is None:
        raise TraceError("no records (no header)", path)
    header = [h.strip() for h in header]
    header_line = skip + 1
    check_separator(header, path, header_line)
    rows = []
    for cells in reader:
        if cells and any(c.strip() for c in cells):
            rows.append((skip + reader.line_num, cells))
    if rows and len(rows[-1][1]) != len(header) and not text.endswith(("\n", "\r")):
        line, _ = rows.pop()
        warnings.warn(f"{path}:{line}: dropped a torn last line", RuntimeWarning, stacklevel=3)
    return header, header_line, rows


def _is_jsonl(path: pathlib.Path) -> bool:
    """A ``.jsonl``/``.ndjson`` file, or one whose first non-blank character opens a JSON object."""
    if path.suffix.lower() in (".jsonl", ".ndjson"):
        return True
    if not path.exists() or path.suffix.lower() == ".csv":
        return False
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read(4096).lstrip().startswith("{")


def _json_rows(path: pathlib.Path, value: str) -> tuple[list[str], int, list[tuple[int, list[str]]]]:
    """:func:`_read_rows` for JSONL (one object a line, as lm-evaluation-harness writes its samples): the keys
    are the columns (in order of first appearance), each cell the value's text (null: empty).  A list under
    ``value`` is one problem's k answers: a row each (``{"doc_id": 3, "exact_match": [1, 0, 1, 1]}``)."""
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    text = read_text(path)
    records: list[tuple[int, dict]] = []
    lines = text.splitlines()
    for n, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except ValueError as exc:
            if n == len(lines) and not text.endswith(("\n", "\r")):
                warnings.warn(f"{path}:{n}: dropped a torn last line", RuntimeWarning, stacklevel=3)
                break
            raise TraceError(f"not a JSON object: {exc}", path, n) from None
        if not isinstance(obj, dict):
            raise TraceError(f"a JSON {type(obj).__name__}, not an object", path, n)
        records.append((n, obj))
    if not records:
        raise TraceError("no records", path)
    header = list(dict.fromkeys(k for _, obj in records for k in obj))

    rows = []
    for n, obj in records:
        answers = obj.get(value)
        for answer in (answers if isinstance(answers, list) else [answers]):
            rows.append((n, [_json_cell(answer) if k == value else _json_cell(obj.get(k)) for k in header]))
    return header, 1, rows


def _scaler(scale: float) -> Callable[[str], float]:
    """A function from a cell's text to ``value * scale``, rounded once.

    The product is taken in decimal, so 41.6 percent becomes exactly the double nearest 0.416 (float
    arithmetic would give 0.41600000000000004 from ``41.6 / 100``).
    """
    scale = float(scale)
    if scale == 1.0:
        return float
    factor = decimal.Decimal(repr(scale))

    def convert(text: str) -> float:
        try:
            return float(decimal.Decimal(text.strip()) * factor)
        except decimal.InvalidOperation:
            return float(text) * scale

    return convert


# A W&B chart's "Export CSV": each run's metric as "<run name> - <metric>", with "<...>__MIN" and "<...>__MAX" beside
# it (the band the chart draws around the points it buckets together: the same value again for an unbucketed run).
_WANDB_RUN = " - "
_WANDB_BAND = ("__MIN", "__MAX")


def _count(n: float, what: str) -> str:
    """``1 column``, ``2 columns``, ``1,200 steps`` (words whose plural is ``what + "s"``; also plot's)."""
    return f"{n:,.0f} {what}{'' if n == 1 else 's'}"


def _wandb_chart(header: list[str], named: Sequence[str], path, line) -> tuple[list[str], dict[str, str]]:
    """A W&B chart export's header read as W&B means it: ``(names, aliases)``.

    Every metric column ``<run> - <metric>`` (the step, epoch and time columns and W&B's bookkeeping aside) is
    named ``<metric>``, and ``aliases`` maps ``<run> - <metric>`` to it, so a column named either way is found.
    The ``__MIN``/``__MAX`` companion of a column is left out (named ``""``, which is never a metric) unless
    ``named`` names it; a note says what was done.  A trace is one run: columns of several runs are an error
    naming them, unless the ``named`` columns (``<run> - <metric>``) are all one run's: that run is read.
    Any other header comes back as it is.
    """
    names = list(header)
    columns = [c for c in header if c not in named and c not in RESERVED and c not in _BOOKKEEPING
               and not c.startswith("Unnamed: ")]
    if not columns or not all(_WANDB_RUN in c for c in columns):
        return names, {}
    run_of = {c: c.rpartition(_WANDB_RUN)[0] for c in header if _WANDB_RUN in c and c not in named}
    run_of.update({c: c.rpartition(_WANDB_RUN)[0] for c in named if _WANDB_RUN in c and c in header})
    runs = sorted(set(run_of.values()), key=list(run_of.values()).index)
    chosen = ""
    if len(runs) > 1:
        picked = {run_of[c] for c in named if c in run_of}
        if len(picked) != 1:
            raise TraceError(f"a W&B chart export of {len(runs)} runs ({', '.join(map(repr, runs))}): a trace is one "
                             "run; export one run's chart, or name one run's columns ('<run> - <metric>') with "
                             "--stream/--eval (streams=/evals=)", path, line)
        (chosen,) = picked
        runs = [chosen]
    run = runs[0]
    prefix = run + _WANDB_RUN
    aliases = {c: c[len(prefix):] for c in header if c.startswith(prefix)}
    wanted = set(named) | {aliases.get(c, c) for c in named}
    band = [c for c in aliases if c.endswith(_WANDB_BAND) and c[:-len("__MIN")] in aliases
            and c not in wanted and aliases[c] not in wanted]
    others = [c for c in header if c in run_of and not c.startswith(prefix)]
    for i, c in enumerate(header):
        if c in band or c in others:
            names[i] = ""  # (like a pandas index: never a metric)
        elif c in aliases:
            names[i] = aliases[c]
    note = f"{path}: a W&B chart export: read the columns of run {run!r} without their {prefix!r} prefix"
    if chosen:
        note += f" (the run of the columns named; left out {_count(len(others), 'column')} of the other runs)"
    if band:
        note += (f", and left out {_count(len(band), '__MIN/__MAX column')} (the band the chart draws around "
                 "bucketed points, not metrics of their own; name one to keep it)")
    warnings.warn(note, RuntimeWarning, stacklevel=3)
    return names, aliases


def from_columns(path: str | os.PathLike, *, step: str | None = "step", streams: Sequence[str] | None = None,
                 evals: Mapping[str, float] | None = None, epoch: str | None = None, time: str | None = None,
                 time_scale: float = 1.0, rename: Mapping[str, str] | None = None,
                 on_restart: str = "error", validation_truth: bool = False) -> Trace:
    """Read a CSV that is not in the native format by naming its columns.

    ``step``: the step column (``None``: the row index, from 0).  ``streams``: columns to keep as cheap
    streams (default: every column not otherwise named).  ``evals``: eval columns and the factor that turns
    them into the metric (``{"eval_acc": 0.01}`` for percent -> proportion); column ``c`` becomes
    ``eval/c``.  ``epoch``, ``time``: optional columns (``time`` times ``time_scale`` is seconds since start).
    ``rename``: output names for input columns (an eval column's name must start with ``eval/``).
    ``on_restart``: what a decreasing step means.  ``"error"`` (default) raises; ``"keep_last"`` treats it as
    a restarted or resumed run and keeps the later run: the earlier records at or after the restart step are
    dropped (TensorBoard does the same).  Empty cells are "not recorded"; a non-numeric cell raises
    :class:`TraceError` with its file, line and column, except in a column of text alone that ``streams`` did not
    name (a run's name), which is left out with a warning.  ``validation_truth``: with no ``evals`` named and no
    ``eval/`` column, a CSV's one ``val-core/`` column (verl's validation result) not named as a stream is the eval
    ground truth, with a warning, as :func:`adaptive_eval.trace.read_trace` reads it.
    """
    path = pathlib.Path(path)
    if on_restart not in ("error", "keep_last"):
        raise ValueError(f"on_restart must be 'error' or 'keep_last', not {on_restart!r}")
    header, header_line, rows = _read_rows(path)
    carried = None  # W&B's step column, when the trainer's is the step: its rows without one are at the last one
    if step == "step" and "step" not in header:
        # W&B's step column ("Step" from the UI, "_step" from its API), found as read_trace finds it: naming a
        # stream or an eval column must not lose it (found by a new-user probe: --eval on a W&B export was
        # "no column 'step'", and a misspelt column was blamed on the step too)
        wandb_step = next((c for c in _WANDB_STEPS if c in header), None)
        trainers = next((c for c in _TRAINER_STEPS if c in header), None)
        if wandb_step is not None and trainers is not None and "Wall time" not in header:
            # (W&B's Step counts its rows, one more for each evaluation's row: the alarms and the picked checkpoint
            # of a TRL run's export were 6 steps off at step 200, "step 203" the row of training step 197, and its
            # global_step was watched as a stream; a probe)
            warnings.warn(f"{path}: no 'step' column: read {trainers!r} (the trainer's) as the step, not "
                          f"{wandb_step!r} (W&B's row counter; --step-column {wandb_step} reads that)", RuntimeWarning,
                          stacklevel=2)
            step, carried = trainers, wandb_step
        elif wandb_step is not None:
            whose = ("TensorBoard's CSV download" if wandb_step == "Step" and "Wall time" in header
                     else "W&B's")  # (TensorBoard's "Wall time,Step,Value" was called W&B's; a probe)
            warnings.warn(f"{path}: no 'step' column: read {wandb_step!r} ({whose}) as the step", RuntimeWarning,
                          stacklevel=2)
            step = wandb_step
    named = [c for c in (step, epoch, time) if c is not None] + list(streams or ()) + list(evals or ())
    header, aliases = _wandb_chart(header, named, path, header_line)
    if aliases:  # (a column named '<run> - <metric>' is the metric)
        step, epoch, time = (aliases.get(c, c) if c is not None else None for c in (step, epoch, time))
        streams = None if streams is None else [aliases.get(c, c) for c in streams]
        evals = {aliases.get(c, c): v for c, v in (evals or {}).items()}
        rename = {aliases.get(c, c): v for c, v in (rename or {}).items()}
    index = {name: i for i, name in enumerate(header)}
    evals = dict(evals or {})
    rename = dict(rename or {})
    if epoch is None and "epoch" in index and step != "epoch":  # (an HF Trainer CSV's epoch column)
        epoch = "epoch"
    elif epoch is None and "train/epoch" in index and step != "train/epoch" and "train/epoch" not in (streams or ()):
        epoch = "train/epoch"  # (a W&B export of an HF run: its epoch is logged as train/epoch)
    if time is None and "time" in index and step != "time":
        time = "time"
    elif time is None:
        # Another tool's clock column: TensorBoard's CSV export ("Wall time"), W&B's seconds since the start or
        # POSIX time (found by a new-user probe: "Wall time" was watched as a stream, an hour's pause raised an
        # alarm, and the budget ran on 10 s per record).  A column named as a stream or an eval stays one.
        taken = {step, epoch, *(streams or ()), *(evals or {})}
        time = next((c for c in _TIME_COLUMNS if c in index and c not in taken), None)
    core = [c for c in header if c.startswith("val-core/") and c not in (streams or ())]
    if validation_truth and not evals and len(core) == 1 and not any(c.startswith("eval/") for c in header):
        # (a new user's verl W&B export with --stream: its one validation column was dropped, and every
        # evaluation measured nothing; read_trace takes it, trace.promote_validation)
        warnings.warn(f"{path}: read {core[0]!r}, the trace's one val-core/ column, as the eval ground truth "
                      "(--eval COL names another)", RuntimeWarning, stacklevel=2)
        evals = {core[0]: 1.0}
    if streams is not None and not evals:  # (the trace's own eval/ columns stay its ground truth: --stream
        # train/loss dropped them, and replay then said the trace had no eval/<metric> column)
        evals = {c: 1.0 for c in header if c.startswith("eval/") and c not in streams}
    # An eval column's per-sample standard deviation comes with it: "<c>:std", or its output name's
    # "eval/<c>:std" (found by a new-user probe: with --eval eval_loss, the eval_loss:std column the note asked
    # for was dropped, and the note repeated)
    stds = {}
    for c in evals:
        out = rename.get(c, c if c.startswith("eval/") else f"eval/{c}")
        std = next((s for s in (f"{c}:std", f"{out}:std") if s in index and s not in evals
                    and s not in (streams or ())), None)
        if std is not None:
            stds[c] = std
    named = [c for c in (step, epoch, time) if c is not None] + list(evals) + list(stds.values())
    if streams is None:  # (with evals named, another eval/ or eval_ column is not ground truth, nor a stream: an
        # eval result, not a step's; select_columns does the same for the other formats)
        # (W&B's row counter when another column is the step, and a trainer's step counter beside W&B's: counters,
        # not streams; watched, "Step" was the plot's top panel and a warning about values written twice; a probe)
        counters = {c for c in (*_WANDB_STEPS, *_TRAINER_STEPS) if c != step and any(w in header for w in _WANDB_STEPS)}
        streams = [c for c in header if c not in named and c not in RESERVED and c not in _BOOKKEEPING
                   and c not in counters
                   and not c.startswith("Unnamed: ") and not (evals and c.startswith(("eval/", "eval_")))]
        # (a column of text alone, a run's name, is metadata, as read_trace reads a CSV's; named, it is an error)
        text_only = _text_columns(rows, header, only={header.index(c) for c in streams if c in header})
        if text_only:
            warn_text_columns(path, header, text_only, stacklevel=2)
            streams = [c for c in streams if c not in {header[i] for i in text_only}]
    else:
        streams = list(streams)
    missing = [c for c in [*named, *streams] if c not in index]
    if missing:
        raise TraceError(f"no column {', '.join(map(repr, missing))} (columns: {', '.join(h for h in header if h)})",
                         path, header_line)
    outputs = []  # (cell index, output name, input name, convert)
    for c in streams:
        outputs.append((index[c], rename.get(c, c), c, None))
    for c, scale in evals.items():
        name = rename.get(c, c if c.startswith("eval/") else f"eval/{c}")
        if not name.startswith("eval/"):
            raise ValueError(f"rename[{c!r}] = {name!r}: an eval column's name must start with 'eval/'")
        outputs.append((index[c], name, c, _scaler(scale)))
        if c in stds:
            outputs.append((index[stds[c]], f"{name}:std", stds[c], _scaler(abs(scale))))
    names = [o[1] for o in outputs]
    clash = sorted({n for n in names if names.count(n) > 1 or n in RESERVED})
    if clash:
        raise ValueError(f"output column name(s) {clash} are duplicated or reserved (step, epoch, time)")
    i_step = None if step is None else index[step]
    i_carried = None if carried is None else index.get(carried)
    i_epoch = None if epoch is None else index[epoch]
    i_time = None if time is None else index[time]
    to_seconds = _scaler(time_scale)
    width = len(header)
    records: list[TraceRecord] = []
    clashes: list = []
    restarts: list = []  # (line, step, previous step, records dropped) per restart kept (on_restart keep_last)
    stepless = 0
    for k, (line, cells) in enumerate(rows):
        if len(cells) != width:
            raise TraceError(f"expected {width} fields, got {len(cells)}", path, line)
        if i_step is None:
            s = k
        else:
            if not cells[i_step].strip():  # (a W&B export's system-metrics rows have no step)
                if i_carried is not None and records and cells[i_carried].strip():
                    # (an evaluation logged with wandb.log beside the trainer's logger: its row has W&B's step and
                    # not the trainer's; dropped as a system row, the ground truth was lost unsaid; a review)
                    s = records[-1].step
                else:
                    stepless += 1
                    continue
            else:
                s = _parse_int(cells[i_step], repr(step), path, line)
        metrics = {}
        for i, name, col, convert in outputs:
            cell = cells[i].strip()
            if not cell or cell in MISSING_CELLS:
                continue
            try:
                metrics[name] = float(cell) if convert is None else convert(cell)
            except ValueError:
                raise TraceError(f"column {col!r}: {cell!r} is not a number{date_hint(cell)}", path, line) from None
        e = None
        if i_epoch is not None and cells[i_epoch].strip() not in _NO_CELL:
            e = _parse_epoch(cells[i_epoch], path, line)
        t = None
        if i_time is not None and cells[i_time].strip() not in _NO_CELL:
            try:
                t = to_seconds(cells[i_time])
            except ValueError:  # a date (seconds since the first record's), or an error naming the cell
                t = _parse_time(cells[i_time], f"column {time!r}", path, line)
        rec = TraceRecord(s, metrics, e, t)
        if records and s < records[-1].step:
            prev = records[-1].step
            if on_restart == "error":
                raise TraceError(f"step {s} is below the previous step {records[-1].step}; steps must not "
                                 "decrease (a run resumed into the same log: from_columns(..., on_restart='keep_last'), "
                                 "adaptive-eval --keep-last-run, keeps the later run)", path, line)
            n = len(records)
            while records and records[-1].step >= s:
                records.pop()
            restarts.append((line, s, prev, n - len(records)))
        if records and records[-1].step == s:
            rec = _merge(records.pop(), rec, clashes)
        records.append(rec)
    warn_clashes(path, clashes)
    warn_restarts(path, restarts, len(records), stacklevel=2)
    if stepless:
        warnings.warn(f"{path}: {stepless} row{'s' if stepless > 1 else ''} without a {step!r} value skipped "
                      "(a W&B export's system rows)", stacklevel=2)
    if not records:
        raise TraceError("no records" + (f" with a {step!r} value" if stepless else ""), path)
    return Trace(_dates_relative(records, path), str(path))


_TRUE_FALSE = {"true": 1.0, "false": 0.0, "yes": 1.0, "no": 0.0}


def _json_cell(v) -> str:
    """A value as the text of its cell (as :func:`_json_rows` writes it; ``where``'s values compare so)."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))  # (an id written 1.0 in one file and 1 in another is one problem)
    if isinstance(v, (dict, list)):
        return json.dumps(v)  # (refused where it is read as a number or an id: its line is named)
    return str(v).strip()


def _id_text(text: str) -> str:
    """A cell as an id: stripped, and an integer written as a float (``1.0``, as pandas writes an int column with a
    gap) as the integer, so ``1.0`` and ``1`` are one problem."""
    t = text.strip()
    return t.split(".", 1)[0] if _INTEGRAL.fullmatch(t) else t


_INTEGRAL = re.compile(r"-?\d+\.0+")


def _result_files(path) -> list[tuple[pathlib.Path, int | None]]:
    """``[(file, its step or None: read from its step column)]`` of ``from_item_results``'s ``path``."""
    if isinstance(path, (str, os.PathLike)):
        if pathlib.Path(path).is_dir():
            raise IsADirectoryError(f"{path}: a folder; pass its result files as a list (each with a step column) "
                                    "or as {step: file} (one checkpoint's results each)")
        return [(pathlib.Path(path), None)]
    if isinstance(path, Mapping):
        files = []
        for at, p in path.items():
            if isinstance(at, bool) or not isinstance(at, numbers.Integral):
                raise TypeError(f"{{step: file}}: the step {at!r} of {p!r} is not an integer")
            files.append((pathlib.Path(p), int(at)))
    elif isinstance(path, Sequence):
        files = [(pathlib.Path(p), None) for p in path]
    else:
        raise TypeError(f"path={path!r}: a file, a list of files or {{step: file}}")
    if not files:
        raise ValueError("no result files given")
    return files


def _not_item_truth(trace: Trace) -> set[str]:
    """A trace's eval columns that look like items, ``eval/<suite>/<metric>@<n>``, but are not part of a whole set
    ``@0..N-1`` (verl's ``val-core/aime/acc/mean@4``).  Suite-wide values (no ``@``) are kept: replay reads them."""
    sets: dict[str, set] = {}
    names = set()
    for k in {k for r in trace.records for k in r.metrics if k.startswith("eval/")}:
        head, at, tail = k.removesuffix(":std").rpartition("@")
        if at and tail.isdigit() and head.count("/") >= 2:
            sets.setdefault(head, set()).add(int(tail))
            names.add(k)
    whole = {h for h, got in sets.items() if got == set(range(len(got)))}
    return {k for k in names if k.removesuffix(":std").rpartition("@")[0] not in whole}


def from_item_results(path: str | os.PathLike | Sequence | Mapping, *, suite: str, metric: str = "accuracy",
                      step: str = "step", item: str = "item", value: str = "correct", streams: Trace | None = None,
                      scale: float = 1.0, where: Mapping[str, object] | None = None,
                      answer: str | None = None) -> tuple[Trace, list[str]]:
    """Per-problem eval results in long form as per-item ground truth: ``(trace, item ids)``.

    The CSV (or JSONL: one object a line, keys as columns, and a list under ``value`` for a problem's k answers)
    has a row per checkpoint ``step`` x problem (``item``: any id) x answer, with the answer's
    ``value`` (1/0, true/false, or a score; times ``scale``, a finite non-zero number).  A problem's rows at a
    step are averaged: with k answers per problem, its fraction correct is its probability of success at that
    checkpoint, what replay draws ``samples_per_item`` answers from.  The trace gets columns
    ``eval/<suite>/<metric>@<i>``; set ``evaluation.suites.<suite>.size`` to N, the number of problems.

    Item numbers: when the ids are exactly the integers 0..N-1 (``0``, ``1``, ... written without leading zeros,
    in any order of appearance: a dataset's own indices), problem ``k`` is item ``k``, so a suite's ``strata``
    copied in the dataset's order label the right problems.  Other ids are numbered 0..N-1 in order of first
    appearance in the file (1-based indices too); the returned ``ids[i]`` is item ``i``'s id either way.

    Spread: scores that all lie within [0, 1] are replayed as Bernoulli(p) answers (the real spread of 0/1
    answers; for partial credit at least the real one).  When any score lies outside [0, 1] (a +1/-1 reward),
    each problem's answers also give ``eval/<suite>/<metric>@<i>:std``, their standard deviation at that step
    (of the scored answers, ddof 0: the answers taken as the truth, as their mean is), which replay draws each
    answer of that problem with (Normal); without it every answer would be its problem's mean and a whole-suite
    evaluation's interval would have zero width.

    ``streams``: a trace of the run's training log (reward, loss, ...) merged in by step.  An empty or NaN
    value is an answer not scored (skipped); a problem with rows at a step but no scored answer there (every
    grader call timed out) is NaN at that step (replay's NaN item: its answers NaN, left out of the
    evaluation), as is a problem at the first checkpoint before its first rows (a problem added later).  A
    problem without a row at a later step keeps its last value there (replay carries every item forward).  A
    missing column, a bad step or value is a :class:`TraceError` naming file and line; a zero or non-finite
    ``scale`` a ``ValueError``.

    Several files: a list of them is read as one (each with its ``step`` column); a mapping ``{step: file}`` reads
    each file as that checkpoint's results, as lm-evaluation-harness writes them (one ``samples_<task>*.jsonl`` per
    run, with no step in it; a ``step`` column there is not read).  ``where={"filter": "strict-match"}`` keeps
    the rows whose cells equal those values (lm-evaluation-harness logs a row per document *and filter*: rows of
    several filters are refused unless ``where`` picks one, as they would be averaged as if they were answers).
    ``answer``: a column numbering each answer of a problem (a sample index); a row repeating a step, problem and
    answer replaces the earlier one (a resumed eval job that appended a checkpoint twice), said once.  Without it,
    rows on different lines with every cell alike are counted as further answers, said once.  The training log's
    eval columns named like items but not whole per-item sets (``eval/<suite>/<metric>@0..N-1``) are left out, said
    once (verl's ``val-core/.../mean@4`` read as item 4 of a suite), and so are its eval results of no suite
    (``eval/accuracy``) or of ``suite`` as a whole: the items are that suite's truth.  Another suite's
    ``eval/<other>/<metric>`` stays, that suite's ground truth.

    Replay draws fresh answers from each problem's fraction correct, so its pass@k of a problem solved once in 4 is
    ``1 - (3/4)^k``-like, not the 1 the answers on disk give: compare replayed pass@k with the model of the
    problem's success probability, not with the pass@k logged from the same answers.
    """
    files = _result_files(path)
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale={scale!r}: the factor each score is multiplied by must be a number "
                        "(e.g. 0.01 for percent)")
    factor = float(scale)
    if not math.isfinite(factor) or factor == 0.0:
        raise ValueError(f"scale={scale!r}: the factor each score is multiplied by must be a finite non-zero "
                         "number (e.g. 0.01 for percent)" + ("; 0 would zero every score" if factor == 0 else ""))
    if "/" in suite or "@" in suite or not suite:
        raise ValueError(f"suite {suite!r}: a suite name is not empty and has no '/' or '@'")
    if where is not None and not isinstance(where, Mapping):
        raise TypeError(f"where={where!r}: a mapping of column -> value, e.g. {{'filter': 'strict-match'}}")
    wanted = {str(k): _id_text(_json_cell(v)) for k, v in (where or {}).items()}
    to_value = _scaler(factor)
    seen: dict[str, None] = {}  # problem ids in order of first appearance
    answers: dict[int, dict[str, dict]] = {}  # step -> problem id -> {answer key: its score (None: not scored)}
    first: dict[str, int] = {}  # problem id -> the first step with its rows
    replaced = 0
    others: dict[tuple, set] = {}  # (file, step, problem) -> the other cells of its rows (exact repeats)
    repeats: dict[tuple, int] = {}  # (file, step, problem) -> rows repeating an earlier one cell for cell
    for fi, (path, at) in enumerate(files):
        if _is_jsonl(path):
            header, header_line, rows = _json_rows(path, value)
        else:
            header, header_line, rows = _read_rows(path)
        index = {name: i for i, name in enumerate(header)}
        missing = [c for c in (*((step,) if at is None else ()), item, value, *((answer,) if answer else ()),
                               *wanted) if c not in index]
        if missing:
            raise TraceError(f"no column {', '.join(map(repr, missing))} (columns: {', '.join(header)}; name them "
                             "with step=, item=, value=" + (", answer=" if answer else "")
                             + (", where=" if wanted else "") + ")"
                             + ("; one checkpoint's results with no step in them (as lm-evaluation-harness writes "
                                "its samples): pass {step: file}" if step in missing else ""), path, header_line)
        # (an exact repeat is suspect only among a problem's rows at a step whose other cells differ (a sample
        # index, a length): two right answers with nothing else to tell them apart are two such rows, as are rows
        # whose other cells are the same for all, a task or model column)
        extra = [i for name, i in index.items() if name not in {step, item, value, *wanted}]
        if "filter" in index and "filter" not in wanted:
            filters = sorted({cells[index["filter"]] for _, cells in rows if len(cells) == len(header)})
            if len(filters) > 1:
                raise TraceError(f"rows of {len(filters)} filters in column 'filter' ({', '.join(map(repr, filters))}"
                                 "): lm-evaluation-harness logs a row per document and filter, which would be "
                                 f"averaged as answers; pick one, e.g. where={{'filter': {filters[0]!r}}}", path,
                                 header_line)
        last_line: dict[tuple, int] = {}  # (step, problem, every cell) -> the line it was first seen on
        at_line = (-1, 0)  # (line, answers of it so far): a JSONL list's answers share their object's line
        for line, cells in rows:
            if len(cells) != len(header):
                raise TraceError(f"expected {len(header)} fields, got {len(cells)}", path, line)
            if any(_id_text(cells[index[c]]) != v for c, v in wanted.items()):
                continue
            at_line = (line, at_line[1] + 1 if at_line[0] == line else 0)
            s = at if at is not None else _parse_int(cells[index[step]], repr(step), path, line)
            key = _id_text(cells[index[item]])
            if not key:
                raise TraceError(f"empty {item!r} cell", path, line)
            seen.setdefault(key)
            first.setdefault(key, s)
            first[key] = min(first[key], s)
            # (made before the value is read: a problem whose every answer is unscored is NaN there, not left out)
            per_item = answers.setdefault(s, {}).setdefault(key, {})
            if answer:
                slot = (cells[index[answer]].strip(), at_line[1])
                replaced += slot in per_item
            else:
                slot = len(per_item)
                if extra:
                    last_line.setdefault((s, key, tuple(cells)), line)
                    others.setdefault((fi, s, key), set()).add(tuple(cells[i] for i in extra))
                    repeats[(fi, s, key)] = repeats.get((fi, s, key), 0) + (last_line[(s, key, tuple(cells))] != line)
            text = cells[index[value]].strip()
            if not text:
                per_item[slot] = None  # not scored: no answer for this row
                continue
            try:
                v = _TRUE_FALSE[text.lower()] if text.lower() in _TRUE_FALSE else to_value(text)
            except ValueError:
                raise TraceError(f"column {value!r}: {text!r} is not a number (nor true/false)", path,
                                 line) from None
            if v in (math.inf, -math.inf):
                raise TraceError(f"column {value!r}: {text!r} is not a finite score (a problem's mean would be "
                                 "infinite; leave an unscored answer empty or NaN)", path, line)
            per_item[slot] = None if v != v else v  # NaN: not scored, as an empty cell (and as evaluate_fn's)
    path = str(files[0][0]) if len(files) == 1 else f"{files[0][0]} (and {len(files) - 1} more file(s))"
    if not any(v is not None for per_item in answers.values() for vs in per_item.values() for v in vs.values()):
        raise TraceError("no scored rows" + (f" where {wanted}" if wanted else ""), path)
    repeated = sum(n for g, n in repeats.items() if len(others[g]) > 1)
    if replaced:
        warnings.warn(f"{path}: {replaced} row(s) repeat a step, problem and {answer!r} already read: each replaces "
                      "the earlier one", RuntimeWarning, stacklevel=2)
    if repeated:
        warnings.warn(f"{path}: {repeated} row(s) repeat an earlier row cell for cell (answers alike, or a checkpoint "
                      "appended twice?): each is counted as a further answer; where a column numbers the answers, name "
                      "it with answer= to keep one per answer", RuntimeWarning, stacklevel=2)
    answers = {s: {k: [v for v in vs.values() if v is not None] for k, vs in per_item.items()}
               for s, per_item in answers.items()}
    ids = list(seen)
    if sorted(ids, key=lambda k: (len(k), k)) == [str(i) for i in range(len(ids))]:
        ids = [str(i) for i in range(len(ids))]  # a dataset's own indices: problem k is item k
    elif all(k.isdigit() and (k == "0" or not k.startswith("0")) for k in ids):
        # (a new user's probe: doc 2 never appeared, doc 3 became item 2, and strata in the dataset's order
        # labelled the wrong problems; and a run's own evaluations, a sample of a 500-problem set, had no
        # problem 0, so 186 of its indices were renumbered 0..185 without a word)
        gaps = sorted(set(range(max(map(int, ids)) + 1)) - set(map(int, ids)))
        moved = next(f"problem {k} is item {i}" for i, k in enumerate(ids) if k != str(i))
        where = ("numbered from 1" if gaps == [0] else  # (1-based ids "with gaps (no rows of [0])": a review)
                 f"a dataset's indices{' from 0' if '0' in seen else ''} with gaps (no rows of {gaps[:5]}"
                 f"{' ...' if len(gaps) > 5 else ''})")
        warnings.warn(f"{path}: the ids are {where}: the problems are numbered in order of first appearance "
                      f"({moved}), so a suite of them has {len(ids)} items, and its strata are written in the order "
                      "of the returned ids", RuntimeWarning, stacklevel=2)
    scores = {v for per_item in answers.values() for vs in per_item.values() for v in vs}
    if factor != 1.0 and factor in scores and scores <= {0.0, factor}:  # (true/false cells: 0/1 whatever the scale)
        warnings.warn(f"{path}: with scale={scale!r} every score in column {value!r} is 0 or {factor!r}: answers "
                      "already 0/1?  scale is for scores in percent (0/100)", RuntimeWarning, stacklevel=2)
    number = {key: i for i, key in enumerate(ids)}
    spread = any(not 0.0 <= v <= 1.0 for per_item in answers.values() for vs in per_item.values() for v in vs)
    if spread and factor == 1.0 and {v for per_item in answers.values() for vs in per_item.values()
                                     for v in vs} <= {0.0, 100.0}:
        # (found by a new-user probe: 0/100 answers were replayed as Normal draws of mean 48.7 and an interval
        # [71.3, 103.0], and the :std columns made for them got past tune's refusal of truth in percent)
        warnings.warn(f"{path}: every score in column {value!r} is 0 or 100: answers in percent?  Pass scale=0.01 "
                      "for 0/1 answers (else they are replayed as scores with a spread, Normal draws)",
                      RuntimeWarning, stacklevel=2)
    elif spread:
        # (one answer a grader scored -1, "did not parse", turned a whole 0/1 suite into scores, its pass@k into
        # best@k, without a word; a probe)
        out = [(s, k, v) for s in sorted(answers) for k, vs in answers[s].items() for v in vs if not 0.0 <= v <= 1.0]
        total = sum(len(vs) for per_item in answers.values() for vs in per_item.values())
        s0, k0, v0 = out[0]
        warnings.warn(f"{path}: {len(out)} of {total} scores in column {value!r} lie outside [0, 1] (the first: {v0:g} "
                      f"at step {s0}, problem {k0!r}): every problem's answers are replayed as scores with a spread "
                      "(Normal draws; best@k, not pass@k), not as 0/1 answers; a grader's -1 for an answer it could "
                      "not parse would be a 0", RuntimeWarning, stacklevel=2)
    # (a problem added later is NaN before its first rows, not carried: only those seen before count here)
    later = [(s, n) for s in sorted(answers)[1:]
             if (n := sum(first[k] < s and k not in answers[s] for k in ids))]
    if later:
        warnings.warn(f"{path}: {len(later)} checkpoint(s) lack rows of some problems (step {later[0][0]}: "
                      f"{later[0][1]} of {len(ids)}): each keeps its value from its last step with rows",
                      RuntimeWarning, stacklevel=2)
    column = f"eval/{suite}/{metric}"
    by_step: dict[int, dict[str, float]] = {}
    for s in sorted(answers):
        # At the first checkpoint a problem without rows is not scored yet (NaN, carried to its first rows).
        out = by_step[s] = {} if by_step else {f"{column}@{i}": math.nan for i in range(len(ids))}
        for key, vs in answers[s].items():
            i = number[key]
            if not vs:
                out[f"{column}@{i}"] = math.nan
                continue
            mean = fsum(vs) / len(vs)  # (stats.fsum, and d * d: huge rewards are data, not an OverflowError)
            out[f"{column}@{i}"] = mean
            if spread:
                out[f"{column}@{i}:std"] = math.sqrt(fsum((v - mean) * (v - mean) for v in vs) / len(vs))
    log = {r.step: r for r in streams.records} if streams is not None else {}
    dropped = _not_item_truth(streams) if streams is not None else set()
    if dropped:
        warnings.warn(f"streams: left out {len(dropped)} eval column(s) of the training log named like items but "
                      f"not a whole item set ({', '.join(sorted(dropped)[:3])}{', ...' if len(dropped) > 3 else ''}): "
                      "replay would read '<name>@<n>' as item n of a suite", RuntimeWarning, stacklevel=2)
    # The log's own eval result of no suite (W&B's eval/accuracy) or of this suite's whole set: the items are the
    # suite's truth, and replay with evaluation.suites refused the trace for a column that "belongs to no suite"
    # (a new-user probe; the docstring promised them left out).  Another suite's eval/<suite>/... stays its truth.
    whole_set = set() if streams is None else {
        k for r in streams.records for k in r.metrics if k.startswith("eval/") and k not in dropped
        and not k.removesuffix(":std").rpartition("@")[2].isdigit()
        and (k[len("eval/"):].count("/") == 0 or k[len("eval/"):].partition("/")[0] == suite)}
    if whole_set:
        warnings.warn(f"streams: left out {len(whole_set)} eval column(s) of the training log that belong to no suite "
                      f"or to suite {suite!r} as a whole ({', '.join(sorted(whole_set)[:3])}"
                      f"{', ...' if len(whole_set) > 3 else ''}): the per-item results are the suite's ground truth",
                      RuntimeWarning, stacklevel=2)
        dropped = dropped | whole_set
    for step_, rec in log.items():
        merged = by_step.setdefault(step_, {})
        for k, v in rec.metrics.items():
            if k not in dropped:
                merged.setdefault(k, v)
    records = [TraceRecord(s, by_step[s], getattr(log.get(s), "epoch", None), getattr(log.get(s), "time", None))
               for s in sorted(by_step)]
    return Trace(records, str(path)), ids


def select_columns(trace: Trace, *, streams: Sequence[str] | None = None,
                   evals: Mapping[str, float] | None = None) -> Trace:
    """A trace of any format (TensorBoard, JSONL, native CSV) narrowed as :func:`from_columns` narrows a CSV:
    only ``streams`` as cheap streams (default: every metric not otherwise named), and ``evals`` as the eval
    ground truth, metric ``c`` times its scale as ``eval/c`` (``c`` itself when it starts with ``eval/``); with
    ``evals`` named, the trace's other ``eval/`` (and ``eval_``) metrics are dropped.  A name the trace lacks is a
    :class:`TraceError` listing what it has.
    """
    names = trace.metric_names()
    # (a val-core/ column read_trace took as the ground truth, trace.promote_validation, is named as it was logged)
    evals = {(f"eval/{c}" if c not in names and f"eval/{c}" in names and c.startswith(VALIDATION_PREFIXES) else c): f
             for c, f in dict(evals or {}).items()}
    missing = [c for c in [*(streams or ()), *evals] if c not in names]
    if missing:
        raise TraceError(f"no metric {', '.join(map(repr, missing))} (metrics: {', '.join(names)})", trace.source)
    if streams is None:  # (nor is an HF eval row's other eval_<m>, nor verl's val-core/ and val-aux/, a stream:
        # an eval result, not a step's; verl's validation results fed the detectors as free per-step streams)
        keep = [c for c in names if c not in evals and not c.startswith(VALIDATION_PREFIXES)
                and not (evals and c.startswith(("eval/", "eval_")))]
    else:  # (with no evals named, the trace's own eval/ metrics stay its ground truth)
        keep = list(streams) + ([c for c in names if c.startswith("eval/") and c not in streams] if not evals else [])
    out_name = {c: c for c in keep}
    scale = {}
    for c, factor in evals.items():
        out_name[c] = c if c.startswith("eval/") else f"eval/{c}"
        scale[c] = float(factor)
        # its per-sample standard deviation, "<c>:std" or "eval/<c>:std", comes with it (as from_columns)
        std = next((s for s in (f"{c}:std", f"{out_name[c]}:std") if s in names and s not in evals), None)
        if std is not None:
            out_name[std] = f"{out_name[c]}:std"
            scale[std] = abs(float(factor))
    clash = sorted({n for n in out_name.values() if list(out_name.values()).count(n) > 1})
    if clash:
        raise ValueError(f"output metric name(s) {clash} are duplicated")
    records = []
    for rec in trace.records:
        metrics = {out_name[k]: (v * scale[k] if k in scale and scale[k] != 1.0 else v)
                   for k, v in rec.metrics.items() if k in out_name}
        records.append(TraceRecord(rec.step, metrics, rec.epoch, rec.time))
    return Trace(records, trace.source)


# ------------------------------------------------------------------------------------------- specific logs

# rasbt/reasoning-from-scratch GRPO columns -> stream names shared with the synthetic traces.
GRPO_STREAMS = {
    "reward_avg": "train/reward", "loss": "train/loss", "avg_response_len": "train/response_length",
    "kl_loss": "train/kl", "entropy_avg": "train/entropy", "format_reward_avg": "train/format_reward",
    "policy_ratio": "train/policy_ratio", "adv_avg": "train/adv_avg", "adv_std": "train/adv_std",
    "tokens_per_sec": "perf/tokens_per_sec",
}


def _header(path: pathlib.Path) -> list[str]:
    return _read_rows(path)[0]


def convert_grpo(path: str | os.PathLike) -> Trace:
    """rasbt/reasoning-from-scratch GRPO metrics CSV (ch06, ch07).

    Streams: every column but ``step``, ``total_steps`` (the planned run length, a constant) and
    ``eval_acc``, named as in ``GRPO_STREAMS`` (``reward_avg`` -> ``train/reward``, ...).  ``eval_acc`` (MATH-500
    accuracy in percent, recorded every 50 steps) becomes ``eval/accuracy`` as a proportion on the rows where
    it was recorded.  A step that restarts (the 7_3 log begins with 5 rows of an aborted start) keeps the last
    run.
    """
    path = pathlib.Path(path)
    header = _header(path)
    streams = [c for c in header if c not in ("step", "total_steps", "eval_acc")]
    rename = {c: GRPO_STREAMS.get(c, f"train/{c}") for c in streams}
    rename["eval_acc"] = "eval/accuracy"
    evals = {"eval_acc": 0.01} if "eval_acc" in header else {}
    with warnings.catch_warnings():  # (the known aborted start, said above: not news at every read)
        warnings.filterwarnings("ignore", "[^\n]*: kept the later run at", RuntimeWarning)
        return from_columns(path, streams=streams, evals=evals, rename=rename, on_restart="keep_last")


def convert_nanogpt(path: str | os.PathLike) -> Trace:
    """modded-nanogpt step log (as CSV): ``train_loss`` -> stream ``train/loss``, ``val_loss`` ->
    ``eval/val_loss`` (not a proportion, no std: replay returns the value), ``train_time_ms`` -> ``time``.

    The speedrun restarts its timer after the warm-up steps (step 11 reads 1.7 s after step 10 read 97 s);
    ``time`` continues across the restart so it stays seconds since start.  ``total_steps`` is dropped.
    """
    with warnings.catch_warnings():  # (the timer's restart is this log's own: the reader makes it continuous)
        warnings.filterwarnings("ignore", message=".*the time column goes back", category=RuntimeWarning)
        return from_columns(path, streams=["train_loss"], evals={"val_loss": 1.0}, time="train_time_ms",
                            time_scale=0.001, rename={"train_loss": "train/loss", "val_loss": "eval/val_loss"})


def convert_distill(path: str | os.PathLike) -> Trace:
    """rasbt ch08 distillation metrics: the step is ``total_steps`` (cumulative), ``epoch`` as given (from 1),
    ``train_loss`` -> ``train/loss``, ``val_loss`` -> ``eval/val_loss``."""
    return from_columns(path, step="total_steps", epoch="epoch", streams=["train_loss"], evals={"val_loss": 1.0},
                        rename={"train_loss": "train/loss", "val_loss": "eval/val_loss"})


def convert_sb3_monitor(path: str | os.PathLike) -> Trace:
    """Stable-Baselines3 ``Monitor`` CSV (a ``#{json}`` first line, then ``r,l,t``): one record per episode,
    step = episode index from 0, ``r`` -> ``train/episode_return``, ``l`` -> ``train/episode_length``,
    ``t`` (wall seconds since the monitor started) -> ``time``."""
    return from_columns(path, step=None, streams=["r", "l"], time="t",
                        rename={"r": "train/episode_return", "l": "train/episode_length"})


def convert_sb3_evaluations(path: str | os.PathLike) -> Trace:
    """SB3 ``EvalCallback`` results as a long CSV (``timesteps,episode,return,ep_length``): one record per
    evaluation, step = timesteps, ``eval/return`` = mean episode return, ``eval/return:std`` = the sample
    standard deviation (ddof 1) of the episode returns (per-sample, as replay wants it)."""
    path = pathlib.Path(path)
    header, header_line, rows = _read_rows(path)
    for c in ("timesteps", "return"):
        if c not in header:
            raise TraceError(f"no column {c!r} (columns: {', '.join(header)})", path, header_line)
    i_ts, i_ret = header.index("timesteps"), header.index("return")
    groups: dict[int, list[float]] = {}
    order: list[int] = []
    for line, cells in rows:
        ts = _parse_int(cells[i_ts], "timesteps", path, line)
        if order and ts < order[-1]:
            raise TraceError(f"timesteps {ts} is below the previous {order[-1]}", path, line)
        try:
            value = float(cells[i_ret])
        except ValueError:
            raise TraceError(f"column 'return': {cells[i_ret]!r} is not a number", path, line) from None
        if ts not in groups:
            groups[ts] = []
            order.append(ts)
        groups[ts].append(value)
    if not order:
        raise TraceError("no records", path)
    records = []
    for ts in order:
        v = np.asarray(groups[ts])
        metrics = {"eval/return": float(v.mean())}
        if len(v) > 1:
            metrics["eval/return:std"] = float(v.std(ddof=1))
        records.append(TraceRecord(ts, metrics))
    return Trace(records, str(path))


def convert_sb3_run(monitor: str | os.PathLike, evaluations: str | os.PathLike, *, frame_skip: int = 4) -> Trace:
    """A Monitor CSV and the EvalCallback results of the same run on one axis: environment timesteps.

    The Monitor counts raw frames; the agent (and EvalCallback's ``timesteps``) acts every ``frame_skip``-th
    frame (Atari ``MaxAndSkipEnv``), so an episode ends at step ``round(cumsum(l) / frame_skip)``.  For the
    DQN Pong run this gives 10.03M for 10M training timesteps: the reset no-ops count as frames only.
    Evaluation rows get their ``time`` by linear interpolation between episode ends.
    """
    episodes = convert_sb3_monitor(monitor).records
    lengths = np.cumsum([r.metrics["train/episode_length"] for r in episodes])
    ends = np.rint(lengths / frame_skip).astype(np.int64)
    times = np.array([r.time for r in episodes], dtype=np.float64)
    by_step: dict[int, TraceRecord] = {}
    for rec, s in zip(episodes, ends.tolist()):
        by_step[s] = _merge(by_step[s], dataclasses.replace(rec, step=s)) if s in by_step else \
            dataclasses.replace(rec, step=s)
    for rec in convert_sb3_evaluations(evaluations).records:
        t = float(np.interp(rec.step, ends, times))
        if rec.step in by_step:
            by_step[rec.step] = _merge(by_step[rec.step], rec)
        else:
            by_step[rec.step] = dataclasses.replace(rec, time=t)
    return Trace([by_step[s] for s in sorted(by_step)], f"{monitor} + {evaluations}")


def _lm_eval_name(task: str, metric: str) -> str:
    return f"eval/{task}" if metric == "acc" else f"eval/{task}/{metric}"


PROPORTION_METRICS = ("acc", "acc_norm", "pct_stereotype")


def _items_from_stderr(pairs: list[tuple[float, float]]) -> int | None:
    """The number of items behind proportions and their lm-eval standard errors (ddof 1), or None."""
    ns = [p * (1 - p) / (se * se) + 1 for p, se in pairs if 0 < p < 1 and se and se > 0 and math.isfinite(se)]
    return int(round(float(np.median(ns)))) if ns else None


def _lm_eval_records(steps: list[int], table: dict[tuple[str, str], dict[int, tuple[float, float | None]]]
                     ) -> tuple[list[TraceRecord], dict[str, int]]:
    """Build records from {(task, metric): {step: (value, stderr)}}; return them and the item counts."""
    items: dict[str, int] = {}
    by_task: dict[str, list[tuple[float, float]]] = {}
    for (task, metric), series in table.items():
        if metric in PROPORTION_METRICS:
            by_task.setdefault(task, []).extend((v, se) for v, se in series.values() if se is not None)
    n_task = {task: _items_from_stderr(pairs) for task, pairs in by_task.items()}
    metrics_by_step: dict[int, dict[str, float]] = {s: {} for s in steps}
    for (task, metric), series in table.items():
        name = _lm_eval_name(task, metric)
        n = n_task.get(task)
        if n is not None:
            items[name] = n
        for s, (value, se) in series.items():
            metrics_by_step[s][name] = value
            if n is not None and se is not None and math.isfinite(se):
                metrics_by_step[s][f"{name}:std"] = se * math.sqrt(n)
    return [TraceRecord(s, metrics_by_step[s]) for s in steps], items


def convert_lm_eval_long(path: str | os.PathLike, model: str) -> Trace:
    """One model's lm-eval results from a long CSV (``model,step,task,metric,value,stderr``), e.g. the Pythia
    zero-shot evals: one record per checkpoint step; ``acc`` -> ``eval/<task>``, another metric ->
    ``eval/<task>/<metric>``, each with ``:std`` = stderr * sqrt(n) (see the module doc)."""
    return _lm_eval_long(pathlib.Path(path), model)[0]


def _lm_eval_long(path: pathlib.Path, model: str) -> tuple[Trace, dict[str, int]]:
    header, header_line, rows = _read_rows(path)
    need = ("model", "step", "task", "metric", "value", "stderr")
    missing = [c for c in need if c not in header]
    if missing:
        raise TraceError(f"no column {', '.join(map(repr, missing))} (columns: {', '.join(header)})",
                         path, header_line)
    col = {c: header.index(c) for c in need}
    table: dict[tuple[str, str], dict[int, tuple[float, float | None]]] = {}
    steps: set[int] = set()
    models = set()
    for line, cells in rows:
        models.add(cells[col["model"]])
        if cells[col["model"]] != model:
            continue
        s = _parse_int(cells[col["step"]], "step", path, line)
        try:
            value = float(cells[col["value"]])
            se = float(cells[col["stderr"]]) if cells[col["stderr"]].strip() else None
        except ValueError:
            raise TraceError(f"value/stderr {cells[col['value']]!r}, {cells[col['stderr']]!r} is not a number",
                             path, line) from None
        table.setdefault((cells[col["task"]], cells[col["metric"]]), {})[s] = (value, se)
        steps.add(s)
    if not steps:
        raise TraceError(f"no records for model {model!r} (models: {', '.join(sorted(models))})", path)
    records, items = _lm_eval_records(sorted(steps), table)
    return Trace(records, f"{path} [{model}]"), items


def convert_bigscience(path: str | os.PathLike) -> Trace:
    """BigScience aggregated lm-eval JSON (``checkpoints``, ``results[task][metric]`` with ``<metric>_stderr``
    lists): one record per checkpoint step, columns as in :func:`convert_lm_eval_long`.  The ``tokens`` list
    (tokens seen at each checkpoint, proportional to the step) is not a metric and is left out."""
    return _bigscience(pathlib.Path(path))[0]


def _bigscience(path: pathlib.Path) -> tuple[Trace, dict[str, int]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        steps = [int(s) for s in data["checkpoints"]]
        results = data["results"]
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
        raise TraceError(f"not a BigScience aggregated results file ({err})", path) from None
    if any(b < a for a, b in zip(steps, steps[1:])):
        raise TraceError("checkpoints are not in increasing order", path)
    table: dict[tuple[str, str], dict[int, tuple[float, float | None]]] = {}
    for task, metrics in results.items():
        for metric, values in metrics.items():
            if metric.endswith("_stderr"):
                continue
            errs = metrics.get(f"{metric}_stderr", [None] * len(values))
            if len(values) != len(steps) or len(errs) != len(steps):
                raise TraceError(f"results[{task!r}][{metric!r}]: {len(values)} values for {len(steps)} "
                                 "checkpoints", path)
            table[(task, metric)] = {s: (float(v), None if e is None else float(e))
                                     for s, v, e in zip(steps, values, errs) if v is not None}
    records, items = _lm_eval_records(steps, table)
    return Trace(records, str(path)), items


# ------------------------------------------------------------------------------------------- TCPD


def _read_json(path: str | os.PathLike) -> tuple[pathlib.Path, object]:
    """(path, parsed document) of a JSON file; a missing file or one that is not JSON is named with its line."""
    path = pathlib.Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    try:
        return path, json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise TraceError(f"not JSON ({exc.msg})", path, exc.lineno) from None


def _tcpd_trace(path, doc: dict) -> Trace:
    """The trace of a Turing Change Point Dataset file (see :func:`convert_tcpd`), from its parsed JSON."""
    n = doc.get("n_obs")
    series = doc.get("series")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise TraceError(f"TCPD dataset: 'n_obs' must be a positive integer, not {n!r}", path)
    if not isinstance(series, list) or not series:
        raise TraceError("TCPD dataset: 'series' must be a non-empty list", path)
    time = doc.get("time")
    index = time.get("index") if isinstance(time, dict) else None
    if index is None:
        index = list(range(n))
    if not isinstance(index, list) or len(index) != n:
        raise TraceError(f"TCPD dataset: 'time.index' must list n_obs = {n} steps, "
                         f"not {len(index) if isinstance(index, list) else type(index).__name__}", path)
    steps = []
    for i, t in enumerate(index):
        if isinstance(t, bool) or not isinstance(t, int) or (steps and t <= steps[-1]):
            raise TraceError(f"TCPD dataset: 'time.index' entry {i} is {t!r}; the index must be increasing "
                             "integers", path)
        steps.append(t)
    names, columns = [], []
    for j, s in enumerate(series):
        where = f"series {j}"
        raw = s.get("raw") if isinstance(s, dict) else None
        if not isinstance(raw, list) or len(raw) != n:
            raise TraceError(f"TCPD dataset: {where}: 'raw' must list n_obs = {n} values, not "
                             f"{len(raw) if isinstance(raw, list) else type(raw).__name__}", path)
        label = s.get("label")
        name = label.strip() if isinstance(label, str) else ""
        if not name or name in RESERVED or name in names or name.startswith(("eval/", "eval_")):
            name = f"V{j + 1}"  # (no label, or one that would read as another column: TCPD's own V1, V2, ...)
        column = []
        for i, v in enumerate(raw):
            if v is None or (isinstance(v, float) and math.isnan(v)):
                column.append(None)  # missing: nothing observed at that step
            elif isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TraceError(f"TCPD dataset: {where} ({name!r}), value {i} (step {steps[i]}) is {v!r}, not a "
                                 "number (null or NaN for a missing value)", path)
            else:
                column.append(float(v))
        names.append(name)
        columns.append(column)
    records = []
    for i, step in enumerate(steps):
        metrics = {name: col[i] for name, col in zip(names, columns) if col[i] is not None}
        if metrics:
            records.append(TraceRecord(step, metrics))
    if not records:
        raise TraceError("TCPD dataset: no value in any series", path)
    return Trace(records, source=str(path))


def convert_tcpd(path: str | os.PathLike) -> Trace:
    """A dataset of the Turing Change Point Dataset (TCPD, alan-turing-institute/TCPD, e.g.
    ``datasets/nile/nile.json``) as a trace: one record per entry of ``time.index`` (the step), one stream per
    series, named by its ``label`` (``V1``, ``V2``, ... where a label is missing, repeated, or would read as
    step/epoch/time or an eval column).  A ``null`` or NaN value is missing: that step observes nothing on that
    stream (a step missing on every series has no record).  :func:`adaptive_eval.trace.read_trace` reads such a
    file as this does, so ``adaptive-eval replay``, ``check`` and ``benchmarks/detectors.py --real`` take it as a
    trace; the annotated change points are :func:`tcpd_events`.

    >>> import json, pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "toy.json"
    >>> _ = path.write_text(json.dumps({"name": "toy", "n_obs": 3, "n_dim": 1, "time": {"index": [0, 1, 2]},
    ...                                 "series": [{"label": "V1", "type": "float", "raw": [1.0, None, 3.5]}]}))
    >>> [(r.step, r.metrics) for r in convert_tcpd(path).records]
    [(0, {'V1': 1.0}), (2, {'V1': 3.5})]
    """
    path, doc = _read_json(path)
    if not isinstance(doc, dict) or "series" not in doc:
        raise TraceError("not a TCPD dataset (a JSON object with 'n_obs', 'time' and 'series')", path)
    return _tcpd_trace(path, doc)


def tcpd_events(annotations: str | os.PathLike | Mapping, name: str, *, min_annotators: int = 2,
                margin: int = 5) -> list[int]:
    """The change points of TCPD dataset ``name`` that at least ``min_annotators`` annotators agree on, from
    TCPD's ``annotations.json`` (a path, or its parsed mapping ``{dataset: {annotator: [index, ...]}}``).

    Every annotator's points are pooled and sorted; points at most ``margin`` indices from the previous one
    form one group (so one annotator's two nearby points are one vote); a group marked by at least
    ``min_annotators`` different annotators is one event, at its earliest point.  (TCPD's own F1 and cover
    metrics score against every annotator; this is the consensus rule of the README's TCPD tables.)  The
    indices are ``time.index`` values, the steps of :func:`convert_tcpd`'s trace.

    >>> tcpd_events({"nile": {"7": [28], "12": [28], "13": [29], "6": []}}, "nile")
    [28]
    >>> tcpd_events({"toy": {"1": [10, 50], "2": [12], "3": [80]}}, "toy")
    [10]
    """
    if isinstance(annotations, (str, os.PathLike)):
        where, annotations = _read_json(annotations)
    else:
        where = "annotations"
    if isinstance(min_annotators, bool) or not isinstance(min_annotators, int) or min_annotators < 1:
        raise ValueError(f"min_annotators must be a positive integer, not {min_annotators!r}")
    if isinstance(margin, bool) or not isinstance(margin, int) or margin < 0:
        raise ValueError(f"margin must be a non-negative integer, not {margin!r}")
    if not isinstance(annotations, Mapping):
        raise TraceError(f"TCPD annotations: expected an object of datasets, not {type(annotations).__name__}",
                         where)
    if name not in annotations:
        import difflib

        near = difflib.get_close_matches(name, [str(k) for k in annotations], n=3)
        hint = f"; did you mean {', '.join(map(repr, near))}?" if near else ""
        raise KeyError(f"{where}: no annotations for dataset {name!r}{hint}")
    by_annotator = annotations[name]
    if not isinstance(by_annotator, Mapping):
        raise TraceError(f"TCPD annotations of {name!r}: expected an object of annotators", where)
    marks = []
    for who, points in by_annotator.items():
        if not isinstance(points, list):
            raise TraceError(f"TCPD annotations of {name!r}, annotator {who!r}: expected a list of indices", where)
        for p in points:
            if isinstance(p, bool) or not isinstance(p, int):
                raise TraceError(f"TCPD annotations of {name!r}, annotator {who!r}: {p!r} is not an index", where)
            marks.append((p, str(who)))
    marks.sort()
    groups: list[list[tuple[int, str]]] = []
    for point, who in marks:
        if not groups or point - groups[-1][-1][0] > margin:
            groups.append([])
        groups[-1].append((point, who))
    return [g[0][0] for g in groups if len({w for _, w in g}) >= min_annotators]


# ------------------------------------------------------------------------------------------- event rules


def reward_change_point(steps: np.ndarray, values: np.ndarray, *, min_segment: int = 10) -> tuple[int, float, float]:
    """The least-squares single change point in the mean: ``(step where the second segment starts, mean
    before, mean after)``, over splits leaving at least ``min_segment`` values on each side.

    >>> reward_change_point(np.arange(40), np.r_[np.full(25, 0.7), np.full(15, 0.1)])
    (25, 0.7, 0.1)
    """
    x = np.asarray(values, dtype=np.float64)
    n = len(x)
    if n < 2 * min_segment:
        raise ValueError(f"need at least {2 * min_segment} values, got {n}")
    c, c2 = np.cumsum(x), np.cumsum(x * x)
    k = np.arange(min_segment, n - min_segment + 1)
    left = c2[k - 1] - c[k - 1] ** 2 / k
    right = (c2[-1] - c2[k - 1]) - (c[-1] - c[k - 1]) ** 2 / (n - k)
    best = int(k[np.argmin(left + right)])
    return int(steps[best]), round(float(x[:best].mean()), 12), round(float(x[best:].mean()), 12)


def first_significant_drop(steps: np.ndarray, values: np.ndarray, n: int, *, z: float = 2.576) -> int | None:
    """The step of the first eval that is significantly below the best earlier eval: a one-sided
    two-proportion z-test (pooled), both measured on ``n`` items, ``z`` = 2.576 (p < 0.005).

    >>> first_significant_drop(np.array([0, 50, 100, 150]), np.array([0.40, 0.46, 0.43, 0.37]), 500)
    150
    """
    best = None
    for s, v in zip(np.asarray(steps).tolist(), np.asarray(values, dtype=np.float64).tolist()):
        if best is not None and v < best:
            pooled = (best + v) / 2
            se = math.sqrt(max(pooled * (1 - pooled), 1e-12) * 2 / n)
            if (best - v) / se >= z:
                return int(s)
        best = v if best is None else max(best, v)
    return None


def spike_steps(steps: np.ndarray, values: np.ndarray, *, ratio: float = 1.4, window: int = 5) -> list[int]:
    """One-step spikes: a value at least ``ratio`` times the median of its ``window`` neighbours on each side,
    with both adjacent values within 10% of that median (so the next step is back to normal)."""
    x = np.asarray(values, dtype=np.float64)
    out = []
    for i in range(window, len(x) - window):
        m = float(np.median(np.r_[x[i - window:i], x[i + 1:i + 1 + window]]))
        if m > 0 and x[i] >= ratio * m and x[i - 1] < 1.1 * m and x[i + 1] < 1.1 * m:
            out.append(int(steps[i]))
    return out


# ------------------------------------------------------------------------------------------- the library


@dataclasses.dataclass(frozen=True)
class RealTraceInfo:
    """What a real trace is, before loading it."""

    name: str
    files: tuple[str, ...]
    description: str
    eval_metric: str | None
    higher_is_better: bool = True
    events_rule: str = "none: no change a good evaluator must catch"
    _load: Callable = dataclasses.field(default=None, repr=False, compare=False)


@dataclasses.dataclass
class RealTrace:
    """A converted real trace with what is known about it (the fields of ``SyntheticTrace`` and more).

    ``truth[i]``: the eval metric as replay sees it at ``trace.records[i]``: the last recorded value carried
    forward (NaN before the first); ``None`` when the trace has no eval metric.  ``items``: the number of eval
    items behind an eval column, where known (MATH-500: 500; lm-eval: recovered from the stderr).
    """

    name: str
    kind: str
    trace: Trace
    events: list[Event]
    truth: np.ndarray | None
    distractors: list[Event]
    eval_metric: str | None
    higher_is_better: bool
    description: str
    files: tuple[str, ...]
    items: dict[str, int]
    events_rule: str


def default_traces_dir() -> pathlib.Path:
    """Where the recorded traces lie: ``$ADAPTIVE_EVAL_TRACES``, else the ones shipped in ``adaptive_eval.traces``."""
    env = os.environ.get("ADAPTIVE_EVAL_TRACES")
    if env:
        return pathlib.Path(env)
    import adaptive_eval.traces

    return pathlib.Path(adaptive_eval.traces.__file__).resolve().parent


GRPO_RULE = ("collapse: the least-squares single change point of reward_avg (segments >= 10 steps), when the "
             "mean falls by >= 0.25 and >= 40%; else degradation: the first eval significantly below the best "
             "earlier eval (one-sided two-proportion z-test, z >= 2.576, n = 500 MATH-500 items); an eval drop "
             "after a collapse is the same change seen later and is not listed again")
SPIKE_RULE = ("none; distractors: one-step train_loss spikes >= 1.4x the median of the 5 steps on each side, "
              "both neighbours within 10% of it")


def _grpo_events(trace: Trace) -> list[Event]:
    steps, reward = trace.column("train/reward")
    events = []
    s, before, after = reward_change_point(steps, reward)
    if before - after >= 0.25 and after <= 0.6 * before:
        events.append(Event(s, "collapse", "train/reward"))
    esteps, acc = trace.column("eval/accuracy")
    if len(esteps):
        drop = first_significant_drop(esteps, acc, 500)
        if drop is not None and not (events and events[0].step <= drop):
            events.append(Event(drop, "degradation", "eval/accuracy"))
    return events


def _grpo(file: str) -> Callable:
    def load(d: pathlib.Path):
        trace = convert_grpo(d / file)
        items = {"eval/accuracy": 500} if "eval/accuracy" in trace.metric_names() else {}
        return trace, _grpo_events(trace), [], items
    return load


def _nanogpt(file: str) -> Callable:
    def load(d: pathlib.Path):
        trace = convert_nanogpt(d / file)
        steps, loss = trace.column("train/loss")
        return trace, [], [Event(s, "spike", "train/loss") for s in spike_steps(steps, loss)], {}
    return load


def _plain(convert: Callable, *files: str, items: dict | None = None) -> Callable:
    def load(d: pathlib.Path):
        return convert(*(d / f for f in files)), [], [], dict(items or {})
    return load


def _pythia(model: str) -> Callable:
    def load(d: pathlib.Path):
        trace, items = _lm_eval_long(d / _PYTHIA, model)
        return trace, [], [], items
    return load


def _bigscience_loader(d: pathlib.Path):
    trace, items = _bigscience(d / _BIGSCIENCE)
    return trace, [], [], items


_R = "rasbt__reasoning-from-scratch__"
_PYTHIA = "EleutherAI__pythia__v1_zero-shot_evals_160m_1.4b_12b.csv"
_BIGSCIENCE = "bigscience-workshop__bigscience__tr3e-1B3-c4-checkpoints_agg.json"
_PONG_MONITOR = "DLR-RM__rl-trained-agents__dqn_Pong__0.monitor.csv"
_PONG_EVALS = "DLR-RM__rl-trained-agents__dqn_Pong__evaluations.csv"


def _info(name, files, description, eval_metric, load, *, higher_is_better=True, events_rule=None):
    return RealTraceInfo(name, tuple(files), description, eval_metric, higher_is_better,
                         events_rule or RealTraceInfo.events_rule, load)


_CATALOG = [
    _info("grpo_no_kl", [f"{_R}ch07_ch06_rlvr_grpo_original_no_kl_metrics.csv"],
          "GRPO without KL, Qwen3-0.6B, 500 steps: MATH-500 accuracy peaks at step 50, reward crashes around "
          "step 224 (length up, partial recovery later), accuracy 46% -> 33%", "eval/accuracy",
          _grpo(f"{_R}ch07_ch06_rlvr_grpo_original_no_kl_metrics.csv"), events_rule=GRPO_RULE),
    _info("grpo_tracking", [f"{_R}ch07_7_3_plus_tracking_metrics.csv"],
          "the same run as grpo_no_kl with advantage/entropy tracking; the log starts with 5 rows of an aborted "
          "start (step restarts at 1): the last run is kept, so its first eval is at step 50", "eval/accuracy",
          _grpo(f"{_R}ch07_7_3_plus_tracking_metrics.csv"), events_rule=GRPO_RULE),
    _info("grpo_clip_ratio", [f"{_R}ch07_7_4_plus_clip_ratio_metrics.csv"],
          "GRPO with a clipped ratio: stable plateau, accuracy 45% -> 41%", "eval/accuracy",
          _grpo(f"{_R}ch07_7_4_plus_clip_ratio_metrics.csv"), events_rule=GRPO_RULE),
    _info("grpo_kl_collapse", [f"{_R}ch07_7_5_plus_kl_metrics.csv"],
          "GRPO with KL: COLLAPSE, reward 0 from step ~56, response length pinned at the 1024 cap, accuracy "
          "40.8% (step 50) -> 0% (step 100)", "eval/accuracy",
          _grpo(f"{_R}ch07_7_5_plus_kl_metrics.csv"), events_rule=GRPO_RULE),
    _info("grpo_format_reward", [f"{_R}ch07_7_6_plus_format_reward_metrics.csv"],
          "reasoning model with a format reward: training reward holds while accuracy degrades noisily "
          "56% -> 9.4% (step 300) -> 35%; one eval at step 149 instead of 150", "eval/accuracy",
          _grpo(f"{_R}ch07_7_6_plus_format_reward_metrics.csv"), events_rule=GRPO_RULE),
    _info("grpo_no_kl_stopped", [f"{_R}ch06_rlvr_grpo_original_no_kl_metrics.csv"],
          "ch06 GRPO run stopped after 258 of 12000 steps: response length blows up, reward falls at the end; "
          "no eval values", None, _grpo(f"{_R}ch06_rlvr_grpo_original_no_kl_metrics.csv"), events_rule=GRPO_RULE),
    _info("distill_r1", [f"{_R}ch08_deepseek-r1-2048_distill_metrics.csv"],
          "SFT distillation, 3 epochs: train/val loss every 50 steps, train loss drops at epoch boundaries",
          "eval/val_loss", _plain(convert_distill, f"{_R}ch08_deepseek-r1-2048_distill_metrics.csv"),
          higher_is_better=False),
    _info("nanogpt_1b", ["KellerJordan__modded-nanogpt__ScaleUp1B_87bd51fd.csv"],
          "1.5B GPT on FineWeb, 20344 steps: per-step train loss, val loss every 125 steps, many isolated "
          "one-step loss spikes (e.g. step 5964: 3.00 -> 5.70 -> 3.32)", "eval/val_loss",
          _nanogpt("KellerJordan__modded-nanogpt__ScaleUp1B_87bd51fd.csv"), higher_is_better=False,
          events_rule=SPIKE_RULE),
    _info("nanogpt_124m", ["KellerJordan__modded-nanogpt__ValueEmbed_75a3af7b.csv"],
          "124M GPT speedrun, 1530 steps: a +1.5 one-step loss spike at step 946", "eval/val_loss",
          _nanogpt("KellerJordan__modded-nanogpt__ValueEmbed_75a3af7b.csv"), higher_is_better=False,
          events_rule=SPIKE_RULE),
    _info("sb3_pong", [_PONG_MONITOR, _PONG_EVALS],
          "DQN Pong on environment timesteps: episode returns (stream) and a deterministic 10-episode "
          "evaluation every 10k steps (eval/return with :std); sharp rise -21 -> +20, then a plateau",
          "eval/return", _plain(convert_sb3_run, _PONG_MONITOR, _PONG_EVALS, items={"eval/return": 10})),
    _info("sb3_pong_episodes", [_PONG_MONITOR], "DQN Pong episode returns by episode (no eval)", None,
          _plain(convert_sb3_monitor, _PONG_MONITOR)),
    _info("sb3_breakout_episodes", ["DLR-RM__rl-trained-agents__dqn_Breakout__0.monitor.csv"],
          "DQN Breakout episode returns by episode: slow steady rise, heavy-tailed noise (no eval)", None,
          _plain(convert_sb3_monitor, "DLR-RM__rl-trained-agents__dqn_Breakout__0.monitor.csv")),
    _info("sb3_humanoid_episodes", ["DLR-RM__rl-trained-agents__a2c_Humanoid-v3__0.monitor.csv"],
          "A2C Humanoid episode returns by episode: no learning, flat noise for 26k episodes (a false-alarm "
          "test; no eval)", None,
          _plain(convert_sb3_monitor, "DLR-RM__rl-trained-agents__a2c_Humanoid-v3__0.monitor.csv")),
    *[_info(f"pythia_{m}", [_PYTHIA],
            f"Pythia-{m} zero-shot lm-eval results at 27 checkpoints (log-then-linear spacing, steps 0..143000)",
            "eval/lambada_openai", _pythia(f"pythia-{m}")) for m in ("160m", "1.4b", "12b")],
    _info("bigscience_1b3_c4", [_BIGSCIENCE],
          "1.3B model trained on C4: lm-eval acc/acc_norm (+stderr) for 28 tasks at 34 checkpoints "
          "(steps 19500..117000)", "eval/lambada", _bigscience_loader),
]


def real_traces(traces_dir: str | os.PathLike | None = None) -> list[RealTraceInfo]:
    """The real traces whose files are present in ``traces_dir`` (default: :func:`default_traces_dir`)."""
    d = pathlib.Path(traces_dir) if traces_dir is not None else default_traces_dir()
    return [info for info in _CATALOG if all((d / f).is_file() for f in info.files)]


def _carry_forward(trace: Trace, name: str) -> np.ndarray:
    out = np.empty(len(trace))
    last = math.nan
    for i, rec in enumerate(trace.records):
        last = rec.metrics.get(name, last)
        out[i] = last
    return out


def load_real(name: str, traces_dir: str | os.PathLike | None = None) -> RealTrace:
    """Convert the real trace ``name`` (see :func:`real_traces`) and derive its events by its rule."""
    d = pathlib.Path(traces_dir) if traces_dir is not None else default_traces_dir()
    by_name = {info.name: info for info in _CATALOG}
    if name not in by_name:
        raise KeyError(f"no real trace {name!r}; known: {', '.join(by_name)}")
    info = by_name[name]
    missing = [f for f in info.files if not (d / f).is_file()]
    if missing:
        raise FileNotFoundError(f"{name}: {', '.join(missing)} not found in {d} (set ADAPTIVE_EVAL_TRACES)")
    trace, events, distractors, items = info._load(d)
    truth = None if info.eval_metric is None else _carry_forward(trace, info.eval_metric)
    return RealTrace(name=name, kind="real", trace=trace, events=events, truth=truth, distractors=distractors,
                     eval_metric=info.eval_metric, higher_is_better=info.higher_is_better,
                     description=info.description, files=info.files, items=items, events_rule=info.events_rule)

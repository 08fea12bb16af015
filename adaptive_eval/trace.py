"""Recorded metric traces: the format, a crash-safe recorder and a reader.

A trace is a sequence of :class:`TraceRecord` (``step``, optional ``epoch`` and ``time``, and the metric values
recorded at that step).  On disk it is CSV with a header or JSONL with one object a line; ``read_trace`` also
reads TensorBoard event directories.  See "Trace format" in ARCHITECTURE.md.

Rules the reader and the recorder share:

- ``step`` is an integer; steps never decrease.  Several lines with the same step are merged into one record
  (a metric written twice at one step keeps the later value, as a recorder that observed a step twice wrote
  it; ``epoch``/``time`` keep the later non-empty value), with a warning when a value is overwritten by a
  different one (rows of separate measurements at one step are not averaged), as another tool's CSV read by
  column (:func:`adaptive_eval.convert.from_columns`) does.
  TensorBoard works the same way (one record per step), and it lets a training loop record what it observed
  and what it evaluated at one step as two lines.
- An empty CSV cell (or a JSON ``null``) means "not recorded at this step".  ``nan``, ``inf`` and ``-inf`` are
  real values and read back exactly.  JSONL holds them as the strings ``"nan"``, ``"inf"``, ``"-inf"`` so
  every line stays strict JSON; the reader also accepts Python's ``NaN``/``Infinity`` tokens.
- Every line is written whole with one ``write`` and ends in a newline, so after a crash at most the last
  line is torn.  The reader drops a malformed last line that has no newline (with a warning), reads a CSV last
  line without one that parses with a warning (cut inside its last cell it still parses), and rejects any other
  malformed line with a :class:`TraceError` naming the file and line.

>>> import pathlib, tempfile
>>> path = pathlib.Path(tempfile.mkdtemp()) / "run.jsonl"
>>> with TraceRecorder(path) as rec:
...     rec.record(0, {"train/reward": 0.25}, time=1.5)
...     rec.record(1, {"train/reward": float("nan"), "eval/accuracy": 0.5})
>>> trace = read_trace(path)
>>> [(r.step, r.metrics) for r in trace]
[(0, {'train/reward': 0.25}), (1, {'train/reward': nan, 'eval/accuracy': 0.5})]
>>> trace.eval_names(), trace.stream_names()
(['eval/accuracy'], ['train/reward'])
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import datetime
import gc
import io
import itertools
import json
import math
import operator
import os
import pathlib
import re
import warnings
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence

import numpy as np

from adaptive_eval.stats import as_float

__all__ = ["Trace", "TraceError", "TraceRecord", "TraceRecorder", "is_eval_name", "read_trace", "write_trace"]

RESERVED = ("step", "epoch", "time")
# CSV cells that mean "no value here", as an empty cell does: R's NA, pandas' <NA> (nullable columns), a
# database's NULL, Excel's #N/A.  (NaN is not one of them: it is a value, which the nonfinite detector sees.)
MISSING_CELLS = frozenset({"NA", "N/A", "n/a", "#N/A", "<NA>", "NULL", "null", "None"})
_NONFINITE_TO_JSON = {math.inf: "inf", -math.inf: "-inf"}
_JSON_TO_NONFINITE = {"nan": math.nan, "NaN": math.nan, "inf": math.inf, "Infinity": math.inf,
                      "-inf": -math.inf, "-Infinity": -math.inf}


class TraceError(ValueError):
    """A trace file that cannot be read: the message starts with ``file:line:`` where a line is to blame."""

    def __init__(self, message: str, path: str | os.PathLike | None = None, line: int | None = None):
        where = "" if path is None else (f"{path}:{line}: " if line is not None else f"{path}: ")
        super().__init__(where + message)
        self.path = None if path is None else str(path)
        self.line = line


@dataclasses.dataclass(frozen=True, slots=True)
class TraceRecord:
    """The values recorded at one training step (``metrics`` holds only those recorded at this step)."""

    step: int
    metrics: dict[str, float]
    epoch: int | None = None
    time: float | None = None


@dataclasses.dataclass
class Trace:
    """A recorded run: records in non-decreasing step order, and where they came from."""

    records: list[TraceRecord]
    source: str = ""

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[TraceRecord]:
        return iter(self.records)

    def metric_names(self) -> list[str]:
        """Every metric name, in order of first appearance."""
        seen: dict[str, None] = {}
        for rec in self.records:
            for name in rec.metrics:
                if name not in seen:
                    seen[name] = None
        return list(seen)

    def eval_names(self) -> list[str]:
        """Eval ground-truth columns: ``eval/<metric>``, without the ``eval/<metric>:std`` columns."""
        return [n for n in self.metric_names() if is_eval_name(n)]

    def stream_names(self) -> list[str]:
        """The cheap per-step streams: every metric that is neither an eval column nor its ``:std``."""
        return [n for n in self.metric_names() if not n.startswith("eval/")]

    def steps(self) -> np.ndarray:
        """The step of every record (int64 array)."""
        return np.fromiter((r.step for r in self.records), dtype=np.int64, count=len(self.records))

    def column(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """``(steps, values)`` of the records where ``name`` was recorded."""
        steps, values = [], []
        for rec in self.records:
            value = rec.metrics.get(name)
            if value is not None:
                steps.append(rec.step)
                values.append(value)
        return np.asarray(steps, dtype=np.int64), np.asarray(values, dtype=np.float64)


def is_eval_name(name: str) -> bool:
    """``eval/<metric>`` (an eval ground-truth column), not ``eval/<metric>:std``."""
    return name.startswith("eval/") and not name.endswith(":std")


def _infer_format(path: pathlib.Path, fmt: str | None) -> str:
    if fmt is not None:
        if fmt not in ("csv", "jsonl"):
            raise ValueError(f"format must be 'csv' or 'jsonl', not {fmt!r}")
        return fmt
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json"):
        return "jsonl"
    if suffix == ".csv":
        return "csv"
    raise ValueError(f"{path}: cannot tell the trace format from the suffix {suffix!r}; "
                     "use .csv, .jsonl or .json, or pass format='csv' / format='jsonl'")


# ---------------------------------------------------------------------------------------------------- writing


def _as_step(name: str, value, *, optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    return int(value)


def _check_metrics(metrics: Mapping) -> dict[str, float]:
    if not isinstance(metrics, Mapping):
        raise TypeError(f"metrics must be a mapping of name to number, got {type(metrics).__name__}")
    out = {}
    for key, value in metrics.items():
        if not isinstance(key, str) or not key:
            raise TypeError(f"metric names must be non-empty strings, got {key!r}")
        if key in RESERVED:
            raise ValueError(f"metric {key!r}: 'step', 'epoch' and 'time' are reserved column names")
        out[key] = as_float(key, value)
    return out


def _json_value(x: float):
    if x != x:
        return "nan"
    return _NONFINITE_TO_JSON.get(x, x)


def _jsonl_line(step: int, metrics: Mapping[str, float], epoch: int | None, time: float | None) -> str:
    obj: dict = {"step": step}
    if epoch is not None:
        obj["epoch"] = epoch
    if time is not None:
        obj["time"] = _json_value(time)
    obj["metrics"] = {k: _json_value(v) for k, v in metrics.items()}
    return json.dumps(obj, allow_nan=False) + "\n"


def _csv_text(rows: Iterable[Sequence[str]]) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()


def _csv_cells(columns: Sequence[str], step: int, metrics: Mapping[str, float], epoch, time) -> list[str]:
    fields = {"step": str(step), "epoch": "" if epoch is None else str(epoch),
              "time": "" if time is None else repr(float(time))}
    return [fields[c] if c in fields else ("" if c not in metrics else repr(metrics[c])) for c in columns]


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _fsync_dir(path: pathlib.Path) -> None:
    try:
        fd = os.open(path.parent, os.O_RDONLY)
    except OSError:  # platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_OPEN_RECORDERS: weakref.WeakSet = weakref.WeakSet()  # (a forked child disowns them: _disown_in_child)


def _disown_in_child() -> None:
    for recorder in list(_OPEN_RECORDERS):
        recorder._forked = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_disown_in_child)


class TraceRecorder:
    """Append records to a trace file, crash-safely.

    Each ``record`` becomes one line, written with a single ``os.write`` on a file opened for appending, so it
    is in the operating system's hands before ``record`` returns (``fsync=True`` also forces it to disk).  After
    a crash at most the line being written is torn.  Opening an existing file continues it: a torn last line
    is cut off (with a warning), the header of a CSV file is kept, and later steps must not go below the last
    recorded one.

    ``format`` is ``"csv"`` or ``"jsonl"`` (default: from the suffix, ``.csv`` or ``.jsonl``/``.json``).

    CSV needs its columns in the header.  By default they are ``step,epoch,time`` and the first record's
    metrics; a record with a metric the header does not have rewrites the file with the column added (the new
    file replaces the old one atomically, so a crash leaves one or the other; the cost is one pass over the
    file per new column).  ``columns=[...]`` fixes the metric columns up front instead: the header is written
    at once and a record with any other metric raises ``ValueError``.  Nothing is silently dropped.
    JSONL has no header, so new metrics cost nothing.

    **A resumed run** (a recorder opened on an existing trace whose first record's step is below the last
    recorded one: training went back to a checkpoint) replaces the rows from that step on, which the run that
    crashed or stopped recorded after its checkpoint: they move to ``<name>.superseded-<k>.<suffix>`` (a trace of their
    own, one per resume) and the trace is rewritten without them, atomically, with a warning.  (A first record
    at the last recorded step itself merges into that step's row, as repeated steps do.)  The trace stays the
    history of the run that goes on, in step order, and replays as it is.

    Errors: a non-numeric metric raises ``TypeError`` naming the key; a step below the previous one raises
    ``ValueError`` (steps may repeat: the reader merges lines of one step), except as the first record after
    opening an existing trace (a resumed run, above).
    """

    def __init__(self, path: str | os.PathLike, *, fsync: bool = False, format: str | None = None,
                 columns: Sequence[str] | None = None):
        self.path = pathlib.Path(path)
        self.format = _infer_format(self.path, format)
        self.fsync = bool(fsync)
        self._fixed = columns is not None
        self._columns: list[str] | None = None
        self._known: tuple = (None, 0, set())  # (the columns list it was made from, its length, their set)
        self._last_step: int | None = None
        if columns is not None:
            if self.format != "csv":
                raise ValueError("columns= only applies to CSV traces")
            fixed = list(columns)
            for name in fixed:
                if not isinstance(name, str) or not name:
                    raise TypeError(f"column names must be non-empty strings, got {name!r}")
                if name in RESERVED:
                    raise ValueError(f"column {name!r}: 'step', 'epoch' and 'time' are always present")
            if len(set(fixed)) != len(fixed):
                raise ValueError(f"duplicate column names in {fixed}")
            fixed = [*RESERVED, *fixed]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._continued = False  # opened on an existing trace and nothing recorded since: a resume may go back
        if self.path.exists() and self.path.stat().st_size > 0:
            self._continue_existing()
            self._continued = self._last_step is not None
            if columns is not None and set(fixed) != set(self._columns or fixed):
                raise ValueError(f"{self.path}: the existing header {self._columns} does not match columns={list(columns)}")
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._forked = False  # in a forked child: the file is the parent's, never written here
        _OPEN_RECORDERS.add(self)
        if columns is not None and self._columns is None:
            self._columns = fixed
            self._write(_csv_text([fixed]))

    # -- opening an existing file

    def _continue_existing(self) -> None:
        header = None
        with open(self.path, "rb") as f:
            end = f.seek(0, os.SEEK_END)
            if self.format == "csv":
                f.seek(0)
                first = f.readline()
                if not first.endswith(b"\n"):
                    # Only a torn header: nothing was recorded yet.
                    warnings.warn(f"{self.path}: cut off a torn header line", RuntimeWarning, stacklevel=3)
                    os.truncate(self.path, 0)
                    return
                header = [h.strip() for h in next(csv.reader([first.decode("utf-8-sig")], skipinitialspace=True))]
                if "step" not in header:
                    raise TraceError(f"missing 'step' column (header: {header})", self.path, 1)
                self._columns = header
            body_start = f.tell() if self.format == "csv" else 0
            # Walk back from the end to the last line holding a record.
            torn = None
            while end > body_start:
                start = max(_last_line_start(f, end), body_start)
                f.seek(start)
                raw = f.read(end - start)
                text = raw.decode("utf-8", errors="replace")
                terminated = raw.endswith(b"\n")
                if text.strip():
                    try:
                        rec = _parse_line(self.format, text.rstrip("\r\n"), header, self.path, None)
                    except TraceError:
                        if terminated:
                            raise
                        torn = start
                    else:
                        self._last_step = rec.step
                        if not terminated:
                            with open(self.path, "ab") as out:
                                out.write(b"\n")
                        break
                elif not terminated:
                    torn = start
                end = start
        if torn is not None:
            warnings.warn(f"{self.path}: cut off a torn last line", RuntimeWarning, stacklevel=3)
            os.truncate(self.path, torn)

    # -- recording

    def _write(self, text: str) -> None:
        _write_all(self._fd, text.encode("utf-8"))
        if self.fsync:
            os.fsync(self._fd)

    def record(self, step: int, metrics: Mapping[str, float], epoch: int | None = None,
               time: float | None = None) -> None:
        """Append the values recorded at ``step`` (one line, on disk before this returns)."""
        if self._fd is None:
            raise ValueError(f"{self.path}: the recorder is closed")
        if self._forked:
            # (a DataLoader worker's observe() wrote its row into the parent's trace, and a new column rewrote the
            # file under the parent, which went on appending to the unlinked one: the rest of its run was lost)
            raise RuntimeError(f"{self.path}: this is a forked child (pid {os.getpid()}); the trace is its parent's "
                               "and is written by the parent alone (a child that trains: record_to() a file of its "
                               "own)")
        step = _as_step("step", step)
        epoch = _as_step("epoch", epoch, optional=True)
        if time is not None:
            time = as_float("time", time)
        values = _check_metrics(metrics)
        resumed = None
        if self._last_step is not None and step < self._last_step:
            if not self._continued:
                raise ValueError(f"{self.path}: step {step} is below the previous step {self._last_step}; "
                                 "steps must not decrease")
            resumed = self._rewind(step)
        self._continued = False
        if self.format == "jsonl":
            self._write(_jsonl_line(step, values, epoch, time))
        else:
            prefix = ""
            if self._columns is None:
                self._columns = [*RESERVED, *values]
                prefix = _csv_text([self._columns])
            else:
                if self._known[0] is not self._columns or self._known[1] != len(self._columns):
                    # (a set of the columns, for the membership test: against the list it took 87 ms a row at
                    # 4,000 streams; a probe)
                    self._known = (self._columns, len(self._columns), set(self._columns))
                known = self._known[2]
                new = [k for k in values if k not in known]
                new += [k for k, v in (("epoch", epoch), ("time", time)) if v is not None and k not in self._columns]
                if new:
                    if self._fixed:
                        raise ValueError(f"{self.path}: metric(s) {new} are not among the CSV columns "
                                         f"{self._columns[3:]}; declare them in columns=, or record JSONL")
                    self._add_columns(new)
            self._write(prefix + _csv_text([_csv_cells(self._columns, step, values, epoch, time)]))
        self._last_step = step
        if resumed is not None:  # (after the record is written: a warning turned into an error loses nothing)
            warnings.warn(resumed, RuntimeWarning, stacklevel=2)

    def _rewind(self, step: int) -> str:
        """A resumed run: move the rows at ``step`` and later into ``<name>.superseded-<k>.<suffix>`` (a trace of its
        own, the first free k) and swap in the trace without them (atomically); what to warn."""
        text = read_text(self.path)
        lines = text.split("\n")
        header = lines[0] if self.format == "csv" else None
        body = lines[1:] if self.format == "csv" else lines
        columns = None if header is None else [h.strip() for h in next(csv.reader([header], skipinitialspace=True))]
        kept, dropped, last = [], [], None
        for number, line in enumerate(body, start=2 if header is not None else 1):
            if not line.strip():
                continue
            rec = _parse_line(self.format, line, columns, self.path, number)
            if rec.step < step:
                kept.append(line)
                last = rec.step
            else:
                dropped.append(line)
        k = 1
        while (aside := self.path.with_name(f"{self.path.stem}.superseded-{k}{self.path.suffix}")).exists():
            k += 1
        head = [header] if header is not None else []
        self._write_lines(aside, head + dropped)
        tmp = self.path.with_name(self.path.name + ".tmp")
        self._write_lines(tmp, head + kept)
        self._swap_in(tmp)
        message = (f"{self.path}: a resumed run records step {step}, below the last recorded step "
                   f"{self._last_step}: the {len(dropped)} row(s) from step {step} on, of the run before, are "
                   f"replaced (kept in {aside.name})")
        self._last_step = last
        return message

    def _add_columns(self, new: list[str]) -> None:
        """Rewrite the CSV file with more columns (empty in the old rows) and swap it in atomically."""
        columns = [*self._columns, *new]
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(self.path, newline="", encoding="utf-8-sig") as src, \
                open(tmp, "w", newline="", encoding="utf-8") as dst:
            reader = csv.reader(src, skipinitialspace=True)
            next(reader)
            writer = csv.writer(dst, lineterminator="\n")
            writer.writerow(columns)
            pad = [""] * len(new)
            for row in reader:
                if row:
                    writer.writerow(row + pad)
            dst.flush()
            if self.fsync:
                os.fsync(dst.fileno())
        self._swap_in(tmp)
        self._columns = columns

    def _write_lines(self, path: pathlib.Path, lines: list[str]) -> None:
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write("".join(line + "\n" for line in lines))
            f.flush()
            if self.fsync:
                os.fsync(f.fileno())

    def _swap_in(self, tmp: pathlib.Path) -> None:
        """Replace the trace by ``tmp`` atomically and go on appending to it."""
        os.close(self._fd)
        self._fd = None
        os.replace(tmp, self.path)
        if self.fsync:
            _fsync_dir(self.path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def close(self) -> None:
        """Close the file (everything is already written); a second close is a no-op."""
        if self._fd is not None:
            if self.fsync:
                os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> TraceRecorder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        fd = getattr(self, "_fd", None)
        if fd is not None:
            os.close(fd)


def _last_line_start(f, end: int) -> int:
    """Offset where the last line before ``end`` starts (a newline exactly at ``end - 1`` ends that line)."""
    pos = end - 1  # skip the terminating newline of the last line, if any
    chunk = 1 << 16
    while pos > 0:
        start = max(0, pos - chunk)
        f.seek(start)
        block = f.read(pos - start)
        i = block.rfind(b"\n")
        if i >= 0:
            return start + i + 1
        pos = start
    return 0


def write_trace(trace: Trace | Iterable[TraceRecord], path: str | os.PathLike, *, format: str | None = None) -> None:
    """Save a trace as CSV or JSONL (format from the suffix), replacing ``path`` atomically.

    CSV columns are ``step,epoch,time`` and every metric in order of first appearance.
    """
    path = pathlib.Path(path)
    fmt = _infer_format(path, format)
    records = trace.records if isinstance(trace, Trace) else list(trace)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    last = None
    lines = []
    if fmt == "csv":
        columns = [*RESERVED, *Trace(records).metric_names()]
        lines.append(_csv_text([columns]))
    for rec in records:
        step = _as_step("step", rec.step)
        if last is not None and step < last:
            raise ValueError(f"step {step} is below the previous step {last}; steps must not decrease")
        last = step
        values = _check_metrics(rec.metrics)
        epoch = _as_step("epoch", rec.epoch, optional=True)
        time = None if rec.time is None else as_float("time", rec.time)
        if fmt == "csv":
            lines.append(_csv_cells(columns, step, values, epoch, time))
        else:
            lines.append(_jsonl_line(step, values, epoch, time))
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        if fmt == "csv":
            f.write(lines[0])
            csv.writer(f, lineterminator="\n").writerows(lines[1:])
        else:
            f.writelines(lines)
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------------- reading


def read_trace(path: str | os.PathLike, *, on_restart: str = "error", step_column: str = "step",
               validation_truth: bool = True) -> Trace:
    """Read a CSV or JSONL trace file, or a TensorBoard event directory (or single event file).

    CSV: a header with a ``step`` column (leading ``#`` lines above it are comments, unless one has that column:
    it is the header); ``epoch`` and ``time`` columns are optional; every other column is a metric.  JSONL:
    objects ``{"step": .., "epoch": .., "time": .., "metrics": {..}}`` (or flat, with the metrics beside ``step``
    when there is no ``metrics`` key).  TensorBoard: every scalar tag is a metric, one
    record per step, ``time`` is the wall time since the first event; all events are kept.  The series
    ``SummaryWriter.add_scalars(main_tag, {key: ...})`` writes into sub-folders ``<main_tag>_<key>/`` are
    metrics ``<main_tag>/<key>`` of the folder's run; another run in a sub-folder is left out with a warning.

    JSONL objects may nest metrics (``{"step": 3, "actor": {"kl": 0.01}}`` is metric ``actor/kl``), and a
    ``data`` object in place of ``metrics`` holds them (verl's file logger: ``{"step": 3, "data": {...}}``).
    A record without ``step`` but with W&B's ``_step`` (its ``files/wandb-history.jsonl``) is read by it, with a
    warning: W&B's ``_runtime`` (else ``_timestamp``) is its time, and those and ``_wandb`` are not metrics.
    A JSON file of the Turing Change Point Dataset (an object with ``n_obs``, ``time`` and ``series``) is one
    stream per series, its ``time.index`` the steps (:func:`adaptive_eval.convert.convert_tcpd`).

    ``on_restart``: ``"error"`` (default) for a step below the previous one; ``"keep_last"`` takes it for a
    run restarted or resumed into the same log and keeps the later run (the earlier records at or after that
    step are dropped, as TensorBoard does).  A TensorBoard run resumed into its folder (a new event file) has its
    orphaned events purged either way, as TensorBoard does: when a tag's step goes back, that tag's earlier
    values at that step and after are dropped (with a warning); ``"keep_last"`` also drops the earlier run's
    other tags from the later run's first step on.

    ``step_column``: the key holding the step in JSONL/JSON records whose step is not ``step`` (OpenRLHF's
    ``train/global_step``); a record without it takes the one key of the same last part (OpenRLHF's eval rows:
    ``eval/global_step``).  It is not a metric.  (A CSV's step column: :func:`adaptive_eval.convert.from_columns`.)

    ``validation_truth``: a trace without ``eval/`` columns and with one ``val-core/`` column (verl's validation
    result) has it as its eval ground truth, ``eval/val-core/...``, with a warning (:func:`promote_validation`).

    Raises :class:`TraceError` for a malformed line (file and line number), a missing ``step`` column,
    decreasing steps, a non-numeric cell, or a file without records.  A CSV column of text alone (a run's name) is
    left out with a warning, as a flat JSONL record's text fields are.
    """
    if on_restart not in ("error", "keep_last"):
        raise ValueError(f"on_restart must be 'error' or 'keep_last', not {on_restart!r}")
    keep_last = on_restart == "keep_last"
    path = pathlib.Path(path)
    if not isinstance(step_column, str) or not step_column:
        raise ValueError(f"step_column must be a non-empty string, not {step_column!r}")
    if step_column != "step" and trace_format(path) != "jsonl":
        raise ValueError(f"{path}: step_column= applies to a JSONL or JSON trace; a CSV's step column: "
                         "adaptive_eval.convert.from_columns(path, step=...); a TensorBoard run has its steps")
    as_read = (lambda trace: _nan_gaps(promote_validation(trace))) if validation_truth else _nan_gaps
    if trace_format(path) == "tensorboard":
        return as_read(_read_tensorboard(path, keep_last))
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such trace file")
    text = read_text(path)
    if trace_format(path, text) == "jsonl":
        with _gc_paused():
            return as_read(_read_jsonl(path, text, keep_last, step_column))
    return as_read(_read_csv(path, text, keep_last))


def trace_format(path: str | os.PathLike, text: str | None = None) -> str:
    """How :func:`read_trace` reads ``path``: ``"tensorboard"`` (a folder or an event file), ``"jsonl"`` (by
    suffix, or a file of another suffix whose ``text`` starts with ``{``) or ``"csv"``."""
    path = pathlib.Path(path)
    if path.is_dir() or "tfevents" in path.name:
        return "tensorboard"
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json"):
        return "jsonl"
    if suffix != ".csv" and path.is_file():
        text = read_text(path) if text is None else text
        if text.lstrip().startswith("{"):
            return "jsonl"
    return "csv"


def read_text(path: pathlib.Path) -> str:
    """A trace file's text, with any line endings (``\n``, ``\r\n``, old Mac ``\r``) read as ``\n``;
    a file that is not UTF-8 is a :class:`TraceError` naming the file, line and byte."""
    return _decoded(path.read_bytes(), path)


def _decoded(data: bytes, path, torn_ok: bool = True) -> str:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        if torn_ok and exc.end == len(data) and b"\n" not in data[exc.start:]:
            # A crash cut the last line inside a character (a metric named in another script): it read "not
            # UTF-8 ... save the trace as UTF-8" and the whole trace was refused (a probe); a torn last line.
            _drop_torn(path, line, f"no newline at its end, cut inside a character (byte 0x{data[exc.start]:02x})",
                       stacklevel=3)
            return _decoded(data[:data.rfind(b"\n") + 1], path, torn_ok=False)
        raise TraceError(f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); save the trace "
                         "as UTF-8", path, line) from None
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text


@contextlib.contextmanager
def _gc_paused():
    # Reading builds millions of small objects and none of them form cycles; the cyclic collector would
    # rescan the growing heap again and again (a third of the read time of a large trace).
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class _Fallback(Exception):
    """The fast CSV path met something it leaves to the careful path."""


def _new_record(step, metrics, epoch, time, _new=object.__new__, _set=object.__setattr__, _cls=TraceRecord):
    # Frozen dataclasses assign through object.__setattr__; doing it here skips __init__'s call overhead,
    # which is a third of the read time of a large trace.
    rec = _new(_cls)
    _set(rec, "step", step)
    _set(rec, "metrics", metrics)
    _set(rec, "epoch", epoch)
    _set(rec, "time", time)
    return rec


_ASYNC_LATENCY = "async/latency_steps"  # (record_to's column of an asynchronous result)


def _overwrites(old: float | None, new: float) -> bool:
    """Whether ``new`` written at a step where ``old`` was overwrites it with another value (NaN over NaN: no)."""
    return old is not None and old != new and not (old != old and new != new)


def _merge(prev: TraceRecord, rec: TraceRecord, clashes: list | None = None) -> TraceRecord:
    """One record of two at the same step (the later value of a metric written twice); ``clashes`` collects
    ``(step, metric, earlier, later)`` for each value overwritten by a different one."""
    if clashes is not None and not (_ASYNC_LATENCY in prev.metrics and _ASYNC_LATENCY in rec.metrics):
        # (two asynchronous results integrated at one step, as close() integrates the one in flight and the final
        # one: the later, of the newer weights, is the step's value; a warning to aggregate episodes misled a probe)
        for k, v in rec.metrics.items():
            old = prev.metrics.get(k)
            if _overwrites(old, v):
                clashes.append((rec.step, k, old, v))
    metrics = {**prev.metrics, **rec.metrics}
    return _new_record(rec.step, metrics, prev.epoch if rec.epoch is None else rec.epoch,
                       prev.time if rec.time is None else rec.time)


def warn_clashes(path, clashes: list, stacklevel: int = 2) -> None:
    """Say that rows repeating a step overwrote different values (the data looked fine and was not: ten
    evaluation episodes per step read as the last episode alone)."""
    if not clashes:
        return
    step, key, old, new = clashes[0]
    n = len(clashes)
    warnings.warn(f"{path}: {n} value{'s' if n > 1 else ''} written twice at one step with a different value; "
                  f"the later is kept (the first: step {step}, {key!r}: {old:g}, then {new:g}), and a replay sees it "
                  "alone.  Rows that repeat "
                  "a step are merged, not averaged: if they are separate measurements (episodes, seeds), "
                  "aggregate them per step first (their mean); per-problem results, a row per checkpoint x problem x "
                  "answer, are read by adaptive_eval.convert.from_item_results", RuntimeWarning,
                  stacklevel=stacklevel + 1)


def check_separator(header: Sequence[str], path, line: int) -> None:
    """A header read as one column that holds ';', a tab or '|' is a file separated by that, not by commas
    (a European spreadsheet's export, a TSV): say so, instead of "missing column"."""
    if len(header) == 1:
        sep = next((c for c in (";", "\t", "|") if c in header[0]), None)
        if sep is not None:
            raise TraceError(f"the header is one column, {header[0]!r}: the file is separated by {sep!r}, not by "
                             "commas; save it as comma-separated CSV (with decimal points: 0.5, not 0,5)", path, line)


_UNNAMED = "\x00unnamed "  # an unnamed CSV column's name while it is read: never a metric


def skip_comment_lines(text: str) -> tuple[int, str]:
    """``(k, rest)``: the first ``k`` lines of ``text`` start with ``#`` (after blanks) and ``rest`` is the text
    after them.  A Stable-Baselines3 ``Monitor`` file carries a ``#{"t_start": ..., "env_id": ...}`` JSON line
    above its header; it was read as the header."""
    skipped = pos = 0
    while True:
        end = text.find("\n", pos)
        if not (text[pos:] if end < 0 else text[pos:end]).lstrip().startswith("#"):
            return skipped, (text[pos:] if skipped else text)
        skipped += 1
        pos = len(text) if end < 0 else end + 1


# A Stable-Baselines3 Monitor file's columns: episode return, length and wall seconds (then any info keywords).
_SB3_MONITOR = ["r", "l", "t"]
# The step column of a W&B export (a run's history or a chart's "Export CSV").
_WANDB_STEP = "Step"
_WANDB_STEPS = (_WANDB_STEP, "_step")  # (an export from the UI; the API's run.history().to_csv())


def _csv_header(path, text, line: int = 1) -> tuple[list[str], csv.reader]:
    """The header (``line``: its line in the file) and a reader positioned after it."""
    reader = csv.reader(io.StringIO(text), skipinitialspace=True)
    try:
        header = next(reader)
    except StopIteration:
        raise TraceError("no records", path) from None
    names = [h.strip() for h in header]
    check_separator(names, path, line)
    if "step" not in names:
        if names[:3] == _SB3_MONITOR:
            raise TraceError(f"missing 'step' column (header: {names}): a Stable-Baselines3 Monitor file, one row "
                             "an episode; read it with adaptive_eval.convert.convert_sb3_monitor(path) (and save that "
                             "with adaptive_eval.trace.write_trace), or replay it as it is: adaptive-eval replay "
                             f"{path} --step-column none --stream r --stream l", path, line)
        raise TraceError(f"missing 'step' column (header: {names}); another tool's CSV: name its columns with "
                         "adaptive-eval replay (or check, or tune) --step-column COL --stream COL --eval COL "
                         "(--step-column none: the row "
                         "number)", path, line)
    dup = sorted({n for n in names if n and names.count(n) > 1})
    if dup:
        raise TraceError(f"duplicate column(s) {dup} in the header", path, line)
    unnamed = [i for i, n in enumerate(names) if not n]
    if unnamed:
        # pandas' df.to_csv() writes its index under an empty name, and a trailing comma makes an empty last
        # column: neither is a metric (they were refused: "empty column name in the header").
        warnings.warn(f"{path}: ignored {len(unnamed)} unnamed column{'s' if len(unnamed) > 1 else ''} (column "
                      f"{', '.join(str(i + 1) for i in unnamed)}: a pandas index, or a trailing comma)",
                      RuntimeWarning, stacklevel=4)
        names = [n or f"{_UNNAMED}{i}" for i, n in enumerate(names)]
    return names, reader


def _csv_comments(path, text: str) -> tuple[int, str]:
    """:func:`skip_comment_lines` for a trace CSV, whose header has a ``step`` column: a leading ``#`` line that
    has one is the header, not a comment (a first column named ``#``, a row number, read before the comment
    lines were skipped); and a header that lacks one while a comment line above it has one behind its ``#``
    (``numpy.savetxt`` writes ``# step,loss``) is an error naming that line, not the first data row."""
    skipped, body = skip_comment_lines(text)
    if not skipped:
        return 0, text
    lines = text.split("\n", skipped)[:skipped]

    def cells(line: str) -> list[str]:
        return [c.strip() for c in next(csv.reader([line.rstrip("\r")], skipinitialspace=True), [])]

    pos = 0
    for j, line in enumerate(lines):
        if "step" in cells(line):
            return j, text[pos:]
        pos += len(line) + 1
    end = body.find("\n")
    if "step" not in cells(body if end < 0 else body[:end]):
        for j, line in enumerate(lines):
            if "step" in cells(line.lstrip().lstrip("#")):
                raise TraceError(f"missing 'step' column: line {j + 1} {line.rstrip()!r} looks like the header "
                                 "behind a '#' (numpy.savetxt writes its header so; pass comments=''), and lines "
                                 "starting with '#' above the header are skipped as comments: remove its '#'",
                                 path, j + 1)
    return skipped, body


def _read_csv(path, text: str, keep_last: bool = False) -> Trace:
    skipped, text = _csv_comments(path, text)
    # The header alone (copying the whole text into a reader costs a second on a large file).
    end = text.find("\n")
    first = text if end < 0 or '"' in text[:end] else text[:end + 1]
    header = [c.strip() for c in next(csv.reader(io.StringIO(first), skipinitialspace=True), [])]
    if "step" not in header and any(c in header for c in _WANDB_STEPS):
        # W&B's exports (a run's history, a chart's "Export CSV") name the step "Step" and carry their own
        # bookkeeping (_runtime, "<run> - <metric>" and its __MIN/__MAX band): read them as W&B means them.
        # Its API's run.history() names it "_step" (found by a new-user probe: "missing 'step' column").
        # from_columns finds that step column, and says so.
        from adaptive_eval.convert import from_columns

        trace = from_columns(path, on_restart="keep_last" if keep_last else "error")
        return Trace(_counters_out(trace.records, header, path), trace.source)
    names, _ = _csv_header(path, first, skipped + 1)
    with _gc_paused():
        try:
            records = _read_csv_fast(path, text, names)
        except (_Fallback, ValueError, TypeError):
            records = None  # (the careful reader, outside the handler: its TraceError came chained to _Fallback)
        if records is None:
            records = _read_csv_careful(path, text, names, keep_last, skipped)
    if not records:
        raise TraceError("no records", path)
    return Trace(_dates_relative(_counters_out(records, names, path), path), str(path))


def _counters_out(records: list[TraceRecord], names, path) -> list[TraceRecord]:
    """A CSV's epoch and step counters logged as metrics (verl's ``training/epoch``, ``training/global_step``) read as
    the JSONL and TensorBoard readers read them: the epoch (where the record has none), and left out.  Watched as
    streams, they alarmed at every epoch boundary, and a verl log replayed as CSV spent 2.6x what it did as JSONL
    (a probe)."""
    counters = [n for n in names if n in _EPOCH_TAGS or n in _STEP_TAGS]
    if not counters:
        return records
    out = []
    for rec in records:
        metrics, epoch = rec.metrics, rec.epoch
        if any(k in metrics for k in counters):
            metrics = dict(metrics)
            rec = TraceRecord(rec.step, metrics, _take_counters(metrics, epoch, path, None), rec.time)
        out.append(rec)
    return out


def _take_counters(metrics: dict, epoch: int | None, path, line) -> int | None:
    """Take an epoch or step counter logged as a metric out of ``metrics`` (in place); the record's epoch, the
    counter's where it had none (verl logs training/epoch: a stream, it alarmed at each epoch boundary)."""
    for key in _EPOCH_TAGS:
        if key in metrics:
            value = metrics.pop(key)
            if epoch is None and math.isfinite(value):
                epoch = _epoch(value, value, path, line)
    for key in _STEP_TAGS.intersection(metrics):
        del metrics[key]
    return epoch


def _read_csv_fast(path, text: str, names: list[str]) -> list[TraceRecord]:
    """The common case, column by column: well-formed rows of plain numbers, steps increasing.

    Anything unusual (a torn or short line, a cell ``float`` cannot read, a repeated or decreasing step)
    raises ``_Fallback`` and the careful row-by-row reader takes over and reports it with its line.
    """
    if not text.endswith("\n"):
        raise _Fallback  # a last line without newline may be torn
    width = len(names)
    header_end = text.index("\n")
    body = text[header_end + 1:]
    if not body:
        return []
    if '"' in text or "\r" in body:
        rows = list(csv.reader(io.StringIO(body), skipinitialspace=True))
        if any(len(row) != width for row in rows):
            raise _Fallback
        cols = list(zip(*rows))
    else:
        # No quoting: split on commas directly (about twice as fast as the csv module).
        if set(map(operator.methodcaller("count", ","), body[:-1].split("\n"))) != {width - 1}:
            raise _Fallback
        cells = body.replace("\n", ",").split(",")
        cells.pop()
        cols = [cells[j::width] for j in range(width)]
        del cells
    steps = list(map(int, cols[names.index("step")]))
    if any(map(operator.gt, steps, itertools.islice(steps, 1, None))) or (steps and max(steps[-1], -steps[0] - 1)
                                                                            > _INT64):
        raise _Fallback  # a decreasing step (an error with its line), or one too large
    repeated = any(map(operator.eq, steps, itertools.islice(steps, 1, None)))
    none = itertools.repeat(None)
    epochs = _optional_column(cols[names.index("epoch")], int) if "epoch" in names else none
    times = _optional_column(cols[names.index("time")], float) if "time" in names else none
    metric_idx = [i for i, n in enumerate(names) if n not in RESERVED and not n.startswith(_UNNAMED)]
    metric_names = [names[i] for i in metric_idx]
    values = [_optional_column(cols[i], float) for i in metric_idx]
    del cols
    if not values:
        dicts = [{} for _ in steps]
    elif not any(None in v for v in values):
        dicts = [dict(zip(metric_names, row)) for row in zip(*values)]
    else:
        dicts = [{n: v for n, v in zip(metric_names, row) if v is not None} for row in zip(*values)]
    records = list(map(_new_record, steps, dicts, epochs, times))
    if repeated:
        # Rows of one step merged here, as the careful reader merges them: record_to writes an epoch row and each
        # evaluation's row at a step already written, and every recorded trace took the row-by-row reader, 3.2x
        # slower (a long-run probe).  A value written twice with another value goes to the careful reader, which
        # says so.
        merged, clashes = [], []
        for rec in records:
            if merged and merged[-1].step == rec.step:
                merged[-1] = _merge(merged[-1], rec, clashes)
                if clashes:
                    raise _Fallback
            else:
                merged.append(rec)
        records = merged
    return records


def _optional_column(cells: Sequence[str], convert) -> list:
    if not any(cells):
        return [None] * len(cells)
    if "" in cells:
        return [convert(c) if c else None for c in cells]
    return list(map(convert, cells))


def date_hint(text: str, step: bool = False) -> str:
    """A hint for a cell that is not a number because it is a date (found by a new-user probe: a ``date,value``
    series read with ``--step-column none`` said only "'2000-01-01' is not a number") or text (not of a step);
    else ""."""
    s = text.strip()
    if not re.match(r"\d{4}-\d{2}", s):
        if step or not re.search(r"[A-Za-z_]", s):
            return ""
        # (found by a new-user probe: per-problem results read as a trace said only "'aime_2024_I_9' is not a number")
        return (" (text, not a metric: leave the column out of the streams, e.g. name those to watch with --stream "
                "COL; per-problem results, a row per checkpoint x problem x answer, are read by "
                "adaptive_eval.convert.from_item_results)")
    try:
        datetime.datetime.fromisoformat(s + "-01" if _YEAR_MONTH.fullmatch(s) else s)
    except ValueError:
        return ""
    if step:
        return " (a date is not a step: --step-column none numbers the rows; a date column named 'time' is the clock)"
    return (" (a date, not a metric: name the columns to watch with --stream COL and the others are left out, or "
            "call the column 'time' to take it as the clock)")


_INT64 = 2**63 - 1


def _in_range(value: int, what: str, text, path, line) -> int:
    """``value``, or a :class:`TraceError` where it lies beyond a 64-bit integer (a step of 1e30 was read, replayed,
    then crashed the CLI's notes with an ``OverflowError``; found by a probe)."""
    if not -_INT64 - 1 <= value <= _INT64:  # (-2**63 is an int64; a review)
        raise TraceError(f"{what} {text!r} is beyond the largest a trace holds (2**63 - 1)", path, line)
    return value


def _parse_int(text: str, what: str, path, line) -> int:
    s = text.strip()
    try:
        return _in_range(int(s), what, text, path, line)
    except ValueError:
        pass
    try:
        x = float(s)
    except ValueError:
        raise TraceError(f"{what} {text!r} is not a number{date_hint(text, step=True)}", path, line) from None
    if not x.is_integer():
        raise TraceError(f"{what} {text!r} is not an integer", path, line)
    return _in_range(int(x), what, text, path, line)


def _parse_float(text: str, what: str, path, line) -> float:
    try:
        return float(text)
    except ValueError:
        raise TraceError(f"{what}: {text!r} is not a number{date_hint(text)}", path, line) from None


# A Hugging Face Trainer's log_history rows carry how fast it ran and its closing summary: not streams.
_HF_BOOKKEEPING = frozenset({"total_flos", "train_runtime", "train_samples_per_second", "train_steps_per_second",
                             "eval_runtime", "eval_samples_per_second", "eval_steps_per_second"})

# The same keys as Hugging Face's TensorBoardCallback writes them (its rewrite_logs: eval_<k> as eval/<k>, any other
# key as train/<k>): eval/runtime was offered as eval ground truth ("a percentage? scale it"; found in review).
_HF_TB_BOOKKEEPING = _HF_BOOKKEEPING | {f"eval/{k[len('eval_'):]}" if k.startswith("eval_") else f"train/{k}"
                                       for k in _HF_BOOKKEEPING}

class _Date(float):
    """A ``time`` cell that held a date: its POSIX seconds, until :func:`_dates_relative` makes the trace's
    times seconds since its first record."""


_YEAR_MONTH = re.compile(r"\d{4}-\d{2}")


def _parse_time(text: str, what: str, path, line) -> float:
    """A ``time`` cell: seconds (a number), or an ISO 8601 date or date-time (``2014-04-01 00:00:00``,
    ``1871-01-01``, ``1871-01``; one without a zone is taken as UTC), returned as a :class:`_Date`."""
    try:
        return float(text)
    except ValueError:
        pass
    s = text.strip()
    if s.endswith(("Z", "z")):  # (UTC; Python 3.10's fromisoformat does not take the Z)
        s = s[:-1] + "+00:00"
    try:
        d = datetime.datetime.fromisoformat(s + "-01" if _YEAR_MONTH.fullmatch(s) else s)
    except ValueError:
        raise TraceError(f"{what}: {text!r} is neither a number of seconds nor an ISO 8601 date or time",
                         path, line) from None
    if d.tzinfo is None:
        d = d.replace(tzinfo=datetime.timezone.utc)
    return _Date(d.timestamp())


_EPOCH_SECONDS = 1e8  # a first time at least this (3 years) is a POSIX timestamp, not seconds since the start


def _dates_relative(records: list[TraceRecord], path) -> list[TraceRecord]:
    """Records whose ``time`` held dates, or POSIX timestamps (a first time of 1e8 s or more), with their times
    as seconds since the first record's (the trace's clock starts at 0); others as they are.  Dates mixed with
    numbers of seconds are an error."""
    times = [r.time for r in records if r.time is not None]
    dated = sum(isinstance(t, _Date) for t in times)
    if not dated and times:
        records = _seconds_relative(records, path)
        times = [r.time for r in records if r.time is not None]
    if not dated and times and times[0] >= _EPOCH_SECONDS:
        # Numbers of seconds that are POSIX timestamps (time.time() logged as is): taken as seconds since
        # 1970, the run had trained for 54 years before its first step, and the eval budget never bound.
        t0 = times[0]
        return [r if r.time is None else _new_record(r.step, r.metrics, r.epoch, float(r.time) - t0)
                for r in records]
    if not dated:
        return records
    if dated < len(times):
        raise TraceError(f"the time column mixes dates ({dated} records) with numbers of seconds "
                         f"({len(times) - dated}); give one or the other", path)
    back = next((i for i in range(1, len(times)) if times[i] < times[i - 1]), None)
    if back is not None:  # (newest first: the clock would run backwards, every step a negative time)
        step = [r.step for r in records if r.time is not None][back]
        raise TraceError(f"the time column's dates go back at step {step} ({_iso(times[back - 1])} -> "
                         f"{_iso(times[back])}): records must be oldest first (sort the file by date)", path)
    t0 = times[0]
    return [r if r.time is None else _new_record(r.step, r.metrics, r.epoch, float(r.time) - t0) for r in records]


def _seconds_relative(records: list[TraceRecord], path) -> list[TraceRecord]:
    """A time column of seconds that goes back (a clock restarted by a resume: every later step read as before the
    budget's start, 107 deferrals where there were none) continues from the last time before it; one
    that starts far later than its first step could (``time.monotonic()`` logged as is: 98 hours before the first
    step, and the eval budget never bound) counts from the first record.  Each said once.  Found by a new user."""
    timed = [(r.step, float(r.time)) for r in records if r.time is not None]
    bad = next(((step, t) for step, t in timed if not math.isfinite(t)), None)
    if bad is not None:  # (one inf made every later time inf; a NaN hid the drop after it: a review)
        raise TraceError(f"the time column is {bad[1]} at step {bad[0]}: times are finite seconds (leave the cell "
                         "empty where none was taken)", path)
    rates = sorted((t1 - t0) / (s1 - s0) for (s0, t0), (s1, t1) in zip(timed, timed[1:]) if s1 > s0 and t1 >= t0)
    pace = rates[len(rates) // 2] if rates else 0.0
    offset, last_raw, back, out = 0.0, None, None, {}
    for step, raw in timed:
        # A restart: a reading under half the one before (the new clock counts from the last reading before the
        # drop).  Not a small step back (a logger's jitter, two rows out of order: it added the whole time before, 54
        # years of POSIX seconds; a review), nor POSIX seconds: those stay as they are.
        if last_raw is not None and 0 <= raw < last_raw / 2 and last_raw < _EPOCH_SECONDS:
            back = back or (step, raw, last_raw)
            offset += last_raw
        out[step] = raw + offset
        last_raw = raw
    first_step, first = timed[0]
    late = first < _EPOCH_SECONDS and pace > 0 and first > 10.0 * pace * (first_step + 1) + 3600.0
    if back is not None:
        warnings.warn(f"{path}: the time column goes back at step {back[0]} ({back[2]:g} s -> {back[1]:g} s; a clock "
                      "restarted by a resume?): the later times continue from the last one before it",
                      RuntimeWarning, stacklevel=5)
    if late:
        warnings.warn(f"{path}: the time column starts at {first:g} s, far more than its first step takes at the "
                      f"trace's pace ({pace:g} s a step): read as a clock that did not start with the run "
                      "(time.monotonic()?), its times count from the first record", RuntimeWarning, stacklevel=5)
    if back is None and not late:
        return records
    shift = first if late else 0.0
    return [r if r.time is None else _new_record(r.step, r.metrics, r.epoch, out[r.step] - shift) for r in records]


def _iso(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).isoformat()


def _csv_record(row: list[str], names: list[str], path, line) -> TraceRecord:
    if len(row) != len(names):
        raise TraceError(f"expected {len(names)} fields, got {len(row)}", path, line)
    step = epoch = time = None
    metrics = {}
    for name, cell in zip(names, row):
        if not cell.strip() or name.startswith(_UNNAMED) or (name != "step" and cell.strip() in MISSING_CELLS):
            if name == "step":
                raise TraceError("empty 'step' cell", path, line)
            continue
        if name == "step":
            step = _parse_int(cell, "step", path, line)
        elif name == "epoch":
            epoch = _parse_epoch(cell, path, line)
        elif name == "time":
            time = _parse_time(cell, "column 'time'", path, line)
        else:
            metrics[name] = _parse_float(cell, f"column {name!r}", path, line)
    return TraceRecord(step, metrics, epoch, time)


def _parse_line(fmt: str, line: str, header, path, line_no) -> TraceRecord:
    if fmt == "csv":
        row = next(csv.reader([line], skipinitialspace=True), [])
        return _csv_record(row, header, path, line_no)
    return _json_record(line, path, line_no)


def _finish_line(rec: TraceRecord, records: list[TraceRecord], path, line, keep_last: bool = False,
                 restarts: list | None = None, clashes: list | None = None) -> None:
    if records:
        prev = records[-1]
        if rec.step < prev.step and keep_last:  # a restarted or resumed run: the later one is kept
            n = len(records)
            while records and records[-1].step >= rec.step:
                records.pop()
            if restarts is not None:
                restarts.append((line, rec.step, prev.step, n - len(records)))
            records.append(rec)
            return
        if rec.step < prev.step:
            raise TraceError(f"step {rec.step} is below the previous step {prev.step}; steps must not decrease "
                             "(a run resumed into the same log: read_trace(..., on_restart='keep_last'), "
                             "adaptive-eval --keep-last-run, keeps the later run)", path, line)
        if rec.step == prev.step:
            records[-1] = _merge(prev, rec, clashes)
            return
    records.append(rec)


def warn_restarts(path, restarts: list, kept: int, stacklevel: int = 2) -> None:
    """One warning for the records ``on_restart='keep_last'`` dropped, ``restarts`` being ``(line, step, previous
    step, records dropped)`` per restart: a file that is merely unsorted, read so, lost most of its rows without a
    word (found by a new-user probe: 20 shuffled rows replayed as 3)."""
    if not restarts:
        return
    dropped = sum(r[3] for r in restarts)
    line, step, prev, _ = restarts[0]
    where = f"line {line}: " if line is not None else ""
    warnings.warn(f"{path}: kept the later run at {len(restarts)} restart{'s' if len(restarts) > 1 else ''} "
                  f"(on_restart='keep_last', --keep-last-run): dropped {dropped} earlier record"
                  f"{'s' if dropped > 1 else ''}, {kept} kept (the first restart at {where}step {step} after "
                  f"step {prev}); a file that is only out of order should be sorted by step instead",
                  RuntimeWarning, stacklevel=stacklevel + 1)


def _cells(row: list[str], most: int = 60) -> str:
    text = ",".join(row)
    return text if len(text) <= most else text[:most - 3] + "..."


def _drop_torn(path, line, why: str, stacklevel: int) -> None:
    warnings.warn(f"{path}:{line}: dropped a torn last line ({why})", RuntimeWarning, stacklevel=stacklevel + 1)


def _read_csv_careful(path, text: str, names: list[str], keep_last: bool = False,
                      skipped: int = 0) -> list[TraceRecord]:
    """Row by row; ``skipped``: the comment lines above the header, left out of ``text``."""
    _, reader = _csv_header(path, text, skipped + 1)
    unterminated = not text.endswith(("\n", "\r"))
    rows = []
    for row in reader:
        rows.append((skipped + reader.line_num, row))
    text_only = _text_columns(rows, names)
    if text_only:
        # A column of text alone (a run's name, a phase) is a record's metadata, as the JSONL reader reads a flat
        # record's text fields: left out, said once (it refused the whole file; a probe).  A column of numbers
        # with one text cell in it is still an error naming its line.
        warn_text_columns(path, names, text_only, stacklevel=4)
        names = [f"{_UNNAMED}{i}" if i in text_only else n for i, n in enumerate(names)]
    records: list[TraceRecord] = []
    restarts: list = []
    clashes: list = []
    for k, (line, row) in enumerate(rows):
        if not row or not any(c.strip() for c in row):
            continue  # blank line
        try:
            rec = _csv_record(row, names, path, line)
            if unterminated and k == len(rows) - 1:
                # A CSV line cut inside its last cell still parses ("9,1.25,0" of "9,1.25,0.3"), and was read
                # unsaid (a probe); a script that joins its lines leaves a whole last line without one too, so it
                # is kept, said.
                warnings.warn(f"{path}:{line}: the last line has no newline at its end: read as it is ({_cells(row)}"
                              "), but if the run crashed while writing it, its last value may be cut (this "
                              "library's traces end every line with a newline)", RuntimeWarning, stacklevel=4)
            _finish_line(rec, records, path, line, keep_last, restarts, clashes)
        except TraceError as err:
            if unterminated and k == len(rows) - 1:
                _drop_torn(path, line, str(err).split(": ", 1)[-1], stacklevel=4)
                break
            raise
    warn_restarts(path, restarts, len(records), stacklevel=4)
    warn_clashes(path, clashes, stacklevel=4)
    return records


def _text_columns(rows: list, names: list[str], only=None) -> dict[int, str]:
    """The metric columns (``only``: among these indices) whose every filled cell is text, neither a number nor a
    missing-value mark, each with its first cell; over ``(line, cells)`` rows of the header's width (a torn row
    says its own error)."""
    # (not an eval column: "40.0%" there is a result written as text, an error naming its cell, not metadata left
    # out and then "no eval/<metric> column"; a review)
    candidates = {i for i, n in enumerate(names) if n not in RESERVED and not n.startswith(_UNNAMED)
                  and not n.startswith(("eval/", "eval_")) and (only is None or i in only)}
    first: dict[int, str] = {}
    for _, row in rows:
        if len(row) != len(names):
            continue
        for i in list(candidates):
            cell = row[i].strip()
            if not cell or cell in MISSING_CELLS:
                continue
            try:
                float(cell)
            except ValueError:
                first.setdefault(i, cell)
                continue
            candidates.discard(i)
        if not candidates:
            return {}
    return {i: first[i] for i in sorted(candidates) if i in first}


_ITEM_ID = re.compile(r"(?:^|[_/ .-])(?:id|problem|doc|item|question|prompt|sample|task|uid)s?(?:$|[_/ .-])",
                      re.IGNORECASE)
_PER_ITEM_HINT = ("; per-problem results, a row per checkpoint x problem x answer, are read by "
                  "adaptive_eval.convert.from_item_results")


def _per_item_hint(names) -> str:
    """The pointer to :func:`adaptive_eval.convert.from_item_results` when a field left out is named like a
    problem's id (per-problem results read as a trace replayed as one with nothing in it, unsaid; a probe)."""
    return _PER_ITEM_HINT if any(_ITEM_ID.search(n) or n.lower().endswith("id") for n in names) else ""


def warn_text_columns(path, names: list[str], text_only: dict[int, str], stacklevel: int) -> None:
    """Say once which columns of text alone a CSV reader left out (a date column: how to read it as the clock)."""
    dates = [names[i] for i, cell in text_only.items() if date_hint(cell).startswith(" (a date")]
    note = (f"; {', '.join(map(repr, dates))} held dates: a date column named 'time' is the run's clock "
            "(convert.from_columns(..., time=COL) names another)" if dates else "")
    note += _per_item_hint([names[i] for i in text_only])
    warnings.warn(f"{path}: left out {len(text_only)} column{'s' if len(text_only) > 1 else ''} that held text "
                  f"alone ({', '.join(repr(names[i]) for i in text_only)}): a record's metadata, not metrics{note}",
                  RuntimeWarning, stacklevel=stacklevel + 1)


def _json_number(value, key: str, path, line) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise TraceError(f"{key}: {value!r} is not a number", path, line)
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:  # an integer beyond float range is data, as a CSV cell of it is: +-inf
            return math.inf if value > 0 else -math.inf
    if isinstance(value, str) and value in _JSON_TO_NONFINITE:
        return _JSON_TO_NONFINITE[value]
    raise TraceError(f"{key}: {value!r} is not a number", path, line)


def _epoch(x: float, text, path, line) -> int:
    """An epoch column's value: a whole number, or a fraction (HF Trainer logs 0.05 for a twentieth of the
    first epoch), taken as the epoch in progress (its floor)."""
    if not math.isfinite(x):
        raise TraceError(f"epoch {text!r} is not a finite number", path, line)
    return _in_range(int(math.floor(x)), "epoch", text, path, line)


def _json_epoch(value, path, line) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TraceError(f"epoch {value!r} is not a number", path, line)
    if isinstance(value, int):  # (10**400 raised OverflowError in float(), a traceback; a probe)
        return _in_range(value, "epoch", _short_int(value), path, line)
    return _epoch(float(value), value, path, line)


def _parse_epoch(text: str, path, line) -> int:
    try:
        x = float(text.strip())
    except ValueError:
        raise TraceError(f"epoch {text!r} is not a number", path, line) from None
    return _epoch(x, text, path, line)


def _json_int(value, key: str, path, line) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            isinstance(value, float) and not value.is_integer()):
        raise TraceError(f"{key} {value!r} is not an integer", path, line)
    # (an int beyond float range, 10**400: float(value) raised OverflowError, a traceback; a probe)
    return _in_range(int(value), key, _short_int(value) if isinstance(value, int) else value, path, line)


def _short_int(value: int) -> str:
    """An integer as a message quotes it: 10**400's 401 digits shortened."""
    text = str(value)
    return text if len(text) <= 24 else f"{text[:10]}...({len(text)} digits)"


class _Stepless(TraceError):
    """A JSONL record of W&B's bookkeeping (``_runtime``, ``_timestamp``) without a step: a system row."""


def _json_record(text: str, path, line, skipped: dict | None = None, step_key: str = "step") -> TraceRecord:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as err:
        raise TraceError(f"malformed JSON ({err.msg}, column {err.colno})", path, line) from None
    if not isinstance(obj, dict):
        raise TraceError(f"expected a JSON object, got {type(obj).__name__}", path, line)
    if step_key == "step" and "step" not in obj and "_step" in obj:
        step_key = "_step"  # (W&B's run history, files/wandb-history.jsonl: said once by _read_jsonl)
    if step_key not in obj and step_key in ("step", "_step") and "step" not in obj and "_step" not in obj and any(
            k in obj for k in _WANDB_JSON):
        raise _Stepless("a W&B row without '_step'", path, line)  # (the JSONL reader skips it, as the CSV one does)
    if step_key not in obj:
        # OpenRLHF logs train rows with train/global_step and eval rows with eval/global_step.
        leaf = step_key.rsplit("/", 1)[-1]
        alike = [k for k in obj if k != step_key and k.rsplit("/", 1)[-1] == leaf] if "/" in step_key else []
        if len(alike) != 1:
            raise TraceError(f"missing {step_key!r}{_step_hint(obj, step_key)}", path, line)
        step_key = alike[0]
    step = _json_int(obj[step_key], step_key, path, line)
    if step is None:
        raise TraceError(f"{step_key!r} is null", path, line)
    epoch = _json_epoch(obj.get("epoch"), path, line)
    time = obj.get("time")
    if step_key == "_step":
        # W&B's bookkeeping beside its step: seconds since the run started, POSIX time, its own box.  Not metrics
        # (they were watched as streams: a clock is a drift to every detector); the clock is the record's time.
        wandb = {k: obj.pop(k) for k in _WANDB_JSON if k in obj}
        if time is None:
            time = next((wandb[k] for k in ("_runtime", "_timestamp") if wandb.get(k) is not None), None)
    if isinstance(time, str) and time not in _JSON_TO_NONFINITE:
        time = _parse_time(time, "time", path, line)  # a date
    else:
        time = _json_number(time, "time", path, line)
    box = "metrics" if "metrics" in obj else "data" if isinstance(obj.get("data"), dict) else None
    if box is not None:
        extra = sorted(set(obj) - {step_key, "step", "epoch", "time", box})
        # (lm-evaluation-harness's samples carry "metrics": [names]; a new-user probe replayed them as a trace)
        samples = ("; lm-evaluation-harness samples?  Per-problem results are read by "
                   "adaptive_eval.convert.from_item_results" if "doc_id" in obj or isinstance(obj[box], list) else "")
        if extra:
            raise TraceError(f"unexpected key(s) {extra} beside {box!r}{samples}", path, line)
        raw = obj[box]
        if not isinstance(raw, dict):
            raise TraceError(f"'metrics' must be an object, got {type(raw).__name__}{samples}", path, line)
    else:
        raw = {k: v for k, v in obj.items() if k not in RESERVED and k not in _HF_BOOKKEEPING and k != step_key}
        if skipped is not None:
            # A flat record's text, true/false and lists are its metadata (a run name, a phase), not metrics:
            # left out with one warning (the whole file was refused).  Under "metrics" they are still errors.
            for k in [k for k, v in raw.items() if isinstance(v, (bool, list)) or (
                    isinstance(v, str) and v not in _JSON_TO_NONFINITE)]:
                skipped.setdefault(k, line)
                del raw[k]
    metrics = {}
    # (verl's data box too: one bool or list in it refused the whole file, while a flat record's were skipped)
    _json_metrics(raw, "", metrics, path, line, skipped if box != "metrics" else None)
    epoch = _take_counters(metrics, epoch, path, line)
    return _new_record(step, metrics, epoch, time)


# W&B's own keys in a run's history (its step is "_step"): not metrics; "_runtime" (else "_timestamp") the time.
_WANDB_JSON = ("_runtime", "_timestamp", "_wandb")


def _step_hint(obj: dict, step_key: str) -> str:
    """What to do about a record without its step: the keys that look like one, and the option naming it."""
    # (not a timing of the step, verl's timing_s/step: seconds, offered as the step; a probe)
    steps = [k for k in obj if isinstance(k, str) and k != step_key and re.search(r"step$", k, re.IGNORECASE)
             and not k.startswith(BOOKKEEPING_PREFIXES)]
    if not steps:
        return f" (keys: {', '.join(map(repr, list(obj)[:6]))})"
    return (f"; the step looks to be {' or '.join(map(repr, steps[:3]))}: name it with --step-column "
            f"{steps[0]} (read_trace(..., step_column={steps[0]!r}))")


def _json_metrics(raw: dict, prefix: str, metrics: dict, path, line, skipped: dict | None = None) -> None:
    """Numbers of ``raw`` into ``metrics``; a nested object's under ``<key>/`` (``{"actor": {"kl": 0.01}}``:
    ``actor/kl``).  With ``skipped``, text, true/false and lists are left out into it (name: first line)."""
    for key, value in raw.items():
        name = f"{prefix}{key}"
        if not key.strip():  # (a replay took it to the evaluator, which raised a traceback mid-run; a probe)
            raise TraceError(f"an empty metric name {name!r}{f' under {prefix[:-1]!r}' if prefix else ''}", path,
                             line)
        if isinstance(value, dict):
            _json_metrics(value, name + "/", metrics, path, line, skipped)
            continue
        if skipped is not None and (isinstance(value, (bool, list)) or (
                isinstance(value, str) and value not in _JSON_TO_NONFINITE)):
            skipped.setdefault(name, line)
            continue
        x = _json_number(value, f"metric {name!r}", path, line)
        if x is not None:
            if name in metrics:
                raise TraceError(f"metric {name!r} is given twice (nested and flat)", path, line)
            metrics[name] = x


def _json_document(path, text: str) -> list | Trace | None:
    """The records of a file that is one JSON document, not one object a line: an array of record objects,
    or an object holding them under ``log_history`` (Hugging Face Trainer's ``trainer_state.json``); None
    for JSONL; the whole trace of a Turing Change Point Dataset file (:func:`adaptive_eval.convert.convert_tcpd`).
    Another single document is a :class:`TraceError` saying what was expected."""
    lead = text[:4096]  # (the leading blanks, without copying a big file)
    start = len(lead) - len(lead.lstrip())
    if not text.startswith(("[", "{"), start):
        return None
    end = text.find("\n", start)
    first = text[start:end if end >= 0 else len(text)]
    one_line = False
    if text.startswith("{", start):
        try:
            obj = json.loads(first)
        except json.JSONDecodeError:
            pass
        else:
            # One object a line (JSONL), unless it is the whole file and no record: a trainer_state.json
            # written on one line (its log_history), or another document (said below).
            alone = end < 0 or not text[end:].strip()
            if not (isinstance(obj, dict) and "step" not in obj and ("log_history" in obj or alone)):
                return None
            one_line = alone
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        return None  # JSONL with a malformed line: its own error names the line
    if isinstance(doc, dict) and "series" in doc and "n_obs" in doc:  # a Turing Change Point Dataset file
        from adaptive_eval.convert import _tcpd_trace

        return _tcpd_trace(path, doc)
    rows = doc.get("log_history") if isinstance(doc, dict) else doc
    if not isinstance(rows, list):
        keys = ", ".join(map(repr, list(doc)[:6])) if isinstance(doc, dict) else type(doc).__name__
        if one_line and str(path).endswith(".jsonl"):  # a one-record JSONL trace without its step
            raise TraceError(f"missing 'step'{_step_hint(doc, 'step')}", path, 1)
        raise TraceError(f"one JSON document, not one object a line (JSONL), and no 'log_history' list in it "
                         f"(keys: {keys}); write one record a line, or a list of records", path)
    return rows


def _say_wandb_step(path, first, step_key: str) -> None:
    """Say that a record without ``step`` but with W&B's ``_step`` is read by it (``first``: the first record)."""
    if step_key == "step" and isinstance(first, dict) and "step" not in first and "_step" in first:
        clock = next((f", {k!r} as the time" for k in ("_runtime", "_timestamp") if k in first and "time" not in first),
                     "")
        warnings.warn(f"{path}: no 'step' key: read '_step' (W&B's) as the step{clock}", RuntimeWarning, stacklevel=4)


def _read_jsonl(path, text: str, keep_last: bool = False, step_key: str = "step") -> Trace:
    rows = _json_document(path, text)
    if isinstance(rows, Trace):
        return rows
    if rows:
        _say_wandb_step(path, rows[0], step_key)
    elif rows is None and step_key == "step" and '"_step"' in text[:100_000]:
        first = next((line for line in text.split("\n", 50) if line.strip()), "")
        try:
            _say_wandb_step(path, json.loads(first), step_key)
        except ValueError:
            pass  # (a malformed first line: the reading below says where)
    if rows is not None:
        records: list[TraceRecord] = []
        skipped: dict = {}
        restarts: list = []
        clashes: list = []
        for i, row in enumerate(rows):
            where = f"record {i}"
            try:
                rec = _json_record(json.dumps(row), path, None, skipped, step_key)
                _finish_line(rec, records, path, None, keep_last, restarts, clashes)
            except TraceError as err:
                raise TraceError(f"{where}: {str(err).split(': ', 1)[-1]}", path) from None
        if not records:
            raise TraceError("no records", path)
        _warn_skipped(path, skipped)
        warn_restarts(path, restarts, len(records), stacklevel=4)
        warn_clashes(path, clashes, stacklevel=4)
        return Trace(_dates_relative(records, path), str(path))
    lines = text.split("\n")
    # text.split leaves "" after a final newline; a non-empty last piece is an unterminated line.
    unterminated = lines[-1] != ""
    last_index = len(lines) - 1
    records: list[TraceRecord] = []
    skipped: dict = {}
    restarts: list = []
    clashes: list = []
    stepless: list[int] = []
    for i, raw in enumerate(lines):
        if not raw.strip():
            continue
        try:
            rec = _json_record(raw, path, i + 1, skipped, step_key)
            _finish_line(rec, records, path, i + 1, keep_last, restarts, clashes)
        except _Stepless:
            stepless.append(i + 1)  # (exit 2, "missing 'step'", where the same rows of a CSV export were skipped)
        except TraceError as err:
            if unterminated and i == last_index:
                _drop_torn(path, i + 1, str(err).split(": ", 1)[-1], stacklevel=3)
                break
            raise
    if not records:
        raise TraceError("no records" + (" with a '_step' (W&B's system rows only?)" if stepless else ""), path)
    if stepless:
        warnings.warn(f"{path}: {len(stepless)} record{'s' if len(stepless) > 1 else ''} without '_step' skipped "
                      f"(W&B's system rows; the first on line {stepless[0]})", RuntimeWarning, stacklevel=3)
    _warn_skipped(path, skipped)
    warn_restarts(path, restarts, len(records), stacklevel=4)
    warn_clashes(path, clashes, stacklevel=4)
    return Trace(_dates_relative(records, path), str(path))


def _warn_skipped(path, skipped: dict) -> None:
    if skipped:
        first = min((line for line in skipped.values() if line is not None), default=None)
        warnings.warn(f"{path}: left out {len(skipped)} field{'s' if len(skipped) > 1 else ''} that held text, "
                      f"true/false or lists in flat records ({', '.join(map(repr, sorted(skipped)))}"
                      f"{f'; first on line {first}' if first is not None else ''}): a record's metadata, not "
                      f"metrics{_per_item_hint(skipped)}", RuntimeWarning, stacklevel=4)


def _scalar_events(run: pathlib.Path):
    """``(tag, step, wall_time, value)`` of every scalar event of one TensorBoard run: the event files directly in
    ``run`` (a folder; its sub-folders are other runs), or ``run`` itself when it is an event file."""
    from tensorboard.backend.event_processing import event_accumulator as ea
    from tensorboard.util import tensor_util

    # size 0 = keep every event (the default keeps a reservoir sample of 10,000 scalars per tag).
    guidance = {ea.SCALARS: 0, ea.TENSORS: 0, ea.IMAGES: 1, ea.AUDIO: 1, ea.HISTOGRAMS: 1,
                ea.COMPRESSED_HISTOGRAMS: 1}
    acc = ea.EventAccumulator(str(run), size_guidance=guidance)
    acc.Reload()
    tags = acc.Tags()
    for tag in tags.get(ea.SCALARS, []):
        for ev in acc.Scalars(tag):
            yield tag, int(ev.step), ev.wall_time, float(ev.value)
    for tag in tags.get(ea.TENSORS, []):
        # TF2-style scalars are stored as tensors with the "scalars" plugin.
        if acc.SummaryMetadata(tag).plugin_data.plugin_name != "scalars":
            continue
        for ev in acc.Tensors(tag):
            arr = tensor_util.make_ndarray(ev.tensor_proto)
            if arr.size == 1:
                yield tag, int(ev.step), ev.wall_time, float(arr.reshape(()).item())


def _first_tag(run: pathlib.Path) -> str | None:
    """The tag of the first summary value in the event files directly in ``run`` (read lazily), or None."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    for file in sorted(p for p in run.iterdir() if p.is_file() and "tfevents" in p.name):
        try:
            for event in EventFileLoader(str(file)).Load():
                for value in event.summary.value:
                    return value.tag
        except Exception:  # a truncated or foreign file: let the full reader decide
            return None
    return None


def _event_files(run: pathlib.Path) -> list[pathlib.Path]:
    """The event files directly in ``run`` (``run`` itself when it is one), in name order."""
    if not run.is_dir():
        return [run]
    return sorted(p for p in run.iterdir() if p.is_file() and "tfevents" in p.name)


def _add_scalars_series(run: pathlib.Path, parent: pathlib.Path) -> list | None:
    """The scalar events of ``run``, a folder under ``parent``, one list per event file, with their tags renamed
    ``<main_tag>/<key>`` when ``run`` is a series that ``SummaryWriter.add_scalars(main_tag, {key: ...})`` wrote
    beside the parent's own events; else None (a separate run).

    torch (and tensorboardX) write each key into the run ``<parent>/<main_tag with '/' as '_'>_<key>`` under the
    tag ``main_tag``: the folder's path below the parent must start with the tag so spelled and ``_``, and the
    rest is the key (a key holding ``/`` is a deeper folder)."""
    rel = run.relative_to(parent).as_posix()
    first = _first_tag(run)
    if first is not None and not rel.startswith(first.replace("/", "_") + "_"):
        return None  # a separate run, told by its first tag without loading all of it (found in review: 10x)
    chunks = []
    for file in _event_files(run):
        events = []
        for tag, step, wall_time, value in _scalar_events(file):
            prefix = tag.replace("/", "_") + "_"
            if not (rel.startswith(prefix) and len(rel) > len(prefix)):
                return None
            events.append((f"{tag}/{rel[len(prefix):]}", step, wall_time, value))
        if events:
            chunks.append(events)
    return chunks or None


def _listed(paths: Sequence[str], most: int = 5) -> str:
    return ", ".join(paths[:most]) + (f" and {len(paths) - most} more" if len(paths) > most else "")


_DAMAGE_CHECKED_BYTES = 16 * 2**20  # event files up to this size are checked (TensorBoard's CRCs, in pure Python)


def _say_damaged(file: pathlib.Path, last: int | None = None) -> None:
    """Warn when TensorBoard's reader stopped at a damaged record of ``file`` with whole records after it: it ends a
    file at the first bad record without a word (a debug log), and a run whose file was damaged a third of the way in
    read as a shorter run, its collapse gone (a probe).  A torn last record (a run still writing, or killed) is not
    said: its length is sound and it runs past the end.  Files above 16 MiB are not checked (the check reads the file
    again, its CRCs in pure Python: +60% on a 4 MB file; a review).  ``last``: the step the file's events end at,
    said when given."""
    import struct

    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    try:
        if file.stat().st_size > _DAMAGE_CHECKED_BYTES:
            return
        data = file.read_bytes()
        read = sum(1 for _ in RawEventFileLoader(str(file)).Load())
    except Exception:  # noqa: BLE001 - not ours to judge: the reader above decided what it could read
        return
    pos = 0
    for _ in range(read):  # a record: its length (8 bytes), the length's CRC (4), the data, the data's CRC (4)
        pos += 12 + struct.unpack_from("<Q", data, pos)[0] + 4
    if pos + 12 > len(data):
        return  # read to the end, or a torn length
    length = struct.unpack_from("<Q", data, pos)[0]
    sound = struct.unpack_from("<I", data, pos + 8)[0] == masked_crc32c(data[pos:pos + 8])
    if sound and pos + 12 + length + 4 > len(data):
        return  # a torn last record: it runs past the end
    warnings.warn(f"{file}: damaged after record {read}: TensorBoard's reader stops there, so the "
                  f"{len(data) - pos:,} bytes after it are left out"
                  + (f" (this file's steps end at {last})" if last is not None else ""),
                  RuntimeWarning, stacklevel=5)


def _read_tensorboard(path: pathlib.Path, keep_last: bool = False) -> Trace:
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such TensorBoard directory or event file")
    nested: list[pathlib.Path] = []
    if path.is_dir():
        nested = sorted({p.parent for p in path.rglob("*tfevents*") if p.is_file()} - {path})
        if not any("tfevents" in p.name for p in path.iterdir() if p.is_file()):
            hint = f"; event files lie in {_listed([str(p) for p in nested])}: pass one of those" if nested else ""
            raise TraceError(f"no trace here: a folder is read as a TensorBoard run and holds no event files{hint} "
                             "(a trace file is .csv, .jsonl or .json)", path)
    # One list of (tag, step, wall time, value) per event file: a run resumed into the same folder writes a new
    # file, and which file (which run) an event came from decides what a step that goes back drops.
    chunks: list[list] = []
    own_tags = set()
    for file in _event_files(path):
        events = [e for e in _scalar_events(file) if e[0] not in _HF_TB_BOOKKEEPING]
        _say_damaged(file, max((e[1] for e in events), default=None))
        own_tags.update(e[0] for e in events)
        if events:
            chunks.append(events)
    # SummaryWriter.add_scalars writes each series into a run of its own below the writer's folder: those are
    # this run's metrics (they were left out silently); any other run below is a separate run, said so.
    separate = []
    clashes: dict[tuple[str, str], None] = {}
    for run in nested:
        series = _add_scalars_series(run, path)
        if series is None:
            separate.append(run.relative_to(path).as_posix())
            continue
        for events in series:
            kept = []
            for event in events:
                if event[0] in own_tags:
                    # (an error here refused a folder that read before the series were read: a recorded run's
                    # tags cannot be renamed; found in review)
                    clashes[(run.relative_to(path).as_posix(), event[0])] = None
                elif event[0] not in _HF_TB_BOOKKEEPING:
                    kept.append(event)
            if kept:
                chunks.append(kept)
    for rel, name in clashes:
        warnings.warn(f"{path}: left out the add_scalars series in {rel!r}: its name {name!r} is a scalar of the run "
                      "too (the run's own is read)", RuntimeWarning, stacklevel=3)
    if separate:
        warnings.warn(f"{path}: left out {len(separate)} run{'s' if len(separate) > 1 else ''} in sub-folders "
                      f"that {'are' if len(separate) > 1 else 'is'} not add_scalars series of this run "
                      f"({_listed(separate)}): separate runs; pass each folder on its own", RuntimeWarning,
                      stacklevel=3)
    by_step: dict[int, dict[str, float]] = {}
    wall: dict[int, float] = {}
    twice: list = []  # (step, tag, earlier, later): a tag logged twice at one step with another value
    for tag, step, wall_time, value in _purge_orphaned(chunks, path, keep_last):
        row = by_step.setdefault(step, {})
        old = row.get(tag)
        if _overwrites(old, value):
            twice.append((step, tag, old, value))
        row[tag] = value
        wall[step] = min(wall.get(step, wall_time), wall_time)
    if not by_step:
        raise TraceError("no records (no scalar events)", path)
    if any(tag.startswith(_OWN_TAGS) for row in by_step.values() for tag in row):
        return _own_log(by_step, path)
    if _is_hf_results(by_step):  # HF's folder of a run whose callback wrote no event file of its own
        by_step = _hf_results_at_their_steps(by_step, wall)
    # (gradient-accumulation micro-steps logged at one global step read as the last alone, unsaid, where the same
    # rows in a CSV are said; a probe)
    warn_clashes(path, twice, stacklevel=3)
    t0 = min(wall.values())
    records = []
    renamed: set[str] = set()
    for step in sorted(by_step):
        row = by_step[step]
        epoch = None
        for tag in _EPOCH_TAGS:  # (a Hugging Face run's TensorBoard: its epoch is a scalar, not a stream)
            if tag in row:
                value = row.pop(tag)
                epoch = _epoch(value, value, path, None) if math.isfinite(value) else None
        for tag in _STEP_TAGS.intersection(row):
            del row[tag]
        for tag in ("step", "time"):
            # a scalar tagged as a trace's own column: a metric named with "_", as record_to names it (read as the
            # stream "time", the trace could not be written back: "reserved column names"; a probe)
            if tag in row:
                row[f"{tag}_"] = row.pop(tag)
                renamed.add(tag)
        records.append(TraceRecord(step, row, epoch, wall[step] - t0))
    if renamed:
        warnings.warn(f"{path}: scalar{'s' if len(renamed) > 1 else ''} "
                      f"{' and '.join(repr(t) for t in sorted(renamed))} read as "
                      f"{' and '.join(repr(t + '_') for t in sorted(renamed))}: 'step' and 'time' are a trace's own "
                      "columns (its steps and the events' wall times)", RuntimeWarning, stacklevel=3)
    return Trace(records, str(path))


def _purge_orphaned(chunks: list[list], path, keep_last: bool) -> list:
    """The events of a TensorBoard run's event files (``chunks``, one list per file) without those a resumed run
    orphaned.  A run resumed from a checkpoint into the same folder logs steps again that the abandoned run had
    logged past: they were merged, the abandoned run's values in between the resumed run's (replayed evals
    jumped 0.82 -> 0.12 -> 0.92; found in review).

    As TensorBoard's ``EventAccumulator(purge_orphaned_data=True)`` does for an event file without SessionLog
    (its out-of-order check, ``_Purge(event, by_tags=True)``): when a tag's step goes back, that tag's earlier
    events at that step and after are dropped.  (TensorBoard compares with the last step of any tag; here each
    tag with its own last step, so a tag logged less often is not purged by another's.)  With ``keep_last``
    (the CSV/JSONL rule for steps that go back) the later run is kept whole from its first step on: an event
    file whose first step lies below a step logged before that file began also drops every earlier event, of
    any tag, at that step and after.  Files are taken in the order they began (their first wall time)."""
    order = sorted(range(len(chunks)), key=lambda i: (min(e[2] for e in chunks[i]), i))
    restarts = []
    dropped: list = []  # (None, step, previous step, steps dropped) per restart kept_last: warn_restarts says them
    kept: list = []
    for i in order:
        chunk = chunks[i]
        if keep_last and kept:
            began = min(e[2] for e in chunk)
            start = min(e[1] for e in chunk)
            reached = max((e[1] for e in kept if e[2] < began), default=None)
            if reached is not None and start < reached:
                gone = {e[1] for e in kept if e[1] >= start and e[2] < began}
                kept = [e for e in kept if not (e[1] >= start and e[2] < began)]
                restarts.append((start, reached))
                dropped.append((None, start, reached, len(gone)))
        kept.extend(chunk)
    per_tag: dict[str, list] = {}
    for event in kept:
        series = per_tag.setdefault(event[0], [])
        if series and event[1] < series[-1][1]:
            restarts.append((event[1], series[-1][1]))
            while series and series[-1][1] >= event[1]:
                series.pop()
        series.append(event)
    if restarts and not keep_last:
        start, reached = restarts[0]
        warnings.warn(f"{path}: steps go back (step {start} logged after step {reached}: a run resumed into the same "
                      "folder); as TensorBoard purges orphaned data, a tag's earlier values from the step it goes "
                      "back to on are dropped.  Values of tags the later run did not log again stay: "
                      "--keep-last-run (read_trace(..., on_restart='keep_last')) keeps the later run alone from its "
                      "first step on", RuntimeWarning, stacklevel=4)
    out = [event for series in per_tag.values() for event in series]
    # (counted in steps, a TensorBoard run's records: the CSV reader said its drops, this one dropped unsaid; a probe)
    warn_restarts(path, dropped, len({e[1] for e in out}), stacklevel=4)
    return out


# verl logs its validation results (val-core/<data source>/<var>/<metric>, val-aux/...) beside the step's own
# metrics: eval results, never cheap streams (ground truth where --eval names one, or where val-core/ has one).
VALIDATION_PREFIXES = ("val-core/", "val-aux/")


def eval_like(trace: Trace) -> list[str]:
    """The streams of ``trace`` named like eval results (``eval_acc``, ``val/loss``, ``test-acc``, verl's
    ``val-core/...``): named to a user whose trace has no ground truth, as the columns ``--eval`` may take."""
    return [n for n in trace.stream_names() if re.match(r"(eval|val|test)[-_/]", n, re.IGNORECASE)]


def _nan_gaps(trace: Trace) -> Trace:
    """``trace`` with an eval column's NaN cells left out where they outnumber its values in a column written on
    (nearly) every row: an export's way of writing "no evaluation here" (pandas' ``na_rep="NaN"``, ``json.dumps`` of
    a W&B history), with a warning.  Read as
    values, the last row's NaN overrode the carried-forward truth and every simulated evaluation measured nothing,
    unsaid (a probe).  A NaN among as many values or more is a result (an evaluation that returned NaN) and stays."""
    counts: dict[str, list[int]] = {}
    for rec in trace.records:
        for name, value in rec.metrics.items():
            if name.startswith("eval/"):
                c = counts.setdefault(name, [0, 0])
                c[0 if value != value else 1] += 1
    # (dense only: a cell in nine rows of ten or more, as an export writes every row; a record_to trace's eval cells
    # are its evaluations', and NaN there is what they returned: a diverged run read as a healthy one; a review)
    rows = len(trace.records)
    gaps = {name for name, (nan, finite) in counts.items() if finite and nan > finite and nan + finite >= 0.9 * rows}
    if not gaps:
        return trace
    records = [rec if gaps.isdisjoint(rec.metrics) else dataclasses.replace(
        rec, metrics={k: v for k, v in rec.metrics.items() if not (k in gaps and v != v)}) for rec in trace.records]
    some = ", ".join(sorted(gaps)[:4]) + (" ..." if len(gaps) > 4 else "")
    share = "most" if len(gaps) > 1 else format(counts[min(gaps)][0], ",")
    warnings.warn(f"{trace.source or 'trace'}: {some}: NaN in {share} of the rows, values in the others: "
                  "read as rows without an evaluation (an export's missing values), not as NaN results",
                  RuntimeWarning, stacklevel=3)
    return dataclasses.replace(trace, records=records)


def promote_validation(trace: Trace) -> Trace:
    """A trace without ``eval/`` columns whose one ``val-core/`` column (verl's validation result of its one
    data source) is its eval ground truth, as ``--eval`` would make it: ``eval/val-core/...``, with a warning.
    With several (data sources, or verl's ``mean@4`` beside ``maj@4/mean``) the trace is returned as it is:
    which one is the user's to name.  (A new user's verl run replayed, checked and tuned on no ground truth at
    all, every evaluation measuring nothing, while its one validation column sat beside it.)"""
    names = trace.metric_names()
    core = [n for n in names if n.startswith("val-core/")]
    if len(core) != 1 or any(n.startswith("eval/") for n in names):
        return trace
    warnings.warn(f"{trace.source + ': ' if trace.source else ''}read {core[0]!r}, the trace's one val-core/ "
                  "column, as the eval ground truth (--eval COL names another)", RuntimeWarning, stacklevel=3)
    col = core[0]
    records = [TraceRecord(r.step, {(f"eval/{k}" if k == col else k): v for k, v in r.metrics.items()}, r.epoch,
                           r.time) if col in r.metrics else r for r in trace.records]
    return Trace(records, trace.source)

# verl's timings and throughput (timing_s/step, timing_per_token_ms/gen, its perf/throughput, perf/max_memory_...;
# not a user's own perf/<metric>):
# the machine's, not the model's; a slower node raised a cusum alarm and a 500-item evaluation (a new user's
# replay).  Not watched unless named (--stream COL), as HF's *_runtime and *_per_second are not.
BOOKKEEPING_PREFIXES = ("timing_s/", "timing_per_token_ms/", "perf/throughput", "perf/mfu/", "perf/max_memory_",
                        "perf/cpu_memory_", "perf/total_num_tokens", "perf/time_per_step")

_EPOCH_TAGS = ("epoch", "train/epoch", "training/epoch")
# A step counter logged as a metric beside the record's step (verl's training/global_step): bookkeeping.
_STEP_TAGS = frozenset({"training/global_step"})


# The tags an AdaptiveEvaluator's own TensorBoard log has besides its streams and eval means (see tensorboard.py).
_OWN_TAGS = ("streams/", "controller/")
_OWN_EVAL_SUFFIXES = ("/ci_low", "/ci_high", "/n", "/samples_per_item", "/nan")


_HF_WEIGHTS_STEP = "adaptive_step"  # the HF adapter's eval[_<name>]_adaptive_step, as HF's TensorBoard names it


def _is_hf_results(by_step: dict) -> bool:
    return any(t.startswith("eval/") and t.endswith(_HF_WEIGHTS_STEP) for row in by_step.values() for t in row)


def hf_eval_tags(step: int, row: Mapping[str, float]):
    """The ``eval/`` tags of one step's row of HF's TensorBoard folder that holds the HF adapter's results, each as
    ``(tag, value, the weights' step, its callback's prefix, kind)``: ``kind`` ``"metric"``, or ``"ci_low"``,
    ``"ci_high"``, ``"n"`` (then ``tag`` is the metric's), or ``"hf"`` (HF's own evaluation: prefix ``""``, the
    weights after ``step`` 1-based steps, ``step - 1``).  The callback's prefix is the longest ``eval/[<name>_]`` whose
    ``adaptive_step`` the row holds (``eval/hard_`` before ``eval/``: a ``name=`` callback's ``hard_adaptive_items``
    was read as the unnamed one's metric; a probe); its bookkeeping (``adaptive_*``, ``lookback_*``) is left out."""
    prefixes = {t[:-len(_HF_WEIGHTS_STEP)]: row[t] for t in row
                if t.startswith("eval/") and t.endswith(_HF_WEIGHTS_STEP)}
    for tag, value in row.items():
        if not tag.startswith("eval/"):
            continue
        prefix = max((p for p in prefixes if tag.startswith(p)), key=len, default=None)
        if prefix is None:
            yield tag, value, step - 1, "", "hf"
            continue
        name, at = tag[len(prefix):], prefixes[prefix]
        if name.startswith(("adaptive_", "lookback_")) or not math.isfinite(at):
            continue
        kind = next((k for k in ("ci_low", "ci_high", "n")
                     if name.endswith(f"_{k}") and prefix + name[:-len(k) - 1] in row), None)
        yield (tag, value, int(at), prefix, "metric") if kind is None else (
            prefix + name[:-len(kind) - 1], value, int(at), prefix, kind)


def _hf_results_at_their_steps(by_step: dict, wall: dict | None = None) -> dict:
    """The HF adapter's results in HF's own TensorBoard folder (``report_to=["tensorboard"]``, where the evaluator
    writes its ``streams/``) at the steps of the weights they measured: HF logs them at its 1-based step, one after
    the streams' 0-based one (``eval/[<name>_]adaptive_step`` holds the weights' step; ``name=`` callbacks'
    ``eval/<name>_<metric>``), beside their bookkeeping (``<metric>_ci_low``, ``_ci_high``, ``_n``,
    ``adaptive_items``, ``lookback_*``).  Replayed as they were, each result's truth came a step late (an evaluation
    at step 9 measured nothing, and a final one was added at step 50 of a run of steps 0-49) and the bookkeeping
    became eval metrics (an ``accuracy_ci_low`` above ``accuracy``; a probe).  HF's own evaluations beside them
    (``eval_strategy="steps"``) go to the 0-based step of the weights they measured too, ``step - 1``; at a step both
    measured, HF's, on its whole eval set, is the truth kept.

    ``wall`` (HF's folder without the evaluator's own event file, ``tensorboard=False``, read as another tool's log):
    HF's training scalars go to the 0-based step too, as the adapter observed them, and ``wall`` (step -> wall
    time) is moved with the rows, in place (its results stayed at HF's steps and their bookkeeping was read as eval
    metrics: the path above ran only beside the evaluator's own file; a probe)."""
    out: dict[int, dict[str, float]] = {}
    hf_own: list[tuple[int, str, float]] = []
    moved: dict[int, float] = {}

    def put(at: int, tag: str, value: float, step: int) -> None:
        out.setdefault(at, {})[tag] = value
        if wall is not None and step in wall:
            moved[at] = min(moved.get(at, wall[step]), wall[step])

    for step, row in by_step.items():
        for tag, value in row.items():
            if not tag.startswith("eval/"):
                put(step - 1 if wall is not None and step >= 1 else step, tag, value, step)
        for tag, value, at, _, kind in hf_eval_tags(step, row):
            if kind == "hf":
                hf_own.append((at, tag, value, step))
            elif kind == "metric":
                put(at, tag, value, step)
    for at, tag, value, step in hf_own:
        put(at, tag, value, step)
    if wall is not None:
        wall.clear()
        wall.update(moved)
    return out


def _own_log(by_step: dict, path) -> Trace:
    """An adaptive_eval run's own TensorBoard log as the trace it was recorded from: ``streams/<name>`` are the
    streams ``<name>`` again, ``eval/<metric>`` the measured means (the eval ground truth replay can have),
    ``controller/async_latency_steps`` the ``async/latency_steps`` of an asynchronous run's trace, and the other
    controller and alarm tags and the intervals are dropped (replay makes its own).  No time
    column: the event wall times are the logging machine's, while replay charges simulated eval seconds, so
    replay runs on its simulated clock (``replay.step_seconds`` per record), as it does for the run's trace."""
    if _is_hf_results(by_step):
        by_step = _hf_results_at_their_steps(by_step)
    records = []
    for step in sorted(by_step):
        metrics = {}
        for tag, value in by_step[step].items():
            if tag.startswith("streams/"):
                metrics[tag[len("streams/"):]] = value
            elif tag.startswith("eval/") and not tag.endswith(_OWN_EVAL_SUFFIXES) and "/paired_diff" not in tag:
                metrics[tag] = value
            elif tag == "controller/async_latency_steps":
                # an asynchronous run's latency where its result came back, as record_to writes it: replay's
                # latency model (the run's tb/ replayed as asynchronous was refused, "needs a latency model"; a
                # probe).  Its eval means are on the weights' steps already.
                metrics[_ASYNC_LATENCY] = value
        if metrics:
            records.append(TraceRecord(step, metrics, None, None))
    if not records:
        raise TraceError("no records (no streams/ or eval/ scalars)", path)
    return Trace(records, str(path))

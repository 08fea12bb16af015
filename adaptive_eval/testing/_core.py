"""The code of :mod:`adaptive_eval.testing` (see its docstring); imported on first use of a name there."""

from __future__ import annotations

import dataclasses
import glob
import math
import numbers
import os
import pathlib
import re
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from adaptive_eval import scoring
from adaptive_eval.config import _bare, as_config, load_config
from adaptive_eval.replay import ReplayResult, every_step, ground_truth, replay, replay_units
from adaptive_eval.trace import Trace, eval_like, read_trace
from adaptive_eval.types import log_once

__all__ = [
    "CheckRow", "Event", "ExpectationError", "Expectations", "QuietWindow", "ReplayRun", "assert_confirmed",
    "assert_cost", "assert_quiet", "assert_same_decisions", "check", "events_path", "format_rows",
    "load_expectations", "replay_trace", "trace_files",
]

SIDECAR_SUFFIXES = (".events.yaml", ".events.yml", ".events.json")
TRACE_SUFFIXES = (".csv", ".jsonl", ".json")
# Kinds of change after which the eval metric is worse: a shipped trace's collapse is confirmed downwards
# for accuracy, upwards for a loss.
_WORSE_KINDS = ("collapse", "degradation")


class ExpectationError(ValueError):
    """An expectation that cannot be checked (no eval ground truth, an event outside the trace) or that
    contradicts itself.  Not an :class:`AssertionError`: the test is wrong, not the preset."""


@dataclasses.dataclass(frozen=True)
class Event:
    """A change in a recorded run that a preset must confirm from its evaluations."""

    step: int
    kind: str = "change"
    direction: str | None = None  # of the eval metric: "up", "down", None (either)
    metric: str | None = None  # the eval metric ("eval/<m>" is read as "<m>"); None: the run's metric
    within: int | None = None  # confirmed at most this many steps after the event; None: before the end

    def describe(self) -> str:
        detail = " ".join(x for x in (self.metric, self.direction) if x)
        return f"{self.kind} at step {self.step}" + (f" ({detail})" if detail else "")


@dataclasses.dataclass(frozen=True)
class QuietWindow:
    """Steps ``start`` to ``stop`` (both included) with at most ``max_alarms`` alarms and ``max_evals``
    evaluations (None: no limit)."""

    start: int
    stop: int
    max_evals: int | None = None
    max_alarms: int | None = 0
    kind: str = "quiet"

    def describe(self) -> str:
        return f"{self.kind} {self.start}..{self.stop}"


@dataclasses.dataclass(frozen=True)
class Expectations:
    """What an events file says: events to confirm, quiet windows and a cost limit."""

    events: tuple[Event, ...] = ()
    quiet: tuple[QuietWindow, ...] = ()
    max_samples_per_1k: float | None = None
    source: str | None = None


# ------------------------------------------------------------------------------------------- events files


_EVENT_KEYS = {f.name for f in dataclasses.fields(Event)}
_QUIET_KEYS = {f.name for f in dataclasses.fields(QuietWindow)}
_TOP_KEYS = {"events", "quiet", "max_samples_per_1k"}


def events_path(trace_path: str | os.PathLike) -> pathlib.Path | None:
    """The sidecar events file beside ``trace_path``, if any: ``<trace>.events.yaml`` (``.yml``, ``.json``), the
    trace's file name with its suffix (``run1.csv.events.yaml``) or without it (``run1.events.yaml``), the first
    found in that order."""
    p = pathlib.Path(trace_path)
    names = [p.name] + ([p.stem] if p.suffix else [])
    for name in names:
        for suffix in SIDECAR_SUFFIXES:
            candidate = p.with_name(name + suffix)
            if candidate.is_file():
                return candidate
    return None


def misnamed_events(trace) -> list[str]:
    """The files beside a trace with no events file that look like one misnamed (``run.csv.event.yaml``,
    ``run_events.yaml``): named after it, with "event" in the name, and not another trace's own events file
    (``run30.csv.events.yaml`` beside ``run30.csv`` is not ``run3.csv``'s)."""
    p = pathlib.Path(trace)
    out = []
    for f in p.parent.glob(f"{glob.escape(p.stem)}*"):
        rest = f.name[len(p.stem):]
        if f == p or "event" not in f.name.lower() or rest[:1] not in (".", "_", "-", " "):
            continue
        owner = re.sub(r"\.events\.(ya?ml|json)$", "", f.name)
        if owner != f.name and owner not in (p.name, p.stem) and any(
                g.name == owner or g.stem == owner for g in p.parent.iterdir() if g != f):
            continue  # another trace's own events file (run30.csv.events.yaml, run3_b.events.yaml; a review)
        out.append(f.name)
    return sorted(out)


def _int(value: Any, where: str) -> int:
    # numbers.Integral: a numpy integer too (a step taken from a pandas column); observe() takes them
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ExpectationError(f"{where}: expected an integer, got {value!r}")
    return int(value)


def _opt_int(value: Any, where: str) -> int | None:
    return None if value is None else _int(value, where)


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ExpectationError(f"{where}: expected a finite number, got {value!r}")
    return float(value)


def _check_direction(direction: Any, where: str) -> str | None:
    if direction not in (None, "up", "down"):
        raise ExpectationError(f"{where}: direction must be up, down or omitted (either), got {direction!r}")
    return direction


def _event_from(item: Any, where: str, at=None) -> Event:
    if isinstance(item, Event):
        return item
    if isinstance(item, bool):
        raise ExpectationError(f"{where}: expected a step or a mapping with 'step', got {item!r}")
    if isinstance(item, numbers.Integral):
        return Event(int(item))
    if not isinstance(item, Mapping):
        # An adaptive_eval.synthetic.Event (step, kind, stream) or anything alike.
        if hasattr(item, "step"):
            return Event(_int(item.step, where), str(getattr(item, "kind", "change")),
                         _check_direction(getattr(item, "direction", None), where))
        raise ExpectationError(f"{where}: expected a step or a mapping with 'step', got {item!r}")
    unknown = sorted(set(map(str, item)) - _EVENT_KEYS)
    if unknown:  # (``at``: the file's "FILE:LINE: KEY" of a key; the entry's first line was said; a probe)
        where = at(unknown[0]) if at is not None else where
        raise ExpectationError(f"{where}: unknown key {unknown[0]!r} (an event has {', '.join(sorted(_EVENT_KEYS))})")
    if "step" not in item:
        raise ExpectationError(f"{where}: an event needs a 'step'")
    within = _opt_int(item.get("within"), f"{where}.within")
    if within is not None and within < 0:  # (said when the file is read, with its line: a new-user probe)
        raise ExpectationError(f"{where}.within: {within} is negative (a change cannot be confirmed before it "
                               "happens)")
    return Event(step=_int(item["step"], f"{where}.step"), kind=str(item.get("kind", "change")),
                 direction=_check_direction(item.get("direction"), f"{where}.direction"),
                 metric=None if item.get("metric") is None else str(item["metric"]).removeprefix("eval/"),
                 within=within)


def _quiet_from(item: Any, where: str, at=None) -> QuietWindow:
    if isinstance(item, QuietWindow):
        return item
    if not isinstance(item, Mapping):
        raise ExpectationError(f"{where}: expected a mapping with 'start' and 'stop', got {item!r}")
    unknown = sorted(set(map(str, item)) - _QUIET_KEYS)
    if unknown:
        where = at(unknown[0]) if at is not None else where
        raise ExpectationError(f"{where}: unknown key {unknown[0]!r} (a quiet window has "
                               f"{', '.join(sorted(_QUIET_KEYS))})")
    for key in ("start", "stop"):
        if key not in item:
            raise ExpectationError(f"{where}: a quiet window needs '{key}'")
    return QuietWindow(start=_int(item["start"], f"{where}.start"), stop=_int(item["stop"], f"{where}.stop"),
                       max_evals=_opt_int(item.get("max_evals"), f"{where}.max_evals"),
                       max_alarms=_opt_int(item.get("max_alarms", 0), f"{where}.max_alarms"),
                       kind=str(item.get("kind", "quiet")))


def load_expectations(path: str | os.PathLike) -> Expectations:
    """Read an events file (the form in the module docstring); errors name the file, line and key."""
    import yaml

    from adaptive_eval.config import _key_lines

    p = pathlib.Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: {'a folder, not an events file' if p.is_dir() else 'no such events file'}")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        line = p.read_bytes()[:exc.start].count(b"\n") + 1
        raise ExpectationError(f"{p}:{line}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x}); save it as "
                               "UTF-8") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise ExpectationError(f"{p}{line}: does not parse: {getattr(exc, 'problem', None) or exc}") from None
    duplicates: list[str] = []
    lines = _key_lines(text, duplicates)
    if duplicates:  # (YAML keeps the last silently: an event or a whole events list was dropped)
        raise ExpectationError(f"{p}:{duplicates[0]}")

    def where(key: str) -> str:
        return f"{p}:{lines[key]}: {key}" if key in lines else f"{p}: {key}"

    if data is None:
        data = {}
    if isinstance(data, list):
        data = {"events": data}
    if not isinstance(data, dict):
        raise ExpectationError(f"{p}:1: expected a mapping (events, quiet, max_samples_per_1k) or a list of "
                               f"events, got {type(data).__name__}")
    unknown = sorted(set(map(str, data)) - _TOP_KEYS)
    if unknown:
        raise ExpectationError(f"{where(unknown[0])}: unknown key (expected {', '.join(sorted(_TOP_KEYS))})")
    events_list = data.get("events") or []
    quiet_list = data.get("quiet") or []
    for key, value in (("events", events_list), ("quiet", quiet_list)):
        if not isinstance(value, list):
            raise ExpectationError(f"{where(key)}: expected a list, got {type(value).__name__}")

    def entry(key: str):  # its keys' lines, named as the entry's
        return lambda k: f"{p}:{lines[f'{key}.{k}']}: {key}" if f"{key}.{k}" in lines else where(key)

    events = tuple(_event_from(e, where(f"events[{i}]"), entry(f"events[{i}]")) for i, e in enumerate(events_list))
    quiet = tuple(_quiet_from(q, where(f"quiet[{i}]"), entry(f"quiet[{i}]")) for i, q in enumerate(quiet_list))
    limit = data.get("max_samples_per_1k")
    limit = None if limit is None else _number(limit, where("max_samples_per_1k"))
    return Expectations(events, quiet, limit, str(p))


# ------------------------------------------------------------------------------------------- the run


@dataclasses.dataclass
class ReplayRun:
    """One trace replayed under one config and seed: what was decided, evaluated and alarmed, and what it cost.

    ``evals``/``alarms`` are the ``evals.jsonl``/``alarms.jsonl`` lines of ``adaptive-eval replay``;
    ``decisions`` one line per step where something was decided (``step``, ``evaluate``, ``sample_size``,
    ``reason``): every evaluation and every deferral.  ``truth`` holds each eval ground-truth column as
    recorded, ``{metric: [(step, value), ...]}`` (without ``eval/``).
    """

    name: str
    config_name: str
    seed: int
    config: Any = dataclasses.field(repr=False)
    result: ReplayResult = dataclasses.field(repr=False)
    steps: int
    first_step: int
    last_step: int
    truth: dict[str, list[tuple[int, float]]] = dataclasses.field(repr=False)
    metric: str | None
    expectations: Expectations
    # the trace file whose sidecar events file was looked for and not found (said when .events is read)
    no_sidecar: str | None = dataclasses.field(default=None, repr=False)
    # streams named like eval results, offered when the trace has no ground truth (as the command line offers them)
    eval_like: tuple[str, ...] = dataclasses.field(default=(), repr=False)
    shipped: bool = dataclasses.field(default=False, repr=False)  # a shipped trace (read options refused)

    @property
    def evals(self) -> list[dict]:
        return self.result.evals

    @property
    def alarms(self) -> list[dict]:
        return self.result.alarms

    @property
    def deferrals(self) -> list[dict]:
        return self.result.deferrals

    @property
    def summary(self) -> dict:
        return self.result.summary

    @property
    def events(self) -> tuple[Event, ...]:
        if self.no_sidecar is not None:  # (a misnamed events file: `for event in run.events:` checked nothing and
            # passed, where `adaptive-eval check` says so and fails; a new user's probe)
            p = pathlib.Path(self.no_sidecar)
            near = misnamed_events(p)
            unread = f"; not read: {', '.join(near)}" if near else ""
            # (a TensorBoard folder's stem is its name: "tb_run.events.yaml, ..., or tb_run.events.yaml"; a probe)
            stem = f", or {p.stem}.events.yaml" if p.stem != p.name else ""
            warnings.warn(f"{self.no_sidecar}: no events file beside it ({p.name}.events.yaml, .yml or .json"
                          f"{stem}){unread}: this run's events are none, and a check that loops over "
                          "them checks nothing", RuntimeWarning, stacklevel=2)
            self.no_sidecar = None  # (said once per run)
        return self.expectations.events

    @property
    def quiet(self) -> tuple[QuietWindow, ...]:
        return self.expectations.quiet

    @property
    def decisions(self) -> list[dict]:
        made = [{"step": e["step"], "evaluate": True, "sample_size": e["sample_size"], "reason": e["reason"]}
                for e in self.evals]
        made += [{"step": d["step"], "evaluate": False, "sample_size": None, "reason": d["reason"]}
                 for d in self.deferrals]
        return sorted(made, key=lambda d: (d["step"], not d["evaluate"]))

    @property
    def eval_set_size(self) -> int:
        return int(self.config.replay.eval_set_size)

    @property
    def samples(self) -> int:
        """Eval samples spent: items (a whole-set evaluation counts ``replay.eval_set_size``); with eval suites
        their cost units, items x (samples per item x ``cost`` + ``item_cost``) over the suites each evaluation
        covered (the answers generated, when every cost is 1 and no item cost), as the budget reckons them."""
        units = replay_units(self.result, self.config)
        return scoring.eval_samples(self.evals, self.eval_set_size) if units is None else int(round(sum(units)))

    @property
    def samples_per_1k(self) -> float:
        """Eval samples (:attr:`samples`) per 1,000 training steps (trace records; with ``replay.every_step``
        every training step)."""
        return 1000.0 * self.samples / max(self.steps, 1)

    @property
    def eval_fraction(self) -> float:
        """Simulated evaluation time as a share of all simulated time."""
        s = self.summary
        total = s["eval_seconds"] + s["train_seconds"]
        return s["eval_seconds"] / total if total else 0.0

    def label(self) -> str:
        return f"{self.name} (config {self.config_name}, seed {self.seed})"

    def evals_between(self, start: int, stop: int) -> list[dict]:
        return [e for e in self.evals if start <= e["step"] <= stop]

    def alarms_between(self, start: int, stop: int) -> list[dict]:
        return [a for a in self.alarms if start <= a["step"] <= stop]

    def confirmed_after(self, event: Event | int, *, metric: str | None = None,
                        direction: str | None = None) -> int | None:
        """Steps from ``event`` to its confirmation (None: never confirmed); see :func:`assert_confirmed`."""
        return _confirmation(self, _resolve_event(self, event, metric, direction, None, "confirmed_after"))[0]


def _trace_name(source: str) -> str:
    return pathlib.Path(source).name if source else "<trace>"


def _holds_events(folder: pathlib.Path) -> bool:
    """Whether ``folder`` is a TensorBoard run: event files directly in it."""
    return any(f.is_file() and "tfevents" in f.name for f in folder.iterdir())


def trace_files(folder: str | os.PathLike) -> list[pathlib.Path]:
    """The traces in ``folder``, sorted by name: its trace files (``*.csv``, ``*.jsonl``, ``*.json``; sidecar
    events files and the rows a resumed recording superseded, ``*.superseded-<k>.*``, left out) and its
    sub-folders that are TensorBoard runs (event files directly in them: ``runs/`` of several
    ``SummaryWriter`` runs).  A file, or a folder that is itself a TensorBoard run, is returned as the one trace
    it is.  A TensorBoard run deeper down, not inside one of those, is left out with a warning naming it."""
    p = pathlib.Path(folder)
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise FileNotFoundError(f"{p}: no such trace folder")
    if _holds_events(p):
        return [p]
    found = [f for f in p.iterdir() if (f.is_file() and f.name.endswith(TRACE_SUFFIXES)
                                        and not f.name.endswith(SIDECAR_SUFFIXES) and ".superseded-" not in f.name
                                        and not _a_document(f))
             or (f.is_dir() and _holds_events(f))]
    runs = [f for f in found if f.is_dir()]
    deeper = sorted({e.parent for e in p.rglob("*tfevents*") if e.is_file()}
                    - set(runs) - {p})
    deeper = [d for d in deeper if not any(r in d.parents for r in runs)]
    if deeper:
        import warnings

        names = [d.relative_to(p).as_posix() for d in deeper]
        warnings.warn(f"{p}: left out {len(names)} TensorBoard run{'s' if len(names) > 1 else ''} more than one "
                      f"folder down ({', '.join(names[:5])}{f' and {len(names) - 5} more' if len(names) > 5 else ''})"
                      ": pass each such folder, or its parent, on its own", RuntimeWarning, stacklevel=2)
    return sorted(found)


def _a_document(path: pathlib.Path) -> bool:
    """A ``.json`` file in a folder that is one JSON document with no ``step``, not a trace of records (the demo's
    ``comparison.json`` beside its ``trace.csv`` made ``check runs/demo`` exit 2; a fresh-clone check): left out of
    the folder's traces.  Named on its own, it is read, and refused, as a trace."""
    if not path.name.endswith(".json") or path.stat().st_size > 50_000_000:
        return False
    from adaptive_eval.trace import TraceError, _json_document

    try:
        text = path.read_text(encoding="utf-8")
        _json_document(path, text)  # (the trace reader's own test: records, log_history, a TCPD file, JSONL)
    except TraceError as exc:
        return "one JSON document" in str(exc)
    except (ValueError, OSError):
        return False  # (read as a trace, and said there)
    return False


def shipped_trace_name(value) -> str | None:
    """The shipped real trace ``value`` names (``"grpo_kl_collapse"``, or ``"real:grpo_kl_collapse"`` as
    ``adaptive-eval tune`` spells it), or None: a bare name, no folder in it, means the shipped trace from any
    directory."""
    if not isinstance(value, str) or not _bare(value):
        return None
    from adaptive_eval.convert import real_traces

    name = value.removeprefix("real:")
    return name if name in {info.name for info in real_traces()} else None


def shipped_settings(real) -> list[str]:
    """The settings a shipped real trace (a ``RealTrace``) replays under wherever it is replayed (``replay``,
    ``check``, :func:`replay_trace`), as ``tune`` scores it: its eval cost model and eval set size
    (:func:`adaptive_eval.tune.cost_overrides`: sb3_pong's return is the mean of 10 episodes, not 500 items) and
    its metric and its direction (nanogpt_124m's validation loss was replayed as higher-is-better: its pick was the
    worst checkpoint; and a preset ``tune`` wrote did not replay to the figures it reported; a new-user probe)."""
    from adaptive_eval.tune import case_of_real, cost_overrides

    out = [o for o in cost_overrides(case_of_real(real)) if not o.startswith("logging.")]
    # and its metric: pythia's and bigscience's traces ship with several eval columns, and replay tracked the first
    # (arc_challenge) where tune and check score lambada (a probe)
    metric = [f"evaluation.metric={real.eval_metric[len('eval/'):]}"] if real.eval_metric else []
    return out + metric + ([] if real.higher_is_better else ["evaluation.higher_is_better=false"])


def with_shipped(cfg, real, given: Sequence[str] = ()):
    """``cfg`` with the shipped trace ``real``'s settings (:func:`shipped_settings`) where it leaves them at their
    defaults and ``given`` (the ``--set KEY=VALUE`` overrides) does not name them: a config or ``--set`` of the
    user's that gives one wins (they were merged over it, so ``check --set replay.eval_set_size=40`` and
    ``replay_trace(config=...)`` were ignored; a review)."""
    from omegaconf import OmegaConf

    from adaptive_eval.config import Config

    schema = OmegaConf.structured(Config)
    named = {g.partition("=")[0].strip() for g in given}
    keep = [item for item in shipped_settings(real) if (key := item.partition("=")[0]) not in named
            and OmegaConf.select(cfg, key) == OmegaConf.select(schema, key)]
    return OmegaConf.merge(cfg, OmegaConf.from_dotlist(keep)) if keep else cfg


def in_folder(folder, found):
    """``found`` (an entry :func:`trace_files` listed in ``folder``) as a path that names its folder: listed in
    ``.``, a run folder ``nanogpt_124m`` read as the shipped trace of that name."""
    if pathlib.Path(found).parent != pathlib.Path("."):
        return found
    return os.path.join(os.fspath(folder), os.fspath(found))


def refuse_read_options_on_shipped(value, options) -> None:
    """ValueError for read options (``eval=``, ``stream=``, ...; the command line's ``--eval``, ...) given with a
    shipped trace's bare name: they read a trace file, and the shipped trace is read as it is (a file or folder of
    that name in the working directory was read with them, so the same call meant two traces)."""
    name = shipped_trace_name(value) if options else None
    if name is not None:
        raise ValueError(f"{value!r} is the shipped real trace {name!r}, read as it is: eval=, stream=, step_column= "
                         f"and keep_last_run= (--eval, --stream, --step-column, --keep-last-run) read a trace file; "
                         f"pass ./{value} for a file or folder of that name")


def _load(path_or_trace) -> tuple[Trace, str, Expectations, str | None, Any]:
    """(trace, name, expectations found with it, its eval metric if known, the shipped ``RealTrace`` it is or
    None)."""
    if isinstance(path_or_trace, Trace):
        side = events_path(path_or_trace.source) if path_or_trace.source else None
        exp = load_expectations(side) if side else Expectations()
        return path_or_trace, _trace_name(path_or_trace.source), exp, None, None
    if hasattr(path_or_trace, "trace") and hasattr(path_or_trace, "events"):
        # A RealTrace (adaptive_eval.convert.load_real) or a SyntheticTrace: its events are known.
        t = path_or_trace
        metric = t.eval_metric
        worse = None
        if metric is not None:
            worse = "down" if getattr(t, "higher_is_better", True) else "up"
        events = tuple(Event(int(e.step), e.kind, worse if e.kind in _WORSE_KINDS else None) for e in t.events)
        real = t if getattr(t, "kind", None) == "real" else None
        return t.trace, str(getattr(t, "name", _trace_name(t.trace.source))), Expectations(events), metric, real
    if isinstance(path_or_trace, (str, os.PathLike)):
        p = pathlib.Path(path_or_trace)
        shipped = shipped_trace_name(path_or_trace)
        if shipped is not None:  # (from any directory: a run folder of that name in the working directory was read)
            if p.exists() and isinstance(path_or_trace, str) and not path_or_trace.startswith("real:"):
                log_once(("trace-shadowed", str(p.resolve())), "%r is the shipped real trace; the %s of that name "
                         "in the working directory is not read (pass ./%s for it; said once)", path_or_trace,
                         "folder" if p.is_dir() else "file", path_or_trace)
            from adaptive_eval.convert import load_real

            return _load(load_real(shipped))
        if p.exists():
            side = events_path(p)
            exp = load_expectations(side) if side else Expectations()
            return read_trace(p), p.name, exp, None, None
        if shipped_trace_name(os.fspath(path_or_trace)) is not None:  # (a pathlib.Path of a shipped name)
            return _load(os.fspath(path_or_trace))
        from adaptive_eval.convert import real_traces

        names = [info.name for info in real_traces()]
        raise FileNotFoundError(f"{p}: no such trace file (nor a shipped real trace of that name: "
                                f"{', '.join(names)})")
    raise TypeError(f"replay_trace takes a trace path, a shipped trace name, a Trace or a RealTrace, "
                    f"got {type(path_or_trace).__name__}")


def _config(config) -> tuple[Any, str]:
    if config is None:
        return load_config(), "default"
    if isinstance(config, (str, os.PathLike)):
        return load_config(config), str(config)
    return as_config(config), "custom"


READ_OPTIONS = ("eval", "stream", "step_column", "keep_last_run")


def read_options(read: dict) -> tuple:
    """``(eval items, stream items, step column or None, keep_last_run)`` from the marker's keywords, or ``()``
    when none is given; a ``TypeError`` naming the keyword for a value of the wrong kind."""
    unknown = sorted(set(read) - set(READ_OPTIONS))
    if unknown:
        raise TypeError(f"unknown read option {unknown[0]!r} ({', '.join(READ_OPTIONS)})")
    if not any(read.get(k) for k in READ_OPTIONS):
        return ()

    def items(name):
        value = read.get(name)
        value = [] if value is None else [value] if isinstance(value, str) else value
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise TypeError(f"{name}= takes a column name or a list of them, got {read.get(name)!r}")
        return tuple(value)

    step_column = read.get("step_column")
    if step_column is not None and not isinstance(step_column, str):
        raise TypeError(f"step_column= takes a column name (or 'none'), got {step_column!r}")
    keep_last = read.get("keep_last_run", False)
    if not isinstance(keep_last, bool):
        raise TypeError(f"keep_last_run= takes True or False, got {keep_last!r}")
    return items("eval"), items("stream"), step_column, keep_last


def read_with(path: str | os.PathLike, options: tuple) -> Trace:
    """A trace file read as the command line reads it with ``--eval``, ``--stream``, ``--step-column`` and
    ``--keep-last-run`` (``options`` from :func:`read_options`)."""
    import argparse

    from adaptive_eval.cli import _load_trace_file

    eval_, stream, step_column, keep_last = options
    return _load_trace_file(str(path), argparse.Namespace(
        eval=list(eval_), stream=list(stream), step_column=[step_column] if step_column else [],
        keep_last_run=keep_last))


def replay_trace(path_or_trace, config=None, seed: int = 0, *,
                 events: Sequence | str | os.PathLike | None = None, **read) -> ReplayRun:
    """Replay a recorded trace under ``config`` and return the :class:`ReplayRun`.

    ``path_or_trace``: a trace file or TensorBoard folder (with its sidecar events file, if any), the name
    of a shipped real trace (``adaptive_eval.convert.real_traces()``, with its events; ``real:NAME`` too), a
    :class:`~adaptive_eval.trace.Trace`, or a ``RealTrace``/``SyntheticTrace``.  ``config``: a preset
    name, a YAML path, a loaded config, or None (the default preset).  ``events`` replaces the events
    that came with the trace: a list of :class:`Event` (or steps, or mappings), or an events file.
    ``read``: how to read a trace file in another tool's format, as the pytest marker and the command line
    take it: ``eval="val-core/gsm8k/acc/mean@4"`` (``"eval_acc:0.01"`` for percent), ``stream=[...]``,
    ``step_column=``, ``keep_last_run=True``.  The same trace, config and seed give the same run.
    """
    options = read_options(read)
    refuse_read_options_on_shipped(path_or_trace, options)
    given = path_or_trace
    if options:
        if isinstance(path_or_trace, (str, os.PathLike)) and not os.path.exists(path_or_trace):
            raise FileNotFoundError(f"{path_or_trace}: no such trace file")
        if not isinstance(path_or_trace, (str, os.PathLike)):
            raise TypeError(f"{', '.join(k + '=' for k in READ_OPTIONS if read.get(k))} read a trace file; "
                            f"{path_or_trace!r} is none (a Trace: adaptive_eval.convert.select_columns)")
        path_or_trace = read_with(path_or_trace, options)
    trace, name, exp, metric, real = _load(path_or_trace)
    if len(trace) == 0:
        raise ExpectationError(f"{name}: the trace has no records")
    cfg, config_name = _config(config)
    if real is not None:
        cfg = with_shipped(cfg, real)
    if cfg.replay.every_step:  # every training step a record: steps and costs count training steps
        trace = every_step(trace)
    if events is not None:
        if isinstance(events, (str, os.PathLike)):
            exp = load_expectations(events)
        else:
            exp = Expectations(tuple(_event_from(e, f"{name}: events[{i}]") for i, e in enumerate(events)))
    try:  # as replay simulates it: per-item columns of an eval suite give the suite's mean
        truth = ground_truth(trace, cfg)
    except ValueError as exc:
        raise ExpectationError(str(exc)) from None
    if cfg.evaluation.metric:
        metric = str(cfg.evaluation.metric).removeprefix("eval/")
    elif metric is not None:
        metric = metric.removeprefix("eval/")
    elif len(truth) == 1:
        metric = next(iter(truth))
    run = ReplayRun(name=name, config_name=config_name, seed=seed, config=cfg, result=ReplayResult(),
                    steps=len(trace), first_step=trace.records[0].step, last_step=trace.records[-1].step,
                    truth=truth, metric=metric, expectations=exp, eval_like=tuple(eval_like(trace)),
                    shipped=real is not None)
    if (events is None and exp.source is None and isinstance(given, (str, os.PathLike)) and os.path.exists(given)
            and shipped_trace_name(given) is None):
        run.no_sidecar = os.fspath(given)
    origin = f" ({exp.source})" if exp.source else ""
    for ev in exp.events:  # bad input before the replay, not after it
        _check_in_trace(run, ev.step, f"event {ev.describe()}{origin}")
    for q in exp.quiet:
        _check_window(run, q.start, q.stop, f"quiet window {q.describe()}{origin}")
    run.result = replay(trace, cfg, seed=seed)
    return run


# ------------------------------------------------------------------------------------------- assertions


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    if not math.isfinite(x):
        return str(x)
    return f"{x:.3g}" if abs(x) >= 1000 or abs(x) < 0.01 and x != 0 else f"{x:.3f}".rstrip("0").rstrip(".")


def _eval_text(e: dict, metric: str) -> str:
    ci = e.get("ci", {}).get(metric)
    ci_text = f" [{_fmt(ci[0])}, {_fmt(ci[1])}]" if ci is not None else ""
    n = "all" if e["sample_size"] is None else e["sample_size"]
    truth = ""
    if metric in (e.get("truth_step") or {}):  # replayed between two records of ground truth: the earlier one
        t = e["truth_step"][metric]
        truth = "; no ground truth yet" if t is None else f"; ground truth of step {t}"
    return f"step {e['step']} n={n} {_fmt(e['metrics'].get(metric))}{ci_text} ({e['reason']}{truth})"


def _check_in_trace(run: ReplayRun, step: int, what: str) -> None:
    if not run.first_step <= step <= run.last_step:
        raise ExpectationError(f"{run.name}: {what}: step {step} lies outside the trace "
                               f"(steps {run.first_step}..{run.last_step})")


def _check_window(run: ReplayRun, start: int, stop: int, what: str) -> int:
    """The window's start, clipped to the trace's first step: a log that counts from 1 (HF) has no step 0, and
    nothing can happen before its first step.  A stop past the last step stays an error: a trace cut short (a
    crash) would pass a quiet window over steps it never replayed."""
    _int(start, f"{run.name}: {what}: start")  # (steps 10.0..40.5 passed, where an event's step 56.0 is refused)
    _int(stop, f"{run.name}: {what}: stop")
    if start > stop:
        raise ExpectationError(f"{run.name}: {what}: start {start} is after stop {stop}")
    _check_in_trace(run, stop, what)
    start = max(start, run.first_step)
    _check_in_trace(run, start, what)
    return start


def _resolve_event(run: ReplayRun, event: Event | int, metric, direction, within, what: str) -> Event:
    """The event with its metric, direction and limit filled in from the run's own events."""
    if isinstance(event, Event):
        base = event
    else:
        step = _int(event, f"{run.name}: {what}: event_step")
        base = next((e for e in run.expectations.events if e.step == step), Event(step))
    # (the column's name, eval/<m>, names the metric <m>, as evaluation.metric=eval/<m> does)
    # (within="80" was a bare TypeError, nan failed the preset "not within nan steps", True read as 1 step and
    # 80.5 passed, where the events file refuses them all; a probe)
    within = _opt_int(within, f"{run.name}: {what}: within")
    ev = dataclasses.replace(base, metric=(metric or base.metric or run.metric or "").removeprefix("eval/") or None,
                             direction=direction if direction is not None else base.direction,
                             within=within if within is not None else base.within)
    _check_direction(ev.direction, f"{run.name}: {what} {ev.describe()}")
    _check_in_trace(run, ev.step, f"{what} {ev.describe()}")
    if ev.within is not None and ev.within < 0:
        raise ExpectationError(f"{run.name}: {what} {ev.describe()}: within={ev.within} is negative (a change "
                               f"cannot be confirmed before it happens)")
    if not run.truth:
        # (the command line names the eval-like columns; this said nothing of them nor of eval=; a probe)
        likely = ("; a shipped trace without one: its alarms and decisions replay, its evaluations measure nothing"
                  if run.shipped else
                  f"; eval-like columns here: {', '.join(run.eval_like[:6])}: name one with eval= (replay_trace(..., "
                  f"eval={run.eval_like[0]!r}), the marker's eval=, --eval COL)" if run.eval_like else
                  "; name the column that holds it with eval= (replay_trace(..., eval='COL'), --eval COL)")
        raise ExpectationError(f"{run.name}: {what} {ev.describe()} needs eval ground truth, but the trace has "
                               f"no eval/<metric> column (replay has nothing to evaluate){likely}")
    if ev.metric is None:
        raise ExpectationError(f"{run.name}: {what} {ev.describe()}: which eval metric? the trace has "
                               f"{', '.join(sorted(run.truth))}; pass metric= (or metric: in the events file), or set "
                               "evaluation.metric (adaptive-eval check --set evaluation.metric=NAME)")
    if ev.metric not in run.truth:
        raise ExpectationError(f"{run.name}: {what} {ev.describe()}: no eval ground truth eval/{ev.metric} in the "
                               f"trace (it has {', '.join('eval/' + m for m in sorted(run.truth))})")
    return ev


def _pre_level(run: ReplayRun, ev: Event) -> tuple[float, str]:
    before = [(s, v) for s, v in run.truth[ev.metric] if s < ev.step and math.isfinite(v)]
    if before:
        s, v = before[-1]
        return v, f"ground truth {_fmt(v)} (eval/{ev.metric} at step {s})"
    measured = [e for e in run.evals if e["step"] < ev.step and math.isfinite(e["metrics"].get(ev.metric, math.nan))]
    if measured:
        e = measured[-1]
        return e["metrics"][ev.metric], f"measured {_fmt(e['metrics'][ev.metric])} (evaluation at step {e['step']})"
    raise ExpectationError(f"{run.name}: {ev.describe()}: no ground truth or evaluation of {ev.metric} before "
                           f"step {ev.step} to compare with")


def _confirmation(run: ReplayRun, ev: Event) -> tuple[int | None, float, str]:
    """(delay or None, level before the event, where that level came from)."""
    if not any(all(math.isfinite(c) for c in e.get("ci", {}).get(ev.metric, (math.nan,))) for e in run.evals):
        values = [v for _, v in run.truth.get(ev.metric, ()) if math.isfinite(v)]
        # (the command line says "a percentage? scale it"; this did not; a probe)
        hint = (f"; a percentage? scale it: eval='eval/{ev.metric}:0.01' (--eval eval/{ev.metric}:0.01)"
                if values and 1.0 < max(values) <= 100.0 and min(values) >= 0.0 and "loss" not in ev.metric.lower()
                else "")
        # (a column of NaN alone, an evaluate_fn that failed every time, was said to be "not a proportion"; a probe)
        logged = run.truth.get(ev.metric, ())
        why = (f"eval/{ev.metric} has no finite value: its {len(logged)} logged values are all NaN or inf"
               if not values and logged else
               f"eval/{ev.metric} is not a proportion and has no eval/{ev.metric}:std column")
        raise ExpectationError(
            f"{run.name}: {ev.describe()}: no replayed evaluation has a finite interval for {ev.metric} ({why}), so "
            f"nothing can confirm it{hint}")
    level, origin = _pre_level(run, ev)
    # (a measured level is the last evaluation's, whose own error confirmed_delay counts when it picks it itself)
    known = None if origin.startswith("measured") else level
    delay = scoring.confirmed_delay(run.evals, ev.step, ev.metric, pre_level=known, direction=ev.direction)
    return delay, level, origin


def assert_confirmed(run: ReplayRun, event_step: Event | int, within: int | None = None, *,
                     metric: str | None = None, direction: str | None = None) -> int:
    """Assert that the change at ``event_step`` is confirmed within ``within`` steps; return the delay.

    Confirmed: an evaluation at or after the event whose interval for ``metric`` excludes the level before
    it (on the side of ``direction``); a measured level's own error counts (the difference from that evaluation,
    both intervals' margins: :func:`adaptive_eval.scoring.confirmed_delay`).  ``within``, ``metric`` and
    ``direction`` default to those of the
    run's event at that step (from its events file or the shipped trace), then to the run's metric, either
    direction and "before the trace ends".
    """
    __tracebackhide__ = True  # (pytest: the failure shows the user's line, not this function)
    ev = _resolve_event(run, event_step, metric, direction, within, "expected")
    delay, level, origin = _confirmation(run, ev)
    if delay is not None and (ev.within is None or delay <= ev.within):
        return delay
    limit = "before the trace ends" if ev.within is None else f"within {ev.within} steps"
    stop = run.last_step if ev.within is None else ev.step + ev.within
    window = [e for e in run.evals if ev.step <= e["step"] <= stop]
    lines = [f"{run.label()}: the {ev.describe()} was "
             + ("never confirmed" if delay is None else f"confirmed only {delay} steps after it") + f", not {limit}.",
             f"  level before the event: {origin}; confirming needs "
             + ("an interval " if not origin.startswith("measured") else
                "the difference from that evaluation, both intervals' margins added in quadrature, ")
             + {"down": "entirely below it", "up": "entirely above it"}.get(ev.direction or "", "excluding it")
             + " (or a paired difference on shared items "
             + {"down": "below 0", "up": "above 0"}.get(ev.direction or "", "excluding 0") + ").",
             f"  evaluations in steps {ev.step}..{stop}: {len(window)}"
             + ("" if window else " (none)")]
    lines += [f"    {_eval_text(e, ev.metric)}" for e in window[:8]]
    if len(window) > 8:
        lines.append(f"    ... and {len(window) - 8} more")
    if any(scoring._before(e, ev.step, ev.metric) for e in window):
        lines.append(f"  (the trace logs ground truth every few steps: an evaluation whose ground truth is from before "
                     f"step {ev.step} measured the model before the event and confirms nothing)")
    # What held the evaluations back there (found by a new-user probe: an alarm at 252 and no evaluation until
    # 399 read as a miss, the budget's deferrals said only in an earlier stderr note)
    alarms = run.alarms_between(ev.step, stop)
    deferred = [d for d in run.result.deferrals if ev.step <= d["step"] <= stop]
    if alarms:
        lines.append(f"  alarms in steps {ev.step}..{stop}: {len(alarms)}, the first at step {alarms[0]['step']} "
                     f"({alarms[0].get('stream', '?')}: {alarms[0].get('detector', '?')})")
    else:
        lines += _in_warm_up(run, ev.step)
    if deferred:
        kinds = sorted({d["reason"].split(" ")[0] for d in deferred})
        lines.append(f"  evaluations deferred in steps {ev.step}..{stop}: {len(deferred)} ({', '.join(kinds)}; the "
                     f"first at step {deferred[0]['step']})"
                     + ("; budget:deferred is policy.budget.max_eval_fraction against the trace's clock (a log "
                        "written in a tight loop: --set replay.trace_time=false)" if "budget:deferred" in kinds
                        else ""))
    # (an asynchronous evaluation's delay counts to the step its result came back, not to its own step: looked up by
    # the evaluation's step, the failure message was a bare StopIteration, in pytest and in adaptive-eval check; a
    # probe)
    first = None if delay is None else next((e for e in run.evals if scoring._came_back(e) == ev.step + delay), None)
    if first is not None:
        lines.append(f"  first confirming evaluation: {_eval_text(first, ev.metric)}"
                     + (f" (its result came back at step {ev.step + delay})" if first["step"] != ev.step + delay
                        else ""))
    raise AssertionError("\n".join(lines))


def _in_warm_up(run: ReplayRun, step: int) -> list[str]:
    """A line saying that ``step`` comes within the stream detectors' warm-up, where a change is learned as the
    level and never alarmed on (a probe's short real series, its change at value 28, failed without a word of
    it); [] when it does not, or the config's detectors cannot say."""
    from omegaconf import OmegaConf

    from adaptive_eval.detectors import make_detector

    warm = []
    try:
        for spec in OmegaConf.to_container(run.config.streams.default) or ():
            w = getattr(make_detector(dict(spec)), "warmup", None)
            if isinstance(w, int) and w > 0:
                warm.append(w)
    except Exception:  # noqa: BLE001 - only a hint: a config it cannot read says nothing
        return []
    span = run.last_step - run.first_step + 1
    before = (step - run.first_step) * run.steps / span if span > 0 else 0  # (records per step: a log may skip)
    if not warm or before >= min(warm):
        return []
    return [f"  the event comes about {before:.0f} values into the trace, within the first {min(warm)} that the "
            "stream detectors (streams.default) learn their level and scale from: a change there is learned as part "
            "of the level, not alarmed on (a detector's warmup, or CUSUM's warmup_test with adapt: 0, sets this)"]


def assert_quiet(run: ReplayRun, start: int, stop: int, max_evals: int | None = None, *,
                 max_alarms: int | None = None) -> None:
    """Assert at most ``max_evals`` evaluations and ``max_alarms`` alarms in steps ``start``..``stop``
    (both included; a start before the trace's first step is that step).  With neither given: no alarm at all."""
    __tracebackhide__ = True  # (pytest: the failure shows the user's line, not this function)
    what = f"quiet {start}..{stop}"
    start = _check_window(run, start, stop, what)
    if max_evals is None and max_alarms is None:
        max_alarms = 0
    for key, value in (("max_evals", max_evals), ("max_alarms", max_alarms)):
        if value is not None and (_int(value, f"{run.name}: {what}: {key}") < 0):
            raise ExpectationError(f"{run.name}: {what}: {key}={value} is negative, so nothing could pass")
    evals, alarms = run.evals_between(start, stop), run.alarms_between(start, stop)
    problems = []
    if max_evals is not None and len(evals) > max_evals:
        problems.append(f"{len(evals)} evaluations, more than {max_evals}")
    if max_alarms is not None and len(alarms) > max_alarms:
        problems.append(f"{len(alarms)} alarms, more than {max_alarms}")
    if not problems:
        return
    lines = [f"{run.label()}: steps {start}..{stop} were not quiet: {'; '.join(problems)}."]
    lines += [f"    alarm at step {a['step']}: {a['stream']} {a['detector']} {a['direction'] or ''}".rstrip()
              for a in alarms[:8]]
    if len(alarms) > 8:
        lines.append(f"    ... and {len(alarms) - 8} more alarms")
    lines += [f"    evaluation at step {e['step']}, n={e['sample_size']} ({e['reason']})" for e in evals[:8]]
    if len(evals) > 8:  # (the list stopped at 8 without a word; found by a new-user probe)
        lines.append(f"    ... and {len(evals) - 8} more evaluations")
    raise AssertionError("\n".join(lines))


def assert_cost(run: ReplayRun, max_samples_per_1k: float | None = None, *, max_evals: int | None = None,
                max_eval_fraction: float | None = None) -> None:
    """Assert the run spent at most ``max_samples_per_1k`` eval items per 1,000 training steps, at most
    ``max_evals`` evaluations, and at most ``max_eval_fraction`` of the simulated time evaluating."""
    __tracebackhide__ = True  # (pytest: the failure shows the user's line, not this function)
    limits = {"max_samples_per_1k": max_samples_per_1k, "max_evals": max_evals,
              "max_eval_fraction": max_eval_fraction}
    if all(v is None for v in limits.values()):
        raise ExpectationError(f"{run.name}: assert_cost without a limit (give max_samples_per_1k, max_evals "
                               f"or max_eval_fraction)")
    for key, value in limits.items():
        if value is not None and _number(value, f"{run.name}: {key}") < 0:
            raise ExpectationError(f"{run.name}: {key}={value} is negative, so nothing could pass")
    if max_eval_fraction is not None and max_eval_fraction >= 1:
        raise ExpectationError(f"{run.name}: max_eval_fraction={max_eval_fraction} is a share of the simulated time "
                               "(0.2 for 20%): at 1 or more nothing could fail")
    unit = "eval cost units (answers x cost + items x item_cost)" if run.config.evaluation.suites else "eval samples"
    spent = (f"{run.samples} {unit} over {run.steps} steps in {len(run.evals)} evaluations, "
             f"{run.eval_fraction:.1%} of the simulated time")
    problems = []
    if max_samples_per_1k is not None and run.samples_per_1k > max_samples_per_1k:
        problems.append(f"{run.samples_per_1k:.0f} {'cost units' if run.config.evaluation.suites else 'samples'} per "
                        f"1,000 steps, above {max_samples_per_1k:g}")
    if max_evals is not None and len(run.evals) > max_evals:
        problems.append(f"{len(run.evals)} evaluations, above {max_evals}")
    if max_eval_fraction is not None and run.eval_fraction > max_eval_fraction:
        problems.append(f"eval time {run.eval_fraction:.1%}, above {max_eval_fraction:.1%}")
    if problems:
        raise AssertionError(f"{run.label()}: costs too much: {'; '.join(problems)} ({spent}).")


def _decision_text(d: dict | None) -> str:
    if d is None:
        return "nothing"
    if d["evaluate"]:
        return f"evaluate n={'all' if d['sample_size'] is None else d['sample_size']} ({d['reason']})"
    return f"defer ({d['reason']})"


def assert_same_decisions(run_a: ReplayRun, run_b: ReplayRun) -> None:
    """Assert two runs decided exactly alike: the same evaluations (step, sample size, reason), deferrals
    and alarms.  For refactors: replay one trace before and after and compare."""
    __tracebackhide__ = True  # (pytest: the failure shows the user's line, not this function)
    for what, a_list, b_list, text in (
            ("decisions", run_a.decisions, run_b.decisions, _decision_text),
            ("alarms", [{k: a[k] for k in ("step", "stream", "detector", "direction")} for a in run_a.alarms],
             [{k: a[k] for k in ("step", "stream", "detector", "direction")} for a in run_b.alarms],
             lambda a: "nothing" if a is None else f"{a['stream']} {a['detector']} {a['direction'] or ''}".rstrip())):
        if a_list == b_list:
            continue
        i = next((i for i, (x, y) in enumerate(zip(a_list, b_list)) if x != y), min(len(a_list), len(b_list)))
        x = a_list[i] if i < len(a_list) else None
        y = b_list[i] if i < len(b_list) else None
        if x is not None and y is not None and x["step"] == y["step"]:
            where, left, right = f"at step {x['step']}: ", text(x), text(y)
        else:
            where = ""
            left = text(x) + (f" at step {x['step']}" if x else "")
            right = text(y) + (f" at step {y['step']}" if y else "")
        raise AssertionError(f"{run_a.label()} and {run_b.label()} differ in {what} ({len(a_list)} vs {len(b_list)}); "
                             f"the first difference, #{i + 1}, {where}{left} vs {right}")


# ------------------------------------------------------------------------------------------- check (CLI)


@dataclasses.dataclass
class CheckRow:
    """One line of ``adaptive-eval check``: an expectation of one trace and how the run met it."""

    trace: str
    expectation: str
    confirmed_after: str
    samples_per_1k: str
    ok: bool
    message: str = ""


def _contradictions(run: ReplayRun, events: Sequence[Event], quiet: Sequence[QuietWindow],
                    max_samples_per_1k: float | None) -> None:
    for ev in events:
        if ev.within is not None and ev.within < 0:
            raise ExpectationError(f"{run.name}: {ev.describe()}: within={ev.within} is negative")
        if max_samples_per_1k is not None and max_samples_per_1k <= 0:
            raise ExpectationError(f"{run.name}: {ev.describe()} must be confirmed by an evaluation, but "
                                   f"max_samples_per_1k={max_samples_per_1k:g} allows no evaluation at all")
        if ev.within is None:
            continue
        for q in quiet:
            if q.max_evals == 0 and q.start <= ev.step and ev.step + ev.within <= q.stop:
                raise ExpectationError(
                    f"{run.name}: {ev.describe()} must be confirmed within {ev.within} steps, by an evaluation in "
                    f"steps {ev.step}..{ev.step + ev.within}, but the {q.describe()} allows no evaluation there")


def check(run: ReplayRun, *, within: int | None = None, max_samples_per_1k: float | None = None) -> list[CheckRow]:
    """Check every expectation of ``run`` (its events, quiet windows and cost limit); one row each.

    ``within`` replaces every event's own limit; ``max_samples_per_1k`` the events file's.  Bad input
    (no eval ground truth, a contradiction) raises :class:`ExpectationError`.
    """
    if within is not None and _int(within, f"{run.name}: --within") < 0:
        raise ExpectationError(f"{run.name}: --within {within} is negative (a change cannot be confirmed before "
                               f"it happens)")
    events = [dataclasses.replace(e, within=within) if within is not None else e for e in run.expectations.events]
    limit = max_samples_per_1k if max_samples_per_1k is not None else run.expectations.max_samples_per_1k
    if limit is not None and _number(limit, f"{run.name}: max_samples_per_1k") < 0:
        raise ExpectationError(f"{run.name}: max_samples_per_1k={limit:g} is negative, so nothing could pass")
    _contradictions(run, events, run.quiet, limit)
    # (with eval suites the cost is in their units, answers x cost + items x item_cost: read as "samples", 9,565
    # where replay counted 3,415 items and 5,065 answers per 1,000 steps; a probe)
    units = " units" if run.config.evaluation.suites else ""
    cost = f"{run.samples_per_1k:.0f}{units}" + (f" (<= {limit:g})" if limit is not None else "")
    rows = []
    for ev in events:
        full = _resolve_event(run, ev, None, None, None, "expected")
        delay, _, _ = _confirmation(run, full)
        try:
            assert_confirmed(run, full)
            ok, message = True, ""
        except AssertionError as exc:
            ok, message = False, str(exc)
        limit_text = "" if full.within is None else f" (<= {full.within})"
        rows.append(CheckRow(run.name, full.describe(), ("never" if delay is None else f"{delay} steps") + limit_text,
                             cost, ok, message))
    for q in run.quiet:
        try:
            assert_quiet(run, q.start, q.stop, q.max_evals, max_alarms=q.max_alarms)
            ok, message = True, ""
        except AssertionError as exc:
            ok, message = False, str(exc)
        found = (f"{len(run.alarms_between(q.start, q.stop))} alarms, "
                 f"{len(run.evals_between(q.start, q.stop))} evals")
        rows.append(CheckRow(run.name, q.describe(), found, cost, ok, message))
    if limit is not None:
        try:
            assert_cost(run, limit)
            ok, message = True, ""
        except AssertionError as exc:
            ok, message = False, str(exc)
        rows.append(CheckRow(run.name, "cost", "-", cost, ok, message))
    if not rows:
        rows.append(CheckRow(run.name, NO_EXPECTATIONS, "-", cost, True))
    return rows


NO_EXPECTATIONS = "(no expectations)"  # the row of a trace with nothing to check


def format_rows(rows: Iterable[CheckRow]) -> str:
    """The table ``adaptive-eval check`` prints."""
    rows = list(rows)
    header = ("trace", "event", "confirmed after",
              "cost/1k" if any(" units" in r.samples_per_1k for r in rows) else "samples/1k", "result")
    # (a trace with nothing to check read "ok" on a run that exits 1, "nothing was checked"; a fresh-clone probe)
    cells = [header] + [(r.trace, r.expectation, r.confirmed_after, r.samples_per_1k,
                         "unchecked" if r.expectation == NO_EXPECTATIONS else "ok" if r.ok else "FAIL") for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in cells)

"""The ``adaptive-eval`` command line."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import pathlib
import re
import sys
import warnings

from adaptive_eval.config import ConfigError, load_config
from adaptive_eval.demos import DEFAULT_TASK, TASKS

__all__ = ["main"]


def _seed(text: str) -> int:
    """``--seed``: an integer in [0, 2**32) (numpy's seeds), refused by argparse naming the option."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError(f"must be an integer in [0, 2**32), got {value}")
    return value


def _at_least(least: int):
    """An argparse type: an integer of at least ``least``, refused naming the option (the benchmarks' counts too:
    ``--reps 0`` was a ZeroDivisionError's traceback, ``--seeds -3`` one seed; a probe)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"must be at least {least}, got {value}")
        return value

    parse.__name__ = "integer"
    return parse


class _Once(argparse.Action):
    """An option given at most once: a second ``--config`` replaced the first without a word (a preset dropped
    from ``--config aggressive --config mine.yaml``; a new user's probe)."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, "_given_" + self.dest, False):
            parser.error(f"{option_string} given twice ({getattr(namespace, self.dest)!r}, then {values!r}): give it "
                         "once; to change a few keys of a preset, --config PRESET --set KEY=VALUE, or write the "
                         "preset out (adaptive-eval config --config PRESET > mine.yaml) and edit it")
        setattr(namespace, "_given_" + self.dest, True)
        setattr(namespace, self.dest, values)


def _add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="F", default=None, action=_Once,
                   help="a YAML file or a preset name (default, areal, aggressive, budget); default: default")
    p.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], dest="overrides",
                   help="override one key, e.g. --set trigger.freq_steps=50 (repeatable)")


def _cmd_config(args: argparse.Namespace) -> int:
    from omegaconf import OmegaConf

    cfg = load_config(args.config, args.overrides)
    sys.stdout.write(OmegaConf.to_yaml(cfg))
    return 0


def _eval_mapping(items: list[str]) -> dict[str, float]:
    out = {}
    for item in items:
        # the scale after the last ':', where it is a number: a column named with ':' (val:acc) is named as it is,
        # or with its scale after (val:acc:0.01); the first ':' split it, and no form named it (a probe)
        col, _, scale = item.rpartition(":")
        if col and not scale:  # (acc: is acc, scale 1, as before; a review)
            out[col] = 1.0
            continue
        try:
            out[col] = float(scale)
        except ValueError:
            if col and re.fullmatch(r"[0-9.eE+-]+", scale):  # (acc:0..01, a typo of a scale)
                raise ValueError(f"--eval {item!r}: the scale after ':' must be a number") from None
            col = item  # (no ':' at all, or one within the column's name)
            out[col] = 1.0
        if not (math.isfinite(out[col]) and out[col] > 0):
            raise ValueError(f"--eval {item!r}: the scale after ':' must be a positive number "
                             "(e.g. 0.01 for percent)")
    return out


def _eval_names(args: argparse.Namespace, path: str) -> dict[str, str]:
    """``eval/<c>`` -> ``c`` for the columns ``--eval`` names for the trace at ``path`` (the user's names, for
    hints)."""
    return {(c if c.startswith("eval/") else f"eval/{c}"): c
            for c in _eval_mapping(_for_trace(getattr(args, "eval", None), path))}


def _truth_note(trace, cfg, named: dict[str, str] | None = None) -> None:
    """Say on stderr which eval columns replay can only return as they are: values beyond [0, 1] without a
    ``:std`` column give evaluations without an interval, which can confirm nothing (a percentage?); and
    which look lower-is-better (``eval_loss``, ``eval_wer``) while ``evaluation.higher_is_better`` is true.
    ``named`` (:func:`_eval_names`): the hints give a column ``--eval`` named by the user's name for it (they
    gave ``--eval eval/eval_acc:0.01`` for ``--eval eval_acc``, which then had no such column)."""
    named = named or {}
    import numpy as np

    from adaptive_eval.policies._base import looks_lower_is_better
    from adaptive_eval.replay import _split_columns

    _, evals = _split_columns(sorted({k for r in trace.records for k in r.metrics}), trace.source)
    where = f"{trace.source}: " if trace.source else ""  # (check and tune read many traces)
    declared = dict(cfg.evaluation.metric_kinds or {})
    tracked = cfg.evaluation.metric
    # (with evaluation.metric null the evaluator tracks a column that does not read lower-is-better where there is
    # one: then no other column's direction matters; the notes on eval/loss read as if the pick were made on it)
    untracked = not tracked and not all(looks_lower_is_better(n) for n in evals)
    for name in ([tracked] if tracked else [] if untracked else evals):
        word = looks_lower_is_better(name)
        if word is None or name not in evals or not cfg.evaluation.higher_is_better:
            continue
        kind = ""
        _, values = trace.column(f"eval/{name}")
        values = values[np.isfinite(values)]
        # (only a column in [0, 1] is drawn as a proportion: one beyond it is returned as it is, which the note
        # below says; this one told a loss in [1.5, 2.5] it was drawn as a proportion, the next that it was not)
        if word in ("loss", "nll", "perplexity", "ppl", "mse", "mae", "rmse", "bpb", "bpc") \
                and name not in declared and evals[name] is None and not cfg.evaluation.suites \
                and values.size and values.min() >= 0.0 and values.max() <= 1.0:
            kind = (f"; and a {word} is not a proportion of correct answers, which is how replay draws "
                    f"a column in [0, 1] without a :std column: --set 'evaluation.metric_kinds={{{name}: mean}}' (with "
                    f"no eval/{name}:std column, its per-sample sd, it then gets no interval)")
        print(f"  note: {where}eval/{name} looks lower-is-better (a {word}), but "
              f"evaluation.higher_is_better is true: the best checkpoint is its highest value, and a rise reads as "
              f"improving; --set evaluation.higher_is_better=false{kind}", file=sys.stderr)
    for name in evals:  # (its evaluations all read NaN, and replay said nothing: found by a new-user probe)
        _, values = trace.column(f"eval/{name}")
        if values.size and not np.isfinite(values).any():
            col = named.get(f"eval/{name}", f"eval/{name}")
            print(f"  warning: {where}{col} has no finite value ({values.size} records, all NaN or inf): every "
                  "evaluation replayed on it reads NaN, so nothing is measured or confirmed and no best is picked",
                  file=sys.stderr)
    if cfg.evaluation.suites:
        return
    groups = sorted({n.split("/", 1)[0] for n in evals if "/" in n.strip("/")})
    if len(groups) >= 2:  # (the demo's trace replayed its 300 + 30 problems as one set of 500, unsaid: a probe)
        sets = " ".join(f"--set evaluation.suites.{g}.size=N" for g in groups[:3])
        print(f"  note: {where}the eval columns of {', '.join(groups[:3])}{', ...' if len(groups) > 3 else ''} "
              f"replay as metrics of one simulated eval set of {int(cfg.replay.eval_set_size)} items "
              f"(replay.eval_set_size); eval suites of their own sizes: {sets}", file=sys.stderr)
    for name, std in evals.items():
        if std is not None or declared.get(name) == "proportion":
            continue
        _, values = trace.column(f"eval/{name}")
        values = values[np.isfinite(values)]
        if declared.get(name) == "mean" and values.size:  # (tune searched for confirmations that cannot come)
            print(f"  note: {where}eval/{name} is declared a mean (evaluation.metric_kinds) and has no "
                  f"eval/{name}:std column, so every evaluation returns its value with no interval (nothing can be confirmed: "
                  f"every delay is a miss); give its per-sample sd as eval/{name}:std for Normal draws",
                  file=sys.stderr)
        elif values.size and (values.max() > 1.0 or values.min() < 0.0):
            col = named.get(f"eval/{name}", f"eval/{name}")
            hint = (f"; a percentage? scale it: --eval {col}:0.01" if 1.0 < values.max() <= 100.0
                    and values.min() >= 0.0 and "loss" not in name.lower() else "")
            hint += f"; a mean? give a column {col}:std (its per-sample sd) for Normal draws"
            print(f"  note: {where}eval/{name} lies in [{values.min():.4g}, {values.max():.4g}] and has no "
                  f"eval/{name}:std column, so every evaluation returns its value with no interval (nothing can be "
                  f"confirmed){hint}", file=sys.stderr)


def _add_trace_args(p: argparse.ArgumentParser) -> None:
    """The options that read a trace not in the native format (replay, check and tune alike)."""
    p.add_argument("--stream", action="append", default=[], metavar="[TRACE=]COL",
                   help="a column (metric) to watch as a cheap stream, the others left out (repeatable); "
                        "TRACE=COL: for that trace only (its own replace the others there)")
    p.add_argument("--eval", action="append", default=[], metavar="[TRACE=]COL[:scale]",
                   help="a column holding eval ground truth, times scale (e.g. eval_acc:0.01 for percent); with "
                        "it, other eval/ columns are not ground truth.  TRACE=COL: for that trace only, when "
                        "traces name it differently (its own replace the others there)")
    p.add_argument("--step-column", action="append", default=[], metavar="[TRACE=]COL|none",
                   help="the step column of a CSV not in the native format, or the step key of JSONL records "
                        "(OpenRLHF: train/global_step); none: a CSV's row number (from 0).  TRACE=COL: for that "
                        "trace only (repeatable, one per trace)")
    p.add_argument("--keep-last-run", action="store_true",
                   help="steps that go back (a run restarted or resumed into the same log): keep the later run")


def _foreign(args: argparse.Namespace) -> bool:
    """Whether a trace option was given (else a trace is read as it is)."""
    return bool(getattr(args, "stream", None) or getattr(args, "eval", None) or getattr(args, "keep_last_run", False)
                or any(_trace_prefix(c)[1] != "step" for c in _step_columns(getattr(args, "step_column", None))))


def _step_columns(value) -> list[str]:
    """``--step-column``'s items: a list (the option is repeatable), or one name as a Namespace built in code
    gives it (``"step"``, the default, is none)."""
    if value is None or value == "step":
        return []
    return [value] if isinstance(value, str) else list(value)


def _step_column_for(args: argparse.Namespace, path: str) -> str:
    """The step column of the trace at ``path``: its own ``TRACE=COL`` item, else the one naming no trace, else
    ``step``; two that apply alike are an error (which would win is not clear)."""
    cols = _for_trace(_step_columns(getattr(args, "step_column", None)), path)
    if len(cols) > 1:
        raise ValueError(f"--step-column is given {len(cols)} times for {path} ({', '.join(cols)}); give one per "
                         "trace (TRACE=COL for a trace of its own)")
    return cols[0] if cols else "step"


def _trace_prefix(item: str) -> tuple[str | None, str]:
    """``(TRACE, COL)`` for a ``--eval``/``--stream`` item ``TRACE=COL`` whose ``TRACE`` is a file or folder that
    exists, the longest such (a column may hold an ``=``, ``stratum=hard``, and so may a file name: ``exp.csv``
    beside ``exp.csv=2.csv``), else ``(None, item)``."""
    for i in range(len(item) - 1, 0, -1):
        if item[i] == "=" and os.path.exists(item[:i]):
            return item[:i], item[i + 1:]
    return None, item


def _applies(target: str, path: str) -> bool:
    """A ``TRACE=COL`` item naming ``target`` applies to the trace at ``path``: that trace, or one in that folder."""
    target, path = os.path.realpath(target), os.path.realpath(path)
    return path == target or path.startswith(target.rstrip(os.sep) + os.sep)


def _for_trace(items: list[str], path: str) -> list[str]:
    """The ``--eval``/``--stream`` items for the trace at ``path``: its own ``TRACE=COL`` ones, else those that
    name no trace (several traces whose ground truth is named differently: ``--eval a.csv=eval_acc --eval
    b.jsonl=val/acc``)."""
    own, common = [], []
    for item in items or []:
        target, col = _trace_prefix(item)
        if target is None:
            common.append(item)
        elif _applies(target, path):
            own.append(col)
    return own or common


def _check_trace_prefixes(args: argparse.Namespace, traces: list[str]) -> None:
    """A ``TRACE=COL`` item that applies to none of ``traces`` (the trace files and folders read, a folder of
    trace files expanded) is an error: it would apply to nothing (:func:`_applies`)."""
    options = {"eval": getattr(args, "eval", None) or [], "stream": getattr(args, "stream", None) or [],
               "step-column": _step_columns(getattr(args, "step_column", None))}
    for option, items in options.items():
        for item in items:
            target, _ = _trace_prefix(item)
            if target is not None and not any(_applies(target, t) for t in traces):
                raise ValueError(f"--{option} {item!r} names the trace {target!r}, which is not one of the traces "
                                 "given")


def _refuse_repeated_traces(traces, why: str) -> None:
    """ValueError for a trace given twice (``run.csv`` and ``./run.csv``; a shipped trace as ``NAME`` and
    ``real:NAME``): ``why`` says what it would spoil."""
    seen: dict[str, str] = {}
    for t in traces:
        key = os.path.realpath(t) if os.path.exists(t) else t.removeprefix("real:")
        if key in seen:
            also = f" (as {seen[key]!r} too)" if seen[key] != t else ""
            raise ValueError(f"the trace {t!r} is given twice{also}: {why}")
        seen[key] = t


def _load_trace_file(path: str, args: argparse.Namespace):
    """A trace file or TensorBoard folder read with the trace options (``_add_trace_args``); ``--eval`` and
    ``--stream`` items of the form ``TRACE=COL`` apply to that trace only (:func:`_for_trace`)."""
    from adaptive_eval.convert import from_columns, select_columns
    from adaptive_eval.trace import TraceError, read_trace, trace_format

    args = argparse.Namespace(**{**vars(args), "eval": _for_trace(getattr(args, "eval", None), path),
                                 "stream": _for_trace(getattr(args, "stream", None), path),
                                 "step_column": _step_column_for(args, path)})
    on_restart = "keep_last" if args.keep_last_run else "error"
    if args.stream:
        from adaptive_eval.replay import _refuse_bookkeeping

        _refuse_bookkeeping(args.stream, path)
    kind = trace_format(path)
    if kind == "csv" and (args.stream or args.eval or args.step_column != "step"):
        step = None if args.step_column == "none" else args.step_column
        return from_columns(path, step=step, streams=args.stream or None,
                            evals=_eval_mapping(args.eval), on_restart=on_restart, validation_truth=not args.eval)
    if args.step_column != "step" and (kind == "tensorboard" or args.step_column == "none"):
        what = "TensorBoard folder" if kind == "tensorboard" else "JSONL trace"
        raise TraceError(f"--step-column {args.step_column} applies to a CSV or JSONL trace with a step key; a "
                         f"{what} has its steps", path)
    trace = read_trace(path, on_restart=on_restart, step_column=args.step_column, validation_truth=not args.eval)
    if args.stream or args.eval:
        trace = select_columns(trace, streams=args.stream or None, evals=_eval_mapping(args.eval))
    return trace


def _say_warmup_covers(trace, cfg) -> None:
    """Say on stderr when the detectors' warm-up takes more than half of most streams' values (a TRL log at
    logging_steps=10: 30 records, a collapse at step 200 alarmed at the last record, 100 steps late, unsaid, where
    the HF callback says it; a probe).  Each stream's warm-up is its detectors' largest (``streams.watch``'s for a
    stream named there; a detector's own default where its spec gives none)."""
    from adaptive_eval.detectors._registry import warmup_of as warmup
    from adaptive_eval.replay import _split_columns

    default = warmup(cfg.streams.default)
    # (the streams replay watches: an asynchronous run's async/latency_steps, one value per result, was said to be
    # a stream too short for its warm-up; a probe)
    watched = set(_split_columns(trace.metric_names())[0]) - set(cfg.streams.ignore or ())
    counts: dict[str, int] = {}
    for rec in trace.records:
        for name, value in rec.metrics.items():
            if name in watched and value == value:
                counts[name] = counts.get(name, 0) + 1
    watch = cfg.streams.watch or {}
    need = {n: (warmup(watch[n]) if n in watch else default) for n in counts}
    short = sorted(n for n, c in counts.items() if need[n] and c < 2 * need[n])
    if not short or len(short) < len(counts) / 2:
        return
    fewest = min(counts[n] for n in short)
    print(f"  note: {len(short)} of the trace's {len(counts)} streams have fewer values than twice their detectors' "
          f"warm-up ({', '.join(short[:3])}{', ...' if len(short) > 3 else ''}; the fewest {fewest} values, a "
          f"{max(need[n] for n in short)}-value warm-up): a change before it ends may go unalarmed (log every step, "
          "or give the detectors in streams.default a smaller warmup)", file=sys.stderr)


def _no_truth_warning(trace, shipped: bool = False) -> None:
    """Say on stderr that a replay measured nothing, and which columns might be the ground truth (a shipped
    trace's are as shipped: --eval, refused for them, was the advice; a probe)."""
    from adaptive_eval.trace import eval_like

    likely = eval_like(trace)
    way = ("a shipped trace without one: its alarms and decisions replay, its evaluations measure nothing" if shipped
           else "name it with --eval COL" + (f" (eval-like columns here: {', '.join(likely[:6])})" if likely else ""))
    print(f"  warning: the trace has no eval ground truth ({trace.source + ': ' if trace.source else ''}no "
          f"eval/<metric> column), so every simulated evaluation measured nothing; {way}", file=sys.stderr)


def _stride_note(source: str, records: int, first: int, last: int, cfg) -> None:
    """Say on stderr how a trace logged every k steps is counted, unless ``replay.every_step`` is set."""
    if cfg.replay.every_step or records < 2 or (last - first) / (records - 1) < 1.5:
        return
    gap = (last - first) / (records - 1)
    print(f"  note: {source} has a record every {gap:.3g} steps on average: each record counts as one training "
          "step (freq_steps, cooldowns, costs per 1,000 steps); --set replay.every_step=true replays every "
          "training step", file=sys.stderr)


def _load_trace(args: argparse.Namespace):
    """``replay``'s trace: a file or TensorBoard folder, or a shipped real trace by name (``NAME`` or
    ``real:NAME``, as ``check`` and ``tune`` take it; a bare name is the shipped trace from any directory); and
    the shipped ``RealTrace`` it is, or None."""
    from adaptive_eval.testing._core import _load, refuse_read_options_on_shipped

    refuse_read_options_on_shipped(args.trace, _foreign(args))
    if not _on_disk(args.trace) and not _foreign(args):  # (a shipped name with read options: refused above)
        loaded = _load(args.trace)  # (check's and replay_trace's reading)
        return loaded[0], loaded[4]
    return _load_trace_file(args.trace, args), None


def _cmd_replay(args: argparse.Namespace) -> int:
    from adaptive_eval.replay import replay, replay_units, write_outputs

    cfg = load_config(args.config, args.overrides)
    if os.path.exists(args.trace):
        _check_trace_prefixes(args, [args.trace])
    trace, real = _load_trace(args)
    if real is not None:  # (its cost model, eval set size and direction, as check and tune replay it; yours win)
        from adaptive_eval.testing._core import with_shipped

        cfg = with_shipped(cfg, real, args.overrides)
    if len(trace) == 0:
        print(f"adaptive-eval: {args.trace}: the trace has no records", file=sys.stderr)
        return 2
    out = args.out
    if os.path.exists(args.trace):  # (it was read, then removed and written over, exit 0; found by a probe)
        mine = os.path.realpath(args.trace)
        outputs = [os.path.realpath(os.path.join(out, n)) for n in _REPLAY_OUTPUTS]
        tb = os.path.realpath(os.path.join(out, "tb"))
        if mine in outputs or mine == tb or mine.startswith(tb + os.sep):  # (tb/: cleared with or without it)
            print(f"adaptive-eval: --out {out} would overwrite the trace being replayed, {args.trace} (replay writes "
                  f"{', '.join(_REPLAY_OUTPUTS)} and tb/ there afresh): choose another --out", file=sys.stderr)
            return 2
    _check_writable(out)
    _clear_earlier_replay(out)
    logger = None
    if not args.no_tensorboard:
        from adaptive_eval.tensorboard import make_logger

        logger = make_logger(os.path.join(out, "tb"), flush_secs=cfg.logging.flush_secs)
    streams = _for_trace(args.stream, args.trace) or None
    if streams:
        # A W&B chart's "<run> - <metric>" was read as its metric: named again as the user wrote it, replay refused
        # the name the reader had just taken ("no column 'a - train/reward' to watch"; found by a new-user probe)
        from adaptive_eval.convert import _WANDB_RUN

        names = {k for r in trace.records for k in r.metrics}
        streams = [c.rpartition(_WANDB_RUN)[2] if c not in names and c.rpartition(_WANDB_RUN)[2] in names else c
                   for c in streams]
    result = replay(trace, cfg, seed=args.seed, logger=logger, streams=streams)
    write_outputs(result, out)
    s = result.summary
    total = s["train_seconds"] + s["eval_seconds"]  # (a clock that never moved: all of it evaluating, not 0.0%)
    frac = s["eval_seconds"] / total if total > 0 else 0.0
    print(f"replayed {s['steps']} steps of {trace.source}")
    _say_warmup_covers(trace, cfg)
    evals = trace.eval_names()
    tracked = (s.get("best") or {}).get("metric")
    if cfg.evaluation.metric is None and not cfg.evaluation.suites and len(evals) > 1 and tracked:
        # (which one, said: it showed only in summary.json, where check asks "which eval metric?"; a probe)
        print(f"  tracked {tracked} of the trace's {len(evals)} eval columns ({', '.join(n[5:] for n in evals[:4])}"
              f"{' ...' if len(evals) > 4 else ''}); another: --set evaluation.metric=NAME")
    if len(trace) > 1:
        _stride_note(trace.source, len(trace), trace.records[0].step, trace.records[-1].step, cfg)
    _truth_note(trace, cfg, _eval_names(args, args.trace))
    if s["evals"] and not any(e["metrics"] for e in result.evals):
        _no_truth_warning(trace, shipped=real is not None)
    units = replay_units(result, cfg)  # with eval suites: the cost units check, tune and the budget count
    samples = (f"samples {s['samples']}" if units is None else
               f"samples {s['samples']} items, {sum(units):,.0f} cost units (answers x cost + items x item_cost)")
    cancelled = f", cancelled {s['cancelled']}" if s.get("cancelled") else ""  # (asynchronous: for an urgent one)
    print(f"  evaluations {s['evals']}, {samples}, alarms {s['alarms']}, deferrals {s['deferrals']}{cancelled}, "
          f"simulated eval time {frac:.1%} of the run")
    _budget_note(trace, cfg, result.deferrals, s["evals"])
    reasons: dict[str, int] = {}
    for e in result.evals:
        key = e["reason"].split(":")[0]
        reasons[key] = reasons.get(key, 0) + 1
    if reasons:
        print("  reasons: " + ", ".join(f"{k} {v}" for k, v in sorted(reasons.items())))
    print(f"  wrote {out}/evals.jsonl, alarms.jsonl, summary.json" + ("" if args.no_tensorboard else ", tb/"))
    return 0


_REPLAY_OUTPUTS = ("evals.jsonl", "alarms.jsonl", "summary.json")


def _clear_earlier_replay(out: str) -> None:
    """Remove what an earlier replay into ``out`` wrote, before this one starts: its evals.jsonl, alarms.jsonl and
    summary.json (one interrupted before its end left them beside its own partial tb/, two runs read as one; a
    probe), and its event files in ``out/tb`` (ours alone: ``.adaptive_eval`` in the name), as TensorBoard and
    ``plot`` read every event file of a folder, and two runs' streams interleaved there, an oscillation neither
    log had (found by a new-user probe)."""
    earlier = os.path.exists(os.path.join(out, "evals.jsonl"))
    for name in _REPLAY_OUTPUTS:
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(out, name))
    if earlier:  # (plot's picture of the earlier replay, beside this one's outputs, read as this one's; a probe)
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(out, "run.png"))
    tb = os.path.join(out, "tb")
    try:
        old = [f for f in os.listdir(tb) if "tfevents" in f and ".adaptive_eval" in f]
    except OSError:
        return
    for name in old:
        os.remove(os.path.join(tb, name))
    if old:
        print(f"  note: removed {len(old)} event file{'s' if len(old) > 1 else ''} of an earlier replay from {tb} "
              "(replay writes its outputs afresh)", file=sys.stderr)


def _check_writable(out: str) -> None:
    try:
        os.makedirs(out, exist_ok=True)
        probe = os.path.join(out, ".write-test")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as exc:
        if os.path.exists(out) and not os.path.isdir(out):
            raise ValueError(f"--out {out}: a file, not a folder") from None
        raise ValueError(f"--out {out}: not writable ({exc.strerror})") from None


def _cmd_plot(args: argparse.Namespace) -> int:
    from adaptive_eval.plot import PlotError, plot_runs

    try:
        path = plot_runs(args.dir, args.out)
    except PlotError as exc:
        print(f"adaptive-eval: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    import importlib

    from adaptive_eval.demos import DemoError

    task = importlib.import_module(f"adaptive_eval.demos.{args.task}")
    if not str(args.out).strip():  # (--out "" wrote every run into the working directory; a probe)
        print("adaptive-eval: --out is empty: name the folder the demo writes its runs to (default runs/demo)",
              file=sys.stderr)
        return 2
    chosen = {key: value for key, value in (("steps", args.steps), ("fault", args.fault)) if value is not None}
    # Its runs are several evaluators of one preset, whose notes "(said once)" are once per evaluator: said once
    # per demo here (the note on the id suite's pass@k came twice; found by a new-user probe).
    from adaptive_eval.types import SaidOnce

    try:
        with SaidOnce():
            report = task.run_demo(args.out, seed=args.seed, config=args.config, overrides=args.overrides,
                                   progress=not args.no_progress, **chosen)
    except DemoError as exc:
        print(f"adaptive-eval: {exc}", file=sys.stderr)
        return 2
    print(task.format_comparison(report))
    return 0


def _budget_note(trace, cfg, deferred: list[dict], evals: int, name: str = "") -> None:
    """When the budget binds (more of its deferrals than evaluations), say what the clock and the eval cost are: a
    trace whose time column has steps of 0.1 ms (a logger in a tight loop) affords almost no evaluation.
    ``deferred``: the run's deferral lines; only the budget's count (not resources:, async:waiting)."""
    deferrals = sum(d["reason"].startswith("budget:") for d in deferred)
    if deferrals <= max(evals, 10):
        return
    times = [r.time for r in trace.records]
    timed = cfg.replay.trace_time and len(times) > 1 and all(t is not None for t in times)
    # (per training step: with replay.every_step the steps between a strided trace's records are replayed too)
    span = (trace.records[-1].step - trace.records[0].step) if cfg.replay.every_step else len(times) - 1
    step = (times[-1] - times[0]) / max(span, 1) if timed else float(cfg.replay.step_seconds)
    suites = cfg.evaluation.suites
    # (with eval suites, their items x (answers x cost + item_cost), as replay charges them: it said replay's
    # eval_set_size, 30 s, for suites of 201 s; a probe)
    units = (sum(int(x.size) * (int(x.samples_per_item) * float(x.cost) + float(x.item_cost)) for x in suites.values())
             if suites else int(cfg.replay.eval_set_size))
    whole = float(cfg.replay.eval_fixed_seconds) + float(cfg.replay.eval_seconds_per_sample) * units
    source = "the trace's time column" if timed else "replay.step_seconds"
    print(f"  note: {name + ': ' if name else ''}the budget deferred {deferrals} evaluations: a step takes "
          f"{step:.3g} s ({source}) and an evaluation of the whole {'suites' if suites else 'set'} {whole:.3g} s "
          "(replay.eval_fixed_seconds, replay.eval_seconds_per_sample)"
          + ("; --set replay.trace_time=false times steps by replay.step_seconds instead" if timed else ""),
          file=sys.stderr)


def _on_disk(trace: str) -> bool:
    """``trace`` is read from disk: it exists and is not a shipped trace's bare name (that is the shipped trace
    from any directory; ``./NAME`` reads a file or folder of that name)."""
    from adaptive_eval.testing._core import shipped_trace_name

    return os.path.exists(trace) and shipped_trace_name(trace) is None


def _cmd_check(args: argparse.Namespace) -> int:
    from adaptive_eval.testing import check, events_path, format_rows, replay_trace, trace_files
    from adaptive_eval.testing._core import NO_EXPECTATIONS, in_folder, shipped_trace_name

    cfg = load_config(args.config, args.overrides)
    traces = []
    for trace in args.trace:  # a folder of trace files, as the pytest marker takes it (not a TensorBoard run)
        folder = pathlib.Path(trace)
        found = (trace_files(folder) if _on_disk(trace) and folder.is_dir() and not any(folder.glob("*tfevents*"))
                 else [])
        if found:  # (listed once: a run deeper down was warned about twice)
            traces += [str(in_folder(trace, f)) for f in found]
        else:
            traces.append(trace)
    from adaptive_eval.testing._core import _load, misnamed_events
    from adaptive_eval.trace import Trace, read_trace

    _check_trace_prefixes(args, traces)
    names = [pathlib.Path(t).name for t in traces]
    rows, errors = [], []
    read_from: dict[str, str] = {}  # run name -> the events file it was checked against
    on_disk: dict[str, str] = {}  # run name -> its trace file, where no events file was found beside it
    for trace in traces:
        try:
            source = trace
            if _foreign(args) and not _on_disk(trace) and shipped_trace_name(trace) is not None:
                # (they were dropped without a word; for a list of traces they are meant for the others)
                print(f"adaptive-eval: {trace}: a shipped real trace, read as it is: --eval, --stream, --step-column "
                      f"and --keep-last-run read trace files (./{trace} reads a file or folder of that name)",
                      file=sys.stderr)
            if _foreign(args) and _on_disk(trace):  # (its events file beside it, as for a trace read as is)
                source = _load_trace_file(trace, args)
                sidecar = events_path(trace)
                events = args.events if args.events is not None else (str(sidecar) if sidecar is not None else None)
            else:
                if _on_disk(trace):  # read once, for the replay and the notes (its sidecar: by its source)
                    source = read_trace(trace)
                events = args.events
            run = replay_trace(source, cfg, seed=args.seed, events=events)
            if names.count(pathlib.Path(trace).name) > 1:  # a/run.csv and b/run.csv: named by their paths
                run.name = trace
            used = events if events is not None else (events_path(trace) if _on_disk(trace) else None)
            if used is not None:
                read_from[run.name] = str(used)
            elif _on_disk(trace):
                on_disk[run.name] = trace
            _stride_note(run.name, run.steps, run.first_step, run.last_step, cfg)
            loaded = source if isinstance(source, Trace) else _load(source)[0]  # (a shipped trace by name)
            # (the config the run was replayed under: a shipped trace's direction, not yours left at its default; a
            # lower-is-better shipped loss was said to be replayed higher-is-better, which it was not; a probe)
            _truth_note(loaded, getattr(run, "config", cfg), _eval_names(args, trace))
            if run.evals and not any(e["metrics"] for e in run.evals):
                from adaptive_eval.trace import VALIDATION_PREFIXES

                # (verl's validation columns, never watched: a val_loss stream is the user's to watch)
                likely = [n for n in loaded.metric_names() if n.startswith(VALIDATION_PREFIXES)]
                if likely:  # (a gate passed on evaluations that measured nothing, their eval columns unread:
                    #         the policies' sizes and intervals were not the run's; found by a new user)
                    raise ValueError(f"{run.name}: no eval ground truth (no eval/<metric> column): every simulated "
                                     "evaluation measured nothing; name the eval column with --eval COL (--eval "
                                     f"TRACE=COL for one trace of several): {', '.join(likely[:6])}"
                                     + (f" and {len(likely) - 6} more" if len(likely) > 6 else ""))
                _no_truth_warning(loaded, shipped=not _on_disk(trace))
            _budget_note(loaded, cfg, run.deferrals, len(run.evals), run.name)
            run.config_name = " ".join([args.config, *(f"--set {o}" for o in args.overrides)])
            rows += check(run, within=args.within, max_samples_per_1k=args.max_samples_per_1k)
        except (ValueError, OSError) as exc:
            if len(traces) == 1:
                raise
            errors.append(str(exc))  # the other traces are still checked (each message names its trace; listed
            #                           at the end)
    if rows:
        print(format_rows(rows))
    failed = [r for r in rows if not r.ok]
    for r in failed:
        print("\n" + r.message)
    if errors:
        print(f"\n{len(errors)} of {len(traces)} traces could not be checked:\n  " + "\n  ".join(errors))
        return 2
    if failed:
        print(f"\n{len(failed)} of {len(rows)} expectations failed")
        return 1
    empty = [r.trace for r in rows if r.expectation == NO_EXPECTATIONS]
    # (every trace read without an events file, not only those with nothing to check: with --max-samples-per-1k the
    # cost row passed the gate, the misnamed file's events unread; a review)
    misnamed = {name: near for name, path in on_disk.items() if (near := misnamed_events(path))}
    for name in empty:
        near = misnamed.get(name, [])
        why = (f"{read_from[name]} lists no events, quiet windows or max_samples_per_1k" if name in read_from else
               f"no events file beside it, such as {pathlib.Path(name).name}.events.yaml"
               + (f" (not read: {', '.join(near)})" if near else "") + "; no --events FILE")
        warnings.warn(f"{name}: no expectations, so nothing was checked but that it replays ({why}; no "
                      "--max-samples-per-1k)"
                      + ("; --within applies to events, and there are none" if args.within is not None else ""),
                      RuntimeWarning, stacklevel=2)
    if rows and len(empty) == len(rows):
        # (a gate with nothing to check is not a pass: a misnamed events file turned CI green; found by a new user)
        print(f"\nnothing was checked: {'no trace has' if len(rows) > 1 else 'the trace has no'} expectations")
        return 1
    if misnamed:
        # (one of several traces with its events file misnamed passed the gate, its expectation unread; a probe)
        print("\n" + "\n".join(f"{name}: its events file is misnamed ({', '.join(near)}; read: "
                                f"{(p := pathlib.Path(name)).name}.events.yaml, .yml or .json, or "
                                f"{p.stem}.events.yaml), so its events were not checked"
                                for name, near in misnamed.items()))
        return 1
    return 0


def _tune_cases(args: argparse.Namespace, base,
                why: str = "cross-validation would score a preset on a run it was tuned on") -> list:
    from adaptive_eval.tune import TuneError, case_from_file, case_from_real, case_from_synthetic

    def key(trace: str) -> str:  # (./run.csv and run.csv are one trace)
        return trace if trace.startswith(("real:", "synthetic:")) else os.path.realpath(trace)

    try:
        _refuse_repeated_traces(args.trace, why)
    except ValueError as exc:
        raise TuneError(str(exc)) from None
    events: dict[str, list[int]] = {}
    for item in args.events:
        name, sep, steps = item.rpartition("=")
        try:
            if not sep:
                raise ValueError
            events[key(name)] = [int(s) for s in steps.split(",") if s.strip()]
        except ValueError:
            raise TuneError(f"--events {item!r}: expected TRACE=STEP[,STEP...] (integer steps)") from None
        if not events[key(name)]:  # (it replaced the trace's sidecar events with none: "no events in any trace")
            raise TuneError(f"--events {item!r}: no step after '=' (an unset shell variable?); leave --events out "
                            "for a trace whose events file says them")
    unknown = [item.rpartition("=")[0] for item in args.events
               if key(item.rpartition("=")[0]) not in {key(t) for t in args.trace}]
    if unknown:
        raise TuneError(f"--events names {unknown[0]!r}, which is not one of the traces given")
    try:
        _check_trace_prefixes(args, [t for t in args.trace if not t.startswith(("real:", "synthetic:"))])
    except ValueError as exc:
        raise TuneError(str(exc)) from None
    cases = []
    for t in args.trace:
        if t.startswith("synthetic:") and key(t) in events:
            raise TuneError(f"--events {t}=...: synthetic:SEED is a suite of runs, each with its own events")
        if t.startswith("real:"):
            try:
                case = case_from_real(t[len("real:"):])
            except KeyError as exc:
                raise TuneError(str(exc.args[0])) from None
            steps = events.get(key(t))
            if steps is not None:  # (accepted, then the shipped annotation was scored whatever they said; a probe)
                from adaptive_eval.tune import _index_events

                first, last = case.trace.records[0].step, case.trace.records[-1].step
                outside = [s for s in steps if not first <= s <= last]
                if outside:
                    raise TuneError(f"--events {t}=...: step{'s' if len(outside) > 1 else ''} "
                                    f"{', '.join(map(str, outside))} outside the trace's steps {first}-{last}")
                case.events, case.directions = _index_events(case.trace, steps), None
            cases.append(case)
        elif t.startswith("synthetic:"):
            from adaptive_eval.synthetic import suite

            try:
                seed = int(t[len("synthetic:"):])
            except ValueError:
                seed = -1
            if seed < 0:  # (-1 read numpy's "expected non-negative integer", naming nothing; a probe)
                raise TuneError(f"{t}: expected synthetic:SEED (a non-negative integer seed of the synthetic suite)")
            cases.extend(case_from_synthetic(st) for st in suite(seed, per_kind=1))
        else:
            steps = events.get(key(t))
            directions = None
            case_base = base
            if steps is None:  # the events file beside the trace, as adaptive-eval check reads it
                from adaptive_eval.testing import ExpectationError, events_path, load_expectations

                sidecar = events_path(t)
                try:
                    found = load_expectations(sidecar).events if sidecar is not None else ()
                except ExpectationError as exc:
                    raise TuneError(str(exc)) from None
                steps = [e.step for e in found]
                # (their direction too: read from the truth, a silent degradation whose next checkpoints
                # still rose was scored "up", confirmed at once; found by a new-user probe)
                directions = [e.direction for e in found]
                named = {str(e.metric).removeprefix("eval/") for e in found if e.metric}
                if len(named) > 1:
                    raise TuneError(f"{sidecar}: its events name {' and '.join(sorted(named))}: tune scores a run on "
                                    "one metric; keep one metric's events there (check judges each on its own)")
                if named:
                    # the metric its events name is what they are scored on, as check scores them (tune took
                    # the first eval column, another suite's; and with --config's evaluation.metric set, that one,
                    # a misspelt name in the events file unsaid; a probe).  The trials still track the config's.
                    from omegaconf import OmegaConf

                    case_base = OmegaConf.merge(base, {"evaluation": {"metric": named.pop()}})
            as_named = _eval_names(args, t)  # (--eval's columns, for tune's hints)
            try:
                case = case_from_file(t, case_base, steps,
                                      trace=_load_trace_file(t, args) if _foreign(args) else None,
                                      eval_columns=as_named)
            except TuneError as exc:
                if directions is None:  # (--events: the steps are the command line's)
                    raise
                # (the events file read beside the trace: an event step, or the metric its events name, is its
                # doing; the error named neither it nor that, "evaluation.metric: 'acc' is not ..."; a probe)
                raise TuneError(f"{exc} (events from {sidecar}"
                                + (f", whose events name the metric {case_base.evaluation.metric}" if named or
                                   case_base is not base else "") + ")") from None
            if directions is not None and any(directions):
                case.directions = list(directions)  # (case_from_file kept every event, in this order)
            if len(case.trace) > 1:
                _stride_note(t, len(case.trace), case.trace.records[0].step, case.trace.records[-1].step, base)
            _truth_note(case.trace, base, as_named)
            cases.append(case)
    return cases


def _cmd_tune(args: argparse.Namespace) -> int:
    from adaptive_eval.tune import TuneError, check_base, check_input, clipped_base, table, tune

    base = load_config(args.config, args.overrides)
    objectives = args.objective or ["cost", "delay", "regret"]
    try:
        if args.folds < 1:
            raise TuneError(f"--folds must be at least 1, got {args.folds}")
        cases = _tune_cases(args, base)
        check_input(cases, objectives, args.trials)
        check_base(base)
        _check_writable(args.out)
        presets = os.path.join(args.out, "presets")
        if os.path.exists(presets) and not os.path.isdir(presets):  # (found after every trial had run; a probe)
            raise TuneError(f"--out {args.out}: {presets} is a file, not a folder: tune writes its presets there")
    except TuneError as exc:
        print(f"adaptive-eval tune: {exc}", file=sys.stderr)
        return 2
    print(f"tuning on {len(cases)} run(s), {sum(len(c.events) for c in cases)} event(s), objectives "
          f"{', '.join(objectives)}, {args.trials} trials, seed {args.seed}; scored on "
          + ", ".join(f"{c.name}: {c.metric}" for c in cases[:6]) + (" ..." if len(cases) > 6 else ""),
          file=sys.stderr)
    if clipped := clipped_base(base):
        print("trial 0, the base config, runs its values outside the searched ranges clipped into them: "
              + "; ".join(clipped), file=sys.stderr)
    # Every trial replays every trace with a new evaluator, whose notes "(said once)" are once per evaluator: said
    # once per tune here, whatever their values (a note on a suite's pass@k came 3 times in 4 trials, the budget's
    # held alarm 14 times in 30; found by a new-user probe and a fresh-clone check); so are replay's warnings.
    from adaptive_eval.types import SaidOnce

    with SaidOnce(templates=True):
        result = tune(cases, base, objectives=objectives, trials=args.trials, seed=args.seed, out_dir=args.out,
                      progress=not args.no_progress, n_folds=args.folds)
    names = [os.path.relpath(p, args.out) for p in (result.written or [])]
    if os.path.exists(os.path.join(args.out, "trials.jsonl")):
        names.insert(0, "trials.jsonl")
    presets = [n for n in names if n.startswith("presets")]
    wrote = ", ".join([n for n in names if not n.startswith("presets")]
                      + ([f"presets/point-*.yaml ({len(presets)})"] if presets else []))
    if result.refused:
        print(f"{len(result.refused)} of the {len(result.trials) + len(result.refused)} trials run were refused by "
              f"the config's checks, so not scored (the first: {result.refused[0]})", file=sys.stderr)
    if not result.trials:
        why = "interrupted before any trial finished" if result.interrupted else "no trial was scored"
        print(f"{why}: nothing to choose, no preset written", file=sys.stderr)
        if wrote:  # (listed as written, a blank plot and header-only tables read as results; a probe)
            print(f"wrote {args.out}/: {wrote} (with no trial in them)")
        return 130 if result.interrupted else 1
    print(table(result))
    if result.interrupted:
        print(f"interrupted: kept the {len(result.trials)} finished trial(s)", file=sys.stderr)
    # The budget's note, as check gives it, on trial 0 (the base config): scores dominated by its deferrals said
    # nothing (a new-user probe: check said 260 deferrals for 7 evaluations on the same runs)
    for case, used, deferred, evals in result.first:
        _budget_note(case.trace, used, deferred, evals, f"trial 0 (the base config), {case.name}")
    with_events = sum(1 for c in cases if c.events)
    folds = min(args.folds, len(cases))
    # (a probe: one run left the held-out columns '-' with no word why, and --folds 5 on two runs became 2 silently)
    if folds < args.folds:
        print(f"  note: --folds {args.folds} on {len(cases)} run(s): {folds} fold(s), one run each"
              + ("; no cross-validation, so no held-out figures (give two runs or more)" if folds == 1 else ""),
              file=sys.stderr)
    elif folds == 1:
        print("  note: --folds 1: no cross-validation, so no held-out figures", file=sys.stderr)
    if "delay" in objectives and folds > 1 and with_events < folds:
        print(f"  note: {with_events} of the {len(cases)} runs have events and there are {folds} folds: a held-out "
              "delay is '-' where the runs left out have no event (give more runs with events, or --folds "
              f"{max(with_events, 1)})", file=sys.stderr)
    print(f"wrote {args.out}/: {wrote}")
    return 130 if result.interrupted else 0


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("adaptive-eval")
    except PackageNotFoundError:  # run from a source tree that is not installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="adaptive-eval",
        description="Decide when to evaluate a model during training and how many eval samples to spend: "
                    "try a preset on a recorded run (replay), see it on a demo training run (demo), draw a run "
                    "(plot), tune or check a preset, print a configuration.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("config", help="print the resolved configuration")
    _add_config_args(p)
    p.set_defaults(func=_cmd_config)

    p = sub.add_parser("replay", help="replay a recorded trace offline and write what would have been decided")
    p.add_argument("trace", help="a trace: CSV, JSONL, or a TensorBoard event folder; or a shipped real trace "
                                 "by name (real:NAME, or the bare NAME)")
    _add_config_args(p)
    p.add_argument("--out", default="runs/replay", help="output folder (default: runs/replay)")
    p.add_argument("--seed", type=_seed, default=0, help="seed of the simulated evaluations")
    p.add_argument("--no-tensorboard", action="store_true", help="do not write tb/")
    _add_trace_args(p)
    p.set_defaults(func=_cmd_replay)

    p = sub.add_parser("check", help="replay traces under a preset and check their expectations (events "
                                     "confirmed, quiet windows, cost): exit 1 when one fails, 2 on bad input")
    p.add_argument("trace", nargs="+", metavar="TRACE",
                   help="a trace file (its events in TRACE.events.yaml beside it), a folder of trace files, or a "
                        "shipped real trace name")
    p.add_argument("--config", metavar="F", default="default", action=_Once,
                   help="the preset under test: a YAML file or a preset name (default: default)")
    p.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], dest="overrides",
                   help="override one key of it (repeatable)")
    p.add_argument("--events", metavar="FILE", default=None,
                   help="an events file for every TRACE, instead of each trace's own")
    p.add_argument("--within", metavar="N", type=int, default=None,
                   help="every event must be confirmed within N steps (replaces the events' own 'within')")
    p.add_argument("--max-samples-per-1k", metavar="M", type=float, default=None,
                   help="at most M eval samples per 1,000 steps on each trace (with eval suites their cost units, "
                        "answers x cost + items x item_cost; records of a trace logged every k steps; training "
                        "steps with --set replay.every_step=true)")
    p.add_argument("--seed", type=_seed, default=0, help="seed of the simulated evaluations")
    _add_trace_args(p)
    p.set_defaults(func=_cmd_check)

    p = sub.add_parser("plot", help="draw a run, or several runs on shared axes (PNG; PDF or SVG by --out's suffix)")
    p.add_argument("dir", nargs="+", help="a run folder written by replay or demo (evals.jsonl, alarms.jsonl, tb/), "
                                          "your run's logging.tensorboard_dir, or a folder of runs (runs/demo: its "
                                          "adaptive and fixed runs)")
    p.add_argument("--out", default=None, help="the file to write, its format by its suffix: .png, .pdf, .svg "
                                               "(default: DIR/run.png for one run, runs.png in the common folder "
                                               "for several)")
    p.set_defaults(func=_cmd_plot)

    p = sub.add_parser("demo", help="train a model with a fault midway (rlvr: a GRPO policy; digits: a classifier); "
                                    "evaluate it adaptively and on fixed schedules at the same cost; write the runs")
    p.add_argument("--task", choices=TASKS, default=DEFAULT_TASK,
                   help=f"which training run (default: {DEFAULT_TASK})")
    p.add_argument("--out", default="runs/demo", help="output folder (default: runs/demo)")
    _add_config_args(p)
    p.add_argument("--steps", type=int, default=None,
                   help="training steps, at least 20; the fault comes halfway (default: rlvr 200, digits 3000)")
    p.add_argument("--fault", default=None,
                   help="rlvr: reward_hack (default), lr_blowup, entropy_collapse or none; digits: lr_blowup")
    p.add_argument("--seed", type=_seed, default=0, help="seed of the data split, weights and batches (default: 0)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("tune", help="search policy and detector parameters on recorded runs (Optuna); write the "
                                    "Pareto front and one preset per chosen point")
    p.add_argument("trace", nargs="+", help="a trace file (CSV, JSONL, TensorBoard folder), real:NAME (a shipped "
                                            "real trace) or synthetic:SEED (the synthetic suite of that seed)")
    _add_config_args(p)
    p.add_argument("--objective", action="append", choices=None, default=[], metavar="NAME",
                   help="cost, delay or regret (repeatable; default: all three)")
    p.add_argument("--trials", type=int, default=50, help="trials (default: 50)")
    p.add_argument("--seed", type=_seed, default=0, help="seed of the sampler (default: 0)")
    p.add_argument("--out", default="runs/tune", help="output folder (default: runs/tune)")
    p.add_argument("--events", action="append", default=[], metavar="TRACE=STEP[,STEP...]",
                   help="the steps of the changes in a trace file that a schedule should confirm (repeatable)")
    p.add_argument("--folds", type=int, default=3, help="folds of the runs for cross-validation (default: 3)")
    _add_trace_args(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_tune)
    return parser


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning as one line for a user of the command line (not the library's source line)."""
    print(f"adaptive-eval: warning: {message}", file=sys.stderr if file is None else file)


def main(argv: list[str] | None = None) -> int:
    import warnings

    parser = build_parser()
    args = parser.parse_args(argv)
    shown, warnings.showwarning = warnings.showwarning, _show_warning
    try:
        return args.func(args)
    except BrokenPipeError:  # (`adaptive-eval config | head`: "[Errno 32] Broken pipe", exit 2; a probe)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # (Python's own flush at exit would raise it again)
        return 0
    except (ConfigError, ValueError, OSError) as exc:
        print(f"adaptive-eval: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # (a Ctrl-C: a line and the shell's 130, not a traceback of where it landed; a probe)
        print(f"adaptive-eval {args.command}: interrupted", file=sys.stderr)
        return 130
    finally:
        warnings.showwarning = shown


if __name__ == "__main__":
    sys.exit(main())

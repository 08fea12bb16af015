"""Offline replay: drive an :class:`AdaptiveEvaluator` over a recorded trace with a simulated clock and a
simulated ``evaluate_fn``.

* Clock: the trace's ``time`` column (seconds since start; ``replay.trace_time: false`` ignores it) or
  ``replay.step_seconds`` per step, plus the simulated time of every evaluation so far (evaluations take
  wall time in a live run too).
* ``evaluate_fn``: built from the ``eval/<metric>`` columns, each carried forward between rows.  A column
  whose every value lies within [0, 1] is a proportion (unless its ``:std`` column says otherwise, or
  ``evaluation.metric_kinds``; see :func:`_column_kinds`): an eval of n items draws Binomial(n, p) correct
  answers.  Another metric with a column ``eval/<metric>:std`` (per-sample standard deviation) draws n
  samples of Normal(mean, std) (so the mean is Normal(mean, std/sqrt(n))); without it the value itself is
  returned.  The number of items is ``min(sample_size, replay.eval_set_size)``.
* Eval cost: ``replay.eval_fixed_seconds + replay.eval_seconds_per_sample * n`` on the simulated clock, so
  the budget policy acts as it would live.
* With ``evaluation.suites``: per-item ground truth, columns ``eval/<suite>/<metric>@<item>`` (each
  item's true probability of success or mean reward, carried forward; a mean reward's answers' sd in
  ``eval/<suite>/<metric>@<item>:std``), and each requested item is drawn ``samples_per_item`` times
  (Binomial per item, or Normal with the item's sd, so clustered data is simulated honestly); see
  :class:`_SuiteSimulatedEval` and :mod:`adaptive_eval.synthetic_items` for a generator of such traces.

The same trace, config and seed give byte-identical outputs.

Each record is one training step for the evaluator (one ``observe`` and one ``evaluate`` call), as in a live
run: the trigger's ``freq_steps``, the cooldown and the intervals count records.  A trace logged every k
steps replays with intervals k times longer in training steps, unless ``replay.every_step: true``: then
every training step from the first record's to the last is replayed (:func:`every_step`; the steps between
records observe nothing and evaluate the last recorded truth), so they count training steps.
"""

from __future__ import annotations

import bisect
import json
import math
import numbers
import os
import re
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from omegaconf import OmegaConf

from adaptive_eval.adaptive import AdaptiveEvaluator
from adaptive_eval.config import as_config, load_config
from adaptive_eval.loggers import MetricLogger, NullLogger
from adaptive_eval.types import EvalRequest, EvalResult, log_once

__all__ = ["ReplayResult", "SimClock", "every_step", "ground_truth", "replay", "replay_units", "write_outputs"]

MAX_FILLED_STEPS = 2_000_000  # replay.every_step: at most this many training steps (about 100 bytes each)


def at_weights_steps(trace):
    """``trace`` with each result an asynchronous run recorded (``record_to`` writes it, with ``async/latency_steps``
    L, at the step s it came back) moved to the step of the weights it measured, s - L: as ground truth it is those
    weights' (replayed at s, a collapse's evaluation measured the truth of the evaluation before: 0.702 where the
    live run measured 0.432, and check read "confirmed after 58 steps" where the live run confirmed after 2; a
    probe).  The trace itself when it has no such record.

    >>> from adaptive_eval.trace import Trace, TraceRecord
    >>> t = at_weights_steps(Trace([TraceRecord(4, {"loss": 1.0}), TraceRecord(6, {"loss": 2.0, "eval/acc": 0.5,
    ...                                                                        "async/latency_steps": 2.0})]))
    >>> [(r.step, r.metrics) for r in t.records]
    [(4, {'loss': 1.0, 'eval/acc': 0.5, 'async/latency_steps': 2.0}), (6, {'loss': 2.0})]
    """
    from adaptive_eval.trace import Trace, TraceRecord

    moves = {}
    for i, r in enumerate(trace.records):
        lag = r.metrics.get("async/latency_steps")
        if lag is not None and math.isfinite(lag) and lag >= 1 and any(k.startswith("eval/") for k in r.metrics):
            moves[i] = int(round(lag))
    if not moves:
        return trace
    # Onto the last record at or before s - L (a trace logged every k steps has none at s - L itself: a record made
    # there had no epoch nor time, which fired a false epoch trigger and turned the trace's time off; a review)
    steps = [r.step for r in trace.records]
    kept = [dict(r.metrics) for r in trace.records]
    for i, lag in moves.items():
        moved = {k: kept[i].pop(k) for k in list(kept[i]) if k.startswith("eval/") or k == "async/latency_steps"}
        kept[max(bisect.bisect_right(steps, steps[i] - lag) - 1, 0)].update(moved)
    records = [TraceRecord(r.step, m, r.epoch, r.time) for r, m in zip(trace.records, kept)]
    return Trace(records, trace.source)


def every_step(trace):
    """``trace`` with a record at every training step from its first record's step to its last: the steps
    between two records get a record without metrics (nothing observed, the eval truth carried forward), the
    epoch of the record before them and, where every record has a time, a time interpolated linearly.  The
    trace itself when no step is missing.  Raises ``ValueError`` (naming ``replay.every_step``) for a trace
    spanning more than 2,000,000 steps (a log of environment frames: replay it record by record).

    >>> from adaptive_eval.trace import Trace, TraceRecord
    >>> t = every_step(Trace([TraceRecord(10, {"loss": 1.0}, 0, 5.0), TraceRecord(13, {"loss": 2.0}, 0, 11.0)]))
    >>> [(r.step, r.metrics, r.time) for r in t.records]
    [(10, {'loss': 1.0}, 5.0), (11, {}, 7.0), (12, {}, 9.0), (13, {'loss': 2.0}, 11.0)]
    """
    from adaptive_eval.trace import Trace, TraceRecord

    records = trace.records
    if len(records) < 2 or all(b.step - a.step <= 1 for a, b in zip(records, records[1:])):
        return trace
    span = records[-1].step - records[0].step + 1
    if span > MAX_FILLED_STEPS:
        raise ValueError(f"{trace.source or 'trace'}: replay.every_step: the trace spans {span:,} steps in "
                         f"{len(records):,} records, more than {MAX_FILLED_STEPS:,} to replay one by one; replay it "
                         "record by record (replay.every_step: false) with freq_steps in records")
    timed = all(r.time is not None for r in records)
    out = []
    for a, b in zip(records, records[1:]):
        out.append(a)
        gap = b.step - a.step
        for j in range(1, gap):
            t = a.time + (b.time - a.time) * j / gap if timed else None
            out.append(TraceRecord(a.step + j, {}, a.epoch, t))
    out.append(records[-1])
    return Trace(out, trace.source)


class SimClock:
    """The simulated clock: the trace's time plus the simulated evaluation time so far."""

    def __init__(self) -> None:
        self.trace_time = 0.0
        self.eval_time = 0.0

    def __call__(self) -> float:
        return self.trace_time + self.eval_time


@dataclass
class ReplayResult:
    evals: list[dict] = field(default_factory=list)  # evals.jsonl lines
    alarms: list[dict] = field(default_factory=list)  # alarms.jsonl lines
    deferrals: list[dict] = field(default_factory=list)
    summary: dict = field(default_factory=dict)
    results: list[EvalResult] = field(default_factory=list)

    def listen(self, event: dict) -> None:
        """An :meth:`AdaptiveEvaluator.add_listener` callback that collects the output lines."""
        kind = event["kind"]
        if kind == "alarm":
            self.alarms.append({k: event[k] for k in ("step", "stream", "detector", "direction", "location")})
        elif kind == "eval":
            self.results.append(event["result"])
            self.evals.append(event["result"].to_dict())
        elif kind == "deferred":
            self.deferrals.append({"step": event["step"], "reason": event["reason"]})


def _split_columns(names: Iterable[str], source: str = "") -> tuple[list[str], dict[str, str | None]]:
    """(cheap stream columns, {eval metric: its std column or None}); a ``ValueError`` naming ``source`` for an
    eval column with no metric name (``eval/``: replayed as the metric '', which check then could not name)."""
    # Tags the evaluator itself writes to TensorBoard are not data: replaying a run's tb/ folder watches
    # its streams/<name> and evaluates from its eval/<metric> means.
    names = list(names)
    present = set(names)

    def derived(n: str) -> bool:
        # What an evaluation derives from a metric is not ground truth of its own: its per-stratum means
        # (report_strata) and its pass@k / best@k / worst@k / maj@k (replay derives them again) -- when the
        # metric itself is in the trace.  A pass@1 column alone (verl's, lm-eval's) is the ground truth.
        return _derived_from(n, present)

    from adaptive_eval.trace import _HF_TB_BOOKKEEPING

    # (nor is a Hugging Face Trainer's bookkeeping, eval/runtime and the like, in any format: a W&B export's or a
    # JSONL log's eval/runtime was an eval metric of its own, "a percentage?", and tune scored it; found by a
    # new-user probe)
    names = [n for n in names if not n.startswith(("controller/", "alarms/", "async/")) and n not in _HF_TB_BOOKKEEPING
             and not (n.startswith("eval/") and n.endswith(("/ci_low", "/ci_high", "/n", "/samples_per_item", "/nan")))
             and not (n.startswith("eval/") and "/paired_diff" in n)
             and not (n.startswith("eval/") and derived(n))]
    nameless = [n for n in names if n in ("eval/", "eval/:std")]
    if nameless:
        raise ValueError(f"{source + ': ' if source else ''}column {nameless[0]!r} has no metric name after 'eval/' "
                         "(an eval column is eval/<metric>: rename it, eval/accuracy say)")
    evals = {}
    for n in names:
        if n.startswith("eval/") and not n.endswith(":std"):
            std = f"{n}:std"
            evals[n[len("eval/"):]] = std if std in names else None
    from adaptive_eval.trace import BOOKKEEPING_PREFIXES, VALIDATION_PREFIXES

    streams = [n for n in names if not n.startswith(("eval/", *VALIDATION_PREFIXES, *BOOKKEEPING_PREFIXES))]
    return streams, evals


def _refuse_negative_std(trace, eval_cols: dict[str, str | None]) -> None:
    """ValueError naming the first negative value of an ``eval/<metric>:std`` column (it failed every simulated
    evaluation at those rows with numpy's "scale < 0", and the replay exited 0; a new user's probe)."""
    columns = [c for c in eval_cols.values() if c is not None]
    for rec in trace.records if columns else ():
        for col in columns:
            v = rec.metrics.get(col)
            if v is not None and v < 0:
                raise ValueError(f"{trace.source + ': ' if trace.source else ''}step {rec.step}: {col!r} is {v:g}: "
                                 "a standard deviation is never negative")


def _refuse_bookkeeping(streams: Iterable[str], source: str | None) -> None:
    """ValueError for a stream to watch that is verl's timing or throughput (``trace.BOOKKEEPING_PREFIXES``)."""
    from adaptive_eval.trace import BOOKKEEPING_PREFIXES

    named = [s for s in streams if s.startswith(BOOKKEEPING_PREFIXES)]
    if named:
        raise ValueError(f"{source + ': ' if source else ''}{', '.join(map(repr, named))}: verl's timing or "
                         "throughput, the machine's and not the model's, is never watched (a slower node raised "
                         "alarms and evaluations); copy it under another name to watch it")


def _column_kinds(trace, eval_cols: dict[str, str | None], cfg) -> dict[str, str]:
    """How replay simulates each eval metric: ``"proportion"`` (Binomial answers) or ``"mean"`` (Normal
    samples with its ``:std``, else the value itself).

    ``evaluation.metric_kinds`` decides where it names the metric.  Otherwise a metric is a proportion when
    every value of its column lies within [0, 1] (the whole column, so one metric is not simulated two ways
    in one run) and its ``:std`` column, if any, is what 0/1 answers would have (within 10% of
    ``sqrt(p (1 - p))`` at every row giving both: lm-eval's accuracies); an eval loss below 1 with its own
    ``:std`` is a mean."""
    declared = dict(cfg.evaluation.metric_kinds or {})
    out = {}
    for name, std_col in eval_cols.items():
        kind = declared.get(name, declared.get(f"eval/{name}"))
        if kind is None:
            col, ok = f"eval/{name}", True
            for rec in trace.records:
                v = rec.metrics.get(col)
                if v is None or not math.isfinite(v):
                    continue
                if not 0.0 <= v <= 1.0:
                    ok = False
                    break
                sd = rec.metrics.get(std_col) if std_col is not None else None
                if sd is not None and math.isfinite(sd):
                    bern = math.sqrt(v * (1.0 - v))
                    if abs(sd - bern) > max(0.1 * bern, 1e-3):
                        ok = False
                        break
            kind = "proportion" if ok else "mean"
        out[name] = str(kind)
    return out


class _SimulatedEval:
    """A simulated ``evaluate_fn`` over the carried-forward eval columns."""

    def __init__(self, metrics: dict[str, str | None], cfg, clock, seed: int, kinds: dict[str, str] | None = None):
        self.metrics = metrics
        self.kinds = kinds if kinds is not None else {}
        self.truth: dict[str, float] = {}
        self.std: dict[str, float] = {}
        self.clock = clock
        self.rng = np.random.Generator(np.random.PCG64(seed))
        self.set_size = int(cfg.replay.eval_set_size)
        self.fixed = float(cfg.replay.eval_fixed_seconds)
        self.per_sample = float(cfg.replay.eval_seconds_per_sample)
        self.evaluator = None  # the replayed AdaptiveEvaluator (set by replay)

    def snapshot(self) -> tuple:
        """The ground truth now (a kept checkpoint's, for ``replay.checkpoint_every``)."""
        return dict(self.truth), dict(self.std)

    def restore(self, snap: tuple) -> tuple:
        """Put ``snap`` (:meth:`snapshot`) in place; the truth it replaced."""
        now = self.snapshot()
        self.truth, self.std = dict(snap[0]), dict(snap[1])
        return now

    def update(self, metrics: dict[str, float]) -> None:
        for name, std_col in self.metrics.items():
            v = metrics.get(f"eval/{name}")
            if v is not None:
                self.truth[name] = v
            if std_col is not None and std_col in metrics:
                self.std[name] = metrics[std_col]

    def __call__(self, request: EvalRequest) -> dict:
        n = len(request.indices(self.set_size))
        self.clock.eval_time += self.fixed + self.per_sample * n
        out = {}
        for name in self.metrics:
            v = self.truth.get(name)
            if v is None:
                continue
            if not math.isfinite(v):
                out[name] = v
            elif 0.0 <= v <= 1.0 and self.kinds.get(name, "proportion") == "proportion":
                k = int(self.rng.binomial(n, v))
                values = np.zeros(n)
                values[:k] = 1.0
                out[name] = values
            elif name in self.std and math.isfinite(self.std[name]) and n > 0:
                out[name] = self.rng.normal(v, self.std[name], size=n)
            else:
                out[name] = v
        if not out and self.evaluator is not None:
            # no ground truth yet: replay says so itself; the evaluator's "evaluate_fn returned no metric ... a
            # missing return?" would blame a function the user did not write (found in review)
            self.evaluator._untracked_said = True
        return out


_ITEM_COLUMN = re.compile(r"^(?P<suite>[^/]+)/(?P<metric>.+)@(?P<item>\d+)$")
# (a metric's aggregations, weighted_mean and p<q>, are derived too: a recorded run's eval/reward/p90 was ground truth
# of its own, drawn as a proportion; a new user's probe)
_DERIVED = re.compile(r"/stratum=|/((pass|best|worst|maj)@\d+|weighted_mean|p\d+)(:std)?$")


def _derived_from(name: str, present, always: str | None = None) -> bool:
    """Whether column ``name`` is what an evaluation derives from a metric in ``present`` (column names, or a
    metric's per-item columns ``<m>@<item>``), or whose derivation holds ``always`` (a suite's maj@k: its answers
    are never in a trace)."""
    found = _DERIVED.search(name)
    if found is None:
        return False
    base = name[:found.start()]
    return (always is not None and always in name[found.start():]) or base in present or any(
        m.startswith(base + "@") for m in present)


def _runs(flags: list) -> list[tuple[int, int]]:
    """``(start, stop)`` index ranges of the runs of True in ``flags``."""
    out, start = [], None
    for i, flag in enumerate([*flags, False]):
        if flag and start is None:
            start = i
        elif not flag and start is not None:
            out.append((start, i))
            start = None
    return out


def _without_weights(cfg):
    """``cfg`` without its ``weighted_mean`` aggregations, said once: a trace holds no per-item weights, and every
    replayed evaluation of a run that asked for one failed, naming the weights (a new user's probe)."""
    aggs = cfg.evaluation.aggregations
    weighted = sorted(name for name, kinds in aggs.items() if "weighted_mean" in kinds)
    if not weighted:
        return cfg
    tracked = cfg.evaluation.metric
    if tracked is not None and tracked.endswith("/weighted_mean"):
        # (the policies would track nothing, with only a note said once; review)
        of = tracked[:-len("/weighted_mean")]
        raise ValueError(f"replay: evaluation.metric {tracked!r} needs per-item weights, which a trace does not hold; "
                         f"track {of!r} in the replay (--set evaluation.metric={of})")
    log_once(("replay-weights", tuple(weighted)),
             "replay: a trace holds no per-item weights, so the weighted_mean aggregation of %s is left out of the "
             "replayed evaluations (evaluation.aggregations)", ", ".join(map(repr, weighted)))
    plain = OmegaConf.to_container(cfg, resolve=True)
    plain["evaluation"]["aggregations"] = {name: [k for k in kinds if k != "weighted_mean"]
                                           for name, kinds in aggs.items()}
    return as_config(plain)


class _SuiteSimulatedEval:
    """A simulated ``evaluate_fn`` for eval suites, from per-item ground truth.

    Columns ``eval/<suite>/<metric>@<item>`` hold item ``item``'s true probability of success (or mean
    reward), carried forward; ``eval/<suite>/<metric>`` a value for every item of the suite alike (ignored for a
    metric that has per-item columns: it is then their mean, as a recorded run writes it, not more truth).  A
    metric with per-item columns must have one for every item of its suite (a skipped index is an error at
    load, not a failed evaluation later); an item's NaN is data (its answers are NaN, which evaluations skip).
    Before every requested item has a value, the metric is not measured (no ground truth yet: recorded in
    ``unmeasured``, which :func:`replay` reports in one warning).  Each requested item gets
    ``samples_per_item`` draws: Bernoulli(p_i) for a probability (a metric without a ``:std`` column whose
    values all lie within [0, 1], or declared a proportion in ``evaluation.metric_kinds``), else
    Normal(mean_i, std_i) with the item's own ``eval/<suite>/<metric>@<item>:std`` (the sd of its answers, as
    :func:`adaptive_eval.convert.from_item_results` writes it for scores outside [0, 1]), else the suite's
    ``eval/<suite>/<metric>:std``, else 0 (``no_spread`` lists such metrics: every answer is then its item's
    value, and :func:`replay` warns).  An evaluation costs ``replay.eval_fixed_seconds +
    replay.eval_seconds_per_sample x sum over the suites it measured of items x (samples x cost +
    item_cost)`` on the simulated clock: a due suite none of whose metrics could be measured costs nothing
    (nothing was drawn; nothing when no suite was measured).
    """

    def __init__(self, columns: list[str], cfg, clock: SimClock, seed: int, source: str):
        self.suites = {name: dict(s) for name, s in OmegaConf.to_container(cfg.evaluation.suites).items()}
        self.clock = clock
        self.rng = np.random.Generator(np.random.PCG64(seed))
        self.fixed = float(cfg.replay.eval_fixed_seconds)
        self.per_sample = float(cfg.replay.eval_seconds_per_sample)
        self.where: dict[str, tuple[str, str, int | None]] = {}  # column -> (suite, metric, item or None)
        self.std_of: dict[str, tuple[str, str]] = {}
        self.item_std_of: dict[str, tuple[str, str, int]] = {}  # an item's answers' sd -> (suite, metric, item)
        whole: dict[str, tuple[str, str]] = {}
        items: dict[tuple[str, str], set[int]] = {}
        aggregate = cfg.evaluation.suite_aggregate
        present = {col[len("eval/"):] for col in columns}
        for col in columns:
            name = col[len("eval/"):]
            if aggregate and aggregate not in self.suites and name.partition("/")[0] == aggregate:
                continue  # the weighted mean over the suites a run recorded: derived again here, not ground truth
            if name.partition("/")[0] in self.suites and _derived_from(name, present, always="maj@"):
                # A suite metric's pass@k, quantile...: derived again here, not an item's truth, when its metric is in
                # the trace (as _split_columns reads it: a pass@1 column alone is the ground truth); its maj@k always
                # (answers, which no trace holds: a recorded run's eval/math/ans/maj@1 read as item 1 of a metric
                # "ans/maj", and replay refused the run; a new user's probe)
                continue
            if name.endswith(":std"):
                found = _ITEM_COLUMN.match(name[: -len(":std")])
                if found is not None and found["suite"] in self.suites:
                    self.item_std_of[col] = (found["suite"], found["metric"], self._item(found, col, source))
                    continue
                suite, _, metric = name[: -len(":std")].partition("/")
                if suite in self.suites:
                    self.std_of[col] = (suite, metric)
                continue
            found = _ITEM_COLUMN.match(name)
            suite, _, metric = name.partition("/")
            if found is not None and found["suite"] in self.suites:
                item = self._item(found, col, source)
                self.where[col] = (found["suite"], found["metric"], item)
                items.setdefault((found["suite"], found["metric"]), set()).add(item)
            elif suite in self.suites and metric:
                item_id = metric.rpartition("@")[2] if "@" in metric else None
                if item_id is not None and not item_id.isdigit():
                    size = int(self.suites[suite]["size"])
                    raise ValueError(f"{source}: column {col!r}: an item's id after '@' is its index, 0-{size - 1} "
                                     f"(evaluation.suites.{suite}.size={size}), not {item_id!r}; number the items")
                whole[col] = (suite, metric)
            else:
                hint = ("; the weighted mean over the suites a run recorded? set evaluation.suite_aggregate: "
                        f"{suite}" if not aggregate and metric and found is None else "")
                if found is not None or not hint:
                    # (a per-item column is no mean over suites: the hint led to dropping that suite's columns, and
                    # the next suite missing from the config was then refused with no hint at all; a probe)
                    others = sorted({c[len("eval/"):].partition("/")[0] for c in columns if "/" in c[len("eval/"):]}
                                    - set(self.suites) - ({aggregate} if aggregate else set()))
                    import difflib

                    near = difflib.get_close_matches(suite, list(self.suites), n=1)
                    # (a column of no suite at all, eval/accuracy, listed none: "missing from the config: " and
                    # nothing, no way on; a probe)
                    hint = ((f"; the trace's suites missing from the config: {', '.join(others)} (give each "
                             "evaluation.suites.<name>.size, its number of problems)") if others else
                            f"; {col!r} belongs to no suite: replay it without evaluation.suites, or name its "
                            f"column eval/<suite>/{col[len('eval/'):]}")
                    hint += f"; or did you mean {near[0]!r}?" if near else ""
                raise ValueError(f"{source}: column {col!r}: with evaluation.suites, eval columns are "
                                 f"eval/<suite>/<metric>[@<item>] of a configured suite ({', '.join(self.suites)})"
                                 f"{hint}")
        for (suite, metric), given in items.items():
            size = int(self.suites[suite]["size"])
            missing = [i for i in range(size) if i not in given]
            if missing:
                shown = ", ".join(map(str, missing[:5])) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
                raise ValueError(f"{source}: per-item ground truth of {suite}/{metric} has no column for item"
                                 f"{'s' if len(missing) > 1 else ''} {shown} (eval/{suite}/{metric}@<item> for "
                                 f"every item 0-{size - 1} of evaluation.suites.{suite}.size={size})")
        # (suite, metric) whose truth is one suite-wide value: every problem drawn at it (_warn_suite_truth)
        self.suite_wide: list[tuple[str, str]] = []
        for col, spot in whole.items():  # a suite-wide value, unless per-item columns say more
            if spot not in items:
                self.where[col] = (*spot, None)
                self.suite_wide.append(spot)
        covered = {suite for suite, _, _ in self.where.values()}
        empty = [name for name in self.suites if name not in covered]
        if empty and covered:  # (it would be "evaluated" with nothing to measure, on the budget of the others)
            raise ValueError(f"{source}: no ground truth for eval suite{'s' if len(empty) > 1 else ''} "
                             f"{', '.join(map(repr, empty))} (no eval/<suite>/<metric> column); the trace's suites: "
                             f"{', '.join(sorted(covered)) or 'none'}; leave "
                             + ", ".join(f"evaluation.suites.{name}" for name in empty) + " out of the config")
        if empty and not any(c.startswith("eval/") for c in columns):
            # (none at all: every evaluation measured nothing, exit 0, and the log blamed "evaluate_fn", which a
            # replay has not; a probe)
            raise ValueError(f"{source}: no ground truth for any eval suite ({', '.join(map(repr, empty))}): the trace "
                             "has no eval/ column (recorded while every evaluation failed?); replay it without "
                             "evaluation.suites to see the decisions on its streams alone")
        self.truth: dict[tuple[str, str], np.ndarray] = {}
        self.given: dict[tuple[str, str], np.ndarray] = {}
        self.std: dict[tuple[str, str], float] = {}
        self.item_std: dict[tuple[str, str], np.ndarray] = {}  # per item, NaN where none was given
        self.kinds: dict[tuple[str, str], str] = {}  # (suite, metric) -> proportion | mean (_suite_kinds)
        self.no_spread: list[tuple[str, str]] = []  # means without any :std column (set_kinds)
        # (suite, metric) -> ([steps of the evaluations that could not measure it], items without truth at the
        # first of them)
        self.unmeasured: dict[tuple[str, str], tuple[list[int], list[int]]] = {}
        self.evaluator = None  # the replayed AdaptiveEvaluator (set by replay)

    def _item(self, found: re.Match, col: str, source: str) -> int:
        """The item number of a per-item column, checked against its suite's size."""
        item = int(found["item"])
        size = int(self.suites[found["suite"]]["size"])
        if item >= size:
            raise ValueError(f"{source}: column {col!r}: item {item} is beyond suite {found['suite']!r} "
                             f"(evaluation.suites.{found['suite']}.size={size})")
        return item

    def set_kinds(self, trace, cfg) -> None:
        """Per (suite, metric), as :func:`_column_kinds` decides for one eval set: ``evaluation.metric_kinds``
        (``<suite>/<metric>``) where it names it; else a mean when it has a ``:std`` column or any value outside
        [0, 1] in the whole trace (a mean reward), a proportion (Bernoulli answers) otherwise."""
        declared = dict(cfg.evaluation.metric_kinds or {})
        with_std = set(self.std_of.values()) | {spot[:2] for spot in self.item_std_of.values()}
        outside: set[tuple[str, str]] = set()
        for rec in trace.records:
            for col, value in rec.metrics.items():
                spot = self.where.get(col)
                if spot is not None and math.isfinite(value) and not 0.0 <= value <= 1.0:
                    outside.add(spot[:2])
        for spot in {w[:2] for w in self.where.values()}:
            kind = declared.get(f"{spot[0]}/{spot[1]}")
            if kind is None:
                kind = "mean" if spot in with_std or spot in outside else "proportion"
            self.kinds[spot] = str(kind)
        # (a mean is drawn as Normal(mean_i, sd): with no sd anywhere, every answer is its item's value)
        self.no_spread = sorted(spot for spot, kind in self.kinds.items() if kind != "proportion"
                                and spot not in with_std)

    def snapshot(self) -> tuple:
        """The ground truth now, every item's (a kept checkpoint's, for ``replay.checkpoint_every``)."""
        return ({k: v.copy() for k, v in self.truth.items()}, {k: v.copy() for k, v in self.given.items()},
                dict(self.std), {k: v.copy() for k, v in self.item_std.items()})

    def restore(self, snap: tuple) -> tuple:
        """Put ``snap`` (:meth:`snapshot`) in place; the truth it replaced."""
        now = self.snapshot()
        self.truth, self.given, self.std, self.item_std = (
            {k: v.copy() for k, v in snap[0].items()}, {k: v.copy() for k, v in snap[1].items()}, dict(snap[2]),
            {k: v.copy() for k, v in snap[3].items()})
        return now

    def update(self, metrics: dict[str, float]) -> set[tuple[str, str]]:
        """Take a record's values; the (suite, metric) pairs it gave a value to."""
        touched = set()
        for col, value in metrics.items():
            spot = self.where.get(col)
            if spot is None:
                if col in self.std_of:
                    self.std[self.std_of[col]] = float(value)
                elif col in self.item_std_of:
                    suite, metric, item = self.item_std_of[col]
                    sds = self.item_std.get((suite, metric))
                    if sds is None:
                        sds = self.item_std[(suite, metric)] = np.full(int(self.suites[suite]["size"]), np.nan)
                    sds[item] = float(value)
                continue
            suite, metric, item = spot
            key = (suite, metric)
            arr = self.truth.get(key)
            if arr is None:
                size = int(self.suites[suite]["size"])
                arr = self.truth[key] = np.full(size, np.nan)
                self.given[key] = np.zeros(size, dtype=bool)
            if item is None:
                arr[:] = value
                self.given[key][:] = True
            else:
                arr[item] = value
                self.given[key][item] = True
            touched.add(key)
        return touched

    def mean(self, key: tuple[str, str]) -> float | None:
        """The suite's true mean of ``key``: the mean over its items (of the finite ones; NaN when none is);
        None until every item has a value."""
        given = self.given.get(key)
        if given is None or not given.all():
            return None
        arr = self.truth[key]
        finite = arr[np.isfinite(arr)]
        return float(finite.mean()) if finite.size else math.nan

    def _not_measured(self, key: tuple[str, str], step: int, items) -> None:
        self.unmeasured.setdefault(key, ([], [int(i) for i in items]))[0].append(int(step))
        if self.evaluator is not None:
            # replay's own warning names why (no ground truth yet): the evaluator's "not among an evaluation's
            # metrics ... did you mean" would blame the metric's name, and its "evaluate_fn returned no result for
            # suite ..., though due" an evaluate_fn there is none of (a new user's probe)
            self.evaluator._missing_said.add(key[0])
            if f"{key[0]}/{key[1]}" == self.evaluator._evaluation["metric"]:
                self.evaluator._untracked_said = True

    def __call__(self, request: EvalRequest) -> dict:
        out = {}
        cost = 0.0
        spots = sorted({w[:2] for w in self.where.values()})
        drawn = False
        for name, s in request.suites.items():
            suite = self.suites[name]
            idx = np.asarray(s.indices, dtype=np.int64)
            m = int(s.samples_per_item)
            measured = False
            for key in spots:
                if key[0] == name and key not in self.truth:  # (no column of it recorded yet)
                    self._not_measured(key, request.step, idx)
            for (sname, metric), arr in self.truth.items():
                if sname != name:
                    continue
                given = self.given[(sname, metric)][idx]
                if not given.all():  # no ground truth yet for some requested item: not measured
                    self._not_measured((sname, metric), request.step, idx[~given])
                    continue
                measured = True
                p = arr[idx]
                finite = np.isfinite(p)
                q = np.where(finite, p, 0.0)
                if self.kinds.get((sname, metric), "proportion") == "proportion" and np.all((q >= 0.0) & (q <= 1.0)):
                    c = self.rng.binomial(m, q)
                    values = (np.arange(m)[None, :] < c[:, None]).astype(np.float64)
                else:
                    sd = self.std.get((name, metric), 0.0)
                    own = self.item_std.get((name, metric))
                    if own is not None:  # each item's answers' own sd, the suite's where an item has none
                        sd = np.where(np.isfinite(own[idx]), own[idx], sd)[:, None]
                    values = self.rng.normal(q[:, None], sd, size=(len(idx), m))
                if not finite.all():
                    values[~finite] = p[~finite][:, None]  # a NaN or inf item: its answers are that value
                out[f"{name}/{metric}"] = values
            if measured:  # (a due suite that measured nothing drew no answers: it costs nothing)
                cost += len(idx) * (m * float(suite["cost"]) + float(suite["item_cost"]))
                drawn = True
        if drawn:
            self.clock.eval_time += self.fixed + self.per_sample * cost
        return out


def _refuse_item_columns(eval_cols: Iterable[str], source: str) -> None:
    """Per-item ground truth without ``evaluation.suites`` would replay as one metric per item: refuse it.
    Columns count as items when there are at least 3 of one metric, numbered 0, 1, 2, ... without a gap
    (``imagenet/acc@1`` and ``acc@5``, top-k accuracies, are metrics of their own)."""
    seen: dict[tuple[str, str], list[str]] = {}
    for name in eval_cols:
        found = _ITEM_COLUMN.match(name)
        if found is not None:
            seen.setdefault((found["suite"], found["metric"]), []).append(name)
    for (suite, metric), cols in seen.items():
        numbers = sorted(int(_ITEM_COLUMN.match(c)["item"]) for c in cols)
        if len(numbers) >= 3 and numbers == list(range(len(numbers))):
            cols = sorted(cols, key=lambda c: int(_ITEM_COLUMN.match(c)["item"]))
            raise ValueError(f"{source}: columns eval/{cols[0]}, eval/{cols[1]}, ... are per-item ground truth "
                             f"(eval/<suite>/<metric>@<item>), which needs eval suites: set evaluation.suites."
                             f"{suite}.size (the number of items) and evaluation.metric={suite}/{metric}")


def _simulator(trace, cfg, names: Sequence[str], eval_cols, clock, seed: int):
    if cfg.evaluation.suites:
        sim = _SuiteSimulatedEval([f"eval/{c}" for c in eval_cols] + [n for n in names if n.endswith(":std")
                                                                      and n.startswith("eval/")],
                                  cfg, clock, seed, trace.source)
        sim.set_kinds(trace, cfg)
        return sim
    _refuse_item_columns(eval_cols, trace.source)
    return _SimulatedEval(eval_cols, cfg, clock, seed, _column_kinds(trace, eval_cols, cfg))


def ground_truth(trace, cfg=None) -> dict[str, list[tuple[int, float]]]:
    """The true value of every eval metric, as replay simulates it: ``{metric: [(step, value), ...]}`` (names
    without ``eval/``) at the records that give it a value.  With ``evaluation.suites`` a metric with
    per-item columns is ``"<suite>/<metric>"``, the mean over the suite's items of their carried-forward
    values (from the first record at which every item has one); errors as :func:`replay` gives them.

    >>> from adaptive_eval import load_config
    >>> from adaptive_eval.trace import Trace, TraceRecord
    >>> rows = [TraceRecord(0, {"loss": 1.0, "eval/m/acc@0": 0.2, "eval/m/acc@1": 0.6}),
    ...         TraceRecord(1, {"loss": 1.0}), TraceRecord(2, {"eval/m/acc@1": 1.0})]
    >>> ground_truth(Trace(rows), load_config(overrides=["evaluation.suites.m.size=2"]))
    {'m/acc': [(0, 0.4), (2, 0.6)]}
    """
    cfg = as_config(cfg)
    # (an asynchronous run's results at the weights' steps, as replay reads them: check's level before an event and
    # tune's truth were the latency late, where replay's simulated evaluations were not; a review)
    trace = at_weights_steps(trace)
    names = sorted({k for r in trace.records for k in r.metrics})
    _, eval_cols = _split_columns(names, trace.source)
    sim = _simulator(trace, cfg, names, eval_cols, SimClock(), 0)
    out: dict[str, list[tuple[int, float]]] = {}
    for rec in trace.records:
        if isinstance(sim, _SuiteSimulatedEval):
            for key in sorted(sim.update(rec.metrics)):
                value = sim.mean(key)
                if value is not None:
                    out.setdefault(f"{key[0]}/{key[1]}", []).append((rec.step, value))
        else:
            for name in eval_cols:
                value = rec.metrics.get(f"eval/{name}")
                if value is not None:
                    out.setdefault(name, []).append((rec.step, float(value)))
    return out


def replay(trace, cfg=None, *, seed: int = 0, logger: MetricLogger | None = None,
           streams: Sequence[str] | None = None, progress: Callable[[int], None] | None = None) -> ReplayResult:
    """Replay ``trace`` (a :class:`~adaptive_eval.trace.Trace`, or a path :func:`~adaptive_eval.trace.read_trace`
    reads) under ``cfg`` (a loaded config, a dict, None for the defaults, or a preset name or YAML path as the
    CLI takes them); return what was decided.

    ``streams`` limits the cheap streams fed to ``observe`` (default: every non-eval column; one name may be
    given as a string).  ``seed`` seeds the simulated evaluations (and nothing else: decisions are
    deterministic given them): a non-negative integer.
    """
    if isinstance(trace, (str, os.PathLike)):
        from adaptive_eval.trace import read_trace

        trace = read_trace(trace)
    if isinstance(cfg, (str, os.PathLike)):
        cfg = load_config(cfg)
    if isinstance(streams, str):
        streams = [streams]
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    seed = int(seed)
    cfg = _without_weights(as_config(cfg))
    trace = at_weights_steps(trace)
    if cfg.replay.every_step:
        trace = every_step(trace)
    records = trace.records
    names = sorted({k for r in records for k in r.metrics})
    stream_cols, eval_cols = _split_columns(names, trace.source)
    if streams is not None:
        _refuse_bookkeeping(streams, trace.source)
        missing = [s for s in streams if s not in stream_cols]
        truth = [s for s in missing if s in names]
        if truth:  # an eval column: the ground truth replay evaluates from, not a stream
            raise ValueError(f"{trace.source}: {', '.join(map(repr, truth))}: an eval column (the ground truth "
                             "replay evaluates from), not a stream to watch; --stream takes the per-step columns "
                             "(copy it under another name to watch it as a stream)")
        if missing:
            raise ValueError(f"{trace.source}: no column {', '.join(map(repr, missing))} to watch "
                             f"(columns: {', '.join(names)})")
        stream_cols = list(streams)
    _refuse_negative_std(trace, eval_cols)
    watched = frozenset(stream_cols)
    clock = SimClock()
    asynchronous = bool(cfg.evaluation.asynchronous)
    # Asynchronous: an evaluation costs eval-device time (its own clock), not training time.
    device = SimClock() if asynchronous else None
    cost_clock = device if asynchronous else clock
    sim = _simulator(trace, cfg, names, eval_cols, cost_clock, seed)
    steps_per_epoch = _steps_per_epoch(records)
    if cfg.trigger.freq_epochs is not None and steps_per_epoch is None:
        lacking = [r.epoch is None for r in records]
        if any(lacking) and not all(lacking):  # (a run recorded before and after an upgrade; a probe)
            runs = [(records[i].step, records[j - 1].step) for i, j in _runs(lacking)]
            said = ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in runs[:5]) + (" ..." if len(runs) > 5 else "")
            raise ValueError(f"{trace.source}: trigger.freq_epochs needs an epoch at every step, and steps {said} "
                             f"have none ({sum(lacking)} of {len(records)} records; recorded by an adaptive_eval "
                             "before 2026-12-06, whose record_to left it empty?)")
        raise ValueError(f"{trace.source}: trigger.freq_epochs needs an epoch column in the trace")
    total = records[-1].step + 1 if records else 0
    extra = {}
    if asynchronous:
        from adaptive_eval.asynchronous import InlineExecutor

        extra = {"executor": InlineExecutor(), "eval_clock": device}
    if cfg.resources.enabled:
        # A trace holds no resource readings: this machine's (psutil, CUDA) would make replay depend on where
        # and when it runs.  A machine that never runs short instead, and a word that nothing is simulated.
        from adaptive_eval.scheduler import FakeResourceMonitor, ResourceSnapshot

        extra["resource_monitor"] = FakeResourceMonitor([ResourceSnapshot(source="replay (no readings)")])
        warnings.warn(f"{trace.source + ': ' if trace.source else ''}resources.enabled: a trace holds no "
                      "resource readings, so replay never defers an evaluation for resources (the decisions of "
                      "resources.enabled=false); to test the resource scheduler, give AdaptiveEvaluator a "
                      "resource_monitor=adaptive_eval.scheduler.FakeResourceMonitor([...])", RuntimeWarning,
                      stacklevel=2)
    from adaptive_eval.distributed import LOCAL

    evaluator = AdaptiveEvaluator(cfg, steps_per_epoch=steps_per_epoch, total_steps=total, clock=clock,
                                  logger=logger if logger is not None else NullLogger(), _simulated=True,
                                  group=LOCAL, **extra)
    # The simulated evaluations are numbers, not a model: they run as they are (evaluation.precision: none), not
    # under torch.inference_mode, which imported torch (2.8 s of every CLI replay here).  Nothing decided depends on
    # it; the config the run logs stays the user's.
    evaluator._evaluation["precision"] = "none"
    evaluator._budget_deferring_said = True  # (replay's own note says what a step and an evaluation take: _budget_note)
    evaluator._gap_said = True  # a trace logged every k steps: replay and check note the stride themselves
    if cfg.resources.enabled:
        # (the warning above says no resource is read: the stand-in monitor's "reads no accelerator memory here
        # (FakeResourceMonitor's readings ...)", of a monitor the user never gave, added only noise; a probe)
        evaluator.resources._unread_said = True
    sim.evaluator = evaluator
    if asynchronous:
        evaluator._async.options["precision"] = "none"
        evaluator._async.set_latency(eval_latency_model(trace, cfg))
    out = ReplayResult()
    evaluator.add_listener(out.listen)
    step_seconds = float(cfg.replay.step_seconds)
    use_time = bool(cfg.replay.trace_time) and all(r.time is not None for r in records)
    # Per eval metric, the step of the last record that gave its ground truth, as each evaluation drew from
    # it: with truth logged every k steps (checkpoints), an evaluation between two of them measures the
    # earlier checkpoint.
    truth: dict[str, int] = {}
    truth_at: dict[int, dict[str, int]] = {}
    # replay.checkpoint_every: the kept checkpoints' ground truth (what the simulator and `truth` held at their
    # step), the latest policy.lookback.keep of them; a request for one is drawn from it.
    every = cfg.replay.checkpoint_every
    kept: dict[int, tuple] = {}
    if every is not None and asynchronous:
        warnings.warn(f"{trace.source + ': ' if trace.source else ''}replay.checkpoint_every is ignored with "
                      "evaluation.asynchronous (policy.lookback runs in the synchronous path)", RuntimeWarning,
                      stacklevel=2)
        every = None

    def fn(request):
        if request.checkpoint is not None:
            if request.checkpoint not in kept:
                raise KeyError(f"replay: no kept checkpoint {request.checkpoint!r} (kept: {sorted(kept)})")
            snap, marks = kept[request.checkpoint]
            truth_at[request.step] = dict(marks)
            now = sim.restore(snap)
            try:
                return sim(request)
            finally:
                sim.restore(now)
        truth_at[request.step] = dict(truth)
        return sim(request)

    epoch_start = 0
    last_epoch = None
    for i, rec in enumerate(records):
        clock.trace_time = rec.time if use_time else (i + 1) * step_seconds
        metrics = rec.metrics
        if eval_cols:
            sim.update(metrics)
            for k in metrics:
                if k.startswith("eval/"):
                    for key in _truth_keys(k):
                        truth[key] = rec.step
        cheap = {k: v for k, v in metrics.items() if k in watched}
        if cheap:
            evaluator.observe(cheap, rec.step)
        epoch = rec.epoch if rec.epoch is not None else 0
        if epoch != last_epoch:
            epoch_start, last_epoch = i, epoch
        evaluator.evaluate(fn, epoch, i - epoch_start, rec.step)
        if every is not None and rec.step % every == 0:
            kept[rec.step] = (sim.snapshot(), dict(truth))
            while len(kept) > int(cfg.policy.lookback.keep):
                del kept[next(iter(kept))]
            evaluator.checkpoint_saved(rec.step, rec.step)
        if progress is not None and i % 1000 == 0:
            progress(i)
    # (an asynchronous evaluation still in flight joins here; the summary and the pick are taken after it: they
    # left it out, 5 evaluations and 1,371 samples where evals.jsonl, the reasons line and check had 6 and 1,526;
    # a probe)
    evaluator.close()
    s = evaluator.summary()
    samples = s["samples"]
    if isinstance(sim, _SuiteSimulatedEval):
        # An evaluation that measured nothing counts the items it asked for in the evaluator's summary; none
        # was drawn (it cost no simulated time either).
        samples -= sum(r.items for r in out.results if not r.metrics)
        _warn_suite_truth(sim, trace.source)
    if s["listener_errors"]:  # (logged with its traceback: replay's own listener, a bug)
        raise RuntimeError(f"{trace.source or 'replay'}: collecting the replayed decisions failed (see the log)")
    known = {key for n in names if n.startswith("eval/") for key in _truth_keys(n)}
    for e in out.evals:
        marks = _truth_marks(e, truth_at.get(e["step"]), known)
        if marks:
            e["truth_step"] = marks
    out.summary = {"steps": len(records), "evals": s["evals"], "samples": samples, "answers": s["answers"],
                   "eval_seconds": s["eval_seconds"], "train_seconds": clock.trace_time,
                   "alarms": s["alarms"], "deferrals": s["deferrals"], "eval_errors": s["eval_errors"],
                   "cancelled": s["cancelled"],
                   "best": _best(out.evals, cfg, evaluator._tracked),
                   # (summary.json, the picture and the table never said the evaluations were draws; a probe)
                   "simulated": "every evaluation drawn from the trace's ground truth; eval_seconds and train_seconds "
                                "on the simulated clock (replay.*)"}
    return out


def _warn_suite_truth(sim: _SuiteSimulatedEval, source: str | None) -> None:
    """One warning per suite metric that replay could not simulate honestly: a mean without any ``:std``
    (every answer its item's value, so intervals lack the spread within items), and a metric that due
    evaluations could not measure (no ground truth yet for some requested item)."""
    where = f"{source}: " if source else ""
    for suite, metric in sorted(sim.suite_wide):
        # (a recorded suites run holds only its means: its replay drew every problem at the mean, unsaid, and read
        # a between-problem variance of 0.0018 where the run's was 0.049; a new-user probe)
        warnings.warn(f"{where}eval/{suite}/{metric} is the suite's value alone, with no per-item truth (eval/{suite}/"
                      f"{metric}@<item>): every problem is simulated at it, so the replay has no spread between "
                      "problems (its intervals and sample sizes read as if every problem were alike, pass@k above "
                      "the run's); give per-item results (adaptive_eval.convert.from_item_results)",
                      RuntimeWarning, stacklevel=3)
    for suite, metric in sim.no_spread:
        warnings.warn(f"{where}eval/{suite}/{metric} is simulated as a mean (values outside [0, 1], or "
                      "evaluation.metric_kinds) and has no :std column, so every simulated answer is its item's "
                      "value: intervals hold no spread within items (a whole-suite evaluation's has zero width, "
                      f"and confirms any change at once); give each item's answers' sd as eval/{suite}/{metric}@"
                      "<item>:std (adaptive_eval.convert.from_item_results writes it) or the suite's as "
                      f"eval/{suite}/{metric}:std", RuntimeWarning, stacklevel=3)
    for (suite, metric), (steps, items) in sorted(sim.unmeasured.items()):
        shown = ", ".join(map(str, steps[:5])) + (f" and {len(steps) - 5} more" if len(steps) > 5 else "")
        missing = ", ".join(map(str, items[:5])) + (f" and {len(items) - 5} more" if len(items) > 5 else "")
        warnings.warn(f"{where}{len(steps)} evaluation{'s' if len(steps) > 1 else ''} of suite {suite!r} (step"
                      f"{'s' if len(steps) > 1 else ''} {shown}) did not measure {suite}/{metric}: no ground truth "
                      f"yet for item{'s' if len(items) > 1 else ''} {missing} (no eval/{suite}/{metric}@<item> "
                      "value at or before the first of them); an evaluation that measured none of a suite's "
                      "metrics is not billed (no simulated eval time, no items counted)", RuntimeWarning,
                      stacklevel=3)


def _truth_keys(column: str) -> tuple[str, ...]:
    """The eval metrics an ``eval/`` column may give ground truth for: ``eval/acc`` and ``eval/acc:std`` ->
    ``acc``; ``eval/math/acc@3`` -> ``math/acc@3`` (verl's ``val-core/.../mean@4`` is a metric of its own) and
    ``math/acc`` (a suite's item 3).

    >>> _truth_keys("eval/val-core/gsm8k/acc/mean@4:std")
    ('val-core/gsm8k/acc/mean@4', 'val-core/gsm8k/acc/mean')
    """
    key = column[len("eval/"):].split(":", 1)[0]
    return (key, key.rsplit("@", 1)[0]) if "@" in key else (key,)


def truth_metric(metric: str, known) -> str | None:
    """The ground-truth key of an evaluation's ``metric`` among ``known``: itself, or the metric it is
    derived from (``acc/pass@4`` -> ``acc``); None when no eval column gives it."""
    key = metric
    while True:
        if key in known:
            return key
        if "/" not in key:
            return None
        key = key.rsplit("/", 1)[0]


def _truth_marks(e: dict, at: dict | None, known) -> dict:
    """``truth_step`` of an evaluation: per metric whose ground truth is from another step than the
    evaluation's (an earlier checkpoint), that step; None when it had no ground truth yet."""
    if at is None:
        return {}
    marks = {}
    for metric in e.get("metrics", {}):
        key = truth_metric(metric, known)
        if key is None:
            continue
        t = at.get(key)
        if t != e["step"]:
            marks[metric] = t
    return marks


def replay_units(result: ReplayResult, cfg) -> list[float] | None:
    """With ``evaluation.suites``, what each replayed evaluation cost in the suites' units (items x (samples
    per item x ``cost`` + ``item_cost``), :func:`adaptive_eval.suites.result_units`); None without suites."""
    if not cfg.evaluation.suites:
        return None
    from adaptive_eval.suites import result_units

    suites = OmegaConf.to_container(cfg.evaluation.suites)
    return [float(result_units(suites, r.metrics) or 0.0) for r in result.results]


def eval_latency_model(trace, cfg):
    """Replay's latency model of asynchronous evaluation: a result integrates ``L`` steps after submission.

    ``L`` is ``evaluation.async_integrate_after_steps`` when set; otherwise the trace's recorded latencies
    (column ``async/latency_steps``, written by ``record_to`` of an asynchronous run): an evaluation submitted
    at step s takes the latency recorded last at or before s (the first one recorded before that).
    """
    fixed = cfg.evaluation.async_integrate_after_steps
    if fixed is not None:
        return int(fixed)
    recorded = [(r.step, int(round(r.metrics["async/latency_steps"]))) for r in trace.records
                if "async/latency_steps" in r.metrics and math.isfinite(r.metrics["async/latency_steps"])]
    if not recorded:
        raise ValueError(f"{trace.source}: replaying asynchronous evaluation needs a latency model: set "
                         "evaluation.async_integrate_after_steps, or replay a trace recorded by an asynchronous "
                         "run (column async/latency_steps)")
    steps = [s for s, _ in recorded]
    latencies = [max(0, lat) for _, lat in recorded]

    def latency(step: int) -> int:
        i = bisect.bisect_right(steps, step) - 1
        return latencies[max(i, 0)]

    return latency


def _best(evals: list[dict], cfg, tracked: str | None = None) -> dict | None:
    """The checkpoint :func:`adaptive_eval.scoring.pick_best` picks on the tracked metric (``tracked``: the one the
    evaluator chose for ``evaluation.metric: null``): step, estimate, interval (for ``summary.json``)."""
    from adaptive_eval.scoring import pick_best

    metric = cfg.evaluation.metric or tracked
    if metric is None:
        metric = next((m for e in evals for m in e["metrics"]), None)
    if metric is None:
        return None
    pick = pick_best(evals, metric, higher_is_better=bool(cfg.evaluation.higher_is_better))
    return None if pick is None else pick.to_dict()


def _steps_per_epoch(records) -> int | None:
    if not records or records[0].epoch is None:
        return None
    lengths = []
    run, cur = 0, records[0].epoch
    for r in records:
        if r.epoch != cur:
            lengths.append(run)
            run, cur = 0, r.epoch
        run += 1
    return max(lengths) if lengths else run


def _strict(obj):
    """``obj`` with NaN as null and +-inf as "inf"/"-inf": strict JSON (jq and other strict parsers refuse a
    bare NaN), read back by ``adaptive-eval plot``."""
    if isinstance(obj, float):
        if obj != obj:
            return None
        if obj in (math.inf, -math.inf):
            return "inf" if obj > 0 else "-inf"
        return obj
    if isinstance(obj, dict):
        return {k: _strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_strict(v) for v in obj]
    return obj


def _dump(obj) -> str:
    return json.dumps(_strict(obj), allow_nan=False, separators=(", ", ": "))


def write_outputs(result: ReplayResult, out_dir: str | os.PathLike) -> None:
    """Write ``evals.jsonl``, ``alarms.jsonl`` and ``summary.json`` into ``out_dir``."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "evals.jsonl"), "w", encoding="utf-8") as f:
        f.writelines(_dump(e) + "\n" for e in result.evals)
    with open(os.path.join(out_dir, "alarms.jsonl"), "w", encoding="utf-8") as f:
        f.writelines(_dump(a) + "\n" for a in result.alarms)
    with open(os.path.join(out_dir, "summary.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(_strict(result.summary), indent=2, allow_nan=False) + "\n")

"""Tuning a preset on recorded runs: the scoring harness (shared with ``benchmarks/policies.py``) and
``adaptive-eval tune`` (an Optuna multi-objective search, cross-validated over the runs).

A :class:`Case` is one run to replay: its trace, the steps of its events (changes a good schedule must
confirm), the true eval value at every record (``truth``), the eval metric and the eval set's size.
:func:`run_case` replays a config on it and scores it with :func:`adaptive_eval.scoring.score_run`
(cost, confirmed delays, needless evaluations, selection regret); :func:`aggregate` pools scores.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import logging
import math
import numbers
import re
import shlex
import signal
import statistics
import threading
from collections.abc import Mapping, Sequence

import numpy as np

from adaptive_eval.replay import _strict
from adaptive_eval.scoring import RunScore, score_run
from adaptive_eval.trace import eval_like
from adaptive_eval.types import PackageFilter

log = logging.getLogger("adaptive_eval")  # (the package's one logger: the CLI's filters apply to it)

__all__ = ["OBJECTIVES", "SPACE", "Case", "TuneError", "TuneResult", "aggregate", "apply_params", "case_from_file",
           "case_from_real", "case_from_synthetic", "check_base", "check_input", "cost_overrides", "pareto",
           "replay_case", "run_case", "score_case", "tune"]


@dataclasses.dataclass
class Case:
    """One run to replay and score.  ``events`` are record indices; ``truth[i]`` the true eval value at
    record ``i`` (None: no ground truth); ``metric`` the eval column without ``eval/``."""

    name: str
    trace: object
    events: list[int]
    truth: Sequence[float] | None
    metric: str | None
    higher_is_better: bool = True
    items: int = 500
    overrides: list[str] | None = None  # replay cost model for this run (None: cost_overrides(case))
    # each event's direction as its events file says it ("up", "down"; None: read from the truth), or None
    directions: list[str | None] | None = None
    # each event's own step (between two records of a trace logged every k steps), or None: its record's
    event_steps: list[int] | None = None

    @property
    def steps(self) -> int:
        return len(self.trace.records)


def case_from_synthetic(st) -> Case:
    """A :class:`~adaptive_eval.synthetic.SyntheticTrace` as a case (its steps are its record indices)."""
    return Case(f"synthetic/{st.name}", st.trace, [int(e.step) for e in st.events],
                [float(v) for v in st.truth], st.eval_metric[len("eval/"):], st.higher_is_better)


def _index_events(trace, steps: Sequence[int], *, with_steps: bool = False):
    """The record index of each event (the first record at or after its step; one past the trace is left out), or
    with ``with_steps`` those indices and the steps of the events kept."""
    index = [r.step for r in trace.records]
    out, kept = [], []
    for s in steps:
        i = int(np.searchsorted(index, s))  # the first record at or after the event's step
        if i < len(index):
            out.append(i)
            kept.append(int(s))
    return (out, kept) if with_steps else out


def case_from_real(name: str) -> Case:
    """A shipped real trace (:func:`adaptive_eval.convert.load_real`) as a case."""
    from adaptive_eval.convert import load_real

    return case_of_real(load_real(name))


def case_of_real(rt) -> Case:
    """A loaded shipped real trace (a ``RealTrace``) as a case."""
    metric = rt.eval_metric[len("eval/"):] if rt.eval_metric else None
    items = rt.items.get(rt.eval_metric, 500) if rt.eval_metric else 500
    truth = None if rt.truth is None else [float(v) for v in rt.truth]
    return Case(f"real/{rt.name}", rt.trace, _index_events(rt.trace, [e.step for e in rt.events]), truth, metric,
                rt.higher_is_better, items)


def cost_overrides(case: Case) -> list[str]:
    """The eval cost model, in the run's own time: a whole-set evaluation costs 3 training steps
    (0.5 fixed + 2.5 in proportion to the items), and the eval set is the case's own size.

    (A GRPO step that generates rollouts takes about as long as generating answers to a few hundred
    MATH-500 problems.)  Every schedule is replayed under the same model; only the budget policy reads it.
    """
    times = [r.time for r in case.trace.records]
    dt = 10.0
    if len(times) > 1 and all(t is not None for t in times):
        dt = float(np.median(np.diff(times)))
    dt = dt if dt > 0 else 10.0
    return [f"replay.step_seconds={dt}", f"replay.eval_fixed_seconds={0.5 * dt}",
            f"replay.eval_seconds_per_sample={2.5 * dt / case.items}", f"replay.eval_set_size={case.items}",
            "logging.tensorboard_dir=null"]


def case_config(case: Case, cfg):
    """``cfg`` (a loaded config) as :func:`replay_case` replays it on ``case``: under the case's cost model,
    tracking the metric the case is scored on, in its direction."""
    from omegaconf import OmegaConf

    overrides = cost_overrides(case) if case.overrides is None else case.overrides
    # The metric the case is scored on, in its direction: the policies followed the first eval column as
    # higher-is-better (distill_r1's validation loss: the peak policy re-measured its rises as new bests) while
    # the scoring read it lower-is-better.  A config's own evaluation.metric stands.
    tracked = [f"evaluation.metric={case.metric}"] if case.metric and cfg.evaluation.metric is None else []
    # (replay.every_step off: the case's trace is replayed as it is, filled when the case was made)
    return OmegaConf.merge(cfg, OmegaConf.from_dotlist([*overrides, *tracked, "logging.tensorboard_dir=null",
                                                        "replay.every_step=false",
                                                        f"evaluation.higher_is_better={bool(case.higher_is_better)}"]))


def replay_case(case: Case, cfg, *, seed: int = 0, deferrals: list | None = None) -> list[dict]:
    """Replay ``cfg`` (a loaded config) on ``case`` under the case's cost model (:func:`case_config`): its
    evaluations, with steps as record indices; the replay's deferral lines are added to ``deferrals`` if given."""
    from adaptive_eval.replay import replay, replay_units

    cfg = case_config(case, cfg)
    res = replay(case.trace, cfg, seed=seed)
    if deferrals is not None:
        deferrals.extend(res.deferrals)
    index = {r.step: i for i, r in enumerate(case.trace.records)}
    evals = [{**e, "step": index.get(e["step"], e["step"])} for e in res.evals]
    steps = [r.step for r in case.trace.records]
    for e in evals:
        if e.get("truth_step"):  # (trace steps, like "step": their record indices too)
            e["truth_step"] = {m: None if t is None else max(bisect.bisect_right(steps, t) - 1, 0)
                               for m, t in e["truth_step"].items()}
        for key in ("integrated_step", "evaluated_at"):  # (an asynchronous delay counts to integrated_step: a review)
            if e.get(key) is not None:
                e[key] = max(bisect.bisect_right(steps, e[key]) - 1, 0)
    units = replay_units(res, cfg)  # with suites, what each cost in their units (answers x cost + ...)
    for e, u in zip(evals, units or ()):
        e["units"] = u
    return evals


def score_case(case: Case, evals: list[dict], *, by: str = "shrunk", paired: bool = True) -> RunScore:
    """Score a case's evaluations (from :func:`replay_case`); ``paired``: a paired difference on shared items
    confirms a change too (:func:`adaptive_eval.scoring.confirmed_delay`)."""
    score = score_run(evals, steps=case.steps, full_size=case.items, events=case.events, truth=case.truth,
                      metric=case.metric, higher_is_better=case.higher_is_better, by=by, paired=paired,
                      directions=case.directions)
    if evals and all("units" in e for e in evals):  # eval suites: the cost is in their units, not items
        score = dataclasses.replace(score, samples=int(round(sum(e["units"] for e in evals))))
    steps = [r.step for r in getattr(case.trace, "records", ())]
    if steps and any(b - a != 1 for a, b in zip(steps, steps[1:])):
        # Delays in the trace's steps, as check and assert_confirmed count them (and --within, the cap of 100): in
        # records, a trace logged every 10 steps read 2 where check said 20 (a new-user probe).
        at = case.event_steps or [steps[e] for e in case.events]

        def in_steps(delays):
            return [None if d is None else steps[min(e + d, len(steps) - 1)] - s
                    for e, s, d in zip(case.events, at, delays)]

        score = dataclasses.replace(score, delays=in_steps(score.delays),
                                    delays_measured=in_steps(score.delays_measured),
                                    step_scale=float(np.median(np.diff(steps))))
    return score


class _Where(PackageFilter):
    """Names the trial and the run in what an evaluator says while tune replays it ("step 36: the budget holds
    back..." named neither: a new user could not tell which of their runs, nor under which parameters)."""

    def __init__(self, where: str):
        super().__init__()
        self.where = where

    def filter(self, record: logging.LogRecord) -> bool:
        where = self.where.replace("%", "%%") if record.args else self.where
        record.msg = f"{where}: {record.msg}"
        return True


def run_case(case: Case, cfg, *, seed: int = 0, by: str = "shrunk", deferrals: list | None = None) -> RunScore:
    """Replay ``cfg`` on ``case`` and score it (``deferrals``: see :func:`replay_case`)."""
    return score_case(case, replay_case(case, cfg, seed=seed, deferrals=deferrals), by=by)


def aggregate(scores: Sequence[RunScore], *, within: int = 25) -> dict:
    """Pooled figures: ``per_1k`` (eval items per 1,000 steps), ``median_delay`` (confirmed; a miss is
    infinite), ``confirmed`` (share of events confirmed within ``within`` steps; ``confirmed_measured``: against
    the last evaluation before each event, not the true level before it), ``needless`` (share of
    the evaluations on event-free stretches that an alarm brought forward), ``regret`` (mean over runs
    with ground truth), ``items_per_eval``, and the counts behind them."""
    steps = sum(s.steps for s in scores)
    samples = sum(s.samples for s in scores)
    evals = sum(s.evals for s in scores)
    delays = [d for s in scores for d in s.delays]
    measured = [d for s in scores for d in s.delays_measured]
    quiet = sum(s.quiet_evals for s in scores)
    regrets = [s.regret for s in scores if math.isfinite(s.regret)]
    points = [s.regret_points for s in scores if math.isfinite(s.regret_points)]
    return {
        "per_1k": 1000.0 * samples / max(steps, 1),
        "median_delay": statistics.median(math.inf if d is None else d for d in delays) if delays else math.nan,
        "confirmed": sum(d is not None and d <= within for d in delays) / len(delays) if delays else math.nan,
        # (against the last evaluation before each event, as a user can: RunScore.delays_measured)
        "confirmed_measured": (sum(d is not None and d <= within for d in measured) / len(measured) if measured
                               else math.nan),
        "needless": sum(s.needless for s in scores) / quiet if quiet else 0.0,
        "regret": sum(regrets) / len(regrets) if regrets else math.nan,
        "regret_points": sum(points) / len(points) if points else math.nan,
        "items_per_eval": samples / evals if evals else math.nan,
        "runs": len(scores), "events": len(delays), "quiet_evals": quiet, "steps": steps,
    }


# ------------------------------------------------------------------------------------------ adaptive-eval tune

OBJECTIVES = {
    # name: (what is minimised, the aggregate key, a formatter)
    "cost": "eval samples per 1,000 training steps (items; with eval suites, their cost units: answers x cost + "
            "items x item_cost)",
    "delay": "mean confirmed detection delay in steps (a miss or a delay over 100 counts 100; on a trace logged "
             "every k steps, 100 records' worth)",
    "regret": "selection regret, as a share of each run's range of true values (mean over runs)",
}
DELAY_CAP = 100


class TuneError(ValueError):
    """Bad input to ``tune``: reported before any trial runs."""


def capped_delay(scores: Sequence[RunScore], cap: int = DELAY_CAP) -> float:
    """The mean delay, a miss or a delay over ``cap`` records' worth of steps (``RunScore.step_scale``) counted at
    that cap."""
    delays = [cap * s.step_scale if d is None else min(d, cap * s.step_scale) for s in scores for d in s.delays]
    return sum(delays) / len(delays) if delays else math.nan


def objective_values(scores: Sequence[RunScore], objectives: Sequence[str]) -> list[float]:
    agg = aggregate(scores)
    out = []
    for name in objectives:
        if name == "cost":
            out.append(agg["per_1k"])
        elif name == "delay":
            out.append(capped_delay(scores))
        else:
            out.append(agg["regret"])
    return out


def _cusum(cfg) -> tuple[int, dict] | None:
    for i, spec in enumerate(cfg.streams.default):
        if spec.get("type") == "cusum":
            return i, spec
    return None


# The search space: (dotted key, kind, low, high, log).  Every key is a real config key.
SPACE = [
    ("trigger.freq_steps", int, 5, 100, True),
    ("policy.interval.max_factor", float, 1.0, 8.0, True),
    ("policy.interval.relax", float, 1.0, 3.0, False),
    ("policy.interval.tighten", float, 0.2, 1.0, False),
    ("policy.interval.tighten_per_stream", bool, False, True, False),
    ("policy.alarm.cooldown_steps", int, 1, 60, False),
    ("policy.alarm.corroborate", int, 1, 3, False),
    ("policy.alarm.corroborate_steps", int, 5, 60, False),
    ("policy.alarm.abrupt_steps", int, 0, 10, False),
    ("policy.alarm.habituate", bool, False, True, False),
    ("policy.sample_size.initial", int, 16, 256, True),
    ("policy.sample_size.min", int, 8, 128, True),
    ("policy.sample_size.target_half_width", float, 0.03, 0.25, True),
    ("policy.sample_size.alarm_factor", float, 1.0, 16.0, True),
    ("policy.peak.improving_factor", float, 1.0, 4.0, False),
    ("policy.peak.confirm_size", int, 32, 1024, True),
    ("policy.peak.confirm_steps", int, 0, 10, False),
    ("policy.budget.max_eval_fraction", float, 0.02, 0.5, True),
    ("cusum.threshold", float, 3.0, 16.0, True),
    ("cusum.k", float, 0.25, 2.0, True),
    ("cusum.adapt", float, 0.0, 0.2, False),
    ("cusum.trend", float, 0.0, 0.2, False),  # (the slope's rate; nothing with adapt 0)
]


def _get(cfg, key: str):
    if key.startswith("cusum."):
        found = _cusum(cfg)
        return None if found is None else found[1].get(key.split(".", 1)[1])
    from omegaconf import OmegaConf

    return OmegaConf.select(cfg, key)


def apply_params(base, params: dict):
    """``base`` (a loaded config) with the searched ``params`` set; ``cusum.*`` sets the default streams'
    CUSUM detector (added after ``nonfinite`` when the base has none).  ``policy.peak.confirm_size`` is clipped
    to ``replay.eval_set_size`` (a confirmation draws at most the whole set)."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(OmegaConf.to_container(base, resolve=True))
    cusum = {k.split(".", 1)[1]: v for k, v in params.items() if k.startswith("cusum.")}
    for k, v in params.items():
        if not k.startswith("cusum."):
            OmegaConf.update(cfg, k, v, merge=False)
    if cusum:
        found = _cusum(cfg)
        specs = list(OmegaConf.to_container(cfg.streams.default))
        if found is None:
            specs.append({"type": "cusum", "warmup": 30, **cusum})
        else:
            spec = {**specs[found[0]], **cusum}
            if "threshold" in cusum:  # (the searched threshold stands for its arl0: both were refused, every trial)
                spec.pop("arl0", None)
            specs[found[0]] = spec
        cfg.streams.default = specs
    # Keep the sample-size bounds consistent: min <= initial <= max (a preset held initial 46 beside min 68, a value
    # nothing reads; a new user's probe)
    ss = cfg.policy.sample_size
    if ss.min > ss.max:
        ss.max = ss.min
    ss.initial = min(max(ss.initial, ss.min), ss.max)
    # A confirmation cannot draw more items than the eval set holds (SPACE goes to 1024; a preset wrote 1022 beside
    # replay.eval_set_size 500): the searched value is clipped to the set's size, in the trials and the presets.
    size = OmegaConf.select(cfg, "replay.eval_set_size")
    if size and cfg.policy.peak.confirm_size > size:
        cfg.policy.peak.confirm_size = int(size)
    from adaptive_eval.config import as_config

    return as_config(OmegaConf.to_container(cfg))


def _suggest(trial, base) -> dict:
    params = {}
    for key, kind, low, high, log in SPACE:
        if kind is bool:
            params[key] = trial.suggest_categorical(key, [False, True])
        elif kind is int:
            params[key] = trial.suggest_int(key, low, high, log=log)
        else:
            params[key] = trial.suggest_float(key, low, high, log=log)
    return params


def base_params(base) -> dict:
    """The base config's own values of the searched keys, clipped into the space (the first trial)."""
    out = {}
    for key, kind, low, high, _ in SPACE:
        v = _get(base, key)
        if not _searchable(v):
            continue
        out[key] = kind(min(max(v, low), high))
    return out


def _searchable(value) -> bool:
    """A base value the search's range holds: a number (a bool for a switch), not None (the key off) nor a list
    (a CUSUM's k: [0.5, 1.5] raised TypeError comparing it with the range; a review)."""
    return isinstance(value, numbers.Real)


def clipped_base(base) -> list[str]:
    """The base config's values of the searched keys that lie outside :data:`SPACE`, as trial 0 runs them:
    ``"trigger.freq_steps 250 -> 100 (searched 5-100)"``.  (Trial 0, "the base config", ran those clipped values
    and said nothing, so a user compared the trials with a baseline they never ran; a probe.)"""
    out = []
    found = _cusum(base)
    ran_as = base_params(base)
    for key, kind, low, high, _ in SPACE:
        if key not in ran_as or kind is bool:
            continue
        v, ran = _get(base, key), ran_as[key]
        if ran != v:
            # (the config's own key: cusum.threshold is the search space's name, and --set refused it; a probe)
            named = f"streams.default.{found[0]}.{key.split('.', 1)[1]}" if key.startswith("cusum.") else key
            out.append(f"{named} {kind(v)} -> {ran} (searched {low}-{high})")
    return out


def folds(n: int, k: int = 3) -> list[list[int]]:
    """Round-robin folds of the runs (``k`` at most ``n``)."""
    k = max(1, min(k, n))
    return [list(range(i, n, k)) for i in range(k)]


def pareto(points: Sequence[Sequence[float]]) -> list[int]:
    """Indices of the points no other point dominates (all objectives minimised; NaN rows excluded).

    >>> pareto([(1, 5), (2, 2), (3, 3), (5, 1), (float("nan"), 0)])
    [0, 1, 3]
    """
    ok = [i for i, p in enumerate(points) if all(math.isfinite(x) for x in p)]
    front = []
    for i in ok:
        p = points[i]
        if not any(all(a <= b for a, b in zip(points[j], p)) and any(a < b for a, b in zip(points[j], p))
                   for j in ok if j != i):
            front.append(i)
    return front


def chosen_points(front: Sequence[int], values: Sequence[Sequence[float]], k: int = 5) -> list[int]:
    """Up to ``k`` points of the front spread along it: the best of each objective, then the ones
    farthest (normalised) from those already chosen."""
    if not front:
        return []
    m = len(values[front[0]])
    lo = [min(values[i][j] for i in front) for j in range(m)]
    hi = [max(values[i][j] for i in front) for j in range(m)]
    norm = {i: [(values[i][j] - lo[j]) / (hi[j] - lo[j]) if hi[j] > lo[j] else 0.0 for j in range(m)]
            for i in front}
    chosen: list[int] = []
    for j in range(m):
        best = min(front, key=lambda i: (values[i][j], i))
        if best not in chosen:
            chosen.append(best)
    # the knee: the point nearest the ideal corner
    knee = min(front, key=lambda i: (sum(x * x for x in norm[i]), i))
    if knee not in chosen:
        chosen.append(knee)
    while len(chosen) < min(k, len(front)):
        far = max((i for i in front if i not in chosen),
                  key=lambda i: (min(sum((a - b) ** 2 for a, b in zip(norm[i], norm[c])) for c in chosen), -i))
        chosen.append(far)
    return chosen[:k]


# Eval metrics whose values beyond 1 are no percentage (a loss of 2.3): not refused as one.
_NOT_PERCENT = re.compile(r"(?:^|[_/.\-])(loss|nll|perplexity|ppl|mse|mae|rmse|bpb|bpc)(?:$|[_/.\-@])", re.IGNORECASE)


_ABOVE_1 = 1.0 + 1e-9  # a value above this is beyond 1 by more than rounding


def _refuse_percent_truth(path, trace, metric: str, values: Sequence[tuple[int, float]], base,
                          eval_columns: Mapping[str, str] | None) -> None:
    """Raise :class:`TuneError` when the scored metric's ground truth is in percent: values in (1, 100] without
    an ``eval/<metric>:std`` column make every simulated evaluation return the value itself, with no interval,
    so no change can be confirmed and every trial scores every delay a miss (minutes of trials for nothing;
    ``replay`` only notes it).  Not when ``evaluation.metric_kinds`` declares the metric a mean: percent-scale
    values are then what it is."""
    declared = dict(base.evaluation.metric_kinds or {})
    if declared.get(metric, declared.get(f"eval/{metric}")) == "mean" or base.evaluation.suites:
        return
    column = f"eval/{metric}"
    if f"{column}:std" in trace.metric_names() or _NOT_PERCENT.search(metric):
        return
    finite = [(step, v) for step, v in values if math.isfinite(v)]
    # (beyond 1 by more than rounding: a proportion that is a mean of floats may read 1.0000000000000002, and
    # replay draws its other values as proportions; it was refused as a percentage, found in review)
    if not finite or min(v for _, v in finite) < 0.0 or not _ABOVE_1 < max(v for _, v in finite) <= 100.0:
        return
    lo, hi = min(v for _, v in finite), max(v for _, v in finite)
    step, first = next((step, v) for step, v in finite if v > _ABOVE_1)
    above = sum(v > _ABOVE_1 for _, v in finite)
    # (a proportion with one stray value, 1.7 at step 60, was told to scale every value by 0.01; a probe)
    stray = (f"; {above} of its {len(finite)} values are above 1: if the others are proportions, those are errors "
             "in the trace to fix, not a scale") if above * 10 <= len(finite) else ""
    named = (eval_columns or {}).get(column, column)
    # (the trace named: a user who named the column for one trace of several, --eval TRACE=COL, followed the hint
    # --eval COL:0.01 and the other trace had no such column; a probe)
    raise TuneError(f"{path}: column {column!r} looks like a percentage: its values lie in [{lo:.4g}, {hi:.4g}] "
                    f"(the first above 1: {first:.4g} at step {step}{stray}) and it has no {column + ':std'!r} "
                    "column, so every simulated evaluation would return the value itself with no interval: nothing "
                    "can be confirmed and every trial would score every delay a miss.  Scale it to a proportion: "
                    f"--eval {shlex.quote(f'{path}={named}:0.01')}; or, if it is a mean, say so: --set "
                    f"'evaluation.metric_kinds={{{metric}: mean}}' (and give its per-sample sd in a column "
                    f"{column + ':std'!r})")


def case_from_file(path: str, base, events: Sequence[int] = (), *, trace=None,
                   eval_columns: Mapping[str, str] | None = None) -> Case:
    """A recorded trace file (CSV, JSONL or TensorBoard folder) as a case: truth is its eval column
    (``evaluation.metric``, else the first ``eval/`` column) carried forward; ``events`` are steps.

    Raises :class:`TuneError` when that column is in percent (values in (1, 100], no ``:std`` column) and
    ``evaluation.metric_kinds`` does not declare it a mean.  ``eval_columns``: how the command line named the
    trace's eval columns (``{"eval/eval_acc": "eval_acc"}`` for ``--eval eval_acc``), for that error's hint."""
    from adaptive_eval.trace import read_trace

    from adaptive_eval.replay import ground_truth

    if trace is None:  # (else the trace read from ``path`` with the CLI's trace options)
        trace = read_trace(path)
    if base.replay.every_step:  # every training step a record, so that costs and delays count steps
        from adaptive_eval.replay import every_step

        try:
            trace = every_step(trace)
        except ValueError as exc:
            raise TuneError(str(exc)) from None
    try:
        known = ground_truth(trace, base)  # (per-item columns of an eval suite: the suite's mean)
    except ValueError as exc:
        raise TuneError(str(exc)) from None
    metric = base.evaluation.metric
    if metric is not None:
        metric = str(metric).removeprefix("eval/")
    elif len(known) > 1:
        # which one, as check asks (tune scored the first eval column, an eval/loss as higher-is-better, every
        # event a miss, while check refused the same file; found by a new-user probe)
        raise TuneError(f"{path}: which eval metric? the trace has {', '.join(sorted(known))}; set "
                        "evaluation.metric (--set evaluation.metric=NAME), or metric: in its events file, or name "
                        "one column with --eval COL")
    else:
        metric = next(iter(known), None)
    if trace.records:
        first, last = trace.records[0].step, trace.records[-1].step
        outside = [int(e) for e in events if not first <= int(e) <= last]
        if outside:
            raise TuneError(f"{path}: event step{'s' if len(outside) > 1 else ''} "
                            f"{', '.join(map(str, outside))} outside the trace's steps {first}-{last}")
    truth = None
    if metric in known:
        _refuse_percent_truth(path, trace, metric, known[metric], base, eval_columns)
        at = dict(known[metric])
        truth, last = [], math.nan
        for rec in trace.records:
            last = at.get(rec.step, last)
            truth.append(float(last))
        # an event with no ground truth before it is one check refuses: nothing to compare with, so every trial
        # scored it a miss (found by a new-user probe: tune ran on, exit 0)
        measured = [step for step, v in known[metric] if math.isfinite(v)]
        steps = [int(e) for e in events] if len(trace.records) > 1 else []  # (one step: check_input says so)
        blind = [e for e in steps if not any(step < e for step in measured)]
        if blind:
            raise TuneError(f"{path}: {_events_at(blind)}: no ground truth of {metric} before "
                            f"{_them(blind)} to compare with (as check says)"
                            + (f"; eval/{metric} starts at step {min(measured)}" if measured else ""))
        # ... and its mirror: none at or after it, so no evaluation can show the change (every trial scored it a
        # miss, and tune picked a "best delay" among misses, exit 0; a probe)
        late = [e for e in steps if not any(step >= e for step in measured)]
        if late:
            raise TuneError(f"{path}: {_events_at(late)}: no ground truth of {metric} at or after {_them(late)}, so "
                            f"no evaluation can confirm {_them(late)} and every trial would score a miss (as check "
                            "says)" + (f"; eval/{metric} ends at step {max(measured)}" if measured else ""))
    indices, at = _index_events(trace, events, with_steps=True)
    return Case(str(path), trace, indices, truth, metric, bool(base.evaluation.higher_is_better),
                int(base.replay.eval_set_size), overrides=[], event_steps=at)


def _events_at(steps: Sequence[int]) -> str:
    """``"event at step 5"`` or ``"events at steps 5, 9"``."""
    many = "s" if len(steps) > 1 else ""
    return f"event{many} at step{many} {', '.join(map(str, steps))}"


def _them(steps: Sequence[int]) -> str:
    return "them" if len(steps) > 1 else "it"


def check_input(cases: Sequence[Case], objectives: Sequence[str], trials: int, *, to: str = "to tune on") -> None:
    """Raise :class:`TuneError` for input ``tune`` cannot work with (before any trial runs); ``to`` ends the message
    about a trace too short (``"to score"`` where the traces are scored, not tuned on)."""
    unknown = [o for o in objectives if o not in OBJECTIVES]
    if unknown:
        raise TuneError(f"unknown objective {unknown[0]!r}; choose from {', '.join(OBJECTIVES)}")
    if not objectives:
        raise TuneError(f"no objective; choose from {', '.join(OBJECTIVES)}")
    twice = next((o for i, o in enumerate(objectives) if o in objectives[:i]), None)
    if twice is not None:
        raise TuneError(f"objective {twice!r} is given twice; give each once")
    if trials < 1:
        raise TuneError(f"--trials must be at least 1, got {trials}")
    if not cases:
        raise TuneError("no traces to tune on")
    for c in cases:
        if c.steps < 2:
            raise TuneError(f"{c.name}: {c.steps} step{'s' if c.steps != 1 else ''}: a trace needs at least 2 "
                            f"steps {to}")
        if c.truth is None or not any(math.isfinite(v) for v in c.truth):
            likely = eval_like(c.trace) if c.trace is not None else []
            hint = (f"; name the eval column with --eval TRACE=COL: {', '.join(likely[:6])}"
                    + (f" and {len(likely) - 6} more" if len(likely) > 6 else "")) if likely else ""
            has = [n.removeprefix("eval/") for n in (c.trace.eval_names() if c.trace is not None else [])
                   if n.removeprefix("eval/") != c.metric]
            if c.metric and has:  # (a metric named that the trace lacks: what it has, as check says; a probe)
                hint += (f"; the trace's eval metrics are {', '.join(has[:6])}"
                         + (f" and {len(has) - 6} more" if len(has) > 6 else "")
                         + " (--set evaluation.metric=NAME)")
            raise TuneError(f"{c.name}: no eval ground truth for {c.metric or 'any metric'} (no eval/<metric> column "
                            "with a value, or per-item eval/<suite>/<metric>@<item> columns of an eval suite in "
                            "evaluation.suites): replay cannot simulate evaluations, so there is nothing to score"
                            + hint)
    if "delay" in objectives and not any(c.events for c in cases):
        raise TuneError("no events in any trace, so the delay objective cannot be scored: mark the changes with "
                        "--events TRACE=STEP[,STEP...], tune on real:NAME traces, or drop --objective delay")


def check_base(base) -> None:
    """Raise :class:`TuneError` when the first trial, the base config's own values clipped into :data:`SPACE`,
    is a config the schema refuses (every trial would then be refused alike, one warning each)."""
    try:
        apply_params(base, base_params(base))
    except ValueError as exc:
        raise TuneError("the base config, with its values of the searched keys clipped into the search space, is "
                        f"refused: {exc} (the searched ranges: adaptive_eval.tune.SPACE)") from None


@dataclasses.dataclass
class TuneResult:
    objectives: list[str]
    trials: list[dict]  # number, params, values (all runs), fold_values
    front: list[int]  # indices into trials
    chosen: list[tuple[int, str]]  # (index into trials, rule)
    cv: dict  # rule -> held-out-fold mean of each objective
    interrupted: bool = False
    written: list[str] = dataclasses.field(default_factory=list)
    refused: list[str] = dataclasses.field(default_factory=list)  # why each refused trial was (schema errors)
    # chosen trial index -> {switch: the base config's value}: a switch whose drawn value changed no score
    kept_base: dict = dataclasses.field(default_factory=dict)
    folds: int = 1  # the folds used: at most the number of runs (--folds 5 on two runs: 2)
    # chosen trial index -> the on/off switches whose drawn value is not the base config's and that were not checked
    # (a Ctrl-C before or during the check: they keep their drawn values)
    unchecked: dict = dataclasses.field(default_factory=dict)
    checked: dict = dataclasses.field(default_factory=dict)  # chosen trial index -> the switches whose check ran
    # trial 0, the base config: per run (case, its config as replayed, its deferral lines, its evaluation count)
    first: list = dataclasses.field(default_factory=list)
    clipped: list[str] = dataclasses.field(default_factory=list)  # the base's values trial 0 ran clipped (clipped_base)


def _rule_pick(values: Sequence[Sequence[float]], idx: Sequence[int], rule: str,
               objectives: Sequence[str]) -> int | None:
    front = [idx[i] for i in pareto([values[j] for j in idx])]
    if not front:
        return None
    if rule.startswith("best "):
        j = rule.split(" ", 1)[1]
        return min(front, key=lambda i: (values[i][list(objectives).index(j)], i))
    m = len(values[front[0]])
    lo = [min(values[i][k] for i in front) for k in range(m)]
    hi = [max(values[i][k] for i in front) for k in range(m)]
    return min(front, key=lambda i: (sum(((values[i][k] - lo[k]) / (hi[k] - lo[k])) ** 2 if hi[k] > lo[k] else 0.0
                                         for k in range(m)), i))


@contextlib.contextmanager
def _stop_on_sigint(stop: threading.Event, writing: threading.Event):
    """While the search runs (main thread only): the first SIGINT sets ``stop``, a second one raises
    ``KeyboardInterrupt``; once ``writing`` is set, every SIGINT only sets ``stop`` (a second Ctrl-C raised
    inside the writing of the outputs and lost them); the previous handler comes back afterwards."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        yield  # (not the main thread: no handler can be set; SIGINT ignored, as under nohup: leave it so)
        return

    def on_sigint(signum, frame):
        if stop.is_set() and not writing.is_set():
            raise KeyboardInterrupt
        stop.set()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_DFL if previous is None else previous)  # (None: set from C)


def tune(cases: Sequence[Case], base, *, objectives: Sequence[str] = ("cost", "delay", "regret"), trials: int = 50,
         seed: int = 0, out_dir: str | None = None, progress: bool = True, n_folds: int = 3) -> TuneResult:
    """Search the policy and detector parameters (:data:`SPACE`) on ``cases`` with Optuna.

    Every trial replays the candidate config on every run (replay seed 0) and scores it per fold of the
    runs (round-robin, ``n_folds``); its objective values are the mean over folds.  The first trial is the
    base config's own values.  The sampler is Optuna's TPE (multi-objective when more than one), seeded
    with ``seed``: the same runs, base, objectives, trials and seed give the same trials.  Cross-validation:
    for each selection rule (best of each objective, the knee), the rule is applied to the front computed
    on all folds but one and the pick scored on the one left out; ``cv`` holds the mean over folds.
    Ctrl-C (SIGINT, in the main thread) stops the search after the run being replayed: the trials done so far
    are kept and written; a second Ctrl-C, or a ``KeyboardInterrupt`` raised elsewhere, stops it at once.
    (The first one only sets a flag: a ``KeyboardInterrupt`` raised at an arbitrary point can be swallowed
    by a ``__del__`` or turned into another error by a library caught half-way, OmegaConf's config
    building among them, and the search then ran on or crashed.)
    """
    import optuna

    objectives = list(dict.fromkeys(objectives))
    check_input(cases, objectives, trials)
    check_base(base)
    fold_idx = folds(len(cases), n_folds)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=min(10, max(trials // 3, 1)))
    study = optuna.create_study(directions=["minimize"] * len(objectives), sampler=sampler)
    study.enqueue_trial(base_params(base))
    done: list[dict] = []
    log_path = None
    if out_dir is not None:
        import os

        os.makedirs(out_dir, exist_ok=True)
        log_path = os.path.join(out_dir, "trials.jsonl")
        open(log_path, "w").close()

    stop, writing = threading.Event(), threading.Event()
    refused: list[str] = []
    run_scores: dict[int, list] = {}
    first: list[tuple] = []  # trial 0 (the base config): (case, its config as replayed, deferral lines, evaluations)

    def objective(trial):
        params = _suggest(trial, base)
        if trial.number == 0:
            # (trial 0 is the base config: one without a CUSUM got one, its values drawn, and its row and preset
            # said "the base config" of a config it was not; one set by arl0 got a threshold beside it; a key the
            # base sets to null, trigger.freq_steps off, ran a drawn 25; probes)
            params = {k: v for k, v in params.items() if _searchable(_get(base, k))}  # (a list k: the base's too)
        try:
            cfg = apply_params(base, params)
        except ValueError as exc:  # a combination the schema refuses (ConfigError): this trial fails, not the search
            trial.set_user_attr("error", str(exc))
            refused.append(str(exc))  # (counted and said once, by the caller: not Optuna's warning per trial)
            raise optuna.TrialPruned(str(exc)) from None
        scores = []
        for c in cases:
            if stop.is_set():  # Ctrl-C: this trial is not finished, so not kept
                trial.study.stop()
                raise optuna.TrialPruned("interrupted")
            deferrals: list[dict] = []
            with _Where(f"trial {trial.number}, {c.name}"):
                scores.append(run_case(c, cfg, seed=0, deferrals=deferrals))
            if trial.number == 0:  # (the base config's: for the budget's note, as check gives it; a probe)
                first.append((c, case_config(c, cfg), deferrals, scores[-1].evals))
        per_fold = [objective_values([scores[i] for i in f], objectives) for f in fold_idx]
        values = [_nanmean([pf[k] for pf in per_fold]) if any(math.isfinite(pf[k]) for pf in per_fold)
                  else math.nan for k in range(len(objectives))]
        # (the values the trial ran with, as its preset holds them: the table said confirm size 1022 beside a preset's
        # 500, clipped to the eval set; a new user's probe)
        params = {k: (v if k.startswith("cusum.") else _get(cfg, k)) for k, v in params.items()}
        row = {"number": trial.number, "params": params, "values": values, "fold_values": per_fold}
        done.append(row)
        run_scores[trial.number] = _plain_scores(scores)  # (what _inert_switches compares; not written)
        if log_path is not None:
            import json

            with open(log_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(_strict(row), allow_nan=False) + "\n")
        return [v if math.isfinite(v) else 1e18 for v in values] if len(values) > 1 else \
            (values[0] if math.isfinite(values[0]) else 1e18)

    interrupted = False
    with _stop_on_sigint(stop, writing):
        try:
            study.optimize(objective, n_trials=trials, show_progress_bar=progress, gc_after_trial=False,
                           callbacks=[lambda study, _: study.stop() if stop.is_set() else None])
        except KeyboardInterrupt:
            interrupted = True
        except Exception as exc:  # noqa: BLE001 - after a Ctrl-C: what the second one broke half-way (OmegaConf)
            if not stop.is_set():
                raise
            log.warning("the search stopped on %s: %s after Ctrl-C; writing the trials done", type(exc).__name__, exc)
            interrupted = True
        writing.set()
        interrupted = interrupted or stop.is_set()
        result = summarize(done, objectives, fold_idx, interrupted)
        result.refused = refused
        result.first = first
        result.clipped = clipped_base(base)
        if not interrupted:
            result.kept_base = _inert_switches(result, base, cases, run_scores, stop)
            # (a Ctrl-C there: the points checked so far keep what was found, the others their drawn values; exit 130)
            result.interrupted = stop.is_set()
        if result.interrupted:
            result.unchecked = _unchecked_switches(result, base)
        if out_dir is not None:
            result.written = write_outputs(result, base, out_dir)
    return result


def _plain_scores(scores) -> list:
    """Each run's ``RunScore`` as plain comparable values (NaN as None)."""
    return [_strict(dataclasses.asdict(sc)) for sc in scores]


def _inert_switches(result: TuneResult, base, cases, run_scores: dict, stop: threading.Event) -> dict:
    """For each chosen point, the on/off switches of ``SPACE`` (``policy.alarm.habituate``, ...) whose drawn value
    is not the base config's and changed nothing measured: replayed with the base's value, every run scores the
    same, to its cost, evaluations, each event's confirmed delay, needless evaluations and pick (no run exercises
    it: ``habituate`` acts only after an urgent alarm whose evaluation showed no change).  Its preset keeps the
    base's value then: a drawn value that nothing measured turned a safety default off (a new user's probe: 9 of 30
    trials drew ``habituate: false`` on runs where it does nothing).  A Ctrl-C (``stop``) ends it after the run
    being replayed; the switch under check then keeps its drawn value."""
    switches = [key for key, kind, *_ in SPACE if kind is bool]
    out: dict = {}
    checked = result.checked  # (filled as each check ends: after a Ctrl-C, what was not checked is said)
    for i in preset_numbers(result):
        params, number = result.trials[i]["params"], result.trials[i]["number"]
        for key in switches:
            own = _get(base, key)
            if own is None or params.get(key) is None or bool(params[key]) == bool(own) or number not in run_scores:
                continue
            own = bool(own)
            cfg = apply_params(base, {**params, **out.get(i, {}), key: own})  # (with the switches already kept)
            scores = []
            for c in cases:
                if stop.is_set():
                    return out
                with _Where(f"trial {number} with {key}={own}, {c.name}"):
                    scores.append(run_case(c, cfg, seed=0))
            # (the drawn value's scores, with the switches already kept: the same as the trial's, or this is not run)
            if _plain_scores(scores) == run_scores[number]:
                out.setdefault(i, {})[key] = own
            checked.setdefault(i, set()).add(key)
    return out


def _nanmean(values: Sequence[float]) -> float:
    """The mean of the non-NaN values; NaN when there are none (a fold without events has no delay), without
    numpy's "Mean of empty slice" warning in the user's terminal."""
    kept = [float(v) for v in values if not math.isnan(v)]
    return sum(kept) / len(kept) if kept else math.nan


def summarize(done: list[dict], objectives: list[str], fold_idx: list[list[int]], interrupted: bool) -> TuneResult:
    values = [r["values"] for r in done]
    front = pareto(values)
    chosen_idx = chosen_points(front, values)
    # Every rule a point wins is a row of its own (one preset): a point best on cost and on delay was labelled
    # "best cost" alone, and "best delay" had no row and no held-out figure (a new-user probe of tune)
    rules: dict[int, list[str]] = {}
    for o in objectives:
        i = _rule_pick(values, list(range(len(values))), f"best {o}", objectives)
        if i is not None:
            rules.setdefault(i, []).append(f"best {o}")
    if len(objectives) > 1 and front:
        rules.setdefault(_rule_pick(values, list(range(len(values))), "knee", objectives), []).append("knee")
    chosen = [(i, rule) for i in chosen_idx for rule in rules.get(i, ["spread"])]
    cv: dict = {}
    if len(fold_idx) > 1 and done:
        for rule in sorted({r for _, r in chosen if r != "spread"}):
            held = []
            for j in range(len(fold_idx)):
                train = [[_nanmean([r["fold_values"][f][k] for f in range(len(fold_idx)) if f != j])
                          for k in range(len(objectives))] for r in done]
                pick = _rule_pick(train, list(range(len(done))), rule, objectives)
                if pick is not None:
                    held.append(done[pick]["fold_values"][j])
            cv[rule] = [_nanmean([h[k] for h in held]) for k in range(len(objectives))] if held else None
    return TuneResult(objectives, done, front, chosen, cv, interrupted, folds=len(fold_idx))


def preset_numbers(result: TuneResult) -> dict[int, int]:
    """Trial index -> ``n`` of its ``presets/point-<n>.yaml``: one preset per chosen point, in the order of
    ``result.chosen`` (where a point that wins several rules has a row per rule)."""
    numbers: dict[int, int] = {}
    for i, _ in result.chosen:
        numbers.setdefault(i, len(numbers))
    return numbers


def _rules_of(result: TuneResult, i: int) -> list[str]:
    return [rule for j, rule in result.chosen if j == i]


def _fmt(name: str, v: float) -> str:
    if not math.isfinite(v):
        return "-"
    return f"{v:,.0f}" if name == "cost" else (f"{v:.1f}" if name == "delay" else f"{v:.2%}")


def table(result: TuneResult) -> str:
    """The chosen points of the Pareto front as a Markdown table (all runs, and held-out folds)."""
    obj = result.objectives
    head = ["preset", "trial", "rule", *obj, *(f"{o} (held-out)" for o in obj), "freq_steps", "cusum threshold",
            "target half-width", "confirm size"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    numbers = preset_numbers(result)
    for i, rule in result.chosen:
        n = numbers[i]
        t = result.trials[i]
        held = result.cv.get(rule)
        p = t["params"]
        cells = [f"point-{n}.yaml", str(t["number"]), rule, *(_fmt(o, v) for o, v in zip(obj, t["values"])),
                 *((_fmt(o, v) for o, v in zip(obj, held)) if held else ["-"] * len(obj)),
                 str(p.get("trigger.freq_steps")),
                 f"{p['cusum.threshold']:.2f}" if "cusum.threshold" in p else "-",
                 f"{p.get('policy.sample_size.target_half_width', math.nan):.3f}", str(p.get("policy.peak.confirm_size"))]
        lines.append("| " + " | ".join(cells) + " |")
    if result.cv:  # (a sceptical review: read as a held-out test of the row's preset, which it is not)
        lines.append("\n(held-out: each rule picked on all folds but one and scored on the one left out, the mean "
                     "over folds; the search itself saw every fold, so these are optimistic, and in each fold the "
                     "rule may pick another trial than this row's)")
    if result.clipped:
        lines.append("\ntrial 0 (the base config) ran its values outside the searched ranges clipped into them: "
                     + "; ".join(result.clipped))
    for i, n in numbers.items():
        for key, v in result.kept_base.get(i, {}).items():
            lines.append(f"\npoint-{n}.yaml keeps the base config's {key}: {str(v).lower()} (trial "
                         f"{result.trials[i]['number']} drew {str(not v).lower()}, which changed no run's score)")
    for i, n in numbers.items():
        if result.unchecked.get(i):
            lines.append(f"\npoint-{n}.yaml: {_unchecked_note(result.unchecked[i])}")
    return "\n".join(lines)


def _unchecked_switches(result: TuneResult, base) -> dict:
    """After a Ctrl-C the check of the chosen points' on/off switches (:func:`_inert_switches`) did not run, or
    not to its end: for each chosen point, the switches whose drawn value is not the base config's and was kept
    (a new-user probe: a preset kept a drawn ``habituate: false`` and nothing said the check had not run)."""
    out = {}
    for i in preset_numbers(result):
        params, kept = result.trials[i]["params"], result.kept_base.get(i, {})
        done = result.checked.get(i, set())  # (checked and kept as drawn, for it changed a score: not unchecked)
        keys = [key for key, kind, *_ in SPACE if kind is bool and key not in kept and key not in done
                and params.get(key) is not None and _get(base, key) is not None
                and bool(params[key]) != bool(_get(base, key))]
        if keys:
            out[i] = keys
    return out


def _unchecked_note(keys: Sequence[str]) -> str:
    return (f"the search was interrupted before the check of {', '.join(keys)}: the trial's drawn value is kept "
            "(tune puts back the base config's value where the drawn one changes no run's score)")


def write_outputs(result: TuneResult, base, out_dir: str) -> list[str]:
    """``trials.csv``, ``pareto.csv``, ``pareto.md`` (the table), ``pareto.png`` and ``presets/point-<n>.yaml``
    (complete configs that ``load_config`` reads as they are)."""
    import csv
    import json
    import os

    from omegaconf import OmegaConf

    written = []
    keys = [k for k, *_ in SPACE]
    obj = result.objectives
    path = os.path.join(out_dir, "trials.csv")
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["trial", *obj, "pareto", *keys])
        for i, t in enumerate(result.trials):
            w.writerow([t["number"], *t["values"], int(i in result.front), *(t["params"].get(k) for k in keys)])
    written.append(path)
    path = os.path.join(out_dir, "pareto.csv")
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["trial", *obj, *keys])
        for i in result.front:
            t = result.trials[i]
            w.writerow([t["number"], *t["values"], *(t["params"].get(k) for k in keys)])
    written.append(path)
    path = os.path.join(out_dir, "pareto.md")
    with open(path, "w", encoding="utf-8") as f:
        f.write(table(result) + "\n")
    written.append(path)
    presets = os.path.join(out_dir, "presets")
    os.makedirs(presets, exist_ok=True)
    # An earlier search's presets go: point-3.yaml of a search that chose 5 sat beside this one's 2, read as this
    # search's (a probe's re-run into the same --out)
    for name in os.listdir(presets):
        if re.fullmatch(r"point-\d+\.yaml", name):
            os.remove(os.path.join(presets, name))
    numbers = preset_numbers(result)
    for i, n in numbers.items():
        t = result.trials[i]
        kept = result.kept_base.get(i, {})
        cfg = apply_params(base, {**t["params"], **kept})
        rules = _rules_of(result, i)
        header = [f"# adaptive-eval tune: point {n} of the Pareto front (trial {t['number']}, {', '.join(rules)})",
                  "# over all traces: " + ", ".join(f"{o} {_fmt(o, v)}" for o, v in zip(obj, t["values"]))]
        for rule in rules:
            held = result.cv.get(rule)
            if held:
                header.append(f"# held-out folds{f' ({rule})' if len(rules) > 1 else ''}: "
                              + ", ".join(f"{o} {_fmt(o, v)}" for o, v in zip(obj, held)))
        if result.interrupted:
            header.append(f"# the search was interrupted (Ctrl-C) after {len(result.trials)} trial(s)")
        if result.unchecked.get(i):
            header.append("# " + _unchecked_note(result.unchecked[i]))
        for key, v in kept.items():
            header.append(f"# {key}: the trial drew {str(not v).lower()}, which changed no run's score: the base "
                          f"config's {str(v).lower()} is kept")
        if t["number"] == 0 and result.clipped:  # (read as "my base", it was another config, unsaid; a probe)
            header.append("# the base config's values outside the searched ranges, clipped into them: "
                          + "; ".join(result.clipped))
        path = os.path.join(presets, f"point-{n}.yaml")
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(header) + "\n" + OmegaConf.to_yaml(cfg))
        written.append(path)
    path = os.path.join(out_dir, "pareto.png")
    draw_front(result, path)
    written.append(path)
    path = os.path.join(out_dir, "summary.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(_strict({"objectives": obj, "trials": len(result.trials), "interrupted": result.interrupted,
                   "folds": result.folds, "clipped": list(result.clipped),
                   "front": [result.trials[i]["number"] for i in result.front],
                   "chosen": [{"preset": f"presets/point-{numbers[i]}.yaml", "trial": result.trials[i]["number"],
                               "rule": rule, "values": result.trials[i]["values"], "held_out": result.cv.get(rule),
                               **({"kept_base": result.kept_base[i]} if i in result.kept_base else {}),
                               **({"unchecked": result.unchecked[i]} if i in result.unchecked else {})}
                              for i, rule in result.chosen]}), f, indent=2, allow_nan=False)
    written.append(path)
    return written


def draw_front(result: TuneResult, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import textwrap

    obj = result.objectives
    vals = [t["values"] for t in result.trials]

    def label(name: str, width: int) -> str:  # (wrapped: at full length the axis labels ran off the picture)
        return textwrap.fill(OBJECTIVES[name], width)

    fig, ax = plt.subplots(figsize=(7, 5))
    if len(obj) == 1:
        ax.plot(range(len(vals)), [v[0] for v in vals], "o", color="gray", alpha=0.6, label="trials")
        for i, n in preset_numbers(result).items():
            ax.plot([i], [vals[i][0]], "*", markersize=14, label=f"point-{n} ({', '.join(_rules_of(result, i))})")
        ax.set_xlabel("trial")
        ax.set_ylabel(label(obj[0], 50))
    else:
        ok = [v for v in vals if all(math.isfinite(x) for x in v)]
        if len(obj) > 2:
            sc = ax.scatter([v[0] for v in ok], [v[1] for v in ok], c=[v[2] for v in ok], cmap="viridis",
                            alpha=0.6, s=18, label="trials")
            fig.colorbar(sc, ax=ax, label=obj[2])
        else:
            ax.scatter([v[0] for v in ok], [v[1] for v in ok], color="gray", alpha=0.6, s=18, label="trials")
        front = sorted(result.front, key=lambda i: vals[i][0])
        ax.plot([vals[i][0] for i in front], [vals[i][1] for i in front], "o", mfc="none", mec="red",
                markersize=9, label="Pareto front")
        for i, n in preset_numbers(result).items():
            ax.annotate(f"point-{n}", (vals[i][0], vals[i][1]), textcoords="offset points", xytext=(5, 5),
                        fontsize=8)
        ax.set_xlabel(label(obj[0], 80))
        ax.set_ylabel(label(obj[1], 50))
        if obj[0] == "cost":
            ax.set_xscale("log")
            # (ticks at 1, 2 and 5 of each decade, labelled as numbers: within a decade or two matplotlib labelled
            # its minor ticks too, and "3x10^3" printed over "4x10^3"; a probe)
            from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

            ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
            ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_title(f"adaptive-eval tune: {len(vals)} trial{'s' if len(vals) != 1 else ''}"
                 + (" (interrupted)" if result.interrupted else ""))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

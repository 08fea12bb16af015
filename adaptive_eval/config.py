"""One typed configuration schema for the whole system (dataclasses + OmegaConf structured config).

``load_config()`` merges, in order: the schema's defaults (which are the ``default`` preset), a YAML file
(or a packaged preset by name), then OmegaConf dotlist overrides (``trigger.freq_steps=50``).  Unknown keys,
wrong types and impossible values raise :class:`ConfigError`, which lists every problem at once, each with
its full dotted key and, for keys from a file, the file and line.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import logging
import math
import numbers
import os
import re
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Optional

from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

log = logging.getLogger("adaptive_eval")

__all__ = [
    "Config",
    "ConfigError",
    "from_areal",
    "load_config",
    "preset_names",
    "validate",
]


class ConfigError(ValueError):
    """A configuration problem; ``problems`` lists each one (key, file and line where known)."""

    def __init__(self, problems: Sequence[str]):
        self.problems = list(problems)
        if len(self.problems) == 1:
            super().__init__(self.problems[0])
        else:
            super().__init__("invalid configuration:\n  - " + "\n  - ".join(self.problems))


def _detectors(*specs: dict) -> Any:
    return field(default_factory=lambda: [dict(s) for s in specs])


@dataclass
class TriggerConfig:
    """The base schedule, AReaL's ``EvaluatorConfig`` fields (null disables a trigger)."""

    freq_epochs: Optional[int] = None
    freq_steps: Optional[int] = 25
    freq_secs: Optional[float] = None
    eval_before_train: bool = False
    eval_at_end: bool = True
    # With several triggers: count each on its own, as AReaL does (an evaluation restarts only the triggers
    # that were due), instead of measuring staleness since the last evaluation, whatever caused it.
    independent: bool = False


@dataclass
class SuiteConfig:
    """One named eval set of ``evaluation.suites`` (MATH500, AIME24, ...)."""

    size: int = MISSING  # items in the suite (required: a suite without it is a ConfigError saying so)
    # Answers per item (AReaL's n_samples, verl's val_kwargs.n) of the first evaluation, and of every one when
    # policy.sample_size is off or the suite's sample_size is fixed.  Otherwise not a cap: the sample-size policy
    # chooses the later evaluations' answers per item, up to max_samples_per_item (so evaluate_fn must be able to
    # generate that many; with k answers precomputed per item, set max_samples_per_item: k).
    samples_per_item: int = 1
    cost: float = 1.0  # relative cost of one sample (generating one answer), for sizing
    item_cost: float = 0.0  # relative cost of an item beyond its samples (prompt processing, setup), for sizing
    # The cap on the answers per item the sample-size policy may ask for; null: 32, or samples_per_item when that
    # is more (never below samples_per_item)
    max_samples_per_item: Optional[int] = None
    # The fewest it may choose; null: 1 (a pass@k whose k is above the answers chosen is then not reported)
    min_samples_per_item: Optional[int] = None
    weight: float = 1.0  # weight of the suite in the weighted aggregate over suites
    every: int = 1  # run at every m-th evaluation (and at alarms, the last step and before training)
    sample_size: Optional[int] = None  # items per evaluation; null: policy.sample_size sizes it (or all items)
    strata: list[str] = field(default_factory=list)  # a stratum label per item (difficulty, subject); [] none
    report_strata: bool = False  # also report each metric per stratum, as "<suite>/<metric>/stratum=<label>"


@dataclass
class EvaluationConfig:
    sample_size: Optional[int] = None  # null: the whole eval set (fixed schedule); adaptive policies set their own
    seed: int = 0  # seeds the nested sample order, fixed for the run so evals reuse the same items first
    # The metric policies track (sample size, change, peak); null: the first one.  With suites it is one suite's
    # "<suite>/<metric>" (or "<suite_aggregate>/<metric>"): nothing else is ever reported, so anything else is an error.
    metric: Optional[str] = None
    higher_is_better: bool = True
    confidence: float = 0.95
    on_error: str = "skip"  # skip | retry | raise
    max_retries: int = 2
    retry_backoff_s: float = 1.0
    timeout_s: Optional[float] = None
    precision: str = "fp32"  # fp32 | bf16 | fp16 (under torch.inference_mode) | none (evaluate_fn runs as it is)
    # Asynchronous evaluation (adaptive_eval.asynchronous): evaluate() submits and returns at once.
    asynchronous: bool = False
    max_in_flight: int = 1  # evaluations running at once; when full, a due one waits (an urgent one cancels)
    # A result integrates exactly this many steps after its submission (waiting then if not done): the same
    # decisions on every run.  null: at the first observe/evaluate after it completes (as soon as possible).
    async_integrate_after_steps: Optional[int] = None
    pass_at_k: list[int] = field(default_factory=lambda: [1])  # k of pass@k (best@k/worst@k) for 2-D metrics
    suites: dict[str, SuiteConfig] = field(default_factory=dict)  # empty: the single eval set
    # With suites: also report "<suite_aggregate>/<metric>", the weight-weighted mean over all suites, at every
    # evaluation that covers all of them (null: none).
    suite_aggregate: Optional[str] = None
    # Metric (or, with suites, the part after "<suite>/") -> extra aggregations over its items, reported as
    # "<metric>/<aggregation>": weighted_mean (weights from "<metric>:weights"), p50, p90, ... (quantiles).
    aggregations: dict[str, list[str]] = field(default_factory=dict)
    # Metric name -> "proportion" (Wilson interval) or "mean" (Student t).  Unnamed metrics: per-sample
    # values that are all 0/1 are proportions, anything else a mean; a bare scalar never gets a guessed kind.
    metric_kinds: dict[str, str] = field(default_factory=dict)


@dataclass
class StreamsConfig:
    """Which detectors watch which stream.  A detector spec is a mapping with ``type`` and parameters."""

    # Detectors for cheap per-step streams that ``watch`` does not name.
    default: list[dict[str, Any]] = _detectors(
        {"type": "nonfinite"}, {"type": "cusum", "k": 1.0, "threshold": 8.0, "adapt": 0.05, "warmup": 30})
    # Stream name -> its own detector list (replaces ``default`` for that stream).
    watch: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # Streams fed to ``observe`` that no detector should watch (exact names).
    ignore: list[str] = field(default_factory=list)
    # Detectors for each eval metric (run on the measured means, one update per evaluation).
    eval: list[dict[str, Any]] = _detectors({"type": "nonfinite"})


@dataclass
class AlarmPolicyConfig:
    enabled: bool = True
    cooldown_steps: int = 33  # a burst of alarms within this many steps costs one evaluation
    urgent_detectors: list[str] = field(default_factory=lambda: ["nonfinite", "stuck"])  # bypass budget, cooldown
    corroborate: int = 2  # a non-urgent alarm brings an eval forward once this many streams agree
    corroborate_steps: int = 20  # within this many steps of each other
    abrupt_steps: Optional[int] = 2  # a lone alarm whose change began this few steps before it counts alone
    habituate: bool = True  # a stream whose urgent alarm's eval showed no change: its urgent alarms wait for another


@dataclass
class IntervalPolicyConfig:
    enabled: bool = True
    min_factor: float = 0.5  # shortest interval, as a multiple of the base freq_steps / freq_secs
    max_factor: float = 4.4  # longest interval
    relax: float = 2.2  # the interval grows by this factor after each quiet evaluation
    tighten: float = 0.5  # and shrinks by this one after an alarm or a significant change
    significance: float = 0.05  # p-value below which two successive evals differ
    max_run_fraction: Optional[float] = None  # with a known total: longest interval at most this share of the run
    tighten_per_stream: bool = True  # between two evals, each stream that alarms tightens once (false: one alarm)


@dataclass
class SampleSizePolicyConfig:
    enabled: bool = True
    initial: int = 50
    min: int = 48
    max: int = 512
    target_half_width: float = 0.075  # of the confidence interval, in the metric's units
    alarm_factor: float = 12.0  # widen the sample this much after an alarm
    widen_held: bool = True  # an alarm held for corroboration widens the next scheduled eval


@dataclass
class BudgetPolicyConfig:
    enabled: bool = True
    max_eval_fraction: float = 0.11  # eval wall time / elapsed wall time
    bypass_urgent: bool = True
    # With evaluation.asynchronous, evaluations cost eval-device time, not training time: this caps the
    # share of the eval workers' time (eval-device seconds / (elapsed x workers)) instead.
    max_eval_device_fraction: float = 1.0
    # An alarm's evaluation over budget runs on the largest sample the budget affords once at least this many
    # items fit, instead of waiting until its whole widened sample fits; None: it waits for its whole sample.
    alarm_min_size: Optional[int] = 48
    # A scheduled evaluation that a held alarm or the peak policy widened runs over budget on the largest sample
    # the budget affords, never below the size it had before; False: it waits for its whole widened sample.
    shrink_widened: bool = True


@dataclass
class PeakPolicyConfig:
    enabled: bool = True
    improving_factor: float = 3.9  # cap the interval at this multiple of the base while the metric improves
    confirm_size: int = 500  # a small eval that beats the best is re-measured with this many items (0: off)
    confirm_steps: int = 0  # within this many steps (0: the next scheduled eval is widened instead)


@dataclass
class LookbackPolicyConfig:
    enabled: bool = True  # does nothing until the trainer calls AdaptiveEvaluator.checkpoint_saved
    lag_steps: int = 5  # the checkpoint evaluated after a fall is at least this many steps before the alarm
    keep: int = 8  # the latest kept checkpoints remembered
    sample_size: Optional[int] = None  # items; None: the previous evaluation's


@dataclass
class PolicyConfig:
    alarm: AlarmPolicyConfig = field(default_factory=AlarmPolicyConfig)
    interval: IntervalPolicyConfig = field(default_factory=IntervalPolicyConfig)
    sample_size: SampleSizePolicyConfig = field(default_factory=SampleSizePolicyConfig)
    budget: BudgetPolicyConfig = field(default_factory=BudgetPolicyConfig)
    peak: PeakPolicyConfig = field(default_factory=PeakPolicyConfig)
    lookback: LookbackPolicyConfig = field(default_factory=LookbackPolicyConfig)


@dataclass
class ResourcesConfig:
    enabled: bool = False
    min_free_accelerator_gb: float = 0.0
    min_free_accelerator_fraction: float = 0.0
    min_free_host_gb: float = 0.0
    max_host_cpu_percent: float = 100.0
    max_deferral_steps: int = 50  # then the evaluation runs anyway, reason resources:forced
    alarm_bypass: bool = True


@dataclass
class LoggingConfig:
    tensorboard_dir: Optional[str] = None
    flush_secs: float = 30.0
    log_streams: bool = True


@dataclass
class DistributedConfig:
    timeout_s: float = 600.0
    # A rank whose eval mean of a metric deviates from the other ranks' by more raises a rank_discrepancy
    # alarm (in the metric's units); null: no comparison.
    rank_discrepancy_threshold: Optional[float] = None
    # Ranks of the world that only evaluate (asynchronously; see adaptive_eval.asynchronous.EvalRanks).
    eval_ranks: list[int] = field(default_factory=list)


@dataclass
class ReplayConfig:
    """The simulated clock and eval cost used by offline replay."""

    step_seconds: float = 10.0  # used when the trace has no time column
    eval_fixed_seconds: float = 5.0
    eval_seconds_per_sample: float = 0.05
    eval_set_size: int = 500  # items in the simulated eval set
    # true: a trace logged every k steps replays one training step at a time (the steps between its records
    # observe nothing), so freq_steps, costs per 1,000 steps and delays count training steps; false: each
    # record is one step (a series of checkpoints, a log of environment frames).
    every_step: bool = False
    # true: the trace's time column (a TensorBoard folder's wall times) is the training clock; false: every
    # step takes step_seconds.
    trace_time: bool = True
    # A checkpoint kept every this many steps (at the steps that are multiples of it; the evaluator is told with
    # checkpoint_saved, and policy.lookback may evaluate one after a fall, from its step's ground truth); null: none.
    checkpoint_every: Optional[int] = None


@dataclass
class Config:
    trigger: TriggerConfig = field(default_factory=TriggerConfig)
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    streams: StreamsConfig = field(default_factory=StreamsConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)


_CHOICES = {
    "evaluation.on_error": ("skip", "retry", "raise"),
    "evaluation.precision": ("fp32", "bf16", "fp16", "none"),
}
_POSITIVE_OR_NULL = ("evaluation.sample_size", "evaluation.timeout_s", "evaluation.async_integrate_after_steps",
                     "policy.budget.alarm_min_size", "policy.lookback.sample_size",
                     "replay.checkpoint_every", "policy.interval.max_run_fraction")
# 0 fires at every step, as in AReaL.
_NON_NEGATIVE_OR_NULL = ("trigger.freq_epochs", "trigger.freq_steps", "trigger.freq_secs", "policy.alarm.abrupt_steps")
METRIC_KINDS = ("proportion", "mean")
_POSITIVE = ("policy.alarm.cooldown_steps", "policy.alarm.corroborate", "policy.interval.min_factor", "policy.interval.max_factor",
             "policy.interval.relax", "policy.sample_size.initial", "policy.sample_size.min",
             "policy.sample_size.max", "policy.sample_size.target_half_width", "policy.sample_size.alarm_factor",
             "policy.budget.max_eval_fraction", "policy.peak.improving_factor", "policy.lookback.keep",
             "distributed.timeout_s",
             "replay.step_seconds", "logging.flush_secs")  # (replay.eval_set_size: in _RANGES)
_NON_NEGATIVE = ("evaluation.max_retries", "evaluation.retry_backoff_s", "resources.min_free_accelerator_gb",
                 "resources.min_free_accelerator_fraction", "resources.min_free_host_gb",
                 "resources.max_deferral_steps", "replay.eval_fixed_seconds", "replay.eval_seconds_per_sample",
                 "evaluation.seed")
_UNIT = ("evaluation.confidence", "policy.interval.tighten", "policy.interval.significance",
         "policy.budget.max_eval_fraction", "policy.budget.max_eval_device_fraction")
_COUNTS = ("policy.peak.confirm_size", "policy.peak.confirm_steps", "policy.alarm.corroborate_steps",
           "policy.lookback.lag_steps")
_RANGES = {"resources.max_host_cpu_percent": (0.0, 100.0), "resources.min_free_accelerator_fraction": (0.0, 1.0),
           "replay.eval_set_size": (1, 1_000_000)}
MAX_RETRY_BACKOFF_S = 3600.0  # evaluation.retry_backoff_s: longer, a retry is no retry (and 1e300 broke sleep())
MAX_ITEMS = 1_000_000  # an eval suite's (and replay's simulated eval set's) items: an order of them all is kept
_MIN_MAX = (("policy.sample_size.min", "policy.sample_size.max"),
            ("policy.interval.min_factor", "policy.interval.max_factor"))


def _get(cfg: DictConfig, key: str) -> Any:
    return OmegaConf.select(cfg, key)


def _structured(instance) -> DictConfig:
    """``OmegaConf.structured(instance)`` of a config dataclass instance; one whose values do not fit its types is a
    :class:`ConfigError` naming each key, as a mapping's problems are (``Config(trigger=TriggerConfig(freq_steps=
    "ten"))`` raised OmegaConf's own ValidationError, its message a multi-line dump; a probe)."""
    try:
        return OmegaConf.structured(instance)
    except OmegaConfBaseException:
        return load_config(dataclasses.asdict(instance))  # (raises, naming every problem)


def validate(cfg: DictConfig | Config) -> None:
    """Check values the types cannot express; raise :class:`ConfigError` listing every problem."""
    if not isinstance(cfg, DictConfig):
        cfg = _structured(cfg)
    problems = []
    bad = _interpolation_problems(cfg)
    if bad:  # each named once; the other checks run on a copy without them (at their schema defaults)
        cfg = copy.deepcopy(cfg)
        OmegaConf.set_readonly(cfg, False)
        _drop_interpolations(_interpolation_problems(cfg))
    for key in _POSITIVE_OR_NULL:
        v = _get(cfg, key)
        if v is not None and not (v > 0 and (math.isfinite(v) or key == "evaluation.timeout_s")):
            finite = " finite" if v > 0 else ""
            problems.append(f"{key}: must be positive{finite} or null, got {v!r}")
    for key in _COUNTS:
        v = _get(cfg, key)
        if not v >= 0:
            problems.append(f"{key}: must be >= 0, got {v!r}")
    for key, (lo, hi) in _RANGES.items():
        v = _get(cfg, key)
        if not lo <= v <= hi:
            problems.append(f"{key}: must lie in [{lo:g}, {hi:g}], got {v!r}")
    for key in _NON_NEGATIVE_OR_NULL:
        v = _get(cfg, key)
        if v is not None and not (v >= 0 and math.isfinite(v)):
            every = " (0: every step)" if key.startswith("trigger.") else ""
            problems.append(f"{key}: must be non-negative or null{every}, got {v!r}")
    for name, kind in _get(cfg, "evaluation.metric_kinds").items():
        if kind not in METRIC_KINDS:
            problems.append(f"evaluation.metric_kinds.{name}: must be one of {', '.join(METRIC_KINDS)}; got {kind!r}")
    for key in _POSITIVE:
        v = _get(cfg, key)
        if not (v > 0 and math.isfinite(v)):
            problems.append(f"{key}: must be a positive finite number, got {v!r}")
    for key in _NON_NEGATIVE:
        v = _get(cfg, key)
        if not (v >= 0 and math.isfinite(v)):
            problems.append(f"{key}: must be non-negative, got {v!r}")
    backoff = _get(cfg, "evaluation.retry_backoff_s")
    if backoff is not None and math.isfinite(backoff) and backoff > MAX_RETRY_BACKOFF_S:
        # (1e300 passed, then sleep() raised OverflowError inside the training step at the first retry; a probe)
        problems.append(f"evaluation.retry_backoff_s: at most {MAX_RETRY_BACKOFF_S:g} s (an hour) between two "
                        f"attempts, got {backoff!r}")
    for key in _UNIT:
        v = _get(cfg, key)
        closed = key.startswith("policy.budget.max_eval")  # (1: evaluations may take all the time)
        if not 0 < v < 1 and not (closed and v == 1):
            problems.append(f"{key}: must lie in {'(0, 1]' if closed else '(0, 1)'}, got {v!r}")
    for key, choices in _CHOICES.items():
        v = _get(cfg, key)
        if v not in choices:
            problems.append(f"{key}: must be one of {', '.join(choices)}; got {v!r}")
    threshold = _get(cfg, "distributed.rank_discrepancy_threshold")
    if threshold is not None and not (threshold >= 0 and math.isfinite(threshold)):
        problems.append(f"distributed.rank_discrepancy_threshold: must be non-negative or null, got {threshold!r}")
    problems += _async_problems(cfg)
    already = {p.split(":", 1)[0] for p in problems}  # (a bound reported bad is not compared again)
    for lo_key, hi_key in _MIN_MAX:
        lo, hi = _get(cfg, lo_key), _get(cfg, hi_key)
        if lo > hi and lo_key not in already and hi_key not in already:
            problems.append(f"{lo_key}: {lo!r} is larger than {hi_key}: {hi!r}")
    if cfg.policy.interval.relax < 1 and "policy.interval.relax" not in already:  # (said twice when not positive)
        problems.append(f"policy.interval.relax: must be >= 1, got {cfg.policy.interval.relax!r}")
    if not cfg.policy.sample_size.alarm_factor >= 1 and "policy.sample_size.alarm_factor" not in already:
        problems.append(f"policy.sample_size.alarm_factor: must be >= 1, got {cfg.policy.sample_size.alarm_factor!r}")
    problems += _urgent_problems(cfg.policy.alarm.urgent_detectors)
    problems += _evaluation_problems(cfg.evaluation)
    problems += _pass_at_k_problems(cfg)
    specs = [(f"streams.{section}[{i}]", spec) for section in ("default", "eval")
             for i, spec in enumerate(cfg.streams[section])]
    specs += [(f"streams.watch.{stream}[{i}]", spec) for stream, lst in cfg.streams.watch.items()
              for i, spec in enumerate(lst)]
    for key, spec in specs:
        named: list[str] = []
        problem = _detector_problem(spec, named)
        if problem:
            # (one bad parameter: named by its own key, so its own line; it was the line of the spec's "- type:")
            problems.append(f"{key}.{named[0]}: {problem}" if len(named) == 1 else f"{key}: {problem}")
    if bad:  # (a default standing in for a bad interpolation is not reported again)
        named = {key for key, _, _, _ in bad}
        problems = [f"{key}: {msg}" for key, msg, _, _ in bad] + [
            p for p in problems if p.split(":", 1)[0].strip() not in named]
    if problems:
        raise ConfigError(problems)


def _urgent_problems(names) -> list[str]:
    """``policy.alarm.urgent_detectors``: a name no alarm carries (a typo) would quietly make NaN alarms wait for
    the cooldown and the budget (found by a new-user probe: ``nonfinit`` moved a NaN run's evaluation 28 steps)."""
    from adaptive_eval.detectors import available

    known = [*available(), "rank_discrepancy"]
    return [f"policy.alarm.urgent_detectors[{i}]: unknown detector {name!r}; one of {', '.join(known)}"
            for i, name in enumerate(names) if name not in known]


def _async_problems(cfg: DictConfig) -> list[str]:
    """The asynchronous-evaluation keys (the world-size checks of eval ranks happen in EvalRanks)."""
    problems = []
    n = cfg.evaluation.max_in_flight
    if not n >= 1:
        problems.append(f"evaluation.max_in_flight: must be at least 1 (evaluations running at once), got {n!r}")
    ranks = list(cfg.distributed.eval_ranks)
    bad = [r for r in ranks if r < 0]
    if bad:
        problems.append(f"distributed.eval_ranks: rank numbers must be >= 0, got {bad[0]!r}")
    if len(set(ranks)) != len(ranks):
        problems.append(f"distributed.eval_ranks: a rank is listed twice: {ranks!r}")
    if ranks and not cfg.evaluation.asynchronous:
        problems.append("distributed.eval_ranks: eval ranks evaluate asynchronously; set evaluation.asynchronous: "
                        "true")
    folder = cfg.logging.tensorboard_dir
    if folder in ("True", "False", "true", "false"):  # (OmegaConf has turned YAML's true into the string "True")
        problems.append(f"logging.tensorboard_dir: a folder to write to, or null, not {folder.lower()}; e.g. "
                        "tensorboard_dir: runs/tb")
    elif folder is not None and folder.strip() in ("", "None", "none", "null", "Null", "NULL", "~"):
        # ('null' quoted, or from ${oc.env:TB_DIR} set to null, wrote into a folder ./null; a probe)
        # (Python's None written into YAML or an f-string wrote into a folder ./None; "" into the working directory)
        problems.append(f"logging.tensorboard_dir: a folder to write to, or null (no TensorBoard), not {folder!r}; "
                        "YAML's None is null")
    return problems


def _evaluation_problems(ev) -> list[str]:
    problems = []
    for i, k in enumerate(ev.pass_at_k):
        if not k >= 1:
            problems.append(f"evaluation.pass_at_k[{i}]: must be a positive integer, got {k!r}")
    from adaptive_eval.stats import aggregation_problem

    for name, kinds in ev.aggregations.items():
        for i, kind in enumerate(kinds):
            problem = aggregation_problem(kind)
            if problem:
                problems.append(f"evaluation.aggregations.{name}[{i}]: {problem}")
    if ev.suite_aggregate is not None and (ev.suite_aggregate in ev.suites or "/" in ev.suite_aggregate
                                           or not ev.suite_aggregate.strip()):
        problems.append(f"evaluation.suite_aggregate: {ev.suite_aggregate!r} must be a new name without '/', not a "
                        "suite's")
    elif ev.suite_aggregate is not None and not ev.suites:
        problems.append(f"evaluation.suite_aggregate: {ev.suite_aggregate!r} is the mean over evaluation.suites, and "
                        "there are none: set suites, or leave it null")
    elif ev.suite_aggregate in ("None", "none", "null", "Null", "NULL"):
        problems.append(f"evaluation.suite_aggregate: {ev.suite_aggregate!r}: a name for the mean over the suites, or "
                        "null (none); YAML's None is null")
    elif ev.suite_aggregate is not None and all(isinstance(s.weight, (int, float)) and s.weight == 0
                                                for s in ev.suites.values()):
        # (accepted, its metric never reported, and a tracked all/acc was told "did you mean 'a/acc'?"; a probe)
        problems.append(f"evaluation.suite_aggregate: {ev.suite_aggregate!r} is the weight-weighted mean over the "
                        "suites, and every suite's weight is 0 ("
                        + ", ".join(f"evaluation.suites.{n}.weight" for n in ev.suites)
                        + "): give one a positive weight, or leave suite_aggregate null")
    problems += _tracked_metric_problems(ev)
    for name, suite in ev.suites.items():
        key = f"evaluation.suites.{name}"
        if "/" in name or not name:
            problems.append(f"{key}: a suite name may not be empty or contain '/'")
        # (a required key: it read "size: must be >= 1, got 0" when left out)
        size = None if OmegaConf.is_missing(suite, "size") else suite.size
        if size is None:
            problems.append(f"{key}.size: missing; every suite needs its number of items (e.g. size: 500)")
        for field_name, low in (("size", 1), ("samples_per_item", 1), ("every", 1), ("max_samples_per_item", 1),
                                ("min_samples_per_item", 1)):
            v = size if field_name == "size" else suite[field_name]
            if v is not None and not v >= low:
                problems.append(f"{key}.{field_name}: must be >= {low}, got {v!r}")
        if size is not None and size > MAX_ITEMS:  # (1e12 loaded, then raised MemoryError in a training step; a probe)
            problems.append(f"{key}.size: at most {MAX_ITEMS:,} items (each evaluation draws from a seeded order of "
                            f"them all, held in memory), got {size!r}")
        if (suite.max_samples_per_item is not None and suite.samples_per_item >= 1
                and suite.max_samples_per_item < suite.samples_per_item):
            problems.append(f"{key}.max_samples_per_item: {suite.max_samples_per_item} is below {key}.samples_per_item: "
                            f"{suite.samples_per_item} (the sample-size policy could never ask for the answers per item "
                            "generated; raise it, or leave it null)")
        from adaptive_eval.policies._sample_size import _max_samples_per_item

        top = _max_samples_per_item(suite)  # (the policy's own rule for a null max_samples_per_item)
        if suite.min_samples_per_item is not None and suite.min_samples_per_item > top >= 1:
            problems.append(f"{key}.min_samples_per_item: {suite.min_samples_per_item} is above the most the "
                            f"sample-size policy may choose ({key}.max_samples_per_item: "
                            f"{suite.max_samples_per_item if suite.max_samples_per_item is not None else 'null, so ' + str(top)})")
        if not (suite.cost > 0 and math.isfinite(suite.cost)):
            problems.append(f"{key}.cost: must be a positive finite number, got {suite.cost!r}")
        if not (suite.item_cost >= 0 and math.isfinite(suite.item_cost)):
            problems.append(f"{key}.item_cost: must be non-negative, got {suite.item_cost!r}")
        if not (suite.weight >= 0 and math.isfinite(suite.weight)):
            problems.append(f"{key}.weight: must be non-negative, got {suite.weight!r}")
        if suite.sample_size is not None and not suite.sample_size >= 1:
            problems.append(f"{key}.sample_size: must be positive or null, got {suite.sample_size!r}")
        elif suite.sample_size is not None and size is not None and size >= 1 and suite.sample_size > size:
            problems.append(f"{key}.sample_size: {suite.sample_size} is larger than {key}.size: {size} (items per "
                            "evaluation cannot exceed the suite; null evaluates all of it)")
        strata = list(suite.strata)
        if suite.report_strata and not strata:
            problems.append(f"{key}.report_strata: true needs {key}.strata (one stratum label per item)")
        if strata:
            missing = [i for i, label in enumerate(strata) if label is None or str(label) == ""]
            if size is None:
                pass  # (said above: the labels cannot be counted against it)
            elif len(strata) < size:
                problems.append(f"{key}.strata: {len(strata)} labels for {size} items; item index "
                                f"{len(strata)} has no stratum label")
            elif len(strata) > size:
                problems.append(f"{key}.strata: {len(strata)} labels for {size} items (size)")
            if missing:
                problems.append(f"{key}.strata: item index {missing[0]} has an empty stratum label")
    everies = {name: suite.every for name, suite in ev.suites.items() if isinstance(suite.every, int)}
    if everies and len(everies) == len(ev.suites) and min(everies.values()) > 1:
        # (an evaluation with no suite due called evaluate_fn with no suite, was counted, and relaxed the schedule as
        # a quiet one: the tracked metric was measured at 4 steps of 400; a new-user probe)
        problems.append("evaluation.suites: no suite is due at every evaluation ("
                        + ", ".join(f"evaluation.suites.{n}.every: {e}" for n, e in everies.items())
                        + "), so some scheduled evaluations would evaluate nothing; give one of them every: 1 (the "
                        "tracked metric's suite, usually), or lengthen the schedule instead (trigger.freq_steps)")
    return problems


def _tracked_metric_problems(ev) -> list[str]:
    """With suites every eval metric is ``"<suite>/<metric>"`` (or ``"<suite_aggregate>/<metric>"``): an
    ``evaluation.metric`` of any other form can never be returned, and the policies would track nothing (a
    typo, ``math500/accuracy`` for the suite ``math``'s ``acc``, doubled the evaluations of a replay)."""
    import difflib

    metric = ev.metric
    if metric is None or not ev.suites:
        return []
    head, _, rest = str(metric).partition("/")
    prefixes = [str(name) for name in ev.suites]
    if ev.suite_aggregate:
        prefixes.append(str(ev.suite_aggregate))
    if rest and head in prefixes:
        base, _, last = rest.rpartition("/")
        asked = [str(a) for a in ((ev.aggregations or {}).get(base) or ())]
        if ev.suite_aggregate and head == str(ev.suite_aggregate) and re.fullmatch(r"p\d{1,2}", last) and last in asked:
            # (an aggregation the config asks for, not a metric of the user's named so: all/ret/p5, precision@5,
            # is reported; a review)
            # (never reported: a weighted mean of the suites' quantiles is no quantile, suites.weighted_aggregate;
            # accepted, the policies tracked nothing, a RuntimeWarning once at run time; a review)
            return [f"evaluation.metric: {metric!r}: a quantile aggregation has no aggregate over the suites (a "
                    f"weighted mean of their quantiles is no quantile); track one suite's, e.g. "
                    f"'{prefixes[0]}/{rest}'"]
        return []
    forms = ", ".join(f"'{p}/<metric>'" for p in prefixes)
    close = difflib.get_close_matches(head, prefixes, n=1, cutoff=0.6) if rest else []
    hint = f" (did you mean the suite {close[0]!r}?)" if close else ""
    if head == "eval" and rest.partition("/")[0] in prefixes and rest.partition("/")[2]:
        hint = f" (eval/ begins a trace's column, not a metric's name: {rest!r})"
    return [f"evaluation.metric: {metric!r} is not a metric of a configured suite{hint}: with evaluation.suites every "
            f"eval metric is reported as {forms}, so the policies would track nothing"]


def _pass_at_k_problems(cfg: DictConfig) -> list[str]:
    """A k of ``evaluation.pass_at_k`` above the answers per item that any suite's evaluation can get: that
    pass@k is never reported (it was accepted without a word).  A k only some suites reach is fine (pass@16 of
    a 16-answer suite beside a 4-answer one, which reports its pass@k up to 4)."""
    ev = cfg.evaluation
    if not ev.suites or any(not (isinstance(s.samples_per_item, int) and s.samples_per_item >= 1)
                            or (s.max_samples_per_item is not None and s.max_samples_per_item < 1)
                            for s in ev.suites.values()):
        return []  # (no suites: the answers are whatever evaluate_fn returns; a bad suite is said above)
    from adaptive_eval.suites import most_answers_per_item

    sized = bool(cfg.policy.sample_size.enabled)
    most = {str(name): most_answers_per_item(suite, sized) for name, suite in ev.suites.items()}
    problems = []
    tracked = re.fullmatch(r"([^/]+)/.+/pass@(\d+)", str(ev.metric or ""))
    suite = ev.suites.get(tracked.group(1)) if tracked else None
    if suite is not None and sized and suite.sample_size is None and \
            int(tracked.group(2)) > (suite.min_samples_per_item or 1):
        # (a new user's probe: after the first evaluation the policy asked one answer per item, no evaluation
        # reported pass@4 again, and the policies and the pick tracked the untrained model's evaluation alone)
        key = f"evaluation.suites.{tracked.group(1)}.min_samples_per_item"
        least = "null" if suite.min_samples_per_item is None else suite.min_samples_per_item
        problems.append(f"evaluation.metric: {ev.metric!r} is reported only by evaluations of {tracked.group(2)} or "
                        f"more answers per item, and the sample-size policy may ask for fewer ({key}: {least}); set "
                        f"{key}: {tracked.group(2)}, or track "
                        f"{tracked.group(0).rsplit('/', 1)[0]!r}")
    for i, k in enumerate(ev.pass_at_k):
        if k >= 1 and all(k > top for top, _ in most.values()):
            why = "; ".join(f"{name}: {top} ({reason})" for name, (top, reason) in most.items())
            sized_any = any("max_samples" in reason for _, reason in most.values())
            raise_key = "max_samples_per_item" if sized_any else "samples_per_item"
            problems.append(f"evaluation.pass_at_k[{i}]: {k} is above the answers per item of every suite's "
                            f"evaluations, so pass@{k} would never be reported (at most {why}); lower it, or raise "
                            f"a suite's {raise_key}")
    return problems


def _detector_problem(spec, named: list[str] | None = None) -> str | None:
    """Why a detector spec cannot be built (None if it can): checked at load time, not at the first
    ``observe`` of a stream hours into a run.  Building is cheap for shipped settings; an unusual ``arl0``
    is calibrated (and cached) here rather than mid-run.  The parameters refused alone are added to ``named``."""
    if "type" not in spec:
        keys = [str(k) for k in spec]
        if not keys:
            return "a detector spec needs a 'type' (got an empty mapping)"
        msg = f"a detector spec needs a 'type' (got the keys {', '.join(repr(k) for k in keys)})"
        if any(":" in k for k in keys):
            msg += ("; in a YAML flow mapping put a space after each ':', as in {type: cusum, k: 0.5} "
                    "({type:cusum} is one key 'type:cusum')")
        return msg
    from adaptive_eval.detectors import make_detector

    params = OmegaConf.to_container(spec, resolve=True) if isinstance(spec, DictConfig) else dict(spec)
    try:
        make_detector(params)
    except (TypeError, ValueError) as exc:
        # A detector checks its parameters one at a time: build it with each alone to name every bad one at once
        # (k: abc and threshold: -8 in one spec were reported one per run); what only the combination breaks
        # (a min above a max) is the error itself.
        alone = []
        for key, value in params.items():
            if key == "type":
                continue
            try:
                make_detector({"type": params["type"], key: value})
            except (TypeError, ValueError) as one:
                alone.append(str(one))
                if named is not None:
                    named.append(str(key))
        if named is not None and len(alone) == 1 and alone[0] != str(exc):
            # (the spec fails for another reason than that parameter alone: reference 30 below the default warmup,
            # beside "give either threshold or arl0", was named for the spec's error; a review)
            named.clear()
        return "; ".join(dict.fromkeys(alone)) if len(alone) > 1 else str(exc)
    return None


def preset_names() -> list[str]:
    """Names of the presets shipped in ``adaptive_eval/configs``."""
    files = resources.files("adaptive_eval.configs")
    return sorted(p.name[:-5] for p in files.iterdir() if p.name.endswith(".yaml"))


def _bare(name: str) -> bool:
    """A name with no folder in it (``default``, not ``./default`` or ``configs/default``)."""
    return os.sep not in name and (os.altsep is None or os.altsep not in name)


def _preset_named(value) -> bool:
    """``value`` is a preset's bare name (a string: ``Path("./default")`` is ``default``, a path), the preset from
    any directory."""
    return isinstance(value, str) and _bare(value) and value in preset_names()


def _resolve_path(path: str | os.PathLike) -> tuple[str, str]:
    """Return (display name, YAML text) for a file path or a preset name.  A preset's bare name (``default``, no
    folder, no ``.yaml``) is the preset from any directory: a file or folder of that name in the working directory
    was read instead (``./default`` reads it), so the same call meant two configs (found by a new user's probe)."""
    p = os.fspath(path)
    if _preset_named(path):
        if os.path.exists(p):
            from adaptive_eval.types import log_once

            log_once(("preset-shadowed", os.path.abspath(p)), "%r is the shipped preset; the %s of that name in the "
                     "working directory is not read (pass ./%s for it; said once)", p,
                     "folder" if os.path.isdir(p) else "file", p)
        res = resources.files("adaptive_eval.configs") / f"{p}.yaml"
        return f"preset:{p} ({res})", res.read_text(encoding="utf-8")
    if os.path.exists(p):
        if os.path.isdir(p):
            raise ConfigError([f"{p}: is a directory, not a YAML file"])
        try:
            with open(p, encoding="utf-8") as f:
                return p, f.read()
        except OSError as exc:
            raise ConfigError([f"{p}: cannot be read ({exc.strerror})"]) from None
        except UnicodeDecodeError as exc:
            with open(p, "rb") as f:
                line = f.read(exc.start).count(b"\n") + 1
            raise ConfigError([f"{p}:{line}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x}); save it as UTF-8"]) \
                from None
    name = p[:-5] if p.endswith(".yaml") else p
    if os.sep not in p and name in preset_names():
        res = resources.files("adaptive_eval.configs") / f"{name}.yaml"
        return f"preset:{name} ({res})", res.read_text(encoding="utf-8")
    import difflib

    near = difflib.get_close_matches(name, preset_names(), n=1) if os.sep not in p else []
    hint = f"; did you mean {near[0]!r}?" if near else ""
    where = "" if os.path.isabs(p) else f" in {os.getcwd()}"  # (a relative path: from where? a probe's question)
    raise ConfigError([f"{p}: no such config file{where} (and no preset of that name; presets: "
                       f"{', '.join(preset_names())})" + hint])


def _unclosed_line(text: str) -> int | None:
    """The line of the first ``[`` or ``{`` never closed in a YAML text (outside quotes and comments), or None."""
    stack: list[int] = []
    for number, line in enumerate(text.splitlines(), 1):
        quote = None
        for i, ch in enumerate(line):
            if quote is not None:
                quote = None if ch == quote else quote
            elif ch in "'\"":
                quote = ch
            elif ch == "#" and (i == 0 or line[i - 1].isspace()):
                break
            elif ch in "[{":
                stack.append(number)
            elif ch in "]}" and stack:
                stack.pop()
    return stack[0] if stack else None


def _key_lines(text: str, duplicates: list[str] | None = None) -> dict[str, int]:
    """Map each dotted key of a YAML document to its 1-based line number; a key given twice in one mapping
    (YAML keeps the last silently) is added to ``duplicates`` as ``"<line>: <key> ... line <first>"``, and so is a
    name YAML reads as a number or a boolean (a suite ``2024:`` or ``on:``: OmegaConf refused it with a traceback
    naming no line) and a number YAML 1.1 reads as octal (``010`` read 8; a new user's probe)."""
    import yaml

    lines: dict[str, int] = {}
    seen: list[str] = []  # the keys given twice (not their children again)
    plain = "tag:yaml.org,2002:"

    def walk(node, prefix):
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                key = f"{prefix}.{k.value}" if prefix else str(k.value)
                if key in lines and duplicates is not None and not any(key.startswith((d + ".", d + "["))
                                                                           for d in seen):
                    seen.append(key)
                    duplicates.append(f"{k.start_mark.line + 1}: {key}: given twice (also at line {lines[key]}; "
                                      "YAML would keep only the last)")
                kind = k.tag[len(plain):] if k.tag.startswith(plain) else ""
                # (a date, 2024-06-01: a suite named by a release, escaped as OmegaConf's KeyValidationError; a probe)
                if duplicates is not None and isinstance(k, yaml.ScalarNode) and kind in ("int", "float", "bool",
                                                                                           "null", "timestamp"):
                    duplicates.append(f"{k.start_mark.line + 1}: {key}: YAML reads the name {k.value!r} as a "
                                      f"{dict(null='null', bool='boolean', timestamp='date').get(kind, 'number')}: "
                                      "quote it "
                                      f"(\"{k.value}\":) to use it as a name")
                lines[key] = k.start_mark.line + 1
                if (duplicates is not None and isinstance(v, yaml.ScalarNode) and v.tag == plain + "int"
                        and re.fullmatch(r"[-+]?0[0-7_]+", v.value)):
                    duplicates.append(f"{v.start_mark.line + 1}: {key}: YAML reads {v.value} as an octal number "
                                      f"({yaml.safe_load(v.value)}): write {int(v.value.replace('_', ''))}, or "
                                      f"0o{v.value.lstrip('+-0')} for octal")
                walk(v, key)
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                key = f"{prefix}[{i}]"
                lines[key] = v.start_mark.line + 1
                walk(v, key)

    try:
        walk(yaml.compose(text, Loader=yaml.SafeLoader), "")
    except yaml.YAMLError:
        pass
    return lines


def _where(key: str, source: str, lines: dict[str, int]) -> str:
    probe = str(key)
    while probe:
        if probe in lines:
            return f"{source}:{lines[probe]}: "
        probe = probe[:-len(probe.rpartition("[")[2]) - 1] if probe.endswith("]") else probe.rpartition(".")[0]
    return f"{source}: "


def _list_item_problem(leaf: str, value: Any, index: int, msg: str) -> tuple[str, str]:
    """(dotted key, message) for item ``index`` of a list somewhere in ``value`` (under ``leaf``) that failed:
    the first such list whose item there is not a mapping (detector specs are the lists of mappings)."""
    def find(node, path):
        if isinstance(node, list):
            if 0 <= index < len(node) and not isinstance(node[index], dict):
                return path, node[index]
            return None
        if isinstance(node, dict):
            for k, v in node.items():
                found = find(v, f"{path}.{k}" if path else str(k))
                if found:
                    return found
        return None

    found = find(value, leaf)
    if found is None:
        return f"{leaf}[{index}]", msg
    path, got = found
    return f"{path}[{index}]", f"{msg} (got {got!r}; a detector spec is a mapping such as {{type: nonfinite}})"


def _unknown(key: str) -> str:
    """"unknown key 'K'", with the closest key of its section when one is close (a misspelling)."""
    if key in ("defaults", "extends", "base", "include"):  # (another preset to start from: said only "unknown")
        return (f"unknown key {key!r}: a config file holds only the keys it changes, on the default preset; to start "
                "from another preset give it as --config PRESET (load_config('aggressive', [...])) with --set, or "
                "copy that preset's file (adaptive-eval config --config PRESET prints it)")
    return f"unknown key {key!r}{_suggestion(key)}"


def _suggestion(key: str) -> str:
    """" (did you mean 'K2'?)" when the schema has a key close to ``key`` in the same section, else ""."""
    import difflib

    parent, _, name = str(key).rpartition(".")
    close = difflib.get_close_matches(name, _keys_of(parent), n=1, cutoff=0.75)
    if close and close[0] == name:
        # a key that is a valid path, unknown: written with its dots in YAML (one key, not nested); the hint
        # suggested the same name (found by a new-user probe)
        parts = str(key).split(".")
        nested = "".join(f"{p}: {{" for p in parts[:-1]) + f"{parts[-1]}: ..." + "}" * (len(parts) - 1)
        return f" (a YAML key with dots is one key: nest it, {nested}, or give it as --set {key}=...)"
    return f" (did you mean {((parent + '.') if parent else '') + close[0]!r}?)" if close else ""


def _keys_of(dotted: str) -> list[str]:
    """The keys the schema allows under ``dotted`` (a section, or an item of a mapping of sections such as
    ``evaluation.suites.<name>``); [] if it names no section."""
    hint: Any = Config
    for part in dotted.split(".") if dotted else []:
        hint = _unoptional(hint)
        if dataclasses.is_dataclass(hint):
            hint = _field_hints(hint).get(part)
        elif typing.get_origin(hint) is dict:
            hint = typing.get_args(hint)[1]
        else:
            return []
    hint = _unoptional(hint)
    return list(_field_hints(hint)) if dataclasses.is_dataclass(hint) else []


@functools.lru_cache(maxsize=None)
def _field_hints(cls) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _unoptional(hint):
    if typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0] if len(args) == 1 else Any
    return hint


_SHAPES = {
    list[dict[str, Any]]: "a list (of detector specs)",
    list[int]: "a list (of integers)",
    list[str]: "a list (of strings)",
    dict[str, Any]: "a mapping (a detector spec such as {type: cusum})",
    dict[str, list[dict[str, Any]]]: "a mapping (stream name -> its list of detector specs)",
    dict[str, SuiteConfig]: "a mapping (suite name -> its settings)",
    dict[str, list[str]]: "a mapping (metric -> its list of aggregations)",
    dict[str, str]: "a mapping (metric -> proportion or mean)",
}


def _shape_problems(value: Any, hint: Any = Config, path: str = "") -> list[tuple[str, str]]:
    """(dotted key, message) for each place in ``value`` (plain data) where a list stands where the schema
    wants a mapping, or the reverse: OmegaConf's merge raises a bare ``TypeError("Cannot merge incompatible
    container types")`` there (or names a type hint), without the key."""
    hint = _unoptional(hint)
    if hint is bool and isinstance(value, (int, float)) and not isinstance(value, bool) and value not in (0, 1):
        # (OmegaConf reads any number as a switch: evaluation.asynchronous: 2, meant as a lag of 2 steps, turned
        # asynchronous evaluation on without a word; a review)
        return [(path or "<root>", f"expected true or false, got {value!r}")]
    origin = typing.get_origin(hint)
    want_list = origin in (list, tuple)
    want_map = origin is dict or dataclasses.is_dataclass(hint)
    container = isinstance(value, (dict, list, tuple))
    # A scalar (not null, not an interpolation) for a section or list is one too, but a detector spec that is
    # not a mapping has its own message (_list_item_problem).
    scalar = (not container and value is not None and hint != dict[str, Any]
              and not (isinstance(value, str) and "${" in value))
    if ((want_list and (isinstance(value, dict) or scalar))
            or (want_map and (isinstance(value, (list, tuple)) or scalar))):
        expected = _SHAPES.get(hint) or (f"a mapping (of keys such as {', '.join(list(_field_hints(hint))[:3])})"
                                         if dataclasses.is_dataclass(hint) else "a mapping" if want_map else "a list")
        got = "a mapping" if isinstance(value, dict) else "a list" if container else repr(value)
        split = ""
        if (path.startswith("streams.watch.") and isinstance(value, dict) and want_list and value
                and all(isinstance(v, (list, tuple)) for v in value.values())):
            # (a stream name with a dot, train.loss, split by a dotted override into train -> loss; a probe)
            name = f"{path[len('streams.watch.'):]}.{next(iter(value))}" if value else path[len("streams.watch."):]
            split = (f" (a stream name with a dot, {name!r}, is split by a dotted key: give the whole mapping, "
                     f"streams.watch={{'{name}': [...]}})")
        return [(path or "<root>", f"expected {expected}, got {got}{split}")]
    out: list[tuple[str, str]] = []
    if isinstance(value, dict) and want_map:
        hints = _field_hints(hint) if dataclasses.is_dataclass(hint) else None
        for k, v in value.items():
            sub = hints.get(k) if hints is not None else typing.get_args(hint)[1]
            if sub is not None:
                out += _shape_problems(v, sub, f"{path}.{k}" if path else str(k))
    elif isinstance(value, (list, tuple)) and want_list:
        for i, v in enumerate(value):
            out += _shape_problems(v, typing.get_args(hint)[0], f"{path}[{i}]")
    return out


def _merge_error(exc: OmegaConfBaseException, source: str, lines: dict[str, int], leaf: str = "",
                 value: Any = None) -> ConfigError:
    """The error of merging ``leaf`` (a dotted key whose ``value`` failed), named by its full key."""
    key = getattr(exc, "full_key", None)
    if isinstance(key, int) and not isinstance(key, bool):  # an item of a list: OmegaConf gives only its index
        key, msg = _list_item_problem(leaf, value, key, str(exc).splitlines()[0])
        return ConfigError([f"{_where(key, source, lines)}{key}: {msg}"])
    key = str(key) if key else (leaf or "<root>")
    msg = str(exc).splitlines()[0]
    if "not in struct" in msg or "Key '" in msg and "not in" in msg:
        msg = _unknown(key)
    elif isinstance(value, str) and "could not be converted to" in msg and _yaml11_text_number(value):
        # YAML 1.1 reads 1e3 (no dot) as text (found by a new-user probe: the message did not say why)
        msg += f" (YAML reads {value} as text: write {_yaml11_text_number(value, 'to Integer' in msg)})"
    elif isinstance(value, str) and "could not be converted to" in msg and re.fullmatch(_TEXT_EXPONENT, value.strip()):
        msg += f" ({value} is beyond any number this takes: floats end near 1.8e308)"  # (it said "write inf"; a probe)
    elif "is not Optional" in msg:
        # (a section whose keys are all commented out reads null: OmegaConf's "field 'policy' is not Optional" gave
        # no way on; a probe)
        msg = ("empty (null: its keys commented out?): give it a value, write {} for a section or [] for a list, "
               "or delete the line")
    return ConfigError([f"{_where(key, source, lines)}{key}: {msg}"])


_TEXT_EXPONENT = r"[-+]?\d+[eE][-+]?\d+"  # a number YAML 1.1 reads as text: an exponent without a dot


def _yaml11_text_number(text: str, integer: bool = False) -> str | None:
    """The number ``text`` means where YAML 1.1 reads it as a string (``1e3``, ``5E-2``: an exponent without a dot
    in the mantissa), written as YAML reads a number (for an ``integer`` key, its digits); None otherwise.  (The
    hint for 1e30 read "write 1e+30", text again, and for an integer 2e15 "2000000000000000.0"; a probe.)"""
    if not re.fullmatch(_TEXT_EXPONENT, text.strip()):
        return None
    value = float(text)
    if not math.isfinite(value):  # (1e400: "write inf", which is then refused; a probe)
        return None
    if value.is_integer() and (integer or abs(value) < 1e15):
        import decimal

        return str(int(decimal.Decimal(text.strip())))  # (exact: 1e30's float is 1000000000000000019884624838656)
    mantissa, _, exponent = repr(value).partition("e")  # (1e+30 is text to YAML 1.1 too: 1.0e+30)
    return f"{mantissa if '.' in mantissa else mantissa + '.0'}e{exponent}" if exponent else repr(value)


def _leaves(hint: Any, data: dict, prefix: tuple = ()):
    """Each (key parts, value) of ``data``, descending into the schema's typed sections, and into each item of
    a mapping of sections (``evaluation.suites.<name>``, first as ``{}`` to create it) so that every key of
    every suite is checked on its own."""
    hints = _field_hints(hint) if dataclasses.is_dataclass(hint) else None
    for k, v in data.items():
        parts = prefix + (str(k),)
        if hints is not None:
            sub = _unoptional(hints.get(k)) if isinstance(k, str) else None
        else:  # a mapping of sections
            sub = _unoptional(typing.get_args(hint)[1])
        if isinstance(v, dict) and dataclasses.is_dataclass(sub):
            if hints is None:
                yield parts, {}
            yield from _leaves(sub, v, parts)
        elif (isinstance(v, dict) and typing.get_origin(sub) is dict
              and dataclasses.is_dataclass(_unoptional(typing.get_args(sub)[1]))):
            if not v:
                yield parts, v
            yield from _leaves(sub, v, parts)
        else:
            yield parts, v


def _flat_keys(value: dict, prefix: str = "") -> list[str]:
    """The dotted keys of the leaves of a nested mapping (a list or an empty mapping is a leaf)."""
    out = []
    for k, v in value.items():
        key = f"{prefix}{k}"
        out += _flat_keys(v, key + ".") if isinstance(v, dict) and v else [key]
    return out


def _nested(parts: tuple, value: Any) -> dict:
    out: dict = {}
    node = out
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return out


def _yaml_reason(exc: Exception, value: str) -> str:
    """The short reason PyYAML gives (not its multi-line report), with a hint to quote a string that starts
    with a character YAML reserves."""
    reason = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    if value.strip()[:1] in tuple("@`%*!&|>"):
        reason += f"; to pass a string, quote it: '\"{value.strip()}\"'"
    return reason


def _interpolation_problems(cfg: DictConfig) -> list[tuple[str, str, Any, Any]]:
    """(dotted key, message, container, key in it) for each interpolation of ``cfg`` that does not resolve to
    a valid value: a missing key (with the schema's closest key), itself, a value of the wrong type."""
    from omegaconf import ListConfig
    from omegaconf.errors import InterpolationKeyError

    found = []

    def walk(node, path):
        keys = range(len(node)) if isinstance(node, ListConfig) else list(node.keys())
        for k in keys:
            key = f"{path}[{k}]" if isinstance(node, ListConfig) else (f"{path}.{k}" if path else str(k))
            if OmegaConf.is_interpolation(node, k):
                raw = node._get_node(k)._value()
                try:
                    node[k]
                except InterpolationKeyError as exc:
                    missing = str(exc).split("'")[1] if str(exc).count("'") >= 2 else ""
                    hint = _suggestion(missing) if missing and not missing.startswith(".") else ""
                    found.append((key, f"{raw}: interpolation key {missing!r} not found{hint}", node, k))
                except (OmegaConfBaseException, ValueError, TypeError, LookupError) as exc:
                    msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                    if msg.startswith("While dereferencing interpolation") and "': " in msg:
                        msg = msg.split("': ", 1)[1]
                    found.append((key, f"{raw}: {msg[:1].lower() + msg[1:]}", node, k))
                continue
            child = node._get_node(k)
            if isinstance(child, (DictConfig, ListConfig)) and not child._is_none():
                walk(child, key)

    walk(cfg, "")
    return found


_FLOAT_MAX = 1.7976931348623157e308
_BEYOND_FLOAT = "an integer beyond any number this takes (floats end near 1.8e308)"


def _huge_integers(node, prefix: str = "") -> list[tuple[str, int, Any, Any]]:
    """``(key, digits, node, k)`` of each integer value beyond float range, as :func:`_drop_interpolations` takes."""
    from omegaconf import ListConfig

    out = []
    items = node.items_ex(resolve=False) if isinstance(node, DictConfig) else enumerate(node)
    for k, value in items:
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(value, (DictConfig, ListConfig)):
            # (an interpolation of a list, streams.eval: ${streams.default}, is no list to walk: AttributeError out
            # of load_config, a 25-line traceback on the CLI; a probe.  What it points at is walked there.)
            if not (value._is_interpolation() or value._is_none() or value._is_missing()):
                out += _huge_integers(value, key)
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > _FLOAT_MAX:
            out.append((key, len(str(abs(value))), node, k))
    return out


def _drop_interpolations(bad: list[tuple[str, Any, Any, Any]]) -> None:
    """Replace each interpolation of ``bad`` by its schema default (a typed section's key) or remove it (from
    a list or a plain mapping), so that the other checks can run."""
    from omegaconf import ListConfig, open_dict

    for _, _, node, k in reversed(bad):
        kind = OmegaConf.get_type(node)
        with open_dict(node):
            if isinstance(node, DictConfig) and dataclasses.is_dataclass(kind):
                node[k] = getattr(kind(), k)
            elif isinstance(node, (DictConfig, ListConfig)):
                del node[k]


def _merge_loaded(cfg: DictConfig, loaded: dict, source: str, lines: dict[str, int], problems: list[str],
                  failed: set[str]) -> DictConfig:
    """``cfg`` with the plain nested mapping ``loaded`` (a file's, or a config given as a mapping) merged in; each
    key that does not merge is a problem (in ``problems``, its key in ``failed``), named by ``source`` and its
    line in ``lines`` where known, and the others still merge, so that every problem shows at once."""
    # A list where a mapping belongs or the reverse: OmegaConf's merge raises a bare TypeError there.
    shapes = _shape_problems(loaded)
    good = []
    whole = None
    if not shapes:
        # A file that merges as a whole needs no merge per key to find what did not (each deep-copies the
        # whole config: 75 of them made load_config of a preset take 0.7 s, in every test and CLI call)
        try:
            whole = OmegaConf.merge(cfg, OmegaConf.create(loaded))
        except (OmegaConfBaseException, TypeError, OverflowError):  # (a 400-digit integer for a float key)
            whole = None
    for parts, value in (() if whole is not None else _leaves(Config, loaded)):
        key = ".".join(parts)
        mine = [(b, msg) for b, msg in shapes if b == key or b.startswith((key + ".", key + "["))]
        if mine:
            problems += [f"{_where(b, source, lines)}{b}: {msg}" for b, msg in mine
                         if f"{_where(b, source, lines)}{b}: {msg}" not in problems]
            failed.add(key)
            continue
        try:
            OmegaConf.merge(cfg, _nested(parts, value))
        except OverflowError:
            problems.append(f"{_where(key, source, lines)}{key}: {_BEYOND_FLOAT}")
            failed.add(key)
        except (OmegaConfBaseException, TypeError) as exc:
            problems.append(str(_merge_error(exc, source, lines, key, value)))
            failed.add(key)
        else:
            good.append((parts, value))
    if whole is not None:
        cfg = whole
    elif problems:  # (go on with the keys that merge, to report the other problems too)
        for parts, value in good:
            cfg = OmegaConf.merge(cfg, _nested(parts, value))
    else:
        cfg = OmegaConf.merge(cfg, OmegaConf.create(loaded))
    return cfg


def load_config(path: str | os.PathLike | Mapping | DictConfig | None = None, overrides: Sequence[str] = ()
                ) -> DictConfig:
    """Load the configuration: schema defaults, then ``path`` (a YAML file or preset name; or a mapping or
    DictConfig, a Hydra node such as ``cfg.adaptive_eval`` with its interpolations resolved against the whole
    config), then overrides.

    >>> cfg = load_config(overrides=["trigger.freq_steps=50"])
    >>> cfg.trigger.freq_steps, cfg.policy.budget.max_eval_fraction
    (50, 0.11)
    >>> load_config(overrides=["trigger.freq_stepz=50"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    adaptive_eval.config.ConfigError: override 'trigger.freq_stepz=50': unknown key 'trigger.freq_stepz' (did you ...
    """
    try:
        return _load_config(path, overrides)
    except RecursionError:
        # (an alias that contains itself, `ignore: &a [*a]`, or a file nested hundreds deep: a RecursionError and a
        # 30-line traceback, exit 1, on the CLI; a probe)
        raise _too_deep(os.fspath(path) if isinstance(path, (str, os.PathLike)) else "the config") from None


def _too_deep(where: str) -> ConfigError:
    return ConfigError([f"{where}: nested too deeply to read (an alias that contains itself, such as "
                        "`ignore: &a [*a]`, or hundreds of levels of mappings)"])


def _load_config(path, overrides: Sequence[str]) -> DictConfig:
    """:func:`load_config`'s work."""
    import yaml

    if dataclasses.is_dataclass(path) and not isinstance(path, type):
        path = _structured(path)  # (a Config, or the user's own dataclass: from_config took them; a probe)
    elif path is not None and not isinstance(path, (str, os.PathLike, Mapping, DictConfig)):
        kind = "a list" if isinstance(path, (list, tuple, ListConfig)) else f"a {type(path).__name__}"
        raise TypeError(f"load_config: the config is a YAML file or preset name, a mapping, a DictConfig or a "
                        f"Config (dataclass), not {kind}")
    if isinstance(overrides, (str, bytes)) or not isinstance(overrides, Sequence):
        raise TypeError(f"overrides must be a list of 'KEY=VALUE' strings, got {type(overrides).__name__}")
    for item in overrides:
        if not isinstance(item, str):
            raise TypeError(f"overrides must be a list of 'KEY=VALUE' strings, got a {type(item).__name__} item: "
                            f"{item!r}")
    cfg = OmegaConf.structured(Config)
    source = ""
    given = isinstance(path, (Mapping, DictConfig))  # (a Hydra node, cfg.adaptive_eval; a nested dict)
    unresolved: list[tuple[str, str]] = []  # (a node's interpolations that do not resolve: left at their defaults)
    if given:
        loaded, source, unresolved = _plain_node(path) if isinstance(path, DictConfig) else (dict(path), "config", [])
        if not isinstance(loaded, dict):
            raise ConfigError([f"{source}: expected a mapping of sections at the top, got {type(loaded).__name__}"])
    elif path is not None:
        source, text = _resolve_path(path)
        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            # (at the end of the stream PyYAML's mark is the line after the last: the file's last line, said so)
            last = len(text.rstrip("\n").splitlines()) or 1
            line = f":{min(mark.line + 1, last)}" if mark is not None else ""
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            opened = getattr(exc, "context_mark", None)
            left_open = str(getattr(exc, "context", "")).startswith(("while parsing a flow", "while scanning a quoted"))
            if mark is not None and mark.line + 1 > last and opened is not None and left_open:
                opens = _unclosed_line(text) or min(opened.line + 1, last)  # (PyYAML's mark of "while parsing
                # a flow node" is the end of the file: it said "line 5" of a 4-line file; a probe)
                problem += f" (at the end of the file: what opens at line {opens} is never closed)"
            raise ConfigError([f"{source}{line}: YAML does not parse: {problem}"]) from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError([f"{source}:1: expected a mapping of sections at the top, got {type(loaded).__name__}"])
    # Every problem at once: the file's (types, unknown keys, duplicates), the overrides', and the values'
    # (validate), each named by its key and, for the file's, file and line.
    problems: list[str] = []
    lines: dict[str, int] = {}
    # Keys already reported (a value that did not merge, a bad interpolation): they keep the schema's default,
    # which validate() must not report again ("size: five hundred" also read "size: must be >= 1, got 0").
    failed: set[str] = set()
    if path is not None:
        duplicates: list[str] = []
        lines = _key_lines(text, duplicates) if not given else {}
        problems += [f"{source}:{d}" for d in duplicates]
        before = len(problems)
        cfg = _merge_loaded(cfg, loaded, source, lines, problems, failed)
        if any("YAML reads the name" in d for d in duplicates):
            # (the name said already as YAML's boolean or number: OmegaConf's "Key True (bool) is incompatible
            # with (str)" about it again, at another line, is the same problem; a probe)
            problems[before:] = [p for p in problems[before:]
                                 if not re.search(r"Key .* \((bool|int|float|NoneType|date|datetime)\) is "
                                                  r"incompatible with \(str\)", p)]
        problems += [f"{source}: {key}: {msg}" for key, msg in unresolved]
        failed.update(key for key, _ in unresolved)
    from_file = len(problems)
    overridden: dict[str, str] = {}
    set_keys: set[str] = set()  # the keys the overrides gave (a section's: each of its keys)
    for item in overrides:
        if "=" not in item:
            problems.append(f"override {item!r}: expected KEY=VALUE")
            continue
        lhs, rhs = item.split("=", 1)
        if lhs != lhs.strip() or rhs != rhs.lstrip():  # (it said "unknown key 'trigger.freq_steps '"; a probe)
            problems.append(f"override {item!r}: spaces around '=': write {lhs.strip()}={rhs.strip()}")
            continue
        if lhs.startswith(("+", "~")):  # (Hydra's append and delete: "did you mean 'trigger'"; a probe)
            problems.append(f"override {item!r}: Hydra's {lhs[0]} is not taken here: every key of the config exists "
                            f"already; write {lhs[1:].lstrip('+')}={rhs}")
            continue
        lhs = lhs.strip()
        if re.search(r"\[\d+\]", lhs):
            # a list item as Hydra and Python write it, streams.default[1].arl0: the same as streams.default.1.arl0
            # (it read as a mapping key: "streams.default: expected a list ..., got a mapping"; a probe)
            lhs = re.sub(r"\[(\d+)\]", r".\1", lhs)
        failed.add(lhs)  # (until it merges)
        # (each was taken without a word: an empty value as null, an unset shell variable turning the schedule
        # off; 010 as octal 8; ??? as "keep the default"; a new user's probe)
        if not rhs.strip():
            problems.append(f"override {item!r}: no value (an unset shell variable?); write {lhs}=null for null")
            continue
        if rhs.strip() == "???":
            problems.append(f"override {item!r}: ??? marks a value still to be given; give it one")
            continue
        if re.fullmatch(r"[-+]?0[0-7_]+", rhs.strip()):
            problems.append(f"override {item!r}: YAML reads {rhs.strip()} as an octal number: write "
                            f"{int(rhs.strip().replace('_', ''))}, or 0o{rhs.strip().lstrip('+-0')} for octal")
            continue
        try:
            if _indexes_a_list(cfg, lhs):
                # An item of a list (streams.default.1.adapt=0): a dotlist merge cannot index a list (it raised
                # TypeError "Cannot merge incompatible container types"); update the item in place.
                value = OmegaConf.to_container(OmegaConf.from_dotlist([f"v={rhs}"]))["v"]  # (not resolved)
                updated = cfg.copy()
                # (a whole item given, streams.default.1={type: page_hinkley}, replaces it: merged into the
                # CUSUM spec it kept its k, adapt and warmup, refused as page_hinkley's; a probe)
                whole = isinstance(value, dict) and lhs.rpartition(".")[2].isdigit()
                try:
                    OmegaConf.update(updated, lhs, value, merge=not whole)
                except (IndexError, KeyError, TypeError, ValueError) as exc:
                    problems.append(f"override {item!r}: {lhs}: no such list item or key "
                                    f"({str(exc).splitlines()[0]})")
                    continue
                cfg = updated
                set_keys.add(lhs)
            else:
                dotlist = OmegaConf.from_dotlist([item])
                plain = OmegaConf.to_container(dotlist)  # (not resolved: ${...} is said where it merges)
                shapes = _shape_problems(plain)
                if shapes:
                    problems += [f"override {item!r}: {key}: {msg}" for key, msg in shapes]
                    continue
                section = plain
                for part in lhs.split("."):
                    section = section.get(part) if isinstance(section, dict) else None
                if isinstance(section, dict):
                    # A section given whole (policy.alarm={...}): each of its keys merged and checked on its own,
                    # as a file's are (its first problem alone was said, naming no key; a probe)
                    before = len(problems)
                    cfg = _merge_loaded(cfg, plain, f"override {item!r}", {}, problems, failed)
                    if len(problems) > before:
                        continue
                    # (merged key by key: the keys it gave are what it set, not the whole section; a review)
                    set_keys.update(f"{lhs}.{k}" for k in _flat_keys(section))
                else:
                    cfg = OmegaConf.merge(cfg, dotlist)
                    set_keys.add(lhs)
            overridden[lhs] = item
            failed.discard(lhs)
        except yaml.YAMLError as exc:
            problems.append(f"override {item!r}: the value does not parse as YAML: {_yaml_reason(exc, rhs)}")
        except OverflowError:  # (a float key given a 400-digit integer: OmegaConf's conversion overflows)
            problems.append(f"override {item!r}: {item.split('=', 1)[0]}: {_BEYOND_FLOAT}")
        except (OmegaConfBaseException, TypeError) as exc:
            lhs = item.split("=", 1)[0]
            key = getattr(exc, "full_key", None)
            msg = str(exc).splitlines()[0]
            if isinstance(key, int) and not isinstance(key, bool):
                parsed = OmegaConf.to_container(OmegaConf.from_dotlist([item]))
                for part in lhs.split("."):
                    parsed = parsed.get(part) if isinstance(parsed, dict) else None
                key, msg = _list_item_problem(lhs, parsed, key, msg)
                msg = f"{key}: {msg}"
            key = key or lhs
            if "not in struct" in msg or ("Key '" in msg and "not in" in msg):
                msg = _unknown(key)
            elif not msg.startswith(f"{key}:"):
                msg = f"{key}: {msg}"
            problems.append(f"override {item!r}: {msg}")
    if overridden and from_file:
        # A file's value that did not merge, given again by an override: the override's stands (a range error was
        # replaced so, a type error still reported at the file's line; a probe)
        def fixed(key: str) -> bool:
            return any(key == k or key.startswith(k + ".") for k in set_keys)

        gone = {i for i in range(from_file)
                if fixed(re.sub(rf"^{re.escape(source)}(?::\d+)?: ", "", problems[i]).partition(":")[0].strip())}
        problems[:] = [p for i, p in enumerate(problems) if i not in gone]
        failed.difference_update({k for k in failed if fixed(k)})
    # A value left "???" in the file (OmegaConf's "still to be given") that no override gave: the merge kept the
    # default without a word (a new user's probe)
    for key in (_missing_keys(loaded) if path is not None else ()):
        if not any(key == lhs or key.startswith(lhs + ".") for lhs in overridden) and not any(
                f"{key}:" in p for p in problems):
            problems.append(f"{_where(key, source, lines)}{key}: ??? (a value still to be given) is not given: "
                            f"give it here, or with an override {key}=VALUE")
    # Interpolations (${evaluation.seed}, ${oc.env:VAR,default}) resolve only when read: check each here,
    # named by the file line or the override that set it.
    bad = _interpolation_problems(cfg)
    problems += [f"{_origin(key, source, lines, overridden)}{key}: {msg}" for key, msg, _, _ in bad]
    failed.update(key for key, _, _, _ in bad)
    _drop_interpolations(bad)
    # An integer beyond any float (400 digits: YAML reads 1e400 as text, and the hint for an integer key is to
    # write its digits) raised OverflowError out of the checks, a traceback and exit 1 (a probe)
    huge = _huge_integers(cfg)
    problems += [f"{_origin(key, source, lines, overridden)}{key}: {_BEYOND_FLOAT} ({digits} digits)"
                 for key, digits, _, _ in huge]
    failed.update(key for key, _, _, _ in huge)
    _drop_interpolations(huge)
    _numbers_in_specs(cfg)
    try:
        validate(cfg)
    except ConfigError as exc:
        located = [_locate(p, source, lines, overridden) for p in exc.problems
                   if p.split(":", 1)[0].strip() not in failed]
        if given and source != "config":  # (a node's: named under it, as its other problems are)
            located = [p if p.startswith(("override ", f"{source}: ")) else f"{source}: {p}" for p in located]
        problems += located
    if problems:
        raise ConfigError(problems)
    # The configuration as it is used (and printed): an environment variable is read once, here.
    OmegaConf.resolve(cfg)
    OmegaConf.set_readonly(cfg, True)
    return cfg


_NUMBER_TEXT = re.compile(r"\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*")


def _numbers_in_specs(cfg: DictConfig) -> None:
    """A detector parameter given as a number in text, as the typed keys take it: YAML 1.1 reads ``1e1`` as text, and
    an environment variable (``threshold: ${oc.env:CUSUM_H,8.0}``) is text; both were refused as "not a number" in
    a detector spec, whose parameters are untyped, while ``--set ...threshold=1e1`` was taken (a new user's
    probe).  An interpolation is resolved here (the config is resolved once, at load, anyway)."""
    from omegaconf import ListConfig

    streams = cfg.streams
    for specs in [streams.default, streams.eval, *(streams.watch.values() if streams.watch else ())]:
        if not isinstance(specs, ListConfig):
            continue
        for spec in specs:
            if not isinstance(spec, DictConfig):
                continue
            for key in list(spec.keys()):
                try:
                    value = spec[key]
                except OmegaConfBaseException:  # (an interpolation that does not resolve: reported apart)
                    continue
                if isinstance(value, str) and _NUMBER_TEXT.fullmatch(value):
                    spec[key] = _number_of(value)
                elif isinstance(value, ListConfig):  # (in_control: [1e-3, 2e-3, ...] was refused as text; a probe)
                    for i, item in enumerate(value):
                        if isinstance(item, str) and _NUMBER_TEXT.fullmatch(item):
                            value[i] = _number_of(item)


def _number_of(text: str) -> int | float:
    return int(text) if re.fullmatch(r"\s*[-+]?\d+\s*", text) else float(text)


def _missing_keys(data: dict, prefix: str = "") -> list[str]:
    """The dotted keys of ``data`` (mappings only) whose value is ``???``."""
    out = []
    for k, v in data.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict):
            out += _missing_keys(v, key)
        elif v == "???":
            out.append(key)
    return out


def _origin(key: str, source: str, lines: dict[str, int], overridden: dict[str, str]) -> str:
    """"override '<item>': " for a key the last override that covers it set, else "<file>:<line>: "."""
    dotted = key.replace("[", ".").replace("]", "")
    for lhs, item in reversed(overridden.items()):
        if dotted == lhs or dotted.startswith(lhs + "."):
            return f"override {item!r}: "
    return _where(key, source, lines) if source else ""


def _locate(problem: str, source: str, lines: dict[str, int], overridden: dict[str, str]) -> str:
    """A value problem (``"<key>: ..."``) with the file and line that set its key, or the override that set it
    last (``override 'key=value': key: ...``, as a key the override got wrong reads; a range error read
    without it, so a key both a file and ``--set`` gave did not say which was wrong)."""
    key = problem.split(":", 1)[0].strip()
    dotted = key.replace("[", ".").replace("]", "")  # (an item of a list an override set: evaluation.pass_at_k[1])
    for lhs, item in reversed(overridden.items()):  # (the last override that covers the key)
        if dotted == lhs or dotted.startswith(lhs + "."):
            return f"override {item!r}: {problem}"
    # a problem of two keys (min larger than max) that an override set the other of: it named the key left at its
    # default, and no override (a probe)
    for other in re.findall(r"\b[a-z_]+(?:\.[a-z_0-9]+)+\b", problem.partition(":")[2]):
        for lhs, item in reversed(overridden.items()):
            if other == lhs:
                return f"override {item!r}: {problem}"
    under = [item for lhs, item in overridden.items() if lhs.startswith(dotted + ".")]
    if len(under) == 1:  # (a problem of an item an override changed: streams.default[1]: cusum: threshold ...)
        return f"override {under[0]!r}: {problem}"
    if under:  # (a problem of a key above several an override set)
        return problem
    if source and key not in lines:
        # (a problem of two keys the file set only the other of: max 16 alone read "mine.yaml:3:", the section's
        # line, for a min it never wrote; a probe)
        for other in re.findall(r"\b[a-z_]+(?:\.[a-z_0-9]+)+\b", problem.partition(":")[2]):
            if other in lines:
                return f"{_where(other, source, lines)}{problem}"
    if source and any(key == k or key.startswith(k + ".") or k.startswith(key + ".") for k in lines):
        return f"{_where(key, source, lines)}{problem}"
    return problem


def as_config(cfg: DictConfig | Config | dict | None) -> DictConfig:
    """Accept a loaded config, a :class:`Config`, a plain nested dict, or None (the defaults)."""
    try:
        return _as_config(cfg)
    except RecursionError:  # (from_config of a mapping that contains itself: a bare RecursionError; a review)
        raise _too_deep("config") from None


def _as_config(cfg):
    """:func:`as_config`'s work."""
    if cfg is None:
        return load_config()
    if isinstance(cfg, (Mapping, DictConfig)) and is_areal_evaluator_config(cfg):
        return from_areal(cfg)
    if isinstance(cfg, DictConfig):
        node = cfg._get_parent() is not None
        if node or OmegaConf.get_type(cfg) not in (Config, dict):
            # A node of a larger config (Hydra's cfg.adaptive_eval): its interpolations (${trainer.test_freq})
            # resolve against the whole config, which a copy onto the schema has lost ("interpolation key not
            # found"); a structured config of the user's own dataclass merges onto ours only as plain values (a
            # new user's probes).  Read as they are now, every problem named under the node's key.
            return load_config(cfg)
        # Re-merge onto the schema so a config built by hand is typed and checked too.
        plain = OmegaConf.to_container(cfg)
        try:
            if _shape_problems(plain):
                raise TypeError("a list where a mapping belongs, or the reverse")
            merged = OmegaConf.merge(OmegaConf.structured(Config), cfg)
        except (OmegaConfBaseException, TypeError):
            return load_config(plain)  # (raises, with every problem: it said only the first)
        if not OmegaConf.is_readonly(merged):
            _numbers_in_specs(merged)
        try:
            validate(merged)
        except (ConfigError, OverflowError):  # (an integer beyond float range: load_config names it; a probe)
            return load_config(plain)
        return merged
    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        if isinstance(cfg, Config):
            merged = _structured(cfg)
            validate(merged)
            return merged
        if is_areal_evaluator_config(cfg):
            return from_areal(cfg)
        sections = {f.name for f in dataclasses.fields(Config)}
        if any(f.name in sections for f in dataclasses.fields(cfg)):
            # the user's own config dataclass, laid out as ours (verl's style; its structured config was read, the
            # instance refused: a re-run of a new user's probe)
            return load_config(_structured(cfg))
        raise ConfigError([f"config: a {type(cfg).__name__} dataclass is neither an adaptive_eval Config nor AReaL's "
                           "EvaluatorConfig (no freq_epochs/freq_steps/freq_secs); pass load_config(...), a Config "
                           "or a nested dict"])
    if isinstance(cfg, dict):
        return as_config(OmegaConf.create(cfg))
    if is_areal_evaluator_config(cfg):
        return from_areal(cfg)
    raise TypeError(f"config must be a DictConfig, Config, dict or AReaL EvaluatorConfig, got {type(cfg).__name__}")


def _indexes_a_list(cfg: DictConfig, dotted: str) -> bool:
    """Whether a part of ``dotted`` made of digits is an item of a list of ``cfg`` (``streams.default.1.adapt``),
    not a name (a suite named ``2024``: ``evaluation.suites.2024.size`` took the list path and failed)."""
    node = cfg
    for part in dotted.split("."):
        if isinstance(node, ListConfig):
            return part.isdigit()
        if not isinstance(node, DictConfig) or part not in node:
            return False
        node = node._get_node(part)
    return False


def _plain_node(cfg: DictConfig) -> tuple[Any, str, list[tuple[str, str]]]:
    """A DictConfig as plain values, its interpolations resolved against the config it is a node of; how to
    name it in a problem: ``the node 'adaptive_eval'`` (Hydra's ``cfg.adaptive_eval``), ``a MyConfig`` (a
    structured config of the user's dataclass), else ``config``; and ``(key, problem)`` for each interpolation
    that does not resolve, left out of the values (one of them hid every other problem of the node; a probe)."""
    if cfg._get_parent() is not None:
        label = f"the node {cfg._get_full_key(None)!r}"
    elif OmegaConf.get_type(cfg) not in (Config, dict, None):
        label = f"a {OmegaConf.get_type(cfg).__name__}"
    else:
        label = "config"
    try:
        return OmegaConf.to_container(cfg, resolve=True), label, []
    except OmegaConfBaseException as exc:
        key = str(getattr(exc, "full_key", "") or "<root>")
        if cfg._get_parent() is not None:  # (the key within the node: it is named already)
            key = key.removeprefix(f"{cfg._get_full_key(None)}.")
        first = ConfigError([f"{label}: {key}: {str(exc).splitlines()[0]}"])
    try:
        bad = [(key, msg) for key, msg, _, _ in _interpolation_problems(cfg)]
        # a plain copy of the whole config (interpolations resolve against it), without the bad ones
        copy = OmegaConf.create(OmegaConf.to_container(cfg._get_root(), resolve=False))
        node = OmegaConf.select(copy, cfg._get_full_key(None)) if cfg._get_parent() is not None else copy
        for key, _ in reversed(bad):
            if key.endswith("]"):
                parent, index = key[:key.rindex("[")], int(key[key.rindex("[") + 1:-1])
                (OmegaConf.select(node, parent) if parent else node)[index] = None
            else:
                parent, _, leaf = key.rpartition(".")
                del (OmegaConf.select(node, parent) if parent else node)[leaf]
        plain = OmegaConf.to_container(node, resolve=True)
    except (OmegaConfBaseException, ValueError, TypeError, KeyError, IndexError):
        raise first from None
    if not bad:
        raise first
    return plain, label, bad


_AREAL_FREQS = ("freq_epochs", "freq_steps", "freq_secs")


def is_areal_evaluator_config(obj) -> bool:
    """Whether ``obj`` looks like AReaL's ``EvaluatorConfig``: an object (a dataclass, a ``SimpleNamespace``, ...)
    with its three ``freq_*`` fields, duck-typed as the shim's plain ``Evaluator`` reads it (the adaptive one refused
    a ``SimpleNamespace`` the plain one took; an architecture check), or a mapping with any of those keys and no
    ``trigger`` (AReaL's config as an OmegaConf node, ``OmegaConf.structured(EvaluatorConfig(...))`` or its YAML
    section: read as adaptive_eval's, every AReaL field was an "unknown key"; found by a probe; so was a dict of
    some of them, ``{"freq_steps": 4}``, which the plain shim took, a probe: adaptive_eval's own keys of those
    names lie under ``trigger``)."""
    if isinstance(obj, (Mapping, DictConfig)):
        return "trigger" not in obj and any(f in obj for f in _AREAL_FREQS)
    return not isinstance(obj, (type, Config)) and all(hasattr(obj, f) for f in _AREAL_FREQS)


# AReaL's EvaluatorConfig's fields: a plain mapping with another key is not it (a section of ours beside the three
# frequencies, a misspelt eval_before_trian, was dropped without a word; a review)
_AREAL_FIELDS = frozenset({*_AREAL_FREQS, "eval_before_train", "experiment_name", "trial_name", "fileroot"})


def areal_view(obj):
    """``obj`` itself where it is AReaL's ``EvaluatorConfig`` as an object; a mapping of its fields (an OmegaConf
    node, a dict with any of the ``freq_*`` keys and no ``trigger``; one left out is AReaL's default, None) as a
    ``SimpleNamespace`` of them, its interpolations resolved; None for anything else.  A plain mapping (not AReaL's
    structured config) with a key AReaL's config does not have is a :class:`ConfigError` naming it."""
    if isinstance(obj, (Mapping, DictConfig)):
        if not is_areal_evaluator_config(obj):
            return None
        typed = isinstance(obj, DictConfig) and OmegaConf.get_type(obj) not in (dict, None)
        unknown = sorted(str(k) for k in obj if str(k) not in _AREAL_FIELDS) if not typed else []
        if unknown:
            import difflib

            raise ConfigError([f"EvaluatorConfig: {k}: unknown key (AReaL's EvaluatorConfig has "
                               f"{', '.join(sorted(_AREAL_FIELDS))})"
                               + (f"; did you mean {close[0]!r}?" if close else "")
                               for k in unknown for close in [difflib.get_close_matches(k, sorted(_AREAL_FIELDS), 1)]])
        if isinstance(obj, DictConfig):
            plain, _, unresolved = _plain_node(obj)  # (a problem in resolving it is a ConfigError naming the node)
            # (only of the fields read: a copy of the evaluator: section detached from the experiment's config
            # failed on experiment_name: ${experiment_name}, which AReaL's own Evaluator never reads; a probe)
            unresolved = [(key, msg) for key, msg in unresolved
                          if str(key).rpartition(".")[2] in (*_AREAL_FREQS, "eval_before_train")]
            if unresolved:
                raise ConfigError([f"EvaluatorConfig: {key}: {msg}" for key, msg in unresolved])
            kind = OmegaConf.get_type(obj)
            label = kind.__name__ if kind not in (dict, None) else "EvaluatorConfig"
        else:
            plain, label = dict(obj), "EvaluatorConfig"
        view = types.SimpleNamespace(**{**dict.fromkeys(_AREAL_FREQS), **{str(k): v for k, v in plain.items()}})
        view.__areal_name__ = label
        return view
    return obj if is_areal_evaluator_config(obj) else None


def areal_flag(value) -> bool:
    """AReaL's ``eval_before_train`` as a flag: YAML's text 'true'/'false' of an untyped node as AReaL's typed config
    reads it ('false' read as true: an evaluation of the initial weights; a probe); anything else not a flag is a
    ``ValueError`` naming the field."""
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    if value is not None and not isinstance(value, (bool, int)):
        raise ValueError(f"eval_before_train: must be true or false, got {value!r}")
    return bool(value)


def _say_trigger_replaced(base: DictConfig, trigger: dict, name: str) -> None:
    """Warn where the preset's own schedule (a frequency it sets otherwise than the default preset) gives way to
    AReaL's config: a preset of ``trigger.freq_steps: 50`` beside AReaL's default EvaluatorConfig, every frequency
    None, evaluated nothing in 200 steps, unsaid (a probe)."""
    shipped = load_config().trigger
    replaced = [f"trigger.{f} {base.trigger[f]!r} -> {trigger[f]!r}" for f in _AREAL_FREQS
                if base.trigger[f] != shipped[f] and base.trigger[f] != trigger[f]]
    if replaced:
        log.warning("adaptive_eval: the schedule is AReaL's %s, not the preset's: %s (the drop-in keeps AReaL's "
                    "frequencies; set them in %s, or build adaptive_eval.AdaptiveEvaluator.from_config(preset) "
                    "for the preset's)", name, ", ".join(replaced), name)


def from_areal(evaluator_config, preset: str | os.PathLike | DictConfig | None = None) -> DictConfig:
    """The config ``preset`` (a name, a file, a loaded config; default: ``default``) with ``trigger.*`` taken
    from AReaL's ``EvaluatorConfig`` (``freq_epochs``, ``freq_steps``, ``freq_secs``, ``eval_before_train``), and
    ``trigger.independent`` true: several frequencies count on their own, as AReaL's do.

    A negative or non-numeric frequency is a :class:`ConfigError` naming the field
    (``EvaluatorConfig.freq_steps: ...``).  0 fires at every step, as in AReaL.  As AReaL's own ``Evaluator``:
    every frequency None evaluates nothing (``trigger.eval_at_end`` off), and the ``evaluate_fn`` runs as AReaL
    calls it, ``evaluation.precision`` ``none`` where the preset's is ``fp32`` (under ``torch.inference_mode`` a
    tensor its engine's forward cached broke the next training step's backward, "Inference tensors cannot be
    saved for backward"; a precision that autocasts, bf16 or fp16, is the preset's ask and stays).
    """
    evaluator_config = areal_view(evaluator_config) or evaluator_config
    name = getattr(evaluator_config, "__areal_name__", type(evaluator_config).__name__)
    problems, trigger = [], {}
    for f in _AREAL_FREQS:
        v = getattr(evaluator_config, f, None)
        # (numbers.Real: numpy's integers too, which AReaL's own Evaluator takes; they were refused as "not a
        # non-negative number"; a probe)
        if v is not None and (isinstance(v, bool) or not isinstance(v, numbers.Real) or not v >= 0
                              or not math.isfinite(v)):
            problems.append(f"{name}.{f}: must be a non-negative number or null (0: every step), got {v!r}")
        elif v is not None and f != "freq_secs" and v != int(v):
            problems.append(f"{name}.{f}: must be a whole number, got {v!r}")
        else:
            # (a plain number: numpy's np.float32 reached OmegaConf, "UnsupportedValueType"; a review)
            trigger[f] = None if v is None else float(v) if f == "freq_secs" else int(v)
    try:
        trigger["eval_before_train"] = areal_flag(getattr(evaluator_config, "eval_before_train", False))
    except ValueError as exc:
        problems.append(f"{name}.{exc}")
    # AReaL's counters fire on their own (an epoch end right after a step-triggered evaluation still fires): its
    # schedule, as the drop-in promises (the default preset's joint counting lost those epoch ends; found by a
    # new-user probe)
    trigger["independent"] = True
    if problems:
        raise ConfigError(problems)
    # (a DictConfig as it is: a node of the user's own config, cfg.adaptive_eval, or one made of a few keys, was taken
    # for a whole config and failed its check with a TypeError; read onto the schema as a mapping is; a probe)
    base = as_config(preset) if isinstance(preset, DictConfig) else load_config(preset)
    if not (preset is None or (isinstance(preset, str) and preset in preset_names())):
        # (a shipped preset's schedule is every drop-in's to replace: said for areal, aggressive and budget, the
        # areal preset's whole point being AReaL's schedule; a review)
        _say_trigger_replaced(base, trigger, name)
    # (both were the AReaL shim's alone: AdaptiveEvaluator.from_config(config.evaluator) kept fp32, and AReaL's
    # evaluate_fn broke the next step's backward; a probe)
    if all(trigger[f] is None for f in _AREAL_FREQS):
        trigger["eval_at_end"] = False
    extra = {"evaluation": {"precision": "none"}} if base.evaluation.precision == "fp32" else {}
    merged = OmegaConf.merge(base, {"trigger": trigger}, extra)
    validate(merged)
    OmegaConf.set_readonly(merged, True)
    return merged

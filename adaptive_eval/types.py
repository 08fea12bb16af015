"""Value types that cross the public API: requests to evaluate, results, decisions."""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import logging
import math
import numbers
import re
from collections.abc import Mapping

import numpy as np

log = logging.getLogger("adaptive_eval")
_SAID: set = set()  # the keys of warnings said once per process (log_once)
# Inside an evaluation: the evaluator's own set of them (run_evaluation_outcome), so that each evaluator of a process
# is told (two tasks' evaluators, a sweep's trials: the second evaluator with the same mistake on a metric of the same
# name was told nothing, its k answers counted as items; a new user's probe)
SAID_IN: contextvars.ContextVar = contextvars.ContextVar("adaptive_eval_said", default=None)


def error_text(exc: BaseException) -> str:
    """``"Type: message"`` of an exception, also of one whose ``__str__`` raises (a client library's error that
    formats an attribute a re-raised copy lacks escaped ``evaluate()`` under ``on_error: skip``; a new user's
    probe): then its ``repr``, or its type alone (:func:`error_message`)."""
    return f"{type(exc).__name__}: {error_message(exc)}"


def error_message(exc: BaseException) -> str:
    """``str(exc)``, or ``<str() failed; repr: ...>`` where that raises."""
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - any: this text is for a log line, an event or a saved state
        try:
            return f"<str() failed; repr: {BaseException.__repr__(exc)}>"
        except Exception:  # noqa: BLE001
            return "<str() failed>"


_FORCED = "resources:forced ("  # (the reason of an evaluation the resource check forced: "resources:forced (<cause>)")


def reason_cause(reason: str) -> str:
    """The reason an evaluation was due for: ``reason`` itself, or inside ``resources:forced (...)``.  (Read by its
    prefix, a forced ``peak:confirm`` counted as a quiet evaluation and relaxed the interval, and a forced alarm's
    evaluation began no new segment of the best-checkpoint pick; a probe.)"""
    if reason.startswith(_FORCED) and reason.endswith(")"):
        return reason[len(_FORCED):-1]
    return reason


def log_once(key, message: str, *args) -> None:
    """``log.warning(message, *args)`` the first time ``key`` comes in this process (inside an evaluation, for
    its evaluator: :data:`SAID_IN`), nothing after."""
    said = SAID_IN.get()
    said = _SAID if said is None else said
    if key not in said:
        said.add(key)
        log.warning(message, *args)


_KINDS = {"int": numbers.Integral, "float": numbers.Real, "bool": bool, "str": str}


def checked_fields(cls, d: dict) -> dict:
    """``d``, the fields of a saved dataclass ``cls`` read back from a state, once each field's value is of its
    annotated kind (``int``, ``float``, ``bool``, ``str``, ``... | None``, a tuple of floats): else a
    ``ValueError`` naming the field.  A damaged or edited state loaded, then raised ``TypeError`` in ``observe()``
    (found by fuzzing saved states)."""
    types = {f.name: f.type for f in dataclasses.fields(cls)}
    for name, value in d.items():
        kind = types.get(name)
        if not isinstance(kind, str):
            continue
        if kind.endswith(" | None"):
            if value is None:
                continue
            kind = kind[:-len(" | None")]
        if kind == "tuple[float, float]":
            ok = len(value) == 2 and all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in value)
        elif kind in _KINDS:
            ok = isinstance(value, _KINDS[kind]) and (kind == "bool" or not isinstance(value, bool))
        else:
            continue
        if not ok:
            raise ValueError(f"{cls.__name__} field {name!r}: expected {kind}, got {value!r}")
    return d


class PackageFilter(logging.Filter):
    """A filter on the package's logger while a ``with`` block runs."""

    def __enter__(self):
        log.addFilter(self)
        return self

    def __exit__(self, *exc) -> None:
        log.removeFilter(self)


class SaidOnce(PackageFilter):
    """A filter on the package's logger for a command that runs several evaluators (the demo's runs, tune's trials),
    whose notes "(said once)" are once per evaluator: each is let through once per command.  ``templates``: one
    said once whatever its values (its template, where the template says something of its own: tune's "the budget
    holds back the evaluation the alarm asked for (%s)" came 14 times in 30 trials, one per stream and trial);
    else once per text, numbers aside.  Errors always pass.  So are the package's ``warnings.warn`` while the block
    runs, numbers, parentheses and plurals aside (replay's "N evaluations of suite ... (steps ...) did not measure"
    came once per trial, trace and suite: 78 of 92 lines of a 12-trial tune; a probe)."""

    def __init__(self, templates: bool = False):
        super().__init__()
        self.templates = templates
        self.seen: set[str] = set()

    def __enter__(self):
        import warnings

        self._warnings = warnings.catch_warnings()
        self._warnings.__enter__()
        show = warnings.showwarning

        def show_once(message, category, filename, lineno, file=None, line=None):
            key = (category, re.sub(r"\([^)]*\)|\d+|s\b", "", str(message)))
            if key not in self.seen:
                self.seen.add(key)
                show(message, category, filename, lineno, file, line)

        warnings.showwarning = show_once
        return super().__enter__()

    def __exit__(self, *exc) -> None:
        super().__exit__(*exc)
        self._warnings.__exit__(*exc)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            return True
        try:
            template = str(record.msg)
            own = self.templates and record.args and len(_FORMATS.sub("", template).strip()) > 20
            key = _NUMBERS.sub("#", template if own else record.getMessage())
        except Exception:  # noqa: BLE001 - a record that cannot be formatted: let through, as logging would
            return True
        if key in self.seen:
            return False
        self.seen.add(key)
        return True


_FORMATS = re.compile(r"%[-#0 +]*\d*(\.\d+)?[sdrfgex]")
_NUMBERS = re.compile(r"\d+(\.\d+)?(e[+-]?\d+)?")

__all__ = ["Decision", "EvalRequest", "EvalResult", "MetricSummary", "SuiteRequest"]


@functools.lru_cache(maxsize=16)
def _permutation(seed: int, num_items: int) -> tuple[int, ...]:
    # Tuple so the cached value cannot be mutated by a caller.
    return tuple(np.random.Generator(np.random.PCG64(seed)).permutation(num_items).tolist())


@dataclasses.dataclass(frozen=True)
class SuiteRequest:
    """What one evaluation asks of one eval suite (``evaluation.suites``).

    ``indices`` are THIS rank's items of the suite (a shard of a deterministic nested sample of
    ``sample_size`` items over all ranks, stratified when the suite has strata); ``evaluate_fn`` returns,
    for each metric ``"<name>/<metric>"``, one row per index in this order: a scalar per item, or
    ``samples_per_item`` values per item (items x samples).
    """

    name: str
    size: int
    sample_size: int
    samples_per_item: int
    indices: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class EvalRequest:
    """What one evaluation should cover.

    ``sample_size`` is the number of items to evaluate over all ranks together (``None``: the whole set).
    The sample is nested: items are taken in one fixed, seeded order, so a larger ``sample_size`` extends
    the same ordering and successive evaluations reuse the same items first (paired comparisons between
    checkpoints instead of fresh sampling noise).

    >>> req = EvalRequest(step=10, sample_size=4, seed=0, reason="trigger:steps")
    >>> req.indices(10)
    [4, 6, 2, 7]
    >>> EvalRequest(step=10, sample_size=6, seed=0, reason="x").indices(10)[:4]
    [4, 6, 2, 7]
    >>> EvalRequest(step=10, sample_size=5, seed=0, reason="x", rank=1, world_size=2).indices(10)
    [6, 7]
    """

    step: int
    sample_size: int | None
    seed: int
    reason: str
    rank: int = 0
    world_size: int = 1
    # The suites due in this evaluation (empty without evaluation.suites), by name.
    suites: Mapping = dataclasses.field(default_factory=dict)
    # A kept checkpoint to evaluate instead of the model as it is now (what the trainer gave
    # AdaptiveEvaluator.checkpoint_saved; ``step`` is then that checkpoint's step); None: the current model.
    checkpoint: object = None
    # Filled by indices(): how many items this rank was handed (for metrics reported as one scalar).
    _handed: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self):
        def whole(name, v):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise ValueError(f"EvalRequest.{name} must be an integer, got {v!r}")
            return int(v)

        if whole("seed", self.seed) < 0:
            raise ValueError(f"EvalRequest.seed must be >= 0, got {self.seed}")
        if self.sample_size is not None and whole("sample_size", self.sample_size) < 0:
            raise ValueError(f"EvalRequest.sample_size must be >= 0 or None (the whole set), got {self.sample_size}")
        if whole("world_size", self.world_size) < 1:
            raise ValueError(f"EvalRequest.world_size must be >= 1, got {self.world_size}")
        if not 0 <= whole("rank", self.rank) < self.world_size:
            raise ValueError(f"EvalRequest.rank must lie in [0, world_size={self.world_size}), got {self.rank}")

    def num_selected(self, num_items: int) -> int:
        """How many items all ranks together evaluate from a set of ``num_items``."""
        if self.sample_size is None:
            return num_items
        return min(self.sample_size, num_items)

    def indices(self, num_items: int) -> list[int]:
        """This rank's part of the deterministic sample of a set of ``num_items`` items.

        The parts of all ranks are disjoint and together cover exactly ``min(sample_size, num_items)``
        items; shards may differ in size by one (no padding, which would bias the metric).
        """
        if isinstance(num_items, bool) or not isinstance(num_items, (int, np.integer)) or num_items < 0:
            raise ValueError(f"num_items must be a non-negative integer, got {num_items!r}")
        if self.suites:
            # (the sample size of a request with suites is their sum: one set sampled by it mixes the suites' sizes)
            log_once("indices-with-suites", "request.indices(%d) on an evaluation with eval suites (%s): its "
                     "sample_size (%s) is the sum of the suites' samples, not one set's; each suite's items are in "
                     "request.suites[name].indices (this rank's shard of its sample; said once)", num_items,
                     ", ".join(self.suites), self.sample_size)
        chosen = _permutation(self.seed, int(num_items))[: self.num_selected(int(num_items))]
        mine = list(chosen[self.rank :: self.world_size])
        self._handed["count"] = len(mine)
        self._handed["indices"] = mine
        self._handed["calls"] = self._handed.get("calls", 0) + 1  # (an adapter's several eval sets: one call each)
        self._handed["selected"] = len(chosen)  # (every rank's items together)
        return mine

    @property
    def items_handed(self) -> int | None:
        """How many items :meth:`indices` gave this rank (None if it was not called)."""
        return self._handed.get("count")

    def _scored(self, names, count: int) -> None:
        """A framework adapter's note: the metrics ``names`` (aggregates, one scalar each) are over ``count`` of this
        rank's items, their own eval set's (of several, :attr:`items_handed` is the last set's)."""
        self._handed.setdefault("metric_items", {}).update(dict.fromkeys(names, count))

    def _reduced(self, names, how: str) -> None:
        """A framework adapter's note: the scalar metrics ``names`` are this rank's ``how`` ("sum", "max" or "min") over
        its items, so the ranks' values combine the same way (they were averaged, weighted by items)."""
        self._handed.setdefault("metric_reduce", {}).update(dict.fromkeys(names, how))

    def _from_set(self, names, label: str) -> None:
        """A framework adapter's note: the metrics ``names`` were scored on its eval set ``label``, one of several
        (HF's dict of eval sets, Lightning's validation loaders): :attr:`EvalResult.items` adds the sets up."""
        sets = self._handed.setdefault("metric_sets", {})
        for name in names:
            sets[name] = tuple(sorted({*sets.get(name, ()), str(label)}))


@dataclasses.dataclass(frozen=True)
class MetricSummary:
    """One metric of one evaluation: its mean, sample count and confidence interval.

    ``total`` and ``total_sq`` (sum and sum of squares of the per-sample values) are kept so that shards
    from several ranks combine exactly.  ``binary`` marks 0/1 per-sample values (a proportion: Wilson
    interval); otherwise the interval is Student t.  A metric given as one scalar has ``per_sample`` False
    and, unless it is a proportion, an unknown (NaN) interval.
    """

    mean: float
    n: int
    ci: tuple[float, float]
    std: float = math.nan
    total: float = math.nan
    total_sq: float = math.nan
    binary: bool = False
    per_sample: bool = True
    # Multi-sample (items x samples) metrics: ``total``/``total_sq`` are over the per-item means, ``n`` counts
    # items, ``samples`` the finite per-sample values over all items, ``within_ss`` their squared deviations
    # from their item's mean (the within-item variation), ``nan_count`` the NaN per-sample values skipped.
    clustered: bool = False
    samples: int = 0
    within_ss: float = math.nan
    nan_count: int = 0
    population: int = 0  # items in the suite the items were drawn from (finite population); 0: unbounded
    k: int = 1  # the k of a pass@k summary (its interval counts an item's answers as answers / k trials)
    # A custom aggregation (evaluation.aggregations): "weighted_mean" or "p<q>" (a quantile over items), with
    # ``payload`` its sufficient statistics (weighted sums; the per-item values of a quantile).
    aggregate: str = ""
    payload: tuple = ()
    # Sums of cubed and fourth-power deviations of the values (per-item means for items x samples) from their
    # mean, when known: the interval's degrees of freedom shrink with their kurtosis (stats.kurtosis_df), and
    # shards combine them exactly (stats.pooled_moments).
    m3: float = math.nan
    m4: float = math.nan
    # Multi-sample metrics: the sum over items of SS_i^2 / (m_i - 1), SS_i an item's within-item squared
    # deviations and m_i its samples, from which the within part's degrees of freedom are read (few items holding
    # all of it make an estimate of few degrees of freedom); NaN: unknown.
    within_ss2: float = math.nan
    # Multi-sample metrics: the sum over items of 1 / m_i (m_i an item's samples), for the within part of the
    # variance of the mean where items hold different numbers of samples (timed-out answers); NaN: unknown.
    inv_samples: float = math.nan
    # Multi-sample metrics: the most answers any item returned (its row's length, NaN answers counted); a shard's
    # k of pass@k is checked against the largest over every rank, not its own (a rank of short rows failed a
    # whole evaluation one process takes; a probe).  0: unknown (one value per item).
    most: int = 0

    @property
    def half_width(self) -> float:
        return (self.ci[1] - self.ci[0]) / 2.0

    @property
    def samples_per_item(self) -> float:
        """Mean number of samples per item (1 for one value per item)."""
        if not self.clustered:
            return 1.0
        return self.samples / self.n if self.n > 0 else math.nan

    @property
    def effective_samples_per_item(self) -> float:
        """The samples per item that the within-item part of the mean's variance is divided by: the harmonic
        mean of the items' counts, ``n / sum(1 / m_i)`` (:attr:`samples_per_item`, their plain mean, where the
        counts are unknown).  An item's mean varies by ``within_var / m_i``, so a suite of AIME-like problems, half
        of them with 16 answers and half with 1 (the others timed out), varies as with 1.9 answers each, not 8.5:
        read at the plain mean, a whole suite's 95% interval covered 0.68 of draws (a new-user probe; SIMULATED)."""
        if self.clustered and self.n > 0 and math.isfinite(self.inv_samples) and self.inv_samples > 0:
            return self.n / self.inv_samples
        return self.samples_per_item

    @property
    def within_var(self) -> float:
        """Pooled within-item variance of the per-sample values (NaN when unknown)."""
        df = self.samples - self.n
        if not self.clustered or df <= 0 or not math.isfinite(self.within_ss):
            return math.nan
        return self.within_ss / df

    @property
    def between_var(self) -> float:
        """Variance of the items' true means: the variance of the per-item means less the part the
        within-item sampling explains (>= 0; for one value per item, the plain variance)."""
        if not math.isfinite(self.std):
            return math.nan
        var_means = self.std * self.std
        wv = self.within_var
        if not self.clustered or not math.isfinite(wv):
            return var_means
        return max(var_means - wv / self.effective_samples_per_item, 0.0)

    def to_dict(self) -> dict:
        """All fields as plain values (``from_dict`` restores them exactly)."""
        d = dataclasses.asdict(self)
        d["ci"] = list(self.ci)
        d["payload"] = list(self.payload)
        return d

    @classmethod
    def from_dict(cls, d: Mapping) -> "MetricSummary":
        # (fields a later version adds are left out: a state saved by it still loads here; review)
        known = {f.name for f in dataclasses.fields(cls)}
        d = {k: v for k, v in d.items() if k in known}
        d["ci"] = tuple(d["ci"])
        if "payload" in d:
            d["payload"] = tuple(d["payload"])
        return cls(**checked_fields(cls, d))


@dataclasses.dataclass(frozen=True)
class EvalResult:
    """The outcome of one evaluation.

    ``metrics`` maps a metric name to its :class:`MetricSummary`; ``result["acc"]`` is a shortcut.
    ``raw`` keeps whatever a zero-argument, AReaL-style ``evaluate_fn`` returned that was not a mapping
    (usually ``None``: such functions log their own results).

    ``sample_size`` is what the request asked for (None: the whole set), which can exceed the eval set (an
    alarm's widened 512 on a 500-item set); :attr:`items` is what was measured, the figure to count cost by.

    An asynchronous evaluation (``evaluation.asynchronous``) also says when it was ``submitted_step`` (the
    step of the weights it evaluated, so equal to ``step``) and ``integrated_step`` (the step at which its
    result joined the decisions); ``seconds`` are then eval-device seconds.  Both are None for a
    synchronous evaluation.
    """

    step: int
    sample_size: int | None
    reason: str
    seconds: float
    metrics: Mapping[str, MetricSummary] = dataclasses.field(default_factory=dict)
    epoch: int | None = None
    raw: object = None
    # Per metric: the paired difference (this evaluation minus the previous one that measured the metric) on
    # the items both evaluated; ``n`` counts those items, the interval is Student t over them.
    paired: Mapping[str, MetricSummary] = dataclasses.field(default_factory=dict)
    submitted_step: int | None = None
    integrated_step: int | None = None
    # A kept checkpoint evaluated later (reason ``lookback:...``): ``step`` is the checkpoint's, this the step at
    # which it was evaluated.  None: the model of ``step`` evaluated at ``step``.
    evaluated_at: int | None = None
    # With evaluation.suites: the configured suites' names (metrics "<suite>/<metric>"), set by the evaluator.
    suites: tuple = ()
    # Where a framework adapter scored several eval sets of its own (HF's dict of eval sets, Lightning's validation
    # loaders): by metric, the sets it was scored on (one, or several for a name the sets share).
    sets: Mapping[str, tuple] = dataclasses.field(default_factory=dict)

    def __getitem__(self, name: str) -> MetricSummary:
        return self.metrics[name]

    @property
    def items(self) -> int:
        """Items actually evaluated: the largest count of any metric, its NaN items included (the whole set when
        ``sample_size`` is None), else the requested ``sample_size`` (0 when neither is known; so too when every
        value of items x samples metrics was NaN).  With eval suites, each suite's (its largest metric count)
        added up: 300 MATH-500 problems and 30 AIME ones are 330 items; so too the eval sets of a framework
        adapter (:attr:`sets`: HF's dict of eval sets, Lightning's validation loaders), each its largest count.

        >>> m = lambda n: MetricSummary(0.5, n, (0.4, 0.6))
        >>> EvalResult(10, None, "x", 1.0, {"math/acc": m(300), "math/pass@4": m(300), "aime/acc": m(30)},
        ...            suites=("math", "aime")).items
        330
        """
        def measured(m: MetricSummary) -> int:
            # (an item whose value was NaN was evaluated too: a dead model's evaluation cost its items, and
            # counted 0; items x samples count their NaN samples, not items, so an item all NaN is not added)
            return m.n + (m.nan_count if not m.clustered else 0)

        def group(name: str):  # (a suite's metrics by their prefix; an adapter's by their one eval set)
            if self.suites:
                suite = name.split("/", 1)[0]
                return suite if suite in self.suites else None
            sets = self.sets.get(name, ())
            return sets[0] if len(sets) == 1 else None  # (a name several sets share: in the largest count below)

        counts: dict[str, int] = {}
        for name, m in self.metrics.items():
            if (key := group(name)) is not None:
                counts[key] = max(counts.get(key, 0), measured(m))
        count = sum(counts.values())
        if self.sets and not self.suites:
            count = max(count, max((measured(m) for m in self.metrics.values()), default=0))
        if not count and self.metrics:
            count = max(measured(m) for m in self.metrics.values())
        if not count and any(m.nan_count for m in self.metrics.values()):
            return self.sample_size or 0  # every value NaN (items x samples): the items asked for
        return count if self.metrics else self.sample_size or 0

    def mean(self, name: str) -> float:
        return self.metrics[name].mean

    def state(self, payloads: bool = False) -> dict:
        """Every field as plain values; ``EvalResult.from_state`` restores it (``raw`` is dropped).  An aggregation's
        payload (up to one value per item) is needed only to combine shards: kept with ``payloads`` (a shard's
        result still to combine), else left out."""
        d = {"step": self.step, "epoch": self.epoch, "sample_size": self.sample_size, "reason": self.reason,
             "seconds": self.seconds,
             "metrics": {k: {**v.to_dict(), **({} if payloads else {"payload": []})} for k, v in self.metrics.items()},
             "paired": {k: v.to_dict() for k, v in self.paired.items()}}
        if self.sets:  # (a state's only: evals.jsonl's lines keep their documented keys, their sample_size its count)
            d["sets"] = {k: list(v) for k, v in self.sets.items()}
        return self._add_async(d)

    def _add_async(self, d: dict) -> dict:
        if self.suites:
            d["suites"] = list(self.suites)
        if self.evaluated_at is not None:
            d["evaluated_at"] = self.evaluated_at
        if self.integrated_step is not None:
            d["submitted_step"] = self.submitted_step
            d["integrated_step"] = self.integrated_step
        return d

    @classmethod
    def from_state(cls, d: Mapping) -> "EvalResult":
        return cls(**checked_fields(cls, dict(
            step=d["step"], sample_size=d["sample_size"], reason=d["reason"], seconds=d["seconds"],
            metrics={k: MetricSummary.from_dict(v) for k, v in d["metrics"].items()}, epoch=d.get("epoch"),
            paired={k: MetricSummary.from_dict(v) for k, v in d.get("paired", {}).items()},
            submitted_step=d.get("submitted_step"), integrated_step=d.get("integrated_step"),
            evaluated_at=d.get("evaluated_at"), suites=tuple(d.get("suites", ())),
            sets={k: tuple(v) for k, v in d.get("sets", {}).items()})))

    def to_dict(self) -> dict:
        """The line written to ``evals.jsonl``: means, intervals and item counts ``n`` by metric; for
        multi-sample metrics also ``samples_per_item``, ``nan_count`` where NaN samples were skipped, and
        ``paired`` differences when there are any; ``sample_size`` is the number of items actually evaluated
        (:attr:`items`); an asynchronous result adds ``submitted_step`` and ``integrated_step``, a kept
        checkpoint's (``lookback:...``) ``evaluated_at``."""
        line = {"step": self.step, "epoch": self.epoch, "sample_size": self.items, "reason": self.reason,
                "metrics": {k: v.mean for k, v in self.metrics.items()},
                "ci": {k: [v.ci[0], v.ci[1]] for k, v in self.metrics.items()}, "seconds": self.seconds,
                "n": {k: v.n for k, v in self.metrics.items()}}
        multi = {k: v for k, v in self.metrics.items() if v.clustered}
        if multi:
            line["samples_per_item"] = {k: v.samples_per_item for k, v in multi.items()}
        nans = {k: v.nan_count for k, v in self.metrics.items() if v.nan_count}
        if nans:
            line["nan_count"] = nans
        if self.paired:
            line["paired"] = {k: {"diff": v.mean, "ci": [v.ci[0], v.ci[1]], "n": v.n} for k, v in self.paired.items()}
        return self._add_async(line)


@dataclasses.dataclass(frozen=True)
class Decision:
    """Whether to evaluate at this step, with how many samples, and why.

    ``reason`` is also set when ``evaluate`` is False and something happened worth showing (a deferral);
    it is ``""`` for the ordinary "not due".  ``suites`` (only with ``evaluation.suites``) sizes each suite.
    """

    evaluate: bool
    sample_size: int | None = None
    reason: str = ""
    urgent: bool = False
    # With evaluation.suites: the sample-size policy's plan, ((suite, items, samples_per_item), ...).
    suites: tuple = ()
    # The sample size a policy widened this evaluation from (a held alarm's or the peak policy's widening of a
    # scheduled evaluation): over budget it may shrink back towards it, never below (policy.budget.shrink_widened).
    widened_from: int | None = None
    # A deferral (``evaluate`` False, ``reason`` why, e.g. ``budget:deferred``): the reason of the evaluation that
    # was due and waits (``peak:confirm``, ``interval:relaxed``, ...); "" when it came from the trigger alone.
    deferred: str = ""

    def __bool__(self) -> bool:
        return self.evaluate


NOT_DUE = Decision(False)

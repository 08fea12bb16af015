"""Eval suites (``evaluation.suites``): which suites an evaluation covers, and which items of each.

A suite is a named eval set (MATH500, AIME24, ...) with its size, samples per item, relative cost per
sample, optional strata and a schedule (``every``: run at every m-th evaluation).  This module is pure:

* :func:`suite_order`: the suite's one fixed, seeded order of items (stratified when strata are given:
  every prefix holds each stratum in proportion, within one item), so that a larger sample extends the
  same items and successive evaluations share their items first;
* :func:`due_suites`: which suites the ``index``-th evaluation covers and why (every eval, the m-th eval,
  an alarm, the last step, before training), for the decision's reason;
* :func:`suite_requests`: the :class:`~adaptive_eval.types.SuiteRequest` of each due suite for one rank.
"""

from __future__ import annotations

import functools
import re
import zlib
from collections.abc import Mapping, Sequence

import numpy as np

from adaptive_eval.types import SuiteRequest, reason_cause

__all__ = ["SuitePlan", "due_suites", "most_answers_per_item", "plan_units", "reported_strata", "result_units",
           "suite_order", "suite_requests", "suites_reason", "weighted_aggregate"]

# Evaluations that cover every suite, whatever its ``every``.
_ALL_SUITES = ("alarm:", "trigger:final", "before_train")


@functools.lru_cache(maxsize=64)
def suite_order(seed: int, name: str, size: int, strata: tuple = ()) -> tuple[int, ...]:
    """The nested sampling order of a suite's items (a tuple: cached, not to be mutated).

    Without strata, a seeded permutation.  With strata (one label per item), each stratum is permuted and
    the strata are interleaved so that every prefix holds each stratum ``h`` about ``t * N_h / N`` times
    (proportional allocation, never off by more than one item).

    >>> suite_order(0, "aime24", 6)
    (0, 4, 5, 3, 2, 1)
    >>> order = suite_order(0, "math", 8, ("easy",) * 6 + ("hard",) * 2)
    >>> [("easy",) * 6 + ("hard",) * 2][0][order[0]], sorted(order) == list(range(8))
    ('easy', True)
    """
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(seed), zlib.crc32(name.encode())])))
    if not strata:
        return tuple(rng.permutation(size).tolist())
    labels = sorted({str(s) for s in strata})
    members = {h: [i for i, s in enumerate(strata) if str(s) == h] for h in labels}
    queues = {h: [members[h][j] for j in rng.permutation(len(members[h]))] for h in labels}
    taken = dict.fromkeys(labels, 0)
    order = []
    for t in range(size):
        # The stratum furthest below its proportional share after t + 1 items (ties: label order).
        h = max(labels, key=lambda h: (len(members[h]) * (t + 1) / size - taken[h], -labels.index(h)))
        order.append(queues[h][taken[h]])
        taken[h] += 1
    return tuple(order)


class SuitePlan(tuple):
    """``(name, items, samples_per_item, why)``: how much of one suite an evaluation covers, and why
    (plain values)."""

    __slots__ = ()

    def __new__(cls, name: str, items: int, samples_per_item: int, why: str = ""):
        return super().__new__(cls, (str(name), int(items), int(samples_per_item), str(why)))

    name = property(lambda self: self[0])
    items = property(lambda self: self[1])
    samples_per_item = property(lambda self: self[2])
    why = property(lambda self: self[3])


def _ordinal_suffix(n: int) -> str:
    """2 -> "nd", 3 -> "rd", 4 -> "th", 11 -> "th", 22 -> "nd" (a reason read "every 2th")."""
    return "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")


def due_suites(suites: Mapping[str, Mapping], index: int, reason: str, owed=()) -> dict[str, str]:
    """The suites the ``index``-th evaluation (0-based) covers, each with why: ``every`` (a suite of every
    evaluation), ``every <m>th`` (its turn), ``alarm``, ``final`` or ``before_train`` (these cover all), or
    ``retry`` (a suite in ``owed``: its last turn measured nothing, the evaluation failed, was cancelled or returned
    none of its metrics).

    >>> cfg = {"math500": {"every": 1}, "aime24": {"every": 4}}
    >>> due_suites(cfg, 0, "trigger:steps"), due_suites(cfg, 1, "trigger:steps")
    ({'math500': 'every', 'aime24': 'every 4th'}, {'math500': 'every'})
    >>> due_suites(cfg, 1, "alarm:train/reward:cusum:down")
    {'math500': 'every', 'aime24': 'alarm'}
    >>> due_suites({"x": {"every": 2}, "y": {"every": 3}}, 0, "trigger:steps")  # (it said "every 2th")
    {'x': 'every 2nd', 'y': 'every 3rd'}

    An evaluation the resource check forced after deferring it covers what its cause covers (a forced final one
    covered the every-1 suites only, and the others were never evaluated again; found in review):

    >>> due_suites(cfg, 1, "resources:forced (trigger:final)")
    {'math500': 'every', 'aime24': 'final'}
    >>> due_suites(cfg, 1, "trigger:steps", owed={"aime24"})
    {'math500': 'every', 'aime24': 'retry'}
    """
    reason = reason_cause(reason)
    out = {}
    for name, suite in suites.items():
        every = int(suite["every"])
        if every <= 1:
            out[name] = "every"
        elif index % every == 0:
            out[name] = f"every {every}{_ordinal_suffix(every)}"
        elif reason.startswith(_ALL_SUITES):
            out[name] = "alarm" if reason.startswith("alarm:") else reason.split(":")[-1]
        elif name in owed:
            out[name] = "retry"
    return out


def suites_reason(reason: str, suites: Mapping[str, Mapping], due: Mapping[str, str], index: int,
                  plans: Mapping[str, SuitePlan] | None = None) -> str:
    """The decision's reason with the suites it covers and why (with each plan's items x samples per item
    and why, when sized by the policy), and when the skipped ones are next due.

    >>> cfg = {"math500": {"every": 1}, "aime24": {"every": 4}}
    >>> suites_reason("trigger:steps", cfg, {"math500": "every"}, 1)
    'trigger:steps [math500: every; aime24: skipped, due in 3 evals]'
    """
    parts = []
    for name, suite in suites.items():
        if name in due:
            plan = (plans or {}).get(name)
            size = f", {plan.items}x{plan.samples_per_item} ({plan.why})" if plan is not None and plan.why else ""
            parts.append(f"{name}: {due[name]}{size}")
        else:
            every = int(suite["every"])
            wait = every - index % every
            parts.append(f"{name}: skipped, due in {wait} eval{'s' if wait != 1 else ''}")
    return f"{reason} [{'; '.join(parts)}]"


def suite_requests(suites: Mapping[str, Mapping], plans: Sequence[SuitePlan], seed: int, rank: int = 0,
                   world_size: int = 1) -> dict[str, SuiteRequest]:
    """This rank's :class:`SuiteRequest` for each planned suite: a strided shard of the first ``items``
    of the suite's nested order (shards are disjoint, differ in size by at most one, and an item keeps its
    rank from one evaluation to the next)."""
    out = {}
    for plan in plans:
        suite = suites[plan.name]
        size = int(suite["size"])
        items = min(int(plan.items), size)
        order = suite_order(int(seed), plan.name, size, tuple(str(s) for s in suite.get("strata") or ()))
        out[plan.name] = SuiteRequest(name=plan.name, size=size, sample_size=items,
                                      samples_per_item=int(plan.samples_per_item),
                                      indices=list(order[:items][rank::world_size]))
    return out


_QUANTILE_NAME = re.compile(r"p\d{1,2}")


def weighted_aggregate(metrics: Mapping, suites: Mapping[str, Mapping], prefix: str,
                       confidence: float = 0.95) -> dict:
    """``"<prefix>/<metric>"``: the ``weight``-weighted mean over suites of each ``"<suite>/<metric>"`` that
    every suite reports, with the interval of a weighted sum of independent estimates (the suites are independent
    samples) by MOVER (Zou & Donner): each side's margin is the root of the weighted suites' margins on that side
    squared, so that a suite's own lopsided interval (a Wilson or Clopper-Pearson one near 0 or 1) is kept and a
    mean of proportions stays within [0, 1] (a symmetric normal interval read all/acc 0.0083 [-0.052, 0.069], and
    0.9875 [0.950, 1.026]; a new user's probe); ``n`` counts the items of the suites of non-zero weight.  Empty
    unless every suite is in ``metrics`` (an evaluation that skipped a suite has no aggregate: the series stays
    comparable).  Not for a quantile aggregation (``"<metric>/p90"`` beside ``"<metric>"``): a weighted mean of
    quantiles is no quantile.  ``confidence`` is the suites' own intervals' (kept for the signature).

    >>> from adaptive_eval.types import MetricSummary
    >>> m = {"a/acc": MetricSummary(0.5, 100, (0.4, 0.6)), "b/acc": MetricSummary(0.2, 30, (0.1, 0.3))}
    >>> agg = weighted_aggregate(m, {"a": {"weight": 3.0}, "b": {"weight": 1.0}}, "all")["all/acc"]
    >>> round(agg.mean, 3), agg.n, tuple(round(x, 3) for x in agg.ci)
    (0.425, 130, (0.346, 0.504))
    >>> m["b/acc"] = MetricSummary(0.95, 30, (0.83, 0.99))
    >>> agg = weighted_aggregate(m, {"a": {"weight": 0.0}, "b": {"weight": 1.0}}, "all")["all/acc"]
    >>> round(agg.mean, 3), agg.n, tuple(round(x, 3) for x in agg.ci)   # one suite weighs: its own interval
    (0.95, 30, (0.83, 0.99))
    """
    import math

    from adaptive_eval.types import MetricSummary

    by_metric: dict[str, dict[str, object]] = {}
    for name, s in metrics.items():
        suite, _, metric = name.partition("/")
        if suite in suites and metric and "/stratum=" not in metric:  # (strata are each suite's own)
            by_metric.setdefault(metric, {})[suite] = s
    total_w = sum(float(s["weight"]) for s in suites.values())
    out = {}
    if total_w <= 0:
        return out
    for metric, parts in by_metric.items():
        if set(parts) != set(suites):
            continue
        base, _, last = metric.rpartition("/")
        if base in by_metric and _QUANTILE_NAME.fullmatch(last):
            # a quantile of the per-item values (evaluation.aggregations' p90): the weighted mean of the suites' p90s
            # is no 90th percentile of anything (576.9 for two suites of lengths near 100 and 1,000, whose pooled
            # p90 is 1,032; a probe): each suite's stays its own
            continue
        share = {k: float(suites[k]["weight"]) / total_w for k in parts}
        weighed = [(share[k], p) for k, p in parts.items() if share[k] > 0]
        mean = sum(w * p.mean for w, p in weighed)  # (a suite of weight 0 counts nowhere: its NaN made the mean NaN)
        # (hypot: squares of huge margins overflow, and float ** raises there; a fuzzing probe)
        below = math.hypot(*(w * (p.mean - p.ci[0]) for w, p in weighed))
        above = math.hypot(*(w * (p.ci[1] - p.mean) for w, p in weighed))
        out[f"{prefix}/{metric}"] = MetricSummary(mean=mean, n=sum(p.n for _, p in weighed),
                                                  ci=(mean - below, mean + above), per_sample=False)
    return out


def plan_units(suites: Mapping[str, Mapping], plans: Sequence) -> float:
    """What evaluating ``plans`` costs in the suites' own units: per suite, items x (samples per item x ``cost``
    + ``item_cost``) (the cost model of ``stats.two_stage_size`` and of replay's simulated clock).

    >>> cfg = {"math500": {"cost": 1.0, "item_cost": 0.0}, "aime24": {"cost": 4.0, "item_cost": 0.0}}
    >>> plan_units(cfg, [SuitePlan("math500", 50, 4), SuitePlan("aime24", 30, 16)])
    2120.0
    """
    total = 0.0
    for plan in plans:
        suite = suites.get(plan[0])
        if suite is not None:
            total += int(plan[1]) * (int(plan[2]) * float(suite["cost"]) + float(suite["item_cost"]))
    return total


def result_units(suites: Mapping[str, Mapping], metrics: Mapping) -> float | None:
    """What an evaluation's results cost in the same units as :func:`plan_units`, from each suite's metric of
    the most answers (``"<suite>/<metric>"``: its answers for an items x samples metric, else its items; a
    per-item metric beside an items x samples one does not hide the answers).  None when no suite's metric
    is there.

    >>> from adaptive_eval.types import MetricSummary
    >>> cfg = {"math500": {"cost": 1.0, "item_cost": 0.5}, "aime24": {"cost": 4.0, "item_cost": 0.0}}
    >>> m = {"math500/acc": MetricSummary(0.5, 50, (0.4, 0.6), clustered=True, samples=200),
    ...      "aime24/acc": MetricSummary(0.2, 30, (0.1, 0.3))}
    >>> result_units(cfg, m)
    345.0
    """
    best: dict[str, object] = {}
    for name, m in metrics.items():
        suite = name.split("/", 1)[0]
        if suite in suites and "/" in name and (suite not in best or (answers_of(m), m.n) > (answers_of(best[suite]),
                                                                                             best[suite].n)):
            best[suite] = m
    if not best:
        return None
    return sum(answers_of(m) * float(suites[s]["cost"]) + m.n * float(suites[s]["item_cost"])
               for s, m in best.items())


def answers_of(m) -> int:
    """The answers a metric's summary counts: its answers for an items x samples metric, else its items."""
    return int(m.samples if getattr(m, "clustered", False) and m.samples else m.n)


def most_answers_per_item(suite: Mapping, sized: bool) -> tuple[int, str]:
    """The most answers per item an evaluation of ``suite`` may ask for, and why.  ``samples_per_item`` is the
    first evaluation's count, not a cap: with the sample-size policy on (``sized``) and no fixed ``sample_size``
    the plans go up to ``max_samples_per_item`` (null: 32, or ``samples_per_item`` when more); otherwise every
    evaluation asks for ``samples_per_item``.

    >>> most_answers_per_item({"samples_per_item": 4, "max_samples_per_item": None, "sample_size": None}, True)
    (32, 'max_samples_per_item: null, so 32')
    >>> most_answers_per_item({"samples_per_item": 4, "max_samples_per_item": None, "sample_size": 10}, True)
    (4, 'samples_per_item: 4; its sample_size is fixed, so the sample-size policy does not size it')
    """
    from adaptive_eval.policies._sample_size import _max_samples_per_item

    answers = int(suite.get("samples_per_item", 1))
    if not sized:
        return answers, f"samples_per_item: {answers}; policy.sample_size is off"
    if suite.get("sample_size") is not None:
        return answers, (f"samples_per_item: {answers}; its sample_size is fixed, so the sample-size policy does not "
                         "size it")
    top = _max_samples_per_item(suite)
    given = suite.get("max_samples_per_item")
    return top, f"max_samples_per_item: {given if given is not None else f'null, so {top}'}"


def reported_strata(suites: Mapping[str, Mapping]) -> dict[str, list[str]]:
    """The suites whose metrics are also reported per stratum (``report_strata``), with their labels."""
    return {name: [str(x) for x in s["strata"]] for name, s in suites.items()
            if s.get("report_strata") and s.get("strata")}

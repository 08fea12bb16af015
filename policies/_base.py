"""The policy interface and the neutral (do-nothing) policy."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence

from adaptive_eval.types import Decision, EvalResult, MetricSummary

__all__ = ["Context", "Policy", "NopPolicy", "primary_metric", "tracked_metric", "tracked_name",
           "looks_lower_is_better"]


@dataclasses.dataclass(frozen=True)
class Context:
    """What a policy may know about the run when it decides (plain values, no trainer object)."""

    step: int
    elapsed: float  # seconds since the run started, on the injected clock
    eval_seconds: float  # seconds spent evaluating so far
    last_eval_step: int | None = None
    streams: int | None = None  # streams whose level detectors are armed (past warm-up); None: not known
    stride: int = 1  # steps between the latest two observe() calls (a run logged every k steps: k)


class Policy:
    """A policy decides one thing and says why.  This base class is the neutral element.

    Hooks, all optional:

    * ``scale(scale) -> scale``: the multiplier of the base interval, passed along the chain
      (interval policies set it, the peak policy caps it);
    * ``propose(decision, ctx) -> decision``: adjust the decision for this step, passed along the chain
      (the alarm policy can turn "not due" into "evaluate now", the sample-size policy sets the size,
      the budget policy can defer);
    * ``on_alarm(alarm, ctx)`` and ``on_eval(result, ctx)``: what happened; ``on_held_alarm(alarm, ctx)``:
      an alarm the alarm policy holds for want of corroboration (it brings nothing forward);
    * ``state_dict()`` / ``load_state_dict(sd)``: plain values; later fields are read with defaults.
    """

    name = "nop"

    def scale(self, scale: float) -> float:
        return scale

    def propose(self, decision: Decision, ctx: Context) -> Decision:
        return decision

    def on_alarm(self, alarm, ctx: Context) -> None:
        pass

    def on_held_alarm(self, alarm, ctx: Context) -> None:
        pass

    def on_eval(self, result: EvalResult, ctx: Context) -> None:
        pass

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, sd: Mapping) -> None:
        pass

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({params})"


class NopPolicy(Policy):
    """Changes nothing: with only this, the adaptive evaluator is the base trigger.

    >>> from adaptive_eval.types import Decision
    >>> NopPolicy().propose(Decision(False), None)
    Decision(evaluate=False, sample_size=None, reason='', urgent=False, suites=(), widened_from=None, deferred='')
    """


_BOOKKEEPING_SUFFIXES = ("_runtime", "_samples_per_second", "_steps_per_second", "__count")


def is_bookkeeping(name: str) -> bool:
    """Whether a metric name is bookkeeping rather than a measure of the model (HF's ``eval_runtime``,
    ``eval_samples_per_second``, ``epoch``, AReaL's ``timeperf/...`` timings and ``stats_tracker`` counts
    ``<key>__count``, ...): never chosen as the tracked metric by default.  (AReaL's were: a stats dict whose first
    key was ``timeperf/eval_rollout`` tracked that as higher-is-better; a probe.)

    >>> [is_bookkeeping(n) for n in ("eval_runtime", "timeperf/eval_rollout", "eval-rollout/reward__count",
    ...                                "eval-rollout/reward", "accuracy")]
    [True, True, True, False, False]
    """
    parts = name.split("/")
    last = parts[-1]
    return (last in ("epoch", "step", "global_step") or last.endswith(_BOOKKEEPING_SUFFIXES)
            or parts[0] == "timeperf")


_LOWER_IS_BETTER = re.compile(r"(?:^|[_/.\-])(loss|nll|wer|cer|perplexity|ppl|error|err|mse|mae|rmse|bpb|bpc)"
                              r"(?:$|[_/.\-@])", re.IGNORECASE)


def looks_lower_is_better(name: str) -> str | None:
    """The word that makes a metric's name read lower-is-better (``"loss"`` in ``eval_loss``), or None.

    >>> looks_lower_is_better("eval_loss"), looks_lower_is_better("math/wer"), looks_lower_is_better("accuracy")
    ('loss', 'wer', None)
    """
    found = _LOWER_IS_BETTER.search(str(name))
    return None if found is None else found.group(1).lower()


def tracked_metric(result: EvalResult, suites: Sequence[str] = (), higher_is_better: bool = True) -> str | None:
    """The metric ``evaluation.metric: null`` tracks, chosen from a run's first evaluation with a metric (the
    evaluator keeps it for the rest of the run): with eval suites, the first suite's (in ``evaluation.suites``
    order) before the others'; then, while higher is better, a name that does not read lower-is-better (a loss
    tracked as higher-is-better reads its rise as improving); then one returned with per-sample values (it has a
    real interval); then the first returned.  Bookkeeping names (``eval_runtime``, ``epoch``) only if nothing
    else was returned.  Before, each evaluation tracked its own first metric: with two suites returned in
    varying order the policies compared one suite's accuracy with the other's (a new user's probe).

    >>> from adaptive_eval.types import MetricSummary
    >>> r = EvalResult(step=0, sample_size=10, reason="", seconds=0.0, metrics={
    ...     "ood/loss": MetricSummary(2.0, 10, (1.9, 2.1), per_sample=True),
    ...     "ood/acc": MetricSummary(0.4, 10, (0.2, 0.6), per_sample=True),
    ...     "id/acc": MetricSummary(0.7, 10, (0.5, 0.9), per_sample=True)})
    >>> tracked_metric(r), tracked_metric(r, suites=["id", "ood"])
    ('ood/acc', 'id/acc')
    """
    if not result.metrics:
        return None
    return tracked_name(result.metrics, lambda name: result.metrics[name].per_sample, suites, higher_is_better)


def tracked_name(names, per_sample, suites: Sequence[str] = (), higher_is_better: bool = True) -> str:
    """:func:`tracked_metric`'s choice among ``names`` (non-empty, in the order returned); ``per_sample(name)``:
    whether that metric came with per-sample values (the Lightning adapter asks it of what a validation step
    logged, before the evaluator has a result)."""
    names = [n for n in names if not is_bookkeeping(n)] or list(names)
    order = {s: i for i, s in enumerate(suites)}

    def rank(name: str) -> tuple:
        return (order.get(name.partition("/")[0], len(order)),
                bool(higher_is_better) and looks_lower_is_better(name) is not None,
                not per_sample(name))

    return min(names, key=rank)  # (the first of equals, in the order returned)


def primary_metric(result: EvalResult, metric: str | None) -> tuple[str, MetricSummary] | None:
    """The metric the policies track: ``metric`` if given and present.  Without one (``evaluation.metric:
    null``): the first metric returned with per-sample values (so it has a real interval), else the first
    one; bookkeeping names (``eval_runtime``, ``epoch``, ...) only if nothing else was returned."""
    if not result.metrics:
        return None
    if metric is not None:
        summary = result.metrics.get(metric)
        return (metric, summary) if summary is not None else None
    names = [n for n in result.metrics if not is_bookkeeping(n)] or list(result.metrics)
    name = next((n for n in names if result.metrics[n].per_sample), names[0])
    return name, result.metrics[name]

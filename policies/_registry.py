"""Policy registry and the chain that composes the enabled policies."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from adaptive_eval.types import Decision, EvalResult

from adaptive_eval.policies._alarm import AlarmPolicy
from adaptive_eval.policies._base import Context, NopPolicy, Policy
from adaptive_eval.policies._budget import BudgetPolicy
from adaptive_eval.policies._interval import IntervalPolicy
from adaptive_eval.policies._lookback import LookbackPolicy
from adaptive_eval.policies._peak import PeakPolicy
from adaptive_eval.policies._sample_size import SampleSizePolicy

__all__ = ["PolicySet", "available", "make_policies", "make_policy"]

# Order matters: interval then peak for the scale; alarm, sample size, then budget for the decision
# (the budget judges the size it will cost).
_REGISTRY: dict[str, type[Policy]] = {
    "alarm": AlarmPolicy,
    "interval": IntervalPolicy,
    "peak": PeakPolicy,
    "sample_size": SampleSizePolicy,
    "budget": BudgetPolicy,
    "lookback": LookbackPolicy,
    "nop": NopPolicy,
}
_ORDER = ("interval", "peak", "alarm", "sample_size", "budget", "lookback")
# The decision passes alarm -> sample size -> peak (which may raise the size to confirm a new best) -> budget.
_PROPOSE_ORDER = ("alarm", "sample_size", "peak", "budget")


def available() -> list[str]:
    """Names of the registered policies."""
    return list(_REGISTRY)


def _params(name: str, section: Mapping, evaluation: Mapping | None) -> dict:
    params = {k: v for k, v in section.items() if k != "enabled"}
    if isinstance(params.get("urgent_detectors"), Sequence):
        params["urgent_detectors"] = tuple(params["urgent_detectors"])
    ev = evaluation or {}
    if name in ("interval", "peak", "sample_size", "lookback", "alarm"):
        params.setdefault("metric", ev.get("metric"))
    if name in ("peak", "lookback"):
        params.setdefault("higher_is_better", ev.get("higher_is_better", True))
    if name == "sample_size":
        params.setdefault("confidence", ev.get("confidence", 0.95))
        params.setdefault("suites", ev.get("suites") or {})
    if name == "budget":
        params.setdefault("asynchronous", bool(ev.get("asynchronous", False)))
        params.setdefault("eval_workers", int(ev.get("max_in_flight", 1)))
    return params


def make_policy(name: str, section: Mapping | None = None, evaluation: Mapping | None = None) -> Policy:
    """Build one policy from its config section (``enabled`` is ignored here)."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown policy {name!r}; available: {', '.join(available())}")
    cls = _REGISTRY[name]
    params = _params(name, dict(section or {}), dict(evaluation or {}))
    try:
        return cls(**params)
    except TypeError as exc:
        raise ValueError(f"policy.{name}: {exc}") from None


class PolicySet:
    """The enabled policies in their fixed order; an empty set is the neutral element (the base trigger)."""

    def __init__(self, policies: Sequence[Policy] = ()):
        self.policies = list(policies)
        self.by_name = {p.name: p for p in self.policies}
        rank = {name: i for i, name in enumerate(_PROPOSE_ORDER)}
        # (a policy that never changes a decision, such as lookback, is not called at every step)
        self._proposers = sorted((p for p in self.policies if type(p).propose is not Policy.propose),
                                 key=lambda p: rank.get(p.name, -1))

    def scale(self) -> float:
        s = 1.0
        for p in self.policies:
            s = p.scale(s)
        return s

    def propose(self, decision: Decision, ctx: Context) -> Decision:
        for p in self._proposers:
            decision = p.propose(decision, ctx)
        return decision

    def on_alarm(self, alarm, ctx: Context) -> None:
        gate = self.by_name.get("alarm")
        if gate is not None and not gate.admit(alarm, ctx):  # held: waits for another stream to agree
            if not gate.quiet(alarm):  # (a habituated stream's urgent alarm widens nothing)
                for p in self.policies:
                    p.on_held_alarm(alarm, ctx)
            return
        for p in self.policies:
            p.on_alarm(alarm, ctx)

    def on_eval(self, result: EvalResult, ctx: Context) -> None:
        for p in self.policies:
            p.on_eval(result, ctx)

    def state_dict(self) -> dict:
        return {p.name: p.state_dict() for p in self.policies}

    def load_state_dict(self, sd: Mapping) -> None:
        for p in self.policies:
            p.load_state_dict(sd.get(p.name, {}))

    def __contains__(self, name: str) -> bool:
        return name in self.by_name

    def __repr__(self) -> str:
        return f"PolicySet({self.policies!r})"


def make_policies(policy_cfg: Mapping, evaluation_cfg: Mapping | None = None) -> PolicySet:
    """The enabled policies of a config's ``policy`` section, in their fixed order."""
    policies = []
    sizes = policy_cfg.get("sample_size") if policy_cfg is not None else None
    for name in _ORDER:
        section = policy_cfg.get(name) if policy_cfg is not None else None
        if section is not None and section.get("enabled", True):
            if name == "peak" and sizes is not None and sizes.get("enabled", True) and "max" in sizes:
                # The re-measure of a candidate best is an evaluation like any other: within sample_size.max.
                section = {**section, "confirm_size": min(int(section.get("confirm_size", 0)), int(sizes["max"]))}
            policies.append(make_policy(name, section, evaluation_cfg))
    return PolicySet(policies)

"""Adaptation policies: when to evaluate and with how many samples (installed as ``adaptive_eval.policies``)."""

if __name__ != "adaptive_eval.policies":
    raise ImportError(
        f"this package is adaptive_eval.policies; import it under that name, not as {__name__!r}"
    )

from adaptive_eval.policies._alarm import AlarmPolicy
from adaptive_eval.policies._base import Context, NopPolicy, Policy, primary_metric
from adaptive_eval.policies._budget import BudgetPolicy
from adaptive_eval.policies._interval import IntervalPolicy, differs, paired_differs
from adaptive_eval.policies._lookback import LookbackPolicy
from adaptive_eval.policies._peak import PeakPolicy
from adaptive_eval.policies._registry import PolicySet, available, make_policies, make_policy
from adaptive_eval.policies._sample_size import SampleSizePolicy

__all__ = [
    "AlarmPolicy",
    "BudgetPolicy",
    "Context",
    "IntervalPolicy",
    "LookbackPolicy",
    "NopPolicy",
    "PeakPolicy",
    "Policy",
    "PolicySet",
    "SampleSizePolicy",
    "available",
    "differs",
    "paired_differs",
    "make_policies",
    "make_policy",
    "primary_metric",
]

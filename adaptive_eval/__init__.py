"""adaptive_eval: decide when to evaluate a model during training and how many eval samples to spend."""

from adaptive_eval.adaptive import AdaptiveEvaluator
from adaptive_eval.config import Config, ConfigError, load_config
from adaptive_eval.evaluators import Evaluator
from adaptive_eval.trigger import EpochStepTimeFreqCtl
from adaptive_eval.types import Decision, EvalRequest, EvalResult, MetricSummary

__version__ = "0.1.0"

__all__ = [
    "AdaptiveEvaluator",
    "Config",
    "ConfigError",
    "Decision",
    "EpochStepTimeFreqCtl",
    "EvalRequest",
    "EvalResult",
    "Evaluator",
    "MetricSummary",
    "load_config",
]

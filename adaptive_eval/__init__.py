"""adaptive_eval: decide when to evaluate a model during training and how many eval samples to spend."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

# Each name is imported on first use (PEP 562), so that a bare ``import adaptive_eval`` costs nothing: pytest
# imports the package for its pytest11 entry point (adaptive_eval.testing) in every project where it is installed.
_EXPORTS = {
    "AdaptiveEvaluator": "adaptive_eval.adaptive",
    "Config": "adaptive_eval.config",
    "ConfigError": "adaptive_eval.config",
    "Decision": "adaptive_eval.types",
    "EpochStepTimeFreqCtl": "adaptive_eval.trigger",
    "EvalRequest": "adaptive_eval.types",
    "EvalResult": "adaptive_eval.types",
    "Evaluator": "adaptive_eval.evaluators",
    "MetricSummary": "adaptive_eval.types",
    "load_config": "adaptive_eval.config",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'adaptive_eval' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:
    from adaptive_eval.adaptive import AdaptiveEvaluator  # noqa: F401
    from adaptive_eval.config import Config, ConfigError, load_config  # noqa: F401
    from adaptive_eval.evaluators import Evaluator  # noqa: F401
    from adaptive_eval.trigger import EpochStepTimeFreqCtl  # noqa: F401
    from adaptive_eval.types import Decision, EvalRequest, EvalResult, MetricSummary  # noqa: F401

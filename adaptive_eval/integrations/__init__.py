"""Drop-in adapters for the trainers people already run: one module per framework.

* :mod:`adaptive_eval.integrations.hf`: ``AdaptiveEvalCallback`` for a Hugging Face ``Trainer`` (and TRL's
  trainers, which are ``Trainer`` subclasses); needs ``pip install 'adaptive-eval[integrations]'``.
* :mod:`adaptive_eval.integrations.lightning`: ``AdaptiveEvalCallback`` for a Lightning ``Trainer``;
  needs the same extra.
* :mod:`adaptive_eval.integrations.areal`: AReaL's ``Evaluator(config, ft_spec)`` constructor for the plain
  and the adaptive evaluator, ``patch_areal(preset)`` and a rollout ``evaluate_fn``; imports nothing from AReaL.

Importing this package imports no framework: each module is loaded on first attribute access (as
``optuna.integration`` does), and a missing framework is a ``ModuleNotFoundError`` naming the extra.
"""

from __future__ import annotations

import importlib

__all__ = ["areal", "hf", "lightning"]


def __getattr__(name: str):
    if name in __all__:
        module = importlib.import_module(f"{__name__}.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)

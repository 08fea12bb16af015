"""The tasks of ``adaptive-eval demo`` (``--task``), one module each: ``rlvr`` (the default: GRPO on
addition, see :mod:`adaptive_eval.demos.rlvr`) and ``digits`` (an MLP on handwritten digits)."""

from __future__ import annotations

__all__ = ["DEFAULT_TASK", "TASKS", "DemoError"]

TASKS = ("rlvr", "digits")
DEFAULT_TASK = "rlvr"


class DemoError(ValueError):
    """The demo cannot run as asked (an output folder that cannot be written, a bad setting)."""

"""The tasks of ``adaptive-eval demo`` (``--task``), one module each: ``rlvr`` (GRPO on addition) and ``digits`` (an MLP on handwritten digits)."""

from __future__ import annotations

__all__ = ["DEFAULT_TASK", "TASKS", "DemoError"]

TASKS = ("rlvr", "digits")
DEFAULT_TASK = "digits"


class DemoError(ValueError):
    """The demo cannot run as asked (an output folder that cannot be written, a bad setting)."""

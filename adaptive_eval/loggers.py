"""Metric loggers: one tiny interface (``log``, ``text``, ``close``); ranks that must not write get
:class:`NullLogger`.  TensorBoard is imported only when a TensorBoard logger is made."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["MetricLogger", "NullLogger"]


class MetricLogger:
    """The interface every logger has.  Subclasses override what they support."""

    def log(self, step: int, scalars: Mapping[str, float]) -> None:
        """Record scalars (tag -> value) at a training step."""

    def text(self, step: int, tag: str, text: str) -> None:
        """Record a text marker (a decision's reason, an alarm's message)."""

    def log_config(self, config_yaml: str) -> None:
        """Record the resolved configuration (YAML text)."""

    def flush(self) -> None:
        """Write everything buffered so far."""

    def close(self) -> None:
        """Flush and release; logging after close is a no-op."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class NullLogger(MetricLogger):
    """Logs nothing: the logger of ranks other than 0, and the default."""

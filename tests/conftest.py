import os
import pathlib

import pytest

from adaptive_eval.loggers import MetricLogger

REPO = pathlib.Path(__file__).resolve().parent.parent
# The real recorded traces ship inside the repository (traces/, installed as adaptive_eval.traces).
TRACES = pathlib.Path(os.environ.get("ADAPTIVE_EVAL_TRACES", REPO / "traces"))


class RecordingLogger(MetricLogger):
    """A logger that keeps what it was given, for tests to look at."""

    def __init__(self):
        self.scalars, self.texts = [], []

    def log(self, step, scalars):
        self.scalars.append((step, dict(scalars)))

    def text(self, step, tag, text):
        self.texts.append((step, tag, text))

    def last(self, tag):
        return [(s, d[tag]) for s, d in self.scalars if tag in d][-1]


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self, t: float = 0.0):
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        self.t += dt


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def traces_dir():
    assert TRACES.is_dir(), f"recorded traces not found at {TRACES}"
    return TRACES

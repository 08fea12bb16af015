import os
import pathlib

import pytest

from adaptive_eval.loggers import MetricLogger

REPO = pathlib.Path(__file__).resolve().parent.parent
# The recorded traces live beside the checkout (../shared/traces); CI lays them there too.
TRACES = pathlib.Path(os.environ.get("ADAPTIVE_EVAL_TRACES", REPO.parent / "shared" / "traces"))


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
    if not TRACES.is_dir():
        pytest.skip(f"recorded traces not found at {TRACES}")
    return TRACES

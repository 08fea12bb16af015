import concurrent.futures as cf
import os
import pathlib

import pytest
from hypothesis import settings

from adaptive_eval.loggers import MetricLogger

if os.environ.get("PYTEST_XDIST_WORKER"):  # (pytest -n 2 on two cores: one torch thread per worker, not two each)
    os.environ.setdefault("OMP_NUM_THREADS", "1")

# Property tests draw the same examples on every run (CI found a new one at random and went red on a change that
# had passed here); explore further by hand with `pytest --hypothesis-profile=default --hypothesis-seed=N`.
settings.register_profile("deterministic", derandomize=True)
settings.load_profile("deterministic")

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


def decisions(events):
    """An evaluator's listener events as comparable plain values: each result as a dict, without its seconds
    (real time when the evaluation ran in a thread or on another rank)."""
    out = []
    for e in events:
        e = dict(e)
        if "result" in e:
            d = e.pop("result").to_dict()
            d.pop("seconds")
            e["result"] = d
        out.append(e)
    return out


class DeferredExecutor(cf.Executor):
    """A real ``concurrent.futures.Executor`` whose calls run only when their result is asked for, in the
    asking thread: an asynchronous evaluation then runs at its integration, steps after its submission, so
    it sees the weights of its own step only if it was given a snapshot of them (deterministically)."""

    def submit(self, fn, /, *args, **kwargs):
        return _DeferredFuture(fn, args, kwargs)


class _DeferredFuture(cf.Future):
    def __init__(self, fn, args, kwargs):
        super().__init__()
        self._call = (fn, args, kwargs)

    def result(self, timeout=None):
        call, self._call = self._call, None
        if call is not None and self.set_running_or_notify_cancel():
            fn, args, kwargs = call
            try:
                self.set_result(fn(*args, **kwargs))
            except BaseException as exc:  # noqa: BLE001 - handed over through the future
                self.set_exception(exc)
        return super().result(timeout)


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def traces_dir():
    assert TRACES.is_dir(), f"recorded traces not found at {TRACES}"
    return TRACES


def step_one_after_step_three(fails: bool = False):
    """An ``evaluate_fn`` whose evaluation of step 1 finishes only after step 3's (two asynchronous results then
    integrated at one step); ``fails``: step 3's raises."""
    import threading

    three = threading.Event()

    def evaluate_fn(request):
        if request.step == 1:
            assert three.wait(30)
        if request.step == 3:
            three.set()
            if fails:
                raise RuntimeError("grader down")
        return {"acc": [1.0, 0.0, 1.0]}

    return evaluate_fn

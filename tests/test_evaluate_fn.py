"""How ``evaluate_fn`` is called: by its signature, without keeping the callables it sees alive."""

import functools
import gc
import weakref

import numpy as np
import pytest

from adaptive_eval import AdaptiveEvaluator, EvalRequest, Evaluator, load_config
from adaptive_eval.evaluators import call_evaluate_fn

REQUEST = EvalRequest(step=0, sample_size=None, seed=0, reason="test")


class Checkpoint:
    """Stands for a model's weights: big, and to be freed once training moves on."""

    def __init__(self):
        self.weights = np.zeros(1000)


def run_eval(request, model):
    return {"acc": [1.0] * len(request.indices(10))}


def test_a_fresh_partial_per_step_does_not_keep_its_checkpoint_alive():
    for ev in (Evaluator(load_config(overrides=["trigger.freq_steps=1"])),
               AdaptiveEvaluator.from_config(load_config(overrides=["trigger.freq_steps=1"]))):
        alive, evaluated = [], 0
        for g in range(80):
            ckpt = Checkpoint()
            alive.append(weakref.ref(ckpt))
            evaluated += ev.evaluate(functools.partial(run_eval, model=ckpt), 0, g, g) is not None
            del ckpt
        gc.collect()
        assert evaluated > 10 and all(r() is None for r in alive)


def test_a_function_per_step_closing_over_its_checkpoint_is_freed():
    ev = Evaluator(load_config(overrides=["trigger.freq_steps=1"]))
    alive = []
    for g in range(80):
        ckpt = Checkpoint()
        alive.append(weakref.ref(ckpt))

        def evaluate_fn(request, model=ckpt):
            return {"acc": 1.0}

        ev.evaluate(evaluate_fn, 0, g, g)
        del ckpt, evaluate_fn
    gc.collect()
    assert all(r() is None for r in alive)


def test_only_positional_parameters_without_defaults_take_the_request():
    seen = []

    def areal_style(verbose=False):
        seen.append(("areal", verbose))

    def wants(request):
        seen.append(("request", request.step))

    def wants_with_options(request, verbose=False):
        seen.append(("request+", request.step))

    def keyword_only(*, verbose=False):
        seen.append(("kw", verbose))

    def star_args(*args):
        seen.append(("args", len(args)))

    class Model:
        def evaluate(self, verbose=False):
            seen.append(("method", verbose))

        def evaluate_request(self, request):
            seen.append(("method+", request.step))

        def __call__(self, request):
            seen.append(("call", request.step))

    m = Model()
    for fn in (areal_style, wants, wants_with_options, keyword_only, star_args, m.evaluate, m.evaluate_request, m,
               functools.partial(wants_with_options, verbose=True), functools.partial(run_eval, model=None)):
        call_evaluate_fn(fn, REQUEST)
    assert seen == [("areal", False), ("request", 0), ("request+", 0), ("kw", False), ("args", 1),
                    ("method", False), ("method+", 0), ("call", 0), ("request+", 0)]
    # the same function again gives the same answer (cached) and a changed default count is seen
    call_evaluate_fn(areal_style, REQUEST)
    assert seen[-1] == ("areal", False)


def test_a_parameter_named_request_or_annotated_evalrequest_takes_it_though_it_has_a_default():
    """A new user's probe: ``def evaluate_fn(request=None)`` was called with no argument, and every evaluation failed
    on ``None.indices`` (AttributeError), with nothing pointing at the default."""
    seen = []

    def named(request=None):
        seen.append(("named", request.sample_size))

    def typed(req: EvalRequest | None = None):
        seen.append(("typed", req.sample_size))

    def typed_as_text(req: "Optional[EvalRequest]" = None):  # noqa: F821 - (a string annotation is not evaluated)
        seen.append(("text", req.sample_size))

    def as_union(req: "typing.Union[EvalRequest, None]" = None):  # noqa: F821
        seen.append(("union", req.sample_size))

    def other(verbose=None):  # AReaL style: no argument
        seen.append(("other", verbose))

    for fn in (named, typed, typed_as_text, as_union, other):
        call_evaluate_fn(fn, REQUEST)
    assert seen == [("named", REQUEST.sample_size), ("typed", REQUEST.sample_size), ("text", REQUEST.sample_size),
                    ("union", REQUEST.sample_size), ("other", None)]
    ev = AdaptiveEvaluator.from_config(load_config(overrides=["trigger.freq_steps=1", "policy.budget.enabled=false"]))
    result = ev.evaluate(lambda request=None: {"acc": [1.0] * len(request.indices(10))}, 0, 0, 0)
    ev.close()
    assert result is not None and ev.summary()["eval_errors"] == 0


def test_an_async_evaluate_fn_is_run_to_its_result_on_one_loop_and_inside_a_running_loop_too():
    """An async inference engine's client: an `async def evaluate_fn` failed every evaluation ("must return a
    mapping ..., got coroutine", with a never-awaited warning).  It is run to its result: on one event loop of this
    thread from one evaluation to the next (a client or lock it keeps stays on its loop), and from inside a running
    loop (a notebook cell) on a helper thread's; its exception is a failed evaluation like any other."""
    import asyncio

    from adaptive_eval import AdaptiveEvaluator, load_config

    ev = AdaptiveEvaluator.from_config(load_config("areal", ["trigger.freq_steps=1"]))
    loops = []

    async def fn(request):
        loops.append(asyncio.get_running_loop())
        await asyncio.sleep(0)
        return {"acc": [1.0, 0.0, 1.0, 1.0]}

    results = [ev.evaluate(fn, 0, g, g) for g in range(3)]
    assert [r["acc"].mean for r in results] == [0.75] * 3 and len(set(map(id, loops))) == 1

    async def cell():
        return ev.evaluate(fn, 0, 3, 3)

    assert asyncio.run(cell())["acc"].n == 4

    async def broken(request):
        raise ValueError("the engine is down")

    assert ev.evaluate(broken, 0, 4, 4) is None and ev.summary()["eval_errors"] == 1
    # one loop for every thread (a new user's probe: each thread's own loop failed a lock kept from the first, and
    # hung a client's worker task): from inside the running loop above too, and an asynchronous evaluation's worker
    assert len(set(map(id, loops))) == 1
    pool = AdaptiveEvaluator.from_config(load_config("areal", ["trigger.freq_steps=1", "evaluation.asynchronous=true",
                                                               "evaluation.async_integrate_after_steps=1"]))
    for g in range(4):
        pool.evaluate(fn, 0, g, g)
    pool.close()
    assert len(pool.history) == 4 and len(set(map(id, loops))) == 1

    # evaluation.timeout_s, and a Ctrl-C in the wait: the coroutine is cancelled (it went on, and every later
    # evaluation waited for it, or it resumed inside the next one)
    cancelled = []

    async def slow(request):
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(request.step)
            raise
        return {"acc": [1.0]}

    bounded = AdaptiveEvaluator.from_config(load_config("areal", ["trigger.freq_steps=1", "evaluation.timeout_s=0.2"]))
    assert bounded.evaluate(slow, 0, 0, 0) is None and bounded.evaluate(fn, 0, 1, 1)["acc"].n == 4
    assert bounded.summary()["deferrals"] == 0 and cancelled == [0]
    import threading

    import os
    import signal

    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))  # (a Ctrl-C, as a terminal sends it)
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        ev.evaluate(slow, 0, 5, 5)
    for _ in range(100):
        if cancelled == [0, 5]:
            break
        threading.Event().wait(0.02)
    assert cancelled == [0, 5]


def test_a_masked_arrays_masked_values_are_skipped_samples_in_mean_n_and_interval_alike():
    """evaluate_fn returned a numpy masked array (items that could not be scored masked out): its mean left them out,
    its n and interval did not, so the interval (0.15, 0.85) excluded the mean 1.0 (a new user's probe)."""
    ev = AdaptiveEvaluator(load_config(overrides=["trigger.freq_steps=1", "policy.budget.enabled=false"]),
                           total_steps=1)
    values = np.ma.masked_array([1.0, 1.0, 0.0, 0.0], mask=[0, 0, 1, 1])
    m = ev.evaluate(lambda request: {"acc": values}, 0, 0, 0).metrics["acc"]
    assert (m.mean, m.n, m.nan_count) == (1.0, 2, 2) and m.ci[0] <= m.mean <= m.ci[1]
    from adaptive_eval.stats import float_array

    with pytest.raises(TypeError, match="text"):  # (masked text is text, refused as a plain array's: a review)
        float_array(np.ma.array(["42", "17", "3"], mask=[0, 0, 1]))


def test_answers_flattened_into_one_row_each_are_said_to_go_items_x_answers():
    """50 items x 4 answers returned flat, 200 rows: "item index 199 is beyond the request", which is a row, and no
    word of the items x answers shape the README asks for (a new user's probe)."""
    cfg = load_config(overrides=["trigger.freq_steps=1", "policy.budget.enabled=false",
                                 "evaluation.suites={math: {size: 50, samples_per_item: 4, sample_size: 50}}"])
    ev = AdaptiveEvaluator(cfg, total_steps=1)
    errors = []
    ev.add_listener(lambda e: e["kind"] == "error" and errors.append(e["error"]))
    ev.evaluate(lambda r: {"math/acc": [1.0] * (len(r.suites["math"].indices) * 4)}, 0, 0, 0)
    assert errors and "200 = 50 x 4: answers flattened into one row each? return them items x answers" in errors[0]


def test_rows_for_a_suite_request_of_no_items_are_a_value_error_not_a_division_by_zero():
    """(A review.)  The flattened-answers hint divided by the items requested: 0 of them raised ZeroDivisionError."""
    from adaptive_eval.stats import summarize_outputs

    with pytest.raises(ValueError, match="2 rows of per-item values for the 0 items requested"):
        summarize_outputs({"s/acc": [1.0, 0.0]}, None, suites={"s": []})


def test_an_empty_metric_name_and_a_complex_tensor_are_refused_naming_them():
    """(A new user's probe.)  A metric named '' was taken, though observe() refuses such a name; a torch complex tensor
    kept its real part without a word (a Python complex was refused)."""
    import torch

    from adaptive_eval.stats import metric_values, summarize_outputs

    with pytest.raises(TypeError, match="metric names must be non-empty strings, got ''"):
        summarize_outputs({"": [1.0]}, None)
    with pytest.raises(TypeError, match="metric 'x': a complex tensor is not a score"):
        metric_values("x", torch.tensor([1 + 2j, 3j]))

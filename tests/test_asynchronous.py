"""Asynchronous evaluation in one process: submission, integration, weights of the step, full, faults, resume."""

import concurrent.futures as cf
import json
import logging
import math
import multiprocessing
import threading
import time

import pytest
import torch

from adaptive_eval import AdaptiveEvaluator, load_config
from adaptive_eval.asynchronous import (
    DaemonThreadExecutor,
    InlineExecutor,
    SnapshotEval,
    SnapshotMutated,
    snapshot_weights,
)
from adaptive_eval.config import ConfigError
from conftest import FakeClock, RecordingLogger, decisions


def cfg(*extra):
    return load_config(overrides=["evaluation.asynchronous=true", "trigger.freq_steps=5", *extra])


def weight_sum_fn(request, weights):
    """A deterministic evaluation of the weights it is given: every item scores the weights' sum."""
    value = float(sum(t.double().sum() for t in weights.values()))
    return {"score": [value] * 8}


def stream(g):
    # A level shift at step 40 (a cusum alarm), a NaN at step 70 (an urgent nonfinite alarm).
    if g == 70:
        return math.nan
    return (1.0 if g < 40 else 4.0) + 0.05 * ((g * 7919) % 11 - 5)


def train(ev, model, steps, fn=weight_sum_fn, start=0):
    """A training loop that changes the weights every step; returns what evaluate returned, by step."""
    got = {}
    for g in range(start, steps):
        ev.observe({"train/loss": stream(g)}, g)
        r = ev.evaluate(SnapshotEval(model, fn), 0, g, g)
        if r is not None:
            got[g] = r
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.01 * (g + 1))
    return got


def make(cfg_, executor=None, **kw):
    ev = AdaptiveEvaluator.from_config(cfg_, total_steps=kw.pop("total_steps", 100),
                                       clock=kw.pop("clock", FakeClock()), eval_clock=lambda: 0.0,
                                       executor=executor, **kw)
    events = []
    ev.add_listener(events.append)
    return ev, events


def model_at(step, seed=0):
    """The model's weights after training steps 0..step-1 of ``train``."""
    torch.manual_seed(seed)
    m = torch.nn.Linear(3, 2)
    with torch.no_grad():
        for g in range(step):
            for p in m.parameters():
                p.add_(0.01 * (g + 1))
    return m


def test_a_due_evaluation_is_submitted_and_integrated_L_steps_later_on_the_weights_of_its_step():
    ev, events = make(cfg("evaluation.async_integrate_after_steps=3", "policy.budget.enabled=false"))
    got = train(ev, model_at(0), 30)
    ev.close()
    submitted = [e["step"] for e in events if e["kind"] == "submitted"]
    assert submitted[0] == 4 and len(submitted) >= 3
    for g, r in got.items():
        assert r.integrated_step == g == r.step + 3 and r.submitted_step == r.step
        expected = weight_sum_fn(None, snapshot_weights(model_at(r.step)))["score"][0]
        assert r["score"].mean == pytest.approx(expected, abs=1e-9)  # the weights of its step, not of step g
    assert [r.step for r in ev.history] == [e["step"] for e in events if e["kind"] == "eval"]
    assert submitted == [r.step for r in ev.history]  # close() drained the last one
    line = ev.history[0].to_dict()
    assert line["submitted_step"] == 4 and line["integrated_step"] == 7


def test_thread_runs_with_a_fixed_latency_decide_as_an_inline_run_and_repeat_exactly():
    runs = []
    for executor in (None, InlineExecutor(), cf.ThreadPoolExecutor(2), None):
        ev, events = make(cfg("evaluation.async_integrate_after_steps=4", "evaluation.max_in_flight=2"), executor)
        train(ev, model_at(0), 100)
        ev.close()
        runs.append(decisions(events))
        if isinstance(executor, cf.ThreadPoolExecutor):
            executor.shutdown()
    assert any(e["kind"] == "alarm" for e in runs[0]) and sum(e["kind"] == "eval" for e in runs[0]) >= 8
    assert all(r == runs[0] for r in runs[1:])


def test_without_a_fixed_latency_a_result_joins_at_the_first_observe_after_it_completes():
    release = threading.Event()

    def slow(request, weights):
        assert release.wait(10)
        return weight_sum_fn(request, weights)

    ev, events = make(cfg("policy.budget.enabled=false"))
    model = model_at(0)
    for g in range(8):
        ev.observe({"train/loss": 1.0}, g)
        assert ev.evaluate(SnapshotEval(model, slow), 0, g, g) is None  # step 4 submits and returns at once
    assert [e["kind"] for e in events] == ["submitted"]
    release.set()
    ev._async.jobs[0].future.result(10)
    ev.observe({"train/loss": 1.0}, 8)
    assert [e["kind"] for e in events] == ["submitted", "eval"]
    r = ev.evaluate(SnapshotEval(model, slow), 0, 8, 8)  # and evaluate hands it over
    assert (r.step, r.integrated_step) == (4, 8) and ev.history == [r]
    ev.close()


def test_full_a_due_evaluation_waits_and_an_urgent_one_cancels_the_oldest_non_urgent_one():
    release = threading.Event()

    def blocked(request, weights):
        assert release.wait(10)
        return weight_sum_fn(request, weights)

    logger = RecordingLogger()
    ev, events = make(cfg("policy.budget.enabled=false", "policy.alarm.cooldown_steps=1"), logger=logger)
    model = model_at(0)
    for g in range(12):
        ev.observe({"train/loss": math.nan if g == 11 else 1.0}, g)
        ev.evaluate(SnapshotEval(model, blocked), 0, g, g)
    # the decisions text says so too (it showed step 4's "submitted" and then nothing: a result that never came)
    assert (11, "decisions", "cancelled: the evaluation submitted at step 4 (trigger:steps), to make room for an "
            "urgent one (evaluation.max_in_flight=1)") in logger.texts
    kinds = [(e["kind"], e["step"], e.get("reason")) for e in events if e["kind"] != "alarm"]
    assert kinds[0] == ("submitted", 4, "trigger:steps")
    assert ("deferred", 9, "async:waiting (1 in flight)") in kinds  # due at 9, step 4 still running
    assert ("cancelled", 4, "trigger:steps") in kinds
    assert kinds[-1] == ("submitted", 11, "alarm:train/loss:nonfinite")
    assert [j.step for j in ev._async.jobs] == [11]
    # counted in summary() (only the listener and the decisions text said so) and kept in the state
    assert ev.summary()["cancelled"] == 1  # (state_dict() would wait for the one in flight)
    release.set()
    ev.close()
    assert [r.step for r in ev.history] == [11]  # the cancelled evaluation never counts
    assert ev.summary()["evals"] == 1 and ev.summary()["cancelled"] == 1 and ev.state_dict()["cancelled"] == 1
    again, _ = make(cfg("policy.budget.enabled=false", "policy.alarm.cooldown_steps=1"))
    again.load_state_dict(ev.state_dict())
    assert again.summary()["cancelled"] == 1
    again.close()


def test_an_exception_is_handled_by_on_error_at_the_step_it_is_noticed():
    def boom(request, weights):
        raise ValueError("eval broke")

    ev, events = make(cfg("evaluation.async_integrate_after_steps=2", "evaluation.on_error=skip",
                          "policy.budget.enabled=false"))
    train(ev, model_at(0), 12, boom)
    errors = [e for e in events if e["kind"] == "error"]
    assert [(e["step"], e["integrated_step"]) for e in errors] == [(4, 6), (9, 11)]
    assert "eval broke" in errors[0]["error"] and ev.summary()["eval_errors"] == 2
    ev.close()

    ev, events = make(cfg("evaluation.async_integrate_after_steps=2", "evaluation.on_error=raise"))
    with pytest.raises(ValueError, match="eval broke"):
        train(ev, model_at(0), 12, boom)
    assert ev._last_call_step == 6  # raised where it was noticed, not at submission
    # ... and counted, with its error event, like a skipped one (found by a new-user probe: eval_errors read 0)
    assert ev.summary()["eval_errors"] == 1 and [e["step"] for e in events if e["kind"] == "error"] == [4]


def test_on_error_raise_integrates_the_results_taken_with_the_failed_one_before_raising():
    """Found in review: two evaluations done by the same step are taken off the queue together; the first one's
    raise lost the second (never integrated, never in history)."""
    release = threading.Event()

    def fn(request):
        if request.step == 0:
            release.wait(10)
            raise ValueError("eval broke")
        return {"score": [0.5] * 4}

    pool = cf.ThreadPoolExecutor(2)
    ev, events = make(cfg("evaluation.on_error=raise", "evaluation.max_in_flight=2", "trigger.freq_steps=1",
                          "policy.budget.enabled=false", "policy.interval.enabled=false"), pool)
    ev.observe({"train/loss": 1.0}, 0)
    ev.evaluate(fn, 0, 0, 0)  # step 0's: held until released, then fails
    ev.observe({"train/loss": 1.0}, 1)
    ev.evaluate(fn, 0, 1, 1)  # step 1's: done at once, waits behind step 0's (submission order)
    release.set()
    pool.shutdown(wait=True)  # both done
    ev.observe({"train/loss": 1.0}, 2)  # (integrated here; raised by this step's evaluate(), once it has counted)
    assert [r.step for r in ev.history] == [1] and ev.summary()["eval_errors"] == 1
    with pytest.raises(ValueError, match="eval broke"):
        ev.evaluate(fn, 0, 2, 2)
    assert ev._last_call_step == 2
    assert ev._unreturned.step == 1  # (integrated with it: the next evaluate() returns it; it was lost, a review)
    assert [(e["kind"], e["step"]) for e in events if e["kind"] in ("eval", "error")] == [("error", 0), ("eval", 1)]


def test_on_error_raise_raises_once_the_step_that_notices_it_has_counted_and_decided():
    """An asynchronous probe: the step whose call raised a failure integrated there (on_error: raise) did not count
    for the trigger, so every later evaluation came a step late (20, 30, ... for 19, 29, ...); one integrated at the
    last step lost the final evaluation (after_train() then saw the step as done).  Without a fixed latency the
    failure is integrated by the next observe(), which raised it before the step had counted (a review)."""
    def run(on_error, total, failing, latency=3):
        ev, events = make(load_config(overrides=[
            "evaluation.asynchronous=true", f"evaluation.async_integrate_after_steps={latency}",
            "trigger.freq_steps=10",
            f"evaluation.on_error={on_error}", "policy.interval.enabled=false", "policy.budget.enabled=false",
            "policy.sample_size.enabled=false", "evaluation.sample_size=10"]), total_steps=total,
            executor=InlineExecutor() if latency == "null" else None)
        raised = []

        def fn(request):
            if request.step == failing:
                raise RuntimeError("transient")
            return {"acc": [1.0, 0.0] * 5}

        for g in range(total):
            ev.observe({"loss": 1.0}, g)
            try:
                ev.evaluate(fn, 0, g, g)
            except RuntimeError:
                raised.append(g)
        ev.after_train(fn, total - 1)
        ev.close()
        return [(e["step"], e["reason"]) for e in events if e["kind"] == "submitted"], raised

    for total, failing, latency in ((60, 9, 3), (53, 49, 3), (60, 9, "null"), (11, 9, "null")):
        skipped, none = run("skip", total, failing, latency)  # (53, 11: the failure noticed at the last step)
        submitted, raised = run("raise", total, failing, latency)
        assert none == [] and raised == [failing + (3 if latency == 3 else 1)] and submitted == skipped
        assert skipped[0] == (9, "trigger:steps") and skipped[-1] == (total - 1, "trigger:final")


def test_a_failure_the_last_steps_observe_integrates_is_raised_by_after_train_or_close_not_over_another():
    """A review: HF's order (on_step_end's evaluate(), then on_log's observe()) integrated the failed final evaluation
    in the last observe(), which left it to an evaluate() that never came: on_error: raise raised nothing."""
    def run(end):
        ev, _ = make(load_config(overrides=[
            "evaluation.asynchronous=true", "evaluation.async_integrate_after_steps=null", "trigger.freq_steps=5",
            "evaluation.on_error=raise", "policy.interval.enabled=false", "policy.budget.enabled=false",
            "policy.sample_size.enabled=false", "evaluation.sample_size=10"]), total_steps=12,
            executor=InlineExecutor())

        def fn(request):
            if request.step == 11:
                raise RuntimeError("eval of step 11 broke")
            return {"acc": [1.0, 0.0] * 5}

        for g in range(12):
            ev.evaluate(fn, 0, g, g)
            ev.observe({"loss": 1.0}, g)  # (the final evaluation's failure integrated here, at step 11)
        end(ev, fn)
        return ev

    with pytest.raises(RuntimeError, match="step 11 broke"):
        run(lambda ev, fn: ev.after_train(fn, 11))
    with pytest.raises(RuntimeError, match="step 11 broke"):
        run(lambda ev, fn: ev.close())

    def loop_failed(ev, fn):
        try:
            raise KeyError("the training loop's own")
        finally:
            ev.close()  # (the evaluation's error, logged, does not take the place of the loop's)

    with pytest.raises(KeyError, match="the training loop's own"):
        run(loop_failed)


def test_the_final_evaluations_failure_close_drains_is_raised_under_on_error_raise_once_everything_is_closed(
        tmp_path):
    """A new user's probe: with on_error: raise, a synchronous run raised its final evaluation's failure, and an
    asynchronous one, whose final evaluation close() waits for, ended without a word (close() never raised)."""
    ev, events = make(load_config(overrides=[
        "evaluation.asynchronous=true", "evaluation.async_integrate_after_steps=3", "trigger.freq_steps=5",
        "evaluation.on_error=raise", "policy.budget.enabled=false", f"logging.tensorboard_dir={tmp_path}"]),
        total_steps=20)

    def fn(request):
        if request.reason.startswith("trigger:final"):
            raise ConnectionError("the grader is down for the final evaluation")
        return {"acc": [1.0, 0.0] * 5}

    for g in range(20):
        ev.observe({"loss": 1.0}, g)
        ev.evaluate(fn, 0, g, g)  # (the final evaluation's failure is not due before close())
    with pytest.raises(ConnectionError, match="grader is down"):
        ev.close()
    assert ev.logger.closed and ev.summary()["eval_errors"] == 1  # closed first: its logs are all written
    assert [e["step"] for e in events if e["kind"] == "error"] == [19]
    from adaptive_eval.tensorboard import read_texts

    failed = [t for _, t in read_texts(tmp_path, "decisions") if t.startswith("failed: ")]
    assert len(failed) == 1 and failed[0].startswith("failed: evaluation of step 19 (trigger:final, n=") and \
        failed[0].endswith(" asked; ConnectionError: the grader is down for the final evaluation)"), failed


def test_close_while_the_training_steps_exception_goes_up_waits_briefly_for_an_evaluation_in_flight(monkeypatch,
                                                                                                     caplog):
    """A new user's probe: a crash in the training step inside ``with AdaptiveEvaluator(...)`` (or before a
    ``finally: close()``) showed only once the evaluation in flight was done, up to 600 s later."""
    import adaptive_eval.adaptive as adaptive_module

    monkeypatch.setattr(adaptive_module, "EXCEPTION_DRAIN_S", 0.2)
    release = threading.Event()

    def hung(request):
        release.wait(30)
        return {"acc": [1.0]}

    ev, events = make(cfg("policy.budget.enabled=false"))
    with pytest.raises(KeyError, match="the training step's own"), ev:
        for g in range(10):
            ev.observe({"loss": 1.0}, g)
            ev.evaluate(hung, 0, g, g)
        raise KeyError("the training step's own")
    release.set()
    errors = [e["error"] for e in events if e["kind"] == "error"]
    assert len(errors) == 1 and "close()'s wait (0.2 s in all)" in errors[0], errors
    assert "leaving the evaluator's `with` block on KeyError: close() waits at most 0.2 s" in caplog.text
    # A close() in an `except` block that handled its exception (a graceful Ctrl-C) waits as ever: sys.exc_info()
    # looks the same there, and what was in flight was lost (a review).
    ev, events = make(cfg("policy.budget.enabled=false"))
    slow = threading.Event()

    def late(request):
        slow.wait(0.5)
        return {"acc": [1.0]}

    for g in range(6):
        ev.observe({"loss": 1.0}, g)
        ev.evaluate(late, 0, g, g)
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt:
        ev.close()
    assert not [e for e in events if e["kind"] == "error"] and ev.history


def test_a_failure_of_the_steps_own_submission_is_not_masked_nor_read_as_lost():
    """A review: the evaluation's error raised at the end of the step replaced the step's own exception (a Ctrl-C in
    the snapshot came up as the earlier evaluation's RuntimeError); a snapshot that failed left its job without a
    future, later a failed evaluation "in flight when the state was saved"; now it is that evaluation's failure."""
    class Snap(SnapshotEval):
        def snapshot(self, step=None):
            if step == 5:
                raise self.exc
            return super().snapshot(step)

    def fn(request, weights):
        if request.step == 2:
            raise RuntimeError("evaluation of step 2 failed")
        return {"acc": [1.0, 0.0] * 5}

    for exc in (KeyboardInterrupt(), MemoryError("out of memory while copying the weights")):
        ev, events = make(load_config(overrides=[
            "evaluation.asynchronous=true", "evaluation.async_integrate_after_steps=3", "trigger.freq_steps=3",
            "evaluation.on_error=raise", "policy.interval.enabled=false", "policy.budget.enabled=false",
            "policy.sample_size.enabled=false", "evaluation.sample_size=10"]), total_steps=40)
        snap = Snap(torch.nn.Linear(3, 2), fn)
        snap.exc = exc
        for g in range(5):
            ev.observe({"loss": 1.0}, g)
            ev.evaluate(snap, 0, g, g)
        ev.observe({"loss": 1.0}, 5)
        with pytest.raises(type(exc) if isinstance(exc, KeyboardInterrupt) else RuntimeError) as got:
            ev.evaluate(snap, 0, 5, 5)  # step 2's failure integrated here, step 5's snapshot failing
        assert isinstance(exc, KeyboardInterrupt) or "evaluation of step 2 failed" in str(got.value)
        if isinstance(exc, KeyboardInterrupt):
            ev.close()
        else:  # (step 5's failure, integrated by close()'s drain, is raised there: on_error: raise)
            with pytest.raises(MemoryError, match="out of memory"):
                ev.close()
        errors = {e["step"]: e["error"] for e in events if e["kind"] == "error"}
        if isinstance(exc, KeyboardInterrupt):  # (the user's: nothing started, nothing counted)
            assert set(errors) == {2}
        else:
            assert set(errors) == {2, 5} and "lost" not in errors[5] and "out of memory" in errors[5]


def test_a_state_saved_after_the_runner_broke_resumes_into_an_evaluator_that_evaluates():
    """An asynchronous probe: whether the runner is down (the evaluator closed, the executor shut down) travelled in
    the state, so the new evaluator the message tells one to build, loading it, never evaluated again."""
    for broken in ("closed", "executor"):
        pool = cf.ThreadPoolExecutor(1)
        ev, _ = make(cfg("evaluation.async_integrate_after_steps=1", "policy.budget.enabled=false"), pool)
        train(ev, model_at(0), 6)
        pool.shutdown() if broken == "executor" else ev.close()
        train(ev, model_at(6), 20, start=6)  # (a due evaluation finds the runner down)
        assert ev._async.is_down
        state = json.loads(json.dumps(ev.state_dict()))
        resumed, events = make(cfg("evaluation.async_integrate_after_steps=1", "policy.budget.enabled=false"))
        resumed.load_state_dict(state)
        train(resumed, model_at(20), 40, start=20)
        resumed.close()
        assert len([e for e in events if e["kind"] == "eval"]) >= 3, broken  # (none before)
        assert not [e for e in events if e["kind"] == "async_down"], broken


def test_a_run_resumed_in_a_deferral_writes_the_decisions_text_of_the_one_that_never_stopped():
    """An asynchronous probe: the deferral logged and still going on was not in the state, so the resumed run wrote
    "deferred: async:waiting ..." again, and its next evaluation read "deferred since" the resume's step."""
    def new_run(logger):
        return make(cfg("evaluation.async_integrate_after_steps=15", "policy.budget.enabled=false"), logger=logger)

    whole = RecordingLogger()
    ev, _ = new_run(whole)
    train(ev, model_at(0), 60)
    ev.close()
    first = RecordingLogger()
    ev, _ = new_run(first)
    train(ev, model_at(0), 15)  # (deferred since step 9, until step 19)
    state = json.loads(json.dumps(ev.state_dict()))
    second = RecordingLogger()
    resumed, _ = new_run(second)
    resumed.load_state_dict(state)
    train(resumed, model_at(15), 60, start=15)
    resumed.close()
    texts = [t for t in whole.texts if t[1] == "decisions"]
    assert (9, "decisions", "deferred: async:waiting (1 in flight) (was trigger:steps)") in texts
    assert [t for t in second.texts if t[1] == "decisions"] == [t for t in texts if t[0] >= 15]


def test_an_injected_clock_without_an_eval_clock_under_a_device_budget_is_said(caplog):
    """An asynchronous probe: the evaluation's thread read the injected clock while the loop moved it, and two runs of
    one seed with a fixed latency decided differently under policy.budget.max_eval_device_fraction."""
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        AdaptiveEvaluator.from_config(cfg("policy.budget.max_eval_device_fraction=0.05"), clock=FakeClock()).close()
        AdaptiveEvaluator.from_config(cfg(), clock=FakeClock()).close()  # (at the default 1 too: a probe)
        AdaptiveEvaluator.from_config(cfg("policy.budget.enabled=false"), clock=FakeClock()).close()  # (no budget)
        AdaptiveEvaluator.from_config(cfg("policy.budget.max_eval_device_fraction=0.05"), clock=FakeClock(),
                                      eval_clock=lambda: 0.0).close()
    said = [r.getMessage() for r in caplog.records if "eval_clock" in r.getMessage()]
    assert len(said) == 2 and "max_eval_device_fraction (0.05)" in said[0] and "(1)" in said[1]
    # an executor not known to run in this process does not get the eval_clock: said (it was left out unsaid, and
    # the decisions followed real time; a resume probe with a wrapper around a thread pool)

    class Wrapper(cf.Executor):
        def __init__(self):
            self.pool = cf.ThreadPoolExecutor(1)

        def submit(self, fn, *args, **kwargs):
            return self.pool.submit(fn, *args, **kwargs)

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        for executor in (Wrapper(), cf.ThreadPoolExecutor(1)):
            AdaptiveEvaluator.from_config(cfg(), clock=FakeClock(), eval_clock=lambda: 0.0, executor=executor).close()
    said = [r.getMessage() for r in caplog.records if "eval_clock" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("eval_clock= is not passed to a Wrapper: only InlineExecutor, "
                                                 "DaemonThreadExecutor, ThreadPoolExecutor are known")


def test_evaluation_timeout_counts_from_submission_and_is_an_error_when_noticed():
    clock = FakeClock()
    release = threading.Event()

    def hung(request, weights):
        release.wait(10)
        return {"score": [1.0]}

    ev, events = make(cfg("evaluation.timeout_s=30", "policy.budget.enabled=false"), clock=clock)
    ev._async.timer = clock  # (real seconds by default: this test moves them by hand)
    model = model_at(0)
    for g in range(10):
        clock.advance(10.0)
        ev.observe({"train/loss": 1.0}, g)
        ev.evaluate(SnapshotEval(model, hung), 0, g, g)
    errors = [e for e in events if e["kind"] == "error"]
    assert [(e["step"], e["integrated_step"]) for e in errors] == [(4, 8)]  # 40 s after submission > 30 s
    # the configured value, not the time left of it when noticed (it said 'evaluation.timeout_s (0 s)')
    assert errors[0]["error"] == ("TimeoutError: the asynchronous evaluation of step 4 did not finish within "
                                  "evaluation.timeout_s (30 s)")
    release.set()
    ev.close()


def test_evaluation_timeout_counts_real_seconds_not_the_injected_clock_the_loop_moves():
    """The timeout read clock=, which the loop moved 60 s a step: at the step its result was due, an evaluation of a
    moment was past a timeout of 120 s, and failed when its thread was slower than the loop's three steps, not when
    quicker (a new user's probe).  A synchronous evaluation's timeout counts real seconds; so does this."""
    clock = FakeClock()
    started = threading.Event()

    def slow(request, weights):
        started.set()
        time.sleep(0.3)  # still running when the loop reaches the step its result is due at
        return {"score": [1.0]}

    ev, events = make(cfg("evaluation.timeout_s=120", "evaluation.async_integrate_after_steps=3",
                          "policy.budget.enabled=false"), clock=clock)
    model = model_at(0)
    for g in range(10):
        clock.advance(60.0)
        ev.observe({"train/loss": 1.0}, g)
        ev.evaluate(SnapshotEval(model, slow), 0, g, g)
        if g == 4:
            assert started.wait(10)
    ev.close()
    assert not [e for e in events if e["kind"] == "error"]
    assert [(e["step"], e["integrated_step"]) for e in events if e["kind"] == "eval"][:1] == [(4, 7)]


def test_a_run_resumed_with_evaluations_in_flight_decides_exactly_as_the_one_that_never_stopped():
    overrides = ("evaluation.async_integrate_after_steps=3", "evaluation.max_in_flight=2")
    ev, full = make(cfg(*overrides))
    train(ev, model_at(0), 100)
    ev.close()

    ev, before = make(cfg(*overrides))
    train(ev, model_at(0), 47)
    assert ev._async.jobs, "the state must be taken with an evaluation in flight"
    state = json.loads(json.dumps(ev.state_dict()))
    ev2, after = make(cfg(*overrides))
    ev2.load_state_dict(state)
    train(ev2, model_at(47), 100, start=47)
    ev2.close()
    assert decisions(before + after) == decisions(full)


class _GraderDown(Exception):
    """A user's own exception type (a module-level one: a resumed run can name it again)."""


@pytest.mark.parametrize("error", [ValueError, _GraderDown, KeyError])
def test_a_failed_evaluation_in_flight_at_a_save_raises_after_the_resume_what_it_raises_without_one(error):
    """Found by a new user: it came back as RemoteEvaluationError('ValueError before the resume: ...'), so a
    loop's `except ValueError` around `evaluate` with on_error: raise stopped catching it after a resume, and
    each further save and load while it was in flight nested the prefix again."""
    over = ("evaluation.async_integrate_after_steps=3", "evaluation.on_error=raise", "policy.budget.enabled=false")

    def fails(request, weights):
        raise error(f"grader down at step {request.step}")

    def run(cuts):
        ev, _ = make(cfg(*over))
        step = 0
        try:
            while step < 12:
                train(ev, model_at(step), step + 1, fails, start=step)
                step += 1
                if step in cuts:
                    state = json.loads(json.dumps(ev.state_dict(), allow_nan=False))
                    ev, _ = make(cfg(*over))
                    ev.load_state_dict(state)
                    assert ev.state_dict() == state
        except Exception as exc:  # noqa: BLE001 - what the training loop sees
            return step, type(exc), str(exc)
        return None

    raised = run(())
    assert raised is not None and raised[1] is error
    assert run({5, 6, 7}) == raised  # saved and loaded three times with it in flight


def test_a_result_integrated_in_observe_is_returned_by_the_resumed_evaluate():
    """Found by a new user: without a fixed latency a finished result is integrated in observe() and returned by
    the evaluate() after it; a state saved between the two (a trainer that saves after logging) did not hold it,
    and the resumed evaluate() returned None: a loop that logs what evaluate returns lost that evaluation."""
    def run(cut):
        ev, _ = make(cfg("policy.budget.enabled=false"), executor=InlineExecutor())
        returned = []
        for g in range(8):
            ev.observe({"train/loss": stream(g)}, g)
            if g == cut:
                state = json.loads(json.dumps(ev.state_dict(), allow_nan=False))
                ev, _ = make(cfg("policy.budget.enabled=false"), executor=InlineExecutor())
                ev.load_state_dict(state)
            r = ev.evaluate(lambda request: {"score": [1.0, 0.0]}, 0, g, g)
            if r is not None:
                returned.append((g, r.step))
        return returned

    full = run(None)
    assert full == [(5, 4)]  # (submitted at 4, integrated in observe at 5)
    assert run(5) == full


@pytest.mark.parametrize("latency,integrated", [(3, 7), (None, 6)])
def test_an_evaluation_lost_at_the_save_is_a_failed_evaluation_after_the_resume(latency, integrated):
    """With a fixed latency, at its due step; without one (the default), at once: it used to hold its slot
    for good (no timeout_s to end it), and the resumed run never evaluated again."""
    hold = threading.Event()

    def stuck(request, weights):
        hold.wait(10)
        return {"score": [1.0]}

    over = ["policy.budget.enabled=false", *([f"evaluation.async_integrate_after_steps={latency}"] if latency else [])]
    ev, _ = make(cfg(*over))
    train(ev, model_at(0), 6, stuck)
    state = ev._async.state_dict(drain_timeout_s=0.0)  # what a save gets when the wait runs out
    assert state["jobs"][0]["outcome"] is None
    ev._async.state_dict = lambda drain_timeout_s=None: state
    sd = ev.state_dict()
    hold.set()
    ev2, events = make(cfg(*over), executor=InlineExecutor())
    ev2.load_state_dict(json.loads(json.dumps(sd)))
    train(ev2, model_at(6), 12, stuck, start=6)
    errors = [e for e in events if e["kind"] == "error"]
    assert [(e["step"], e["integrated_step"]) for e in errors] == [(4, integrated)]
    assert "async:lost" in errors[0]["error"]
    assert [e["step"] for e in events if e["kind"] == "submitted"] == [9]  # evaluations go on
    ev.close()
    ev2.close()


def test_a_save_waits_for_an_evaluation_in_flight_no_longer_than_its_timeout():
    """state_dict() waited up to distributed.timeout_s (600 s) for a job past evaluation.timeout_s, and stored
    the result the run that goes on rejects: the resumed run then decided otherwise."""
    hold = threading.Event()

    def stuck(request, weights):
        hold.wait(10)
        return {"score": [1.0]}

    ev, _ = make(cfg("policy.budget.enabled=false", "evaluation.timeout_s=0.2"))
    train(ev, model_at(0), 6, stuck)
    try:
        (job,) = ev.state_dict()["async"]["jobs"]
    finally:
        hold.set()
    result, error, _ = job["outcome"]
    assert result is None and error[0] == "TimeoutError" and "evaluation.timeout_s (0.2 s)" in error[1], error
    ev.close()


def test_an_evaluate_fn_that_changes_the_snapshot_in_place_is_caught():
    def mutating(request, weights):
        weights["weight"].mul_(0.0)
        return {"score": [1.0]}

    ev, _ = make(cfg("evaluation.async_integrate_after_steps=1", "evaluation.on_error=raise"))
    with pytest.raises(SnapshotMutated, match="'weight' of step 4"):
        train(ev, model_at(0), 10, mutating)
    ev2, events = make(cfg("evaluation.async_integrate_after_steps=1"))
    train(ev2, model_at(0), 6, mutating)
    errors = [e for e in events if e["kind"] == "error"]
    assert [e["kind"] for e in events if e["kind"] in ("eval", "error")] == ["error"]
    assert "modified the weight snapshot" in errors[0]["error"]


def test_snapshot_weights_copies_parameters_and_buffers_that_training_no_longer_changes():
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    snap = snapshot_weights(model, step=3)
    assert set(snap) == set(model.state_dict()) and "1.running_mean" in snap
    before = {k: v.clone() for k, v in snap.items()}
    with torch.no_grad():
        model[0].weight.add_(1.0)
    assert all(torch.equal(snap[k], before[k]) for k in snap) and not snap["0.weight"].requires_grad
    snap.check()
    assert snap.nbytes == sum(t.numel() * t.element_size() for t in before.values())
    copy = snapshot_weights(model, "cpu", pin_memory=True)  # no accelerator: a plain CPU copy
    assert torch.equal(copy["0.weight"], model[0].weight.detach())
    torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2)).load_state_dict(snap)


def test_a_snapshot_eval_also_serves_a_synchronous_evaluator():
    ev = AdaptiveEvaluator.from_config(load_config(overrides=["trigger.freq_steps=5"]), clock=FakeClock())
    got = train(ev, model_at(0), 6)
    assert list(got)[0] == 4 and got[4]["score"].mean == pytest.approx(
        weight_sum_fn(None, snapshot_weights(model_at(4)))["score"][0], abs=1e-9)
    assert got[4].integrated_step is None and "integrated_step" not in got[4].to_dict()


def score_of_weights(request, weights):  # module level: a process pool pickles it
    return {"score": [float(weights["weight"].sum())] * 4}


def test_a_process_pool_evaluates_the_snapshot():
    pool = cf.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    try:
        ev, events = make(cfg("evaluation.async_integrate_after_steps=2", "policy.budget.enabled=false"), pool,
                          total_steps=8)  # (at 7 steps the one at step 4 is within the final one's window)
        train(ev, model_at(0), 8, score_of_weights)
        ev.close()
        assert [r.step for r in ev.history] == [4, 7]
        r = ev.history[0]
        assert r["score"].mean == pytest.approx(float(model_at(4).weight.detach().sum()), abs=1e-6)
    finally:
        pool.shutdown()


def test_async_budget_caps_eval_device_time_not_training_time():
    device = FakeClock()

    def costly(request, weights):
        device.advance(40.0)  # 40 eval-device seconds per evaluation, 10 s of training per step
        return weight_sum_fn(request, weights)

    clock = FakeClock()
    ev = AdaptiveEvaluator.from_config(
        cfg("evaluation.async_integrate_after_steps=1", "policy.budget.max_eval_device_fraction=0.5",
            "policy.interval.enabled=false", "policy.peak.enabled=false"),
        clock=clock, eval_clock=device, executor=InlineExecutor())
    events = []
    ev.add_listener(events.append)
    model = model_at(0)
    for g in range(60):
        clock.advance(10.0)
        ev.observe({"train/loss": 1.0}, g)
        ev.evaluate(SnapshotEval(model, costly), 0, g, g)
    ev.close()
    deferred = [e for e in events if e["kind"] == "deferred"]
    assert deferred and all(e["reason"] == "budget:deferred" for e in deferred)
    s = ev.summary()
    assert s["eval_seconds"] <= 0.5 * s["elapsed_seconds"] + 40.0  # within one evaluation of the cap
    assert s["eval_seconds"] >= 0.5 * s["elapsed_seconds"] - 80.0  # and the budget was used


def test_tensorboard_gets_eval_metrics_on_the_weights_step_and_controller_scalars_where_integrated(tmp_path):
    from test_tensorboard import read, scalars

    ev = AdaptiveEvaluator.from_config(
        cfg("evaluation.async_integrate_after_steps=2", f"logging.tensorboard_dir={tmp_path}",
            "policy.budget.enabled=false", "policy.interval.enabled=false", "policy.peak.enabled=false"),
        clock=FakeClock(), total_steps=12)
    train(ev, model_at(0), 12)
    ev.close()
    got = scalars(read(tmp_path))
    assert [s for s, _ in got["eval/score"]] == [4, 9, 11]  # the weights' steps
    assert got["controller/async_latency_steps"] == [(6, 2.0), (11, 2.0), (11, 0.0)]  # close() drains step 11


def test_bad_input_is_refused_before_training():
    with pytest.raises(ConfigError, match="evaluation.max_in_flight: must be at least 1"):
        load_config(overrides=["evaluation.asynchronous=true", "evaluation.max_in_flight=0"])
    with pytest.raises(ConfigError, match="distributed.eval_ranks: eval ranks evaluate asynchronously"):
        load_config(overrides=["distributed.eval_ranks=[1]"])
    with pytest.raises(ConfigError, match="distributed.eval_ranks: rank numbers must be >= 0"):
        load_config(overrides=["evaluation.asynchronous=true", "distributed.eval_ranks=[-1]"])
    pool = cf.ThreadPoolExecutor(1)
    pool.shutdown()
    with pytest.raises(RuntimeError, match="ThreadPoolExecutor is shut down"):
        AdaptiveEvaluator.from_config(cfg(), executor=pool)
    with pytest.raises(ValueError, match="evaluation.asynchronous is false"):
        AdaptiveEvaluator.from_config(None, executor=DaemonThreadExecutor())
    with pytest.raises(ValueError, match=r"distributed.eval_ranks is \[1\]: build adaptive_eval.asynchronous"):
        AdaptiveEvaluator.from_config(cfg("distributed.eval_ranks=[1]"))


def test_an_executor_shut_down_mid_run_turns_evaluation_off_loudly(caplog):
    pool = cf.ThreadPoolExecutor(1)
    logger = RecordingLogger()
    ev, events = make(cfg("evaluation.async_integrate_after_steps=1", "policy.budget.enabled=false"), pool,
                      logger=logger)
    train(ev, model_at(0), 6)
    pool.shutdown()
    train(ev, model_at(6), 40, start=6)
    ev.close()
    assert [e["step"] for e in events if e["kind"] == "eval"] == [4]
    assert [e["kind"] for e in events if e["kind"] in ("error", "async_down")] == ["async_down", "error"]
    assert any(e["kind"] == "deferred" and e["reason"].startswith("async:down") for e in events)
    assert "training goes on WITHOUT evaluations" in caplog.text
    assert logger.last("controller/async_down")[1] == 1.0


def test_replay_models_the_latency_from_the_config_and_charges_eval_device_time_not_training_time():
    from adaptive_eval.replay import replay
    from adaptive_eval.synthetic import make_trace

    trace = make_trace("collapse", steps=300, seed=11).trace
    runs = [replay(trace, cfg("evaluation.async_integrate_after_steps=6")) for _ in range(2)]
    assert runs[0].evals == runs[1].evals and runs[0].alarms == runs[1].alarms  # deterministic
    evals = runs[0].evals
    assert len(evals) >= 5 and all(e["integrated_step"] - e["step"] == 6 for e in evals[:-1])
    sync = replay(trace, load_config(overrides=["trigger.freq_steps=5"]))
    assert runs[0].summary["train_seconds"] == sync.summary["train_seconds"]
    assert runs[0].summary["eval_seconds"] > 0
    with pytest.raises(ValueError, match="needs a latency model: set evaluation.async_integrate_after_steps"):
        replay(trace, cfg())


def test_a_trace_recorded_by_an_asynchronous_run_replays_with_its_recorded_latencies(tmp_path):
    from adaptive_eval.replay import replay
    from adaptive_eval.trace import read_trace

    ev, events = make(cfg("evaluation.async_integrate_after_steps=3", "policy.budget.enabled=false"))
    ev.record_to(tmp_path / "run.jsonl")
    train(ev, model_at(0), 60)
    ev.close()
    trace = read_trace(tmp_path / "run.jsonl")
    assert any("async/latency_steps" in r.metrics for r in trace.records)
    out = replay(trace, cfg("policy.budget.enabled=false"))  # no latency in the config: the trace's
    assert out.evals and all(e["integrated_step"] - e["step"] == 3 for e in out.evals[:-1])
    assert not any("async" in a["stream"] for a in out.alarms)  # the latency column is not a stream


def test_two_results_integrated_at_one_step_read_back_from_the_trace_without_a_warning(tmp_path):
    """close() integrates the evaluation still in flight and the final one at the last step: both are written at
    that step, and reading the run's own trace warned "written twice at one step ... aggregate them per step" (a
    new user's probe).  The later result, of the newer weights, is the step's value, unwarned."""
    import warnings

    from adaptive_eval.trace import read_trace

    release = threading.Event()

    def evaluate_fn(request):
        if request.step == 4:
            release.wait(30)  # still running at the last step
            return {"acc": [1.0, 1.0, 1.0, 0.0]}
        return {"acc": [0.0, 0.0, 0.0, 1.0]}

    ev = AdaptiveEvaluator(load_config(overrides=["trigger.freq_steps=5", "evaluation.asynchronous=true",
                                                  "policy.budget.enabled=false"]), total_steps=8)
    ev.record_to(tmp_path / "trace.csv")
    for s in range(8):
        ev.observe({"train/loss": 1.0}, s)
        ev.evaluate(evaluate_fn, 0, s, s)
    release.set()
    ev.close()
    assert [(r.step, r.integrated_step) for r in ev.history] == [(4, 7), (7, 7)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trace = read_trace(tmp_path / "trace.csv")
    assert trace.column("eval/acc")[1].tolist() == [0.25]
    assert trace.column("async/latency_steps")[1].tolist() == [0.0]


def hanging():
    """``(release, evaluate_fn)``: an evaluation that hangs until ``release.set()`` (at most 30 s)."""
    release = threading.Event()

    def hangs(request, weights):
        release.wait(30)
        return {"score": [1.0] * 8}

    return release, hangs


def test_a_hung_evaluation_in_a_users_thread_pool_is_named_at_close(caplog):
    """With the README's executor=ThreadPoolExecutor(1) an evaluation that hangs let close() return after its
    timeout, and then the interpreter waited forever at exit for the pool's (non-daemon) worker: close() now
    says so and what to use instead.  A daemon-thread executor is not warned about."""
    release, hangs = hanging()

    try:
        for executor, warned in ((cf.ThreadPoolExecutor(1), True), (DaemonThreadExecutor(), False)):
            caplog.clear()
            ev, _ = make(cfg("policy.budget.enabled=false"), executor)
            train(ev, model_at(0), 6, fn=hangs)
            with caplog.at_level("WARNING", logger="adaptive_eval"):
                ev.close(timeout_s=0.2)
            assert ("still runs in your ThreadPoolExecutor" in caplog.text) is warned
            assert ("DaemonThreadExecutor()" in caplog.text) is warned
    finally:
        release.set()


def test_the_last_steps_evaluation_cancels_nothing_in_flight():
    """The final evaluation is urgent, and an urgent one cancels the oldest in flight when full: at the end of a
    run the alarm's (or any) evaluation still running was thrown away, though close() waits for them all."""
    ev, events = make(cfg("evaluation.async_integrate_after_steps=10", "evaluation.max_in_flight=1",
                          "policy.budget.enabled=false", "policy.interval.enabled=false"), total_steps=8)
    train(ev, model_at(0), 8)
    ev.close()
    assert [e["kind"] for e in events if e["kind"] == "cancelled"] == []
    steps = [r.step for r in ev.history]
    assert steps == [4, 7], steps  # step 4's (in flight at the last step) and the final one, both integrated


def _two_d(request):
    """An items x samples metric (2 answers per item), deterministic per step: the accuracy drops at step 60."""
    import numpy as np

    idx = request.indices(1000)
    p = 0.8 if request.step < 60 else 0.4
    rng = np.random.default_rng([request.step, len(idx)])
    if request.suites:
        return {f"{name}/acc": (rng.random((len(s.indices), s.samples_per_item)) < p).astype(float)
                for name, s in request.suites.items()}
    return {"acc": (rng.random((len(idx), 2)) < p).astype(float)}


def _reward_run(overrides, steps=120, split=None, json_round_trip=True):
    """A run with a reward collapse at step 60; at ``split`` its state is saved and loaded into a new evaluator.
    Returns the listener events and the last evaluator."""
    clock = FakeClock()
    ev, events = make(cfg(*overrides), executor=InlineExecutor(), clock=clock, total_steps=steps)
    for g in range(steps):
        clock.t = 10.0 * g
        if g == split:
            assert ev._async.jobs, "the state must be taken with an evaluation in flight"
            state = ev.state_dict()
            if json_round_trip:
                state = json.loads(json.dumps(state, allow_nan=False))
            ev._listeners.clear()
            ev = AdaptiveEvaluator.from_config(cfg(*overrides), total_steps=steps, clock=clock, eval_clock=lambda: 0.0,
                                               executor=InlineExecutor())
            ev.add_listener(events.append)
            ev.load_state_dict(state)
        reward = (0.5 if g < 60 else 0.1) + 0.05 * ((g * 7919) % 11 - 5) / 5
        ev.observe({"train/reward": reward}, g)
        ev.evaluate(_two_d, 0, g, g)
    ev.close()
    return events, ev


@pytest.mark.parametrize("extra", [
    [],  # one items x samples metric
    ["evaluation.suites={a: {size: 200, samples_per_item: 2}, b: {size: 30, samples_per_item: 4, every: 2}}"],
])
@pytest.mark.parametrize("json_round_trip", [True, False])
def test_a_resume_with_an_evaluation_in_flight_keeps_its_per_item_values_for_the_paired_comparison(extra,
                                                                                                  json_round_trip):
    """The state of an evaluation in flight kept its result but not its per-item values: at its integration
    the resumed run had nothing to pair it with (no paired comparison, and no per-item values for the next
    one), so its later decisions differed from those of the run that never stopped (7 evaluations for 6)."""
    overrides = ["trigger.freq_steps=10", "evaluation.async_integrate_after_steps=3", *extra]
    full, whole = _reward_run(overrides)
    assert [(r.step, r.integrated_step) for r in whole.history][2] == (62, 65)
    assert all(r.paired for r in whole.history[1:])
    for split in (63, 64, 65):  # the evaluation of step 62 is in flight, due at step 65
        events, resumed = _reward_run(overrides, split=split, json_round_trip=json_round_trip)
        assert decisions(events) == decisions(full), split
        paired = [{k: (v.mean, v.n) for k, v in r.paired.items()} for r in resumed.history]
        assert paired == [{k: (v.mean, v.n) for k, v in r.paired.items()} for r in whole.history]


def test_an_asynchronous_evaluation_reports_the_suite_aggregate_as_a_synchronous_one_does(recwarn):
    """evaluation.suite_aggregate (all/<metric>) was added in the synchronous path only: an asynchronous run
    never reported all/acc, and evaluation.metric: all/acc was never seen (its policies learned nothing)."""
    suites = ["evaluation.suites={a: {size: 200, samples_per_item: 2}, b: {size: 30, samples_per_item: 4}}",
              "evaluation.suite_aggregate=all", "evaluation.metric=all/acc", "policy.budget.enabled=false",
              "policy.interval.enabled=false"]
    sync = AdaptiveEvaluator.from_config(load_config(overrides=["trigger.freq_steps=5", *suites]), total_steps=12,
                                         clock=FakeClock(), eval_clock=lambda: 0.0)
    ev, _ = make(cfg("evaluation.async_integrate_after_steps=2", *suites), executor=InlineExecutor(), total_steps=12)
    for g in range(12):
        for e in (sync, ev):
            e.observe({"train/loss": 1.0}, g)
            e.evaluate(_two_d, 0, g, g)
    ev.close()
    assert [r.step for r in ev.history] == [r.step for r in sync.history] == [4, 9, 11]
    for got, want in zip(ev.history, sync.history):
        assert sorted(got.metrics) == sorted(want.metrics)
        assert "all/acc" in got.metrics and got.metrics["all/acc"].mean == want.metrics["all/acc"].mean
    assert not [w for w in recwarn if "all/acc" in str(w.message)]  # the tracked metric is there


@pytest.mark.parametrize("executor", [None, "pool"])
def test_evaluate_after_close_says_the_evaluator_was_closed(caplog, executor):
    """evaluate() after close() turned evaluation off with 'DaemonThreadExecutor: cannot schedule new futures after
    shutdown' (and with a user's executor ran evaluations that nothing would drain): it now says the evaluator
    was closed, never raises in the training step unless on_error is raise, and evaluates no more."""
    pool = cf.ThreadPoolExecutor(1) if executor == "pool" else None
    over = ("policy.budget.enabled=false", "policy.interval.enabled=false")
    ev, events = make(cfg(*over), pool)
    train(ev, model_at(0), 6)
    ev.close()
    with caplog.at_level("ERROR", logger="adaptive_eval"):
        train(ev, model_at(6), 20, start=6)  # (never raises)
    down = [e["error"] for e in events if e["kind"] == "async_down"]
    assert len(down) == 1 and down[0].startswith("the evaluator was closed: evaluate() after AdaptiveEvaluator.close()")
    assert [e["step"] for e in events if e["kind"] == "eval"] == [4]
    deferred = [e["reason"] for e in events if e["kind"] == "deferred"]
    assert deferred and all(r.startswith("async:down (the evaluator was closed") for r in deferred)
    assert "the evaluator was closed" in caplog.text and "cannot schedule new futures" not in caplog.text
    ev.close()
    ev, _ = make(cfg(*over, "evaluation.on_error=raise"), pool)  # ... unless the user asked for it
    train(ev, model_at(0), 6)
    ev.close()
    with pytest.raises(RuntimeError, match="the evaluator was closed"):
        train(ev, model_at(6), 20, start=6)
    if pool is not None:
        pool.shutdown()


def test_close_says_an_evaluation_waiting_for_a_full_slot_with_what_was_due(caplog):
    """A probe: "the evaluation due (async:waiting (1 in flight), was due) never ran", where the decisions line said
    what was due; an async:waiting decision keeps it."""
    release, hangs = hanging()
    try:
        ev, _ = make(cfg("policy.budget.enabled=false", "policy.interval.enabled=false"))
        train(ev, model_at(0), 12, fn=hangs)  # (step 4's in flight, step 9's waits)
        assert ev.last_decision.reason == "async:waiting (1 in flight)"
        with caplog.at_level("WARNING", logger="adaptive_eval"):
            ev.close(timeout_s=0.5)
    finally:
        release.set()
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("closed while deferred")]
    assert said == ["closed while deferred: the evaluation due (async:waiting (1 in flight), was trigger:steps) "
                    "never ran; evaluator.after_train(evaluate_fn, 11) before close() evaluates the last weights"]


def _held_up_warnings(caplog):
    return [r.getMessage() for r in caplog.records if "due evaluations have waited for it" in r.getMessage()]


def test_an_evaluation_that_holds_up_due_ones_is_warned_about_once_at_a_step_set_by_the_steps(caplog):
    """With the default config (no evaluation.timeout_s, no fixed latency) a hung evaluate_fn stopped every later
    evaluation (async:waiting at every step) without a word.  After HELD_UP_WARN_CALLS (20) evaluate() calls at
    which a due evaluation waited for it, one warning names its step and the key to set; its step depends on
    the steps only.  A run whose evaluations finish says nothing."""
    release, hangs = hanging()

    try:
        ev, events = make(cfg("policy.budget.enabled=false", "policy.interval.enabled=false"))
        with caplog.at_level("WARNING", logger="adaptive_eval"):
            train(ev, model_at(0), 60, fn=hangs)  # (before the NaN of step 70, an urgent alarm)
        (said,) = _held_up_warnings(caplog)
        # Submitted at step 4; due again at step 9, it waited at every step since: the 20th is step 28.
        assert said.startswith("step 28: the asynchronous evaluation of step 4 (trigger:steps) still runs"), said
        assert "at 20 evaluate() calls since step 9" in said and "Set evaluation.timeout_s" in said
        assert [e["step"] for e in events if e["kind"] == "submitted"] == [4]
    finally:
        release.set()
    ev.close()
    # With evaluation.timeout_s set it still said "Set evaluation.timeout_s" (a probe)
    release, hangs = hanging()
    caplog.clear()
    try:
        ev, events = make(cfg("policy.budget.enabled=false", "policy.interval.enabled=false",
                              "evaluation.timeout_s=1000"))
        with caplog.at_level("WARNING", logger="adaptive_eval"):
            train(ev, model_at(0), 60, fn=hangs)
        (said,) = _held_up_warnings(caplog)
        assert said.endswith("evaluation.timeout_s is 1000 s, after which it fails (said once)"), said
    finally:
        release.set()
    ev.close()
    caplog.clear()
    ev, events = make(cfg("policy.budget.enabled=false", "policy.interval.enabled=false"), InlineExecutor())
    with caplog.at_level("WARNING", logger="adaptive_eval"):
        train(ev, model_at(0), 60)
    ev.close()
    assert _held_up_warnings(caplog) == [] and len(ev.history) >= 10
    assert [e["step"] for e in events if e["kind"] == "submitted"] == [r.step for r in ev.history]


def test_close_and_state_dict_say_how_long_they_wait_for_an_unfinished_evaluation(caplog, monkeypatch):
    """close() and state_dict() blocked for distributed.timeout_s (600 s by default) on a hung evaluation without a
    word: a wait longer than QUIET_WAIT_S now logs who waits, for how long at most, why, and the key to set."""
    from adaptive_eval import asynchronous

    monkeypatch.setattr(asynchronous, "QUIET_WAIT_S", 0.05, raising=False)  # (1 s by default: a test need not wait that long)
    release, hangs = hanging()

    try:
        ev, events = make(cfg("policy.budget.enabled=false", "distributed.timeout_s=0.3"))
        train(ev, model_at(0), 6, fn=hangs)
        with caplog.at_level("WARNING", logger="adaptive_eval"):
            state = ev.state_dict()
            assert state["async"]["jobs"][0]["outcome"] is None  # (lost: it did not finish within the wait)
            ev.close(timeout_s=0.3)
    finally:
        release.set()
    said = [r.getMessage() for r in caplog.records if "waits up to" in r.getMessage()]
    assert len(said) == 2, said  # (a wait under a second read "0 s more", "still running 0 s": a new user's probe)
    assert said[0].startswith("state_dict() waits up to 0.25 s more for the asynchronous evaluation of step 4")
    assert said[1].startswith("close() waits up to 0.25 s more for the asynchronous evaluation of step 4")
    assert all("evaluation.timeout_s is null" in s and "set evaluation.timeout_s" in s for s in said)
    # the bound as it is for that wait (it said "distributed.timeout_s" of close()'s, and of half of it in a group)
    assert "The bound is the wait (0.3 s, distributed.timeout_s)" in said[0]
    assert "The bound is close()'s wait (0.3 s in all)" in said[1]
    # The error names the bound that ran out (it said 'within the wait (0 s)': the time left of it).
    (error,) = [e["error"] for e in events if e["kind"] == "error"]
    assert error.endswith("did not finish within close()'s wait (0.3 s in all)"), error


def test_an_asynchronous_evaluation_is_not_timed_with_the_torch_import():
    """Found by a new-user probe: in a process that had not imported torch (scores from an eval server), the
    worker imported it for torch.inference_mode inside the first asynchronous evaluation, whose timeout_s counts
    from its submission: an instant evaluate_fn timed out (1.7 s against timeout_s 1).  The evaluator imports it
    when it is built.  In a fresh interpreter: the modules imported between the submission and evaluate_fn's
    start (torch alone is hundreds) are what the timeout would be billed for."""
    import subprocess
    import sys

    code = """
import sys
from adaptive_eval import AdaptiveEvaluator, load_config
assert "torch" not in sys.modules
ov = ["evaluation.asynchronous=true", "evaluation.timeout_s=100", "evaluation.async_integrate_after_steps=1"]
ev = AdaptiveEvaluator.from_config(load_config(overrides=ov), total_steps=2)
seen = []
def fn(request):
    seen.append(len(sys.modules))
    return {"acc": [1.0, 0.0, 1.0] * 20}
for s in range(2):  # (one evaluation, the final one, submitted at step 1)
    ev.observe({"train/loss": 1.0}, s)
    before = len(sys.modules)
    ev.evaluate(fn, 0, s, s)
ev.close()
print(seen[0] - before, ev.summary()["eval_errors"], len(ev.history))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    imported, errors, evaluations = map(int, out.stdout.split()[-3:])
    assert imported < 50 and errors == 0 and evaluations == 1  # (before: torch's hundreds, imported in the worker)


def test_an_asynchronous_evaluator_never_closed_says_what_it_lost(caplog):
    """A loop that forgot close() lost the evaluations in flight at exit without a word (a new user's find)."""
    import gc
    import logging

    from adaptive_eval import AdaptiveEvaluator, load_config
    from adaptive_eval.asynchronous import InlineExecutor

    cfg = load_config(overrides=["evaluation.asynchronous=true", "evaluation.async_integrate_after_steps=3",
                                 "trigger.freq_steps=13"])

    def run(close, save=False):
        ev = AdaptiveEvaluator.from_config(cfg, executor=InlineExecutor(), total_steps=100)
        for g in range(15):
            ev.observe({"train/loss": 1.0}, g)
            ev.evaluate(lambda request: {"acc": [1.0, 0.0] * 8}, 0, g, g)
        if save:
            ev.state_dict()
        if close:
            ev.close()
        del ev
        gc.collect()

    gc.collect()  # (the evaluators earlier tests left unclosed say so now; ours are told by their step, 12)
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        run(close=True)
        assert not [r for r in caplog.records if "never closed" in r.getMessage() and "step 12," in r.getMessage()]
        run(close=False)
    said = [r.getMessage() for r in caplog.records if "never closed" in r.getMessage() and "step 12," in r.getMessage()]
    assert len(said) == 1 and "the evaluation of step 12, still in flight, was never integrated" in said[0]
    # a result a state_dict() holds is not lost: a run resumed from it integrates it (it said "never integrated")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        run(close=False, save=True)
    said = [r.getMessage() for r in caplog.records if "never closed" in r.getMessage() and "step 12," in r.getMessage()]
    assert len(said) == 1 and "never integrated" not in said[0]
    assert ("the outcome of the evaluation of step 12, in the state state_dict() saved, is integrated by a run "
            "resumed from it") in said[0]

    class Loop:  # owns its evaluator; its failing method is the evaluate_fn (the job's traceback holds its frame)
        def __init__(self):
            self.ev = AdaptiveEvaluator.from_config(cfg, executor=InlineExecutor(), total_steps=100)

        def evaluate(self, request):
            raise ConnectionError("inference server restarting")

    import weakref

    loop = Loop()
    for g in range(15):
        loop.ev.observe({"train/loss": 1.0}, g)
        loop.ev.evaluate(loop.evaluate, 0, g, g)
    gone = weakref.ref(loop)
    del loop
    gc.collect()
    assert gone() is None  # (the finalizer held the jobs, and through a traceback the loop: found in review)


class _Preempted(Exception):
    """A preemption handler's own exception (SLURM's SIGTERM: save the state, leave the training loop)."""


def test_a_preemption_while_training_waits_for_a_due_result_reaches_the_loop_and_the_state_keeps_the_evaluation():
    """A signal handler that saves ``state_dict()`` and raises, while ``evaluate()`` waits for a result due by
    ``evaluation.async_integrate_after_steps``: the job was taken off the list before the wait, so the state lost
    it (the resumed run never evaluated that step), and the handler's exception was logged as the evaluation's
    failure while training went on; and the resumed run's call at that step was skipped as a repeat (every later
    evaluation a step late).  Now the state holds its result, the exception reaches the loop, and the resumed
    run decides as the one that never stopped."""
    import signal

    overrides = ["evaluation.async_integrate_after_steps=2"]

    def slow(request):
        threading.Event().wait(1.0)  # a slow evaluation: training waits for it at its due step
        return {"acc": [1.0 if request.step < 30 else 0.0] * 8}

    def run(ev, steps, start=0, preempt_at=None):
        for g in range(start, steps):
            ev.observe({"train/loss": 1.0 + 0.01 * (g % 3)}, g)
            if g == preempt_at:
                signal.setitimer(signal.ITIMER_REAL, 0.05)
            ev.evaluate(slow, 0, g, g)

    full, _ = make(cfg(*overrides), total_steps=40)  # (eval time on a clock of its own: decisions by steps)
    run(full, 40)
    full.close()

    ev, _ = make(cfg(*overrides), total_steps=40)
    run(ev, 6)
    due = next(j.due_step for j in ev._async.jobs)
    saved = {}

    def on_alarm(signum, frame):
        saved["state"] = json.loads(json.dumps(ev.state_dict()))
        raise _Preempted("SIGTERM")

    old = signal.signal(signal.SIGALRM, on_alarm)
    try:
        with pytest.raises(_Preempted):
            run(ev, 40, start=6, preempt_at=due)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert [j["step"] for j in saved["state"]["async"]["jobs"]] == [due - 2]
    assert saved["state"]["async"]["jobs"][0]["outcome"] is not None
    assert saved["state"]["interrupted"] == {"step": due}
    for rerun in ("evaluate", "the step"):
        resumed, _ = make(cfg(*overrides), total_steps=40)
        resumed.load_state_dict(saved["state"])
        alarms = []
        resumed.add_listener(lambda e: e["kind"] == "alarm" and alarms.append(e["step"]))
        if rerun == "evaluate":
            resumed.evaluate(slow, 0, due, due)  # the state was taken inside this call, after the step's observe
            run(resumed, 40, start=due + 1)
        else:  # the whole step run again, as after a synchronous evaluation interrupted: its observe() is a repeat
            before = json.dumps(resumed.state_dict()["detectors"])
            resumed.observe({"train/loss": 50.0}, due)  # (fed, it would move the detectors)
            assert json.dumps(resumed.state_dict()["detectors"]) == before
            run(resumed, 40, start=due)
        resumed.close()
        assert [r.step for r in resumed.history] == [r.step for r in full.history], rerun
        assert [r.metrics["acc"].mean for r in resumed.history] == [r.metrics["acc"].mean for r in full.history]


def test_state_dict_waits_no_longer_than_its_timeout_and_saves_a_running_evaluation_as_lost():
    """A preemption's handler has the grace period its scheduler leaves (SLURM: 30 s before SIGKILL); state_dict()
    waited up to distributed.timeout_s (600 s) for an evaluation in flight, and the state was never written."""
    gate = threading.Event()

    def stuck(request):
        gate.wait(60)
        return {"acc": [1.0] * 8}

    ev, events = make(cfg())
    for g in range(6):
        ev.observe({"train/loss": 1.0}, g)
        ev.evaluate(stuck, 0, g, g)
    assert [j.step for j in ev._async.jobs] == [4]
    state = json.loads(json.dumps(ev.state_dict(timeout_s=0.2)))
    assert not gate.is_set() and state["async"]["jobs"][0]["outcome"] is None  # returned without its result
    gate.set()
    ev.close()
    resumed, events = make(cfg())
    resumed.load_state_dict(state)
    for g in range(6, 12):
        resumed.observe({"train/loss": 1.0}, g)
        resumed.evaluate(stuck, 0, g, g)
    resumed.close()
    errors = [e for e in events if e["kind"] == "error"]
    assert errors and errors[0]["step"] == 4 and "in flight when the state was saved" in errors[0]["error"]
    for bad in (-1, "5", True):
        with pytest.raises(ValueError, match="state_dict.timeout_s"):
            resumed.state_dict(timeout_s=bad)


def hangs_at_4():
    """``(release, running, evaluate_fn)``: the evaluation of step 4 hangs until ``release.set()`` (at most 30 s);
    ``running`` lists the steps evaluated, in the order they began."""
    release, running = threading.Event(), []

    def hung(request):
        running.append(request.step)
        if request.step == 4:
            release.wait(30)
        return {"acc": [1.0] * 8}

    return release, running, hung


def _eval_threads() -> int:
    return sum(t.name == "adaptive_eval-async-eval" and t.is_alive() for t in threading.enumerate())


def train_releasing(ev, fn, steps, release, at, before=lambda g: None) -> int:
    """Train ``steps`` steps, ``release.set()`` at step ``at`` and wait (at most 30 s) for the evaluation threads to
    end, then close; the most evaluation threads alive at once."""
    live = 0
    for g in range(steps):
        before(g)
        if g == at:
            release.set()
            for _ in range(3000):
                if not _eval_threads():
                    break
                threading.Event().wait(0.01)
        ev.observe({"train/loss": 1.0}, g)
        ev.evaluate(fn, 0, g, g)
        live = max(live, _eval_threads())
    ev.close()
    return live


def test_no_evaluation_starts_beside_one_that_timed_out_and_still_runs():
    """A hung evaluate_fn with evaluation.timeout_s: each timed-out evaluation was failed and the next one started
    beside it, so threads piled up (7 with max_in_flight=1 in a new user's run, each holding what it holds: GPU
    memory).  As in a synchronous run, the due evaluation waits (deferred, still due) until that thread returns,
    then runs."""
    clock = FakeClock()
    release, running, hung = hangs_at_4()

    ev, events = make(cfg("evaluation.timeout_s=30", "policy.budget.enabled=false"), clock=clock)
    ev._async.timer = clock  # (real seconds by default: this test moves them by hand)
    # (after the release no time passes: nothing else times out)
    live = train_releasing(ev, hung, 40, release, 30, before=lambda g: clock.advance(10.0 if g <= 30 else 0.0))
    assert live == 1
    errors = [e for e in events if e["kind"] == "error"]
    assert [e["step"] for e in errors] == [4] and "evaluation.timeout_s (30 s)" in errors[0]["error"]
    waits = [e["step"] for e in events if e["kind"] == "deferred" and "timed-out-eval-still-running" in e["reason"]]
    assert waits and min(waits) > 4 and max(waits) < 30
    assert running[0] == 4 and min(running[1:]) == 30  # the one due while it ran, at the first step after


def test_no_evaluation_starts_beside_one_that_failed_by_the_wait_limit_and_still_runs():
    """Without evaluation.timeout_s, a result due by async_integrate_after_steps that does not come within the wait
    limit (distributed.timeout_s) failed, and the next evaluation started beside its thread: 3-4 threads piled up
    under a hung grader, each holding a weight snapshot (a new user's probe).  It is held up as after a timeout."""
    release, running, hung = hangs_at_4()

    ev, events = make(cfg("distributed.timeout_s=2", "evaluation.async_integrate_after_steps=3",
                          "policy.budget.enabled=false"))
    live = train_releasing(ev, hung, 30, release, 20)
    errors = [e for e in events if e["kind"] == "error"]
    assert [e["step"] for e in errors] == [4] and "did not finish within" in errors[0]["error"]
    assert live == 1 and running[0] == 4 and min(running[1:]) == 20  # (the one due meanwhile, once it returned)
    assert any(e["kind"] == "deferred" and "timed-out-eval-still-running" in e["reason"] for e in events)


def test_an_executors_wrapped_failure_is_the_evaluations_and_a_caught_one_leaves_no_gap(caplog):
    """Found in review: a user's executor whose future wraps the evaluation's exception was taken for a signal
    handler's (the job stayed in the list and raised at every later step, never counted); and a loop that catches
    on_error: raise's error and trains on was told of a gap in its evaluate() calls."""
    import logging

    class WrapFuture(cf.Future):
        def result(self, timeout=None):
            try:
                return super().result(timeout)
            except (cf.TimeoutError, cf.CancelledError):
                raise
            except Exception as e:
                raise RuntimeError(f"remote evaluation failed: {e}") from e

    class Wrapping(cf.Executor):
        def submit(self, fn, *a, **k):
            f = WrapFuture()
            f.set_running_or_notify_cancel()
            try:
                f.set_result(fn(*a, **k))
            except BaseException as e:  # noqa: BLE001
                f.set_exception(e)
            return f

    def boom(request):
        if request.step == 4:
            raise ValueError("eval broke")
        return {"acc": [1.0] * 8}

    for executor in (Wrapping(), InlineExecutor()):
        ev, _ = make(cfg("evaluation.async_integrate_after_steps=2", "evaluation.on_error=raise"), executor)
        caught = []
        with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
            caplog.clear()
            for g in range(12):
                ev.observe({"train/loss": 1.0}, g)
                try:
                    ev.evaluate(boom, 0, g, g)
                except Exception as e:  # noqa: BLE001
                    caught.append((g, str(e)))
        assert [g for g, _ in caught] == [6] and "eval broke" in caught[0][1]
        assert ev.summary()["eval_errors"] == 1
        assert not [r for r in caplog.records if "steps skipped" in r.getMessage()]
        ev.close()


def test_a_preemption_while_one_call_takes_two_due_results_keeps_both_in_the_state():
    """Found in review: take() popped each result as it came, so a handler raising while it waited for the second
    saved the state without the first (neither integrated nor saved: its step was gone)."""
    import signal

    ev, _ = make(cfg("evaluation.async_integrate_after_steps=2", "evaluation.max_in_flight=2",
                     "trigger.freq_steps=1", "policy.budget.enabled=false"), total_steps=100)

    def fn(request):
        threading.Event().wait(0.0 if request.step == 0 else 1.0)
        return {"acc": [1.0] * 8}

    saved = {}

    def on_alarm(signum, frame):
        saved["state"] = json.loads(json.dumps(ev.state_dict()))
        raise _Preempted("SIGTERM")

    for g in (0, 1):
        ev.observe({"train/loss": 1.0}, g)
        ev.evaluate(fn, 0, g, g)
    old = signal.signal(signal.SIGALRM, on_alarm)
    try:
        ev.observe({"train/loss": 1.0}, 5)  # a call every few steps: both due at once
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(_Preempted):
            ev.evaluate(fn, 0, 5, 5)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    jobs = saved["state"]["async"]["jobs"]
    assert [j["step"] for j in jobs] == [0, 1] and all(j["outcome"] is not None for j in jobs)
    ev.close()
    assert [r.step for r in ev.history] == [0, 1]


class _LibraryCancel(BaseException):
    """A library's own BaseException (not an Exception): a cancelled request."""


class _ClientError(Exception):
    """A client library's error whose message formats an attribute a re-raised copy lacks."""

    def __str__(self):
        return f"HTTP {self.status}"


@pytest.mark.parametrize("exc", [_LibraryCancel("request cancelled"), GeneratorExit("request cancelled")])
def test_a_base_exception_in_the_worker_is_one_failed_evaluation(exc):
    """A probe: a BaseException other than KeyboardInterrupt and SystemExit, raised by evaluate_fn in the worker,
    was raised into the training loop at every later observe and evaluate and by close(), and no evaluation ran
    again (the job never left the queue; eval_errors stayed 0).  Now it is that evaluation's failure, on_error's."""
    def fn(request):
        raise exc

    ev, events = make(cfg("evaluation.async_integrate_after_steps=1", "policy.budget.enabled=false"), total_steps=12)
    for g in range(12):
        ev.observe({"loss": 1.0}, g)
        ev.evaluate(fn, 0, g, g)  # (raised nothing into the loop)
    ev.close()
    errors = [e for e in events if e["kind"] == "error"]
    assert ev.summary()["eval_errors"] == len(errors) >= 2
    assert type(exc).__name__ in errors[0]["error"] and "stopped that evaluation only" in errors[0]["error"]


def test_an_error_whose_message_fails_is_raised_once_under_on_error_raise_and_resumes_under_skip():
    """A probe: with on_error: raise, an error whose __str__ raises jammed the queue (an AttributeError from every
    later observe and from close(), eval_errors 0); under skip, a state holding it in flight did not load, and the
    message blamed state_dict['shape']."""
    def fn(request):
        raise _ClientError()

    ev, events = make(cfg("evaluation.async_integrate_after_steps=1", "policy.budget.enabled=false",
                          "evaluation.on_error=raise"), total_steps=12)
    raised = []
    for g in range(12):
        try:
            ev.observe({"loss": 1.0}, g)
            ev.evaluate(fn, 0, g, g)
        except _ClientError:
            raised.append(g)
    with pytest.raises(_ClientError):
        ev.close()
    assert raised and ev.summary()["eval_errors"] == len(raised) + 1
    ev, _ = make(cfg("evaluation.async_integrate_after_steps=3", "policy.budget.enabled=false"), total_steps=12)
    for g in range(6):
        ev.observe({"loss": 1.0}, g)
        ev.evaluate(fn, 0, g, g)
    sd = json.loads(json.dumps(ev.state_dict()))
    assert any(job.get("outcome") for job in sd["async"]["jobs"])
    again, events = make(cfg("evaluation.async_integrate_after_steps=3", "policy.budget.enabled=false"), total_steps=12)
    again.load_state_dict(sd)  # (raised "state_dict['shape'] does not load")
    for g in (6, 7):
        again.observe({"loss": 1.0}, g)
        again.evaluate(fn, 0, g, g)
    assert [e["step"] for e in events if e["kind"] == "error"] == [4]  # (the failure in flight, integrated at 7)
    ev.close()
    again.close()


def test_a_state_whose_async_part_does_not_load_names_async():
    """The key read last named the failure: 'shape', read after 'async' (a probe)."""
    ev, _ = make(cfg(), total_steps=12)
    sd = ev.state_dict()
    sd["async"] = {"jobs": [{"id": "x"}], "next_id": 1}
    with pytest.raises(ValueError, match=r"state_dict\['async'\] does not load"):
        make(cfg(), total_steps=12)[0].load_state_dict(sd)
    ev.close()


def test_an_evaluation_failed_by_its_timeout_that_still_runs_in_a_users_pool_is_named_at_close(caplog):
    """A probe: with evaluation.timeout_s the hung evaluation was failed and left running in the user's pool, and
    close() said nothing, though the interpreter then waits for it at exit (a process pool's workers too)."""
    release, hangs = hanging()
    try:
        ev, events = make(cfg("policy.budget.enabled=false", "evaluation.timeout_s=0.2",
                              "evaluation.async_integrate_after_steps=1"), cf.ThreadPoolExecutor(1))
        train(ev, model_at(0), 8, fn=hangs)
        assert any(e["kind"] == "error" and "timeout_s" in e["error"] for e in events)
        with caplog.at_level("WARNING", logger="adaptive_eval"):
            ev.close(timeout_s=0.2)
        assert "the evaluation of step(s) 4 still runs in your ThreadPoolExecutor" in caplog.text
    finally:
        release.set()


def test_a_wait_limit_beyond_what_python_can_wait_is_a_long_wait_not_an_overflow(monkeypatch):
    """distributed.timeout_s 1e10 (a "no limit" the config accepts, .inf being refused) raised OverflowError from
    ``future.result(timeout=...)`` inside evaluate() and close(): above threading.TIMEOUT_MAX (a probe)."""
    import adaptive_eval.asynchronous as asynchronous

    monkeypatch.setattr(asynchronous, "QUIET_WAIT_S", 0.01)  # (the long wait follows the quiet one)
    ev = AdaptiveEvaluator.from_config(cfg("distributed.timeout_s=1e10", "evaluation.async_integrate_after_steps=1"),
                                       total_steps=30)

    def slow(request):
        time.sleep(0.2)
        return {"acc": [1.0, 0.0] * (request.sample_size // 2)}

    for s in range(30):
        ev.observe({"train/loss": 1.0}, s)
        ev.evaluate(slow, 0, s, s)
    ev.close()
    assert ev.summary()["evals"] >= 2 and ev.summary()["eval_errors"] == 0


def test_close_from_two_threads_at_once_integrates_each_evaluation_once():
    """A watchdog thread's close() beside the training thread's: each drained the evaluations in flight, and every
    one was integrated twice (history [4, 7, 4, 7], summary()["evals"] 4; a new user's probe)."""
    release = threading.Event()

    def evaluate_fn(request):
        release.wait(30)
        return {"acc": [1.0, 0.0, 1.0]}

    ev = AdaptiveEvaluator(load_config(overrides=["trigger.freq_steps=5", "evaluation.asynchronous=true",
                                                  "policy.budget.enabled=false"]), total_steps=8)
    for s in range(8):
        ev.observe({"train/loss": 1.0}, s)
        ev.evaluate(evaluate_fn, 0, s, s)
    closers = [threading.Thread(target=ev.close) for _ in range(2)]
    for t in closers:
        t.start()
    time.sleep(0.2)  # (both are in close() while the evaluations still run)
    release.set()
    for t in closers:
        t.join(30)
    assert [r.step for r in ev.history] == [4, 7] and ev.summary()["evals"] == 2


@pytest.mark.parametrize("nested", [False, True])
@pytest.mark.parametrize("call", ["state_dict", "close", "evaluate"])
def test_the_evaluator_called_from_inside_its_own_asynchronous_evaluation_fails_that_evaluation_saying_why(
        call, nested):
    """state_dict() or close() inside an asynchronous evaluate_fn (saving a checkpoint with the state) waited for the
    evaluations in flight, its own among them: distributed.timeout_s, 600 s, and close() integrated it twice; an
    evaluate() from there moved the training thread's ownership to the worker (a new user's probe).  ``nested``:
    another evaluator's inline evaluation run first inside it cleared the marker of this one's (a review)."""
    ev = AdaptiveEvaluator(load_config(overrides=["trigger.freq_steps=5", "evaluation.asynchronous=true",
                                                  "policy.budget.enabled=false"]), total_steps=12)
    other = AdaptiveEvaluator(load_config(overrides=["trigger.freq_steps=1", "evaluation.asynchronous=true",
                                                     "policy.budget.enabled=false"]), executor=InlineExecutor())
    errors = []
    ev.add_listener(lambda e: e["kind"] == "error" and errors.append(e["error"]))

    def evaluate_fn(request):
        if nested:
            other.evaluate(lambda r: {"acc": [1.0]}, 0, request.step, request.step)
        if call == "evaluate":
            ev.evaluate(evaluate_fn, 0, request.step, request.step)
        else:
            getattr(ev, call)()
        return {"acc": [1.0]}

    start = time.monotonic()
    for s in range(12):
        ev.observe({"train/loss": 1.0}, s)
        ev.evaluate(evaluate_fn, 0, s, s)
    ev.close()
    assert time.monotonic() - start < 10
    assert ev.history == [] and len(errors) == ev.summary()["eval_errors"] >= 2
    assert all(f"{call}() called from inside" in e for e in errors), errors


def test_a_submitted_evaluation_of_the_whole_set_reads_n_all_in_the_decisions_text(tmp_path):
    """A probe: with sample_size null (the whole set) the text read "submitted: trigger:steps (n=None)"."""
    from adaptive_eval.tensorboard import read_texts

    ev = AdaptiveEvaluator.from_config(load_config(overrides=[
        "evaluation.asynchronous=true", "policy.sample_size.enabled=false", "policy.budget.enabled=false",
        "trigger.freq_steps=5", f"logging.tensorboard_dir={tmp_path}"]))
    for g in range(8):
        ev.evaluate(lambda: {"acc": [1.0, 0.0]}, 0, g, g)
    ev.close()
    submitted = [t for _, t in read_texts(tmp_path, "decisions") if t.startswith("submitted: ")]
    assert submitted and all("(n=all)" in t for t in submitted), submitted


def test_a_synchronous_evaluation_under_timeout_s_copies_its_weights_in_the_training_thread():
    """A SnapshotEval (and the adapters' replica) called synchronously under evaluation.timeout_s: its copy was
    taken inside the timed thread, so one longer than timeout_s went on reading weights the optimizer was
    updating.  Now taken in the calling thread, before the timed thread starts; the evaluation runs on it."""
    module = torch.nn.Linear(2, 1)
    threads = []

    class Recording(SnapshotEval):
        def snapshot(self, step=None):
            threads.append(threading.current_thread().name)
            return super().snapshot(step)

    def fn(request, weights):
        threads.append(threading.current_thread().name)
        return {"acc": [float(weights["weight"].sum() == module.weight.sum())] * len(request.indices(4))}

    ev = AdaptiveEvaluator.from_config(load_config(overrides=["evaluation.timeout_s=5", "trigger.freq_steps=1",
                                                              "policy.budget.enabled=false"]), total_steps=3)
    result = ev.evaluate(Recording(module, fn), 0, 0, 0)
    assert threads[0] == threading.current_thread().name and threads[1].startswith("adaptive_eval")
    assert result["acc"].mean == 1.0


def test_a_cancelled_evaluation_that_already_runs_may_stop_at_cancel_requested(caplog):
    """A probe: at max_in_flight 1 an urgent evaluation cancelled the one in flight, which ran on to its end in its
    thread beside the urgent one (and the final one): 3 replicas of the model evaluating at once.  An evaluate_fn
    that scores in a loop (the adapters' own do, between batches) stops when asked; not an error to log."""
    from adaptive_eval.asynchronous import EvaluationCancelled, cancel_requested

    started, stopped = threading.Event(), []

    def fn(request):
        started.set()
        for _ in range(500 if request.step == 4 else 0):
            if cancel_requested():
                stopped.append(request.step)
                raise EvaluationCancelled("stopped")
            time.sleep(0.01)
        return {"acc": [1.0] * len(request.indices(10))}

    assert not cancel_requested()  # (outside an evaluation)
    cfg = load_config(overrides=["evaluation.asynchronous=true", "evaluation.max_in_flight=1", "trigger.freq_steps=5",
                                 "policy.budget.enabled=false", "evaluation.precision=none"])
    ev = AdaptiveEvaluator.from_config(cfg, total_steps=20)
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        for g in range(8):
            ev.observe({"train/loss": float("nan") if g == 6 else 1.0}, g)
            ev.evaluate(fn, 0, g, g)
            if g == 4:
                assert started.wait(5)
        deadline = time.monotonic() + 5
        while not stopped and time.monotonic() < deadline:
            time.sleep(0.01)
        ev.close()
    assert stopped == [4]
    assert [r.step for r in ev.history] == [6]  # (the urgent one; the cancelled one never integrated)
    assert not any("evaluate_fn failed at step 4" in r.getMessage() for r in caplog.records)


def test_a_ctrl_c_before_submission_then_the_step_run_again_submits_it():
    """A review: a Ctrl-C in the submission of step 6's evaluation (before its worker got it), the loop running step
    6 again: the call read as a repeat of the step, which was never evaluated."""
    ev, _ = make(cfg("trigger.freq_steps=1", "evaluation.async_integrate_after_steps=1", "policy.budget.enabled=false",
                     "policy.interval.enabled=false"))
    calls, real, fired = [], ev._async.submit, []

    def submit(fn, request, **kw):
        if request.step == 6 and not fired:
            fired.append(1)
            raise KeyboardInterrupt
        return real(fn, request, **kw)

    ev._async.submit = submit
    g, returned = 0, []
    while g < 10:
        try:
            r = ev.evaluate(lambda request: calls.append(request.step) or {"acc": [1.0, 0.0]}, 0, g, g)
        except KeyboardInterrupt:
            continue  # (the loop runs the step again)
        returned.append(None if r is None else r.step)
        g += 1
    ev.close()
    assert fired and calls == list(range(10))
    # each step returns what it integrated, step 6 too (step 5's, lost with the Ctrl-C; a review)
    assert returned == [None] + list(range(9))


def test_a_ctrl_c_in_before_trains_submission_then_called_again_keeps_step_zeros_values():
    """A review: the mark that makes a step run again after a Ctrl-C in its submission was set for before_train's
    too, which is called again as it is: step 0's observe() then read as a repeat and was dropped (a NaN at step 0
    raised no alarm)."""
    def go(interrupt):
        ev, events = make(load_config(overrides=["trigger.freq_steps=5", "evaluation.asynchronous=true",
                                                 "trigger.eval_before_train=true"]), total_steps=16)
        real, fired = ev._async.submit, []

        def submit(fn, request, **kw):
            if interrupt and request.step == 0 and not fired:
                fired.append(1)
                raise KeyboardInterrupt
            return real(fn, request, **kw)

        ev._async.submit = submit
        fn = lambda request: {"acc": [1.0, 0.0]}  # noqa: E731
        while True:
            try:
                ev.before_train(fn, 0)
                break
            except KeyboardInterrupt:
                continue  # (the cell run again)
        for g in range(3):
            ev.observe({"loss": math.nan if g == 0 else 1.0}, g)
            ev.evaluate(fn, 0, g, g)
        ev.close()
        return [(e["kind"], e["step"], e.get("reason")) for e in events if e["kind"] in ("alarm", "submitted")]

    assert go(True) == go(False) == [("submitted", 0, "before_train"), ("alarm", 0, None),
                                     ("submitted", 0, "alarm:loss:nonfinite")]

"""Ctrl-C, SystemExit and cancelled coroutines in and around an evaluation (found by a probe that interrupted
evaluations as a notebook user does): what goes up to the user, what is a failed evaluation, and that nothing runs on
beside the next evaluation or keeps raising."""

import asyncio
import threading
import time

import pytest
import torch

from adaptive_eval import AdaptiveEvaluator, load_config
from adaptive_eval.asynchronous import DaemonThreadExecutor, SnapshotEval
from conftest import FakeClock


def make(*overrides, asynchronous=False):
    cfg = load_config(overrides=[f"evaluation.asynchronous={str(asynchronous).lower()}", "trigger.freq_steps=5",
                                 "policy.budget.enabled=false", *overrides])
    return AdaptiveEvaluator.from_config(cfg, total_steps=40, clock=FakeClock(), eval_clock=lambda: 0.0)


@pytest.mark.parametrize("kind", [KeyboardInterrupt, SystemExit, asyncio.CancelledError])
def test_a_base_exception_in_an_asynchronous_evaluate_fn_fails_that_evaluation_only(kind):
    """Raised as it was, a KeyboardInterrupt, SystemExit or CancelledError from the worker came back into the
    training loop at every later step and at every close(): the evaluator could never be closed."""
    def run(error):
        def fn(request):
            if request.step == 4:
                raise error("from the eval")
            return {"acc": [1.0, 0.0] * 8}

        ev = make("evaluation.on_error=skip", "evaluation.async_integrate_after_steps=2", asynchronous=True)
        for g in range(30):  # (nothing raised into the loop)
            ev.observe({"train/loss": 1.0}, g)
            ev.evaluate(fn, 0, g, g)
        ev.close()
        ev.close()  # (a second close is a no-op, not the error again)
        return ev.summary()["eval_errors"], [r.step for r in ev.history]

    errors, steps = run(kind)
    assert errors == 1 and len(steps) >= 2 and (errors, steps) == run(ValueError)  # as any failed evaluation


def test_a_cancelled_coroutine_in_a_synchronous_evaluate_fn_is_a_failed_evaluation_and_ctrl_c_still_goes_up():
    """asyncio.CancelledError (a BaseException) from an evaluate_fn's asyncio.run(...) killed training under
    on_error: skip; a Ctrl-C (KeyboardInterrupt) is the user's and goes up, not counted."""
    async def ask_server():
        raise asyncio.CancelledError()

    def fn(request):
        return asyncio.run(ask_server()) if request.step == 4 else {"acc": [1.0, 0.0] * 8}

    ev = make("evaluation.on_error=skip")
    for g in range(10):
        ev.evaluate(fn, 0, g, g)
    assert ev.summary()["eval_errors"] == 1 and [r.step for r in ev.history] == [9]

    def ctrl_c(request):
        raise KeyboardInterrupt

    ev = make("evaluation.on_error=skip")
    with pytest.raises(KeyboardInterrupt):
        for g in range(10):
            ev.evaluate(ctrl_c, 0, g, g)
    assert ev.summary()["eval_errors"] == 0


class InterruptedSnapshot(SnapshotEval):
    """The user's Ctrl-C lands while the weights are copied (seconds for a large model), once."""

    calls = 0

    def snapshot(self, step=None):
        self.calls += 1
        if self.calls == 2:
            raise KeyboardInterrupt
        return super().snapshot(step)


@pytest.mark.parametrize("on_error", ["skip", "raise"])
def test_a_ctrl_c_in_the_weights_snapshot_is_not_a_failed_evaluation(on_error):
    """It was counted as a failed evaluation ("did not start: KeyboardInterrupt"), and under on_error: raise the one
    Ctrl-C came back a step later as a RuntimeError."""
    fn = InterruptedSnapshot(torch.nn.Linear(2, 2), lambda request, weights: {"acc": [1.0, 0.0] * 8})
    ev = make(f"evaluation.on_error={on_error}", "evaluation.async_integrate_after_steps=1", asynchronous=True)
    raised = []
    g = 0
    while g < 20:
        try:
            ev.evaluate(fn, 0, g, g)
        except KeyboardInterrupt:
            raised.append(g)
        g += 1
    ev.close()
    assert len(raised) == 1 and ev.summary()["eval_errors"] == 0  # (nothing came back a step later)
    steps = [r.step for r in ev.history]
    assert raised[0] not in steps and len(steps) >= 2 and steps[0] < raised[0] < steps[-1]  # (it never started)


def test_close_waits_for_the_threads_of_finished_evaluations_to_end():
    """A worker thread still freed what it held (a weight snapshot) after its result was in; close() returned, and
    a daemon thread killed inside torch's C++ code at the interpreter's exit aborted the process (exit status 134,
    with a 270 MB model)."""
    class SlowToFree:
        def __del__(self):
            time.sleep(0.5)

    ex = DaemonThreadExecutor()
    future = ex.submit(lambda held: 1, SlowToFree())  # (its only reference: freed in the worker, after the result)
    assert future.result() == 1
    (thread, _), = ex._threads
    ex.shutdown(wait=False)
    ex.join_finished()
    assert not thread.is_alive()


def test_an_asynchronous_evaluators_close_joins_its_finished_threads(monkeypatch):
    """(The call the test above covers is made by close(), with close's time limit.)"""
    calls = []
    monkeypatch.setattr(DaemonThreadExecutor, "join_finished", lambda self, timeout_s=30.0: calls.append(timeout_s))
    ev = make(asynchronous=True)
    for g in range(6):
        ev.evaluate(lambda request: {"acc": [1.0, 0.0] * 8}, 0, g, g)
    ev.close(timeout_s=5.0)
    assert calls == [5.0]


def ctrl_c_in_the_wait_for_step_3(monkeypatch, started, release) -> None:
    """The user's Ctrl-C raised in the wait for step 3's evaluation thread (once it started), until ``release``."""
    real_join = threading.Thread.join

    def join(thread, timeout=None):
        if thread.name == "adaptive_eval-evaluate-step3" and not release.is_set():
            started.wait(30)
            raise KeyboardInterrupt
        return real_join(thread, timeout)

    monkeypatch.setattr(threading.Thread, "join", join)


def test_a_ctrl_c_while_a_timed_evaluation_runs_leaves_it_running_and_the_next_one_waits_for_it(monkeypatch):
    """With evaluation.timeout_s the evaluation runs in a thread; a Ctrl-C interrupted only the wait for it, and the
    next due evaluations ran beside the one still running (it is tracked now, as a timed-out one is).  The Ctrl-C is
    raised in the wait itself: a real SIGINT reaches the waiting thread only when the kernel hands it to that thread,
    which a test cannot make sure of.  (CPython 3.11 also marks a thread whose join() a Ctrl-C interrupted as stopped
    while it runs on, so Thread.is_alive() cannot tell; the evaluator keeps its own flag.)"""
    started, release, running, beside, calls = threading.Event(), threading.Event(), set(), [], []
    ctrl_c_in_the_wait_for_step_3(monkeypatch, started, release)

    def fn(request):
        running.add(request.step)
        calls.append(request.step)
        if len(running) > 1:
            beside.append(sorted(running))
        try:
            if request.step == 3:
                started.set()
                release.wait(30)
            return {"acc": [1.0, 0.0] * 8}
        finally:
            running.discard(request.step)

    ev = make("evaluation.timeout_s=60", "trigger.freq_steps=1")
    with pytest.raises(KeyboardInterrupt):
        for g in range(40):
            ev.evaluate(fn, 0, g, g)
    assert g == 3 and 3 in running
    for h in range(4, 9):  # the notebook cell re-run: on from the next step, while step 3's still runs
        ev.evaluate(fn, 0, h, h)
    assert beside == [] and calls[-1] == 3
    release.set()
    while running:
        time.sleep(0.01)
    for h in range(9, 40):
        if ev.evaluate(fn, 0, h, h) is not None:
            break
    assert calls[-1] == h and beside == []  # (evaluating again once it ended)


def test_after_a_ctrl_c_in_evaluate_fn_the_loop_run_again_from_that_step_evaluates_it_as_the_uninterrupted_run():
    """A notebook cell interrupted in evaluate_fn and run again from the same step: the evaluation came a step late
    (evaluate() at that step again returned None); only a state saved inside evaluate_fn ran it again."""
    def run(interrupt_at=None):
        ev = make()
        done, g = [], 0
        while g < 30:
            def fn(request):
                if request.step == interrupt_at and not done:
                    done.append(request.step)
                    raise KeyboardInterrupt
                return {"acc": [1.0, 0.0, 1.0] * 8}

            try:
                ev.observe({"train/loss": 1.0 + 0.01 * (g % 3)}, g)
                ev.evaluate(fn, 0, g, g)
            except KeyboardInterrupt:
                continue  # the cell run again from the step it stopped at
            g += 1
        return [(r.step, r.reason, r.items) for r in ev.history], ev.summary()

    plain, summary = run()
    steps = [s for s, _, _ in plain]
    again, summary_again = run(interrupt_at=steps[1])
    assert again == plain and summary_again["evals"] == summary["evals"]


def test_the_ctrl_c_d_step_run_again_waits_for_its_evaluation_still_running_and_takes_its_outcome(monkeypatch):
    """With evaluation.timeout_s, a Ctrl-C in the wait for step 3's evaluation and the loop running step 3 again (a
    notebook cell retried): it was skipped as "the one that timed out at step 3 is still running" and counted as an
    error, though nothing timed out, and the first evaluation came at step 12 (a new user's probe).  Without a
    timeout the step run again evaluates; with one it now waits for the same evaluation and takes its result."""
    started, release, calls = threading.Event(), threading.Event(), []
    ctrl_c_in_the_wait_for_step_3(monkeypatch, started, release)

    def fn(request):
        calls.append(request.step)
        if request.step == 3:
            started.set()
            release.wait(30)
            return {"acc": [1.0] * 16}
        return {"acc": [1.0, 0.0] * 8}

    ev = make("evaluation.timeout_s=60", "trigger.freq_steps=4")
    with pytest.raises(KeyboardInterrupt):
        for g in range(10):
            ev.evaluate(fn, 0, g, g)
    assert g == 3
    threading.Timer(0.2, release.set).start()
    result = ev.evaluate(fn, 0, 3, 3)  # the step run again
    assert result is not None and result["acc"].mean == 1.0 and calls == [3]  # (its outcome, not a second run)
    assert ev.summary()["eval_errors"] == 0


def test_a_signal_handlers_state_dict_inside_a_clock_reading_does_not_hang(tmp_path):
    """A review: with clock=, each reading held a lock while the user's clock ran; a preemption handler calling
    state_dict() (which reads the clock) that landed inside a reading waited for that lock forever."""
    import subprocess
    import sys
    import textwrap

    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent("""
        import signal, sys, time
        from adaptive_eval import AdaptiveEvaluator, load_config

        arm = [False]

        def clock():
            t = time.monotonic()
            if arm[0]:
                arm[0] = False
                signal.raise_signal(signal.SIGUSR1)  # a signal arriving while the clock is read
            return t

        ev = AdaptiveEvaluator.from_config(load_config(overrides=["trigger.freq_steps=5",
                                                                  "policy.budget.enabled=false"]), clock=clock)

        def handler(signum, frame):
            print("saved", sorted(ev.state_dict())[:1], flush=True)
            sys.exit(0)

        signal.signal(signal.SIGUSR1, handler)
        for s in range(100):
            ev.observe({"train/loss": 1.0}, s)
            if s == 9:
                arm[0] = True  # (the next reading: a due decision's)
            ev.evaluate(lambda r: {"acc": [1.0, 0.0]}, 0, s, s)
    """))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("saved"), proc.stderr


def test_an_evaluator_with_its_own_clock_pickles_and_copies():
    """A review: the clock's lock made an evaluator built with clock= unpicklable (ddp_spawn pickles a framework
    callback and its evaluator), and copy.deepcopy failed too."""
    import copy
    import pickle

    ev = AdaptiveEvaluator.from_config(load_config(overrides=["trigger.freq_steps=5"]), clock=time.monotonic)
    for g in range(12):
        ev.observe({"train/loss": 1.0}, g)
        ev.evaluate(lambda r: {"acc": [1.0, 0.0]}, 0, g, g)
    for again in (pickle.loads(pickle.dumps(ev)), copy.deepcopy(ev)):
        assert [r.step for r in again.history] == [r.step for r in ev.history]
        mine, its = ev.state_dict(), again.state_dict()
        assert mine.pop("elapsed") <= its.pop("elapsed") and its == mine  # (the time read later, on the same clock)


def test_a_handlers_close_while_evaluate_waits_for_a_result_integrates_it_once():
    """A review: a SIGTERM-style handler that closes the evaluator (a graceful shutdown) while evaluate() waits in
    take() for a due asynchronous result: close() integrated it, then evaluate() integrated it again (history
    [4, 4], summary evals 2)."""
    import signal

    ev = AdaptiveEvaluator(load_config(overrides=["trigger.freq_steps=5", "evaluation.asynchronous=true",
                                                  "evaluation.async_integrate_after_steps=1",
                                                  "policy.budget.enabled=false"]), total_steps=100)

    def slow(request):
        time.sleep(1.0)
        return {"acc": [1.0, 0.0, 1.0, 1.0]}

    stop = []
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: (ev.close(), stop.append(signum)))
    try:
        for s in range(20):
            if stop:
                break
            ev.observe({"train/loss": 1.0}, s)
            if s == 5:
                signal.setitimer(signal.ITIMER_REAL, 0.2)  # (arrives while evaluate(5) waits for step 4's result)
            ev.evaluate(slow, 0, s, s)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert stop and [r.step for r in ev.history] == [4] and ev.summary()["evals"] == 1


def test_an_asynchronous_evaluator_with_work_in_flight_refuses_a_copy_saying_why():
    """A probe: pickle or deepcopy of an asynchronous evaluator mid-run raised "Can't pickle local object
    'DaemonThreadExecutor.submit.<locals>.target'" or "cannot pickle '_thread.lock'", saying nothing of why; with
    nothing in flight it pickles, and the copy decides as the original."""
    import copy
    import pickle

    def fn(request):
        return {"acc": [1.0, 0.0, 1.0]}

    ev = AdaptiveEvaluator.from_config(load_config(overrides=[
        "trigger.freq_steps=5", "evaluation.asynchronous=true", "evaluation.async_integrate_after_steps=3",
        "policy.budget.enabled=false", "policy.interval.enabled=false"]), clock=lambda: 0.0, eval_clock=lambda: 0.0)
    for g in range(20):
        ev.observe({"train/loss": 1.0}, g)
        ev.evaluate(fn, 0, g, g)
    with pytest.raises(TypeError, match=r"cannot copy an evaluator with asynchronous evaluations in flight \(of steps "
                                        r"19\): close\(\) it first, or take state_dict\(\)"):
        pickle.dumps(ev)
    for g in range(20, 23):
        ev.observe({"train/loss": 1.0}, g)
        ev.evaluate(fn, 0, g, g)
    again = copy.deepcopy(ev)
    for e in (ev, again):
        for g in range(23, 40):
            e.observe({"train/loss": 1.0}, g)
            e.evaluate(fn, 0, g, g)
        e.close()
    assert [r.step for r in again.history] == [r.step for r in ev.history] and len(ev.history) >= 7

"""Crash safety of the trace recorder: SIGKILL at random moments, SIGTERM, normal exit.

A child process records lines (nasty floats, repeated steps, new CSV columns now and then) and prints the
index of each line once ``record()`` has returned (the acknowledgement).  The parent kills it after a random
delay and reads the file back: every acknowledged line must be there, exactly; at most the one line being
written when the kill came may be missing.  TensorBoard's flushing on close, exit and SIGTERM is shown in
tests/test_tensorboard.py; here the recorder, which writes every record at once and so has nothing to flush.
"""

import concurrent.futures
import math
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import pytest

from adaptive_eval.trace import read_trace

# Shared by the child (as source) and the parent (exec'ed below): the i-th line the child records.
LINES = textwrap.dedent("""
    import math
    NASTY = [0.0, -0.0, 5e-324, 1e-310, 1.7976931348623157e308, -1.7976931348623157e308, math.nan, math.inf,
             -math.inf, 1 / 3, -2.5e-17, 123456789.123456789]

    def line(i):
        '''(step, metrics, epoch, time) of line i: two lines a step, a new metric every 40 lines.'''
        step = i // 2
        metrics = {"train/reward": NASTY[i % len(NASTY)], "train/loss": 1 / 7 + i * 1e-3}
        if i % 2:
            metrics["eval/accuracy"] = (i % 100) / 100
        if i % 40 == 39:
            metrics[f"extra/{i // 40}"] = float(i)  # CSV: the header is rewritten with the new column
        return step, metrics, step // 50, i * 0.5
""")
exec(LINES)  # defines line()

CHILD = LINES + textwrap.dedent("""
    import sys
    from adaptive_eval.trace import TraceRecorder
    rec = TraceRecorder(sys.argv[1])
    i = 0
    while True:
        step, metrics, epoch, t = line(i)
        rec.record(step, metrics, epoch=epoch, time=t)
        sys.stdout.write(f"{i}\\n")
        sys.stdout.flush()
        i += 1
""")

RUNS_PER_FORMAT = 12  # 24 kills in all


def same(a, b) -> bool:
    return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))


def expected_records(n: int) -> list:
    """The first ``n`` lines, merged per step as the reader merges them: (step, epoch, time, metrics)."""
    out = []
    for i in range(n):
        step, metrics, epoch, t = line(i)
        if out and out[-1][0] == step:
            out[-1][3].update(metrics)
            out[-1] = (step, epoch, t, out[-1][3])
        else:
            out.append((step, epoch, t, dict(metrics)))
    return out


def matches(trace, n: int) -> bool:
    want = expected_records(n)
    if len(trace) != len(want):
        return False
    for rec, (step, epoch, t, metrics) in zip(trace, want):
        if (rec.step, rec.epoch, rec.time) != (step, epoch, t) or set(rec.metrics) != set(metrics):
            return False
        if not all(same(rec.metrics[k], v) for k, v in metrics.items()):
            return False
    return True


def kill_at_random(path, delay: float) -> tuple[int, object]:
    """Start a recording child, SIGKILL it ``delay`` s after its first acknowledgement; (acked, trace)."""
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE, text=True)
    acked, first = [], threading.Event()

    def drain():
        for text in proc.stdout:
            if text.endswith("\n"):  # a torn acknowledgement does not count
                acked.append(int(text))
                first.set()
        first.set()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        assert first.wait(60), "the recording child never acknowledged a record"
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(30)
    proc.stdout.close()
    assert acked == list(range(len(acked)))
    return len(acked), path


def read_back(path):
    """The trace as read after the kill: a torn last line is dropped with a warning, and the lines repeat steps
    with other values (a warning too).  Read in the main thread: warnings.catch_warnings is not thread-safe
    (read in the pool's threads, one run's warning escaped the filter)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return read_trace(path)


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_sigkill_at_random_moments_loses_no_acknowledged_record(tmp_path, suffix):
    rng = random.Random(f"sigkill{suffix}")
    delays = [rng.uniform(0.0, 0.12) for _ in range(RUNS_PER_FORMAT)]
    # Four children at a time: the runs take their random delays concurrently.
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        killed = list(pool.map(lambda a: kill_at_random(tmp_path / f"run{a[0]}{suffix}", a[1]),
                               enumerate(delays)))
    outcomes = [(n, read_back(path)) for n, path in killed]
    in_flight_found = 0
    for n, trace in outcomes:
        # Every acknowledged line reads back exactly; the line in flight at the kill may be there or not.
        ok_acked, ok_in_flight = matches(trace, n), matches(trace, n + 1)
        assert ok_acked or ok_in_flight, f"{n} acknowledged lines, {len(trace)} records read back"
        in_flight_found += ok_in_flight
    print(f"\n{suffix}: {len(outcomes)} runs killed, {sum(n for n, _ in outcomes)} acknowledged lines, 0 lost; "
          f"the unacknowledged line in flight was found whole {in_flight_found} times")
    assert sum(n for n, _ in outcomes) > 100 * RUNS_PER_FORMAT  # killed mid-run, not before it started
    if suffix == ".csv":
        # Some kills came after header rewrites (a new column every 40 lines).
        assert max(n for n, _ in outcomes) > 80


# -- SIGTERM and normal exit ----------------------------------------------------------------------------------

SIGNALLED = textwrap.dedent("""
    import os, sys, time
    from adaptive_eval.trace import TraceRecorder
    path, mode = sys.argv[1], sys.argv[2]
    if mode in ("with_tensorboard", "helper_thread"):  # a TensorBoard logger installs its SIGTERM handler
        from adaptive_eval.tensorboard import TensorBoardLogger
        tb = TensorBoardLogger(os.path.join(os.path.dirname(path), "tb"), flush_secs=3600)
        tb.log(0, {"streams/x": 1.0})
    rec = TraceRecorder(path)  # never closed
    for step in range(25):
        rec.record(step, {"train/loss": step / 4, "train/reward": float("nan") if step == 7 else 0.5})
    if mode == "exit":
        sys.exit(0)
    print("ready", flush=True)
    if mode == "helper_thread":  # the kernel may hand a process's SIGTERM to any thread: here, to a helper
        import signal, threading
        threading.Thread(target=lambda: signal.pthread_kill(threading.get_ident(), signal.SIGTERM)).start()
    # Short sleeps, not one sleep(60): numpy's OpenBLAS runs a worker thread, and when the kernel delivers the
    # SIGTERM to it, Python's handler runs only once the main thread is back in Python code; one long sleep
    # would hold it off for 60 s (the cause of this test's rare timeouts).
    for _ in range(1200):
        time.sleep(0.05)
""")


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
@pytest.mark.parametrize("mode,sig", [("exit", None), ("plain", signal.SIGTERM),
                                      ("with_tensorboard", signal.SIGTERM), ("plain", signal.SIGKILL)])
def test_every_record_survives_exit_sigterm_and_sigkill_without_close(tmp_path, suffix, mode, sig):
    path = tmp_path / f"t{suffix}"
    proc = subprocess.Popen([sys.executable, "-c", SIGNALLED, str(path), mode], stdout=subprocess.PIPE, text=True)
    if sig is not None:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(sig)
    proc.communicate(timeout=60)
    assert proc.returncode == (0 if sig is None else -sig)
    trace = read_trace(path)  # no torn line, no warning: each record was written whole at once
    assert trace.steps().tolist() == list(range(25))
    assert [r.metrics["train/loss"] for r in trace] == [s / 4 for s in range(25)]
    assert math.isnan(trace.records[7].metrics["train/reward"])
    if mode == "with_tensorboard":
        assert read_trace(tmp_path / "tb").records[0].metrics["x"] == 1.0  # flushed by its handler


def test_sigterm_delivered_to_a_helper_thread_still_flushes_and_terminates(tmp_path):
    """Python runs signal handlers in the main thread: a SIGTERM that lands on another thread (numpy's OpenBLAS
    worker, a data-loader thread) is handled when the main thread next runs Python code, flushes the TensorBoard
    log and terminates as SIGTERM would."""
    proc = subprocess.Popen([sys.executable, "-c", SIGNALLED, str(tmp_path / "t.jsonl"), "helper_thread"],
                            stdout=subprocess.PIPE, text=True)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGTERM
    assert read_trace(tmp_path / "t.jsonl").steps().tolist() == list(range(25))
    assert read_trace(tmp_path / "tb").records[0].metrics["x"] == 1.0


def test_adaptive_evaluator_record_to_survives_sigkill(tmp_path):
    path = tmp_path / "run.jsonl"
    code = textwrap.dedent("""
        import sys
        from adaptive_eval import AdaptiveEvaluator, load_config
        ev = AdaptiveEvaluator.from_config(load_config("areal", ["trigger.freq_steps=5"]))
        ev.record_to(sys.argv[1])
        for g in range(40):
            ev.observe({"train/loss": g / 10}, g)
            ev.evaluate(lambda: {"acc": 0.5}, 0, g, g)
        print("ready", flush=True)
        import time; time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    trace = read_trace(path)
    assert trace.steps().tolist() == list(range(40))
    assert trace.column("eval/acc")[0].tolist() == [4, 9, 14, 19, 24, 29, 34, 39]


def test_what_a_saved_state_covers_is_in_tensorboard_after_a_sigkill(tmp_path):
    """A probe (AReaL's checkpoint, then the job killed): state_dict() flushed nothing, so the stream points logged
    since the last flush (steps 32-39 of 40) were lost from TensorBoard for good, though the state covered them."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    folder = tmp_path / "tb"
    code = textwrap.dedent("""
        import json, sys
        from adaptive_eval import AdaptiveEvaluator, load_config
        ev = AdaptiveEvaluator.from_config(load_config(overrides=[f"logging.tensorboard_dir={sys.argv[1]}",
                                                                  "trigger.freq_steps=10"]), total_steps=100)
        for g in range(40):
            ev.observe({"train/loss": 1.0 + 0.01 * (g % 3)}, g)
            ev.evaluate(lambda: {"acc": 1.0}, 0, g, g)
        json.dumps(ev.state_dict())  # the checkpoint of step 39
        print("ready", flush=True)
        import time; time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code, str(folder)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    acc = EventAccumulator(str(folder))
    acc.Reload()
    assert [e.step for e in acc.Scalars("streams/train/loss")] == list(range(40))


def test_state_dict_flushes_the_librarys_own_writer_only():
    """A review: flushing a user's logger from state_dict() deadlocked when a preemption handler took the state while
    the training thread was inside that logger's log(), both under its lock; the library's own writer takes none."""
    from adaptive_eval import AdaptiveEvaluator, load_config
    from adaptive_eval.loggers import MetricLogger

    class Mine(MetricLogger):
        flushes = 0

        def log(self, step, scalars):
            pass

        def flush(self):
            Mine.flushes += 1

    ev = AdaptiveEvaluator.from_config(load_config(), logger=Mine())
    ev.observe({"train/loss": 1.0}, 0)
    ev.state_dict()
    assert Mine.flushes == 0


def test_a_forked_child_leaving_the_evaluators_with_block_neither_hangs_nor_writes_the_parents_files(tmp_path):
    """A child forked with an asynchronous evaluation in flight (os.fork, a DataLoader worker) that leaves the
    training script's ``with AdaptiveEvaluator(...)`` block: its close() waited for an evaluation thread that does
    not exist in it (a hang; the parent blocked in waitpid), and flushing its copies of the logger and recorder
    wrote their buffers a second time.  The child's close() leaves them to the parent."""
    code = textwrap.dedent("""
        import os, sys, threading, time
        from adaptive_eval import AdaptiveEvaluator, load_config
        from adaptive_eval.tensorboard import make_logger
        release = threading.Event()
        def slow_eval(request):
            release.wait(30)
            return {"acc": [1.0] * 8}
        cfg = load_config(overrides=["evaluation.asynchronous=true", "trigger.freq_steps=5",
                                     "evaluation.async_integrate_after_steps=null"])
        with AdaptiveEvaluator(cfg, logger=make_logger(sys.argv[1] + "/tb")) as ev:
            ev.record_to(sys.argv[1] + "/trace.csv")
            for g in range(6):
                ev.observe({"train/loss": g / 10}, g)
                ev.evaluate(slow_eval, 0, g, g)
            t0 = time.monotonic()
            pid = os.fork()
            if pid == 0:
                sys.exit(0)  # leaves the with block: close() in the child
            os.waitpid(pid, 0)
            print(f"child {time.monotonic() - t0:.1f}", flush=True)
            release.set()
            for g in range(6, 12):
                ev.observe({"train/loss": g / 10}, g)
                ev.evaluate(slow_eval, 0, g, g)
        print("done", ev.summary()["evals"], flush=True)
    """)
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr  # (it hung until distributed.timeout_s, 600 s)
    assert float(proc.stdout.split("child ")[1].split()[0]) < 10, proc.stdout
    assert "done" in proc.stdout and "failed" not in proc.stderr, proc.stderr
    lines = (tmp_path / "trace.csv").read_text().splitlines()
    steps = [int(line.split(",")[0]) for line in lines[1:]]
    # in order (an evaluation's result is a second line at the step it was integrated), nothing from the child
    assert steps == sorted(steps) and sorted(set(steps)) == list(range(12)), steps
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    assert [e.step for e in acc.Scalars("streams/train/loss")] == list(range(12))


def test_a_forked_child_that_trains_with_the_parents_evaluator_closes_it():
    """The evaluator built before the fork, training in the child (a multiprocessing 'fork' Process): its close()
    integrates the evaluations in flight (a pid check made it a no-op: no result, found in review)."""
    code = textwrap.dedent("""
        import os, sys
        from adaptive_eval import AdaptiveEvaluator, load_config
        cfg = load_config(overrides=["evaluation.asynchronous=true", "trigger.freq_steps=5",
                                     "evaluation.async_integrate_after_steps=null"])
        ev = AdaptiveEvaluator(cfg)
        pid = os.fork()
        if pid == 0:
            for g in range(12):
                ev.observe({"train/loss": g / 10}, g)
                ev.evaluate(lambda request: {"acc": [1.0] * 8}, 0, g, g)
            ev.close()
            print("child", [r.step for r in ev.history], flush=True)
            os._exit(0)
        os.waitpid(pid, 0)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "child [4" in proc.stdout, proc.stdout  # (the evaluation of step 4 at least: it was "child []")


def test_a_forked_childs_observe_leaves_the_parents_trace_alone(tmp_path):
    """A DataLoader worker (a forked child) that observed a stream of its own rewrote the parent's CSV under it (a
    new column), and the parent went on appending to the unlinked file: the rest of its run was lost without a word
    (a new user's probe).  The child's recording fails, said in its own log; the parent's trace is whole."""
    code = textwrap.dedent("""
        import os, sys
        from adaptive_eval import AdaptiveEvaluator, load_config
        ev = AdaptiveEvaluator(load_config(overrides=["trigger.freq_steps=5"]), total_steps=20)
        ev.record_to(sys.argv[1])
        for s in range(20):
            ev.observe({"train/loss": 1.0 + 0.01 * s}, s)
            ev.evaluate(lambda r: {"acc": [1.0, 0.0]}, 0, s, s)
            if s == 8:
                pid = os.fork()
                if pid == 0:
                    ev.observe({"worker/queue_len": 3.0}, s)
                    ev.observe({"train/loss": 3.0}, s)
                    print("child errors", ev.summary()["record_errors"], flush=True)
                    os._exit(0)
                os.waitpid(pid, 0)
        ev.close()
        print("evaluated", [r.step for r in ev.history], flush=True)
    """)
    path = tmp_path / "trace.csv"
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "child errors 2" in proc.stdout, (proc.stdout, proc.stderr)
    assert "forked child" in proc.stderr and "record_to() a file of its own" in proc.stderr
    trace = read_trace(path)
    assert trace.steps().tolist() == list(range(20)) and "worker/queue_len" not in trace.metric_names()
    assert trace.column("train/loss")[1][8] == 1.08
    assert f"evaluated {trace.column('eval/acc')[0].tolist()}" in proc.stdout  # (the last: at step 19)


def test_state_dict_waits_for_the_evaluation_threads_whose_result_it_took_to_end(monkeypatch):
    """A preemption's handler saves state_dict() and the script ends without close(): the evaluation thread whose
    result the state took was still ending (freeing what it held, in torch) at exit, and the process aborted
    ("terminate called without an active exception", status 134) in 1 to 5 of 8 runs (a new user's probe).
    state_dict() now joins such threads, as close() does."""
    import torch

    from adaptive_eval import AdaptiveEvaluator, load_config
    from adaptive_eval.asynchronous import SnapshotEval

    cfg = load_config(overrides=["trigger.freq_steps=10", "evaluation.asynchronous=true",
                                 "evaluation.async_integrate_after_steps=3"])
    ev = AdaptiveEvaluator.from_config(cfg, total_steps=60, clock=lambda: 0.0, eval_clock=lambda: 0.0)
    fn = SnapshotEval(torch.nn.Linear(1, 1, bias=False), lambda request, weights: {"acc": [1.0, 0.0] * 50})
    for step in range(11):
        ev.observe({"train/loss": 1.0}, step)
        ev.evaluate(fn, 0, step, step)
    assert [j.step for j in ev._async.jobs] == [9]
    joined, join = [], threading.Thread.join
    monkeypatch.setattr(threading.Thread, "join", lambda t, timeout=None: joined.append(t.name) or join(t, timeout))
    ev.state_dict()
    assert "adaptive_eval-async-eval" in joined
    ev.close()

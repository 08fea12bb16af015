"""Faults in a process group, through the AdaptiveEvaluator: a hung rank, a stalled rank, a dead rank.

tests/test_distributed.py covers a dead and a hung rank inside ``run_evaluation_outcome`` and an exception on one rank;
tests/test_adaptive_distributed.py an exception on one rank (skip and raise) through the AdaptiveEvaluator.
Here, in a training loop under the AdaptiveEvaluator, the other rank must get a clear ``CollectiveError``
within ``distributed.timeout_s`` (never a hang) when a rank

* hangs inside ``evaluate_fn`` (with ``evaluation.timeout_s`` also set: in a group it adds no thread; the
  collective timeout is what bounds the evaluation),
* stops calling ``evaluate`` (its loop broke off, the process lives on),
* dies in the middle of the run.

All three run in one spawned pair of processes (spawning costs seconds): each case on its own subgroup, with a
barrier on a separate group (default timeout) in between, and the dying rank last.
"""

import os
import pickle
import threading
import time

import numpy as np
import pytest

from adaptive_eval import AdaptiveEvaluator, load_config
from conftest import FakeClock
from dist_utils import run_ranks

pytestmark = pytest.mark.xdist_group(__name__)  # (under pytest -n: its module-scoped runs on one worker)

TIMEOUT_S = 1.0  # distributed.timeout_s in every case
SLACK_S = 4.0 if os.environ.get("PYTEST_XDIST_WORKER") else 2.0  # a loaded two-core machine (-n 2: more)


def config(**extra):
    # The plain schedule (evaluations at steps 4, 9, 14, ...), so the step of each fault is known.
    return load_config("areal", ["trigger.freq_steps=5", f"distributed.timeout_s={TIMEOUT_S}",
                                  *[f"{k}={v}" for k, v in extra.items()]])


def loop(rank, group, cfg, steps, *, fault_at, fault, evaluate_fn=None, keep_going=False, ready=None):
    """A training loop on this rank; returns (what happened, the step, seconds spent in the failing call).
    ``keep_going``: the loop catches a CollectiveError and goes on; returns ("caught", the step, the results
    and errors of the later calls).  ``ready``: called once the evaluator is built, before the first step (a
    barrier: on a loaded machine one rank could still be building its evaluator more than the 1 s collective
    timeout after the other's first collective, a timeout at step 0 that is not the fault under test)."""
    from adaptive_eval.distributed import CollectiveError

    clock = FakeClock()
    ev = AdaptiveEvaluator.from_config(cfg, clock=clock, group=group)
    if ready is not None:
        ready()
    threads = []

    def fn(req):
        threads.append(threading.current_thread() is threading.main_thread())
        if req.step >= fault_at and rank == 1 and fault == "hang" and not (keep_going and req.step > fault_at + 5):
            time.sleep(TIMEOUT_S + 1.5)  # far longer than the collective timeout
        return {"acc": [1.0] * len(req.indices(100))}

    caught, later = None, []
    for g in range(steps):
        clock.advance(10.0)
        if rank == 1 and g == fault_at and fault == "stall":
            time.sleep(TIMEOUT_S + 1.0)  # its loop broke off; the process lives on
            return ("stalled", g, None, threads)
        if rank == 1 and g == fault_at and fault == "die":
            os._exit(3)
        ev.observe({"train/loss": 1.0 + 0.01 * (g % 5)}, g)
        start = time.monotonic()
        try:
            r = ev.evaluate(evaluate_fn or fn, 0, g, g)
            if caught is not None:
                later.append(r)
        except CollectiveError as exc:
            if not keep_going:
                return ("CollectiveError", g, time.monotonic() - start, threads, str(exc))
            if caught is None:
                caught = g
            else:
                later.append("CollectiveError")
    if keep_going:
        return ("caught", caught, later)
    return ("finished", steps, None, threads)


def _faults_rank(rank, world, out_dir):
    import torch.distributed as dist

    sync = dist.new_group(backend="gloo")  # default timeout: the barrier between cases
    results = {}
    for case in ("hang", "stall", "caught"):
        sub = dist.new_group(backend="gloo")
        cfg = config(**({"evaluation.timeout_s": 0.3} if case == "hang" else {}))
        results[case] = loop(rank, sub, cfg, 40, fault_at=12, fault="hang" if case == "caught" else case,
                             keep_going=case == "caught", ready=lambda: dist.barrier(group=sync))
        dist.barrier(group=sync)
    with open(os.path.join(out_dir, f"rank{rank}.pkl"), "wb") as f:
        pickle.dump(results, f)
    sub = dist.new_group(backend="gloo")
    results["die"] = loop(rank, sub, config(), 40, fault_at=17, fault="die", ready=lambda: dist.barrier(group=sync))
    with open(os.path.join(out_dir, f"rank{rank}.pkl"), "wb") as f:
        pickle.dump(results, f)
    return results


@pytest.fixture(scope="module")
def faults(tmp_path_factory):
    out = tmp_path_factory.mktemp("faults")
    start = time.monotonic()
    with pytest.raises(AssertionError, match="rank 1 died"):
        run_ranks(_faults_rank, str(out), timeout_s=90, collective_timeout_s=30)  # TimeoutError on a hang
    seconds = time.monotonic() - start
    ranks = [pickle.loads((out / f"rank{r}.pkl").read_bytes()) for r in range(2)]
    print(f"\ndistributed fault cases: 3 run on 2 ranks in {seconds:.1f} s, hangs: 0")
    return ranks


def test_a_rank_hanging_in_evaluate_fn_is_a_collective_error_on_the_other_within_the_timeout(faults):
    r0, r1 = faults[0]["hang"], faults[1]["hang"]
    kind, step, seconds, main_thread_calls, message = r0
    assert kind == "CollectiveError" and step == 14  # the first evaluation at or after step 12
    assert TIMEOUT_S * 0.9 <= seconds < TIMEOUT_S + SLACK_S, seconds
    assert "gather_objects failed on rank 0 of 2 (timeout 1 s)" in message
    # ... and says the usual cause in a user's loop (a call on the main process only read as a bare timeout)
    assert "every rank calls observe(), evaluate() and close() at every step" in message
    # evaluation.timeout_s adds no thread in a group: evaluate_fn ran in the main thread on both ranks.
    assert main_thread_calls and all(main_thread_calls) and all(r1[3])
    # The late rank does not hang either, nor complete its collective from the data buffered and go on issuing
    # collectives that paired with the other rank's training all-reduce (its gradient silently mixed with our
    # bookkeeping; a probe): it reads the other's failure in the store and issues none
    assert r1[0] == "CollectiveError" and r1[1] == 14, r1[:2]
    assert "gather_objects not issued on rank 1 of 2: a collective of this evaluator already failed on another rank " \
           "(rank 0: gather_objects)" in r1[4]


def test_after_a_collective_error_a_loop_that_goes_on_gets_no_more_collectives_nor_evaluations(faults):
    """A user who catches the CollectiveError and trains on: the ranks used to go on evaluating out of step,
    pairing one rank's collectives with the other's (a 'successful' evaluation on one, errors on the other,
    a hang at exit).  Now each rank stops evaluating at its own failure: every later call returns None."""
    (k0, s0, later0), (k1, s1, later1) = faults[0]["caught"], faults[1]["caught"]
    assert k0 == k1 == "caught" and s0 == 14 and s1 is not None and s1 >= 14, (s0, s1)
    assert later0 == [None] * (40 - 1 - s0) and later1 == [None] * (40 - 1 - s1)


def test_a_rank_that_stops_calling_evaluate_is_a_collective_error_on_the_other(faults):
    kind, step, seconds, _, message = faults[0]["stall"]
    assert kind == "CollectiveError" and step == 12 and "all_reduce_max failed on rank 0 of 2" in message
    assert TIMEOUT_S * 0.9 <= seconds < TIMEOUT_S + SLACK_S, seconds
    assert faults[1]["stall"][:2] == ("stalled", 12)


def test_a_rank_dying_mid_run_is_a_collective_error_on_the_other_at_once(faults):
    kind, step, seconds, _, message = faults[0]["die"]
    assert kind == "CollectiveError" and step == 17 and "rank 0 of 2" in message
    assert seconds < TIMEOUT_S + SLACK_S  # a dead peer is usually seen at once
    assert "die" not in faults[1]  # rank 1 never got to write it


def _two_rank_state(rank, world, extra=(), until=40):
    """A sharded run of 60 items x 2 answers on two ranks: its state after step ``until`` - 1, as every rank saves
    it."""
    import json

    import numpy as np

    ev = AdaptiveEvaluator.from_config(load_config("default", ["trigger.freq_steps=10", "evaluation.sample_size=60",
                                                               *extra]), clock=FakeClock(), total_steps=200)
    rng = np.random.default_rng(rank)

    def fn(req):
        return {"acc": (rng.random((len(req.indices(60)), 2)) < 0.6).astype(float)}

    for g in range(until):
        ev.clock.advance(1.0)
        ev.evaluate(fn, 0, g, g)
    return json.loads(json.dumps(ev.state_dict(timeout_s=0)))


def test_a_state_from_a_group_of_another_size_is_said_and_its_shards_pairing_is_not_used(caplog):
    """A new user's elastic restart, 4 ranks to 2 or 1: each rank's last per-item values are of its old shard, so
    the first paired difference after the resume used part of the items as the whole (n 76 of 301, no longer
    significant; the schedule then changed), without a word.  The group's size is now in the state: another one is
    said, and the next evaluation is not paired (the ones after it are, on every item)."""
    states = run_ranks(_two_rank_state, world=2)
    assert states[0]["shape"]["world"] == 2
    clock = FakeClock()
    ev = AdaptiveEvaluator.from_config(load_config("default", ["trigger.freq_steps=10", "evaluation.sample_size=60"]),
                                       clock=clock, total_steps=200)
    with caplog.at_level("WARNING", logger="adaptive_eval"):
        ev.load_state_dict(states[0])
    assert "the state was taken in a group of 2 processes, loaded in 1" in caplog.text
    for g in range(40, 200):
        clock.advance(1.0)
        ev.evaluate(lambda req: {"acc": np.ones((len(req.indices(60)), 2))}, 0, g, g)
    resumed = [r for r in ev.history if r.step >= 40]
    assert len(resumed) >= 2 and "acc" not in resumed[0].paired and resumed[1].paired["acc"].n == resumed[0].items

    # Asynchronous, an evaluation in flight at the save: it fails as lost, in one process too (4 ranks to 1: rank 0's
    # shard of 76 items came back as the whole evaluation of 301)
    extra = ["evaluation.asynchronous=true", "evaluation.async_integrate_after_steps=8"]
    states = run_ranks(_two_rank_state, extra, 35, world=2)
    [job] = states[0]["async"]["jobs"]  # (submitted at step 31, due at 39)
    ev = AdaptiveEvaluator.from_config(load_config("default", ["trigger.freq_steps=10", "evaluation.sample_size=60",
                                                               *extra]), clock=clock, total_steps=200)
    ev.load_state_dict(states[0])
    for g in range(35, 60):
        clock.advance(1.0)
        ev.evaluate(lambda req: {"acc": np.ones((len(req.indices(60)), 2))}, 0, g, g)
    ev.close()
    assert job["step"] not in [r.step for r in ev.history] and ev.summary()["eval_errors"] == 1


def _timeout_said(rank, world):
    import logging

    said = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())
    logging.getLogger("adaptive_eval").addHandler(handler)
    try:
        AdaptiveEvaluator.from_config(load_config("default", ["evaluation.timeout_s=2"]), clock=FakeClock())
    finally:
        logging.getLogger("adaptive_eval").removeHandler(handler)
    return said


def test_evaluation_timeout_s_in_a_process_group_is_said_not_to_bound_a_synchronous_evaluation():
    """A new user set evaluation.timeout_s: 2 in a group and waited 8 s on a slow rank without a word (it is
    documented: no thread is left behind in a group; distributed.timeout_s bounds the wait).  Said once, on rank 0."""
    said = run_ranks(_timeout_said, world=2)
    assert [sum("evaluation.timeout_s (2 s) does not bound a synchronous evaluation in a process group" in m
                for m in s) for s in said] == [1, 0]


def _async_close_after_failure_rank(rank, world):
    from adaptive_eval.distributed import CollectiveError

    cfg = load_config(overrides=["trigger.freq_steps=5", f"distributed.timeout_s={TIMEOUT_S}",
                                 "evaluation.asynchronous=true", "evaluation.async_integrate_after_steps=20",
                                 "policy.budget.enabled=false", "evaluation.precision=none"])
    clock = FakeClock()
    ev = AdaptiveEvaluator.from_config(cfg, clock=clock, total_steps=40)
    caught = None
    for g in range(40):
        clock.advance(10.0)
        if rank == 1 and g == 12:
            time.sleep(TIMEOUT_S + 1.0)  # its loop broke off; the process lives on, never closing
            return ("stalled",)
        ev.observe({"train/loss": 1.0}, g)
        try:
            ev.evaluate(lambda request: {"acc": [1.0] * len(request.indices(100))}, 0, g, g)
        except CollectiveError:
            caught = g
            break
    events = []
    ev.add_listener(events.append)
    try:
        ev.close()
    except CollectiveError as exc:
        return ("close raised", caught, str(exc))
    return ("closed", caught, [e["error"] for e in events if e["kind"] == "error"])


def test_close_after_the_group_failed_runs_no_collective_and_fails_what_was_in_flight_saying_why():
    """A probe: asynchronous, a rank's loop broke off; the other got its CollectiveError, and then its close() ran
    one more collective (broadcasting the evaluations in flight), which waited distributed.timeout_s again, raised
    CollectiveError from close(), and left one more unmatched operation in gloo to wait on at exit."""
    r0, r1 = run_ranks(_async_close_after_failure_rank, timeout_s=90, collective_timeout_s=10)
    assert r1 == ("stalled",)
    kind, caught, errors = r0
    assert kind == "closed" and caught == 12, r0
    assert errors and all("in flight when the process group failed (step 12:" in e for e in errors)


def _fails_beside_a_barrier_rank(rank, world):
    import datetime
    import logging

    import torch.distributed as dist

    from adaptive_eval.distributed import CollectiveError

    said = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())
    logging.getLogger("adaptive_eval").addHandler(handler)
    ours = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=TIMEOUT_S))
    theirs = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=TIMEOUT_S))  # evaluate_fn's own
    dist.barrier()  # (each rank has made both groups before either is used)

    def evaluate_fn(request):
        if rank == 1:
            raise RuntimeError("CUDA out of memory (injected)")
        dist.barrier(group=theirs)  # AReaL's evaluate_fn ends in one: rank 1 never gets there
        return {"acc": [1.0] * 4}

    ev = AdaptiveEvaluator.from_config(config(), group=ours, clock=FakeClock())
    failed = None
    try:
        for g in range(6):
            ev.evaluate(evaluate_fn, 0, g, g)
    except CollectiveError as exc:
        failed = str(exc)
    finally:
        logging.getLogger("adaptive_eval").removeHandler(handler)
    return said, failed


def test_one_ranks_failing_evaluate_fn_is_said_at_once_while_another_waits_in_a_collective_of_its_own():
    """AReaL's evaluate_fn ends in a barrier: a rank whose evaluate_fn raised (an OOM) went into the ranks' exchange of
    outcomes while the other waited in that barrier, both timed out, and the OOM was said after the exchange, so
    never: the job failed with a CollectiveError alone (a new user's probe).  It is said before the exchange."""
    said, failed = run_ranks(_fails_beside_a_barrier_rank, world=2)[1]
    assert any("CUDA out of memory (injected)" in m and "on rank 1 at step 4" in m for m in said), said
    assert failed is None or "a barrier in it: its error is in that rank's log" in failed, failed

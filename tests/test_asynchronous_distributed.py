"""Dedicated eval ranks over real gloo process groups: a world of 3 = 2 training ranks + 1 eval rank.

One spawn of three processes runs every case in turn, each on its own EvalRanks layout (fresh groups):

* bad layouts (an eval rank outside the world, eval ranks covering every rank) are refused on every rank;
* normal (no group=: eval_ranks= takes its train_group): the training ranks send the weights, keep training, and
  both integrate every result at the same step; the results are those of a single-process run on a thread (same
  steps, same values, the same paired differences on shared items: the eval rank sends its per-item values
  back); an evaluator built on the eval rank is refused, saying it serves;
* hung: the eval rank sleeps through one evaluation: both training ranks get an error at the same step, within
  distributed.timeout_s, and train on without evaluations (async:down);
* dead: the eval rank dies in an evaluation: the same, at once.
"""

import os
import pickle
import time

import pytest
import torch

from adaptive_eval import AdaptiveEvaluator, load_config
from adaptive_eval.asynchronous import EvalRanks, SnapshotEval
from conftest import FakeClock, decisions
from dist_utils import run_ranks

pytestmark = pytest.mark.xdist_group(__name__)  # (under pytest -n: its module-scoped runs on one worker)

TIMEOUT_S = 3.0  # distributed.timeout_s; room for a loaded 2-core machine
STEPS = 40


def config(*extra):
    return load_config(overrides=["evaluation.asynchronous=true", "evaluation.async_integrate_after_steps=2",
                                  "trigger.freq_steps=5", "distributed.eval_ranks=[2]",
                                  f"distributed.timeout_s={TIMEOUT_S}",
                                  # the eval rank times evaluations with its own clock; the test's is fake
                                  "policy.budget.enabled=false", *extra])


def weight_sum(request, weights):
    """Per item, two samples that move with the weights (items x samples: the evaluation has per-item values,
    so each result carries its paired difference with the one before on the items both share)."""
    total = float(sum(t.double().sum() for t in weights.values()))
    return {"score": [[total + 0.1 * i, total - 0.05 * i] for i in request.indices(8)]}


def paired(ev):
    return [{k: (round(v.mean, 9), v.n) for k, v in r.paired.items()} for r in ev.history]


def train(ev, steps=STEPS, pause=0.0):
    """Each training rank trains the same model the same way; returns the events seen and seconds per step."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    events, slowest = [], 0.0
    ev.add_listener(events.append)
    for g in range(steps):
        start = time.monotonic()
        ev.observe({"train/loss": 1.0 + 0.01 * (g % 3)}, g)
        ev.evaluate(SnapshotEval(model), 0, g, g)
        slowest = max(slowest, time.monotonic() - start)
        with torch.no_grad():
            model.weight.add_(0.01 * (g + 1))
        time.sleep(pause)
    ev.close()
    return decisions(events), slowest


def same_decisions(a, b):
    """Events equal but for error texts (the first training rank has the exception, the other its text)."""
    strip = lambda evs: [{k: v for k, v in e.items() if k != "error"} for e in evs]  # noqa: E731
    return strip(a) == strip(b)


def _world(rank, world, out_dir):
    import torch.distributed as dist

    results = {}
    for bad, match in (([5], "rank 5 is outside the world of 3"), ([0, 1, 2], "covers every rank")):
        try:
            EvalRanks(bad)
            results[f"bad{bad}"] = None
        except ValueError as exc:
            results[f"bad{bad}"] = str(exc)
    for case in ("normal", "hung", "dead"):
        layout = EvalRanks.from_config(config(), idle_timeout_s=6.0)
        if layout.is_eval_rank:
            calls = []
            if case == "normal":
                try:
                    AdaptiveEvaluator.from_config(config(), eval_ranks=layout)
                    results["built on the eval rank"] = None
                except RuntimeError as exc:
                    results["built on the eval rank"] = str(exc)

            def fn(request, weights):
                calls.append(request.step)
                if case == "hung" and len(calls) == 2:
                    time.sleep(TIMEOUT_S * 2.5)
                if case == "dead" and len(calls) == 2:
                    with open(os.path.join(out_dir, f"rank{rank}.pkl"), "wb") as f:
                        pickle.dump(results, f)
                    os._exit(3)
                return weight_sum(request, weights)

            try:
                results[case] = ("served", layout.serve(fn), calls)
            except Exception as exc:  # noqa: BLE001 - the hung case ends in its own timeout
                results[case] = ("error", type(exc).__name__, calls)
        else:
            # (the normal case gives no group=: eval_ranks= takes layout.train_group; without that the first
            # collective waited distributed.timeout_s for the eval rank and raised CollectiveError; a probe)
            group = None if case == "normal" else layout.train_group
            ev = AdaptiveEvaluator.from_config(config(), clock=FakeClock(), group=group, eval_ranks=layout,
                                               total_steps=STEPS)
            results[case] = train(ev, pause=0.02)
            results[f"{case}:paired"] = paired(ev)
        with open(os.path.join(out_dir, f"rank{rank}.pkl"), "wb") as f:
            pickle.dump(results, f)
        if case != "dead":  # after it, rank 2 is gone
            dist.barrier()
    return results


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    out = tmp_path_factory.mktemp("evalranks")
    with pytest.raises(AssertionError, match="rank 2 died"):
        run_ranks(_world, str(out), world=3, timeout_s=150, collective_timeout_s=40)
    return [pickle.loads((out / f"rank{r}.pkl").read_bytes()) for r in range(3)]


def test_bad_layouts_are_refused_on_every_rank_naming_the_key_and_rank(world):
    for r in range(3):
        assert "distributed.eval_ranks: rank 5 is outside the world of 3 ranks" in world[r]["bad[5]"]
        assert "covers every rank" in world[r]["bad[0, 1, 2]"]


def test_an_evaluator_built_on_an_eval_rank_says_the_rank_serves(world):
    assert world[2]["built on the eval rank"] == ("rank 2 is an eval rank (distributed.eval_ranks): it runs "
                                                  "EvalRanks.serve(...), not an AdaptiveEvaluator")


def test_both_training_ranks_integrate_each_result_of_the_eval_rank_at_the_same_step(world):
    (events0, _), (events1, _) = world[0]["normal"], world[1]["normal"]
    assert events0 == events1
    evals = [e for e in events0 if e["kind"] == "eval"]
    assert len(evals) >= 4 and all(e["integrated_step"] == e["step"] + 2 for e in evals[:-1])
    status, served, calls = world[2]["normal"]
    assert status == "served" and served == len(calls) == len(evals)
    # The same decisions and values as one process evaluating on a thread.
    ev = AdaptiveEvaluator.from_config(
        load_config(overrides=["evaluation.asynchronous=true", "evaluation.async_integrate_after_steps=2",
                               "trigger.freq_steps=5", f"distributed.timeout_s={TIMEOUT_S}",
                               "policy.budget.enabled=false"]),
        clock=FakeClock(), total_steps=STEPS)
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    events = []
    ev.add_listener(events.append)
    for g in range(STEPS):
        ev.observe({"train/loss": 1.0 + 0.01 * (g % 3)}, g)
        ev.evaluate(SnapshotEval(model, weight_sum), 0, g, g)
        with torch.no_grad():
            model.weight.add_(0.01 * (g + 1))
    ev.close()
    assert decisions(events) == events0
    # The eval rank's per-item values reach the training ranks: every result after the first carries the paired
    # difference with the one before, as in one process.
    assert world[0]["normal:paired"] == world[1]["normal:paired"] == paired(ev)
    assert all(p["score"][1] == 8 for p in paired(ev)[1:])


def test_a_hung_eval_rank_is_an_error_on_both_training_ranks_within_the_timeout_and_training_goes_on(world):
    (events0, slowest0), (events1, slowest1) = world[0]["hung"], world[1]["hung"]
    assert same_decisions(events0, events1)
    errors = [e for e in events0 if e["kind"] == "error"]
    assert errors and errors[0]["integrated_step"] == errors[0]["step"] + 2
    assert [e["kind"] for e in events0].count("async_down") == 1
    assert any(e["kind"] == "deferred" and e["reason"].startswith("async:down") for e in events0)
    assert slowest0 < TIMEOUT_S + 3.0 and slowest1 < TIMEOUT_S + 3.0  # never a hang
    # ... and the eval rank's serve() returns once its late result finds no taker (it raised: a torchrun job whose
    # training finished exited 1; found by a new-user probe); the hung evaluation was its second
    assert world[2]["hung"][:2] == ("served", 1) and len(world[2]["hung"][2]) == 2


def test_a_dead_eval_rank_is_an_error_on_both_training_ranks_and_training_goes_on(world):
    (events0, _), (events1, _) = world[0]["dead"], world[1]["dead"]
    assert same_decisions(events0, events1)
    kinds = [e["kind"] for e in events0]
    assert kinds.count("eval") == 1 and "error" in kinds and "async_down" in kinds
    error = next(e for e in events0 if e["kind"] == "error")
    assert "eval rank 2" in error["error"]
    assert "dead" not in world[2]


def _hung_grader_rank(rank, world):
    import threading

    cfg = load_config(overrides=["trigger.freq_steps=5", "distributed.timeout_s=30", "evaluation.precision=none",
                                 "evaluation.asynchronous=true", "evaluation.async_integrate_after_steps=2",
                                 "evaluation.timeout_s=0.3", "policy.budget.enabled=false",
                                 "policy.interval.enabled=false", "trigger.eval_at_end=false"])
    ev = AdaptiveEvaluator.from_config(cfg, total_steps=30, clock=FakeClock())
    release = threading.Event()

    def fn(request):
        if rank == 1:
            release.wait(30)  # rank 1's grader hangs until the loop is done
        return {"acc": [1.0] * len(request.indices(100))}

    reasons, peak = [], 0
    ev.add_listener(lambda e: reasons.append(str(e.get("reason", ""))))
    for g in range(30):
        ev.observe({"train/loss": 1.0}, g)
        ev.evaluate(fn, 0, g, g)
        time.sleep(0.05)
        peak = max(peak, sum(t.name.startswith("adaptive_eval") and t.is_alive() for t in threading.enumerate()))
    release.set()
    ev.close(timeout_s=5)
    return peak, sum(r.startswith("waiting:timed-out-eval-still-running") for r in reasons)


def test_in_a_group_no_evaluation_starts_beside_one_that_timed_out_and_still_runs_on_any_rank():
    """A probe: in one process an evaluation failed by evaluation.timeout_s whose thread still ran held up the next;
    in a group none did, and a rank whose grader hung piled up 8 threads, each holding its snapshot.  Each rank
    now shares in the decision's all-gather whether one of its threads still runs: every rank waits alike."""
    (peak0, waits0), (peak1, waits1) = run_ranks(_hung_grader_rank, timeout_s=90)
    assert peak1 == 1 and peak0 <= 1  # (rank 0's own threads finish at once)
    assert waits0 == waits1 > 0


def _lightning_exception_on_one_rank(rank, world):
    import logging
    import threading
    from types import SimpleNamespace

    pytest.importorskip("lightning")
    from adaptive_eval.integrations.lightning import AdaptiveEvalCallback

    said = []

    class Keep(logging.Handler):
        def emit(self, record):
            said.append(record.getMessage())

    logging.getLogger("adaptive_eval").addHandler(Keep(logging.WARNING))
    cfg = load_config(overrides=["trigger.freq_steps=5", "distributed.timeout_s=2", "evaluation.asynchronous=true",
                                 "evaluation.async_integrate_after_steps=20", "policy.budget.enabled=false",
                                 "evaluation.precision=none"])
    cb = AdaptiveEvalCallback(cfg)
    cb.evaluator = AdaptiveEvaluator.from_config(cfg, total_steps=40, clock=FakeClock())
    release = threading.Event()

    def fn(request):
        release.wait(5)
        return {"acc": [1.0] * len(request.indices(100))}

    events = []
    cb.evaluator.add_listener(events.append)
    for g in range(6):  # (an evaluation submitted at step 4, in flight on both ranks)
        cb.evaluator.observe({"train/loss": 1.0}, g)
        cb.evaluator.evaluate(fn, 0, g, g)
    if rank == 0:  # its fit raised; the other rank trains on, never closing here
        cb.on_exception(SimpleNamespace(global_rank=0), None, RuntimeError("out of memory"))
    release.set()
    time.sleep(3 if rank == 1 else 0)
    errors = [e["error"] for e in events if e["kind"] == "error"]
    return errors, [m for m in said if "failed on rank" in m]


def test_a_lightning_fit_raising_on_one_rank_closes_without_a_collective():
    """A review: on_exception closed the evaluator, whose close() combines the shards in flight (a collective) on
    the rank that raised alone: it waited distributed.timeout_s or met another rank's evaluate(); it fails them."""
    (errors0, collective0), _ = run_ranks(_lightning_exception_on_one_rank, timeout_s=90, collective_timeout_s=10)
    assert not collective0 and errors0 and "the fit raised RuntimeError on rank 0" in errors0[0]


def _with_block_left_on_one_rank(rank, world):
    import threading

    cfg = load_config(overrides=["trigger.freq_steps=5", "distributed.timeout_s=4", "evaluation.asynchronous=true",
                                 "evaluation.async_integrate_after_steps=20", "policy.budget.enabled=false",
                                 "evaluation.precision=none"])
    ev = AdaptiveEvaluator.from_config(cfg, total_steps=40, clock=FakeClock())
    release = threading.Event()

    def fn(request):
        release.wait(5)
        return {"acc": [1.0] * len(request.indices(100))}

    try:
        with ev:
            for g in range(6):  # (an evaluation submitted at step 4, in flight on both ranks)
                ev.observe({"train/loss": 1.0}, g)
                ev.evaluate(fn, 0, g, g)
            if rank == 1:
                raise RuntimeError("CUDA out of memory")  # its step raised; rank 0 trains on, never closing here
            release.set()
            time.sleep(8)  # (past rank 1's drain and distributed.timeout_s: no close() of this rank to meet)
    except Exception as exc:  # noqa: BLE001 - what went up, reported
        release.set()
        return type(exc).__name__, str(exc)
    return None


def test_an_exception_leaving_the_with_block_on_one_rank_goes_up_as_it_is_without_a_collective():
    """A probe (two gloo ranks, a Ctrl-C under torchrun): the `with` block's close() gathered the shards in flight
    on the rank that raised alone, waited distributed.timeout_s, and raised CollectiveError over the exception (an
    `except KeyboardInterrupt` never ran); what is in flight fails there instead, as the Lightning adapter's does."""
    out0, out1 = run_ranks(_with_block_left_on_one_rank, timeout_s=90, collective_timeout_s=10)
    assert out1 == ("RuntimeError", "CUDA out of memory")
    assert out0[0] == "CollectiveError"  # (the rank left alone: its own close() finds no partner, as documented)


def _asynchronous_on_one_rank(rank, world):
    from adaptive_eval.config import ConfigError

    overrides = ["trigger.freq_steps=4", "distributed.timeout_s=20", "evaluation.precision=none"]
    ev = AdaptiveEvaluator.from_config(load_config(overrides=overrides + (["evaluation.asynchronous=true"] * rank)),
                                       total_steps=8, clock=FakeClock())
    try:
        ev.observe({"train/loss": 1.0}, 0)
        ev.evaluate(lambda req: {"acc": [1.0] * len(req.indices(10))}, 0, 0, 0)
    except ConfigError as exc:
        return str(exc)
    finally:  # (a review: the asynchronous rank's close() ran a collective and raised, hiding the ConfigError)
        ev.close(timeout_s=5)
    return None


def test_evaluation_asynchronous_on_one_rank_alone_is_a_config_error_on_every_rank_not_an_abort():
    """A probe: rank 1 alone asynchronous sent a shorter all-reduce (no look-back votes), and gloo aborted its
    process at the first evaluate() ("collective mismatch", SIGABRT), rank 0 waiting out its timeout.  The step's
    all-reduce is as long whatever the config, and carries the mode, compared on every rank."""
    said0, said1 = run_ranks(_asynchronous_on_one_rank, timeout_s=90)
    assert said0 == ("evaluation.asynchronous differs between the ranks of the group (it is false on rank 0 and true "
                     "on another): give every rank the same configuration")
    assert said1 is not None and "it is true on rank 1 and false on another" in said1


SLOW_S = 5.0  # the eval rank's slow evaluation: past distributed.timeout_s (2 s), done while the trainer lives


def _slow_then_gone(rank, world):
    from adaptive_eval.asynchronous import EvalRanks, SnapshotEval

    cfg = load_config(overrides=["evaluation.asynchronous=true", "trigger.freq_steps=10", "distributed.timeout_s=2",
                                 "policy.budget.enabled=false", "distributed.eval_ranks=[1]"])
    layout = EvalRanks.from_config(cfg)
    if layout.is_eval_rank:
        def fn(request, weights):
            if request.step == 9:
                time.sleep(SLOW_S)
            return {"acc": [1.0, 0.0]}

        try:
            return ("served", layout.serve(fn))
        except Exception as exc:  # noqa: BLE001 - what the test looks at
            return ("raised", f"{type(exc).__name__}: {exc}")
    ev = AdaptiveEvaluator.from_config(cfg, clock=FakeClock(), total_steps=60, eval_ranks=layout)
    model = torch.nn.Linear(2, 2)
    try:  # a plain evaluate_fn: refused at the first call, not at the first due step (step 9; a probe)
        ev.evaluate(lambda request: {"acc": [1.0]}, 0, 0, 0)
        refused = None
    except ValueError as exc:
        refused = str(exc)
    for g in range(60):
        ev.observe({"train/loss": 1.0}, g)
        ev.evaluate(SnapshotEval(model), 0, g, g)
        time.sleep(0.02)
    ev.close()
    time.sleep(SLOW_S + 1.0)  # the eval rank answers (nobody takes it) and waits for a job while this rank lives
    return ev.summary()["eval_errors"], refused


def test_an_eval_rank_given_up_on_returns_from_serve_when_the_training_ranks_exit():
    """Probes: a plain evaluate_fn with eval ranks was refused at the first due step, inside the training step (after
    49 steps at freq_steps 50): now at the first call.  An eval rank whose evaluation ran past distributed.timeout_s
    sent its answer, which nobody took, then waited for the next job; when the training rank exited, serve() raised
    CollectiveError ("Connection closed by peer"): under torchrun the job exited 1.  It returns, with a warning, as
    its docstring says."""
    (errors, refused), (status, served) = run_ranks(_slow_then_gone, world=2, timeout_s=90)
    assert refused is not None and "evaluate_fn must be adaptive_eval.asynchronous.SnapshotEval(model)" in refused
    assert errors >= 1  # (the slow one; then the final evaluation, with the eval rank given up on)
    assert status == "served" and served == 1, served

"""The AdaptiveEvaluator in a real process group: two CPU processes joined with gloo.

All scenarios run in turn on one spawned group (spawning ranks costs seconds); ``dist_utils.run_ranks``
fails with ``TimeoutError`` on a hang.  In every scenario each rank records what its evaluator did (the
listener's events, the requests ``evaluate_fn`` received, the collectives of each step, the summary and
the policies' state) and the tests check first of all that both ranks recorded exactly the same.
"""

import math
import tempfile
import traceback

import numpy as np
import pytest
from omegaconf import OmegaConf

from adaptive_eval import AdaptiveEvaluator
from adaptive_eval.scheduler import FakeResourceMonitor
from conftest import FakeClock
from dist_utils import run_ranks, scenario_getter

pytestmark = pytest.mark.xdist_group(__name__)  # (under pytest -n: its module-scoped runs on one worker)

ITEMS = 1000
DATA = np.random.default_rng(3).normal(0.6, 0.3, size=101)
HITS = (np.random.default_rng(4).random(101) < 0.7).astype(float)
OK_GPU = {"accelerator_free_gb": 60.0, "accelerator_total_gb": 80.0}
LOW_GPU = {"accelerator_free_gb": 1.0, "accelerator_total_gb": 80.0}


def cfg(**sections):
    """Every setting the scenarios depend on, spelled out (the shipped presets are tuned elsewhere)."""
    base = {
        "trigger": {"freq_epochs": None, "freq_steps": 100, "freq_secs": None, "eval_before_train": False,
                    "eval_at_end": True},
        "evaluation": {"sample_size": None, "seed": 5, "on_error": "skip", "max_retries": 0},
        "streams": {"default": [{"type": "nonfinite"}, {"type": "cusum", "arl0": 5000}], "watch": {},
                    "ignore": [], "eval": [{"type": "nonfinite"}]},
        "policy": {
            "alarm": {"enabled": True, "cooldown_steps": 20, "urgent_detectors": ["nonfinite"]},
            "interval": {"enabled": True, "min_factor": 0.25, "max_factor": 4.0, "relax": 1.5, "tighten": 0.5,
                         "significance": 0.05},
            "sample_size": {"enabled": True, "initial": 64, "min": 16, "max": 256, "target_half_width": 0.1,
                            "alarm_factor": 2.0},
            "budget": {"enabled": True, "max_eval_fraction": 0.3, "bypass_urgent": True},
            "peak": {"enabled": True, "improving_factor": 1.0, "confirm_size": 256, "confirm_steps": 0},
        },
        "resources": {"enabled": False},
        "distributed": {"timeout_s": 30.0, "rank_discrepancy_threshold": None},
    }
    return OmegaConf.merge(OmegaConf.create(base), OmegaConf.create(sections))


NO_POLICIES = {name: {"enabled": False} for name in ("alarm", "interval", "sample_size", "budget", "peak")}


def acc(i: int, p: float) -> float:
    """Item ``i`` is right with "probability" ``p``: deterministic per item, so any sharding sums the same."""
    return float((i * 7919) % 1000 / 1000 < p)


def noise(seed: int, level=lambda g: 0.0, sd: float = 0.05, steps: int = 1000):
    z = np.random.default_rng(seed).normal(0.0, sd, size=steps)
    return lambda g: float(level(g) + z[g])


def plain(event: dict) -> tuple:
    """An event as comparable plain values (an error's text is rank-local: which rank failed, and how)."""
    kind = event["kind"]
    if kind == "alarm":
        return (kind, event["step"], event["stream"], event["detector"], event["direction"], event.get("rank"),
                event["message"])
    if kind == "eval":
        r = event["result"]
        return (kind, r.step, r.sample_size, r.reason, r.seconds,
                {k: (v.mean, v.n, tuple(v.ci)) for k, v in r.metrics.items()})
    return (kind, event["step"], event["reason"])


def drive(rank, config, steps, streams, *, step_seconds=10.0, eval_seconds_per_item=0.01, truth=lambda g: 0.6,
          evaluate_fn=None, monitor=None, group=None, fail=None):
    """A training loop: advance the clock, observe this rank's streams, evaluate; record everything."""
    clock = FakeClock()
    ev = AdaptiveEvaluator.from_config(config, clock=clock, resource_monitor=monitor, group=group)
    events, requests, per_step, raised = [], [], [], []
    ev.add_listener(lambda e: events.append(plain(e)))

    def fn(req):
        idx = req.indices(ITEMS)
        requests.append((req.step, req.sample_size, req.seed, req.reason))
        clock.advance(eval_seconds_per_item * len(idx))
        if fail is not None:
            fail(req)
        p = truth(req.step)
        return {"acc": [acc(i, p) for i in idx]}

    for g in range(steps):
        clock.advance(step_seconds)
        ev.observe({name: f(g) for name, f in streams.items()}, g)
        before = ev.dist.collectives
        try:
            result = ev.evaluate(evaluate_fn or fn, 0, g, g)
        except Exception as exc:  # noqa: BLE001
            raised.append((g, type(exc).__name__))
            result = None
        per_step.append((g, ev.dist.collectives - before, result is not None))
    state = ev.state_dict()
    ev.close()
    return {"events": events, "requests": requests, "per_step": per_step, "raised": raised,
            "summary": ev.summary(), "policies": state["policies"], "resources": state["resources"],
            "logger": type(ev.logger).__name__, "monitor_calls": getattr(monitor, "calls", None)}


def evals(out) -> list:
    return [e for e in out["events"] if e[0] == "eval"]


# -- the scenarios, run on every rank -------------------------------------------------------------------

def skewed_clocks(rank, world):
    # Rank 1's clock runs 1.7x as fast as rank 0's, and its evaluations cost three times as much.
    config = cfg(trigger={"freq_steps": None, "freq_secs": 30.0})
    streams = {"train/loss": noise(10 + rank), "train/reward": noise(20 + rank, lambda g: 0.5)}
    return drive(rank, config, 300, streams, step_seconds=1.0 + 0.7 * rank, eval_seconds_per_item=0.01 + 0.02 * rank)


NAN_AT, COLLAPSE_AT = 150, 220


def alarm_on_one_rank(rank, world):
    # Only rank 1 sees a NaN loss and, later, a collapse of its reward.
    def loss(g, base=noise(30 + rank, lambda g: 1.0)):
        return math.nan if rank == 1 and g == NAN_AT else base(g)

    reward = noise(40 + rank, lambda g: 0.1 if rank == 1 and g >= COLLAPSE_AT else 0.6)
    return drive(rank, cfg(), 300, {"train/loss": loss, "train/reward": reward})


def alarm_on_both_ranks(rank, world):
    # Every rank logs the same reward (all-reduced before it is logged): each alarm is raised on both ranks.
    reward = noise(41, lambda g: 0.1 if g >= COLLAPSE_AT else 0.6)
    drive_out = drive(rank, cfg(), 260, {"train/reward": reward})
    import torch.distributed as dist

    sub = dist.new_group([0])  # every rank must create it; only rank 0 is in it
    one = drive(rank, cfg(), 260, {"train/reward": reward}, group=sub) if rank == 0 else None
    return drive_out, one


def inner_collective(rank, world):
    import torch
    import torch.distributed as dist

    def fn(req):
        idx = req.indices(101)
        total = torch.tensor([float(len(idx))])
        dist.all_reduce(total)  # the user's own collective inside evaluate_fn
        return {"share": [len(idx) / total.item()] * len(idx)}

    config = cfg(trigger={"freq_steps": 5}, policy=NO_POLICIES)
    return drive(rank, config, 30, {"train/loss": noise(50 + rank)}, evaluate_fn=fn)


def failing(rank, world, on_error):
    def fail(req):
        if rank == 1 and req.step == 19:
            raise ValueError("disk on fire")

    config = cfg(trigger={"freq_steps": 10}, evaluation={"on_error": on_error}, policy=NO_POLICIES)
    return drive(rank, config, 60, {"train/loss": noise(60 + rank)}, fail=fail)


def mixed_shapes(rank, world):
    # Rank 0 returns 4 answers per item, rank 1 one value per item: combined, mean@k read both kinds and pass@k
    # rank 0's items only, with a warning that rank 1 "has no value" of pass@k (a new-user probe).
    def fn(req):
        idx = req.indices(ITEMS)
        return {"acc": [[acc(i, 0.6)] * 4 for i in idx] if rank == 0 else [acc(i, 0.6) for i in idx]}

    config = cfg(trigger={"freq_steps": 10}, evaluation={"on_error": "raise"}, policy=NO_POLICIES)
    return drive(rank, config, 30, {"train/loss": noise(65 + rank)}, evaluate_fn=fn)


def empty_everywhere(rank, world):
    # From step 15 every rank returns an empty list, without asking request.indices for its shard (an
    # evaluate_fn that shards by itself, or a filter that dropped every answer): one process fails such an
    # evaluation; sharded, a rank cannot tell an empty shard from an empty result, and the whole read as a NaN
    # result, the nonfinite alarm on eval/acc and an evaluation it brought (found in review).
    def fn(req):
        if req.step >= 15:
            return {"acc": []}
        return {"acc": [acc(i, 0.6) for i in req.indices(ITEMS)]}

    config = cfg(trigger={"freq_steps": 10}, policy=NO_POLICIES)
    return drive(rank, config, 30, {"train/loss": noise(66 + rank)}, evaluate_fn=fn)


def foreign_state(rank, world):
    # Rank 0's state loaded on every rank (found in review): rank 1 says so; rank 0 says nothing.
    import logging

    import torch.distributed as dist

    ev = AdaptiveEvaluator.from_config(cfg(trigger={"freq_steps": 5}, policy=NO_POLICIES))
    for g in range(8):
        ev.observe({"train/loss": 1.0}, g)
        ev.evaluate(lambda req: {"acc": [acc(i, 0.6) for i in req.indices(ITEMS)]}, 0, g, g)
    box = [ev.state_dict()]
    dist.broadcast_object_list(box, src=0)
    said = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())
    logging.getLogger("adaptive_eval").addHandler(handler)
    try:
        AdaptiveEvaluator.from_config(cfg(trigger={"freq_steps": 5}, policy=NO_POLICIES)).load_state_dict(box[0])
    finally:
        logging.getLogger("adaptive_eval").removeHandler(handler)
    ev.close()
    return [m for m in said if m.startswith("load_state_dict")]


def uneven_shards(rank, world):
    ev = AdaptiveEvaluator.from_config(cfg(trigger={"freq_steps": 1}, policy=NO_POLICIES))
    r = ev.evaluate(lambda req: {"loss": DATA[req.indices(101)], "acc": HITS[req.indices(101)].tolist()}, 0, 0, 0)
    return {"metrics": {k: (v.mean, v.n, tuple(v.ci), v.std) for k, v in r.metrics.items()},
            "per_rank_n": dict(ev.last_outcome.per_rank_n)}


def discrepancy(rank, world, log_dir):
    config = cfg(trigger={"freq_steps": 5}, policy=NO_POLICIES, logging={"tensorboard_dir": log_dir},
                 distributed={"rank_discrepancy_threshold": 0.3})

    def fn(req):
        idx = req.indices(60)
        return {"acc": [0.3 + (0.5 if rank == 1 else 0.0)] * len(idx)}  # rank 1's model copy is off

    return drive(rank, config, 10, {"train/loss": noise(70 + rank)}, evaluate_fn=fn)


def resources(rank, world):
    alarm = {"enabled": True, "cooldown_steps": 20, "urgent_detectors": ["nonfinite"]}
    config = cfg(trigger={"freq_steps": 10}, policy=NO_POLICIES | {"alarm": alarm},
                 resources={"enabled": True, "min_free_accelerator_gb": 4.0, "max_deferral_steps": 5})
    monitor = FakeResourceMonitor([LOW_GPU if rank == 1 else OK_GPU])  # only rank 1 is short

    def loss(g, base=noise(80 + rank, lambda g: 1.0)):
        return math.nan if rank == 0 and g == 41 else base(g)  # an urgent alarm, on rank 0 only

    return drive(rank, config, 60, {"train/loss": loss}, monitor=monitor)


def resources_cusum(rank, world):
    # Only rank 1 is short, and only rank 1's reward collapses (a CUSUM alarm: not an urgent detector).
    alarm = {"enabled": True, "cooldown_steps": 20, "urgent_detectors": ["nonfinite"]}
    config = cfg(trigger={"freq_steps": 100}, policy=NO_POLICIES | {"alarm": alarm},
                 resources={"enabled": True, "min_free_accelerator_gb": 4.0, "max_deferral_steps": 5})
    monitor = FakeResourceMonitor([LOW_GPU if rank == 1 else OK_GPU])
    reward = noise(85 + rank, lambda g: 0.1 if rank == 1 and g >= 30 else 0.6)
    return drive(rank, config, 60, {"train/reward": reward}, monitor=monitor)


def monitor_failing(rank, world):
    """Rank 1's monitor raises; what its warning says is captured on each rank."""
    import logging

    said = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())
    logging.getLogger("adaptive_eval").addHandler(handler)

    def monitor():
        if rank == 1:
            raise RuntimeError("NVML: driver not loaded")
        return OK_GPU

    config = cfg(trigger={"freq_steps": 10}, resources={"enabled": True, "min_free_accelerator_gb": 4.0})
    try:
        out = drive(rank, config, 25, {"train/loss": noise(70 + rank, lambda g: 1.0)}, monitor=monitor)
    finally:
        logging.getLogger("adaptive_eval").removeHandler(handler)
    return out | {"said": [m for m in said if "resource monitor" in m]}


def quiet(rank, world):
    return drive(rank, cfg(), 300, {"train/loss": noise(90 + rank, lambda g: 1.0),
                                    "train/reward": noise(95 + rank, lambda g: 0.5)})


def group_of_one(rank, world):
    import torch.distributed as dist

    sub = dist.new_group([0])  # every rank must create it; only rank 0 is in it
    if rank != 0:
        return None
    return drive(rank, cfg(), 200, {"train/loss": noise(90, lambda g: 1.0)}, group=sub)


def steps_apart(rank, world):
    """Rank 1's loop counts from 1: each rank is told at the first call (found by a probe: they stored the same
    evaluations under different steps, and said nothing until a final evaluation 30 steps on disagreed)."""
    import logging

    from adaptive_eval import AdaptiveEvaluator

    said = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())
    logging.getLogger("adaptive_eval").addHandler(handler)
    try:
        ev = AdaptiveEvaluator.from_config(cfg(trigger={"freq_steps": 10}, policy=NO_POLICIES), clock=lambda: 0.0)
        for g in range(12):
            step = g + rank
            ev.evaluate(lambda req: {"acc": [acc(i, 0.6) for i in req.indices(100)]}, 0, step, step)
            if g == 0:
                first = list(said)
        ev.close()
    finally:
        logging.getLogger("adaptive_eval").removeHandler(handler)
    return {"first": first, "said": said, "steps": [r.step for r in ev.history]}


def seed_per_rank(rank, world):
    """evaluation.seed = base + rank (a habit): each rank drew its shard from another sample (a probe)."""
    import logging

    said = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())
    logging.getLogger("adaptive_eval").addHandler(handler)
    try:
        out = {}
        for before in (False, True):  # (before_train drew with each rank's own seed: a review)
            ev = AdaptiveEvaluator.from_config(cfg(trigger={"freq_steps": 1, "eval_before_train": before},
                                                   evaluation={"sample_size": 40, "seed": rank}, policy=NO_POLICIES))
            seen = {}

            def fn(req):
                seen["seed"], seen["items"] = req.seed, list(req.indices(ITEMS))
                return {"acc": [acc(i, 0.7) for i in seen["items"]]}

            r = ev.before_train(fn, 0) if before else ev.evaluate(fn, 0, 0, 0)
            out[before] = {"seed": seen["seed"], "items": seen["items"], "n": r["acc"].n}
    finally:
        logging.getLogger("adaptive_eval").removeHandler(handler)
    return {**out[False], "before_train": out[True], "said": [m for m in said if "seed" in m]}


def replay_on_one_rank(rank, world):
    """replay() on rank 0 alone, in a live group: its evaluator took the default group, joined a collective the
    other rank never made (CollectiveError after the timeout; the other rank aborted when busy; a review)."""
    import time

    from adaptive_eval.replay import replay
    from adaptive_eval.trace import Trace, TraceRecord

    if rank != 0:
        return None
    trace = Trace([TraceRecord(s, {"train/loss": 1.0 + 0.01 * (s % 3), **({"eval/acc": 0.7} if s % 10 == 0 else {})})
                   for s in range(60)], "t.csv")
    start = time.monotonic()
    out = replay(trace, cfg(trigger={"freq_steps": 10}), seed=0)
    return {"evals": len(out.evals), "seconds": time.monotonic() - start}


def _scenarios_rank(rank, world, log_dir):
    scenarios = {
        "replay_on_one_rank": lambda: replay_on_one_rank(rank, world),
        "seed_per_rank": lambda: seed_per_rank(rank, world),
        "skewed_clocks": lambda: skewed_clocks(rank, world),
        "alarm_on_one_rank": lambda: alarm_on_one_rank(rank, world),
        "alarm_on_both_ranks": lambda: alarm_on_both_ranks(rank, world),
        "inner_collective": lambda: inner_collective(rank, world),
        "error_skip": lambda: failing(rank, world, "skip"),
        "error_raise": lambda: failing(rank, world, "raise"),
        "uneven_shards": lambda: uneven_shards(rank, world),
        "mixed_shapes": lambda: mixed_shapes(rank, world),
        "empty_everywhere": lambda: empty_everywhere(rank, world),
        "foreign_state": lambda: foreign_state(rank, world),
        "discrepancy": lambda: discrepancy(rank, world, log_dir),
        "resources": lambda: resources(rank, world),
        "resources_cusum": lambda: resources_cusum(rank, world),
        "monitor_failing": lambda: monitor_failing(rank, world),
        "quiet": lambda: quiet(rank, world),
        "group_of_one": lambda: group_of_one(rank, world),
        "steps_apart": lambda: steps_apart(rank, world),
    }
    out = {}
    for name, run in scenarios.items():
        try:
            out[name] = ("ok", run())
        except Exception:  # noqa: BLE001 - report, and keep the group in step for the next scenario
            out[name] = ("failed", traceback.format_exc())
    return out


@pytest.fixture(scope="module")
def group_run():
    with tempfile.TemporaryDirectory() as log_dir:
        yield scenario_getter(run_ranks(_scenarios_rank, log_dir, timeout_s=120))


def same_on_both(a, b, *, logger=True):
    """Both ranks decided and learned exactly the same."""
    for key in ("events", "requests", "per_step", "raised", "summary", "policies", "resources"):
        assert a[key] == b[key], key
    if logger:
        assert (a["logger"], b["logger"]) == ("NullLogger", "NullLogger")


def test_ranks_given_different_steps_are_told_at_the_first_call(group_run):
    a, b = group_run("steps_apart")
    for rank, got in enumerate((a, b)):
        assert len(got["first"]) == 1, got["first"]
        assert (f"rank {rank}: the ranks called evaluate() with different global_step values at the same call (0 to 1; "
                f"this rank's {rank})") in got["first"][0]
        assert sum("different global_step" in m for m in got["said"]) == 1  # said once
    assert [s + 1 for s in a["steps"]] == b["steps"]  # (the same evaluations, under each rank's own steps)


def test_skewed_clocks_the_fastest_clock_drives_the_time_trigger(group_run):
    a, b = group_run("skewed_clocks")
    same_on_both(a, b)
    runs = evals(a)
    assert len(runs) >= 5
    # Rank 1's clock reaches 30 s at step 17 (1.7 s a step); rank 0's alone would at step 29.
    assert runs[0][1:4] == (17, 64, "trigger:time")
    assert all(r[3] in ("trigger:time", "interval:relaxed", "interval:tightened", "peak:confirm")
               or r[3].startswith("alarm:") for r in runs)


def test_an_alarm_seen_by_one_rank_evaluates_on_both(group_run):
    a, b = group_run("alarm_on_one_rank")
    same_on_both(a, b)
    nan_alarm = [e for e in a["events"] if e[0] == "alarm" and e[3] == "nonfinite"]
    assert [(e[1], e[2], e[5]) for e in nan_alarm] == [(NAN_AT, "train/loss", 1)]  # names the rank that saw it
    by_step = {e[1]: e for e in evals(a)}
    assert by_step[NAN_AT][3] == "alarm:train/loss:nonfinite"
    assert by_step[NAN_AT][2] > [e[2] for e in evals(a) if e[1] < NAN_AT][-1]  # widened after the alarm
    collapse = [e for e in evals(a) if COLLAPSE_AT <= e[1] <= COLLAPSE_AT + 30]
    assert collapse and collapse[0][3] == "alarm:train/reward:cusum:down"
    assert all(e[5] == 1 for e in a["events"] if e[0] == "alarm" and e[2] == "train/reward" and e[1] >= COLLAPSE_AT)


def test_an_alarm_every_rank_raises_alike_is_counted_once(group_run):
    """Found by a new-user probe: an alarm both ranks raised (the same reward on every rank) was counted twice in
    summary()['alarms'] and TensorBoard's controller/alarms, and told twice to the listeners, while the decisions
    were a single process's."""
    (a, alone), (b, _) = group_run("alarm_on_both_ranks")
    same_on_both(a, b)
    alarms = [e for e in a["events"] if e[0] == "alarm"]
    assert alarms and [e[1:5] for e in alarms] == [e[1:5] for e in alone["events"] if e[0] == "alarm"]
    assert all(e[5] is None for e in alarms)  # (raised by every rank: named by none)
    assert a["summary"]["alarms"] == alone["summary"]["alarms"] == len(alarms)
    assert [e[:4] for e in evals(a)] == [e[:4] for e in evals(alone)]


def test_a_metric_returned_in_different_shapes_on_the_ranks_is_a_wrong_value_on_both(group_run):
    a, b = group_run("mixed_shapes")
    same_on_both(a, b)
    assert not evals(a) and a["raised"] and a["raised"] == b["raised"]
    assert {name for _, name in a["raised"]} == {"ValueError"}


def test_no_value_from_any_rank_is_a_failed_evaluation_not_a_nan_result(group_run):
    a, b = group_run("empty_everywhere")
    same_on_both(a, b)
    assert [(e[1], e[3]) for e in evals(a)] == [(9, "trigger:steps")]  # (steps 19 and 29 failed)
    assert [e[:3] for e in a["events"] if e[0] == "error"] == [("error", 19, "trigger:steps"),
                                                               ("error", 29, "trigger:steps")]
    assert not [e for e in a["events"] if e[0] == "alarm"]


def test_a_state_taken_on_another_rank_is_loaded_and_said(group_run):
    said0, said1 = group_run("foreign_state")
    assert said0 == []
    assert len(said1) == 1 and said1[0].startswith("load_state_dict on rank 1: the state was taken on rank 0")


def test_evaluate_fn_running_its_own_collective(group_run):
    a, b = group_run("inner_collective")
    same_on_both(a, b)
    runs = evals(a)
    assert [r[1] for r in runs][:2] == [4, 9]
    assert runs[0][5]["share"][:2] == (pytest.approx((51 * 51 / 101 + 50 * 50 / 101) / 101, abs=1e-12), 101)


def test_an_exception_on_one_rank_makes_both_skip(group_run):
    a, b = group_run("error_skip")
    same_on_both(a, b)
    assert ("error", 19, "trigger:steps") in a["events"]
    assert 19 not in [e[1] for e in evals(a)] and a["summary"]["eval_errors"] == 1
    assert [e[1] for e in evals(a)][:2] == [9, 29]  # the schedule goes on from the failed evaluation
    assert a["raised"] == [] and a["per_step"][19][1] == 4  # all-reduce, decision, outcome, seconds


def test_an_exception_on_one_rank_with_on_error_raise_raises_on_both(group_run):
    a, b = group_run("error_raise")
    assert a["raised"] == [(19, "RemoteEvaluationError")] and b["raised"] == [(19, "ValueError")]
    assert a["events"] == b["events"] and a["requests"] == b["requests"] and a["policies"] == b["policies"]
    assert [e[1] for e in evals(a)][:2] == [9, 20]  # still due after the raise: evaluated at the next step


def test_uneven_shards_equal_the_single_process_result(group_run):
    a, b = group_run("uneven_shards")
    assert a == b and a["per_rank_n"] == {"acc": [51, 50], "loss": [51, 50]}
    ev = AdaptiveEvaluator.from_config(cfg(trigger={"freq_steps": 1}, policy=NO_POLICIES))  # no process group
    ref = ev.evaluate(lambda req: {"loss": DATA[req.indices(101)], "acc": HITS[req.indices(101)].tolist()}, 0, 0, 0)
    for name, (mean, n, ci, std) in a["metrics"].items():
        want = ref[name]
        assert n == want.n == 101
        assert abs(mean - want.mean) <= 1e-9 and abs(std - want.std) <= 1e-9
        assert abs(ci[0] - want.ci[0]) <= 1e-9 and abs(ci[1] - want.ci[1]) <= 1e-9


def test_rank_discrepancy_alarm_names_the_rank_and_only_rank_0_logs(group_run):
    a, b = group_run("discrepancy")
    same_on_both(a, b, logger=False)
    assert (a["logger"], b["logger"]) == ("TensorBoardLogger", "NullLogger")
    found = [e for e in a["events"] if e[0] == "alarm" and e[3] == "rank_discrepancy"]
    assert [(e[1], e[2], e[4], e[5]) for e in found] == [(4, "eval/acc", "down", 0), (4, "eval/acc", "up", 1),
                                                         (9, "eval/acc", "down", 0), (9, "eval/acc", "up", 1)]
    assert found[1][6].startswith("rank 1: eval/acc mean 0.8")


def test_resource_shortage_on_one_rank_defers_both_then_forces(group_run):
    a, b = group_run("resources")
    same_on_both(a, b)
    short = "resources:deferred (rank 1: accelerator free 1.00 GB < 4.00 GB)"
    deferred = [e[1] for e in a["events"] if e[0] == "deferred"]
    assert all(e[2] == short for e in a["events"] if e[0] == "deferred")
    assert deferred == [9, 10, 11, 12, 13, 24, 25, 26, 27, 28, 39, 40, 51, 52, 53, 54, 55]
    # Forced after max_deferral_steps; the urgent NaN alarm (rank 0 only) bypasses the shortage.
    forced = "resources:forced (trigger:steps)"  # (the reason it was due for, after the prefix)
    assert [(e[1], e[3]) for e in evals(a)] == [(14, forced), (29, forced), (41, "alarm:train/loss:nonfinite"),
                                               (56, forced)]
    # Both monitors are read exactly at the steps where an evaluation was due and not urgent.
    assert a["monitor_calls"] == b["monitor_calls"] == len(deferred) + 3


def test_an_alarm_on_one_rank_bypasses_a_shortage_on_the_other_on_both(group_run):
    """With resources.alarm_bypass an evaluation an alarm brought forward runs at once (it waited for the urgent
    detectors only); rank 0's decision says so, on both ranks alike, and no monitor is read for it."""
    a, b = group_run("resources_cusum")
    same_on_both(a, b)
    alarms = [e for e in a["events"] if e[0] == "alarm" and e[3] == "cusum"]
    assert alarms and {e[5] for e in alarms} == {1}  # seen by rank 1 only
    runs = evals(a)
    assert runs[0][1] == alarms[0][1] and runs[0][3] == f"alarm:train/reward:cusum:{alarms[0][4]}"
    assert not [e for e in a["events"] if e[0] == "deferred"]
    assert a["monitor_calls"] == b["monitor_calls"] == 0


def test_a_monitor_failing_on_one_rank_is_said_by_that_rank_naming_it(group_run):
    """Each rank reads its own monitor, so what a reading says names the rank (a warning "the resource monitor
    raised" came from one of eight processes, unnamed; a probe).  Nothing is deferred on a reading not taken."""
    a, b = group_run("monitor_failing")
    same_on_both(a, b)
    assert a["said"] == []
    assert len(b["said"]) == 1 and b["said"][0].startswith("rank 1: the resource monitor (function) raised "
                                                           "RuntimeError: NVML: driver not loaded; no reading")
    assert [e[1] for e in evals(a)] == [9, 19] and not [e for e in a["events"] if e[0] == "deferred"]


def test_collectives_per_step(group_run):
    a, b = group_run("quiet")
    same_on_both(a, b)
    busy = {e[1] for e in a["events"]}  # steps where something happened (an alarm, an evaluation)
    idle = [n for g, n, _ in a["per_step"] if g not in busy]
    assert len(idle) > 250 and max(idle) <= 1 and min(idle) == 1  # one small all-reduce, nothing else
    # An evaluation step: the all-reduce, rank 0's decision (one all-gather), the sharded result.
    assert {n for g, n, done in a["per_step"] if done and not any(e[:2] == ("alarm", g) for e in a["events"])} == {3}


def test_group_of_one_behaves_like_a_single_process(group_run):
    a, b = group_run("group_of_one")
    assert b is None and all(n == 0 for _, n, _ in a["per_step"])
    ref = drive(0, cfg(), 200, {"train/loss": noise(90, lambda g: 1.0)})  # no process group at all
    assert a["events"] == ref["events"] and a["requests"] == ref["requests"] and len(evals(a)) >= 2
    assert all(n == 0 for _, n, _ in ref["per_step"])


# -- in one process ------------------------------------------------------------------------------------

def test_rank_discrepancy_threshold_is_a_config_key():
    from adaptive_eval import ConfigError, load_config

    assert load_config().distributed.rank_discrepancy_threshold is None
    cfg_02 = load_config(overrides=["distributed.rank_discrepancy_threshold=0.2"])
    assert cfg_02.distributed.rank_discrepancy_threshold == 0.2
    with pytest.raises(ConfigError, match="distributed.rank_discrepancy_threshold: must be non-negative"):
        load_config(overrides=["distributed.rank_discrepancy_threshold=-1"])


@pytest.mark.parametrize("precision,dtype", [("fp32", "float32"), ("bf16", "bfloat16"), ("none", "float32")])
def test_evaluation_precision_applies_in_one_process_too(precision, dtype):
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"  # where eval_context autocasts
    config = cfg(trigger={"freq_steps": 1}, policy=NO_POLICIES, evaluation={"precision": precision})
    ev = AdaptiveEvaluator.from_config(config)
    seen = {}

    def fn(req):
        seen["inference_mode"] = torch.is_inference_mode_enabled()
        seen["dtype"] = str((torch.ones(2, 2, device=device) @ torch.ones(2, 2, device=device)).dtype)
        return {"x": [1.0]}

    assert ev.evaluate(fn, 0, 0, 0) is not None
    # (none: evaluate_fn runs as it is, for one that is not a torch model)
    assert seen == {"inference_mode": precision != "none", "dtype": f"torch.{dtype}"}


def test_an_unknown_precision_is_a_config_error_naming_the_choices():
    from adaptive_eval import ConfigError, load_config

    with pytest.raises(ConfigError, match=r"evaluation\.precision.*fp32.*bf16.*fp16.*none"):
        load_config(overrides=["evaluation.precision=fp8"])


def _unsharded_rank(rank, world):
    import logging

    said = []

    class Keep(logging.Handler):
        def emit(self, record):
            said.append(record.getMessage())

    logging.getLogger("adaptive_eval").addHandler(Keep(logging.WARNING))
    from adaptive_eval import load_config

    ev = AdaptiveEvaluator.from_config(load_config("areal", ["trigger.freq_steps=5", "distributed.timeout_s=30"]),
                                       total_steps=10, clock=FakeClock())
    for g in range(10):
        ev.evaluate(lambda: {"acc": [1.0, 0.0, 1.0] * 67}, 0, g, g)  # (no request: the whole 201-item set)
    n = ev.history[0]["acc"].n
    ev.close()
    return n, [m for m in said if "did not call request.indices" in m]


def test_an_evaluate_fn_that_never_shards_in_a_group_is_said():
    """A probe: an evaluate_fn of no argument on two ranks, each scoring the whole 201-item set, read n 402 and an
    interval sqrt(2) too narrow, unsaid (it cannot be told from a DistributedSampler's shards, so it is said)."""
    (n0, said0), (n1, said1) = run_ranks(_unsharded_rank, timeout_s=90)
    assert n0 == n1 == 402
    assert len(said0) == 1 and "rank 0 of 2" in said0[0] and "each item counts 2 times" in said0[0]
    assert len(said1) == 1


def _record_to_rank(rank, world, path):
    from adaptive_eval import load_config

    ev = AdaptiveEvaluator.from_config(load_config("areal", ["trigger.freq_steps=5", "distributed.timeout_s=30"]),
                                       total_steps=20, clock=FakeClock())
    recorder = ev.record_to(path)  # (on every rank, as every call in a group)
    for g in range(20):
        ev.observe({"train/loss": 1.0 + rank + 0.01 * g}, g)
        ev.evaluate(lambda r: {"acc": [1.0, 0.0] * 10}, 0, g, g)
    ev.close()
    return recorder is not None


def test_record_to_on_every_rank_writes_one_readable_trace_from_rank_0():
    """Both ranks called record_to(path), as every call in a group is made on every rank: their rows interleaved in
    one file (16 steps twice, headers of different lengths) that read_trace refused (a new user's probe)."""
    from adaptive_eval.trace import read_trace

    with tempfile.TemporaryDirectory() as folder:
        path = f"{folder}/trace.csv"
        assert run_ranks(_record_to_rank, path, timeout_s=90) == [True, False]
        trace = read_trace(path)
        assert trace.steps().tolist() == sorted(set(trace.steps().tolist())) == list(range(20))
        assert trace.column("train/loss")[1].tolist() == [1.0 + 0.01 * g for g in range(20)]  # rank 0's
        assert trace.column("eval/acc")[0].tolist() == [4, 9, 14, 19]


def test_a_seed_per_rank_follows_rank_zeros_and_is_said(group_run):
    a, b = group_run("seed_per_rank")
    assert a["seed"] == b["seed"] == 0 and not set(a["items"]) & set(b["items"]) and a["n"] == b["n"] == 40
    assert a["said"] == [] and b["said"][0].startswith("rank 1: evaluation.seed is 1 here and 0 on rank 0")
    a, b = a["before_train"], b["before_train"]
    assert a["seed"] == b["seed"] == 0 and not set(a["items"]) & set(b["items"]) and a["n"] == b["n"] == 40


def test_replay_on_one_rank_of_a_live_group_runs_alone(group_run):
    a, b = group_run("replay_on_one_rank")
    assert b is None and a["evals"] >= 6 and a["seconds"] < 10

"""policy.lookback: after an alarm's evaluation shows a fall, the last kept checkpoint from before it is evaluated."""

import dataclasses
import json
import logging
import warnings

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from adaptive_eval import AdaptiveEvaluator, load_config
from adaptive_eval.config import ConfigError
from adaptive_eval.scoring import confirmed_delay, needless_evals, pick_best
from conftest import FakeClock

COLLAPSE = 660
STEPS = 800


def truth(step: int) -> float:
    """A run that improves until it collapses at COLLAPSE: its best model is the last one before."""
    return 0.3 + 0.4 * step / 600 if step < COLLAPSE else 0.02


class Run:
    """A training loop with a real evaluator: reward falls at COLLAPSE; evaluate_fn measures the model of the
    step it is asked for (the kept checkpoint when request.checkpoint is set, else the current one)."""

    def __init__(self, overrides=(), *, keep_every=50, tensorboard=None, refs=True):
        ov = ["trigger.freq_steps=25", *overrides]
        if tensorboard is not None:
            ov.append(f"logging.tensorboard_dir={tensorboard}")
        self.clock = FakeClock()
        self.evaluator = AdaptiveEvaluator(load_config("default", overrides=ov), total_steps=STEPS, clock=self.clock)
        self.keep_every = keep_every
        self.refs = refs  # checkpoint_saved(step, "step"), or checkpoint_saved(step) without a ref
        self.rng = np.random.default_rng(0)
        self.eval_rng = np.random.default_rng(1)
        self.requests = []
        self.step = 0

    def evaluate_fn(self, request):
        self.requests.append((request.step, request.checkpoint, request.sample_size, request.reason))
        at = request.step if request.checkpoint is None else int(request.checkpoint)
        n = request.sample_size or 500
        return {"accuracy": (self.eval_rng.random(n) < truth(at)).astype(float)}

    def train(self, until=STEPS, fn=None):
        while self.step < until:
            s = self.step
            self.clock.advance(1.0)
            reward = 0.5 if s < COLLAPSE else -1.0
            self.evaluator.observe({"train/reward": reward + 0.1 * self.rng.standard_normal(),
                                    "train/loss": 1.0 + 0.1 * self.rng.standard_normal()}, s)
            result = self.evaluator.evaluate(fn or self.evaluate_fn, 0, s, s)
            if result is not None:  # (what the loop received, step by step)
                self.__dict__.setdefault("returned", {})[s] = (result.step, result.reason)
            if self.keep_every and s % self.keep_every == 0:
                self.save(s)
            self.step += 1
        return self

    def save(self, s):
        self.evaluator.checkpoint_saved(s, *([str(s)] if self.refs else []))


def lookbacks(history):
    return [r for r in history if r.evaluated_at is not None]


def test_a_fall_evaluates_the_last_kept_checkpoint_before_the_alarm_and_the_pick_finds_it():
    plain = Run(keep_every=0).train()
    kept = Run().train()
    assert not lookbacks(plain.evaluator.history)
    [back] = lookbacks(kept.evaluator.history)
    alarm_eval = next(r for r in kept.evaluator.history if r.reason.startswith("alarm:"))
    before = [r for r in kept.evaluator.history if r.step < COLLAPSE and r.evaluated_at is None]
    # The last checkpoint after the previous evaluation and at least lag_steps (5) before the alarm.
    assert back.step == 650 and before[-1].step < 650 and back.evaluated_at == alarm_eval.step
    assert back.reason == f"lookback:{alarm_eval.reason}" and back.items == before[-1].items
    assert (650, "650", before[-1].items, back.reason) in kept.requests
    # Everything else decided as without kept checkpoints (the fake clock bills no eval time).
    assert [(r.step, r.reason, r.items) for r in kept.evaluator.history if r.evaluated_at is None] == \
        [(r.step, r.reason, r.items) for r in plain.evaluator.history]
    p_plain, p_kept = pick_best(plain.evaluator.history, "accuracy"), pick_best(kept.evaluator.history, "accuracy")
    best = max(truth(s) for s in range(STEPS))
    assert p_kept.step == 650 and best - truth(p_kept.step) < 0.01
    assert best - truth(p_plain.step) > 0.05  # without it the pick is the last scheduled look, 72+ steps earlier
    rows = [r.to_dict() for r in kept.evaluator.history]
    assert rows[-1]["step"] != 650 and any(r.get("evaluated_at") == alarm_eval.step for r in rows)
    assert kept.evaluator.summary()["evals"] == plain.evaluator.summary()["evals"] + 1
    assert (kept.evaluator.summary()["lookbacks"], plain.evaluator.summary()["lookbacks"]) == (1, 0)
    # Saved without a ref, the checkpoint is named by its step (None asked evaluate_fn for the live model)
    bare = Run(refs=False).train()
    assert [(r.step, r.reason) for r in lookbacks(bare.evaluator.history)] == [(650, back.reason)]
    assert (650, 650, before[-1].items, back.reason) in bare.requests


def test_no_lookback_without_a_fall_or_without_a_checkpoint_in_the_gap():
    # Checkpoints only before the previous evaluation: nothing after it to look at.
    run = Run(keep_every=0)
    run.train(until=300)
    run.evaluator.checkpoint_saved(10, "10")
    run.train()
    assert not lookbacks(run.evaluator.history)
    # The policy turned off: checkpoints are remembered by nobody.
    off = Run(["policy.lookback.enabled=false"]).train()
    assert not lookbacks(off.evaluator.history)


def test_resumed_from_state_dict_it_looks_back_exactly_as_the_uninterrupted_run():
    whole = Run().train()
    first = Run().train(until=640)
    state = json.loads(json.dumps(first.evaluator.state_dict()))  # plain values only
    resumed = Run()
    resumed.evaluator.load_state_dict(state)
    resumed.clock.t, resumed.step, resumed.rng, resumed.eval_rng = first.clock.t, first.step, first.rng, first.eval_rng
    resumed.train()
    rows = lambda h: [r.to_dict() for r in h]  # noqa: E731
    assert rows(first.evaluator.history) + rows(resumed.evaluator.history)[len(first.evaluator.history):] == \
        rows(whole.evaluator.history)
    assert lookbacks(resumed.evaluator.history)


def test_an_evaluate_fn_without_a_request_is_never_asked_for_a_checkpoint(caplog):
    run = Run()
    calls = []

    def areal_style():
        calls.append(run.step)
        return {"accuracy": (run.eval_rng.random(500) < truth(run.step)).astype(float)}

    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        run.train(fn=areal_style)
    assert not lookbacks(run.evaluator.history)
    said = [r.getMessage() for r in caplog.records if "cannot load a kept checkpoint" in r.getMessage()]
    assert len(said) == 1


def test_a_failing_checkpoint_evaluation_is_counted_not_raised():
    run = Run()

    def fn(request):
        if request.checkpoint is not None:
            raise FileNotFoundError(f"checkpoint-{request.checkpoint} was deleted")
        return run.evaluate_fn(request)

    errors = []
    run.evaluator.add_listener(lambda e: errors.append(e) if e["kind"] == "error" else None)
    run.train(fn=fn)  # evaluation.on_error: skip (the default): training goes on
    assert not lookbacks(run.evaluator.history)
    [err] = errors
    assert err["step"] == 650 and "FileNotFoundError" in err["error"] and err["reason"].startswith("lookback:")
    assert run.evaluator.summary()["eval_errors"] == 1


def test_checkpoint_saved_is_ignored_where_lookback_cannot_run(caplog):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        cfg = load_config("default", overrides=["evaluation.asynchronous=true"])
        ev = AdaptiveEvaluator(cfg, total_steps=100, clock=FakeClock(), executor=pool)
        with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
            ev.checkpoint_saved(10, "a")
            ev.checkpoint_saved(20, "b")
        ev.close()
    said = [r.getMessage() for r in caplog.records if "kept checkpoints are not evaluated" in r.getMessage()]
    assert len(said) == 1 and "evaluation.asynchronous" in said[0]
    assert ev.policies.by_name["lookback"].kept == []


SUITES = ["evaluation.suites.math.size=300", "evaluation.suites.math.samples_per_item=2",
          "evaluation.suites.aime.size=30", "evaluation.suites.aime.samples_per_item=8",
          "evaluation.suites.aime.every=2", "evaluation.metric=math/acc"]


class SuiteRun(Run):
    """Run with two eval suites (items x answers): math (tracked, every evaluation) and aime (every 2nd)."""

    def __init__(self, overrides=(), **kw):
        super().__init__([*SUITES, *overrides], **kw)

    def evaluate_fn(self, request):
        self.requests.append((request.step, request.checkpoint, {n: (len(r.indices), r.samples_per_item)
                                                                 for n, r in request.suites.items()},
                              request.reason))
        at = request.step if request.checkpoint is None else int(request.checkpoint)
        return {f"{name}/acc": (self.eval_rng.random((len(r.indices), r.samples_per_item)) < truth(at)).astype(float)
                for name, r in request.suites.items()}


def test_with_eval_suites_the_tracked_suite_is_looked_back_at_on_the_plan_it_was_last_measured_with():
    """The RL demo evaluates two suites: a look back there was refused.  It now evaluates the tracked metric's
    suite alone, with the items and answers per item of the evaluation before the checkpoint."""
    run = SuiteRun().train()
    [back] = lookbacks(run.evaluator.history)
    before = [r for r in run.evaluator.history if r.evaluated_at is None and r.step < back.step][-1]
    asked = [r for r in run.requests if r[1] is not None]
    plan = next(r[2]["math"] for r in reversed(run.requests) if r[1] is None and r[0] == before.step)
    assert asked == [(back.step, str(back.step), {"math": plan}, back.reason)]
    assert back.reason.endswith(f"[math: {plan[0]}x{plan[1]}]") and back.reason.startswith("lookback:alarm:")
    assert back.step % 50 == 0 and back.step < COLLAPSE <= back.evaluated_at and set(back.metrics) >= {"math/acc"}
    low, high = back["math/acc"].ci
    assert low < truth(back.step) < high and not any(k.startswith("aime/") for k in back.metrics)
    assert pick_best(run.evaluator.history, "math/acc").step == back.step
    # Resumed from the state just before the collapse: the same requests, the look back's included.
    first = SuiteRun().train(until=COLLAPSE - 1)
    resumed = SuiteRun()
    resumed.evaluator.load_state_dict(json.loads(json.dumps(first.evaluator.state_dict())))
    resumed.rng, resumed.eval_rng, resumed.step = first.rng, first.eval_rng, first.step
    resumed.train()
    assert first.requests + resumed.requests == run.requests


class NaNAnswers(SuiteRun):
    """A grader that times out: a third of the items get no answer (NaN), another third one answer of two."""

    def evaluate_fn(self, request):
        out = super().evaluate_fn(request)
        for values in out.values():
            values[::3, :] = np.nan
            values[1::3, 1:] = np.nan
        return out


class ScalarFirst(SuiteRun):
    """Every suite's results lead with a bookkeeping scalar; the tracked metric aggregates the suites."""

    def __init__(self):
        super().__init__(["evaluation.suites.aime.every=1", "evaluation.suite_aggregate=all",
                          "evaluation.metric=all/acc"])

    def evaluate_fn(self, request):
        out = super().evaluate_fn(request)
        return {k: v for name, acc in out.items() for k, v in ((f"{name.split('/')[0]}/gen_seconds", 12.5),
                                                               (name, acc))}


@pytest.mark.parametrize("run_class", [NaNAnswers, ScalarFirst])
def test_a_look_back_asks_for_the_plan_the_evaluation_beside_it_asked_for_not_what_it_returned(run_class):
    """The plan was read off the returned metric: its n (items whose every answer was NaN left out: 166 -> 110 ->
    73 items over successive looks) or another metric's (a scalar's n of 1: one answer per item), found in review."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the items with fewer answers than asked are said)
        run = run_class().train()
    backs = [r for r in run.requests if r[1] is not None]
    assert backs
    for step, _, plan, _ in backs:
        before = next(r for r in reversed(run.requests) if r[1] is None and r[0] < step)
        assert plan == before[2]
    # resumed from a JSON round trip of the state just before the collapse: the same requests
    first = run_class().train(until=COLLAPSE - 1)
    resumed = run_class()
    resumed.evaluator.load_state_dict(json.loads(json.dumps(first.evaluator.state_dict())))
    resumed.rng, resumed.eval_rng, resumed.step = first.rng, first.eval_rng, first.step
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        resumed.train()
    assert first.requests + resumed.requests == run.requests


def test_replay_looks_back_with_eval_suites_from_the_checkpoints_own_item_truth():
    from adaptive_eval.replay import replay
    from adaptive_eval.trace import Trace, TraceRecord

    rng = np.random.default_rng(3)
    records = []
    for s in range(STEPS):
        m = {"train/reward": (0.5 if s < COLLAPSE else -1.0) + 0.1 * rng.standard_normal(),
             "train/loss": 1.0 + 0.1 * rng.standard_normal()}
        m.update({f"eval/math/acc@{i}": truth(s) for i in range(300)})
        m.update({f"eval/aime/acc@{i}": truth(s) / 2 for i in range(30)})
        records.append(TraceRecord(step=s, metrics=m))
    cfg = [*SUITES, "trigger.freq_steps=25", "logging.tensorboard_dir=null"]
    plain = replay(Trace(records), load_config("default", overrides=cfg))
    kept = replay(Trace(records), load_config("default", overrides=[*cfg, "replay.checkpoint_every=25"]))
    [back] = [e for e in kept.evals if "evaluated_at" in e]
    assert back["step"] % 25 == 0 and back["step"] < COLLAPSE <= back["evaluated_at"]
    low, high = back["ci"]["math/acc"]
    assert low < truth(back["step"]) < high and low > truth(COLLAPSE)  # drawn from the checkpoint's truth
    assert [e["step"] for e in kept.evals if "evaluated_at" not in e] == [e["step"] for e in plain.evals]
    assert kept.summary["best"]["step"] == back["step"]


def test_bad_checkpoint_arguments_and_config_are_clear_errors():
    ev = AdaptiveEvaluator(load_config("default"), total_steps=100, clock=FakeClock())
    with pytest.raises(TypeError, match="global_step must be an integer"):
        ev.checkpoint_saved("10")
    with pytest.raises(TypeError, match="plain value"):
        ev.checkpoint_saved(10, object())
    ev.checkpoint_saved(10, __import__("pathlib").Path("/ckpt/10"))
    ev.checkpoint_saved(20)  # without a ref its step names it (it was None: the look back measured the live model)
    assert ev.policies.by_name["lookback"].kept == [(10, "/ckpt/10"), (20, 20)]
    ev.close()
    for key, value in (("policy.lookback.keep", 0), ("policy.lookback.lag_steps", -1),
                       ("policy.lookback.sample_size", 0), ("replay.checkpoint_every", 0)):
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            load_config("default", overrides=[f"{key}={value}"])


def test_tensorboard_shows_the_checkpoint_on_its_step_without_dropping_later_points(tmp_path):
    run = Run(tensorboard=tmp_path)
    events = []
    run.evaluator.add_listener(events.append)
    run.train()
    run.evaluator.close()
    acc = EventAccumulator(str(tmp_path))  # TensorBoard's default settings
    acc.Reload()
    back = [(e.step, e.value) for e in acc.Scalars("lookback/accuracy")]
    assert back == [(650, pytest.approx(lookbacks(run.evaluator.history)[0].mean("accuracy")))]
    evals = [e.step for e in acc.Scalars("eval/accuracy")]
    assert evals == [r.step for r in run.evaluator.history if r.evaluated_at is None]
    from adaptive_eval.tensorboard import read_texts

    assert any("evaluated the checkpoint of step 650" in t for _, t in read_texts(str(tmp_path), "decisions"))
    # plot, from this TensorBoard folder alone (no evals.jsonl): the look back and the alarms were dropped.
    from adaptive_eval.plot import _load

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "tb").symlink_to(tmp_path, target_is_directory=True)
    drawn = _load(tmp_path / "run")
    history = sorted(run.evaluator.history, key=lambda r: r.step)
    assert [(e["step"], e["reason"], e["sample_size"]) for e in drawn.evals] == \
        [(r.step, r.reason, r.items) for r in history]
    assert [e["metrics"]["accuracy"] for e in drawn.evals] == pytest.approx([r.mean("accuracy") for r in history])
    alarms = [(a["step"], a["stream"], a["detector"], a["direction"]) for a in drawn.alarms]
    assert alarms and alarms == [(e["step"], e["stream"], e["detector"], e["direction"])
                                 for e in events if e["kind"] == "alarm"]


def test_scoring_never_counts_a_checkpoint_evaluation_as_a_confirmation_and_counts_it_where_it_ran():
    rows = [{"step": 100, "reason": "interval:relaxed", "metrics": {"acc": 0.6}, "ci": {"acc": [0.56, 0.64]}},
            {"step": 160, "reason": "alarm:r:cusum:down", "metrics": {"acc": 0.62}, "ci": {"acc": [0.4, 0.8]}},
            {"step": 150, "reason": "lookback:alarm:r:cusum:down", "evaluated_at": 160, "metrics": {"acc": 0.2},
             "ci": {"acc": [0.16, 0.24]}},
            {"step": 200, "reason": "interval:relaxed", "metrics": {"acc": 0.1}, "ci": {"acc": [0.07, 0.13]}}]
    # The checkpoint of step 150 shows the change that began at 140, but its result came at 160, after the
    # alarm's evaluation: the first to confirm is the one at 200.
    assert confirmed_delay(rows, 140, "acc") == 60
    # Needless where it ran: before the first event at 170 (with the alarm that brought it), not before one at 155.
    assert needless_evals(rows, [170]) == (2, 3)
    assert needless_evals(rows, [155]) == (0, 1)


def test_replay_simulates_kept_checkpoints_from_their_own_ground_truth():
    from adaptive_eval.replay import replay
    from adaptive_eval.trace import Trace, TraceRecord

    rng = np.random.default_rng(3)
    reward = [(0.5 if s < COLLAPSE else -1.0) + 0.1 * rng.standard_normal() for s in range(STEPS)]
    records = [TraceRecord(step=s, metrics={"train/reward": reward[s],
                                            "train/loss": 1.0 + 0.1 * rng.standard_normal(), "eval/accuracy": truth(s)})
               for s in range(STEPS)]
    trace = Trace(records)
    cfg = ["trigger.freq_steps=25", "logging.tensorboard_dir=null"]
    plain = replay(trace, load_config("default", overrides=cfg))
    kept = replay(trace, load_config("default", overrides=[*cfg, "replay.checkpoint_every=25"]))
    [back] = [e for e in kept.evals if "evaluated_at" in e]
    assert back["step"] % 25 == 0 and back["step"] < COLLAPSE <= back["evaluated_at"]
    low, high = back["ci"]["accuracy"]
    assert low < truth(back["step"]) < high and low > truth(COLLAPSE)  # drawn from the checkpoint's truth
    assert [e["step"] for e in kept.evals if "evaluated_at" not in e] == [e["step"] for e in plain.evals]
    assert kept.summary["best"]["step"] == back["step"]


def test_a_recorded_trace_only_goes_forward_and_replays_the_same_run(tmp_path):
    """The kept checkpoint's result is not written into the crash-safe trace at its past step."""
    from adaptive_eval.trace import read_trace

    run = Run()
    run.evaluator.record_to(tmp_path / "run.csv")
    run.train()
    run.evaluator.close()
    assert lookbacks(run.evaluator.history) and run.evaluator.summary()["record_errors"] == 0
    trace = read_trace(tmp_path / "run.csv")
    steps = [r.step for r in trace.records]
    assert steps == sorted(steps) and len(steps) == len(set(steps)) == STEPS
    evals = {r.step: r.metrics["eval/accuracy"] for r in trace.records if "eval/accuracy" in r.metrics}
    assert sorted(evals) == [r.step for r in run.evaluator.history if r.evaluated_at is None]


def test_an_evaluation_of_the_model_in_memory_is_never_asked_for_a_checkpoint(caplog):
    """The Lightning adapter's own evaluation runs the model in memory: handed a checkpoint, it would have
    measured the model of now under the checkpoint's step."""
    from adaptive_eval.integrations.lightning import _ModuleEval

    assert _ModuleEval.evaluates_checkpoints is False  # (the HF adapter's loads them: test_integrations_hf.py)
    run = Run()

    class InMemory:
        evaluates_checkpoints = False

        def __call__(self, request):
            assert request.checkpoint is None
            return run.evaluate_fn(request)

    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        run.train(fn=InMemory())
    assert not lookbacks(run.evaluator.history)
    assert sum("evaluates the model in memory" in r.getMessage() for r in caplog.records) == 1


def test_a_failing_checkpoint_evaluation_never_raises_into_training_even_under_on_error_raise():
    """evaluation.on_error: raise is for the evaluations the user scheduled; a checkpoint deleted before its turn
    (save_total_limit) raised out of evaluate() and killed the run."""
    run = Run(["evaluation.on_error=raise"])

    def fn(request):
        if request.checkpoint is not None:
            raise FileNotFoundError("deleted")
        return run.evaluate_fn(request)

    run.train(fn=fn)
    assert run.evaluator.summary()["eval_errors"] == 1 and not lookbacks(run.evaluator.history)


def test_an_aggregate_without_an_interval_that_falls_looks_back():
    """A new user's probe: one value over the items (HF's or Lightning's per_item=False) has no interval, and with its
    NaN interval no fall was ever seen: a collapse to 0.02 looked back at nothing.  Its value is read as it is."""
    run = Run(["evaluation.metric=accuracy"])

    def fn(request):
        return {"accuracy": truth(request.step if request.checkpoint is None else int(request.checkpoint))}

    run.train(fn=fn)
    assert [r.step for r in lookbacks(run.evaluator.history)] == [650]


def test_a_scalar_metric_looks_back_on_the_items_asked_not_on_its_n_of_one():
    """A scalar (n = 1, no interval) that goes NaN (the run died) falls.  The look back asked for 1 item."""
    run = Run(["evaluation.metric=accuracy"])
    sizes = []

    def fn(request):
        if request.checkpoint is not None:
            sizes.append(request.sample_size)
        dead = request.checkpoint is None and request.step >= COLLAPSE
        return {"accuracy": float("nan") if dead else float(run.evaluate_fn(request)["accuracy"].mean())}

    run.train(fn=fn)
    asked = [r.sample_size for r in run.evaluator.history if r.evaluated_at is None and r.step < COLLAPSE]
    assert sizes == [asked[-1]] and sizes[0] > 1


# -- a process group (two gloo ranks) --------------------------------------------------------------------------

ITEMS = 400


def _item_right(i: int, step: int) -> float:
    """Item ``i`` on the model of ``step``: deterministic, so any sharding of the items sums the same."""
    return float((i * 7919) % 1000 / 1000 < truth(step))


def _group_run(rank, world, register=True, stop=STEPS, suites=False, missing_on=None, broken_on=None, every=50):
    """The Run loop on every rank of a group (each rank evaluates its shard of the items), up to ``stop``;
    ``suites``: the two suites of SuiteRun, items x 2 answers; ``missing_on``: the rank that cannot find a kept
    checkpoint (a node without the file), whose what is logged at WARNING and above is returned too."""
    from adaptive_eval.evaluators import CheckpointUnavailable

    said = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: said.append((record.levelname, record.getMessage()))
    logging.getLogger("adaptive_eval").addHandler(handler)
    clock = FakeClock()
    cfg = load_config("default", overrides=["trigger.freq_steps=25", "distributed.timeout_s=30",
                                            *(SUITES if suites else [])])
    ev = AdaptiveEvaluator(cfg, total_steps=STEPS, clock=clock)
    rng = np.random.default_rng(0)  # the same streams on every rank: the same alarms
    asked = []

    def fn(request):
        at = request.step if request.checkpoint is None else int(request.checkpoint)
        if request.checkpoint is not None and rank == missing_on:
            raise CheckpointUnavailable(f"{request.checkpoint}: no such file on this node")
        if request.checkpoint is not None and rank == broken_on:
            raise OSError(f"{request.checkpoint}: stale file handle")
        if suites:
            if request.checkpoint is not None:
                asked.append((request.step, request.checkpoint, request.world_size, list(request.suites["math"].indices)))
            return {f"{name}/acc": [[_item_right(i, at)] * 2 for i in r.indices] for name, r in request.suites.items()}
        idx = request.indices(ITEMS)
        if request.checkpoint is not None:
            asked.append((request.step, request.checkpoint, request.world_size, idx))
        return {"accuracy": [_item_right(i, at) for i in idx]}

    for s in range(stop):
        clock.advance(1.0)
        reward = 0.5 if s < COLLAPSE else -1.0
        ev.observe({"train/reward": reward + 0.1 * rng.standard_normal(),
                    "train/loss": 1.0 + 0.1 * rng.standard_normal()}, s)
        ev.evaluate(fn, 0, s, s)
        if s % every == 0 and (register is True or register == rank):
            ev.checkpoint_saved(s, str(s))
    ev.close()
    logging.getLogger("adaptive_eval").removeHandler(handler)
    metric = "math/acc" if suites else "accuracy"
    return {"history": [(r.step, r.reason, r.evaluated_at, r.items, round(r.mean(metric), 12))
                        for r in ev.history], "asked": asked, "said": [x for x in said if "650" in x[1]]}


def _group_scenarios(rank, world):
    alarm = next(r[0] for r in _group_run(0, 1)["history"] if r[1].startswith("alarm:"))
    return {"alike": _group_run(rank, world), "rank0_only": _group_run(rank, world, register=0),
            "stopped": _group_run(rank, world, stop=alarm + 1), "suites": _group_run(rank, world, suites=True),
            "missing": _group_run(rank, world, missing_on=1)}


def test_a_process_group_looks_back_on_every_rank_like_one_process_and_never_hangs_when_ranks_disagree():
    from dist_utils import run_ranks

    a, b = run_ranks(_group_scenarios, timeout_s=120)
    single = _group_run(0, 1)  # no group: the same loop in one process
    assert a["alike"]["history"] == b["alike"]["history"] == single["history"]
    [back] = [r for r in single["history"] if r[2] is not None]
    assert back[0] == 650
    # Sharded: each rank evaluated its part of the checkpoint's items, the parts disjoint and together the
    # single process's items.
    [(step_a, ref_a, world_a, idx_a)], [(step_b, ref_b, world_b, idx_b)] = a["alike"]["asked"], b["alike"]["asked"]
    [(_, _, _, idx_one)] = single["asked"]
    assert (step_a, ref_a, world_a) == (step_b, ref_b, world_b) == (650, "650", 2)
    assert not set(idx_a) & set(idx_b) and sorted(idx_a + idx_b) == sorted(idx_one)
    # Stopped right after the alarm's evaluation (the run's last step here): looked back all the same.
    assert a["stopped"]["history"] == b["stopped"]["history"] and any(r[2] is not None for r in a["stopped"]["history"])
    # Only rank 0 was told of the checkpoints: the look back is off on both ranks (said), and nothing hangs.
    assert a["rank0_only"] == b["rank0_only"] and not a["rank0_only"]["asked"]
    assert a["rank0_only"]["history"] == [r for r in single["history"] if r[2] is None]
    # With eval suites: the same look back as one process, the tracked suite's items sharded.
    one = _group_run(0, 1, suites=True)
    assert a["suites"]["history"] == b["suites"]["history"] == one["history"]
    assert [r for r in one["history"] if r[2] is not None and "[math: " in r[1]]
    [(_, _, _, sa)], [(_, _, _, sb)], [(_, _, _, s1)] = a["suites"]["asked"], b["suites"]["asked"], one["asked"]
    assert not set(sa) & set(sb) and sorted(sa + sb) == sorted(s1)
    # Rank 1 cannot find the kept checkpoint (no shared filesystem): both skip it alike, and rank 0, whose log
    # is the one read, says so in one warning line, not as an evaluation error (found in review)
    assert a["missing"]["history"] == b["missing"]["history"] == a["rank0_only"]["history"]
    # (its text does not repeat the error's type: "CheckpointUnavailable: on rank 1: CheckpointUnavailable: ...")
    assert [lvl for lvl, _ in a["missing"]["said"]] == ["WARNING"] and "): on rank 1: 650: no such file on this " \
        "node" in a["missing"]["said"][0][1] and "CheckpointUnavailable" not in a["missing"]["said"][0][1]
    assert [lvl for lvl, _ in b["missing"]["said"]] == ["WARNING"]


def _gone_and_broken(rank, world):
    return {"mixed": _group_run(rank, world, missing_on=1, broken_on=0, every=10),
            "told": _group_run(rank, world, register=0, every=10)}


def test_a_checkpoint_gone_on_one_rank_and_failing_otherwise_on_the_other_is_skipped_alike():
    """Review: gone on rank 1 (CheckpointUnavailable), another error on rank 0: rank 1 tried the next older kept
    checkpoint alone, and the group failed with CollectiveError.  Decided on what both gathered, neither goes on to
    it: the run is the one without a look back."""
    from dist_utils import run_ranks

    a, b = run_ranks(_gone_and_broken, timeout_s=180)
    assert a["mixed"]["history"] == b["mixed"]["history"] == a["told"]["history"]
    assert not [r for r in a["mixed"]["history"] if r[2] is not None]


class Costly(Run):
    """Evaluations that take 0.05 s an item on the run's clock: the budget trims the alarm's evaluation."""

    def evaluate_fn(self, request):
        self.clock.advance(0.05 * (request.sample_size or 500))
        return super().evaluate_fn(request)


def test_a_kept_checkpoint_gone_is_not_retried_under_on_error_retry():
    """Found in review: under evaluation.on_error: retry a gone checkpoint was asked for 4 times, with 1 + 2 + 4 s
    of sleep in the training step between."""
    from adaptive_eval.evaluators import CheckpointUnavailable

    run = Run(["evaluation.on_error=retry", "evaluation.max_retries=3", "evaluation.retry_backoff_s=1"])
    asked = []

    def fn(request):
        if request.checkpoint is not None:
            asked.append(request.checkpoint)
            raise CheckpointUnavailable(f"{request.checkpoint}: no such file any more")
        return run.evaluate_fn(request)

    run.train(fn=fn)
    # (each once; the next older one kept after the evaluation before the fall is then tried, also once)
    assert asked == ["650", "600"] and run.evaluator.summary()["eval_errors"] == 2


def test_a_look_back_does_not_carry_the_budget_note_of_the_alarms_evaluation():
    """Found by a new user: "lookback:alarm:... (budget: 80 of 500 items)" on a look back of 50 items: the note
    was the alarm evaluation's (the budget does not size a look back)."""
    run = Costly().train()
    [back] = lookbacks(run.evaluator.history)
    alarm = next(r for r in run.evaluator.history if r.evaluated_at is None and r.step == back.evaluated_at)
    assert alarm.reason.startswith("alarm:") and " (budget: " in alarm.reason
    assert back.reason == "lookback:" + alarm.reason.split(" (budget: ")[0]


def test_a_checkpoint_name_saved_over_forgets_the_earlier_step_and_says_so(caplog):
    """A trainer that writes one ``last.pt`` over and over: a look back at step 650 loaded the file, which held a
    later step's weights, and filed their score as step 650's (in the pick and TensorBoard), without a word.
    The name given again forgets the earlier step (a warning, once); the look back then has nothing before the
    fall that the file still holds, so none runs."""
    import logging

    class OneFile(Run):
        def __init__(self):
            super().__init__()
            self.in_file = None  # the step whose weights last.pt holds
            self.loaded = []

        def evaluate_fn(self, request):
            if request.checkpoint is not None:
                self.loaded.append((request.step, self.in_file))  # (asked for, what loading last.pt gives)
                request = dataclasses.replace(request, checkpoint=self.in_file)
            return super().evaluate_fn(request)

        def save(self, s):
            self.in_file = s
            self.evaluator.checkpoint_saved(s, "last.pt")

    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        run = OneFile().train()
    said = [r.getMessage() for r in caplog.records if "under the same name" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("checkpoint_saved(50, 'last.pt'): the checkpoint of step 0 ")
    assert [ref for _, ref in run.evaluator.policies.by_name["lookback"].kept] == ["last.pt"]
    # the look back asks only for the step the file holds (here 650, the last save before the fall)
    assert run.loaded and all(asked == held for asked, held in run.loaded), run.loaded


def test_lookback_sample_size_sets_each_suites_items_with_eval_suites():
    """policy.lookback.sample_size (100, or 5000 above the suite's size) was ignored with eval suites: the look
    back ran the plan of the evaluation before it whatever it said."""
    for size, items in ((40, 40), (5000, None)):
        run = SuiteRun([f"policy.lookback.sample_size={size}"]).train()
        [back] = lookbacks(run.evaluator.history)
        plan = next(r[2]["math"] for r in run.requests if r[1] is not None)
        suite_size = int(run.evaluator.cfg.evaluation.suites.math.size)
        assert plan[0] == (items or suite_size) and back.reason.endswith(f"[math: {plan[0]}x{plan[1]}]")


def test_a_look_back_whose_exception_cannot_say_its_message_is_a_failed_look_back():
    """A look back always runs as on_error: skip; its error event formatted the exception by hand, and one whose
    __str__ raises escaped evaluate() (review)."""

    class Unreadable(Exception):
        def __str__(self):
            return self.detail  # (not set)

    run = Run()

    def fn(request):
        if request.checkpoint is not None:
            raise Unreadable()
        return run.evaluate_fn(request)

    errors = []
    run.evaluator.add_listener(lambda e: errors.append(e) if e["kind"] == "error" else None)
    run.train(fn=fn)
    assert [e["error"] for e in errors] == ["Unreadable: <str() failed; repr: Unreadable()>"]
    assert errors[0]["evaluated_at"] > errors[0]["step"] and not lookbacks(run.evaluator.history)


def test_a_kept_checkpoint_found_gone_gives_way_to_the_next_older_one_the_fall_allows():
    """A new user's probe: save_total_limit deleted checkpoint-95 while checkpoint-90, also after the evaluation
    before the fall, was still on disk; the look back gave up at the first.  It now tries the next older one
    (once each, never one from before the evaluation before the fall), and the pick can find it."""
    from adaptive_eval.evaluators import CheckpointUnavailable

    run = Run(keep_every=10)
    asked = []

    def fn(request):
        if request.checkpoint is not None:
            asked.append(request.checkpoint)
            if request.checkpoint == "650":
                raise CheckpointUnavailable(f"{request.checkpoint}: no such folder any more")
        return run.evaluate_fn(request)

    run.train(fn=fn)
    [back] = lookbacks(run.evaluator.history)
    assert asked == ["650", "640"] and back.step == 640 and run.evaluator.summary()["eval_errors"] == 1
    assert pick_best(run.evaluator.history, "accuracy").step == 640
    assert 650 not in [s for s, _ in run.evaluator.policies.by_name["lookback"].kept]

    # every one gone: each tried once, back to the evaluation before the fall and no further
    run = Run(keep_every=10)
    asked.clear()

    def gone(request):
        if request.checkpoint is not None:
            asked.append(int(request.checkpoint))
            raise CheckpointUnavailable(f"{request.checkpoint}: no such folder any more")
        return run.evaluate_fn(request)

    run.train(fn=gone)
    # the 8 remembered (policy.lookback.keep) are 590-660; 660 is within lag_steps of the alarm; the evaluation
    # before the fall, at 575, bounds them too
    before = max(r.step for r in run.evaluator.history if r.step < COLLAPSE)
    assert asked == [650, 640, 630, 620, 610, 600, 590] and before < 590
    assert run.evaluator.summary()["eval_errors"] == len(asked) and not lookbacks(run.evaluator.history)

    # and the evaluation before the fall bounds them: 60-step checkpoints at 600 and 540, the latter before it
    run = Run(keep_every=60)
    asked.clear()
    run.train(fn=gone)
    assert asked == [600]


def test_a_run_resumed_from_inside_a_look_back_at_a_gone_checkpoint_tries_the_older_one_as_the_uninterrupted_one():
    """Review: what the fall allowed was not in state_dict, so a run resumed from a state a preemption's handler
    saved inside the look back at the gone checkpoint 650 tried 650 again and no older one (the uninterrupted run
    went on to 640)."""
    from adaptive_eval.evaluators import CheckpointUnavailable

    def go(preempt):
        run = Run(keep_every=10)
        asked, saved = [], {}

        def fn(request):
            if request.checkpoint is not None:
                asked.append(request.checkpoint)
                if preempt and not saved:
                    saved["state"] = json.loads(json.dumps(run.evaluator.state_dict()))
                    raise KeyboardInterrupt
                if request.checkpoint == "650":
                    raise CheckpointUnavailable("650: no such folder any more")
            return run.evaluate_fn(request)

        try:
            run.train(fn=fn)
        except KeyboardInterrupt:
            run.evaluator = AdaptiveEvaluator(load_config("default", overrides=["trigger.freq_steps=25"]),
                                              total_steps=STEPS, clock=run.clock)
            run.evaluator.load_state_dict(saved["state"])
            run.train(fn=fn)
        return [(r.step, r.evaluated_at) for r in lookbacks(run.evaluator.history)], asked

    (uninterrupted, asked), (resumed, asked_resumed) = go(False), go(True)
    assert uninterrupted == resumed and uninterrupted[0][0] == 640
    assert asked == ["650", "640"] and asked_resumed == ["650", "650", "640"]

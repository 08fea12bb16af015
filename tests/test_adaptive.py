"""The AdaptiveEvaluator end to end through its public API: scenarios, resume, reasons, bad input."""

import json
import math
import random

import numpy as np
import pytest

from adaptive_eval import AdaptiveEvaluator, EpochStepTimeFreqCtl, EvalRequest, load_config
from adaptive_eval.config import ConfigError
from conftest import FakeClock


class Run:
    """A simulated training run: a clock that advances per step and an eval that costs time."""

    def __init__(self, cfg, truth, streams, *, step_seconds=10.0, eval_seconds_per_item=0.05, seed=0, **kw):
        self.clock = FakeClock()
        self.ev = AdaptiveEvaluator.from_config(cfg, clock=self.clock, **kw)
        self.truth, self.streams = truth, streams
        self.rng = np.random.default_rng(seed)
        self.step_seconds, self.cost = step_seconds, eval_seconds_per_item
        self.results = []

    def evaluate_fn(self, request: EvalRequest):
        idx = request.indices(1000)
        self.clock.advance(self.cost * len(idx))
        p = self.truth(request.step)
        return {"accuracy": (self.rng.random(len(idx)) < p).astype(float)}

    def step(self, g):
        self.clock.advance(self.step_seconds)
        self.ev.observe({k: f(g) for k, f in self.streams.items()}, g)
        r = self.ev.evaluate(self.evaluate_fn, 0, g, g)
        if r is not None:
            self.results.append(r)
        return r

    def run(self, start, stop):
        for g in range(start, stop):
            self.step(g)
        return self


def noisy(level_fn, sd, seed):
    rng = np.random.default_rng(seed)
    noise = rng.normal(0, sd, size=100_000)
    return lambda g: float(level_fn(g) + noise[g])


COLLAPSE_AT = 400
collapse_truth = lambda g: 0.6 if g < COLLAPSE_AT else 0.05  # noqa: E731


def collapse_streams(seed=1):
    return {"train/reward": noisy(lambda g: 0.6 if g < COLLAPSE_AT else 0.1, 0.05, seed),
            "train/loss": noisy(lambda g: 1.0, 0.1, seed + 1),
            "train/response_length": noisy(lambda g: 300.0 if g < COLLAPSE_AT else 1024.0, 20.0, seed + 2)}


def test_collapse_in_train_reward_is_evaluated_within_10_steps_with_a_wider_sample():
    run = Run(load_config(), collapse_truth, collapse_streams()).run(0, 600)
    before = [r for r in run.results if r.step < COLLAPSE_AT]
    after = [r for r in run.results if r.step >= COLLAPSE_AT]
    assert after[0].step - COLLAPSE_AT <= 10
    # The alarm-driven evaluation (a scheduled one may land just before it):
    first = next(r for r in after if r.reason.startswith("alarm:train/"))
    assert first.step - COLLAPSE_AT <= 10
    assert first.reason in {"alarm:train/reward:cusum:down", "alarm:train/response_length:cusum:up"}
    assert first.sample_size > before[-1].sample_size
    assert first.mean("accuracy") < 0.2  # it saw the collapse


def test_when_evaluations_are_dear_an_alarm_is_evaluated_at_once_on_the_sample_the_budget_affords():
    """An item costs 1 s and a step 10 s (a 500-item evaluation = 50 training steps), budget 11%: the alarm's
    widened evaluation (512 items) does not fit, so it runs at once on what fits instead of waiting ~50 steps
    (policy.budget.alarm_min_size: null, the old behaviour)."""
    run = Run(load_config(), collapse_truth, collapse_streams(), eval_seconds_per_item=1.0).run(0, 700)
    first = next(r for r in run.results if r.step >= COLLAPSE_AT)
    assert first.step - COLLAPSE_AT <= 5 and first.reason.startswith("alarm:train/")
    assert "(budget: " in first.reason and 48 <= first.items < 512
    assert first.mean("accuracy") < 0.2                                   # it saw the collapse
    assert run.ev.summary()["eval_seconds"] / run.clock.t <= 0.11
    old = ["policy.budget.alarm_min_size=null", "policy.budget.shrink_widened=false"]  # (the next test)
    waits = Run(load_config(overrides=old), collapse_truth, collapse_streams(),
                eval_seconds_per_item=1.0).run(0, 700)
    late = next(r for r in waits.results if r.step >= COLLAPSE_AT)
    assert late.step - COLLAPSE_AT > 25 and late.reason.startswith("alarm:train/") and late.items == 512


def test_an_alarms_evaluation_the_budget_holds_back_is_said_once(caplog):
    """Found by a new user (a tiny model on a shared CPU, each evaluation as dear as several training steps): the
    alarm's evaluation waited 54 steps for the budget, and only summary()['deferrals'] said so."""
    import logging

    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        run = Run(load_config(overrides=["policy.budget.alarm_min_size=null", "policy.budget.shrink_widened=false"]),
                  collapse_truth, collapse_streams(),
                  eval_seconds_per_item=1.0).run(0, 700)
    said = [r.getMessage() for r in caplog.records if "the budget holds back" in r.getMessage()]
    first = next(r for r in run.results if r.step >= COLLAPSE_AT)
    assert len(said) == 1 and "(alarm:train/" in said[0] and "policy.budget.max_eval_fraction is 0.11" in said[0]
    assert first.step - COLLAPSE_AT > 25  # (it did wait)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        Run(load_config(), collapse_truth, collapse_streams(), eval_seconds_per_item=1.0).run(0, 700)
    assert not [r for r in caplog.records if "the budget holds back" in r.getMessage()]  # (it ran at once)


def test_when_evaluations_are_dear_a_widened_scheduled_evaluation_runs_on_what_the_budget_affords():
    """The same dear evaluations (a 500-item evaluation = 50 training steps, budget 11%).  The peak policy widens
    the scheduled evaluation after the first to 500 items to re-measure a new best.  Waiting for all of them
    (policy.budget.shrink_widened: false) left the run with no evaluation between step 24 and the collapse's
    alarm at 402; now each widened one runs on what the budget affords, never below the size the sample-size
    policy asked for, and eval time stays within the budget."""
    run = Run(load_config(), collapse_truth, collapse_streams(), eval_seconds_per_item=1.0).run(0, 700)
    before = [r for r in run.results if r.step < COLLAPSE_AT]
    assert len(before) >= 3
    shrunk = [r for r in run.results if "(budget: " in r.reason and not r.reason.startswith("alarm:")]
    assert len(shrunk) >= 2 and all(r.reason.startswith("interval:") and " of 500 items)" in r.reason for r in shrunk)
    assert all(r.items >= 48 for r in run.results)
    first = next(r for r in run.results if r.step >= COLLAPSE_AT)
    assert first.step - COLLAPSE_AT <= 5 and first.mean("accuracy") < 0.2
    assert run.ev.summary()["eval_seconds"] / run.clock.t <= 0.11
    waits = Run(load_config(overrides=["policy.budget.shrink_widened=false"]), collapse_truth, collapse_streams(),
                eval_seconds_per_item=1.0).run(0, 700)
    assert [r.step for r in waits.results if r.step < COLLAPSE_AT] == [24]


@pytest.mark.parametrize("per_item", [1.0, 5.0])
def test_a_storm_of_alarms_does_not_break_the_budget(per_item):
    """Reward and loss switch level every 40 steps, 1,000 steps: an alarm (corroborated) every 40 steps.  Each
    alarm's evaluation shrinks to what the budget affords or waits; eval time stays within the 11%."""
    def level(a, b):
        return lambda g: a if (g // 40) % 2 == 0 else b
    streams = {"train/reward": noisy(level(0.6, 0.3), 0.03, 1), "train/loss": noisy(level(1.0, 1.5), 0.05, 2)}
    run = Run(load_config(), lambda g: 0.6, streams, eval_seconds_per_item=per_item).run(0, 1000)
    shrunk = [r for r in run.results if "(budget: " in r.reason]
    assert any(r.reason.startswith("alarm:") for r in shrunk) and all(r.items >= 48 for r in shrunk)
    assert run.ev.summary()["eval_seconds"] / run.clock.t <= 0.11


def test_quiet_run_relaxes_beyond_the_base_interval():
    streams = {"train/reward": noisy(lambda g: 0.5, 0.05, 3), "train/loss": noisy(lambda g: 2.0, 0.1, 4)}
    cfg = load_config()
    base = cfg.trigger.freq_steps
    run = Run(cfg, lambda g: 0.5, streams).run(0, 3000)
    gaps = np.diff([r.step for r in run.results])
    # Gaps grow past the base interval up to max_factor x base; the odd false alarm does not stop that.
    assert np.median(gaps) > base and gaps.max() >= cfg.policy.interval.max_factor * base - 1
    assert sum(r.reason == "interval:relaxed" for r in run.results) >= len(run.results) // 2
    assert len(run.results) < 3000 / base * 0.7


def test_areal_preset_reproduces_the_base_trigger_exactly():
    rng = random.Random(0)
    for _ in range(20):
        f = rng.randint(1, 40)
        cfg = load_config("areal", [f"trigger.freq_steps={f}"])
        ev = AdaptiveEvaluator.from_config(cfg)
        ctl = EpochStepTimeFreqCtl(freq_step=f)
        ours = []
        for g in range(300):
            ev.observe({"train/reward": rng.random()}, g)
            if ev.evaluate(lambda: None, 0, g, g) is not None:
                ours.append(g)
        assert ours == [g for g in range(300) if ctl.check(0, 1)]


def test_zero_argument_evaluate_fn_still_works(clock):
    cfg = load_config(overrides=["trigger.freq_steps=5", "policy.interval.enabled=false"])
    ev = AdaptiveEvaluator.from_config(cfg, clock=clock)
    results = []
    for g in range(10):
        clock.advance(10.0)
        results.append(ev.evaluate(lambda: {"acc": 0.75}, 0, g, g))
    got = [r for r in results if r is not None]
    assert [r.step for r in got] == [4, 9] and got[0].mean("acc") == 0.75


def test_resume_equivalence_800_steps_through_json():
    def make():
        return Run(load_config(), collapse_truth, collapse_streams(seed=7), seed=5)

    full = make().run(0, 800)
    first = make().run(0, 400)
    state = json.loads(json.dumps(first.ev.state_dict()))
    resumed = make()
    resumed.clock.t = first.clock.t
    resumed.rng = first.rng  # the simulated model's randomness continues too
    resumed.ev.load_state_dict(state)
    resumed.run(400, 800)
    got = [(r.step, r.sample_size, r.reason) for r in first.results + resumed.results]
    assert got == [(r.step, r.sample_size, r.reason) for r in full.results]
    assert any(r.reason.startswith("alarm:") for r in full.results)


def test_at_most_one_evaluation_per_step_and_every_eval_has_a_reason(clock):
    ev = AdaptiveEvaluator.from_config(load_config(overrides=["trigger.freq_steps=1"]), clock=clock)
    steps = []
    for g in range(40):
        clock.advance(10.0)
        ev.observe({"x": float("nan") if g == 5 else 1.0}, g)
        first = ev.evaluate(lambda: {"acc": 0.5}, 0, g, g)
        assert ev.evaluate(lambda: {"acc": 0.5}, 0, g, g) is None
        if first is not None:
            assert first.reason and first.step == g
            steps.append(g)
    assert len(steps) == len(set(steps)) > 5
    assert {r.step: r.reason for r in ev.history}[5] == "alarm:x:nonfinite"


def test_nan_is_an_alarm_not_an_exception():
    ev = AdaptiveEvaluator.from_config(load_config(overrides=["trigger.freq_steps=1000"]))
    seen = []
    ev.add_listener(seen.append)
    for g in range(50):
        ev.observe({"train/loss": math.inf if g >= 30 else 1.0 + 0.01 * (g % 3)}, g)
        ev.evaluate(lambda: {"acc": 0.5}, 0, g, g)
    alarms = [e for e in seen if e["kind"] == "alarm" and e["detector"] == "nonfinite"]
    evals = [e["step"] for e in seen if e["kind"] == "eval"]
    assert alarms and alarms[0]["step"] == 30 and 30 in evals


def test_a_nan_evaluation_brings_no_second_evaluation_of_the_dead_model_and_its_items_count():
    """Found by a new-user probe: the eval metric's nonfinite alarm on an all-NaN result of a dead model (its loss
    NaN too) asked at once for another evaluation (the next step, the same dead weights) and tightened the schedule,
    and the NaN items counted 0 in ``items`` and ``summary()["samples"]`` (about 1,000 items scored, 50 reported).
    A NaN result of a healthy run is still re-measured (test_an_alarm_on_an_eval_result_brings_a_wider_...)."""
    ev = AdaptiveEvaluator.from_config(load_config(overrides=["trigger.freq_steps=10", "policy.budget.enabled=false"]),
                                       total_steps=60, clock=lambda: 0.0)
    seen = []
    ev.add_listener(seen.append)
    for g in range(60):
        ev.observe({"train/loss": math.nan if g >= 15 else 1.0}, g)
        ev.evaluate(lambda req: {"acc": [math.nan if req.step >= 15 else 1.0 for _ in req.indices(200)]}, 0, g, g)
    ev.close()
    assert ("eval/acc", "nonfinite") in {(e["stream"], e["detector"]) for e in seen if e["kind"] == "alarm"}
    steps = [r.step for r in ev.history]
    assert steps[:2] == [9, 15] and 16 not in steps and steps[2] > 20  # (the alarm at 15 was the loss's)
    assert [r.items for r in ev.history][1] == 200 and ev.summary()["samples"] == sum(r.items for r in ev.history)
    assert all(r.items > 0 for r in ev.history)


def test_a_deferral_in_the_decisions_text_names_the_evaluation_it_holds_back():
    """Found by a new-user probe: a budget deferral of an evaluation a policy brought (a relaxed interval, a peak
    re-measure) read "deferred: budget:deferred (was None)" in TensorBoard: the trigger's reason, None."""
    from conftest import RecordingLogger

    logger, now = RecordingLogger(), [0.0]
    ev = AdaptiveEvaluator.from_config(load_config("aggressive", ["trigger.freq_steps=5",
                                                                  "policy.budget.max_eval_fraction=0.05"]),
                                       clock=lambda: now[0], logger=logger)
    rng = np.random.default_rng(0)
    for g in range(60):
        now[0] += 1.0

        def fn(req, g=g):
            now[0] += 0.01 * len(req.indices(500))  # an item takes 0.01 s
            return {"acc": (rng.random(len(req.indices(500))) < 0.5 + 0.005 * g).astype(float).tolist()}

        ev.evaluate(fn, 0, g, g)
    deferred = [t for _, tag, t in logger.texts if tag == "decisions" and t.startswith("deferred:")]
    assert deferred[0] == "deferred: budget:deferred (was peak:confirm)"  # (its re-measure, a step later)
    assert not any("(was None)" in t for t in deferred)


def test_a_stream_given_its_own_detectors_still_alarms_on_nan(tmp_path):
    """The README's first preset gives train/reward its own list (a CUSUM): that list replaced the default one and
    its nonfinite detector with it, so a NaN reward went by without an alarm (found by a new-user probe).  A
    nonfinite detector now comes first in every list that lacks one; an empty list still watches nothing."""
    mine = tmp_path / "mine.yaml"
    mine.write_text("trigger:\n  freq_steps: 1000\nstreams:\n  watch:\n    train/reward:\n"
                    "    - {type: cusum, arl0: 2000}\n    quiet: []\n  eval:\n  - {type: cusum}\n")
    ev = AdaptiveEvaluator.from_config(load_config(str(mine)))
    seen = []
    ev.add_listener(seen.append)
    for g in range(50):
        nan = float("nan") if g == 40 else None
        ev.observe({"train/reward": nan or 0.5 + 0.01 * (g % 3), "quiet": nan or 1.0}, g)
        ev.evaluate(lambda: {"acc": nan or 0.5}, 0, g, g)
    alarms = [(e["step"], e["stream"], e["detector"]) for e in seen if e["kind"] == "alarm"]
    assert (40, "train/reward", "nonfinite") in alarms and not any(s == "quiet" for _, s, _ in alarms)
    assert [r.reason for r in ev.history if r.step == 40] == ["alarm:train/reward:nonfinite"]
    assert [type(d).__name__ for d in ev._detectors["train/reward"]] == ["NonFinite", "CUSUM"]
    assert (40, "eval/acc", "nonfinite") in alarms  # (streams.eval given as a CUSUM alone, too)
    # A state saved before (that stream's list without nonfinite) resumes: its CUSUM as saved, nonfinite new
    sd = ev.state_dict()
    sd["detectors"]["train/reward"] = sd["detectors"]["train/reward"][1:]
    again = AdaptiveEvaluator.from_config(load_config(str(mine)))
    again.load_state_dict(sd)
    assert again._detectors["train/reward"][1].state_dict() == ev._detectors["train/reward"][1].state_dict()


def test_budget_defers_non_urgent_evaluations_with_a_reason():
    cfg = load_config(overrides=["trigger.freq_steps=2", "policy.budget.max_eval_fraction=0.05",
                                 "policy.interval.enabled=false", "policy.peak.enabled=false"])
    run = Run(cfg, lambda g: 0.5, {"r": noisy(lambda g: 0.5, 0.05, 9)}, eval_seconds_per_item=0.2)
    deferred = []
    run.ev.add_listener(lambda e: e["kind"] == "deferred" and deferred.append(e))
    run.run(0, 400)
    assert deferred and deferred[0]["reason"] == "budget:deferred"
    assert run.ev.summary()["eval_seconds"] / run.clock.t <= 0.06


@pytest.mark.parametrize("bad", ["high", None, [1.0, 2.0], b"1"])
def test_observe_non_numeric_is_a_type_error_naming_the_key(bad):
    ev = AdaptiveEvaluator.from_config()
    with pytest.raises(TypeError, match="train/reward"):
        ev.observe({"train/reward": bad}, 0)


@pytest.mark.parametrize("name", ["", 3, None])
def test_a_metric_name_that_is_not_a_non_empty_string_is_a_type_error(name, tmp_path):
    """'' was watched as a stream, and record_to then failed to write every row that held it (the other
    metrics of those steps lost from the trace, 40 rows in a user's run)."""
    ev = AdaptiveEvaluator.from_config()
    ev.record_to(tmp_path / "t.csv")
    ev.observe({"train/loss": 1.0}, 0)
    with pytest.raises(TypeError, match="metric names must be non-empty strings"):
        ev.observe({name: 2.0}, 1)


def test_observe_accepts_numpy_and_one_element_tensors():
    import torch

    ev = AdaptiveEvaluator.from_config()
    ev.observe({"a": np.float32(1.5), "b": torch.tensor(2.0), "c": 3, "d": np.array([4.0])}, 0)
    # a loss still in the graph: no torch warning about requires_grad (found by a new-user probe)
    import warnings

    loss = torch.tensor(2.0, requires_grad=True) * 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ev.observe({"b": loss}, 1)


def test_global_step_backwards_is_a_value_error():
    ev = AdaptiveEvaluator.from_config()
    ev.observe({"a": 1.0}, 10)
    ev.observe({"a": 1.0}, 10)  # repeating a step is fine
    with pytest.raises(ValueError, match="backwards"):
        ev.observe({"a": 1.0}, 9)


def test_evaluate_called_every_k_steps_says_once_that_the_trigger_counts_calls(caplog):
    """A new user called evaluate() every 100 steps at freq_steps 100 and got no evaluation in 2,000 steps,
    without a word: the step trigger counts calls, as AReaL's does.  It says so, once; a run that calls it at every
    step, and replay (which notes a trace's stride itself), hear nothing."""
    from adaptive_eval.replay import replay
    from adaptive_eval.trace import Trace, TraceRecord

    def run(every):
        ev = AdaptiveEvaluator.from_config(load_config("areal", ["trigger.freq_steps=100"]))
        caplog.clear()
        due = [g for g in range(0, 2000, every) if ev.evaluate(lambda: {"acc": 0.5}, 0, g, g) is not None]
        return due, [r.getMessage() for r in caplog.records if "steps skipped" in r.getMessage()]

    due, said = run(10)
    assert due == [990, 1990] and len(said) == 1  # the 100th call, not the 100th step
    assert said[0].startswith("evaluate() was called at global_step 10 after 0 (9 steps skipped): "
                              "trigger.freq_steps (100) counts evaluate() calls, as AReaL's Evaluator does, so with "
                              "a call every 10 steps an evaluation is due every 1000 steps; call evaluate() at every "
                              "training step")
    due, said = run(1)
    assert due[:2] == [99, 199] and said == []
    caplog.clear()
    strided = Trace([TraceRecord(s, {"train/reward": 0.5, "eval/accuracy": 0.5}) for s in range(0, 500, 10)])
    replay(strided, load_config("areal", ["trigger.freq_steps=5"]))
    assert not [r for r in caplog.records if "steps skipped" in r.getMessage()]


def test_a_bare_number_from_evaluate_fn_is_said_once_whatever_the_tracked_metric():
    """0.7, np.float64(0.7) or torch.tensor(0.7) gave a result with no metric (kept as raw), tracked by nothing,
    with no word (found by a new-user probe)."""
    import warnings

    for overrides in ([], ["evaluation.metric=accuracy"]):
        ev = AdaptiveEvaluator.from_config(load_config("default", ["trigger.freq_steps=2", *overrides]),
                                           total_steps=10)
        with pytest.warns(RuntimeWarning, match=r"evaluate_fn returned a bare float \(0\.7\), kept as raw with no "
                                                r"metric.*return a mapping, \{'accuracy': per_item_values\}") as got:
            for g in range(6):
                ev.evaluate(lambda: np.float64(0.7), 0, g, g)
        assert len([w for w in got if "bare" in str(w.message)]) == 1
    ev = AdaptiveEvaluator.from_config(load_config("default", ["trigger.freq_steps=2"]), total_steps=10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a mapping: nothing said
        for g in range(6):
            ev.evaluate(lambda: {"accuracy": [1.0, 0.0, 1.0]}, 0, g, g)
    # None (a missing `return` in a request-taking evaluate_fn) passed as an evaluation of its whole sample with
    # nothing said (a new user's TRL run); {} too
    for returned in (None, {}):
        ev = AdaptiveEvaluator.from_config(load_config("default", ["trigger.freq_steps=2"]), total_steps=10)
        with pytest.warns(RuntimeWarning, match=r"evaluate_fn returned no metric \(None or an empty mapping\).*"
                                                r"a missing `return`\?") as got:
            for g in range(6):
                ev.evaluate(lambda request, r=returned: r, 0, g, g)
        assert len([w for w in got if "no metric" in str(w.message)]) == 1
    # AReaL's evaluate_fn() takes no request, logs its own results and returns None, by design: not this
    ev = AdaptiveEvaluator.from_config(load_config("default", ["trigger.freq_steps=2"]), total_steps=10)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        for g in range(6):
            ev.evaluate(lambda: None, 0, g, g)
    assert not [w for w in got if "returned no metric" in str(w.message)]


def test_evaluate_fn_returning_a_wrong_shape_is_a_failed_evaluation_naming_the_metric(caplog):
    """A value that cannot be summarized raised whatever on_error said, before the evaluation was booked: it
    stayed due, so an adapter that caught the TypeError had evaluate_fn called at every later step (17 calls
    in 20 steps), with eval_errors 0.  It is now a failed evaluation, handled by on_error like an exception."""
    ev = AdaptiveEvaluator.from_config(load_config(overrides=["trigger.freq_steps=1", "evaluation.on_error=raise"]))
    with pytest.raises(TypeError, match=r"^metric 'accuracy': expected per-item values \(1-D\) or items x samples "
                                        r"\(2-D\), got shape \(3, 3, 3\)$"):  # the README's Bad input row
        ev.evaluate(lambda: {"accuracy": np.zeros((3, 3, 3))}, 0, 0, 0)  # 2-D is items x samples
    good = AdaptiveEvaluator.from_config(load_config("areal", ["trigger.freq_steps=4"]), total_steps=20)
    due = [g for g in range(20) if good.evaluate(lambda: {"accuracy": 1.0}, 0, g, g) is not None]
    ev = AdaptiveEvaluator.from_config(load_config("areal", ["trigger.freq_steps=4"]), total_steps=20)
    calls = []

    def bad():
        calls.append(1)
        return {"accuracy": None}

    with caplog.at_level("ERROR"):
        assert all(ev.evaluate(bad, 0, g, g) is None for g in range(20))
    assert len(calls) == len(due) == 5 and ev.summary()["eval_errors"] == 5
    assert "metric 'accuracy'" in caplog.text and "counts as failed" in caplog.text


def test_failing_evaluate_fn_does_not_stop_training():
    ev = AdaptiveEvaluator.from_config(load_config("areal", ["trigger.freq_steps=2"]))

    def boom(request):
        raise RuntimeError("grader crashed")

    for g in range(10):
        assert ev.evaluate(boom, 0, g, g) is None
    assert ev.summary()["eval_errors"] == 5


def test_the_last_step_is_evaluated_even_over_budget(clock):
    ev = AdaptiveEvaluator.from_config(load_config(), total_steps=15, clock=clock)

    def costly(request):
        clock.advance(5.0)
        return {"acc": [1.0, 0.0] * 16}

    for g in range(15):
        clock.advance(1.0)
        ev.evaluate(costly, 0, g, g)
    assert ev.history[-1].step == 14 and ev.history[-1].reason == "trigger:final"


def test_failing_evaluations_do_not_relax_the_schedule(clock):
    ev = AdaptiveEvaluator.from_config(load_config(overrides=["trigger.freq_steps=10"]), clock=clock)

    def boom():
        raise RuntimeError("grader down")

    for g in range(40):
        clock.advance(10.0)
        ev.evaluate(boom, 0, g, g)
    assert ev.interval == 10 and ev.summary()["eval_errors"] == 4


def test_an_alarm_on_an_eval_result_brings_a_wider_evaluation_forward(clock):
    cfg = load_config(overrides=["policy.budget.enabled=false", "trigger.freq_steps=10"])
    ev = AdaptiveEvaluator.from_config(cfg, clock=clock)
    for g in range(30):
        clock.advance(10.0)
        value = float("nan") if g == 9 else 0.5
        ev.evaluate(lambda req: {"acc": [value] * len(req.indices(500))}, 0, g, g)
    steps = [(r.step, r.sample_size, r.reason) for r in ev.history]
    after = [s for s in steps if s[0] > 9]
    assert after[0][0] == 10 and after[0][2] == "alarm:eval/acc:nonfinite" and after[0][1] > steps[0][1]


def test_after_train_evaluates_the_last_weights_of_a_run_stopped_early_once():
    """trigger:final fired only at total_steps - 1: a run stopped early (EarlyStopping) never evaluated its
    last weights."""
    streams = {"train/loss": noisy(lambda g: 1.0, 0.1, 3)}
    run = Run(load_config("default"), lambda g: 0.6, streams, total_steps=200).run(0, 120)
    last = run.ev.history[-1].step
    assert last < 119
    r = run.ev.after_train(run.evaluate_fn, 119)
    assert r is not None and (r.step, r.reason) == (119, "trigger:final") and r.sample_size >= 48
    assert run.ev.after_train(run.evaluate_fn, 119) is None  # once: that step has its evaluation
    assert r.epoch is None  # (no steps_per_epoch: none known) ...
    by_epoch = Run(load_config("default"), lambda g: 0.6, streams, total_steps=200, steps_per_epoch=50).run(0, 120)
    assert by_epoch.ev.after_train(by_epoch.evaluate_fn, 119).epoch == 2  # ... else from it, or as given
    given = Run(load_config("default"), lambda g: 0.6, streams, total_steps=200).run(0, 120)
    assert given.ev.after_train(given.evaluate_fn, 119, epoch=7).epoch == 7
    with pytest.raises(ValueError, match="epoch"):
        given.ev.after_train(given.evaluate_fn, 119, epoch=1.5)
    # before_train's too (a review): the epoch of the step about to be trained
    first = Run(load_config("default", ["trigger.eval_before_train=true"]), lambda g: 0.6, streams, total_steps=200,
                steps_per_epoch=50)
    assert first.ev.before_train(first.evaluate_fn, 0).epoch == 0
    # A run that reached its last step evaluated it in evaluate(); eval_at_end false: nothing.
    done = Run(load_config("default"), lambda g: 0.6, streams, total_steps=50).run(0, 50)
    assert done.ev.history[-1].reason == "trigger:final" and done.ev.after_train(done.evaluate_fn, 49) is None
    off = Run(load_config("default", ["trigger.eval_at_end=false"]), lambda g: 0.6, streams, total_steps=200).run(0, 120)
    assert off.ev.after_train(off.evaluate_fn, 119) is None
    with pytest.raises(ValueError, match="below the last step evaluate"):
        Run(load_config("default"), lambda g: 0.6, streams, total_steps=200).run(0, 120).ev.after_train(
            lambda r: {}, 100)


def test_close_says_the_last_weights_of_a_loop_stopped_early_were_not_evaluated_unless_after_train_ran(caplog):
    """A probe: a loop of one's own that stopped early (a break at step 119 of 200) and closed lost the final
    evaluation without a word (the framework adapters call after_train themselves)."""
    streams = {"train/loss": noisy(lambda g: 1.0, 0.1, 3)}
    for call in (False, True):
        run = Run(load_config("default"), lambda g: 0.6, streams, total_steps=200).run(0, 120)
        caplog.clear()
        with caplog.at_level("WARNING", logger="adaptive_eval"):
            if call:
                run.ev.after_train(run.evaluate_fn, 119)
            run.ev.close()
        said = [r.getMessage() for r in caplog.records if "were not evaluated" in r.getMessage()]
        assert said == ([] if call else [
            "closed at step 119, before the run's last step (199, total_steps 200): the last weights trained were not "
            "evaluated (trigger:final); evaluator.after_train(evaluate_fn, 119) before close() evaluates the last "
            "weights"])
    # (nor after after_train at a step past the last call, as a loop counting steps done gives it; a review)
    run = Run(load_config("default"), lambda g: 0.6, streams, total_steps=200).run(0, 120)
    caplog.clear()
    with caplog.at_level("WARNING", logger="adaptive_eval"):
        assert run.ev.after_train(run.evaluate_fn, 120).step == 120
        run.ev.close()
    assert not [r for r in caplog.records if "were not evaluated" in r.getMessage()]
    # (nor after an after_train that raised, under on_error: raise: that is the call the advice names; a probe)
    run = Run(load_config("default", ["evaluation.on_error=raise"]), lambda g: 0.6, streams, total_steps=200)
    run.run(0, 120)
    caplog.clear()
    with caplog.at_level("WARNING", logger="adaptive_eval"):
        with pytest.raises(RuntimeError, match="grader down"):
            run.ev.after_train(lambda request: (_ for _ in ()).throw(RuntimeError("grader down")), 119)
        run.ev.close()
    assert not [r for r in caplog.records if "were not evaluated" in r.getMessage()]
    # (nor on the way out of an exception: a crash leaving a `with` block; advice there is noise; a review)
    run = Run(load_config("default"), lambda g: 0.6, streams, total_steps=200)
    caplog.clear()
    with caplog.at_level("WARNING", logger="adaptive_eval"), pytest.raises(RuntimeError, match="crash"):
        with run.ev:
            run.run(0, 120)
            raise RuntimeError("crash")
    assert not [r for r in caplog.records if "were not evaluated" in r.getMessage()]
    # (a run that reached its last step, or with trigger.eval_at_end false, has nothing to say)
    for cfg, stop in ((load_config("default"), 50), (load_config("default", ["trigger.eval_at_end=false"]), 30)):
        run = Run(cfg, lambda g: 0.6, streams, total_steps=50).run(0, stop)
        caplog.clear()
        with caplog.at_level("WARNING", logger="adaptive_eval"):
            run.ev.close()
        assert not [r for r in caplog.records if "were not evaluated" in r.getMessage()]


def test_a_loop_counting_past_total_steps_is_told_once_and_after_train_evaluates_its_last_weights(caplog):
    """A loop counting from 1 (or running longer than it said) had its final evaluation at total_steps - 1, the
    weights before its last step, without a word (a new user's probe); after_train at its last step did nothing."""
    ev = AdaptiveEvaluator.from_config(load_config(), total_steps=100, clock=FakeClock())
    fn = lambda: {"acc": [1.0, 0.0]}  # noqa: E731
    with caplog.at_level("WARNING", logger="adaptive_eval"):
        for s in range(1, 103):
            ev.observe({"train/loss": 1.0}, s)
            ev.evaluate(fn, 0, s, s)
    said = [r.getMessage() for r in caplog.records if "past total_steps" in r.getMessage()]
    assert said == ["evaluate() at step 100, past total_steps - 1 = 99 (steps count from 0: total_steps=100 is steps "
                    "0-99): the final evaluation (trigger:final) was due at step 99, not at the last step of this run."
                    "  For a loop counting from 1, pass total_steps=101; for one that ends elsewhere, call "
                    "after_train(evaluate_fn, last_step) (said once)"]
    assert ev.history[-1].step == 99
    r = ev.after_train(fn, 102)
    assert r is not None and (r.step, r.reason) == (102, "trigger:final")
    assert ev.after_train(fn, 102) is None
    # A loop that ended at total_steps - 1 and calls after_train(total_steps): the same weights, not again (review)
    done = AdaptiveEvaluator.from_config(load_config(), total_steps=100, clock=FakeClock())
    for s in range(100):
        done.observe({"train/loss": 1.0}, s)
        done.evaluate(fn, 0, s, s)
    assert done.history[-1].step == 99 and done.after_train(fn, 100) is None


def _untracked_warnings(record) -> list[str]:
    return [str(w.message) for w in record if "is not among an evaluation's metrics" in str(w.message)]


def test_an_evaluation_metric_absent_from_the_results_is_warned_once_naming_it_and_the_returned_keys():
    """Found in review: a typo in evaluation.metric left the policies tracking nothing, without a word."""
    import warnings

    def run(metric, steps=12):
        ev = AdaptiveEvaluator.from_config(load_config("areal", [f"evaluation.metric={metric}",  # (a fixed schedule)
                                                                 "trigger.freq_steps=3"]), clock=FakeClock())
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            for g in range(steps):
                ev.evaluate(lambda: {"acc": [1.0, 0.0, 1.0], "eval_loss": 0.3}, 0, g, g)
        return ev, record

    ev, record = run("acc_")
    assert len(ev.history) == 4
    assert _untracked_warnings(record) == [
        "evaluation.metric 'acc_' is not among an evaluation's metrics (returned: 'acc', 'eval_loss'); did you mean "
        "'acc'?: the policies that track it (interval, sample size, peak) learn nothing from an evaluation without it "
        "(said once)"]
    assert all(w.category is RuntimeWarning and w.filename == __file__ for w in record)  # the caller's line
    ev, record = run("acc")
    assert len(ev.history) == 4 and _untracked_warnings(record) == []


def test_the_absent_metric_warning_never_raises_into_the_training_step(caplog):
    """Under -W error (warnings turned into exceptions) it is logged instead: the evaluation still counts."""
    import warnings

    ev = AdaptiveEvaluator.from_config(load_config(overrides=["evaluation.metric=accuracy", "trigger.freq_steps=1"]),
                                       clock=FakeClock())
    with warnings.catch_warnings(), caplog.at_level("WARNING", logger="adaptive_eval"):
        warnings.simplefilter("error")
        results = [ev.evaluate(lambda: {"acc": [1.0, 0.0]}, 0, g, g) for g in range(3)]
    assert all(r is not None for r in results)
    assert caplog.text.count("evaluation.metric 'accuracy' is not among an evaluation's metrics") == 1


def test_the_absent_metric_warning_waits_for_an_evaluation_that_covers_the_metrics_suite():
    """aime runs at every 2nd evaluation: its metrics are absent from the others by design, not a mistake."""
    import warnings

    def run(metric, aggregate=()):
        cfg = load_config("areal", [f"evaluation.metric={metric}", "trigger.freq_steps=2",
                                    "evaluation.suites.math.size=20", "evaluation.suites.aime.size=10",
                                    "evaluation.suites.aime.every=2", *aggregate])
        ev = AdaptiveEvaluator.from_config(cfg, clock=FakeClock())

        def evaluate_fn(req):
            return {f"{name}/acc": [float(i % 2) for i in s.indices] for name, s in req.suites.items()}

        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            for g in range(12):
                ev.evaluate(evaluate_fn, 0, g, g)
        return ev, _untracked_warnings(record)

    ev, said = run("aime/acc")
    assert len(ev.history) == 6 and sum("aime/acc" not in r.metrics for r in ev.history) == 3 and said == []
    ev, said = run("all/acc", ["evaluation.suite_aggregate=all"])
    assert sum("all/acc" not in r.metrics for r in ev.history) == 3 and said == []
    ev, said = run("aime/accuracy")  # the suite is right, the metric is not: said once, naming what came back
    assert len(said) == 1 and "'aime/accuracy'" in said[0] and "'aime/acc'" in said[0] and "'math/acc'" in said[0]


def test_the_absent_metric_warning_comes_when_a_due_suites_results_did_not_come_back():
    """An evaluate_fn that forgot the tracked suite (or returned None) passed unsaid: a suite none of whose
    metrics came back was taken for one not due."""
    import warnings

    def said(evaluate_fn):
        cfg = load_config("areal", ["evaluation.metric=math/acc", "trigger.freq_steps=1",
                                    "evaluation.suites.math.size=20", "evaluation.suites.aime.size=10"])
        ev = AdaptiveEvaluator.from_config(cfg, clock=FakeClock())
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            for g in range(3):
                ev.evaluate(evaluate_fn, 0, g, g)
        return _untracked_warnings(record)

    forgot = said(lambda req: {"aime/acc": [1.0] * len(req.suites["aime"].indices)})
    assert len(forgot) == 1 and "'math/acc'" in forgot[0] and "(returned: 'aime/acc')" in forgot[0]
    assert len(said(lambda req: None)) == 1
    assert said(lambda req: {f"{n}/acc": [1.0] * len(s.indices) for n, s in req.suites.items()}) == []


def test_the_absent_metric_warning_also_comes_from_an_asynchronous_evaluation():
    import warnings

    cfg = load_config(overrides=["evaluation.metric=accuracy", "trigger.freq_steps=2", "evaluation.asynchronous=true",
                                 "evaluation.async_integrate_after_steps=1"])
    ev = AdaptiveEvaluator.from_config(cfg, clock=FakeClock())
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for g in range(8):
            ev.evaluate(lambda: {"acc": [1.0, 0.0]}, 0, g, g)
        ev.close()
    assert len(ev.history) >= 3 and len(_untracked_warnings(record)) == 1


def test_a_pass_at_k_above_samples_per_item_that_later_plans_reach_is_said_once(caplog):
    """Found in review: pass_at_k [1, 32] with samples_per_item 4 (max_samples_per_item null: 32) was missing
    from the first evaluations without the "not reported" warning, which needed k <= samples_per_item.  A
    suite whose plans can never reach k (another suite's k) is not warned about."""
    cfg = load_config(overrides=["evaluation.pass_at_k=[1,32]", "trigger.freq_steps=5", "evaluation.suites.math.size=4",
                                 "evaluation.suites.math.samples_per_item=4", "evaluation.suites.fixed.size=4",
                                 "evaluation.suites.fixed.sample_size=4", "evaluation.suites.fixed.samples_per_item=2",
                                 "policy.budget.max_eval_fraction=1.0"])
    ev = AdaptiveEvaluator.from_config(cfg, total_steps=30, clock=FakeClock())
    rng = np.random.default_rng(0)

    def evaluate_fn(req):
        return {f"{name}/acc": (rng.random((len(s.indices), s.samples_per_item)) < 0.6).astype(float)
                for name, s in req.suites.items()}

    with caplog.at_level("WARNING", logger="adaptive_eval"):
        results = [r for g in range(30) if (r := ev.evaluate(evaluate_fn, 0, g, g)) is not None]
    assert "math/acc/pass@32" not in results[0].metrics
    assert caplog.text.count("pass@32 is not reported") == 1
    assert ("suite 'math': pass@32 is not reported by an evaluation with fewer than 32 answers per item (this one's "
            "plan: 4; samples_per_item: 4 is the first evaluation's count, not a cap: the sample-size policy chooses "
            "later ones, up to max_samples_per_item: null, so 32); set evaluation.suites.math.min_samples_per_item: 32 "
            "to keep it (said once)") in caplog.text
    assert "suite 'fixed'" not in caplog.text  # 2 answers per item, always: pass@32 is math's


def test_a_complex_metric_is_refused_as_a_detector_refuses_it_and_a_signalling_nan_is_a_nan():
    # float() of a numpy complex dropped the imaginary part with only a ComplexWarning (a Python complex and every
    # detector's update refused it); Decimal('sNaN') read "expected one number" where Decimal('NaN') is a NaN
    import decimal

    import numpy as np

    from adaptive_eval.stats import as_float

    for value in (np.complex128(1 + 5j), np.complex64(1), 1 + 0j, np.array([1 + 5j])):
        with pytest.raises(TypeError, match="metric 'm': expected a real number, got a complex"):
            as_float("m", value)
    assert math.isnan(as_float("m", decimal.Decimal("sNaN"))) and math.isnan(as_float("m", decimal.Decimal("NaN")))


def test_a_scheduled_evaluation_just_before_the_final_one_is_left_to_it():
    """A relaxed interval put a scheduled evaluation at step 191 and the final one at 199 (and a new user saw
    98 then 99, 117 then 119): the same weights measured twice.  With the adaptive interval, one due within
    min_factor x freq_steps steps (12 here) of the final one is left to it; a plain schedule keeps AReaL's."""
    def run(overrides, total=200):
        ev = AdaptiveEvaluator.from_config(load_config(overrides=overrides), clock=FakeClock(), total_steps=total)
        steps = []
        for g in range(total):
            ev.observe({"loss": 1.0 + 0.01 * (g % 5)}, g)
            if ev.evaluate(lambda: {"acc": [1.0, 0.0] * 40}, 0, g, g) is not None:
                steps.append(g)
        reasons.append(ev.history[-1].reason)
        return steps

    reasons = []
    assert run([]) == [24, 80, 199]  # (the relaxed one due at 191 is within 12 of 199)
    # the one left to the final step is the final evaluation (every eval suite runs at trigger:final); it
    # read interval:relaxed, as did any scheduled one due exactly at the last step
    assert reasons == ["trigger:final"]
    assert run(["policy.interval.min_factor=0.2"]) == [24, 80, 191, 199]  # a window of 5 steps
    plain = ["policy.interval.enabled=false", "policy.peak.enabled=false", "policy.sample_size.enabled=false"]
    assert run(plain, total=100) == [24, 49, 74, 99] and run(plain, total=105) == [24, 49, 74, 99, 104]
    assert run(["trigger.eval_at_end=false"]) == [24, 80, 191]  # no final evaluation: nothing is left to it


def test_the_first_evaluation_is_not_timed_with_a_one_off_import(tmp_path):
    """The budget learns what an evaluation costs from measured seconds.  The first evaluation imported
    scipy.stats for its interval (about 1 s), so in examples/hf_trainer.py (10 ms steps) it looked 10x its cost and
    the budget held an alarm's evaluation from step 63 to the run's end.  Here, in a fresh interpreter, the clock
    counts imported modules: what the first evaluation imports is what the budget bills it for."""
    import subprocess
    import sys

    code = """
import sys
from adaptive_eval import AdaptiveEvaluator, load_config
clock = lambda: float(len(sys.modules))
ev = AdaptiveEvaluator.from_config(load_config(overrides=["trigger.freq_steps=1"]), clock=clock)
ev.evaluate(lambda: {"acc": [1.0, 0.0, 1.0, 1.0]}, 0, 0, 0)
print(ev.summary()["eval_seconds"])  # (the eval time the budget's share counts)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout.split()[-1]) < 20  # modules imported during it (scipy.stats alone brings hundreds)


def test_max_run_fraction_keeps_the_relaxed_interval_within_a_share_of_a_run_of_known_length():
    """On runs of 300 steps the relaxed interval (up to 4.4 x 25 = 110 steps, tuned on runs of 1000) left 3 or 4
    evaluations, and a collapse two thirds of the way in was preceded by a measurement from 100 steps before it
    (benchmarks/policies.py --steps 300).  ``policy.interval.max_run_fraction`` caps the interval at that share
    of ``total_steps`` (in steps, also when records come every k steps), never below the base interval, and does
    nothing when the total is not known."""
    def run(overrides, total=300, every=1, known=True):
        ev = AdaptiveEvaluator.from_config(load_config(overrides=overrides), clock=FakeClock(),
                                           total_steps=total if known else None)
        steps = []
        for g in range(every - 1, total, every):
            ev.observe({"loss": 1.0 + 0.01 * (g % 5)}, g)
            if ev.evaluate(lambda: {"acc": [1.0, 0.0] * 40}, 0, g, g) is not None:
                steps.append(g)
        return steps

    gaps = lambda steps: [b - a for a, b in zip(steps, steps[1:])]  # noqa: E731
    free, capped = run([]), run(["policy.interval.max_run_fraction=0.1"])
    assert max(gaps(free)) > 100 and len(free) == 4
    # (the last gap may be up to 12 steps longer: one due that close to the final evaluation is left to it)
    assert max(gaps(capped[:-1])) <= 30 and len(capped) >= 10 and capped[0] == free[0] == 24
    assert run(["policy.interval.max_run_fraction=0.01"]) == list(range(24, 300, 25))  # never below 25 (299 last)
    assert run(["policy.interval.max_run_fraction=0.1"], known=False) == run([], known=False)
    # Records every 5 steps: the base interval is 25 calls, 125 steps; a tenth of 3000 steps is 60 calls
    strided = run(["policy.interval.max_run_fraction=0.1"], total=3000, every=5)
    assert max(gaps(strided[:-1])) <= 300 and max(gaps(run([], total=3000, every=5))) > 500
    with pytest.raises(ConfigError, match="policy.interval.max_run_fraction: must be positive"):
        load_config(overrides=["policy.interval.max_run_fraction=-0.1"])


def test_under_max_run_fraction_an_alarm_tightens_and_a_resumed_run_decides_the_same():
    """Found in review: the cap held the interval but not the interval policy's own factor, so after a quiet
    stretch one alarm halved 4.4 to 2.2, still above a cap of 1.2, and changed nothing; and a resumed run
    recomputed the cap before its stride was restored (records every 5 steps: it relaxed to 4.4 where the run
    had 2.4)."""
    import json

    def run(total, every, nan_at=None, stop_at=None, state=None):
        ev = AdaptiveEvaluator.from_config(load_config(overrides=["policy.interval.max_run_fraction=0.1"]),
                                           clock=FakeClock(), total_steps=total)
        if state is not None:
            ev.load_state_dict(json.loads(state))
        steps = []
        for g in range(every - 1, total, every):
            if state is not None and g <= json.loads(state)["last_step"]:
                continue
            ev.observe({"loss": math.nan if g == nan_at else 1.0 + 0.01 * (g % 5)}, g)
            if ev.evaluate(lambda: {"acc": [1.0, 0.0] * 40}, 0, g, g) is not None:
                steps.append((g, ev.history[-1].reason))
            if g == stop_at:
                return steps, json.dumps(ev.state_dict())
        return steps, None

    steps, _ = run(300, 1, nan_at=150)
    after = [s for s, _ in steps if s > 150]
    assert (150, "alarm:loss:nonfinite") in steps and after[0] - 150 <= 15  # tightened from the cap: 0.6 x 25
    full, _ = run(3000, 5)
    head, state = run(3000, 5, stop_at=1004)
    tail, _ = run(3000, 5, state=state)
    assert head + tail == full and len(full) >= 10


def test_an_alarm_inside_the_cooldown_says_it_brought_no_evaluation():
    """Found by a new user: in the demo (seed 1) a KL alarm 25 steps after the reward's brought no evaluation
    (policy.alarm.cooldown_steps), and nothing said why: the alarms text now does."""
    from conftest import RecordingLogger

    logger = RecordingLogger()
    ev = AdaptiveEvaluator.from_config(load_config(overrides=["trigger.freq_steps=1000"]), total_steps=400,
                                       clock=FakeClock(), logger=logger)
    rng = np.random.default_rng(0)
    for g in range(300):
        ev.observe({"a": (0.0 if g < 150 else 5.0) + rng.normal(0, 0.1),
                    "b": (0.0 if g < 160 else 5.0) + rng.normal(0, 0.1)}, g)
        ev.evaluate(lambda request: {"accuracy": [1.0, 0.0]}, 0, g, g)
    texts = [(s, t) for s, tag, t in logger.texts if tag == "alarms"]
    evaluated = [r.step for r in ev.history if r.reason.startswith("alarm:")]
    first_a = next(s for s, t in texts if t.startswith("a "))
    first_b = next(s for s, t in texts if t.startswith("b "))
    assert evaluated[0] == first_a and first_b - first_a < ev.policies.by_name["alarm"].cooldown_steps
    cooldown = ev.policies.by_name["alarm"].cooldown_steps
    assert [t for s, t in texts if s == first_b][0].endswith(
        f"[no evaluation of its own: within policy.alarm.cooldown_steps={cooldown} of the last alarm's evaluation]")
    assert not [t for s, t in texts if s == first_a][0].endswith("evaluation]")


def test_an_alarm_held_for_corroboration_says_so():
    """Found by a new user in the demo (seed 1): a KL alarm alone, its change gradual, was held for another stream
    to agree (policy.alarm.corroborate), and the alarms text gave no reason why no evaluation followed."""
    from conftest import RecordingLogger

    logger = RecordingLogger()
    ev = AdaptiveEvaluator.from_config(load_config(overrides=["trigger.freq_steps=1000"]), total_steps=400,
                                       clock=FakeClock(), logger=logger)
    rng = np.random.default_rng(0)
    for g in range(300):  # a slow drift on one stream: no abrupt shift, and nothing else moves
        ev.observe({"a": max(0.0, (g - 150) * 0.02) + rng.normal(0, 0.1), "b": rng.normal(0, 0.1),
                    "c": rng.normal(0, 0.1)}, g)
        ev.evaluate(lambda request: {"accuracy": [1.0, 0.0]}, 0, g, g)
    alarm = ev.policies.by_name["alarm"]
    texts = [t for _, tag, t in logger.texts if tag == "alarms"]
    assert alarm.held >= 1 and not [r for r in ev.history if r.reason.startswith("alarm:")]
    held = [t for t in texts if t.endswith(f"[held when raised: no evaluation unless another stream agrees within "
                                           f"policy.alarm.corroborate_steps={alarm.corroborate_steps} "
                                           f"(policy.alarm.corroborate={alarm.corroborate}; the decisions say "
                                           f"whether one did)]")]
    assert len(held) == alarm.held


def test_a_habituated_streams_held_nan_alarm_says_why():
    """A NaN alarm held because an earlier one's evaluation showed no change (policy.alarm.habituate) read as any
    held alarm in TensorBoard's alarms text, without its reason."""
    from conftest import RecordingLogger

    logger = RecordingLogger()
    ev = AdaptiveEvaluator.from_config(load_config(overrides=["trigger.freq_steps=60"]), total_steps=400,
                                       clock=FakeClock(), logger=logger)
    rng = np.random.default_rng(0)
    for g in range(300):  # bursts of NaN in one stream, the accuracy steady
        nan = g in (100, 101, 200, 201)
        ev.observe({"grad_norm": math.nan if nan else 1.0 + rng.normal(0, 0.1), "b": rng.normal(0, 0.1),
                    "c": rng.normal(0, 0.1)}, g)
        ev.evaluate(lambda request: {"accuracy": [1.0, 0.0] * 50}, 0, g, g)
    texts = {s: t for s, tag, t in logger.texts if tag == "alarms"}
    assert [r.step for r in ev.history if r.reason.startswith("alarm:")] == [100]
    assert texts[200].endswith("; an earlier one's evaluation showed no change, policy.alarm.habituate]")
    assert "habituate" not in texts[100]


@pytest.mark.parametrize("asynchronous", [False, True])
@pytest.mark.parametrize("failures", [1, 2])
def test_an_alarm_whose_evaluation_fails_is_pending_again_once(asynchronous, failures):
    """A transient error in the evaluation an alarm brought threw the alarm away: the next evaluation was 56
    steps later, labelled relaxed (a new user's find).  It is tried once more at the next chance; a second failure
    drops it (a broken evaluate_fn does not evaluate at every step).  A run resumed between the failure and its
    retry decides as the uninterrupted one."""
    from adaptive_eval.asynchronous import InlineExecutor

    overrides = ["trigger.freq_steps=50", "policy.budget.enabled=false"] + (
        ["evaluation.asynchronous=true", "evaluation.async_integrate_after_steps=2"] if asynchronous else [])
    cfg = load_config(overrides=overrides)
    NAN_AT = 30

    def drive(ev, start, stop, failed):
        done = []
        for g in range(start, stop):
            ev.observe({"train/loss": math.nan if g == NAN_AT else 1.0 + 0.01 * (g % 3)}, g)

            def fn(request):
                if request.reason.startswith("alarm:") and len(failed) < failures:
                    failed.append(request.step)
                    raise ConnectionError("inference server restarting")
                return {"acc": [1.0, 0.0] * 8}

            r = ev.evaluate(fn, 0, g, g)
            if r is not None:
                done.append((r.step, r.reason))
        return done

    def make():
        return AdaptiveEvaluator.from_config(cfg, clock=FakeClock(), total_steps=80,
                                             **({"executor": InlineExecutor()} if asynchronous else {}))

    failed = []
    ev = make()
    whole = drive(ev, 0, 80, failed)
    alarm = "alarm:train/loss:nonfinite"
    retry_at = NAN_AT + (2 if asynchronous else 1)  # (asynchronous: when its failure is integrated, 2 steps on)
    assert failed == ([NAN_AT] if failures == 1 else [NAN_AT, retry_at])
    if failures == 1:
        assert (retry_at, alarm) in whole
    else:
        assert not [s for s, reason in whole if reason == alarm]
    assert ev.summary()["eval_errors"] == failures
    # resumed between the failure and its retry
    first, refailed = make(), []
    before = drive(first, 0, NAN_AT + (2 if asynchronous else 1), refailed)
    second = make()
    second.load_state_dict(json.loads(json.dumps(first.state_dict())))
    assert before + drive(second, NAN_AT + (2 if asynchronous else 1), 80, refailed) == whole


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_due_suite_with_no_result_back_is_said_and_a_none_metric_leaves_the_others(caplog, asynchronous):
    """An evaluate_fn that forgot a due suite passed unsaid (only the tracked metric's suite was said), and one
    that returned None for a suite's metric failed the whole evaluation, the other suite's results with it (a new
    user's finds)."""
    cfg = load_config(overrides=["trigger.freq_steps=5", "evaluation.metric=easy/acc",
                                 "evaluation.suites={easy: {size: 40}, hard: {size: 30}}",
                                 f"evaluation.asynchronous={str(asynchronous).lower()}"])

    def run(fn):
        from adaptive_eval.asynchronous import InlineExecutor

        ev = AdaptiveEvaluator.from_config(cfg, clock=FakeClock(), total_steps=20,
                                           **({"executor": InlineExecutor()} if asynchronous else {}))
        for g in range(20):
            ev.observe({"train/loss": 1.0}, g)
            ev.evaluate(fn, 0, g, g)
        ev.close()
        return ev

    def forgets(request):
        return {"easy/acc": [1.0, 0.0] * (len(request.suites["easy"].indices) // 2)
                + [1.0] * (len(request.suites["easy"].indices) % 2)}

    def none_for_hard(request):
        return {**forgets(request), f"hard/grader_down_acc{int(asynchronous)}": None}  # (said once a process)

    with caplog.at_level("WARNING", logger="adaptive_eval"):
        ev = run(forgets)
    said = [r.getMessage() for r in caplog.records if "no result for suite" in r.getMessage()]
    assert len(said) == 1 and "suite 'hard' at step 4, though due" in said[0]
    steps = [r.step for r in ev.history]
    assert steps[0] == 4 and steps[-1] == 19 and all("easy/acc" in r.metrics for r in ev.history)
    caplog.clear()
    with caplog.at_level("WARNING", logger="adaptive_eval"):
        ev = run(none_for_hard)
    assert ev.summary()["eval_errors"] == 0 and [r.step for r in ev.history] == steps
    assert all(list(r.metrics) == ["easy/acc"] for r in ev.history)
    said = [r.getMessage() for r in caplog.records if "returned None for" in r.getMessage()]
    assert len(said) == 1 and f"'hard/grader_down_acc{int(asynchronous)}' at step 4: left out" in said[0]


def test_calls_after_close_are_said_once(caplog, tmp_path):
    """observe() and evaluate() after close() went on deciding with nothing written, without a word (a new
    user's find)."""
    ev = AdaptiveEvaluator.from_config(load_config(overrides=[f"logging.tensorboard_dir={tmp_path}"]),
                                       total_steps=20)
    for g in range(5):
        ev.observe({"train/loss": 1.0}, g)
        ev.evaluate(lambda request: {"acc": [1.0, 0.0] * 8}, 0, g, g)
    with caplog.at_level("WARNING", logger="adaptive_eval"):
        ev.close()
        ev.close()
        # (the first close() says the run stopped before its last step, its last weights not evaluated; once)
        assert [r.getMessage()[:19] for r in caplog.records] == ["closed at step 4, b"]
        caplog.clear()
        for g in range(5, 8):
            ev.observe({"train/loss": 1.0}, g)
            ev.evaluate(lambda request: {"acc": [1.0, 0.0] * 8}, 0, g, g)
        ev.close()
        ev.observe({"train/loss": 1.0}, 8)
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and said[0].startswith("observe() after close(): the evaluator still decides")


def test_an_alarm_that_came_with_a_retry_gets_its_own_retry():
    """The retry's "once" covered every alarm pending at it: one raised after the failure, answered by the failed
    retry, was dropped without a retry of its own (found in review)."""
    ev = AdaptiveEvaluator.from_config(load_config(overrides=["trigger.freq_steps=50", "policy.budget.enabled=false"]),
                                       clock=FakeClock(), total_steps=80)
    calls = []

    def fn(request):
        calls.append((request.step, request.reason))
        if request.step in (30, 31):
            raise ConnectionError("inference server restarting")
        return {"acc": [1.0, 0.0] * 8}

    for g in range(80):
        ev.observe({"train/loss": math.nan if g == 30 else 1.0 + 0.01 * (g % 3),
                    "train/reward": math.nan if g == 31 else 0.5 + 0.01 * (g % 3)}, g)
        ev.evaluate(fn, 0, g, g)
    assert calls == [(30, "alarm:train/loss:nonfinite"), (31, "alarm:train/loss:nonfinite"),
                     (32, "alarm:train/reward:nonfinite"), (79, "trigger:final")]


def _in_thread(fn, *args):
    """Run ``fn(*args)`` in another thread and wait for it: what it returned, or the exception it raised."""
    import threading

    out = {}

    def run():
        try:
            out["value"] = fn(*args)
        except Exception as exc:  # noqa: BLE001 - handed back to the test
            out["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if "error" in out:
        raise out["error"]
    return out.get("value")


def test_observe_from_another_thread_is_applied_by_the_training_thread_at_its_next_call():
    """A monitor thread's observe() beside the training loop's raced with it (state_dict() raised "dictionary changed
    size", record_to() wrote steps out of order; a new user's probe): it is handed to the thread that calls
    evaluate(), applied at its next call, at the later of its step and the loop's."""
    ev = AdaptiveEvaluator.from_config(load_config(overrides=["trigger.freq_steps=1000"]), total_steps=1000)
    fn = lambda: {"acc": [1.0]}  # noqa: E731
    for s in range(40):
        ev.observe({"train/loss": 1.0 + 0.01 * (s % 3)}, s)
        ev.evaluate(fn, 0, s, s)
    _in_thread(ev.observe, {"gpu/memory": 0.5, "train/loss": float("nan")}, 12)  # (a step in the past)
    assert not ev.watches("gpu/memory") and ev.summary()["alarms"] == 0  # handed over, not applied there
    with pytest.raises(TypeError, match="gpu/memory"):  # a bad value raises in the caller's thread
        _in_thread(ev.observe, {"gpu/memory": "full"}, 40)
    ev.observe({"train/loss": 1.0}, 40)
    assert ev.watches("gpu/memory") and ev.summary()["alarms"] == 1
    r = ev.evaluate(fn, 0, 40, 40)
    assert r is not None and r.step == 40 and r.reason.startswith("alarm:train/loss:nonfinite")
    # state_dict() in the training thread holds what other threads observed; checkpoint_saved() is handed over too
    _in_thread(ev.observe, {"gpu/util": 0.9}, 41)
    _in_thread(ev.checkpoint_saved, 41, "ckpt-41")
    with pytest.raises(TypeError, match="checkpoint ref must be"):  # (its ref checked in the caller's thread)
        _in_thread(ev.checkpoint_saved, 41, object())
    state = ev.state_dict()  # (changes nothing: what waits is saved as it is, and applied at the next call)
    assert [m for m, _, _ in state["handed"]] == ["observe", "checkpoint_saved"]
    assert "gpu/util" not in state["detectors"]
    ev.observe({"train/loss": 1.0}, 41)
    assert ev.watches("gpu/util") and ev.policies.by_name["lookback"].kept[-1] == (41, "ckpt-41")
    # a step ahead of the loop's is applied at the loop's (its next observe() went "backwards": review)
    _in_thread(ev.observe, {"gpu/util": 0.8}, 45)
    ev.observe({"train/loss": 1.0}, 42)
    ev.observe({"train/loss": 1.0}, 43)


def test_an_asynchronous_evaluate_fn_that_observes_loses_no_evaluation():
    """observe() from the evaluation's own thread came between the job's listing and its future: the job read as
    lost by a resume ("async:lost ... when the state was saved"), 8 of 8 evaluations dropped (a new user's probe)."""
    import time

    got = {}
    for mode in ("false", "true"):
        ev = AdaptiveEvaluator.from_config(load_config(overrides=[f"evaluation.asynchronous={mode}",
                                                                  "trigger.freq_steps=5"]), total_steps=40,
                                           clock=FakeClock())  # (the budget on the wall clock: review)

        def fn(request):
            ev.observe({"eval/generated_tokens": 123.0}, request.step)  # eval-side figures as a stream
            return {"acc": [1.0, 0.0, 1.0]}

        for s in range(40):
            ev.observe({"train/loss": 1.0}, s)
            ev.evaluate(fn, 0, s, s)
            time.sleep(0.002)
        ev.close()
        got[mode] = ([r.step for r in ev.history], ev.summary()["eval_errors"])
        assert ev.watches("eval/generated_tokens")
    # (asynchronously, the later steps depend on when each result came back)
    assert got["false"] == ([4, 15, 39], 0) and got["true"][1] == 0 and got["true"][0][0] == 4 and \
        len(got["true"][0]) >= 3


def _decisions_tracking(metric, returned, extra=(), steps=300, resume_at=None):
    """A run of the default preset whose evaluate_fn returns ``returned(request)``; its evaluations' steps and
    reasons, and the evaluator (resumed from its state at ``resume_at`` when given)."""
    overrides = ["trigger.freq_steps=10", *extra, *([f"evaluation.metric={metric}"] if metric else [])]
    cfg = load_config("default", overrides)
    clock = FakeClock()
    ev = AdaptiveEvaluator.from_config(cfg, clock=clock, total_steps=steps)
    for g in range(steps):
        clock.advance(1.0)
        if g == resume_at:
            state = json.loads(json.dumps(ev.state_dict()))
            assert state.get("tracked") == (ev._tracked if metric is None else None)
            ev = AdaptiveEvaluator.from_config(load_config("default", overrides), clock=clock, total_steps=steps)
            ev.load_state_dict(state)
        ev.evaluate(returned, 0, g, g)
    return [(r.step, r.reason) for r in ev.history], ev


def test_a_null_metric_is_chosen_once_the_first_suite_before_others_and_not_a_loss(caplog):
    """evaluation.metric: null tracked each evaluation's own first metric: two suites returned in varying order
    (ood, every 2nd evaluation, first) made the policies compare ood's accuracy with id's, and a loss returned
    first was tracked as higher-is-better (new users' probes).  It is chosen once, from the first evaluation: the
    first suite's in evaluation.suites order, a name that does not read lower-is-better, one with per-item values;
    a resumed run tracks it too."""
    rng = np.random.default_rng(0)
    suites = ["evaluation.suites.id.size=60", "evaluation.suites.ood.size=60", "evaluation.suites.ood.every=2"]

    def both(req):
        out = {}
        if "ood" in req.suites:
            out["ood/acc"] = (rng.random(len(req.suites["ood"].indices)) < 0.3).astype(float)
        out["id/acc"] = (rng.random(len(req.suites["id"].indices)) < 0.8).astype(float)
        return out

    null, ev = _decisions_tracking(None, both, suites)
    rng = np.random.default_rng(0)
    named, _ = _decisions_tracking("id/acc", both, suites)
    assert null == named and ev.policies.by_name["interval"].metric == "id/acc"
    rng = np.random.default_rng(0)
    resumed, ev = _decisions_tracking(None, both, suites, resume_at=150)
    assert resumed == null and ev._tracked == "id/acc"

    def loss_first(req):
        n = req.sample_size or 100
        return {"loss": 2.0 + rng.random(n), "acc": (rng.random(n) < 0.6).astype(float)}

    rng = np.random.default_rng(1)
    with caplog.at_level("INFO", logger="adaptive_eval"):
        null, ev = _decisions_tracking(None, loss_first)
    rng = np.random.default_rng(1)
    named, _ = _decisions_tracking("acc", loss_first)
    assert null == named and ev.policies.by_name["peak"].metric == "acc"
    assert "evaluation.metric is null: the policies track 'acc' (higher-is-better)" in caplog.text

    caplog.clear()
    with caplog.at_level("WARNING", logger="adaptive_eval"):
        _decisions_tracking(None, lambda req: {"eval_loss": 2.0 + rng.random(req.sample_size or 100)}, steps=30)
    assert caplog.text.count("track 'eval_loss' as higher-is-better, yet it reads like a loss") == 1


def test_best_picks_the_tracked_metric_in_the_configured_direction_among_the_steps_given():
    """The live run had no pick (summary.json's best came from replay and the demo only), and pick_best's
    default direction took a tracked loss's highest value: evaluator.best() picks on the tracked metric (chosen
    once, for evaluation.metric: null) in evaluation.higher_is_better's direction, among the steps given."""
    rng = np.random.default_rng(0)

    def loss_of(g):
        return 0.3 + 0.5 * math.exp(-g / 40) if g < 150 else 9.0

    def fn(req):
        n = req.sample_size or 200
        return {"val/ppl": loss_of(req.step) + 0.2 * rng.standard_normal(n)}

    _, ev = _decisions_tracking(None, fn, ["evaluation.higher_is_better=false"], steps=200)
    pick = ev.best()
    assert pick.metric == "val/ppl" and not pick.higher_is_better and 100 <= pick.step < 150
    assert ev.best(by="mean").estimate == min(r.metrics["val/ppl"].mean for r in ev.history)
    early = [r.step for r in ev.history if r.step < 60]
    assert ev.best(steps=early).step in early[-2:] and ev.best(by="mean", steps=early[:2]).step == early[1]
    with pytest.warns(RuntimeWarning, match="none of the 1 steps given was evaluated"):
        assert ev.best(steps=[-1]) is None
    with pytest.warns(RuntimeWarning, match="no evaluation measured 'nope'"):
        assert ev.best("nope") is None


def test_each_evaluator_with_an_absent_metric_is_told_even_from_one_loop_line():
    """A new user's probe: two evaluators (two tasks) with the same mistake, evaluation.metric 'accuracy' where
    evaluate_fn returns 'acc', driven from one line of the loop: Python's registry for that line showed the text
    once, and the second evaluator, tracking nothing, said nothing.  Each says it once."""
    import warnings

    evs = [AdaptiveEvaluator.from_config(load_config(preset, ["evaluation.metric=accuracy", "trigger.freq_steps=2"]),
                                         clock=FakeClock()) for preset in ("default", "aggressive")]
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("default")  # (Python's own: once per text and line)
        for g in range(6):
            for ev in evs:
                ev.evaluate(lambda: {"acc": [1.0, 0.0]}, 0, g, g)
    said = [str(w.message) for w in record if "evaluation.metric 'accuracy' is not among" in str(w.message)]
    assert len(said) == 2 and all(w.filename == __file__ for w in record if "'accuracy'" in str(w.message))


def test_a_learning_rate_and_counters_in_the_stats_dict_are_not_watched_unless_named():
    """A probe: a verl-style stats dict given whole to observe(), its actor/lr warming up then decaying and its
    training/epoch and training/global_step counters, brought 19 evaluations forward in a quiet run (3.6x its
    samples under the default preset).  The trace readers and the HF adapter already left them out."""
    from adaptive_eval import AdaptiveEvaluator, load_config

    def run(*overrides):
        ev = AdaptiveEvaluator.from_config(load_config(overrides=["policy.budget.enabled=false", *overrides]),
                                           total_steps=600)
        rng = np.random.default_rng(0)
        for g in range(600):
            lr = 1e-6 * min(g / 50, 1.0) * (0.5 + 0.5 * math.cos(math.pi * g / 600))
            ev.observe({"critic/score/mean": 0.5 + 0.01 * rng.standard_normal(), "actor/lr": lr,
                        "training/epoch": g // 40, "training/global_step": g}, g)
            ev.evaluate(lambda: {"acc": [1.0, 0.0] * 50}, g // 40, g % 40, g)
        ev.close()
        return ev

    quiet = run()
    assert quiet.summary()["alarms"] == 0 and not quiet._detectors["actor/lr"]
    watched = run("streams.watch={actor/lr: [{type: cusum, k: 1.0, threshold: 8.0}]}")
    assert watched._detectors["actor/lr"] and watched.summary()["alarms"] > 0
    from adaptive_eval.adaptive import is_schedule  # (Lightning's LearningRateMonitor of two groups: a review)

    assert is_schedule("lr-Adam/pg1") and is_schedule("lr-SGD") and not is_schedule("train/reward")


def test_verls_reward_twin_does_not_corroborate_its_own_reward_alarm():
    """A probe: verl logs critic/score/mean and critic/rewards/mean, the same series under GRPO (no KL in the
    reward); both watched, one moving reward corroborated itself (policy.alarm.corroborate: 2) and brought an
    evaluation forward that the same data with one reward column holds.  The twin is left out unless named."""
    from adaptive_eval import AdaptiveEvaluator, load_config

    def run(*overrides):
        cfg = load_config(overrides=["policy.budget.enabled=false", "trigger.freq_steps=100", *overrides])
        ev = AdaptiveEvaluator.from_config(cfg, total_steps=300)
        rng = random.Random(5)  # (the probe's: only the reward shifts, 4 sd at step 200, not abruptly alarmed)
        for g in range(300):
            r = (0.6 if g < 200 else 0.4) + rng.gauss(0, 0.05)
            ev.observe({"actor/entropy": 0.8 + rng.gauss(0, 0.02), "actor/kl_loss": 0.01 + rng.gauss(0, 0.001),
                        "response_length/mean": 200 + rng.gauss(0, 8), "critic/score/mean": r,
                        "critic/rewards/mean": r}, g)
            ev.evaluate(lambda: {"acc": [1.0, 0.0] * 50}, 0, g, g)
        return ev

    quiet = run()
    assert not quiet._detectors["critic/rewards/mean"] and quiet._detectors["critic/score/mean"]
    assert not any(r.reason.startswith("alarm:") for r in quiet.history)  # (held: one stream alone)
    # by its name, whichever comes first (a sorted CSV watched it), and a state saved with sorted keys resumes (a
    # review: "0 detectors for stream 'critic/rewards/mean', the config 2")
    first = AdaptiveEvaluator.from_config(load_config())
    first.observe({"critic/rewards/mean": 0.5, "critic/score/mean": 0.5}, 0)
    assert not first._detectors["critic/rewards/mean"] and first._detectors["critic/score/mean"]
    resumed = AdaptiveEvaluator.from_config(load_config())
    resumed.load_state_dict(json.loads(json.dumps(quiet.state_dict(), sort_keys=True)))
    assert not resumed._detectors["critic/rewards/mean"] and resumed._detectors["critic/score/mean"]
    named = run("streams.watch={critic/rewards/mean: [{type: cusum, k: 1.0, threshold: 8.0, adapt: 0.05, warmup: 30}]}")
    assert any(r.reason.startswith("alarm:") for r in named.history)  # (as before: the twin corroborates)


def test_evaluate_called_from_inside_evaluate_fn_fails_that_evaluation_saying_why():
    """A nested evaluation ran: the history came out of order ([5, 4, 30, 29], a step past total_steps) and the loop's
    own call at the nested step was a no-op (a new user's probe).  The call is refused inside evaluate_fn."""
    from adaptive_eval import AdaptiveEvaluator, load_config

    ev = AdaptiveEvaluator(load_config(overrides=["trigger.freq_steps=5", "policy.budget.enabled=false"]),
                           total_steps=12)
    errors = []
    ev.add_listener(lambda e: e["kind"] == "error" and errors.append(e["error"]))

    def evaluate_fn(request):
        ev.evaluate(lambda r: {"acc": [0.0]}, 0, request.step + 1, request.step + 1)
        return {"acc": [1.0]}

    for s in range(12):
        ev.evaluate(evaluate_fn, 0, s, s)
    assert ev.history == [] and errors and all("evaluate() called from inside evaluate_fn" in e for e in errors)


def test_state_dict_racing_the_training_thread_from_another_thread_says_to_take_it_in_the_training_thread(
        monkeypatch):
    """A checkpoint-saving thread's state_dict() raced with the loop: a bare "dictionary changed size during
    iteration" (6 of 181 calls in a new user's probe).  It says what happened and where to take it."""
    import threading

    from adaptive_eval import AdaptiveEvaluator, load_config

    ev = AdaptiveEvaluator(load_config())
    ev.evaluate(lambda r: {"acc": [1.0]}, 0, 0, 0)  # (the training thread: this one)

    def races(timeout_s):
        raise RuntimeError("dictionary changed size during iteration")

    monkeypatch.setattr(ev, "_state_dict", races)
    got = []
    thread = threading.Thread(target=lambda: got.append(pytest.raises(RuntimeError, ev.state_dict)))
    thread.start()
    thread.join()
    assert "called from another thread than the training loop's" in str(got[0].value)
    with pytest.raises(RuntimeError, match="^dictionary changed size during iteration$"):
        ev.state_dict()  # (in the training thread: as it was)


def test_a_budget_that_defers_far_more_than_it_runs_is_said_once(caplog, monkeypatch):
    """The quick start run as a fast toy loop on the wall clock evaluated twice in 300 steps and deferred 207 times,
    unsaid: against milliseconds of training any evaluation is dear (a new user's probe; replay said so of a trace,
    the live evaluator did not).  Said once, with the clock= to pass."""
    from adaptive_eval import AdaptiveEvaluator, load_config

    now = [0.0]

    def dear(request):
        now[0] += 1.0  # an evaluation worth 100 training steps of 10 ms
        return {"acc": [1.0, 0.0] * 8}

    import time

    for given in (False, True):
        caplog.clear()
        now[0] = 0.0
        with monkeypatch.context() as patch:
            if not given:
                patch.setattr(time, "monotonic", lambda: now[0])  # (the wall clock the evaluator reads by default)
            ev = AdaptiveEvaluator(load_config(overrides=["trigger.freq_steps=5"]), total_steps=300,
                                   **({"clock": lambda: now[0]} if given else {}))
            with caplog.at_level("WARNING", logger="adaptive_eval"):
                for s in range(300):
                    now[0] += 0.01
                    ev.evaluate(dear, 0, s, s)
        said = [r.getMessage() for r in caplog.records if "the budget has held due evaluations back" in r.getMessage()]
        assert ev.summary()["deferrals"] > 100 and len(said) == 1
        # steps, not evaluations (a review: one evaluation held back 20 steps read "deferred 20 due evaluations"); and
        # clock= named only to a loop that does not pass one
        assert said[0].startswith("step 34: the budget has held due evaluations back at 20 steps and run 1 evaluation:")
        assert ("pass clock=" in said[0]) == (not given), said[0]


def test_an_eval_stream_detector_that_never_passes_its_warm_up_is_said_at_close(caplog):
    """A probe: streams.eval given a CUSUM (warm-up 50 values, one per evaluation) in a run of 32 evaluations: it
    watched nothing, and nothing said so.  One that alarmed (adwin) is not said."""
    from adaptive_eval import AdaptiveEvaluator, load_config

    for spec, said in (("{type: cusum}", True), ("{type: cusum, warmup: 5}", False), ("{type: adwin}", False)):
        ev = AdaptiveEvaluator.from_config(load_config(overrides=[
            "trigger.freq_steps=25", "policy.budget.enabled=false", "policy.interval.enabled=false",
            f"streams.eval=[{spec}]"]), total_steps=800, clock=lambda: 0.0)
        calls = [0]

        def fn():
            calls[0] += 1
            return {"acc": [1.0] * 80 + [0.0] * 20 if calls[0] < 9 else [1.0] * 20 + [0.0] * 80}

        caplog.clear()
        with caplog.at_level("WARNING", logger="adaptive_eval"):
            for s in range(800):
                ev.observe({"train/reward": 0.5}, s)
                ev.evaluate(fn, 0, s, s)
            ev.close()
        told = [r.getMessage() for r in caplog.records if r.getMessage().startswith("streams.eval:")]
        assert bool(told) == said, (spec, told)
        if said:
            assert told[0].startswith("streams.eval: cusum on eval/acc never passed its warm-up in this run's 32 "
                                      "evaluations: it watched nothing")

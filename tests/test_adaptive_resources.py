"""The AdaptiveEvaluator with the resource-aware scheduler, in one process, driven by a scripted monitor."""

import json
import math

import numpy as np
import pytest
from omegaconf import OmegaConf

from adaptive_eval import AdaptiveEvaluator
from adaptive_eval.scheduler import FakeResourceMonitor, ResourceMonitor
from conftest import RecordingLogger

LOW = {"accelerator_free_gb": 1.0, "accelerator_total_gb": 80.0, "host_free_gb": 64.0, "host_cpu_percent": 10.0}
OK = {"accelerator_free_gb": 60.0, "accelerator_total_gb": 80.0, "host_free_gb": 64.0, "host_cpu_percent": 10.0}
SHORT = "resources:deferred (accelerator free 1.00 GB < 4.00 GB)"
FORCED = "resources:forced (trigger:steps)"  # forced after max_deferral_steps, with the reason it was due for


def cfg(max_deferral_steps=5, alarm_bypass=True, enabled=True, **sections):
    """Step trigger every 10 steps, no policy but the alarm policy (so the steps are easy to predict)."""
    base = {
        "trigger": {"freq_epochs": None, "freq_steps": 10, "freq_secs": None, "eval_before_train": False},
        "evaluation": {"sample_size": None},
        "streams": {"default": [{"type": "nonfinite"}], "watch": {}, "ignore": [], "eval": []},
        "policy": {"alarm": {"enabled": True, "cooldown_steps": 20, "urgent_detectors": ["nonfinite"]},
                   "interval": {"enabled": False}, "sample_size": {"enabled": False},
                   "budget": {"enabled": False}, "peak": {"enabled": False}},
        "resources": {"enabled": enabled, "min_free_accelerator_gb": 4.0, "max_deferral_steps": max_deferral_steps,
                      "alarm_bypass": alarm_bypass},
    }
    return OmegaConf.merge(OmegaConf.create(base), OmegaConf.create(sections))


def run(ev, steps, *, start=0, nan_at=(), clock=None):
    """Observe a loss stream (NaN at ``nan_at``) and evaluate every step; return {step: reason} of evals."""
    done = {}
    for g in range(start, steps):
        if clock is not None:
            clock.advance(1.0)
        ev.observe({"loss": math.nan if g in nan_at else 1.0}, g)
        r = ev.evaluate(lambda req: {"acc": [1.0] * len(req.indices(20))}, 0, g, g)
        if r is not None:
            done[g] = r.reason
    return done


def test_short_machine_defers_then_forces_and_reads_the_monitor_only_when_due():
    monitor = FakeResourceMonitor([LOW])
    ev = AdaptiveEvaluator.from_config(cfg(), resource_monitor=monitor)
    deferred = []
    ev.add_listener(lambda e: e["kind"] == "deferred" and deferred.append((e["step"], e["reason"])))
    done = run(ev, 40)
    assert done == {14: FORCED, 29: FORCED}
    assert deferred == [(g, SHORT) for g in (9, 10, 11, 12, 13, 24, 25, 26, 27, 28, 39)]
    assert monitor.calls == len(deferred) + len(done)  # never at a step with nothing due
    assert ev.summary()["deferrals"] == len(deferred)
    assert ev.resources.forced == 2 and ev.resources.deferrals == len(deferred)
    assert ev.last_decision.reason == SHORT and not ev.last_decision


def test_evaluation_runs_with_its_own_reason_once_the_machine_recovers():
    monitor = FakeResourceMonitor([LOW, LOW, OK])
    ev = AdaptiveEvaluator.from_config(cfg(), resource_monitor=monitor)
    assert run(ev, 25) == {11: "trigger:steps", 21: "trigger:steps"}
    assert ev.resources.deferred_since is None and ev.resources.forced == 0


@pytest.mark.parametrize("alarm_bypass,expected", [
    (True, {14: FORCED, 17: "alarm:loss:nonfinite"}),  # the urgent alarm runs at once
    (False, {14: FORCED, 22: "resources:forced (alarm:loss:nonfinite)"}),  # ... or waits (5 steps) like the rest
])
def test_urgent_alarm_bypasses_the_shortage_when_configured(alarm_bypass, expected):
    ev = AdaptiveEvaluator.from_config(cfg(alarm_bypass=alarm_bypass), resource_monitor=FakeResourceMonitor([LOW]))
    assert run(ev, 30, nan_at=(17,)) == expected


def test_max_deferral_steps_zero_never_defers():
    ev = AdaptiveEvaluator.from_config(cfg(max_deferral_steps=0), resource_monitor=FakeResourceMonitor([LOW]))
    assert run(ev, 20) == {9: FORCED, 19: FORCED}


def test_disabled_scheduler_never_reads_the_monitor():
    monitor = FakeResourceMonitor([LOW])
    ev = AdaptiveEvaluator.from_config(cfg(enabled=False), resource_monitor=monitor)
    assert run(ev, 20) == {9: "trigger:steps", 19: "trigger:steps"}
    assert monitor.calls == 0
    # The default: no monitor is built at all when the scheduler is off ...
    assert AdaptiveEvaluator.from_config(cfg(enabled=False)).resources._monitor is None
    # ... and this machine's own when it is on.
    assert isinstance(AdaptiveEvaluator.from_config(cfg()).resources.monitor, ResourceMonitor)


def test_deferrals_are_logged_and_a_resumed_run_continues_the_same_deferral():
    logger = RecordingLogger()
    ev = AdaptiveEvaluator.from_config(cfg(), resource_monitor=FakeResourceMonitor([LOW]), logger=logger)
    assert run(ev, 12) == {}
    # One line where the deferral starts, not one per step it lasts; so is controller/deferred's 1 (and its last step's
    # when it ends: a 1 at every step crowded the evaluations' 0s out of TensorBoard's 1,000 points; a new user's probe)
    assert [t for t in logger.texts if t[1] == "decisions"] == [(9, "decisions", f"deferred: {SHORT} (was trigger:steps)")]
    assert [s for s, v in logger.scalars if v.get("controller/deferred") == 1.0] == [9]
    assert (9, {"controller/deferred": 1.0}) in logger.scalars
    state = json.loads(json.dumps(ev.state_dict()))
    assert state["resources"]["deferred_since"] == 9
    whole = run(ev, 40, start=12)
    evaluated = [(st, t) for st, tag, t in logger.texts if t.startswith("evaluated: ")]
    assert evaluated[0][0] == 14 and evaluated[0][1].endswith(", deferred since step 9"), evaluated
    assert [(s, v["controller/deferred"]) for s, v in logger.scalars if "controller/deferred" in v][:6] == [
        (9, 1.0), (13, 1.0), (14, 0.0), (23, 0.0), (24, 1.0), (28, 1.0)]  # (a step on the chart, not a slope from
    # 9 to 14; nor, rising, from the evaluation's 0 at 14 to the 1 at 24: the 0 at 23; a probe in Chromium)
    resumed = AdaptiveEvaluator.from_config(cfg(), resource_monitor=FakeResourceMonitor([LOW]))
    resumed.load_state_dict(state)
    assert run(resumed, 40, start=12) == whole == {14: FORCED, 29: FORCED}
    assert resumed.resources.state_dict() == ev.resources.state_dict()


def test_a_wobbling_reading_stays_one_deferral_and_a_new_cause_keeps_its_first_step():
    """The decisions line was keyed on the whole text, reading included: a free-memory reading of 1.0, 1.1, 1.2 GB
    wrote a line at every step and moved "deferred since" to the last one (a probe: 371 rows for 2 deferrals)."""
    wobbling = [{**LOW, "accelerator_free_gb": 1.0 + 0.1 * (i % 3)} for i in range(30)]
    logger = RecordingLogger()
    ev = AdaptiveEvaluator.from_config(cfg(max_deferral_steps=8, alarm_bypass=False),
                                       resource_monitor=FakeResourceMonitor(wobbling), logger=logger)
    assert run(ev, 20, nan_at=(12,)) == {17: "resources:forced (alarm:loss:nonfinite)"}
    decisions = [(s, t) for s, tag, t in logger.texts if tag == "decisions"]
    # one line where it starts, one where an alarm takes it over (what was due changed), none for the readings
    assert [s for s, _ in decisions] == [9, 12, 17], decisions
    assert decisions[0][1] == f"deferred: {SHORT} (was trigger:steps)"
    assert decisions[1][1].endswith("(was alarm:loss:nonfinite)")
    assert decisions[2][1].endswith(", deferred since step 9")


def test_close_says_an_evaluation_still_deferred_unless_after_train_ran_it(caplog):
    """close() during a deferral, without total_steps, lost the evaluation unsaid (a probe)."""
    said = "closed while deferred: the evaluation due since step 9 (" + SHORT + ", was trigger:steps) never ran"
    for call_after_train in (False, True):
        logger = RecordingLogger()
        ev = AdaptiveEvaluator.from_config(cfg(max_deferral_steps=50), resource_monitor=FakeResourceMonitor([LOW]),
                                           logger=logger)
        run(ev, 15)
        caplog.clear()
        with caplog.at_level("WARNING", logger="adaptive_eval"):
            if call_after_train:
                assert ev.after_train(lambda req: {"acc": [1.0] * len(req.indices(20))}, 14).reason == "trigger:final"
            ev.close()
        warned = [r.getMessage() for r in caplog.records if "closed while deferred" in r.getMessage()]
        texts = [(st, t) for st, tag, t in logger.texts if "closed while deferred" in t]
        if call_after_train:
            assert warned == texts == []
        else:
            assert len(warned) == 1 and warned[0].startswith(said), warned
            assert texts == [(14, warned[0])]


def test_old_state_without_resources_still_loads():
    ev = AdaptiveEvaluator.from_config(cfg(), resource_monitor=FakeResourceMonitor([LOW]))
    run(ev, 11)
    state = ev.state_dict()
    del state["resources"], state["unshared_alarms"]
    fresh = AdaptiveEvaluator.from_config(cfg(), resource_monitor=FakeResourceMonitor([LOW]))
    fresh.load_state_dict(state)
    assert fresh.resources.deferred_since is None
    assert run(fresh, 20, start=11) == {16: FORCED}  # the deferral restarts at step 11


def _collapse_run(alarm_bypass, logger=None):
    """A reward collapse at step 60 (a CUSUM alarm, not an urgent detector), on a machine always short."""
    from adaptive_eval import load_config

    config = load_config(overrides=[
        "trigger.freq_steps=200", "resources.enabled=true", "resources.min_free_accelerator_gb=4",
        "resources.max_deferral_steps=5", f"resources.alarm_bypass={str(alarm_bypass).lower()}",
        "policy.alarm.corroborate=1", "policy.budget.enabled=false"])
    monitor = FakeResourceMonitor([LOW])
    ev = AdaptiveEvaluator.from_config(config, resource_monitor=monitor, logger=logger)
    events = []
    ev.add_listener(events.append)
    for g in range(100):
        noise = 0.05 * ((g * 7919) % 11 - 5) / 5
        ev.observe({"train/reward": (0.5 if g < 60 else -1.5) + noise}, g)
        ev.evaluate(lambda req: {"acc": [1.0] * len(req.indices(20))}, 0, g, g)
    return ev, events, monitor


def test_an_alarm_driven_evaluation_bypasses_the_shortage_and_a_forced_one_keeps_its_cause():
    """alarm_bypass let only the urgent detectors (nonfinite) through: a CUSUM alarm's evaluation was deferred
    max_deferral_steps, then forced as 'resources:forced', which no longer said that an alarm caused it."""
    ev, events, monitor = _collapse_run(alarm_bypass=True)
    (alarm,) = [e for e in events if e["kind"] == "alarm"]
    reason = f"alarm:train/reward:cusum:{alarm['direction']}"
    assert [(r.step, r.reason) for r in ev.history] == [(alarm["step"], reason)]  # at once
    assert [e for e in events if e["kind"] == "deferred"] == [] and monitor.calls == 0  # the monitor is not read

    logger = RecordingLogger()
    ev, events, monitor = _collapse_run(alarm_bypass=False, logger=logger)
    deferred = [e["step"] for e in events if e["kind"] == "deferred"]
    assert deferred == list(range(alarm["step"], alarm["step"] + 5))
    forced_at = alarm["step"] + 5
    assert [(r.step, r.reason) for r in ev.history] == [(forced_at, f"resources:forced ({reason})")]
    assert ev.resources.forced == 1
    texts = [t for s, tag, t in logger.texts if tag == "decisions" and t.startswith("evaluated: ")]
    assert len(texts) == 1 and texts[0].startswith(f"evaluated: resources:forced ({reason}) (n=")
    assert texts[0].endswith(f", deferred since step {alarm['step']}")


def test_a_look_back_is_deferred_and_forced_with_the_evaluation_that_asked_for_it():
    """With alarm_bypass: false the alarm's evaluation waits out the shortage; the kept checkpoint's evaluation
    (policy.lookback) then runs in the same call, as part of it (README, the resource scheduler): not a second
    deferral of its own after the first one's max_deferral_steps."""
    from adaptive_eval import load_config

    config = load_config(overrides=[
        "trigger.freq_steps=20", "resources.enabled=true", "resources.min_free_accelerator_gb=4",
        "resources.max_deferral_steps=5", "resources.alarm_bypass=false", "policy.alarm.corroborate=1",
        "policy.budget.enabled=false"])
    ev = AdaptiveEvaluator.from_config(config, resource_monitor=FakeResourceMonitor([OK, LOW]))
    asked = []

    def evaluate_fn(request):
        asked.append((request.step, request.checkpoint, request.reason))
        good = request.step < 60
        return {"acc": [1.0 if good or i % 3 == 0 else 0.0 for i in request.indices(300)]}

    for g in range(75):
        noise = 0.05 * ((g * 7919) % 11 - 5) / 5
        ev.observe({"train/reward": (0.5 if g < 60 else -1.5) + noise}, g)
        if g % 5 == 0:
            ev.checkpoint_saved(g, f"ckpt-{g}")
        ev.evaluate(evaluate_fn, 0, g, g)
    first, forced, looked = asked  # (the first, at step 19, on a machine with room)
    assert first[2] == "trigger:steps"
    assert forced[2].startswith("resources:forced (alarm:train/reward:cusum:") and forced[1] is None
    assert looked[:2] == (55, "ckpt-55") and looked[2] == "lookback:" + forced[2]
    assert ev.resources.forced == 1 and ev.resources.deferrals == 5


def test_a_monitor_that_raises_never_raises_in_the_training_step_and_defers_nothing(caplog):
    """An NVML or CUDA error in the monitor raised out of evaluate() at every due step (found by a new-user probe);
    a reading it cannot take never defers: the same evaluations as without the scheduler, said once."""

    class Broken:
        calls = 0

        def snapshot(self):
            Broken.calls += 1
            raise RuntimeError("NVML Error: Unknown Error")

    ev = AdaptiveEvaluator.from_config(cfg(), resource_monitor=Broken())
    with caplog.at_level("WARNING", logger="adaptive_eval"):
        done = run(ev, 30)
    plain = run(AdaptiveEvaluator.from_config(cfg(enabled=False)), 30)
    assert done == plain == {9: "trigger:steps", 19: "trigger:steps", 29: "trigger:steps"}
    assert ev.resources.read_errors == Broken.calls == 3 and ev.summary()["deferrals"] == 0
    said = [r for r in caplog.records if "resource monitor" in r.getMessage()]
    assert len(said) == 1 and "NVML Error" in said[0].getMessage()


class _Returns:
    def __init__(self, value):
        self.value = value

    def snapshot(self):
        return self.value


@pytest.mark.parametrize("monitor, reads", [(_Returns(LOW), True), (lambda: FakeResourceMonitor([LOW]).snapshot(), True),
                                            (_Returns(None), False), (_Returns({"accelerator_free_gb": "low"}), False),
                                            (_Returns(42), False)])
def test_a_monitor_returning_a_mapping_or_being_a_function_is_read_and_a_wrong_reading_never_raises(monitor, reads,
                                                                                                  caplog):
    """A monitor returning a dict (as FakeResourceMonitor takes them) or None raised AttributeError out of
    evaluate(), into the training step; a plain function was never called (found by a new user)."""
    ev = AdaptiveEvaluator.from_config(cfg(), resource_monitor=monitor)
    with caplog.at_level("WARNING", logger="adaptive_eval"):
        done = run(ev, 30)
    if reads:
        assert done == {14: FORCED, 29: FORCED} and ev.resources.read_errors == 0
    else:
        assert done == {9: "trigger:steps", 19: "trigger:steps", 29: "trigger:steps"}
        assert ev.resources.read_errors == 3
        assert len([r for r in caplog.records if "resource monitor" in r.getMessage()]) == 1


@pytest.mark.parametrize("asynchronous", [False, True])
def test_the_last_step_is_never_deferred_even_without_the_bypass(asynchronous):
    """With alarm_bypass false the final evaluation was deferred at the last step and lost: no later step runs it
    (found by a new-user probe)."""
    ev = AdaptiveEvaluator.from_config(cfg(alarm_bypass=False, max_deferral_steps=50,
                                           evaluation={"asynchronous": asynchronous}),
                                       total_steps=25, resource_monitor=FakeResourceMonitor([LOW]))
    ran = []
    for g in range(25):
        ev.evaluate(lambda req: ran.append((req.step, req.reason)) or {"acc": [1.0] * 4}, 0, g, g)
    ev.close()
    assert ran == [(24, "resources:forced (trigger:final)")]
    assert ev.resources.deferrals == 15  # steps 9-23 (the evaluation due at 9) and none at 24


def test_an_asynchronous_run_writes_deferred_back_to_0_when_its_evaluation_is_submitted():
    """controller/deferred went to 1 at a deferral and stayed there: only a synchronous evaluation wrote the 0
    (found by a new-user probe: the async run's chart had no deferred line, or one stuck at 1)."""
    logger = RecordingLogger()
    ev = AdaptiveEvaluator.from_config(cfg(evaluation={"asynchronous": True}), logger=logger,
                                       resource_monitor=FakeResourceMonitor([LOW, LOW, OK]))
    for g in range(15):
        ev.evaluate(lambda req: {"acc": [1.0] * 4}, 0, g, g)
    ev.close()
    deferred = [(s, d["controller/deferred"]) for s, d in logger.scalars if "controller/deferred" in d]
    assert deferred == [(9, 1.0), (10, 1.0), (11, 0.0)]


def test_a_forced_final_evaluation_covers_every_suite():
    """The resource check renamed the final evaluation "resources:forced (trigger:final)", and the suites read the
    renamed reason: only the every-1 suite was evaluated at the last step (found in review)."""
    suites = {"a": {"size": 10, "every": 1}, "b": {"size": 10, "every": 4}}
    ev = AdaptiveEvaluator.from_config(cfg(alarm_bypass=False, max_deferral_steps=50, evaluation={"suites": suites}),
                                       total_steps=25, resource_monitor=FakeResourceMonitor([OK, LOW]))
    ran = []

    def evaluate_fn(req):
        ran.append((req.step, req.reason, sorted(req.suites)))
        return {f"{name}/acc": [1.0] * len(s.indices) for name, s in req.suites.items()}

    for g in range(25):
        ev.evaluate(evaluate_fn, 0, g, g)
    ev.close()
    assert [(step, why.split(" [")[0], names) for step, why, names in ran] == [
        (9, "trigger:steps", ["a", "b"]), (24, "resources:forced (trigger:final)", ["a", "b"])]
    assert ran[1][1].endswith("[a: every; b: final]")


def test_a_monitor_given_while_the_scheduler_is_off_is_said(caplog):
    """It was ignored without a word (a new user's find)."""
    with caplog.at_level("WARNING", logger="adaptive_eval"):
        AdaptiveEvaluator.from_config(cfg(enabled=False), resource_monitor=FakeResourceMonitor([LOW]))
    assert [r.getMessage() for r in caplog.records if "resources.enabled is false" in r.getMessage()]


def test_an_evaluation_the_shortage_forced_is_read_by_its_cause_not_as_a_quiet_one():
    """A probe: "resources:forced (peak:confirm)" counted as a quiet scheduled evaluation and relaxed the interval
    (2.2 -> 4.4), which the same re-measure unforced did not; and "resources:forced (alarm:...)" began no new segment
    of the best-checkpoint pick's estimates, as an alarm's evaluation does."""
    from adaptive_eval.policies import IntervalPolicy
    from adaptive_eval.scoring import shrunk_estimates
    from adaptive_eval.types import EvalResult, MetricSummary

    def factor_after(reason):
        policy = IntervalPolicy(min_factor=0.25, max_factor=8.0, relax=2.0)
        policy.factor = 2.2
        m = MetricSummary(mean=0.8, std=0.4, n=300, ci=(0.75, 0.85))
        policy.on_eval(EvalResult(step=20, sample_size=300, reason=reason, seconds=0.0, metrics={"acc": m}), None)
        return policy.factor

    assert factor_after("resources:forced (peak:confirm)") == factor_after("peak:confirm") == 2.2
    assert factor_after("resources:forced (trigger:steps)") == factor_after("trigger:steps") > 2.2

    def rows(alarm_reason):
        out = []
        for s, m in [(10, .80), (20, .82), (30, .81), (40, .80), (45, .70), (55, .71), (65, .72)]:
            half = 1.96 * (m * (1 - m) / 100) ** 0.5
            out.append({"step": s, "sample_size": 100, "reason": alarm_reason if s == 45 else "trigger:steps",
                        "metrics": {"acc": m}, "ci": {"acc": [m - half, m + half]}})
        return out

    alarm = [m for _, m, _ in shrunk_estimates(rows("alarm:train/loss:cusum:up"), "acc")]
    assert alarm[3] > 0.8 > alarm[4]  # (the segments: before the alarm, after it)
    assert [m for _, m, _ in shrunk_estimates(rows("resources:forced (alarm:train/loss:cusum:up)"), "acc")] == alarm


def test_a_reading_with_a_field_the_snapshot_lacks_is_still_checked_and_the_field_said_once(caplog):
    """A monitor's mapping with one more field (gpu_util_percent) was "raised TypeError": no check all run (a probe)."""
    ev = AdaptiveEvaluator.from_config(cfg(), resource_monitor=lambda: {**LOW, "gpu_util_percent": 97.0})
    with caplog.at_level("WARNING", logger="adaptive_eval"):
        assert run(ev, 30) == {14: FORCED, 29: FORCED}  # deferred as LOW is
    said = [r.getMessage() for r in caplog.records if "gpu_util_percent" in r.getMessage()]
    assert said == ["the resource monitor (function) read gpu_util_percent, which ResourceSnapshot has no field for: "
                    "left out (its fields: accelerator_free_gb, accelerator_total_gb, host_free_gb, host_cpu_percent; "
                    "said once)"]
    assert ev.resources.read_errors == 0


@pytest.mark.parametrize("free", [math.nan, -3.0, -math.inf, math.inf, True, np.bool_(True)])
def test_a_reading_that_cannot_be_is_not_checked_and_said_once_and_the_first_deferral_is_said(free, caplog):
    """A probe: NaN free memory never deferred, unsaid; -3 GB deferred every evaluation until forced ("accelerator
    free -3.00 GB < 4.00 GB"); True (numpy's too) read as 1 GB; and no deferral ever reached the log.  A later
    probe: the NaN was also said as "the monitor reads no accelerator memory here", which it does."""
    monitor = FakeResourceMonitor([{**LOW, "accelerator_free_gb": free}])
    ev = AdaptiveEvaluator.from_config(cfg(), resource_monitor=monitor)
    with caplog.at_level("WARNING", logger="adaptive_eval"):
        done = run(ev, 30)
    assert done == {9: "trigger:steps", 19: "trigger:steps", 29: "trigger:steps"} and ev.resources.deferrals == 0
    said = [r.getMessage() for r in caplog.records if "cannot be" in r.getMessage()]
    assert said == [f"the resource monitor (FakeResourceMonitor) read accelerator_free_gb = {free!r}, which cannot "
                    "be (a finite number >= 0): that reading is not checked, never deferring (said once)"]
    assert not [r for r in caplog.records if "reads no accelerator memory" in r.getMessage()]
    short = AdaptiveEvaluator.from_config(cfg(), resource_monitor=FakeResourceMonitor([LOW]))
    caplog.clear()
    with caplog.at_level("WARNING", logger="adaptive_eval"):
        run(short, 30)
    said = [r.getMessage() for r in caplog.records if "deferred" in r.getMessage()]
    assert said == ["the evaluation due at step 9 is deferred: accelerator free 1.00 GB < 4.00 GB; it runs once the "
                    "machine has recovered, or after resources.max_deferral_steps (5) steps anyway; every deferral is "
                    "in TensorBoard (controller/deferred) and summary()['deferrals'] (said once)"]


def test_a_forced_evaluation_that_cannot_start_yet_starts_with_the_first_free_slot_not_after_a_new_deferral():
    """A probe: forced at 24 while max_in_flight's one slot was taken (async:waiting), the evaluation began a new
    deferral at 25, ran at 30 (the slot was free at 29), and counted as forced twice."""
    config = cfg(evaluation={"asynchronous": True, "max_in_flight": 1, "async_integrate_after_steps": 20})
    ev = AdaptiveEvaluator.from_config(config, resource_monitor=FakeResourceMonitor([OK] + [LOW] * 200))
    started = []
    ev.add_listener(lambda e: e["kind"] == "submitted" and started.append((e["step"], e["reason"])))
    run(ev, 60)
    ev.close()
    # 19-23 deferred, forced at 24, waiting for the slot step 9's evaluation holds until its result at 29
    assert started == [(9, "trigger:steps"), (29, FORCED), (49, FORCED)]
    assert ev.resources.forced == 2


def test_a_slow_monitor_is_said_once(caplog):
    """A probe: a monitor taking 0.5 s held every step of a deferral back, unsaid; in a group, one slower than
    distributed.timeout_s failed the collective with a message blaming evaluate_fn."""
    import time as _time

    class Slow(FakeResourceMonitor):
        def snapshot(self):
            _time.sleep(0.3)
            return super().snapshot()

    ev = AdaptiveEvaluator.from_config(cfg(), resource_monitor=Slow([OK]))
    with caplog.at_level("WARNING", logger="adaptive_eval"):
        run(ev, 20)
    said = [r.getMessage() for r in caplog.records if "took" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("the resource monitor (Slow) took 0.3") and "said once" in said[0]

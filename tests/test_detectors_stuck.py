"""The ``stuck`` detector: a stream held at one exact value longer than its own history makes plausible."""

import json
import random

import pytest

from adaptive_eval import AdaptiveEvaluator, load_config
from adaptive_eval.detectors import Stuck, make_detector

STUCK_FIRST = ["streams.default=[{type: nonfinite}, {type: stuck}, {type: cusum, k: 1.0, threshold: 8.0, "
               "adapt: 0.05, warmup: 30}]"]


def batch_reward(rng, p=0.3, batch=8):
    """A GRPO step's mean reward over a batch of 8 answers right with chance p: a few possible values."""
    return sum(rng.random() < p for _ in range(batch)) / batch


def collapsed_run(seed, onset=120, steps=200):
    rng = random.Random(seed)
    return [batch_reward(rng) if s < onset else 0.0 for s in range(steps)]


def accuracy(request):
    """The eval: 0.6 of 32 items right before step 120, 0.2 after (the collapse shows)."""
    right = 19 if request.step < 120 else 6
    return {"acc": [1.0] * right + [0.0] * (32 - right)}


def run_evaluator(overrides, values):
    ev = AdaptiveEvaluator.from_config(load_config(None, ["policy.budget.enabled=false", *overrides]),
                                       total_steps=len(values))
    alarms = []
    ev.add_listener(lambda e: e["kind"] == "alarm" and alarms.append((e["step"], e["detector"])))
    evaluated = []
    for s, x in enumerate(values):
        ev.observe({"train/reward": x, "train/loss": 1.0 + 0.1 * random.Random(s).gauss(0, 1)}, s)
        r = ev.evaluate(accuracy, 0, s, s)
        if r is not None:
            evaluated.append((s, r.reason))
    return alarms, evaluated


def test_a_reward_stuck_at_zero_within_its_noise_is_an_urgent_evaluation_a_level_detector_misses():
    # The batch mean falls from 0.3 to exactly 0.0, 1.9 of its sd: cusum absorbs it; stuck sees 0.0 repeat, which
    # it did with chance 0.7 ** 8 = 0.06 before (the stream repeats anything with chance ~0.2: its floor), and
    # alarms within about ten steps.
    for seed in range(5):
        values = collapsed_run(seed)
        alarms, evaluated = run_evaluator(STUCK_FIRST, values)
        stuck = [s for s, d in alarms if d == "stuck" and s >= 120]
        assert stuck and stuck[0] <= 120 + 12, (seed, alarms)
        assert (stuck[0], "alarm:train/reward:stuck") in evaluated, (seed, evaluated)
        _, without = run_evaluator([], values)  # the default preset: no stuck detector
        assert not [s for s, reason in without if reason.startswith("alarm:") and 120 <= s <= 130], without


def test_false_alarms_on_streams_that_repeat_by_nature_stay_below_one_in_arl0_steps():
    # i.i.d. values from a few levels, a mostly-zero stream and a stream logged every 4th call: each repeats as
    # its own history says, so the closed-form run length keeps false alarms below steps / arl0.
    rng = random.Random(1)
    kinds = {
        "five levels": lambda i: rng.choice([0.0, 0.25, 0.5, 0.75, 1.0]),
        "0/1 at 0.9": lambda i: float(rng.random() < 0.9),
        "mostly zero": lambda i: 0.0 if rng.random() < 0.8 else rng.random(),
        "rounded": lambda i: round(rng.gauss(0.0, 0.02), 2),
    }
    steps = 40_000
    for name, draw in kinds.items():
        det = Stuck(arl0=200, stream=name)
        alarms = sum(det.update(draw(i), i) is not None for i in range(steps))
        assert 0 < alarms <= steps / 200, (name, alarms)  # (some: the bound is reached, not far above)
    held = Stuck(arl0=200)  # a value carried forward over 4 calls: runs of 4 are its nature
    value = 0.0
    for i in range(steps):
        value = rng.gauss(0.0, 1.0) if i % 4 == 0 else value
        assert held.update(value, i) is None


def test_a_float_stream_alarms_at_min_run_repeats_once_per_run_located_at_its_first_value():
    rng = random.Random(2)
    det = Stuck(stream="train/loss")
    values = [rng.gauss(2.0, 0.1) for _ in range(60)] + [1.5] * 10 + [rng.gauss(2.0, 0.1) for _ in range(5)]
    values += [1.25] * 12
    alarms = [a for s, x in enumerate(values) if (a := det.update(x, s)) is not None]
    assert [(a.step, a.location, a.direction) for a in alarms[:1]] == [(63, 60, None)]
    assert "train/loss has been exactly 1.5 for 4 values since step 60" in alarms[0].message
    # the second stuck stretch: the first one's 9 repeats are now in the stream's history, so a run is less
    # rare (recent pooled repeat rate 10/51) and it takes 9 values, still one alarm, at the stretch's first value
    assert [(a.step, a.location) for a in alarms[1:]] == [(83, 75)]


def test_a_stream_constant_from_the_start_never_alarms_until_it_has_moved_and_sticks_again():
    rng = random.Random(3)
    det = Stuck()
    values = [0.0] * 50 + [rng.gauss(0.01, 0.002) for _ in range(40)] + [0.0125] * 30
    steps = [s for s, x in enumerate(values) if det.update(x, s) is not None]
    # the zeros before any movement are the stream's nature (a KL before the first update); then repeats are
    # rare once in 90 values, and the second stuck stretch alarms at its 2nd + ... value
    assert steps and steps[0] > 90 and len(steps) == 1


def test_nan_and_inf_neither_break_nor_extend_a_run():
    det = Stuck()
    for s in range(40):
        det.update(float(s), s)
    got = [det.update(x, 40 + i) for i, x in enumerate([7.5, float("nan"), 7.5, float("inf"), 7.5, 7.5, 7.5])]
    assert [a is not None for a in got] == [False, False, False, False, False, False, True]  # the 5th 7.5


def test_a_state_saved_inside_a_run_resumes_to_the_same_alarm_through_the_evaluator():
    values = collapsed_run(7)
    whole, whole_evals = run_evaluator(STUCK_FIRST, values)
    assert any(d == "stuck" for _, d in whole)
    cut = next(s for s, d in whole if d == "stuck") - 2  # inside the run, before its alarm
    cfg = load_config(None, ["policy.budget.enabled=false", *STUCK_FIRST])

    def drive(ev, steps, alarms, evaluated):
        ev.add_listener(lambda e: e["kind"] == "alarm" and alarms.append((e["step"], e["detector"])))
        for s in steps:
            ev.observe({"train/reward": values[s], "train/loss": 1.0 + 0.1 * random.Random(s).gauss(0, 1)}, s)
            r = ev.evaluate(accuracy, 0, s, s)
            if r is not None:
                evaluated.append((s, r.reason))

    alarms, evaluated = [], []
    first = AdaptiveEvaluator.from_config(cfg, total_steps=len(values))
    drive(first, range(cut), alarms, evaluated)
    state = json.loads(json.dumps(first.state_dict()))
    second = AdaptiveEvaluator.from_config(cfg, total_steps=len(values))
    second.load_state_dict(state)
    drive(second, range(cut, len(values)), alarms, evaluated)
    assert alarms == whole and evaluated == whole_evals


def test_stuck_and_cusum_alarming_at_one_step_are_both_raised():
    # A float stream jumps 2.5 sd to a constant: cusum's sum grows 1.5 a step past k and crosses 8 ... at the
    # value where stuck's run reaches its length too.
    rng = random.Random(4)
    values = [rng.gauss(0.0, 1.0) for _ in range(60)]
    det_c = make_detector({"type": "cusum", "k": 1.0, "threshold": 8.0, "adapt": 0.05, "warmup": 30})
    for s, x in enumerate(values):
        det_c.update(x, s)
    for level in (2.5, 3.0, 3.5, 4.0, 5.0, 6.0):
        trial = values + [level] * 12
        c = make_detector({"type": "cusum", "k": 1.0, "threshold": 8.0, "adapt": 0.05, "warmup": 30})
        st = Stuck()
        cs = [s for s, x in enumerate(trial) if c.update(x, s) is not None]
        ss = [s for s, x in enumerate(trial) if st.update(x, s) is not None]
        if cs and ss and cs[0] == ss[0]:
            break
    else:
        pytest.fail("no level makes both alarm at one step")
    alarms, _ = run_evaluator(STUCK_FIRST, trial + [level] * 3)
    assert (ss[0], "stuck") in alarms and (cs[0], "cusum") in alarms


def test_an_evaluator_watching_with_stuck_pickles_and_copies_with_its_own_detectors():
    """A review: the fast path of stuck-then-cusum was a closure: the evaluator no longer pickled (a framework
    callback pickled for ddp_spawn) and a deep copy's observe() updated the original's detectors."""
    import copy
    import pickle

    ev = AdaptiveEvaluator.from_config(load_config(None, STUCK_FIRST))
    rng = random.Random(5)
    for s in range(50):
        ev.observe({"train/x": rng.gauss(0.0, 1.0)}, s)
    before = json.dumps(ev.state_dict()["detectors"])
    for clone in (pickle.loads(pickle.dumps(ev)), copy.deepcopy(ev)):
        clone.observe({"train/x": 123.0}, 50)
        assert json.dumps(ev.state_dict()["detectors"]) == before
        assert json.dumps(clone.state_dict()["detectors"]) != before


def test_several_values_at_one_step_are_several_values_of_a_run_not_one_run():
    """A review: a run was told by the step of its first value, so runs of 1.0 x2 then 2.0 x3 observed at one step
    were one run of 5 to the detector, and alarmed as "exactly 2 for 4 values"."""
    det = Stuck(min_run=4, arl0=1000)
    for s in range(40):
        det.update(float(s), s)
    got = [det.update(x, 40) for x in (1.0, 1.0, 2.0, 2.0, 2.0)]
    assert got == [None] * 5 and det.update(2.0, 40) is not None  # the fourth 2.0


def test_stuck_is_no_witness_a_lone_level_alarm_of_another_stream_waits_for():
    """A review: stuck past its warm-up counted its stream as one that could corroborate (Context.streams): while a
    stream's CUSUM warmed up again after its alarm, its stuck made it a witness, and with corroborate 2 the other
    stream's lone CUSUM alarm was held, its evaluation lost (11 of 40 runs changed when stuck was added; stuck
    itself never alarms on these continuous streams)."""
    cusum = "{type: cusum, k: 1.0, threshold: 8.0, adapt: 0.05, warmup: 30}"

    def evaluations(detectors, seed):
        ev = AdaptiveEvaluator.from_config(load_config(None, [
            "policy.budget.enabled=false", "trigger.freq_steps=1000", f"streams.default=[{detectors}]"]),
            total_steps=400)
        rng, out = random.Random(seed), []
        for s in range(300):
            ev.observe({"b": rng.gauss(0, 1) + (2.5 if s >= 100 else 0.0),
                        "a": rng.gauss(0, 1) + (2.0 if s >= 115 else 0.0)}, s)
            r = ev.evaluate(accuracy, 0, s, s)
            if r is not None:
                out.append((s, r.reason))
        return out

    for seed in range(12):
        assert evaluations(f"{{type: nonfinite}}, {{type: stuck}}, {cusum}", seed) == \
            evaluations(f"{{type: nonfinite}}, {cusum}", seed), seed


def test_linked_streams_freezing_a_few_steps_apart_buy_one_urgent_evaluation_and_a_nan_later_still_counts():
    """A probe: a verifier scoring everything 0 froze the reward, its spread, the loss and the grad norm a few steps
    apart; each stuck alarm was urgent with its own stream's cooldown and bought its own evaluation, over budget, of
    the same weights (5 in 40 steps).  Stuck alarms now share a cooldown across streams.  And a stuck alarm whose
    evaluation showed no change habituated the stream to NaN too: its later NaN was held, never evaluated."""
    from adaptive_eval.detectors import Alarm
    from adaptive_eval.policies import AlarmPolicy
    from adaptive_eval.policies._base import Context
    from adaptive_eval.stats import summarize
    from adaptive_eval.types import Decision, EvalResult

    def alarm(stream, detector, s):
        return Alarm(step=s, detector=detector, stream=stream, direction=None, location=s - 4, message="")

    def result(s, mean):
        return EvalResult(step=s, sample_size=500, reason="alarm", seconds=0.0,
                          metrics={"acc": summarize([1.0] * round(mean * 500) + [0.0] * (500 - round(mean * 500)))})

    c = lambda s: Context(step=s, elapsed=0.0, eval_seconds=0.0, streams=3)  # noqa: E731
    p = AlarmPolicy(cooldown_steps=33, corroborate=2, corroborate_steps=20, abrupt_steps=2, habituate=True)
    p.on_eval(result(0, 0.6), c(0))
    evaluated = []
    for s, stream in ((602, "reward"), (603, "reward_std"), (605, "loss"), (616, "grad_norm")):
        if p.admit(alarm(stream, "stuck", s), c(s)):
            p.on_alarm(alarm(stream, "stuck", s), c(s))
        if p.propose(Decision(False), c(s)).evaluate:
            evaluated.append(s)
            p.on_eval(result(s, 0.6), c(s))  # (the accuracy did not move: the reward stream is habituated)
    assert evaluated == [602]
    nan = alarm("reward", "nonfinite", 700)
    assert not p.quiet(nan) and p.admit(nan, c(700))
    p.on_alarm(nan, c(700))
    assert p.propose(Decision(False), c(700)).urgent
    assert p.quiet(alarm("reward", "stuck", 700))  # (its own stuck alarms wait, as before)


def test_a_warmup_no_run_could_reach_is_refused_naming_the_bound():
    """A probe: warmup above window - min_run loaded and the detector never alarmed (a run is judged on the window's
    values before it, at most window - min_run)."""
    with pytest.raises(ValueError, match=r"stuck: warmup must be an integer in \[2, 196\] \(window 200 - min_run 4"):
        make_detector({"type": "stuck", "warmup": 200})
    det = make_detector({"type": "stuck", "warmup": 196})
    values = [float(i) for i in range(300)] + [7.5] * 10
    assert any(det.update(x, s) is not None for s, x in enumerate(values))

"""Policies: a contract suite over every registered policy, then tables of inputs -> decisions."""

import json
import math
import logging
import pickle
import random
from types import SimpleNamespace

import numpy as np
import pytest
from omegaconf import OmegaConf

from adaptive_eval import load_config
from adaptive_eval.policies import (AlarmPolicy, BudgetPolicy, Context, IntervalPolicy, PeakPolicy, SampleSizePolicy,
                                    available, make_policies, make_policy)
from adaptive_eval.stats import summarize
from adaptive_eval.types import Decision, EvalResult

DEFAULTS = OmegaConf.to_container(load_config().policy)
EVALUATION = OmegaConf.to_container(load_config().evaluation)


def ctx(step, elapsed=None, eval_seconds=0.0):
    return Context(step=step, elapsed=float(step * 10 if elapsed is None else elapsed), eval_seconds=eval_seconds)


def alarm(step, stream="train/reward", detector="cusum", direction="down"):
    return SimpleNamespace(step=step, stream=stream, detector=detector, direction=direction, location=None,
                           message="")


def result(step, acc=None, n=100, reason="trigger:steps", seconds=5.0):
    metrics = {}
    if acc is not None:
        k = round(acc * n)
        metrics["acc"] = summarize([1] * k + [0] * (n - k))
    return EvalResult(step=step, sample_size=n, reason=reason, seconds=seconds, metrics=metrics)


def drive(policy, events):
    """Feed a list of events; return what the policy said at each 'propose' and 'scale'."""
    out = []
    for ev in events:
        kind, step = ev[0], ev[1]
        if kind == "alarm":
            policy.on_alarm(alarm(step, *ev[2:]), ctx(step))
        elif kind == "eval":
            policy.on_eval(result(step, *ev[2:]), ctx(step))
        elif kind == "propose":
            due = ev[2]
            d = policy.propose(Decision(due, None, "trigger:steps" if due else ""), ctx(step, *ev[3:]))
            out.append((d.evaluate, d.sample_size, d.reason, d.urgent))
        elif kind == "scale":
            out.append(round(policy.scale(ev[2]), 6))
    return out


def random_events(seed, n=200):
    rng = random.Random(seed)
    events = []
    for step in range(n):
        r = rng.random()
        if r < 0.05:
            events.append(("alarm", step, "s", rng.choice(["cusum", "nonfinite", "spike"]), rng.choice(["up", "down"])))
        elif r < 0.15:
            events.append(("eval", step, rng.random(), rng.choice([32, 100, 400])))
        events.append(("propose", step, rng.random() < 0.1))
        events.append(("scale", step, 1.0))
    return events


def build(name):
    return make_policy(name, DEFAULTS.get(name), EVALUATION)


@pytest.mark.parametrize("name", available())
def test_contract_state_dict_round_trip_mid_stream(name):
    events = random_events(hash(name) % 1000)
    cut = len(events) // 2
    full = drive(build(name), events)
    first = build(name)
    head = drive(first, events[:cut])
    state = json.loads(json.dumps(first.state_dict()))  # plain values survive JSON
    resumed = build(name)
    resumed.load_state_dict(state)
    assert head + drive(resumed, events[cut:]) == full


@pytest.mark.parametrize("name", available())
def test_contract_pickles_and_builds_from_config(name):
    p = build(name)
    drive(p, random_events(1, 50))
    q = pickle.loads(pickle.dumps(p))
    assert q.state_dict() == p.state_dict()
    assert p.name == name


@pytest.mark.parametrize("name", [n for n in available() if n != "nop"])
def test_contract_unknown_parameter_is_named(name):
    with pytest.raises(ValueError, match="bogus"):
        make_policy(name, {**DEFAULTS[name], "bogus": 1}, EVALUATION)


def test_unknown_policy_lists_available():
    with pytest.raises(ValueError, match="available: alarm"):
        make_policy("nope")


def test_nop_set_is_neutral():
    ps = make_policies(OmegaConf.to_container(load_config("areal").policy))
    assert ps.policies == [] and ps.scale() == 1.0
    d = Decision(True, None, "trigger:steps")
    assert ps.propose(d, ctx(3)) == d


ALARM_TABLE = [
    # (events, expected proposals)
    ([("propose", 5, False)], [(False, None, "", False)]),
    ([("alarm", 5), ("propose", 5, False)], [(True, None, "alarm:train/reward:cusum:down", False)]),
    # a burst: after the alarm-driven eval at 5, alarms within the 20-step cooldown are absorbed
    ([("alarm", 5), ("propose", 5, False), ("eval", 5, 0.5), ("alarm", 9), ("propose", 9, False),
      ("alarm", 30), ("propose", 30, False)],
     [(True, None, "alarm:train/reward:cusum:down", False), (False, None, "", False),
      (True, None, "alarm:train/reward:cusum:down", False)]),
    # nonfinite is urgent and ignores the cooldown of other alarms
    ([("alarm", 5), ("eval", 5, 0.5), ("alarm", 8, "train/loss", "nonfinite", None), ("propose", 8, False)],
     [(True, None, "alarm:train/loss:nonfinite", True)]),
    # ... but a stream stuck at NaN costs one eval per cooldown
    ([("alarm", 8, "train/loss", "nonfinite", None), ("eval", 8, 0.5),
      ("alarm", 9, "train/loss", "nonfinite", None), ("propose", 9, False)], [(False, None, "", False)]),
    # an alarm turns a due scheduled eval into an alarm eval (the more informative reason)
    ([("alarm", 7, "train/len", "spike", "up"), ("propose", 7, True)], [(True, None, "alarm:train/len:spike:up", False)]),
]


@pytest.mark.parametrize("events,expected", ALARM_TABLE)
def test_alarm_policy_table(events, expected):
    assert drive(AlarmPolicy(cooldown_steps=20), events) == expected


INTERVAL_TABLE = [
    # quiet evals relax geometrically up to max_factor
    ([("eval", 1, 0.5), ("scale", 1, 1.0), ("eval", 2, 0.5), ("scale", 2, 1.0), ("eval", 3, 0.5),
      ("eval", 4, 0.5), ("eval", 5, 0.5), ("scale", 5, 1.0)], [1.5, 2.25, 4.0]),
    # an alarm tightens once (a burst does not compound), the alarm-driven eval does not relax
    ([("alarm", 1), ("alarm", 2), ("scale", 2, 1.0), ("eval", 3, 0.5, 100, "alarm:x:cusum"), ("scale", 3, 1.0)],
     [0.5, 0.5]),
    # a significant change between successive evals tightens (after a first quiet relax), down to min_factor
    ([("eval", 1, 0.8, 400), ("eval", 2, 0.3, 400), ("scale", 2, 1.0), ("eval", 3, 0.8, 400),
      ("eval", 4, 0.2, 400), ("scale", 4, 1.0)], [0.75, 0.25]),
    # an eval without the tracked metric (a failure) is no evidence of quiet: a tightened interval drifts back
    # to the base, never past it
    ([("eval", 1), ("scale", 1, 1.0), ("alarm", 2), ("eval", 3, 0.5, 100, "alarm:x:cusum"), ("eval", 4),
      ("scale", 4, 1.0), ("eval", 5), ("scale", 5, 1.0)], [1.0, 0.75, 1.0]),
]


@pytest.mark.parametrize("events,expected", INTERVAL_TABLE)
def test_interval_policy_table(events, expected):
    assert drive(IntervalPolicy(min_factor=0.25, max_factor=4.0, relax=1.5, tighten=0.5), events) == expected


SAMPLE_TABLE = [
    ([("propose", 1, True)], [(True, 128, "trigger:steps", False)]),
    # after an eval at p=0.5 the Wilson size for half-width 0.05 is 381; at p=0.9 it is 141
    ([("eval", 1, 0.5), ("propose", 2, True), ("eval", 3, 0.9), ("propose", 4, True)],
     [(True, 381, "trigger:steps", False), (True, 141, "trigger:steps", False)]),
    # widened after an alarm, capped at max
    ([("eval", 1, 0.5), ("alarm", 2), ("propose", 2, True)], [(True, 762, "trigger:steps", False)]),
    ([("eval", 1, 0.5), ("alarm", 2), ("eval", 2, 0.5), ("alarm", 3), ("propose", 3, True)],
     [(True, 762, "trigger:steps", False)]),
    # near 0 or 1 few samples pin the proportion down (Wilson: 35 at p=1), never below min
    ([("eval", 1, 1.0), ("propose", 2, True)], [(True, 35, "trigger:steps", False)]),
    # not due: untouched
    ([("eval", 1, 0.5), ("propose", 2, False)], [(False, None, "", False)]),
]


@pytest.mark.parametrize("events,expected", SAMPLE_TABLE)
def test_sample_size_policy_table(events, expected):
    assert drive(SampleSizePolicy(initial=128, min=32, max=1024, target_half_width=0.05), events) == expected


BUDGET_TABLE = [
    # nothing known of the cost: the first eval runs
    ([("propose", 1, True, 0.0)], [(True, None, "trigger:steps", False)]),
    # 5 s per 100 samples; at 30 s elapsed with 5 s spent, 10/35 > 0.15: deferred
    ([("eval", 1, 0.5, 100, "trigger:steps", 5.0), ("propose", 3, True, 30.0, 5.0)],
     [(False, None, "budget:deferred", False)]),
    # at 100 s elapsed 10/105 < 0.15: runs
    ([("eval", 1, 0.5, 100, "trigger:steps", 5.0), ("propose", 10, True, 100.0, 5.0)],
     [(True, None, "trigger:steps", False)]),
]


@pytest.mark.parametrize("events,expected", BUDGET_TABLE)
def test_budget_policy_table(events, expected):
    assert drive(BudgetPolicy(max_eval_fraction=0.15), events) == expected


def test_budget_lets_urgent_through():
    p = BudgetPolicy(max_eval_fraction=0.01)
    p.on_eval(result(1, 0.5, seconds=50.0), ctx(1))
    assert p.propose(Decision(True, 100, "alarm:x:nonfinite", urgent=True), ctx(2)).evaluate
    strict = BudgetPolicy(max_eval_fraction=0.01, bypass_urgent=False, alarm_min_size=None)
    strict.on_eval(result(1, 0.5, seconds=50.0), ctx(1))
    assert strict.propose(Decision(True, 100, "alarm:x:nonfinite", urgent=True), ctx(2)).reason == "budget:deferred"
    smaller = BudgetPolicy(max_eval_fraction=0.01, bypass_urgent=False)  # like any alarm's: on what fits, >= 48
    smaller.on_eval(result(1, 0.5, seconds=50.0), ctx(1))
    assert smaller.propose(Decision(True, 100, "alarm:x:nonfinite", urgent=True), ctx(2)).reason == "budget:deferred"
    assert smaller.propose(Decision(True, 100, "alarm:x:nonfinite", urgent=True), ctx(2, 2475.0)).sample_size == 50


def test_an_alarms_evaluation_over_budget_runs_now_on_the_sample_that_fits():
    # 5 s per 100 items so far: 0.05 s an item.  At 300 s elapsed with 30 s spent, a 0.1 budget leaves
    # (0.1 x 300 - 30) / 0.9 = 0 s: nothing fits; at 500 s, 22.2 s = 444 items.
    p = BudgetPolicy(max_eval_fraction=0.1)
    p.on_eval(result(1, 0.5, n=100, seconds=5.0), ctx(1))
    trigger = p.propose(Decision(True, 600, "trigger:steps"), ctx(30, 500.0, 30.0))
    assert (trigger.evaluate, trigger.reason) == (False, "budget:deferred")        # a scheduled one waits
    now = p.propose(Decision(True, 600, "alarm:train/reward:cusum:down"), ctx(30, 500.0, 30.0))
    assert (now.evaluate, now.sample_size) == (True, 444)
    assert now.reason == "alarm:train/reward:cusum:down (budget: 444 of 600 items)"
    # At 300 s with 30 s spent nothing fits: it waits (the budget stays a cap); at 334 s, 3.8 s = 75 items fit.
    assert p.propose(Decision(True, 600, "alarm:train/reward:cusum:down"), ctx(30, 300.0, 30.0)).reason \
        == "budget:deferred"
    assert p.propose(Decision(True, 600, "alarm:train/reward:cusum:down"), ctx(30, 334.0, 30.0)).sample_size == 75
    # ... but fewer than alarm_min_size items do not count: at 318 s, 1.8 s = 35 items fit, so it waits.
    assert not p.propose(Decision(True, 600, "alarm:train/reward:cusum:down"), ctx(30, 318.0, 30.0)).evaluate
    fits = p.propose(Decision(True, 300, "alarm:train/reward:cusum:down"), ctx(30, 500.0, 30.0))
    assert (fits.sample_size, fits.reason) == (300, "alarm:train/reward:cusum:down")  # within budget: as asked
    assert p.deferred == 3
    # A whole-set request (sample_size None) shrinks once a whole-set evaluation has shown its size (1000 items).
    whole = BudgetPolicy(max_eval_fraction=0.1)
    whole.on_eval(EvalResult(step=1, sample_size=None, reason="", seconds=50.0,
                             metrics={"acc": summarize([1, 0] * 500)}), ctx(1))
    got = whole.propose(Decision(True, None, "alarm:train/reward:cusum:down"), ctx(30, 500.0, 30.0))
    assert (got.evaluate, got.sample_size) == (True, 444) and got.reason.endswith("(budget: 444 of 1000 items)")
    assert whole.propose(Decision(True, None, "trigger:steps"), ctx(30, 500.0, 30.0)).reason == "budget:deferred"
    waits = BudgetPolicy(max_eval_fraction=0.1, alarm_min_size=None)
    waits.on_eval(result(1, 0.5, n=100, seconds=5.0), ctx(1))
    assert waits.propose(Decision(True, 600, "alarm:train/reward:cusum:down"), ctx(30, 500.0, 30.0)).reason \
        == "budget:deferred"
    # eval suites: every suite's items shrink in proportion (444 of 600)
    suites = Decision(True, 64, "alarm:x:cusum:up", suites=(("math500", 500, 4, "two-stage"), ("aime24", 100, 16, "")))
    shrunk = p.propose(suites, ctx(30, 500.0, 30.0))
    assert shrunk.evaluate and shrunk.suites == (("math500", 370, 4, "two-stage"), ("aime24", 74, 16, ""))
    with pytest.raises(ValueError, match="alarm_min_size"):
        BudgetPolicy(alarm_min_size=0)


def test_a_widened_scheduled_evaluation_over_budget_shrinks_back_towards_its_own_size():
    """policy.budget.shrink_widened: an evaluation a held alarm or the peak policy widened (Decision.widened_from)
    runs over budget on what fits, never below the size it was widened from; an unwidened one waits."""
    p = BudgetPolicy(max_eval_fraction=0.1)  # 0.05 s an item; at 500 s with 30 s spent 22.2 s = 444 items fit
    p.on_eval(result(1, 0.5, n=100, seconds=5.0), ctx(1))
    widened = Decision(True, 600, "interval:relaxed", widened_from=150)
    got = p.propose(widened, ctx(30, 500.0, 30.0))
    assert (got.evaluate, got.sample_size, got.reason) == (True, 444, "interval:relaxed (budget: 444 of 600 items)")
    assert p.propose(Decision(True, 600, "interval:relaxed"), ctx(30, 500.0, 30.0)).reason == "budget:deferred"
    # at 340 s 4.4 s = 88 items fit: fewer than the 150 it was widened from, so it waits; from 100 it runs
    assert p.propose(widened, ctx(30, 340.0, 30.0)).reason == "budget:deferred"
    assert p.propose(Decision(True, 600, "peak:x", widened_from=80), ctx(30, 340.0, 30.0)).sample_size == 88
    waits = BudgetPolicy(max_eval_fraction=0.1, shrink_widened=False)
    waits.on_eval(result(1, 0.5, n=100, seconds=5.0), ctx(1))
    assert waits.propose(widened, ctx(30, 500.0, 30.0)).reason == "budget:deferred"
    with pytest.raises(ValueError, match="shrink_widened"):
        BudgetPolicy(shrink_widened="no")
    # with eval suites their plans size the evaluation (the peak policy widens only the plain size): not shrunk
    suites = Decision(True, 600, "interval:relaxed", suites=(("math500", 500, 4, ""),), widened_from=150)
    assert p.propose(suites, ctx(30, 500.0, 30.0)).reason == "budget:deferred"


def test_the_peak_and_sample_size_policies_say_what_they_widened_from():
    from omegaconf import OmegaConf

    from adaptive_eval import load_config
    from adaptive_eval.policies import make_policies

    cfg = OmegaConf.to_container(load_config())
    pol = make_policies(cfg["policy"], cfg["evaluation"])
    peak, size = pol.by_name["peak"], pol.by_name["sample_size"]
    peak.improving = True
    d = peak.propose(size.propose(Decision(True, None, "interval:relaxed"), ctx(30)), ctx(30))
    assert (d.sample_size, d.widened_from) == (500, size.base)
    size.on_held_alarm(None, ctx(30))
    d = size.propose(Decision(True, None, "trigger:steps"), ctx(31))
    assert d.sample_size > size.base and d.widened_from == size.base
    assert size.propose(Decision(True, None, "alarm:x:cusum:up"), ctx(32)).widened_from is None  # an alarm's own


def test_with_a_cost_model_the_budget_reckons_in_cost_units_not_items():
    """(AdaptiveEvaluator sets it with eval suites.)  An evaluation of 50 cheap items cost 110 s because its
    30 dear ones cost 2000 of its 2200 units: a plan of 50 cheap items (200 units) is 10 s, not 110 s."""
    units = {"cheap": (200.0, 50), "both": (2200.0, 80)}
    p = BudgetPolicy(max_eval_fraction=0.1)
    p.cost_model(lambda d: units[d.reason.split(":")[-1]], lambda metrics: 2200.0 if metrics else None)
    p.on_eval(result(1, 0.5, n=50, seconds=110.0), ctx(1))  # 0.05 s a unit
    room = ctx(30, 1200.0, 110.0)  # (0.1 x 1200 - 110) / 0.9 = 11.1 s
    assert p.propose(Decision(True, 50, "trigger:cheap"), room).evaluate
    assert p.propose(Decision(True, 50, "trigger:both"), room).reason == "budget:deferred"
    counted = BudgetPolicy(max_eval_fraction=0.1)  # in items: 2.2 s an item, so 50 look like 110 s
    counted.on_eval(result(1, 0.5, n=50, seconds=110.0), ctx(1))
    assert counted.propose(Decision(True, 50, "trigger:cheap"), room).reason == "budget:deferred"
    # A failed evaluation (no suite's metric came back; asynchronous ones report 0 s) teaches nothing about the
    # next one's cost (counted in items, the 20 s would have read as 0.4 s a unit).
    for failed in (EvalResult(step=2, sample_size=50, reason="", seconds=20.0),
                   EvalResult(step=2, sample_size=50, reason="", seconds=0.0)):
        p.on_eval(failed, ctx(2))
        assert p.state_dict()["seconds_per_sample"] == 0.05
    # A state saved counting items is relearned, not read as seconds per unit.
    q = BudgetPolicy(max_eval_fraction=0.1)
    q.cost_model(lambda d: units["cheap"], lambda metrics: 200.0)
    q.load_state_dict(counted.state_dict())
    assert q.state_dict()["seconds_per_sample"] is None and counted.state_dict()["unit"] == "item"
    q.load_state_dict(p.state_dict())
    assert q.state_dict()["seconds_per_sample"] == 0.05


def test_with_a_cost_model_an_alarm_over_budget_shrinks_what_can_shrink():
    """The plans the sample-size policy sized shrink in proportion until the evaluation fits; a suite of fixed
    size (here ``dear``: 30 x 16 answers at cost 4, 1920 units) costs the same at every share."""
    def planned(d):  # the evaluator's _planned_units: cheap sized by the plan, dear fixed
        cheap = dict((name, items) for name, items, *_ in d.suites).get("cheap", 0)
        return cheap * 1.0 + 1920.0, cheap + 30

    p = BudgetPolicy(max_eval_fraction=0.1)
    p.cost_model(planned, lambda metrics: 2420.0)
    p.on_eval(result(1, 0.5, n=50, seconds=121.0), ctx(1))  # 0.05 s a unit
    alarm = Decision(True, 500, "alarm:x:cusum:down", suites=(("cheap", 500, 1, "two-stage"),))
    # (0.1 x 2300 - 121) / 0.9 = 121.1 s = 2422 units: all of it; at 2000 s, 87.8 s = 1755 units: not even dear.
    assert p.propose(alarm, ctx(30, 2300.0, 121.0)) == alarm
    assert p.propose(alarm, ctx(30, 2000.0, 121.0)).reason == "budget:deferred"
    # at 2150 s, 104.4 s = 2088 units: 168 cheap items beside the fixed 30 (before: deferred, the share was taken
    # of all 2420 units as if every one could shrink)
    got = p.propose(alarm, ctx(30, 2150.0, 121.0))
    assert got.evaluate and got.suites == (("cheap", 168, 1, "two-stage"),)
    assert got.reason == "alarm:x:cusum:down (budget: 198 of 530 items)"
    assert planned(got)[0] <= 2088.9
    # fewer than alarm_min_size items in all: it waits (at 2130 s: 2044 units, 124 cheap + 30 = 154 >= 48 fits;
    # with alarm_min_size=200 it does not)
    strict = BudgetPolicy(max_eval_fraction=0.1, alarm_min_size=200)
    strict.cost_model(planned, lambda metrics: 2420.0)
    strict.on_eval(result(1, 0.5, n=50, seconds=121.0), ctx(1))
    assert strict.propose(alarm, ctx(30, 2150.0, 121.0)).reason == "budget:deferred"


PEAK_TABLE = [
    ([("eval", 1, 0.5), ("scale", 1, 4.0), ("eval", 2, 0.6), ("scale", 2, 4.0), ("eval", 3, 0.55),
      ("scale", 3, 4.0), ("scale", 3, 0.5)], [1.0, 1.0, 4.0, 0.5]),
]


@pytest.mark.parametrize("events,expected", PEAK_TABLE)
def test_peak_policy_table(events, expected):
    assert drive(PeakPolicy(improving_factor=1.0), events) == expected


def test_peak_policy_lower_is_better():
    p = PeakPolicy(improving_factor=1.0, higher_is_better=False)
    drive(p, [("eval", 1, 0.5), ("eval", 2, 0.4)])
    assert p.improving
    drive(p, [("eval", 3, 0.45)])
    assert not p.improving


@pytest.mark.parametrize("cls,kw,key", [
    (IntervalPolicy, dict(min_factor=2, max_factor=1), "min_factor"),
    (IntervalPolicy, dict(relax=0.5), "relax"),
    (SampleSizePolicy, dict(min=100, max=10), "min"),
    (SampleSizePolicy, dict(alarm_factor=0.5), "alarm_factor"),
    (BudgetPolicy, dict(max_eval_fraction=0), "max_eval_fraction"),
    (AlarmPolicy, dict(cooldown_steps=-1), "cooldown_steps"),
    (PeakPolicy, dict(improving_factor=0), "improving_factor"),
])
def test_bad_parameters_name_themselves(cls, kw, key):
    with pytest.raises(ValueError, match=key):
        cls(**kw)


@pytest.mark.parametrize("k1,n1,k2,n2", [(80, 100, 40, 100), (5, 32, 9, 40), (300, 500, 280, 512), (1, 50, 0, 60)])
def test_differs_matches_statsmodels_two_proportion_ztest(k1, n1, k2, n2):
    from statsmodels.stats.proportion import proportions_ztest

    from adaptive_eval.policies import differs

    a = summarize([1] * k1 + [0] * (n1 - k1))
    b = summarize([1] * k2 + [0] * (n2 - k2))
    assert differs(a, b) == pytest.approx(float(proportions_ztest([k1, k2], [n1, n2])[1]), rel=1e-9)


@pytest.mark.parametrize("k,n,conf", [(0, 10, 0.95), (10, 10, 0.95), (8, 10, 0.9), (123, 500, 0.99), (1, 1, 0.95)])
def test_wilson_matches_statsmodels(k, n, conf):
    from statsmodels.stats.proportion import proportion_confint

    from adaptive_eval.stats import wilson_interval

    low, high = proportion_confint(k, n, alpha=1 - conf, method="wilson")
    assert wilson_interval(k, n, conf) == pytest.approx((max(0.0, min(low, k / n)), min(1.0, max(high, k / n))),
                                                         abs=1e-12)


def test_peak_policy_confirms_a_new_best_with_a_larger_sample():
    p = PeakPolicy(improving_factor=1.0, confirm_size=256)
    p.on_eval(result(1, 0.5, n=64), ctx(1))  # a first best
    assert p.propose(Decision(True, 64, "trigger:steps"), ctx(2)).sample_size == 256
    p.on_eval(result(2, 0.40, n=256), ctx(2))  # lower bound below the best one: not improving
    assert p.propose(Decision(True, 64, "trigger:steps"), ctx(3)).sample_size == 64
    # A lucky small sample whose lower bound does not beat the best does not count as a new best.
    p.on_eval(result(3, 0.53, n=32), ctx(3))
    assert not p.improving


# Corroboration (policy.alarm.corroborate): through the PolicySet, which asks the alarm policy to admit an alarm.
def corroborating_set(**alarm_kw):
    pol = {"alarm": {"cooldown_steps": 5, "corroborate": 2, "corroborate_steps": 10, "abrupt_steps": 2, **alarm_kw},
           "interval": {"min_factor": 0.25, "max_factor": 4.0, "relax": 1.5, "tighten": 0.5},
           "sample_size": {"initial": 50, "min": 10, "max": 1000, "target_half_width": 0.1, "alarm_factor": 4.0}}
    return make_policies(pol, EVALUATION)


def cusum_alarm(step, stream, direction="down", began=20):
    """A CUSUM alarm whose excursion began ``began`` steps before it (its location)."""
    return SimpleNamespace(step=step, stream=stream, detector="cusum", direction=direction, location=step - began,
                           message="")


def drive_set(ps, events, streams=3, stride=1):
    out = []
    for ev in events:
        kind, step = ev[0], ev[1]
        c = Context(step=step, elapsed=10.0 * step, eval_seconds=0.0, streams=streams, stride=stride)
        if kind == "alarm":
            ps.on_alarm(cusum_alarm(step, *ev[2:]), c)
        elif kind == "nan":
            ps.on_alarm(SimpleNamespace(step=step, stream=ev[2], detector="nonfinite", direction=None, location=step,
                                        message=""), c)
        elif kind == "eval":
            ps.on_eval(result(step, 0.5, 50, ev[2] if len(ev) > 2 else "trigger:steps"), c)
        elif kind == "propose":
            d = ps.propose(Decision(ev[2], None, "trigger:steps" if ev[2] else ""), c)
            out.append((d.evaluate, d.sample_size, d.reason))
        elif kind == "scale":
            out.append(ps.scale())
    return out


LONE = "alarm:train/loss:cusum:down"
CORROBORATION_TABLE = [
    # a lone alarm brings nothing forward and leaves the schedule as it was; the next scheduled eval is widened
    ([("alarm", 40, "train/loss"), ("propose", 41, False), ("scale", 41), ("propose", 50, True)],
     [(False, None, ""), 1.0, (True, 200, "trigger:steps")], 3),
    # a second stream within corroborate_steps: the evaluation comes now, widened, and the schedule tightens
    ([("alarm", 40, "train/loss"), ("alarm", 45, "train/reward"), ("propose", 45, False), ("scale", 45)],
     [(True, 200, "alarm:train/reward:cusum:down"), 0.5], 3),
    # ... but not one further apart, nor another alarm of the same stream
    ([("alarm", 40, "train/loss"), ("alarm", 51, "train/reward"), ("alarm", 55, "train/reward"),
      ("propose", 55, False)], [(False, None, "")], 3),
    # an abrupt shift (the detector crossed within abrupt_steps of the change) counts alone
    ([("alarm", 40, "train/loss", "down", 1), ("propose", 40, False)], [(True, 200, LONE)], 3),
    # NaN is urgent: never held
    ([("nan", 40, "train/loss"), ("propose", 40, False)], [(True, 200, "alarm:train/loss:nonfinite")], 3),
    # once a change was taken, a stream moving back against it (a recovery) counts alone
    ([("alarm", 40, "train/loss"), ("alarm", 42, "train/reward"), ("propose", 42, False), ("eval", 42, LONE),
      ("alarm", 120, "train/reward", "up"), ("propose", 120, False)],
     [(True, 200, "alarm:train/reward:cusum:down"), (True, 372, "alarm:train/reward:cusum:up")], 3),
    # one stream watched: nobody can corroborate, so its alarms count alone
    ([("alarm", 40, "train/loss"), ("propose", 40, False)], [(True, 200, LONE)], 1),
]


@pytest.mark.parametrize("events,expected,streams", CORROBORATION_TABLE)
def test_alarm_corroboration_table(events, expected, streams):
    assert drive_set(corroborating_set(), events, streams) == expected


def test_alarm_corroboration_off_takes_every_alarm():
    ps = corroborating_set(corroborate=1)
    assert drive_set(ps, [("alarm", 40, "train/loss"), ("propose", 40, False)]) == [(True, 200, LONE)]


@pytest.mark.parametrize("stride,expected", [(1, [(False, None, "")] * 2),
                                             (10, [(True, 200, LONE), (True, 200, "alarm:train/reward:cusum:down")])])
def test_alarm_windows_count_the_updates_of_streams_logged_every_k_steps(stride, expected):
    """Logged every 10 steps, a change caught on the second value after it began 10-20 steps before the alarm,
    and two streams agreeing 6 updates apart are 60 steps apart: abrupt_steps (2) and corroborate_steps (10)
    count updates, so both count as they do at one value per step."""
    abrupt = drive_set(corroborating_set(), [("alarm", 400, "train/loss", "down", 15), ("propose", 400, False)],
                       stride=stride)
    agree = drive_set(corroborating_set(), [("alarm", 400, "train/loss", "down", 50), ("alarm", 460, "train/reward"),
                                            ("propose", 460, False)], stride=stride)
    assert abrupt + agree == expected


def test_a_trace_logged_every_10_steps_replays_as_the_same_run_logged_every_step():
    """A lone abrupt loss jump (one stream) is evaluated 2 records after it whether the trace is logged every
    step or every 10: the same evaluations, at the same records, for the same reasons and sizes."""
    from adaptive_eval.replay import replay
    from adaptive_eval.trace import Trace, TraceRecord

    def trace(stride):
        rng = np.random.default_rng(0)
        return Trace([TraceRecord(i * stride, {"train/loss": float(rng.normal(1.0 if i < 200 else 3.0, 0.05)),
                                               "train/reward": float(rng.normal(0.5, 0.05)),
                                               "train/response_length": float(rng.normal(100.0, 5.0)),
                                               "eval/acc": 0.6 if i < 200 else 0.3}) for i in range(300)])

    cfg = load_config(overrides=["logging.tensorboard_dir=null"])
    every_step = [(e["step"], e["reason"], e["sample_size"]) for e in replay(trace(1), cfg).evals]
    every_10 = [(e["step"] // 10, e["reason"], e["sample_size"]) for e in replay(trace(10), cfg).evals]
    assert (202, "alarm:train/loss:cusum:up", 500) in every_step
    assert every_10 == every_step


def test_alarm_corroboration_resumes_mid_window():
    events = [("alarm", 40, "train/loss"), ("propose", 41, False), ("alarm", 46, "train/reward"),
              ("propose", 46, False), ("eval", 46, "alarm:x"), ("alarm", 90, "train/reward", "up"),
              ("propose", 90, False)]
    full = drive_set(corroborating_set(), events)
    first = corroborating_set()
    head = drive_set(first, events[:2])
    resumed = corroborating_set()
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))
    assert head + drive_set(resumed, events[2:]) == full
    assert full[1][0] and full[2][0]  # corroborated across the cut, then the recovery alone


@pytest.mark.parametrize("kw,key", [({"corroborate": 0}, "corroborate"), ({"corroborate_steps": -1}, "corroborate_steps"),
                                    ({"abrupt_steps": -1}, "abrupt_steps")])
def test_alarm_corroboration_bad_parameters(kw, key):
    with pytest.raises(ValueError, match=key):
        AlarmPolicy(**kw)


def test_default_preset_holds_lone_false_alarms_and_still_catches_a_collapse():
    """On synthetic runs (simulated clock), corroboration removes most alarm-driven evaluations of quiet runs
    while a collapse, which moves reward, loss and length together, is still evaluated within a few steps."""
    from adaptive_eval.replay import replay
    from adaptive_eval.synthetic import make_trace

    def alarm_evals(cfg, kind, seeds):
        return sum(e["reason"].startswith("alarm:") for s in seeds
                   for e in replay(make_trace(kind, steps=600, seed=s).trace, cfg).evals)

    on, off = load_config(), load_config(overrides=["policy.alarm.corroborate=1"])
    quiet_on = sum(alarm_evals(on, k, range(4)) for k in ("rise_plateau", "spikes", "flat"))
    quiet_off = sum(alarm_evals(off, k, range(4)) for k in ("rise_plateau", "spikes", "flat"))
    assert quiet_off >= 4 and quiet_on <= quiet_off / 3
    for seed in range(3):
        st = make_trace("collapse", steps=600, seed=seed)
        onset = st.events[0].step
        after = [e["step"] for e in replay(st.trace, on).evals if e["step"] >= onset]
        assert after and after[0] - onset <= 5


def test_a_stream_still_warming_up_is_no_witness():
    """A loss collapse on the one dense stream is taken alone while the sparse streams beside it (logged every
    10 steps, their CUSUM still in warm-up) cannot corroborate it."""
    from adaptive_eval import AdaptiveEvaluator
    from conftest import FakeClock

    ev = AdaptiveEvaluator.from_config(load_config(overrides=["policy.budget.enabled=false", "trigger.freq_steps=100"]),
                                       clock=FakeClock())
    reasons = []

    def fn(request):
        reasons.append((request.step, request.reason))
        return {"acc": [1.0, 0.0] * 20}

    rng = random.Random(0)
    for step in range(120):
        loss = 1.0 + 0.02 * rng.gauss(0, 1) + (0.03 * (step - 80) if step >= 80 else 0.0)  # a ramp from 80
        metrics = {"train/loss": loss}
        if step % 10 == 0:
            metrics["train/grad_norm"] = 1.0 + 0.1 * rng.gauss(0, 1)
        ev.observe(metrics, step)
        ev.evaluate(fn, 0, step, step)
    assert any(r.startswith("alarm:train/loss") and 80 <= s <= 95 for s, r in reasons), reasons


def test_the_budget_learns_a_fixed_cost_per_evaluation_once_sizes_differ():
    """Evaluations of 5 s + 0.05 s per item (an inference engine's weight load): in proportion only, a 32-item
    evaluation made a widened 384-item one look 79 s long (it takes 24.2 s), so the alarm's evaluation was cut to
    a fifth; and after a large evaluation, small ones looked 2 s long and ran past the budget."""
    cost = lambda n: 5.0 + 0.05 * n  # noqa: E731
    p = BudgetPolicy(max_eval_fraction=0.1)
    p.on_eval(result(0, 0.5, n=32, seconds=cost(32)), ctx(0))
    assert p.expected_seconds(384) == pytest.approx(79.2)
    p.on_eval(result(10, 0.5, n=384, seconds=cost(384)), ctx(10))
    assert p.state_dict()["fixed_seconds"] == pytest.approx(5.0)
    for n in (32, 100, 384, 1000):
        assert p.expected_seconds(n) == pytest.approx(cost(n))
    # an alarm that the room (30 s) affords whole runs whole; in proportion it was cut to 145 of 384 items
    room = ctx(50, 10 * (0.9 * 30.0 + 10.0), 10.0)
    assert p.propose(Decision(True, 384, "alarm:x:cusum:up"), room) == Decision(True, 384, "alarm:x:cusum:up")
    # and one that it does not afford is cut to what fits after the fixed cost: (26.26 - 5) / 0.05 = 425 items
    d = p.propose(Decision(True, 1000, "alarm:x:cusum:up"), ctx(50, 10 * (0.9 * 26.26 + 10.0), 10.0))
    assert d.evaluate and d.sample_size == 425
    # the state carries it (plain values)
    q = BudgetPolicy(max_eval_fraction=0.1)
    q.load_state_dict(json.loads(json.dumps(p.state_dict())))
    assert q.expected_seconds(32) == pytest.approx(cost(32)) and q.state_dict() == p.state_dict()


def test_with_a_fixed_cost_and_alternating_sizes_the_budget_stays_a_cap():
    """The fitted fixed cost never lets evaluations run past the budget once both sizes have been seen (the
    first small one, with nothing to fit yet, runs over: 11.4% of the time against 10%)."""
    cost = lambda n: 5.0 + 0.05 * n  # noqa: E731
    p = BudgetPolicy(max_eval_fraction=0.1)
    eval_seconds, worst = 0.0, 0.0
    for step in range(2000):
        size = 384 if step % 200 == 0 else 32
        c = ctx(step, step * 10.0 + eval_seconds, eval_seconds)
        d = p.propose(Decision(True, size, "trigger:steps"), c)
        if d.evaluate:
            eval_seconds += cost(d.sample_size)
            elapsed = step * 10.0 + eval_seconds
            if step > 200:
                worst = max(worst, eval_seconds / elapsed)
            p.on_eval(result(step, 0.5, n=d.sample_size, seconds=cost(d.sample_size)),
                      ctx(step, elapsed, eval_seconds))
    assert worst <= 0.1 + 1e-9, worst


def test_costs_in_proportion_to_the_size_keep_the_plain_proportion():
    p = BudgetPolicy(max_eval_fraction=0.1)
    for step, n in enumerate((32, 384, 32, 100)):
        p.on_eval(result(step, 0.5, n=n, seconds=0.05 * n), ctx(step))
        assert p.state_dict()["fixed_seconds"] == 0.0 and p.state_dict()["seconds_per_sample"] == 0.05 * n / n


def test_an_alarms_widening_of_a_suite_already_whole_says_it_is_capped():
    """The reason said "x12 after an alarm" for a suite evaluated whole (40 x 5 stayed 40 x 5)."""
    p = SampleSizePolicy(initial=32, min=16, max=512, alarm_factor=12.0,
                         suites={"math": {"size": 40, "samples_per_item": 5},
                                 "big": {"size": 5000, "samples_per_item": 1}})
    d = p.propose(Decision(True, 32, "alarm:train/reward:cusum:down"), ctx(10))
    plans = {name: (items, m, why) for name, items, m, why in d.suites}
    assert plans["math"] == (40, 5, "initial; x12 after an alarm (capped at the whole suite, 40 items)")
    assert plans["big"] == (384, 1, "initial; x12 after an alarm")


@pytest.mark.parametrize("acc,widened", [(0.0, 85), (0.02, 194), (0.4, 512), (1.0, 85)])
def test_an_alarm_widens_a_proportion_for_a_tighter_half_width_not_a_multiple_of_the_minimum(acc, widened):
    """After a collapse to 0.0 an alarm's evaluation was 12 x the 48-item minimum (576, capped at 512) though
    85 items give +-0.022 there, the half-width that 12 x the items gives at 0.5; mid-range it is unchanged."""
    p = SampleSizePolicy(initial=50, min=48, max=512, target_half_width=0.075, alarm_factor=12.0)
    p.on_eval(result(10, acc, n=100), ctx(10))
    assert p.propose(Decision(True, None, "alarm:train/reward:cusum:up"), ctx(20)).sample_size == widened
    assert p.propose(Decision(True, None, "trigger:steps"), ctx(30)).sample_size == p.base
    resumed = SampleSizePolicy(initial=50, min=48, max=512, target_half_width=0.075, alarm_factor=12.0)
    resumed.load_state_dict(json.loads(json.dumps(p.state_dict())))
    assert resumed.propose(Decision(True, None, "alarm:x"), ctx(40)).sample_size == widened


def test_an_alarm_still_multiplies_the_items_of_a_mean():
    p = SampleSizePolicy(initial=50, min=10, max=5000, target_half_width=0.1, alarm_factor=4.0)
    p.on_eval(EvalResult(step=1, sample_size=100, reason="trigger:steps", seconds=1.0,
                         metrics={"loss": summarize([0.5, 1.5] * 50)}), ctx(1))
    assert p.propose(Decision(True, None, "alarm:train/loss:cusum:up"), ctx(2)).sample_size == 4 * p.base


def _suite_result(step, x, suite="math", size=500):
    """An evaluation of ``suite`` whose answers are ``x`` (items x samples of 0/1)."""
    from adaptive_eval.stats import summarize_outputs

    metrics = summarize_outputs({f"{suite}/acc": x}, None, suites={suite: list(range(len(x)))},
                                populations={suite: size})
    return EvalResult(step=step, sample_size=len(x), reason="trigger:steps", seconds=1.0, metrics=metrics)


@pytest.mark.parametrize("p, most_items", [(0.0, 85), (0.02, 300), (0.4, 2000)])
def test_an_alarms_evaluation_of_a_suite_is_sized_for_its_precision_not_as_factor_times_its_items(p, most_items):
    """After a collapse to 0.0 an alarm evaluated 12 x the items of the suite (the whole suite, to measure a
    zero); it now takes what the alarm's half-width needs at the last variances, as a single proportion does."""
    rng = np.random.default_rng(0)
    suites = {"math": {"size": 2000, "samples_per_item": 4, "max_samples_per_item": 4, "cost": 1.0,
                       "item_cost": 0.0}}
    pol = SampleSizePolicy(initial=48, min=48, max=512, alarm_factor=12.0, target_half_width=0.075, suites=suites)
    x = (rng.random((200, 4)) < p).astype(float)
    pol.on_eval(_suite_result(5, x, size=2000), ctx(5))
    normal = {n: (i, m) for n, i, m, _ in pol.propose(Decision(True, 48, "trigger:steps"), ctx(10)).suites}
    alarm = {n: (i, m, why) for n, i, m, why in
             pol.propose(Decision(True, 48, "alarm:train/reward:cusum:down"), ctx(10)).suites}
    items, m, why = alarm["math"]
    assert items <= most_items and items >= normal["math"][0], (items, why)
    if p < 0.1:
        assert items < 12 * normal["math"][0] and "fewer than x12" in why
    else:  # near 0.5 the alarm's half-width takes the 12 x the items (capped at the whole suite), as before
        assert items == min(12 * normal["math"][0], 2000) and "x12 after an alarm" in why
    # The alarm plan survives a resume from plain values (JSON).
    again = SampleSizePolicy(initial=48, min=48, max=512, alarm_factor=12.0, target_half_width=0.075, suites=suites)
    again.load_state_dict(json.loads(json.dumps(pol.state_dict())))
    assert again.propose(Decision(True, 48, "alarm:x:cusum:up"), ctx(10)).suites == \
        pol.propose(Decision(True, 48, "alarm:x:cusum:up"), ctx(10)).suites


def test_an_eval_set_smaller_than_confirm_size_sets_the_best_when_evaluated_whole():
    """A 300-item eval set never reached confirm_size 500: every evaluation was a mere candidate and the
    best stayed None for the whole run."""
    p = PeakPolicy(improving_factor=1.0, confirm_size=500, confirm_steps=0)
    p.on_eval(result(10, 0.7, n=300), ctx(10))  # (result() asks for its n; the set gave all it had:)
    assert p.best_value is None
    whole = EvalResult(step=20, sample_size=500, reason="peak:x", seconds=1.0,
                       metrics={"acc": summarize([1] * 210 + [0] * 90)})  # 500 asked, 300 evaluated
    p.on_eval(whole, ctx(20))
    assert p.best_value == pytest.approx(0.7) and not p.pending


def test_with_suites_a_candidate_best_is_re_measured_once_not_at_every_step():
    """Found by a new user: with eval suites and policy.peak.confirm_steps 5, a rising 200-step run made 187
    evaluations, 185 of them peak:confirm: the re-measure's reason carries its suites' plans ("peak:confirm
    [math: every]"), so it never counted as the re-measure, and a 300-problem suite measured whole never
    reached confirm_size 500."""
    from adaptive_eval import AdaptiveEvaluator, load_config
    from conftest import FakeClock

    cfg = load_config(overrides=["trigger.freq_steps=10", "policy.peak.confirm_steps=5", "evaluation.metric=math/acc",
                                 "evaluation.suites={math: {size: 300, samples_per_item: 4}}"])
    clock = FakeClock()
    ev = AdaptiveEvaluator.from_config(cfg, total_steps=200, clock=clock)
    for step in range(200):
        clock.advance(8.0)
        ev.observe({"train/reward": float(np.random.default_rng(step).normal())}, step)

        def evaluate_fn(request, p=0.4 + 0.4 * step / 200):
            clock.advance(1.0)
            s = request.suites["math"]
            return {"math/acc": [(np.random.default_rng([step, i]).random(s.samples_per_item) < p).astype(float)
                                 for i in s.indices]}

        ev.evaluate(evaluate_fn, 0, step, step)
    confirms = [r for r in ev.history if r.reason.startswith("peak:confirm")]
    assert 0 < len(confirms) <= len(ev.history) // 2 < 10
    assert all(r.items == 300 for r in confirms)  # each the whole suite, which then sets the best
    assert ev.policies.by_name["peak"].best_value is not None


def test_a_suites_plan_keeps_the_answers_its_pass_at_k_needs_or_says_it_drops_it(caplog):
    """Found in review: with pass_at_k [1, 8] and 8 answers per item, the two-stage plan found one answer per
    item cheaper, and the run's later evaluations had no math500/acc/pass@8 at all, without a word.  Now the
    evaluator says so (once), and a suite's min_samples_per_item keeps at least that many answers per item,
    through the AdaptiveEvaluator, on every evaluation."""
    from adaptive_eval import AdaptiveEvaluator, load_config
    from conftest import FakeClock

    def run(*extra):
        cfg = load_config(overrides=["evaluation.pass_at_k=[1,8]", "evaluation.suites.math500.size=500",
                                     "evaluation.suites.math500.samples_per_item=8", "trigger.freq_steps=10",
                                     *extra])
        clock = FakeClock()  # (an evaluation costs no time: the budget never defers one)
        ev = AdaptiveEvaluator.from_config(cfg, total_steps=60, clock=clock)
        rng = np.random.default_rng(0)
        p = rng.beta(2.0, 0.6, 500)
        answers_per_item, results = [], []

        def evaluate_fn(request):
            s = request.suites["math500"]
            answers_per_item.append(s.samples_per_item)
            idx = np.asarray(s.indices)
            return {"math500/acc": (rng.random((len(idx), s.samples_per_item)) < p[idx, None]).astype(float)}

        for step in range(60):
            clock.advance(10.0)
            ev.observe({"train/loss": 1.0}, step)
            r = ev.evaluate(evaluate_fn, 0, step, step)
            if r is not None:
                results.append(r)
        ev.close()
        return answers_per_item, results

    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        answers, results = run()
    assert min(answers) == 1 and not all("math500/acc/pass@8" in r.metrics for r in results)
    assert caplog.text.count("pass@8 is not reported") == 1
    assert "evaluation.suites.math500.min_samples_per_item: 8" in caplog.text
    answers, results = run("evaluation.suites.math500.min_samples_per_item=8")
    assert len(results) >= 3 and min(answers) >= 8, answers
    assert all("math500/acc/pass@8" in r.metrics for r in results)
    plan = SampleSizePolicy(suites={"aime": {"size": 30, "samples_per_item": 1, "min_samples_per_item": 4}})
    assert plan.propose(Decision(True, 32, "trigger:steps"), ctx(1)).suites[0][2] == 4


# ------------------------------------------- tighten per stream (an outside reviewer's gradual collapses, session 29)


def _alarm(stream, step):
    from adaptive_eval.detectors import Alarm

    return Alarm(step=step, detector="cusum", stream=stream, direction="up", location=step, message="")


def test_each_stream_that_alarms_between_evaluations_tightens_the_interval_once_more():
    ctx = Context(step=0, elapsed=0.0, eval_seconds=0.0)
    p = IntervalPolicy(min_factor=0.1, max_factor=4.0, tighten=0.5, tighten_per_stream=True)
    for stream in ("kl", "kl", "response_length", "loss", "loss"):
        p.on_alarm(_alarm(stream, 1), ctx)
    assert p.factor == 0.125  # (three streams; a stream alarming again adds nothing)
    saved = json.loads(json.dumps(p.state_dict()))
    q = IntervalPolicy(min_factor=0.1, max_factor=4.0, tighten=0.5, tighten_per_stream=True)
    q.load_state_dict(saved)
    q.on_alarm(_alarm("loss", 2), ctx)
    q.on_alarm(_alarm("reward", 2), ctx)
    assert q.factor == 0.1  # (resumed: loss had alarmed already, reward had not; clamped at min_factor)
    with pytest.raises(TypeError, match="streams: a list"):
        q.load_state_dict({**saved, "streams": "kl"})
    q.on_eval(EvalResult(step=3, sample_size=10, reason="alarm:kl", seconds=0.0, metrics={}), ctx)
    q.on_alarm(_alarm("kl", 4), ctx)
    assert q.state_dict()["streams"] == ["kl"]  # (an evaluation starts the count again)
    once = IntervalPolicy(min_factor=0.1, max_factor=4.0, tighten=0.5)
    for stream in ("kl", "response_length", "loss"):
        once.on_alarm(_alarm(stream, 1), ctx)
    assert once.factor == 0.5


def test_a_gradual_collapse_whose_streams_alarm_one_after_another_is_looked_at_again_sooner():
    """kl moves 2 steps into a collapse whose accuracy falls slowly, then length, loss and reward, each inside the
    alarm cooldown: the next look came 28 steps after the alarm's, when the fall was long seen (an outside
    reviewer's traces: 0 of 9 such collapses confirmed within 25 steps)."""
    from adaptive_eval.replay import replay
    from adaptive_eval.trace import Trace, TraceRecord

    rng = np.random.default_rng(0)
    onset, records = 600, []
    for s in range(1000):
        acc = 0.7 if s < onset else max(0.2, 0.7 - 0.5 * min(1.0, (s - onset) / 30) ** 2)
        records.append(TraceRecord(s, {
            "kl": 0.01 + 0.002 * rng.normal() + (0.03 if s >= onset + 2 else 0.0),
            "response_length": 1000 + 30 * rng.normal() + (400 if s >= onset + 11 else 0),
            "loss": 0.5 + 0.02 * rng.normal() + (0.2 if s >= onset + 15 else 0),
            "reward": 0.6 + 0.05 * rng.normal() - (0.25 if s >= onset + 21 else 0), "eval/accuracy": acc}))
    looks = {}
    for flag in (True, False):
        cfg = load_config("default", [f"policy.interval.tighten_per_stream={str(flag).lower()}"])
        evals = [e for e in replay(Trace(records, "gradual"), cfg, seed=0).evals if e["step"] >= onset]
        assert evals[0]["reason"].startswith("alarm:kl") and evals[0]["step"] <= onset + 5
        looks[flag] = evals[1]["step"] - onset
    assert looks[True] <= 20 < 25 < looks[False], looks


# --------------------------------------------- habituation of urgent alarms (an outside reviewer's traces, session 29)


def _acc(step, mean, n=500, reason="alarm:x"):
    return EvalResult(step=step, sample_size=n, reason=reason, seconds=0.0,
                      metrics={"acc": summarize([1.0] * round(mean * n) + [0.0] * (n - round(mean * n)))})


def test_an_urgent_alarm_whose_evaluation_showed_no_change_makes_its_stream_wait_for_another():
    from adaptive_eval.detectors import Alarm

    nan = lambda stream, s: Alarm(step=s, detector="nonfinite", stream=stream, direction=None, location=s,  # noqa
                                  message="")
    c = lambda s: Context(step=s, elapsed=0.0, eval_seconds=0.0, streams=3)  # noqa: E731
    p = AlarmPolicy(cooldown_steps=10, corroborate=2, corroborate_steps=5, abrupt_steps=2, habituate=True)
    p.on_eval(_acc(0, 0.8, reason="trigger:step"), c(0))
    assert p.admit(nan("grad_norm", 50), c(50))
    p.on_alarm(nan("grad_norm", 50), c(50))
    assert p.propose(Decision(False), c(50)).urgent
    p.on_eval(_acc(50, 0.79), c(50))  # the accuracy did not move: grad_norm's NaN alarms wait from now on
    assert p.state_dict()["habituated"] == [["grad_norm", "nonfinite"]]
    assert not p.admit(nan("grad_norm", 100), c(100)) and p.quiet(nan("grad_norm", 100)) and not p.pending
    saved = json.loads(json.dumps(p.state_dict()))
    q = AlarmPolicy(cooldown_steps=10, corroborate=2, corroborate_steps=5, abrupt_steps=2, habituate=True)
    q.load_state_dict(saved)
    assert q.admit(nan("train/loss", 102), c(102))  # another stream agrees (and is urgent itself)
    q.on_alarm(nan("train/loss", 102), c(102))
    assert q.propose(Decision(False), c(102)).urgent
    q.on_eval(_acc(102, 0.0), c(102))  # the run died: grad_norm's habituation is undone too
    assert q.state_dict()["habituated"] == []
    with pytest.raises(TypeError, match="habituated: a list"):
        q.load_state_dict({**saved, "habituated": "grad_norm"})
    # Every stream habituated, then the run dies: its streams' NaN alarms agree, and the evaluation is urgent at
    # once (the death was absorbed by the non-urgent cooldown after a change taken at 182; found in review)
    r = AlarmPolicy(cooldown_steps=33, corroborate=2, corroborate_steps=20, abrupt_steps=2, habituate=True)
    r.load_state_dict({**saved, "habituated": ["grad_norm", "train/loss"]})
    for stream in ("train/loss", "grad_norm"):
        cusum = Alarm(step=180, detector="cusum", stream=stream, direction="up", location=170, message="")
        if r.admit(cusum, c(182)):
            r.on_alarm(cusum, c(182))
    assert r.propose(Decision(False), c(182)).evaluate
    r.on_eval(_acc(182, 0.78), c(182))
    for stream in ("train/loss", "grad_norm"):
        if r.admit(nan(stream, 200), c(200)):
            r.on_alarm(nan(stream, 200), c(200))
    decision = r.propose(Decision(False), c(200))
    assert decision.evaluate and decision.urgent
    off = AlarmPolicy(cooldown_steps=10, corroborate=2, corroborate_steps=5, abrupt_steps=2)
    off.on_eval(_acc(0, 0.8, reason="trigger:step"), c(0))
    off.on_alarm(nan("grad_norm", 50), c(50))
    off.on_eval(_acc(50, 0.79), c(50))
    assert off.admit(nan("grad_norm", 100), c(100))


def test_bursts_of_nan_in_grad_norm_buy_one_evaluation_and_a_death_is_still_evaluated_at_once():
    """A loss scaler's skipped steps (bursts of NaN in grad_norm, the accuracy never moving) each bought a whole
    urgent evaluation (an outside reviewer's traces: 10 of 17 needless evaluations)."""
    from adaptive_eval.replay import replay
    from adaptive_eval.trace import Trace, TraceRecord

    rng = np.random.default_rng(1)
    bursts, death, records = (150, 300, 450, 600), 800, []
    for s in range(1000):
        dead = s >= death
        gn = math.nan if any(b <= s < b + 4 for b in bursts) or dead else 0.6 + 0.05 * rng.normal()
        records.append(TraceRecord(s, {"grad_norm": gn,
                                       "loss": math.nan if dead else 0.5 + 0.02 * rng.normal(),
                                       "reward": math.nan if dead else 0.6 + 0.05 * rng.normal(),
                                       "eval/accuracy": 0.0 if dead else 0.7}))
    # (asynchronous: the alarm policy learns at submission, so what the result showed reaches it when it comes back)
    for extra in ([], ["evaluation.asynchronous=true", "evaluation.async_integrate_after_steps=2"]):
        brought = {}
        for flag in (True, False):
            cfg = load_config("default", [f"policy.alarm.habituate={str(flag).lower()}", *extra])
            evals = replay(Trace(records, "bursts"), cfg, seed=0).evals
            brought[flag] = [e["step"] for e in evals
                             if e["reason"].startswith("alarm:grad_norm") and e["step"] < death]
            assert any(e["step"] == death and e["reason"].startswith("alarm:") for e in evals), evals
        assert brought == {True: [150], False: [150, 300, 450, 600]}, (extra, brought)


def test_an_initial_size_outside_min_and_max_is_said_with_the_size_the_first_evaluation_asks_for(caplog):
    """A probe: policy.sample_size.initial 1000 (max 512) was printed by `adaptive-eval config` and clamped to 512
    without a word."""
    import logging

    from adaptive_eval.policies import SampleSizePolicy

    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        assert SampleSizePolicy(initial=1000, min=48, max=512).base == 512
        assert SampleSizePolicy(initial=8, min=48, max=512).base == 48
        SampleSizePolicy(initial=50, min=48, max=512)
    assert [r.getMessage() for r in caplog.records] == [
        "policy.sample_size.initial 1000 is outside [policy.sample_size.min 48, policy.sample_size.max 512]: the first "
        "evaluation asks for 512 (said once)",
        "policy.sample_size.initial 8 is outside [policy.sample_size.min 48, policy.sample_size.max 512]: the first "
        "evaluation asks for 48 (said once)"]


def test_the_peak_policy_never_cuts_a_whole_set_evaluation_down_to_its_confirm_size():
    """A probe: with the sample-size policy off and evaluation.sample_size null (the whole set), every evaluation
    after the first of an improving metric was cut to confirm_size, 500 of 20,000 items, its reason unchanged."""
    from adaptive_eval import AdaptiveEvaluator

    ev = AdaptiveEvaluator.from_config(load_config(overrides=["policy.sample_size.enabled=false",
                                                              "evaluation.sample_size=null",
                                                              "policy.budget.enabled=false"]), total_steps=200)
    sizes = []

    def evaluate_fn(request):
        idx = request.indices(20_000)
        sizes.append(len(idx))
        p = min(0.2 + request.step / 300, 0.9)  # still improving
        return {"acc": [1.0 if (i * 37 % 100) / 100 < p else 0.0 for i in idx]}

    for g in range(200):
        ev.observe({"train/loss": 1.0}, g)
        ev.evaluate(evaluate_fn, 0, g, g)
    assert len(sizes) > 3 and set(sizes) == {20_000}, sizes

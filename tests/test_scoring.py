"""Honest scoring: a change counts as detected only when an evaluation's interval shows it."""

import math

import pytest

from adaptive_eval import load_config
from adaptive_eval.replay import replay
from adaptive_eval.scoring import confirmed_delay, confirmed_delays, detection_delay
from adaptive_eval.synthetic import make_trace


def ev(step, mean, low, high, n=32):
    return {"step": step, "sample_size": n, "metrics": {"acc": mean}, "ci": {"acc": [low, high]}}


EVALS = [ev(0, 0.80, 0.70, 0.90), ev(8, 0.78, 0.68, 0.88), ev(12, 0.70, 0.50, 0.90), ev(15, 0.60, 0.55, 0.65),
         ev(30, 0.95, 0.90, 0.99)]


@pytest.mark.parametrize(("event", "kw", "expected"), [
    (10, {}, 5),                                   # pre-level 0.78 (step 8); step 12 too wide, step 15 shows it
    (10, {"direction": "down"}, 5),
    (10, {"direction": "up"}, 20),                 # only the rise at step 30 is above 0.78
    (10, {"pre_level": 0.6}, 20),                  # step 15 holds 0.6: no change from it; step 30 is above
    (8, {}, 7),                                    # the eval at the event step counts; pre-level from step 0
    (31, {}, None),                                # nothing after the event
    (0, {}, None),                                 # nothing measured before: nothing to compare with
    (0, {"pre_level": 0.3}, 0),
])
def test_confirmed_delay_table(event, kw, expected):
    assert confirmed_delay(EVALS, event, "acc", **kw) == expected


def test_small_eval_does_not_count_where_the_plain_delay_does():
    # detection_delay counts the 32-item eval at step 12 that cannot see the change; confirmed_delay does not.
    assert detection_delay(EVALS, 10) == 2
    assert confirmed_delay(EVALS, 10, "acc") == 5


def test_order_missing_and_nonfinite_intervals():
    shuffled = list(reversed(EVALS))
    assert confirmed_delay(shuffled, 10, "acc") == 5
    broken = [ev(0, 0.8, 0.7, 0.9), {"step": 11, "metrics": {"acc": 0.1}},             # no interval
              ev(12, 0.1, math.nan, 0.2), ev(13, float("nan"), 0.0, 0.2), {"step": 14, "metrics": {}}]
    assert confirmed_delay(broken, 10, "acc") == 3    # step 13's interval is finite: it counts
    assert confirmed_delay(broken, 10, "other") is None
    with pytest.raises(ValueError, match="direction"):
        confirmed_delay(EVALS, 10, "acc", direction="sideways")


def test_confirmed_delays_takes_steps_or_events():
    st = make_trace("collapse", steps=300, seed=1)
    assert confirmed_delays(EVALS, [10, 31], "acc") == [5, None]
    assert len(confirmed_delays(EVALS, st.events, "acc")) == 1


def test_a_replayed_collapse_is_confirmed_and_a_tiny_eval_is_not():
    st = make_trace("collapse", steps=400, seed=3)
    (event,) = st.events
    cfg = load_config("areal", ["trigger.freq_steps=10", "logging.tensorboard_dir=null"])
    big = replay(st.trace, cfg, seed=0).evals
    d = confirmed_delay(big, event.step, "accuracy", direction="down")
    assert d is not None and d <= 15
    # Two items an eval: every interval is too wide to exclude the pre-collapse level.
    tiny = replay(st.trace, load_config("areal", ["trigger.freq_steps=10", "evaluation.sample_size=2",
                                                  "logging.tensorboard_dir=null"]), seed=0).evals
    assert confirmed_delay(tiny, event.step, "accuracy", pre_level=float(st.truth[event.step - 1])) is None

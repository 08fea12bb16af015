import math

import numpy as np
import pytest

from adaptive_eval.synthetic import KINDS, Event, make_trace, suite
from adaptive_eval.trace import read_trace, write_trace

STREAMS = ["train/reward", "train/loss", "train/response_length"]


def col(st, name):
    return st.trace.column(name)[1]


@pytest.mark.parametrize("kind", KINDS)
def test_deterministic_and_well_formed(kind):
    a, b = make_trace(kind, steps=300, seed=7), make_trace(kind, steps=300, seed=7)
    assert a.events == b.events and a.params == b.params and a.distractors == b.distractors
    for name in [*STREAMS, "eval/accuracy"]:
        np.testing.assert_array_equal(col(a, name), col(b, name))
    assert not np.array_equal(col(a, "train/reward"), col(make_trace(kind, steps=300, seed=8), "train/reward"))

    trace = a.trace
    assert len(trace) == 300 and trace.steps().tolist() == list(range(300))
    assert trace.stream_names() == STREAMS and trace.eval_names() == ["eval/accuracy"]
    np.testing.assert_array_equal(col(a, "eval/accuracy"), a.truth)
    assert a.truth.shape == (300,) and np.all((0 <= a.truth) & (a.truth <= 1))
    reward, loss, length = (col(a, n) for n in STREAMS)
    finite = np.isfinite(reward)
    assert np.all((0 <= reward[finite]) & (reward[finite] <= 1))
    assert np.all(loss[np.isfinite(loss)] > 0)
    assert np.all((length > 10) & (length <= 1024))
    times = np.array([r.time for r in trace])
    assert times[0] > 0 and np.all(np.diff(times) > 0)
    assert all(r.epoch is None for r in trace)
    for e in a.events:
        assert isinstance(e, Event) and 0.3 * 300 - 1 <= e.step <= 0.7 * 300 + 1 + 0.15 * 300 + 30


def test_rise_plateau_and_flat_have_no_events():
    rise = make_trace("rise_plateau", seed=1)
    assert rise.events == [] and rise.distractors == []
    assert rise.truth[-100:].mean() > rise.truth[:20].mean() + 0.15
    assert col(rise, "train/loss")[-100:].mean() < col(rise, "train/loss")[:20].mean()
    flat = make_trace("flat", seed=1)
    assert flat.events == [] and np.ptp(flat.truth) < 0.1


def test_collapse_is_sudden_and_visible_on_cheap_streams():
    st = make_trace("collapse", seed=2)
    (event,) = st.events
    assert event.kind == "collapse" and event.stream == "train/reward"
    s = event.step
    assert st.truth[s - 1] - st.truth[s + 10] > 0.2  # fully down within 10 steps
    reward, length = col(st, "train/reward"), col(st, "train/response_length")
    assert reward[s - 50:s].mean() - reward[s + 10:s + 60].mean() > 0.2
    assert length[s + 10:s + 60].mean() > 900


def test_collapse_recovery_recovers():
    st = make_trace("collapse_recovery", seed=3)
    down, up = st.events
    assert (down.kind, up.kind) == ("collapse", "recovery") and down.step < up.step
    assert st.truth[up.step] < 0.05 < st.truth[-1] - 0.1


def test_silent_degradation_reward_rises_while_accuracy_falls():
    st = make_trace("silent_degradation", seed=4, onset=500, degrade_steps=200, drop=0.2)
    (event,) = st.events
    assert (event.step, event.kind, event.stream) == (500, "degradation", "eval/accuracy")
    assert st.truth[500] - st.truth[700] > 0.1
    reward = col(st, "train/reward")
    assert reward[650:750].mean() > reward[400:500].mean()
    assert int(np.argmax(st.truth)) in range(480, 521)  # the best checkpoint is at the onset


def test_spikes_are_one_step_distractors():
    st = make_trace("spikes", seed=5)
    assert st.events == [] and len(st.distractors) >= 3
    loss = col(st, "train/loss")
    for d in st.distractors:
        assert d.kind == "spike" and d.stream == "train/loss"
        s = d.step
        around = np.median(np.r_[loss[s - 5:s], loss[s + 1:s + 6]])
        assert loss[s] > 1.4 * around
        assert loss[s - 1] < 1.2 * around and loss[s + 1] < 1.2 * around


def test_nan_from_the_onset_on():
    st = make_trace("nan", seed=6, onset=321)
    assert st.events == [Event(321, "nan", "train/loss")]
    for name in ("train/loss", "train/reward"):
        v = col(st, name)
        assert np.all(np.isfinite(v[:321])) and np.all(np.isnan(v[321:]))
    assert np.all(st.truth[321:] == 0.0)
    assert math.isnan(st.trace.records[321].metrics["train/loss"])


def test_params_override_without_shifting_other_draws():
    base = make_trace("collapse", seed=9)
    moved = make_trace("collapse", seed=9, onset=123, steps_per_epoch=100)
    assert moved.events[0].step == 123 and moved.params["onset"] == 123
    assert {k: v for k, v in moved.params.items() if k not in ("onset", "steps_per_epoch")} == \
           {k: v for k, v in base.params.items() if k not in ("onset", "steps_per_epoch")}
    assert [r.epoch for r in moved.trace][99:101] == [0, 1]
    with pytest.raises(TypeError, match="unknown parameter.*'onste'"):
        make_trace("collapse", onste=3)
    with pytest.raises(ValueError, match="unknown kind"):
        make_trace("explode")
    with pytest.raises(ValueError, match="onset"):
        make_trace("nan", steps=100, onset=100)


def test_suite_covers_every_kind_and_varies_with_seed():
    s0 = suite(0, steps=300)
    assert [st.kind for st in s0] == [k for k in KINDS for _ in range(2)]
    assert len({st.name for st in s0}) == len(s0)
    again = suite(0, steps=300)
    assert [st.events for st in again] == [st.events for st in s0]
    s1 = suite(1, steps=300)
    onsets0 = [e.step for st in s0 for e in st.events]
    onsets1 = [e.step for st in s1 for e in st.events]
    assert onsets0 != onsets1 and len(set(onsets0)) > 3


def test_synthetic_trace_survives_a_file_round_trip(tmp_path):
    st = make_trace("nan", steps=200, seed=0)
    write_trace(st.trace, tmp_path / "t.csv")
    back = read_trace(tmp_path / "t.csv")
    assert len(back) == 200
    for a, b in zip(st.trace, back):
        assert a.step == b.step and a.time == b.time
        assert all(a.metrics[k] == b.metrics[k] or (math.isnan(a.metrics[k]) and math.isnan(b.metrics[k]))
                   for k in a.metrics)

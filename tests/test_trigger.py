import random
import time

import pytest

from adaptive_eval import EpochStepTimeFreqCtl
from conftest import FakeClock


class ArealReference:
    """AReaL's schedule as its code behaves: three independent counters, any of which fires."""

    def __init__(self, freq_epoch=None, freq_step=None, freq_sec=None, clock=None, initial_epoch_value=False):
        self.f = (freq_epoch, freq_step, freq_sec)
        self.epochs = self.epochs_last = 0
        self.steps = self.steps_last = 0
        self.clock = clock
        self.last_time = clock() if clock else 0.0
        self.initial = initial_epoch_value

    def check(self, epochs, steps):
        fe, fs, ft = self.f
        self.epochs += epochs
        self.steps += steps
        x = y = z = False
        if self.initial:
            self.initial = False
            self.epochs_last = self.epochs
            x = True
        elif fe is not None and self.epochs - self.epochs_last >= fe:
            self.epochs_last = self.epochs
            x = True
        if fs is not None and self.steps - self.steps_last >= fs:
            self.steps_last = self.steps
            y = True
        if ft is not None and self.clock() - self.last_time >= ft:
            self.last_time = self.clock()
            z = True
        return x or y or z


def schedule(ctl, n, steps_per_epoch, clock=None, dt=1.0):
    fired = []
    for g in range(n):
        if clock is not None:
            clock.advance(dt)
        if ctl.check(epochs=int(g % steps_per_epoch == steps_per_epoch - 1), steps=1):
            fired.append(g)
    return fired


@pytest.mark.parametrize("freq_epoch,freq_step,spe,initial", [
    (1, None, 4, False), (2, None, 3, False), (3, None, 7, True), (None, 1, 5, False),
    (None, 3, 4, False), (None, 17, 10, False), (1, None, 1, False), (None, 5, 10, True), (None, 1, 3, True),
    (None, 0, 4, False), (0, None, 4, True),
])
def test_single_trigger_is_exactly_areal(freq_epoch, freq_step, spe, initial):
    ours = EpochStepTimeFreqCtl(freq_epoch=freq_epoch, freq_step=freq_step, initial_epoch_value=initial)
    ref = ArealReference(freq_epoch=freq_epoch, freq_step=freq_step, initial_epoch_value=initial)
    assert schedule(ours, 200, spe) == schedule(ref, 200, spe)

def test_single_time_trigger_is_exactly_areal():
    c1, c2 = FakeClock(), FakeClock()
    ours = EpochStepTimeFreqCtl(freq_sec=10, clock=c1)
    ref = ArealReference(freq_sec=10, clock=c2)
    rng = random.Random(0)
    fired_ours, fired_ref = [], []
    for g in range(300):
        dt = rng.uniform(0.5, 4.0)
        c1.advance(dt)
        c2.advance(dt)
        if ours.check(0, 1):
            fired_ours.append(g)
        if ref.check(0, 1):
            fired_ref.append(g)
    assert fired_ours == fired_ref and len(fired_ours) > 20


def test_several_triggers_restart_together():
    # AReaL's independent counters fire back to back: 2, 3, 5, 7, 8, ...
    ref = ArealReference(freq_epoch=1, freq_step=3)
    assert schedule(ref, 12, 4)[:5] == [2, 3, 5, 7, 8]
    ours = EpochStepTimeFreqCtl(freq_epoch=1, freq_step=3)
    assert schedule(ours, 12, 4) == [2, 5, 8, 11]


def test_several_triggers_epoch_fires_when_it_is_the_stalest():
    # freq_steps=10 with 4-step epochs: the epoch trigger wins at every epoch end.
    ours = EpochStepTimeFreqCtl(freq_epoch=1, freq_step=10)
    fired = []
    for g in range(12):
        if ours.poll(int(g % 4 == 3), 1):
            fired.append((g, ours.last_reason))
    assert fired == [(3, "trigger:epochs"), (7, "trigger:epochs"), (11, "trigger:epochs")]


def test_step_and_time_triggers_share_one_staleness(clock):
    ctl = EpochStepTimeFreqCtl(freq_step=5, freq_sec=30, clock=clock)
    reasons = []
    for g in range(20):
        clock.advance(10 if g < 10 else 1)
        reasons.append(ctl.poll(0, 1))
    fired = [(g, r) for g, r in enumerate(reasons) if r]
    # time fires at g=2 (30 s), the counters restart, then again at 5 (30 s more), 8, then steps win.
    assert fired == [(2, "trigger:time"), (5, "trigger:time"), (8, "trigger:time"), (13, "trigger:steps"),
                     (18, "trigger:steps")]


def test_time_trigger_without_process_group_uses_monotonic_by_default():
    ctl = EpochStepTimeFreqCtl(freq_sec=0.05)
    assert ctl.clock is time.monotonic
    assert not ctl.check(0, 1)
    time.sleep(0.06)
    assert ctl.check(0, 1)
    assert ctl.last_reason == "trigger:time"


def test_state_dict_restores_counters_but_keeps_current_frequencies():
    a = EpochStepTimeFreqCtl(freq_step=10)
    for _ in range(7):
        a.check(0, 1)
    sd = a.state_dict()
    b = EpochStepTimeFreqCtl(freq_step=4)  # the new config asks for 4
    b.load_state_dict(sd)
    assert b.freq_step == 4
    # 7 steps already stale: the next check fires at once under the new frequency.
    assert b.check(0, 1)


def test_resume_continues_the_same_schedule(clock):
    full = EpochStepTimeFreqCtl(freq_epoch=2, freq_step=7, freq_sec=25, clock=clock)
    c2 = FakeClock()
    first = EpochStepTimeFreqCtl(freq_epoch=2, freq_step=7, freq_sec=25, clock=c2)
    out_full, out_resumed = [], []
    resumed = None
    for g in range(100):
        clock.advance(3)
        c2.advance(3)
        e = int(g % 5 == 4)
        out_full.append(full.poll(e, 1))
        if g < 40:
            out_resumed.append(first.poll(e, 1))
        else:
            if resumed is None:
                resumed = EpochStepTimeFreqCtl(freq_epoch=2, freq_step=7, freq_sec=25, clock=c2)
                resumed.load_state_dict(first.state_dict())
            out_resumed.append(resumed.poll(e, 1))
    assert out_full == out_resumed


def areal_state(steps_epoch, last_epoch, steps, last_steps, last_time, freq_sec=None):
    def ctl(fsteps, fsec, s, last, lt):
        return dict(frequence_seconds=fsec, frequency_steps=fsteps, start_time=0.0, steps=s, last_time=lt,
                    last_steps=last, interval_steps=None, interval_seconds=None, initial_value=False)
    return dict(epoch=ctl(1, None, steps_epoch, last_epoch, 0.0), step=ctl(5, None, steps, last_steps, 0.0),
                time=ctl(None, freq_sec, 0, 0, last_time))


def test_loads_arealS_saved_format_and_continues_its_schedule():
    # AReaL saved after 13 steps with its step counter last firing at 10 (freq 5): next fire at 15.
    ref = ArealReference(freq_step=5)
    for _ in range(13):
        ref.check(0, 1)
    ours = EpochStepTimeFreqCtl(freq_step=5)
    ours.load_state_dict(areal_state(0, 0, 13, 10, time.time()))
    assert [g for g in range(13, 30) if ours.check(0, 1)] == [g for g in range(13, 30) if ref.check(0, 1)] == [14, 19, 24, 29]


def test_loads_areal_time_state_counting_downtime():
    clock = FakeClock(1000.0)
    ours = EpochStepTimeFreqCtl(freq_sec=60, clock=clock)
    # AReaL's last firing was 50 wall-clock seconds ago: 10 more seconds to go.
    ours.load_state_dict(areal_state(0, 0, 0, 0, time.time() - 50, freq_sec=60))
    clock.advance(5)
    assert not ours.check(0, 1)
    clock.advance(6)
    assert ours.check(0, 1)


@pytest.mark.parametrize("kw", [dict(freq_step=-3), dict(freq_epoch=-1), dict(freq_sec=-1.0),
                                dict(freq_sec=float("nan")), dict(freq_step="10"), dict(freq_step=True)])
def test_bad_frequencies_raise_naming_the_key(kw):
    (key,) = kw
    with pytest.raises(ValueError, match=key):
        EpochStepTimeFreqCtl(**kw)


def test_no_trigger_never_fires():
    ctl = EpochStepTimeFreqCtl()
    assert not any(ctl.check(1, 1) for _ in range(50))


def test_random_single_step_configs_match_areal():
    rng = random.Random(1)
    for _ in range(50):
        f, spe = rng.randint(1, 30), rng.randint(1, 12)
        kind = rng.choice(["epoch", "step"])
        kw = {"freq_epoch": f} if kind == "epoch" else {"freq_step": f}
        assert schedule(EpochStepTimeFreqCtl(**kw), 150, spe) == schedule(ArealReference(**kw), 150, spe)


def test_reason_names_the_trigger():
    ctl = EpochStepTimeFreqCtl(freq_epoch=1, initial_epoch_value=True)
    reasons = [ctl.poll(int(g % 3 == 2), 1) for g in range(6)]
    assert reasons == ["trigger:initial", None, "trigger:epochs", None, None, "trigger:epochs"]


def test_step_trigger_shortcut_matches_the_float_bound_at_any_scale():
    """advance() tests a step trigger alone with one integer comparison (ceil of freq_step * scale); it must
    fire exactly where ``steps_since >= freq_step * scale`` does, for fractional and huge bounds, with the
    scale changing mid-run (as the interval policy changes it) and the initial firing pending."""
    rng = random.Random(3)
    for trial in range(300):
        freq = rng.choice([0, 1, 2, 3, 7, 10, 33, 2.5, 0.3, 10**15, 10**17 + 1])
        initial = rng.random() < 0.3
        ctl = EpochStepTimeFreqCtl(freq_step=freq, initial_epoch_value=initial)
        pending, since = initial, 0
        for step in range(120):
            if rng.random() < 0.1:  # what the interval policy sets: fractions of the base interval
                ctl.scale = rng.choice([1.0, 0.5, 4.4, 0.37, 1 / 3, 2.2 ** rng.randint(-3, 3)])
            since += 1
            step_due = since >= freq * ctl.scale
            expected = pending or step_due
            pending = False
            if step_due:  # (the initial firing restarts only the epoch counter, as in AReaL)
                since = 0
            assert ctl.check(0, 1) == expected, (trial, freq, ctl.scale, step)
        assert ctl.steps_since == since
        # a resumed trigger takes the shortcut from its loaded state
        other = EpochStepTimeFreqCtl(freq_step=freq, initial_epoch_value=initial)
        other.scale = ctl.scale
        other.load_state_dict(ctl.state_dict())
        assert [other.check(0, 1) for _ in range(40)] == [ctl.check(0, 1) for _ in range(40)]


def test_an_evaluation_longer_than_freq_secs_is_said_once(caplog):
    """A review: the time trigger's interval counts from the decision (as AReaL's), so 70 s evaluations under
    freq_secs=60 leave the next due at once, every step evaluated; said, once."""
    import logging

    from adaptive_eval import AdaptiveEvaluator, load_config

    now = [0.0]
    ev = AdaptiveEvaluator.from_config(load_config("areal", ["trigger.freq_steps=null", "trigger.freq_secs=60"]),
                                       total_steps=30, clock=lambda: now[0])

    def slow():
        now[0] += 70.0
        return {"acc": [1.0, 0.0]}

    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        for g in range(30):
            now[0] += 5.0
            ev.evaluate(slow, 0, g, g)
    said = [r.getMessage() for r in caplog.records if "at least trigger.freq_secs" in r.getMessage()]
    assert len(said) == 1 and "took 70 s, at least trigger.freq_secs (60 s)" in said[0]
    assert [r.step for r in ev.history][1:4] == [12, 13, 14]  # (due at once after each, as AReaL)

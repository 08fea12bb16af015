"""``AdaptiveEvaluator.observe``'s fast path decides exactly as the detectors' own ``update`` does.

``observe`` skips ``nonfinite`` on finite values outside a run of NaN/inf, checks a value's type and
finiteness once for all of a stream's detectors, and calls ``CUSUM._finite_path()`` (``update`` without
those checks).  Here every value goes, in order, through every configured detector's public ``update``
(the reference), and ``observe`` must give the same alarms (step, detector, stream, direction, location,
message) and the same detector states, on randomized streams with level shifts, NaN/inf runs, huge values,
ints beyond float range, numpy scalars and one-element arrays, and also after a resume cut anywhere,
inside a run of NaN/inf included.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import random

import numpy as np
import torch
import pytest
from omegaconf import OmegaConf

from adaptive_eval import AdaptiveEvaluator, load_config
from adaptive_eval.detectors import make_detector

WATCH = {
    # several detectors on finite values (they take the general path)
    "train/grad_norm": [{"type": "nonfinite"}, {"type": "cusum", "k": [0.5, 1.5], "arl0": 500},
                        {"type": "spike"}],
    "train/entropy": [{"type": "nonfinite", "repeat": True}],  # nonfinite alone
    "train/kl": [{"type": "cusum", "k": 1.0, "threshold": 5.0, "warmup": 10}],  # cusum without nonfinite
}
STREAMS = ("train/loss", "train/reward", "train/response_length", "train/grad_norm", "train/entropy",
           "train/kl", "train/ignored")


@functools.lru_cache(maxsize=None)
def _plain_config(preset: str) -> dict:
    cfg = OmegaConf.to_container(load_config(preset, ["streams.ignore=[train/ignored]"]), resolve=True)
    if preset == "default":
        cfg["streams"]["watch"] = WATCH
    return cfg


def _config(preset: str) -> dict:
    return copy.deepcopy(_plain_config(preset))


def _odd(rng: random.Random, x: float):
    """``x`` or one of the values the fast path must hand to the general one."""
    r = rng.random()
    if r < 0.03:
        return rng.choice([math.nan, math.inf, -math.inf])
    if r < 0.05:
        return rng.choice([1e300, -1e300, 10**400, -(10**400), 10**20])
    if r < 0.08:
        return int(round(x))
    if r < 0.11:
        return rng.choice([np.float64, np.float32])(x)
    if r < 0.12:
        return np.array([x])
    if r < 0.13:
        return np.int64(round(x))
    return x


def _trace(seed: int, steps: int = 900) -> list[dict]:
    rng = random.Random(seed)
    levels = {s: rng.uniform(-5.0, 5.0) for s in STREAMS}
    scales = {s: rng.choice([1e-3, 0.1, 1.0, 50.0]) for s in STREAMS}
    out = []
    for step in range(steps):
        if rng.random() < 0.01:  # a level shift somewhere: alarms to compare
            s = rng.choice(STREAMS)
            levels[s] += rng.choice([-1, 1]) * rng.uniform(3.0, 12.0) * scales[s]
        metrics = {}
        for s in rng.sample(STREAMS, rng.randint(3, len(STREAMS))):
            metrics[s] = _odd(rng, rng.gauss(levels[s], scales[s]))
        if step % 97 in range(5, 5 + rng.randint(0, 4)):  # a run of NaN on one stream
            metrics["train/loss"] = math.nan
        out.append(metrics)
    return out


class _Reference:
    """Every value through every configured detector's ``update``, in order."""

    def __init__(self, ev: AdaptiveEvaluator):
        self.ev = ev
        self.detectors: dict[str, list] = {}
        self.alarms: list[tuple] = []

    def observe(self, metrics: dict, step: int) -> None:
        for name, value in metrics.items():
            dets = self.detectors.get(name)
            if dets is None:
                specs = self.ev._specs_for(name)
                dets = self.detectors[name] = [make_detector(spec, stream=name) for spec in specs]
            for det in dets:
                alarm = det.update(value, step)
                if alarm is not None:
                    self.alarms.append(_key(alarm))

    def states(self) -> dict:
        return {k: [d.state_dict() for d in v] for k, v in self.detectors.items()}


def _key(alarm) -> tuple:
    return (alarm.step, alarm.detector, alarm.stream, alarm.direction, alarm.location, alarm.message)


def _alarms_of(ev: AdaptiveEvaluator) -> list:
    seen = []
    ev.add_listener(lambda e: seen.append((e["step"], e["detector"], e["stream"], e["direction"],
                                           e["location"], e["message"])) if e["kind"] == "alarm" else None)
    return seen


@pytest.mark.parametrize("preset", ["default", "aggressive", "areal"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_observe_gives_the_alarms_and_states_of_every_detectors_update(preset, seed):
    trace = _trace(seed)
    ev = AdaptiveEvaluator.from_config(_config(preset))
    got = _alarms_of(ev)
    ref = _Reference(ev)
    for step, metrics in enumerate(trace):
        ev.observe(metrics, step)
        ref.observe(metrics, step)
    assert got == ref.alarms
    assert json.dumps(ev.state_dict()["detectors"], sort_keys=True) == json.dumps(ref.states(), sort_keys=True)
    if preset != "areal":
        assert len(got) >= 5 and {a[1] for a in got} >= {"nonfinite", "cusum"}


@pytest.mark.parametrize("seed", [3, 4])
def test_a_resumed_observe_continues_exactly_even_inside_a_nan_run(seed):
    trace = _trace(seed, steps=600)
    whole = AdaptiveEvaluator.from_config(_config("default"))
    whole_alarms = _alarms_of(whole)
    for step, metrics in enumerate(trace):
        whole.observe(metrics, step)
    # Cut points: random ones and every step inside (and right after) a run of NaN on train/loss.
    nan_steps = [s for s, m in enumerate(trace) if isinstance(m.get("train/loss"), float)
                 and math.isnan(m["train/loss"])]
    rng = random.Random(seed)
    cuts = sorted(set(rng.sample(range(1, len(trace)), 3) + [s + d for s in nan_steps[:3] for d in (1, 2)]))
    for cut in cuts:
        first = AdaptiveEvaluator.from_config(_config("default"))
        first_alarms = _alarms_of(first)
        for step, metrics in enumerate(trace[:cut]):
            first.observe(metrics, step)
        second = AdaptiveEvaluator.from_config(_config("default"))
        second.load_state_dict(json.loads(json.dumps(first.state_dict())))
        second_alarms = _alarms_of(second)
        for step, metrics in enumerate(trace[cut:], cut):
            second.observe(metrics, step)
        assert first_alarms + second_alarms == whole_alarms, f"cut at step {cut}"
        assert second.state_dict()["detectors"] == whole.state_dict()["detectors"], f"cut at step {cut}"


@pytest.mark.parametrize("bad", [True, False, np.bool_(True), "1.0", None, np.array([1.0, 2.0]),
                                 torch.tensor(True), torch.tensor([False]), np.array([True])])
def test_a_ready_stream_still_rejects_what_is_not_one_number(bad):
    ev = AdaptiveEvaluator.from_config(_config("default"))
    for step in range(40):  # past the warm-up: the stream is on the fast path
        ev.observe({"train/loss": 1.0 + 0.01 * (step % 7)}, step)
    before = ev.state_dict()["detectors"]
    with pytest.raises(TypeError, match="train/loss"):
        ev.observe({"train/loss": bad}, 40)
    assert ev.state_dict()["detectors"] == before


def _plain_recursion(det):
    """The same detector, made to run the general per-chart loop instead of the unrolled one-chart path."""
    det._one_chart = det._two_charts = False
    return det


@pytest.mark.parametrize("spec", [
    {"k": 1.0, "threshold": 8.0, "adapt": 0.05, "warmup": 30},  # the presets'
    {"k": 0.0, "threshold": 4.0, "adapt": 0.2, "warmup": 5, "clip": 0.5},
    {"k": 0.5, "threshold": 3.0, "warmup": 10, "reference": 40},  # fixed reference, learning phase
    {"k": 2.0, "threshold": 1.0, "adapt": 0.5, "warmup": 3, "clip": None},
    # clip < k: the quiet band is the clip (and a clipped z never exceeds k: this chart cannot alarm)
    {"k": 2.0, "threshold": 3.0, "adapt": 0.1, "warmup": 5, "clip": 1.5},
])
@pytest.mark.parametrize("seed", [0, 1])
def test_the_unrolled_one_chart_cusum_is_the_plain_recursion(spec, seed):
    rng = random.Random(seed)
    fast = make_detector({"type": "cusum", **spec}, stream="s")
    plain = _plain_recursion(make_detector({"type": "cusum", **spec}, stream="s"))
    assert fast._one_chart and not plain._one_chart
    level, alarms = 0.0, 0
    for step in range(3000):
        r = rng.random()
        if r < 0.01:
            level += rng.choice([-1, 1]) * rng.uniform(0.5, 5.0)
        if step % 500 < 40:  # constant stretches: z exactly 0 (and exactly k, for k = 0)
            x = level
        elif r < 0.2:  # values on a coarse grid (a reward averaged over 8 samples)
            x = round(rng.gauss(level, 1.0) * 8) / 8
        else:
            x = rng.gauss(level, 1.0) if r < 0.95 else rng.choice([math.nan, 1e300, -1e300, 10.0 ** rng.randint(-300, 300)])
        a, b = fast.update(x, step), plain.update(x, step)
        assert (a is None) == (b is None) and (a is None or _key(a) == _key(b)), f"step {step}"
        alarms += a is not None
        assert fast.state_dict() == plain.state_dict(), f"step {step}"
    assert alarms >= 3 or spec.get("clip", 4.0) < spec["k"]

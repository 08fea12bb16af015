"""Recording a trace (``record_to``) never raises inside the user's training step."""

import logging
import os

import pytest
from conftest import FakeClock

from adaptive_eval import AdaptiveEvaluator, load_config
from adaptive_eval.trace import read_trace


def test_reserved_metric_names_are_recorded_renamed_not_raised(tmp_path, caplog):
    ev = AdaptiveEvaluator.from_config(load_config(overrides=["trigger.freq_steps=2"]))
    ev.record_to(tmp_path / "t.csv")
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        for g in range(4):
            ev.observe({"loss": 1.0, "epoch": 3, "step": g, "time": 0.5}, g)
            ev.evaluate(lambda: {"acc": 0.5}, 0, g, g)
    ev.close()
    trace = read_trace(tmp_path / "t.csv")
    assert [r.step for r in trace if "loss" in r.metrics] == [0, 1, 2, 3]
    assert trace.records[0].metrics["epoch_"] == 3.0 and trace.records[0].metrics["step_"] == 0.0
    assert "epoch" in ev._detectors  # the detectors watched it under its own name
    assert sum("recorded in the trace as 'epoch_'" in m for m in caplog.messages) == 1  # warned once
    assert ev.summary()["record_errors"] == 0


def test_a_value_refused_at_a_step_leaves_the_others_applied_and_recorded_alike(tmp_path):
    """A long-run probe: one value that is not a number (a bool) raised half-way through observe(): the values before
    it reached the detectors (a NaN's alarm), those after it nothing, and the trace nothing at all, so its replay
    could not find the alarm; the refused name had detectors of its own."""
    ev = AdaptiveEvaluator.from_config(load_config(overrides=["trigger.freq_steps=5"]))
    ev.record_to(tmp_path / "t.jsonl")
    for g in range(20):
        with pytest.raises(TypeError, match="metric 'flag': expected a number, got bool"):
            ev.observe({"train/loss": float("nan") if g == 12 else 1.0, "flag": g % 2 == 0, "train/z": 2.0}, g)
        ev.evaluate(lambda: {"acc": 0.5}, 0, g, g)
    ev.close()
    trace = read_trace(tmp_path / "t.jsonl")
    assert [r.step for r in trace if {"train/loss", "train/z"} <= set(r.metrics)] == list(range(20))
    assert "flag" not in ev._detectors and "train/z" in ev._detectors and ev.summary()["alarms"] >= 1
    ev = AdaptiveEvaluator.from_config(load_config())  # a refused name: its number failed the trace's row (a review)
    ev.record_to(tmp_path / "u.jsonl")
    with pytest.raises(TypeError, match="non-empty strings"):
        ev.observe({"train/loss": 1.0, "": 2.0}, 0)
    ev.close()
    assert [r.metrics for r in read_trace(tmp_path / "u.jsonl")] == [{"train/loss": 1.0}]
    assert ev.summary()["record_errors"] == 0


def test_metric_names_made_per_step_are_said_once(caplog):
    """A long-run probe: a name made per step ("loss_step_<g>") grew the state, the memory and every evaluation's
    cost (and a CSV trace by a rewrite per name) without a word."""
    ev = AdaptiveEvaluator.from_config(load_config(overrides=["trigger.freq_steps=5"]))
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        for g in range(1200):
            ev.observe({"train/loss": 1.0, f"loss_step_{g}": 1.0}, g)
    said = [m for m in caplog.messages if "metric names observed so far" in m]
    assert len(said) == 1 and "'loss_step_998'" in said[0] and "out of observe()" in said[0]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_a_full_disk_while_recording_is_logged_and_training_goes_on(tmp_path, caplog):

    (tmp_path / "t.jsonl").symlink_to("/dev/full")  # every write: ENOSPC, a full disk
    ev = AdaptiveEvaluator.from_config(load_config(overrides=["trigger.freq_steps=2"]), clock=FakeClock())
    ev.record_to(tmp_path / "t.jsonl")
    with caplog.at_level(logging.ERROR, logger="adaptive_eval"):
        for g in range(6):
            ev.observe({"loss": 1.0}, g)
            ev.evaluate(lambda: {"acc": 0.5}, 0, g, g)
    plain = AdaptiveEvaluator.from_config(load_config(overrides=["trigger.freq_steps=2"]), clock=FakeClock())
    for g in range(6):
        plain.observe({"loss": 1.0}, g)
        plain.evaluate(lambda: {"acc": 0.5}, 0, g, g)
    assert ev.summary()["evals"] == plain.summary()["evals"] >= 1 and ev.summary()["record_errors"] >= 6
    assert sum("recording the trace failed" in m for m in caplog.messages) == 1


def test_a_recorded_run_with_aggregations_maj_at_k_and_epochs_replays_under_its_own_config(tmp_path, caplog):
    """What record_to wrote did not replay under the config that recorded it (a new user's probe): its epoch column
    was always empty (a freq_epochs schedule: "needs an epoch column"); eval/reward/p90 was ground truth of its own,
    drawn as a proportion; a weighted_mean made every replayed evaluation fail (a trace holds no weights); and a
    suite's eval/math/ans/maj@1 read as item 1 of a metric "ans/maj" (replay refused the run)."""
    import numpy as np

    from adaptive_eval.replay import replay

    cfg = load_config(overrides=(overrides := [
        "trigger.freq_steps=null", "trigger.freq_epochs=1", "policy.interval.enabled=false",
        "policy.budget.enabled=false", "evaluation.precision=none", "evaluation.metric=math/acc",
        "evaluation.aggregations={math/reward: [weighted_mean, p90]}",
        "evaluation.suites={math: {size: 40, samples_per_item: 4, min_samples_per_item: 4}}"]))
    rng = np.random.default_rng(0)

    def fn(request):
        n = len(request.suites["math"].indices)
        return {"math/acc": rng.integers(0, 2, (n, 4)), "math/reward": rng.normal(0.5, 0.2, (n, 4)),
                "math/reward:weights": rng.integers(1, 5, n).astype(float),
                "math/ans:answers": rng.integers(0, 3, (n, 4)), "math/ans:reference": np.zeros(n, dtype=int)}

    ev = AdaptiveEvaluator.from_config(cfg, total_steps=100, steps_per_epoch=25, clock=FakeClock())
    ev.record_to(tmp_path / "run.csv")
    for g in range(100):
        ev.observe({"train/loss": 1.0 + 0.01 * (g % 7)}, g)
        ev.evaluate(fn, *divmod(g, 25), g)
    ev.close()
    live = [(r.step, r.reason.split(" ")[0]) for r in ev.history]
    assert live == [(24, "trigger:epochs"), (49, "trigger:epochs"), (74, "trigger:epochs"), (99, "trigger:final")]
    trace = read_trace(tmp_path / "run.csv")
    assert [r.epoch for r in trace.records[::25]] == [0, 1, 2, 3]
    assert {"eval/math/reward/p90", "eval/math/ans/maj@1"} <= {k for r in trace.records for k in r.metrics}
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        out = replay(trace, cfg)
    assert [(r.step, r.reason.split(" ")[0]) for r in out.results] == live
    assert out.summary["eval_errors"] == 0
    measured = out.results[0].metrics
    assert "math/reward/p90" in measured and not measured["math/reward/p90"].binary
    assert "math/reward/weighted_mean" not in measured and not any("maj" in m for m in measured)
    assert "weighted_mean aggregation of 'math/reward' is left out" in caplog.text
    # A run recorded before the epoch was written, then resumed after an upgrade: said so (an upgrade probe)
    from adaptive_eval.trace import Trace, TraceRecord

    mixed = Trace([TraceRecord(r.step, r.metrics, None if r.step < 30 else r.epoch, r.time) for r in trace.records],
                  source="mixed.csv")
    with pytest.raises(ValueError, match=r"needs an epoch at every step, and steps 0-29 have none"):
        replay(mixed, cfg)
    # Tracking the weighted mean itself cannot be replayed: said, not run blind (review)
    with pytest.raises(ValueError, match="evaluation.metric 'math/reward/weighted_mean' needs per-item weights"):
        replay(trace, load_config(overrides=[*overrides, "evaluation.metric=math/reward/weighted_mean"]))


def test_a_trace_rotated_with_record_to_writes_each_evaluation_once(tmp_path):
    """A probe: each record_to() added another listener, so the fifth file of a trace rotated five times held each
    evaluation's row five times, and the listeners grew without bound."""
    ev = AdaptiveEvaluator.from_config(load_config(overrides=["trigger.freq_steps=5", "policy.budget.enabled=false"]))
    for part in range(5):
        ev.record_to(tmp_path / f"part{part}.csv")
        for g in range(20 * part, 20 * part + 20):
            ev.observe({"train/loss": 1.0}, g)
            ev.evaluate(lambda request: {"acc": [1.0, 0.0] * 10}, 0, g, g)
    ev.close()
    rows = [line for line in (tmp_path / "part4.csv").read_text().splitlines()[1:] if line.split(",")[-1]]
    steps = [line.split(",")[0] for line in rows]
    assert steps and len(steps) == len(set(steps)), rows

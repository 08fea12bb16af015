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

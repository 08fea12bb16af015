"""A user's tests of a preset against recorded runs: does the preset still catch last quarter's collapse,
and does it stay quiet and cheap where nothing happened?

Here the recorded runs are the real traces shipped with adaptive_eval (``adaptive_eval.convert.real_traces()``):
a GRPO run whose reward collapses at step 56 under KL (accuracy 40.8% -> 0%), a GRPO run without KL that
collapses at step 224, and a 124M nanogpt speedrun with a one-step loss spike at step 946.  With your own
runs, point the marker at a folder of trace files, each with its events in ``<trace>.events.yaml`` beside it.

    ADAPTIVE_EVAL_PRESET=configs/mine.yaml python -m pytest -q examples/test_my_preset.py

The fixtures ``replay_run``/``replay_cache`` and the marker ``replay_traces`` come from the opt-in pytest
plugin: ``adaptive_eval_plugin = true`` under ``[tool.pytest.ini_options]`` (as this project's pyproject.toml
has), or ``pytest -p adaptive_eval.testing.plugin``.

The thresholds are what the default preset does on these traces with a margin (seed 0): a new preset
that confirms a collapse later, raises an alarm on the spike or spends more fails here, with a message
naming the trace, the event and the figures.
"""

import os

import pytest

from adaptive_eval.testing import assert_confirmed, assert_cost, assert_quiet, assert_same_decisions, replay_trace

PRESET = os.environ.get("ADAPTIVE_EVAL_PRESET", "default")  # the preset under test: a name or a YAML path


@pytest.mark.replay_traces("grpo_kl_collapse", config=PRESET)
def test_collapse_is_confirmed_within_80_steps_at_a_bounded_cost(replay_run):
    assert replay_run.events, "the shipped GRPO traces come with their collapse"
    for event in replay_run.events:  # confirmed: an eval interval wholly below the accuracy before it
        assert_confirmed(replay_run, event, within=80)
    assert_cost(replay_run, max_samples_per_1k=8000)


# A gate doing its job: the default preset retuned for issue 14 (base interval 25, longer relaxing) confirms
# grpo_no_kl's slow decline only 276 steps after its reward collapse (the earlier default: 32; the accuracy
# falls 0.442 -> 0.412 -> 0.37 over 100 steps, so only a whole-set evaluation at the right time sees it).
# Kept as a strict xfail so that the regression stays visible and a fix shows up as XPASS.
@pytest.mark.xfail(PRESET == "default", strict=True, reason="default preset: grpo_no_kl confirmed after 276 steps")
@pytest.mark.replay_traces("grpo_no_kl", config=PRESET)
def test_slow_decline_is_confirmed_within_80_steps_at_a_bounded_cost(replay_run):
    for event in replay_run.events:
        assert_confirmed(replay_run, event, within=80)
    assert_cost(replay_run, max_samples_per_1k=8000)


@pytest.mark.replay_traces("nanogpt_124m", config=PRESET)
def test_a_one_step_loss_spike_is_not_an_alarm(replay_run):
    # train loss jumps by 1.5 at step 946 and is back at 947: no alarm, and no evaluation brought forward.
    assert_quiet(replay_run, 940, 980, max_alarms=0, max_evals=1)
    # Its validation loss keeps falling, so each new best is re-measured on the whole set: 4,082 samples/1k (read as
    # higher-is-better, before the shipped trace's direction was applied, it cost under 1,000).
    assert_cost(replay_run, max_samples_per_1k=5000)


def test_replay_is_deterministic(replay_cache):
    # The session cache replayed this already for the first test; a fresh replay decides the same.
    assert_same_decisions(replay_cache.get("grpo_kl_collapse", PRESET), replay_trace("grpo_kl_collapse", PRESET))

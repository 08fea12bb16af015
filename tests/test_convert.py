import csv
import math

import numpy as np
import pytest

from adaptive_eval.convert import (
    convert_bigscience, convert_grpo, convert_lm_eval_long, convert_nanogpt, convert_sb3_evaluations,
    convert_sb3_monitor, convert_sb3_run, first_significant_drop, from_columns, load_real, real_traces,
    reward_change_point, spike_steps,
)
from adaptive_eval.synthetic import Event
from adaptive_eval.trace import TraceError, read_trace, write_trace

R = "rasbt__reasoning-from-scratch__"


def write(tmp_path, text, name="t.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


# ---------------------------------------------------------------------------------------------- from_columns


def test_from_columns_maps_streams_evals_epoch_time(tmp_path):
    path = write(tmp_path, "# a comment line\nit,ep,secs,reward_avg,eval_acc,junk\n"
                           "1,0,1500,0.5,41.6,7\n2,0,3000,0.25,,8\n3,1,4500,nan,15.6,\n")
    trace = from_columns(path, step="it", streams=["reward_avg"], evals={"eval_acc": 0.01}, epoch="ep",
                         time="secs", time_scale=0.001, rename={"reward_avg": "train/reward"})
    assert [(r.step, r.epoch, r.time) for r in trace] == [(1, 0, 1.5), (2, 0, 3.0), (3, 1, 4.5)]
    assert trace.records[0].metrics == {"train/reward": 0.5, "eval/eval_acc": 0.416}  # exact, not 0.41600000000000004
    assert trace.records[1].metrics == {"train/reward": 0.25}
    assert math.isnan(trace.records[2].metrics["train/reward"]) and trace.records[2].metrics["eval/eval_acc"] == 0.156
    assert trace.eval_names() == ["eval/eval_acc"] and trace.stream_names() == ["train/reward"]
    # Default streams: every column not named otherwise.
    trace = from_columns(path, step="it", evals={"eval_acc": 0.01})
    assert trace.stream_names() == ["ep", "secs", "reward_avg", "junk"]


def test_from_columns_row_index_steps_and_merging(tmp_path):
    path = write(tmp_path, "r,l\n1,10\n2,20\n")
    assert [r.step for r in from_columns(path, step=None)] == [0, 1]
    path = write(tmp_path, "step,a,b\n1,1,\n1,,2\n2,3,\n")
    trace = from_columns(path)
    assert [(r.step, r.metrics) for r in trace] == [(1, {"a": 1.0, "b": 2.0}), (2, {"a": 3.0})]


def test_from_columns_restart_policy(tmp_path):
    path = write(tmp_path, "step,a\n1,0\n2,0\n3,0\n1,1\n2,1\n3,1\n4,1\n")
    with pytest.raises(TraceError, match=r"t\.csv:5: step 1 is below the previous step 3.*keep_last"):
        from_columns(path)
    # the CLI's option is named beside the Python one (--step-column reads a CSV here): the CLI user got only the latter
    with pytest.raises(TraceError, match=r"on_restart='keep_last'.*adaptive-eval --keep-last-run"):
        from_columns(path, step="step")
    trace = from_columns(path, on_restart="keep_last")
    assert [(r.step, r.metrics["a"]) for r in trace] == [(1, 1.0), (2, 1.0), (3, 1.0), (4, 1.0)]
    # Resuming from a checkpoint keeps the earlier steps before the restart point.
    path = write(tmp_path, "step,a\n1,0\n2,0\n3,0\n4,0\n3,1\n4,1\n")
    assert [r.metrics["a"] for r in from_columns(path, on_restart="keep_last")] == [0.0, 0.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="on_restart"):
        from_columns(path, on_restart="merge")


@pytest.mark.parametrize("text,kwargs,match", [
    ("step,a\n1,0.5\n", {"streams": ["b"]}, r"t\.csv:1: no column 'b' \(columns: step, a\)"),
    ("#c\nit,a\n1,0.5\n", {}, r"t\.csv:2: no column 'step'"),
    ("step,a\n1,0.5\n2,high\n", {}, r"t\.csv:3: column 'a': 'high' is not a number"),
    ("step,a\n1,0.5\n2,0.5,1\n", {}, r"t\.csv:3: expected 2 fields, got 3"),
    ("step,a\n,0.5\n", {}, r"t\.csv: no records with a 'step' value"),  # (a row without a step is skipped)
    ("step,a\n", {}, r"t\.csv: no records"),
    ("", {}, r"t\.csv: no records"),
])
def test_from_columns_bad_input(tmp_path, text, kwargs, match):
    with pytest.raises(TraceError, match=match):
        from_columns(write(tmp_path, text), **kwargs)


def test_from_columns_name_checks_and_torn_tail(tmp_path):
    path = write(tmp_path, "step,a,b\n1,2,3\n2,3,")
    assert len(from_columns(path)) == 2  # complete, only the newline is missing
    with pytest.warns(RuntimeWarning, match=r"torn\.csv:3: dropped a torn last line"):
        assert len(from_columns(write(tmp_path, "step,a,b\n1,2,3\n2,3", "torn.csv"))) == 1
    with pytest.raises(ValueError, match="must start with 'eval/'"):
        from_columns(path, evals={"a": 1.0}, rename={"a": "acc"})
    with pytest.raises(ValueError, match="duplicated or reserved"):
        from_columns(path, streams=["a", "b"], rename={"a": "x", "b": "x"})


# ---------------------------------------------------------------------------------------------- event rules


def test_event_rules():
    assert reward_change_point(np.arange(30), np.r_[np.zeros(10), np.ones(20)]) == (10, 0.0, 1.0)
    assert first_significant_drop(np.arange(3), np.array([0.5, 0.48, 0.47]), 500) is None
    assert first_significant_drop(np.arange(3), np.array([0.5, 0.48, 0.40]), 500) == 2
    x = np.full(40, 3.0)
    x[20] = 5.0
    x[30:32] = 5.0  # two steps high: not a one-step spike
    assert spike_steps(np.arange(40), x) == [20]


# ---------------------------------------------------------------------------------------------- real traces


def test_grpo_keeps_the_last_run_and_scales_percent(traces_dir):
    trace = convert_grpo(traces_dir / f"{R}ch07_7_3_plus_tracking_metrics.csv")
    assert trace.steps().tolist() == list(range(1, 501))  # the 5 aborted rows are gone
    steps, acc = trace.column("eval/accuracy")
    assert steps.tolist() == list(range(50, 501, 50))  # the restart's step 1 had no eval
    assert acc.tolist() == [0.462, 0.434, 0.428, 0.442, 0.412, 0.37, 0.38, 0.38, 0.336, 0.33]
    assert {"train/reward", "train/loss", "train/response_length", "train/entropy"} <= set(trace.stream_names())
    assert not any("total_steps" in n for n in trace.metric_names())
    first = trace.records[0].metrics
    assert first["train/reward"] == 0.0 and first["train/response_length"] == 6.375
    trace = convert_grpo(traces_dir / f"{R}ch07_7_6_plus_format_reward_metrics.csv")
    assert trace.column("eval/accuracy")[0].tolist()[:4] == [1, 50, 100, 149]


def test_nanogpt_time_is_continuous(traces_dir):
    trace = convert_nanogpt(traces_dir / "KellerJordan__modded-nanogpt__ValueEmbed_75a3af7b.csv")
    times = [r.time for r in trace]
    assert all(a <= b for a, b in zip(times, times[1:]))
    assert trace.records[11].time == pytest.approx(33.281 + 0.115)
    assert trace.records[0].metrics == {"eval/val_loss": 10.8258}
    steps, _ = trace.column("eval/val_loss")
    assert steps[:3].tolist() == [0, 125, 250] and steps[-1] == 1530


def test_sb3_converters(traces_dir):
    mon = convert_sb3_monitor(traces_dir / "DLR-RM__rl-trained-agents__dqn_Pong__0.monitor.csv")
    assert len(mon) == 5877 and mon.records[0].step == 0
    assert mon.records[0].metrics == {"train/episode_return": -21.0, "train/episode_length": 3715.0}
    assert mon.records[0].time == 5.382725
    evs = convert_sb3_evaluations(traces_dir / "DLR-RM__rl-trained-agents__dqn_Pong__evaluations.csv")
    assert len(evs) == 1000 and evs.records[0].step == 10000
    first = [-20, -20, -21, -21, -18, -20, -20, -21, -20, -21]
    assert evs.records[0].metrics["eval/return"] == pytest.approx(np.mean(first))
    assert evs.records[0].metrics["eval/return:std"] == pytest.approx(np.std(first, ddof=1))
    run = convert_sb3_run(traces_dir / "DLR-RM__rl-trained-agents__dqn_Pong__0.monitor.csv",
                          traces_dir / "DLR-RM__rl-trained-agents__dqn_Pong__evaluations.csv")
    steps = run.steps()
    assert np.all(np.diff(steps) > 0) and steps[0] == round(3715 / 4)
    assert run.column("eval/return")[0].tolist() == list(range(10000, 10_000_001, 10000))
    times = [r.time for r in run]
    assert None not in times and all(a <= b for a, b in zip(times, times[1:]))


def test_lm_eval_std_from_recovered_item_counts(traces_dir):
    path = traces_dir / "EleutherAI__pythia__v1_zero-shot_evals_160m_1.4b_12b.csv"
    trace = convert_lm_eval_long(path, "pythia-160m")
    assert len(trace) == 27 and trace.steps().tolist()[:4] == [0, 1, 2, 4]
    with open(path, newline="") as f:
        row = next(r for r in csv.DictReader(f) if r["task"] == "arc_challenge" and r["metric"] == "acc")
    rec = trace.records[0]
    assert rec.metrics["eval/arc_challenge"] == float(row["value"])
    assert rec.metrics["eval/arc_challenge:std"] == pytest.approx(float(row["stderr"]) * math.sqrt(1172))
    assert "eval/lambada_openai/ppl:std" in rec.metrics and trace.stream_names() == []
    with pytest.raises(TraceError, match="no records for model 'pythia-70m'"):
        convert_lm_eval_long(path, "pythia-70m")

    big = convert_bigscience(traces_dir / "bigscience-workshop__bigscience__tr3e-1B3-c4-checkpoints_agg.json")
    assert len(big) == 34 and big.records[0].step == 19500
    names = set(big.metric_names())
    assert {"eval/mc_taco/em", "eval/webqs:std", "eval/lambada/ppl:std", "eval/mrpc/f1:std"} <= names
    assert "eval/mc_taco/em:std" not in names  # no stderr: no std
    items = load_real("bigscience_1b3_c4", traces_dir).items
    assert items["eval/webqs"] == 2032 and items["eval/lambada/ppl"] == 5153  # WebQuestions test, LAMBADA


EXPECTED_EVENTS = {
    "grpo_kl_collapse": [Event(56, "collapse", "train/reward")],
    "grpo_no_kl": [Event(224, "collapse", "train/reward")],
    "grpo_tracking": [Event(224, "collapse", "train/reward")],
    "grpo_format_reward": [Event(149, "degradation", "eval/accuracy")],
    "grpo_clip_ratio": [],
    "grpo_no_kl_stopped": [Event(219, "collapse", "train/reward")],
}


def test_real_trace_library(traces_dir):
    infos = real_traces(traces_dir)
    assert len(infos) == 17 and len({i.name for i in infos}) == 17
    for info in infos:
        rt = load_real(info.name, traces_dir)
        assert len(rt.trace) > 20 and rt.name == info.name and rt.kind == "real"
        assert np.all(np.diff(rt.trace.steps()) > 0)
        if info.name in EXPECTED_EVENTS:
            assert rt.events == EXPECTED_EVENTS[info.name], info.name
        else:
            assert rt.events == []
        if rt.eval_metric is None:
            assert rt.truth is None and rt.trace.eval_names() == []
        else:
            assert rt.eval_metric in rt.trace.eval_names() and rt.truth.shape == (len(rt.trace),)
            assert np.isfinite(rt.truth[-1])
    collapse = load_real("grpo_kl_collapse", traces_dir)
    steps = collapse.trace.steps()
    assert collapse.truth[steps == 99][0] == 0.408 and collapse.truth[steps == 100][0] == 0.0
    assert collapse.items == {"eval/accuracy": 500}
    tracking = load_real("grpo_tracking", traces_dir)
    assert np.isnan(tracking.truth[0]) and tracking.truth[49] == 0.462
    assert 946 in [d.step for d in load_real("nanogpt_124m", traces_dir).distractors]
    assert load_real("sb3_pong", traces_dir).items == {"eval/return": 10}


def test_library_errors(tmp_path, traces_dir):
    assert real_traces(tmp_path) == []
    with pytest.raises(FileNotFoundError, match="ADAPTIVE_EVAL_TRACES"):
        load_real("grpo_kl_collapse", tmp_path)
    with pytest.raises(KeyError, match="no real trace 'nope'"):
        load_real("nope", traces_dir)


def test_converted_trace_saves_and_reads_back(tmp_path, traces_dir):
    trace = load_real("grpo_format_reward", traces_dir).trace
    for suffix in (".csv", ".jsonl"):
        write_trace(trace, tmp_path / f"t{suffix}")
        back = read_trace(tmp_path / f"t{suffix}")
        assert [(r.step, r.metrics) for r in back] == [(r.step, r.metrics) for r in trace]

"""Traces other tools wrote (a W&B CSV export, a Hugging Face Trainer's TensorBoard folder, verl's JSONL file log,
a run resumed into the same log) through replay, check and tune with the trace options."""

import argparse
import json

import numpy as np
import pytest

from adaptive_eval import load_config
from adaptive_eval.cli import _tune_cases, main
from adaptive_eval.trace import TraceError, read_trace


def write_wandb(path):
    """W&B's export: a capitalised "Step", its own "_runtime", the eval logged every 50 steps; a collapse at 200."""
    rng = np.random.default_rng(0)
    lines = ["Step,_runtime,train/loss,eval/accuracy,eval/runtime"]
    for s in range(400):
        loss = 1.0 + 0.05 * rng.normal() + (2.0 if s >= 200 else 0.0)
        acc = f"{0.8 if s < 200 else 0.3}" if s % 50 == 0 else ""
        lines.append(f"{s},{10 * s},{loss:.4f},{acc},{'12.5' if acc else ''}")
    path.write_text("\n".join(lines) + "\n")


def evals_of(out):
    return [json.loads(line) for line in (out / "evals.jsonl").read_text().splitlines()]


def test_step_column_alone_reads_another_tools_csv_in_replay_check_and_tune(tmp_path, capsys):
    """``--step-column Step`` did nothing without ``--stream``/``--eval``: "missing 'step' column ... use
    --step-column"; and check and tune had no such option."""
    path = tmp_path / "wandb.csv"
    write_wandb(path)
    assert main(["replay", str(path), "--step-column", "Step", "--out", str(tmp_path / "o"), "--no-tensorboard"]) == 0
    first = evals_of(tmp_path / "o")[0]
    assert set(first["metrics"]) == {"accuracy", "runtime"}
    # --eval names the ground truth: eval/runtime is then neither ground truth nor a stream
    assert main(["replay", str(path), "--step-column", "Step", "--eval", "eval/accuracy", "--out",
                 str(tmp_path / "o2"), "--no-tensorboard"]) == 0
    assert set(evals_of(tmp_path / "o2")[0]["metrics"]) == {"accuracy"}
    (tmp_path / "wandb.csv.events.yaml").write_text("events:\n  - {step: 200, metric: accuracy, within: 60}\n")
    capsys.readouterr()
    assert main(["check", str(path), "--config", "default", "--step-column", "Step"]) == 0
    assert "change at step 200 (accuracy)" in capsys.readouterr().out
    args = argparse.Namespace(trace=[str(path)], events=[], stream=[], eval=["eval/accuracy"], step_column="Step",
                              keep_last_run=False)
    (case,) = _tune_cases(args, load_config())
    assert case.metric == "accuracy" and [case.trace.records[i].step for i in case.events] == [200]
    assert not any("eval/runtime" in r.metrics for r in case.trace.records)


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_keep_last_run_alone_keeps_the_later_run_of_a_native_trace(tmp_path, suffix):
    """It applied only with --stream/--eval (so never to a native trace): "step 100 is below the previous step
    149"; the error now says how to read it."""
    path = tmp_path / f"restart{suffix}"
    steps = list(range(150)) + list(range(100, 300))
    rows = [(s, 1.0 if k < 150 else 2.0) for k, s in enumerate(steps)]
    if suffix == ".csv":
        path.write_text("step,loss\n" + "".join(f"{s},{v}\n" for s, v in rows))
    else:
        path.write_text("".join(json.dumps({"step": s, "loss": v}) + "\n" for s, v in rows))
    with pytest.raises(TraceError, match=r"below the previous step 149.*on_restart='keep_last'.*--keep-last-run"):
        read_trace(path)
    trace = read_trace(path, on_restart="keep_last")
    assert [r.step for r in trace] == list(range(300))
    assert [r.metrics["loss"] for r in trace] == [1.0] * 100 + [2.0] * 200
    assert main(["replay", str(path), "--keep-last-run", "--out", str(tmp_path / "o"), "--no-tensorboard"]) == 0


def test_stream_and_eval_select_columns_of_a_tensorboard_folder_and_of_jsonl(tmp_path, capsys):
    """On a TensorBoard folder --stream was an IsADirectoryError traceback, on JSONL "no column 'step'"."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "tb"))
    for s in range(120):
        writer.add_scalar("train/loss", 1.0 + 0.01 * (s % 7), s)
        writer.add_scalar("train/learning_rate", 1e-4, s)
        if s % 20 == 0:
            writer.add_scalar("eval/accuracy", 0.8, s)
            writer.add_scalar("eval/runtime", 12.0, s)
    writer.close()
    assert main(["replay", str(tmp_path / "tb"), "--stream", "train/loss", "--eval", "eval/accuracy", "--out",
                 str(tmp_path / "o"), "--no-tensorboard"]) == 0
    assert {m for e in evals_of(tmp_path / "o") for m in e["metrics"]} == {"accuracy"}
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps({"step": s, "critic/score/mean": 0.5, "acc_pct": 41.6}) + "\n"
                            for s in range(60)))
    assert main(["replay", str(path), "--stream", "critic/score/mean", "--eval", "acc_pct:0.01", "--out",
                 str(tmp_path / "o2"), "--no-tensorboard"]) == 0
    assert {m for e in evals_of(tmp_path / "o2") for m in e["metrics"]} == {"acc_pct"}
    capsys.readouterr()
    assert main(["replay", str(path), "--stream", "nope", "--out", str(tmp_path / "o3")]) == 2
    assert "no metric 'nope' (metrics: critic/score/mean, acc_pct)" in capsys.readouterr().err
    assert main(["replay", str(path), "--step-column", "Step", "--out", str(tmp_path / "o4")]) == 2
    assert "--step-column applies to a CSV" in capsys.readouterr().err


def test_verl_file_logs_nest_their_metrics_under_data(tmp_path, capsys):
    """verl's file logger writes ``{"step": N, "data": {...}}``: refused before ("metric 'data' ... is not a
    number"); nested objects are metrics under their key."""
    path = tmp_path / "verl.jsonl"
    lines = []
    for s in range(1, 200):
        data = {"critic/score/mean": 0.5, "actor": {"entropy": 0.4, "kl": 0.01}}
        if s % 20 == 0:
            data["val-core/math/acc/mean@4"] = 0.6
        lines.append(json.dumps({"step": s, "data": data}))
    path.write_text("\n".join(lines) + "\n")
    trace = read_trace(path)
    assert trace.records[19].metrics == {"critic/score/mean": 0.5, "actor/entropy": 0.4, "actor/kl": 0.01,
                                         "val-core/math/acc/mean@4": 0.6}
    capsys.readouterr()
    assert main(["replay", str(path), "--eval", "val-core/math/acc/mean@4", "--out", str(tmp_path / "o"),
                 "--no-tensorboard"]) == 0
    assert "warning" not in capsys.readouterr().err
    assert all(set(e["metrics"]) == {"val-core/math/acc/mean@4"} for e in evals_of(tmp_path / "o"))
    # without ground truth named, replay says why every evaluation is empty
    assert main(["replay", str(path), "--out", str(tmp_path / "o2"), "--no-tensorboard"]) == 0
    assert "no eval ground truth" in capsys.readouterr().err

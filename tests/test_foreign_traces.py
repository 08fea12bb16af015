"""Traces other tools wrote (a W&B CSV export, a Hugging Face Trainer's TensorBoard folder, verl's JSONL file log,
a run resumed into the same log) through replay, check and tune with the trace options."""

import argparse
import json
import re

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
    assert set(first["metrics"]) == {"accuracy"}  # (eval/runtime, HF's bookkeeping, is no eval metric)
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
    with pytest.warns(RuntimeWarning, match=r"kept the later run at 1 restart \(on_restart='keep_last', "
                      r"--keep-last-run\): dropped 50 earlier records, 300 kept \(the first restart at "
                      + (r"line 152: " if suffix == ".csv" else r"line 151: ") + r"step 100 after step 149\)"):
        trace = read_trace(path, on_restart="keep_last")
    assert [r.step for r in trace] == list(range(300))
    assert [r.metrics["loss"] for r in trace] == [1.0] * 100 + [2.0] * 200
    assert main(["replay", str(path), "--keep-last-run", "--out", str(tmp_path / "o"), "--no-tensorboard"]) == 0


@pytest.mark.parametrize("header", ["step,loss", "Step,loss"])
def test_keep_last_run_on_a_file_that_is_only_out_of_order_says_what_it_dropped(tmp_path, capsys, header):
    """Found by a new-user probe: the unsorted-steps error suggests --keep-last-run, which then replayed 20
    shuffled rows as 3, without a word."""
    import random

    steps = list(range(0, 200, 10))
    random.Random(0).shuffle(steps)
    path = tmp_path / "shuffled.csv"
    path.write_text(header + "\n" + "".join(f"{s},{s / 100}\n" for s in steps))
    with pytest.warns(RuntimeWarning, match=r"shuffled.csv: kept the later run at \d+ restarts .*dropped \d+ "
                                            r"earlier records, \d+ kept .*should be sorted by step instead"):
        kept = len(read_trace(path, on_restart="keep_last").records)
    assert kept < 20
    assert main(["replay", str(path), "--keep-last-run", "--out", str(tmp_path / "o"), "--no-tensorboard"]) == 0
    assert f"dropped {20 - kept} earlier records, {kept} kept" in capsys.readouterr().err


def test_a_tensorboard_or_wandb_csv_export_s_clock_column_is_the_clock_not_a_stream(tmp_path):
    """Found by a new-user probe: TensorBoard's CSV export's "Wall time" was watched as a stream (an hour's pause
    raised a cusum alarm) and the clock fell back to 10 s per record; W&B's _runtime was left out but not used."""
    t0 = 1.7e9
    rows = [(s, t0 + 6 * s + (3600 if s >= 150 else 0), 0.5 + 0.01 * (s % 3)) for s in range(0, 300, 10)]
    path = tmp_path / "tb_export.csv"
    path.write_text("Step,Wall time,train/reward\n" + "".join(f"{s},{t},{r}\n" for s, t, r in rows))
    with pytest.warns(RuntimeWarning, match=r"read 'Step' \(TensorBoard's CSV download\)"):  # (not W&B's: a probe)
        trace = read_trace(path)
    assert {k for r in trace for k in r.metrics} == {"train/reward"}
    assert [r.time for r in trace][:2] == [0.0, 60.0] and trace.records[-1].time == 6 * 290 + 3600
    wandb = tmp_path / "wandb.csv"
    wandb.write_text("Step,_runtime,_timestamp,train/reward\n0,0.5,1700000000.5,1\n10,61.5,1700000061.5,2\n")
    with pytest.warns(RuntimeWarning, match=r"read 'Step' \(W&B's\)"):
        trace = read_trace(wandb)
    assert [r.time for r in trace] == [0.5, 61.5] and {k for r in trace for k in r.metrics} == {"train/reward"}
    # W&B's API export (run.history().to_csv()) names its step _step: read as the step, like Step (it was
    # "missing 'step' column")
    api = tmp_path / "api.csv"
    api.write_text("_step,_runtime,train/reward\n0,1.0,0.5\n1,2.5,0.6\n")
    with pytest.warns(RuntimeWarning, match="read '_step' \\(W&B's\\) as the step"):
        trace = read_trace(api)
    assert [(r.step, r.time, r.metrics) for r in trace] == [(0, 1.0, {"train/reward": 0.5}),
                                                             (1, 2.5, {"train/reward": 0.6})]
    # (a clock column named as a stream stays a stream)
    from adaptive_eval.convert import from_columns

    trace = from_columns(path, step="Step", streams=["Wall time"])
    assert "Wall time" in trace.records[0].metrics and trace.records[0].time is None


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
    assert "missing 'Step'; the step looks to be 'step'" in capsys.readouterr().err  # (JSONL's step key)
    # An eval column asked for as a stream: "no column 'eval/accuracy' to watch (columns: eval/accuracy)" was a
    # riddle.
    own = tmp_path / "own.csv"
    own.write_text("step,train/reward,eval/accuracy\n" + "".join(f"{s},0.5,0.4\n" for s in range(40)))
    assert main(["replay", str(own), "--stream", "eval/accuracy", "--out", str(tmp_path / "o5")]) == 2
    assert "'eval/accuracy': an eval column (the ground truth replay evaluates from), not a stream" in \
        capsys.readouterr().err


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
    trace = read_trace(path, validation_truth=False)
    assert trace.records[19].metrics == {"critic/score/mean": 0.5, "actor/entropy": 0.4, "actor/kl": 0.01,
                                         "val-core/math/acc/mean@4": 0.6}
    capsys.readouterr()
    assert main(["replay", str(path), "--eval", "val-core/math/acc/mean@4", "--out", str(tmp_path / "o"),
                 "--no-tensorboard"]) == 0
    assert "warning" not in capsys.readouterr().err
    assert all(set(e["metrics"]) == {"val-core/math/acc/mean@4"} for e in evals_of(tmp_path / "o"))
    # without it named, the one val-core/ column is the ground truth, said (read_trace's default)
    assert main(["replay", str(path), "--out", str(tmp_path / "o2"), "--no-tensorboard"]) == 0
    assert "read 'val-core/math/acc/mean@4', the trace's one val-core/ column" in capsys.readouterr().err
    assert evals_of(tmp_path / "o2") == evals_of(tmp_path / "o")


# --------------------------------------------------------- found by a new user's trial with traces of their own


def _hf_log_history(collapse_at=500):
    """A Hugging Face Trainer's log_history: a train row every 10 steps with a fractional epoch, an eval row
    every 50 steps at the same step, the closing summary row."""
    rng = np.random.default_rng(0)
    rows = []
    for step in range(10, 1010, 10):
        epoch = round(3 * step / 1000, 4)
        loss = 2.0 - step / 1000 + 0.05 * rng.normal() + (3.0 if step >= collapse_at else 0.0)
        rows.append({"epoch": epoch, "grad_norm": 1.0, "learning_rate": 1e-5, "loss": loss, "step": step})
        if step % 50 == 0:
            rows.append({"epoch": epoch, "eval_accuracy": 0.6 if step < collapse_at else 0.2, "eval_runtime": 3.2,
                         "step": step})
    rows.append({"epoch": 3.0, "step": 1000, "total_flos": 1e15, "train_loss": 1.2, "train_runtime": 1234.5})
    return rows


def test_a_hf_trainer_state_json_and_a_json_array_of_records_are_read(tmp_path, capsys):
    """trainer_state.json was "malformed JSON" (read as JSONL) and log_history's fractional epoch "not an
    integer"; a JSON array of records was dropped as a torn line, then "no records"."""
    rows = _hf_log_history()
    (tmp_path / "trainer_state.json").write_text(json.dumps({"global_step": 1000, "log_history": rows}, indent=2))
    (tmp_path / "history.json").write_text(json.dumps(rows))
    (tmp_path / "history.jsonl").write_text("\n".join(map(json.dumps, rows)) + "\n")
    traces = [read_trace(tmp_path / n) for n in ("trainer_state.json", "history.json", "history.jsonl")]
    for t in traces:
        assert [r.step for r in t.records] == list(range(10, 1010, 10))  # train and eval rows of a step merged
        assert t.records[0].epoch == 0 and t.records[-1].epoch == 3 and t.records[40].epoch == 1  # floor
        assert t.records[4].metrics["eval_accuracy"] == 0.6 and t.records[4].metrics["loss"] == rows[4]["loss"]
    assert traces[0].records == traces[1].records == traces[2].records
    # The same document written compactly on one line (with or without a final newline) was read as JSONL:
    # "missing 'step'", or a torn last line dropped and "no records".
    for name, end in (("compact.json", ""), ("compact_nl.json", "\n")):
        (tmp_path / name).write_text(json.dumps({"global_step": 1000, "log_history": rows}) + end)
        assert read_trace(tmp_path / name).records == traces[0].records
    for name, end in (("other.json", None), ("other_line.json", ""), ("other_line_nl.json", "\n")):
        doc = {"a": 1, "b": [1, 2]}
        (tmp_path / name).write_text(json.dumps(doc, indent=2) if end is None else json.dumps(doc) + end)
        with pytest.raises(TraceError, match="one JSON document.*no 'log_history' list.*'a', 'b'"):
            read_trace(tmp_path / name)
    # A one-line JSONL trace is still one record.
    (tmp_path / "one.jsonl").write_text('{"step": 3, "loss": 1.0}\n')
    assert [r.step for r in read_trace(tmp_path / "one.jsonl").records] == [3]
    # The collapse at step 500 is confirmed from the eval rows, replayed every training step.
    (tmp_path / "trainer_state.json.events.yaml").write_text("events:\n  - {step: 500, within: 60}\n")
    assert main(["check", str(tmp_path / "trainer_state.json"), "--eval", "eval_accuracy", "--stream", "loss",
                 "--set", "replay.every_step=true"]) == 0
    assert "collapse" not in capsys.readouterr().err


def test_a_fractional_epoch_in_a_csv_and_a_huge_json_integer_are_data(tmp_path):
    (tmp_path / "run.csv").write_text("step,epoch,loss\n1,0.05,1.0\n2,0.1,1.0\n3,1.02,1.0\n")
    assert [r.epoch for r in read_trace(tmp_path / "run.csv").records] == [0, 0, 1]
    (tmp_path / "run.jsonl").write_text('{"step": 1, "loss": 1' + "0" * 400 + '}\n{"step": 2, "loss": -1' + "0" * 400
                                        + '}\n')
    assert [r.metrics["loss"] for r in read_trace(tmp_path / "run.jsonl").records] == [float("inf"), float("-inf")]
    (tmp_path / "bad.csv").write_text("step,epoch,loss\n1,0.5,1.0\n2,inf,1.0\n")
    with pytest.raises(TraceError, match=r"bad.csv:3: epoch 'inf' is not a finite number"):
        read_trace(tmp_path / "bad.csv")


def test_a_pass_at_1_column_alone_is_ground_truth_a_derived_one_beside_its_metric_is_not(tmp_path, capsys):
    """verl logs eval/math/pass@1: it was dropped as "derived", and replay warned there was no ground truth
    even with --eval naming it."""
    lines = ["step,train/reward,eval/math/pass@1"] + [f"{s},{1.0 if s < 150 else 0.2},{0.6 if s < 150 else 0.2}"
                                                      for s in range(300)]
    (tmp_path / "verl.csv").write_text("\n".join(lines) + "\n")
    assert main(["replay", str(tmp_path / "verl.csv"), "--out", str(tmp_path / "a"), "--no-tensorboard"]) == 0
    assert "no eval ground truth" not in capsys.readouterr().err
    assert all("math/pass@1" in e["metrics"] for e in evals_of(tmp_path / "a"))
    # Beside its metric (what an evaluation writes to TensorBoard), pass@4 is derived again, not truth.
    lines = ["step,train/reward,eval/acc,eval/acc/pass@4"] + [f"{s},1.0,0.5,0.9" for s in range(100)]
    (tmp_path / "tb_like.csv").write_text("\n".join(lines) + "\n")
    assert main(["replay", str(tmp_path / "tb_like.csv"), "--out", str(tmp_path / "b"), "--no-tensorboard"]) == 0
    assert all(set(e["metrics"]) == {"acc"} for e in evals_of(tmp_path / "b"))


def test_replay_says_when_the_truth_cannot_give_an_interval_and_refuses_a_bad_scale(tmp_path, capsys):
    lines = ["step,train/reward,eval/acc"] + [f"{s},1.0,{60 if s < 150 else 20}" for s in range(300)]
    (tmp_path / "pct.csv").write_text("\n".join(lines) + "\n")
    assert main(["replay", str(tmp_path / "pct.csv"), "--out", str(tmp_path / "a"), "--no-tensorboard"]) == 0
    err = capsys.readouterr().err
    assert "eval/acc lies in [20, 60] and has no eval/acc:std column" in err and "--eval eval/acc:0.01" in err
    assert f"note: {tmp_path / 'pct.csv'}: eval/acc lies in" in err  # (check reads many traces: which one)
    assert main(["replay", str(tmp_path / "pct.csv"), "--out", str(tmp_path / "b"), "--no-tensorboard",
                 "--eval", "eval/acc:0.01"]) == 0
    assert "note:" not in capsys.readouterr().err
    for bad in ("0", "-1", "nan"):  # exit 2, as all bad input (a SystemExit with the message exited 1)
        assert main(["replay", str(tmp_path / "pct.csv"), "--out", str(tmp_path / "c"), "--eval",
                     f"eval/acc:{bad}"]) == 2
        assert f"adaptive-eval: --eval 'eval/acc:{bad}': the scale after ':' must be a positive number" \
            in capsys.readouterr().err
    assert main(["check", str(tmp_path / "pct.csv"), "--eval", "eval/acc:0..1"]) == 2
    assert "the scale after ':' must be a number" in capsys.readouterr().err
    # what follows the last ':' is a scale where it reads as a number, else part of the column's name (a column
    # named with ':' could not be named at all, the first ':' split it; a probe)
    assert main(["check", str(tmp_path / "pct.csv"), "--eval", "eval/acc:x"]) == 2
    assert "no column 'eval/acc:x'" in capsys.readouterr().err
    colon = tmp_path / "colon.csv"
    colon.write_text((tmp_path / "pct.csv").read_text().replace("eval/acc", "val:acc", 1))
    from adaptive_eval.cli import _eval_mapping

    assert _eval_mapping(["acc:"]) == {"acc": 1.0}  # (a trailing ':' is no part of the name; a review)
    for named in ("val:acc:0.01", "val:acc"):
        assert main(["replay", str(colon), "--out", str(tmp_path / "d"), "--no-tensorboard", "--eval", named]) == 0
        assert ("eval/val:acc lies in" in capsys.readouterr().err) == (named == "val:acc")
    # a column declared a mean without its :std: tune searched for confirmations that could not come, silently
    (tmp_path / "pct.csv.events.yaml").write_text("events:\n  - {step: 150, direction: down}\n")
    assert main(["tune", str(tmp_path / "pct.csv"), "--set", "evaluation.metric_kinds={acc: mean}", "--trials", "1",
                 "--no-progress", "--out", str(tmp_path / "t")]) == 0
    assert "eval/acc is declared a mean (evaluation.metric_kinds) and has no eval/acc:std" in capsys.readouterr().err


def test_tune_refuses_events_outside_the_trace_and_folds_below_1(tmp_path, capsys):
    """An event at 9999 was dropped silently (then "no events in any trace"), one at -5 counted."""
    write_wandb(tmp_path / "run.csv")
    base = ["tune", str(tmp_path / "run.csv"), "--step-column", "Step", "--trials", "1", "--no-progress",
            "--out", str(tmp_path / "t")]
    for events in ("9999", "-5,250"):
        assert main([*base, "--events", f"{tmp_path / 'run.csv'}={events}"]) == 2
        assert f"event step {events.split(',')[0]} outside the trace's steps 0-399" in capsys.readouterr().err
    assert main([*base, "--folds", "0"]) == 2
    assert "--folds must be at least 1, got 0" in capsys.readouterr().err


def test_a_suite_item_id_that_is_not_an_index_is_an_error_naming_the_column(tmp_path, capsys):
    """eval/aime/acc@prob0 became a metric of its own per item (ten metrics, no aime/acc)."""
    (tmp_path / "ids.csv").write_text("step,loss,eval/aime/acc@prob0,eval/aime/acc@prob1\n0,1,0.5,0.4\n1,1,0.5,0.4\n")
    assert main(["replay", str(tmp_path / "ids.csv"), "--out", str(tmp_path / "o"), "--no-tensorboard",
                 "--set", "evaluation.suites.aime.size=2"]) == 2
    assert ("column 'eval/aime/acc@prob0': an item's id after '@' is its index, 0-1 (evaluation.suites.aime.size=2), "
            "not 'prob0'") in capsys.readouterr().err


def test_a_tensorboard_folders_wall_clock_can_be_left_out_and_replay_says_when_it_binds(tmp_path, capsys):
    """A TensorBoard run written in a tight loop has steps 0.1 ms apart: every evaluation was deferred by the
    budget (2 evaluations, an alarm's 97 steps late) with nothing said."""
    from torch.utils.tensorboard import SummaryWriter

    rng = np.random.default_rng(0)
    with SummaryWriter(str(tmp_path / "tb")) as w:
        for s in range(400):
            w.add_scalar("train/loss", (1.0 if s < 200 else 3.0) + 0.05 * rng.normal(), s)
            if s % 20 == 0:
                w.add_scalar("eval/accuracy", 0.7 if s < 200 else 0.3, s)
    args = ["replay", str(tmp_path / "tb"), "--no-tensorboard"]
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    out = capsys.readouterr()
    assert "note: the budget deferred" in out.err and "(the trace's time column)" in out.err
    assert main([*args, "--out", str(tmp_path / "b"), "--set", "replay.trace_time=false"]) == 0
    assert "deferred" not in capsys.readouterr().err
    alarm_evals = [e["step"] for e in evals_of(tmp_path / "b") if e["reason"].startswith("alarm:")]
    assert alarm_evals and 200 <= alarm_evals[0] <= 210
    assert len(evals_of(tmp_path / "b")) > 2 * len(evals_of(tmp_path / "a"))
    # check said nothing of it (a FAIL with no reason; found by a new user): it says the same note
    main(["check", str(tmp_path / "tb")])
    assert "the budget deferred" in capsys.readouterr().err
    # ... and tune, whose every trial is replayed under the same budget, said nothing (a new-user probe): it says
    # the note of its trial 0, the base config
    assert main(["tune", str(tmp_path / "tb"), "--objective", "cost", "--trials", "1", "--out", str(tmp_path / "t"),
                 "--no-progress"]) == 0
    assert "note: trial 0 (the base config), " in capsys.readouterr().err


def test_replay_prints_the_suites_cost_units_beside_the_items(tmp_path, capsys):
    from adaptive_eval.synthetic_items import make_item_trace
    from adaptive_eval.trace import write_trace

    it = make_item_trace("flat", steps=60, seed=0, suites={"math": (20, 0.0)})
    write_trace(it.trace, tmp_path / "items.csv")
    assert main(["replay", str(tmp_path / "items.csv"), "--out", str(tmp_path / "o"), "--no-tensorboard",
                 "--set", "evaluation.suites.math.size=20", "--set", "evaluation.suites.math.samples_per_item=4"]) == 0
    out = capsys.readouterr().out
    assert "items, " in out and "cost units (answers x cost + items x item_cost)" in out


def test_a_wandb_export_with_system_rows_and_bookkeeping_columns(tmp_path, capsys):
    """A row without a step (W&B's system metrics) was fatal ("empty 'Step' cell"); W&B's _runtime and
    _timestamp and a pandas index column were watched as streams; an HF CSV's epoch column clashed."""
    from adaptive_eval.convert import from_columns

    rows = [",Step,_runtime,_timestamp,epoch,train/loss,eval/accuracy"]
    for s in range(300):
        rows.append(f"{s},{s},{10 * s},{1.7e9 + 10 * s},{s / 100},{1.0 if s < 150 else 3.0},"
                    f"{(0.8 if s < 150 else 0.3) if s % 25 == 0 else ''}")
        if s % 100 == 50:
            rows.append(f"{s}.5,,,{1.7e9 + 10 * s + 5},,,")  # a system-metrics row
    (tmp_path / "wandb.csv").write_text("\n".join(rows) + "\n")
    with pytest.warns(UserWarning, match="3 rows without a 'Step' value skipped"):
        t = from_columns(tmp_path / "wandb.csv", step="Step")
    assert t.stream_names() == ["train/loss"] and len(t) == 300
    assert [r.epoch for r in t.records[99:102]] == [0, 1, 1]
    assert main(["replay", str(tmp_path / "wandb.csv"), "--step-column", "Step", "--out", str(tmp_path / "o"),
                 "--no-tensorboard"]) == 0
    err = capsys.readouterr().err
    assert "adaptive-eval: warning: " in err and "3 rows without a 'Step' value skipped" in err
    assert "warnings.warn" not in err and "convert.py" not in err  # one line, not the library's source


def test_a_header_with_a_space_before_each_quoted_name_is_read_as_the_names(tmp_path):
    """`"Step", "train/reward"` (a space after each comma, names quoted): the quotes stayed in the names, so
    "Step" was not found and `_runtime` was watched as a stream."""
    from adaptive_eval.convert import from_columns

    path = tmp_path / "spaced.csv"
    path.write_text('"Step", "train/reward", "_runtime", "eval/accuracy"\n'
                    + "".join(f'{s}, {0.5 + 0.001 * s}, {s * 10.0}, {"0.7" if s % 10 == 0 else ""}\n'
                              for s in range(50)))
    t = from_columns(path, step="Step")
    assert t.stream_names() == ["train/reward"] and [r.step for r in t.records][:3] == [0, 1, 2]
    assert t.records[10].metrics["eval/accuracy"] == 0.7
    plain = tmp_path / "plain.csv"
    plain.write_text('step, "train/reward"\n0, 1.5\n1, 2.5\n')
    assert [r.metrics["train/reward"] for r in read_trace(plain).records] == [1.5, 2.5]


def test_a_one_line_jsonl_trace_without_its_step_says_so(tmp_path):
    """After one-line JSON documents were read as documents, a one-line .jsonl without 'step' said "one JSON
    document ... no 'log_history'" instead of naming the missing step (found in review)."""
    (tmp_path / "b.jsonl").write_text('{"_step": 0, "loss": 1.0}\n')
    with pytest.raises(TraceError, match=r"b.jsonl:1: missing 'step'; the step looks to be '_step': name it with "
                                         r"--step-column _step"):
        read_trace(tmp_path / "b.jsonl")
    (tmp_path / "c.jsonl").write_text('{"loss": 1.0}\n')
    with pytest.raises(TraceError, match=r"c.jsonl:1: missing 'step' \(keys: 'loss'\)"):
        read_trace(tmp_path / "c.jsonl")


def test_dates_in_a_time_column_are_seconds_since_the_first_record(tmp_path):
    """A change-point series or a monitoring export carries dates ("1871-01", "2014-04-01 00:00:00"): the time
    column failed with "'1871-01' is not a number"; it is now the trace's clock, in seconds from its first date."""
    native = tmp_path / "monthly.csv"
    native.write_text("step,time,value\n0,1871-01,1120\n1,1871-02,1160\n2,,963\n3,1871-04,1210\n")
    t = read_trace(native)
    assert [r.time for r in t.records] == [0.0, 31 * 86400.0, None, (31 + 28 + 31) * 86400.0]
    assert [r.metrics["value"] for r in t.records] == [1120.0, 1160.0, 963.0, 1210.0]
    jsonl = tmp_path / "run.jsonl"
    jsonl.write_text('{"step": 0, "time": "2014-04-01T00:00:00Z", "loss": 1}\n'
                     '{"step": 1, "time": "2014-04-01T00:05:00+00:00", "loss": 2}\n')
    assert [r.time for r in read_trace(jsonl).records] == [0.0, 300.0]
    nab = tmp_path / "nab.csv"  # another tool's CSV, its time column named
    nab.write_text("time,value\n2014-04-01 00:00:00,0.5\n2014-04-01 00:10:00,0.7\n")
    from adaptive_eval.convert import from_columns

    t = from_columns(nab, step=None, time="time", time_scale=0.001)  # (a scale applies to numbers, not dates)
    assert [(r.step, r.time, r.metrics) for r in t.records] == [(0, 0.0, {"value": 0.5}), (1, 600.0, {"value": 0.7})]


@pytest.mark.parametrize("cells, message", [
    ("0,1871-01,1\n1,12.5,2\n", "mixes dates (1 records) with numbers of seconds (1)"),
    ("0,1871-01,1\n1,next month,2\n", ":3: column 'time': 'next month' is neither a number of seconds nor an ISO 8601"),
    ("0,1871-02,1\n1,1871-01,2\n", "dates go back at step 1 (1871-02-01T00:00:00+00:00 -> 1871-01-01T00:00:00+00:00)"),
])
def test_a_time_column_of_mixed_or_unreadable_cells_is_an_error_naming_it(tmp_path, cells, message):
    path = tmp_path / "t.csv"
    path.write_text("step,time,value\n" + cells)
    with pytest.raises(TraceError, match=re.escape(message)):
        read_trace(path)


def test_step_column_none_numbers_the_rows_of_a_csv_without_steps(tmp_path, capsys):
    """A NAB-style ``timestamp,value`` file had no way in: --step-column must name a column.  ``none`` numbers
    the rows, and the error for a CSV without steps says so."""
    path = tmp_path / "nab.csv"
    path.write_text("timestamp,value\n" + "".join(f"2014-04-01 00:{m:02d}:00,{0.5 + 0.01 * (m % 3)}\n"
                                                  for m in range(60)))
    assert main(["replay", str(path), "--out", str(tmp_path / "o0"), "--no-tensorboard"]) == 2
    assert "--step-column none: the row number" in capsys.readouterr().err
    assert main(["replay", str(path), "--stream", "value", "--step-column", "none", "--out", str(tmp_path / "o"),
                 "--no-tensorboard"]) == 0
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["steps"] == 60


def test_a_hf_eval_loss_or_wer_is_flagged_lower_is_better_and_hf_bookkeeping_is_not_a_stream(tmp_path, capsys):
    """Found on real trainer_state.json files: ``--eval eval_loss`` was replayed as a higher-is-better
    proportion without a word (the "best" checkpoint had the highest loss), eval_runtime, total_flos and
    train_runtime were watched as training streams, and with --eval eval_wer, eval_loss still was."""
    rows = _hf_log_history()
    for r in rows:
        if "eval_accuracy" in r:
            r["eval_loss"] = 1.0 - r["eval_accuracy"]
            r["eval_wer"] = 0.5 * r["eval_loss"]
            r["eval_samples_per_second"] = 12.0
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"global_step": 1000, "log_history": rows}))
    trace = read_trace(path)
    assert trace.stream_names() == ["grad_norm", "learning_rate", "loss", "eval_accuracy", "eval_loss", "eval_wer",
                                    "train_loss"]
    assert main(["replay", str(path), "--eval", "eval_wer", "--out", str(tmp_path / "o"), "--no-tensorboard"]) == 0
    err = capsys.readouterr().err
    assert "eval/eval_wer looks lower-is-better (a wer)" in err and "higher_is_better=false" in err
    assert "metric_kinds" not in err  # a word error rate is a rate
    from adaptive_eval.convert import select_columns

    assert select_columns(trace, evals={"eval_wer": 1.0}).stream_names() == ["grad_norm", "learning_rate", "loss",
                                                                             "train_loss"]
    assert main(["replay", str(path), "--eval", "eval_loss", "--out", str(tmp_path / "o2"), "--no-tensorboard"]) == 0
    assert "a loss is not a proportion" in capsys.readouterr().err
    assert main(["replay", str(path), "--eval", "eval_loss", "--set", "evaluation.higher_is_better=false",
                 "--out", str(tmp_path / "o3"), "--no-tensorboard"]) == 0
    assert "lower-is-better" not in capsys.readouterr().err
    # without --eval: the warning names the eval-like columns
    assert main(["replay", str(path), "--out", str(tmp_path / "o4"), "--no-tensorboard"]) == 0
    assert "eval-like columns here: eval_accuracy, eval_loss, eval_wer" in capsys.readouterr().err
    # a loss beyond [0, 1] is returned as it is, not drawn as a proportion: one note says so, and the note on
    # its direction no longer says it is drawn as a proportion (found by a new-user probe: the notes disagreed)
    big = tmp_path / "big.csv"
    big.write_text("step,train/loss,eval/loss\n" + "".join(f"{s},{2 - s / 400},{2 - s / 400 if s % 20 == 0 else ''}\n"
                                                            for s in range(200)))
    assert main(["check", str(big), "--seed", "0"]) in (0, 1)
    err = capsys.readouterr().err
    assert "eval/loss looks lower-is-better (a loss)" in err and "not a proportion" not in err
    assert "eval/loss lies in [1.55, 2] and has no eval/loss:std column" in err


def test_check_of_a_folder_checks_every_trace_and_says_which_it_could_not(tmp_path, capsys):
    """``check traces/`` stopped at the first trace without ground truth (exit 2) and left the rest unchecked;
    and ``check`` said nothing where ``replay`` warns that every evaluation measured nothing."""
    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "a_other.csv").write_text("iteration,loss\n0,1.0\n1,1.1\n")  # needs --step-column: cannot be read as it is
    (folder / "b_plain.csv").write_text("step,loss\n" + "".join(f"{s},{1.0 + 0.01 * (s % 5)}\n" for s in range(200)))
    (folder / "c_truth.csv").write_text("step,loss,eval/acc\n" + "".join(
        f"{s},{1.0 + 0.01 * (s % 5)},{0.6 if s % 50 == 0 else ''}\n" for s in range(200)))
    assert main(["check", str(folder)]) == 2
    captured = capsys.readouterr()
    assert "b_plain.csv  (no expectations)" in captured.out and "c_truth.csv  (no expectations)" in captured.out
    # (its result column read "ok" on a run that exits non-zero having checked nothing; a fresh-clone probe)
    assert [line.split()[-1] for line in captured.out.splitlines() if "(no expectations)" in line] == ["unchecked"] * 2
    assert "1 of 3 traces could not be checked" in captured.out and "a_other.csv:1: missing 'step'" in captured.out
    assert captured.err.count("warning: the trace has no eval ground truth") == 1  # b_plain's
    assert f"warning: the trace has no eval ground truth ({folder / 'b_plain.csv'}: no eval/<metric> column)" \
        in captured.err  # (it did not say which trace)


def test_replay_writes_strict_json_that_plot_reads_back(tmp_path):
    """evals.jsonl held a bare NaN ("ci": {"eval_loss": [NaN, NaN]}), which jq and other strict parsers refuse:
    NaN is now null and +-inf "inf"/"-inf", and adaptive-eval plot reads them back."""
    path = tmp_path / "run.csv"
    path.write_text("step,loss,eval/loss\n" + "".join(
        f"{s},{1.0 + 0.01 * (s % 5)},{2.5 if s % 25 == 0 else ''}\n" for s in range(100)))
    assert main(["replay", str(path), "--out", str(tmp_path / "o"), "--no-tensorboard"]) == 0

    def refuse(token):
        raise ValueError(f"not strict JSON: {token}")

    lines = (tmp_path / "o" / "evals.jsonl").read_text().splitlines()
    evals = [json.loads(line, parse_constant=refuse) for line in lines]
    assert evals[0]["ci"]["loss"] == [None, None] and evals[0]["metrics"]["loss"] == 2.5
    json.loads((tmp_path / "o" / "summary.json").read_text(), parse_constant=refuse)
    assert main(["plot", str(tmp_path / "o"), "--out", str(tmp_path / "o" / "run.png")]) == 0
    assert (tmp_path / "o" / "run.png").stat().st_size > 0


def _verl_log(path, sources=("openai/gsm8k",), slow_from=None):
    """verl's file logger: {"step", "data": {...}} with a validation result per data source every 20 steps, named
    val-core/<source>/reward/mean@1 (whose "@1" is not an item of a suite), its timings and throughput; the score
    and the accuracy fall at step 200; from ``slow_from`` on the steps take twice as long (a slow node)."""
    rows = []
    for s in range(1, 301):
        slow = slow_from is not None and s >= slow_from
        d = {"actor/kl_loss": 0.01 + 0.0001 * (s % 7), "critic/score/mean": (0.6 if s < 200 else 0.2) + 0.001 * (s % 5),
             "timing_s/step": (60.0 if slow else 30.0) + 0.1 * (s % 3),
             "perf/throughput": (500 if slow else 1000) + s % 4}
        if s % 20 == 0:
            for src in sources:
                d[f"val-core/{src}/reward/mean@1"] = 0.7 if s < 200 else 0.3
        rows.append(json.dumps({"step": s, "data": d}))
    path.write_text("\n".join(rows) + "\n")
    return path


def test_a_verl_logs_one_validation_column_is_its_ground_truth(tmp_path, capsys):
    """A verl log with one data source: its val-core/ column is the ground truth, said once, as --eval makes it (it
    replayed, checked and tuned on no ground truth, every evaluation measuring nothing); --eval names it too."""
    path = _verl_log(tmp_path / "verl.jsonl")
    assert main(["replay", str(path), "--out", str(tmp_path / "a"), "--no-tensorboard"]) == 0
    err = capsys.readouterr().err
    assert "read 'val-core/openai/gsm8k/reward/mean@1', the trace's one val-core/ column, as the eval ground" in err
    assert "no eval ground truth" not in err
    for out, extra in (("a", []), ("b", ["--eval", "val-core/openai/gsm8k/reward/mean@1"])):
        if extra:
            assert main(["replay", str(path), *extra, "--out", str(tmp_path / out), "--no-tensorboard"]) == 0
        metrics = [e["metrics"] for e in evals_of(tmp_path / out)]
        assert all(set(m) == {"val-core/openai/gsm8k/reward/mean@1"} for m in metrics) and len(metrics) >= 3
    assert evals_of(tmp_path / "a") == evals_of(tmp_path / "b")


def test_a_verl_runs_wandb_csv_with_a_stream_named_keeps_its_one_validation_column_as_ground_truth(tmp_path, capsys):
    """The same log as a W&B CSV export, replayed with --stream and no --eval: the CSV was read by its named columns
    alone, its validation column dropped, and every evaluation measured nothing."""
    import csv

    rows = [dict(_step=r["step"], **r["data"]) for r in map(json.loads, _verl_log(tmp_path / "v.jsonl").open())]
    path = tmp_path / "verl.csv"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, [*rows[19]])  # (step 20: every column)
        writer.writeheader()
        writer.writerows(rows)
    col = "val-core/openai/gsm8k/reward/mean@1"
    for out, extra in (("a", []), ("b", ["--eval", col])):
        assert main(["replay", str(path), "--stream", "critic/score/mean", *extra, "--out", str(tmp_path / out),
                     "--no-tensorboard"]) == 0
        err = capsys.readouterr().err
        assert ("the trace's one val-core/ column, as the eval ground truth" in err) == (not extra)
        assert "no eval ground truth" not in err
    evals = evals_of(tmp_path / "a")
    assert len(evals) >= 3 and all(set(e["metrics"]) == {col} for e in evals)
    assert evals == evals_of(tmp_path / "b")


def test_a_verl_log_with_several_validation_columns_is_refused_by_check_and_tune_until_one_is_named(tmp_path, capsys):
    """Two data sources: which is the ground truth is the user's to say.  check passed its gates (exit 0) on
    evaluations that measured nothing, and tune's error named no fix; both now name the columns and --eval."""
    from adaptive_eval.testing import replay_trace

    path = _verl_log(tmp_path / "verl.jsonl", sources=("openai/gsm8k", "math500"))
    (tmp_path / "verl.jsonl.events.yaml").write_text("events:\n- {step: 200, kind: collapse, direction: down}\n"
                                                     "max_samples_per_1k: 100000\n")
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "no eval ground truth" in err and "--eval" in err
    assert "val-core/openai/gsm8k/reward/mean@1, val-core/math500/reward/mean@1" in err
    assert main(["tune", str(path), "--trials", "1", "--out", str(tmp_path / "t"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "--eval TRACE=COL: val-core/openai/gsm8k/reward/mean@1, val-core/math500/reward/mean@1" in err
    col = "val-core/math500/reward/mean@1"
    assert main(["check", str(path), "--eval", col]) == 0
    # From Python as from the command line (replay_trace had no way to name it)
    run = replay_trace(path, eval=col)
    assert run.metric == col and all(set(e["metrics"]) == {col} for e in run.evals)
    assert run.events and run.events[0].step == 200  # (the events file beside it, read as before)
    with pytest.raises(TypeError, match="eval= read a trace file"):
        replay_trace(read_trace(path), eval=col)


def test_verls_timings_and_throughput_are_not_watched(tmp_path, capsys):
    """verl's timing_s/ and perf/ are the machine's: a slower node from step 100 raised a cusum alarm and an
    alarm's evaluation on a run whose model never changed there; naming one to watch says why not."""
    from adaptive_eval.replay import _split_columns

    path = _verl_log(tmp_path / "verl.jsonl", slow_from=100)
    trace = read_trace(path, validation_truth=False)
    assert _split_columns(trace.metric_names())[0] == ["actor/kl_loss", "critic/score/mean"]
    assert main(["replay", str(path), "--out", str(tmp_path / "a"), "--no-tensorboard"]) == 0
    alarms = [json.loads(line) for line in (tmp_path / "a" / "alarms.jsonl").read_text().splitlines()]
    assert not [a for a in alarms if a["step"] < 200]
    capsys.readouterr()
    assert main(["replay", str(path), "--stream", "timing_s/step", "--out", str(tmp_path / "b"),
                 "--no-tensorboard"]) == 2
    assert "'timing_s/step': verl's timing or throughput" in capsys.readouterr().err


def test_verls_validation_columns_are_no_streams(tmp_path):
    """verl's val-core/ and val-aux/ columns are validation results logged every k steps: they fed the detectors
    as free per-step streams (replay without --eval, and select_columns beside the --eval column)."""
    from adaptive_eval.convert import select_columns
    from adaptive_eval.replay import _split_columns

    rows = []
    for s in range(1, 101):
        d = {"critic/score/mean": 0.5}
        if s % 20 == 0:
            d.update({"val-core/gsm8k/reward/mean@1": 0.7, "val-aux/gsm8k/reward/std@1": 0.1})
        rows.append(json.dumps({"step": s, "data": d}))
    path = tmp_path / "verl.jsonl"
    path.write_text("\n".join(rows) + "\n")
    raw = read_trace(path, validation_truth=False)
    with pytest.warns(RuntimeWarning, match="the trace's one val-core/ column, as the eval ground truth"):
        promoted = read_trace(path)
    assert promoted.eval_names() == ["eval/val-core/gsm8k/reward/mean@1"]
    for trace in (raw, promoted):  # (the column is named as logged, however it was read)
        assert _split_columns(trace.metric_names())[0] == ["critic/score/mean"]
        narrowed = select_columns(trace, evals={"val-core/gsm8k/reward/mean@1": 1.0})
        assert narrowed.stream_names() == ["critic/score/mean"]
        assert narrowed.eval_names() == ["eval/val-core/gsm8k/reward/mean@1"]


def test_an_hf_runs_train_epoch_is_its_epoch_in_tensorboard_and_a_wandb_export(tmp_path):
    """HF logs its epoch as the scalar train/epoch (0.05 for a twentieth of the first): in a TensorBoard folder and
    a W&B export it was watched as a stream and every record's epoch was None, so epoch triggers could not work."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "tb"))
    for s in range(1, 41):
        writer.add_scalar("train/loss", 1.0 / s, s)
        writer.add_scalar("train/epoch", s / 20, s)
    writer.close()
    t = read_trace(tmp_path / "tb")
    assert t.stream_names() == ["train/loss"]
    assert [r.epoch for r in t.records][:3] == [0, 0, 0] and t.records[-1].epoch == 2 and t.records[19].epoch == 1
    (tmp_path / "wandb.csv").write_text("train/global_step,train/loss,train/epoch\n" + "".join(
        f"{s},{1.0 / s},{s / 20}\n" for s in range(1, 41)))
    args = argparse.Namespace(stream=[], eval=[], step_column="train/global_step", keep_last_run=False)
    from adaptive_eval.cli import _load_trace_file

    w = _load_trace_file(str(tmp_path / "wandb.csv"), args)
    assert w.stream_names() == ["train/loss"] and w.records[19].epoch == 1


def test_add_scalars_series_in_sub_folders_are_read_with_the_run_and_separate_runs_are_named(tmp_path, capsys):
    """SummaryWriter.add_scalars writes each key into a run of its own, <logdir>/<main_tag>_<key>/ (main_tag's '/'
    as '_'), under the tag main_tag: reading the log folder left them out silently (found by a new user)."""
    from torch.utils.tensorboard import SummaryWriter

    tb = tmp_path / "tb"
    with SummaryWriter(str(tb)) as w:
        for s in range(200):
            w.add_scalar("train/loss", 1.0 + 0.01 * (s % 7), s)
            if s % 20 == 0:
                w.add_scalars("eval/acc", {"val": 0.8 if s < 100 else 0.4, "test": 0.7}, s)
            w.add_scalars("lr", {"group/0": 1e-3}, s)  # a key holding '/' is a deeper folder
    assert sorted(p.parent.relative_to(tb).as_posix() for p in tb.rglob("*tfevents*")) == \
        [".", "eval_acc_test", "eval_acc_val", "lr_group/0"]  # the layout torch writes
    trace = read_trace(tb)
    assert set(trace.metric_names()) == {"train/loss", "eval/acc/val", "eval/acc/test", "lr/group/0"}
    steps, val = trace.column("eval/acc/val")
    assert steps.tolist() == list(range(0, 200, 20)) and val.tolist() == pytest.approx([0.8] * 5 + [0.4] * 5)
    assert trace.steps().tolist() == list(range(200))  # merged by step with the run's own scalars
    assert main(["replay", str(tb), "--eval", "eval/acc/val", "--out", str(tmp_path / "o"), "--no-tensorboard"]) == 0
    assert {m for e in evals_of(tmp_path / "o") for m in e["metrics"]} == {"acc/val"}
    # A run of its own below the folder is not one of its series: left out, and said so, naming it.
    with SummaryWriter(str(tb / "seed_1")) as w:
        w.add_scalar("train/loss", 2.0, 0)
    with pytest.warns(RuntimeWarning, match=r"left out 1 run in sub-folders that is not add_scalars series of this "
                                            r"run \(seed_1\): separate runs; pass each folder on its own"):
        assert set(read_trace(tb).metric_names()) == {"train/loss", "eval/acc/val", "eval/acc/test", "lr/group/0"}
    capsys.readouterr()
    assert main(["replay", str(tb), "--out", str(tmp_path / "o2"), "--no-tensorboard"]) == 0
    err = capsys.readouterr().err
    assert "adaptive-eval: warning: " in err and "(seed_1)" in err
    # A folder of separate runs only (no event file of its own) is still an error naming every one of them.
    runs = tmp_path / "runs"
    for k in range(7):
        with SummaryWriter(str(runs / f"seed_{k}")) as w:
            w.add_scalar("train/loss", 1.0, 0)
    with pytest.raises(TraceError, match=r"holds no event files; event files lie in .*seed_4 and 2 more: pass one"):
        read_trace(runs)


def test_an_sb3_monitor_file_read_as_a_trace_names_its_real_header_and_the_converter(tmp_path, capsys):
    """A Stable-Baselines3 Monitor file read as a plain CSV said its header was the '#{"t_start": ...}' comment line
    above it (found by a new user): leading '#' lines are skipped, as convert_sb3_monitor skips them, and the
    error names the real header, its line and the converter."""
    from adaptive_eval.convert import convert_sb3_monitor

    path = tmp_path / "0.monitor.csv"
    rows = [f"{20.0 + (s % 5)},{20 + s % 5},{0.1 * s:.2f}" for s in range(60)]
    path.write_text('#{"t_start": 1700000000.0, "env_id": "CartPole-v1"}\nr,l,t\n' + "\n".join(rows) + "\n")
    message = (f"{path}:2: missing 'step' column (header: ['r', 'l', 't']): a Stable-Baselines3 Monitor file, one row "
               "an episode; read it with adaptive_eval.convert.convert_sb3_monitor(path)")
    with pytest.raises(TraceError) as err:
        read_trace(path)
    assert str(err.value).startswith(message) and "t_start" not in str(err.value)
    for command in (["replay", str(path), "--out", str(tmp_path / "o"), "--no-tensorboard"], ["check", str(path)]):
        assert main(command) == 2
        assert f"adaptive-eval: {message}" in capsys.readouterr().err
    # what it suggests works
    assert main(["replay", str(path), "--step-column", "none", "--stream", "r", "--stream", "l", "--out",
                 str(tmp_path / "o2"), "--no-tensorboard"]) == 0
    assert len(convert_sb3_monitor(path)) == 60
    # Another header below a comment: the usual hint, at the header's line; the line of a bad cell counts the comment.
    other = tmp_path / "other.csv"
    other.write_text("# my logger, v2\n# seed 3\nIter,loss\n0,1.0\n")
    with pytest.raises(TraceError, match=r"other.csv:3: missing 'step' column \(header: \['Iter', 'loss'\]\); "
                                         "another tool's CSV"):
        read_trace(other)
    mine = tmp_path / "mine.csv"
    mine.write_text("# my logger, v2\nstep,train/loss,eval/acc\n0,1.0,0.5\n1,0.9,\nx,1.0,\n")
    with pytest.raises(TraceError, match=r"mine.csv:5: step 'x' is not a number"):
        read_trace(mine)
    mine.write_text("# my logger, v2\nstep,train/loss,eval/acc\n0,1.0,0.5\n1,0.9,\n")
    assert [(r.step, r.metrics) for r in read_trace(mine)] == [(0, {"train/loss": 1.0, "eval/acc": 0.5}),
                                                              (1, {"train/loss": 0.9})]
    # convert_sb3_monitor (the one helper both readers use) still names a bad cell's line in the file
    path.write_text('#{"t_start": 1700000000.0}\nr,l,t\n1.0,1,0.1\nx,1,0.2\n')
    with pytest.raises(TraceError, match=r"0.monitor.csv:4: "):
        convert_sb3_monitor(path)


def test_a_csv_header_that_starts_with_hash_is_the_header_not_a_comment(tmp_path):
    """Skipping leading '#' lines (for an SB3 Monitor file) also skipped a header whose first column is '#' (a row
    number), which read before, and then named the first data row as the header (found in review)."""
    p = tmp_path / "rows.csv"
    p.write_text("#,step,loss\n1,10,0.5\n2,20,0.4\n")
    t = read_trace(p)
    assert t.steps().tolist() == [10, 20] and set(t.metric_names()) == {"#", "loss"}
    p.write_text("# exported by a tool\n#,step,loss\n1,10,0.5\n2,20,oops\n")  # a comment above it; a bad cell's line
    with pytest.raises(TraceError, match=r"rows\.csv:4: column 'loss': 'oops' is not a number"):
        read_trace(p)
    # numpy.savetxt(..., header="step,loss") writes '# step,loss': the error names that line, not a data row.
    p.write_text("# step,loss\n10,0.5\n20,0.4\n")
    with pytest.raises(TraceError, match=r"rows\.csv:1: .*'# step,loss'.* the header behind a '#'") as e:
        read_trace(p)
    assert "'10'" not in str(e.value)
    # A Monitor file is still read past its comment line.
    p.write_text('#{"t_start": 1.0}\nr,l,t\n1.0,10,0.1\n')
    with pytest.raises(TraceError, match=r"rows\.csv:2: missing 'step' column \(header: \['r', 'l', 't'\]\)"):
        read_trace(p)


def test_an_add_scalars_series_named_as_a_scalar_of_the_run_is_left_out_with_a_warning(tmp_path):
    """A series add_scalars wrote under the name of one of the run's own scalars (add_scalar("loss/train") and
    add_scalars("loss", {"train": ...})) made the whole folder an error ('rename one': a recorded run's tags cannot
    be renamed), where it read before the series were read (found in review): the run's own scalar is kept, that
    series left out with a warning naming its sub-folder, the other series read."""
    from torch.utils.tensorboard import SummaryWriter

    tb = tmp_path / "tb"
    with SummaryWriter(str(tb)) as w:
        for s in range(10):
            w.add_scalar("loss/train", 1.0, s)
            w.add_scalars("loss", {"train": 2.0, "val": 3.0}, s)
    with pytest.warns(RuntimeWarning, match=r"left out the add_scalars series in 'loss_train': its name 'loss/train' is "
                                            r"a scalar of the run"):
        trace = read_trace(tb)
    assert set(trace.metric_names()) == {"loss/train", "loss/val"}
    assert trace.column("loss/train")[1].tolist() == [1.0] * 10 and trace.column("loss/val")[1].tolist() == [3.0] * 10


def write_wandb_chart(path, runs=("grpo-run-7",)):
    """W&B's chart "Export CSV": "Step", then "<run> - <metric>" with its __MIN/__MAX band per run and metric."""
    metrics = ("train/reward", "eval/acc")
    header = ["Step"] + [f"{r} - {m}{band}" for r in runs for m in metrics for band in ("", "__MIN", "__MAX")]
    rng = np.random.default_rng(1)
    lines = [",".join(header)]
    for s in range(300):
        reward = 0.5 + 0.02 * rng.normal() - (0.3 if s >= 180 else 0.0)
        acc = f"{0.7 if s < 180 else 0.4}" if s % 25 == 0 else ""
        lines.append(",".join([str(s)] + [v for _ in runs for v in (f"{reward:.4f}",) * 3 + (acc,) * 3]))
    path.write_text("\n".join(lines) + "\n")


def test_a_wandb_chart_export_is_read_as_one_run_without_its_band_columns(tmp_path, capsys):
    """Its __MIN/__MAX band columns were streams of their own (one change: three alarms, corroborating itself) and
    the "<run> - " prefix kept "<run> - eval/acc" from being eval ground truth."""
    from adaptive_eval.convert import from_columns

    path = tmp_path / "chart.csv"
    write_wandb_chart(path)
    with pytest.warns(RuntimeWarning, match=r"W&B chart export: .*run 'grpo-run-7'.*left out 4 __MIN/__MAX columns"):
        t = from_columns(path, step="Step")
    assert t.stream_names() == ["train/reward"] and t.eval_names() == ["eval/acc"]
    with pytest.warns(RuntimeWarning, match="W&B chart export"):  # a column named with its run's prefix is found
        t = from_columns(path, step="Step", streams=["grpo-run-7 - train/reward__MIN"],
                         evals={"grpo-run-7 - eval/acc": 1.0})
    assert t.stream_names() == ["train/reward__MIN"] and t.eval_names() == ["eval/acc"]
    assert main(["replay", str(path), "--step-column", "Step", "--out", str(tmp_path / "o"), "--no-tensorboard"]) == 0
    alarms = [json.loads(line) for line in (tmp_path / "o" / "alarms.jsonl").read_text().splitlines()]
    assert {a["stream"] for a in alarms} == {"train/reward"}
    assert evals_of(tmp_path / "o")[0]["metrics"].keys() == {"acc"}
    assert "left out 4 __MIN/__MAX columns" in capsys.readouterr().err


def test_a_wandb_chart_export_of_several_runs_names_them_or_reads_the_run_named(tmp_path):
    from adaptive_eval.convert import from_columns

    path = tmp_path / "chart.csv"
    write_wandb_chart(path, runs=("run-a", "run-b"))
    with pytest.raises(TraceError, match=r"W&B chart export of 2 runs \('run-a', 'run-b'\): a trace is one run"):
        from_columns(path, step="Step")
    with pytest.warns(RuntimeWarning, match="run 'run-b' .*left out 6 columns of the other runs"):
        t = from_columns(path, step="Step", evals={"run-b - eval/acc": 1.0})
    assert t.stream_names() == ["train/reward"] and t.eval_names() == ["eval/acc"]
    # replay with a run's stream named as the error says, "<run> - <metric>": it was "no column 'run-a -
    # train/reward' to watch", exit 2, after the reader had taken it (found by a new-user probe)
    assert main(["replay", str(path), "--eval", "run-a - eval/acc", "--stream", "run-a - train/reward",
                 "--out", str(tmp_path / "o"), "--no-tensorboard"]) == 0
    assert {json.loads(line)["stream"] for line in (tmp_path / "o" / "alarms.jsonl").read_text().splitlines()} \
        == {"train/reward"}


def test_a_wandb_export_is_read_without_naming_its_step_column(tmp_path, capsys):
    """W&B names the step "Step": its run and chart exports needed --step-column Step ("missing 'step' column");
    read_trace and every command that reads a trace take "Step" when there is no "step", and say so."""
    chart = tmp_path / "chart.csv"
    write_wandb_chart(chart)
    with pytest.warns(RuntimeWarning, match=r"chart.csv: no 'step' column: read 'Step' \(W&B's\) as the step"):
        t = read_trace(chart)
    assert t.stream_names() == ["train/reward"] and t.eval_names() == ["eval/acc"] and len(t) == 300
    assert main(["replay", str(chart), "--out", str(tmp_path / "o"), "--no-tensorboard"]) == 0
    assert {json.loads(line)["stream"] for line in (tmp_path / "o" / "alarms.jsonl").read_text().splitlines()} \
        == {"train/reward"}
    assert "read 'Step' (W&B's) as the step" in capsys.readouterr().err
    run = tmp_path / "run.csv"  # a run's history export: W&B's own columns are not streams
    run.write_text("Step,_runtime,train/loss\n" + "".join(f"{s},{10 * s},{1.0 + s}\n" for s in range(5)))
    with pytest.warns(RuntimeWarning, match="read 'Step'"):
        assert read_trace(run).stream_names() == ["train/loss"]
    both = tmp_path / "both.csv"  # a "step" column is the step; "Step" is then a metric like any other
    both.write_text("step,Step,loss\n0,5,1.0\n1,6,2.0\n")
    assert [r.step for r in read_trace(both).records] == [0, 1]


def test_stream_or_eval_named_on_a_wandb_export_keeps_its_step_its_std_column_and_no_other_eval_stream(
        tmp_path, capsys):
    """Found by a new-user probe: on a W&B export (_step, Step) any --eval or --stream was "no column 'step'", a
    misspelt column was blamed on the step too; the eval column's own :std column, which replay's note asks for,
    was dropped; and another eval_ column of a CSV became a per-step stream."""
    path = tmp_path / "wandb.csv"
    rows = ["_step,_runtime,train/reward,eval/accuracy,eval_loss,eval_loss:std,eval_pct"]
    for s in range(60):
        ev = s % 20 == 0
        loss = 1.5 if s < 30 else 2.5
        rows.append(f"{s},{2.0 * s},{0.5 + 0.01 * (s % 3)},{'0.6' if ev else ''},{loss if ev else ''},"
                    f"{'0.5' if ev else ''},{'70' if ev else ''}")
    path.write_text("\n".join(rows) + "\n")
    assert main(["replay", str(path), "--eval", "eval/accuracy", "--out", str(tmp_path / "o"),
                 "--no-tensorboard"]) == 0
    assert "read '_step' (W&B's) as the step" in capsys.readouterr().err
    assert main(["replay", str(path), "--eval", "eval/acuracy", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "no column 'eval/acuracy' (columns:" in err and "'step'" not in err.split("no column")[1]
    from adaptive_eval.convert import from_columns, select_columns

    for std in ("eval_loss:std", "eval/eval_loss:std"):  # either name of its :std column comes with it
        path.write_text(path.read_text().replace(rows[0].split(",")[5], std, 1))
        rows[0] = path.read_text().splitlines()[0]
        with pytest.warns(RuntimeWarning, match="read '_step'"):
            trace = from_columns(path, evals={"eval_loss": 1.0})
        assert trace.stream_names() == ["train/reward"]  # (eval_pct is no stream, nor eval/accuracy)
        assert trace.eval_names() == ["eval/eval_loss"]
        assert trace.records[20].metrics["eval/eval_loss:std"] == 0.5
        scaled = select_columns(trace, evals={"eval/eval_loss": 2.0})  # (and any other format's, scaled alike)
        assert scaled.records[20].metrics == {"train/reward": 0.52, "eval/eval_loss": 3.0, "eval/eval_loss:std": 1.0}
    capsys.readouterr()
    events = tmp_path / "events.yaml"
    events.write_text("events:\n- {step: 30, direction: up, within: 30, metric: eval_loss}\n")
    assert main(["check", str(path), "--eval", "eval_loss", "--set", "evaluation.higher_is_better=false",
                 "--set", "trigger.freq_steps=10", "--events", str(events)]) == 0  # (it was exit 2: no interval)
    out = capsys.readouterr()
    assert "has no eval/eval_loss:std column" not in out.err and "confirmed after" in out.out


def test_tune_asks_which_eval_metric_as_check_does_and_hf_eval_runtime_is_none(tmp_path, capsys):
    """Found by a new-user probe: with eval/loss before eval/accuracy, tune scored eval/loss as higher-is-better
    (every event a miss) while check refused the same file; a JSONL log's eval/runtime (HF's) was an eval metric."""
    path = tmp_path / "run.jsonl"
    rows = []
    for s in range(300):
        row = {"step": s, "train/reward": 0.5 + 0.01 * (s % 3) - (0.4 if s >= 150 else 0.0)}
        if s % 25 == 0:
            row.update({"eval/loss": 1.0 if s < 150 else 2.0, "eval/accuracy": 0.7 if s < 150 else 0.2,
                        "eval/runtime": 12.5})
        rows.append(json.dumps(row))
    path.write_text("\n".join(rows) + "\n")
    (tmp_path / "run.jsonl.events.yaml").write_text("events:\n- {step: 150, within: 30}\n")
    base = ["tune", str(path), "--trials", "1", "--folds", "1", "--no-progress", "--out", str(tmp_path / "t")]
    assert main(base) == 2
    err = capsys.readouterr().err
    assert "run.jsonl: which eval metric? the trace has accuracy, loss; set evaluation.metric" in err
    assert main(["check", str(path)]) == 2
    assert "which eval metric? the trace has accuracy, loss" in capsys.readouterr().err
    assert main([*base, "--set", "evaluation.metric=accuracy"]) == 0
    assert "scored on " + str(path) + ": accuracy" in capsys.readouterr().err
    assert main(["replay", str(path), "--out", str(tmp_path / "o"), "--no-tensorboard"]) == 0
    assert set(evals_of(tmp_path / "o")[0]["metrics"]) == {"accuracy", "loss"}


def test_an_interrupted_replay_leaves_no_earlier_replays_outputs_and_says_so_in_a_line(tmp_path, capsys, monkeypatch):
    """Found by a probe: Ctrl-C in a replay printed a traceback of where it landed, and a replay into an --out that
    held an earlier one left that one's evals.jsonl and summary.json beside its own partial tb/."""
    import adaptive_eval.replay

    path = tmp_path / "run.csv"
    path.write_text("step,train/loss,eval/acc\n" + "".join(f"{s},{1.0 + 0.01 * (s % 3)},{0.5 if s % 25 == 0 else ''}\n"
                                                           for s in range(60)))
    out = tmp_path / "o"
    assert main(["replay", str(path), "--out", str(out)]) == 0
    assert {p.name for p in out.iterdir()} >= {"evals.jsonl", "alarms.jsonl", "summary.json"}
    capsys.readouterr()

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(adaptive_eval.replay, "replay", interrupted)
    assert main(["replay", str(path), "--out", str(out)]) == 130
    assert capsys.readouterr().err.splitlines()[-1] == "adaptive-eval replay: interrupted"
    assert not {p.name for p in out.iterdir()} & {"evals.jsonl", "alarms.jsonl", "summary.json"}


def test_a_second_replay_into_the_same_out_folder_replaces_the_first_ones_tensorboard_files(tmp_path, capsys):
    """Found by a new-user probe: evals.jsonl was overwritten but tb/ kept the first replay's event file, and
    TensorBoard (and plot) interleaved the two runs' streams.  Read back with TensorBoard's own reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "o"
    for level in (1.0, 5.0):
        path = tmp_path / f"run{int(level)}.csv"
        path.write_text("step,train/loss,eval/acc\n" + "".join(
            f"{s},{level + 0.01 * (s % 3)},{0.5 if s % 25 == 0 else ''}\n" for s in range(60)))
        assert main(["replay", str(path), "--out", str(out)]) == 0
    assert "removed 1 event file of an earlier replay" in capsys.readouterr().err
    (tb,) = [p for p in (out / "tb").iterdir() if "tfevents" in p.name]
    acc = EventAccumulator(str(out / "tb"))
    acc.Reload()
    values = [e.value for e in acc.Scalars("streams/train/loss")]
    assert len(values) == 60 and min(values) >= 5.0
    (out / "tb" / "events.out.tfevents.1.host.1.other").write_bytes(b"")  # (another writer's file is kept)
    assert main(["plot", str(out)]) == 0 and (out / "run.png").is_file()
    assert main(["replay", str(tmp_path / "run1.csv"), "--out", str(out)]) == 0
    assert (out / "tb" / "events.out.tfevents.1.host.1.other").exists()
    # (plot's picture of the earlier replay went too: it sat beside this one's outputs, read as this one's; a probe)
    assert not (out / "run.png").exists()


def test_a_wandb_history_jsonl_is_read_by_its_step_with_its_runtime_as_the_clock_not_streams(tmp_path, capsys):
    """W&B's own log of a run (files/wandb-history.jsonl: ``_step``, ``_runtime``, ``_timestamp``, ``_wandb``) was
    "missing 'step'", and with --step-column _step its clocks were watched as streams (a drift to every detector)
    while the budget ran on 10 s per record.  It reads as its CSV export does, and says so."""
    hist = tmp_path / "wandb-history.jsonl"
    rows = [{"train/loss": 1.0 + 0.01 * s, "_timestamp": 1.7e9 + 12.5 * s, "_runtime": 12.5 * s, "_step": s,
             "_wandb": {"runtime": int(12.5 * s)}, **({"eval/acc": 0.5} if s % 25 == 0 else {})} for s in range(60)]
    hist.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.warns(RuntimeWarning, match=r"no 'step' key: read '_step' \(W&B's\) as the step, '_runtime' as"):
        t = read_trace(hist)
    assert t.stream_names() == ["train/loss"] and t.eval_names() == ["eval/acc"]
    assert [r.step for r in t.records] == list(range(60)) and t.records[-1].time == 12.5 * 59
    named = read_trace(hist, step_column="_step")  # (named, it is read the same way)
    assert named.stream_names() == ["train/loss"] and named.records[-1].time == 12.5 * 59
    posix = tmp_path / "posix.jsonl"  # without _runtime, W&B's POSIX time is the clock, from the first record on
    posix.write_text("".join(json.dumps({"_step": s, "_timestamp": 1.7e9 + 3 * s, "loss": 1.0}) + "\n"
                             for s in range(3)))
    with pytest.warns(RuntimeWarning, match="'_timestamp' as the time"):
        assert [r.time for r in read_trace(posix).records] == [0.0, 3.0, 6.0]
    assert main(["replay", str(hist), "--out", str(tmp_path / "o"), "--no-tensorboard"]) == 0
    assert "read '_step' (W&B's) as the step" in capsys.readouterr().err
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["train_seconds"] == 12.5 * 59


def test_the_budget_note_of_a_strided_trace_replayed_every_step_gives_a_training_steps_time(tmp_path, capsys):
    """A trace logged every 5 steps, 1 ms a step, replayed with replay.every_step: the note said a step took
    5 ms (the time between records), five times the step the budget was charging."""
    rows = ["step,time,train/loss,eval/accuracy"]
    for s in range(0, 2000, 5):
        rows.append(f"{s},{s * 0.001:.3f},{1.0 if s < 1000 else 3.0},{0.7 if s < 1000 else 0.3}")
    (tmp_path / "t.csv").write_text("\n".join(rows) + "\n")
    args = ["replay", str(tmp_path / "t.csv"), "--no-tensorboard", "--set", "replay.every_step=true"]
    assert main([*args, "--out", str(tmp_path / "o")]) == 0
    err = capsys.readouterr().err
    assert "note: the budget deferred" in err
    assert "a step takes 0.001 s (the trace's time column)" in err


def test_an_eval_column_all_nan_is_a_warning_in_replay_and_check(tmp_path, capsys):
    """Every replayed evaluation read NaN and replay printed its counts with no word; check then said the
    column was 'not a proportion and has no :std column'."""
    rows = ["step,train/loss,eval/accuracy"] + [f"{s},{1.0 if s < 150 else 3.0},{'nan' if s % 20 == 0 else ''}"
                                                for s in range(300)]
    (tmp_path / "nan.csv").write_text("\n".join(rows) + "\n")
    for cmd in (["replay", str(tmp_path / "nan.csv"), "--no-tensorboard", "--out", str(tmp_path / "o")],
                ["check", str(tmp_path / "nan.csv")]):
        main(cmd)
        assert ("nan.csv: eval/accuracy has no finite value (15 records, all NaN or inf)"
                in capsys.readouterr().err)
    rows[1] = "0,1.0,0.7"  # one finite value: nothing said
    (tmp_path / "nan.csv").write_text("\n".join(rows) + "\n")
    main(["replay", str(tmp_path / "nan.csv"), "--no-tensorboard", "--out", str(tmp_path / "o2")])
    assert "no finite value" not in capsys.readouterr().err


def test_a_users_own_val_and_perf_streams_are_watched_and_check_passes_on_them(tmp_path):
    """Found in review: a stream named val_loss (Keras and Lightning name them so) failed check with exit 2 as an
    unread eval column, and a user's own perf/reward was left out as verl's throughput (its collapse unseen)."""
    from adaptive_eval.replay import _split_columns

    assert _split_columns(["perf/reward", "perf/throughput", "timing_s/step", "val_loss"])[0] == \
        ["perf/reward", "val_loss"]
    path = tmp_path / "k.csv"
    path.write_text("step,val_loss,perf/reward\n" + "".join(
        f"{s},{1.0 + 0.01 * (s % 3)},{0.8 if s < 150 else 0.1}\n" for s in range(300)))
    (tmp_path / "k.csv.events.yaml").write_text("max_samples_per_1k: 100000\n")
    assert main(["check", str(path)]) == 0
    assert main(["replay", str(path), "--out", str(tmp_path / "o"), "--no-tensorboard"]) == 0
    alarms = [json.loads(line) for line in (tmp_path / "o" / "alarms.jsonl").read_text().splitlines()]
    assert any(a["stream"] == "perf/reward" and 150 <= a["step"] < 170 for a in alarms)


def test_the_note_on_a_losss_direction_is_left_out_when_the_evaluator_tracks_another_column(tmp_path, capsys):
    """A new user's probe: with evaluation.metric null, replay noted "eval/loss looks lower-is-better ... the best
    checkpoint is its highest value" while the evaluator tracked and picked on eval/score (it prefers a column that
    does not read lower-is-better): the note read as if the pick were made on the loss."""
    from adaptive_eval.cli import main

    rows = "".join(f"{s},{0.5 + s / 1000}," + (f"{2 - s / 400},{0.3 + s / 1000}\n" if s % 20 == 0 else ",\n")
                   for s in range(200))
    both = tmp_path / "both.csv"
    both.write_text("step,train/reward,eval/loss,eval/score\n" + rows)
    assert main(["replay", str(both), "--out", str(tmp_path / "o"), "--no-tensorboard"]) == 0
    assert "lower-is-better" not in capsys.readouterr().err
    only = tmp_path / "only.csv"
    only.write_text("step,train/reward,eval/loss\n" + "".join(
        f"{s},{0.5 + s / 1000},{2 - s / 400 if s % 20 == 0 else ''}\n" for s in range(200)))
    assert main(["replay", str(only), "--out", str(tmp_path / "o2"), "--no-tensorboard"]) == 0
    assert "eval/loss looks lower-is-better (a loss)" in capsys.readouterr().err


def test_replay_says_that_columns_of_several_eval_sets_replay_as_one_set(tmp_path, capsys):
    """The demo's trace (eval/id/accuracy of 300 problems, eval/ood/accuracy of 30) replayed as one simulated
    set of 500 items, unsaid (a new user's probe); with the suites sized, their own sizes and no note."""
    path = tmp_path / "two.csv"
    path.write_text("step,train/reward,eval/id/accuracy,eval/ood/accuracy\n"
                    + "".join(f"{s},{0.5 + s / 1000},{0.6 if s < 50 else 0.4},{0.3}\n" for s in range(100)))
    out = tmp_path / "o"
    assert main(["replay", str(path), "--out", str(out), "--no-tensorboard"]) == 0
    err = capsys.readouterr().err
    assert ("the eval columns of id, ood replay as metrics of one simulated eval set of 500 items" in err
            and "--set evaluation.suites.id.size=N --set evaluation.suites.ood.size=N" in err)
    sized = ["--set", "evaluation.suites.id.size=40", "--set", "evaluation.suites.ood.size=8"]
    assert main(["replay", str(path), *sized, "--out", str(tmp_path / "s"), "--no-tensorboard"]) == 0
    assert "eval columns of" not in capsys.readouterr().err
    evals = [json.loads(line) for line in (tmp_path / "s" / "evals.jsonl").read_text().splitlines()]
    assert evals and max(e["n"]["ood/accuracy"] for e in evals) <= 8 < max(e["n"]["id/accuracy"] for e in evals)


def test_the_budget_note_prices_a_whole_evaluation_of_the_suites_as_replay_charges_it(capsys):
    """A probe: with suites it said replay.eval_set_size's whole set, 30 s, where replay charged 201 s for the
    suites (items x (answers x cost + item_cost))."""
    from adaptive_eval.cli import _budget_note
    from adaptive_eval.trace import Trace, TraceRecord

    cfg = load_config(overrides=["evaluation.metric=math/acc", "evaluation.suites.math.size=500",
                                 "evaluation.suites.math.samples_per_item=4", "evaluation.suites.aime.size=30",
                                 "evaluation.suites.aime.samples_per_item=16", "evaluation.suites.aime.cost=4"])
    trace = Trace([TraceRecord(s, {"loss": 1.0}) for s in range(50)], "t.csv")
    _budget_note(trace, cfg, [{"reason": "budget:deferred"}] * 20, 1)
    # 5 s + 0.05 s x (500 x 4 + 30 x 16 x 4)
    assert "an evaluation of the whole suites 201 s" in capsys.readouterr().err


def test_check_of_a_shipped_lower_is_better_trace_does_not_say_it_is_replayed_higher_is_better(capsys):
    """check real:nanogpt_124m said "eval/val_loss looks lower-is-better (a loss), but evaluation.higher_is_better is
    true", of a replay that used the shipped trace's own direction, lower-is-better (a new user's probe): the note
    read the user's config, not the one replayed."""
    assert main(["check", "real:nanogpt_124m"]) in (0, 1)
    assert "looks lower-is-better" not in capsys.readouterr().err


def test_a_shipped_trace_without_ground_truth_is_not_told_to_pass_eval(capsys):
    """A probe: check of grpo_no_kl_stopped (shipped, no eval column) said "name it with --eval COL", and --eval is
    refused for a shipped trace."""
    main(["check", "grpo_no_kl_stopped"])
    err = capsys.readouterr().err
    assert "warning: the trace has no eval ground truth" in err and "--eval" not in err
    assert "a shipped trace without one: its alarms and decisions replay" in err

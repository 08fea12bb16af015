"""Logs of other trainers read by ``read_trace``: a TensorBoard run resumed into its folder, Hugging Face's
TensorBoard bookkeeping tags, verl's and OpenRLHF's JSONL logs."""

import json
import warnings

import pytest

from adaptive_eval.cli import _load_trace_file, build_parser
from adaptive_eval.trace import TraceError, read_trace

SummaryWriter = pytest.importorskip("torch.utils.tensorboard").SummaryWriter  # (imported once, not per test)


def _resumed_tensorboard(folder):
    """Run 1 logs eval/acc 0.25 every 25 steps to 175 and only it logs `old/only` (at 0 and 150); run 2, resumed
    from step 100 into the same folder (a second event file), logs eval/acc 0.75 every 20 steps to 200."""
    with SummaryWriter(str(folder), filename_suffix=".1") as w:
        for step in range(0, 176, 25):
            w.add_scalar("eval/acc", 0.25, step, walltime=1000.0 + step)
            w.add_scalar("train/loss", 1.0, step, walltime=1000.0 + step)
        w.add_scalar("old/only", 5.0, 0, walltime=1000.0)
        w.add_scalar("old/only", 5.0, 150, walltime=1150.0)
    with SummaryWriter(str(folder), filename_suffix=".2") as w:
        for step in range(100, 201, 20):
            w.add_scalar("eval/acc", 0.75, step, walltime=2000.0 + step)
            w.add_scalar("train/loss", 2.0, step, walltime=2000.0 + step)


def test_a_tensorboard_run_resumed_into_its_folder_drops_the_abandoned_runs_values(tmp_path):
    _resumed_tensorboard(tmp_path)
    with pytest.warns(RuntimeWarning, match="steps go back.*step 100 logged after step 175"):
        trace = read_trace(tmp_path)
    steps, acc = trace.column("eval/acc")
    # As TensorBoard purges orphaned data: the abandoned run's 0.25 at 125, 150, 175 are gone (they sat between
    # the resumed run's 0.75 and read as collapses).
    assert list(steps) == [0, 25, 50, 75, 100, 120, 140, 160, 180, 200]
    assert list(acc) == [0.25] * 4 + [0.75] * 6
    assert list(trace.column("train/loss")[1]) == [1.0] * 4 + [2.0] * 6
    # A tag the later run never logged again is not purged by TensorBoard's rule, and the overlap's time is
    # the resumed run's, not the abandoned run's (min wall time).
    assert list(trace.column("old/only")[0]) == [0, 150]
    by_step = {r.step: r for r in trace.records}
    assert by_step[100].time == pytest.approx(2100.0 - 1000.0)


def test_keep_last_run_keeps_the_resumed_tensorboard_run_alone_from_its_first_step(tmp_path):
    _resumed_tensorboard(tmp_path)
    # as the CSV/JSONL readers, one warning counting what it dropped (it dropped without a word; a probe)
    with pytest.warns(RuntimeWarning, match=r"kept the later run at 1 restart .*dropped 4 earlier records, 10 kept"):
        trace = read_trace(tmp_path, on_restart="keep_last")
    assert [r.step for r in trace.records if r.step >= 100] == [100, 120, 140, 160, 180, 200]
    assert list(trace.column("old/only")[0]) == [0]  # the abandoned run's step 150 goes too
    assert set(trace.column("eval/acc")[1][4:]) == {0.75}
    args = build_parser().parse_args(["check", str(tmp_path), "--keep-last-run"])
    assert list(_load_trace_file(str(tmp_path), args).column("old/only")[0]) == [0]


def test_a_tensorboard_run_continued_in_a_second_file_without_going_back_is_read_whole(tmp_path):
    for k, steps in enumerate((range(0, 5), range(5, 10))):
        with SummaryWriter(str(tmp_path), filename_suffix=f".{k}") as w:
            for step in steps:
                w.add_scalar("train/loss", float(step), step, walltime=100.0 * k + step)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for mode in ("error", "keep_last"):
            assert list(read_trace(tmp_path, on_restart=mode).column("train/loss")[1]) == list(range(10))


def test_hf_trainers_tensorboard_bookkeeping_is_neither_eval_truth_nor_a_stream(tmp_path):
    # The tags Hugging Face's TensorBoardCallback writes for eval_runtime, train_runtime, total_flos, ...
    with SummaryWriter(str(tmp_path)) as w:
        for step in (10, 20):
            w.add_scalar("train/loss", 1.0, step, walltime=float(step))
            w.add_scalar("train/epoch", step / 20, step, walltime=float(step))
            for tag in ("eval/accuracy", "eval/runtime", "eval/samples_per_second", "eval/steps_per_second"):
                w.add_scalar(tag, 0.5, step, walltime=float(step))
        for tag in ("train/train_runtime", "train/train_samples_per_second", "train/train_steps_per_second",
                    "train/total_flos"):
            w.add_scalar(tag, 60.0, 20, walltime=21.0)
    trace = read_trace(tmp_path)
    assert trace.eval_names() == ["eval/accuracy"]
    assert trace.stream_names() == ["train/loss"]
    assert [r.epoch for r in trace.records] == [0, 1]


def test_verls_training_epoch_is_the_epoch_and_its_global_step_is_not_a_stream(tmp_path):
    path = tmp_path / "verl.jsonl"
    lines = [{"step": s, "data": {"training/global_step": s, "training/epoch": (s - 1) // 3,
                                  "critic/score/mean": 0.5}} for s in range(1, 8)]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    trace = read_trace(path)
    assert trace.stream_names() == ["critic/score/mean"]  # no epoch counter to alarm at each epoch boundary
    assert [r.epoch for r in trace.records] == [0, 0, 0, 1, 1, 1, 2]
    # The same log as CSV (a W&B export; its "Step" too) reads alike: its counters were watched as streams, an alarm at
    # every epoch boundary, 2.6x the samples of the JSONL under the aggressive preset (a probe).
    for step in ("step", "Step"):
        csv_path = tmp_path / f"verl_{step}.csv"
        csv_path.write_text(f"{step},training/global_step,training/epoch,critic/score/mean\n" + "".join(
            f"{s},{s},{(s - 1) // 3},0.5\n" for s in range(1, 8)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (W&B's "Step": said)
            csv_trace = read_trace(csv_path)
        assert csv_trace.stream_names() == ["critic/score/mean"]
        assert [r.epoch for r in csv_trace.records] == [0, 0, 0, 1, 1, 1, 2]


def _openrlhf(path):
    rows = [{"train/global_step": s, "train/reward": 0.1 * s} for s in range(1, 5)]
    rows.insert(2, {"eval/global_step": 2, "eval/math500_pass1": 0.5})
    path.write_text("".join(json.dumps(x) + "\n" for x in rows))


def test_a_jsonl_log_whose_step_key_is_not_step_is_read_with_step_column(tmp_path):
    path = tmp_path / "openrlhf.jsonl"
    _openrlhf(path)
    with pytest.raises(TraceError, match=r":1: missing 'step'; the step looks to be 'train/global_step': name it "
                                         r"with --step-column train/global_step"):
        read_trace(path)
    verl = tmp_path / "verl.jsonl"  # (its timing_s/step, seconds, was offered as the step too; a probe)
    for lines in (1, 2):  # (one record alone: it said only the keys)
        verl.write_text("".join(json.dumps({"timing_s/step": 3.2, "training/global_step": s, "actor/kl_loss": 0.1})
                                + "\n" for s in range(1, lines + 1)))
        with pytest.raises(TraceError, match=r"missing 'step'; the step looks to be 'training/global_step': name it"):
            read_trace(verl)
    trace = read_trace(path, step_column="train/global_step")
    # The eval row's eval/global_step is its step; neither step key is a metric.
    assert [(r.step, r.metrics) for r in trace.records][1] == (2, {"train/reward": 0.2, "eval/math500_pass1": 0.5})
    assert trace.metric_names() == ["train/reward", "eval/math500_pass1"]
    args = build_parser().parse_args(["check", str(path), "--step-column", "train/global_step"])
    assert [r.step for r in _load_trace_file(str(path), args).records] == [1, 2, 3, 4]
    with pytest.raises(TraceError, match="missing 'train/step'"):
        read_trace(path, step_column="train/step")


def test_text_true_false_and_lists_inside_verls_data_are_left_out_with_one_warning(tmp_path):
    path = tmp_path / "verl.jsonl"
    rows = [{"step": s, "data": {"critic/score/mean": 0.5, "flags": {"is_nan": False}, "hist": [1, 2],
                                 "meta/model": "qwen", "actor/kl": "nan"}} for s in range(1, 4)]
    path.write_text("".join(json.dumps(x) + "\n" for x in rows))
    with pytest.warns(RuntimeWarning, match=r"left out 3 fields .*'flags/is_nan', 'hist', 'meta/model'.*line 1"):
        trace = read_trace(path)
    assert trace.metric_names() == ["critic/score/mean", "actor/kl"]  # ("nan" is a value, not text)
    path.write_text(json.dumps({"step": 1, "metrics": {"a": True}}) + "\n")
    with pytest.raises(TraceError, match="metric 'a': True is not a number"):  # the native box stays strict
        read_trace(path)


def test_a_tensorboard_tag_logged_twice_at_one_step_with_another_value_is_said_as_in_a_csv(tmp_path):
    """Gradient-accumulation micro-steps logged at one global step read as the last alone, unsaid, where the same
    rows in a CSV are said (a probe); the same value twice (a callback and the trainer) is no clash."""
    with SummaryWriter(str(tmp_path)) as w:
        for step in range(5):
            w.add_scalar("train/reward", 1.0, step)
            w.add_scalar("train/reward", 100.0, step)
            w.add_scalar("train/loss", 0.5, step)
            w.add_scalar("train/loss", 0.5, step)
    with pytest.warns(RuntimeWarning, match=r"5 values written twice at one step with a different value; the later is "
                                            r"kept \(the first: step 0, 'train/reward': 1, then 100\)") as caught:
        trace = read_trace(tmp_path)
    assert len([w for w in caught if "written twice" in str(w.message)]) == 1
    assert list(trace.column("train/reward")[1]) == [100.0] * 5


def test_a_wandb_export_with_the_trainers_global_step_is_read_by_it_not_by_wandbs_row_counter(tmp_path):
    """A probe (a TRL run's W&B export): W&B's Step counts its rows, one more for each evaluation's row, so the
    alarms and the picked checkpoint were 6 steps off at step 200 ("step 203", the row of training step 197), and
    train/global_step was watched as a stream; named with --step-column, W&B's Step was the stream instead."""
    rows = ["Step,train/global_step,train/reward,eval/accuracy"]
    k = 0
    for g in range(1, 61):
        rows.append(f"{k},{g},{0.5 + 0.001 * g},")
        k += 1
        if g % 25 == 0:
            rows.append(f"{k},{g},,0.7")
            k += 1
    path = tmp_path / "wandb.csv"
    path.write_text("\n".join(rows) + "\n")
    with pytest.warns(RuntimeWarning, match=r"read 'train/global_step' \(the trainer's\) as the step, not 'Step' "
                                            r"\(W&B's row counter; --step-column Step reads that\)"):
        trace = read_trace(path)
    assert [r.step for r in trace.records] == list(range(1, 61))
    assert trace.stream_names() == ["train/reward"]
    assert list(trace.column("eval/accuracy")[0]) == [25, 50]
    args = build_parser().parse_args(["check", str(path), "--step-column", "train/global_step"])
    assert _load_trace_file(str(path), args).stream_names() == ["train/reward"]  # (not W&B's Step)
    # an evaluation logged with wandb.log beside the trainer: its row has no train/global_step, and is at the last
    # one (it was dropped as a system row, the ground truth lost; a review); a row without W&B's step still is one
    path.write_text("Step,train/global_step,train/reward,eval/accuracy\n"
                    "0,1,0.5,\n1,2,0.5,\n2,,,0.7\n,,0.9,\n3,3,0.4,\n")
    with pytest.warns(UserWarning, match="1 row without a 'train/global_step' value skipped"):
        trace = read_trace(path)
    assert [(r.step, r.metrics.get("eval/accuracy")) for r in trace.records] == [(1, None), (2, 0.7), (3, None)]

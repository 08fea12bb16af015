import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from unittest import mock

import numpy as np
import pytest

from adaptive_eval.trace import Trace, TraceError, TraceRecord, TraceRecorder, read_trace, write_trace

NASTY = [0.0, -0.0, 1e-310, 5e-324, 1.7976931348623157e308, 0.1, 1 / 3, -2.5e-17, 123456789.123456789,
         math.nan, math.inf, -math.inf]


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))


def assert_same_records(got, want):
    assert [r.step for r in got] == [r.step for r in want]
    for g, w in zip(got, want):
        assert g.epoch == w.epoch and (g.time == w.time or same(g.time, w.time))
        assert list(g.metrics) == list(w.metrics), (g, w)
        assert all(same(g.metrics[k], w.metrics[k]) for k in w.metrics), (g, w)


def sample_records():
    recs = [TraceRecord(0, {"train/reward": 0.5, "eval/accuracy": 0.25}, epoch=0, time=0.0)]
    for i, x in enumerate(NASTY, start=1):
        recs.append(TraceRecord(i, {"train/reward": x}, epoch=i // 5, time=float(i) * 1.1))
    recs.append(TraceRecord(50, {"eval/accuracy": 0.75, "eval/accuracy:std": 0.4, "train/loss": math.nan}))
    recs.append(TraceRecord(51, {}))
    return recs


# ---------------------------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_recorder_round_trip_is_exact(tmp_path, suffix):
    path = tmp_path / f"run{suffix}"
    want = sample_records()
    with TraceRecorder(path) as rec:
        for r in want:
            rec.record(r.step, r.metrics, epoch=r.epoch, time=r.time)
    trace = read_trace(path)
    assert trace.source == str(path)
    # CSV orders metrics by column; compare as sets there.
    if suffix == ".csv":
        want = [TraceRecord(r.step, {k: r.metrics[k] for k in trace.records[i].metrics}, r.epoch, r.time)
                for i, r in enumerate(want)]
    assert_same_records(trace.records, want)


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".json"])
def test_write_trace_round_trip(tmp_path, suffix):
    want = sample_records()
    path = tmp_path / f"t{suffix}"
    write_trace(Trace(want, "mem"), path)
    got = read_trace(path).records
    assert [set(r.metrics) for r in got] == [set(r.metrics) for r in want]
    for g, w in zip(got, want):
        assert all(same(g.metrics[k], w.metrics[k]) for k in w.metrics)
    assert not list(tmp_path.glob("*.tmp"))
    write_trace(Trace(want[:2]), path)  # replaces
    assert len(read_trace(path)) == 2


def test_jsonl_is_strict_json_and_reads_python_nan_tokens(tmp_path):
    path = tmp_path / "t.jsonl"
    with TraceRecorder(path) as rec:
        rec.record(3, {"a": math.nan, "b": math.inf, "c": -math.inf}, time=1.0)
    line = path.read_text()
    assert json.loads(line, parse_constant=lambda tok: pytest.fail(f"non-standard token {tok}"))
    assert line == '{"step": 3, "time": 1.0, "metrics": {"a": "nan", "b": "inf", "c": "-inf"}}\n'
    path.write_text('{"step": 1, "metrics": {"a": NaN, "b": Infinity, "c": -Infinity, "d": null}}\n'
                    '{"step": 2, "x": 1.5}\n')
    r1, r2 = read_trace(path).records
    assert math.isnan(r1.metrics["a"]) and r1.metrics["b"] == math.inf and r1.metrics["c"] == -math.inf
    assert "d" not in r1.metrics  # null = not recorded
    assert r2.metrics == {"x": 1.5}  # flat objects are accepted too


def test_tensorboard_directory_round_trip(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    values = np.random.default_rng(0).normal(size=10_050)
    with SummaryWriter(str(tmp_path)) as w:
        for step, x in enumerate(values):  # more than the 10,000 TensorBoard keeps by default
            w.add_scalar("train/reward", float(x), step)
            if step % 100 == 0:
                w.add_scalar("eval/accuracy", 0.5, step)
        w.add_scalar("train/loss", float("nan"), 10_050)
    trace = read_trace(tmp_path)
    assert len(trace) == 10_051
    assert trace.steps().tolist() == list(range(10_051))
    steps, got = trace.column("train/reward")
    np.testing.assert_array_equal(got, values.astype(np.float32).astype(np.float64))  # event files hold float32
    assert trace.column("eval/accuracy")[0].tolist() == list(range(0, 10_050, 100))
    assert math.isnan(trace.records[-1].metrics["train/loss"])
    times = [r.time for r in trace]
    assert times[0] == 0.0 and all(a <= b for a, b in zip(times, times[1:]))
    assert trace.eval_names() == ["eval/accuracy"] and set(trace.stream_names()) == {"train/reward", "train/loss"}
    # A single event file reads the same.
    (event_file,) = tmp_path.glob("*tfevents*")
    assert len(read_trace(event_file)) == 10_051


def test_tensorboard_tensor_scalars(tmp_path):
    # TF2's tf.summary.scalar stores scalars as tensors of the "scalars" plugin.
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
    from tensorboard.util import tensor_util

    writer = EventFileWriter(str(tmp_path))
    for step in range(3):
        meta = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))
        value = summary_pb2.Summary.Value(tag="eval/accuracy", metadata=meta,
                                          tensor=tensor_util.make_tensor_proto(np.float64(0.1 * step)))
        writer.add_event(event_pb2.Event(step=step, wall_time=100.0 + step, summary=summary_pb2.Summary(value=[value])))
    writer.close()
    trace = read_trace(tmp_path)
    assert [r.metrics["eval/accuracy"] for r in trace] == [0.0, 0.1, 0.2]
    assert [r.time for r in trace] == [0.0, 1.0, 2.0]


def test_tensorboard_torn_event_file_reads_the_complete_events(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(str(tmp_path)) as w:
        for step in range(50):
            w.add_scalar("train/loss", float(step), step)
    (event_file,) = tmp_path.glob("*tfevents*")
    os.truncate(event_file, event_file.stat().st_size - 7)  # a crash mid-record
    assert read_trace(tmp_path).steps().tolist() == list(range(49))


def test_tensorboard_errors(tmp_path):
    (tmp_path / "run1").mkdir()
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(str(tmp_path / "run1")) as w:
        w.add_text("note", "no scalars", 0)
    with pytest.raises(TraceError, match="holds no event files.*run1"):
        read_trace(tmp_path)
    with pytest.raises(TraceError, match="no records"):
        read_trace(tmp_path / "run1")


# ---------------------------------------------------------------------------------------------- reading rules


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_csv_cells_and_columns(tmp_path):
    path = write(tmp_path, "t.csv", "step,epoch,time,train/reward,eval/acc,eval/acc:std\r\n"
                                    "0,0,0.5,1.5,,\r\n"
                                    "10.0, 1 , , nan ,0.5,0.1\r\n"
                                    "12,,,-inf,,\r\n")
    trace = read_trace(path)
    assert [(r.step, r.epoch, r.time) for r in trace] == [(0, 0, 0.5), (10, 1, None), (12, None, None)]
    assert trace.records[0].metrics == {"train/reward": 1.5}
    assert math.isnan(trace.records[1].metrics["train/reward"]) and trace.records[1].metrics["eval/acc"] == 0.5
    assert trace.metric_names() == ["train/reward", "eval/acc", "eval/acc:std"]
    assert trace.eval_names() == ["eval/acc"] and trace.stream_names() == ["train/reward"]
    assert trace.column("eval/acc:std")[1].tolist() == [0.1]


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_duplicate_steps_merge_last_write_wins(tmp_path, suffix):
    path = tmp_path / f"t{suffix}"
    with TraceRecorder(path) as rec:
        rec.record(5, {"a": 1.0, "b": 2.0}, time=1.0)
        rec.record(5, {"b": 3.0, "c": 4.0}, epoch=0)
        rec.record(6, {"a": 0.0})
    with pytest.warns(RuntimeWarning, match=r"1 value written twice at one step with a different value; the later is "
                                            r"kept \(the first: step 5, 'b': 2, then 3\), and a replay sees it alone"):
        r5, r6 = read_trace(path).records
    assert (r5.step, r5.metrics, r5.epoch, r5.time) == (5, {"a": 1.0, "b": 3.0, "c": 4.0}, 0, 1.0)
    assert r6.metrics == {"a": 0.0}


@pytest.mark.parametrize("suffix,good,torn", [
    (".csv", "step,a,b\n1,0.5,1\n2,0.25,2\n", "3,0.1"),
    (".jsonl", '{"step": 1, "metrics": {"a": 0.5}}\n{"step": 2, "metrics": {"a": 0.25}}\n', '{"step": 3, "metr'),
])
def test_torn_last_line_is_dropped_with_a_warning(tmp_path, suffix, good, torn):
    path = write(tmp_path, f"t{suffix}", good + torn)
    with pytest.warns(RuntimeWarning, match=r"t\%s:4?3?: dropped a torn last line" % suffix):
        trace = read_trace(path)
    assert [r.step for r in trace] == [1, 2]
    # The same line with its newline is not a crash artefact: an error.
    path.write_text(good + torn + "\n")
    with pytest.raises(TraceError, match=rf"t\{suffix}:\d+:"):
        read_trace(path)


def test_complete_last_line_without_newline_is_kept(tmp_path):
    """A script that joins its lines leaves the last without a newline: kept.  A CSV line cut by a crash inside its
    last cell parses too ("2,3" of "2,3.5"): read unsaid (a probe), it is now said, naming the line."""
    with pytest.warns(RuntimeWarning, match=r"t\.csv:3: the last line has no newline at its end: read as it is "
                                            r"\(2,3\), but if the run crashed while writing it, its last value may "
                                            r"be cut"):
        assert len(read_trace(write(tmp_path, "t.csv", "step,a\n1,2\n2,3"))) == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (a JSON line cut anywhere does not parse: nothing to say)
        assert len(read_trace(write(tmp_path, "t.jsonl", '{"step": 1}\n{"step": 2}'))) == 2


def test_a_last_line_cut_inside_a_character_is_a_torn_line_not_a_file_that_is_not_utf8(tmp_path):
    """A probe: a JSONL trace whose last line a crash cut inside a non-ASCII character (a metric named by another
    script, ensure_ascii=False) was refused whole ("not UTF-8 text ...; save the trace as UTF-8")."""
    whole = '{"step": 1, "metrics": {"récompense": 0.5}}\n{"step": 2, "metrics": {"récompense": 0.25}}\n'
    cut = (whole + '{"step": 3, "metrics": {"ré').encode()[:-1]
    path = tmp_path / "t.jsonl"
    path.write_bytes(cut)
    with pytest.warns(RuntimeWarning, match=r"t\.jsonl:3: dropped a torn last line \(no newline at its end, cut "
                                            r"inside a character \(byte 0xc3\)\)"):
        assert [r.metrics["récompense"] for r in read_trace(path)] == [0.5, 0.25]
    path.write_bytes(cut + b"\n")  # (not at the end: still a file that is not UTF-8)
    with pytest.raises(TraceError, match=r"t\.jsonl:3: not UTF-8 text"):
        read_trace(path)


def test_the_smallest_int64_step_is_read(tmp_path):
    """-2**63 is an int64: refused as "beyond the largest" by the first range check (a review)."""
    assert read_trace(write(tmp_path, "t.csv", f"step,a\n{-2**63},0.5\n0,0.5\n")).records[0].step == -2**63


@pytest.mark.parametrize("name,text,match", [
    ("t.csv", "step,a\n1,0.5\n2,0.5,7\n3,0.5\n", r"t\.csv:3: expected 2 fields, got 3"),
    ("t.csv", 'step,a\n1,0.5\n2,"x\n3,0.5\n', r"t\.csv:\d+:"),
    ("t.jsonl", '{"step": 1}\n{"step": 2,,}\n{"step": 3}\n', r"t\.jsonl:2: malformed JSON"),
    ("t.jsonl", '{"step": 1}\n[1, 2]\n{"step": 3}\n', r"t\.jsonl:2: expected a JSON object"),
    ("t.csv", "time,a\n1,0.5\n", r"t\.csv:1: missing 'step' column"),
    ("t.jsonl", '{"step": 1}\n{"metrics": {"a": 1}}\n', r"t\.jsonl:2: missing 'step'"),
    ("t.csv", "step,a\n1,0.5\n5,0.5\n4,0.5\n", r"t\.csv:4: step 4 is below the previous step 5"),
    ("t.jsonl", '{"step": 5}\n{"step": 4}\n', r"t\.jsonl:2: step 4 is below the previous step 5"),
    ("t.csv", "step,train/reward\n1,0.5\n2,high\n", r"t\.csv:3: column 'train/reward': 'high' is not a number"),
    ("t.jsonl", '{"step": 1, "metrics": {"r": "high"}}\n', r"t\.jsonl:1: metric 'r': 'high' is not a number"),
    ("t.jsonl", '{"step": 1, "metrics": {"r": true}}\n', r"t\.jsonl:1: metric 'r': True is not a number"),
    ("t.csv", "step,a\n1.5,0.5\n", r"t\.csv:2: step '1.5' is not an integer"),
    ("t.csv", "step,a\n,0.5\n", r"t\.csv:2: empty 'step' cell"),
    # (a step beyond 64 bits was read, then crashed the CLI's notes with an OverflowError; a probe)
    ("t.csv", f"step,a\n0,0.5\n{2**63},0.5\n", r"t\.csv:3: step '9223372036854775808' is beyond the largest"),
    ("t.csv", "step,a\n0,0.5\n1e30,0.5\n", r"t\.csv:3: step '1e30' is beyond the largest"),
    ("t.jsonl", '{"step": 0}\n{"step": 1e30}\n', r"t\.jsonl:2: step 1e\+30 is beyond the largest"),
    # (an integer beyond float range raised OverflowError in float(): a traceback, exit 1; a probe)
    ("t.jsonl", '{"step": 0}\n{"step": 1%s}\n' % ("0" * 400), r"t\.jsonl:2: step '1000000000\.\.\.\(401 digits\)' is "
     "beyond the largest"),
    ("t.jsonl", '{"step": 0, "epoch": 1%s}\n' % ("0" * 400), r"t\.jsonl:1: epoch '1000000000\.\.\.\(401 digits\)' is "
     "beyond the largest"),
    ("t.csv", "step,epoch,a\n0,1e300,0.5\n", r"t\.csv:2: epoch '1e300' is beyond the largest"),
    ("t.csv", "step,a,a\n1,2,3\n", r"t\.csv:1: duplicate column"),
    ("t.jsonl", '{"step": 1, "reason": "x", "metrics": {}}\n', r"t\.jsonl:1: unexpected key"),
    ("t.csv", "", r"t\.csv: no records"),
    ("t.csv", "step,a\n", r"t\.csv: no records"),
    ("t.csv", "step,a\n\n\n", r"t\.csv: no records"),
    ("t.jsonl", "\n\n", r"t\.jsonl: no records"),
])
def test_bad_input_names_file_and_line(tmp_path, name, text, match):
    path = write(tmp_path, name, text)
    with pytest.raises(TraceError, match=match) as info:
        read_trace(path)
    assert isinstance(info.value, ValueError) and info.value.path == str(path)


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_trace(tmp_path / "nope.csv")


def test_truncation_at_any_byte_reads_a_prefix(tmp_path):
    path = tmp_path / "t.jsonl"
    with TraceRecorder(path) as rec:
        for step in range(6):
            rec.record(step, {"train/reward": step / 7, "train/loss": math.nan})
    data = path.read_bytes()
    lines = data.splitlines(keepends=True)
    for cut in range(len(lines[0]) + 1, len(data) + 1):
        path.write_bytes(data[:cut])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trace = read_trace(path)
        complete = data[:cut].count(b"\n") + (1 if data[:cut].endswith(b"}}") else 0)
        assert [r.step for r in trace] == list(range(complete)), cut


def test_read_is_fast(tmp_path):
    # 1M rows take ~3 s of CPU; this guards against accidental quadratic or per-cell slow paths.
    n = 100_000
    rng = np.random.default_rng(0).random((n, 3)).tolist()
    path = tmp_path / "big.csv"
    path.write_text("step,a,b,eval/c\n" + "".join(f"{i},{a!r},{b!r},{c!r}\n" for i, (a, b, c) in enumerate(rng)))
    t0 = time.process_time()  # CPU time: other processes on a shared machine do not count
    trace = read_trace(path)
    assert time.process_time() - t0 < 3.0
    assert len(trace) == n and trace.records[-1].metrics["eval/c"] == rng[-1][2]


# ---------------------------------------------------------------------------------------------- recorder


def test_recorder_writes_each_record_with_one_write_and_optional_fsync(tmp_path):
    path = tmp_path / "t.csv"
    with mock.patch("adaptive_eval.trace.os.write", wraps=os.write) as wr, \
            mock.patch("adaptive_eval.trace.os.fsync", wraps=os.fsync) as fs:
        rec = TraceRecorder(path, fsync=True)
        rec.record(0, {"a": 1.0})
        rec.record(1, {"a": 2.0})
        assert wr.call_count == 2 and fs.call_count == 2
        # Visible to a reader before close.
        assert [r.metrics["a"] for r in read_trace(path)] == [1.0, 2.0]
        rec.close()
        rec.close()
    with pytest.raises(ValueError, match="closed"):
        rec.record(2, {"a": 1.0})


def test_recorder_rejects_bad_values(tmp_path):
    rec = TraceRecorder(tmp_path / "t.jsonl")
    with pytest.raises(TypeError, match="'train/reward'.*str"):
        rec.record(0, {"train/reward": "0.5"})
    with pytest.raises(TypeError, match="'flag'.*bool"):
        rec.record(0, {"flag": True})
    with pytest.raises(TypeError, match="'vec'"):
        rec.record(0, {"vec": [1.0, 2.0]})
    with pytest.raises(ValueError, match="reserved"):
        rec.record(0, {"time": 1.0})
    with pytest.raises(TypeError, match="step"):
        rec.record(1.5, {})
    rec.record(3, {"x": np.float32(0.5), "y": np.int64(2), "z": np.array(1.5)})
    with pytest.raises(ValueError, match="step 2 is below the previous step 3"):
        rec.record(2, {})
    rec.close()
    assert read_trace(tmp_path / "t.jsonl").records[0].metrics == {"x": 0.5, "y": 2.0, "z": 1.5}
    with pytest.raises(ValueError, match="suffix"):
        TraceRecorder(tmp_path / "t.txt")


def test_recorder_accepts_torch_scalars(tmp_path):
    import torch

    with TraceRecorder(tmp_path / "t.csv") as rec:
        rec.record(0, {"loss": torch.tensor(0.25), "acc": torch.tensor([0.5])})
    assert read_trace(tmp_path / "t.csv").records[0].metrics == {"loss": 0.25, "acc": 0.5}


def test_csv_new_metric_extends_the_header(tmp_path):
    path = tmp_path / "t.csv"
    with TraceRecorder(path) as rec:
        rec.record(0, {"train/reward": 0.5})
        rec.record(1, {"train/reward": 0.6})
        rec.record(50, {"train/reward": 0.7, "eval/accuracy": 0.4})
    assert path.read_text().splitlines() == ["step,epoch,time,train/reward,eval/accuracy",
                                             "0,,,0.5,", "1,,,0.6,", "50,,,0.7,0.4"]
    assert not list(tmp_path.glob("*.tmp"))


def test_csv_fixed_columns_reject_new_metrics(tmp_path):
    path = tmp_path / "t.csv"
    rec = TraceRecorder(path, columns=["train/reward", "eval/accuracy"])
    assert path.read_text() == "step,epoch,time,train/reward,eval/accuracy\n"
    rec.record(0, {"eval/accuracy": 0.5})
    with pytest.raises(ValueError, match=r"\['train/kl'\] are not among the CSV columns"):
        rec.record(1, {"train/kl": 0.1})
    rec.close()
    assert len(read_trace(path)) == 1


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_recorder_continues_an_existing_file_and_cuts_a_torn_tail(tmp_path, suffix):
    path = tmp_path / f"t{suffix}"
    with TraceRecorder(path) as rec:
        rec.record(0, {"a": 1.0})
        rec.record(1, {"a": 2.0})
    with open(path, "ab") as f:
        f.write(b'5,,' if suffix == ".csv" else b'{"step": 5, "met')  # crash mid-write
    with pytest.warns(RuntimeWarning, match="torn"):
        rec = TraceRecorder(path)
    rec.record(2, {"a": 3.0})
    with pytest.raises(ValueError, match="below the previous step 2"):
        rec.record(0, {"a": 0.0})
    rec.close()
    assert [r.metrics["a"] for r in read_trace(path)] == [1.0, 2.0, 3.0]


def test_sigkill_leaves_a_readable_trace(tmp_path):
    path = tmp_path / "t.csv"
    code = textwrap.dedent(f"""
        import sys
        from adaptive_eval.trace import TraceRecorder
        rec = TraceRecorder({str(path)!r})
        i = 0
        while True:
            rec.record(i, {{"train/reward": i / 3, "train/loss": 1e-3 * i}})
            if i == 200:
                print("ready", flush=True)
            i += 1
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"ready"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace = read_trace(path)
    assert len(trace) > 200 and trace.steps().tolist() == list(range(len(trace)))


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_a_resumed_run_replaces_the_rows_recorded_after_its_checkpoint(tmp_path, suffix):
    """Training went back to the checkpoint of step 5 after recording up to step 9: the recorder opened on the
    trace used to refuse step 5 ("below the previous step 9"; record_to logged it and lost every re-run step)."""
    path = tmp_path / f"t{suffix}"
    with TraceRecorder(path) as rec:
        for t in range(10):
            rec.record(t, {"a": float(t)})
    with pytest.warns(RuntimeWarning, match=r"resumed run records step 5, below the last recorded step 9: the 5 "
                                            r"row\(s\) from step 5 on, of the run before, are replaced"):
        rec = TraceRecorder(path)
        rec.record(5, {"a": 50.0, "b": 1.0})
    for t in range(6, 12):
        rec.record(t, {"a": 10.0 * t})
    with pytest.raises(ValueError, match="below the previous step 11"):  # within one run, still an error
        rec.record(3, {"a": 0.0})
    rec.close()
    trace = read_trace(path)
    assert [r.step for r in trace] == list(range(12))
    assert [r.metrics["a"] for r in trace] == [0.0, 1.0, 2.0, 3.0, 4.0] + [10.0 * t for t in range(5, 12)]
    superseded = read_trace(tmp_path / f"t.superseded-1{suffix}")
    assert [(r.step, r.metrics["a"]) for r in superseded] == [(t, float(t)) for t in range(5, 10)]
    # A second resume, after a column was added (CSV: rewritten wider), and under warnings as errors: the record
    # is written before the warning is raised, so nothing is lost; each resume's rows are a trace of their own.
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rec = TraceRecorder(path)
        with pytest.raises(RuntimeWarning, match="resumed run records step 8"):
            rec.record(8, {"a": 80.0, "c": 1.0})
        rec.record(9, {"a": 90.0})
        rec.close()
    assert [(r.step, r.metrics["a"]) for r in read_trace(path)][-3:] == [(7, 70.0), (8, 80.0), (9, 90.0)]
    second = read_trace(tmp_path / f"t.superseded-2{suffix}")
    assert [r.step for r in second] == [8, 9, 10, 11] and second.records[0].metrics.get("b") is None


def test_an_evaluator_resumed_from_its_state_records_on_into_the_same_trace(tmp_path):
    from adaptive_eval import AdaptiveEvaluator, load_config

    path = tmp_path / "run.csv"
    cfg = load_config(overrides=["trigger.freq_steps=4"])
    first = AdaptiveEvaluator.from_config(cfg)
    first.record_to(path)
    state = None
    for t in range(10):
        first.observe({"loss": 1.0}, t)
        first.evaluate(lambda: {"acc": [1, 0, 1, 1]}, 0, t, t)
        if t == 5:
            state = first.state_dict()
    first.close()
    resumed = AdaptiveEvaluator.from_config(cfg)
    resumed.load_state_dict(state)
    with pytest.warns(RuntimeWarning, match="resumed run records step 6"):
        resumed.record_to(path)
        resumed.observe({"loss": 2.0}, 6)
    for t in range(7, 12):
        resumed.observe({"loss": 2.0}, t)
        resumed.evaluate(lambda: {"acc": [1, 0, 1, 1]}, 0, t, t)
    resumed.close()
    trace = read_trace(path)
    assert [r.step for r in trace] == list(range(12))
    assert [r.metrics["loss"] for r in trace] == [1.0] * 6 + [2.0] * 6
    assert resumed.summary()["record_errors"] == 0


def test_a_trace_error_the_careful_reader_finds_is_not_chained_to_the_fast_readers_internal_exception(tmp_path):
    """A probe: pytest showed ``adaptive_eval.trace._Fallback`` first, then "During handling of the above exception,
    another exception occurred", before the clear error naming file and line."""
    path = tmp_path / "shuffled.csv"
    path.write_text("step,loss\n0,1.0\n2,1.0\n1,1.0\n")
    with pytest.raises(TraceError, match="shuffled.csv:4") as info:
        read_trace(path)
    assert info.value.__context__ is None


def test_rows_repeating_a_step_are_merged_by_the_fast_reader_as_by_the_careful_one(tmp_path):
    """A long-run probe: record_to writes an epoch row and each evaluation's row at a step already written, so every
    recorded trace took the row-by-row reader (3.2x slower on 200,000 steps).  The fast reader merges such rows as
    the careful one does; a value written twice with another value still goes to the careful one, which says so."""
    from adaptive_eval import trace as trace_mod

    path = tmp_path / "t.csv"
    rows = ["step,epoch,time,train/loss,eval/acc"]
    for s in range(300):
        rows.append(f"{s},0,{s * 1.5},{1.0 + 0.001 * s},")
        if s % 25 == 0:
            rows.append(f"{s},,,,{0.5 + s / 1000}")  # (an evaluation's row at a step already written)
    path.write_text("\n".join(rows) + "\n")
    careful = trace_mod._read_csv_careful(path, path.read_text(), rows[0].split(","))
    with mock.patch.object(trace_mod, "_read_csv_careful", side_effect=AssertionError("the careful reader")):
        fast = read_trace(path)
    assert [(r.step, r.metrics, r.epoch, r.time) for r in fast.records] == \
        [(r.step, r.metrics, r.epoch, r.time) for r in careful] and len(fast.records) == 300
    rows.append("299,,,2.0,")  # (the loss written twice with another value: said, by the careful reader)
    path.write_text("\n".join(rows) + "\n")
    with pytest.warns(RuntimeWarning, match="written twice at one step with a different value"):
        assert read_trace(path).records[-1].metrics["train/loss"] == 2.0


def test_hfs_tensorboard_folder_reads_each_result_at_its_weights_step_beside_hfs_own_evaluations(tmp_path):
    """A review: HF's own evaluations beside the callback's (eval_strategy="steps") were dropped, and a metric of the
    user's ending in _n was read as bookkeeping.  HF's go to the 0-based step of their weights (step - 1; HF's, on
    the whole set, kept where both measured a step), the callback's to eval/adaptive_step, and only a metric's own
    _ci_low/_ci_high/_n beside it are bookkeeping."""
    from torch.utils.tensorboard import SummaryWriter

    from adaptive_eval.trace import read_trace

    with SummaryWriter(str(tmp_path)) as w:
        for s in range(12):
            w.add_scalar("streams/train/loss", 1.0 - s / 100, s)
        # HF's own evaluation at its step 4 (the weights after 4 steps: 0-based 3), the callback's at 5 (of the
        # weights of step 4), and both at 12, the callback's first, HF's after it (as HF logs them)
        for tag, value, step in [("eval/accuracy", 0.48, 4), ("eval/accuracy", 0.41, 5),
                                 ("eval/accuracy_ci_low", 0.3, 5), ("eval/accuracy_n", 32.0, 5),
                                 ("eval/adaptive_step", 4.0, 5), ("eval/adaptive_items", 32.0, 5),
                                 ("eval/recall_n", 0.7, 5), ("eval/accuracy", 0.47, 12),
                                 ("eval/adaptive_step", 11.0, 12), ("eval/accuracy", 0.5, 12)]:
            w.add_scalar(tag, value, step)
    trace = read_trace(tmp_path)
    measured = {r.step: {k: v for k, v in r.metrics.items() if k.startswith("eval/")} for r in trace.records}
    assert {s: m for s, m in measured.items() if m} == {
        3: {"eval/accuracy": pytest.approx(0.48)},
        4: {"eval/accuracy": pytest.approx(0.41), "eval/recall_n": pytest.approx(0.7)},
        11: {"eval/accuracy": pytest.approx(0.5)}}
    assert max(r.step for r in trace.records) == 11


def test_hfs_folder_without_the_callbacks_own_file_and_with_a_named_callback_reads_results_at_their_steps(tmp_path):
    """Probes: with AdaptiveEvalCallback(tensorboard=False) HF's folder has no streams/, and was read as another
    tool's log: each result at HF's 1-based step and its bookkeeping (_ci_low, _n, adaptive_step) as 20 eval
    metrics; and where an unnamed and a name="hard" callback logged at one step, eval/hard_adaptive_items was read
    as a metric (the prefix eval/ matched first).  HF's training scalars go to the 0-based step, as observed."""
    from torch.utils.tensorboard import SummaryWriter

    from adaptive_eval.trace import read_trace

    with SummaryWriter(str(tmp_path)) as w:
        for s in range(1, 13):
            w.add_scalar("train/loss", 1.0 - s / 100, s)
        for tag, value, step in [("eval/accuracy", 0.41, 5), ("eval/accuracy_ci_low", 0.3, 5),
                                 ("eval/accuracy_n", 32.0, 5), ("eval/adaptive_step", 4.0, 5),
                                 ("eval/adaptive_items", 32.0, 5), ("eval/hard_accuracy", 0.2, 5),
                                 ("eval/hard_accuracy_ci_high", 0.3, 5), ("eval/hard_adaptive_step", 4.0, 5),
                                 ("eval/hard_adaptive_items", 16.0, 5), ("eval/accuracy", 0.5, 12),
                                 ("eval/adaptive_step", 11.0, 12)]:
            w.add_scalar(tag, value, step)
    trace = read_trace(tmp_path)
    assert trace.eval_names() == ["eval/accuracy", "eval/hard_accuracy"]
    measured = {r.step: {k: v for k, v in r.metrics.items() if k.startswith("eval/")} for r in trace.records}
    assert {s: m for s, m in measured.items() if m} == {
        4: {"eval/accuracy": pytest.approx(0.41), "eval/hard_accuracy": pytest.approx(0.2)},
        11: {"eval/accuracy": pytest.approx(0.5)}}
    loss = {r.step: r.metrics["train/loss"] for r in trace.records if "train/loss" in r.metrics}
    assert sorted(loss) == list(range(12)) and loss[0] == pytest.approx(0.99)
    assert all(r.time is not None for r in trace.records)

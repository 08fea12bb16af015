"""Trace files as users have them: other line endings and encodings; bad requests."""

import json
import math
import re
import subprocess
import sys

import pytest

from adaptive_eval import EvalRequest
from adaptive_eval.convert import from_columns
from adaptive_eval.trace import TraceError, read_trace


@pytest.mark.parametrize("ending", ["\n", "\r\n", "\r"])
def test_any_line_ending_reads_the_same(tmp_path, ending):
    (tmp_path / "t.csv").write_bytes(ending.join(["step,loss", "0,1.0", "1,2.0", ""]).encode())
    trace = read_trace(tmp_path / "t.csv")
    assert [(r.step, r.metrics["loss"]) for r in trace] == [(0, 1.0), (1, 2.0)]
    other = from_columns(tmp_path / "t.csv", step="step", streams=["loss"])
    assert [(r.step, r.metrics["loss"]) for r in other] == [(0, 1.0), (1, 2.0)]


def test_a_file_that_is_not_utf8_is_a_trace_error_naming_file_and_line(tmp_path):
    (tmp_path / "t.csv").write_bytes(b"step,loss\n0,1.0\n1,\xff2.0\n")
    with pytest.raises(TraceError, match=r"t\.csv:3: not UTF-8 text \(byte 0xff"):
        read_trace(tmp_path / "t.csv")
    with pytest.raises(TraceError, match=r"t\.csv:3: not UTF-8"):
        from_columns(tmp_path / "t.csv", step="step", streams=["loss"])


@pytest.mark.parametrize("content", [b"step,loss\r0,1.0\r1,2.0\r", b"step,loss\n0,1.0\n1,\xff2.0\n",
                                     b"time,loss\n0,1.0\n"])
def test_replay_of_an_odd_file_is_a_clear_message_and_exit_2_or_a_replay(tmp_path, content):
    (tmp_path / "t.csv").write_bytes(content)
    proc = subprocess.run([sys.executable, "-m", "adaptive_eval.cli", "replay", str(tmp_path / "t.csv"), "--out",
                           str(tmp_path / "out"), "--no-tensorboard"], capture_output=True, text=True, timeout=120)
    assert "Traceback" not in proc.stderr
    if b"\xff" in content:
        assert proc.returncode == 2 and "t.csv:3: not UTF-8" in proc.stderr
    elif content.startswith(b"time"):
        assert proc.returncode == 2 and "--step-column" in proc.stderr  # says how to read another tool's CSV
    else:
        assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("text,sep", [("step;loss;eval/acc\n0;1,0;0,5\n", ";"), ("step\tloss\n0\t1.0\n", "\t")])
def test_a_file_separated_by_semicolons_or_tabs_is_named_as_such(tmp_path, text, sep):
    """A European spreadsheet's export was "missing 'step' column", with a hint (--step-column) that could
    not work: the header was read as one column."""
    (tmp_path / "t.csv").write_text(text)
    want = rf"t\.csv:1: the header is one column, .*: the file is separated by {re.escape(repr(sep))}, not by commas"
    with pytest.raises(TraceError, match=want):
        read_trace(tmp_path / "t.csv")
    with pytest.raises(TraceError, match=want):
        from_columns(tmp_path / "t.csv", step="step", streams=["loss"])


def test_a_date_column_read_as_a_number_says_it_is_a_date_and_how_to_read_it(tmp_path):
    """A ``date,value`` series read with --step-column none said only "'2000-01-01' is not a number" (a new-user
    probe); the hint it gives now reads the file."""
    path = tmp_path / "dated.csv"
    path.write_text("date,value\n" + "".join(f"2000-01-{d:02d},{d % 3}\n" for d in range(1, 29)))
    with pytest.raises(TraceError, match=r"dated\.csv:2: column 'date': '2000-01-01' is not a number \(a date, not "
                                         r"a metric: name the columns to watch with --stream COL"):
        from_columns(path, step=None, streams=["date", "value"])
    with pytest.warns(RuntimeWarning, match=r"left out 1 column that held text alone \('date'\).*'date' held dates: "
                                            r"a date column named 'time' is the run's clock"):
        assert [sorted(r.metrics) for r in from_columns(path, step=None).records] == [["value"]] * 28
    with pytest.raises(TraceError, match=r"'date' '2000-01-01' is not a number \(a date is not a step: "
                                         r"--step-column none numbers the rows"):
        from_columns(path, step="date")
    assert len(from_columns(path, step=None, streams=["value"]).records) == 28
    path.write_text("step,date,value\n0,2000-01-01,1\n1,5,2\n")  # the native format, a date among numbers
    with pytest.raises(TraceError, match=r"'2000-01-01' is not a number \(a date, not a metric"):
        read_trace(path)
    path.write_text("step,name,value\n0,1.5,1\n1,2000-13-45x,1\n")  # not a date: no hint
    with pytest.raises(TraceError, match=r"dated\.csv:3: column 'name': '2000-13-45x' is not a number$"):
        read_trace(path)


def test_a_csv_column_of_text_alone_is_left_out_said_as_jsonl_text_is(tmp_path):
    """A run's name or phase in a CSV refused the whole file, while a JSONL record's text fields were left out
    (found by a new-user probe); a column of numbers with a text cell is still an error naming its line, and the
    per-problem hint still comes with rows that repeat a step."""
    path = tmp_path / "run.csv"
    path.write_text("step,run,loss,phase\n1,a,0.5,warm\n2,a,0.4,\n3,a,0.3,NA\n4,a,0.2,main\n")
    with pytest.warns(RuntimeWarning, match=r"run\.csv: left out 2 columns that held text alone \('run', 'phase'\): "
                                            r"a record's metadata, not metrics$"):
        trace = read_trace(path)
    assert [r.metrics for r in trace.records] == [{"loss": v} for v in (0.5, 0.4, 0.3, 0.2)]
    jsonl = tmp_path / "run.jsonl"
    jsonl.write_text("".join(json.dumps({"step": s, "run": "a", "loss": v}) + "\n"
                             for s, v in ((1, 0.5), (2, 0.4), (3, 0.3), (4, 0.2))))
    with pytest.warns(RuntimeWarning, match="left out 1 field that held text"):
        assert [r.metrics for r in read_trace(jsonl).records] == [r.metrics for r in trace.records]
    # W&B's export (from_columns, its streams found by itself) reads the same way; a column named is still read
    wandb = tmp_path / "wandb.csv"
    wandb.write_text("_step,run,train/loss\n1,a,0.5\n2,a,0.4\n")
    with pytest.warns(RuntimeWarning, match=r"left out 1 column that held text alone \('run'\)"):
        assert [r.metrics for r in read_trace(wandb).records] == [{"train/loss": 0.5}, {"train/loss": 0.4}]
    with pytest.raises(TraceError, match=r"wandb\.csv:2: column 'run': 'a' is not a number"):
        from_columns(wandb, step="_step", streams=["run", "train/loss"])
    path.write_text("step,loss\n1,0.5\n2,0.4\n3,oops\n")
    with pytest.raises(TraceError, match=r"run\.csv:4: column 'loss': 'oops' is not a number \(text, not a metric"):
        read_trace(path)
    path.write_text("step,loss,eval/acc\n1,0.5,40.0%\n2,0.4,\n")  # (an eval result as text: an error; a review)
    with pytest.raises(TraceError, match=r"run\.csv:2: column 'eval/acc': '40\.0%' is not a number"):
        read_trace(path)


@pytest.mark.parametrize("kwargs, message", [
    ({"sample_size": -1}, "sample_size must be >= 0"),
    ({"world_size": 0}, "world_size must be >= 1"),
    ({"rank": 2, "world_size": 2}, r"rank must lie in \[0, world_size=2\)"),
    ({"rank": -1, "world_size": 2}, "rank must lie in"),
    ({"sample_size": 2.5}, "sample_size must be an integer"),
])
def test_an_impossible_request_is_a_value_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        EvalRequest(**{"step": 0, "sample_size": None, "seed": 0, "reason": "x", **kwargs})


def test_a_negative_seed_is_a_value_error_naming_it():
    # Found in the adversarial pass: numpy's "expected non-negative integer" named neither the field nor the value.
    with pytest.raises(ValueError, match="EvalRequest.seed must be >= 0, got -1"):
        EvalRequest(step=0, sample_size=3, seed=-1, reason="x")


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=200, deadline=None)
@given(num_items=st.integers(0, 300), world=st.integers(1, 9), small=st.integers(0, 400), extra=st.integers(0, 400),
       seed=st.integers(0, 2**40))
def test_request_shards_are_disjoint_cover_the_sample_and_nest(num_items, world, small, extra, seed):
    def shards(size):
        return [EvalRequest(step=0, sample_size=size, seed=seed, reason="x", rank=r, world_size=world).indices(num_items)
                for r in range(world)]

    parts = shards(small)
    flat = [i for p in parts for i in p]
    assert len(flat) == len(set(flat)) == min(small, num_items)
    assert max(map(len, parts)) - min(map(len, parts)) <= 1
    bigger = {i for p in shards(small + extra) for i in p}
    assert set(flat) <= bigger  # a larger sample extends the same items


def test_rows_repeating_a_step_with_different_values_are_merged_with_a_warning(tmp_path):
    """Found by a new user: an evaluations CSV with 10 episodes per timestep read as the last episode alone
    (-21.0 where the 10 averaged -20.2), without a word.  Rows repeating a step are still merged (a logger may
    write a step's metrics in two rows), but a value overwritten by a different one is said."""
    import warnings

    from adaptive_eval.convert import from_columns
    from adaptive_eval.trace import read_trace

    path = tmp_path / "dup.csv"
    path.write_text("timesteps,train/loss,eval/accuracy\n0,1,.5\n1,1.0,0.5\n1,9.0,0.1\n2,1,\n2,,0.4\n")
    with pytest.warns(RuntimeWarning, match=r"2 values written twice at one step with a different value; "
                                            r"the later is kept \(the first: step 1, 'train/loss': 1, then 9\)"):
        trace = from_columns(path, step="timesteps")
    assert trace.records[1].metrics == {"train/loss": 9.0, "eval/accuracy": 0.1}
    same = tmp_path / "same.csv"
    same.write_text("timesteps,train/loss\n0,1\n1,2\n1,2\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(from_columns(same, step="timesteps").records) == 2
        same_native = tmp_path / "same_native.jsonl"
        same_native.write_text('{"step": 0, "train/loss": 1}\n{"step": 0, "train/loss": 1, "eval/acc": 0.5}\n')
        assert read_trace(same_native).records[0].metrics == {"train/loss": 1.0, "eval/acc": 0.5}
    # The native format (a CSV whose step column is 'step', JSONL) says it too: it was silent, where the same
    # data under W&B's 'Step' header warned (found by a new-user probe; a replay saw only the later value)
    for name, text in (("native.csv", "step,train/loss\n0,1\n1,2\n1,3\n"),
                       ("native.jsonl", '{"step": 0, "train/loss": 1}\n{"step": 1, "train/loss": 2}\n'
                                        '{"step": 1, "train/loss": 3}\n'),
                       ("unterminated.csv", "step,train/loss\n0,1\n1,2\n1,3\n2,1")):
        native = tmp_path / name
        native.write_text(text)
        with pytest.warns(RuntimeWarning, match=r"1 value written twice at one step with a different value; the "
                                                r"later is kept \(the first: step 1, 'train/loss': 2, then 3\)"):
            assert read_trace(native).records[1].metrics == {"train/loss": 3.0}


def test_naming_streams_keeps_the_traces_own_eval_ground_truth(tmp_path):
    """--stream train/loss dropped the trace's eval/accuracy column, and replay then said the trace had no
    eval/<metric> column (check exited 2; tune and benchmarks/policies.py refused the trace)."""
    from adaptive_eval.convert import from_columns, select_columns
    from adaptive_eval.trace import read_trace

    path = tmp_path / "run.csv"
    path.write_text("step,train/loss,train/kl,eval/accuracy\n0,1,0.1,0.5\n1,0.9,0.1,\n2,0.8,0.2,0.6\n")
    for trace in (from_columns(path, step="step", streams=["train/loss"]),
                  select_columns(read_trace(path), streams=["train/loss"])):
        assert trace.metric_names() == ["train/loss", "eval/accuracy"]
    assert from_columns(path, step="step", streams=["train/loss"], evals={"train/kl": 1.0}).metric_names() == \
        ["train/loss", "eval/train/kl"]


def test_a_time_column_of_posix_timestamps_starts_the_clock_at_zero(tmp_path):
    """time.time() logged as is: the run read as 54 years of training before its first step, so the eval
    budget (a share of the run's time) never bound: 9 evaluations, 0 deferrals, against 3 and 305 for the
    same run with its time from 0."""
    from adaptive_eval import load_config
    from adaptive_eval.replay import replay
    from adaptive_eval.trace import read_trace

    rows = "".join(f"{s},{1700000000 + 0.5 * s},{1.0 + 0.001 * s},0.5\n" for s in range(400))
    epoch = tmp_path / "epoch.csv"
    epoch.write_text("step,time,train/loss,eval/accuracy\n" + rows)
    rel = tmp_path / "rel.csv"
    rel.write_text("step,time,train/loss,eval/accuracy\n" +
                   "".join(f"{s},{0.5 * s},{1.0 + 0.001 * s},0.5\n" for s in range(400)))
    a, b = read_trace(epoch), read_trace(rel)
    assert a.records[0].time == 0.0 and a.records[-1].time == pytest.approx(199.5)
    cfg = load_config()
    assert [e["step"] for e in replay(a, cfg, seed=0).evals] == [e["step"] for e in replay(b, cfg, seed=0).evals]


def test_a_clock_that_did_not_start_with_the_run_or_restarted_at_a_resume_replays_as_one_from_zero(tmp_path):
    """time.monotonic() logged as is (the first step 98 hours in: the budget never bound) and a clock restarted at a
    resume (the later steps before the run's start: 107 deferrals where there were none) changed the replay's
    decisions against the same run timed from 0; each is said, and both now replay as it does (a new user's probe)."""
    from adaptive_eval import load_config
    from adaptive_eval.replay import replay

    def write(name, time_of):
        path = tmp_path / name
        path.write_text("step,time,train/loss,eval/accuracy\n" + "".join(
            f"{s},{time_of(s)},{1.0 + 0.001 * s + (0.5 if s >= 250 else 0.0)},{0.6 if s < 250 else 0.4}\n"
            for s in range(400)))
        return path

    base = read_trace(write("from0.csv", lambda s: 5.0 * s))
    with pytest.warns(RuntimeWarning, match=r"starts at 352817 s, far more than its first step takes .* \(5 s a step"):
        late = read_trace(write("monotonic.csv", lambda s: 352817.0 + 5.0 * s))
    with pytest.warns(RuntimeWarning, match=r"goes back at step 300 \(1495 s -> 5 s; a clock restarted by a resume"):
        restarted = read_trace(write("restart.csv", lambda s: 5.0 * (s if s < 300 else s - 299)))
    assert [r.time for r in late.records] == [r.time for r in restarted.records] == [r.time for r in base.records]
    # A small step back (a logger's jitter, two rows out of order) is no restart, POSIX seconds neither (each added
    # the whole time before it: 54 years after one POSIX row logged 6 s early; a review); a non-finite time is refused.
    jitter = read_trace(write("jitter.csv", lambda s: 5.0 * s - (6.0 if s == 100 else 0.0)))
    assert [r.time for r in jitter.records][99:102] == [495.0, 494.0, 505.0]
    posix = read_trace(write("posix.csv", lambda s: 1.7e9 + 5.0 * s - (6.0 if s == 100 else 0.0)))
    assert [r.time for r in posix.records][99:102] == [495.0, 494.0, 505.0]
    with pytest.raises(TraceError, match=r"inf.csv: the time column is inf at step 3: times are finite seconds"):
        read_trace(write("inf.csv", lambda s: math.inf if s == 3 else 5.0 * s))
    cfg = load_config()
    decided = [[(e["step"], e["reason"]) for e in replay(t, cfg, seed=0).evals] for t in (base, late, restarted)]
    assert decided[0] == decided[1] == decided[2]


def test_an_empty_json_key_and_a_negative_std_are_refused_naming_where(tmp_path):
    """An empty metric name in a JSONL record reached the evaluator mid-replay (a traceback, exit 1), and a negative
    eval/<metric>:std failed every simulated evaluation at those rows with numpy's "scale < 0" (exit 0): both are
    errors naming the line or step, exit 2 before any work (a new user's probe)."""
    jsonl = tmp_path / "empty.jsonl"
    jsonl.write_text('{"step": 0, "train/loss": 1.0}\n{"step": 1, "": 0.1}\n')
    with pytest.raises(TraceError, match=r"empty.jsonl:2: an empty metric name ''"):
        read_trace(jsonl)
    nested = tmp_path / "nested.jsonl"
    nested.write_text('{"step": 0, "actor": {"": 0.1}}\n')
    with pytest.raises(TraceError, match=r"nested.jsonl:1: an empty metric name 'actor/' under 'actor'"):
        read_trace(nested)
    std = tmp_path / "std.csv"
    std.write_text("step,train/loss,eval/loss,eval/loss:std\n0,1.0,0.6,0.1\n1,1.0,,\n2,1.0,0.6,-0.1\n")
    out = subprocess.run([sys.executable, "-m", "adaptive_eval.cli", "replay", str(std), "--out",
                          str(tmp_path / "out"), "--no-tensorboard"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "step 2: 'eval/loss:std' is -0.1: a standard deviation is never negative" in \
        out.stderr, out.stderr
    assert not (tmp_path / "out" / "evals.jsonl").exists()


def test_wandb_system_rows_without_a_step_are_skipped_in_jsonl_as_in_csv(tmp_path):
    """A W&B history JSONL whose system rows carry _runtime but no _step exited 2 ("missing 'step'"), where the same
    rows of a CSV export were skipped with a warning (a new user's probe)."""
    path = tmp_path / "wandb-history.jsonl"
    path.write_text('{"_step": 0, "train/loss": 1.0, "_runtime": 1.0}\n{"_runtime": 2.0, "system/gpu": 50}\n'
                    '{"_step": 1, "train/loss": 0.9, "_runtime": 3.0}\n')
    with pytest.warns(RuntimeWarning, match=r"1 record without '_step' skipped \(W&B's system rows; the first on "
                                            r"line 2\)"):
        trace = read_trace(path)
    assert [(r.step, r.metrics) for r in trace.records] == [(0, {"train/loss": 1.0}), (1, {"train/loss": 0.9})]
    other = tmp_path / "plain.jsonl"  # (not W&B's: a record without a step is still an error naming its line)
    other.write_text('{"step": 0, "loss": 1.0}\n{"loss": 2.0}\n')
    with pytest.raises(TraceError, match=r"plain.jsonl:2: missing 'step'"):
        read_trace(other)


def test_a_pandas_index_or_a_trailing_comma_is_an_ignored_column(tmp_path):
    """pandas' df.to_csv() writes its index under an empty name and a trailing comma makes an empty last
    column; both were refused ("empty column name in the header").  They are ignored, with a warning, on the
    fast reader's path and on the careful one's (a quoted cell, a repeated step)."""
    from adaptive_eval.trace import read_trace

    pandas = tmp_path / "pandas.csv"
    pandas.write_text(",step,train/loss,eval/accuracy\n0,0,1.0,0.5\n1,1,0.9,\n2,2,0.8,0.6\n")
    trailing = tmp_path / "trailing.csv"
    trailing.write_text('step,train/loss,eval/accuracy,\n0,1.0,0.5,\n1,0.9,,\n1,"0.9",,\n2,0.8,0.6,\n')
    for path, column in ((pandas, "column 1"), (trailing, "column 4")):
        with pytest.warns(RuntimeWarning, match=rf"ignored 1 unnamed column \({column}: a pandas index"):
            trace = read_trace(path)
        assert trace.metric_names() == ["train/loss", "eval/accuracy"]
        assert [r.step for r in trace.records] == [0, 1, 2]


def test_text_and_flags_in_flat_jsonl_records_are_metadata_left_out(tmp_path):
    """One text field (a phase, a run name) refused a whole JSONL file, --stream or not (found by a new user).
    In a flat record text, true/false and lists are left out with one warning; under "metrics" they are still
    an error naming the line."""
    from adaptive_eval.trace import TraceError, read_trace

    path = tmp_path / "run.jsonl"
    path.write_text('{"step": 0, "phase": "main", "done": false, "train/loss": 1.0, "eval/accuracy": 0.5}\n'
                    '{"step": 1, "phase": "main", "tags": ["a"], "train/loss": "NaN"}\n')
    with pytest.warns(RuntimeWarning, match=r"left out 3 fields that held text, true/false or lists in flat "
                                            r"records \('done', 'phase', 'tags'; first on line 1\)"):
        trace = read_trace(path)
    assert trace.metric_names() == ["train/loss", "eval/accuracy"]
    boxed = tmp_path / "boxed.jsonl"
    boxed.write_text('{"step": 1, "metrics": {"r": "high"}}\n')
    with pytest.raises(TraceError, match=r"boxed\.jsonl:1: metric 'r': 'high' is not a number"):
        read_trace(boxed)


def test_na_null_and_friends_are_missing_cells_not_errors_and_nan_stays_a_value(tmp_path):
    # R's write.csv (NA), pandas' nullable columns (<NA>), a database export (NULL), Excel (#N/A)
    path = tmp_path / "na.csv"
    path.write_text("step,epoch,loss,reward\n0,0,1.0,NA\n1,NA,0.9,0.5\n2,0,null,<NA>\n3,0,NaN,#N/A\n4,0,NULL,N/A\n")
    expected = [(0, 0, {"loss": 1.0}), (1, None, {"loss": 0.9, "reward": 0.5}), (2, 0, {}), (3, 0, {"loss": "nan"}),
                (4, 0, {})]
    for trace in (read_trace(path), from_columns(path, streams=["loss", "reward"])):
        got = [(r.step, r.epoch, {k: "nan" if math.isnan(v) else v for k, v in r.metrics.items()})
               for r in trace.records]
        assert got == expected
    # the step itself is never missing
    path.write_text("step,loss\n0,1.0\nNA,0.9\n")
    with pytest.raises(TraceError, match=r"na.csv:3: .*'NA' is not a number"):
        read_trace(path)
    # and a word that is no missing marker is still an error naming its cell
    path.write_text("step,loss\n0,1.0\n1,missing\n")
    with pytest.raises(TraceError, match=r"na.csv:3: column 'loss': 'missing' is not a number"):
        read_trace(path)


def test_an_eval_column_whose_gaps_are_written_nan_reads_as_one_whose_gaps_are_empty(tmp_path):
    """A probe: a W&B history exported with pandas' na_rep="NaN" (or as JSON, which writes NaN) marks every step
    without an evaluation NaN; read as values, the last NaN overrode the carried-forward truth and every simulated
    evaluation measured nothing, unsaid.  Read as gaps now, with a warning; a NaN among values is a result and stays."""
    import warnings

    from adaptive_eval.replay import ground_truth
    from adaptive_eval.trace import read_trace

    rows = [(s, 1.0 - 0.001 * s, (0.7 if s < 50 else 0.3) if s % 10 == 0 else None) for s in range(100)]
    empty, nan = tmp_path / "empty.csv", tmp_path / "nan.csv"
    empty.write_text("step,train/loss,eval/acc\n" + "".join(f"{s},{x},{'' if a is None else a}\n" for s, x, a in rows))
    nan.write_text("step,train/loss,eval/acc\n" + "".join(f"{s},{x},{'NaN' if a is None else a}\n" for s, x, a in rows))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = ground_truth(read_trace(nan))
    assert got == ground_truth(read_trace(empty)) == {"acc": [(s, a) for s, _, a in rows if a is not None]}
    assert any("eval/acc: NaN in 90 of the rows" in str(w.message) for w in caught)
    few = tmp_path / "few.csv"  # two NaN results among ten values: results, kept
    few.write_text("step,eval/acc\n" + "".join(f"{s},{'nan' if s in (3, 7) else 0.5}\n" for s in range(10)))
    assert sum(v != v for _, v in ground_truth(read_trace(few))["acc"]) == 2
    # a record_to trace: eval cells on its evaluations' rows alone, most of them NaN (the run diverged): results,
    # kept (read as gaps, the diverged run replayed as a healthy one; a review)
    sparse = tmp_path / "sparse.csv"
    sparse.write_text("step,train/loss,eval/acc\n" + "".join(
        f"{s},1.0,{('0.5' if s < 30 else 'nan') if s % 10 == 0 else ''}\n" for s in range(100)))
    assert sum(v != v for _, v in ground_truth(read_trace(sparse))["acc"]) == 7


def test_a_tensorboard_file_damaged_mid_way_is_said_and_a_torn_last_record_is_not(tmp_path):
    """A probe: 4 damaged bytes a third of the way into an event file, and TensorBoard's reader stopped there
    without a word (a debug log): the run read as 100 steps of 300, its collapse at step 200 gone."""
    import warnings

    from torch.utils.tensorboard import SummaryWriter

    from adaptive_eval.trace import read_trace

    def written(name):
        writer = SummaryWriter(str(tmp_path / name))
        for s in range(300):
            writer.add_scalar("train/reward", 0.5 + 0.001 * (s % 7), s)
        writer.close()
        return next((tmp_path / name).glob("events*"))

    def said(folder):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trace = read_trace(folder)
        return trace, [str(w.message) for w in caught if "damaged" in str(w.message)]

    damaged = written("damaged")
    data = bytearray(damaged.read_bytes())
    data[len(data) // 3: len(data) // 3 + 4] = b"\xff\xff\xff\xff"
    damaged.write_bytes(bytes(data))
    trace, messages = said(tmp_path / "damaged")
    assert len(trace.records) < 150 and len(messages) == 1 and "damaged after record" in messages[0]
    torn = written("torn")
    torn.write_bytes(torn.read_bytes()[:-5])  # a run still writing its last record
    trace, messages = said(tmp_path / "torn")
    assert len(trace.records) == 299 and messages == []


def test_tensorboard_scalars_named_step_or_time_are_metrics_named_with_an_underscore(tmp_path):
    """A probe: add_scalar("time", ...) and add_scalar("step", ...) read as streams literally named 'time' and 'step'
    (a CSV's time column is its clock), and write_trace then refused the trace: "reserved column names"."""
    import warnings

    from torch.utils.tensorboard import SummaryWriter

    from adaptive_eval.trace import read_trace, write_trace

    writer = SummaryWriter(str(tmp_path / "run"))
    for s in range(20):
        writer.add_scalar("reward", 0.5, s)
        writer.add_scalar("time", 0.5 * s, s)
        writer.add_scalar("step", float(s), s)
    writer.close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace = read_trace(tmp_path / "run")
    assert trace.records[10].metrics["time_"] == 5.0 and "step_" in trace.records[10].metrics
    assert "time" not in trace.stream_names() and any("read as 'step_' and 'time_'" in str(w.message) for w in caught)
    write_trace(trace, tmp_path / "back.csv")
    assert read_trace(tmp_path / "back.csv").records[10].metrics["time_"] == 5.0

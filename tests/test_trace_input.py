"""Trace files as users have them: other line endings and encodings; bad requests."""

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

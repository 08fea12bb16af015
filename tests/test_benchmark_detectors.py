"""benchmarks/detectors.py --real on the user's own annotated traces (subprocess, as a user runs it)."""

import pathlib
import random
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent


def run(*args):
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / "detectors.py"), "--real", *args],
                          capture_output=True, text=True, timeout=600)


def test_real_on_given_traces_scores_their_sidecar_events(tmp_path):
    rng = random.Random(3)
    # A 6 sd step up at 300 in i.i.d. noise: every family catches it; the default preset raises no false alarm
    # on the 300 values before it.
    path = tmp_path / "step.csv"
    path.write_text("step,value\n" + "".join(f"{i},{rng.gauss(0, 1) + (6.0 if i >= 300 else 0.0)!r}\n"
                                             for i in range(500)))
    (tmp_path / "step.events.yaml").write_text("events:\n- {step: 300, kind: change}\n")
    quiet = tmp_path / "quiet.csv"
    quiet.write_text("step,value\n" + "".join(f"{i},{rng.gauss(5, 2)!r}\n" for i in range(400)))
    out = run(str(path), str(quiet))
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "over 2 traces given, 1 events from their sidecar files" in text
    assert "n = 700 quiet steps x streams" in text  # 300 before the event + the quiet trace's 400
    summary = {line.split("  ")[0]: line for line in text.splitlines()
               if line.startswith(("default preset ", "river ADWIN() "))}
    default = summary["default preset"].split()
    assert default[2] == "0.00" and default[5] == "1/1", summary  # no false alarm; the step caught
    assert int(default[6]) <= 10  # records from the step to the alarm


def test_real_on_a_trace_without_a_stream_or_missing_exits_2(tmp_path):
    path = tmp_path / "evals_only.csv"
    path.write_text("step,eval/accuracy\n0,0.5\n1,0.6\n")
    out = run(str(path))
    assert out.returncode == 2 and "evals_only.csv: no stream to watch" in out.stderr
    out = run(str(tmp_path / "missing.csv"))
    assert out.returncode == 2 and "missing.csv: no such trace file" in out.stderr

"""benchmarks/detectors.py --real on the user's own annotated traces (subprocess, as a user runs it)."""

import argparse
import importlib.util
import math
import pathlib
import random
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent


def _module():
    spec = importlib.util.spec_from_file_location("bench_detectors", REPO / "benchmarks" / "detectors.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run(*args):
    # (--quick: the river rows matched on one synthetic seed, a quarter of the time; what is tested is the same)
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / "detectors.py"), "--real", "--quick", *args],
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
    # 300 before the event + the quiet trace's 400, less each stream's first 30 (its warm-up)
    assert "n = 640 quiet values (per stream: the quiet records where it has a value, after its first 30 finite "\
        "ones)" in text
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
    step = _step_trace(tmp_path)  # given twice, its quiet values and events counted twice (a new-user probe)
    out = run(str(step), f"{tmp_path}/./step.csv")
    assert out.returncode == 2 and "step.csv' is given twice (as" in out.stderr
    out = run("grpo_no_kl", "real:grpo_no_kl")  # a shipped trace by both its spellings
    assert out.returncode == 2 and "'real:grpo_no_kl' is given twice (as 'grpo_no_kl' too)" in out.stderr


def _step_trace(tmp_path, name="step.csv", at=300, n=500, event=300, header="step,value", row=None):
    rng = random.Random(5)
    path = tmp_path / name
    row = row or (lambda i, v: f"{i},{v!r}")
    path.write_text(header + "\n" + "".join(row(i, rng.gauss(0, 1) + (6.0 if i >= at else 0.0)) + "\n"
                                           for i in range(n)))
    if event is not None:
        (tmp_path / f"{name}.events.yaml").write_text(f"events:\n- {{step: {event}, kind: change}}\n")
    return path


def test_real_refuses_an_event_outside_the_trace(tmp_path):
    for step in (500, -5):  # beyond the last record, before the first
        path = _step_trace(tmp_path, f"out{step}.csv", n=100, event=step)
        out = run(str(path))
        assert out.returncode == 2, out.stdout
        assert f"out{step}.csv.events.yaml: event at step {step} lies outside the trace" in out.stderr
        assert "(steps 0..99)" in out.stderr


def test_real_takes_the_trace_options(tmp_path):
    mod = _module()
    # Another tool's CSV: a timestamp, no step column; the event at row 300.
    path = _step_trace(tmp_path, "nab.csv", header="timestamp,value,other",
                       row=lambda i, v: f"2020-01-01 00:{i // 60:02d}:{i % 60:02d},{v!r},{i % 7}")
    out = run(str(path))
    assert out.returncode == 2 and "--step-column" in out.stderr
    out = run("--stream", "value", "--step-column", "none", str(path))
    assert out.returncode == 0, out.stderr
    assert "nab.csv                default preset                 1    300     270      0  " in out.stdout
    # --eval and --keep-last-run, as adaptive-eval replay reads them (through adaptive_eval.cli)
    restarted = tmp_path / "restart.csv"
    steps = [*range(60), *range(40, 100)]  # restarted at step 40
    restarted.write_text("step,value,acc\n" + "".join(f"{i},{i % 5},{i / 100}\n" for i in steps))
    args = argparse.Namespace(stream=[], eval=["acc:0.5"], step_column="step", keep_last_run=False)
    with pytest.raises(ValueError, match="steps must not decrease"):
        mod._real_data([str(restarted)], args)
    args.keep_last_run = True
    (name, trace, streams, quiet_end, events), = mod._real_data([str(restarted)], args)
    assert streams == ["value"] and len(trace) == 100 and quiet_end == 100 and events == []


def test_real_preset_from_config_resolves_streams_as_the_evaluator(tmp_path):
    mod = _module()
    from adaptive_eval import load_config

    cfg = tmp_path / "mine.yaml"
    cfg.write_text("streams:\n  watch:\n    value: [{type: nonfinite}]\n  ignore: [skip]\n")
    specs_for = mod._specs_of(load_config(str(cfg)))
    assert specs_for("value") == [{"type": "nonfinite"}] and specs_for("skip") == []
    assert [s["type"] for s in specs_for("other")] == ["nonfinite", "cusum"]  # streams.default
    # The default preset catches the 6 sd step (test above); with only `nonfinite` on the stream, nothing does.
    path = _step_trace(tmp_path)
    out = run("--config", str(cfg), "--set", "streams.ignore=[skip]", str(path))
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines() if line.startswith("mine.yaml preset --set")]
    assert rows and rows[-1][7] == "0/1", out.stdout  # label, 3 words with the --set; FA 3 fields; caught
    assert "the mine.yaml preset --set streams.ignore=[skip]'s rate" in out.stdout


def test_real_exposure_counts_values_after_the_warm_up(tmp_path):
    mod = _module()
    from adaptive_eval.trace import read_trace

    path = tmp_path / "sparse.csv"  # a dense stream, and one logged every 10th record (20 values in all)
    path.write_text("step,dense,sparse\n" + "".join(f"{i},{i % 3},{i if i % 10 == 0 else ''}\n" for i in range(200)))
    trace = read_trace(path)
    every = lambda stream: (lambda v, step: True)  # noqa: E731  (alarms at every value)
    alarms, k, n = mod._scan(trace, ["dense", "sparse"], every, 150)
    assert len(alarms) == 220
    assert n == 150 - 30  # dense: its quiet records after its first 30; sparse: its 15 quiet values are warm-up
    assert k == n  # false alarms counted on the same cells
    assert mod._quiet_rate(every, [(trace, ["dense", "sparse"], 150, [])]) == (n, n)


def test_real_flags_an_event_in_the_warm_up_and_prints_no_nan(tmp_path):
    path = _step_trace(tmp_path, "early.csv", at=10, n=200, event=10)
    out = run(str(path))
    assert out.returncode == 0, out.stderr
    text = out.stdout
    rows = [line for line in text.splitlines() if line.startswith("early.csv ")]
    assert len(rows) == 5 and all("in warm-up" in line for line in rows), rows
    assert "1 event(s) in every stream's warm-up" in text
    assert "nan" not in text and "[0.0%]" not in text  # no placebo (quiet stretch 10 < 30), one event
    assert "median delay [" not in text and " [-] " in text
    assert "chance n/a" in text or "missed" in text


def _load(name):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", REPO / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_false_alarm_interval_resamples_series_not_values():
    mod = _module()
    # Ten series of 1,000 quiet values; one misfires 12 times, the rest never: clustered alarms.
    per = [(12, 1000)] + [(0, 1000)] * 9
    point = 1000 * 12 / 10_000
    lo, hi, n_series, exact = mod._series_ci(per)
    plo, phi = mod._poisson_ci(12, 10_000)
    assert n_series == 10 and not exact
    assert lo <= point <= hi
    assert hi - lo > phi - plo  # the values are not independent: the interval over series is wider
    assert lo < plo  # a run of draws without the hard series: no alarm at all
    assert mod._series_ci(per) == (lo, hi, n_series, exact)  # seeded
    assert mod._rate(per).startswith(f"{point:.2f} [")  # the point estimate is the ratio of the sums
    # The same 12 alarms spread over the ten series: close to the Poisson interval (the values look independent).
    spread = [(2, 1000), (1, 1000)] * 4 + [(1, 1000), (1, 1000)]
    slo, shi, _, _ = mod._series_ci(spread)
    assert shi - slo < hi - lo
    # A series without exposure is no series.
    assert mod._series_ci(per + [(0, 0)])[2] == 10


def test_no_false_alarm_gets_an_exact_upper_bound_not_a_zero_width_interval():
    mod = _module()
    lo, hi, n_series, exact = mod._series_ci([(0, 500)] * 4)
    assert exact and n_series == 4 and lo == 0
    assert hi == pytest.approx(1000 * 3.689 / 2000, rel=1e-3)  # the exact Poisson bound: 3.69 / n
    assert mod._rate([(0, 500)] * 4) == "0.00 [0.00, 1.84]*"
    assert mod._rate([]) == "n/a (n = 0)"
    fc = _load("false_confirmations")
    import numpy as np

    none = np.zeros((24, 5))
    lo, hi, exact = fc.share_interval(none)
    assert exact and lo == 0 and hi == pytest.approx(1 - 0.025 ** (1 / 24), rel=1e-6)  # 0 of 24 runs: 14%
    some = none.copy()
    some[3, :] = 1  # one run confirms all its five made-up events
    lo, hi, exact = fc.share_interval(some, resamples=999)
    assert not exact and lo <= some.mean() <= hi and hi > 0


def test_one_confirmation_is_never_given_a_narrower_interval_than_the_exact_one_over_events():
    """1 of 120 made-up events read [0%, 3%] by the bootstrap over runs: below the exact upper bound (4.6%) that
    one event in 120 allows even taken as independent."""
    import numpy as np
    from scipy.stats import binomtest

    fc = _load("false_confirmations")
    one = np.zeros((24, 5))
    one[7, 2] = 1
    lo, hi, exact = fc.share_interval(one, resamples=999)
    assert not exact and lo == 0.0
    assert hi >= binomtest(1, 120).proportion_ci(0.95, method="exact").high == pytest.approx(0.0456, abs=1e-3)


def test_a_false_alarm_rate_over_series_is_never_narrower_than_the_exact_poisson_interval():
    """ADWIN matched on the real traces read 0.44 [0.28, 0.55] over traces: its upper end below the exact Poisson
    one of its own count (0.59).  Two alarms on one of twelve series: the bootstrap's upper end alone is lower."""
    mod = _module()
    per = [(2, 1000)] + [(0, 1000)] * 11
    lo, hi, n_series, exact = mod._series_ci(per)
    plo, phi = mod._poisson_ci(2, 12000)
    assert not exact and n_series == 12 and lo <= plo and hi >= phi


def test_real_counts_an_alarm_on_a_nan_cell_as_any_alarm_and_an_event_given_twice_once(tmp_path):
    """An alarm on a NaN cell counted for the delays and placebo waits but not as a false alarm: missing values
    written ``nan`` alarmed uncounted ("0.00" false alarms), and one right after an event "caught" a change
    that was not there.  And an event annotated twice at one step left the first copy no window: a miss.
    (Both found by a new-user probe.)"""
    rng = random.Random(5)
    values = [rng.gauss(0, 1) + (6.0 if i >= 300 else 0.0) for i in range(500)]
    for i in (80, 150, 220):
        values[i] = math.nan  # missing values, quiet stretch
    path = tmp_path / "gaps.csv"
    path.write_text("step,value\n" + "".join(f"{i},{v!r}\n" for i, v in enumerate(values)))
    (tmp_path / "gaps.csv.events.yaml").write_text("events:\n- {step: 300}\n- {step: 300}\n")
    out = run(str(path))
    assert out.returncode == 0, out.stderr
    assert "gaps.csv.events.yaml: event(s) at step 300 given more than once, counted once" in out.stderr
    assert "1 events from their sidecar files" in out.stdout
    default = next(line for line in out.stdout.splitlines() if line.startswith("default preset ")).split()
    # the preset's nonfinite detector alarms at each NaN: 3 false alarms over 270 quiet values; the step caught
    assert default[2] == f"{3000 / 270:.2f}" and default[5] == "1/1", default


def test_real_reads_tcpd_datasets_with_their_annotations(tmp_path):
    import json

    rng = random.Random(11)
    paths = []
    for name, at in (("shifted", 200), ("flat", None)):
        raw = [rng.gauss(10.0, 1.0) + (6.0 if at is not None and i >= at else 0.0) for i in range(400)]
        folder = tmp_path / "datasets" / name
        folder.mkdir(parents=True)
        path = folder / f"{name}.json"
        path.write_text(json.dumps({"name": name, "n_obs": 400, "n_dim": 1, "time": {"index": list(range(400))},
                                    "series": [{"label": "V1", "type": "float", "raw": raw}]}, indent="\t"))
        paths.append(str(path))
    annotations = tmp_path / "annotations.json"
    # two annotators agree on 200 (within 5 records); a third's lone point at 350 is no event
    annotations.write_text(json.dumps({"shifted": {"6": [200], "7": [203], "8": [350]}, "flat": {"6": [], "7": []},
                                       "unused": {"6": [1]}}))
    out = run("--tcpd-annotations", str(annotations), *paths)
    assert out.returncode == 0, out.stderr
    assert "over 2 traces given, 1 events from their sidecar files or TCPD annotations" in out.stdout
    # 200 quiet values before the event and 400 on the flat series, less each one's first 30
    assert "n = 540 quiet values" in out.stdout
    default = next(line for line in out.stdout.splitlines() if line.startswith("default preset ")).split()
    assert default[5] == "1/1", default
    # annotations that name none of the files, and the option without files: exit 2 before any work
    out = run("--tcpd-annotations", str(annotations), str(_step_trace(tmp_path)))
    assert out.returncode == 2 and "annotates none of the traces given" in out.stderr
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "detectors.py"), "--real", "--tcpd-annotations",
                          str(annotations)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--tcpd-annotations applies to the TRACE files" in out.stderr


@pytest.mark.parametrize("script, args, said", [
    ("detectors.py", ["--quick", "--only", "cusm"], "--only: unknown detector 'cusm'"),
    ("pass_at_k_coverage.py", ["--reps", "0"], "argument --reps: must be at least 1, got 0"),
    ("pass_at_k_coverage.py", ["--rows", "99"], "--rows: the rows are 0-"),
    ("outside_traces2.py", [], "usage: python"),
    ("outside_traces.py", ["--out", "x"], "usage: python"),
    ("pick_coverage.py", ["--seed", "-1"], "argument --seed: must be an integer in [0, 2**32), got -1"),
    # (probes of the forty-first session: each was a traceback, or taken and ignored)
    ("detectors.py", ["--climb", "--only", "cusum"], "--only picks the detectors of the synthetic tables"),
    ("pass_at_k_coverage.py", ["--json", "/dev/null/x.json"], "--json /dev/null/x.json: cannot write there"),
    ("pass_at_k_coverage.py", ["--json", "/"], "--json /: a folder; give the file to write"),
    ("async_eval.py", ["--eval-steps", "nan"], "argument --eval-steps: must be a positive number, got 'nan'"),
    ("async_eval.py", ["--eval-steps", "-5"], "argument --eval-steps: must be a positive number, got '-5'"),
    ("policies.py", ["--steps", "100"], "argument --steps: must be at least 106, got 100"),
    ("policies.py", ["--lookback", "0"], "argument --lookback: must be at least 1, got 0"),
    ("policies.py", ["--presets", ","], "--presets ',': name at least one preset"),
    ("policies.py", ["real:grpo_tracking", "--steps", "300"], "--items, --lookback, --steps and --half apply to "
                                                              "the synthetic suite, not to TRACE files"),
    ("regret_decomposition.py", ["--steps", "100"], "argument --steps: must be at least 106, got 100"),
])
def test_a_benchmarks_bad_arguments_are_refused_naming_the_option_before_any_work(tmp_path, script, args, said):
    """A sceptical reader's probe: a misspelt --only ran no detector and printed "targets met"; --reps 0 was a
    ZeroDivisionError's traceback; outside_traces.py --help wrote 32 files into ./--help/."""
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *args], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 2 and said in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert list(tmp_path.iterdir()) == []  # (nothing written)


def test_climb_prints_what_the_slope_buys_and_costs(capsys):
    """``--climb``: the presets' CUSUM misses a drop right after a steep climb, ``trend`` catches it, and the table
    shows its price (a collapse on the plateau after a steep climb) beside it; the cells are shares of runs."""
    mod = _module()
    mod.main(["--climb", "--quick"])
    rows = {}
    for line in capsys.readouterr().out.splitlines():
        for label in ("default preset", "trend 0.02, threshold 7.8"):
            if line.startswith(label):
                cells = line[len(label):].split()
                rows[(label, float(cells[0]))] = [int(c.rstrip("%")) for c in cells[1:] if c.endswith("%")]
    # columns: caught after drops of 3, 5, 8 sd, an alarm on the climb, the climb stops, a 5 sd drop 100 steps later
    assert rows[("default preset", 0.1)][1:3] == [0, 0] and rows[("trend 0.02, threshold 7.8", 0.1)][1:3] == [100, 100]
    assert rows[("default preset", 0.3)][5] == 100 and rows[("trend 0.02, threshold 7.8", 0.3)][5] <= 20
    assert all(r[4] <= 10 for r in rows.values())  # a climb that stops is no drop, with or without the slope

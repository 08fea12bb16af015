"""The demo, end to end through the CLI, on a shortened run (1000 steps, the fault at 500)."""

import io
import json
from contextlib import redirect_stdout

import pytest

from adaptive_eval.demos import digits as demo
from adaptive_eval.cli import main
from adaptive_eval.trace import read_trace

pytestmark = pytest.mark.xdist_group(__name__)  # (under pytest -n: its module-scoped runs on one worker)

STEPS = 1000
FAULT = STEPS // 2
CATCH_WITHIN = 25  # steps after the fault


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _shows_fault(evals):
    """Evaluations at or after the fault whose interval lies below the last one before it."""
    floor = [e for e in evals if e["step"] < FAULT][-1]["ci"]["accuracy"][0]
    return [e for e in evals if e["step"] >= FAULT and e["ci"]["accuracy"][1] < floor]


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "runs"
    # A folder an rlvr demo wrote before (found by a new user: its runs were drawn with this one's, and
    # `check trace.csv` checked its events file against the digits trace); and a file of the user's.
    for run in ("async", "fixed_same"):
        (out / run / "tb").mkdir(parents=True)
        (out / run / "tb" / "events.out.tfevents.1.host").write_bytes(b"")
        (out / run / "evals.jsonl").write_text('{"step": 0, "metrics": {"id/accuracy": 0.5}}\n')
    for name in ("comparison.png", "comparison.json", "trace.csv.events.yaml"):
        (out / name).write_text("stale")
    (out / "notes.txt").write_text("mine")
    (out / ".adaptive-eval-demo").write_text("")  # (a folder a demo wrote: what it wrote there is cleared)
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = main(["demo", "--task", "digits", "--out", str(out), "--steps", str(STEPS), "--no-progress"])
    return rc, buf.getvalue(), out


def test_demo_writes_both_runs(demo_run):
    rc, stdout, out = demo_run
    assert rc == 0
    for name in ("adaptive", "fixed"):
        run = out / name
        for f in ("evals.jsonl", "alarms.jsonl", "summary.json", "run.png"):
            assert (run / f).is_file(), f"{name}/{f}"
        assert (run / "run.png").read_bytes().startswith(b"\x89PNG")
        assert list((run / "tb").glob("events.out.tfevents.*")), f"{name}/tb has no event file"
        summary = json.loads((run / "summary.json").read_text())
        assert summary["steps"] == STEPS
        assert summary["simulated"].startswith("train_seconds and eval_seconds on the simulated clock")  # (a probe)
        evals = _lines(run / "evals.jsonl")
        assert summary["evals"] == len(evals) > 0
        assert summary["samples"] == sum(e["sample_size"] for e in evals)
        best = summary["best"]  # the picked checkpoint, its estimate and interval, and (simulated) its true value
        assert best["step"] in {e["step"] for e in evals} and best["interval"][0] <= best["estimate"] <= best["interval"][1]
        assert 0 <= best["true"] <= 1
        for e in evals:
            low, high = e["ci"]["accuracy"]
            assert 0 <= low <= e["metrics"]["accuracy"] + 1e-12 and e["metrics"]["accuracy"] <= high + 1e-12 <= 1 + 1e-12
            assert 0 < e["sample_size"] <= demo.HELDOUT_SIZE
    trace = read_trace(out / "trace.csv")
    assert [r.step for r in trace.records] == list(range(STEPS))
    assert set(trace.records[0].metrics) == {"train/loss", "train/accuracy", "train/grad_norm", "eval/accuracy"}
    report = json.loads((out / "comparison.json").read_text())
    assert report["identical_training"], "the two runs must train the same models"
    assert report["fault_step"] == FAULT
    assert "fault caught after" in stdout and "eval samples" in stdout


def test_adaptive_catches_the_fault_sooner_and_cheaper(demo_run):
    _, _, out = demo_run
    adaptive = _lines(out / "adaptive" / "evals.jsonl")
    fixed = _lines(out / "fixed" / "evals.jsonl")
    caught = _shows_fault(adaptive)
    assert caught and caught[0]["step"] - FAULT <= CATCH_WITHIN, [(e["step"], e["metrics"]) for e in adaptive]
    assert caught[0]["reason"].startswith("alarm:")
    fixed_caught = _shows_fault(fixed)
    assert not fixed_caught or fixed_caught[0]["step"] > caught[0]["step"]
    samples = lambda evals: sum(e["sample_size"] for e in evals)  # noqa: E731
    assert samples(adaptive) < samples(fixed)
    # The collapse is real: the last evaluations of both runs are near chance.
    assert adaptive[-1]["metrics"]["accuracy"] < 0.3 and fixed[-1]["metrics"]["accuracy"] < 0.3
    report = json.loads((out / "comparison.json").read_text())
    assert report["adaptive"]["fault_delay"] == caught[0]["step"] - FAULT
    assert report["adaptive"]["samples"] == samples(adaptive)
    alarms = _lines(out / "adaptive" / "alarms.jsonl")
    assert any(FAULT <= a["step"] <= FAULT + CATCH_WITHIN for a in alarms)
    assert _lines(out / "fixed" / "alarms.jsonl") == []


def test_demo_is_deterministic(tmp_path):
    runs = [demo.run_demo(tmp_path / str(i), steps=200, seed=3, progress=False, plot=False) for i in range(2)]
    assert runs[0]["adaptive"] == runs[1]["adaptive"] and runs[0]["fixed"] == runs[1]["fixed"]
    for name in ("adaptive", "fixed"):
        for f in ("evals.jsonl", "alarms.jsonl"):
            assert (tmp_path / "0" / name / f).read_bytes() == (tmp_path / "1" / name / f).read_bytes()
        sums = [json.loads((tmp_path / str(i) / name / "summary.json").read_text()) for i in range(2)]
        for s in sums:
            s.pop("wall_seconds")
        assert sums[0] == sums[1]


def test_rerun_replaces_the_event_files(tmp_path):
    for _ in range(2):
        report = demo.run_demo(tmp_path, steps=40, progress=False, plot=False)
    assert len(list((tmp_path / "adaptive" / "tb").glob("events.out.tfevents.*"))) == 1
    assert len(read_trace(tmp_path / "trace.csv")) == 40
    # The adaptive run's first evaluation (step 24) comes after the fault (20): "caught" is by the accuracy
    # threshold, said beside the delay (it read "4 steps" against the fixed run's 19 by an interval, unsaid; a probe)
    assert report["adaptive"]["fault_rule"] == "accuracy below 0.5" and report["fixed"]["fault_rule"] == "interval"
    assert "(accuracy below 0.5: no evaluation before the fault)" in demo.format_comparison(report)
    summary = json.loads((tmp_path / "adaptive" / "summary.json").read_text())
    assert "wall_seconds is this machine's real time" in summary["simulated"]


def test_an_empty_out_exits_2(capsys):
    assert main(["demo", "--task", "digits", "--out", "", "--no-progress"]) == 2
    assert "--out is empty" in capsys.readouterr().err


def test_unwritable_out_exits_2_before_training(tmp_path, capsys, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")

    def no_training(*args, **kwargs):
        raise AssertionError("training started")

    monkeypatch.setattr(demo, "_Training", no_training)
    assert main(["demo", "--task", "digits", "--out", str(blocker / "runs"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"--out {blocker / 'runs'}: not writable" in err


@pytest.mark.parametrize("args, message", [
    (["--steps", "5"], "--steps 5: too few; the digits task needs at least 20"),
    (["--set", "trigger.freq_stepz=3"], "trigger.freq_stepz"),
])
def test_bad_settings_exit_2(tmp_path, capsys, args, message):
    assert main(["demo", "--task", "digits", "--out", str(tmp_path), "--no-progress", *args]) == 2
    assert message in capsys.readouterr().err


def test_replaying_the_runs_own_tensorboard_log_reproduces_its_trace(demo_run, tmp_path):
    """adaptive-eval replay of adaptive/tb: the same streams (no 'streams/' prefix), the same alarms as replaying
    trace.csv, on the simulated clock (the event wall times are not mixed with simulated eval seconds)."""
    _, _, out = demo_run
    tb, csv = read_trace(out / "adaptive" / "tb"), read_trace(out / "trace.csv")
    streams = [n for n in csv.stream_names()]
    assert sorted(tb.stream_names()) == sorted(streams)
    for name in streams:
        assert tb.column(name)[0].tolist() == csv.column(name)[0].tolist()
        assert tb.column(name)[1].tolist() == pytest.approx(csv.column(name)[1].tolist(), rel=1e-6)  # float32
    assert all(r.time is None for r in tb)
    runs = {}
    for name, src in (("csv", out / "trace.csv"), ("tb", out / "adaptive" / "tb")):
        with redirect_stdout(io.StringIO()):
            assert main(["replay", str(src), "--out", str(tmp_path / name), "--no-tensorboard"]) == 0
        runs[name] = (_lines(tmp_path / name / "alarms.jsonl"), json.loads((tmp_path / name / "summary.json").read_text()))
    key = lambda a: (a["step"], a["stream"], a["detector"], a["direction"])  # noqa: E731
    assert [key(a) for a in runs["tb"][0]] == [key(a) for a in runs["csv"][0]] and runs["csv"][0]
    for name in ("csv", "tb"):
        s = runs[name][1]
        assert s["eval_seconds"] / (s["eval_seconds"] + s["train_seconds"]) < 0.3  # not 95% (wall vs simulated)


def test_a_folder_no_demo_wrote_keeps_the_users_runs(tmp_path):
    """Found in review: a demo into a folder of the user's own runs deleted an async/ run's TensorBoard logs."""
    from adaptive_eval.demos import MARKER, prepare_out

    (tmp_path / "async" / "tb").mkdir(parents=True)
    (tmp_path / "adaptive" / "tb").mkdir(parents=True)  # (a run of the demo's names: its event file went; a probe)
    mine = [tmp_path / "async" / "tb" / "events.out.tfevents.1.host", tmp_path / "async" / "evals.jsonl",
            tmp_path / "comparison.png", tmp_path / "adaptive" / "tb" / "events.out.tfevents.2.host"]
    for f in mine:
        f.write_text("mine")
    prepare_out(tmp_path, ("adaptive", "fixed"))
    assert all(f.read_text() == "mine" for f in mine) and (tmp_path / MARKER).is_file()
    prepare_out(tmp_path, ("adaptive", "fixed"))  # now marked as a demo's: its async/ is taken for a demo's
    assert not (tmp_path / "async").exists() and not (tmp_path / "comparison.png").exists()


def test_a_demo_clears_an_earlier_demos_run_files_and_keeps_a_trace_no_demo_wrote(tmp_path):
    """Probes: a demo interrupted in a reused folder left the earlier run's evals.jsonl and summary.json beside its
    own partial tb/ and trace, and plot drew one run's evaluations over the other's streams; and a folder no demo
    wrote lost its trace.csv before training."""
    from adaptive_eval.demos import DemoError, prepare_out

    prepare_out(tmp_path, ("adaptive", "fixed"))
    for name in ("evals.jsonl", "summary.json", "run.png"):
        (tmp_path / "adaptive" / name).write_text("the earlier demo's")
    (tmp_path / "trace.csv").write_text("step,loss\n")
    prepare_out(tmp_path, ("adaptive", "fixed"))
    assert not any((tmp_path / "adaptive" / n).exists() for n in ("evals.jsonl", "summary.json", "run.png"))
    assert not (tmp_path / "trace.csv").exists()
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "trace.csv").write_text("step,loss\n0,1.0\n")
    with pytest.raises(DemoError, match="it holds trace.csv, which no demo wrote"):
        prepare_out(theirs, ("adaptive", "fixed"))
    assert (theirs / "trace.csv").read_text() == "step,loss\n0,1.0\n"


def test_tensorboard_holds_every_decision_and_alarm_under_default_settings(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from adaptive_eval.tensorboard import read_texts

    # Frequent evaluations, so that there are more decisions than TensorBoard keeps text events by default (100).
    out = tmp_path / "runs"
    with redirect_stdout(io.StringIO()):
        assert main(["demo", "--task", "digits", "--out", str(out), "--steps", str(STEPS), "--no-progress",
                     "--set", "trigger.freq_steps=3", "--set", "policy.interval.max_factor=1.5"]) == 0
    run = out / "adaptive"
    summary = json.loads((run / "summary.json").read_text())
    acc = EventAccumulator(str(run / "tb"))  # TensorBoard's own reader, default size guidance
    acc.Reload()
    decisions = read_texts(acc, "decisions")
    evaluated = [s for s, t in decisions if t.startswith("evaluated: ")]
    deferred = [s for s, t in decisions if t.startswith("deferred: ")]
    assert len(evaluated) == summary["evals"] and len(decisions) == len(evaluated) + len(deferred) > 100
    # A deferral is one line where it starts (not one per step it lasts: 500 lines of the same words);
    # controller/deferred is 1 at its first and last steps (not at every one: they crowded the evaluations' 0s out of
    # the 1,000 points TensorBoard keeps), 0 at each evaluation.
    points = [(e.step, e.value) for e in acc.Scalars("controller/deferred")]
    starts = [s for i, (s, v) in enumerate(points) if v == 1.0 and (i == 0 or points[i - 1][1] == 0.0)]
    assert set(starts) <= set(deferred) and len(starts) > 0
    assert set(evaluated) <= {s for s, v in points if v == 0.0}
    assert summary["deferrals"] > len([v for _, v in points if v == 1.0]) >= len(starts)
    alarms = read_texts(run / "tb", "alarms")
    assert len(alarms) == len(_lines(run / "alarms.jsonl")) == summary["alarms"]


def test_plot_of_the_demo_folder_draws_both_runs_on_shared_axes(demo_run, tmp_path):
    from adaptive_eval.plot import _draw_comparison, _load, find_runs

    _, _, out = demo_run
    with redirect_stdout(io.StringIO()):
        assert main(["plot", str(out), "--out", str(tmp_path / "runs.png")]) == 0  # was: "no run found"
    assert (tmp_path / "runs.png").read_bytes().startswith(b"\x89PNG")
    runs = [_load(p) for p in find_runs([out])]
    assert [r.name for r in runs] == ["adaptive", "fixed"]  # not the rlvr demo's async/ and fixed_same/ of before
    assert sorted(p.name for p in out.iterdir()) == [".adaptive-eval-demo", "adaptive", "comparison.json", "fixed",
                                                     "notes.txt", "trace.csv"]
    assert json.loads((out / "comparison.json").read_text())  # this demo's, not the stale one
    fig = _draw_comparison(runs)
    top = fig.axes[0]
    labels = [t.get_text() for t in top.get_legend().get_texts()]
    assert len(labels) == 2 and labels[0].startswith("adaptive: ") and labels[1].startswith("fixed: ")
    # markers only: no line joins evaluations (it would draw a decline across a 200-step gap nobody measured)
    assert not [ln for ln in top.get_lines() if ln.get_linestyle() not in ("None", "none", "") and len(ln.get_xdata()) > 2]


def test_plot_marks_values_off_the_axis_and_says_eval_time_is_simulated(demo_run):
    from adaptive_eval.plot import _draw, _load

    _, _, out = demo_run
    fig = _draw(_load(out / "adaptive"))
    legends = [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    assert any("off the axis (above" in t for t in legends)  # the blow-up after the fault is not cut off silently
    assert "simulated eval time" in fig._suptitle.get_text()


def test_an_asynchronous_runs_summary_counts_the_evaluation_close_integrates(tmp_path):
    """A review: the summary was taken before close(), so an asynchronous run's summary.json counted one evaluation
    fewer than its evals.jsonl (the final one, integrated by close())."""
    demo.run_demo(tmp_path, steps=60, progress=False, plot=False,
                  overrides=["evaluation.asynchronous=true", "evaluation.async_integrate_after_steps=5"])
    summary = json.loads((tmp_path / "adaptive" / "summary.json").read_text())
    evals = [json.loads(line) for line in (tmp_path / "adaptive" / "evals.jsonl").read_text().splitlines()]
    assert summary["evals"] == len(evals) and summary["cancelled"] == 0

"""adaptive-eval tune: Optuna search on recorded runs, Pareto front, presets load_config reads, bad input."""

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import pytest

from adaptive_eval import load_config
from adaptive_eval.cli import main
from adaptive_eval.synthetic import make_trace
from adaptive_eval.trace import Trace, TraceRecord, write_trace
from adaptive_eval.tune import SPACE, _get, apply_params, pareto


def collapse_csv(tmp_path, name="run.csv", seed=3, steps=300):
    st = make_trace("collapse", steps=steps, seed=seed)
    path = tmp_path / name
    write_trace(st.trace, path)
    return str(path), st.events[0].step


def test_tune_writes_front_table_png_and_presets_that_load(tmp_path, capsys):
    path, onset = collapse_csv(tmp_path)
    out = tmp_path / "tune"
    (out / "presets").mkdir(parents=True)  # an earlier search's preset (it chose more), and a file of the user's
    (out / "presets" / "point-7.yaml").write_text("trigger: {freq_steps: 3}\n")
    (out / "presets" / "mine.yaml").write_text("trigger: {freq_steps: 3}\n")
    rc = main(["tune", path, "--events", f"{path}={onset}", "--objective", "cost", "--objective", "delay",
               "--trials", "4", "--out", str(out), "--no-progress"])
    assert rc == 0
    # this search's presets alone (a probe read an earlier search's point-3..4.yaml beside this one's two)
    chosen = json.loads((out / "summary.json").read_text())["chosen"]
    # (a point that wins several rules has a row per rule and one preset)
    assert sorted(p.name for p in (out / "presets").iterdir()) == sorted(
        {"mine.yaml"} | {c["preset"].split("/")[-1] for c in chosen})
    printed = capsys.readouterr().out
    assert "| preset | trial | rule | cost | delay |" in printed
    for f in ("pareto.png", "pareto.md", "pareto.csv", "trials.csv", "summary.json"):
        assert (out / f).is_file(), f
    summary = json.loads((out / "summary.json").read_text())
    assert summary["trials"] == 4 and summary["chosen"]
    for chosen in summary["chosen"]:
        cfg = load_config(str(out / chosen["preset"]))  # read as it is
        params = next(json.loads(line)["params"] for line in (out / "trials.jsonl").read_text().splitlines()
                      if json.loads(line)["number"] == chosen["trial"])
        assert cfg.trigger.freq_steps == params["trigger.freq_steps"]
        cusum = [d for d in cfg.streams.default if d["type"] == "cusum"][0]
        assert cusum["threshold"] == pytest.approx(params["cusum.threshold"])
        # The alarm policy's corroboration is searched too, and written into the preset.
        assert cfg.policy.alarm.corroborate == params["policy.alarm.corroborate"]
        assert cfg.policy.alarm.corroborate_steps == params["policy.alarm.corroborate_steps"]
        # Every searched value as the preset holds it (the table and trials said confirm size 1022 beside a
        # preset's 500, clipped to the eval set; a new user's probe)
        kept = chosen.get("kept_base", {})  # (a switch whose drawn value changed no score keeps the base's)
        for key, *_ in SPACE:
            assert _get(cfg, key) == pytest.approx(kept.get(key, params[key])), key
        ss = cfg.policy.sample_size
        assert ss.min <= ss.initial <= ss.max  # (a preset held initial 46 beside min 68)
    ran = [json.loads(line)["params"] for line in (out / "trials.jsonl").read_text().splitlines()]
    assert all(p["policy.peak.confirm_size"] <= 500 for p in ran)
    # The switches added to the default preset after the space was written are searched too (they were held at
    # the base config's values in every trial), each trial's value as its preset holds it (above).
    for key in ("policy.interval.tighten_per_stream", "policy.alarm.habituate"):
        assert {p[key] for p in ran} == {False, True}, key
    assert len({p["policy.interval.tighten"] for p in ran}) == len(ran)
    # A switch whose drawn value changed no score keeps the base config's in the preset (habituate acts only after
    # an urgent alarm, which this run has not: trial 3 drew it off, a safety default turned off by chance), said in
    # the preset and summary.json; one that changed the scores (tighten_per_stream, off in trial 3) is kept as drawn
    # (since cusum.trend is searched too, trial 1 wins two rules: a row each, one preset)
    assert [(c["trial"], c.get("kept_base")) for c in summary["chosen"]] == \
        [(3, {"policy.alarm.habituate": True}), (1, None), (1, None)]
    assert ran[3]["policy.alarm.habituate"] is False and ran[3]["policy.interval.tighten_per_stream"] is False
    point = out / summary["chosen"][0]["preset"]
    cfg = load_config(str(point))
    assert cfg.policy.alarm.habituate is True and cfg.policy.interval.tighten_per_stream is False
    assert "# policy.alarm.habituate: the trial drew false, which changed no run's score: the base config's true " \
           "is kept" in point.read_text()
    assert "point-0.yaml keeps the base config's policy.alarm.habituate: true (trial 3 drew false, which changed " \
           "no run's score)" in (out / "pareto.md").read_text() and "keeps the base config's" in printed
    assert all(p["policy.sample_size.min"] <= p["policy.sample_size.initial"] for p in ran)
    # Trial 0 is the base config's own values.
    first = json.loads((out / "trials.jsonl").read_text().splitlines()[0])
    assert first["params"]["trigger.freq_steps"] == load_config().trigger.freq_steps
    assert first["params"]["policy.alarm.corroborate"] == load_config().policy.alarm.corroborate


def test_same_seed_same_trials(tmp_path):
    path, onset = collapse_csv(tmp_path)
    rows = []
    for run in ("a", "b"):
        assert main(["tune", path, "--events", f"{path}={onset}", "--trials", "3", "--seed", "7",
                     "--out", str(tmp_path / run), "--no-progress"]) == 0
        rows.append((tmp_path / run / "trials.csv").read_text())
    assert rows[0] == rows[1]


def one_step_csv(tmp_path):
    path = tmp_path / "one.csv"
    write_trace(Trace([TraceRecord(0, {"train/loss": 1.0, "eval/accuracy": 0.5})]), path)
    return str(path)


def no_eval_csv(tmp_path):
    path = tmp_path / "noeval.csv"
    write_trace(Trace([TraceRecord(i, {"train/loss": 1.0}) for i in range(50)]), path)
    return str(path)


def truth_until_csv(tmp_path, until):
    """collapse_csv's run with its eval ground truth up to step ``until`` only."""
    st = make_trace("collapse", steps=300, seed=3)
    records = [TraceRecord(r.step, {k: v for k, v in r.metrics.items() if r.step <= until or not k.startswith("eval/")})
               for r in st.trace.records]
    path = tmp_path / "until.csv"
    write_trace(Trace(records), path)
    return str(path)


@pytest.mark.parametrize(("make", "extra", "message"), [
    (no_eval_csv, ["--events", "{p}=10"], "no eval ground truth"),
    (lambda t: collapse_csv(t)[0], [], "no events in any trace"),
    (one_step_csv, ["--events", "{p}=0"], "1 step: a trace needs at least 2 steps"),
    (lambda t: collapse_csv(t)[0], ["--events", "{p}=150", "--objective", "speed"], "unknown objective 'speed'"),
    (lambda t: collapse_csv(t)[0], ["--events", "{p}=x"], "expected TRACE=STEP"),
    # (found by a new-user probe: an unset shell variable replaced the events file's events with none)
    (lambda t: collapse_csv(t)[0], ["--events", "{p}="], "no step after '=' (an unset shell variable?)"),
    (lambda t: "real:no_such_trace", [], "no real trace 'no_such_trace'"),
    # (found by a new-user probe: accepted; a run in both the tuning and the held-out folds)
    (lambda t: collapse_csv(t)[0], ["--events", "{p}=150", "--objective", "cost", "--objective", "cost"],
     "objective 'cost' is given twice"),
    (lambda t: collapse_csv(t)[0], ["{p}", "--events", "{p}=150"], "is given twice: cross-validation would score"),
    # (found by a new-user probe: every trial refused, one Optuna warning each, then "interrupted", exit 130)
    (lambda t: collapse_csv(t)[0], ["--events", "{p}=150", "--set", "policy.interval.max_factor=10", "--set",
                                    "policy.interval.min_factor=9"],
     "refused: policy.interval.min_factor: 9.0 is larger than policy.interval.max_factor: 8.0"),
    # (found by a new-user probe: check refused an event with no ground truth before it; tune scored it a miss in
    # every trial, exit 0)
    (lambda t: collapse_csv(t)[0], ["--events", "{p}=0"],
     "event at step 0: no ground truth of accuracy before it to compare with (as check says)"),
    # (its mirror, a probe: an event after the trace's last ground truth; every trial scored it a miss, exit 0)
    (lambda t: truth_until_csv(t, 100), ["--events", "{p}=250"],
     "event at step 250: no ground truth of accuracy at or after it, so no evaluation can confirm it and every trial "
     "would score a miss (as check says); eval/accuracy ends at step "),
])
def test_bad_input_exits_2_before_any_trial(tmp_path, capsys, make, extra, message):
    path = make(tmp_path)
    out = tmp_path / "tune"
    rc = main(["tune", path, *[e.replace("{p}", path) for e in extra], "--trials", "2", "--out", str(out),
               "--no-progress"])
    assert rc == 2
    assert message in capsys.readouterr().err
    assert not (out / "trials.jsonl").exists()


def test_an_out_that_is_a_file_is_named_so(tmp_path, capsys):
    """It said "not writable (File exists)" (a new-user probe)."""
    path, onset = collapse_csv(tmp_path)
    (tmp_path / "out").write_text("")
    assert main(["tune", path, "--events", f"{path}={onset}", "--trials", "1", "--out", str(tmp_path / "out"),
                 "--no-progress"]) == 2
    assert f"--out {tmp_path / 'out'}: a file, not a folder" in capsys.readouterr().err


def test_ctrl_c_keeps_the_trials_done_and_writes_what_it_has(tmp_path):
    path, onset = collapse_csv(tmp_path, steps=400)
    out = tmp_path / "tune"
    # (SIGINT at its default in the child: a test run started in the background, `pytest &`, ignores SIGINT, the
    # child inherits that, and a process that ignores SIGINT keeps ignoring it, as Python itself does.)
    proc = subprocess.Popen([sys.executable, "-m", "adaptive_eval", "tune", path, "--events", f"{path}={onset}",
                             "--trials", "100000", "--out", str(out), "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    log = out / "trials.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not log.exists() or len(log.read_text().splitlines()) < 2):
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "interrupted: kept the" in stderr
    done = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(done) >= 2
    with open(out / "trials.csv") as f:
        assert len(f.read().splitlines()) == len(done) + 1
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["trials"] == len(done)
    assert (out / "pareto.png").is_file() and os.listdir(out / "presets")


def test_pareto_and_params_apply():
    assert pareto([(1, 1), (1, 1), (2, 0)]) == [0, 1, 2]
    cfg = apply_params(load_config("areal"), {"cusum.threshold": 5.0, "trigger.freq_steps": 7})
    assert cfg.trigger.freq_steps == 7
    assert [d["type"] for d in cfg.streams.default] == ["cusum"]


def test_the_first_ctrl_c_only_asks_the_search_to_stop_the_second_interrupts():
    """A KeyboardInterrupt raised at an arbitrary point of a trial was sometimes swallowed (the search ran on:
    CI timed out waiting for it) or turned into an AttributeError by OmegaConf caught half-way through building
    a config (the search crashed).  So the first SIGINT only sets a flag that ends the search after the run
    being replayed; a second one raises at once; the previous handler comes back."""
    import threading

    from adaptive_eval.tune import _stop_on_sigint

    outer = signal.signal(signal.SIGINT, signal.default_int_handler)  # (a background test run ignores SIGINT)
    try:
        stop, writing = threading.Event(), threading.Event()
        with pytest.raises(KeyboardInterrupt):
            with _stop_on_sigint(stop, writing):
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)  # (the handler runs in the main thread at the next bytecode)
                assert stop.is_set()
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(1.0)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        # While the outputs are written, no Ctrl-C raises (a second one lost them, found by a new-user probe).
        stop, writing = threading.Event(), threading.Event()
        with _stop_on_sigint(stop, writing):
            writing.set()
            for _ in range(3):
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)
            assert stop.is_set()
        # A process that ignores SIGINT (started in the background) keeps ignoring it: nothing is set.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        stop = threading.Event()
        with _stop_on_sigint(stop, writing):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
        assert not stop.is_set() and signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, outer)


def test_a_second_ctrl_c_while_the_outputs_are_written_loses_none_of_them(tmp_path, monkeypatch):
    """Found by a new-user probe: two Ctrl-C 50 ms apart raised KeyboardInterrupt inside write_outputs (the
    handler was already gone): a traceback, and summary.json, pareto.* and the presets not written."""
    from adaptive_eval import tune as tune_mod

    real = tune_mod.write_outputs

    def interrupted_while_writing(*a, **kw):
        for _ in range(2):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
        return real(*a, **kw)

    monkeypatch.setattr(tune_mod, "write_outputs", interrupted_while_writing)
    path, onset = collapse_csv(tmp_path)
    case = tune_mod.case_from_file(path, load_config("default"), events=[onset])
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)  # (a background test run ignores SIGINT)
    try:
        result = tune_mod.tune([case], load_config("default"), trials=2, out_dir=str(tmp_path / "out"),
                               progress=False)
    finally:
        signal.signal(signal.SIGINT, outer)
    assert len(result.trials) == 2 and not result.interrupted  # (the search had finished: nothing was cut short)
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["trials"] == 2
    assert (tmp_path / "out" / "pareto.png").is_file() and os.listdir(tmp_path / "out" / "presets")


def test_a_ctrl_c_while_the_chosen_switches_are_checked_ends_the_check_and_says_interrupted(tmp_path, monkeypatch):
    """Found in review: a Ctrl-C after the last trial, while the chosen points' switches were replayed with the base
    config's values, was swallowed: the check ran on, exit 0, summary.json "interrupted": false."""
    from adaptive_eval import tune as tune_mod

    real = tune_mod._inert_switches

    def interrupted_while_checking(*a, **kw):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
        return real(*a, **kw)

    monkeypatch.setattr(tune_mod, "_inert_switches", interrupted_while_checking)
    path, onset = collapse_csv(tmp_path)
    out = tmp_path / "tune"
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)  # (a background test run ignores SIGINT)
    try:
        rc = main(["tune", path, "--events", f"{path}={onset}", "--objective", "cost", "--objective", "delay",
                   "--trials", "4", "--out", str(out), "--no-progress"])
    finally:
        signal.signal(signal.SIGINT, outer)
    summary = json.loads((out / "summary.json").read_text())
    assert rc == 130 and summary["interrupted"] is True and summary["trials"] == 4
    # (uninterrupted, trial 3's preset keeps the base's habituate: see the first test; here it keeps its draw)
    assert not any("kept_base" in c for c in summary["chosen"])
    assert load_config(str(out / summary["chosen"][0]["preset"])).policy.alarm.habituate is False
    # ... and says so (a probe: nothing in the preset, the table or summary.json said the check had not run)
    unchecked = ["policy.interval.tighten_per_stream", "policy.alarm.habituate"]  # (both drawn off in trial 3)
    assert summary["chosen"][0]["unchecked"] == unchecked
    header = (out / summary["chosen"][0]["preset"]).read_text()
    assert f"# the search was interrupted before the check of {', '.join(unchecked)}: the trial's drawn value is " \
           "kept" in header and "# the search was interrupted (Ctrl-C) after 4 trial(s)" in header
    assert f"point-0.yaml: the search was interrupted before the check of {', '.join(unchecked)}" in \
        (out / "pareto.md").read_text()


def test_trials_the_config_refuses_are_counted_and_the_first_reason_said(tmp_path, capsys):
    """They were Optuna's warning each ("Trial 3 failed ... The value nan is not acceptable"), the reason only
    in a trial attribute."""
    path, onset = collapse_csv(tmp_path)
    assert main(["tune", path, "--events", f"{path}={onset}", "--trials", "6", "--out", str(tmp_path / "t"),
                 "--no-progress", "--set", "policy.interval.min_factor=7.9", "--set",
                 "policy.interval.max_factor=8"]) == 0
    err = capsys.readouterr().err
    assert "of the 6 trials run were refused by the config's checks, so not scored (the first: " \
           "policy.interval.min_factor: 7.9 is larger than policy.interval.max_factor:" in err
    assert "The value nan is not acceptable" not in err


def test_tune_on_a_trace_logged_every_10_steps_counts_training_steps_with_every_step(tmp_path, capsys):
    from adaptive_eval.trace import Trace

    st = make_trace("collapse", steps=600, seed=5)
    path = tmp_path / "sparse.csv"
    write_trace(Trace([r for r in st.trace.records if r.step % 10 == 0], "sparse"), path)
    onset = int(st.events[0].step)
    args = ["tune", str(path), "--events", f"{path}={onset}", "--trials", "1", "--no-progress"]
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    assert "record every 10 steps" in capsys.readouterr().err
    # its delay in the trace's steps, as check and the user's tests count them (it was in records: 2 for 20 steps)
    from adaptive_eval.testing import replay_trace

    chosen = json.loads((tmp_path / "a" / "summary.json").read_text())["chosen"][0]
    run = replay_trace(path, str(tmp_path / "a" / chosen["preset"]), events=[onset])
    assert chosen["values"][1] == run.confirmed_after(run.events[0]) > 10  # (records: 5.0)
    assert main([*args, "--out", str(tmp_path / "b"), "--set", "replay.every_step=true"]) == 0
    assert "record every 10 steps" not in capsys.readouterr().err
    full = tmp_path / "full.csv"
    write_trace(st.trace, full)
    assert main(["tune", str(full), "--events", f"{full}={onset}", "--trials", "1", "--no-progress",
                 "--out", str(tmp_path / "c")]) == 0
    per_1k = {d: json.loads(line)["values"][0] for d in "abc"  # (objectives: cost, delay, regret)
              for line in (tmp_path / d / "trials.jsonl").read_text().splitlines()}
    # Replayed every training step, the sparse run costs about what the run logged every step does; record
    # by record its evaluations are 10x further apart in training steps, yet cost more per 1,000 "steps".
    assert 0.6 < per_1k["b"] / per_1k["c"] < 1.4, per_1k
    assert per_1k["a"] > 1.5 * per_1k["c"], per_1k


def test_interrupted_before_any_trial_says_nothing_was_chosen(tmp_path, capsys, monkeypatch):
    """It printed an empty table and "wrote ... presets/point-*.yaml" with no preset there."""
    import optuna

    def interrupted(self, *a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(optuna.study.Study, "optimize", interrupted)
    path, onset = collapse_csv(tmp_path)
    out = tmp_path / "tune"
    assert main(["tune", path, "--events", f"{path}={onset}", "--trials", "4", "--out", str(out),
                 "--no-progress"]) == 130
    captured = capsys.readouterr()
    assert "interrupted before any trial finished: nothing to choose, no preset written" in captured.err
    assert "| preset |" not in captured.out and "presets/point-*.yaml" not in captured.out
    assert captured.out.rstrip().endswith("(with no trial in them)")  # (not read as results; a probe)
    assert json.loads((out / "summary.json").read_text())["trials"] == 0 and not os.listdir(out / "presets")


def test_a_note_when_a_fold_has_no_event_for_the_held_out_delay(tmp_path, capsys):
    """Two runs, one with an event, three folds: the held-out delay column was '-' with no word why."""
    path, onset = collapse_csv(tmp_path)
    quiet = tmp_path / "quiet.csv"
    write_trace(make_trace("flat", steps=300, seed=1).trace, quiet)
    assert main(["tune", path, str(quiet), "--events", f"{path}={onset}", "--trials", "2", "--out",
                 str(tmp_path / "t"), "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "note: 1 of the 2 runs have events and there are 2 folds: a held-out delay is '-'" in captured.err
    assert "presets/point-*.yaml (" in captured.out
    # the held-out columns say what is held out (the rule's choice, not the search; a sceptical review)
    assert "the search itself saw every fold, so these are optimistic" in (tmp_path / "t" / "pareto.md").read_text()


def percent_csv(tmp_path, column="eval/acc", std=False):
    """An accuracy in percent (60 falling to 20 at step 150), with its events file beside it."""
    path = tmp_path / "pct.csv"
    lines = [f"step,train/reward,{column}" + (f",{column}:std" if std else "")]
    lines += [f"{s},1.0,{60 if s < 150 else 20}" + (",5.0" if std else "") for s in range(300)]
    path.write_text("\n".join(lines) + "\n")
    (tmp_path / "pct.csv.events.yaml").write_text("events:\n  - {step: 150, direction: down}\n")
    return str(path)


def test_ground_truth_in_percent_exits_2_before_any_trial_unless_declared_a_mean(tmp_path, capsys):
    """tune printed a note and ran every trial on an accuracy in percent, where every evaluation returns the value
    itself and every delay is a miss: minutes of trials for nothing (found by a new user)."""
    path = percent_csv(tmp_path)
    out = tmp_path / "tune"
    args = ["--trials", "1", "--no-progress", "--out", str(out)]
    assert main(["tune", path, *args]) == 2
    err = capsys.readouterr().err
    assert (f"adaptive-eval tune: {path}: column 'eval/acc' looks like a percentage: its values lie in [20, 60] "
            "(the first above 1: 60 at step 0) and it has no 'eval/acc:std' column") in err
    # (naming the trace: a user who named the column for one trace of several followed --eval COL:0.01, and the
    # other trace had no such column; a probe)
    assert f"--eval {path}=eval/acc:0.01;" in err and "evaluation.metric_kinds={acc: mean}" in err
    assert "values are above 1" not in err  # (every value is: a scale, not stray values)
    assert "tuning on" not in err and not (out / "trials.jsonl").exists()
    # A foreign column named with --eval: the hint names it as the command line does.
    other = tmp_path / "other"
    other.mkdir()
    path2 = percent_csv(other, column="eval_acc")
    assert main(["tune", path2, "--stream", "train/reward", "--eval", "eval_acc", *args]) == 2
    assert "column 'eval/eval_acc' looks like a percentage" in (err := capsys.readouterr().err)
    assert f"--eval {path2}=eval_acc:0.01;" in err and not (out / "trials.jsonl").exists()
    # replay's and check's note as well (they said --eval eval/eval_acc:0.01, which then had no such column)
    for cmd in (["replay", path2, "--no-tensorboard", "--out", str(tmp_path / "r")], ["check", path2]):
        main([*cmd, "--stream", "train/reward", "--eval", "eval_acc"])
        err = capsys.readouterr().err
        assert "a percentage? scale it: --eval eval_acc:0.01; a mean? give a column eval_acc:std" in err, err
    # What it suggests runs; so do a mean declared as such and a column with its per-sample sd.
    assert main(["tune", path, "--eval", f"{path}=eval/acc:0.01", *args]) == 0
    assert main(["tune", path, "--set", "evaluation.metric_kinds={acc: mean}", *args[:-1], str(tmp_path / "t2")]) == 0
    std = tmp_path / "std"
    std.mkdir()
    assert main(["tune", percent_csv(std, std=True), *args[:-1], str(tmp_path / "t3")]) == 0


def test_a_proportion_with_a_stray_value_above_1_is_told_to_fix_it_not_to_scale_it(tmp_path, capsys):
    """A probe: proportions with one typo (1.7 at step 60) were refused as a percentage with the advice to scale
    every value by 0.01."""
    path = tmp_path / "typo.csv"
    lines = ["step,train/reward,eval/acc"] + [f"{s},1.0,{1.7 if s == 60 else 0.8}" for s in range(0, 300, 10)]
    path.write_text("\n".join(lines) + "\n")
    assert main(["tune", str(path), "--objective", "cost", "--trials", "1", "--no-progress", "--out",
                 str(tmp_path / "t")]) == 2
    assert ("(the first above 1: 1.7 at step 60; 1 of its 30 values are above 1: if the others are proportions, "
            "those are errors in the trace to fix, not a scale)") in capsys.readouterr().err


def test_a_proportion_a_rounding_error_above_1_is_not_refused_as_a_percentage(tmp_path, capsys):
    """An accuracy that is a mean of floats can read 1.0000000000000002: tune refused it as a percentage ('its values
    lie in [0.5, 1] (the first above 1: 1 at step 10)') and told to scale it by 0.01 (found in review); replay draws
    every other value as a proportion, so it is tuned."""
    path = tmp_path / "ulp.csv"
    lines = ["step,train/reward,eval/acc"]
    lines += [f"{s},1.0,{1.0000000000000002 if s == 10 else (0.8 if s < 150 else 0.5)!r}" for s in range(300)]
    path.write_text("\n".join(lines) + "\n")
    (tmp_path / "ulp.csv.events.yaml").write_text("events:\n  - {step: 150, direction: down}\n")
    assert main(["tune", str(path), "--trials", "1", "--no-progress", "--out", str(tmp_path / "tune")]) == 0
    assert "looks like a percentage" not in capsys.readouterr().err


def test_a_searched_confirm_size_is_clipped_to_the_eval_set():
    # SPACE reaches 1024: a preset was written with confirm_size 1022 beside replay.eval_set_size 500
    cfg = apply_params(load_config(), {"policy.peak.confirm_size": 1022})
    assert cfg.replay.eval_set_size == 500 and cfg.policy.peak.confirm_size == 500
    assert apply_params(load_config(), {"policy.peak.confirm_size": 200}).policy.peak.confirm_size == 200


def _named_csv(folder, name, column, scale):
    """A run whose accuracy (0.6 falling to 0.2 at step 150, times ``scale``) is logged as ``column``, beside a
    reward that falls with it, and its events file."""
    path = folder / name
    lines = [f"step,train/reward,{column}"]
    lines += [f"{s},{1.0 if s < 150 else 0.2},{(0.6 if s < 150 else 0.2) * scale:g}" for s in range(300)]
    path.write_text("\n".join(lines) + "\n")
    (folder / f"{name}.events.yaml").write_text("events:\n  - {step: 150, direction: down}\n")
    return str(path)


def test_the_metric_an_events_file_names_is_what_tune_scores_even_beside_a_configs_metric(tmp_path, capsys):
    """A probe: with --config's evaluation.metric set, tune scored the events on that metric, not on the one their
    events file names (check judged the same event on the file's: 15 steps against tune's 2), and a misspelt metric
    there ran unsaid, exit 0.  Now the file's metric is scored (the trials still track the config's), a misspelt
    one is exit 2, and an events file naming two metrics is refused, saying so."""
    path = tmp_path / "run.csv"
    rows = ["step,train/reward,eval/math/acc,eval/aime/acc"]
    rows += [f"{s},{1.0 if s < 150 else 0.2},0.6,{0.5 if s < 150 else 0.1}" for s in range(300)]
    path.write_text("\n".join(rows) + "\n")
    events = tmp_path / "run.csv.events.yaml"
    args = ["tune", str(path), "--set", "evaluation.metric=math/acc", "--trials", "1", "--no-progress"]
    events.write_text("events:\n  - {step: 150, direction: down, metric: aime/acc}\n")
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    assert f"scored on {path}: aime/acc" in capsys.readouterr().err
    trial = json.loads((tmp_path / "a" / "trials.jsonl").read_text().splitlines()[0])
    assert trial["fold_values"][0][1] < 100  # the aime drop confirmed (math never moves: scored there, a miss)
    events.write_text("events:\n  - {step: 150, direction: down, metric: aime/acx}\n")
    assert main([*args, "--out", str(tmp_path / "b")]) == 2
    assert "no eval ground truth for aime/acx" in capsys.readouterr().err
    events.write_text("events:\n  - {step: 150, direction: down, metric: aime/acc}\n"
                      "  - {step: 150, direction: down, metric: math/acc}\n")
    assert main([*args, "--out", str(tmp_path / "c")]) == 2
    assert "its events name aime/acc and math/acc: tune scores a run on one metric" in capsys.readouterr().err


def test_traces_that_name_their_ground_truth_differently_get_one_eval_each(tmp_path, capsys):
    """tune and check applied one --eval to every trace, so runs logged by two tools (HF's eval_acc, a percent
    val_acc) could not be tuned on together.  --eval TRACE=COL[:scale] names each trace's own."""
    a = _named_csv(tmp_path, "hf.csv", "eval_acc", 1.0)
    b = _named_csv(tmp_path, "lightning.csv", "val_acc", 100.0)
    args = ["--stream", "train/reward", "--trials", "2", "--no-progress", "--out", str(tmp_path / "t")]
    assert main(["tune", a, b, "--eval", "eval_acc", *args]) == 2
    err = capsys.readouterr().err
    assert "lightning.csv" in err and "no column 'eval_acc'" in err
    assert main(["tune", a, b, "--eval", f"{a}=eval_acc", "--eval", f"{b}=val_acc:0.01", *args]) == 0
    assert f"scored on {a}: eval_acc, {b}: val_acc" in capsys.readouterr().err
    trials = [json.loads(line) for line in (tmp_path / "t" / "trials.jsonl").read_text().splitlines()]
    # each fold is one run, its delay the second objective (a miss counts 100): both confirmed, truth on both
    assert trials and all(len(t["fold_values"]) == 2 and all(f[1] < 100 for f in t["fold_values"]) for t in trials)
    assert main(["check", a, b, "--stream", "train/reward", "--eval", f"{a}=eval_acc",
                 "--eval", f"{b}=val_acc:0.01"]) == 0
    out = capsys.readouterr().out
    assert "hf.csv" in out and "lightning.csv" in out
    other = _named_csv(tmp_path, "other.csv", "acc", 1.0)
    assert main(["tune", a, b, "--eval", f"{other}=acc", *args]) == 2
    assert f"names the trace {other!r}, which is not one of the traces given" in capsys.readouterr().err


def test_traces_that_name_their_step_column_differently_get_one_step_column_each(tmp_path, capsys):
    """--step-column applied to every trace, so a run logged by steps and one logged by iterations could not be
    checked together (found by a new-user probe).  --step-column TRACE=COL names each trace's own."""
    a = _named_csv(tmp_path, "a.csv", "eval_acc", 1.0)
    b = tmp_path / "b.csv"
    b.write_text(pathlib.Path(a).read_text().replace("step,", "iter,", 1))
    (tmp_path / "b.csv.events.yaml").write_text("events:\n  - {step: 150, direction: down}\n")
    check = ["check", a, str(b), "--stream", "train/reward", "--eval", "eval_acc"]
    assert main([*check, "--step-column", "iter"]) == 2
    assert "a.csv:1: no column 'iter'" in capsys.readouterr().out
    assert main([*check, "--step-column", f"{b}=iter"]) == 0
    out = capsys.readouterr().out
    assert "a.csv" in out and "b.csv" in out
    assert main([*check, "--step-column", "iter", "--step-column", "step"]) == 2
    assert "--step-column is given 2 times" in capsys.readouterr().out
    from adaptive_eval.cli import _load_trace, build_parser

    # the default spelt out is no trace option: a shipped trace by name still loads (found in review)
    assert len(_load_trace(build_parser().parse_args(["replay", "grpo_no_kl", "--step-column", "step"]))[0]) == 500
    other = tmp_path / "other.csv"
    other.write_text("x\n")
    assert main([*check, "--step-column", f"{other}=iter"]) == 2
    assert f"--step-column '{other}=iter' names the trace" in capsys.readouterr().err


def test_a_trace_prefix_names_a_folder_of_runs_or_the_longest_trace_and_replay_refuses_one_it_does_not_read(
        tmp_path, capsys):
    """Found in review: ``check runs --eval runs=val_acc`` was accepted and applied to nothing; with ``exp.csv``
    beside ``exp.csv=2.csv`` the first ``=`` read ``exp.csv=2.csv=acc2`` as column ``2.csv=acc2`` of ``exp.csv``; and
    replay ran a ``TRACE=COL`` of another trace without ground truth, exit 0."""
    runs = tmp_path / "runs"
    runs.mkdir()
    _named_csv(runs, "a.csv", "val_acc", 1.0)
    _named_csv(runs, "b.csv", "val_acc", 1.0)
    assert main(["check", str(runs), "--stream", "train/reward", "--eval", f"{runs}=val_acc"]) == 0
    out = capsys.readouterr().out
    assert "a.csv" in out and "b.csv" in out
    plain = _named_csv(tmp_path, "exp.csv", "acc1", 1.0)
    odd = _named_csv(tmp_path, "exp.csv=2.csv", "acc2", 1.0)
    assert main(["check", plain, odd, "--stream", "train/reward", "--eval", f"{plain}=acc1",
                 "--eval", f"{odd}=acc2"]) == 0
    capsys.readouterr()
    assert main(["replay", plain, "--stream", "train/reward", "--eval", f"{odd}=acc2", "--no-tensorboard",
                 "--out", str(tmp_path / "r")]) == 2
    assert f"names the trace {odd!r}, which is not one of the traces given" in capsys.readouterr().err


def test_an_events_file_s_direction_is_the_one_scored_and_a_run_never_evaluated_is_not_a_perfect_pick(tmp_path):
    """tune and benchmarks/policies.py read the direction of each event from the truth 50 records on, so a
    silent degradation whose next checkpoints still rose (0.60 -> 0.70, then 0.30 from step 200) was scored
    "up" and confirmed at once, though its events file says ``direction: down`` (found by a new-user probe).
    And a schedule that never evaluated a run scored regret NaN, which the mean over runs left out: a fixed
    schedule too sparse for a short run read 0% regret."""
    from adaptive_eval.cli import _tune_cases, build_parser
    from adaptive_eval.tune import aggregate, replay_case, score_case

    path = tmp_path / "run.csv"
    acc = [0.6 if s < 150 else (0.6 + 0.1 * (s - 150) / 50 if s < 200 else 0.3) for s in range(300)]
    path.write_text("step,train/reward,eval/acc\n" + "".join(f"{s},1.0,{a:.4f}\n" for s, a in enumerate(acc)))
    (tmp_path / "run.csv.events.yaml").write_text("events:\n  - {step: 150, direction: down}\n")
    base = load_config("areal")
    case, = _tune_cases(build_parser().parse_args(["tune", str(path)]), base)
    assert case.events == [150] and case.directions == ["down"]
    score = score_case(case, replay_case(case, load_config("areal", ["trigger.freq_steps=2"])))
    assert 50 <= score.delays[0] <= 60  # the fall at step 200, not the rise before it
    case.directions = None
    assert score_case(case, replay_case(case, load_config("areal", ["trigger.freq_steps=2"]))).delays[0] < 50
    # every 400 steps: no evaluation in 300 steps, no pick, the regret of a pick at random (not NaN, not 0)
    never = score_case(case, replay_case(case, load_config("areal", ["trigger.freq_steps=400",
                                                                     "trigger.eval_at_end=false"])))
    assert never.evals == 0 and never.pick is None
    assert never.regret_points == pytest.approx(max(acc) - sum(acc) / len(acc), abs=1e-4)
    assert aggregate([never])["regret"] == pytest.approx(never.regret) and never.regret > 0.4


def test_a_note_said_once_per_evaluator_is_said_once_per_tune(tmp_path, monkeypatch, caplog):
    """Found by a new-user probe: every trial replays with new evaluators, so a note "(said once)" came once per
    trial (3 times in 4 trials); tune lets each message through once."""
    import logging

    import adaptive_eval.tune as tune_module

    real = tune_module.tune

    def noisy(*args, **kwargs):
        for _ in range(3):
            logging.getLogger("adaptive_eval").warning("suite 'aime': pass@4 is not reported (said once)")
        return real(*args, **kwargs)

    monkeypatch.setattr(tune_module, "tune", noisy)
    path, onset = collapse_csv(tmp_path)
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        assert main(["tune", path, "--events", f"{path}={onset}", "--trials", "1", "--out", str(tmp_path / "t"),
                     "--no-progress"]) == 0
    assert sum("pass@4 is not reported" in r.getMessage() for r in caplog.records) == 1
    logging.getLogger("adaptive_eval").warning("after tune: said again")  # (the filter is gone after it)
    assert any("said again" in r.getMessage() for r in caplog.records)


def test_a_replay_warning_said_every_trial_is_said_once_per_tune_numbers_and_plurals_aside(tmp_path, monkeypatch,
                                                                                          capsys):
    """A probe: replay's warnings.warn, "N evaluations of suite ... (steps ...) did not measure ...", came once per
    trial, trace and suite: 78 of 92 stderr lines of a 12-trial tune."""
    import warnings

    import adaptive_eval.tune as tune_module

    real = tune_module.tune

    def noisy(*args, **kwargs):
        for steps in ("4, 9", "8", "13, 17, 21"):
            n = len(steps.split(","))
            warnings.warn(f"run.csv: {n} evaluation{'s' if n > 1 else ''} of suite 'math' (step"
                          f"{'s' if n > 1 else ''} {steps}) did not measure math/acc", RuntimeWarning)
        warnings.warn("run.csv: something else entirely", RuntimeWarning)
        return real(*args, **kwargs)

    monkeypatch.setattr(tune_module, "tune", noisy)
    path, onset = collapse_csv(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert main(["tune", path, "--events", f"{path}={onset}", "--trials", "1", "--out", str(tmp_path / "t"),
                     "--no-progress"]) == 0
    said = capsys.readouterr().err  # (the CLI prints warnings as "adaptive-eval: warning: ...")
    assert said.count("did not measure") == 1 and said.count("something else") == 1


def test_a_warning_said_once_a_run_is_said_once_a_command(tmp_path, caplog):
    """Each trial replays every trace with an evaluator of its own, so "the budget holds back the evaluation the
    alarm asked for ... (said once)" came 14 times in the README's 30 trials (a fresh-clone check)."""
    import logging

    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        assert main(["tune", "real:grpo_kl_collapse", "real:grpo_no_kl", "real:grpo_format_reward", "--trials", "6",
                     "--out", str(tmp_path / "out")]) == 0
    held = [r for r in caplog.records if "the budget holds back the evaluation" in r.getMessage()]
    assert len(held) == 1
    # naming the trial and the run it came from ("step 36: ..." named neither)
    assert re.match(r"trial \d+, real/grpo_\w+: step \d+: the budget holds back", held[0].getMessage())
    assert logging.getLogger("adaptive_eval").filters == []  # (the command's own filter is gone after it)
    from adaptive_eval.types import SaidOnce

    said = SaidOnce(templates=True)  # (a "%s" template says nothing of its own: its text is said once; review)
    record = lambda msg, *args: logging.LogRecord("adaptive_eval", logging.WARNING, "x", 1, msg, args, None)  # noqa
    assert [said.filter(record("%s", text)) for text in ("one problem", "another problem", "one problem")] == \
        [True, True, False]
    assert said.filter(logging.LogRecord("adaptive_eval", logging.ERROR, "x", 1, "%s", ("one problem",), None))


def test_a_case_is_replayed_tracking_the_metric_it_is_scored_on_in_its_direction(monkeypatch):
    """benchmarks/policies.py replayed the shipped distill_r1 run (ground truth: a validation loss, lower is better)
    with evaluation.metric null and higher_is_better true: the policies followed the loss as higher-is-better (the
    peak policy re-measured its rises as new bests) while the scoring read it lower-is-better.  The replay now
    tracks the case's metric in the case's direction; a config's own evaluation.metric stands."""
    from adaptive_eval import replay as replay_module
    from adaptive_eval.tune import case_from_real, replay_case

    seen = []
    real = replay_module.replay
    monkeypatch.setattr(replay_module, "replay", lambda trace, cfg, **kw: seen.append(cfg) or real(trace, cfg, **kw))
    case = case_from_real("distill_r1")
    assert case.metric == "val_loss" and case.higher_is_better is False
    replay_case(case, load_config("default"))
    with pytest.warns(RuntimeWarning, match="'other'"):  # (it is not in the trace: said)
        replay_case(case, load_config("default", ["evaluation.metric=other"]))
    assert [(c.evaluation.metric, c.evaluation.higher_is_better) for c in seen] == [("val_loss", False),
                                                                                  ("other", False)]


def test_an_out_folder_whose_presets_is_a_file_is_refused_before_any_trial(tmp_path, capsys):
    """A probe: every trial ran, then "[Errno 17] File exists: .../presets", and nothing was written."""
    path, onset = collapse_csv(tmp_path)
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "presets").write_text("mine")
    assert main(["tune", path, "--events", f"{path}={onset}", "--trials", "2", "--out", str(tmp_path / "t"),
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "presets is a file, not a folder: tune writes its presets there" in err and "trial" not in err


def test_a_negative_synthetic_seed_is_refused_naming_the_trace(capsys, tmp_path):
    """A probe: tune synthetic:-1 said numpy's "expected non-negative integer", naming nothing."""
    assert main(["tune", "synthetic:-1", "--trials", "1", "--out", str(tmp_path / "t"), "--no-progress"]) == 2
    assert "synthetic:-1: expected synthetic:SEED (a non-negative integer seed" in capsys.readouterr().err


def test_the_delay_objectives_cap_is_a_hundred_records_worth_of_steps():
    """A review: with delays in steps, a trace logged every 200 steps scored a confirmation 2 records late (400
    steps) as a miss, 100, and the delay objective lost its signal there."""
    from adaptive_eval.scoring import RunScore
    from adaptive_eval.tune import capped_delay

    coarse = RunScore(steps=100, evals=5, samples=500, delays=[400, None], needless=0, quiet_evals=0, regret=0.0,
                      step_scale=200.0)
    assert capped_delay([coarse]) == (400 + 20_000) / 2
    fine = RunScore(steps=100, evals=5, samples=500, delays=[40, 250, None], needless=0, quiet_evals=0, regret=0.0)
    assert capped_delay([fine]) == (40 + 100 + 100) / 3


def test_an_asynchronous_configs_delay_on_a_trace_logged_every_k_steps_is_in_one_unit():
    """(A review.)  replay_case turned each evaluation's step into a record index and left integrated_step in trace
    steps: once a delay counted to integrated_step, an asynchronous config on a trace logged every 10 steps read
    990 (the trace's end) where its result came back 620 steps after the event."""
    import numpy as np

    from adaptive_eval.trace import Trace, TraceRecord
    from adaptive_eval.tune import Case, replay_case, score_case

    rng = np.random.default_rng(0)
    recs = [TraceRecord(i * 10, {"loss": 1.0 + 0.01 * rng.random(), "eval/acc": 0.8 if i < 100 else 0.3}, None,
                        float(i * 100)) for i in range(200)]
    truth = [r.metrics["eval/acc"] for r in recs]
    delays = []
    for extra in ([], ["evaluation.asynchronous=true", "evaluation.async_integrate_after_steps=20"]):
        case = Case("x", Trace(recs), [100], truth, "acc", True, 500)
        cfg = load_config("default", ["trigger.freq_steps=50", "evaluation.metric=acc", *extra])
        delays.append(score_case(case, replay_case(case, cfg)).delays[0])
    assert delays[1] == delays[0] + 20 < 900  # (in trace steps: the latency's 2 records of 10 steps)


def test_a_point_that_wins_several_rules_has_a_row_and_a_held_out_figure_for_each(tmp_path):
    """A new user's probe: trial 3 was best on cost and on delay and the knee, labelled "best cost" alone; "best
    delay" and "knee" had no row, no held-out figure, nothing in summary.json."""
    from adaptive_eval.tune import summarize, write_outputs

    objectives = ["cost", "delay", "regret"]
    # (per trial: two folds' values; trial 0 is cheapest and fastest, trial 1 the best regret)
    folds = [[[100, 10, 0.2], [120, 12, 0.3]], [[900, 40, 0.0], [800, 30, 0.01]], [[500, 20, 0.5], [400, 25, 0.4]]]
    done = [{"number": n, "params": {}, "values": [sum(v) / 2 for v in zip(*f)], "fold_values": f}
            for n, f in enumerate(folds)]
    result = summarize(done, objectives, [[0], [1]], interrupted=False)
    assert result.chosen == [(0, "best cost"), (0, "best delay"), (0, "knee"), (1, "best regret")]
    assert set(result.cv) == {"best cost", "best delay", "knee", "best regret"} and result.folds == 2
    write_outputs(result, load_config(), str(tmp_path))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [(c["preset"], c["rule"]) for c in summary["chosen"]] == [
        ("presets/point-0.yaml", "best cost"), ("presets/point-0.yaml", "best delay"),
        ("presets/point-0.yaml", "knee"), ("presets/point-1.yaml", "best regret")]
    assert summary["folds"] == 2
    assert sorted(p.name for p in (tmp_path / "presets").iterdir()) == ["point-0.yaml", "point-1.yaml"]
    header = (tmp_path / "presets" / "point-0.yaml").read_text()
    assert "(trial 0, best cost, best delay, knee)" in header
    assert "# held-out folds (best delay): " in header and "# held-out folds (knee): " in header
    rows = [line for line in (tmp_path / "pareto.md").read_text().splitlines() if line.startswith("| point-")]
    assert [row.split(" | ")[2] for row in rows] == ["best cost", "best delay", "knee", "best regret"]


def test_too_few_runs_for_the_folds_asked_is_said(tmp_path, capsys):
    """A probe: one run left the held-out columns '-' with no word why; --folds 5 on two runs became 2 silently."""
    path, onset = collapse_csv(tmp_path)
    assert main(["tune", path, "--events", f"{path}={onset}", "--trials", "1", "--folds", "5", "--out",
                 str(tmp_path / "a"), "--no-progress"]) == 0
    assert "note: --folds 5 on 1 run(s): 1 fold(s), one run each; no cross-validation, so no held-out figures" \
        in capsys.readouterr().err
    other, onset2 = collapse_csv(tmp_path, name="other.csv", seed=4)
    assert main(["tune", path, other, "--events", f"{path}={onset}", "--events", f"{other}={onset2}", "--trials",
                 "1", "--folds", "5", "--out", str(tmp_path / "b"), "--no-progress"]) == 0
    assert "note: --folds 5 on 2 run(s): 2 fold(s), one run each" in capsys.readouterr().err
    assert json.loads((tmp_path / "b" / "summary.json").read_text())["folds"] == 2


def test_events_given_for_a_shipped_trace_are_the_ones_scored(tmp_path, capsys):
    """A probe: --events real:NAME=STEPS was accepted, then the shipped annotation scored whatever the steps said
    (99999, outside the trace, too)."""
    args = ["tune", "real:grpo_kl_collapse", "--objective", "delay", "--trials", "1", "--no-progress"]
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    assert main([*args, "--events", "real:grpo_kl_collapse=300", "--out", str(tmp_path / "b")]) == 0
    delays = [json.loads((tmp_path / d / "summary.json").read_text())["chosen"][0]["values"][0] for d in "ab"]
    assert delays[0] != delays[1]
    capsys.readouterr()
    assert main([*args, "--events", "real:grpo_kl_collapse=99999", "--out", str(tmp_path / "c")]) == 2
    assert "step 99999 outside the trace's steps 1-500" in capsys.readouterr().err
    assert main(["tune", "synthetic:0", "--events", "synthetic:0=5", "--trials", "1",
                 "--out", str(tmp_path / "d")]) == 2


def test_a_switch_checked_before_a_ctrl_c_is_not_said_unchecked():
    """A review: a Ctrl-C during the check of a point's second switch said its first one, checked and kept as drawn
    (it changed a score), was "interrupted before the check" too."""
    from adaptive_eval.tune import TuneResult, _unchecked_switches

    base = load_config()
    drawn = {"policy.interval.tighten_per_stream": not base.policy.interval.tighten_per_stream,
             "policy.alarm.habituate": not base.policy.alarm.habituate}
    result = TuneResult(["cost"], [{"number": 5, "params": drawn, "values": [1.0]}], [0], [(0, "best cost")], {},
                        interrupted=True, checked={0: {"policy.interval.tighten_per_stream"}})
    assert _unchecked_switches(result, base) == {0: ["policy.alarm.habituate"]}
    result.checked = {}
    assert _unchecked_switches(result, base) == {0: ["policy.interval.tighten_per_stream", "policy.alarm.habituate"]}


@pytest.mark.parametrize("streams", ["  - type: nonfinite\n",
                                     "  - {type: nonfinite}\n  - {type: cusum, arl0: 2000, k: 0.5}\n"])
def test_trial_0_is_the_base_config_even_one_without_a_cusum_or_with_its_arl0(tmp_path, capsys, streams):
    """Probes: with a --config whose streams have no CUSUM, trial 0 ("the base config") got one, its threshold, k
    and adapt drawn, and scored another config than check scores; its preset added a detector the user never had.
    With a CUSUM set by arl0 every trial got a threshold beside it, refused: "give either threshold or arl0"."""
    path, onset = collapse_csv(tmp_path)
    config = tmp_path / "base.yaml"
    config.write_text("streams:\n  default:\n" + streams)
    events = tmp_path / "events.yaml"
    events.write_text(f"events:\n  - step: {onset}\n")
    assert main(["check", path, "--events", str(events), "--config", str(config)]) == 0
    checked = capsys.readouterr().out
    out = tmp_path / "t"
    assert main(["tune", path, "--events", f"{path}={onset}", "--config", str(config), "--trials", "2",
                 "--out", str(out), "--no-progress"]) == 0
    row, other = [json.loads(line) for line in (out / "trials.jsonl").read_text().splitlines()]
    assert "cusum.threshold" not in row["params"] and "cusum.threshold" in other["params"]
    cost = row["values"][0]
    assert re.search(rf"\b{cost:.0f}\b", checked), (cost, checked)  # check's samples/1k of the base config
    base = [dict(d) for d in load_config(str(config)).streams.default]
    assert [dict(d) for d in apply_params(load_config(str(config)), row["params"]).streams.default] == base


def test_base_values_outside_the_searched_ranges_are_said_clipped_in_trial_0(tmp_path, capsys):
    """A probe: with trigger.freq_steps 250 and a CUSUM threshold of 20 in the base, trial 0, "the base config", ran
    100 and 16.0 and said nothing, before the search or in its table: a baseline the user never ran."""
    path, onset = collapse_csv(tmp_path)
    out = tmp_path / "t"
    assert main(["tune", path, "--events", f"{path}={onset}", "--set", "trigger.freq_steps=250",
                 "--set", "streams.default.1.threshold=20", "--trials", "2", "--out", str(out),
                 "--no-progress"]) == 0
    said = capsys.readouterr()
    row = json.loads((out / "trials.jsonl").read_text().splitlines()[0])
    assert row["params"]["trigger.freq_steps"] == 100 and row["params"]["cusum.threshold"] == 16.0
    clipped = ("trigger.freq_steps 250 -> 100 (searched 5-100); streams.default.1.threshold 20.0 -> 16.0 (searched "
               "3.0-16.0)")  # (the config's own key, which --set takes: cusum.threshold was refused; a probe)
    assert f"trial 0, the base config, runs its values outside the searched ranges clipped into them: {clipped}" \
        in said.err
    assert f"trial 0 (the base config) ran its values outside the searched ranges clipped into them: {clipped}" \
        in said.out
    summary = json.loads((out / "summary.json").read_text())
    assert summary["clipped"] == clipped.split("; ")
    base_preset = next(c["preset"] for c in summary["chosen"] if c["trial"] == 0)
    assert f"# the base config's values outside the searched ranges, clipped into them: {clipped}\n" in \
        (out / base_preset).read_text()
    assert main(["tune", path, "--events", f"{path}={onset}", "--trials", "2", "--out", str(tmp_path / "u"),
                 "--no-progress"]) == 0
    assert "clipped" not in capsys.readouterr().err  # the default preset lies inside every range
    # A key the base sets to null (the step trigger off) stays null in trial 0: it ran a drawn 25, unsaid (a probe)
    assert main(["tune", path, "--events", f"{path}={onset}", "--set", "trigger.freq_steps=null", "--trials", "2",
                 "--out", str(tmp_path / "v"), "--no-progress"]) == 0
    first, other = [json.loads(line) for line in (tmp_path / "v" / "trials.jsonl").read_text().splitlines()]
    assert "trigger.freq_steps" not in first["params"] and "trigger.freq_steps" in other["params"]


def test_an_error_of_the_events_file_beside_the_trace_names_it(tmp_path, capsys):
    """A probe: tune said "event step 5000 outside the trace's steps 0-299" of an events file it read unasked,
    without naming it (check names it)."""
    path, _ = collapse_csv(tmp_path)
    sidecar = pathlib.Path(path + ".events.yaml")
    sidecar.write_text("events:\n  - step: 5000\n")
    assert main(["tune", path, "--trials", "1", "--out", str(tmp_path / "t"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "event step 5000 outside the trace's steps 0-299" in err and f"(events from {sidecar})" in err


def test_a_metric_the_trace_lacks_is_told_with_the_metrics_it_has(tmp_path, capsys):
    """A probe: --set evaluation.metric=acc on a trace of eval/accuracy said "no eval ground truth for acc" and never
    what the trace has (check names it); a CSV without a step column was sent to replay's --step-column."""
    path, onset = collapse_csv(tmp_path)
    assert main(["tune", path, "--events", f"{path}={onset}", "--set", "evaluation.metric=acc", "--trials", "1",
                 "--out", str(tmp_path / "t"), "--no-progress"]) == 2
    assert "no eval ground truth for acc" in (err := capsys.readouterr().err)
    assert "the trace's eval metrics are accuracy (--set evaluation.metric=NAME)" in err
    other = tmp_path / "iter.csv"
    other.write_text("iteration,train/loss\n0,1.0\n1,0.9\n")
    assert main(["tune", str(other), "--trials", "1", "--out", str(tmp_path / "u"), "--no-progress"]) == 2
    assert "adaptive-eval replay (or check, or tune) --step-column COL" in capsys.readouterr().err


def test_a_base_cusum_with_a_list_of_k_is_trial_0_as_it_is(tmp_path, capsys):
    """A review: --set 'streams.default.1.k=[0.5,1.5]' raised TypeError comparing the list with the searched range;
    trial 0 keeps the base's list, the other trials draw one k."""
    path, onset = collapse_csv(tmp_path)
    out = tmp_path / "t"
    assert main(["tune", path, "--events", f"{path}={onset}", "--set", "streams.default.1.k=[0.5,1.5]", "--trials",
                 "2", "--out", str(out), "--no-progress"]) == 0
    first, other = [json.loads(line) for line in (out / "trials.jsonl").read_text().splitlines()]
    assert "cusum.k" not in first["params"] and "cusum.k" in other["params"]

"""adaptive_eval.testing: replay a trace in a test and assert what a preset does, through the public API, the
``adaptive-eval check`` CLI (subprocess) and the opt-in pytest plugin (pytester)."""

import json
import math
import pathlib
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from adaptive_eval import load_config
from adaptive_eval.cli import main
from adaptive_eval.scoring import confirmed_delay, eval_samples
from adaptive_eval.synthetic import make_trace
from adaptive_eval.testing import (
    Event,
    ExpectationError,
    assert_confirmed,
    assert_cost,
    assert_quiet,
    assert_same_decisions,
    events_path,
    load_expectations,
    replay_trace,
    trace_files,
)
from adaptive_eval.trace import Trace, TraceRecord, read_trace, write_trace

pytest_plugins = ["pytester"]

REPO = pathlib.Path(__file__).resolve().parent.parent
ONSET = 116  # of make_trace("collapse", steps=300, seed=11): accuracy falls from ~0.5


@pytest.fixture(scope="module")
def collapse(tmp_path_factory):
    """A synthetic collapse written as a CSV trace, with its events in the sidecar file beside it."""
    d = tmp_path_factory.mktemp("traces")
    st = make_trace("collapse", steps=300, seed=11)
    assert st.events[0].step == ONSET
    path = d / "collapse.csv"
    write_trace(st.trace, path)
    (d / "collapse.csv.events.yaml").write_text(textwrap.dedent(f"""\
        events:
        - step: {ONSET}
          kind: collapse
          direction: down
          within: 10
        quiet:
        - {{start: 30, stop: 80, max_alarms: 0, kind: warm-up}}
        max_samples_per_1k: 12000
        """))
    return path


@pytest.fixture(scope="module")
def collapse_run(collapse):
    return replay_trace(collapse, "default")


@pytest.fixture(scope="module")
def kl_collapse_run():
    return replay_trace("grpo_kl_collapse", "default")


def no_eval_trace(tmp_path) -> pathlib.Path:
    path = tmp_path / "no_eval.csv"
    write_trace(Trace([TraceRecord(i, {"train/reward": 0.5 if i < 50 else 0.1}) for i in range(100)]), path)
    (tmp_path / "no_eval.csv.events.yaml").write_text("- {step: 50, kind: collapse, direction: down}\n")
    return path


# ------------------------------------------------------------------------------------------- the run


def test_replay_trace_returns_decisions_evaluations_alarms_and_costs(collapse_run):
    run = collapse_run
    assert run.name == "collapse.csv" and run.metric == "accuracy" and run.steps == 300
    assert run.events == (Event(ONSET, "collapse", "down", None, 10),)
    assert [e["step"] for e in run.evals] == [d["step"] for d in run.decisions if d["evaluate"]]
    assert len(run.decisions) == len(run.evals) + len(run.deferrals)
    assert [d["step"] for d in run.decisions] == sorted(d["step"] for d in run.decisions)
    assert any(a["step"] >= ONSET for a in run.alarms)
    assert run.samples == eval_samples(run.evals, 500) and run.samples > 0
    assert run.samples_per_1k == pytest.approx(1000 * run.samples / 300)
    assert 0 < run.eval_fraction < 1
    # "confirmed" is scoring.confirmed_delay with the ground truth just before the event as the level.
    truth_before = [v for s, v in run.truth["accuracy"] if s < ONSET][-1]
    assert run.confirmed_after(ONSET) == confirmed_delay(run.evals, ONSET, "accuracy", pre_level=truth_before,
                                                         direction="down")


def test_same_trace_config_and_seed_decide_the_same(collapse, collapse_run):
    assert_same_decisions(collapse_run, replay_trace(collapse, "default"))
    other = replay_trace(collapse, "aggressive")
    with pytest.raises(AssertionError) as err:
        assert_same_decisions(collapse_run, other)
    msg = str(err.value)
    assert "collapse.csv (config default, seed 0) and collapse.csv (config aggressive, seed 0) differ in decisions" \
        in msg
    assert f"({len(collapse_run.decisions)} vs {len(other.decisions)})" in msg and "first difference, #1" in msg


# ------------------------------------------------------------------------------------------- assertions


def test_assert_confirmed_passes_and_returns_the_delay(collapse_run, kl_collapse_run):
    assert assert_confirmed(collapse_run, ONSET) == collapse_run.confirmed_after(ONSET) <= 10
    # The shipped GRPO run: reward collapses at step 56, accuracy 40.8% (step 50) -> 0% (step 100).
    assert kl_collapse_run.events == (Event(56, "collapse", "down"),)
    assert assert_confirmed(kl_collapse_run, 56, within=80) == 61


def test_numpy_integers_are_steps_as_observe_takes_them(collapse, collapse_run):
    # A step read from a pandas column (numpy int64) was refused: "expected an integer, got np.int64(116)"
    assert assert_confirmed(collapse_run, np.int64(ONSET), within=np.int32(10)) == collapse_run.confirmed_after(ONSET)
    run = replay_trace(collapse, "default", events=[np.int64(ONSET), {"step": np.int16(ONSET + 1)}])
    assert [e.step for e in run.events] == [ONSET, ONSET + 1] and all(type(e.step) is int for e in run.events)
    with pytest.raises(ExpectationError, match=r"events\[0\]\.step: expected an integer, got .*116\.5"):
        replay_trace(collapse, "default", events=[{"step": np.float64(116.5)}])


def test_a_within_or_window_that_is_not_a_whole_number_of_steps_is_an_expectation_error(collapse_run):
    """The events file refused them; the functions took 80.5, read True as 1 step, failed the preset "not within nan
    steps", raised a bare TypeError on "80", and took a quiet window 10.0..40.5 (a probe)."""
    for within in ("80", True, math.nan, 80.5):
        with pytest.raises(ExpectationError, match=r"within: expected an integer, got "):
            assert_confirmed(collapse_run, ONSET, within=within)
    with pytest.raises(ExpectationError, match=r"quiet 10.0..40: start: expected an integer, got 10.0"):
        assert_quiet(collapse_run, 10.0, 40)
    with pytest.raises(ExpectationError, match=r"stop: expected an integer, got 40.5"):
        assert_quiet(collapse_run, 10, 40.5)


def test_assert_confirmed_failure_names_trace_event_and_figures(kl_collapse_run):
    with pytest.raises(AssertionError) as err:
        assert_confirmed(kl_collapse_run, 56, within=20)
    msg = str(err.value)
    assert msg.startswith("grpo_kl_collapse (config default, seed 0): the collapse at step 56 (accuracy down) "
                          "was confirmed only 61 steps after it, not within 20 steps.")
    assert "ground truth 0.408 (eval/accuracy at step 50)" in msg and "entirely below it" in msg
    assert "evaluations in steps 56..76: 2" in msg
    # The trace has ground truth at steps 50 and 100: the evaluation at 76 measured the model of step 50 (it
    # scored 0.354 [0.293, 0.42] on it, sampling noise, and does not count as confirming).  Both ran on what the
    # budget afforded of their widened sample (policy.budget.shrink_widened).
    assert "step 76 n=212 0.354 [0.293, 0.42] (interval:tightened (budget: 212 of 512 items); ground truth of " \
           "step 50)" in msg
    assert "measured the model before the event and confirms nothing" in msg
    assert "first confirming evaluation: step 117 n=500 0 [0, 0.00762] (interval:relaxed; ground truth of step 100)" \
        in msg
    # The wrong direction is never confirmed.
    with pytest.raises(AssertionError, match="was never confirmed, not before the trace ends"):
        assert_confirmed(kl_collapse_run, 56, direction="up")


def test_a_late_asynchronous_confirmation_fails_with_its_message_in_pytest_and_in_check(capsys):
    """An asynchronous run's delay counts to the step its result came back: the message looked the confirming
    evaluation up at that step, found none (it was submitted earlier), and raised a bare StopIteration (a probe)."""
    sets = ["evaluation.asynchronous=true", "evaluation.async_integrate_after_steps=5"]
    run = replay_trace("grpo_kl_collapse", load_config(overrides=sets))
    delay = run.confirmed_after(56)
    assert delay is not None and delay > 10
    with pytest.raises(AssertionError) as err:
        assert_confirmed(run, 56, within=10)
    first = next(e for e in run.evals if e.get("integrated_step") == 56 + delay)
    assert f"first confirming evaluation: step {first['step']} " in str(err.value)
    assert f"(its result came back at step {56 + delay})" in str(err.value)
    args = ["check", "grpo_kl_collapse", "--within", "10"] + [a for s in sets for a in ("--set", s)]
    assert main(args) == 1
    assert "grpo_kl_collapse" in capsys.readouterr().out


def test_assert_quiet(collapse_run):
    assert_quiet(collapse_run, 30, 80)  # no alarm before the collapse
    assert_quiet(collapse_run, 30, 80, max_evals=10)
    with pytest.raises(AssertionError) as err:
        assert_quiet(collapse_run, ONSET, ONSET + 10, max_evals=1, max_alarms=0)
    msg = str(err.value)
    window = collapse_run.evals_between(ONSET, ONSET + 10)
    alarms = collapse_run.alarms_between(ONSET, ONSET + 10)
    assert msg.startswith(f"collapse.csv (config default, seed 0): steps {ONSET}..{ONSET + 10} were not quiet: ")
    assert (f"{len(window)} evaluations, more than 1" in msg) == (len(window) > 1)
    assert f"{len(alarms)} alarms, more than 0." in msg
    assert f"alarm at step {alarms[0]['step']}: {alarms[0]['stream']} cusum" in msg
    # A window with more than 8 evaluations lists 8 and says how many more (it stopped at 8 without a word)
    first, last = collapse_run.first_step, collapse_run.last_step
    evals = collapse_run.evals_between(first, last)
    assert len(evals) > 8
    with pytest.raises(AssertionError) as err:
        assert_quiet(collapse_run, first, last, max_evals=0)
    assert f"    ... and {len(evals) - 8} more evaluations" in str(err.value)
    assert str(err.value).count("    evaluation at step ") == 8


def test_assert_cost(kl_collapse_run):
    assert_cost(kl_collapse_run, max_samples_per_1k=6000, max_evals=30, max_eval_fraction=0.1)
    with pytest.raises(AssertionError) as err:
        assert_cost(kl_collapse_run, max_samples_per_1k=2000)
    assert str(err.value) == ("grpo_kl_collapse (config default, seed 0): costs too much: 4776 samples per 1,000 "
                              "steps, above 2000 (2388 eval samples over 500 steps in 13 evaluations, 3.6% of the "
                              "simulated time).")
    for share in (1, 20):  # (20 for 20%: it passed whatever the run spent; found by a new-user probe)
        with pytest.raises(ExpectationError, match=f"max_eval_fraction={share} is a share of the simulated time"):
            assert_cost(kl_collapse_run, max_eval_fraction=share)


# ------------------------------------------------------------------------------------------- events files


def test_events_file_forms(tmp_path, collapse):
    yaml_file = collapse.with_name("collapse.csv.events.yaml")
    exp = load_expectations(yaml_file)
    assert exp.events == (Event(ONSET, "collapse", "down", None, 10),) and exp.max_samples_per_1k == 12000
    assert exp.quiet[0].start == 30 and exp.quiet[0].max_alarms == 0 and exp.quiet[0].kind == "warm-up"
    as_json = tmp_path / "run.csv.events.json"
    as_json.write_text(json.dumps([{"step": 7, "kind": "spike"}, 9]))
    assert load_expectations(as_json).events == (Event(7, "spike"), Event(9))
    # Events given to replay_trace replace the sidecar's.
    run = replay_trace(collapse, "default", events=[{"step": 120, "direction": "down"}])
    assert run.events == (Event(120, direction="down"),) and run.quiet == ()


def test_an_events_metric_named_as_its_column_is_the_metric(tmp_path, collapse, collapse_run, capsys):
    # metric: eval/accuracy was refused ("no eval ground truth eval/eval/accuracy ... (it has ..., eval/accuracy)")
    # while --set evaluation.metric=eval/accuracy is accepted
    side = tmp_path / "events.yaml"
    side.write_text(f"events:\n- {{step: {ONSET}, metric: eval/accuracy, direction: down, within: 10}}\n")
    assert load_expectations(side).events == (Event(ONSET, metric="accuracy", direction="down", within=10),)
    assert assert_confirmed(collapse_run, ONSET, metric="eval/accuracy") == assert_confirmed(collapse_run, ONSET)
    assert assert_confirmed(collapse_run, Event(ONSET, metric="eval/accuracy")) == assert_confirmed(collapse_run, ONSET)
    code, out, err = check_main(capsys, collapse, "--config", "default", "--events", side)
    assert code == 0 and "no eval ground truth" not in out + err


def test_a_sidecar_named_after_the_trace_without_its_suffix_is_found(tmp_path, collapse):
    # run.events.yaml beside run.csv is what many write for "<trace>.events.yaml"; it was silently ignored.
    trace = tmp_path / "run.csv"
    trace.write_bytes(collapse.read_bytes())
    (tmp_path / "run.events.yaml").write_text(f"events:\n- {{step: {ONSET}, direction: down}}\n")
    assert events_path(trace) == tmp_path / "run.events.yaml"
    assert replay_trace(trace, "default").events == (Event(ONSET, direction="down"),)
    # The full name wins when both are there.
    (tmp_path / "run.csv.events.yaml").write_text("events:\n- {step: 50}\n")
    assert events_path(trace) == tmp_path / "run.csv.events.yaml"
    # A folder's traces leave both sidecars out.
    assert trace_files(tmp_path) == [trace]


def test_reading_the_events_of_a_trace_without_its_events_file_says_so_and_names_a_near_miss(tmp_path, collapse):
    """A misnamed sidecar (run.csv.event.yaml): the README's `for event in replay_run.events:` checked nothing and
    the test passed, where `adaptive-eval check` says so and fails (a new user's probe)."""
    import warnings

    trace = tmp_path / "run.csv"
    trace.write_bytes(collapse.read_bytes())
    (tmp_path / "run.csv.event.yaml").write_text(f"events:\n- {{step: {ONSET}, direction: down}}\n")
    run = replay_trace(trace, "default")
    with pytest.warns(RuntimeWarning, match=r"run.csv: no events file beside it .*; not read: run.csv.event.yaml: "
                                            r"this run's events are none, and a check that loops over them"):
        assert run.events == ()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert run.events == ()  # (said once per run)
        assert replay_trace(collapse, "default").events  # with its sidecar: nothing to say
        assert replay_trace(trace, "default", events=[ONSET]).events  # events given: nothing to say
        assert replay_trace("grpo_kl_collapse", "default").events  # a shipped trace: its own events
    # a TensorBoard folder: its stem is its name, said once ("tb.events.yaml, .yml or .json, or tb.events.yaml")
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(str(tmp_path / "tb")) as w:
        for step in range(40):
            w.add_scalar("train/reward", 0.5, step)
    with pytest.warns(RuntimeWarning, match=r"tb: no events file beside it \(tb\.events\.yaml, \.yml or \.json\): "):
        assert replay_trace(tmp_path / "tb", "default").events == ()


@pytest.mark.parametrize("text, message", [
    ("events:\n- {step: 5, kind: collapse, directon: down}\n",
     ":2: events[0]: unknown key 'directon' (an event has direction, kind, metric, step, within)"),
    # (the key's own line, not the entry's first: a probe)
    ("events:\n- step: 5\n  kind: collapse\n  withn: 3\n", ":4: events[0]: unknown key 'withn'"),
    ("quiet:\n- start: 1\n  stop: 4\n  max_alarm: 0\n", ":4: quiet[0]: unknown key 'max_alarm'"),
    ("events:\n- {kind: collapse}\n", ":2: events[0]: an event needs a 'step'"),
    ("events:\n- {step: 5, direction: sideways}\n",
     ":2: events[0].direction: direction must be up, down or omitted (either), got 'sideways'"),
    ("events:\n- {step: 5.5}\n", ":2: events[0].step: expected an integer, got 5.5"),
    ("events:\n- {step: 5}\n- {step: 9, within: -5}\n", ":3: events[1].within: -5 is negative"),
    ("evnts: []\n", ":1: evnts: unknown key (expected events, max_samples_per_1k, quiet)"),
    ("events: [\n", ": does not parse"),
    # (found by a new-user probe: YAML kept the last silently, and `check` checked step 200 only)
    ("events:\n- 150\nevents:\n- 200\n", ":3: events: given twice (also at line 1"),
    ("events:\n- {step: 150, step: 160}\n", ":2: events[0].step: given twice"),
    (b"# r\xe9glage\nevents: [150]\n", ":1: not UTF-8 text (byte 0xe9)"),  # (was a bare UnicodeDecodeError)
])
def test_bad_events_file_names_file_line_and_key(tmp_path, text, message):
    path = tmp_path / "t.csv.events.yaml"
    path.write_bytes(text) if isinstance(text, bytes) else path.write_text(text)
    with pytest.raises(ExpectationError) as err:
        load_expectations(path)
    assert str(err.value).startswith(str(path)) and message in str(err.value)


# ------------------------------------------------------------------------------------------- bad input


def test_an_expectation_that_needs_eval_ground_truth_on_a_trace_without_it(tmp_path):
    run = replay_trace(no_eval_trace(tmp_path))
    assert run.evals == [] or all(not e["metrics"] for e in run.evals)
    with pytest.raises(ExpectationError, match=r"^no_eval.csv: expected collapse at step 50 \(down\) needs eval "
                                               r"ground truth, but the trace has no eval/<metric> column"):
        assert_confirmed(run, 50, within=10)
    assert_quiet(run, 0, 40)  # what needs no ground truth still works
    # The command line's hints, in the error a test sees too (it named neither the column nor eval=; a probe): an
    # eval-like column, and an accuracy in percent
    path = tmp_path / "val.csv"
    write_trace(Trace([TraceRecord(i, {"train/reward": 0.5, "val/acc": 0.6 if i < 50 else 0.3}) for i in range(100)]),
                path)
    with pytest.raises(ExpectationError, match=r"no eval/<metric> column \(replay has nothing to evaluate\); "
                                               r"eval-like columns here: val/acc: name one with eval= \(replay_trace"
                                               r"\(\.\.\., eval='val/acc'\)"):
        assert_confirmed(replay_trace(path), 50, within=10, direction="down")
    assert assert_confirmed(replay_trace(path, eval="val/acc"), 50, within=30, direction="down") <= 30
    path = tmp_path / "pct.csv"
    write_trace(Trace([TraceRecord(i, {"train/reward": 0.5, "eval/accuracy": 60.0 if i < 50 else 30.0})
                       for i in range(100)]), path)
    with pytest.raises(ExpectationError, match=r"so nothing can confirm it; a percentage\? scale it: "
                                               r"eval='eval/accuracy:0\.01'"):
        assert_confirmed(replay_trace(path), 50, within=10, direction="down")
    assert assert_confirmed(replay_trace(path, eval="eval/accuracy:0.01"), 50, within=30, direction="down") <= 30


def test_an_eval_column_of_nan_alone_is_said_to_be_that(tmp_path):
    """A recorded run whose evaluate_fn failed at every evaluation: its eval column is NaN throughout, and the
    message said it "is not a proportion and has no :std column" (a probe)."""
    path = tmp_path / "nan_eval.csv"
    path.write_text("step,train/loss,eval/accuracy\n" + "".join(
        f"{s},{1.0 + 0.01 * (s % 7)},{'nan' if s % 25 == 0 else ''}\n" for s in range(200)))
    with pytest.raises(ExpectationError, match=r"eval/accuracy has no finite value: its 8 logged values are all NaN "
                                               r"or inf\), so nothing can confirm it"):
        assert_confirmed(replay_trace(path), 100, within=50, direction="down")


def test_an_event_step_outside_the_trace(collapse, collapse_run, tmp_path):
    with pytest.raises(ExpectationError, match=r"^collapse.csv: expected change at step 900 \(accuracy\): step 900 "
                                               r"lies outside the trace \(steps 0..299\)"):
        assert_confirmed(collapse_run, 900, within=10)
    with pytest.raises(ExpectationError, match="outside the trace"):
        replay_trace(collapse, events=[400])
    with pytest.raises(ExpectationError, match=r"collapse.csv: quiet 250..350: step 350 lies outside"):
        assert_quiet(collapse_run, 250, 350)
    with pytest.raises(ExpectationError, match=r"collapse.csv: quiet -20..-5: step -5 lies outside"):
        assert_quiet(collapse_run, -20, -5)


def test_assert_quiet_clips_a_window_that_starts_before_the_first_step(tmp_path):
    # a trace counted from 1 (HF's global_step): assert_quiet(run, 0, 140) said "step 0 lies outside the trace"
    path = tmp_path / "from1.csv"
    write_trace(Trace([TraceRecord(i, {"train/reward": 0.5 if i < 150 else 0.1}) for i in range(1, 200)]), path)
    run = replay_trace(path, "default")
    assert run.first_step == 1
    assert_quiet(run, 0, 140)
    with pytest.raises(AssertionError, match=r"steps 1..199 were not quiet: \d+ alarms, more than 0"):
        assert_quiet(run, -10, 199)


def test_expectations_that_contradict_themselves(collapse_run):
    with pytest.raises(ExpectationError, match="within=-5 is negative"):
        assert_confirmed(collapse_run, ONSET, within=-5)
    with pytest.raises(ExpectationError, match="start 80 is after stop 30"):
        assert_quiet(collapse_run, 80, 30)
    with pytest.raises(ExpectationError, match="max_evals=-1 is negative"):
        assert_quiet(collapse_run, 30, 80, max_evals=-1)
    with pytest.raises(ExpectationError, match="without a limit"):
        assert_cost(collapse_run)


def test_a_metric_without_intervals_cannot_confirm():
    # nanogpt's val_loss has no per-sample std: replayed evaluations return the value itself, no interval.
    run = replay_trace("nanogpt_124m", "default")
    with pytest.raises(ExpectationError, match=r"nanogpt_124m: change at step 946 \(val_loss\): no replayed "
                                               r"evaluation has a finite interval for val_loss"):
        assert_confirmed(run, 946, within=50)


def test_a_shipped_trace_replays_in_its_metrics_direction_and_under_the_cost_model_tune_scores_it_by(tmp_path):
    """nanogpt_124m's validation loss replayed as higher-is-better: the pick was step 24 at 10.83, the worst value
    in the run; and sb3_pong's return (10 episodes) was simulated on 500 items, so a preset tune wrote replayed to
    4,966 samples/1k where tune had reported 40.7 (a new-user probe)."""
    from adaptive_eval.tune import case_from_real, replay_case

    run = replay_trace("nanogpt_124m", "default")
    assert run.config.evaluation.higher_is_better is False
    low = min(v for _, v in run.truth["val_loss"])
    assert run.summary["best"]["measured"] == pytest.approx(low)
    pong = replay_trace("sb3_pong", "default")
    assert pong.config.replay.eval_set_size == 10
    assert [(e["sample_size"], e["reason"]) for e in pong.evals] == [
        (e["sample_size"], e["reason"]) for e in replay_case(case_from_real("sb3_pong"), load_config("default"))]
    # the command line the same, and --set still wins
    assert main(["replay", "real:sb3_pong", "--no-tensorboard", "--out", str(tmp_path / "a")]) == 0
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert summary["samples"] == sum(e["sample_size"] or 10 for e in pong.evals) == 10 * len(pong.evals)
    assert main(["replay", "real:nanogpt_124m", "--no-tensorboard", "--out", str(tmp_path / "b"),
                 "--set", "evaluation.higher_is_better=true"]) == 0
    assert json.loads((tmp_path / "b" / "summary.json").read_text())["best"]["step"] != run.summary["best"]["step"]
    # and a value of the user's wins in check and replay_trace too (they were merged over it; a review)
    assert replay_trace("sb3_pong", load_config(overrides=["replay.eval_set_size=40"])).config.replay.eval_set_size == 40
    # a trace shipped with several eval columns tracks the one it ships with, as tune scores it (it tracked the
    # first, arc_challenge, beside lambada_openai; a probe)
    pythia = replay_trace("pythia_160m", "default")
    assert pythia.config.evaluation.metric == "lambada_openai" and pythia.summary["best"]["metric"] == "lambada_openai"


# ------------------------------------------------------------------------------------------- the CLI


def cli(*args):
    """``adaptive-eval check ARGS`` in a subprocess: (exit code, stdout, stderr)."""
    r = subprocess.run([sys.executable, "-m", "adaptive_eval", "check", *map(str, args)], capture_output=True,
                       text=True, timeout=600)
    return r.returncode, r.stdout, r.stderr


def check_main(capsys, *args):
    """The same in this process (each subprocess spends seconds importing): (exit code, stdout, stderr)."""
    code = main(["check", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_check_cli_prints_the_table_and_exits_1_when_an_expectation_fails(collapse):
    code, out, err = cli(collapse, "grpo_kl_collapse", "--config", "default", "--within", "20")
    assert code == 1, err
    lines = out.splitlines()
    assert lines[0].split() == ["trace", "event", "confirmed", "after", "samples/1k", "result"]
    # collapse.csv: its sidecar's event, quiet window and cost limit, each a row; the event meets --within 20.
    assert lines[1].split()[:5] == ["collapse.csv", "collapse", "at", "step", str(ONSET)]
    assert "(<= 20)" in lines[1] and lines[1].endswith("ok")
    assert lines[2].split()[:2] == ["collapse.csv", "warm-up"] and "0 alarms" in lines[2] and lines[2].endswith("ok")
    assert lines[3].split()[:2] == ["collapse.csv", "cost"] and "(<= 12000)" in lines[3] and lines[3].endswith("ok")
    # grpo_kl_collapse: a shipped trace by name, with its collapse; confirmed after 61 steps, not within 20.
    assert lines[4].split() == ["grpo_kl_collapse", "collapse", "at", "step", "56", "(accuracy", "down)", "61",
                                "steps", "(<=", "20)", "4776", "FAIL"]
    assert "grpo_kl_collapse (config default, seed 0): the collapse at step 56 (accuracy down) was confirmed only " \
           "61 steps after it, not within 20 steps." in out
    assert out.rstrip().endswith("1 of 4 expectations failed")


def test_check_cli_bad_input_exits_2(tmp_path):
    code, out, err = cli(no_eval_trace(tmp_path), "--config", "default")
    assert code == 2 and out == ""
    assert "adaptive-eval: no_eval.csv: expected collapse at step 50 (down) needs eval ground truth" in err


def test_check_passes_limits_and_events_file(collapse, tmp_path, capsys):
    code, out, _ = check_main(capsys, collapse, "grpo_kl_collapse", "--config", "default", "--within", "80",
                              "--max-samples-per-1k", "13000")
    assert code == 0 and "61 steps (<= 80)" in out and "4776 (<= 13000)" in out and "FAIL" not in out
    code, out, _ = check_main(capsys, "real:grpo_kl_collapse", "--config", "default", "--max-samples-per-1k", "2000")
    assert code == 1 and "4776 samples per 1,000 steps, above 2000" in out
    # --events replaces the sidecar.
    events = tmp_path / "other.events.json"
    events.write_text(json.dumps({"events": [{"step": ONSET, "direction": "up"}]}))
    code, out, _ = check_main(capsys, collapse, "--config", "default", "--events", events)
    assert code == 1 and f"change at step {ONSET} (accuracy up)  never" in out


def test_check_bad_input_names_the_trace_and_the_expectation(collapse, tmp_path, capsys):
    outside = tmp_path / "outside.yaml"
    outside.write_text("events:\n- {step: 5000, kind: collapse}\n")
    code, out, err = check_main(capsys, collapse, "--config", "default", "--events", outside)
    assert code == 2 and out == ""
    assert f"collapse.csv: event collapse at step 5000 ({outside}): step 5000 lies outside the trace" in err
    contradiction = tmp_path / "contradiction.yaml"
    contradiction.write_text(f"events:\n- {{step: {ONSET}, within: 10}}\n"
                             f"quiet:\n- {{start: 100, stop: 140, max_evals: 0}}\n")
    code, _, err = check_main(capsys, collapse, "--config", "default", "--events", contradiction)
    assert code == 2
    assert (f"collapse.csv: change at step {ONSET} must be confirmed within 10 steps, by an evaluation in steps "
            f"{ONSET}..{ONSET + 10}, but the quiet 100..140 allows no evaluation there") in err
    code, _, err = check_main(capsys, collapse, "--config", "default", "--max-samples-per-1k", "0")
    assert code == 2 and "max_samples_per_1k=0 allows no evaluation at all" in err
    code, _, err = check_main(capsys, "nanogpt_124m", "--config", "default", "--within", "-3")
    assert code == 2 and "nanogpt_124m: --within -3 is negative" in err
    code, _, err = check_main(capsys, tmp_path / "missing.csv", "--config", "default")
    assert code == 2 and "missing.csv: no such trace file (nor a shipped real trace of that name" in err
    # --config defaults to the default preset, as in replay and tune (it was required)
    assert check_main(capsys, collapse)[:2] == check_main(capsys, collapse, "--config", "default")[:2]


# ------------------------------------------------------------------------------------------- the plugin


PLUGIN_TEST = """
import pytest
from adaptive_eval.testing import assert_confirmed

@pytest.mark.replay_traces("traces")
def test_a(replay_run):
    assert_confirmed(replay_run, replay_run.events[0])

@pytest.mark.replay_traces("traces", seed=0)
def test_b(replay_run, replay_cache):
    assert replay_run.steps == 300

def test_each_trace_was_replayed_once(replay_cache):
    assert replay_cache.replays == 2
"""


@pytest.fixture
def plugin_project(pytester, collapse):
    traces = pytester.mkdir("traces")
    for name, within in (("a.csv", 10), ("b.csv", 0)):
        (traces / name).write_bytes(collapse.read_bytes())
        (traces / f"{name}.events.yaml").write_text(f"- {{step: {ONSET}, direction: down, within: {within}}}\n")
    pytester.makepyfile(test_presets=PLUGIN_TEST)
    return pytester


def test_plugin_is_off_unless_asked(plugin_project):
    # The entry point is loaded (pytest11), but without -p or the ini option no fixture or marker exists.
    result = plugin_project.runpytest_inprocess()
    result.assert_outcomes(errors=3)
    result.stdout.fnmatch_lines(["*fixture 'replay_run' not found*"])
    assert "replay_traces" not in plugin_project.runpytest_inprocess("--markers").stdout.str()


def test_the_entry_point_is_registered_and_imports_nothing_heavy():
    from importlib.metadata import entry_points

    (ep,) = [e for e in entry_points(group="pytest11") if e.name == "adaptive_eval"]
    assert ep.value == "adaptive_eval.testing._pytest_entry"
    # pytest imports it in every project where adaptive-eval is installed: no replay, numpy or torch then.
    probe = subprocess.run([sys.executable, "-c", "import sys, adaptive_eval.testing._pytest_entry; print(sorted("
                            "m for m in ('adaptive_eval.replay', 'numpy', 'torch', 'pytest') if m in sys.modules))"],
                           capture_output=True, text=True, check=True)
    assert probe.stdout.strip() == "[]"


def test_plugin_with_p_runs_one_test_per_trace_replaying_each_once(plugin_project):
    result = plugin_project.runpytest_inprocess("-p", "adaptive_eval.testing.plugin", "-v")
    # b.csv's event must be confirmed at its very step (within 0): it fails, with the readable message.
    result.assert_outcomes(passed=4, failed=1)
    result.stdout.fnmatch_lines(["*test_a?a.csv? PASSED*", "*test_a?b.csv? FAILED*", "*test_b?a.csv? PASSED*",
                                 "*test_b?b.csv? PASSED*", "*test_each_trace_was_replayed_once PASSED*"])
    result.stdout.fnmatch_lines(["*AssertionError: b.csv (config default, seed 0): the change at step 116 "
                                 "(accuracy down) was confirmed only * steps after it, not within 0 steps.*"])


def test_plugin_with_the_ini_option_and_a_config(plugin_project):
    plugin_project.makeini("[pytest]\nadaptive_eval_plugin = true\nadaptive_eval_config = aggressive\n")
    plugin_project.makepyfile(test_ini_preset="""
        def test_config(replay_run):
            assert replay_run.config_name == "aggressive"
        import pytest
        test_config = pytest.mark.replay_traces("traces/a.csv")(test_config)
        """)
    result = plugin_project.runpytest_inprocess("test_ini_preset.py")
    result.assert_outcomes(passed=1)


def test_plugin_with_p_and_autoload_off_reads_the_ini_config(plugin_project, monkeypatch):
    """With PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 (common in CI) the entry point that registers the ini options is not
    loaded: with -p adaptive_eval.testing.plugin every replay ran under the default preset, adaptive_eval_config
    ignored with pytest's generic "unknown config option" warning only (a new user's probe)."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    plugin_project.makeini("[pytest]\nadaptive_eval_config = aggressive\n")
    plugin_project.makepyfile(test_ini_preset="""
        import pytest

        @pytest.mark.replay_traces("traces/a.csv")
        def test_config(replay_run):
            assert replay_run.config_name == "aggressive"
        """)
    result = plugin_project.runpytest_inprocess("-p", "adaptive_eval.testing.plugin", "test_ini_preset.py")
    result.assert_outcomes(passed=1)
    assert "Unknown config option" not in result.stdout.str()


def test_a_shipped_name_is_the_shipped_trace_and_preset_from_any_directory(pytester, collapse, kl_collapse_run,
                                                                            capsys, caplog, tensorboard_runs,
                                                                            monkeypatch):
    """A run folder named like a shipped trace, or a file named like a preset, in the working directory was read
    instead of the shipped one: the same marker or call meant two traces, or two configs, depending on where pytest
    ran (a new user's probe).  ``./NAME`` reads the file or folder."""
    import logging

    shadow = pytester.mkdir("grpo_kl_collapse")
    (shadow / "mine.csv").write_bytes(collapse.read_bytes())
    (pytester.path / "default").write_text("trigger:\n  freq_steps: 7\n")
    with caplog.at_level(logging.INFO, logger="adaptive_eval"):
        assert load_config("default").trigger.freq_steps == load_config("default.yaml").trigger.freq_steps != 7
        run = replay_trace("grpo_kl_collapse", "default")
    assert (run.name, run.steps) == (kl_collapse_run.name, kl_collapse_run.steps)
    said = caplog.text
    assert "the file of that name in the working directory is not read (pass ./default" in said
    assert "the folder of that name in the working directory is not read (pass ./grpo_kl_collapse" in said
    assert load_config("./default").trigger.freq_steps == 7
    code, out, _ = check_main(capsys, "grpo_kl_collapse", "--config", "default")
    assert out.splitlines()[1].split()[:2] == ["grpo_kl_collapse", "collapse"]  # (not mine.csv)
    code, out, _ = check_main(capsys, "./grpo_kl_collapse", "--config", "./default")
    assert out.splitlines()[1].split()[0] == "mine.csv"
    tests = pytester.mkdir("tests")
    (tests / "test_shipped.py").write_text(textwrap.dedent("""\
        import pytest

        @pytest.mark.replay_traces("grpo_kl_collapse")
        def test_shipped(replay_run):
            assert replay_run.name == "grpo_kl_collapse"
        """))
    result = pytester.runpytest_inprocess("-p", "adaptive_eval.testing.plugin", "-v", "tests")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_shipped?grpo_kl_collapse? PASSED*"])
    # a pathlib.Path is a path (it drops "./"), and names the shipped trace only where no such path exists
    assert load_config(pathlib.Path("default")).trigger.freq_steps == 7
    # read options read a file: with a shipped name they are refused, not applied to whatever is here
    with pytest.raises(ValueError, match=r"'grpo_kl_collapse' is the shipped real trace .*pass ./grpo_kl_collapse"):
        replay_trace("grpo_kl_collapse", "default", eval="accuracy")
    # a folder's runs keep their folder: `check .` beside a run named like a shipped trace reads the run
    runs = pytester.path / "runs"
    shutil.copytree(tensorboard_runs / "run_a", runs / "grpo_kl_collapse")
    shutil.copy(tensorboard_runs / "run_a.events.yaml", runs / "grpo_kl_collapse.events.yaml")
    monkeypatch.chdir(runs)
    assert replay_trace(pathlib.Path("nanogpt_124m")).name == "nanogpt_124m"
    capsys.readouterr()  # (pytester's run above)
    code, out, _ = check_main(capsys, ".", "--config", "default")
    assert out.splitlines()[1].split()[:5] == ["grpo_kl_collapse", "change", "at", "step", str(ONSET)]  # (not 56)
    code, out, err = check_main(capsys, "grpo_kl_collapse", "--eval", "accuracy")  # (--eval was dropped, unsaid)
    assert "grpo_kl_collapse: a shipped real trace, read as it is: --eval" in err
    assert out.splitlines()[1].split()[:5] == ["grpo_kl_collapse", "collapse", "at", "step", "56"]
    # the session's replay cache keys a shipped name as the name, not as the folder of that name here (a review)
    from adaptive_eval.testing.plugin import ReplayCache

    cache = ReplayCache()
    shipped, here = cache.get("grpo_kl_collapse"), cache.get("./grpo_kl_collapse")
    assert (shipped.steps, here.steps, cache.replays) == (kl_collapse_run.steps, 300, 2)


def test_the_cache_keys_a_mapping_config_by_its_content_not_its_id(collapse):
    """Configs built in a loop: a freed dict's id is the next dict's, and 174 of 300 lookups got another
    config's run (a probe).  By content, equal dicts share one replay and each run is its own config's."""
    from adaptive_eval.testing.plugin import ReplayCache

    cache = ReplayCache()
    for freq in (7, 9, 7, 11, 9):
        assert cache.get(collapse, {"trigger": {"freq_steps": freq}}).config.trigger.freq_steps == freq
    assert cache.replays == 3
    for _ in range(3):  # (a Trace object has no content key: by identity, held so that its id is never reused)
        assert cache.get(read_trace(collapse), "default").steps == 300
    trace = read_trace(collapse)
    assert cache.get(trace, "default") is cache.get(trace, "default") and cache.replays == 7


def test_the_caches_relative_paths_name_what_the_marker_names_beside_the_test_file(pytester, collapse):
    """The same "mine.yaml" read tests/mine.yaml in the marker and ./mine.yaml in replay_cache.get, two configs
    deciding differently in one test (a probe).  A bad seed in the marker is a usage error naming it."""
    tests = pytester.mkdir("tests")
    (tests / "t.csv").write_bytes(collapse.read_bytes())
    (tests / "mine.yaml").write_text("trigger:\n  freq_steps: 10\n")
    (pytester.path / "mine.yaml").write_text("trigger:\n  freq_steps: 50\n")
    (tests / "test_rel.py").write_text(
        "import pytest\n"
        "@pytest.mark.replay_traces('t.csv', config='mine.yaml')\n"
        "def test_same(replay_run, replay_cache):\n"
        "    assert replay_run.config.trigger.freq_steps == 10\n"
        "    again = replay_cache.get('t.csv', 'mine.yaml')\n"
        "    assert again.config.trigger.freq_steps == 10 and replay_cache.replays == 1\n"
        "@pytest.mark.replay_traces('t.csv', seed=1.7)\n"
        "def test_seed(replay_run):\n"
        "    pass\n"
        "@pytest.mark.replay_traces('t.csv', config='typo.yaml')\n"
        "def test_typo(replay_run):\n"
        "    pass\n"
        "@pytest.mark.replay_traces('t.csv', config='nope.yaml')\n"
        "def test_missing(replay_run):\n"
        "    pass\n")
    (tests / "typo.yaml").write_text("trigger:\n  freq_stepz: 10\n")
    result = pytester.runpytest_inprocess("-p", "adaptive_eval.testing.plugin", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=3)
    result.stdout.fnmatch_lines(["*replay_traces: seed must be an integer, got 1.7*",
                                 "*test_typo*: ConfigError: *typo.yaml:2: trigger.freq_stepz: unknown key*",
                                 "*test_missing*: ConfigError: nope.yaml: no such config file in * (nor beside the "
                                 "test file, in *tests)"])
    typo = result.stdout.str().split("ERROR at setup of test_typo")[1].split("short test summary")[0]
    assert "plugin.py" not in typo and "During handling" not in typo  # (the user's error alone, not ~245 lines)


def test_each_test_gets_its_own_view_of_a_cached_run(pytester, collapse):
    """A probe: tests share the cached run, so one that cleared replay_run.evals emptied them for the next, and the
    missing events file was warned in the first test only (the next looped over no events, in silence)."""
    (pytester.path / "t.csv").write_bytes(collapse.read_bytes())
    pytester.makepyfile(test_shared="""
        import pytest, warnings

        @pytest.mark.replay_traces("t.csv")
        def test_a(replay_run, replay_cache):
            with pytest.warns(RuntimeWarning, match="no events file beside it"):
                assert replay_run.events == ()
            assert replay_run.evals
            replay_run.evals.clear()

        @pytest.mark.replay_traces("t.csv")
        def test_b(replay_run, replay_cache):
            with pytest.warns(RuntimeWarning, match="no events file beside it"):
                assert replay_run.events == ()
            assert replay_run.evals and replay_cache.replays == 1
        """)
    result = pytester.runpytest_inprocess("-p", "adaptive_eval.testing.plugin", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)


def test_plugin_without_a_trace_is_a_usage_error(pytester):
    pytester.makepyfile("def test_x(replay_run):\n    pass\n")
    result = pytester.runpytest_inprocess("-p", "adaptive_eval.testing.plugin")
    result.stdout.fnmatch_lines(["*replay_run needs a trace: mark the test with @pytest.mark.replay_traces*"])


def test_the_marker_reads_another_tools_log_as_the_command_lines_trace_options_do(pytester, collapse):
    """The marker took config= and seed= only: a log whose accuracy is in percent under eval_acc, whose step
    column is 'iteration' and which holds a resumed run could be checked by `check --eval eval_acc:0.01
    --step-column iteration --keep-last-run` but not from pytest (found by a new-user probe)."""
    logs = pytester.mkdir("logs")
    lines = collapse.read_text().splitlines()
    head = lines[0].replace("step,", "iteration,").replace("eval/accuracy", "eval_acc")
    rows = []
    for line in lines[1:]:
        cells = line.split(",")
        cells[-1] = f"{100 * float(cells[-1]):.6g}" if cells[-1] else ""
        rows.append(",".join(cells))
    resumed = rows[:200] + rows[150:]  # (a crash at 199, resumed from the checkpoint of step 150)
    (logs / "foreign.csv").write_text("\n".join([head, *resumed]) + "\n")
    (logs / "foreign.csv.events.yaml").write_text(f"- {{step: {ONSET}, direction: down, within: 10}}\n")
    pytester.makepyfile(test_foreign="""
        import pytest
        from adaptive_eval.testing import assert_confirmed

        @pytest.mark.replay_traces("logs/foreign.csv", eval="eval_acc:0.01", step_column="iteration",
                                   keep_last_run=True)
        def test_read_as_the_cli_reads_it(replay_run):
            assert replay_run.steps == 300 and replay_run.metric == "eval_acc"
            assert_confirmed(replay_run, replay_run.events[0])

        @pytest.mark.replay_traces("logs/foreign.csv", eval=["eval_acc:0.01"], step_column="iteration")
        def test_the_resume_is_an_error_without_keep_last_run(replay_run):
            pass

        @pytest.mark.replay_traces("logs/foreign.csv", eval=0.01)
        def test_a_bad_value(replay_run):
            pass
        """)
    result = pytester.runpytest_inprocess("-p", "adaptive_eval.testing.plugin", "-v")
    result.assert_outcomes(passed=1, errors=2)
    result.stdout.fnmatch_lines(["*test_read_as_the_cli_reads_it* PASSED*", "*steps must not decrease*",
                                 "*replay_traces: eval= takes a column name or a list of them, got 0.01*"])


def _tensorboard_run(trace_csv: pathlib.Path, folder: pathlib.Path) -> pathlib.Path:
    """The trace in ``trace_csv`` written as a TensorBoard run (SummaryWriter) in ``folder``, 2 s a step (the
    wall time of a run written at once would make every evaluation dear against its steps: the budget defers)."""
    from torch.utils.tensorboard import SummaryWriter

    from adaptive_eval.trace import read_trace

    with SummaryWriter(str(folder)) as writer:
        for rec in read_trace(trace_csv).records:
            for name, value in rec.metrics.items():
                writer.add_scalar(name, value, rec.step, walltime=1.0e9 + 2.0 * rec.step)
    return folder


@pytest.fixture(scope="module")
def tensorboard_runs(tmp_path_factory, collapse):
    """runs/ holding two SummaryWriter runs of the collapse, each with its events, and a file that is no trace.

    Written here, not in the test: pytester drops every module first imported while it is in use, and
    SummaryWriter imports torch; a second import of torch in the same process fails ("bad call flags") and the
    process then segfaults (seen when this file ran before tests/test_packaging.py's doctests)."""
    runs = tmp_path_factory.mktemp("tb") / "runs"
    for name in ("run_a", "run_b"):
        _tensorboard_run(collapse, runs / name)
        (runs / f"{name}.events.yaml").write_text(f"- {{step: {ONSET}, direction: down, within: 10}}\n")
    (runs / "notes.txt").write_text("not a trace\n")
    return runs


def test_a_folder_of_tensorboard_runs_is_traces_for_the_marker_and_check(tensorboard_runs, pytester, collapse,
                                                                         capsys):
    # A TensorBoard run's folder, and runs/ holding several SummaryWriter runs, were refused by the marker
    # ("no trace files") and by check (a folder read as one run); a run nested deeper is named in a warning.
    runs = pytester.path / "runs"
    shutil.copytree(tensorboard_runs, runs)
    assert trace_files(runs) == [runs / "run_a", runs / "run_b"]
    assert trace_files(runs / "run_a") == [runs / "run_a"]
    pytester.makepyfile(test_tb="""
        import pytest
        from adaptive_eval.testing import assert_confirmed

        @pytest.mark.replay_traces("runs")
        def test_runs(replay_run):
            assert replay_run.steps == 300
            assert_confirmed(replay_run, replay_run.events[0])

        @pytest.mark.replay_traces("runs/run_a")
        def test_one_run(replay_run):
            assert replay_run.name == "run_a" and len(replay_run.events) == 1
        """)
    result = pytester.runpytest_inprocess("-p", "adaptive_eval.testing.plugin", "-v")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*test_runs?run_a? PASSED*", "*test_runs?run_b? PASSED*"])
    capsys.readouterr()  # (the inner session's report)
    code, out, _ = check_main(capsys, runs, "--config", "default")
    assert code == 0
    assert [line.split()[:2] for line in out.splitlines()[1:]] == [["run_a", "change"], ["run_b", "change"]]
    deep = pytester.mkdir("deep")
    _tensorboard_run(collapse, deep / "group" / "run_c")
    (deep / "a.csv").write_bytes(collapse.read_bytes())
    with pytest.warns(RuntimeWarning, match=r"deep: left out 1 TensorBoard run more than one folder down "
                                            r"\(group/run_c\)"):
        assert trace_files(deep) == [deep / "a.csv"]


def test_check_warns_once_of_a_tensorboard_run_more_than_one_folder_down(tmp_path, collapse, capsys):
    # check listed the folder twice, so the warning was printed twice
    (tmp_path / "a.csv").write_bytes(collapse.read_bytes())
    (tmp_path / "group" / "run_c").mkdir(parents=True)
    (tmp_path / "group" / "run_c" / "events.out.tfevents.1.host").write_bytes(b"")
    code, out, err = check_main(capsys, tmp_path, "--config", "default")
    assert code in (0, 1) and out.splitlines()[1].split()[0] == "a.csv"
    assert err.count("left out 1 TensorBoard run more than one folder down (group/run_c)") == 1


# ------------------------------------------------------------------------------------------- the example


def test_the_example_fails_for_a_preset_that_misses_the_collapse_and_alarms_on_the_spike(pytester, monkeypatch):
    # examples/test_my_preset.py passes under the default preset (it is collected by this suite: testpaths);
    # here under a preset that evaluates every 200 steps and watches train/loss with a hair trigger.
    preset = pytester.path / "bad.yaml"
    preset.write_text(textwrap.dedent("""\
        trigger: {freq_steps: 200}
        policy: {alarm: {enabled: false}, interval: {enabled: false}}
        streams:
          watch:
            train/loss: [{type: cusum, k: 0.25, threshold: 2.0, warmup: 10, adapt: 0.0}]
        """))
    pytester.makepyfile(test_copied_preset=(REPO / "examples" / "test_my_preset.py").read_text())
    monkeypatch.setenv("ADAPTIVE_EVAL_PRESET", str(preset))
    result = pytester.runpytest_inprocess("-p", "adaptive_eval.testing.plugin")
    result.assert_outcomes(passed=1, failed=3)
    result.stdout.fnmatch_lines([f"*grpo_kl_collapse (config {preset}, seed 0): the collapse at step 56 "
                                 "(accuracy down) was confirmed only * steps after it, not within 80 steps.*"])
    result.stdout.fnmatch_lines([f"*nanogpt_124m (config {preset}, seed 0): steps 940..980 were not quiet*"])


def test_a_failed_assert_shows_the_users_line_and_the_run_prints_short(collapse_run):
    """pytest showed the whole library function's source before the message, and a ReplayRun's repr was tens
    of KB (the config and every truth series)."""
    from adaptive_eval.testing import _core

    for fn in (_core.assert_confirmed, _core.assert_quiet, _core.assert_cost, _core.assert_same_decisions):
        assert fn.__code__.co_consts and "__tracebackhide__" in fn.__code__.co_varnames
    text = repr(collapse_run)
    assert len(text) < 600 and "collapse.csv" in text and "truth" not in text and "policy" not in text


def test_check_names_traces_of_the_same_file_name_by_their_paths(collapse, tmp_path, capsys):
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "run.csv").write_bytes(collapse.read_bytes())
    code, out, err = check_main(capsys, str(tmp_path / "a" / "run.csv"), str(tmp_path / "b" / "run.csv"),
                                "--config", "default", "--within", "40")
    # Neither has expectations: nothing was checked, which is not a pass (a misnamed events file turned a CI gate
    # green; found by a new-user probe), and each says why
    assert code == 1 and "nothing was checked: no trace has expectations" in out
    assert f"{tmp_path / 'a' / 'run.csv'}: no expectations, so nothing was checked but that it replays (no " \
           "events file beside it, such as run.csv.events.yaml; no --events FILE" in err
    assert "--within applies to events, and there are none" in err
    rows = out.splitlines()[1:]
    assert rows[0].startswith(str(tmp_path / "a" / "run.csv")) and rows[1].startswith(str(tmp_path / "b" / "run.csv"))
    # An events file there but empty (the demo's `--fault none` writes one) said "no events file beside it".
    (tmp_path / "a" / "run.csv.events.yaml").write_text("events: []\n")
    code, out, err = check_main(capsys, str(tmp_path / "a" / "run.csv"), "--config", "default")
    assert code == 1 and "(no events file beside" not in err
    assert f"({tmp_path / 'a' / 'run.csv.events.yaml'} lists no events, quiet windows or max_samples_per_1k" in err


def test_check_of_a_folder_fails_where_one_traces_events_file_is_misnamed(collapse, tmp_path, capsys):
    """A probe: run1 checked and passing, run3's events file misnamed (run3.csv.event.yaml, which would fail): the
    gate exited 0, its warning not naming the file beside it.  Another trace's own events file (run30.csv's) is
    not run3's misnamed one."""
    for name in ("run1.csv", "run3.csv", "run30.csv", "run3_b.csv"):
        (tmp_path / name).write_bytes(collapse.read_bytes())
    for events in ("run1.csv.events.yaml", "run30.csv.events.yaml", "run3_b.events.yaml"):  # (the stem form too)
        (tmp_path / events).write_text(f"- {{step: {ONSET}, direction: down, within: 40}}\n")
    code, out, err = check_main(capsys, str(tmp_path), "--config", "default")
    assert code == 0 and "misnamed" not in out  # (run3 has none: unchecked, said, as before)
    (tmp_path / "run3.csv.event.yaml").write_text(f"- {{step: {ONSET}, direction: down, within: 0}}\n")
    code, out, err = check_main(capsys, str(tmp_path), "--config", "default")
    assert code == 1 and "(not read: run3.csv.event.yaml)" in err
    assert ("run3.csv: its events file is misnamed (run3.csv.event.yaml; read: run3.csv.events.yaml, .yml or "
            ".json, or run3.events.yaml), so its events were not checked") in out
    # with a cost limit the trace has an expectation (its cost row): still a failed gate (a review)
    code, out, err = check_main(capsys, str(tmp_path), "--config", "default", "--max-samples-per-1k", "100000")
    assert code == 1 and "run3.csv: its events file is misnamed" in out


def test_a_failed_confirmation_names_the_alarms_and_the_deferrals_in_its_window(tmp_path):
    """Found by a new-user probe: a log written in a tight loop (steps 1 ms apart) had its alarm at 202 and no
    evaluation until 399, and the failure said only "evaluations in steps 200..230: 0"; that the budget deferred
    them was an earlier stderr note."""
    from adaptive_eval import load_config
    from adaptive_eval.testing import assert_confirmed, replay_trace

    rng = np.random.default_rng(0)
    rows = ["step,time,train/reward,train/kl,eval/acc"]
    for s in range(400):
        down = s >= 200
        rows.append(f"{s},{s * 0.001:.3f},{(0.1 if down else 0.6) + 0.03 * rng.normal():.4f},"
                    f"{(0.5 if down else 0.01) + 0.003 * rng.normal():.4f},"
                    f"{(0.2 if down else 0.7) if s % 10 == 0 else ''}")
    path = tmp_path / "tight.csv"
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(AssertionError) as failed:
        assert_confirmed(replay_trace(path), 200, within=30, direction="down", metric="acc")
    text = str(failed.value)
    assert "alarms in steps 200..230: 2, the first at step 202 (train/reward: cusum)" in text
    assert "evaluations deferred in steps 200..230: 31 (budget:deferred; the first at step 200)" in text
    assert "--set replay.trace_time=false" in text
    # its own clock left out, the same run confirms it at once
    run = replay_trace(path, config=load_config(overrides=["replay.trace_time=false"]))
    assert assert_confirmed(run, 200, within=30, direction="down", metric="acc") <= 5


def test_a_folders_json_document_that_is_no_trace_is_left_out_and_a_list_of_records_kept(tmp_path):
    """The demo's folder holds comparison.json beside trace.csv: `adaptive-eval check runs/demo` exited 2 on it (a
    fresh-clone check).  A JSON document of records (a list, or HF's trainer_state.json) is still a trace."""
    import json

    (tmp_path / "trace.csv").write_text("step,train/loss\n0,1.0\n1,1.0\n")
    (tmp_path / "comparison.json").write_text(json.dumps({"runs": {"adaptive": {"evals": 9}}}, indent=1))
    (tmp_path / "records.json").write_text(json.dumps([{"step": 0, "train/loss": 1.0}]))
    (tmp_path / "trainer_state.json").write_text(json.dumps({"log_history": [{"step": 1, "loss": 1.0}]}))
    assert trace_files(tmp_path) == [tmp_path / n for n in ("records.json", "trace.csv", "trainer_state.json")]
    assert trace_files(tmp_path / "comparison.json") == [tmp_path / "comparison.json"]  # (named: read, and refused)


@pytest.mark.parametrize("every", [1, 10])
def test_a_change_inside_the_detectors_warm_up_is_said_to_be_there_when_its_confirmation_fails(tmp_path, every):
    """Found by a probe on the Nile (a drop 28 values in): the failure listed no alarm and no evaluation and did not
    say that the change came while the stream detectors were still learning the level (their first 30 values)."""
    from adaptive_eval.testing import assert_confirmed, replay_trace

    rng = np.random.default_rng(1)
    rows = ["step,train/flow,eval/acc"]
    for k in range(100):
        down = k >= 28
        rows.append(f"{k * every},{(700 if down else 1100) + 150 * rng.normal():.1f},{0.5 if down else 0.8}")
    path = tmp_path / "short.csv"
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(AssertionError) as failed:
        assert_confirmed(replay_trace(path), 28 * every, within=20 * every, direction="down", metric="acc")
    text = str(failed.value)
    assert ("the event comes about 28 values into the trace, within the first 30 that the stream detectors "
            "(streams.default) learn their level and scale from") in text
    rows = ["step,train/flow,eval/acc"] + [f"{k * every},{1100 + 150 * rng.normal():.1f},0.8" for k in range(100)]
    path.write_text("\n".join(rows) + "\n")  # an event after the warm-up, quiet stream: no such line
    with pytest.raises(AssertionError) as failed:
        assert_confirmed(replay_trace(path), 60 * every, within=5 * every, direction="down", metric="acc")
    assert "values into the trace" not in str(failed.value)


def test_an_events_folder_is_said_to_be_a_folder(tmp_path):
    """A probe: check --events <a folder> said "no such events file", though the folder exists."""
    from adaptive_eval.testing import load_expectations

    with pytest.raises(FileNotFoundError, match="a folder, not an events file"):
        load_expectations(tmp_path)

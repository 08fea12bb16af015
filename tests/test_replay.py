"""Replay through the CLI and the API: outputs as ARCHITECTURE.md says, determinism, bad input."""

import json
import logging
import math
import pathlib

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from adaptive_eval import load_config
from adaptive_eval.cli import main
from adaptive_eval.replay import replay
from adaptive_eval.synthetic import make_trace
from adaptive_eval.trace import Trace, TraceRecord, write_trace

GRPO_COLLAPSE = "rasbt__reasoning-from-scratch__ch07_7_5_plus_kl_metrics.csv"


@pytest.fixture(scope="module")
def collapse_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("trace") / "collapse.jsonl"
    st = make_trace("collapse", steps=600, seed=11)
    write_trace(st.trace, path)
    return path, st


def read_jsonl(path):
    return [json.loads(line) for line in pathlib.Path(path).read_text().splitlines()]


def test_replay_cli_writes_the_documented_outputs(collapse_trace, tmp_path, capsys):
    path, st = collapse_trace
    out = tmp_path / "out"
    assert main(["replay", str(path), "--out", str(out), "--seed", "3"]) == 0
    printed = capsys.readouterr().out
    assert "replayed 600 steps" in printed and "evaluations" in printed
    evals = read_jsonl(out / "evals.jsonl")
    alarms = read_jsonl(out / "alarms.jsonl")
    summary = json.loads((out / "summary.json").read_text())
    assert evals and set(evals[0]) == {"step", "epoch", "sample_size", "reason", "metrics", "ci", "seconds", "n"}
    assert set(evals[0]["metrics"]) == {"accuracy"} and len(evals[0]["ci"]["accuracy"]) == 2
    assert alarms and set(alarms[0]) == {"step", "stream", "detector", "direction", "location"}
    assert {"steps", "evals", "samples", "eval_seconds", "train_seconds", "alarms"} <= set(summary)
    assert summary["steps"] == 600 and summary["evals"] == len(evals)
    # The picked checkpoint: a step that was evaluated, its shrunk estimate inside its interval.
    best = summary["best"]
    assert best["metric"] == "accuracy" and best["step"] in {e["step"] for e in evals}
    assert best["interval"][0] <= best["estimate"] <= best["interval"][1]
    # The collapse is caught: an alarm-driven evaluation soon after the onset shows it.
    onset = st.events[0].step
    window = [e for e in evals if onset <= e["step"] <= onset + 25]
    assert window and window[0]["reason"].startswith("alarm:")
    before = [e for e in evals if e["step"] < onset][-1]["metrics"]["accuracy"]
    assert min(e["metrics"]["accuracy"] for e in window) < before / 2
    # TensorBoard: eval metric with its CI, controller state, read back with TensorBoard's own reader.
    acc = EventAccumulator(str(out / "tb"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"eval/accuracy", "eval/accuracy/ci_low", "eval/accuracy/ci_high", "controller/sample_size"} <= tags
    assert [e.step for e in acc.Scalars("eval/accuracy")] == [e["step"] for e in evals]


def test_same_trace_config_and_seed_give_byte_identical_outputs(collapse_trace, tmp_path):
    path, _ = collapse_trace
    outs = []
    for i in range(2):
        out = tmp_path / f"run{i}"
        assert main(["replay", str(path), "--out", str(out), "--seed", "5", "--no-tensorboard"]) == 0
        outs.append({f: (out / f).read_bytes() for f in ("evals.jsonl", "alarms.jsonl", "summary.json")})
        assert not (out / "tb").exists()
    assert outs[0] == outs[1]
    other = tmp_path / "other"
    main(["replay", str(path), "--out", str(other), "--seed", "6", "--no-tensorboard"])
    assert (other / "evals.jsonl").read_bytes() != outs[0]["evals.jsonl"]


def test_replay_real_grpo_trace_with_column_mapping(traces_dir, tmp_path):
    out = tmp_path / "grpo"
    code = main(["replay", str(traces_dir / GRPO_COLLAPSE), "--stream", "reward_avg", "--stream", "avg_response_len",
                 "--eval", "eval_acc:0.01", "--set", "trigger.freq_steps=10",
                 "--set", "policy.interval.max_factor=2.5", "--out", str(out), "--no-tensorboard"])
    assert code == 0
    evals = read_jsonl(out / "evals.jsonl")
    assert all(0.0 <= e["metrics"]["eval_acc"] <= 1.0 for e in evals if "eval_acc" in e["metrics"])
    # MATH-500 accuracy 40.8% at step 50, 0% from step 100: an evaluation before step 80 sees it fall (with
    # an interval of at most 25 steps; on these two streams alone no detector fires before step 80).
    early = [e for e in evals if 56 <= e["step"] <= 80 and "eval_acc" in e["metrics"]]
    assert early


def test_simulated_evals_follow_the_documented_models():
    recs = [TraceRecord(step=i, metrics={"s": 0.0, "eval/acc": 0.25, "eval/loss": 3.0, "eval/loss:std": 0.5,
                                         "eval/ppl": 20.0}) for i in range(400)]
    cfg = load_config("areal", ["trigger.freq_steps=100", "evaluation.sample_size=400", "replay.eval_set_size=400"])
    res = replay(Trace(recs, "mem"), cfg, seed=0)
    r = res.results[0]
    assert r["acc"].binary and r["acc"].n == 400 and abs(r.mean("acc") - 0.25) < 0.08
    assert not r["loss"].binary and abs(r["loss"].std - 0.5) < 0.1 and abs(r.mean("loss") - 3.0) < 0.1
    assert r.mean("ppl") == 20.0  # no std column: the value itself
    # The eval cost model runs on the simulated clock: 4 evals x (5 s + 0.05 s x 400).
    assert res.summary["eval_seconds"] == pytest.approx(4 * (5.0 + 0.05 * 400))


def test_what_is_simulated_as_a_proportion_is_decided_per_column():
    """An eval loss below 1 with its own :std, and a return that crosses [0, 1], were simulated as proportions
    (0/1 answers) at the rows where their value lay within [0, 1]."""
    n = 400
    recs = []
    for i in range(400):
        m = {"s": 0.0,
             "eval/loss": 0.6, "eval/loss:std": 0.1,  # a mean below 1 with its own per-sample std
             "eval/ret": 0.5 if i < 200 else 7.0, "eval/ret:std": 2.0,  # a return that crosses [0, 1]
             "eval/acc": 0.3, "eval/acc:std": (0.3 * 0.7 * 1172 / 1171) ** 0.5,  # lm-eval's accuracy
             "eval/ok": 0.8}  # declared a mean below: the value itself
        recs.append(TraceRecord(step=i, metrics=m))
    cfg = load_config("areal", ["trigger.freq_steps=100", f"evaluation.sample_size={n}", f"replay.eval_set_size={n}",
                                "evaluation.metric_kinds.ok=mean"])
    r = replay(Trace(recs, "mem"), cfg, seed=0).results[0]
    assert not r["loss"].binary and abs(r["loss"].std - 0.1) < 0.02 and abs(r.mean("loss") - 0.6) < 0.03
    assert not r["ret"].binary and abs(r["ret"].std - 2.0) < 0.3
    assert r["acc"].binary and r["acc"].n == n and r["acc"].total == int(r["acc"].total)
    assert r.mean("ok") == 0.8


@pytest.mark.parametrize("content,message", [
    ("step,a\n1,0.5\n0,0.4\n", ":3:"),  # steps going backwards: file and line
    ("a,b\n1,2\n", "step"),  # no step column
    ("step,a\n1,x\n2,0.3\n", ":2:"),  # a non-numeric cell
    # an eval column with no metric name: replayed as the metric '' (check then named none; a probe)
    ("step,a,eval/\n0,1,0.5\n1,1,0.5\n", "column 'eval/' has no metric name after 'eval/'"),
])
def test_bad_traces_are_clear_errors(tmp_path, capsys, content, message):
    f = tmp_path / "bad.csv"
    f.write_text(content)
    assert main(["replay", str(f), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "bad.csv" in err and message in err
    assert main(["check", str(f)]) == 2 and message in capsys.readouterr().err


def test_empty_trace_exits_2(tmp_path, capsys):
    f = tmp_path / "empty.csv"
    f.write_text("step,a\n")
    assert main(["replay", str(f), "--out", str(tmp_path / "o")]) == 2
    assert "empty.csv" in capsys.readouterr().err


@pytest.mark.parametrize("inside", ["summary.json", "tb"])
def test_an_out_that_would_overwrite_the_trace_being_replayed_exits_2_and_keeps_it(collapse_trace, tmp_path, capsys,
                                                                                   inside):
    """A trace named evals.jsonl in --out (or a replay's own tb/ replayed into the same --out) was read, then removed
    and written over, exit 0 (found by a new-user probe)."""
    path, _ = collapse_trace
    out = tmp_path / "o"
    assert main(["replay", str(path), "--out", str(out)]) == 0
    trace = out / inside  # (a JSON trace named as replay's summary, or replay's own TensorBoard folder)
    if inside == "summary.json":
        trace.write_text(json.dumps([{"step": s, "train/loss": 1.0, "eval/accuracy": 0.5} for s in range(30)]))
    before = sorted((p.name, p.read_bytes()) for p in ([trace] if trace.is_file() else trace.iterdir()))
    assert main(["replay", str(trace), "--out", str(out), "--no-tensorboard"]) == 2
    assert f"--out {out} would overwrite the trace being replayed, {trace}" in capsys.readouterr().err
    assert sorted((p.name, p.read_bytes()) for p in ([trace] if trace.is_file() else trace.iterdir())) == before


def test_unknown_set_key_exits_2(collapse_trace, tmp_path, capsys):
    path, _ = collapse_trace
    assert main(["replay", str(path), "--set", "policy.alarm.cooldwn=3", "--out", str(tmp_path / "o")]) == 2
    assert "policy.alarm.cooldwn" in capsys.readouterr().err


def test_a_live_run_recorded_with_record_to_replays(tmp_path, clock):
    from adaptive_eval import AdaptiveEvaluator
    from adaptive_eval.trace import read_trace

    ev = AdaptiveEvaluator.from_config(load_config(), clock=clock)
    path = tmp_path / "live.jsonl"
    ev.record_to(path)
    for g in range(200):
        clock.advance(10.0)
        ev.observe({"train/reward": 0.5 if g < 120 else 0.05, "train/loss": float("nan") if g == 150 else 1.0}, g)
        ev.evaluate(lambda req: {"acc": [1.0, 0.0] * (len(req.indices(500)) // 2),
                                 "loss": [1.0, 2.0] * (len(req.indices(500)) // 2)}, 0, g, g)
    ev.close()
    trace = read_trace(path)
    assert len(trace) == 200 and trace.records[150].metrics["train/loss"] != trace.records[150].metrics["train/loss"]
    assert trace.eval_names() == ["eval/acc", "eval/loss"]
    eval_steps = [r.step for r in trace.records if "eval/acc" in r.metrics]
    assert eval_steps == [r.step for r in ev.history]
    assert all("eval/loss:std" in r.metrics for r in trace.records if "eval/loss" in r.metrics)
    assert replay(trace, load_config(), seed=0).summary["steps"] == 200


def test_a_recorded_run_replays_to_its_own_budgeted_decisions_counting_each_evaluation_once(tmp_path, clock):
    """The trace's time column held the live evaluations' seconds, and replay added its simulated ones on top: the
    budget sized the alarm's evaluation 123 items instead of the live run's 117 (a new-user probe).  Here each
    evaluation costs what replay simulates (5 s + 0.05 s an item), and scalar results draw nothing."""
    from adaptive_eval import AdaptiveEvaluator
    from adaptive_eval.testing import replay_trace

    cfg = load_config(overrides=["policy.budget.max_eval_fraction=0.02"])
    ev = AdaptiveEvaluator.from_config(cfg, total_steps=300, clock=clock)
    path = tmp_path / "live.csv"
    ev.record_to(path)
    rng = np.random.default_rng(0)

    def evaluate_fn(req):
        clock.advance(5 + 0.05 * req.sample_size)
        return {"score": 5.0 if req.step < 150 else 2.0}

    for s in range(300):
        clock.advance(10.0)
        ev.observe({"train/reward": (0.7 if s < 150 else 0.1) + 0.05 * rng.standard_normal()}, s)
        ev.evaluate(evaluate_fn, 0, s, s)
    ev.close()
    live = [(r.step, r.sample_size, r.reason) for r in ev.history]
    assert any("budget" in reason for _, _, reason in live)  # (the budget sized some)
    run = replay_trace(path, cfg)
    assert [(e["step"], e["sample_size"], e["reason"]) for e in run.evals] == live
    assert run.summary["train_seconds"] == pytest.approx(3000.0)


def test_a_restarted_log_replays_with_keep_last_run(traces_dir, tmp_path, capsys):
    trace = traces_dir / "rasbt__reasoning-from-scratch__ch07_7_3_plus_tracking_metrics.csv"
    args = ["replay", str(trace), "--stream", "reward_avg", "--eval", "eval_acc:0.01", "--no-tensorboard"]
    assert main(args + ["--out", str(tmp_path / "a")]) == 2  # the step restarts at line 7
    assert ":7:" in capsys.readouterr().err
    assert main(args + ["--out", str(tmp_path / "b"), "--keep-last-run"]) == 0
    assert json.loads((tmp_path / "b" / "summary.json").read_text())["steps"] == 500


# ------------------------------------------------------------------ a trace logged every k steps (replay.every_step)


def _every(trace, k):
    """``trace`` as a run that logged its first step and then every ``k``-th (steps k-1, 2k-1, ...)."""
    return Trace([r for r in trace.records if r.step == 0 or (r.step + 1) % k == 0], "every-k")


def test_every_step_replays_a_sparse_trace_on_the_training_steps_schedule(collapse_trace):
    _, st = collapse_trace
    sparse = _every(st.trace, 10)
    fixed = ["trigger.freq_steps=50", "logging.tensorboard_dir=null"]
    full = replay(st.trace, load_config("areal", fixed), seed=3)
    by_record = replay(sparse, load_config("areal", fixed), seed=3)
    by_step = replay(sparse, load_config("areal", [*fixed, "replay.every_step=true"]), seed=3)
    # Every 50 training steps, as on the trace logged every step: same steps, sizes and measured values.
    assert [(e["step"], e["sample_size"], e["metrics"]) for e in by_step.evals] == \
        [(e["step"], e["sample_size"], e["metrics"]) for e in full.evals]
    assert by_step.summary["steps"] == full.summary["steps"] == 600
    # Record by record (the default), 50 records are 500 training steps.
    assert len(full.evals) == 12 and [e["step"] for e in by_record.evals] == [sparse.records[49].step]
    assert by_record.summary["steps"] == len(sparse) == 61


def test_every_step_counts_costs_per_1k_training_steps(collapse_trace):
    from adaptive_eval.testing import replay_trace

    _, st = collapse_trace
    sparse = _every(st.trace, 10)
    event = [int(e.step) for e in st.events]
    run_full = replay_trace(st.trace, "default", events=event)
    run_records = replay_trace(sparse, "default", events=event)
    run_steps = replay_trace(sparse, load_config("default", ["replay.every_step=true"]), events=event)
    assert run_steps.steps == run_full.steps == 600
    # Per 1,000 training steps the sparse run costs what the full one does (its evaluations are as frequent),
    # not ~10x as much, as counted per 1,000 records.
    assert 0.5 < run_steps.samples_per_1k / run_full.samples_per_1k < 1.5
    assert run_records.samples_per_1k > 3 * run_full.samples_per_1k


def test_every_step_in_tune_cases(collapse_trace, tmp_path):
    from adaptive_eval.tune import case_from_file, replay_case

    _, st = collapse_trace
    path = tmp_path / "sparse.csv"
    write_trace(_every(st.trace, 10), path)
    base = load_config("default", ["replay.every_step=true"])
    case = case_from_file(str(path), base, [int(e.step) for e in st.events])
    assert case.steps == 600 and case.events == [int(e.step) for e in st.events]
    assert len(case.truth) == 600 and case.truth[315] == case.truth[309]  # carried forward between records
    evals = replay_case(case, base)
    assert len(evals) >= 600 // 100 and max(e["step"] for e in evals) == 599
    plain = case_from_file(str(path), load_config("default"), [int(e.step) for e in st.events])
    assert plain.steps == 61


def test_every_step_refuses_a_trace_of_millions_of_steps_naming_the_key(tmp_path, capsys):
    path = tmp_path / "frames.csv"
    path.write_text("step,reward,eval/accuracy\n0,1.0,0.5\n5000000,1.0,0.5\n")
    assert main(["replay", str(path), "--out", str(tmp_path / "out"), "--no-tensorboard",
                 "--set", "replay.every_step=true"]) == 2
    err = capsys.readouterr().err
    assert "replay.every_step" in err and "5,000,001 steps" in err and "Traceback" not in err


def test_replay_cli_says_how_a_sparse_trace_is_counted(collapse_trace, tmp_path, capsys):
    _, st = collapse_trace
    path = tmp_path / "sparse.csv"
    write_trace(_every(st.trace, 10), path)
    assert main(["replay", str(path), "--out", str(tmp_path / "a"), "--no-tensorboard"]) == 0
    out = capsys.readouterr()
    assert "replayed 61 steps" in out.out and "every 9.98 steps" in out.err and "replay.every_step=true" in out.err
    assert main(["replay", str(path), "--out", str(tmp_path / "b"), "--no-tensorboard",
                 "--set", "replay.every_step=true"]) == 0
    out = capsys.readouterr()
    assert "replayed 600 steps" in out.out and "note:" not in out.err


@pytest.mark.parametrize("name", ["accuracy", "val-core/gsm8k/acc/mean@1"])
def test_an_evaluation_between_two_checkpoints_measures_the_earlier_one_and_cannot_confirm_a_later_change(name):
    """Ground truth logged every 50 steps (checkpoints), the reward every step; the accuracy falls after step 120
    (the checkpoint of step 150 measures 0.2).  An evaluation at 121-149 draws from the step-100 checkpoint's
    truth: its evals.jsonl line says so (truth_step), and however its draw falls it confirms nothing (a new
    user's replay 'confirmed' such a collapse 1 step after it, by sampling noise on the old model).  Also under
    verl's name for it, whose ``@1`` was read as a suite's item 1: no truth_step, early 'confirmations'."""
    import random

    from adaptive_eval.scoring import confirmed_delay

    rng = random.Random(5)
    rows = []
    for s in range(400):
        m = {"train/reward": rng.gauss(0.6 if s < 120 else 0.1, 0.05)}
        if s % 50 == 0:
            m[f"eval/{name}"] = 0.7 if s <= 100 else 0.2
        rows.append(TraceRecord(s, m))
    trace = Trace(rows, source="ckpt.csv")
    result = replay(trace, load_config(overrides=["policy.sample_size.min=20", "policy.sample_size.initial=20"]))
    between = [e for e in result.evals if e["step"] % 50]
    assert between and all(e["truth_step"] == {name: e["step"] // 50 * 50} for e in between)
    assert all("truth_step" not in e for e in result.evals if e["step"] % 50 == 0)
    early = [e for e in between if 120 <= e["step"] < 150]
    assert early, "the reward's collapse brings an evaluation forward before the next checkpoint"
    delay = confirmed_delay(result.evals, 120, name, pre_level=0.7, direction="down")
    assert delay is not None and delay >= 30
    # The same evaluations without truth_step (the old scoring) would count the early ones' draws.
    for e in early:
        e["ci"][name] = [0.1, 0.3]
    assert confirmed_delay(result.evals, 120, name, pre_level=0.7, direction="down") == delay
    stripped = [{k: v for k, v in e.items() if k != "truth_step"} for e in result.evals]
    assert confirmed_delay(stripped, 120, name, pre_level=0.7, direction="down") == early[0]["step"] - 120
    best = result.summary["best"]
    # summary.json's pick says which checkpoint's truth it measured when that is not its own step.
    assert ("truth_step" in best) == (best["step"] % 50 != 0)
    assert best.get("truth_step", best["step"]) == best["step"] // 50 * 50


def test_replay_takes_a_shipped_trace_by_name_as_check_and_tune_do(tmp_path, capsys):
    """`adaptive-eval replay real:grpo_kl_collapse` said "no such trace file"; check and tune took the name."""
    assert main(["replay", "real:grpo_kl_collapse", "--out", str(tmp_path / "a"), "--no-tensorboard"]) == 0
    assert main(["replay", "grpo_kl_collapse", "--out", str(tmp_path / "b"), "--no-tensorboard"]) == 0
    a = (tmp_path / "a" / "evals.jsonl").read_text()
    assert a and a == (tmp_path / "b" / "evals.jsonl").read_text()
    assert '"truth_step": {"accuracy": 50}' in a  # the shipped GRPO trace has ground truth every 50 steps
    assert main(["replay", "real:nonesuch", "--out", str(tmp_path / "c")]) == 2
    assert "real:nonesuch: no such trace file" in capsys.readouterr().err


def _checkpointed(steps=400, first=0, loss_every=None):
    import random

    rng = random.Random(5)
    rows = []
    for i in range(steps):
        m = {"train/reward": rng.gauss(0.6 if i < 120 else 0.1, 0.05)}
        if i % 50 == 0:
            m["eval/accuracy"] = 0.7 if i <= 100 else 0.2
        if loss_every and i % loss_every == 0:
            m["eval/loss"] = 1.0 if i < 120 else 3.0
            m["eval/loss:std"] = 0.5
        rows.append(TraceRecord(first + i, m))
    return Trace(rows, source="ckpt.csv")


def test_truth_step_is_per_metric_and_reaches_the_last_asynchronous_evaluation():
    """The review found: a record with any eval/ column moved every metric's truth step (eval/loss logged
    every 10 steps made an accuracy logged every 50 look current), and the asynchronous run's last result,
    which joins at close(), was never marked."""
    cfg = ["policy.sample_size.min=20", "policy.sample_size.initial=20"]
    result = replay(_checkpointed(loss_every=10), load_config(overrides=cfg))
    for e in result.evals:
        marks = e.get("truth_step", {})
        assert marks.get("accuracy", e["step"]) == e["step"] // 50 * 50
        assert marks.get("loss", e["step"]) == e["step"] // 10 * 10
    asyn = replay(_checkpointed(), load_config(overrides=cfg + ["evaluation.asynchronous=true",
                                                                "evaluation.async_integrate_after_steps=7"]))
    last = asyn.evals[-1]
    assert last["step"] == 399 and last["truth_step"] == {"accuracy": 350}
    # the summary counts it, as evals.jsonl does (it was taken before close(): one evaluation and its samples
    # short; a probe)
    assert asyn.summary["evals"] == len(asyn.evals) and asyn.summary["samples"] == sum(
        e["sample_size"] for e in asyn.evals)


def test_an_asynchronous_replays_summary_counts_the_evaluations_cancelled_for_an_urgent_one():
    """A review: summary() counts them; replay's summary (summary.json) said nothing of them."""
    recs = [TraceRecord(s, {"train/loss": math.nan if s == 60 else 1.0 - s / 400, "eval/accuracy": 0.6}, None, None)
            for s in range(200)]
    cfg = load_config("default", ["evaluation.asynchronous=true", "evaluation.async_integrate_after_steps=30",
                                  "evaluation.max_in_flight=1", "trigger.freq_steps=50"])
    out = replay(Trace(recs, "synthetic"), cfg, seed=0)
    assert out.summary["cancelled"] == 1


def test_tune_scores_truth_steps_as_record_indices_like_its_steps():
    """tune renumbers evaluation steps to record indices; truth_step stayed in trace steps, so on a trace
    starting at step 1000 no evaluation was ever 'before' an event (the guard was off)."""
    from adaptive_eval.scoring import confirmed_delay
    from adaptive_eval.tune import Case, replay_case

    trace = _checkpointed(first=1000)
    truth = [0.7 if i < 150 else 0.2 for i in range(400)]
    evals = replay_case(Case("x", trace, [120], truth, "accuracy"),
                        load_config(overrides=["policy.sample_size.min=20", "policy.sample_size.initial=20"]))
    early = [e for e in evals if 120 <= e["step"] < 150]
    assert early and all(e["truth_step"] == {"accuracy": 100} for e in early)
    for e in early:
        e["ci"]["accuracy"] = [0.1, 0.3]  # a low draw on the old model confirms nothing
    assert confirmed_delay(evals, 120, "accuracy", pre_level=0.7, direction="down") >= 30


@pytest.mark.parametrize("command", [["replay", "real:grpo_kl_collapse"], ["tune", "real:grpo_kl_collapse"],
                                     ["check", "real:grpo_kl_collapse"], ["demo"]])
@pytest.mark.parametrize("seed", ["-1", "4294967296", "x"])
def test_a_bad_seed_is_refused_naming_the_option_before_anything_runs(command, seed, capsys):
    """--seed -1 was 'expected non-negative integer' (no option named), and tune printed its header first."""
    with pytest.raises(SystemExit) as exc:
        main([*command, "--seed", seed])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "argument --seed: " in err and "Traceback" not in err, err


def test_replay_takes_what_the_cli_takes_and_refuses_a_bad_seed(tmp_path):
    """Found by a new user: replay('run.csv') was an AttributeError, replay(trace, 'aggressive') a TypeError,
    streams='train/loss' looked for columns 't', 'r', 'a', ..., and seed=1.5 a numpy TypeError."""
    from adaptive_eval.trace import read_trace

    path = tmp_path / "run.csv"
    path.write_text("step,train/loss,eval/accuracy\n" +
                    "".join(f"{s},{1.0 - 0.001 * s},{0.5 + 0.0005 * s}\n" for s in range(200)))
    trace = read_trace(path)
    by_path = replay(str(path), "aggressive", streams="train/loss", seed=3)
    by_objects = replay(trace, load_config("aggressive"), streams=["train/loss"], seed=3)
    assert [e["step"] for e in by_path.evals] == [e["step"] for e in by_objects.evals] and by_path.evals
    for bad in (1.5, -1, True, "3"):
        with pytest.raises(ValueError, match="seed must be a non-negative integer"):
            replay(trace, seed=bad)


def test_replay_with_the_resource_scheduler_on_reads_no_machine_and_says_so(collapse_trace, tmp_path, capsys,
                                                                            caplog):
    """Replay read this machine's memory and CPU (psutil), so one command gave 8 evaluations, then 9; and a
    host below resources.min_free_host_gb deferred 174 evaluations, which the note blamed on the budget."""
    short = ["resources.enabled=true", "resources.min_free_host_gb=1e9", "resources.max_host_cpu_percent=1"]
    path, st = collapse_trace
    plain = replay(st.trace, load_config(), seed=3)
    with pytest.warns(RuntimeWarning, match="a trace holds no resource readings, so replay never defers"):
        on = replay(st.trace, load_config(overrides=short), seed=3)
    assert on.evals == plain.evals and not on.deferrals
    # and only that: not that replay's own stand-in monitor "reads no accelerator memory here" (a probe)
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"), pytest.warns(RuntimeWarning):
        replay(st.trace, load_config(overrides=[*short, "resources.min_free_accelerator_gb=8"]), seed=3)
    assert "reads no accelerator memory" not in caplog.text
    # an asynchronous run whose due evaluations wait on the one in flight: those are not the budget's
    waiting = ["evaluation.asynchronous=true", "evaluation.async_integrate_after_steps=60", "trigger.freq_steps=2",
               "policy.interval.enabled=false", "policy.budget.enabled=false"]
    capsys.readouterr()
    assert main(["replay", str(path), "--out", str(tmp_path / "o"), "--no-tensorboard",
                 *(a for o in waiting for a in ("--set", o))]) == 0
    err = capsys.readouterr().err
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["deferrals"] > max(summary["evals"], 10) and "the budget deferred" not in err


def test_replay_runs_the_simulated_evaluations_without_importing_torch(tmp_path):
    """Replay's evaluations are simulated numbers: they ran under torch.inference_mode, which imported torch
    (2.8 s of every CLI replay here), and so did the TensorBoard logger's rank check.  Now they run as they are
    (evaluation.precision: none) and a CLI replay with its TensorBoard folder never imports torch; the config it
    logs is still the user's (precision fp32)."""
    import subprocess
    import sys

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    path = tmp_path / "t.csv"
    path.write_text("step,loss,eval/acc\n" + "".join(f"{i},{1.0 + (i % 3) * 0.01},0.5\n" for i in range(60)))
    out_dir = tmp_path / "out"
    code = ("import sys; from adaptive_eval.cli import main; "
            f"rc = main(['replay', {str(path)!r}, '--out', {str(out_dir)!r}]); print(rc, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-2:] == ["0", "False"], out.stdout
    assert len((out_dir / "evals.jsonl").read_text().splitlines()) >= 2
    acc = EventAccumulator(str(out_dir / "tb"), size_guidance={"tensors": 0}).Reload()
    config = acc.Tensors("run_config")[0]
    assert b"precision: fp32" in config.tensor_proto.string_val[0]


def test_a_trace_whose_ground_truth_starts_late_does_not_blame_evaluate_fn(caplog):
    """Found in review: replay's simulated evaluate_fn returns {} before the trace's first eval value, and the
    evaluator's "evaluate_fn returned no metric ... a missing `return`?" blamed a function the user did not
    write, beside replay's own note."""
    import logging
    import warnings

    trace = Trace([TraceRecord(s, {"train/loss": 1.0, **({"eval/accuracy": 0.5} if s >= 100 else {})})
                   for s in range(200)])
    with warnings.catch_warnings(record=True) as got, caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        warnings.simplefilter("always")
        result = replay(trace, load_config("default", ["trigger.freq_steps=20", "logging.tensorboard_dir=null"]))
    assert result.evals and not result.evals[0]["metrics"]  # (an evaluation before the ground truth)
    said = [str(w.message) for w in got] + [r.getMessage() for r in caplog.records]
    assert not [m for m in said if "returned no metric" in m], said


def test_a_replay_with_a_null_metric_picks_the_best_on_the_metric_the_evaluator_tracked():
    """summary.json's best took the first eval column (eval/err_rate) while the evaluator, for evaluation.metric:
    null, tracks a metric that does not read like an error (eval/score): the pick and the schedule were about two
    metrics."""
    import math

    records = [TraceRecord(s, {"train/reward": 0.5 + 0.001 * s, "eval/err_rate": 0.6 - 0.001 * s,
                               "eval/score": 0.4 + 0.0004 * s + 0.05 * math.sin(s / 40)}) for s in range(400)]
    result = replay(Trace(records, "t.csv"), load_config("default", ["trigger.freq_steps=20"]))
    assert list(result.evals[0]["metrics"]) == ["err_rate", "score"]
    assert result.summary["best"]["metric"] == "score" and result.summary["best"]["higher_is_better"] is True


def test_a_replays_summary_says_its_evaluations_are_simulated(collapse_trace):
    """A probe: summary.json, the picture and the table never said the evaluations were draws."""
    _, st = collapse_trace
    summary = replay(st.trace, load_config("default", ["logging.tensorboard_dir=null"]), seed=0).summary
    assert summary["simulated"].startswith("every evaluation drawn from the trace's ground truth")


def test_a_run_resumed_from_a_state_saved_before_its_time_key_records_on_without_going_back(tmp_path, clock):
    """A review: a state saved before sync_eval_seconds was kept read it as eval_seconds, and the trace's time went
    back at the resume (below zero after an asynchronous run's)."""
    from adaptive_eval import AdaptiveEvaluator

    def evaluate_fn(req):
        clock.advance(30.0)
        return {"acc": [1.0, 0.0] * 10}

    cfg = load_config(overrides=["trigger.freq_steps=5", "policy.budget.enabled=false"])
    ev = AdaptiveEvaluator.from_config(cfg, clock=clock)
    ev.record_to(tmp_path / "t.csv")
    for g in range(20):
        clock.advance(1.0)
        ev.observe({"train/loss": 1.0}, g)
        ev.evaluate(evaluate_fn, 0, g, g)
        ev._sync_eval_seconds = 0.0  # (the code before: its time column held the evaluations' seconds)
    state = ev.state_dict()
    del state["sync_eval_seconds"]
    ev.close()
    resumed = AdaptiveEvaluator.from_config(cfg, clock=clock)
    resumed.load_state_dict(state)
    resumed.record_to(tmp_path / "t.csv")
    for g in range(20, 40):
        clock.advance(1.0)
        resumed.observe({"train/loss": 1.0}, g)
        resumed.evaluate(evaluate_fn, 0, g, g)
    resumed.close()
    import csv

    with open(tmp_path / "t.csv", newline="") as f:  # (as written: read_trace mends a time that goes back)
        times = [float(row["time"]) for row in csv.DictReader(f) if row["time"]]
    assert len(times) >= 40 and all(b >= a for a, b in zip(times, times[1:])), times


def test_an_asynchronous_runs_recorded_results_are_the_truth_of_the_weights_they_measured():
    """record_to writes an asynchronous result at the step it came back, L steps after the weights it measured: as
    ground truth it was read at the arrival step, so a replayed collapse evaluation measured the evaluation before's
    truth (0.702 where the live run measured 0.432; check read "confirmed after 58 steps", the live run 2; a probe)."""
    records = []
    for step in range(40):
        metrics = {"train/loss": 1.0}
        if step % 5 == 1 and step > 5:  # the result of the evaluation of step - 2, the weights' step
            metrics.update({"eval/acc": 0.8 if step - 2 < 20 else 0.2, "async/latency_steps": 2.0})
        records.append(TraceRecord(step, metrics))
    cfg = load_config("areal", ["trigger.freq_steps=5", "replay.eval_set_size=500"])
    out = replay(Trace(records, "async.csv"), cfg, seed=0)
    measured = {e["step"]: e["metrics"]["acc"] for e in out.evals if "acc" in e["metrics"]}
    assert measured[19] > 0.7 and measured[24] < 0.3  # (read at the arrival step, 24 measured 0.8: step 19's)
    # ... and the truth check and tune score against is that of the same steps (a review: ground_truth() still read
    # it at the arrival step, the latency late)
    from adaptive_eval.replay import ground_truth

    truth = dict(ground_truth(Trace(records, "async.csv"), cfg)["acc"])
    assert truth[19] == 0.8 and truth[24] == 0.2 and 26 not in truth


def test_an_asynchronous_runs_own_tensorboard_log_replays_with_its_recorded_latencies_as_its_trace_does(tmp_path):
    """A probe: a run's tb/ replays as its trace does, but an asynchronous run's, replayed as asynchronous, was
    refused ("needs a latency model: ... replay a trace recorded by an asynchronous run"): its latencies are there,
    as controller/async_latency_steps."""
    from adaptive_eval import AdaptiveEvaluator
    from adaptive_eval.trace import read_trace

    sets = ["evaluation.asynchronous=true", "evaluation.async_integrate_after_steps=3", "trigger.freq_steps=10"]
    ev = AdaptiveEvaluator.from_config(load_config(overrides=[*sets, f"logging.tensorboard_dir={tmp_path / 'tb'}"]),
                                       total_steps=120, clock=iter(range(10**6)).__next__)
    ev.record_to(tmp_path / "trace.csv")
    for g in range(120):
        ev.observe({"train/loss": 1.0 + 0.01 * (g % 3) + (1.0 if g >= 60 else 0.0)}, g)
        ev.evaluate(lambda r: {"acc": [float(i % 2) for i in r.indices(100)]}, 0, g, g)
    ev.close()
    as_async = load_config(overrides=["evaluation.asynchronous=true"])
    from_tb = replay(read_trace(tmp_path / "tb"), as_async, seed=0)
    from_trace = replay(read_trace(tmp_path / "trace.csv"), as_async, seed=0)
    assert from_tb.alarms == from_trace.alarms and from_tb.alarms
    steps = lambda out: [(e["step"], e.get("integrated_step")) for e in out.evals]  # noqa: E731
    assert steps(from_tb) == steps(from_trace) and all(b == a + 3 for a, b in steps(from_tb)[:-1])


def test_a_result_moved_to_its_weights_step_lands_on_a_record_with_its_epoch_and_time():
    """(A review.)  On a trace logged every 10 steps there is no record at the weights' step s - L: the record made
    there had no epoch nor time, which fired a false epoch trigger and turned the trace's time off."""
    from adaptive_eval.replay import at_weights_steps

    records = [TraceRecord(s, {"loss": 1.0, **({"eval/acc": 0.5, "async/latency_steps": 3.0} if s == 40 else {})},
                           s // 30, float(s)) for s in range(0, 70, 10)]
    moved = at_weights_steps(Trace(records, "k.csv")).records
    assert [r.step for r in moved] == [r.step for r in records] and moved[3].metrics["eval/acc"] == 0.5
    assert all(r.epoch is not None and r.time is not None for r in moved) and "eval/acc" not in moved[4].metrics


def test_replay_says_which_of_several_eval_columns_it_tracks(tmp_path, capsys):
    """A probe: with eval/f1 and eval/accuracy, replay tracked accuracy without a word (summary.json alone said so),
    where check asks which."""
    path = tmp_path / "two.csv"
    path.write_text("step,loss,eval/f1,eval/accuracy\n"
                    + "".join(f"{s},1.0,{'0.5,0.6' if s % 10 == 0 else ','}\n" for s in range(50)))
    assert main(["replay", str(path), "--out", str(tmp_path / "out"), "--no-tensorboard"]) == 0
    assert "tracked accuracy of the trace's 2 eval columns (f1, accuracy)" in capsys.readouterr().out
    assert main(["replay", str(path), "--out", str(tmp_path / "out"), "--no-tensorboard",
                 "--set", "evaluation.metric=f1"]) == 0
    assert "tracked" not in capsys.readouterr().out


def test_replay_says_when_the_warm_up_takes_more_than_half_of_the_streams_values(tmp_path, capsys):
    """A probe: a TRL log at logging_steps=10 (30 records) replayed every step; the collapse at step 200 was
    alarmed at the last record, 100 steps late, and nothing said the 30-value warm-up covered the run (the HF
    callback says it)."""
    sparse = tmp_path / "sparse.csv"
    write_trace(Trace([TraceRecord(10 * i, {"train/reward": 0.5, "train/kl": 0.01}) for i in range(30)]), sparse)
    assert main(["replay", str(sparse), "--out", str(tmp_path / "a"), "--no-tensorboard"]) == 0
    err = capsys.readouterr().err
    assert ("2 of the trace's 2 streams have fewer values than twice their detectors' warm-up (train/kl, "
            "train/reward; the fewest 30 values, a 30-value warm-up)") in err
    # each stream's own detectors (a review: it read the default's literal warmup key alone)
    watched = ["--set", "streams.watch={train/kl: [{type: cusum, warmup: 5}], "
                        "train/reward: [{type: cusum, warmup: 5}]}"]
    assert main(["replay", str(sparse), "--out", str(tmp_path / "c"), "--no-tensorboard", *watched]) == 0
    assert "warm-up" not in capsys.readouterr().err
    dense = tmp_path / "dense.csv"
    write_trace(Trace([TraceRecord(i, {"train/reward": 0.5}) for i in range(200)]), dense)
    assert main(["replay", str(dense), "--out", str(tmp_path / "b"), "--no-tensorboard"]) == 0
    assert "twice their detectors' warm-up" not in capsys.readouterr().err
    # An asynchronous run's record_to column async/latency_steps (one value per result) is no stream replay watches
    # (it was said to be one, too short for its warm-up; a probe)
    latency = tmp_path / "latency.csv"
    write_trace(Trace([TraceRecord(i, {"train/reward": 0.5, **({"eval/acc": 0.5, "async/latency_steps": 2.0}
                                                                 if i % 25 == 2 else {})}) for i in range(200)]),
                latency)
    assert main(["replay", str(latency), "--out", str(tmp_path / "d"), "--no-tensorboard"]) == 0
    assert "twice their detectors' warm-up" not in capsys.readouterr().err


def test_cli_small_outputs_found_by_a_probe(tmp_path, capsys):
    """A trace whose clock never moved read "simulated eval time 0.0% of the run" (all of it was evaluating);
    `plot --out` into a folder not yet made failed; `adaptive-eval config | head` said "[Errno 32] Broken pipe",
    exit 2."""
    import os
    import subprocess
    import sys

    rows = ["step,time,train/loss,eval/accuracy"] + [
        f"{s},0.0,{1.0 if s < 100 else 2.0},{(0.8 if s < 100 else 0.4) if s % 10 == 0 else ''}" for s in range(200)]
    (tmp_path / "zero.csv").write_text("\n".join(rows) + "\n")
    assert main(["replay", str(tmp_path / "zero.csv"), "--out", str(tmp_path / "run")]) == 0
    assert "simulated eval time 100.0% of the run" in capsys.readouterr().out
    assert main(["plot", str(tmp_path / "run"), "--out", str(tmp_path / "new" / "deeper" / "run.png")]) == 0
    assert (tmp_path / "new" / "deeper" / "run.png").stat().st_size > 0
    read, write = os.pipe()
    os.close(read)  # (no reader: the first write fails with EPIPE, deterministically)
    try:
        done = subprocess.run([sys.executable, "-m", "adaptive_eval", "config"], stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write)
    assert done.returncode == 0 and "Broken pipe" not in done.stderr and "Traceback" not in done.stderr

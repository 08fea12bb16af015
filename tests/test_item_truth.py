"""Per-item (per-problem) eval ground truth, ``eval/<suite>/<metric>@<item>``, through every tool that reads a
trace: replay, ``adaptive_eval.testing`` and ``adaptive-eval check``, and ``adaptive-eval tune``."""

import math
import pathlib

import numpy as np
import pytest

from adaptive_eval import load_config
from adaptive_eval.cli import main
from adaptive_eval.replay import ground_truth, replay
from adaptive_eval.synthetic_items import make_item_trace
from adaptive_eval.testing import ExpectationError, assert_confirmed, replay_trace
from adaptive_eval.trace import Trace, TraceError, TraceRecord, write_trace
from adaptive_eval.tune import TuneError, case_from_file, check_input, replay_case, score_case

SUITES = ["evaluation.suites.math.size=60", "evaluation.suites.math.samples_per_item=4",
          "evaluation.suites.aime.size=12", "evaluation.suites.aime.samples_per_item=8",
          "evaluation.suites.aime.cost=4", "evaluation.suites.aime.every=4", "evaluation.metric=math/acc"]


@pytest.fixture(scope="module")
def collapse():
    return make_item_trace("collapse", steps=300, seed=4, suites={"math": (60, 0.0), "aime": (12, 1.0)})


def with_column(trace, fn):
    return Trace([TraceRecord(r.step, fn(dict(r.metrics), r.step), r.epoch, r.time) for r in trace.records],
                 trace.source)


def test_ground_truth_of_a_suite_is_the_mean_of_its_items(collapse):
    cfg = load_config(overrides=SUITES)
    truth = ground_truth(collapse.trace, cfg)
    assert set(truth) == {"math/acc", "aime/acc"}
    steps = [s for s, _ in truth["math/acc"]]
    assert steps == [r.step for r in collapse.trace.records if "eval/math/acc@0" in r.metrics]
    assert [v for _, v in truth["math/acc"]] == pytest.approx([collapse.truth["math"][s] for s in steps])


def test_testing_and_check_confirm_a_collapse_from_per_item_truth(collapse, tmp_path, capsys):
    """Before, they refused the trace: "no eval ground truth eval/math/acc in the trace" (replay took it)."""
    onset = collapse.events[0].step
    run = replay_trace(collapse.trace, load_config(overrides=SUITES), events=[onset])
    assert run.truth["math/acc"][0][1] == pytest.approx(collapse.truth["math"][0])
    assert_confirmed(run, onset, within=25)
    # cost in answers (x the suite's cost), not in the items of one suite
    answers = sum(e["n"][m] * e["samples_per_item"][m] * (4 if m.startswith("aime") else 1)
                  for e in run.evals for m in ("math/acc", "aime/acc") if m in e["n"])
    assert run.samples == answers and run.samples > 4 * sum(e["sample_size"] for e in run.evals)
    path = tmp_path / "run.csv"
    write_trace(collapse.trace, path)
    (tmp_path / "suites.yaml").write_text(
        "evaluation:\n  metric: math/acc\n  suites:\n    math: {size: 60, samples_per_item: 4}\n"
        "    aime: {size: 12, samples_per_item: 8, cost: 4, every: 4}\n")
    (tmp_path / "run.csv.events.yaml").write_text(f"events:\n  - {{step: {onset}, metric: math/acc}}\n")
    capsys.readouterr()
    assert main(["check", str(path), "--config", str(tmp_path / "suites.yaml")]) == 0
    out = capsys.readouterr().out
    assert f"collapse at step {onset}" in out or f"step {onset}" in out, out
    # its cost is in the suites' units, answers x cost, not samples (it was headed "samples/1k"; a probe)
    header, row = out.splitlines()[0], out.splitlines()[1]
    assert "cost/1k" in header and "samples/1k" not in header and " units" in row, out


def test_tune_reads_per_item_truth_and_counts_cost_in_the_suites_units(collapse, tmp_path):
    path = tmp_path / "run.jsonl"
    write_trace(collapse.trace, path)
    base = load_config(overrides=SUITES)
    case = case_from_file(str(path), base, events=[collapse.events[0].step])
    check_input([case], ["cost", "delay", "regret"], 2)  # before: "no eval ground truth"
    assert case.metric == "math/acc"
    assert case.truth[-1] == pytest.approx(collapse.truth["math"][collapse.trace.records[-1].step])
    evals = replay_case(case, base)
    units = sum(e["n"][m] * e["samples_per_item"][m] * (4 if m.startswith("aime") else 1)
                for e in evals for m in ("math/acc", "aime/acc") if m in e["n"])
    assert score_case(case, evals).samples == units
    bare = tmp_path / "bare.csv"
    write_trace(with_column(collapse.trace, lambda m, s: {k: v for k, v in m.items() if not k.startswith("eval/")}),
                bare)
    with pytest.raises(TuneError, match=r"no ground truth for any eval suite \('math', 'aime'\): the trace has no "):
        check_input([case_from_file(str(bare), base)], ["cost"], 2)
    with pytest.raises(TuneError, match="per-item ground truth"):  # per-item columns without suites
        case_from_file(str(path), load_config())


def test_a_suite_mean_beside_the_item_columns_does_not_flatten_them(collapse):
    """A recorded run also writes the suite's mean, eval/math/acc: it used to overwrite every item's truth with it
    (so every item had the same p, no between-item variance), depending on column order."""
    cfg = load_config("areal", ["trigger.freq_steps=30", *SUITES])
    means = with_column(collapse.trace, lambda m, s: {**m, "eval/math/acc": 0.123} if "eval/math/acc@0" in m else m)
    assert replay(means, cfg, seed=1).evals == replay(collapse.trace, cfg, seed=1).evals
    assert [v for _, v in ground_truth(means, cfg)["math/acc"]] == [v for _, v in ground_truth(collapse.trace, cfg)["math/acc"]]


def test_a_skipped_item_column_is_an_error_at_load_naming_the_items_and_the_key(collapse, tmp_path, capsys):
    gap = with_column(collapse.trace, lambda m, s: {k: v for k, v in m.items() if not k.endswith(("@17", "@40"))})
    cfg = load_config(overrides=SUITES)
    message = (r"per-item ground truth of math/acc has no column for items 17, 40 \(eval/math/acc@<item> for every "
               r"item 0-59 of evaluation.suites.math.size=60\)")
    with pytest.raises(ValueError, match=message):
        replay(gap, cfg)
    with pytest.raises(ExpectationError, match=message):
        replay_trace(gap, cfg)
    path = tmp_path / "gap.csv"
    write_trace(gap, path)
    (tmp_path / "s.yaml").write_text("evaluation:\n  suites:\n    math: {size: 60}\n    aime: {size: 12}\n")
    capsys.readouterr()
    assert main(["replay", str(path), "--config", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "o"),
                 "--no-tensorboard"]) == 2
    err = capsys.readouterr().err
    assert "no column for items 17, 40" in err and "Traceback" not in err


def test_a_nan_item_is_data_and_an_item_without_a_value_yet_is_not_measured(collapse):
    cfg = load_config("areal", ["trigger.freq_steps=30", *SUITES])
    nan = with_column(collapse.trace, lambda m, s: {**m, "eval/math/acc@3": math.nan} if "eval/math/acc@3" in m else m)
    evals = replay(nan, cfg, seed=1).evals
    assert evals and all(e["nan_count"]["math/acc"] == 4 for e in evals)  # item 3's 4 answers, skipped
    assert all(e["n"]["math/acc"] == 59 for e in evals)  # (an item with no answer left is not counted)
    # item 5 first gets a value at step 100: math/acc is not measured before (said once, and not billed), and
    # is from then on
    late = with_column(collapse.trace, lambda m, s: m if s >= 100 else {k: v for k, v in m.items() if k != "eval/math/acc@5"})
    with pytest.warns(RuntimeWarning, match=r"3 evaluations of suite 'math' \(steps 29, 59, 89\) did not measure "
                                            r"math/acc: no ground truth yet for item 5 ") as record:
        evals = replay(late, cfg, seed=1).evals
    # (and only replay's: the evaluator's "not among an evaluation's metrics; did you mean 'aime/acc'?" blamed the
    # tracked metric's name)
    assert not [str(w.message) for w in record if "not among" in str(w.message)]
    assert [("math/acc" in e["metrics"]) for e in evals] == [e["step"] >= 100 for e in evals]
    assert all("aime/acc" in e["metrics"] for e in evals if e["step"] % 120 == 0)


def test_per_item_columns_without_eval_suites_are_refused_naming_the_key(collapse):
    """They replayed as 72 separate metrics (and the tracked one became aime/acc@0)."""
    with pytest.raises(ValueError, match=r"per-item ground truth \(eval/<suite>/<metric>@<item>\), which needs eval "
                                         r"suites: set evaluation.suites.aime.size"):
        replay(collapse.trace, load_config())
    one = Trace([TraceRecord(0, {"loss": 1.0, "eval/x/acc@1": 0.5})])  # a single such column is a metric's name
    assert replay(one, load_config()).evals[0]["metrics"] == {"x/acc@1": pytest.approx(0.5, abs=0.5)}
    assert np.isfinite(replay(one, load_config()).evals[0]["metrics"]["x/acc@1"])


def test_tune_reads_the_events_file_beside_a_trace_and_matches_event_paths_as_paths(collapse, tmp_path,
                                                                                    monkeypatch):
    """As ``adaptive-eval check`` does; and ``--events ./run.jsonl=...`` names the trace given as ``run.jsonl``
    (it was "not one of the traces given")."""
    import argparse

    from adaptive_eval.cli import _tune_cases

    monkeypatch.chdir(tmp_path)
    write_trace(collapse.trace, "run.jsonl")
    write_trace(collapse.trace, "other.jsonl")
    pathlib.Path("other.jsonl.events.yaml").write_text("events:\n  - {step: 141}\n  - {step: 200}\n")
    base = load_config(overrides=SUITES)
    args = argparse.Namespace(trace=["run.jsonl", "other.jsonl"], events=["./run.jsonl=120"])
    run, other = _tune_cases(args, base)
    index = [r.step for r in collapse.trace.records]
    assert [index[i] for i in run.events] == [120] and [index[i] for i in other.events] == [141, 200]
    with pytest.raises(TuneError, match="--events names 'elsewhere.jsonl'"):
        _tune_cases(argparse.Namespace(trace=["run.jsonl"], events=["elsewhere.jsonl=3"]), base)


def test_top_k_metrics_are_not_taken_for_items():
    """``imagenet/acc@1`` and ``acc@5`` (top-k accuracies, as record_to writes them) are metrics of their own, not
    items 1 and 5: only columns numbered 0, 1, 2, ... without a gap are refused without suites."""
    rows = [TraceRecord(s, {"train/loss": 1.0, **({"eval/imagenet/acc@1": 0.7, "eval/imagenet/acc@5": 0.9,
                                                    "eval/rec/recall@10": 0.3, "eval/rec/recall@50": 0.6}
                                                   if s % 50 == 0 else {})}) for s in range(200)]
    run = replay(Trace(rows, "run.csv"), load_config(overrides=["trigger.freq_steps=50"]))
    assert set(run.evals[0]["metrics"]) == {"imagenet/acc@1", "imagenet/acc@5", "rec/recall@10", "rec/recall@50"}
    assert set(ground_truth(Trace(rows, "run.csv"))) == set(run.evals[0]["metrics"])


def test_check_takes_a_folder_of_traces_as_the_pytest_marker_does(collapse, tmp_path, capsys):
    """It said "no TensorBoard event files in this directory"; the superseded rows of a resumed recording are
    not traces to check."""
    for name in ("a.csv", "b.jsonl", "a.superseded-1.csv"):
        write_trace(collapse.trace, tmp_path / name)
    (tmp_path / "suites.yaml").write_text("evaluation:\n  metric: math/acc\n  suites:\n    math: {size: 60}\n"
                                          "    aime: {size: 12}\n")
    capsys.readouterr()
    assert main(["check", str(tmp_path), "--config", str(tmp_path / "suites.yaml"), "--max-samples-per-1k",
                 "1000000"]) == 0
    out = capsys.readouterr().out
    assert "a.csv" in out and "b.jsonl" in out and "superseded" not in out, out


def test_a_suites_mean_reward_with_its_own_std_is_not_simulated_as_bernoulli_answers():
    """Per-item mean rewards within [0, 1] with a :std column were drawn as 0/1 answers (their std ignored)."""
    recs = []
    for i in range(120):
        m = {"loss": 1.0, "eval/r/score:std": 0.05}
        m.update({f"eval/r/score@{j}": 0.2 + 0.005 * j for j in range(100)})  # partial credit, 0.2-0.7
        m.update({f"eval/b/acc@{j}": 0.5 for j in range(100)})  # no :std: a probability of success
        recs.append(TraceRecord(step=i, metrics=m))
    cfg = load_config("areal", ["trigger.freq_steps=50", "evaluation.suites.r.size=100",
                                "evaluation.suites.r.samples_per_item=4", "evaluation.suites.b.size=100",
                                "evaluation.suites.b.samples_per_item=4"])
    r = replay(Trace(recs, "mem"), cfg, seed=0).results[0]
    score, acc = r.metrics["r/score"], r.metrics["b/acc"]
    assert not score.binary and score.within_var == pytest.approx(0.05 ** 2, rel=0.3)
    assert acc.binary and acc.within_var == pytest.approx(0.25, rel=0.2)


def test_per_problem_results_in_long_form_become_a_suites_item_truth(tmp_path):
    """Real per-problem eval results come as rows (checkpoint, problem, answer's score), not as item columns."""
    from adaptive_eval.convert import from_item_results
    from adaptive_eval.trace import TraceError

    rng = np.random.default_rng(0)
    skill = rng.normal(0.0, 1.5, 30)
    lines = ["step,problem_id,sample,is_correct"]
    for step in range(0, 300, 10):
        shift = 1.0 if step < 150 else -2.5  # the collapse at step 150
        p = 1.0 / (1.0 + np.exp(-(skill + shift)))
        for j, pid in enumerate(f"aime-{k:02d}" for k in range(30)):
            for a in range(4):
                lines.append(f"{step},{pid},{a},{'true' if rng.random() < p[j] else 'false'}")
    (tmp_path / "results.csv").write_text("\n".join(lines) + "\n")
    log = Trace([TraceRecord(s, {"train/reward": (0.6 if s < 150 else 0.1) + 0.02 * rng.normal()})
                 for s in range(300)], "log")
    trace, ids = from_item_results(tmp_path / "results.csv", suite="aime", metric="acc", item="problem_id",
                                   value="is_correct", streams=log)
    assert ids[:2] == ["aime-00", "aime-01"] and len(ids) == 30 and len(trace) == 300
    at_10 = trace.records[10].metrics
    assert set(at_10) == {"train/reward"} | {f"eval/aime/acc@{i}" for i in range(30)}
    assert all(v in (0.0, 0.25, 0.5, 0.75, 1.0) for k, v in at_10.items() if k.startswith("eval/"))
    cfg = load_config(overrides=["evaluation.suites.aime.size=30", "evaluation.suites.aime.samples_per_item=4"])
    truth = ground_truth(trace, cfg)["aime/acc"]
    assert truth[0][0] == 0 and truth[-1][1] < truth[0][1] - 0.3
    run = replay_trace(trace, cfg, events=[{"step": 150, "direction": "down"}])
    assert_confirmed(run, 150, within=25)
    (tmp_path / "bad.csv").write_text("step,problem_id,is_correct\n0,a,1\n10,a,maybe\n")
    with pytest.raises(TraceError, match=r"bad.csv:3: column 'is_correct': 'maybe' is not a number"):
        from_item_results(tmp_path / "bad.csv", suite="aime", item="problem_id", value="is_correct")
    with pytest.raises(TraceError, match=r"no column 'correct'.*name them with step=, item=, value="):
        from_item_results(tmp_path / "bad.csv", suite="aime", item="problem_id")
    # One NaN answer made its problem NaN (and every replayed answer of it): it is an answer not scored.  A
    # problem with no scored answer at a step is NaN there (tests/test_item_results.py).
    (tmp_path / "nan.csv").write_text("step,problem_id,is_correct\n0,a,1\n0,a,nan\n0,a,0\n0,b,NaN\n0,c,1\n")
    trace, ids = from_item_results(tmp_path / "nan.csv", suite="s", metric="acc", item="problem_id",
                                   value="is_correct")
    metrics = trace.records[0].metrics
    assert ids == ["a", "b", "c"] and (metrics["eval/s/acc@0"], metrics["eval/s/acc@2"]) == (0.5, 1.0)
    assert math.isnan(metrics["eval/s/acc@1"])


def test_a_suite_runs_cost_is_named_in_cost_units(collapse):
    """With suites ``check`` said "7836 eval samples" for a total of cost units (answers x cost + items x
    item_cost): fewer answers were generated than it claimed."""
    from adaptive_eval.testing import assert_cost

    run = replay_trace(collapse.trace, load_config(overrides=SUITES))
    with pytest.raises(AssertionError, match=r"cost units per 1,000 steps, above 1 \(\d+ eval cost units \(answers "
                                             r"x cost \+ items x item_cost\) over 300 steps"):
        assert_cost(run, max_samples_per_1k=1)


def test_tune_scores_the_metric_the_sidecar_events_name(collapse, tmp_path, capsys):
    """tune read only the sidecar's event steps and scored the first eval column, another suite's (aime before
    math): a delay that check confirmed after a few steps was a miss in tune."""
    import argparse

    from adaptive_eval.cli import _tune_cases

    write_trace(collapse.trace, tmp_path / "run.csv")
    onset = collapse.events[0].step
    (tmp_path / "run.csv.events.yaml").write_text(f"events:\n  - {{step: {onset}, metric: aime/acc, direction: down}}\n")
    args = argparse.Namespace(trace=[str(tmp_path / "run.csv")], events=[], stream=[], eval=[], step_column="step",
                              keep_last_run=False)
    (case,) = _tune_cases(args, load_config(overrides=SUITES[:-1]))  # (no evaluation.metric; math/acc comes first)
    assert case.metric == "aime/acc"
    # evaluation.metric=math/acc: the trials track it, and the events are still scored on the metric they name, as
    # check judges them (it scored the config's; a probe)
    (case,) = _tune_cases(args, load_config(overrides=SUITES))
    assert case.metric == "aime/acc"


def test_per_problem_results_in_jsonl_read_as_the_csv_does(tmp_path):
    """lm-evaluation-harness style samples (one object a line, k answers as a list) were read as a CSV whose
    header was the first JSON line: "no column 'step' (columns: {"step": 0, ...)" (found by a new-user probe)."""
    import json

    from adaptive_eval.convert import from_item_results

    rng = np.random.default_rng(0)
    answers = {(s, d): [int(x) for x in rng.binomial(1, 0.3 + 0.1 * d, 4)] for s in (0, 50) for d in range(6)}
    rows = ["step,doc_id,exact_match"] + [f"{s},{d},{a}" for (s, d), ks in answers.items() for a in ks]
    (tmp_path / "r.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "r.jsonl").write_text("".join(json.dumps({"step": s, "doc_id": d, "exact_match": ks,
                                                          "resps": [["42"]], "filter": None}) + "\n"
                                              for (s, d), ks in answers.items()))
    kw = dict(suite="math", metric="acc", item="doc_id", value="exact_match")
    csv_trace, csv_ids = from_item_results(tmp_path / "r.csv", **kw)
    jsonl_trace, jsonl_ids = from_item_results(tmp_path / "r.jsonl", **kw)
    assert jsonl_ids == csv_ids == [str(d) for d in range(6)]
    assert [r.metrics for r in jsonl_trace.records] == [r.metrics for r in csv_trace.records]
    assert jsonl_trace.records[1].metrics["eval/math/acc@5"] == np.mean(answers[(50, 5)])
    (tmp_path / "bad.jsonl").write_text('{"step": 0, "doc_id": 1, "exact_match": 1}\n'
                                        '{"step": 0, "doc_id": 2, "exact_match": "right"}\n')
    with pytest.raises(TraceError, match=r"bad.jsonl:2: column 'exact_match': 'right' is not a number"):
        from_item_results(tmp_path / "bad.jsonl", **kw)


def test_a_suite_with_its_mean_alone_replays_with_a_warning_that_every_problem_is_drawn_at_it(collapse):
    """A new-user probe: a recorded suites run holds only its suites' means; its replay drew every problem at the
    mean, unsaid (the between-problem variance the plan read: 0.0018 where the run's was 0.049)."""
    import warnings

    cfg = load_config("areal", ["trigger.freq_steps=30", *SUITES])
    means = with_column(collapse.trace, lambda m, s: {k: v for k, v in m.items() if "@" not in k} | (
        {"eval/math/acc": float(np.mean([v for k, v in m.items() if k.startswith("eval/math/acc@")])),
         "eval/aime/acc": float(np.mean([v for k, v in m.items() if k.startswith("eval/aime/acc@")]))}
        if "eval/math/acc@0" in m else {}))
    with pytest.warns(RuntimeWarning, match=r"eval/math/acc is the suite's value alone, with no per-item truth"):
        assert replay(means, cfg, seed=1).evals
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        replay(collapse.trace, cfg, seed=1)
    assert not [w for w in caught if "no per-item truth" in str(w.message)]


def test_a_trace_with_suites_the_config_lacks_names_them_all_not_a_suite_aggregate():
    """A probe: the per-item column eval/math/acc@0 of a suite missing from the config was answered "the weighted
    mean over the suites a run recorded? set evaluation.suite_aggregate: math", which dropped that suite's columns,
    and the next missing suite was then refused with no hint."""
    recs = [TraceRecord(s, {**{f"eval/{suite}/acc@{i}": 0.5 for suite in ("aime", "gsm", "math") for i in range(3)},
                            "train/reward": 0.1}) for s in range(5)]
    cfg = load_config(overrides=["evaluation.suites.aime24.size=3", "evaluation.metric=aime24/acc"])
    with pytest.raises(ValueError, match=r"the trace's suites missing from the config: aime, gsm, math \(give each "
                                         r"evaluation.suites.<name>.size, its number of problems\); or did you mean "
                                         r"'aime24'\?") as info:
        replay(Trace(recs, "run.csv"), cfg)
    assert "suite_aggregate" not in str(info.value)


def test_a_column_of_no_suite_replayed_with_suites_says_the_way_on():
    """A probe: eval/accuracy (no suite) replayed with evaluation.suites set was refused with "the trace's suites
    missing from the config: " and an empty list, no way on."""
    recs = [TraceRecord(s, {"eval/accuracy": 0.5, "train/reward": 0.1}) for s in range(5)]
    cfg = load_config(overrides=["evaluation.suites.math.size=500"])
    with pytest.raises(ValueError, match=r"'eval/accuracy' belongs to no suite: replay it without evaluation.suites, "
                                         r"or name its column eval/<suite>/accuracy$"):
        replay(Trace(recs, "run.csv"), cfg)

"""Per-problem results in long form (``adaptive_eval.convert.from_item_results``) and how replay simulates
them: the answers' real spread, problems without a scored answer, item numbers, bad scale (review findings
1, 2, 8 and 10)."""

import json
import math
import warnings

import numpy as np
import pytest

from adaptive_eval import load_config
from adaptive_eval.convert import from_item_results
from adaptive_eval.replay import replay
from adaptive_eval.trace import Trace, TraceRecord


def write_results(path, rows, header="step,problem,score"):
    path.write_text("\n".join([header, *(",".join(map(str, r)) for r in rows)]) + "\n")
    return path


def signed_results(path, problems=20, answers=8, steps=(0, 100, 200), seed=0):
    """+1/-1 rewards (an RLVR convention), every problem's answers mixed."""
    rng = np.random.default_rng(seed)
    p = rng.uniform(0.2, 0.8, problems)
    rows = [(s, f"q{i}", 1 if rng.random() < p[i] else -1) for s in steps for i in range(problems)
            for _ in range(answers)]
    return write_results(path, rows)


def suite_cfg(size, samples, *more):
    return load_config("areal", ["trigger.freq_steps=10", "replay.every_step=true", f"evaluation.suites.s.size={size}",
                                 f"evaluation.suites.s.samples_per_item={samples}", *more])


# ------------------------------------------------------------------------ finding 1: the answers' spread


def test_scores_outside_0_1_give_each_problems_answer_sd_and_0_1_scores_none(tmp_path):
    rows = [(0, "a", 1), (0, "a", -1), (0, "a", 1), (0, "a", 1), (0, "b", 1), (0, "b", 1), (0, "c", "nan"),
            (0, "c", -1)]
    # (said: one -1 among 0/1 answers, a grader's "did not parse", turned the whole suite into scores unsaid)
    with pytest.warns(RuntimeWarning, match=r"r.csv: 2 of 7 scores in column 'score' lie outside \[0, 1\] \(the "
                                            r"first: -1 at step 0, problem 'a'\): every problem's answers are "
                                            r"replayed as scores with a spread"):
        trace, ids = from_item_results(write_results(tmp_path / "r.csv", rows), suite="s", metric="r",
                                       item="problem", value="score")
    m = trace.records[0].metrics
    assert ids == ["a", "b", "c"]
    assert m["eval/s/r@0"] == 0.5 and m["eval/s/r@0:std"] == pytest.approx(np.std([1, -1, 1, 1]))
    assert m["eval/s/r@1"] == 1.0 and m["eval/s/r@1:std"] == 0.0  # (all answers alike: no spread)
    assert m["eval/s/r@2"] == -1.0 and m["eval/s/r@2:std"] == 0.0  # (the NaN answer not scored)
    # 0/1 answers: replay draws Bernoulli(p), their exact spread; no :std column (it would make them a mean).
    binary = [(0, "a", 1), (0, "a", 0), (0, "b", 1)]
    trace, _ = from_item_results(write_results(tmp_path / "b.csv", binary), suite="s", item="problem",
                                 value="score")
    assert not any(k.endswith(":std") for k in trace.records[0].metrics)


def test_replayed_signed_rewards_have_intervals_of_their_real_spread(tmp_path):
    """Whole-suite evaluations of +1/-1 rewards read as points ([0.4667, 0.4667]): every answer was drawn as
    its problem's mean (Normal with sd 0)."""
    trace, _ = from_item_results(signed_results(tmp_path / "r.csv"), suite="s", metric="r", item="problem",
                                 value="score")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = replay(trace, suite_cfg(20, 8), seed=0)
    assert not [w for w in caught if "simulated as a mean" in str(w.message)]  # (the spread is known)
    assert len(run.results) >= 3
    for r in run.results:
        m = r.metrics["s/r"]
        assert m.n == 20 and not m.binary
        assert m.ci[1] - m.ci[0] > 0.05, (r.step, m.ci)
    sds = np.array([trace.records[0].metrics[f"eval/s/r@{i}:std"] for i in range(20)])
    first = run.results[0].metrics["s/r"]  # the answers' sd within problems is what the data says
    assert first.within_var == pytest.approx(float(np.mean(sds ** 2)), rel=0.3)


def test_replay_warns_once_about_a_suite_mean_it_can_only_return_as_it_is():
    """A hand-made trace of per-item means outside [0, 1] without any :std column: every answer is its item's
    value; replay said nothing."""
    recs = [TraceRecord(s, {"loss": 1.0, **{f"eval/s/r@{i}": -0.5 + 0.1 * i for i in range(10)}})
            for s in range(40)]
    with pytest.warns(RuntimeWarning) as caught:
        run = replay(Trace(recs, "mem"), suite_cfg(10, 4), seed=0)
    said = [str(w.message) for w in caught if "simulated as a mean" in str(w.message)]
    assert len(said) == 1 and "eval/s/r has no" not in said[0]
    assert "eval/s/r is simulated as a mean" in said[0] and "eval/s/r@<item>:std" in said[0]
    assert all(r.metrics["s/r"].ci[0] == r.metrics["s/r"].ci[1] for r in run.results)  # (what it warns of)


# ------------------------------------------------------------------- finding 2: a problem without answers


def test_a_problem_with_no_scored_answer_at_a_step_is_nan_there_in_its_own_place(tmp_path):
    """It was left out of that step: at the first checkpoint it had no value (replay measured nothing) and
    was numbered after every other problem; at a later one its earlier value was carried on as the truth."""
    rows = [(0, "a", 1), (0, "b", "nan"), (0, "b", ""), (0, "c", 0),
            (100, "a", 1), (100, "b", 1), (100, "c", 1),
            (200, "a", 0), (200, "b", "NaN"), (200, "b", "nan"), (200, "c", 1),
            (300, "a", 1), (300, "c", 1)]  # (b absent at 300: its value at 200 carries on)
    with pytest.warns(RuntimeWarning, match=r"\(step 300: 1 of 3\): each keeps its value"):
        trace, ids = from_item_results(write_results(tmp_path / "r.csv", rows), suite="s", metric="acc",
                                       item="problem", value="score")
    assert ids == ["a", "b", "c"]
    got = [(r.step, r.metrics.get("eval/s/acc@1")) for r in trace.records]
    assert got[1:3] == [(100, 1.0), (200, got[2][1])] and got[3] == (300, None)
    assert math.isnan(got[0][1]) and math.isnan(got[2][1])
    # A problem added after the first checkpoint is not scored there yet (it gave no value: nothing measured).
    late = [(0, "a", 1), (0, "b", 0), (100, "a", 1), (100, "b", 1), (100, "c", 0)]
    trace, ids = from_item_results(write_results(tmp_path / "late.csv", late), suite="s", metric="acc",
                                   item="problem", value="score")
    assert ids == ["a", "b", "c"] and math.isnan(trace.records[0].metrics["eval/s/acc@2"])
    assert trace.records[1].metrics["eval/s/acc@2"] == 0.0


def test_a_replayed_all_nan_problem_leaves_the_rest_measured_from_the_first_checkpoint(tmp_path):
    rng = np.random.default_rng(1)
    rows = [(s, f"q{i}", "nan" if (s == 0 and i == 3) else int(rng.random() < 0.6))
            for s in (0, 50, 100) for i in range(12) for _ in range(4)]
    trace, ids = from_item_results(write_results(tmp_path / "r.csv", rows), suite="s", metric="acc",
                                   item="problem", value="score")
    assert ids.index("q3") == 3
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = replay(trace, suite_cfg(12, 4), seed=0)
    assert not [w for w in caught if "did not measure" in str(w.message)]
    assert run.evals and all("s/acc" in e["metrics"] for e in run.evals)
    assert [e["n"]["s/acc"] for e in run.evals if e["step"] < 50] == [11] * len([e for e in run.evals
                                                                                 if e["step"] < 50])


def test_a_due_suite_replay_cannot_measure_is_not_billed_and_is_named_once():
    """Before item 3 had ground truth, evaluations returned no metrics but were billed (simulated seconds,
    items in the summary) without a word."""
    recs = []
    for s in range(60):
        m = {"loss": 1.0}
        if s % 10 == 0:
            m.update({f"eval/s/acc@{i}": 0.5 for i in range(8) if i != 3 or s >= 30})
        recs.append(TraceRecord(s, m))
    cfg = suite_cfg(8, 4, "replay.eval_fixed_seconds=5", "replay.eval_seconds_per_sample=0.5")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = replay(Trace(recs, "mem.csv"), cfg, seed=0)
    empty = [e for e in run.evals if not e["metrics"]]
    measured = [e for e in run.evals if e["metrics"]]
    assert empty and measured and all(e["step"] < 30 for e in empty) and all(e["step"] >= 30 for e in measured)
    assert all(e["seconds"] == 0 for e in empty)
    assert all(e["seconds"] == pytest.approx(5 + 0.5 * 8 * 4) for e in measured)
    assert run.summary["eval_seconds"] == pytest.approx(sum(e["seconds"] for e in measured))
    assert run.summary["samples"] == sum(e["n"]["s/acc"] for e in measured)
    said = [str(w.message) for w in caught if "did not measure" in str(w.message)]
    assert len(said) == 1 and caught[[str(w.message) for w in caught].index(said[0])].category is RuntimeWarning
    assert said[0].startswith(f"mem.csv: {len(empty)} evaluations of suite 's'") and "did not measure s/acc" in said[0]
    assert "no ground truth yet for item 3 " in said[0]


def test_a_suite_without_ground_truth_yet_is_not_blamed_on_an_evaluate_fn_in_a_replay(caplog):
    """A replay said "evaluate_fn returned no result for suite 's' at step 0, though due" beside its own warning of no
    ground truth yet: there is no evaluate_fn in a replay (a new user's probe)."""
    recs = [TraceRecord(s, {"loss": 1.0, **({f"eval/s/acc@{i}": 0.5 for i in range(8)} if s == 30 else {})})
            for s in range(60)]
    with caplog.at_level("WARNING", logger="adaptive_eval"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = replay(Trace(recs, "late.csv"), suite_cfg(8, 4), seed=0)
    assert [e for e in run.evals if not e["metrics"]] and not [r for r in caplog.records if "evaluate_fn" in
                                                                r.getMessage()]


# ------------------------------------------------------------------------------- finding 8: item numbers


@pytest.mark.parametrize("order, expected_ids", [
    (["2", "0", "1"], ["0", "1", "2"]),  # a dataset's own indices: kept, whatever their order in the file
    (["1", "2", "3"], ["1", "2", "3"]),  # 1-based: numbered by first appearance (item 0 is problem 1)
    (["02", "00", "01"], ["02", "00", "01"]),  # not written as integers: first appearance
    (["b", "a", "c"], ["b", "a", "c"]),
])
def test_integer_ids_0_to_n_minus_1_are_the_items_numbers(tmp_path, order, expected_ids):
    """Ids 2, 0, 1 became items 0, 1, 2, so strata copied in the dataset's order labelled the wrong problems."""
    score = {key: k / 10 for k, key in enumerate(order)}  # each problem its own value
    rows = [(0, key, score[key]) for key in order] + [(10, key, score[key]) for key in reversed(order)]
    trace, ids = from_item_results(write_results(tmp_path / "r.csv", rows), suite="s", metric="acc",
                                   item="problem", value="score")
    assert ids == expected_ids
    for rec in trace.records:
        assert {k: v for k, v in rec.metrics.items()} == {f"eval/s/acc@{i}": score[key] for i, key in enumerate(ids)}


# -------------------------------------------------------------------------------- finding 10: the scale


@pytest.mark.parametrize("scale", [0, 0.0, -0.0, math.nan, math.inf, -math.inf])
def test_a_zero_or_non_finite_scale_is_refused_naming_the_argument(tmp_path, scale):
    """scale=0 zeroed every problem; scale=nan said "no scored rows", blaming the data."""
    path = write_results(tmp_path / "r.csv", [(0, "a", 40), (0, "b", 60)])
    with pytest.raises(ValueError, match=r"^scale=.*must be a finite non-zero number"):
        from_item_results(path, suite="s", item="problem", value="score", scale=scale)
    with pytest.raises(TypeError, match=r"^scale='0.01': .* must be a number"):
        from_item_results(path, suite="s", item="problem", value="score", scale="0.01")
    trace, _ = from_item_results(path, suite="s", item="problem", value="score", scale=0.01)
    assert trace.records[0].metrics == {"eval/s/accuracy@0": 0.4, "eval/s/accuracy@1": 0.6}


def test_answers_in_percent_and_problems_missing_from_a_checkpoint_are_said(tmp_path):
    """Both passed silently (found by a new-user probe): 0/100 answers were replayed as Normal scores (mean 48.7,
    an interval [71.3, 103.0]), and a checkpoint without 30 of 200 problems kept their old values unsaid."""
    rows = [(s, f"q{i}", 100 * ((i + s) % 3 == 0)) for s in (0, 100) for i in range(6) for _ in range(2)]
    with pytest.warns(RuntimeWarning, match=r"every score in column 'score' is 0 or 100: answers in percent\?"
                                           r"  Pass scale=0\.01"):
        from_item_results(write_results(tmp_path / "pct.csv", rows), suite="s", item="problem", value="score")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # scaled: no warning
        trace, _ = from_item_results(tmp_path / "pct.csv", suite="s", item="problem", value="score", scale=0.01)
    assert not any(k.endswith(":std") for k in trace.records[0].metrics)
    missing = [r for r in rows if not (r[0] == 100 and r[1] in ("q4", "q5"))]
    with pytest.warns(RuntimeWarning, match=r"1 checkpoint\(s\) lack rows of some problems \(step 100: 2 of 6\): "
                                            "each keeps its value from its last step with rows"):
        from_item_results(write_results(tmp_path / "m.csv", missing), suite="s", item="problem", value="score",
                          scale=0.01)


# ------------------------------------------------- real per-problem result files (a new user's probe, session 29)


def lm_eval_samples(path, scores, filters=("strict-match",), step=None):
    """lm-evaluation-harness ``--log_samples`` rows: one per document and filter, ``metrics`` a list of names."""

    rows = []
    for doc, score in enumerate(scores):
        for f in filters:
            row = {"doc_id": doc, "doc": {"problem": f"p{doc}"}, "resps": [["... 7"]], "filtered_resps": ["7"],
                   "filter": f, "metrics": ["exact_match"],
                   "exact_match": float(score if f == filters[0] else 1.0)}
            if step is not None:
                row["step"] = step
            rows.append(json.dumps(row))
    path.write_text("\n".join(rows) + "\n")
    return path


def test_lm_eval_rows_of_several_filters_are_refused_unless_where_picks_one(tmp_path):
    """Each document's row per filter was averaged as if it were another answer (0.5 where strict-match said 0)."""
    from adaptive_eval.trace import TraceError

    f = lm_eval_samples(tmp_path / "s.jsonl", [0, 1, 1], filters=("strict-match", "flexible-extract"), step=100)
    with pytest.raises(TraceError, match=r"s\.jsonl:1: rows of 2 filters in column 'filter'.*where="):
        from_item_results(f, suite="a", item="doc_id", value="exact_match")
    trace, ids = from_item_results(f, suite="a", item="doc_id", value="exact_match",
                                   where={"filter": "strict-match"})
    assert ids == ["0", "1", "2"]
    assert [trace.records[0].metrics[f"eval/a/accuracy@{i}"] for i in range(3)] == [0.0, 1.0, 1.0]
    with pytest.raises(TraceError, match=r"no column 'split'.*where="):
        from_item_results(f, suite="a", item="doc_id", value="exact_match", where={"split": "test"})


def test_one_file_per_checkpoint_is_read_as_step_to_file(tmp_path):
    """lm-evaluation-harness writes a file per run with no step in it: one file said "no column 'step'", a list a
    TypeError, a folder IsADirectoryError."""
    from adaptive_eval.trace import TraceError

    files = {}
    for step, scores in ((0, [0, 0, 1]), (50, [1, 0, 1]), (100, [1, 1, 1])):
        (tmp_path / f"global_step_{step}").mkdir()
        files[step] = lm_eval_samples(tmp_path / f"global_step_{step}" / "samples_aime.jsonl", scores)
    trace, ids = from_item_results(files, suite="a", item="doc_id", value="exact_match")
    assert [r.step for r in trace.records] == [0, 50, 100] and ids == ["0", "1", "2"]
    assert [trace.records[1].metrics[f"eval/a/accuracy@{i}"] for i in range(3)] == [1.0, 0.0, 1.0]
    with pytest.raises(TraceError, match=r"no column 'step'.*pass \{step: file\}"):
        from_item_results(files[0], suite="a", item="doc_id", value="exact_match")
    with pytest.raises(IsADirectoryError, match=r"\{step: file\}"):
        from_item_results(tmp_path, suite="a", item="doc_id", value="exact_match")
    with pytest.raises(TypeError, match="step 'x'"):
        from_item_results({"x": files[0]}, suite="a", item="doc_id", value="exact_match")
    # A list: files that carry their own steps, read as one.
    a = write_results(tmp_path / "a.csv", [(0, "q", 1), (0, "q", 0)])
    b = write_results(tmp_path / "b.csv", [(10, "q", 1)])
    trace, _ = from_item_results([a, b], suite="s", item="problem", value="score")
    assert [(r.step, r.metrics["eval/s/accuracy@0"]) for r in trace.records] == [(0, 0.5), (10, 1.0)]


def test_a_checkpoint_appended_twice_is_said_and_answer_keeps_one_row_per_answer(tmp_path):
    """A duplicated row counted as a fifth answer, silently (0.6 where the four answers give 0.5)."""
    rows = [(100, "q1", k, c, 2000 + k) for k, c in enumerate([1, 0, 1, 0])] + [(100, "q1", 2, 1, 2002)]
    f = write_results(tmp_path / "r.csv", rows, header="step,problem,sample,score,length")
    with pytest.warns(RuntimeWarning, match="1 row.* repeat an earlier row cell for cell.*answer="):
        trace, _ = from_item_results(f, suite="s", item="problem", value="score")
    assert trace.records[0].metrics["eval/s/accuracy@0"] == pytest.approx(0.6)
    with pytest.warns(RuntimeWarning, match="1 row.* repeat a step, problem and 'sample'"):
        trace, _ = from_item_results(f, suite="s", item="problem", value="score", answer="sample")
    assert trace.records[0].metrics["eval/s/accuracy@0"] == 0.5
    # Step, problem and score alone: two right answers are two alike rows, not a repeat.
    plain = write_results(tmp_path / "p.csv", [(0, "q", 1), (0, "q", 1), (0, "q", 0)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trace, _ = from_item_results(plain, suite="s", item="problem", value="score")
    assert trace.records[0].metrics["eval/s/accuracy@0"] == pytest.approx(2 / 3)


def test_the_training_logs_own_eval_columns_are_left_out_but_another_suites_items_kept(tmp_path):
    """verl's val-core/aime/acc/mean@4, merged from the training log, read as item 4 of a suite 'val-core'."""
    log = Trace([TraceRecord(s, {"reward": 0.1 * s, "eval/val-core/aime/acc/mean@4": 0.3}) for s in (0, 1, 2)])
    f = write_results(tmp_path / "r.csv", [(0, "q", 1), (2, "q", 0)])
    with pytest.warns(RuntimeWarning, match=r"left out 1 eval column.*eval/val-core/aime/acc/mean@4"):
        trace, _ = from_item_results(f, suite="s", item="problem", value="score", streams=log)
    assert not any("val-core" in k for r in trace.records for k in r.metrics)
    assert trace.records[1].metrics == {"reward": 0.1}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (a whole item set, another suite's, is not left out)
        both, _ = from_item_results(f, suite="t", item="problem", value="score", streams=trace)
    assert both.records[0].metrics["eval/s/accuracy@0"] == 1.0 and both.records[0].metrics["eval/t/accuracy@0"] == 1.0
    # A W&B log's own whole-set accuracy, of no suite (or of this suite as a whole): the items are the suite's truth,
    # and replay with evaluation.suites refused the trace for a column that "belongs to no suite" (a probe)
    log = Trace([TraceRecord(s, {"reward": 0.1 * s, "eval/accuracy": 0.5, "eval/s/accuracy": 0.4,
                                 "eval/gsm8k/accuracy": 0.3}) for s in (0, 1, 2)])
    with pytest.warns(RuntimeWarning, match=r"left out 2 eval column.* belong to no suite or to suite 's' as a whole "
                                            r"\(eval/accuracy, eval/s/accuracy\): the per-item results are"):
        trace, _ = from_item_results(f, suite="s", item="problem", value="score", streams=log)
    assert trace.records[1].metrics == {"reward": 0.1, "eval/gsm8k/accuracy": 0.3}
    config = load_config(overrides=["evaluation.suites.s.size=1", "evaluation.suites.gsm8k.size=10",
                                     "evaluation.metric=s/accuracy"])
    assert replay(trace, config, seed=0).evals  # (it was refused: 'eval/accuracy' belongs to no suite)


def test_a_problem_added_later_is_not_said_to_lack_rows_and_float_ids_are_integers(tmp_path):

    f = write_results(tmp_path / "r.csv", [(0, "a", 1), (10, "a", 1), (10, "b", 0)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # ("1 checkpoint(s) lack rows of some problems" of b, new at step 10)
        trace, _ = from_item_results(f, suite="s", item="problem", value="score")
    assert math.isnan(trace.records[0].metrics["eval/s/accuracy@1"])
    j = tmp_path / "r.jsonl"
    j.write_text("\n".join(json.dumps(o) for o in ({"step": 0, "item": 1.0, "correct": 1},
                                                    {"step": 0, "item": 1, "correct": 0},
                                                    {"step": 0, "item": 0, "correct": 1})) + "\n")
    trace, ids = from_item_results(j, suite="s")
    assert ids == ["0", "1"] and trace.records[0].metrics["eval/s/accuracy@1"] == 0.5


def test_per_problem_results_read_as_a_trace_point_to_from_item_results(tmp_path):
    from adaptive_eval.trace import TraceError, read_trace

    f = write_results(tmp_path / "long.csv", [(0, "aime_I_9", 1)], header="step,problem_id,score")
    # (a column of text ids alone is left out, as any text column, said with the pointer; a probe found the JSONL
    # form, k answers as a list, replayed as a trace with nothing in it, and no word of from_item_results)
    with pytest.warns(RuntimeWarning, match=r"long\.csv: left out 1 column that held text alone \('problem_id'\).*"
                                            r"per-problem results.*from_item_results"):
        read_trace(f)
    j = tmp_path / "k.jsonl"
    j.write_text("".join(json.dumps({"step": s, "problem_id": f"p{i}", "correct": [True, False]}) + "\n"
                         for s in (0, 10) for i in range(2)))
    with pytest.warns(RuntimeWarning, match=r"left out 2 fields .*\('correct', 'problem_id'.*from_item_results"):
        read_trace(j)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (a run's name is not a problem's id: no pointer)
        with pytest.warns(RuntimeWarning, match=r"\('run'\): a record's metadata, not metrics$"):
            read_trace(write_results(tmp_path / "run.csv", [(0, "ppo-7", 1)], header="step,run,score"))
    s = lm_eval_samples(tmp_path / "s.jsonl", [1], step=0)
    with pytest.raises(TraceError, match=r"s\.jsonl:1: unexpected key.*lm-evaluation-harness samples.*from_item"):
        read_trace(s)


def test_an_infinite_score_a_scale_on_0_1_answers_and_ids_with_gaps_are_said(tmp_path):
    from adaptive_eval.trace import TraceError

    with pytest.raises(TraceError, match=r"r\.csv:3: column 'score': 'inf' is not a finite score"):
        from_item_results(write_results(tmp_path / "r.csv", [(0, "a", 1), (0, "a", "inf")]), suite="s",
                          item="problem", value="score")
    with pytest.warns(RuntimeWarning, match=r"scale=0\.01 every score .* is 0 or 0\.01: answers already 0/1"):
        from_item_results(write_results(tmp_path / "b.csv", [(0, "a", 1), (0, "b", 0)]), suite="s",
                          item="problem", value="score", scale=0.01)
    with pytest.warns(RuntimeWarning, match=r"from 0 with gaps \(no rows of \[2\]\)"):
        _, ids = from_item_results(write_results(tmp_path / "g.csv", [(0, 0, 1), (0, 1, 0), (0, 3, 1)]),
                                   suite="s", item="problem", value="score")
    assert ids == ["0", "1", "3"]
    # (a run's own evaluations, a sample of the set without problem 0, were renumbered without a word: a probe)
    with pytest.warns(RuntimeWarning, match=r"with gaps .*\(problem 499 is item 0\), so a suite of them has 2 "):
        _, ids = from_item_results(write_results(tmp_path / "h.csv", [(0, 499, 1), (0, 7, 0)]),
                                   suite="s", item="problem", value="score")
    assert ids == ["499", "7"]


def test_review_of_the_new_inputs_suite_values_constant_columns_list_answers_and_float_ids(tmp_path):
    """A review's findings on this session's first version: another suite's whole-suite value in the training log
    was left out (replay then had no ground truth for it); a constant task column made two right answers a
    "repeat"; answer= with a JSONL list of answers kept the last; all-zero percent scores were said to be 0/1;
    CSV ids 1.0 and 1 were two problems."""

    log = Trace([TraceRecord(s, {"reward": 0.5, "eval/gsm8k/accuracy": 0.4}) for s in (0, 10)])
    f = write_results(tmp_path / "r.csv", [(0, "q", 1), (10, "q", 0)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trace, _ = from_item_results(f, suite="aime", item="problem", value="score", streams=log)
    assert trace.records[0].metrics["eval/gsm8k/accuracy"] == 0.4
    constant = write_results(tmp_path / "c.csv", [(0, "q", "math", c) for c in (1, 1, 0, 1)],
                             header="step,problem,task,score")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trace, _ = from_item_results(constant, suite="s", item="problem", value="score")
    assert trace.records[0].metrics["eval/s/accuracy@0"] == 0.75
    j = tmp_path / "l.jsonl"
    j.write_text(json.dumps({"step": 10, "item": "p", "sample": 0, "correct": [1, 0, 0, 0]}) + "\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trace, _ = from_item_results(j, suite="s", answer="sample")
    assert trace.records[0].metrics["eval/s/accuracy@0"] == 0.25
    zeros = write_results(tmp_path / "z.csv", [(0, "a", 0), (0, "b", 0)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from_item_results(zeros, suite="s", item="problem", value="score", scale=0.01)
    a = write_results(tmp_path / "a.csv", [(0, "1.0", 1), (0, "2.0", 0)])
    b = write_results(tmp_path / "b.csv", [(10, "1", 0), (10, "2", 1)])
    trace, ids = from_item_results([a, b], suite="s", item="problem", value="score", where={"problem": 1})
    assert ids == ["1"] and [r.metrics["eval/s/accuracy@0"] for r in trace.records] == [1.0, 0.0]

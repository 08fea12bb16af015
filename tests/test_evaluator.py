import dataclasses
import math

import numpy as np
import pytest
import torch
from scipy import stats as sps
from statsmodels.stats.proportion import proportion_confint

from adaptive_eval import AdaptiveEvaluator, EvalRequest, EvalResult, Evaluator, load_config
from adaptive_eval.stats import summarize


@dataclasses.dataclass
class ArealEvaluatorConfig:
    """Shaped like areal.api.cli_args.EvaluatorConfig (its _Timer fields)."""

    experiment_name: str = "exp"
    trial_name: str = "trial"
    fileroot: str = "/tmp"
    freq_epochs: int | None = None
    freq_steps: int | None = None
    freq_secs: int | None = None
    eval_before_train: bool = False


def run(ev, fn, n, spe):
    out = []
    for g in range(n):
        r = ev.evaluate(fn, g // spe, g % spe, g)
        if r is not None:
            out.append(r)
    return out


def test_zero_argument_evaluate_fn_areal_style():
    calls = []
    ev = Evaluator(ArealEvaluatorConfig(freq_epochs=1), steps_per_epoch=4)
    results = run(ev, lambda: calls.append(1), 12, 4)
    assert [r.step for r in results] == [3, 7, 11]
    assert len(calls) == 3 and all(r.reason == "trigger:epochs" and r.metrics == {} for r in results)


def test_request_evaluate_fn_gets_a_nested_sample_and_metrics_are_summarized():
    data = np.random.default_rng(0).integers(0, 2, size=300)
    seen = []

    def evaluate_fn(req: EvalRequest):
        idx = req.indices(len(data))
        seen.append(idx)
        return {"acc": data[idx].tolist(), "loss": torch.tensor(data[idx] * 2.0 + 0.5), "score": 0.25}

    cfg = load_config(overrides=["trigger.freq_steps=5", "evaluation.sample_size=100",
                                 "evaluation.metric_kinds.score=proportion"])
    ev = Evaluator(cfg)
    results = run(ev, evaluate_fn, 10, 10)
    assert [r.step for r in results] == [4, 9]
    assert seen[0] == seen[1] and len(seen[0]) == 100  # the same items each time (fixed seed)
    r = results[0]
    acc = data[seen[0]]
    assert r["acc"].n == 100 and r.mean("acc") == pytest.approx(acc.mean())
    low, high = proportion_confint(acc.sum(), 100, alpha=0.05, method="wilson")
    assert r["acc"].ci == pytest.approx((low, high))
    loss = acc * 2.0 + 0.5
    half = sps.t.ppf(0.975, 99) * loss.std(ddof=1) / 10
    assert r["loss"].ci == pytest.approx((loss.mean() - half, loss.mean() + half))
    assert not r["loss"].binary and r["acc"].binary
    # A scalar declared a proportion (evaluation.metric_kinds) gets a Wilson interval over the requested items.
    assert r["score"].n == 100 and r["score"].ci[0] < 0.25 < r["score"].ci[1]


def test_a_share_per_item_whose_t_interval_leaves_0_1_is_told_the_metric_kind_that_keeps_it_inside(caplog):
    """A probe: a token accuracy (k of 7 tokens per item) read 0.0089 [-0.0083, 0.026], an accuracy below 0, and
    nothing said that evaluation.metric_kinds: proportion gives an interval inside [0, 1]."""
    values = [0.0] * 31 + [2 / 7]
    with caplog.at_level("WARNING", logger="adaptive_eval"):
        assert summarize(values, name="tok_acc_probe").ci[0] < 0
        summarize(values, name="tok_acc_probe")  # (once)
        summarize([0.2, 0.5, 0.9, 0.4], name="tok_acc_probe2")  # (inside [0, 1]: nothing to say)
    said = [r.getMessage() for r in caplog.records if "tok_acc_probe" in r.getMessage()]
    assert len(said) == 1 and "declare evaluation.metric_kinds.tok_acc_probe: proportion" in said[0]
    assert 0 <= summarize(values, kind="proportion", name="tok_acc_probe").ci[0]


def test_eval_before_train_evaluates_initial_weights_before_step_zero():
    ev = Evaluator(ArealEvaluatorConfig(freq_steps=3, eval_before_train=True))
    first = ev.before_train(lambda: {"acc": 0.5})
    assert first is not None and first.reason == "before_train" and first.step == 0
    assert [r.step for r in run(ev, lambda: {"acc": 0.5}, 7, 100)] == [2, 5]
    assert ev.before_train(lambda: None) is None  # only once


def test_eval_before_train_without_before_train_evaluates_at_first_call_like_areal():
    ev = Evaluator(ArealEvaluatorConfig(freq_steps=3, eval_before_train=True))
    assert [r.reason for r in run(ev, lambda: None, 4, 100)] == ["trigger:initial", "trigger:steps"]


def test_final_step_is_evaluated_when_total_is_known():
    ev = Evaluator(ArealEvaluatorConfig(freq_steps=4), total_steps=10)
    results = run(ev, lambda: None, 10, 100)
    assert [(r.step, r.reason) for r in results] == [(3, "trigger:steps"), (7, "trigger:steps"), (9, "trigger:final")]


def test_failing_evaluate_fn_is_skipped_by_default(caplog):
    ev = Evaluator(ArealEvaluatorConfig(freq_steps=2))

    def boom():
        raise RuntimeError("eval server down")

    assert run(ev, boom, 4, 100) == []
    assert isinstance(ev.last_error, RuntimeError)
    assert "eval server down" in caplog.text and "step 1" in caplog.text


def test_failing_evaluate_fn_raises_when_asked():
    ev = Evaluator(load_config(overrides=["evaluation.on_error=raise", "trigger.freq_steps=1"]))
    def boom():
        raise RuntimeError("x")

    with pytest.raises(RuntimeError):
        ev.evaluate(boom, 0, 0, 0)


def test_state_dict_round_trip_and_areal_format():
    ev = Evaluator(ArealEvaluatorConfig(freq_steps=5))
    run(ev, lambda: None, 7, 100)
    ev2 = Evaluator(ArealEvaluatorConfig(freq_steps=5))
    ev2.load_state_dict(ev.state_dict())
    assert [g for g in range(7, 20) if ev2.evaluate(lambda: None, 0, g, g)] == [9, 14, 19]


@pytest.mark.parametrize("bad", [1.5, "3", None, True])
def test_non_integer_step_is_a_value_error(bad):
    ev = Evaluator(ArealEvaluatorConfig(freq_steps=1))
    with pytest.raises(ValueError, match="global_step"):
        ev.evaluate(lambda: None, 0, 0, bad)


def test_freq_epochs_needs_steps_per_epoch():
    with pytest.raises(ValueError, match="steps_per_epoch"):
        Evaluator(ArealEvaluatorConfig(freq_epochs=1))


@pytest.mark.parametrize("ret,match", [({"acc": [[[1, 0]], [[0, 1]]]}, "acc"), ({"acc": "high"}, "acc"),
                                       ({"acc": object()}, "acc"), ([1, 2, 3], "mapping"),
                                       ("accuracy: 0.8", "mapping")])  # (a string was kept as raw, "a success")
def test_wrong_shape_from_evaluate_fn_is_a_failed_evaluation_naming_the_metric(ret, match, caplog):
    ev = Evaluator(ArealEvaluatorConfig(freq_steps=1))
    with caplog.at_level("ERROR"):
        assert ev.evaluate(lambda: ret, 0, 0, 0) is None  # the drop-in's on_error is skip: training goes on
    assert "TypeError" in caplog.text and match in caplog.text


@pytest.mark.parametrize("ret", [{"acc": []}, {"acc": [], "loss": np.array([]), "tokens": 512.0},
                                 {"acc": np.zeros((0, 4))}, {"acc:answers": [], "acc:reference": []},
                                 {"acc:answers": np.zeros((0, 4), dtype=object), "acc:reference": [], "x": []}])
def test_an_empty_list_for_a_metric_is_a_failed_evaluation_not_a_nan_result(ret, caplog):
    """It read as a NaN result (n = 0), which the eval detectors took for a collapse; a NaN value stays data, and
    one empty metric beside others with values is a result (a subset the sample drew no item of; AReaL's rewards
    when every trajectory was rejected, beside ``rejected``)."""
    ev = Evaluator(ArealEvaluatorConfig(freq_steps=1))
    with caplog.at_level("ERROR"):
        assert ev.evaluate(lambda: ret, 0, 0, 0) is None
    assert "returned no value for 'acc" in caplog.text and "at step 0" in caplog.text
    # (an empty 0 x k array, or empty NAME:answers, read as n = 0 as well)
    assert math.isnan(ev.evaluate(lambda: {"acc": [math.nan]}, 0, 1, 1).metrics["acc"].mean)
    result = ev.evaluate(lambda: {"reward": [], "rejected": [1.0, 1.0]}, 0, 2, 2)
    assert result.metrics["rejected"].mean == 1.0 and result.metrics["reward"].n == 0
    result = ev.evaluate(lambda: {"acc": np.zeros((0, 4)), "rejected": [1.0]}, 0, 3, 3)
    assert result.metrics["rejected"].n == 1 and result.metrics["acc"].n == 0
    with pytest.raises(ValueError, match="'acc'.*the whole eval set"):
        Evaluator(load_config(overrides=["trigger.freq_steps=1", "evaluation.on_error=raise"])).evaluate(
            lambda: {"acc": []}, 0, 0, 0)


def test_a_rank_handed_no_items_may_return_empty_lists():
    from adaptive_eval.evaluators import run_evaluation_outcome

    def fn(request):
        return {"acc": [1.0] * len(request.indices(1))}  # one item in the set: rank 1 of 2 holds none

    outcome = run_evaluation_outcome(fn, EvalRequest(step=3, sample_size=None, seed=0, reason="x", rank=1,
                                                     world_size=2), local=True)
    assert outcome.error is None and outcome.result.metrics["acc"].n == 0


def test_eval_result_is_plain_data():
    r = EvalResult(step=1, sample_size=None, reason="x", seconds=0.1)
    assert r.to_dict()["metrics"] == {} and math.isfinite(r.seconds)


def test_a_bare_0d_tensor_is_a_number_and_a_meta_tensor_a_failed_evaluation(caplog):
    """A bare float was kept as raw, a 0-d tensor a TypeError; a meta tensor escaped as NotImplementedError."""
    ev = Evaluator(ArealEvaluatorConfig(freq_steps=1))
    assert ev.evaluate(lambda: torch.tensor(0.75), 0, 0, 0).raw == 0.75
    assert ev.evaluate(lambda: np.float32(0.5), 0, 1, 1).raw == 0.5
    with caplog.at_level("ERROR"):
        assert ev.evaluate(lambda: {"acc": torch.ones(3, device="meta")}, 0, 2, 2) is None
    assert "cannot be read: NotImplementedError" in caplog.text


def test_aReaLs_call_with_a_finetune_spec_says_which_evaluator_takes_it():
    """Evaluator(config.evaluator, ft_spec), as AReaL calls its own, said only "steps_per_epoch must be an
    integer, got FinetuneSpec(...)" (found by a new-user probe).  AReaL's own FinetuneSpec."""
    import areal_code

    areal = areal_code.load()
    if areal is None:
        pytest.skip("AReaL's package is not installed")
    spec = areal.FinetuneSpec(total_train_epochs=1, dataset_size=100, train_batch_size=10)
    with pytest.raises(ValueError, match=r"steps_per_epoch must be an integer, got .*FinetuneSpec\(.*\) \(AReaL's "
                                         r"FinetuneSpec\? pass steps_per_epoch=ft_spec\.steps_per_epoch, or use "
                                         r"adaptive_eval\.integrations\.areal\.Evaluator\(config, ft_spec\)"):
        Evaluator(load_config("areal"), spec)
    assert Evaluator(load_config("areal"), spec.steps_per_epoch).steps_per_epoch == 10


def test_a_dict_config_is_read_and_a_misspelt_one_is_an_error():
    """Evaluator({"freq_steps": 5}) read every frequency as None through getattr and never evaluated, silently; so
    did a misspelt attribute (found by a new-user probe)."""
    import types

    def due(config):
        ev = Evaluator(config)
        return [g for g in range(12) if ev.evaluate(lambda: {"acc": [1.0]}, 0, g, g) is not None]

    assert due({"freq_steps": 5}) == due({"trigger": {"freq_steps": 5}}) == [4, 9]
    assert due(types.SimpleNamespace(freq_epochs=None, freq_steps=5, freq_secs=None)) == [4, 9]
    with pytest.raises(ValueError, match=r"unknown key 'freq_step' \(did you mean 'freq_steps'\?\)"):
        Evaluator({"freq_step": 5})
    with pytest.raises(ValueError, match=r"none of freq_epochs, freq_steps, freq_secs .*did you mean freq_steps\?"):
        Evaluator(types.SimpleNamespace(freq_step=5))
    with pytest.raises(ValueError, match="trigger.freq_steps"):  # a whole config as a dict: checked as load_config
        Evaluator({"trigger": {"freq_steps": "x"}})
    with pytest.raises(ValueError, match="has none of freq_epochs, freq_steps, freq_secs: it would never evaluate"):
        Evaluator({})
    # ... and read whole, not only its trigger (found in review: on_error raise read as skip)
    ev = Evaluator({"trigger": {"freq_steps": 1}, "evaluation": {"on_error": "raise", "sample_size": 64}})
    with pytest.raises(RuntimeError, match="grader down"):
        ev.evaluate(lambda: (_ for _ in ()).throw(RuntimeError("grader down")), 0, 0, 0)
    assert ev.evaluate(lambda r: {"acc": [1.0] * len(r.indices(100))}, 0, 1, 1).metrics["acc"].n == 64


def test_items_whose_answer_lists_are_all_empty_say_so(caplog):
    """[[], [], []] (three items, no answer) read "k=1 (evaluation.pass_at_k) is larger than the samples returned
    for every item": a failed evaluation that blamed a setting the user never set."""
    ev = Evaluator(ArealEvaluatorConfig(freq_steps=1))
    with caplog.at_level("ERROR"):
        assert ev.evaluate(lambda: {"acc": [[], [], []]}, 0, 0, 0) is None
    assert "metric 'acc': every item's list of answers is empty (3 items)" in caplog.text
    assert "evaluation.pass_at_k" not in caplog.text


def test_per_item_zero_d_tensors_and_arrays_are_per_item_numbers_as_in_a_suite():
    """[pred == y for ...] scored item by item in torch (0-d tensors, with grad or bool) or numpy (0-d arrays)
    failed every evaluation: "a number where the other items have a list of samples" (a new user's probe)."""
    from adaptive_eval import AdaptiveEvaluator

    w = torch.tensor(1.0, requires_grad=True)
    cases = {"float": lambda n: [torch.tensor(float(i % 2)) for i in range(n)],
             "bool": lambda n: [torch.tensor(i % 2 == 0) for i in range(n)],
             "grad": lambda n: [w * (i % 2) for i in range(n)],
             "numpy": lambda n: [np.array(float(i % 2)) for i in range(n)]}
    for overrides, key in (([], "acc"), (["evaluation.suites.s.size=10"], "s/acc")):
        for name, make in cases.items():
            ev = AdaptiveEvaluator.from_config(load_config(overrides=["trigger.freq_steps=1", *overrides]),
                                               clock=lambda: 0.0)
            errors = []
            ev.add_listener(lambda e: errors.append(e) if e["kind"] == "error" else None)
            r = ev.evaluate(lambda req: {key: make(10) if overrides else make(len(req.indices(10)))}, 0, 0, 0)
            assert not errors and (r.metrics[key].mean, r.metrics[key].n) == (0.5, 10), (name, overrides)


def test_settings_that_did_nothing_or_read_nonsense_are_said(caplog):
    """A new user's probe: a metric declared a proportion with values outside [0, 1] read the interval (3.65, 1.0);
    suite_aggregate's symmetric interval left [0, 1] (0.9875 [0.950, 1.026]) and counted a suite of weight 0 (its
    interval was not that of the one suite that weighs); metric_kinds and aggregations naming a metric never
    returned did nothing without a word; add_listener took a string, to fail at the first event; suite_aggregate
    without suites was taken."""
    import logging

    from adaptive_eval import AdaptiveEvaluator
    from adaptive_eval.config import ConfigError

    def run(overrides, fn):
        cfg = load_config(overrides=["evaluation.precision=none", "trigger.freq_steps=1", *overrides])
        ev = AdaptiveEvaluator.from_config(cfg, total_steps=3)
        ev.observe({"train/loss": 1.0}, 0)
        result = ev.evaluate(fn, 0, 0, 0)
        ev.close()
        return ev, result

    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        ev, result = run(["evaluation.metric_kinds={score: proportion}"], lambda req: {"score": [3.0, 5.0, 0.5]})
    assert result is None and ev.summary()["eval_errors"] == 1
    assert "metric 'score' is declared a proportion (evaluation.metric_kinds) but has the value 3" in caplog.text
    from adaptive_eval.stats import summarize_outputs
    from adaptive_eval.suites import weighted_aggregate
    from adaptive_eval.types import MetricSummary

    with pytest.raises(ValueError, match="declared a proportion"):  # items x answers too (review)
        summarize_outputs({"score": [[3, 5], [0.5, 1]]}, None, kinds={"score": "proportion"})
    agg = weighted_aggregate({"a/acc": MetricSummary(0.5, 100, (0.4, 0.6)),
                              "b/acc": MetricSummary(math.nan, 0, (math.nan, math.nan))},
                             {"a": {"weight": 1.0}, "b": {"weight": 0.0}}, "all")["all/acc"]
    assert (agg.mean, agg.n, agg.ci) == (0.5, 100, (0.4, 0.6))  # (a weight-0 suite's NaN made the mean NaN)
    suites = ["evaluation.suites={math: {size: 40, weight: 1}, gsm: {size: 40, weight: 0}}",
              "evaluation.suite_aggregate=all", "evaluation.metric=all/acc", "policy.sample_size.enabled=false"]
    for math_acc, gsm_acc in ((1.0, 0.975), (0.0, 0.025)):
        _, result = run(suites, lambda req: {
            "math/acc": [math_acc] * len(req.suites["math"].indices),
            "gsm/acc": [1.0 if i % 40 else 0.0 for i in range(len(req.suites["gsm"].indices))]
            if gsm_acc > 0.5 else [0.0 if i % 40 else 1.0 for i in range(len(req.suites["gsm"].indices))]})
        agg, own = result["all/acc"], result["math/acc"]
        assert (agg.mean, agg.n) == (own.mean, 40) and agg.ci == pytest.approx(own.ci)
        assert 0.0 <= agg.ci[0] <= agg.ci[1] <= 1.0
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        run(["evaluation.metric_kinds={acuracy: mean}", "evaluation.aggregations={rewrad: [p90]}"],
            lambda req: {"accuracy": [1.0, 0.0] * 10, "reward": list(range(20))})
    assert ("evaluation.metric_kinds.acuracy: no metric 'acuracy' was returned (did you mean 'accuracy'?)"
            in caplog.text)
    assert "evaluation.aggregations.rewrad: no metric 'rewrad' was returned (did you mean 'reward'?)" in caplog.text
    # summary() counts the answers scored beside the problems (its "samples" counted problems alone)
    ev, _ = run(["evaluation.suites={a: {size: 20, samples_per_item: 4}, b: {size: 10}}",
                 "policy.sample_size.enabled=false"],
                lambda req: {"a/acc": np.ones((len(req.suites["a"].indices), 4)),
                             "b/acc": [1.0] * len(req.suites["b"].indices)})
    assert (ev.summary()["samples"], ev.summary()["answers"]) == (30, 90)
    with pytest.raises(TypeError, match="add_listener takes a function"):
        AdaptiveEvaluator.from_config(load_config()).add_listener("print")
    with pytest.raises(ConfigError, match="evaluation.suite_aggregate: 'all' is the mean over evaluation.suites"):
        load_config(overrides=["evaluation.suite_aggregate=all"])


def test_values_gathered_from_every_rank_fail_the_evaluation_naming_the_count(caplog):
    """A new user's accelerate loop: evaluate_fn gathered its per-item values across ranks (gather_for_metrics), so
    each rank returned every rank's values: n doubled and the interval too narrow, silently.  In a group, as many
    values as every rank's items is now a failed evaluation that says why; elsewhere more values than items handed
    (k answers flattened, a probe set beside the sample) are said once, not refused (a review); an adapter's several
    eval sets (indices asked once per set, the last set's the smaller) say nothing."""
    import logging

    from adaptive_eval.evaluators import _summaries

    request = EvalRequest(step=4, sample_size=50, seed=0, reason="trigger:steps", rank=0, world_size=2)
    mine = request.indices(1000)
    assert len(mine) == 25
    with pytest.raises(ValueError, match=r"returned 50 values for 'acc' at step 4 on rank 0 of 2, every rank's items, "
                                         r"but request.indices handed this rank 25"):
        _summaries({"acc": [1.0, 0.0] * 25}, request, None, 0.95)

    values = [1.0, 0.0] * 500

    def flattened(request):  # 4 answers per item, flattened
        # (a name of its own: said once a process)
        return {"flat_acc": [values[i] for i in request.indices(len(values)) for _ in range(4)]}

    def two_sets(request):
        a = [values[i] for i in request.indices(len(values))]
        b = [values[i] for i in request.indices(10)]
        return {"a_acc": a, "b_acc": b}

    for fn, expected in ((flattened, {"flat_acc": 200}), (two_sets, {"a_acc": 50, "b_acc": 10})):
        ev = AdaptiveEvaluator.from_config(load_config(overrides=[
            "evaluation.on_error=raise", "evaluation.sample_size=50", "policy.sample_size.enabled=false",
            "trigger.freq_steps=5"]), total_steps=40)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
            for g in range(5):
                ev.evaluate(fn, 0, g, g)
        assert {k: m.n for k, m in ev.history[-1].metrics.items()} == expected
        said = [r.getMessage() for r in caplog.records if "values for" in r.getMessage()]
        assert said == ([] if fn is two_sets else [
            "evaluate_fn returned 200 values for 'flat_acc' at step 4 for the 50 items request.indices handed: each "
            "value counts as one item (n 200); if they are k answers per item, return them items x k (a 2-D value) so "
            "that the item is the interval's unit (said once per metric)"])


def test_a_note_said_once_is_said_once_per_evaluator_not_once_per_process(caplog):
    """A new user's probe (two tasks' evaluators, a sweep's trials in one process): the notes said once were keyed
    by the metric's name for the whole process, so a second evaluator with the same mistake (a grader returning
    None, k answers flattened) was told nothing, and its k answers counted as items.  Once per evaluator now."""
    import logging

    from adaptive_eval import AdaptiveEvaluator, load_config

    def run():
        ev = AdaptiveEvaluator.from_config(load_config("areal", ["trigger.freq_steps=1"]))
        for g in range(3):
            ev.evaluate(lambda req: {"acc": [1.0, 0.0], "judge": None}, 0, g, g)
        return ev

    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        run(), run()
    assert caplog.text.count("evaluate_fn returned None for 'judge'") == 2


def test_a_watched_or_ignored_stream_never_observed_is_said_with_the_nearest_name(caplog):
    """``streams.watch`` / ``streams.ignore`` naming a stream never observed (a typo): the stream it meant ran the
    default detectors, or stayed watched, without a word (a probe).  Said once, at close() (at the first evaluation,
    a stream logged later read as missing: a review)."""
    import logging

    cfg = load_config(overrides=["evaluation.precision=none", "trigger.freq_steps=2",
                                 "streams.watch={train/rewrad: [{type: cusum, threshold: 3}], "
                                 "train/grad_norm: [{type: cusum}]}",
                                 "streams.ignore=[train/los, train/kl]"])
    ev = AdaptiveEvaluator.from_config(cfg, total_steps=10, clock=lambda: 0.0)
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        for step in range(10):
            ev.observe({"train/reward": 0.5, "train/loss": 1.0, "train/kl": 0.1}, step)
            if step == 5:
                ev.observe({"train/grad_norm": 1.0}, step)  # (first logged late: watched, not missing)
            ev.evaluate(lambda req: {"acc": [1.0, 0.0]}, 0, step, step)
        assert not [r for r in caplog.records if "streams." in r.getMessage()]
        ev.close()
        ev.close()
    said = [r.getMessage() for r in caplog.records if "streams." in r.getMessage()]
    assert len(said) == 1 and said[0].startswith(
        "streams.watch: 'train/rewrad' (did you mean 'train/reward'?); streams.ignore: 'train/los' (did you mean "
        "'train/loss'?): no such stream observed in this run (up to step 9;")
    assert "'train/kl'" not in said[0].partition("observed:")[0]  # (ignored as named: nothing to say)


def test_an_explicit_metric_that_reads_lower_is_better_tracked_as_higher_is_better_is_said(caplog):
    """Found by a probe of the HF adapter: evaluation.metric: eval_loss with higher_is_better left true picked the
    highest loss as the best checkpoint, unsaid (only a metric the evaluator picked itself was warned of)."""
    import logging

    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        AdaptiveEvaluator.from_config(load_config(overrides=["evaluation.metric=eval_loss"])).close()
        AdaptiveEvaluator.from_config(load_config(overrides=["evaluation.metric=eval_loss",
                                                             "evaluation.higher_is_better=false"])).close()
        AdaptiveEvaluator.from_config(load_config(overrides=["evaluation.metric=accuracy"])).close()
    said = [r.getMessage() for r in caplog.records if "reads like a" in r.getMessage()]
    assert said == ["evaluation.metric 'eval_loss' reads like a loss, yet evaluation.higher_is_better is true: a rise "
                    "reads as improving, the best checkpoint is its highest; set evaluation.higher_is_better: false "
                    "if lower is better"]


@pytest.mark.parametrize("bad", [math.inf, None])
def test_a_clock_reading_that_is_no_finite_number_reads_as_the_last_good_one_said_once(bad, caplog):
    """A probe: one inf from an injected clock switched the time trigger off for the rest of the run (evaluations at
    3, 6, 7, 59 where every 3rd step was due), and None raised a TypeError from inside evaluate()."""
    import logging

    from adaptive_eval import AdaptiveEvaluator, load_config

    t, now = [0.0], [-1]
    ev = AdaptiveEvaluator.from_config(load_config(overrides=["trigger.freq_steps=null", "trigger.freq_secs=30",
                                                              "policy.interval.enabled=false"]), total_steps=60,
                                       clock=lambda: bad if now[0] == 7 else t[0])
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        for step in range(60):
            t[0], now[0] = t[0] + 10.0, step
            ev.observe({"train/loss": 1.0}, step)
            ev.evaluate(lambda: {"acc": [1.0, 0.0] * 10}, 0, step, step)
    ev.close()
    steps = [r.step for r in ev.history]
    assert steps == list(range(2, 60, 3))  # (inf: 2, 5, 8, 59)
    said = [r.getMessage() for r in caplog.records if "clock= returned" in r.getMessage()]
    assert len(said) == 1 and "last finite reading" in said[0]


def test_a_clock_set_back_counts_on_from_its_last_reading_said_once(caplog):
    """A probe: a clock set back below the run's start (a wall clock corrected) made the time trigger and the budget
    evaluate no more for the rest of the run, and one set back during an evaluation gave it -100 s, read by the
    budget as free evaluation; nothing was said."""
    import logging

    from adaptive_eval import AdaptiveEvaluator, load_config

    t = [1000.0]
    ev = AdaptiveEvaluator.from_config(load_config(overrides=["trigger.freq_steps=null", "trigger.freq_secs=30",
                                                              "policy.interval.enabled=false"]), total_steps=60,
                                       clock=lambda: t[0])

    def evaluate_fn():
        t[0] -= 100.0 if step == 20 else -1.0  # (set back during the evaluation of step 20)
        return {"acc": [1.0, 0.0] * 10}

    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        for step in range(60):
            t[0] += 10.0 if step != 40 else -5000.0  # (set back below the start before step 40)
            ev.observe({"train/loss": 1.0}, step)
            ev.evaluate(evaluate_fn, 0, step, step)
    ev.close()
    assert all(r.seconds >= 0 for r in ev.history)
    steps = [r.step for r in ev.history]
    assert steps[-1] == 59 and max(b - a for a, b in zip(steps, steps[1:])) <= 4, steps
    said = [r.getMessage() for r in caplog.records if "clock= went back" in r.getMessage()]
    assert len(said) == 1 and "counts on from its last reading" in said[0]


def test_the_drop_in_evaluator_says_it_does_not_read_suites_or_asynchronous():
    """A probe: Evaluator read sample_size, pass_at_k and aggregations from a config with evaluation.suites and
    evaluation.asynchronous, and ignored those two without a word (request.suites empty, the results {})."""
    import warnings

    from adaptive_eval import load_config

    with pytest.warns(RuntimeWarning, match=r"Evaluator, the plain schedule, does not read evaluation\.suites or "
                                            r"evaluation\.asynchronous \(ignored here: request\.suites is empty\); "
                                            r"AdaptiveEvaluator\.from_config\(config\) does"):
        Evaluator(load_config(overrides=["evaluation.suites={s: {size: 4}}", "evaluation.asynchronous=true"]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (the packaged defaults: neither)
        Evaluator(load_config())

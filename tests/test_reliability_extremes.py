"""Huge, tiny and badly conditioned values are data: never an exception, and never a blind detector."""

import math
import random
import warnings

import numpy as np
import pytest

from adaptive_eval import AdaptiveEvaluator, load_config
from adaptive_eval.detectors import available, make_detector
from adaptive_eval.stats import mean_sample_size, summarize


def test_huge_finite_values_never_raise_in_observe_default_preset():
    # train/ppl = exp(loss) of a diverging run: 1e160 and beyond.
    ev = AdaptiveEvaluator.from_config(load_config())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nor a numpy overflow warning (an error under -W error)
        for g in range(400):
            ev.observe({"x": 1e200, "train/ppl": math.exp(min(g, 700)), "alt": 1e308 if g % 2 else -1e308,
                        "loss": 1.0 if g < 100 else 1e300}, g)
            ev.evaluate(lambda: None, 0, g, g)
    assert ev.summary()["alarms"] >= 1


@pytest.mark.parametrize("kind", ["cusum", "page_hinkley", "bocpd", "kswin", "window_test", "adwin"])
def test_detectors_decide_alike_on_values_scaled_to_1e180_or_1e_minus_30_or_offset_by_1e11(kind):
    """A scale-free detector gives the same alarms on x and on x * 2**600 (about 4e180): huge is not blind.  Nor
    is tiny, nor far from 0: with a constant's scale floored at 1e-9 in absolute units (1e-9 x the level), a spread
    of 1e-13 (x * 2**-40) or 0.1 about 1.4e11 (x + 2**37) read as a constant's, and every detector was blind.  (The
    moment-based detectors hold down to spreads of about 1e-40; window_test's ranks to any: at 2**-600 its split
    of an alarm underflowed and it alarmed at every step after the first, found by a probe.)"""
    rng = random.Random(3)
    base = ([rng.gauss(1.0, 0.1) for _ in range(300)] + [rng.gauss(1.5, 0.1) for _ in range(100)]
            + [rng.gauss(1.0, 0.1) for _ in range(300)])
    runs = []
    for factor in (1.0, 2.0**600, 2.0**1000, 2.0**-40, 2.0**-100, *([2.0**-600] if kind == "window_test" else [])):
        det = make_detector({"type": kind})
        runs.append([(a.step, a.direction, a.location) for g, v in enumerate(base)
                     if (a := det.update(v * factor, g)) is not None])
    assert runs[0] and all(r == runs[0] for r in runs), runs
    det = make_detector({"type": kind})  # (not exact: the offset rounds each value to 2**-15)
    offset = [(a.step, a.direction) for g, v in enumerate(base) if (a := det.update(v + 2.0**37, g)) is not None]
    assert offset == [(step, d) for step, d, _ in runs[0]]


@pytest.mark.parametrize("kind", sorted(available()))
def test_every_detector_takes_extreme_finite_values(kind):
    patterns = [lambda g: 1e200, lambda g: 1e308 if g % 2 else -1e308, lambda g: 1e150 * g,
                lambda g: 1.0 if g < 40 else 1e300, lambda g: 5e-324 * (g % 3),
                lambda g: [1e308, -1e308, 0.0, 1e-300, 1e200][g % 5], lambda g: 1.7976931348623157e308]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for pattern in patterns:
            det = make_detector({"type": kind})
            for g in range(300):
                det.update(pattern(g), g)
            det.load_state_dict(det.state_dict())


def test_sample_size_for_a_huge_std_or_a_tiny_target_is_capped_not_an_overflow():
    assert mean_sample_size(1e153, 0.05) == 1 << 40
    assert mean_sample_size(1.0, 1e-160) == 1 << 40
    assert mean_sample_size(1.0, 0.1) == 385
    cfg = load_config(overrides=["trigger.freq_steps=1", "policy.sample_size.target_half_width=1e-160"])
    ev = AdaptiveEvaluator.from_config(cfg)
    sizes = []
    for g in range(5):
        r = ev.evaluate(lambda req: {"ppl": np.linspace(1, 1e153, len(req.indices(10_000)))}, 0, g, g)
        if r is not None:
            sizes.append(r.sample_size)
    assert sizes and max(sizes) <= cfg.policy.sample_size.max


@pytest.mark.parametrize("offset", [0.0, 1e8, 1e9, 1e12])
def test_the_interval_of_values_far_from_zero_is_computed_stably(offset):
    """total_sq - n*mean^2 cancels: 1e9 + N(0,1) over 256 values gave std 0 (a zero-width interval)."""
    from adaptive_eval.stats import summarize, summarize_rows

    x = offset + np.random.default_rng(0).normal(0.0, 1.0, 256)
    s = summarize(x)
    assert s.std == pytest.approx(np.std(x, ddof=1), rel=1e-6)
    from scipy.stats import t

    assert s.ci[1] - s.ci[0] == pytest.approx(2 * t.ppf(0.975, 255) * np.std(x, ddof=1) / 16, rel=1e-3)
    ev = AdaptiveEvaluator.from_config(load_config(overrides=["trigger.freq_steps=1"]))
    r = ev.evaluate(lambda req: {"reward": x[req.indices(256)]}, 0, 0, 0)
    assert r["reward"].std > 0.5 and r["reward"].ci[1] > r["reward"].ci[0]
    rows = summarize_rows("m", "m", np.stack([x, x + 0.5], axis=1), np.full(256, 2), (1,))
    assert rows["m"].std == pytest.approx(np.std(x + 0.25, ddof=1), rel=1e-6)


@pytest.mark.parametrize("name", ["cusum", "page_hinkley", "adwin", "kswin", "bocpd", "spike", "window_test"])
@pytest.mark.parametrize("big", [1e154, 1e200, -1e300])
def test_every_detector_sees_an_explosion_to_huge_values(name, big):
    """CUSUM (the default's) learned a jump to 1e200 as its new scale while self-starting (t * t overflowed:
    z = 0) and never alarmed; river's ADWIN squared values above ~1e154 into inf and went blind."""
    import random
    import warnings

    from adaptive_eval.detectors import make_detector

    det = make_detector({"type": name}, stream="train/loss")
    rng = random.Random(0)
    alarms = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow warnings either
        for step in range(400):
            alarm = det.update(rng.gauss(1.0, 0.1) * (big if step >= 300 else 1.0), step)
            if alarm is not None:
                alarms.append(alarm)
    assert alarms and 300 <= alarms[0].step <= 320
    if alarms[0].direction is not None:  # KSWIN reports no direction
        assert alarms[0].direction == ("up" if big > 0 else "down")


@pytest.mark.parametrize("value", [10**400, [10**400, 1], [1, -(10**400)], [[10**400, 1], [0, 1]],
                                   np.array([10**400, 2], dtype=object)])
def test_an_int_beyond_float_range_from_evaluate_fn_is_an_infinite_value(value):
    """It raised OverflowError out of evaluate() (numpy cannot convert it); observe() already took it as inf."""
    ev = AdaptiveEvaluator.from_config(load_config(overrides=["trigger.freq_steps=1", "policy.budget.enabled=false"]))
    r = ev.evaluate(lambda req: {"acc": value}, 0, 0, 0)
    assert r is not None and math.isinf(r["acc"].mean)
    ev.observe({"train/loss": 10**400}, 1)  # and on the per-step side


def test_huge_per_item_values_at_several_evaluations_raise_no_warning_into_the_training_step():
    """A probe (AReaL drop-in, pytest's filterwarnings=error): per-item rewards of +-1e308 made the second evaluation's
    comparison with the first (scipy's Welch test) warn "overflow encountered in square", raised out of evaluate()."""
    import warnings

    ev = AdaptiveEvaluator.from_config(load_config(overrides=["trigger.freq_steps=5", "policy.budget.enabled=false"]),
                                       total_steps=20)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        results = [r for g in range(20) if (r := ev.evaluate(lambda req: {"reward": [1e308, -1e308, 1e308, 5.0]},
                                                             0, g, g)) is not None]
    assert len(results) >= 3 and ev.summary()["eval_errors"] == 0


@pytest.mark.parametrize("suites", [False, True])
def test_huge_items_x_answers_values_at_two_evaluations_are_paired_without_raising(suites):
    """A probe (AReaL call site): items x answers of +-1e308 at the second evaluation made the paired difference
    with the first (math.fsum of the per-item differences) raise OverflowError into the training step."""
    over = ["trigger.freq_steps=5", "policy.budget.enabled=false"]
    if suites:
        over += ["evaluation.suites.math.size=50", "evaluation.suites.math.samples_per_item=2",
                 "evaluation.metric=math/reward"]
    ev = AdaptiveEvaluator.from_config(load_config(overrides=over), total_steps=20)

    def evaluate_fn(request):
        huge = request.step >= 9
        items = request.suites["math"].indices if suites else request.indices(50)
        return {"math/reward" if suites else "reward": [[1e308 if huge and i % 3 == 0 else 0.5,
                                                           -1e308 if huge and i % 3 == 1 else 0.4] for i in items]}

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        results = [r for g in range(20) if (r := ev.evaluate(evaluate_fn, 0, g, g)) is not None]
    assert len(results) >= 3 and ev.summary()["eval_errors"] == 0
    paired = [r.paired for r in results if r.step >= 9 and r.paired]
    assert paired and all(math.isfinite(p.n) and p.n > 0 for d in paired for p in d.values())


@pytest.mark.parametrize("value,mean", [(np.bool_(True), 1.0), (__import__("fractions").Fraction(1, 4), 0.25),
                                        (__import__("decimal").Decimal("0.5"), 0.5), (np.float16(0.5), 0.5)])
def test_any_real_scalar_is_a_metric_value(value, mean):
    """np.bool_, Fraction and Decimal were TypeErrors although bool and numpy floats were numbers."""
    ev = AdaptiveEvaluator.from_config(load_config(overrides=["trigger.freq_steps=1", "policy.budget.enabled=false"]))
    r = ev.evaluate(lambda req: {"acc": value}, 0, 0, 0)
    assert r["acc"].mean == mean and not r["acc"].per_sample


def test_finite_eval_values_whose_sum_overflows_have_a_finite_mean():
    """200 per-sample values of 1e306 summed to inf: the mean was inf and the interval NaN (a new user's
    evaluate_fn returning a diverging perplexity)."""
    ev = AdaptiveEvaluator.from_config(load_config(overrides=["trigger.freq_steps=1", "policy.budget.enabled=false"]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = ev.evaluate(lambda req: {"ppl": [1e306] * 200, "wide": [1e308, 5e307] * 100}, 0, 0, 0)
    assert r["ppl"].mean == 1e306 and r["ppl"].ci == (1e306, 1e306) and r["ppl"].std == 0.0
    assert r["wide"].mean == pytest.approx(7.5e307)
    # (its squared deviations overflow, its spread does not: the interval of the same values scaled down, scaled up)
    small = summarize([1e8, 5e7] * 100)
    assert r["wide"].std == pytest.approx(small.std * 1e300, rel=1e-9)
    assert r["wide"].ci == pytest.approx(tuple(c * 1e300 for c in small.ci), rel=1e-9)


def test_huge_per_sample_values_keep_their_interval():
    """Values near 1e160 (an eval perplexity of a diverging run): the squared deviations overflowed and the
    interval was NaN around a finite mean, so the policies sized on NaN (found by a new-user probe)."""
    small, huge = summarize([1.0, 3.0, 2.0, 2.5]), summarize([1e160, 3e160, 2e160, 2.5e160])
    assert huge.mean == pytest.approx(small.mean * 1e160)
    assert huge.std == pytest.approx(small.std * 1e160) and huge.ci == pytest.approx(tuple(c * 1e160 for c in small.ci))
    assert summarize([1e308, -1e308, 0.0]).ci == (-math.inf, math.inf)  # deviations beyond range: unbounded


def test_items_x_samples_values_whose_sum_overflows_have_a_finite_mean():
    """The same for a 2-D (items x samples) value: mean@k read inf (found in review)."""
    ev = AdaptiveEvaluator.from_config(load_config(overrides=["trigger.freq_steps=1", "policy.budget.enabled=false"]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = ev.evaluate(lambda req: {"ppl": np.full((200, 4), 1e306), "wide": [[1e308, 1e308], [5e307, 5e307]] * 100},
                        0, 0, 0)
    assert r["ppl"].mean == 1e306 and r["ppl"].ci == (1e306, 1e306)
    assert r["wide"].mean == pytest.approx(7.5e307)


def test_a_nan_among_per_item_values_is_skipped_and_counted_as_within_items_x_samples():
    """One NaN in a 1-D result (a grader that timed out on one item) made the whole evaluation NaN: a
    nonfinite eval alarm, an urgent evaluation at the largest size, and NaN at every later evaluation that
    had one.  Items x samples already skipped and counted them; now 1-D values do too, on one rank or sharded."""
    from adaptive_eval.distributed import combine_rank_summaries
    from adaptive_eval.stats import summarize

    ev = AdaptiveEvaluator.from_config(load_config(overrides=["trigger.freq_steps=5"]))
    alarms = []
    ev.add_listener(lambda e: alarms.append(e) if e["kind"] == "alarm" else None)
    for g in range(30):
        ev.observe({"train/loss": 1.0}, g)
        ev.evaluate(lambda: {"acc": [1.0, math.nan, 0.0, 1.0]}, 0, g, g)
    r = ev.history[0]["acc"]
    assert (r.mean, r.n, r.nan_count, r.binary) == (pytest.approx(2 / 3), 3, 1, True)
    assert ev.history[0].to_dict()["nan_count"] == {"acc": 1}
    assert not alarms and all(h["acc"].mean == pytest.approx(2 / 3) for h in ev.history)
    # All NaN is still a NaN result (the nonfinite eval alarm's case), counted.
    assert math.isnan(summarize([math.nan] * 3).mean) and summarize([math.nan] * 3).nan_count == 3
    # Shards: the counts add up, and the combined result is the unsharded one.
    combined, _, ns = combine_rank_summaries([{"acc": summarize([1.0, math.nan])},
                                              {"acc": summarize([math.nan, 0.0, 1.0])}])
    whole = summarize([1.0, math.nan, math.nan, 0.0, 1.0])
    assert (combined["acc"].mean, combined["acc"].n, combined["acc"].nan_count) == (whole.mean, 3, 2)
    assert combined["acc"].ci == pytest.approx(whole.ci) and ns["acc"] == [1, 2]


@pytest.mark.parametrize("name", ["bocpd", "cusum", "page_hinkley"])
def test_one_wild_huge_value_in_the_warm_up_does_not_blind_a_detector(name):
    """Found in review: BOCPD scaled its warm-up by the largest value, so one 1e160 among values near 1 put
    them at 1e-160, below the scale's floor, and a 3-sd shift 580 steps later was never seen."""
    rng = np.random.default_rng(0)
    base = np.r_[rng.normal(0, 1, 600), rng.normal(3, 1, 400)]
    wild = base.copy()
    wild[20] = 1e160

    def shift_seen(values):  # (an alarm at the wild value itself is fair: it is a change of a kind)
        det = make_detector({"type": name})
        return any(det.update(float(v), s) is not None and 600 <= s <= 620 for s, v in enumerate(values))

    assert shift_seen(base) and shift_seen(wild)


def test_best_and_worst_at_k_of_huge_values_or_many_answers_are_finite_numbers():
    """Found in review: best@2 of rewards near 1e308 read inf (and leaked overflow warnings), and with 1,100
    answers per item best@512 raised a raw OverflowError (C(1100, 512) is beyond float range), which failed
    the evaluation."""
    from adaptive_eval.stats import best_at_k, summarize_outputs

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = summarize_outputs({"r": np.array([[1e308, 1e308, -1e308, 5.0]] * 3)}, 3, pass_at_k=[2])
        assert out["r/best@2"].mean == pytest.approx(1e308 / 6 * 5)
        assert out["r/worst@2"].mean == pytest.approx(-1e308 / 3)
        values = np.random.default_rng(0).random(1100)
        assert best_at_k(values, 1) == pytest.approx(values.mean()) and best_at_k(values, 1100) == values.max()
        assert values.mean() < best_at_k(values, 512) < values.max()
        many = summarize_outputs({"r": np.random.default_rng(1).random((5, 1100))}, 5, pass_at_k=[512])
        assert 0.99 < many["r/best@512"].mean < 1.0


def test_shards_of_huge_values_combine_to_the_whole_ones_interval():
    """Values near 1e160 got their interval in one process but NaN once shards were combined (ranks), since the
    pooled squared deviations overflowed (found in review)."""
    from adaptive_eval.stats import combine

    x = np.array([1e160, 3e160, 2e160, 2.5e160, 1.5e160, 4e160, 0.5e160])
    whole, parts = summarize(x), combine([summarize(x[:3]), summarize(x[3:4]), summarize(x[4:])])
    assert all(math.isfinite(c) for c in whole.ci)
    assert parts.ci == pytest.approx(whole.ci, rel=1e-12) and parts.std == pytest.approx(whole.std, rel=1e-12)
    from adaptive_eval.distributed import combine_rank_summaries, summaries_to_wire  # (what ranks exchange)

    ranks = combine_rank_summaries([summaries_to_wire({"ppl": summarize(s)}) for s in (x[:3], x[3:4], x[4:])])[0]
    assert ranks["ppl"].ci == pytest.approx(whole.ci, rel=1e-12)

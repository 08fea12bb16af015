"""Shards combine into the interval of the whole set, also for values far from 0 (issue 15, item 10).

The raw sums ``sum x^2 - n mean^2`` cancel catastrophically for ``1e9 + N(0, 1)``: a zero-width interval.
Each shard's own two-pass deviations, pooled (Chan et al.), do not."""

import math

import numpy as np
import pytest

from adaptive_eval import AdaptiveEvaluator, load_config
from adaptive_eval.distributed import combine_rank_summaries, summaries_to_wire
from adaptive_eval.stats import combine, kurtosis_df, summarize, summarize_rows
from conftest import FakeClock
from dist_utils import run_ranks

ITEMS = 256


def values(offset):
    return offset + np.random.default_rng(0).normal(0.0, 1.0, ITEMS)


@pytest.mark.parametrize("offset", [0.0, 1e8, 1e9])
@pytest.mark.parametrize("cut", [1, 37, 128])
def test_shards_pool_to_the_whole_sets_std_and_interval(offset, cut):
    x = values(offset)
    whole = summarize(x)
    assert whole.std == pytest.approx(np.std(x, ddof=1), rel=1e-6)
    shards = [summarize(x[:cut]), summarize(x[cut:])]
    for got in (combine_rank_summaries([summaries_to_wire({"m": s}) for s in shards])[0]["m"], combine(shards)):
        assert got.std == pytest.approx(whole.std, rel=1e-6)
        assert got.ci == pytest.approx(whole.ci, rel=1e-12, abs=1e-6)
        assert got.ci[1] - got.ci[0] == pytest.approx(whole.ci[1] - whole.ci[0], rel=1e-5)
    # items x samples (clustered over items): the spread of the per-item means pools the same way
    rows = np.stack([x, x + 0.5], axis=1)
    whole_rows = summarize_rows("m", "m", rows, np.full(ITEMS, 2), (1,))["m"]
    parts = [summarize_rows("m", "m", rows[:cut], np.full(cut, 2), (1,))["m"],
             summarize_rows("m", "m", rows[cut:], np.full(ITEMS - cut, 2), (1,))["m"]]
    got = combine_rank_summaries([summaries_to_wire({"m": s}) for s in parts])[0]["m"]
    assert got.std == pytest.approx(whole_rows.std, rel=1e-6)
    assert got.ci[1] - got.ci[0] == pytest.approx(whole_rows.ci[1] - whole_rows.ci[0], rel=1e-5)


def test_a_shard_without_a_finite_spread_falls_back_to_the_raw_sums():
    big = summarize([1e200, -1e200, 3e200])  # squares overflow: std is inf or nan, the mean is finite
    small = summarize([1.0, 2.0])
    got = combine_rank_summaries([summaries_to_wire({"m": s}) for s in (big, small)])[0]["m"]
    assert got.n == 5 and np.isfinite(got.mean)  # data, not a crash


def _rank(rank, world):
    ev = AdaptiveEvaluator.from_config(load_config(overrides=["trigger.freq_steps=1", "policy.budget.enabled=false",
                                                              "policy.sample_size.enabled=false",
                                                              f"evaluation.sample_size={ITEMS}"]),
                                       clock=FakeClock())
    x = values(1e9)
    r = ev.evaluate(lambda req: {"reward": x[req.indices(ITEMS)]}, 0, 0, 0)
    s = r["reward"]
    return s.n, s.mean, s.std, s.ci


def test_two_gloo_ranks_report_the_single_process_interval_for_values_near_1e9():
    x = values(1e9)
    whole = summarize(x)
    got = run_ranks(_rank, world=2)
    assert got[0] == got[1]  # every rank holds the same combined result
    n, mean, std, ci = got[0]
    assert n == ITEMS and mean == pytest.approx(whole.mean, rel=1e-15)
    assert std == pytest.approx(whole.std, rel=1e-6) and std > 0.5  # was 0: a zero-width interval
    assert ci[1] - ci[0] == pytest.approx(whole.ci[1] - whole.ci[0], rel=1e-5)


def test_shards_far_apart_pool_without_overflowing():
    shards = [summarize([1e200, 1e200]), summarize([-1e200, -1e200])]
    got = combine_rank_summaries([summaries_to_wire({"m": s}) for s in shards])[0]["m"]
    assert got.n == 4 and got.mean == 0.0  # the pooled spread overflows to inf: data, not an OverflowError


from hypothesis import example, given, settings, strategies as st  # noqa: E402

_finite = st.floats(min_value=-10.0, max_value=10.0, allow_nan=False)  # a small spread far from 0


@settings(max_examples=150, deadline=None)
@given(offset=st.sampled_from([0.0, 1e3, 1e9]), shards=st.lists(st.lists(_finite, min_size=0, max_size=12),
                                                                 min_size=1, max_size=4))
@example(offset=0.0, shards=[[0.0, 0.0, 9.447738855481579e-134]])  # the squared spread underflows (found in CI)
def test_any_split_into_shards_gives_the_unsplit_std(offset, shards):
    flat = [offset + v for part in shards for v in part]
    if len(flat) < 2:
        return
    whole = summarize(flat)
    got = combine_rank_summaries([summaries_to_wire({"m": summarize([offset + v for v in part])})
                                  for part in shards])[0]["m"]
    assert got.n == whole.n
    assert got.std == pytest.approx(whole.std, rel=1e-6, abs=1e-6)


def test_a_spread_whose_square_underflows_keeps_its_degrees_of_freedom():
    # m2 ~ 6e-267: m2 * m2 is 0.0; the kurtosis ratio divided twice stays finite (ZeroDivisionError before)
    s = summarize([0.0, 0.0, 9.447738855481579e-134])
    assert s.n == 3 and s.ci[0] <= s.mean <= s.ci[1]
    assert kurtosis_df(3, 6e-267, 0.0) == 2


def pooled(parts):
    return combine_rank_summaries([summaries_to_wire({"m": summarize(p, kind="mean")}) for p in parts])[0]["m"]


def test_shards_give_the_degrees_of_freedom_and_interval_of_one_pass():
    # No excess kurtosis in one pass (m4 = 18 exactly); pooled from two shards, 18.000000000000004: the floor of
    # the degrees of freedom took one off and the interval was 1.08x wider than one process's (found in review)
    x = [1.0, 0.0, 0.0, 3.0, 1.0, 1.0]
    assert pooled([x[:3], x[3:]]).ci == pytest.approx(summarize(x, kind="mean").ci, rel=1e-12)
    # One huge value on a rank of its own beside 99,999 zeros: the pooling's products of counts overflowed where
    # one pass does not (m4 NaN, so n - 1 degrees of freedom and another interval)
    x = np.r_[np.zeros(99_999), 1e74]
    whole, got = summarize(x, kind="mean"), pooled([x[:-1], x[-1:]])
    assert math.isfinite(got.m4) and got.m4 == pytest.approx(whole.m4, rel=1e-9)
    assert got.ci == pytest.approx(whole.ci, rel=1e-9)

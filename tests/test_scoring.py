"""Honest scoring: a change counts as detected only when an evaluation's interval shows it."""

import math

import numpy as np
import pytest

from adaptive_eval import load_config
from adaptive_eval.replay import replay
from adaptive_eval.scoring import best_eval, confirmed_delay, confirmed_delays, detection_delay, pick_best
from adaptive_eval.synthetic import make_trace


def ev(step, mean, low, high, n=32):
    return {"step": step, "sample_size": n, "metrics": {"acc": mean}, "ci": {"acc": [low, high]}}


EVALS = [ev(0, 0.80, 0.70, 0.90), ev(8, 0.78, 0.68, 0.88), ev(12, 0.70, 0.50, 0.90), ev(15, 0.60, 0.55, 0.65),
         ev(30, 0.95, 0.90, 0.99)]


@pytest.mark.parametrize(("event", "kw", "expected"), [
    (10, {}, 5),                                   # pre-level 0.78 (step 8); step 12 too wide, step 15 shows it
    (10, {"direction": "down"}, 5),
    (10, {"direction": "up"}, 20),                 # only the rise at step 30 is above 0.78
    (10, {"pre_level": 0.6}, 20),                  # step 15 holds 0.6: no change from it; step 30 is above
    (8, {}, 7),                                    # the eval at the event step counts; pre-level from step 0
    (31, {}, None),                                # nothing after the event
    (0, {}, None),                                 # nothing measured before: nothing to compare with
    (0, {"pre_level": 0.3}, 0),
])
def test_confirmed_delay_table(event, kw, expected):
    assert confirmed_delay(EVALS, event, "acc", **kw) == expected


def test_score_run_also_scores_each_event_against_the_last_evaluation_before_it():
    """A sceptical review: scored against the true level before the event, a schedule whose last look before it was
    small gets the benefit a user without that truth does not; RunScore.delays_measured scores it as they can."""
    from adaptive_eval.scoring import score_run

    truth = [0.8] * 10 + [0.6] * 30
    evals = [ev(0, 0.8, 0.5, 1.0, n=8), ev(15, 0.6, 0.55, 0.65), ev(25, 0.6, 0.58, 0.62)]
    s = score_run(evals, steps=40, full_size=500, events=[10], truth=truth, metric="acc")
    assert s.delays == [5]  # (0.65 < the true 0.8 before)
    assert s.delays_measured == [None]  # (the only look before, 0.8 [0.5, 1.0], cannot tell 0.6 from it)
    assert score_run(evals, steps=40, full_size=500, events=[10], metric="acc").delays_measured == [None]


def test_small_eval_does_not_count_where_the_plain_delay_does():
    # detection_delay counts the 32-item eval at step 12 that cannot see the change; confirmed_delay does not.
    assert detection_delay(EVALS, 10) == 2
    assert confirmed_delay(EVALS, 10, "acc") == 5


def test_order_missing_and_nonfinite_intervals():
    shuffled = list(reversed(EVALS))
    assert confirmed_delay(shuffled, 10, "acc") == 5
    broken = [ev(0, 0.8, 0.7, 0.9), {"step": 11, "metrics": {"acc": 0.1}},             # no interval
              ev(12, 0.1, math.nan, 0.2), ev(13, float("nan"), 0.0, 0.2), {"step": 14, "metrics": {}}]
    assert confirmed_delay(broken, 10, "acc") == 3    # step 13's interval is finite: it counts
    with pytest.warns(RuntimeWarning, match="no evaluation measured 'other'"):
        assert confirmed_delay(broken, 10, "other") is None
    with pytest.raises(ValueError, match="direction"):
        confirmed_delay(EVALS, 10, "acc", direction="sideways")


def test_confirmed_delays_takes_steps_or_events():
    st = make_trace("collapse", steps=300, seed=1)
    assert confirmed_delays(EVALS, [10, 31], "acc") == [5, None]
    assert len(confirmed_delays(EVALS, st.events, "acc")) == 1


def test_a_replayed_collapse_is_confirmed_and_a_tiny_eval_is_not():
    st = make_trace("collapse", steps=400, seed=3)
    (event,) = st.events
    cfg = load_config("areal", ["trigger.freq_steps=10", "logging.tensorboard_dir=null"])
    big = replay(st.trace, cfg, seed=0).evals
    d = confirmed_delay(big, event.step, "accuracy", direction="down")
    assert d is not None and d <= 15
    # Two items an eval: every interval is too wide to exclude the pre-collapse level.
    tiny = replay(st.trace, load_config("areal", ["trigger.freq_steps=10", "evaluation.sample_size=2",
                                                  "logging.tensorboard_dir=null"]), seed=0).evals
    assert confirmed_delay(tiny, event.step, "accuracy", pre_level=float(st.truth[event.step - 1])) is None


def test_winners_curse_a_lucky_small_eval_is_not_picked():
    # Many 32-item evaluations of a flat 0.9 model plus one precise 512-item one; by the mean, the luckiest
    # small one wins (at 0.97 or more); the shrunk pick's estimate is near the truth and its interval holds it.
    import numpy as np

    from adaptive_eval.scoring import pick_best
    from adaptive_eval.stats import summarize

    rng = np.random.default_rng(0)
    evals = []
    for step in range(0, 400, 10):
        n = 512 if step == 200 else 32
        s = summarize((rng.random(n) < 0.9).astype(float))
        evals.append({"step": step, "sample_size": n, "metrics": {"acc": s.mean}, "ci": {"acc": list(s.ci)}})
    by_mean = pick_best(evals, "acc", by="mean")
    assert by_mean.eval["sample_size"] == 32 and by_mean.estimate >= 0.97
    pick = pick_best(evals, "acc")
    assert abs(pick.estimate - 0.9) < 0.03 and pick.interval[0] < 0.9 < pick.interval[1]


@pytest.mark.parametrize("truth", [0.03, 0.15, 0.5, 0.9])
def test_a_flat_runs_pick_is_not_pulled_towards_one_half(truth):
    """The smoother read each evaluation at its Wilson interval's midpoint, which is pulled towards 0.5
    (32 items at 0.1: ~0.14), and pooling 40 evaluations kept that bias: a run flat at 0.03 was estimated
    at 0.07 and its pick's interval never held 0.03 (0 of 200 runs); at 0.15 the bias was 0.028.  Measured
    means, weighed at the smoothed estimate, leave the selection's own small upward pull."""
    import numpy as np

    from adaptive_eval.scoring import pick_best
    from adaptive_eval.stats import summarize

    errors, covered = [], 0
    for seed in range(30):
        rng = np.random.default_rng(seed)
        evals = []
        for step in range(0, 400, 10):
            n = 512 if step == 200 else 32
            s = summarize((rng.random(n) < truth).astype(float))
            evals.append({"step": step, "sample_size": n, "metrics": {"acc": s.mean}, "ci": {"acc": list(s.ci)}})
        pick = pick_best(evals, "acc")
        errors.append(pick.estimate - truth)
        covered += pick.interval[0] <= truth <= pick.interval[1]
    assert abs(float(np.mean(errors))) < 0.015, np.mean(errors)
    assert covered >= 27


def test_shrinkage_does_not_smooth_over_a_collapse():
    from adaptive_eval.scoring import shrunk_estimates

    evals = [ev(s, 0.8, 0.7, 0.88) for s in range(0, 100, 10)] + [ev(s, 0.02, 0.0, 0.1) for s in range(100, 200, 10)]
    est = [round(e, 2) for _, e, _ in shrunk_estimates(evals, "acc")]
    assert est[9] > 0.75 and est[10] < 0.1


def test_peak_policy_remeasures_a_candidate_best_before_calling_it_best():
    from adaptive_eval.adaptive import AdaptiveEvaluator

    cfg = load_config(overrides=["trigger.freq_steps=10", "policy.peak.confirm_size=256", "policy.peak.confirm_steps=1", "policy.budget.enabled=false",
                                 "policy.interval.enabled=false", "streams.default=[]"])
    ev = AdaptiveEvaluator.from_config(cfg)
    level = {"v": 0.5}

    def evaluate(request):
        n = request.sample_size
        k = int(round(level["v"] * n))
        return {"acc": [1.0] * k + [0.0] * (n - k)}

    steps = []
    for g in range(40):
        level["v"] = 0.5 + 0.01 * g
        r = ev.evaluate(evaluate, 0, g, g)
        if r is not None:
            steps.append((g, r.sample_size, r.reason))
    # Step 9: a small scheduled eval beats nothing precise yet -> re-measured at step 10 with 256 items.
    assert steps[0][0] == 9 and steps[0][1] < 256
    assert steps[1] == (10, 256, "peak:confirm")


def test_an_alarm_driven_evaluation_starts_a_new_segment_so_a_partial_collapse_does_not_drag_the_peak_down():
    """A replay of the default preset on a synthetic collapse (tuning seed 3, ``collapse-s1437227251``): a rise
    to a plateau near 0.44 measured on a few evaluations, then an alarm two steps into the collapse measures the
    model half-way down (0.222: only 3.9 sd from what the noisy rise predicts, so not a break by itself).  Without
    the alarm as a segment start the smoother drags the last good checkpoint (step 643, true 0.444) down below
    a lucky early evaluation (step 276, true 0.372), which is then picked."""
    from adaptive_eval.scoring import shrunk_estimates

    rows = [(24, 50, 0.26, 0.159, 0.396), (80, 500, 0.29, 0.252, 0.331), (178, 500, 0.298, 0.26, 0.34),
            (276, 500, 0.412, 0.37, 0.456), (332, 500, 0.342, 0.302, 0.385), (360, 151, 0.338, 0.267, 0.416),
            (421, 150, 0.367, 0.294, 0.446), (532, 156, 0.404, 0.33, 0.482), (643, 161, 0.385, 0.313, 0.462),
            (675, 500, 0.222, 0.188, 0.26), (689, 500, 0.026, 0.015, 0.044), (702, 48, 0.042, 0.012, 0.14)]
    evals = [{**ev(s, m, lo, hi, n), "reason": "interval:relaxed"} for s, n, m, lo, hi in rows]
    alarmed = [{**e, "reason": "alarm:train/loss:cusum:up"} if e["step"] == 675 else e for e in evals]
    without = dict((e["step"], est) for e, est, _ in shrunk_estimates(evals, "acc"))
    with_alarm = dict((e["step"], est) for e, est, _ in shrunk_estimates(alarmed, "acc"))
    assert without[643] < 0.365 and max(without, key=without.get) == 276
    assert with_alarm[643] > 0.38 and abs(with_alarm[675] - 0.224) < 0.01
    assert max(with_alarm, key=with_alarm.get) in (532, 643)


def paired_ev(step, mean, low, high, diff_ci=None, n=32):
    e = ev(step, mean, low, high)
    if diff_ci is not None:
        e["paired"] = {"acc": {"diff": sum(diff_ci) / 2, "ci": list(diff_ci), "n": n}}
    return e


@pytest.mark.parametrize(("evals", "kw", "expected"), [
    # step 12's interval is too wide, but its paired difference on the items it shares with step 8 is below 0
    ([ev(8, 0.78, 0.68, 0.88), paired_ev(12, 0.70, 0.50, 0.90, (-0.12, -0.04))], {}, 2),
    ([ev(8, 0.78, 0.68, 0.88), paired_ev(12, 0.70, 0.50, 0.90, (-0.12, -0.04))], {"paired": False}, None),
    ([ev(8, 0.78, 0.68, 0.88), paired_ev(12, 0.70, 0.50, 0.90, (-0.12, -0.04))], {"direction": "up"}, None),
    ([ev(8, 0.78, 0.68, 0.88), paired_ev(12, 0.86, 0.66, 0.99, (0.02, 0.12))], {"direction": "up"}, 2),
    ([ev(8, 0.78, 0.68, 0.88), paired_ev(12, 0.70, 0.50, 0.90, (-0.12, 0.01))], {}, None),         # spans 0
    ([ev(8, 0.78, 0.68, 0.88), paired_ev(12, 0.70, 0.50, 0.90, (math.nan, -0.04))], {}, None),     # not finite
    ([paired_ev(12, 0.70, 0.50, 0.90, (-0.12, -0.04))], {}, None),     # paired with nothing measured here
    # 3 shared items that all flipped: a t interval of no width is no test; nor are 9 items
    ([ev(8, 0.78, 0.68, 0.88), paired_ev(12, 0.70, 0.50, 0.90, (-1.0, -1.0), n=3)], {}, None),
    ([ev(8, 0.78, 0.68, 0.88), paired_ev(12, 0.70, 0.50, 0.90, (-0.12, -0.04), n=9)], {}, None),
    # either way (no direction): a paired move back towards the level before does not count
    ([ev(8, 0.78, 0.68, 0.88), paired_ev(12, 0.70, 0.50, 0.90, (0.02, 0.12))], {}, None),
    ([ev(8, 0.78, 0.68, 0.88), paired_ev(12, 0.86, 0.66, 0.99, (0.02, 0.12))], {}, 2),
    # a significant move the same way after the event, paired with an evaluation after it, shows it too
    ([ev(8, 0.78, 0.68, 0.88), ev(11, 0.74, 0.55, 0.90), paired_ev(14, 0.70, 0.50, 0.90, (-0.10, -0.01))],
     {"pre_level": 0.78}, 4),
])
def test_a_paired_difference_on_shared_items_confirms_too(evals, kw, expected):
    assert confirmed_delay(evals, 10, "acc", **kw) == expected


def test_on_items_of_different_difficulty_the_paired_test_confirms_what_the_interval_cannot():
    """A real replay of a 200-item suite (half the items solved almost always, half almost never): from step 60
    the easy items slip to 0.90, the suite's accuracy from 0.50 to 0.45.  A whole-set interval (+-0.07) rarely
    excludes 0.50; the paired difference against step 59's evaluation on the same items (+-0.03) does."""
    from adaptive_eval.trace import Trace, TraceRecord

    def p(t, i):
        return (0.999 if t < 60 else 0.90) if i % 2 == 0 else 0.001
    records = [TraceRecord(t, {"train/loss": 1.0, **({f"eval/math/acc@{i}": p(t, i) for i in range(200)}
                                                       if t % 10 == 0 or t == 60 else {})}, None, None)
               for t in range(120)]
    cfg = load_config("areal", ["evaluation.suites.math.size=200", "trigger.freq_steps=10",
                                "logging.tensorboard_dir=null"])
    interval_only, with_paired = [], []
    for seed in range(10):
        evals = replay(Trace(records, "test"), cfg, seed=seed).evals
        assert all("paired" in e for e in evals[1:])
        kw = dict(pre_level=0.5, direction="down")
        interval_only.append(confirmed_delay(evals, 60, "math/acc", paired=False, **kw))
        with_paired.append(confirmed_delay(evals, 60, "math/acc", **kw))
    assert with_paired == [9] * 10                       # the first evaluation after the change (step 69)
    assert sum(d == 9 for d in interval_only) <= 3       # the interval alone: seldom at once, often never
    assert interval_only.count(None) >= 5


def _fixed_schedule(truth, n_items, rng, every=25):
    from adaptive_eval.stats import wilson_interval

    evals = []
    for step in range(every - 1, len(truth), every):
        k = int(rng.binomial(n_items, truth[step]))
        evals.append({"step": step, "sample_size": n_items, "metrics": {"acc": k / n_items},
                      "ci": {"acc": list(wilson_interval(k, n_items))}})
    return evals


def test_the_picked_checkpoints_interval_covers_its_true_value_after_selection():
    """60 seeded runs (rise_plateau, flat, silent_degradation curves; 100 items every 25 steps): the pick's
    marginal interval (estimate +- 1.96 posterior sd, what Pick.interval was) covered the picked checkpoint's
    true value in 47 of them; the interval now covers it in all 60.  The pick itself (step, estimate) is the
    plain argmax of the shrunk estimates (up to rounding ties), and by="mean"/"bound" keep their estimates too."""
    import numpy as np

    from adaptive_eval.scoring import _Z95, pick_best, shrunk_estimates

    rng = np.random.default_rng(0)
    old = new = runs = 0
    for seed in range(20):
        for kind in ("rise_plateau", "flat", "silent_degradation"):
            truth = make_trace(kind, steps=1000, seed=seed).truth
            evals = _fixed_schedule(truth, 100, rng)
            pick = pick_best(evals, "acc")
            rows = shrunk_estimates(evals, "acc")
            e, est, sd = max(rows, key=lambda row: (row[1], -row[2]))
            # (the argmax, or an estimate tied with it to rounding: the tie goes to the more precise one)
            assert any(r[0] is pick.eval and r[1] == pick.estimate for r in rows) and abs(pick.estimate - est) < 1e-6 * sd
            true = truth[pick.step]
            old += abs(true - est) <= _Z95 * sd
            new += pick.interval[0] <= true <= pick.interval[1]
            runs += 1
            assert pick.interval[0] <= pick.estimate <= pick.interval[1]
            for by in ("mean", "bound"):
                other = pick_best(evals, "acc", by=by)
                best = max(evals, key=lambda x: x["metrics"]["acc"] if by == "mean" else x["ci"]["acc"][0])
                assert other.eval is best
                assert other.estimate == (best["metrics"]["acc"] if by == "mean" else best["ci"]["acc"][0])
                low, high = best["ci"]["acc"]
                assert other.interval[0] <= low and other.interval[1] >= high  # widened, never narrowed
    assert old / runs < 0.92 and new / runs >= 0.93, (old, new, runs)


def test_one_precise_evaluation_among_small_ones_keeps_a_narrow_interval():
    """39 evaluations of 32 items and one of 2,000 on a flat 0.9 model: the precise one is picked, and its
    interval stays within 1.6x its own Wilson interval (the selection over 40 evaluations widens it a little),
    under half the width of any 32-item evaluation's own interval (even one that scored 32 of 32)."""
    import numpy as np

    from adaptive_eval.scoring import pick_best
    from adaptive_eval.stats import wilson_interval

    rng = np.random.default_rng(1)
    evals = []
    for step in range(0, 400, 10):
        n = 2000 if step == 200 else 32
        k = int(rng.binomial(n, 0.9))
        evals.append({"step": step, "sample_size": n, "metrics": {"acc": k / n},
                      "ci": {"acc": list(wilson_interval(k, n))}})
    pick = pick_best(evals, "acc")
    own_low, own_high = evals[20]["ci"]["acc"]
    low, high = pick.interval
    assert pick.step == 200 and low < 0.9 < high
    assert high - low <= 1.6 * (own_high - own_low) and high - low < 0.04
    assert all(high - low < (e["ci"]["acc"][1] - e["ci"]["acc"][0]) / 2 for e in evals if e["sample_size"] == 32)


def test_the_interval_is_deterministic_and_leaves_the_global_random_state_alone():
    import random

    import numpy as np

    from adaptive_eval.scoring import pick_best

    evals = _fixed_schedule(make_trace("rise_plateau", steps=400, seed=2).truth, 32, np.random.default_rng(3))
    np.random.seed(5)
    random.seed(5)
    before = (np.random.get_state()[1].copy(), random.getstate())
    first = pick_best(evals, "acc").interval
    assert pick_best(evals, "acc").interval == first
    assert (np.random.get_state()[1] == before[0]).all() and random.getstate() == before[1]


@pytest.mark.parametrize("by", ["shrunk", "mean", "bound"])
def test_a_widened_interval_of_an_accuracy_stays_within_0_and_1(by):
    """The post-selection widening put the upper end of a near-perfect accuracy above 1."""
    from adaptive_eval.scoring import pick_best
    from adaptive_eval.stats import wilson_interval

    evals = [{"step": s, "sample_size": n, "metrics": {"acc": c / n}, "ci": {"acc": list(wilson_interval(c, n))}}
             for s, (c, n) in zip(range(0, 400, 25), [(27, 32), (28, 32), (29, 32), (98, 100), (29, 32), (28, 32),
                                                      (27, 32), (29, 32), (199, 200), (28, 32)])]
    low, high = pick_best(evals, "acc", by=by).interval
    assert 0.0 <= low < high <= 1.0


@pytest.mark.parametrize("by", ["shrunk", "mean", "bound"])
def test_an_evaluation_without_an_interval_is_not_taken_as_exact(by):
    # A grader outage left one checkpoint with a single scored problem: a mean of partial-credit scores with no
    # interval (NaN).  Taken as exact, it won every rule with a zero-width interval.
    rows = [(0, .49, [.47, .52]), (50, .55, [.52, .57]), (100, .59, [.56, .61]), (150, .80, [math.nan, math.nan]),
            (200, .58, [.55, .60]), (250, .59, [.567, .613])]
    evals = [{"step": s, "metrics": {"score": m}, "ci": {"score": ci}} for s, m, ci in rows]
    pick = pick_best(evals, "score", by=by)
    assert pick.step != 150 and pick.interval[1] - pick.interval[0] > 0.03
    # with no interval anywhere (a bare scalar metric), each evaluation is taken as it is
    bare = [{"step": s, "metrics": {"score": m}} for s, m, _ in rows]
    assert pick_best(bare, "score", by=by).step == 150


def test_pick_best_takes_the_evaluators_own_history():
    from adaptive_eval import AdaptiveEvaluator, load_config

    rng = np.random.default_rng(0)
    now = [0.0]  # an injected clock, a step a second: the budget's decisions do not depend on this machine
    ev = AdaptiveEvaluator.from_config(load_config(None, ["evaluation.metric=acc", "trigger.freq_steps=5"]),
                                       total_steps=20, clock=lambda: now[0], eval_clock=lambda: now[0])
    for step in range(20):
        now[0] += 1.0
        ev.evaluate(lambda req: {"acc": (rng.random((100, 4)) < 0.6).astype(float)}, 0, step, step)
    ev.close()
    rows = [r.to_dict() for r in ev.history]
    assert len(rows) >= 3
    assert pick_best(ev.history, "acc") == pick_best(rows, "acc")
    best = best_eval(ev.history, "acc")
    assert best is ev.history[[r["step"] for r in rows].index(pick_best(rows, "acc").step)]
    assert confirmed_delay(ev.history, 1, "acc") == confirmed_delay(rows, 1, "acc")


def test_a_metric_no_evaluation_measured_is_a_warning_naming_those_measured():
    """confirmed_delay(evals, 600, "acc") on a suite's results (``math/acc``) returned None, read as "never
    confirmed", and best_eval None, with nothing said (found by a new-user probe)."""
    import warnings

    evals = [{"step": s, "metrics": {"math/acc": m}, "ci": {"math/acc": [m - 0.02, m + 0.02]}}
             for s, m in ((500, 0.6), (610, 0.4))]
    for call in (lambda: confirmed_delay(evals, 600, "acc"), lambda: best_eval(evals, "acc")):
        with pytest.warns(RuntimeWarning, match=r"no evaluation measured 'acc' \(they measured math/acc\)"):
            assert call() is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the right name, or nothing evaluated at all: no warning
        assert confirmed_delay(evals, 600, "math/acc") == 10
        assert best_eval(evals, "math/acc")["step"] == 500
        assert best_eval([], "acc") is None and confirmed_delay([], 600, "acc") is None


def test_a_measured_level_before_the_event_counts_its_own_error():
    """confirmed_delay's default level is the last evaluation before the event, and its mean was taken for the true
    level: with no change at all (accuracy 0.8), a scheduled 48-item evaluation then an alarm's widened 576-item one
    "confirmed" a fall in 0.32 of 4,000 draws, for 0.025 asked (a new user's probe).  The difference of the two means
    now has the two margins added in quadrature (MOVER); a level given is still taken as known."""
    import numpy as np

    from adaptive_eval.scoring import confirmed_delay
    from adaptive_eval.stats import summarize

    rng = np.random.default_rng(0)
    measured = known = 0
    for _ in range(2000):
        rows = []
        for step, n in ((0, 48), (1, 576)):
            s = summarize((rng.random(n) < 0.8).astype(float))
            rows.append({"step": step, "metrics": {"acc": s.mean}, "ci": {"acc": list(s.ci)}})
        measured += confirmed_delay(rows, 1, "acc", direction="down") is not None
        known += confirmed_delay(rows, 1, "acc", direction="down", pre_level=0.8) is not None
    assert measured / 2000 <= 0.04 and known / 2000 <= 0.04  # measured 0.016 and 0.024 (0.31 before)
    # A real fall is still confirmed against a measured level
    before = summarize((rng.random(300) < 0.8).astype(float))
    after = summarize((rng.random(300) < 0.6).astype(float))
    rows = [{"step": 0, "metrics": {"acc": before.mean}, "ci": {"acc": list(before.ci)}},
            {"step": 10, "metrics": {"acc": after.mean}, "ci": {"acc": list(after.ci)}}]
    assert confirmed_delay(rows, 5, "acc", direction="down") == 5


def test_pick_best_reads_a_losss_direction_off_its_name_and_picks_among_the_steps_given():
    """A new user's probe: the README's pick_best(history, "eval_loss") picked the collapsed model's highest
    loss (step 102, 13.6) over the best checkpoint (step 89, 0.30).  Without higher_is_better the direction is
    read off the name, as HF's greater_is_better is; given, it is as given; the pick says which.  steps= picks only
    among the checkpoints still kept (the pick's step need not be one)."""
    from adaptive_eval.scoring import best_eval, pick_best

    losses = [(10, 0.9), (20, 0.6), (30, 0.4), (40, 0.3), (50, 0.35), (60, 13.6)]
    evals = [{"step": s, "sample_size": 100, "metrics": {"eval_loss": m, "acc": 1.0 - m / 20},
              "ci": {"eval_loss": [m - 0.05, m + 0.05], "acc": [1.0 - m / 20 - 0.01, 1.0 - m / 20 + 0.01]}}
             for s, m in losses]
    for by in ("shrunk", "mean", "bound"):
        loss = pick_best(evals, "eval_loss", by=by)
        assert loss.step == 40 and not loss.higher_is_better and loss.to_dict()["higher_is_better"] is False
        assert pick_best(evals, "eval_loss", by=by, higher_is_better=True).step == 60
        assert pick_best(evals, "acc", by=by).step == 40 and pick_best(evals, "acc", by=by).higher_is_better
        kept = pick_best(evals, "eval_loss", by=by, steps=[20, 50, 60])
        assert kept.step == 50 and best_eval(evals, "eval_loss", by=by, steps={20, 60})["step"] == 20
        with pytest.warns(RuntimeWarning, match=r"none of the 1 steps given was evaluated \(the evaluations are "
                                                r"at steps 10, 20, 30, 40, 50, 60\).*checkpoint-N folder holds "
                                                r"step N - 1"):
            assert pick_best(evals, "eval_loss", by=by, steps=[15]) is None
        with pytest.raises(TypeError, match="steps= takes the step numbers to pick among, got 'checkpoint-10'"):
            pick_best(evals, "eval_loss", by=by, steps=["checkpoint-10"])


def test_among_the_steps_kept_the_initial_weights_evaluation_is_no_checkpoints():
    """A probe: with trigger.eval_before_train the initial weights are evaluated at the first step, 0, which also
    names the weights after the first step (HF's checkpoint-1); picking among the checkpoints kept,
    best(steps=[n - 1 for n in saved]) picked step 0 for the initial weights' loss 2.45 where checkpoint-1 held a
    model at 125.2.  Among steps= the before_train evaluation is left out; without steps= it is a model like any."""
    from adaptive_eval.scoring import pick_best

    rows = [{"step": 0, "reason": "before_train", "sample_size": 100, "metrics": {"eval_loss": 2.45},
             "ci": {"eval_loss": [2.35, 2.55]}}]
    rows += [{"step": s, "reason": "trigger:steps", "sample_size": 100, "metrics": {"eval_loss": m},
              "ci": {"eval_loss": [m - 0.1, m + 0.1]}} for s, m in [(0, 125.2), (9, 90.0), (19, 60.0)]]
    for by in ("shrunk", "mean", "bound"):
        assert pick_best(rows, "eval_loss", by=by).eval["reason"] == "before_train"
        kept = pick_best(rows, "eval_loss", by=by, steps=[0, 9])
        assert kept.step == 9 and kept.eval["reason"] == "trigger:steps", by
        assert pick_best(rows, "eval_loss", by=by, steps=[0, 9, 19]).step == 19
        # only the initial weights' among the steps: None, said without contradicting itself (a review)
        with pytest.warns(RuntimeWarning, match=r"\(the evaluations are at steps 9, 19; the one at step 0 is "
                                                r"the initial weights' \(before_train\), which no checkpoint holds\)"):
            assert pick_best(rows[:1] + rows[2:], "eval_loss", by=by, steps=[0]) is None


def test_values_too_large_to_smooth_are_picked_by_their_bound_with_a_warning_not_an_overflow():
    """A probe: items of 1e200 raised OverflowError from ``best()`` after training (their squares overflow): a huge
    metric is data, not a crash."""
    from adaptive_eval.scoring import shrunk_estimates

    evals = [{"step": s, "sample_size": 32, "metrics": {"score": m}, "ci": {"score": [0.4 * m, 1.6 * m]}}
             for s, m in [(10, 5e199), (20, 6e199), (30, 5.5e199)]]
    with pytest.warns(RuntimeWarning, match="too large to smooth"):
        pick = pick_best(evals, "score")
    assert pick.by == "bound" and pick.step == 20
    with pytest.warns(RuntimeWarning, match="each evaluation's own value"):
        estimates = shrunk_estimates(evals, "score")
    assert [(e["step"], m) for e, m, _ in estimates] == [(10, pytest.approx(5e199)), (20, pytest.approx(6e199)),
                                                         (30, pytest.approx(5.5e199))]
    assert all(math.isfinite(se) and se > 0 for _, _, se in estimates)


def test_selection_regret_reads_a_step_between_two_of_a_mappings_steps_as_the_earlier_one():
    """A probe: ReplayRun.truth's mapping (ground truth every 50 steps) raised a bare KeyError: 63 for the pick at
    step 63, which measured step 50's model; score_run, which takes a sequence by record, said no more."""
    from adaptive_eval.scoring import score_run, selection_regret

    evals = [{"step": 40, "metrics": {"acc": 0.6}}, {"step": 63, "metrics": {"acc": 0.9}}]
    assert selection_regret(evals, {0: 0.5, 50: 0.8, 100: 0.85}, "acc") == pytest.approx(0.05)
    with pytest.raises(ValueError, match="the pick is step 63, before the first step of truth \\(70\\)"):
        selection_regret(evals, {70: 0.8}, "acc")
    with pytest.raises(TypeError, match="truth is a sequence indexed by record"):
        score_run(evals, steps=100, full_size=10, truth={0: 0.5, 50: 0.8}, metric="acc")


def test_an_asynchronous_evaluations_confirmation_counts_to_when_its_result_came_back():
    """confirmed_delay counted to the weights' step: an asynchronous run read "confirmed after 2 steps" at a latency of
    2 or of 40 steps, so check, replay and tune could not see what latency costs (a new user's probe)."""
    from adaptive_eval.scoring import confirmed_delay

    evals = [{"step": 5, "metrics": {"acc": 0.80}, "ci": {"acc": [0.75, 0.85]}, "integrated_step": 7},
             {"step": 12, "metrics": {"acc": 0.40}, "ci": {"acc": [0.35, 0.45]}, "integrated_step": 52}]
    assert confirmed_delay(evals, 10, "acc") == 42
    assert confirmed_delay([{k: v for k, v in e.items() if k != "integrated_step"} for e in evals], 10, "acc") == 2

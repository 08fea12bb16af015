"""Detectors on real recorded training traces (the traces/ folder shipped in the repository)."""

import csv

import pytest

from adaptive_eval.detectors import make_detector

NANOGPT = "KellerJordan__modded-nanogpt__ScaleUp1B_87bd51fd.csv"
COLLAPSE = "rasbt__reasoning-from-scratch__ch07_7_5_plus_kl_metrics.csv"


def column(path, name):
    """(step, value) of each row where the column is recorded."""
    with open(path, newline="", encoding="utf-8") as f:
        return [(int(row["step"]), float(row[name])) for row in csv.DictReader(f) if row.get(name, "") != ""]


def alarms(spec, series, stream):
    det = make_detector(spec, stream=stream)
    return [a for step, value in series if (a := det.update(value, step)) is not None]


def test_spike_flags_the_nanogpt_loss_spike_and_little_else(traces_dir):
    series = column(traces_dir / NANOGPT, "train_loss")
    values = dict(series)
    assert (values[5963], values[5964], values[5965]) == (3.0039, 5.7021, 3.3222)  # the spike the issue names
    found = alarms({"type": "spike"}, series, "train_loss")
    spike = [a for a in found if a.step == 5964]
    assert spike and spike[0].direction == "up" and spike[0].location == 5964
    late_steps = [s for s, _ in series if s > 3000]
    late_alarms = [a for a in found if a.step > 3000]
    assert len(late_alarms) < 0.01 * len(late_steps), (len(late_alarms), len(late_steps))
    # The detector is not fooled into a level change: the step after the spike is quiet.
    assert not any(a.step == 5965 for a in found)


def best_single_split(series):
    """The step that starts the second segment of the least-squares two-segment fit (one change in mean).

    This is the offline, hindsight estimate of the change point (ruptures' Binseg with one breakpoint and
    an L2 cost), computed from the data alone.
    """
    values = [v for _, v in series]
    n = len(values)
    prefix, prefix_sq = [0.0], [0.0]
    for v in values:
        prefix.append(prefix[-1] + v)
        prefix_sq.append(prefix_sq[-1] + v * v)

    def sse(i, j):
        s, q, m = prefix[j] - prefix[i], prefix_sq[j] - prefix_sq[i], j - i
        return q - s * s / m

    split = min(range(5, n - 5), key=lambda i: sse(0, i) + sse(i, n))
    return series[split][0]


def test_level_detector_flags_the_grpo_reward_collapse_within_20_steps(traces_dir):
    series = column(traces_dir / COLLAPSE, "reward_avg")
    onset = best_single_split(series)
    # The onset found from the data: rewards vary around 0.5 before it and are (almost) all 0 after it.
    after = [v for s, v in series if s >= onset]
    assert sum(after) / len(after) < 0.01
    assert 40 <= onset <= 70, onset
    # The evaluator's default level detector (config default: cusum with arl0=5000).
    found = alarms({"type": "cusum", "arl0": 5000}, series, "reward_avg")
    assert found, "no alarm on the reward collapse"
    first = found[0]
    assert onset <= first.step <= onset + 20, (onset, first)
    assert first.direction == "down"
    assert abs(first.location - onset) <= 5
    # One collapse, one alarm: the detector re-arms on the new (zero) level and stays quiet there.
    assert len(found) == 1, found


@pytest.mark.parametrize("name", ["bocpd", "page_hinkley"])
def test_other_level_detectors_see_the_collapse_too(traces_dir, name):
    series = column(traces_dir / COLLAPSE, "reward_avg")
    onset = best_single_split(series)
    found = alarms({"type": name, "arl0": 5000}, series, "reward_avg")
    assert found and onset <= found[0].step <= onset + 20 and found[0].direction == "down", (onset, found)

from adaptive_eval import EpochStepTimeFreqCtl
from dist_utils import run_ranks


class SkewedClock:
    def __init__(self, offset, rate):
        self.t, self.offset, self.rate = 0.0, offset, rate

    def __call__(self):
        return self.offset + self.t * self.rate


def _time_trigger_rank(rank, world):
    # Each rank's clock runs at its own rate from its own origin; decisions must still agree.
    clock = SkewedClock(offset=1000.0 * rank, rate=1.0 + 0.3 * rank)
    ctl = EpochStepTimeFreqCtl(freq_sec=10, freq_step=50, clock=clock)
    fired = []
    for g in range(120):
        clock.t += 1.0
        if ctl.check(0, 1):
            fired.append((g, ctl.last_reason))
    return fired


def test_time_trigger_agrees_across_ranks_with_skewed_clocks():
    a, b = run_ranks(_time_trigger_rank)
    assert a == b
    # The fastest clock (rank 1: 1.3 s per step) decides: every 8 steps (8 x 1.3 >= 10).
    assert [g for g, _ in a][:3] == [7, 15, 23]

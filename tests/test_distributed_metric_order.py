"""One process and a process group track the same metric and size evaluations alike."""

import numpy as np

from adaptive_eval import AdaptiveEvaluator, load_config
from conftest import FakeClock
from dist_utils import run_ranks

ITEMS = 400
LENGTHS = np.random.default_rng(0).normal(300.0, 120.0, size=ITEMS)  # spread wide: its sample size is large
HITS = (np.random.default_rng(1).random(ITEMS) < 0.6).astype(float)  # a proportion: a smaller sample


def _run(rank=0, world=1):
    cfg = load_config(overrides=["trigger.freq_steps=5", "evaluation.metric=null",
                                 "policy.sample_size.target_half_width=20", "policy.sample_size.max=400",
                                 "policy.budget.enabled=false"])
    ev = AdaptiveEvaluator.from_config(cfg, clock=FakeClock())

    def evaluate_fn(request):
        idx = request.indices(ITEMS)
        return {"zeta_len": LENGTHS[idx], "acc": HITS[idx]}  # not in sorted order

    out = []
    for g in range(40):
        r = ev.evaluate(evaluate_fn, 0, g, g)
        if r is not None:
            out.append((r.step, r.sample_size, list(r.metrics)))
    return out, ev.policies.state_dict()["sample_size"]["last_why"]


def _rank(rank, world):
    return _run(rank, world)


def test_the_tracked_metric_and_sample_sizes_are_the_same_on_one_and_two_ranks():
    alone = _run()
    assert alone[0][0][2] == ["zeta_len", "acc"] and alone[1].startswith("normal(")  # sized for zeta_len
    assert len({n for _, n, _ in alone[0]}) > 1  # the sizes do follow the tracked metric
    two = run_ranks(_rank, world=2)
    assert two[0] == two[1] == alone

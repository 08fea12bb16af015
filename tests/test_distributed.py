"""adaptive_eval.distributed and sharded evaluation, on real gloo process groups (two CPU processes).

Each test spawns its ranks through ``dist_utils.run_ranks``, which fails with ``TimeoutError`` on a hang.
"""

import collections
import math
import os
import pickle
import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.distributed as dist

from adaptive_eval import EvalRequest, Evaluator, load_config
from adaptive_eval.distributed import (
    INLINE_BYTES,
    CollectiveError,
    DistContext,
    RankDiscrepancy,
    all_reduce_flags,
    any_true,
    broadcast_object,
    broadcast_tensor_container,
    combine_rank_summaries,
    eval_context,
    is_distributed,
    rank_discrepancies,
    rank_world,
    reduce_summaries,
)
from adaptive_eval.evaluators import RemoteEvaluationError, run_evaluation_outcome
from adaptive_eval.stats import summarize
from dist_utils import run_ranks, scenario_getter

pytestmark = pytest.mark.xdist_group(__name__)  # (under pytest -n: its module-scoped runs on one worker)

Pair = collections.namedtuple("Pair", "left right")
DATA = np.random.default_rng(3).normal(0.6, 0.3, size=101)
HITS = (np.random.default_rng(4).random(101) < 0.7).astype(float)


def _container():
    g = torch.Generator().manual_seed(0)
    base = torch.randn(4, 6, generator=g)
    return {
        "f32": base,
        "f64": base.double() * 3,
        "bf16": base.to(torch.bfloat16),
        "f16": base.half(),
        "i64": torch.arange(10, dtype=torch.int64).reshape(2, 5),
        "i8": torch.tensor([-3, 4, 127], dtype=torch.int8),
        "u8": torch.tensor([0, 255], dtype=torch.uint8),
        "bool": torch.tensor([[True, False], [False, True]]),
        "c64": torch.complex(base[0], base[1]),
        "conj": torch.complex(base[2], base[3]).conj(),  # a lazy conjugate view
        "sparse": torch.eye(3).to_sparse(),  # not strided: travels pickled
        "scalar": torch.tensor(2.5),
        "empty": torch.empty(0, 3),
        "strided": base.t(),  # non-contiguous
        "grad": torch.ones(3, requires_grad=True),
        "nested": [base[0], (torch.tensor([1, 2]), "text", None), {"deep": [torch.zeros(2, 2, dtype=torch.int32)]}],
        "pair": Pair(torch.tensor([1.0]), 7),
        "ordered": collections.OrderedDict([("b", torch.tensor([2])), ("a", 1)]),
        "objects": {"array": np.arange(5), "int_key": {3: "three"}, "float": 0.25, "set": {1, 2}},
    }


def _assert_same(a, b, path="data"):
    assert type(a) is type(b), f"{path}: {type(a)} != {type(b)}"
    if isinstance(a, torch.Tensor) and a.layout != torch.strided:
        assert a.layout == b.layout and torch.equal(a.to_dense(), b.to_dense()), path
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and a.device == b.device, path
        assert a.requires_grad == b.requires_grad, path
        assert torch.equal(a.detach(), b.detach()), path
    elif isinstance(a, dict):
        assert list(a) == list(b), path
        for k in a:
            _assert_same(a[k], b[k], f"{path}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same(x, y, f"{path}[{i}]")
    elif isinstance(a, np.ndarray):
        assert np.array_equal(a, b), path
    else:
        assert a == b, path


# -- broadcast_tensor_container and the DistContext primitives ----------------------------------------

def _record_backend_tensors():
    """Every tensor handed to a torch.distributed collective from now on, and every one adaptive_eval holds
    after its collective (``distributed._hold``); returns (handed, held, undo)."""
    import adaptive_eval.distributed as d

    handed, held, saved = [], [], {}
    for name in ("broadcast", "all_reduce", "all_gather_into_tensor", "all_gather_single"):
        if hasattr(dist, name):
            saved[name] = orig = getattr(dist, name)

            def wrapped(*args, _orig=orig, **kwargs):
                handed.extend(a for a in args if isinstance(a, torch.Tensor))
                return _orig(*args, **kwargs)

            setattr(dist, name, wrapped)
    orig_hold = d._hold

    def hold(tensors, before):
        held.extend(tensors)
        return orig_hold(tensors, before)

    d._hold = hold

    def undo():
        for name, f in saved.items():
            setattr(dist, name, f)
        d._hold = orig_hold

    return handed, held, undo


def _broadcast_rank(rank, world):
    import adaptive_eval.distributed as d
    from adaptive_eval.trigger import _max_over_ranks

    handed, held, undo = _record_backend_tensors()
    expected = _container()
    got = broadcast_tensor_container(expected if rank == 0 else None, src_rank=0)
    _assert_same(got, expected)
    assert rank != 0 or got is expected  # the source gets its own data back
    # From rank 1, and bare values.
    assert broadcast_tensor_container(torch.tensor([rank]) if rank == 1 else None, src_rank=1).tolist() == [1]
    assert broadcast_tensor_container("plain" if rank == 0 else None) == "plain"
    assert broadcast_tensor_container(None) is None

    ctx = DistContext(timeout_s=20)
    big = list(range(3 * INLINE_BYTES))  # pickles far above the inline buffer: two collectives
    assert ctx.broadcast_object(big if rank == 0 else None) == big
    assert ctx.broadcast_object({"decision": rank}, src=1) == {"decision": 1}
    assert broadcast_object(("rank0 decides", rank)) == ("rank0 decides", 0)
    assert ctx.gather_objects({"r": rank}) == [{"r": 0}, {"r": 1}]
    assert ctx.gather_objects(big if rank == 1 else rank) == [0, big]
    # An alarm seen by one rank only counts on every rank, in one collective.
    before = ctx.collectives
    assert ctx.all_reduce_flags([rank == 1, False, True]) == [True, False, True]
    assert ctx.collectives == before + 1
    assert any_true(rank == 0) and all_reduce_flags([rank == 5]) == [False]
    assert ctx.all_true(True) and not ctx.all_true(rank == 0)
    assert ctx.all_reduce_max([rank * 1.5, -rank]) == [1.5, 0.0]
    ctx.barrier()
    assert is_distributed() and rank_world() == (rank, 2)
    assert _max_over_ranks(float(rank), None) == 1.0  # the time trigger's own all-reduce
    undo()
    # Every tensor adaptive_eval handed to the backend stayed referenced from Python until the backend let
    # go of it: else gloo's worker thread may free it last, which aborts the process at exit (SIGABRT)
    # when the process group is never destroyed (Lightning's ddp_spawn).
    assert handed and all(any(h is t for h in held) for t in handed)
    assert d._release_held(10.0) and not d._HELD
    return True


def test_broadcast_tensor_container_and_primitives_on_two_ranks():
    assert run_ranks(_broadcast_rank, timeout_s=90) == [True, True]


def test_a_collectives_tensors_stay_referenced_until_the_backend_lets_go_of_them():
    """``distributed._hold``: what keeps a gloo rank that exits with its process group alive from aborting.
    A view stands for the backend's own reference (the use count above what it was before)."""
    import adaptive_eval.distributed as d

    t = torch.zeros(4)
    before = d._use_counts([t])
    backend = t.view(2, 2)
    d._hold([t], before)
    mine = id(t)
    del t
    assert any(id(x) == mine for x, _ in d._HELD)  # the last reference is not the backend's
    assert not d._release_held(0.0)
    del backend
    assert d._release_held(5.0) and not any(id(x) == mine for x, _ in d._HELD)
    released = torch.ones(2)  # nobody else holds it: not kept
    d._hold([released], d._use_counts([released]))
    assert not any(x is released for x, _ in d._HELD)
    pinned = [torch.zeros(1) for _ in range(3 * d._HELD_MAX)]
    views = [p.view(1) for p in pinned]  # held for good (a view of one kept alive): the list stays bounded
    for p in pinned:
        d._hold([p], [1])
    assert len(d._HELD) <= d._HELD_MAX
    del views
    assert d._release_held(5.0)


def test_a_large_buffer_is_waited_for_a_moment_instead_of_held_until_the_next_collective(monkeypatch):
    """A weight bucket (1 MiB or more) that the backend lets go of within the wait (5 ms; 5 s here, so that a
    loaded machine cannot make the timer late) is not kept alive; a small tensor is held without waiting."""
    import threading

    import adaptive_eval.distributed as d

    monkeypatch.setattr(d, "_HOLD_SPIN_S", 5.0)
    bucket = torch.zeros(1 << 18)  # 1 MiB of float32
    before = d._use_counts([bucket])
    backend = [bucket.view(-1)]
    threading.Timer(0.001, backend.clear).start()  # the backend's reference goes 1 ms later
    d._hold([bucket], before)
    assert not any(x is bucket for x, _ in d._HELD)
    small = torch.zeros(4)
    small_before = d._use_counts([small])
    view = small.view(2, 2)
    d._hold([small], small_before)
    assert any(x is small for x, _ in d._HELD)  # held at once, no wait
    del view
    assert d._release_held(5.0)


def test_without_process_group_everything_is_local():
    assert not is_distributed() and rank_world() == (0, 1)
    data = _container()
    assert broadcast_tensor_container(data) is data
    ctx = DistContext()
    assert ctx.broadcast_object("x") == "x" and ctx.gather_objects(3) == [3]
    assert ctx.all_reduce_flags([True, False]) == [True, False] and ctx.all_reduce_max([2.0]) == [2.0]
    s = {"acc": summarize([1, 0, 1])}
    combined, means = reduce_summaries(s)
    assert combined["acc"].mean == pytest.approx(2 / 3) and means == {"acc": [pytest.approx(2 / 3)]}
    assert ctx.collectives == 0
    # A request for rank 0 of 2 without a group is a clear error, not a silent partial result.
    with pytest.raises(ValueError, match="rank 0 of 2"):
        run_evaluation_outcome(lambda req: {"x": [1.0]}, EvalRequest(step=0, sample_size=None, seed=0, reason="t",
                                                                          rank=0, world_size=2))


def test_dist_context_rejects_bad_timeout():
    with pytest.raises(ValueError, match="timeout_s"):
        DistContext(timeout_s=0)


# -- exact reduction -----------------------------------------------------------------------------------

def _single_process(sample_size, confidence=0.95):
    """The reference: the same request evaluated by one process over its whole sample."""
    def fn(req):
        idx = req.indices(len(DATA))
        return {"loss": DATA[idx], "acc": HITS[idx].tolist(), "score": 0.5}

    req = EvalRequest(step=3, sample_size=sample_size, seed=11, reason="trigger:steps")
    outcome = run_evaluation_outcome(fn, req, confidence=confidence)
    result, error = outcome.result, outcome.error
    assert error is None
    return result


def _sharded_rank(rank, world, sample_size):
    cfg = load_config(overrides=["trigger.freq_steps=4", "evaluation.seed=11"]
                      + ([f"evaluation.sample_size={sample_size}"] if sample_size else []))
    ev = Evaluator(cfg)
    seen = []

    def fn(req):
        idx = req.indices(len(DATA))
        seen.append(idx)
        return {"loss": torch.tensor(DATA[idx]), "acc": HITS[idx].tolist(), "score": 0.5}

    results = [r for g in range(4) if (r := ev.evaluate(fn, 0, g, g)) is not None]
    assert len(results) == 1 and results[0].step == 3
    r = results[0]
    return {"metrics": {k: (v.mean, v.n, v.ci, v.std, v.binary) for k, v in r.metrics.items()},
            "seconds": r.seconds, "indices": seen[0], "per_rank": ev.last_outcome.per_rank_n}


@pytest.mark.parametrize("sample_size", [None, 37])
def test_sharded_eval_equals_single_process_result(group_run, sample_size):
    a, b = group_run(f"sharded_{sample_size}")
    assert repr(a) == repr(b | {"indices": a["indices"]})  # identical results on both ranks (NaN included)
    expected_n = sample_size or 101
    whole = EvalRequest(step=3, sample_size=sample_size, seed=11, reason="x").indices(101)
    assert sorted(a["indices"] + b["indices"]) == sorted(whole)
    assert not set(a["indices"]) & set(b["indices"])
    assert a["per_rank"]["loss"] == [len(a["indices"]), len(b["indices"])]  # uneven shards: 51/50 or 19/18
    assert len(a["indices"]) - len(b["indices"]) == expected_n % 2
    ref = _single_process(sample_size)
    for name, (mean, n, ci, std, binary) in a["metrics"].items():
        want = ref[name]
        assert n == want.n == expected_n and binary == want.binary, name
        assert abs(mean - want.mean) <= 1e-9, name
        # A bare scalar has no interval (NaN) in both: NaN must match NaN.
        assert all(abs(c - w) <= 1e-9 or (math.isnan(c) and math.isnan(w)) for c, w in zip(ci, want.ci)), name
        if not math.isnan(want.std):
            assert abs(std - want.std) <= 1e-9, name
    assert a["metrics"]["acc"][4] and not a["metrics"]["loss"][4]


def _world_one_rank(rank, world):
    assert not is_distributed() and rank_world() == (0, 1)
    calls = _count_collectives()
    ev = Evaluator(SimpleNamespace(freq_epochs=None, freq_steps=2, freq_secs=None, eval_before_train=False))
    fn = lambda req: {"loss": DATA[req.indices(101)]}  # noqa: E731
    assert ev.evaluate(fn, 0, 0, 0) is None
    r = ev.evaluate(fn, 0, 1, 1)
    return r.mean("loss"), r["loss"].n, sum(calls.values())


def test_world_size_one_group_behaves_like_a_single_process():
    (mean, n, collectives), = run_ranks(_world_one_rank, world=1)
    assert n == 101 and mean == pytest.approx(DATA.mean(), abs=1e-12) and collectives == 0


def test_combine_rank_summaries_handles_missing_metrics_and_empty_shards():
    parts = [{"acc": summarize([1, 1, 0]), "only0": summarize([2.0, 4.0])},
             {"acc": summarize([])},  # an empty shard: neither biases the mean nor the 0/1 kind
             {"acc": summarize([0, 1]), "only2": summarize([5.0])}]
    combined, means, ns = combine_rank_summaries(parts)
    assert list(combined) == ["acc", "only0", "only2"]
    assert combined["acc"].mean == pytest.approx(3 / 5) and combined["acc"].binary and combined["acc"].n == 5
    assert ns["only0"] == [2, 0, 0] and math.isnan(means["only0"][1]) and combined["only2"].n == 1
    ref = summarize([1, 1, 0, 0, 1])
    assert combined["acc"].ci == pytest.approx(ref.ci, abs=1e-12)


# -- evaluate_fn that runs collectives, errors, dead and hung ranks -------------------------------------

def _inner_collective_rank(rank, world):
    ev = Evaluator(load_config(overrides=["trigger.freq_steps=1"]))

    def fn(req):
        idx = req.indices(len(DATA))
        # The user's own collective inside evaluate_fn: a global normalizer over all shards.
        total = torch.tensor([float(len(idx))])
        dist.all_reduce(total)
        assert torch.is_inference_mode_enabled()  # evaluation.precision (fp32) runs under inference_mode
        return {"share": [len(idx) / total.item()] * len(idx)}

    r = ev.evaluate(fn, 0, 0, 0)
    return r.mean("share"), r["share"].n


def test_evaluate_fn_running_its_own_collective(group_run):
    a, b = group_run("inner_collective")
    assert a == b and a[1] == 101
    assert a[0] == pytest.approx((51 * 51 / 101 + 50 * 50 / 101) / 101, abs=1e-12)


def _error_rank(rank, world, on_error):
    cfg = load_config(overrides=["trigger.freq_steps=1", f"evaluation.on_error={on_error}",
                                 "evaluation.max_retries=2"])
    ev = Evaluator(cfg)
    calls = []

    def fn(req):
        calls.append(req.step)
        # Rank 1 fails at step 0 (on its first attempt only, for retry); rank 0 is fine.
        if rank == 1 and req.step == 0 and len(calls) == 1:
            raise ValueError("disk on fire")
        return {"x": [float(rank)] * len(req.indices(10))}

    out = {}
    try:
        r = ev.evaluate(fn, 0, 0, 0)
        out["step0"] = None if r is None else r.mean("x")
    except Exception as exc:  # noqa: BLE001
        out["step0"] = f"raised {type(exc).__name__}: {exc}"
    out["error"] = None if ev.last_error is None else f"{type(ev.last_error).__name__}: {ev.last_error}"
    out["attempts"] = ev.last_outcome.attempts if ev.last_outcome is not None else None
    out["calls"] = len(calls)
    # The group still works after a skipped or raised evaluation.
    out["step1"] = ev.evaluate(fn, 0, 1, 1).mean("x")
    return out


def test_exception_on_one_rank_makes_both_skip(group_run):
    a, b = group_run("error_skip")
    assert a["step0"] is None and b["step0"] is None
    assert a["error"].startswith("RemoteEvaluationError") and "rank 1" in a["error"] and "disk on fire" in a["error"]
    assert b["error"] == "ValueError: disk on fire"
    assert a["step1"] == b["step1"] == pytest.approx(0.5)


def test_exception_on_one_rank_makes_both_raise(group_run):
    a, b = group_run("error_raise")
    assert a["step0"].startswith("raised RemoteEvaluationError") and "rank 1: ValueError: disk on fire" in a["step0"]
    assert b["step0"] == "raised ValueError: disk on fire"
    assert a["step1"] == b["step1"]


def test_exception_on_one_rank_makes_both_retry_together(group_run):
    a, b = group_run("error_retry")
    # Both ranks ran evaluate_fn twice at step 0 (so collectives inside it stay matched), then agreed.
    assert a["attempts"] == b["attempts"] == 2 and a["calls"] == b["calls"] == 2
    assert a["step0"] == b["step0"] == pytest.approx(0.5) and a["error"] is None


def _bad_output_rank(rank, world):
    ev = Evaluator(SimpleNamespace(freq_epochs=None, freq_steps=1, freq_secs=None, eval_before_train=False))
    result = ev.evaluate(lambda: {"acc": "high"} if rank == 0 else {"acc": 1.0}, 0, 0, 0)
    ctx = DistContext(timeout_s=30)
    req = EvalRequest(step=0, sample_size=None, seed=0, reason="t", rank=rank, world_size=world)
    fn = lambda r: {"acc": "high"} if rank == 0 else {"acc": [1.0]}  # noqa: E731
    out = run_evaluation_outcome(fn, req, dist_context=ctx)  # on_error: skip
    try:
        run_evaluation_outcome(fn, req, dist_context=ctx, on_error="raise")
        raised = None
    except TypeError as exc:
        raised = str(exc)
    return {"result": result, "error": f"{type(out.error).__name__}: {out.error}", "failed": out.failed_ranks,
            "raised": raised}


def test_wrong_output_on_one_rank_is_a_failed_evaluation_on_both(group_run):
    """A value one rank's evaluate_fn returns that cannot be summarized fails the evaluation on every rank
    alike (on_error: skip: both return None, neither waits for the other); with on_error: raise both raise."""
    a, b = group_run("bad_output")
    assert a["result"] is None and b["result"] is None
    assert a["error"].startswith("TypeError") and "'acc'" in a["error"]
    assert b["error"].startswith("TypeError") and "rank 0" in b["error"] and "'acc'" in b["error"]
    assert a["failed"] == b["failed"] == (0,)
    assert "'acc'" in a["raised"] and "rank 0" in b["raised"]


def _missing_shard_rank(rank, world):
    """Rank 1's evaluate_fn returns another metric name at step 0 and None at step 1 (a typo, a failing
    scorer): its shard is missing from the result, which rank 0 says; it said nothing."""
    import logging

    ev = Evaluator(load_config(overrides=["trigger.freq_steps=1"]))
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("adaptive_eval").addHandler(handler)
    try:
        def fn(req):
            idx = req.indices(7)
            if rank == 1:
                return {"accuracy": [1.0] * len(idx)} if req.step == 0 else None
            return {"acc": [1.0] * len(idx)}

        ns = [{k: v.n for k, v in ev.evaluate(fn, 0, g, g).metrics.items()} for g in (0, 1)]
    finally:
        logging.getLogger("adaptive_eval").removeHandler(handler)
    return ns, [r.getMessage() for r in records if r.levelno == logging.WARNING]


def test_a_rank_without_a_metric_the_others_report_is_named(group_run):
    a, b = group_run("missing_shard")
    assert a[0] == b[0] == [{"acc": 4, "accuracy": 3}, {"acc": 4}]  # the result itself: as before
    assert len(a[1]) == 3 and not b[1]  # rank 0 warns, once per metric and evaluation
    assert "step 0: metric 'acc' has no finite value from rank(s) 1" in a[1][0] and "all NaN?" in a[1][0]
    assert "step 0: metric 'accuracy' has no finite value from rank(s) 0" in a[1][1]
    assert "step 1: metric 'acc' has no finite value from rank(s) 1" in a[1][2]


def _dying_rank(rank, world, out_file):
    # Both ranks through init first: gloo's init_process_group can return on rank 1 before rank 0 has finished
    # connecting, and a rank 1 that died that early failed rank 0's init ("Connection closed by peer"), not
    # its evaluation (seen once in a CI run).
    dist.barrier()
    ctx = DistContext(timeout_s=5)
    req = EvalRequest(step=0, sample_size=None, seed=0, reason="t", rank=rank, world_size=world)

    def fn(req):
        if rank == 1:
            os._exit(3)  # the process dies mid-evaluation
        return {"x": [0.5]}

    start = time.monotonic()
    try:
        run_evaluation_outcome(fn, req, dist_context=ctx)
        outcome = "returned"
    except CollectiveError as exc:
        outcome = f"CollectiveError: {exc}"
    with open(out_file, "wb") as f:
        pickle.dump((outcome, time.monotonic() - start), f)


def test_a_rank_that_dies_is_an_error_on_the_other_not_a_hang(tmp_path):
    out_file = tmp_path / "rank0.pkl"
    with pytest.raises(AssertionError, match="rank 1 died"):
        run_ranks(_dying_rank, str(out_file), timeout_s=60)
    outcome, seconds = pickle.loads(out_file.read_bytes())
    assert outcome.startswith("CollectiveError") and "rank 0 of 2" in outcome
    assert seconds < 5  # a dead peer is seen at once, well within the 5 s timeout


def _hung_rank(rank, world):
    ctx = DistContext(timeout_s=1.0)
    req = EvalRequest(step=0, sample_size=None, seed=0, reason="t", rank=rank, world_size=world)

    def fn(req):
        if rank == 1:
            time.sleep(3)  # far slower than the timeout
        return {"x": [0.5]}  # one non-0/1 value: no interval to compute, nothing slow to import

    start = time.monotonic()
    try:
        run_evaluation_outcome(fn, req, dist_context=ctx)
        return ("returned", time.monotonic() - start)
    except CollectiveError as exc:
        return ("CollectiveError", time.monotonic() - start, str(exc))


def test_a_hung_rank_times_out_on_the_other_within_the_configured_timeout():
    a, b = run_ranks(_hung_rank, timeout_s=60, collective_timeout_s=8)
    # The timeout, plus slack for a loaded machine: far from the 3 s the late rank takes.
    assert a[0] == "CollectiveError" and 0.9 <= a[1] < 1.0 + 1.5 and "timeout 1 s" in a[2], a
    # The late rank does not hang either.  gloo cannot cancel the timed-out collective (abort() and
    # shutdown() leave it in flight), so the late rank may still complete it from the buffered data.
    assert b[0] in ("returned", "CollectiveError")


# -- rank discrepancy ----------------------------------------------------------------------------------

def _discrepancy_rank(rank, world):
    ev = Evaluator(SimpleNamespace(freq_epochs=None, freq_steps=1, freq_secs=None, eval_before_train=False),
                   rank_discrepancy_threshold=0.3)

    def fn(req):
        idx = req.indices(60)
        bias = 0.5 if rank == world - 1 else 0.0  # the last rank's model copy is off
        return {"acc": [0.3 + bias] * len(idx), "steady": [1.0] * len(idx)}

    ev.evaluate(fn, 0, 0, 0)
    return [(d.rank, d.metric, d.direction, d.stream, d.detector, d.message) for d in ev.last_discrepancies]


def test_rank_discrepancy_names_the_odd_rank():
    results = run_ranks(_discrepancy_rank, world=3, timeout_s=90)
    assert results[0] == results[1] == results[2]
    (found,) = results[0]
    rank, metric, direction, stream, detector, message = found
    assert (rank, metric, direction, stream, detector) == (2, "acc", "up", "eval/acc", "rank_discrepancy")
    assert message.startswith("rank 2:") and "0.8" in message


@pytest.mark.parametrize("means,ns,threshold,expected", [
    ({"m": [0.5, 0.5, 0.9]}, {"m": [10, 10, 10]}, 0.3, [(2, "up")]),
    ({"m": [0.5, 0.5, 0.1]}, {"m": [10, 10, 10]}, 0.3, [(2, "down")]),
    ({"m": [0.5, 0.9]}, {"m": [10, 10]}, 0.3, [(0, "down"), (1, "up")]),  # two ranks: both named
    ({"m": [0.5, 0.6]}, {"m": [10, 10]}, 0.3, []),
    ({"m": [0.5, math.nan, 0.55]}, {"m": [10, 0, 10]}, 0.3, []),  # an empty shard takes no part
    ({"m": [0.5, 0.9]}, {"m": [10, 0]}, 0.0, []),
])
def test_rank_discrepancies_table(means, ns, threshold, expected):
    found = rank_discrepancies(means, ns, threshold, step=4)
    assert [(d.rank, d.direction) for d in found] == expected
    assert all(isinstance(d, RankDiscrepancy) and d.step == 4 and d.location is None for d in found)
    for d in found:
        alarm = d.to_alarm()
        assert (alarm.step, alarm.detector, alarm.stream, alarm.direction) == (4, "rank_discrepancy", "eval/m",
                                                                              d.direction)
        assert alarm.message == d.message and f"rank {d.rank}:" in alarm.message


# -- collectives per step ------------------------------------------------------------------------------

_COUNTED = ("all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "all_gather_single", "all_gather_object",
            "broadcast_object_list", "barrier", "gather", "scatter", "reduce", "monitored_barrier")


def _count_collectives() -> collections.Counter:
    """Count every torch.distributed collective from now on (in this process)."""
    calls = collections.Counter()
    for name in _COUNTED:
        orig = getattr(dist, name)

        def wrapped(*args, _orig=orig, _name=name, **kwargs):
            calls[_name] += 1
            return _orig(*args, **kwargs)

        setattr(dist, name, wrapped)
    return calls


def _collectives_rank(rank, world):
    calls = _count_collectives()
    ev = Evaluator(SimpleNamespace(freq_epochs=None, freq_steps=5, freq_secs=None, eval_before_train=False))
    per_step = []
    for g in range(12):
        before = sum(calls.values())
        r = ev.evaluate(lambda req: {"x": [1.0] * len(req.indices(8))}, 0, g, g)
        per_step.append((g, r is not None, sum(calls.values()) - before))
    return per_step


def test_no_collective_when_no_eval_is_due_and_one_per_eval(group_run):
    a, b = group_run("collectives")
    assert a == b
    assert [(g, n) for g, due, n in a if due] == [(4, 1), (9, 1)]
    assert all(n == 0 for _, due, n in a if not due)


# -- one process group for the evaluator scenarios (spawning ranks costs seconds) ----------------------

def _scenarios_rank(rank, world):
    """Every scenario in turn on the same group; a failing scenario reports instead of stopping the rest."""
    import traceback

    scenarios = {
        "sharded_None": lambda: _sharded_rank(rank, world, None),
        "sharded_37": lambda: _sharded_rank(rank, world, 37),
        "inner_collective": lambda: _inner_collective_rank(rank, world),
        "error_skip": lambda: _error_rank(rank, world, "skip"),
        "error_raise": lambda: _error_rank(rank, world, "raise"),
        "error_retry": lambda: _error_rank(rank, world, "retry"),
        "bad_output": lambda: _bad_output_rank(rank, world),
        "missing_shard": lambda: _missing_shard_rank(rank, world),
        "collectives": lambda: _collectives_rank(rank, world),  # last: it patches torch.distributed
    }
    out = {}
    for name, run in scenarios.items():
        try:
            out[name] = ("ok", run())
        except Exception:  # noqa: BLE001
            out[name] = ("failed", traceback.format_exc())
    return out


@pytest.fixture(scope="module")
def group_run():
    return scenario_getter(run_ranks(_scenarios_rank, timeout_s=120))


# -- eval_context --------------------------------------------------------------------------------------

@pytest.mark.parametrize("precision,dtype", [("fp32", torch.float32), ("bf16", torch.bfloat16),
                                             ("fp16", torch.float16)])
def test_eval_context_inference_mode_and_autocast(precision, dtype):
    w = torch.ones(3, 3, requires_grad=True)
    with eval_context(precision, "cpu"):
        assert torch.is_inference_mode_enabled()
        y = torch.ones(2, 3) @ w
    assert y.dtype == dtype and not y.requires_grad
    assert not torch.is_inference_mode_enabled()


def test_eval_context_rejects_unknown_precision():
    with pytest.raises(ValueError, match="fp32, bf16, fp16"):
        with eval_context("int4"):
            pass


def test_single_process_outcome_keeps_the_old_behaviour():
    req = EvalRequest(step=2, sample_size=None, seed=0, reason="t")
    outcome = run_evaluation_outcome(lambda req: {"x": [1.0, 2.0]}, req, precision="bf16")
    assert outcome.result.mean("x") == 1.5 and outcome.per_rank_means == {} and outcome.attempts == 1
    with pytest.raises(RuntimeError, match="boom"):
        run_evaluation_outcome(lambda: (_ for _ in ()).throw(RuntimeError("boom")), req, on_error="raise")
    assert isinstance(run_evaluation_outcome(lambda: 1 / 0, req, on_error="retry", max_retries=1).error,
                      ZeroDivisionError)
    assert issubclass(RemoteEvaluationError, RuntimeError)


def test_a_context_that_read_its_store_pickles_without_it():
    """A review: an evaluator whose context had read the group's store (after a long gap or a failure) no longer
    pickled nor deep-copied: the store does not pickle."""
    import copy
    import pickle
    import threading

    from adaptive_eval.distributed import LOCAL, DistContext

    ctx = DistContext(None, 5.0, failed_key="adaptive_eval/failed/0")
    ctx._store = threading.Lock()  # (stands for the store: neither pickles)
    for again in (pickle.loads(pickle.dumps(ctx)), copy.deepcopy(ctx)):
        assert again._store is None and again.failed_key == ctx.failed_key and again.timeout_s == 5.0
    assert pickle.loads(pickle.dumps(LOCAL)) is LOCAL and not DistContext(LOCAL).distributed

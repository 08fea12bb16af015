"""The HF adapter on two gloo ranks: torchrun --nproc_per_node=2, ddp_backend="gloo" (CPU)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from adaptive_eval import EvalRequest  # noqa: E402

pytestmark = pytest.mark.xdist_group(__name__)  # (under pytest -n: its module-scoped runs on one worker)


def run(tmp_path, mode, out="rank"):
    script = Path(__file__).with_name("hf_ddp_script.py")
    env = dict(os.environ, OMP_NUM_THREADS="1", TRANSFORMERS_VERBOSITY="error")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(script), str(tmp_path), mode], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return None if out is None else [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]


@pytest.fixture(scope="module")
def launch(tmp_path_factory):
    """One torchrun launch, five runs one after the other: one that checkpoints every 10 steps (it serves as the
    plain synchronous run and as the uninterrupted run the resume is compared with), an asynchronous one, a
    run whose weights are flipped at step 40 with look_back and without, and one of a stock HF model's forward."""
    folder = tmp_path_factory.mktemp("hf_ddp")
    run(folder, "save,async,lookback,flip,stock", out=None)
    ranks = lambda mode: [json.loads((folder / mode / f"rank{r}.json").read_text()) for r in (0, 1)]  # noqa: E731
    return {"save": (folder / "save", ranks("save")), "async": ranks("async"),
            "lookback": (folder / "lookback", ranks("lookback")), "flip": ranks("flip"), "stock": ranks("stock")}


@pytest.fixture(scope="module")
def saved(launch):
    """(the folder of the run that checkpointed, each rank's record)"""
    return launch["save"]


def test_two_gloo_ranks_score_each_item_once_and_agree(saved):
    r0, r1 = saved[1]
    assert r0["world"] == r1["world"] == 2
    assert r0["history"] == r1["history"] and len(r0["history"]) >= 3  # identical results on both ranks
    assert r0["history"][-1][:2] == [29, "trigger:final"]
    assert r0["logged"] == r1["logged"] == [h[0] + 1 for h in r0["history"]]  # trainer.log on every rank
    for (step, mine, _, _), (step1, theirs, _, _), h in zip(r0["seen"], r1["seen"], r0["history"]):
        assert step == step1 == h[0]
        assert not set(mine) & set(theirs)  # each item scored once
        assert sorted(mine + theirs) == sorted(EvalRequest(step=step, sample_size=h[2], seed=0,
                                                           reason="").indices(200))


def test_two_gloo_ranks_evaluating_asynchronously_integrate_the_same_results_at_the_same_steps(launch):
    """DDP and asynchronous evaluation: each rank scores its shard on a replica in its worker thread while both
    ranks train; both integrate every result 3 steps later and log it at the same step."""
    r0, r1 = launch["async"]
    assert r0["history"] == r1["history"] and len(r0["history"]) >= 3
    assert r0["history"][-1][:2] == [29, "trigger:final"]
    assert [h[5] for h in r0["history"]] == [min(h[0] + 3, 29) for h in r0["history"]]
    assert r0["logged"] == r1["logged"] == [h[5] + 1 for h in r0["history"]]
    done0, done1 = ({step: (idx, replica) for step, idx, replica, _ in r["seen"]} for r in (r0, r1))
    for h in r0["history"]:
        (mine, replica0), (theirs, replica1) = done0[h[0]], done1[h[0]]
        assert replica0 and replica1 and not set(mine) & set(theirs)  # each item scored once, on a replica
        assert sorted(mine + theirs) == sorted(EvalRequest(step=h[0], sample_size=h[2], seed=0,
                                                           reason="").indices(200))


def test_a_stock_models_shards_of_different_sizes_are_scored_without_collectives_each_item_its_own_loss(launch):
    """A model whose forward takes ``**kwargs`` (every stock HF model) under HF's default
    ``average_tokens_across_devices``: the Trainer's prediction_step all-gathered the label count at every call and
    scaled the loss by the number of ranks, so shards of 17 and 16 items made unmatched collectives (gloo aborted
    the run; asynchronously it hung), and an item's loss read the other rank's labels (a multi-process probe)."""
    r0, r1 = launch["stock"]
    assert r0["history"] == r1["history"] and len(r0["history"]) >= 3 and r0["history"][-1][2] == 33
    for r, n in ((r0, 17), (r1, 16)):
        for _, mine, _, _, (losses, plain) in r["seen"]:
            assert len(mine) == n and losses == pytest.approx(plain, rel=1e-5)


def test_under_ddp_every_rank_resumes_its_own_detectors_and_decides_as_the_uninterrupted_run(saved):
    """HF saves callback state from world process zero only; each rank's detectors saw its own losses, so every
    other rank keeps its state beside the checkpoint and resumes from it (before: rank 1 resumed with rank 0's)."""
    tmp_path, full = saved
    folder = tmp_path / "checkpoint-20"
    assert (folder / "adaptive_eval_rank1.json").is_file() and not (folder / "adaptive_eval_rank0.json").exists()
    at_20 = [r["saved"]["20"] for r in full]
    assert at_20[0] != at_20[1]  # the ranks' detectors differ: a rank resumed with the other's would show
    resumed = run(tmp_path, "resume")
    assert [r["resumed_with"] for r in resumed] == [[at_20[0]], [at_20[1]]]
    for f, r in zip(full, resumed):  # the same decisions, and each rank's detectors end where they did
        assert r["history"] == f["history"] and len(f["history"]) >= 3
        assert json.loads(r["saved"]["30"])["detectors"] == json.loads(f["saved"]["30"])["detectors"]


def test_a_sharded_model_is_evaluated_with_every_rank_in_step_and_never_asynchronously(tmp_path):
    """FSDP2 (real all-gathers over gloo): the shards of 5, 7 and 1 items differ by one, and without padding the
    rank with more items waits in an all-gather the other never joins (the run fails after ddp_timeout).  Each
    rank's results equal those of the unsharded model on its own items, per item and in batches of 2; with an
    executor, a sharded model is evaluated synchronously, with a warning."""
    pytest.importorskip("torch.distributed.fsdp")
    script = Path(__file__).with_name("hf_fsdp_script.py")
    env = dict(os.environ, OMP_NUM_THREADS="1", TRANSFORMERS_VERBOSITY="error")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(script), str(tmp_path)], capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    for r, sizes in ((r0, {"5": 3, "7": 4, "1": 1}), (r1, {"5": 2, "7": 3, "1": 0})):
        assert r["collectives"] == [False, True]
        for size, n in sizes.items():
            sharded, plain = r["per_item"][size]
            assert sharded == plain and len(plain.get("eval_loss", [])) == n
            assert r["batched"][size][0] == r["batched"][size][1]
        assert r["async_kept"] is False and r["warned"] is True


def test_under_ddp_every_rank_loads_the_kept_checkpoint_and_scores_its_shard(launch):
    """look_back under DDP: every rank is handed the same checkpoint-<step> (on_save runs on every rank), loads
    it into its own model and scores its shard; the result is the checkpoint's, and both ranks train on exactly
    as without the look back."""
    from safetensors.torch import load_file

    from test_integrations_hf import Points, Tiny

    folder, (r0, r1) = launch["lookback"]
    assert r0["history"] == r1["history"]
    [back] = [h for h in r0["history"] if h[6] is not None]
    alarm = next(h for h in r0["history"] if h[1].startswith("alarm:"))
    assert back[6] == alarm[0] and back[1] == f"lookback:{alarm[1]}" and back[0] % 10 == 9 and back[0] < 39
    ckpt = str(folder / f"checkpoint-{back[0] + 1}")
    mine, theirs = ([s for s in r["seen"] if s[3] is not None] for r in (r0, r1))
    assert [s[3] for s in mine] == [s[3] for s in theirs] == [ckpt]
    asked = EvalRequest(step=back[0], sample_size=back[2], seed=0, reason="").indices(200)
    assert not set(mine[0][1]) & set(theirs[0][1]) and sorted(mine[0][1] + theirs[0][1]) == sorted(asked)
    saved, held_out = Tiny(), Points(200, 1)
    saved.load_state_dict(load_file(f"{ckpt}/model.safetensors"))
    with torch.no_grad():
        right = (saved.eval().net(held_out.x[asked]).argmax(1) == held_out.y[asked]).float().mean()
    assert back[3] == pytest.approx(float(right)) and back[3] > alarm[3] + 0.3
    p0, p1 = launch["flip"]
    assert r0["weights"] == r1["weights"] == p0["weights"] == p1["weights"]
    assert [h[:2] for h in r0["history"] if h[6] is None] == [h[:2] for h in p0["history"]]

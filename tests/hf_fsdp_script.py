"""Run by tests/test_integrations_hf_ddp.py under ``torchrun --nproc_per_node=2``: the HF adapter's own evaluation
on a model sharded with FSDP2 (``fully_shard``, real all-gathers over gloo).  The shards of a request differ by up
to one item; each rank must still make as many forward calls as the other, or the one with more waits in an
all-gather the other never joins.  (The Trainer's own FSDP wiring needs an accelerator; here the sharded copy is
handed to the callback's evaluation directly, as its asynchronous replica path does.)"""

import copy
import json
import logging
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import torch
from torch.distributed.fsdp import fully_shard
from transformers import Trainer, TrainingArguments

sys.path.insert(0, os.path.dirname(__file__))
from test_integrations_hf import FAST, Points, Tiny, accuracy  # noqa: E402

from adaptive_eval import EvalRequest  # noqa: E402
from adaptive_eval.integrations._common import forward_collectives  # noqa: E402
from adaptive_eval.integrations.hf import AdaptiveEvalCallback  # noqa: E402


class Warnings(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.seen = []

    def emit(self, record):
        self.seen.append(record.getMessage())


def main(out: str) -> None:
    rank = int(os.environ["RANK"])
    torch.manual_seed(0)
    args = TrainingArguments(out, max_steps=1, report_to=[], disable_tqdm=True, use_cpu=True, ddp_backend="gloo",
                             ddp_timeout=30, per_device_eval_batch_size=2, save_strategy="no")
    cb = AdaptiveEvalCallback("default", overrides=FAST)
    trainer = Trainer(Tiny(), args, train_dataset=Points(64, rank), eval_dataset=Points(200, 1),
                      compute_metrics=accuracy, callbacks=[cb])
    plain = copy.deepcopy(trainer.model)
    sharded = copy.deepcopy(trainer.model)
    for layer in sharded.net:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(sharded)
    got = {"collectives": [forward_collectives(plain), forward_collectives(sharded)], "per_item": {}, "batched": {}}
    for size in (5, 7, 1):  # shards 3/2, 4/3, 1/0
        request = EvalRequest(step=0, sample_size=size, seed=0, reason="t", rank=rank, world_size=2)
        for per_item in (True, False):
            cb.per_item = per_item
            mine, reference = cb._evaluate_on(request, sharded), cb._evaluate_on(request, plain)
            got["per_item" if per_item else "batched"][size] = [
                {k: [round(float(x), 5) for x in (v if isinstance(v, list) else [v])] for k, v in r.items()}
                for r in (mine, reference)]
    # Asynchronous evaluation of a sharded model would run its all-gathers in the worker thread: synchronous.
    warnings = Warnings()
    logging.getLogger("adaptive_eval").addHandler(warnings)
    pool = ThreadPoolExecutor(1)
    async_cb = AdaptiveEvalCallback("default", overrides=FAST, executor=pool, trainer=trainer)
    trainer.model = sharded
    async_cb._build(args, trainer.state, trainer, trainer.get_train_dataloader())
    got["async_kept"] = async_cb.evaluator._async is not None
    got["warned"] = any("sharded" in w for w in warnings.seen)
    pool.shutdown()
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(got, f)
    del trainer, cb, async_cb, sharded
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])

"""Switching an AReaL training loop to the adaptive evaluator, and back.

AReaL's trainers build `Evaluator(config.evaluator, ft_spec)`; `patch_areal("default")` makes them build
`adaptive_eval.integrations.areal.AdaptiveEvaluator` instead (same constructor, same `evaluate` call).  This
example runs the loop AReaL's trainers run, with AReaL's config and spec shapes (plain dataclasses here, so
that it runs without AReaL's GPU stack), a reward stream that collapses at step 120, and the recover
handler's round trip: the state it saves keeps the keys AReaL's own Evaluator reads.  Its clock is simulated (10 s
a training step, 0.05 s an eval item), so that the eval budget sees a training step's real cost and the output is
the same on every run; a real loop leaves `clock` out (wall time).

    python examples/areal_loop.py
"""

from __future__ import annotations

import dataclasses
import json
import random

from adaptive_eval.integrations.areal import AdaptiveEvaluator  # 1


@dataclasses.dataclass
class EvaluatorConfig:  # the fields of areal.api.cli_args.EvaluatorConfig the evaluator reads
    freq_epochs: int | None = None
    freq_steps: int | None = 20
    freq_secs: int | None = None
    eval_before_train: bool = True


@dataclasses.dataclass
class FinetuneSpec:  # areal.api.io_struct.FinetuneSpec
    total_train_epochs: int
    dataset_size: int
    train_batch_size: int

    @property
    def steps_per_epoch(self):
        return self.dataset_size // self.train_batch_size

    @property
    def total_train_steps(self):
        return self.total_train_epochs * self.steps_per_epoch


def main() -> None:
    rng = random.Random(0)
    ft_spec = FinetuneSpec(total_train_epochs=2, dataset_size=6400, train_batch_size=64)  # 100 steps/epoch
    now = [0.0]  # the simulated clock: a microsecond-long loop read on the wall clock left the budget no room
    evaluator = AdaptiveEvaluator(EvaluatorConfig(), ft_spec, preset="default", clock=lambda: now[0])  # 2
    quality = {"p": 0.3}

    def evaluate_fn(request):  # AReaL would submit these items to its eval rollout (rollout_evaluate_fn)
        items = request.indices(500)
        now[0] += 0.05 * len(items)
        return {"reward": [float(rng.random() < quality["p"]) for _ in items]}

    for global_step in range(ft_spec.total_train_steps):
        epoch, step = divmod(global_step, ft_spec.steps_per_epoch)
        quality["p"] = min(0.8, 0.3 + global_step * 0.004) if global_step < 120 else 0.1  # collapse at 120
        reward = quality["p"] + rng.gauss(0, 0.03)
        now[0] += 10.0  # the training step
        evaluator.observe({"train/reward": reward}, global_step)  # AReaL's stats_logger.commit has these
        result = evaluator.evaluate(evaluate_fn, epoch, step, global_step)  # 3: AReaL's call
        if result is not None:
            m = result["reward"]
            print(f"step {global_step:3d}  {result.reason:30s} n={m.n:3d}  reward {m.mean:.3f} "
                  f"[{m.ci[0]:.3f}, {m.ci[1]:.3f}]")
    info = json.loads(json.dumps(evaluator.state_dict()))  # what AReaL's RecoverHandler writes
    print("evaluator_info.json keys AReaL's Evaluator reads:", sorted(k for k in info if k in ("epoch", "step", "time")),
          "| ours under:", "trigger, policies, detectors, ...")


if __name__ == "__main__":
    main()

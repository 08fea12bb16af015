"""Per-step overhead of each framework adapter against the bare trainer step, and the glue each replaces.

Run: python benchmarks/integrations.py [--steps N] [--repeat R]

For Hugging Face and Lightning: the same tiny model (an 8-32-4 MLP, batch 16, CPU) trained for ``--steps``
optimizer steps without the callback and with ``AdaptiveEvalCallback`` (default preset; no evaluation is
ever due: ``trigger.freq_steps=null``, ``trigger.eval_at_end=false``, the alarm policy off, so this is the
cost paid at every step: the loss read-out, ``observe`` through the default detectors, ``evaluate``
deciding not to).  Two figures per trainer, each the best of ``--repeat`` runs (interleaved): the time spent
inside the callback's per-step hooks (timed around them, so the machine's load hardly moves it) against the
bare step, and the end-to-end wall time per step with and without the callback (noisy on a shared machine:
shown as measured).  For AReaL (which has no
trainer to wrap): AReaL's own ``Evaluator.evaluate`` when not due, against the shim's
``AdaptiveEvaluator.observe`` + ``evaluate`` with the same settings, per call.

Glue lines: the code lines (no blank lines, comments or docstrings) of each adapter module, i.e. what a user
of that framework would otherwise write and maintain, against the three lines the README shows.
"""

from __future__ import annotations

import argparse
import ast
import io
import logging
import os
import sys
import time
import timeit
import tokenize
import warnings
from pathlib import Path

from adaptive_eval.cli import _at_least

ROOT = Path(__file__).resolve().parent.parent
NO_EVAL = ["trigger.freq_steps=null", "trigger.eval_at_end=false", "policy.alarm.enabled=false"]


def code_lines(path: Path) -> int:
    """Lines holding code: no blank lines, comments or docstrings."""
    source = path.read_text(encoding="utf-8")
    doc_lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant) \
                    and isinstance(first.value.value, str):
                doc_lines.update(range(first.lineno, first.end_lineno + 1))
    lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                        tokenize.ENDMARKER):
            continue
        lines.update(range(tok.start[0], tok.end[0] + 1))
    return len(lines - doc_lines)


def hf_run(steps: int, with_callback: bool) -> float:
    import torch
    from torch import nn
    from transformers import Trainer, TrainingArguments

    from adaptive_eval.integrations.hf import AdaptiveEvalCallback

    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))

        def forward(self, x, labels=None):
            logits = self.net(x)
            return {"logits": logits, "loss": nn.functional.cross_entropy(logits, labels)}

    g = torch.Generator().manual_seed(0)
    x = torch.randn(16 * steps, 8, generator=g)
    data = [{"x": x[i], "labels": int(x[i, :4].argmax())} for i in range(len(x))]
    args = TrainingArguments("/tmp/adaptive_eval_bench_hf", max_steps=steps, per_device_train_batch_size=16,
                             eval_strategy="no", save_strategy="no", report_to=[], disable_tqdm=True, use_cpu=True,
                             logging_steps=10**9)
    class Timed(AdaptiveEvalCallback):
        spent = setup = 0.0

        def on_train_begin(self, *a, **kw):
            t = time.perf_counter()
            super().on_train_begin(*a, **kw)
            Timed.setup += time.perf_counter() - t

        def on_step_end(self, *a, **kw):
            t = time.perf_counter()
            super().on_step_end(*a, **kw)
            Timed.spent += time.perf_counter() - t

        def on_log(self, *a, **kw):
            t = time.perf_counter()
            super().on_log(*a, **kw)
            Timed.spent += time.perf_counter() - t

    callbacks = [Timed("default", overrides=NO_EVAL)] if with_callback else []
    torch.manual_seed(0)
    trainer = Trainer(Tiny(), args, train_dataset=data, callbacks=callbacks)
    start = time.perf_counter()
    trainer.train()
    return (time.perf_counter() - start - Timed.setup) / steps, Timed.spent / steps, Timed.setup


def lightning_run(steps: int, with_callback: bool) -> float:
    import lightning as L
    import torch
    from torch import nn
    from torch.utils.data import DataLoader

    from adaptive_eval.integrations.lightning import AdaptiveEvalCallback

    class Tiny(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))

        def training_step(self, batch, batch_idx):
            x, y = batch
            return nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=5e-5)

    g = torch.Generator().manual_seed(0)
    x = torch.randn(16 * steps, 8, generator=g)
    data = list(zip(x, x[:, :4].argmax(1)))
    class Timed(AdaptiveEvalCallback):
        spent = setup = 0.0

        def on_train_start(self, *a, **kw):
            t = time.perf_counter()
            super().on_train_start(*a, **kw)
            Timed.setup += time.perf_counter() - t

        def on_train_batch_end(self, *a, **kw):
            t = time.perf_counter()
            super().on_train_batch_end(*a, **kw)
            Timed.spent += time.perf_counter() - t

    callbacks = [Timed("default", overrides=NO_EVAL)] if with_callback else []
    torch.manual_seed(0)
    trainer = L.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu", callbacks=callbacks, limit_val_batches=0)
    start = time.perf_counter()
    trainer.fit(Tiny(), DataLoader(data, batch_size=16))
    return (time.perf_counter() - start - Timed.setup) / steps, Timed.spent / steps, Timed.setup


def areal_rows(repeat: int) -> tuple[float, float]:
    sys.path.insert(0, str(ROOT / "tests"))
    import areal_code

    from adaptive_eval.integrations import areal as shim

    areal = areal_code.load()
    if areal is None:
        return float("nan"), float("nan")
    cfg = areal.EvaluatorConfig(experiment_name="b", trial_name="b", fileroot="/tmp", freq_steps=10**9)
    spec = areal.FinetuneSpec(total_train_epochs=1, dataset_size=10**9, train_batch_size=1)
    theirs = areal.Evaluator(cfg, spec)
    ours = shim.AdaptiveEvaluator(cfg, spec, preset="default")
    ours.cfg  # noqa: B018
    state = {"g": 0}

    def step_theirs():
        state["g"] += 1
        theirs.evaluate(lambda: None, 0, state["g"], state["g"])

    def step_ours():
        state["g"] += 1
        g = state["g"]
        ours.observe({"train/reward": 0.5 + 0.01 * (g % 7), "train/loss": 1.0 - 0.01 * (g % 5)}, g)
        ours.evaluate(lambda: None, 0, g, g)

    n = 20000
    t_theirs = min(timeit.repeat(step_theirs, number=n, repeat=repeat)) / n
    t_ours = min(timeit.repeat(step_ours, number=n, repeat=repeat)) / n
    return t_theirs, t_ours


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=_at_least(20), default=300)
    parser.add_argument("--repeat", type=_at_least(1), default=3)
    a = parser.parse_args()
    import torch

    torch.set_num_threads(1)  # a tiny model: threads only add contention on a shared machine
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    out = []
    for name, run in (("Hugging Face Trainer", hf_run), ("Lightning Trainer", lightning_run)):
        bare, with_cb, hook, setup = [], [], [], []
        run(20, False), run(20, True)  # warm up imports and caches
        for _ in range(a.repeat):
            bare.append(run(a.steps, False)[0])
            total, spent, once = run(a.steps, True)
            with_cb.append(total)
            hook.append(spent)
            setup.append(once)
        out.append((name, min(bare) * 1e3, min(hook) * 1e3, min(with_cb) * 1e3, min(setup)))
    t_theirs, t_ours = areal_rows(a.repeat)
    integ = ROOT / "adaptive_eval" / "integrations"
    glue = {"hf": code_lines(integ / "hf.py"), "lightning": code_lines(integ / "lightning.py"),
            "areal": code_lines(integ / "areal.py"), "_common": code_lines(integ / "_common.py")}
    print(f"per-step overhead, {a.steps} optimizer steps, best of {a.repeat} (tiny 8-32-4 MLP, batch 16, CPU, "
          "1 thread; no evaluation due)")
    print(f"{'trainer':22s} {'bare ms/step':>12s} {'in callback':>12s} {'overhead':>9s} {'end-to-end ms/step':>19s}"
          f" {'setup once':>11s}")
    for name, bare, hook, with_cb, once in out:
        print(f"{name:22s} {bare:12.3f} {hook:12.4f} {hook / bare:8.2%} {with_cb:10.3f} ({with_cb / bare:.2f}x)"
              f" {once:9.2f} s")
    print(f"{'AReaL (per call)':22s} {t_theirs * 1e6:9.2f} us {t_ours * 1e6:9.2f} us {t_ours / t_theirs:8.2f}x"
          "  AReaL's Evaluator.evaluate vs the shim's observe (2 streams) + evaluate")
    print()
    print("glue each adapter replaces (code lines, no blanks/comments/docstrings; shared helpers counted once)")
    print(f"{'adapter':12s} {'module lines':>12s} {'user writes':>12s}")
    for key, label in (("hf", "hf"), ("lightning", "lightning"), ("areal", "areal")):
        print(f"{label:12s} {glue[key]:12d} {3:12d}")
    print(f"{'_common':12s} {glue['_common']:12d}   (config, step guard, per-item helpers: shared by hf and lightning)")


if __name__ == "__main__":
    main()

"""``adaptive-eval demo --task digits``: a real training run with a fault midway, evaluated two ways side by side.

The run: a small MLP classifier trained with SGD on scikit-learn's bundled handwritten-digits data
(1797 8x8 images, 10 classes; nothing is downloaded), 500 images held out for evaluation.  Every step
feeds three cheap streams to ``observe`` (``train/loss``, ``train/accuracy`` on the batch,
``train/grad_norm``); the evaluation function scores the model on the items that
``EvalRequest.indices`` hands it and returns per-image 0/1 correctness (``accuracy``).  Halfway through,
the learning rate is multiplied by 40 (the fault): training diverges and the held-out accuracy collapses
to chance.

The same seeded training runs twice, so both evaluators see identical models at every step:

* ``adaptive``: :class:`~adaptive_eval.AdaptiveEvaluator` with the default preset (or ``config``);
* ``fixed``: the plain AReaL schedule (the ``areal`` preset: the whole held-out set every ``freq_steps``
  steps) at the same budget: the longest interval whose evaluations spend at least as many items as the
  adaptive run did, so the comparison favours the fixed schedule on cost.

The evaluators' clock is simulated with the config's ``replay`` costs (by default 10 s a training step,
20 s + 0.5 s per item an evaluation, the proportions of an LLM RL run where evaluation is expensive), so
the budget policy acts as it would there and the same seed gives the same decisions.  Each run writes
into ``out_dir/<run>/`` what replay writes (``evals.jsonl``, ``alarms.jsonl``, ``summary.json``, ``tb/``)
plus ``run.png`` (:func:`~adaptive_eval.plot.plot_run`); ``out_dir/comparison.json`` holds the figures
that :func:`format_comparison` prints, and ``out_dir/trace.csv`` the run as a replayable trace (the three
streams and, as ``eval/accuracy``, the accuracy on the whole held-out set at every step), so other presets
can be tried on it offline with ``adaptive-eval replay``.  ``sample_size`` in ``evals.jsonl`` is the number of items
actually evaluated.  Running again into the same folder replaces the previous demo's files.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from adaptive_eval.config import as_config, load_config
from adaptive_eval.demos import DemoError, prepare_out
from adaptive_eval.replay import ReplayResult, SimClock, _strict, write_outputs
from adaptive_eval.scoring import detection_delay, pick_best
from adaptive_eval.types import EvalRequest

__all__ = ["DEFAULT_STEPS", "DemoError", "format_comparison", "run_demo"]

DEFAULT_STEPS = 3000
HELDOUT_SIZE = 500
BATCH_SIZE = 64
HIDDEN = 64
LEARNING_RATE = 0.05
MOMENTUM = 0.9
FAULT_LR_FACTOR = 40.0
METRIC = "accuracy"
# Without an evaluation before the fault to compare with, an evaluation "shows the collapse" when its
# accuracy is below this (the trained model scores about 0.97 on the held-out images, chance is 0.1).
COLLAPSE_BELOW = 0.5
RUNS = ("adaptive", "fixed")
TRACE_NAME = "trace.csv"


class _Training:
    """The seeded training run: data, model, optimizer, the fault, and the evaluation function."""

    def __init__(self, seed: int, fault_step: int, clock: SimClock, cfg):
        import torch
        from sklearn.datasets import load_digits

        self.torch = torch
        digits = load_digits()
        x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
        y = torch.tensor(digits.target, dtype=torch.long)
        self.gen = torch.Generator().manual_seed(seed)
        perm = torch.randperm(len(x), generator=self.gen)
        held, train = perm[:HELDOUT_SIZE], perm[HELDOUT_SIZE:]
        self.x_train, self.y_train = x[train], y[train]
        self.x_held, self.y_held = x[held], y[held]
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.model = torch.nn.Sequential(torch.nn.Linear(64, HIDDEN), torch.nn.ReLU(),
                                             torch.nn.Linear(HIDDEN, 10))
        self.opt = torch.optim.SGD(self.model.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM)
        self.fault_step = fault_step
        self._order = torch.randperm(len(self.x_train), generator=self.gen)
        self._pos = 0
        self.clock = clock
        self.step_seconds = float(cfg.replay.step_seconds)
        self.eval_fixed = float(cfg.replay.eval_fixed_seconds)
        self.eval_per_item = float(cfg.replay.eval_seconds_per_sample)

    def step(self, global_step: int) -> dict[str, float]:
        """One SGD step; the per-step streams."""
        torch = self.torch
        if global_step == self.fault_step:
            for group in self.opt.param_groups:
                group["lr"] = LEARNING_RATE * FAULT_LR_FACTOR
        if self._pos + BATCH_SIZE > len(self._order):
            self._order = torch.randperm(len(self.x_train), generator=self.gen)
            self._pos = 0
        idx = self._order[self._pos:self._pos + BATCH_SIZE]
        self._pos += BATCH_SIZE
        self.model.train()
        logits = self.model(self.x_train[idx])
        target = self.y_train[idx]
        loss = torch.nn.functional.cross_entropy(logits, target)
        self.opt.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), math.inf)
        self.opt.step()
        self.clock.trace_time += self.step_seconds
        return {"train/loss": loss.item(), "train/accuracy": (logits.argmax(1) == target).float().mean().item(),
                "train/grad_norm": grad_norm.item()}

    def evaluate(self, request: EvalRequest) -> dict:
        """Per-item 0/1 correctness on this request's part of the held-out set."""
        torch = self.torch
        idx = request.indices(len(self.x_held))
        self.clock.eval_time += self.eval_fixed + self.eval_per_item * len(idx)
        self.model.eval()
        with torch.inference_mode():
            index = torch.tensor(idx, dtype=torch.long)
            pred = self.model(self.x_held[index]).argmax(1)
            return {METRIC: (pred == self.y_held[index]).float().numpy()}

    def true_accuracy(self) -> float:
        """Accuracy on the whole held-out set, for scoring only: the evaluators never see it."""
        torch = self.torch
        self.model.eval()
        with torch.inference_mode():
            return (self.model(self.x_held).argmax(1) == self.y_held).float().mean().item()


def _run(name: str, cfg, *, steps: int, seed: int, fault_step: int, run_dir: Path, progress: bool,
         trace_path: Path | None = None) -> tuple[ReplayResult, dict[int, float]]:
    """One training run under ``cfg``: what its evaluator decided, and the true accuracy at every step.

    With ``trace_path``, every step's streams and true accuracy (as ``eval/accuracy``) are recorded there."""
    import torch
    from tqdm import tqdm

    from adaptive_eval.adaptive import AdaptiveEvaluator
    from adaptive_eval.tensorboard import make_logger
    from adaptive_eval.trace import TraceRecorder

    clock = SimClock()
    training = _Training(seed, fault_step, clock, cfg)
    logger = make_logger(run_dir / "tb", flush_secs=cfg.logging.flush_secs)
    evaluator = AdaptiveEvaluator.from_config(cfg, total_steps=steps, clock=clock, logger=logger)
    out = ReplayResult()
    truth: dict[int, float] = {}
    evaluator.add_listener(out.listen)
    bar = tqdm(total=steps, desc=f"{name:>8} run", unit="step", disable=not progress, file=sys.stderr,
               mininterval=0.25, leave=True)
    recorder = TraceRecorder(trace_path) if trace_path is not None else None
    started = time.perf_counter()
    try:
        with torch.random.fork_rng(devices=[]):
            for global_step in range(steps):
                metrics = training.step(global_step)
                truth[global_step] = training.true_accuracy()
                if recorder is not None:
                    recorder.record(global_step, {**metrics, f"eval/{METRIC}": truth[global_step]})
                evaluator.observe(metrics, global_step)
                evaluator.evaluate(training.evaluate, 0, global_step, global_step)
                if out.evals and (global_step % 50 == 49 or global_step == steps - 1):
                    bar.set_postfix(evals=len(out.evals), refresh=False)
                if global_step % 50 == 49 and global_step < steps - 1:
                    bar.update(global_step + 1 - bar.n)
            bar.n = steps  # close() draws the 100% line (an update to 100% first would print it twice in a log)
    finally:
        bar.close()
        if recorder is not None:
            recorder.close()
        evaluator.close()  # (before the summary: an asynchronous run's last evaluation joins here; a review)
        s = evaluator.summary()
    out.summary = {"steps": steps, "evals": s["evals"], "samples": sum(e["sample_size"] or 0 for e in out.evals),
                   "eval_seconds": s["eval_seconds"], "train_seconds": clock.trace_time, "alarms": s["alarms"],
                   "deferrals": s["deferrals"], "eval_errors": s["eval_errors"], "cancelled": s["cancelled"],
                   "wall_seconds": round(time.perf_counter() - started, 3)}
    return out, truth


def _shows_fault(evals: list[dict], fault_step: int) -> list[dict]:
    """The evaluations at or after the fault that show it: their interval lies wholly below the interval
    of the last evaluation before the fault (without one, their accuracy is below ``COLLAPSE_BELOW``)."""
    before = [e for e in evals if e["step"] < fault_step and METRIC in e["ci"]]
    after = [e for e in evals if e["step"] >= fault_step and METRIC in e["ci"]]
    if before:
        floor = before[-1]["ci"][METRIC][0]
        return [e for e in after if e["ci"][METRIC][1] < floor]
    return [e for e in after if e["metrics"][METRIC] < COLLAPSE_BELOW]


def _figures(result: ReplayResult, truth: dict[int, float], fault_step: int) -> dict:
    evals = result.evals
    measured = [e for e in evals if math.isfinite(e["metrics"].get(METRIC, math.nan))]
    delay = detection_delay(_shows_fault(measured, fault_step), fault_step, min_samples=1)
    # Without an evaluation before the fault there is no interval to fall below: the accuracy threshold is the rule,
    # said beside the delay (--steps 40: "4 steps" against the fixed run's 19 by an interval, unsaid; a probe)
    by_interval = any(e["step"] < fault_step and METRIC in e["ci"] for e in measured)
    # By the shrunk estimate (scoring.pick_best): a lucky small sample is pulled towards its neighbours and
    # does not win; the estimate and its interval are what the pick is worth.
    pick = pick_best(measured, METRIC)
    best = pick.eval if pick else None
    last = measured[-1] if measured else None
    return {
        "evals": len(evals),
        "samples": int(sum(e["sample_size"] or 0 for e in evals)),
        "alarms": len(result.alarms),
        "deferrals": len(result.deferrals),
        "fault_delay": delay,
        "fault_rule": "interval" if by_interval else f"accuracy below {COLLAPSE_BELOW:g}",
        "best_step": best["step"] if best else None,
        "best_accuracy": best["metrics"][METRIC] if best else None,
        "best_true_accuracy": truth.get(best["step"]) if best else None,
        "best_estimate": pick.estimate if pick else None,
        "best_interval": list(pick.interval) if pick else None,
        "best_sample_size": best["sample_size"] if best else None,
        "final_step": last["step"] if last else None,
        "final_accuracy": last["metrics"][METRIC] if last else None,
        "peak_true_accuracy": max(truth.values(), default=None),
        "peak_step": max(truth, key=truth.__getitem__, default=None),
    }


def fixed_interval(samples: int, steps: int, set_size: int = HELDOUT_SIZE) -> int:
    """The longest whole-set interval that spends more than ``samples`` items in ``steps`` steps.

    >>> fixed_interval(1700, 3000)   # 4 evaluations of 500 items (2000 > 1700): every 750 steps
    750
    >>> fixed_interval(1500, 3000)   # 4 evaluations too: 3 would spend only as many
    750
    """
    evals = samples // set_size + 1
    return max(1, steps // evals)


def run_demo(out_dir: str | os.PathLike = "runs/demo", *, steps: int = DEFAULT_STEPS, seed: int = 0,
             config: str | None = None, overrides: Sequence[str] = (), fault_step: int | None = None,
             progress: bool = True, plot: bool = True, fault: str = "lr_blowup") -> dict:
    """Train twice (adaptive, then fixed at the same budget), write both runs, return the comparison.

    ``config``/``overrides`` choose the adaptive run's preset (default: ``default``).  ``fault_step``
    defaults to the middle of the run; ``plot=False`` skips the PNGs.  Raises :class:`DemoError` before any training when ``out_dir``
    cannot be written or a setting is impossible.
    """
    if fault != "lr_blowup":
        raise DemoError(f"--fault {fault!r}: unknown; the digits task knows lr_blowup")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 20:
        raise DemoError(f"--steps {steps!r}: too few; the digits task needs at least 20")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise DemoError(f"seed must be an integer, got {seed!r}")
    if fault_step is None:
        fault_step = steps // 2
    if not 0 < fault_step < steps:
        raise DemoError(f"fault_step must lie within (0, {steps}), got {fault_step}")
    adaptive_cfg = as_config(load_config(config, list(overrides)))
    out = Path(out_dir)
    prepare_out(out, RUNS)

    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread is fastest, and the arithmetic is reproducible
    try:
        adaptive, adaptive_truth = _run("adaptive", adaptive_cfg, steps=steps, seed=seed, fault_step=fault_step,
                        run_dir=out / "adaptive", progress=progress, trace_path=out / TRACE_NAME)
        interval = fixed_interval(adaptive.summary["samples"], steps)
        fixed_cfg = load_config("areal", [f"trigger.freq_steps={interval}"])
        fixed, fixed_truth = _run("fixed", fixed_cfg, steps=steps, seed=seed, fault_step=fault_step,
                     run_dir=out / "fixed", progress=progress)
    finally:
        torch.set_num_threads(threads)

    from adaptive_eval.plot import plot_run

    report = {"steps": steps, "seed": seed, "fault_step": fault_step, "fault": f"learning rate x{FAULT_LR_FACTOR:g}",
              "heldout_size": HELDOUT_SIZE, "metric": METRIC, "collapse_below": COLLAPSE_BELOW,
              "adaptive_config": config or "default", "fixed_freq_steps": interval, "out": str(out),
              # Both runs must have trained the same models, step for step, for the comparison to hold.
              "identical_training": adaptive_truth == fixed_truth}
    for name, result, truth in (("adaptive", adaptive, adaptive_truth), ("fixed", fixed, fixed_truth)):
        run_dir = out / name
        report[name] = _figures(result, truth, fault_step)
        f = report[name]
        result.summary["best"] = None if f["best_step"] is None else {
            "metric": METRIC, "step": f["best_step"], "estimate": f["best_estimate"], "interval": f["best_interval"],
            "measured": f["best_accuracy"], "sample_size": f["best_sample_size"], "true": f["best_true_accuracy"]}
        # (as the rlvr demo's: 30,000 s of train_seconds for a run of seconds, unlabelled; a probe)
        result.summary["simulated"] = ("train_seconds and eval_seconds on the simulated clock (the config's replay.* "
                                       "costs); the evaluations are the model's answers; wall_seconds is "
                                       "this machine's real time (it varies run to run; a probe)")
        write_outputs(result, run_dir)
        if plot:
            report[name]["png"] = str(plot_run(run_dir))
    # Where the fault falls between two fixed evaluations is luck: the mean delay over all positions.
    report["fixed"]["mean_fault_delay"] = (interval - 1) / 2
    (out / "comparison.json").write_text(json.dumps(_strict(report), indent=2, allow_nan=False) + "\n", encoding="utf-8")
    return report


def _delay(d: dict) -> str:
    rule = d.get("fault_rule", "interval")
    how = "" if rule == "interval" else f" ({rule}: no evaluation before the fault)"
    if d["fault_delay"] is None:
        return "missed" + how
    return f"{d['fault_delay']} step" + ("" if d["fault_delay"] == 1 else "s") + how


def _best(d: dict) -> str:
    if d["best_accuracy"] is None:
        return "-"
    if d.get("best_estimate") is None:
        return f"{d['best_accuracy']:.3f} at step {d['best_step']} (true {d['best_true_accuracy']:.3f})"
    low, high = d["best_interval"]
    return (f"step {d['best_step']}: {d['best_estimate']:.3f} [{low:.3f}, {high:.3f}] (measured {d['best_accuracy']:.3f}"
            f" on {d['best_sample_size']}; true {d['best_true_accuracy']:.3f})")


def _final(d: dict) -> str:
    return "-" if d["final_accuracy"] is None else f"{d['final_accuracy']:.3f} at step {d['final_step']}"


def format_comparison(report: dict) -> str:
    """The comparison table ``adaptive-eval demo`` prints."""
    a, f = report["adaptive"], report["fixed"]
    rows = [
        ("", f"adaptive ({report['adaptive_config']} preset)",
         f"fixed (areal, every {report['fixed_freq_steps']} steps)"),
        ("evaluations", str(a["evals"]), str(f["evals"])),
        ("eval samples", str(a["samples"]), str(f["samples"])),
        ("alarms", str(a["alarms"]), str(f["alarms"])),
        ("fault caught after", _delay(a), f"{_delay(f)} (mean {f['mean_fault_delay']:.0f})"),
        ("best checkpoint (shrunk estimate)", _best(a), _best(f)),
        ("last eval", _final(a), _final(f)),
    ]
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    peak = a["peak_true_accuracy"]
    out = report["out"]
    lines = [f"fault: {report['fault']} at step {report['fault_step']} of {report['steps']}; "
             f"{report['metric']} on {report['heldout_size']} held-out digits collapses to chance", ""]
    lines += [f"  {r[0]:<{w0}}  {r[1]:<{w1}}  {r[2]}".rstrip() for r in rows]
    lines += ["",
              "caught: the first evaluation at or after the fault whose interval lies below the last one before it;",
              "  mean: the fixed schedule's delay averaged over where the fault could fall between two of its evals",
              f"true: {report['metric']} on all {report['heldout_size']} held-out digits at that step, computed for "
              "scoring only" + ("" if peak is None else f" (the run's peak: {peak:.3f} at step {a['peak_step']})"),
              f"wrote {out}/adaptive/ and {out}/fixed/: evals.jsonl, alarms.jsonl, summary.json, tb/, run.png; "
              f"the run as a trace: {out}/{TRACE_NAME}",
              f"look: tensorboard --logdir {out}, and open http://localhost:6006/?smoothing=0 (the dashboard, "
              "unsmoothed: http://localhost:6006/#custom_scalars&_smoothingWeight=0)"]
    return "\n".join(lines)

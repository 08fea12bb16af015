"""Offline replay: drive an :class:`AdaptiveEvaluator` over a recorded trace with a simulated clock and a
simulated ``evaluate_fn``.

* Clock: the trace's ``time`` column (seconds since start) or ``replay.step_seconds`` per step, plus the
  simulated time of every evaluation so far (evaluations take wall time in a live run too).
* ``evaluate_fn``: built from the ``eval/<metric>`` columns, each carried forward between rows.  A value
  within [0, 1] is a proportion: an eval of n items draws Binomial(n, p) correct answers.  Another value
  with a column ``eval/<metric>:std`` (per-sample standard deviation) draws n samples of Normal(mean, std)
  (so the mean is Normal(mean, std/sqrt(n))); without it the value itself is returned.  The number of items
  is ``min(sample_size, replay.eval_set_size)``.
* Eval cost: ``replay.eval_fixed_seconds + replay.eval_seconds_per_sample * n`` on the simulated clock, so
  the budget policy acts as it would live.

The same trace, config and seed give byte-identical outputs.

Each record is one training step for the evaluator (one ``observe`` and one ``evaluate`` call), as in a live
run: the trigger's ``freq_steps``, the cooldown and the intervals count records.  A trace logged every k
steps replays with intervals k times longer in training steps; convert or resample it first if that matters.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from adaptive_eval.adaptive import AdaptiveEvaluator
from adaptive_eval.config import as_config
from adaptive_eval.loggers import MetricLogger, NullLogger
from adaptive_eval.types import EvalRequest, EvalResult

__all__ = ["ReplayResult", "SimClock", "replay", "write_outputs"]


class SimClock:
    """The simulated clock: the trace's time plus the simulated evaluation time so far."""

    def __init__(self) -> None:
        self.trace_time = 0.0
        self.eval_time = 0.0

    def __call__(self) -> float:
        return self.trace_time + self.eval_time


@dataclass
class ReplayResult:
    evals: list[dict] = field(default_factory=list)  # evals.jsonl lines
    alarms: list[dict] = field(default_factory=list)  # alarms.jsonl lines
    deferrals: list[dict] = field(default_factory=list)
    summary: dict = field(default_factory=dict)
    results: list[EvalResult] = field(default_factory=list)

    def listen(self, event: dict) -> None:
        """An :meth:`AdaptiveEvaluator.add_listener` callback that collects the output lines."""
        kind = event["kind"]
        if kind == "alarm":
            self.alarms.append({k: event[k] for k in ("step", "stream", "detector", "direction", "location")})
        elif kind == "eval":
            self.results.append(event["result"])
            self.evals.append(event["result"].to_dict())
        elif kind == "deferred":
            self.deferrals.append({"step": event["step"], "reason": event["reason"]})


def _split_columns(names: Iterable[str]) -> tuple[list[str], dict[str, str | None]]:
    """(cheap stream columns, {eval metric: its std column or None})."""
    # Tags the evaluator itself writes to TensorBoard are not data: replaying a run's tb/ folder watches
    # its streams/<name> and evaluates from its eval/<metric> means.
    names = [n for n in names if not n.startswith(("controller/", "alarms/"))
             and not (n.startswith("eval/") and n.endswith(("/ci_low", "/ci_high", "/n", "/samples_per_item", "/nan")))
             and not (n.startswith("eval/") and "/paired_diff" in n)]
    evals = {}
    for n in names:
        if n.startswith("eval/") and not n.endswith(":std"):
            std = f"{n}:std"
            evals[n[len("eval/"):]] = std if std in names else None
    streams = [n for n in names if not n.startswith("eval/")]
    return streams, evals


class _SimulatedEval:
    """A simulated ``evaluate_fn`` over the carried-forward eval columns."""

    def __init__(self, metrics: dict[str, str | None], cfg, clock: SimClock, seed: int):
        self.metrics = metrics
        self.truth: dict[str, float] = {}
        self.std: dict[str, float] = {}
        self.clock = clock
        self.rng = np.random.Generator(np.random.PCG64(seed))
        self.set_size = int(cfg.replay.eval_set_size)
        self.fixed = float(cfg.replay.eval_fixed_seconds)
        self.per_sample = float(cfg.replay.eval_seconds_per_sample)

    def update(self, metrics: dict[str, float]) -> None:
        for name, std_col in self.metrics.items():
            v = metrics.get(f"eval/{name}")
            if v is not None:
                self.truth[name] = v
            if std_col is not None and std_col in metrics:
                self.std[name] = metrics[std_col]

    def __call__(self, request: EvalRequest) -> dict:
        n = len(request.indices(self.set_size))
        self.clock.eval_time += self.fixed + self.per_sample * n
        out = {}
        for name in self.metrics:
            v = self.truth.get(name)
            if v is None:
                continue
            if not math.isfinite(v):
                out[name] = v
            elif 0.0 <= v <= 1.0:
                k = int(self.rng.binomial(n, v))
                values = np.zeros(n)
                values[:k] = 1.0
                out[name] = values
            elif name in self.std and math.isfinite(self.std[name]) and n > 0:
                out[name] = self.rng.normal(v, self.std[name], size=n)
            else:
                out[name] = v
        return out


def replay(trace, cfg=None, *, seed: int = 0, logger: MetricLogger | None = None,
           streams: Sequence[str] | None = None, progress: Callable[[int], None] | None = None) -> ReplayResult:
    """Replay ``trace`` (a :class:`~adaptive_eval.trace.Trace`) under ``cfg``; return what was decided.

    ``streams`` limits the cheap streams fed to ``observe`` (default: every non-eval column).
    ``seed`` seeds the simulated evaluations (and nothing else: decisions are deterministic given them).
    """
    cfg = as_config(cfg)
    records = trace.records
    names = sorted({k for r in records for k in r.metrics})
    stream_cols, eval_cols = _split_columns(names)
    if streams is not None:
        missing = [s for s in streams if s not in stream_cols]
        if missing:
            raise ValueError(f"{trace.source}: no column {', '.join(map(repr, missing))} to watch "
                             f"(columns: {', '.join(names)})")
        stream_cols = list(streams)
    watched = frozenset(stream_cols)
    clock = SimClock()
    sim = _SimulatedEval(eval_cols, cfg, clock, seed)
    steps_per_epoch = _steps_per_epoch(records)
    if cfg.trigger.freq_epochs is not None and steps_per_epoch is None:
        raise ValueError(f"{trace.source}: trigger.freq_epochs needs an epoch column in the trace")
    total = records[-1].step + 1 if records else 0
    evaluator = AdaptiveEvaluator(cfg, steps_per_epoch=steps_per_epoch, total_steps=total, clock=clock,
                                  logger=logger if logger is not None else NullLogger())
    out = ReplayResult()
    evaluator.add_listener(out.listen)
    step_seconds = float(cfg.replay.step_seconds)
    use_time = all(r.time is not None for r in records)
    fn = sim.__call__
    epoch_start = 0
    last_epoch = None
    for i, rec in enumerate(records):
        clock.trace_time = rec.time if use_time else (i + 1) * step_seconds
        metrics = rec.metrics
        if eval_cols:
            sim.update(metrics)
        cheap = {k: v for k, v in metrics.items() if k in watched}
        if cheap:
            evaluator.observe(cheap, rec.step)
        epoch = rec.epoch if rec.epoch is not None else 0
        if epoch != last_epoch:
            epoch_start, last_epoch = i, epoch
        evaluator.evaluate(fn, epoch, i - epoch_start, rec.step)
        if progress is not None and i % 1000 == 0:
            progress(i)
    s = evaluator.summary()
    out.summary = {"steps": len(records), "evals": s["evals"], "samples": s["samples"],
                   "eval_seconds": s["eval_seconds"], "train_seconds": clock.trace_time,
                   "alarms": s["alarms"], "deferrals": s["deferrals"], "eval_errors": s["eval_errors"]}
    evaluator.close()
    return out


def _steps_per_epoch(records) -> int | None:
    if not records or records[0].epoch is None:
        return None
    lengths = []
    run, cur = 0, records[0].epoch
    for r in records:
        if r.epoch != cur:
            lengths.append(run)
            run, cur = 0, r.epoch
        run += 1
    return max(lengths) if lengths else run


def _dump(obj) -> str:
    return json.dumps(obj, allow_nan=True, separators=(", ", ": "))


def write_outputs(result: ReplayResult, out_dir: str | os.PathLike) -> None:
    """Write ``evals.jsonl``, ``alarms.jsonl`` and ``summary.json`` into ``out_dir``."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "evals.jsonl"), "w", encoding="utf-8") as f:
        f.writelines(_dump(e) + "\n" for e in result.evals)
    with open(os.path.join(out_dir, "alarms.jsonl"), "w", encoding="utf-8") as f:
        f.writelines(_dump(a) + "\n" for a in result.alarms)
    with open(os.path.join(out_dir, "summary.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(result.summary, indent=2, allow_nan=True) + "\n")

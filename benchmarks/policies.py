"""Does the adaptive evaluator beat a fixed schedule?  Presets against fixed every-k schedules, by replay.

Run: python benchmarks/policies.py [--quick] [--seeds N] [--png out.png]

For each preset (default, aggressive, budget) and each fixed schedule (the ``areal`` preset, the whole eval
set every k steps, k from 5 to 500), replay every trace of the benchmark set — the synthetic suite (all kinds,
onsets and magnitudes drawn from the seed) and the converted real traces that have per-step streams — and
score it with ``adaptive_eval.scoring``:

* samples: eval items spent per 1,000 training steps (a whole-set eval counts ``replay.eval_set_size``);
* delay: per event, steps from its onset to the first evaluation of at least 32 items at or after it
  (an event never caught counts as a miss and as an infinite delay for the median);
* caught<=25: share of events caught within 25 steps;
* regret: true value of the best step minus the true value at the step of the best measured evaluation,
  as a share of the trace's range of true values (mean over traces with an eval metric).

Headline: the eval samples the fixed schedule needs for the same median delay (interpolated on the fixed
curve), divided by the preset's.  Also printed: replay speed (steps/s, TensorBoard off).
"""

from __future__ import annotations

import argparse
import math
import pathlib
import statistics
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from adaptive_eval import load_config
from adaptive_eval.replay import replay
from adaptive_eval.scoring import caught_within, detection_delays, eval_samples, selection_regret
from adaptive_eval.synthetic import make_trace, suite

PRESETS = ("default", "aggressive", "budget")
FIXED_K = (5, 10, 25, 50, 100, 200, 500)
REAL_WITH_STREAMS = ("grpo_no_kl", "grpo_tracking", "grpo_clip_ratio", "grpo_kl_collapse", "grpo_format_reward",
                     "nanogpt_124m", "nanogpt_1b", "distill_r1", "sb3_pong")


@dataclass
class Case:
    name: str
    trace: object
    events: list
    truth: object
    metric: str | None
    higher_is_better: bool = True
    items: int = 500  # items in the eval set


@dataclass
class Score:
    samples: int = 0
    steps: int = 0
    delays: list = field(default_factory=list)
    regrets: list = field(default_factory=list)
    seconds: float = 0.0

    def add(self, other: "Score") -> None:
        self.samples += other.samples
        self.steps += other.steps
        self.delays += other.delays
        self.regrets += other.regrets
        self.seconds += other.seconds

    @property
    def per_1k(self) -> float:
        return 1000.0 * self.samples / max(self.steps, 1)

    @property
    def median_delay(self) -> float:
        if not self.delays:
            return math.nan
        return statistics.median(math.inf if d is None else d for d in self.delays)

    @property
    def regret(self) -> float:
        finite = [r for r in self.regrets if math.isfinite(r)]
        return sum(finite) / len(finite) if finite else math.nan


def cases(seeds: int, steps: int, quick: bool) -> list[Case]:
    out = []
    for seed in range(seeds):
        for st in suite(seed, steps=steps, per_kind=1 if quick else 2):
            out.append(Case(f"synthetic/{st.name}", st.trace, st.events, st.truth, "eval/accuracy"))
    try:
        from adaptive_eval.convert import load_real, real_traces

        present = {i.name for i in real_traces()}
    except Exception as exc:  # noqa: BLE001 - real traces are optional
        print(f"(real traces unavailable: {exc})", file=sys.stderr)
        present = set()
    for name in REAL_WITH_STREAMS:
        if name not in present or (quick and name == "nanogpt_1b"):
            continue
        rt = load_real(name)
        items = rt.items.get(rt.eval_metric, 500) if rt.eval_metric else 500
        out.append(Case(f"real/{name}", rt.trace, rt.events, rt.truth, rt.eval_metric, rt.higher_is_better,
                        items))
    return out


def cost_overrides(case: Case) -> list[str]:
    """The eval set (the trace's own item count where known, else 500 items) and the eval cost model, in
    the trace's own time: a whole-set eval costs 3 training steps.

    (A GRPO step that generates rollouts takes about as long as generating answers to a few hundred
    MATH-500 problems.)  Every schedule is replayed under the same model; only the budget policy reads it.
    """
    times = [r.time for r in case.trace.records]
    if all(t is not None for t in times) and len(times) > 1:
        dt = float(np.median(np.diff(times)))
    else:
        dt = 10.0
    dt = dt if dt > 0 else 10.0
    return [f"replay.step_seconds={dt}", f"replay.eval_fixed_seconds={0.5 * dt}",
            f"replay.eval_seconds_per_sample={2.5 * dt / case.items}", f"replay.eval_set_size={case.items}"]


def score(case: Case, cfg, seed: int) -> Score:
    from omegaconf import OmegaConf

    cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist(cost_overrides(case)))
    t0 = time.perf_counter()
    res = replay(case.trace, cfg, seed=seed)
    seconds = time.perf_counter() - t0
    full = case.items
    steps = [r.step for r in case.trace.records]
    index = {s: i for i, s in enumerate(steps)}
    evals = [{**e, "step": index.get(e["step"], e["step"])} for e in res.evals]
    delays = detection_delays(evals, [index.get(ev.step, ev.step) for ev in case.events], min_samples=32,
                              full_size=full)
    regrets = []
    if case.metric is not None and case.truth is not None:
        metric = case.metric[len("eval/"):]
        truth = [float(v) for v in case.truth]
        finite = [v for v in truth if math.isfinite(v)]
        spread = (max(finite) - min(finite)) if finite else 0.0
        r = selection_regret(evals, truth, metric, higher_is_better=case.higher_is_better)
        # In units of the trace's own range of true values, so that traces of different metrics average.
        regrets.append(r / spread if spread > 0 and math.isfinite(r) else (0.0 if r == 0 else math.nan))
    return Score(samples=eval_samples(res.evals, full), steps=len(steps), delays=delays, regrets=regrets,
                 seconds=seconds)


def run_config(label: str, cfg, all_cases: list[Case], seed: int) -> Score:
    total = Score()
    for case in all_cases:
        total.add(score(case, cfg, seed))
    return total


def interp_fixed(fixed: dict[int, Score], delay: float, attr: str = "per_1k") -> float:
    """The fixed schedules' ``attr`` at a given median delay (log-log interpolation between k values)."""
    pts = sorted((s.median_delay, getattr(s, attr)) for s in fixed.values() if math.isfinite(s.median_delay))
    if not pts or not math.isfinite(delay):
        return math.nan
    xs = [max(p[0], 0.5) for p in pts]
    ys = [p[1] for p in pts]
    d = max(delay, 0.5)
    if d <= xs[0]:
        return ys[0]
    if d >= xs[-1]:
        return ys[-1]
    return float(np.exp(np.interp(np.log(d), np.log(xs), np.log(np.maximum(ys, 1e-9)))))


def interp_regret_at_cost(fixed: dict[int, Score], per_1k: float) -> float:
    pts = sorted((s.per_1k, s.regret) for s in fixed.values())
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    return float(np.interp(per_1k, xs, ys))


def replay_speed(steps: int = 200_000) -> float:
    st = make_trace("spikes", steps=steps, seed=0)
    cfg = load_config(overrides=["logging.tensorboard_dir=null"])
    t0 = time.perf_counter()
    replay(st.trace, cfg, seed=0)
    return steps / (time.perf_counter() - t0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one trace per kind, one seed, no 20k-step trace")
    ap.add_argument("--seeds", type=int, default=2, help="seeds of the synthetic suite")
    ap.add_argument("--steps", type=int, default=1000, help="steps of each synthetic trace")
    ap.add_argument("--png", default="benchmarks/policies.png", help="where to draw cost against delay")
    ap.add_argument("--set", action="append", default=[], dest="overrides", help="override for every preset")
    args = ap.parse_args(argv)
    seeds = 1 if args.quick else args.seeds
    all_cases = cases(seeds, args.steps, args.quick)
    n_events = sum(len(c.events) for c in all_cases)
    print(f"{len(all_cases)} traces ({sum(c.name.startswith('real/') for c in all_cases)} real), {n_events} events\n")

    fixed: dict[int, Score] = {}
    rows = []
    for k in FIXED_K:
        cfg = load_config("areal", [f"trigger.freq_steps={k}"])
        fixed[k] = run_config(f"fixed k={k}", cfg, all_cases, 0)
        rows.append((f"fixed every {k}", fixed[k]))
    presets = {}
    for name in PRESETS:
        cfg = load_config(name, args.overrides)
        presets[name] = run_config(name, cfg, all_cases, 0)
        rows.append((name, presets[name]))

    print(f"{'schedule':18s} {'samples/1k':>10s} {'median delay':>12s} {'caught<=25':>10s} {'missed':>6s} "
          f"{'regret':>7s} {'replay s':>8s}")
    for label, s in rows:
        missed = sum(d is None for d in s.delays)
        print(f"{label:18s} {s.per_1k:10.0f} {s.median_delay:12.1f} {caught_within(s.delays, 25):10.0%} "
              f"{missed:6d} {s.regret:7.1%} {s.seconds:8.1f}")

    print("\nheadline: fixed-schedule samples at the same median delay / preset samples")
    print(f"{'preset':12s} {'fixed samples/1k':>16s} {'ratio':>7s} {'fixed regret at equal cost':>27s}")
    for name, s in presets.items():
        at_delay = interp_fixed(fixed, s.median_delay)
        ratio = at_delay / s.per_1k if s.per_1k else math.nan
        print(f"{name:12s} {at_delay:16.0f} {ratio:6.1f}x {interp_regret_at_cost(fixed, s.per_1k):27.2%}")

    print("\nper-event delay of the default preset (steps; - = missed)")
    cfg = load_config("default", args.overrides)
    for case in all_cases:
        if not case.events:
            continue
        sc = score(case, cfg, 0)
        shown = ", ".join(f"{ev.kind}@{ev.step}: {'-' if d is None else d}" for ev, d in zip(case.events, sc.delays))
        print(f"  {case.name:45s} {shown}")

    speed = replay_speed(50_000 if args.quick else 200_000)
    print(f"\nreplay speed (default preset, 3 streams, TensorBoard off): {speed:,.0f} steps/s")
    if args.png:
        draw(fixed, presets, args.png)
        print(f"wrote {args.png}")
    return 0


def draw(fixed: dict[int, Score], presets: dict[str, Score], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 5))
    pts = [(s.median_delay, s.per_1k, k) for k, s in fixed.items()]
    ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color="gray", label="fixed every k steps")
    for d, c, k in pts:
        ax.annotate(f"k={k}", (d, c), textcoords="offset points", xytext=(4, 4), fontsize=8, color="gray")
    for name, s in presets.items():
        ax.plot([s.median_delay], [s.per_1k], "*", markersize=14, label=f"preset {name}")
    ax.set_xscale("symlog", linthresh=1)
    ax.set_yscale("log")
    ax.set_xlabel("median detection delay (steps)")
    ax.set_ylabel("eval samples per 1,000 training steps")
    ax.set_title("Eval cost against detection delay (lower left is better)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())

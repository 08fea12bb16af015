"""Traces from a second generator written outside the project: 18 LLM RL fine-tuning runs (SIMULATED).

Written by another outside reviewer (a helper session in the twenty-ninth session, after the change it was meant
to check), who read neither ``adaptive_eval.synthetic`` nor ``benchmarks/outside_traces.py``.  Six kinds x 3
runs x 1,000 steps: a learning-rate spike (a sharp collapse that half recovers), an entropy collapse (accuracy
degrades slowly), a steady slow improvement, a data-loader bug (the reward jumps for 40 steps, the accuracy does
not: a false-alarm trap), slow overfitting (the accuracy falls over 300 steps while the reward rises), bursts of
NaN in grad_norm (no accuracy event).  Some runs log only reward and loss.  Writes ``<kind>-<i>.csv`` and its
events sidecar into the folder given::

    python benchmarks/outside_traces2.py /tmp/outside2
    python benchmarks/policies.py /tmp/outside2/*.csv --presets default

numpy only, fixed seeds (the same files every run).
"""
import os
import sys

import numpy as np

N = 1000
if len(sys.argv) == 2 and sys.argv[1] in ("-h", "--help"):
    print(__doc__)
    sys.exit(0)
if len(sys.argv) != 2 or sys.argv[1].startswith("-"):  # (--help was a folder it wrote 32 files into; a probe)
    print(f"usage: python {sys.argv[0]} FOLDER  (the folder to write the runs into)", file=sys.stderr)
    sys.exit(2)
OUT = sys.argv[1]
os.makedirs(OUT, exist_ok=True)


def ar1(rng, n, phi, sd):
    """AR(1) with stationary sd `sd`."""
    e = rng.standard_normal(n) * sd * np.sqrt(1 - phi ** 2)
    x = np.empty(n)
    x[0] = rng.standard_normal() * sd
    for t in range(1, n):
        x[t] = phi * x[t - 1] + e[t]
    return x


def student(rng, n, df, scale):
    return rng.standard_t(df, n) * scale


def smoothstep(t, t0, width):
    """0 before t0, 1 after t0+width, smooth in between."""
    z = np.clip((t - t0) / max(width, 1e-9), 0, 1)
    return z * z * (3 - 2 * z)


def base_curve(rng, t, a0, a1, tau):
    """Saturating learning curve from a0 towards a1."""
    return a0 + (a1 - a0) * (1 - np.exp(-t / tau))


def streams_from(rng, t, acc, *, reward_shift=None, ent_mult=None, kl_add=None, len_add=None,
                 gn_mult=None, loss_add=None, batch=256):
    """Per-step streams loosely coupled to the training-set correctness (which tracks accuracy + gap)."""
    n = len(t)
    # training reward: training-set pass rate, a bit above held-out accuracy, binomial batch noise + AR drift
    train_gap = 0.06 + 0.04 * (t / N)  # generalisation gap grows slowly
    p = np.clip(acc + train_gap + ar1(rng, n, 0.95, 0.015), 0.01, 0.99)
    if reward_shift is not None:
        p = np.clip(p + reward_shift, 0.01, 0.99)
    reward = rng.binomial(batch, p) / batch
    # entropy: slowly decreasing, AR noise
    entropy = (0.9 * np.exp(-t / 1500) + 0.25) * (1 + ar1(rng, n, 0.9, 0.03)) + student(rng, n, 4, 0.01)
    if ent_mult is not None:
        entropy = entropy * ent_mult
    # kl to reference: grows sqrt-like
    kl = 0.002 + 0.03 * np.sqrt(t / N) + np.abs(ar1(rng, n, 0.8, 0.003)) + np.abs(student(rng, n, 3, 0.002))
    if kl_add is not None:
        kl = kl + kl_add
    # response length in tokens
    rlen = 350 + 120 * (t / N) + ar1(rng, n, 0.97, 25) + rng.normal(0, 12, n)
    if len_add is not None:
        rlen = rlen + len_add
    # grad norm: lognormal, heavy tail
    gn = np.exp(np.log(0.6) + ar1(rng, n, 0.7, 0.25) + 0.15 * rng.standard_normal(n))
    if gn_mult is not None:
        gn = gn * gn_mult
    # policy loss (GRPO-like): near zero, negatively related to advantage spread, heavy-tailed
    loss = -0.02 + 0.05 * (reward - reward.mean()) * 0 + student(rng, n, 3, 0.015) + ar1(rng, n, 0.5, 0.01)
    loss = loss + 0.08 * (entropy - entropy.mean()) * 0.2
    if loss_add is not None:
        loss = loss + loss_add
    return dict(reward=reward, loss=loss, kl=kl, entropy=entropy, response_length=rlen, grad_norm=gn)


def checkpoint_wobble(rng, n):
    # true checkpoint-to-checkpoint accuracy variation (tiny, smooth)
    return ar1(rng, n, 0.98, 0.004)


def write(name, t, acc, streams, cols, events):
    path = os.path.join(OUT, name + ".csv")
    acc = np.clip(acc, 0.0, 1.0)
    header = ["step"] + cols + ["eval/accuracy"]
    with open(path, "w") as f:
        f.write(",".join(header) + "\n")
        for i in range(len(t)):
            vals = [str(int(t[i]))]
            for c in cols:
                v = streams[c][i]
                vals.append("nan" if np.isnan(v) else f"{v:.6g}")
            vals.append(f"{acc[i]:.5f}")
            f.write(",".join(vals) + "\n")
    with open(path + ".events.yaml", "w") as f:
        if not events:
            f.write("events: []\n")
        else:
            f.write("events:\n")
            for step, d in events:
                f.write(f"- {{step: {int(step)}, direction: {d}}}\n")


ALL = ["reward", "loss", "kl", "entropy", "response_length", "grad_norm"]
t = np.arange(N, dtype=float)

for i in range(3):
    # 1. lr_spike: an LR-schedule bug (warm restart misconfigured) -> grad norm explodes, sharp collapse,
    #    then half recovery as LR decays again.
    rng = np.random.default_rng(1000 + i)
    s = int(rng.integers(350, 650))
    a0, a1 = 0.30 + 0.03 * i, 0.55 + 0.03 * i
    acc = base_curve(rng, t, a0, a1, 250) + checkpoint_wobble(rng, N)
    pre = acc[s - 1]
    drop = 0.30 + 0.05 * i
    rec_start = s + 15
    # collapse over 4 steps, hold, then recover half over 120 steps
    fall = smoothstep(t, s, 4) * drop
    rec = smoothstep(t, rec_start, 120) * drop * 0.5
    acc = acc - fall + rec
    spike = np.exp(-np.maximum(t - s, 0) / 20) * (t >= s)
    gn_mult = 1 + 25 * spike * (rng.lognormal(0, 0.4, N))
    kl_add = 0.25 * smoothstep(t, s, 3) * np.exp(-np.maximum(t - s, 0) / 200)
    ent_mult = 1 + 1.2 * spike
    len_add = -150 * smoothstep(t, s, 5) * (1 - 0.5 * smoothstep(t, rec_start, 120))
    st = streams_from(rng, t, acc, gn_mult=gn_mult, kl_add=kl_add, ent_mult=ent_mult, len_add=len_add,
                      loss_add=0.3 * spike)
    write(f"lr_spike-{i}", t, acc, st, ALL, [(s, "down"), (rec_start, "up")])

    # 2. entropy_collapse: entropy falls over ~50 steps, accuracy degrades slowly afterwards (mode collapse)
    rng = np.random.default_rng(2000 + i)
    s = int(rng.integers(300, 600))
    acc = base_curve(rng, t, 0.35 + 0.02 * i, 0.58, 200) + checkpoint_wobble(rng, N)
    # accuracy begins to degrade 20 steps after entropy starts falling, loses 0.10-0.14 over ~200 steps
    a_on = s + 20
    acc = acc - smoothstep(t, a_on, 200) * (0.10 + 0.02 * i)
    ent_mult = 1 - 0.75 * smoothstep(t, s, 50)
    len_add = -60 * smoothstep(t, s + 10, 80)
    # reward keeps looking fine (slightly up: the policy exploits easy prompts)
    rshift = 0.03 * smoothstep(t, s, 50)
    st = streams_from(rng, t, acc, ent_mult=ent_mult, len_add=len_add,
                      reward_shift=rshift + smoothstep(t, a_on, 200) * (0.10 + 0.02 * i))
    cols = ALL if i != 2 else ["reward", "loss", "entropy", "kl"]
    write(f"entropy_collapse-{i}", t, acc, st, cols, [(a_on, "down")])

    # 3. steady: slow steady improvement, no event; only reward and loss logged for two of them
    rng = np.random.default_rng(3000 + i)
    acc = 0.40 + 0.02 * i + 0.12 * (t / N) + 0.03 * (1 - np.exp(-t / 100)) + checkpoint_wobble(rng, N)
    st = streams_from(rng, t, acc)
    cols = ["reward", "loss"] if i < 2 else ALL
    write(f"steady-{i}", t, acc, st, cols, [])

    # 4. loader_bug: data-loader bug repeats an easy shard for 40 steps -> reward jumps, accuracy unchanged
    rng = np.random.default_rng(4000 + i)
    s = int(rng.integers(250, 700))
    acc = base_curve(rng, t, 0.32, 0.50 + 0.02 * i, 300) + checkpoint_wobble(rng, N)
    bug = ((t >= s) & (t < s + 40)).astype(float)
    st = streams_from(rng, t, acc, reward_shift=0.25 * bug, len_add=-80 * bug, ent_mult=1 - 0.15 * bug,
                      loss_add=-0.03 * bug)
    cols = ["reward", "loss", "kl", "entropy"] if i != 1 else ["reward", "loss"]
    write(f"loader_bug-{i}", t, acc, st, cols, [])

    # 5. overfit: slow decline over 300 steps starting mid-run; streams keep looking healthy
    rng = np.random.default_rng(5000 + i)
    s = int(rng.integers(420, 560))
    acc = base_curve(rng, t, 0.38, 0.60 - 0.02 * i, 150) + checkpoint_wobble(rng, N)
    acc = acc - smoothstep(t, s, 300) * (0.09 + 0.02 * i)
    # reward keeps rising (memorising the training prompts): compensate the accuracy drop and then some
    rshift = smoothstep(t, s, 300) * (0.09 + 0.02 * i + 0.05)
    st = streams_from(rng, t, acc, reward_shift=rshift)
    cols = ["reward", "loss"] if i != 1 else ["reward", "loss", "kl", "entropy", "response_length"]
    write(f"overfit-{i}", t, acc, st, cols, [(s, "down")])

    # 6. nan_grad: bursts of NaN in grad_norm (fp16 overflow, skipped steps), no accuracy event
    rng = np.random.default_rng(6000 + i)
    acc = base_curve(rng, t, 0.30 + 0.03 * i, 0.52, 220) + checkpoint_wobble(rng, N)
    st = streams_from(rng, t, acc)
    gn = st["grad_norm"]
    for _ in range(int(rng.integers(3, 7))):
        b = int(rng.integers(50, 950))
        L = int(rng.integers(2, 15))
        gn[b:b + L] = np.nan
        # a skipped step: loss is also large for one step before the NaN burst
        st["loss"][max(b - 1, 0)] += rng.uniform(0.1, 0.5)
    write(f"nan_grad-{i}", t, acc, st, ALL, [])

print("wrote", OUT)

"""Traces from a generator written outside the project: 16 RL fine-tuning runs of 1,000 steps (SIMULATED).

Written by an outside reviewer (a helper session in the twenty-ninth session) who was asked for kinds "different
from a textbook" and did not use ``adaptive_eval.synthetic``: an S-curve then plateau; reward hacking (the reward
keeps rising while the accuracy falls over 100 steps); a gradual collapse over 30 steps led by a kl blow-up; a
response-length explosion 30-60 steps before the accuracy drops; a flat run with Student-t (df 3) noise and single-
step spikes; an abrupt collapse with a recovery 150 steps later.  Streams per step: reward, loss, kl,
response_length; ground truth ``eval/accuracy`` (the checkpoint's true accuracy).  Noise is AR(1)-correlated, as
real training streams are.  Each run is a CSV with an events sidecar (``<run>.csv.events.yaml``), as
``benchmarks/policies.py`` and ``adaptive-eval check`` read them::

    python benchmarks/outside_traces.py /tmp/outside
    python benchmarks/policies.py /tmp/outside/*.csv --presets default

Only numpy; the same files every run (fixed seeds).
"""
import csv
import pathlib
import sys

import numpy as np

T = 1000
if len(sys.argv) == 2 and sys.argv[1] in ("-h", "--help"):
    print(__doc__)
    sys.exit(0)
if len(sys.argv) != 2 or sys.argv[1].startswith("-"):  # (--help was a folder it wrote 32 files into; a probe)
    print(f"usage: python {sys.argv[0]} FOLDER  (the folder to write the runs into)", file=sys.stderr)
    sys.exit(2)
OUT = pathlib.Path(sys.argv[1])


def ar1(rng, n, sd, phi=0.4, t_df=None):
    """AR(1) noise with marginal sd ~ sd; innovations Gaussian or Student-t(df) scaled to unit variance."""
    if t_df is None:
        e = rng.standard_normal(n)
    else:
        e = rng.standard_t(t_df, n) / np.sqrt(t_df / (t_df - 2))
    x = np.empty(n)
    x[0] = e[0]
    for i in range(1, n):
        x[i] = phi * x[i - 1] + np.sqrt(1 - phi ** 2) * e[i]
    return sd * x


def sigmoid(z):
    return 1 / (1 + np.exp(-z))


def base_run(rng, t_df=None):
    """A healthy run: S-shaped accuracy, reward tracking it, slowly rising kl, drifting length."""
    t = np.arange(T, dtype=float)
    a0 = rng.uniform(0.20, 0.35)
    a1 = a0 + rng.uniform(0.15, 0.35)
    t0 = rng.uniform(200, 450)
    w = rng.uniform(40, 110)
    acc = a0 + (a1 - a0) * sigmoid((t - t0) / w)
    # training reward: on the training distribution, a bit above held-out accuracy, same shape
    r_off = rng.uniform(0.03, 0.12)
    reward_lvl = np.clip(acc + r_off, 0, 1)
    kl_lvl = 0.001 + rng.uniform(0.02, 0.06) * (t / T) ** rng.uniform(0.8, 1.5)
    len0 = rng.uniform(250, 600)
    len_lvl = len0 * (1 + rng.uniform(-0.15, 0.35) * sigmoid((t - t0) / w))
    loss_lvl = -0.01 + 0.0 * t
    return dict(t=t, acc=acc, reward=reward_lvl, kl=kl_lvl, length=len_lvl, loss=loss_lvl,
                t_df=t_df, loss_sd=rng.uniform(0.015, 0.04), r_sd=rng.uniform(0.05, 0.1),
                len_sd_frac=rng.uniform(0.05, 0.09), kl_logsd=rng.uniform(0.15, 0.3))


def observe(rng, r):
    """Noisy per-step streams from the levels."""
    df = r["t_df"]
    reward = np.clip(r["reward"] + ar1(rng, T, r["r_sd"], 0.3, df), 0, 1)
    loss = r["loss"] + ar1(rng, T, r["loss_sd"], 0.2, df)
    kl = r["kl"] * np.exp(ar1(rng, T, r["kl_logsd"], 0.5, df))
    length = np.maximum(10, r["length"] * (1 + ar1(rng, T, r["len_sd_frac"], 0.5, df)))
    return reward, loss, kl, length


def smoothstep(t, start, dur):
    x = np.clip((t - start) / dur, 0, 1)
    return x * x * (3 - 2 * x)


def make(kind, seed):
    rng = np.random.default_rng(seed)
    events = []
    if kind == "a_sshape":
        r = base_run(rng)
    elif kind == "b_hack":
        r = base_run(rng)
        t = r["t"]
        on = int(rng.integers(480, 521))
        drop = rng.uniform(0.12, 0.22)
        r["acc"] = r["acc"] - drop * smoothstep(t, on, 100)
        # reward keeps rising after onset (the policy exploits the verifier)
        r["reward"] = np.clip(r["reward"] + rng.uniform(0.10, 0.20) * np.clip((t - on) / 300, 0, 1), 0, 1)
        r["kl"] = r["kl"] + rng.uniform(0.01, 0.04) * np.clip((t - on) / 300, 0, 1)
        r["length"] = r["length"] * (1 - rng.uniform(0.0, 0.25) * np.clip((t - on) / 300, 0, 1))
        events.append(dict(step=on, kind="reward_hack", direction="down"))
    elif kind == "c_gradual_collapse":
        r = base_run(rng)
        t = r["t"]
        on = int(rng.integers(400, 751))
        s = smoothstep(t, on, 30)
        floor = rng.uniform(0.02, 0.08)
        r["acc"] = r["acc"] * (1 - s) + floor * s
        r["reward"] = r["reward"] * (1 - s) + rng.uniform(0.0, 0.05) * s
        # kl blows up exponentially from the onset over the 30 steps, then stays high
        kl_top = rng.uniform(1.0, 8.0)
        grow = np.where(t >= on, np.minimum(np.exp((t - on) / 30 * np.log(kl_top / 0.05)) * 0.05, kl_top), 0)
        r["kl"] = r["kl"] + grow
        r["loss_sd"] = r["loss_sd"]  # level stays; variance blow-up below
        r["loss"] = r["loss"] + 0.3 * s * rng.choice([-1, 1])
        r["length"] = r["length"] * (1 - s) + s * rng.choice([40.0, 2048.0])
        events.append(dict(step=on, kind="collapse", direction="down"))
    elif kind == "d_length_explosion":
        r = base_run(rng)
        t = r["t"]
        tl = int(rng.integers(350, 601))
        cap = 4096.0
        tau = rng.uniform(25, 50)
        grow = np.where(t >= tl, np.exp((t - tl) / tau) - 1, 0)
        r["length"] = np.minimum(r["length"] * (1 + grow), cap)
        lag = int(rng.integers(30, 61))
        ta = tl + lag
        drop = rng.uniform(0.15, 0.3)
        s = smoothstep(t, ta, 40)
        r["acc"] = r["acc"] - drop * s
        r["reward"] = r["reward"] - (drop + rng.uniform(0, 0.1)) * s  # truncated answers score 0
        r["kl"] = r["kl"] + 0.03 * np.clip(grow / 20, 0, 1)
        events.append(dict(step=ta, kind="length_explosion", direction="down"))
    elif kind == "e_noisy_flat":
        r = base_run(rng, t_df=3)
        t = r["t"]
        lvl = rng.uniform(0.35, 0.6)
        r["acc"] = lvl + 0.01 * np.sin(t / 200 + rng.uniform(0, 6))  # flat up to a small wander
        r["reward"] = np.clip(r["acc"] + rng.uniform(0.03, 0.1), 0, 1)
        r["length"] = np.full(T, rng.uniform(300, 600))
        r["r_sd"] = rng.uniform(0.07, 0.1)
    elif kind == "f_collapse_recover":
        r = base_run(rng)
        t = r["t"]
        on = int(rng.integers(300, 601))
        back = on + 150
        floor = rng.uniform(0.02, 0.1)
        inside = (t >= on) & (t < back)
        keep = r["acc"].copy()
        r["acc"] = np.where(inside, floor, keep - np.where(t >= back, rng.uniform(0.0, 0.04), 0))
        r["reward"] = np.where(inside, rng.uniform(0.0, 0.06), r["reward"])
        r["kl"] = np.where(inside, r["kl"] + rng.uniform(0.3, 2.0), r["kl"])
        r["length"] = np.where(inside, r["length"] * rng.choice([0.15, 3.0]), r["length"])
        events.append(dict(step=on, kind="collapse", direction="down"))
        events.append(dict(step=back, kind="recovery", direction="up"))
    else:
        raise ValueError(kind)

    reward, loss, kl, length = observe(rng, r)
    if kind == "e_noisy_flat":  # occasional single-step spikes
        for name, arr, mag in (("reward", reward, -0.5), ("loss", loss, 0.4), ("kl", kl, 20.0),
                               ("length", length, 4.0)):
            for s in rng.choice(np.arange(40, T), size=int(rng.integers(2, 5)), replace=False):
                if name == "reward":
                    arr[s] = max(0.0, arr[s] + mag)
                elif name == "loss":
                    arr[s] += mag * rng.choice([-1, 1])
                else:
                    arr[s] *= mag
    acc = np.clip(r["acc"], 0, 1)
    return dict(reward=reward, loss=loss, kl=kl, response_length=length, acc=acc), events


PLAN = [("a_sshape", 3), ("b_hack", 3), ("c_gradual_collapse", 3), ("d_length_explosion", 3),
        ("e_noisy_flat", 2), ("f_collapse_recover", 2)]


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    base_seed = 20260611
    for ki, (kind, n) in enumerate(PLAN):
        for j in range(n):
            seed = base_seed + 100 * ki + j
            d, events = make(kind, seed)
            name = f"{kind}-{j}"
            path = OUT / f"{name}.csv"
            with open(path, "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(["step", "reward", "loss", "kl", "response_length", "eval/accuracy"])
                for i in range(T):
                    w.writerow([i, f"{d['reward'][i]:.5f}", f"{d['loss'][i]:.5f}", f"{d['kl'][i]:.6g}",
                                f"{d['response_length'][i]:.1f}", f"{d['acc'][i]:.5f}"])
            with open(str(path) + ".events.yaml", "w") as f:
                f.write("events:" + ("\n" if events else " []\n"))
                for e in events:
                    f.write(f"- {{step: {e['step']}, kind: {e['kind']}, direction: {e['direction']}, within: 25}}\n")
            print(name, seed, events, f"acc {d['acc'].min():.3f}..{d['acc'].max():.3f}")


if __name__ == "__main__":
    main()

"""benchmarks/policies.py on the user's own recorded runs (subprocess, as a user runs it)."""

import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent


def run(*args):
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / "policies.py"), *args],
                          capture_output=True, text=True, timeout=600)


def test_policies_scores_your_traces_against_fixed_schedules_or_exits_2(tmp_path):
    """The honest comparison against a fixed schedule ran on the synthetic suite and the shipped traces only: a
    user could not measure it on their own runs (found by a new user; --help offered no TRACE)."""
    for seed in (0, 1):
        rng = np.random.default_rng(seed)
        lines = ["step,train/reward,eval/accuracy"]
        for s in range(400):  # a reward collapse at 250, the accuracy (ground truth every 10 steps) with it
            reward = (0.7 if s < 250 else 0.2) + 0.02 * rng.normal()
            acc = f"{0.8 if s < 250 else 0.3}" if s % 10 == 0 else ""
            lines.append(f"{s},{reward:.4f},{acc}")
        (tmp_path / f"run-{seed}.csv").write_text("\n".join(lines) + "\n")
        (tmp_path / f"run-{seed}.csv.events.yaml").write_text("events:\n  - {step: 250, direction: down}\n")
    out = run(str(tmp_path / "run-0.csv"), str(tmp_path / "run-1.csv"), "--presets", "default", "--boot", "20")
    assert out.returncode == 0, out.stderr
    assert "your traces: 2 runs, 2 events; evaluations SIMULATED" in out.stdout
    assert "fixed  25, whole set" in out.stdout and "preset default" in out.stdout
    assert "fewer samples at equal median confirmed delay: vs fixed" in out.stdout
    # Runs of one kind (a name less its run number) pool into one row, and the ceiling is printed, as for the
    # synthetic suite (each file was a row; no ceiling: an outside reviewer's runs)
    rows = out.stdout.split("per kind (n runs / n events)")[1]
    assert re.search(r"^run +2/2 ", rows, re.M), rows
    assert re.search(r"what any schedule could confirm within 25 steps[^\n]*\n.*\nrun +2 +100% +100%", out.stdout)
    (tmp_path / "nothing.csv").write_text("step,train/reward\n" + "".join(f"{s},0.5\n" for s in range(50)))
    out = run(str(tmp_path / "nothing.csv"))
    assert out.returncode == 2 and "no eval ground truth" in out.stderr
    out = run("--events", "x=5")
    assert out.returncode == 2 and "apply to TRACE files" in out.stderr
    (tmp_path / "one.csv").write_text("step,train/reward,eval/accuracy\n0,0.5,0.5\n")
    out = run(str(tmp_path / "one.csv"))  # (it said "to tune on": policies.py tunes nothing on your traces)
    assert out.returncode == 2 and "one.csv: 1 step: a trace needs at least 2 steps to score" in out.stderr


def test_policies_on_traces_with_eval_suites_gives_every_schedule_the_suites(tmp_path):
    """The fixed schedules were built from "areal" alone, without the preset's eval suites: replaying a trace of
    per-item suite columns crashed with a traceback (found by a new user)."""
    from adaptive_eval.synthetic_items import make_item_trace
    from adaptive_eval.trace import write_trace

    it = make_item_trace("collapse", steps=300, seed=4, suites={"math": (60, 0.0), "aime": (12, 1.0)})
    write_trace(it.trace, tmp_path / "run.csv")
    (tmp_path / "run.csv.events.yaml").write_text(f"events:\n  - {{step: {it.events[0].step}, metric: math/acc}}\n")
    (tmp_path / "suites.yaml").write_text("evaluation:\n  suites:\n    math: {size: 60, samples_per_item: 4}\n"
                                          "    aime: {size: 12, samples_per_item: 8, cost: 4, every: 4}\n")
    out = run(str(tmp_path / "run.csv"), "--presets", str(tmp_path / "suites.yaml"), "--boot", "10")
    assert out.returncode == 0, out.stderr
    assert "the fixed same-size schedules fix evaluation.suites.math.sample_size" in out.stdout
    assert "preset " + str(tmp_path / "suites.yaml") in out.stdout


def test_a_share_every_resample_agrees_on_gets_the_exact_interval_not_zero_width():
    """The real traces printed "confirmed<=25 0% [0%, 0%]": a bootstrap of three zeros has no width.  0 of 3
    traces with an event allows up to 71% (Clopper-Pearson), marked '*'; a share with spread keeps its interval."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("policies_bench", REPO / "benchmarks" / "policies.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    (lo, hi), mark = mod.exact_if_degenerate(0.0, (0.0, 0.0), 3)
    assert mark == "*" and lo == 0.0 and round(hi, 3) == 0.708
    (lo, hi), mark = mod.exact_if_degenerate(1.0, (1.0, 1.0), 40)
    assert mark == "*" and round(lo, 3) == 0.912 and hi == 1.0
    assert mod.exact_if_degenerate(0.8, (0.65, 0.92), 40) == ((0.65, 0.92), "")


def test_an_infinite_median_stays_inside_its_interval_and_an_undefined_ratio_gets_none():
    """Two runs, one event never confirmed: "median confirmed delay inf [2.0, 2.0]" (the resamples whose
    median was infinite were dropped) and "nan [16.2, 16.2]x" for the ratio at that median (found by a new
    user)."""
    import importlib.util
    import math

    spec = importlib.util.spec_from_file_location("policies_bench", REPO / "benchmarks" / "policies.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    delays = [2.0, math.inf]
    median = lambda idx: float(np.median([delays[i] for i in idx]))  # noqa: E731
    lo, hi = mod.boot(median, 2, 200)
    assert lo == 2.0 and hi == math.inf
    assert mod.fmt_ci(median([0, 1]), (lo, hi), ".1f") == "inf [2.0, inf]"
    ratio = lambda idx: 16.2 if math.isfinite(median(idx)) else math.nan  # noqa: E731
    assert mod.fmt_ci(ratio([0, 1]), mod.boot(ratio, 2, 200), ".1f") == "undefined"
    # finite replicates: the interpolated percentiles, as every table in the README was made
    lo, hi = mod.boot(lambda idx: float(np.mean(idx)), 10, 200)
    assert 2.0 < lo < 4.5 < hi < 7.0 and lo != round(lo)


def test_lookback_table_pairs_the_preset_with_and_without_kept_checkpoints(capsys):
    """``--lookback K``: the table the README quotes for policy.lookback (in process, on two runs)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import policies as bench
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    from adaptive_eval.synthetic import suite
    from adaptive_eval.tune import case_from_synthetic

    cases = [case_from_synthetic(st) for st in suite(0, steps=1000, per_kind=1) if st.name.split("-")[0] == "nan"]
    bench.lookback_effect(cases, 25, "default", [])
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.split()[:1] in (["nan"], ["all"])}
    assert set(rows) == {"nan", "all"} and rows["nan"][1] == "1"
    # A run that dies: the kept checkpoint before it is evaluated (its items are charged), and the paired difference
    # is the two regrets' difference.
    assert int(rows["nan"][3]) > int(rows["nan"][2])
    assert float(rows["nan"][6]) == pytest.approx(float(rows["nan"][5]) - float(rows["nan"][4]), abs=0.011)
    # its interval is Student t over runs (a percentile bootstrap over 8 runs of a kind covered far below 95%)
    from scipy import stats

    values = np.array([0.06, -0.2, -0.3, -0.99, 0.0, 0.0, -0.5, 0.0])
    expected = stats.t.interval(0.95, 7, loc=values.mean(), scale=stats.sem(values))
    assert bench.t_interval(values) == pytest.approx(expected) and expected[1] > 0  # (the bootstrap's excluded 0)


def test_steps_sets_the_length_of_the_synthetic_runs(monkeypatch, capsys):
    """``--steps N``: the held-out suite at another run length than the 1000 steps the defaults were tuned on (the
    README's table of how the preset carries over); below 100 steps it is a usage error."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import policies as bench
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    seen = []
    monkeypatch.setattr(bench, "report", lambda title, cases, *a, **k: seen.append([len(c.trace) for c in cases]))
    monkeypatch.setattr(bench, "confirmable", lambda cases: None)
    monkeypatch.setattr(bench, "replay_speed", lambda n: 1.0)
    assert bench.main(["--steps", "300", "--quick", "--no-real", "--png", ""]) == 0
    assert seen == [[300] * 28]  # 7 kinds x 1 run x 4 held-out seeds, of 300 steps each
    assert "runs of 300 steps (the defaults were tuned on runs of 1000)" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        bench.main(["--steps", "50"])
    assert exc.value.code == 2 and "argument --steps: must be at least 106, got 50" in capsys.readouterr().err


def test_only_the_readmes_run_draws_the_readmes_figure(monkeypatch, tmp_path, capsys):
    """A --quick (or --steps, --set, own-preset) run overwrote benchmarks/policies.png, the README's figure and a
    tracked file, with its own (found by a fresh-clone check); it draws nothing unless given --png."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import policies as bench
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    drawn = []
    monkeypatch.setattr(bench, "report", lambda *a, **k: {})
    monkeypatch.setattr(bench, "confirmable", lambda cases: None)
    monkeypatch.setattr(bench, "replay_speed", lambda n: 1.0)
    monkeypatch.setattr(bench, "draw", lambda res, path, *rest: drawn.append(path))
    assert bench.main(["--steps", "300", "--quick", "--no-real"]) == 0
    assert drawn == [] and "no figure: this is not the README's run" in capsys.readouterr().out
    assert bench.main(["--steps", "300", "--quick", "--no-real", "--png", str(tmp_path / "q.png")]) == 0
    assert bench.main(["--no-real", "--presets", "aggressive"]) == 0  # (it overwrote the README's figure: a fresh clone)
    assert bench.main(["--no-real", "--presets", "default"]) == 0  # the README's run
    assert drawn == [str(tmp_path / "q.png"), "benchmarks/policies.png"]


def test_regret_decomposition_splits_each_schedules_regret_into_coverage_and_selection(capsys):
    """benchmarks/regret_decomposition.py (the README's "Where the regret goes"), on short runs: each row's regret
    is its coverage plus its selection, coverage is never negative, and every kind is listed."""
    import importlib.util
    import re

    spec = importlib.util.spec_from_file_location("regret_decomposition", REPO / "benchmarks" / "regret_decomposition.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--steps", "200", "--seeds", "1", "--quick"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("heldout half, 200 steps, n = 28 runs x 1 seeds (SIMULATED)")
    rows = re.findall(r"^(preset default|fixed every \d+, 292 items) +\d+ +([\d.]+) \[.*?\] +([\d.]+) \[.*?\] +(-?[\d.]+) \[",
                      out, re.M)
    assert [r[0] for r in rows] == ["preset default", "fixed every 50, 292 items", "fixed every 69, 292 items",
                                    "fixed every 100, 292 items"]
    for _, regret, coverage, selection in rows:
        assert float(coverage) >= 0 and abs(float(regret) - float(coverage) - float(selection)) <= 0.011
    assert out.count("default - fixed every") == 3
    for kind in ("collapse", "collapse_recovery", "flat", "nan", "rise_plateau", "silent_degradation", "spikes"):
        assert re.search(rf"^  {kind} +n= +4 ", out, re.M)


def test_regret_at_equal_cost_is_undefined_outside_the_fixed_schedules_costs():
    """np.interp held the end value beyond the fixed schedules' costs, so a preset at 2,433 samples/1k was said to
    be compared "at equal cost" with the cheapest fixed schedule, at 6,234 (found by a new-user probe)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_policies", REPO / "benchmarks" / "policies.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)

    def agg(per_1k, regret, delay=5.0, confirmed=0.8):
        return {"per_1k": per_1k, "regret": regret, "regret_points": regret / 10, "median_delay": delay,
                "confirmed": confirmed}

    same = {25: agg(10000.0, 0.02), 50: agg(6234.0, 0.04, confirmed=0.4)}
    inside = bench.headline(agg(8117.0, 0.03), same, same)
    assert inside["fixed_regret"] == pytest.approx(0.03) and inside["regret_ratio"] == pytest.approx(1.0)
    cheaper = bench.headline(agg(2433.0, 0.03), same, same)
    assert np.isnan(cheaper["fixed_regret"]) and np.isnan(cheaper["regret_ratio"])
    assert np.isnan(cheaper["points_ratio"])
    # at an equal share confirmed within 25 steps: the cheapest fixed schedule confirming as many (a sceptical
    # review: the saving at equal median delay is set by the abrupt events alone); none confirms more: undefined
    assert cheaper["ratio_share"] == pytest.approx(10000.0 / 2433.0)
    assert np.isnan(bench.headline(agg(2433.0, 0.03, confirmed=0.9), same, same)["ratio_share"])


def test_the_outside_generators_write_their_runs_with_their_events(tmp_path):
    """benchmarks/outside_traces.py and outside_traces2.py, the README's outside checks: traces policies.py and
    check read as they are."""
    from adaptive_eval.trace import read_trace

    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "outside_traces2.py"), str(tmp_path / "two")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    runs = sorted((tmp_path / "two").glob("*.csv"))
    assert len(runs) == 18 and all(pathlib.Path(f"{r}.events.yaml").exists() for r in runs)
    assert any(v != v for r in read_trace(tmp_path / "two" / "nan_grad-0.csv").records
               for v in r.metrics.values())

    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "outside_traces.py"), str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    runs = sorted(tmp_path.glob("*.csv"))
    assert len(runs) == 16 and all(pathlib.Path(f"{r}.events.yaml").exists() for r in runs)
    trace = read_trace(tmp_path / "c_gradual_collapse-0.csv")
    assert len(trace.records) == 1000
    assert set(trace.records[0].metrics) == {"reward", "loss", "kl", "response_length", "eval/accuracy"}
    assert "collapse" in (tmp_path / "c_gradual_collapse-0.csv.events.yaml").read_text()


def test_kinds_of_your_own_runs_are_their_names_less_run_numbers_whatever_their_folder():
    """A user's real/collapse-0.csv was read as a shipped real trace (not pooled), items/foo-1.csv as kind 'csv'."""
    import importlib.util

    from adaptive_eval.tune import Case

    spec = importlib.util.spec_from_file_location("bench_kinds", REPO / "benchmarks" / "policies.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    kind = lambda name: bench.kind_of(Case(name, None, [], None, None))  # noqa: E731
    assert [kind(n) for n in ("real/collapse-0.csv", "real/collapse-1.csv", "items/foo-1.csv", "runs/seed_2.jsonl",
                              "synthetic/collapse-s4", "real/grpo_no_kl", "items/items-nan-s5")] == [
        "collapse", "collapse", "foo", "seed", "collapse", "grpo_no_kl", "nan"]


def test_the_figure_of_a_run_without_the_default_preset_draws_the_first_preset_and_names_the_half(tmp_path,
                                                                                                monkeypatch):
    """A probe: ``--png PATH --presets aggressive`` raised KeyError: 'default' after every replay, and the figure of
    ``--half tune`` said "held-out synthetic half" on its axis."""
    import importlib.util

    import matplotlib.image

    spec = importlib.util.spec_from_file_location("policies_bench", REPO / "benchmarks" / "policies.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    point = lambda d, c: {"median_delay": d, "per_1k": c}  # noqa: E731
    res = {"_whole": {2: point(1.0, 250000), 50: point(30.0, 10000)},
           "aggressive": {"preset": point(2.0, 6000), "size": 300,
                          "same": {2: point(1.0, 150000), 50: point(31.0, 6000)}}}
    path = tmp_path / "figs" / "tune.png"
    mod.draw(res, str(path), ("aggressive",), "tune")
    assert matplotlib.image.imread(str(path)).shape[0] > 100
    import matplotlib.pyplot as plt

    labels = []
    original = plt.Axes.set_xlabel
    monkeypatch.setattr(plt.Axes, "set_xlabel",
                        lambda self, text, *a, **k: labels.append(text) or original(self, text, *a, **k))
    mod.draw(res, str(tmp_path / "again.png"), ("aggressive",), "tune")
    assert labels == ["median confirmed detection delay (steps; tuning synthetic half)"]

import json
import math

import numpy as np
import pytest

from adaptive_eval.plot import PlotError, _load, plot_run
from adaptive_eval.tensorboard import TensorBoardLogger

FAULT_STEP = 350


def _wilson(p, n, z=1.96):
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [centre - half, centre + half]


def make_run(root, *, steps=600, with_tb=True, with_evals=True):
    """A small run folder laid out like replay's: a reward collapse at FAULT_STEP caught by an alarm."""
    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    evals, alarms = [], []
    alarm_steps = {FAULT_STEP + 8: ("train/reward", "cusum", "down"),
                   FAULT_STEP + 12: ("train/kl", "page_hinkley", "up"),
                   FAULT_STEP + 100: ("accuracy", "cusum", "down")}
    logger = TensorBoardLogger(root / "tb", flush_secs=3600) if with_tb else None
    next_eval, interval, sample_size = 0, 50, 100
    for step in range(steps):
        broken = step >= FAULT_STEP
        reward = (0.2 + 0.6 * step / steps if not broken else 0.1) + rng.normal(0, 0.05)
        deferred = 200 <= step < 230
        streams = {"streams/train/reward": reward, "streams/train/reward/cusum": max(0.0, (step - FAULT_STEP) / 10),
                   "streams/train/loss": 1.0 / (1 + step / 100) + rng.normal(0, 0.02) + (2.0 if broken else 0.0),
                   "streams/train/kl": 0.01 + (0.05 if broken else 0.0) + abs(rng.normal(0, 0.005)),
                   "streams/resp_len": 300 + rng.normal(0, 10), "streams/grad_norm": 1 + rng.normal(0, 0.1)}
        if step == 420:
            streams["streams/train/loss"] = math.nan
        if logger:
            logger.log(step, {**streams, "controller/interval": interval, "controller/sample_size": sample_size,
                              "controller/deferred": deferred, "controller/eval_fraction": 0.05})
        if step in alarm_steps:
            stream, detector, direction = alarm_steps[step]
            alarms.append({"step": step, "stream": stream, "detector": detector, "direction": direction,
                           "location": step - 6})
            if logger:
                logger.log(step, {"controller/alarms": float(len(alarms))})
                logger.text(step, "alarms", f"{detector} {direction} on {stream}")
            interval, sample_size, next_eval = 20, 400, step + 1
        if step >= next_eval and not deferred:
            reason = "trigger:steps" if sample_size == 100 else "alarm:train/reward:cusum:down"
            acc_true = 0.3 + 0.5 * step / steps if not broken else 0.15
            acc = rng.binomial(sample_size, acc_true) / sample_size
            record = {"step": step, "epoch": 0, "sample_size": sample_size, "reason": reason,
                      "metrics": {"accuracy": acc}, "ci": {"accuracy": _wilson(acc, sample_size)},
                      "seconds": 2.0 + sample_size / 100}
            evals.append(record)
            if logger:
                lo, hi = record["ci"]["accuracy"]
                logger.log(step, {"eval/accuracy": acc, "eval/accuracy/ci_low": lo, "eval/accuracy/ci_high": hi,
                                  "eval/accuracy/n": sample_size})
                logger.text(step, "decisions", f"evaluated: {reason} (n={sample_size})")  # as the evaluator does
            next_eval = step + interval
            if sample_size == 400 and step > FAULT_STEP + 60:
                interval, sample_size = 50, 100
    if logger:
        logger.close()
    if with_evals:
        (root / "evals.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))
    (root / "alarms.jsonl").write_text("".join(json.dumps(a) + "\n" for a in alarms))
    (root / "summary.json").write_text(json.dumps({
        "steps": steps, "evals": len(evals), "samples": sum(e["sample_size"] for e in evals),
        "eval_seconds": sum(e["seconds"] for e in evals), "train_seconds": 10.0 * steps, "alarms": len(alarms)}))
    return root


def _check_png(path, min_w=600, min_h=400):
    import matplotlib.image

    assert path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    img = matplotlib.image.imread(path)
    h, w = img.shape[:2]
    assert w >= min_w and h >= min_h, (w, h)
    assert img[..., :3].std() > 0.05  # not a blank canvas
    return w, h


def test_plot_full_run_writes_png_to_default_path(tmp_path):
    run = make_run(tmp_path / "run")
    out = plot_run(run)
    assert out == run / "run.png"
    w, h = _check_png(out)
    assert h > w * 0.8  # one eval panel and four stream panels stacked


def test_loaded_run_picks_streams_not_detector_statistics(tmp_path):
    run = _load(make_run(tmp_path / "run"))
    assert list(run.streams) == ["train/reward", "train/loss", "train/kl", "resp_len", "grad_norm"]
    assert run.deferred is not None and run.deferred[1].max() == 1.0
    assert len(run.evals) > 5 and {a["detector"] for a in run.alarms} == {"cusum", "page_hinkley"}


def test_plot_without_tb_and_without_evals_jsonl(tmp_path):
    only_files = make_run(tmp_path / "files", with_tb=False)
    _check_png(plot_run(only_files, tmp_path / "a.png"), min_h=300)  # the eval panel alone
    only_tb = make_run(tmp_path / "tb_only", with_evals=False, steps=200)
    run = _load(only_tb)  # evaluations rebuilt from eval/<m> scalars and the decisions text
    assert run.evals and run.evals[0]["reason"] == "trigger:steps" and run.evals[0]["sample_size"] == 100
    lo, hi = run.evals[0]["ci"]["accuracy"]
    assert lo < run.evals[0]["metrics"]["accuracy"] < hi
    _check_png(plot_run(only_tb, tmp_path / "b.png"))  # eval panel and four streams


def test_folder_without_a_run_is_a_plot_error(tmp_path):
    with pytest.raises(PlotError, match="no run found \\(expected evals.jsonl"):
        plot_run(tmp_path)
    assert not (tmp_path / "run.png").exists()
    (tmp_path / "adaptive").mkdir()
    (tmp_path / "adaptive" / "evals.jsonl").write_text("")
    with pytest.raises(PlotError, match="runs below it: adaptive"):
        plot_run(tmp_path)
    with pytest.raises(PlotError, match="missing: no such folder"):
        plot_run(tmp_path / "missing")
    assert issubclass(PlotError, ValueError)


def test_bad_lines_name_file_and_line_but_a_torn_last_line_is_skipped(tmp_path):
    good = {"step": 5, "sample_size": 10, "reason": "trigger:steps", "metrics": {"acc": 0.5}, "ci": {"acc": [0.2, 0.8]}}
    evals = tmp_path / "evals.jsonl"
    evals.write_text(json.dumps(good) + "\n" + '{"step": 9, "metr')
    with pytest.warns(UserWarning, match="incomplete last line"):
        assert [e["step"] for e in _load(tmp_path).evals] == [5]
    evals.write_text(json.dumps(good) + "\n{oops\n" + json.dumps(good) + "\n")
    with pytest.raises(PlotError, match=r"evals.jsonl:2: not valid JSON"):
        plot_run(tmp_path)
    evals.write_text(json.dumps({"step": 5, "metrics": {"acc": "high"}}) + "\n")
    with pytest.raises(PlotError, match=r"evals.jsonl:1: 'metrics.acc' must be a number"):
        plot_run(tmp_path)
    evals.write_text(json.dumps({"metrics": {}}) + "\n")
    with pytest.raises(PlotError, match=r"evals.jsonl:1: missing key 'step'"):
        plot_run(tmp_path)


def test_non_finite_values_and_unwritable_output(tmp_path):
    rows = [{"step": 0, "sample_size": None, "n": {"acc": 50}, "reason": "", "metrics": {"acc": math.nan},
             "ci": {"acc": None}},
            {"step": 10, "sample_size": 50, "reason": "trigger:steps", "metrics": {"acc": 0.4},
             "ci": {"acc": [0.3, math.inf]}}]
    (tmp_path / "evals.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    _check_png(plot_run(tmp_path), min_h=200)
    (tmp_path / "a-file").write_text("")
    with pytest.raises(PlotError, match="cannot write"):  # (a missing folder is made, as replay makes its --out)
        plot_run(tmp_path, tmp_path / "a-file" / "such" / "dir.png")


def test_panels_in_name_order_and_no_line_across_a_gap(tmp_path):
    """The same trace gives the same panel order (chosen by alarms, drawn by name); evaluations far apart are
    not joined by a line (it would draw a decline nobody measured)."""
    import json

    from adaptive_eval.plot import _choose_streams, _draw, _load

    assert _choose_streams(["z", "a", "m"], [{"stream": "z"}]) == _choose_streams(["a", "m", "z"], [{"stream": "z"}])
    run = tmp_path / "run"
    run.mkdir()
    steps = [0, 10, 20, 30, 230, 240]
    (run / "evals.jsonl").write_text("".join(json.dumps({"step": s, "sample_size": 32, "reason": "trigger:steps",
                                                          "metrics": {"acc": 0.9 if s < 100 else 0.1},
                                                          "ci": {"acc": [0.8, 0.95] if s < 100 else [0.05, 0.2]}}) + "\n"
                                             for s in steps))
    ax = _draw(_load(run)).axes[0]
    joined = [ln for ln in ax.get_lines() if len(ln.get_xdata()) > 2][0]
    xs = np.asarray(joined.get_xdata(), dtype=float)
    assert np.isnan(xs).sum() == 1 and np.flatnonzero(np.isnan(xs))[0] == 4  # broken between 30 and 230


def test_a_second_suite_gets_a_panel_before_the_first_ones_pass_at_k(tmp_path):
    """Panels went in the order metrics first appear: math/acc, then its pass@1 (the same number as mean@1)
    and pass@4, and the aime suite was "not shown"."""
    import json

    from adaptive_eval.plot import _draw, _load

    run = tmp_path / "run"
    run.mkdir()
    names = ["math/acc", "math/acc/pass@1", "math/acc/pass@4", "math/acc/stratum=hard", "aime/acc",
             "aime/acc/pass@1"]
    (run / "evals.jsonl").write_text("".join(
        json.dumps({"step": s, "sample_size": 32, "reason": "trigger:steps", "metrics": {m: 0.5 for m in names},
                    "ci": {m: [0.4, 0.6] for m in names}}) + "\n" for s in (0, 10, 20)))
    fig = _draw(_load(run))
    labels = [ax.get_ylabel() for ax in fig.axes]
    assert labels[:3] == ["eval/math/acc", "eval/aime/acc", "eval/math/acc/pass@1"], labels


def test_a_comparison_says_which_eval_metrics_it_does_not_show(tmp_path):
    """Several runs got at most 3 eval panels with no note (the single-run picture says 'N more not shown'), so a
    run's tracked metric could be missing without a word."""
    from adaptive_eval.plot import MAX_EVAL_PANELS, _draw_comparison

    names = {"a": ["math/acc", "gsm/acc"], "b": ["aime/acc", "mmlu/acc", "gpqa/acc"]}
    runs = []
    for run, metrics in names.items():
        (tmp_path / run).mkdir()
        (tmp_path / run / "evals.jsonl").write_text("".join(
            json.dumps({"step": s, "sample_size": 32, "reason": "trigger:steps", "metrics": {m: 0.5 for m in metrics},
                        "ci": {m: [0.4, 0.6] for m in metrics}}) + "\n" for s in (0, 10)))
        runs.append(_load(tmp_path / run))
    fig = _draw_comparison(runs)
    shown = [ax.get_ylabel() for ax in fig.axes if ax.get_ylabel().startswith("eval/")]
    assert len(shown) == MAX_EVAL_PANELS == 3
    note = fig.get_supxlabel()
    assert "2 more eval metrics not shown (" in note
    assert all(m in note for m in ("math/acc", "gsm/acc", "aime/acc", "mmlu/acc", "gpqa/acc")
               if f"eval/{m}" not in shown)


def test_a_kept_checkpoint_evaluated_later_is_drawn_at_its_step_without_a_line_back_in_time(tmp_path):
    """evals.jsonl holds a look back (policy.lookback) after the alarm's evaluation that prompted it, at an earlier
    step: in file order the line ran back in time."""
    import json

    from adaptive_eval.plot import _draw, _load

    run = tmp_path / "run"
    run.mkdir()
    rows = [(0, "trigger:steps", 0.5, None), (10, "interval:relaxed", 0.6, None), (20, "interval:relaxed", 0.7, None),
            (32, "alarm:loss:cusum:up", 0.1, None), (25, "lookback:alarm:loss:cusum:up", 0.72, 32),
            (40, "interval:tightened", 0.1, None)]
    (run / "evals.jsonl").write_text("".join(json.dumps({"step": s, "sample_size": 64, "reason": why,
                                                          "metrics": {"acc": m}, "ci": {"acc": [m - 0.05, m + 0.05]},
                                                          **({"evaluated_at": at} if at is not None else {})}) + "\n"
                                             for s, why, m, at in rows))
    ax = _draw(_load(run)).axes[0]
    joined = [ln for ln in ax.get_lines() if len(ln.get_xdata()) > 2][0]
    xs = np.asarray(joined.get_xdata(), dtype=float)
    assert list(xs[np.isfinite(xs)]) == [0, 10, 20, 25, 32, 40]
    # Its own colour in the legend (it was the grey of the scheduled ones).
    from matplotlib.colors import to_rgba

    [dot] = [c for c in ax.collections if c.get_label() == "eval: lookback (1)"]
    assert tuple(dot.get_facecolor()[0]) == to_rgba("tab:green")


def test_the_output_is_in_the_format_its_name_says_and_odd_paths_are_named(tmp_path):
    """Found by a new user: `--out x.pdf` wrote PNG bytes under a .pdf name; a folder that does not exist and a
    trace file both said "not a folder"; a run of one evaluation was titled "1 evaluations"."""
    from adaptive_eval.plot import _draw

    run = make_run(tmp_path / "run", with_tb=False)
    assert plot_run(run, tmp_path / "run.pdf").read_bytes().startswith(b"%PDF")
    assert plot_run(run, tmp_path / "run.svg").read_text().lstrip().startswith("<?xml")
    assert plot_run(run, tmp_path / "picture").read_bytes().startswith(b"\x89PNG")  # (no suffix: PNG)
    with pytest.raises(PlotError, match=r"\.xyz is not a picture format matplotlib writes \(.*pdf.*png"):
        plot_run(run, tmp_path / "run.xyz")
    with pytest.raises(PlotError, match="nope: no such folder"):
        plot_run(tmp_path / "nope")
    (tmp_path / "trace.csv").write_text("step,train/loss\n0,1.0\n")
    with pytest.raises(PlotError, match=r"trace.csv: a file, not a run folder .*adaptive-eval replay"):
        plot_run(tmp_path / "trace.csv")
    one = tmp_path / "one"
    one.mkdir()
    (one / "evals.jsonl").write_text(json.dumps({"step": 5, "sample_size": 1, "reason": "trigger:steps",
                                                 "metrics": {"acc": 0.5}, "ci": {"acc": [0.1, 0.9]}}) + "\n")
    title = _draw(_load(one)).get_suptitle()
    assert "1 evaluation, 1 sample, 0 alarms" in title, title


def test_hf_bookkeeping_in_a_tensorboard_folder_is_not_an_evaluated_metric(tmp_path):
    """A folder HF's TensorBoardCallback wrote: eval/runtime and eval/samples_per_second were drawn as evaluated
    metrics beside eval/accuracy ("12 evaluations, 0 samples"; a new user's probe)."""
    logger = TensorBoardLogger(tmp_path / "tb", flush_secs=3600)
    for step in range(0, 200, 50):
        logger.log(step, {"eval/accuracy": 0.5 + step / 1000, "eval/runtime": 3.2, "eval/samples_per_second": 90.0,
                          "eval/loss": 1.0})
    logger.close()
    # HF's log alone, nothing of adaptive_eval's in it, was drawn as its run ("4 evaluations, 0 samples, 0 alarms",
    # its streams not at all; found in review): refused, with the way to see what adaptive_eval decides on it
    with pytest.raises(PlotError, match=r"tb: no adaptive_eval run in these event files .* adaptive-eval replay "
                                        r".*tb --out DIR, then adaptive-eval plot DIR"):
        _load(tmp_path)
    logger = TensorBoardLogger(tmp_path / "tb", flush_secs=3600)  # (adaptive_eval's evaluator beside it, as the
    for step in range(0, 200, 50):                                 # HF callback writes into HF's folder)
        logger.log(step, {"controller/sample_size": 64.0})
    logger.close()
    drawn = _load(tmp_path)
    assert [e["step"] for e in drawn.evals] == [0, 50, 100, 150]
    assert all(set(e["metrics"]) == {"accuracy", "loss"} for e in drawn.evals), drawn.evals


def test_from_tensorboard_alone_an_asynchronous_runs_sizes_and_every_alarm_text_are_read(tmp_path):
    """Found in review: an asynchronous evaluation's size (controller/sample_size, written where its result was
    integrated) was read at its submission step, another evaluation's whenever the two coincided; an alarm whose
    stream has ': ' in its name, or whose message is empty, was misread."""
    from adaptive_eval import AdaptiveEvaluator, load_config
    from adaptive_eval.asynchronous import InlineExecutor
    from conftest import FakeClock

    cfg = load_config(overrides=["evaluation.asynchronous=true", "evaluation.async_integrate_after_steps=2",
                                 "trigger.freq_steps=2", "policy.budget.enabled=false",
                                 f"logging.tensorboard_dir={tmp_path / 'run' / 'tb'}"])
    ev = AdaptiveEvaluator.from_config(cfg, total_steps=40, clock=FakeClock(), executor=InlineExecutor())
    rng = np.random.default_rng(0)
    for g in range(40):
        ev.observe({"train/loss": 1.0}, g)
        ev.evaluate(lambda request: {"acc": (rng.random(request.sample_size or 300) < 0.7).astype(float)}, 0, g, g)
    ev.close()
    drawn = _load(tmp_path / "run")
    assert len({r.items for r in ev.history}) > 2  # (sizes that differ, so a shifted one shows)
    assert [(e["step"], e["sample_size"]) for e in drawn.evals] == [(r.step, r.items) for r in ev.history]
    other = tmp_path / "texts"
    logger = TensorBoardLogger(other / "tb", flush_secs=3600)
    logger.log(0, {"eval/acc": 0.5})
    for step, text in enumerate(["rank 1: train/kl page_hinkley down: level down (x: y)",
                                 "odd: name cusum up: level up", "train/loss nonfinite:",
                                 "eval/acc rank_discrepancy: ranks differ"]):
        logger.text(step, "alarms", text)
    logger.close()
    assert [(a["stream"], a["detector"], a["direction"]) for a in _load(other).alarms] == [
        ("train/kl", "page_hinkley", "down"), ("odd: name", "cusum", "up"), ("train/loss", "nonfinite", None),
        ("eval/acc", "rank_discrepancy", None)]


def test_a_suites_panel_counts_its_own_items_not_the_evaluations(tmp_path):
    """The ood panel's legend read "4 evals, 948 samples" for 4 x 30 ood items: it summed each evaluation's size,
    every suite's items (a fresh-clone check)."""
    from adaptive_eval.plot import _items, _read_evals

    rows = [{"step": s, "sample_size": 80, "metrics": {"id/acc": 0.7, "ood/acc": 0.3},
             "n": {"id/acc": 50, "ood/acc": 30}} for s in (10, 20)]
    path = tmp_path / "evals.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    evals = _read_evals(path)
    assert (_items(evals, "ood/acc"), _items(evals, "id/acc")) == (60, 100)


def test_your_own_runs_logging_folder_is_drawn_as_it_is(tmp_path):
    """The README's Quick start writes logging.tensorboard_dir=runs/mine, event files right in it; `adaptive-eval plot
    runs/mine` said "no run found" (it wanted a tb/ folder); a new user's probe."""
    from adaptive_eval import AdaptiveEvaluator, load_config
    from adaptive_eval.cli import main
    from conftest import FakeClock

    mine = tmp_path / "runs" / "mine"
    ev = AdaptiveEvaluator.from_config(load_config(overrides=["trigger.freq_steps=5",
                                                              f"logging.tensorboard_dir={mine}"]),
                                       total_steps=30, clock=FakeClock())
    for g in range(30):
        ev.observe({"train/loss": 1.0 + 0.01 * (g % 3)}, g)
        ev.evaluate(lambda: {"acc": [1.0, 0.0, 1.0]}, 0, g, g)
    ev.close()
    assert not (mine / "tb").exists() and list(mine.glob("events.out.tfevents.*"))
    assert [e["step"] for e in _load(mine).evals] == [r.step for r in ev.history]
    assert main(["plot", str(mine), "--out", str(tmp_path / "mine.png")]) == 0
    _check_png(tmp_path / "mine.png")
    assert main(["plot", str(tmp_path / "runs"), "--out", str(tmp_path / "runs.png")]) == 0  # (the folder above it)


def test_a_suites_markers_are_sized_by_its_own_items_not_the_evaluations(tmp_path):
    """Each suite's panel drew its markers at the evaluation's size, every suite's items (n = 70 for aime's 20): the
    small suite's looked as precise as the whole evaluation (a new user's probe)."""
    from adaptive_eval.plot import _draw, _load

    run = tmp_path / "run"
    run.mkdir()
    (run / "evals.jsonl").write_text("".join(json.dumps(
        {"step": s, "sample_size": 70, "reason": "trigger:steps", "metrics": {"math/acc": 0.5, "aime/acc": 0.2},
         "ci": {"math/acc": [0.4, 0.6], "aime/acc": [0.05, 0.45]}, "n": {"math/acc": 50, "aime/acc": 20}}) + "\n"
        for s in (0, 10, 20)))
    fig = _draw(_load(run))
    from matplotlib.collections import PathCollection

    by_panel = {ax.get_ylabel(): max(c.get_sizes().max() for c in ax.collections if isinstance(c, PathCollection)
                                     and len(c.get_offsets()) == 3) for ax in fig.axes if ax.get_ylabel()}
    assert by_panel["eval/aime/acc"] < by_panel["eval/math/acc"]


def test_a_run_given_twice_is_drawn_once(tmp_path):
    """``plot o/plain o/plain`` drew the run twice, titled "o/plain vs o/plain" (a probe): it is one run."""
    from adaptive_eval.plot import plot_runs

    run = make_run(tmp_path / "run")
    assert plot_runs([run, tmp_path / "." / "run"]) == run / "run.png"  # (one run: its own picture)


def test_a_huge_finite_value_or_interval_is_marked_not_a_failure(tmp_path):
    """A probe: an evaluation of 1e308, or an interval of +-1e308, made plot exit 2 with matplotlib's "arange:
    cannot compute length" (a huge metric is data)."""
    rows = [{"step": 1, "metrics": {"acc": 0.5}, "ci": {"acc": [0.4, 0.6]}, "reason": "trigger:steps"},
            {"step": 5, "metrics": {"acc": 1e308}, "ci": {}, "reason": "trigger:steps"},
            {"step": 9, "metrics": {"acc": 0.5}, "ci": {"acc": [-1e308, 1e308]}, "reason": "trigger:steps"}]
    (tmp_path / "evals.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    _check_png(plot_run(tmp_path), min_h=200)


def test_each_reason_an_evaluation_can_have_gets_a_colour_of_its_own():
    """A probe: "peak (5)" and "interval (23)" were two grey legend entries of one colour."""
    from adaptive_eval.plot import _REASON_COLORS, _reason_kind

    kinds = {_reason_kind(r) for r in ("trigger:steps", "alarm:loss:cusum:up", "budget:deferred", "resources:forced",
                                       "lookback:alarm", "interval:relaxed", "peak:confirm", "before_train")}
    assert kinds <= set(_REASON_COLORS) and len({_REASON_COLORS[k] for k in kinds}) == len(kinds)


def test_runs_that_evaluated_the_same_steps_alike_are_drawn_apart_not_one_over_the_other(tmp_path):
    """A probe: the demo's adaptive and async runs evaluate the same steps alike, and plot drew one exactly under the
    other (8 of 9 markers hidden, the legend counting them)."""
    from adaptive_eval.plot import _draw_comparison

    rows = [{"step": s, "metrics": {"acc": 0.5}, "ci": {"acc": [0.4, 0.6]}, "reason": "trigger:steps"}
            for s in (10, 50, 90)]
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "evals.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    fig = _draw_comparison([_load(tmp_path / "a"), _load(tmp_path / "b")])
    xs = [tuple(c.get_offsets()[:, 0]) for c in fig.axes[0].collections if len(c.get_offsets()) == 3]
    assert len(xs) == 2 and all(a < b for a, b in zip(*xs))


def test_a_damaged_event_file_is_said_as_replay_says_it(tmp_path):
    """A probe: one damaged byte a third of the way into a run's event file, and plot drew the part before it as the
    whole run (1 evaluation and no alarm of 6 and 1), unsaid; replay said it."""
    run = make_run(tmp_path / "run")
    (events,) = (run / "tb").glob("events*")
    data = bytearray(events.read_bytes())
    data[len(data) // 3] ^= 0xFF
    events.write_bytes(bytes(data))
    with pytest.warns(RuntimeWarning, match=r"damaged after record \d+: TensorBoard's reader stops there"):
        _load(run)


def test_a_replays_plot_says_its_evaluations_are_simulated(tmp_path):
    """A probe: a replay's run.png said "simulated" only of its eval time; its points and intervals looked like a
    real run's measured evaluations."""
    from adaptive_eval.plot import _title

    run = make_run(tmp_path / "run")
    assert "SIMULATED" not in _title(_load(run))
    summary = json.loads((run / "summary.json").read_text())
    summary["simulated"] = "every evaluation drawn from the trace's ground truth; eval_seconds ... (replay.*)"
    (run / "summary.json").write_text(json.dumps(summary))
    assert _title(_load(run)).startswith("run: SIMULATED evaluations (drawn from the trace's ground truth), ")


def test_a_replay_without_ground_truth_is_titled_as_a_schedule_and_long_labels_wrap(tmp_path):
    """A probe: a replay of a trace with no eval ground truth was titled "SIMULATED evaluations (drawn from the
    trace's ground truth), 1 evaluation, 512 samples": that evaluation measured nothing; and verl's
    eval/val-core/openai/gsm8k/reward/mean@1 as a y-label ran into the panel above."""
    from adaptive_eval.cli import main
    from adaptive_eval.plot import _label, _title
    from adaptive_eval.trace import Trace, TraceRecord, write_trace

    path = tmp_path / "no_truth.csv"
    write_trace(Trace([TraceRecord(i, {"train/reward": 0.5 + 0.01 * (i % 3)}) for i in range(60)]), path)
    assert main(["replay", str(path), "--out", str(tmp_path / "o"), "--no-tensorboard"]) == 0
    assert _title(_load(tmp_path / "o")).startswith(
        "o: SIMULATED schedule (the trace has no eval ground truth: nothing measured), ")
    # a trace with ground truth whose schedule never fired: no evaluation, not "no ground truth" (a probe)
    truth = tmp_path / "truth.csv"
    write_trace(Trace([TraceRecord(i, {"train/reward": 0.5 + 0.01 * (i % 3), "eval/accuracy": 0.5})
                       for i in range(60)]), truth)
    assert main(["replay", str(truth), "--out", str(tmp_path / "n"), "--no-tensorboard",
                 "--set", "trigger.freq_steps=null", "--set", "trigger.eval_at_end=false"]) == 0
    assert _title(_load(tmp_path / "n")).startswith("n: SIMULATED schedule (no evaluation made), 0 evaluations")
    assert _label("eval/val-core/openai/gsm8k/reward/mean@1") == "eval/val-core/openai/gsm8k/\nreward/mean@1"
    assert _label("eval/accuracy") == "eval/accuracy"


def test_one_huge_value_among_two_hundred_leaves_the_axis_on_the_others():
    """A probe: a loss of 1e30 at one step among 200 set the axis' top at 5e27 (interpolated percentiles), and the
    loss's jump from 1 to 2 was a flat line; the value is off the axis, marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from adaptive_eval.plot import _draw_stream_panel

    steps = np.arange(200)
    values = np.where(steps < 100, 1.0, 2.0)
    values[150] = 1e30
    fig, ax = plt.subplots()
    _draw_stream_panel(ax, "train/loss", steps, values)
    low, high = ax.get_ylim()
    plt.close(fig)
    assert low < 1.0 and 2.0 < high < 3.0


def test_hfs_folder_with_the_callbacks_results_draws_them_at_their_weights_steps_with_their_intervals(tmp_path):
    """A probe: HF's TensorBoard folder (report_to=["tensorboard"], the callback's decisions beside HF's scalars)
    was drawn with accuracy_ci_low and _ci_high as metrics of their own, every reason unknown, "0 samples", and
    each point at HF's 1-based step, one after its decision.  HF's own evaluation goes to its weights' step."""
    logger = TensorBoardLogger(tmp_path / "tb", flush_secs=3600)
    for step, size in ((9, 32.0), (19, 48.0)):
        logger.log(step, {"controller/sample_size": size})
        logger.text(step, "decisions", f"evaluated: trigger:steps (n={int(size)})")
        logger.log(step + 1, {"eval/accuracy": 0.5, "eval/accuracy_ci_low": 0.4, "eval/accuracy_ci_high": 0.6,
                              "eval/accuracy_n": size, "eval/adaptive_items": size, "eval/adaptive_step": float(step),
                              # a name="hard" callback's, drawn from its own run (here it took these reasons)
                              "eval/hard_accuracy": 0.3, "eval/hard_adaptive_step": float(step)})
    logger.log(15, {"eval/accuracy": 0.55})  # HF's own (eval_strategy="steps"): the weights after 15 steps
    logger.close()
    drawn = _load(tmp_path)
    assert [(e["step"], e["reason"], e["sample_size"], set(e["metrics"])) for e in drawn.evals] == [
        (9, "trigger:steps", 32.0, {"accuracy"}), (14, "", None, {"accuracy"}),
        (19, "trigger:steps", 48.0, {"accuracy"})]
    assert tuple(drawn.evals[0]["ci"]["accuracy"]) == pytest.approx((0.4, 0.6))
    _check_png(plot_run(tmp_path), min_h=200)

import json
import math
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.custom_scalar import layout_pb2
from tensorboard.util import tensor_util

from adaptive_eval.loggers import MetricLogger, NullLogger
from adaptive_eval.tensorboard import TensorBoardLogger, dashboard_layout, eval_scalars, make_logger, read_texts
from adaptive_eval.types import EvalResult, MetricSummary
from conftest import REPO
from dist_utils import run_ranks

LAYOUT_TAG = "custom_scalars__config__"


def read(log_dir):
    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "tensors": 0})  # 0: keep everything
    acc.Reload()
    return acc


def scalars(acc):
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def texts(acc, tag):
    return [(e.step, tensor_util.make_ndarray(e.tensor_proto).item().decode()) for e in acc.Tensors(tag)]


def last_layout(acc):
    layout = layout_pb2.Layout()
    layout.ParseFromString(tensor_util.make_ndarray(acc.Tensors(LAYOUT_TAG)[-1].tensor_proto).item())
    return layout


def same_float32(a, b):
    a32, b32 = np.float32(a), np.float32(b)
    return (math.isnan(a32) and math.isnan(b32)) or a32.tobytes() == b32.tobytes()


def test_every_scalar_round_trips_with_its_step(tmp_path):
    rng = np.random.default_rng(1)
    written = {}
    with TensorBoardLogger(tmp_path, flush_secs=3600) as logger:
        assert isinstance(logger, MetricLogger)
        for step in [0, 1, 2, 7, 1000, 2**40]:
            row = {"streams/train/reward": float(rng.normal()), "streams/train/reward/cusum": float(rng.random()),
                   "controller/interval": int(rng.integers(1, 500)), "controller/deferred": bool(step % 2),
                   "controller/eval_fraction": np.float64(rng.random()), "controller/alarms": 2.0}
            if step == 7:
                row.update({"eval/math/acc": math.nan, "eval/math/acc/ci_low": -math.inf,
                            "eval/math/acc/ci_high": math.inf, "eval/math/acc/n": 0})
            logger.log(step, row)
            for tag, value in row.items():
                written.setdefault(tag, []).append((step, float(value)))
        logger.log(3, {})  # nothing to write
    got = scalars(read(tmp_path))
    assert set(got) == set(written)
    for tag, points in written.items():
        assert [s for s, _ in got[tag]] == [s for s, _ in points], tag
        assert all(same_float32(a, b) for (_, a), (_, b) in zip(got[tag], points)), (tag, got[tag], points)


def test_a_folder_under_home_written_with_a_tilde_is_that_folder(tmp_path, monkeypatch):
    """A probe: logging.tensorboard_dir: ~/runs wrote into a folder named ~ in the working directory."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    with make_logger("~/runs/tb") as logger:
        logger.log(0, {"x": 1.0})
    assert logger.log_dir == tmp_path / "home" / "runs" / "tb" and not (tmp_path / "~").exists()
    assert [e.step for e in read(logger.log_dir).Scalars("x")] == [0]


def test_text_markers_and_config(tmp_path):
    with TensorBoardLogger(tmp_path) as logger:
        logger.log_config("trigger:\n  freq_steps: 50\nnote: '```'\n")
        logger.text(50, "decisions", "trigger:steps")
        logger.text(120, "alarms", "cusum down on train/reward (change near step 112)")
        logger.text(121, "decisions", "alarm:train/reward:cusum:down")
    acc = read(tmp_path)
    assert read_texts(acc, "decisions") == [(50, "trigger:steps"), (121, "alarm:train/reward:cusum:down")]
    assert read_texts(acc, "alarms") == [(120, "cusum down on train/reward (change near step 112)")]
    ((step, config),) = texts(acc, "run_config")
    assert step == 0 and config == "````yaml\ntrigger:\n  freq_steps: 50\nnote: '```'\n````"
    assert acc.SummaryMetadata("decisions/0000").plugin_data.plugin_name == "text"


def test_a_text_pages_steps_stay_on_one_line_beside_long_texts_and_older_pages_still_read(tmp_path):
    """TensorBoard's text card breaks words anywhere (word-break: break-word) and squeezed the step column beside
    long reasons until "108" read "10" over "8" (a screenshot); <pre>, which its sanitizer keeps, never wraps."""
    from tensorboard.plugin_util import markdown_to_safe_html

    with TensorBoardLogger(tmp_path) as logger:
        logger.text(108, "decisions", "alarm:train/reward:cusum:down " + "x" * 250)
        logger._write_text(120, "alarms/0000", "| step | alarms |\n| ---: | :--- |\n| 120 | written before <pre> |")
    acc = read(tmp_path)
    ((_, page),) = texts(acc, "decisions/0000")
    assert page.splitlines()[2].startswith("| <pre>108</pre> | alarm:")
    assert "<pre>108</pre>" in markdown_to_safe_html(page)  # (kept by the sanitizer the text plugin runs)
    assert read_texts(acc, "decisions") == [(108, "alarm:train/reward:cusum:down " + "x" * 250)]
    assert read_texts(acc, "alarms") == [(120, "written before <pre>")]


def test_every_text_marker_survives_tensorboards_default_sampling(tmp_path):
    """153 decisions and alarms that share a step: all come back from an EventAccumulator with default size
    guidance (10 text events per tag), none replaced by another at the same step."""
    decisions = [(10 * i, f"evaluated: trigger:steps (n={i}) | a pipe\nand a line") for i in range(153)]
    alarms = [(1504, "train/loss cusum up: level up"), (1504, "train/grad_norm spike up: 40 sd"),
              (1504, "train/loss page_hinkley up"), (1530, "eval/acc cusum down")]
    with TensorBoardLogger(tmp_path, flush_secs=3600) as logger:
        for step, text in sorted(decisions + [(s, "ALARM " + t) for s, t in alarms], key=lambda x: x[0]):
            (logger.text(step, "alarms", text[6:]) if text.startswith("ALARM ") else
             logger.text(step, "decisions", text))
    acc = EventAccumulator(str(tmp_path))  # TensorBoard's default size guidance: 10 tensor events per tag
    acc.Reload()
    assert len(acc.Tensors("decisions/0000")) == 10 < 25  # sampled, as TensorBoard does: the page still has all
    assert read_texts(acc, "decisions") == decisions
    assert read_texts(tmp_path, "alarms") == alarms


def test_a_run_resumed_into_the_same_folder_keeps_the_earlier_runs_text_markers(tmp_path):
    """Each writer started at decisions/0000 again, and the reader takes a tag's last write: a resumed run's
    first decision replaced the 30 before it (found by a new-user probe)."""
    first = [(10 * i, f"evaluated: trigger:steps #{i}") for i in range(30)]  # two pages
    with TensorBoardLogger(tmp_path) as logger:
        for step, text in first:
            logger.text(step, "decisions", text)
    (tmp_path / "events.out.tfevents.1.host.1.1").write_bytes(b"")  # a framework's own file: not ours
    resumed = [(300 + 10 * i, f"evaluated: alarm #{i}") for i in range(3)]
    with TensorBoardLogger(tmp_path) as logger:
        for step, text in resumed:
            logger.text(step, "decisions", text)
    assert read_texts(tmp_path, "decisions") == first + resumed
    assert sorted(t for t in read(tmp_path).Tags()["tensors"] if t.startswith("decisions/")) == \
        ["decisions/0000", "decisions/0001", "decisions/1000000"]
    # A writer that outgrew 10,000 pages (250,000 markers) wrote into the next writer's, whose pages, a resumed
    # run's, then replaced its own (a long-run probe): the next writer's pages start far beyond any run's
    from adaptive_eval.tensorboard import TEXT_PAGE_OFFSET, TEXT_PAGE_SIZE

    assert TEXT_PAGE_OFFSET * TEXT_PAGE_SIZE >= 25_000_000


def test_a_new_run_in_a_folder_an_earlier_run_wrote_is_said_and_a_resumed_one_is_not(tmp_path, caplog):
    """A script run again with the same logging.tensorboard_dir: TensorBoard reads the folder as one run, both runs'
    values at the same steps in one series; nothing said it (a new user's probe).  A run resumed from a state_dict()
    writes beside its own earlier files, as expected, and is not warned."""
    from adaptive_eval import AdaptiveEvaluator, load_config

    cfg = load_config(overrides=[f"logging.tensorboard_dir={tmp_path}"])

    def run(state=None, steps=range(10)):
        ev = AdaptiveEvaluator.from_config(cfg, clock=lambda: 0.0)
        if state is not None:
            ev.load_state_dict(state)
        for step in steps:
            ev.observe({"loss": 1.0 + 0.01 * step}, step)
        saved = ev.state_dict()
        ev.close()
        return saved

    said = "already holds the event files of"
    state = run()
    assert said not in caplog.text
    run()
    assert caplog.text.count(said) == 1 and "1 earlier adaptive_eval run(s)" in caplog.text
    assert [e.step for e in read(tmp_path).Scalars("streams/loss")].count(3) == 2  # the two runs, mixed at step 3
    caplog.clear()
    run(state, range(10, 20))  # resumed
    assert said not in caplog.text


def test_a_huge_finite_value_reads_back_finite_and_a_replay_of_the_folder_raises_no_nonfinite_alarm(tmp_path):
    """TensorBoard keeps a scalar as a float32: 1e200 read back as inf, so a replay of the run's own tb/ raised a
    nonfinite alarm (and an urgent evaluation) the run never raised (a new user's probe).  The largest float32 of
    its sign is written instead; NaN and inf stay as they are."""
    from adaptive_eval.replay import replay
    from adaptive_eval.trace import read_trace

    with TensorBoardLogger(tmp_path) as logger:
        for step in range(60):
            logger.log(step, {"streams/ppl": 1e200 if step == 40 else -1e200 if step == 41 else 3.0 + 0.01 * step,
                              "streams/other": math.inf if step == 50 else math.nan if step == 51 else 1.0})
    got = {e.step: e.value for e in read(tmp_path).Scalars("streams/ppl")}
    assert got[40] == np.finfo(np.float32).max and got[41] == -np.finfo(np.float32).max
    other = {e.step: e.value for e in read(tmp_path).Scalars("streams/other")}
    assert other[50] == math.inf and math.isnan(other[51])
    trace = read_trace(tmp_path)
    alarms = replay(trace, None, streams=["ppl"]).alarms
    assert not [a for a in alarms if a["detector"] == "nonfinite"], alarms


def test_layout_has_a_margin_chart_per_metric_and_the_controller_state(tmp_path):
    result = EvalResult(step=10, sample_size=64, reason="trigger:steps", seconds=1.0,
                        metrics={"acc": MetricSummary(0.5, 64, (0.4, 0.6)),
                                 "math/reward": MetricSummary(1.5, 64, (1.2, 1.8))})
    with TensorBoardLogger(tmp_path) as logger:
        for step in range(100):
            logger.log(step, {"controller/interval": 50, "controller/sample_size": 64})
            if step == 10:
                logger.log(step, eval_scalars(result))
            if step == 60:
                logger.log(step, {"eval/late": 0.3, "eval/late/ci_low": 0.2, "eval/late/ci_high": 0.4})
            if step > 60:  # known metrics: no more layout writes
                logger.log(step, eval_scalars(result))
    acc = read(tmp_path)
    assert [e.step for e in acc.Tensors(LAYOUT_TAG)] == [0, 10, 60]  # at start, then once per new metric
    layout = last_layout(acc)
    assert [c.title for c in layout.category] == ["eval", "controller", "alarms"]
    margins = {ch.title: ch.margin.series[0] for ch in layout.category[0].chart if ch.HasField("margin")}
    assert set(margins) == {"acc", "math/reward", "late"}
    s = margins["math/reward"]
    assert (s.value, s.lower, s.upper) == ("eval/math/reward", "eval/math/reward/ci_low", "eval/math/reward/ci_high")
    controller_tags = [t for ch in layout.category[1].chart for t in ch.multiline.tag]
    for tag in ["controller/interval", "controller/sample_size", "controller/eval_fraction", "controller/deferred",
                "controller/eval_errors"]:
        assert f"^{tag}$" in controller_tags


def test_tensorboards_custom_scalars_plugin_shows_the_latest_layout(tmp_path):
    # What the dashboard itself serves: the plugin keeps the last layout of each run, merges runs by category.
    from tensorboard import context
    from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.custom_scalar import custom_scalars_plugin

    for run, metric in [("adaptive", "acc"), ("fixed", "acc"), ("other", "reward")]:
        with TensorBoardLogger(tmp_path / run) as logger:
            logger.log(5, {"controller/interval": 10})
            logger.log(10, {f"eval/{metric}": 0.5, f"eval/{metric}/ci_low": 0.4, f"eval/{metric}/ci_high": 0.6})
    mux = plugin_event_multiplexer.EventMultiplexer()
    mux.AddRunsFromDirectory(str(tmp_path))
    mux.Reload()
    tb_context = base_plugin.TBContext(logdir=str(tmp_path), multiplexer=mux, plugin_name_to_instance={},
                                       data_provider=data_provider.MultiplexerDataProvider(mux, str(tmp_path)))
    plugin = custom_scalars_plugin.CustomScalarsPlugin(tb_context)
    layout = json.loads(plugin.layout_impl(context.RequestContext(), ""))
    charts = {c["title"]: [ch["title"] for ch in c["chart"]] for c in layout["category"]}
    assert charts["eval"][:2] == ["acc", "samples per evaluation"] and "reward" in charts["eval"]
    assert len(charts["eval"]) == 3  # the identical "acc" and "samples" charts of two runs merged
    assert charts["controller"] == ["interval (steps)", "sample size (items)", "eval-time fraction",
                                    "deferred (1) or evaluated (0)", "evaluation errors so far"]  # one unit each
    assert charts["alarms"] == ["alarms so far"]


def test_alarm_chart_is_a_running_count_per_stream(tmp_path):
    """Discrete alarms as a step function that smoothing and joining lines cannot misread (not +-1 values)."""
    from adaptive_eval import AdaptiveEvaluator, load_config

    logger = TensorBoardLogger(tmp_path, flush_secs=3600)
    ev = AdaptiveEvaluator.from_config(load_config(overrides=["trigger.freq_steps=20"]), logger=logger)
    for g in range(120):
        ev.observe({"loss": float("nan") if g in (30, 60, 90) else 1.0}, g)
        ev.evaluate(lambda: None, 0, g, g)
    ev.close()
    acc = read(tmp_path)
    points = [(e.step, e.value) for e in acc.Scalars("controller/alarms")]
    assert {(30, 1.0), (60, 2.0), (90, 3.0)} <= set(points)
    assert all(v == sum(a <= s for a in (30, 60, 90)) for s, v in points), points
    assert points[0][1] == 0.0  # written with every evaluation too: the chart starts from 0
    assert [c.title for c in last_layout(acc).category[-1].chart] == ["alarms so far"]


def test_time_series_tab_opens_on_the_controller_and_the_results(tmp_path):
    """TensorBoard's Time Series tab groups scalar tags by their first path segment, sorts the groups by name
    and opens only the first two (``tagGroupExpanded`` in its webapp): those must be ``controller`` (alarms,
    interval, sample size) and ``eval`` (the results), not groups of alarms."""
    from adaptive_eval import AdaptiveEvaluator, load_config

    logger = TensorBoardLogger(tmp_path, flush_secs=3600)
    logger.log_config("trigger:\n  freq_steps: 50\n")
    ev = AdaptiveEvaluator.from_config(load_config(overrides=["trigger.freq_steps=50"]), logger=logger)
    rng = np.random.default_rng(0)
    for g in range(120):  # a level shift in each stream (the CUSUM's message starts with the stream's name)
        ev.observe({"train/loss": 1.0 + (g >= 40) + 0.01 * rng.normal(), "train/kl": 0.1 + 0.05 * (g >= 60)
                    + 0.001 * rng.normal()}, g)
        ev.evaluate(lambda: {"acc": 0.5}, 0, g, g)
    ev.close()
    acc = read(tmp_path)
    groups = sorted({tag.split("/", 1)[0] for tag in acc.Tags()["scalars"]})
    assert groups[:2] == ["controller", "eval"], groups
    # The controller group stays six charts whatever the number of streams that alarm (eval comes after it).
    assert sorted(t for t in acc.Tags()["scalars"] if t.startswith("controller/")) == [
        "controller/alarms", "controller/deferred", "controller/eval_errors", "controller/eval_fraction",
        "controller/interval", "controller/sample_size"]
    # The Text tab, too, opens its first two sections by name: the alarms and the decisions, not the config.
    text_tags = [t for t in acc.Tags()["tensors"] if acc.SummaryMetadata(t).plugin_data.plugin_name == "text"]
    assert sorted({t.split("/", 1)[0] for t in text_tags}) == ["alarms", "decisions", "picked", "run_config"]
    # An alarm's line names its stream once (the detector's message starts with it too).
    (s1, loss), (s2, kl) = read_texts(acc, "alarms")
    assert 40 <= s1 < 45 and 60 <= s2 < 65, (s1, s2)
    assert loss.startswith("train/loss cusum up: level up (CUSUM ") and loss.count("train/loss") == 1, loss
    assert kl.startswith("train/kl cusum up: level up (CUSUM ") and kl.count("train/kl") == 1, kl


def test_layout_of_metric_without_interval_is_multiline():
    layout = dashboard_layout(["loss"])
    assert layout["eval"]["loss"] == ("Multiline", ["^eval/loss$"])
    assert "eval" not in dashboard_layout([])


def test_flush_on_close_and_on_schedule(tmp_path):
    logger = TensorBoardLogger(tmp_path / "slow", flush_secs=3600)
    for step in range(50):
        logger.log(step, {"streams/loss": 1.0 / (step + 1)})
    # The first scalars are flushed at once (the run shows up in TensorBoard); the rest wait for a flush.
    assert [s for s, _ in scalars(read(tmp_path / "slow"))["streams/loss"]] == [0]
    logger.close()
    assert [s for s, _ in scalars(read(tmp_path / "slow"))["streams/loss"]] == list(range(50))

    eager = TensorBoardLogger(tmp_path / "eager", flush_secs=0)
    for step in range(5):
        eager.log(step, {"streams/loss": float(step)})
    assert len(scalars(read(tmp_path / "eager"))["streams/loss"]) == 5
    eager.close()


def test_after_close_everything_is_a_noop(tmp_path):
    logger = TensorBoardLogger(tmp_path, flush_secs=3600)
    logger.log(0, {"a": 1.0})
    logger.close()
    logger.close()
    logger.log(1, {"a": 2.0})
    logger.text(1, "decisions", "x")
    logger.log_config("a: 1")
    logger.flush()
    assert logger.closed and "closed" in repr(logger)
    assert scalars(read(tmp_path)) == {"a": [(0, 1.0)]}


def test_bad_input_is_a_clear_error_and_writes_nothing(tmp_path):
    with TensorBoardLogger(tmp_path) as logger:
        with pytest.raises(TypeError, match="'eval/acc': expected a number, got str"):
            logger.log(1, {"eval/acc": "high"})
        with pytest.raises(TypeError, match="'x': expected a number, got NoneType"):
            logger.log(1, {"eval/acc": 0.5, "x": None})
        with pytest.raises(TypeError, match="scalars must be a mapping"):
            logger.log(1, [("a", 1.0)])
        with pytest.raises(TypeError, match="step must be an integer"):
            logger.log(1.5, {"a": 1.0})
        with pytest.raises(TypeError, match="tags must be non-empty strings"):
            logger.log(1, {3: 1.0})
        with pytest.raises(TypeError, match="must be a string"):
            logger.text(1, "decisions", None)
        logger.log(2, {"eval/acc": 0.5, "eval/acc/ci_low": 0.4, "eval/acc/ci_high": 0.6})
    acc = read(tmp_path)
    assert scalars(acc)["eval/acc"] == [(2, 0.5)] and "x" not in scalars(acc)
    assert [ch.title for ch in last_layout(acc).category[0].chart if ch.HasField("margin")] == ["acc"]


def test_unwritable_log_dir_is_a_clear_error(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(OSError, match="cannot create a TensorBoard event file"):
        TensorBoardLogger(tmp_path / "file" / "tb")


def test_make_logger_without_process_group(tmp_path):
    assert isinstance(make_logger(None), NullLogger)
    logger = make_logger(tmp_path / "tb", flush_secs=5)
    assert isinstance(logger, TensorBoardLogger) and logger.flush_secs == 5 and logger.rank is None
    logger.close()


def _ranks_log(rank, world, root):
    import torch.distributed as dist

    from adaptive_eval.tensorboard import make_logger

    kinds = []
    only_rank1 = dist.new_group([1])
    # (both ranks past the group's set-up before either goes on to exit: rank 0, done first, destroyed its process
    # group while rank 1 still set up gloo's mesh for its own, "connectFullMesh failed ... Connection closed by
    # peer", once in a full suite)
    dist.barrier()
    for name, group in [("world", None), ("group1", only_rank1)]:
        log_dir = os.path.join(root, name, f"rank{rank}")
        logger = make_logger(log_dir, group=group)
        logger.log(1, {"streams/loss": 1.0})
        logger.text(1, "decisions", "trigger:steps")
        logger.close()
        kinds.append((type(logger).__name__, os.path.exists(log_dir)))
    dist.barrier()
    return kinds


def test_make_logger_writes_only_on_rank_0_of_the_group(tmp_path):
    r0, r1 = run_ranks(_ranks_log, str(tmp_path), world=2)
    assert r0 == [("TensorBoardLogger", True), ("NullLogger", False)]
    assert r1 == [("NullLogger", False), ("TensorBoardLogger", True)]
    assert list((tmp_path / "world").iterdir()) == [tmp_path / "world" / "rank0"]
    (event_file,) = (tmp_path / "world" / "rank0").iterdir()
    assert event_file.name.endswith(".rank0")


def _run_script(code, tmp_path, **kw):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(code))
    return subprocess.Popen([sys.executable, str(script), str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def test_importing_the_package_does_not_import_tensorboard_or_matplotlib(tmp_path):
    proc = _run_script("""
        import sys
        import adaptive_eval, adaptive_eval.tensorboard, adaptive_eval.plot
        print(sorted(m for m in ("tensorboard", "matplotlib") if m in sys.modules))
    """, tmp_path)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.strip() == "[]"


CHILD = """
    import os, signal, sys, time
    from adaptive_eval.tensorboard import TensorBoardLogger
    root = sys.argv[1]
    MODE = {mode!r}
    if MODE == "handler":
        def on_term(signum, frame):
            open(os.path.join(root, "user_handler_ran"), "w").close()
            sys.exit(3)
        signal.signal(signal.SIGTERM, on_term)
    kept = TensorBoardLogger(os.path.join(root, "kept"), flush_secs=3600)
    dropped = TensorBoardLogger(os.path.join(root, "dropped"), flush_secs=3600)
    for step in range(20):
        kept.log(step, {{"streams/loss": float(step)}})
        dropped.log(step, {{"streams/loss": float(step)}})
    if MODE == "fork":
        pid = os.fork()
        if pid == 0:  # the child must neither write into nor re-flush the parent's files
            kept.log(999, {{"streams/loss": 999.0}})
            sys.exit(0)
        os.waitpid(pid, 0)
        kept.log(20, {{"streams/loss": 20.0}})
    del dropped  # garbage-collected without close()
    if MODE in ("term", "handler"):
        print("ready", flush=True)
        for _ in range(1200):  # short sleeps: a SIGTERM the kernel hands to numpy's worker thread is handled
            time.sleep(0.05)   # when the main thread next runs Python code (tests/test_reliability_crash.py)
"""


@pytest.mark.parametrize("mode", ["exit", "term", "handler", "fork"])
def test_data_is_flushed_at_exit_on_sigterm_and_across_fork(tmp_path, mode):
    proc = _run_script(CHILD.format(mode=mode), tmp_path)
    if mode in ("term", "handler"):
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    expected_rc = {"exit": 0, "fork": 0, "term": -signal.SIGTERM, "handler": 3}[mode]
    assert proc.returncode == expected_rc, err
    steps = list(range(21 if mode == "fork" else 20))
    assert [s for s, _ in scalars(read(tmp_path / "kept"))["streams/loss"]] == steps
    assert [s for s, _ in scalars(read(tmp_path / "dropped"))["streams/loss"]] == list(range(20))
    assert (tmp_path / "user_handler_ran").exists() == (mode == "handler")


def test_sigterm_handler_is_restored_when_the_last_logger_closes(tmp_path):
    proc = _run_script("""
        import signal, sys
        from adaptive_eval.tensorboard import TensorBoardLogger
        def mine(signum, frame): pass
        signal.signal(signal.SIGTERM, mine)
        a, b = TensorBoardLogger(sys.argv[1] + "/a"), TensorBoardLogger(sys.argv[1] + "/b")
        installed = signal.getsignal(signal.SIGTERM)
        a.close()
        still = signal.getsignal(signal.SIGTERM) is installed
        b.close()
        print(installed is not mine, still, signal.getsignal(signal.SIGTERM) is mine)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        c = TensorBoardLogger(sys.argv[1] + "/c")  # an ignored SIGTERM stays ignored
        print(signal.getsignal(signal.SIGTERM) == signal.SIG_IGN)
    """, tmp_path)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.split() == ["True", "True", "True", "True"]


def test_count_charts_keep_suites_strata_and_loose_metrics_apart():
    """A suite's "items per evaluation" chart plots its metrics' item counts, not its strata's (a few items each,
    on a separate chart), and the loose metrics' "samples per evaluation" chart none of the suites'."""
    import re

    tags = ["eval/math/acc/n", "eval/math/acc/stratum=hard/n", "eval/math/acc/stratum=easy/n",
            "eval/math/acc/samples_per_item", "eval/math/acc/stratum=hard/samples_per_item", "eval/reward/n",
            "eval/mathx/acc/n"]
    layout = dashboard_layout(["math/acc", "math/acc/stratum=hard", "math/acc/stratum=easy", "reward", "mathx/acc"],
                              groups=["math", "mathx"])

    def plotted(category, chart):
        kind, patterns = layout[category][chart]
        assert kind == "Multiline"
        return [t for t in tags if any(re.search(p, t) for p in patterns)]

    assert plotted("eval: math", "items per evaluation") == ["eval/math/acc/n"]
    assert plotted("eval: math", "samples per item") == ["eval/math/acc/samples_per_item"]
    assert plotted("eval: math", "items per stratum") == ["eval/math/acc/stratum=hard/n",
                                                          "eval/math/acc/stratum=easy/n"]
    assert plotted("eval: mathx", "items per evaluation") == ["eval/mathx/acc/n"]
    assert "items per stratum" not in layout["eval: mathx"]
    assert plotted("eval", "samples per evaluation") == ["eval/reward/n"]
    assert plotted("eval", "samples per evaluation") == [t for t in tags if re.search("^eval/.*/n$", t)
                                                         and not t.startswith(("eval/math/", "eval/mathx/"))]


def test_count_charts_leave_out_paired_differences_and_pass_at_k():
    """The "items per evaluation" chart also plotted each metric's paired difference's n (the items shared with
    the previous evaluation) and its pass@k's, 11 lines over 4 runs (found by a new-user probe)."""
    import re

    tags = ["eval/id/acc/n", "eval/id/acc/paired_diff/n", "eval/id/acc/pass@4/n", "eval/id/acc/maj@8/n",
            "eval/id/acc/samples_per_item", "eval/id/acc/pass@4/samples_per_item", "eval/loss/n",
            "eval/loss/paired_diff/n", "eval/a@b/n", "eval/id/recall@10/n"]
    layout = dashboard_layout(["id/acc", "id/acc/pass@4", "id/acc/maj@8", "id/acc/paired_diff", "loss",
                               "loss/paired_diff", "a@b", "id/recall@10"], groups=["id"])

    def plotted(category, chart):
        return [t for t in tags if any(re.search(p, t) for p in layout[category][chart][1])]

    assert plotted("eval: id", "items per evaluation") == ["eval/id/acc/n", "eval/id/recall@10/n"]  # (a user's @k)
    assert plotted("eval: id", "samples per item") == ["eval/id/acc/samples_per_item"]
    assert plotted("eval", "samples per evaluation") == ["eval/loss/n", "eval/a@b/n"]  # (a name with @, not a k)


def test_the_picked_checkpoint_is_written_to_tensorboard_at_close(tmp_path):
    """The pick (scoring.pick_best, as summary.json has it) was nowhere in TensorBoard (found by a new-user
    probe): at close it is the text "picked", once however often close() is called."""
    from adaptive_eval import AdaptiveEvaluator, load_config
    from adaptive_eval.scoring import pick_best

    cfg = load_config("areal", ["trigger.freq_steps=5", "evaluation.sample_size=40",
                                f"logging.tensorboard_dir={tmp_path / 'tb'}"])
    ev = AdaptiveEvaluator.from_config(cfg)
    rng = np.random.default_rng(0)
    for g in range(40):
        p = 0.5 + 0.01 * g if g < 25 else 0.6
        ev.evaluate(lambda r: {"acc": (rng.random(40) < p).astype(float)}, 0, g, g)
    ev.close()
    ev.close()
    pick = pick_best(ev.history, "acc")
    lo, hi = pick.interval
    assert read_texts(str(tmp_path / "tb"), "picked") == [(39, (
        f"step {pick.step}: acc {pick.estimate:.4g} [{lo:.4g}, {hi:.4g}] (the best shrunk estimate, higher is "
        f"better, of 8 evaluations; "
        f"its interval allows for the pick; measured {ev.history[pick.step // 5]['acc'].mean:.4g} on 40 items)"))]


def test_a_decision_says_how_many_items_were_evaluated_when_fewer_than_asked(tmp_path):
    """A 300-item validation set asked for 500: the decision text said (n=500)."""
    from adaptive_eval import AdaptiveEvaluator, load_config

    cfg = load_config("areal", ["trigger.freq_steps=5", "evaluation.sample_size=500",
                                f"logging.tensorboard_dir={tmp_path / 'tb'}"])
    ev = AdaptiveEvaluator.from_config(cfg)
    for g in range(10):
        ev.evaluate(lambda r: {"acc": [1.0, 0.0] * (len(r.indices(300)) // 2)}, 0, g, g)
    ev.close()
    found = [t for _, t in read_texts(str(tmp_path / "tb"), "decisions")]
    assert found and all(t.endswith("(n=300 of 500 asked)") for t in found), found


def test_a_decision_with_eval_suites_gives_the_sum_of_the_suites_items_not_of_asked(tmp_path):
    """With suites the text said "(n=50 of 80 asked)" for 50 + 30 items of two suites, all evaluated."""
    from adaptive_eval import AdaptiveEvaluator, load_config

    cfg = load_config("areal", ["trigger.freq_steps=5", f"logging.tensorboard_dir={tmp_path / 'tb'}",
                                "evaluation.suites.a.size=50", "evaluation.suites.b.size=30"])
    ev = AdaptiveEvaluator.from_config(cfg)

    def evaluate_fn(request):
        return {f"{name}/acc": [[1.0]] * len(s.indices) for name, s in request.suites.items()}

    for g in range(10):
        ev.evaluate(evaluate_fn, 0, g, g)
    ev.close()
    found = [t for _, t in read_texts(str(tmp_path / "tb"), "decisions")]
    assert found and all(t.endswith("(n=80)") for t in found), found


def test_a_second_live_evaluator_writing_to_the_same_folder_is_said(tmp_path, caplog):
    """A new user's probe: two evaluators of one run (one per task) given one folder: TensorBoard read it as one
    run, their controller/ charts mixed into one line going back and forth and the custom-scalars layout was the
    last one's, without a word.  Said when the second opens it; not for a folder of its own, nor after the first
    closed (a resumed run writes into its folder again)."""
    import logging

    from adaptive_eval import AdaptiveEvaluator, load_config

    def make(folder, preset="default"):
        return AdaptiveEvaluator.from_config(load_config(preset, [f"logging.tensorboard_dir={folder}"]))

    said = "another adaptive_eval logger in this process is writing to"
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        a, b = make(tmp_path / "tb"), make(tmp_path / "tb", "aggressive")
        c = make(tmp_path / "other")
    assert caplog.text.count(said) == 1 and str(tmp_path / "tb") in caplog.text
    for ev in (a, b, c):
        ev.close()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="adaptive_eval"):
        make(tmp_path / "tb").close()
    assert said not in caplog.text


def test_a_long_deferral_leaves_every_evaluation_on_tensorboards_default_chart(tmp_path):
    """controller/deferred was 1 at every deferred step: 2,900 points under a budget that defers most steps, and
    TensorBoard's server keeps 1,000 a chart, so the evaluations' 0s were dropped from it (a new user's probe).  Now
    a deferral's first and last steps carry it."""
    from adaptive_eval import AdaptiveEvaluator, load_config

    out, now = tmp_path / "tb", [0.0]
    cfg = load_config(overrides=[f"logging.tensorboard_dir={out}", "trigger.freq_steps=25",
                                 "logging.log_streams=false"])
    ev = AdaptiveEvaluator.from_config(cfg, total_steps=2500, clock=lambda: now[0])

    def evaluate_fn(request):
        now[0] += 300.0  # an evaluation worth 300 training steps: the 11% budget defers most of the run
        return {"accuracy": (np.random.default_rng(request.step).random(len(request.indices(1000))) < 0.7) * 1.0}

    for step in range(2500):
        now[0] += 1.0
        ev.evaluate(evaluate_fn, 0, step, step)
    ev.close()
    assert ev.summary()["deferrals"] > 2000
    server = EventAccumulator(str(out), size_guidance={"scalars": 1000})  # the server's default
    server.Reload()
    points = [(e.step, e.value) for e in server.Scalars("controller/deferred")]
    evaluated = {r.step for r in ev.history}
    # each evaluation's 0, and a 0 the step before a deferral that begins later (the rising edge a step, not a
    # slope from the evaluation's 0; a probe in Chromium)
    assert evaluated <= {s for s, v in points if v == 0.0}
    assert all(s in evaluated or (s + 1, 1.0) in points for s, v in points if v == 0.0)
    assert len(points) <= 4 * len(ev.history)  # (a deferral's first and last steps, each evaluation's 0, the edge)


def test_decision_and_alarm_texts_render_as_written_in_tensorboards_markdown(tmp_path):
    """TensorBoard renders text as markdown: ``train/__kl__`` read "train/**kl**", ``Model.__init__()``
    "Model.**init**()" and ``loss*2 and reward*3`` lost its asterisks to italics (a new user's probe)."""
    from tensorboard.plugin_util import markdown_to_safe_html

    written = ["train/__kl__ up", "Model.__init__() got an unexpected keyword", "loss*2 and reward*3",
               "a | b [c](d) `e`"]
    with TensorBoardLogger(tmp_path) as logger:
        for step, text in enumerate(written):
            logger.text(step, "decisions", text)
    acc = read(tmp_path)
    assert [t for _, t in read_texts(acc, "decisions")] == written
    page = texts(acc, "decisions/0000")[-1][1]
    html = markdown_to_safe_html(page)
    for text in written:
        assert text.replace("<", "&lt;") in html, (text, html)


def test_an_asynchronous_run_charts_its_alarm_count_at_every_evaluation(tmp_path):
    """controller/alarms was written at alarms only in an asynchronous run: a run without alarms had no chart of them,
    and the count's line stopped at the last alarm (a new user's probe)."""
    from adaptive_eval import AdaptiveEvaluator, load_config

    out = tmp_path / "tb"
    cfg = load_config(overrides=[f"logging.tensorboard_dir={out}", "trigger.freq_steps=25",
                                 "policy.budget.enabled=false", "evaluation.asynchronous=true",
                                 "evaluation.async_integrate_after_steps=2"])
    ev = AdaptiveEvaluator.from_config(cfg, total_steps=100, clock=lambda: 0.0, eval_clock=lambda: 0.0)
    for step in range(100):
        ev.observe({"train/loss": 1.0 + 0.01 * (step % 3)}, step)
        ev.evaluate(lambda r: {"accuracy": [1.0, 0.0] * 16}, 0, step, step)
    ev.close()
    acc = read(out)
    alarms = [(e.step, e.value) for e in acc.Scalars("controller/alarms")]
    integrated = [e.step for e in acc.Scalars("controller/async_latency_steps")]
    assert len(integrated) >= 3 and [s for s, _ in alarms] == integrated and {v for _, v in alarms} == {0.0}


def test_the_alarm_count_never_goes_back_in_steps_and_a_deferral_going_on_at_the_end_keeps_its_last_step(tmp_path):
    """(From a review of this round's changes.)  An asynchronous result's alarm wrote controller/alarms at the
    evaluation's own step, below the integration step it was written at just before (TensorBoard drops the points
    after a step written out of order); and a deferral still going on at close() had its first point only."""
    from adaptive_eval import AdaptiveEvaluator, load_config

    out = tmp_path / "async"
    ev = AdaptiveEvaluator(load_config(overrides=[
        "trigger.freq_steps=2", "evaluation.asynchronous=true", "evaluation.async_integrate_after_steps=3",
        "evaluation.max_in_flight=3", "policy.budget.enabled=false", f"logging.tensorboard_dir={out}"]),
        total_steps=30)
    for s in range(30):
        ev.observe({"train/loss": 1.0}, s)
        ev.evaluate(lambda r: {"acc": [float("nan")] * 4 if r.step == 3 else [1.0, 0.0, 1.0, 1.0]}, 0, s, s)
    ev.close()
    assert ev.summary()["alarms"] >= 1
    steps = [e.step for e in read(out).Scalars("controller/alarms")]
    assert steps == sorted(steps) and steps[-1] == 29
    out, now = tmp_path / "deferred", [0.0]
    cfg = load_config(overrides=[f"logging.tensorboard_dir={out}", "trigger.freq_steps=25",
                                 "trigger.eval_at_end=false"])
    ev = AdaptiveEvaluator.from_config(cfg, total_steps=400, clock=lambda: now[0])

    def dear(request):
        now[0] += 300.0
        return {"acc": [1.0, 0.0] * 8}

    for s in range(400):
        now[0] += 1.0
        ev.evaluate(dear, 0, s, s)
    ev.close()
    points = [(e.step, e.value) for e in read(out).Scalars("controller/deferred")]
    assert points[-1] == (399, 1.0) and points[-2][1] == 1.0


def test_close_called_by_a_signal_handler_during_close_returns_and_the_first_close_finishes():
    """(From a review.)  A preemption's handler calling close() while the training thread is in close() deadlocked on
    the lock that keeps two threads' close() from integrating everything twice."""
    import threading
    import time

    from adaptive_eval import AdaptiveEvaluator, load_config

    ev = AdaptiveEvaluator(load_config(overrides=["trigger.freq_steps=5", "evaluation.asynchronous=true",
                                                  "policy.budget.enabled=false"]), total_steps=8)
    release, inner = threading.Event(), []

    def slow(request):
        release.wait(30)
        return {"acc": [1.0, 0.0, 1.0]}

    for s in range(8):
        ev.observe({"train/loss": 1.0}, s)
        ev.evaluate(slow, 0, s, s)

    def handler(signum, frame):
        ev.close()  # (returns at once: the close under way finishes)
        inner.append(time.monotonic())
        release.set()

    old = signal.signal(signal.SIGALRM, handler)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        ev.close()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert inner and [r.step for r in ev.history] == [4, 7]


@pytest.mark.parametrize("on_error", ["skip", "raise"])
def test_a_failed_evaluation_is_in_tensorboard_under_raise_as_under_skip(tmp_path, on_error):
    """A new user's probe: with on_error: raise, a loop that catches the error and trains on (or a trainer that
    stops) had 4 errors in summary() and none in TensorBoard: no "failed:" decision, no controller/eval_errors."""
    from adaptive_eval import AdaptiveEvaluator, load_config

    ev = AdaptiveEvaluator.from_config(load_config(overrides=[
        "trigger.freq_steps=5", f"evaluation.on_error={on_error}", "evaluation.precision=none",
        f"logging.tensorboard_dir={tmp_path}", "policy.budget.enabled=false"]))

    def grader_down(request):
        raise RuntimeError("grader down")

    raised = 0
    for step in range(12):
        ev.observe({"train/loss": 1.0}, step)
        try:
            ev.evaluate(grader_down, 0, step, step)
        except RuntimeError:
            raised += 1
    ev.close()
    assert raised == (0 if on_error == "skip" else ev.summary()["eval_errors"]) and ev.summary()["eval_errors"] >= 2
    acc = read(tmp_path)
    failed = [t for t in read_texts(acc, "decisions") if t[1].startswith("failed: ")]
    assert len(failed) == ev.summary()["eval_errors"] and "RuntimeError: grader down" in failed[0][1]
    errors = [e.value for e in acc.Scalars("controller/eval_errors")]
    assert errors[-1] == ev.summary()["eval_errors"]


def test_a_logger_pickles_as_a_closed_logger_of_the_same_folder(tmp_path, caplog):
    """ddp_spawn pickles a framework callback, its evaluator's logger with it: an open event file did not pickle (a
    review).  The copy writes nothing: two processes never write one event file."""
    import pickle

    logger = TensorBoardLogger(tmp_path)
    logger.log(1, {"eval/acc": 0.5})
    with caplog.at_level("WARNING", logger="adaptive_eval"):
        copy = pickle.loads(pickle.dumps(logger))
    # (a copy of a logger still writing is said; a review: the copy went on writing nothing, unsaid)
    assert "a copy of the logger writing" in caplog.text and "writes nothing" in caplog.text
    assert copy.closed and not logger.closed and copy.log_dir == logger.log_dir
    copy.log(2, {"eval/acc": 0.6})
    copy.text(2, "decisions", "from the copy")
    copy.flush()
    copy.close()
    logger.log(3, {"eval/acc": 0.7})
    logger.close()
    assert scalars(read(tmp_path))["eval/acc"] == [(1, 0.5), (3, pytest.approx(0.7))]
    assert len(list(tmp_path.iterdir())) == 1
    caplog.clear()
    with caplog.at_level("WARNING", logger="adaptive_eval"):
        pickle.loads(pickle.dumps(logger))  # (closed when copied, as Lightning's second ddp_spawn fit copies it)
    assert caplog.text == ""

"""What the adapters rely on in the core, without any framework: lazy imports, errors naming the extra,
metric kinds, the tracked metric, TensorBoard beside another writer."""

import logging
import math
import os
import subprocess
import sys
import textwrap

import pytest

from adaptive_eval import AdaptiveEvaluator, ConfigError, load_config
from adaptive_eval.policies import primary_metric
from adaptive_eval.stats import summarize_outputs
from adaptive_eval.types import EvalResult


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)


def test_importing_the_package_and_the_integrations_imports_no_framework():
    out = run_python("""
        import sys
        import adaptive_eval, adaptive_eval.integrations
        from adaptive_eval.integrations import areal  # the AReaL shim needs no AReaL
        print(sorted(m for m in ("transformers", "lightning", "accelerate", "areal") if m in sys.modules))
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("module,blocked", [("hf", "transformers"), ("hf", "accelerate"), ("lightning", "lightning")])
def test_a_missing_framework_is_an_import_error_naming_the_extra(module, blocked):
    out = run_python(f"""
        import sys
        sys.modules[{blocked!r}] = None  # as if it were not installed
        try:
            import adaptive_eval.integrations.{module}
        except ModuleNotFoundError as exc:
            print("ModuleNotFoundError:", exc)
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ModuleNotFoundError: adaptive_eval.integrations.")
    assert "pip install 'adaptive-eval[integrations]'" in out.stdout


def test_a_bare_scalar_in_0_1_gets_no_guessed_proportion_interval():
    s = summarize_outputs({"eval_loss": 0.4, "eval_runtime": 0.2, "acc": [1, 0, 1, 1]}, 100)
    assert all(math.isnan(x) for x in s["eval_loss"].ci) and not s["eval_loss"].binary
    assert all(math.isnan(x) for x in s["eval_runtime"].ci)
    assert s["acc"].binary  # per-sample 0/1 values are still proportions


def test_metric_kinds_declare_what_a_metric_is():
    kinds = {"eval_accuracy": "proportion", "flag": "mean"}
    s = summarize_outputs({"eval_accuracy": 0.75, "flag": [1, 0, 1, 1], "loss": [0.3, 0.5, 0.4]}, 200, kinds=kinds)
    assert s["eval_accuracy"].binary and s["eval_accuracy"].ci[0] < 0.75 < s["eval_accuracy"].ci[1]
    assert not s["flag"].binary and math.isfinite(s["flag"].ci[0])  # Student t even for 0/1 values
    assert not s["loss"].binary
    cfg = load_config(overrides=["evaluation.metric_kinds.eval_accuracy=proportion", "trigger.freq_steps=1"])
    ev = AdaptiveEvaluator.from_config(cfg)
    r = ev.evaluate(lambda req: req.indices(100) and {"eval_accuracy": 0.5, "eval_loss": 0.5}, 0, 0, 0)
    assert r is not None and r["eval_accuracy"].binary and not r["eval_loss"].binary
    assert r["eval_accuracy"].n == cfg.policy.sample_size.initial and math.isfinite(r["eval_accuracy"].ci[0])  # over the items handed
    with pytest.raises(ConfigError, match=r"evaluation\.metric_kinds\.acc: must be one of proportion, mean"):
        load_config(overrides=["evaluation.metric_kinds.acc=binary"])


def test_the_tracked_metric_is_never_bookkeeping_and_prefers_per_item_values():
    s = summarize_outputs({"epoch": 0.5, "eval_runtime": 0.1, "eval_samples_per_second": 900.0,
                           "eval_score": 0.7, "eval_loss": [0.3, 0.5]}, 2)
    result = EvalResult(step=0, sample_size=2, reason="", seconds=0.0, metrics=s)
    assert primary_metric(result, None)[0] == "eval_loss"  # per item, so it has a real interval
    only_scalars = EvalResult(step=0, sample_size=2, reason="", seconds=0.0,
                              metrics={k: v for k, v in s.items() if k != "eval_loss"})
    assert primary_metric(only_scalars, None)[0] == "eval_score"
    assert primary_metric(result, "eval_runtime")[0] == "eval_runtime"  # named explicitly: as asked
    # AReaL's stats_tracker dict: its timings and counts first, then the reward (it tracked timeperf/eval_rollout
    # as higher-is-better; a probe)
    areal = summarize_outputs({"timeperf/eval_rollout": 12.5, "eval-rollout/reward__count": 64.0,
                               "eval-rollout/reward": 0.42}, 64)
    assert primary_metric(EvalResult(step=0, sample_size=64, reason="", seconds=0.0, metrics=areal), None)[0] == \
        "eval-rollout/reward"


def test_freq_zero_is_every_step_as_in_areal():
    ev = AdaptiveEvaluator.from_config(load_config("areal", ["trigger.freq_steps=0"]))
    assert [g for g in range(5) if ev.evaluate(lambda: {"a": 1.0}, 0, g, g)] == [0, 1, 2, 3, 4]
    with pytest.raises(ConfigError, match="trigger.freq_steps: must be non-negative"):
        load_config(overrides=["trigger.freq_steps=-1"])


def test_our_event_file_never_collides_with_a_summary_writer_in_the_same_folder(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    from adaptive_eval import tensorboard as tbmod

    writer = SummaryWriter(str(tmp_path))  # torch's naming: events.out.tfevents.<time>.<host>.<pid>.<n>
    writer.add_scalar("theirs", 1.0, 0)
    # the next name our counter would give is already taken (the old collision, forced)
    uid = next(tbmod._uid) + 1
    import socket
    import time

    taken = tmp_path / ("events.out.tfevents.%010d.%s.%d.%d.adaptive_eval" % (time.time(), socket.gethostname(),
                                                                              os.getpid(), uid))
    taken.write_bytes(b"")
    ours = tbmod.TensorBoardLogger(tmp_path)
    ours.log(0, {"mine": 2.0})
    ours.close()
    writer.close()
    assert ours.event_file != taken and ours.event_file.name.endswith(".adaptive_eval")
    tags = {EventAccumulator(str(p)).Reload().Tags()["scalars"][0] for p in tmp_path.iterdir() if p.stat().st_size}
    assert tags == {"theirs", "mine"}


def test_a_tensorboard_error_never_reaches_the_training_step(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with caplog.at_level(logging.ERROR, logger="adaptive_eval"):
        ev = AdaptiveEvaluator.from_config(load_config(overrides=[f"logging.tensorboard_dir={blocker}/tb",
                                                                  "trigger.freq_steps=1"]))
    assert "TensorBoard logging is off" in caplog.text
    assert ev.evaluate(lambda: {"a": 1.0}, 0, 0, 0) is not None
    ev = AdaptiveEvaluator.from_config(load_config("areal", [f"logging.tensorboard_dir={tmp_path}/tb",
                                                             "trigger.freq_steps=1"]))

    def disk_full(data):
        raise OSError(28, "No space left on device")

    ev.logger._records.write = disk_full
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="adaptive_eval"):
        for g in range(1, 4):
            ev.observe({"train/loss": 1.0}, g)
            assert ev.evaluate(lambda: {"a": 1.0}, 0, g, g) is not None
    assert caplog.text.count("TensorBoard logging to") == 1  # reported once, then off
    ev.close()


def test_counters_and_timings_the_trainers_log_are_not_watched():
    """TRL's cumulative num_tokens and its step_time were watched by detectors (a counter always "shifts"); so was
    HF's train_tokens_per_second (include_num_input_tokens_seen), a wall-clock throughput (a new user's probe)."""
    from adaptive_eval.integrations._common import watched

    assert not any(watched(k) for k in ("num_tokens", "train/num_tokens", "step_time", "train/step_time",
                                        "learning_rate", "eval_loss", "train_runtime", "train_tokens_per_second"))
    assert all(watched(k) for k in ("train/reward", "train/kl", "train/completions/mean_length", "loss"))


def test_closing_reports_what_it_drained_before_a_failure_among_it_goes_up():
    """A review: under on_error: raise, a failure close() integrated (the final evaluation's) went up before the
    adapter reported the other results the drain integrated with it: lost to the trainer's logs."""
    from adaptive_eval.integrations._common import Integrated, StepGuard, close_and_drain

    ev = AdaptiveEvaluator.from_config(load_config(overrides=[
        "evaluation.asynchronous=true", "evaluation.async_integrate_after_steps=5", "trigger.freq_steps=4",
        "evaluation.on_error=raise", "policy.budget.enabled=false", "policy.interval.enabled=false"]),
        total_steps=20, clock=lambda: 0.0)

    def fn(request):
        if request.reason.startswith("trigger:final"):
            raise ConnectionError("the grader is down")
        return {"acc": [1.0, 0.0] * 10}

    integrated = Integrated()  # (as an adapter: what each step integrated, reported at that step)
    ev.add_listener(integrated)
    for g in range(20):
        ev.observe({"loss": 1.0}, g)
        ev.evaluate(fn, 0, g, g)
        integrated.take()
    in_flight = [job.step for job in ev._async.jobs]
    assert in_flight[-1] == 19 and len(in_flight) >= 2
    reported = []
    with pytest.raises(ConnectionError, match="grader is down"):
        close_and_drain(ev, StepGuard("raise"), lambda result: reported.append(result.step), integrated)
    assert reported == in_flight[:-1]  # the results that came back beside the failure, reported first


@pytest.mark.parametrize("given", ["name", "loaded", "dict"])
def test_an_adapters_overrides_are_checked_whatever_the_config_is_given_as(given):
    """A probe: with a loaded config or a dict, the callbacks merged their overrides bare: "trigger.freq_steps" (no
    "=") set it to null, the step trigger off, without a word; 010 was read as 8; a misspelt key was OmegaConf's
    error, not a ConfigError naming the override."""
    from adaptive_eval.integrations._common import build_config

    config = {"name": "aggressive", "loaded": load_config("aggressive"),
              "dict": {"trigger": {"freq_steps": 10}}}[given]
    for item, says in (("trigger.freq_steps", "expected KEY=VALUE"), ("trigger.freq_steps=", "no value"),
                       ("trigger.freq_steps=010", "octal"), ("trigger.freq_stepz=5", "did you mean")):
        with pytest.raises(ConfigError, match=f"override {item!r}: .*{says}"):
            build_config(config, [item])
    assert build_config(config, ["trigger.freq_steps=7", "streams.default.0.repeat=true"]).trigger.freq_steps == 7

"""The AReaL shim side by side with AReaL's own Evaluator / EpochStepTimeFreqCtl (from the installed package)."""

import json
import sys
import types

import pytest

import areal_code
from adaptive_eval import ConfigError, Evaluator as JointEvaluator
from adaptive_eval.config import as_config
from adaptive_eval.integrations import areal as shim

AREAL = areal_code.load()
pytestmark = pytest.mark.skipif(AREAL is None, reason="the areal package is not installed (see the README's test command)")


def areal_config(**kw):
    return AREAL.EvaluatorConfig(experiment_name="e", trial_name="t", fileroot="/tmp", **kw)


def spec(spe, epochs=3, batch=4):
    return AREAL.FinetuneSpec(total_train_epochs=epochs, dataset_size=spe * batch, train_batch_size=batch)


current = [0]


def run(evaluator, start, stop, spe, *, request=False):
    """AReaL's loop: evaluate(evaluate_fn, epoch, epoch_step, global_step) after each step; the steps evaluated."""
    fired = []
    for g in range(start, stop):
        epoch, step = divmod(g, spe)
        if request:
            evaluator.evaluate(lambda req: fired.append(req.step) or {"acc": [1.0]}, epoch, step, g)
        else:
            evaluator.evaluate(lambda: fired.append(current[0]), epoch, step, current.__setitem__(0, g) or g)
    return fired


SCHEDULES = [  # freq_epochs, freq_steps, eval_before_train, steps per epoch
    (None, 5, True, 10), (None, 5, False, 10), (1, None, True, 4), (2, None, False, 3), (None, 0, False, 6),
    (0, None, False, 6), (1, 3, False, 4), (1, 3, True, 4), (2, 5, True, 7), (None, None, True, 5),
]


@pytest.mark.parametrize("fe,fs,before,spe", SCHEDULES)
def test_the_shims_schedule_is_areals(fe, fs, before, spe):
    cfg = areal_config(freq_epochs=fe, freq_steps=fs, eval_before_train=before)
    ours, theirs = shim.Evaluator(cfg, spec(spe)), AREAL.Evaluator(cfg, spec(spe))
    assert run(ours, 0, 60, spe) == run(theirs, 0, 60, spe)


@pytest.mark.parametrize("fe,fs,before,spe", [s for s in SCHEDULES if (s[0] is None) != (s[1] is None)])
def test_one_trigger_is_areals_in_every_evaluator_eval_before_train_included(fe, fs, before, spe):
    cfg = areal_config(freq_epochs=fe, freq_steps=fs, eval_before_train=before)
    expected = run(AREAL.Evaluator(cfg, spec(spe)), 0, 60, spe)
    assert run(JointEvaluator(cfg, steps_per_epoch=spe), 0, 60, spe) == expected
    adaptive = shim.AdaptiveEvaluator(cfg, spec(spe, epochs=100), preset="areal")
    assert run(adaptive, 0, 60, spe, request=True) == expected
    if fs == 5 and before:
        assert expected[:3] == [0, 4, 9]  # the case: not [0, 5, 10]


@pytest.mark.parametrize("fe,fs,before,spe", [s for s in SCHEDULES if s[0] is not None and s[1] is not None]
                         + [(1, 7, False, 12)])
def test_the_adaptive_shim_on_the_default_preset_keeps_areals_schedule_with_two_triggers(fe, fs, before, spe):
    """Found by a new-user probe: AdaptiveEvaluator(config.evaluator, ft_spec) counted several frequencies jointly
    (the default preset's trigger), so an epoch end soon after a step-triggered evaluation never fired: with
    freq_epochs=1, freq_steps=7 and 12 steps per epoch, AReaL's 6, 11, 13, 20, 23, ... read 6, 13, 20, 27, ..."""
    cfg = areal_config(freq_epochs=fe, freq_steps=fs, eval_before_train=before)
    expected = run(AREAL.Evaluator(cfg, spec(spe)), 0, 60, spe)
    # (a clock of steps, the evaluations taking no time: the budget defers nothing)
    adaptive = shim.AdaptiveEvaluator(cfg, spec(spe, epochs=100), clock=lambda: float(current[0]))
    assert run(adaptive, 0, 60, spe) == expected
    # so too the top-level plain Evaluator given AReaL's config (it counted them jointly: 6, 13, 20, ...), and
    # the same frequencies as a plain dict; an adaptive_eval config keeps its own trigger.independent
    assert run(JointEvaluator(cfg, steps_per_epoch=spe), 0, 60, spe) == expected
    freqs = {"freq_epochs": fe, "freq_steps": fs, "eval_before_train": before}
    assert run(JointEvaluator(freqs, steps_per_epoch=spe), 0, 60, spe) == expected
    joint = JointEvaluator({"trigger": freqs}, steps_per_epoch=spe)
    if (fe, fs, spe) == (1, 7, 12):
        assert run(joint, 0, 60, spe)[:4] == [6, 13, 20, 27]
        assert expected[:5] == [6, 11, 13, 20, 23]


def test_before_train_then_steps_matches_areals_first_call_evaluation():
    cfg = areal_config(freq_steps=5, eval_before_train=True)
    ev = JointEvaluator(cfg, steps_per_epoch=10)
    assert ev.before_train(lambda: None) is not None  # the initial weights
    assert run(ev, 0, 20, 10) == [4, 9, 14, 19]  # then every 5 trained steps, as AReaL's step counter


@pytest.mark.parametrize("fe,fs,before,spe,cut", [(1, 3, False, 4, 6), (1, 3, True, 4, 9), (2, 5, False, 7, 17),
                                                  (None, 5, True, 10, 7), (1, None, False, 4, 5)])
def test_areals_saved_state_continues_areals_schedule(tmp_path, fe, fs, before, spe, cut):
    cfg = areal_config(freq_epochs=fe, freq_steps=fs, eval_before_train=before)
    uninterrupted = run(AREAL.Evaluator(cfg, spec(spe)), 0, 60, spe)
    theirs = AREAL.Evaluator(cfg, spec(spe))
    run(theirs, 0, cut, spe)
    path = tmp_path / "evaluator_info.json"  # what AReaL's RecoverInfo.dump writes
    path.write_text(json.dumps(theirs.state_dict()))
    state = json.loads(path.read_text())
    expected = [g for g in uninterrupted if g >= cut]
    plain = shim.Evaluator(cfg, spec(spe))
    plain.load_state_dict(state)
    assert run(plain, cut, 60, spe) == expected
    adaptive = shim.AdaptiveEvaluator(cfg, spec(spe, epochs=100), preset="areal")
    adaptive.load_state_dict(state)
    assert run(adaptive, cut, 60, spe, request=True) == expected
    # The joint counting (adaptive_eval.Evaluator, the default preset) keeps AReaL's next evaluation.
    joint = JointEvaluator(cfg, steps_per_epoch=spe)
    joint.load_state_dict(state)
    assert run(joint, cut, 60, spe)[:1] == expected[:1]


@pytest.mark.parametrize("fe,fs,before,spe,cut", [(1, 3, False, 4, 6), (None, 5, True, 10, 7), (2, 5, True, 7, 17)])
def test_our_saved_state_is_read_by_areals_evaluator(tmp_path, fe, fs, before, spe, cut):
    cfg = areal_config(freq_epochs=fe, freq_steps=fs, eval_before_train=before)
    uninterrupted = run(AREAL.Evaluator(cfg, spec(spe)), 0, 60, spe)
    for ours in (shim.Evaluator(cfg, spec(spe)), shim.AdaptiveEvaluator(cfg, spec(spe, 100), preset="areal")):
        run(ours, 0, cut, spe, request=isinstance(ours, shim.AdaptiveEvaluator))
        path = tmp_path / "evaluator_info.json"
        path.write_text(json.dumps(ours.state_dict()))
        state = json.loads(path.read_text())
        back = AREAL.Evaluator(cfg, spec(spe))  # the user switches back to AReaL's evaluator
        back.load_state_dict(state)
        assert run(back, cut, 60, spe) == [g for g in uninterrupted if g >= cut]


@pytest.mark.parametrize("eval_seconds", [0.0, 0.5, 2.0])  # 0.5 and 2.0: the budget defers evaluations
def test_adaptive_shim_resumes_from_its_own_state_with_the_same_decisions(eval_seconds):
    # An injected clock: a training step costs 1 s, an evaluation eval_seconds, and the restart 100 s.  (On the
    # wall clock the budget policy's decisions follow the machine's load, and no two runs would agree.)
    cfg = areal_config(freq_steps=4)
    now = [0.0]

    def make():
        return shim.AdaptiveEvaluator(cfg, spec(10, epochs=6), preset="default", clock=lambda: now[0])

    def evaluate_fn(req):
        now[0] += eval_seconds
        return {"acc": [1.0, 0.0, 1.0]}

    def drive(ev, start, stop):
        out = []
        for g in range(start, stop):
            now[0] += 1.0
            ev.observe({"train/loss": 1.0 + (5.0 if g > 30 else 0.0) + 0.01 * (g % 3)}, g)
            r = ev.evaluate(evaluate_fn, *divmod(g, 10), g)
            if r is not None:
                out.append((r.step, r.reason))
        return out

    full = make()
    expected = drive(full, 0, 60)
    assert any(reason.startswith("alarm:") for _, reason in expected)
    assert (full.state_dict()["deferrals"] > 0) == (eval_seconds > 0)  # the budget deferred evaluations
    for cut in (7, 25, 40):
        now[0] = 0.0
        a = make()
        drive(a, 0, cut)
        state = json.dumps(a.state_dict())  # saved at the cut; the job restarts later
        now[0] += 100.0
        b = make()
        b.load_state_dict(json.loads(state))
        assert drive(b, cut, 60) == [e for e in expected if e[0] >= cut], cut


def test_bad_specs_and_configs_are_config_errors_naming_the_field():
    with pytest.raises(ConfigError, match=r"FinetuneSpec\.steps_per_epoch: must be positive, got 0"):
        shim.AdaptiveEvaluator(areal_config(freq_steps=5), AREAL.FinetuneSpec(total_train_epochs=1, dataset_size=3,
                                                                               train_batch_size=8))
    with pytest.raises(ConfigError, match=r"FinetuneSpec\.steps_per_epoch"):
        shim.Evaluator(areal_config(freq_steps=5), AREAL.FinetuneSpec(1, 3, 8))
    for make in (lambda c: shim.Evaluator(c, spec(4)), lambda c: shim.AdaptiveEvaluator(c, spec(4)), as_config):
        with pytest.raises(ConfigError, match=r"EvaluatorConfig\.freq_steps: must be a non-negative"):
            make(areal_config(freq_steps=-2))
        with pytest.raises(ConfigError, match=r"EvaluatorConfig\.freq_secs"):
            make(areal_config(freq_secs=-1))
    with pytest.raises(TypeError, match="FinetuneSpec"):
        shim.Evaluator(areal_config(freq_steps=5), object())


def test_as_config_maps_areals_config_and_rejects_other_dataclasses():
    cfg = as_config(areal_config(freq_epochs=1, freq_steps=7, eval_before_train=True))
    assert (cfg.trigger.freq_epochs, cfg.trigger.freq_steps, cfg.trigger.eval_before_train) == (1, 7, True)
    assert cfg.policy.alarm.enabled  # the rest is the default preset
    with pytest.raises(ConfigError, match="FinetuneSpec dataclass is neither"):
        as_config(spec(4))
    # AdaptiveEvaluator.from_config takes it too (it failed deep inside before).
    from adaptive_eval import AdaptiveEvaluator

    assert AdaptiveEvaluator.from_config(areal_config(freq_steps=3)).cfg.trigger.freq_steps == 3
    # Duck-typed as the plain shim reads it: the adaptive one refused a SimpleNamespace the plain one took
    import types

    plain = types.SimpleNamespace(freq_epochs=None, freq_steps=4, freq_secs=None)
    assert as_config(plain).trigger.freq_steps == 4
    assert shim.AdaptiveEvaluator(plain, spec(10)).cfg.trigger.freq_steps == 4
    with pytest.raises(ConfigError, match=r"SimpleNamespace\.freq_steps: must be a non-negative"):
        shim.AdaptiveEvaluator(types.SimpleNamespace(freq_epochs=None, freq_steps=-1, freq_secs=None), spec(10))


@pytest.mark.parametrize("fe,fs,before,spe", [(None, 5, True, 10), (1, 3, False, 4)])
def test_areals_config_as_an_omegaconf_node_schedules_as_the_dataclass(fe, fs, before, spe):
    """AReaL's EvaluatorConfig as OmegaConf holds it (``OmegaConf.structured``, a YAML section): every field of it
    was an "unknown key" to the adaptive evaluators, and the plain shim failed on ``trigger``."""
    from omegaconf import OmegaConf

    dataclass = areal_config(freq_epochs=fe, freq_steps=fs, eval_before_train=before)
    expected = run(AREAL.Evaluator(dataclass, spec(spe)), 0, 40, spe)
    for node in (OmegaConf.structured(dataclass),
                 OmegaConf.create({"freq_epochs": fe, "freq_steps": fs, "freq_secs": None, "eval_before_train": before,
                                   "experiment_name": "e"})):
        assert run(shim.Evaluator(node, spec(spe)), 0, 40, spe) == expected
        assert run(shim.AdaptiveEvaluator(node, spec(spe, epochs=100), preset="areal"), 0, 40, spe,
                   request=True) == expected
        assert as_config(node).trigger.freq_steps == fs
    # a plain mapping with a key AReaL's config does not have is refused, not dropped (a review)
    with pytest.raises(ConfigError, match=r"EvaluatorConfig: eval_before_trian: unknown key .*did you mean "
                                          r"'eval_before_train'"):
        as_config({"freq_epochs": None, "freq_steps": 5, "freq_secs": None, "eval_before_trian": True})
    with pytest.raises(ConfigError, match=r"EvaluatorConfig: evaluation: unknown key"):
        as_config({"freq_epochs": None, "freq_steps": 5, "freq_secs": None, "evaluation": {"metric": "acc"}})
    bad = OmegaConf.structured(areal_config(freq_steps=5))
    bad.freq_steps = -1
    for make in (lambda c: shim.Evaluator(c, spec(4)), lambda c: shim.AdaptiveEvaluator(c, spec(4)), as_config):
        with pytest.raises(ConfigError, match=r"EvaluatorConfig\.freq_steps: must be a non-negative"):
            make(bad)


def test_patch_areal_replaces_the_name_the_trainers_build(caplog):
    names = []
    for n in ("rl", "sft"):  # stand-ins for areal.trainer.*_trainer, whose imports need AReaL's whole stack
        mod = types.ModuleType(f"_patched_{n}_trainer")
        mod.Evaluator = AREAL.Evaluator
        sys.modules[mod.__name__] = mod
        names.append(mod.__name__)
    try:
        # a misspelt preset: refused here, before anything is patched (it was refused when the trainer built its
        # evaluator, after the model had loaded; a probe)
        with pytest.raises(ConfigError, match="agressive"):
            shim.patch_areal("agressive", modules=names)
        assert sys.modules[names[0]].Evaluator is AREAL.Evaluator
        assert shim.patch_areal("default", modules=names) == names
        built = sys.modules[names[0]].Evaluator(areal_config(freq_steps=5), spec(10))  # the trainers' call
        assert isinstance(built, shim.AdaptiveEvaluator) and built.total_steps == 30
        assert built.cfg.trigger.freq_steps == 5 and built.cfg.policy.alarm.enabled
        # an asynchronous preset under AReaL's own trainers is said to be unsafe (live weights, no close())
        from adaptive_eval import load_config

        shim.patch_areal(load_config(overrides=["evaluation.asynchronous=true"]), modules=names)
        with caplog.at_level("WARNING", logger="adaptive_eval"):
            built = sys.modules[names[0]].Evaluator(areal_config(freq_steps=5), spec(10))
        assert built.cfg.evaluation.asynchronous and "never call evaluator.close()" in caplog.text
        built.close()
    finally:
        for n in names:
            sys.modules.pop(n)
    assert shim.patch_areal("default") == []  # AReaL's real trainer modules cannot import here: skipped, no error


class FakeRolloutEngine:
    """AReaL's eval rollout engine needs an inference server; this one records what it is asked."""

    def __init__(self):
        self.submitted = []

    def submit(self, data, workflow, workflow_kwargs=None, group_size=1, is_eval=False):
        import torch

        self.submitted.append((data["id"], group_size, is_eval))
        if data["id"] % 7 == 0:
            return ("rejected", data["id"])
        return ("ok", torch.tensor([float((data["id"] + k) % 2) for k in range(group_size)]))

    def wait_for_task(self, task, timeout=None):
        kind, value = task
        return None if kind == "rejected" else {"rewards": value}


def test_rollout_evaluate_fn_submits_only_the_requested_items_with_n_samples_each():
    engine = FakeRolloutEngine()
    dataset = [{"id": i} for i in range(100)]
    fn = shim.rollout_evaluate_fn(engine, dataset, workflow="wf", n_samples=4)
    ev = shim.AdaptiveEvaluator(areal_config(freq_steps=1), spec(10), preset="default",
                                )
    result = ev.evaluate(fn, 0, 0, 0)
    asked = [i for i, _, _ in engine.submitted]
    assert len(asked) == len(set(asked)) == ev.cfg.policy.sample_size.initial
    assert all(g == 4 and is_eval for _, g, is_eval in engine.submitted)
    rejected = sum(1 for i in asked if i % 7 == 0)
    assert result["rejected"].n == len(asked) and result["rejected"].mean == pytest.approx(rejected / len(asked))
    assert result["reward"].n == len(asked) - rejected and result["reward"].mean == pytest.approx(0.5)


def test_an_areal_style_evaluate_fn_with_a_default_argument_is_called_without_the_request():
    seen = []

    def evaluate_fn(verbose=False):  # AReaL-style: no request; `verbose` must not receive it
        seen.append(verbose)

    ev = shim.Evaluator(areal_config(freq_steps=1), spec(4))
    ev.evaluate(evaluate_fn, 0, 0, 0)
    assert seen == [False]


@pytest.mark.parametrize("executor", ["thread", "deferred"])
def test_the_adaptive_shim_evaluates_asynchronously_on_a_snapshot_while_areals_loop_goes_on(executor):
    """AReaL's constructor with executor=: an evaluation is submitted at its step, integrated 3 steps later while
    the loop trains on, on the weights of its step; close() waits for the final one."""
    from concurrent.futures import ThreadPoolExecutor

    import torch

    from adaptive_eval.asynchronous import SnapshotEval
    from conftest import DeferredExecutor

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    at = {}

    def score(request, weights):  # per item: the weight sum the snapshot holds
        return {"score": [float(sum(t.double().sum() for t in weights.values()))] * 8}

    from adaptive_eval import load_config

    # the rest of the configuration (what AReaL's EvaluatorConfig has no keys for) comes from the preset
    preset = load_config(overrides=["evaluation.async_integrate_after_steps=3", "policy.budget.enabled=false"])
    with ThreadPoolExecutor(1) if executor == "thread" else DeferredExecutor() as pool:
        ev = shim.AdaptiveEvaluator(areal_config(freq_steps=5), spec(10, epochs=6), preset=preset, executor=pool)
        assert ev.cfg.evaluation.asynchronous and ev.cfg.trigger.freq_steps == 5  # executor= turned it on
        events = []
        ev.add_listener(events.append)
        for g in range(60):
            ev.observe({"train/loss": 1.0 + 0.01 * (g % 3)}, g)
            with torch.no_grad():
                model.weight.add_(0.1)  # the step's update
            at[g] = float(sum(t.double().sum() for t in model.state_dict().values()))
            ev.evaluate(SnapshotEval(model, score), *divmod(g, 10), g)
        ev.close()
    cancelled = [e["step"] for e in events if e["kind"] == "cancelled"]  # by the urgent final one, when in flight
    submitted = [e["step"] for e in events if e["kind"] == "submitted" and e["step"] not in cancelled]
    results = [e["result"] for e in events if e["kind"] == "eval"]
    assert submitted == [r.step for r in results] and len(results) >= 3 and results[-1].step == 59
    assert [r.integrated_step for r in results] == [min(r.step + 3, 59) for r in results]
    assert [r["score"].mean for r in results] == [pytest.approx(at[r.step], abs=1e-9) for r in results]


# -- found by a new user trying the framework integrations ------------------------------------------------------
def test_areals_default_config_with_every_frequency_none_evaluates_nothing_as_areal():
    """AReaL's default EvaluatorConfig (every frequency None) never evaluates in AReaL; the shim evaluated the last
    step anyway (the preset's trigger.eval_at_end)."""
    cfg = areal_config()
    assert (cfg.freq_epochs, cfg.freq_steps, cfg.freq_secs) == (None, None, None)  # AReaL's defaults
    expected = run(AREAL.Evaluator(cfg, spec(10, epochs=2)), 0, 20, 10)
    adaptive = shim.AdaptiveEvaluator(cfg, spec(10, epochs=2))
    assert expected == [] and run(adaptive, 0, 20, 10, request=True) == expected
    assert not adaptive.cfg.trigger.eval_at_end
    # with a frequency set, the final weights are still evaluated (the README says so)
    configured = shim.AdaptiveEvaluator(areal_config(freq_steps=7), spec(10, epochs=2))
    fired = run(configured, 0, 20, 10, request=True)
    assert fired[0] == 6 and fired[-1] == 19 and configured.history[-1].reason == "trigger:final"


def test_a_presets_own_schedule_replaced_by_areals_config_is_said(caplog):
    """A probe: a preset of trigger.freq_steps 50 beside AReaL's default EvaluatorConfig (every frequency None)
    evaluated nothing in 200 steps, unsaid.  The drop-in keeps AReaL's frequencies, and now says so; a shipped
    preset's schedule giving way is not said (it is every drop-in's)."""
    from adaptive_eval import load_config

    mine = load_config(overrides=["trigger.freq_steps=50"])
    with caplog.at_level("WARNING", logger="adaptive_eval"):
        ev = shim.AdaptiveEvaluator(areal_config(), spec(10, epochs=2), preset=mine)
    assert ev.cfg.trigger.freq_steps is None
    assert "the schedule is AReaL's" in caplog.text and "trigger.freq_steps 50 -> None" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="adaptive_eval"):
        shim.AdaptiveEvaluator(areal_config(freq_steps=50), spec(10, epochs=2), preset=mine)  # the same: unsaid
        shim.AdaptiveEvaluator(areal_config(freq_steps=7), spec(10, epochs=2), preset="default")
    assert "the schedule is AReaL's" not in caplog.text


def test_the_last_step_evaluated_is_the_last_one_areals_total_train_steps_lets_the_trainer_make(tmp_path):
    """AReaL's trainers stop at config.total_train_steps (here 25), while FinetuneSpec.total_train_steps is epochs x
    steps per epoch (30): the final weights (step 24) were never evaluated."""
    ev = shim.AdaptiveEvaluator(areal_config(freq_steps=10), spec(10, epochs=3), total_train_steps=25)
    fired = run(ev, 0, 25, 10, request=True)
    assert ev.total_steps == 25 and fired[0] == 9 and fired[-1] == 24 and ev.history[-1].reason == "trigger:final"
    assert shim.AdaptiveEvaluator(areal_config(), spec(10, epochs=3), total_train_steps=99).total_steps == 30
    with pytest.raises(ConfigError, match="total_train_steps: must be a positive integer"):
        shim.AdaptiveEvaluator(areal_config(), spec(10), total_train_steps=0)
    # through patch_areal: the trainer's own config.total_train_steps, read where the trainer builds its evaluator
    mod = types.ModuleType("_patched_total_trainer")
    mod.Evaluator = AREAL.Evaluator
    sys.modules[mod.__name__] = mod

    class Trainer:  # what AReaL's PPOTrainer.__init__ does (rl_trainer.py 1.0.4)
        def __init__(self, config, ft_spec):
            self.config = config
            self.evaluator = mod.Evaluator(config.evaluator, ft_spec)

    try:
        assert shim.patch_areal("default", modules=[mod.__name__]) == [mod.__name__]
        config = types.SimpleNamespace(evaluator=areal_config(freq_steps=10), total_train_steps=25)
        assert Trainer(config, spec(10, epochs=3)).evaluator.total_steps == 25
        config.total_train_steps = None  # not set: FinetuneSpec's
        assert Trainer(config, spec(10, epochs=3)).evaluator.total_steps == 30
        # the trainer's own TensorBoard folder (AReaL's stats_logger.tensorboard.path) gets the decisions and alarms
        # when the preset names none (nothing reached TensorBoard under AReaL by default; a probe)
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        config.stats_logger = types.SimpleNamespace(tensorboard=types.SimpleNamespace(path=str(tmp_path / "tb")))
        built = Trainer(config, spec(10, epochs=3)).evaluator
        assert built.cfg.logging.tensorboard_dir == str(tmp_path / "tb")
        for g in range(10):
            built.evaluate(lambda: {"reward": [1.0, 0.0, 1.0]}, 0, g, g)
        built.close()
        assert "decisions" in str(EventAccumulator(str(tmp_path / "tb")).Reload().Tags())
        from adaptive_eval import load_config

        mine = load_config(overrides=[f"logging.tensorboard_dir={tmp_path / 'mine'}"])
        shim.patch_areal(mine, modules=[mod.__name__])
        assert Trainer(config, spec(10, epochs=3)).evaluator.cfg.logging.tensorboard_dir == str(tmp_path / "mine")
    finally:
        sys.modules.pop(mod.__name__)


def test_ppo_trainer_train_total_epochs_moves_the_final_evaluation_to_the_runs_last_step():
    """PPOTrainer.train(total_epochs=N) runs N epochs whatever config.total_train_epochs (the FinetuneSpec the
    evaluator was built from) says: the final evaluation went to the config's last step, mid-run for more epochs and
    not at all for fewer.  patch_areal wraps train, once, as AReaL's own signature has it."""
    import inspect

    mod = types.ModuleType("_patched_epochs_trainer")
    mod.Evaluator = AREAL.Evaluator
    sys.modules[mod.__name__] = mod

    class PPOTrainer:  # AReaL's __init__ and train loop (rl_trainer.py 1.0.4), without the rollout
        def __init__(self, config, ft_spec, steps_per_epoch):
            self.config = config
            self.train_dataloader = list(range(steps_per_epoch))
            self.evaluator = mod.Evaluator(config.evaluator, ft_spec)
            self.fired = []

        def train(self, workflow=None, eval_workflow=None, workflow_kwargs=None, eval_workflow_kwargs=None,
                  dynamic_filter_fn=None, total_epochs=None):
            total_epochs = self.config.total_train_epochs if total_epochs is None else total_epochs
            spe = len(self.train_dataloader)
            for g in range(total_epochs * spe):
                if self.config.total_train_steps is not None and g >= self.config.total_train_steps:
                    break
                self.evaluator.evaluate(lambda req: self.fired.append((req.step, req.reason)) or {"acc": [1.0]},
                                        g // spe, g % spe, g)

    mod.PPOTrainer = PPOTrainer
    real = areal_code._root() / "trainer" / "rl_trainer.py"
    try:
        assert shim.patch_areal("default", modules=[mod.__name__]) == [mod.__name__]
        shim.patch_areal("default", modules=[mod.__name__])  # (wrapped once)
        assert PPOTrainer.train.__wrapped__.__name__ == "train" and not hasattr(PPOTrainer.train.__wrapped__,
                                                                                 "__wrapped__")
        assert list(inspect.signature(PPOTrainer.train).parameters)[-1] == "total_epochs"

        def trained(epochs, cap=None):
            config = types.SimpleNamespace(evaluator=areal_config(freq_steps=4), total_train_epochs=3,
                                           total_train_steps=cap)
            trainer = PPOTrainer(config, spec(10, epochs=3), 10)
            trainer.train(None, total_epochs=epochs)
            return [s for s, r in trainer.fired if r == "trigger:final"], trainer.evaluator.total_steps

        assert trained(2) == ([19], 20)  # (none at all before: the config's last step, 29, never came)
        assert trained(4) == ([39], 40)  # (step 29 was a "final" one mid-run)
        assert trained(None) == ([29], 30)
        assert trained(4, cap=35) == ([34], 35)  # AReaL stops at config.total_train_steps
    finally:
        sys.modules.pop(mod.__name__)
    # (the signature is AReaL's own: total_epochs, a keyword of PPOTrainer.train, sets max_steps)
    assert "total_epochs: int | None = None" in real.read_text(encoding="utf-8")


@pytest.mark.parametrize("preset", ["areal", "default"])
def test_areals_evaluate_fn_runs_as_areals_evaluator_calls_it_not_under_inference_mode(preset):
    """A new user's probe: built from AReaL's EvaluatorConfig (patch_areal), the adaptive evaluator ran AReaL's
    evaluate_fn under torch.inference_mode (every preset's evaluation.precision fp32): a tensor the model cached in
    that forward made the next training step's backward raise "Inference tensors cannot be saved for backward"."""
    torch = pytest.importorskip("torch")

    class Cached(torch.nn.Module):  # caches a tensor at its first forward, as rotary embeddings do
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.cache = None

        def forward(self, x):
            if self.cache is None:
                self.cache = torch.cos(torch.arange(4.0))
            return self.lin(x) * self.cache

    model, seen = Cached(), []

    def evaluate_fn():  # AReaL's _evaluate_fn: a forward over the valid set, returns None
        seen.append(torch.is_inference_mode_enabled())
        with torch.no_grad():
            model(torch.ones(2, 4))

    from adaptive_eval import load_config

    # (also a config of ours given where AReaL's was, at its presets' fp32: it still ran under inference_mode; a probe)
    for config in (areal_config(freq_steps=5, eval_before_train=True),
                   load_config(preset, overrides=["trigger.freq_steps=5", "trigger.eval_before_train=true"])):
        model.cache, seen[:] = None, []
        ev = shim.AdaptiveEvaluator(config, spec(epochs=1, spe=40), preset=preset)
        for g in range(3):
            ev.evaluate(evaluate_fn, 0, g, g)
            model(torch.ones(2, 4)).sum().backward()  # the next training step
        assert seen and not any(seen)
    # and the core evaluator given AReaL's config itself (a later probe: from_config kept fp32, and the next
    # step's backward raised; with every frequency None it evaluated the last step, where AReaL's never evaluates)
    from adaptive_eval import AdaptiveEvaluator

    model.cache, seen[:] = None, []
    ev = AdaptiveEvaluator.from_config(areal_config(freq_steps=5, eval_before_train=True), total_steps=10)
    for g in range(3):
        ev.evaluate(evaluate_fn, 0, g, g)
        model(torch.ones(2, 4)).sum().backward()
    assert seen and not any(seen)
    quiet = AdaptiveEvaluator.from_config(areal_config(), total_steps=10)
    assert [g for g in range(10) if quiet.evaluate(evaluate_fn, 0, g, g) is not None] == []


def test_the_time_triggers_interval_counts_the_evaluations_own_time_as_areals_does():
    """A probe (AReaL's own Evaluator in a one-process gloo group, datetime.now faked): with freq_secs=30, 5 s a
    step and 8 s an evaluation, AReaL evaluates at steps 5, 10, 15, 20, 25 (its interval restarts when the check
    passes, before the evaluation); the adaptive shim restarted it at the evaluation's end: 5, 11, 17, 23, 29.
    The plain shim matched AReaL in all 256 cases of the probe's grid; the adaptive one now matches it."""
    now = [0.0]

    def run(make):
        now[0] = 0.0
        ev, fired = make(), []
        for g in range(30):
            now[0] += 5.0

            def fn(g=g):
                fired.append(g)
                now[0] += 8.0

            ev.evaluate(fn, 0, g, g)
        return fired

    cfg, clock = areal_config(freq_secs=30), (lambda: now[0])
    plain = run(lambda: shim.Evaluator(cfg, spec(30, epochs=1, batch=8), clock=clock))
    assert plain == [5, 10, 15, 20, 25]
    assert run(lambda: shim.AdaptiveEvaluator(cfg, spec(30, epochs=1, batch=8), preset="areal", clock=clock)) == plain


def test_a_dict_of_some_of_areals_fields_is_read_by_both_shims_and_a_misspelt_one_is_named():
    """A probe: the plain shim took {"freq_steps": 4}, the adaptive one refused it, naming freq_steps an "unknown
    key"; with one key misspelt it named all three AReaL fields unknown, the valid ones among them."""
    for make in (shim.Evaluator, lambda *a: shim.AdaptiveEvaluator(*a, preset="areal")):
        ev = make({"freq_steps": 4}, spec(10))
        assert run(ev, 0, 12, 10) == [3, 7, 11]
        with pytest.raises(ConfigError, match=r"^EvaluatorConfig: freq_epoch: unknown key \(AReaL's EvaluatorConfig "
                                              r"has .*\); did you mean 'freq_epochs'\?$"):
            make({"freq_steps": 4, "freq_epoch": 1, "freq_secs": None}, spec(10))


def test_a_state_saved_before_the_steps_evaluate_resumes_as_areals_own_evaluator_and_says_why(caplog):
    """AReaL's trainers save the evaluator's state (RecoverHandler.dump) before the step's evaluate() and resume at the
    step after: the resumed run's first call comes two steps after the state's last, and the gap warning told the
    user to "call evaluate() at every training step", which AReaL's loop does (a new user's probe).  The schedule goes
    on as AReaL's own Evaluator's, and the warning says why it is not the uninterrupted run's."""
    cfg = areal_config(freq_steps=5)

    def areal_order(ev, start, stop, fired, dumps):
        for g in range(start, stop):
            dumps[g] = json.dumps(ev.state_dict())  # RecoverHandler.dump: before the step's evaluate()
            ev.evaluate(lambda g=g: fired.append(g), *divmod(g, 20), g)

    runs = {}
    for name, make in (("areal", lambda: AREAL.Evaluator(cfg, spec(20, epochs=1))),
                       ("shim", lambda: shim.AdaptiveEvaluator(cfg, spec(20, epochs=1), preset="areal"))):
        first, dumps = [], {}
        areal_order(make(), 0, 12, first, dumps)  # crashes after step 11; the last dump was at step 11, then 9 ...
        resumed = make()
        resumed.load_state_dict(json.loads(dumps[9]))  # ... say the one kept is step 9's (recover every 5 steps)
        caplog.clear()
        second = []
        areal_order(resumed, 10, 20, second, {})
        runs[name] = (first, second, [r.getMessage() for r in caplog.records])
    assert runs["shim"][:2] == runs["areal"][:2] == ([4, 9], [10, 15])
    said = [m for m in runs["shim"][2] if "global_step 10" in m]
    assert len(said) == 1 and "saves the state before the step's evaluate()" in said[0], runs["shim"][2]
    assert "call evaluate() at every training step" not in said[0]
    # (the same gap is what a loop calling evaluate() every 2 steps shows once resumed: it was told only to save
    # after evaluate(), which it did, never that its schedule doubles; a review)
    assert "If this loop calls evaluate() every 2 steps instead: trigger.freq_steps (5) counts calls, so an " \
           "evaluation is due every 10 steps" in said[0]


def test_resumed_from_the_last_steps_state_close_says_the_final_evaluation_and_after_train_runs_it(caplog):
    """A probe: killed in its final evaluation, an AReaL run resumes from the state dumped before that step's
    evaluate() with no step left (range(20, 20)); close() evaluated nothing and said nothing, and after_train(19) did
    nothing either (it took the last step for one evaluate() had seen).  (The default preset: the areal one keeps
    AReaL's own trigger.eval_at_end: false.)"""
    cfg = areal_config(freq_steps=50)
    fn = lambda request: {"acc": [1.0, 0.0, 1.0]}  # noqa: E731
    first = shim.AdaptiveEvaluator(cfg, spec(20, epochs=1), preset="default")
    for g in range(19):
        first.evaluate(fn, 0, g, g)
    dump = json.dumps(first.state_dict())  # RecoverHandler.dump before step 19's evaluate(); killed in it
    for call_after_train in (False, True):
        resumed = shim.AdaptiveEvaluator(cfg, spec(20, epochs=1), preset="default")
        resumed.load_state_dict(json.loads(dump))
        caplog.clear()
        with caplog.at_level("WARNING", logger="adaptive_eval"):
            if call_after_train:
                assert (resumed.after_train(fn, 19).step, resumed.history[-1].reason) == (19, "trigger:final")
            resumed.close()
        said = [r.getMessage() for r in caplog.records if "was not evaluated" in r.getMessage()]
        if call_after_train:
            assert said == []
        else:
            assert [r.step for r in resumed.history] == [] and len(said) == 1
            assert said[0].startswith("closed with no evaluate() call since the state loaded, saved after step 18's "
                                      "call: the run's last step, 19 (total_steps 20), was not evaluated")
            assert said[0].endswith("evaluator.after_train(evaluate_fn, 19) before close() evaluates it")


def test_a_section_of_the_users_own_config_is_a_preset_as_a_mapping_is():
    """``preset=cfg.adaptive_eval`` (an OmegaConf node of the user's AReaL config) or a DictConfig of a few keys was
    taken for a whole config and failed with "TypeError: '>=' not supported between NoneType and int"; a plain dict
    worked (a new user's probe)."""
    from omegaconf import OmegaConf

    from adaptive_eval import ConfigError

    root = OmegaConf.create({"adaptive_eval": {"policy": {"interval": {"max_factor": 3}}}})
    for preset in (root.adaptive_eval, OmegaConf.create({"policy": {"interval": {"max_factor": 3}}}),
                   {"policy": {"interval": {"max_factor": 3}}}):
        ev = shim.AdaptiveEvaluator(areal_config(freq_steps=5), spec(8, epochs=2), preset=preset)
        assert ev.cfg.policy.interval.max_factor == 3 and ev.cfg.trigger.freq_steps == 5
    with pytest.raises(ConfigError, match=r"policy\.interval\.max_factr: unknown key .*did you mean"):
        shim.AdaptiveEvaluator(areal_config(freq_steps=5), spec(8, epochs=2),
                               preset=OmegaConf.create({"policy": {"interval": {"max_factr": 3}}}))


def test_areals_evaluator_section_as_a_dict_a_detached_copy_or_yaml_text_reads_as_areal_reads_it():
    """Probes: AReaL's EvaluatorConfig as a dict (dataclasses.asdict, a YAML section) was refused by the plain
    Evaluator for its experiment_name, trial_name and fileroot ("unknown keys"); a copy of the evaluator: section
    detached from the experiment's config failed on experiment_name: ${experiment_name}, a field nobody reads; and
    eval_before_train: 'false' (text in an untyped node) read as true.  AReaL's own Evaluator runs each."""
    import dataclasses

    from omegaconf import OmegaConf

    from adaptive_eval import Evaluator

    expected = run(AREAL.Evaluator(areal_config(freq_steps=3), spec(10)), 0, 9, 10)
    as_dict = dataclasses.asdict(areal_config(freq_steps=3))
    detached = OmegaConf.create({"experiment_name": "${experiment_name}", "trial_name": "t", "fileroot": "/",
                                 "freq_steps": 3, "eval_before_train": "false"})
    for config in (as_dict, detached):
        for make in (lambda c: Evaluator(c, steps_per_epoch=10), lambda c: shim.Evaluator(c, spec(10)),
                     lambda c: shim.AdaptiveEvaluator(c, spec(10), preset="areal")):
            assert run(make(config), 0, 9, 10) == expected == [2, 5, 8], (config, make)


def test_numpy_frequencies_are_taken_and_a_damaged_saved_state_names_its_key():
    """Probes: ``EvaluatorConfig(freq_steps=np.int64(3))``, which AReaL's own Evaluator takes, was refused as "not a
    non-negative number"; ``load_state_dict(state_dict=...)``, AReaL's keyword, was a TypeError on the adaptive shim;
    a damaged evaluator_info.json said "invalid literal for int() with base 10: 'abc'" or a bare KeyError."""
    import numpy as np

    areal = AREAL.Evaluator(areal_config(freq_steps=3), spec(4))
    expected = run(areal, 0, 12, 4)

    def adaptive(config, ft_spec):  # (the areal preset: AReaL's schedule, nothing adaptive)
        return shim.AdaptiveEvaluator(config, ft_spec, preset="areal")

    for make in (shim.Evaluator, adaptive):
        for freq in (np.int64(3), np.int32(3)):
            assert run(make(areal_config(freq_steps=freq), spec(4)), 0, 12, 4) == expected == [2, 5, 8, 11]
        make(areal_config(freq_steps=3, freq_secs=np.float32(100.0)), spec(4))  # (OmegaConf refused it; a review)
    for make in (shim.Evaluator, adaptive):
        source = make(areal_config(freq_steps=3), spec(4))
        run(source, 0, 7, 4)
        resumed = make(areal_config(freq_steps=3), spec(4))
        resumed.load_state_dict(state_dict=json.loads(json.dumps(source.state_dict())))
        assert run(resumed, 7, 12, 4) == [8, 11]
    good = json.loads(json.dumps(areal.state_dict()))
    for edit, says in [
        (lambda sd: sd["step"].update(steps="abc"), r"trigger state_dict \(AReaL's\): 'step.steps': expected a "
                                                    r"number, got 'abc'"),
        (lambda sd: sd["step"].update(last_steps=[1]), r"'step.last_steps': expected a number, got \[1\]"),
        (lambda sd: sd["time"].update(last_time="x"), r"'time.last_time': expected a number, got 'x'"),
    ]:
        sd = json.loads(json.dumps(good))
        edit(sd)
        for make in (shim.Evaluator, shim.AdaptiveEvaluator):
            with pytest.raises(ValueError, match=says):
                make(areal_config(freq_steps=3, freq_secs=100), spec(4)).load_state_dict(sd)
    with pytest.raises(ValueError, match=r"state_dict\['adaptive_eval'\] must be a mapping with a 'trigger'"):
        shim.Evaluator(areal_config(freq_steps=3), spec(4)).load_state_dict({**good, "adaptive_eval": {}})

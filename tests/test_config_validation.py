"""Config mistakes found by trying them: each is a ConfigError naming the key (and file line), at load time."""

import re
import subprocess
import sys

import pytest

from adaptive_eval import AdaptiveEvaluator, load_config
from adaptive_eval.config import ConfigError
from conftest import FakeClock


@pytest.mark.parametrize("text, where", [
    ("streams:\n  default: [{type: nonfinite}, nonfinite]\n", "c.yaml:2: streams.default[1]:"),
    ("streams:\n  default: [nonfinite]\n", "c.yaml:2: streams.default[0]:"),
    ("streams:\n  default:\n  - {type: nonfinite}\n  - 3\n", "c.yaml:4: streams.default[1]:"),
    ("streams:\n  watch:\n    train/loss: [cusum]\n", "c.yaml:3: streams.watch.train/loss[0]:"),
])
def test_a_list_item_of_the_wrong_kind_names_its_key_and_line(tmp_path, text, where):
    (tmp_path / "c.yaml").write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "c.yaml")
    assert where in str(info.value) and "<root>" not in str(info.value)
    assert "got 'cusum'" in str(info.value) or "got 'nonfinite'" in str(info.value) or "got 3" in str(info.value)


def test_the_cli_reports_a_bad_list_item_without_a_traceback(tmp_path):
    (tmp_path / "c.yaml").write_text("streams:\n  default: [{type: nonfinite}, nonfinite]\n")
    proc = subprocess.run([sys.executable, "-m", "adaptive_eval.cli", "config", "--config", str(tmp_path / "c.yaml")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "c.yaml:2: streams.default[1]" in proc.stderr


def test_an_override_of_a_list_names_the_key():
    with pytest.raises(ConfigError, match=r"override 'streams.default=\[nonfinite\]': streams.default\[0\]"):
        load_config(overrides=["streams.default=[nonfinite]"])


@pytest.mark.parametrize("override, message", [
    ("trigger.freq_secs=inf", "trigger.freq_secs: must be non-negative or null (0: every step), got inf"),
    ("policy.peak.confirm_size=-1", "policy.peak.confirm_size: must be >= 0, got -1"),
    ("policy.peak.confirm_steps=-2", "policy.peak.confirm_steps: must be >= 0, got -2"),
    ("policy.budget.alarm_min_size=0", "policy.budget.alarm_min_size: must be positive or null, got 0"),
    ("resources.max_host_cpu_percent=-5", "resources.max_host_cpu_percent: must lie in [0, 100], got -5.0"),
    ("resources.max_host_cpu_percent=nan", "resources.max_host_cpu_percent: must lie in [0, 100], got nan"),
    ("resources.max_host_cpu_percent=150", "resources.max_host_cpu_percent: must lie in [0, 100], got 150.0"),
    ("resources.min_free_accelerator_fraction=2", "resources.min_free_accelerator_fraction: must lie in [0, 1]"),
    # (a probe: accepted, then sleep() raised OverflowError inside the training step at the first retry)
    ("evaluation.retry_backoff_s=1e300", "evaluation.retry_backoff_s: at most 3600 s (an hour) between two attempts"),
])
def test_impossible_values_fail_at_load_naming_the_key(override, message):
    with pytest.raises(ConfigError) as info:
        load_config(overrides=[override])
    assert message in str(info.value)


def test_timeout_inf_means_no_limit_and_still_loads():
    assert load_config(overrides=["evaluation.timeout_s=inf"]).evaluation.timeout_s == float("inf")


def test_no_evaluation_exceeds_sample_size_max():
    """peak.confirm_size (500) is clamped to sample_size.max, and before_train is sized by the policies too."""
    cfg = load_config(overrides=["policy.sample_size.max=100", "policy.sample_size.min=10",
                                 "policy.sample_size.initial=20", "trigger.freq_steps=3",
                                 "trigger.eval_before_train=true", "policy.budget.enabled=false"])
    ev = AdaptiveEvaluator.from_config(cfg, clock=FakeClock())
    sizes = []

    def evaluate_fn(request):
        idx = request.indices(5000)
        sizes.append((request.reason, len(idx)))
        return {"acc": [float(i % 3 == 0) if request.step < 10 else 1.0 for i in idx]}  # a new best at 12

    ev.before_train(evaluate_fn)
    for g in range(40):
        ev.evaluate(evaluate_fn, 0, g, g)
    assert sizes[0] == ("before_train", 20)
    # The peak policy's precise re-measurements (confirm_size 500 by default) come out at the clamp, never above.
    assert max(n for _, n in sizes) == 100, sizes


def test_every_problem_of_a_file_and_its_overrides_is_reported_at_once_with_its_line(tmp_path):
    """Before, a type error hid the value errors (they showed only once it was fixed, and then without file and
    line), the file's errors hid the overrides', and a key given twice was silently the last one."""
    path = tmp_path / "mine.yaml"
    path.write_text("trigger:\n  freq_steps: ten\npolicy:\n  budget:\n    max_eval_fraction: 1.5\n"
                    "  sample_size:\n    min: 600\n    max: 100\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, ["policy.alarm.cooldown_steps=abc", "trigger.nope=1"])
    assert info.value.problems == [
        f"{path}:2: trigger.freq_steps: Value 'ten' of type 'str' could not be converted to Integer",
        "override 'policy.alarm.cooldown_steps=abc': policy.alarm.cooldown_steps: Value 'abc' of type 'str' could not "
        "be converted to Integer",
        "override 'trigger.nope=1': unknown key 'trigger.nope'",
        f"{path}:5: policy.budget.max_eval_fraction: must lie in (0, 1], got 1.5",
        f"{path}:7: policy.sample_size.min: 600 is larger than policy.sample_size.max: 100"]
    twice = tmp_path / "twice.yaml"
    twice.write_text("trigger:\n  freq_steps: 10\npolicy: {}\ntrigger:\n  freq_steps: 20\n")
    with pytest.raises(ConfigError, match=r"twice.yaml:4: trigger: given twice \(also at line 1"):
        load_config(twice)
    latin1 = tmp_path / "latin1.yaml"  # (a bare UnicodeDecodeError, without the file: a new-user probe)
    latin1.write_bytes(b"# r\xe9glage\ntrigger:\n  freq_steps: 50\n")
    with pytest.raises(ConfigError, match=r"latin1.yaml:1: not UTF-8 text \(byte 0xe9\); save it as UTF-8"):
        load_config(latin1)


def test_an_override_of_a_list_item_sets_it_or_names_the_problem():
    """``--set streams.default.1.adapt=0.02`` (the default CUSUM's adapt) was an uncaught TypeError from
    OmegaConf ("Cannot merge incompatible container types"): a traceback and exit 1 from the CLI."""
    cfg = load_config(overrides=["streams.default.1.adapt=0.02", "policy.alarm.urgent_detectors.0=cusum"])
    assert cfg.streams.default[1].adapt == 0.02 and cfg.streams.default[1].threshold == 8.0
    assert list(cfg.policy.alarm.urgent_detectors) == ["cusum", "stuck"]
    # Hydra's and Python's bracket for the item, streams.default[1].arl0 (it read as a mapping key; a probe)
    bracket = load_config("aggressive", ["streams.default[1].arl0=1000", "streams.default[2].threshold=7.0"])
    assert dict(bracket.streams.default[1]) == {"type": "stuck", "arl0": 1000}
    assert bracket.streams.default[2].threshold == 7.0
    with pytest.raises(ConfigError, match=r"override 'streams.default.5.adapt=0.02': streams.default.5.adapt: no "
                                          r"such list item"):
        load_config(overrides=["streams.default.5.adapt=0.02"])
    with pytest.raises(ConfigError, match=r"cusum: adapt must be a number in \[0.0, 0.5\], got 0.9"):
        load_config(overrides=["streams.default.1.adapt=0.9"])
    # (a new-user probe: the detector's problem did not name the override that set it, as other keys' do)
    with pytest.raises(ConfigError) as info:
        load_config(overrides=["streams.default.1.threshold=high"])
    assert info.value.problems == ["override 'streams.default.1.threshold=high': streams.default[1].threshold: cusum: "
                                   "threshold must be a number in (0.0, 1000000.0], got 'high'"]
    # a name of digits is a name where no list is (a suite named 2024 took the list path: "no such list item or
    # key (Invalid type assigned: dict is not a subclass of SuiteConfig...)"; a probe)
    cfg = load_config(overrides=["evaluation.suites.2024.size=10", "streams.watch.7=[{type: cusum}]"])
    assert cfg.evaluation.suites["2024"].size == 10 and list(cfg.streams.watch) == ["7"]


def test_a_bound_reported_bad_is_not_compared_with_its_pair_again():
    """`--set policy.interval.max_factor=-2` also said "min_factor: 0.5 is larger than max_factor: -2.0"."""
    with pytest.raises(ConfigError) as info:
        load_config(overrides=["policy.interval.max_factor=-2"])
    assert info.value.problems == ["override 'policy.interval.max_factor=-2': policy.interval.max_factor: must be a "
                                   "positive finite number, got -2.0"]


# A user trial's bad inputs: each was a raw traceback from OmegaConf or PyYAML (exit 1 from the CLI), or a
# message without the file, line or override.

@pytest.mark.parametrize("text, message", [
    ("streams:\n  default: {type: cusum}\n", "c.yaml:2: streams.default: expected a list (of detector specs), got a mapping"),
    ("evaluation:\n  metric_kinds: [a]\n",
     "c.yaml:2: evaluation.metric_kinds: expected a mapping (metric -> proportion or mean), got a list"),
    ("streams:\n  watch: [a]\n",
     "c.yaml:2: streams.watch: expected a mapping (stream name -> its list of detector specs), got a list"),
    ("streams:\n  watch:\n    train/loss: {type: cusum}\n",
     "c.yaml:3: streams.watch.train/loss: expected a list (of detector specs), got a mapping"),
    ("evaluation:\n  suites:\n    math:\n      size: 3\n      strata: {a: 1}\n",
     "c.yaml:5: evaluation.suites.math.strata: expected a list (of strings), got a mapping"),
    ("evaluation:\n  pass_at_k: 4\n", "c.yaml:2: evaluation.pass_at_k: expected a list (of integers), got 4"),
])
def test_a_list_where_a_mapping_belongs_or_the_reverse_names_the_key_and_line(tmp_path, text, message):
    """Was ``TypeError: Cannot merge incompatible container types`` (no key, no line)."""
    (tmp_path / "c.yaml").write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "c.yaml")
    assert str(info.value) == f"{tmp_path / 'c.yaml'}:{message.split(':', 1)[1]}"


@pytest.mark.parametrize("override, message", [
    ("evaluation.suites=[a]", "evaluation.suites: expected a mapping (suite name -> its settings), got a list"),
    ("streams.default={type:cusum}", "streams.default: expected a list (of detector specs), got a mapping"),
])
def test_an_override_of_the_wrong_shape_names_the_override_and_key(override, message):
    with pytest.raises(ConfigError) as info:
        load_config(overrides=[override])
    assert str(info.value) == f"override {override!r}: {message}"


def test_from_config_with_a_mapping_for_a_list_is_a_config_error():
    with pytest.raises(ConfigError, match=r"^config: streams.default: expected a list \(of detector specs\), got a "
                                          r"mapping$"):
        AdaptiveEvaluator.from_config({"streams": {"default": {"type": "cusum"}}})


def test_the_cli_reports_a_wrong_shape_and_a_bad_override_value_with_exit_2(tmp_path, capsys):
    from adaptive_eval.cli import main

    (tmp_path / "listmap.yaml").write_text("streams:\n  default: {type: cusum}\n")
    assert main(["config", "--config", str(tmp_path / "listmap.yaml")]) == 2
    assert capsys.readouterr().err == (f"adaptive-eval: {tmp_path / 'listmap.yaml'}:2: streams.default: expected a "
                                       "list (of detector specs), got a mapping\n")
    assert main(["config", "--set", "trigger.freq_steps=[1"]) == 2
    assert capsys.readouterr().err == ("adaptive-eval: override 'trigger.freq_steps=[1': the value does not parse "
                                       "as YAML: did not find expected ',' or ']'\n")


@pytest.mark.parametrize("value, reason", [
    ("[1", "did not find expected ',' or ']'"),
    ("{a", "did not find expected ',' or '}'"),
    ("@x", "found character that cannot start any token; to pass a string, quote it: '\"@x\"'"),
    ("%x", "found unknown directive name"),
    ("`x", "found character that cannot start any token"),
    ("*x", "found undefined alias"),
    ("!x", "could not determine a constructor for the tag '!x'"),
])
def test_an_override_value_yaml_cannot_parse_is_a_config_error(value, reason):
    """Was a raw yaml.parser.ParserError (ScannerError, ComposerError, ConstructorError)."""
    with pytest.raises(ConfigError) as info:
        load_config(overrides=[f"trigger.freq_steps={value}"])
    assert str(info.value).startswith(f"override 'trigger.freq_steps={value}': the value does not parse as YAML: "
                                      f"{reason}")
    with pytest.raises(ConfigError, match="does not parse as YAML"):
        load_config(overrides=[f"streams.default.0={value}"])  # (an item of a list: another code path)


@pytest.mark.parametrize("text, message", [
    ("trigger:\n  freq_steps: ${evaluation.on_error}\n", "c.yaml:2: trigger.freq_steps: ${evaluation.on_error}: "
     "value 'skip' of type 'str' could not be converted to Integer"),
    ("trigger:\n  freq_steps: ${trigger.freq_steps}\n",
     "c.yaml:2: trigger.freq_steps: ${trigger.freq_steps}: recursive interpolation detected"),
    ("evaluation:\n  seed: 3\ntrigger:\n  freq_steps: ${evaluation.sead}\n", "c.yaml:4: trigger.freq_steps: "
     "${evaluation.sead}: interpolation key 'evaluation.sead' not found (did you mean 'evaluation.seed'?)"),
    ("trigger:\n  freq_steps: ${oc.env:MY_FREQ,40}\n", "c.yaml:2: trigger.freq_steps: ${oc.env:MY_FREQ,40}: "
     "value 'abc' of type 'str' could not be converted to Integer"),
])
def test_an_interpolation_that_fails_names_the_file_line_key_and_interpolation(tmp_path, monkeypatch, text, message):
    """Was an omegaconf InterpolationKeyError (...) from load_config, and from the CLI a message without the file
    and line."""
    monkeypatch.setenv("MY_FREQ", "abc")
    (tmp_path / "c.yaml").write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "c.yaml")
    assert str(info.value) == f"{tmp_path / 'c.yaml'}:{message.split(':', 1)[1]}"


def test_an_interpolation_that_fails_names_the_override_and_the_other_problems_still_show():
    with pytest.raises(ConfigError) as info:
        load_config(overrides=["trigger.freq_steps=${nope}", "policy.sample_size.min=1000"])
    assert info.value.problems == [
        "override 'trigger.freq_steps=${nope}': trigger.freq_steps: ${nope}: interpolation key 'nope' not found",
        "override 'policy.sample_size.min=1000': policy.sample_size.min: 1000 is larger than "
        "policy.sample_size.max: 512"]
    with pytest.raises(ConfigError, match=r"^override 'streams.default.1.k=\$\{nope\}': streams.default\[1\].k: "
                                          r"\$\{nope\}: interpolation key 'nope' not found$"):
        load_config(overrides=["streams.default.1.k=${nope}"])
    with pytest.raises(ConfigError, match=r"^config: trigger.freq_steps: \$\{evaluation.sead\}: interpolation key "
                                          r"'evaluation.sead' not found \(did you mean 'evaluation.seed'\?\)$"):
        AdaptiveEvaluator.from_config({"trigger": {"freq_steps": "${evaluation.sead}"}})


def test_interpolations_that_resolve_are_resolved_once_at_load(tmp_path, monkeypatch, capsys):
    """``adaptive-eval config`` says it prints the resolved configuration; it printed ``${oc.env:MY_FREQ,40}``."""
    from adaptive_eval.cli import main

    (tmp_path / "c.yaml").write_text("trigger:\n  freq_steps: ${oc.env:MY_FREQ,40}\n")
    monkeypatch.setenv("MY_FREQ", "12")
    cfg = load_config(tmp_path / "c.yaml", ["streams.default.1.adapt=${policy.interval.significance}"])
    monkeypatch.setenv("MY_FREQ", "13")
    assert cfg.trigger.freq_steps == 12 and cfg.streams.default[1].adapt == 0.05
    assert main(["config", "--config", str(tmp_path / "c.yaml")]) == 0
    out = capsys.readouterr().out
    assert "  freq_steps: 13\n" in out and "${" not in out
    monkeypatch.delenv("MY_FREQ")
    assert main(["config", "--config", str(tmp_path / "c.yaml")]) == 0
    assert "  freq_steps: 40\n" in capsys.readouterr().out


def test_every_misspelt_key_of_every_suite_is_reported_at_once_with_a_suggestion(tmp_path):
    """Only the first was reported, and without "did you mean"."""
    path = tmp_path / "suites.yaml"
    path.write_text("evaluation:\n  suites:\n    math:\n      size: 100\n      costt: 2\n      samples_per_itme: 4\n"
                    "    aime:\n      size: 30\n      everyy: 4\n    empty: {}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.problems == [
        f"{path}:5: evaluation.suites.math.costt: unknown key 'evaluation.suites.math.costt' (did you mean "
        "'evaluation.suites.math.cost'?)",
        f"{path}:6: evaluation.suites.math.samples_per_itme: unknown key 'evaluation.suites.math.samples_per_itme' "
        "(did you mean 'evaluation.suites.math.samples_per_item'?)",
        f"{path}:9: evaluation.suites.aime.everyy: unknown key 'evaluation.suites.aime.everyy' (did you mean "
        "'evaluation.suites.aime.every'?)",
        f"{path}:10: evaluation.suites.empty.size: missing; every suite needs its number of items (e.g. size: 500)"]
    with pytest.raises(ConfigError, match=r"did you mean 'evaluation.suites.math.cost'\?"):
        load_config(overrides=["evaluation.suites.math.costt=2"])
    path.write_text("evaluation:\n  suites:\n    math.v2:\n      size: 10\n      every: 2\n    base:\n      size: 5\n")
    assert load_config(path).evaluation.suites["math.v2"].every == 2


def test_a_detector_spec_without_type_names_the_keys_and_the_flow_mapping_space():
    with pytest.raises(ConfigError) as info:
        load_config(overrides=["streams.watch.train/reward=[{type:cusum,k:0.5}]"])
    assert str(info.value) == (
        "override 'streams.watch.train/reward=[{type:cusum,k:0.5}]': streams.watch.train/reward[0]: a detector spec "
        "needs a 'type' (got the keys 'type:cusum', 'k:0.5'); in a "
        "YAML flow mapping put a space after each ':', as in {type: cusum, k: 0.5} ({type:cusum} is one key "
        "'type:cusum')")
    with pytest.raises(ConfigError, match=r"needs a 'type' \(got the keys 'k'\)$"):
        load_config(overrides=["streams.default=[{k: 0.5}]"])


def test_a_misspelt_urgent_detector_and_every_bad_parameter_of_one_spec_are_named_at_once(tmp_path):
    """Found by a new-user probe: ``urgent_detectors: [nonfinit]`` was accepted, and NaN alarms then waited for the
    cooldown and the budget (a NaN run's evaluation 28 steps late); two bad parameters of one detector spec were
    reported one per load."""
    path = tmp_path / "mine.yaml"
    path.write_text("policy:\n  alarm:\n    urgent_detectors:\n    - nonfinit\n    - rank_discrepancy\n"
                    "streams:\n  default:\n  - type: cusum\n    threshold: -8\n    k: abc\n"
                    "  - type: cusum\n    threshold: 1.0e+9\n    warmup: 5\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    problems = info.value.problems
    assert problems[0] == (f"{path}:4: policy.alarm.urgent_detectors[0]: unknown detector 'nonfinit'; one of cusum, "
                           "page_hinkley, adwin, kswin, bocpd, spike, nonfinite, stuck, window_test, rank_discrepancy")
    assert problems[1].startswith(f"{path}:8: streams.default[0]: ") and "threshold must be" in problems[1] \
        and "k must be" in problems[1]
    # one bad parameter: named by its own key and line (it was the line of the spec's "- type:", 11; a probe)
    assert problems[2].startswith(f"{path}:12: streams.default[1].threshold: cusum: threshold must be")
    assert len(problems) == 3
    assert list(load_config(overrides=["policy.alarm.urgent_detectors=[nonfinite,cusum]"]).policy.alarm
                .urgent_detectors) == ["nonfinite", "cusum"]


def test_an_exponent_yaml_reads_as_text_says_how_to_write_the_number(tmp_path):
    """YAML 1.1 reads ``1e3`` (no dot) as a string: the type error did not say why (found by a new-user probe)."""
    path = tmp_path / "mine.yaml"
    path.write_text("trigger:\n  freq_steps: 1e3\n")
    with pytest.raises(ConfigError, match=r"mine.yaml:2: trigger.freq_steps: Value '1e3' of type 'str' could not be "
                                          r"converted to Integer \(YAML reads 1e3 as text: write 1000\)$"):
        load_config(path)
    path.write_text("trigger:\n  freq_steps: ten\n")
    with pytest.raises(ConfigError, match=r"converted to Integer$"):
        load_config(path)
    # the number written is an integer YAML reads as one (1e30's read "write 1e+30", text again, and 2e15's
    # "2000000000000000.0", a float; a probe)
    path.write_text("evaluation:\n  seed: 2e15\n")
    with pytest.raises(ConfigError, match=r"\(YAML reads 2e15 as text: write 2000000000000000\)$"):
        load_config(path)
    path.write_text("evaluation:\n  seed: 2000000000000000\n")
    assert load_config(path).evaluation.seed == 2 * 10**15


def test_load_config_takes_what_from_config_takes_and_names_what_it_does_not():
    """A Config or the user's own dataclass instance (from_config takes both) was a bare os.fspath TypeError in
    load_config, and so was a list (a probe)."""
    from adaptive_eval.config import Config

    assert load_config(Config(), ["trigger.freq_steps=4"]).trigger.freq_steps == 4  # (the user's own: below)
    with pytest.raises(TypeError, match=r"^load_config: the config is a YAML file or preset name, a mapping, a "
                                        r"DictConfig or a Config \(dataclass\), not a list$"):
        load_config([1, 2])


def test_overrides_must_be_a_list_of_strings():
    """A str was split into its characters: 20 errors, one per character."""
    with pytest.raises(TypeError, match=r"^overrides must be a list of 'KEY=VALUE' strings, got str$"):
        load_config(overrides="trigger.freq_steps=5")
    with pytest.raises(TypeError, match=r"got a int item: 5$"):
        load_config(overrides=[5])
    assert load_config(overrides=("trigger.freq_steps=5",)).trigger.freq_steps == 5


def test_a_suite_sized_beyond_itself_or_capped_below_its_answers_names_both_keys_and_the_line(tmp_path):
    """A fixed sample_size above the suite's size was clamped silently, and a max_samples_per_item below the
    answers generated per item was accepted (the sizing policy then asked for fewer answers than generated)."""
    path = tmp_path / "suites.yaml"
    path.write_text("evaluation:\n  suites:\n    aime:\n      size: 30\n      sample_size: 64\n"
                    "      samples_per_item: 64\n      max_samples_per_item: 16\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.problems == [
        f"{path}:7: evaluation.suites.aime.max_samples_per_item: 16 is below evaluation.suites.aime.samples_per_item: "
        "64 (the sample-size policy could never ask for the answers per item generated; raise it, or leave it null)",
        f"{path}:5: evaluation.suites.aime.sample_size: 64 is larger than evaluation.suites.aime.size: 30 (items per "
        "evaluation cannot exceed the suite; null evaluates all of it)"]


def test_a_null_max_samples_per_item_lets_the_policy_keep_every_answer_generated():
    """64 answers per item with the old default cap of 32 would now be a config error: null (the default) is
    32, or samples_per_item when that is more."""
    from adaptive_eval.policies import SampleSizePolicy

    cfg = load_config(overrides=["evaluation.suites.aime.size=30", "evaluation.suites.aime.samples_per_item=64",
                                 "evaluation.suites.math.size=500", "evaluation.suites.math.samples_per_item=4"])
    assert cfg.evaluation.suites.aime.max_samples_per_item is None
    policy = SampleSizePolicy(suites=cfg.evaluation.suites)
    assert policy.suites["aime"]["max_samples_per_item"] == 64 and policy.suites["math"]["max_samples_per_item"] == 32


def test_a_suites_min_samples_per_item_above_its_most_names_both_and_the_line(tmp_path):
    path = tmp_path / "suites.yaml"
    path.write_text("evaluation:\n  suites:\n    aime:\n      size: 30\n      samples_per_item: 8\n"
                    "      max_samples_per_item: 8\n      min_samples_per_item: 16\n    math:\n      size: 500\n"
                    "      min_samples_per_item: 0\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.problems == [
        f"{path}:7: evaluation.suites.aime.min_samples_per_item: 16 is above the most the sample-size policy may "
        "choose (evaluation.suites.aime.max_samples_per_item: 8)",
        f"{path}:10: evaluation.suites.math.min_samples_per_item: must be >= 1, got 0"]
    assert load_config(overrides=["evaluation.suites.m.size=500", "evaluation.suites.m.min_samples_per_item=32"])


def test_a_suite_without_a_size_or_with_a_size_that_is_no_number_is_one_error_naming_key_and_line(tmp_path):
    """Found in review: a missing size read "size: must be >= 1, got 0"; "size: five hundred" gave the conversion
    error and a second "must be >= 1, got 0"."""
    path = tmp_path / "suites.yaml"
    path.write_text("evaluation:\n  suites:\n    math500: {samples_per_item: 4, strata: [a, b]}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.problems == [f"{path}:3: evaluation.suites.math500.size: missing; every suite needs its number "
                                   "of items (e.g. size: 500)"]
    path.write_text("evaluation:\n  suites:\n    math:\n      samples_per_item: 4\n      size: five hundred\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.problems == [f"{path}:5: evaluation.suites.math.size: Value 'five hundred' of type 'str' could "
                                   "not be converted to Integer"]
    with pytest.raises(ConfigError) as info:
        load_config(overrides=["evaluation.suites.m.samples_per_item=4", "evaluation.suites.m.size=abc"])
    assert info.value.problems == ["override 'evaluation.suites.m.size=abc': evaluation.suites.m.size: Value 'abc' "
                                   "of type 'str' could not be converted to Integer"]
    with pytest.raises(ConfigError) as info:
        load_config(overrides=["evaluation.suites.m.samples_per_item=4", "evaluation.suites.m.size=${nope}"])
    assert info.value.problems == ["override 'evaluation.suites.m.size=${nope}': evaluation.suites.m.size: ${nope}: "
                                   "interpolation key 'nope' not found"]
    with pytest.raises(ConfigError, match=r"^evaluation.suites.m.size: missing; every suite"):
        AdaptiveEvaluator.from_config({"evaluation": {"suites": {"m": {"samples_per_item": 4}}}})
    with pytest.raises(ConfigError, match=r"^override 'evaluation.suites.m.size=0': evaluation.suites.m.size: "
                                          r"must be >= 1, got 0$"):  # given: as before
        load_config(overrides=["evaluation.suites.m.size=0"])


def test_an_evaluation_metric_no_suite_reports_names_the_key_line_and_the_suites(tmp_path):
    """Found in review: with the suite math (metric acc), evaluation.metric: math500/accuracy was accepted; the
    policies then tracked nothing (a replay ran 14 evaluations instead of 6, and picked no best)."""
    path = tmp_path / "typo.yaml"
    path.write_text("evaluation:\n  metric: math500/accuracy\n  suites:\n    math: {size: 10, samples_per_item: 4}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.problems == [
        f"{path}:2: evaluation.metric: 'math500/accuracy' is not a metric of a configured suite (did you mean the "
        "suite 'math'?): with evaluation.suites every eval metric is reported as 'math/<metric>', so the policies "
        "would track nothing"]
    suites = ["evaluation.suites.math.size=10", "evaluation.suites.aime.size=30"]
    for metric in ("acc", "math", "math/", "all/acc"):  # no suite, a suite's bare name, no metric, no aggregate
        with pytest.raises(ConfigError, match=rf"^override 'evaluation.metric={metric}': evaluation.metric: "
                                              rf"'{metric}' is not a metric of a configured "
                                              r"suite.*'math/<metric>', 'aime/<metric>', so"):
            load_config(overrides=[f"evaluation.metric={metric}", *suites])
    with pytest.raises(ConfigError, match=r"\(eval/ begins a trace's column, not a metric's name: 'math/acc'\)"):
        load_config(overrides=["evaluation.metric=eval/math/acc", *suites])
    # What suites do report: any "<suite>/..." (pass@k, strata, aggregations too) and "<suite_aggregate>/...".
    for metric in ("math/acc", "aime/acc/pass@4", "math/acc/stratum=hard"):  # (pass@4 at 4 answers or more)
        assert load_config(overrides=[f"evaluation.metric={metric}", *suites,
                                      "evaluation.suites.aime.min_samples_per_item=4"]).evaluation.metric == metric
    cfg = load_config(overrides=["evaluation.metric=all/acc", "evaluation.suite_aggregate=all", *suites])
    assert cfg.evaluation.metric == "all/acc"
    assert load_config(overrides=["evaluation.metric=acc"]).evaluation.metric == "acc"  # no suites: anything goes
    with pytest.raises(ConfigError, match=r"^evaluation.metric: 'acc' is not"):  # from_config checks it too
        AdaptiveEvaluator.from_config({"evaluation": {"metric": "acc", "suites": {"math": {"size": 10}}}})


def test_a_pass_at_k_no_suite_can_reach_names_the_k_and_each_suites_most_answers(tmp_path):
    """pass_at_k: [1, 32] beside 4 answers per item was accepted and pass@32 never reported.  A k is refused when
    no suite's evaluations can ever ask for k answers per item; one the sample-size policy can reach later
    (max_samples_per_item, null: 32) or that one suite reaches is fine."""
    path = tmp_path / "k.yaml"
    path.write_text("evaluation:\n  pass_at_k: [1, 32]\n  suites:\n    math: {size: 10, samples_per_item: 4, "
                    "max_samples_per_item: 8}\n    aime: {size: 30, samples_per_item: 16, sample_size: 10}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.problems == [
        f"{path}:2: evaluation.pass_at_k[1]: 32 is above the answers per item of every suite's evaluations, so pass@32 "
        "would never be reported (at most math: 8 (max_samples_per_item: 8); aime: 16 (samples_per_item: 16; its "
        "sample_size is fixed, so the sample-size policy does not size it)); lower it, or raise a suite's "
        "max_samples_per_item"]
    assert load_config(path, ["evaluation.pass_at_k=[1,16]"]).evaluation.pass_at_k == [1, 16]  # aime reaches it
    assert load_config(path, ["evaluation.suites.math.max_samples_per_item=null"])  # null: 32
    with pytest.raises(ConfigError, match=r"^override 'evaluation.pass_at_k=\[1,8\]': evaluation.pass_at_k\[1\]: "
                                          r"8 is above .* \(at most m: 4 "
                                          r"\(samples_per_item: 4; policy.sample_size is off\)\); lower it, or "
                                          r"raise a suite's samples_per_item$"):
        load_config("areal", ["evaluation.pass_at_k=[1,8]", "evaluation.suites.m.size=10",
                              "evaluation.suites.m.samples_per_item=4"])


def test_a_dotted_yaml_key_says_to_nest_it_not_did_you_mean_itself(tmp_path):
    """``trigger.freq_steps: 30`` at the top of a file said "unknown key 'trigger.freq_steps' (did you mean
    'trigger.freq_steps'?)" (found by a new-user probe)."""
    path = tmp_path / "mine.yaml"
    path.write_text("trigger.freq_steps: 30\npolicy:\n  interval.max_factor: 3\n")
    with pytest.raises(ConfigError) as err:
        load_config(str(path))
    text = str(err.value)
    assert "mine.yaml:1: trigger.freq_steps: unknown key 'trigger.freq_steps' (a YAML key with dots is one key: " \
           "nest it, trigger: {freq_steps: ...}, or give it as --set trigger.freq_steps=...)" in text
    assert "mine.yaml:3: policy.interval.max_factor: unknown key 'policy.interval.max_factor' (a YAML key with " \
           "dots is one key: nest it, policy: {interval: {max_factor: ...}}" in text
    assert "did you mean" not in text


def test_an_interpolation_of_a_list_loads_as_the_list_it_points_at(tmp_path):
    """A probe: `streams: {eval: ${streams.default}}` (the default detectors on the eval metrics too) raised
    AttributeError out of load_config, a 25-line traceback on the CLI; as an override and as a dict alike."""
    from adaptive_eval.cli import main

    (tmp_path / "c.yaml").write_text("streams:\n  eval: ${streams.default}\n"
                                     "  watch:\n    train/loss: ${streams.default}\n")
    default = [dict(d) for d in load_config().streams.default]
    for cfg in (load_config(tmp_path / "c.yaml"), load_config(None, ["streams.eval=${streams.default}"]),
                load_config({"streams": {"eval": "${streams.default}"}})):
        assert [dict(d) for d in cfg.streams.eval] == default
    assert [dict(d) for d in load_config(tmp_path / "c.yaml").streams.watch["train/loss"]] == default
    AdaptiveEvaluator.from_config({"streams": {"eval": "${streams.default}"}})
    assert main(["config", "--config", str(tmp_path / "c.yaml")]) == 0


def test_a_recursive_alias_or_a_file_nested_hundreds_deep_is_a_config_error(tmp_path, capsys):
    """A probe: RecursionError out of load_config, a 30-line traceback and exit 1 on the CLI."""
    from adaptive_eval.cli import main

    alias, deep = tmp_path / "alias.yaml", tmp_path / "deep.yaml"
    alias.write_text("streams:\n  ignore: &a [*a]\n")
    deep.write_text("trigger:\n" + "".join("  " * (i + 1) + f"a{i}:\n" for i in range(300)) + "  " * 301 + "x: 1\n")
    for path in (alias, deep):
        with pytest.raises(ConfigError, match=r"nested too deeply to read \(an alias that contains itself"):
            load_config(path)
    assert main(["config", "--config", str(alias)]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    looped: dict = {"trigger": {}}
    looped["trigger"]["self"] = looped  # (from_config of it: a bare RecursionError; a review)
    with pytest.raises(ConfigError, match=r"nested too deeply to read"):
        AdaptiveEvaluator.from_config(looped)


def test_a_misspelt_preset_is_named_with_the_nearest_and_tensorboard_dir_true_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"agressive: no such config file .*; did you mean 'aggressive'\?"):
        load_config("agressive")
    with pytest.raises(ConfigError, match=r"no preset of that name; presets: [a-z, ]+\)$"):
        load_config("mine.yaml")  # nothing near: no suggestion
    # `tensorboard_dir: true` read as the folder "True" (TensorBoard on, it seemed, and a folder named True)
    path = tmp_path / "c.yaml"
    path.write_text("logging:\n  tensorboard_dir: true\n")
    with pytest.raises(ConfigError, match=r"c.yaml:2: logging.tensorboard_dir: a folder to write to, or null, not "
                                          r"true"):
        load_config(path)
    with pytest.raises(ConfigError, match=r"logging.tensorboard_dir: a folder .* not false"):
        load_config(None, ["logging.tensorboard_dir=false"])
    assert load_config(None, ["logging.tensorboard_dir=runs/tb"]).logging.tensorboard_dir == "runs/tb"
    # 'null' as text (quoted, or ${oc.env:TB_DIR} with TB_DIR=null) wrote into a folder ./null (a probe)
    with pytest.raises(ConfigError, match=r"logging.tensorboard_dir: a folder to write to, or null \(no TensorBoard\), "
                                          r"not 'null'"):
        load_config(None, ["logging.tensorboard_dir='null'"])


def test_load_state_dict_refuses_json_text_and_another_version_by_name():
    import json

    ev = AdaptiveEvaluator(load_config(), clock=FakeClock())
    sd = ev.state_dict()
    with pytest.raises(ValueError, match=r"not its JSON text: load_state_dict\(json.loads\(text\)\)"):
        ev.load_state_dict(json.dumps(sd))
    with pytest.raises(ValueError, match=r"state_dict version 99: this adaptive_eval reads versions 1 and 2"):
        ev.load_state_dict({**sd, "version": 99})
    ev.load_state_dict(json.loads(json.dumps(sd)))  # the JSON round trip, loaded
    # Version 2 since its evaluations carry within_ss2 (the release before refuses it, now naming the version);
    # a version-1 state, without it, still loads
    ev = AdaptiveEvaluator(load_config(overrides=["trigger.freq_steps=1"]), clock=FakeClock())
    ev.observe({"train/loss": 1.0}, 0)
    ev.evaluate(lambda: {"acc": [[1.0, 0.0], [1.0, 1.0]]}, 0, 0, 0)
    sd = json.loads(json.dumps(ev.state_dict()))
    assert sd["version"] == 2 and "within_ss2" in sd["history"][0]["metrics"]["acc"]
    for row in sd["history"]:
        for m in row["metrics"].values():
            m.pop("within_ss2")
    AdaptiveEvaluator(load_config(overrides=["trigger.freq_steps=1"]), clock=FakeClock()).load_state_dict(
        {**sd, "version": 1})


def test_what_yaml_reads_otherwise_than_it_is_written_is_named_with_its_line_not_taken_silently(tmp_path,
                                                                                                 monkeypatch, capsys):
    """A new user's YAML (a probe): a suite named ``2024:`` or ``on:`` raised OmegaConf's KeyValidationError naming
    no line; ``010`` read as octal 8; ``freq_steps: ???`` (to be given) kept the default; ``tensorboard_dir: None``
    wrote to a folder ./None and ``""`` into the working directory; an override ``key=`` (an unset shell variable)
    set null, turning the schedule off; a detector threshold from ``${oc.env:H,8.0}`` or ``1e1`` was refused as "not
    a number" (``--set`` took ``1e1``); ``--config aggressive --config mine.yaml`` dropped the preset."""
    from adaptive_eval.cli import main

    def problems(text, overrides=()):
        (tmp_path / "c.yaml").write_text(text)
        with pytest.raises(ConfigError) as err:
            load_config(tmp_path / "c.yaml", list(overrides))
        return str(err.value)

    said = problems("evaluation:\n  suites:\n    2024:\n      size: 30\n    on:\n      size: 20\n")
    assert "c.yaml:3: evaluation.suites.2024: YAML reads the name '2024' as a number: quote it" in said
    assert "c.yaml:5: evaluation.suites.on: YAML reads the name 'on' as a boolean" in said
    # a section whose keys are all commented out reads null: OmegaConf's "field 'policy' is not Optional" gave no way
    # on (a probe)
    assert ("c.yaml:1: policy: empty (null: its keys commented out?): give it a value, write {} for a section or [] "
            "for a list, or delete the line") in problems("policy:\n#  alarm:\n#    enabled: false\n")
    # a suite named by a date (a release) escaped as OmegaConf's KeyValidationError, no file or line (a probe)
    assert "c.yaml:3: evaluation.suites.2024-06-01: YAML reads the name '2024-06-01' as a date: quote it" in problems(
        "evaluation:\n  suites:\n    2024-06-01: {size: 10}\n")
    (tmp_path / "q.yaml").write_text('evaluation:\n  suites:\n    "2024":\n      size: 30\n')
    assert list(load_config(tmp_path / "q.yaml").evaluation.suites) == ["2024"]
    assert "c.yaml:2: trigger.freq_steps: YAML reads 010 as an octal number (8): write 10" in problems(
        "trigger:\n  freq_steps: 010\n")
    assert "c.yaml:2: trigger.freq_steps: ??? (a value still to be given) is not given" in problems(
        "trigger:\n  freq_steps: ???\n")
    (tmp_path / "m.yaml").write_text("trigger:\n  freq_steps: ???\n")
    assert load_config(tmp_path / "m.yaml", ["trigger.freq_steps=40"]).trigger.freq_steps == 40
    for folder in ("None", '""'):
        assert "logging.tensorboard_dir: a folder to write to, or null (no TensorBoard)" in problems(
            f"logging:\n  tensorboard_dir: {folder}\n")
    for item, says in (("trigger.freq_steps=", "no value (an unset shell variable?); write trigger.freq_steps=null"),
                       ("trigger.freq_steps=010", "YAML reads 010 as an octal number: write 10"),
                       ("trigger.freq_steps=???", "??? marks a value still to be given"),
                       # (it said "unknown key 'trigger.freq_steps '", and to '+trigger...' "did you mean 'trigger'"; a
                       # probe)
                       ("trigger.freq_steps = 5", "spaces around '=': write trigger.freq_steps=5"),
                       ("+trigger.freq_steps=5", "Hydra's + is not taken here: every key of the config exists "
                                                 "already; write trigger.freq_steps=5")):
        with pytest.raises(ConfigError, match=re.escape(f"override {item!r}: {says}")):
            load_config(overrides=[item])
    assert load_config(overrides=["trigger.freq_steps=null"]).trigger.freq_steps is None
    # A detector's number as text: as the typed keys and --set take it
    monkeypatch.setenv("CUSUM_H", "6")
    (tmp_path / "d.yaml").write_text("streams:\n  default:\n  - type: cusum\n    threshold: ${oc.env:CUSUM_H,8.0}\n"
                                     "    warmup: '40'\n  - type: page_hinkley\n    threshold: 1e1\n")
    ev = AdaptiveEvaluator.from_config(load_config(tmp_path / "d.yaml"), clock=FakeClock())
    ev.observe({"train/loss": 1.0}, 0)
    cusum, ph = ev._detectors["train/loss"][1:]
    assert (cusum.threshold, cusum.warmup, ph.threshold) == (6.0, 40, 10.0)
    # ... and in a list of numbers (in_control: [1e-3, ...] was refused as text, "on stream 'in_control'"; a probe)
    segment = ", ".join(f"{1 + i % 7}e-3" for i in range(30))
    (tmp_path / "e.yaml").write_text(f"streams:\n  default:\n  - type: cusum\n    arl0: 300\n"
                                     f"    in_control: [{segment}]\n")
    spec = load_config(tmp_path / "e.yaml").streams.default[0]
    assert list(spec.in_control)[:3] == [1e-3, 2e-3, 3e-3]
    # --config given twice
    with pytest.raises(SystemExit) as exit_:
        main(["config", "--config", "aggressive", "--config", str(tmp_path / "q.yaml")])
    assert exit_.value.code == 2 and "--config given twice ('aggressive', then" in capsys.readouterr().err


def test_a_node_of_a_larger_config_resolves_against_it_and_every_problem_is_named_under_it():
    """New users' probes with Hydra (verl's configs): cfg.adaptive_eval whose trigger.freq_steps is
    ${trainer.test_freq} failed with "interpolation key 'trainer.test_freq' not found" (the node was copied onto the
    schema, away from the config it resolves in); load_config took no node (a raw TypeError); from_config said only
    the first of four problems; and a structured config of the user's own dataclass was "not a subclass of
    Config"."""
    import dataclasses

    from omegaconf import OmegaConf

    app = OmegaConf.create({"trainer": {"test_freq": 10, "total_training_steps": 300},
                            "adaptive_eval": {"trigger": {"freq_steps": "${trainer.test_freq}"},
                                              "policy": {"budget": {"max_eval_fraction": 0.2}}}})
    OmegaConf.set_struct(app, True)  # (as Hydra hands it)
    ev = AdaptiveEvaluator.from_config(app.adaptive_eval, total_steps=app.trainer.total_training_steps)
    assert ev.cfg.trigger.freq_steps == 10 and ev.cfg.policy.budget.max_eval_fraction == 0.2
    cfg = load_config(app.adaptive_eval, ["policy.budget.max_eval_fraction=0.3"])
    assert (cfg.trigger.freq_steps, cfg.policy.budget.max_eval_fraction) == (10, 0.3)
    assert load_config({"trigger": {"freq_steps": 3}}).trigger.freq_steps == 3

    bad = OmegaConf.create({"adaptive_eval": {"trigger": {"freq_steps": "ten"}, "polcy": {}, "policy": {
        "budget": {"max_eval_fraction": 2.0}, "sample_size": {"min": 0}}}})
    for given in (bad.adaptive_eval, OmegaConf.to_container(bad.adaptive_eval)):
        with pytest.raises(ConfigError) as info:
            AdaptiveEvaluator.from_config(given)
        named = "the node 'adaptive_eval': " if not isinstance(given, dict) else ""
        assert len(info.value.problems) == 4, info.value.problems
        assert info.value.problems[1] == f"{named or 'config: '}polcy: unknown key 'polcy' (did you mean 'policy'?)"
        assert f"{named}policy.budget.max_eval_fraction: must lie in (0, 1], got 2.0" in info.value.problems
    gone = OmegaConf.create({"trainer": {}, "adaptive_eval": {"trigger": {"freq_steps": "${trainer.nope}"}}})
    with pytest.raises(ConfigError, match=r"^the node 'adaptive_eval': trigger.freq_steps: \$\{trainer.nope\}: "
                                          r"interpolation key 'trainer.nope' not found$"):
        AdaptiveEvaluator.from_config(gone.adaptive_eval)
    # one that does not resolve no longer hides the node's other problems (only it was said; a probe)
    bad.adaptive_eval.trigger.freq_epochs = "${trainer.tset_freq}"
    with pytest.raises(ConfigError) as info:
        load_config(bad.adaptive_eval)
    assert len(info.value.problems) == 5, info.value.problems
    assert ("the node 'adaptive_eval': trigger.freq_epochs: ${trainer.tset_freq}: interpolation key "
            "'trainer.tset_freq' not found") in info.value.problems
    assert "the node 'adaptive_eval': policy.budget.max_eval_fraction: must lie in (0, 1], got 2.0" in \
        info.value.problems
    del bad.adaptive_eval.trigger.freq_epochs
    with pytest.raises(ConfigError) as info:  # (load_config names a node's value problems under it too)
        load_config(bad.adaptive_eval)
    assert "the node 'adaptive_eval': policy.budget.max_eval_fraction: must lie in (0, 1], got 2.0" in \
        info.value.problems
    from types import MappingProxyType

    assert load_config(MappingProxyType({"trigger": {"freq_steps": 4}})).trigger.freq_steps == 4

    @dataclasses.dataclass
    class Trigger:
        freq_steps: int = 7

    @dataclasses.dataclass
    class MyEval:
        trigger: Trigger = dataclasses.field(default_factory=Trigger)

    assert AdaptiveEvaluator.from_config(OmegaConf.structured(MyEval)).cfg.trigger.freq_steps == 7
    assert load_config(MyEval()).trigger.freq_steps == 7  # (an instance: a bare os.fspath TypeError; a probe)
    assert AdaptiveEvaluator.from_config(MyEval(Trigger(9))).cfg.trigger.freq_steps == 9  # (the instance too)


def test_tracking_a_pass_at_k_the_sample_size_policy_may_not_report_is_refused_saying_the_key():
    """A new user's probe: evaluation.metric id/acc/pass@4 while the sample-size policy asked one answer per item
    after the first evaluation: pass@4 was never reported again, and the policies and the pick followed the
    untrained model's evaluation alone.  Refused at load, naming the key that fixes it."""
    base = ["evaluation.suites.id.size=50", "evaluation.suites.id.samples_per_item=4", "evaluation.pass_at_k=[1,4]"]
    with pytest.raises(ConfigError, match=r"evaluation.metric: 'id/acc/pass@4' is reported only by evaluations of 4 "
                                          r"or more answers per item, .*\(evaluation.suites.id.min_samples_per_item: "
                                          r"null\); set evaluation.suites.id.min_samples_per_item: 4, or track "
                                          r"'id/acc'"):
        load_config("default", [*base, "evaluation.metric=id/acc/pass@4"])
    for fine in ("evaluation.suites.id.min_samples_per_item=4", "policy.sample_size.enabled=false",
                 "evaluation.suites.id.sample_size=50"):
        assert load_config("default", [*base, "evaluation.metric=id/acc/pass@4", fine]).evaluation.metric


def test_suites_none_of_which_is_due_at_every_evaluation_are_refused_naming_their_every():
    """a every 2nd evaluation, b every 3rd: the evaluations where neither was due called evaluate_fn with no suite,
    were counted, and relaxed the schedule as quiet ones, so the tracked a/acc was measured at 4 steps of 400 (a
    new-user probe).  One suite every 1 is enough."""
    with pytest.raises(ConfigError, match=r"no suite is due at every evaluation \(evaluation.suites.a.every: 2, "
                                          r"evaluation.suites.b.every: 3\)"):
        load_config(overrides=["evaluation.metric=a/acc", "evaluation.suites.a.size=20", "evaluation.suites.a.every=2",
                               "evaluation.suites.b.size=10", "evaluation.suites.b.every=3"])
    cfg = load_config(overrides=["evaluation.metric=a/acc", "evaluation.suites.a.size=20",
                                 "evaluation.suites.b.size=10", "evaluation.suites.b.every=3"])
    assert cfg.evaluation.suites.b.every == 3


def test_a_suite_aggregate_over_suites_all_of_weight_zero_is_refused_naming_the_weights():
    """A probe: accepted, the aggregate was never reported, and a tracked all/acc was told "did you mean 'a/acc'?"."""
    with pytest.raises(ConfigError, match=r"evaluation.suite_aggregate: 'all' is the weight-weighted mean over the "
                                          r"suites, and every suite's weight is 0 \(evaluation.suites.a.weight, "
                                          r"evaluation.suites.b.weight\)"):
        load_config(overrides=["evaluation.suite_aggregate=all", "evaluation.metric=all/acc",
                               "evaluation.suites.a.size=10", "evaluation.suites.a.weight=0",
                               "evaluation.suites.b.size=10", "evaluation.suites.b.weight=0"])
    assert load_config(overrides=["evaluation.suite_aggregate=all", "evaluation.metric=all/acc",
                                  "evaluation.suites.a.size=10", "evaluation.suites.a.weight=0",
                                  "evaluation.suites.b.size=10"]).evaluation.suites.b.weight > 0


def test_a_number_other_than_0_or_1_for_a_switch_is_refused_naming_file_line_and_key(tmp_path):
    """OmegaConf reads any number as a bool: ``evaluation.asynchronous: 2`` (meant as a lag of two steps) turned
    asynchronous evaluation on without a word."""
    path = tmp_path / "mine.yaml"
    path.write_text("evaluation:\n  asynchronous: 2\n")
    with pytest.raises(ConfigError, match=rf"{re.escape(str(path))}:2: evaluation.asynchronous: expected true or "
                                          r"false, got 2"):
        load_config(path)
    with pytest.raises(ConfigError, match=r"evaluation.asynchronous: expected true or false, got 0.5"):
        load_config(overrides=["evaluation.asynchronous=0.5"])
    assert load_config(overrides=["evaluation.asynchronous=1"]).evaluation.asynchronous is True
    assert load_config(overrides=["evaluation.asynchronous=true"]).evaluation.asynchronous is True


def test_a_section_given_whole_in_an_override_names_each_of_its_problems_and_a_whole_list_item_replaces_it():
    """A probe: --set 'policy.alarm={cooldown_steps: abc, cooldwn: 1}' said only "Value 'abc' of type 'str' could
    not be converted to Integer", no key, and nothing of the unknown key; and streams.default.1={type: page_hinkley}
    was merged into the CUSUM spec there, refused for the k, adapt and warmup the user never wrote."""
    with pytest.raises(ConfigError) as err:
        load_config(overrides=["policy.alarm={cooldown_steps: abc, cooldwn: 1}"])
    text = str(err.value)
    assert "policy.alarm.cooldown_steps: Value 'abc'" in text and "policy.alarm.cooldwn: unknown key" in text
    with pytest.raises(ConfigError, match=r"override 'trigger.freq_steps=ten': trigger.freq_steps: Value 'ten'"):
        load_config(overrides=["trigger.freq_steps=ten"])
    cfg = load_config(overrides=["streams.default.1={type: page_hinkley}"])
    assert dict(cfg.streams.default[1]) == {"type": "page_hinkley"}
    assert load_config(overrides=["policy.alarm={cooldown_steps: 7}"]).policy.alarm.cooldown_steps == 7
    assert dict(load_config(overrides=["streams.default.1.warmup=40"]).streams.default[1]) == {
        "type": "cusum", "k": 1.0, "threshold": 8.0, "adapt": 0.05, "warmup": 40}  # (a key of an item: merged)


def test_a_config_dataclass_whose_values_do_not_fit_is_a_config_error_naming_the_key():
    """A probe: Config(trigger=TriggerConfig(freq_steps="ten")) raised OmegaConf's ValidationError (a multi-line
    dump) from from_config, load_config and validate, where ConfigError is the promised error."""
    from adaptive_eval.config import Config, TriggerConfig, validate

    bad = Config(trigger=TriggerConfig(freq_steps="ten"))
    for call in (lambda: AdaptiveEvaluator.from_config(bad), lambda: load_config(bad), lambda: validate(bad)):
        with pytest.raises(ConfigError, match=r"trigger.freq_steps: Value 'ten' of type 'str' could not be converted"):
            call()
    assert load_config(Config(trigger=TriggerConfig(freq_steps=7))).trigger.freq_steps == 7


def test_a_problem_of_two_keys_the_file_set_only_one_of_points_at_that_ones_line(tmp_path):
    """A probe: a file setting only max: 16 read "mine.yaml:3: policy.sample_size.min: 48 is larger than
    policy.sample_size.max: 16", line 3 the section's, for a min it never wrote."""
    path = tmp_path / "mine.yaml"
    path.write_text("policy:\n  alarm: {cooldown_steps: 5}\n  sample_size:\n    initial: 20\n    max: 16\n")
    with pytest.raises(ConfigError, match=rf"{re.escape(str(path))}:5: policy.sample_size.min: 48 is larger than "
                                          r"policy.sample_size.max: 16"):
        load_config(path)


def test_an_override_of_a_key_whose_file_value_did_not_merge_stands(tmp_path):
    """A probe: --set replaced the file's freq_steps: -5 (a range error) but not its eval_at_end: maybe (a type
    error), still reported at the file's line though the override gave the key."""
    path = tmp_path / "fixme.yaml"
    path.write_text("trigger:\n  freq_steps: -5\n  eval_at_end: maybe\n  freq_secs: soon\n")
    cfg = load_config(path, ["trigger.freq_steps=10", "trigger.eval_at_end=false", "trigger.freq_secs=null"])
    assert (cfg.trigger.freq_steps, cfg.trigger.eval_at_end, cfg.trigger.freq_secs) == (10, False, None)
    with pytest.raises(ConfigError) as info:
        load_config(path, ["trigger.eval_at_end=false"])
    assert sorted(p.split(": ")[1] for p in info.value.problems) == ["trigger.freq_secs", "trigger.freq_steps"]


def test_a_section_given_whole_by_an_override_fixes_only_the_keys_it_gives(tmp_path):
    """A review: an override giving a whole section (trigger={freq_secs: 60}) is merged key by key, yet it dropped the
    file's error for a key it never gave (trigger.freq_steps: ten), which then stood at its default unsaid."""
    path = tmp_path / "bad.yaml"
    path.write_text("trigger:\n  freq_steps: ten\n")
    with pytest.raises(ConfigError, match=r"bad.yaml:2: trigger.freq_steps: Value 'ten'"):
        load_config(path, ["trigger={freq_secs: 60}"])
    assert load_config(path, ["trigger={freq_steps: 7}"]).trigger.freq_steps == 7


def test_an_integer_beyond_any_float_is_a_config_error_naming_the_key(tmp_path, capsys):
    """A probe: a 400-digit integer (YAML reads 1e400 as text, and the hint for an integer key was to write its
    digits) raised OverflowError out of load_config, a traceback and exit 1 from the CLI; and 1e400's hint was
    "write inf", which is then refused."""
    big = "1" + "0" * 400
    for key in ("trigger.freq_steps", "evaluation.seed", "policy.sample_size.initial", "streams.default.1.threshold",
                "evaluation.suites.m.cost", "distributed.timeout_s"):
        with pytest.raises(ConfigError, match=re.escape(f"{key}: an integer beyond any number this takes")):
            load_config(overrides=[f"{key}={big}"])
    # (from_config of the same, as a dict: a bare OverflowError; a probe)
    with pytest.raises(ConfigError, match=re.escape("trigger.freq_steps: an integer beyond any number this takes")):
        AdaptiveEvaluator.from_config({"trigger": {"freq_steps": 10**400}})
    (tmp_path / "big.yaml").write_text(f"evaluation:\n  seed: {big}\ndistributed:\n  timeout_s: {big}\n")
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path / "big.yaml")
    assert f"{tmp_path / 'big.yaml'}:2: evaluation.seed: an integer beyond" in str(err.value)
    assert f"{tmp_path / 'big.yaml'}:4: distributed.timeout_s: an integer beyond" in str(err.value)
    from adaptive_eval.cli import main

    assert main(["config", "--config", str(tmp_path / "big.yaml")]) == 2
    (tmp_path / "e.yaml").write_text("evaluation:\n  seed: 1e400\n")
    with pytest.raises(ConfigError, match=r"1e400 is beyond any number this takes") as err:
        load_config(tmp_path / "e.yaml")
    assert "write inf" not in str(err.value)


def test_an_eval_set_too_large_to_hold_an_order_of_is_refused_at_load():
    """A probe: evaluation.suites.m.size=1e12 loaded, then the first due evaluate() raised MemoryError into the
    training loop (a seeded order of every item is drawn); replay.eval_set_size=1e12 failed every evaluation."""
    with pytest.raises(ConfigError, match=r"evaluation\.suites\.m\.size: at most 1,000,000 items .* got 1000000000000"):
        load_config(overrides=["evaluation.suites.m.size=1000000000000"])
    with pytest.raises(ConfigError, match=r"replay\.eval_set_size: must lie in \[1, 1e\+06\], got 1000000000000"):
        load_config(overrides=["replay.eval_set_size=1000000000000"])
    assert load_config(overrides=["evaluation.suites.m.size=1000000"]).evaluation.suites.m.size == 1_000_000


def test_a_dotted_stream_name_and_a_defaults_key_say_the_way_on(tmp_path):
    """Probes: streams.watch.train.loss=[...] read "streams.watch.train: expected a list, got a mapping", not that
    the dot split the name; a file starting `defaults: [aggressive]` (Hydra's) read only "unknown key"."""
    with pytest.raises(ConfigError, match=r"a stream name with a dot, 'train.loss', is split by a dotted key: give "
                                          r"the whole mapping, streams.watch=\{'train.loss': \[...\]\}"):
        load_config(overrides=["streams.watch.train.loss=[{type: cusum}]"])
    cfg = load_config(overrides=["streams.watch={'train.loss': [{type: cusum}]}"])
    assert list(cfg.streams.watch) == ["train.loss"]
    (tmp_path / "d.yaml").write_text("defaults: [aggressive]\ntrigger:\n  freq_steps: 5\n")
    with pytest.raises(ConfigError, match=r"d.yaml:1: defaults: unknown key 'defaults': a config file holds only the "
                                          r"keys it changes, on the default preset; to start from another preset give "
                                          r"it as --config PRESET"):
        load_config(tmp_path / "d.yaml")


def test_each_problem_of_a_file_is_said_once(tmp_path):
    """A probe: a stream given twice under watch was said again for its first detector ("...[0].type: given twice"),
    a stream named on: again as OmegaConf's "Key True (bool) is incompatible with (str)" at another line, and
    relax: -1 twice ("a positive finite number" and "must be >= 1")."""
    cases = {
        "streams:\n  watch:\n    train/reward: [{type: cusum}]\n    train/reward: [{type: cusum}]\n":
            ["4: streams.watch.train/reward: given twice (also at line 3; YAML would keep only the last)"],
        "streams:\n  watch:\n    on: [{type: cusum}]\n":
            ["3: streams.watch.on: YAML reads the name 'on' as a boolean: quote it (\"on\":) to use it as a name"],
        "policy:\n  interval:\n    relax: -1\n":
            ["3: policy.interval.relax: must be a positive finite number, got -1.0"],
        # (one parameter refused alone only against another's default, the spec failing for another reason: the
        # spec's line, not that parameter's; a review)
        "streams:\n  default:\n  - type: nonfinite\n  - type: cusum\n    warmup: 20\n    reference: 30\n"
        "    threshold: 8.0\n    arl0: 2000\n":
            ["4: streams.default[1]: cusum: give either threshold or arl0, not both"],
    }
    for i, (text, expected) in enumerate(cases.items()):
        path = tmp_path / f"c{i}.yaml"
        path.write_text(text)
        with pytest.raises(ConfigError) as info:
            load_config(path)
        assert info.value.problems == [f"{path}:{e}" for e in expected]

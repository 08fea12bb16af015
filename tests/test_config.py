import pathlib

import pytest
from omegaconf import OmegaConf

from adaptive_eval import Config, ConfigError, load_config
from adaptive_eval.config import preset_names

REPO = pathlib.Path(__file__).resolve().parent.parent


def test_default_yaml_documents_exactly_the_schema_defaults():
    assert load_config("default") == OmegaConf.structured(Config)
    assert load_config() == load_config(REPO / "configs" / "default.yaml")


def test_presets_all_load():
    names = preset_names()
    assert {"default", "areal"} <= set(names)
    for name in names:
        load_config(name)


def test_areal_preset_is_a_plain_fixed_schedule():
    cfg = load_config("areal")
    assert cfg.evaluation.sample_size is None and cfg.streams.default == [] and cfg.streams.eval == []
    assert not any(cfg.policy[k].enabled for k in cfg.policy)


def test_file_then_overrides(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("trigger:\n  freq_steps: 40\npolicy:\n  budget:\n    max_eval_fraction: 0.3\n")
    cfg = load_config(f, ["trigger.freq_steps=20"])
    assert cfg.trigger.freq_steps == 20 and cfg.policy.budget.max_eval_fraction == 0.3
    assert cfg.policy.alarm.cooldown_steps == 33  # untouched defaults stay


def test_unknown_keys_and_wrong_types_are_all_reported_with_file_and_line(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("trigger:\n  freq_steps: ten\n  freq_stepz: 3\nlogging:\n  flush_secs: 1\nbogus: 1\n")
    with pytest.raises(ConfigError) as info:
        load_config(f)
    msg = str(info.value)
    assert f"{f}:2: trigger.freq_steps" in msg
    assert f"{f}:3: trigger.freq_stepz: unknown key" in msg
    assert f"{f}:6: bogus" in msg
    assert len(info.value.problems) == 3


def test_yaml_that_does_not_parse_names_file_and_line(tmp_path):
    f = tmp_path / "broken.yaml"
    f.write_text("trigger:\n  freq_steps: 10\n    oops: [\n")
    with pytest.raises(ConfigError, match=rf"{f}:3: YAML does not parse"):
        load_config(f)
    # An unclosed bracket: PyYAML's mark is the line after the last (line 4 of a 3-line file; a new-user probe)
    f.write_text("trigger:\n  freq_steps: [1,\n  x: 2\n")
    with pytest.raises(ConfigError, match=rf"{f}:3: YAML does not parse: .*\(at the end of the file: what opens at "
                                          r"line 2 is never closed\)"):
        load_config(f)
    # "[1," ending the file: PyYAML's mark of what opens is the end too (it said "line 5" of a 4-line file; a probe)
    f.write_text("policy:\n  budget: {max_eval_fraction: 0.1}\ntrigger:\n  freq_steps: [1,\n")
    with pytest.raises(ConfigError, match=r"what opens at line 4 is never closed"):
        load_config(f)
    f.write_text("a: b\nc\n")  # (an end-of-file error with nothing left open: no such note)
    with pytest.raises(ConfigError) as info:
        load_config(f)
    assert "never closed" not in str(info.value)


def test_missing_file_is_named():
    with pytest.raises(ConfigError, match="nope.yaml: no such config file"):
        load_config("nope.yaml")


@pytest.mark.parametrize("override,key", [
    ("trigger.freq_steps=-1", "trigger.freq_steps"),
    ("trigger.freq_secs=-5", "trigger.freq_secs"),
    ("policy.sample_size.min=4096", "policy.sample_size.min"),
    ("policy.interval.min_factor=8", "policy.interval.min_factor"),
    ("evaluation.on_error=ignore", "evaluation.on_error"),
    ("policy.budget.max_eval_fraction=1.5", "policy.budget.max_eval_fraction"),
    ("trigger.freq_steps=abc", "trigger.freq_steps"),
    ("trigger.nope=1", "trigger.nope"),
    ("trigger.freq_steps", "KEY=VALUE"),
])
def test_bad_values_name_the_dotted_key(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(overrides=[override])


def test_errors_are_value_errors():
    assert issubclass(ConfigError, ValueError)


def test_loaded_config_is_read_only():
    cfg = load_config()
    with pytest.raises(Exception):
        cfg.trigger.freq_steps = 3


def test_a_misspelt_key_gets_the_closest_key_of_its_section(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(overrides=["policy.sample_size.target_halfwidth=0.05", "trigger.zzz=1"])
    text = str(err.value)
    assert ("unknown key 'policy.sample_size.target_halfwidth' (did you mean "
            "'policy.sample_size.target_half_width'?)") in text
    assert "unknown key 'trigger.zzz'\n" in text + "\n" and "trigger.zzz' (did" not in text  # nothing close
    (tmp_path / "mine.yaml").write_text("polcy:\n  alarm: {enabled: false}\n")
    with pytest.raises(ConfigError, match=r"mine.yaml:1: polcy: unknown key 'polcy' \(did you mean 'policy'\?\)"):
        load_config(str(tmp_path / "mine.yaml"))


def test_a_preset_that_merges_as_a_whole_is_not_merged_key_by_key(monkeypatch):
    # Each OmegaConf.merge deep-copies the whole config; a trial merge per key of the file (75 for a preset, to
    # name the key that does not merge) made every load_config take 0.7 s.  A file that merges as a whole is
    # merged once; a bad one still names its key (tests/test_config_validation.py).
    calls = []
    real = OmegaConf.merge

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(OmegaConf, "merge", counted)
    cfg = load_config("default")
    assert len(calls) <= 5, len(calls)
    assert cfg.trigger.freq_steps == 25 and cfg.streams.default[1].adapt == 0.05 and cfg.policy.alarm.corroborate == 2

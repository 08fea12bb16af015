"""The examples the README points to run and do what it says of them."""

import importlib.util
import pathlib

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_train_loop_is_the_quick_start_loop_with_observe_and_evaluate(capsys):
    from adaptive_eval import AdaptiveEvaluator

    ev = _load("train_loop").main(steps=400)
    assert isinstance(ev, AdaptiveEvaluator)
    assert {"train/loss", "train/grad_norm"} <= set(ev._detectors)  # observe() fed the streams
    assert any(r.reason.startswith("alarm:train/") for r in ev.history)  # the flipped labels were caught
    assert "evaluations" in capsys.readouterr().out


def test_torchrun_example_docstring_gives_the_real_default():
    text = (EXAMPLES / "torchrun_eval.py").read_text()
    default = text.split('"--sample-size", type=int, default=')[1].split(")")[0]
    assert f"[--sample-size {default}]" in text


def test_cli_has_version_and_help_without_rest_markup():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "adaptive_eval.cli", "--version"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("adaptive-eval ")
    help_text = subprocess.run([sys.executable, "-m", "adaptive_eval.cli", "--help"], capture_output=True, text=True,
                               timeout=60).stdout
    assert "``" not in help_text and "replay" in help_text

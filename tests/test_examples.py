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


def _evaluations(stdout: str) -> list[tuple[int, str]]:
    """The ``step  reason  n=...`` lines an example prints at its end."""
    import re

    return [(int(m[1]), m[2]) for m in re.finditer(r"^\s+(\d+)\s+(\S+)\s+n=", stdout, re.M)]


def _run_example(name: str, *args: str):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, str(EXAMPLES / name), *args], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_the_hugging_face_example_catches_the_scrambled_labels_and_evaluates_the_final_weights(tmp_path):
    """README, Drop into the trainer you already run: the three lines in a real transformers Trainer."""
    out = _run_example("hf_trainer.py", "--out", str(tmp_path))
    evals = _evaluations(out)
    assert "labels scrambled at step 60" in out
    assert any(r.startswith("alarm:train/loss") and 60 <= s <= 85 for s, r in evals), evals  # within 25 steps
    assert evals[-1] == (119, "trigger:final")
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))  # report_to=["tensorboard"]


def test_the_lightning_example_catches_the_flipped_target_and_evaluates_the_final_weights(tmp_path):
    out = _run_example("lightning_trainer.py", "--out", str(tmp_path))
    evals = _evaluations(out)
    assert "target flipped at step 60" in out
    assert any(r.startswith("alarm:train/") and 60 <= s <= 85 for s, r in evals), evals  # within 25 steps
    assert evals[-1] == (119, "trigger:final")
    [csv] = tmp_path.glob("lightning_logs/version_*/metrics.csv")
    assert "adaptive_eval/" in csv.read_text().splitlines()[0]

"""The examples the README points to run and do what it says of them."""

import importlib.util
import pathlib
import sys

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def _load(name):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (dataclasses look their module up there)
    spec.loader.exec_module(module)
    return module


def test_train_loop_is_the_quick_start_loop_with_observe_and_evaluate(capsys):
    from adaptive_eval import AdaptiveEvaluator

    ev = _load("train_loop").main(steps=400)
    assert isinstance(ev, AdaptiveEvaluator)
    assert {"train/loss", "train/grad_norm"} <= set(ev._detectors)  # observe() fed the streams
    assert any(r.reason.startswith("alarm:train/") for r in ev.history)  # the flipped labels were caught
    assert "evaluations" in capsys.readouterr().out


def test_the_areal_loop_evaluates_the_collapse_when_its_alarm_asks_and_prints_the_same_each_run(capsys):
    """A probe: on the wall clock the example's microsecond-long loop left the eval budget no room, so the alarm at
    step 122 was evaluated 71 steps late or only at the last step, under the alarm's reason, and its output changed
    from run to run.  Its clock is simulated now."""
    _load("areal_loop").main()
    first = capsys.readouterr().out
    _load("areal_loop").main()
    assert capsys.readouterr().out == first
    assert "step 122  alarm:train/reward:cusum:down" in first and "step 199  trigger:final" in first


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


@pytest.mark.parametrize("script, fault, alarm, logs", [
    ("hf_trainer.py", "labels scrambled at step 60", "alarm:train/loss", "tb/events.out.tfevents.*"),  # report_to
    ("lightning_trainer.py", "target flipped at step 60", "alarm:train/", "lightning_logs/version_*/metrics.csv"),
])
def test_the_framework_examples_catch_the_fault_and_evaluate_the_final_weights(tmp_path, script, fault, alarm, logs):
    """README, Drop into the trainer you already run: the three lines in a real transformers / Lightning Trainer."""
    out = _run_example(script, "--out", str(tmp_path))
    evals = _evaluations(out)
    assert fault in out
    assert any(r.startswith(alarm) and 60 <= s <= 85 for s, r in evals), evals  # within 25 steps
    assert evals[-1] == (119, "trigger:final")
    written = sorted(tmp_path.glob(logs))
    assert written
    if written[0].suffix == ".csv":  # the adapter's results in the trainer's own logger
        assert "adaptive_eval/" in written[0].read_text().splitlines()[0]
    else:  # HF's writer and ours in one folder, one TensorBoard run: the results, and why each evaluation came
        from adaptive_eval.tensorboard import read_texts

        decisions = read_texts(written[0].parent, "decisions")
        assert any(alarm in text for _, text in decisions) and any("trigger:final" in t for _, t in decisions)


def test_every_readme_python_block_parses_and_imports_the_library_names_it_uses():
    """A probe ran every README block with only what the README says the user supplies: one was a SyntaxError
    (``...  ev.evaluate(...) ...``), one used AdaptiveEvaluator and load_config unimported, and one read a ``loss``
    it never assigned."""
    import ast
    import re

    import adaptive_eval
    import adaptive_eval.asynchronous as asynchronous

    text = (EXAMPLES.parent / "README.md").read_text(encoding="utf-8")
    library = set(adaptive_eval.__all__) | {"SnapshotEval", "EvalRanks", "AdaptiveEvalCallback"}
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 9 and {"SnapshotEval", "EvalRanks"} <= set(dir(asynchronous))
    for block in blocks:
        tree = ast.parse(block)  # (a SyntaxError names the block's line)
        defined = {alias.asname or alias.name for node in ast.walk(tree)
                   if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}
        defined |= {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)
                    and isinstance(node.ctx, ast.Store)}
        used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
        assert not (used & library) - defined, f"uses {sorted((used & library) - defined)} unimported:\n{block}"
        assert "loss" not in used or "loss" in defined, f"reads a loss it never assigns:\n{block}"

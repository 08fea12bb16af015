"""The tasks of ``adaptive-eval demo`` (``--task``), one module each: ``rlvr`` (the default: GRPO on
addition, see :mod:`adaptive_eval.demos.rlvr`) and ``digits`` (an MLP on handwritten digits)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["DEFAULT_TASK", "MARKER", "TASKS", "DemoError", "prepare_out"]

TASKS = ("rlvr", "digits")
DEFAULT_TASK = "rlvr"


class DemoError(ValueError):
    """The demo cannot run as asked (an output folder that cannot be written, a bad setting)."""


# What any task writes into --out: run folders (files as replay writes them, plus run.png and tb/) and files
# beside them.  Another task's runs left in a reused folder would be drawn and checked with this one's.
_DEMO_RUNS = ("adaptive", "async", "fixed_same", "fixed")
_RUN_FILES = ("evals.jsonl", "alarms.jsonl", "summary.json", "run.png")
_TOP_FILES = ("comparison.json", "comparison.png")
MARKER = ".adaptive-eval-demo"  # written into --out: a folder a demo wrote (what else is there is not cleared)


def prepare_out(out_dir: Path, runs) -> None:
    """Create ``runs``' folders under ``out_dir`` and prove them writable, before any training; clear a previous
    demo's event files there (TensorBoard would draw both runs as one) and its trace (the recorder would continue
    it) with the trace's events file.  In a folder a demo marked as its own (:data:`MARKER`), also what the other
    task wrote: its comparison, the files of the runs it has (which it writes again at its end), and the files and
    event files of runs this task does not have (their folders too, once nothing else is in them); in any other
    folder nothing else is touched, and a trace there that no demo wrote is a :class:`DemoError`."""
    ours = (out_dir / MARKER).is_file()
    foreign = [f for f in ("trace.csv", "trace.csv.events.yaml") if not ours and (out_dir / f).exists()]
    if foreign:  # (deleted before training in a folder no demo wrote; a probe)
        raise DemoError(f"--out {out_dir}: it holds {foreign[0]}, which no demo wrote (the demo writes its own there): "
                        "pick another folder, or move that file")
    try:
        for name in _DEMO_RUNS:
            run_dir = out_dir / name
            if name in runs:
                (run_dir / "tb").mkdir(parents=True, exist_ok=True)
                probe = run_dir / ".write-test"
                probe.write_bytes(b"")
                probe.unlink()
                for file in _RUN_FILES if ours else ():
                    # (an earlier demo's, which this one writes again at its end: interrupted, it left them beside
                    # its own partial tb/ and trace, and plot drew one run's evaluations over the other's streams)
                    (run_dir / file).unlink(missing_ok=True)
            elif not (ours and run_dir.is_dir()):
                continue
            else:
                for file in _RUN_FILES:
                    (run_dir / file).unlink(missing_ok=True)
            # (in a folder no demo marked, our event files alone, as replay clears: a SummaryWriter's file of the user's
            # in runs/adaptive/tb went too; a probe)
            for old in (run_dir / "tb").glob("events.out.tfevents.*" + ("" if ours else ".adaptive_eval*")):
                old.unlink()
            if name not in runs:
                for folder in (run_dir / "tb", run_dir):
                    if folder.is_dir() and not any(folder.iterdir()):
                        folder.rmdir()
        for file in ("trace.csv", "trace.csv.events.yaml"):  # (the trace and what its check expects)
            (out_dir / file).unlink(missing_ok=True)
        for file in _TOP_FILES if ours else ():
            (out_dir / file).unlink(missing_ok=True)
        (out_dir / MARKER).write_text("written by adaptive-eval demo; a later demo here clears what it wrote\n")
    except OSError as exc:
        raise DemoError(f"--out {out_dir}: not writable ({exc.strerror or exc})") from None

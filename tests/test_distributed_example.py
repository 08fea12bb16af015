"""The torchrun example runs on two CPU ranks, and both ranks report the same sharded result."""

import os
import re
import subprocess
import sys

from conftest import REPO


def test_torchrun_example_on_two_ranks_agrees():
    env = dict(os.environ, OMP_NUM_THREADS="1")
    # --standalone picks a free port, so concurrent runs do not collide on 29500.
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         str(REPO / "examples" / "torchrun_eval.py"), "--steps", "60"],
        capture_output=True, text=True, timeout=120, env=env, cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The launcher forwards both ranks' output to one pipe, where their lines can run together: match each
    # report on its own rather than by line.
    lines = re.findall(r"\[rank (\d)/2\] step\s+(\d+) \((\S+)\) (acc [\d.]+ \[[\d., ]+\] on \d+ items)", proc.stdout)
    by_rank = {r: sorted((step, reason, acc) for rr, step, reason, acc in lines if rr == r) for r in "01"}
    assert by_rank["0"] == by_rank["1"] and [s for s, _, _ in by_rank["0"]] == ["49", "59"]
    assert "on 601 items" in by_rank["0"][0][2]
    assert "(301 evaluated here)" in proc.stdout and "(300 evaluated here)" in proc.stdout

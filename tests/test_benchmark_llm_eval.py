"""benchmarks/llm_eval.py's delay table (subprocess, as a user runs it)."""

import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent


def test_the_delay_table_has_a_fixed_schedule_of_our_size_beside_the_whole_set_one():
    """It compared against all items x k only: a sceptic's baseline is a fixed schedule of the same
    per-evaluation size.  Each row carries its evaluations and cost; the same-size one costs about ours."""
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "llm_eval.py"), "--delay-only", "--seeds", "1",
                          "--steps", "300"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    rows = {}
    for line in out.stdout.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 6 and cells[0] == "collapse":
            rows[cells[1].split(" (")[0]] = (float(cells[2]), float(cells[3]))
    assert set(rows) == {"ours", "fixed, same size", "fixed"}, out.stdout
    (ours_evals, ours_cost), (same_evals, same_cost) = rows["ours"], rows["fixed, same size"]
    assert same_evals > rows["fixed"][0] and 0.7 * ours_cost <= same_cost <= 1.3 * ours_cost

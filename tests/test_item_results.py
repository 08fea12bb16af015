"""Per-problem results in long form (``adaptive_eval.convert.from_item_results``) and how replay simulates
them: the answers' real spread, problems without a scored answer, item numbers, bad scale (review findings
1, 2, 8 and 10)."""

import math

import pytest

from adaptive_eval.convert import from_item_results


def write_results(path, rows, header="step,problem,score"):
    path.write_text("\n".join([header, *(",".join(map(str, r)) for r in rows)]) + "\n")
    return path


# -------------------------------------------------------------------------------- finding 10: the scale


@pytest.mark.parametrize("scale", [0, 0.0, -0.0, math.nan, math.inf, -math.inf])
def test_a_zero_or_non_finite_scale_is_refused_naming_the_argument(tmp_path, scale):
    """scale=0 zeroed every problem; scale=nan said "no scored rows", blaming the data."""
    path = write_results(tmp_path / "r.csv", [(0, "a", 40), (0, "b", 60)])
    with pytest.raises(ValueError, match=r"^scale=.*must be a finite non-zero number"):
        from_item_results(path, suite="s", item="problem", value="score", scale=scale)
    with pytest.raises(TypeError, match=r"^scale='0.01': .* must be a number"):
        from_item_results(path, suite="s", item="problem", value="score", scale="0.01")
    trace, _ = from_item_results(path, suite="s", item="problem", value="score", scale=0.01)
    assert trace.records[0].metrics == {"eval/s/accuracy@0": 0.4, "eval/s/accuracy@1": 0.6}

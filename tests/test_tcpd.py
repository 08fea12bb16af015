"""Turing Change Point Dataset files (alan-turing-institute/TCPD) read as traces, and their annotations as events."""

import json
import random

import pytest

from adaptive_eval.convert import convert_tcpd, tcpd_events
from adaptive_eval.trace import TraceError, read_trace


def tcpd_file(tmp_path, series, name="toy", index=None):
    n = len(series[0]["raw"])
    doc = {"name": name, "longname": "A toy", "n_obs": n, "n_dim": len(series),
           "time": {"type": "string", "format": "%Y", "index": list(range(n)) if index is None else index,
                    "raw": [str(1900 + i) for i in range(n)]},
           "series": series}
    path = tmp_path / f"{name}.json"
    # TCPD's files are indented with tabs, one value a line, and may hold NaN for a missing value
    path.write_text(json.dumps(doc, indent="\t"))
    return path


def test_read_trace_takes_a_tcpd_dataset_as_one_stream_per_series(tmp_path):
    path = tcpd_file(tmp_path, [
        {"label": "Volume at Aswan", "type": "int", "raw": [1120, 1160, None, 963, 1210]},
        {"label": "Volume at Aswan", "type": "float", "raw": [0.5, float("nan"), None, 0.25, 1e300]},
        {"type": "float", "raw": [1, 2, None, 3, 4]},
    ], index=[0, 1, 2, 5, 6])
    trace = read_trace(path)
    assert trace == convert_tcpd(path)
    # the index is the step; a value missing (null or NaN) is not observed; a step missing everywhere has no record
    assert [r.step for r in trace.records] == [0, 1, 5, 6]
    assert trace.stream_names() == ["Volume at Aswan", "V2", "V3"]  # a repeated or missing label: V<k>
    assert trace.records[1].metrics == {"Volume at Aswan": 1160.0, "V3": 2.0}
    assert trace.records[3].metrics["V2"] == 1e300 and all(type(v) is float for v in trace.records[0].metrics.values())


def test_a_tcpd_value_that_is_not_a_number_or_a_short_series_names_where(tmp_path):
    path = tcpd_file(tmp_path, [{"label": "V1", "type": "float", "raw": [1.0, "7,5", 2.0]}])
    with pytest.raises(TraceError, match=r"toy.json: TCPD dataset: series 0 \('V1'\), value 1 \(step 1\) is '7,5'"):
        read_trace(path)
    doc = json.loads(path.read_text())
    doc["series"][0]["raw"] = [1.0, 2.0]
    path.write_text(json.dumps(doc))
    with pytest.raises(TraceError, match=r"series 0: 'raw' must list n_obs = 3 values, not 2"):
        read_trace(path)
    doc["series"][0]["raw"] = [1.0, 2.0, 3.0]
    doc["time"]["index"] = [0, 2, 1]
    path.write_text(json.dumps(doc))
    with pytest.raises(TraceError, match=r"'time.index' entry 2 is 1; the index must be increasing"):
        read_trace(path)
    # another one-document JSON file is still refused as before, not taken for TCPD
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"series": [1, 2]}))
    with pytest.raises(TraceError, match="no 'log_history' list"):
        read_trace(other)


def test_tcpd_events_are_the_points_two_annotators_agree_on(tmp_path):
    annotations = {"toy": {
        "6": [10, 12, 50],  # one annotator's two nearby points are one vote
        "7": [14, 90],      # 14 is within 5 of 12: the group 10-14 has two annotators, its event at 10
        "8": [],
        "9": [93, 200],     # 90 and 93 agree; 200 and 50 stand alone
    }}
    assert tcpd_events(annotations, "toy") == [10, 90]
    assert tcpd_events(annotations, "toy", min_annotators=1) == [10, 50, 90, 200]
    assert tcpd_events(annotations, "toy", margin=1) == []
    assert tcpd_events({"toy": {"6": [10, 12], "7": []}}, "toy") == []  # one annotator alone is no consensus
    path = tmp_path / "annotations.json"
    path.write_text(json.dumps(annotations))
    assert tcpd_events(path, "toy") == [10, 90]
    with pytest.raises(KeyError, match=r"no annotations for dataset 'tay'; did you mean 'toy'"):
        tcpd_events(path, "tay")
    with pytest.raises(TraceError, match=r"annotator '6': '10' is not an index"):
        tcpd_events({"toy": {"6": ["10"]}}, "toy")


def test_a_tcpd_series_replays_and_its_change_is_caught(tmp_path):
    from adaptive_eval.testing import replay_trace

    rng = random.Random(5)
    raw = [round(rng.gauss(100.0, 10.0), 1) + (80.0 if i >= 150 else 0.0) for i in range(300)]
    path = tcpd_file(tmp_path, [{"label": "V1", "type": "float", "raw": raw}], name="shift")
    run = replay_trace(path)
    assert [(a["stream"], a["direction"], a["location"]) for a in run.alarms] == [("V1", "up", 150)]
    assert 150 <= run.alarms[0]["step"] <= 155

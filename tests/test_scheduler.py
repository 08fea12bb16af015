"""The resource-aware scheduler, driven by a scripted monitor (tables of snapshots and expected decisions)."""

import pickle

import pytest

from adaptive_eval import load_config
from adaptive_eval.config import ResourcesConfig
from adaptive_eval.scheduler import (
    FakeResourceMonitor,
    ResourceMonitor,
    ResourceScheduler,
    ResourceSnapshot,
    shortages,
)

LOW_GPU = {"accelerator_free_gb": 1.0, "accelerator_total_gb": 80.0, "host_free_gb": 100.0, "host_cpu_percent": 10.0}
OK = {"accelerator_free_gb": 60.0, "accelerator_total_gb": 80.0, "host_free_gb": 100.0, "host_cpu_percent": 10.0}
BUSY_CPU = OK | {"host_cpu_percent": 99.0}
LOW_HOST = OK | {"host_free_gb": 2.0}
NO_GPU = {"host_free_gb": 100.0, "host_cpu_percent": 10.0}


@pytest.mark.parametrize("settings,snapshot,expected", [
    ({}, LOW_GPU, []),  # default thresholds never defer
    ({"min_free_accelerator_gb": 4.0}, LOW_GPU, ["accelerator free 1.00 GB < 4.00 GB"]),
    ({"min_free_accelerator_gb": 4.0}, OK, []),
    ({"min_free_accelerator_fraction": 0.1}, LOW_GPU, ["accelerator free 1.2% < 10.0%"]),
    ({"min_free_accelerator_fraction": 0.1}, OK, []),
    ({"min_free_host_gb": 8.0}, LOW_HOST, ["host free 2.00 GB < 8.00 GB"]),
    ({"max_host_cpu_percent": 90.0}, BUSY_CPU, ["host CPU 99% > 90%"]),
    ({"max_host_cpu_percent": 90.0}, OK, []),
    ({"min_free_accelerator_gb": 4.0, "min_free_accelerator_fraction": 0.5}, NO_GPU, []),  # unknown: no deferral
    ({"min_free_accelerator_gb": 4.0, "max_host_cpu_percent": 50.0}, LOW_GPU | {"host_cpu_percent": 70.0},
     ["accelerator free 1.00 GB < 4.00 GB", "host CPU 70% > 50%"]),
])
def test_shortages_table(settings, snapshot, expected):
    assert shortages(ResourceSnapshot(**snapshot), ResourcesConfig(**settings)) == expected


def _run(settings, snapshots, calls):
    """Feed (step, urgent) calls; return the decisions and how many snapshots were taken."""
    monitor = FakeResourceMonitor(snapshots)
    sched = ResourceScheduler(ResourcesConfig(**settings), monitor)
    return [sched.decide(step, urgent) for step, urgent in calls], monitor.calls


DEFER = "resources:deferred (accelerator free 1.00 GB < 4.00 GB)"
GPU4 = {"enabled": True, "min_free_accelerator_gb": 4.0}


@pytest.mark.parametrize("settings,snapshots,calls,expected,samples", [
    # Disabled: always run, the monitor is never read.
    (GPU4 | {"enabled": False}, [LOW_GPU], [(1, False), (2, True)], [(True, ""), (True, "")], 0),
    # Enough resources: run.
    (GPU4, [OK], [(5, False)], [(True, "")], 1),
    # Short: deferred while short, then runs when memory frees up.
    (GPU4, [LOW_GPU, LOW_GPU, OK], [(5, False), (6, False), (7, False)],
     [(False, DEFER), (False, DEFER), (True, "")], 3),
    # Short for too long: forced after max_deferral_steps steps (counted in steps, not calls).
    (GPU4 | {"max_deferral_steps": 3}, [LOW_GPU], [(10, False), (11, False), (12, False), (13, False)],
     [(False, DEFER), (False, DEFER), (False, DEFER), (True, "resources:forced")], 4),
    (GPU4 | {"max_deferral_steps": 3}, [LOW_GPU], [(10, False), (20, False)],
     [(False, DEFER), (True, "resources:forced")], 2),
    # max_deferral_steps = 0: a shortage never defers.
    (GPU4 | {"max_deferral_steps": 0}, [LOW_GPU], [(3, False)], [(True, "resources:forced")], 1),
    # After a forced run the next shortage starts a new deferral window.
    (GPU4 | {"max_deferral_steps": 1}, [LOW_GPU], [(1, False), (2, False), (9, False), (10, False)],
     [(False, DEFER), (True, "resources:forced"), (False, DEFER), (True, "resources:forced")], 4),
    # Urgent evaluations bypass without reading the monitor; a pending deferral is cleared.
    (GPU4, [LOW_GPU], [(4, True)], [(True, "")], 0),
    (GPU4, [LOW_GPU], [(4, False), (5, True), (6, False)],
     [(False, DEFER), (True, "resources:bypass"), (False, DEFER)], 2),
    # ... unless alarm_bypass is off.
    (GPU4 | {"alarm_bypass": False}, [LOW_GPU], [(4, True)], [(False, DEFER)], 1),
])
def test_decide_table(settings, snapshots, calls, expected, samples):
    decisions, taken = _run(settings, snapshots, calls)
    assert decisions == expected
    assert taken == samples


def test_state_dict_round_trip_mid_deferral_gives_the_same_decisions():
    settings = GPU4 | {"max_deferral_steps": 4}
    calls = [(s, False) for s in range(10, 18)]
    full, _ = _run(settings, [LOW_GPU], calls)
    first = ResourceScheduler(ResourcesConfig(**settings), FakeResourceMonitor([LOW_GPU]))
    part = [first.decide(s, u) for s, u in calls[:3]]
    state = pickle.loads(pickle.dumps(first.state_dict()))
    assert state == {"version": 1, "deferred_since": 10, "deferrals": 3, "forced": 0}
    second = ResourceScheduler(ResourcesConfig(**settings), FakeResourceMonitor([LOW_GPU]))
    second.load_state_dict(state)
    assert part + [second.decide(s, u) for s, u in calls[3:]] == full
    older = ResourceScheduler(ResourcesConfig(**settings), FakeResourceMonitor([LOW_GPU]))
    older.load_state_dict({"deferred_since": None})  # later fields default
    assert older.forced == 0 and older.deferrals == 0


def test_decide_with_a_combined_shortage_keeps_ranks_in_step():
    # In a process group every rank calls decide_with with the shortage combined over the ranks.
    sched = ResourceScheduler(ResourcesConfig(**GPU4, max_deferral_steps=2), FakeResourceMonitor([OK]))
    assert sched.decide_with(1, "rank 1 short") == (False, "resources:deferred (rank 1 short)")
    assert sched.decide_with(2, None) == (True, "")
    assert sched.decide_with(3, "x")[0] is False and sched.decide_with(5, "x") == (True, "resources:forced")


def test_built_from_the_full_config_and_its_section():
    cfg = load_config(overrides=["resources.enabled=true", "resources.min_free_host_gb=1e9"])
    for section in (cfg, cfg.resources):
        sched = ResourceScheduler(section, FakeResourceMonitor([OK]))
        assert sched.enabled and sched.decide(1)[1].startswith("resources:deferred (host free")
    with pytest.raises(ValueError, match="max_deferral_steps"):
        ResourceScheduler(ResourcesConfig(max_deferral_steps=-1))


def test_real_monitor_reads_host_resources():
    snap = ResourceMonitor(accelerator="auto").snapshot()
    assert snap.host_free_gb > 0 and 0.0 <= snap.host_cpu_percent <= 100.0
    assert snap.source.endswith("+psutil")
    none = ResourceMonitor(accelerator="none").snapshot()
    assert none.accelerator_free_gb is None and none.accelerator_free_fraction is None
    with pytest.raises(ValueError, match="accelerator"):
        ResourceMonitor(accelerator="tpu")


def test_fake_monitor_needs_snapshots():
    with pytest.raises(ValueError):
        FakeResourceMonitor([])


def test_an_accelerator_threshold_with_no_reading_is_said_once(caplog):
    """Without CUDA or NVML the accelerator thresholds were never checked and nothing said so (found by a
    new-user probe); the real monitor with accelerator="none" reads no accelerator memory, as on such a machine."""
    cfg = ResourcesConfig(enabled=True, min_free_accelerator_gb=8.0)
    sched = ResourceScheduler(cfg, ResourceMonitor(accelerator="none"))
    with caplog.at_level("WARNING", logger="adaptive_eval"):
        assert [sched.decide(s) for s in (1, 2, 3)] == [(True, "")] * 3  # never deferred
    said = [r.getMessage() for r in caplog.records if "not checked" in r.getMessage()]
    assert said == ["resources.min_free_accelerator_gb is set, but the monitor reads no accelerator memory here "
                    "(none+psutil: no CUDA device, no NVML): it is not checked (said once)"]
    caplog.clear()
    with caplog.at_level("WARNING", logger="adaptive_eval"):  # a reading, or no accelerator threshold: nothing
        ResourceScheduler(cfg, FakeResourceMonitor([OK])).decide(1)
        ResourceScheduler(ResourcesConfig(enabled=True, min_free_host_gb=1.0),
                          ResourceMonitor(accelerator="none")).decide(1)
    assert not caplog.records

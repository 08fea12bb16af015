"""The resource-aware scheduler: defer a non-urgent evaluation while the machine is short of memory or CPU.

A :class:`ResourceMonitor` reads free accelerator memory (``torch.cuda.mem_get_info``; NVML through
nvidia-ml-py when torch sees no CUDA device), free host memory and host CPU use (psutil) into a
:class:`ResourceSnapshot`.  The :class:`ResourceScheduler` applies the ``resources`` config section to a
snapshot: an evaluation that is due but finds the machine short is deferred (``resources:deferred (...)``)
for at most ``max_deferral_steps`` steps, then runs anyway; the evaluator gives it the reason
``resources:forced (<the reason it was due for>)``, e.g. ``resources:forced (alarm:train/reward:cusum:down)``
(the prefix says it was forced, the parenthesis why it was due).  With ``alarm_bypass`` (the default) these
bypass the check, without reading the monitor (:meth:`ResourceScheduler.bypasses`): every evaluation an alarm
brought forward (reason ``alarm:...``, from any detector, not only the urgent ``nonfinite``) and every urgent
one (an urgent detector's alarm, the last step's with ``trigger.eval_at_end``).  A scheduled evaluation
(``trigger:...``, ``interval:...``) or a re-measure (``peak:confirm``) never does.  Reading the monitor is
not free, so the scheduler samples it only when it is asked about an evaluation that is due.

Tests and replay drive the scheduler with a :class:`FakeResourceMonitor`.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Iterable, Mapping

__all__ = [
    "FakeResourceMonitor",
    "ResourceMonitor",
    "ResourceScheduler",
    "ResourceSnapshot",
    "shortages",
]

_GB = 1024**3
SLOW_READING_S = 0.25  # a monitor reading slower than this is said (once): it runs inside the training step
log = logging.getLogger("adaptive_eval")


@dataclasses.dataclass(frozen=True)
class ResourceSnapshot:
    """What the machine has left; a reading that could not be taken is None (and never defers)."""

    accelerator_free_gb: float | None = None
    accelerator_total_gb: float | None = None
    host_free_gb: float | None = None
    host_cpu_percent: float | None = None
    source: str = ""

    @property
    def accelerator_free_fraction(self) -> float | None:
        if self.accelerator_free_gb is None or not self.accelerator_total_gb:
            return None
        return self.accelerator_free_gb / self.accelerator_total_gb


class ResourceMonitor:
    """Reads the resources of this process's machine.

    ``accelerator``: ``"auto"`` (torch CUDA when available, else NVML when nvidia-ml-py is installed,
    else none), ``"cuda"``, ``"nvml"`` or ``"none"``.  ``device`` is the CUDA device index (default:
    the current device); for NVML it is the physical index (NVML ignores ``CUDA_VISIBLE_DEVICES``).
    CPU use is psutil's system-wide percentage since the previous snapshot.
    """

    def __init__(self, accelerator: str = "auto", device: int | None = None):
        if accelerator not in ("auto", "cuda", "nvml", "none"):
            raise ValueError(f"accelerator must be auto, cuda, nvml or none; got {accelerator!r}")
        self.accelerator = accelerator
        self.device = device
        self._nvml = None
        import psutil

        self._psutil = psutil
        psutil.cpu_percent(interval=None)  # the first reading is meaningless; prime it

    def _cuda(self) -> tuple[float, float] | None:
        import torch

        if not torch.cuda.is_available():
            return None
        device = self.device if self.device is not None else torch.cuda.current_device()
        free, total = torch.cuda.mem_get_info(device)
        return free / _GB, total / _GB

    def _nvml_reading(self) -> tuple[float, float] | None:
        if self._nvml is None:
            try:
                import pynvml  # nvidia-ml-py (optional)

                pynvml.nvmlInit()
            except Exception:  # noqa: BLE001 - not installed, no driver, no GPU
                self._nvml = False
                return None
            self._nvml = pynvml
        if self._nvml is False:
            return None
        handle = self._nvml.nvmlDeviceGetHandleByIndex(self.device or 0)
        info = self._nvml.nvmlDeviceGetMemoryInfo(handle)
        return info.free / _GB, info.total / _GB

    def snapshot(self) -> ResourceSnapshot:
        reading, source = None, "none"
        if self.accelerator in ("auto", "cuda"):
            reading, source = self._cuda(), "cuda"
        if reading is None and self.accelerator in ("auto", "nvml"):
            reading, source = self._nvml_reading(), "nvml"
        if reading is None:
            source = "none"
        memory = self._psutil.virtual_memory()
        return ResourceSnapshot(
            accelerator_free_gb=reading[0] if reading else None,
            accelerator_total_gb=reading[1] if reading else None,
            host_free_gb=memory.available / _GB,
            host_cpu_percent=float(self._psutil.cpu_percent(interval=None)),
            source=f"{source}+psutil",
        )


_FIELDS = frozenset(f.name for f in dataclasses.fields(ResourceSnapshot))


def _as_snapshot(reading, extra: set | None = None) -> ResourceSnapshot:
    """A reading as a :class:`ResourceSnapshot`: one as it is, a mapping of its fields made one; else ``TypeError``.
    ``extra``: a set that gets the mapping's keys that are not fields, left out (else they are a ``TypeError``)."""
    if isinstance(reading, Mapping):
        if extra is not None:
            extra.update(str(k) for k in reading if k not in _FIELDS)
            reading = {k: v for k, v in reading.items() if k in _FIELDS}
        reading = ResourceSnapshot(**reading)
    if not isinstance(reading, ResourceSnapshot):
        raise TypeError(f"snapshot() returned {type(reading).__name__}, not a ResourceSnapshot (or a mapping of its "
                        "fields)")
    return reading


_READINGS = tuple(f.name for f in dataclasses.fields(ResourceSnapshot) if f.name != "source")


def _possible(snapshot: ResourceSnapshot) -> tuple[ResourceSnapshot, dict]:
    """``snapshot`` with each reading that cannot be (NaN, negative, infinite, ``True``) as None, not taken, so it
    never defers; and those readings, by field.  (NaN never deferred, unsaid; -3 GB free deferred every evaluation
    until forced, "accelerator free -3.00 GB < 4.00 GB"; True read as 1 GB; a probe.)"""
    bad, said = {}, {}
    for name in _READINGS:
        value = getattr(snapshot, name)
        if value is None or isinstance(value, (str, bytes)):  # (text: a reading that fails, read_errors)
            continue
        try:
            # (numpy's bool_ too: it read as 1 GB where a plain True was not checked; a probe)
            fine = type(value).__name__ not in ("bool", "bool_") and 0 <= float(value) < math.inf
        except (TypeError, ValueError):
            continue
        if not fine:
            bad[name], said[name] = None, value
    return (dataclasses.replace(snapshot, **bad) if bad else snapshot), said


class FakeResourceMonitor:
    """A scripted monitor: each :meth:`snapshot` returns the next snapshot; the last one repeats.

    Snapshots may be given as :class:`ResourceSnapshot` or as mappings of its fields.  ``calls`` counts
    the readings taken.

    >>> m = FakeResourceMonitor([{"accelerator_free_gb": 1.0}, {"accelerator_free_gb": 9.0}])
    >>> [m.snapshot().accelerator_free_gb for _ in range(3)], m.calls
    ([1.0, 9.0, 9.0], 3)
    """

    def __init__(self, snapshots: Iterable[ResourceSnapshot | Mapping]):
        self.snapshots = [_as_snapshot(s) for s in snapshots]
        if not self.snapshots:
            raise ValueError("FakeResourceMonitor needs at least one snapshot")
        self.calls = 0

    def snapshot(self) -> ResourceSnapshot:
        snap = self.snapshots[min(self.calls, len(self.snapshots) - 1)]
        self.calls += 1
        return snap


def _setting(section, name: str, default):
    value = getattr(section, name, default) if section is not None else default
    return default if value is None else value


def shortages(snapshot: ResourceSnapshot, section) -> list[str]:
    """What ``snapshot`` lacks against the thresholds of a ``resources`` config section (empty: nothing).

    >>> from adaptive_eval.config import ResourcesConfig
    >>> shortages(ResourceSnapshot(accelerator_free_gb=2.0, accelerator_total_gb=80.0, host_cpu_percent=97.0),
    ...           ResourcesConfig(min_free_accelerator_gb=8.0, max_host_cpu_percent=90.0))
    ['accelerator free 2.00 GB < 8.00 GB', 'host CPU 97% > 90%']
    >>> shortages(ResourceSnapshot(accelerator_free_gb=3.999, host_cpu_percent=90.4),
    ...           ResourcesConfig(min_free_accelerator_gb=4.0, max_host_cpu_percent=90.0))  # apart, to the digit
    ['accelerator free 3.999 GB < 4.000 GB', 'host CPU 90.4% > 90.0%']
    """
    found = []
    need_gb = float(_setting(section, "min_free_accelerator_gb", 0.0))
    if need_gb > 0 and snapshot.accelerator_free_gb is not None and snapshot.accelerator_free_gb < need_gb:
        found.append("accelerator free {} GB < {} GB".format(*_apart(snapshot.accelerator_free_gb, need_gb, 2)))
    need_fraction = float(_setting(section, "min_free_accelerator_fraction", 0.0))
    fraction = snapshot.accelerator_free_fraction
    if need_fraction > 0 and fraction is not None and fraction < need_fraction:
        found.append("accelerator free {}% < {}%".format(*_apart(100 * fraction, 100 * need_fraction, 1)))
    need_host = float(_setting(section, "min_free_host_gb", 0.0))
    if need_host > 0 and snapshot.host_free_gb is not None and snapshot.host_free_gb < need_host:
        found.append("host free {} GB < {} GB".format(*_apart(snapshot.host_free_gb, need_host, 2)))
    max_cpu = float(_setting(section, "max_host_cpu_percent", 100.0))
    if max_cpu < 100 and snapshot.host_cpu_percent is not None and snapshot.host_cpu_percent > max_cpu:
        found.append("host CPU {}% > {}%".format(*_apart(snapshot.host_cpu_percent, max_cpu, 0)))
    return found


def _apart(value: float, limit: float, digits: int) -> tuple[str, str]:
    """``value`` and ``limit`` to ``digits`` decimals, or more until they read apart (90.4 against a 90% limit read
    "host CPU 90% > 90%", 3.999 GB against 4 "4.00 GB < 4.00 GB"; a probe)."""
    for d in range(digits, digits + 8):
        a, b = f"{value:.{d}f}", f"{limit:.{d}f}"
        if a != b:
            return a, b
    return repr(value), repr(limit)


class ResourceScheduler:
    """Defers due evaluations while resources are short; built from the ``resources`` config section.

    Call :meth:`decide` only at a step where an evaluation is due (it samples the monitor).  Keep calling
    it at the following steps while the evaluation stays pending: after ``max_deferral_steps`` steps of
    deferral it lets the evaluation run, saying ``resources:forced`` (the evaluator's reason is then
    ``resources:forced (<its own reason>)``).

    >>> from adaptive_eval.config import ResourcesConfig
    >>> cfg = ResourcesConfig(enabled=True, min_free_accelerator_gb=4.0, max_deferral_steps=2)
    >>> sched = ResourceScheduler(cfg, FakeResourceMonitor([{"accelerator_free_gb": 1.0}]))
    >>> [sched.decide(step, urgent=False) for step in (10, 11, 12)]
    [(False, 'resources:deferred (accelerator free 1.00 GB < 4.00 GB)'), (False, 'resources:deferred (accelerator free 1.00 GB < 4.00 GB)'), (True, 'resources:forced')]
    """

    def __init__(self, config_section=None, monitor=None):
        section = getattr(config_section, "resources", config_section)
        self.section = section
        self.enabled = bool(_setting(section, "enabled", False))
        self.max_deferral_steps = int(_setting(section, "max_deferral_steps", 50))
        self.alarm_bypass = bool(_setting(section, "alarm_bypass", True))
        if self.max_deferral_steps < 0:
            raise ValueError(f"resources.max_deferral_steps must be non-negative, got {self.max_deferral_steps}")
        self._monitor = monitor
        self._unread_said = False  # an accelerator threshold with no reading: said once
        self._impossible_said: set[str] = set()  # the fields of readings that cannot be (or unknown), said once each
        self._impossible_now: set[str] = set()  # the fields of the last reading that could not be
        self._slow_said = False  # a reading slower than SLOW_READING_S: said once
        self.says = True  # whether the deferrals it decides are said in the log (in a process group: rank 0 alone)
        self.where = ""  # in a process group "rank R: ", before what its monitor says (each rank reads its own)
        self._reset()

    def _reset(self) -> None:
        self.deferred_since: int | None = None  # first step of the current run of deferrals
        self.forced_pending = False  # forced, and not yet started
        self.deferrals = 0  # evaluations deferred in total
        self.forced = 0  # evaluations run because the deferral limit was reached
        self.last_snapshot: ResourceSnapshot | None = None
        self.read_errors = 0  # readings the monitor raised on (each one: nothing deferred)

    @property
    def monitor(self):
        if self._monitor is None:
            self._monitor = ResourceMonitor()
        return self._monitor

    def shortage(self) -> str | None:
        """Sample the monitor; what is short (``"a; b"``) or None.  A monitor that raises (an NVML or CUDA error)
        is a reading it cannot take, which never defers: logged once with its traceback, never raised into the
        training step (found by a new-user probe: it raised at every due step)."""
        started = time.monotonic()
        try:
            self.last_snapshot = self._read()
            found = shortages(self.last_snapshot, self.section)
        except Exception as exc:  # noqa: BLE001 - a resource reading never stops training
            self.last_snapshot = None
            self.read_errors += 1
            if self.read_errors == 1:
                log.warning("%sthe resource monitor (%s) raised %s: %s; no reading, so nothing is deferred while "
                            "it fails (said once; counted in ResourceScheduler.read_errors)", self.where,
                            type(self._monitor).__name__, type(exc).__name__, exc, exc_info=True)
            return None
        finally:
            took = time.monotonic() - started
            if took > SLOW_READING_S and not self._slow_said:
                # (it is read inside the training step at each due step: a 0.5 s monitor held 11 steps back unsaid,
                # and in a group one slower than distributed.timeout_s failed the collective, blaming evaluate_fn)
                self._slow_said = True
                log.warning("%sthe resource monitor (%s) took %.3g s to read: it is read inside the training step "
                            "at each step an evaluation is due (and, in a process group, must return within "
                            "distributed.timeout_s); make snapshot() cheaper (said once)", self.where,
                            type(self._monitor).__name__, took)
        if (not self._unread_said and self.last_snapshot.accelerator_free_gb is None
                and "accelerator_free_gb" not in self._impossible_now):  # (a NaN is said as such, not as unread)
            # (it never deferred, unsaid, on a machine without CUDA or NVML; found by a new-user probe)
            keys = [k for k in ("min_free_accelerator_gb", "min_free_accelerator_fraction")
                    if float(_setting(self.section, k, 0.0)) > 0]
            if keys:
                self._unread_said = True
                ours = isinstance(self._monitor, ResourceMonitor)
                log.warning("%sresources.%s is set, but the monitor reads no accelerator memory here (%s): it is "
                            "not checked (said once)", self.where, " and ".join(keys),
                            f"{self.last_snapshot.source or 'none'}: no CUDA device, no NVML" if ours else
                            f"{type(self._monitor).__name__}'s readings have no accelerator_free_gb")
        return "; ".join(found) if found else None

    def _read(self) -> ResourceSnapshot:
        """The monitor's reading as a :class:`ResourceSnapshot`: a mapping of its fields is one (as
        :class:`FakeResourceMonitor` takes them), and a plain function is called as ``snapshot`` is; anything else
        is a ``TypeError``, a reading not taken (a dict or None raised AttributeError into the training step; a
        function was never called: found by a new user)."""
        monitor = self.monitor
        reading = monitor() if callable(monitor) and not hasattr(monitor, "snapshot") else monitor.snapshot()
        extra: set[str] = set()
        snapshot, impossible = _possible(_as_snapshot(reading, extra))
        self._impossible_now = set(impossible)
        if extra - self._impossible_said:  # (a mapping with one more field raised TypeError: no check all run; a probe)
            self._impossible_said.update(extra)
            log.warning("%sthe resource monitor (%s) read %s, which ResourceSnapshot has no field for: left out "
                        "(its fields: %s; said once)", self.where, type(monitor).__name__, ", ".join(sorted(extra)),
                        ", ".join(_READINGS))
        for name, value in impossible.items():
            if name not in self._impossible_said:
                self._impossible_said.add(name)
                log.warning("%sthe resource monitor (%s) read %s = %r, which cannot be (a finite number >= 0): "
                            "that reading is not checked, never deferring (said once)", self.where,
                            type(monitor).__name__, name, value)
        return snapshot

    def bypasses(self, urgent: bool, reason: str = "") -> bool:
        """Whether an evaluation skips the resource check: with ``alarm_bypass``, an urgent one and one an
        alarm brought forward (its ``reason`` starts with ``alarm:``).

        >>> from adaptive_eval.config import ResourcesConfig
        >>> sched = ResourceScheduler(ResourcesConfig(enabled=True))
        >>> [sched.bypasses(False, "alarm:train/reward:cusum:down"), sched.bypasses(True, "trigger:final"),
        ...  sched.bypasses(False, "trigger:steps")]
        [True, True, False]
        """
        return self.alarm_bypass and (urgent or reason.startswith("alarm:"))

    def decide(self, step: int, urgent: bool = False, reason: str = "", final: bool = False) -> tuple[bool, str]:
        """Whether the evaluation due at ``step`` (for ``reason``) may run now, and why (``""``: nothing to say).

        Disabled, or bypassing (:meth:`bypasses`: urgent or alarm-driven, with ``alarm_bypass``): always
        allowed, without sampling the monitor.  ``final``: the run's last step, where a deferral would lose
        the evaluation (there is no later step to run it at): forced, as at ``max_deferral_steps``.
        """
        if not self.enabled:
            return True, ""
        if self.bypasses(urgent, reason):
            was_deferred = self.deferred_since is not None
            self.deferred_since = None
            return True, "resources:bypass" if was_deferred else ""
        return self.decide_with(step, self.shortage(), final)

    def decide_with(self, step: int, shortage: str | None, final: bool = False) -> tuple[bool, str]:
        """The deferral rule alone, for a shortage found elsewhere (pure given the state).

        In a process group, let each rank find its own shortage, combine them (any rank short: short)
        with one collective, and call this on every rank with the combined answer, so that all ranks
        keep the same deferral state.
        """
        if shortage is None:
            self.deferred_since = None
            self.forced_pending = False
            return True, ""
        if self.forced_pending:
            # (forced, but it could not start: a slot of max_in_flight, a timed-out evaluation still running; a
            # new deferral began at the next step and it ran 11 steps late, counted forced twice; a probe)
            return True, "resources:forced"
        if self.deferred_since is None:
            self.deferred_since = step
        if final or step - self.deferred_since >= self.max_deferral_steps:
            self.deferred_since = None
            self.forced += 1
            return True, "resources:forced"
        self.deferrals += 1
        if self.deferrals == 1 and self.says:  # (nothing reached the log: a NaN's evaluation ran 50 steps late, unsaid; a probe)
            log.warning("the evaluation due at step %d is deferred: %s; it runs once the machine has recovered, or "
                        "after resources.max_deferral_steps (%d) steps anyway; every deferral is in TensorBoard "
                        "(controller/deferred) and summary()['deferrals'] (said once)", step, shortage,
                        self.max_deferral_steps)
        return False, f"resources:deferred ({shortage})"

    def held(self) -> None:
        """Told that the evaluation it forced could not start (a full slot of ``evaluation.max_in_flight``, a
        timed-out evaluation still running): it stays forced, without a new deferral, until :meth:`ran`."""
        self.forced_pending = True

    def ran(self) -> None:
        """Told that the due evaluation has started: a forced one is done with."""
        self.forced_pending = False

    def state_dict(self) -> dict:
        out = {"version": 1, "deferred_since": self.deferred_since, "deferrals": self.deferrals, "forced": self.forced}
        return {**out, "forced_pending": True} if self.forced_pending else out

    def load_state_dict(self, state_dict: Mapping) -> None:
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"state_dict must be a mapping, got {type(state_dict).__name__}")
        since = state_dict.get("deferred_since")
        self.deferred_since = None if since is None else int(since)
        self.deferrals = int(state_dict.get("deferrals", 0))
        self.forced = int(state_dict.get("forced", 0))
        self.forced_pending = bool(state_dict.get("forced_pending", False))


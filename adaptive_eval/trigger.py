"""The base schedule: AReaL's epoch/step/time frequency controller, with its rough edges fixed.

Differences from ``areal.utils.timeutil.EpochStepTimeFreqCtl`` (each has a test):

* With one trigger configured the schedule is exactly AReaL's, ``initial_epoch_value`` included: the
  initial evaluation restarts only the epoch counter it belongs to, so ``freq_step=5`` with it fires at
  steps 0, 4, 9, ... (not 0, 5, 10).  A frequency of 0 fires at every step, as in AReaL.
* With several, they measure staleness since the last evaluation, whatever caused it: one evaluation
  restarts every counter.  (AReaL keeps independent counters that fire back to back: steps 2, 3, 5, 7, 8
  for ``freq_epoch=1, freq_step=3`` and 4 steps per epoch; ``independent=True`` counts like that.)  Epoch
  staleness counts the part of an epoch trained since the last evaluation, so an epoch end right after a
  step-triggered evaluation does not fire.
* The time trigger works without a process group (AReaL raises ``UnboundLocalError``), reads an injected
  monotonic ``clock``, and in a process group all ranks agree (the largest elapsed time wins).
* ``load_state_dict`` restores counters but keeps the frequencies of the current config (AReaL overwrites
  them), and also reads AReaL's saved format: the next evaluation is AReaL's next one (with several
  triggers; with ``independent=True`` every later one is AReaL's too).
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Callable, Mapping

__all__ = ["EpochStepTimeFreqCtl"]

_EPS = 1e-9


def _check_freq(name: str, value):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a non-negative number or None, got {value!r}")
    if not value >= 0 or value != value or value == float("inf"):
        raise ValueError(f"{name} must be non-negative (0: every step, as in AReaL; None disables it), got {value!r}")
    # (numpy's numbers, which AReaL's own Evaluator takes, as Python's: np.int64(3) was refused; a probe)
    return value if isinstance(value, (int, float)) else int(value) if isinstance(value, numbers.Integral) \
        else float(value)


class EpochStepTimeFreqCtl:
    """Fires every ``freq_epoch`` epochs, ``freq_step`` steps or ``freq_sec`` seconds since the last firing.

    ``check(epochs, steps)`` is called once per training step with the number of epochs completed at this
    step (0 or 1) and of steps taken (usually 1).  ``last_reason`` says which trigger fired.

    >>> ctl = EpochStepTimeFreqCtl(freq_epoch=1, freq_step=3)
    >>> [s for s in range(12) if ctl.check(epochs=int(s % 4 == 3), steps=1)]
    [2, 5, 8, 11]
    >>> ctl = EpochStepTimeFreqCtl(freq_step=3)
    >>> [s for s in range(10) if ctl.check(epochs=0, steps=1)]
    [2, 5, 8]
    """

    def __init__(
        self,
        freq_epoch: int | None = None,
        freq_step: int | None = None,
        freq_sec: float | None = None,
        initial_epoch_value: bool = False,
        group=None,
        *,
        clock: Callable[[], float] | None = None,
        sync_time: bool = True,
        independent: bool = False,
        steps_per_epoch: int | None = None,
    ):
        self.freq_epoch = _check_freq("freq_epoch", freq_epoch)
        self.freq_step = _check_freq("freq_step", freq_step)
        self.freq_sec = _check_freq("freq_sec", freq_sec)
        self.initial_epoch_value = bool(initial_epoch_value)
        self.group = group
        self.clock = clock if clock is not None else time.monotonic
        # When False the time trigger uses this process's clock only (the adaptive evaluator
        # decides on rank 0 and broadcasts, so it needs no collective here).
        self.sync_time = sync_time
        self.last_reason: str | None = None
        # Multiplies every frequency; adaptive policies tighten (< 1) or relax (> 1) the schedule with it.
        self._scale = 1.0
        # AReaL's counting: each trigger restarts only itself when it fires (the initial firing belongs to
        # the epoch counter).  With one trigger that is also what the joint counting does, except for the
        # initial firing, which is therefore always counted AReaL's way.
        self.independent = bool(independent)
        # Only used to place a resumed AReaL state within its epoch (AReaL's state counts steps and epochs).
        self.steps_per_epoch = steps_per_epoch
        # Only with several jointly counted triggers does an epoch count by the part trained since the last
        # evaluation, and does one evaluation restart every counter.
        several = sum(f is not None for f in (self.freq_epoch, self.freq_step, self.freq_sec)) > 1
        self._several = several and not self.independent
        self._steps_only = self.freq_step is not None and self.freq_epoch is None and self.freq_sec is None
        self._reset()

    # The frequencies are fixed at construction (load_state_dict keeps them); what the schedule's pace
    # depends on afterwards is the scale and whether the initial firing is pending, so both are properties
    # that keep advance()'s shortcut in step.
    @property
    def scale(self) -> float:
        """Multiplies every frequency (1.0: exactly the configured schedule)."""
        return self._scale

    @scale.setter
    def scale(self, value: float) -> None:
        self._scale = value
        self._set_quiet_below()

    @property
    def _initial_pending(self) -> bool:
        return self._initial

    @_initial_pending.setter
    def _initial_pending(self, value: bool) -> None:
        self._initial = value
        self._set_quiet_below()

    def _set_quiet_below(self) -> None:
        """advance()'s shortcut for a step trigger alone: while the step count is below ``_quiet_below``
        nothing is due.  That is ``since < freq_step * scale``, as due() tests it, turned into an integer
        comparison: for an integer ``since``, ``since < x`` exactly when ``since < ceil(x)`` (math.ceil of a
        float is exact), and an int-int comparison is several times cheaper than an int-float one.  Without
        the shortcut (other triggers, the initial firing pending, a bound that does not fit): -inf, so
        advance() always asks due().  ``AdaptiveEvaluator.evaluate`` takes the same shortcut itself (it
        reads ``_quiet_below`` and counts ``_steps_since``), so both stay as they are here."""
        limit = -math.inf
        if self._steps_only and not self._initial:
            try:
                limit = math.ceil(self.freq_step * self._scale)
            except (OverflowError, ValueError):  # an inf or NaN bound: due() decides (as before)
                pass
        self._quiet_below = limit

    def _reset(self) -> None:
        self._initial_pending = self.initial_epoch_value
        self._steps_since = 0  # steps since the last firing
        self._epochs_since = 0.0  # epochs since the last firing, the first one counted by its trained part
        self._steps_in_epoch = 0  # steps of the current epoch
        self._steps_in_epoch_since = 0  # of which after the last firing
        self._last_time = self.clock() if self.freq_sec is not None else 0.0


    def advance(self, epochs: int, steps: int) -> str | None:
        """Count ``steps`` (and ``epochs`` completed) and return the trigger that is due, without firing.

        A due trigger stays due until :meth:`fired` is called, so a caller may postpone the evaluation.
        Frequencies are multiplied by :attr:`scale` (1.0: exactly the configured schedule).  ``steps`` is a
        whole number (AReaL's count of steps taken), which the step trigger's shortcut relies on.
        """
        since = self._steps_since = self._steps_since + steps
        if since < self._quiet_below:  # a step trigger alone, not due (see _set_quiet_below): nearly every step
            return None  # (AdaptiveEvaluator.evaluate inlines these three lines for steps=1)
        if self.freq_epoch is not None:
            self._steps_in_epoch += steps
            self._steps_in_epoch_since += steps
            if epochs:
                if self._several and self._steps_in_epoch > 0:
                    part = self._steps_in_epoch_since / self._steps_in_epoch
                else:
                    part = 1.0
                self._epochs_since += part + (epochs - 1)
                self._steps_in_epoch = 0
                self._steps_in_epoch_since = 0
        return self.due()

    def due(self) -> str | None:
        """The trigger that is due now (``trigger:initial|epochs|steps|time``), or None."""
        scale = self._scale
        if self._initial:
            return "trigger:initial"
        if self.freq_epoch is not None and self._epochs_since >= self.freq_epoch * scale - _EPS:
            return "trigger:epochs"
        if self.freq_step is not None and self._steps_since >= self.freq_step * scale:
            return "trigger:steps"
        if self.freq_sec is not None and self._elapsed() >= self.freq_sec * scale:
            return "trigger:time"
        return None

    def poll(self, epochs: int, steps: int) -> str | None:
        """Like :meth:`check`, returning the reason (``trigger:epochs|steps|time|initial``) or None."""
        reason = self.advance(epochs, steps)
        if reason is not None:
            self.fired()
        self.last_reason = reason
        return reason

    def check(self, epochs: int, steps: int) -> bool:
        """AReaL's API: True when an evaluation is due at this step."""
        return self.poll(epochs, steps) is not None

    def fired(self, now: float | None = None) -> None:
        """Restart the staleness counters: an evaluation happened now (whatever caused it).

        Jointly counted triggers all restart.  Counted AReaL's way (one trigger, or ``independent``), a
        scheduled firing restarts only the triggers that are due (the initial one restarts the epoch
        counter), and an unscheduled one (an alarm, the last step) restarts all of them.  ``now``: the clock's
        reading when the evaluation was decided (the time trigger's interval counts from there, the evaluation's
        own time in it, as AReaL's does); None: the clock's reading now.
        """
        if self.freq_sec is not None and now is None:
            now = self.clock()
        initial = self._initial
        self._initial_pending = False
        if not self._several:
            scale = self._scale
            epoch_due = self.freq_epoch is not None and self._epochs_since >= self.freq_epoch * scale - _EPS
            step_due = self.freq_step is not None and self._steps_since >= self.freq_step * scale
            time_due = self.freq_sec is not None and now - self._last_time >= self.freq_sec * scale
            if initial or epoch_due or step_due or time_due:
                if initial or epoch_due:
                    self._epochs_since = 0.0
                    self._steps_in_epoch_since = 0
                if step_due:
                    self._steps_since = 0
                if time_due:
                    self._last_time = now
                return
        self._steps_since = 0
        self._epochs_since = 0.0
        self._steps_in_epoch_since = 0
        if self.freq_sec is not None:
            self._last_time = now

    def _elapsed(self) -> float:
        elapsed = self.clock() - self._last_time
        if self.sync_time:
            elapsed = _max_over_ranks(elapsed, self.group)
        return elapsed

    # Staleness, for policies that scale the schedule.
    @property
    def steps_since(self) -> int:
        return self._steps_since

    @property
    def epochs_since(self) -> float:
        return self._epochs_since

    def seconds_since(self) -> float:
        return self.clock() - self._last_time if self.freq_sec is not None else 0.0

    def state_dict(self) -> dict:
        return {
            "version": 1,
            "freq_epoch": self.freq_epoch,
            "freq_step": self.freq_step,
            "freq_sec": self.freq_sec,
            "initial_pending": self._initial_pending,
            "steps_since": self._steps_since,
            "epochs_since": self._epochs_since,
            "steps_in_epoch": self._steps_in_epoch,
            "steps_in_epoch_since": self._steps_in_epoch_since,
            "seconds_since": self.seconds_since(),
        }

    def load_state_dict(self, state_dict: Mapping) -> None:
        """Restore counters; the frequencies stay those of this object's (current) config.

        Also reads AReaL's format (``{"epoch": ..., "step": ..., "time": ...}``, each a ``FrequencyControl``
        state with ``frequence_seconds``, ``steps``, ``last_steps``, ``last_time`` (a wall-clock timestamp),
        ``initial_value``) and continues AReaL's schedule; time spent while stopped counts, as in AReaL.
        """
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"state_dict must be a mapping, got {type(state_dict).__name__}")
        if "step" in state_dict and "initial_pending" not in state_dict:  # AReaL's (ours has no "step")
            check_areal_state(state_dict)  # (before any counter changes: a refused state leaves it as it was)
            self._load_areal(state_dict)
            return
        try:
            self._initial_pending = bool(state_dict["initial_pending"])
            steps_since = _number(state_dict, "steps_since", int)
            epochs_since = _number(state_dict, "epochs_since", float)
            steps_in_epoch = _number(state_dict, "steps_in_epoch", int, 0)
            steps_in_epoch_since = _number(state_dict, "steps_in_epoch_since", int, 0)
            seconds_since = _number(state_dict, "seconds_since", float, 0.0)
        except KeyError as exc:
            raise ValueError(f"trigger state_dict: missing key {exc.args[0]!r}") from None
        self._steps_since, self._epochs_since = steps_since, epochs_since
        self._steps_in_epoch, self._steps_in_epoch_since = steps_in_epoch, steps_in_epoch_since
        self._last_time = self.clock() - seconds_since if self.freq_sec is not None else 0.0

    def _load_areal(self, sd: Mapping) -> None:
        def counter(part: str) -> tuple[int, bool]:  # (each part checked already: check_areal_state)
            ctl = sd.get(part) or {}
            return (_number(ctl, "steps", int, 0, part) - _number(ctl, "last_steps", int, 0, part),
                    bool(ctl.get("initial_value", False)))

        epochs_since, initial = counter("epoch")
        self._steps_since, _ = counter("step")
        self._epochs_since = float(epochs_since)
        self._initial_pending = initial
        # AReaL counts whole epochs: the epoch being trained counts in full at its end, as if it were all
        # trained since the last evaluation (so the next epoch firing is AReaL's next one).
        position = 0
        spe = self.steps_per_epoch
        if spe and "steps" in (sd.get("step") or {}) and "steps" in (sd.get("epoch") or {}):
            position = _number(sd["step"], "steps", int, 0, "step") - _number(sd["epoch"], "steps", int, 0,
                                                                            "epoch") * int(spe)
            position = position if 0 <= position < spe else 0
        self._steps_in_epoch = position
        self._steps_in_epoch_since = position
        time_ctl = sd.get("time") or {}
        if self.freq_sec is not None:
            last_wall = _number(time_ctl, "last_time", float, None, "time")
            seconds_since = max(0.0, time.time() - last_wall) if last_wall is not None else 0.0
            self._last_time = self.clock() - seconds_since

    def __repr__(self) -> str:
        return (f"EpochStepTimeFreqCtl(freq_epoch={self.freq_epoch}, freq_step={self.freq_step}, "
                f"freq_sec={self.freq_sec})")


_AREAL_FIELDS = (("epoch", "steps", int), ("epoch", "last_steps", int), ("step", "steps", int),
                 ("step", "last_steps", int), ("time", "last_time", float))


def check_areal_state(sd: Mapping) -> None:
    """``ValueError`` naming the first field of AReaL's saved evaluator state (``evaluator_info.json``: ``epoch``,
    ``step``, ``time``, each a ``FrequencyControl`` state) that is not what AReaL writes: a part that is not a
    mapping (``"step": "abc"`` was "missing key 'initial_pending'", naming a key the file never had; a review), a
    counter that is not a number."""
    for part in ("epoch", "step", "time"):
        if sd.get(part) is not None and not isinstance(sd[part], Mapping):
            raise ValueError(f"trigger state_dict (AReaL's): {part!r}: expected a mapping (a FrequencyControl's "
                             f"state), got {sd[part]!r}")
    for part, key, kind in _AREAL_FIELDS:
        _number(sd.get(part) or {}, key, kind, None, part)


def _number(sd: Mapping, key: str, kind, default=KeyError, part: str | None = None, label: str | None = None):
    """``sd[key]`` as ``kind`` (``default`` when missing or None, a ``KeyError`` without one), or a ``ValueError``
    naming the key: a damaged evaluator_info.json said "invalid literal for int() with base 10: 'abc'", naming
    nothing (a probe)."""
    value = sd.get(key) if default is not KeyError else sd[key]
    if value is None and default is not KeyError:
        return default
    try:
        if isinstance(value, bool) or not isinstance(value, (numbers.Real, str)):
            raise TypeError
        out = kind(value)
        if not math.isfinite(out):
            raise ValueError
        return out
    except (TypeError, ValueError, OverflowError):
        where = f"{part}.{key}" if part else key
        label = label or ("trigger state_dict (AReaL's)" if part else "trigger state_dict")
        raise ValueError(f"{label}: {where!r}: expected a number, got {value!r}") from None


def _max_over_ranks(value: float, group) -> float:
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return value
    import torch

    from adaptive_eval.distributed import _hold, _use_counts

    device = "cuda" if dist.get_backend(group) == "nccl" else "cpu"
    t = torch.tensor([value], dtype=torch.float64, device=device)
    before = _use_counts([t])
    try:
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    finally:
        _hold([t], before)  # until the backend lets go of it (a gloo process group alive at exit)
    return float(t.item())

"""Look back: after an alarm's evaluation shows the metric fell, evaluate the last kept checkpoint from before
the alarm, so that the best checkpoint is not judged by an evaluation made long before the fall."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

from adaptive_eval.types import EvalResult

from adaptive_eval.policies._base import Context, Policy, primary_metric

__all__ = ["LookbackPolicy"]


def plain_ref(ref):
    """A checkpoint's ref as the plain value ``state_dict`` keeps (a path as its string); ``TypeError`` otherwise."""
    if isinstance(ref, os.PathLike):
        ref = os.fspath(ref)
    if ref is not None and (isinstance(ref, bool) or not isinstance(ref, (str, int, float))):
        raise TypeError(f"checkpoint ref must be a str, a path, a number or None (kept in state_dict as a plain "
                        f"value), got {type(ref).__name__}")
    return ref


class LookbackPolicy(Policy):
    """Which kept checkpoint to evaluate after a fall, if any.

    The trainer says which checkpoints it keeps (:meth:`AdaptiveEvaluator.checkpoint_saved
    <adaptive_eval.AdaptiveEvaluator.checkpoint_saved>`; without that this policy does nothing).  When an
    evaluation an alarm brought forward shows the tracked metric *fell* (its interval lies wholly on the worse
    side of the previous evaluation's mean, or it is not finite: a NaN run), the last kept checkpoint saved
    after the previous evaluation and at least ``lag_steps`` before the first alarm since it is evaluated at
    once (reason ``lookback:<the alarm's reason>``), on as many items as the previous evaluation asked for (or
    ``sample_size``).  Why: a quiet run is evaluated rarely, so when it collapses or dies the last look at it
    may be 100 steps old, and the best checkpoint, the one just before the fall, was never measured.

    The checkpoint's result is the model of its own step: ``EvalResult.step`` is that step and
    ``evaluated_at`` the step it was evaluated at.  It goes to the history, the logs and the pick
    (:func:`adaptive_eval.scoring.pick_best`), not to the other policies (its step is in the past), and
    :func:`adaptive_eval.scoring.confirmed_delay` does not count it as a confirmation.  ``keep``: how many of
    the latest checkpoints are remembered.

    >>> from adaptive_eval.types import EvalResult, MetricSummary
    >>> p = LookbackPolicy(lag_steps=5, keep=4)
    >>> ctx = lambda s: Context(step=s, elapsed=0.0, eval_seconds=0.0)
    >>> r = lambda s, m, why: EvalResult(step=s, sample_size=300, reason=why, seconds=0.0,
    ...                                  metrics={"acc": MetricSummary(m, 300, (m - 0.05, m + 0.05))})
    >>> p.on_eval(r(100, 0.60, "interval:relaxed"), ctx(100))
    >>> for s in (150, 200, 250): p.saved(s, f"ckpt-{s}")
    >>> p.on_alarm(None, ctx(252)); p.on_eval(r(253, 0.05, "alarm:reward:cusum:down"), ctx(253))
    >>> p.take()      # 250 is within lag_steps of the alarm at 252: it may hold the fallen model
    (200, 'ckpt-200', 300, 'alarm:reward:cusum:down')
    >>> p.take() is None
    True
    """

    name = "lookback"

    def __init__(self, lag_steps: int = 5, keep: int = 8, sample_size: int | None = None, metric: str | None = None,
                 higher_is_better: bool = True):
        if isinstance(lag_steps, bool) or not isinstance(lag_steps, int) or lag_steps < 0:
            raise ValueError(f"lag_steps must be an integer >= 0, got {lag_steps!r}")
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep must be an integer >= 1, got {keep!r}")
        if sample_size is not None and (isinstance(sample_size, bool) or not isinstance(sample_size, int)
                                        or sample_size < 1):
            raise ValueError(f"sample_size must be a positive integer or None, got {sample_size!r}")
        self.lag_steps = lag_steps
        self.keep = keep
        self.sample_size = sample_size
        self.metric = metric
        self.higher_is_better = bool(higher_is_better)
        self._reset()

    def _reset(self) -> None:
        self._kept: list[list] = []  # [[step, ref], ...], oldest first
        # [step, mean, sample size asked (None: the whole set)] of the latest evaluation with a finite mean
        self._last: list | None = None
        self._alarm_step: int | None = None  # the first alarm since the latest evaluation
        self._pending: list | None = None  # [step, ref, items, reason]
        # What the trainer told: the count of checkpoint_saved calls and a rolling hash of their steps in order
        # (an integer below 2**52, exact as a float64).  In a process group every rank's must agree, or a rank
        # would evaluate a checkpoint the others do not.
        self.told = [0, 0]
        self.off: str | None = None  # why it was turned off for the rest of the run (a group that disagreed)
        self._taken: tuple | None = None  # the last checkpoint take() gave and the floor of its fall (see gone())
        self._floor: int | None = None  # the step of the evaluation before the fall that set _pending

    def saved(self, step: int, ref=None) -> None:
        """A checkpoint of the model at ``step`` is kept; ``ref`` (a path, a name, a number or None) is handed
        back in ``EvalRequest.checkpoint`` when it is evaluated."""
        if isinstance(step, bool) or not isinstance(step, int):
            raise TypeError(f"step must be an integer, got {step!r}")
        ref = plain_ref(ref)
        self.told = [self.told[0] + 1, (self.told[1] * 1_000_003 + int(step) + 1) % (1 << 52)]
        # (a ref given again for another step, one last.pt written over: the earlier step's weights are gone, and
        # a look back at it evaluated the later ones as its; found by a new user)
        self._kept = [k for k in self._kept if k[0] != step and (ref is None or k[1] != ref)] + [[int(step), ref]]
        self._kept.sort(key=lambda k: k[0])
        del self._kept[:-self.keep]

    def relocate(self, where) -> None:
        """Replace each remembered checkpoint's ref by ``where(ref)`` (the run's folder moved before a resume)."""
        self._kept = [[s, where(r)] for s, r in self._kept]

    @property
    def kept(self) -> list[tuple[int, object]]:
        """The remembered checkpoints, ``(step, ref)``, oldest first."""
        return [(s, r) for s, r in self._kept]

    def on_alarm(self, alarm, ctx: Context) -> None:
        if self._alarm_step is None:
            self._alarm_step = int(ctx.step)

    on_held_alarm = on_alarm

    def on_eval(self, result: EvalResult, ctx: Context) -> None:
        alarm_step, self._alarm_step = self._alarm_step, None
        found = primary_metric(result, self.metric)
        if found is None or self.off is not None:
            return
        summary = found[1]
        last = self._last
        if math.isfinite(summary.mean):
            # (the size it asked for, not the metric's n: a scalar metric has n = 1, NaN-skipped items shrink it)
            self._last = [int(result.step), float(summary.mean), result.sample_size]
        if last is None or "alarm:" not in result.reason or not self._kept:
            return
        low, high = summary.ci
        if not (math.isfinite(low) and math.isfinite(high)):
            low = high = summary.mean  # (one value without an interval, an aggregate: read as it is; with its NaN
            #                            interval no fall was ever seen, and no look back ran; a new user's probe)
        if math.isfinite(summary.mean):
            fell = high < last[1] if self.higher_is_better else low > last[1]
        else:
            fell = True
        if not fell:
            return
        latest = min(int(result.step), alarm_step if alarm_step is not None else int(result.step)) - self.lag_steps
        options = [k for k in self._kept if last[0] < k[0] <= latest]
        if options:
            step, ref = options[-1]
            self._pending = [step, ref, self.sample_size if self.sample_size is not None else last[2], result.reason]
            self._floor = last[0]  # (the evaluation before the fall: gone() looks back no further)

    def peek(self) -> tuple[int, object, int | None, str] | None:
        """The checkpoint to evaluate, ``(step, ref, items, the reason of the evaluation that showed the fall)``
        (items None: the whole set), without taking it; None when there is none."""
        return None if self._pending is None else tuple(self._pending)

    def take(self) -> tuple[int, object, int | None, str] | None:
        """:meth:`peek`, once: a later fall looks only at checkpoints after this one."""
        pending, self._pending = self._pending, None
        if pending is None:
            return None
        self._taken = (pending, self._floor)
        if self._last is not None:
            self._last[0] = max(self._last[0], pending[0])
        return tuple(pending)

    def gone(self) -> tuple[int, object, int | None, str] | None:
        """The checkpoint :meth:`take` gave was not there any more (``CheckpointUnavailable``: the trainer's
        ``save_total_limit`` deleted it): it is forgotten, and the next older one the same fall allows is returned
        (taken), if any (a new user's probe: checkpoint-95 gone, checkpoint-90 on disk and never tried).  None once
        there is none.

        >>> p = LookbackPolicy(lag_steps=0)
        >>> ctx = lambda s: Context(step=s, elapsed=0.0, eval_seconds=0.0)
        >>> from adaptive_eval.types import MetricSummary
        >>> r = lambda s, m, why: EvalResult(step=s, sample_size=300, reason=why, seconds=0.0,
        ...                                  metrics={"acc": MetricSummary(m, 300, (m - 0.05, m + 0.05))})
        >>> p.on_eval(r(100, 0.6, "interval:relaxed"), ctx(100))
        >>> for s in (90, 120, 140): p.saved(s, f"ckpt-{s}")
        >>> p.on_eval(r(150, 0.05, "alarm:reward:cusum:down"), ctx(150))
        >>> p.take()[:2], p.gone()[:2], p.gone(), p.kept
        ((140, 'ckpt-140'), (120, 'ckpt-120'), None, [(90, 'ckpt-90')])
        """
        taken, self._taken = self._taken, None
        if taken is None:
            return None
        (step, ref, items, reason), floor = taken
        self._kept = [k for k in self._kept if k[0] != step]
        older = [k for k in self._kept if floor is not None and floor < k[0] < step]
        if not older:
            return None
        self._pending, self._floor = [older[-1][0], older[-1][1], items, reason], floor
        return self.take()

    def state_dict(self) -> dict:
        return {"kept": [list(k) for k in self._kept], "last": None if self._last is None else list(self._last),
                "alarm_step": self._alarm_step, "pending": None if self._pending is None else list(self._pending),
                "told": list(self.told), "off": self.off,
                # (what gone() needs: a state saved inside a look back resumed into one that tried no older one)
                "floor": self._floor,
                "taken": None if self._taken is None else [list(self._taken[0]), self._taken[1]]}

    def load_state_dict(self, sd: Mapping) -> None:
        self._reset()
        # (each entry read as it is used: a damaged one loaded, then raised in evaluate(); found by fuzzing)
        def step(v):
            return None if v is None else int(v)

        self._kept = [[int(s), r] for s, r in sd.get("kept", [])]
        last, pending = sd.get("last"), sd.get("pending")
        self._last = None if last is None else [int(last[0]), float(last[1]), step(last[2])]
        self._alarm_step = step(sd.get("alarm_step"))
        self._pending = None if pending is None else [int(pending[0]), pending[1], step(pending[2]), str(pending[3])]
        calls, digest = sd.get("told", [0, 0])
        self.told = [int(calls), int(digest)]
        self.off = sd.get("off")
        self._floor = step(sd.get("floor"))
        taken = sd.get("taken")
        if taken is not None:
            (s, ref, items, reason), floor = taken
            self._taken = ([int(s), ref, step(items), str(reason)], step(floor))

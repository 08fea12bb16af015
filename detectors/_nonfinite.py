"""``nonfinite``: NaN or inf is an immediate alarm."""

from __future__ import annotations

from adaptive_eval.detectors._base import Alarm, Detector

__all__ = ["NonFinite"]


class NonFinite(Detector):
    """Alarm at once when the stream produces NaN or +-inf.

    A run of non-finite values raises one alarm, at its first value; the next finite value re-arms the
    detector (``repeat=True`` alarms on every non-finite value instead).  The alarm has no direction and its
    location is the step itself.  There is no threshold and nothing to calibrate.

    Parameters
    ----------
    repeat
        Alarm on every non-finite value, not only on the first of a run.
    stream
        Name of the watched stream (shown in alarms and errors).

    Examples
    --------
    >>> import random
    >>> rng = random.Random(42)
    >>> det = NonFinite(stream="train/loss")
    >>> values = [rng.gauss(3.0, 0.1) for _ in range(20)] + [float("nan"), float("nan"), 3.1, float("inf")]
    >>> for step, x in enumerate(values):
    ...     alarm = det.update(x, step)
    ...     if alarm:
    ...         print(alarm.step, alarm.message)
    20 train/loss is nan at step 20
    23 train/loss is inf at step 23
    """

    name = "nonfinite"
    sees_level = False
    _state = ("_in_run",)

    def __init__(self, repeat: bool = False, stream: str = ""):
        if not isinstance(repeat, bool):
            raise ValueError(f"nonfinite: repeat must be true or false, got {repeat!r}")
        self.repeat = repeat
        self.stream = stream
        self._reset()

    def _reset(self) -> None:
        self._in_run = False

    def update(self, value: float, step: int) -> Alarm | None:
        if type(value) is not float:
            value = self._float(value)
        if value - value == 0.0:  # finite; NaN - NaN and inf - inf are NaN
            if self._in_run:
                self._in_run = False
            return None
        if self._in_run and not self.repeat:
            return None
        self._in_run = True
        return Alarm(step, self.name, self.stream, None, step, f"{self.stream or 'stream'} is {value} at step {step}")

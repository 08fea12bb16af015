"""Online change-point and anomaly detectors over metric streams (installed as ``adaptive_eval.detectors``)."""

if __name__ != "adaptive_eval.detectors":
    raise ImportError(
        f"this package is adaptive_eval.detectors; import it under that name, not as {__name__!r}"
    )

from adaptive_eval.detectors._base import Alarm, Detector
from adaptive_eval.detectors._bocpd import BOCPD
from adaptive_eval.detectors._cusum import CUSUM
from adaptive_eval.detectors._nonfinite import NonFinite
from adaptive_eval.detectors._registry import available, make_detector, parameters
from adaptive_eval.detectors._river import ADWIN, KSWIN, PageHinkley
from adaptive_eval.detectors._spike import Spike
from adaptive_eval.detectors._stuck import Stuck
from adaptive_eval.detectors._window import WindowTest

__all__ = [
    "ADWIN",
    "Alarm",
    "BOCPD",
    "CUSUM",
    "Detector",
    "KSWIN",
    "NonFinite",
    "PageHinkley",
    "Spike",
    "Stuck",
    "WindowTest",
    "available",
    "make_detector",
    "parameters",
]

"""Online change-point and anomaly detectors over metric streams (installed as ``adaptive_eval.detectors``)."""

if __name__ != "adaptive_eval.detectors":
    raise ImportError(
        f"this package is adaptive_eval.detectors; import it under that name, not as {__name__!r}"
    )

"""Adaptation policies: when to evaluate and with how many samples (installed as ``adaptive_eval.policies``)."""

if __name__ != "adaptive_eval.policies":
    raise ImportError(
        f"this package is adaptive_eval.policies; import it under that name, not as {__name__!r}"
    )

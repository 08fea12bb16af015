"""The registry of detectors: ``available()`` and ``make_detector(spec)``."""

from __future__ import annotations

import inspect
from collections.abc import Mapping

from adaptive_eval.detectors._base import Detector
from adaptive_eval.detectors._bocpd import BOCPD
from adaptive_eval.detectors._cusum import CUSUM
from adaptive_eval.detectors._nonfinite import NonFinite
from adaptive_eval.detectors._river import ADWIN, KSWIN, PageHinkley
from adaptive_eval.detectors._spike import Spike
from adaptive_eval.detectors._stuck import Stuck
from adaptive_eval.detectors._window import WindowTest

__all__ = ["available", "make_detector"]

# An explicit table: what is registered does not depend on what happens to have been imported.
_REGISTRY: dict[str, type[Detector]] = {
    "cusum": CUSUM,
    "page_hinkley": PageHinkley,
    "adwin": ADWIN,
    "kswin": KSWIN,
    "bocpd": BOCPD,
    "spike": Spike,
    "nonfinite": NonFinite,
    "stuck": Stuck,
    "window_test": WindowTest,
}


def available() -> list[str]:
    """Registry names of all detectors.

    >>> available()
    ['cusum', 'page_hinkley', 'adwin', 'kswin', 'bocpd', 'spike', 'nonfinite', 'stuck', 'window_test']
    """
    return list(_REGISTRY)


def parameters(name: str) -> list[str]:
    """The parameters a spec of detector ``name`` may set (besides ``type``)."""
    cls = _lookup(name)
    return [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "stream")]


def warmup_of(specs) -> int:
    """The longest warm-up of the detectors ``specs`` describe (a spec's ``warmup``, else its type's default; 0 for a
    detector without one, or none): the values a stream takes before they can alarm."""
    most = 0
    for spec in specs or ():
        try:
            given = spec.get("warmup")
            if given is None:
                given = inspect.signature(_lookup(spec.get("type")).__init__).parameters["warmup"].default
            most = max(most, int(given))
        except (AttributeError, KeyError, TypeError, ValueError):
            continue
    return most


def _lookup(name) -> type[Detector]:
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown detector type {name!r}; available: {', '.join(available())}") from None


def _plain_spec(spec) -> dict:
    try:
        from omegaconf import DictConfig, OmegaConf
    except ImportError:  # pragma: no cover - omegaconf is a dependency
        DictConfig = ()
    if DictConfig and isinstance(spec, DictConfig):
        spec = OmegaConf.to_container(spec, resolve=True)
    if not isinstance(spec, Mapping):
        raise TypeError(f"a detector spec must be a mapping with 'type' and parameters, got {type(spec).__name__}")
    return dict(spec)


def make_detector(spec, stream: str = "") -> Detector:
    """Build a detector from a spec: a mapping (or OmegaConf node) with ``type`` and parameters.

    An unknown type, or a parameter the type does not have, is a ``ValueError`` that names it and lists
    what exists.

    >>> det = make_detector({"type": "cusum", "arl0": 2000}, stream="train/reward")
    >>> det.name, det.stream, det.arl0
    ('cusum', 'train/reward', 2000)
    >>> make_detector({"type": "cusum", "arl": 2000})
    Traceback (most recent call last):
    ...
    ValueError: detector 'cusum': unknown parameter 'arl'; valid parameters: k, threshold, arl0, warmup, ...
    """
    params = _plain_spec(spec)
    if "type" not in params:
        raise ValueError(f"a detector spec needs a 'type' (one of {', '.join(available())}); got keys {sorted(params)}")
    name = params.pop("type")
    cls = _lookup(name)
    valid = parameters(name)
    unknown = [k for k in params if k not in valid]
    if unknown:
        which = ", ".join(repr(k) for k in unknown)
        raise ValueError(f"detector {name!r}: unknown parameter{'s' if len(unknown) > 1 else ''} {which}; "
                         f"valid parameters: {', '.join(valid)}")
    return cls(**params, stream=str(stream))

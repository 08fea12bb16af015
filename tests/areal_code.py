"""AReaL's own ``Evaluator`` and ``EpochStepTimeFreqCtl``, loaded from the installed ``areal`` package files.

The ``areal`` wheel is installed without its dependencies (the test command does that), so its package
``__init__`` (which pulls in httpx, uvloop, hydra, an inference stack) cannot run here.  The leaf modules
``areal/utils/timeutil.py`` and ``areal/utils/evaluator.py`` are executed from the installed files as they
are; the names they import are provided like this:

* ``FinetuneSpec`` and ``EvaluatorConfig`` (with its base ``_Timer``): AReaL's own class definitions, taken
  from the installed ``areal/api/io_struct.py`` and ``areal/api/cli_args.py`` with ``ast`` and executed on
  their own (the rest of those modules needs the missing dependencies);
* ``areal.infra.platforms.current_platform``: a CPU platform (only the time trigger reads its device type).

Nothing is copied into this repository; a changed AReaL release is what these tests run.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import sys
import types
from pathlib import Path


def _root() -> Path | None:
    spec = importlib.util.find_spec("areal")  # does not run areal/__init__.py
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent


def _classes(path: Path, names: list[str], namespace: dict) -> dict:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name in names]
    found = {n.name for n in nodes}
    if found != set(names):
        raise ImportError(f"{path}: classes {sorted(set(names) - found)} not found")
    nodes.sort(key=lambda n: names.index(n.name))
    module = types.ModuleType(namespace["__name__"])  # dataclasses looks the module up by name
    module.__dict__.update(namespace)
    sys.modules[module.__name__] = module
    try:
        exec(compile(ast.Module(body=nodes, type_ignores=[]), str(path), "exec"), module.__dict__)  # noqa: S102
    finally:
        del sys.modules[module.__name__]
    return {n: module.__dict__[n] for n in names}


def load():
    """``SimpleNamespace(Evaluator, EpochStepTimeFreqCtl, FrequencyControl, FinetuneSpec, EvaluatorConfig,
    version)``, or None when the ``areal`` package is not installed."""
    root = _root()
    if root is None:
        return None
    from omegaconf import MISSING

    ns = {"dataclass": dataclasses.dataclass, "field": dataclasses.field, "MISSING": MISSING,
          "__name__": "_areal_api_cli_args"}
    cli = _classes(root / "api" / "cli_args.py", ["_Timer", "EvaluatorConfig"], ns)
    io = _classes(root / "api" / "io_struct.py", ["FinetuneSpec"],
                  {"dataclass": dataclasses.dataclass, "__name__": "_areal_api_io_struct"})

    def package(name, path=None, **attrs):
        mod = types.ModuleType(name)
        mod.__path__ = [str(path)] if path else []
        mod.__dict__.update(attrs)
        return mod

    stubs = {
        "areal": package("areal", root),
        "areal.api": package("areal.api", root / "api", FinetuneSpec=io["FinetuneSpec"]),
        "areal.api.cli_args": package("areal.api.cli_args", None, EvaluatorConfig=cli["EvaluatorConfig"]),
        "areal.infra": package("areal.infra", root / "infra"),
        "areal.infra.platforms": package("areal.infra.platforms", None,
                                         current_platform=types.SimpleNamespace(device_type="cpu")),
        "areal.utils": package("areal.utils", root / "utils"),
    }
    saved = {k: sys.modules.get(k) for k in [*stubs, "areal.utils.timeutil", "areal.utils.evaluator"]}
    try:
        sys.modules.update(stubs)
        loaded = {}
        for leaf in ("timeutil", "evaluator"):
            name = f"areal.utils.{leaf}"
            spec = importlib.util.spec_from_file_location(name, root / "utils" / f"{leaf}.py")
            mod = importlib.util.module_from_spec(spec)
            sys.modules[name] = mod
            setattr(stubs["areal.utils"], leaf, mod)
            spec.loader.exec_module(mod)
            loaded[leaf] = mod
    finally:  # leave no fake 'areal' behind for other tests
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    from importlib.metadata import version as _version

    version = _version("areal")
    return types.SimpleNamespace(Evaluator=loaded["evaluator"].Evaluator,
                                 EpochStepTimeFreqCtl=loaded["timeutil"].EpochStepTimeFreqCtl,
                                 FrequencyControl=loaded["timeutil"].FrequencyControl,
                                 FinetuneSpec=io["FinetuneSpec"], EvaluatorConfig=cli["EvaluatorConfig"],
                                 version=version)

"""pytest plugin: replay recorded traces once per test session and run one test over a folder of them.

Opt in with one of::

    pytest -p adaptive_eval.testing.plugin
    pytest_plugins = ["adaptive_eval.testing.plugin"]      # in your top-level conftest.py
    [tool.pytest.ini_options]  adaptive_eval_plugin = true  # pyproject.toml / pytest.ini

(Not ``pytest_plugins`` in a test module: pytest loads it after the module's decorators ran, so the
``replay_traces`` marker is unknown there, a warning, and a collection error under ``--strict-markers``.)

Then::

    @pytest.mark.replay_traces("recorded/", config="configs/mine.yaml")   # one test per trace file there
    def test_mine_catches_what_it_caught(replay_run):
        for event in replay_run.events:                                 # from recorded/<trace>.events.yaml
            assert_confirmed(replay_run, event)

* ``replay_traces(source, *, config=None, seed=0, eval=None, stream=None, step_column=None,
  keep_last_run=False)`` (marker): ``source`` is a folder (each trace file in it, sidecar events files left
  out), a trace file, a shipped real trace name, or a list of these; relative paths are taken from the test
  file's folder.  ``config``: a YAML path (likewise), a preset name or a loaded config; default: the ini option
  ``adaptive_eval_config``, else the default preset.  ``eval``, ``stream``, ``step_column`` and
  ``keep_last_run`` read a trace file as the command line's ``--eval COL[:scale]``, ``--stream COL``,
  ``--step-column COL`` and ``--keep-last-run`` do (a string or a list of them; ``TRACE=COL`` for one trace):
  another tool's log (``eval="eval_acc:0.01"`` for an accuracy in percent) or a resumed run's.
* ``replay_run`` (fixture): the :class:`~adaptive_eval.testing.ReplayRun` of the test's trace, from
  ``replay_cache``: each (trace, config, seed) is replayed once per session, however many tests use it.
* ``recorded_trace`` (fixture): the trace the test runs on (a path, or a shipped trace's name); set by the
  marker, or parametrize it yourself.
* ``replay_cache`` (session fixture): ``replay_cache.get(trace, config=None, seed=0)`` for tests that replay
  several traces or configs themselves.
"""

from __future__ import annotations

import numbers
import os
import pathlib
from collections.abc import Mapping

import pytest

from adaptive_eval.config import ConfigError, _preset_named
from adaptive_eval.testing import ExpectationError, ReplayRun, replay_trace, trace_files
from adaptive_eval.testing._core import (  # noqa: F401 (READ_OPTIONS: as before)
    READ_OPTIONS,
    in_folder,
    read_options,
    read_with,
    refuse_read_options_on_shipped,
    shipped_trace_name,
)
from adaptive_eval.trace import TraceError

MARKER = "replay_traces"


_TEST_DIR: pathlib.Path | None = None  # the folder of the test being run (pytest_runtest_setup)


class ReplayCache:
    """Replays each (trace, config, seed) once; later requests get the same :class:`ReplayRun`."""

    def __init__(self) -> None:
        self._runs: dict[tuple, ReplayRun] = {}
        self._held: list = []  # what is keyed by identity, held so that its id is never another object's
        self.replays = 0  # how many replays really ran

    def get(self, trace, config=None, seed: int = 0, **read) -> ReplayRun:
        """``read``: how to read a trace file, the marker's ``eval``, ``stream``, ``step_column`` and
        ``keep_last_run`` (:func:`read_options`).  In a test, a relative path names a file or folder beside the
        test file first, as the marker's do (the same ``"mine.yaml"`` read ``tests/mine.yaml`` in the marker and
        ``./mine.yaml`` here; a probe)."""
        options = read_options(read)
        if _TEST_DIR is not None:
            trace = _relative_to(_TEST_DIR, trace)
            config = _relative_to(_TEST_DIR, config)
        refuse_read_options_on_shipped(trace, options)
        run = self._runs.get(key := (self._key(trace), self._key(config), seed, options))
        if run is None:
            source = trace
            if options and isinstance(trace, (str, os.PathLike)) and os.path.exists(trace):
                source = read_with(trace, options)
            run = self._runs[key] = replay_trace(source, config, seed=seed)
            self.replays += 1
        return run

    def _key(self, value):
        """A cache key: a path by its resolved name and modification time, a config (a DictConfig or a mapping) by
        its YAML, a preset or a shipped trace by its name, anything else (a ``Trace``) by identity, held.  (A dict
        was keyed by its id, which a later dict takes once the first is freed: 174 of 300 lookups of configs
        built in a loop got another config's run; a probe.)"""
        if value is None or isinstance(value, str) and (not os.path.exists(value)
                                                         or shipped_trace_name(value) is not None
                                                         or _preset_named(value)):
            return value  # (a shipped name is the shipped trace or preset, whatever lies in the working directory)
        if isinstance(value, (str, os.PathLike)):
            p = pathlib.Path(value).resolve()
            return str(p), p.stat().st_mtime_ns
        from omegaconf import DictConfig, OmegaConf

        if isinstance(value, Mapping):
            try:
                return "config", OmegaConf.to_yaml(value if isinstance(value, DictConfig) else OmegaConf.create(value))
            except Exception:  # noqa: BLE001 - not a config OmegaConf can write: by identity, below
                pass
        self._held.append(value)
        return "id", id(value)


def pytest_addoption(parser) -> None:
    """The ini options, which the entry point registers too: with PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 (common in CI)
    it is not loaded, and ``-p adaptive_eval.testing.plugin`` replayed every trace under the default preset,
    ``adaptive_eval_config`` ignored with pytest's generic warning only (a new user's probe).  Registering an ini
    option twice is harmless."""
    from adaptive_eval.testing._pytest_entry import pytest_addoption as register

    register(parser)


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}(source, *, config=None, seed=0, eval=None, stream=None, step_column=None, "
                   "keep_last_run=False): run the test once per recorded trace in source (a folder, a trace file, "
                   "a shipped real trace name, or a list); the replay_run fixture replays it, reading a trace file "
                   "as the command line's --eval, --stream, --step-column, --keep-last-run "
                   "(adaptive_eval.testing.plugin)")


def _relative_to(base: pathlib.Path, value):
    if isinstance(value, (str, os.PathLike)) and not os.path.isabs(value) and (base / value).exists():
        return base / value
    return value


@pytest.hookimpl(tryfirst=True)  # (before the fixtures are set up: a fixture of the test's may call get())
def pytest_runtest_setup(item) -> None:
    global _TEST_DIR
    _TEST_DIR = pathlib.Path(item.path).parent


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item) -> None:
    global _TEST_DIR
    _TEST_DIR = None


def _sources(marker, base: pathlib.Path) -> list:
    if not marker.args:
        raise pytest.UsageError(f"@pytest.mark.{MARKER}() needs a folder, trace file or trace name")
    source = marker.args[0]
    items = list(source) if isinstance(source, (list, tuple)) else [source]
    out = []
    for item in items:
        resolved = _relative_to(base, item)
        if resolved is item and shipped_trace_name(item) is not None:
            out.append(item)  # (not a folder of that name in the working directory: pytest run from elsewhere)
        elif isinstance(resolved, (str, os.PathLike)) and os.path.isdir(resolved):
            found = trace_files(resolved)
            if not found:
                raise pytest.UsageError(f"@pytest.mark.{MARKER}({item!r}): no trace files (*.csv, *.jsonl, *.json) "
                                        f"or TensorBoard runs in {resolved}")
            out += [in_folder(resolved, f) for f in found]
        else:
            out.append(resolved)
    return out


def _trace_id(item) -> str:
    return pathlib.Path(item).name if isinstance(item, (str, os.PathLike)) else str(getattr(item, "name", item))


def pytest_generate_tests(metafunc) -> None:
    marker = metafunc.definition.get_closest_marker(MARKER)
    if marker is None or "recorded_trace" not in metafunc.fixturenames:
        return
    traces = _sources(marker, metafunc.definition.path.parent)
    metafunc.parametrize("recorded_trace", traces, ids=[_trace_id(t) for t in traces])


@pytest.fixture(scope="session")
def replay_cache() -> ReplayCache:
    """Replays shared by the whole test session."""
    return ReplayCache()


@pytest.fixture
def recorded_trace(request):
    """The trace this test runs on: set by ``@pytest.mark.replay_traces(...)`` or your own parametrize."""
    raise pytest.UsageError(f"{request.node.nodeid}: replay_run needs a trace: mark the test with "
                            f"@pytest.mark.{MARKER}(folder_or_trace) or parametrize 'recorded_trace'")


def _ini_config(config) -> str | None:
    try:
        value = config.getini("adaptive_eval_config")
    except ValueError:  # the entry point was not loaded (PYTEST_DISABLE_PLUGIN_AUTOLOAD): no such ini option
        return None
    if not value:
        return None
    return _relative_to(pathlib.Path(config.rootpath), value)


def _own_copy(run: ReplayRun) -> ReplayRun:
    """A test's own view of a cached run: its lists copied (a test that cleared ``replay_run.evals`` emptied them for
    every later test), and its once-per-run notes said in each test (a missing events file was warned in the first
    test only, the others passing over no events in silence; a probe)."""
    import copy
    import dataclasses

    r = run.result
    result = dataclasses.replace(r, evals=copy.deepcopy(r.evals), alarms=copy.deepcopy(r.alarms),
                                 deferrals=copy.deepcopy(r.deferrals), summary=copy.deepcopy(r.summary),
                                 results=list(r.results))
    return dataclasses.replace(run, result=result)


@pytest.fixture
def replay_run(request, recorded_trace, replay_cache) -> ReplayRun:
    """The replayed run of ``recorded_trace`` under the marker's (or ini's) config and seed, cached per session."""
    marker = request.node.get_closest_marker(MARKER)
    kwargs = dict(marker.kwargs) if marker is not None else {}
    unknown = sorted(set(kwargs) - {"config", "seed", *READ_OPTIONS})
    if unknown:
        raise pytest.UsageError(f"@pytest.mark.{MARKER}: unknown keyword {unknown[0]!r} "
                                f"(config, seed, {', '.join(READ_OPTIONS)})")
    read = {k: kwargs[k] for k in READ_OPTIONS if k in kwargs}
    try:
        read_options(read)
    except TypeError as exc:
        raise pytest.UsageError(f"@pytest.mark.{MARKER}: {exc}") from None
    config = kwargs.get("config")
    config = _relative_to(request.path.parent, config) if config is not None else _ini_config(request.config)
    seed = kwargs.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):  # (1.7 replayed as seed 1; None: TypeError)
        raise pytest.UsageError(f"@pytest.mark.{MARKER}: seed must be an integer, got {seed!r}")
    try:
        return _own_copy(replay_cache.get(recorded_trace, config, seed=int(seed), **read))
    except (ConfigError, TraceError, ExpectationError) as exc:  # the user's file: its message alone (it came under
        error = f"{request.node.nodeid}: {type(exc).__name__}: {exc}"  # ~245 lines of ours; a probe)
        if isinstance(config, str) and "no such config file" in str(exc):  # (where the marker looked first)
            error += f" (nor beside the test file, in {request.path.parent})"
    pytest.fail(error, pytrace=False)

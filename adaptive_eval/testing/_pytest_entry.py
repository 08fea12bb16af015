"""The ``pytest11`` entry point: pytest loads it wherever adaptive-eval is installed, so it only registers
its ini options and, when a project asks with ``adaptive_eval_plugin = true``, the plugin itself
(:mod:`adaptive_eval.testing.plugin`).  ``-p adaptive_eval.testing.plugin`` asks too, without the ini line."""

from __future__ import annotations

PLUGIN = "adaptive_eval.testing.plugin"


def pytest_addoption(parser) -> None:
    parser.addini("adaptive_eval_plugin", type="bool", default=False,
                  help="activate adaptive_eval.testing.plugin: the replay_run / replay_cache fixtures and the "
                       "replay_traces marker (same as -p adaptive_eval.testing.plugin)")
    parser.addini("adaptive_eval_config", default="",
                  help="adaptive_eval.testing.plugin: the preset replay_run replays under when a test's "
                       "replay_traces marker names none (a YAML path relative to the rootdir, or a preset name)")


def pytest_configure(config) -> None:
    if config.getini("adaptive_eval_plugin") and not config.pluginmanager.has_plugin(PLUGIN):
        import importlib

        config.pluginmanager.register(importlib.import_module(PLUGIN), PLUGIN)

"""Test a preset against recorded runs: replay a trace under a config and assert what it must still do.

>>> from adaptive_eval.testing import replay_trace, assert_confirmed, assert_cost
>>> run = replay_trace("grpo_kl_collapse", "default")          # a shipped real trace, the default preset
>>> assert_confirmed(run, 56, within=80)                       # the reward collapse at step 56: its delay
61
>>> assert_cost(run, max_samples_per_1k=8000)

:func:`replay_trace` runs :func:`adaptive_eval.replay.replay` (the same simulated clock and evaluations) and
returns a :class:`ReplayRun`: the decisions, evaluations, alarms and costs, with the trace's events and eval
ground truth.  The ``assert_*`` helpers raise :class:`AssertionError` with a message naming the trace, the
event and the figures when the preset no longer does what was expected, and :class:`ExpectationError` (a
``ValueError``) when the expectation itself cannot be checked or contradicts itself: no eval ground truth,
an event outside the trace, ``within=-5``.

Events and other expectations can sit in a sidecar file beside the trace, ``<trace>.events.yaml`` (or
``.events.yml``/``.events.json``; JSON is YAML too)::

    events:                        # changes the preset must confirm from its evaluations
    - step: 224                    # a training step of the trace
      kind: collapse               # a free label, shown in messages
      direction: down              # of the eval metric: up | down | omitted (either way)
      metric: accuracy             # optional: the eval metric (default: the run's; see ReplayRun.metric)
      within: 80                   # optional: confirmed at most this many steps after the event
    quiet:                         # stretches where nothing should happen
    - {start: 940, stop: 970, max_alarms: 0, max_evals: 2, kind: spike}
    max_samples_per_1k: 5000       # optional: eval items per 1,000 training steps

A top-level list is read as the ``events`` list alone.  An event is *confirmed* at the first evaluation at or
after it whose confidence interval for the metric excludes the level before the event, on the side of
``direction``, or whose paired difference on the items it shares with the previous evaluation excludes 0 on
that side (:func:`adaptive_eval.scoring.confirmed_delay`); the level before is the eval ground truth just
before the event (the trace's ``eval/<metric>`` column carried forward), else the last evaluation before it,
whose own error then counts (the difference of the two means must exclude 0, both margins added in quadrature).
Costs count eval items as :func:`adaptive_eval.scoring.eval_samples` does (a whole-set evaluation counts
``replay.eval_set_size``), per 1,000 trace records (replay runs one training step per record).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# The names are imported on first use (PEP 562): pytest imports this package for its pytest11 entry point
# (adaptive_eval.testing._pytest_entry) in every project where adaptive-eval is installed, and a project
# that did not ask for the plugin should not pay for importing the replay machinery.
__all__ = [
    "CheckRow", "Event", "ExpectationError", "Expectations", "QuietWindow", "ReplayRun", "assert_confirmed",
    "assert_cost", "assert_quiet", "assert_same_decisions", "check", "events_path", "format_rows",
    "load_expectations", "replay_trace", "trace_files",
]


def __getattr__(name: str):
    if name not in __all__:
        raise AttributeError(f"module 'adaptive_eval.testing' has no attribute {name!r}")
    value = getattr(importlib.import_module("adaptive_eval.testing._core"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:
    from adaptive_eval.testing._core import (  # noqa: F401
        CheckRow, Event, ExpectationError, Expectations, QuietWindow, ReplayRun, assert_confirmed, assert_cost,
        assert_quiet, assert_same_decisions, check, events_path, format_rows, load_expectations, replay_trace,
        trace_files,
    )

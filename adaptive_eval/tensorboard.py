"""TensorBoard logging: what the evaluator decided, when and why, on the training-step axis.

:func:`make_logger` gives rank 0 a :class:`TensorBoardLogger` and every other rank a
:class:`~adaptive_eval.loggers.NullLogger`.  TensorBoard itself is imported only when a
:class:`TensorBoardLogger` is made, so importing this module costs nothing.

Tag contract
------------
The evaluator calls ``log(step, scalars)`` with these tags (``step`` is the global training step):

==================================  ===========================================================
tag                                 value
==================================  ===========================================================
``eval/<metric>``                   the measured mean (``<metric>`` may contain ``/``)
``eval/<metric>/ci_low``            lower bound of its confidence interval
``eval/<metric>/ci_high``           upper bound of its confidence interval
``eval/<metric>/n``                 samples it was measured on (items, for items x samples metrics)
``eval/<metric>/samples_per_item``  items x samples metrics: mean samples per item
``eval/<metric>/nan``               NaN samples skipped (items x samples metrics: always; others: when any)
``eval/<metric>/paired_diff``       change since the previous evaluation on the items both share,
                                    with its own ``/ci_low``, ``/ci_high`` and ``/n`` (shared items)
``controller/interval``             steps until the next scheduled evaluation
``controller/sample_size``          items of this evaluation (over all its suites)
``controller/eval_fraction``        evaluation wall time / elapsed wall time so far
``controller/deferred``             1 at the first and last steps an evaluation is deferred, 0 at each
                                    evaluation (and at the step nothing is due any more)
``controller/eval_errors``          evaluation errors so far
``streams/<name>``                  a watched per-step stream (train reward, loss, KL, ...)
``controller/alarms``               alarms so far, on every stream, written at each alarm and each
                                    evaluation (it only grows, so no smoothing hides an alarm; the stream,
                                    direction and message of each are in the ``alarms`` text)
==================================  ===========================================================

The alarm count is one tag under ``controller/`` so that TensorBoard's Time Series tab, which opens the
first two tag groups in alphabetical order and collapses the rest, opens on ``controller`` (six charts,
eight for an asynchronous run: the alarms, the interval and sample size they changed, ...) and ``eval`` (the
results).  The text tags are ``alarms/<page>``, ``decisions/<page>``, ``picked/<page>`` (the checkpoint
:func:`adaptive_eval.scoring.pick_best` picks, written at ``close``) and ``run_config``, in that order, so
the Text tab opens on the first two.

The suffixes ``/ci_low``, ``/ci_high``, ``/n``, ``/samples_per_item`` and ``/nan`` are reserved: a metric must not be named
``x/n``.  :func:`eval_scalars` builds the eval values.  Text markers:
``text(step, "decisions", reason)`` for every decision with a reason, ``text(step, "alarms", message)``
for every alarm; ``log_config(yaml)`` writes the resolved configuration under the tag ``run_config``.

Scalars are stored as TensorBoard's ``simple_value`` (float32), the form every TensorBoard reader
understands; NaN and infinities are stored as they are.

The custom-scalars dashboard
----------------------------
The logger writes a custom-scalars layout (:func:`dashboard_layout`): an ``eval`` category with one
Margin chart per metric (the mean inside its confidence band), then the controller state and the
alarms as Multiline charts.  TensorBoard's custom-scalars plugin reads only the *last* layout of each
run (``custom_scalars_plugin.layout_impl`` reads the config tag with ``downsample=1``, which keeps
the last point) and merges the layouts of different runs by category title.  So whenever a new eval
metric appears the logger writes the whole layout again; once every metric is known, ``log`` does
no layout work at all.

Flushing
--------
Events are framed into a buffered file as they are logged and reach the disk when ``flush_secs``
have passed since the last flush (checked on ``log``), right after every text marker and new eval
metric, on :meth:`~TensorBoardLogger.flush` and :meth:`~TensorBoardLogger.close`, when the logger
is garbage-collected, at interpreter exit, before ``os.fork`` and on SIGTERM.  The SIGTERM handler
is installed only from the main thread and only over a Python-level handler or the default; it
flushes, then hands the signal on to the handler that was there before (the default one
terminates the process as SIGTERM would have).  The logger is meant to be used from one thread.
"""

from __future__ import annotations

import itertools
import logging
import math
import operator
import os
import re
import signal
import socket
import sys
import threading
import time
import weakref
from collections.abc import Iterable, Mapping
from pathlib import Path

from adaptive_eval.loggers import MetricLogger, NullLogger

__all__ = ["TensorBoardLogger", "dashboard_layout", "eval_scalars", "make_logger", "read_texts"]

log = logging.getLogger("adaptive_eval")

EVAL_PREFIX = "eval/"
CI_LOW_SUFFIX = "/ci_low"
CI_HIGH_SUFFIX = "/ci_high"
COUNT_SUFFIX = "/n"
STRATUM_MARK = "/stratum="  # a per-stratum metric: <suite>/<metric>/stratum=<label>
SAMPLES_PER_ITEM_SUFFIX = "/samples_per_item"
NAN_SUFFIX = "/nan"
PAIRED_SUFFIX = "/paired_diff"
_EVAL_SUFFIXES = (CI_LOW_SUFFIX, CI_HIGH_SUFFIX, COUNT_SUFFIX, SAMPLES_PER_ITEM_SUFFIX, NAN_SUFFIX)
CONTROLLER_TAGS = ("controller/interval", "controller/sample_size", "controller/eval_fraction",
                   "controller/deferred", "controller/eval_errors")
CONFIG_TAG = "run_config"  # (sorts after "decisions": the Text tab opens its first two tags)


def eval_scalars(result) -> dict[str, float]:
    """The ``eval/...`` scalars of one :class:`~adaptive_eval.EvalResult` (mean, CI bounds, n per metric;
    for items x samples metrics also samples per item and NaN samples; paired differences as the metric
    ``<metric>/paired_diff`` with its own bounds and n).

    >>> from adaptive_eval.types import EvalResult, MetricSummary
    >>> r = EvalResult(step=50, sample_size=200, reason="trigger:steps", seconds=3.0,
    ...                metrics={"math/acc": MetricSummary(mean=0.5, n=200, ci=(0.43, 0.57))})
    >>> eval_scalars(r)
    {'eval/math/acc': 0.5, 'eval/math/acc/ci_low': 0.43, 'eval/math/acc/ci_high': 0.57, 'eval/math/acc/n': 200.0}
    """
    out: dict[str, float] = {}
    for name, m in result.metrics.items():
        tag = EVAL_PREFIX + name
        out[tag] = float(m.mean)
        out[tag + CI_LOW_SUFFIX] = float(m.ci[0])
        out[tag + CI_HIGH_SUFFIX] = float(m.ci[1])
        out[tag + COUNT_SUFFIX] = float(m.n)
        if m.clustered:  # items x samples: n counts items
            out[tag + SAMPLES_PER_ITEM_SUFFIX] = float(m.samples_per_item)
        if m.clustered or m.nan_count:
            out[tag + NAN_SUFFIX] = float(m.nan_count)
    for name, d in getattr(result, "paired", {}).items():  # the paired difference on the shared items
        tag = EVAL_PREFIX + name + PAIRED_SUFFIX
        out[tag] = float(d.mean)
        out[tag + CI_LOW_SUFFIX] = float(d.ci[0])
        out[tag + CI_HIGH_SUFFIX] = float(d.ci[1])
        out[tag + COUNT_SUFFIX] = float(d.n)
    return out


def _exact(tag: str) -> str:
    # Multiline charts take regular expressions (matched from the start of the tag).
    return "^" + re.escape(tag) + "$"


def dashboard_layout(metrics: Iterable[str], metrics_with_ci: Iterable[str] = (), groups: Iterable[str] = (),
                     renamed: Mapping[str, str] | None = None) -> dict:
    """The custom-scalars layout, as ``{category: {chart title: (kind, tags)}}``.

    A metric with a confidence interval gets a Margin chart (value, lower, upper tags); one without
    gets a Multiline chart.  Multiline tags are regular expressions.  ``groups`` (the eval suites): a
    metric ``"<suite>/..."`` goes into the category ``"eval: <suite>"``, one per suite.  ``renamed``: eval tags
    another writer puts in the folder under other names (HF's ``TensorBoardCallback`` writes ``eval/acc/ci_low``
    as ``eval/acc_ci_low``), charted where they are (``{ours: theirs}``; their counts by name).

    >>> charts = dashboard_layout(["eval_acc"], ["eval_acc"], renamed={"eval/eval_acc": "eval/acc",
    ...     "eval/eval_acc/ci_low": "eval/acc_ci_low", "eval/eval_acc/ci_high": "eval/acc_ci_high",
    ...     "eval/eval_acc/n": "eval/acc_n"})["eval"]
    >>> charts["eval_acc"], charts["samples per evaluation"]
    (('Margin', ['eval/acc', 'eval/acc_ci_low', 'eval/acc_ci_high']), ('Multiline', ['^eval/acc_n$']))

    >>> list(dashboard_layout(["math500/acc", "aime24/acc"], groups=["math500", "aime24"]))[:2]
    ['eval: math500', 'eval: aime24']

    >>> layout = dashboard_layout(["acc", "reward"], metrics_with_ci=["acc"])
    >>> list(layout)
    ['eval', 'controller', 'alarms']
    >>> layout["eval"]["acc"]
    ('Margin', ['eval/acc', 'eval/acc/ci_low', 'eval/acc/ci_high'])
    >>> layout["eval"]["reward"]
    ('Multiline', ['^eval/reward$'])
    >>> layout["controller"]["interval (steps)"], layout["alarms"]["alarms so far"]
    (('Multiline', ['^controller/interval$']), ('Multiline', ['^controller/alarms$']))
    """
    with_ci = set(metrics_with_ci)
    groups = list(groups)
    renamed = renamed or {}
    suite_charts: dict[str, dict[str, tuple[str, list[str]]]] = {g: {} for g in groups}
    eval_charts: dict[str, tuple[str, list[str]]] = {}
    for m in metrics:
        tag = EVAL_PREFIX + m
        head = m.partition("/")[0]
        charts = suite_charts[head] if head in suite_charts and "/" in m else eval_charts
        if m in with_ci:
            charts[m] = ("Margin", [renamed.get(t, t) for t in (tag, tag + CI_LOW_SUFFIX, tag + CI_HIGH_SUFFIX)])
        else:
            charts[m] = ("Multiline", [_exact(renamed.get(tag, tag))])
    # The count charts: a suite's own metrics, its strata apart (a stratum's few items on the suite's axis would
    # crowd it), and the loose metrics without any suite's.
    # Nor the counts of what is derived from a metric (found by a new-user probe: one chart mixed 11 lines): its
    # paired difference's (the items shared with the previous evaluation) and its pass@k's / maj@k's (its items).
    not_stratum = ("(?!.*" + re.escape(STRATUM_MARK) + ")(?!.*" + re.escape(PAIRED_SUFFIX + "/") + ")"
                   + r"(?!.*/(?:pass|best|worst|maj)@\d+/)")
    def theirs(metrics, strata: bool = False) -> list[str]:
        """Renamed: the counts of ``metrics`` (their own, or their strata's) by name where the other writer has them
        (HF's eval/acc_n matched no "/n$", and "_n$" would match a metric of that name; a suite's too: a probe)."""
        return [_exact(renamed[t]) for m in metrics if (STRATUM_MARK in m) == strata
                and not re.search(r"/(?:pass|best|worst|maj)@\d+", m)
                and (t := EVAL_PREFIX + m + COUNT_SUFFIX) in renamed]

    for g, charts in suite_charts.items():
        if charts:
            prefix = "^" + re.escape(EVAL_PREFIX + g + "/")
            charts["items per evaluation"] = ("Multiline", theirs(list(charts)) if renamed else
                                              [prefix + not_stratum + ".*/n$"])
            charts["samples per item"] = ("Multiline", [prefix + not_stratum + ".*/samples_per_item$"])
            if any(STRATUM_MARK in m for m in charts):
                charts["items per stratum"] = ("Multiline", theirs(list(charts), strata=True) if renamed else
                                               [prefix + ".*" + re.escape(STRATUM_MARK) + "[^/]*/n$"])
    if eval_charts:
        suites_out = "(?!(?:" + "|".join(re.escape(g + "/") for g in groups) + "))" if groups else ""
        counts = ["^" + re.escape(EVAL_PREFIX) + suites_out + not_stratum + ".*/n$"]
        eval_charts["samples per evaluation"] = ("Multiline", theirs(list(eval_charts)) if renamed else counts)
    # One unit per chart: steps, items, a fraction, a 0/1 flag and a count each get their own axis (on a shared
    # one, a fixed run's 500 items put the interval off-scale, or the small ones become flat lines).
    controller = {
        "interval (steps)": ("Multiline", [_exact("controller/interval")]),
        "sample size (items)": ("Multiline", [_exact("controller/sample_size")]),
        "eval-time fraction": ("Multiline", [_exact("controller/eval_fraction")]),
        "deferred (1) or evaluated (0)": ("Multiline", [_exact("controller/deferred")]),
        "evaluation errors so far": ("Multiline", [_exact("controller/eval_errors")]),
    }
    layout = {f"eval: {g}": charts for g, charts in suite_charts.items() if charts}
    if eval_charts:
        layout["eval"] = eval_charts
    layout["controller"] = controller
    # Alarms are rare discrete events: a line through +1/-1 values joins events far apart and TensorBoard's
    # default smoothing (0.6) shows a lone +1 as 0.25.  The running count only grows, so no smoothing hides an
    # alarm (the stream, direction and message of each are in the Text tab).
    layout["alarms"] = {"alarms so far": ("Multiline", [_exact("controller/alarms")])}
    return layout


def _metric_of(tag: str) -> tuple[str, bool] | None:
    """(metric, is a CI bound) for an ``eval/...`` tag, None for any other tag."""
    if not tag.startswith(EVAL_PREFIX):
        return None
    for suffix in _EVAL_SUFFIXES:
        if tag.endswith(suffix) and len(tag) > len(EVAL_PREFIX) + len(suffix):
            return tag[len(EVAL_PREFIX):-len(suffix)], suffix in (CI_LOW_SUFFIX, CI_HIGH_SUFFIX)
    return tag[len(EVAL_PREFIX):], False


_FLOAT32_MAX = 3.4028234663852886e38  # TensorBoard keeps a scalar as a float32: a finite value beyond is inf there


def _as_value(tag, value) -> float:
    if type(value) is not float:
        if value is None or isinstance(value, (str, bytes)):
            raise TypeError(f"TensorBoard scalar {tag!r}: expected a number, got {type(value).__name__} {value!r}")
        try:
            value = float(value)
        except (TypeError, ValueError, OverflowError) as exc:
            raise TypeError(f"TensorBoard scalar {tag!r}: expected a number, got {type(value).__name__}: {exc}") \
                from None
    if -_FLOAT32_MAX <= value <= _FLOAT32_MAX or value != value or value in (math.inf, -math.inf):
        return value
    # A huge finite value (1e200) read back as inf: a replay of the folder raised a nonfinite alarm the run never
    # raised, and the plot drew it as NaN / inf (a new user's probe).  The largest float32 of its sign instead.
    return math.copysign(_FLOAT32_MAX, value)


def _check_step(step) -> int:
    try:
        return operator.index(step)
    except TypeError:
        raise TypeError(f"step must be an integer, got {type(step).__name__} {step!r}") from None


# --- process-wide flushing: exit, SIGTERM, fork --------------------------------------------------------

_LIVE: "weakref.WeakSet[TensorBoardLogger]" = weakref.WeakSet()
_hooks_lock = threading.Lock()
_fork_hooks_registered = False
_previous_sigterm = None  # the handler ours replaced; None while ours is not installed
_uid = itertools.count()


def _flush_all() -> None:
    for logger in list(_LIVE):
        try:
            logger.flush()
        except Exception:  # noqa: BLE001 - flushing one logger must not stop the others (or the signal)
            pass


def _disown_all_in_child() -> None:
    # A forked child must neither write into its parent's event files nor flush their buffers again.
    for logger in list(_LIVE):
        logger._finalizer.detach()
    _LIVE.clear()


def _on_sigterm(signum, frame) -> None:
    _flush_all()
    previous = _previous_sigterm
    if callable(previous):
        previous(signum, frame)
    elif previous == signal.SIG_DFL:
        # Terminate exactly as the default disposition would have (exit status -SIGTERM).
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def _install_process_hooks() -> None:
    global _fork_hooks_registered, _previous_sigterm
    with _hooks_lock:
        if not _fork_hooks_registered and hasattr(os, "register_at_fork"):
            os.register_at_fork(before=_flush_all, after_in_child=_disown_all_in_child)
            _fork_hooks_registered = True
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread
        current = signal.getsignal(signal.SIGTERM)
        # Not over SIG_IGN (the process chose to survive SIGTERM) nor over a handler set outside Python
        # (None: we could not chain to it).
        if current is _on_sigterm or current is None or current == signal.SIG_IGN:
            return
        _previous_sigterm = current
        signal.signal(signal.SIGTERM, _on_sigterm)


def _uninstall_sigterm() -> None:
    global _previous_sigterm
    with _hooks_lock:
        if _LIVE or _previous_sigterm is None or threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGTERM) is _on_sigterm:
            signal.signal(signal.SIGTERM, _previous_sigterm)
            _previous_sigterm = None
        # If someone replaced our handler, it is theirs now; leave it, and keep chaining if they call us.


def _close_file(file, pid: int) -> None:
    if os.getpid() == pid:
        file.close()


class TensorBoardLogger(MetricLogger):
    """Writes scalars, text markers, the configuration and a custom-scalars layout to TensorBoard.

    ``log_dir`` is created if needed; each logger writes one new event file in it (named like
    TensorBoard's own, ending in ``.rank<N>`` when ``rank`` is given).  ``flush_secs`` bounds how long
    logged scalars may stay in memory.  See the module documentation for the tags and flushing.
    """

    def __init__(self, log_dir: str | os.PathLike, *, flush_secs: float = 30.0, rank: int | None = None):
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.summary.writer.record_writer import RecordWriter

        if not isinstance(flush_secs, (int, float)) or isinstance(flush_secs, bool) or not flush_secs >= 0:
            raise ValueError(f"flush_secs must be a number >= 0, got {flush_secs!r}")
        if rank is not None:
            rank = operator.index(rank)
        self.log_dir = Path(log_dir).expanduser()  # (~/runs wrote into a folder ./~ here; a probe)
        self.flush_secs = float(flush_secs)
        self.rank = rank
        # torch's SummaryWriter (used by HF's and Lightning's TensorBoard loggers) names its files
        # events.out.tfevents.<time>.<host>.<pid>.<its own counter>: with the same pattern, a writer in the
        # same folder in the same second collides.  The ".adaptive_eval" suffix keeps ours apart (TensorBoard
        # reads every file whose name contains "tfevents"), and an existing name is skipped, not an error.
        suffix = ".adaptive_eval" + (f".rank{rank}" if rank is not None else "")
        try:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            # Our text pages continue after those of earlier writers in this folder (a run resumed into it):
            # each started at decisions/0000 again, and the reader, which takes a tag's last write, lost the
            # earlier run's rows (found by a new-user probe).  TEXT_PAGE_OFFSET pages per earlier writer.
            earlier = sum(".adaptive_eval" in f.name and "tfevents" in f.name for f in self.log_dir.iterdir())
            for _ in range(1000):
                name = "events.out.tfevents.%010d.%s.%d.%d%s" % (time.time(), socket.gethostname(), os.getpid(),
                                                                next(_uid), suffix)
                self.event_file = self.log_dir / name
                try:
                    file = open(self.event_file, "xb")  # noqa: SIM115 - closed by close() or the finalizer
                    break
                except FileExistsError:
                    continue
            else:
                raise FileExistsError(17, "no free event-file name", str(self.log_dir))
        except OSError as exc:
            raise OSError(exc.errno, f"cannot create a TensorBoard event file: {exc.strerror}",
                          str(self.log_dir)) from exc
        here = self.log_dir.resolve()
        # An earlier run's files in this folder: said at the first scalar unless a state is loaded first (a resumed
        # run, note_resumed), or the warning below is given
        self._earlier = earlier
        if any(other.log_dir.resolve() == here for other in list(_LIVE) if other.rank == rank):
            self._earlier = 0
            # (two evaluators of one run, one per task, given one folder: TensorBoard reads it as one run, their
            # controller/ charts mixed into one line going back and forth, the custom-scalars layout the last one's;
            # a new user's probe)
            log.warning("TensorBoard: another adaptive_eval logger in this process is writing to %s: TensorBoard "
                        "shows one folder as one run, so the two evaluators' controller/ charts mix into one line "
                        "and the dashboard's layout is the last one's; give each evaluator its own "
                        "logging.tensorboard_dir (a subfolder each: one run each)", self.log_dir)
        self._file = file
        self._records = RecordWriter(file)
        self._Event = event_pb2.Event
        self._Summary = summary_pb2.Summary
        self._Value = summary_pb2.Summary.Value
        self._pid = os.getpid()
        self._finalizer = weakref.finalize(self, _close_file, file, self._pid)
        self._seen: set[str] = set()
        self._metrics: dict[str, None] = {}  # eval metrics in order of appearance
        self._metrics_with_ci: set[str] = set()
        self._renamed: dict[str, str] = {}  # eval tags another writer puts here under other names (written_as)
        self.groups: tuple[str, ...] = ()  # eval suites: one dashboard category each (set_groups)
        self._layout_stale = False
        self._text_metadata = None
        self._first_page = earlier * TEXT_PAGE_OFFSET
        self._pages: dict[str, list] = {}  # tag -> [page number, [(step, text), ...] of the open page]
        self._write(self._Event(wall_time=time.time(), file_version="brain.Event:2"))
        self._write_layout(0)
        self.flush()
        self._next_flush = 0.0  # the first scalars go to disk at once, so the run shows up early
        _LIVE.add(self)
        _install_process_hooks()

    def __getstate__(self) -> dict:
        """A copy (pickled: ``ddp_spawn`` pickles a framework callback, its evaluator's logger with it, and an open
        file does not pickle; a review) is a closed logger of the same folder: two processes never write one file."""
        keep = ("log_dir", "flush_secs", "rank", "event_file", "groups", "_metrics", "_metrics_with_ci", "_renamed")
        return {**{name: self.__dict__[name] for name in keep if name in self.__dict__},
                "_copied_open": self._finalizer.alive}

    def __setstate__(self, state: dict) -> None:
        copied_open = state.pop("_copied_open", False)
        self.__dict__.update(state)
        self._pid, self._layout_stale = os.getpid(), False
        self._finalizer = weakref.finalize(self, _close_file, None, -1)
        self._finalizer()  # (closed: every later call is a no-op)
        if copied_open:  # (the copy of a logger still writing went on deciding, writing nothing, unsaid; a review)
            log.warning("TensorBoard: a copy of the logger writing %s (pickled, e.g. for another process) writes "
                        "nothing: one event file has one writer; give the copy's evaluator its own "
                        "logging.tensorboard_dir", self.event_file)

    def __repr__(self) -> str:
        state = "open" if self._finalizer.alive else "closed"
        return f"TensorBoardLogger({str(self.log_dir)!r}, flush_secs={self.flush_secs}, rank={self.rank}) [{state}]"

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def _write(self, event) -> None:
        try:
            self._records.write(event.SerializeToString())
        except OSError as exc:
            self._give_up(exc)

    def _give_up(self, exc: OSError) -> None:
        """A write failed (disk full, folder removed): report it once and stop logging, never raising into
        the training step that called us."""
        log.error("TensorBoard logging to %s stopped: %s", self.event_file, exc)
        if self._finalizer.alive:
            self._finalizer.detach()
            _LIVE.discard(self)
            try:
                self._file.close()
            except OSError:
                pass

    def log(self, step: int, scalars: Mapping[str, float]) -> None:
        """Record scalars (tag -> number) at a training step; NaN and infinities are kept."""
        if not self._finalizer.alive:
            return
        step = _check_step(step)
        if not isinstance(scalars, Mapping):
            raise TypeError(f"scalars must be a mapping of tag to number, got {type(scalars).__name__}")
        Value = self._Value
        seen = self._seen
        values = []
        for tag, value in scalars.items():
            value = _as_value(tag, value)
            if tag not in seen:
                if not isinstance(tag, str) or not tag:
                    raise TypeError(f"TensorBoard tags must be non-empty strings, got {tag!r}")
                self._note_new_tag(tag)
                seen.add(tag)
            values.append(Value(tag=tag, simple_value=value))
        if not values:
            return
        self._write(self._Event(wall_time=time.time(), step=step, summary=self._Summary(value=values)))
        if self._layout_stale:
            self._write_layout(step)
            self.flush()
        elif time.monotonic() >= self._next_flush:
            self.flush()

    def set_groups(self, groups: Iterable[str]) -> None:
        """Group the dashboard's eval charts by these prefixes (the eval suites), one category each."""
        groups = tuple(groups)
        if groups != self.groups:
            self.groups = groups
            self._layout_stale = True

    def written_as(self, step: int, renamed: Mapping[str, str]) -> None:
        """Eval tags (``{ours: theirs}``) that another writer puts in this folder under other names at ``step``, so
        this logger leaves them out (the HF adapter sharing HF's own folder): the dashboard charts them where they are
        (its eval charts were missing, their bands and counts unmatched: a new user's probe)."""
        if not self._finalizer.alive:
            return
        for ours, theirs in renamed.items():
            if self._renamed.get(ours) != theirs:
                self._renamed[ours] = theirs
                self._note_new_tag(ours)
                self._layout_stale = True
        if self._layout_stale:
            self._write_layout(_check_step(step))
            self.flush()

    def note_resumed(self) -> None:
        """This logger's run was resumed (``AdaptiveEvaluator.load_state_dict`` calls it): the event files of
        earlier runs in its folder are its own, written before the state was saved."""
        self._earlier = 0

    def _note_new_tag(self, tag: str) -> None:
        """Track eval metrics; mark the dashboard layout stale when one appears or gains its CI."""
        if self._earlier:
            # (a script run again with the same logging.tensorboard_dir: TensorBoard reads the folder as one run and
            # draws both runs' values at the same steps as one line going back and forth; a new user's probe)
            log.warning("TensorBoard: %s already holds the event files of %d earlier adaptive_eval run(s), and this "
                        "run did not load a state_dict() (a resumed run's own files are expected there): TensorBoard "
                        "shows one folder as one run, so at the steps both ran, its charts mix the two runs' values; "
                        "give each run its own logging.tensorboard_dir, or delete the old event files", self.log_dir,
                        self._earlier)
            self._earlier = 0
        found = _metric_of(tag)
        if found is None:
            return
        metric, is_ci = found
        if metric not in self._metrics:
            self._metrics[metric] = None
            self._layout_stale = True
        if is_ci and metric not in self._metrics_with_ci:
            self._metrics_with_ci.add(metric)
            self._layout_stale = True

    def _write_layout(self, step: int) -> None:
        from tensorboard.compat.proto import tensor_pb2, tensor_shape_pb2
        from tensorboard.plugins.custom_scalar import layout_pb2, metadata

        categories = []
        for title, charts in dashboard_layout(self._metrics, self._metrics_with_ci, self.groups,
                                                      self._renamed).items():
            chart_protos = []
            for chart_title, (kind, tags) in charts.items():
                if kind == "Margin":
                    series = layout_pb2.MarginChartContent.Series(value=tags[0], lower=tags[1], upper=tags[2])
                    chart_protos.append(layout_pb2.Chart(title=chart_title,
                                                         margin=layout_pb2.MarginChartContent(series=[series])))
                else:
                    chart_protos.append(layout_pb2.Chart(title=chart_title,
                                                         multiline=layout_pb2.MultilineChartContent(tag=tags)))
            categories.append(layout_pb2.Category(title=title, chart=chart_protos))
        tensor = tensor_pb2.TensorProto(dtype="DT_STRING", tensor_shape=tensor_shape_pb2.TensorShapeProto(),
                                        string_val=[layout_pb2.Layout(category=categories).SerializeToString()])
        value = self._Value(tag=metadata.CONFIG_SUMMARY_TAG, metadata=metadata.create_summary_metadata(),
                            tensor=tensor)
        self._write(self._Event(wall_time=time.time(), step=step, summary=self._Summary(value=[value])))
        self._layout_stale = False

    def text(self, step: int, tag: str, text: str) -> None:
        """Record a text marker (one line of markdown) under ``tag``; written to disk at once.

        Markers are kept in pages of :data:`TEXT_PAGE_SIZE`: the page ``<tag>/<page number>`` is one markdown
        table (step, text) written again, whole, with each new marker.  So every marker survives TensorBoard's
        sampling with its default settings (the event accumulator keeps 10 text events per tag and always the
        last, the server 100), and markers at the same step do not replace each other.  A writer opened on a
        folder that holds ``n`` of ours (a resumed run) numbers its pages from ``n x``
        :data:`TEXT_PAGE_OFFSET`, so the earlier runs' pages stay as they were.  :func:`read_texts` reads
        them back, in page order.
        """
        if not self._finalizer.alive:
            return
        step = _check_step(step)
        if not isinstance(tag, str) or not tag:
            raise TypeError(f"TensorBoard tags must be non-empty strings, got {tag!r}")
        if not isinstance(text, str):
            raise TypeError(f"text for tag {tag!r} must be a string, got {type(text).__name__}")
        pages = self._pages.setdefault(tag, [self._first_page, []])
        if len(pages[1]) >= TEXT_PAGE_SIZE:
            pages[0] += 1
            pages[1] = []
        rows = pages[1]
        rows.append((step, text))
        # (the steps in <pre>: TensorBoard's text card breaks words anywhere, word-break: break-word, and squeezed
        # the step column beside long texts until "108" read "10" over "8"; <pre> is the one tag its sanitizer keeps
        # that never wraps; found in a screenshot)
        table = [f"| <pre>step</pre> | {_cell(tag)} |", "| ---: | :--- |",
                 *(f"| <pre>{s}</pre> | {_cell(t)} |" for s, t in rows)]
        self._write_text(step, f"{tag}/{pages[0]:04d}", "\n".join(table))

    def _write_text(self, step: int, tag: str, text: str) -> None:
        from tensorboard.compat.proto import tensor_pb2, tensor_shape_pb2
        from tensorboard.plugins.text import metadata

        if self._text_metadata is None:
            self._text_metadata = metadata.create_summary_metadata(display_name=None, description=None)
        # A rank-0 string tensor: the text plugin renders it as markdown without a table around it.
        tensor = tensor_pb2.TensorProto(dtype="DT_STRING", tensor_shape=tensor_shape_pb2.TensorShapeProto(),
                                        string_val=[text.encode("utf-8")])
        value = self._Value(tag=tag, metadata=self._text_metadata, tensor=tensor)
        self._write(self._Event(wall_time=time.time(), step=step, summary=self._Summary(value=[value])))
        self.flush()

    def log_config(self, config_yaml: str) -> None:
        """Record the resolved configuration as a YAML code block under the tag ``run_config`` (step 0)."""
        if not isinstance(config_yaml, str):
            raise TypeError(f"config_yaml must be a string, got {type(config_yaml).__name__}")
        longest = max((len(run) for run in re.findall("`+", config_yaml)), default=0)
        fence = "`" * max(3, longest + 1)
        if self._finalizer.alive:
            self._write_text(0, CONFIG_TAG, f"{fence}yaml\n{config_yaml.rstrip()}\n{fence}")

    def flush(self) -> None:
        """Write everything logged so far to the event file."""
        if not self._finalizer.alive or os.getpid() != self._pid:
            return
        self._next_flush = time.monotonic() + self.flush_secs
        try:
            self._file.flush()
        except OSError as exc:
            self._give_up(exc)
        except RuntimeError:
            # Only from a signal handler that interrupted this very file's write ("reentrant call");
            # the interrupted write finishes, and flushes, when the handler returns.
            pass

    def close(self) -> None:
        """Flush and close the event file; later calls of any method are no-ops."""
        if self._finalizer.alive:
            self._finalizer()
            _LIVE.discard(self)
            _uninstall_sigterm()


TEXT_PAGE_SIZE = 25  # text markers per page (one TensorBoard text tag each)
# The first page of the n-th writer in a folder: n x this (25,000,000 markers each; at 10,000, 250,000, a writer that
# wrote more ran into the next one's pages, and a resumed run's writer overwrote them; a long-run probe)
TEXT_PAGE_OFFSET = 1_000_000
_PAGE_ROW = re.compile(r"^\| (?:<pre>)?(\d+)(?:</pre>)? \| (.*) \|$")  # (pages written before <pre> too)


_MARKDOWN = re.compile(r"([\\|*_`\[\]])")  # what TensorBoard's markdown would read as markup in a cell


def _cell(text: str) -> str:
    """``text`` as one markdown table cell, shown as written: pipes and markup escaped, line breaks as <br>.

    TensorBoard renders text as markdown: ``Model.__init__()`` read "Model.**init**()" and ``loss*2 and reward*3``
    lost its asterisks to italics (a new user's probe).

    >>> _cell("train/__kl__ * 2 | x")
    'train/\\\\_\\\\_kl\\\\_\\\\_ \\\\* 2 \\\\| x'
    """
    return _MARKDOWN.sub(r"\\\1", text).replace("\r\n", "<br>").replace("\n", "<br>")


def _uncell(cell: str) -> str:
    out, i = [], 0
    while i < len(cell):
        if cell[i] == "\\" and i + 1 < len(cell):
            out.append(cell[i + 1])
            i += 2
        else:
            out.append(cell[i])
            i += 1
    return "".join(out).replace("<br>", "\n")


def read_texts(source, tag: str) -> list[tuple[int, str]]:
    """Every text marker written with ``text(step, tag, ...)``, as ``(step, text)`` in order.

    ``source`` is a TensorBoard log folder (read with TensorBoard's own ``EventAccumulator`` and its default
    size guidance) or an already loaded accumulator.
    """
    from tensorboard.backend.event_processing import event_accumulator
    from tensorboard.util import tensor_util

    acc = source
    if not isinstance(source, event_accumulator.EventAccumulator):
        acc = event_accumulator.EventAccumulator(str(source))
        acc.Reload()
    prefix = f"{tag}/"
    pages = sorted((t for t in acc.Tags().get("tensors", []) if t.startswith(prefix) and t[len(prefix):].isdigit()),
                   key=lambda t: int(t[len(prefix):]))  # (a resumed run's writer numbers its pages on from 1000000)
    out = []
    for page in pages:
        text = tensor_util.make_ndarray(acc.Tensors(page)[-1].tensor_proto).item().decode("utf-8")
        for line in text.split("\n")[2:]:
            m = _PAGE_ROW.match(line)
            if m:
                out.append((int(m.group(1)), _uncell(m.group(2))))
    return out


def make_logger(log_dir: str | os.PathLike | None, *, flush_secs: float = 30.0, group=None) -> MetricLogger:
    """A :class:`TensorBoardLogger` on rank 0 of ``group``, a :class:`NullLogger` everywhere else.

    Without an initialised process group this process counts as rank 0.  ``log_dir=None`` turns
    logging off (a :class:`NullLogger`).

    >>> make_logger(None)
    <adaptive_eval.loggers.NullLogger object at ...>
    """
    if log_dir is None:
        return NullLogger()
    rank = 0
    global_rank = None
    # (never imported: no process group can exist, so this is rank 0; importing torch for it cost a replay 2.8 s)
    dist = sys.modules.get("torch.distributed")
    from adaptive_eval.distributed import LOCAL

    if dist is not None and dist.is_available() and dist.is_initialized() and group is not LOCAL:
        rank = dist.get_rank(group)  # -1 when this process is not in the group
        global_rank = dist.get_rank()
    if rank != 0:
        return NullLogger()
    return TensorBoardLogger(log_dir, flush_secs=flush_secs, rank=global_rank)

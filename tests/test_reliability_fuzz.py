"""Fuzzing the AdaptiveEvaluator's inputs (hypothesis): only the documented errors, one eval per step at most.

The documented errors: ``TypeError`` naming the key for a metric value that is not one number (or a name
that is not a string), ``ValueError`` for a step that goes backwards or is not an integer, ``ConfigError``
(a ``ValueError``) for a bad configuration, ``TypeError`` for an ``evaluate_fn`` result of the wrong shape,
and, with ``on_error: raise``, the exception ``evaluate_fn`` raised.  Floats of every kind (NaN, inf, huge,
subnormal, -0.0) are data: never an error.  A model of the step rules predicts exactly when a ``ValueError``
is due, so the fuzz also checks that nothing valid is refused.
"""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adaptive_eval import AdaptiveEvaluator, ConfigError, load_config
from adaptive_eval.config import as_config
from adaptive_eval.scheduler import FakeResourceMonitor
from conftest import FakeClock

pytestmark = pytest.mark.xdist_group(__name__)  # (under pytest -n: one worker, its figures printed once)

COUNTS = {}


def count(name: str) -> None:
    COUNTS[name] = COUNTS.get(name, 0) + 1


EDGE_FLOATS = [0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 1e-310, 1.7976931348623157e308,
               -1.7976931348623157e308, math.nan, -math.nan, math.inf, -math.inf, 1e300, -1e300]
FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True), st.sampled_from(EDGE_FLOATS))
NUMBERS = st.one_of(
    FLOATS, FLOATS, FLOATS,
    st.integers(-(2**64), 2**64),
    st.integers(-(10**300), 10**300),  # ints as large as floats go
    FLOATS.map(np.float64),
    st.floats(width=32, allow_nan=True, allow_infinity=True).map(np.float32),
    st.integers(-(2**63), 2**63 - 1).map(np.int64),
    FLOATS.map(lambda x: np.array([x])),  # one-element arrays are one number
)
NON_NUMERIC = st.one_of(st.text(max_size=4), st.none(), st.binary(max_size=3), st.booleans(),
                        st.lists(FLOATS, min_size=2, max_size=3), st.complex_numbers(), st.just(object()),
                        st.just(np.zeros(3)), st.just({"nested": 1.0}))
NAMES = st.one_of(st.text(max_size=12), st.sampled_from(["train/reward", "train/loss", "eval/accuracy", "", " "]))


class UserError(Exception):
    """What the fuzzed evaluate_fn raises (re-raised only with on_error: raise)."""


# -- configurations ----------------------------------------------------------------------------------------

@st.composite
def valid_overrides(draw):
    """Overrides within the schema's ranges: ({dotted key: value}, steps_per_epoch)."""
    o = {}
    pick = lambda key, strat: o.__setitem__(key, draw(strat))  # noqa: E731
    pick("trigger.freq_steps", st.one_of(st.none(), st.integers(1, 4), st.integers(1, 40)))
    pick("trigger.freq_secs", st.one_of(st.none(), st.floats(0.5, 500)))
    pick("trigger.freq_epochs", st.one_of(st.none(), st.none(), st.integers(1, 4)))
    pick("trigger.eval_before_train", st.booleans())
    pick("trigger.eval_at_end", st.booleans())
    pick("evaluation.sample_size", st.one_of(st.none(), st.integers(1, 600)))
    pick("evaluation.seed", st.integers(0, 2**31))
    pick("evaluation.confidence", st.floats(0.01, 0.999))
    pick("evaluation.on_error", st.sampled_from(["skip", "retry", "raise"]))
    pick("evaluation.max_retries", st.integers(0, 3))
    pick("evaluation.retry_backoff_s", st.sampled_from([0.0, 1e-4]))
    pick("evaluation.timeout_s", st.sampled_from([None, None, None, 30.0]))
    pick("evaluation.higher_is_better", st.booleans())
    pick("policy.alarm.enabled", st.booleans())
    pick("policy.alarm.cooldown_steps", st.integers(1, 100))
    pick("policy.interval.enabled", st.booleans())
    lo, hi = sorted(draw(st.lists(st.floats(0.05, 10), min_size=2, max_size=2)))
    o["policy.interval.min_factor"], o["policy.interval.max_factor"] = lo, hi
    pick("policy.interval.relax", st.floats(1, 4))
    pick("policy.interval.tighten", st.floats(0.01, 0.99))
    pick("policy.interval.significance", st.floats(0.001, 0.5))
    pick("policy.sample_size.enabled", st.booleans())
    lo, hi = sorted(draw(st.lists(st.integers(1, 1000), min_size=2, max_size=2)))
    o["policy.sample_size.min"], o["policy.sample_size.max"] = lo, hi
    pick("policy.sample_size.initial", st.integers(1, 1000))
    pick("policy.sample_size.target_half_width", st.floats(1e-3, 1))
    pick("policy.sample_size.alarm_factor", st.floats(1, 10))  # the policy needs >= 1 (validate() lets 0.5 by)
    pick("policy.budget.enabled", st.booleans())
    pick("policy.budget.max_eval_fraction", st.floats(0.01, 1))
    pick("policy.peak.enabled", st.booleans())
    pick("policy.peak.improving_factor", st.floats(0.1, 5))
    pick("resources.enabled", st.booleans())
    pick("resources.min_free_accelerator_gb", st.floats(0, 80))
    pick("resources.max_deferral_steps", st.integers(0, 20))
    pick("resources.alarm_bypass", st.booleans())
    detectors = draw(st.lists(st.sampled_from(["nonfinite", "cusum", "page_hinkley", "spike", "adwin"]),
                              max_size=3, unique=True))
    o["streams.default"] = [{"type": d} for d in detectors]
    spe = draw(st.integers(1, 20)) if o["trigger.freq_epochs"] is not None else None
    return o, spe


def nested(flat: dict) -> dict:
    """{"a.b": v} -> {"a": {"b": v}}: a config for from_config (one merge; load_config's dotlist path
    merges each override on its own, which costs a third of a second for this many)."""
    out: dict = {}
    for key, value in flat.items():
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def dotlist(flat: dict) -> list[str]:
    def text(v):
        if v is None:
            return "null"
        if isinstance(v, bool):
            return str(v).lower()
        if isinstance(v, list):
            return "[" + ",".join("{type: %s}" % d["type"] for d in v) + "]"
        return repr(v) if isinstance(v, float) else str(v)

    return [f"{k}={text(v)}" for k, v in flat.items()]


INVALID = [
    ("trigger.freq_steps", st.sampled_from(["-3", "ten", "2.5"])),  # 0 is valid: every step, as AReaL
    ("trigger.freq_secs", st.sampled_from(["-1.0", "nan", "abc"])),  # 0 is valid, as AReaL
    ("evaluation.confidence", st.sampled_from(["0", "1", "1.5", "-0.1", "nan"])),
    ("evaluation.on_error", st.sampled_from(["ignore", "SKIP", "1"])),
    ("evaluation.precision", st.sampled_from(["fp8", "float32"])),
    ("evaluation.max_retries", st.sampled_from(["-1", "two"])),
    ("evaluation.retry_backoff_s", st.sampled_from(["-0.5", "inf", "nan"])),
    ("evaluation.timeout_s", st.sampled_from(["0", "-5", "nan", "soon"])),
    ("policy.interval.relax", st.sampled_from(["0.5", "-1"])),
    ("policy.interval.tighten", st.sampled_from(["0", "1", "2"])),
    ("policy.sample_size.min", st.sampled_from(["0", "5000"])),  # 5000 > max (512): min > max
    ("policy.interval.min_factor", st.sampled_from(["9.0", "0", "-1"])),  # 9 > max_factor
    ("policy.budget.max_eval_fraction", st.sampled_from(["0", "1.5"])),
    ("distributed.timeout_s", st.sampled_from(["0", "-1", "inf"])),
    ("trigger.freq_stepz", st.just("5")),  # unknown keys
    ("policy.alarm.cooldown", st.just("5")),
    ("evaluation", st.just("3")),  # a section given a scalar
]


@st.composite
def invalid_overrides(draw):
    """A few valid overrides (through load_config's dotlist path) and one invalid."""
    valid, _ = draw(valid_overrides())
    key, bad = draw(st.sampled_from(INVALID))
    paired = ("policy.sample_size.min", "policy.sample_size.max", "policy.interval.min_factor",
              "policy.interval.max_factor")
    keep = draw(st.lists(st.sampled_from(sorted(k for k in valid if k not in paired)), max_size=4, unique=True))
    return dotlist({k: valid[k] for k in keep}) + [f"{key}={draw(bad)}"], key


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(invalid_overrides())
def check_invalid_configs_raise_config_error(case):
    overrides, key = case
    count("invalid configs")
    with pytest.raises(ConfigError) as info:
        load_config(overrides=overrides)
    assert key in str(info.value)


def test_invalid_configs_raise_config_error_naming_the_key():
    check_invalid_configs_raise_config_error()


# -- programs: a config, then a sequence of observe / evaluate calls -----------------------------------------

@st.composite
def programs(draw):
    overrides, spe = draw(valid_overrides())
    ops = []
    for _ in range(draw(st.integers(1, 80))):
        kind = draw(st.sampled_from(["observe", "observe", "evaluate", "evaluate", "both", "both", "both"]))
        delta = draw(st.sampled_from([0, 0, 1, 1, 1, 1, 1, 1, 2, 5, 30, -1, -4]))  # < 0: a one-off probe
        bad_step = draw(st.sampled_from([None] * 36 + [3.0, "7", True, np.int64(9)]))
        metrics = draw(st.one_of(
            st.dictionaries(NAMES, NUMBERS, max_size=6),
            st.dictionaries(NAMES, NUMBERS, max_size=6),
            st.dictionaries(NAMES, st.one_of(NUMBERS, NON_NUMERIC), max_size=3),
            st.dictionaries(st.one_of(st.integers(), st.none()), NUMBERS, min_size=1, max_size=2),
        ))
        output = draw(st.one_of(
            st.just("per_sample"), st.just("per_sample"),
            st.builds(lambda x: {"accuracy": x}, NUMBERS),
            st.just({}), st.just(None),
            st.just("raise"),
            st.sampled_from([{"accuracy": "high"}, {"accuracy": np.zeros((2, 2, 2))}, ["not", "a", "mapping"],
                             {"accuracy": [0.5, "x"]}]),
        ))
        ops.append((kind, delta, bad_step, metrics, output, draw(st.sampled_from([0.0, 0.5, 10.0, 120.0]))))
    return overrides, spe, ops


def non_numeric(value) -> bool:
    if isinstance(value, (bool, str, bytes, complex)) or value is None:
        return True
    if isinstance(value, (list, dict)) or type(value) is object:
        return True
    return isinstance(value, np.ndarray) and value.size != 1


def wrong_shape(output) -> bool:
    """What evaluate_fn may not return: not a mapping, or a metric that is not numbers (one, one per item, or
    items x samples)."""
    if output in ("per_sample", "raise") or output is None:
        return False
    if not isinstance(output, dict):
        return True
    for value in output.values():
        if isinstance(value, str) or isinstance(value, np.ndarray) and value.ndim > 2:  # 2-D: items x samples
            return True
        if isinstance(value, list) and any(isinstance(v, str) for v in value):
            return True
    return False


def run_program(overrides, spe, ops):
    cfg = as_config(nested(overrides))
    clock = FakeClock()
    monitor = FakeResourceMonitor([{"accelerator_free_gb": 50.0, "accelerator_total_gb": 80.0},
                                   {"accelerator_free_gb": 1.0, "accelerator_total_gb": 80.0}])
    ev = AdaptiveEvaluator.from_config(cfg, clock=clock, steps_per_epoch=spe, resource_monitor=monitor,
                                       total_steps=draw_total(ops))
    on_error = cfg.evaluation.on_error
    evals = []
    ev.add_listener(lambda e: e["kind"] == "eval" and evals.append(e["step"]))
    ev.add_listener(lambda e: count(f"events: {e['kind']}"))
    step, last_observe, last_evaluate = 0, None, None
    current = {"output": None}

    def evaluate_fn(request):
        out = current["output"]
        if out == "raise":
            raise UserError("grader crashed")
        if out == "per_sample":
            return {"accuracy": [float(i % 3 == 0) for i in request.indices(200)]}
        return out

    returned = {}
    for kind, delta, bad_step, metrics, output, dt in ops:
        probe = step + delta  # a step going backwards is tried once; the run then goes on from `step`
        if delta >= 0:
            step = probe
        clock.advance(dt)
        current["output"] = output
        at = probe
        given = at if bad_step is None else bad_step
        valid_int = bad_step is None or isinstance(bad_step, np.integer)
        if isinstance(bad_step, np.integer):
            given = np.int64(at)
        if kind in ("observe", "both"):
            count("observe calls")
            backwards = last_observe is not None and at < last_observe
            try:
                ev.observe(metrics, given)
            except ValueError as exc:
                assert not valid_int or backwards, f"unexpected ValueError: {exc}"
                count("ValueError (backwards step)" if backwards else "ValueError (non-integer step)")
            except TypeError as exc:
                assert valid_int and not backwards
                bad = [k for k, v in metrics.items() if not isinstance(k, str) or not k or non_numeric(v)]
                assert bad, f"TypeError on valid metrics {metrics!r}: {exc}"
                count("TypeError (metric)")
                last_observe = at
            else:
                assert valid_int and not backwards, "a bad or backwards step was accepted"
                assert all(isinstance(k, str) and not non_numeric(v) for k, v in metrics.items()), metrics
                last_observe = at
        if kind in ("evaluate", "both"):
            count("evaluate calls")
            backwards = last_evaluate is not None and at < last_evaluate
            try:
                epoch, in_epoch = divmod(at, spe) if spe else (0, at)
                result = ev.evaluate(evaluate_fn, epoch, in_epoch, given)
            except ValueError as exc:
                assert not valid_int or backwards, f"unexpected ValueError: {exc}"
                count("ValueError (backwards step)" if backwards else "ValueError (non-integer step)")
                continue
            except TypeError as exc:  # evaluate_fn returned the wrong shape
                assert valid_int and not backwards
                assert wrong_shape(output), f"TypeError for {output!r}: {exc}"
                count("TypeError (evaluate_fn output)")
                last_evaluate = at
                continue
            except UserError:
                assert on_error == "raise" and output == "raise"
                count("user error re-raised")
                last_evaluate = at
                continue
            assert valid_int and not backwards, "a bad or backwards step was accepted"
            last_evaluate = at
            if result is not None:
                assert result.step == at and at not in returned, f"two evaluations at step {at}"
                returned[at] = result
    assert len(evals) == len(set(evals)), f"two evaluations in one step: {evals}"
    assert sorted(returned) == sorted(evals)
    return ev


def draw_total(ops) -> int:
    return max(1, sum(max(d, 0) for _, d, *_ in ops) // 2)  # eval_at_end fires somewhere mid-program


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs())
def check_programs(program):
    count("programs")
    run_program(*program)


def test_random_configs_and_call_sequences_raise_only_documented_errors():
    check_programs()


# -- floats, names and huge dicts through observe ------------------------------------------------------------

@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(FLOATS, FLOATS), min_size=1, max_size=80))
def check_every_float_is_data(values):
    count("float sequences")
    ev = AdaptiveEvaluator.from_config(CFG_EVERY_STEP)
    for g, (a, b) in enumerate(values):
        ev.observe({"train/reward": a, "train/loss": b}, g)
        count("floats observed")
        ev.evaluate(lambda: {"accuracy": a}, 0, g, g)
    assert len(ev.history) == len(values)  # every eval ran, whatever its value
    assert [r.step for r in ev.history] == list(range(len(values)))


CFG_EVERY_STEP = load_config(overrides=["trigger.freq_steps=1", "policy.budget.enabled=false",
                                        "policy.interval.enabled=false", "policy.alarm.enabled=false"])


def test_every_float_is_data_never_an_error():
    check_every_float_is_data()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(FLOATS, min_size=1, max_size=25), st.randoms(use_true_random=False), st.integers(1, 4))
def check_huge_and_empty_dicts(pool, rnd, steps):
    count("huge dicts")
    values = [rnd.choice(pool) for _ in range(500)]  # 500 keys from a small drawn pool of floats
    ev = AdaptiveEvaluator.from_config(CFG_EVERY_STEP)
    for g in range(steps):
        ev.observe({}, g)  # an empty dict is fine
        ev.observe({f"stream/{i}": v for i, v in enumerate(values)}, g)
        assert ev.evaluate(lambda: {f"m{i}": v for i, v in enumerate(values[:50])}, 0, g, g) is not None
    assert len(ev._detectors) == 500


def test_empty_and_huge_metric_dicts():
    check_huge_and_empty_dicts()


@pytest.mark.parametrize("value", ["0.5", None, b"1", [1.0, 2.0], {"a": 1.0}, 1j, True, object(), np.zeros(2)])
def test_non_numeric_value_is_a_type_error_naming_the_key(value):
    ev = AdaptiveEvaluator.from_config(CFG_EVERY_STEP)
    with pytest.raises(TypeError, match="'train/odd'"):
        ev.observe({"train/ok": 1.0, "train/odd": value}, 0)


def test_a_step_going_backwards_is_a_value_error_in_observe_and_evaluate():
    ev = AdaptiveEvaluator.from_config(CFG_EVERY_STEP)
    ev.observe({"a": 1.0}, 5)
    assert ev.evaluate(lambda: {"acc": 1.0}, 0, 5, 5) is not None
    assert ev.evaluate(lambda: {"acc": 1.0}, 0, 5, 5) is None  # a repeat: counted once
    with pytest.raises(ValueError, match=r"global_step went backwards \(5 -> 3\)"):
        ev.observe({"a": 1.0}, 3)
    with pytest.raises(ValueError, match=r"global_step went backwards in evaluate\(\) \(5 -> 3\)"):
        ev.evaluate(lambda: {"acc": 1.0}, 0, 3, 3)
    assert ev.evaluate(lambda: {"acc": 1.0}, 0, 6, 6) is not None
    assert [r.step for r in ev.history] == [5, 6]


def test_resuming_from_an_older_checkpoint_than_the_state_says_which_state_to_load():
    """The message told a user who had just called load_state_dict() to call load_state_dict(): their state was
    saved at a later step than the checkpoint they resumed from (found by a new-user probe)."""
    ev = AdaptiveEvaluator.from_config(CFG_EVERY_STEP)
    for g in range(6):
        ev.evaluate(lambda: {"acc": 1.0}, 0, g, g)
    resumed = AdaptiveEvaluator.from_config(CFG_EVERY_STEP)
    resumed.load_state_dict(ev.state_dict())
    with pytest.raises(ValueError, match=r"\(5 -> 3\): this evaluator has already seen step 5.*the state saved with "
                                         r"the checkpoint you resume from \(a state saved at step 5 belongs to a "
                                         r"later checkpoint than step 3\)"):
        resumed.evaluate(lambda: {"acc": 1.0}, 0, 3, 3)


def test_an_int_beyond_float_range_is_not_an_overflow_error():
    ev = AdaptiveEvaluator.from_config(CFG_EVERY_STEP)
    ev.observe({"train/count": 10**400}, 0)  # a number: +inf as a float, hence a nonfinite alarm
    assert ev.summary()["alarms"] == 1


@pytest.fixture(scope="module", autouse=True)
def fuzz_figures():
    """The number of fuzz examples run in this module, printed with -s once its tests ran (on each worker under
    pytest -n: a test that read the others' counts was skipped when the scheduler put it on another worker)."""
    yield
    if COUNTS:
        print("\nfuzz: " + ", ".join(f"{k}: {v}" for k, v in sorted(COUNTS.items())))

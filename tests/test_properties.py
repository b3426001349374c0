"""Property-based tests of the parsers that take outside input: tool calls in model
output, config values given with --set, and retrieval requests. Any input gives a result or the
parser's clean error, never another exception (tests/test_bad_inputs.py: task rows, metrics lines,
eval JSON). Example counts: EXAMPLES per property, derandomized so a failure reproduces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtpo.config import ConfigError, load_config
from rtpo.tools.parse import CLOSE, OPEN, ToolCall, ToolError, parse_tool_call

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = 300
PROPS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)
# JSON-ish text around the tags: real JSON, broken JSON, deep nesting, integers beyond int()'s digit limit
payloads = st.one_of(
    json_values.map(lambda v: json.dumps(v)),
    st.text(max_size=60),
    st.integers(min_value=1, max_value=3000).map(lambda n: "[" * n + "]" * n),
    st.integers(min_value=4301, max_value=6000).map(lambda n: '{"name": "python", "arguments": {"n": ' + "7" * n + "}}"),
)


# ------------------------------------------------------------------------------ tool calls
@PROPS
@given(before=st.text(max_size=30), payload=payloads, close=st.booleans(), think=st.booleans())
def test_any_model_output_is_a_call_an_error_observation_or_no_call(before, payload, close, think):
    from rtpo.tools import AIRLINE_SPECS

    text = ("<think>" + before + "</think>" if think else before) + OPEN + payload + (CLOSE if close else "")
    for specs in (None, AIRLINE_SPECS):  # the syntax alone, and checked against a tool set
        got = parse_tool_call(text, specs)
        assert got is None or isinstance(got, (ToolCall, ToolError))
        if isinstance(got, ToolError):
            assert got.message.startswith("Error:")


@pytest.mark.parametrize("payload", ["[" * 100_000 + "]" * 100_000,
                                     '{"name": "python", "arguments": {"n": ' + "9" * 5000 + "}}"])
def test_deeply_nested_or_huge_number_tool_call_is_an_error_observation(payload):
    """Found by the property above: json.loads raises RecursionError on deep nesting and ValueError
    (not JSONDecodeError) on an integer of more than 4,300 digits; both crashed the rollout."""
    got = parse_tool_call(OPEN + payload + CLOSE)
    assert isinstance(got, ToolError) and "not valid JSON" in got.message


# ------------------------------------------------------------------------------ --set config values
CONFIG_KEYS = ["train.lr", "train.steps", "train.temperature", "eval.samples", "seeds", "method.rtpo.group_size",
               "method.rtpo.sync", "env.math.max_turns", "model.tiny.hidden_size", "ablations.seeds", "data.seed",
               "train", "tasks", "no.such.key", "train.lr.deeper"]


@PROPS
@given(key=st.sampled_from(CONFIG_KEYS), value=st.one_of(
    st.text(max_size=20), json_values.map(json.dumps),
    st.sampled_from([".nan", ".inf", "-.inf", "1e999", "2e-5", "[0, .nan]", "{a: 1}", "!!python/object:os.system x",
                     "&a [*a]", "'", "[", "~", "0x10", "1_000"])))
def test_any_set_value_gives_a_config_or_a_config_error(key, value):
    try:
        cfg = load_config(ROOT / "config" / "config.yaml", [f"{key}={value}"])
    except ConfigError as e:
        assert "--set" in str(e) or "config" in str(e)
    else:
        assert isinstance(cfg, dict)


@pytest.mark.parametrize("value", ["&a [*a]", "&b {x: *b}"])
def test_a_set_value_that_contains_itself_is_refused_not_walked_for_ever(value):
    """Found by the property above: `--set train=&a [*a]` (a YAML alias to its own anchor) made every
    walk over the config (the finite-number check, the schema) loop for ever."""
    with pytest.raises(ConfigError, match=r"invalid config at 'train.*contains itself"):
        load_config(ROOT / "config" / "config.yaml", [f"train={value}"])


# ------------------------------------------------------------------------------ retrieval requests
@PROPS
@given(req=st.one_of(json_values, st.fixed_dictionaries(
    {"queries": st.one_of(st.lists(st.text(max_size=10), max_size=3), json_values),
     "topk": st.one_of(st.integers(), json_values), "return_scores": st.one_of(st.booleans(), json_values)})))
def test_any_retrieval_request_is_validated_or_refused_naming_the_field(req):
    from rtpo.retrieval.server import _validate

    try:
        queries, topk, scores = _validate(req, 10)
    except ValueError as e:
        assert str(e)
    else:
        assert all(isinstance(q, str) for q in queries) and isinstance(topk, int) and isinstance(scores, bool)


@PROPS
@given(body=st.binary(max_size=200))
def test_nesting_depth_of_any_bytes_is_a_number(body):
    from rtpo.retrieval.server import _nesting_depth

    assert isinstance(_nesting_depth(body), int)

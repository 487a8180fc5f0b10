"""Regression tests for defects found by probing (issue 13): hostile actions and imagined results are
error observations, never crashes, at Python's default recursion limit."""

import random
import re
import sys

import gymnasium as gym
import pytest

import envace_gym  # noqa: F401  (registers the envs)
from envace_gym.calls import ErrorCode, _split_tagged, json_value_problem, parse_calls
from envace_gym.rehearsal import parse_execution_result, parse_inline_result

DOMAINS = ["bank", "files", "retail", "travel"]
DEEP = "[" * 600 + "]" * 600


@pytest.fixture
def default_recursion_limit():
    """Hypothesis and pytest may raise the limit; these defects only show at the default one."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def _format_errors(info):
    return [e["code"] for e in info["errors"]]


@pytest.mark.parametrize("domain", DOMAINS)
def test_hostile_arguments_are_error_observations_and_the_episode_still_ends_cleanly(domain, default_recursion_limit):
    env = gym.make("EnvACE-ToolCall-v0", suite=f"builtin/{domain}", split="test")
    obs, info = env.reset(seed=0)
    tool = info["tools"][0]["function"]["name"]
    for arguments in ('{"a": ' + DEEP + "}", '{"memo": "x\\ud800"}', '{"a": NaN}', '{"a": Infinity}'):
        obs, reward, terminated, truncated, info = env.step(
            f'<tool_call>{{"name": "{tool}", "arguments": {arguments}}}</tool_call>'
        )
        assert _format_errors(info) == [ErrorCode.INVALID_TOOL_CALL_FORMAT.value], arguments
        assert '"error"' in obs and not terminated
    f"{obs}".encode()  # every observation is valid UTF-8
    for action in (f"{tool}(a={DEEP})", "<tool_call>" * 5957, '{"name": "' + tool + '", "arguments": {"a": 1}'):
        _, _, terminated, _, info = env.step(action)
        assert _format_errors(info) == [ErrorCode.INVALID_TOOL_CALL_FORMAT.value] and not terminated, action[:40]
    for _ in range(12):  # a JSON list is not a call: an answer, to each user turn until the episode ends
        _, reward, terminated, truncated, info = env.step(DEEP)
        if terminated or truncated:
            break
    assert terminated or truncated
    assert reward in (0.0, 1.0)  # scored (state hashed) without a UnicodeEncodeError


def test_json_value_problem_names_each_hostile_value():
    assert json_value_problem({"a": [1, "x", {"b": None}]}) is None
    deep = []
    for _ in range(600):
        deep = [deep]
    assert "deeper than 64" in json_value_problem(deep)
    assert "surrogate" in json_value_problem({"m": "x\ud800"})
    assert "surrogate" in json_value_problem({"x\udfff": 1})
    assert "non-finite" in json_value_problem([float("nan")])
    assert "set" in json_value_problem({"s": {1, 2}})


def test_the_linear_tag_split_matches_the_lazy_regex_it_replaced():
    regex = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
    rng = random.Random(0)
    pieces = ["<tool_call>", "</tool_call>", "a", "{", "}", " ", "\n", "<tool", "call>"]
    for _ in range(2000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 20)))
        bodies, rest = _split_tagged(text)
        assert bodies == regex.findall(text) and rest == regex.sub("", text), text


def test_thousands_of_open_tags_give_one_format_error():
    parsed = parse_calls("<tool_call>" * 20_000)
    assert parsed.calls == [] and len(parsed.errors) == 1 and "unbalanced" in parsed.errors[0].message


@pytest.mark.parametrize(
    "body",
    ['{"a": NaN}', '{"a": Infinity}', '{"m": "x\\ud800"}', '{"a": ' + DEEP + "}"],
)
def test_imagined_results_with_hostile_values_are_unusable(body, default_recursion_limit):
    value, reason = parse_execution_result(f"<execution_result>\n{body}\n</execution_result>")
    assert value is None and reason
    value, reason = parse_inline_result(body)
    assert value is None and reason
    assert parse_inline_result("[]") == ([], None)  # an empty list is a tool's answer

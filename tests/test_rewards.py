from kv_domain import kv_task

from envace_gym.calls import ToolCall
from envace_gym.rewards import (
    EpisodeRecord,
    answer_match,
    call_match,
    expected_calls_from_reference,
    normalize_answer,
    score_episode,
    values_match,
)


def test_call_match_is_order_free_and_strict():
    expected = [{"f": {"a": [1]}}, {"g": {"b": ["x", "y"]}}]
    assert call_match([ToolCall("g", {"b": "Y"}), ToolCall("f", {"a": 1})], expected) == 1.0
    assert call_match([ToolCall("f", {"a": 1})], expected) == 0.0  # a call missing
    assert call_match([ToolCall("f", {"a": 1}), ToolCall("g", {"b": "z"})], expected) == 0.0  # wrong value
    assert call_match([ToolCall("f", {"a": 1}), ToolCall("g", {"b": "x", "c": 1})], expected) == 0.0  # extra arg
    assert call_match([ToolCall("f", {"a": 1}), ToolCall("f", {"a": 1})], expected) == 0.0  # duplicate
    assert call_match([], []) == 1.0


def test_call_match_needs_a_real_assignment():
    # Greedy matching would pair the first call with the permissive slot and then fail.
    expected = [{"f": {"a": [1, 2]}}, {"f": {"a": [1]}}]
    assert call_match([ToolCall("f", {"a": 1}), ToolCall("f", {"a": 2})], expected) == 1.0


def test_optional_arguments_and_numbers():
    expected = [{"f": {"a": [1.0], "opt": ["", 3]}}]
    assert call_match([ToolCall("f", {"a": 1})], expected) == 1.0  # int accepted for float
    assert call_match([ToolCall("f", {"a": 1.0, "opt": 3})], expected) == 1.0
    assert call_match([ToolCall("f", {"a": 1.0, "opt": 4})], expected) == 0.0
    assert not values_match(True, 1) and not values_match(1.5, 1)
    assert values_match([1, {"k": "A b"}], [1.0, {"k": "ab"}])


def test_expected_calls_allow_omitting_defaults():
    task = kv_task()
    expected = expected_calls_from_reference(task)
    assert expected[0] == {"put": {"key": ["a"], "value": [7]}}


def test_answer_normalisation():
    assert normalize_answer("Your balance is $1,200.50.") == "your balance is 1200.5"
    assert normalize_answer("ID: O-123!") == "id o-123"
    task = kv_task()
    assert answer_match(["The value of a is 7."], task) == 1.0
    assert answer_match(["The value of a is 70."], task) == 0.0
    assert answer_match([None], task) == 0.0


def test_score_is_the_product_of_bases():
    task = kv_task()
    calls = [ToolCall("put", {"key": "a", "value": 7}), ToolCall("get", {"key": "a"})]
    good = EpisodeRecord(calls, turn_answers=["a is 7"], final_state_hash="h1")
    reward, comps = score_episode(task, good, expected_state_hash=lambda: "h1")
    assert reward == 1.0 and comps == {"call_match": 1.0, "state_match": 1.0, "answer_match": 1.0}
    reward, comps = score_episode(
        task, EpisodeRecord(calls, turn_answers=["a is 7"], final_state_hash="h2"), expected_state_hash=lambda: "h1"
    )
    assert reward == 0.0 and comps["state_match"] == 0.0 and comps["call_match"] == 1.0

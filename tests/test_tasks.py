import json

import pytest
from kv_domain import kv_task

from envace_gym.tasks import Task, TaskFormatError, TaskSuite


def test_jsonl_round_trip(tmp_path):
    suite = TaskSuite([kv_task("a"), kv_task("b", turns=2)], "kv")
    path = suite.save_jsonl(tmp_path / "kv.jsonl")
    loaded = TaskSuite.load_jsonl(path)
    assert [t.to_dict() for t in loaded] == [t.to_dict() for t in suite]
    assert loaded.get("b").user_turns == ("Store 7 under a, then read it back.", "Also store 8 under b.")
    assert loaded.get("b").reference[1].calls[0].arguments == {"key": "b", "value": 8}


def _write(tmp_path, lines):
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_bad_line_names_file_line_and_field(tmp_path):
    good = json.dumps(kv_task("a").to_dict())
    bad_turns = json.dumps({**kv_task("b").to_dict(), "user_turns": "not a list"})
    path = _write(tmp_path, [good, "", bad_turns])
    with pytest.raises(
        TaskFormatError, match=r"tasks\.jsonl:3: field 'user_turns': 'not a list' is not of type 'array'"
    ):
        TaskSuite.load_jsonl(path)


def test_bad_nested_field_and_bad_json(tmp_path):
    d = kv_task("a").to_dict()
    d["reference"][0]["steps"][0][0]["name"] = 5
    with pytest.raises(TaskFormatError, match=r":1: field 'reference/0/steps/0/0/name'"):
        TaskSuite.load_jsonl(_write(tmp_path, [json.dumps(d)]))
    with pytest.raises(TaskFormatError, match=r":2: not valid JSON"):
        TaskSuite.load_jsonl(_write(tmp_path, [json.dumps(kv_task("a").to_dict()), "{oops"]))
    bad_reward = {**kv_task("a").to_dict(), "reward": ["vibes"]}
    with pytest.raises(TaskFormatError, match="field 'reward/0'"):
        TaskSuite.load_jsonl(_write(tmp_path, [json.dumps(bad_reward)]))
    bad_tool = {
        **kv_task("a").to_dict(),
        "tools": [{"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": 3}}}}],
    }
    with pytest.raises(TaskFormatError, match="field 'tools/0'"):
        TaskSuite.load_jsonl(_write(tmp_path, [json.dumps(bad_tool)]))


def test_duplicate_ids_and_missing_file(tmp_path):
    line = json.dumps(kv_task("a").to_dict())
    with pytest.raises(TaskFormatError, match="duplicate task id 'a'"):
        TaskSuite.load_jsonl(_write(tmp_path, [line, line]))
    with pytest.raises(TaskFormatError, match="no such task file"):
        TaskSuite.load_jsonl(tmp_path / "missing.jsonl")


def test_reference_turns_must_match_user_turns():
    with pytest.raises(TaskFormatError, match="reference has 1 turns but there are 2 user turns"):
        Task.from_dict({**kv_task("a").to_dict(), "user_turns": ["one", "two"]})


def test_suite_filtering():
    a, b = kv_task("a"), kv_task("b")
    b = Task.from_dict({**b.to_dict(), "split": "train", "domain": "other"})
    suite = TaskSuite([a, b])
    assert [t.id for t in suite.filter(split="train")] == ["b"]
    assert suite.domains == ["kv", "other"] and suite.splits == ["test", "train"]
    assert "a" in suite and len(suite[:1]) == 1
    with pytest.raises(KeyError, match="no task 'zz'"):
        suite.get("zz")

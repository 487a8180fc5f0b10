"""The builtin "files" domain: toolkit behaviour, and the generated tasks' determinism, splits and rewards."""

import json
import posixpath

import pytest
from domain_checks import reference_hash, score

import envace_gym
from envace_gym.calls import ErrorCode, ToolCall
from envace_gym.envs.builtin.files import FilesToolkit, generate, make_backend
from envace_gym.rewards import EpisodeRecord, score_episode
from envace_gym.tasks import Task

MUTATING = {"write_file", "make_dir", "move", "delete"}


def small_state():
    return {
        "files": {
            "/home/ana/docs/budget.csv": "item 12\nrent 800",
            "/home/ana/docs/todo.txt": "call mum",
            "/home/ana/readme.md": "",
            "/home/bo/music/playlist.txt": "song one\nsong two\nsong three",
        },
        "dirs": ["/", "/home", "/home/ana", "/home/ana/docs", "/home/ana/empty", "/home/bo", "/home/bo/music"],
    }


@pytest.fixture
def kit():
    return FilesToolkit(small_state())


@pytest.fixture
def backend():
    b = make_backend(timeout=None)
    b.reset(Task(id="files-unit", user_turns=("hi",), initial_state=small_state()))
    return b


# ------------------------------------------------------------------------------ toolkit
def test_tools_and_schemas():
    specs = {s.name: s for s in FilesToolkit.tool_specs()}
    assert set(specs) == {"list_dir", "read_file", "write_file", "make_dir", "move", "delete", "find", "file_info"}
    for spec in specs.values():
        assert spec.description and spec.parameters["additionalProperties"] is False
        assert all(p.get("description") for p in spec.parameters["properties"].values()), spec.name
    assert specs["move"].parameters["required"] == ["src", "dst"]
    assert specs["write_file"].parameters["required"] == ["path", "content"]
    assert specs["find"].returns == {"type": "array", "items": {"type": "string"}}


def test_paths_are_normalised(kit):
    assert kit.read_file("  /home//ana/./docs/../docs/todo.txt ")["path"] == "/home/ana/docs/todo.txt"
    assert kit.list_dir("//home/ana/")["path"] == "/home/ana"
    with pytest.raises(ValueError, match="must be absolute"):
        kit.read_file("home/ana/docs/todo.txt")


def test_list_dir(kit):
    assert kit.list_dir("/home/ana") == {"path": "/home/ana", "folders": ["docs", "empty"], "files": ["readme.md"]}
    assert kit.list_dir("/") == {"path": "/", "folders": ["home"], "files": []}
    assert kit.list_dir("/home/ana/empty") == {"path": "/home/ana/empty", "folders": [], "files": []}
    with pytest.raises(ValueError, match="is a file, not a folder"):
        kit.list_dir("/home/ana/docs/todo.txt")
    with pytest.raises(ValueError, match="no such file or folder: '/home/cy'"):
        kit.list_dir("/home/cy")


def test_read_file(kit):
    assert kit.read_file("/home/bo/music/playlist.txt") == {
        "path": "/home/bo/music/playlist.txt",
        "content": "song one\nsong two\nsong three",
    }
    with pytest.raises(ValueError, match="is a folder, not a file"):
        kit.read_file("/home/ana/docs")
    with pytest.raises(ValueError, match="no such file or folder"):
        kit.read_file("/home/ana/docs/missing.txt")


def test_write_file_creates_and_overwrites(kit):
    assert kit.write_file("/home/ana/empty/new.txt", "hello") == {
        "path": "/home/ana/empty/new.txt",
        "size": 5,
        "created": True,
    }
    assert kit.state["files"]["/home/ana/empty/new.txt"] == "hello"
    assert kit.write_file("/home/ana/docs/todo.txt", "call dad\nbuy bread")["created"] is False
    assert kit.read_file("/home/ana/docs/todo.txt")["content"] == "call dad\nbuy bread"
    with pytest.raises(ValueError, match="parent folder '/home/ana/nope' does not exist"):
        kit.write_file("/home/ana/nope/x.txt", "x")
    with pytest.raises(ValueError, match="is a folder"):
        kit.write_file("/home/ana/docs", "x")


def test_make_dir(kit):
    assert kit.make_dir("/home/ana/archive/") == {"path": "/home/ana/archive"}
    # dirs stay sorted: the state has one canonical form whatever the order of creation.
    assert kit.state["dirs"] == sorted(kit.state["dirs"]) and "/home/ana/archive" in kit.state["dirs"]
    assert kit.list_dir("/home/ana")["folders"] == ["archive", "docs", "empty"]
    with pytest.raises(ValueError, match="already exists"):
        kit.make_dir("/home/ana/docs")
    with pytest.raises(ValueError, match="already exists"):
        kit.make_dir("/home/ana/readme.md")
    with pytest.raises(ValueError, match="parent folder '/home/ana/a' does not exist"):
        kit.make_dir("/home/ana/a/b")  # no implicit parents


def test_move_file(kit):
    assert kit.move("/home/ana/docs/todo.txt", "/home/ana/empty/tasks.txt") == {
        "from": "/home/ana/docs/todo.txt",
        "to": "/home/ana/empty/tasks.txt",
        "type": "file",
    }
    assert "/home/ana/docs/todo.txt" not in kit.state["files"]
    assert kit.state["files"]["/home/ana/empty/tasks.txt"] == "call mum"
    # dst is the full new path: an existing folder is refused with a hint, not moved into.
    with pytest.raises(ValueError, match="full new path"):
        kit.move("/home/ana/docs/budget.csv", "/home/bo/music")
    with pytest.raises(ValueError, match="no such file or folder"):
        kit.move("/home/ana/docs/todo.txt", "/home/ana/x.txt")
    with pytest.raises(ValueError, match="parent folder '/home/zed' does not exist"):
        kit.move("/home/ana/docs/budget.csv", "/home/zed/budget.csv")


def test_move_folder_takes_its_contents(kit):
    assert kit.move("/home/ana/docs", "/home/bo/docs")["type"] == "folder"
    assert sorted(kit.state["files"]) == [
        "/home/ana/readme.md",
        "/home/bo/docs/budget.csv",
        "/home/bo/docs/todo.txt",
        "/home/bo/music/playlist.txt",
    ]
    assert "/home/ana/docs" not in kit.state["dirs"] and "/home/bo/docs" in kit.state["dirs"]
    assert kit.state["dirs"] == sorted(kit.state["dirs"])
    with pytest.raises(ValueError, match="into itself"):
        kit.move("/home/bo", "/home/bo/music/bo")
    with pytest.raises(ValueError, match="root folder cannot be moved"):
        kit.move("/", "/home/root")


def test_delete(kit):
    assert kit.delete("/home/ana/docs/todo.txt") == {"deleted": "/home/ana/docs/todo.txt", "type": "file"}
    assert "/home/ana/docs/todo.txt" not in kit.state["files"]
    assert kit.delete("/home/ana/empty") == {"deleted": "/home/ana/empty", "type": "folder"}
    assert "/home/ana/empty" not in kit.state["dirs"]
    with pytest.raises(ValueError, match="is not empty"):
        kit.delete("/home/ana/docs")
    with pytest.raises(ValueError, match="root folder cannot be deleted"):
        kit.delete("/")
    with pytest.raises(ValueError, match="no such file or folder"):
        kit.delete("/home/ana/docs/todo.txt")


def test_find(kit):
    assert kit.find("budget.csv") == ["/home/ana/docs/budget.csv"]
    assert kit.find(" TODO.TXT ") == ["/home/ana/docs/todo.txt"]  # case-insensitive, trimmed
    assert kit.find("*.txt") == ["/home/ana/docs/todo.txt", "/home/bo/music/playlist.txt"]
    assert kit.find("docs") == ["/home/ana/docs"]  # folders are found too
    assert kit.find("nothing.txt") == []
    with pytest.raises(ValueError, match="not a path"):
        kit.find("/home/ana/docs/budget.csv")


def test_file_info(kit):
    assert kit.file_info("/home/bo/music/playlist.txt") == {
        "path": "/home/bo/music/playlist.txt",
        "type": "file",
        "size": 28,
        "lines": 3,
    }
    assert kit.file_info("/home/ana/readme.md")["lines"] == 0
    assert kit.file_info("/home/ana") == {"path": "/home/ana", "type": "folder", "files": 1, "folders": 2}
    with pytest.raises(ValueError, match="no such file or folder"):
        kit.file_info("/home/ana/ghost.md")


def test_domain_errors_roll_back_through_the_backend(backend):
    before = backend.state_hash()
    for call in [
        ToolCall("delete", {"path": "/home/ana/docs"}),
        ToolCall("move", {"src": "/home/ana/docs/todo.txt", "dst": "/home/bo/music"}),
        ToolCall("write_file", {"path": "/home/cy/x.txt", "content": "x"}),
        ToolCall("make_dir", {"path": "relative/dir"}),
    ]:
        result = backend.execute(call)
        assert result.error.code is ErrorCode.TOOL_EXECUTION_ERROR and "ValueError" in result.error.message
        assert backend.state_hash() == before
    bad_args = backend.execute(ToolCall("move", {"src": "/home/ana/docs/todo.txt", "to": "/home/ana/t.txt"}))
    assert bad_args.error.code is ErrorCode.INVALID_PARAMETERS and backend.state_hash() == before
    ok = backend.execute(ToolCall("move", {"src": "/home/ana/docs/todo.txt", "dst": "/home/ana/t.txt"}))
    assert ok.ok and ok.content["to"] == "/home/ana/t.txt" and backend.state_hash() != before
    assert backend.state()["files"]["/home/ana/t.txt"] == "call mum"


def test_registered_backend_name():
    b = envace_gym.backends.make_backend("builtin/files")
    assert {s.name for s in b.tools} >= {"find", "move", "read_file"}


# ------------------------------------------------------------------------------ generation
@pytest.fixture(scope="module")
def train():
    return generate("train", 600)


@pytest.fixture(scope="module")
def test_split():
    return generate("test", 150)


def test_generation_is_deterministic_and_well_formed(train, test_split):
    assert len(train) == 600 and len(test_split) == 150
    dump = lambda tasks: [json.dumps(t.to_dict(), sort_keys=True) for t in tasks]  # noqa: E731
    assert dump(generate("train", 600)) == dump(train)
    # A task does not depend on how many were generated.
    assert generate("test", 5)[4].to_dict() == test_split[4].to_dict()
    assert [t.id for t in train[:2]] == ["files-train-0000", "files-train-0001"]
    for task in train + test_split:
        assert task.backend == "builtin/files" and task.domain == "files" and task.system
        assert Task.from_dict(json.loads(json.dumps(task.to_dict()))).to_dict() == task.to_dict()
        st = task.initial_state
        # Every file lives in an existing folder, and dirs are in canonical (sorted) order.
        assert all(posixpath.dirname(p) in st["dirs"] for p in st["files"]) and st["dirs"] == sorted(st["dirs"])
    assert len({t.id for t in train + test_split}) == 750
    with pytest.raises(ValueError, match="unknown split"):
        generate("dev", 1)


def _entities(tasks):
    out = {"users": set(), "folders": set(), "stems": set(), "words": set()}
    for task in tasks:
        st = task.initial_state
        paths = list(st["files"]) + st["dirs"]
        texts = list(st["files"].values())
        for call in task.reference_calls:
            paths += [v for k, v in call.arguments.items() if k in ("path", "src", "dst")]
            texts += [call.arguments["content"]] if "content" in call.arguments else []
        for p in paths:
            parts = p.strip("/").split("/")
            if len(parts) >= 2 and parts[0] == "home":
                out["users"].add(parts[1])
            for part in parts[2:]:  # below the home folder: folder names, and file names by stem
                stem, ext = posixpath.splitext(part)
                out["stems" if ext else "folders"].add(stem)
        out["words"] |= {w for text in texts for w in text.split() if w.isalpha()}
    return out


def test_splits_are_disjoint_in_entities(train, test_split):
    a, b = _entities(train), _entities(test_split)
    for key in a:
        assert a[key] and b[key], key
        assert not a[key] & b[key], (key, a[key] & b[key])


def test_task_shapes_match_their_category(train):
    for task in train:
        category, calls = task.metadata["category"], task.reference_calls
        steps = [step for turn in task.reference for step in turn.steps]
        if category == "no_tool":
            assert not calls and task.reward == ("call_match", "answer_match")
            assert task.reference[0].answer_contains
        elif category == "parallel":
            assert len(steps) == 1 and 2 <= len(steps[0]) <= 3
        elif category == "multi_turn":
            assert len(task.user_turns) == 2 and all(turn.steps for turn in task.reference)
        elif category == "single":
            assert len(calls) == 1
        elif category == "multi_step":
            assert len(steps) >= 2 and all(len(s) == 1 for s in steps)
        else:  # other: a listing, then parallel calls over what it revealed
            assert len(steps) == 2 and len(steps[0]) == 1 and len(steps[1]) >= 2
        changes = any(c.name in MUTATING for c in calls)
        assert ("state_match" in task.reward) == changes, task.id
        # Read-only tasks are graded on what the answer reports.
        if not changes:
            assert "answer_match" in task.reward and any(t.answer_contains for t in task.reference), task.id


def test_dependent_paths_are_never_in_the_prompt(train):
    # In multi-step tasks only the file's name is given: its path must come from find.
    tasks = [t for t in train if t.metadata["category"] == "multi_step"]
    assert tasks
    for task in tasks:
        said = " ".join(task.user_turns)
        first, *rest = task.reference_calls
        assert first.name == "find" and first.arguments["name"] in said
        assert len(first.result) == 1, task.id  # the name identifies exactly one file
        (found,) = first.result
        assert found not in said
        assert rest[0].arguments.get("path", rest[0].arguments.get("src")) == found, task.id


def test_references_are_unique_solutions(train, test_split):
    for task in train + test_split:
        kind, calls = task.metadata["kind"], task.reference_calls
        if kind == "largest":
            sizes = [c.result["size"] for c in calls[1:]]
            assert len(set(sizes)) == len(sizes), task.id
            assert len(calls) - 1 == len(calls[0].result["files"])  # every file in the folder was measured
        if kind == "move_all":
            moved = {posixpath.basename(c.arguments["src"]) for c in calls[1:]}
            assert moved == set(calls[0].result["files"]) and len(moved) >= 2
        for call in calls:
            if call.name in ("make_dir", "move"):
                new = call.arguments.get("dst", call.arguments.get("path"))
                assert new not in task.initial_state["files"] and new not in task.initial_state["dirs"]


def _reference_hash(task):
    return reference_hash(task, make_backend)


def _score(task, calls, answers, final_hash):
    return score(task, calls, answers, final_hash, make_backend)


def test_wrong_destination_or_missing_lookup_fails(train):
    task = next(
        t
        for t in train
        if t.metadata["kind"] == "find_move" and sum(d.count("/") == 3 for d in t.initial_state["dirs"]) >= 3
    )
    find_call, move_call = (c.call for c in task.reference_calls)
    answers = [t.answer for t in task.reference]
    b = make_backend(timeout=None)
    # Skipping the find (even with the right move) breaks call_match.
    b.reset(task)
    assert b.execute(move_call).ok
    assert _score(task, [move_call], answers, b.state_hash()) == 0.0
    # Moving the file into some other folder breaks both call_match and state_match.
    wanted = posixpath.dirname(move_call.arguments["dst"])
    other = next(
        d
        for d in task.initial_state["dirs"]
        if d.count("/") == 3 and d not in (wanted, posixpath.dirname(move_call.arguments["src"]))
    )
    wrong = ToolCall(
        "move", {"src": move_call.arguments["src"], "dst": f"{other}/{posixpath.basename(move_call.arguments['src'])}"}
    )
    b.reset(task)
    assert b.execute(find_call).ok and b.execute(wrong).ok
    assert _score(task, [find_call, wrong], answers, b.state_hash()) == 0.0


def test_a_wrong_copy_content_fails_state_match(train):
    task = next(t for t in train if t.metadata["kind"] == "find_copy")
    calls = [c.call for c in task.reference_calls]
    answers = [t.answer for t in task.reference]
    write = calls[-1]
    # call_match normalises strings, so "almost right" content can pass it; state_match is exact.
    sloppy = ToolCall("write_file", {**write.arguments, "content": write.arguments["content"].upper()})
    b = make_backend(timeout=None)
    b.reset(task)
    for c in calls[:-1] + [sloppy]:
        assert b.execute(c).ok
    reward, parts = score_episode(
        task,
        EpisodeRecord(calls[:-1] + [sloppy], turn_answers=answers, final_state_hash=b.state_hash()),
        expected_state_hash=lambda: _reference_hash(task),
    )
    assert parts == {"call_match": 1.0, "state_match": 0.0} and reward == 0.0


def test_echoing_the_prompt_start_does_not_solve_no_tool_tasks(train, test_split):
    # The random baseline sometimes answers with the first 40 characters of the prompt.
    tasks = [t for t in train + test_split if t.metadata["category"] == "no_tool"]
    assert tasks
    for task in tasks:
        assert _score(task, [], [task.user_turns[0][:40]], None) == 0.0, task.id
        assert _score(task, [], [task.reference[0].answer], None) == 1.0, task.id

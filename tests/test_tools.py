from typing import Literal

import pytest

from envace_gym.tools import SchemaError, ToolSpec, bfcl_to_json_schema


def book(
    flight_id: str, seats: int, cabin: Literal["economy", "business"] = "economy", notes: list[str] | None = None
) -> dict:
    """Book seats on a flight.

    Args:
        flight_id: The flight to book, e.g. "LX-12".
        seats: How many seats; continues
            on a second line.
        cabin: Cabin class.
        notes: Free-text notes.

    Returns:
        The booking.
    """
    return {}


def test_from_function_builds_schema_from_hints_and_docstring():
    spec = ToolSpec.from_function(book)
    assert spec.name == "book" and spec.description == "Book seats on a flight."
    props = spec.parameters["properties"]
    assert props["flight_id"] == {"type": "string", "description": 'The flight to book, e.g. "LX-12".'}
    assert props["seats"]["type"] == "integer"
    assert props["seats"]["description"] == "How many seats; continues on a second line."
    assert props["cabin"]["enum"] == ["economy", "business"] and props["cabin"]["default"] == "economy"
    assert props["notes"]["anyOf"] == [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]
    assert spec.parameters["required"] == ["flight_id", "seats"]
    assert spec.returns == {"type": "object"}


def test_validation_messages_are_readable():
    spec = ToolSpec.from_function(book)
    assert spec.validate_arguments({"flight_id": "LX-12", "seats": 2}) == []
    problems = spec.validate_arguments({"seats": "two", "cabin": "first", "extra": 1})
    text = " | ".join(problems)
    assert "'flight_id' is a required property" in text
    assert "seats: 'two' is not of type 'integer'" in text
    assert "cabin:" in text and "extra" in text
    assert spec.validate_arguments([1]) == ["arguments must be a JSON object, got list"]


def test_kept_messages_tell_apart_what_jsonschema_tells_apart(monkeypatch):
    """The messages of an invalid call are kept per instance (a policy repeats its wrong calls): an instance
    that only looks the same (True for 1, a tuple for a list, other key order) gets jsonschema's messages for
    it, not the kept ones of its look-alike."""
    from envace_gym import tools

    spec = ToolSpec.from_function(book)
    cases = [
        {"flight_id": "LX", "seats": 1, "extra": 1},
        {"flight_id": "LX", "seats": True, "extra": 1},
        {"flight_id": "LX", "seats": 1.0, "extra": 1},
        {"flight_id": "LX", "seats": 2, "notes": ("a",), "extra": 1},
        {"flight_id": "LX", "seats": 2, "notes": ["a"], "extra": 1},
        {"flight_id": "LX", "seats": 2, "notes": ["a", 1]},
        {"flight_id": "LX", "seats": 2, "b": 1, "a": 2},
        {"flight_id": "LX", "seats": 2, "a": 2, "b": 1},
    ]
    fresh = []
    for case in cases:  # jsonschema's own messages, nothing kept
        monkeypatch.setattr(tools, "_KEPT_MESSAGES", tools.KeptByIdentity(4096))
        fresh.append(spec.validate_arguments(case))
    assert "seats: True is not of type 'integer'" in fresh[1] and fresh[0] != fresh[1]
    assert len(fresh[3]) == 2 and len(fresh[4]) == 1  # jsonschema refuses a tuple where the schema says array
    for _ in range(2):  # kept on the first round, read back on the second
        assert [spec.validate_arguments(c) for c in cases] == fresh
    spec.validate_arguments(cases[0]).append("a caller's edit")
    assert spec.validate_arguments(cases[0]) == fresh[0]  # each caller gets its own list
    assert spec.validate_arguments({"flight_id": "LX", "seats": 1}) == []


def test_openai_round_trip_both_shapes():
    spec = ToolSpec.from_function(book)
    wrapped = spec.to_openai()
    assert wrapped["type"] == "function"
    assert ToolSpec.from_openai(wrapped) == spec
    assert ToolSpec.from_openai(wrapped["function"]) == spec


def test_bfcl_dialect_conversion():
    doc = {
        "name": "math.triangle_area",
        "description": "Area of a triangle.",
        "parameters": {
            "type": "dict",
            "properties": {
                "base": {"type": "float", "description": "base"},
                "dims": {"type": "tuple", "items": {"type": "integer"}},
                "meta": {"type": "dict", "properties": {"unit": {"type": "string"}}},
                "anything": {"type": "any"},
            },
            "required": ["base"],
        },
    }
    spec = ToolSpec.from_bfcl(doc)
    assert spec.name == "math.triangle_area"
    props = spec.parameters["properties"]
    assert spec.parameters["type"] == "object"
    assert props["base"]["type"] == "number" and props["dims"] == {"type": "array", "items": {"type": "integer"}}
    assert props["meta"]["type"] == "object" and "type" not in props["anything"]
    assert spec.validate_arguments({"base": 3, "dims": [1, 2], "anything": [None]}) == []
    assert spec.validate_arguments({"base": "3"})
    with pytest.raises(SchemaError, match="unknown BFCL type"):
        bfcl_to_json_schema({"type": "quaternion"})


def test_returns_schema_validates_results():
    spec = ToolSpec.from_openai(
        {"name": "f", "parameters": {"type": "object"}, "returns": {"type": "object", "required": ["ok"]}}
    )
    assert spec.validate_result({"ok": True}) == []
    assert spec.validate_result({"nope": 1})
    assert ToolSpec("g").validate_result("anything") == []


def test_invalid_schemas_are_rejected():
    with pytest.raises(SchemaError, match="invalid parameters schema"):
        ToolSpec("f", parameters={"type": "object", "properties": {"a": {"type": "nonsense"}}})
    with pytest.raises(SchemaError, match="must be an object"):
        ToolSpec("f", parameters={"type": "array"})
    with pytest.raises(SchemaError):
        ToolSpec("")

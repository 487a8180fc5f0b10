"""A task built wrong fails when it is made, with one line naming the task, the field and the fix; a tool
parameter without a type hint fails where the tool is defined."""

import json
import re
from typing import Any

import gymnasium as gym
import pytest

import envace_gym  # noqa: F401  (registers EnvACE-ToolCall-v0)
from envace_gym import RefCall, RefTurn, Task, TaskSuite, Toolkit, register_backend, tool
from envace_gym.backends import PythonBackend
from envace_gym.tasks import TaskFormatError
from envace_gym.tools import SchemaError, ToolSpec


class Weather(Toolkit):
    run_inline = True

    @tool
    def get_weather(self, city: str) -> dict:
        """The weather in a city.

        Args:
            city: The city's name.
        """
        return {"city": city, "temp_c": 21}

    @tool
    def set_alert(self, city: str, above_c: float) -> dict:
        """Alert when the temperature passes a threshold.

        Args:
            city: The city's name.
            above_c: The threshold in degrees Celsius.
        """
        alerts = self.state.setdefault("alerts", [])
        alerts.append({"city": city, "above_c": above_c})
        return {"alert_id": len(alerts)}


register_backend("test/weather", lambda **kw: PythonBackend(Weather, **kw), overwrite=True)
TOOLS = tuple(spec.to_openai() for spec in Weather.tool_specs())
ALERT = {"city": "Paris", "above_c": 30}


def _task(*steps, tools=TOOLS, user_turns=("Alert me above 30 C in Paris.",), **kw):
    return Task(
        id="t",
        user_turns=user_turns,
        tools=tools,
        backend="test/weather",
        reference=(RefTurn(steps=tuple(steps), answer="Done."),),
        **kw,
    )


def _fails(message, make):
    with pytest.raises(TaskFormatError, match=f"^{re.escape(message)}$"):
        make()


def test_good_task_passes():
    task = _task((RefCall("set_alert", ALERT, {"alert_id": 1}),))
    assert TaskSuite([task]).get("t") is task


def test_user_turns_string():
    _fails(
        "task 't': user_turns is a string, not a sequence of turns; "
        "write user_turns=('What is the weather in Paris?',)",
        lambda: Task(id="t", user_turns="What is the weather in Paris?", tools=TOOLS),
    )


def test_user_turn_not_a_string():
    _fails(
        "task 't': user_turns[1] is a int, not a string; each user turn is the text of one message",
        lambda: Task(id="t", user_turns=("Hello", 3)),
    )


def test_result_beside_its_call():
    _fails(
        "task 't': reference[0].steps[0][1] is a dict, not a RefCall; put each call's result inside it: "
        "RefCall('set_alert', arguments, result)",
        lambda: _task((RefCall("set_alert", ALERT), {"alert_id": 1})),
    )


def test_call_where_a_step_belongs():
    _fails(
        "task 't': reference[0].steps[0] is a RefCall, not a step; a step is a tuple of parallel calls: "
        "steps=((RefCall(name, arguments, result),),)",
        lambda: _task(RefCall("set_alert", ALERT, {"alert_id": 1})),
    )


def test_reference_turn_not_a_refturn():
    _fails(
        "task 't': reference[0] is a dict, not a RefTurn; write RefTurn(steps=..., answer=...)",
        lambda: Task(id="t", user_turns=("Hi",), reference=({"answer": "Hello"},)),
    )


def test_call_to_undeclared_tool():
    _fails(
        "task 't': reference[0].steps[0][0] calls 'get_forecast', which the task's tools do not declare; "
        "call one of: get_weather, set_alert",
        lambda: _task((RefCall("get_forecast", {"city": "Paris"}, {}),)),
    )


def test_arguments_off_schema():
    _fails(
        "task 't': reference[0].steps[0][0] has arguments that do not fit 'get_weather': 'city' is a required "
        "property; Additional properties are not allowed ('town' was unexpected); "
        "the tool takes get_weather(city: string)",
        lambda: _task((RefCall("get_weather", {"town": "Paris"}, {}),)),
    )
    _fails(
        "task 't': reference[0].steps[0][0] has arguments that do not fit 'set_alert': above_c: '30' is not of "
        "type 'number'; the tool takes set_alert(city: string, above_c: number)",
        lambda: _task((RefCall("set_alert", {"city": "Paris", "above_c": "30"}, {}),)),
    )


def test_marked_off_schema_checks_names_only():
    # An imported benchmark's ground truth may break the benchmark's own schema (BFCL): marked, it loads.
    off = {"reference_off_schema": True}
    assert _task((RefCall("set_alert", {"city": "Paris", "above_c": "30"}, {}),), metadata=off)
    with pytest.raises(TaskFormatError, match="'get_forecast', which the task's tools do not declare"):
        _task((RefCall("get_forecast", {"city": "Paris"}, {}),), metadata=off)


def test_bad_tool_spec_named():
    _fails(
        "task 't': field 'tools/0': tool spec needs a non-empty string 'name': ['parameters']",
        lambda: _task((RefCall("set_alert", ALERT, {}),), tools=({"parameters": {}},)),
    )


def test_jsonl_names_file_and_line(tmp_path):
    good = _task((RefCall("set_alert", ALERT, {"alert_id": 1}),)).to_dict()
    bad = {**json.loads(json.dumps(good)), "id": "u"}
    bad["reference"][0]["steps"][0][0]["name"] = "set_alarm"
    path = tmp_path / "weather.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    _fails(
        f"{path}:2: task 'u': reference[0].steps[0][0] calls 'set_alarm', which the task's tools do not "
        "declare; call one of: get_weather, set_alert",
        lambda: TaskSuite.load_jsonl(path),
    )


def test_task_without_tools_checked_at_reset():
    # Its tools are its backend's: known, and checked, once the env resets on it.
    task = _task((RefCall("set_alarm", ALERT, {}),), tools=())
    env = gym.make("EnvACE-ToolCall-v0", tasks=TaskSuite([task]), split="train")
    _fails(
        "task 't': reference[0].steps[0][0] calls 'set_alarm', which the tools of backend 'test/weather' do "
        "not declare; call one of: get_weather, set_alert",
        lambda: env.reset(options={"task_id": "t"}),
    )
    fine = _task((RefCall("set_alert", ALERT, {"alert_id": 1}),), tools=())
    env = gym.make("EnvACE-ToolCall-v0", tasks=TaskSuite([fine]), split="train")
    obs, _ = env.reset(options={"task_id": "t"})
    assert obs == "Alert me above 30 C in Paris."


def test_tool_parameter_without_hint():
    message = (
        "tool 'get_weather': parameter 'city' has no type hint; annotate it (e.g. `city: str`), "
        "or write `city: Any` to accept any JSON value"
    )
    with pytest.raises(SchemaError, match=f"^{re.escape(message)}$"):

        class Unhinted(Toolkit):
            @tool
            def get_weather(self, city) -> dict:
                return {}

    def get_weather(city):
        return {}

    with pytest.raises(SchemaError, match=f"^{re.escape(message)}$"):
        ToolSpec.from_function(get_weather)
    with pytest.raises(SchemaError, match=f"^{re.escape(message)}$"):
        PythonBackend(functions=[get_weather])


def test_explicit_any_is_any_json_value():
    def echo(value: Any, *args, **kwargs) -> dict:
        return {}

    assert ToolSpec.from_function(echo).parameters["properties"]["value"] == {}

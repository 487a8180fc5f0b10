from kv_domain import HANG_FINISHED, KVToolkit, kv_task

from envace_gym.backends import PythonBackend, ToolResult, tool
from envace_gym.calls import ErrorCode, ToolCall


def fresh(timeout=0.5):
    backend = PythonBackend(KVToolkit, timeout=timeout)
    backend.reset(kv_task())
    return backend


def test_fresh_state_per_episode_and_call_count():
    backend = fresh()
    assert backend.execute(ToolCall("put", {"key": "a", "value": 1})).ok
    assert backend.state()["data"] == {"z": 1, "a": 1}
    assert backend.call_count == 1
    backend.reset(kv_task())
    assert backend.state()["data"] == {"z": 1} and backend.call_count == 0


def test_results_are_detached_from_state():
    backend = fresh()
    result = backend.execute(ToolCall("get", {"key": "z"}))
    result.content["value"] = 999
    assert backend.state()["data"]["z"] == 1


def test_deterministic_checks_come_first():
    backend = fresh()
    before = backend.state_hash()
    unknown = backend.execute(ToolCall("drop_table", {}))
    assert unknown.error.code is ErrorCode.TOOL_NOT_AVAILABLE and "available: get" in unknown.error.message
    bad = backend.execute(ToolCall("put", {"key": "a", "value": "seven"}))
    assert bad.error.code is ErrorCode.INVALID_PARAMETERS and "value" in bad.error.message
    extra = backend.execute(ToolCall("put", {"key": "a", "value": 1, "x": 2}))
    assert extra.error.code is ErrorCode.INVALID_PARAMETERS
    assert backend.state_hash() == before


def test_raising_tool_is_contained_and_rolled_back():
    backend = fresh()
    before = backend.state_hash()
    result = backend.execute(ToolCall("put_then_crash", {"key": "a"}))
    assert result.error.code is ErrorCode.TOOL_EXECUTION_ERROR and "RuntimeError: boom" in result.error.message
    assert backend.state_hash() == before
    domain_error = backend.execute(ToolCall("get", {"key": "missing"}))
    assert domain_error.error.code is ErrorCode.TOOL_EXECUTION_ERROR and "no key" in domain_error.error.message


def test_hanging_tool_times_out_and_late_writes_do_not_leak():
    backend = fresh(timeout=0.2)
    before = backend.state_hash()
    HANG_FINISHED.clear()
    result = backend.execute(ToolCall("put_then_hang", {"key": "a", "seconds": 1.5}))
    assert result.error.code is ErrorCode.TOOL_TIMEOUT
    assert not HANG_FINISHED.is_set()  # execute returned while the tool was still running
    assert backend.state_hash() == before
    assert HANG_FINISHED.wait(10)  # the abandoned call finishes, on an instance nobody uses any more
    assert backend.state_hash() == before
    assert backend.execute(ToolCall("put", {"key": "b", "value": 2})).ok
    assert backend.timeouts == 1


def test_non_json_result_is_an_error():
    result = fresh().execute(ToolCall("not_json", {}))
    assert result.error.code is ErrorCode.TOOL_EXECUTION_ERROR and "not JSON" in result.error.message


def test_task_tools_restrict_the_episode():
    task = kv_task()
    # No reference: it calls put, which a task that withholds put may not (tests/test_task_checks.py).
    only_get = type(task)(
        **{**task.__dict__, "tools": tuple(t for t in task.tools if t["function"]["name"] == "get"), "reference": ()}
    )
    backend = PythonBackend(KVToolkit)
    backend.reset(only_get)
    assert [s.name for s in backend.tools] == ["get"]
    assert backend.execute(ToolCall("put", {"key": "a", "value": 1})).error.code is ErrorCode.TOOL_NOT_AVAILABLE


def test_plain_functions_and_copy():
    @tool
    def add(a: int, b: int) -> int:
        """Add.

        Args:
            a: first
            b: second
        """
        return a + b

    backend = PythonBackend(functions=[add], timeout=None)
    backend.reset()
    assert backend.execute(ToolCall("add", {"a": 2, "b": 3})).content == 5
    kv = fresh()
    clone = kv.copy()
    clone.execute(ToolCall("put", {"key": "c", "value": 3}))
    assert "c" not in kv.state()["data"] and clone.state()["data"]["c"] == 3


def test_tool_result_payloads():
    ok = ToolResult(ToolCall("f", {}), {"a": 1})
    err = ToolResult.failure(ToolCall("f", {}), ErrorCode.TOOL_TIMEOUT, "slow")
    assert ok.to_message_content() == '{"a": 1}'
    assert err.payload() == {"error": {"code": "TOOL_TIMEOUT", "message": "slow"}}
    assert err.to_dict()["error"]["tool"] == "f"

"""Where tools run by default (issue 20, item 4): a toolkit that does not declare ``run_inline`` in a worker
process a hang can be ended in; the builtin toolkits in the caller's thread; thread mode only when asked."""

import multiprocessing
import os
import threading

import gymnasium as gym
import pytest

import envace_gym  # noqa: F401  (registers the envs)
from envace_gym import ToolCall, format_calls
from envace_gym.backends import PythonBackend, Toolkit, register_backend, tool
from envace_gym.backends.isolated import ProcessBackend, real_backend
from envace_gym.tasks import Task


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_user_toolkits_hung_tool_is_killed_under_the_defaults_and_leaves_no_thread():
    """8 timeouts of a hanging tool used to leave 8 threads running (thread mode was the default)."""
    from kv_domain import kv_task

    env = gym.make("EnvACE-ToolCall-v0", tasks=[kv_task()], split=None, tool_timeout=0.5, max_turns=20)
    env.reset(seed=0)
    backend = env.unwrapped.backend
    assert isinstance(backend, ProcessBackend)
    threads_before = set(threading.enumerate())
    env.step(format_calls([ToolCall("put", {"key": "a", "value": 7})]))
    workers = []
    for _ in range(8):
        workers.append(backend._process.pid)
        _, _, _, _, info = env.step(format_calls([ToolCall("put_then_hang", {"key": "h", "seconds": 600})]))
        assert info["errors"][0]["code"] == "TOOL_TIMEOUT"
    assert set(threading.enumerate()) == threads_before  # no thread left behind, hung or otherwise
    assert all(_gone(pid) for pid in workers)  # every hung worker was killed, none runs on
    assert backend.restarts == 8 and backend.state()["data"] == {"z": 1, "a": 7}
    obs, _, _, _, info = env.step(format_calls([ToolCall("get", {"key": "a"})]))
    assert info["tool_results"][0]["ok"] and '"value": 7' in obs
    last = backend._process.pid
    env.close()
    assert _gone(last)


@pytest.mark.parametrize("domain", ["bank", "files", "retail", "travel"])
def test_the_builtin_toolkits_still_run_inline_under_the_defaults(domain):
    env = gym.make("EnvACE-ToolCall-v0", suite=f"builtin/{domain}", split="test")
    env.reset(seed=0)
    backend = env.unwrapped.backend
    assert isinstance(backend, PythonBackend) and backend.runs_inline
    children = multiprocessing.active_children()
    env.step("<tool_call>" + '{"name": "nope", "arguments": {}}' + "</tool_call>")
    assert multiprocessing.active_children() == children  # no worker started
    env.close()


def test_thread_mode_is_the_opt_in_and_process_mode_isolates_even_inline_toolkits():
    from kv_domain import kv_task

    threaded = gym.make("EnvACE-ToolCall-v0", tasks=[kv_task()], split=None, tool_isolation="thread")
    threaded.reset(seed=0)
    assert isinstance(threaded.unwrapped.backend, PythonBackend) and not threaded.unwrapped.backend.runs_inline
    isolated = gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="test", tool_isolation="process")
    isolated.reset(seed=0)
    assert isinstance(isolated.unwrapped.backend, ProcessBackend)
    isolated.close()
    no_timeout = gym.make("EnvACE-ToolCall-v0", tasks=[kv_task()], split=None, tool_timeout=None)
    no_timeout.reset(seed=0)
    assert isinstance(no_timeout.unwrapped.backend, PythonBackend)  # no timeout asked for: nothing to end
    with pytest.raises(ValueError, match="tool_isolation must be one of"):
        gym.make("EnvACE-ToolCall-v0", tasks=[kv_task()], split=None, tool_isolation="threads")


def test_a_toolkit_defined_in_a_function_and_registered_with_a_lambda_runs_in_a_worker():
    """The worker is forked, so nothing is pickled: a toolkit that is not importable works there as here."""

    class Sleepy(Toolkit):
        @tool
        def nap(self, seconds: float) -> dict:
            """Sleeps.

            Args:
                seconds: How long.
            """
            import time

            time.sleep(seconds)
            self.state["naps"] = self.state.get("naps", 0) + 1
            return {"slept": seconds}

    register_backend("test/sleepy-closure", lambda **kw: PythonBackend(Sleepy, **kw), overwrite=True)
    task = Task(
        id="sleepy-1",
        backend="test/sleepy-closure",
        user_turns=("nap",),
        tools=tuple(s.to_openai() for s in Sleepy.tool_specs()),
    )
    env = gym.make("EnvACE-ToolCall-v0", tasks=[task], split=None, tool_timeout=0.5)
    env.reset(seed=0)
    backend = env.unwrapped.backend
    assert isinstance(backend, ProcessBackend)
    obs, _, _, _, info = env.step(format_calls([ToolCall("nap", {"seconds": 0})]))
    assert info["tool_results"][0]["ok"]
    hung = backend._process.pid
    _, _, _, _, info = env.step(format_calls([ToolCall("nap", {"seconds": 600})]))
    assert info["errors"][0]["code"] == "TOOL_TIMEOUT" and _gone(hung)
    assert backend.state() == {"naps": 1}
    env.close()


def test_where_no_worker_can_start_auto_falls_back_to_the_watchdog_thread_with_a_warning(monkeypatch):
    """A daemonic process (an AsyncVectorEnv worker) may not start children: the documented fallback."""
    import kv_domain  # noqa: F401  (registers test/kv)

    monkeypatch.setattr(multiprocessing.current_process(), "daemon", True)
    with pytest.warns(RuntimeWarning, match="watchdog thread .* daemonic process"):
        backend = real_backend("test/kv", "auto", timeout=0.5)
    assert isinstance(backend, PythonBackend)
    monkeypatch.undo()
    assert isinstance(real_backend("test/kv", "auto", timeout=0.5), ProcessBackend)

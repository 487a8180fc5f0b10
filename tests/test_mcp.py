"""MCP backends: the shipped server, oracle episodes through it, and servers that die or hang."""

import sys
from pathlib import Path

import gymnasium as gym
import pytest

from envace_gym import ToolCall, format_calls
from envace_gym.agents.evaluate import evaluate
from envace_gym.agents.scripted import OraclePolicy
from envace_gym.backends.mcp import MCPBackend

SERVER = f"{sys.executable} -m envace_gym.envs.builtin.mcp_server"
FLAKY = [sys.executable, str(Path(__file__).with_name("flaky_mcp_server.py"))]


def test_oracle_scores_one_through_the_shipped_server():
    env = gym.make("EnvACE-ToolCall-v0", suite="builtin/retail", split="test", backend=f"mcp:{SERVER} retail")
    try:
        report = evaluate(env, OraclePolicy(env.unwrapped.suite), 15, progress=False)
        assert all(r.success for r in report.results)
        assert any("state_match" in r.components for r in report.results)  # the server's own state hash
        env.reset(seed=0)
        _, _, _, _, info = env.step(format_calls([ToolCall("get_order", {"order_id": "O-0"})]))
        assert info["errors"][0]["code"] == "TOOL_EXECUTION_ERROR" and "no order" in info["errors"][0]["message"]
        _, _, _, _, info = env.step(format_calls([ToolCall("get_order", {"id": 1})]))
        assert info["errors"][0]["code"] == "INVALID_PARAMETERS"
    finally:
        env.close()


def test_a_dying_server_is_an_error_then_restarts():
    backend = MCPBackend(FLAKY, timeout=5)
    try:
        backend.reset()
        first = backend.execute(ToolCall("echo", {"x": 1}))
        assert first.ok and first.content["x"] == 1
        died = backend.execute(ToolCall("die", {}))
        assert died.error.code.value == "TOOL_EXECUTION_ERROR" and "MCP server failed" in died.error.message
        after = backend.execute(ToolCall("echo", {"x": 2}))
        assert after.error.code.value == "TOOL_EXECUTION_ERROR"  # the episode's server is gone
        backend.reset()  # a fresh server for the next episode
        again = backend.execute(ToolCall("echo", {"x": 3}))
        assert again.ok and again.content["pid"] != first.content["pid"] and backend.restarts == 1
    finally:
        backend.close()


def test_a_hanging_server_times_out():
    backend = MCPBackend(FLAKY, timeout=1)
    try:
        backend.reset()
        hung = backend.execute(ToolCall("hang", {}))
        assert hung.error.code.value == "TOOL_TIMEOUT"
        backend.reset()
        assert backend.execute(ToolCall("echo", {"x": 4})).ok
    finally:
        backend.close()


def test_missing_server_command_is_one_clear_error():
    from envace_gym.backends.mcp import MCPError

    with pytest.raises(MCPError, match="did not start"):
        MCPBackend(["/nonexistent/server"], start_timeout=10).reset()

"""MCP backends: the shipped server, oracle episodes through it, and servers that die or hang."""

import sys
from pathlib import Path

import gymnasium as gym
import pytest

from envace_gym import ToolCall, format_calls
from envace_gym.agents.eval.evaluate import evaluate
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


def test_a_url_with_no_server_says_it_could_not_connect_and_why(capsys):
    from envace_gym.backends.mcp import MCPError
    from envace_gym.cli import main
    from envace_gym.envs.builtin.mcp_server import free_port

    url = f"http://127.0.0.1:{free_port()}/mcp"  # a closed loopback port
    with pytest.raises(MCPError) as caught:
        MCPBackend(url, start_timeout=10).reset()
    assert str(caught.value) == (
        f"could not connect to the MCP server at {url}: connection refused (is a server running there?)"
    )
    code = main(["eval", "--suite", "builtin/bank", "--policy", "oracle", "--episodes", "1", "--no-progress",
                 "--backend", f"mcp:{url}"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and err == f"envace: error: {caught.value}\n"


def test_an_http_server_that_is_not_mcp_says_so_not_that_it_could_not_connect():
    import subprocess
    import time

    from envace_gym.backends.mcp import MCPError
    from envace_gym.envs.builtin.mcp_server import free_port

    port = free_port()
    web = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    proc = subprocess.Popen(web, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        deadline = time.monotonic() + 20
        while True:  # until it listens: then the error is no longer "connection refused"
            with pytest.raises(MCPError) as caught:
                MCPBackend(url, start_timeout=10).reset()
            if "connection refused" not in str(caught.value) or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert str(caught.value).startswith(f"the server at {url} did not open an MCP session: "), caught.value
        assert str(caught.value).endswith("(is it an MCP server, and is that path its endpoint?)")
    finally:
        proc.kill()
        proc.wait()


def test_a_misspelt_stdio_module_says_it_exited_with_its_status_and_last_words(capfd):
    from envace_gym.backends.mcp import MCPError
    from envace_gym.cli import main

    with pytest.raises(MCPError) as caught:
        MCPBackend("python -m no_such_module_xyz", start_timeout=30).reset()
    message = str(caught.value)
    assert message.startswith(
        "MCP server command 'python -m no_such_module_xyz' exited before it answered (exit status 1): "
    ), message
    assert message.endswith("No module named no_such_module_xyz") and "TaskGroup" not in message
    code = main(["eval", "--suite", "builtin/bank", "--policy", "oracle", "--episodes", "1", "--no-progress",
                 "--backend", "mcp:python -m no_such_module_xyz"])  # fmt: skip
    _, err = capfd.readouterr()  # the server's own stderr included: it is quoted, not printed
    assert code == 2 and err.count("\n") == 1 and err.startswith("envace: error: MCP server command"), err


def _start_http_server(port):
    import subprocess
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "envace_gym.envs.builtin.mcp_server", "bank", "--http", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert "http://127.0.0.1:" in proc.stderr.readline()  # printed just before uvicorn binds
    url = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + 30
    while True:  # wait until it accepts connections
        try:
            MCPBackend(url, start_timeout=5).reset()
            return url, proc
        except Exception:
            if time.monotonic() > deadline:
                proc.kill()
                raise
            time.sleep(0.3)


def test_oracle_over_loopback_http_two_envs_share_the_server_and_a_dead_server_is_contained():
    from envace_gym.backends.mcp import MCPError
    from envace_gym.envs.builtin.mcp_server import free_port

    port = free_port()
    url, proc = _start_http_server(port)
    envs = [gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="test", backend=f"mcp:{url}") for _ in range(2)]
    try:
        suite = envs[0].unwrapped.suite
        tasks = [t for t in envs[0].unwrapped.pool if "state_match" in t.reward][:6]
        # Interleave two episodes step by step: each client session has its own world on the server.
        for pair in zip(tasks[0::2], tasks[1::2], strict=False):
            policies = [OraclePolicy(suite), OraclePolicy(suite)]
            resets = [env.reset(options={"task_id": t.id}) for env, t in zip(envs, pair, strict=True)]
            obs, infos = map(list, zip(*resets, strict=True))
            done = [False, False]
            while not all(done):
                for i, env in enumerate(envs):
                    if not done[i]:
                        obs[i], _, term, trunc, infos[i] = env.step(policies[i].act(obs[i], infos[i]))
                        done[i] = term or trunc
            assert all(info["success"] for info in infos), [info["reward_components"] for info in infos]
        envs[0].reset(seed=0)
        proc.kill()
        proc.wait()
        _, _, _, _, info = envs[0].step(format_calls([ToolCall("get_balance", {"account_id": "A-1"})]))
        assert (
            info["errors"][0]["code"] == "TOOL_EXECUTION_ERROR" and "MCP server failed" in info["errors"][0]["message"]
        )
        with pytest.raises(MCPError, match=f"could not connect to the MCP server at {url}: connection refused"):
            envs[0].reset(seed=0)
        url, proc = _start_http_server(port)  # back at the same address: the next episode runs
        report = evaluate(envs[0], OraclePolicy(suite), 3, progress=False)
        assert all(r.success for r in report.results)
    finally:
        proc.kill()
        proc.wait()
        for env in envs:
            env.close()


def test_http_backends_are_loopback_only():
    from envace_gym.backends.mcp import MCPError

    for url in ("http://10.0.0.5:8765/mcp", "http://example.com/mcp", "ftp://127.0.0.1/mcp"):
        with pytest.raises(MCPError, match="loopback only"):
            MCPBackend(url)
    assert MCPBackend("http://localhost:1/mcp").url == "http://localhost:1/mcp"


def test_loopback_http_ignores_proxy_settings(monkeypatch):
    from envace_gym.envs.builtin.mcp_server import free_port

    url, proc = _start_http_server(free_port())
    try:
        for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
            monkeypatch.setenv(var, "http://127.0.0.1:9")  # nothing listens there: a proxied request would fail
        for var in ("NO_PROXY", "no_proxy"):
            monkeypatch.delenv(var, raising=False)
        env = gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="test", backend=f"mcp:{url}")
        report = evaluate(env, OraclePolicy(env.unwrapped.suite), 2, progress=False)
        env.close()
        assert all(r.success for r in report.results)
    finally:
        proc.kill()
        proc.wait()


def _processes_with(marker):
    import os

    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if marker.encode() in fh.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found


def test_a_server_that_never_answers_is_stopped_after_the_start_timeout():
    import threading
    import time

    from envace_gym.backends.mcp import MCPError

    marker = f"envace-silent-{time.monotonic_ns()}"
    silent = [sys.executable, "-c", "import sys, time; sys.stdin.read(); time.sleep(600)", marker]
    with pytest.raises(MCPError, match="did not start"):
        MCPBackend(silent, start_timeout=2).reset()
    deadline = time.monotonic() + 20
    while (_processes_with(marker) or any(t.name == "envace-mcp" for t in threading.enumerate())) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.2)
    assert _processes_with(marker) == [], "the server process was left running"
    assert not any(t.name == "envace-mcp" for t in threading.enumerate()), "the client thread was left running"


def test_an_mcp_backend_starts_only_the_configured_command():
    import os

    def children():
        out = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
                if ppid == os.getpid():
                    with open(f"/proc/{pid}/cmdline", "rb") as fh:
                        out.append(fh.read().rstrip(b"\0").split(b"\0"))
            except OSError:
                continue
        return out

    before = children()
    command = [sys.executable, "-m", "envace_gym.envs.builtin.mcp_server", "bank"]
    backend = MCPBackend(command)
    backend.reset()
    try:
        started = [c for c in children() if c not in before]
        assert started == [[part.encode() for part in command]]  # that command, nothing else, no shell
    finally:
        backend.close()

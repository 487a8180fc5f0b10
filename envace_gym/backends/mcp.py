"""``MCPBackend``: tools served by an MCP server, over stdio (a subprocess the backend starts and stops) or
streamable HTTP on the loopback interface (a server that is already running).

The MCP client is asynchronous; the backend runs it on an event loop in a background thread and waits
for each call with a timeout, so the env stays synchronous. A server that dies or hangs mid-episode gives
an error observation, and the next ``reset`` starts a fresh server (stdio) or a fresh session (HTTP).

Servers that offer the ``envace_reset`` / ``envace_state_hash`` control tools (ours do) get per-episode
resets and ``state_match``; other servers are used as they are.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import json
import os
import re
import shlex
import sys
import threading
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ..calls import CallError, ErrorCode, ToolCall
from ..tools import ToolSpec
from .base import BackendCopyError, ToolResult, state_digest, validate_call

if TYPE_CHECKING:
    from ..tasks import Task

__all__ = ["MCPBackend", "MCPError"]

RESET_TOOL = "envace_reset"
STATE_HASH_TOOL = "envace_state_hash"
_CONTROL = {RESET_TOOL, STATE_HASH_TOOL}


class MCPError(RuntimeError):
    """The MCP server could not be started or reached."""


_LoopBase: type[asyncio.AbstractEventLoop] = getattr(
    asyncio, "ProactorEventLoop" if sys.platform == "win32" else "SelectorEventLoop"
)


class _Loop(_LoopBase):  # type: ignore[misc, valid-type]
    """An event loop that keeps the transport of the subprocess it starts (the stdio server), so that a
    server that exits before it answers is reported with its exit status."""

    server_process: asyncio.SubprocessTransport | None = None

    async def subprocess_exec(self, *args: Any, **kwargs: Any) -> Any:
        transport, protocol = await super().subprocess_exec(*args, **kwargs)
        self.server_process = transport
        return transport, protocol


class _StderrTail:
    """The stdio server's stderr, read through a pipe: kept (its last lines) until the server has answered,
    so that a server that fails to start is one error line that quotes its last words; then passed on to our
    stderr as before."""

    def __init__(self) -> None:
        read_fd, write_fd = os.pipe()
        self.file = os.fdopen(write_fd, "w")  # the server's stderr; ours is closed once it has started
        self._lines: deque[str] = deque(maxlen=50)
        self._forward = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._pump, args=(read_fd,), daemon=True, name="envace-mcp-stderr")
        self._thread.start()

    def _pump(self, read_fd: int) -> None:
        with os.fdopen(read_fd, "r", errors="replace") as lines:
            for line in lines:
                with self._lock:
                    if self._forward:
                        self._write(line)
                    else:
                        self._lines.append(line)

    @staticmethod
    def _write(text: str) -> None:
        try:
            sys.stderr.write(text)
        except (ValueError, OSError):  # stderr closed (interpreter shutdown)
            pass

    def close_ours(self) -> None:
        """Close our end of the pipe: the reader stops when the server's end closes too."""
        self.file.close()

    def forward(self) -> None:
        """The server answered: pass what it wrote so far, and what it writes from now on, to our stderr."""
        with self._lock:
            self._forward = True
            self._write("".join(self._lines))
            self._lines.clear()

    def last_line(self, timeout: float = 2.0) -> str:
        """The last non-blank line the server wrote (it has exited or been stopped), or ``""``."""
        self.close_ours()
        self._thread.join(timeout)
        with self._lock:
            return next((line.strip() for line in reversed(self._lines) if line.strip()), "")


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups; cancellations only where nothing else failed."""
    if isinstance(exc, BaseExceptionGroup):
        found = [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
        real = [leaf for leaf in found if not isinstance(leaf, asyncio.CancelledError)]
        return real or found
    return [exc]


def _os_error(exc: BaseException) -> OSError | None:
    """The ``OSError`` with an errno under ``exc`` (itself, down its chain of causes, or in a group there)."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        e = todo.pop(0)
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno:
            return e
        todo.extend(getattr(e, "exceptions", ()))
        # down the cause, else the exception being handled when this one was raised: httpx2's ConnectError
        # reaches the refused connection only through the latter
        below = e.__cause__ if e.__cause__ is not None else e.__context__
        if below is not None:
            todo.append(below)
    return None


def _reason(exc: BaseException | None) -> str:
    """What went wrong, in a few words: ``connection refused`` rather than ``unhandled errors in a TaskGroup``."""
    if exc is None:
        return "no reason given"
    words = []
    for leaf in _leaves(exc):
        os_error = None if isinstance(leaf, OSError) else _os_error(leaf)  # an OSError's own text names its file
        text = os.strerror(os_error.errno).lower() if os_error is not None else str(leaf) or type(leaf).__name__
        if text not in words:
            words.append(text)
    return "; ".join(words)


def loopback_url(url: str) -> str:
    """``url`` if it names an HTTP endpoint on this machine's loopback interface; else a clear error
    (tool traffic never leaves the machine)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        local = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        local = False
    if parts.scheme not in ("http", "https") or not local:
        raise MCPError(f"MCP over HTTP is loopback only (http://127.0.0.1:PORT/mcp); got {url!r}")
    return url


class _Connection:
    """One client session (and, over stdio, its server process), alive on a private event loop thread."""

    def __init__(
        self, command: Sequence[str], start_timeout: float, url: str | None = None, label: str | None = None
    ) -> None:
        try:
            from mcp.client.session import ClientSession
            from mcp.client.stdio import StdioServerParameters, stdio_client
            from mcp.client.streamable_http import streamable_http_client
        except ImportError:
            raise MCPError("MCPBackend needs the mcp package: .venv/bin/pip install mcp") from None
        self.loop = _Loop()
        self.session: Any = None
        self._closing: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._task: asyncio.Task | None = None
        http = None
        stderr: _StderrTail | None = None
        if url is not None:
            import httpx2  # the mcp package's HTTP client

            # trust_env=False: loopback traffic must never go to an HTTP(S)_PROXY from the environment.
            http = httpx2.AsyncClient(trust_env=False, timeout=httpx2.Timeout(30.0, read=300.0))
            transport = streamable_http_client(url, http_client=http)
        else:
            stderr = _StderrTail()
            params = StdioServerParameters(command=command[0], args=list(command[1:]))
            transport = stdio_client(params, errlog=stderr.file)
        what = url or shlex.join(command)

        async def serve() -> None:
            self._closing = asyncio.Event()
            self._task = asyncio.current_task()
            try:
                async with transport as (read, write):
                    if stderr is not None:
                        stderr.close_ours()  # the server (started now) holds its own end
                    async with ClientSession(read, write) as session:
                        await session.initialize()
                        self.session = session
                        self._ready.set()
                        await self._closing.wait()
            except BaseException as exc:  # noqa: BLE001 - reported to the caller
                self._error = exc
            finally:
                self.session = None
                if http is not None:
                    await http.aclose()
                if stderr is not None:
                    stderr.close_ours()
                self._ready.set()

        self.thread = threading.Thread(
            target=self.loop.run_until_complete, args=(serve(),), daemon=True, name="envace-mcp"
        )
        self.thread.start()
        answered = self._ready.wait(start_timeout)
        if not answered or self.session is None:
            self.close()
            raise MCPError(self._failure(label or what, url, answered, start_timeout, stderr))
        if stderr is not None:
            stderr.forward()

    def _failure(
        self, what: str, url: str | None, answered: bool, start_timeout: float, stderr: _StderrTail | None
    ) -> str:
        """One line on why the server did not answer, worded by transport: nothing is started over HTTP."""
        if url is not None:
            if not answered:
                return f"the MCP server at {url} did not answer within {start_timeout:g}s"
            leaves = _leaves(self._error) if self._error is not None else []
            errnos = {getattr(_os_error(leaf), "errno", None) for leaf in leaves} - {None}
            if not errnos:  # it connected, and what answered did not speak MCP there
                return (
                    f"the server at {url} did not open an MCP session: {_reason(self._error)} (is it an MCP "
                    "server, and is that path its endpoint?)"
                )
            hint = " (is a server running there?)" if errno.ECONNREFUSED in errnos else ""
            return f"could not connect to the MCP server at {url}: {_reason(self._error)}{hint}"
        last = stderr.last_line() if stderr is not None else ""
        said = f": {last}" if last else ""
        process = self.loop.server_process
        if not answered:
            return f"MCP server command '{what}' did not start: no answer within {start_timeout:g}s (stopped it){said}"
        if process is None:  # it was never started (no such program, not executable)
            return f"MCP server command '{what}' did not start: {_reason(self._error)}"
        status = process.get_returncode()
        if status is not None:
            how = f"exit status {status}" if status >= 0 else f"killed by signal {-status}"
            return f"MCP server command '{what}' exited before it answered ({how}){said}"
        return f"MCP server command '{what}' did not start: {_reason(self._error)}{said}"

    @property
    def alive(self) -> bool:
        return self.session is not None and self.thread.is_alive()

    def call(self, coro_factory, timeout: float) -> Any:
        if not self.alive:
            raise MCPError("the MCP server is not running")
        return asyncio.run_coroutine_threadsafe(coro_factory(self.session), self.loop).result(timeout)

    def close(self) -> None:
        if self._closing is not None and self.loop.is_running():
            if self.session is not None:
                self.loop.call_soon_threadsafe(self._closing.set)
            elif self._task is not None:
                # Still starting (a server that never answers): cancel, so that the transport's exit
                # stops the server process instead of leaving it and this thread waiting forever.
                self.loop.call_soon_threadsafe(self._task.cancel)
        self.thread.join(timeout=5)


class MCPBackend:
    """A `Backend` over an MCP server.

    Args:
        command: the server command line, e.g. ``[sys.executable, "-m", "envace_gym.envs.builtin.mcp_server", "bank"]``
            (a string is split like a shell would), started as a subprocess and spoken to over stdio; or the
            URL of a running streamable-HTTP server on the loopback interface, e.g.
            ``"http://127.0.0.1:8765/mcp"`` (``python -m envace_gym.envs.builtin.mcp_server --http``).
        timeout: seconds one call may take before it is a ``TOOL_TIMEOUT`` (and the connection is dropped).
        start_timeout: seconds the server may take to start (or to answer the first connection).
    """

    def __init__(self, command: Sequence[str] | str, timeout: float = 10.0, start_timeout: float = 60.0) -> None:
        is_url = isinstance(command, str) and re.match(r"^[a-z][a-z0-9+.-]*://", command.strip()) is not None
        self.url = loopback_url(command.strip()) if is_url else None
        self.command = [] if is_url else shlex.split(command) if isinstance(command, str) else list(command)
        self._label = command.strip() if isinstance(command, str) else shlex.join(self.command)  # as written
        if self.command and self.command[0] in ("python", "python3"):
            self.command[0] = sys.executable  # the same interpreter (and installed packages) as ours
        self.timeout = timeout
        self.start_timeout = start_timeout
        self._conn: _Connection | None = None
        self._server_tools: dict[str, ToolSpec] = {}
        self._specs: dict[str, ToolSpec] = {}
        self._ok_calls: list[ToolCall] = []
        self.call_count = 0
        self.restarts = 0
        self._broken = False  # the server failed during this episode: its state is gone

    # ------------------------------------------------------------------ lifecycle
    def _connect(self) -> _Connection:
        if self._conn is None or not self._conn.alive:
            if self._conn is not None:
                self._conn.close()
                self.restarts += 1
            self._conn = _Connection(self.command, self.start_timeout, self.url, label=self._label)
            listed = self._conn.call(lambda s: s.list_tools(), self.timeout)
            self._server_tools = {
                t.name: ToolSpec(t.name, t.description or "", dict(t.input_schema or {"type": "object"}))
                for t in listed.tools
            }
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __del__(self) -> None:  # pragma: no cover - best effort at interpreter shutdown
        try:
            self.close()
        except Exception:
            pass

    # ------------------------------------------------------------------ protocol
    @property
    def tools(self) -> Sequence[ToolSpec]:
        return list(self._specs.values())

    def reset(self, task: Task | None = None, seed: int | None = None) -> None:
        try:
            self._start_episode(task)
        except MCPError:
            raise
        except Exception:  # a stale connection (the server died or restarted): reconnect once
            self._drop()
            self._start_episode(task)

    def _start_episode(self, task: Task | None) -> None:
        conn = self._connect()
        self.call_count = 0
        self._ok_calls = []
        self._broken = False
        served = {n: s for n, s in self._server_tools.items() if n not in _CONTROL}
        if task is not None and task.tools:
            self._specs = {s.name: s for s in task.tool_specs if s.name in served}
        else:
            self._specs = served
        if task is not None and RESET_TOOL in self._server_tools:
            payload, is_error = self._invoke(conn, RESET_TOOL, {"task_id": task.id})
            if is_error:
                raise MCPError(f"the MCP server refused to reset to task {task.id!r}: {payload}")

    def execute(self, call: ToolCall) -> ToolResult:
        self.call_count += 1
        error = validate_call(call, self._specs)
        if error is not None:
            return ToolResult(call, None, error)
        if self._broken or self._conn is None:
            return ToolResult.failure(
                call,
                ErrorCode.TOOL_EXECUTION_ERROR,
                "the MCP server failed earlier in this episode; it restarts at the next reset",
            )
        try:
            payload, is_error = self._invoke(self._conn, call.name, call.arguments)
        except TimeoutError:
            self._drop()
            return ToolResult.failure(
                call, ErrorCode.TOOL_TIMEOUT, f"{call.name}: no answer from the MCP server within {self.timeout:g}s"
            )
        except Exception as exc:  # the server died or the transport broke: contained
            self._drop()
            return ToolResult.failure(
                call, ErrorCode.TOOL_EXECUTION_ERROR, f"MCP server failed: {type(exc).__name__}: {exc}"
            )
        if is_error:
            err = payload.get("error", {}) if isinstance(payload, dict) else {}
            code = err.get("code")
            code = ErrorCode(code) if code in ErrorCode.__members__ else ErrorCode.TOOL_EXECUTION_ERROR
            return ToolResult(call, None, CallError(code, str(err.get("message", payload)), call.name))
        self._ok_calls.append(call)
        return ToolResult(call, payload)

    def state(self) -> dict[str, Any]:
        return {"calls": [c.to_dict() for c in self._ok_calls]}

    def state_hash(self) -> str:
        if self._conn is not None and self._conn.alive and STATE_HASH_TOOL in self._server_tools:
            try:
                payload, is_error = self._invoke(self._conn, STATE_HASH_TOOL, {})
                if not is_error and isinstance(payload, dict) and "state_hash" in payload:
                    return str(payload["state_hash"])
            except Exception:  # noqa: BLE001 - fall back to the call digest
                pass
        return state_digest(self.state())

    # ------------------------------------------------------------------ internals
    def copy(self) -> MCPBackend:
        raise BackendCopyError(
            "an MCP backend cannot be copied: its world lives in the server process; fork an env on a real, "
            "replay or imagined backend instead"
        )

    def _drop(self) -> None:
        # A hung or dead server is not reused: the next reset starts a fresh one.
        conn, self._conn = self._conn, None
        self._broken = True
        if conn is not None:
            threading.Thread(target=conn.close, daemon=True).start()
            self.restarts += 1

    def _invoke(self, conn: _Connection, name: str, arguments: dict[str, Any]) -> tuple[Any, bool]:
        result = conn.call(lambda s: s.call_tool(name, arguments), self.timeout)
        texts = [c.text for c in (result.content or []) if getattr(c, "type", "") == "text"]
        text = "\n".join(texts)
        try:
            payload = json.loads(text) if text else None
        except ValueError:
            payload = text  # a plain-text result from a foreign server
        return payload, bool(result.is_error)

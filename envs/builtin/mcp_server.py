"""An MCP server that serves the builtin domains' tools, so tests and users have a real one.

    python -m envace_gym.envs.builtin.mcp_server [bank|files|retail|travel|builtin]            # stdio
    python -m envace_gym.envs.builtin.mcp_server [domain] --http [--port 8765]                 # loopback HTTP

Besides the domain tools it offers two control tools that ``MCPBackend`` uses and hides from agents:
``envace_reset`` (``{"task_id"}``: fresh state from that task's initial state) and ``envace_state_hash``.
Results are the same JSON payloads the in-process backend returns (errors keep their codes). Over HTTP
(streamable HTTP, bound to 127.0.0.1 only) every client session has its own world, so several envs can
share one server.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

import anyio

from envace_gym.backends import make_backend
from envace_gym.calls import ToolCall
from envace_gym.suites import load_suite

RESET_TOOL = "envace_reset"
STATE_HASH_TOOL = "envace_state_hash"


class _World:
    """One client's backends; its current task picks which one answers."""

    def __init__(self, names: list[str]) -> None:
        self.backends = {name: make_backend(name, timeout=5.0) for name in names}
        self.current = None


class DomainService:
    """The builtin backends behind the server, one world per client session."""

    MAX_SESSIONS = 64  # the least recently used world goes first

    def __init__(self, suite_name: str) -> None:
        self.suite = load_suite(suite_name)
        self._names = sorted({t.backend for t in self.suite})
        self._worlds: OrderedDict[Hashable, _World] = OrderedDict()

    def _world(self, session: Hashable) -> _World:
        world = self._worlds.get(session)
        if world is None:
            world = self._worlds[session] = _World(self._names)
            while len(self._worlds) > self.MAX_SESSIONS:
                self._worlds.popitem(last=False)
        self._worlds.move_to_end(session)
        return world

    def tools(self) -> list[dict[str, Any]]:
        seen: dict[str, dict[str, Any]] = {}
        for task in self.suite:
            for tool in task.tools:
                seen.setdefault(tool["function"]["name"], tool["function"])
        return list(seen.values())

    def call(self, name: str, arguments: dict[str, Any], session: Hashable = None) -> tuple[Any, bool]:
        """(payload, is_error) for one call of one client session, control tools included."""
        world = self._world(session)
        if name == RESET_TOOL:
            try:
                task = self.suite.get(str(arguments.get("task_id")))
            except KeyError as exc:
                return {"error": {"code": "TOOL_EXECUTION_ERROR", "message": str(exc.args[0])}}, True
            world.current = world.backends[task.backend]
            world.current.reset(task, seed=0)
            return {"reset": task.id}, False
        if world.current is None:
            return {"error": {"code": "TOOL_EXECUTION_ERROR", "message": f"call {RESET_TOOL} first"}}, True
        if name == STATE_HASH_TOOL:
            return {"state_hash": world.current.state_hash()}, False
        result = world.current.execute(ToolCall(name, arguments))
        return result.payload(), not result.ok


def _client_session(ctx: Any) -> str | None:
    """The client's MCP session id over HTTP (a header on each request); None over stdio, where the
    process serves one client."""
    headers = getattr(getattr(ctx, "request", None), "headers", None)
    return headers.get("mcp-session-id") if headers is not None else None


def build_server(suite_name: str):
    import mcp_types as types
    from mcp.server.lowlevel.server import Server

    service = DomainService(suite_name)
    control = [
        types.Tool(
            name=RESET_TOOL,
            description="Reset the world to a task's initial state.",
            inputSchema={"type": "object", "properties": {"task_id": {"type": "string"}}, "required": ["task_id"]},
        ),
        types.Tool(
            name=STATE_HASH_TOOL,
            description="Digest of the world state.",
            inputSchema={"type": "object", "properties": {}},
        ),
    ]

    async def list_tools(ctx: Any, params: Any) -> Any:
        tools = [
            types.Tool(name=t["name"], description=t.get("description", ""), inputSchema=t["parameters"])
            for t in service.tools()
        ]
        return types.ListToolsResult(tools=tools + control)

    async def call_tool(ctx: Any, params: Any) -> Any:
        payload, is_error = service.call(params.name, dict(params.arguments or {}), _client_session(ctx))
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(payload))], isError=is_error
        )

    return Server(f"envace-{suite_name}", on_list_tools=list_tools, on_call_tool=call_tool)


LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def serve_http(server: Any, port: int) -> None:
    """Streamable HTTP on 127.0.0.1 only (never another interface), endpoint ``/mcp``."""
    import uvicorn

    app = server.streamable_http_app(host=LOOPBACK)
    print(f"envace MCP server on http://{LOOPBACK}:{port}/mcp", file=sys.stderr, flush=True)
    uvicorn.run(app, host=LOOPBACK, port=port, log_level="warning")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m envace_gym.envs.builtin.mcp_server",
        description="Serve the builtin domains' tools over MCP (stdio, or HTTP on 127.0.0.1).",
    )
    parser.add_argument("domain", nargs="?", default="builtin", help="bank, files, retail, travel or builtin (all)")
    parser.add_argument("--http", action="store_true", help="streamable HTTP on 127.0.0.1 instead of stdio")
    parser.add_argument("--port", type=int, default=8765, help="HTTP port (0: any free one)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    name = args.domain
    suite_name = name if name == "builtin" or "/" in name else f"builtin/{name}"
    server = build_server(suite_name)
    if args.http:
        serve_http(server, args.port or free_port())
        return

    from mcp.server.stdio import stdio_server

    async def run() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(run)


if __name__ == "__main__":
    main()

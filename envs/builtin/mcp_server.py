"""An MCP server (stdio) that serves the builtin domains' tools, so tests and users have a real one.

    python -m envace_gym.envs.builtin.mcp_server [bank|files|retail|travel|builtin]

Besides the domain tools it offers two control tools that ``MCPBackend`` uses and hides from agents:
``envace_reset`` (``{"task_id"}``: fresh state from that task's initial state) and ``envace_state_hash``.
Results are the same JSON payloads the in-process backend returns (errors keep their codes).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio

from envace_gym.backends import make_backend
from envace_gym.calls import ToolCall
from envace_gym.suites import load_suite

RESET_TOOL = "envace_reset"
STATE_HASH_TOOL = "envace_state_hash"


class DomainService:
    """The builtin backends behind the server; the current task picks which one answers."""

    def __init__(self, suite_name: str) -> None:
        self.suite = load_suite(suite_name)
        self.backends = {name: make_backend(name, timeout=5.0) for name in sorted({t.backend for t in self.suite})}
        self.current = None

    def tools(self) -> list[dict[str, Any]]:
        seen: dict[str, dict[str, Any]] = {}
        for task in self.suite:
            for tool in task.tools:
                seen.setdefault(tool["function"]["name"], tool["function"])
        return list(seen.values())

    def call(self, name: str, arguments: dict[str, Any]) -> tuple[Any, bool]:
        """(payload, is_error) for one call, control tools included."""
        if name == RESET_TOOL:
            task = self.suite.get(str(arguments.get("task_id")))
            self.current = self.backends[task.backend]
            self.current.reset(task, seed=0)
            return {"reset": task.id}, False
        if self.current is None:
            return {"error": {"code": "TOOL_EXECUTION_ERROR", "message": f"call {RESET_TOOL} first"}}, True
        if name == STATE_HASH_TOOL:
            return {"state_hash": self.current.state_hash()}, False
        result = self.current.execute(ToolCall(name, arguments))
        return result.payload(), not result.ok


def build_server(suite_name: str):
    import mcp_types as types
    from mcp.server.lowlevel.server import Server

    service = DomainService(suite_name)
    control = [
        types.Tool(name=RESET_TOOL, description="Reset the world to a task's initial state.",
                   inputSchema={"type": "object", "properties": {"task_id": {"type": "string"}}, "required": ["task_id"]}),
        types.Tool(name=STATE_HASH_TOOL, description="Digest of the world state.", inputSchema={"type": "object", "properties": {}}),
    ]

    async def list_tools(ctx: Any, params: Any) -> Any:
        tools = [types.Tool(name=t["name"], description=t.get("description", ""), inputSchema=t["parameters"]) for t in service.tools()]
        return types.ListToolsResult(tools=tools + control)

    async def call_tool(ctx: Any, params: Any) -> Any:
        payload, is_error = service.call(params.name, dict(params.arguments or {}))
        return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps(payload))], isError=is_error)

    return Server(f"envace-{suite_name}", on_list_tools=list_tools, on_call_tool=call_tool)


def main(argv: list[str] | None = None) -> None:
    from mcp.server.stdio import stdio_server

    args = sys.argv[1:] if argv is None else argv
    name = args[0] if args else "builtin"
    suite_name = name if name == "builtin" or "/" in name else f"builtin/{name}"
    server = build_server(suite_name)

    async def run() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(run)


if __name__ == "__main__":
    main()

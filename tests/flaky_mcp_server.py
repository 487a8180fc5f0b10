"""A foreign MCP server for tests: no control tools, and tools that crash or hang the server."""

import json
import os
import time

import anyio
import mcp_types as types
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server

TOOLS = [
    types.Tool(
        name="echo",
        description="Echo.",
        inputSchema={"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]},
    ),
    types.Tool(name="die", description="Kills the server.", inputSchema={"type": "object", "properties": {}}),
    types.Tool(name="hang", description="Never answers.", inputSchema={"type": "object", "properties": {}}),
]


async def list_tools(ctx, params):
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx, params):
    if params.name == "die":
        os._exit(3)
    if params.name == "hang":
        time.sleep(30)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps({"x": params.arguments["x"], "pid": os.getpid()}))],
        isError=False,
    )


server = Server("flaky", on_list_tools=list_tools, on_call_tool=call_tool)


async def main():
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


anyio.run(main)

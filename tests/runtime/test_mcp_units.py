"""MCP servers as tools and activities, in this process (docs/mcp.md): the config's checks, the names, the tool
schemas, and the activities against the real test MCP server (tests/mcp_server.py over stdio). The worker
processes and `agentq mcp` are tests/integration/test_mcp.py's."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest

from agentq.errors import ConfigurationError
from agentq.mcp import parse_config, register_servers
from agentq.mcp.activities import CONTEXT_META_KEY
from agentq.mcp.config import ServerConfig
from agentq.mcp.connection import MCPCallError, MCPConnection, close_all
from agentq.mcp.schemas import SchemaRefused, agentq_names, tool_schema
from agentq.protocol.activities import ActivityRegistry
from agentq.protocol.tools import ToolRegistry
from tests.api_server import free_port

ROOT = Path(__file__).resolve().parents[2]


def stdio_server(**env: str) -> dict:
    return {"command": sys.executable, "args": ["-m", "tests.mcp_server"], "env": {"PYTHONPATH": str(ROOT), **env},
            "cwd": str(ROOT)}


@pytest.fixture
def registries(tmp_path: Path):
    def register(servers: dict) -> tuple[ActivityRegistry, ToolRegistry, list[str]]:
        path = tmp_path / "servers.json"
        path.write_text(json.dumps({"mcpServers": servers}))
        activities, tools = ActivityRegistry(), ToolRegistry()
        return activities, tools, register_servers(path, activities, tools)

    yield register
    close_all()


def test_every_problem_of_a_config_is_reported_at_once_with_its_pointer():
    with pytest.raises(ConfigurationError) as caught:
        parse_config({"mcpServers": {
            "files": {"comand": "x"},
            "web": {"url": "ftp://x", "agentq": {"retries": -1, "tools": {"t": {"sensitive": "card"}}}},
            "both": {"command": "x", "url": "http://x"},
            "bad name": {"command": "x", "args": "not-a-list"}}})
    message = str(caught.value)
    assert "\n" not in message
    for expected in ("/mcpServers/files/comand: unknown key", "/mcpServers/files: give either",
                     "/mcpServers/web/url: expected an http", "/mcpServers/web/agentq/retries: expected an integer",
                     "/mcpServers/web/agentq/tools/t/sensitive: expected an array of JSON pointers",
                     "/mcpServers/both: give either \"command\" (a stdio server) or \"url\" (streamable HTTP), "
                     "not both",
                     "/mcpServers/bad name: server name 'bad name'", "/mcpServers/bad name/args: expected an array"):
        assert expected in message, message
    with pytest.raises(ConfigurationError, match="/mcpServers: expected an object"):
        parse_config({"servers": {}})


def test_a_config_gives_its_servers_transport_and_options_per_tool():
    (files, web) = parse_config({"mcpServers": {
        "files": {"command": "srv", "args": ["-v"], "env": {"K": "v"},
                  "agentq": {"retries": 2, "timeout": 5, "tools": {"write": {"retries": 0, "sensitive": ["/key"]}}}},
        "web": {"url": "https://x/mcp", "headers": {"Authorization": "Bearer t"}},
        "off": {"command": "srv", "disabled": True}}})
    assert (files.transport, files.args, dict(files.env)) == ("stdio", ("-v",), {"K": "v"})
    assert files.options_of("read").retries == 2 and files.options_of("read").timeout == 5
    assert files.options_of("write").retries == 0 and files.options_of("write").timeout == 5
    assert files.options_of("write").sensitive == ("/key",)
    assert (web.transport, web.url, dict(web.headers)) == ("streamable HTTP", "https://x/mcp",
                                                           {"Authorization": "Bearer t"})


def test_names_are_prefixed_by_the_server_only_on_a_collision():
    a, b = ServerConfig(name="a", command="x"), ServerConfig(name="b", command="x")
    refs = agentq_names([(a, "search"), (b, "search"), (a, "read.file"), (b, "9lives"), (b, "taken")],
                        taken={"taken"})
    assert [r.name for r in refs] == ["a__search", "b__search", "read_file", "t_9lives", "b__taken"]
    assert [r.tool for r in refs] == ["search", "search", "read.file", "9lives", "taken"]


class _Tool:
    def __init__(self, input_schema: Any, output_schema: Any = None, name: str = "t"):
        self.name, self.title, self.description = name, None, "a tool"
        self.input_schema, self.output_schema = input_schema, output_schema


def test_schemas_that_cannot_be_agentq_tools_are_refused_with_the_reason():
    (ref,) = agentq_names([(ServerConfig(name="s", command="x"), "t")])
    cases = {
        "not a valid JSON Schema": {"type": "object", "properties": {"x": {"type": 12}}},
        "recursive $ref": {"type": "object", "properties": {"n": {"$ref": "#/$defs/N"}},
                           "$defs": {"N": {"type": "object", "properties": {"next": {"$ref": "#/$defs/N"}}}}},
        "outside itself": {"type": "object", "properties": {"n": {"$ref": "https://x/schema.json"}}},
        "meta fields": {"type": "object", "properties": {"_secret": {"type": "string"}}},
    }
    for reason, schema in cases.items():
        with pytest.raises(SchemaRefused, match=reason.replace("$", r"\$")):
            tool_schema(ref, _Tool(schema))
    with pytest.raises(SchemaRefused, match="outputSchema is not a valid JSON Schema"):
        tool_schema(ref, _Tool({"type": "object"}, {"type": "object", "required": "x"}))


def test_the_tools_of_a_stdio_server_become_tools_and_activities(registries, caplog) -> None:
    caplog.set_level(logging.WARNING, "agentq.mcp")
    activities, tools, names = registries({"demo": {**stdio_server(), "agentq": {
        "retries": 1, "timeout": 20, "tools": {"peek": {"scopes": ["state"]}, "tag": {"sensitive": ["/note"]}}}}})
    assert names == ["add", "shout", "whoami", "tag", "peek", "fail", "flaky", "slow", "crash"]
    assert "MCP server 'demo': tool 'broken' skipped: its inputSchema is not a valid JSON Schema" in caplog.text
    assert activities.get("add").retries == 1 and activities.get("add").timeout == 20
    assert tools.get("peek")["properties"]["_scopes"] == {"const": ["state"]}
    assert tools.get("tag")["x-sensitive"] == ["/note"] and "x-sensitive" not in tools.get("add")
    assert tools.get("shout")["properties"]["_output"] == {"type": "string"}
    assert activities.get("add").handler({"_tool": "add", "a": 1, "b": 2, "_outputPath": "†state.x"}, None) \
        == {"result": 3}

    class Context:
        messages: ClassVar = [{"type": "data", "kind": "state", "data": {"x": 1}}]

    sent = activities.get("peek").handler({"_tool": "peek"}, Context())
    assert json.loads(sent) == Context.messages  # the scoped context travels in the request's _meta
    assert CONTEXT_META_KEY == "agentq/context"
    with pytest.raises(MCPCallError, match=r"answered an error: .*this tool always fails"):
        activities.get("fail").handler({"_tool": "fail"}, None)


def test_two_servers_listing_the_same_tools_are_told_apart_by_their_names(registries):
    activities, tools, names = registries({"one": stdio_server(), "two": stdio_server()})
    assert {"one__add", "two__add", "one__whoami", "two__whoami"} <= set(names)
    one = activities.get("one__whoami").handler({}, None)
    two = activities.get("two__whoami").handler({}, None)
    assert one["pid"] != two["pid"]  # one session, and one server process, per server
    assert tools.get("one__add")["properties"]["_tool"] == {"type": "string", "const": "one__add"}


def test_a_server_nothing_listens_for_cannot_start_and_says_which(registries):
    with pytest.raises(ConfigurationError, match=r"^MCP server 'down' \(streamable HTTP, http://127.0.0.1:\d+/mcp\) "
                                                 r"cannot start: "):
        registries({"down": {"url": f"http://127.0.0.1:{free_port()}/mcp"}})


def test_a_session_an_http_server_lost_when_it_restarted_is_started_again_and_the_call_sent_again(tmp_path: Path):
    from tests.integration.test_mcp import HttpServer

    server = HttpServer(tmp_path / "mcp-http.log")
    connection = MCPConnection(ServerConfig(name="web", url=server.url))
    try:
        first = connection.call_tool("whoami", {}, timeout=20).structured_content
        server.restart()
        # the new server answers the old session's request with 404 "Session not found": a new session sends it
        second = connection.call_tool("whoami", {}, timeout=20).structured_content
        assert (first["pid"], second["pid"]) == (first["pid"], server.proc.pid) and first != second
        assert connection.starts == 2
    finally:
        connection.close()
        server.stop()

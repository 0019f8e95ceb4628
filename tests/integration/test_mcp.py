"""MCP both ways (docs/mcp.md), with real processes: a real MCP server (tests/mcp_server.py, the `mcp` package's
MCPServer) over stdio and over streamable HTTP, `agentq worker --mcp FILE` serving its tools to agent and plan
jobs, and `agentq mcp` driven by the `mcp` package's client."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from tests.api_server import free_port
from tests.fake_anthropic import Answer, FakeAnthropic
from tests.integration.conftest import Harness
from tests.integration.procs import ROOT, WorkerProcs, base_env, cli, wait_for

pytestmark = pytest.mark.slow

OUTPUT = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}


def stdio_server(**env: str) -> dict:
    """The `mcpServers` entry of tests/mcp_server.py over stdio."""
    return {"command": sys.executable, "args": ["-m", "tests.mcp_server"], "env": {"PYTHONPATH": str(ROOT), **env},
            "cwd": str(ROOT)}


def write_config(folder: Path, servers: dict) -> Path:
    path = folder / "servers.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


def listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
        return True
    return False


class HttpServer:
    """tests/mcp_server.py over streamable HTTP on a port of its own; `restart()` starts a new process there."""

    def __init__(self, log_path: Path):
        self.port, self.log_path = free_port(), log_path
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.proc = self._start()

    def _start(self) -> subprocess.Popen:
        with open(self.log_path, "ab") as log:
            proc = subprocess.Popen([sys.executable, "-m", "tests.mcp_server", "--http", str(self.port)],
                                    cwd=str(ROOT), env=base_env(""), stdout=log, stderr=subprocess.STDOUT)
        wait_for(lambda: listening(self.port) or proc.poll() is not None, 30, "the MCP server to listen")
        assert proc.poll() is None, self.log_path.read_text()
        return proc

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def restart(self) -> None:
        self.stop()
        self.proc = self._start()


@pytest.fixture
def http_mcp_server(tmp_path: Path) -> Iterator[HttpServer]:
    server = HttpServer(tmp_path / "mcp-http.log")
    try:
        yield server
    finally:
        server.stop()


def mcp_worker(worker_procs: WorkerProcs, config: Path, tools: list[str], **kw: Any) -> tuple[Any, dict]:
    proc = worker_procs.start(module=None, args=["--mcp", str(config)], **kw)
    return proc, worker_procs.wait_live(proc, tools, timeout=60)


def tool_in(schema: dict, name: str) -> dict:
    return next(t for t in schema["properties"]["calls"]["items"]["anyOf"]
                if t["properties"]["_tool"]["const"] == name)


def test_an_agent_job_calls_the_tools_of_a_stdio_mcp_server_through_a_worker(
        harness: Harness, worker_procs: WorkerProcs, anthropic_env: FakeAnthropic, tmp_path: Path):
    proc, announcement = mcp_worker(worker_procs, write_config(tmp_path, {"demo": stdio_server()}),
                                    ["add", "shout", "tag", "whoami"])
    # the tool whose inputSchema is not a valid JSON Schema is skipped with a warning naming it; the others serve
    assert "broken" not in {a["name"] for a in announcement["activities"]}
    assert "MCP server 'demo': tool 'broken' skipped" in proc.output() and "/properties/x/minimum" in proc.output()
    harness.worker(llm="anthropic")  # the dispatcher: agent ticks only
    anthropic_env.script(
        Answer.solution({"calls": [
            {"_tool": "add", "a": 2, "b": 40, "_outputPath": "†state.sum"},
            {"_tool": "shout", "text": "hi", "_outputPath": "†state.loud"},
            {"_tool": "tag", "item": {"label": "box", "weight": 3}, "_outputPath": "†state.tag"}], "output": None}),
        Answer.solution({"calls": [], "output": {"answer": "42"}}))
    record = harness.run({"context": [{"type": "text", "text": "Add 2 and 40, shout hi, tag the box."}],
                          "tools": ["add", "shout", "tag"], "output": OUTPUT}, timeout=60)
    assert record["status"] == "succeeded", record
    assert record["state"] == {"sum": {"result": 42}, "loud": "HI!", "tag": "box:3"}
    assert record["result"] == {"answer": "42"}
    # the model saw the MCP tools as tools: inputSchema as parameters ($ref inlined), outputSchema as _output
    schema = anthropic_env.requests[0].solution_schema
    add, tag = tool_in(schema, "add"), tool_in(schema, "tag")
    assert add["description"] == "Add two integers."
    assert add["properties"]["a"] == {"title": "A", "type": "integer"}
    assert add["properties"]["_output"]["anyOf"][0]["properties"]["result"]["type"] == "integer"
    assert tag["properties"]["item"]["properties"]["weight"] == {"title": "Weight", "type": "integer"}
    assert tag["properties"]["_output"]["anyOf"][0] == {"type": "string"}


def test_a_plan_job_calls_the_tools_of_a_streamable_http_mcp_server_from_a_prefork_worker(
        harness: Harness, worker_procs: WorkerProcs, http_mcp_server: HttpServer, tmp_path: Path):
    server = http_mcp_server
    config = write_config(tmp_path, {"remote": {"url": server.url, "headers": {"X-Client": "agentq-test"}}})
    mcp_worker(worker_procs, config, ["add", "whoami"], pool="prefork", concurrency=2)
    harness.worker()
    record = harness.run({"calls": [
        {"_tool": "add", "a": 2, "b": 3, "_outputPath": "†state.sum"},
        {"_tool": "whoami", "_outputPath": "†state.server"},
        {"_tool": "add", "a": "†state.sum.result", "b": 10, "_outputPath": "†state.total"}]}, timeout=60)
    assert record["status"] == "succeeded", record
    assert record["state"] == {"sum": {"result": 5}, "server": {"pid": server.proc.pid, "transport": "http"},
                               "total": {"result": 15}}
    # a restarted server no longer knows the workers' sessions: each worker process starts a new one
    server.restart()
    again = harness.run({"calls": [{"_tool": "whoami", "_outputPath": "†state.server"},
                                   {"_tool": "add", "a": 1, "b": 1, "_outputPath": "†state.sum"}]}, timeout=60)
    assert again["status"] == "succeeded", again
    assert again["state"] == {"server": {"pid": server.proc.pid, "transport": "http"}, "sum": {"result": 2}}


def test_a_stdio_server_that_crashed_is_started_again_and_the_next_call_succeeds(
        harness: Harness, worker_procs: WorkerProcs, tmp_path: Path):
    proc, _ = mcp_worker(worker_procs, write_config(tmp_path, {"demo": stdio_server()}), ["crash", "whoami"])
    harness.worker()
    before = harness.run({"calls": [{"_tool": "whoami", "_outputPath": "†state.server"}]}, timeout=60)
    crashed = harness.run({"calls": [{"_tool": "crash", "_outputPath": "†state.never"}]}, timeout=60)
    after = harness.run({"calls": [{"_tool": "whoami", "_outputPath": "†state.server"}]}, timeout=60)
    assert before["status"] == "succeeded", before
    assert crashed["status"] == "failed" and "went away during tools/call 'crash'" in json.dumps(crashed["error"])
    assert after["status"] == "succeeded", after
    assert after["state"]["server"]["pid"] != before["state"]["server"]["pid"]  # a new server process
    assert "MCP server 'demo' went away; starting it again" in proc.output()


def test_mcp_tools_have_the_retries_and_timeouts_their_config_gives(harness: Harness, worker_procs: WorkerProcs,
                                                                     tmp_path: Path):
    config = write_config(tmp_path, {"demo": {**stdio_server(), "agentq": {
        "timeout": 1, "tools": {"flaky": {"retries": 1, "retry_backoff": 0.1}}}}})
    _, announcement = mcp_worker(worker_procs, config, ["flaky", "slow"])
    options = {a["name"]: a for a in announcement["activities"]}
    assert (options["flaky"]["retries"], options["slow"]["retries"], options["slow"]["timeout"]) == (1, 0, 1.0)
    harness.worker()
    retried = harness.run({"calls": [{"_tool": "flaky", "_outputPath": "†state.flaky"}]}, timeout=60)
    assert retried["status"] == "succeeded", (retried["error"], harness.client().calls(retried["id"])[0])
    assert retried["state"] == {"flaky": "ok after 2 calls"}
    (call,) = harness.client().calls(retried["id"])
    assert call["attempts"] == 2
    late = harness.run({"calls": [{"_tool": "slow", "seconds": 5, "_outputPath": "†state.slow"}]}, timeout=60)
    assert late["status"] == "failed", late
    (call,) = harness.client().calls(late["id"])
    assert late["state"] == {} and call["attempts"] == 1, (late, call)
    assert "tools/call 'slow'" in call["error"]["message"], call["error"]


@pytest.fixture
def doubler(harness: Harness) -> Harness:
    """A worker serving `double` (a Python activity) and the engine, for jobs submitted through `agentq mcp`."""
    harness.tool("double", params={"n": {"type": "integer"}}, output={"type": "integer"}, required=["n"])
    harness.activities.register("double", lambda call: call["n"] * 2)
    harness.worker()
    return harness


async def drive_agentq_mcp(client: Client) -> dict[str, Any]:
    names = sorted(tool.name for tool in (await client.list_tools()).tools)
    submitted = await client.call_tool("submit_job", {"job": {
        "calls": [{"_tool": "double", "n": 21, "_outputPath": "†state.x"}]}})
    job_id = submitted.structured_content["id"]
    result = await client.call_tool("job_result", {"job_id": job_id, "wait_s": 30})
    status = await client.call_tool("job_status", {"job_id": job_id})
    refused = await client.call_tool("submit_job", {"job": {"calls": [{"_tool": "double", "n": "x"}]}})
    return {"names": names, "result": result, "status": status, "refused": refused}


def test_agentq_mcp_over_stdio_submits_a_job_and_reads_its_result(doubler: Harness, redis_url: str):
    params = StdioServerParameters(command=sys.executable, args=["-m", "agentq.cli", "mcp"],
                                   env=base_env(redis_url), cwd=str(ROOT))

    async def drive() -> dict[str, Any]:
        async with Client(params, mode="legacy") as client:
            return await drive_agentq_mcp(client)

    seen = asyncio.run(asyncio.wait_for(drive(), 60))
    assert seen["names"] == ["approve_call", "job_calls", "job_result", "job_status", "reject_call", "submit_job"]
    record = seen["result"].structured_content
    assert record["status"] == "succeeded" and record["state"] == {"x": 42}, record
    assert seen["status"].structured_content["status"] == "succeeded"
    refused = seen["refused"]
    assert refused.is_error and "JobValidationError" in refused.content[0].text
    assert "/calls/0/n" in refused.content[0].text  # every problem with its JSON pointer


TENANT_TOKEN = "acme-token-0123456789"


@pytest.fixture
def agentq_mcp_http(redis_url: str, tmp_path: Path) -> Iterator[str]:
    """`agentq mcp --port 0` with the API token `secret-token` (an admin) and a tenant's token from a tokens file:
    its URL, read from what it prints."""
    log_path = tmp_path / "agentq-mcp.log"
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({TENANT_TOKEN: {"tenant": "acme", "role": "submit"}}))
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "agentq.cli", "mcp", "--port", "0"], cwd=str(ROOT),
                                env=base_env(redis_url, AGENTQ_API_TOKENS=f"secret-token,@{tokens}"), stdout=log,
                                stderr=subprocess.STDOUT)
    try:
        def url() -> str | None:
            assert proc.poll() is None, log_path.read_text()
            text = log_path.read_text()
            return text.split("serving ", 1)[1].split()[0] if "serving " in text else None

        yield wait_for(url, 30, "agentq mcp to listen", on_timeout=log_path.read_text)
    finally:
        proc.terminate()
        proc.wait(10)


def test_agentq_mcp_over_streamable_http_needs_the_api_token_and_decides_approvals(
        doubler: Harness, agentq_mcp_http: str):
    url = agentq_mcp_http
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    accept = {"Accept": "application/json, text/event-stream"}
    # its tools act for every tenant: a tenant's token is refused as a wrong one is
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Bearer {TENANT_TOKEN}"}):
        answer = httpx2.post(url, json=initialize, headers={**accept, **headers}, timeout=10)
        assert answer.status_code == 401, answer.text

    async def drive() -> dict[str, Any]:
        http = httpx2.AsyncClient(headers={"Authorization": "Bearer secret-token"}, timeout=30)
        async with http, Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
            seen = await drive_agentq_mcp(client)
            held = await client.call_tool("submit_job", {"job": {
                "calls": [{"_tool": "double", "n": 5, "_outputPath": "†state.y"}],
                "options": {"approval": ["double"]}}})
            job_id = held.structured_content["id"]
            deadline = time.monotonic() + 30
            while True:
                calls = (await client.call_tool("job_calls", {"job_id": job_id})).structured_content["calls"]
                if (calls and calls[0]["status"] == "awaiting_approval") or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.05)
            seen["awaiting"] = calls[0]["status"]
            seen["approved"] = await client.call_tool("approve_call", {"job_id": job_id, "call_id": calls[0]["id"]})
            seen["held"] = await client.call_tool("job_result", {"job_id": job_id, "wait_s": 30})
            return seen

    seen = asyncio.run(asyncio.wait_for(drive(), 90))
    assert seen["result"].structured_content["state"] == {"x": 42}
    assert seen["awaiting"] == "awaiting_approval"
    assert not seen["approved"].is_error, seen["approved"]
    held = seen["held"].structured_content
    assert held["status"] == "succeeded" and held["state"] == {"y": 10}, held


@pytest.mark.parametrize(("config", "expected"), [
    ('{"mcpServers": ', ["not JSON", "line 1 column 16"]),
    (json.dumps({"mcpServers": {"ghost": {"command": "/nonexistent/mcp-server"}}}),
     ["MCP server 'ghost'", "cannot start", "/nonexistent/mcp-server"]),
    (json.dumps({"mcpServers": {"quits": {"command": sys.executable, "args": ["-c", "raise SystemExit(2)"]}}}),
     ["MCP server 'quits'", "cannot start", "closed the connection before the handshake ended"]),
], ids=["not-json", "no-such-command", "exits-at-once"])
def test_a_bad_mcp_config_or_a_server_that_cannot_start_is_one_line_at_worker_start(
        redis_url: str, tmp_path: Path, config: str, expected: list[str]):
    path = tmp_path / "servers.json"
    path.write_text(config)
    done = cli(redis_url, "worker", "--mcp", str(path), "--pool", "threads", timeout=90)
    assert done.returncode == 1, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    for text in expected:
        assert text in lines[0], lines[0]

"""`agentq activities forget` of an MCP tool's activity unpublishes the tool that came with it (it cannot run
without one), once no live worker serves it; a plain tool stays published and turns latent. Real `agentq worker
--mcp` processes and a real MCP server over stdio."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentq.client import Client
from tests.integration.procs import WorkerProcs, cli, wait_for
from tests.integration.test_mcp import mcp_worker, stdio_server, write_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def test_forgetting_an_mcp_tools_activity_unpublishes_the_tool(worker_procs: WorkerProcs, redis_url: str,
                                                               tmp_path: Path):
    proc, _ = mcp_worker(worker_procs, write_config(tmp_path, {"demo": stdio_server()}), ["add", "shout"])
    plain = worker_procs.start(["procEcho"])
    worker_procs.wait_live(plain, ["procEcho"])
    with Client(redis_url) as client:
        assert {"add", "shout", "procEcho"} <= set(client.tools())
        # while a live worker serves it, the activity stays known and its tool listed
        served = cli(redis_url, "activities", "forget", "add")
        assert served.returncode == 0 and "still served by live workers" in served.stderr, served.stderr
        assert "add" in client.tools()
        proc.stop()
        plain.stop()
        wait_for(lambda: not any(a["live"] for n, a in client.activities().items() if n in ("add", "procEcho")),
                 20, "the workers to be gone")
        forgotten = cli(redis_url, "activities", "forget", "add")
        assert forgotten.returncode == 0 and "forgot activity add" in forgotten.stdout, forgotten.stderr
        tools = client.tools()
        assert "add" not in tools and "add" not in client.activities()
        assert "shout" in tools  # another tool of the server, not forgotten
        listed = cli(redis_url, "tools", "-m", "tests.integration.procs_activities")
        assert listed.returncode == 0 and '"const":"add"' not in listed.stdout and '"const":"shout"' in listed.stdout
        # a plain tool has a schema of its own: it stays published, and its calls go to the model
        assert cli(redis_url, "activities", "forget", "procEcho").returncode == 0
        assert "procEcho" in client.tools() and "procEcho" not in client.activities()

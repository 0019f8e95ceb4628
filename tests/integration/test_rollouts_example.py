"""docs/rollouts.md's "Try it" commands, as written, against the example it ships: a real `agentq worker -m
workers.emails` serving `sendEmail` versions 1 and 2, then each `agentq` command of the page's block run by the
command line on the session's private Redis (the page's `export` names the Redis; the test gives its own)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from agentq.client import Client
from tests.integration.procs import WorkerProcs, cli, wait_for

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parents[2]


def try_it_commands() -> list[str]:
    """The command lines of the page's "Try it" block, comments dropped."""
    page = (ROOT / "docs" / "rollouts.md").read_text(encoding="utf-8")
    block = re.search(r"## Try it\n.*?```sh\n(.*?)```", page, re.S)
    assert block is not None, "docs/rollouts.md has no Try it block"
    return [line.split("  #")[0].strip() for line in block.group(1).splitlines() if line.strip()]


def test_the_rollouts_page_commands_run_as_written(worker_procs: WorkerProcs, redis_url: str):
    export, worker, *commands = try_it_commands()
    assert export.startswith("export AGENTQ_REDIS_URL=")
    assert shlex.split(worker) == ["agentq", "worker", "-m", "workers.emails", "&"]
    proc = worker_procs.start(module="workers.emails", concurrency=4)
    worker_procs.wait_live(proc, ["sendEmail", "sendEmail@2"])
    assert [shlex.split(c)[:3] for c in commands] == [["agentq", "rollouts", "set"], ["agentq", "run",
                                                      "workers/rollouts/emails.json"], ["agentq", "rollouts"],
                                                     ["agentq", "rollouts", "clear"]]
    said = {}
    for command in commands:
        args = shlex.split(command)[1:]
        if args == ["rollouts"]:  # each call is counted right after its commit: the job's last may lag a little
            with Client(redis_url) as client:
                wait_for(lambda: sum(r["calls"] for r in client.rollouts.report()["tools"]["sendEmail"]["routes"])
                         == 40, 10, "the report to count the 40 calls")
        done = cli(redis_url, *args, timeout=120)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        said[args[0] if args[0] == "run" else " ".join(args[:2])] = done.stdout

    page = (ROOT / "docs" / "rollouts.md").read_text(encoding="utf-8")
    answer = said["rollouts set"].strip()
    assert answer == ("rollout rule for sendEmail set: sendEmail@2 for tenants acme, globex; 10% sendEmail@2; the "
                      "rest as usual")
    assert re.sub(r"\s+", " ", answer) in re.sub(r"\s+", " ", page.replace("`", ""))
    state = json.loads(said["run"][said["run"].index("state:") + len("state:"):said["run"].index("\n}\n") + 2])
    versions = {sent["version"]: sent["provider"] for sent in state["sent"].values()}
    assert len(state["sent"]) == 40 and versions.get("1") == "smtp.example.com", state
    header, *rows = said["rollouts"].splitlines()
    assert header.split() == ["TOOL", "ROUTE", "CALLS", "SUCCESS", "P50", "P95", "COST", "RULE"]
    routes = {row.split()[1]: int(row.split()[2]) for row in rows}
    assert list(routes) == ["sendEmail@2", "(usual)"] and sum(routes.values()) == 40, said["rollouts"]
    v2 = sum(1 for sent in state["sent"].values() if sent["version"] == "2")
    assert routes["sendEmail@2"] == v2 and all(sent["provider"] == "api.mail.example.net"
                                               for sent in state["sent"].values() if sent["version"] == "2")
    assert said["rollouts clear"].strip() == "rollout rule for sendEmail cleared"

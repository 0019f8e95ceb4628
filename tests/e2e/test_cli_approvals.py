"""`agentq calls`, `approve`, `reject` and `edit` as a user runs them: each command a separate process on the
session's private Redis, against a real Celery worker that this test process runs in a thread (it publishes
its tools and announces its activities, as `agentq worker` would). Jobs are submitted with `agentq submit`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentq.engine.call_views import CALL_FIELDS
from agentq.protocol.activities import ActivityRegistry
from agentq.protocol.tools import ToolRegistry
from agentq.runtime.root import Runtime
from agentq.runtime.worker import InProcessWorker
from agentq.settings import Settings
from agentq.store.state import StateStore

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 15.0

pytestmark = pytest.mark.timeout(120)

SEND = {"type": "object", "description": "send a mail (test tool)", "required": ["to"], "properties": {
    "_tool": {"type": "string", "const": "send"}, "to": {"type": "string"}, "subject": {"type": "string"},
    "_output": {}}}
NOTE = {"type": "object", "description": "write a note (test tool)", "properties": {
    "_tool": {"type": "string", "const": "note"}, "text": {}, "_output": {}}}


def agentq(*args: str, redis_url: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQ_")}
    environment["AGENTQ_REDIS_URL"] = redis_url
    return subprocess.run([sys.executable, "-m", "agentq.cli", *args], cwd=ROOT, env=environment, input=stdin,
                          capture_output=True, text=True, timeout=timeout)


def one_error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert result.stdout == "" and "Traceback" not in result.stderr, result
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and result.stderr.endswith("\n") and lines[0].startswith("agentq: error: "), lines
    return lines[0]


def wait_until(condition: Callable[[], Any], what: str, timeout: float = TIMEOUT) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class Fleet:
    """The private Redis, a store on it, and what the worker's activities received."""

    def __init__(self, redis_url: str, store: StateStore):
        self.redis_url = redis_url
        self.store = store
        self.received: list[dict] = []
        self.lock = threading.Lock()

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return agentq(*args, redis_url=self.redis_url, stdin=stdin)

    def tools_run(self) -> list[str]:
        with self.lock:
            return [c["_tool"] for c in self.received]

    def submit_held(self, calls: list[dict] | None = None) -> tuple[str, str, list[str]]:
        """Submit (with `agentq submit -`) a job whose `send` call needs approval, beside a `note` call and
        `calls`; return (job id, the send call's id, every call id) once the note is done."""
        job = {"calls": [{"_tool": "send", "to": "a@example.com", "subject": "hi", "_outputPath": "†state.mail"},
                         {"_tool": "note", "text": "first", "_outputPath": "†state.note"}, *(calls or [])],
               "options": {"approval": ["send"]}}
        submitted = self.run("submit", "-", stdin=json.dumps(job))
        assert submitted.returncode == 0, submitted.stderr
        job_id = submitted.stdout.strip()
        records = sorted(self.store.call_records(job_id).values(), key=lambda r: r.index)
        ids = [r.id for r in records]
        wait_until(lambda: self.store.call_statuses(job_id)[ids[1]].value == "done", "the note call to be done")
        assert self.store.call_statuses(job_id)[ids[0]].value == "awaiting_approval"
        return job_id, ids[0], ids

    def wait_job(self, job_id: str) -> dict:
        wait_until(lambda: self.store.job_status(job_id).is_final, f"job {job_id} to end")
        return self.store.record(job_id).to_dict()


@pytest.fixture
def fleet(redis_url: str) -> Iterator[Fleet]:
    store = StateStore(redis_url)
    fleet = Fleet(redis_url, store)
    tools, activities = ToolRegistry(), ActivityRegistry()
    tools.register("send", SEND)
    tools.register("note", NOTE)

    def recorded(result: Callable[[dict], Any]) -> Callable[[dict], Any]:
        def run(call: dict) -> Any:
            with fleet.lock:
                fleet.received.append(dict(call))
            return result(call)
        return run

    activities.register("send", recorded(lambda call: {"sent_to": call["to"]}))
    activities.register("note", recorded(lambda call: {"noted": call["text"]}))
    runtime = Runtime(settings=Settings(redis_url=redis_url, heartbeat_s=1.0, lease_s=3.0), activities=activities,
                      tools=tools)
    options = dict(runtime.app.conf.broker_transport_options or {})
    runtime.app.conf.broker_transport_options = {**options, "polling_interval": 0.1}
    worker = InProcessWorker(runtime, activities=True, engine=True, concurrency=4).start()
    try:
        yield fleet
    finally:
        worker.stop()
        runtime.close()
        store.close()


# -------------------------------------------------------------------------------------------------- calls


def test_calls_prints_a_table_and_json(fleet: Fleet):
    job_id, send, ids = fleet.submit_held([{"_tool": "note", "text": "†state.mail.sent_to",
                                            "_outputPath": "†state.confirmed", "_instance": "eu"}])
    shown = fleet.run("calls", job_id)
    assert shown.returncode == 0 and shown.stderr == "", shown
    header, *rows = shown.stdout.splitlines()
    assert header.split() == ["CALL", "TOOL", "MODE", "INSTANCE", "STATUS", "ATTEMPTS", "DURATION", "WAITS", "ON"]
    assert [row.split()[:6] for row in rows] == [
        [send, "send", "explicit", "-", "awaiting_approval", "0"],
        [ids[1], "note", "explicit", "-", "done", "1"],
        [ids[2], "note", "explicit", "eu", "pending", "0"]]
    assert rows[0].split()[6:] == ["-", "-"]  # no duration, waits on nothing
    duration, unit, waits = rows[1].split()[6:]
    assert float(duration) >= 0 and (unit, waits) == ("ms", "-")
    assert rows[2].split()[6:] == ["-", send]  # no duration yet; waits on the held call
    assert header.index("STATUS") == rows[0].index("awaiting_approval") == rows[2].index("pending")  # aligned

    as_json = fleet.run("calls", job_id, "--json")
    assert as_json.returncode == 0, as_json.stderr
    calls = json.loads(as_json.stdout)
    assert [list(call) for call in calls] == [list(CALL_FIELDS)] * 3
    assert [c["id"] for c in calls] == ids and calls[2]["depends_on"] == [send]
    assert (calls[1]["status"], calls[1]["attempts"], calls[1]["error"]) == ("done", 1, None)


def test_calls_of_a_job_without_calls_and_of_an_unknown_job(fleet: Fleet):
    submitted = fleet.run("submit", "-", stdin=json.dumps({"calls": []}))
    shown = fleet.run("calls", submitted.stdout.strip())
    assert (shown.returncode, shown.stdout) == (0, f"job {submitted.stdout.strip()} has no calls\n"), shown
    assert one_error_line(fleet.run("calls", "job_nope")) == (
        "agentq: error: no job 'job_nope' (never submitted, or expired)")


# ------------------------------------------------------------------------------------------------ decisions


def test_approve_lets_the_call_run(fleet: Fleet):
    job_id, send, _ = fleet.submit_held()
    assert "send" not in fleet.tools_run()
    approved = fleet.run("approve", job_id, send)
    assert approved.returncode == 0 and approved.stderr == "", approved
    assert approved.stdout.startswith(f"approved {send} (send); status: ")
    record = fleet.wait_job(job_id)
    assert record["status"] == "succeeded" and record["state"]["mail"] == {"sent_to": "a@example.com"}
    again = one_error_line(fleet.run("approve", job_id, send))
    assert again == f"agentq: error: call {send} of job {job_id} is done, not awaiting approval"


def test_reject_with_a_reason_fails_the_call(fleet: Fleet):
    job_id, send, _ = fleet.submit_held()
    rejected = fleet.run("reject", job_id, send, "--reason", "too risky", "--json")
    assert rejected.returncode == 0 and rejected.stderr == "", rejected
    call = json.loads(rejected.stdout)
    assert (call["id"], call["status"], call["error"]) == (
        send, "failed", {"type": "Rejected", "message": "rejected by reviewer: too risky"})
    result = fleet.run("result", job_id, "--wait", "--timeout", str(TIMEOUT))
    assert result.returncode == 1 and json.loads(result.stdout)["status"] == "failed", result
    shown = fleet.run("calls", job_id)
    assert f"{send}: Rejected: rejected by reviewer: too risky" in shown.stdout.splitlines()
    assert "send" not in fleet.tools_run()


def test_reject_prints_one_line(fleet: Fleet):
    job_id, send, _ = fleet.submit_held()
    rejected = fleet.run("reject", job_id, send)
    assert (rejected.returncode, rejected.stdout) == (
        0, f"rejected {send} (send); status: failed; rejected by reviewer\n"), rejected


@pytest.mark.parametrize("source", ["argument", "file", "stdin"])
def test_edit_runs_the_call_with_the_new_params(fleet: Fleet, source: str, tmp_path: Path):
    job_id, send, _ = fleet.submit_held()
    params = json.dumps({"to": "b@example.com", "subject": "édité"})
    stdin = None
    if source == "argument":
        argument = params
    elif source == "file":
        (tmp_path / "params.json").write_text(params, encoding="utf-8")
        argument = f"@{tmp_path / 'params.json'}"
    else:
        argument, stdin = "-", params
    edited = fleet.run("edit", job_id, send, argument, stdin=stdin)
    assert edited.returncode == 0 and edited.stderr == "", edited
    assert edited.stdout.startswith(f"edited {send} (send); status: ")
    record = fleet.wait_job(job_id)
    assert record["status"] == "succeeded" and record["state"]["mail"] == {"sent_to": "b@example.com"}
    (received,) = [c for c in fleet.received if c["_tool"] == "send"]
    assert (received["to"], received["subject"], received["_outputPath"]) == (
        "b@example.com", "édité", "†state.mail")


# ------------------------------------------------------------------------------------------------- errors


def test_edit_with_invalid_params_is_one_line_naming_each_problem_and_changes_nothing(fleet: Fleet):
    job_id, send, _ = fleet.submit_held()
    line = one_error_line(fleet.run("edit", job_id, send, '{"subject": 42}'))
    assert line.startswith("agentq: error: edit rejected: "), line
    assert "/params/subject: 42 is not of type 'string'" in line
    assert "/params: missing required property 'to'" in line
    assert fleet.store.call_statuses(job_id)[send].value == "awaiting_approval"
    assert fleet.store.call_records(job_id, [send])[send].call["to"] == "a@example.com"


@pytest.mark.parametrize("argument, stdin, message", [
    ("{not json", None, "agentq: error: PARAMS_JSON is not valid JSON: "),
    ("-", "[1,", "agentq: error: stdin is not valid JSON: "),
    ("@no/such/params.json", None, "agentq: error: cannot read params file no/such/params.json: "),
    ('["to"]', None, "agentq: error: edit rejected: /params: params must be an object"),
])
def test_unusable_params_are_one_line(fleet: Fleet, argument: str, stdin: str | None, message: str):
    job_id, send, _ = fleet.submit_held()
    assert one_error_line(fleet.run("edit", job_id, send, argument, stdin=stdin)).startswith(message)
    assert fleet.store.call_statuses(job_id)[send].value == "awaiting_approval"


def test_unknown_calls_and_jobs_and_conflicts_are_one_line(fleet: Fleet):
    job_id, send, ids = fleet.submit_held()
    for args in (("approve", job_id, "call_nope"), ("reject", job_id, "call_nope", "--reason", "x"),
                 ("edit", job_id, "call_nope", "{}")):
        assert one_error_line(fleet.run(*args)) == f"agentq: error: job {job_id!r} has no call 'call_nope'"
    assert one_error_line(fleet.run("approve", "job_nope", send)) == (
        "agentq: error: no job 'job_nope' (never submitted, or expired)")
    note = ids[1]
    assert one_error_line(fleet.run("reject", job_id, note)) == (
        f"agentq: error: call {note} of job {job_id} is done, not awaiting approval")
    assert fleet.store.call_statuses(job_id)[send].value == "awaiting_approval"


@pytest.mark.parametrize("command", ["calls", "approve", "reject", "edit"])
def test_help_names_the_redis_rule(command: str):
    shown = agentq(command, "--help", redis_url="redis://127.0.0.1:1/0")
    assert shown.returncode == 0 and f"usage: agentq {command}" in shown.stdout, shown
    assert "AGENTQ_REDIS_URL" in shown.stdout


@pytest.mark.parametrize("args", [("calls", "job_1"), ("approve", "job_1", "call_1"), ("reject", "job_1", "call_1"),
                                  ("edit", "job_1", "call_1", "{}")])
def test_an_unreachable_redis_is_one_line(args: tuple[str, ...]):
    line = one_error_line(agentq(*args, redis_url="redis://127.0.0.1:1/0"))
    assert line.startswith("agentq: error: cannot reach the state store at redis://127.0.0.1:1/0"), line

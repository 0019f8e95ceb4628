"""What the soak's worker processes serve (`agentq worker -m benchmarks.soaking.activities`).

Every run of a handler appends lines to the activity ledger (`SOAK_LEDGER`), a file outside the store, written
with one short append each (atomic under O_APPEND):

    start <tag> <run> <pid> <unix time> <tenant> <key>
    end   <tag> <run> <pid> <unix time>
    fail  <tag> <run> <pid> <unix time>        (a failure the job asked for: a retry or a `||` branch)

`tag` names the call (unique in the soak), `run` one run of its handler. A call with `fail_first` fails its first
run (a marker file in `SOAK_MARKS`, outside the store, says it did), so its retry runs it again on purpose.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

from agentq.protocol.activities import Activity
from agentq.protocol.tools import Tool

OUTPUT = {"type": "object", "properties": {"tag": {"type": "string"}, "run": {"type": "string"}}}
PARAMS = {"tag": {"type": "string"}, "seconds": {"type": "number", "minimum": 0}, "tenant": {"type": "string"},
          "account": {"type": "string"}, "fail_first": {"type": "boolean"}, "after": {}}


class Asked(RuntimeError):
    """A failure the job asked for (`fail_first`, `soakFail`)."""


def _tool(name: str, description: str, **meta: Any) -> None:
    Tool.register(name, {
        "type": "object", "description": description, **meta,
        "properties": {"_tool": {"type": "string", "const": name}, "_outputPath": {"type": "string", "pattern": "^†"},
                       "_outputMethod": {"enum": ["set", "push"]}, **PARAMS, "_output": OUTPUT},
        "required": ["_tool", "tag"]})


def _ledger(line: str) -> None:
    with open(os.environ["SOAK_LEDGER"], "a", encoding="utf-8") as ledger:
        ledger.write(line + "\n")


def _first_time(tag: str) -> bool:
    """True once per tag, across processes: a marker file created exclusively."""
    try:
        os.close(os.open(os.path.join(os.environ["SOAK_MARKS"], tag), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def run(call: dict, *, fail: bool = False) -> dict:
    tag, run_id = str(call["tag"]), uuid.uuid4().hex[:10]
    account = str(call.get("account") or "-")
    _ledger(f"start {tag} {run_id} {os.getpid()} {time.time():.3f} {call.get('tenant') or '-'} {account}")
    time.sleep(float(call.get("seconds") or 0))
    if fail or (call.get("fail_first") and _first_time(tag)):
        _ledger(f"fail {tag} {run_id} {os.getpid()} {time.time():.3f}")
        raise Asked(f"{tag} failed as asked")
    _ledger(f"end {tag} {run_id} {os.getpid()} {time.time():.3f}")
    return {"tag": tag, "run": run_id}


_tool("soakStep", "A step of a soak job: sleeps `seconds`, fails its first run when `fail_first`.")
_tool("soakKeyed", "A step limited to one running call per account.",
      **{"x-concurrency": {"key": "†input.account", "limit": 1}})
_tool("soakReview", "A step a reviewer approves first.", **{"x-approval": "required"})
_tool("soakFail", "A step that always fails (a `||` branch takes it).")
Tool.register("soakDraft", {
    "type": "object", "description": "Drafts a one-line note about the step's result (written by the model).",
    "properties": {"_tool": {"type": "string", "const": "soakDraft"},
                   "_outputPath": {"type": "string", "pattern": "^†"},
                   "about": {}, "_output": {"type": "string"}},
    "required": ["_tool"]})
Tool.register("soakHelper", {
    "type": "object", "description": "Asks the soak's helper module (a clean-room child job) a question.",
    "properties": {"_tool": {"type": "string", "const": "soakHelper"}, "_module": {"const": "soakHelper"},
                   "_imports": {"const": ["brief"]}, "_outputPath": {"type": "string", "pattern": "^†"},
                   "question": {"type": "string"}, "_output": {"type": "object"}},
    "required": ["_tool", "question"]})

Activity.register("soakStep", run, retries=2, retry_backoff=0.2)
Activity.register("soakKeyed", run, retries=2, retry_backoff=0.2)
Activity.register("soakReview", run)
Activity.register("soakFail", lambda call: run(call, fail=True))

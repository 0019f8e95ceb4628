"""Activities served by the separate worker processes the integration tests start.

`agentq worker -m tests.integration.procs_activities` imports this module, which registers activities on the
default `Activity` registry; their tool schemas are the JSON files in `TOOLS_DIR`. The test process itself never
imports this module (a submitter needs no activity code).

`PROCS_ACTIVITIES` (comma-separated names, default: all) selects which activities this process serves, so two
processes can serve different activity sets. Every handler counts its runs in the private Redis the worker uses
(`AGENTQ_REDIS_URL`, or `PROCS_REDIS_URL` when set): `procs:runs:<activity>:<tag>` (INCR) and
`procs:pids:<activity>:<tag>` (RPUSH of the pid that ran it), so a test can tell how many times a handler started
and in which process — except procCharge, which runs while the state store may be down and so writes its
`start`/`end` lines to the file `PROCS_LEDGER`.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from agentq.protocol.activities import Activity

TOOLS_DIR = Path(__file__).resolve().parent / "tools"

_redis: Any = None


def _client() -> Any:
    global _redis
    if _redis is None:
        import redis

        # PROCS_REDIS_URL: where to count when the state store is no plain Redis (a cluster, a Sentinel group)
        url = os.environ.get("PROCS_REDIS_URL") or os.environ["AGENTQ_REDIS_URL"]
        _redis = redis.Redis.from_url(url, decode_responses=True)
    return _redis


def runs_key(activity: str, tag: str = "") -> str:
    return f"procs:runs:{activity}:{tag}"


def pids_key(activity: str, tag: str = "") -> str:
    return f"procs:pids:{activity}:{tag}"


def _mark(activity: str, call: dict) -> int:
    """Record that this handler started, in this process; returns how many times it started for the tag."""
    tag = str(call.get("tag", ""))
    pipe = _client().pipeline()
    pipe.incr(runs_key(activity, tag))
    pipe.rpush(pids_key(activity, tag), os.getpid())
    return int(pipe.execute()[0])


def proc_a(call: dict) -> dict:
    _mark("procA", call)
    return {"pid": os.getpid(), "value": call["x"] + 1}


def proc_b(call: dict) -> dict:
    _mark("procB", call)
    return {"pid": os.getpid(), "value": call["a"] * 10}


def late_thing(call: dict) -> dict:
    _mark("lateThing", call)
    return {"pid": os.getpid(), "note": call.get("note", "")}


def proc_slow(call: dict) -> dict:
    start = _mark("procSlow", call)
    time.sleep(float(call["seconds"]))
    return {"pid": os.getpid(), "start": start}


def proc_echo(call: dict) -> dict:
    _mark("procEcho", call)
    return {"pid": os.getpid(), "text": call["text"]}


def proc_charge(call: dict) -> dict:
    """A side effect that must happen once per call (a card charge): one `start` and one `end` line in the
    ledger file, whatever happens to the state store meanwhile."""
    tag = str(call["tag"])
    _ledger(f"start {tag} {os.getpid()} {time.time():.3f}")
    time.sleep(float(call["seconds"]))
    _ledger(f"end {tag} {os.getpid()} {time.time():.3f}")
    return {"charged": tag, "pid": os.getpid()}


def _ledger(line: str) -> None:
    with open(os.environ["PROCS_LEDGER"], "a", encoding="utf-8") as ledger:  # one short append: atomic
        ledger.write(line + "\n")


def proc_crash(call: dict) -> dict:
    """A poison call: the process running it dies every time (as a segfault or the OOM killer would do it)."""
    _mark("procCrash", call)
    os._exit(13)


HANDLERS = {"procA": proc_a, "procB": proc_b, "lateThing": late_thing, "procSlow": proc_slow, "procEcho": proc_echo,
            "procCharge": proc_charge, "procCrash": proc_crash}

#: Per-activity options; procEcho has its own queue, so its calls are routed by the worker's announcement.
OPTIONS: dict[str, dict[str, Any]] = {
    "procEcho": {"queue": "procs.echo", "retries": 2, "retry_backoff": 0.5, "rate_limit": "50/s"},
}

_selected = [n.strip() for n in os.environ.get("PROCS_ACTIVITIES", "").split(",") if n.strip()] or list(HANDLERS)
_queue_prefix = os.environ.get("PROCS_QUEUE_PREFIX", "")  # each activity on `<prefix>.<name>` (a shared broker)
for _name in _selected:
    _options = {**OPTIONS.get(_name, {}), **({"queue": f"{_queue_prefix}.{_name}"} if _queue_prefix else {})}
    Activity.register(_name, HANDLERS[_name], **_options)

"""The Redis commands of a call's hot path, counted inside the Lua steps too (`MONITOR`): what each step of an
independent call runs, so a later change cannot add one silently (see docs/architecture.md, "runtime/"). Round
trips are pinned by `test_hot_path.py`."""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import redis

from tests.integration.test_hot_path import TIMEOUT, _worker


@dataclass
class Step:
    """One request of a client as `MONITOR` shows it, with the commands its Lua script ran (`script`: its name)."""

    client: str
    command: str
    script: str = ""
    key: str = ""  # its first argument (a key for most commands)
    arguments: int = 0  # how many it has after that one
    inside: list[str] = field(default_factory=list)


class Monitor:
    """Every command Redis runs while it is open, grouped into requests (a script's own commands follow it)."""

    def __init__(self, url: str, scripts: dict[str, str]):
        self.scripts = scripts  # sha -> name
        self.steps: list[Step] = []
        self._marker = f"end-of-monitor-{time.monotonic_ns()}"
        self._connection = redis.Redis.from_url(url, decode_responses=True)
        self._admin = redis.Redis.from_url(url, decode_responses=True)
        self._monitor = self._connection.monitor().__enter__()
        self._done = threading.Event()
        threading.Thread(target=self._listen, daemon=True).start()

    def _listen(self) -> None:
        while True:
            entry = self._monitor.next_command()
            words = entry["command"].split(" ")
            name = words[0].upper()
            if name == "ECHO" and self._marker in entry["command"]:
                break
            if entry["client_type"] == "lua":
                if self.steps:
                    self.steps[-1].inside.append(name)
                continue
            script = self.scripts.get(words[1], "?") if name == "EVALSHA" else ""
            key = words[1].strip('"') if len(words) > 1 else ""
            self.steps.append(Step(f"{entry['client_address']}:{entry['client_port']}", name, script, key,
                                   max(0, len(words) - 2)))
        self._done.set()

    def close(self) -> list[Step]:
        self._admin.echo(self._marker)
        assert self._done.wait(TIMEOUT), "MONITOR did not see its end"
        self._monitor.__exit__(None, None, None)
        self._connection.close()
        self._admin.close()
        return self.steps


def test_an_independent_calls_claim_and_commit_run_seven_commands_each_and_its_delivery_notes_nothing_unacked(harness):
    harness.tool("noop", params={"i": {"type": "integer"}})
    harness.activities.register("noop", lambda call: call["i"])
    worker = _worker(harness)
    store = worker.runtime.store
    client = harness.client()
    assert client.submit({"calls": [{"_tool": "noop", "i": 0, "_outputPath": "†state.r"}]}).result(
        timeout=TIMEOUT)["state"] == {"r": 0}  # scripts loaded, the worker's tool known
    scripts = {script.sha: name for name, script in store.scripts.registered.items()}

    monitor = Monitor(harness.settings.redis_url, scripts)
    calls = 20
    handle = client.submit({"calls": [{"_tool": "noop", "i": i, "_outputPath": f"†state.r{i}"} for i in range(calls)]})
    assert handle.result(timeout=TIMEOUT)["state"] == {f"r{i}": i for i in range(calls)}
    steps = monitor.close()

    claims = [s.inside for s in steps if s.script == "claim"]
    commits = [s.inside for s in steps if s.script == "commit"]
    assert len(claims) == calls and len(commits) == calls
    # a claim of a plan job whose tool this process found current already (not the job's first; nor its last,
    # which also reads what ending the job reads): the call's status, the job's fields, its attempt, its status
    # and lease written, the stored record (the task's is checked against it), its call.started; the tool's
    # schema is not read
    for inside in claims[1:-1]:
        assert sorted(inside) == sorted(["HGET", "HMGET", "HINCRBY", "HSET", "SET", "HGET", "XADD"]), inside
    assert claims[0].count("HGET") == 3  # the job's first claim here: the tool's schema read once
    # a commit (not the first, which creates the log, nor the last, which ends the job): the call's status, its
    # lease read and ended in one command, the job's fields, the log appended, the status written, call.finished,
    # the job's open calls counted down
    for inside in commits[1:-1]:
        assert sorted(inside) == sorted(["HGET", "GETDEL", "HMGET", "RPUSH", "HSET", "XADD", "HINCRBY"]), inside
    # the step that ends the job (the last commit, or finalize.lua after it) counts the end for the metrics itself
    # on one Redis: out of the active, approvals and tenant's active sets, counted under its status and tenant;
    # no command of that count is sent apart
    ends = [s.inside for s in steps if s.script in ("commit", "finalize") and "ZREM" in s.inside]
    assert len(ends) == 1 and ends[0].count("ZREM") == 3, ends
    assert store.redis.hgetall(store.fleet.job_totals) == {"succeeded": "2", "succeeded:default": "2"}
    # kombu's acknowledgement emulation: with the broker on the store's Redis, an activity call's delivery is not
    # noted unacknowledged at all, and its acknowledgement deletes nothing (the admission's sweep sends the task
    # again if its process dies: `runtime/redis_transport.py`); no ZREM, no MULTI/EXEC around them (what may be left
    # is periodic, such as the look for unacknowledged tasks to restore, under its mutex)
    outside = Counter(s.command for s in steps if not s.script)
    assert not outside["ZREM"] and not outside["HINCRBY"], outside
    # (a worker's BRPOP sent before MONITOR began is not seen, though it delivers the first task)
    assert outside["BRPOP"] >= calls - 1 and outside["MULTI"] <= 2 and outside["EXEC"] <= 2, outside
    unacked = [s for s in steps if not s.script and s.key in ("unacked", "unacked_index")]
    assert unacked == [], unacked
    # an admission step reads the parked list it takes from once (the places to fill and one more: whether the
    # list is left empty needs no read of its own), and no other: the priorities whose lists may hold calls are
    # kept with the counts (the step that finds the tenant's lists empty reads the other two to be sure, and
    # closes the queue's ring); a step that only gives places back: what the ended calls held, the counters, the
    # queue's ring, both written back
    admission = [s.inside for s in steps if s.script == "admission"]
    # the task-sent events of the calls a step admits: one message (one channel, fewer than EVENTS_GROUP calls)
    assert sum(inside.count("PUBLISH") for inside in admission) < calls
    assert all(inside.count("PUBLISH") <= 1 for inside in admission), admission
    assert any("LRANGE" in inside for inside in admission)  # the job's calls over the window waited
    for inside in admission:
        assert inside.count("LRANGE") <= (3 if "SREM" in inside else 1), inside
        if "LRANGE" not in inside and "EXISTS" not in inside:
            assert len(inside) <= 5, inside

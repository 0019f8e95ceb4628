"""Node names keep processes of one host apart by themselves (agentq/runtime/nodes.py): a worker, a dispatcher
with `-m` and a second worker on one host start without `--hostname`, Flower shows three names, and a restart
gives the same three. The claims underneath are checked against the private Redis too: two processes racing for
one name, a claim left by a crashed process, an explicit name held by a live one."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentq.errors import ConfigurationError, StoreUnavailableError
from agentq.runtime.nodes import Holder, claim_node, process_started
from agentq.store.fleet import RedisFleet
from agentq.store.state import StateStore
from tests.integration.procs import ROOT, WorkerProc, base_env, wait_for

HOST = socket.gethostname()


@pytest.fixture
def store(redis_url: str) -> Iterator[StateStore]:
    state = StateStore(redis_url)
    yield state
    state.redis.close()


def holder_of(store: StateStore, name: str) -> dict | None:
    held = store.redis.get(store.fleet.node(name))
    return json.loads(held) if held else None


# ------------------------------------------------------------------------------------ the claims, in-process


def test_processes_racing_for_the_default_name_get_distinct_lowest_names(store):
    start, names, errors = threading.Barrier(6), [], []

    def claim(n: int) -> None:
        start.wait()
        try:
            names.append(claim_node(RedisFleet(store), None, engine=False, worker_id=f"racer-{n}", ttl_s=30).name)
        except Exception as error:  # pragma: no cover - reported by the assertion below
            errors.append(error)

    racers = [threading.Thread(target=claim, args=(n,)) for n in range(6)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(30)
    assert errors == []
    assert sorted(names) == sorted([f"agentq-worker@{HOST}"] + [f"agentq-worker-{n}@{HOST}" for n in range(2, 7)])


def test_a_dispatcher_has_its_own_default_name_and_a_released_name_is_free_again(store):
    worker = claim_node(RedisFleet(store), None, engine=False, worker_id="w", ttl_s=30)
    dispatcher = claim_node(RedisFleet(store), None, engine=True, worker_id="d", ttl_s=30)
    assert (worker.name, dispatcher.name) == (f"agentq-worker@{HOST}", f"agentq-dispatcher@{HOST}")
    assert holder_of(store, worker.name)["id"] == "w"
    worker.release()
    assert holder_of(store, worker.name) is None
    again = claim_node(RedisFleet(store), None, engine=False, worker_id="w-again", ttl_s=30)
    assert again.name == f"agentq-worker@{HOST}" and holder_of(store, again.name)["id"] == "w-again"


def test_the_claim_of_a_process_that_no_longer_runs_is_taken_over_at_once(store):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(30)  # its pid belongs to no process now
    name = f"agentq-worker@{HOST}"
    store.redis.set(store.fleet.node(name), Holder("crashed", HOST, gone.pid, None).dumps(), px=60_000)
    assert claim_node(RedisFleet(store), None, engine=False, worker_id="restarted", ttl_s=30).name == name
    assert holder_of(store, name)["id"] == "restarted"

    # a pid that runs again, but another process than the holder's (its start time differs): taken over too
    reused = Holder("before-a-reboot", HOST, os.getpid(), "1")
    assert reused.started != process_started(os.getpid())
    store.redis.set(store.fleet.node(name), reused.dumps(), px=60_000)
    assert claim_node(RedisFleet(store), None, engine=False, worker_id="after", ttl_s=30).name == name


def test_a_claim_held_on_another_host_or_by_a_live_process_is_passed_over(store):
    name = f"agentq-worker@{HOST}"
    store.redis.set(store.fleet.node(name), Holder("elsewhere", "other-host", 1, None).dumps(), px=60_000)
    assert claim_node(RedisFleet(store), None, engine=False, worker_id="me", ttl_s=30).name == f"agentq-worker-2@{HOST}"


def test_an_explicit_name_held_by_a_live_process_is_refused_with_how_to_name_it(store):
    first = claim_node(RedisFleet(store), "orders@%h", engine=False, worker_id="first", ttl_s=30)
    assert first.name == f"orders@{HOST}"
    with pytest.raises(ConfigurationError, match=rf"a worker named orders@{HOST} runs on this host already "
                                                 rf"\(pid {os.getpid()}\).*--hostname orders-2@%h"):
        claim_node(RedisFleet(store), "orders@%h", engine=False, worker_id="second", ttl_s=30)
    assert holder_of(store, first.name)["id"] == "first"


def test_a_renewal_remakes_an_expired_claim_and_never_steals_one(store, caplog):
    claim = claim_node(RedisFleet(store), None, engine=False, worker_id="mine", ttl_s=3)
    store.redis.pexpire(store.fleet.node(claim.name), 100)
    claim.renew()
    assert 2000 < store.redis.pttl(store.fleet.node(claim.name)) <= 3000
    store.redis.delete(store.fleet.node(claim.name))  # expired, e.g. during a Redis outage: made again
    claim.renew()
    assert holder_of(store, claim.name)["id"] == "mine"

    store.redis.set(store.fleet.node(claim.name), Holder("other", HOST, os.getpid(), None).dumps())
    with caplog.at_level("WARNING", logger="agentq.worker"):
        claim.renew()
        claim.renew()
    assert holder_of(store, claim.name)["id"] == "other"
    assert [r.getMessage() for r in caplog.records].count(
        f"node name {claim.name} is claimed by another process now "
        f"({store.redis.get(store.fleet.node(claim.name))}): this worker's claim expired") == 1  # warned once
    claim.release()
    assert holder_of(store, claim.name)["id"] == "other"  # a release drops only this process's own claim


def test_an_unreachable_store_is_one_clear_error_at_start():
    unreachable = StateStore("redis://127.0.0.1:1/0")
    with pytest.raises(StoreUnavailableError, match=r"cannot reach the state store at redis://127\.0\.0\.1:1/0"):
        claim_node(RedisFleet(unreachable), None, engine=False, worker_id="w", ttl_s=30)


# ------------------------------------------------------------------------------------ real processes


class Fleet:
    """`agentq worker` / `agentq dispatcher` processes started with no --hostname, as a user runs them."""

    def __init__(self, redis_url: str, tmp_path: Path):
        self.redis_url, self.tmp_path = redis_url, tmp_path
        self.procs: list[WorkerProc] = []

    def start(self, *command: str) -> WorkerProc:
        log_path = self.tmp_path / f"{command[0]}-{len(self.procs)}.log"
        with open(log_path, "wb") as log:
            popen = subprocess.Popen(
                [sys.executable, "-m", "agentq.cli", *command, "--pool", "threads", "--concurrency", "1",
                 "--loglevel", "WARNING"],
                env=base_env(self.redis_url), cwd=str(ROOT), stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)
        proc = WorkerProc(popen, log_path, [])
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for proc in self.procs:
            proc.stop()


@pytest.fixture
def fleet(redis_url: str, tmp_path: Path) -> Iterator[Fleet]:
    processes = Fleet(redis_url, tmp_path)
    try:
        yield processes
    finally:
        processes.close()


COMMANDS = (("worker", "-m", "workers"), ("dispatcher", "-m", "workers"), ("worker",))
NAMES = {f"agentq-worker@{HOST}", f"agentq-dispatcher@{HOST}", f"agentq-worker-2@{HOST}"}


def node_of(store: StateStore, proc: WorkerProc) -> str | None:
    if not proc.alive():
        pytest.fail(f"{proc.pid} exited with {proc.popen.returncode}:\n{proc.output()}", pytrace=False)
    return next((w.node for w in RedisFleet(store).live_workers() if w.pid == proc.pid), None)


def start_all(fleet: Fleet, store: StateStore) -> dict[str, WorkerProc]:
    """Start the three processes at the same moment; their node names once each has announced itself."""
    procs = [fleet.start(*command) for command in COMMANDS]
    named = wait_for(lambda: all(node_of(store, p) for p in procs) and {node_of(store, p): p for p in procs}, 60,
                     "three processes to announce their node names",
                     on_timeout=lambda: "".join(f"\n--- {p.pid} ---\n{p.output()}" for p in procs))
    return named


def test_a_worker_a_dispatcher_and_a_second_worker_share_a_host_without_names(fleet, flower, store):
    def flower_alive() -> set[str]:
        return {name for name, alive in flower.alive_workers().items() if alive}

    named = start_all(fleet, store)
    assert set(named) == NAMES
    dispatcher = next(p for p in fleet.procs if p.popen.args[3] == "dispatcher")
    assert named[f"agentq-dispatcher@{HOST}"] is dispatcher  # with -m it still is the dispatcher
    wait_for(lambda: flower_alive() == NAMES, 60, f"Flower to show {sorted(NAMES)} serving",
             on_timeout=lambda: f"\n{flower.alive_workers()}")

    for proc in named.values():  # a warm stop of all three, then the same set started again
        proc.stop()
    assert all(holder_of(store, name) is None for name in NAMES)  # each dropped its claim
    again = start_all(fleet, store)
    assert set(again) == NAMES
    wait_for(lambda: flower_alive() == NAMES, 60, f"Flower to show {sorted(NAMES)} serving again",
             on_timeout=lambda: f"\n{flower.alive_workers()}")
    assert set(flower.alive_workers()) == NAMES  # no fourth name: Flower keeps one row per worker

    # a crashed process (kill -9: its claim stays behind) gets its name back on restart, not the next number
    second = again[f"agentq-worker-2@{HOST}"]
    command = second.popen.args[3:-6]
    second.kill()
    assert holder_of(store, f"agentq-worker-2@{HOST}")["pid"] == second.pid
    restarted = fleet.start(*command)
    assert wait_for(lambda: node_of(store, restarted), 60, "the restarted worker's node name",
                    on_timeout=restarted.output) == f"agentq-worker-2@{HOST}"

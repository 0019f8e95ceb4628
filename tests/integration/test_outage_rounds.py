"""State-store outages, round after round: no activity runs twice.

Two `agentq worker` processes (threads, 4 each) serve procCharge, a side effect that writes a `start` and an
`end` line per run to a ledger file (outside the store). The broker is a Redis server of its own; the state
Redis (append-only file on) is stopped in the middle of each round's job of 200 charges and started again on
its port with its data. Short settings make the outage hit the fence from every side: the lease (2 s) lapses
during the outage of the calls that were running, and the broker's visibility timeout (3 s) gives their
tasks back to the workers meanwhile, so a second copy of each held call is delivered and tries to take the
call over as soon as the store is back. Each round asserts that every charge ran exactly once. The suite runs
3 rounds; `python benchmarks/outage_rounds.py` runs 10 (`OUTAGE_ROUNDS`).

The fence itself, on the store: after a restart, a job claimed before it has its lapsed leases honoured for a
lease plus 2 s (a claim answers `leased`), and a holder's renewal makes its lapsed lease again.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentq.client import Client
from agentq.embedded import RedisServer
from agentq.protocol.status import CallStatus
from agentq.store.replies import Claimed, ClaimLeased, ClaimOutcome, CommitOutcome
from agentq.store.state import StateStore
from tests.integration.procs import WorkerProcs, ledger_runs, wait_for
from tests.runtime.test_store_contract import submit

ROUNDS = int(os.environ.get("OUTAGE_ROUNDS", "3"))  # benchmarks/outage_rounds.py runs 10
CALLS = 200
CHARGE_S = 0.05
OUTAGE_S = 2.5

SHORT_LEASE_MS = 300


@pytest.fixture
def state_redis() -> Iterator[RedisServer]:
    """The state store: a Redis server of its own, with its append-only file on (the session's serves as the
    broker)."""
    server = RedisServer(appendonly=True).start()
    try:
        yield server
    finally:
        server.stop()


def _job(round_no: int) -> dict:
    calls = [{"_tool": "procCharge", "seconds": CHARGE_S, "tag": f"r{round_no}c{i}",
              "_outputPath": f"†state.charges.c{i}"} for i in range(CALLS)]
    return {"context": [{"type": "state", "data": {"charges": {}}}], "calls": calls}


def _round(client: Client, state_redis: RedisServer, ledger: Path, round_no: int) -> dict:
    """One job with a store outage in its middle; returns what it measured."""
    handle = client.submit(_job(round_no))
    prefix = f"r{round_no}c"
    wait_for(lambda: sum(n for tag, n in ledger_runs(ledger).items() if tag.startswith(prefix)) >= CALLS // 4, 60,
             f"a quarter of round {round_no}'s charges to start")
    before = sum(n for tag, n in ledger_runs(ledger).items() if tag.startswith(prefix))
    state_redis.halt()
    time.sleep(OUTAGE_S)  # the outage itself (what is asserted is awaited below)
    state_redis.start()
    back_at = time.monotonic()
    record = handle.result(timeout=90)
    runs = Counter({tag: n for tag, n in ledger_runs(ledger).items() if tag.startswith(prefix)})
    return {"record": record, "runs": runs, "started_before_outage": before,
            "job_end_after_restart_s": round(time.monotonic() - back_at, 2)}


@pytest.mark.timeout(60 + ROUNDS * 45)
def test_store_outages_round_after_round_run_no_activity_twice(state_redis: RedisServer, redis_url: str,
                                                                tmp_path: Path, record_property):
    ledger = tmp_path / "ledger.txt"
    procs = WorkerProcs(state_redis.url, tmp_path)
    env = {"AGENTQ_BROKER_URL": redis_url, "PROCS_LEDGER": str(ledger), "AGENTQ_LEASE_S": "2",
           "AGENTQ_VISIBILITY_TIMEOUT_S": "2", "AGENTQ_UNACKED_RESTORE_S": "0.5", "AGENTQ_STORE_RETRY_S": "60",
           "AGENTQ_PREFETCH_MULTIPLIER": "1"}
    twice: dict[int, list[str]] = {}
    timings = []
    began = time.monotonic()
    try:
        workers = [procs.start(["procCharge"], concurrency=4, **env) for _ in range(2)]
        for proc in workers:
            procs.wait_live(proc, ["procCharge"])
        with Client(state_redis.url, broker_url=redis_url) as client:
            for round_no in range(ROUNDS):
                outcome = _round(client, state_redis, ledger, round_no)
                record, runs = outcome["record"], outcome["runs"]
                assert record["status"] == "succeeded", record
                assert len(record["state"]["charges"]) == CALLS
                assert len(runs) == CALLS, f"round {round_no}: {CALLS - len(runs)} charges never ran"
                twice[round_no] = sorted(tag for tag, n in runs.items() if n > 1)
                timings.append(outcome["job_end_after_restart_s"])
                assert outcome["started_before_outage"] < CALLS  # the outage hit the job in its middle
        logs = "\n".join(proc.output() for proc in workers)
    finally:
        procs.close()
    figures = {"rounds": ROUNDS, "calls_per_round": CALLS, "ran_twice": sum(len(t) for t in twice.values()),
               "max_job_end_after_restart_s": max(timings), "total_s": round(time.monotonic() - began, 1)}
    for name, value in figures.items():
        record_property(name, value)
    print("outage rounds:", figures)
    assert not any(twice.values()), f"charges that ran twice, by round: {twice}\n{logs[-3000:]}"


# ------------------------------------------------------------------------------- the fence, on the store


def _lapse_through_a_restart(server: RedisServer) -> None:
    """Stop the store for longer than a short lease, then start it again with its data."""
    server.halt()
    time.sleep(SHORT_LEASE_MS / 1000 + 0.2)
    server.start()


def test_after_a_restart_a_lapsed_lease_is_not_taken_over_before_its_holder_could_come_back(
        state_redis: RedisServer):
    store = StateStore(state_redis.url)
    plan, ids = submit(store)
    first = ids["first"]
    assert store.claim(plan.id, first, token="holder", lease_ms=SHORT_LEASE_MS).outcome is ClaimOutcome.CLAIMED
    _lapse_through_a_restart(state_redis)
    copy = store.claim(plan.id, first, token="copy", lease_ms=SHORT_LEASE_MS)
    assert isinstance(copy, ClaimLeased)  # the lease lapsed while the store was down: not a dead holder
    assert SHORT_LEASE_MS < copy.lease_left_ms <= SHORT_LEASE_MS + 2000
    assert store.commit(plan.id, first, token="holder", status=CallStatus.DONE).outcome is CommitOutcome.COMMITTED
    assert store.claim(plan.id, first, token="copy", lease_ms=SHORT_LEASE_MS).outcome is ClaimOutcome.FINISHED
    store.redis.close()


def test_a_holders_renewal_makes_its_lapsed_lease_again_and_a_takeover_waits_for_it(state_redis: RedisServer):
    store = StateStore(state_redis.url)
    plan, ids = submit(store)
    first, bg = ids["first"], ids["bg"]
    store.claim(plan.id, first, token="holder", lease_ms=SHORT_LEASE_MS)
    _lapse_through_a_restart(state_redis)
    assert store.renew_leases(plan.id, {first: "holder", bg: "stranger"}, 60_000) == 1  # bg is not running
    wait_for(lambda: int(store.redis.info("server")["uptime_in_seconds"]) * 1000 >= SHORT_LEASE_MS + 2000, 10,
             "the restart's grace to pass")
    assert store.claim(plan.id, first, token="copy", lease_ms=SHORT_LEASE_MS).outcome is ClaimOutcome.LEASED
    store.redis.close()


def test_a_lease_that_lapsed_with_the_store_up_is_taken_over_at_once_also_right_after_a_restart(
        state_redis: RedisServer):
    """The grace covers the jobs claimed before the restart only: a holder that died since is taken over at its
    lease's end, as usual."""
    state_redis.restart()
    store = StateStore(state_redis.url)
    plan, ids = submit(store)
    store.claim(plan.id, ids["first"], token="dead", lease_ms=SHORT_LEASE_MS)
    time.sleep(SHORT_LEASE_MS / 1000 + 0.05)
    takeover = store.claim(plan.id, ids["first"], token="alive", lease_ms=SHORT_LEASE_MS)
    assert isinstance(takeover, Claimed) and takeover.lost == 1
    assert store.renew_leases(plan.id, {ids["first"]: "dead"}, 60_000) == 0  # the lease is the takeover's
    store.redis.close()

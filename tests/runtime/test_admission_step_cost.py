"""The admission step's Redis commands (those run inside its Lua script included, as `INFO commandstats` counts
them) grow with the queues, tenants, keys and lists a step touches, not with its calls; a parked list is
read for the calls a step admits and little more (as MONITOR shows the reads inside the step)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentq.protocol.admission import AdmissionConfig, Ticket

Q = "agentq.activity.work"


@pytest.fixture
def store(redis_url: str) -> Iterator:
    from agentq.store.state import StateStore

    store = StateStore(redis_url)
    try:
        yield store
    finally:
        store.close()


def ticket(n: int, tenant: str, key: str = "", limit: int = 0) -> Ticket:
    return Ticket(member=f"job_{tenant}/call_{n}", queue=Q, tenant=tenant, key=key, limit=limit,
                  payload=f"payload {tenant} {n}")


def commands(store) -> dict[str, int]:
    """The commands Redis has run so far, by name (INFO and CONFIG left out: the counting's own)."""
    stats = store.redis.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(stat["calls"]) for name, stat in stats.items()
            if name not in ("cmdstat_info", "cmdstat_config")}


def cost(store, step) -> tuple[object, dict[str, int]]:
    """What `step()` returns and the commands it ran (EVALSHA counted as one)."""
    before = commands(store)
    got = step()
    after = commands(store)
    return got, {name: n - before.get(name, 0) for name, n in after.items() if n - before.get(name, 0)}


def test_fifty_calls_admitted_at_once_cost_a_few_commands(store):
    config = AdmissionConfig(windows={Q: 100})
    store.admit_calls([ticket(0, "a")], config)  # the script loaded
    got, ran = cost(store, lambda: store.admit_calls([ticket(n, "a", "acct:1", 100) for n in range(1, 51)], config))
    assert got == [f"#{i}" for i in range(1, 51)]
    assert sum(ran.values()) <= 6, ran  # EVALSHA, HMGET admitted and counts, ZRANGE ring, HSET admitted and counts
    got, ran = cost(store, lambda: store.admit_calls([], config, ended=[f"job_a/call_{n}" for n in range(51)]))
    assert got == [] and store.admission_counts() == {}
    assert sum(ran.values()) <= 6, ran  # EVALSHA, HMGET and HDEL admitted and counts, ZRANGE ring


def test_fifty_calls_parked_and_given_places_cost_commands_per_tenant_and_list_not_per_call(store):
    config = AdmissionConfig(windows={Q: 50})
    assert len(store.admit_calls([ticket(n, "x") for n in range(50)], config)) == 50  # the window full
    tickets = [ticket(n, tenant) for n in range(25) for tenant in ("a", "b")]
    got, ran = cost(store, lambda: store.admit_calls(tickets, config))
    assert got == [] and store.parked_queues() == [Q]
    assert sum(ran.values()) <= 11, ran  # one RPUSH per list, the parked members read and written once
    got, ran = cost(store, lambda: store.admit_calls([], config, ended=[f"job_x/call_{n}" for n in range(50)]))
    assert sorted(got) == sorted(t.payload for t in tickets)
    assert got[:4] == ["payload a 0", "payload b 0", "payload a 1", "payload b 1"]  # the tenants take turns
    assert store.parked_queues() == [] and store.admission_counts() == {f"q:{Q}": 50, "t:a": 25, "t:b": 25}
    assert sum(ran.values()) <= 21, ran  # 3 LRANGE per tenant (one per priority), one LTRIM per list read


def test_a_call_admitted_by_an_earlier_version_gives_its_place_back(store):
    """An entry of the `info` hash without its time (written before the times joined it) is given back alike,
    and the sweep counts it as admitted long ago."""
    config = AdmissionConfig(windows={Q: 1})
    store.redis.hset(store.fleet.admission("info"), "job_a/call_1", f"{Q}\ta\tacct:1")
    store.redis.hset(store.fleet.admission("counts"), mapping={f"q:{Q}": 1, "t:a": 1, "k:acct:1": 1})
    assert store.admit_calls([ticket(2, "a")], config) == []  # the window is full
    assert store.admitted_before(0) == ["job_a/call_1"]
    assert store.admit_calls([], config, ended=["job_a/call_1"]) == ["payload a 2"]
    assert store.admission_counts() == {f"q:{Q}": 1, "t:a": 1}


def lranges(store, step) -> list[tuple[str, int]]:
    """The parked lists `step()` reads (`LRANGE`, inside the Lua step too, as MONITOR shows them) and how many
    entries each read asks for."""
    with store.redis.monitor() as monitor:
        step()
        store.redis.echo("step done")
        reads = []
        while "step done" not in (command := monitor.next_command())["command"]:
            name, *args = command["command"].split(" ")
            if name.upper() == "LRANGE":
                reads.append((args[0], int(args[2]) - int(args[1]) + 1))
    return reads


def test_a_fill_reads_the_calls_it_admits_and_one_more_not_a_second_window(store):
    config = AdmissionConfig(windows={Q: 8}, batch=1)
    store.admit_calls([ticket(n, "a") for n in range(40)], config)  # 8 admitted, 32 parked
    ended = [f"job_a/call_{n}" for n in range(8)]
    reads = lranges(store, lambda: store.admit_calls([], config, ended=ended))
    asked = [n for key, n in reads if key.endswith("\\t2")]  # the default priority's list (2)
    assert asked == [9], reads  # the 8 it admits and one more: whether one is left needs no read of its own
    assert store.admission_counts() == {f"q:{Q}": 8, "t:a": 8}


def test_a_run_of_withdrawn_calls_is_read_in_a_few_growing_reads(store):
    config = AdmissionConfig(windows={Q: 1}, batch=1)
    store.admit_calls([ticket(n, "a") for n in range(101)], config)  # call_0 admitted, the other 100 parked
    assert store.admit_calls([], config, ended=[f"job_a/call_{n}" for n in range(1, 100)]) == []  # 99 withdrawn
    got: list[str] = []
    reads = lranges(store, lambda: got.extend(store.admit_calls([], config, ended=["job_a/call_0"])))
    assert got == ["payload a 100"]  # the one call left, behind the 99 withdrawn
    assert store.admit_calls([], config) == [] and store.admission_counts() == {f"q:{Q}": 1, "t:a": 1}
    asked = [n for key, n in reads if key.endswith("\\t2")]
    assert len(asked) <= 8, reads  # 1, 1, 2, 4 ... entries: not one read per withdrawn call
    assert sum(asked) < 2 * 101, reads


def test_a_queues_virtual_time_kept_by_an_earlier_version_is_read_once_then_kept_with_the_counts(store):
    """An earlier version kept each queue's virtual time in a hash of its own: a tenant joining the queue's ring
    starts from it; the step then keeps it with the counts (`v:<queue>`), written in the same command."""
    config = AdmissionConfig(windows={Q: 1})
    store.redis.hset(store.fleet.admission("vtime"), Q, 5)
    assert store.admit_calls([ticket(0, "a"), ticket(1, "a"), ticket(2, "b")], config) == ["#1"]
    ring = store.redis.zrange(store.fleet.admission("q") + f":ring:{Q}", 0, -1, withscores=True)
    assert ring == [("a", 5.0), ("b", 5.0)]  # both joined at the queue's virtual time
    got, ran = cost(store, lambda: store.admit_calls([], config, ended=["job_a/call_0"]))
    assert got == ["payload a 1"] and "hget" not in ran, ran  # the time written with the counts, not read apart
    assert float(store.redis.hget(store.fleet.admission("counts"), f"v:{Q}")) == 5.0
    assert store.admission_counts() == {f"q:{Q}": 1, "t:a": 1}
    assert store.admit_calls([], config, ended=["job_a/call_1"]) == ["payload b 2"]  # b's turn: a's pass grew


def test_a_fill_reads_only_the_lists_that_may_hold_calls_and_the_sweep_reads_them_all(store):
    """The priorities whose lists may hold a tenant's parked calls are kept with the counts: a step reads only
    those. A call an earlier version parked in another list (it kept no such record) is found by the sweep's step,
    which reads every list of the queues it fills."""
    config = AdmissionConfig(windows={Q: 1})
    assert store.admit_calls([ticket(0, "a"), ticket(1, "a"), ticket(2, "a")], config) == ["#1"]  # 2 parked
    reads = lranges(store, lambda: store.admit_calls([], config, ended=["job_a/call_0"]))
    assert [key[-1] for key, _ in reads] == ["2"], reads  # the default priority's list only, not 1 nor 3
    # an earlier version parks a call of priority 1 without a word
    early = '["job_a/call_9","",0]\npayload a 9'
    store.redis.rpush(store.fleet.admission("q") + f":p:{Q}\ta\t1", early)
    store.redis.hset(store.fleet.admission("parked"), "job_a/call_9", 1)
    assert store.admit_calls([], config, ended=["job_a/call_1"]) == ["payload a 2"]  # not seen by this step
    assert store.admit_calls([], config, ended=["job_a/call_2"], fill=[Q]) == ["payload a 9"]  # the sweep's
    assert store.parked_queues() == [] and store.admission_counts() == {f"q:{Q}": 1, "t:a": 1}


def test_a_tenant_whose_lists_say_nothing_still_gets_the_calls_an_earlier_version_parked(store):
    """A tenant an earlier version put in a queue's ring, with calls in a list the counts' record says is empty,
    gets its places: a step reads the lists left out once the others have nothing to give."""
    config = AdmissionConfig(windows={Q: 1})
    assert store.admit_calls([ticket(0, "a"), ticket(1, "a")], config) == ["#1"]
    assert store.admit_calls([], config, ended=["job_a/call_0"]) == ["payload a 1"]  # a's lists: none holds calls
    assert store.redis.hget(store.fleet.admission("counts"), f"e:{Q}\ta") == ""
    # an earlier version parks a call of a's in priority 3, and puts a back in the ring
    store.redis.rpush(store.fleet.admission("q") + f":p:{Q}\ta\t3", '["job_a/call_7","",0]\npayload a 7')
    store.redis.hset(store.fleet.admission("parked"), "job_a/call_7", 1)
    store.redis.zadd(store.fleet.admission("q") + f":ring:{Q}", {"a": 9})
    store.redis.sadd(store.fleet.admission("queues"), Q)
    assert store.admit_calls([], config, ended=["job_a/call_1"]) == ["payload a 7"]
    assert store.parked_queues() == []

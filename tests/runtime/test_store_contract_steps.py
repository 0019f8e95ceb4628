"""The store contract, continued: approvals (decide.lua), the settle step, agent ticks (tick_begin.lua,
add_calls.lua, tick_end.lua, unlease.lua), module links (held leases, usage, relaying a child's events) and the
remaining reads, each asserted the same on `StateStore` on the session's private Redis and on a Redis Cluster
(see test_store_contract.py for the other steps)."""

from __future__ import annotations

import hashlib

import pytest

from agentq.engine.relay import relay_events
from agentq.protocol.digests import dumps, record_digest
from agentq.protocol.envelopes import JobStarted, Thought
from agentq.protocol.events import thought_part
from agentq.protocol.jobs import PlannedCall
from agentq.protocol.records import CallMode, CallRecord, JobKind, JobRecord, WorkerAnnouncement
from agentq.protocol.status import CallStatus, JobStatus
from agentq.store.fleet import RedisFleet
from agentq.store.replies import (
    ClaimOutcome,
    CommitOutcome,
    Decided,
    DecisionConflict,
    DecisionMissing,
    RejectedCall,
    Settled,
    SettleOther,
    SettleStaleTool,
    SettleUnstarted,
    TickBusy,
    TickClaimed,
    TickEnded,
    TickFinished,
    TickLeased,
    TickMissing,
    TickStale,
)
from tests.runtime.conftest import Backend, make_plan, records_of
from tests.runtime.test_store_contract import (
    CHAIN,
    LEASE_MS,
    SHORT_LEASE_MS,
    TOOLS,
    events,
    finished,
    job_finished,
    message,
    submit,
)


def tool_sha(store, job_id: str, name: str) -> str:
    """SHA-1 of the job's composed tool `name` as stored."""
    return hashlib.sha1(dumps(store.job_tools(job_id)[name]).encode()).hexdigest()


def held(store, approval: list[str]) -> tuple[str, dict[str, str]]:
    """CHAIN with the calls of the `approval` tools held for a reviewer."""
    plan, ids = submit(store, {**CHAIN, "options": {"approval": approval}})
    return plan.id, ids


# -------------------------------------------------------------------------------------- approvals


def test_a_call_held_at_submission_is_approved_once(backend: Backend):
    store = backend.store
    job_id, ids = held(store, ["first"])
    assert store.job_status(job_id) is JobStatus.AWAITING_APPROVAL
    assert store.call_statuses(job_id)[ids["first"]] is CallStatus.AWAITING_APPROVAL
    assert store.decide(job_id, "call_nope", decision="approve") == DecisionMissing()
    assert store.decide(job_id, ids["bg"], decision="approve") == DecisionConflict(status=CallStatus.READY)
    assert store.claim(job_id, ids["first"], token="t", lease_ms=LEASE_MS).outcome is ClaimOutcome.NOT_READY
    stored = store.call_records(job_id, [ids["first"]])[ids["first"]]
    decided = store.decide(job_id, ids["first"], decision="approve", event=finished(job_id, ids["first"]))
    assert decided == Decided(record=stored)
    assert store.call_statuses(job_id)[ids["first"]] is CallStatus.READY
    assert store.job_status(job_id) is JobStatus.RUNNING  # no call held any more
    assert events(store, job_id) == ["job.queued", "call.awaiting_approval", "call.finished"]
    again = store.decide(job_id, ids["first"], decision="approve")
    assert again == DecisionConflict(status=CallStatus.READY)


def test_a_job_held_at_submission_starts_at_its_first_claim_and_stays_held(backend: Backend):
    store = backend.store
    job_id, ids = held(store, ["first"])
    claim = store.claim(job_id, ids["bg"], token="b", lease_ms=LEASE_MS, job_started=JobStarted(job_id=job_id))
    assert claim.outcome is ClaimOutcome.CLAIMED
    info = store.job_info(job_id)
    assert (info.status, bool(info.started_at)) == (JobStatus.AWAITING_APPROVAL, True)
    assert events(store, job_id) == ["job.queued", "call.awaiting_approval", "job.started"]


def test_an_edit_replaces_the_record(backend: Backend):
    store = backend.store
    job_id, ids = held(store, ["first", "bg"])
    stored = store.call_records(job_id)
    edited = CallRecord.from_dict({**stored[ids["first"]].to_dict(), "call": {"_tool": "first", "x": 7}})
    assert store.decide(job_id, ids["first"], decision="edit", record=edited) == Decided(record=edited)
    assert store.call_records(job_id, [ids["first"]])[ids["first"]] == edited
    assert store.call_statuses(job_id)[ids["first"]] is CallStatus.READY
    assert store.job_status(job_id) is JobStatus.AWAITING_APPROVAL  # bg is still held


def test_a_reject_commits_the_calls_failure_in_its_own_step_once(backend: Backend):
    """Nothing is left between the decision and the failure: the call is `failed`, its message in the log, its
    event published, its dependent released, the job running; a second decision is a conflict."""
    store = backend.store
    job_id, ids = held(store, ["first"])
    first = ids["first"]
    error = {"type": "error", "data": {"type": "Rejected"}, "_call": {"id": first}}
    rejected = store.decide(job_id, first, decision="reject", messages=[error],
                            events=[finished(job_id, first, CallStatus.FAILED)])
    assert isinstance(rejected, RejectedCall)
    commit = rejected.commit
    assert (commit.outcome, commit.job_status, commit.open_calls, [r.id for r in commit.released]) == (
        CommitOutcome.COMMITTED, JobStatus.RUNNING, 1, [ids["second"]])  # second is open (bg is not awaited)
    assert store.call_statuses(job_id)[first] is CallStatus.FAILED
    assert store.call_statuses(job_id)[ids["second"]] is CallStatus.READY
    assert store.read_log(job_id)[2:] == [error]
    assert events(store, job_id) == ["job.queued", "call.awaiting_approval", "call.finished"]
    for decision in ("reject", "approve"):
        assert store.decide(job_id, first, decision=decision, messages=[error]) == DecisionConflict(
            status=CallStatus.FAILED)
    assert store.claim(job_id, first, token="x", lease_ms=LEASE_MS).outcome is ClaimOutcome.FINISHED
    assert store.read_log(job_id)[2:] == [error]  # written once
    assert events(store, job_id) == ["job.queued", "call.awaiting_approval", "call.finished"]


def test_a_released_call_that_needs_approval_is_held_and_so_is_its_job(backend: Backend):
    store = backend.store
    job_id, ids = held(store, ["second"])
    assert store.job_status(job_id) is JobStatus.QUEUED  # second waits: nothing is held yet
    assert events(store, job_id) == ["job.queued"]
    store.claim(job_id, ids["first"], token="a", lease_ms=LEASE_MS)
    commit = store.commit(job_id, ids["first"], token="a", status=CallStatus.DONE,
                          messages=[message(ids["first"], 2)])
    assert (commit.outcome, commit.released, commit.job_status, commit.open_calls) == (
        CommitOutcome.COMMITTED, [], JobStatus.AWAITING_APPROVAL, 1)
    assert store.call_statuses(job_id)[ids["second"]] is CallStatus.AWAITING_APPROVAL
    assert store.job_status(job_id) is JobStatus.AWAITING_APPROVAL
    held_events = [e for _, e in store.read_events(job_id) if e["event"] == "call.awaiting_approval"]
    assert [(e["call_id"], e["tool"], e["part"]["activity_type"]) for e in held_events] == [
        (ids["second"], "second", "approval")]
    assert store.decide(job_id, ids["second"], decision="approve").record.id == ids["second"]
    assert store.job_status(job_id) is JobStatus.RUNNING


def test_no_decision_once_the_job_ended(backend: Backend):
    store = backend.store
    job_id, ids = held(store, ["first"])
    store.cancel(job_id, event=job_finished(job_id, JobStatus.CANCELED))
    assert store.decide(job_id, ids["first"], decision="approve") == DecisionConflict(status=CallStatus.CANCELED)


def test_a_call_given_back_by_its_claimer_is_ready_again_with_its_attempt_uncounted(backend: Backend):
    store = backend.store
    job_id, ids = held(store, [])
    first = ids["first"]
    assert store.unclaim(job_id, first, token="t") is False  # not claimed: nothing to give back
    assert store.claim(job_id, first, token="t", lease_ms=LEASE_MS).outcome is ClaimOutcome.CLAIMED
    assert store.unclaim(job_id, first, token="other") is False  # not this token's
    assert store.call_statuses(job_id)[first] is CallStatus.RUNNING
    assert store.unclaim(job_id, first, token="t") is True
    assert store.call_statuses(job_id)[first] is CallStatus.READY
    assert store.unclaim(job_id, first, token="t") is False  # once
    claim = store.claim(job_id, first, token="u", lease_ms=LEASE_MS)
    assert (claim.outcome, claim.attempt) == (ClaimOutcome.CLAIMED, 1)  # the call's own first attempt


# ----------------------------------------------------------------------------------------- settle


def settle(store, job_id: str, record: CallRecord, *, sha: str | None = None, started: bool = True, **kwargs):
    return store.settle(job_id, record.id, record_sha=record_digest(record), tool=record.tool,
                        tool_sha=sha if sha is not None else tool_sha(store, job_id, record.tool),
                        job_started=JobStarted(job_id=job_id) if started else None,
                        status=kwargs.pop("status", CallStatus.DONE), **kwargs)


def test_settle_claims_and_commits_a_ready_calls_first_attempt(backend: Backend):
    store = backend.store
    plan, ids = submit(store)
    first = records_of(plan)[0]
    settled = settle(store, plan.id, first, messages=[message(first.id, 2)], events=[finished(plan.id, first.id)])
    assert isinstance(settled, Settled)
    commit = settled.commit
    assert (commit.open_calls, commit.job_status, commit.kind, commit.ticking, commit.finish_inputs) == (
        1, JobStatus.RUNNING, JobKind.PLAN, False, None)
    assert [r.id for r in commit.released] == [ids["second"]]
    assert store.call_statuses(plan.id)[first.id] is CallStatus.DONE
    assert store.call_table(plan.id).attempts == {first.id: 1}
    assert store.read_log(plan.id)[2:] == [message(first.id, 2)]
    assert events(store, plan.id) == ["job.queued", "job.started", "call.finished"]
    info = store.job_info(plan.id)
    assert (info.status, bool(info.started_at)) == (JobStatus.RUNNING, True)
    # the last awaited call's settle brings what finalizing reads
    second = store.call_records(plan.id, [ids["second"]])[ids["second"]]
    last = settle(store, plan.id, second, started=False)
    assert isinstance(last, Settled) and last.commit.open_calls == 0
    assert last.commit.finish_inputs is not None and last.commit.finish_inputs.info.id == plan.id
    assert last.commit.finish_inputs.statuses[ids["second"]] is CallStatus.DONE


def test_settle_writes_nothing_unless_it_may(backend: Backend):
    store = backend.store
    plan, _ = submit(store)
    first, second, bg = records_of(plan)
    assert settle(store, plan.id, second) == SettleOther()  # not ready
    forged = CallRecord.from_dict({**first.to_dict(), "activity": "bg"})
    assert settle(store, plan.id, forged) == SettleOther()  # not the stored record
    assert settle(store, plan.id, first, sha="0" * 40) == SettleStaleTool(
        tool=plan.tools["first"], tool_sha=tool_sha(store, plan.id, "first"))
    assert settle(store, plan.id, first, started=False) == SettleUnstarted()
    unknown = CallRecord.from_dict({**first.to_dict(), "tool": "nope"})
    assert store.settle(plan.id, first.id, record_sha=record_digest(first), tool=unknown.tool, tool_sha="x",
                        job_started=None, status=CallStatus.DONE) == SettleOther()
    store.claim(plan.id, bg.id, token="b", lease_ms=LEASE_MS)
    assert store.release_for_retry(plan.id, bg.id, token="b")
    assert settle(store, plan.id, bg) == SettleOther()  # an attempt ran before
    assert store.job_status(plan.id) is JobStatus.RUNNING
    assert events(store, plan.id) == ["job.queued"]
    assert store.call_statuses(plan.id)[first.id] is CallStatus.READY
    store.cancel(plan.id, event=job_finished(plan.id, JobStatus.CANCELED))
    assert settle(store, plan.id, first) == SettleOther()  # the job is not active


# ------------------------------------------------------------------------------------------ ticks

AGENT = {"context": [{"type": "text", "text": "do it"}]}


def agent(store, job_id: str | None = None) -> str:
    plan, _ = submit(store, AGENT, job_id=job_id)
    assert plan.kind is JobKind.AGENT
    return plan.id


def planned(call_id: str, tool: str = "first", *, depends_on: tuple[str, ...] = (), approval: bool = False,
            awaited: bool = True) -> tuple[CallRecord, PlannedCall]:
    plan = PlannedCall(id=call_id, index=0, call={"_tool": tool}, tool=tool, activity=tool, mode=CallMode.EXPLICIT,
                       awaited=awaited, instance=None, scopes=[], approval=approval, depends_on=list(depends_on))
    return plan.record().routed(f"agentq.activity.{tool}", tool), plan


def add(store, job_id: str, token: str, *calls: tuple[CallRecord, PlannedCall]) -> list[CallRecord] | None:
    return store.add_calls(job_id, token=token, records=[r for r, _ in calls], plans=[p for _, p in calls])


def test_a_tick_is_claimed_once_per_request(backend: Backend):
    store = backend.store
    assert store.begin_tick("job_nope", exchanges=0, token="t", lease_ms=LEASE_MS) == TickMissing()
    job_id = agent(store)
    assert store.begin_tick(job_id, exchanges=1, token="t", lease_ms=LEASE_MS) == TickStale()
    started = JobStarted(job_id=job_id)
    assert store.begin_tick(job_id, exchanges=0, token="t", lease_ms=LEASE_MS, job_started=started) == TickClaimed(
        attempt=1)
    info = store.job_info(job_id)
    assert (info.status, info.ticking, bool(info.started_at)) == (JobStatus.RUNNING, True, True)
    assert events(store, job_id) == ["job.queued", "job.started"]
    # the same tick's claim again (its reply lost), another task's, then the lease runs out
    assert store.begin_tick(job_id, exchanges=0, token="t", lease_ms=LEASE_MS) == TickClaimed(attempt=1)
    leased = store.begin_tick(job_id, exchanges=0, token="u", lease_ms=LEASE_MS)
    assert isinstance(leased, TickLeased) and 0 < leased.lease_left_ms <= LEASE_MS
    store.release_tick(job_id, token="u")  # not its lease: nothing happens
    assert isinstance(store.begin_tick(job_id, exchanges=0, token="u", lease_ms=LEASE_MS), TickLeased)
    store.release_tick(job_id, token="t")  # a retry of the same request: attempt 2, ticking stays
    assert store.job_info(job_id).ticking
    assert store.begin_tick(job_id, exchanges=0, token="u", lease_ms=SHORT_LEASE_MS) == TickClaimed(attempt=2)
    backend.advance(SHORT_LEASE_MS / 1000 + 0.03)
    assert store.begin_tick(job_id, exchanges=0, token="v", lease_ms=LEASE_MS) == TickClaimed(attempt=3)
    assert events(store, job_id) == ["job.queued", "job.started"]


def test_a_tick_writes_its_calls_once_and_ends(backend: Backend):
    store = backend.store
    job_id = agent(store)
    store.begin_tick(job_id, exchanges=0, token="t", lease_ms=LEASE_MS)
    first, second, held_call, bg = (planned("call_a"), planned("call_b", "second", depends_on=("call_a",)),
                                    planned("call_c", approval=True), planned("call_d", "bg", awaited=False))
    assert add(store, job_id, "other", first) is None
    assert add(store, job_id, "t", first, second) == [first[0]]
    assert add(store, job_id, "t", first, held_call, bg) == [bg[0]]  # call_a once; call_c held
    assert store.call_statuses(job_id) == {"call_a": CallStatus.READY, "call_b": CallStatus.PENDING,
                                           "call_c": CallStatus.AWAITING_APPROVAL, "call_d": CallStatus.READY}
    assert store.dependents(job_id, "call_a") == ["call_b"]
    assert store.job_status(job_id) is JobStatus.AWAITING_APPROVAL
    assert [(e["event"], e.get("call_id")) for _, e in store.read_events(job_id)][-1] == (
        "call.awaiting_approval", "call_c")
    assert store.call_records(job_id, ["call_b"]) == {"call_b": second[0]}
    exchange = {"log": 1, "tool_use_id": "tu_1", "solution": {"calls": []}}
    assert store.end_tick(job_id, token="other", exchange=exchange, counts=True) is None
    ended = store.end_tick(job_id, token="t", exchange=exchange, counts=True, usage={"requests": 1, "input_tokens": 9},
                           messages=[{"type": "text", "text": "noted"}], events=[finished(job_id, "call_a")])
    assert ended == TickEnded(open_calls=3, ticks=1)
    info = store.job_info(job_id)
    assert (info.ticking, info.exchanges, info.ticks, info.has_final_output) == (False, 1, 1, False)
    assert (info.usage["requests"], info.usage["input_tokens"]) == (1, 9)
    inputs = store.agent_inputs(job_id)
    assert (inputs.exchanges, inputs.log[-1], inputs.info.id) == ([exchange], {"type": "text", "text": "noted"},
                                                                  job_id)
    tail = store.agent_inputs(job_id, log_from=len(inputs.log) - 1, exchanges_from=1)  # what came since
    assert (tail.log, tail.exchanges, tail.info) == ([{"type": "text", "text": "noted"}], [], inputs.info)
    assert add(store, job_id, "t", planned("call_e")) is None  # the tick ended: its lease is gone
    # a fresh request waits for the calls of the previous one
    assert store.begin_tick(job_id, exchanges=1, token="n", lease_ms=LEASE_MS) == TickBusy(open_calls=3)


def test_a_dependency_that_finished_is_not_waited_on_and_commits_see_the_tick(backend: Backend):
    store = backend.store
    job_id = agent(store)
    store.begin_tick(job_id, exchanges=0, token="t", lease_ms=LEASE_MS)
    add(store, job_id, "t", planned("call_a"))
    store.claim(job_id, "call_a", token="a", lease_ms=LEASE_MS)
    commit = store.commit(job_id, "call_a", token="a", status=CallStatus.DONE)
    assert (commit.open_calls, commit.kind, commit.ticking, commit.finish_inputs) == (0, JobKind.AGENT, True, None)
    assert add(store, job_id, "t", planned("call_b", "second", depends_on=("call_a",))) == [
        planned("call_b", "second", depends_on=("call_a",))[0]]
    ended = store.end_tick(job_id, token="t", exchange={}, counts=False, output={"answer": 42}, has_output=True)
    assert ended == TickEnded(open_calls=1, ticks=0)
    info = store.job_info(job_id)
    assert (info.has_final_output, info.final_output, info.exchanges, info.ticks) == (True, {"answer": 42}, 1, 0)


def test_end_ticking_and_ended_jobs(backend: Backend):
    store = backend.store
    job_id = agent(store)
    store.begin_tick(job_id, exchanges=0, token="t", lease_ms=LEASE_MS)
    store.end_ticking(job_id)
    assert not store.job_info(job_id).ticking
    store.finalize(job_id, record=JobRecord(id=job_id, status=JobStatus.SUCCEEDED),
                   event=job_finished(job_id, JobStatus.SUCCEEDED))
    assert add(store, job_id, "t", planned("call_a")) is None
    assert store.begin_tick(job_id, exchanges=0, token="t", lease_ms=LEASE_MS) == TickFinished(
        status=JobStatus.SUCCEEDED)


def test_job_tools_are_set_per_tick(backend: Backend):
    store = backend.store
    job_id = agent(store)
    submitted = store.job_tools(job_id)  # composed at submission
    assert set(submitted) == set(TOOLS)
    store.set_job_tools(job_id, {})
    store.set_job_tools(job_id, {"first": {"v": 1}, "new": {"v": 2}})
    assert store.job_tools(job_id) == {**submitted, "first": {"v": 1}, "new": {"v": 2}}


# ---------------------------------------------------------------------------------------- modules


def test_a_held_lease_lasts_as_long_as_its_job_and_usage_adds_up(backend: Backend):
    store = backend.store
    plan, ids = submit(store)
    store.claim(plan.id, ids["first"], token="a", lease_ms=SHORT_LEASE_MS)
    store.hold_lease(plan.id, ids["first"], token="a")
    backend.advance(SHORT_LEASE_MS / 1000 + 0.03)
    assert store.claim(plan.id, ids["first"], token="b", lease_ms=LEASE_MS).outcome is ClaimOutcome.LEASED
    with pytest.raises(Exception, match="no job"):
        store.hold_lease("job_nope", "c", token="a")
    store.add_usage(plan.id, {"requests": 2, "output_tokens": 5, "input_tokens": 0})
    store.add_usage(plan.id, {"requests": 1})
    assert store.job_info(plan.id).usage == {"requests": 3, "output_tokens": 5}  # the counters, as stored
    usage = store.record(plan.id).usage
    assert (usage["requests"], usage["output_tokens"], usage["input_tokens"]) == (3, 5, 0)


def test_a_childs_events_are_relayed_to_its_parent_once(backend: Backend):
    store = backend.store
    parent, ids = submit(store)
    assert store.relay_cursor(parent.id) is None and relay_events(store, parent.id) == 0  # no module's child
    child = make_plan(AGENT, TOOLS, job_id=f"{ids['first']}.module")
    link = {"job": parent.id, "call": ids["first"], "token": "a", "depth": 1, "chain": ["m"], "module": "m",
            "root": parent.id}
    assert store.create_job(child, records_of(child), submitted=AGENT, events=[
        JobStarted(job_id=child.id)], parent=link)
    assert (parent_link := store.job_info(child.id).parent) is not None and parent_link.to_dict() == link
    thought = Thought(job_id=child.id, call_id="call_x", part=thought_part("hmm", source="agentq", locale="en"))
    store.add_events(child.id, [thought, finished(child.id, "call_x"), job_finished(child.id, JobStatus.FAILED)])
    before = store.relay_cursor(child.id)
    assert before is not None and before.cursor == "0-0" and before.parent.to_dict() == link
    assert relay_events(store, child.id) == 2
    assert relay_events(store, child.id) == 0
    # a relay that read the cursor before another moved it writes nothing
    moved_to = store.relay_cursor(child.id)
    assert moved_to is not None and moved_to.cursor != "0-0"
    assert not store.write_relayed(child.id, parent_id=parent.id, cursor="0-0", to=moved_to.cursor,
                                   envelopes=[{"event": "thought", "job_id": child.id}])
    relayed = [e for _, e in store.read_events(parent.id)][1:]
    assert [e["event"] for e in relayed] == ["thought", "call.finished"]
    assert (relayed[0]["part"]["source"], relayed[0]["relayed_from"], relayed[0]["job_id"]) == ("m", child.id, child.id)
    assert relayed[1] == {**finished(child.id, "call_x").to_dict(), "relayed_from": child.id}
    store.add_events(child.id, [finished(child.id, "call_z")])
    assert relay_events(store, child.id) == 1
    assert [e.get("call_id") for _, e in store.read_events(parent.id)][-1] == "call_z"
    # a grandchild's events reach the parent through the child, naming the grandchild and its module
    nested = make_plan(AGENT, TOOLS, job_id="call_y.module")
    assert store.create_job(nested, records_of(nested), submitted=AGENT, events=[], parent={
        "job": child.id, "call": "call_y", "token": "b", "depth": 2, "chain": ["m", "n"], "module": "n"})
    store.add_events(nested.id, [Thought(job_id=nested.id, call_id="call_w",
                                         part=thought_part("deeper", source="agentq", locale="en"))])
    assert (relay_events(store, nested.id), relay_events(store, child.id)) == (1, 1)
    last = store.read_events(parent.id)[-1][1]
    assert (last["job_id"], last["relayed_from"], last["part"]["source"]) == (nested.id, nested.id, "n")


# ------------------------------------------------------------------------------------------ reads


def test_signing_key_records_and_call_table(backend: Backend):
    store = backend.store
    key = RedisFleet(store).task_signing_key()
    assert len(key) == 64 and RedisFleet(store).task_signing_key() == key
    plan, ids = submit(store)
    store.claim(plan.id, ids["first"], token="a", lease_ms=LEASE_MS)
    store.commit(plan.id, ids["first"], token="a", status=CallStatus.DONE)
    table = store.call_table(plan.id)
    assert table.records == {r.id: r for r in records_of(plan)}
    assert table.statuses[ids["second"]] is CallStatus.READY
    assert (table.attempts, table.dependents) == ({ids["first"]: 1}, {ids["first"]: [ids["second"]]})
    with pytest.raises(Exception, match="no job"):
        store.call_table("job_nope")
    record = JobRecord(id=plan.id, status=JobStatus.CANCELED, state={"saved": True})
    store.save_record(plan.id, record)
    assert store.job_info(plan.id).record == record
    assert store.wait_record(plan.id, 0.01) is None
    store.claim(plan.id, ids["second"], token="a", lease_ms=LEASE_MS)
    store.commit(plan.id, ids["second"], token="a", status=CallStatus.DONE)  # no awaited call is open any more
    done = JobRecord(id=plan.id, status=JobStatus.SUCCEEDED, state={"x": 1})
    store.finalize(plan.id, record=done, event=job_finished(plan.id, JobStatus.SUCCEEDED))
    assert store.wait_record(plan.id, 1.0) == done


def test_worker_beats_keep_expired_announcements(backend: Backend):
    store = backend.store
    assert RedisFleet(store).worker_beats() == []
    RedisFleet(store).announce_worker("w1", WorkerAnnouncement("w1"), ttl_s=0.1)
    RedisFleet(store).announce_worker("w2", WorkerAnnouncement("w2"), ttl_s=60)
    backend.advance(0.2)
    beats = {b.worker_id: b for b in RedisFleet(store).worker_beats()}
    assert (beats["w1"].announcement, beats["w2"].announcement) == (None, WorkerAnnouncement("w2"))
    assert beats["w1"].expires_at < beats["w2"].expires_at

"""The store's value codecs, independent of any key: packed envelopes and the typed job of its stored hash fields
(stored JSON, digests and timestamps are the protocol's: `protocol/digests.py`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from agentq.protocol.envelopes import Envelope
from agentq.protocol.records import ErrorInfo, JobInfo, JobKind, JobRecord, ParentLink
from agentq.protocol.status import JobStatus
from agentq.protocol.tenants import DEFAULT_TENANT
from agentq.protocol.usage import usage_record
from agentq.store.event_codec import pack
from agentq.store.views import AgentInputs

USAGE_PREFIX = "usage."  # job hash fields `usage.<counter>`, summed with HINCRBY


def entry(envelope: Envelope, job_id: str) -> str:
    """The stored (packed) form of an envelope in the event stream of job `job_id` (see `store/event_codec.py`)."""
    return pack(envelope.to_dict(), job_id)





def agent_inputs_of(fields: dict[str, str], log: list[str], exchanges: list[str],
                    registered: str | None) -> AgentInputs:
    """What a tick reads, from the stored job hash, the log and exchanges read and the spec's `registered` (a job
    written before the spec key keeps it in its job hash)."""
    registered = registered or fields.get("registered")
    return AgentInputs(decode_job(fields), [json.loads(m) for m in log], [json.loads(e) for e in exchanges],
                       json.loads(registered or "{}"))


def decode_job(fields: dict[str, str]) -> JobInfo:
    """The typed job of its stored hash fields."""

    def loads(name: str, default: Any = None) -> Any:
        value = fields.get(name)
        return json.loads(value) if value else default

    record, parent = loads("record"), loads("parent")
    usage = usage_counters(fields)
    return JobInfo(
        id=fields["id"], kind=JobKind(fields.get("kind") or JobKind.PLAN), status=JobStatus(fields["status"]),
        created_at=fields.get("created_at"), started_at=fields.get("started_at") or None,
        finished_at=fields.get("finished_at") or None, open_calls=_count(fields, "open"),
        options=loads("options", {}), output=loads("output"), error=ErrorInfo.of(loads("error")),
        usage=usage, record=_with_usage(JobRecord.from_dict(record), usage) if record else None,
        ticks=_count(fields, "ticks"), final_output=loads("final_output"),
        has_final_output="final_output" in fields, parent=ParentLink.from_dict(parent) if parent else None,
        ticking=fields.get("ticking") == "1",
        exchanges=_count(fields, "exchanges"), traceparent=fields.get("traceparent") or None,
        tenant=fields.get("tenant") or DEFAULT_TENANT, lineage=loads("lineage"), runs=tuple(loads("runs", ())),
        resumed_at=fields.get("resumed_at") or None, record_stale=fields.get("record_stale") == "1",
    )


def _count(fields: dict[str, str], name: str) -> int:
    """A counter of the job hash (0 while it was never written)."""
    return int(fields.get(name) or 0)


def usage_counters(fields: Mapping[str, str]) -> dict[str, int]:
    """A job's usage counters (`agentq.protocol.usage`) among its hash fields."""
    return {name[len(USAGE_PREFIX):]: int(count) for name, count in fields.items() if name.startswith(USAGE_PREFIX)}


def _with_usage(record: JobRecord, counters: Mapping[str, int]) -> JobRecord:
    """A saved record with the job's usage as it stands: a request that was in flight when the job ended (a
    latent call, a module's child job) adds its usage later, and the record shows it."""
    return replace(record, usage=usage_record(counters))


def standing_record(info: JobInfo) -> JobRecord | None:
    """The record saved when the job ended, if it stands (its usage read live): not a canceled job's, nor that of
    a job that ended with awaited calls still open (its budget ran out, its model failed mid-stream), while they
    run and until the record is saved again after the last one — those are computed anew from the log, which
    their outcomes still reach (the commit of the last one marks the record stale, then its caller saves it)."""
    final = info.status.is_final and info.status is not JobStatus.CANCELED
    return info.record if final and info.open_calls <= 0 and not info.record_stale else None


def saved_record(fields: Mapping[str, str]) -> JobRecord | None:
    """`standing_record` of a job's stored hash fields."""
    return standing_record(decode_job(dict(fields))) if fields.get("record") else None

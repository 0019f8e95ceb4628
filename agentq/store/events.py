"""A job's event stream: appending envelopes (packed by `event_codec`) and reading them back.

Most events are published by the Lua steps themselves, inside the step that causes them; these are the
appends no step carries (a call's progress, a tick's parts) and the reads every follower of a stream uses
(`base.iter_events` follows one until the job's final event).
"""

from __future__ import annotations

from collections.abc import Sequence

from agentq.protocol.envelopes import Envelope
from agentq.store import core
from agentq.store.boundary import map_store_errors
from agentq.store.codecs import entry
from agentq.store.part import StorePart
from agentq.store.sync_reads import run


@map_store_errors
class RedisEvents(StorePart):
    """A job's event stream (a part of `StateStore`)."""

    def add_events(self, job_id: str, envelopes: Sequence[Envelope]) -> None:
        if not envelopes:
            return
        stream = self.keys(job_id).events
        if len(envelopes) == 1:
            self.redis.xadd(stream, {"e": entry(envelopes[0], job_id)})
            return
        pipe = self.redis.pipeline(transaction=False)
        for envelope in envelopes:
            pipe.xadd(stream, {"e": entry(envelope, job_id)})
        pipe.execute()

    def read_events(self, job_id: str, after: str = "0-0", *, block_ms: int | None = None,
                    count: int | None = None) -> list[tuple[str, dict]]:
        """Events after the stream id `after` as (id, envelope JSON form: stored entries are unpacked); with
        `block_ms`, wait up to that long for the first one. `parse_envelope` gives the typed envelope of an entry."""
        return run(self.redis, core.read_events(self.keys(job_id), after, count=count, block_ms=block_ms))

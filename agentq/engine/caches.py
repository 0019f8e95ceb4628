"""Per-process caches of the executor: job logs, job tools, agent jobs' conversations, one-tool solution schemas.

A job's log only grows and its tools never change after submission, so each worker process keeps what it
has read and asks the store only for what is new; every structure here is shared by the process's threads.
"""

from __future__ import annotations

import threading

from agentq.protocol.cache import LRU
from agentq.protocol.conversation import Exchange
from agentq.protocol.transcript import Transcript
from agentq.protocol.validation import ToolValidator, validator_for
from agentq.protocol.views import LogIndex
from agentq.store.contracts import TickStore
from agentq.store.views import AgentInputs


class LogCache:
    """Per-process cache of job logs: each claim fetches only the messages this process has not seen."""

    def __init__(self, capacity: int = 256):
        self._indexes: LRU[str, LogIndex] = LRU(capacity)
        self._lock = threading.Lock()  # an offset check and the extension it allows happen together

    def offset(self, job_id: str) -> int:
        index = self._indexes.get(job_id)
        return len(index) if index is not None else 0

    def extend(self, job_id: str, offset: int, messages: list[dict]) -> LogIndex:
        """Add the tail read at `offset`; returns the job's index (rebuilt if the offset is stale)."""
        with self._lock:
            index = self._indexes.get(job_id)
            if index is None or len(index) != offset:
                if offset != 0:
                    raise StaleCache(job_id)
                index = self._indexes.replace(job_id, LogIndex())
            index.extend(messages)
            return index

    def forget(self, job_id: str) -> None:
        self._indexes.pop(job_id)


class StaleCache(Exception):
    """The cached log of a job is not at the offset a claim read from."""


class JobTools:
    """A job's composed tool schemas, by (job, tool name), with the SHA-1 of their stored JSON, shared by a
    process's threads.

    A job's tools do not change after submission, so each process decodes a tool once per job. The claim
    compares the SHA-1 with the stored schema, so a copy that is not current (a job id used again for
    another job) is never used: the claim sends the current one instead.
    """

    def __init__(self, capacity: int = 1024):
        self._tools: LRU[tuple[str, str], tuple[dict, str]] = LRU(capacity)
        self._latest: LRU[str, tuple[dict, str]] = LRU(capacity)
        # (job, tool name) -> (the plan job's `created_at`, the SHA-1 of the schema a claim found current then)
        self._stamps: LRU[tuple[str, str], tuple[str, str]] = LRU(capacity)

    def get(self, job_id: str, name: str) -> tuple[dict, str] | None:
        """(schema, SHA-1) of the tool, or None."""
        return self._tools.get((job_id, name))

    def latest(self, name: str) -> tuple[dict, str] | None:
        """(schema, SHA-1) of the last copy of a tool of that name this process received, for any job: most
        jobs compose a tool the same way, so a call of a new job can be run before the store confirms it (the
        settle step checks the SHA-1 against the job's own copy)."""
        return self._latest.get(name)

    def stamp(self, job_id: str, name: str, sha: str) -> str:
        """The plan job's `created_at` a claim gave when it found the schema of SHA-1 `sha` current for the job's
        tool ('': none): a plan job's tools never change, so a later claim passes it instead of having the schema
        read (claim.lua); the claim checks the job is still that one (not a job id used again)."""
        stamped = self._stamps.get((job_id, name))
        return stamped[0] if stamped is not None and stamped[1] == sha else ""

    def keep(self, job_id: str, name: str, tool: dict, sha: str, stamp: str = "") -> dict:
        """Cache the schema the store sent (or found current: `stamp`, the plan job's `created_at` the claim read);
        returns the cached object when it is the same schema."""
        if stamp:  # (a stamp of another schema stays: it only ever holds for that schema's SHA-1)
            self._stamps.replace((job_id, name), (stamp, sha))
        entry = self._tools.get((job_id, name))
        if entry is None or entry[1] != sha:
            latest = self._latest.get(name)
            entry = self._tools.replace((job_id, name), latest if latest and latest[1] == sha else (tool, sha))
            self._latest.replace(name, entry)
        return entry[0]


class ToolValidators:
    """The validators of the tool schemas a process validates resolved calls against (a call that reads the job's
    state is validated once its references are replaced), by the SHA-1 of the schema's stored JSON: built once per
    schema, its compiled check included (`protocol/schema_fit.py`)."""

    def __init__(self, capacity: int = 256):
        self._validators: LRU[str, ToolValidator] = LRU(capacity)

    def of(self, tool: dict, sha: str) -> ToolValidator | None:
        """The validator of `tool`, whose stored JSON has SHA-1 `sha` (None when it is not known: '')."""
        if not sha:
            return None
        validator = self._validators.get(sha)
        return validator if validator is not None else self._validators.put(sha, validator_for(tool))


class Transcripts:
    """Per-process conversations of agent jobs (`protocol/transcript.py`): a tick reads from the store only the log
    messages and exchanges this process has not seen, and adds only their turns to the conversation, so its cost
    does not grow with the conversation."""

    def __init__(self, capacity: int = 256):
        self._kept: LRU[str, Transcript] = LRU(capacity)

    def read_from(self, job_id: str) -> tuple[int, int]:
        """Where a tick of the job reads the log and the exchanges from: where the kept transcript ends."""
        kept = self._kept.get(job_id)
        return (len(kept.log), len(kept.exchanges)) if kept is not None else (0, 0)

    def read(self, store: TickStore, job_id: str, claimed: AgentInputs | None = None,
             read_from: tuple[int, int] = (0, 0)) -> tuple[AgentInputs, Transcript]:
        """A tick's inputs (the log and exchanges from where the kept transcript ends) and the job's transcript,
        grown by them. `claimed`: the inputs the tick's claim read from `read_from` (`Store.begin_tick`), used
        when they start where the kept transcript ends (else read again). The transcript is the tick's own until
        it is kept again (`keep`): a tick of the same job meanwhile reads everything. A transcript of another job
        of the same id, or behind what the store holds in another way, is built again from everything."""
        kept = self._kept.pop(job_id)
        if kept is not None:
            grown = _grown(store, job_id, kept, claimed, read_from)
            if grown is not None:
                return grown, kept
        fresh = claimed is not None and kept is None and read_from == (0, 0)  # the claim read everything
        inputs = claimed if fresh and claimed is not None else store.agent_inputs(job_id)
        context = inputs.info.job_options.context
        transcript = Transcript(inputs.info.created_at, preview_bytes=context.result_preview_bytes,
                                max_input_tokens=context.window)
        transcript.grow(inputs.log, [Exchange.from_dict(e) for e in inputs.exchanges])
        return inputs, transcript

    def keep(self, job_id: str, transcript: Transcript) -> None:
        self._kept.replace(job_id, transcript)

    def forget(self, job_id: str) -> None:
        """The job asks the model nothing more (its final output came)."""
        self._kept.pop(job_id)


def _grown(store: TickStore, job_id: str, kept: Transcript, claimed: AgentInputs | None,
           read_from: tuple[int, int]) -> AgentInputs | None:
    """The inputs `kept` grew by (what the claim read, when it read from where `kept` ends, else read now); None
    when `kept` is another job's, or behind the store in another way."""
    at = (len(kept.log), len(kept.exchanges))
    inputs = claimed if claimed is not None and at == read_from else store.agent_inputs(
        job_id, log_from=at[0], exchanges_from=at[1])
    info = inputs.info
    if kept.job != info.created_at or len(kept.exchanges) + len(inputs.exchanges) != info.exchanges:
        return None
    kept.grow(inputs.log, [Exchange.from_dict(e) for e in inputs.exchanges])
    return inputs


def solution_for(tool: dict) -> dict:
    """The one-tool solution schema a call is validated against."""
    return {"properties": {"calls": {"items": {"anyOf": [tool]}}}}

"""Two jobs compared side by side (docs/compare.md): what `protocol/job_diff.py` compares, read from the store.

    compare_jobs(store, "job_a", "job_b", sees=principal.sees) → JobDiff

Each side is its record, its calls view (`call_views.job_calls`) and its calls' outputs (from its `call.finished`
events). A side that is unknown, expired or another tenant's (`sees` says no: it does not exist for the
reader) is named by `missing_sides`, each with its pointer (`/a`, `/b`) and the store's error for it
(`JobExpiredError` for a job whose data expired with its `ttl_s`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from agentq.engine.call_views import CallViewStore, job_calls
from agentq.engine.job_lookup import everyone, unreadable
from agentq.errors import JobExpiredError, JobNotFoundError, Problem
from agentq.protocol.job_diff import JobDiff, JobSide, call_outputs, diff_jobs
from agentq.store.contracts import JobReader

_BATCH = 1000


class CompareStore(CallViewStore, JobReader, Protocol):
    """What comparing two jobs reads."""


def missing_sides(store: CompareStore, a: str, b: str, *,
                  sees: Callable[[str], bool] = everyone) -> list[tuple[Problem, JobNotFoundError]]:
    """The sides that cannot be compared, each as a problem at its pointer (`/a`, `/b`) with the error
    `job_lookup.unreadable` gives for it. Empty: both can be read."""
    missing = []
    for pointer, job_id in (("/a", a), ("/b", b)):
        error = unreadable(store, job_id, sees=sees)
        if error is not None:
            missing.append((Problem(pointer, str(error)), error))
    return missing


def sides_error(missing: list[tuple[Problem, JobNotFoundError]]) -> JobNotFoundError:
    """One error naming every side that cannot be compared: `JobExpiredError` when each of them expired."""
    message = "; ".join(f"{'A' if problem.pointer == '/a' else 'B'}: {problem.message}" for problem, _ in missing)
    if all(isinstance(error, JobExpiredError) for _, error in missing):
        return JobExpiredError(message)
    return JobNotFoundError(message)


def job_side(store: CompareStore, job_id: str) -> JobSide:
    """One job as `diff_jobs` compares it (raises `JobNotFoundError` for an unknown job)."""
    record = store.record(job_id).to_dict()
    return JobSide(record=record, calls=job_calls(store, job_id), outputs=call_outputs(_envelopes(store, job_id)))


def compare_jobs(store: CompareStore, a: str, b: str, *, sees: Callable[[str], bool] = everyone) -> JobDiff:
    """`a` and `b` compared; one `JobNotFoundError` (or `JobExpiredError`) naming every side that cannot be."""
    missing = missing_sides(store, a, b, sees=sees)
    if missing:
        raise sides_error(missing)
    left = job_side(store, a)
    return diff_jobs(left, left if b == a else job_side(store, b))


def _envelopes(store: CompareStore, job_id: str) -> list[dict[str, Any]]:
    """Every stored envelope of the job's stream, oldest first."""
    envelopes: list[dict[str, Any]] = []
    after = "0-0"
    while True:
        batch = store.read_events(job_id, after, count=_BATCH)
        envelopes += [envelope for _, envelope in batch]
        if len(batch) < _BATCH:
            return envelopes
        after = batch[-1][0]

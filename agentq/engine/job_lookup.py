"""Why a reader cannot read a job, one answer for every route that names a job by id (resume, continue, fork, a
thread's or a job's forks, compare):

    unreadable(store, job_id, sees=principal.sees) → None | JobNotFoundError | JobExpiredError

Another tenant's job does not exist for the reader (404, as an unknown id or one no job can have); a job whose data
expired with its `ttl_s` is `JobExpiredError` (410), which says only that the id was once submitted.
"""

from __future__ import annotations

from collections.abc import Callable

from agentq.errors import InvalidJobIdError, JobNotFoundError
from agentq.store.contracts import JobReader


def everyone(tenant: str) -> bool:
    """A reader who sees every tenant's jobs (an admin, or a fleet without tenants)."""
    return True


def unknown(job_id: str) -> JobNotFoundError:
    return JobNotFoundError(f"no job {job_id!r} (never submitted, or expired)")


def unreadable(store: JobReader, job_id: str, *, sees: Callable[[str], bool] = everyone) -> JobNotFoundError | None:
    """The error a reader who `sees` some tenants gets for `job_id`; None when the job can be read. One read of the
    job (and one of the fleet's listing for a job that is gone)."""
    try:
        tenant = store.job_info(job_id).tenant
    except JobNotFoundError:
        return store.missing(job_id)
    except InvalidJobIdError:  # an id no job can have
        return unknown(job_id)
    return None if sees(tenant) else unknown(job_id)


def readable(store: JobReader, job_id: str, *, sees: Callable[[str], bool] = everyone) -> None:
    """Raise what `unreadable` answers, if anything."""
    error = unreadable(store, job_id, sees=sees)
    if error is not None:
        raise error

"""What routes get from the app: its parts, its async store, the auth check as a dependency, and whom a
request acts for (its tenant and role, docs/tenants.md)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials

from agentq.api.auth import ADMIN, bearer, check
from agentq.api.errors import ApiError
from agentq.protocol.tenants import Principal
from agentq.runtime.root import Parts
from agentq.store.aio import AsyncStateStore
from agentq.store.core import not_found


def app_parts(request: Request) -> Parts:
    parts: Parts = request.app.state.parts
    return parts


def app_store(request: Request) -> AsyncStateStore:
    store: AsyncStateStore = request.app.state.store
    return store


def _authorized(request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None,
                                                         Security(bearer)]) -> None:
    check(request, credentials, query_token=False)


def _authorized_or_query(request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None,
                                                                  Security(bearer)]) -> None:
    check(request, credentials, query_token=True)


#: the bearer token (or the page's cookie) is required
Authorized: Any = Depends(_authorized)
#: as `Authorized`, and `?token=` is accepted too (event streams: a browser's EventSource sends no headers)
AuthorizedOrQuery: Any = Depends(_authorized_or_query)


def principal(request: Request) -> Principal:
    """Whom the request acts for (set by the auth check)."""
    found: Principal = getattr(request.state, "principal", ADMIN)
    return found


async def visible_job(request: Request, job_id: str, *, write: bool = False) -> None:
    """404 unless the request's tenant may see the job (another tenant's job does not exist for it: 404, never
    403); with `write`, 403 for a read-only token."""
    who = principal(request)
    if write and not who.may_write:
        raise ApiError(403, "Forbidden", f"this token may only read (role {who.role.value!r})")
    tenant = await app_store(request).job_tenant(job_id)
    if not who.sees(tenant):
        raise not_found(job_id)

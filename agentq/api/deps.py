"""What routes get from the app: its parts, its async store, and the auth check as a dependency."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials

from agentq.api.auth import bearer, check
from agentq.runtime.root import Parts
from agentq.store.aio import AsyncStateStore


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

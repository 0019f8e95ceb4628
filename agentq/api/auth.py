"""Who may use the API (SPEC §14): bearer tokens, and for browsers a cookie traded for `?token=`.

- Every path but `GET /v1/health` needs `Authorization: Bearer <token>` with one of the configured tokens
  (`AGENTQ_API_TOKENS`); when none is configured `agentq api` makes a random one and prints the page's URL with
  it, so no port is ever open without auth. `--no-auth` turns auth off explicitly.
- A browser's `EventSource` cannot send headers, so the event stream also accepts `?token=`, and the web page
  trades `?token=` for an HttpOnly, SameSite=Strict cookie (then redirects to the same URL without it, so the
  token does not stay in the address bar or the history). Requests that change something and are authorized
  by the cookie alone must come from the page's own origin (`Sec-Fetch-Site` / `Origin`), so another site
  cannot make a logged-in browser submit or approve anything.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from urllib.parse import urlsplit

from fastapi import Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from agentq.api.errors import ApiError

COOKIE = "agentq_token"
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

bearer = HTTPBearer(auto_error=False, description="one of the tokens in AGENTQ_API_TOKENS (or the one "
                                                   "`agentq api` printed)")


@dataclass(frozen=True)
class ApiAuth:
    """The accepted tokens; `enabled=False` only when auth was turned off explicitly (`--no-auth`)."""

    tokens: tuple[str, ...]
    enabled: bool = True
    generated: bool = False  # the token was made at start (none configured)

    @classmethod
    def configure(cls, tokens: list[str] | tuple[str, ...], *, enabled: bool = True) -> ApiAuth:
        if not enabled:
            return cls((), enabled=False)
        if tokens:
            return cls(tuple(tokens))
        return cls((secrets.token_urlsafe(24),), generated=True)

    def accepts(self, token: str | None) -> bool:
        if not token:
            return False
        # compare with every token (constant time each), so timing does not tell which one nearly matched
        matches = [secrets.compare_digest(token.encode(), known.encode()) for known in self.tokens]
        return any(matches)

    @property
    def page_token(self) -> str | None:
        """The token to print with the page's URL."""
        return self.tokens[0] if self.enabled and self.tokens else None


def unauthorized(message: str) -> ApiError:
    return ApiError(401, "Unauthorized", message, headers={"WWW-Authenticate": "Bearer"})


def check(request: Request, credentials: HTTPAuthorizationCredentials | None, *, query_token: bool) -> None:
    """Raise 401 unless the request carries an accepted token (header; cookie; `?token=` where allowed)."""
    auth: ApiAuth = request.app.state.auth
    if not auth.enabled:
        return
    if credentials is not None:
        if auth.accepts(credentials.credentials):
            return
        raise unauthorized("the bearer token is not one of the API's tokens")
    if query_token and auth.accepts(request.query_params.get("token")):
        return
    if auth.accepts(request.cookies.get(COOKIE)):
        if request.method not in _SAFE_METHODS and not _same_origin(request):
            raise ApiError(403, "Forbidden", "a request authorized by the page's cookie must come from the page")
        return
    raise unauthorized("missing or wrong token: send `Authorization: Bearer <token>` (the tokens are in "
                       "AGENTQ_API_TOKENS, or the one `agentq api` printed)")


def _same_origin(request: Request) -> bool:
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site in ("same-origin", "none")
    origin = request.headers.get("origin") or request.headers.get("referer")
    if origin is None:
        return False
    return urlsplit(origin).netloc == request.headers.get("host", "")

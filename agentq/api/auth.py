"""Who may use the API (README.md#the-http-api-and-the-web-page): bearer tokens, and for browsers a cookie traded for
`?token=`.

- Every path but `GET /v1/health` needs `Authorization: Bearer <token>` with one of the configured tokens
  (`AGENTQ_API_TOKENS`); when none is configured `agentq api` makes a random one and prints the page's URL with
  it, so no port is ever open without auth. `--no-auth` turns auth off explicitly.
- A browser's `EventSource` cannot send headers, so the event stream also accepts `?token=`, and the web page
  trades `?token=` for an HttpOnly, SameSite=Strict cookie (then redirects to the same URL without it, so the
  token does not stay in the address bar or the history). Requests that change something and are authorized
  by the cookie alone must come from the page's own origin (`Sec-Fetch-Site` / `Origin`), so another site
  cannot make a logged-in browser submit or approve anything.
- Each token acts for a tenant in a role (docs/tenants.md, `agentq.protocol.tenants`): tokens listed plainly are
  admins of the `default` tenant; the file form (`AGENTQ_API_TOKENS=@/path/tokens.json`, see `tokens_file`)
  gives each its tenant and role.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from fastapi import Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from agentq.api.errors import ApiError
from agentq.errors import ConfigurationError
from agentq.protocol.tenants import DEFAULT_TENANT, Principal, Role, tenant_problem

COOKIE = "agentq_token"
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

bearer = HTTPBearer(auto_error=False, description="one of the tokens in AGENTQ_API_TOKENS (or the one "
                                                   "`agentq api` printed)")


ADMIN = Principal(DEFAULT_TENANT, Role.ADMIN)  # a plainly listed token, the generated one, and --no-auth


@dataclass(frozen=True)
class ApiAuth:
    """The accepted tokens and whom each acts for; `enabled=False` only when auth was turned off explicitly
    (`--no-auth`: every request acts as an admin)."""

    tokens: tuple[tuple[str, Principal], ...]
    enabled: bool = True
    generated: bool = False  # the token was made at start (none configured)

    @classmethod
    def configure(cls, tokens: list[str] | tuple[str, ...], *, enabled: bool = True) -> ApiAuth:
        """From `AGENTQ_API_TOKENS`: plain tokens, and `@/path` items naming token files. Raises
        `ConfigurationError` (one line naming every problem) for a file that cannot be used."""
        if not enabled:
            return cls((), enabled=False)
        entries: list[tuple[str, Principal]] = []
        for item in tokens:
            entries.extend(tokens_file(Path(item[1:])) if item.startswith("@") else [(item, ADMIN)])
        if entries:
            return cls(tuple(entries))
        return cls(((secrets.token_urlsafe(24), ADMIN),), generated=True)

    def principal_of(self, token: str | None) -> Principal | None:
        """Whom `token` acts for, or None when it is not one of the tokens."""
        if not token:
            return None
        # compare with every token (constant time each), so timing does not tell which one nearly matched
        found = None
        for known, principal in self.tokens:
            if secrets.compare_digest(token.encode(), known.encode()):
                found = principal
        return found

    def accepts(self, token: str | None) -> bool:
        return self.principal_of(token) is not None

    def admits_admin(self, token: str | None) -> bool:
        """Whether `token` is an admin's (what a door that acts for every tenant asks for)."""
        principal = self.principal_of(token)
        return principal is not None and principal.is_admin

    @property
    def tenants(self) -> frozenset[str]:
        """The tenants the tokens name."""
        return frozenset(principal.tenant for _, principal in self.tokens)

    @property
    def page_token(self) -> str | None:
        """The token to print with the page's URL."""
        return self.tokens[0][0] if self.enabled and self.tokens else None


def tokens_file(path: Path) -> list[tuple[str, Principal]]:
    """The tokens of a tokens file: `{"<token>": {"tenant": "...", "role": "admin" | "submit" | "read"}}`."""
    where = f"AGENTQ_API_TOKENS file {path}"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigurationError(f"{where}: cannot read it: {error.strerror or error}") from None
    except ValueError as error:
        raise ConfigurationError(f"{where}: not JSON: {error}") from None
    if not isinstance(data, dict) or not data:
        raise ConfigurationError(f'{where}: expected an object of tokens, {{"<token>": {{"tenant": "...", '
                                 f'"role": "admin" | "submit" | "read"}}}}, got {_json_kind(data)}')
    entries, problems = [], []
    for n, (token, entry) in enumerate(data.items(), start=1):  # named by position: a token is never printed
        principal, problem = _principal(entry)
        if len(token.strip()) < 16:
            problems.append(f"token #{n} has {len(token.strip())} characters; 16 at least")
        elif principal is None:
            problems.append(f"token #{n}: {problem}")
        else:
            entries.append((token, principal))
    if problems:
        raise ConfigurationError(f"{where}: " + "; ".join(problems))
    return entries


def _json_kind(value: Any) -> str:
    """How a tokens file's top-level value is named in its error (never its content: it may hold tokens)."""
    if isinstance(value, dict):
        return "an empty object"
    return {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(value), "a number")


def _principal(entry: Any) -> tuple[Principal | None, str]:
    if not isinstance(entry, dict):
        return None, 'expected {"tenant": "...", "role": "..."}'
    unknown = sorted(set(entry) - {"tenant", "role"})
    if unknown:
        return None, f"unknown field {unknown[0]!r}"
    tenant, role = entry.get("tenant", DEFAULT_TENANT), entry.get("role", Role.SUBMIT.value)
    if (problem := tenant_problem(tenant)) is not None:
        return None, problem
    if role not in set(Role):
        return None, f"role {role!r} is none of admin, submit, read"
    return Principal(tenant, Role(role)), ""


def unauthorized(message: str) -> ApiError:
    return ApiError(401, "Unauthorized", message, headers={"WWW-Authenticate": "Bearer"})


def check(request: Request, credentials: HTTPAuthorizationCredentials | None, *, query_token: bool) -> Principal:
    """Whom the request acts for (also kept as `request.state.principal`); 401 unless it carries an accepted
    token (header; cookie; `?token=` where allowed)."""
    principal = _principal_of(request, credentials, query_token=query_token)
    request.state.principal = principal
    return principal


def _principal_of(request: Request, credentials: HTTPAuthorizationCredentials | None, *,
                  query_token: bool) -> Principal:
    auth: ApiAuth = request.app.state.auth
    if not auth.enabled:
        return ADMIN
    if credentials is not None:
        if (principal := auth.principal_of(credentials.credentials)) is not None:
            return principal
        raise unauthorized("the bearer token is not one of the API's tokens")
    if query_token and (principal := auth.principal_of(request.query_params.get("token"))) is not None:
        return principal
    if (principal := auth.principal_of(request.cookies.get(COOKIE))) is not None:
        if request.method not in _SAFE_METHODS and not _same_origin(request):
            raise ApiError(403, "Forbidden", "a request authorized by the page's cookie must come from the page")
        return principal
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

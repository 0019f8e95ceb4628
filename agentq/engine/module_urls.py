"""Saved modules fetched from URLs (docs/protocol.md#modules): only ``http(s)`` hosts in the allow-list, redirects only
to the same host and never from https to http (at most :data:`MAX_REDIRECTS`), a body no larger than the size limit.
What
`engine/modules.py` parses and caches."""

from __future__ import annotations

from collections.abc import Set

import httpx2

from agentq.errors import ModuleError, ModuleInvalid, ModuleNotFound, ModuleRefused, ModuleUnavailable, Problem

MAX_REDIRECTS = 5


def refused(ref: str, why: str) -> ModuleRefused:
    return ModuleRefused(f"module {ref!r} refused: {why}", ref=ref)


class ModuleFetcher:
    """Fetches the body of a module URL for a :class:`~agentq.engine.modules.ModuleLibrary`."""

    def __init__(self, allowlist: Set[str], timeout_s: float, max_bytes: int) -> None:
        self.allowlist = allowlist  # lower-case hosts, or host:port
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes

    def fetch(self, ref: str) -> tuple[bytes, str]:
        """The body `ref` answers and the URL it came from (after redirects); a :class:`ModuleError` naming
        `ref` otherwise."""
        scheme = ref.split(":", 1)[0].lower()
        if scheme not in ("http", "https"):
            raise refused(ref, f"scheme {scheme + ':'!r} is not allowed; only names and http(s) URLs are")
        try:
            url = httpx2.URL(ref)
        except httpx2.InvalidURL as error:
            raise refused(ref, f"not a valid URL ({error})") from None
        self._check(ref, url)
        return self._fetch(ref, url)

    def _allowed(self, url: httpx2.URL) -> bool:
        host = url.host.lower()
        return host in self.allowlist or (url.port is not None and f"{host}:{url.port}" in self.allowlist)

    def _check(self, ref: str, url: httpx2.URL, *, first_host: str | None = None,
               first_scheme: str | None = None) -> None:
        if url.scheme not in ("http", "https"):
            raise refused(ref, f"scheme {url.scheme + ':'!r} is not allowed; only names and http(s) URLs are")
        if not url.host:
            raise refused(ref, "the URL has no host")
        if first_host is not None and url.host.lower() != first_host:
            raise refused(ref, f"redirected to another host ({url.host}); redirects may only stay on {first_host}")
        if first_scheme == "https" and url.scheme != "https":
            raise refused(ref, f"redirected from https to {url}; a redirect may not drop TLS")
        if not self._allowed(url):
            allowed = ", ".join(sorted(self.allowlist)) or "none"
            raise refused(ref, f"host {url.host!r} is not in AGENTQ_MODULE_URL_ALLOWLIST (allowed: {allowed})")

    def _fetch(self, ref: str, url: httpx2.URL) -> tuple[bytes, str]:
        first_host, first_scheme = url.host.lower(), url.scheme
        try:
            with httpx2.Client(timeout=self.timeout_s, follow_redirects=False) as client:
                for _ in range(MAX_REDIRECTS + 1):
                    with client.stream("GET", url, headers={"Accept": "application/json"}) as response:
                        if response.is_redirect:
                            url = url.join(response.headers["location"])
                            self._check(ref, url, first_host=first_host, first_scheme=first_scheme)
                            continue
                        return self._body(ref, str(url), response), str(url)
        except httpx2.HTTPError as error:
            raise ModuleUnavailable(f"module {ref!r}: cannot fetch {url} ({type(error).__name__}: {error})",
                                    ref=ref, source=str(url)) from None
        raise ModuleError(f"module {ref!r}: more than {MAX_REDIRECTS} redirects", ref=ref, source=str(url))

    def _body(self, ref: str, source: str, response: httpx2.Response) -> bytes:
        status = response.status_code
        if status in (404, 410):
            raise ModuleNotFound(f"module {ref!r} not found: {source} answered {status}", ref=ref, source=source)
        if status == 429 or status >= 500:
            raise ModuleUnavailable(f"module {ref!r}: {source} answered {status}; try again later", ref=ref,
                                    source=source)
        if status != 200:
            raise ModuleError(f"module {ref!r}: {source} answered {status}", ref=ref, source=source)
        length = response.headers.get("content-length", "")
        if length.isdigit() and int(length) > self.max_bytes:
            raise self._too_big(ref, source)
        body = bytearray()
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > self.max_bytes:
                raise self._too_big(ref, source)
        return bytes(body)

    def _too_big(self, ref: str, source: str) -> ModuleInvalid:
        return ModuleInvalid(f"module {ref!r} ({source}) is invalid", [Problem(
            "", f"the body is larger than {self.max_bytes} bytes (AGENTQ_MAX_JOB_BYTES)")], ref=ref, source=source)

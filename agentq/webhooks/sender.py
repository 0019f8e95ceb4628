"""One delivery attempt over HTTP (httpx2): a signed POST to an allowed address, within a timeout, no redirect
followed.

The connection goes to an address the allowlist checked (`targets.resolve_checked`) at connect time, in the
transport's own network backend: the name is resolved once, checked, and the socket opened to that checked
address, so a name whose DNS answer changes between the check and the connection cannot reach an internal
address. TLS still verifies the certificate of the URL's host name.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import httpcore2
import httpx2

from agentq.webhooks.records import Delivery
from agentq.webhooks.signing import signature
from agentq.webhooks.targets import Allowlist, TargetRefused, resolve_checked, url_problems

USER_AGENT = "agentq-webhooks"


@dataclass(frozen=True)
class Answer:
    """What an attempt came to: the receiver's status (None: no answer) or what went wrong, its `Retry-After`
    in seconds when it gave one, and how long the attempt took."""

    status: int | None
    error: str | None
    retry_after_s: float | None
    duration_ms: float

    @property
    def delivered(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


class _CheckedBackend(httpcore2.SyncBackend):
    """Opens every connection to an address of the host the allowlist lets deliveries reach."""

    def __init__(self, allowlist: Allowlist):
        self.allowlist = allowlist

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore2.NetworkStream:
        try:
            addresses = resolve_checked(host, port, self.allowlist)
        except TargetRefused as refused:
            raise httpcore2.ConnectError(str(refused)) from None
        return super().connect_tcp(str(addresses[0]), port, timeout=timeout, local_address=local_address,
                                   socket_options=socket_options)


class Sender:
    """Sends attempts for one process (its connections are kept between attempts)."""

    def __init__(self, allowlist: Allowlist, *, keys: list[bytes], timeout_s: float):
        self.allowlist = allowlist
        self.keys = keys
        transport = httpx2.HTTPTransport(trust_env=False)
        # httpcore2's pool takes its network backend only when it is built; httpx2 builds it without one
        transport._pool._network_backend = _CheckedBackend(allowlist)  # type: ignore[attr-defined]
        self.client = httpx2.Client(transport=transport, timeout=timeout_s, follow_redirects=False,
                                    trust_env=False)

    def send(self, delivery: Delivery, body: bytes) -> Answer:
        started = time.monotonic()
        problems = url_problems(delivery.url, "", self.allowlist)
        if problems:
            return Answer(None, f"refused: {problems[0].message}", None, 0.0)
        if not self.keys:
            return Answer(None, "not sent: AGENTQ_WEBHOOK_SECRET is not set in this process", None, 0.0)
        timestamp = int(time.time())
        headers = {"content-type": "application/json", "user-agent": USER_AGENT, "webhook-id": delivery.id,
                   "webhook-timestamp": str(timestamp),
                   "webhook-signature": signature(self.keys, delivery.id, timestamp, body)}
        try:
            # the answer's body is never read: only its status and headers count, whatever size it has
            with self.client.stream("POST", delivery.url, content=body, headers=headers) as response:
                status, retry_after = response.status_code, _retry_after(response)
                problem = None if 200 <= status < 300 else _status_error(response)
        except httpx2.HTTPError as failure:
            return Answer(None, f"{type(failure).__name__}: {failure}"[:500], None, _since(started))
        return Answer(status, problem, retry_after, _since(started))

    def close(self) -> None:
        self.client.close()


def _status_error(response: httpx2.Response) -> str:
    if response.is_redirect:
        return f"answered {response.status_code}: redirects are not followed (give the webhook its final URL)"
    return f"answered {response.status_code}"


def _retry_after(response: httpx2.Response) -> float | None:
    value = response.headers.get("retry-after", "")
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None  # an HTTP date: the usual backoff applies


def _since(started: float) -> float:
    return round((time.monotonic() - started) * 1000, 1)

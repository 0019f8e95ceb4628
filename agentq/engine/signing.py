"""Signed call tasks: which records a worker may run before its claim.

A call's task carries the call's record so the worker need not read it back. Normally the claim compares that
record with the stored one before anything runs, so a task that did not come from agentq (anyone who can write
to the broker) can point at a call but never change what runs. An `idempotent` activity's call runs before its
claim (one store step settles both, see `store/lua/settle.lua`), so its task must prove where it came from:
the dispatcher signs `(job, call, SHA-1 of the record)` with the fleet's secret (`FleetStore.task_signing_key`,
created in the store by the first process that needs it), and a worker runs a record ahead only if the
signature holds. Anything else takes the usual claim-first path.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
from collections.abc import Callable


class TaskSigner:
    """Signs and checks call tasks with the fleet's secret, fetched once per process on first use."""

    def __init__(self, fetch_key: Callable[[], bytes]):
        self._fetch_key = fetch_key
        self._key: bytes | None = None
        self._lock = threading.Lock()

    def _secret(self) -> bytes:
        key = self._key
        if key is None:
            with self._lock:
                if self._key is None:
                    self._key = self._fetch_key()
                key = self._key
        return key

    def prime(self) -> None:
        """Fetch the secret now: a worker does it at start (before its pool forks), so no step that follows a
        commit has to reach the store for it first."""
        self._secret()

    def sign(self, job_id: str, call_id: str, record_sha: str) -> str:
        message = f"{job_id}\n{call_id}\n{record_sha}".encode()
        return hmac.new(self._secret(), message, hashlib.sha256).hexdigest()

    def verify(self, job_id: str, call_id: str, record_sha: str, signature: str) -> bool:
        return hmac.compare_digest(self.sign(job_id, call_id, record_sha), signature)

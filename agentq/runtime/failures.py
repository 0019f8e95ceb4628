"""`CallFailure`: how the parts that run a call (activities, latent calls, modules) report that it failed."""

from __future__ import annotations


class CallFailure(Exception):
    """A call failure with the type name recorded in its error message; `retryable` decides retries, and
    `retry_in` (seconds) is the wait the failure asks for (a model's `retry-after`), if any."""

    def __init__(self, type_: str, message: str, *, retryable: bool, retry_in: float | None = None):
        super().__init__(message)
        self.type = type_
        self.retryable = retryable
        self.retry_in = retry_in

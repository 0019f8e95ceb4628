"""How a call's attempt fails: `CallFailure` (what the parts that run a call raise), the classification of
anything else an attempt raised, and the retry policy (how many attempts, how long between them)."""

from __future__ import annotations

import logging
import random

from agentq.errors import ProtocolError
from agentq.protocol.sensitive import redactor_for

log = logging.getLogger("agentq.executor")


class CallFailure(Exception):
    """A call failure with the type name recorded in its error message; `retryable` decides retries, and
    `retry_in` (seconds) is the wait the failure asks for (a model's `retry-after`), if any."""

    def __init__(self, type_: str, message: str, *, retryable: bool, retry_in: float | None = None):
        super().__init__(message)
        self.type = type_
        self.retryable = retryable
        self.retry_in = retry_in

    def error(self) -> dict:
        """The failure as a call's recorded error."""
        return {"type": self.type, "message": str(self)}


class CallDeferred(CallFailure):
    """A call whose model request the fleet-wide rate limits hold back: not a failure; the call is tried again
    after `retry_in` seconds whatever attempts it made (its request keeps its place meanwhile)."""

    def __init__(self, message: str, retry_in: float):
        super().__init__("Deferred", message, retryable=True, retry_in=retry_in)


def classify(error: Exception, *, where: str) -> CallFailure:
    """What an attempt raised before its commit, as a call failure: a `CallFailure` as it is; a protocol error
    (a push onto a non-array, a message for an unknown branch) fails the call for good; anything else is a
    defect, not the activity's, and fails the call rather than leave it running. (`StoreUnavailableError` is
    never classified: the task is handed back.) `where` names the call in the log line of a defect."""
    if isinstance(error, CallFailure):
        return error
    if isinstance(error, ProtocolError):
        return CallFailure(type(error).__name__, str(error), retryable=False)
    log.error("%s: unexpected error before its commit", where, exc_info=error)
    return CallFailure(type(error).__name__, f"internal error: {error}", retryable=False)


def masked(failure: CallFailure, call: dict, tool: dict | None) -> CallFailure:
    """The failure with the call's sensitive values masked in its message (an exception's text may quote them)."""
    if isinstance(failure, CallDeferred):
        return failure  # names the model and the wait, nothing of the call
    redactor = redactor_for(call, tool)
    message = redactor.redact(str(failure)) if redactor else str(failure)
    if message == str(failure):
        return failure
    return CallFailure(failure.type, message, retryable=failure.retryable, retry_in=failure.retry_in)


def retry_in(failure: CallFailure, attempt: int, *, retries: int, backoff_s: float) -> float | None:
    """Seconds before the next attempt of a call whose attempt number `attempt` failed, or None when it is not
    tried again: a retryable failure, within `retries`, waits `backoff_s` doubled per attempt (jittered), or
    what the failure asked for."""
    if isinstance(failure, CallDeferred):
        return max(failure.retry_in or 0.0, 0.0)
    if not failure.retryable or attempt > retries:
        return None
    if failure.retry_in is not None:
        return max(failure.retry_in, 0.0)
    return backoff_s * (2 ** (attempt - 1)) * random.uniform(0.5, 1.0)

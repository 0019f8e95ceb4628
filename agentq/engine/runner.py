"""The call runner: an activity's handler invoked within its timeout, and what it raised classified.

Async handlers run on an event loop per thread (a pool thread keeps its loop); a sync handler cannot be
interrupted in a threads pool, so a late result is discarded and the call times out as it would under Celery's
soft limit. An activity's own error is a runtime error of the call, retried within its `retries`; agentq's
errors and `NonRetryableError` fail the call for good.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any

from agentq.engine.failures import CallFailure
from agentq.engine.hooks import Hook
from agentq.errors import AgentQError, NonRetryableError, StoreUnavailableError
from agentq.protocol.activities import ActivityRegistry, ActivitySpec, invoke_handler
from agentq.protocol.envelopes import Envelope, Part
from agentq.protocol.events import complete_part
from agentq.protocol.records import CallRecord
from agentq.protocol.scopes import Emitter, ScopedContext
from agentq.protocol.views import LogIndex

Publish = Callable[[Envelope], None]
"""Where the parts an activity emits go: published at once, or kept until its start events are."""

Around = Callable[[str, Mapping[str, Any], Mapping[str, Any]], AbstractContextManager[Any]]
"""What a handler runs inside, given its activity's name, the resolved call and its tool (`Hook.around_activity`)."""


class CallRunner:
    """Invokes the handlers of `activities`; one per process, shared by threads."""

    def __init__(self, activities: ActivityRegistry, *, default_timeout_s: float, max_result_bytes: int,
                 source: str = "agentq", around: Around | None = None):
        self.activities = activities
        self.around = around if around is not None else Hook().around_activity
        self.default_timeout_s = default_timeout_s
        self.max_result_bytes = max_result_bytes
        self.source = source
        self._loops = threading.local()

    def spec(self, record: CallRecord) -> ActivitySpec | None:
        """The activity spec of an explicit call, when this process serves it."""
        return self.activities.get(record.activity) if record.activity in self.activities else None

    def timeout_of(self, spec: ActivitySpec) -> float:
        """The activity's own timeout, else `AGENTQ_DEFAULT_TIMEOUT_S`
        (docs/architecture.md#runtime--the-only-place-that-knows-celery)."""
        return spec.timeout if spec.timeout is not None else self.default_timeout_s

    def invoke(self, record: CallRecord, call: dict, tool: dict, index: LogIndex | None, job_id: str,
               call_id: str, publish: Publish) -> Any:
        """Run the activity's handler on the resolved `call`; its result, checked to be storable. Raises
        `CallFailure` (or `StoreUnavailableError`: its `emit` could not reach the store)."""
        spec = self.spec(record)
        if spec is None:
            raise CallFailure("ActivityNotServed", f"this worker does not serve activity {record.activity!r}",
                              retryable=True)
        timeout = self.timeout_of(spec)

        def emit(part: Any) -> None:
            publish(Part(job_id=job_id, call_id=call_id,
                         part=complete_part(part, source=self.source, locale=record.locale)))

        emitter = Emitter(job_id, call_id, emit)  # the context reaches `emit` (and so the store) only by key
        context = ScopedContext.build(index if index is not None else [], list(record.scopes), record.instance,
                                      emit=emitter)
        try:
            with self.around(spec.name, call, tool):
                result = self._run(spec, call, tool, context, timeout)
        except NonRetryableError as error:
            raise CallFailure(error.type, str(error), retryable=False) from None
        except StoreUnavailableError:
            raise
        except AgentQError as error:
            raise CallFailure(type(error).__name__, str(error), retryable=False) from None
        except Exception as error:  # the activity raised: a runtime error of this call
            message = str(error) or type(error).__name__
            if isinstance(error, asyncio.TimeoutError) or type(error).__name__ == "SoftTimeLimitExceeded":
                message = f"timed out after {timeout} s"
            raise CallFailure(type(error).__name__, message, retryable=True) from None
        finally:
            emitter.close()
        self.check_result(result)
        return result

    def _run(self, spec: ActivitySpec, call: dict, tool: dict, context: ScopedContext, timeout: float) -> Any:
        begun = time.monotonic()
        result = invoke_handler(spec, call, tool, context)
        if inspect.isawaitable(result):
            return self._await(result, timeout)
        if time.monotonic() - begun > timeout:
            raise TimeoutError(f"timed out after {timeout} s")
        return result

    def _await(self, awaitable: Any, timeout: float) -> Any:
        loop = getattr(self._loops, "loop", None)
        if loop is None or loop.is_closed():
            loop = self._loops.loop = asyncio.new_event_loop()
        return loop.run_until_complete(asyncio.wait_for(awaitable, timeout))

    def check_result(self, result: Any) -> None:
        """A result must be JSON, and at most `AGENTQ_MAX_RESULT_BYTES` of it, to be stored; anything else
        fails the call now (not its commit, later)."""
        try:
            size = len(json.dumps(result, ensure_ascii=False).encode())
        except (TypeError, ValueError, RecursionError) as error:
            raise CallFailure("InvalidResult", f"the activity returned a value that is not JSON: {error}",
                              retryable=False) from None
        if size > self.max_result_bytes:
            raise CallFailure("ResultTooLarge", f"the activity's result is {size} bytes of JSON; the limit is "
                              f"{self.max_result_bytes} (AGENTQ_MAX_RESULT_BYTES)", retryable=False)

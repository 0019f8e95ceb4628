"""The one place every model request of the engine goes through: an agent tick's, a latent call's, a module's tick.

`ModelRequests.solve(job, request)` runs the hooks' gates in order (`Hook.before_request`: the budget today, a
fleet-wide limiter beside it), sends what they let through to the provider, and tells the hooks how it ended
(`Hook.after_request`), whatever happened. A gate refuses by raising: the request is not sent. A job with
`options.priority: "batch"` takes the batch lane instead (`engine/batch.py`): queued for a batch, nothing waits.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from agentq.engine.hooks import Hook, Hooks, ModelRequest, RequestEnded, StartEvents
from agentq.llm.base import LLM, LLMAnswer, LLMRequest, OnCall
from agentq.protocol.priority import is_batch
from agentq.protocol.records import JobInfo

if TYPE_CHECKING:
    from agentq.engine.batch import Lane


class ModelRequests:
    """The provider behind the hooks' gates; one per process, shared by threads."""

    def __init__(self, llm: LLM, hooks: Hook | None = None, *, batch: Lane | None = None):
        self.llm = llm
        self.hooks = hooks if hooks is not None else Hooks()
        self.batch = batch  # the batch lane, for jobs with `options.priority: "batch"` (None: they stream too)

    def waits_in_batch(self, job: JobInfo, place: str) -> bool:
        """Whether `job`'s request of `place` waits in the batch lane (queued, sent, or answered and not taken)."""
        return self.batch is not None and is_batch(job.job_options.priority) and self.batch.holds(place)

    def solve(self, job: JobInfo, request: LLMRequest, *, on_call: OnCall | None = None,
              place: str | None = None, on_send: Callable[[], None] | None = None,
              starting: StartEvents | None = None) -> LLMAnswer:
        """One request for `job`, through the gates; raises what a gate or the provider raised. `place` names the
        request across its attempts (see `ModelRequest`: the budget holds its reservation under it, so give every
        request that can be taken over by another process one; default: this attempt's key); `on_send()` runs once the
        gates let it through, before it is sent; `starting`, the events the request starts with, for the last gate to
        write in its own store step (`StartEvents.written`; else `on_send` writes them)."""
        if self.batch is not None and is_batch(job.job_options.priority):
            return self.batch.solve(self.hooks, job, request, place=place or uuid.uuid4().hex, on_send=on_send,
                                    on_call=on_call)
        key = uuid.uuid4().hex
        asked = ModelRequest(job=job, request=request, key=key, place=place or key, starting=starting)
        sent = replace(asked, request=self.hooks.before_request(asked))
        answer: LLMAnswer | None = None
        error: BaseException | None = None
        try:
            if on_send is not None:
                on_send()
            answer = self.llm.solve(sent.request, on_call=on_call)
            return answer
        except BaseException as failed:
            error = failed
            raise
        finally:
            self.hooks.after_request(RequestEnded(sent, answer, error))


__all__ = ["ModelRequests"]

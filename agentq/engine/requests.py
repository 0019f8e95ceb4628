"""The one place every model request of the engine goes through: an agent tick's, a latent call's, a module's tick.

`ModelRequests.solve(job, request)` runs the hooks' gates in order (`Hook.before_request`: the budget today, a
fleet-wide limiter beside it), sends what they let through to the provider, and tells the hooks how it ended
(`Hook.after_request`), whatever happened. A gate refuses by raising: the request is not sent.
"""

from __future__ import annotations

import uuid

from agentq.engine.hooks import Hook, Hooks, ModelRequest, RequestEnded
from agentq.llm.base import LLM, LLMAnswer, LLMRequest, OnCall
from agentq.protocol.records import JobInfo


class ModelRequests:
    """The provider behind the hooks' gates; one per process, shared by threads."""

    def __init__(self, llm: LLM, hooks: Hook | None = None):
        self.llm = llm
        self.hooks = hooks if hooks is not None else Hooks()

    def solve(self, job: JobInfo, request: LLMRequest, *, on_call: OnCall | None = None) -> LLMAnswer:
        """One request for `job`, through the gates; raises what a gate or the provider raised."""
        asked = ModelRequest(job=job, request=request, key=uuid.uuid4().hex)
        sent = ModelRequest(job=job, request=self.hooks.before_request(asked), key=asked.key)
        answer: LLMAnswer | None = None
        try:
            answer = self.llm.solve(sent.request, on_call=on_call)
            return answer
        finally:
            self.hooks.after_request(RequestEnded(sent, answer))


__all__ = ["ModelRequests"]

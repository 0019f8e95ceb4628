"""agentq's LLM layer: the provider interface, the Anthropic provider, replay and recording
(docs/protocol.md#what-the-model-is-sent).

    from agentq.llm import create_llm, LLMRequest

    llm = create_llm(settings)          # None when no provider is configured
    answer = llm.solve(LLMRequest(...), on_call=lambda index, call: ...)

Importing this package does not import ``anthropic``; the provider loads it on its first request.
"""

from agentq.llm.base import LLM, LLMAnswer, LLMRequest, OnCall, Usage
from agentq.llm.factory import create_llm
from agentq.llm.replay import RecordingLLM, ReplayLLM, request_fingerprint
from agentq.llm.scanner import CallReporter, CallScanner, iter_calls

__all__ = [
    "LLM",
    "CallReporter",
    "CallScanner",
    "LLMAnswer",
    "LLMRequest",
    "OnCall",
    "RecordingLLM",
    "ReplayLLM",
    "Usage",
    "create_llm",
    "iter_calls",
    "request_fingerprint",
]

"""Estimating a request's prompt before it is sent (budgets reserve it; a rate limiter may draw it).

About 4 characters of the request's JSON (system, messages, the solution tool) per token, plus the tool-use
system prompt the API adds for a forced tool. An estimate: JSON-heavy or non-English text may take more tokens
per character; what a request really used is known from its answer's usage, which settles the reservation.
"""

from __future__ import annotations

import json
import math

from agentq.llm.base import SOLUTION_TOOL_DESCRIPTION, LLMRequest

CHARS_PER_TOKEN = 4
TOOL_USE_PROMPT_TOKENS = 350  # the system prompt the API adds when a request forces a tool (about 313-346)


def estimate_input_tokens(request: LLMRequest) -> int:
    """About how many prompt tokens `request` will be billed for (cached or not)."""
    text = json.dumps([request.system, request.messages, request.solution_schema, SOLUTION_TOOL_DESCRIPTION],
                      ensure_ascii=False, separators=(",", ":"))
    return math.ceil(len(text) / CHARS_PER_TOKEN) + TOOL_USE_PROMPT_TOKENS


__all__ = ["CHARS_PER_TOKEN", "estimate_input_tokens"]

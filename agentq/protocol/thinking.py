"""Extended thinking (docs/rate-limits.md): `options.thinking` for a job's ticks, `x-thinking` on a tool for its
latent calls (pure).

The value is ``{"budget_tokens": N}`` (the model may think up to N tokens before it answers; the Messages API wants
N >= 1024 and below the request's ``max_tokens``, since thinking counts as output) or ``"adaptive"`` (the model
decides how much to think; only models from Claude Opus 4.6 / Sonnet 4.6 on accept it). With thinking on, a request
cannot force the solution tool: the API answers 400 "Thinking may not be enabled when tool_choice forces tool use",
so it is offered (``tool_choice: auto``) and an answer without it is sent back once.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from agentq.errors import Problem
from agentq.protocol.listed_tools import listed_tools

MIN_BUDGET_TOKENS = 1024  # the API's least thinking budget
ADAPTIVE = "adaptive"
THINKING_KEYWORD = "x-thinking"
_NO_ADAPTIVE = re.compile(r"^claude-(3[-.]|(opus|sonnet|haiku)-4(-[0-5])?(-\d{8})?$)")
"""Models known not to accept adaptive thinking (Claude 3 and 4 up to 4.5); any other name is let through."""


def thinking_problems(value: Any, pointer: str, *, max_tokens: int | None = None,
                      model: str | None = None) -> list[Problem]:
    """What is wrong with `value` as `options.thinking` or `x-thinking` (each problem with `pointer`); [] when it is
    valid. `max_tokens`: the output limit of the requests it would go with (a budget must stay below it);
    `model`: the model it would go to (adaptive thinking needs one that supports it)."""
    if value is None:
        return []
    if value == ADAPTIVE:
        if model is not None and _NO_ADAPTIVE.match(model):
            return [Problem(pointer, f"model {model!r} does not support adaptive thinking; give "
                                     f"{{\"budget_tokens\": N}} instead")]
        return []
    if not isinstance(value, Mapping) or set(value) != {"budget_tokens"}:
        return [Problem(pointer, f'expected {{"budget_tokens": N}} (N >= {MIN_BUDGET_TOKENS}) or "adaptive", '
                                 f"got {value!r}")]
    return _budget_problems(value["budget_tokens"], f"{pointer}/budget_tokens", max_tokens)


def _budget_problems(budget: Any, where: str, max_tokens: int | None) -> list[Problem]:
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < MIN_BUDGET_TOKENS:
        return [Problem(where, f"expected an integer >= {MIN_BUDGET_TOKENS} (tokens), got {budget!r}")]
    if max_tokens is not None and budget >= max_tokens:
        return [Problem(where, f"the thinking budget must be below the requests' max_tokens ({max_tokens}; "
                               f"AGENTQ_LLM_MAX_TOKENS), got {budget}")]
    return []


def tool_thinking_problems(raw_tools: Any, available: Mapping[str, Mapping[str, Any]],
                           max_tokens: int | None) -> list[Problem]:
    """What is wrong with the `x-thinking` of the tools a job lists (`raw_tools`: its `tools`, names of `available`
    tools or inline schemas), each with the tool's pointer: a budget its latent calls' max_tokens cannot hold, or
    adaptive thinking on a tool whose `x-model` does not support it."""
    problems: list[Problem] = []
    for tool in listed_tools(raw_tools, available):
        pointer = f"/tools/{tool.index}/{THINKING_KEYWORD}"
        for problem in _tool_problems(tool.schema, pointer, max_tokens, inline=tool.inline):
            problems.append(problem if tool.inline else tool.problem(THINKING_KEYWORD, problem.message))
    return problems


def _tool_problems(schema: Any, pointer: str, max_tokens: int | None, *, inline: bool) -> list[Problem]:
    if not isinstance(schema, Mapping) or schema.get(THINKING_KEYWORD) is None:
        return []
    if inline and thinking_problems(schema[THINKING_KEYWORD], pointer):
        return []  # not a valid x-thinking at all: the tool's own check says so
    model = schema.get("x-model") if isinstance(schema.get("x-model"), str) else None
    return thinking_problems(schema[THINKING_KEYWORD], pointer, max_tokens=max_tokens, model=model)


def thinking_param(value: Any) -> dict[str, Any] | None:
    """The Messages API's `thinking` for a (valid) stored value; None: thinking is off."""
    if value == ADAPTIVE:
        return {"type": "adaptive"}
    if isinstance(value, Mapping) and isinstance(value.get("budget_tokens"), int):
        return {"type": "enabled", "budget_tokens": int(value["budget_tokens"])}
    return None


def fitted(thinking: Mapping[str, Any] | None, max_tokens: int) -> dict[str, Any] | None:
    """`thinking` for a request of `max_tokens` (a budget may have lowered it): the budget cut below it, or no
    thinking when not even the least budget fits."""
    if thinking is None or thinking.get("type") != "enabled":
        return dict(thinking) if thinking is not None else None
    budget = min(int(thinking["budget_tokens"]), max_tokens - 1)
    return {**thinking, "budget_tokens": budget} if budget >= MIN_BUDGET_TOKENS else None


__all__ = ["ADAPTIVE", "MIN_BUDGET_TOKENS", "THINKING_KEYWORD", "fitted", "thinking_param", "thinking_problems",
           "tool_thinking_problems"]

"""Model per tool (docs/rate-limits.md): a tool's `x-model` sends its latent calls and its module's ticks to that model
(pure).

A job names its tools inline or by name (`tools`); a tool's `x-model` must be a model the price table knows, so
that what its requests cost is accounted per model (`usage.by_model`) and held to the job's budget. A job with an
unknown one is rejected at submission, with the pointer of each such tool; nothing is written.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from agentq.errors import Problem
from agentq.protocol.listed_tools import listed_tools

MODEL_KEYWORD = "x-model"

KnownModel = Callable[[str], bool]
"""`known_model(name)`: whether the price table prices `name` (its own entry, its undated name's, or `"*"`)."""


def tool_model(tool: Mapping[str, Any] | None) -> str | None:
    """The model a tool's latent calls and module ticks use (its `x-model`), None for the job's own."""
    model = (tool or {}).get(MODEL_KEYWORD)
    return model if isinstance(model, str) and model else None


def tool_model_problems(raw_tools: Any, available: Mapping[str, Mapping[str, Any]],
                        known_model: KnownModel | None) -> list[Problem]:
    """What is wrong with the `x-model` of the tools a job lists (`raw_tools`: its `tools`, names of `available`
    tools or inline schemas): each one not a non-empty string, or (with `known_model`) not a priced model."""
    problems: list[Problem] = []
    for tool in listed_tools(raw_tools, available):
        if MODEL_KEYWORD in tool.schema and (problem := _model_problem(tool.schema[MODEL_KEYWORD], known_model)):
            problems.append(tool.problem(MODEL_KEYWORD, problem))
    return problems


def _model_problem(model: Any, known_model: KnownModel | None) -> str | None:
    if not isinstance(model, str) or not model.strip():
        return f"{MODEL_KEYWORD} must be a model name, got {model!r}"
    if known_model is not None and not known_model(model):
        return (f"{MODEL_KEYWORD} {model!r} is not a model the price table knows, so the cost of its requests "
                "could not be accounted (name a priced model, or give it a price: agentq config set llm_prices FILE)")
    return None


__all__ = ["MODEL_KEYWORD", "KnownModel", "tool_model", "tool_model_problems"]

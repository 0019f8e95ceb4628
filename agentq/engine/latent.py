"""Latent calls (docs/protocol.md#scopes, docs/protocol.md#what-the-model-is-sent): a tool with no known activity is
answered by the model.

The request holds the call's scoped context, its parameters as an `input` block and the tool's
description, nothing else of the job; its solution schema is the tool's `_output` (an `anyOf` of branches
when the output path has `||` alternatives, so the model picks one). An invalid answer is sent back once;
a second one fails the call. Without an output path the answer is a thought: it goes to the events only.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from jsonschema import Draft202012Validator

from agentq.engine.failures import CallDeferred, CallFailure
from agentq.engine.requests import ModelRequests
from agentq.errors import BudgetExceeded, LLMError, LLMRetryableError, ModelDeferred, ModelStopped, Problem
from agentq.llm.base import LLMAnswer, LLMRequest, Usage
from agentq.protocol.conversation import corrective_turn, solution_turn
from agentq.protocol.digests import now_iso
from agentq.protocol.instructions import job_system_texts, latent_system
from agentq.protocol.latent_prompt import latent_messages, latent_solution_schema
from agentq.protocol.records import CallRecord, JobInfo
from agentq.protocol.thinking import thinking_param
from agentq.protocol.tool_models import tool_model
from agentq.protocol.views import LogIndex
from agentq.protocol.writes import branch_messages, output_alternatives
from agentq.settings import Settings
from agentq.store.contracts import BudgetStore


@dataclass(frozen=True)
class LatentAnswer:
    """What a latent call produced: its value, the messages it writes, and whether it was only a thought."""

    value: Any
    messages: list[dict]
    thought: bool


def ask(store: BudgetStore, model: ModelRequests | None, job: JobInfo, request: LLMRequest, *, purpose: str,
        place: str | None = None) -> LLMAnswer:
    """One model request for a call (`place` names it across the call's attempts), its usage counted on the job;
    provider errors become call failures (a request the budget refused raises `BudgetExceeded`: the caller fails
    the job; one the rate limits defer is a `CallDeferred`)."""
    if model is None:
        raise CallFailure("LLMNotConfigured", f"a {purpose} call needs an LLM: set ANTHROPIC_API_KEY (or "
                          "AGENTQ_LLM) for the dispatcher", retryable=False)
    try:
        answer = model.solve(job, request, place=place)
    except BudgetExceeded:
        raise
    except ModelDeferred as deferred:
        raise CallDeferred(str(deferred), deferred.retry_after_s or 0.0) from None
    except LLMRetryableError as error:
        raise CallFailure(type(error).__name__, str(error), retryable=True, retry_in=error.retry_after_s) from None
    except LLMError as error:  # a refusal, a full context window, an unknown stop reason: asking again won't help
        if isinstance(error, ModelStopped) and isinstance(error.usage, Usage):
            store.add_usage(job.id, error.usage.counters(request.model))
        raise CallFailure(type(error).__name__, str(error), retryable=False) from None
    store.add_usage(job.id, answer.usage.counters(request.model))
    return answer


def answer_problems(answer: LLMAnswer, schema: dict) -> list[Problem]:
    """What is wrong with a latent call's answer: no solution tool called (thinking on), an answer cut at
    max_tokens, or a solution that does not match its schema."""
    if not answer.tool_use_id:
        return [Problem("", "you answered without calling the `solution` tool: answer by calling it exactly once")]
    if answer.truncated:
        return [Problem("", "your answer was cut off at the output token limit (max_tokens): answer again, "
                            "shorter")]
    return schema_problems(answer.solution, schema)


def schema_problems(value: Any, schema: dict) -> list[Problem]:
    if value is None:
        return [Problem("", "the answer is not valid JSON")]
    errors = sorted(Draft202012Validator(schema).iter_errors(value), key=lambda e: list(e.absolute_path))
    return [Problem("".join(f"/{p}" for p in e.absolute_path), e.message) for e in errors]


def _valid_answer(store: BudgetStore, model: ModelRequests | None, job: JobInfo, request: LLMRequest, *,
                  place: str) -> LLMAnswer:
    """The model's answer to a latent call's request, valid against its solution schema: an invalid one is sent
    back once, with the problems and their pointers (and the answer's thinking, unchanged); a second fails the
    call."""
    schema, again = request.solution_schema, f"{place}/again"
    if model is not None and model.waits_in_batch(job, again):
        # the call's task came back for the answer asked again on the batch lane: the first one was taken (and
        # paid) when it was found invalid, so it is not asked again (the request is only priced and recorded)
        answer = ask(store, model, job, request, purpose="latent", place=again)
    else:
        answer = ask(store, model, job, request, purpose="latent", place=place)
        problems = answer_problems(answer, schema)
        if not problems:
            return answer
        said = solution_turn(answer.tool_use_id, answer.solution, blocks=answer.blocks, text=answer.text)
        retry = replace(request, messages=(*request.messages, said, corrective_turn(answer.tool_use_id, problems)))
        answer = ask(store, model, job, retry, purpose="latent", place=again)
    problems = answer_problems(answer, schema)
    if problems:
        kind = "ModelOutputTruncated" if answer.truncated else "InvalidSolution"
        raise CallFailure(kind, "the model's answer is invalid twice: " + "; ".join(
            f"{p.pointer or '/'}: {p.message}" for p in problems), retryable=False)
    return answer


def run_latent(store: BudgetStore, model: ModelRequests | None, settings: Settings, *, job: JobInfo, call_id: str,
               record: CallRecord, call: dict, tool: dict, index: LogIndex) -> LatentAnswer:
    """Answer a latent call of `job` with the model (`call` is resolved: its references replaced by values)."""
    schema = latent_solution_schema(tool, call)
    request = LLMRequest(
        model=tool_model(tool) or job.job_options.model or settings.model,
        system=latent_system(job_system_texts(index)),
        messages=latent_messages(index, call, tool, scopes=record.scopes), solution_schema=schema,
        max_tokens=settings.llm_max_tokens, purpose="latent", cache_ttl=job.job_options.cache_ttl,
        thinking=thinking_param(tool.get("x-thinking")))
    output = _valid_answer(store, model, job, request, place=f"{job.id}/{call_id}").solution["output"]
    alternatives = output_alternatives(call)
    date = now_iso()
    if not alternatives:
        return LatentAnswer(output, [], thought=True)
    if len(alternatives) > 1:
        value = output["value"]
        return LatentAnswer(value, branch_messages(call, output["path"], value, call_id=call_id, date=date),
                            thought=False)
    first = " && ".join(str(ref) for ref in alternatives[0])
    return LatentAnswer(output, branch_messages(call, first, output, call_id=call_id, date=date), thought=False)

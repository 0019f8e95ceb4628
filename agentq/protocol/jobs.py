"""Job planning: validate a submitted job as a whole and turn it into call records (pure).

`plan_job` either returns a `JobPlan` ready to be written in one atomic step, or raises one
`JobValidationError` naming every problem with its JSON pointer. Nothing here performs I/O: the caller
passes the tools it knows and the activities that are live. The plan's records are in `plans.py`, the
planning of each call and their links in `call_plans.py`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from agentq.errors import InvalidInputError, JobValidationError, Problem, ProtocolError
from agentq.protocol.budgets import DEFAULT_CACHE_TTL, budget_problems, cache_ttl_problem
from agentq.protocol.call_keys import call_key_problems
from agentq.protocol.call_plans import link_dependencies, plan_calls, planned_calls
from agentq.protocol.compose import compose, composed_tools
from agentq.protocol.concurrency import concurrency_problems
from agentq.protocol.context import context_problems
from agentq.protocol.ids import new_id
from agentq.protocol.job_times import start_problems, start_timeout_problems
from agentq.protocol.job_tools import JobTools, keep_tools, planned_tools, tools_key
from agentq.protocol.messages import message_problems, normalize_message
from agentq.protocol.plans import JobLimits, JobPlan, PlannedCall, Problems, hold_for_approval, needs_approval
from agentq.protocol.priority import priority_problem
from agentq.protocol.records import JobKind
from agentq.protocol.thinking import thinking_problems, tool_thinking_problems
from agentq.protocol.tool_models import tool_model_problems
from agentq.protocol.tool_schema import check_draft
from agentq.protocol.tools import ToolRegistry
from agentq.protocol.waits import WAIT_TOOLS

__all__ = ["JOB_FIELDS", "LOCALES", "JobLimits", "JobPlan", "PlannedCall", "needs_approval", "plan_calls", "plan_job"]

JOB_FIELDS = frozenset({"context", "tools", "output", "calls", "options"})
LOCALES = ("en", "fr")

ModuleLoader = Callable[[str], Mapping[str, Any]]
_LIMITS = JobLimits()


def plan_job(
    job: Any,
    *,
    tools: Mapping[str, dict],
    live_activities: Mapping[str, Mapping[str, Any]] = {},
    limits: JobLimits = _LIMITS,
    size: int | None = None,
    job_id: str | None = None,
    module_loader: ModuleLoader | None = None,
) -> JobPlan:
    """Validate `job` (docs/protocol.md#jobs) and plan its calls; raise `JobValidationError` listing every problem.

    `tools` are the schemas a job may name; the names of `live_activities` (the known activities,
    docs/protocol.md#activities) resolve `_activity` at composition. Where calls run (task, queue) is the runtime's to
    decide.
    `module_loader` resolves tools with `"x-module-resolution": "upfront"` (docs/protocol.md#modules); a module it
    cannot load is a problem of the job.
    """
    problems = Problems()
    if not isinstance(job, dict):
        raise JobValidationError("job must be a JSON object", [Problem("", f"got {type(job).__name__}")])
    _check_fields(job, size, limits, problems)
    context = _plan_context(job.get("context", []), problems)
    listed = job["tools"] if job.get("tools") is not None else _default_tools(job.get("calls"), tools)
    is_plan = "calls" in job
    key = tools_key(listed, tools, job.get("output"), is_plan=is_plan, live_activities=live_activities,
                    resolves_modules=module_loader is not None)
    kept = planned_tools(key)  # the same tools planned without a problem before
    job_tools = _plan_tools(listed, tools, problems, kept)
    problems.items.extend(tool_model_problems(listed, tools, limits.known_model))
    problems.items.extend(tool_thinking_problems(listed, tools, limits.max_output_tokens))
    problems.items.extend(start_timeout_problems(listed, tools))
    output = _plan_output(job.get("output"), problems)
    options = _plan_options(job.get("options", {}), limits, problems)
    raw_calls = _raw_calls(job.get("calls"), limits, problems)

    # Keep going after problems so the one error names all of them; the dependency analysis needs every
    # call planned, so it runs only when the calls themselves are sound.
    kept = kept or _composed(job_tools, tuple(live_activities), output, is_plan, module_loader, problems)
    composed = dict(kept.composed)
    raw_calls = raw_calls or []
    calls = planned_calls(raw_calls, composed, tools, problems, validators=kept.validators)
    if _all_planned(calls, raw_calls, context, job.get("context", [])):
        # every call and message could be planned (a call may still have schema problems): cycles and
        # unsatisfiable references are reported in the same error
        link_dependencies(calls, context, problems)
        problems.items.extend(call_key_problems(calls, composed, context))
    if problems.items:
        raise JobValidationError("job rejected", problems.items)
    kept = keep_tools(key, kept)
    for call in calls:
        call.locale = options["locale"]
        hold_for_approval(call, composed[call.tool], options)

    return JobPlan(
        id=job_id or new_id("job"),
        kind=JobKind.PLAN if is_plan else JobKind.AGENT,
        context=context,
        tools=composed,
        solution=kept.solution,
        output=output,
        options=options,
        calls=calls,
        registered=job_tools.snapshot(),
    )


def _all_planned(calls: list[PlannedCall], raw_calls: list, context: list[dict], raw_context: Any) -> bool:
    """Whether every call and every context message of the job could be planned."""
    return len(calls) == len(raw_calls) and isinstance(raw_context, list) and len(context) == len(raw_context)


def _check_fields(job: dict, size: int | None, limits: JobLimits, problems: Problems) -> None:
    """The job's size and its top-level fields."""
    if size is not None and size > limits.max_job_bytes:
        problems.add("", f"job is {size} bytes; the limit is {limits.max_job_bytes} (AGENTQ_MAX_JOB_BYTES)")
    for key in sorted(set(job) - JOB_FIELDS):
        problems.add(f"/{key}", f"unknown field; a job has {', '.join(sorted(JOB_FIELDS))}")


def _raw_calls(raw_calls: Any, limits: JobLimits, problems: Problems) -> list | None:
    """The job's calls when they are an array within the limit (an empty list beyond it), else None."""
    if raw_calls is not None and not isinstance(raw_calls, list):
        problems.add("/calls", "calls must be an array of Calls")
        return None
    if raw_calls is not None and len(raw_calls) > limits.max_calls:
        problems.add("/calls", f"{len(raw_calls)} calls; the limit is {limits.max_calls} (AGENTQ_MAX_CALLS)")
        return []
    return raw_calls


def _solution(job_tools: ToolRegistry, live: tuple[str, ...], output: dict | None, is_plan: bool,
              module_loader: ModuleLoader | None, problems: Problems) -> dict:
    """The job's solution schema; an upfront module that cannot be loaded is a problem, and the tools are
    then composed without modules."""
    try:
        return compose(job_tools, live, output, plan=is_plan, module_loader=module_loader)
    except InvalidInputError as error:
        problems.extend_from(error, "/tools")
        return compose(job_tools, live, output, plan=is_plan)


def _plan_context(raw: Any, problems: Problems) -> list[dict]:
    if not isinstance(raw, list):
        problems.add("/context", "context must be an array of messages")
        return []
    context = []
    for i, message in enumerate(raw):
        found = message_problems(message, f"/context/{i}")
        if found:
            problems.items.extend(found)
        else:
            context.append(normalize_message(message, f"/context/{i}"))
    return context


def _composed(job_tools: ToolRegistry, live: tuple[str, ...], output: dict | None, is_plan: bool,
              module_loader: ModuleLoader | None, problems: Problems) -> JobTools:
    """The job's tools composed into its solution schema (`_solution`)."""
    solution = _solution(job_tools, live, output, is_plan, module_loader, problems)
    return JobTools(job_tools, solution, {t["properties"]["_tool"]["const"]: t for t in composed_tools(solution)})


def _plan_tools(raw: Any, available: Mapping[str, dict], problems: Problems, kept: JobTools | None) -> ToolRegistry:
    """The job's tools (`raw`: its `tools`, else those `_default_tools` gives it): names of known tools and inline
    schemas (validated like a registration); those of `kept`, the same tools planned before, if any."""
    if kept is not None:
        return kept.registry
    registry = ToolRegistry()
    if not isinstance(raw, list):
        problems.add("/tools", "tools must be an array of tool names or tool schemas")
        return registry
    for i, item in enumerate(raw):
        pointer = f"/tools/{i}"
        entry = _tool_entry(item, pointer, available, problems)
        if entry is None:
            continue
        name, schema = entry
        if name in registry:
            problems.add(pointer, f"tool {name!r} is listed twice")
            continue
        try:
            registry.register(name, schema)
        except ProtocolError as error:
            problems.add(pointer, str(error))
    return registry


def _default_tools(raw_calls: Any, available: Mapping[str, dict]) -> list[str]:
    """A job without ``tools``: the known tools its calls name (a plan job), else every known tool."""
    named = {c.get("_tool") for c in raw_calls if isinstance(c, dict)} if isinstance(raw_calls, list) else None
    if named is None:  # an agent job: every known tool but the wait tools, which a job lists to have them
        named = {n for n in available if n not in WAIT_TOOLS}
    return sorted(n for n in named if isinstance(n, str) and n in available)


def _tool_entry(item: Any, pointer: str, available: Mapping[str, dict],
                problems: Problems) -> tuple[str, Mapping[str, Any]] | None:
    """(name, schema) of one entry of ``tools``: a known tool's name or an inline schema; None (a problem)
    otherwise."""
    if isinstance(item, str):
        if item not in available:
            problems.add(pointer, f"unknown tool {item!r}; known tools: {', '.join(sorted(available)) or 'none'}")
            return None
        return item, available[item]
    if isinstance(item, dict):
        props = item.get("properties")
        const = (props or {}).get("_tool", {}).get("const") if isinstance(props, dict) else None
        if not isinstance(const, str):
            problems.add(f"{pointer}/properties/_tool", "an inline tool needs properties._tool.const")
            return None
        return const, item
    problems.add(pointer, "expected a tool name or a tool schema")
    return None


def _plan_output(raw: Any, problems: Problems) -> dict | None:
    if raw is None:
        return None
    from jsonschema.exceptions import SchemaError

    if not isinstance(raw, dict):
        problems.add("/output", "output must be a JSON Schema object")
        return None
    try:
        check_draft(raw)  # remembered: most jobs name the output schema of the job before
    except SchemaError as error:
        where = "/".join(str(p) for p in error.absolute_path)
        problems.add(f"/output/{where}".rstrip("/"), f"not a valid JSON Schema: {error.message}")
        return None
    return raw


def _plan_options(raw: Any, limits: JobLimits, problems: Problems) -> dict:
    options: dict[str, Any] = {"max_ticks": 8, "approval": [], "ttl_s": limits.default_ttl_s, "locale": "en",
                               "model": None, "cache_ttl": DEFAULT_CACHE_TTL,
                               "budget": dict(limits.default_budget) if limits.default_budget is not None else None}
    if not isinstance(raw, dict):
        problems.add("/options", "options must be an object")
        return options
    timed = start_problems(raw)
    problems.items.extend(timed)
    for key, value in raw.items():
        found = (_webhook_problems(value, limits) if key == "webhook" else concurrency_problems(value)
                 if key == "concurrency" else _option_problems(key, value))
        if found:
            problems.items.extend(found)
        elif not (key in _TIMES and timed):
            options[key] = value
    model = options["model"] if isinstance(options.get("model"), str) else limits.model
    problems.items.extend(thinking_problems(options.get("thinking"), "/options/thinking",
                                            max_tokens=limits.max_output_tokens, model=model))
    return options


def option_checks(raw: dict, limits: JobLimits) -> list[Problem]:
    """What is wrong with `raw` options, checked as a submission's are (each problem with its pointer); [] when
    they are valid (a resume's overrides, docs/resume.md)."""
    problems = Problems()
    _plan_options(raw, limits, problems)
    return list(problems.items)


_OPTION_CHECKS: dict[str, tuple[Any, str]] = {
    "max_ticks": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1, "an integer >= 1"),
    "model": (lambda v: v is None or (isinstance(v, str) and v.strip() != ""),
              "a model name (null or left out: the default model)"),
    "approval": (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "an array of tool names"),
    "ttl_s": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0, "a positive number of seconds"),
    "locale": (lambda v: v in LOCALES, f"one of {', '.join(LOCALES)}"),
    "deadline_s": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < math.inf,
                   "a positive number of seconds"),
}
#: options agentq does not take, and what to do instead
_NOT_OPTIONS = {
    "stream_markers": "not a job option: the legacy __STREAM_ACTIVITY__ markers are chosen by whoever reads the "
                      "events, per request (GET /v1/jobs/{id}/events?format=parts&markers=false)",
}
_TIMES = ("start_at", "delay_s")  # when the job starts (`protocol/job_times.py`)
_OPTIONS = sorted([*_OPTION_CHECKS, *_TIMES, "budget", "cache_ttl", "concurrency", "context", "priority", "thinking",
                   "webhook"])


def _webhook_problems(value: Any, limits: JobLimits) -> list[Problem]:
    """`options.webhook` (docs/webhooks.md), checked by the runtime's allowlist (`agentq/webhooks/targets.py`)."""
    if limits.webhook_problems is None:
        return [Problem("/options/webhook", "webhooks are not enabled here (the webhook allowlist is empty)")]
    return limits.webhook_problems(value, "/options/webhook")


# one option, each checked its own way: a branch per option that needs more than `_OPTION_CHECKS`
def _option_problems(key: str, value: Any) -> list[Problem]:
    """What is wrong with one option (each problem with its pointer); [] when it is valid."""
    pointer = f"/options/{key}"
    if key == "budget":
        return budget_problems(value, pointer)
    if key == "cache_ttl":
        problem = cache_ttl_problem(value, pointer)
        return [problem] if problem is not None else []
    if key == "context":
        return context_problems(value, pointer)
    if key == "thinking":
        return []  # checked with the job's model and max_tokens (`_plan_options`)
    if key in _TIMES:
        return []  # checked together (`start_problems`)
    if key == "priority":
        found = priority_problem(value, pointer)
        return [found] if found is not None else []
    if key in _NOT_OPTIONS:
        return [Problem(pointer, f"{_NOT_OPTIONS[key]}; options are {', '.join(_OPTIONS)}")]
    if key not in _OPTION_CHECKS:
        return [Problem(pointer, f"unknown option; options are {', '.join(_OPTIONS)}")]
    check, expected = _OPTION_CHECKS[key]
    return [] if check(value) else [Problem(pointer, f"expected {expected}, got {value!r}")]

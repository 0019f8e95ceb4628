"""Planning calls: each call checked against its composed tool (meta fields, references, parameters,
scopes) and given its mode, then the calls of a job linked by what they read and write (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentq.errors import InvalidInputError, Problem, ProtocolError
from agentq.protocol.dependencies import build_graph, find_cycle, index_writers, node_for, unsatisfiable_reads
from agentq.protocol.expressions import is_reference, parse_expression
from agentq.protocol.ids import new_id
from agentq.protocol.job_times import start_timeout
from agentq.protocol.plans import PlannedCall, Problems
from agentq.protocol.records import CallMode
from agentq.protocol.scopes import effective_scopes
from agentq.protocol.tools import unknown_name
from agentq.protocol.validation import ToolValidator, tool_call_errors, validator_for
from agentq.protocol.values import METHODS
from agentq.protocol.views import LogIndex
from agentq.protocol.waits import WAIT_ACTIVITY, wait_problems

__all__ = ["link_dependencies", "plan_calls", "planned_calls"]


def plan_calls(raw_calls: list, composed: dict[str, dict], available: Mapping[str, dict], problems: list[Problem],
               *, offset: int = 0, validators: dict[str, ToolValidator] | None = None) -> list[PlannedCall]:
    """Plan calls without linking their dependencies: `raw_calls[i]` is `/calls/<offset + i>` (an agent tick
    plans the calls of a streamed solution one by one, with the `validators` it keeps for its tools). Problems are
    appended to `problems`."""
    collected = Problems()
    planned = planned_calls(raw_calls, composed, available, collected,
                            validators={} if validators is None else validators, offset=offset)
    problems.extend(collected.items)
    return planned


def planned_calls(raw_calls: list, composed: dict[str, dict], available: Mapping[str, dict],
                  problems: Problems, *, validators: dict[str, ToolValidator], offset: int = 0) -> list[PlannedCall]:
    """The calls of `raw_calls` that can be planned; the problems of every call go to `problems`. `validators`:
    the composed tools' validators by name, each compiled by the first call that needs it (one per tool: a job's
    calls are validated against few; kept with the job's tools, `job_tools.JobTools`, by `plan_job`)."""
    planned = []
    for i, call in enumerate(raw_calls, start=offset):
        pointer = f"/calls/{i}"
        if not isinstance(call, dict):
            problems.add(pointer, "a Call must be an object")
            continue
        name = call.get("_tool")
        if name not in composed:
            problems.add(f"{pointer}/_tool", _unknown_tool_message(name, composed, available))
            continue
        tool = composed[name]
        found = _meta_problems(call, pointer)
        reference_pointers = _reference_pointers(call, "", found, pointer)
        found += wait_problems(call, tool, pointer)
        problems.items.extend(found)
        validator = validators.get(name)
        if validator is None:
            validator = validators[name] = validator_for(tool)
        schema_problems = tool_call_errors(call, tool, validator, skip_pointers=reference_pointers,
                                           pointer_prefix=pointer)
        try:
            scopes = effective_scopes(call, tool)
        except InvalidInputError as error:
            # the scope check reports what the tool's `_scopes` schema does, naming the tool: say it once
            schema_problems = [p for p in schema_problems if not p.pointer.startswith(f"{pointer}/_scopes")]
            problems.items.extend(schema_problems)
            problems.extend_from(error, pointer)
            scopes = []
        else:
            problems.items.extend(schema_problems)
        if found:
            continue
        planned.append(_planned_call(i, call, tool, scopes))
    return planned



def _unknown_tool_message(name: object, composed: Mapping[str, dict], available: Mapping[str, dict]) -> str:
    """Why a call's tool is not one of the job's, naming what is really there."""
    if isinstance(name, str) and name in available:
        return f"tool {name!r} is known but not in this job's tools ({', '.join(sorted(composed)) or 'none'})"
    return str(unknown_name("tool", name, {*available, *composed}))


def _planned_call(index: int, call: dict, tool: dict, scopes: list[str]) -> PlannedCall:
    name = tool["properties"]["_tool"]["const"]
    activity = tool["properties"]["_activity"]["const"]
    call = {**call, "_activity": activity}
    if "const" in (tool["properties"].get("_module") or {}):
        mode = CallMode.MODULE
    elif activity == WAIT_ACTIVITY:
        mode = CallMode.WAIT
    elif activity == "":
        mode = CallMode.LATENT
    else:
        mode = CallMode.EXPLICIT
    has_path = bool(call.get("_outputPath"))
    return PlannedCall(
        id=new_id("call"), index=index, call=call, tool=name, activity=activity, mode=mode,
        awaited=has_path or mode is not CallMode.EXPLICIT, instance=call.get("_instance"), scopes=scopes,
        start_timeout_s=start_timeout(tool),
    )



def _meta_problems(call: dict, pointer: str) -> list[Problem]:
    found = []
    path = call.get("_outputPath")
    if path is not None:
        if not isinstance(path, str):
            found.append(Problem(f"{pointer}/_outputPath", "an output path must be a string like †state.x"))
        else:
            try:
                parse_expression(path)
            except ProtocolError as error:
                found.append(Problem(f"{pointer}/_outputPath", str(error)))
    method = call.get("_outputMethod")
    if method is not None and method not in METHODS:
        found.append(Problem(f"{pointer}/_outputMethod", f"unknown method {method!r}; use one of {', '.join(METHODS)}"))
    instance = call.get("_instance")
    if instance is not None and (not isinstance(instance, str) or not instance):
        found.append(Problem(f"{pointer}/_instance", "an instance must be a non-empty string"))
    return found


def _reference_pointers(value: Any, at: str, found: list[Problem], pointer: str) -> list[str]:
    """Pointers (relative to the call) of parameter values that are references; malformed ones are problems."""
    pointers: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if at == "" and key.startswith("_"):
                continue
            pointers += _reference_pointers(item, f"{at}/{_escape(key)}", found, pointer)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            pointers += _reference_pointers(item, f"{at}/{i}", found, pointer)
    elif isinstance(value, str) and is_reference(value):
        try:
            parse_expression(value)
            pointers.append(at)
        except ProtocolError as error:
            found.append(Problem(pointer + at, str(error)))
    return pointers


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def link_dependencies(calls: list[PlannedCall], context: list[dict], problems: Problems) -> None:
    """Link every call of a job to the calls it waits on (`waiting`, `dependents`, `needs_log`), or report
    a reference cycle or reads nothing can satisfy."""
    nodes = [node_for(c.id, c.call) for c in calls]
    by_id = {c.id: c for c in calls}
    writers = index_writers(nodes)
    graph = build_graph(nodes, writers)
    cycle = find_cycle(graph)
    if cycle:
        names = " → ".join(f"/calls/{by_id[i].index} ({by_id[i].tool})" for i in cycle)
        problems.add(f"/calls/{by_id[cycle[0]].index}", f"reference cycle: {names} wait on each other's output paths")
        return
    index = LogIndex(context)
    # Every call was planned (see plan_job), so node positions are the calls' indexes.
    problems.items.extend(unsatisfiable_reads(index, nodes, writers))
    for node in nodes:
        call = by_id[node.id]
        call.waiting = len(graph.get(node.id, ()))
        call.needs_log = bool(node.reads) or bool(call.scopes) or call.mode is not CallMode.EXPLICIT
        for dependency in graph.get(node.id, ()):
            by_id[dependency].dependents.append(node.id)
    for call in calls:
        call.dependents.sort(key=lambda i: by_id[i].index)

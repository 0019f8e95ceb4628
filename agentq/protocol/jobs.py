"""Job planning: validate a submitted job as a whole and turn it into call records (pure).

`plan_job` either returns a `JobPlan` ready to be written in one atomic step, or raises one
`JobValidationError` naming every problem with its JSON pointer. Nothing here performs I/O: the caller
passes the tools it knows and the activities that are live.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentq.errors import InvalidInputError, JobValidationError, Problem, ProtocolError
from agentq.protocol.compose import compose, composed_tools
from agentq.protocol.dependencies import build_graph, find_cycle, index_writers, node_for, unsatisfiable_reads
from agentq.protocol.expressions import is_reference, parse_expression
from agentq.protocol.ids import new_id
from agentq.protocol.messages import message_problems, normalize_message
from agentq.protocol.records import CallMode, CallRecord, JobKind
from agentq.protocol.scopes import effective_scopes
from agentq.protocol.tools import ToolRegistry, unknown_name
from agentq.protocol.validation import tool_call_errors, validator_for
from agentq.protocol.values import METHODS
from agentq.protocol.views import LogIndex

JOB_FIELDS = frozenset({"context", "tools", "output", "calls", "options"})
LOCALES = ("en", "fr")


@dataclass(frozen=True)
class JobLimits:
    max_job_bytes: int = 1_000_000
    max_calls: int = 10_000
    default_ttl_s: int = 7 * 24 * 3600


@dataclass
class PlannedCall:
    """One Call of a job while it is planned; `record()` is what the store keeps of it, beside `dependents`
    (the calls waiting on it) and `waiting` (how many unfinished calls it waits on)."""

    id: str
    index: int
    call: dict
    tool: str
    activity: str
    mode: CallMode
    awaited: bool
    instance: str | None
    scopes: list[str]
    dependents: list[str] = field(default_factory=list)
    waiting: int = 0  # unfinished calls it waits on
    needs_log: bool = False
    locale: str = "en"  # the job's locale, for the display info of this call's event parts
    approval: bool = False  # held in `awaiting_approval` once ready, until a reviewer decides (SPEC §9)
    depends_on: list[str] = field(default_factory=list)  # agent ticks: the calls of the solution it waits on

    def record(self) -> CallRecord:
        return CallRecord(
            id=self.id, index=self.index, call=self.call, tool=self.tool, activity=self.activity, mode=self.mode,
            awaited=self.awaited, instance=self.instance, scopes=tuple(self.scopes), needs_log=self.needs_log,
            locale=self.locale,
        )


@dataclass
class JobPlan:
    id: str
    kind: JobKind
    context: list[dict]
    tools: dict[str, dict]  # composed tool schemas of this job, by name
    solution: dict
    output: dict | None
    options: dict
    calls: list[PlannedCall]
    registered: dict[str, dict] = field(default_factory=dict)  # the job's tools as registered (an agent job
    # composes them again at each tick, against the activities known then)

    @property
    def ready(self) -> list[PlannedCall]:
        """Calls that may start at once (not those held for approval)."""
        return [c for c in self.calls if c.waiting == 0 and not c.approval]

    @property
    def ttl_s(self) -> int:
        return int(self.options["ttl_s"])


class _Problems:
    """Collects problems so a job is rejected once, with all of them."""

    def __init__(self) -> None:
        self.items: list[Problem] = []

    def add(self, pointer: str, message: str) -> None:
        self.items.append(Problem(pointer, message))

    def extend_from(self, error: Exception, pointer: str) -> None:
        if isinstance(error, InvalidInputError) and error.problems:
            for p in error.problems:
                self.items.append(Problem(pointer + p.pointer if not p.pointer.startswith(pointer) else p.pointer,
                                          p.message))
        else:
            self.add(pointer, str(error))


def plan_job(
    job: Any,
    *,
    tools: Mapping[str, dict],
    live_activities: Mapping[str, Mapping[str, Any]] = {},
    limits: JobLimits = JobLimits(),
    size: int | None = None,
    job_id: str | None = None,
    module_loader: Callable[[str], Mapping[str, Any]] | None = None,
) -> JobPlan:
    """Validate `job` (SPEC §9) and plan its calls; raise `JobValidationError` listing every problem.

    `tools` are the schemas a job may name; the names of `live_activities` (the known activities, SPEC §3)
    resolve `_activity` at composition. Where calls run (task, queue) is the runtime's to decide.
    `module_loader` resolves tools with `"x-module-resolution": "upfront"` (SPEC §8); a module it cannot load
    is a problem of the job.
    """
    problems = _Problems()
    if not isinstance(job, dict):
        raise JobValidationError("job must be a JSON object", [Problem("", f"got {type(job).__name__}")])
    if size is not None and size > limits.max_job_bytes:
        problems.add("", f"job is {size} bytes; the limit is {limits.max_job_bytes} (AGENTQ_MAX_JOB_BYTES)")
    for key in sorted(set(job) - JOB_FIELDS):
        problems.add(f"/{key}", f"unknown field; a job has {', '.join(sorted(JOB_FIELDS))}")

    context = _plan_context(job.get("context", []), problems)
    job_tools = _plan_tools(job.get("tools"), job.get("calls"), tools, problems)
    output = _plan_output(job.get("output"), problems)
    options = _plan_options(job.get("options", {}), limits, problems)
    raw_calls = job.get("calls")
    if raw_calls is not None and not isinstance(raw_calls, list):
        problems.add("/calls", "calls must be an array of Calls")
        raw_calls = None
    if raw_calls is not None and len(raw_calls) > limits.max_calls:
        problems.add("/calls", f"{len(raw_calls)} calls; the limit is {limits.max_calls} (AGENTQ_MAX_CALLS)")
        raw_calls = []

    # Keep going after problems so the one error names all of them; the dependency analysis needs every
    # call planned, so it runs only when the calls themselves are sound.
    is_plan = "calls" in job
    try:
        solution = compose(job_tools, tuple(live_activities), output, plan=is_plan, module_loader=module_loader)
    except InvalidInputError as error:  # an upfront module that cannot be loaded
        problems.extend_from(error, "/tools")
        solution = compose(job_tools, tuple(live_activities), output, plan=is_plan)
    composed = {t["properties"]["_tool"]["const"]: t for t in composed_tools(solution)}
    calls = _plan_calls(raw_calls or [], composed, tools, problems)
    raw_context = job.get("context", [])
    if len(calls) == len(raw_calls or []) and isinstance(raw_context, list) and len(context) == len(raw_context):
        # every call and message could be planned (a call may still have schema problems): cycles and
        # unsatisfiable references are reported in the same error
        _link_dependencies(calls, context, problems)
    if problems.items:
        raise JobValidationError("job rejected", problems.items)
    for call in calls:
        call.locale = options["locale"]
        call.approval = needs_approval(call.tool, composed[call.tool], options)

    return JobPlan(
        id=job_id or new_id("job"),
        kind=JobKind.PLAN if is_plan else JobKind.AGENT,
        context=context,
        tools=composed,
        solution=solution,
        output=output,
        options=options,
        calls=calls,
        registered=job_tools.snapshot(),
    )


def _plan_context(raw: Any, problems: _Problems) -> list[dict]:
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


def _plan_tools(raw: Any, raw_calls: Any, available: Mapping[str, dict], problems: _Problems) -> ToolRegistry:
    """The job's tools: names of known tools and inline schemas (validated like a registration)."""
    registry = ToolRegistry()
    if raw is None:
        named = {c.get("_tool") for c in raw_calls if isinstance(c, dict)} if isinstance(raw_calls, list) else None
        raw = sorted(n for n in (named if named is not None else available) if isinstance(n, str) and n in available)
    if not isinstance(raw, list):
        problems.add("/tools", "tools must be an array of tool names or tool schemas")
        return registry
    for i, item in enumerate(raw):
        pointer = f"/tools/{i}"
        if isinstance(item, str):
            if item not in available:
                problems.add(pointer, f"unknown tool {item!r}; known tools: {', '.join(sorted(available)) or 'none'}")
                continue
            name, schema = item, available[item]
        elif isinstance(item, dict):
            const = (item.get("properties") or {}).get("_tool", {}).get("const") if isinstance(
                item.get("properties"), dict) else None
            if not isinstance(const, str):
                problems.add(f"{pointer}/properties/_tool", "an inline tool needs properties._tool.const")
                continue
            name, schema = const, item
        else:
            problems.add(pointer, "expected a tool name or a tool schema")
            continue
        if name in registry:
            problems.add(pointer, f"tool {name!r} is listed twice")
            continue
        try:
            registry.register(name, schema)
        except ProtocolError as error:
            problems.add(pointer, str(error))
    return registry


def _plan_output(raw: Any, problems: _Problems) -> dict | None:
    if raw is None:
        return None
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    if not isinstance(raw, dict):
        problems.add("/output", "output must be a JSON Schema object")
        return None
    try:
        Draft202012Validator.check_schema(raw)
    except SchemaError as error:
        where = "/".join(str(p) for p in error.absolute_path)
        problems.add(f"/output/{where}".rstrip("/"), f"not a valid JSON Schema: {error.message}")
        return None
    return raw


def _plan_options(raw: Any, limits: JobLimits, problems: _Problems) -> dict:
    options: dict[str, Any] = {"max_ticks": 8, "approval": [], "ttl_s": limits.default_ttl_s, "locale": "en",
                               "model": None, "stream_markers": True}
    if not isinstance(raw, dict):
        problems.add("/options", "options must be an object")
        return options
    checks = {
        "max_ticks": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1,
        "model": lambda v: v is None or isinstance(v, str),
        "approval": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
        "ttl_s": lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0,
        "locale": lambda v: v in LOCALES,
        "stream_markers": lambda v: isinstance(v, bool),
    }
    expected = {
        "max_ticks": "an integer >= 1", "model": "a model name", "approval": "an array of tool names",
        "ttl_s": "a positive number of seconds", "locale": f"one of {', '.join(LOCALES)}",
        "stream_markers": "true or false",
    }
    for key, value in raw.items():
        if key not in checks:
            problems.add(f"/options/{key}", f"unknown option; options are {', '.join(sorted(checks))}")
        elif not checks[key](value):
            problems.add(f"/options/{key}", f"expected {expected[key]}, got {value!r}")
        else:
            options[key] = value
    return options


def needs_approval(tool_name: str, tool: Mapping[str, Any], options: Mapping[str, Any]) -> bool:
    """Calls of tools listed in `options.approval`, or marked `"x-approval": "required"`, wait for a reviewer."""
    return tool_name in (options.get("approval") or ()) or tool.get("x-approval") == "required"


def plan_calls(raw_calls: list, composed: dict[str, dict], available: Mapping[str, dict], problems: list[Problem],
               *, offset: int = 0) -> list[PlannedCall]:
    """Plan calls without linking their dependencies: `raw_calls[i]` is `/calls/<offset + i>` (an agent tick
    plans the calls of a streamed solution one by one). Problems are appended to `problems`."""
    collected = _Problems()
    planned = _plan_calls(raw_calls, composed, available, collected, offset=offset)
    problems.extend(collected.items)
    return planned


def _plan_calls(raw_calls: list, composed: dict[str, dict], available: Mapping[str, dict],
                problems: _Problems, *, offset: int = 0) -> list[PlannedCall]:
    planned = []
    validators: dict[str, Any] = {}  # one per tool: a job's calls are validated against few tools
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
    elif activity == "":
        mode = CallMode.LATENT
    else:
        mode = CallMode.EXPLICIT
    has_path = bool(call.get("_outputPath"))
    return PlannedCall(
        id=new_id("call"), index=index, call=call, tool=name, activity=activity, mode=mode,
        awaited=has_path or mode is not CallMode.EXPLICIT, instance=call.get("_instance"), scopes=scopes,
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


def _link_dependencies(calls: list[PlannedCall], context: list[dict], problems: _Problems) -> None:
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

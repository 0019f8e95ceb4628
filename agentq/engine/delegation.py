"""Module calls (docs/protocol.md#modules): a call delegated to a clean-room child job, and its result brought back.

`start` runs in the call's task: it loads the saved module, assembles the child's context (the module's own
context, the parent's messages selected by `_imports` and `_scopes` as they are now, then an `input` message
with the call's parameters), submits the child as an agent job linked to the call, and keeps the call's
lease for as long as the parent job lives. No task waits: when the child job ends (or is canceled),
`resume_parent` (run by the job-progress step of whoever ended it) commits the parent's call with the child's
output, or its failure, and the parent goes on.
The child's events are relayed to the parent's stream with the module's name as their `source`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Protocol

from agentq.engine.commits import Shown, commit_failure
from agentq.engine.failures import CallFailure
from agentq.engine.modules import ModuleLibrary, SavedModule
from agentq.errors import AgentQError, JobValidationError, ModuleUnavailable
from agentq.protocol.digests import now_iso
from agentq.protocol.envelopes import CallFinished, Part, Thought
from agentq.protocol.events import skill_loading_part, technical_details, thought_part, tool_result_part
from agentq.protocol.latent_prompt import call_parameters
from agentq.protocol.records import CallRecord, ErrorInfo, JobInfo, JobRecord, ParentLink
from agentq.protocol.scopes import effective_imports
from agentq.protocol.sensitive import mask, redactor_for, sensitive_paths
from agentq.protocol.status import CallStatus, JobStatus
from agentq.protocol.tool_models import tool_model
from agentq.protocol.usage import record_counters
from agentq.protocol.values import MISSING
from agentq.protocol.views import LogIndex
from agentq.protocol.writes import branch_messages, output_alternatives
from agentq.settings import Settings
from agentq.store.contracts import BudgetStore, CallStore, EventStore, JobReader, JobStore, LeaseStore
from agentq.store.replies import Commit


class DelegationStore(CallStore, EventStore, BudgetStore, LeaseStore, JobStore, JobReader, Protocol):
    """What a module call's delegation and its parent's resumption use."""

log = logging.getLogger("agentq.modules")

class SubmitChild(Protocol):
    """The job service's submission of a module's child job (`JobService.submit_child`)."""

    def __call__(self, job: Any, *, job_id: str, parent: ParentLink, tenant: str) -> str: ...


def child_job_id(call_id: str) -> str:
    """A module call's child job: one per call, the same on every delivery of the call's task."""
    return f"{call_id}.module"


def imported_messages(index: LogIndex, kinds: list[str], instance: str | None) -> list[dict]:
    """The parent's context a module may see: for each imported data kind its current view (instance-aware)
    as one message; `text` and `error` import those messages (system texts excluded)."""
    messages: list[dict] = []
    if "text" in kinds:
        messages += [{"type": "text", "role": m.get("role", "user"), "text": m.get("text", "")}
                     for m in index.text_messages() if m.get("role") != "system"]
    for kind in kinds:
        if kind in ("text", "error"):
            continue
        view = index.view(kind, instance)
        if view is not MISSING:
            messages.append({"type": "data", "kind": kind, "data": view})
    if "error" in kinds:
        messages += [{"type": "error", "data": m["data"]} for m in index.error_messages(instance)]
    return messages


class Delegation:
    """Starts module calls as child jobs and brings their results back."""

    def __init__(self, store: DelegationStore, settings: Settings, *, library: ModuleLibrary | None,
                 submit_child: SubmitChild | None,
                 source: str = "agentq"):
        self.store = store
        self.settings = settings
        self.library = library
        self.submit_child = submit_child
        self.source = source

    def start(self, job_id: str, call_id: str, token: str, record: CallRecord, call: dict, tool: dict,
              index: LogIndex) -> None:
        """Submit the child job of a module call; raises `CallFailure` when the module cannot run."""
        library = self.library
        if self.submit_child is None or library is None:
            raise CallFailure("ModulesNotConfigured", "this process cannot start module calls", retryable=False)
        parent = self.store.job_info(job_id)
        reference = _module_reference(call, tool)
        depth, chain = _nesting(parent.parent, reference)
        module = self._load(library, reference, depth, chain)
        child = _child_job(module, parent, record, call, tool, index)
        link = ParentLink(job=job_id, call=call_id, token=token, depth=depth, chain=chain, module=reference,
                          root=parent.root_job)
        self.store.hold_lease(job_id, call_id, token=token)
        try:
            self.submit_child(child, job_id=child_job_id(call_id), parent=link, tenant=parent.tenant)
        except JobValidationError as error:
            problems = "; ".join(f"{p.pointer or '/'}: {p.message}" for p in error.problems) or str(error)
            raise CallFailure("InvalidModule", f"module {reference!r} cannot run: {problems}",
                              retryable=False) from None
        self.store.add_events(job_id, [Part(job_id=job_id, call_id=call_id, part=skill_loading_part(
            reference, f"Module {reference} loaded", source=self.source, locale=record.locale))])

    def _load(self, library: ModuleLibrary, reference: str, depth: int, chain: tuple[str, ...]) -> SavedModule:
        """The saved module a call names, once its nesting is within the limit and it closes no cycle."""
        if depth > self.settings.max_module_depth:
            raise CallFailure("ModuleDepthExceeded", f"module {reference!r} would nest {depth} deep; the limit is "
                              f"{self.settings.max_module_depth} (AGENTQ_MAX_MODULE_DEPTH)", retryable=False)
        if reference != "anonymous" and reference in chain[:-1]:
            raise CallFailure("ModuleCycle", "module cycle: " + " → ".join(chain), retryable=False)
        try:
            return library.load(reference)
        except ModuleUnavailable as error:  # a module URL that could not be fetched now
            raise CallFailure(type(error).__name__, str(error), retryable=True) from None
        except AgentQError as error:
            raise CallFailure(type(error).__name__, str(error), retryable=False) from None


def _module_reference(call: dict, tool: dict) -> str:
    """The module a call names: its tool's `_module` constant, else the call's own `_module`."""
    return str((tool.get("properties", {}).get("_module") or {}).get("const") or call.get("_module") or "")


def _nesting(lineage: ParentLink | None, reference: str) -> tuple[int, tuple[str, ...]]:
    """How deep a module's child job nests and the modules on its way (those of its parent's job, then its own),
    `lineage` being the parent job's own link when it is a module's child itself."""
    if lineage is None:
        return 1, (reference,)
    return lineage.depth + 1, (*lineage.chain, reference)


def _child_job(module: SavedModule, parent: JobInfo, record: CallRecord, call: dict, tool: dict,
               index: LogIndex) -> dict:
    """The child job of a module call: the module's context, the parent's imported messages and the call's
    parameters as its `input`, the module's tools and output, the parent's model, locale, tick limit and cache
    TTL (the tool's `x-model` over the parent's model), and its budget (the root job's, which the child's requests
    count against; `{}` when it has none)."""
    kinds = list(dict.fromkeys([*effective_imports(call, tool), *record.scopes]))
    input_message: dict[str, Any] = {"type": "data", "kind": "input", "data": call_parameters(call),
                                     "description": f"The parameters of the call of {record.tool!r}."}
    if module.input:
        input_message["schema"] = module.input
    options = {k: parent.options[k] for k in ("model", "locale", "max_ticks", "cache_ttl", "priority")
               if parent.options.get(k)}
    options["budget"] = parent.options.get("budget") or {}
    if tool_model(tool) is not None:  # the tool's `x-model` runs the module's ticks (and its latent calls)
        options["model"] = tool_model(tool)
    child = {"context": [*module.context, *imported_messages(index, kinds, record.instance), input_message],
             "tools": list(module.tools), "options": options}
    if module.output is not None:
        child["output"] = module.output
    return child


@dataclass(frozen=True)
class Resumed:
    """A parent's call committed with its child job's outcome: `status` is done or failed, `seconds` the
    child's run time."""

    job_id: str
    record: CallRecord
    status: str
    seconds: float
    commit: Commit


def resume_parent(store: DelegationStore, child: JobInfo, outcome: JobRecord, *, source: str) -> Resumed | None:
    """The child job ended: commit its parent's call with the child's output (or its failure). None when the
    parent's call is gone."""
    link = child.parent or ParentLink.from_dict({})
    job_id, call_id, token = link.job, link.call, link.token
    records = store.call_records(job_id, [call_id])
    if call_id not in records:
        log.warning("module job %s ended but its parent call %s of job %s is gone", child.id, call_id, job_id)
        return None
    record = records[call_id]
    store.add_usage(job_id, record_counters(outcome.usage))
    now = time.time()
    duration_ms = _elapsed_ms(outcome.created_at, outcome.finished_at)
    module = link.module or "module"
    tool = store.job_tools(job_id).get(record.tool)
    arguments = mask(call_parameters(record.call), sensitive_paths(tool))
    if outcome.status is JobStatus.SUCCEEDED:
        result = outcome.result
        events: list[Any] = []
        messages: list[dict] = []
        alternatives = output_alternatives(record.call)
        if alternatives:
            first = " && ".join(str(ref) for ref in alternatives[0])
            messages = branch_messages(record.call, first, result, call_id=call_id, date=now_iso())
        else:
            events.append(Thought(job_id=job_id, call_id=call_id, part=thought_part(
                _text(result), source=module, locale=record.locale)))
        events.append(CallFinished(
            job_id=job_id, call_id=call_id, tool=record.tool, status=CallStatus.DONE.value, duration_ms=duration_ms,
            part=tool_result_part(call_id=call_id, name=record.tool, content=result, is_error=False,
                                  source=source, locale=record.locale, display=None,
                                  technical=technical_details(record.tool, arguments, result, now, now, "success"))))
        commit = store.commit(job_id, call_id, token=token, status=CallStatus.DONE, messages=messages, events=events)
        return Resumed(job_id, record, CallStatus.DONE.value, duration_ms / 1000, commit)
    error = outcome.error or ErrorInfo("ModuleFailed", f"module job {child.id} {outcome.status}")
    message = redactor_for(record.call, tool).redact(
        f"module {module!r} (job {child.id}) {outcome.status}: {error.message}")
    technical = technical_details(record.tool, arguments, None, now, now, "error", message)
    commit, _ = commit_failure(store, job_id, call_id, token=token, record=record,
                               error_type=error.type, message=message, source=source,
                               shown=Shown(technical=technical, duration_ms=duration_ms))
    return Resumed(job_id, record, CallStatus.FAILED.value, duration_ms / 1000, commit)


def _text(value: Any) -> str:
    import json

    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _elapsed_ms(start: str | None, end: str | None) -> float:
    """Milliseconds between two of agentq's ISO-8601 UTC times (0 when either is missing)."""
    from datetime import datetime

    if not start or not end:
        return 0.0
    try:
        begun = datetime.fromisoformat(start.replace("Z", "+00:00"))
        ended = datetime.fromisoformat(end.replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    return round((ended - begun).total_seconds() * 1000, 3)

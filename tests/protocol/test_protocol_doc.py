"""Every example of docs/protocol.md, run through the protocol code it describes.

A fenced block preceded by `<!-- check: KIND [key=value ...] -->` is an example this file checks; a JSON block
preceded by `<!-- shape -->` only shows a shape (placeholders, no claim to check). Every JSON block of the page is
one or the other. The kinds:

- `message`: `[{"given", "stored" | "error"}]`, normalized as a job's context is;
- `resolve`: `{"context", "values", "missing"?, "instances"?}`, expressions resolved over the context;
- `register`: `[{"tool", "error"}]`, a tool registration refused with that message;
- `compose`: `{"tool", "known activities"?, "module"?, "composed"}`, key order included;
- `job` (`activities=a,b`: the known activities): planned by `plan_job`; the next `plan` block (a table of its
  calls) or `problems` block (`pointer: message` lines) states the outcome, and without one the job is valid;
- `output`: `{"call", "result" | "failure", "messages"}`, the messages the call appends (`_call`, `_date` aside);
- `writes`: `[{"before"?, "_outputPath", "_outputMethod", "result", "after" | "error"}]`, a write folded into a
  `state` view;
- `scoped`: `{"context", "_scopes", "_instance"?, "messages", "views"}`, what an activity's `context` holds;
- `envelope`: `{"job", "activity returns", "envelopes"}`, envelopes read back unchanged, their parts valid
  front-end parts (tests/integration/test_protocol_doc_events.py runs the job and compares);
- `stream`: `{"part", "sent"}`, what an event stream sends for one part;
- `history`: `{"stream", "history"}`, the history message built from a stream's parts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from agentq.errors import AgentQError, JobValidationError
from agentq.protocol.compose import compose_tool
from agentq.protocol.envelopes import parse_envelope
from agentq.protocol.expressions import parse_ref
from agentq.protocol.history import build_history_message, stream_parts
from agentq.protocol.jobs import JobPlan, plan_job
from agentq.protocol.messages import normalize_message, normalize_messages
from agentq.protocol.part_models import parse_part
from agentq.protocol.scopes import ScopedContext
from agentq.protocol.tools import ToolRegistry
from agentq.protocol.values import MISSING
from agentq.protocol.views import LogIndex, resolve
from agentq.protocol.writes import check_write, failure_messages, output_messages

DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"
MARKER = re.compile(r"<!--\s*(check:\s*(?P<kind>[a-z]+)(?P<args>[^>]*?)|(?P<shape>shape))\s*-->")
FENCE = re.compile(r"^```(?P<lang>\w*)\n(?P<body>.*?)^```$", re.M | re.S)
CALL_ID, DATE = "call_1", "2026-01-01T00:00:00Z"


@dataclass
class Example:
    kind: str
    lang: str
    body: str
    line: int
    args: dict[str, str] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.kind}@line{self.line}"

    def json(self):
        return json.loads(self.body)


def read_examples(text: str) -> tuple[list[Example], list[int]]:
    """(the checked examples in page order, the lines of JSON blocks carrying no marker)."""
    examples, unmarked = [], []
    for fence in FENCE.finditer(text):
        line = text.count("\n", 0, fence.start()) + 1
        before = text[:fence.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = MARKER.fullmatch(before.strip())
        if marker is None:
            if fence["lang"] == "json":
                unmarked.append(line)
            continue
        if marker["shape"]:
            continue
        args = dict(pair.split("=", 1) for pair in marker["args"].split())
        examples.append(Example(marker["kind"], fence["lang"], fence["body"], line, args))
    return examples, unmarked


EXAMPLES, UNMARKED = read_examples(DOC.read_text(encoding="utf-8"))


# ------------------------------------------------------------------------------------------------ checks


def check_message(example: Example, _: list[Example]) -> None:
    for case in example.json():
        if "error" in case:
            with pytest.raises(AgentQError) as caught:
                normalize_message(case["given"])
            assert str(caught.value) == case["error"]
        else:
            assert normalize_message(case["given"]) == case["stored"]


def _assert_resolves(index: LogIndex, values: dict, instance: str | None) -> None:
    for expression, value in values.items():
        found = resolve(index, expression, instance)
        assert found is not MISSING, f"{expression} ({instance or 'global'}) is missing"
        assert found == value, f"{expression} ({instance or 'global'})"


def check_resolve(example: Example, _: list[Example]) -> None:
    spec = example.json()
    index = LogIndex(normalize_messages(spec["context"]))
    _assert_resolves(index, spec["values"], None)
    for expression in spec.get("missing", []):
        assert resolve(index, expression) is MISSING, expression
    for instance, values in spec.get("instances", {}).items():
        _assert_resolves(index, values, instance)


def check_register(example: Example, _: list[Example]) -> None:
    for case in example.json():
        name = case["tool"]["properties"]["_tool"]["const"]
        with pytest.raises(AgentQError) as caught:
            ToolRegistry().register(name, case["tool"])
        assert str(caught.value) == case["error"]


def check_compose(example: Example, _: list[Example]) -> None:
    spec = example.json()
    loader = (lambda name: spec["module"]) if "module" in spec else None
    composed = compose_tool(spec["tool"], spec.get("known activities", ()), module_loader=loader)
    assert json.dumps(composed, ensure_ascii=False) == json.dumps(spec["composed"], ensure_ascii=False)


def _outcome(example: Example, following: list[Example]) -> Example | None:
    """The `plan` or `problems` block stating what `example` (a job) gives, if the next check is one."""
    return following[0] if following and following[0].kind in ("plan", "problems") else None


def _plan_table(plan: JobPlan) -> list[list[str]]:
    index_of = {call.id: call.index for call in plan.calls}
    rows = [["call", "tool", "mode", "_activity", "awaited", "waits_on", "approval"]]
    for call in plan.calls:
        waits = sorted(index_of[other.id] for other in plan.calls if call.id in other.dependents)
        rows.append([str(call.index), call.tool, call.mode.value, call.activity or '""',
                     "yes" if call.awaited else "no", ",".join(map(str, waits)) or "-",
                     "yes" if call.approval else "no"])
    return rows


def check_job(example: Example, following: list[Example]) -> None:
    activities: dict[str, dict] = {name: {} for name in example.args.get("activities", "").split(",") if name}
    outcome = _outcome(example, following)
    if outcome is not None and outcome.kind == "problems":
        with pytest.raises(JobValidationError) as caught:
            plan_job(example.json(), tools={}, live_activities=activities)
        stated = [line.strip() for line in outcome.body.strip().splitlines()]
        assert [f"{p.pointer}: {p.message}" for p in caught.value.problems] == stated
        return
    plan = plan_job(example.json(), tools={}, live_activities=activities)
    if outcome is not None:
        assert _plan_table(plan) == [line.split() for line in outcome.body.strip().splitlines()]


def check_outcome(example: Example, _: list[Example]) -> None:
    """`plan` and `problems` blocks are checked with the job before them; each must follow one."""
    position = EXAMPLES.index(example)
    assert position > 0 and EXAMPLES[position - 1].kind == "job", f"{example.id} follows no job example"


def _without_metadata(messages: list[dict]) -> list[dict]:
    return [{k: v for k, v in m.items() if k not in ("_call", "_date")} for m in messages]


def check_output(example: Example, _: list[Example]) -> None:
    spec = example.json()
    if "failure" in spec:
        failure = spec["failure"]
        messages = failure_messages(spec["call"], call_id=CALL_ID, error_type=failure["type"],
                                    message=failure["message"], date=DATE)
    else:
        messages = output_messages(spec["call"], spec["result"], call_id=CALL_ID, date=DATE)
    assert all(m["_date"] == DATE for m in messages)
    assert all(m["_call"] == {**spec["call"], "id": CALL_ID} for m in messages if "_call" in m)
    assert _without_metadata(messages) == spec["messages"]


def check_writes(example: Example, _: list[Example]) -> None:
    for case in example.json():
        index = LogIndex([{"type": "state", "data": case["before"]}] if "before" in case else [])
        call = {"_tool": "write", "_outputPath": case["_outputPath"], "_outputMethod": case["_outputMethod"]}
        messages = output_messages(call, case["result"], call_id=CALL_ID, date=DATE)
        if "error" in case:
            with pytest.raises(AgentQError) as caught:
                for message in messages:
                    check_write(index, message)
            assert str(caught.value) == case["error"]
            continue
        for message in messages:
            check_write(index, message)
            index.append(message)
        assert index.view(parse_ref(case["_outputPath"]).kind) == case["after"], case


def check_scoped(example: Example, _: list[Example]) -> None:
    spec = example.json()
    context = ScopedContext.build(normalize_messages(spec["context"]), spec["_scopes"], spec.get("_instance"))
    assert list(context) == spec["messages"]
    for kind, view in spec["views"].items():
        assert context[kind] == view


def check_envelope(example: Example, _: list[Example]) -> None:
    """The job is valid and the envelopes well formed; tests/integration/test_protocol_doc_events.py runs the job
    on a real worker and compares the envelopes it publishes with these."""
    spec = example.json()
    plan_job(spec["job"], tools={}, live_activities={call["_tool"]: {} for call in spec["job"]["calls"]})
    for envelope in spec["envelopes"]:
        assert parse_envelope(envelope).to_dict() == envelope
        part = parse_part(envelope["part"]).model_dump(mode="json")
        assert "technical_details" not in envelope["part"]
        assert {k: v for k, v in part.items() if k != "technical_details"} == envelope["part"]


def check_stream(example: Example, _: list[Example]) -> None:
    spec = example.json()
    assert stream_parts(spec["part"]) == spec["sent"]


def check_history(example: Example, _: list[Example]) -> None:
    spec = example.json()
    assert build_history_message(spec["stream"]) == spec["history"]


CHECKS: dict[str, Callable[[Example, list[Example]], None]] = {
    "message": check_message, "resolve": check_resolve, "register": check_register, "compose": check_compose,
    "job": check_job, "plan": check_outcome, "problems": check_outcome, "output": check_output,
    "writes": check_writes, "scoped": check_scoped, "envelope": check_envelope, "stream": check_stream,
    "history": check_history,
}


# ------------------------------------------------------------------------------------------------- tests


def test_every_json_block_is_checked_or_a_shape():
    assert not UNMARKED, f"JSON blocks of {DOC.name} without <!-- check: … --> or <!-- shape -->: lines {UNMARKED}"


def test_every_kind_of_check_is_used_and_known():
    kinds = {example.kind for example in EXAMPLES}
    assert kinds <= set(CHECKS), f"unknown check kinds: {kinds - set(CHECKS)}"
    assert kinds == set(CHECKS), f"check kinds no example uses: {set(CHECKS) - kinds}"


@pytest.mark.parametrize("example", EXAMPLES, ids=[example.id for example in EXAMPLES])
def test_example(example: Example):
    position = EXAMPLES.index(example)
    CHECKS[example.kind](example, EXAMPLES[position + 1:])


def test_a_wrong_statement_fails_its_check():
    """The checks compare what the page states: an example that states something else fails."""
    page = DOC.read_text(encoding="utf-8").replace('"†state.tags.1": "b"', '"†state.tags.1": "a"', 1)
    wrong = [example for example in read_examples(page)[0] if '"†state.tags.1": "a"' in example.body]
    assert len(wrong) == 1
    with pytest.raises(AssertionError):
        CHECKS[wrong[0].kind](wrong[0], [])

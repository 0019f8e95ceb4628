"""Tests of agentq.protocol.render: the context as the LLM sees it."""

import json

from agentq.protocol.render import ALL_INSTANCES, render_blocks, render_context
from agentq.protocol.views import LogIndex

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}
ERROR = {"type": "error", "data": {"call": {"_tool": "weatherCheck", "city": "Pariss"},
                                   "error": {"type": "LookupError", "message": "unknown city"}}}


def _fence(value) -> str:
    return "```json\n" + json.dumps(value, indent=2, ensure_ascii=False) + "\n```"


def _index():
    return LogIndex([
        {"type": "text", "role": "system", "text": "You plan trips."},
        {"type": "data", "kind": "input", "data": {"city": "Paris"}, "description": "The trip to plan",
         "schema": SCHEMA},
        {"type": "state", "data": {"a": 1, "b": {"c": 2}}},
        {"type": "state", "data": {"b": {"d": "é"}}, "_instance": "①"},
        {"type": "state", "data": {"z": 0}, "_instance": "②"},
        {"type": "text", "role": "user", "text": "Go."},
        ERROR,
        {**ERROR, "_instance": "②"},
    ])


def test_global_blocks():
    blocks = render_blocks(_index())
    assert blocks == [
        "## Text: system\nYou plan trips.",
        "## Text: user\nGo.",
        "## Data: ¶input\n" + _fence({"city": "Paris"}) + "\nThe trip to plan\nSchema:\n" + _fence(SCHEMA),
        "## Data: ¶state\n" + _fence({"a": 1, "b": {"c": 2}}),
        "## Error: call weatherCheck failed\nType: LookupError\nMessage: unknown city\nCall:\n"
        + _fence({"_tool": "weatherCheck", "city": "Pariss"}),
    ]
    assert render_context(_index()) == "\n\n".join(blocks)


def test_instance_sees_global_and_its_own_merged_view():
    blocks = render_blocks(_index(), instance="①", include_text=False, include_errors=False)
    assert blocks[1:] == [
        "## Data: ¶state\n" + _fence({"a": 1, "b": {"c": 2}}),
        "## Data: ¶state [①]\n" + _fence({"a": 1, "b": {"c": 2, "d": "é"}}),
    ]
    assert all("②" not in block for block in blocks)


def test_instanced_error_is_shown_to_its_instance_only():
    errors = [b for b in render_blocks(_index(), instance="②") if b.startswith("## Error")]
    assert [e.splitlines()[0] for e in errors] == ["## Error: call weatherCheck failed",
                                                   "## Error: call weatherCheck failed [②]"]
    assert len([b for b in render_blocks(_index(), instance="①") if b.startswith("## Error")]) == 1


def test_all_instances():
    headers = [b.splitlines()[0] for b in render_blocks(_index(), instance=ALL_INSTANCES, include_text=False)]
    assert headers == ["## Data: ¶input", "## Data: ¶state", "## Data: ¶state [①]", "## Data: ¶state [②]",
                       "## Error: call weatherCheck failed", "## Error: call weatherCheck failed [②]"]


def test_kinds_filter_and_switches():
    blocks = render_blocks(_index(), kinds=["state"], include_text=False, include_errors=False)
    assert [b.splitlines()[0] for b in blocks] == ["## Data: ¶state"]
    assert render_blocks(_index(), kinds=[], include_text=False, include_errors=False) == []
    assert render_context(LogIndex([])) == ""


def test_instance_inherits_description_and_schema():
    index = LogIndex([
        {"type": "data", "kind": "profile", "data": {"name": "A"}, "description": "Who", "schema": SCHEMA},
        {"type": "data", "kind": "profile", "data": {"name": "B"}, "_instance": "employee_B"},
    ])
    (block,) = [b for b in render_blocks(index, instance="employee_B") if "[employee_B]" in b]
    assert block == ("## Data: ¶profile [employee_B]\n" + _fence({"name": "B"}) + "\nWho\nSchema:\n"
                     + _fence(SCHEMA))


def test_newest_description_wins_and_engine_writes_fold():
    index = LogIndex([
        {"type": "data", "kind": "state", "data": {"items": []}, "description": "old"},
        {"type": "data", "kind": "state", "data": {"items": 1}, "_path": "†state.items", "_outputMethod": "push",
         "_call": "call_1"},
        {"type": "data", "kind": "state", "data": {}, "description": "new"},
    ])
    assert render_context(index) == "## Data: ¶state\n" + _fence({"items": [1]}) + "\nnew"

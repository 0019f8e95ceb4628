"""The event example of docs/protocol.md, run: its job on a real worker publishes exactly the envelopes the page
shows, apart from ids, timestamps and durations (tests/protocol/test_protocol_doc.py checks the other examples)."""

from __future__ import annotations

import json

from agentq.protocol.jobs import plan_job
from tests.protocol.test_protocol_doc import DOC, read_examples


def _event_example() -> dict:
    examples = [e for e in read_examples(DOC.read_text(encoding="utf-8"))[0] if e.kind == "envelope"]
    assert len(examples) == 1, "docs/protocol.md has one envelope example"
    return examples[0].json()


def _as_documented(actual: list[dict], documented: list[dict], *, job_id: str, call_id: str) -> list[dict]:
    """`actual` with the documented job and call ids, and each envelope's timestamp and duration taken from the
    documented envelope at the same place (the only values that change from run to run)."""
    text = json.dumps(actual, ensure_ascii=False)
    doc_job, doc_call = documented[0]["job_id"], next(e["call_id"] for e in documented if "call_id" in e)
    renamed = json.loads(text.replace(job_id, doc_job).replace(call_id, doc_call))
    for mine, theirs in zip(renamed, documented, strict=False):
        if "part" in mine and "part" in theirs:
            mine["part"]["timestamp"] = theirs["part"]["timestamp"]
        if "duration_ms" in mine and "duration_ms" in theirs:
            assert mine["duration_ms"] >= 0
            mine["duration_ms"] = theirs["duration_ms"]
    return renamed


def test_the_documented_job_publishes_the_documented_envelopes(harness):
    example = _event_example()
    job = example["job"]
    for tool in job["tools"]:
        name = tool["properties"]["_tool"]["const"]
        harness.activities.register(name, lambda call: example["activity returns"])
    assert plan_job(job, tools={}, live_activities={"weatherCheck": {}}).calls[0].mode.value == "explicit"
    harness.worker()

    handle = harness.client().submit(job)
    record = handle.result(timeout=20)
    assert record["status"] == "succeeded", record
    assert record["state"] == {"weather": example["activity returns"]}
    actual = [event.data for event in handle.events(follow=False)]
    call_id = next(e["call_id"] for e in actual if "call_id" in e)

    assert _as_documented(actual, example["envelopes"], job_id=handle.id, call_id=call_id) == example["envelopes"]

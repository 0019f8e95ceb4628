"""What a call's task carries of its record (`CallRecord.to_task`) and what `from_dict` makes of it again."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from agentq.protocol.digests import record_digest
from agentq.protocol.records import CallMode, CallRecord


def _record(**changes: Any) -> CallRecord:
    base = CallRecord(id="call_3", index=3, call={"_tool": "sendEmail", "_outputPath": "†state.sent"},
                      tool="sendEmail", activity="sendEmail", mode=CallMode.EXPLICIT, awaited=True,
                      task="agentq.activity.sendEmail", queue="agentq.activity.sendEmail")
    return replace(base, **changes)


@pytest.mark.parametrize("record, left_out", [
    (_record(), {"task", "queue"}),  # its activity's own task and queue
    (_record(task="agentq.activity.sendEmail", queue="mail"), {"task"}),  # a queue the activity declared
    (_record(mode=CallMode.LATENT, task="agentq.engine.latent", queue="agentq.engine"), set()),
    (_record(task="", queue=""), set()),  # not routed yet
])
def test_a_task_carries_what_its_record_needs_and_gives_the_same_record_back(record: CallRecord,
                                                                            left_out: set[str]) -> None:
    carried = record.to_task()
    assert left_out == {"task", "queue"} - set(carried)
    again = CallRecord.from_dict(json.loads(json.dumps(carried)))
    assert again == record
    assert record_digest(again) == record_digest(record)  # what the claim compares with the stored record


def test_a_call_on_its_activitys_own_queue_travels_in_fewer_bytes() -> None:
    record = _record()
    assert len(json.dumps(record.to_task())) + 2 * len('"task": "agentq.activity.sendEmail", ') \
        <= len(json.dumps(record.to_dict()))

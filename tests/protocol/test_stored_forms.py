"""A call record's stored JSON is encoded once per submission (`stored_forms`): the digest its task is signed with and
the JSON the submission writes are the same text, made once; a record changed since (another object) is encoded
anew, and outside a submission nothing is kept."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from agentq.protocol.digests import dumps, record_digest, sha1, stored_forms, stored_json
from agentq.protocol.records import CallMode, CallRecord


def _record() -> CallRecord:
    return CallRecord(id="call_1", index=1, call={"_tool": "noop", "i": "é"}, tool="noop", activity="noop",
                      mode=CallMode.EXPLICIT, awaited=True, task="agentq.activity.noop", queue="celery")


@pytest.fixture
def encodings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    made: list[str] = []
    to_dict = CallRecord.to_dict

    def counting(self: CallRecord) -> dict[str, Any]:
        made.append(self.id)
        return to_dict(self)

    monkeypatch.setattr(CallRecord, "to_dict", counting)
    return made


def test_a_submission_encodes_a_record_once_for_its_digest_and_its_write(encodings: list[str]):
    record = _record()
    expected = dumps(record.to_dict())
    encodings.clear()
    with stored_forms():
        digest = record_digest(record)
        assert stored_json(record) == expected and digest == sha1(expected)
        assert encodings == ["call_1"]
        relayed = replace(record, relay="job_parent")  # another record under the same id: its own JSON
        assert stored_json(relayed) == dumps(relayed.to_dict()) != expected
    assert record_digest(record.to_dict()) == digest  # the dict form gives the same digest
    encodings.clear()
    stored_json(record), stored_json(record)  # outside a submission: nothing is kept
    assert encodings == ["call_1", "call_1"]

"""Sensitive parameters through the executor (a `StateStore` on the session's Redis, no Celery): the activity gets the
real value; events, technical details, failure and retry messages, the log's error, the job's error, the history and the
calls view show it masked."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from agentq.engine.call_views import job_calls
from agentq.protocol.history import build_history_message
from agentq.protocol.records import ErrorInfo
from agentq.protocol.sensitive import REDACTED
from agentq.protocol.status import JobStatus
from agentq.store.state import StateStore
from tests.runtime.conftest import Rig

pytestmark = pytest.mark.timeout(10)

GOOD, DECLINED = "4111 1111 1111 1111", "4000 0000 0000 0000"

CHARGE = {
    "type": "object",
    "properties": {
        "_tool": {"type": "string", "const": "charge"},
        "orderId": {"type": "string"},
        "card": {"type": "object", "properties": {"number": {"type": "string", "pattern": "^[0-9 ]{12,23}$"},
                                                   "holder": {"type": "string"}}},
        "_output": {},
    },
    "x-sensitive": ["/card/number"],
}


class CardRig(Rig[StateStore]):
    """A rig whose `charge` activity keeps the card numbers it received."""

    def __init__(self, store: StateStore):
        super().__init__(store)
        self.received: list[str] = []


@pytest.fixture
def rig(redis_store: StateStore) -> Iterator[CardRig]:
    rig = CardRig(redis_store)

    def charge(call: dict) -> dict:
        number = call["card"]["number"]
        rig.received.append(number)
        if number.endswith("0000"):
            raise RuntimeError(f"the issuer declined card {number}")
        return {"last4": number[-4:]}

    rig.tools.register("charge", CHARGE)
    rig.activities.register("charge", charge, retries=1, retry_backoff=0.01)
    yield rig
    rig.executor.leases.stop()


def _job(number: str, *, by_reference: bool = False) -> dict:
    card = "†input.card" if by_reference else {"number": number, "holder": "Ada"}
    return {"context": [{"type": "input", "data": {"card": {"number": number, "holder": "Ada"}}}],
            "calls": [{"_tool": "charge", "orderId": "o1", "card": card, "_outputPath": "†state.paid"}]}


def _shown(rig: CardRig, job_id: str) -> str:
    """Everything agentq shows of a job but its input: events, history, calls view, the record's error."""
    events = rig.events(job_id)
    parts = [e["part"] for e in events if e.get("part")]
    return json.dumps({"events": events, "history": build_history_message(parts),
                       "calls": job_calls(rig.store, job_id), "error": rig.store.record(job_id).to_dict()["error"]})


@pytest.mark.parametrize("by_reference", [False, True])
def test_a_done_call_shows_the_number_masked_and_the_activity_got_it(rig: CardRig, by_reference: bool):
    job_id = rig.submit(_job(GOOD, by_reference=by_reference))
    assert rig.drain() == ["done"]
    assert rig.received == [GOOD]
    (started,) = rig.named(job_id, "call.started")
    (request,) = started["part"]["tools"]
    assert request["arguments"] == {"orderId": "o1", "card": {"number": REDACTED, "holder": "Ada"}}
    (finished,) = rig.named(job_id, "call.finished")
    assert finished["part"]["technical_details"]["arguments"] == request["arguments"]
    history = build_history_message([e["part"] for e in rig.events(job_id) if e.get("part")])
    (tool_call,) = [p for p in history["parts"] if p.get("activity_type") == "tool_call"]
    assert tool_call["tools"][0]["arguments"]["card"] == {"number": REDACTED, "holder": "Ada"}
    assert GOOD not in _shown(rig, job_id)
    assert rig.store.record(job_id).status is JobStatus.SUCCEEDED


def test_a_failed_call_masks_the_number_its_error_quotes(rig: CardRig):
    job_id = rig.submit(_job(DECLINED))
    assert rig.drain() == ["retry", "failed"]
    assert rig.received == [DECLINED, DECLINED]
    expected = f"the issuer declined card {REDACTED}"
    (retrying,) = rig.named(job_id, "call.retrying")
    assert retrying["error"] == {"type": "RuntimeError", "message": expected}
    (finished,) = rig.named(job_id, "call.finished")
    assert finished["error"] == {"type": "RuntimeError", "message": expected}
    assert finished["part"]["technical_details"]["error_message"] == expected
    assert finished["part"]["technical_details"]["arguments"]["card"]["number"] == REDACTED
    (_, outcome), = [o for o in rig.outcomes if o[1].status == "failed"]
    assert outcome.error == ErrorInfo("RuntimeError", expected)  # what the task's FAILURE carries
    errors = [m for m in rig.store.read_log(job_id) if m["type"] == "error"]
    assert [m["data"]["error"]["message"] for m in errors] == [expected]
    (call,) = job_calls(rig.store, job_id)
    assert call["error"] == {"type": "RuntimeError", "message": expected}
    record = rig.store.record(job_id)
    assert record.status is JobStatus.FAILED and record.error is not None and expected in record.error.message
    assert DECLINED not in _shown(rig, job_id)


def test_a_call_that_does_not_validate_after_resolution_does_not_quote_the_number(rig: CardRig):
    job_id = rig.submit(_job("4111-1111-1111-1111", by_reference=True))  # the reference validates at submission
    assert rig.drain() == ["failed"]
    assert rig.received == []
    (finished,) = rig.named(job_id, "call.finished")
    assert finished["error"]["type"] == "CallValidationError"
    assert f"/card/number: {REDACTED} does not match" in finished["error"]["message"]
    assert "4111-1111" not in _shown(rig, job_id)


def test_submission_errors_do_not_quote_the_number(rig: CardRig):
    from agentq.errors import JobValidationError

    with pytest.raises(JobValidationError) as caught:
        rig.submit(_job("4111-1111-1111-1111"))
    assert [(p.pointer, p.message) for p in caught.value.problems] == [
        ("/calls/0/card/number", f"{REDACTED} does not match '^[0-9 ]{{12,23}}$'")]
    assert "4111-1111" not in str(caught.value)


def test_the_reasoning_for_a_call_does_not_repeat_the_number(rig: CardRig):
    job = _job(GOOD)
    job["calls"][0]["_reasoningForCall"] = f"Charging card {GOOD} for order o1."
    job_id = rig.submit(job)
    assert rig.drain() == ["done"]
    (thought,) = rig.named(job_id, "thought")
    assert thought["part"]["content"] == f"Charging card {REDACTED} for order o1."
    assert GOOD not in _shown(rig, job_id)

"""Least privilege end to end (docs/protocol.md#scopes): an activity scoped to `["state"]`, run by a real Celery worker
against the private Redis, tries every way it has to reach the job's `secret` message and another instance's data
through the `context` it is given — its private attributes, `vars`, `__dict__`, its `emit` callable's self and closure,
everything reachable from it — and finds none, while its in-scope reads and its `emit` work."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.integration.conftest import Harness
from tests.reachability import leaks

SECRET = "s3cr3t-token-e2e-61ad"
OTHER_INSTANCE = "value-of-instance-two-e2e-0b9f"
OUT_OF_SCOPE = [SECRET, OTHER_INSTANCE]

JOB = {
    "context": [
        {"type": "data", "kind": "secret", "data": {"token": SECRET}},
        {"type": "state", "data": {"shared": "global"}},
        {"type": "state", "_instance": "①", "data": {"mine": "one"}},
        {"type": "state", "_instance": "②", "data": {"mine": OTHER_INSTANCE}},
    ],
    "calls": [{"_tool": "probe", "_instance": "①", "_scopes": ["state"], "_outputPath": "†state.report"},
              {"_tool": "probe", "_instance": "②", "_scopes": [], "_outputPath": "†state.report"}],
}


def attempt(reach: Callable[[], Any]) -> str:
    """What one attempt to reach out of scope got: refused (the exception's type), or what it found."""
    try:
        reached = reach()
    except Exception as error:  # the attempt was refused
        return f"refused: {type(error).__name__}"
    found = leaks(reached, OUT_OF_SCOPE)
    return f"LEAKED {found}" if found else "nothing out of scope"


def probe(call: dict, context: Any) -> dict:
    """Reads what its scope allows, emits a part, and reports what each attempt to reach further got."""
    context.emit({"activity_type": "progress", "content": f"{len(context)} messages in scope"})
    attempts: dict[str, Callable[[], Any]] = {
        "context._index": lambda: context._index,
        "vars(context)": lambda: vars(context),
        "context.__dict__": lambda: context.__dict__,
        "context['secret']": lambda: context["secret"],
        "context.secret": lambda: context.secret,
        "context.emit.__closure__": lambda: context.emit.__closure__,
        "context.emit.__self__": lambda: context.emit.__self__,
        "context._emit": lambda: context._emit,
        "context._emit.__closure__": lambda: context._emit.__closure__,
        "context._emit.__self__": lambda: context._emit.__self__,
        "context._emit.__call__": lambda: context._emit.__call__,
        "context._views": lambda: context._views,
        "everything reachable from context": lambda: context,
    }
    return {"state": context["state"] if "state" in context.kinds else None, "kinds": list(context.kinds),
            "messages": [m["data"] for m in context],
            "attempts": {name: attempt(reach) for name, reach in attempts.items()}}


def test_an_activity_cannot_reach_out_of_its_scope_through_its_context(harness: Harness):
    harness.tool("probe", _scopes={"type": "array", "items": {"enum": ["state", "secret"]}})
    harness.activities.register("probe", probe)
    harness.worker()
    handle = harness.client().submit(JOB)
    record = handle.result(timeout=30)
    assert record["status"] == "succeeded", record

    one, two = record["instances"]["①"]["report"], record["instances"]["②"]["report"]
    assert one["state"] == {"shared": "global", "mine": "one"}  # the in-scope reads work
    assert one["messages"] == [{"shared": "global"}, {"mine": "one"}]
    assert (two["kinds"], two["messages"]) == ([], [])  # no scopes: an empty context
    for report in (one, two):
        assert not [name for name, got in report["attempts"].items() if got.startswith("LEAKED")], report
        assert report["attempts"]["context._index"] == "refused: AttributeError"
        assert report["attempts"]["vars(context)"] == "refused: TypeError"
        assert report["attempts"]["context.__dict__"] == "refused: AttributeError"
        assert report["attempts"]["context['secret']"] == "refused: KeyError"
        assert report["attempts"]["context.secret"] == "refused: AttributeError"
        assert report["attempts"]["context._emit.__closure__"] == "refused: AttributeError"
        assert report["attempts"]["everything reachable from context"] == "nothing out of scope"

    parts = [event.data["part"]["content"] for event in handle.events(follow=False) if event.event == "part"]
    assert sorted(parts) == ["0 messages in scope", "2 messages in scope"]  # emit reaches the job's stream

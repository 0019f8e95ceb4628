"""The wait tools' pure parts (docs/waits.md): what a wait call waits for, its refused input, how an event finds
the waits it matches, and how the command line's live view shows a waiting call."""

from __future__ import annotations

import math

from agentq.cli.render import LiveView
from agentq.protocol.envelopes import CallWaiting
from agentq.protocol.waits import (
    SLEEP,
    WAIT_TOOLS,
    event_digests,
    event_problems,
    wait_digest,
    wait_problems,
    wait_spec,
)

NOW = 1_800_000_000.0


def test_a_wait_call_opens_with_its_due_time():
    assert wait_spec({"_tool": "sleep", "seconds": 5}, NOW).due_ms == (NOW + 5) * 1000
    assert wait_spec({"_tool": "sleep", "until": "2027-01-15T08:00:00Z"}, NOW).until == "2027-01-15T08:00:00.000Z"
    assert wait_spec({"_tool": "sleep", "until": "2020-01-01T00:00:00+02:00"}, NOW).due_ms == NOW * 1000  # past: now
    assert wait_spec({"_tool": "waitForSignal", "name": "go"}, NOW).due_ms == math.inf
    event = wait_spec({"_tool": "waitForEvent", "event": "e", "match": {"/a": 1}, "timeout_s": 2}, NOW)
    assert (event.due_ms, event.awaited()) == ((NOW + 2) * 1000, {"kind": "event", "event": "e", "match": {"/a": 1}})


def test_a_sleep_is_refused_without_one_time_or_with_a_time_long_past():
    tool = WAIT_TOOLS[SLEEP]
    assert wait_problems({"_tool": "sleep", "seconds": 1}, tool, "/calls/0", NOW) == []
    assert [p.pointer for p in wait_problems({"_tool": "sleep"}, tool, "/calls/0", NOW)] == ["/calls/0"]
    assert [p.pointer for p in wait_problems({"_tool": "sleep", "seconds": 1, "until": "x"}, tool, "/c", NOW)] == ["/c"]
    old = wait_problems({"_tool": "sleep", "until": "2020-01-01T00:00:00Z"}, tool, "/calls/0", NOW)
    assert [(p.pointer, "more than a day in the past" in p.message) for p in old] == [("/calls/0/until", True)]
    assert wait_problems({"_tool": "sleep", "until": "†state.when"}, tool, "/calls/0", NOW) == []  # at open
    assert wait_problems({"_tool": "sleep"}, {"properties": {}}, "/calls/0", NOW) == []  # another tool


def test_an_event_finds_a_wait_by_the_values_at_its_pointers():
    shape, digest = wait_digest({"/order/id": "o-1", "/ok": True})
    data = {"order": {"id": "o-1"}, "ok": True, "more": [1]}
    assert event_digests([shape], data) == [digest]
    for other in ({"order": {"id": "o-2"}, "ok": True}, {"order": {"id": "o-1"}, "ok": 1}, {"order": {"id": "o-1"}}):
        assert digest not in event_digests([shape], other)
    escaped, key = wait_digest({"/a~1b/~0c": 3})
    assert event_digests([escaped], {"a/b": {"~c": 3}}) == [key]


def test_an_event_needs_a_name():
    assert [p.pointer for p in event_problems({"data": {}})] == ["/name"]
    assert [p.pointer for p in event_problems({"name": "x", "id": "", "extra": 1})] == ["/extra", "/id"]
    assert event_problems({"name": "x", "data": None, "id": "e1"}) == []


def test_the_live_view_shows_what_a_call_waits_for():
    lines: list[str] = []
    LiveView(lines.append).show(CallWaiting(job_id="j", call_id="c", tool="waitForEvent", until=None,
                                            awaits={"kind": "event", "event": "paid", "match": {}}).to_dict())
    assert lines == ["  ⏸ waitForEvent           waiting for event paid"]

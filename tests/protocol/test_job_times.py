"""A job's times at submission (docs/waits.md#deadlines): `options.deadline_s`, `start_at` and `delay_s` checked with
their pointers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agentq.errors import JobValidationError
from agentq.protocol.job_times import start_ms
from agentq.protocol.jobs import plan_job
from agentq.protocol.records import JobOptions

TOOLS = {"fetch": {"type": "object", "description": "fetch",
                   "properties": {"_tool": {"type": "string", "const": "fetch"}, "url": {"type": "string"},
                                  "_output": {}}}}


def _plan(options: dict):
    return plan_job({"calls": [{"_tool": "fetch", "url": "u"}], "options": options}, tools=TOOLS,
                    live_activities={"fetch": {}})


@pytest.mark.parametrize("value", [2, 0.5, 86400])
def test_a_positive_deadline_is_kept(value):
    plan = _plan({"deadline_s": value})
    assert plan.options["deadline_s"] == value
    assert JobOptions.of(plan.options).deadline_s == value


@pytest.mark.parametrize("value", [0, -1, True, "2", None, float("inf")])
def test_a_deadline_that_is_no_positive_number_is_refused_at_its_pointer(value):
    with pytest.raises(JobValidationError) as raised:
        _plan({"deadline_s": value})
    assert [(p.pointer, p.message) for p in raised.value.problems] == [
        ("/options/deadline_s", f"expected a positive number of seconds, got {value!r}")]


def _problems(options: dict) -> list[tuple[str, str]]:
    with pytest.raises(JobValidationError) as raised:
        _plan(options)
    return [(p.pointer, p.message) for p in raised.value.problems]


def test_a_start_time_or_a_delay_is_kept():
    assert _plan({"delay_s": 2}).options["delay_s"] == 2
    assert _plan({"start_at": "2026-01-31T08:00:00Z"}).options["start_at"] == "2026-01-31T08:00:00Z"


def test_bad_start_times_are_all_named_at_their_pointers():
    assert _problems({"start_at": "tomorrow", "delay_s": -1}) == [
        ("/options/delay_s", "give options.start_at or options.delay_s, not both"),
        ("/options/start_at", "expected an RFC 3339 time (e.g. 2026-01-31T08:00:00Z), got 'tomorrow'"),
        ("/options/delay_s", "expected a number of seconds >= 0, got -1"),
    ]
    ahead = (datetime.now(UTC) + timedelta(days=400)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert _problems({"start_at": ahead}) == [("/options/start_at", f"{ahead!r} is more than a year ahead")]
    assert _problems({"delay_s": True}) == [("/options/delay_s", "expected a number of seconds >= 0, got True")]


def test_when_a_job_starts():
    assert start_ms({"delay_s": 2}, 1000.0) == 1_002_000
    assert start_ms({"delay_s": 0}, 1000.0) is None  # at once
    assert start_ms({"start_at": "1970-01-01T00:20:00Z"}, 1000.0) == 1_200_000
    assert start_ms({"start_at": "1970-01-01T00:10:00Z"}, 1000.0) is None  # its time has come already
    assert start_ms({}, 1000.0) is None

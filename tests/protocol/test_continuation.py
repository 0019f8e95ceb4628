"""Where a fork cuts a job, and the shape of continue and fork requests (`agentq/protocol/continuation.py`)."""

from __future__ import annotations

import json

from agentq.errors import Problem
from agentq.protocol.continuation import (
    CONTINUE_FIELDS,
    FORK_FIELDS,
    ForkCut,
    body_problems,
    fork_cut,
    merged_options,
    shifted,
    tick_count,
)


def ex(log_length: int, *, calls: tuple[str, ...] = (), output=None, problems=(), truncated=False) -> dict:
    return {"log_length": log_length, "tool_use_id": "t", "problems": list(problems), "truncated": truncated,
            "solution": {"calls": [{"_tool": c} for c in calls], "output": output}}


# tick 1: an invalid answer sent back, then its correction; tick 2: one call; tick 3: the final output
EXCHANGES = [ex(2, calls=("a",), problems=[{"pointer": "/calls/0", "message": "bad"}]), ex(2, calls=("a",)),
             ex(4, calls=("b",)), ex(6, output={"x": 1})]


def test_a_tick_is_its_corrective_requests_and_the_one_that_counted():
    assert tick_count(EXCHANGES) == 3
    cut = fork_cut(EXCHANGES, 7, 1)
    assert cut == ForkCut(at_tick=1, exchanges=2, log_length=4,
                          replayed=({"tick": 1, "requests": 2, "tools": ["a", "a"], "cost_usd": 0.0},))
    two = fork_cut(EXCHANGES, 7, 2)
    assert isinstance(two, ForkCut) and (two.exchanges, two.log_length) == (3, 6)
    assert [r["tick"] for r in two.replayed] == [1, 2]


def test_a_fork_at_tick_0_keeps_the_first_messages_only():
    assert fork_cut(EXCHANGES, 7, 0) == ForkCut(at_tick=0, exchanges=0, log_length=2, replayed=())


def test_at_tick_past_the_end_or_at_the_final_output_or_not_a_count_is_a_problem_at_its_pointer():
    past = fork_cut(EXCHANGES, 7, 4)
    assert isinstance(past, Problem) and past.pointer == "/at_tick" and "3 tick(s)" in past.message
    final = fork_cut(EXCHANGES, 7, 3)
    assert isinstance(final, Problem) and "final output" in final.message and "tick 2 at most" in final.message
    for bad in (-1, "2", True, 1.5):
        assert isinstance(fork_cut(EXCHANGES, 7, bad), Problem)


def test_a_failed_job_without_a_final_output_can_be_forked_after_its_last_tick():
    cut = fork_cut(EXCHANGES[:3], 5, 2)
    assert isinstance(cut, ForkCut) and (cut.exchanges, cut.log_length) == (3, 5)


def test_request_shapes_name_every_problem():
    problems = body_problems({"context": [], "options": {"start_at": "x"}, "extra": 1}, CONTINUE_FIELDS)
    assert [p.pointer for p in problems] == ["/extra", "/context", "/options/start_at"]
    assert [p.pointer for p in body_problems({}, CONTINUE_FIELDS)] == ["/context"]
    assert body_problems({"at_tick": 1}, FORK_FIELDS) == []
    assert [p.pointer for p in body_problems({"at_tick": 1, "tools": "x"}, FORK_FIELDS)] == ["/tools"]
    assert [p.pointer for p in body_problems([1], FORK_FIELDS)] == [""]


def test_options_are_the_old_ones_under_the_new_ones_without_nulls_or_a_start_time():
    assert merged_options({"model": "a", "budget": None, "delay_s": 3, "max_ticks": 4}, {"model": "b"}) == {
        "model": "b", "max_ticks": 4}


def test_a_fork_with_first_messages_of_another_length_moves_the_replayed_requests_log_positions():
    raw = ['{"log_length":2,"tool_use_id":"a"}', '{"log_length":4,"tool_use_id":"b"}']
    assert shifted(raw, 0) == tuple(raw)  # unchanged, byte for byte
    assert [json.loads(e)["log_length"] for e in shifted(raw, 1)] == [3, 5]

"""Two jobs compared (pure): the structural JSON diff by pointer, calls matched by tool and order, figures with
their deltas, and the outputs read from `call.finished` events."""

from __future__ import annotations

import json

from agentq.protocol.job_diff import JobSide, call_outputs, diff_jobs, duration_ms
from agentq.protocol.json_diff import Change, json_diff


def record(job_id: str, **fields: object) -> dict:
    base = {"id": job_id, "status": "succeeded", "tenant": "default", "result": None, "state": {}, "instances": {},
            "error": None, "usage": {"requests": 0, "input_tokens": 0, "output_tokens": 0,
                                     "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                                     "cost_usd": 0.0, "by_model": {}},
            "created_at": "2026-01-01T00:00:00.000000Z", "finished_at": "2026-01-01T00:00:01.500000Z"}
    return base | fields


def call(call_id: str, tool: str, *, status: str = "done", params: dict | None = None, instance: str | None = None,
         duration: float | None = 10.0, error: dict | None = None) -> dict:
    return {"id": call_id, "tool": tool, "activity": tool, "mode": "explicit", "instance": instance,
            "status": status, "attempts": 1, "depends_on": [], "output_path": "†state.x", "started_at": None,
            "finished_at": None, "duration_ms": duration, "error": error, "params": params or {}}


# ------------------------------------------------------------------------------------------- json_diff


def test_json_diff_names_each_added_removed_and_changed_value_by_pointer():
    diff = json_diff({"a": 1, "b": [1, 2], "k/~": "x", "same": {"z": [True]}},
                     {"a": 2, "b": [1], "k/~": "x", "same": {"z": [True]}, "c": None})
    assert diff.changes == (Change("/a", "changed", 1, 2), Change("/b/1", "removed", 2, None),
                            Change("/c", "added", None, None))
    assert not diff.same and not diff.truncated


def test_json_diff_of_equal_values_is_empty_and_types_are_told_apart():
    assert json_diff({"x": [1, {"y": 2.0}]}, {"x": [1, {"y": 2}]}).same
    assert json_diff(1, True).changes == (Change("", "changed", 1, True),)
    assert json_diff({"x": {}}, {"x": []}).changes == (Change("/x", "changed", {}, []),)
    assert json_diff("a", None).changes == (Change("", "changed", "a", None),)
    pointer = json_diff({"a/b": {"m~n": 1}}, {"a/b": {"m~n": 2}}).changes[0].pointer
    assert pointer == "/a~1b/m~0n"


def test_json_diff_keeps_its_first_changes_and_says_it_left_some_out():
    diff = json_diff(list(range(10)), list(range(10, 20)), limit=3)
    assert [c.pointer for c in diff.changes] == ["/0", "/1", "/2"] and diff.truncated
    assert json_diff([1, 2, 3], [1, 2, 4], limit=1).truncated is False


# ------------------------------------------------------------------------------------------- diff_jobs


def test_the_same_job_twice_has_no_differences():
    side = JobSide(record("job_a", result={"ok": 1}, state={"ok": 1}), [call("c0", "echo", params={"t": "x"})],
                   {"c0": {"said": "x"}})
    diff = diff_jobs(side, side)
    assert diff.same and diff.call_counts() == {"same": 1, "changed": 0, "only_a": 0, "only_b": 0}
    body = diff.to_dict()
    assert body["duration_ms"] == {"a": 1500, "b": 1500, "delta": 0}
    assert body["usage"]["cost_usd"] == {"a": 0.0, "b": 0.0, "delta": 0}
    json.dumps(body)  # the API's body is plain JSON


def test_status_error_final_output_state_and_models_differences():
    usage_b = {"requests": 2, "input_tokens": 120, "output_tokens": 30, "cache_creation_input_tokens": 0,
               "cache_read_input_tokens": 0, "cost_usd": 0.0042,
               "by_model": {"claude-b": {"requests": 2, "cost_usd": 0.0042}}}
    usage_a = {**usage_b, "requests": 1, "input_tokens": 100, "cost_usd": 0.0012,
               "by_model": {"claude-a": {"requests": 1, "cost_usd": 0.0012}}}
    a = JobSide(record("job_a", usage=usage_a, result={"answer": "yes", "n": 1}, state={"n": 1}))
    b = JobSide(record("job_b", status="failed", usage=usage_b, result={"answer": "no"}, state={"n": 1},
                       error={"type": "CallFailed", "message": "boom"},
                       finished_at="2026-01-01T00:00:03.000000Z"))
    diff = diff_jobs(a, b)
    assert not diff.same and diff.status_changed and diff.error_changed and diff.models_changed
    assert diff.result.changes == (Change("/answer", "changed", "yes", "no"), Change("/n", "removed", 1, None))
    assert diff.state.same
    body = diff.to_dict()
    assert body["a"]["models"] == ["claude-a"] and body["b"]["models"] == ["claude-b"]
    assert body["usage"]["requests"] == {"a": 1, "b": 2, "delta": 1}
    assert body["usage"]["input_tokens"]["delta"] == 20
    assert body["usage"]["cost_usd"]["delta"] == 0.003
    assert body["duration_ms"] == {"a": 1500, "b": 3000, "delta": 1500}


def test_an_unpriced_cost_or_a_running_job_has_no_delta():
    a = JobSide(record("job_a", finished_at=None, usage={"requests": 1, "cost_usd": None}))
    b = JobSide(record("job_b"))
    body = diff_jobs(a, b).to_dict()
    assert body["usage"]["cost_usd"] == {"a": None, "b": 0.0, "delta": None}
    assert body["duration_ms"] == {"a": None, "b": 1500, "delta": None}
    assert duration_ms("not a time", "2026-01-01T00:00:00Z") is None


def test_calls_pair_by_tool_instance_and_order_whatever_their_ids():
    a = JobSide(record("job_a"), [call("c0", "search", params={"q": "x"}), call("c1", "search", params={"q": "y"}),
                                  call("c2", "fetch", instance="eu"), call("c3", "notify")],
                {"c0": ["r1"], "c1": ["r2"], "c2": {"page": 1}})
    b = JobSide(record("job_b"), [call("t1.0", "search", params={"q": "x"}), call("t1.1", "lookup"),
                                  call("t1.2", "search", params={"q": "z"}, status="failed",
                                       error={"type": "Boom", "message": "down"}),
                                  call("t2.0", "fetch", instance="eu")],
                {"t1.0": ["r1"], "t2.0": {"page": 2}, "t1.1": 7})
    pairs = diff_jobs(a, b).calls
    assert [(p.tool, p.n, p.a and p.a.id, p.b and p.b.id, p.kind) for p in pairs] == [
        ("search", 1, "c0", "t1.0", "same"),
        ("lookup", 1, None, "t1.1", "only_b"),  # right after the pair made just before it on the right
        ("search", 2, "c1", "t1.2", "changed"),
        ("fetch", 1, "c2", "t2.0", "changed"),
        ("notify", 1, "c3", None, "only_a"),
    ]
    second = pairs[2].to_dict()
    assert second["status_changed"] and second["error_changed"]
    assert second["params"]["changes"] == [{"pointer": "/q", "kind": "changed", "a": "y", "b": "z"}]
    assert second["output"]["changes"] == [{"pointer": "", "kind": "removed", "a": ["r2"], "b": None}]
    assert second["b"]["has_output"] is False and second["a"]["output"] == ["r2"]
    assert pairs[3].output.changes == (Change("/page", "changed", 1, 2),) and pairs[3].instance == "eu"
    diff = diff_jobs(a, b)
    assert diff.call_counts() == {"same": 1, "changed": 2, "only_a": 1, "only_b": 1} and not diff.same


def test_an_output_only_one_call_of_a_pair_has_is_added_or_removed_whole():
    calls = [call("c0", "t", status="failed"), call("c1", "t"), call("c2", "t", status="skipped")]
    a = JobSide(record("job_a"), calls, {"c1": None})
    b = JobSide(record("job_b"), calls, {"c0": 0})
    pairs = diff_jobs(a, b).calls
    assert [p.output.changes for p in pairs] == [(Change("", "added", None, 0),), (Change("", "removed", None, None),),
                                                  ()]


def test_calls_only_the_right_side_made_before_any_pair_come_first():
    a = JobSide(record("job_a"), [call("c0", "x")])
    b = JobSide(record("job_b"), [call("d0", "y"), call("d1", "z"), call("d2", "x")])
    assert [(p.tool, p.kind) for p in diff_jobs(a, b).calls] == [("y", "only_b"), ("z", "only_b"), ("x", "same")]


def test_forked_from_is_shown_when_a_record_names_it():
    body = diff_jobs(JobSide(record("job_a")), JobSide(record("job_b", forked_from="job_a"))).to_dict()
    assert body["a"]["forked_from"] is None and body["b"]["forked_from"] == "job_a"


def test_a_fork_and_its_source_pair_only_the_calls_the_fork_ran_live():
    """The source's calls of the replayed ticks are the source's alone (the fork copied their outputs): left out of
    the pairs, counted, whichever side the fork is on; a fork that then did the same is the same."""
    source = JobSide(record("job_a", result={"r": 1}),  # tick 2's `draft` listed between tick 1's calls
                     [call("c0", "look"), call("c3", "draft"), call("c1", "note"), call("c2", "look")])
    fork_record = record("job_b", result={"r": 1}, forked_from="job_a", fork={"at_tick": 1, "replayed": [
        {"tick": 1, "requests": 1, "tools": ["look", "note"], "cost_usd": 0.0}]})
    fork = JobSide(fork_record, [call("d0", "draft"), call("d1", "look")])
    for left, right in ((source, fork), (fork, source)):
        diff = diff_jobs(left, right)
        assert diff.replayed_calls == 2
        assert [(p.tool, p.kind) for p in diff.calls] == [("draft", "same"), ("look", "same")]
        assert diff.same and diff.to_dict()["replayed_calls"] == 2
    unrelated = JobSide(record("job_c", result={"r": 1}, forked_from="job_x", fork=fork_record["fork"]),
                        [call("e0", "draft"), call("e1", "look")])
    assert diff_jobs(source, unrelated).replayed_calls == 0 and not diff_jobs(source, unrelated).same


def test_call_outputs_come_from_the_jobs_own_finished_calls():
    def finished(call_id: str, status: str = "done", part: dict | None = None, **more: object) -> dict:
        return {"event": "call.finished", "job_id": "j", "call_id": call_id, "tool": "t", "status": status,
                "duration_ms": 1.0, **({"part": part} if part is not None else {}), **more}

    raw = {"type": "tool_result", "results": [{"content": "{\"a\": 1}"}],
           "technical_details": {"raw_result": {"a": 1, "raw": True}}}
    envelopes = [
        {"event": "call.started", "job_id": "j", "call_id": "c0", "tool": "t", "attempt": 1},
        finished("c0", part=raw),
        finished("c1", part={"type": "tool_result", "results": [{"content": "[1, 2]"}]}),
        finished("c2", part={"type": "tool_result", "results": [{"content": "plain words"}]}),
        finished("c3", status="failed", part={"type": "tool_result", "results": [{"content": "boom"}]}),
        finished("c4"),
        finished("c5", part=raw, relayed_from="child"),
    ]
    assert call_outputs(envelopes) == {"c0": {"a": 1, "raw": True}, "c1": [1, 2], "c2": "plain words"}

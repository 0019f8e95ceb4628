"""The shortest end-to-end path: a plan job of two dependent calls through a real worker."""

from __future__ import annotations


def test_dependent_calls_run_in_order_and_the_record_holds_the_state(harness):
    harness.tool("add", params={"a": {"type": "number"}, "b": {"type": "number"}})
    harness.tool("double", params={"x": {"type": "number"}})
    harness.activities.register("add", lambda call: call["a"] + call["b"])
    harness.activities.register("double", lambda call: call["x"] * 2)
    harness.worker()
    record = harness.run({
        "context": [{"type": "state", "data": {"seed": 1}}],
        "calls": [
            {"_tool": "double", "x": "†state.sum", "_outputPath": "†state.doubled"},
            {"_tool": "add", "a": "†state.seed", "b": 2, "_outputPath": "†state.sum"},
        ],
    })
    assert record["status"] == "succeeded", record
    assert record["state"] == {"seed": 1, "sum": 3, "doubled": 6}
    assert record["result"] == record["state"]
    assert record["error"] is None and record["finished_at"]

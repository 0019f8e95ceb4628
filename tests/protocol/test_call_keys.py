"""A tool's `x-concurrency` (docs/tenants.md), pure: its checks with their pointers, a key's value for a call."""

from __future__ import annotations

from agentq.protocol.call_keys import CallKey, call_key, x_concurrency_problems
from agentq.protocol.values import MISSING
from agentq.protocol.views import LogIndex


def test_a_malformed_x_concurrency_names_each_problem_with_its_pointer():
    assert x_concurrency_problems({"key": "†input.account", "limit": 2}) == []
    assert x_concurrency_problems({"key": "shared", "limit": 1}) == []
    assert [p.pointer for p in x_concurrency_problems([1])] == ["/x-concurrency"]
    found = x_concurrency_problems({"key": "", "limit": 0, "per": "x"})
    assert [p.pointer for p in found] == ["/x-concurrency/per", "/x-concurrency/key", "/x-concurrency/limit"]
    assert [p.pointer for p in x_concurrency_problems({"key": "†input.", "limit": True})] == [
        "/x-concurrency/key", "/x-concurrency/limit"]


def test_a_key_is_a_literal_or_a_reference_resolved_for_the_call_and_counted_per_tool():
    literal = call_key("charge", {"x-concurrency": {"key": "bank", "limit": 1}})
    assert literal == CallKey("charge", "bank", 1) and literal.counted(literal.value(None, None)) == "charge:bank"
    ref = call_key("charge", {"x-concurrency": {"key": "†input.account", "limit": 3}})
    assert ref is not None and ref.is_reference
    index = LogIndex([{"type": "data", "kind": "input", "data": {"account": "acme"}}])
    assert ref.counted(ref.value(index, None)) == "charge:acme"
    assert ref.value(LogIndex([]), None) is MISSING and ref.counted(MISSING) == "charge:?"
    assert ref.counted(42) == "charge:42"
    assert call_key("charge", {}) is None and call_key("charge", {"x-concurrency": {"key": 1}}) is None

"""The context windows refusals taught (`Store.learn_context_window`, `context_windows`), the same contract on Redis,
a Redis Cluster and the memory store; and `LearnedWindows`, which reads them back at most once per refresh."""

from __future__ import annotations

from agentq.engine.windows import LearnedWindows
from agentq.store.limits import RedisLimits
from tests.runtime.conftest import Backend


def test_a_learned_window_reaches_every_process_and_only_ever_shrinks(backend: Backend):
    store = backend.store
    fleet_limits = RedisLimits(store)
    assert fleet_limits.context_windows() == {}
    now = [0.0]
    one, other = (LearnedWindows(fleet_limits, 10.0, clock=lambda: now[0]) for _ in range(2))
    assert other.get("claude-a") is None  # read now: nothing learned yet
    assert one.learn("claude-a", 60_000) == 60_000
    assert fleet_limits.context_windows() == {"claude-a": 60_000}
    assert other.get("claude-a") is None  # within its refresh: not read again
    now[0] = 10.0
    assert other.get("claude-a") == 60_000
    assert one.learn("claude-a", 90_000) == 60_000  # a larger window never replaces a smaller one
    assert other.learn("claude-b", 30_000) == 30_000
    assert fleet_limits.context_windows() == {"claude-a": 60_000, "claude-b": 30_000}
    # a process that knew nothing yet: the store keeps the smaller
    fleet_limits.learn_context_window("claude-b", 50_000)
    assert fleet_limits.context_windows() == {"claude-a": 60_000, "claude-b": 30_000}

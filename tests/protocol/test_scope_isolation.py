"""Least privilege of the activity's `context` (docs/protocol.md#scopes): nothing out of its scope is reachable from it.

The context of a call scoped to `["state"]` for instance ① is walked object by object (tests/reachability.py:
attributes, slots, containers, its `emit` callable's bound self and closure); no `secret` message, other kind
or other instance's value is found, while its own values are.
"""

from __future__ import annotations

import pytest

from agentq.errors import ConfigurationError
from agentq.protocol.scopes import Emitter, ScopedContext
from agentq.protocol.views import LogIndex
from tests.reachability import leaks, reachable, types_reachable

SECRET = "s3cr3t-token-7f1c"
OTHER_INSTANCE = "value-of-instance-two-9a2e"
OTHER_KIND = "input-not-in-scope-41b0"
MINE = "value-of-instance-one-c3d8"
SHARED = "global-state-value-5e77"
OUT_OF_SCOPE = [SECRET, OTHER_INSTANCE, OTHER_KIND]

LOG = [
    {"type": "text", "role": "system", "text": "be brief"},
    {"type": "data", "kind": "secret", "data": {"token": SECRET}},
    {"type": "input", "data": {"note": OTHER_KIND}},
    {"type": "state", "data": {"shared": SHARED}},
    {"type": "state", "_instance": "①", "data": {"mine": MINE}},
    {"type": "state", "_instance": "②", "data": {"mine": OTHER_INSTANCE}},
    {"type": "data", "kind": "secret", "_instance": "①", "data": {"token": SECRET}},
]


class Job:
    """Stands for what the runtime holds while a call runs: the job's whole index and a way to publish."""

    def __init__(self) -> None:
        self.index = LogIndex(LOG)
        self.index.view("state", "①")  # cached views, as on a worker that ran calls of this job before
        self.index.view("secret")
        self.published: list = []

    def sink(self, part: object) -> None:  # a bound method of an object reaching the job, like the executor's
        self.published.append(part)


@pytest.fixture
def job() -> Job:
    return Job()


def test_the_walk_finds_what_an_index_or_a_closure_over_it_reaches(job: Job):
    """The walk is able to find a leak: through an object, a bound method's self and a closure."""
    assert leaks(job.index, OUT_OF_SCOPE) == OUT_OF_SCOPE
    assert leaks(job.sink, [SECRET]) == [SECRET]
    index = job.index
    assert leaks(lambda part: index, [SECRET]) == [SECRET]
    naive = ScopedContext.build(job.index, ["state"], "①", emit=job.sink)  # an emit reaching the job
    assert leaks(naive, OUT_OF_SCOPE) == OUT_OF_SCOPE


def test_nothing_out_of_scope_is_reachable_from_the_context(job: Job):
    emitter = Emitter("job_1", "call_1", job.sink)
    context = ScopedContext.build(job.index, ["state"], "①", emit=emitter)
    assert leaks(context, OUT_OF_SCOPE) == []
    assert leaks(context.emit, OUT_OF_SCOPE) == []
    assert leaks(context, [MINE, SHARED]) == [MINE, SHARED]  # the walk does see the context's own values
    held = types_reachable(context)
    assert "agentq.protocol.scopes.Emitter" in held  # the emit callable was walked
    assert not {name for name in held if name.endswith(("LogIndex", "_Identity", "Fold", "Job"))}
    assert all(obj is not job.index and obj is not job for obj in reachable(context))
    emitter.close()


def test_the_in_scope_reads_and_emit_still_work(job: Job):
    emitter = Emitter("job_1", "call_1", job.sink)
    context = ScopedContext.build(job.index, ["state"], "①", emit=emitter)
    assert context["state"] == context.state == {"shared": SHARED, "mine": MINE}
    assert [m["data"] for m in context] == [{"shared": SHARED}, {"mine": MINE}]
    context.emit({"activity_type": "progress"})
    assert job.published == [{"activity_type": "progress"}]
    with pytest.raises(KeyError, match="'secret' is not in this call's scope"):
        context["secret"]
    for name in ("_index", "__dict__", "secret", "input"):
        with pytest.raises(AttributeError):
            getattr(context, name)
    with pytest.raises(TypeError):
        vars(context)
    emitter.close()


def test_an_emit_after_the_call_ended_is_refused(job: Job):
    emitter = Emitter("job_1", "call_7", job.sink)
    context = ScopedContext.build(job.index, [], None, emit=emitter)
    emitter.close()
    with pytest.raises(ConfigurationError, match="call call_7 has ended"):
        context.emit({"activity_type": "progress"})
    assert job.published == []


def test_the_context_shares_no_object_with_the_index(job: Job):
    """Its messages and views are copies: mutating them changes nothing the job's next call sees."""
    context = ScopedContext.build(job.index, ["state"], "①")
    context.state["mine"] = "changed"
    context.messages[1]["data"]["mine"] = "changed too"
    assert job.index.view("state", "①") == {"shared": SHARED, "mine": MINE}
    assert ScopedContext.build(job.index, ["state"], "①").state == {"shared": SHARED, "mine": MINE}

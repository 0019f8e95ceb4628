"""A `Transcript` grown tick by tick gives exactly the turns `tick_messages` builds from the whole log and every
exchange, whatever the order the log and the exchanges grow in (docs/protocol.md#what-the-model-is-sent: the
conversation is append-only)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from agentq.errors import Problem
from agentq.protocol.conversation import Exchange, tick_messages
from agentq.protocol.transcript import Transcript
from agentq.protocol.views import as_index


def message(rng: random.Random, n: int) -> dict:
    kind = rng.choice(["state", "text", "called", "error"])
    if kind == "text":
        return {"type": "text", "role": rng.choice(["user", "system"]), "text": f"note {n}"}
    if kind == "error":
        call = {"_tool": "t", "id": f"c{n}"}
        return {"type": "error", "data": {"call": call, "error": {"type": "E", "message": "m"}}, "_call": call}
    written: dict[str, Any] = {"type": "data", "kind": "state", "data": {f"k{n % 4}": n},
                               "_instance": rng.choice([None, "a"])}
    if kind == "called":
        written.update(_call={"_tool": "t", "id": f"c{n}", "x": n}, _path=f"†state.k{n % 4}", data=n)
    return written


def exchange(n: int, log_length: int, rng: random.Random) -> Exchange:
    problems = (Problem("/calls/0", "bad"),) if rng.random() < 0.2 else ()
    return Exchange(log_length, f"toolu_{n}", {"calls": [], "output": None, "n": n}, problems)


@pytest.mark.parametrize("seed", range(40))
def test_a_grown_transcript_gives_the_turns_tick_messages_builds(seed: int):
    rng = random.Random(seed)
    log = [message(rng, i) for i in range(rng.randint(0, 3))]
    exchanges: list[Exchange] = []
    transcript = Transcript()
    seen_log = seen_exchanges = 0
    for _step in range(30):
        action = rng.random()
        if action < 0.4:
            log += [message(rng, len(log) + i) for i in range(rng.randint(1, 3))]
        elif action < 0.8:
            exchanges.append(exchange(len(exchanges), len(log), rng))
        # otherwise: the same request tried again over the same log
        if rng.random() < 0.8:  # a tick reads what is new (sometimes it skips one, as another process ticked)
            turns = transcript.grow(log[seen_log:], exchanges[seen_exchanges:])
            seen_log, seen_exchanges = len(log), len(exchanges)
            assert list(turns) == list(tick_messages(log, exchanges))
            assert transcript.index.messages == as_index(log).messages


def test_an_exchange_made_over_another_log_than_the_one_built_rebuilds_the_turns():
    """A request tried again after the log grew: its exchange starts after the point the turns were built to."""
    log = [{"type": "text", "role": "user", "text": "go"}]
    transcript = Transcript()
    transcript.grow(log, [])
    grown = [{"type": "data", "kind": "state", "data": {"a": 1}}]
    exchanges = [Exchange(2, "toolu_1", {"calls": [], "output": None})]
    assert list(transcript.grow(grown, exchanges)) == list(tick_messages(log + grown, exchanges))


def test_a_tick_after_a_tick_only_adds_the_new_turns(monkeypatch: pytest.MonkeyPatch):
    """The usual course (each tick reads the exchange the last one wrote, and what the log gained): the turns
    built before are kept, never built again."""
    rebuilt = []
    original = Transcript._rebuild

    def rebuild(self: Transcript) -> None:
        rebuilt.append(1)
        original(self)

    monkeypatch.setattr(Transcript, "_rebuild", rebuild)
    log = [{"type": "text", "role": "user", "text": "go"}]
    transcript = Transcript()
    first = transcript.grow(log, [])
    exchanges = [Exchange(1, "toolu_1", {"calls": [], "output": None})]
    grown = [{"type": "data", "kind": "state", "data": {"a": 1}, "_call": {"_tool": "t", "id": "c1"},
              "_path": "†state.a"}]
    second = transcript.grow(grown, exchanges)
    third = transcript.grow([], [Exchange(2, "toolu_2", {"calls": [], "output": None})])
    assert rebuilt == [1]  # the first grow only
    assert second[:1] == first and third[:3] == second and len(third) == 5
    assert second[1]["content"][0]["id"] == "toolu_1" and second[2]["content"][0]["tool_use_id"] == "toolu_1"

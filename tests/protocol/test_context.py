"""`options.context` (docs/protocol.md#what-the-model-is-sent): its validation, and results over `result_preview_bytes`
shown to the model as a preview and the reference that holds them."""

from __future__ import annotations

import itertools
import json

import pytest

from agentq.errors import JobValidationError
from agentq.protocol.compaction import compaction_point, turn_tokens
from agentq.protocol.context import ContextOptions, appended_items, preview
from agentq.protocol.conversation import Exchange, tick_messages
from agentq.protocol.expressions import parse_ref
from agentq.protocol.jobs import plan_job
from agentq.protocol.records import JobOptions
from agentq.protocol.transcript import Transcript
from agentq.protocol.views import LogIndex
from agentq.protocol.writes import output_messages

AGENT = {"context": [{"type": "text", "text": "Read."}]}


def test_options_context_is_kept_and_read_back():
    plan = plan_job({**AGENT, "options": {"context": {"result_preview_bytes": 2000}}}, tools={})
    assert plan.options["context"] == {"result_preview_bytes": 2000}
    assert JobOptions.of(plan.options).context == ContextOptions(result_preview_bytes=2000)
    assert JobOptions.of({}).context == ContextOptions()  # a job stored before the option existed: no bound
    assert JobOptions.of({"context": {"result_preview_bytes": None}}).context.result_preview_bytes is None
    assert JobOptions.of({}).context.window == 200_000  # the default window
    assert JobOptions.of({"context": {"max_input_tokens": 100_000}}).context.window == 100_000


@pytest.mark.parametrize(("context", "problems"), [
    ("big", ["/options/context: expected an object with any of result_preview_bytes, max_input_tokens, got 'big'"]),
    ({"result_preview_bytes": 63}, ["/options/context/result_preview_bytes: expected an integer >= 64 (bytes) or "
                                    "null, got 63"]),
    ({"result_preview_bytes": True, "window": 1},
     ["/options/context/result_preview_bytes: expected an integer >= 64 (bytes) or null, got True",
      "/options/context/window: unknown context option; they are result_preview_bytes, max_input_tokens"]),
    ({"max_input_tokens": 100, "result_preview_bytes": 100},
     ["/options/context/max_input_tokens: expected an integer >= 4096 (tokens) or null, got 100"]),
    ({"result_preview_bytes": 1.5e3}, ["/options/context/result_preview_bytes: expected an integer >= 64 (bytes) "
                                       "or null, got 1500.0"]),
])
def test_a_bad_options_context_is_rejected_with_each_pointer(context, problems):
    with pytest.raises(JobValidationError) as caught:
        plan_job({**AGENT, "options": {"context": context, "max_ticks": 0}}, tools={})
    stated = [f"{p.pointer}: {p.message}" for p in caught.value.problems]
    assert stated == [*problems, "/options/max_ticks: expected an integer >= 1, got 0"]


def test_a_preview_is_cut_at_a_character_and_only_when_the_value_is_longer():
    assert preview("abc", 3) is None and preview("abc", None) is None
    assert preview("ééé", 3) == "é"  # 6 bytes: the second é is cut in its middle, and left out
    assert preview("abcdef", 4) == "abcd"


def written(call: dict, result, n: int) -> list[dict]:
    return output_messages(call, result, call_id=f"call_{n}", date="2026-01-01T00:00:00Z")


def test_appended_items_are_counted_back_from_the_arrays_length():
    log = [{"type": "state", "data": {"pages": ["p0"]}}]
    push = {"_tool": "read", "_outputPath": "†state.pages", "_outputMethod": "push"}
    concat = {"_tool": "read", "_outputPath": "†state.pages", "_outputMethod": "concat"}
    segment = [*written(push, "p1", 1), *written(concat, ["p2", "p3"], 2), *written(push, "p4", 3),
               *written({**push, "_instance": "a"}, "q", 4)]
    index = LogIndex([*log, *segment])
    assert appended_items(segment, index) == {0: "†state.pages.1", 1: "†state.pages.2 to †state.pages.3",
                                              2: "†state.pages.4", 3: "†state.pages.0"}
    for ref, value in (("†state.pages.1", "p1"), ("†state.pages.4", "p4")):  # what the references resolve to
        assert index.lookup(parse_ref(ref)) == value
    reset = [*segment[:1], *written({"_tool": "t", "_outputPath": "†state.pages"}, ["x"], 5), *segment[2:3]]
    assert appended_items(reset, LogIndex([*log, *reset])) == {2: "†state.pages.1"}  # before the set: unknown


def reading_job(preview_bytes: int | None) -> tuple[dict, ...]:
    log: list[dict] = [{"type": "text", "text": "Read."}]
    exchanges = []
    for n in range(3):
        exchanges.append(Exchange(len(log), f"toolu_{n}", {"calls": [], "output": None}))
        log += written({"_tool": "read", "n": n, "_outputPath": "†state.pages", "_outputMethod": "push"},
                       f"page {n} " + "x" * 5000, n)
    log += written({"_tool": "fetch", "_outputPath": "†state.doc"}, {"body": "y" * 5000}, 9)
    turns = tick_messages(log, exchanges, preview_bytes=preview_bytes)
    assert Transcript(preview_bytes=preview_bytes).grow(log, exchanges) == turns  # the engine's incremental build
    return turns


def test_results_over_the_preview_reach_the_model_as_a_preview_and_their_reference():
    turns = reading_job(100)
    text = json.dumps(turns, ensure_ascii=False)
    assert "x" * 200 not in text and "y" * 200 not in text and len(text) < 4000
    first = turns[2]["content"][0]["content"][0]["text"]
    assert first.startswith('Results of the calls:\n- read {"n": 0} wrote †state.pages (push): "page 0 xxx')
    assert first.endswith("… (a preview: the value has 5009 bytes; it is †state.pages.0, which a call's parameter "
                          "may reference without you reading it)")
    assert "it is †state.pages.2, which" in turns[-1]["content"][0]["content"][0]["text"]
    assert "it is †state.doc, which" in turns[-1]["content"][0]["content"][0]["text"]
    assert len(json.dumps(reading_job(None))) > 20_000  # no bound: every value whole


def pages_job(ticks: int) -> tuple[list[dict], list[Exchange]]:
    log: list[dict] = [{"type": "text", "text": "Read."}]
    exchanges = []
    for n in range(ticks):
        exchanges.append(Exchange(len(log), f"toolu_{n}", {"calls": [{"_tool": "read", "n": n}], "output": None}))
        log += written({"_tool": "read", "n": n, "_outputPath": "†state.pages", "_outputMethod": "push"},
                       f"page {n} " + "x" * 40_000, n)
    return log, exchanges


def test_compaction_point_compacts_all_but_the_last_exchange_once_the_limit_is_passed():
    # limit 75 tokens (COMPACT_AT of 100): the fourth request (10 + 4 * 20 = 90) compacts the first three exchanges
    assert [compaction_point(10, [20] * k, [2] * k, 100) for k in range(1, 7)] == [0, 0, 0, 3, 3, 5]
    assert compaction_point(10, [30, 30, 30], [5, 5, 5], 100) == 2  # 10 + 3 * 30 > 75 at the third request
    assert compaction_point(10, [10, 10], [5, 5], 100) == 0


def test_a_compacted_transcript_is_the_same_grown_tick_by_tick_or_built_at_once():
    log, exchanges = pages_job(12)
    grown = Transcript(max_input_tokens=50_000)
    sizes, points, requests = [], [], []
    for k in range(len(exchanges) + 1):
        end = exchanges[k].log_length if k < len(exchanges) else len(log)
        turns = grown.grow(log[len(grown.log):end], exchanges[len(grown.exchanges):k])
        requests.append(turns)
        sizes.append(sum(turn_tokens(t) for t in turns))
        points.append(grown.compacted)
        built = Transcript(max_input_tokens=50_000)
        assert built.grow(log[:end], exchanges[:k]) == turns and built.saved_tokens == grown.saved_tokens
    assert max(sizes) < 50_000 * 0.75 + 11_000 and points[-1] > 0
    assert grown.saved_tokens > grown.compacted * 9_500  # each compacted page: about 10,000 tokens less
    last = json.dumps(requests[-1], ensure_ascii=False)
    assert f"page 11 {'x' * 39_000}" in last and f"page 0 {'x' * 1000}" not in last  # the newest page whole
    assert "it is †state.pages.0, which" in last  # an older one by its reference
    kept = sum(after[:len(before)] == before for before, after in itertools.pairwise(requests))
    assert kept >= len(requests) - 1 - points.count(points[-1]) and kept >= 8  # the prefix holds between steps

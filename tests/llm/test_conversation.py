"""The conversation builder (agentq.protocol.conversation): append-only ticks, corrective turns, latent requests."""

from __future__ import annotations

import itertools
import json

from agentq.errors import Problem
from agentq.llm.anthropic import request_params
from agentq.llm.base import LLMRequest
from agentq.protocol import LogIndex, compose
from agentq.protocol.conversation import Exchange, context_turn, solution_turn, tick_messages
from agentq.protocol.instructions import (
    LATENT_INSTRUCTIONS,
    PROTOCOL_INSTRUCTIONS,
    job_system_texts,
    latent_system,
    system_blocks,
)
from agentq.protocol.latent_prompt import latent_messages, latent_solution_schema
from agentq.protocol.writes import failure_messages, output_messages

WEATHER = {
    "type": "object", "description": "Current weather of a city.",
    "properties": {"_tool": {"const": "weather"}, "city": {"type": "string"},
                   "_outputPath": {"type": "string", "pattern": "^†"},
                   "_scopes": {"type": "array", "items": {"enum": ["state", "input", "text"]}},
                   "_output": {"type": "object", "properties": {"temp": {"type": "number"}}}},
    "required": ["_tool", "city"],
}

CONTEXT = [
    {"type": "text", "role": "system", "text": "Answer in French."},
    {"type": "text", "text": "Compare the weather in Paris and Oslo."},
    {"type": "input", "data": {"cities": ["Paris", "Oslo"]}},
    {"type": "state", "data": {"employee": "Ann"}, "_instance": "①"},
]


def write(call: dict, result, *, call_id: str, date: str) -> list[dict]:
    return output_messages(call, result, call_id=call_id, date=date)


def run_job(ids: tuple[str, ...], date: str) -> tuple[list[tuple[dict, ...]], list[tuple[str, ...]]]:
    """Three ticks of a job; returns each request's messages and system texts. ``ids``/``date`` vary per run."""
    log = list(CONTEXT)
    exchanges: list[Exchange] = []
    requests, systems = [], []

    def ask() -> None:
        requests.append(tick_messages(log, exchanges))
        systems.append(system_blocks(job_system_texts(log)))

    ask()
    paris = {"_tool": "weather", "city": "Paris", "_outputPath": "†state.paris"}
    oslo = {"_tool": "weather", "city": "Oslo", "_outputPath": "†state.oslo"}
    exchanges.append(Exchange(len(log), "toolu_1", {"calls": [paris, oslo], "output": None}))
    log += write(paris, {"temp": 21}, call_id=ids[0], date=date)
    log += failure_messages({"_tool": "weather", "city": "Oslo"}, call_id=ids[1], error_type="TimeoutError",
                            message="too slow", date=date)
    ask()
    exchanges.append(Exchange(len(log), "toolu_2", {"calls": [{"_tool": "weather"}], "output": None},
                              problems=(Problem("/calls/0/city", "'city' is a required property"),)))
    ask()
    retry = {**oslo, "_instance": "①"}
    exchanges.append(Exchange(len(log), "toolu_3", {"calls": [retry], "output": None}))
    log += write(retry, {"temp": -3}, call_id=ids[2], date=date)
    ask()
    return requests, systems


def test_each_request_is_a_prefix_of_the_next():
    requests, _ = run_job(("call_a", "call_b", "call_c"), "2025-01-01T00:00:00Z")
    assert [len(r) for r in requests] == [1, 3, 5, 7]
    for before, after in itertools.pairwise(requests):
        assert after[:len(before)] == before
        assert json.dumps(after[:len(before)], sort_keys=True) == json.dumps(before, sort_keys=True)


def test_system_and_tools_are_byte_identical_across_ticks_and_runs():
    requests, systems = run_job(("call_a", "call_b", "call_c"), "2025-01-01T00:00:00Z")
    assert len(set(systems)) == 1
    assert systems[0] == (PROTOCOL_INSTRUCTIONS, "Answer in French.")
    schema = compose([WEATHER])
    bodies = [request_params(LLMRequest(model="m", system=systems[i], messages=requests[i],
                                        solution_schema=compose([WEATHER]), max_tokens=10)) for i in range(4)]
    assert len({json.dumps([b["tools"], b["system"]]) for b in bodies}) == 1
    assert bodies[0]["tools"][0]["input_schema"] is schema  # composition is cached: the same object


def test_ids_and_dates_never_reach_the_model():
    first, _ = run_job(("call_a", "call_b", "call_c"), "2025-01-01T00:00:00Z")
    second, _ = run_job(("call_x", "call_y", "call_z"), "2026-06-30T12:00:00Z")
    assert first == second
    text = json.dumps(first[-1], ensure_ascii=False)
    assert "call_a" not in text and "2025" not in text


def test_turns_say_what_the_calls_wrote_and_what_failed():
    requests, _ = run_job(("call_a", "call_b", "call_c"), "2025-01-01T00:00:00Z")
    turns = requests[-1]
    assert turns[0]["role"] == "user"
    first_text = turns[0]["content"][0]["text"]
    assert "Compare the weather" in first_text and "¶input" in first_text and "[①]" in first_text
    assert "Answer in French." not in first_text  # system texts go to `system`
    assert turns[1] == solution_turn("toolu_1", {"calls": [
        {"_tool": "weather", "city": "Paris", "_outputPath": "†state.paris"},
        {"_tool": "weather", "city": "Oslo", "_outputPath": "†state.oslo"}], "output": None})
    [result] = turns[2]["content"]  # the writes, once: the views are not rendered again
    assert result["type"] == "tool_result" and result["tool_use_id"] == "toolu_1" and "is_error" not in result
    report = result["content"][0]["text"]
    assert 'weather {"city": "Paris"} wrote †state.paris (set): {"temp": 21}' in report
    assert 'weather {"city": "Oslo"} failed: TimeoutError: too slow' in report
    assert "## Data" not in json.dumps(turns[2]) and json.dumps(turns[2]).count('\\"temp\\": 21') == 1


def test_a_turn_carries_each_write_once_never_the_views_again() -> None:
    log = [{"type": "text", "text": "Read the pages."}]
    exchanges: list[Exchange] = []
    sizes = []
    for n in range(1, 5):
        exchanges.append(Exchange(len(log), f"toolu_{n}", {"calls": [], "output": None}))
        call = {"_tool": "read", "n": n, "_outputPath": "†state.pages", "_outputMethod": "push"}
        log += write(call, f"page {n} " + "x" * 1000, call_id=f"c{n}", date="d")
        sizes.append(len(json.dumps(tick_messages(log, exchanges))))
        assert json.dumps(tick_messages(log, exchanges)).count("page 1 ") == 1
    growth = [b - a for a, b in itertools.pairwise(sizes)]
    assert max(growth) - min(growth) < 10 and max(growth) < 1500  # linear: one page (1 KB) per tick


def test_messages_no_call_wrote_are_shown_once_with_their_description() -> None:
    log: list[dict] = [{"type": "text", "text": "Go"}]
    exchanges = [Exchange(1, "toolu_1", {"calls": [], "output": None})]
    log += [{"type": "text", "text": "Also check Rome."},
            {"type": "data", "kind": "hint", "data": {"city": "Rome"}, "description": "A hint from the user."},
            {"type": "text", "role": "system", "text": "Be brief."}]
    [result, added] = tick_messages(log, exchanges)[-1]["content"]
    assert result["content"][0]["text"] == "Your calls ran; none of them wrote a result."
    assert added["text"] == ("Added to the context meanwhile:\n\n## Text: user\nAlso check Rome.\n\n"
                             "## Data: ¶hint (written at †hint, merge)\n"
                             '```json\n{\n  "city": "Rome"\n}\n```\nA hint from the user.')


def test_an_invalid_solution_is_sent_back_as_an_error_tool_result_with_pointers():
    requests, _ = run_job(("call_a", "call_b", "call_c"), "2025-01-01T00:00:00Z")
    corrective = requests[2][-1]
    [result] = corrective["content"]
    assert result["tool_use_id"] == "toolu_2" and result["is_error"] is True
    assert "/calls/0/city: 'city' is a required property" in result["content"][0]["text"]
    instanced = requests[3][-1]["content"]
    assert 'weather [①] {"city": "Oslo"} wrote †state.oslo (set): {"temp": -3}' in instanced[0]["content"][0]["text"]
    assert len(instanced) == 1


def test_first_turn_of_an_empty_context_is_never_empty():
    assert context_turn([])["content"][0]["text"]
    assert solution_turn("t", None)["content"][0]["input"] == {}  # invalid JSON answers still make a tool_use


def test_exchange_round_trips_through_a_dict():
    exchange = Exchange(4, "toolu_9", {"calls": []}, problems=(Problem("/output", "bad"),))
    assert Exchange.from_dict(json.loads(json.dumps(exchange.to_dict()))) == exchange


# ------------------------------------------------------------------------------------------- latent calls


def test_latent_schema_without_alternatives_is_the_tool_output():
    call = {"_tool": "weather", "city": "Paris", "_outputPath": "†state.paris"}
    assert latent_solution_schema(WEATHER, call) == {
        "type": "object", "properties": {"output": WEATHER["properties"]["_output"]}, "required": ["output"]}
    composed = compose([WEATHER])["properties"]["calls"]["items"]["anyOf"][0]
    assert latent_solution_schema(composed, call) == latent_solution_schema(WEATHER, call)
    assert latent_solution_schema(WEATHER, {"_tool": "weather"})["properties"]["output"] == \
        WEATHER["properties"]["_output"]


def test_latent_schema_with_alternatives_lets_the_model_pick_its_branch():
    call = {"_tool": "weather", "city": "Paris", "_outputPath": "†state.ok && †state.log || †state.failed"}
    output = WEATHER["properties"]["_output"]
    assert latent_solution_schema(WEATHER, call) == {
        "type": "object",
        "properties": {"output": {"anyOf": [
            {"type": "object", "properties": {"path": {"const": "†state.ok && †state.log"}, "value": output},
             "required": ["path", "value"]},
            {"type": "object", "properties": {"path": {"const": "†state.failed"}, "value": output},
             "required": ["path", "value"]},
        ]}},
        "required": ["output"],
    }


def test_latent_messages_hold_the_scoped_context_the_parameters_and_the_tool_only():
    log = LogIndex([*CONTEXT, {"type": "state", "data": {"employee": "Bob"}, "_instance": "②"},
                    {"type": "data", "kind": "secret", "data": {"pin": 1234}}])
    call = {"_tool": "weather", "city": "Paris", "_instance": "①", "_reasoningForCall": "why"}
    [turn] = latent_messages(log, call, WEATHER, scopes=["state"])
    [block] = turn["content"]
    text = block["text"]
    assert turn["role"] == "user"
    assert "## Data: ¶state [①]" in text and "Ann" in text
    assert "Bob" not in text and "1234" not in text and "cities" not in text  # other instance, other kinds
    assert "Compare the weather" not in text  # text messages only with the `text` scope
    assert '## Data: ¶input\n```json\n{\n  "city": "Paris"\n}\n```' in text
    assert text.endswith("## Tool: weather\nCurrent weather of a city.")
    assert text.index("¶state") < text.index("¶input") < text.index("## Tool")
    [bare] = latent_messages(log, call, WEATHER)
    assert "¶state" not in bare["content"][0]["text"]  # no scopes: the parameters and the tool only
    with_text = latent_messages(log, call, WEATHER, scopes=["text", "input"])[0]["content"][0]["text"]
    assert "Compare the weather" in with_text and "Answer in French." not in with_text


def test_latent_system_is_the_latent_instructions_then_the_job_system_texts():
    assert latent_system(job_system_texts(CONTEXT)) == (LATENT_INSTRUCTIONS, "Answer in French.")


def test_the_sdk_sends_the_built_turns_unchanged(anthropic_env):
    from agentq.llm.anthropic import AnthropicLLM
    from tests.fake_anthropic import Answer

    requests, systems = run_job(("call_a", "call_b", "call_c"), "2025-01-01T00:00:00Z")
    anthropic_env.script(Answer.solution({"calls": [], "output": "done"}))
    provider = AnthropicLLM()
    answer = provider.solve(LLMRequest(model="m", system=systems[-1], messages=requests[-1],
                                       solution_schema=compose([WEATHER]), max_tokens=100))
    provider.close()
    assert answer.solution == {"calls": [], "output": "done"}
    sent = anthropic_env.requests[0].body["messages"]
    # the conversation's breakpoint
    assert sent[-1]["content"][-1].pop("cache_control") == {"type": "ephemeral", "ttl": "5m"}
    assert sent == json.loads(json.dumps(list(requests[-1])))


def test_result_turn_reports_texts_long_parameters_and_silent_calls():
    from agentq.protocol.conversation import result_turn

    call = {"_tool": "note", "body": "x" * 1000, "_outputPath": "†state.n"}
    said = output_messages(call, {"type": "text", "text": "noted"}, call_id="c1", date="d")
    index = LogIndex(said)
    [result] = result_turn("toolu_1", said, index)["content"]
    line = result["content"][0]["text"]
    assert "note {" in line and line.endswith("… said: noted") and len(line) < 400
    [silent] = result_turn("toolu_2", [], LogIndex())["content"]
    assert silent["content"][0]["text"] == "Your calls ran; none of them wrote a result."

"""The incremental call scanner: every complete element of the top-level `calls` array, whatever the chunking."""

from __future__ import annotations

import json
import random

import pytest

from agentq.llm.scanner import CallReporter, CallScanner, iter_calls


def expected_calls(text: str) -> list[tuple[int, dict]]:
    """What a full parse says: the object elements of the top-level `calls`, with their indexes."""
    solution = json.loads(text)
    calls = solution.get("calls") if isinstance(solution, dict) else None
    if not isinstance(calls, list):
        return []
    return [(i, c) for i, c in enumerate(calls) if isinstance(c, dict)]


def scan(pieces: list[str]) -> list[tuple[int, dict]]:
    return list(iter_calls(pieces))


TRICKY = [
    # braces, brackets, commas and quotes inside strings
    {"calls": [{"_tool": "a", "x": "}{][,\"\\"}, {"_tool": "b", "y": "[[[{{{"}], "output": None},
    # escaped quotes and backslashes right before a closing quote
    {"calls": [{"s": "a\\"}, {"s": "\\\"}"}, {"s": "\\\\"}], "output": None},
    # unicode, the dagger references, emoji outside the BMP
    {"calls": [{"_tool": "météo", "city": "†state.ville", "e": "😀 ① 北京"}], "output": "done ✓"},
    # `calls` not first, with an `output` object holding its own `calls` key
    {"output": {"calls": [{"not": "these"}], "x": "calls"}, "calls": [{"_tool": "real"}]},
    # nested `calls` keys inside elements are not the top-level one
    {"calls": [{"_tool": "m", "calls": [{"_tool": "inner"}], "p": {"calls": []}}, {"_tool": "n"}], "output": None},
    # a key that looks like `calls` only after decoding an escape
    {"calls": [{"_tool": "x"}], "output": None, "callsX": [{"no": 1}]},
    # elements that are not objects count for the index but are not reported
    {"calls": [1, "two", [3], {"_tool": "four"}, None, {"_tool": "six"}], "output": None},
    # deep nesting inside an element
    {"calls": [{"a": {"b": {"c": [{"d": [{"e": "}"}]}]}}}, {"z": []}], "output": None},
    # empty calls, empty objects
    {"calls": [], "output": "x"},
    {"calls": [{}, {}], "output": None},
    # a string value at the top level containing "calls": [
    {"note": "\"calls\": [{\"fake\": 1}]", "calls": [{"_tool": "t"}], "output": None},
]


@pytest.mark.parametrize("solution", TRICKY)
@pytest.mark.parametrize("indent", [None, 2])
def test_every_split_position_finds_the_same_calls(solution, indent):
    text = json.dumps(solution, ensure_ascii=False, indent=indent)
    expected = expected_calls(text)
    assert scan([text]) == expected
    for cut in range(len(text) + 1):
        assert scan([text[:cut], text[cut:]]) == expected, f"split at {cut}"


@pytest.mark.parametrize("solution", TRICKY)
def test_one_character_at_a_time_and_random_chunkings(solution):
    text = json.dumps(solution, ensure_ascii=True)  # \uXXXX escapes split anywhere too
    expected = expected_calls(text)
    assert scan(list(text)) == expected
    rng = random.Random(len(text))
    for _ in range(50):
        cuts = sorted(rng.sample(range(len(text) + 1), k=min(len(text), rng.randint(1, 12))))
        pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
        assert scan(pieces) == expected


def test_escaped_key_still_names_calls():
    text = '{"\\u0063alls": [{"_tool": "a"}], "output": null}'
    assert scan(list(text)) == [(0, {"_tool": "a"})]


def test_only_the_first_top_level_calls_array_is_scanned():
    text = '{"calls": [{"_tool": "a"}], "calls": [{"_tool": "b"}]}'
    assert scan([text]) == [(0, {"_tool": "a"})]


def test_calls_that_are_not_an_array_yield_nothing():
    assert scan(['{"calls": {"_tool": "a"}, "x": [{"_tool": "b"}]}']) == []
    assert scan(['{"calls": null, "x": [{"_tool": "b"}]}']) == []
    assert scan(['[{"calls": [{"_tool": "a"}]}]']) == []


def test_whitespace_everywhere():
    text = ' \n{ \t"calls" \n:\n [ \n{ "_tool" : "a" } \n, \r\n { "_tool":"b" }\n ] , "output" : null }\n'
    assert scan(list(text)) == [(0, {"_tool": "a"}), (1, {"_tool": "b"})]


def test_elements_are_handed_out_as_soon_as_they_close():
    scanner = CallScanner()
    assert scanner.feed('{"calls": [{"_tool": "a", "x": [1, 2]') == []
    assert scanner.feed("}") == [(0, '{"_tool": "a", "x": [1, 2]}')]
    assert scanner.feed(', {"_tool"') == []
    assert scanner.feed(': "b"}, 7, {"_tool": "c"}') == [(1, '{"_tool": "b"}'), (3, '{"_tool": "c"}')]
    assert scanner.feed('], "output": {"calls": [{"x": 1}]}}') == []


def test_reporter_skips_elements_that_are_not_valid_json_and_keeps_the_text() -> None:
    seen: list[tuple[int, dict]] = []
    reporter = CallReporter(lambda i, c: seen.append((i, c)))
    text = '{"calls": [{"_tool": "a", "x": tru}, {"_tool": "b"}, {"_tool": "c", "y": 1'  # truncated
    for piece in text:
        reporter.feed(piece)
    assert seen == [(1, {"_tool": "b"})]
    assert reporter.text == text
    assert reporter.reported == [1]


def test_invalid_json_in_the_middle_does_not_stop_later_calls():
    text = '{"calls": [{"a": 1,}, {"b": 2}], "output": null}'
    assert scan([text]) == [(1, {"b": 2})]


def test_work_is_linear_in_the_input():
    """A long solution fed in tiny chunks: every chunk is scanned once (no re-parse of the buffer)."""
    calls = [{"_tool": "t", "i": i, "text": "x" * 200} for i in range(300)]
    text = json.dumps({"calls": calls, "output": None})
    scanner = CallScanner()
    found = []
    for start in range(0, len(text), 3):
        found += scanner.feed(text[start:start + 3])
    assert [json.loads(t) for _, t in found] == calls


def test_random_documents_match_a_full_parse():
    rng = random.Random(7)
    alphabet = ['"', "\\", "{", "}", "[", "]", ",", ":", "a", " ", "é", "calls"]

    def value(depth: int):
        roll = rng.random()
        if depth > 3 or roll < 0.3:
            return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6)))
        if roll < 0.5:
            return rng.choice([None, True, 1.5, -3])
        if roll < 0.75:
            return [value(depth + 1) for _ in range(rng.randint(0, 3))]
        return {"".join(rng.choice(alphabet) for _ in range(rng.randint(0, 4))): value(depth + 1)
                for _ in range(rng.randint(0, 3))}

    for _ in range(200):
        doc = {"calls": [value(1) for _ in range(rng.randint(0, 5))], "output": value(1)}
        if rng.random() < 0.5:
            doc = {"output": doc["output"], "calls": doc["calls"]}
        text = json.dumps(doc, ensure_ascii=rng.random() < 0.5)
        pieces, pos = [], 0
        while pos < len(text):
            step = rng.randint(1, 7)
            pieces.append(text[pos:pos + step])
            pos += step
        assert scan(pieces) == expected_calls(text)

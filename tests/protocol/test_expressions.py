"""expressions.py: the reference grammar of docs/protocol.md#references."""

import pytest

from agentq.errors import ReferenceSyntaxError
from agentq.protocol.expressions import (
    Expression,
    Ref,
    find_references,
    format_ref,
    is_reference,
    parse_expression,
    parse_ref,
    paths_overlap,
)


class TestParse:
    def test_single_reference(self):
        assert parse_expression("†state.user.status") == Expression(((Ref("state", ("user", "status")),),))

    def test_whole_view(self):
        assert parse_expression("†state").alternatives == ((Ref("state"),),)

    def test_array_index_segment_is_kept_as_text(self):
        assert parse_ref("†state.items.1.id") == Ref("state", ("items", "1", "id"))

    def test_fallback(self):
        assert parse_expression("†state.userInput || †state.default").alternatives == (
            (Ref("state", ("userInput",)),), (Ref("state", ("default",)),))

    def test_gate(self):
        assert parse_expression("†state.userProfile && †state.permissions").alternatives == (
            (Ref("state", ("userProfile",)), Ref("state", ("permissions",))),)

    def test_and_binds_tighter_than_or(self):
        expression = parse_expression("†a.x && †b.y || †c && †d.z.0 || †e")
        assert expression.alternatives == (
            (Ref("a", ("x",)), Ref("b", ("y",))), (Ref("c"), Ref("d", ("z", "0"))), (Ref("e"),))
        assert str(expression) == "†a.x && †b.y || †c && †d.z.0 || †e"
        assert expression.refs == (Ref("a", ("x",)), Ref("b", ("y",)), Ref("c"), Ref("d", ("z", "0")), Ref("e"))

    @pytest.mark.parametrize("text", ["†state.a||†state.b", "  †state.a  ||\t†state.b\n", "†state.a ||†state.b"])
    def test_whitespace_tolerant(self, text):
        assert parse_expression(text) == parse_expression("†state.a || †state.b")

    def test_kinds_and_segments(self):
        assert parse_ref("†my-kind_2.a-b.c_d.ÿ.$x") == Ref("my-kind_2", ("a-b", "c_d", "ÿ", "$x"))
        assert parse_ref("†_private") == Ref("_private")

    def test_text_is_kept_but_not_compared(self):
        assert parse_expression(" †state ").text == " †state "
        assert parse_expression(" †state ") == parse_expression("†state")

    def test_cached(self):
        assert parse_expression("†state.cached.x") is parse_expression("†state.cached.x")

    def test_parse_ref_rejects_expressions(self):
        with pytest.raises(ReferenceSyntaxError, match="expected a single reference"):
            parse_ref("†state.a || †state.b")


class TestMalformed:
    @pytest.mark.parametrize("text, what, position", [
        ("†", "expected a kind name", "position 1 (the end)"),
        ("†state.", "empty path segment", "position 7 (the end)"),
        ("†state..a", "empty path segment", "position 7"),
        ("†state.a ||", "expected a reference after '||'", "position 11 (the end)"),
        ("|| †state.a", "expected a reference starting with †, found '||'", "position 0"),
        ("†state.a && ", "expected a reference after '&&'", "position 12 (the end)"),
        ("†state.a || state.b", "expected a reference starting with † after '||', found 'state.b'", "position 12"),
        ("state.a", "expected a reference starting with †, found 'state.a'", "position 0"),
        ("", "expected a reference", "position 0 (the end)"),
        ("   ", "expected a reference", "position 3 (the end)"),
        ("†state.a | †state.b", "unexpected '|', expected '||', '&&' or the end", "position 9"),
        ("†state.a & †state.b", "unexpected '&'", "position 9"),
        ("†state.a †state.b", "unexpected '†'", "position 9"),
        ("† state", "expected a kind name", "position 1"),
        ("†1state", "expected a kind name", "position 1"),
        ("†state.a†b", "unexpected '†' in a reference", "position 8"),
        ("†st$ate", "unexpected '$' in a reference", "position 3"),
        ("†state.a ||| †state.b", "expected a reference starting with † after '||', found '|'", "position 11"),
        ("†state.a.", "empty path segment", "position 9 (the end)"),
    ])
    def test_error_quotes_expression_and_says_what_and_where(self, text, what, position):
        with pytest.raises(ReferenceSyntaxError) as caught:
            parse_expression(text)
        message = str(caught.value)
        assert repr(text) in message
        assert what in message
        assert message.endswith(f"at {position}")

    @pytest.mark.parametrize("value", [None, 3, ["†state"], {"a": 1}])
    def test_non_string(self, value):
        with pytest.raises(ReferenceSyntaxError, match="must be a string"):
            parse_expression(value)


class TestIsReference:
    @pytest.mark.parametrize("value", ["†state", "  †state.a || x", "†", "†state..a"])
    def test_references_including_malformed_ones(self, value):
        assert is_reference(value)

    @pytest.mark.parametrize("value", ["state.a", "a †state", "", None, 1, ["†state"], {"†": 1}])
    def test_not_references(self, value):
        assert not is_reference(value)

    def test_malformed_reference_is_an_error_not_a_literal(self):
        assert is_reference("†state..a")
        with pytest.raises(ReferenceSyntaxError):
            parse_expression("†state..a")


class TestRef:
    def test_str_and_format(self):
        assert str(Ref("state", ("user", "status"))) == "†state.user.status"
        assert format_ref(Ref("state")) == "†state"

    def test_hashable_and_frozen(self):
        assert {Ref("s", ("a",)), Ref("s", ("a",))} == {Ref("s", ("a",))}
        with pytest.raises(AttributeError):
            Ref("s").kind = "t"

    @pytest.mark.parametrize("a, b, overlap", [
        ("†state.user", "†state.user", True),
        ("†state.user", "†state.user.status", True),
        ("†state.user.status", "†state.user", True),
        ("†state", "†state.anything.deep", True),
        ("†state.user", "†state.users", False),
        ("†state.user.name", "†state.user.status", False),
        ("†state.user", "†input.user", False),
    ])
    def test_paths_overlap(self, a, b, overlap):
        assert paths_overlap(parse_ref(a), parse_ref(b)) is overlap
        assert paths_overlap(parse_ref(b), parse_ref(a)) is overlap


def test_find_references_skips_top_level_meta_fields():
    call = {
        "_tool": "t", "_outputPath": "†state.out", "_instance": "①",
        "city": "†input.city", "plain": "Paris",
        "nested": {"deep": [1, " †state.a || †state.b", {"_keep": "†state.c"}], "a/b": "†state.d"},
    }
    assert list(find_references(call)) == [
        ("/city", "†input.city"),
        ("/nested/deep/1", " †state.a || †state.b"),
        ("/nested/deep/2/_keep", "†state.c"),       # only top-level meta fields are literal
        ("/nested/a~1b", "†state.d"),
    ]
    assert list(find_references("†state")) == [("", "†state")]


def test_the_fast_path_for_a_single_reference_parses_exactly_as_the_parser():
    """`_parse` reads a lone reference (no operator, no space) with one regular expression; for every text it
    must answer what the full parser answers, errors included."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from agentq.protocol.expressions import _parse, _Parser

    alphabet = st.sampled_from([*"†ab_-9.|& \t\u00a0\u3000é", "†state.", ".x"])

    @settings(max_examples=400, deadline=None)
    @given(st.lists(alphabet, max_size=12).map("".join))
    def same(text: str) -> None:
        def outcome(parse):
            try:
                result = parse()
                return result, result.text
            except ReferenceSyntaxError as error:
                return "error", str(error)

        _parse.cache_clear()
        assert outcome(lambda: _parse(text)) == outcome(lambda: _Parser(text).expression())

    same()

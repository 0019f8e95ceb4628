"""values.py: MISSING, get_in, copy-on-write set_in, merges and the five output methods
(docs/protocol.md#output-paths)."""

import copy
import pickle
import random
from typing import ClassVar

import pytest

from agentq.errors import UnknownMethodError, WriteError
from agentq.protocol.values import (
    METHODS,
    MISSING,
    Fold,
    apply_write,
    assign,
    check_apply,
    deep_merge,
    get_in,
    is_index,
    pointer_join,
    set_in,
)


class TestMissing:
    def test_falsy_and_repr(self):
        assert not MISSING
        assert repr(MISSING) == "MISSING"
        assert MISSING is not None

    def test_singleton_survives_copy_deepcopy_pickle(self):
        assert copy.copy(MISSING) is MISSING
        assert copy.deepcopy(MISSING) is MISSING
        assert copy.deepcopy({"a": [MISSING]})["a"][0] is MISSING
        assert pickle.loads(pickle.dumps(MISSING)) is MISSING
        assert type(MISSING)() is MISSING


class TestGetIn:
    doc: ClassVar[dict] = {"user": {"name": "Alex", "tags": ["a", "b"], "0": "zero", "n": None}}

    @pytest.mark.parametrize("path, expected", [
        ((), doc),
        (("user", "name"), "Alex"),
        (("user", "tags", "1"), "b"),
        (("user", "0"), "zero"),          # an all-digit segment is a plain key in an object
        (("user", "n"), None),            # null is a present value
    ])
    def test_found(self, path, expected):
        assert get_in(self.doc, path) == expected

    @pytest.mark.parametrize("path", [
        ("user", "email"), ("user", "tags", "2"), ("user", "tags", "x"), ("user", "name", "first"),
        ("user", "n", "x"), ("user", "tags", "-1"), ("user", "tags", "١"),  # noqa: RUF001 (non-ASCII digit is no index)
    ])
    def test_missing(self, path):
        assert get_in(self.doc, path) is MISSING

    def test_missing_root(self):
        assert get_in(MISSING, ("a",)) is MISSING
        assert get_in(MISSING, ()) is MISSING

    def test_is_index(self):
        assert is_index("0") and is_index("12") and not is_index("1a") and not is_index("") and not is_index("²")


class TestSetIn:
    def test_never_mutates_and_copies_only_the_path(self):
        original = {"a": {"b": 1}, "c": {"d": 2}}
        snapshot = copy.deepcopy(original)
        updated = set_in(original, ("a", "b"), 5)
        assert original == snapshot
        assert updated == {"a": {"b": 5}, "c": {"d": 2}}
        assert updated["c"] is original["c"]          # untouched subtree shared
        assert updated["a"] is not original["a"]

    def test_creates_dicts_for_missing_intermediates(self):
        assert set_in(MISSING, ("a", "0", "b"), 1) == {"a": {"0": {"b": 1}}}
        assert set_in({}, ("x",), None) == {"x": None}

    def test_empty_path_replaces(self):
        assert set_in({"a": 1}, (), [1]) == [1]

    def test_list_index(self):
        items = [{"id": "a"}, {"id": "b"}]
        updated = set_in(items, ("1", "id"), "B")
        assert updated == [{"id": "a"}, {"id": "B"}]
        assert items == [{"id": "a"}, {"id": "b"}]
        assert updated[0] is items[0]

    def test_index_equal_to_length_appends(self):
        assert set_in([1], ("1",), 2) == [1, 2]

    def test_index_past_end_is_an_error(self):
        with pytest.raises(WriteError, match="index 3 of an array of length 1"):
            set_in([1], ("3",), 2)

    def test_scalar_in_the_way_becomes_an_object(self):
        assert set_in({"user": "x"}, ("user", "status"), "on") == {"user": {"status": "on"}}
        assert set_in({"user": None}, ("user", "status"), "on") == {"user": {"status": "on"}}
        assert set_in({"xs": [1]}, ("xs", "k"), 2) == {"xs": {"k": 2}}


class TestMerges:
    def test_deep_merge(self):
        a = {"cfg": {"a": {"x": 1}, "b": 2}, "keep": 1}
        b = {"cfg": {"a": {"y": 2}}, "new": [1]}
        snapshot = copy.deepcopy((a, b))
        assert deep_merge(a, b) == {"cfg": {"a": {"x": 1, "y": 2}, "b": 2}, "keep": 1, "new": [1]}
        assert (a, b) == snapshot

    @pytest.mark.parametrize("a, b", [({"a": 1}, [1]), ([1], [2]), ({"a": 1}, None), (MISSING, {"a": 1}), (1, "x")])
    def test_deep_merge_non_objects_replace(self, a, b):
        assert deep_merge(a, b) == b

    def test_assign_is_one_level(self):
        assert assign({"a": {"x": 1}, "b": 2}, {"a": {"y": 2}}) == {"a": {"y": 2}, "b": 2}
        assert assign(MISSING, {"a": 1}) == {"a": 1}
        assert assign({"a": 1}, 3) == 3


class TestApplyWrite:
    def test_methods_constant(self):
        assert METHODS == ("set", "merge", "assign", "push", "concat")

    def test_set(self):
        assert apply_write({"user": {"name": "A", "status": "on"}}, ("user", "status"), "set", "off") == {
            "user": {"name": "A", "status": "off"}}

    def test_merge_and_assign(self):
        current = {"cfg": {"a": {"x": 1}, "b": 2}}
        assert apply_write(current, ("cfg",), "merge", {"a": {"y": 2}}) == {"cfg": {"a": {"x": 1, "y": 2}, "b": 2}}
        assert apply_write(current, ("cfg",), "assign", {"a": {"y": 2}}) == {"cfg": {"a": {"y": 2}, "b": 2}}

    def test_merge_onto_missing_and_root(self):
        assert apply_write(MISSING, (), "merge", {"a": 1}) == {"a": 1}
        assert apply_write({"a": 1}, (), "merge", {"b": 2}) == {"a": 1, "b": 2}

    def test_push_creates_and_appends(self):
        assert apply_write(MISSING, ("log",), "push", "a") == {"log": ["a"]}
        assert apply_write({"log": ["a"]}, ("log",), "push", ["b"]) == {"log": ["a", ["b"]]}

    def test_concat_creates_and_extends(self):
        assert apply_write({}, ("xs",), "concat", [1, 2]) == {"xs": [1, 2]}
        assert apply_write({"xs": [1]}, ("xs",), "concat", [2, 3]) == {"xs": [1, 2, 3]}

    def test_push_onto_null_is_an_error(self):
        with pytest.raises(WriteError, match="cannot push onto log: it holds null"):
            apply_write({"log": None}, ("log",), "push", 1)

    @pytest.mark.parametrize("method", ["push", "concat"])
    def test_push_concat_onto_non_array_names_the_path(self, method):
        with pytest.raises(WriteError, match=r"cannot \w+ onto †state.log: it holds a string, not an array"):
            apply_write({"log": "x"}, ("log",), method, [1], where="†state.log")

    def test_concat_needs_an_array_value(self):
        with pytest.raises(WriteError, match="concat at xs needs an array value, got a number"):
            apply_write({}, ("xs",), "concat", 3)

    def test_push_at_root_onto_object(self):
        with pytest.raises(WriteError, match="the root"):
            apply_write({"a": 1}, (), "push", 1)

    @pytest.mark.parametrize("method", ["append", "SET", "", None])
    def test_unknown_method(self, method):
        with pytest.raises(UnknownMethodError, match="unknown output method"):
            apply_write({}, ("a",), method, 1)

    def test_never_mutates(self):
        current = {"log": ["a"], "cfg": {"a": 1}}
        snapshot = copy.deepcopy(current)
        for method, value in [("push", "b"), ("concat", ["c"]), ("merge", {"a": 2}), ("set", 1), ("assign", {})]:
            apply_write(current, ("log",) if method in ("push", "concat") else ("cfg",), method, value)
        assert current == snapshot


def test_pointer_join_escapes():
    assert pointer_join("", "a/b") == "/a~1b"
    assert pointer_join("/x", "m~n") == "/x/m~0n"
    assert pointer_join("/x", 3) == "/x/3"


class TestFold:
    """`Fold`: `apply_write` semantics, in place only where it owns the containers."""

    def test_writes_in_place_then_copies_once_what_it_handed_out(self):
        fold = Fold()
        for i in range(100):
            fold.write(("items", f"k{i}"), "set", {"n": i})
        assert fold.copied == 0 and len(fold.peek(("items",))) == 100
        items = fold.share(("items",))
        fold.write(("items", "k100"), "set", 1)
        fold.write(("items", "k101"), "set", 2)
        assert fold.copied == 100  # one copy of the shared object, then in place again
        assert len(items) == 100 and len(fold.peek(("items",))) == 102

    def test_a_failed_write_changes_nothing(self):
        fold = Fold()
        fold.write(("log",), "set", "text")
        fold.write(("xs",), "set", [1])
        for path, method, value in [(("log",), "push", 1), (("xs",), "concat", 2), (("xs", "5", "a"), "set", 1)]:
            with pytest.raises(WriteError):
                fold.write(path, method, value)
        with pytest.raises(UnknownMethodError):
            fold.write(("a",), "append", 1)
        assert fold.peek() == {"log": "text", "xs": [1]}

    @pytest.mark.parametrize("seed", range(30))
    def test_equals_copy_on_write_and_never_mutates_inputs_or_shared_values(self, seed):
        rng = random.Random(seed)
        segments = ("a", "b", "0", "1", "2")

        def value(depth=0):
            roll = rng.random()
            if depth < 2 and roll < 0.3:
                return {rng.choice(segments): value(depth + 1) for _ in range(rng.randint(0, 3))}
            if depth < 2 and roll < 0.5:
                return [value(depth + 1) for _ in range(rng.randint(0, 3))]
            return rng.choice([None, 1, "x", True])

        fold, expected, kept = Fold(), MISSING, []
        for _ in range(120):
            path = tuple(rng.choice(segments) for _ in range(rng.randint(0, 3)))
            method, written = rng.choice(METHODS), value()
            kept.append((copy.deepcopy(written), written))
            try:
                expected_after = apply_write(expected, path, method, written)
            except WriteError:
                with pytest.raises(WriteError):
                    check_apply(expected, path, method, written)
                with pytest.raises(WriteError):
                    fold.write(path, method, written)
            else:
                check_apply(expected, path, method, written)
                fold.write(path, method, written)
                expected = expected_after
            assert fold.peek() == expected
            if rng.random() < 0.3:
                shared = fold.share(tuple(rng.choice(segments) for _ in range(rng.randint(0, 2))))
                kept.append((copy.deepcopy(shared), shared))
        for snapshot, handed in kept:
            assert handed == snapshot

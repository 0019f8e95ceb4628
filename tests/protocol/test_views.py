"""views.py: LogIndex views (docs/protocol.md#messages, docs/protocol.md#instancing), resolution and parameter
resolution (docs/protocol.md#references)."""

import copy
import random
from typing import ClassVar

import pytest

from agentq.errors import MessageError, ReferenceSyntaxError
from agentq.protocol.expressions import Ref, parse_expression
from agentq.protocol.values import MISSING
from agentq.protocol.views import LogIndex, fold_write, resolve, resolve_params, write_of


def engine(kind, path, data, method="set", instance=None):
    message = {"type": "data", "kind": kind, "data": data, "_path": path, "_outputMethod": method,
               "_call": {"_tool": "t", "_outputPath": path}, "_date": "2026-01-01T00:00:00Z"}
    if instance is not None:
        message["_instance"] = instance
    return message


class TestLogIndex:
    def test_normalizes_shorthands_on_append(self):
        index = LogIndex([{"type": "input", "input": {"a": 1}}, {"type": "text", "text": "hi"}])
        assert index.messages == [{"type": "data", "kind": "input", "data": {"a": 1}},
                                  {"type": "text", "role": "user", "text": "hi"}]
        assert len(index) == 2

    def test_canonical_messages_are_stored_as_given(self):
        message = {"type": "data", "kind": "state", "data": {"a": 1}}
        index = LogIndex()
        assert index.append(message) is message

    def test_invalid_message_names_its_log_position(self):
        index = LogIndex([{"type": "text", "text": "a"}])
        with pytest.raises(MessageError, match="/1/role"):
            index.append({"type": "text", "role": "bot", "text": "b"})
        assert len(index) == 1

    def test_messages_returns_a_new_list(self):
        index = LogIndex([{"type": "text", "text": "a"}])
        index.messages.clear()
        assert len(index.messages) == 1

    def test_identities_in_first_appearance_order(self):
        index = LogIndex([
            {"type": "state", "data": {}, "_instance": "②"}, {"type": "text", "text": "x"},
            {"type": "input", "data": {}}, {"type": "state", "data": {}},
            {"type": "state", "data": {}, "_instance": "②"},
            {"type": "state", "data": {}, "_instance": "①"},
        ])
        assert index.identities() == [("state", "②"), ("input", None), ("state", None), ("state", "①")]
        assert index.instances() == ["①", "②"]
        assert index.instances("input") == []

    def test_same_kind_merges(self):
        index = LogIndex([{"type": "data", "kind": "user", "data": {"name": "John Doe"}},
                          {"type": "data", "kind": "user", "data": {"age": 30}}])
        assert index.view("user") == {"name": "John Doe", "age": 30}

    def test_context_message_can_set(self):
        index = LogIndex([{"type": "state", "data": {"a": 1}},
                          {"type": "state", "data": {"b": 2}, "_outputMethod": "set"}])
        assert index.view("state") == {"b": 2}

    def test_context_deep_merge(self):
        index = LogIndex([{"type": "state", "data": {"cfg": {"a": 1, "b": {"x": 1}}}},
                          {"type": "state", "data": {"cfg": {"b": {"y": 2}}}}])
        assert index.view("state") == {"cfg": {"a": 1, "b": {"x": 1, "y": 2}}}

    def test_engine_write_at_path(self):
        index = LogIndex([{"type": "data", "kind": "data", "data": {"user": {"name": "Alex", "status": "active"}}},
                          engine("data", "†data.user.status", {"user": {"status": "inactive"}})])
        assert index.view("data") == {"user": {"name": "Alex", "status": "inactive"}}

    def test_engine_write_default_method_is_set(self):
        message = engine("state", "†state.cfg", {"cfg": {"b": 1}})
        del message["_outputMethod"]
        index = LogIndex([{"type": "state", "data": {"cfg": {"a": 1}}}, message])
        assert index.view("state") == {"cfg": {"b": 1}}

    def test_push_onto_non_array_is_skipped_in_the_fold(self):
        index = LogIndex([{"type": "state", "data": {"log": "text"}},
                          engine("state", "†state.log", {"log": "x"}, "push"),
                          engine("state", "†state.n", {"n": 1})])
        assert index.view("state") == {"log": "text", "n": 1}

    def test_write_into_array_element(self):
        index = LogIndex([{"type": "state", "data": {"items": [{"id": "a"}, {"id": "b"}]}},
                          engine("state", "†state.items.1.done", {"items": {"1": {"done": True}}})])
        assert index.view("state") == {"items": [{"id": "a"}, {"id": "b", "done": True}]}

    def test_view_missing_when_nothing_written(self):
        assert LogIndex().view("state") is MISSING
        assert LogIndex().view("state", "①") is MISSING

    def test_fold_is_the_identity_alone(self):
        index = LogIndex([{"type": "state", "data": {"a": 1}}, {"type": "state", "data": {"b": 2}, "_instance": "①"}])
        assert index.fold("state", "①") == {"b": 2}
        assert index.view("state", "①") == {"a": 1, "b": 2}
        assert index.fold("state", "②") is MISSING

    def test_meta_from_newest_message_having_it(self):
        index = LogIndex([
            {"type": "state", "data": {}, "description": "old", "schema": {"type": "object"}},
            {"type": "state", "data": {}, "description": "new"},
            {"type": "state", "data": {}},
            {"type": "state", "data": {}, "_instance": "①", "schema": {"type": "object", "title": "mine"}},
        ])
        assert index.meta("state") == {"description": "new", "schema": {"type": "object"}}
        assert index.meta("state", "①") == {"description": "new", "schema": {"type": "object", "title": "mine"}}
        assert index.meta("input") == {"description": None, "schema": None}

    def test_text_and_error_messages(self):
        error_global = {"type": "error", "data": {"call": {}, "error": {"type": "E", "message": "g"}}}
        error_one = {**error_global, "_instance": "①"}
        error_two = {**error_global, "_instance": "②"}
        index = LogIndex([{"type": "text", "role": "system", "text": "s"}, error_global, error_one, error_two,
                          {"type": "text", "text": "u"}])
        assert [m["text"] for m in index.text_messages()] == ["s", "u"]
        assert index.error_messages() == [error_global, error_one, error_two]
        assert index.error_messages("①") == [error_global, error_one]


class TestInstancing:
    def test_instanced_values_win_whatever_the_order(self):
        index = LogIndex([{"type": "input", "_instance": "①", "data": {"lang": "de"}},
                          {"type": "input", "data": {"lang": "fr", "tone": "formal"}}])
        assert index.view("input", "①") == {"lang": "de", "tone": "formal"}
        assert index.view("input") == {"lang": "fr", "tone": "formal"}

    def test_global_does_not_see_instances_and_instances_do_not_see_each_other(self):
        index = LogIndex([{"type": "state", "_instance": "①", "data": {"text": "Hello"}},
                          {"type": "state", "_instance": "②", "data": {"text": "Bonjour"}}])
        assert index.view("state") is MISSING
        assert index.view("state", "①") == {"text": "Hello"}
        assert index.view("state", "②") == {"text": "Bonjour"}
        assert index.view("state", "③") is MISSING

    def test_instance_view_is_recomputed_when_either_side_changes(self):
        index = LogIndex([{"type": "state", "data": {"a": 1}}, {"type": "state", "_instance": "①", "data": {"b": 1}}])
        first = index.view("state", "①")
        assert index.view("state", "①") is first  # cached
        index.append({"type": "state", "data": {"a": 2}})
        assert index.view("state", "①") == {"a": 2, "b": 1}
        index.append(engine("state", "†state.b", {"b": 5}, instance="①"))
        assert index.view("state", "①") == {"a": 2, "b": 5}
        assert first == {"a": 1, "b": 1}  # handed-out views never change

    def test_instanced_push_acts_on_the_instance_fold(self):
        """docs/protocol.md#messages: instance view = global view deep-merged with the instance's own fold (arrays
        replace)."""
        index = LogIndex([{"type": "state", "data": {"log": ["g"]}},
                          engine("state", "†state.log", {"log": "i"}, "push", instance="①")])
        assert index.view("state", "①") == {"log": ["i"]}


class TestResolve:
    log: ClassVar[list[dict]] = [
        {"type": "data", "kind": "data", "data": {"user": {"name": "Alex", "status": "active"}}},
        engine("data", "†data.user.status", {"user": {"status": "inactive"}}),
        {"type": "state", "data": {"a": None, "items": [{"id": "a"}, {"id": "b"}], "default": "d"}},
    ]

    @pytest.mark.parametrize("expression, expected", [
        ("†data.user.status", "inactive"),
        ("†data.user.name", "Alex"),
        ("†data.user", {"name": "Alex", "status": "inactive"}),
        ("†state.a", None),
        ("†state.items.1.id", "b"),
        ("†state.missing || †state.default", "d"),
        ("†state.default || †state.missing", "d"),
        ("†state.a || †state.default", None),               # null exists, so no fallback
        ("†data.user && †state.default", "d"),
        ("†state.missing && †state.default || †data.user.name", "Alex"),
        ("  †state.default  ", "d"),
    ])
    def test_values(self, expression, expected):
        assert resolve(self.log, expression) == expected
        assert resolve(LogIndex(self.log), parse_expression(expression)) == expected

    @pytest.mark.parametrize("expression", [
        "†data.user.email", "†state.items.2", "†state.missing && †state.default", "†nothing", "†state.x || †state.y",
        "†state.default.x",
    ])
    def test_missing(self, expression):
        assert resolve(self.log, expression) is MISSING

    def test_malformed_expression_raises(self):
        with pytest.raises(ReferenceSyntaxError):
            resolve(self.log, "†state..a")

    def test_instance_fallback(self):
        log = [{"type": "input", "data": {"lang": "fr"}}, {"type": "state", "_instance": "①", "data": {"t": "x"}}]
        assert resolve(log, "†input.lang", "①") == "fr"
        assert resolve(log, "†state.t", "①") == "x"
        assert resolve(log, "†state.t") is MISSING

    def test_lookups_do_not_rescan_the_log(self, monkeypatch):
        import agentq.protocol.views as views

        index = LogIndex([{"type": "state", "data": {"n": i}} for i in range(200)])
        calls = []
        monkeypatch.setattr(views, "fold_write", lambda current, msg: calls.append(1) or fold_write(current, msg))
        resolve(index, "†state.n")
        assert len(calls) == 200
        for _ in range(50):
            assert resolve(index, "†state.n || †state.m") == 199
        assert len(calls) == 200
        index.append({"type": "state", "data": {"n": 200}})
        assert resolve(index, "†state.n") == 200
        assert len(calls) == 201  # only the new write is folded


class TestResolveParams:
    index = LogIndex([
        {"type": "input", "data": {"city": "Paris", "tags": ["a"]}},
        {"type": "state", "data": {"weather": {"temperature": 21}}},
        {"type": "state", "_instance": "①", "data": {"weather": {"temperature": 5}}},
    ])

    def test_replaces_references_anywhere_and_keeps_meta_literal(self):
        params = {
            "_tool": "report", "_outputPath": "†state.report", "_scopes": ["state"], "_instance": None,
            "location": "†input.city",
            "nested": {"t": " †state.weather.temperature ", "list": ["†input.tags", "plain", 3, None]},
            "fallback": "†state.nope || †input.city",
        }
        resolved, unresolved = resolve_params(params, self.index)
        assert unresolved == []
        assert resolved == {
            "_tool": "report", "_outputPath": "†state.report", "_scopes": ["state"], "_instance": None,
            "location": "Paris", "nested": {"t": 21, "list": [["a"], "plain", 3, None]}, "fallback": "Paris",
        }

    def test_reports_missing_pointers_and_keeps_their_text(self):
        params = {"a": "†state.nope", "b": [{"c~/d": "†input.zip"}], "ok": "†input.city"}
        resolved, unresolved = resolve_params(params, self.index)
        assert unresolved == ["/a", "/b/0/c~0~1d"]
        assert resolved == {"a": "†state.nope", "b": [{"c~/d": "†input.zip"}], "ok": "Paris"}

    def test_instance_aware(self):
        resolved, _ = resolve_params({"t": "†state.weather.temperature"}, self.index, "①")
        assert resolved == {"t": 5}

    def test_result_is_independent_of_params_and_log(self):
        params = {"tags": "†input.tags", "keep": {"x": [1]}}
        resolved, _ = resolve_params(params, self.index)
        resolved["tags"].append("mutated")
        resolved["keep"]["x"].append(2)
        assert self.index.view("input")["tags"] == ["a"]
        assert params == {"tags": "†input.tags", "keep": {"x": [1]}}

    def test_malformed_reference_names_its_pointer(self):
        with pytest.raises(ReferenceSyntaxError, match=r"^/q/0: malformed reference expression '†state\.\.a'"):
            resolve_params({"q": ["†state..a"]}, self.index)

    def test_accepts_a_plain_log(self):
        assert resolve_params({"x": "†input.a"}, [{"type": "input", "input": {"a": 1}}]) == ({"x": 1}, [])


def test_write_of():
    assert write_of({"type": "data", "kind": "s", "data": {"a": 1}}) == ((), "merge", {"a": 1})
    assert write_of(engine("s", "†s.a.b", {"a": {"b": 2}}, "push")) == (("a", "b"), "push", 2)


# --- property: an incrementally maintained index equals one rebuilt from scratch -------------------------

KINDS = ("state", "input")
INSTANCES = (None, "①", "②")
KEYS = ("a", "b", "c")


def _random_value(rng, depth=0):
    roll = rng.random()
    if depth < 2 and roll < 0.35:
        return {rng.choice(KEYS): _random_value(rng, depth + 1) for _ in range(rng.randint(1, 3))}
    if roll < 0.5:
        return [rng.randint(0, 9) for _ in range(rng.randint(0, 3))]
    return rng.choice([None, 1, "x", True, rng.randint(0, 99)])


def _random_message(rng):
    kind, instance = rng.choice(KINDS), rng.choice(INSTANCES)
    if rng.random() < 0.3:
        message = {"type": "data", "kind": kind, "data": _random_value(rng)}
        if rng.random() < 0.2:
            message["_outputMethod"] = rng.choice(("set", "merge", "assign"))
    else:
        path = tuple(rng.choice(KEYS) for _ in range(rng.randint(0, 2)))
        method = rng.choice(("set", "merge", "assign", "push", "concat"))
        value = _random_value(rng)
        if method == "concat" and not isinstance(value, list):
            value = [value]
        data = value
        for segment in reversed(path):
            data = {segment: data}
        message = engine(kind, str(Ref(kind, path)), data, method)
    if instance is not None:
        message["_instance"] = instance
    return message


def _all_views(index):
    return {(kind, instance): index.view(kind, instance) for kind in KINDS for instance in INSTANCES}


@pytest.mark.parametrize("seed", range(25))
def test_incremental_views_equal_rebuilt_views(seed):
    rng = random.Random(seed)
    messages = [_random_message(rng) for _ in range(60)]
    pristine = copy.deepcopy(messages)
    index = LogIndex()
    handed_out = []
    for count, message in enumerate(messages, start=1):
        index.append(message)
        if rng.random() < 0.5:  # query at random moments so caches are partly folded
            views = _all_views(index)
            assert views == _all_views(LogIndex(messages[:count]))
            handed_out.append((copy.deepcopy(views), views))
    assert _all_views(index) == _all_views(LogIndex(messages))
    for snapshot, views in handed_out:  # copy-on-write: earlier views never changed
        assert views == snapshot
    assert index.messages == messages == pristine  # the index never mutates the log


@pytest.mark.parametrize("seed", range(25))
def test_lookups_and_scoped_messages_equal_those_of_rebuilt_views(seed):
    """`lookup` walks only its path (for an instance, both folds); `scoped` reads per-identity lists: both
    must give what the whole view and a scan of the log give, and what they hand out never changes."""
    from agentq.protocol.values import get_in

    rng = random.Random(1000 + seed)
    messages = [_random_message(rng) for _ in range(60)]
    for i in rng.sample(range(60), 8):
        messages.insert(i, {"type": "text", "role": "user", "text": f"t{i}"} if i % 2 else
                        {"type": "error", "data": {"call": {}, "error": {"type": "E", "message": str(i)}},
                         **({"_instance": rng.choice(INSTANCES[1:])} if i % 4 else {})})
    index = LogIndex()
    handed_out = []
    for count, message in enumerate(messages, start=1):
        index.append(message)
        rebuilt = LogIndex(messages[:count])
        for _ in range(3):
            kind, instance = rng.choice(KINDS), rng.choice(INSTANCES)
            path = tuple(rng.choice((*KEYS, "0")) for _ in range(rng.randint(0, 3)))
            found = index.lookup(Ref(kind, path), instance)
            assert found == get_in(rebuilt.view(kind, instance), path)
            handed_out.append((copy.deepcopy(found), found))
        kinds, instance = rng.sample((*KINDS, "text", "error"), rng.randint(0, 3)), rng.choice(INSTANCES)
        assert index.scoped(kinds, instance) == [
            m for m in messages[:count] if (m["kind"] if m["type"] == "data" else m["type"]) in kinds
            and m.get("_instance") in (None, instance)]
    for snapshot, value in handed_out:
        assert value == snapshot


def test_threads_sharing_an_index_see_consistent_values():
    import threading

    index = LogIndex([{"type": "state", "data": {"n": 0, "items": {}}}])
    errors = []

    def read() -> None:
        try:
            for _ in range(2000):
                items = index.lookup(Ref("state", ("items",)))
                assert len(items) == len(dict(items))  # never changed while being read
                index.view("state", "①")
        except Exception as error:  # pragma: no cover - reported below
            errors.append(error)

    readers = [threading.Thread(target=read) for _ in range(3)]
    for thread in readers:
        thread.start()
    for i in range(2000):
        index.append(engine("state", f"†state.items.k{i}", {"items": {f"k{i}": i}}))
        if i % 7 == 0:
            index.append(engine("state", "†state.n", {"n": i}, instance="①"))
    for thread in readers:
        thread.join()
    assert errors == []
    assert len(index.view("state")["items"]) == 2000


def test_check_raises_what_applying_the_write_raises_without_handing_out_the_fold():
    from agentq.errors import WriteError
    from agentq.protocol.values import apply_write
    from agentq.protocol.views import write_of
    from agentq.protocol.writes import check_write

    index = LogIndex([{"type": "state", "data": {"log": "text", "xs": [1]}}])
    bad = [engine("state", "†state.log", {"log": 1}, "push"), engine("state", "†state.xs", {"xs": 2}, "concat"),
           engine("state", "†state.xs.3", {"xs": {"3": 1}})]
    for message in bad:
        path, method, value = write_of(message)
        with pytest.raises(WriteError) as expected:  # the copy-on-write definition, over a copy of the fold
            apply_write(LogIndex(index.messages).fold("state"), path, method, value, where=message["_path"])
        with pytest.raises(WriteError) as caught:
            index.check(message)
        assert str(caught.value) == str(expected.value)
        with pytest.raises(WriteError) as through_writes:
            check_write(index, message)
        assert str(through_writes.value) == str(expected.value)
    for message in [engine("state", "†state.xs", {"xs": 2}, "push"), {"type": "text", "text": "x"},
                    engine("state", "†state.log", {"log": 1}, "push", instance="①")]:
        index.check(message)

"""scopes.py: `_scopes`/`_imports` checks, scoped messages and the activity's context (docs/protocol.md#instancing,
docs/protocol.md#scopes)."""

import pytest

from agentq.errors import ConfigurationError, ScopeError, ToolSchemaError
from agentq.protocol.scopes import ScopedContext, effective_imports, effective_scopes, scoped_messages
from agentq.protocol.values import MISSING
from agentq.protocol.views import LogIndex

REQUESTED = {"properties": {"_tool": {"const": "search"},
                            "_scopes": {"type": "array", "items": {"enum": ["state", "input", "text"]}}}}
PROVISIONED = {"properties": {"_tool": {"const": "report"}, "_scopes": {"const": ["state", "input"]}}}
NONE = {"properties": {"_tool": {"const": "plain"}}}

LOG = [
    {"type": "text", "role": "system", "text": "be brief"},
    {"type": "input", "data": {"lang": "fr", "city": "Paris"}},
    {"type": "state", "data": {"n": 1, "shared": True}},
    {"type": "state", "_instance": "①", "data": {"n": 10}},
    {"type": "state", "_instance": "②", "data": {"n": 20}},
    {"type": "input", "_instance": "①", "data": {"lang": "de"}},
    {"type": "data", "kind": "secret", "data": {"token": "x"}},
    {"type": "error", "data": {"call": {}, "error": {"type": "E", "message": "global"}}},
    {"type": "error", "_instance": "②", "data": {"call": {}, "error": {"type": "E", "message": "two"}}},
    {"type": "text", "text": "question"},
]


class TestEffectiveScopes:
    def test_requested_subset(self):
        assert effective_scopes({"_scopes": ["input", "state", "input"]}, REQUESTED) == ["input", "state"]

    def test_requested_default_is_empty(self):
        assert effective_scopes({}, REQUESTED) == []
        assert effective_scopes({"_scopes": None}, REQUESTED) == []

    def test_requested_outside_enum(self):
        with pytest.raises(ScopeError) as caught:
            effective_scopes({"_scopes": ["state", "secret", 3]}, REQUESTED, pointer="/calls/0")
        assert [p.pointer for p in caught.value.problems] == ["/calls/0/_scopes/1", "/calls/0/_scopes/2"]
        assert "'secret' is not one of" in str(caught.value) and "'search'" in str(caught.value)

    def test_not_a_list(self):
        with pytest.raises(ScopeError, match="/_scopes: _scopes must be an array"):
            effective_scopes({"_scopes": "state"}, REQUESTED)

    def test_provisioned_default_and_subset(self):
        assert effective_scopes({}, PROVISIONED) == ["state", "input"]
        assert effective_scopes({"_scopes": ["state", "input"]}, PROVISIONED) == ["state", "input"]
        assert effective_scopes({"_scopes": ["input"]}, PROVISIONED) == ["input"]
        assert effective_scopes({"_scopes": []}, PROVISIONED) == []

    def test_provisioned_superset_is_refused(self):
        with pytest.raises(ScopeError, match="/_scopes/1"):
            effective_scopes({"_scopes": ["state", "secret"]}, PROVISIONED)

    def test_tool_without_scopes(self):
        assert effective_scopes({}, NONE) == []
        assert effective_scopes({}, {}) == []
        with pytest.raises(ScopeError) as caught:
            effective_scopes({"_scopes": ["state"]}, NONE)
        assert caught.value.pointer == "/_scopes"
        assert "tool 'plain' declares no _scopes" in str(caught.value)

    def test_malformed_declaration(self):
        with pytest.raises(ToolSchemaError, match="tool 'bad': _scopes must be"):
            effective_scopes({}, {"properties": {"_tool": {"const": "bad"}, "_scopes": {"type": "string"}}})

    def test_imports_use_the_same_rules(self):
        tool = {"properties": {"_tool": {"const": "m"}, "_imports": {"const": ["input"]}}}
        assert effective_imports({}, tool) == ["input"]
        with pytest.raises(ScopeError, match="/_imports/0"):
            effective_imports({"_imports": ["state"]}, tool)
        with pytest.raises(ScopeError, match="/_imports"):
            effective_imports({"_imports": ["state"]}, NONE)


class TestScopedMessages:
    def test_global_kinds(self):
        assert scoped_messages(LOG, ["input"]) == [
            {"type": "data", "kind": "input", "data": {"lang": "fr", "city": "Paris"}}]

    def test_instance_sees_global_and_own_never_another(self):
        selected = scoped_messages(LogIndex(LOG), ["state", "input", "error"], "①")
        assert [m.get("data") for m in selected] == [
            {"lang": "fr", "city": "Paris"}, {"n": 1, "shared": True}, {"n": 10}, {"lang": "de"},
            {"call": {}, "error": {"type": "E", "message": "global"}}]

    def test_text_and_error_kinds(self):
        assert [m["text"] for m in scoped_messages(LOG, ["text"])] == ["be brief", "question"]
        assert [m["data"]["error"]["message"] for m in scoped_messages(LOG, ["error"], "②")] == ["global", "two"]

    def test_no_scopes_is_an_empty_context(self):
        assert scoped_messages(LOG, []) == []


class TestScopedContext:
    def context(self, kinds=("state", "input"), instance="①", emit=None):
        return ScopedContext.build(LogIndex(LOG), kinds, instance, emit)

    def test_views_by_item_and_attribute(self):
        context = self.context()
        assert context["state"] == {"n": 10, "shared": True}
        assert context.input == {"lang": "de", "city": "Paris"}
        assert (context.kinds, context.instance, len(context)) == (("state", "input"), "①", 4)
        assert [m["kind"] for m in context] == ["input", "state", "state", "input"]

    def test_out_of_scope_kinds(self):
        context = self.context()
        with pytest.raises(KeyError, match="'secret' is not in this call's scope"):
            context["secret"]
        with pytest.raises(AttributeError):
            _ = context.secret
        assert not hasattr(context, "_private")

    def test_kind_in_scope_without_data(self):
        assert self.context(kinds=("result",))["result"] is MISSING

    def test_activity_mutations_do_not_reach_the_log(self):
        index = LogIndex(LOG)
        context = ScopedContext.build(index, ["state"], None)
        context.state["n"] = 99
        context.messages[0]["data"]["n"] = 98
        assert context.state["n"] == 99  # the same copy on every access
        assert index.view("state") == {"n": 1, "shared": True}

    def test_emit(self):
        parts = []
        context = self.context(emit=parts.append)
        context.emit({"type": "activity", "activity_type": "progress"})
        assert parts == [{"type": "activity", "activity_type": "progress"}]
        with pytest.raises(ConfigurationError, match="no event stream"):
            self.context().emit({})

    def test_direct_construction_derives_kinds_from_messages(self):
        index = LogIndex(LOG)
        messages = scoped_messages(index, ["input"], None)
        context = ScopedContext(messages, index)
        assert context.kinds == ("input",)
        assert context.input == {"lang": "fr", "city": "Paris"}
        assert "ScopedContext(kinds=['input']" in repr(context)

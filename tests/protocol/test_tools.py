"""ToolRegistry: registration checks (docs/protocol.md#tools), no partial state, files, lookups."""

from __future__ import annotations

import copy
import json
from typing import Any, TypeVar

import pytest

from agentq.errors import (
    DuplicateRegistrationError,
    RegistrationError,
    ToolSchemaError,
    UnknownMethodError,
    UnknownToolError,
)
from agentq.protocol.tools import Tool, ToolRegistry, check_tool_schema
from agentq.runtime.tool_files import load_tool_dir, load_tool_file


def weather_check() -> dict:
    """Seed 000: the weatherCheck blueprint."""
    return {
        "type": "object",
        "description": "Gets the current weather for a location.",
        "properties": {
            "_tool": {"type": "string", "const": "weatherCheck"},
            "location": {"type": "string"},
            "_output": {
                "type": "object",
                "properties": {"temperature": {"type": "number"}, "conditions": {"type": "string"}},
                "required": ["temperature", "conditions"],
            },
        },
        "required": ["location"],
    }


def sentiment_analysis() -> dict:
    """Seed 002: the sentimentAnalysis basic tool (no `required`)."""
    return {
        "type": "object",
        "description": "Analyzes text sentiment",
        "properties": {
            "_tool": {"type": "string", "const": "sentimentAnalysis"},
            "text": {"type": "string", "description": "Text to analyze"},
            "_output": {
                "type": "object",
                "properties": {"sentiment": {"type": "string"}, "confidence": {"type": "number"}},
            },
        },
    }


def tool(name: str, **props: object) -> dict:
    """A minimal valid tool named `name` with extra properties."""
    return {
        "type": "object",
        "properties": {"_tool": {"type": "string", "const": name}, **props, "_output": {"type": "string"}},
    }


@pytest.fixture
def registry() -> ToolRegistry:
    return ToolRegistry()


# ----------------------------------------------------------------------------------------- happy path


def test_seed_tools_register(registry: ToolRegistry) -> None:
    stored = registry.register("weatherCheck", weather_check())
    registry.register("sentimentAnalysis", sentiment_analysis())
    assert stored == weather_check()
    assert registry.get("weatherCheck") is stored
    assert registry.names == ("sentimentAnalysis", "weatherCheck")
    assert list(registry) == ["sentimentAnalysis", "weatherCheck"]
    assert len(registry) == 2
    assert "weatherCheck" in registry and "nope" not in registry


def test_register_stores_a_deep_copy(registry: ToolRegistry) -> None:
    schema = weather_check()
    stored = registry.register("weatherCheck", schema)
    schema["properties"]["location"]["type"] = "integer"
    schema["description"] = "changed"
    assert stored is not schema
    assert registry.get("weatherCheck")["properties"]["location"] == {"type": "string"}
    assert registry.get("weatherCheck")["description"] == "Gets the current weather for a location."


def test_key_order_is_kept(registry: ToolRegistry) -> None:
    stored = registry.register("weatherCheck", weather_check())
    assert list(stored["properties"]) == ["_tool", "location", "_output"]


def test_version_bumps_on_every_change_and_is_unique_across_registries(registry: ToolRegistry) -> None:
    other = ToolRegistry()
    v0 = registry.version
    assert other.version != v0
    registry.register("weatherCheck", weather_check())
    v1 = registry.version
    registry.register("weatherCheck", weather_check() | {"description": "new"}, replace=True)
    v2 = registry.version
    registry.unregister("weatherCheck")
    v3 = registry.version
    assert v0 < v1 < v2 < v3


def test_identical_reregistration_is_a_no_op(registry: ToolRegistry) -> None:
    first = registry.register("weatherCheck", weather_check())
    version = registry.version
    assert registry.register("weatherCheck", weather_check()) is first
    assert registry.version == version


def test_duplicate_with_other_schema_is_rejected(registry: ToolRegistry) -> None:
    registry.register("weatherCheck", weather_check())
    changed = weather_check() | {"description": "other"}
    with pytest.raises(DuplicateRegistrationError, match="weatherCheck"):
        registry.register("weatherCheck", changed)
    assert registry.get("weatherCheck")["description"] == "Gets the current weather for a location."
    registry.register("weatherCheck", changed, replace=True)
    assert registry.get("weatherCheck")["description"] == "other"


def test_duplicate_error_is_a_registration_error() -> None:
    assert issubclass(DuplicateRegistrationError, RegistrationError)


def test_snapshot_is_a_new_sorted_dict(registry: ToolRegistry) -> None:
    registry.register("weatherCheck", weather_check())
    registry.register("sentimentAnalysis", sentiment_analysis())
    snap = registry.snapshot()
    assert list(snap) == ["sentimentAnalysis", "weatherCheck"]
    snap.pop("weatherCheck")
    assert "weatherCheck" in registry


def test_get_unknown_suggests_close_names(registry: ToolRegistry) -> None:
    registry.register("weatherCheck", weather_check())
    with pytest.raises(UnknownToolError, match=r"did you mean 'weatherCheck'"):
        registry.get("weatherChek")
    with pytest.raises(UnknownToolError, match="unknown tool 'zzz'"):
        registry.get("zzz")


def test_unregister(registry: ToolRegistry) -> None:
    registry.register("weatherCheck", weather_check())
    registry.unregister("weatherCheck")
    assert "weatherCheck" not in registry
    with pytest.raises(UnknownToolError):
        registry.unregister("weatherCheck")


def test_default_instance() -> None:
    assert isinstance(Tool, ToolRegistry)


# ------------------------------------------------------------------------------------------ rejections


E = TypeVar("E", bound=Exception)


def _rejects(registry: ToolRegistry, name: str, schema: object, exc: type[E], *fragments: str) -> E:
    before = (registry.version, registry.snapshot())
    with pytest.raises(exc) as info:
        registry.register(name, schema)  # type: ignore[arg-type]
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    assert (registry.version, registry.snapshot()) == before, "a failed registration changed the registry"
    return info.value


def test_invalid_draft_schema_names_tool_keyword_and_pointer(registry: ToolRegistry) -> None:
    bad = tool("t")
    bad["type"] = "objekt"
    err = _rejects(registry, "t", bad, ToolSchemaError, "'t'", "'type'", "/type", "Draft 2020-12")
    assert err.keyword == "type" and err.pointer == "/type"


def test_invalid_nested_schema_keyword(registry: ToolRegistry) -> None:
    bad = tool("t", location={"type": "string", "minLength": -1})
    _rejects(registry, "t", bad, ToolSchemaError, "'t'", "'minLength'", "/properties/location/minLength")


def test_invalid_regex_pattern(registry: ToolRegistry) -> None:
    bad = tool("t", code={"type": "string", "pattern": "("})
    _rejects(registry, "t", bad, ToolSchemaError, "'pattern'", "/properties/code/pattern")


def test_type_must_be_object(registry: ToolRegistry) -> None:
    bad = tool("t")
    bad["type"] = "array"
    _rejects(registry, "t", bad, ToolSchemaError, "'t'", "'type'", '"object"')
    del bad["type"]
    _rejects(registry, "t", bad, ToolSchemaError, "'type'")


def test_schema_must_be_an_object(registry: ToolRegistry) -> None:
    _rejects(registry, "t", ["not", "a", "dict"], ToolSchemaError, "'t'", "JSON object")


def test_properties_required(registry: ToolRegistry) -> None:
    _rejects(registry, "t", {"type": "object"}, ToolSchemaError, "'t'", "'properties'")


def test_missing_tool_const(registry: ToolRegistry) -> None:
    bad = tool("t")
    del bad["properties"]["_tool"]
    _rejects(registry, "t", bad, ToolSchemaError, "'t'", "'_tool'", "/properties/_tool")
    bad["properties"]["_tool"] = {"type": "string"}
    _rejects(registry, "t", bad, ToolSchemaError, "'_tool'")


def test_tool_const_mismatch_names_both(registry: ToolRegistry) -> None:
    _rejects(registry, "weather", weather_check(), ToolSchemaError, "'weather'", "'weatherCheck'", "'const'",
             "/properties/_tool/const")


def test_missing_output_names_the_fix(registry: ToolRegistry) -> None:
    bad = weather_check()
    del bad["properties"]["_output"]
    _rejects(registry, "weatherCheck", bad, ToolSchemaError,
             "tool 'weatherCheck' has no _output: add properties._output with the JSON Schema of its result")


def test_invalid_output_schema(registry: ToolRegistry) -> None:
    bad = tool("t")
    bad["properties"]["_output"] = {"type": "nothing"}
    _rejects(registry, "t", bad, ToolSchemaError, "'t'", "/properties/_output/type")
    bad["properties"]["_output"] = 3
    _rejects(registry, "t", bad, ToolSchemaError, "'t'", "_output")


@pytest.mark.parametrize("name", ["", "1abc", "has space", "a.b", "a/b", None, 3, "x" * 200])
def test_bad_names(registry: ToolRegistry, name: object) -> None:
    _rejects(registry, name, tool(str(name)), RegistrationError, "invalid tool name")  # type: ignore[arg-type]


def test_non_json_schema_is_rejected(registry: ToolRegistry) -> None:
    bad = tool("t", x={"type": "number", "maximum": float("nan")})
    _rejects(registry, "t", bad, ToolSchemaError, "'t'", "plain JSON")
    bad = tool("t", x={"enum": {1, 2}})
    _rejects(registry, "t", bad, ToolSchemaError, "plain JSON")


def test_output_method_forms(registry: ToolRegistry) -> None:
    registry.register("a", tool("a", _outputMethod={"type": "string", "enum": ["set", "merge", "push"]}))
    registry.register("b", tool("b", _outputMethod={"const": "concat"}))
    err = _rejects(registry, "c", tool("c", _outputMethod={"enum": ["set", "append"]}), UnknownMethodError,
                   "'c'", "'append'", "'enum'")
    assert not isinstance(err, ToolSchemaError)
    _rejects(registry, "c", tool("c", _outputMethod={"type": "string"}), ToolSchemaError,
             "'c'", "'_outputMethod'", "enum")


@pytest.mark.parametrize("field", ["_scopes", "_imports"])
def test_scope_forms(registry: ToolRegistry, field: str) -> None:
    registry.register("a", tool("a", **{field: {"const": ["state", "input"]}}))
    registry.register("b", tool("b", **{field: {"type": "array", "items": {"enum": ["state", "notes"]},
                                                "uniqueItems": True}}))
    _rejects(registry, "c", tool("c", **{field: {"type": "array", "items": {"type": "string"}}}), ToolSchemaError,
             "'c'", repr(field))
    _rejects(registry, "c", tool("c", **{field: {"const": "state"}}), ToolSchemaError, "'c'", "'const'")
    _rejects(registry, "c", tool("c", **{field: {"type": "string"}}), ToolSchemaError, "'c'", repr(field))
    _rejects(registry, "c", tool("c", **{field: {"type": "array", "items": {"enum": ["state", 3]}}}), ToolSchemaError,
             "'enum'")


def test_output_path_forms(registry: ToolRegistry) -> None:
    registry.register("a", tool("a", _outputPath={"type": "string", "pattern": "^†state\\."}))
    registry.register("b", tool("b", _outputPath={"const": "†state.user.status"}))
    registry.register("c", tool("c", _outputPath={"const": "†state.success || †state.error"}))
    registry.register("d", tool("d", _outputPath={"enum": ["†state.a", "†state.b && †notes.b"]}))
    _rejects(registry, "e", tool("e", _outputPath={"const": "†state..a"}), ToolSchemaError, "'e'", "'const'",
             "/properties/_outputPath/const")
    _rejects(registry, "e", tool("e", _outputPath={"const": "state.a"}), ToolSchemaError, "'e'", "'const'")
    _rejects(registry, "e", tool("e", _outputPath={"type": "string", "pattern": "^state"}), ToolSchemaError,
             "'e'", "'pattern'", "^†")
    _rejects(registry, "e", tool("e", _outputPath={"type": "string"}), ToolSchemaError, "'e'", "'pattern'")
    _rejects(registry, "e", tool("e", _outputPath={"type": "number"}), ToolSchemaError, "'e'", "'type'")
    _rejects(registry, "e", tool("e", _outputPath={"enum": ["†state.a", "nope"]}), ToolSchemaError, "'enum'",
             "/properties/_outputPath/enum/1")


def test_module_and_activity_forms(registry: ToolRegistry) -> None:
    registry.register("a", tool("a", _module={"type": "string", "const": "summarize"}))
    registry.register("b", tool("b", _module={"const": "anonymous"}))
    registry.register("c", tool("c", _activity={"type": "string", "const": "weatherCheck"}))
    registry.register("d", tool("d", _activity={"const": ""}))
    _rejects(registry, "e", tool("e", _module={"type": "string"}), ToolSchemaError, "'e'", "'_module'")
    _rejects(registry, "e", tool("e", _module={"const": ""}), ToolSchemaError, "'e'", "'const'")
    _rejects(registry, "e", tool("e", _activity={"enum": ["x"]}), ToolSchemaError, "'e'", "'_activity'")
    _rejects(registry, "e", tool("e", _activity={"const": 3}), ToolSchemaError, "'e'", "'_activity'")
    _rejects(registry, "e", tool("e", _activity={"const": "not valid"}), ToolSchemaError, "'e'", "'const'")


def test_misspelled_meta_field_is_caught(registry: ToolRegistry) -> None:
    _rejects(registry, "e", tool("e", _outputpath={"const": "†state.a"}), ToolSchemaError, "'e'", "'_outputpath'",
             "did you mean '_outputPath'")
    _rejects(registry, "e", tool("e", _scope={"const": ["state"]}), ToolSchemaError, "did you mean '_scopes'")
    registry.register("f", tool("f", _instance={"type": "string"}, _priority={"type": "integer"}))


def test_check_tool_schema_changes_nothing() -> None:
    schema = weather_check()
    original = copy.deepcopy(schema)
    out = check_tool_schema("weatherCheck", schema)
    assert out == original and out is not schema and schema == original


# ----------------------------------------------------------------------------------------------- files


def _write(folder, name: str, schema: object) -> None:
    text = schema if isinstance(schema, str) else json.dumps(schema, ensure_ascii=False)
    (folder / f"{name}.json").write_text(text, encoding="utf-8")


def test_load_dir(registry: ToolRegistry, tmp_path) -> None:
    _write(tmp_path, "weatherCheck", weather_check())
    _write(tmp_path, "sentimentAnalysis", sentiment_analysis())
    (tmp_path / "notes.txt").write_text("ignored")
    (tmp_path / "sub").mkdir()
    _write(tmp_path / "sub", "deep", tool("deep"))
    assert load_tool_dir(registry, tmp_path) == ["sentimentAnalysis", "weatherCheck"]
    assert registry.names == ("sentimentAnalysis", "weatherCheck")


def test_load_dir_is_all_or_nothing(registry: ToolRegistry, tmp_path) -> None:
    registry.register("existing", tool("existing"))
    before = (registry.version, registry.snapshot())
    _write(tmp_path, "a", tool("a"))
    _write(tmp_path, "b", tool("other"))  # stem and const differ
    _write(tmp_path, "c", tool("c"))
    with pytest.raises(ToolSchemaError) as info:
        load_tool_dir(registry, tmp_path)
    assert "b.json" in str(info.value) and "'other'" in str(info.value)
    assert (registry.version, registry.snapshot()) == before


def test_load_dir_invalid_json_names_the_file(registry: ToolRegistry, tmp_path) -> None:
    _write(tmp_path, "a", tool("a"))
    _write(tmp_path, "broken", "{not json")
    with pytest.raises(ToolSchemaError, match=r"broken\.json.*not valid JSON"):
        load_tool_dir(registry, tmp_path)
    assert len(registry) == 0
    _write(tmp_path, "broken", '{"type": NaN}')
    with pytest.raises(ToolSchemaError, match=r"broken\.json"):
        load_tool_dir(registry, tmp_path)


def test_load_dir_bad_method_names_the_file(registry: ToolRegistry, tmp_path) -> None:
    _write(tmp_path, "m", tool("m", _outputMethod={"enum": ["add"]}))
    with pytest.raises(UnknownMethodError, match=r"m\.json"):
        load_tool_dir(registry, tmp_path)


def test_load_dir_duplicates(registry: ToolRegistry, tmp_path) -> None:
    registry.register("a", tool("a"))
    _write(tmp_path, "a", tool("a", extra={"type": "string"}))
    _write(tmp_path, "b", tool("b"))
    with pytest.raises(DuplicateRegistrationError, match=r"a\.json"):
        load_tool_dir(registry, tmp_path)
    assert registry.names == ("a",)
    assert load_tool_dir(registry, tmp_path, replace=True) == ["a", "b"]
    assert "extra" in registry.get("a")["properties"]


def test_load_dir_same_files_twice_is_idempotent(registry: ToolRegistry, tmp_path) -> None:
    _write(tmp_path, "a", tool("a"))
    load_tool_dir(registry, tmp_path)
    version = registry.version
    assert load_tool_dir(registry, tmp_path) == ["a"]
    assert registry.version == version


def test_load_dir_missing_folder(registry: ToolRegistry, tmp_path) -> None:
    with pytest.raises(RegistrationError, match="does not exist"):
        load_tool_dir(registry, tmp_path / "nope")


def test_load_file(registry: ToolRegistry, tmp_path) -> None:
    _write(tmp_path, "weatherCheck", weather_check())
    assert load_tool_file(registry, tmp_path / "weatherCheck.json") == "weatherCheck"
    assert registry.get("weatherCheck") == weather_check()
    with pytest.raises(ToolSchemaError, match=r"missing\.json"):
        load_tool_file(registry, tmp_path / "missing.json")


def test_unicode_file(registry: ToolRegistry, tmp_path) -> None:
    _write(tmp_path, "fr", tool("fr", ville={"type": "string", "description": "Ville à vérifier †"}))
    load_tool_dir(registry, tmp_path)
    assert registry.get("fr")["properties"]["ville"]["description"] == "Ville à vérifier †"


def test_the_metaschema_check_is_remembered_for_a_schema_seen_before_but_failures_are_not(monkeypatch) -> None:
    from agentq.protocol import tool_schema as tools_module

    checks: list[dict] = []
    original = tools_module.Draft202012Validator.check_schema

    def check_schema(schema: dict) -> None:
        checks.append(schema)
        original(schema)

    monkeypatch.setattr(tools_module.Draft202012Validator, "check_schema", check_schema)
    schema: dict[str, Any] = {"type": "object", "description": "cached check",
              "properties": {"_tool": {"const": "cachedCheck"}, "q": {"type": "string", "minLength": 1},
                             "_output": {"type": "object"}}}
    for _ in range(3):
        ToolRegistry().register("cachedCheck", schema)
    assert len(checks) <= 1  # none when an earlier test already checked this very schema
    bad = {**schema, "properties": {**schema["properties"], "q": {"type": "strin"}}}
    for _ in range(2):
        with pytest.raises(ToolSchemaError, match="cachedCheck"):
            ToolRegistry().register("cachedCheck", bad)
    assert sum(1 for c in checks if c == bad) == 2  # a failing schema is checked (and reported) every time

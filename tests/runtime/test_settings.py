"""List settings read from the environment: a JSON array or comma-separated, one parser for all of them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, get_origin

import pytest
from pydantic_settings import NoDecode

from agentq.errors import ConfigurationError
from agentq.settings import Settings, parse_list

ROOT = Path(__file__).resolve().parents[2]

# every list setting, with what each form's items become
LIST_SETTINGS = {
    "AGENTQ_TOOLS_DIRS": ("tools_dirs", Path),
    "AGENTQ_MODULE_DIRS": ("module_dirs", Path),
    "AGENTQ_MODULE_URL_ALLOWLIST": ("module_url_allowlist", str),
    "AGENTQ_API_TOKENS": ("api_tokens", str),
    "AGENTQ_WEBHOOK_ALLOWLIST": ("webhook_allowlist", str),
}


@pytest.fixture(autouse=True)
def no_agentq_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in LIST_SETTINGS:
        monkeypatch.delenv(variable, raising=False)


def test_every_list_setting_is_covered_and_read_by_the_one_parser() -> None:
    """A list field added later without `EnvList` would be JSON-decoded by pydantic-settings on its own."""
    lists = {name for name, field in Settings.model_fields.items() if get_origin(field.annotation) is list}
    assert lists == {name for name, _ in LIST_SETTINGS.values()}
    for name in lists:
        assert any(meta is NoDecode or isinstance(meta, NoDecode) for meta in Settings.model_fields[name].metadata)


@pytest.mark.parametrize("variable", LIST_SETTINGS)
@pytest.mark.parametrize("raw", ['["a", "b c"]', "a,b c", ' [ "a" , " b c " ] ', " a , b c ,", "a,,b c"])
def test_both_forms_give_the_same_items(monkeypatch: pytest.MonkeyPatch, variable: str, raw: str) -> None:
    name, item = LIST_SETTINGS[variable]
    monkeypatch.setenv(variable, raw)
    assert getattr(Settings(), name) == [item("a"), item("b c")]


@pytest.mark.parametrize("variable", LIST_SETTINGS)
@pytest.mark.parametrize("raw", ["", "   ", "[]", " , ", '["", " "]'])
def test_empty_values_are_empty_lists(monkeypatch: pytest.MonkeyPatch, variable: str, raw: str) -> None:
    name, _ = LIST_SETTINGS[variable]
    monkeypatch.setenv(variable, raw)
    assert getattr(Settings(), name) == []


def test_a_json_array_of_tokens_is_never_one_literal_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTQ_API_TOKENS", '["t1","t2"]')
    assert Settings().api_tokens == ["t1", "t2"]


def test_a_single_item_and_json_items_holding_commas(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTQ_TOOLS_DIRS", "/srv/tools")
    monkeypatch.setenv("AGENTQ_MODULE_DIRS", '["/srv/a,b", "/srv/c"]')
    settings = Settings()
    assert settings.tools_dirs == [Path("/srv/tools")]
    assert settings.module_dirs == [Path("/srv/a,b"), Path("/srv/c")]


def test_keywords_still_override_as_lists_or_strings() -> None:
    assert Settings(api_tokens=["x"]).api_tokens == ["x"]
    as_strings: dict[str, Any] = {"api_tokens": "x, y", "module_url_allowlist": '["h.example"]'}  # untyped callers
    settings = Settings(**as_strings)
    assert settings.api_tokens == ["x", "y"] and settings.module_url_allowlist == ["h.example"]


def test_unset_lists_keep_their_defaults() -> None:
    settings = Settings()
    assert settings.tools_dirs == [] and settings.api_tokens == [] and settings.module_url_allowlist == []
    assert settings.module_dirs == [Path("config/modules")]


@pytest.mark.parametrize("variable", LIST_SETTINGS)
@pytest.mark.parametrize(("raw", "problem"), [
    ('["t1","t2"', "is not valid JSON"),
    ("[t1, t2]", "is not valid JSON"),
    ('["t1", 2]', "is not a JSON array of strings"),
    ('[["t1"]]', "is not a JSON array of strings"),
    ("[", "is not valid JSON"),
])
def test_a_broken_json_array_is_refused_naming_the_variable_and_the_forms(
        monkeypatch: pytest.MonkeyPatch, variable: str, raw: str, problem: str) -> None:
    monkeypatch.setenv(variable, raw)
    with pytest.raises(ConfigurationError) as caught:
        Settings()
    message = str(caught.value)
    assert variable in message and problem in message
    assert "JSON array of strings" in message and f"{variable}=a,b" in message
    assert "\n" not in message


def test_the_refusal_never_shows_the_value() -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse_list("AGENTQ_API_TOKENS", '["s3cret-token",')
    assert "s3cret" not in str(caught.value)


def test_every_broken_list_is_named_in_one_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTQ_API_TOKENS", '["t1",')
    monkeypatch.setenv("AGENTQ_TOOLS_DIRS", "[1]")
    with pytest.raises(ConfigurationError) as caught:
        Settings()
    assert "AGENTQ_API_TOKENS" in str(caught.value) and "AGENTQ_TOOLS_DIRS" in str(caught.value)


def test_the_cli_refuses_a_broken_list_with_one_line_and_no_traceback() -> None:
    environment = {"PATH": "/usr/bin:/bin", "AGENTQ_API_TOKENS": '["t1",'}
    result = subprocess.run([sys.executable, "-m", "agentq.cli", "status", "some-job"], cwd=ROOT, env=environment,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("agentq: error: invalid settings: AGENTQ_API_TOKENS"), lines

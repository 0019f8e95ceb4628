"""A tokens file (`AGENTQ_API_TOKENS=@/path`) whose top level is not an object of tokens: the error shows the
expected shape as JSON (balanced braces, not the escaped `}}}}` of a format string) and says what it got."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentq.api.auth import tokens_file
from agentq.errors import ConfigurationError


@pytest.mark.parametrize(("content", "got"), [
    ("[1,2]", "an array"), ("{}", "an empty object"), ('"abcdefghijklmnopqrstu"', "a string"), ("7", "a number"),
    ("null", "null"),
])
def test_a_tokens_file_that_is_not_an_object_of_tokens_says_so_in_plain_json(tmp_path: Path, content, got):
    path = tmp_path / "tokens.json"
    path.write_text(content)
    with pytest.raises(ConfigurationError) as raised:
        tokens_file(path)
    assert str(raised.value) == (
        f'AGENTQ_API_TOKENS file {path}: expected an object of tokens, {{"<token>": {{"tenant": "...", '
        f'"role": "admin" | "submit" | "read"}}}}, got {got}')
    assert "}}" not in str(raised.value).replace('"read"}}', "")
    assert "abcdefghijklmnopqrstu" not in str(raised.value)  # what the file holds is never printed

"""`AGENTQ_LLM_LIMITS` (docs/rate-limits.md): the models' fleet-wide rate limits as JSON, any subset per model, `"*"`
for every other model. A broken value stops the process at start with one line naming the setting and every problem."""

from __future__ import annotations

import pytest

from agentq.errors import ConfigurationError
from agentq.protocol.limits import ModelLimits, limits_for, limits_problems
from agentq.settings import Settings
from tests.runtime.test_settings_governance import one_error_line, run_cli


@pytest.fixture(autouse=True)
def no_limits_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTQ_LLM_LIMITS", raising=False)


def test_the_limits_are_read_per_model_with_a_default_for_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTQ_LLM_LIMITS", '{"claude-sonnet-4-6": {"requests_per_minute": 50, '
                                            '"output_tokens_per_minute": 8000}, "*": {"input_tokens_per_minute": 1}}')
    limits = Settings().model_limits
    assert limits_for(limits, "claude-sonnet-4-6") == ModelLimits(requests_per_minute=50,
                                                                  output_tokens_per_minute=8000)
    assert limits_for(limits, "claude-haiku-4-5") == ModelLimits(input_tokens_per_minute=1)
    monkeypatch.setenv("AGENTQ_LLM_LIMITS", "")
    assert Settings().model_limits == {} and limits_for({}, "any") == ModelLimits()


@pytest.mark.parametrize(("raw", "problem"), [
    ("{rpm: 3}", "AGENTQ_LLM_LIMITS is not valid JSON (Expecting property name enclosed in double quotes at column 2)"),
    ("[1]", "AGENTQ_LLM_LIMITS: /: expected an object of models, got list"),
    ('{"m": {"requests_per_minute": 0, "tokens_per_minute": 5}, "*": {}, "a/b": 3}',
     "AGENTQ_LLM_LIMITS: /m/requests_per_minute: expected an integer > 0, got 0; /m/tokens_per_minute: unknown "
     "limit; a model has requests_per_minute, input_tokens_per_minute, output_tokens_per_minute; /*: expected an "
     "object with any of requests_per_minute, input_tokens_per_minute, output_tokens_per_minute, got {}; /a~1b: "
     "expected an object with any of requests_per_minute, input_tokens_per_minute, output_tokens_per_minute, got "
     "int"),
    ('{"m": {"input_tokens_per_minute": 1.5, "output_tokens_per_minute": true}}',
     "/m/input_tokens_per_minute: expected an integer > 0, got 1.5; /m/output_tokens_per_minute: expected an "
     "integer > 0, got true"),
])
def test_a_broken_value_is_refused_naming_the_variable_and_every_problem(monkeypatch: pytest.MonkeyPatch, raw: str,
                                                                        problem: str) -> None:
    monkeypatch.setenv("AGENTQ_LLM_LIMITS", raw)
    with pytest.raises(ConfigurationError) as caught:
        Settings()
    assert problem in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(ConfigurationError):
        Settings(llm_limits={"m": {"requests_per_minute": "many"}})


def test_problems_name_their_json_pointer() -> None:
    assert [str(p) for p in limits_problems({"": {"requests_per_minute": 1}})] == [
        "/: a model's name may not be empty"]
    assert limits_problems({"m": {"requests_per_minute": 1}, "*": {"output_tokens_per_minute": 2}}) == []


def test_a_process_with_broken_limits_stops_at_start_with_one_line() -> None:
    line = one_error_line(run_cli("dispatcher", AGENTQ_LLM_LIMITS='{"claude-sonnet-4-6": {"requests_per_minute": -5}}'))
    assert line == ("agentq: error: invalid settings: AGENTQ_LLM_LIMITS: /claude-sonnet-4-6/requests_per_minute: "
                    "expected an integer > 0, got -5")

"""The model-governance settings (docs/rate-limits.md#budgets): `AGENTQ_DEFAULT_BUDGET` and `AGENTQ_LLM_PRICES`. A
broken one stops the process at start with one line naming the setting and the problem."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agentq.errors import ConfigurationError
from agentq.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def no_governance_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("AGENTQ_DEFAULT_BUDGET", "AGENTQ_LLM_PRICES"):
        monkeypatch.delenv(variable, raising=False)


def test_the_default_budget_is_read_as_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTQ_DEFAULT_BUDGET", '{"max_cost_usd": 2.5, "max_requests": 40}')
    assert Settings().default_budget == {"max_cost_usd": 2.5, "max_requests": 40}
    monkeypatch.setenv("AGENTQ_DEFAULT_BUDGET", "")
    assert Settings().default_budget is None
    assert Settings(default_budget={"max_requests": 1}).default_budget == {"max_requests": 1}


@pytest.mark.parametrize(("raw", "problem"), [
    ("{max_requests: 3}", "AGENTQ_DEFAULT_BUDGET is not valid JSON"),
    ("[1]", "AGENTQ_DEFAULT_BUDGET: /: a budget is an object"),
    ('{"max_requests": -1, "max_money": 3}',
     "AGENTQ_DEFAULT_BUDGET: /max_requests: expected an integer >= 0, got -1; /max_money: unknown limit"),
])
def test_a_broken_default_budget_is_refused_naming_the_variable(monkeypatch: pytest.MonkeyPatch, raw: str,
                                                                 problem: str) -> None:
    monkeypatch.setenv("AGENTQ_DEFAULT_BUDGET", raw)
    with pytest.raises(ConfigurationError) as caught:
        Settings()
    assert problem in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(ConfigurationError):
        Settings(default_budget={"max_cost_usd": "a lot"})


def run_cli(*args: str, **environment: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agentq.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "AGENTQ_REDIS_URL": "redis://127.0.0.1:1/0",
                                           **environment})


def one_error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_a_process_with_a_broken_default_budget_stops_at_start_with_one_line() -> None:
    line = one_error_line(run_cli("dispatcher", AGENTQ_DEFAULT_BUDGET='{"max_cost_usd": -1}'))
    assert line == ("agentq: error: invalid settings: AGENTQ_DEFAULT_BUDGET: /max_cost_usd: expected a number of "
                    "US dollars >= 0, got -1")


def test_a_dispatcher_with_a_broken_price_file_stops_at_start_with_one_line(tmp_path: Path) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text('{"claude-sonnet-4-6": {"input": "three", "output": 15}}', encoding="utf-8")
    line = one_error_line(run_cli("dispatcher", AGENTQ_LLM_PRICES=str(prices)))
    assert line == (f"agentq: error: AGENTQ_LLM_PRICES={prices}: /claude-sonnet-4-6/input: expected a number >= 0 "
                    "(USD per million tokens), got 'three'")
    line = one_error_line(run_cli("dispatcher", AGENTQ_LLM_PRICES=str(tmp_path / "missing.json")))
    assert line.startswith(f"agentq: error: AGENTQ_LLM_PRICES={tmp_path / 'missing.json'}: cannot read the file")

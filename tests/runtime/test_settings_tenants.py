"""`AGENTQ_TENANTS` (docs/tenants.md): the tenants' limits, as JSON or `@/path` of a JSON file. A broken value stops the
process at start with one line naming the setting and every problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentq.errors import ConfigurationError
from agentq.protocol.tenants import TenantLimits
from agentq.settings import Settings
from tests.runtime.test_settings_governance import one_error_line, run_cli


@pytest.fixture(autouse=True)
def no_tenants_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTQ_TENANTS", raising=False)


def test_limits_are_read_inline_or_from_a_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AGENTQ_TENANTS", '{"acme": {"jobs_per_minute": 30, "max_active_jobs": 5}, "globex": {}}')
    assert Settings().tenant_limits == {"acme": TenantLimits(jobs_per_minute=30, max_active_jobs=5),
                                        "globex": TenantLimits()}
    path = tmp_path / "tenants.json"
    path.write_text('{"acme": {"jobs_per_minute": 0.5}}')
    monkeypatch.setenv("AGENTQ_TENANTS", f"@{path}")
    assert Settings().tenant_limits == {"acme": TenantLimits(jobs_per_minute=0.5)}
    monkeypatch.setenv("AGENTQ_TENANTS", '{"acme": {"weight": 2.5, "max_running_calls": 4}}')
    assert Settings().tenant_limits == {"acme": TenantLimits(weight=2.5, max_running_calls=4)}
    monkeypatch.setenv("AGENTQ_TENANTS", "")
    assert Settings().tenant_limits == {}


@pytest.mark.parametrize(("raw", "problem"), [
    ("{acme: 1}", "AGENTQ_TENANTS is not valid JSON (Expecting property name enclosed in double quotes at column 2)"),
    ("[]", 'AGENTQ_TENANTS: expected an object of tenants'),
    ('{"a b": {}, "acme": {"jobs_per_minute": 0, "max_active_jobs": 1.5, "burst": 3}, "x": {"weight": -2, '
     '"max_running_calls": 2.5}, "y": 4}',
     "AGENTQ_TENANTS: 'a b' is not a tenant name: 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or "
     "digit; acme: jobs_per_minute must be a number above 0, not 0; acme: max_active_jobs must be a whole number, not "
     "1.5; acme: unknown limit 'burst' (jobs_per_minute, max_active_jobs, weight, max_running_calls); x: weight must "
     "be a number above 0, not -2; x: max_running_calls must be a whole number, not 2.5; y: expected "
     "an object of limits"),
    ("@/nonexistent/tenants.json", "AGENTQ_TENANTS: cannot read /nonexistent/tenants.json"),
])
def test_a_broken_value_is_refused_naming_the_variable_and_every_problem(monkeypatch: pytest.MonkeyPatch, raw: str,
                                                                        problem: str) -> None:
    monkeypatch.setenv("AGENTQ_TENANTS", raw)
    with pytest.raises(ConfigurationError) as caught:
        Settings()
    assert problem in str(caught.value) and "\n" not in str(caught.value)


def test_a_process_with_broken_tenants_stops_at_start_with_one_line() -> None:
    line = one_error_line(run_cli("api", AGENTQ_TENANTS='{"acme": {"max_active_jobs": -1}}'))
    assert line == ("agentq: error: invalid settings: AGENTQ_TENANTS: acme: max_active_jobs must be a number above 0, "
                    "not -1")

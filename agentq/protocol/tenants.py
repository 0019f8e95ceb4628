"""Tenants (docs/tenants.md): every job belongs to one, and an API token acts for one tenant in one role.

A tenant's name becomes part of Redis keys (its job listing) and of metric labels, so it is a short plain name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

DEFAULT_TENANT = "default"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class Role(StrEnum):
    """What a token may do: `admin` acts on every tenant's jobs; `submit` submits and acts on its tenant's jobs;
    `read` only reads them."""

    ADMIN = "admin"
    SUBMIT = "submit"
    READ = "read"


def tenant_problem(name: object) -> str | None:
    """Why `name` cannot name a tenant, or None when it can."""
    if not isinstance(name, str):
        return "a tenant is a string"
    if not _NAME.fullmatch(name):
        return (f"{name!r} is not a tenant name: 1 to 64 letters, digits, '_', '.' or '-', starting with a letter "
                "or digit")
    return None


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request acts for: a tenant and a role."""

    tenant: str = DEFAULT_TENANT
    role: Role = Role.ADMIN

    @property
    def is_admin(self) -> bool:
        return self.role is Role.ADMIN

    @property
    def may_write(self) -> bool:
        """Submit, cancel and decide on calls."""
        return self.role is not Role.READ

    def sees(self, tenant: str) -> bool:
        """Whether a job of `tenant` exists for this principal (any other is "not found", never "forbidden")."""
        return self.is_admin or tenant == self.tenant


@dataclass(frozen=True, slots=True)
class TenantLimits:
    """What `AGENTQ_TENANTS` limits for one tenant (docs/tenants.md); None: not limited. Checked when a job is
    submitted, by every process that submits (the API, clients, the submit task), through one step in the store."""

    jobs_per_minute: float | None = None  # a burst of up to this many, then one every 60 / jobs_per_minute s
    max_active_jobs: int | None = None  # jobs submitted and not yet ended (expired ones are not counted)
    weight: float = 1.0  # its share of the places of every activity queue against other tenants with calls waiting
    max_running_calls: int | None = None  # calls admitted to their queues and not yet ended

    @property
    def limited(self) -> bool:
        return self.jobs_per_minute is not None or self.max_active_jobs is not None


_LIMITS = ("jobs_per_minute", "max_active_jobs", "weight", "max_running_calls")
_WHOLE = ("max_active_jobs", "max_running_calls")


def tenants_problems(raw: object) -> list[str]:
    """Every problem of an `AGENTQ_TENANTS` value (`{"<tenant>": {"jobs_per_minute": N, "max_active_jobs": N}}`)."""
    if not isinstance(raw, dict):
        return ['expected an object of tenants, {"<tenant>": {"jobs_per_minute": N, "max_active_jobs": N, "weight": N, '
                '"max_running_calls": N}}']
    problems = []
    for tenant, entry in raw.items():
        if (problem := tenant_problem(tenant)) is not None:
            problems.append(problem)
        elif not isinstance(entry, dict):
            problems.append(f"{tenant}: expected an object of limits")
        else:
            problems += [f"{tenant}: {p}" for p in _limit_problems(entry)]
    return problems


def _limit_problems(entry: dict) -> list[str]:
    problems = []
    for key, value in entry.items():
        if key not in _LIMITS:
            problems.append(f"unknown limit {key!r} ({', '.join(_LIMITS)})")
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            problems.append(f"{key} must be a number above 0, not {value!r}")
        elif key in _WHOLE and not isinstance(value, int):
            problems.append(f"{key} must be a whole number, not {value!r}")
    return problems


def parse_tenants(raw: dict) -> dict[str, TenantLimits]:
    """The limits of a valid `AGENTQ_TENANTS` value (see `tenants_problems`), by tenant."""
    return {tenant: TenantLimits(jobs_per_minute=entry.get("jobs_per_minute"),
                                 max_active_jobs=entry.get("max_active_jobs"), weight=float(entry.get("weight", 1)),
                                 max_running_calls=entry.get("max_running_calls"))
            for tenant, entry in raw.items()}

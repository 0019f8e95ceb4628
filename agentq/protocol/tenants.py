"""Tenants (SPEC §17): every job belongs to one, and an API token acts for one tenant in one role.

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

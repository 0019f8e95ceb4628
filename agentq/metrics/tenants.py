"""The `tenant` label of the job and call counters (docs/tenants.md), of bounded cardinality.

A tenant of the fleet's `tenants` (`agentq config`, read once per heartbeat) or named by a token of an
`AGENTQ_API_TOKENS` tokens file is its own label; the default tenant is `default`; any other tenant (one a
`Client(tenant=...)` or a submit task named, unbounded) is `other`. So a deployment's series grow with its
configuration, never with its callers.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Container
from dataclasses import dataclass
from pathlib import Path

from agentq.protocol.tenants import DEFAULT_TENANT, tenant_problem
from agentq.settings import Settings

log = logging.getLogger("agentq.metrics")

OTHER = "other"  # the label of a tenant nobody configured


@dataclass(frozen=True)
class TenantLabels:
    """The configured tenants, and the label of any tenant."""

    configured: frozenset[str] = frozenset()  # named by the tokens files
    fleet: Callable[[], Container[str]] = frozenset  # the fleet's tenants as read now

    def label(self, tenant: str | None) -> str:
        if not tenant or tenant == DEFAULT_TENANT:
            return DEFAULT_TENANT
        return tenant if tenant in self.configured or tenant in self.fleet() else OTHER

    @classmethod
    def of(cls, settings: Settings, fleet: Callable[[], Container[str]] | None = None) -> TenantLabels:
        """The tenants of `fleet` (default: `AGENTQ_TENANTS`'s) and of the tokens files of `AGENTQ_API_TOKENS` (a
        file that cannot be read names none here: the API refuses to start on it)."""
        named: set[str] = set()
        for item in settings.api_tokens:
            if item.startswith("@"):
                named |= _file_tenants(Path(item[1:]))
        return cls(frozenset(named), fleet if fleet is not None else lambda: settings.tenant_limits)


def _file_tenants(path: Path) -> set[str]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        log.warning("metrics: the tokens file %s cannot be read: its tenants are labelled %r", path, OTHER)
        return set()
    entries = data.values() if isinstance(data, dict) else []
    return {e["tenant"] for e in entries if isinstance(e, dict) and tenant_problem(e.get("tenant")) is None}

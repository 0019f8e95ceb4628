"""The rollout service (docs/rollouts.md): set, clear and list the tools' rollout rules and read their report; the CLI
and the HTTP API call it. Rules are checked against what the fleet publishes and announces now (the tools, the
known activity versions); a refused rule writes nothing."""

from __future__ import annotations

from typing import Any, Protocol

from agentq.protocol.rollouts import Rule, parse_rule
from agentq.store.rollouts import RolloutStore


class Fleet(Protocol):
    """What the rules are checked against (`runtime.service.JobService`)."""

    def available_tools(self) -> dict[str, dict]: ...

    def known_activities(self) -> dict[str, dict]: ...


class Rollouts:
    """The tools' rollout rules and their report."""

    def __init__(self, store: RolloutStore, fleet: Fleet):
        self.store = store
        self.fleet = fleet

    def set(self, tool: str, body: Any) -> Rule:
        """Check `body` as `tool`'s rule and store it (it applies to calls routed from now on); raises
        `RolloutRuleError` naming every problem, and writes nothing then."""
        rule = parse_rule(tool, body, tools=set(self.fleet.available_tools()), known=set(self.fleet.known_activities()))
        self.store.set_rule(rule)
        return rule

    def clear(self, tool: str) -> bool:
        """Remove `tool`'s rule: its calls follow the usual resolution again. True when it had one."""
        return self.store.clear_rule(tool)

    def rules(self) -> dict[str, dict]:
        return self.store.rule_dicts()

    def report(self) -> dict[str, Any]:
        """Per tool and route: calls, success rate, p50/p95 duration, cost (docs/rollouts.md)."""
        return self.store.report()

"""Rollout rules (docs/rollouts.md): which calls of a tool go to another version of an activity, or to the model (pure).

A rule is `{"routes": [{"to": "<activity>@<version>" | "", "tenants": [...]} | {"to": ..., "share": 0.0-1.0}]}`.
A call takes the first route naming its job's tenant; otherwise the share routes divide `[0, 1)` in order and a
hash of the call id picks a place in it; the rest follows the tool's usual resolution (docs/protocol.md#activities). A
route whose activity version is not known (no live worker, none announced within `AGENTQ_ACTIVITY_MEMORY_S`) is never
chosen: its calls follow the usual resolution. The route is decided once, when the call is routed, and kept in the
call's record (`CallRecord.route`), so a retry or a redelivery keeps it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentq.errors import Problem, RolloutRuleError
from agentq.protocol.activities import DEFAULT_VERSION, activity_key, split_key, version_problem
from agentq.protocol.plans import PlannedCall
from agentq.protocol.records import CallMode
from agentq.protocol.tenants import tenant_problem

USUAL = "*"  # the route of a call its rule left to the tool's usual resolution
LATENT = ""  # a route's `to` for latent execution (the model answers the call)
_ROUTE_FIELDS = ("to", "tenants", "share")


@dataclass(frozen=True)
class Route:
    """One route of a rule: `to` ("<activity>@<version>", or "" for the model) and who takes it."""

    to: str
    tenants: tuple[str, ...] = ()
    share: float | None = None

    @property
    def activity(self) -> str:
        """The activity key the route's calls run (`sendEmail` for version 1, `sendEmail@2`), "" for latent."""
        if self.to == LATENT:
            return ""
        return activity_key(*split_key(self.to))

    def to_dict(self) -> dict[str, Any]:
        return {"to": self.to, "tenants": list(self.tenants)} if self.share is None \
            else {"to": self.to, "share": self.share}


@dataclass(frozen=True)
class Rule:
    """A tool's routes, in order."""

    tool: str
    routes: tuple[Route, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"routes": [r.to_dict() for r in self.routes]}

    @classmethod
    def from_dict(cls, tool: str, data: Mapping[str, Any]) -> Rule:
        """A stored rule (checked when it was set)."""
        return cls(tool, tuple(Route(r["to"], tuple(r.get("tenants") or ()), r.get("share")) for r in data["routes"]))


def share_point(call_id: str) -> float:
    """Where in `[0, 1)` a call falls for the share routes: a hash of its id (the same on every process)."""
    return int.from_bytes(hashlib.sha256(call_id.encode()).digest()[:8], "big") / 2.0 ** 64


def available(route: Route, known: Collection[str]) -> bool:
    """Whether a route may be chosen: latent always, an activity version while it is known."""
    return route.to == LATENT or route.activity in known


def choose(rule: Rule, call_id: str, tenant: str, known: Collection[str]) -> Route | None:
    """The route a call of `tenant` takes (None: the usual resolution)."""
    for route in rule.routes:
        if route.share is None and tenant in route.tenants:
            return route if available(route, known) else None
    point, start = share_point(call_id), 0.0
    for route in rule.routes:
        if route.share is None:
            continue
        if start <= point < start + route.share:
            return route if available(route, known) else None
        start += route.share
    return None


def apply_rule(call: PlannedCall, rule: Rule, tenant: str, known: Collection[str]) -> None:
    """Give a planned call of the rule's tool its route: its mode and activity change to the route's; a call for
    the model is awaited and reads the log as every latent call does. Module calls are left alone."""
    if call.mode is CallMode.MODULE:
        return
    route = choose(rule, call.id, tenant, known)
    call.route = USUAL if route is None else route.to
    if route is None:
        return
    if route.to == LATENT:
        call.mode, call.activity, call.awaited, call.needs_log = CallMode.LATENT, "", True, True
    else:
        call.mode, call.activity = CallMode.EXPLICIT, route.activity


def apply_rules(calls: Sequence[PlannedCall], rules: Mapping[str, Rule], tenant: str,
                known: Collection[str]) -> None:
    """Route every planned call whose tool has a rule (see `apply_rule`)."""
    for call in calls:
        if (rule := rules.get(call.tool)) is not None:
            apply_rule(call, rule, tenant, known)


# ------------------------------------------------------------------------------------------------- checking


def parse_rule(tool: str, body: Any, *, tools: Collection[str], known: Collection[str]) -> Rule:
    """The rule `body` sets for `tool`, checked against the tools and the known activity versions (keys as
    `activity_key` spells them); `RolloutRuleError` names every problem with its JSON pointer and what exists."""
    problems: list[Problem] = []
    if tool not in tools:
        problems.append(Problem("", f"unknown tool {tool!r}; known tools: {', '.join(sorted(tools)) or 'none'}"))
    routes = _routes(body, known, problems)
    if problems:
        raise RolloutRuleError(f"rollout rule for {tool!r} refused: nothing was written", problems)
    return Rule(tool, tuple(routes))


def _routes(body: Any, known: Collection[str], problems: list[Problem]) -> list[Route]:
    """The routes of a rule's body (problems added to `problems`)."""
    if not isinstance(body, dict):
        problems.append(Problem("", 'a rule is an object {"routes": [...]}'))
        return []
    problems += [Problem(f"/{_escape(k)}", "unknown field; a rule has only `routes`") for k in body if k != "routes"]
    raw = body.get("routes")
    if not isinstance(raw, list) or not raw:
        problems.append(Problem("/routes", "a non-empty list of routes is required "
                                           "(`agentq rollouts clear TOOL` removes a rule)"))
        return []
    routes = [_route(item, f"/routes/{i}", known, problems) for i, item in enumerate(raw)]
    return _shares_fit([r for r in routes if r is not None], problems)


def _shares_fit(routes: list[Route], problems: list[Problem]) -> list[Route]:
    total = sum(r.share for r in routes if r.share is not None)
    if total > 1 + 1e-9:
        problems.append(Problem("/routes", f"the shares add up to {total:g}; at most 1"))
    return routes


def _route(item: Any, at: str, known: Collection[str], problems: list[Problem]) -> Route | None:
    """One route of a rule (None when it has problems, added to `problems`)."""
    if not isinstance(item, dict):
        problems.append(Problem(at, 'a route is {"to": ..., "tenants": [...]} or {"to": ..., "share": 0.0-1.0}'))
        return None
    found = len(problems)
    problems += [Problem(f"{at}/{_escape(k)}", "unknown field; a route has `to` and `tenants` or `share`")
                 for k in item if k not in _ROUTE_FIELDS]
    to = _target(item.get("to"), f"{at}/to", known, problems)
    if ("tenants" in item) == ("share" in item):
        problems.append(Problem(at, "a route has either `tenants` or `share`"))
        return None
    if "share" in item:
        share = _share(item["share"], f"{at}/share", problems)
        return Route(to, (), share) if len(problems) == found and to is not None else None
    tenants = _tenants(item["tenants"], f"{at}/tenants", problems)
    return Route(to, tenants) if len(problems) == found and to is not None else None


def _share(share: Any, at: str, problems: list[Problem]) -> float:
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:  # NaN fails too
        problems.append(Problem(at, f"a share is a number from 0.0 to 1.0, got {share!r}"))
        return 0.0
    return float(share)


def _tenants(tenants: Any, at: str, problems: list[Problem]) -> tuple[str, ...]:
    if not isinstance(tenants, list) or not tenants:
        problems.append(Problem(at, "a non-empty list of tenant names is required"))
        return ()
    problems += [Problem(f"{at}/{j}", problem) for j, tenant in enumerate(tenants)
                 if (problem := tenant_problem(tenant)) is not None]
    return tuple(t for t in tenants if isinstance(t, str))


def _target(to: Any, at: str, known: Collection[str], problems: list[Problem]) -> str | None:
    """A route's `to` in its stored form (`<activity>@<version>`, or "" for latent)."""
    if to == LATENT:
        return LATENT
    if not isinstance(to, str):
        problems.append(Problem(at, f'`to` is "<activity>@<version>" or "" (the model), got {to!r}'))
        return None
    name, version = split_key(to)
    if (problem := version_problem(version)) is not None:
        problems.append(Problem(at, problem))
        return None
    if activity_key(name, version) in known:
        return f"{name}@{version}"
    versions = sorted(split_key(k)[1] for k in known if split_key(k)[0] == name)
    if versions:
        problems.append(Problem(at, f"activity {name!r} has no known version {version!r}; known versions: "
                                    f"{', '.join(versions)}"))
    else:
        names = sorted({split_key(k)[0] for k in known})
        problems.append(Problem(at, f"unknown activity {name!r}; known activities: {', '.join(names) or 'none'}"))
    return None


def _escape(key: str) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")


__all__ = ["DEFAULT_VERSION", "LATENT", "USUAL", "Route", "Rule", "apply_rule", "apply_rules", "available", "choose",
           "parse_rule", "share_point"]

"""Rollout rules (docs/rollouts.md) as pure functions: checking a rule, choosing a call's route, and the report's
figures from the counters (protocol/rollouts.py, protocol/rollout_report.py)."""

from __future__ import annotations

import pytest

from agentq.errors import RolloutRuleError
from agentq.protocol.activities import ActivityRegistry, activity_key, split_key
from agentq.protocol.plans import PlannedCall
from agentq.protocol.records import CallMode
from agentq.protocol.rollout_report import bucket_of, bucket_value, percentile, report, route_figures
from agentq.protocol.rollouts import USUAL, Route, Rule, apply_rule, choose, parse_rule, share_point

KNOWN = {"sendEmail", "sendEmail@2", "charge"}
TOOLS = {"sendEmail", "charge"}


def test_versions_are_keys_of_their_own_and_version_one_keeps_todays_name():
    registry = ActivityRegistry()
    registry.register("sendEmail", lambda call: 1)
    registry.register("sendEmail", lambda call: 2, version="2")
    registry.register("sendEmail", lambda call: 3, version="1", replace=True)
    assert list(registry) == ["sendEmail", "sendEmail@2"]
    spec = registry.get("sendEmail@2")
    assert (spec.activity, spec.version, spec.handler(None)) == ("sendEmail", "2", 2)
    assert {k: spec.to_announcement()[k] for k in ("name", "activity", "version")} == {
        "name": "sendEmail@2", "activity": "sendEmail", "version": "2"}
    assert (activity_key("x"), activity_key("x", "2"), split_key("x@2"), split_key("x")) == (
        "x", "x@2", ("x", "2"), ("x", "1"))


@pytest.mark.parametrize("version", ["", "a b", "@", 2, "x" * 33])
def test_a_bad_version_is_refused_at_registration(version):
    with pytest.raises(Exception, match="version"):
        ActivityRegistry().register("sendEmail", lambda call: 1, version=version)


def test_a_rule_is_checked_and_stored_with_explicit_versions():
    rule = parse_rule("sendEmail", {"routes": [{"to": "sendEmail@2", "tenants": ["acme"]},
                                               {"to": "sendEmail", "share": 0.1}, {"to": "", "share": 0.05}]},
                      tools=TOOLS, known=KNOWN)
    assert rule.to_dict() == {"routes": [{"to": "sendEmail@2", "tenants": ["acme"]},
                                         {"to": "sendEmail@1", "share": 0.1}, {"to": "", "share": 0.05}]}
    assert [r.activity for r in rule.routes] == ["sendEmail@2", "sendEmail", ""]
    assert Rule.from_dict("sendEmail", rule.to_dict()) == rule


def test_every_problem_of_a_rule_is_named_with_its_pointer_and_what_exists():
    with pytest.raises(RolloutRuleError) as caught:
        parse_rule("sendMail", {"routes": [
            {"to": "sendEmail@3", "share": 0.5},
            {"to": "nope@1", "tenants": ["acme"]},
            {"to": "sendEmail@2", "share": 0.7, "tenants": ["x"]},
            {"to": "sendEmail@2", "share": 1.5},
            {"to": "sendEmail@2", "tenants": []},
            {"to": 7, "share": 0.2, "extra": 1},
        ], "more": True}, tools=TOOLS, known=KNOWN)
    found = {(p.pointer, p.message) for p in caught.value.problems}
    assert found == {
        ("", "unknown tool 'sendMail'; known tools: charge, sendEmail"),
        ("/more", "unknown field; a rule has only `routes`"),
        ("/routes/0/to", "activity 'sendEmail' has no known version '3'; known versions: 1, 2"),
        ("/routes/1/to", "unknown activity 'nope'; known activities: charge, sendEmail"),
        ("/routes/2", "a route has either `tenants` or `share`"),
        ("/routes/3/share", "a share is a number from 0.0 to 1.0, got 1.5"),
        ("/routes/4/tenants", "a non-empty list of tenant names is required"),
        ("/routes/5/to", '`to` is "<activity>@<version>" or "" (the model), got 7'),
        ("/routes/5/extra", "unknown field; a route has `to` and `tenants` or `share`"),
    }
    assert "nothing was written" in str(caught.value)


@pytest.mark.parametrize("body, pointer", [(None, ""), ({}, "/routes"), ({"routes": []}, "/routes"),
                                           ({"routes": [1]}, "/routes/0"),
                                           ({"routes": [{"to": "", "share": 0.6}, {"to": "", "share": 0.6}]},
                                            "/routes")])
def test_malformed_rules(body, pointer):
    with pytest.raises(RolloutRuleError) as caught:
        parse_rule("sendEmail", body, tools=TOOLS, known=KNOWN)
    assert [p.pointer for p in caught.value.problems] == [pointer]


def test_shares_split_calls_by_a_hash_of_their_id():
    rule = Rule("sendEmail", (Route("sendEmail@2", share=0.1), Route("", share=0.2)))
    ids = [f"call_{i:05d}" for i in range(20000)]
    chosen = [choose(rule, i, "default", KNOWN) for i in ids]
    to_v2 = sum(1 for r in chosen if r is not None and r.to == "sendEmail@2")
    latent = sum(1 for r in chosen if r is not None and r.to == "")
    assert 1800 <= to_v2 <= 2200 and 3600 <= latent <= 4400, (to_v2, latent)
    assert [choose(rule, i, "default", KNOWN) for i in ids[:200]] == chosen[:200]  # the same on every call
    assert all(0 <= share_point(i) < 1 for i in ids[:100])


def test_a_tenant_route_wins_and_a_route_without_a_known_version_is_never_chosen():
    rule = Rule("sendEmail", (Route("sendEmail@2", tenants=("acme",)), Route("sendEmail@2", share=1.0)))
    assert choose(rule, "call_1", "acme", KNOWN).to == "sendEmail@2"
    assert choose(rule, "call_1", "other", KNOWN).share == 1.0
    gone = KNOWN - {"sendEmail@2"}
    assert choose(rule, "call_1", "acme", gone) is None
    assert all(choose(rule, f"call_{i}", "other", gone) is None for i in range(100))


def _planned(mode=CallMode.EXPLICIT, activity="sendEmail") -> PlannedCall:
    return PlannedCall(id="call_1", index=0, call={"_tool": "sendEmail", "_activity": activity}, tool="sendEmail",
                       activity=activity, mode=mode, awaited=False, instance=None, scopes=[])


def test_applying_a_route_changes_the_calls_mode_and_activity_not_its_call():
    latent = _planned()
    apply_rule(latent, Rule("sendEmail", (Route("", share=1.0),)), "default", KNOWN)
    assert (latent.mode, latent.activity, latent.awaited, latent.needs_log, latent.route) == (
        CallMode.LATENT, "", True, True, "")
    assert latent.call["_activity"] == "sendEmail"
    v2 = _planned(CallMode.LATENT, "")
    apply_rule(v2, Rule("sendEmail", (Route("sendEmail@2", share=1.0),)), "default", KNOWN)
    assert (v2.mode, v2.activity, v2.record().route) == (CallMode.EXPLICIT, "sendEmail@2", "sendEmail@2")
    usual = _planned()
    apply_rule(usual, Rule("sendEmail", (Route("sendEmail@2", share=0.0),)), "default", KNOWN)
    assert (usual.mode, usual.activity, usual.route) == (CallMode.EXPLICIT, "sendEmail", USUAL)
    module = _planned(CallMode.MODULE, "")
    apply_rule(module, Rule("sendEmail", (Route("", share=1.0),)), "default", KNOWN)
    assert (module.mode, module.route) == (CallMode.MODULE, None)


def test_percentiles_are_within_one_percent_of_the_real_durations() -> None:
    durations = [0.001 * (i + 1) for i in range(1000)]  # 1 ms .. 1 s
    buckets: dict[int, int] = {}
    for d in durations:
        buckets[bucket_of(d)] = buckets.get(bucket_of(d), 0) + 1
    assert percentile(buckets, 0.5) == pytest.approx(0.5, rel=0.01)
    assert percentile(buckets, 0.95) == pytest.approx(0.95, rel=0.01)
    assert all(abs(bucket_value(bucket_of(d)) - d) <= 0.01 * d for d in durations)
    assert percentile({}, 0.5) is None


def test_the_report_lists_the_rules_routes_then_the_usual_resolution():
    stats = {"sendEmail|sendEmail@2|calls": "4", "sendEmail|sendEmail@2|done": "3",
             "sendEmail|sendEmail@2|failed": "1", f"sendEmail|sendEmail@2|b{bucket_of(0.2)}": "4",
             "sendEmail|*|calls": "1", "sendEmail|*|done": "1", f"sendEmail|*|b{bucket_of(0.01)}": "1",
             "sendEmail||calls": "2", "sendEmail||done": "2", "sendEmail||cost": "1500000",
             f"sendEmail||b{bucket_of(1.0)}": "2"}
    shown = report(stats, {"sendEmail": {"routes": [{"to": "sendEmail@2", "share": 0.1}]}})
    rows = shown["tools"]["sendEmail"]["routes"]
    assert [r["route"] for r in rows] == ["sendEmail@2", "*", ""]
    assert (rows[0]["calls"], rows[0]["success_rate"], rows[0]["p50_s"]) == (4, 0.75, pytest.approx(0.2, rel=0.01))
    assert (rows[2]["cost_usd"], rows[1]["cost_usd"]) == (0.0015, 0.0)
    assert route_figures({})["success_rate"] is None

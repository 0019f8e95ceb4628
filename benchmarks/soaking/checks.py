"""The soak's invariants, checked from records kept outside the store — the activity ledger, the fake Messages
API's request log, the webhook receiver's log, the kills the fleet made — and, for what must be back to zero,
the counters agentq keeps in Redis. Each check gives a `Check`: its name, how many it looked at, its violations.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from benchmarks.soaking.fleet import TENANTS, Kill
from benchmarks.soaking.hooks import Delivery
from benchmarks.soaking.jobs import AGENT_BUDGET, BURST_TENANT, PROBE_TENANT, SoakJob
from benchmarks.soaking.ledger import Run, most_at_once
from benchmarks.soaking.model import ModelRequest

FAIR_BOUND_S = 3.0  # globex's short jobs under acme's burst: p99 submit-to-end at most this
FAIR_PROBES = 5  # fewer of them under the burst measure nothing


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@dataclass
class Check:
    name: str
    looked_at: int = 0
    violations: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations


def killed_at(run: Run, kills: list[Kill]) -> float | None:
    """When the process running `run` was killed after it started (None: it was not)."""
    times = [k.at for k in kills if run.pid in k.pids and k.at >= run.start]
    return min(times) if times else None


def jobs_ended(jobs: list[SoakJob]) -> Check:
    check = Check("every job ended", len(jobs))
    check.violations = [f"{j.tag} ({j.job_id}) never ended" for j in jobs if not j.ended_at]
    statuses: dict[str, int] = defaultdict(int)
    for job in jobs:
        statuses[f"{job.kind}:{job.status or 'open'}"] += 1
    check.figures["statuses"] = dict(sorted(statuses.items()))
    return check


def handler_runs(ledger: dict[str, list[Run]], kills: list[Kill]) -> Check:
    """A handler ran more than once for a call only after a run the job asked to fail, or a run whose process was
    killed before the next run started: in its handler, or after it, before its outcome was committed."""
    check = Check("a handler ran again only after a kill (or a failure asked for)", len(ledger))
    again_after_kill = 0
    for tag, runs in ledger.items():
        for before, after in pairwise(runs):
            if before.failed:
                continue
            killed = killed_at(before, kills)
            if killed is not None and killed <= after.start:
                again_after_kill += 1
                continue
            how = "ended" if before.end is not None else "never ended and its process was not killed"
            check.violations.append(f"{tag}: run {before.run} (pid {before.pid}) {how}, then run {after.run} "
                                    f"started at {after.start:.3f}")
    check.figures["runs_again_after_a_kill"] = again_after_kill
    return check


def _interval(run: Run, kills: list[Kill]) -> tuple[float, float]:
    end = run.end if run.end is not None else killed_at(run, kills)
    return run.start, end if end is not None else run.start


def limits_held(ledger: dict[str, list[Run]], kills: list[Kill]) -> Check:
    """At the ledger: one running `soakKeyed` call per account; acme's running calls within its max_running_calls."""
    check = Check("concurrency key and max_running_calls never exceeded (ledger)", sum(map(len, ledger.values())))
    by_account: dict[str, list[tuple[float, float]]] = defaultdict(list)
    by_tenant: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for tag, runs in ledger.items():
        for run in runs:
            if tag.endswith("-k"):
                by_account[run.account].append(_interval(run, kills))
            by_tenant[run.tenant].append(_interval(run, kills))
    for account, intervals in sorted(by_account.items()):
        most, at = most_at_once(intervals)
        check.figures[f"most_at_once:{account}"] = most
        if most > 1:
            check.violations.append(f"account {account}: {most} soakKeyed runs at once at {at:.3f} (limit 1)")
    for tenant, limits in TENANTS.items():
        if "max_running_calls" in limits:
            most, at = most_at_once(by_tenant.get(tenant, []))
            check.figures[f"most_running:{tenant}"] = most
            if most > limits["max_running_calls"]:
                check.violations.append(f"tenant {tenant}: {most} runs at once at {at:.3f} "
                                        f"(max_running_calls {limits['max_running_calls']})")
    return check


def budgets_held(jobs: list[SoakJob], requests: list[ModelRequest]) -> Check:
    """At the fake API: no agent job (batched or not), nor module job (its child's requests counted), had more
    requests answered than its budget's max_requests."""
    agents = [j for j in jobs if j.kind in ("agent", "batch", "module")]
    check = Check("budgets never exceeded (fake API's log)", len(agents))
    answered: dict[str, int] = defaultdict(int)
    for request in requests:
        if request.status == 200:
            answered[request.tag] += 1
    limit = AGENT_BUDGET["max_requests"]
    check.violations = [f"{j.tag}: {answered[j.tag]} requests answered (max_requests {limit})"
                        for j in agents if answered[j.tag] > limit]
    check.figures["most_requests_of_a_job"] = max((answered[j.tag] for j in agents), default=0)
    check.figures["unknown_requests"] = answered.get("?", 0)
    return check


def webhooks_delivered(jobs: list[SoakJob], deliveries: list[Delivery]) -> Check:
    """Every ended job with a webhook had its `job.finished` delivered (signed), every attempt with one id."""
    hooked = [j for j in jobs if j.webhook and j.ended_at]
    check = Check("every webhook event delivered, always with the same id (receiver's log)", len(hooked))
    by_job: dict[str, list[Delivery]] = defaultdict(list)
    for delivery in deliveries:
        by_job[delivery.job_id].append(delivery)
    for job in hooked:
        got = [d for d in by_job.get(job.job_id, []) if d.event == "job.finished"]
        if not got:
            check.violations.append(f"{job.tag} ({job.job_id}): job.finished never delivered")
            continue
        if len({d.webhook_id for d in got}) != 1:
            check.violations.append(f"{job.tag}: job.finished delivered with ids {sorted({d.webhook_id for d in got})}")
        if not all(d.verified for d in got):
            check.violations.append(f"{job.tag}: a delivery's signature did not verify")
    check.figures["deliveries"] = len(deliveries)
    check.figures["delivered_more_than_once"] = sum(1 for j in hooked if len(by_job.get(j.job_id, [])) > 1)
    return check


def requests_accepted(refusals: list[str], requests: list[ModelRequest]) -> Check:
    """The fake Messages API refused no request (it checks each as the real API does: thinking blocks carried back
    unchanged, the tools' schemas, the roles' order)."""
    check = Check("every model request well formed, thinking carried back unchanged (fake API's checks)",
                  len(requests))
    check.violations = [f"refused: {r}" for r in refusals]
    check.figures["thinking_requests"] = sum(1 for r in requests if r.thinking)
    return check


def fairness(jobs: list[SoakJob], bound_s: float = FAIR_BOUND_S) -> Check:
    """Under acme's burst (from its first burst job's submission to its last one's end), globex's short jobs
    submitted meanwhile ended within `bound_s` of their submission (p99; one that never ended counts as over it)."""
    check = Check(f"under {BURST_TENANT}'s burst, {PROBE_TENANT}'s short jobs end within the bound (load's watch)")
    burst = [j for j in jobs if j.kind == "burst" and j.submitted_at]
    if not burst:
        check.figures["burst"] = "none"
        return check
    began = min(j.submitted_at for j in burst)
    ended = max(j.ended_at or float("inf") for j in burst)
    probes = [j for j in jobs if j.kind == "short" and j.submitted_at and began <= j.submitted_at <= ended]
    check.looked_at = len(probes)
    waited = [(j.ended_at or float("inf")) - j.submitted_at for j in probes]
    p50, p99 = percentile(waited, 0.5), percentile(waited, 0.99)
    burst_waited = [j.ended_at - j.submitted_at for j in burst if j.ended_at]
    check.figures.update({"burst_jobs": len(burst), "burst_lasted_s": round(ended - began, 2),
                          f"{BURST_TENANT}_burst_p50_s": _rounded(percentile(burst_waited, 0.5)),
                          "short_jobs": len(probes), "p50_s": _rounded(p50), "p99_s": _rounded(p99),
                          "bound_s": bound_s})
    if len(probes) < FAIR_PROBES:
        check.violations.append(f"only {len(probes)} of {PROBE_TENANT}'s short jobs under the burst (at least "
                                f"{FAIR_PROBES} measure it)")
    elif p99 is not None and p99 > bound_s:
        slow = sorted(probes, key=lambda j: (j.ended_at or float("inf")) - j.submitted_at)[-1]
        check.violations.append(f"{PROBE_TENANT}'s short jobs under {BURST_TENANT}'s burst of {len(burst)} jobs: "
                                f"p99 {p99:.2f} s over the bound {bound_s} s (p50 {p50:.2f} s, slowest {slow.tag})")
    return check


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def events_delivered(jobs: list[SoakJob], sends: dict[str, list[tuple[str, str, int]]],
                     states: dict[str, dict[str, Any]]) -> Check:
    """Each ended event job took an event its own tenant sent (by the id the load sent it under); the other
    tenant's event of the same name and data woke no wait (the API's answer)."""
    ended = [j for j in jobs if j.kind == "event" and j.ended_at]
    check = Check("each waitForEvent took its own tenant's event, never another's (load's sends, job's state)",
                  len(ended))
    for job in jobs:
        for event_id, tenant, woken in sends.get(job.job_id, []):
            if tenant != job.tenant and woken:
                check.violations.append(f"{job.tag}: {tenant}'s event {event_id} woke {woken} wait(s)")
    for job in ended:
        state = states.get(job.job_id) or {}
        taken = state.get("event")
        own = {event_id for event_id, tenant, _ in sends.get(job.job_id, []) if tenant == job.tenant}
        if not isinstance(taken, dict):
            why = "its wait timed out" if "noevent" in state else "nothing at †state.event"
            check.violations.append(f"{job.tag}: took no event ({why})")
        elif taken.get("id") not in own:
            check.violations.append(f"{job.tag}: took event {taken.get('id')} (data {taken.get('data')}), not one "
                                    f"{job.tenant} sent")
    own_sends = [len([s for s in sends.get(j.job_id, []) if s[1] == j.tenant]) for j in jobs if j.kind == "event"]
    check.figures.update(events_sent=sum(own_sends), sent_again=sum(1 for n in own_sends if n > 1))
    return check


def modules_answered(jobs: list[SoakJob], states: dict[str, dict[str, Any]]) -> Check:
    """Each ended `module` job holds its child job's output at `†state.answer` (the answer the fake gave the
    child, naming the parent's tag), or the model outage's failure its `||` branch took at `†state.noanswer`."""
    modules = [j for j in jobs if j.kind == "module" and j.ended_at]
    check = Check("each module call's child ended and its output reached the parent (job's state)", len(modules))
    failed = 0
    for job in modules:
        state = states.get(job.job_id) or {}
        if "answer" in state:
            if state["answer"] != {"answer": f"done {job.tag}"}:
                check.violations.append(f"{job.tag}: took {state['answer']!r}, not its child's answer")
        elif "noanswer" in state:
            failed += 1
        else:
            check.violations.append(f"{job.tag}: nothing at †state.answer nor †state.noanswer ({job.status})")
    check.figures["child_failed"] = failed
    return check


def schedule_fired(due: list[int], fired: set[int], counts: dict[str, Any]) -> Check:
    """Every slot of the schedule due while it ran has its job (`sched-<name>-<slot>`: one per slot whoever
    fires it), unless the schedule counted it missed, skipped or failed; none fired outside its slots."""
    check = Check("every due slot of the schedule fired, once (store, schedule's counts)", len(due))
    absent = [s for s in due if s not in fired]
    excused = sum(int(counts.get(k) or 0) for k in ("missed", "skipped", "failed"))
    if len(absent) > excused:
        check.violations = [f"slot {s} never fired ({excused} slots counted missed, skipped or failed)" for s in absent]
    check.figures.update(slots_due=len(due), fired=len(fired), counts=counts)
    return check

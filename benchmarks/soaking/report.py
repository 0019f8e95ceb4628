"""The soak's report: the load held, the faults and how fast jobs moved after each, every invariant with its count,
latency per job kind, Redis memory; as Markdown (printed, pasted into docs/design/soak.md) and as JSON."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from benchmarks.soaking.checks import percentile
from benchmarks.soaking.run import SoakResult


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def latencies(result: SoakResult) -> dict[str, dict[str, Any]]:
    """Submit to end, per job kind and per tenant (acme sends three jobs of four: globex's stay short)."""
    by_kind: dict[str, list[float]] = defaultdict(list)
    for job in result.jobs:
        if job.ended_at:
            by_kind[job.kind].append(job.ended_at - job.submitted_at)
            by_kind[f"tenant {job.tenant}"].append(job.ended_at - job.submitted_at)
    return {kind: {"jobs": len(v), "p50_s": percentile(v, 0.5), "p99_s": percentile(v, 0.99)}
            for kind, v in sorted(by_kind.items())}


def summary(result: SoakResult) -> dict[str, Any]:
    load_s = result.load_ended - result.began
    ended = [j for j in result.jobs if j.ended_at]
    answered = [r for r in result.requests if r.status == 200]
    recoveries = [f.recovery_s for f in result.faults if f.recovery_s is not None]
    return {
        "seed": result.config.seed, "duration_s": round(load_s, 1), "workers": result.config.workers,
        "jobs_submitted": len(result.jobs), "jobs_ended": len(ended), "jobs_per_s": round(len(ended) / load_s, 2),
        "calls_run": result.calls_run, "calls_per_s": round(result.calls_run / load_s, 2),
        "model_requests": len(result.requests), "model_requests_answered": len(answered),
        "faults": len(result.faults), "recovery_max_s": max(recoveries, default=None),
        "settled_max_s": max((f.settled_s for f in result.faults if f.settled_s is not None), default=None),
        "redis_used_memory": result.memory, "latency": latencies(result), **result.figures,
        "checks": {c.name: {"ok": c.ok, "looked_at": c.looked_at, "violations": len(c.violations), **c.figures}
                   for c in result.checks},
        "faults_injected": [{"kind": f.kind, "at_s": round(f.began - result.began, 1),
                             "lasted_s": round(f.ended - f.began, 1), "detail": f.detail,
                             "next_job_end_s": f.recovery_s, "all_open_jobs_ended_s": f.settled_s}
                            for f in result.faults],
        "workdir": result.workdir,
    }


def markdown(result: SoakResult) -> str:
    data = summary(result)
    lines = [f"soak: seed {data['seed']}, {data['duration_s']} s of load, {data['workers']} workers, "
             f"{'PASSED' if result.ok else 'FAILED'}", "",
             "| figure | value |", "|---|---|"]
    for name in ("jobs_submitted", "jobs_ended", "jobs_per_s", "calls_run", "calls_per_s", "model_requests",
                 "model_requests_answered", "faults", "kills", "recovery_max_s", "settled_max_s", "approved",
                 "startup_s", "burst_s", "drained_s"):
        lines.append(f"| {name} | {data.get(name)} |")
    lines.append(f"| redis used_memory before / after | {data['redis_used_memory'].get('before')} / "
                 f"{data['redis_used_memory'].get('after')} bytes |")
    lines.append(f"| processes started again after a kill / after exiting on their own / API and Redis errors the "
                 f"load retried | {data.get('restarts')} / {data.get('exited_on_their_own')} / "
                 f"{data.get('submit_errors')} |")
    for where, error in (data.get("last_errors") or {}).items():
        lines.append(f"| the load's last {where} error | {error} |")
    lines += ["", "| job kind / tenant | ended | p50 | p99 |", "|---|---|---|---|"]
    for kind, row in data["latency"].items():
        lines.append(f"| {kind} | {row['jobs']} | {_s(row['p50_s'])} | {_s(row['p99_s'])} |")
    lines += ["", "| fault | at | lasted | next job end | all open jobs ended | detail |", "|---|---|---|---|---|---|"]
    for f in data["faults_injected"]:
        lines.append(f"| {f['kind']} | {f['at_s']} s | {f['lasted_s']} s | {_s(f['next_job_end_s'])} | "
                     f"{_s(f['all_open_jobs_ended_s'])} | {f['detail']} |")
    lines += ["", "| invariant | result | looked at | figures |", "|---|---|---|---|"]
    for check in result.checks:
        shown = ", ".join(f"{k} {v}" for k, v in check.figures.items())
        lines.append(f"| {check.name} | {'ok' if check.ok else f'{len(check.violations)} VIOLATIONS'} | "
                     f"{check.looked_at} | {shown} |")
    for check in result.checks:
        for violation in check.violations[:20]:
            lines.append(f"- VIOLATION ({check.name}): {violation}")
    return "\n".join(lines)


def as_json(result: SoakResult) -> str:
    data = summary(result)
    data["violations"] = {c.name: c.violations for c in result.checks if c.violations}
    return json.dumps(data, indent=2, default=str)

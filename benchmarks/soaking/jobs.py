"""The job kinds of the soak's load, built from a seeded random source. Every call is tagged
`<tenant>-<kind><n>-<step>`; each call's tag is unique in the soak, so the activity ledger tells its runs apart.

- `fanout`: a plan job with a `&&` fan-out, three instances after it, a call under a concurrency key (one running
  call per account), a call that fails once and is retried, a failing call its `||` branch takes, and pushes.
- `wait`: a `sleep`, then a `waitForSignal` the load signals through the API (its timeout a `||` branch), then a step.
- `review`: a call a reviewer approves first (the approval bot decides through the API).
- `agent`: an agent job against the fake Messages API: a step, a latent call, then the output; under a budget;
  one in three thinks (`options.thinking`): the fake answers with signed thinking blocks, which every later request
  of the job must carry back unchanged (the fake refuses it otherwise, and the soak counts the refusal).
- `event`: a `waitForEvent` whose `match` is a reference to the job's input, then a step; the load sends the event
  once the wait is open (and, first, the same event from the other tenant, which must wake nothing).
- `batch`: an `agent` job on the batch lane (`options.priority: "batch"`): its ticks and latent calls go to the
  fake's Message Batches API.
- `module`: a plan job whose one call is a module (`soakHelper`, a clean-room child job against the fake Messages
  API: a step, a latent call, then the output), importing the parent's `brief`; the child's output is the call's
  result at `†state.answer` (its `||` branch takes a model outage's failure); under the agent jobs' budget.

Beside the mix, a schedule (`SCHEDULE`, every `SCHEDULE_EVERY_S` seconds, `overlap: allow`) set by the load: its
slots' jobs (`sched-soak-<slot>`, kind `scheduled`) are watched like the others.

And, outside the random mix, the fairness burst (`Load.burst`): `burst`, one of acme's jobs of `BURST_CALLS`
calls that are ready at once (priority 1), and `short`, one of globex's jobs of a single short call (priority 3).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

KINDS = ("fanout", "wait", "review", "agent", "event", "module", "batch")
WEIGHTS = (4, 2, 1, 3, 1, 1, 1)
EVENT = "soak.ready"
ACCOUNTS = ("ac-1", "ac-2", "ac-3")
AGENT_BUDGET = {"max_requests": 6}
OUTPUT = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}


@dataclass
class SoakJob:
    tag: str
    kind: str
    tenant: str
    body: dict[str, Any]
    webhook: bool
    job_id: str = ""
    submitted_at: float = 0.0  # unix time
    ended_at: float = 0.0  # unix time when the end was seen (0: not seen)
    status: str = ""


def _push(tool: str, tag: str, **params: Any) -> dict[str, Any]:
    return {"_tool": tool, "tag": tag, **params, "_outputPath": "†state.runs", "_outputMethod": "push"}


def fanout(tag: str, rng: random.Random) -> dict[str, Any]:
    seconds = round(rng.uniform(0.05, 0.4), 2)
    account = rng.choice(ACCOUNTS)
    context: list[dict[str, Any]] = [{"type": "input", "data": {"account": account}}]
    context += [{"type": "input", "_instance": f"i{i}", "data": {"n": i}} for i in range(3)]
    calls: list[dict[str, Any]] = [
        {"_tool": "soakStep", "tag": f"{tag}-a", "seconds": seconds, "_outputPath": "†state.a && †state.b"}]
    calls += [{"_tool": "soakStep", "tag": f"{tag}-i{i}", "seconds": seconds, "after": "†state.a", "_instance": f"i{i}",
               "_outputPath": "†state.item"} for i in range(3)]
    calls += [_push("soakKeyed", f"{tag}-k", seconds=seconds, account=account),
              _push("soakStep", f"{tag}-r", seconds=0.05, fail_first=True),
              {"_tool": "soakFail", "tag": f"{tag}-f", "_outputPath": "†state.x || †state.failed"},
              _push("soakStep", f"{tag}-p", seconds=0.05, after="†state.failed")]
    return {"context": context, "tools": ["soakStep", "soakKeyed", "soakFail"], "calls": calls}


def wait(tag: str, rng: random.Random) -> dict[str, Any]:
    return {"context": [{"type": "input", "data": {"tag": tag}}],
            "tools": ["sleep", "waitForSignal", "soakStep"],
            "calls": [{"_tool": "sleep", "seconds": round(rng.uniform(0.5, 2.0), 1), "_outputPath": "†state.slept"},
                      {"_tool": "waitForSignal", "name": "go", "timeout_s": 120,
                       "_outputPath": "†state.signal || †state.nosignal"},
                      _push("soakStep", f"{tag}-w", seconds=0.05, after="†state.signal")]}


def review(tag: str, rng: random.Random) -> dict[str, Any]:
    return {"tools": ["soakReview", "soakStep"],
            "calls": [_push("soakReview", f"{tag}-v", seconds=0.05),
                      _push("soakStep", f"{tag}-s", seconds=round(rng.uniform(0.05, 0.3), 2))]}


def agent(tag: str, rng: random.Random) -> dict[str, Any]:
    options: dict[str, Any] = {"budget": dict(AGENT_BUDGET)}
    if rng.random() < 1 / 3:
        options["thinking"] = {"budget_tokens": 1024}
    return {"context": [{"type": "text", "text": f"This is soak job {tag}. Run the step, then answer."}],
            "tools": ["soakStep", "soakDraft"], "output": OUTPUT, "options": options}


def event(tag: str, rng: random.Random) -> dict[str, Any]:
    return {"context": [{"type": "input", "data": {"tag": tag}}],
            "tools": ["waitForEvent", "soakStep"],
            "calls": [{"_tool": "waitForEvent", "event": EVENT, "match": {"/tag": "†input.tag"}, "timeout_s": 120,
                       "_outputPath": "†state.event || †state.noevent"},
                      _push("soakStep", f"{tag}-e", seconds=0.05, after="†state.event")]}


def batch(tag: str, rng: random.Random) -> dict[str, Any]:
    body = agent(tag, rng)
    body["options"]["priority"] = "batch"
    return body


def module(tag: str, rng: random.Random) -> dict[str, Any]:
    return {"context": [{"type": "data", "kind": "brief", "data": {"tag": tag}}],
            "tools": ["soakHelper"], "options": {"budget": dict(AGENT_BUDGET)},
            "calls": [{"_tool": "soakHelper", "question": f"This is soak job {tag}. Run the step, then answer.",
                       "_outputPath": "†state.answer || †state.noanswer"}]}


SCHEDULE, SCHEDULE_EVERY_S = "soak", 2


def schedule() -> dict[str, Any]:
    """The schedule the load sets: a short job every `SCHEDULE_EVERY_S` seconds, every slot fired (no overlap
    skipped)."""
    return {"every_s": SCHEDULE_EVERY_S, "overlap": "allow",
            "job": {"tools": ["sleep"], "calls": [{"_tool": "sleep", "seconds": 0.1, "_outputPath": "†state.slept"}]}}


BURST_CALLS = 10


def burst(tag: str, rng: random.Random) -> dict[str, Any]:
    return {"tools": ["soakStep"], "options": {"priority": 1},
            "calls": [_push("soakStep", f"{tag}-b{i}", seconds=0.3) for i in range(BURST_CALLS)]}


def short(tag: str, rng: random.Random) -> dict[str, Any]:
    return {"tools": ["soakStep"], "options": {"priority": 3}, "calls": [_push("soakStep", f"{tag}-s", seconds=0.05)]}


BUILDERS = {"fanout": fanout, "wait": wait, "review": review, "agent": agent, "event": event, "module": module,
            "batch": batch}
BURST_TENANT, PROBE_TENANT = "acme", "globex"


def make_job(number: int, rng: random.Random, hook_url: str) -> SoakJob:
    """The `number`-th job of the load: its kind and tenant drawn from `rng` (acme three times out of four)."""
    kind = rng.choices(KINDS, WEIGHTS)[0]
    tenant = "acme" if rng.random() < 0.75 else "globex"
    tag = f"{tenant}-{kind}{number}"
    body = BUILDERS[kind](tag, rng)
    options = body.setdefault("options", {})
    options.setdefault("priority", rng.choice((1, 2, 2, 3)))
    webhook = number % 3 == 0
    if webhook:
        options["webhook"] = {"url": hook_url, "events": ["job.finished"]}
    return SoakJob(tag, kind, tenant, body, webhook)


def burst_job(number: int, rng: random.Random) -> SoakJob:
    tag = f"{BURST_TENANT}-burst{number}"
    return SoakJob(tag, "burst", BURST_TENANT, burst(tag, rng), False)


def short_job(number: int, rng: random.Random) -> SoakJob:
    tag = f"{PROBE_TENANT}-short{number}"
    return SoakJob(tag, "short", PROBE_TENANT, short(tag, rng), False)

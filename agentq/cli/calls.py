"""The call commands: `calls` lists a job's calls; `approve`, `reject` and `edit` decide a call awaiting
approval (README.md#the-http-api-and-the-web-page `/calls`)."""

from __future__ import annotations

import argparse

from agentq.cli.common import client, fail, print_json, print_table, read_params
from agentq.errors import JobValidationError


def cmd_calls(args: argparse.Namespace) -> int:
    """`agentq calls ID [--json]`: the job's calls (README.md#the-http-api-and-the-web-page `/calls`)."""
    with client(args) as jobs:
        calls = jobs.calls(args.id)
    if args.json:
        print_json(calls)
    else:
        _print_calls(args.id, calls)
    return 0


def cmd_approve(args: argparse.Namespace) -> int:
    """`agentq approve ID CALL`: let a call awaiting approval run."""
    with client(args) as jobs:
        call = jobs.approve(args.id, args.call)
    return _decided(args, "approved", call)


def cmd_reject(args: argparse.Namespace) -> int:
    """`agentq reject ID CALL [--reason TEXT]`: fail a call awaiting approval ("rejected by reviewer")."""
    with client(args) as jobs:
        call = jobs.reject(args.id, args.call, reason=args.reason)
    return _decided(args, "rejected", call)


def cmd_edit(args: argparse.Namespace) -> int:
    """`agentq edit ID CALL PARAMS_JSON`: replace a waiting call's parameters (re-validated) and let it run."""
    params = read_params(args.params)
    with client(args) as jobs:
        try:
            call = jobs.edit(args.id, args.call, params)
        except JobValidationError as error:  # every problem on the one line, each with its pointer
            return fail(f"{error.summary}: " + "; ".join(str(p) for p in error.problems)
                        if error.problems else str(error))
    return _decided(args, "edited", call)


def _decided(args: argparse.Namespace, verb: str, call: dict) -> int:
    if args.json:
        print_json(call)
    else:
        line = f"{verb} {call['id']} ({call['tool']}); status: {call['status']}"
        if call.get("error"):
            line += f"; {call['error'].get('message')}"
        print(line)
    return 0


def _print_calls(job_id: str, calls: list[dict]) -> None:
    """The calls as a table: id, tool, mode, instance, status, attempts, duration and the calls it waits on."""
    if not calls:
        print(f"job {job_id} has no calls")
        return
    rows = [("CALL", "TOOL", "MODE", "INSTANCE", "STATUS", "ATTEMPTS", "DURATION", "WAITS ON")]
    for call in calls:
        duration = call["duration_ms"]
        rows.append((call["id"], call["tool"], call["mode"], call["instance"] or "-", call["status"] or "-",
                     str(call["attempts"]), "-" if duration is None else f"{duration:.1f} ms",
                     ", ".join(call["depends_on"]) or "-"))
    print_table(rows)
    for call in calls:
        if call["error"]:
            print(f"{call['id']}: {call['error'].get('type')}: {call['error'].get('message')}")

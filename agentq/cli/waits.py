"""The wait commands (docs/waits.md): `signal ID NAME DATA` sends a job a signal, `send-event NAME DATA` an event
to the open waits of a tenant."""

from __future__ import annotations

import argparse
import json
from typing import Any

from agentq.cli.common import client, fail, print_json


def _data(text: str) -> tuple[Any, str | None]:
    """DATA as JSON (None and a message when it is not)."""
    try:
        return json.loads(text), None
    except ValueError as error:
        return None, f"DATA is not JSON ({error}); quote a string as '\"text\"'"


def cmd_signal(args: argparse.Namespace) -> int:
    data, problem = _data(args.data)
    if problem is not None:
        return fail(problem)
    with client(args) as jobs:
        print_json(jobs.signal(args.id, args.name, data))
    return 0


def cmd_send_event(args: argparse.Namespace) -> int:
    data, problem = _data(args.data)
    if problem is not None:
        return fail(problem)
    with client(args, tenant=args.tenant) as jobs:
        print_json(jobs.send_event(args.name, data, id=args.id))
    return 0


def add_wait_commands(command: Any) -> None:
    """`signal` and `send-event`, added through the parser's `command(name, handler, help)`."""
    signal = command("signal", cmd_signal, "send a job a signal (kept until a waitForSignal of its name takes it)")
    signal.add_argument("id")
    signal.add_argument("name")
    signal.add_argument("data", help="the signal's data, as JSON (e.g. '{\"approved\": true}')")
    event = command("send-event", cmd_send_event,
                    "send an event to the open waitForEvent calls of a tenant whose event and match fit it")
    event.add_argument("name")
    event.add_argument("data", help="the event's data, as JSON")
    event.add_argument("--id", default=None, help="the event's id: one sent again within a day is ignored")
    event.add_argument("--tenant", default="default", help="the tenant whose waits get it (default: default)")

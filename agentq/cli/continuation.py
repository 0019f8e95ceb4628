"""`agentq continue`, `fork`, `thread` and `forks` (docs/continue-and-fork.md): a thin shell over the client."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from agentq.cli.common import client, print_json, print_table
from agentq.cli.render import LiveView
from agentq.errors import JobValidationError, Problem


def add_continuation_commands(command: Any) -> None:
    """The commands, added through the parser's `command(name, handler, help)`."""
    cont = command("continue", cmd_continue, "continue an ended agent job's conversation with new messages: a new "
                   "job (its id is printed) with the old conversation, state and tools")
    cont.add_argument("id")
    given = cont.add_mutually_exclusive_group(required=True)
    given.add_argument("--message", action="append", metavar="TEXT", help="a user message to add (repeatable)")
    given.add_argument("--file", metavar="FILE", help="a JSON array of messages to add ('-' for stdin)")
    cont.add_argument("--options", metavar="FILE", help="a JSON object of job options over the old job's")
    _follow_arguments(cont)

    fork = command("fork", cmd_fork, "fork an agent job: a new job (its id is printed) that replays its first N "
                   "ticks (no model request, no activity run, no cost) and runs live from there")
    fork.add_argument("id")
    fork.add_argument("--at", type=int, required=True, metavar="N", help="replay ticks 1..N (0: none)")
    fork.add_argument("--model", default=None, help="the model of the fork's live requests")
    fork.add_argument("--options", metavar="FILE", help="a JSON object of job options over the old job's")
    fork.add_argument("--tools", metavar="FILE", help="a JSON array of the fork's tools (names or schemas)")
    fork.add_argument("--context", metavar="FILE", help="a JSON array of the fork's first messages")
    _follow_arguments(fork)

    thread = command("thread", cmd_thread, "list a thread's jobs in order (its first job's id names it)")
    thread.add_argument("id")
    thread.add_argument("--json", action="store_true", help="print the thread as JSON")
    forks = command("forks", cmd_forks, "list a job's forks, oldest first")
    forks.add_argument("id")
    forks.add_argument("--json", action="store_true", help="print the forks as JSON")


def _follow_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--follow", action="store_true", help="show the new job's events and wait for its record, as "
                   "`agentq run` does")
    p.add_argument("--tenant", default="default", help="the tenant whose job it is (default: default)")


def cmd_continue(args: argparse.Namespace) -> int:
    if args.message:
        messages: Any = [{"type": "text", "text": text} for text in args.message]
    else:
        messages = _json_file(args.file, "/context")
    options = _json_file(args.options, "/options") if args.options else None
    with client(args, tenant=args.tenant) as jobs:
        return _started(jobs.continue_job(args.id, messages, options=options), args.follow)


def cmd_fork(args: argparse.Namespace) -> int:
    options = _json_file(args.options, "/options") if args.options else None
    if args.model is not None:
        options = {**(options if isinstance(options, dict) else {}), "model": args.model}
    tools = _json_file(args.tools, "/tools") if args.tools else None
    context = _json_file(args.context, "/context") if args.context else None
    with client(args, tenant=args.tenant) as jobs:
        return _started(jobs.fork(args.id, args.at, options=options, tools=tools, context=context), args.follow)


def cmd_thread(args: argparse.Namespace) -> int:
    with client(args) as jobs:
        thread = jobs.thread(args.id)
    return _listing(thread["jobs"], args.json, thread)


def cmd_forks(args: argparse.Namespace) -> int:
    with client(args) as jobs:
        forks = jobs.forks(args.id)
    return _listing(forks["forks"], args.json, forks)


def _listing(entries: list[dict], as_json: bool, whole: dict) -> int:
    if as_json:
        print_json(whole)
        return 0
    rows = [["ID", "STATUS", "FROM", "COST_USD", "ADDED"]]
    for entry in entries:
        record = entry["record"]
        origin = record.get("continued_from") or (
            f"{record['forked_from']} @{record['fork']['at_tick']}" if record.get("forked_from") else "-")
        cost = record["usage"].get("cost_usd")
        added = " / ".join(str(m.get("text", m.get("kind", ""))) for m in entry["messages"] if isinstance(m, dict))
        rows.append([entry["id"], record["status"], origin, "-" if cost is None else f"{cost:.4f}",
                     added[:60] or "-"])
    print_table(rows)
    return 0


def _started(handle: Any, follow: bool) -> int:
    """Print the new job's id; with `follow`, its events live and its summary, as `agentq run`."""
    print(handle.id, flush=True)
    if not follow:
        return 0
    view = LiveView()
    view.job_id = handle.id
    for event in handle.events(technical=True):
        view.show(event.data)
    record = handle.result()
    view.summary(record)
    return 0 if record["status"] == "succeeded" else 1


def _json_file(path: str, pointer: str) -> Any:
    """A JSON file ('-' for stdin); one clear error naming the argument when it cannot be read or parsed."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
        return json.loads(text)
    except (OSError, ValueError) as error:
        raise JobValidationError("request rejected", [Problem(pointer, f"{path}: {error}")]) from None

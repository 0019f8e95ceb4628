"""`agentq resume ID [--budget JSON] [--max-ticks N] [--deadline-s S] [--options FILE] [--follow]` (docs/resume.md):
run a failed, canceled or deadline-exceeded job again where it stopped; and the lines `agentq status` shows of a
resumed job's runs."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from agentq.cli.common import client, fail, print_json
from agentq.cli.render import LiveView


def resume_options(args: argparse.Namespace) -> tuple[dict[str, Any] | None, str | None]:
    """The option overrides the command was given (the file's, then the flags'), or why they cannot be read."""
    options: dict[str, Any] = {}
    if args.options:
        try:
            read = json.loads(sys.stdin.read() if args.options == "-" else Path(args.options).read_text("utf-8"))
        except (OSError, ValueError) as error:
            return None, f"--options {args.options}: {error}"
        if not isinstance(read, dict):
            return None, f"--options {args.options}: the options must be a JSON object"
        options.update(read)
    if args.budget is not None:
        try:
            options["budget"] = json.loads(args.budget)
        except ValueError as error:
            return None, f"--budget is not JSON ({error}); e.g. --budget '{{\"max_cost_usd\": 2}}'"
    for name, value in (("max_ticks", args.max_ticks), ("deadline_s", args.deadline_s)):
        if value is not None:
            options[name] = value
    return options, None


def cmd_resume(args: argparse.Namespace) -> int:
    options, problem = resume_options(args)
    if problem is not None:
        return fail(problem)
    with client(args) as jobs:
        handle = jobs.job(args.id)
        stored = list(handle.events(follow=False))
        after = stored[-1].id if stored else "0-0"  # the new run's events come after what is stored now
        record = handle.resume(options or None)
        if not args.follow:
            print_json(record)
            return 0
        return _follow(handle, after, as_json=args.json)


def _follow(handle: Any, after: str, *, as_json: bool) -> int:
    """Show the resumed run's events live (nothing with `as_json`), then its record; 0 when it succeeded."""
    view = None if as_json else LiveView()
    if view is not None:
        view.job_id = handle.id
        for event in handle.events(after=after, technical=True):
            if event.event == "job.resumed":
                view.out(f"job {handle.id} resumed (run {event.data.get('run')})")
            view.show(event.data)
    record = handle.result()
    if view is None:
        print_json(record)
    else:
        view.summary(record)
    return 0 if record["status"] == "succeeded" else 1


def run_lines(record: dict[str, Any]) -> list[str]:
    """One line per run of a resumed job (none for a job never resumed): its number, status, start, end, error."""
    lines = []
    for run in record.get("runs") or []:
        error = run.get("error") or {}
        ended = f" → {run['finished_at']}" if run.get("finished_at") else ""
        why = f"  {error.get('type')}: {error.get('message')}" if error else ""
        lines.append(f"run {run.get('run')}: {run.get('status')}  {run.get('started_at') or '?'}{ended}{why}")
    return lines


def add_resume_command(command: Any) -> None:
    """`resume`, added through the parser's `command(name, handler, help)`."""
    resume = command("resume", cmd_resume,
                     "resume a failed, canceled or deadline-exceeded job where it stopped (its committed calls are "
                     "kept)")
    resume.add_argument("id")
    resume.add_argument("--options", default=None, metavar="FILE",
                        help="option overrides as a JSON object ('-' for stdin), e.g. a larger budget")
    resume.add_argument("--budget", default=None, metavar="JSON",
                        help="the job's new budget, e.g. '{\"max_cost_usd\": 2}' (it counts what the job spent)")
    resume.add_argument("--max-ticks", type=int, default=None, help="an agent job's new options.max_ticks")
    resume.add_argument("--deadline-s", type=float, default=None,
                        help="a deadline for the resumed run, in seconds from the resume")
    resume.add_argument("--follow", action="store_true", help="show the resumed run's events, then its record")
    resume.add_argument("--json", action="store_true", help="with --follow: print only the final job record")

"""The job commands: `run`, `submit`, `status`, `result`, `events`, `cancel` (docs/protocol.md#the-job-record)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from agentq.cli.common import client, local_tools, print_json
from agentq.cli.examples import MODULES, example_name, read_job_argument, replay_of, with_packaged_replays
from agentq.cli.render import LiveView


def cmd_run(args: argparse.Namespace) -> int:
    job = read_job_argument(args.file)
    embedded = args.embedded or not args.settings.redis_url_is_set
    name = example_name(args.file)
    if name is None:
        return run_job(args.settings, job, modules=args.module, tool_dirs=args.tools, as_json=args.json,
                       embedded=embedded)
    modules = args.module or (["workers", *MODULES.get(name, ())] if embedded else [])
    settings = args.settings
    if embedded and replay_of(name) is not None:  # no model configured: the recorded answers, as the demo
        settings, provider = with_packaged_replays(args.settings)
        if settings is not args.settings:
            print(f"LLM: {provider}", file=sys.stderr if args.json else sys.stdout, flush=True)
    return run_job(settings, job, modules=modules, tool_dirs=args.tools, as_json=args.json, embedded=embedded)


def cmd_submit(args: argparse.Namespace) -> int:
    with client(args, tenant=args.tenant) as jobs:
        print(jobs.submit(read_job_argument(args.file)).id)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from agentq.cli.resume import run_lines

    with client(args) as jobs:
        handle = jobs.job(args.id)
        print(handle.status())
        for line in run_lines(handle.record()):  # a resumed job's runs (docs/resume.md)
            print(line)
    return 0


def cmd_result(args: argparse.Namespace) -> int:
    with client(args) as jobs:
        handle = jobs.job(args.id)
        record = handle.result(timeout=args.timeout) if args.wait else handle.record()
    print_json(record)
    return 0 if record["status"] != "failed" else 1


def cmd_events(args: argparse.Namespace) -> int:
    with client(args) as jobs:
        for event in jobs.job(args.id).events(after=args.after, follow=args.follow):
            print(json.dumps({"id": event.id, **event.data}, ensure_ascii=False), flush=True)
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    with client(args) as jobs:
        print(jobs.job(args.id).cancel())
    return 0


def run_job(settings: Any, job: Any, *, modules: list[str], tool_dirs: list[str], as_json: bool,
            embedded: bool) -> int:
    """Submit `job`, show its events live (or nothing with `as_json`), then its record; 0 when it succeeded.
    `embedded`: on a private Redis with in-process workers for `modules` (default: workers)."""
    from agentq.client import Client

    view = None if as_json else LiveView()
    if embedded:
        from agentq.runtime.embedded import Embedded

        with Embedded(modules=modules or ["workers"], tool_dirs=tool_dirs, settings=settings) as runtime, \
                Client(parts=runtime.parts) as jobs:
            record = _follow(jobs, job, view)
    else:
        tools = local_tools(modules, tool_dirs) if modules or tool_dirs else None
        with Client(settings=settings, tools=tools) as jobs:
            record = _follow(jobs, job, view)
    if view is None:
        print_json(record)
    else:
        view.summary(record)
    return 0 if record["status"] == "succeeded" else 1


def _follow(jobs: Any, job: Any, view: LiveView | None) -> dict:
    handle = jobs.submit(job)
    if view is not None:
        view.job_id = handle.id
        for event in handle.events(technical=True):
            view.show(event.data)
    return handle.result()

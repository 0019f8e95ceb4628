"""`agentq demo`: the example order pipeline, or with `--agent` the example agent job, in embedded mode (with the
packaged replays when no model is configured: `examples.py`'s `with_packaged_replays`)."""

from __future__ import annotations

import argparse
import sys
from importlib import resources
from typing import TYPE_CHECKING

from agentq.cli.common import read_job
from agentq.cli.examples import with_packaged_replays
from agentq.cli.jobs import run_job

if TYPE_CHECKING:
    pass

DEMO_JOB = ("workers", "jobs/demo_order.json")
DEMO_AGENT_JOB = ("workers", "jobs/demo_agent.json")


def cmd_demo(args: argparse.Namespace) -> int:
    if args.agent:
        return _demo_agent(args)
    if not args.json:
        print("agentq demo: an order pipeline over the example activities in workers/ "
              "(parallel calls, a || branch on a declined card, && fan-out, instances per item)\n")
    return run_job(args.settings, read_demo_job(), modules=["workers"], tool_dirs=[], as_json=args.json,
                   embedded=True)


def _demo_agent(args: argparse.Namespace) -> int:
    """`agentq demo --agent`: the example agent job, with the real API when ANTHROPIC_API_KEY (or AGENTQ_LLM)
    is set, else with the packaged replay files. One line says which provider answers (on stderr with --json)."""
    settings, provider = with_packaged_replays(args.settings)
    if not args.json:
        print("agentq demo --agent: an order-support agent over the example activities in workers/ (explicit "
              "calls streamed from the model, a latent draftReply answered by the model, a final output)")
    print(f"LLM: {provider}", file=sys.stderr if args.json else sys.stdout, flush=True)
    if not args.json:
        print()
    return run_job(settings, read_demo_job(DEMO_AGENT_JOB), modules=["workers"], tool_dirs=[],
                   as_json=args.json, embedded=True)


def read_demo_job(which: tuple[str, str] = DEMO_JOB) -> str:
    """The text of a job file packaged with the example workers."""
    package, name = which
    with resources.as_file(resources.files(package).joinpath(name)) as path:
        return read_job(str(path))

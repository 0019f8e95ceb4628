"""`agentq demo`: the example order pipeline, or with `--agent` the example agent job, in embedded mode; and the
fallback to the packaged replay files when no model is configured, which `agentq api --embedded` shares."""

from __future__ import annotations

import argparse
import sys
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from agentq.cli.common import read_job
from agentq.cli.jobs import run_job

if TYPE_CHECKING:
    from agentq.settings import Settings

DEMO_JOB = ("workers", "jobs/demo_order.json")
DEMO_AGENT_JOB = ("workers", "jobs/demo_agent.json")
PACKAGED_REPLAYS = ("workers", "jobs")  # the example jobs' recorded answers (*.replay.jsonl), used without a key
EXAMPLE_MODULES = ("workers", "workers.music")  # what the packaged example jobs call


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


def with_packaged_replays(settings: Settings) -> tuple[Settings, str]:
    """`settings` for a process that runs the packaged example jobs on its own (`agentq demo --agent`, `agentq api
    --embedded`), and the line that says which provider answers: the one configured (AGENTQ_LLM, else the
    Anthropic API when ANTHROPIC_API_KEY is set), else a replay of the packaged examples' recorded answers
    (`replay:` the folder holding them: each answer is found by what its request asks, see `llm/replay.py`)."""
    from agentq.llm.factory import api_key

    if settings.llm:
        return settings, f"AGENTQ_LLM={settings.llm}"
    if api_key(settings):
        return settings, f"the Anthropic API (ANTHROPIC_API_KEY is set), model {settings.model}"
    none = "none (no ANTHROPIC_API_KEY or AGENTQ_LLM set): agent jobs fail with LLMNotConfigured"
    try:
        folder = resources.files(PACKAGED_REPLAYS[0]).joinpath(PACKAGED_REPLAYS[1])
    except ModuleNotFoundError:  # the example workers are not installed
        return settings, none
    if not isinstance(folder, Path) or not folder.is_dir():  # not a folder on disk (a zipped install)
        return settings, none
    names = ", ".join(sorted(p.name for p in folder.glob("*.jsonl")))
    return (settings.model_copy(update={"llm": f"replay:{folder}"}),
            f"replay of the recorded answers of the example jobs ({names}; no ANTHROPIC_API_KEY set: set it to ask "
            "the real API)")


def read_demo_job(which: tuple[str, str] = DEMO_JOB) -> str:
    """The text of a job file packaged with the example workers."""
    package, name = which
    with resources.as_file(resources.files(package).joinpath(name)) as path:
        return read_job(str(path))

"""`agentq examples`: the example jobs packaged with agentq (`workers/jobs/*.json` in the installed package), and
`example:NAME`, which `run` and `submit` take in place of a job file, so the examples run from any directory."""

from __future__ import annotations

import argparse
import json
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from agentq.cli.common import print_table, read_job
from agentq.errors import JobValidationError

PREFIX = "example:"
PACKAGE, FOLDER = "workers", "jobs"
# the modules an example's tools come from beyond the default `workers`: `run example:NAME` imports them in
# embedded mode (a fleet's workers must serve them otherwise)
MODULES: dict[str, tuple[str, ...]] = {"producer": ("workers.music",)}


def packaged() -> dict[str, Traversable]:
    """The packaged example jobs by name (their file's stem); none when the `workers` package is absent."""
    try:
        folder = resources.files(PACKAGE).joinpath(FOLDER)
        return {entry.name.removesuffix(".json"): entry
                for entry in sorted(folder.iterdir(), key=lambda e: e.name) if entry.name.endswith(".json")}
    except (ModuleNotFoundError, FileNotFoundError):
        return {}


def replay_of(name: str) -> Traversable | None:
    """The packaged replay file of an example agent job (`<name>.replay.jsonl`), if it has one."""
    entry = resources.files(PACKAGE).joinpath(FOLDER, f"{name}.replay.jsonl")
    return entry if entry.is_file() else None


def example_name(argument: str) -> str | None:
    """The example an argument names (`example:NAME`), else None (a file, or '-')."""
    return argument.removeprefix(PREFIX) if argument.startswith(PREFIX) else None


def read_job_argument(argument: str) -> str:
    """The text of the job a command's FILE names: `example:NAME` (a packaged example) or a file ('-': stdin).
    An unknown example names the packaged ones; a missing file whose name is an example's says how to run it."""
    examples = packaged()
    name = example_name(argument)
    if name is not None:
        if name not in examples:
            known = ", ".join(examples) or "none (the workers package is not installed)"
            raise JobValidationError(f"no packaged example named {name!r}; the examples: {known} "
                                     "(agentq examples)")
        return examples[name].read_text(encoding="utf-8")
    try:
        return read_job(argument)
    except JobValidationError as error:
        stem = Path(argument).name.removesuffix(".json")
        if argument != "-" and not Path(argument).exists() and stem in examples:
            raise JobValidationError(f"{error}; the packaged example of that name runs from any directory: "
                                     f"agentq run {PREFIX}{stem}") from None
        raise


def describe(name: str, job: Any) -> tuple[str, str, str]:
    """An example's kind, tools and the command that runs it."""
    job = job if isinstance(job, dict) else {}
    calls = job.get("calls")
    kind = f"plan, {len(calls)} calls" if isinstance(calls, list) else "agent"
    tools = ", ".join(t if isinstance(t, str) else str(t.get("name", "?")) for t in job.get("tools") or [])
    run = f"agentq run {PREFIX}{name}"  # in embedded mode with the modules it needs (`MODULES`)
    if kind == "agent":
        run += " (a model: ANTHROPIC_API_KEY" + (", else its packaged replay)" if replay_of(name) else ")")
    return kind, tools, run


def cmd_examples(args: argparse.Namespace) -> int:
    """`agentq examples [--json]`: the packaged example jobs, what each is, and how to run it."""
    examples = {name: json.loads(entry.read_text(encoding="utf-8")) for name, entry in packaged().items()}
    if args.json:
        print(json.dumps(examples, indent=2, ensure_ascii=False))
        return 0
    if not examples:
        print("no packaged examples (the workers package is not installed)")
        return 0
    print(f"Example jobs packaged with agentq; run one from any directory with `agentq run {PREFIX}NAME`.\n")
    print_table([("NAME", "KIND", "TOOLS", "RUN"), *((name, *describe(name, job)) for name, job in examples.items())])
    return 0

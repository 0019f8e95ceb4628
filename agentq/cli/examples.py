"""`agentq examples`: the example jobs packaged with agentq (`workers/jobs/*.json` in the installed package), and
`example:NAME`, which `run` and `submit` take in place of a job file, so the examples run from any directory."""

from __future__ import annotations

import argparse
import json
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentq.cli.common import print_table, read_job
from agentq.errors import JobValidationError

if TYPE_CHECKING:
    from agentq.settings import Settings

PREFIX = "example:"
PACKAGE, FOLDER = "workers", "jobs"
# the modules an example's tools come from beyond the default `workers`: `run example:NAME` imports them in
# embedded mode (a fleet's workers must serve them otherwise)
MODULES: dict[str, tuple[str, ...]] = {"producer": ("workers.music",)}
EXAMPLE_MODULES = ("workers", "workers.music")  # what the packaged example jobs call, all of them


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
        folder = resources.files(PACKAGE).joinpath(FOLDER)
    except ModuleNotFoundError:  # the example workers are not installed
        return settings, none
    if not isinstance(folder, Path) or not folder.is_dir():  # not a folder on disk (a zipped install)
        return settings, none
    names = ", ".join(sorted(p.name for p in folder.glob("*.jsonl")))
    return (settings.model_copy(update={"llm": f"replay:{folder}"}),
            f"replay of the recorded answers of the example jobs ({names}; no ANTHROPIC_API_KEY set: set it to ask "
            "the real API)")


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

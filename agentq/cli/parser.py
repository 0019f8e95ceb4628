"""The `agentq` argument parser: every command, its arguments and help, and the handler it runs."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from agentq.cli.calls import cmd_approve, cmd_calls, cmd_edit, cmd_reject
from agentq.cli.config import cmd_config
from agentq.cli.continuation import add_continuation_commands
from agentq.cli.deliveries import cmd_deliveries
from agentq.cli.demo import cmd_demo
from agentq.cli.diff import add_diff_command
from agentq.cli.examples import cmd_examples
from agentq.cli.fleet import cmd_activities, cmd_activities_forget, cmd_tools
from agentq.cli.jobs import cmd_cancel, cmd_events, cmd_result, cmd_run, cmd_status, cmd_submit
from agentq.cli.mcp import cmd_mcp
from agentq.cli.resume import add_resume_command
from agentq.cli.rollouts import cmd_rollouts, cmd_rollouts_clear, cmd_rollouts_set
from agentq.cli.schedules import cmd_schedules, cmd_schedules_act, cmd_schedules_set, cmd_schedules_show
from agentq.cli.serve import cmd_api, cmd_dispatcher, cmd_healthcheck, cmd_metrics, cmd_worker
from agentq.cli.waits import add_wait_commands

REDIS_RULE = (
    "Which Redis: AGENTQ_REDIS_URL names the state store (and the broker, unless AGENTQ_BROKER_URL is set). "
    "When it is unset, `run` and `demo` start a private embedded Redis with in-process workers and stop it "
    "afterwards; every other command uses redis://127.0.0.1:6379/0."
)

Commands = Callable[[str, Callable[..., int], str], argparse.ArgumentParser]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentq", description="A distributed task-queue backend for LLM agents.",
                                     epilog=REDIS_RULE)
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")

    def command(name: str, handler: Callable[..., int], help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help, epilog=REDIS_RULE)
        p.set_defaults(handler=handler)
        return p

    _job_commands(command)
    _process_commands(command)
    _fleet_commands(command)
    _call_commands(command)
    add_diff_command(command)
    return parser


def _modules(p: argparse.ArgumentParser, default_note: str = "") -> None:
    p.add_argument("-m", "--module", action="append", default=[], metavar="MODULE",
                   help=f"import a module that registers tools and activities (repeatable){default_note}")
    p.add_argument("--tools", action="append", default=[], metavar="DIR", help="load tool JSON files from DIR")


def _job_commands(command: Commands) -> None:
    run = command("run", cmd_run, "submit a job, stream its events, wait, print the result")
    run.add_argument("file", help="job JSON file ('-' for stdin), or example:NAME for a packaged example "
                     "(agentq examples)")
    _modules(run)
    run.add_argument("--json", action="store_true", help="print only the final job record")
    run.add_argument("--embedded", action="store_true",
                     help="private Redis and in-process workers (the default when AGENTQ_REDIS_URL is unset)")

    demo = command("demo", cmd_demo, "run the example order pipeline in embedded mode")
    demo.add_argument("--json", action="store_true", help="print only the final job record")
    demo.add_argument("--agent", action="store_true",
                      help="run the example agent job instead: the Anthropic API when ANTHROPIC_API_KEY is set, "
                           "else its packaged replay file")

    examples = command("examples", cmd_examples, "list the example jobs packaged with agentq and how to run "
                       "each (agentq run example:NAME, from any directory)")
    examples.add_argument("--json", action="store_true", help="print the example jobs themselves, by name")

    submit = command("submit", cmd_submit, "submit a job and print its id")
    submit.add_argument("file", help="job JSON file ('-' for stdin), or example:NAME for a packaged example")
    submit.add_argument("--tenant", default="default", help="the tenant the job belongs to (default: default)")

    status = command("status", cmd_status, "print a job's status")
    status.add_argument("id")

    result = command("result", cmd_result, "print a job's record")
    result.add_argument("id")
    result.add_argument("--wait", action="store_true", help="wait until the job ends")
    result.add_argument("--timeout", type=float, default=None, help="with --wait: give up after this many seconds")

    events = command("events", cmd_events, "print a job's events as JSON lines")
    events.add_argument("id")
    events.add_argument("--follow", action="store_true", help="keep printing until the job ends")
    events.add_argument("--after", default="0-0", help="resume after this event id")

    cancel = command("cancel", cmd_cancel, "cancel a job")
    cancel.add_argument("id")
    add_wait_commands(command)
    add_continuation_commands(command)
    add_resume_command(command)


def _process_commands(command: Commands) -> None:
    for name, handler, text, note, pool_note, concurrency_note in (
        ("worker", cmd_worker, "serve the activities registered by modules", " (default: workers)", "prefork",
         "CPUs"),
        ("dispatcher", cmd_dispatcher, "serve the engine queues (latent calls, modules, agent ticks)", "",
         "threads: a model request waiting on its stream holds a thread, not a process",
         "AGENTQ_ENGINE_CONCURRENCY threads; with --pool prefork, CPUs"),
    ):
        p = command(name, handler, text)
        _modules(p, note)
        p.add_argument("--concurrency", type=int, default=None, help=f"processes or threads of the pool (default: "
                       f"{concurrency_note})")
        p.add_argument("--pool", default=None, choices=["prefork", "threads", "solo"],
                       help=f"Celery pool (default: {pool_note})")
        p.add_argument("--loglevel", default="INFO")
        if name == "worker":
            p.add_argument("--mcp", metavar="FILE", default=None,
                           help="serve the tools of the MCP servers FILE lists ({\"mcpServers\": ...}, as Claude "
                                "Desktop writes it) as tools and activities; without -m, no other modules")
        p.add_argument("--hostname", default=None, metavar="NAME@HOST",
                       help=f"Celery node name (default: agentq-{name}@<this host's name>, or the lowest free "
                            f"agentq-{name}-N@<host> while a live process holds it); expands %%h (hostname), "
                            "%%n (its first label) and %%d (its domain), e.g. orders-2@%%h")

    api = command("api", cmd_api, "serve the HTTP API and the web page")
    api.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    api.add_argument("--port", type=int, default=8000, help="port to listen on (default: 8000)")
    api.add_argument("--no-auth", action="store_true",
                     help="turn authentication off (by default every path but /v1/health needs a bearer token: "
                          "AGENTQ_API_TOKENS, else one made at start and printed with the page's URL)")
    api.add_argument("--embedded", action="store_true",
                     help="a private Redis and in-process workers for the -m modules (default: workers), to try "
                          "the page on a machine with nothing running")
    _modules(api)

    healthcheck = command("healthcheck", cmd_healthcheck,
                          "exit 0 when a worker or dispatcher of this host announced itself within two heartbeats "
                          "(for container healthchecks), else 1 with the reason")
    healthcheck.add_argument("--role", choices=["any", "worker", "dispatcher"], default="any",
                             help="which process must be live: a worker (serves activities), a dispatcher (serves "
                                  "the engine queue) or either (default)")
    healthcheck.add_argument("--hostname", default=None, help="the host to check (default: this one)")
    healthcheck.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for Redis (default: 5)")

    mcp = command("mcp", cmd_mcp, "serve agentq as an MCP server (submit jobs, read their status and results, "
                  "approve calls): over stdio, or streamable HTTP with --port")
    mcp.add_argument("--port", type=int, default=None,
                     help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (0: any free port)")
    mcp.add_argument("--host", default="127.0.0.1", help="with --port: the address to listen on (default: 127.0.0.1)")
    mcp.add_argument("--no-auth", action="store_true",
                     help="with --port: serve without a bearer token (default: AGENTQ_API_TOKENS, or a random one "
                          "printed at start)")

    metrics = command("metrics", cmd_metrics, "serve the Prometheus metrics at http://HOST:PORT/metrics "
                      "(without the API)")
    metrics.add_argument("--port", type=int, required=True, help="the port to listen on (0: any free port)")
    metrics.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: 127.0.0.1)")
    metrics.add_argument("--no-auth", action="store_true",
                         help="serve without a bearer token (default: AGENTQ_METRICS_TOKEN, or a random one printed "
                              "at start)")


def _fleet_commands(command: Commands) -> None:
    tools = command("tools", cmd_tools, "print the composed solution schema of the tools a job may name: with "
                    "AGENTQ_REDIS_URL set, those the fleet published and the -m modules', against the activities "
                    "the fleet knows; unset, only the local modules' (no fleet is asked). `agentq activities` "
                    "lists the fleet's activities")
    _modules(tools, " (default: workers)")

    activities = command("activities", cmd_activities,
                         "list the activities the fleet's workers announced (the store of AGENTQ_REDIS_URL): live "
                         "or not, their workers, queue and last announcement. `agentq tools` prints the tools' "
                         "composed schema")
    activities.add_argument("--json", action="store_true", help="print them as one JSON object by name")
    activities.usage = "%(prog)s [-h] [--json] [forget NAME]"  # the action is optional
    actions = activities.add_subparsers(title="actions", metavar="ACTION")
    forget_help = "retire a known activity at once, so its tools turn latent"
    forget = actions.add_parser("forget", help=forget_help, description=forget_help, epilog=REDIS_RULE)
    forget.add_argument("name", metavar="NAME", help="the activity to forget")
    forget.set_defaults(handler=cmd_activities_forget)

    config = command("config", cmd_config, "show the fleet's shared settings (tenants, llm_prices, llm_limits, "
                     "webhook_allowlist), or set one from a JSON file (docs/config.md)")
    config.add_argument("--json", action="store_true", help="print them as JSON")
    config.add_argument("words", nargs="*", metavar="NAME | set NAME FILE",
                        help="a setting to show, or `set NAME FILE` ('-' for stdin) to store its next version")
    config.usage = "%(prog)s [-h] [--json] [NAME | set NAME FILE]"

    rollouts = command("rollouts", cmd_rollouts, "report the tools' rollout routes side by side: calls, success "
                       "rate, p50/p95 duration, cost (docs/rollouts.md)")
    rollouts.add_argument("--json", action="store_true", help="print the report as JSON")
    rollouts.usage = "%(prog)s [-h] [--json] [set TOOL FILE | clear TOOL]"
    rules = rollouts.add_subparsers(title="actions", metavar="ACTION")
    _action(rules, "set", "check and store a tool's rollout rule, from a JSON file ('-' for stdin)", cmd_rollouts_set,
            ("TOOL", None), ("FILE", '{"routes": [{"to": "<activity>@<version>" | "", "tenants": [...]} | '
                                     '{"to": ..., "share": 0.0-1.0}, ...]}'))
    _action(rules, "clear", "remove a tool's rollout rule: its calls follow the usual resolution again",
            cmd_rollouts_clear, ("TOOL", None))
    _schedule_commands(command)


def _schedule_commands(command: Commands) -> None:
    schedules = command("schedules", cmd_schedules, "list the schedules with their next runs and last job, or set, "
                        "show, pause, resume, trigger or delete one (docs/schedules.md)")
    schedules.add_argument("--json", action="store_true", help="print them as JSON (as the API's /v1/schedules)")
    schedules.usage = "%(prog)s [-h] [--json] [set NAME FILE | show|pause|resume|trigger|delete NAME]"
    actions = schedules.add_subparsers(title="actions", metavar="ACTION")
    _action(actions, "set", "check and store a schedule, from a JSON file ('-' for stdin)", cmd_schedules_set,
            ("NAME", None), ("FILE", '{"cron": "0 8 * * 1-5" | "every_s": N, "timezone", "job": {...}, "overlap", '
                                     '"catchup_window_s", "jitter_s", "paused"}'))
    _action(actions, "show", "one schedule as JSON", cmd_schedules_show, ("NAME", None))
    for action, help in (("pause", "stop firing a schedule until it is resumed"),
                         ("resume", "fire a paused schedule again from its next slot"),
                         ("trigger", "submit a schedule's job now"),
                         ("delete", "delete a schedule (its jobs stay)")):
        _action(actions, action, help, cmd_schedules_act, ("NAME", None)).set_defaults(action=action)


def _action(actions: Any, name: str, help: str, handler: Callable[..., Any],
            *operands: tuple[str, str | None]) -> argparse.ArgumentParser:
    """An action of a command that changes the fleet's settings in the store (`rollouts set`, `schedules pause`),
    each operand a (METAVAR, help) pair, its destination the metavar in lower case."""
    parser: argparse.ArgumentParser = actions.add_parser(name, help=help, description=help, epilog=REDIS_RULE)
    for metavar, operand_help in operands:
        parser.add_argument(metavar.lower(), metavar=metavar, help=operand_help)
    parser.set_defaults(handler=handler)
    return parser


def _call_commands(command: Commands) -> None:
    calls = command("calls", cmd_calls, "list a job's calls: status, attempts, duration, what each waits on")
    calls.add_argument("id")
    calls.add_argument("--json", action="store_true", help="print them as a JSON array (as the API's /calls)")

    deliveries = command("deliveries", cmd_deliveries,
                         "list a job's webhook deliveries: each event, its id, state and attempts")
    deliveries.add_argument("id")
    deliveries.add_argument("--json", action="store_true", help="print them as a JSON array")

    approve = command("approve", cmd_approve, "let a call awaiting approval run")
    reject = command("reject", cmd_reject, "fail a call awaiting approval (\"rejected by reviewer\")")
    edit = command("edit", cmd_edit, "replace the parameters of a call awaiting approval and let it run")
    for p in (approve, reject, edit):
        p.add_argument("id", help="the job's id")
        p.add_argument("call", metavar="CALL", help="the call's id (see `agentq calls ID`)")
    reject.add_argument("--reason", metavar="TEXT", help="why, added to the call's error")
    edit.add_argument("params", metavar="PARAMS_JSON",
                      help="the new parameters: a JSON object, @FILE to read it from FILE, or '-' for stdin "
                           "(meta fields such as _outputPath stay as they were)")
    for p in (approve, reject, edit):
        p.add_argument("--json", action="store_true", help="print the call as in `agentq calls --json`")

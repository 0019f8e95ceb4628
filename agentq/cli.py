"""The `agentq` command line (SPEC §12). Errors are one clear line on stderr and a non-zero exit.

Settings are read once (`Settings()`, from `AGENTQ_*`) in `main` and handed to each command, which gets its
parts from the composition root through `agentq.Client` or `agentq.runtime`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from agentq.errors import AgentQError, ConfigurationError, JobValidationError, Problem, StoreUnavailableError

DEMO_JOB = ("workers", "jobs/demo_order.json")
DEMO_AGENT_JOB = ("workers", "jobs/demo_agent.json")
DEMO_AGENT_REPLAY = ("workers", "jobs/demo_agent.replay.jsonl")  # its answers when there is no API key

REDIS_RULE = (
    "Which Redis: AGENTQ_REDIS_URL names the state store (and the broker, unless AGENTQ_BROKER_URL is set). "
    "When it is unset, `run` and `demo` start a private embedded Redis with in-process workers and stop it "
    "afterwards; every other command uses redis://127.0.0.1:6379/0."
)


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        args.settings = _settings()
        return args.handler(args) or 0
    except StoreUnavailableError as error:
        hint = "" if args.settings.redis_url_is_set else " (AGENTQ_REDIS_URL is not set)"
        return _fail(f"{error}{hint}")
    except AgentQError as error:
        return _fail(str(error))
    except BrokenPipeError:
        # the reader went away (`agentq events ... | head`): stop quietly, as other command-line tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        return 130


def _fail(message: str) -> int:
    print(f"agentq: error: {message}", file=sys.stderr)
    return 1


def _settings() -> Any:
    from pydantic import ValidationError

    from agentq.settings import Settings

    try:
        return Settings()
    except ValidationError as error:
        problems = "; ".join(f"AGENTQ_{'_'.join(str(p) for p in e['loc']).upper()}: {e['msg']}"
                             for e in error.errors())
        raise ConfigurationError(f"invalid settings: {problems}") from None


# ------------------------------------------------------------------------------------------ commands


def cmd_run(args: argparse.Namespace) -> int:
    job = _read_job(args.file)
    return _run_job(args.settings, job, modules=args.module, tool_dirs=args.tools, as_json=args.json,
                    embedded=args.embedded or not args.settings.redis_url_is_set)


def cmd_demo(args: argparse.Namespace) -> int:
    if args.agent:
        return _demo_agent(args)
    if not args.json:
        print("agentq demo: an order pipeline over the example activities in workers/ "
              "(parallel calls, a || branch on a declined card, && fan-out, instances per item)\n")
    return _run_job(args.settings, _read_demo_job(), modules=["workers"], tool_dirs=[], as_json=args.json,
                    embedded=True)


def _demo_agent(args: argparse.Namespace) -> int:
    """`agentq demo --agent`: the example agent job, with the real API when ANTHROPIC_API_KEY (or AGENTQ_LLM)
    is set, else with its packaged replay file. One line says which provider answers (on stderr with --json)."""
    from importlib import resources

    settings = args.settings
    with resources.as_file(resources.files(DEMO_AGENT_REPLAY[0]).joinpath(DEMO_AGENT_REPLAY[1])) as replay:
        if settings.llm:
            provider = f"AGENTQ_LLM={settings.llm}"
        elif os.environ.get("ANTHROPIC_API_KEY"):
            provider = f"the Anthropic API (ANTHROPIC_API_KEY is set), model {settings.model}"
        else:
            settings = settings.model_copy(update={"llm": f"replay:{replay}"})
            provider = (f"replay of the recorded answers in {replay.name} "
                        "(no ANTHROPIC_API_KEY set; set it to ask the real API)")
        if not args.json:
            print("agentq demo --agent: an order-support agent over the example activities in workers/ (explicit "
                  "calls streamed from the model, a latent draftReply answered by the model, a final output)")
        print(f"LLM: {provider}", file=sys.stderr if args.json else sys.stdout, flush=True)
        if not args.json:
            print()
        return _run_job(settings, _read_demo_job(DEMO_AGENT_JOB), modules=["workers"], tool_dirs=[],
                        as_json=args.json, embedded=True)


def cmd_submit(args: argparse.Namespace) -> int:
    with _client(args) as client:
        print(client.submit(_read_job(args.file)).id)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    with _client(args) as client:
        print(client.job(args.id).status())
    return 0


def cmd_result(args: argparse.Namespace) -> int:
    with _client(args) as client:
        handle = client.job(args.id)
        record = handle.result(timeout=args.timeout) if args.wait else handle.record()
    _print_json(record)
    return 0 if record["status"] != "failed" else 1


def cmd_events(args: argparse.Namespace) -> int:
    with _client(args) as client:
        for event in client.job(args.id).events(after=args.after, follow=args.follow):
            print(json.dumps({"id": event.id, **event.data}, ensure_ascii=False), flush=True)
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    with _client(args) as client:
        print(client.job(args.id).cancel())
    return 0


def cmd_worker(args: argparse.Namespace, *, engine: bool = False, activities: bool = True) -> int:
    from agentq.runtime.worker import DEFAULT_MODULES, build_runtime, serve

    modules = args.module or (list(DEFAULT_MODULES) if activities else [])
    runtime = build_runtime(args.settings, modules=modules, tool_dirs=args.tools)
    serve(runtime, activities=activities, engine=engine, concurrency=args.concurrency, pool=args.pool,
          loglevel=args.loglevel, hostname=args.hostname)
    return 0


def cmd_dispatcher(args: argparse.Namespace) -> int:
    return cmd_worker(args, engine=True, activities=bool(args.module))


def cmd_api(args: argparse.Namespace) -> int:
    """`agentq api`: the HTTP API and the web page (SPEC §14)."""
    from agentq.api.server import serve

    tools = _local_tools(args.module, args.tools) if (args.module or args.tools) and not args.embedded else None
    serve(args.settings, host=args.host, port=args.port, auth_enabled=not args.no_auth, embedded=args.embedded,
          modules=args.module, tool_dirs=args.tools, tools=tools)
    return 0


def cmd_healthcheck(args: argparse.Namespace) -> int:
    """`agentq healthcheck`: 0 when a worker or dispatcher of this host announced itself within two heartbeats,
    else 1 with one line saying why (for container healthchecks)."""
    from agentq.runtime import health
    from agentq.runtime.root import open_store

    settings = args.settings
    store = open_store(settings)
    try:
        verdict = health.check(store, hostname=args.hostname, role=args.role, heartbeat_s=settings.heartbeat_s,
                               timeout_s=args.timeout)
    finally:
        store.close()
    if verdict.healthy:
        print(verdict.message)
        return 0
    print(f"agentq healthcheck: {verdict.message}", file=sys.stderr)
    return 1


def cmd_metrics(args: argparse.Namespace) -> int:
    """`agentq metrics --port N`: serve the Prometheus metrics (SPEC §15) without the API."""
    import secrets

    from agentq.runtime.metrics import MetricsServer
    from agentq.runtime.root import connect

    settings = args.settings
    token = None if args.no_auth else (settings.metrics_token or secrets.token_urlsafe(24))
    parts = connect(settings)
    try:
        try:
            server = MetricsServer(parts, args.host, args.port, (token,) if token else ()).start()
        except OSError as error:
            raise ConfigurationError(f"cannot listen on {args.host}:{args.port}: {error.strerror or error}") from None
        print(f"agentq metrics: serving http://{args.host}:{server.port}/metrics", flush=True)
        if token and not settings.metrics_token:
            print(f"agentq metrics: no AGENTQ_METRICS_TOKEN set; scrape with `Authorization: Bearer {token}`",
                  flush=True)
        elif not token:
            print("agentq metrics: authentication is off (--no-auth)", flush=True)
        try:
            server.serve_forever()
        finally:
            server.stop()
    finally:
        parts.close()
    return 0


def cmd_tools(args: argparse.Namespace) -> int:
    from agentq.protocol.compose import compose, solution_bytes

    tools = _local_tools(args.module or ["workers"], args.tools)
    if args.settings.redis_url_is_set:
        with _client(args, tools=tools) as client:
            # what a submission would see: published tools, then this process's, against known activities
            available, live = client.tools(), set(client.activities())
            for name, conflict in client.tool_conflicts().items():
                print(f"agentq: warning: tool {name!r} was published with different schemas "
                      f"(last by {conflict['publisher']})", file=sys.stderr)
    else:
        from agentq.protocol.activities import Activity

        available, live = tools.snapshot(), set(Activity.names)
    sys.stdout.write(solution_bytes(compose(list(available.values()), sorted(live))).decode() + "\n")
    return 0


def cmd_activities(args: argparse.Namespace) -> int:
    """`agentq activities [--json]`: every known activity (SPEC §3), live or not."""
    with _client(args) as client:
        known = client.activities()
    if args.json:
        _print_json(known)
    else:
        _print_activities(known)
    return 0


def cmd_activities_forget(args: argparse.Namespace) -> int:
    """`agentq activities forget NAME`: retire a known activity at once, so its tools turn latent."""
    with _client(args) as client:
        if not client.forget_activity(args.name):
            known = ", ".join(sorted(client.activities())) or "none"
            return _fail(f"activity {args.name!r} is not known (known activities: {known})")
        still = client.activities().get(args.name)
    if still is not None and still["live"]:
        print(f"agentq: warning: activity {args.name!r} is still served by live workers "
              f"({', '.join(still['workers']) or 'this process'}); it stays known while they announce it",
              file=sys.stderr)
    print(f"forgot activity {args.name}")
    return 0


def _print_activities(known: dict[str, dict]) -> None:
    """The known activities as a table: name, live or not, workers, queue, last announcement (and its age)."""
    if not known:
        print("no known activities (none announced within AGENTQ_ACTIVITY_MEMORY_S)")
        return
    rows = [("ACTIVITY", "LIVE", "WORKERS", "QUEUE", "LAST ANNOUNCED")]
    for name, entry in known.items():
        rows.append((name, "yes" if entry["live"] else "no", ", ".join(entry["workers"]) or "-",
                     str(entry.get("queue") or "-"), _when(entry["last_seen"])))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[-1]]))


def _when(iso: str) -> str:
    """An ISO-8601 UTC time to the second and how long ago it was: `2025-01-15 10:30:00 UTC (3 h ago)`."""
    from datetime import UTC, datetime

    try:
        moment = datetime.fromisoformat(iso.replace("Z", "+00:00")).astimezone(UTC)
    except ValueError:
        return iso
    seconds = max(0.0, (datetime.now(UTC) - moment).total_seconds())
    age = f"{int(seconds)} s"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            age = f"{int(seconds // size)} {unit}"
            break
    return f"{moment:%Y-%m-%d %H:%M:%S} UTC ({age} ago)"


# ------------------------------------------------------------------------------- calls and approvals


def cmd_calls(args: argparse.Namespace) -> int:
    """`agentq calls ID [--json]`: the job's calls (SPEC §14 `/calls`)."""
    with _client(args) as client:
        calls = client.calls(args.id)
    if args.json:
        _print_json(calls)
    else:
        _print_calls(args.id, calls)
    return 0


def cmd_approve(args: argparse.Namespace) -> int:
    """`agentq approve ID CALL`: let a call awaiting approval run."""
    with _client(args) as client:
        call = client.approve(args.id, args.call)
    return _decided(args, "approved", call)


def cmd_reject(args: argparse.Namespace) -> int:
    """`agentq reject ID CALL [--reason TEXT]`: fail a call awaiting approval ("rejected by reviewer")."""
    with _client(args) as client:
        call = client.reject(args.id, args.call, reason=args.reason)
    return _decided(args, "rejected", call)


def cmd_edit(args: argparse.Namespace) -> int:
    """`agentq edit ID CALL PARAMS_JSON`: replace a waiting call's parameters (re-validated) and let it run."""
    params = _read_params(args.params)
    with _client(args) as client:
        try:
            call = client.edit(args.id, args.call, params)
        except JobValidationError as error:  # every problem on the one line, each with its pointer
            return _fail(f"{error.summary}: " + "; ".join(str(p) for p in error.problems)
                         if error.problems else str(error))
    return _decided(args, "edited", call)


def _decided(args: argparse.Namespace, verb: str, call: dict) -> int:
    if args.json:
        _print_json(call)
    else:
        line = f"{verb} {call['id']} ({call['tool']}); status: {call['status']}"
        if call.get("error"):
            line += f"; {call['error'].get('message')}"
        print(line)
    return 0


def _read_params(text: str) -> Any:
    """PARAMS_JSON: a JSON text, `@FILE` for a file's, or `-` for stdin's; unreadable, non-UTF-8 or invalid
    JSON is one clear error."""
    source = "PARAMS_JSON"
    if text == "-" or text.startswith("@"):
        path = "-" if text == "-" else text[1:]
        source = "stdin" if path == "-" else f"params file {path}"
        try:
            data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
        except OSError as error:
            raise JobValidationError(f"cannot read params file {path}: {error.strerror or error}") from None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise JobValidationError(f"{source} is not UTF-8 text: byte {error.start}: {error.reason}") from None
    try:
        return json.loads(text)
    except ValueError as error:
        raise JobValidationError(f"{source} is not valid JSON: {error}") from None


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
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[-1]]))
    for call in calls:
        if call["error"]:
            print(f"{call['id']}: {call['error'].get('type')}: {call['error'].get('message')}")


# ------------------------------------------------------------------------------------------ helpers


def _local_tools(modules: list[str], tool_dirs: list[str]) -> Any:
    """The default tool registry after importing `modules` and loading `tool_dirs` (their tools join those
    the fleet published)."""
    from agentq.protocol.tools import Tool
    from agentq.runtime.worker import import_modules, load_tool_dirs

    load_tool_dirs(Tool, [*import_modules(modules), *tool_dirs])
    return Tool


def _run_job(settings: Any, job: Any, *, modules: list[str], tool_dirs: list[str], as_json: bool,
             embedded: bool) -> int:
    from agentq.client import Client

    view = None if as_json else LiveView()
    if embedded:
        from agentq.runtime.embedded import Embedded

        with Embedded(modules=modules or ["workers"], tool_dirs=tool_dirs, settings=settings) as runtime, \
                Client(settings=runtime.settings) as client:
            record = _follow(client, job, view)
    else:
        tools = _local_tools(modules, tool_dirs) if modules or tool_dirs else None
        with Client(settings=settings, tools=tools) as client:
            record = _follow(client, job, view)
    if view is None:
        _print_json(record)
    else:
        view.summary(record)
    return 0 if record["status"] == "succeeded" else 1


def _follow(client: Any, job: Any, view: LiveView | None) -> dict:
    handle = client.submit(job)
    if view is not None:
        view.job_id = handle.id
        for event in handle.events(technical=True):
            view.show(event.data)
    return handle.result()


class LiveView:
    """A readable live view of a job's events: one line per call start/finish, thoughts, job end."""

    ICONS: ClassVar[dict[str, str]] = {"done": "✓", "failed": "✗", "canceled": "⊘", "skipped": "-"}
    TEXT_PARTS = frozenset({"text_output_stream", "text_output"})

    def __init__(self, out: Callable[[str], None] | None = None):
        self.out = out or (lambda line: print(line, flush=True))
        self.job_id = ""
        self.started = time.monotonic()
        self.names: dict[str, str] = {}
        self.final_output_due = False  # an agent's final output comes as a text part after its tick.finished

    def show(self, envelope: dict) -> None:
        event = envelope.get("event")
        call_id = envelope.get("call_id", "")
        if call_id and call_id not in self.names and (envelope.get("tool") or envelope.get("instance")):
            instance = envelope.get("instance")
            tool = str(envelope.get("tool") or call_id)
            self.names[call_id] = f"{tool} [{instance}]" if instance else tool
        name = self.names.get(call_id, envelope.get("tool") or call_id) if call_id else ""
        if event == "job.queued":
            what = "agent job" if envelope.get("kind") == "agent" else f"{envelope.get('calls', 0)} calls"
            self.out(f"job {envelope['job_id']} queued ({what})")
        elif event == "tick.started":
            note = " (correction)" if envelope.get("corrective") else ""
            attempt = envelope.get("attempt", 1)
            note += f" (attempt {attempt})" if attempt > 1 else ""
            self.out(f"  ◆ tick {envelope.get('tick')}: asking the model{note}")
        elif event == "tick.finished":
            said = [f"{envelope.get('calls', 0)} call(s)"]
            if envelope.get("problems"):
                said.append(f"{len(envelope['problems'])} problem(s)")
            if envelope.get("output"):
                said.append("the final output")
                self.final_output_due = True
            self.out(f"  ◆ tick {envelope.get('tick')}: the model answered: {', '.join(said)}")
        elif event == "call.started":
            attempt = envelope.get("attempt", 1)
            self.out(f"  ▶ {name:<22} running" + (f" (attempt {attempt})" if attempt > 1 else ""))
        elif event == "call.retrying":
            error = envelope.get("error") or {}
            self.out(f"  ↻ {name:<22} retry in {envelope.get('retry_in_s', 0):.2f} s — "
                     f"{error.get('type')}: {error.get('message')}")
        elif event == "call.finished":
            status = envelope.get("status", "")
            line = f"  {self.ICONS.get(status, '?')} {name:<22} {status:<8} {envelope.get('duration_ms', 0):8.1f} ms"
            if envelope.get("error"):
                error = envelope["error"]
                line += f"  {error.get('type')}: {error.get('message')}"
                if envelope.get("absorbed"):
                    line += "  (handled by its || branch)"
            self.out(line)
        elif event == "thought":
            self.out(f"  💭 {(envelope.get('part') or {}).get('content')}")
        elif event == "part":
            self.show_part(envelope.get("part") or {})

    def show_part(self, part: dict) -> None:
        if part.get("type") in self.TEXT_PARTS:
            if self.final_output_due:  # the agent's final output: the summary shows it as the job's result
                self.final_output_due = False
                return
            self.out(f"  💬 {part.get('text')}")
            return
        self.out(f"  · {part.get('activity_type', part.get('type'))}: {part.get('content') or part.get('text')}")

    def summary(self, record: dict) -> None:
        elapsed = time.monotonic() - self.started
        self.out(f"job {record['id']} {record['status']} in {elapsed:.2f} s")
        if record.get("error"):
            self.out(f"error: {record['error'].get('type')}: {record['error'].get('message')}")
        state = record.get("state")
        if state in (None, {}):
            self.out("no state")
        else:
            self.out("state:")
            self.out(json.dumps(state, indent=2, ensure_ascii=False))
        if record.get("instances"):
            self.out("instances:")
            self.out(json.dumps(record["instances"], indent=2, ensure_ascii=False))
        if record.get("result") is not None and record.get("result") != state:  # an agent's final output
            self.out("result:")
            self.out(json.dumps(record["result"], indent=2, ensure_ascii=False))
        line = usage_line(record.get("usage") or {})
        if line:
            self.out(line)


def usage_line(usage: dict) -> str | None:
    """What the job's model requests used, or None when it made none: the input tokens counted whole (those the
    prompt cache wrote and read included), then the output tokens."""
    requests = int(usage.get("requests") or 0)
    if not requests:
        return None
    written, read = int(usage.get("cache_creation_input_tokens") or 0), int(usage.get("cache_read_input_tokens") or 0)
    total_in, out = int(usage.get("input_tokens") or 0) + written + read, int(usage.get("output_tokens") or 0)
    head = f"usage: {requests} model request{'' if requests == 1 else 's'}"
    if not total_in and not out:
        return f"{head} (no token counts were reported)"
    cache = f" ({written:,} written to the prompt cache, {read:,} read from it)" if written or read else ""
    return f"{head}, {total_in:,} input tokens{cache}, {out:,} output tokens"


def _client(args: argparse.Namespace, *, tools: Any = None) -> Any:
    from agentq.client import Client

    return Client(settings=args.settings, tools=tools)


def _read_demo_job(which: tuple[str, str] = DEMO_JOB) -> str:
    from importlib import resources

    package, name = which
    with resources.as_file(resources.files(package).joinpath(name)) as path:
        return _read_job(str(path))


def _read_job(path: str) -> str:
    """The text of a job file ('-' for stdin); unreadable or non-UTF-8 files are one clear error. Parsing (and
    its nesting and size limits) is the job service's, so every way in checks a job the same way."""
    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as error:
        raise JobValidationError(f"cannot read job file {path}: {error.strerror or error}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise JobValidationError(f"job file {path} is not UTF-8 text",
                                 [Problem("", f"byte {error.start}: {error.reason}")]) from None


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentq", description="A distributed task-queue backend for LLM agents.",
                                     epilog=REDIS_RULE)
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")

    def command(name: str, handler: Callable[..., int], help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help, epilog=REDIS_RULE)
        p.set_defaults(handler=handler)
        return p

    def modules(p: argparse.ArgumentParser, default_note: str = "") -> None:
        p.add_argument("-m", "--module", action="append", default=[], metavar="MODULE",
                       help=f"import a module that registers tools and activities (repeatable){default_note}")
        p.add_argument("--tools", action="append", default=[], metavar="DIR", help="load tool JSON files from DIR")

    run = command("run", cmd_run, "submit a job, stream its events, wait, print the result")
    run.add_argument("file", help="job JSON file ('-' for stdin)")
    modules(run)
    run.add_argument("--json", action="store_true", help="print only the final job record")
    run.add_argument("--embedded", action="store_true",
                     help="private Redis and in-process workers (the default when AGENTQ_REDIS_URL is unset)")

    demo = command("demo", cmd_demo, "run the example order pipeline in embedded mode")
    demo.add_argument("--json", action="store_true", help="print only the final job record")
    demo.add_argument("--agent", action="store_true",
                      help="run the example agent job instead: the Anthropic API when ANTHROPIC_API_KEY is set, "
                           "else its packaged replay file")

    submit = command("submit", cmd_submit, "submit a job and print its id")
    submit.add_argument("file", help="job JSON file ('-' for stdin)")

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

    for name, handler, text, note in (
        ("worker", cmd_worker, "serve the activities registered by modules", " (default: workers)"),
        ("dispatcher", cmd_dispatcher, "serve the engine queues (latent calls, modules, agent ticks)", ""),
    ):
        p = command(name, handler, text)
        modules(p, note)
        p.add_argument("--concurrency", type=int, default=None, help="worker processes/threads (default: CPUs)")
        p.add_argument("--pool", default="prefork", choices=["prefork", "threads", "solo"], help="Celery pool")
        p.add_argument("--loglevel", default="INFO")
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
    modules(api)

    healthcheck = command("healthcheck", cmd_healthcheck,
                          "exit 0 when a worker or dispatcher of this host announced itself within two heartbeats "
                          "(for container healthchecks), else 1 with the reason")
    healthcheck.add_argument("--role", choices=["any", "worker", "dispatcher"], default="any",
                             help="which process must be live: a worker (serves activities), a dispatcher (serves "
                                  "the engine queue) or either (default)")
    healthcheck.add_argument("--hostname", default=None, help="the host to check (default: this one)")
    healthcheck.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for Redis (default: 5)")

    metrics = command("metrics", cmd_metrics, "serve the Prometheus metrics at http://HOST:PORT/metrics "
                      "(without the API)")
    metrics.add_argument("--port", type=int, required=True, help="the port to listen on (0: any free port)")
    metrics.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: 127.0.0.1)")
    metrics.add_argument("--no-auth", action="store_true",
                         help="serve without a bearer token (default: AGENTQ_METRICS_TOKEN, or a random one printed "
                              "at start)")

    tools = command("tools", cmd_tools, "print the composed solution schema of the known tools")
    modules(tools, " (default: workers)")

    activities = command("activities", cmd_activities,
                         "list the known activities: live or not, their workers, queue and last announcement")
    activities.add_argument("--json", action="store_true", help="print them as one JSON object by name")
    activities.usage = "%(prog)s [-h] [--json] [forget NAME]"  # the action is optional
    actions = activities.add_subparsers(title="actions", metavar="ACTION")
    forget_help = "retire a known activity at once, so its tools turn latent"
    forget = actions.add_parser("forget", help=forget_help, description=forget_help, epilog=REDIS_RULE)
    forget.add_argument("name", metavar="NAME", help="the activity to forget")
    forget.set_defaults(handler=cmd_activities_forget)

    calls = command("calls", cmd_calls, "list a job's calls: status, attempts, duration, what each waits on")
    calls.add_argument("id")
    calls.add_argument("--json", action="store_true", help="print them as a JSON array (SPEC §14 /calls)")

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
    return parser


if __name__ == "__main__":
    sys.exit(main())

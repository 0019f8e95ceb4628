"""Agent jobs against a model: agentq's own cost per tick, dispatch while the model streams, and how much of each
request the prompt cache can reuse. One run, side by side, against the fake Messages API server of
``tests/fake_anthropic.py`` through the real ``anthropic`` SDK.

Run (from the repository root, with the dev extra installed: ``tests/fake_anthropic.py`` imports pytest)::

    .venv/bin/python benchmarks/llm.py [--ticks 50] [--repeat 3] [--unit 1.0] [--concurrency 8]
    .venv/bin/python benchmarks/llm.py --quick     # a smoke run (smaller, shorter, one round): about 15 s

Not a test: the numbers depend on the machine. It starts a private ``redis-server`` on a free port (never the
machine's shared Redis), an in-process worker that serves the engine queue and the benchmark's activities
(``agentq.runtime.worker.InProcessWorker``, the threads pool, as embedded mode), and the fake server in a thread
of the same process: the model, the SDK, the worker and the client share one Python process (and its GIL).

(1) Overhead per tick with a zero-latency model. An agent job of ``--ticks`` ticks, each answered at once with
    one call of a no-op activity (then one more tick that gives the output), timed from submit to the job's
    record (``Client.submit(...).result()``), divided by the number of model requests. It includes everything
    a tick costs end to end: claiming the tick, composing the tools, rebuilding the conversation, the model
    request (the SDK's HTTP request and its server-sent events from the fake server, answered at once), writing
    and dispatching the call, running it (a no-op) and committing its result, then the next tick's task. The
    same job with no calls (each tick answers ``calls: []`` until the last) leaves the activity out; the same
    job with the replay provider (``AGENTQ_LLM=replay:<file>``: in-process, no HTTP, no SDK) leaves the
    model's transport out, which leaves agentq's own work (plus the replay's key of each request). The
    times between requests along the job show that a tick costs more as the conversation grows.
(2) Streaming dispatch. The model streams a solution of 5 calls over 5 units of time (``--unit``, default 1 s):
    each call's closing brace arrives one unit after the previous one (the first after one unit). Each call's
    activity takes one unit and reads the previous call's result (a chain, as "validate, then charge, then
    confirm"), so it can start only when that one is done. Dispatching each call as it arrives (what agentq
    does) is compared with a model whose stream sends the whole solution at the end of the same 5 units, which
    is what dispatching after the answer ends amounts to. The same with 5 independent calls shows where the
    gain comes from: there the last call arrives as the stream ends, so both ways end one unit after it;
    streaming brings the first results earlier, not the job's end.
(3) Cache friendliness. A 5-tick job (one call per tick, its result in state). For ticks 2-5, each request body
    as the fake server received it is serialized in the order the API caches it (each tool, each system block,
    each message, as JSON in the order sent) and compared with the previous request's: the share of the
    previous request's whole prefix (tools + system + its messages) that request n repeats byte for byte. The
    table also shows what the request's own ``cache_control`` breakpoints cover (tools and system only).
(4) Bounded context. A 30-tick job reading one 50 KB page a tick (pushed to ``†state.pages``): the tokens each
    request sends (4 bytes a token) and the share of ticks whose request repeats the previous one's whole
    conversation (a prompt-cache hit), without compaction (``max_input_tokens`` 1,000,000) and with a 100,000-token
    window, where the older exchanges are compacted in one step when the conversation passes three quarters of it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentq.client import Client
from agentq.embedded import RedisServer
from agentq.protocol.activities import ActivityRegistry
from agentq.protocol.tools import ToolRegistry
from agentq.runtime.root import Runtime
from agentq.runtime.worker import InProcessWorker
from agentq.settings import Settings
from tests.fake_anthropic import Answer, FakeAnthropic, RecordedRequest

STREAMED_CALLS = 5
CACHE_TICKS = 5
CONTEXT_TICKS = 30
PAGE_BYTES = 50_000
OUTPUT = {"type": "object", "properties": {"done": {"type": "boolean"}}, "required": ["done"]}
FINAL = {"calls": [], "output": {"done": True}}


# ------------------------------------------------------------------------------------------ tools and jobs


def registries(unit_s: float) -> tuple[ToolRegistry, ActivityRegistry]:
    tools, activities = ToolRegistry(), ActivityRegistry()

    def tool(name: str, description: str, params: dict, output: dict) -> None:
        tools.register(name, {"type": "object", "description": description, "properties": {
            "_tool": {"type": "string", "const": name}, "_outputPath": {"type": "string", "pattern": "^†"},
            **params, "_output": output}})

    tool("noop", "Does nothing and returns its index.", {"i": {"type": "integer"}}, {"type": "integer"})
    tool("wait", f"Takes {unit_s:g} s and returns x + 1.", {"x": {"type": "integer"}}, {"type": "integer"})
    tool("lookup", "Looks a key up and returns a small record.", {"key": {"type": "string"}}, {"type": "object"})
    tool("read_page", "Returns page n of a long text.", {"n": {"type": "integer"}}, {"type": "string"})
    activities.register("noop", lambda call: call["i"])
    activities.register("read_page", lambda call: (f"page {call['n']}: the fox and the dog. " * 2000)[:PAGE_BYTES])

    def wait(call: dict) -> int:
        time.sleep(unit_s)
        return int(call["x"]) + 1

    activities.register("wait", wait)
    activities.register("lookup", lambda call: {"key": call["key"], "value": f"value of {call['key']}",
                                                "tags": ["a", "b"], "score": len(call["key"])})
    return tools, activities


def agent_job(text: str, tools: list[str], max_ticks: int) -> dict:
    return {"context": [{"type": "text", "role": "system", "text": "You are a benchmark agent."},
                        {"type": "text", "text": text}],
            "tools": tools, "output": OUTPUT, "options": {"max_ticks": max_ticks}}


def tick_of(request: RecordedRequest) -> int:
    """Which tick of its job a request is (0 for the first): the number of earlier solutions in it."""
    return sum(1 for turn in request.body.get("messages") or [] if turn.get("role") == "assistant")


def overhead_solution(tick: int, ticks: int, *, calls: bool) -> dict:
    if tick >= ticks:
        return FINAL
    return {"calls": [{"_tool": "noop", "i": tick, "_outputPath": f"†state.r{tick}"}] if calls else [],
            "output": None}


def streamed_calls(chain: bool) -> list[dict]:
    return [{"_tool": "wait", "x": f"†state.s{k - 1}" if chain and k else k, "_outputPath": f"†state.s{k}"}
            for k in range(STREAMED_CALLS)]


def streamed_answer(chain: bool, unit_s: float, *, streaming: bool) -> Answer:
    """The first tick's answer: each call's text one unit after the previous one, or all of it after 5 units."""
    calls = [json.dumps(c, ensure_ascii=False, separators=(",", ":")) for c in streamed_calls(chain)]
    text = '{"calls":[' + ",".join(calls) + '],"output":null}'
    if not streaming:
        return Answer(chunks=[text], first_byte_delay_s=STREAMED_CALLS * unit_s)
    pieces = ['{"calls":[' + calls[0], *("," + c for c in calls[1:])]
    pieces[-1] += '],"output":null}'
    return Answer(chunks=pieces, first_byte_delay_s=unit_s, delay_s=unit_s)


def cache_solution(tick: int) -> dict:
    if tick >= CACHE_TICKS - 1:
        return FINAL
    return {"calls": [{"_tool": "lookup", "key": f"item-{tick}", "_reasoningForCall": f"step {tick + 1}",
                       "_outputPath": f"†state.items.k{tick}"}], "output": None}


# ------------------------------------------------------------------------------------------ measuring


def page_solution(tick: int) -> dict:
    if tick >= CONTEXT_TICKS:
        return FINAL
    return {"calls": [{"_tool": "read_page", "n": tick + 1, "_outputPath": "†state.pages", "_outputMethod": "push"}],
            "output": None}


def context_run(fake: FakeAnthropic, client: Client, window: int) -> tuple[list[int], int, int]:
    """(4): the tokens of each request, the ticks that repeat the previous request's conversation, and the
    job's `usage.context_tokens_saved`."""
    fake.responder = lambda request: Answer.solution(page_solution(tick_of(request)), chunk_size=1 << 16)
    before = len(fake.exchanges)
    job = agent_job("Read the pages, one per tick.", ["read_page"], CONTEXT_TICKS + 1)
    job["options"]["context"] = {"max_input_tokens": window}
    _, _, handle = run_job(client, job)
    requests = [e.request for e in fake.exchanges[before:]]

    def conversation(request: RecordedRequest) -> list[str]:
        return [json.dumps([{k: v for k, v in b.items() if k != "cache_control"} for b in m["content"]],
                           ensure_ascii=False) for m in request.body["messages"]]

    hits = sum(conversation(b)[:len(conversation(a))] == conversation(a) for a, b in itertools.pairwise(requests))
    saved = int(handle.result(timeout=60)["usage"].get("context_tokens_saved") or 0)
    return [len(r.raw) // 4 for r in requests], hits, saved


def run_job(client: Client, job: dict) -> tuple[float, float, Any]:
    """Submit `job`, wait for its record: (wall seconds, CPU seconds of this process, the handle)."""
    cpu, start = time.process_time(), time.perf_counter()
    handle = client.submit(job)
    record = handle.result(timeout=600)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    if record["status"] != "succeeded":
        raise RuntimeError(f"job {record['id']} {record['status']}: {record.get('error')}")
    return elapsed, cpu, handle


def write_replay(path: Path, ticks: int) -> None:
    """Answers for jobs of `ticks` one-call ticks plus a final one, in any number of runs: tick k > 0 is the one
    whose last turn reports the previous tick's write (its `match`), tick 0 the one without."""
    with open(path, "w", encoding="utf-8") as handle:
        for tick in range(ticks + 1):
            match = {"match": f"wrote †state.r{tick - 1} (set)"} if tick else {}
            handle.write(json.dumps({**match, "solution": overhead_solution(tick, ticks, calls=True)}) + "\n")


def iso_seconds(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def blocks(body: dict) -> list[str]:
    """A request body as the API caches it: each tool, each system block, each message (JSON, as sent)."""
    dump = json.dumps
    return ([dump(t, ensure_ascii=False) for t in body.get("tools") or []]
            + [dump(s, ensure_ascii=False) for s in body.get("system") or []]
            + [dump(m, ensure_ascii=False) for m in body.get("messages") or []])


def common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    lo, hi = 0, n  # binary search on equal prefixes (the strings are long; slices compare in C)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def breakpoint_prefix(body: dict) -> str:
    """The request up to and including its last block with ``cache_control`` (what its breakpoints cover)."""
    parts = blocks(body)
    items = [*(body.get("tools") or []), *(body.get("system") or []), *(body.get("messages") or [])]
    last = max((i for i, item in enumerate(items) if _has_cache_control(item)), default=-1)
    return "".join(parts[: last + 1])


def _has_cache_control(item: Any) -> bool:
    if isinstance(item, dict):
        return "cache_control" in item or any(_has_cache_control(v) for v in item.values())
    if isinstance(item, list):
        return any(_has_cache_control(v) for v in item)
    return False


# ------------------------------------------------------------------------------------------ main


class Bench:
    """One private Redis, one fake server; a runtime (and its worker) per provider."""

    def __init__(self, url: str, fake: FakeAnthropic, unit_s: float, concurrency: int, ticks: int):
        self.url, self.fake, self.unit_s, self.concurrency = url, fake, unit_s, concurrency
        self.settings = Settings(redis_url=url, max_calls=10_000, lease_s=30.0)
        self.max_ticks = ticks + 2

    def start(self, llm: str) -> tuple[Runtime, InProcessWorker, Client]:
        tools, activities = registries(self.unit_s)
        runtime = Runtime(settings=self.settings.model_copy(update={"llm": llm}), activities=activities, tools=tools)
        worker = InProcessWorker(runtime, engine=True, concurrency=self.concurrency, pool="threads").start()
        return runtime, worker, Client(settings=self.settings)

    @staticmethod
    def stop(runtime: Runtime, worker: InProcessWorker, client: Client) -> None:
        worker.stop()
        client.close()
        runtime.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ticks", type=int, default=50, help="ticks with a call in (1) (plus one for the output)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of (1); the table shows the median")
    parser.add_argument("--unit", type=float, default=1.0, help="(2): seconds between streamed calls, per activity")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--quick", action="store_true", help="a smoke run: --ticks 5 --repeat 1 --unit 0.2")
    args = parser.parse_args(argv)
    if args.quick:
        args.ticks, args.repeat, args.unit = 5, 1, 0.2
    ticks, repeat, unit = max(1, args.ticks), max(1, args.repeat), args.unit

    rows: list[tuple[str, str, str, str]] = []

    def row(name: str, value: str, target: str = "", ok: bool | None = None) -> None:
        rows.append((name, value, target, "" if ok is None else ("ok" if ok else "MISSED")))

    with RedisServer() as server, FakeAnthropic() as fake, tempfile.TemporaryDirectory() as tmp:
        # The fake server writes each server-sent event with its own small write; without TCP_NODELAY, Nagle's
        # algorithm and the client's delayed ACK hold every answer back ~40 ms, which the real API does not do.
        # Accepted sockets inherit the option from the listening socket on Linux.
        if fake._server is not None:
            fake._server.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # the SDK reads these when the runtime makes its first request (this process only)
        os.environ.update(ANTHROPIC_API_KEY="sk-ant-benchmark", ANTHROPIC_BASE_URL=fake.base_url)
        os.environ.pop("ANTHROPIC_AUTH_TOKEN", None)
        bench = Bench(server.url, fake, unit, args.concurrency, ticks)
        print(f"private redis-server on {server.url}; fake Messages API on {fake.base_url}; ticks={ticks} "
              f"repeat={repeat} unit={unit:g} s concurrency={args.concurrency}", flush=True)

        # (1a) the replay provider: no HTTP, no SDK
        replay_file = Path(tmp) / "overhead.jsonl"
        write_replay(replay_file, ticks)
        parts = bench.start(f"replay:{replay_file}")
        replay_runs: list[tuple[float, float]] = []
        try:
            job = agent_job("Run the ticks.", ["noop"], bench.max_ticks)
            run_job(parts[2], job)  # warm up
            for _ in range(repeat):
                wall, cpu, _ = run_job(parts[2], job)
                replay_runs.append((wall, cpu))
        finally:
            bench.stop(*parts)

        parts = bench.start("anthropic")
        try:
            client = parts[2]
            # (1b) and (1c) through the SDK and the fake server, answered at once
            fast: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
            arrivals: list[float] = []
            for calls in (True, False):
                fake.responder = lambda request, calls=calls: Answer.solution(
                    overhead_solution(tick_of(request), ticks, calls=calls), chunk_size=1 << 20)
                job = agent_job("Run the ticks.", ["noop"], bench.max_ticks)
                run_job(client, job)  # warm up
                for _ in range(repeat):
                    before = len(fake.exchanges)
                    wall, cpu, _ = run_job(client, job)
                    fast[calls].append((wall, cpu))
                    if calls:  # when each request of the last round arrived: the time per tick along the job
                        arrivals = [e.request.received_at for e in fake.exchanges[before:]]
            print("  (1) done", flush=True)

            # (2) streaming dispatch
            streamed: dict[tuple[bool, bool], float] = {}
            overlap: dict[bool, int] = {}
            offset = time.time() - time.monotonic()
            for chain in (True, False):
                for streaming in (True, False):
                    def answer(request: RecordedRequest, chain: bool = chain, streaming: bool = streaming) -> Answer:
                        if tick_of(request) == 0:
                            return streamed_answer(chain, unit, streaming=streaming)
                        return Answer.solution(FINAL)

                    fake.responder = answer
                    before = len(fake.exchanges)
                    wall, _, handle = run_job(client, agent_job("Run the calls.", ["wait"], 4))
                    streamed[chain, streaming] = wall
                    if streaming:
                        first = fake.exchanges[before]
                        ended = (first.last_chunk_at or 0.0) + offset
                        overlap[chain] = sum(1 for c in handle.calls()
                                             if c["started_at"] and iso_seconds(c["started_at"]) < ended)
            print("  (2) done", flush=True)

            # (3) cache friendliness
            fake.responder = lambda request: Answer.solution(cache_solution(tick_of(request)))
            before = len(fake.exchanges)
            run_job(client, agent_job("Look the items up, one per tick.", ["lookup"], CACHE_TICKS + 1))
            bodies = [e.request.body for e in fake.exchanges[before:]]
            print("  (3) done", flush=True)

            # (4) bounded context
            bounded = {window: context_run(fake, client, window) for window in (1_000_000, 100_000)}
        finally:
            bench.stop(*parts)

    # ---------------------------------------------------------------------------------------- the table
    requests = ticks + 1

    def per_tick(runs: list[tuple[float, float]]) -> tuple[float, float]:
        return statistics.median(w for w, _ in runs) / requests, statistics.median(c for _, c in runs) / requests

    for name, runs in ((f"(1) zero-latency model via SDK + fake server, {ticks} ticks x 1 no-op call", fast[True]),
                       (f"    same, {ticks} ticks with no calls", fast[False]),
                       (f"    replay provider (in-process: no HTTP, no SDK), {ticks} ticks x 1 call", replay_runs)):
        wall, cpu = per_tick(runs)
        row(name, f"{wall * 1000:.1f} ms/tick  {1 / wall:,.0f} ticks/s  cpu {cpu * 1000:.1f} ms/tick")
        if runs is fast[True] and len(arrivals) >= 6:
            gaps = [b - a for a, b in itertools.pairwise(arrivals)]
            fifth = max(1, len(gaps) // 5)
            row("    time between requests: first fifth of the job, last fifth",
                f"{statistics.mean(gaps[:fifth]) * 1000:.1f} ms  {statistics.mean(gaps[-fifth:]) * 1000:.1f} ms "
                "(each request carries the whole conversation)")

    for chain, label in ((True, f"{STREAMED_CALLS} chained calls"), (False, f"{STREAMED_CALLS} independent calls")):
        on, off = streamed[chain, True], streamed[chain, False]
        row(f"(2) {label}, streamed over {STREAMED_CALLS * unit:g} s, {unit:g} s each: dispatch while streaming",
            f"{on:.2f} s  ({overlap[chain]}/{STREAMED_CALLS} calls started before the answer ended)")
        row("    dispatch after the answer ends (all calls at the end of the same stream)", f"{off:.2f} s")
        ratio = on / off
        if chain:
            row("    while streaming / after the answer", f"{ratio:.2f}x", "<= 0.65x", ratio <= 0.65)
        else:
            row("    while streaming / after the answer", f"{ratio:.2f}x",
                "~1.00x (see (2) above)")

    shares: list[float] = []
    covered: list[float] = []
    sizes: list[str] = []
    for previous, current in itertools.pairwise(bodies):
        prefix, now = "".join(blocks(previous)), "".join(blocks(current))
        shares.append(common_prefix(prefix, now) / len(prefix))
        covered.append(len(breakpoint_prefix(current)) / len(now))
        sizes.append(f"{len(now):,}")
    detail = "  ".join(f"{s:.1%}" for s in shares)
    row(f"(3) ticks 2-{len(bodies)}: share of request n-1 (tools+system+messages) repeated by request n",
        f"{min(shares):.1%} min  ({detail})", ">= 90%", min(shares) >= 0.9)
    row("    request sizes (characters, as serialized)", "  ".join(sizes))
    row("    share of each request up to its own last cache_control breakpoint",
        "  ".join(f"{c:.1%}" for c in covered))

    for window, (tokens, hits, saved) in bounded.items():
        label = "no compaction" if window > 200_000 else f"max_input_tokens {window:,}"
        row(f"(4) {CONTEXT_TICKS} ticks x a {PAGE_BYTES // 1000} KB page, {label}: tokens sent per tick",
            " ".join(f"{t // 1000}k" for t in tokens))
        row("    largest request; ticks repeating the previous request (cache hits); tokens saved",
            f"{max(tokens):,} tokens; {hits}/{len(tokens) - 1}; {saved:,}",
            "< 100,000; most" if window == 100_000 else "",
            (max(tokens) < 100_000 and hits * 3 >= (len(tokens) - 1) * 2) if window == 100_000 else None)

    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    print()
    print(f"{'case':<{widths[0]}}  {'measured':<{widths[1]}}  {'target':<{widths[2]}}")
    print("-" * (sum(widths) + 12))
    for name, value, target, mark in rows:
        print(f"{name:<{widths[0]}}  {value:<{widths[1]}}  {target:<{widths[2]}}  {mark}")
    print("\n(1) is wall time from submit to the job's record per model request (ticks + 1: the last one gives the\n"
          "    output); cpu is this whole process's CPU time (worker threads, fake server, client) per request.\n"
          "(3) agentq sets breakpoints on the solution tool, the last system block and the last block of the\n"
          "    conversation, which moves forward each tick (so request n-1 differs from request n's prefix only by\n"
          "    that marker); the API reads everything up to the previous request's breakpoint from its cache.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

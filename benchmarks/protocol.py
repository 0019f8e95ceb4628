"""Protocol-layer measurements: composition, call validation, reference resolution, and how planning,
folding and scoped contexts scale with the size of a job.

Run: ``python benchmarks/protocol.py`` (from the repository root; pure Python, no Redis). Prints one table
with each number next to its target where there is one, then the scaling table (500 / 2,000 / 10,000 calls
and the 10,000 ÷ 1,000 ratio: about 10 means linear, about 100 quadratic). ``--scaling`` prints only the
scaling table. Not a test: numbers depend on the machine.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentq.protocol.compose import clear_cache, compose, solution_bytes
from agentq.protocol.jobs import plan_job
from agentq.protocol.scopes import ScopedContext
from agentq.protocol.tools import ToolRegistry
from agentq.protocol.validation import call_errors, validate_call
from agentq.protocol.views import LogIndex, resolve
from agentq.protocol.writes import check_write

N_TOOLS = 1_000
N_CALLS = 5_000
N_MESSAGES = 10_000
N_RESOLVES = 20_000

rows: list[tuple[str, str, str]] = []


def median_time(fn: Callable[[], Any], repeat: int, number: int = 1) -> float:
    """Median seconds per call of ``fn`` over ``repeat`` rounds of ``number`` calls."""
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - start) / number)
    return statistics.median(samples)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f} ms"


def row(name: str, value: str, target: str = "", ok: bool | None = None) -> None:
    mark = "" if ok is None else ("  ok" if ok else "  MISSED")
    rows.append((name, value, target + mark))


# ------------------------------------------------------------------------------------------- tools


def make_tool(i: int) -> dict:
    name = f"tool{i:04d}"
    return {
        "type": "object",
        "description": f"Tool number {i}: looks something up.",
        "x-display": {"friendly_name": f"Tool {i}", "icon": "search"},
        "properties": {
            "_tool": {"type": "string", "const": name},
            "_outputPath": {"type": "string", "pattern": "^†"},
            "_scopes": {"type": "array", "items": {"enum": ["state", "input"]}},
            "query": {"type": "string", "description": "What to look up."},
            "limit": {"type": "integer", "minimum": 1, "maximum": 100},
            "filters": {"type": "object", "additionalProperties": {"type": "string"}},
            "_output": {
                "type": "object",
                "properties": {"hits": {"type": "array", "items": {"type": "string"}}, "total": {"type": "integer"}},
                "required": ["hits"],
            },
        },
        "required": ["query"],
    }


def bench_composition() -> tuple[ToolRegistry, dict]:
    schemas = [make_tool(i) for i in range(N_TOOLS)]
    registry = ToolRegistry()
    start = time.perf_counter()
    for schema in schemas:
        registry.register(schema["properties"]["_tool"]["const"], schema)
    per_tool = (time.perf_counter() - start) / N_TOOLS
    row("register (Draft 2020-12 check), per tool", ms(per_tool))

    live = {f"tool{i:04d}" for i in range(0, N_TOOLS, 3)}
    output = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}

    def cold() -> None:
        clear_cache()
        compose(registry, live, output)

    t_cold = median_time(cold, repeat=9)
    row(f"compose {N_TOOLS} tools, cold (registry)", ms(t_cold), "< 100 ms", t_cold < 0.100)

    def cold_list() -> None:
        clear_cache()
        compose(schemas, live, output)

    t_list_cold = median_time(cold_list, repeat=9)
    row(f"compose {N_TOOLS} tools, cold (list)", ms(t_list_cold), "< 100 ms", t_list_cold < 0.100)
    compose(schemas, live, output)
    t_list_cached = median_time(lambda: compose(schemas, live, output), repeat=5, number=5)
    row(f"compose {N_TOOLS} tools, cached (list: content fingerprint)", ms(t_list_cached))

    solution = compose(registry, live, output)
    t_cached = median_time(lambda: compose(registry, live, output), repeat=9, number=1000)
    row(f"compose {N_TOOLS} tools, cached (registry)", ms(t_cached), "< 1 ms", t_cached < 0.001)

    size = len(solution_bytes(solution))
    solution_bytes(solution)
    t_bytes = median_time(lambda: solution_bytes(solution), repeat=9, number=1000)
    row(f"solution_bytes, cached solution ({size // 1024} KiB of JSON)", ms(t_bytes))
    t_dump = median_time(lambda: solution_bytes(dict(solution)), repeat=5)
    row("solution_bytes, first time (json.dumps)", ms(t_dump))
    return registry, solution


# -------------------------------------------------------------------------------------- validation


def bench_validation(solution: dict) -> None:
    rng = random.Random(7)
    calls = []
    for i in range(N_CALLS):
        calls.append({
            "_tool": f"tool{rng.randrange(N_TOOLS):04d}",
            "_reasoningForCall": "Because the user asked.",
            "_outputPath": f"†state.results.r{i}",
            "query": f"query {i}",
            "limit": rng.randint(1, 100),
            "filters": {"lang": "en", "site": "example.com"},
        })
    for call in calls[:50]:  # warm the per-tool validator cache for a fair steady-state number
        validate_call(call, solution)

    def run_valid() -> None:
        for call in calls:
            validate_call(call, solution)

    t = median_time(run_valid, repeat=3)
    row(f"validate_call, valid calls ({N_CALLS} calls, cached validators)", f"{N_CALLS / t:,.0f} /s")

    bad = [dict(c, limit="many", query=3) for c in calls[:1000]]

    def run_invalid() -> None:
        for call in bad:
            call_errors(call, solution, pointer_prefix="/calls/0")

    t = median_time(run_invalid, repeat=3)
    row("call_errors, invalid calls (2 problems each)", f"{len(bad) / t:,.0f} /s")


# -------------------------------------------------------------------------------------- resolution


def make_log(n: int) -> list[dict]:
    rng = random.Random(11)
    log: list[dict] = [
        {"type": "text", "role": "system", "text": "You are a helpful agent."},
        {"type": "data", "kind": "input", "data": {"topic": "weather", "cities": ["Paris", "Lyon", "Nice"]}},
        {"type": "data", "kind": "state", "data": {"user": {"name": "Ada", "status": "new"}, "counter": 0}},
    ]
    while len(log) < n:
        i = len(log)
        choice = rng.random()
        if choice < 0.6:
            key = f"k{rng.randrange(200)}"
            log.append({
                "type": "data", "kind": "state", "data": {"items": {key: {"value": i, "seen": True}}},
                "_path": f"†state.items.{key}", "_outputMethod": "set", "_call": f"call_{i}",
            })
        elif choice < 0.7:
            log.append({
                "type": "data", "kind": "state", "data": {"log": [f"entry {i}"]},
                "_path": "†state.log", "_outputMethod": "concat", "_call": f"call_{i}",
            })
        elif choice < 0.8:
            log.append({
                "type": "data", "kind": "state", "data": {"user": {"status": f"s{i}"}},
                "_path": "†state.user.status", "_outputMethod": "set", "_instance": f"emp_{rng.randrange(5)}",
            })
        elif choice < 0.9:
            log.append({"type": "data", "kind": "notes", "data": {f"n{i % 50}": i}})
        else:
            log.append({"type": "text", "role": "assistant", "text": f"Step {i} done."})
    return log


def bench_resolution() -> None:
    log = make_log(N_MESSAGES)
    expressions = [
        ("†state.user.name", None),
        ("†state.items.k7.value", None),
        ("†state.user.status", "emp_2"),
        ("†state.log.3", None),
        ("†state.missing || †state.user.name", None),
        ("†input.cities.1 && †state.counter", None),
        ("†notes.n3", None),
        ("†state.nothing.here", None),
    ]

    def build() -> None:
        index = LogIndex(log)
        for text, instance in expressions:
            resolve(index, text, instance=instance)

    t_build = median_time(build, repeat=5)
    row(f"LogIndex({N_MESSAGES} msgs) + first resolution of each kind", ms(t_build))

    index = LogIndex(log)
    for text, instance in expressions:
        resolve(index, text, instance=instance)
    work = [expressions[i % len(expressions)] for i in range(N_RESOLVES)]

    def run() -> None:
        for text, instance in work:
            resolve(index, text, instance=instance)

    t = median_time(run, repeat=3)
    row(f"resolve over a {N_MESSAGES}-message log (warm index)", f"{N_RESOLVES / t:,.0f} /s")

    extra = make_log(N_MESSAGES + 200)[N_MESSAGES:]

    def append_and_resolve() -> None:
        idx = LogIndex(log)
        resolve(idx, "†state.user.name")
        start = time.perf_counter()
        for message in extra:
            idx.append(message)
            resolve(idx, "†state.items.k7.value")
        append_and_resolve.elapsed = (time.perf_counter() - start) / len(extra)  # type: ignore[attr-defined]

    append_and_resolve()
    row("append 1 message + resolve (incremental fold)", ms(append_and_resolve.elapsed))  # type: ignore[attr-defined]


# ----------------------------------------------------------------------------------------- scaling

SIZES = (500, 1_000, 2_000, 10_000)
SHOWN = (500, 2_000, 10_000)
STEP_TOOLS = {"step": {"type": "object", "description": "One step.", "properties": {
    "_tool": {"type": "string", "const": "step"}, "x": {}, "_output": {}}}}
scaling: list[tuple[str, dict[int, float]]] = []


def _chain(n: int) -> dict:
    calls = [{"_tool": "step", "x": "†input.seed", "_outputPath": "†state.s0"}]
    calls += [{"_tool": "step", "x": f"†state.s{i - 1}", "_outputPath": f"†state.s{i}"} for i in range(1, n)]
    return {"context": [{"type": "input", "data": {"seed": 1}}], "calls": calls}


def _fan_out(n: int) -> dict:
    """One writer, n - 1 readers of (a part of) what it writes."""
    calls = [{"_tool": "step", "x": "†input.seed", "_outputPath": "†state.root"}]
    calls += [{"_tool": "step", "x": f"†state.root.r{i}", "_outputPath": f"†out.o{i}"} for i in range(1, n)]
    return {"context": [{"type": "input", "data": {"seed": 1}}], "calls": calls}


def _fan_in(n: int) -> dict:
    """n - 1 writers under a common prefix and one reader of that prefix."""
    calls = [{"_tool": "step", "x": "†input.seed", "_outputPath": f"†state.all.w{i}"} for i in range(n - 1)]
    calls.append({"_tool": "step", "x": "†state.all", "_outputPath": "†out.total"})
    return {"context": [{"type": "input", "data": {"seed": 1}}], "calls": calls}


def _writes(n: int) -> list[dict]:
    return [{"type": "data", "kind": "state", "data": {f"s{i}": {"value": i}}, "_path": f"†state.s{i}",
             "_outputMethod": "set", "_call": {"id": f"call_{i}"}} for i in range(n)]


def scale(name: str, measure: Callable[[int], float]) -> None:
    scaling.append((name, {n: measure(n) for n in SIZES}))


def bench_scaling() -> None:
    for label, make in (("plan_job: chain of N calls", _chain), ("plan_job: fan-out, 1 writer N readers", _fan_out),
                        ("plan_job: fan-in, N writers 1 prefix reader", _fan_in)):
        def planning(n: int, make: Callable[[int], dict] = make) -> float:
            job = make(n)
            return median_time(lambda: plan_job(job, tools=STEP_TOOLS), repeat=3 if n < 10_000 else 1)
        scale(label, planning)

    def fold_all(n: int) -> float:  # what finalize does: index the whole log, read the state view once
        log = _writes(n)
        return median_time(lambda: LogIndex(log).view("state"), repeat=5)
    scale("fold N writes, one view at the end (finalize)", fold_all)

    def fold_interleaved(n: int) -> float:  # what a worker's cached index does: a write, then a read
        log = _writes(n)

        def run() -> None:
            index = LogIndex()
            for i, message in enumerate(log):
                index.append(message)
                resolve(index, f"†state.s{i}.value")
        return median_time(run, repeat=3)
    scale("append + resolve, N times (runtime)", fold_interleaved)

    def fold_checked(n: int, check: Callable[[LogIndex, dict], None]) -> float:  # a commit checks its writes
        log = _writes(n)

        def run() -> None:
            index = LogIndex()
            for i, message in enumerate(log):
                check(index, message)
                index.append(message)
                resolve(index, f"†state.s{i}.value")
        return median_time(run, repeat=3 if n < 10_000 else 1)
    scale("check + append + resolve, N times (writes.check_write)", lambda n: fold_checked(n, check_write))
    scale("check + append + resolve, N times (LogIndex.check)", lambda n: fold_checked(n, LogIndex.check))

    def context_no_scopes(n: int) -> float:  # per call, over an N-message log
        index = LogIndex(_writes(n))
        index.view("state")
        return median_time(lambda: ScopedContext.build(index, [], None), repeat=5, number=200)
    scale("ScopedContext.build, no scopes, per call", context_no_scopes)

    def context_small_scope(n: int) -> float:  # per call: 3 `input` messages in an N-message log
        log = [{"type": "input", "data": {"k": i}} for i in range(3)] + _writes(n)
        index = LogIndex(log)
        return median_time(lambda: ScopedContext.build(index, ["input"], None), repeat=5, number=200)
    scale("ScopedContext.build, scope of 3 msgs, per call", context_small_scope)


def print_scaling() -> None:
    width = max(len(name) for name, _ in scaling)
    header = "".join(f"{n:>13,}" for n in SHOWN)
    print(f"\n{'scaling (time)':<{width}}{header}  10k/1k")
    print(f"{'-' * width}{'-' * 13 * len(SHOWN)}  ------")
    for name, times in scaling:
        cells = "".join(f"{ms(times[n]):>13}" for n in SHOWN)
        print(f"{name:<{width}}{cells}  {times[10_000] / times[1_000]:6.1f}")


def main() -> None:
    print(f"agentq protocol benchmarks (Python {sys.version.split()[0]})\n")
    if "--scaling" in sys.argv[1:]:
        bench_scaling()
        print_scaling()
        return
    _, solution = bench_composition()
    bench_validation(solution)
    bench_resolution()
    bench_scaling()
    width = max(len(r[0]) for r in rows)
    vwidth = max(len(r[1]) for r in rows)
    print(f"{'measurement':<{width}}  {'result':>{vwidth}}  target")
    print(f"{'-' * width}  {'-' * vwidth}  ------")
    for name, value, target in rows:
        print(f"{name:<{width}}  {value:>{vwidth}}  {target}")
    print_scaling()


if __name__ == "__main__":
    main()

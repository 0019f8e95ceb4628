"""One trace per job whoever submits it: a client process with no tracing configured submits agent jobs to a
dispatcher and a worker that export OTLP/HTTP to the receiver of tests/e2e/test_tracing_otlp.py.

With a `traceparent`, the job stores it and every span of the job continues it; without one, the first process
that traces the job starts its root span (`job`) once, and every tick, call and module child job joins that trace.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
pytest.importorskip("opentelemetry.proto")

from tests.e2e.test_tracing_otlp import CLIENT_SPAN, TRACE_ID, Receiver, Span, otel_env, receiver  # noqa: F401
from tests.fake_anthropic import Answer, FakeAnthropic
from tests.integration.procs import ROOT, TOOLS_DIR, WorkerProcs, base_env
from tests.integration.test_modules import by_role, write_module

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

# The submitting process: agentq's client, no OTEL_* variable, no OpenTelemetry set up; prints whether it traced
# and the job's record.
SUBMIT = """
import json, sys
from agentq import Client, telemetry
job, traceparent = json.loads(sys.argv[1]), sys.argv[2] or None
client = Client()
handle = client.submit(job, traceparent=traceparent)
print(json.dumps({"tracing": telemetry.enabled(), "record": handle.result(timeout=90)}))
"""

RESEARCH = {
    "type": "object", "description": "Asks the Researcher module.",
    "properties": {"_tool": {"type": "string", "const": "research"}, "_module": {"const": "researcher"},
                   "_outputPath": {"type": "string", "pattern": "^†"}, "question": {"type": "string"},
                   "_output": {"type": "object"}},
    "required": ["_tool", "question"]}
RESEARCHER = {"context": [{"type": "text", "role": "system", "text": "You are the Researcher."}],
              "tools": ["procEcho"], "input": {"type": "object", "properties": {"question": {"type": "string"}}},
              "output": {"type": "object", "properties": {"facts": {"type": "array"}}, "required": ["facts"]}}


def submit_untraced(redis_url: str, job: dict, traceparent: str, **env: str) -> dict:
    """Submit `job` from a separate process that does not trace; the job's final record."""
    done = subprocess.run([sys.executable, "-c", SUBMIT, json.dumps(job), traceparent], cwd=str(ROOT),
                          env=base_env(redis_url, **env), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["tracing"] is False  # the premise: the submitter traces nothing
    assert answer["record"]["status"] == "succeeded", answer["record"]
    return answer["record"]


def start_fleet(worker_procs: WorkerProcs, receiver: Receiver, tools: Path, modules: Path) -> None:  # noqa: F811
    """A traced worker serving procEcho (publishing the tools of `tools`) and a traced dispatcher (its modules in
    `modules`)."""
    worker = worker_procs.start(["procEcho"], args=["--tools", str(tools)], **otel_env(receiver, "agentq-worker"),
                                AGENTQ_MODULE_DIRS=str(modules))
    dispatcher = worker_procs.dispatcher(AGENTQ_LLM="anthropic", **otel_env(receiver, "agentq-dispatcher"),
                                         AGENTQ_MODULE_DIRS=str(modules))
    worker_procs.wait_live(worker, ["procEcho"])
    worker_procs.wait_dispatcher(dispatcher)


def echo_twice() -> list[Answer]:
    """Two ticks: one procEcho call, then the output."""
    return [Answer.solution({"calls": [{"_tool": "procEcho", "text": "hi", "_outputPath": "†state.echo"}],
                             "output": None}),
            Answer.solution({"calls": [], "output": "done"})]


def test_a_submitters_traceparent_is_continued_when_the_submitter_does_not_trace(
        receiver: Receiver, worker_procs: WorkerProcs, anthropic_env: FakeAnthropic, redis_url: str,  # noqa: F811
        tmp_path: Path):
    answers = iter(echo_twice())
    anthropic_env.responder = lambda request: next(answers)
    start_fleet(worker_procs, receiver, TOOLS_DIR, tmp_path)
    record = submit_untraced(redis_url, {"context": [{"type": "text", "text": "Echo hi"}], "tools": ["procEcho"]},
                             f"00-{TRACE_ID}-{CLIENT_SPAN}-01")

    spans = receiver.wait({"invoke_agent": 2, "chat claude-sonnet-4-6": 2, "execute_tool procEcho": 1,
                           "activity procEcho": 1})
    assert {s.trace_id for s in spans} == {TRACE_ID}  # ticks, requests, the call and its run: the given trace
    ticks = [s for s in spans if s.name == "invoke_agent"]
    assert {t.attributes["agentq.tick"] for t in ticks} == {0, 1}
    assert all(t.parent_id == CLIENT_SPAN and t.attributes["agentq.job.id"] == record["id"] for t in ticks)
    assert not [s for s in spans if s.name in ("submit job", "job")]  # the submitter's span is the parent
    (call,) = [s for s in spans if s.name == "execute_tool procEcho"]
    assert call.service == "agentq-worker" and call.parent_id in {t.span_id for t in ticks}


def test_a_job_submitted_without_any_trace_is_one_trace_with_its_module_child_job(
        receiver: Receiver, worker_procs: WorkerProcs, anthropic_env: FakeAnthropic, redis_url: str,  # noqa: F811
        tmp_path: Path):
    tools, modules = tmp_path / "tools", tmp_path / "modules"
    tools.mkdir()
    (tools / "procEcho.json").write_text((TOOLS_DIR / "procEcho.json").read_text())
    (tools / "research.json").write_text(json.dumps(RESEARCH))
    write_module(modules, "researcher", RESEARCHER)
    anthropic_env.responder = by_role(
        parent=[Answer.solution({"calls": [{"_tool": "research", "question": "the lighthouse",
                                            "_outputPath": "†state.research"}], "output": None}),
                Answer.solution({"calls": [], "output": "done"})],
        child=[Answer.solution({"calls": [{"_tool": "procEcho", "text": "lighthouse", "_outputPath": "†state.e"}],
                                "output": None}),
               Answer.solution({"calls": [], "output": {"facts": ["lighthouse is old"]}})])
    start_fleet(worker_procs, receiver, tools, modules)
    record = submit_untraced(redis_url, {"context": [{"type": "text", "text": "Research the lighthouse."}],
                                         "tools": ["research"]}, "", AGENTQ_MODULE_DIRS=str(modules))

    spans = receiver.wait({"job": 1, "invoke_agent": 4, "chat claude-sonnet-4-6": 4, "submit job": 1,
                           "execute_tool research": 1, "execute_tool procEcho": 1, "activity procEcho": 1})
    assert len({s.trace_id for s in spans}) == 1  # the job, its ticks, calls and child job: one trace
    by_id = {s.span_id: s for s in spans}

    def parent(span: Span) -> Span:
        return by_id[span.parent_id]

    (root,) = [s for s in spans if s.name == "job"]  # created once, by the first process that traced the job
    assert root.parent_id == "" and root.attributes["agentq.job.id"] == record["id"]
    ticks = [s for s in spans if s.name == "invoke_agent"]
    parent_ticks = [t for t in ticks if t.attributes["agentq.job.id"] == record["id"]]
    assert len(parent_ticks) == 2 and all(parent(t) is root for t in parent_ticks)
    (module_call,) = [s for s in spans if s.name == "execute_tool research"]
    assert parent(module_call) in parent_ticks
    (child_submit,) = [s for s in spans if s.name == "submit job"]
    assert parent(child_submit) is module_call and child_submit.attributes["agentq.job.id"] != record["id"]
    child_ticks = [t for t in ticks if t not in parent_ticks]
    assert len(child_ticks) == 2 and all(parent(t) is child_submit for t in child_ticks)
    (echo,) = [s for s in spans if s.name == "execute_tool procEcho"]
    assert parent(echo) in child_ticks


def test_the_parallel_calls_of_a_plan_job_nobody_traced_agree_on_one_root(
        receiver: Receiver, worker_procs: WorkerProcs, anthropic_env: FakeAnthropic, redis_url: str,  # noqa: F811
        tmp_path: Path):
    start_fleet(worker_procs, receiver, TOOLS_DIR, tmp_path)  # the worker runs two calls at once: they race
    calls = [{"_tool": "procEcho", "text": str(n), "_outputPath": f"†state.e{n}"} for n in range(6)]
    record = submit_untraced(redis_url, {"calls": calls}, "")

    spans = receiver.wait({"job": 1, "execute_tool procEcho": 6, "activity procEcho": 6})
    assert len({s.trace_id for s in spans}) == 1
    (root,) = [s for s in spans if s.name == "job"]  # stored once: a process that came second exported none
    assert root.attributes["agentq.job.id"] == record["id"] and root.attributes["agentq.job.kind"] == "plan"
    assert all(s.parent_id == root.span_id for s in spans if s.name == "execute_tool procEcho")

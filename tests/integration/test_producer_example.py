"""The seed 003 module example end to end: the Producer agent job (`workers/jobs/producer.json`) delegates a song
to the Composer module (which has its sounds designed by a nested Sound-Designer module) and an opening
ambience to the Sound-Designer module, in parallel, then masters the record. The model's answers come from the
hand-written replay file `workers/jobs/producer.replay.jsonl`: through the replay provider, and through the real
`anthropic` SDK against the fake Messages API; real Redis and a real in-process worker serving
`workers.music`'s activities."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from agentq.llm.base import LLMRequest
from agentq.llm.replay import ReplayAnswer, ReplayLLM, last_user_text, load_answers
from agentq.protocol.records import JobRecord
from agentq.runtime.tool_files import load_tool_dir
from agentq.store.state import StateStore
from tests.fake_anthropic import Answer, FakeAnthropic, RecordedRequest
from tests.integration.conftest import Harness, store_of
from workers.music import TOOLS_DIR, register_activities

ROOT = Path(__file__).resolve().parents[2]
JOB_FILE = ROOT / "workers" / "jobs" / "producer.json"
REPLAY_FILE = ROOT / "workers" / "jobs" / "producer.replay.jsonl"
MODULES_DIR = ROOT / "workers" / "modules"

JOB: dict = json.loads(JOB_FILE.read_text(encoding="utf-8"))
PRODUCER_SYSTEM = JOB["context"][0]["text"]
MODULE_SYSTEMS = {name: json.loads((MODULES_DIR / f"{name}.json").read_text(encoding="utf-8"))["context"][0]["text"]
                  for name in ("composer", "sound_designer")}
MODULE_TOOLS = {name: json.loads((MODULES_DIR / f"{name}.json").read_text(encoding="utf-8"))["tools"]
                for name in ("composer", "sound_designer")}
ANSWERS = load_answers(REPLAY_FILE)
REQUESTS = len(ANSWERS)  # every answer of the file is asked once: 3 Producer ticks, 3 Composer, 2 + 2 Sound-Designer


@pytest.fixture
def music(harness: Harness) -> Harness:
    """The harness with workers.music's activities and tool schemas (the module folders are the default ones:
    `config/modules`, then the packaged `workers/modules`)."""
    register_activities(harness.activities)
    load_tool_dir(harness.tools, TOOLS_DIR)
    return harness


def candidates(answers: list[ReplayAnswer], purpose: str, text: str) -> list[int]:
    """The answers a replay provider may give a request (its purpose; every `match` text in its last turn)."""
    return [i for i, a in enumerate(answers) if a.purpose == purpose and all(m in text for m in a.match)]


def parent_link(store: StateStore, job_id: str) -> dict:
    """A module job's link to the call that started it, in its stored form."""
    link = store.job_info(job_id).parent
    assert link is not None, job_id
    return link.to_dict()


def check_producer_record(store: StateStore, record: dict) -> None:
    """What both runs must show: a valid result consistent with the state, the module jobs and their events."""
    assert record["status"] == "succeeded", record
    errors = sorted(Draft202012Validator(JOB["output"]).iter_errors(record["result"]), key=str)
    assert not errors, [e.message for e in errors]
    state = record["state"]
    assert set(state) == {"song", "effects", "record"}
    assert record["result"]["record"] == state["record"]  # the output is what masterRecord wrote
    song, effects = state["song"], state["effects"]
    tracks = state["record"]["tracks"]
    assert [(t["title"], t["kind"]) for t in tracks] == [("Rain on the Lamp-Room Windows", "ambience"),
                                                        (song["title"], "song")]
    assert tracks[1]["duration_s"] == song["duration_s"] == song["arrangement"]["duration_s"]  # via †state.song
    assert tracks[0]["duration_s"] == JOB["context"][1]["data"]["intro_length_s"]  # via †brief.intro_length_s
    assert state["record"]["title"] == "Fog Signals" and state["record"]["artist"] == "The Lighthouse Keepers"

    # the Producer's stream: the events of its module jobs, relayed with the module's name as their source
    events = [e for _, e in store.read_events(record["id"])]
    relayed = [e for e in events if e.get("relayed_from")]
    sources: dict[str, set[str]] = {}
    for event in relayed:
        if isinstance(event.get("part"), dict):
            sources.setdefault(event["relayed_from"], set()).add(event["part"]["source"])
    # its two module jobs, and the Composer's own Sound-Designer, whose events keep their origin when the
    # Composer relays them on
    assert sorted(tuple(s) for s in sources.values()) == [("composer",), ("sound_designer",),
                                                          ("sound_designer",)], sources
    direct = {job: s for job, s in sources.items() if parent_link(store, job)["job"] == record["id"]}
    children = {next(iter(s)): job for job, s in direct.items()}
    assert len(children) == 2
    assert all(job.endswith(".module") for job in children.values())
    loaded = [e["part"]["display_info"]["id"] for e in events
              if not e.get("relayed_from") and (e.get("part") or {}).get("activity_type") == "skill_loading"]
    assert sorted(loaded) == ["skill_loading_composer", "skill_loading_sound_designer"]
    composer, designer = (store.record(children[name]) for name in ("composer", "sound_designer"))
    for child in (composer, designer):
        assert isinstance(child, JobRecord) and child.status.value == "succeeded"
    assert parent_link(store, children["composer"])["chain"] == ["composer"]
    assert parent_link(store, children["sound_designer"])["chain"] == ["sound_designer"]
    assert composer.result == song and designer.result == effects  # a module's output is its call's result
    assert composer.state["melody"] == song["melody"] and composer.state["arrangement"] == song["arrangement"]
    assert sorted(p["patch_id"] for p in designer.state["patches"]) == sorted(s["patch_id"] for s in effects["sounds"])
    assert {s["name"] for s in effects["sounds"]} == {"rain on the lamp-room windows", "distant foghorn"}
    assert any(e["event"] == "call.finished" and e.get("tool") == "programSynth" for e in relayed
               if e["relayed_from"] == children["sound_designer"])

    # the Composer's stream: the nested Sound-Designer's events, relayed to it, and relayed on to the Producer
    composer_events = [e for _, e in store.read_events(children["composer"])]
    nested_ids = {e["relayed_from"] for e in composer_events if e.get("relayed_from")}
    assert len(nested_ids) == 1, nested_ids
    (nested_id,) = nested_ids
    assert nested_id.endswith(".module") and nested_id not in children.values()
    assert {e["part"]["source"] for e in composer_events
            if e.get("relayed_from") and isinstance(e.get("part"), dict)} == {"sound_designer"}
    nested_link = parent_link(store, nested_id)
    assert nested_link["job"] == children["composer"] and nested_link["depth"] == 2
    assert nested_link["chain"] == ["composer", "sound_designer"]
    nested = store.record(nested_id)
    assert nested.status.value == "succeeded" and nested.result == composer.state["sounds"]
    assert len(nested.state["patches"]) == 4
    assert sorted(p["patch_id"] for p in nested.state["patches"]) == sorted(s["patch_id"] for s in song["sounds"])
    assert any(e["event"] == "call.finished" and e.get("tool") == "programSynth" for e in relayed
               if e["relayed_from"] == nested_id)  # the nested job's calls reach the Producer, with their origin

    # usage: the children's requests are counted on their parents, up to the Producer
    assert nested.usage["requests"] == 2 and designer.usage["requests"] == 2
    assert composer.usage["requests"] == 5  # its own 3 and the nested Sound-Designer's 2
    assert record["usage"]["requests"] == REQUESTS


def test_the_producer_example_runs_through_the_replay_provider(music: Harness, tmp_path: Path):
    recorded = tmp_path / "requests.jsonl"  # the recorder writes one line per model request
    music.worker(llm=f"replay:{REPLAY_FILE}", llm_record=recorded, concurrency=8)
    record = music.run(JOB, timeout=60)
    check_producer_record(store_of(music.client()), record)
    asked = [json.loads(line) for line in recorded.read_text(encoding="utf-8").splitlines()]
    assert len(asked) == record["usage"]["requests"] == REQUESTS
    # every answer of the file was given exactly once (the recorder keeps each request's purpose and solution)
    given = sorted((a["purpose"], json.dumps(a["solution"], sort_keys=True)) for a in asked)
    assert given == sorted((a.purpose, json.dumps(json.loads(a.raw), sort_keys=True)) for a in ANSWERS)


def replay_responder(answers: list[ReplayAnswer], problems: list[str]):
    """Answer the fake server's requests as the replay provider answers the same requests; a request that more
    than one (or no) answer of the file could match is a problem (the file must not depend on timing)."""
    replay = ReplayLLM(answers, source=str(REPLAY_FILE))
    lock = threading.Lock()

    def answer(recorded: RecordedRequest) -> Answer:
        body = recorded.body
        system = tuple(block["text"] for block in body.get("system") or [])
        purpose = "tick" if PRODUCER_SYSTEM in system else "module"
        request = LLMRequest(model=body["model"], system=system, messages=tuple(body["messages"]),
                             solution_schema=recorded.solution_schema, max_tokens=body["max_tokens"],
                             purpose=purpose)
        text = last_user_text(request)
        found = candidates(answers, purpose, text)
        if len(found) != 1:
            with lock:
                problems.append(f"{len(found)} answers {found} match this {purpose} request: {text[:300]!r}")
            return Answer.http_error(400, message="ambiguous replay answer")
        return Answer.raw(replay.solve(request).raw, chunk_size=64)

    return answer


def test_the_producer_example_runs_through_the_real_sdk_with_the_same_answers(
        music: Harness, anthropic_env: FakeAnthropic):
    problems: list[str] = []
    anthropic_env.responder = replay_responder(ANSWERS, problems)
    music.worker(llm="anthropic", concurrency=8)
    record = music.run(JOB, timeout=60)
    assert problems == []
    check_producer_record(store_of(music.client()), record)
    requests = anthropic_env.requests
    assert len(requests) == REQUESTS
    assert record["usage"]["input_tokens"] == 100 * REQUESTS and record["usage"]["output_tokens"] == 20 * REQUESTS

    def who(request: RecordedRequest) -> str:
        system = " ".join(block["text"] for block in request.body.get("system") or [])
        owners = [name for name, text in {"producer": PRODUCER_SYSTEM, **MODULE_SYSTEMS}.items() if text in system]
        assert len(owners) == 1, system[-300:]
        return owners[0]

    counts: dict[str, int] = {}
    for request in requests:
        counts[who(request)] = counts.get(who(request), 0) + 1
    assert counts == {"producer": 3, "composer": 3, "sound_designer": 4}
    producer_input = JOB["context"][2]["data"]["request"]
    for request in requests:  # clean room: a module never sees the Producer's system text or its input
        if who(request) != "producer":
            text = json.dumps(request.body, ensure_ascii=False)
            assert PRODUCER_SYSTEM not in text and producer_input not in text
            offered = {t["properties"]["_tool"]["const"]
                       for t in request.solution_schema["properties"]["calls"]["items"]["anyOf"]}
            assert offered == set(MODULE_TOOLS[who(request)])  # the module's tools, not the Producer's
    composer_first = next(r for r in requests if who(r) == "composer")
    assert "Fog Signals" in composer_first.last_user_text  # the Composer imports the brief

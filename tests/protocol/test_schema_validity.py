"""Every schema agentq sends the model is one the Messages API accepts: a valid Draft 2020-12 schema
(`Draft202012Validator.check_schema`) that passes the fake Messages API's checks of a tool's `input_schema`
(tests/fake_anthropic.py, the real API's rules), for every shape of job — no tools, only latent tools, live
tools, a module's own tools, an anonymous module (no tools at all), plan jobs, upfront module resolution — and
for the latent-call solution schema of every tool. The whole request (`request_params`) passes too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from agentq.engine.modules import ANONYMOUS, ModuleLibrary, packaged_modules_dir
from agentq.llm.anthropic import request_params
from agentq.llm.base import LLMRequest
from agentq.protocol.compose import compose, composed_tools
from agentq.protocol.conversation import Exchange, tick_messages
from agentq.protocol.instructions import latent_system, system_blocks
from agentq.protocol.latent_prompt import latent_messages, latent_solution_schema
from agentq.protocol.tools import ToolRegistry
from agentq.runtime.tool_files import load_tool_dir
from tests.fake_anthropic import input_schema_refusal, request_refusal
from tests.protocol.test_tools import sentiment_analysis, tool, weather_check

ROOT = Path(__file__).resolve().parents[2]
TOOL_DIRS = [ROOT / "workers" / "tools", ROOT / "workers" / "music_tools", ROOT / "tests" / "integration" / "tools",
             ROOT / "tests" / "integration" / "ops_tools", ROOT / "tests" / "integration" / "metrics_tools"]
EXAMPLE_MODULES = packaged_modules_dir() or ROOT / "workers" / "modules"
OUTPUT = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}


def registry_of(folder: Path) -> ToolRegistry:
    registry = ToolRegistry()
    load_tool_dir(registry, folder)
    return registry


def module_tool(name: str, reference: str) -> dict:
    return tool(name, _module={"const": reference}, question={"type": "string"})


def tool_sets() -> dict[str, list[dict]]:
    """The tool sets of the test suite and the examples, by name."""
    sets: dict[str, list[dict]] = {folder.relative_to(ROOT).as_posix(): list(registry_of(folder).snapshot().values())
                                   for folder in TOOL_DIRS}
    sets["none"] = []
    sets["protocol tests"] = [weather_check(), sentiment_analysis(), tool("bare")]
    sets["an anonymous module tool"] = [module_tool("askAnyone", ANONYMOUS)]
    sets["a named module tool"] = [module_tool("research", "composer")]
    library = ModuleLibrary([EXAMPLE_MODULES])
    music = registry_of(ROOT / "workers" / "music_tools")
    for name in ("composer", "sound_designer"):  # a module's child job composes the module's own tools
        sets[f"module {name}"] = [music.get(t) for t in library.load(name).tools]
    sets["anonymous module"] = [music.get(t) for t in library.load(ANONYMOUS).tools]
    return sets


TOOL_SETS = tool_sets()


def shapes(tools: list[dict]) -> dict[str, dict]:
    """The solution schemas of one tool set: every job shape agentq composes."""
    names = [t["properties"]["_tool"]["const"] for t in tools]
    loader = ModuleLibrary([EXAMPLE_MODULES]).loader
    return {
        "agent, latent tools": compose(tools, ()),
        "agent, live tools": compose(tools, names),
        "agent, output schema": compose(tools, names, OUTPUT),
        "agent, boolean output": compose(tools, (), True),
        "plan": compose(tools, names, plan=True),
        "plan, output schema": compose(tools, (), OUTPUT, plan=True),
        "upfront modules": compose(tools, names, module_loader=loader),
    }


def assert_accepted(schema: Any) -> None:
    Draft202012Validator.check_schema(schema)
    assert input_schema_refusal(schema) is None, input_schema_refusal(schema)


@pytest.mark.parametrize("name", sorted(TOOL_SETS))
def test_every_composed_solution_schema_is_accepted(name: str) -> None:
    for shape, solution in shapes(TOOL_SETS[name]).items():
        try:
            assert_accepted(solution)
        except Exception as error:  # say which shape failed
            raise AssertionError(f"{name} / {shape}: {error}") from error


@pytest.mark.parametrize("name", sorted(TOOL_SETS))
def test_every_latent_solution_schema_is_accepted(name: str) -> None:
    for composed in composed_tools(compose(TOOL_SETS[name], ())):
        for call in ({"_tool": "t", "_outputPath": "†state.x"}, {"_tool": "t"},
                     {"_tool": "t", "_outputPath": "†state.ok || †state.failed"}):
            assert_accepted(latent_solution_schema(composed, call))


@pytest.mark.parametrize("name", ["none", "an anonymous module tool", "workers/tools"])
def test_whole_requests_pass_the_fake_apis_checks(name: str) -> None:
    """A first tick, a later tick (after a valid and an invalid solution) and a latent call, as sent."""
    solution = compose(TOOL_SETS[name], (), None)
    log = [{"type": "text", "role": "user", "text": "Plan my trip."}]
    exchanges = [Exchange(1, "toolu_01", {"calls": [], "output": None}),
                 Exchange(1, "toolu_02", None, ({"pointer": "/output", "message": "must be a string"},))]
    for messages in (tick_messages(log), tick_messages(log, exchanges)):
        request = LLMRequest(model="m", system=system_blocks(()), messages=messages, solution_schema=solution,
                             max_tokens=64)
        assert request_refusal(request_params(request)) is None
    for composed in composed_tools(solution):
        call = {"_tool": composed["properties"]["_tool"]["const"], "_outputPath": "†state.x"}
        latent = LLMRequest(model="m", system=latent_system(()), messages=latent_messages(log, call, composed),
                            solution_schema=latent_solution_schema(composed, call), max_tokens=64)
        assert request_refusal(request_params(latent)) is None


def test_a_job_without_tools_composes_a_calls_array_that_stays_empty() -> None:
    for solution in (compose([], ()), compose([], (), plan=True), compose([], (), OUTPUT)):
        assert solution["properties"]["calls"] == {"type": "array", "maxItems": 0}
        assert composed_tools(solution) == []
        validator = Draft202012Validator(solution)
        assert validator.is_valid({"calls": [], "output": None})
        assert not validator.is_valid({"calls": [{"_tool": "anything"}], "output": None})

"""How the store's Lua steps are written and loaded: one loader for every script (`store/script_runner.py`), each
number a script shares with Python defined once (`store/step_constants.py`) and put in front of every script at
load time, each script's header naming its KEYS and ARGV, and no step taking more than a few positional values
(more go in one named JSON record, `store/step_args.py`)."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import pytest

from agentq.protocol.limits import LimitAsk, ModelLimits
from agentq.store import step_constants
from agentq.store.limits import RedisLimits
from agentq.store.replies import LimitWait
from agentq.store.script_runner import lua_source
from agentq.store.state import StateStore
from agentq.store.step_constants import STEP_CONSTANTS

LUA = Path(str(resources.files("agentq.store").joinpath("lua")))
AGENTQ = Path(str(resources.files("agentq")))
STEPS = sorted(p.stem for p in LUA.glob("*.lua") if not p.stem.startswith("_"))  # `_x.lua`: fragments, included
MOST_POSITIONAL = 4  # fixed positional ARGV values a step takes at most (then one record)


def test_every_script_of_the_package_is_in_the_store_s_lua_folder_and_loaded_by_its_runner():
    """No script elsewhere, none loaded or sent whole (EVAL) but by the runner."""
    assert {p.parent for p in AGENTQ.rglob("*.lua")} == {LUA}
    loading = r"register_script\(|script_load\(|\.lua\b.*read_text|joinpath\(\"lua\"|\.eval\(|[\"']EVAL[\"']"
    loaders = [f"{path.relative_to(AGENTQ)}:{n}" for path in AGENTQ.rglob("*.py")
               for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if re.search(loading, line)]
    assert [loader.split(":")[0] for loader in loaders] == ["store/script_runner.py"] * len(loaders), loaders


@pytest.mark.parametrize("name", STEPS)
def test_each_step_opens_with_its_keys_and_arguments(name: str):
    header = []
    for line in (LUA / f"{name}.lua").read_text(encoding="utf-8").splitlines():
        if not line.startswith("--"):
            break
        header.append(line)
    assert any(re.match(r"-- KEYS\b", line) for line in header), name
    assert any(re.match(r"-- (ARGV\b|.*; ARGV\b)", line) for line in header), name


@pytest.mark.parametrize("name", STEPS)
def test_no_step_takes_more_than_a_few_positional_values(name: str):
    indexes = [int(i) for i in re.findall(r"ARGV\[(\d+)\]", (LUA / f"{name}.lua").read_text(encoding="utf-8"))]
    assert max(indexes, default=0) <= MOST_POSITIONAL, f"{name}.lua reads ARGV[{max(indexes)}]: take a record"


@pytest.mark.parametrize("name", STEPS)
def test_a_step_reads_computed_argv_positions_only_in_its_variable_length_lists(name: str):
    """An ARGV position computed from a variable is an element of a list of variable length (a `for` loop's
    variable, plus a fixed offset, or past a list whose count the step was given): a fixed layout computed by
    offsets (`ARGV[1 + 2 * i]`, `base = 4 * i - 1`, per kind) is positional values in disguise, and takes a
    record."""
    text = (LUA / f"{name}.lua").read_text(encoding="utf-8")
    code = "\n".join(line.split("--", 1)[0] for line in text.splitlines())
    loops = set(re.findall(r"\bfor (\w+)(?: =|, \w+ in )", code))
    counts = set(re.findall(r"\blocal (\w+) = (?:tonumber\(ARGV\[\d+\]\)|#KEYS\b|a\.\w+$)", code, re.M))
    for index in re.findall(r"ARGV\[([^\]]*[A-Za-z_][^\]]*)\]", code):
        names = set(re.findall(r"[A-Za-z_]\w*", index))
        assert names <= loops | counts and "*" not in index, f"{name}.lua reads ARGV[{index}]: take a record"


@pytest.mark.parametrize("name", STEPS)
def test_each_shared_number_is_defined_once_in_front_of_every_script(name: str):
    source = lua_source(name)
    for constant, value in STEP_CONSTANTS.items():
        assert source.count(f"local {constant} =") == 1, (name, constant)
        assert f"local {constant} = {value}\n" in source


def test_no_script_file_copies_a_shared_number():
    for path in LUA.glob("*.lua"):
        text = path.read_text(encoding="utf-8")
        for constant in STEP_CONSTANTS:
            assert not re.search(rf"\b{constant}\s*=", text), f"{path.name} defines {constant}: it comes from Python"


def test_a_shared_number_changed_in_python_is_what_the_script_runs_with(redis_url: str,
                                                                         monkeypatch: pytest.MonkeyPatch):
    """A take from a full bucket starts its refill HEADROOM_MS later: the step reads the Python definition."""
    monkeypatch.setitem(step_constants.STEP_CONSTANTS, "HEADROOM_MS", 7000)
    store = StateStore(redis_url)
    try:
        one_a_minute, ask = ModelLimits(requests_per_minute=1), LimitAsk(1, 0, 0)
        assert not isinstance(RedisLimits(store).take_model_request("m", "a", one_a_minute, ask), LimitWait)
        waits = RedisLimits(store).take_model_request("m", "b", one_a_minute, ask)
        assert isinstance(waits, LimitWait) and 66_900 < waits.wait_ms <= 67_000
    finally:
        store.close()

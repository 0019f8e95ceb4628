"""Saved modules (docs/protocol.md#modules): finding, loading, validating and confining module files and URLs
(`agentq.engine.modules`), and the seed 003 example (Producer / Composer / Sound-Designer) in `workers/`.

Pure file-system tests on `tmp_path`; URL modules are fetched from a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from jsonschema import Draft202012Validator

from agentq.engine.modules import ModuleLibrary, SavedModule, packaged_modules_dir, parse_module
from agentq.errors import (
    AgentQError,
    InvalidInputError,
    ModuleError,
    ModuleInvalid,
    ModuleNotFound,
    ModuleRefused,
    ModuleUnavailable,
)
from agentq.protocol.activities import ActivityRegistry
from agentq.protocol.compose import compose
from agentq.protocol.jobs import plan_job
from agentq.protocol.tools import ToolRegistry
from agentq.runtime.tool_files import load_tool_dir
from agentq.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "workers" / "modules"

MODULE = {
    "context": [
        {"type": "text", "role": "system", "text": "You compose."},
        {"type": "input", "input": {"song": "a ballad"}},
    ],
    "tools": ["writeMelody"],
    "input": {"type": "object", "properties": {"song": {"type": "string"}}, "required": ["song"]},
    "output": {"type": "object", "properties": {"title": {"type": "string"}}},
}


def write(path: Path, content: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return path


def one_line(error: BaseException) -> str:
    text = str(error)
    assert "\n" not in text, text
    return text


# --- by name ------------------------------------------------------------------------------------------------


def test_load_by_name_normalizes_the_context(tmp_path: Path) -> None:
    path = write(tmp_path / "mods" / "composer.json", MODULE)
    module = ModuleLibrary([tmp_path / "mods"]).load("composer")
    assert isinstance(module, SavedModule)
    assert module.name == "composer" and module.source == str(path.resolve())
    assert module.context == [
        {"type": "text", "role": "system", "text": "You compose."},
        {"type": "data", "kind": "input", "data": {"song": "a ballad"}},
    ]
    assert module.tools == ["writeMelody"]
    assert module.input == MODULE["input"] and module.output == MODULE["output"]
    assert not module.is_anonymous


def test_optional_fields_default_to_nothing(tmp_path: Path) -> None:
    write(tmp_path / "bare.json", {"context": []})
    module = ModuleLibrary([tmp_path]).load("bare")
    assert (module.context, module.tools, module.output, module.input) == ([], [], None, None)


def test_subfolder_names_and_a_json_suffix(tmp_path: Path) -> None:
    write(tmp_path / "music" / "composer.json", MODULE)
    library = ModuleLibrary([tmp_path])
    assert library.load("music/composer").source == str((tmp_path / "music" / "composer.json").resolve())
    assert library.load("music/composer.json").tools == ["writeMelody"]
    with pytest.raises(ModuleNotFound):
        library.load("music")  # a folder is not a module


def test_first_folder_that_has_the_name_wins(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    write(first / "shared.json", {"context": [{"type": "text", "text": "first"}]})
    write(second / "shared.json", {"context": [{"type": "text", "text": "second"}]})
    write(second / "only_second.json", {"context": [{"type": "text", "text": "only in second"}]})
    library = ModuleLibrary([first, second])
    assert library.load("shared").context[0]["text"] == "first"
    assert library.load("only_second").context[0]["text"] == "only in second"


def test_relative_folders_are_taken_from_the_current_directory(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "config" / "modules" / "composer.json", {"context": [{"type": "text", "text": "local"}]})
    monkeypatch.chdir(tmp_path)
    library = ModuleLibrary.from_settings(Settings())  # default: config/modules, then the packaged examples
    assert library.dirs[0] == tmp_path / "config" / "modules"
    assert library.load("composer").context[0]["text"] == "local"  # the configured folder comes first
    assert library.load("sound_designer").source == str((EXAMPLES / "sound_designer.json").resolve())


def test_packaged_examples_are_found_after_the_configured_folders(tmp_path: Path) -> None:
    assert packaged_modules_dir() == EXAMPLES
    library = ModuleLibrary.from_settings(Settings(module_dirs=[tmp_path / "missing"]))
    assert library.dirs == (tmp_path / "missing", EXAMPLES)
    module = library.load("composer")
    assert module.source == str((EXAMPLES / "composer.json").resolve())
    assert "designSound" in module.tools


def test_not_found_lists_the_folders_searched(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    library = ModuleLibrary([tmp_path / "a", tmp_path / "b"])
    with pytest.raises(ModuleNotFound) as info:
        library.load("music/nothing")
    message = one_line(info.value)
    assert "'music/nothing'" in message and "music/nothing.json" in message
    assert str(tmp_path / "a") in message and f"{tmp_path / 'b'} (no such folder)" in message
    assert info.value.ref == "music/nothing"


def test_anonymous_is_the_empty_module_without_any_file(tmp_path: Path) -> None:
    write(tmp_path / "anonymous.json", MODULE)  # never read
    module = ModuleLibrary([tmp_path]).load("anonymous")
    assert module == SavedModule(name="anonymous", context=[], tools=[], output=None, input=None,
                                 source="anonymous")
    assert module.is_anonymous
    assert ModuleLibrary([]).loader("anonymous") == {"context": [], "tools": [], "output": None, "input": None}


# --- refused references -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("ref", "why"), [
    ("../x", "'..'"),
    ("a/../../x", "'..'"),
    ("a/./x", "'..'"),
    ("/etc/passwd", "absolute"),
    ("~/x", "absolute"),
    ("a\\b", "backslash"),
    ("..\\..\\windows", "backslash"),
    ("", "empty"),
    ("   ", "empty"),
    ("a//b", "empty path segment"),
    ("a/", "empty path segment"),
    (".hidden", "not starting with '.'"),
    ("a b", "segment"),
    ("x\x00y", "NUL"),
    ("file:///etc/passwd", "scheme 'file:'"),
    ("ftp://example.com/m.json", "scheme 'ftp:'"),
    ("data:application/json,{}", "scheme 'data:'"),
    ("C:\\modules\\x", "scheme"),
])
def test_references_that_could_leave_the_folders_are_refused(tmp_path: Path, ref: str, why: str) -> None:
    write(tmp_path / "mods" / "x.json", MODULE)
    write(tmp_path / "x.json", MODULE)
    with pytest.raises(ModuleRefused) as info:
        ModuleLibrary([tmp_path / "mods"]).load(ref)
    message = one_line(info.value)
    assert message.startswith(f"module {ref!r} refused: ") and why in message
    assert info.value.ref == ref


def test_a_symlink_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    outside = write(tmp_path / "outside" / "secret.json", MODULE)
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "evil.json").symlink_to(outside)
    (mods / "sub").symlink_to(tmp_path / "outside", target_is_directory=True)
    library = ModuleLibrary([mods])
    for ref in ("evil", "sub/secret"):
        with pytest.raises(ModuleRefused) as info:
            library.load(ref)
        message = one_line(info.value)
        assert "outside its folder" in message and f"{ref!r}" in message


def test_symlinks_that_stay_inside_are_followed(tmp_path: Path) -> None:
    mods = tmp_path / "mods"
    write(mods / "real" / "composer.json", MODULE)
    (mods / "alias.json").symlink_to(mods / "real" / "composer.json")
    linked = tmp_path / "linked"
    linked.symlink_to(mods, target_is_directory=True)  # the module folder itself may be a symlink
    assert ModuleLibrary([mods]).load("alias").tools == ["writeMelody"]
    assert ModuleLibrary([linked]).load("real/composer").tools == ["writeMelody"]


def test_a_reference_must_be_a_string(tmp_path: Path) -> None:
    with pytest.raises(ModuleRefused):
        ModuleLibrary([tmp_path]).load(42)  # type: ignore[arg-type]


# --- invalid files ------------------------------------------------------------------------------------------


def pointers(error: InvalidInputError) -> list[str]:
    return [p.pointer for p in error.problems]


def test_an_invalid_module_names_every_problem_with_its_pointer(tmp_path: Path) -> None:
    write(tmp_path / "bad.json", {
        "context": [
            {"type": "text", "text": "fine"},
            {"type": "speech", "text": "no such type"},
            {"type": "data", "kind": "state", "data": {}, "colour": "red"},
        ],
        "tools": ["writeMelody", "not a name", {"type": "object", "properties": {"_tool": {"const": "inline"}}},
                 "writeMelody", 7],
        "output": {"type": "objekt"},
        "input": {"type": "object", "properties": {"a": {"minimum": "zero"}}},
        "schema": {},
    })
    with pytest.raises(ModuleInvalid) as info:
        ModuleLibrary([tmp_path]).load("bad")
    error = info.value
    assert pointers(error) == [
        "/schema", "/context/1/type", "/context/2/colour", "/tools/1", "/tools/2", "/tools/3", "/tools/4",
        "/output/type", "/input/properties/a/minimum",
    ]
    message = str(error)
    assert message.startswith("module 'bad' (") and "is invalid (9 problems)" in message
    assert "unknown field; a module has context, tools, output, input" in message
    assert "has no _output" in message and "listed twice" in message
    assert error.source == str((tmp_path / "bad.json").resolve())
    assert error.to_dict()["problems"][0] == {"pointer": "/schema", "message": error.problems[0].message}


@pytest.mark.parametrize(("content", "pointer", "words"), [
    (b'{"context": [\xff]}', "", "not UTF-8 text (byte 13)"),
    ('{"context": [', "", "not valid JSON"),
    ('{"context": [], "output": NaN}', "", "NaN is not valid JSON"),
    ("[]", "", "got an array"),
    ("{}", "/context", "missing: a module needs a context"),
    ('{"context": {"type": "text"}}', "/context", "context must be an array"),
    ('{"context": [], "input": {"type": "string"}}', "/input/type", "must describe an object"),
    ('{"context": [], "output": []}', "/output", "must be a JSON Schema object"),
    ('{"context": [], "tools": "writeMelody"}', "/tools", "tools must be an array"),
])
def test_unreadable_or_malformed_files(tmp_path: Path, content: Any, pointer: str, words: str) -> None:
    write(tmp_path / "m.json", content)
    with pytest.raises(ModuleInvalid) as info:
        ModuleLibrary([tmp_path]).load("m")
    assert pointers(info.value) == [pointer]
    assert words in str(info.value)


def test_a_file_over_the_size_limit_is_not_read(tmp_path: Path) -> None:
    write(tmp_path / "big.json", {"context": [{"type": "text", "text": "x" * 5000}]})
    with pytest.raises(ModuleInvalid) as info:
        ModuleLibrary([tmp_path], max_bytes=1000).load("big")
    assert "the limit is 1000" in str(info.value)


def test_parse_module_is_pure() -> None:
    module = parse_module(MODULE, name="inline", source="<test>")
    assert module.source == "<test>" and module.context[1]["kind"] == "input"


def test_module_errors_are_input_errors_of_agentq() -> None:
    for cls in (ModuleRefused, ModuleNotFound, ModuleInvalid, ModuleUnavailable):
        assert issubclass(cls, ModuleError)
    assert issubclass(ModuleError, InvalidInputError) and issubclass(ModuleError, AgentQError)


# --- the cache ----------------------------------------------------------------------------------------------


def test_parsed_files_are_cached_until_the_file_changes(tmp_path: Path) -> None:
    path = write(tmp_path / "m.json", {"context": [{"type": "text", "text": "one"}]})
    library = ModuleLibrary([tmp_path])
    first = library.load("m")
    first.context[0]["text"] = "changed by a caller"  # every load is a fresh copy
    assert library.load("m").context[0]["text"] == "one"
    assert len(library._cache) == 1

    write(path, {"context": [{"type": "text", "text": "two, longer"}]})  # another size
    assert library.load("m").context[0]["text"] == "two, longer"

    write(path, {"context": [{"type": "text", "text": "six, longer"}]})  # the same size: the mtime tells
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 2_000_000_000))
    assert library.load("m").context[0]["text"] == "six, longer"

    write(path, "{")
    with pytest.raises(ModuleInvalid):
        library.load("m")


# --- upfront resolution through compose ---------------------------------------------------------------------


def upfront_tool(module: str) -> dict:
    return {"type": "object", "description": "delegated", "x-module-resolution": "upfront",
            "properties": {"_tool": {"type": "string", "const": "delegate"}, "_module": {"const": module},
                           "brief": {"type": "string"}, "_output": {}}}


def test_loader_serves_compose_for_upfront_resolution(tmp_path: Path) -> None:
    write(tmp_path / "composer.json", MODULE)
    library = ModuleLibrary([tmp_path])
    assert library.loader("composer") == {"context": library.load("composer").context, "tools": ["writeMelody"],
                                          "output": MODULE["output"], "input": MODULE["input"]}
    solution = compose([upfront_tool("composer")], module_loader=library.loader)
    tool = solution["properties"]["calls"]["items"]["anyOf"][0]
    assert list(tool["properties"])[-3:] == ["brief", "song", "_output"]
    assert tool["required"] == ["_tool", "song"]
    assert tool["properties"]["_output"] == {"anyOf": [MODULE["output"], {"type": "null"}]}
    assert compose([upfront_tool("composer")], module_loader=library) == solution  # the library is callable


def test_loader_raises_the_same_errors(tmp_path: Path) -> None:
    library = ModuleLibrary([tmp_path])
    with pytest.raises(ModuleNotFound):
        compose([upfront_tool("nowhere")], module_loader=library.loader)
    with pytest.raises(ModuleRefused):
        compose([upfront_tool("../../etc/passwd")], module_loader=library.loader)


# --- URLs ---------------------------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    routes: ClassVar[dict[str, tuple[int, dict[str, str], bytes]]] = {}
    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        type(self).hits.append(self.path)
        status, headers, body = self.routes.get(self.path, (404, {}, b"not found"))
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        if "no-length" not in self.path:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, type[_Handler]]]:
    """A real HTTP server on 127.0.0.1 (a free port); yields its base URL and the handler class (routes, hits)."""

    class Handler(_Handler):  # routes and hits of this server's own
        routes: ClassVar[dict[str, tuple[int, dict[str, str], bytes]]] = {}
        hits: ClassVar[list[str]] = []

    handler = Handler
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    body = json.dumps(MODULE).encode()
    big = json.dumps({"context": [{"type": "text", "text": "x" * 3000}]}).encode()
    handler.routes.update({
        "/m.json": (200, {"Content-Type": "application/json"}, body),
        "/big.json": (200, {}, big),
        "/big-no-length.json": (200, {}, big),
        "/bad.json": (200, {}, b"{not json"),
        "/same-host": (302, {"Location": "/m.json"}, b""),
        "/other-host": (302, {"Location": f"http://localhost:{httpd.server_address[1]}/m.json"}, b""),
        "/loop": (302, {"Location": "/loop"}, b""),
        "/busy": (503, {}, b"busy"),
        "/forbidden": (403, {}, b"no"),
    })
    try:
        yield base, handler
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def test_url_of_an_allowed_host_is_fetched(server: tuple[str, type[_Handler]]) -> None:
    base, _ = server
    library = ModuleLibrary([], url_allowlist=["127.0.0.1"], max_bytes=2000)
    module = library.load(f"{base}/m.json")
    assert module.name == f"{base}/m.json" and module.source == f"{base}/m.json"
    assert module.tools == ["writeMelody"] and module.context[1]["kind"] == "input"
    assert library.load(f"{base}/same-host").source == f"{base}/m.json"  # a redirect on the same host
    port = base.rsplit(":", 1)[1]
    assert ModuleLibrary([], url_allowlist=[f"127.0.0.1:{port}"]).load(f"{base}/m.json").tools == ["writeMelody"]


def test_url_of_a_host_not_allowed_is_refused_without_a_request(server: tuple[str, type[_Handler]]) -> None:
    base, handler = server
    for allowlist in ([], ["example.com"], ["127.0.0.1:1"]):
        with pytest.raises(ModuleRefused) as info:
            ModuleLibrary([], url_allowlist=allowlist).load(f"{base}/m.json")
        assert "is not in AGENTQ_MODULE_URL_ALLOWLIST" in one_line(info.value)
    assert handler.hits == []


def test_redirects_to_another_host_are_refused(server: tuple[str, type[_Handler]]) -> None:
    base, _ = server
    library = ModuleLibrary([], url_allowlist=["127.0.0.1", "localhost"])
    with pytest.raises(ModuleRefused) as info:
        library.load(f"{base}/other-host")
    assert "redirected to another host (localhost)" in one_line(info.value)
    with pytest.raises(ModuleError, match="more than 5 redirects"):
        library.load(f"{base}/loop")


@pytest.mark.parametrize("path", ["/big.json", "/big-no-length.json"])
def test_an_oversized_body_is_refused(server: tuple[str, type[_Handler]], path: str) -> None:
    base, _ = server
    with pytest.raises(ModuleInvalid) as info:
        ModuleLibrary([], url_allowlist=["127.0.0.1"], max_bytes=2000).load(base + path)
    assert "larger than 2000 bytes" in str(info.value)


def test_url_answers_that_are_not_a_module(server: tuple[str, type[_Handler]]) -> None:
    base, _ = server
    library = ModuleLibrary([], url_allowlist=["127.0.0.1"])
    with pytest.raises(ModuleNotFound, match="answered 404"):
        library.load(f"{base}/missing.json")
    with pytest.raises(ModuleUnavailable, match="answered 503"):
        library.load(f"{base}/busy")
    with pytest.raises(ModuleError, match="answered 403"):
        library.load(f"{base}/forbidden")
    with pytest.raises(ModuleInvalid, match="not valid JSON"):
        library.load(f"{base}/bad.json")


def test_an_unreachable_url_is_unavailable() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ModuleUnavailable, match="cannot fetch"):
        ModuleLibrary([], url_allowlist=["127.0.0.1"], timeout_s=2).load(f"http://127.0.0.1:{port}/m.json")


# --- the seed 003 example -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def music() -> Any:
    from workers import music

    return music


@pytest.fixture(scope="module")
def music_tools(music: Any) -> ToolRegistry:
    registry = ToolRegistry()
    load_tool_dir(registry, music.TOOLS_DIR)
    return registry


def test_example_modules_load_and_name_registered_tools(music: Any, music_tools: ToolRegistry) -> None:
    library = ModuleLibrary([EXAMPLES])
    files = sorted(p.stem for p in EXAMPLES.glob("*.json"))
    assert files == ["composer", "sound_designer"]
    assert set(music_tools.names) == set(music.TOOL_NAMES) | set(music.MODULE_TOOL_NAMES)
    for name in files:
        module = library.load(name)
        assert module.context and module.input and module.output
        assert all(tool in music_tools for tool in module.tools), module.tools


def test_example_module_tools_point_at_loadable_modules_without_cycles(music_tools: ToolRegistry) -> None:
    library = ModuleLibrary([EXAMPLES])

    def modules_below(ref: str, path: tuple[str, ...]) -> int:
        assert ref not in path, f"cycle {' -> '.join((*path, ref))}"
        depth = 0
        for tool in library.load(ref).tools:
            target = music_tools.get(tool)["properties"].get("_module", {}).get("const")
            if target:
                depth = max(depth, 1 + modules_below(target, (*path, ref)))
        return depth

    assert music_tools.get("composeSong")["properties"]["_module"] == {"const": "composer"}
    assert music_tools.get("designSound")["properties"]["_module"] == {"const": "sound_designer"}
    assert modules_below("composer", ()) == 1  # composer -> sound_designer, within the default depth of 4
    assert modules_below("sound_designer", ()) == 0


def test_example_activities_register_and_match_their_tools(music: Any, music_tools: ToolRegistry) -> None:
    registry = ActivityRegistry()
    music.register_activities(registry)
    assert registry.names == frozenset(music.TOOL_NAMES)
    for name in music.MODULE_TOOL_NAMES:  # module tools have no activity: they run as child jobs
        assert name not in registry


def test_the_producer_job_plans_with_upfront_module_resolution(music: Any, music_tools: ToolRegistry) -> None:
    job = json.loads((ROOT / "workers" / "jobs" / "producer.json").read_text(encoding="utf-8"))
    assert "calls" not in job
    plan = plan_job(job, tools=music_tools.snapshot(), live_activities={n: {} for n in music.TOOL_NAMES})
    assert set(plan.tools) == {"composeSong", "designSound", "masterRecord"}
    solution = compose({n: music_tools.get(n) for n in plan.tools}, music.TOOL_NAMES, plan.output,
                       module_loader=ModuleLibrary([EXAMPLES]).loader)
    tools = {t["properties"]["_tool"]["const"]: t for t in solution["properties"]["calls"]["items"]["anyOf"]}
    design = tools["designSound"]["properties"]
    assert "sounds" in design and tools["designSound"]["required"] == ["_tool", "request", "sounds"]
    assert design["_output"]["anyOf"][0] == ModuleLibrary([EXAMPLES]).load("sound_designer").output
    assert "song" not in tools["composeSong"]["properties"]  # execution-time resolution: its own parameters


def check(music_tools: ToolRegistry, name: str, result: Any) -> Any:
    Draft202012Validator(music_tools.get(name)["properties"]["_output"]).validate(result)
    return result


def test_write_melody_is_deterministic_and_in_key(music: Any, music_tools: ToolRegistry) -> None:
    call = {"_tool": "writeMelody", "key": "A minor", "mood": "a sad ballad", "bars": 8}
    melody = check(music_tools, "writeMelody", music.write_melody(call))
    assert melody == music.write_melody(dict(call))
    assert melody["key"] == "A minor" and melody["mood"] == "sad" and melody["tempo_bpm"] == 68
    assert melody["scale"] == ["A", "B", "C", "D", "E", "F", "G"]
    assert all(n["pitch"].rstrip("0123456789") in melody["scale"] for n in melody["notes"])
    for bar in range(1, 9):
        assert sum(n["beats"] for n in melody["notes"] if n["bar"] == bar) == 4.0
    assert melody["notes"][-1]["pitch"].startswith("A")  # resolves to the tonic
    assert melody["chords"][:4] == ["Am", "Am", "F", "F"]
    assert music.write_melody({"key": "Eb major", "mood": "happy", "bars": 2})["scale"][:3] == ["Eb", "F", "G"]
    with pytest.raises(Exception, match="unknown mode"):
        music.write_melody({"key": "A sideways", "mood": "sad"})


def test_arrange_song_times_its_sections(music: Any, music_tools: ToolRegistry) -> None:
    song = check(music_tools, "arrangeSong", music.arrange_song({"form": "ballad", "tempo_bpm": 60}))
    assert [s["label"] for s in song["sections"]][:3] == ["intro", "verse 1", "verse 2"]
    assert song["total_bars"] == 60 and song["duration_s"] == 240.0 and song["duration"] == "4:00"
    assert song["sections"][1]["start_s"] == 16.0 and song["sections"][0]["instruments"] == ["piano", "strings"]
    longer = music.arrange_song({"form": "ballad", "tempo_bpm": 60, "target_length_s": 480})
    assert longer["total_bars"] == 120


def test_program_synth_patches_follow_role_and_description(music: Any, music_tools: ToolRegistry) -> None:
    rain = check(music_tools, "programSynth", music.program_synth(
        {"name": "rain on the windows", "role": "ambience", "description": "soft rain, distant"}))
    assert rain["oscillators"][0]["waveform"] == "noise_pink" and rain["fundamental_hz"] is None
    assert "rain" in rain["character"] and "wind" not in rain["character"]  # "windows" is not wind
    horn = music.program_synth({"name": "foghorn", "role": "foley", "description": "a distant foghorn"})
    assert horn["note"] == "E2" and horn["fundamental_hz"] == 82.41
    bass = check(music_tools, "programSynth", music.program_synth(
        {"name": "bass", "role": "bass", "description": "warm", "note": "A1"}))
    assert bass["fundamental_hz"] == 55.0 and bass["frequency_range_hz"][0] == 27.5
    assert bass["filter"]["cutoff_hz"] == 490.0
    assert bass == music.program_synth({"name": "bass", "role": "bass", "description": "warm", "note": "A1"})


def test_master_record_takes_title_and_artist_from_the_brief(music: Any, music_tools: ToolRegistry) -> None:
    tracks = [{"title": "Fog", "duration_s": 40, "kind": "ambience"}, {"title": "Keeper", "duration_s": 240}]
    record = check(music_tools, "masterRecord", music.master_record(
        {"tracks": tracks}, music_tools.get("masterRecord"), {"brief": {"title": "Fog Signals", "artist": "TLK"}}))
    assert (record["title"], record["artist"]) == ("Fog Signals", "TLK")
    assert [t["start_s"] for t in record["tracks"]] == [0.0, 42.0]
    assert record["total_duration_s"] == 282.0 and record["tracks"][1]["fade_out_s"] == 4.0
    assert record["catalog_id"].startswith("REC-")

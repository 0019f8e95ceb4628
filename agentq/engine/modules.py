"""Saved modules (docs/protocol.md#modules): find, load, validate and confine the `{context, tools?, output?, input?}`
files that
`_module` references name.

A reference is one of:

* ``"anonymous"`` — the empty module (no file is read): context ``[]``, no tools, no output or input schema;
* a *name* — ``"composer"`` is ``<folder>/composer.json`` in the first module folder that has it; a name may
  name a subfolder (``"music/composer"``) and may end in ``.json``. Each ``/``-separated segment is letters,
  digits, ``_``, ``.`` and ``-``, not starting with a dot;
* an ``http://`` or ``https://`` URL whose host is in the allow-list (exact, case-insensitive match of the host,
  or of ``host:port`` when the entry has a port). Redirects are followed only to the same host (at most
  :data:`MAX_REDIRECTS`), and the body may not exceed the size limit.

Everything else is refused with :class:`ModuleRefused`, a one-line error that names the reference: absolute
paths, ``..`` segments, backslashes, empty names or segments, other URL schemes (``file:``...), hosts not in the
allow-list, and names whose file (through any symlink) resolves outside its folder. A name found in no folder
raises :class:`ModuleNotFound` listing the folders searched. A file that is not UTF-8, not JSON, not an object,
has unknown fields, invalid messages, invalid tools or invalid ``output``/``input`` JSON Schemas (Draft 2020-12)
raises one :class:`ModuleInvalid` naming every problem with its JSON pointer.

Folders come from :meth:`ModuleLibrary.from_settings`: ``AGENTQ_MODULE_DIRS`` (default ``config/modules``,
relative to the current directory when the library is made), then the packaged examples ``workers/modules/``.

Parsed files are cached (agentq's one LRU policy) by resolved path, modification time and size, so an edited
file is read again; every :meth:`ModuleLibrary.load` returns a fresh copy the caller may change.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jsonschema import Draft202012Validator

from agentq.engine.module_urls import MAX_REDIRECTS, ModuleFetcher, refused
from agentq.errors import (
    ModuleError,
    ModuleInvalid,
    ModuleNotFound,
    ModuleRefused,
    Problem,
    ProtocolError,
)
from agentq.protocol.cache import LRU
from agentq.protocol.messages import message_problems, normalize_message
from agentq.protocol.tools import check_tool_schema, is_valid_name, tool_name_of
from agentq.protocol.values import copy_json

if TYPE_CHECKING:
    from agentq.settings import Settings

__all__ = [
    "ANONYMOUS",
    "MAX_MODULE_BYTES",
    "MAX_REDIRECTS",
    "MODULE_FIELDS",
    "ModuleLibrary",
    "SavedModule",
    "packaged_modules_dir",
    "parse_module",
]

ANONYMOUS = "anonymous"
MODULE_FIELDS = ("context", "tools", "output", "input")
MAX_MODULE_BYTES = 1_000_000  # the default of AGENTQ_MAX_JOB_BYTES: a module is a saved request
MAX_NAME_CHARS = 255

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_SEGMENT = re.compile(r"^\w[\w.-]*$")
# what `Draft202012Validator.check_schema` uses, but collecting every error instead of the first
_META = Draft202012Validator(Draft202012Validator.META_SCHEMA, format_checker=Draft202012Validator.FORMAT_CHECKER)
_CACHE_SIZE = 128


@dataclass(frozen=True)
class SavedModule:
    """A loaded module: `name` is the reference it was loaded by, `source` the file path or URL it came from
    (``"anonymous"`` for the empty module). `context` holds canonical messages; `tools` tool names or inline tool
    schemas (as a job's ``tools``); `output` and `input` are JSON Schemas or None."""

    name: str
    context: list[dict] = field(default_factory=list)
    tools: list = field(default_factory=list)
    output: dict | None = None
    input: dict | None = None
    source: str = ANONYMOUS

    @property
    def is_anonymous(self) -> bool:
        return self.source == ANONYMOUS

    def to_dict(self) -> dict[str, Any]:
        """``{"context", "tools", "output", "input"}`` (a copy): the module as a saved request, and what a
        ``module_loader`` gives :func:`agentq.protocol.compose.compose`."""
        return {"context": copy_json(self.context), "tools": copy_json(self.tools), "output": copy_json(self.output),
                "input": copy_json(self.input)}

    def copy(self, name: str | None = None) -> SavedModule:
        return SavedModule(name=self.name if name is None else name, context=copy_json(self.context),
                           tools=copy_json(self.tools), output=copy_json(self.output), input=copy_json(self.input),
                           source=self.source)


# ------------------------------------------------------------------------------------------- parsing


def _reject_constant(token: str) -> Any:
    raise ValueError(f"{token} is not valid JSON")


def _pointer(parts: Any) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _context_problems(raw: Any, problems: list[Problem]) -> list[dict]:
    if not isinstance(raw, list):
        problems.append(Problem("/context", f"context must be an array of messages, got {type(raw).__name__}"))
        return []
    context = []
    for i, message in enumerate(raw):
        found = message_problems(message, f"/context/{i}")
        if found:
            problems.extend(found)
        else:
            context.append(normalize_message(message, f"/context/{i}"))
    return context


def _tools_problems(raw: Any, problems: list[Problem]) -> list:
    if not isinstance(raw, list):
        problems.append(Problem("/tools", "tools must be an array of tool names or tool schemas"))
        return []
    seen: set[str] = set()
    for i, item in enumerate(raw):
        pointer = f"/tools/{i}"
        if isinstance(item, str):
            name = item
            if not is_valid_name(name):
                problems.append(Problem(pointer, f"{name!r} is not a tool name (a letter, then letters, digits, "
                                                 f"'_' or '-')"))
                continue
        elif isinstance(item, dict):
            found = tool_name_of(item)
            if found is None:
                problems.append(Problem(f"{pointer}/properties/_tool", "an inline tool needs properties._tool.const"))
                continue
            name = found
            try:
                check_tool_schema(name, item)
            except ProtocolError as error:
                problems.append(Problem(pointer, str(error)))
                continue
        else:
            problems.append(Problem(pointer, f"expected a tool name or a tool schema, got {type(item).__name__}"))
            continue
        if name in seen:
            problems.append(Problem(pointer, f"tool {name!r} is listed twice"))
        seen.add(name)
    return copy_json(raw)


def _schema_problems(key: str, raw: Any, problems: list[Problem]) -> dict | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        problems.append(Problem(f"/{key}", f"{key} must be a JSON Schema object, got {type(raw).__name__}"))
        return None
    found = sorted(_META.iter_errors(raw), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    for error in found:
        problems.append(Problem(f"/{key}{_pointer(error.absolute_path)}",
                                f"not a valid Draft 2020-12 JSON Schema: {error.message}"))
    if key == "input" and "type" in raw and raw["type"] != "object":
        problems.append(Problem("/input/type", "the input message holds the Call's parameters: its schema must "
                                               f"describe an object, got type {raw['type']!r}"))
    return None if found else copy_json(raw)


def parse_module(raw: Any, *, name: str, source: str) -> SavedModule:
    """Validate a parsed module document; raise one :class:`ModuleInvalid` listing every problem (pure)."""
    problems: list[Problem] = []
    if not isinstance(raw, dict):
        problems.append(Problem("", "a module must be a JSON object {context, tools?, output?, input?}, got "
                                    f"{'an array' if isinstance(raw, list) else type(raw).__name__}"))
        raise ModuleInvalid(f"module {name!r} ({source}) is invalid", problems, ref=name, source=source)
    for key in raw:
        if key not in MODULE_FIELDS:
            problems.append(Problem(_pointer([key]), f"unknown field; a module has {', '.join(MODULE_FIELDS)}"))
    if "context" not in raw:
        problems.append(Problem("/context", "missing: a module needs a context (an array of messages, may be [])"))
    context = _context_problems(raw.get("context", []), problems)
    tools = _tools_problems(raw.get("tools", []), problems)
    output = _schema_problems("output", raw.get("output"), problems)
    input_schema = _schema_problems("input", raw.get("input"), problems)
    if problems:
        raise ModuleInvalid(f"module {name!r} ({source}) is invalid", problems, ref=name, source=source)
    return SavedModule(name=name, context=context, tools=tools, output=output, input=input_schema, source=source)


def _decode(data: bytes, *, name: str, source: str) -> Any:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ModuleInvalid(f"module {name!r} ({source}) is invalid",
                            [Problem("", f"not UTF-8 text (byte {error.start})")], ref=name, source=source) from None
    try:
        return json.loads(text.removeprefix("\ufeff"), parse_constant=_reject_constant)
    except ValueError as error:
        raise ModuleInvalid(f"module {name!r} ({source}) is invalid", [Problem("", f"not valid JSON: {error}")],
                            ref=name, source=source) from None


# ------------------------------------------------------------------------------------------- library


def packaged_modules_dir() -> Path | None:
    """The example modules shipped in the ``workers`` package (``workers/modules/``), found without importing
    the package (importing it would register its activities); None when there is no such package."""
    try:
        spec = importlib.util.find_spec("workers")
    except (ImportError, ValueError):
        return None
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        folder = Path(location) / "modules"
        if folder.is_dir():
            return folder
    return None


class ModuleLibrary:
    """Loads saved modules from folders (first folder that has a name wins) and from allowed URLs.

    Thread-safe; one library per process is enough (it caches parsed files)."""

    def __init__(self, dirs: Sequence[Path | str], *, url_allowlist: Sequence[str] = (), timeout_s: float = 10.0,
                 max_bytes: int = MAX_MODULE_BYTES) -> None:
        self.dirs: tuple[Path, ...] = tuple(Path(d).absolute() for d in dirs)
        self.url_allowlist: frozenset[str] = frozenset(h.strip().lower() for h in url_allowlist if h.strip())
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self._cache: LRU[tuple, SavedModule] = LRU(_CACHE_SIZE)

    @classmethod
    def from_settings(cls, settings: Settings) -> ModuleLibrary:
        """`settings.module_dirs` then the packaged examples; `settings.module_url_allowlist`; the size limit
        is `settings.max_job_bytes` (AGENTQ_MAX_JOB_BYTES)."""
        dirs: list[Path] = list(settings.module_dirs)
        packaged = packaged_modules_dir()
        if packaged is not None:
            dirs.append(packaged)
        return cls(dirs, url_allowlist=settings.module_url_allowlist,
                   max_bytes=getattr(settings, "max_job_bytes", MAX_MODULE_BYTES))

    def __repr__(self) -> str:
        return f"ModuleLibrary(dirs={[str(d) for d in self.dirs]}, url_allowlist={sorted(self.url_allowlist)})"

    # ------------------------------------------------------------------ loading

    def load(self, ref: str) -> SavedModule:
        """The module `ref` names (a fresh copy); raises a :class:`ModuleError` subclass naming `ref`."""
        if not isinstance(ref, str):
            raise ModuleRefused(f"a module reference must be a string, got {type(ref).__name__}", ref=repr(ref))
        if ref == ANONYMOUS:
            return SavedModule(name=ANONYMOUS)
        if _SCHEME.match(ref):
            return self._load_url(ref)
        return self._load_name(ref)

    def loader(self, ref: str) -> dict[str, Any]:
        """``module_loader`` for :func:`agentq.protocol.compose.compose` (upfront resolution): the module as
        ``{"context", "tools", "output", "input"}``; raises what :meth:`load` raises."""
        return self.load(ref).to_dict()

    __call__ = loader

    # ------------------------------------------------------------------ names

    # one branch per way a module name could leave its folder, each refused with its own reason
    def _relative(self, ref: str) -> Path:
        """The file name a module name stands for, after refusing everything that could leave a folder."""
        if not ref.strip():
            raise refused(ref, "the name is empty")
        if "\\" in ref:
            raise refused(ref, "backslashes are not allowed; separate subfolders with '/'")
        if "\x00" in ref:
            raise refused(ref, "NUL characters are not allowed")
        if ref.startswith(("/", "~")):
            raise refused(ref, "absolute paths are not allowed; give a name relative to the module folders")
        if len(ref) > MAX_NAME_CHARS:
            raise refused(ref[:40] + "...", f"the name is longer than {MAX_NAME_CHARS} characters")
        segments = ref.split("/")
        if any(s in (".", "..") for s in segments):
            raise refused(ref, "'.' and '..' segments are not allowed")
        for segment in segments:
            if not segment:
                raise refused(ref, "empty path segment ('//' or a trailing '/')")
            if not _SEGMENT.match(segment):
                raise refused(ref, f"segment {segment!r}: use letters, digits, '_', '.' and '-', not starting "
                                    f"with '.'")
        if not segments[-1].endswith(".json"):
            segments[-1] += ".json"
        return Path(*segments)

    def _load_name(self, ref: str) -> SavedModule:
        relative = self._relative(ref)
        searched: list[str] = []
        for folder in self.dirs:
            base = folder.resolve()
            if not base.is_dir():
                searched.append(f"{folder} (no such folder)")
                continue
            searched.append(str(folder))
            candidate = base / relative
            resolved = candidate.resolve()
            if not resolved.is_relative_to(base):  # a symlink (of the file or of a subfolder) leads out
                raise refused(ref, f"{candidate} resolves to {resolved}, outside its folder {folder}")
            if resolved.is_file():
                return self._read_file(ref, resolved)
        raise ModuleNotFound(f"module {ref!r} not found: no {relative.as_posix()} in "
                             f"{', '.join(searched) or 'no module folders'} (AGENTQ_MODULE_DIRS)", ref=ref)

    def _read_file(self, ref: str, path: Path) -> SavedModule:
        source = str(path)
        try:
            stat = path.stat()
            if stat.st_size > self.max_bytes:
                raise ModuleInvalid(f"module {ref!r} ({source}) is invalid", [Problem(
                    "", f"{stat.st_size} bytes; the limit is {self.max_bytes} (AGENTQ_MAX_JOB_BYTES)")],
                    ref=ref, source=source)
            key = ("file", source, stat.st_mtime_ns, stat.st_size)
            cached = self._cache.get(key)
            if cached is not None:
                return cached.copy(ref)
            with path.open("rb") as handle:
                data = handle.read(self.max_bytes + 1)
        except OSError as error:
            raise ModuleError(f"module {ref!r}: cannot read {source} ({error.strerror or error})", ref=ref,
                              source=source) from None
        if len(data) > self.max_bytes:  # grew since stat()
            raise ModuleInvalid(f"module {ref!r} ({source}) is invalid", [Problem(
                "", f"more than {self.max_bytes} bytes (AGENTQ_MAX_JOB_BYTES)")], ref=ref, source=source)
        module = parse_module(_decode(data, name=ref, source=source), name=ref, source=source)
        return self._cache.put(key, module).copy(ref)

    # ------------------------------------------------------------------ URLs

    def _load_url(self, ref: str) -> SavedModule:
        data, source = ModuleFetcher(self.url_allowlist, self.timeout_s, self.max_bytes).fetch(ref)
        key = ("url", source, hashlib.sha256(data).hexdigest())
        cached = self._cache.get(key)
        if cached is not None:
            return cached.copy(ref)
        module = parse_module(_decode(data, name=ref, source=source), name=ref, source=source)
        return self._cache.put(key, module).copy(ref)

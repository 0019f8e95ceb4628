"""Context messages (docs/protocol.md#messages): normalization of input into the canonical dicts and their validation.

Canonical forms (plain JSON dicts, what the store keeps)::

    {"type": "text",  "role": "system"|"user"|"assistant", "text": str, ["_call"], ["_date"], ["_afterCancel"]}
    {"type": "data",  "kind": str, "data": any, ["schema"], ["description"], ["_instance"],
                      ["_call"], ["_date"], ["_outputMethod"], ["_path"], ["_afterCancel"]}
    {"type": "error", "data": {"call": {...}, "error": {"type": str, "message": str}}, ["_instance"],
                      ["_call"], ["_date"], ["_afterCancel"]}

`_afterCancel: true` marks what a call wrote after its job was canceled (the store adds it at the commit).

Input may also use the shorthands `{"type": "state", ...}` and `{"type": "input", ...}` (with `input` as an
alias of `data` for the latter). Unknown fields are rejected so that typos surface early.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

from agentq.errors import MessageError, Problem, ReferenceSyntaxError, UnknownMethodError
from agentq.protocol.expressions import parse_ref
from agentq.protocol.values import METHODS, MISSING, get_in

TYPES = ("text", "data", "error")
ROLES = ("system", "user", "assistant")
SHORTHAND_KINDS = ("state", "input")

_FIELDS = {
    "text": ("type", "role", "text", "_call", "_date", "_afterCancel"),
    "data": ("type", "kind", "data", "schema", "description", "_instance", "_call", "_date", "_outputMethod", "_path",
             "_afterCancel"),
    "error": ("type", "data", "_instance", "_call", "_date", "_afterCancel"),
}


def normalize_message(raw: Any, pointer: str = "") -> dict:
    """The canonical form of `raw`; raises `MessageError` (or `UnknownMethodError`) naming each JSON pointer."""
    message, problems, method_problem = _normalize(raw, pointer)
    if problems:
        error = UnknownMethodError if problems == [method_problem] else MessageError
        raise error(_render(problems))
    return message


def normalize_messages(raw: Any, pointer: str = "/context") -> list[dict]:
    """Canonical forms of a list of messages; one `MessageError` lists every problem of every message."""
    if not isinstance(raw, list):
        raise MessageError(_render([Problem(pointer, "the context must be an array of messages")], "context"))
    messages, problems = [], []
    for i, item in enumerate(raw):
        message, found, _ = _normalize(item, f"{pointer}/{i}")
        messages.append(message)
        problems += found
    if problems:
        raise MessageError(_render(problems, "context"))
    return messages


def message_problems(raw: Any, pointer: str = "") -> list[Problem]:
    """Every problem of one message, each with its JSON pointer (empty when the message is valid)."""
    return _normalize(raw, pointer)[1]


def is_engine_written(message: dict) -> bool:
    """True for a data message written by the engine (it carries `_path`)."""
    return "_path" in message


def looks_canonical(message: Any) -> bool:
    """A cheap check that `message` is already canonical (used to skip normalization of stored messages)."""
    if not isinstance(message, dict):
        return False
    kind = message.get("type")
    if kind == "text":
        return message.get("role") in ROLES and isinstance(message.get("text"), str)
    if kind == "data":
        method = message.get("_outputMethod", "set")
        return isinstance(message.get("kind"), str) and "data" in message and method in METHODS
    return kind == "error" and isinstance(message.get("data"), dict)


def _render(problems: list[Problem], what: str = "message") -> str:
    if len(problems) == 1:
        return f"invalid {what}: {problems[0]}"
    return f"invalid {what} ({len(problems)} problems):\n" + "\n".join(f"  {p}" for p in problems)


def _normalize(raw: Any, pointer: str) -> tuple[dict, list[Problem], Problem | None]:
    """(canonical message, problems, the `_outputMethod` problem if any)."""
    if not isinstance(raw, dict):
        return {}, [Problem(pointer, f"a message must be an object, got {type(raw).__name__}")], None
    raw_type = raw.get("type")
    if raw_type not in TYPES + SHORTHAND_KINDS:
        expected = ", ".join(TYPES + SHORTHAND_KINDS)
        return {}, [Problem(f"{pointer}/type", f"type must be one of {expected}, got {raw_type!r}")], None
    problems: list[Problem] = []
    message = _expand(raw, raw_type, pointer, problems)
    allowed = _FIELDS[message["type"]]
    problems += [Problem(f"{pointer}/{key}", f"unknown field in a {message['type']} message")
                 for key in message if key not in allowed]
    if message["type"] == "text":
        _check_text(message, pointer, problems)
    elif message["type"] == "data":
        _check_data(message, pointer, problems)
    else:
        _check_error(message, pointer, problems)
    _check_meta(message, pointer, problems)
    method_problem = None
    if message.get("_outputMethod", "set") not in METHODS:
        method_problem = Problem(f"{pointer}/_outputMethod", f"unknown output method {message['_outputMethod']!r}; "
                                                             f"expected one of {', '.join(METHODS)}")
        problems.append(method_problem)
    return _ordered(message), problems, method_problem


# one branch per message type's shorthand or default (state and input, text, data)
def _expand(raw: dict, raw_type: str, pointer: str, problems: list[Problem]) -> dict:
    """Shorthands and defaults: `state`/`input` become data messages; text role and data kind get defaults."""
    message = {k: v for k, v in raw.items() if not (k == "_instance" and v is None)}
    if raw_type in SHORTHAND_KINDS:
        message["type"] = "data"
        if message.setdefault("kind", raw_type) != raw_type:
            problems.append(Problem(f"{pointer}/kind", f"a {raw_type!r} message cannot have kind {message['kind']!r}"))
        if raw_type == "input" and "input" in message:
            if "data" in message:
                problems.append(Problem(f"{pointer}/input", "give either data or its alias input, not both"))
            message["data"] = message.pop("input")
    elif raw_type == "text":
        message.setdefault("role", "user")
    elif raw_type == "data":
        message.setdefault("kind", "data")
    return message


def _check_text(message: dict, pointer: str, problems: list[Problem]) -> None:
    if message["role"] not in ROLES:
        problems.append(Problem(f"{pointer}/role", f"role must be one of {', '.join(ROLES)}, got {message['role']!r}"))
    if not isinstance(message.get("text"), str):
        problems.append(Problem(f"{pointer}/text", "a text message needs a string text"))


def _check_data(message: dict, pointer: str, problems: list[Problem]) -> None:
    kind = message["kind"]
    if not (isinstance(kind, str) and kind):
        problems.append(Problem(f"{pointer}/kind", f"kind must be a non-empty string, got {kind!r}"))
    if "data" not in message:
        problems.append(Problem(f"{pointer}/data", "a data message needs data"))
    if not isinstance(message.get("schema", {}), (dict, bool)):
        problems.append(Problem(f"{pointer}/schema", "schema must be a JSON Schema (an object or a boolean)"))
    if not isinstance(message.get("description", ""), str):
        problems.append(Problem(f"{pointer}/description", "description must be a string"))
    if "_path" in message:
        problems += _path_problems(message, pointer)


def _path_problems(message: dict, pointer: str) -> list[Problem]:
    where = f"{pointer}/_path"
    try:
        ref = parse_ref(message["_path"])
    except ReferenceSyntaxError as error:
        return [Problem(where, str(error))]
    if ref.kind != message["kind"]:
        return [Problem(where, f"_path {ref} is not of the message's kind {message['kind']!r}")]
    if "data" in message and get_in(message["data"], ref.path) is MISSING:
        return [Problem(f"{pointer}/data", f"data holds nothing at _path {ref}")]
    return []


def _check_error(message: dict, pointer: str, problems: list[Problem]) -> None:
    data = message.get("data")
    if not isinstance(data, dict):
        problems.append(Problem(f"{pointer}/data", "an error message needs data {call, error: {type, message}}"))
        return
    problems += [Problem(f"{pointer}/data/{key}", "unknown field in an error message's data")
                 for key in data if key not in ("call", "error")]
    if not isinstance(data.get("call"), dict):
        problems.append(Problem(f"{pointer}/data/call", "the failed call must be an object"))
    error = data.get("error")
    if not isinstance(error, dict):
        problems.append(Problem(f"{pointer}/data/error", "error must be an object {type, message}"))
        return
    for key in ("type", "message"):
        if not isinstance(error.get(key), str):
            problems.append(Problem(f"{pointer}/data/error/{key}", f"error {key} must be a string"))


def _check_meta(message: dict, pointer: str, problems: list[Problem]) -> None:
    instance = message.get("_instance")
    if "_instance" in message and not (isinstance(instance, str) and instance):
        problems.append(Problem(f"{pointer}/_instance", f"_instance must be a non-empty string, got {instance!r}"))
    if not isinstance(message.get("_call", {}), dict):
        problems.append(Problem(f"{pointer}/_call", "_call must be an object"))
    if not isinstance(message.get("_date", ""), str):
        problems.append(Problem(f"{pointer}/_date", "_date must be an ISO-8601 string"))
    if not isinstance(message.get("_afterCancel", True), bool):
        problems.append(Problem(f"{pointer}/_afterCancel", "_afterCancel must be a boolean"))


def _ordered(message: dict) -> dict:
    """Known fields first, in the canonical order (unknown ones, already reported, last)."""
    order = _FIELDS[message["type"]]
    known = {key: message[key] for key in order if key in message}
    return known | {key: value for key, value in message.items() if key not in known}


# Static types of the canonical forms (the only representation of a message is the canonical dict; these
# describe it for type checkers and cost nothing at run time). Keys starting with `_` are engine metadata.

class TextMessage(TypedDict):
    type: Literal["text"]
    role: str
    text: str
    _call: NotRequired[dict]
    _date: NotRequired[str]
    _afterCancel: NotRequired[bool]
class DataMessage(TypedDict):
    type: Literal["data"]
    kind: str
    data: Any
    schema: NotRequired[dict | bool]
    description: NotRequired[str]
    _instance: NotRequired[str]
    _call: NotRequired[dict]
    _date: NotRequired[str]
    _afterCancel: NotRequired[bool]
    _outputMethod: NotRequired[str]
    _path: NotRequired[str]
class ErrorMessage(TypedDict):
    type: Literal["error"]
    data: dict
    _instance: NotRequired[str]
    _call: NotRequired[dict]
    _date: NotRequired[str]
    _afterCancel: NotRequired[bool]
Message = TextMessage | DataMessage | ErrorMessage

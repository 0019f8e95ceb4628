"""Validating Calls against a composed solution schema (docs/protocol.md#calls).

:func:`validate_call` finds the composed tool of a Call by its ``_tool`` among the solution schema's
``properties.calls.items.anyOf`` and validates the Call against it, reporting **every** problem with the JSON
pointer of the failing value (``/location``, ``/items/2/qty``; a missing required property points at the
object that lacks it and names the property). :func:`call_errors` is the non-raising form used at
submission, where values that are still unresolved references (their pointers given in ``skip_pointers``)
are not judged. ``pointer_prefix`` lets job validation report ``/calls/3/location``.

A validator is built per validation: building one costs about 5 µs (jsonschema compiles lazily), less than
any cache lookup keyed by a schema's content would. Job planning validates many calls of the same tool:
:func:`tool_call_errors` takes the tool and a validator the caller built once for it (`validator_for`), which
holds the schema's compiled check (`schema_fit.py`) besides jsonschema's: a call that fits it is valid in one pass
(about 2 µs for a small tool, against 15 for jsonschema), any other is validated by jsonschema, which words its
problems.

Format assertions are off (``format`` is an annotation, as by default in Draft 2020-12).

Messages never quote a sensitive parameter (``x-sensitive``, see ``sensitive.py``): jsonschema quotes the
offending value, so an error at or under a sensitive path names it ``[redacted]``, and every message is passed
through the call's :class:`~agentq.protocol.sensitive.Redactor` before it is shortened.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from agentq.errors import CallValidationError, Problem, UnknownToolError
from agentq.protocol.compose import composed_tools
from agentq.protocol.schema_fit import Fit, fit_for
from agentq.protocol.sensitive import REDACTED, Redactor, redactor_for, sensitive_paths

__all__ = ["ToolValidator", "call_errors", "tool_call_errors", "tool_schema_for", "validate_call", "validator_for"]

_MAX_MESSAGE = 400


@dataclass(frozen=True)
class ToolValidator:
    """A composed tool's validator: jsonschema's (`schema`), and the schema's compiled check where it has one (`fit`:
    True for a call known to conform; see `schema_fit.py`)."""

    schema: Draft202012Validator
    fit: Fit | None


def validator_for(tool_schema: Mapping[str, Any]) -> ToolValidator:
    """The validator of a composed tool schema, built once for the calls of that tool a caller validates."""
    return ToolValidator(Draft202012Validator(tool_schema), fit_for(tool_schema))


def _index(solution_schema: Mapping[str, Any]) -> dict[Any, dict]:
    """Composed tools by their `_tool` const (a JSON value, as a call's `_tool` is)."""
    index: dict[Any, dict] = {}
    for tool in composed_tools(solution_schema):
        try:
            index[tool["properties"]["_tool"]["const"]] = tool
        except (KeyError, TypeError):
            continue
    return index


def _pointer(parts: Iterable[Any]) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _find(call: Any, solution_schema: Mapping[str, Any], prefix: str) -> tuple[dict | None, Problem | None, bool]:
    """(composed tool, problem, whether the problem is an unknown tool)."""
    index = _index(solution_schema)
    if isinstance(call, Mapping):
        tool = index.get(call.get("_tool"))
        if tool is not None:
            return tool, None, False
    known = ", ".join(sorted(index)) or "none"
    where = prefix + "/_tool"
    if not isinstance(call, Mapping):
        kind = "null" if call is None else type(call).__name__
        problem = Problem(where, f"a Call must be a JSON object with _tool naming a tool ({known}), got {kind}")
        return None, problem, False
    name = call.get("_tool")
    if "_tool" not in call:
        return None, Problem(where, f"missing required property '_tool' (the tool to call: {known})"), False
    if not isinstance(name, str):
        return None, Problem(where, f"_tool must be a string naming a tool ({known}), got {name!r}"), False
    close = difflib.get_close_matches(name, list(index), n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return None, Problem(where, f"unknown tool {name!r}{hint} (known tools: {known})"), True


def tool_schema_for(call: Any, solution_schema: Mapping[str, Any], *, pointer_prefix: str = "") -> dict:
    """The composed tool schema the Call names; :class:`CallValidationError` or :class:`UnknownToolError`."""
    tool, problem, unknown = _find(call, solution_schema, pointer_prefix)
    if problem is not None:
        if unknown:
            raise UnknownToolError(f"{problem.pointer}: {problem.message}")
        raise CallValidationError("invalid Call", [problem])
    assert tool is not None
    return tool


# -------------------------------------------------------------------------------------- error mapping


def _skipped(pointer: str, skip: tuple[str, ...]) -> bool:
    return any(pointer == s or pointer.startswith(s + "/") or s == "" for s in skip)


def _only_type_mismatch(errors: list[ValidationError], at: list[Any]) -> bool:
    """True when a branch failed only because the value is not of its type (so it was not the intent)."""
    return all(e.validator in ("type", "const", "enum") and list(e.absolute_path) == at for e in errors)


def _shorten(message: str) -> str:
    return message if len(message) <= _MAX_MESSAGE else message[: _MAX_MESSAGE - 1] + "…"


def _message(error: ValidationError, hidden: _Hidden | None = None) -> str:
    path = list(error.absolute_path)
    if hidden is not None:
        return _shorten(hidden.redact(error, _raw_message(error, path)))
    return _shorten(_raw_message(error, path))


# one branch per JSON-Schema keyword whose message agentq words its own way
def _raw_message(error: ValidationError, path: list[Any]) -> str:
    if error.validator == "required":
        required: Any = error.validator_value
        names = [n for n in required if isinstance(error.instance, dict) and n not in error.instance]
        missing = next((n for n in names if error.message.startswith(repr(n))), names[0] if names else "?")
        return f"missing required property {missing!r}"
    if path == ["_activity"] and error.validator == "const":
        return (
            f"_activity must be {error.validator_value!r} (resolved at composition), got {error.instance!r}"
        )
    if error.validator == "additionalProperties" and error.validator_value is False:
        return error.message.replace("Additional properties are not allowed", "unexpected property")
    return error.message


class _Hidden:
    """The sensitive paths of a call's tool and the call's sensitive values: what messages must not quote."""

    def __init__(self, paths: tuple[tuple[str, ...], ...], redactor: Redactor):
        self.paths = paths
        self.redactor = redactor

    @classmethod
    def of(cls, call: Mapping[str, Any], tool: Mapping[str, Any]) -> _Hidden | None:
        paths = sensitive_paths(tool)
        return cls(paths, redactor_for(call, tool)) if paths else None

    def redact(self, error: ValidationError, message: str) -> str:
        at = tuple(str(p) for p in error.absolute_path)
        if any(at[:len(path)] == path for path in self.paths):  # the offending value is (inside) a secret
            for form in {repr(error.instance), _json(error.instance)}:
                if form:
                    message = message.replace(form, REDACTED)
        return self.redactor.redact(message)


def _json(value: Any) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return ""


def _collect(error: ValidationError, skip: tuple[str, ...], hidden: _Hidden | None = None) -> list[tuple[str, str]]:
    at = list(error.absolute_path)
    pointer = _pointer(at)
    if skip and _skipped(pointer, skip):
        return []
    if error.validator in ("anyOf", "oneOf") and error.context:
        inside = _collect_branch(error, at, skip, hidden)
        if inside is not None:
            return inside
    return [(pointer, _message(error, hidden))]


def _by_branch(errors: Iterable[ValidationError]) -> dict[Any, list[ValidationError]]:
    """The errors of an `anyOf`/`oneOf`'s branches, by branch."""
    branches: dict[Any, list[ValidationError]] = {}
    for sub in errors:
        branches.setdefault(sub.relative_schema_path[0], []).append(sub)
    return branches


def _unresolved_only(branches: dict[Any, list[ValidationError]], skip: tuple[str, ...]) -> bool:
    """Whether a branch fails only where references are still unresolved (the `skip` pointers)."""
    return any(all(_skipped(_pointer(s.absolute_path), skip) for s in errs) for errs in branches.values())


def _collect_branch(error: ValidationError, at: list[Any], skip: tuple[str, ...],
                    hidden: _Hidden | None) -> list[tuple[str, str]] | None:
    """The problems of an `anyOf`/`oneOf` inside the one branch the value plausibly meant (not a mere type
    mismatch); none while a branch fails only on unresolved references; None to report the error itself."""
    branches = _by_branch(error.context or ())
    if skip and _unresolved_only(branches, skip):
        return []  # that branch is not judged yet
    plausible = [errs for errs in branches.values() if not _only_type_mismatch(errs, at)]
    if len(plausible) != 1:
        return None
    return [found for sub in plausible[0] for found in _collect(sub, skip, hidden)]


def _tool_problems(call: Mapping[str, Any], tool: Mapping[str, Any], skip: tuple[str, ...],
                   prefix: str, validator: ToolValidator | None = None) -> list[Problem]:
    if validator is not None and validator.fit is not None and validator.fit(call):
        return []
    seen: set[tuple[str, str]] = set()
    problems: list[Problem] = []
    hidden = _Hidden.of(call, tool)
    for error in (validator.schema if validator is not None else Draft202012Validator(tool)).iter_errors(call):
        for pointer, message in _collect(error, skip, hidden):
            if (pointer, message) not in seen:
                seen.add((pointer, message))
                problems.append(Problem(prefix + pointer, message))
    return problems


# ---------------------------------------------------------------------------------------------- public


def call_errors(
    call: Any,
    solution_schema: Mapping[str, Any],
    *,
    skip_pointers: Iterable[str] = (),
    pointer_prefix: str = "",
) -> list[Problem]:
    """Every problem of ``call`` (empty list when valid); never raises for a bad Call.

    ``skip_pointers`` are pointers *relative to the call* (e.g. ``/location`` from ``resolve_params``) whose
    values are unresolved references: problems at or under them are dropped, and so is an ``anyOf`` /
    ``oneOf`` failure one of whose branches fails only there. ``pointer_prefix`` is prepended to every
    reported pointer.
    """
    tool, problem, _ = _find(call, solution_schema, pointer_prefix)
    if problem is not None:
        return [problem]
    assert tool is not None
    return _tool_problems(call, tool, tuple(skip_pointers), pointer_prefix)


def tool_call_errors(
    call: Mapping[str, Any],
    tool: Mapping[str, Any],
    validator: ToolValidator,
    *,
    skip_pointers: Iterable[str] = (),
    pointer_prefix: str = "",
) -> list[Problem]:
    """:func:`call_errors` for a call already known to name ``tool`` (its composed schema), validated by
    ``validator`` (``validator_for(tool)``, built once for every call of that tool)."""
    return _tool_problems(call, tool, tuple(skip_pointers), pointer_prefix, validator)


def validate_call(call: Any, solution_schema: Mapping[str, Any], *, pointer_prefix: str = "",
                  validator: ToolValidator | None = None) -> dict:
    """Validate ``call``; return the composed tool schema it matched. ``validator``: the validator of that tool,
    when the caller keeps one (`validator_for`; built here otherwise).

    Raises :class:`UnknownToolError` for a tool that is not in the solution schema (the message lists the
    known tools) and :class:`CallValidationError` with *all* problems, each with a JSON pointer.
    """
    tool = tool_schema_for(call, solution_schema, pointer_prefix=pointer_prefix)
    problems = _tool_problems(call, tool, (), pointer_prefix, validator)
    if problems:
        raise CallValidationError(f"Call to tool {call['_tool']!r} does not match its schema", problems)
    return tool

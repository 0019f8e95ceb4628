"""Output paths: turning a Call's result or failure into the messages appended to the log
(docs/protocol.md#output-paths).

An output path uses the reference grammar: its `||` alternatives are the possible outcomes (a plain result
goes to the first, a failure to the last) and each alternative's `&&` group is a fan-out (the same value is
written to every path of the group). Every engine-written data message carries `_path`, `_outputMethod`,
`_call` (the call plus its `id`), `_date` and, for an instanced call, `_instance`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentq.errors import ReferenceSyntaxError, WriteError
from agentq.protocol.expressions import DAGGER, Ref, parse_expression, parse_ref
from agentq.protocol.messages import TYPES, normalize_message
from agentq.protocol.values import MISSING, check_method, get_in, set_in
from agentq.protocol.views import LogIndex, as_index


def output_alternatives(call: dict) -> tuple[tuple[Ref, ...], ...]:
    """The parsed `_outputPath` of `call`: alternatives of fan-out groups; `()` when it has none."""
    path = call.get("_outputPath")
    if path is None or (isinstance(path, str) and not path.strip()):
        return ()
    return parse_expression(path).alternatives


def written_paths(call: dict) -> list[Ref]:
    """Every path the call may write (every path of every alternative), without duplicates."""
    return list(dict.fromkeys(ref for group in output_alternatives(call) for ref in group))


def output_messages(call: dict, result: Any, *, call_id: str, date: str) -> list[dict]:
    """The messages a call's `result` appends to the log; `[]` when the call has no output path.

    A returned message (`type` text/data/error) is written as is; a data message without `_path` is routed to
    the alternative whose kind matches and whose path exists inside its data (or, if none does, written at the
    root of its kind). Any other value is written to every path of the first alternative.
    """
    alternatives = output_alternatives(call)
    if not alternatives:
        return []
    method = check_method(call.get("_outputMethod") or "set")
    if not (isinstance(result, dict) and result.get("type") in TYPES):
        return [_engine_message(call, call_id, date, ref, method, result) for ref in alternatives[0]]
    message = normalize_message(result)
    if message["type"] == "text":
        return [{**message, "_call": _call_record(call, call_id), "_date": date}]
    if message.get("_instance", call.get("_instance")) != call.get("_instance"):
        raise WriteError(f"call {call_id} cannot write for instance {message['_instance']!r}")
    if message["type"] == "error":
        return [_stamp(message, call, call_id, date)]
    return _data_writes(call, message, alternatives, method, call_id, date)


def branch_messages(call: dict, branch: str, value: Any, *, call_id: str, date: str) -> list[dict]:
    """The messages of a latent call whose model chose the `||` alternative `branch` (written as in
    `latent_solution_schema`: the alternative's paths joined by ` && `)."""
    method = check_method(call.get("_outputMethod") or "set")
    for group in output_alternatives(call):
        if " && ".join(str(ref) for ref in group) == branch:
            return [_engine_message(call, call_id, date, ref, method, value) for ref in group]
    raise WriteError(f"{branch!r} is not an alternative of the call's output path ({call.get('_outputPath')})")


def absorbs_failure(call: dict) -> bool:
    """Whether a failure of `call` is taken by its own `||` output path (so it does not fail the job)."""
    try:
        return len(output_alternatives(call)) > 1
    except ReferenceSyntaxError:  # the failure may be this very path
        return False


def failure_messages(call: dict, *, call_id: str, error_type: str, message: str, date: str) -> list[dict]:
    """The messages a failed call appends: with a `||` output path, `{"error": {type, message}}` set at every
    path of the last alternative; otherwise one error message."""
    error = {"type": error_type, "message": message}
    if absorbs_failure(call):
        last = output_alternatives(call)[-1]
        return [_engine_message(call, call_id, date, ref, "set", {"error": error}) for ref in last]
    failure = {"type": "error", "data": {"call": _call_record(call, call_id), "error": error}, "_date": date}
    if call.get("_instance") is not None:
        failure["_instance"] = call["_instance"]
    return [failure]


def check_write(index: LogIndex | Sequence[Any], message: dict) -> None:
    """Raise `WriteError` if appending `message` would push/concat onto a non-array (or concat a non-array).

    Over an index this is `LogIndex.check`: it costs the length of the message's path and hands nothing out
    of the index's folds, so checking every write of a job as it grows stays linear in the job's size
    (checking against a shared copy of the fold would make the next write copy the whole value)."""
    if message.get("type") != "data":
        return
    as_index(index).check(message)


def _data_writes(call: dict, message: dict, alternatives: tuple, method: str, call_id: str, date: str) -> list[dict]:
    """Route a returned data message: its own `_path`, a matching alternative, or the root of its kind."""
    method = message.get("_outputMethod", method)
    if "_path" in message:
        ref = parse_ref(message["_path"])
        if ref not in written_paths(call):
            raise WriteError(f"_path {ref} of the returned message is not an output path of the call "
                             f"({call['_outputPath']})")
        return [_stamp({**message, "_outputMethod": method}, call, call_id, date)]
    for group in alternatives:
        for ref in group:
            value = get_in(message["data"], ref.path) if ref.kind == message["kind"] else MISSING
            if value is not MISSING:
                return [_engine_message(call, call_id, date, target, method, value) for target in group]
    try:
        root = parse_ref(DAGGER + message["kind"])
    except ReferenceSyntaxError:
        raise WriteError(f"a data message of kind {message['kind']!r} matches no output path of the call "
                         f"({call['_outputPath']})") from None
    root_write = {**message, "_path": str(root), "_outputMethod": message.get("_outputMethod", "merge")}
    return [_stamp(root_write, call, call_id, date)]


def _engine_message(call: dict, call_id: str, date: str, ref: Ref, method: str, value: Any) -> dict:
    message = {"type": "data", "kind": ref.kind, "data": set_in(MISSING, ref.path, value),
               "_path": str(ref), "_outputMethod": method}
    return _stamp(message, call, call_id, date)


def _stamp(message: dict, call: dict, call_id: str, date: str) -> dict:
    """`message` with the call's hidden metadata: `_instance` (instanced calls), `_call`, `_date`."""
    stamped = {**message, "_call": _call_record(call, call_id), "_date": date}
    if call.get("_instance") is not None:
        stamped["_instance"] = call["_instance"]
    return normalize_message(stamped)  # canonical field order, and a last check


def _call_record(call: dict, call_id: str) -> dict:
    return {**call, "id": call_id}

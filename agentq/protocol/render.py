"""Rendering a job's context for the LLM (docs/protocol.md#messages): text, one block per data identity, errors.

Block order: text messages (log order), data identities (first-appearance order), errors (log order).
A data block::

    ## Data: ¶state [①]
    ```json
    {"view": "pretty JSON of the (instance-merged) view"}
    ```
    the description, if any
    Schema:
    ```json
    {"the": "schema, if any"}
    ```
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from agentq.protocol.values import MISSING


class _AllInstances:
    def __repr__(self) -> str:
        return "ALL_INSTANCES"


ALL_INSTANCES: Any = _AllInstances()
"""Pass as ``instance`` to render every identity (global and every instance), e.g. for the agent's tick."""


def _json(value: Any) -> str:
    value = None if value is MISSING else value
    return "```json\n" + json.dumps(value, indent=2, ensure_ascii=False) + "\n```"


def _visible(identity_instance: str | None, instance: Any) -> bool:
    return identity_instance is None or instance is ALL_INSTANCES or identity_instance == instance


def data_block(index, kind: str, instance: str | None = None) -> str:
    """The block of one identity."""
    header = f"## Data: ¶{kind}" + (f" [{instance}]" if instance is not None else "")
    lines = [header, _json(index.view(kind, instance))]
    meta = index.meta(kind, instance)  # an instance falls back to the global description and schema
    if meta.get("description"):
        lines.append(str(meta["description"]))
    if meta.get("schema") is not None:
        lines += ["Schema:", _json(meta["schema"])]
    return "\n".join(lines)


def text_block(message: dict) -> str:
    """``## Text: <role>`` then the text."""
    return f"## Text: {message.get('role', 'user')}\n{message.get('text', '')}"


def error_block(message: dict) -> str:
    """``## Error: call <tool> failed`` (plus ``[<instance>]``), the error's type and message, and the call."""
    data = message.get("data") or {}
    call = data.get("call") or {}
    error = data.get("error") or {}
    instance = message.get("_instance")
    header = f"## Error: call {call.get('_tool', '?')} failed" + (f" [{instance}]" if instance is not None else "")
    lines = [header, f"Type: {error.get('type', 'Error')}", f"Message: {error.get('message', '')}"]
    if call:
        lines += ["Call:", _json(call)]
    return "\n".join(lines)


def _errors(index, instance: Any) -> list[dict]:
    """Errors visible with the data: global ones, plus the instance's (every error for ALL_INSTANCES)."""
    if instance is ALL_INSTANCES:
        return index.error_messages(None)
    if instance is None:
        return [m for m in index.error_messages(None) if m.get("_instance") is None]
    return index.error_messages(instance)


def render_blocks(index, *, kinds: Iterable[str] | None = None, instance: Any = None,
                  include_text: bool = True, include_errors: bool = True) -> list[str]:
    """The blocks of :func:`render_context`, in order.

    ``index`` is a :class:`agentq.protocol.views.LogIndex`. ``instance=None`` shows global identities only;
    an instance shows the global ones plus its own (merged view); :data:`ALL_INSTANCES` shows every identity.
    ``kinds`` (None = all) restricts the data blocks.
    """
    allowed = None if kinds is None else set(kinds)
    blocks = [text_block(m) for m in index.text_messages()] if include_text else []
    for kind, inst in index.identities():
        if (allowed is None or kind in allowed) and _visible(inst, instance):
            blocks.append(data_block(index, kind, inst))
    if include_errors:
        blocks += [error_block(m) for m in _errors(index, instance)]
    return blocks


def render_context(index, *, kinds: Iterable[str] | None = None, instance: Any = None,
                   include_text: bool = True, include_errors: bool = True) -> str:
    """The context as one string for the LLM: the blocks of :func:`render_blocks` separated by blank lines."""
    return "\n\n".join(render_blocks(index, kinds=kinds, instance=instance, include_text=include_text,
                                     include_errors=include_errors))


__all__ = ["ALL_INSTANCES", "data_block", "error_block", "render_blocks", "render_context", "text_block"]

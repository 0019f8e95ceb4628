"""What a latent call's request says (docs/protocol.md#what-the-model-is-sent): its own small request, with the scoped
context, the call's parameters as an ``input`` block and the tool's description, nothing else of the job
(:func:`latent_messages`; its system texts are `instructions.py`'s :func:`latent_system`), and the schema its answer
matches (:func:`latent_solution_schema`).

Pure: no I/O, no provider.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agentq.protocol.conversation import context_blocks
from agentq.protocol.render import data_block
from agentq.protocol.views import LogIndex, as_index
from agentq.protocol.writes import output_alternatives


def _tool_output_schema(tool_schema: Mapping[str, Any]) -> Any:
    """The tool's ``_output``; a composed tool's nullable wrapper ``{"anyOf": [X, {"type": "null"}]}`` is undone."""
    output = (tool_schema.get("properties") or {}).get("_output", {})
    if isinstance(output, Mapping) and list(output) == ["anyOf"]:
        options = output["anyOf"]
        if isinstance(options, list) and len(options) == 2 and options[1] == {"type": "null"}:
            return options[0]
    return output


def latent_solution_schema(tool_schema: Mapping[str, Any], call: Mapping[str, Any]) -> dict:
    """The solution schema of a latent call (docs/protocol.md#what-the-model-is-sent).

    ``{"type": "object", "properties": {"output": <_output>}, "required": ["output"]}``, or, when the call's
    ``_outputPath`` has ``||`` alternatives, ``output`` is an ``anyOf`` of ``{path: {const: alternative},
    value: <_output>}`` objects, one per alternative, so the model picks its branch. ``tool_schema`` may be the
    registered or the composed tool.
    """
    output = _tool_output_schema(tool_schema)
    alternatives = output_alternatives(dict(call))
    if len(alternatives) > 1:
        output = {"anyOf": [
            {"type": "object",
             "properties": {"path": {"const": " && ".join(str(ref) for ref in group)}, "value": output},
             "required": ["path", "value"]}
            for group in alternatives
        ]}
    return {"type": "object", "properties": {"output": output}, "required": ["output"]}


def call_parameters(call: Mapping[str, Any]) -> dict:
    """The parameters of a call: its fields without a leading ``_``."""
    return {k: v for k, v in call.items() if not k.startswith("_")}


def latent_messages(log_or_index: LogIndex | Sequence[Any], call: Mapping[str, Any], tool_schema: Mapping[str, Any],
                    *, scopes: Iterable[str] = ()) -> tuple[dict, ...]:
    """The one user turn of a latent call's request: the scoped context (instance-aware; the kinds ``text`` and
    ``error`` select text and error messages), the call's (resolved) parameters as an ``input`` data block,
    and the tool's name and description."""
    index = as_index(log_or_index)
    kinds = list(dict.fromkeys(scopes))
    blocks = context_blocks(index, kinds=kinds, instance=call.get("_instance"),
                            include_text="text" in kinds, include_errors="error" in kinds) if kinds else []
    params = LogIndex([{"type": "data", "kind": "input", "data": call_parameters(call),
                        "description": "The parameters of this call."}])
    blocks.append(data_block(params, "input"))
    name = str(call.get("_tool") or (tool_schema.get("properties") or {}).get("_tool", {}).get("const", "?"))
    description = str(tool_schema.get("description") or "").strip()
    blocks.append(f"## Tool: {name}\n{description}" if description else f"## Tool: {name}")
    return ({"role": "user", "content": [{"type": "text", "text": "\n\n".join(blocks)}]},)



__all__ = ["call_parameters", "latent_messages", "latent_solution_schema"]

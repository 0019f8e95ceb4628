"""What an agent job's model requests say (docs/protocol.md#what-the-model-is-sent): the conversation turns of its
ticks.

Pure: no I/O, no provider. The runtime puts the pieces into an ``agentq.llm.LLMRequest``.

An agent job's conversation grows append-only, so a provider's prompt cache stays valid from tick to tick::

    system   PROTOCOL_INSTRUCTIONS, then the job's system texts          (identical bytes every tick)
    user     the context as it was at the first request                  (render.py blocks)
    assistant  tool_use `solution` of tick 0
    user     tool_result for tick 0: what its calls wrote, which failed   (is_error + problems when the
             (+ a text block with messages no call wrote)                  solution was invalid)
    assistant  tool_use `solution` of tick 1
    ...

Each turn after the first carries what its tick changed, once: every write (path, method, value) and every
failure, never the views again. The model folds the writes onto the views of the first turn, so a job that
reads a large page per tick sends each page once and its requests grow by about a page per tick.

:func:`tick_messages` rebuilds that list from the log and the earlier :class:`Exchange` records; because the
log is append-only and every turn renders only the part of the log it covers, request *n*'s messages are a
prefix of request *n+1*'s. Nothing in a turn depends on ids or dates (they differ between runs), and JSON that
agentq writes itself is rendered with sorted keys.

The system texts are `instructions.py`'s; a latent call's own small request is `latent_prompt.py`'s.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentq.errors import Problem
from agentq.protocol.context import appended_items, previewed
from agentq.protocol.expressions import DAGGER
from agentq.protocol.instructions import SOLUTION_TOOL_NAME
from agentq.protocol.render import ALL_INSTANCES, render_blocks, text_block
from agentq.protocol.values import MISSING
from agentq.protocol.views import LogIndex, as_index, write_of

_EMPTY_CONTEXT = "(The context is empty.)"


# ------------------------------------------------------------------------------------------- rendering


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _text(text: str) -> dict:
    return {"type": "text", "text": text}


def context_blocks(index: LogIndex, *, kinds: Iterable[str] | None = None, instance: Any = ALL_INSTANCES,
                   include_text: bool = True, include_errors: bool = True) -> list[str]:
    """render.py's blocks without the ``system`` text messages (those go in the request's system)."""
    texts = [text_block(m) for m in index.text_messages() if m.get("role") != "system"] if include_text else []
    return texts + render_blocks(index, kinds=kinds, instance=instance, include_text=False,
                                 include_errors=include_errors)


def context_turn(log_or_index: LogIndex | Sequence[Any]) -> dict:
    """The first user turn of an agent job: its whole context rendered (every instance)."""
    blocks = context_blocks(as_index(log_or_index))
    return {"role": "user", "content": [_text("\n\n".join(blocks) or _EMPTY_CONTEXT)]}


_NO_SOLUTION = "(I answered without calling the solution tool.)"


def solution_turn(tool_use_id: str, solution: Any, *, blocks: Sequence[dict] = (), text: str = "") -> dict:
    """The assistant turn of an earlier tick: its thinking ``blocks`` exactly as the model gave them (signatures
    included: the API wants them back unchanged), then its ``solution`` tool_use (``{}`` when it was not an
    object). An answer without the tool (``tool_use_id`` "") is the text the model wrote instead."""
    content: list[dict] = [dict(block) for block in blocks]
    if tool_use_id:
        tool_input = solution if isinstance(solution, dict) else {}
        content.append({"type": "tool_use", "id": tool_use_id, "name": SOLUTION_TOOL_NAME, "input": tool_input})
    else:
        content.append(_text(text.strip() or _NO_SOLUTION))
    return {"role": "assistant", "content": content}


def _call_label(call: Mapping[str, Any] | None, instance: Any) -> str:
    call = call or {}
    label = str(call.get("_tool", "?"))
    inst = instance if instance is not None else call.get("_instance")
    return label + (f" [{inst}]" if inst is not None else "")


_PARAMS_CHARS = 300


def _call_params(call: Mapping[str, Any] | None) -> str:
    """The call's parameters as sorted JSON (cut at a fixed length), so two calls of one tool can be told apart."""
    text = _dumps({k: v for k, v in (call or {}).items() if not str(k).startswith("_") and k != "id"})
    return text if len(text) <= _PARAMS_CHARS else text[:_PARAMS_CHARS] + "…"


def _result_line(message: dict, preview_bytes: int | None = None, item: str | None = None) -> str | None:
    """One line of a tool_result about a message a call wrote; ``None`` for messages no call wrote. A value longer
    than ``preview_bytes`` is cut to a preview, with the reference that holds it all (``item`` for an append)."""
    call = message.get("_call")
    if message["type"] == "error":
        data = message.get("data") or {}
        error = data.get("error") or {}
        call = data.get("call") or call
        return (f"- {_call_label(call, message.get('_instance'))} {_call_params(call)} failed: "
                f"{error.get('type', 'Error')}: {error.get('message', '')}")
    if call is None:
        return None
    label = f"{_call_label(call, message.get('_instance'))} {_call_params(call)}"
    if message["type"] == "text":
        return f"- {label} said: {message.get('text', '')}"
    _, method, value = write_of(message)
    where = message.get("_path") or DAGGER + message["kind"]
    shown = "(nothing)" if value is MISSING else previewed(_dumps(value), preview_bytes, where, method, item)
    return f"- {label} wrote {where} ({method}): {shown}"


def _result_lines(new_messages: Sequence[dict], index_after: LogIndex, preview_bytes: int | None) -> list[str]:
    """The lines of a tool_result about what the tick's calls wrote and which failed."""
    items = appended_items(new_messages, index_after) if preview_bytes is not None else {}
    lines = (_result_line(m, preview_bytes, items.get(i)) for i, m in enumerate(new_messages))
    return [line for line in lines if line is not None]


def _problem_line(problem: Problem | Mapping[str, Any]) -> str:
    if isinstance(problem, Problem):
        pointer, message = problem.pointer, problem.message
    else:
        pointer, message = str(problem.get("pointer", "")), str(problem.get("message", ""))
    return f"- {pointer or '/'}: {message}"


_TRUNCATED = ("Your solution was cut off at the output token limit (max_tokens) after {n} complete call(s). Those "
              "calls were started and are never started again; what they wrote is below. Answer again with only "
              "the remaining calls (and \"output\" when the job is done), and write fewer or shorter calls.")


def result_turn(tool_use_id: str, new_messages: Sequence[dict], index_after: LogIndex, *,
                problems: Sequence[Problem | Mapping[str, Any]] = (), preview_bytes: int | None = None,
                truncated: int | None = None) -> dict:
    """The user turn after a tick: a ``tool_result`` for ``tool_use_id`` and what else was added meanwhile.

    ``new_messages`` are the log messages appended since that tick's request (canonical form);
    ``index_after`` is the log up to and including them. With ``problems`` (the solution was invalid) the
    tool_result is an error (``is_error: true``) listing each problem with its JSON pointer: the corrective
    turn. The tool_result lists each write and failure of the tick's calls once; a second text block shows the
    messages no call wrote (text, and data writes with their description and schema). Views are never
    rendered again: the turn grows with what the tick changed, not with the job's state. A written value longer
    than ``preview_bytes`` (``options.context.result_preview_bytes``) shows as a preview and its reference.
    ``truncated`` (the number of complete calls of a solution cut at max_tokens) asks for the rest of it. An answer
    without the solution tool (``tool_use_id`` "") gets a text turn instead of a tool_result.
    """
    lines = _result_lines(new_messages, index_after, preview_bytes)
    parts: list[str] = []
    if truncated is not None:
        parts.append(_TRUNCATED.format(n=truncated))
    if problems:
        parts.append("Your solution is invalid; answer again with a corrected solution. Problems:\n"
                     + "\n".join(_problem_line(p) for p in problems))
    if lines:
        parts.append("Results of the calls:\n" + "\n".join(lines))
    if not parts:
        parts.append("Your calls ran; none of them wrote a result.")
    result: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_use_id, "content": [_text("\n\n".join(parts))]}
    if problems:
        result["is_error"] = True
    content: list[dict] = [result if tool_use_id else _text("\n\n".join(parts))]
    changed = _changed_context(new_messages, index_after)
    if changed:
        content.append(_text("Added to the context meanwhile:\n\n" + changed))
    return {"role": "user", "content": content}


def corrective_turn(tool_use_id: str, problems: Sequence[Problem | Mapping[str, Any]],
                    new_messages: Sequence[dict] = (), index_after: LogIndex | None = None) -> dict:
    """The user turn that sends an invalid solution back: an error ``tool_result`` with the problems."""
    return result_turn(tool_use_id, new_messages, index_after or LogIndex(), problems=problems)


def _added_block(message: dict) -> str | None:
    """A message no call wrote, as a block: a text, or a data write (its path, method, value, description and
    schema); ``None`` for messages a call wrote (the tool_result reports them) and ``system`` texts."""
    if message.get("_call") is not None or message["type"] == "error":
        return None
    if message["type"] == "text":
        return None if message.get("role") == "system" else text_block(message)
    _, method, value = write_of(message)
    instance = message.get("_instance")
    where = message.get("_path") or DAGGER + message["kind"]
    header = f"## Data: ¶{message['kind']}" + (f" [{instance}]" if instance is not None else "")
    lines = [f"{header} (written at {where}, {method})", _json_block(None if value is MISSING else value)]
    if message.get("description"):
        lines.append(str(message["description"]))
    if message.get("schema") is not None:
        lines += ["Schema:", _json_block(message["schema"])]
    return "\n".join(lines)


def _json_block(value: Any) -> str:
    return "```json\n" + json.dumps(value, indent=2, ensure_ascii=False) + "\n```"


def _changed_context(new_messages: Sequence[dict], index: LogIndex) -> str:
    """The blocks of the messages appended since the tick's request that no call wrote."""
    return "\n\n".join(block for block in (_added_block(m) for m in new_messages) if block is not None)


# ------------------------------------------------------------------------------------------ agent ticks


@dataclass(frozen=True)
class Exchange:
    """One earlier request of a job's conversation and its answer.

    ``log_length`` is how many log messages existed when the request was built; ``problems`` are the
    validation problems of its solution (sent back in an error tool_result), empty when it was valid.
    ``blocks`` are the answer's thinking blocks as the model gave them; ``text`` what it wrote instead of calling
    the solution tool (``tool_use_id`` ""); ``truncated`` whether the answer was cut at max_tokens (its solution
    then holds the complete calls that came, and the next turn asks for the rest).
    """

    log_length: int
    tool_use_id: str
    solution: Any
    problems: tuple[Problem | Mapping[str, Any], ...] = field(default=())
    blocks: tuple[dict, ...] = ()
    text: str = ""
    truncated: bool = False

    def to_dict(self) -> dict:
        data = {"log_length": self.log_length, "tool_use_id": self.tool_use_id, "solution": self.solution,
                "problems": [p.to_dict() if isinstance(p, Problem) else dict(p) for p in self.problems]}
        optional = {"blocks": list(self.blocks), "text": self.text, "truncated": self.truncated}
        return {**data, **{key: value for key, value in optional.items() if value}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Exchange:
        problems = tuple(Problem(str(p.get("pointer", "")), str(p.get("message", "")))
                         for p in data.get("problems") or ())
        return cls(int(data["log_length"]), str(data["tool_use_id"]), data.get("solution"), problems,
                   blocks=tuple(data.get("blocks") or ()), text=str(data.get("text") or ""),
                   truncated=bool(data.get("truncated")))

    def answer_turn(self) -> dict:
        """The assistant turn of this exchange."""
        return solution_turn(self.tool_use_id, self.solution, blocks=self.blocks, text=self.text)

    def result_turn(self, segment: Sequence[dict], index_after: LogIndex, *, preview_bytes: int | None) -> dict:
        """The user turn after this exchange, for the log messages `segment` appended since its request."""
        calls = self.solution.get("calls") if isinstance(self.solution, dict) else None
        truncated = len(calls) if isinstance(calls, list) else 0
        return result_turn(self.tool_use_id, segment, index_after, problems=self.problems,
                           preview_bytes=preview_bytes, truncated=truncated if self.truncated else None)


def tick_messages(log: LogIndex | Sequence[Any], exchanges: Sequence[Exchange] = (), *,
                  preview_bytes: int | None = None) -> tuple[dict, ...]:
    """The messages of an agent job's next request, given its log and its earlier exchanges (oldest first).

    The first turn renders the log as it was at the first request (all of it when there is none yet); each
    exchange adds its ``solution`` tool_use and a :func:`result_turn` for the log messages appended up to the
    next exchange's request (or up to now, for the last one).
    """
    messages = log.messages if isinstance(log, LogIndex) else list(as_index(log).messages)
    if not exchanges:
        return (context_turn(messages),)
    first = exchanges[0].log_length
    index = LogIndex(messages[:first])
    turns = [context_turn(index)]
    for i, exchange in enumerate(exchanges):
        end = exchanges[i + 1].log_length if i + 1 < len(exchanges) else len(messages)
        start = exchange.log_length
        segment = messages[start:end]
        index.extend(segment)
        turns.append(exchange.answer_turn())
        turns.append(exchange.result_turn(segment, index, preview_bytes=preview_bytes))
    return tuple(turns)


__all__ = [
    "Exchange",
    "context_blocks",
    "context_turn",
    "corrective_turn",
    "result_turn",
    "solution_turn",
    "tick_messages",
]

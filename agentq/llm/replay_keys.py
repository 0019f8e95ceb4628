"""What a replay matches a model request by: its *key*, a hash of what the request asks with the parts that differ
from run to run of the same job normalised away (`llm/replay.py` serves answers by it).

What the key covers (stable between runs of one job against the same fleet): the purpose (tick, latent, module),
the system texts, the conversation turns and the solution schema (the job's tools as the fleet knows them and its
output schema). What it leaves out or normalises:

- the model, ``max_tokens``, the cache TTL and the thinking settings (how it is asked, not what);
- the ids of the solution tool's uses (``toolu_…``: the API makes new ones every run), numbered by first
  appearance instead;
- thinking blocks' signatures and redacted data (opaque, new every run), and the blocks' prompt-cache
  breakpoints (``cache_control``: how the provider caches, so a key is the same for an API body);
- agentq's time-ordered ids of any kind (``job_01J…``, ``call_01J…``: a prefix and a ULID) and the ids of the calls
  of a tick (``call_`` and 28 hex digits), wherever they occur in a text;
- timestamps (an ISO 8601 date with a time of day, e.g. ``2026-11-29T06:12:55.123Z``); a date alone is kept: it
  is usually part of what was asked;
- the order of the lines of a tool_result's "Results of the calls", and of the keys of the objects in a JSON
  block of a text (a ¶state rendered in a turn): calls that run in parallel finish, write and are reported in any
  order.

Everything else counts: another input, another tool schema (a fleet with other tools or another version of
one), another result of an activity, and the request has another key, so a replay refuses it rather than answer
with what another request was answered.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from agentq.llm.base import LLMRequest

_ULID_ID = re.compile(r"\b([a-z][a-z0-9]*)_[0-7][0-9A-HJKMNP-TV-Z]{25}\b")
_TICK_CALL_ID = re.compile(r"\bcall_[0-9a-f]{28}\b")
_TOOL_USE_ID = re.compile(r"\btoolu_[A-Za-z0-9_]+")
_TIMESTAMP = re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?")
_THINKING = frozenset({"thinking", "redacted_thinking"})
_RESULTS = "Results of the calls:\n"
_JSON_BLOCK = re.compile(r"```json\n(.*?)\n```", re.DOTALL)
_OPAQUE = frozenset({"signature", "data", "cache_control"})  # of a thinking block: its signature, a redacted
# block's data
_BLOCK = frozenset({"cache_control"})  # of any other content block: its prompt-cache breakpoint


def request_key(request: LLMRequest) -> str:
    """The key of what `request` asks (see the module docstring): 32 hex digits."""
    uses: dict[str, str] = {}
    canonical = json.dumps([request.purpose, [_normal(t, uses) for t in request.system],
                            _normal(list(request.messages), uses), request.solution_schema],
                           sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:32]


def request_fingerprint(request: LLMRequest) -> str:
    """The key files recorded before keys were normalised carry as ``request``: a hash of the request as it was
    (purpose, system, messages, solution schema; not the model). A replay still matches it exactly."""
    canonical = json.dumps([request.purpose, list(request.system), list(request.messages), request.solution_schema],
                           sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:32]


def _normal(value: Any, uses: dict[str, str]) -> Any:
    if isinstance(value, str):
        return _normal_text(value, uses)
    if isinstance(value, list | tuple):
        return [_normal(item, uses) for item in value]
    if isinstance(value, dict):
        opaque = _OPAQUE if value.get("type") in _THINKING else _BLOCK if "type" in value else ()
        return {key: _normal(item, uses) for key, item in value.items() if key not in opaque}
    return value


def _normal_text(text: str, uses: dict[str, str]) -> str:
    text = _JSON_BLOCK.sub(_sorted_block, _results_sorted(text))
    text = _TOOL_USE_ID.sub(lambda m: uses.setdefault(m.group(0), f"toolu_{len(uses)}"), text)
    text = _TIMESTAMP.sub("<timestamp>", text)
    text = _TICK_CALL_ID.sub("call_<id>", text)
    return _ULID_ID.sub(lambda m: f"{m.group(1)}_<id>", text)


def _sorted_block(found: re.Match[str]) -> str:
    """A fenced JSON block with its objects' keys sorted (as it was when it does not parse)."""
    try:
        value = json.loads(found.group(1))
    except ValueError:
        return found.group(0)
    return "```json\n" + json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n```"


def _results_sorted(text: str) -> str:
    """`text` with the lines of its "Results of the calls" sorted (each line is one call's write or failure)."""
    head, found, rest = text.partition(_RESULTS)
    if not found or not rest.startswith("- "):
        return text
    block, gap, tail = rest.partition("\n\n")
    lines = sorted(block[2:].split("\n- "))
    return head + found + "- " + "\n- ".join(lines) + gap + tail


__all__ = ["request_fingerprint", "request_key"]

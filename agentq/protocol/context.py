"""How much of a job's data its conversation carries (docs/protocol.md#what-the-model-is-sent): `options.context`
(pure).

``result_preview_bytes``: a call's result whose JSON is longer than that many bytes reaches the model as a
preview (its first bytes) and the reference that holds the whole value, e.g. ``†state.pages.3``. The model may pass
that reference to a later call without reading it: the engine resolves it before the call runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentq.errors import Problem
from agentq.protocol.values import MISSING, get_in
from agentq.protocol.views import LogIndex, write_of

MIN_PREVIEW_BYTES = 64  # below this a preview says nothing about the value
MIN_INPUT_TOKENS = 4096  # below this a request holds hardly more than agentq's instructions and the tools
DEFAULT_MAX_INPUT_TOKENS = 200_000  # the context window of the current Claude models
COMPACT_AT = 0.75  # compaction starts when the conversation passes this share of max_input_tokens (the rest: the
# system texts, the solution schema, room to answer)
COMPACT_PREVIEW_BYTES = 256  # what a compacted exchange keeps of each written value
CONTEXT_OPTIONS = ("result_preview_bytes", "max_input_tokens")
_MINIMUMS = {"result_preview_bytes": (MIN_PREVIEW_BYTES, "bytes"), "max_input_tokens": (MIN_INPUT_TOKENS, "tokens")}


@dataclass(frozen=True, slots=True)
class ContextOptions:
    """A job's `options.context`; None: that bound is off (`max_input_tokens`: the default window)."""

    result_preview_bytes: int | None = None
    max_input_tokens: int | None = None

    @classmethod
    def of(cls, raw: Any) -> ContextOptions:
        """The options of a stored (valid) `options.context` (absent or null: the defaults)."""
        if not isinstance(raw, Mapping):
            return cls()
        preview, window = raw.get("result_preview_bytes"), raw.get("max_input_tokens")
        return cls(result_preview_bytes=int(preview) if preview is not None else None,
                   max_input_tokens=int(window) if window is not None else None)

    @property
    def window(self) -> int:
        """The most input tokens a request of the job may have (its option, else the default)."""
        return self.max_input_tokens or DEFAULT_MAX_INPUT_TOKENS


def context_problems(value: Any, pointer: str) -> list[Problem]:
    """What is wrong with `value` as `options.context`, each problem with its JSON pointer; [] when it is valid."""
    if value is None:
        return []
    if not isinstance(value, Mapping):
        return [Problem(pointer, f"expected an object with any of {', '.join(CONTEXT_OPTIONS)}, got {value!r}")]
    problems = []
    for key, item in value.items():
        where = f"{pointer}/{key}"
        if key not in CONTEXT_OPTIONS:
            problems.append(Problem(where, f"unknown context option; they are {', '.join(CONTEXT_OPTIONS)}"))
        elif item is not None and (not isinstance(item, int) or isinstance(item, bool) or item < _MINIMUMS[key][0]):
            least, unit = _MINIMUMS[key]
            problems.append(Problem(where, f"expected an integer >= {least} ({unit}) or null, got {item!r}"))
    return problems


def preview(text: str, limit: int | None) -> str | None:
    """The first `limit` bytes of `text` (cut at a character), or None when `text` fits (or there is no limit)."""
    if limit is None:
        return None
    encoded = text.encode()
    if len(encoded) <= limit:
        return None
    return encoded[:limit].decode(errors="ignore")


def previewed(shown: str, preview_bytes: int | None, where: str, method: str, item: str | None) -> str:
    """A written value's JSON, or its preview when longer than ``preview_bytes``, saying which reference holds it
    all: the item an append made (``item``), the output path a ``set`` wrote."""
    cut = preview(shown, preview_bytes)
    if cut is None:
        return shown
    holder = item or (where if method == "set" else None)
    return (f"{cut}… (a preview: the value has {len(shown.encode())} bytes; "
            + (f"it is {holder}, which a call's parameter may reference without you reading it)" if holder
               else f"it was written into {where})"))


def appended_items(segment: Sequence[dict], index_after: LogIndex) -> dict[int, str]:
    """Where the items that `push` and `concat` writes of `segment` appended now are, by position in `segment`:
    ``†state.pages.3`` for a push, ``†state.pages.3 to †state.pages.4`` for a concat of two items.

    Counted back from the array's length in `index_after` (the log up to the end of `segment`); a write is left out
    when a later write of the segment touches its array in another way (its position is then unknown).
    """
    found: dict[int, str] = {}
    ends: dict[_Target, int | None] = {}
    barriers: list[_Target] = []  # later writes that are no appends
    for position in range(len(segment) - 1, -1, -1):
        append = _append(segment[position], barriers)
        if append is None:
            continue
        target, count, where = append
        end = ends[target] if target in ends else _length(index_after, target)
        ends[target] = None if end is None or end < count else end - count
        if end is not None and end >= count and count:
            found[position] = f"{where}.{end - count}" + (f" to {where}.{end - 1}" if count > 1 else "")
    return found


_Target = tuple[str, Any, tuple[str, ...]]  # kind, instance, path


def _append(message: dict, barriers: list[_Target]) -> tuple[_Target, int, str] | None:
    """A data message's append (its array, how many items, its `_path`), when it is one whose position can be
    known; any other data write becomes a barrier for the appends before it."""
    if message.get("type") != "data":
        return None
    path, method, value = write_of(message)
    target = (message["kind"], message.get("_instance"), path)
    if method not in ("push", "concat") or "_path" not in message:
        barriers.append(target)
        return None
    if value is MISSING or any(_overlap(target, barrier) for barrier in barriers):
        return None
    count = 1 if method == "push" else len(value) if isinstance(value, list) else 0
    return target, count, str(message["_path"])


def _length(index: LogIndex, target: _Target) -> int | None:
    """The length of the array at `target` in `index` (None when there is no array)."""
    array = get_in(index.view(target[0], target[1]), target[2])
    return len(array) if isinstance(array, list) else None


def _overlap(a: _Target, b: _Target) -> bool:
    """Whether two writes touch the same data: same kind and instance, one path at or under the other."""
    if a[0] != b[0] or a[1] != b[1]:
        return False
    shorter = min(len(a[2]), len(b[2]))
    return a[2][:shorter] == b[2][:shorter]


__all__ = ["COMPACT_AT", "COMPACT_PREVIEW_BYTES", "CONTEXT_OPTIONS", "DEFAULT_MAX_INPUT_TOKENS", "MIN_INPUT_TOKENS",
           "MIN_PREVIEW_BYTES", "ContextOptions", "appended_items", "context_problems",
           "preview", "previewed"]

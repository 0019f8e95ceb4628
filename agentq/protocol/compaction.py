"""Compaction of an agent job's conversation (docs/protocol.md#what-the-model-is-sent), pure.

When a request's conversation passes `COMPACT_AT` of the job's `max_input_tokens`, every earlier exchange but the
last is shown compacted, in one step: its tool_result keeps each written value's first `COMPACT_PREVIEW_BYTES`
bytes and the reference that holds it (``options.context.result_preview_bytes``'s form). The conversation is then
append-only again until the next compaction, so the prompt cache misses once per compaction and hits on the ticks
between. Which exchanges are compacted is replayed from the exchanges alone (what each request showed), so a
conversation grown tick by tick and one built from everything agree.

Sizes are estimated as the API bills JSON-heavy text: about 4 characters a token.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

from agentq.protocol.context import COMPACT_AT, COMPACT_PREVIEW_BYTES

CHARS_PER_TOKEN = 4


def turn_tokens(turn: dict) -> int:
    """About how many tokens one turn of the conversation takes."""
    return math.ceil(len(json.dumps(turn, ensure_ascii=False, separators=(",", ":"))) / CHARS_PER_TOKEN)


def estimated_tokens(*parts: object) -> int:
    """About how many tokens `parts` (e.g. a request's system texts, turns and schema) take, as `turn_tokens` counts."""
    return math.ceil(len(json.dumps(parts, ensure_ascii=False, separators=(",", ":"))) / CHARS_PER_TOKEN)


def compact_bytes(preview_bytes: int | None) -> int:
    """What a compacted exchange keeps of each value: `COMPACT_PREVIEW_BYTES`, or the job's smaller preview."""
    return min(preview_bytes or COMPACT_PREVIEW_BYTES, COMPACT_PREVIEW_BYTES)


def compaction_point(first: int, whole: Sequence[int], compacted: Sequence[int], max_input_tokens: int) -> int:
    """How many exchanges (the oldest) the next request shows compacted.

    `first` is the first turn's tokens; `whole[i]` and `compacted[i]` the tokens of exchange *i* (its solution turn
    and its result turn) shown whole and compacted. Request *k* (made after *k* exchanges) shows the first `point`
    compacted; when it passes the limit, every exchange but its last becomes compacted from then on.
    """
    limit = max_input_tokens * COMPACT_AT
    point = 0
    whole_sum = [0]
    for tokens in whole:
        whole_sum.append(whole_sum[-1] + tokens)
    compacted_sum = [0]
    for tokens in compacted:
        compacted_sum.append(compacted_sum[-1] + tokens)
    for k in range(1, len(whole) + 1):
        total = first + compacted_sum[point] + whole_sum[k] - whole_sum[point]
        if total > limit and k - 1 > point:
            point = k - 1
    return point


__all__ = ["CHARS_PER_TOKEN", "compact_bytes", "compaction_point", "estimated_tokens", "turn_tokens"]

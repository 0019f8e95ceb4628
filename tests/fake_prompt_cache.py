"""The Messages API's prompt cache, as the fake Messages API models it when a test turns it on
(``fake.prompt_cache = PromptCache()``), following Anthropic's documentation of prompt caching:

* a request's prompt is its blocks in the order tools, system, messages (each content block; a string content is
  one block); the cache is per model and a prefix's key is its content up to a block, ``cache_control`` itself
  not part of it;
* each block carrying ``cache_control`` is a breakpoint: the prefix up to it is written to the cache (as cache
  creation tokens) unless it is shorter than the model's minimum cacheable length, and lives for its TTL ("5m" or
  "1h") from its last use;
* a request reads the longest cached prefix that ends at one of its breakpoints or at one of the 20 blocks before
  one (the documented lookback), and pays cache-read tokens for it;
* ``input_tokens`` are the tokens after the last cache read or write.

Tokens are counted as the fake counts them elsewhere: about 4 bytes of a block's JSON each.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable

LOOKBACK_BLOCKS = 20
TTL_S = {"5m": 300.0, "1h": 3600.0}


def _blocks(body: dict) -> list[dict]:
    """The request's prompt as blocks, in the cache's order (tools, system, messages), each with its role."""
    blocks = [{"role": "tool", **tool} for tool in body.get("tools") or []]
    system = body.get("system")
    system_blocks = [{"type": "text", "text": system}] if isinstance(system, str) else (system or [])
    blocks += [{"role": "system", **block} for block in system_blocks]
    for message in body.get("messages") or []:
        content = message.get("content")
        items = [{"type": "text", "text": content}] if isinstance(content, str) else (content or [])
        blocks += [{"role": message.get("role"), **block} for block in items]
    return blocks


def _tokens(block: dict) -> int:
    return max(1, len(json.dumps(block, sort_keys=True, ensure_ascii=False).encode()) // 4)


class PromptCache:
    """The cache of one fake server: prefix key → when it expires (the clock's seconds)."""

    def __init__(self, *, min_tokens: int = 1024, clock: Callable[[], float] = time.monotonic):
        self.min_tokens = min_tokens
        self.clock = clock
        self.entries: dict[str, tuple[float, float]] = {}  # prefix key -> (expiry, its TTL in seconds)
        self.reports: list[dict[str, int]] = []  # each answered request's cache usage, in order
        self._lock = threading.Lock()

    def usage(self, body: dict) -> dict[str, int]:
        """The request's ``input_tokens``, ``cache_read_input_tokens`` and ``cache_creation_input_tokens``; the
        cache is read and written as the request would."""
        blocks = _blocks(body)
        keys, totals, running, digest = [], [], 0, hashlib.sha256(str(body.get("model")).encode())
        for block in blocks:
            plain = {k: v for k, v in block.items() if k != "cache_control"}
            digest.update(json.dumps(plain, sort_keys=True, ensure_ascii=False).encode())
            keys.append(digest.copy().hexdigest())
            running += _tokens(plain)
            totals.append(running)
        breakpoints = [(i, b["cache_control"].get("ttl", "5m")) for i, b in enumerate(blocks) if b.get("cache_control")]
        with self._lock:
            now = self.clock()
            read = self._read(keys, [i for i, _ in breakpoints], now)
            written_to = read
            for i, ttl in breakpoints:
                if totals[i] >= self.min_tokens:
                    life = TTL_S.get(ttl, 300.0)
                    self.entries[keys[i]] = (now + life, life)
                    written_to = max(written_to, i)
            cache_read = totals[read] if read >= 0 else 0
            creation = totals[written_to] - cache_read if written_to >= 0 else 0
            report = {"input_tokens": running - cache_read - creation, "cache_read_input_tokens": cache_read,
                      "cache_creation_input_tokens": creation}
            self.reports.append(report)
        return report

    def _read(self, keys: list[str], breakpoints: list[int], now: float) -> int:
        """The last block of the longest live cached prefix the breakpoints reach (-1: none); it lives on."""
        best = -1
        for point in breakpoints:
            for i in range(point, max(-1, point - LOOKBACK_BLOCKS - 1), -1):
                entry = self.entries.get(keys[i])
                if entry is not None and entry[0] > now:
                    best = max(best, i)
                    break
        if best >= 0:  # a read refreshes the entry's lifetime
            life = self.entries[keys[best]][1]
            self.entries[keys[best]] = (now + life, life)
        return best


__all__ = ["PromptCache"]

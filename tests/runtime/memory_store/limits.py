"""The memory store's models' rate limits: llm_take.lua and llm_settle.lua (and their _buckets.lua), step by step,
on the store's clock."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from agentq.protocol.limits import KINDS, LimitAsk, ModelLimits, Observed
from agentq.store.limits import HEADROOM_MS, IDLE_MS
from agentq.store.replies import LimitGo, LimitReply, LimitWait
from tests.runtime.memory_store.core import MemoryCore

STALE_MS = 600_000


@dataclass
class Bucket:
    """A model's hash (`<kind>.level`, `.at`, `.learned`, `paused_until`) and its tickets (place -> ms)."""

    level: dict[str, float] = field(default_factory=dict)
    at: dict[str, int] = field(default_factory=dict)
    learned: dict[str, int] = field(default_factory=dict)
    paused_until: int = 0
    tickets: dict[str, int] = field(default_factory=dict)
    expires_ms: int = 0


class LimitSteps(MemoryCore):
    _buckets: dict[str, Bucket]

    def _bucket(self, model: str, now: int) -> Bucket:
        buckets = self.__dict__.setdefault("_buckets", {})
        bucket = buckets.get(model)
        if bucket is None or bucket.expires_ms <= now:
            bucket = buckets[model] = Bucket()
        bucket.expires_ms = now + IDLE_MS
        return bucket

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    @staticmethod
    def _capacity(bucket: Bucket, kind: str, configured: int) -> int:
        learned = bucket.learned.get(kind, 0)
        if configured > 0 and learned > 0:
            return min(configured, learned)
        return configured if configured > 0 else learned

    @staticmethod
    def _refill(bucket: Bucket, kind: str, cap: int, now: int) -> tuple[float, int]:
        """The level now and the ms from which it refills (_buckets.lua's `refill`)."""
        if kind not in bucket.level:
            return cap, now
        level = bucket.level[kind] + max(now - bucket.at[kind], 0) * cap / 60000
        return (cap, now) if level >= cap else (level, max(bucket.at[kind], now))

    def take_model_request(self, model: str, place: str, limits: ModelLimits, ask: LimitAsk) -> LimitReply:
        """llm_take.lua."""
        with self._changed:
            now = self._now_ms()
            bucket = self._bucket(model, now)
            bucket.tickets = {p: t for p, t in bucket.tickets.items() if t >= now - STALE_MS}
            if place in bucket.tickets:
                at = max(bucket.tickets[place], bucket.paused_until)
                if at <= now:
                    del bucket.tickets[place]
                    return LimitGo()
                return LimitWait(at - now)
            wait = 0
            for kind, configured, amount in zip(KINDS, limits.per_minute(), ask.amounts(), strict=True):
                cap = self._capacity(bucket, kind, configured or 0)
                amount = min(max(amount, 0), cap)
                if cap > 0 and amount > 0:
                    level, start = self._refill(bucket, kind, cap, now)
                    if level >= cap:  # a take from a full bucket refills it HEADROOM_MS later
                        start = now + HEADROOM_MS
                    level = round(level - amount, 3)
                    bucket.level[kind], bucket.at[kind] = level, start
                    if level < 0:
                        wait = max(wait, start - now + math.ceil(-level * 60000 / cap))
            at = max(now + wait, bucket.paused_until)
            if at > now:
                bucket.tickets[place] = at
                return LimitWait(at - now)
            return LimitGo()

    def learn_context_window(self, model: str, tokens: int) -> None:
        with self._changed:
            windows = self.__dict__.setdefault("_windows", {})
            windows[model] = min(tokens, windows.get(model, tokens))

    def context_windows(self) -> dict[str, int]:
        with self._changed:
            return dict(self.__dict__.get("_windows", {}))

    def settle_model_request(self, model: str, limits: ModelLimits, observed: Observed) -> None:
        """llm_settle.lua."""
        with self._changed:
            now = self._now_ms()
            bucket = self._bucket(model, now)
            for i, kind in enumerate(KINDS):
                seen, remaining = observed.limits[i], observed.remaining[i]
                if seen is not None and seen > 0:
                    bucket.learned[kind] = seen
                cap = self._capacity(bucket, kind, limits.per_minute()[i] or 0)
                refund = observed.refund[i]
                if cap > 0 and (refund != 0 or remaining is not None):
                    level, start = self._refill(bucket, kind, cap, now)
                    level = min(level + refund, cap)
                    if remaining is not None and remaining < level:
                        level = remaining
                    bucket.level[kind], bucket.at[kind] = round(level, 3), start
            if observed.pause_s > 0:
                bucket.paused_until = max(bucket.paused_until, now + round(observed.pause_s * 1000))

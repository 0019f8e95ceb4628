"""The fleet-wide rate limits of the models (docs/rate-limits.md): `RedisLimits`, the store's side of the limiter
(`engine/limits.py`).

A model's buckets live in one hash with a hash tag of the model's name (`agentq:llm:{<model>}`), and its deferred
requests' tickets in a sorted set of the same slot, so each step is one Lua script on one node of a cluster:
`take_model_request` before a request is sent (llm_take.lua), `settle_model_request` after (llm_settle.lua). Both
run on the server's clock, one clock for the fleet. The context windows refusals taught are kept by llm_window.lua.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentq.protocol.envelopes import Envelope
from agentq.protocol.limits import LimitAsk, ModelLimits, Observed
from agentq.store.boundary import map_store_errors
from agentq.store.codecs import entry
from agentq.store.part import StorePart
from agentq.store.replies import LimitGo, LimitReply, LimitWait
from agentq.store.step_args import KindSettle, LlmSettleArgs, LlmTakeArgs
from agentq.store.step_constants import HEADROOM_MS

IDLE_MS = 3_600_000  # a model nobody asked for an hour forgets its buckets (and what the headers taught)


@map_store_errors
class RedisLimits(StorePart):
    """The models' rate-limit buckets, pauses and tickets, and the learned context windows (see the module
    docstring): the `LimitStore` contract, a part over the store's connection (`part.py`)."""

    def take_model_request(self, model: str, place: str, limits: ModelLimits, ask: LimitAsk, *,
                           started: tuple[str, Sequence[Envelope]] | None = None) -> LimitReply:
        """Take `ask` from `model`'s buckets (its configured `limits`, lowered to what the API's headers taught):
        `LimitGo`, or `LimitWait` with the wait before `place` may be sent (its share taken: asking again with the
        same place once the wait is over is `LimitGo`). `started` (a job and the events its request starts with)
        are appended to the job's stream on `LimitGo` in the same step (`LimitGo.started`), saving the request a
        round trip; not on a cluster (the stream is in the job's slot), where the caller appends them."""
        keys = [self.fleet.llm(model), self.fleet.llm_tickets(model)]
        take = LlmTakeArgs(place=place, idle_ms=IDLE_MS, limits=tuple(limit or 0 for limit in limits.per_minute()),
                           amounts=tuple(max(amount, 0) for amount in ask.amounts()))
        args = [take.encode()]
        folded = False
        if started is not None and started[1] and not self.cluster:
            job_id, envelopes = started
            keys.append(self.keys(job_id).events)
            args += [entry(envelope, job_id) for envelope in envelopes]
            folded = True
        reply = self.scripts.run("llm_take", keys, args)
        return LimitWait(int(reply[1])) if reply[0] == "wait" else LimitGo(started=folded)

    def settle_model_request(self, model: str, limits: ModelLimits, observed: Observed) -> None:
        """What a request of `model` taught: the amounts it gives back, the limits and remaining capacity the API
        said, the pause it asked for (`Observed`)."""
        kinds = tuple(KindSettle(limit=limit or 0, refund=refund, seen_limit=seen, seen_remaining=remaining)
                      for limit, refund, seen, remaining in zip(limits.per_minute(), observed.refund,
                                                                observed.limits, observed.remaining, strict=True))
        args = LlmSettleArgs(idle_ms=IDLE_MS, pause_ms=round(observed.pause_s * 1000), kinds=kinds)
        self.scripts.run("llm_settle", [self.fleet.llm(model)], [args.encode()])

    def learn_context_window(self, model: str, tokens: int) -> None:
        """Keep the context window a refusal of `model` taught, for the fleet, unless a smaller one is kept
        (`engine/windows.py` reads them back): llm_window.lua."""
        self.scripts.run("llm_window", [self.fleet.llm_windows], [model, tokens])

    def context_windows(self) -> dict[str, int]:
        """The context windows refusals taught, by model."""
        return {model: int(tokens) for model, tokens in self.redis.hgetall(self.fleet.llm_windows).items()}


__all__ = ["HEADROOM_MS", "IDLE_MS", "RedisLimits"]

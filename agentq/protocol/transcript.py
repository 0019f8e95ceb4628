"""An agent job's conversation, grown tick by tick instead of rebuilt from the whole log each time.

The conversation is append-only (docs/protocol.md#what-the-model-is-sent): request *n* repeats request *n - 1* and adds
the answer it got and a turn for what the log gained since. :func:`~agentq.protocol.conversation.tick_messages` builds
it from the whole log and every exchange, which costs more with every tick; a :class:`Transcript` keeps the turns, the
log and its index, and takes only what is new, so a tick's cost no longer grows with the conversation. It gives exactly
the turns ``tick_messages`` gives for the same log and exchanges (a test holds the two together), and builds them
again from what it holds when what it is given does not continue what it built (a request tried again after the
log grew, say).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentq.protocol.compaction import compact_bytes, compaction_point, turn_tokens
from agentq.protocol.conversation import Exchange, context_turn
from agentq.protocol.views import LogIndex


class Transcript:
    """The turns of an agent job's next request, for its log and exchanges so far (`grow` adds to both)."""

    def __init__(self, job: Any = None, *, preview_bytes: int | None = None,
                 max_input_tokens: int | None = None) -> None:
        self.job = job  # what tells this job from another of the same id (its creation time)
        self.preview_bytes = preview_bytes  # the job's `options.context.result_preview_bytes`
        self.max_input_tokens = max_input_tokens  # None: never compacted (`compaction.py`)
        self.log: list[dict] = []
        self.exchanges: list[Exchange] = []
        self.index = LogIndex()  # the whole log
        self._turns: list[dict] = []
        self._built = (0, 0)  # (messages, exchanges) the turns were built for
        self.compacted = 0  # how many exchanges (the oldest) the turns show compacted
        self.saved_tokens = 0  # about how many tokens compaction keeps out of the next request
        self._sizes: list[tuple[int, int]] = []  # tokens of each closed exchange: whole, compacted

    @property
    def turns(self) -> tuple[dict, ...]:
        return tuple(self._turns)

    def grow(self, messages: Sequence[Any], exchanges: Sequence[Exchange]) -> tuple[dict, ...]:
        """Add the log messages and exchanges that came since the last call (oldest first); returns the turns of
        the next request."""
        for message in messages:
            self.log.append(self.index.append(message))
        self.exchanges.extend(exchanges)
        if not self._continue():
            self._rebuild()
        self._built = (len(self.log), len(self.exchanges))
        if self.max_input_tokens is not None and self.exchanges:
            self._compact(self.max_input_tokens)
        return self.turns

    def _continue(self) -> bool:
        """Extend the turns built last time; False when they cannot be extended (then they are built again)."""
        built_log, built = self._built
        if not self._turns:
            return False
        if len(self.exchanges) > built:
            if self.exchanges[built].log_length != built_log:
                return False  # the open turn was built up to another point of the log than its exchange's end
        elif len(self.log) != built_log:  # the same request again over a longer log: its open turn anew
            self._turns.pop()
            if built == 0:
                self._turns.append(context_turn(self.index))
            else:
                self._add_result(built - 1)
        for i in range(built, len(self.exchanges)):
            self._turns.append(self.exchanges[i].answer_turn())
            self._add_result(i)
        return True

    def _add_result(self, i: int) -> None:
        """The result turn of exchange `i`, for the log up to the next exchange's request (or the whole log)."""
        exchange = self.exchanges[i]
        end = self.exchanges[i + 1].log_length if i + 1 < len(self.exchanges) else len(self.log)
        segment = self.log[exchange.log_length:end]
        index = self.index if end == len(self.log) else LogIndex(self.log[:end])
        self._turns.append(exchange.result_turn(segment, index, preview_bytes=self.preview_bytes))

    def _compact(self, max_input_tokens: int) -> None:
        """Show the oldest exchanges compacted, as many as `compaction_point` says (it only grows)."""
        last = len(self.exchanges) - 1
        for i in range(len(self._sizes), last):  # exchanges closed since: still whole (the point is below them)
            self._sizes.append((self._tokens(i), self._compacted_tokens(i)))
        whole = [w for w, _ in self._sizes] + [self._tokens(last)]
        compacted = [c for _, c in self._sizes] + [self._compacted_tokens(last)]
        point = compaction_point(turn_tokens(self._turns[0]), whole, compacted, max_input_tokens)
        for i in range(self.compacted, point):
            self._turns[2 + 2 * i] = self._result(i, preview_bytes=compact_bytes(self.preview_bytes))
        self.compacted = max(self.compacted, point)
        self.saved_tokens = sum(whole[i] - compacted[i] for i in range(self.compacted))

    def limit(self, max_input_tokens: int) -> bool:
        """Keep the conversation under a smaller window from now on (one the model's refusal taught: its real
        window is smaller than the job assumed), compacting what that window asks now; whether it compacted more."""
        if self.max_input_tokens is not None and max_input_tokens >= self.max_input_tokens:
            return False
        self.max_input_tokens = max_input_tokens
        before = self.compacted
        if self.exchanges:
            self._compact(max_input_tokens)
        return self.compacted > before

    def compact_all(self) -> bool:
        """Show every exchange but the last compacted, now: the model's context window refused the request
        (docs/protocol.md#thinking-and-stop-reasons). False when there is nothing more to compact."""
        point = len(self.exchanges) - 1
        if point <= self.compacted:
            return False
        for i in range(self.compacted, point):
            self._turns[2 + 2 * i] = self._result(i, preview_bytes=compact_bytes(self.preview_bytes))
        self.compacted = point
        self.saved_tokens = sum(whole - compacted for whole, compacted in self._sizes[:point])
        return True

    def _tokens(self, i: int) -> int:
        """Exchange `i`'s tokens as its turns show it whole."""
        return turn_tokens(self._turns[1 + 2 * i]) + turn_tokens(self._turns[2 + 2 * i])

    def _compacted_tokens(self, i: int) -> int:
        """Exchange `i`'s tokens compacted (estimated without the log before it, so the same however it is built)."""
        exchange = self.exchanges[i]
        end = self.exchanges[i + 1].log_length if i + 1 < len(self.exchanges) else len(self.log)
        result = exchange.result_turn(self.log[exchange.log_length:end], LogIndex(),
                                      preview_bytes=compact_bytes(self.preview_bytes))
        return turn_tokens(self._turns[1 + 2 * i]) + turn_tokens(result)

    def _result(self, i: int, *, preview_bytes: int | None) -> dict:
        """Exchange `i`'s result turn with that preview."""
        exchange = self.exchanges[i]
        end = self.exchanges[i + 1].log_length if i + 1 < len(self.exchanges) else len(self.log)
        index = self.index if end == len(self.log) else LogIndex(self.log[:end])
        return exchange.result_turn(self.log[exchange.log_length:end], index, preview_bytes=preview_bytes)

    def _rebuild(self) -> None:
        """The turns from the whole log and every exchange (what `tick_messages` does)."""
        self.compacted, self.saved_tokens, self._sizes = 0, 0, []
        if not self.exchanges:
            self._turns = [context_turn(self.index)]
            return
        index = LogIndex(self.log[:self.exchanges[0].log_length])
        turns = [context_turn(index)]
        for i, exchange in enumerate(self.exchanges):
            end = self.exchanges[i + 1].log_length if i + 1 < len(self.exchanges) else len(self.log)
            segment = self.log[exchange.log_length:end]
            index.extend(segment)
            turns.append(exchange.answer_turn())
            turns.append(exchange.result_turn(segment, index, preview_bytes=self.preview_bytes))
        self._turns = turns


__all__ = ["Transcript"]

"""An agent job's conversation, grown tick by tick instead of rebuilt from the whole log each time.

The conversation is append-only (SPEC §13): request *n* repeats request *n - 1* and adds the answer it got and a
turn for what the log gained since. :func:`~agentq.protocol.conversation.tick_messages` builds it from the whole
log and every exchange, which costs more with every tick; a :class:`Transcript` keeps the turns, the log and its
index, and takes only what is new, so a tick's cost no longer grows with the conversation. It gives exactly the
turns ``tick_messages`` gives for the same log and exchanges (a test holds the two together), and builds them
again from what it holds when what it is given does not continue what it built (a request tried again after the
log grew, say).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentq.protocol.conversation import Exchange, context_turn, result_turn, solution_turn
from agentq.protocol.views import LogIndex


class Transcript:
    """The turns of an agent job's next request, for its log and exchanges so far (`grow` adds to both)."""

    def __init__(self, job: Any = None, *, preview_bytes: int | None = None) -> None:
        self.job = job  # what tells this job from another of the same id (its creation time)
        self.preview_bytes = preview_bytes  # the job's `options.context.result_preview_bytes`
        self.log: list[dict] = []
        self.exchanges: list[Exchange] = []
        self.index = LogIndex()  # the whole log
        self._turns: list[dict] = []
        self._built = (0, 0)  # (messages, exchanges) the turns were built for

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
            self._turns.append(solution_turn(self.exchanges[i].tool_use_id, self.exchanges[i].solution))
            self._add_result(i)
        return True

    def _add_result(self, i: int) -> None:
        """The result turn of exchange `i`, for the log up to the next exchange's request (or the whole log)."""
        exchange = self.exchanges[i]
        end = self.exchanges[i + 1].log_length if i + 1 < len(self.exchanges) else len(self.log)
        segment = self.log[exchange.log_length:end]
        index = self.index if end == len(self.log) else LogIndex(self.log[:end])
        self._turns.append(result_turn(exchange.tool_use_id, segment, index, problems=exchange.problems,
                                       preview_bytes=self.preview_bytes))

    def _rebuild(self) -> None:
        """The turns from the whole log and every exchange (what `tick_messages` does)."""
        if not self.exchanges:
            self._turns = [context_turn(self.index)]
            return
        index = LogIndex(self.log[:self.exchanges[0].log_length])
        turns = [context_turn(index)]
        for i, exchange in enumerate(self.exchanges):
            end = self.exchanges[i + 1].log_length if i + 1 < len(self.exchanges) else len(self.log)
            segment = self.log[exchange.log_length:end]
            index.extend(segment)
            turns.append(solution_turn(exchange.tool_use_id, exchange.solution))
            turns.append(result_turn(exchange.tool_use_id, segment, index, problems=exchange.problems,
                                     preview_bytes=self.preview_bytes))
        self._turns = turns


__all__ = ["Transcript"]

"""The end of an agent tick (`TickEnding`, a base of `agent.py`'s `AgentLoop`): its exchange, usage and final output
kept by `end_tick`, what front ends are told of it (thinking summaries, `tick.finished`, the final output as text),
and the job's next step when no call is open. A tick whose lease lapsed while the model answered keeps nothing
and is made again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from agentq.engine.caches import Transcripts
from agentq.engine.progress import JobProgress
from agentq.engine.solutions import answer_text, solution_part, structural_error
from agentq.errors import Problem
from agentq.llm.base import LLMAnswer
from agentq.protocol.conversation import Exchange
from agentq.protocol.envelopes import Envelope, Part, Thinking, TickFinished
from agentq.protocol.events import error_part, text_part, thinking_part
from agentq.protocol.records import JobInfo
from agentq.protocol.usage import saved_counters
from agentq.store.contracts import TickStore
from agentq.store.replies import TickEnded

log = logging.getLogger("agentq.agent")


SUPERSEDED_RETRY_S = 0.5
"""The wait before a tick whose lease lapsed during its request tries again."""


@dataclass(frozen=True)
class TickAnswer:
    """A request the model answered, and what its end needs to know of the tick."""

    answer: LLMAnswer
    corrective: bool
    log_length: int
    tick_no: int
    model: str
    saved: int = 0


class TickEnding:
    """Ends the ticks of an `AgentLoop`."""

    store: TickStore
    progress: JobProgress
    transcripts: Transcripts
    source: str

    def _end(self, job_id: str, token: str, info: JobInfo, ended: TickAnswer, problems: list[Problem], *,
             written: int, truncated: bool = False) -> float | None:
        """Keep the tick's exchange, usage and final output (an invalid answer is sent back once; a second one
        becomes structural errors in the log; a cut one asks for the rest); the job's next step follows when no
        call is open.

        A tick whose lease lapsed meanwhile (its renewals late: a paused process, an overloaded store) keeps
        nothing: the request is made again (returns the wait before it), unless another attempt took it over,
        which the next try finds."""
        answer, tick_no, model = ended.answer, ended.tick_no, ended.model
        solution = answer.solution
        output = None if problems or truncated else solution_part(solution, "output")
        has_output = output is not None
        resend = (bool(problems) and not ended.corrective) or truncated  # sent back once; a cut one continues
        calls = solution_part(solution, "calls")
        structural = [] if resend else [structural_error(p, calls, info) for p in problems]
        exchange = Exchange(ended.log_length, answer.tool_use_id, solution, tuple(problems) if resend else (),
                            blocks=answer.blocks, text=answer.text if not answer.tool_use_id else "",
                            truncated=truncated)
        events = self._end_events(job_id, info, ended, problems, resend=resend, written=written, output=output)
        result = self.store.end_tick(job_id, token=token, exchange=exchange.to_dict(), counts=not resend,
                                     output=output, has_output=has_output,
                                     usage={**answer.usage.counters(model), **saved_counters(model, ended.saved)},
                                     messages=structural, events=events)
        return self._ended(job_id, tick_no, result, has_output)

    def _end_events(self, job_id: str, info: JobInfo, ended: TickAnswer, problems: list[Problem], *, resend: bool,
                    written: int, output: Any) -> list[Envelope]:
        """What a tick's end tells front ends: the model's thinking (its summaries), `tick.finished`, the final
        output as text."""
        answer = ended.answer
        events: list[Envelope] = [Thinking(job_id=job_id, tick=ended.tick_no, part=thinking_part(
            summary, source=self.source, locale=info.locale)) for summary in answer.thinking]
        events.append(TickFinished(
            job_id=job_id, tick=ended.tick_no, calls=written, problems=[p.to_dict() for p in problems],
            usage=answer.usage.to_dict(), output=output is not None,
            part=self._problems_part(problems, resend, info)))
        if output is not None:  # the answer, as the text a front end shows last (seed 004's final text part)
            events.append(Part(job_id=job_id, part=text_part(answer_text(output))))
        return events

    def _ended(self, job_id: str, tick_no: int, result: TickEnded | None, has_output: bool) -> float | None:
        """After `end_tick`: the job's next step when no call is open (on the job as `end_tick` left it, when its
        reply brought it); a wait when the tick had lost its lease."""
        if result is None:
            log.warning("tick %d of job %s lost its lease while the model answered; the request is made again",
                        tick_no, job_id)
            return SUPERSEDED_RETRY_S
        if has_output:
            self.transcripts.forget(job_id)  # nothing more is asked
        if result.open_calls <= 0:
            self.progress.advance(job_id, result.info, finish=result.finish)
        return None

    def _problems_part(self, problems: list[Problem], resend: bool, info: JobInfo) -> dict[str, Any] | None:
        """What `tick.finished` shows of an invalid solution (nothing for a valid one)."""
        if not problems:
            return None
        return error_part(f"{len(problems)} problem(s) in the model's solution" + (": sent back" if resend else ""),
                          source=self.source, locale=info.locale)


__all__ = ["SUPERSEDED_RETRY_S", "TickAnswer", "TickEnding"]

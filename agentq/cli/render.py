"""The live view of `agentq run` and `agentq demo`: one readable line per event, then the job's summary."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, ClassVar

from agentq.protocol.envelopes import (
    CallAwaitingApproval,
    CallFinished,
    CallRetrying,
    CallStarted,
    CallWaiting,
    Envelope,
    JobQueued,
    Part,
    Thinking,
    Thought,
    TickFinished,
    TickStarted,
    parse_envelope,
)


class LiveView:
    """A readable live view of a job's events: one line per call start/finish, thoughts, job end. A module's child
    job relays its events into its parent's stream: their lines carry the name of the call that runs the module,
    `[composeSong]`, so the ticks and calls of jobs that run side by side are told apart."""

    ICONS: ClassVar[dict[str, str]] = {"done": "✓", "failed": "✗", "canceled": "⊘", "skipped": "-"}
    TEXT_PARTS = frozenset({"text_output_stream", "text_output"})

    def __init__(self, out: Callable[[str], None] | None = None):
        self.out = out or (lambda line: print(line, flush=True))
        self.job_id = ""
        self.started = time.monotonic()
        self.names: dict[str, str] = {}
        self.labels: dict[str, str] = {}  # a module's child job -> how its lines are marked
        self.final_output_due = False  # an agent's final output comes as a text part after its tick.finished

    # one case per envelope the live view shows
    def show(self, envelope: dict[str, Any]) -> None:
        """One line for a stored envelope (those this version does not know, and job starts and ends, show
        none: the summary tells the end)."""
        try:
            event = parse_envelope(envelope)
        except (KeyError, TypeError):
            return
        label = self._job_label(event.job_id)
        if label:
            out = self.out
            self.out = lambda line: out(_labelled(line, label))
            try:
                self._show(event)
            finally:
                self.out = out
        else:
            self._show(event)

    def _job_label(self, job_id: str) -> str:
        """How lines of a module's child job are marked: the tool of the call that runs it (a child job's id is
        `<that call's id>.module`), numbered from the second call of one tool (`designSound 2`); "" for the job
        itself."""
        if not job_id or not self.job_id or job_id == self.job_id:
            return ""
        if job_id not in self.labels:
            base = self.names.get(job_id.removesuffix(".module"), job_id)
            taken = set(self.labels.values())
            self.labels[job_id] = next(label for n in range(1, len(taken) + 2)
                                       if (label := base if n == 1 else f"{base} {n}") not in taken)
        return self.labels[job_id]

    def _show(self, event: Envelope) -> None:
        name = self._call_name(event)
        match event:
            case JobQueued():
                self.out(f"job {event.job_id} queued ({_queued_what(event)})")
            case TickStarted():
                self._tick_started(event)
            case TickFinished():
                self._tick_finished(event)
            case CallStarted() | CallAwaitingApproval() | CallRetrying() | CallWaiting():
                self._call_moved(event, name)
            case CallFinished():
                self._call_finished(event, name)
            case Thought() | Thinking():
                self.out(_thought_line(event))
            case Part(part=part):
                self.show_part(part or {})

    def _call_moved(self, event: CallStarted | CallAwaitingApproval | CallRetrying | CallWaiting, name: str) -> None:
        """A call started, is held for a reviewer, waits for its next attempt, or waits on the world."""
        match event:
            case CallStarted(attempt=attempt):
                self.out(f"  ▶ {name:<22} running" + (f" (attempt {attempt})" if attempt > 1 else ""))
            case CallAwaitingApproval(call_id=call_id):
                self.out(f"  ✋ {name:<22} awaiting approval — agentq approve|reject {event.job_id} {call_id}")
            case CallRetrying(error=error):
                self.out(f"  ↻ {name:<22} retry in {event.retry_in_s:.2f} s — "
                         f"{error.get('type')}: {error.get('message')}")
            case CallWaiting(awaits=awaits, until=until):
                what = {"event": f"event {awaits.get('event')}", "signal": f"signal {awaits.get('signal')}"}.get(
                    str(awaits.get("kind")), "its time")
                self.out(f"  ⏸ {name:<22} waiting for {what}" + (f" until {until}" if until else ""))

    def _call_name(self, event: Envelope) -> str:
        """How the event's call is shown (`tool [instance]`, remembered from the first event naming it)."""
        call_id = getattr(event, "call_id", None) or ""
        if not call_id:
            return ""
        tool, instance = getattr(event, "tool", None), getattr(event, "instance", None)
        if call_id not in self.names and (tool or instance):
            name = str(tool or call_id)
            self.names[call_id] = f"{name} [{instance}]" if instance else name
        return self.names.get(call_id, tool or call_id)

    def _tick_started(self, event: TickStarted) -> None:
        note = " (correction)" if event.corrective else ""
        note += f" (attempt {event.attempt})" if event.attempt > 1 else ""
        self.out(f"  ◆ tick {event.tick}: asking the model{note}")

    def _tick_finished(self, event: TickFinished) -> None:
        said = [f"{event.calls} call(s)"]
        if event.problems:
            said.append(f"{len(event.problems)} problem(s)")
        if event.output:
            said.append("the final output")
            self.final_output_due = True
        self.out(f"  ◆ tick {event.tick}: the model answered: {', '.join(said)}")

    def _call_finished(self, event: CallFinished, name: str) -> None:
        status = event.status
        line = f"  {self.ICONS.get(status, '?')} {name:<22} {status:<8} {format_duration(event.duration_ms):>10}"
        if event.error:
            line += f"  {event.error.get('type')}: {event.error.get('message')}"
            if event.absorbed:
                line += "  (handled by its || branch)"
        self.out(line)

    def show_part(self, part: dict) -> None:
        if part.get("type") in self.TEXT_PARTS:
            if self.final_output_due:  # the agent's final output: the summary shows it as the job's result
                self.final_output_due = False
                return
            self.out(f"  💬 {part.get('text')}")
            return
        self.out(f"  · {part.get('activity_type', part.get('type'))}: {part.get('content') or part.get('text')}")

    def summary(self, record: dict) -> None:
        elapsed = time.monotonic() - self.started
        self.out(f"job {record['id']} {record['status']} in {elapsed:.2f} s")
        if record.get("error"):
            self.out(f"error: {record['error'].get('type')}: {record['error'].get('message')}")
        state = record.get("state")
        if state in (None, {}):
            self.out("no state")
        else:
            self._block("state", state)
        if record.get("instances"):
            self._block("instances", record["instances"])
        if record.get("result") is not None and record.get("result") != state:  # an agent's final output
            self._block("result", record["result"])
        line = usage_line(record.get("usage") or {})
        if line:
            self.out(line)

    def _block(self, title: str, value: object) -> None:
        self.out(f"{title}:")
        self.out(json.dumps(value, indent=2, ensure_ascii=False))


def format_duration(ms: float | None) -> str:
    """A duration as the web page writes it (`formatDuration` in api/static/common.js), so the command line and
    the page show one figure alike: 0.1 ms, 35.8 ms, 412 ms, 1.24 s, 12.5 s, 2 min 05 s, 1 h 02 min; "-" for
    none. Rounded as JavaScript's `toFixed` and `Math.round` do: from the exact value, ties upwards."""
    if ms is None or not math.isfinite(ms) or ms < 0:
        return "-"
    if ms < 1000:
        return f"{_fixed(ms, 1 if ms < 10 else 0)} ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{_fixed(seconds, 2 if seconds < 10 else 1)} s"
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{minutes} min {int(seconds % 60):02d} s"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def _fixed(value: float, places: int) -> str:
    return str(Decimal(value).quantize(Decimal(1).scaleb(-places), ROUND_HALF_UP))


def _labelled(line: str, label: str) -> str:
    """`line` with `[label]` after its indent."""
    text = line.lstrip(" ")
    return f"{line[:len(line) - len(text)]}[{label}] {text}"


def usage_line(usage: dict) -> str | None:
    """What the job's model requests used, or None when it made none: the input tokens counted whole (those the
    prompt cache wrote and read included), then the output tokens and the cost (at the price table's prices)."""
    def count(key: str) -> int:
        return int(usage.get(key) or 0)

    requests = count("requests")
    if not requests:
        return None
    written, read = count("cache_creation_input_tokens"), count("cache_read_input_tokens")
    total_in, out = count("input_tokens") + written + read, count("output_tokens")
    head = f"usage: {requests} model request{'' if requests == 1 else 's'}"
    if not total_in and not out:
        return f"{head} (no token counts were reported)"
    cache = f" ({written:,} written to the prompt cache, {read:,} read from it)" if written or read else ""
    return f"{head}, {total_in:,} input tokens{cache}, {out:,} output tokens, {cost_text(usage.get('cost_usd'))}"


def cost_text(cost: float | None) -> str:
    """A job's cost as the usage line shows it: dollars to the cent's hundredth, finer under a cent."""
    if cost is None:
        return "cost unknown (a model has no price: AGENTQ_LLM_PRICES)"
    return f"${cost:,.4f}" if cost >= 0.01 or cost == 0 else f"${cost:.6f}"


def _queued_what(event: JobQueued) -> str:
    """What a queued job is, in its `job … queued (…)` line."""
    return "agent job" if event.kind == "agent" else f"{event.calls} calls"


def _thought_line(event: Thought | Thinking) -> str:
    """A thought the model showed (`Thinking`: its extended thinking)."""
    label = "thinking: " if isinstance(event, Thinking) else ""
    return f"  💭 {label}{(event.part or {}).get('content')}"

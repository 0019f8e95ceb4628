"""The live view of `agentq run` and `agentq demo`: one readable line per event, then the job's summary."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import ClassVar


class LiveView:
    """A readable live view of a job's events: one line per call start/finish, thoughts, job end."""

    ICONS: ClassVar[dict[str, str]] = {"done": "✓", "failed": "✗", "canceled": "⊘", "skipped": "-"}
    TEXT_PARTS = frozenset({"text_output_stream", "text_output"})

    def __init__(self, out: Callable[[str], None] | None = None):
        self.out = out or (lambda line: print(line, flush=True))
        self.job_id = ""
        self.started = time.monotonic()
        self.names: dict[str, str] = {}
        self.final_output_due = False  # an agent's final output comes as a text part after its tick.finished

    def show(self, envelope: dict) -> None:
        name = self._call_name(envelope)
        render = self._RENDERERS.get(str(envelope.get("event")))
        if render is not None:
            render(self, envelope, name)

    def _call_name(self, envelope: dict) -> str:
        """How the envelope's call is shown (`tool [instance]`, remembered from the first envelope naming it)."""
        call_id = envelope.get("call_id", "")
        if call_id and call_id not in self.names and (envelope.get("tool") or envelope.get("instance")):
            instance = envelope.get("instance")
            tool = str(envelope.get("tool") or call_id)
            self.names[call_id] = f"{tool} [{instance}]" if instance else tool
        return self.names.get(call_id, envelope.get("tool") or call_id) if call_id else ""

    def _job_queued(self, envelope: dict, _name: str) -> None:
        what = "agent job" if envelope.get("kind") == "agent" else f"{envelope.get('calls', 0)} calls"
        self.out(f"job {envelope['job_id']} queued ({what})")

    def _tick_started(self, envelope: dict, _name: str) -> None:
        note = " (correction)" if envelope.get("corrective") else ""
        attempt = envelope.get("attempt", 1)
        note += f" (attempt {attempt})" if attempt > 1 else ""
        self.out(f"  ◆ tick {envelope.get('tick')}: asking the model{note}")

    def _tick_finished(self, envelope: dict, _name: str) -> None:
        said = [f"{envelope.get('calls', 0)} call(s)"]
        if envelope.get("problems"):
            said.append(f"{len(envelope['problems'])} problem(s)")
        if envelope.get("output"):
            said.append("the final output")
            self.final_output_due = True
        self.out(f"  ◆ tick {envelope.get('tick')}: the model answered: {', '.join(said)}")

    def _call_started(self, envelope: dict, name: str) -> None:
        attempt = envelope.get("attempt", 1)
        self.out(f"  ▶ {name:<22} running" + (f" (attempt {attempt})" if attempt > 1 else ""))

    def _call_retrying(self, envelope: dict, name: str) -> None:
        error = envelope.get("error") or {}
        self.out(f"  ↻ {name:<22} retry in {envelope.get('retry_in_s', 0):.2f} s — "
                 f"{error.get('type')}: {error.get('message')}")

    def _call_finished(self, envelope: dict, name: str) -> None:
        status = envelope.get("status", "")
        line = f"  {self.ICONS.get(status, '?')} {name:<22} {status:<8} {envelope.get('duration_ms', 0):8.1f} ms"
        if envelope.get("error"):
            error = envelope["error"]
            line += f"  {error.get('type')}: {error.get('message')}"
            if envelope.get("absorbed"):
                line += "  (handled by its || branch)"
        self.out(line)

    def _thought(self, envelope: dict, _name: str) -> None:
        self.out(f"  💭 {(envelope.get('part') or {}).get('content')}")

    def _part(self, envelope: dict, _name: str) -> None:
        self.show_part(envelope.get("part") or {})

    _RENDERERS: ClassVar[dict[str, Callable[[LiveView, dict, str], None]]] = {
        "job.queued": _job_queued, "tick.started": _tick_started, "tick.finished": _tick_finished,
        "call.started": _call_started, "call.retrying": _call_retrying, "call.finished": _call_finished,
        "thought": _thought, "part": _part,
    }

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


def usage_line(usage: dict) -> str | None:
    """What the job's model requests used, or None when it made none: the input tokens counted whole (those the
    prompt cache wrote and read included), then the output tokens."""
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
    return f"{head}, {total_in:,} input tokens{cache}, {out:,} output tokens"

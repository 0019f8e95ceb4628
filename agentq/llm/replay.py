"""Replay and recording: answer model requests from a file (``AGENTQ_LLM=replay:<file>``), or write such a
file from real runs (``AGENTQ_LLM_RECORD=<file>``). No network, no key: for demos and offline tests.

File format
-----------
JSON Lines (one answer per line; blank lines and lines starting with ``#`` are ignored), or one JSON array
of the same objects. Each answer::

    {"purpose": "tick",                          # "tick" (default) | "latent" | "module"
     "match": "weatherCheck",                    # optional: text (or list of texts) that must all occur in
                                                 #   the request's last user turn
     "request": "3f9a…",                         # optional: the request's fingerprint (the recorder writes it)
     "solution": {"calls": [...], "output": null},   # the solution tool's input; or instead:
     "raw": "{\\"calls\\": [",                   #   the raw JSON text, e.g. to replay an invalid answer
     "tool_use_id": "toolu_01…",                 # optional (default: derived from the fingerprint)
     "usage": {"input_tokens": 812, "output_tokens": 95, ...},   # optional (default: zeros): what the
                                                 #   request used, reported as the replayed request's usage
                                                 #   (its cache writes split by TTL in ephemeral_5m_input_tokens
                                                 #   and ephemeral_1h_input_tokens when the API reported that)
     "stop_reason": "tool_use",                  # optional
     "note": "the weather in Paris"}             # optional, ignored (the recorder writes the last turn here)

A hand-written demo file needs only ``solution`` per line, in the order the requests are made, plus
``purpose: "latent"`` for latent calls and a ``match`` (e.g. the tool's name) where several could be asked
at once.

Matching (deterministic)
------------------------
For a request, the candidates are the answers of its ``purpose`` whose ``match`` texts all occur in its last
user turn. Among them: the first unused answer whose ``request`` equals the request's fingerprint; else the
first used one with that fingerprint (the same request asked again, e.g. after a retry, gets the same
answer); else the first unused candidate in file order. Nothing left is an :class:`LLMError` naming what was
asked. The fingerprint (:func:`request_fingerprint`) hashes the purpose, system texts, messages and solution
schema (not the model), so parallel latent calls find their own answers whatever their order, in any
process. Answers are used at most once per process, except through an exact fingerprint.

On replay, ``on_call`` is still called for every complete call element, in order, as a stream would.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from itertools import chain
from pathlib import Path
from typing import Any

from agentq.errors import ConfigurationError, LLMError
from agentq.llm.base import LLM, LLMAnswer, LLMRequest, OnCall, Usage
from agentq.llm.scanner import CallReporter

_NOTE_CHARS = 240


def request_fingerprint(request: LLMRequest) -> str:
    """A stable hash of what ``request`` asks (purpose, system, messages, solution schema; not the model)."""
    canonical = json.dumps([request.purpose, list(request.system), list(request.messages), request.solution_schema],
                           sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:32]


def last_user_text(request: LLMRequest) -> str:
    """The text of the request's last user turn (text blocks and tool_result contents, joined)."""
    for turn in reversed(request.messages):
        if turn.get("role") == "user":
            return "\n".join(_texts(turn.get("content")))
    return ""


def _texts(content: Any) -> Iterable[str]:
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for block in content:
            if isinstance(block, dict):
                if isinstance(block.get("text"), str):
                    yield block["text"]
                if "content" in block:
                    yield from _texts(block["content"])


@dataclass(frozen=True)
class ReplayAnswer:
    """One answer of a replay file."""

    purpose: str
    raw: str
    match: tuple[str, ...] = ()
    request: str | None = None
    tool_use_id: str | None = None
    usage: Usage = field(default_factory=Usage)
    stop_reason: str | None = "tool_use"

    @classmethod
    def from_dict(cls, data: Any, where: str) -> ReplayAnswer:
        if not isinstance(data, dict):
            raise ConfigurationError(f"{where}: an answer must be a JSON object")
        raw = _raw_answer(data, where)
        match = data.get("match") or ()
        match = (match,) if isinstance(match, str) else tuple(str(m) for m in match)
        try:
            usage = Usage.from_dict(data.get("usage"))
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"{where}: invalid 'usage': {exc}") from exc
        return cls(purpose=str(data.get("purpose") or "tick"), raw=raw, match=match, request=data.get("request"),
                   tool_use_id=data.get("tool_use_id"), usage=usage, stop_reason=data.get("stop_reason", "tool_use"))


def _raw_answer(data: dict[str, Any], where: str) -> str:
    """The answer's text as the model would stream it: its `raw` text, or its `solution` as JSON."""
    if "raw" in data:
        if not isinstance(data["raw"], str):
            raise ConfigurationError(f"{where}: 'raw' must be a string")
        return data["raw"]
    if "solution" in data:
        return json.dumps(data["solution"], ensure_ascii=False)
    raise ConfigurationError(f"{where}: an answer needs 'solution' (or 'raw')")


def load_answers(path: str | os.PathLike[str]) -> list[ReplayAnswer]:
    """The answers of a replay file (JSON Lines or a JSON array); ``ConfigurationError`` when unreadable."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"cannot read the replay file {path}: {exc}") from exc
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except ValueError as exc:
            raise ConfigurationError(f"{path}: not valid JSON: {exc}") from exc
        return [ReplayAnswer.from_dict(item, f"{path}[{i}]") for i, item in enumerate(items)]
    answers = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            raise ConfigurationError(f"{path}:{number}: not valid JSON: {exc}") from exc
        answers.append(ReplayAnswer.from_dict(item, f"{path}:{number}"))
    return answers


class ReplayLLM:
    """An :class:`~agentq.llm.base.LLM` that answers from recorded answers (see the module docstring)."""

    def __init__(self, answers: Iterable[ReplayAnswer], *, source: str = "replay") -> None:
        self.answers = list(answers)
        self.source = source
        self._used = [False] * len(self.answers)
        self._lock = threading.Lock()

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> ReplayLLM:
        return cls(load_answers(path), source=str(path))

    def _choose(self, request: LLMRequest, fingerprint: str) -> ReplayAnswer | None:
        """The answer to give: an unused one recorded for this very request, else the first recorded for it
        (used again), else an unused one whose purpose and `match` texts fit."""
        candidates, exact = self._candidates(request, fingerprint)
        with self._lock:
            preferred = chain((i for i in exact if not self._used[i]), exact[:1],
                              (i for i in candidates if not self._used[i]))
            chosen = next(preferred, None)
            if chosen is None:
                return None
            self._used[chosen] = True
        return self.answers[chosen]

    def _candidates(self, request: LLMRequest, fingerprint: str) -> tuple[list[int], list[int]]:
        """The answers (by position) whose purpose and `match` texts fit the request, and those of them recorded
        for this very request (`fingerprint`)."""
        text = last_user_text(request)
        candidates = [i for i, a in enumerate(self.answers)
                      if a.purpose == request.purpose and all(m in text for m in a.match)]
        return candidates, [i for i in candidates if self.answers[i].request == fingerprint]

    def solve(self, request: LLMRequest, *, on_call: OnCall | None = None) -> LLMAnswer:
        fingerprint = request_fingerprint(request)
        answer = self._choose(request, fingerprint)
        if answer is None:
            asked = " ".join(last_user_text(request).split())[:200]
            raise LLMError(f"{self.source} has no answer left for this {request.purpose} request "
                           f"(fingerprint {fingerprint}); it asked: {asked!r}")
        reporter = CallReporter(on_call)
        reporter.feed(answer.raw)
        try:
            solution = json.loads(answer.raw)
        except ValueError:
            solution = None
        return LLMAnswer(solution=solution, raw=answer.raw,
                         tool_use_id=answer.tool_use_id or f"toolu_replay_{fingerprint[:20]}",
                         usage=replace(answer.usage, requests=1), stop_reason=answer.stop_reason)


class RecordingLLM:
    """Wraps a provider and appends each exchange it answers to a replay file (JSON Lines)."""

    def __init__(self, inner: LLM, path: str | os.PathLike[str]) -> None:
        self.inner = inner
        self.path = Path(path)
        self._lock = threading.Lock()

    def solve(self, request: LLMRequest, *, on_call: OnCall | None = None) -> LLMAnswer:
        answer = self.inner.solve(request, on_call=on_call)
        self.record(request, answer)
        return answer

    def record(self, request: LLMRequest, answer: LLMAnswer) -> None:
        entry: dict[str, Any] = {"purpose": request.purpose, "request": request_fingerprint(request)}
        if answer.solution is not None:
            entry["solution"] = answer.solution
        else:
            entry["raw"] = answer.raw
        entry.update(tool_use_id=answer.tool_use_id, usage=answer.usage.recorded(), stop_reason=answer.stop_reason,
                     note=" ".join(last_user_text(request).split())[:_NOTE_CHARS])
        line = json.dumps(entry, ensure_ascii=False) + "\n"
        try:
            with self._lock:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with open(self.path, "a", encoding="utf-8") as handle:  # one write per line: appends stay whole
                    handle.write(line)
        except OSError as exc:
            raise LLMError(f"cannot write the LLM record file {self.path}: {exc}") from exc


def answers_as_lines(answers: Iterable[Mapping[str, Any]]) -> str:
    """JSON Lines text of answer objects (a helper for writing demo files)."""
    return "".join(json.dumps(dict(a), ensure_ascii=False) + "\n" for a in answers)


__all__ = ["RecordingLLM", "ReplayAnswer", "ReplayLLM", "answers_as_lines", "last_user_text", "load_answers",
           "request_fingerprint"]

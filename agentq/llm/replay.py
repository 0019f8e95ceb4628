"""Replay and recording: answer model requests from a file (``AGENTQ_LLM=replay:<file>``), or write such a
file from real runs (``AGENTQ_LLM_RECORD=<file>``). No network, no key: for demos and offline tests.

File format
-----------
JSON Lines (one answer per line; blank lines and lines starting with ``#`` are ignored), or one JSON array
of the same objects; ``replay:<folder>`` reads every ``*.jsonl`` file of a folder as one. Each answer::

    {"purpose": "tick",                          # "tick" (default) | "latent" | "module"
     "key": "3f9a…",                             # the request it answers (`replay_keys.request_key`; the
                                                 #   recorder writes it)
     "match": "weatherCheck",                    # or, hand-written: text (or list of texts) that must all
                                                 #   occur in the request's last user turn
     "solution": {"calls": [...], "output": null},   # the solution tool's input; or instead:
     "raw": "{\\"calls\\": [",                   #   the raw JSON text, e.g. to replay an invalid answer
     "tool_use_id": "toolu_01…",                 # optional (default: derived from the key)
     "usage": {"input_tokens": 812, "output_tokens": 95, ...},   # optional (default: zeros): what the
                                                 #   request used, reported as the replayed request's usage
                                                 #   (its cache writes split by TTL in ephemeral_5m_input_tokens
                                                 #   and ephemeral_1h_input_tokens when the API reported that)
     "stop_reason": "tool_use",                  # optional
     "note": "the weather in Paris"}             # optional, ignored (the recorder writes the last turn here)

Matching: by what a request asks, never by order
------------------------------------------------
A request gets the answer recorded under its key (the first in the file when several are); an answer with a key
answers that request only (its ``match`` is then a note). A file recorded before keys existed carries ``request``
(the request's exact fingerprint) instead, matched exactly too. Answers
with neither are hand-written: such an answer fits a request of its purpose when all of its ``match`` texts
occur in the request's last user turn, and of the answers that fit, the one with the most ``match`` texts
answers (an answer without ``match`` fits every request of its purpose: a file of one answer per purpose needs
none). Two that fit equally are ambiguous. Nothing fitting, or an ambiguity, is :class:`ReplayUnmatched`,
naming the file and what was asked: the job fails rather than get another request's answer.

Nothing is used up: the same request gets the same answer in every run, in any number of runs at once, in any
process. On replay, ``on_call`` is still called for every complete call element, in order, as a stream would.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from agentq.errors import ConfigurationError, LLMError, ReplayUnmatched
from agentq.llm.base import LLM, LLMAnswer, LLMRequest, OnCall, Usage
from agentq.llm.replay_keys import request_fingerprint, request_key
from agentq.llm.scanner import CallReporter

_NOTE_CHARS = 240
PURPOSES = ("tick", "latent", "module")


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
    """One answer of a replay file; `where` names its line (``file:line``)."""

    purpose: str
    raw: str
    match: tuple[str, ...] = ()
    key: str | None = None
    request: str | None = None  # the exact fingerprint older recordings carry
    tool_use_id: str | None = None
    usage: Usage = field(default_factory=Usage)
    stop_reason: str | None = "tool_use"
    where: str = ""

    @property
    def keyed(self) -> bool:
        return self.key is not None or self.request is not None

    @classmethod
    def from_dict(cls, data: Any, where: str) -> ReplayAnswer:
        """The answer in `data`; `ConfigurationError` listing every problem of it (`where`: its line)."""
        problems = answer_problems(data)
        if problems:
            raise ConfigurationError("; ".join(f"{where} {p}" for p in problems))
        match = data.get("match") or ()
        usage = Usage.from_dict(data.get("usage"))
        return cls(purpose=data.get("purpose") or "tick", raw=_raw_answer(data), where=where,
                   match=(match,) if isinstance(match, str) else tuple(match), key=data.get("key"),
                   request=data.get("request"), tool_use_id=data.get("tool_use_id"), usage=usage,
                   stop_reason=data.get("stop_reason", "tool_use"))


def answer_problems(data: Any) -> list[str]:
    """Every problem of one answer object, each as ``/field: what``; [] when it is a valid answer."""
    if not isinstance(data, dict):
        return [f"/: an answer must be a JSON object, got {type(data).__name__}"]
    needs = [] if "raw" in data or "solution" in data else ["/: an answer needs 'solution' (or 'raw')"]
    return needs + _field_problems(data)


def _field_problems(data: dict[str, Any]) -> list[str]:
    """The problems of an answer's fields, each checked when it is there."""
    problems = [f"/{name}: {what}" for name, (fits, what) in _ANSWER_FIELDS.items()
                if data.get(name) is not None and not fits(data[name])]
    if "raw" in data and data["raw"] is None:
        problems.append("/raw: must be a string")
    if data.get("purpose") is not None and data["purpose"] not in PURPOSES:
        problems.append(f"/purpose: must be one of {', '.join(PURPOSES)}, got {data['purpose']!r}")
    return problems


def _text_or_texts(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, list) and all(isinstance(m, str) for m in value))


def _token_counts(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                                           for v in value.values())


def _string(value: Any) -> bool:
    return isinstance(value, str)


# an answer's optional fields: how a value that is there must look, and what the problem says otherwise
_ANSWER_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "raw": (_string, "must be a string"),
    "match": (_text_or_texts, "must be a text or a list of texts"),
    "key": (_string, "must be a string"),
    "request": (_string, "must be a string"),
    "tool_use_id": (_string, "must be a string"),
    "stop_reason": (_string, "must be a string"),
    "usage": (_token_counts, "must be an object of token counts (non-negative integers)"),
}


def _raw_answer(data: dict[str, Any]) -> str:
    """The answer's text as the model would stream it: its `raw` text, or its `solution` as JSON."""
    return data["raw"] if "raw" in data else json.dumps(data["solution"], ensure_ascii=False)


def load_answers(path: str | os.PathLike[str]) -> list[ReplayAnswer]:
    """The answers of a replay file (JSON Lines or a JSON array), or of every ``*.jsonl`` file of a folder; one
    ``ConfigurationError`` naming every problem (file and line) when any is unreadable or invalid."""
    path = Path(path)
    files = sorted(path.glob("*.jsonl")) if path.is_dir() else [path]
    if not files:
        raise ConfigurationError(f"the replay folder {path} holds no *.jsonl file")
    answers: list[ReplayAnswer] = []
    problems: list[str] = []
    for file in files:
        answers.extend(_load_file(file, problems))
    if problems:
        raise ConfigurationError(f"the replay file {path} cannot be used: " + "; ".join(problems))
    if not answers:
        raise ConfigurationError(f"the replay file {path} holds no answer")
    return answers


def _load_file(path: Path, problems: list[str]) -> list[ReplayAnswer]:
    """The valid answers of one file; the problems of the others (and of lines that are not JSON) added to
    `problems`."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"cannot read the replay file {path}: {exc}") from exc
    items = _json_array(path, text, problems) if text.lstrip().startswith("[") else _json_lines(path, text, problems)
    answers = []
    for where, item in items:
        found = answer_problems(item)
        problems.extend(f"{where} {p}" for p in found)
        if not found:
            answers.append(ReplayAnswer.from_dict(item, where))
    return answers


def _json_array(path: Path, text: str, problems: list[str]) -> list[tuple[str, Any]]:
    try:
        return [(f"{path}[{i}]", item) for i, item in enumerate(json.loads(text))]
    except ValueError as exc:
        problems.append(f"{path}: not valid JSON ({exc})")
        return []


def _json_lines(path: Path, text: str, problems: list[str]) -> list[tuple[str, Any]]:
    """Each line's value with where it is (blank lines and `#` comments skipped)."""
    items = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            items.append((f"{path}:{number}", json.loads(line)))
        except ValueError as exc:
            problems.append(f"{path}:{number}: not valid JSON ({exc})")
    return items


class ReplayLLM:
    """An :class:`~agentq.llm.base.LLM` that answers from recorded answers (see the module docstring). Stateless
    once loaded: any number of threads and runs share it."""

    def __init__(self, answers: Iterable[ReplayAnswer], *, source: str = "replay") -> None:
        self.answers = list(answers)
        self.source = source
        self._by_key: dict[str, ReplayAnswer] = {}
        self._by_fingerprint: dict[str, ReplayAnswer] = {}
        for answer in self.answers:
            if answer.key is not None:
                self._by_key.setdefault(answer.key, answer)
            if answer.request is not None:
                self._by_fingerprint.setdefault(answer.request, answer)
        self._hand_written = [a for a in self.answers if not a.keyed]

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> ReplayLLM:
        return cls(load_answers(path), source=str(path))

    def answer_for(self, request: LLMRequest) -> tuple[ReplayAnswer, str]:
        """The answer to `request` and the request's key; `ReplayUnmatched` when none fits, or several equally."""
        key = request_key(request)
        found = self._by_key.get(key)
        if found is None and self._by_fingerprint:
            found = self._by_fingerprint.get(request_fingerprint(request))
        if found is not None:
            return found, key
        text = last_user_text(request)
        chosen = self._hand_written_for(request.purpose, text)
        if len(chosen) == 1:
            return chosen[0], key
        raise ReplayUnmatched(self._unmatched(request, key, text, chosen))

    def _hand_written_for(self, purpose: str, text: str) -> list[ReplayAnswer]:
        """The hand-written answers of `purpose` whose `match` texts are all in `text`, the most specific ones
        (most texts matched); more than one is a tie."""
        fitting = [a for a in self._hand_written if a.purpose == purpose and all(m in text for m in a.match)]
        best = max((len(a.match) for a in fitting), default=-1)
        return [a for a in fitting if len(a.match) == best]

    def _unmatched(self, request: LLMRequest, key: str, text: str, tied: list[ReplayAnswer]) -> str:
        asked = " ".join(text.split())[:200]
        if tied:
            why = f"{len(tied)} hand-written answers fit it equally ({', '.join(a.where for a in tied[:4])})"
        else:
            held = sum(1 for a in self.answers if a.purpose == request.purpose)
            why = (f"none of its {held} {request.purpose} answer(s) was recorded for this request, nor fits it "
                   "(a request differs when the job, the tools the fleet knows or a result differs)")
        return (f"the replay {self.source} has no answer for this {request.purpose} request (key {key}): {why}; "
                f"it asked: {asked!r}. Record one with AGENTQ_LLM_RECORD=<file> and a real provider")

    def solve(self, request: LLMRequest, *, on_call: OnCall | None = None) -> LLMAnswer:
        answer, key = self.answer_for(request)
        reporter = CallReporter(on_call)
        reporter.feed(answer.raw)
        try:
            solution = json.loads(answer.raw)
        except ValueError:
            solution = None
        tool_use_id = answer.tool_use_id or f"toolu_replay_{key[:20]}"
        return LLMAnswer(solution=solution, raw=answer.raw, tool_use_id=tool_use_id,
                         usage=replace(answer.usage, requests=1), stop_reason=answer.stop_reason)


_FILE_LOCKS: dict[Path, threading.Lock] = {}
_FILE_LOCKS_LOCK = threading.Lock()


class Recorder:
    """Appends exchanges to a replay file (JSON Lines), one whole line at a time: recorders of the same file in
    one process (a provider's, the batch lane's) share a lock."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        with _FILE_LOCKS_LOCK:
            self._lock = _FILE_LOCKS.setdefault(self.path.resolve(), threading.Lock())

    def record(self, request: LLMRequest, answer: LLMAnswer) -> None:
        self.write(recorded_entry(request, answer))

    def write(self, entry: Mapping[str, Any]) -> None:
        line = json.dumps(dict(entry), ensure_ascii=False) + "\n"
        try:
            with self._lock:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with open(self.path, "a", encoding="utf-8") as handle:  # one write per line: appends stay whole
                    handle.write(line)
        except OSError as exc:
            raise LLMError(f"cannot write the LLM record file {self.path}: {exc}") from exc


class RecordingLLM(Recorder):
    """Wraps a provider and appends each exchange it answers to a replay file (JSON Lines)."""

    def __init__(self, inner: LLM, path: str | os.PathLike[str]) -> None:
        super().__init__(path)
        self.inner = inner

    def solve(self, request: LLMRequest, *, on_call: OnCall | None = None) -> LLMAnswer:
        answer = self.inner.solve(request, on_call=on_call)
        self.record(request, answer)
        return answer


def recorded_entry(request: LLMRequest, answer: LLMAnswer) -> dict[str, Any]:
    """The line a recording keeps of one exchange: everything a replay matches by and answers with."""
    entry: dict[str, Any] = {"purpose": request.purpose, "key": request_key(request)}
    if answer.solution is not None:
        entry["solution"] = answer.solution
    else:
        entry["raw"] = answer.raw
    entry.update(tool_use_id=answer.tool_use_id, usage=answer.usage.recorded(), stop_reason=answer.stop_reason,
                 note=" ".join(last_user_text(request).split())[:_NOTE_CHARS])
    return entry


def answers_as_lines(answers: Iterable[Mapping[str, Any]]) -> str:
    """JSON Lines text of answer objects (a helper for writing demo files)."""
    return "".join(json.dumps(dict(a), ensure_ascii=False) + "\n" for a in answers)


__all__ = ["Recorder", "RecordingLLM", "ReplayAnswer", "ReplayLLM", "answers_as_lines", "last_user_text",
           "load_answers", "recorded_entry", "request_fingerprint", "request_key"]

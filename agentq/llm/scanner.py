"""An incremental scanner that finds each complete element of a solution's top-level ``calls`` array.

The model streams the solution's JSON in arbitrary pieces. :class:`CallScanner` keeps only a little state
(nesting depth, inside-a-string, after-a-backslash, the current top-level key) and looks at each character
once, so the work is O(total bytes) whatever the chunking; it never re-parses the buffer. Only an element
that starts with ``{`` is captured; its text is handed out as soon as its closing brace arrives, with its
index in the array (elements of other types count for the index but are not captured).

Only the first top-level ``calls`` array is scanned; ``calls`` keys nested inside elements or other values
are not confused with it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

_OUTSIDE = re.compile(r'[{}\[\]",]')
_INSIDE = re.compile(r'["\\]')
#: by structural character: the deepest level at which it matters (deeper, it only changes the depth) and that change
_LIMIT = {"{": 2, "[": 2, "}": 3, "]": 3, ",": 2}
_NESTING = {"{": 1, "[": 1, "}": -1, "]": -1, ",": 0}

_NONE, _KEY, _ELEMENT = 0, 1, 2

_Done = list[tuple[int, str]]


class CallScanner:
    """Feed the solution's JSON text piece by piece; :meth:`feed` returns the call elements it completed."""

    def __init__(self) -> None:
        self.depth = 0
        self.in_string = False
        self.escape = False
        self.expect_key = False  # at depth 1: the next string is a key
        self.key: str | None = None  # the last top-level key
        self.in_calls = False
        self.calls_seen = False
        self.index = 0  # index of the current element of `calls` (commas seen at depth 2)
        self.capture = _NONE
        self.parts: list[str] = []
        self.element_index = 0
        self.start = 0  # where the capture (if any) starts in the chunk being fed

    # the scanner's loop over a chunk (escapes, strings, the brackets that matter), in one frame for speed
    def feed(self, chunk: str) -> list[tuple[int, str]]:
        """Scan ``chunk``; return ``(index, text)`` of every ``calls`` element that closed in it.

        Brackets and commas below the levels that matter only change the depth here; the others go to
        :data:`_SHALLOW`."""
        done: _Done = []
        pos, end = 0, len(chunk)
        self.start = 0
        while pos < end:
            if self.escape:
                self.escape = False
                pos += 1
                continue
            if self.in_string:
                match = _INSIDE.search(chunk, pos)
                if match is None:
                    break
                pos = match.end()
                if match.group() == "\\":
                    self.escape = True
                else:
                    self.in_string = False
                    if self.capture == _KEY:
                        self.parts.append(chunk[self.start:pos])
                        self._end_key()
                continue
            match = _OUTSIDE.search(chunk, pos)
            if match is None:
                break
            char, pos = match.group(), match.end()
            if char == '"':
                self.in_string = True
                if self.depth == 1 and self.expect_key:
                    self.capture, self.start, self.parts = _KEY, match.start(), []
            elif self.depth > _LIMIT[char]:
                self.depth += _NESTING[char]
            else:
                _SHALLOW[char](self, chunk, match.start(), done)
        if self.capture != _NONE:
            self.parts.append(chunk[self.start:])
        return done

    def _open(self, chunk: str, at: int, done: _Done) -> None:
        char = chunk[at]
        if self.depth == 1 and char == "[" and self._at_calls_value():
            self.in_calls = self.calls_seen = True
        elif self.depth == 2 and self.in_calls and char == "{":
            self.capture, self.start, self.parts, self.element_index = _ELEMENT, at, [], self.index
        self.depth += 1
        if self.depth == 1:
            self.expect_key = char == "{"

    def _close(self, chunk: str, at: int, done: _Done) -> None:
        self.depth -= 1
        if self.depth == 2 and self.capture == _ELEMENT:
            self.parts.append(chunk[self.start:at + 1])
            done.append((self.element_index, "".join(self.parts)))
            self.capture, self.parts = _NONE, []
        elif self.depth == 1 and self.in_calls:
            self.in_calls = False

    def _comma(self, chunk: str, at: int, done: _Done) -> None:
        if self.depth == 1:
            self.expect_key = True
        elif self.depth == 2 and self.in_calls:
            self.index += 1

    def _at_calls_value(self) -> bool:
        return not self.expect_key and self.key == "calls" and not self.calls_seen

    def _end_key(self) -> None:
        text = "".join(self.parts)
        self.capture, self.parts = _NONE, []
        self.expect_key = False
        try:
            self.key = json.loads(text)
        except ValueError:
            self.key = None


#: what a bracket or a comma does at the levels where it matters
_SHALLOW: dict[str, Callable[[CallScanner, str, int, _Done], None]] = {
    "{": CallScanner._open, "[": CallScanner._open, "}": CallScanner._close, "]": CallScanner._close,
    ",": CallScanner._comma,
}


class CallReporter:
    """A :class:`CallScanner` that parses each complete element and reports the objects to ``on_call``.

    Elements that are not valid JSON objects are reported nowhere (the final validation of the whole
    solution names them). ``text`` is everything fed so far.
    """

    def __init__(self, on_call: Callable[[int, dict], Any] | None) -> None:
        self.scanner = CallScanner()
        self.on_call = on_call
        self.chunks: list[str] = []
        self.reported: list[int] = []

    def feed(self, chunk: str) -> None:
        self.chunks.append(chunk)
        if self.on_call is None:
            return
        for index, text in self.scanner.feed(chunk):
            try:
                call = json.loads(text)
            except ValueError:
                continue
            if isinstance(call, dict):
                self.reported.append(index)
                self.on_call(index, call)

    @property
    def text(self) -> str:
        return "".join(self.chunks)


def iter_calls(chunks: Iterable[str]) -> Iterator[tuple[int, dict]]:
    """Every complete, valid object element of the top-level ``calls`` array, as ``(index, call)``."""
    scanner = CallScanner()
    for chunk in chunks:
        for index, text in scanner.feed(chunk):
            try:
                call = json.loads(text)
            except ValueError:
                continue
            if isinstance(call, dict):
                yield index, call


__all__ = ["CallReporter", "CallScanner", "iter_calls"]

"""Variable references and expressions (docs/protocol.md#references).

Grammar (whitespace is allowed around operators and at both ends)::

    expression := group ( "||" group )*          fallback: the first group that exists
    group      := ref ( "&&" ref )*              gate: all must exist; the value is the last
    ref        := "†" kind ( "." segment )*      kind: [A-Za-z_][A-Za-z0-9_-]*
                                                 segment: non-empty, no whitespace, ".", "|", "&" or "†"

A string whose trimmed form starts with `†` is a reference expression; a malformed one is an error, never a
literal. The same grammar serves output paths, where `&&` means fan-out and `||` alternative outcomes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, NoReturn

from agentq.errors import ReferenceSyntaxError
from agentq.protocol.values import pointer_join

DAGGER = "†"

_KIND = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_NOT_IN_SEGMENT = frozenset(".|&" + DAGGER)


@dataclass(frozen=True)
class Ref:
    """One reference `†kind.a.b`: a kind and a path of keys (all-digit keys index arrays)."""

    kind: str
    path: tuple[str, ...] = ()

    def __str__(self) -> str:
        return DAGGER + self.kind + "".join("." + segment for segment in self.path)


@dataclass(frozen=True)
class Expression:
    """`A && B || C`: alternatives (tried in order), each a group of references that must all exist."""

    alternatives: tuple[tuple[Ref, ...], ...]
    text: str = field(default="", compare=False)

    @property
    def refs(self) -> tuple[Ref, ...]:
        """Every reference, in order of appearance."""
        return tuple(ref for group in self.alternatives for ref in group)

    def __str__(self) -> str:
        return " || ".join(" && ".join(map(str, group)) for group in self.alternatives)


def format_ref(ref: Ref) -> str:
    """`†kind.a.b` for `ref`."""
    return str(ref)


def is_reference(value: Any) -> bool:
    """True when `value` is a string whose trimmed form starts with `†` (well-formed or not)."""
    return isinstance(value, str) and value.strip().startswith(DAGGER)


def find_references(params: Any, pointer: str = "") -> Iterator[tuple[str, str]]:
    """(JSON pointer, text) of every reference string inside `params`, in document order.

    At the top level, meta fields (keys starting with `_`, such as `_outputPath`) are literal and skipped.
    """
    stack = [(pointer, params, True)]
    while stack:
        where, value, top = stack.pop()
        if isinstance(value, dict):
            items = [(k, v) for k, v in value.items() if not (top and str(k).startswith("_"))]
        elif isinstance(value, list):
            items = list(enumerate(value))
        else:
            if is_reference(value):
                yield where, value
            continue
        stack.extend((pointer_join(where, k), v, False) for k, v in reversed(items))


def paths_overlap(a: Ref, b: Ref) -> bool:
    """Same kind and one path is a prefix of the other (equal paths included)."""
    n = min(len(a.path), len(b.path))
    return a.kind == b.kind and a.path[:n] == b.path[:n]


def parse_expression(text: str) -> Expression:
    """Parse `text` (see the module docstring); raises `ReferenceSyntaxError` saying what is wrong and where."""
    if not isinstance(text, str):
        raise ReferenceSyntaxError(f"a reference expression must be a string, got {type(text).__name__}")
    return _parse(text)


def parse_ref(text: str) -> Ref:
    """Parse a single reference (no `||` or `&&`), such as a message's `_path`."""
    expression = parse_expression(text)
    if len(expression.refs) != 1:
        raise ReferenceSyntaxError(f"expected a single reference, got the expression {text!r}")
    return expression.refs[0]


@lru_cache(maxsize=32768)  # planning parses each text of a job several times; jobs have up to 10,000 calls
def _parse(text: str) -> Expression:
    simple = _SIMPLE_REF.fullmatch(text)
    if simple is not None:  # the common case, one reference with no operator nor space: what the parser returns
        path = simple.group(2)
        return Expression(((Ref(simple.group(1), tuple(path[1:].split(".")) if path else ()),),), text)
    return _Parser(text).expression()


# every character `str.isspace` accepts lies below U+3001
_SPACES = "".join(c for c in map(chr, range(0x3001)) if c.isspace())
_SIMPLE_REF = re.compile(DAGGER + r"([A-Za-z_][A-Za-z0-9_-]*)((?:\.[^" + re.escape(_SPACES + ".|&" + DAGGER) + r"]+)*)")


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.pos = 0

    def fail(self, what: str, pos: int) -> NoReturn:
        where = f"position {pos}" + (" (the end)" if pos >= len(self.text) else "")
        raise ReferenceSyntaxError(f"malformed reference expression {self.text!r}: {what} at {where}")

    def skip_space(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def operator(self, op: str) -> bool:
        self.skip_space()
        if self.text.startswith(op, self.pos):
            self.pos += len(op)
            return True
        return False

    def expression(self) -> Expression:
        alternatives = []
        after = None
        while True:
            group = [self.ref(after)]
            while self.operator("&&"):
                group.append(self.ref("&&"))
            alternatives.append(tuple(group))
            if not self.operator("||"):
                break
            after = "||"
        self.skip_space()
        if self.pos < len(self.text):
            self.fail(f"unexpected {self.text[self.pos]!r}, expected '||', '&&' or the end", self.pos)
        return Expression(tuple(alternatives), self.text)

    def ref(self, after: str | None) -> Ref:
        self.skip_space()
        text, start = self.text, self.pos
        context = f" after {after!r}" if after else ""
        if start >= len(text):
            self.fail(f"expected a reference{context}", start)
        if text[start] != DAGGER:
            found = text[start:].split(maxsplit=1)[0]
            self.fail(f"expected a reference starting with {DAGGER}{context}, found {found!r}", start)
        kind = _KIND.match(text, start + 1)
        if kind is None:
            self.fail(f"expected a kind name (letters, digits, '_' or '-') after {DAGGER}", start + 1)
        self.pos = kind.end()
        path = self.path()
        if self.pos < len(text) and not (text[self.pos].isspace() or text[self.pos] in "|&"):
            self.fail(f"unexpected {text[self.pos]!r} in a reference", self.pos)
        return Ref(kind.group(), tuple(path))

    def path(self) -> list[str]:
        """The `.segment`s after a reference's kind."""
        text, path = self.text, []
        while self.pos < len(text) and text[self.pos] == ".":
            self.pos += 1
            begin = self.pos
            while self.pos < len(text) and not (text[self.pos].isspace() or text[self.pos] in _NOT_IN_SEGMENT):
                self.pos += 1
            if self.pos == begin:
                self.fail("empty path segment", begin)
            path.append(text[begin : self.pos])
        return path

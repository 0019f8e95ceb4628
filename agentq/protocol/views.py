"""Views of a context log and reference resolution (docs/protocol.md#messages, docs/protocol.md#references,
docs/protocol.md#instancing).

`LogIndex` groups data messages by identity `(kind, instance)` (instance `None` = global) and keeps, per
identity, the fold of its writes oldest to newest, extended incrementally as newer writes arrive. An
instance's view is the global view deep-merged with the fold of the instance's own writes.

Cost: each identity's fold is a `Fold`, built in place, so folding N writes costs O(N) (not one copy of the
whole value per write), and `lookup` walks only the path it reads. Views and resolved values share structure
with the log and the index: treat them as read-only. The index never mutates a value once it has handed it
out (a later write copies what it must), so a view or a resolved value never changes afterwards.
"""

from __future__ import annotations

import copy
import heapq
import threading
from collections.abc import Iterable, Sequence
from operator import itemgetter
from typing import Any

from agentq.errors import ReferenceSyntaxError, WriteError
from agentq.protocol.expressions import DAGGER, Expression, Ref, is_reference, parse_expression, parse_ref
from agentq.protocol.messages import looks_canonical, normalize_message
from agentq.protocol.values import MISSING, Fold, apply_write, check_apply, deep_merge, get_in, pointer_join

Identity = tuple[str, "str | None"]


def write_of(message: dict) -> tuple[tuple[str, ...], str, Any]:
    """(path, method, value) of a data message's write.

    Engine-written messages write the value found at `_path` inside their data with `_outputMethod` (default
    `set`); context messages write their data at the root with `_outputMethod` (default `merge`).
    """
    if "_path" in message:
        path = parse_ref(message["_path"]).path
        return path, message.get("_outputMethod", "set"), get_in(message["data"], path)
    return (), message.get("_outputMethod", "merge"), message["data"]


def fold_write(current: Any, message: dict) -> Any:
    """`current` after one data message's write; a write that cannot apply (e.g. a push onto a non-array) is
    skipped, since the runtime reports it as the writing call's error.

    A plain value is never mutated (the result is a copy-on-write new root). A `Fold` (an index's own fold)
    takes the write in place and is returned itself.
    """
    path, method, value = write_of(message)
    if value is MISSING:
        return current
    try:
        if isinstance(current, Fold):
            current.write(path, method, value)
            return current
        return apply_write(current, path, method, value)
    except WriteError:
        return current


class _Identity:
    """The writes of one identity and their fold, folded lazily up to the newest write (under the index's
    lock: the fold is mutated in place)."""

    __slots__ = ("count", "description", "schema", "value", "writes")

    def __init__(self) -> None:
        self.writes: list[dict] = []
        self.count = 0  # number of writes folded into `value`
        self.value = Fold()
        self.description: Any = None
        self.schema: Any = None

    def add(self, message: dict) -> None:
        self.writes.append(message)
        self.description = message.get("description", self.description)
        self.schema = message.get("schema", self.schema)

    def folded(self) -> Fold:
        end = len(self.writes)
        if self.count < end:
            value: Any = self.value
            for message in self.writes[self.count:end]:
                value = fold_write(value, message)
            self.count = end
        return self.value


class LogIndex:
    """An append-only context log indexed by identity, with cached, incrementally folded views.

    Several threads may share one index (the runtime shares a job's index between the calls a process runs):
    appends, folds and lookups are serialized by the index's lock.
    """

    def __init__(self, messages: Iterable[Any] = ()):
        self._lock = threading.RLock()
        self._messages: list[dict] = []
        self._texts: list[dict] = []
        self._errors: list[dict] = []
        self._identities: dict[Identity, _Identity] = {}
        self._instance_views: dict[Identity, tuple[tuple[int, int], Any]] = {}
        # (kind, instance) → [(log position, message)], where the kind of a text or error message is its type
        self._scoped: dict[Identity, list[tuple[int, dict]]] = {}
        self.extend(messages)

    def append(self, message: Any) -> dict:
        """Append one message (normalized unless it already looks canonical); returns the stored form."""
        with self._lock:
            if not looks_canonical(message):
                message = normalize_message(message, f"/{len(self._messages)}")
            position = len(self._messages)
            self._messages.append(message)
            instance = message.get("_instance")
            if message["type"] == "data":
                kind = message["kind"]
                self._identities.setdefault((kind, instance), _Identity()).add(message)
            else:
                kind = message["type"]
                (self._texts if kind == "text" else self._errors).append(message)
            self._scoped.setdefault((kind, instance), []).append((position, message))
            return message

    def extend(self, messages: Iterable[Any]) -> None:
        for message in messages:
            self.append(message)

    def __len__(self) -> int:
        return len(self._messages)

    @property
    def messages(self) -> list[dict]:
        """The log, oldest first (a new list; the messages themselves are shared)."""
        return list(self._messages)

    def identities(self) -> list[Identity]:
        """Every `(kind, instance)` having data messages, in order of first appearance."""
        return list(self._identities)

    def instances(self, kind: str = "state") -> list[str]:
        """Sorted instance ids having writes of `kind`."""
        return sorted(instance for k, instance in self._identities if k == kind and instance is not None)

    def fold(self, kind: str, instance: str | None = None) -> Any:
        """The fold of exactly that identity's writes, without the global fallback (`MISSING` if none)."""
        with self._lock:
            identity = self._identities.get((kind, instance))
            return identity.folded().share() if identity else MISSING

    def view(self, kind: str, instance: str | None = None) -> Any:
        """The view of `kind` for `instance` (global when `None`), or `MISSING` when nothing was written."""
        with self._lock:
            own = self._identities.get((kind, instance)) if instance is not None else None
            if own is None:
                return self.fold(kind)
            shared = self._identities.get((kind, None))
            versions = (len(shared.writes) if shared else 0, len(own.writes))
            cached = self._instance_views.get((kind, instance))
            if cached and cached[0] == versions:
                return cached[1]
            base, mine = self.fold(kind), own.folded().share()
            value = base if mine is MISSING else mine if base is MISSING else deep_merge(base, mine)
            self._instance_views[(kind, instance)] = (versions, value)
            return value

    def lookup(self, ref: Ref, instance: str | None = None) -> Any:
        """The value of one reference for `instance`, or `MISSING`; costs O(path length) (plus, for an
        instance whose view is not cached, merging the value found)."""
        with self._lock:
            own = self._identities.get((ref.kind, instance)) if instance is not None else None
            shared = self._identities.get((ref.kind, None))
            if own is None:
                return shared.folded().share(ref.path) if shared else MISSING
            if shared is None:
                return own.folded().share(ref.path)
            cached = self._instance_views.get((ref.kind, instance))
            if not ref.path or (cached and cached[0] == (len(shared.writes), len(own.writes))):
                return get_in(self.view(ref.kind, instance), ref.path)
            return _merged_lookup(shared.folded(), own.folded(), ref.path)

    def check(self, message: dict) -> None:
        """Raise the `WriteError` that folding `message` would meet (a push onto a non-array...), as
        `apply_write` would over the fold of its identity; costs O(path length) and hands nothing out."""
        if message.get("type") != "data":
            return
        path, method, value = write_of(message)
        where = message.get("_path") or DAGGER + message["kind"]
        with self._lock:
            identity = self._identities.get((message["kind"], message.get("_instance")))
            check_apply(identity.folded().peek() if identity else MISSING, path, method, value, where=where)

    def scoped(self, kinds: Iterable[str], instance: str | None = None) -> list[dict]:
        """The messages of `kinds` (data kinds, or `text` / `error`) visible to `instance` (the global ones
        plus its own, never another instance's), in log order; costs O(result), not O(log)."""
        owners = (None,) if instance is None else (None, instance)
        with self._lock:
            lists = [entries for kind in dict.fromkeys(kinds) for owner in owners
                     if (entries := self._scoped.get((kind, owner)))]
            if len(lists) == 1:
                return [message for _, message in lists[0]]
            return [message for _, message in heapq.merge(*lists, key=itemgetter(0))]

    def meta(self, kind: str, instance: str | None = None) -> dict:
        """`{"description", "schema"}` from the newest messages of that identity having them (an instance
        falls back to the global ones); `None` where no message gives one."""
        candidates = [i for i in (self._identities.get((kind, instance)), self._identities.get((kind, None))) if i]
        description = next((i.description for i in candidates if i.description is not None), None)
        schema = next((i.schema for i in candidates if i.schema is not None), None)
        return {"description": description, "schema": schema}

    def text_messages(self) -> list[dict]:
        """The text messages, oldest first."""
        return list(self._texts)

    def error_messages(self, instance: str | None = None) -> list[dict]:
        """Error messages, oldest first: all of them, or for an instance the global ones plus its own."""
        if instance is None:
            return list(self._errors)
        return self.scoped(["error"], instance)


def _merged_lookup(base: Fold, mine: Fold, path: Sequence[str]) -> Any:
    """`get_in(deep_merge(base, mine), path)` (either may be MISSING) without merging anything off the path."""
    a, b = base.peek(), mine.peek()
    for segment in path:
        if b is MISSING:
            return base.share(path)
        if a is MISSING or not (isinstance(a, dict) and isinstance(b, dict)):
            return mine.share(path)
        a, b = a.get(segment, MISSING), b.get(segment, MISSING)
    if b is MISSING:
        return base.share(path)
    if a is MISSING or not (isinstance(a, dict) and isinstance(b, dict)):
        return mine.share(path)
    return deep_merge(base.share(path), mine.share(path))


def as_index(log_or_index: LogIndex | Sequence[Any]) -> LogIndex:
    """`log_or_index` itself if it is a `LogIndex`, else a new index of that list of messages."""
    return log_or_index if isinstance(log_or_index, LogIndex) else LogIndex(log_or_index)


def resolve(log_or_index: LogIndex | Sequence[Any], expression: str | Expression, instance: str | None = None) -> Any:
    """The value of `expression` over the log for `instance`, or `MISSING`.

    `A || B`: the first alternative that exists; `A && B`: all must exist, the value is the last. `null` exists.
    """
    index = as_index(log_or_index)
    if not isinstance(expression, Expression):
        expression = parse_expression(expression)
    for group in expression.alternatives:
        value = MISSING
        for ref in group:
            value = index.lookup(ref, instance)
            if value is MISSING:
                break
        if value is not MISSING:
            return value
    return MISSING


def resolve_params(params: Any, index: LogIndex | Sequence[Any], instance: str | None = None) -> tuple[Any, list[str]]:
    """A deep copy of `params` with every reference expression replaced by its value, and the JSON pointers
    of the references that resolved to `MISSING` (those keep their text).

    Top-level meta fields (keys starting with `_`, e.g. `_outputPath`, `_scopes`) stay literal. A malformed
    reference raises `ReferenceSyntaxError` prefixed with its pointer.
    """
    index = as_index(index)
    unresolved: list[str] = []

    def walk(value: Any, pointer: str, top: bool) -> Any:
        if isinstance(value, dict):
            return {key: copy.deepcopy(item) if top and str(key).startswith("_") else
                    walk(item, pointer_join(pointer, key), False) for key, item in value.items()}
        if isinstance(value, list):
            return [walk(item, pointer_join(pointer, i), False) for i, item in enumerate(value)]
        return substitute(value, pointer) if is_reference(value) else value

    def substitute(value: str, pointer: str) -> Any:
        """A reference's value (copied), or the reference itself while it has none."""
        try:
            resolved = resolve(index, value, instance)
        except ReferenceSyntaxError as error:
            raise ReferenceSyntaxError(f"{pointer or '/'}: {error}") from None
        if resolved is MISSING:
            unresolved.append(pointer)
            return value
        return copy.deepcopy(resolved)

    return walk(params, "", True), unresolved

"""The payloads the admission step pushes, made from a template per task name and queue (`PushedMessages`).

A pushed payload (`runtime/pushed.py`) holds what kombu's Redis transport would have sent for a task: the JSON of
the task's message, LPUSHed onto its queue's list, and the JSON of its `task-sent` event's `task.multi` message,
PUBLISHed on the events channel. Building them through kombu (`CallTasks.kept`: a producer from the pool, a publish
batch, `Producer.publish` twice, the events grouped) costs more than the rest of a one-call job's submission. Per
task, only a few fields of those two messages differ: the task's headers (`publish.task_headers`), its body (the
arguments), its correlation id, reply address and delivery tag; the event's fields (`publish.sent_fields`), clock and
time, and its message's delivery tag. Everything else (the content type and encoding, the delivery mode and info,
the priority, the body's encoding, the list's key, the channel) is the same for every task of a name and queue.

So the first payloads of a name and queue are built through kombu, as before, and what they hold besides those
fields is kept as an `Envelope`; later payloads are made by filling an envelope in. An envelope is kept only when
filling it in for the task it was taken from gives that task's payload byte for byte (with its delivery tags, clock
and time); else the name and queue keep going through kombu. Envelopes are dropped with the templates they were
made from (another task registered under the name) and after a fork. The JSON is the standard library's with its
default separators, which is what kombu writes for plain JSON (its encoder's `default` only turns other values into
JSON: tasks with such arguments go through kombu).
"""

from __future__ import annotations

import base64
import json
import os
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agentq.protocol.admission import PUSHED
from agentq.runtime.publish import CallTasks, SendContext, Template, sent_fields, task_headers

Task = tuple[str, str, str, list[Any], str]  # a task's name, queue, id, arguments and argsrepr (`Dispatcher.task_of`)


@dataclass(frozen=True)
class Envelope:
    """What the pushed payload of every task of one name and queue holds besides its own fields."""

    template: Template  # the lean template the messages were made from (`CallTasks.template`)
    key: str  # the queue's list
    message: dict[str, Any]  # the task's message as kombu stores it (its own fields are replaced)
    channel: str  # the events channel ("": no `task-sent` events)
    event: dict[str, Any] | None  # the `task.multi` message of its `task-sent` event


@dataclass(frozen=True)
class _Made:
    """What a payload was made with besides its task and context: what kombu and the event dispatcher make anew
    each time."""

    delivery_tag: str
    event_tag: str
    clock: int
    timestamp: float
    utcoffset: Any


class PushedMessages:
    """The pushed payloads of tasks made from envelopes (`payloads`), learnt from payloads built through kombu
    (`learn`)."""

    def __init__(self, tasks: CallTasks, payload: Callable[[str, str, str, str], str]):
        self.tasks = tasks
        # a payload of its list, channel, joinable event message and task message (`pushed.joined_payload`)
        self._write = payload
        self._envelopes: dict[tuple[str, str, bool], Envelope | None] = {}
        self._pid = os.getpid()

    def payloads(self, tasks: Sequence[Task]) -> list[str] | None:
        """Each task's payload, made from its envelope (None: a task has none, or cannot be sent lean now)."""
        if self._pid != os.getpid():  # a fork: the envelopes name the parent process
            self._envelopes, self._pid = {}, os.getpid()
            return None
        context = self.tasks.context(traced=True)
        if not context.lean or not self.tasks.fresh():
            return None
        envelopes = [self._envelope(name, queue, context.sent_event) for name, queue, *_ in tasks]
        if any(e is None for e in envelopes):
            return None
        try:
            return [self._payload(envelope, context, task, self._now(envelope))  # type: ignore[arg-type]
                    for envelope, task in zip(envelopes, tasks, strict=True)]
        except (TypeError, ValueError):  # arguments that are not plain JSON: kombu's encoder decides what they become
            return None

    def learn(self, tasks: Sequence[Task], payloads: Sequence[str], context: SendContext) -> None:
        """Keep an envelope for the name and queue of each of `tasks` that has none yet, from its `payloads` (built
        through kombu in `context`), when it makes them again byte for byte (else none is kept for it)."""
        if not context.lean:
            return
        for task, payload in zip(tasks, payloads, strict=True):
            name, queue = task[0], task[1]
            key = (name, queue, context.sent_event)
            if key in self._envelopes:
                continue
            template = self.tasks.template(name, queue)
            envelope = _envelope(template, payload) if template is not None else None
            if envelope is not None:
                made = _made(payload)
                if made is None or self._payload(envelope, context, task, made) != payload:
                    envelope = None
            self._envelopes[key] = envelope

    def _envelope(self, name: str, queue: str, sent_event: bool) -> Envelope | None:
        envelope = self._envelopes.get((name, queue, sent_event))
        if envelope is None or envelope.template is not self.tasks.template(name, queue):
            return None  # not learnt yet, or another task registered under the name since
        return envelope

    def _now(self, envelope: Envelope) -> _Made:
        from celery.utils.time import utcoffset

        return _Made(delivery_tag=str(uuid.uuid4()), event_tag=str(uuid.uuid4()),
                     clock=self.tasks.app.clock.forward() if envelope.event is not None else 0,
                     timestamp=time.time(), utcoffset=utcoffset())

    def _payload(self, envelope: Envelope, context: SendContext, task: Task, made: _Made) -> str:
        """What `CallTasks.kept` makes of `task` (`runtime/pushed.py`'s payload), from its envelope."""
        _, _, task_id, args, argsrepr = task
        message = envelope.message.copy()
        properties = message["properties"].copy()
        properties.update(correlation_id=task_id, reply_to=context.reply_to, delivery_tag=made.delivery_tag)
        message.update(body=_encoded((args, {}, envelope.template.embed)),
                       headers=task_headers(envelope.template, context, task_id, argsrepr), properties=properties)
        if envelope.event is None:
            return self._write(envelope.key, "", "", json.dumps(message))
        evd = self.tasks.event_dispatcher()
        # as `SentEvents.publish` makes it (`celery.events.Event`: the fields, then the time and type)
        event = {"hostname": evd.hostname, "utcoffset": made.utcoffset, "pid": evd.pid, "clock": made.clock,
                 **sent_fields(envelope.template, context, task_id, argsrepr),
                 "timestamp": made.timestamp, "type": "task-sent"}
        sent_properties = envelope.event["properties"].copy()
        sent_properties["delivery_tag"] = made.event_tag
        rest = {k: sent_properties if k == "properties" else v for k, v in envelope.event.items() if k != "body"}
        return self._write(envelope.key, envelope.channel, joinable_event(event, rest), json.dumps(message))


JOINED_HEAD, JOINED_COMMA, JOINED_TAIL = "[  ", ",  ", "  ]"
"""What an event message's body holds around its event (a JSON list of it), and between two events the step
joined: three bytes each, so that each is four characters of base64 (`admission.lua` writes them so)."""


def joinable_event(event: dict[str, Any], message: dict[str, Any]) -> str:
    """The `task.multi` message of `event` made joinable, as `pushed._joinable` makes the one kombu would build for
    it (its body the JSON list of the event), without encoding that body and decoding it again."""
    return joined_message(json.dumps(event).encode("utf-8"), message)


def joined_message(event: bytes, message: dict[str, Any]) -> str:
    """A joinable `task.multi` message: its body first, the base64 of `event` (its JSON) padded with spaces to a
    multiple of three bytes between `JOINED_HEAD` and `JOINED_TAIL`, then `message`'s other fields."""
    event += b" " * (-len(event) % 3)
    text = base64.b64encode(JOINED_HEAD.encode() + event + JOINED_TAIL.encode()).decode("ascii")
    rest = json.dumps(message)
    return f'{{"body": "{text}"' + (", " + rest[1:] if rest != "{}" else "}")


def _encoded(body: Any) -> str:
    """A message's body as kombu's Redis transport stores it: JSON, in base64."""
    return base64.b64encode(json.dumps(body).encode("utf-8")).decode("ascii")


def _parts(payload: str) -> tuple[str, str, dict[str, Any] | None, dict[str, Any]] | None:
    """A pushed payload's list, channel, event message and task message (None: not a pushed payload)."""
    if not payload.startswith(PUSHED):
        return None
    key, channel, event, message = payload[len(PUSHED):].split("\n", 3)
    return key, channel, (json.loads(event) if event else None), json.loads(message)


def _envelope(template: Template, payload: str) -> Envelope | None:
    parts = _parts(payload)
    if parts is None:
        return None
    key, channel, event, message = parts
    if message.get("properties", {}).get("body_encoding") != "base64" or \
            (event is not None and event.get("properties", {}).get("body_encoding") != "base64"):
        return None
    return Envelope(template=template, key=key, message=message, channel=channel, event=event)


def _made(payload: str) -> _Made | None:
    """What kombu and the event dispatcher made anew for `payload` (None: not what an envelope makes)."""
    parts = _parts(payload)
    if parts is None:
        return None
    _, _, event, message = parts
    try:
        events = json.loads(base64.b64decode(event["body"])) if event is not None else [{}]
        fields = events[0]
        return _Made(delivery_tag=message["properties"]["delivery_tag"],
                     event_tag=event["properties"]["delivery_tag"] if event is not None else "",
                     clock=fields.get("clock", 0), timestamp=fields.get("timestamp", 0.0),
                     utcoffset=fields.get("utcoffset"))
    except (KeyError, IndexError, TypeError, ValueError):
        return None

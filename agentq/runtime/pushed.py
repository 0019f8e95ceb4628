"""Call tasks the admission step pushes to the broker itself (docs/tenants.md): `PushedTasks`.

Where the broker is the state store's own Redis (the same URL of a single Redis, agentq's Redis transport, no key
prefix), a call waiting for admission carries its whole broker message: its task is built when it asks to be
admitted, as it would be published, and kept instead of sent (`CallTasks.kept`), with its `task-sent` event. When
the admission step admits it, at once or later when an ended call gives its place back, the step pushes the message
onto the queue's list and publishes the event itself (`admission.lua`), in the same atomic step. So a worker whose
call ended gives its place to the next waiting call in one round trip, and builds and sends nothing. After the
first task of a name and queue, its payloads are made from a template of the two messages rather than through kombu
(`runtime/pushed_messages.py`).

The event is the one its builder would have published had it sent the task then (its host, pid, clock and time):
a call that waited shows monitoring when it asked to be admitted as its "sent", and when a worker received it.
The step publishes the events of the calls it admits on one channel as one `task.multi` message (up to
`EVENTS_GROUP`, store/step_constants.py, per message), as a dispatch groups its own (`SentEvents`): each event's
message is built so that the step can join them without decoding any (`_joinable`).

A payload that is pushed reads `!<queue's list>\n<event channel, or nothing>\n<event message>\n<task message>`;
the step answers `!` for it. Any other payload is `[job id, task]` (`runtime/admission.py`), published by the
process that made the step, as on any other broker.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from agentq.protocol.admission import PUSHED
from agentq.protocol.records import CallRecord
from agentq.runtime.publish import NotKept
from agentq.runtime.pushed_messages import PushedMessages, joined_message
from agentq.runtime.redis_transport import Commands
from agentq.store.connect import is_sentinel_url, scheme_of

if TYPE_CHECKING:
    from agentq.runtime.app import Dispatcher
    from agentq.settings import Settings
    from agentq.store.contracts import Connection

log = logging.getLogger("agentq.admission")


class PushedTasks:
    """Builds the payloads the admission step pushes (`payloads`)."""

    def __init__(self, dispatcher: Dispatcher):
        self.dispatcher = dispatcher
        self.messages = PushedMessages(dispatcher.tasks, joined_payload)  # payloads made from envelopes, once learnt
        self._warned = False

    def payloads(self, calls: Sequence[tuple[str, CallRecord]]) -> list[str] | None:
        """Each call's payload to push (None: they cannot be pushed, they are published as on any broker)."""
        tasks = [self.dispatcher.task_of(job_id, record) for job_id, record in calls]
        made = self.messages.payloads(tasks)
        if made is not None:
            return made
        try:
            with self.dispatcher.tasks.kept(dict.fromkeys(record.queue for _, record in calls)) as (batch, kept):
                for task in tasks:
                    batch.send(*task)
        except NotKept as error:
            self._warn(str(error))
            return None
        payloads = _payloads(kept, len(calls), events=batch.sent_event)
        if payloads is None:
            self._warn("a task was not one message on one list")  # a queue that expires, an odd name
        else:
            self.messages.learn(tasks, payloads, batch.context)
        return payloads

    def _warn(self, why: str) -> None:
        if not self._warned:
            self._warned = True
            log.warning("calls waiting for admission are published by workers, not pushed by the step: %s", why)


def _payloads(kept: list[Commands], calls: int, *, events: bool) -> list[str] | None:
    """The payloads of `calls` tasks from what building them kept: each task's LPUSH, then (with `events`) its
    event's PUBLISH (None: anything else)."""
    per_call = 2 if events else 1
    commands = [_command(publication) for publication in kept]
    expected = ["lpush", "publish"][:per_call] * calls
    if [c[0] if c else None for c in commands] != expected:
        return None
    done = cast(list[tuple[str, str, str]], commands)
    tasks, sent = done[::per_call], (done[1::2] if events else [("", "", "")] * calls)
    return [payload(key, channel, event, message)
            for (_, key, message), (_, channel, event) in zip(tasks, sent, strict=True)]


def payload(key: str, channel: str, event: str, message: str) -> str:
    """The payload that pushes `message` onto the list `key` and publishes `event` on `channel` ("": none), as
    kombu's Redis transport would have sent them. The event is made joinable (`_joinable`)."""
    return joined_payload(key, channel, _joinable(event) if event else "", message)


def joined_payload(key: str, channel: str, event: str, message: str) -> str:
    """`payload` of an event made joinable already (`PushedMessages` makes it so, `joinable_event`)."""
    return f"{PUSHED}{key}\n{channel}\n{event}\n{message}"


def _joinable(message: str) -> str:
    """The `task.multi` message of one event (kombu's envelope, its body the base64 of a JSON list of that event)
    made joinable (`pushed_messages.joined_message`): the body first in the envelope, the event padded with spaces
    to a multiple of three bytes between `JOINED_HEAD` and `JOINED_TAIL`. Each event's base64 then stands alone, and
    the step joins the events of one channel by putting their base64 one after the other, `JOINED_COMMA`'s between
    (`admission.lua`). The message still reads as it did (a list of the one event); one that is not such a message
    is left as it is (the step publishes it alone)."""
    try:
        envelope = json.loads(message)
        body = base64.b64decode(envelope.pop("body"), validate=True)
        encoding = envelope.get("properties", {}).get("body_encoding")
    except (ValueError, TypeError, AttributeError, KeyError):
        return message
    if encoding != "base64" or not (body.startswith(b"[") and body.endswith(b"]")):
        return message
    return joined_message(body[1:-1].strip(), envelope)


def _command(publication: Commands) -> tuple[str, str, str] | None:
    """A publication's one command, name, key and value (None: several, or a name with a newline)."""
    if len(publication) != 1 or len(publication[0][1]) != 2:
        return None
    name, (key, value) = publication[0]
    return None if "\n" in key else (name, key, value)


def broker_is_store(settings: Settings, app: Any, store: Connection) -> bool:
    """Whether the broker is the state store's own Redis, where the admission step can push tasks: the same URL of
    a single Redis (not a cluster, not Sentinel), no key prefix kombu would add."""
    url = settings.effective_broker_url
    if url != settings.redis_url or not store.single_server(url):
        return False
    if scheme_of(url) not in ("redis", "rediss") or is_sentinel_url(url):  # agentq's transport (`redis_transport`)
        return False
    return not (app.conf.broker_transport_options or {}).get("global_keyprefix")

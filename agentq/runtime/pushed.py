"""Call tasks the admission step pushes to the broker itself (SPEC §17): `PushedTasks`.

Where the broker is the state store's own Redis (the same URL of a single Redis, agentq's Redis transport, no key
prefix), a call waiting for admission carries its whole broker message: its task is built when it asks to be
admitted, as it would be published, and kept instead of sent (`CallTasks.kept`). When the admission step admits it,
at once or later when an ended call gives its place back, the step pushes that message onto the queue's list
itself (`admission.lua`), in the same atomic step. So a worker whose call ended gives its place back to the next
parked call in one round trip, and builds and sends nothing; only the call's `task-sent` event is published by the
process that made the step (`CallTasks.announce`), with that process's name and clock, as when it sent the task.

A payload that is pushed reads `!<queue's list>\\n<task-sent event fields (JSON), or nothing>\\n<the message>`; the
step answers `!<event fields>` for it. Any other payload is `[job id, task]` (`runtime/admission.py`), published by
the process that made the step, as on any other broker.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from agentq.protocol.admission import PUSHED
from agentq.protocol.records import CallRecord
from agentq.runtime.publish import NotKept
from agentq.runtime.redis_transport import Commands
from agentq.store.connect import is_sentinel_url, scheme_of

if TYPE_CHECKING:
    from agentq.runtime.app import Dispatcher
    from agentq.settings import Settings
    from agentq.store.base import Store

log = logging.getLogger("agentq.admission")

class PushedTasks:
    """Builds the payloads the admission step pushes (`payloads`) and announces what it pushed (`announce`)."""

    def __init__(self, dispatcher: Dispatcher):
        self.dispatcher = dispatcher
        self._warned = False

    def payloads(self, calls: Sequence[tuple[str, CallRecord]]) -> list[str] | None:
        """Each call's payload to push (None: they cannot be pushed, they are published as on any broker)."""
        tasks = self.dispatcher.tasks
        try:
            with tasks.kept(dict.fromkeys(record.queue for _, record in calls)) as (batch, commands, events):
                self.dispatcher.send(batch, calls)
        except NotKept as error:
            self._warn(str(error))
            return None
        sent: list[dict | None] = [*events.fields] or [None] * len(calls)
        messages = [_message(publication) for publication in commands]
        if len(messages) != len(calls) or len(sent) != len(calls) or None in messages:
            self._warn("a task was not one message on one list")  # a queue that expires, an odd name
            return None
        return [f"{PUSHED}{key}\n{_fields(event)}\n{message}"
                for (key, message), event in zip(cast(list[tuple[str, str]], messages), sent, strict=True)]

    def announce(self, events: Sequence[str]) -> None:
        """Publish the `task-sent` events of tasks the step pushed (its `!<fields>` answers)."""
        self.dispatcher.tasks.announce([json.loads(e) for e in events if e])

    def _warn(self, why: str) -> None:
        if not self._warned:
            self._warned = True
            log.warning("calls waiting for admission are published by workers, not pushed by the step: %s", why)


def _message(publication: Commands) -> tuple[str, str] | None:
    """The list and message of a task's one LPUSH (None: it took other commands, or a list name with a newline)."""
    if len(publication) != 1 or publication[0][0] != "lpush":
        return None
    key, message = publication[0][1]
    return None if "\n" in key else (key, message)


def _fields(event: dict | None) -> str:
    return json.dumps(event, separators=(",", ":"), default=str) if event else ""


def broker_is_store(settings: Settings, app: Any, store: Store) -> bool:
    """Whether the broker is the state store's own Redis, where the admission step can push tasks: the same URL of
    a single Redis (not a cluster, not Sentinel), no key prefix kombu would add."""
    url = settings.effective_broker_url
    if getattr(store, "cluster", True) or url != settings.redis_url or not hasattr(store, "scripts"):
        return False
    if scheme_of(url) not in ("redis", "rediss") or is_sentinel_url(url):  # agentq's transport (`redis_transport`)
        return False
    return not (app.conf.broker_transport_options or {}).get("global_keyprefix")

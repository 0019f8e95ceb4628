"""`agentq healthcheck` (docs/monitoring.md): is a worker or dispatcher of this host announcing itself?

Workers and dispatchers announce themselves every `AGENTQ_HEARTBEAT_S` (`runtime/worker.py` `Heartbeat`); an
announcement lives three beats. A host is healthy when one of its processes announced itself within the last
two beats: one missed beat is tolerated, a process that stopped beating is not, long before its announcement
expires. The heartbeat runs in the worker's main process, so a hung or dead main process fails the check.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

from agentq.protocol.records import WorkerAnnouncement
from agentq.store.base import WorkerBeat
from agentq.store.boundary import redact_url

ROLES = ("any", "worker", "dispatcher")


@dataclass(frozen=True)
class Health:
    healthy: bool
    message: str  # one line: what was found, or why the host is not healthy


def _role_of(announcement: WorkerAnnouncement | None) -> set[str]:
    roles = set()
    if announcement is not None and announcement.activities:
        roles.add("worker")
    if announcement is not None and announcement.engine:
        roles.add("dispatcher")
    return roles


def _host_of(beat: WorkerBeat) -> str:
    if beat.announcement is not None and beat.announcement.hostname:
        return beat.announcement.hostname
    return beat.worker_id.split(":", 1)[0]  # ids are `<hostname>:<pid>:<suffix>`


def assess(beats: list[WorkerBeat], *, hostname: str, role: str, heartbeat_s: float,
           now: float | None = None) -> Health:
    """The health of `hostname` from the fleet's announcements (`FleetStore.worker_beats`, the fleet part's)."""
    now = time.time() if now is None else now
    what = {"any": "worker or dispatcher", "worker": "worker", "dispatcher": "dispatcher"}[role]
    mine = [b for b in beats if _host_of(b) == hostname and _plays(b, role)]
    if not mine:
        others = sorted({_host_of(b) for b in beats})
        elsewhere = f" (announcements from: {', '.join(others)})" if others else " (none from any host)"
        return Health(False, f"no {what} of host {hostname} has announced itself{elsewhere}")
    age, interval, beat = _freshest(mine, heartbeat_s, now)
    if age <= 2 * interval:
        roles = " and ".join(sorted(_role_of(beat.announcement))) or "worker"
        return Health(True, f"ok: {roles} {beat.worker_id} announced itself {max(age, 0.0):.1f} s ago")
    return Health(False, f"stale: the last announcement of a {what} of host {hostname} ({beat.worker_id}) was "
                         f"{age:.0f} s ago, more than two heartbeats ({2 * interval:g} s)")


def _plays(beat: WorkerBeat, role: str) -> bool:
    """Whether the process plays `role` (a beat without its announcement may play any)."""
    return role == "any" or beat.announcement is None or role in _role_of(beat.announcement)


def _freshest(beats: list[WorkerBeat], heartbeat_s: float, now: float) -> tuple[float, float, WorkerBeat]:
    """The age of the last announcement, the beat interval and the beat of the process whose announcement is
    the youngest in its own beats (each announcement says its interval; `heartbeat_s` otherwise)."""
    ages = []
    for beat in beats:
        interval = (beat.announcement.heartbeat_s if beat.announcement is not None else 0.0) or heartbeat_s
        ages.append((now - (beat.expires_at - 3 * interval), interval, beat))
    return min(ages, key=lambda item: item[0] / item[1])


def check(store: Any, *, hostname: str | None = None, role: str = "any", heartbeat_s: float,
          timeout_s: float = 5.0) -> Health:
    """Read the announcements from `store` within `timeout_s` and assess this host (or `hostname`)."""
    hostname = hostname or socket.gethostname()
    found: dict[str, Any] = {}

    def read() -> None:
        try:
            found["beats"] = store.worker_beats()
        except Exception as error:
            found["error"] = error

    reader = threading.Thread(target=read, name="agentq-healthcheck", daemon=True)
    reader.start()
    reader.join(timeout_s)
    if reader.is_alive():
        return Health(False, f"Redis unreachable: the state store at {redact_url(store.url)} did not answer "
                             f"within {timeout_s:g} s")
    if "error" in found:
        return Health(False, f"Redis unreachable: {found['error']}")
    return assess(found["beats"], hostname=hostname, role=role, heartbeat_s=heartbeat_s)

"""Celery node names of `agentq worker` / `agentq dispatcher` processes, distinct without being told.

Celery tells workers apart by node name only (a RabbitMQ broker even refuses a second one). The default names
are `agentq-worker@<host>` and `agentq-dispatcher@<host>`; a process whose default name is held by a live
process takes the lowest free `agentq-worker-N@<host>` (N = 2, 3, ...), so a second worker and a dispatcher
beside a worker start without `--hostname`. A name given with `--hostname` is taken as it is, and refused
while a live process holds it.

A name is claimed in the state store (its node-name steps, `store/fleet.py`): `SET <ns>:node:<name> <holder>
NX PX <3 heartbeats>`, renewed with every
heartbeat and deleted at a clean stop. `SET NX` is atomic, so two processes starting at the same moment never
take the same name: the loser moves on to the next one. A claim whose holder is a process of this host that
no longer runs (a crash, a `kill -9`) is taken over at once with a compare-and-set, so a restarted process gets
its name back rather than the next number; a holder on another host keeps its claim until it expires. A set
of processes restarted together gets the same set of names (which process gets which of them follows the
order they start in).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import socket
from dataclasses import dataclass

from agentq.embedded.process import pid_alive
from agentq.errors import ConfigurationError
from agentq.store.contracts import NodeNameStore

log = logging.getLogger("agentq.worker")


def default_base(*, engine: bool) -> str:
    """The name part of a process's default node name: a dispatcher is one whether or not it also serves
    activities (`-m`)."""
    return "agentq-dispatcher" if engine else "agentq-worker"


def node_name(hostname: str | None, *, engine: bool) -> str:
    """The node name a process asks for: `hostname` (Celery's `%h`, `%n` and `%d` expanded; a bare host gets
    the default name part), else the default name with this machine's real hostname."""
    from celery.utils.nodenames import gethostname, host_format, nodename, nodesplit

    name, host = nodesplit(hostname or "")
    return host_format(nodename(name or default_base(engine=engine), host or gethostname()))


def is_explicit(hostname: str | None) -> bool:
    """Whether `--hostname` names the node (`name@host`), not only its host."""
    from celery.utils.nodenames import nodesplit

    return bool(hostname) and nodesplit(hostname or "")[0] is not None


def numbered(name: str, n: int) -> str:
    """`agentq-worker@h` numbered `n`: `agentq-worker-n@h` (the name itself for 1)."""
    base, _, host = name.partition("@")
    return name if n == 1 else f"{base}-{n}@{host}"


def process_started(pid: int) -> str | None:
    """When the process `pid` of this host started (clock ticks since boot, from /proc), to tell it from a
    later process that got the same pid; None where /proc does not say."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[19] if len(fields) > 19 else None  # field 22 of stat(5); the first two are cut off above


@dataclass(frozen=True)
class Holder:
    """The process holding a node name: the claim's value."""

    id: str
    hostname: str
    pid: int
    started: str | None

    @classmethod
    def this_process(cls, worker_id: str) -> Holder:
        return cls(worker_id, socket.gethostname(), os.getpid(), process_started(os.getpid()))

    @classmethod
    def parse(cls, value: str) -> Holder | None:
        try:
            data = json.loads(value)
            return cls(str(data["id"]), str(data["hostname"]), int(data["pid"]), data.get("started"))
        except (ValueError, TypeError, KeyError):
            return None

    def dumps(self) -> str:
        return json.dumps({"id": self.id, "hostname": self.hostname, "pid": self.pid, "started": self.started})

    def gone(self) -> bool:
        """Whether this holder is a process of this host that no longer runs (a claim left by a crash)."""
        if self.hostname != socket.gethostname():
            return False
        if not pid_alive(self.pid):
            return True
        return self.started is not None and process_started(self.pid) not in (None, self.started)


class NodeClaim:
    """This process's claim of its node name: renewed by `renew` (each heartbeat), dropped by `release`."""

    def __init__(self, store: NodeNameStore, name: str, holder: Holder, ttl_s: float):
        self.store, self.name, self.holder = store, name, holder
        self.ttl_ms = max(1, int(ttl_s * 1000))
        self._lost = False

    def take(self) -> Holder | None:
        """Claim the name; None when it is now ours, else the live process that holds it."""
        mine = self.holder.dumps()
        while True:
            held = self.store.claim_node_name(self.name, mine, self.ttl_ms)
            if held is None:
                return None
            other = Holder.parse(held)
            if other is not None and not other.gone():
                return other
            if self.store.swap_node_name(self.name, held, mine, self.ttl_ms):
                log.info("node name %s: took over the claim of a process that no longer runs (%s)", self.name, held)
                return None

    def renew(self) -> None:
        """Extend the claim (or make it again if it expired, e.g. during a Redis outage); warn once when another
        process holds the name now."""
        mine = self.holder.dumps()
        if self.store.swap_node_name(self.name, mine, mine, self.ttl_ms, or_absent=True):
            self._lost = False
        elif not self._lost:
            self._lost = True
            log.warning("node name %s is claimed by another process now (%s): this worker's claim expired",
                        self.name, self.store.node_name_holder(self.name))

    def release(self) -> None:
        self.store.release_node_name(self.name, self.holder.dumps())


def claim_node(store: NodeNameStore, hostname: str | None, *, engine: bool, worker_id: str, ttl_s: float) -> NodeClaim:
    """Claim this process's node name (see the module docstring): `--hostname NAME@HOST` as given, refused
    while a live process holds it; else the default name, or the lowest free numbered one."""
    holder = Holder.this_process(worker_id)
    wanted = node_name(hostname, engine=engine)
    if is_explicit(hostname):
        claim = NodeClaim(store, wanted, holder, ttl_s)
        other = claim.take()
        if other is not None:
            where = "this host" if other.hostname == holder.hostname else f"host {other.hostname}"
            raise ConfigurationError(f"a worker named {wanted} runs on {where} already (pid {other.pid}); give this "
                                     f"one its own name, e.g. --hostname {numbered(wanted, 2).split('@')[0]}@%h")
        return claim
    for n in itertools.count(1):  # every name passed over is held by a live process: this ends
        claim = NodeClaim(store, numbered(wanted, n), holder, ttl_s)
        if claim.take() is None:
            return claim
    raise AssertionError("unreachable")

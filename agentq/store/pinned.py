"""A blocking connection pool with a per-thread fast path: the first threads to use a store client keep one
connection each ("pinned"), the rest share the blocking pool.

redis-py's `BlockingConnectionPool` takes a connection out of a locked queue and puts it back around every
command (with its metrics hooks and a connect check each way); a thread that keeps its own connection skips all
that: `get_connection` hands it back at once, `release` only marks it free. What the pool guarantees stays:

- the bound: a pinned connection is one of the pool's `max_connections` (taken from the queue once), and at most
  `pinned_threads` threads pin one (`pinned_threads_for`: a quarter of the bound), so many threads (a
  dispatcher's engine pool, a program waiting on hundreds of jobs) still share the rest; a thread that ends gives
  its connection back to the queue;
- fork safety: the pool's pid check runs first, and a pool reset (in a forked child) forgets every pin, so a
  child never writes to its parent's socket;
- a clean connection: a pinned connection with unread data (a command interrupted between its request and its
  reply) is reconnected before reuse, as the pool does;
- nesting: a connection held by a pipeline, a pub/sub or a lock while the same thread runs another command is
  busy, and that command takes one from the queue;
- re-resolution: `disconnect()` (a Sentinel master that moved disconnects the idle connections) also marks the
  pinned ones stale; each is reconnected by its own thread before its next command, so it finds the new master;
- closing: `disconnect()` closes pinned connections too (they are among the pool's connections).
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import weakref
from typing import Any

PINNED_SHARE = 4  # a quarter of the pool's connections may be pinned to threads
MAX_PINNED_THREADS = 64


def pinned_threads_for(max_connections: int) -> int:
    """How many threads keep a connection of their own in a pool of `max_connections`."""
    return min(MAX_PINNED_THREADS, max_connections // PINNED_SHARE)


class _Pin:
    """A thread's own connection; given back to its pool when the thread ends (its thread-local slot is dropped)."""

    __slots__ = ("busy", "connection", "epoch", "generation", "pid", "pool")

    def __init__(self, pool: PinnedPoolMixin, connection: Any, epoch: int, generation: int):
        self.pool = weakref.ref(pool)
        self.connection = connection
        self.epoch = epoch  # the pool's reset count: a pin of an earlier one is not the pool's any more
        self.generation = generation  # the pool's disconnect count when it last connected
        self.pid = os.getpid()
        self.busy = True

    def __del__(self) -> None:
        pool = self.pool()
        if pool is not None and self.pid == os.getpid():
            with contextlib.suppress(Exception):  # at interpreter exit the pool may be half gone
                pool._unpin(self)


class PinnedPoolMixin:
    """`get_connection`/`release` with a per-thread fast path, over a `BlockingConnectionPool` (see module)."""

    pid: int
    max_connections: int

    def __init__(self, *args: Any, pinned_threads: int | None = None, **kwargs: Any):
        self._pin_lock = threading.Lock()
        self._local = threading.local()
        self._pinned = 0
        self._epoch = 0
        self._generation = 0
        super().__init__(*args, **kwargs)
        self.pinned_threads = pinned_threads_for(self.max_connections) if pinned_threads is None else pinned_threads

    @property
    def pinned(self) -> int:
        """How many threads hold a connection of their own now."""
        return self._pinned

    def reset(self) -> None:
        # at construction and in a forked child (under redis-py's fork lock): every pin is forgotten (in a child,
        # its connection is the parent's); the pins' finalizers see the epoch changed and give nothing back. A new
        # lock: a parent's thread may have held the old one when the process forked.
        self._pin_lock = threading.Lock()
        self._epoch += 1
        self._local = threading.local()
        self._pinned = 0
        super().reset()  # type: ignore[misc]

    def disconnect(self, *args: Any, **kwargs: Any) -> None:
        # redis-py 7 passes `inuse_connections`; 6.4's pools take no argument: whatever the caller gives goes on
        self._generation += 1  # pinned connections reconnect (and find a moved master) before their next command
        super().disconnect(*args, **kwargs)  # type: ignore[misc]

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        if self.pid != os.getpid():
            self._checkpid()  # type: ignore[attr-defined]
        pin: _Pin | None = getattr(self._local, "pin", None)
        if pin is None:
            return self._pin_or_share()
        if pin.busy:  # nested use on this thread (a pipeline, a pub/sub or a lock holds the pinned one)
            return super().get_connection()  # type: ignore[misc]
        pin.busy = True
        try:
            self._ready(pin)
        except BaseException:
            pin.busy = False
            raise
        return pin.connection

    def release(self, connection: Any) -> None:
        if self.pid == os.getpid():
            pin: _Pin | None = getattr(self._local, "pin", None)
            if pin is not None and pin.connection is connection:
                if _should_reconnect(connection):
                    connection.disconnect()
                pin.busy = False
                return
        super().release(connection)  # type: ignore[misc]

    def _ready(self, pin: _Pin) -> None:
        """The pinned connection connected, to the current master, with nothing unread (as the pool checks)."""
        connection = pin.connection
        if pin.generation != self._generation:
            pin.generation = self._generation
            connection.disconnect()
        if not _connected(connection):
            connection.connect()
        elif _unclean(connection):
            connection.disconnect()
            connection.connect()

    def _pin_or_share(self) -> Any:
        """A connection from the queue; this thread keeps it while fewer than `pinned_threads` threads do."""
        pinning, epoch = False, 0
        if self._pinned < self.pinned_threads:  # read without the lock: once the pins are taken, no lock at all
            with self._pin_lock:
                pinning = self._pinned < self.pinned_threads
                if pinning:
                    self._pinned += 1
                epoch = self._epoch
        try:
            connection = super().get_connection()  # type: ignore[misc]
        except BaseException:
            if pinning:
                self._unpinned(epoch)
            raise
        if pinning:
            self._local.pin = _Pin(self, connection, epoch, self._generation)  # connected (to the master) by now
        return connection

    def _unpinned(self, epoch: int) -> bool:
        with self._pin_lock:
            if epoch != self._epoch:
                return False
            self._pinned -= 1
            return True

    def _unpin(self, pin: _Pin) -> None:
        """`pin`'s thread ended: its connection goes back to the queue (unless the pool was reset since)."""
        if self._unpinned(pin.epoch):
            super().release(pin.connection)  # type: ignore[misc]


def _connected(connection: Any) -> bool:
    """Whether `connection` has a socket (redis-py 7's `is_connected`; 6.4 has no such property)."""
    connected = getattr(connection, "is_connected", None)
    return bool(connected) if connected is not None else getattr(connection, "_sock", None) is not None


def _unclean(connection: Any) -> bool:
    """A reply left unread (a command interrupted before it was read), or the server closed the connection."""
    try:
        return bool(connection.can_read())
    except Exception:  # closed by the server (redis-py raises its ConnectionError), or the socket's own error
        return True


@functools.cache
def pinned_pool(base: type) -> type:
    """`base` (a `BlockingConnectionPool`) with the per-thread fast path."""
    namespace = {"__doc__": PinnedPoolMixin.__doc__, "__module__": __name__}
    return type(f"Pinned{base.__name__}", (PinnedPoolMixin, base), namespace)


def _should_reconnect(connection: Any) -> bool:
    """Whether redis-py marked `connection` to reconnect before its next use (redis-py 7's maintenance events; 6.4's
    connections have no such mark)."""
    should = getattr(connection, "should_reconnect", None)
    return bool(should()) if should is not None else False

"""The soak's faults, on a schedule drawn from the seed: what each does, and when it began and ended.

| kind | what |
|---|---|
| `kill-worker` | `kill -9` a worker process with its pool's children; started again at once |
| `kill-child` | `kill -9` one pool child of a prefork worker (its parent starts another) |
| `kill-dispatcher` | `kill -9` a dispatcher; started again at once |
| `kill-api` | `kill -9` `agentq api`; started again at once |
| `redis-pause` | SIGSTOP the redis-server for 2-4 s, then SIGCONT |
| `redis-restart` | restart the redis-server from its append-only file (same port, same folder) |
| `model-429` / `model-529` / `model-500` | the fake Messages API answers that status for 3-6 s |
| `model-cut` | the fake Messages API cuts its streams (an `overloaded_error` event after one chunk) for 3-6 s |
| `hooks-down` | the webhook receiver's port refuses connections for 3-8 s |
| `broker-drop` | `CLIENT KILL` every Redis connection of a worker or dispatcher (broker, store); it runs on |

The first faults go through every kind once (in an order drawn from the seed), however long that takes on a slow
machine (the load runs on until they have), then kinds are drawn at random until the load's time is up; faults
never overlap, and a gap drawn from the seed separates two. `outage_scale` shortens every outage (pause,
model, receiver) alike: the suite's short form fits every kind into seconds of load.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil
import redis

from benchmarks.soaking.fleet import Fleet
from benchmarks.soaking.hooks import HookReceiver
from benchmarks.soaking.model import CUT, SoakModel

KINDS = ("kill-worker", "kill-child", "kill-dispatcher", "kill-api", "redis-pause", "redis-restart", "model-429",
         "model-529", "model-500", "model-cut", "hooks-down", "broker-drop")


@dataclass
class Fault:
    kind: str
    began: float  # unix time
    ended: float = 0.0
    detail: str = ""
    recovery_s: float | None = None  # fault end -> the next job end
    settled_s: float | None = None  # fault end -> every job open at the fault's end ended


@dataclass
class Injector:
    fleet: Fleet
    model: SoakModel
    hooks: HookReceiver
    seed: int
    gap_s: tuple[float, float] = (4.0, 10.0)
    kinds: tuple[str, ...] = KINDS
    outage_scale: float = 1.0  # the short form's outages are shorter (its whole load lasts seconds)
    faults: list[Fault] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)
    every_kind_once: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def schedule(self) -> list[str]:
        """The order of the kinds: each once first, then at random (an endless draw from the seed)."""
        rng = random.Random(self.seed)
        first = list(self.kinds)
        rng.shuffle(first)
        return first + [rng.choice(self.kinds) for _ in range(10_000)]

    def start(self, until: float) -> None:
        self.thread = threading.Thread(target=self._run, args=(until,), daemon=True, name="faults")
        self.thread.start()

    def join(self) -> None:
        self.stopping.set()
        if self.thread is not None:
            self.thread.join(60)

    def _run(self, until: float) -> None:
        rng = random.Random(self.seed + 1)
        try:
            for done, kind in enumerate(self.schedule()):
                if done == len(self.kinds):
                    self.every_kind_once.set()
                if self._sleep(rng.uniform(*self.gap_s)) or (self.every_kind_once.is_set() and time.time() >= until):
                    return
                fault = Fault(kind, time.time())
                fault.detail = self.inject(kind, rng)
                fault.ended = time.time()
                self.faults.append(fault)
        finally:
            self.every_kind_once.set()  # whatever stopped it, nobody waits on it any longer

    def _sleep(self, seconds: float) -> bool:
        return self.stopping.wait(seconds)

    def inject(self, kind: str, rng: random.Random) -> str:
        actions: dict[str, Callable[[random.Random], str]] = {
            "kill-worker": self._kill_worker, "kill-child": self._kill_child,
            "kill-dispatcher": lambda r: self._kill_role("dispatcher", r),
            "kill-api": lambda r: self._kill_role("api", r),
            "redis-pause": self._pause_redis, "redis-restart": self._restart_redis, "hooks-down": self._hooks_down,
            "broker-drop": self._drop_connections}
        if kind == "model-cut":
            return self._model_outage(CUT, rng)
        if kind.startswith("model-"):
            return self._model_outage(int(kind.removeprefix("model-")), rng)
        return actions[kind](rng)

    def _kill_worker(self, rng: random.Random) -> str:
        proc = rng.choice(self.fleet.of("worker"))
        kill = self.fleet.kill(proc)
        return f"{proc.role} pids {kill.pids}"

    def _kill_child(self, rng: random.Random) -> str:
        proc = rng.choice(self.fleet.of("worker-prefork"))
        deadline = time.monotonic() + 15  # a worker started again moments ago forks its pool when it is up
        while not (children := proc.children()) and time.monotonic() < deadline and not self.stopping.is_set():
            time.sleep(0.2)
        if not children:
            return f"{proc.role} {proc.pid} had no pool child"
        kill = self.fleet.kill(proc, child=rng.choice(children))
        return f"pool child {kill.pids} of {proc.pid}"

    def _kill_role(self, role: str, rng: random.Random) -> str:
        proc = rng.choice(self.fleet.of(role))
        kill = self.fleet.kill(proc)
        return f"{role} pids {kill.pids}"

    def _pause_redis(self, rng: random.Random) -> str:
        assert self.fleet.redis is not None and self.fleet.redis.pid is not None
        seconds = self.outage_scale * rng.uniform(2.0, 4.0)
        os.kill(self.fleet.redis.pid, signal.SIGSTOP)
        try:
            time.sleep(seconds)
        finally:
            os.kill(self.fleet.redis.pid, signal.SIGCONT)
        return f"paused {seconds:.1f} s"

    def _restart_redis(self, rng: random.Random) -> str:
        assert self.fleet.redis is not None
        began = time.monotonic()
        self.fleet.redis.restart()
        return f"down {time.monotonic() - began:.1f} s"

    def _model_outage(self, status: int, rng: random.Random) -> str:
        seconds = self.outage_scale * rng.uniform(3.0, 6.0)
        self.model.fail_for(status, seconds)
        time.sleep(seconds)
        return f"{f'answered {status}' if status != CUT else 'cut its streams'} for {seconds:.1f} s"

    def _hooks_down(self, rng: random.Random) -> str:
        seconds = self.outage_scale * rng.uniform(3.0, 8.0)
        self.hooks.down()
        try:
            time.sleep(seconds)
        finally:
            self.hooks.up()
        return f"refused connections for {seconds:.1f} s"

    def _drop_connections(self, rng: random.Random) -> str:
        """`CLIENT KILL` each connection Redis lists from one process (a worker with its pool, or a dispatcher),
        found by the local ports its sockets hold towards the redis-server; the process itself runs on. A process
        started again moments ago is waited for (up to 15 s) until it consumes (a `BRPOP` connection of its own)."""
        proc = rng.choice(self.fleet.of("worker") + self.fleet.of("dispatcher"))
        deadline = time.monotonic() + 15
        client = redis.Redis.from_url(self.fleet.url, socket_timeout=5)
        try:
            while True:
                connections = self._connections_of(proc.group(), client)
                consuming = any(c.get("cmd") == "brpop" for c in connections)
                if consuming or time.monotonic() > deadline or self.stopping.is_set():
                    break
                time.sleep(0.2)
            for connection in connections:
                client.client_kill_filter(_id=connection["id"])
        except redis.RedisError as e:  # the store restarting: nothing dropped
            return f"{proc.role} {proc.pid}: {e!r}"
        finally:
            client.close()
        commands = sorted({str(c.get("cmd")) for c in connections})
        return f"{proc.role} {proc.pid}: dropped {len(connections)} connections (last commands {commands})"

    def _connections_of(self, pids: list[int], client: redis.Redis) -> list[dict]:
        assert self.fleet.redis is not None
        local: set[int] = set()
        for pid in pids:
            with contextlib.suppress(psutil.Error):  # a pool child gone meanwhile
                local |= {c.laddr.port for c in psutil.Process(pid).net_connections(kind="tcp")
                          if c.raddr and c.raddr.port == self.fleet.redis.port and c.status == "ESTABLISHED"}
        return [c for c in client.client_list() if int(c["addr"].rsplit(":", 1)[1]) in local]

"""Worker bootstrap: import activity modules, announce them, consume exactly their queues.

`load_modules()` imports the activity modules and returns the registries they filled; the caller hands those
to its `Runtime` (the worker never reads a module-level registry itself).

`serve()` runs a Celery worker in the foreground (the `agentq worker` / `agentq dispatcher` commands);
`InProcessWorker` runs one in a thread (embedded mode and tests). Both keep a heartbeat announcement in
the store so submitters know which activities are live and on which queues.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentq.engine.concurrency import sweep_keys
from agentq.errors import ConfigurationError
from agentq.protocol.activities import Activity, ActivityRegistry
from agentq.protocol.records import WorkerAnnouncement
from agentq.protocol.tools import Tool, ToolRegistry
from agentq.runtime.broker import refuse_cluster_broker
from agentq.runtime.interpreter import engine_gc
from agentq.runtime.messages import events_consumer
from agentq.runtime.nodes import NodeClaim, claim_node
from agentq.runtime.pool_choice import pool_of, processes_of, switch_interval
from agentq.runtime.root import Runtime
from agentq.runtime.schedule_loop import ScheduleLoop
from agentq.runtime.timers import TimerLoop
from agentq.runtime.tool_files import load_tool_dir
from agentq.settings import Settings

if TYPE_CHECKING:
    from agentq.webhooks.loop import WebhookLoop

log = logging.getLogger("agentq.worker")

DEFAULT_MODULES = ("workers",)


def import_modules(modules: Iterable[str]) -> list[Path]:
    """Import modules that register activities (on the default registries) and return the tool folders
    they declare: a module may set `TOOLS_DIR` to a folder of tool JSON files (one tool per file)."""
    tool_dirs: list[Path] = []
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ImportError as error:
            raise ConfigurationError(f"cannot import module {name!r}: {error}") from error
        directory = getattr(module, "TOOLS_DIR", None)
        if directory is not None and Path(directory) not in tool_dirs:
            tool_dirs.append(Path(directory))
    return tool_dirs


def load_tool_dirs(tools: ToolRegistry, dirs: Iterable[Path | str]) -> None:
    """Load every tool JSON file of each folder; a folder that does not exist is an error, not a no-op."""
    for directory in dirs:
        for name in load_tool_dir(tools, directory, replace=True):
            log.debug("loaded tool %s from %s", name, directory)


@dataclass(frozen=True)
class Registries:
    """The activities a worker serves and the tools it knows, handed to its `Runtime`."""

    activities: ActivityRegistry
    tools: ToolRegistry


def load_modules(settings: Settings, *, modules: Iterable[str] = (), tool_dirs: Iterable[Path | str] = (),
                 activities: ActivityRegistry | None = None, tools: ToolRegistry | None = None) -> Registries:
    """Import `modules` and load the tool folders they declare, `AGENTQ_TOOLS_DIRS` and `tool_dirs`; returns
    the registries they filled. Modules register on the default `Activity` and `Tool` (what scripts and the
    examples use), so those are the registries returned unless others are given."""
    module_tool_dirs = import_modules(modules)
    registries = Registries(activities=activities if activities is not None else Activity,
                            tools=tools if tools is not None else Tool)
    load_tool_dirs(registries.tools, [*module_tool_dirs, *settings.tools_dirs, *tool_dirs])
    return registries


class Heartbeat:
    """Announces this worker (its activities, queues and tools) every `interval_s` until stopped, and renews
    the claim of its node name (`nodes.py`), which it drops when stopped."""

    def __init__(self, runtime: Runtime, *, queues: list[str], engine: bool, worker_id: str | None = None,
                 node: NodeClaim | None = None, concurrency: int = 0, processes: int = 0):
        self.runtime = runtime
        self.interval_s = runtime.settings.heartbeat_s
        self.worker_id = worker_id or new_worker_id()
        self.node = node
        self.announcement = WorkerAnnouncement(
            id=self.worker_id, hostname=socket.gethostname(), pid=os.getpid(), heartbeat_s=self.interval_s,
            queues=tuple(queues), engine=engine, started_at=time.time(),
            activities=tuple(runtime.routing.announcement(spec) for spec in runtime.activities.specs()),
            tools=tuple(sorted(runtime.tools.names)), node=node.name if node is not None else None,
            concurrency=concurrency, processes=processes,
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # a dispatcher also runs the batch lane's round (sends due batches, polls open ones: engine/batch.py)
        self.batch_lane = runtime.batch_poller() if engine else None
        self.sweeps = engine  # a dispatcher also starts jobs a lost release left waiting for their concurrency keys
        # a dispatcher also fires the schedules while it holds their lease (runtime/schedule_loop.py)
        self.schedules = ScheduleLoop(runtime.parts.schedules) if engine else None
        # a dispatcher also fires the waits whose timer is due (runtime/timers.py)
        self.timers = TimerLoop(runtime.store, runtime.executor.waits, interval_s=runtime.settings.timer_poll_s,
                                jobs=runtime.service) if engine else None

    def start(self) -> Heartbeat:
        if self.runtime.dispatcher.signer is not None:
            self.runtime.dispatcher.signer.prime()
        self.runtime.parts.config.load()  # seeds the fleet's unset shared settings from this process's environment
        conflicts = self.runtime.parts.fleet.publish_tools(self.runtime.tools.snapshot(), publisher=self.worker_id)
        for name in conflicts:
            log.warning("tool %r was published with a different schema by another process; see `agentq tools`", name)
        self.beat()
        self._thread = threading.Thread(target=self._run, name="agentq-heartbeat", daemon=True)
        self._thread.start()
        if self.batch_lane is not None:
            self.batch_lane.start()
        if self.schedules is not None:
            self.schedules.start()
        if self.timers is not None:
            self.timers.start()
        return self

    def beat(self) -> None:
        self.runtime.parts.fleet.announce_worker(self.worker_id, self.announcement, ttl_s=self.interval_s * 3)
        if self.node is not None:
            self.node.renew()
        self.runtime.dispatcher.sweep(self.worker_id)  # admitted calls lost with their process (one per fleet)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.beat()
                if self.sweeps:
                    sweep_keys(self.runtime.store, self.runtime.dispatcher, self.runtime.executor.progress)
            except Exception:
                log.warning("heartbeat failed; retrying", exc_info=True)

    def stop(self) -> None:
        self._stop.set()
        if self.batch_lane is not None:
            self.batch_lane.stop()
        if self.schedules is not None:
            self.schedules.stop()
        if self.timers is not None:
            self.timers.stop()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            self.runtime.parts.fleet.retire_worker(self.worker_id)
            if self.node is not None:
                self.node.release()
        except Exception:
            log.debug("could not retire worker %s", self.worker_id, exc_info=True)


def start_webhooks(runtime: Runtime) -> WebhookLoop | None:
    """This process's webhook delivery loop, started (`agentq/webhooks/loop.py`): it delivers while the fleet's
    webhook allowlist (`agentq config`, read once per heartbeat) lists anything, and waits while it is empty."""
    from agentq.webhooks.loop import WebhookLoop
    from agentq.webhooks.targets import LiveAllowlist

    return WebhookLoop(runtime.store, runtime.parts.webhooks, runtime.settings, metrics=runtime.parts.metrics,
                       allowlist=LiveAllowlist(runtime.parts.config.allowlist)).start()


def new_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def worker_queues(runtime: Runtime, *, activities: bool, engine: bool) -> list[str]:
    queues: list[str] = []
    if activities:
        queues += runtime.register_activity_tasks()
    if engine:
        queues += runtime.register_engine_tasks()
    if not queues:
        raise ConfigurationError("nothing to serve: no activities are registered (import modules with -m)")
    return queues


_HUB_LOCK = threading.Lock()


class InProcessWorker:
    """A Celery worker running in a thread of this process (embedded mode, tests)."""

    def __init__(self, runtime: Runtime, *, activities: bool = True, engine: bool = True, concurrency: int = 4,
                 pool: str = "threads", hostname: str | None = None, loglevel: str = "WARNING"):
        self.runtime = runtime
        self.queues = worker_queues(runtime, activities=activities, engine=engine)
        self.heartbeat = Heartbeat(runtime, queues=self.queues, engine=engine, concurrency=concurrency,
                                   processes=processes_of(pool, concurrency))
        self.hostname = hostname or f"agentq-{uuid.uuid4().hex[:8]}@{socket.gethostname()}"
        self.concurrency, self.pool, self.loglevel = concurrency, pool, loglevel
        self._controller: Any = None
        self._thread: threading.Thread | None = None
        self.webhooks: WebhookLoop | None = None

    def start(self, timeout: float = 30.0) -> InProcessWorker:
        from celery.worker import WorkController
        from kombu.asynchronous import get_event_loop, set_event_loop

        from agentq.runtime.pool import AppThreadPool

        refuse_cluster_broker(self.runtime.settings)

        app = self.runtime.app
        app.finalize()
        ready = threading.Event()
        # Celery's Hub step takes the process-wide kombu event loop if one is set: a second in-process worker
        # would then drive the first one's hub from another thread (two threads polling and reading the same
        # sockets) and close it when it stops. Clear it while this worker is built so it gets its own hub.
        with _HUB_LOCK:
            previous = get_event_loop()
            set_event_loop(None)
            try:
                self._controller = WorkController(
                    app=app, hostname=self.hostname,
                    pool_cls=AppThreadPool if self.pool == "threads" else self.pool, concurrency=self.concurrency,
                    queues=self.queues, loglevel=self.loglevel, without_heartbeat=True, without_mingle=True,
                    without_gossip=True, ready_callback=lambda *_: ready.set(), consumer_cls=events_consumer(),
                )
            finally:
                set_event_loop(previous)
        def run() -> None:
            app.set_current()  # the consumer thread (and a solo pool) resolve tasks through this app
            self._controller.start()

        self._thread = threading.Thread(target=run, name=f"agentq-worker-{self.hostname}", daemon=True)
        self._thread.start()
        if not ready.wait(timeout):
            raise ConfigurationError(f"worker {self.hostname} did not become ready in {timeout} s")
        self.heartbeat.start()
        self.webhooks = start_webhooks(self.runtime)
        return self

    def stop(self, timeout: float = 30.0) -> None:
        self.heartbeat.stop()
        if self.webhooks is not None:
            self.webhooks.stop()
        controller, thread = self._controller, self._thread
        if controller is None:
            return
        hub = getattr(controller, "hub", None)
        if thread is not None and thread.is_alive() and hub is not None:
            # Shut down in the worker's own thread. Its consumer loop owns the broker connection and usually
            # has a BRPOP in flight; closing that connection from this thread makes two threads read one
            # socket, and the one that misses the reply waits forever. Raising WorkerShutdown inside the loop
            # is what Celery's signal handlers do (through a process-wide flag that would stop every
            # in-process worker); `call_soon` is thread-safe and wakes the loop.
            hub.call_soon(_shutdown_worker)
        else:
            controller.stop(in_sighandler=False)
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                log.warning("worker %s did not stop within %s s", self.hostname, timeout)

    def __enter__(self) -> InProcessWorker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _shutdown_worker() -> None:
    """Run by a worker's event loop: a warm shutdown of that worker, from its own thread."""
    from celery.exceptions import WorkerShutdown

    raise WorkerShutdown(0)


class ShutdownGrace:
    """Bounds a warm shutdown: once Celery's warm shutdown starts (SIGTERM, or a first SIGINT), running calls
    have `grace_s` seconds to finish; then the process asks itself for Celery's cold shutdown (SIGQUIT), which
    hands the calls still running back to the broker unacknowledged (a prefork child running one is
    terminated; the redelivered task takes the call over through its lease). Tasks this worker reserved but had
    not started go back to the broker in either case (acks late: they were never acknowledged)."""

    def __init__(self, hostname: str, grace_s: float):
        self.hostname = hostname
        self.grace_s = grace_s
        self._timer: threading.Timer | None = None

    def install(self) -> ShutdownGrace:
        from celery import signals

        signals.worker_shutting_down.connect(self._on_shutting_down, weak=False)
        return self

    def _on_shutting_down(self, sender: Any = None, how: str = "", **_: Any) -> None:
        if how != "Warm" or sender != self.hostname or self._timer is not None:
            return
        log.warning("warm shutdown: running calls have %s s to finish (AGENTQ_SHUTDOWN_GRACE_S); the rest "
                    "go back to the broker", self.grace_s)
        self._timer = threading.Timer(self.grace_s, self._hand_back)
        self._timer.daemon = True
        self._timer.start()

    def _hand_back(self) -> None:
        log.warning("shutdown grace of %s s is over: handing the calls still running back to the broker",
                    self.grace_s)
        os.kill(os.getpid(), signal.SIGQUIT)
        # the cold shutdown has given the messages back once the broker connection is closed; a thread stuck in
        # an activity (threads pool) must not keep the process alive after that
        last_resort = threading.Timer(HAND_BACK_EXIT_S, _exit_now)
        last_resort.daemon = True
        last_resort.start()


HAND_BACK_EXIT_S = 30.0


def _exit_now() -> None:
    log.error("the worker did not exit %s s after its cold shutdown; exiting now", HAND_BACK_EXIT_S)
    logging.shutdown()
    os._exit(1)


def serve(runtime: Runtime, *, activities: bool, engine: bool, concurrency: int | None = None,
          pool: str | None = None, loglevel: str = "INFO", hostname: str | None = None) -> None:
    """Run a Celery worker in the foreground until it is told to stop (SIGTERM/SIGINT: a warm shutdown bounded
    by `AGENTQ_SHUTDOWN_GRACE_S`, see `ShutdownGrace`). Its pool is `pool_of`'s."""
    from agentq.metrics import enable_multiprocess
    from agentq.runtime.pool import AppThreadPool

    refuse_cluster_broker(runtime.settings)
    pool, concurrency = pool_of(runtime.settings, engine=engine, pool=pool, concurrency=concurrency)
    if (interval := switch_interval(engine=engine, pool=pool)) is not None:
        sys.setswitchinterval(interval)
    if engine:
        runtime.prepare_llm()  # before the first tasks: they would each wait on the SDK's import
    engine_gc(engine=engine, pool=pool)  # once its code is loaded

    enable_multiprocess(runtime.settings)  # before the pool forks: its processes count into files (metrics/files.py)
    queues = worker_queues(runtime, activities=activities, engine=engine)
    worker_id = new_worker_id()
    node = claim_node(runtime.parts.fleet, hostname, engine=engine, worker_id=worker_id,
                      ttl_s=runtime.settings.heartbeat_s * 3)
    slots = concurrency or os.cpu_count() or 1  # Celery's default: one per CPU
    heartbeat = Heartbeat(runtime, queues=queues, engine=engine, worker_id=worker_id, node=node,
                          concurrency=slots, processes=processes_of(pool, slots))
    runtime.app.set_current()  # a worker process serves exactly one app
    runtime.app.set_default()
    ShutdownGrace(node.name, runtime.settings.shutdown_grace_s).install()
    webhooks: WebhookLoop | None = None
    try:
        heartbeat.start()
        webhooks = start_webhooks(runtime)
        worker = runtime.app.Worker(
            hostname=node.name, queues=queues, pool_cls=AppThreadPool if pool == "threads" else pool,
            concurrency=concurrency, loglevel=loglevel,
            without_mingle=True, without_gossip=True, consumer_cls=events_consumer(),
        )
        worker.start()
    finally:
        heartbeat.stop()
        if webhooks is not None:
            webhooks.stop()
        runtime.close()

"""A Celery thread pool bound to its worker's app.

Celery runs a task through the *current* app, which in a pool thread is the process-wide default. agentq
never sets a process-wide app (no hidden globals), so the threads of this pool make their worker's app
current for themselves. That lets several runtimes run in-process workers side by side (embedded mode,
tests) without their tasks reaching each other's executors.

A thread cannot be stopped from outside: when a cold shutdown cancels the calls still running (the end of the
shutdown grace, see `worker.ShutdownGrace`), their messages go back to the broker and their threads end with the
process; `terminate_job` is a no-op instead of Celery's NotImplementedError.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from celery.concurrency.thread import TaskPool


class AppThreadPool(TaskPool):
    executor: ThreadPoolExecutor

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.executor.shutdown(wait=False)
        self.executor = ThreadPoolExecutor(max_workers=self.limit, initializer=self.app.set_current,
                                           thread_name_prefix="agentq-task")

    def terminate_job(self, pid: Any, signal: Any = None) -> None:
        """Nothing to do: a running thread cannot be terminated (its call is handed back, see above)."""

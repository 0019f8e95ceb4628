"""The RabbitMQ the tests reach, and per-test names on it that are cleaned up afterwards.

`TEST_RABBITMQ_URL` names it (default `amqp://guest:guest@127.0.0.1:5672//`). Where none answers, the RabbitMQ
tests are skipped with that reason, unless `TEST_REQUIRE_RABBITMQ=1` (CI sets it: `.ci/run`) makes that a
failure. A RabbitMQ is shared (other test runs, other checkouts), so every test uses queue names of its own
(`AmqpNames`: `agentq-test-<random>.<name>`) and deletes its queues and exchanges when it ends.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from typing import Any

DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672//"


def rabbitmq_url() -> str:
    return os.environ.get("TEST_RABBITMQ_URL") or DEFAULT_URL


def unreachable_reason(url: str, timeout_s: float = 3.0) -> str | None:
    """None when a RabbitMQ answers at `url`, else why not."""
    from kombu import Connection

    try:
        with Connection(url, connect_timeout=timeout_s) as connection:
            connection.ensure_connection(max_retries=1, timeout=timeout_s)
    except Exception as error:
        return f"no RabbitMQ answers at {url} ({type(error).__name__}: {error})"
    return None


def rabbitmq_required() -> bool:
    return os.environ.get("TEST_REQUIRE_RABBITMQ", "").lower() in ("1", "true", "yes")


class AmqpNames:
    """Queue names private to one test, and their deletion when the test ends: its own queues (and the direct
    exchange of the same name Celery declares for each), and, if nothing uses them, the default queues
    (`agentq.activity.<name>`) its workers also consume for the activities `activity()` named."""

    def __init__(self, url: str):
        self.url = url
        self.prefix = f"agentq-test-{uuid.uuid4().hex[:10]}"
        self.queues: list[str] = []
        self.defaults: list[str] = []

    def queue(self, name: str) -> str:
        queue = f"{self.prefix}.{name}"
        self.queues.append(queue)
        return queue

    def activity(self, name: str) -> str:
        """The private queue of the activity `name` (its workers also declare `agentq.activity.<name>`)."""
        self.defaults.append(f"agentq.activity.{name}")
        return self.queue(name)

    def depth(self, queue: str) -> int | None:
        """Messages ready on `queue` (None when it does not exist)."""
        from kombu import Connection

        with Connection(self.url) as connection:
            channel: Any = connection.channel()
            try:
                return int(channel.queue_declare(queue=queue, passive=True).message_count)
            except Exception:
                return None
            finally:
                with contextlib.suppress(Exception):
                    channel.close()

    def cleanup(self) -> None:
        from kombu import Connection

        steps: list[tuple[str, str, dict[str, bool]]] = [
            (delete, name, {}) for name in self.queues for delete in ("queue_delete", "exchange_delete")]
        steps += [(delete, name, {"if_unused": True, **({"if_empty": True} if delete == "queue_delete" else {})})
                  for name in self.defaults for delete in ("queue_delete", "exchange_delete")]
        with Connection(self.url) as connection:
            for delete, name, options in steps:
                channel: Any = connection.channel()  # a refused deletion closes its channel
                try:
                    getattr(channel, delete)(name, **options)
                except Exception:
                    pass  # never declared, gone with its last consumer, or in use by another test run
                finally:
                    with contextlib.suppress(Exception):
                        channel.close()

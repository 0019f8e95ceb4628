"""Publishing call tasks: Celery's `send_task` per task against agentq's lean publisher, side by side.

Run (from the repository root)::

    python benchmarks/publish.py [--tasks 2000] [--rounds 5] [--profile]

Starts a private `redis-server` (the broker), builds the app and dispatcher a worker has (`create_app`, a
`Dispatcher` with a `TaskSigner`, task events on unless ``--no-events``, the activity's task registered with its time
limits as in a worker) and publishes ``--tasks`` call tasks of one job per round, alternating the two ways in each
round, so a change in the machine's load hits both alike:

- send_task: what the dispatcher did before `runtime/publish.py` — one `app.send_task` per task, on one
  producer, in one publish batch, the `task-sent` events grouped by `SentEvents`;
- lean: `Dispatcher.publish` (`runtime/publish.py`: each message copied from a template per task name and queue).

Both include building each task's arguments (the record's task form, its signature) and the broker's round trips
(one pipeline per 32 tasks). ``--batch 1`` publishes each task in a dispatch of its own, as a worker sends the
one call its commit released, so what a dispatch costs once counts per task. Shown: CPU and wall µs per task
(medians over the rounds) and their ratio. The queue is emptied after each round. ``--profile [cumulative]`` prints
the top of a cProfile of one round of each.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentq import telemetry
from agentq.embedded import RedisServer
from agentq.engine.routing import Routing
from agentq.engine.signing import TaskSigner
from agentq.protocol.digests import record_digest
from agentq.protocol.records import CallMode, CallRecord
from agentq.runtime.app import Dispatcher, call_argsrepr, create_app, task_id
from agentq.runtime.messages import SentEvents
from agentq.runtime.publish import declare_queues, publish_batch
from agentq.settings import Settings

TASK = "agentq.activity.noop"


def send_task_publish(dispatcher: Dispatcher, calls: list[tuple[str, CallRecord]]) -> None:
    """The dispatcher's publishing as it was: `send_task` per task (kept here as the reference)."""
    app = dispatcher.app
    with app.producer_or_acquire() as producer:
        declare_queues(app, producer, dict.fromkeys(record.queue for _, record in calls))
        sent = SentEvents(app, dispatcher.tasks.event_dispatcher(), producer)
        headers = telemetry.task_headers()
        with publish_batch(producer, len(calls) * (2 if app.conf.task_send_sent_event else 1)):
            for job_id, record in calls:
                args: list[Any] = [job_id, record.id, record.to_task()]
                if dispatcher.signer is not None:
                    args.append(dispatcher.signer.sign(job_id, record.id, record_digest(record)))
                app.send_task(record.task, args=args, argsrepr=call_argsrepr(job_id, record.id, record),
                              kwargsrepr="{}", queue=record.queue, task_id=task_id(job_id, record.id),
                              producer=producer, declare=[], event_dispatcher=sent, headers=headers)
            sent.flush()


def noop(*args: Any) -> None:
    """The activity task's body (never run here)."""


def records(n: int) -> list[tuple[str, CallRecord]]:
    return [("job_bench", CallRecord(id=f"call_{i}", index=i, call={"_tool": "noop", "i": i,
                                                                     "_outputPath": f"†state.r{i}"},
                                     tool="noop", activity="noop", mode=CallMode.EXPLICIT, awaited=True,
                                     task=TASK, queue=TASK)) for i in range(n)]


def timed(publish: Any, dispatcher: Dispatcher, calls: list[tuple[str, CallRecord]],
          batch: int) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    for start in range(0, len(calls), batch):
        publish(dispatcher, calls[start:start + batch])
    return (time.process_time() - cpu) / len(calls) * 1e6, (time.perf_counter() - wall) / len(calls) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=0, help="tasks per dispatch (default: all of a round's in one;"
                        " 1: each task alone, as a worker sends the call its commit released)")
    parser.add_argument("--no-events", action="store_true", help="task events off (AGENTQ_TASK_EVENTS=false)")
    parser.add_argument("--profile", nargs="?", const="tottime", choices=("tottime", "cumulative"),
                        help="print a cProfile of one round of each, sorted by this (default: tottime)")
    args = parser.parse_args()
    ways = {"send_task": send_task_publish, "lean": Dispatcher.publish}
    with RedisServer() as server:
        settings = Settings(redis_url=server.url, task_events=not args.no_events)
        app = create_app(settings)
        app.task(name=TASK, shared=False, soft_time_limit=60, time_limit=95, acks_late=True,
                 ignore_result=True)(noop)
        app.finalize(auto=True)  # as in a worker: `send_task` merges the registered task's options
        dispatcher = Dispatcher(app, Routing.from_settings(settings), TaskSigner(lambda: b"k" * 32))
        calls = records(args.tasks)
        batch = args.batch or args.tasks
        for publish in ways.values():  # warm up: connections, queue declared
            publish(dispatcher, calls[:50])
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
        with app.connection_for_write() as connection:
            client = connection.default_channel.client
            for n in range(args.rounds):
                for name, publish in (ways.items() if n % 2 == 0 else reversed(ways.items())):
                    results[name].append(timed(publish, dispatcher, calls, batch))
                    client.delete(TASK)
        print(f"{args.tasks} call tasks per round in dispatches of {batch}, {args.rounds} rounds, task events "
              f"{'off' if args.no_events else 'on'} (medians, µs per task)")
        cpu = {name: statistics.median(c for c, _ in rows) for name, rows in results.items()}
        wall = {name: statistics.median(w for _, w in rows) for name, rows in results.items()}
        for name in ways:
            print(f"  {name:10s} cpu {cpu[name]:7.1f}   wall {wall[name]:7.1f}")
        print(f"  lean/send_task: cpu {cpu['lean'] / cpu['send_task']:.2f}   "
              f"wall {wall['lean'] / wall['send_task']:.2f}")
        if args.profile:
            for name, publish in ways.items():
                profile = cProfile.Profile()
                profile.runcall(timed, publish, dispatcher, calls, batch)
                print(f"--- {name}")
                pstats.Stats(profile).sort_stats(args.profile).print_stats(30)


if __name__ == "__main__":
    main()

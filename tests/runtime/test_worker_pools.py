"""Which Celery pool a worker process runs (`runtime/pool_choice.py` `pool_of`): a dispatcher holds model streams on
threads, an activity worker keeps Celery's prefork pool; what the command line says wins."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from agentq.cli.parser import build_parser
from agentq.runtime.interpreter import ENGINE_GC_THRESHOLD
from agentq.runtime.pool_choice import ENGINE_SWITCH_INTERVAL_S, pool_of, processes_of, switch_interval
from agentq.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def test_a_dispatcher_runs_its_engine_tasks_on_threads_an_activity_worker_on_processes():
    settings = Settings(engine_concurrency=300)
    assert pool_of(settings, engine=True, pool=None, concurrency=None) == ("threads", 300)
    assert pool_of(Settings(), engine=True, pool=None, concurrency=None) == ("threads", 1024)
    assert pool_of(settings, engine=False, pool=None, concurrency=None) == ("prefork", None)  # one per CPU


def test_what_the_command_line_says_wins():
    settings = Settings(engine_concurrency=300)
    assert pool_of(settings, engine=True, pool="prefork", concurrency=None) == ("prefork", None)
    assert pool_of(settings, engine=True, pool=None, concurrency=40) == ("threads", 40)
    assert pool_of(settings, engine=False, pool="threads", concurrency=None) == ("threads", None)


def test_the_commands_leave_the_pool_to_pool_of_unless_told():
    parser = build_parser()
    for command in ("worker", "dispatcher"):
        args = parser.parse_args([command])
        assert args.pool is None and args.concurrency is None
    assert parser.parse_args(["dispatcher", "--pool", "prefork"]).pool == "prefork"


def test_an_engine_on_threads_hands_the_interpreter_over_less_often_than_python_s_default():
    assert ENGINE_SWITCH_INTERVAL_S > 0.005  # Python's default: a thousand stream threads would pay for it
    assert switch_interval(engine=True, pool="threads") == ENGINE_SWITCH_INTERVAL_S
    assert switch_interval(engine=True, pool="prefork") is None
    assert switch_interval(engine=False, pool="threads") is None  # activities may be CPU-bound: Python's default


def test_an_engine_on_threads_keeps_what_it_loaded_from_the_garbage_collector_and_collects_less_often():
    """In a process of its own: the collector's settings are the process's."""
    script = ("import gc, json\n"
              "from agentq.runtime.interpreter import engine_gc\n"
              "before = gc.get_threshold()\n"
              "done = [engine_gc(engine=False, pool='threads'), engine_gc(engine=True, pool='prefork')]\n"
              "untouched = (gc.get_freeze_count(), gc.get_threshold() == before)\n"
              "done.append(engine_gc(engine=True, pool='threads'))\n"
              "print(json.dumps([done, untouched, gc.get_freeze_count(), gc.get_threshold(), before]))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout
    done, untouched, frozen, threshold, before = json.loads(out)
    assert done == [False, False, True] and untouched == [0, True]
    assert frozen > 1000  # the modules it imported, out of the collector's reach
    assert threshold == [ENGINE_GC_THRESHOLD, before[1], before[2]] and before[0] < ENGINE_GC_THRESHOLD


def test_the_processes_that_run_a_workers_calls():
    """What a worker announces as `processes` (the processes that hold back places of ended calls: admission's
    give-back groups): a prefork pool's children, else its one process."""
    assert [processes_of("prefork", 4), processes_of("threads", 32), processes_of("solo", 1)] == [4, 1, 1]

"""Which Celery pool a worker process runs (`runtime/worker.py` `pool_of`): a dispatcher holds model streams on
threads, an activity worker keeps Celery's prefork pool; what the command line says wins."""

from __future__ import annotations

from agentq.cli.parser import build_parser
from agentq.runtime.worker import ENGINE_SWITCH_INTERVAL_S, pool_of, switch_interval
from agentq.settings import Settings


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

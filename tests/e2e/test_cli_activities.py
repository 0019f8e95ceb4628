"""`agentq activities [--json]` and `agentq activities forget NAME` as a user runs them: a separate process on
the session's private Redis, whose fleet announcements the test writes through the store (a worker that is
live, and one that was retired). Real worker processes drive the same commands in
tests/integration/test_known_activities.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentq.protocol.records import WorkerAnnouncement
from agentq.store.fleet import RedisFleet
from agentq.store.state import StateStore

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(60)

PAY = {"name": "pay", "task": "agentq.activity.pay", "queue": "payments", "retries": 3}
MAIL = {"name": "mail", "task": "agentq.activity.mail", "queue": "agentq.activity.mail", "retries": 0}


def agentq(*args: str, redis_url: str, timeout: float = 60) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQ_")}
    environment["AGENTQ_REDIS_URL"] = redis_url
    return subprocess.run([sys.executable, "-m", "agentq.cli", *args], cwd=ROOT, env=environment,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def store(redis_url: str) -> Iterator[StateStore]:
    """The private Redis with `pay` served by a live worker and `mail` remembered from a retired one."""
    store = StateStore(redis_url)
    RedisFleet(store).announce_worker("host:1:live", WorkerAnnouncement("host:1:live", activities=(PAY,)), ttl_s=60)
    RedisFleet(store).announce_worker("host:2:gone", WorkerAnnouncement("host:2:gone", activities=(MAIL,)), ttl_s=60)
    RedisFleet(store).retire_worker("host:2:gone")
    try:
        yield store
    finally:
        store.close()


def test_activities_prints_every_known_activity_as_a_table(store: StateStore, redis_url: str):
    shown = agentq("activities", redis_url=redis_url)
    assert shown.returncode == 0 and shown.stderr == "", shown
    header, *rows = shown.stdout.splitlines()
    assert header.split() == ["ACTIVITY", "VERSION", "LIVE", "WORKERS", "QUEUE", "LAST", "ANNOUNCED"]
    assert [row.split()[:5] for row in rows] == [["mail", "1", "no", "-", "agentq.activity.mail"],
                                                 ["pay", "1", "yes", "host:1:live", "payments"]]
    # announced just now (the command's own start-up may take a second or two on a loaded machine)
    assert all(re.search(r" UTC \([0-9] s ago\)$", row) for row in rows), rows
    assert header.index("QUEUE") == rows[0].index("agentq.activity.mail") == rows[1].index("payments")  # aligned


def test_activities_json(store: StateStore, redis_url: str):
    shown = agentq("activities", "--json", redis_url=redis_url)
    assert shown.returncode == 0 and shown.stderr == "", shown
    known = json.loads(shown.stdout)
    assert list(known) == ["mail", "pay"]
    assert (known["mail"]["live"], known["mail"]["workers"], known["mail"]["queue"]) == (
        False, [], "agentq.activity.mail")
    assert (known["pay"]["live"], known["pay"]["workers"], known["pay"]["queue"], known["pay"]["retries"]) == (
        True, ["host:1:live"], "payments", 3)
    assert all(entry["last_seen"].endswith("Z") for entry in known.values())


def test_forget_retires_a_known_activity(store: StateStore, redis_url: str):
    forgot = agentq("activities", "forget", "mail", redis_url=redis_url)
    assert (forgot.returncode, forgot.stdout, forgot.stderr) == (0, "forgot activity mail\n", ""), forgot
    assert set(RedisFleet(store).known_activities(60)) == {"pay"}
    assert "mail" not in agentq("activities", redis_url=redis_url).stdout


def test_forget_of_an_unknown_activity_is_one_line_and_a_nonzero_exit(store: StateStore, redis_url: str):
    missing = agentq("activities", "forget", "nope", redis_url=redis_url)
    assert missing.returncode == 1 and missing.stdout == "", missing
    assert missing.stderr == "agentq: error: activity 'nope' is not known (known activities: mail, pay)\n"


def test_forget_of_a_live_activity_says_that_its_workers_keep_it_known(store: StateStore, redis_url: str):
    forgot = agentq("activities", "forget", "pay", redis_url=redis_url)
    assert forgot.returncode == 0 and forgot.stdout == "forgot activity pay\n", forgot
    assert forgot.stderr.startswith("agentq: warning: activity 'pay' is still served by live workers (host:1:live)")
    assert forgot.stderr.count("\n") == 1
    assert RedisFleet(store).known_activities(60)["pay"]["live"] is True


def test_no_known_activities(redis_url: str):
    shown = agentq("activities", redis_url=redis_url)
    assert shown.returncode == 0 and shown.stdout.startswith("no known activities"), shown
    assert json.loads(agentq("activities", "--json", redis_url=redis_url).stdout) == {}


@pytest.mark.parametrize("args", [("activities",), ("activities", "forget", "pay")])
def test_an_unreachable_redis_is_one_line(args):
    done = agentq(*args, redis_url="redis://127.0.0.1:1/0")
    assert done.returncode == 1 and done.stdout == "", done
    assert done.stderr.startswith("agentq: error: ") and done.stderr.count("\n") == 1, done.stderr


@pytest.mark.parametrize("args", [("activities",), ("activities", "forget")])
def test_help_names_the_redis_rule(args):
    shown = agentq(*args, "--help", redis_url="redis://127.0.0.1:1/0")
    assert shown.returncode == 0 and "usage: agentq activities" in shown.stdout, shown
    assert "AGENTQ_REDIS_URL" in shown.stdout

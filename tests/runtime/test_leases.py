"""The lease keeper through a store outage: one line when renewals start failing, one when they go through again
(not a traceback per failed round)."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from agentq.engine.leases import LeaseKeeper
from agentq.errors import StoreUnavailableError

FAILED_ROUNDS = 6


class OutageStore:
    """A store whose first `failures` renewals fail as an unreachable store does, then go through."""

    def __init__(self, failures: int):
        self.to_fail = failures  # the next rounds that fail
        self.rounds = 0
        self.renewed = threading.Event()  # a renewal went through after the outage
        self._lock = threading.Lock()

    def fail_next(self, rounds: int) -> None:
        with self._lock:
            self.renewed.clear()
            self.to_fail = rounds

    def renew_all(self, by_job: dict[str, dict[str, str]], lease_ms: int) -> None:
        with self._lock:
            self.rounds += 1
            if self.to_fail:
                self.to_fail -= 1
                raise StoreUnavailableError("Error 111 connecting to 127.0.0.1:1. Connection refused.")
            self.renewed.set()


def _lines(caplog: pytest.LogCaptureFixture, n: int) -> list[logging.LogRecord]:
    """The keeper's log lines, once it said `n` of them (it logs right after the store's answer)."""
    deadline = time.monotonic() + 10
    while True:
        lines = [r for r in caplog.records if r.name == "agentq.leases"]
        if len(lines) >= n or time.monotonic() > deadline:
            return lines
        time.sleep(0.01)


def test_an_outage_of_many_failed_renewals_logs_one_line_and_one_when_they_go_through(
        caplog: pytest.LogCaptureFixture):
    store = OutageStore(FAILED_ROUNDS)
    keeper = LeaseKeeper(store, lease_s=0.03)  # type: ignore[arg-type]  # a round every 10 ms
    with caplog.at_level(logging.INFO, logger="agentq.leases"):
        keeper.hold("job1", "c1", "token")
        assert store.renewed.wait(10), "no renewal went through"
        _lines(caplog, 2)
        deadline = time.monotonic() + 10
        while store.rounds < FAILED_ROUNDS + 5 and time.monotonic() < deadline:  # more rounds: they say nothing
            time.sleep(0.01)
        keeper.stop()
    lines = [r for r in caplog.records if r.name == "agentq.leases"]
    assert store.rounds >= FAILED_ROUNDS + 5
    assert [r.levelno for r in lines] == [logging.WARNING, logging.WARNING], [r.getMessage() for r in lines]
    failed, back = (r.getMessage() for r in lines)
    assert "could not renew the leases of 1 job(s): StoreUnavailableError" in failed
    assert "Connection refused" in failed
    assert f"after {FAILED_ROUNDS} failed round(s)" in back
    assert all(r.exc_info is None for r in lines)  # no traceback


def test_a_second_outage_is_said_again(caplog: pytest.LogCaptureFixture):
    """The keeper says each outage once: after renewals went through, the next failure is said again."""
    store = OutageStore(2)
    keeper = LeaseKeeper(store, lease_s=0.03)  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="agentq.leases"):
        keeper.hold("job1", "c1", "token")
        assert store.renewed.wait(10)
        _lines(caplog, 2)
        store.fail_next(3)
        assert store.renewed.wait(10)
        messages = [r.getMessage() for r in _lines(caplog, 4)]
        keeper.stop()
    assert [m.split(":")[0].split(",")[0] for m in messages] == [
        "could not renew the leases of 1 job(s)", "lease renewals go through again",
        "could not renew the leases of 1 job(s)", "lease renewals go through again"], messages
    assert "after 3 failed round(s)" in messages[-1]

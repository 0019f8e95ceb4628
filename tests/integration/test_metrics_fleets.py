"""Two fleets on one machine (two private Redis servers, one user, `AGENTQ_METRICS_DIR` unset): each counts into a
default metrics folder of its own, so a scrape of one never shows the other's counters. Real `agentq worker` and
`agentq metrics` processes."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentq.client import Client
from agentq.embedded import RedisServer
from tests.integration.procs import ROOT, WorkerProcs, base_env, wait_for
from tests.integration.test_metrics import TOKEN, samples, value

pytestmark = pytest.mark.timeout(120)


class DefaultFolderMetrics:
    """`agentq metrics --port 0` of the fleet at `redis_url`, with no `AGENTQ_METRICS_DIR`: the default folder under
    `tmp` (its `TMPDIR`)."""

    def __init__(self, redis_url: str, tmp: Path, log_path: Path):
        env = base_env(redis_url, AGENTQ_METRICS_TOKEN=TOKEN, TMPDIR=str(tmp))
        with open(log_path, "wb") as log:
            self.popen = subprocess.Popen([sys.executable, "-m", "agentq.cli", "metrics", "--port", "0"], env=env,
                                          cwd=str(ROOT), stdout=subprocess.PIPE, stderr=log, text=True,
                                          start_new_session=True)
        line = self.popen.stdout.readline()  # type: ignore[union-attr]
        assert "serving http://" in line, (line, log_path.read_text())
        self.url = line.split("serving ", 1)[1].strip()

    def scrape(self) -> dict:
        import urllib.request

        request = urllib.request.Request(self.url, headers={"Authorization": f"Bearer {TOKEN}"})
        with urllib.request.urlopen(request, timeout=15) as response:
            return samples(response.read().decode())

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            self.popen.wait(10)


@pytest.fixture
def second_fleet(tmp_path: Path) -> Iterator[tuple[str, WorkerProcs]]:
    """Another private Redis server (another fleet's broker and store) and worker processes bound to it."""
    server = RedisServer().start()
    procs = WorkerProcs(server.url, tmp_path / "second")
    (tmp_path / "second").mkdir()
    try:
        yield server.url, procs
    finally:
        procs.close()
        server.stop()


def called(fleet: DefaultFolderMetrics, activity: str) -> dict:
    return wait_for(lambda: value(found := fleet.scrape(), "agentq_calls_total", activity=activity, status="done")
                    and found, 15, f"{activity}'s call to be counted")


def test_two_fleets_on_one_machine_scrape_only_their_own_counters(worker_procs: WorkerProcs, redis_url: str,
                                                                  second_fleet, tmp_path: Path):
    other_url, other_procs = second_fleet
    tmp = tmp_path / "tmp"  # both fleets' default metrics folders, as /tmp holds them on a machine
    tmp.mkdir()
    first = worker_procs.start(["procA"], TMPDIR=str(tmp))
    second = other_procs.start(["procEcho"], TMPDIR=str(tmp))
    worker_procs.wait_live(first, ["procA"])
    other_procs.wait_live(second, ["procEcho"])
    with Client(redis_url) as client:
        assert client.submit({"calls": [{"_tool": "procA", "x": 1, "_outputPath": "†state.a"}]}).result(
            timeout=30)["status"] == "succeeded"
    with Client(other_url) as client:
        assert client.submit({"calls": [{"_tool": "procEcho", "text": "hi", "_outputPath": "†state.e"}]}).result(
            timeout=30)["status"] == "succeeded"
    scrapers = [DefaultFolderMetrics(url, tmp, tmp_path / f"metrics-{n}.log")
                for n, url in enumerate((redis_url, other_url))]
    try:
        mine, theirs = called(scrapers[0], "procA"), called(scrapers[1], "procEcho")
    finally:
        for scraper in scrapers:
            scraper.stop()
    assert value(mine, "agentq_calls_total", activity="procA", status="done") == 1
    assert value(theirs, "agentq_calls_total", activity="procEcho", status="done") == 1
    assert not [labels for name, labels in mine if name == "agentq_calls_total" and ("activity", "procEcho") in labels]
    assert not [labels for name, labels in theirs if name == "agentq_calls_total" and ("activity", "procA") in labels]
    folders = sorted(p.name for p in tmp.iterdir() if p.name.startswith("agentq-metrics-"))
    assert len(folders) == 2 and all(f.startswith(f"agentq-metrics-{os.getuid()}-") for f in folders), folders

"""Unit tests of the metrics' parts: folding the files of dead processes (real child processes writing in
prometheus_client's multiprocess mode), combining families, labels, the metered LLM, and the healthcheck's
verdict on announcements."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector

from agentq import metrics
from agentq.errors import LLMError, LLMRetryableError
from agentq.llm.base import LLMAnswer, LLMRequest, Usage
from agentq.metrics import render
from agentq.protocol.records import CallMode, CallRecord, WorkerAnnouncement
from agentq.runtime import health
from agentq.store.views import WorkerBeat

ROOT = Path(__file__).resolve().parents[2]

WRITER = """
import os, sys
os.environ["PROMETHEUS_MULTIPROC_DIR"] = sys.argv[1]
from agentq.metrics import Metrics
counts = Metrics()
counts.calls.labels("a", "done", "default").inc(int(sys.argv[2]))
counts.call_duration.labels("a").observe(0.3)
from prometheus_client import Gauge
Gauge("some_gauge", "a gauge of a dead process", multiprocess_mode="all").set(1)
print(os.getpid())
"""


def _write_as_dead_process(folder: Path, count: int) -> int:
    """Run a separate process that counts into `folder` and exits; returns its pid."""
    done = subprocess.run([sys.executable, "-c", WRITER, str(folder), str(count)], cwd=str(ROOT), check=True,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return int(done.stdout)


def _totals(folder: Path) -> dict[tuple[str, tuple], float]:
    merged = MultiProcessCollector.merge([str(p) for p in folder.glob("*.db")], accumulate=True)
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for m in merged for s in m.samples}


def test_folding_keeps_the_totals_of_dead_processes_in_one_archive_per_kind(tmp_path: Path):
    folder = tmp_path / "host"
    folder.mkdir()
    first = _write_as_dead_process(folder, 2)
    before = _totals(folder)
    assert before[("agentq_calls_total", (("activity", "a"), ("status", "done"), ("tenant", "default")))] == 2
    assert {p.name for p in folder.glob("*.db")} == {f"counter_{first}.db", f"histogram_{first}.db",
                                                      f"gauge_all_{first}.db"}

    assert metrics.fold_dead_processes(folder) == 3
    assert {p.name for p in folder.glob("*.db")} == {"counter_archive.db", "histogram_archive.db"}
    assert _totals(folder) == {k: v for k, v in before.items() if k[0] != "some_gauge"}  # the dead gauge is gone

    second = _write_as_dead_process(folder, 5)
    live = folder / f"counter_{os.getpid()}.db"  # a file of a live process is left alone
    live.write_bytes((folder / f"counter_{second}.db").read_bytes())
    assert metrics.fold_dead_processes(folder) == 3
    totals = _totals(folder)
    calls_a = ("agentq_calls_total", (("activity", "a"), ("status", "done"), ("tenant", "default")))
    assert totals[calls_a] == 2 + 5 + 5  # archive + live
    assert totals[("agentq_call_duration_seconds_count", (("activity", "a"),))] == 2
    assert totals[("agentq_call_duration_seconds_bucket", (("activity", "a"), ("le", "0.25")))] == 0
    assert totals[("agentq_call_duration_seconds_bucket", (("activity", "a"), ("le", "0.5")))] == 2
    assert live.exists() and not list(folder.glob(".*partial"))


def test_a_metrics_file_a_process_was_killed_while_creating_is_removed_and_never_read(tmp_path: Path):
    from agentq.metrics.files import file_families
    from agentq.settings import Settings

    base = tmp_path / "metrics"
    folder = base / "host"
    folder.mkdir(parents=True)
    dead = _write_as_dead_process(folder, 2)
    killed = folder / f"histogram_{dead + 1_000_000}.db"  # no such process: killed between creating and sizing it
    killed.write_bytes(b"")
    starting = folder / f"counter_{os.getpid()}.db"  # a live process's, being created now
    starting.write_bytes(b"")
    settings = Settings(metrics_dir=base)  # every host folder under it is read
    scraped = {s.name: s.value for m in file_families(settings) for s in m.samples}
    assert scraped["agentq_calls_total"] == 2  # both empty files skipped by the scrape
    assert metrics.fold_dead_processes(folder) == 4  # the dead process's three files, and the empty one
    assert not killed.exists() and starting.exists()
    assert {p.name for p in folder.glob("*.db")} == {"counter_archive.db", "histogram_archive.db", starting.name}


def test_combined_families_sum_the_same_series_and_order_buckets():
    mine = CounterMetricFamily("agentq_calls", "calls", labels=["activity", "status"])
    mine.add_metric(["a", "done"], 1)
    theirs = CounterMetricFamily("agentq_calls", "calls", labels=["activity", "status"])
    theirs.add_metric(["a", "done"], 2)
    theirs.add_metric(["b", "failed"], 1)
    histogram = HistogramMetricFamily("agentq_call_duration_seconds", "d", labels=["activity"])
    histogram.add_metric(["a"], buckets=[("1.0", 1), ("+Inf", 2)], sum_value=3.0)
    other = HistogramMetricFamily("agentq_call_duration_seconds", "d", labels=["activity"])
    other.add_metric(["a"], buckets=[("+Inf", 1), ("1.0", 1)], sum_value=0.5)

    combined = {f.name: f for f in render.combined([mine, histogram, theirs, other])}
    calls = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in combined["agentq_calls"].samples}
    assert calls == {("agentq_calls_total", (("activity", "a"), ("status", "done"))): 3,
                     ("agentq_calls_total", (("activity", "b"), ("status", "failed"))): 1}
    durations = [(s.name.rsplit("_", 1)[1], s.labels.get("le"), s.value)
                 for s in combined["agentq_call_duration_seconds"].samples]
    assert durations == [("bucket", "1.0", 2), ("bucket", "+Inf", 3), ("count", None, 3), ("sum", None, 3.5)]


def _record(mode: CallMode, activity: str = "") -> CallRecord:
    return CallRecord(id="call_1", index=0, call={}, tool="t", activity=activity, mode=mode, awaited=True)


def test_activity_labels_never_carry_ids():
    assert metrics.activity_label(_record(CallMode.EXPLICIT, "charge")) == "charge"
    assert metrics.activity_label(_record(CallMode.LATENT)) == "(latent)"
    assert metrics.activity_label(_record(CallMode.MODULE, "x")) == "(module)"


def test_redeliveries_are_counted_when_the_broker_says_so_or_the_store_sent_a_call_again():
    counts = metrics.Metrics()

    def count(activity: str) -> float:
        return counts.redeliveries.labels(activity)._value.get()

    start = count("charge"), count(metrics.ENGINE)
    counts.count_redelivery({"redelivered": False}, "agentq.activity.charge", None)
    counts.count_redelivery(None, "agentq.activity.charge", None)
    assert (count("charge"), count(metrics.ENGINE)) == start
    counts.count_redelivery({"redelivered": True}, "agentq.activity.charge", None)
    counts.count_redelivery({"redelivered": True}, "agentq.engine.latent", None)
    assert (count("charge"), count(metrics.ENGINE)) == (start[0] + 1, start[1] + 1)
    counts.count_sent_again(_record(CallMode.EXPLICIT, "charge"))  # the store's sweep sent a dead worker's call again
    assert count("charge") == start[0] + 2


def test_each_metrics_counts_into_its_own_registry_and_the_composition_root_installs_the_one_it_is_given():
    from agentq.engine.hooks import CallEnded
    from agentq.runtime.root import connect
    from agentq.settings import Settings

    mine, other = metrics.Metrics(), metrics.Metrics()
    mine.call_ended(_record(CallMode.EXPLICIT, "charge"), "done", 0.2)
    charged = ("charge", "done", "default")
    assert (mine.calls.labels(*charged)._value.get(), other.calls.labels(*charged)._value.get()) == (1, 0)
    parts = connect(Settings(redis_url="redis://127.0.0.1:1/0"), metrics=mine)  # nothing connects yet
    try:
        assert parts.metrics is mine
        # the job service's rejections and cancellations (a module's child job ending) count there too
        parts.jobs.progress.hooks.after_call(CallEnded("job_1", _record(CallMode.MODULE, "m"), "failed", 1.0))
        assert mine.calls.labels("(module)", "failed", "default")._value.get() == 1
        assert [f.name for f in render.collect_families(parts) if f.name == "agentq_calls"] == ["agentq_calls"]
    finally:
        parts.close()


class _Scripted:
    def __init__(self, *outcomes):
        self.outcomes = list(outcomes)

    def solve(self, request, *, on_call=None):
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


def test_the_metered_llm_counts_requests_by_outcome_and_tokens_by_type():
    model = "model-under-test"
    answer = LLMAnswer(solution={}, raw="{}", tool_use_id="t", stop_reason="tool_use",
                       usage=Usage(requests=1, input_tokens=100, output_tokens=7, cache_read_input_tokens=50))
    counts = metrics.Metrics()
    llm = metrics.metered(_Scripted(LLMRetryableError("overloaded"), LLMError("bad request"), answer), counts)
    assert isinstance(llm, metrics.MeteredLLM)
    request = LLMRequest(model=model, system=(), messages=(), solution_schema={}, max_tokens=10)
    with pytest.raises(LLMRetryableError):
        llm.solve(request)
    with pytest.raises(LLMError):
        llm.solve(request)
    assert llm.solve(request) is answer

    def get(counter, *labels):
        return counter.labels(*labels)._value.get()

    assert [get(counts.llm_requests, model, s) for s in ("retry", "error", "ok")] == [1, 1, 1]
    assert [get(counts.llm_tokens, model, t) for t in metrics.TOKEN_TYPES] == [100, 7, 0, 50]
    assert metrics.metered(None, counts) is None


def test_the_metered_llm_counts_the_cost_of_priced_answers_by_model():
    from agentq.llm.prices import PriceTable, priced

    usage = Usage(requests=1, input_tokens=1000, output_tokens=100)
    answers = [LLMAnswer(solution={}, raw="{}", tool_use_id="t", stop_reason="tool_use", usage=usage)] * 3
    counts = metrics.Metrics()
    llm = metrics.metered(priced(_Scripted(*answers), PriceTable()), counts)
    assert llm is not None
    for model in ("claude-haiku-4-5", "claude-haiku-4-5-20251001", "unpriced-model"):
        llm.solve(LLMRequest(model=model, system=(), messages=(), solution_schema={}, max_tokens=10))
    cost = counts.llm_cost.labels("claude-haiku-4-5")._value.get()
    assert cost == pytest.approx((1000 * 1 + 100 * 5) / 1e6)  # $1 / $5 per million tokens
    assert counts.llm_cost.labels("claude-haiku-4-5-20251001")._value.get() == pytest.approx(cost)
    body = generate_latest(counts.registry).decode()
    assert 'agentq_llm_cost_usd_total{model="claude-haiku-4-5"} 0.0015' in body
    assert not [line for line in body.splitlines()  # no price: not counted
                if line.startswith("agentq_llm_cost_usd") and "unpriced-model" in line]
    assert 'agentq_llm_requests_total{model="unpriced-model",status="ok"} 1.0' in body


# --------------------------------------------------------------------------------------- healthcheck


def _beat(worker_id: str, *, beat_at: float, interval: float = 10.0, **announcement) -> WorkerBeat:
    host = worker_id.split(":", 1)[0]
    return WorkerBeat(worker_id, beat_at + 3 * interval,
                      WorkerAnnouncement.from_dict({"id": worker_id, "hostname": host, "heartbeat_s": interval,
                                                    **announcement}))


def test_healthy_within_two_heartbeats_stale_after():
    now = time.time()
    fresh = _beat("h1:10:a", beat_at=now - 19, activities=[{"name": "x"}])
    verdict = health.assess([fresh], hostname="h1", role="any", heartbeat_s=10, now=now)
    assert verdict.healthy and verdict.message.startswith("ok: worker h1:10:a announced itself 19.0 s ago")

    stale = _beat("h1:10:a", beat_at=now - 21, activities=[{"name": "x"}])
    verdict = health.assess([stale], hostname="h1", role="any", heartbeat_s=10, now=now)
    assert not verdict.healthy
    assert verdict.message == ("stale: the last announcement of a worker or dispatcher of host h1 (h1:10:a) was "
                               "21 s ago, more than two heartbeats (20 s)")


def test_the_freshest_process_of_the_host_and_role_decides():
    now = time.time()
    beats = [_beat("h1:1:a", beat_at=now - 100, activities=[{"name": "x"}]),
             _beat("h1:2:b", beat_at=now - 1, engine=True),
             _beat("h2:3:c", beat_at=now, activities=[{"name": "x"}])]
    assert health.assess(beats, hostname="h1", role="dispatcher", heartbeat_s=10, now=now).healthy
    assert health.assess(beats, hostname="h1", role="any", heartbeat_s=10, now=now).message.startswith(
        "ok: dispatcher h1:2:b")
    worker = health.assess(beats, hostname="h1", role="worker", heartbeat_s=10, now=now)
    assert not worker.healthy and worker.message.startswith("stale:") and "(h1:1:a) was 100 s ago" in worker.message
    missing = health.assess(beats, hostname="h3", role="any", heartbeat_s=10, now=now)
    assert missing.message == "no worker or dispatcher of host h3 has announced itself (announcements from: h1, h2)"


def test_an_expired_announcement_still_tells_its_host_and_age():
    now = time.time()
    gone = WorkerBeat("h1:10:a", now - 5, None)  # its key expired: only the id and the set's score remain
    verdict = health.assess([gone], hostname="h1", role="any", heartbeat_s=2, now=now)
    assert not verdict.healthy and "was 11 s ago" in verdict.message


def test_a_metrics_folder_that_cannot_be_written_is_a_warning_not_a_failed_worker(tmp_path: Path, monkeypatch,
                                                                                   caplog):
    from agentq.settings import Settings

    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with caplog.at_level("WARNING", logger="agentq.metrics"):
        assert metrics.enable_multiprocess(Settings(metrics_dir=blocker)) is None
    assert "PROMETHEUS_MULTIPROC_DIR" not in os.environ and not metrics.multiprocess()
    assert "cannot write to" in caplog.text and "will not be exported" in caplog.text

"""The soak's short form (`benchmarks/soak.py` runs the long one, docs/design/soak.md): the whole fleet as real
processes — a redis-server with its append-only file, prefork and threads workers, two dispatchers, `agentq api`,
the fake Messages API, a webhook receiver — under the mixed load, with every fault kind at least once on the
schedule of a fixed seed: a worker, a pool child, a dispatcher and the API killed, Redis paused and restarted from
its append-only file, the model answering 429, 529 and 500 and cutting its streams, the receiver down, a worker's
or a dispatcher's Redis connections dropped (`CLIENT KILL`); module jobs, batch-lane agent jobs and a schedule
firing every 2 s among the load. Every invariant is checked from records kept outside the store.

Below it, the checks themselves on made-up ledgers: each one fails when what it guards is broken.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.soaking import checks, plot
from benchmarks.soaking.faults import KINDS, Fault
from benchmarks.soaking.fleet import Kill
from benchmarks.soaking.hooks import Delivery
from benchmarks.soaking.jobs import KINDS as JOB_KINDS
from benchmarks.soaking.jobs import SoakJob
from benchmarks.soaking.ledger import Run, most_at_once, read_ledger
from benchmarks.soaking.model import ModelRequest
from benchmarks.soaking.report import markdown
from benchmarks.soaking.run import SoakConfig, SoakResult, run_soak

# every fault kind once in these seconds of load: outages at 0.4 of their length, 0.5-1 s apart
SHORT_S = 26


@pytest.mark.timeout(240)
def test_a_short_soak_with_every_fault_kind_keeps_every_invariant(tmp_path: Path):
    config = SoakConfig(duration_s=SHORT_S, seed=33, workers=2, open_jobs=12, drain_s=60, warmup_s=2,
                        gap_s=(0.5, 1.0), outage_scale=0.4, workdir=tmp_path)
    result = run_soak(config)
    report = markdown(result)
    print(report)
    assert {f.kind for f in result.faults} == set(KINDS), report
    assert [f.kind for f in result.faults] == _order(config)[:len(result.faults)], report
    ended = [j for j in result.jobs if j.ended_at]
    assert len(ended) >= 20 and {j.kind for j in ended} == {*JOB_KINDS, "burst", "short", "scheduled"}, report
    assert [c.name for c in result.checks if not c.ok] == [], report
    assert all(f.recovery_s is not None and f.recovery_s < 30 for f in result.faults), report


def _order(config: SoakConfig) -> list[str]:
    from benchmarks.soaking.faults import Injector

    return Injector(None, None, None, config.seed, kinds=config.kinds).schedule()  # type: ignore[arg-type]


def _run(tag: str, run: str, pid: int, start: float, end: float | None, account: str = "-",
         failed: bool = False) -> Run:
    return Run(tag, run, pid, start, account, end, failed)


def test_the_ledger_is_read_back_into_runs(tmp_path: Path):
    ledger = tmp_path / "ledger.txt"
    ledger.write_text("start acme-fanout1-k r1 10 100.0 acme ac-1\nfail acme-fanout1-k r1 10 100.5\n"
                      "start acme-fanout1-k r2 11 101.0 acme ac-1\nend acme-fanout1-k r2 11 101.5\n"
                      "start globex-wait2-w r3 12 102.0 globex -\n")
    runs = read_ledger(ledger)
    assert [(r.run, r.end, r.failed, r.tenant, r.account) for r in runs["acme-fanout1-k"]] == [
        ("r1", 100.5, True, "acme", "ac-1"), ("r2", 101.5, False, "acme", "ac-1")]
    assert runs["globex-wait2-w"][0].end is None
    assert most_at_once([(0, 2), (1, 3), (2, 4)]) == (2, 1)  # an end at another's start is no overlap


def test_a_second_run_is_a_violation_unless_a_kill_interrupted_the_first_or_it_failed_as_asked():
    ledger = {"t-ok": [_run("t-ok", "a", 1, 0, 1, failed=True), _run("t-ok", "b", 2, 2, 3)],
              "t-killed": [_run("t-killed", "c", 3, 0, None), _run("t-killed", "d", 4, 5, 6)],
              "t-twice": [_run("t-twice", "e", 5, 0, 1), _run("t-twice", "f", 6, 2, 3)],
              "t-lost": [_run("t-lost", "g", 7, 0, None), _run("t-lost", "h", 8, 2, 3)],
              # its handler ended, its process was killed before the outcome was committed: run again, rightly
              "t-uncommitted": [_run("t-uncommitted", "i", 9, 0, 1), _run("t-uncommitted", "j", 10, 5, 6)],
              "t-killed-later": [_run("t-killed-later", "k", 11, 0, 1), _run("t-killed-later", "l", 12, 2, 3)]}
    check = checks.handler_runs(ledger, [Kill(0.5, "worker-threads", [3]), Kill(1.5, "worker-prefork child", [9]),
                                         Kill(4, "worker-prefork child", [11])])
    assert check.figures["runs_again_after_a_kill"] == 2
    assert [v.split(":")[0] for v in check.violations] == ["t-twice", "t-lost", "t-killed-later"]


def test_overlapping_runs_of_one_account_or_over_a_tenants_limit_are_violations():
    keyed = [_run(f"acme-fanout{i}-k", str(i), i, i, i + 1.5, account="ac-1") for i in range(2)]
    killed = [_run("acme-fanout9-k", "k", 9, 10, None, account="ac-2"), _run("acme-fanout9-k", "l", 10, 12, 13,
                                                                           account="ac-2")]
    check = checks.limits_held({r.tag: [r] for r in keyed} | {"acme-fanout9-k": killed}, [Kill(11, "worker", [9])])
    assert check.violations == ["account ac-1: 2 soakKeyed runs at once at 1.000 (limit 1)"]
    crowd = {f"acme-x{i}": [_run(f"acme-x{i}", str(i), i, 0, 1)] for i in range(7)}
    assert checks.limits_held(crowd, []).violations == ["tenant acme: 7 runs at once at 0.000 (max_running_calls 6)"]


def test_a_job_over_its_budget_or_a_webhook_not_delivered_or_with_two_ids_is_a_violation():
    jobs = [SoakJob("acme-agent1", "agent", "acme", {}, True, "job_1", 1.0, 2.0, "succeeded"),
            SoakJob("acme-agent2", "agent", "acme", {}, True, "job_2", 1.0, 2.0, "succeeded"),
            SoakJob("acme-agent3", "agent", "acme", {}, True, "job_3", 1.0, 2.0, "succeeded")]
    requests = [ModelRequest(0, "acme-agent1", False, 200)] * 7 + [ModelRequest(0, "acme-agent2", False, 429)] * 9
    assert checks.budgets_held(jobs, requests).violations == ["acme-agent1: 7 requests answered (max_requests 6)"]
    deliveries = [Delivery(0, "msg_a", "job_1", "job.finished", True),
                  Delivery(0, "msg_b", "job_1", "job.finished", True),
                  Delivery(0, "msg_c", "job_2", "job.finished", True)]
    assert checks.webhooks_delivered(jobs, deliveries).violations == [
        "acme-agent1: job.finished delivered with ids ['msg_a', 'msg_b']",
        "acme-agent3 (job_3): job.finished never delivered"]


def test_a_short_job_of_globex_slower_than_the_bound_under_acmes_burst_is_a_violation():
    def job(tag: str, kind: str, submitted: float, ended: float) -> SoakJob:
        tenant = "acme" if kind == "burst" else "globex"
        return SoakJob(tag, kind, tenant, {}, False, f"job_{tag}", submitted, ended, "succeeded")

    burst = [job(f"acme-burst{i}", "burst", 100.0, 110.0 + i) for i in range(3)]  # 100.0 to 112.0
    fair = [job(f"globex-short{i}", "short", 100.0 + i, 100.5 + i) for i in range(6)]
    before = [job("globex-short90", "short", 90.0, 99.0)]  # before the burst: not measured
    check = checks.fairness(burst + fair + before, bound_s=2.0)
    assert check.ok and check.looked_at == 6 and check.figures["p99_s"] == 0.5, check
    assert check.figures["burst_lasted_s"] == 12.0
    starved = [*fair[:5], job("globex-short7", "short", 101.0, 110.0)]  # waited for the burst to drain
    assert checks.fairness(burst + starved, bound_s=2.0).violations == [
        "globex's short jobs under acme's burst of 3 jobs: p99 9.00 s over the bound 2.0 s (p50 0.50 s, slowest "
        "globex-short7)"]
    never = [*fair[:5], job("globex-short8", "short", 101.0, 0.0)]
    assert "p99 inf s" in checks.fairness(burst + never, bound_s=2.0).violations[0]
    assert checks.fairness(burst + fair[:2], bound_s=2.0).violations == [
        "only 2 of globex's short jobs under the burst (at least 5 measure it)"]


def _made_up_result() -> SoakResult:
    jobs = [SoakJob(f"acme-fanout{i}", "fanout", "acme", {}, False, f"job_{i}", 1000.0 + i, 1001.5 + i, "succeeded")
            for i in range(40)]
    faults = [Fault("kill-worker", 1010.0, 1010.1, "worker-prefork pids [1]"), Fault("redis-pause", 1020, 1023, "")]
    return SoakResult(SoakConfig(40, 7), 1000.0, 1040.0, 1045.0, jobs, faults, [], [], 0)


def test_the_picture_is_an_svg_or_a_png_drawn_by_chromium(tmp_path: Path):
    result = _made_up_result()
    assert plot.write(result, tmp_path / "soak.svg") == []
    drawn = (tmp_path / "soak.svg").read_text()
    assert drawn.startswith("<svg") and "kill-worker" in drawn and "redis-pause" in drawn
    if plot.chromium() is None:
        pytest.skip("Debian's chromium is not installed (python3 dev.py test installs it): no PNG to check")
    assert plot.write(result, tmp_path / "soak.png") == []
    assert (tmp_path / "soak.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_without_chromium_the_png_falls_back_to_the_svg_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(plot, "chromium", lambda: None)
    notes = plot.write(_made_up_result(), tmp_path / "soak.png")
    assert notes == [f"soak: no PNG at {tmp_path / 'soak.png'} (no chromium (apt-get install chromium)); the picture "
                     f"is the SVG {tmp_path / 'soak.svg'}"]
    assert not (tmp_path / "soak.png").exists() and (tmp_path / "soak.svg").read_text().startswith("<svg")


def test_an_event_job_that_took_another_tenants_event_or_none_is_a_violation():
    jobs = [SoakJob(f"acme-event{i}", "event", "acme", {}, False, f"job_{i}", 1.0, 2.0, "succeeded") for i in range(4)]
    sends = {"job_0": [("acme-event0-globex0", "globex", 0), ("acme-event0-acme0", "acme", 1)],
             "job_1": [("acme-event1-globex0", "globex", 1), ("acme-event1-acme0", "acme", 0)],
             "job_2": [("acme-event2-acme0", "acme", 1)], "job_3": [("acme-event3-acme0", "acme", 0)]}
    states = {"job_0": {"event": {"id": "acme-event0-acme0", "data": {"tenant": "acme"}}},
              "job_1": {"event": {"id": "acme-event1-globex0", "data": {"tenant": "globex"}}},
              "job_2": {"noevent": {"error": {"type": "WaitTimedOut"}}}, "job_3": {}}
    check = checks.events_delivered(jobs, sends, states)
    assert check.violations == [
        "acme-event1: globex's event acme-event1-globex0 woke 1 wait(s)",
        "acme-event1: took event acme-event1-globex0 (data {'tenant': 'globex'}), not one acme sent",
        "acme-event2: took no event (its wait timed out)", "acme-event3: took no event (nothing at †state.event)"]
    assert check.figures == {"events_sent": 4, "sent_again": 0}


def test_a_request_the_fake_api_refused_is_a_violation():
    requests = [ModelRequest(0, "acme-agent1", False, 200)] * 2
    assert checks.requests_accepted([], requests).ok
    refused = ["acme-agent1: messages.1.content.0: thinking blocks must be passed back unchanged"]
    assert checks.requests_accepted(refused, requests).violations == [f"refused: {refused[0]}"]


def test_a_module_job_without_its_childs_answer_is_a_violation():
    jobs = [SoakJob(f"acme-module{i}", "module", "acme", {}, False, f"job_{i}", 1.0, 2.0, "succeeded")
            for i in range(4)]
    states = {"job_0": {"answer": {"answer": "done acme-module0"}},
              "job_1": {"answer": {"answer": "done acme-module0"}},  # another job's child's answer
              "job_2": {"noanswer": {"error": {"type": "ModelError"}}}, "job_3": {}}
    check = checks.modules_answered(jobs, states)
    assert check.violations == ["acme-module1: took {'answer': 'done acme-module0'}, not its child's answer",
                                "acme-module3: nothing at †state.answer nor †state.noanswer (succeeded)"]
    assert check.figures == {"child_failed": 1}


def test_a_due_slot_of_the_schedule_that_never_fired_and_was_not_counted_missed_is_a_violation():
    due = [100, 102, 104, 106]
    assert checks.schedule_fired(due, {100, 102, 104, 106, 108}, {"fired": 5}).ok
    assert checks.schedule_fired(due, {100, 104, 106}, {"fired": 3, "missed": 1}).ok  # counted: an outage
    assert checks.schedule_fired(due, {100, 106}, {"fired": 2, "missed": 1}).violations == [
        "slot 102 never fired (1 slots counted missed, skipped or failed)",
        "slot 104 never fired (1 slots counted missed, skipped or failed)"]

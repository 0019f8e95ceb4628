"""The places of ended calls (docs/tenants.md) are given back off the call's path, in groups: `Admission.ended` of a
call that released nothing only notes its place; the process's admission thread gives back what was noted in one step
and publishes the parked calls it admits, and the next step the process makes for other reasons takes the noted
places along (on Redis and a Redis Cluster)."""

from __future__ import annotations

import threading

import pytest

from agentq.errors import StoreUnavailableError
from agentq.protocol.records import CallMode, CallRecord, WorkerAnnouncement
from agentq.runtime import give_back as give_back_module
from agentq.runtime.admission import Admission
from agentq.settings import Settings
from agentq.store.fleet import RedisFleet
from tests.integration.procs import wait_for
from tests.runtime.conftest import Backend

Q = "agentq.activity.work"


def record(n: int) -> CallRecord:
    return CallRecord(id=f"call_{n}", index=n, call={"n": n}, tool="work", activity="work", mode=CallMode.EXPLICIT,
                      awaited=True, task="agentq.activity.work", queue=Q)


def admission(backend: Backend, settings: Settings | None = None) -> tuple[Admission, list[str]]:
    settings = settings if settings is not None else Settings(admission_window=2)
    adm = Admission(backend.store, settings, fleet=RedisFleet(backend.store))
    published: list[str] = []
    adm.publisher = lambda calls: published.extend(f"{job_id}/{r.id}" for job_id, r in calls)
    adm.know("job_g", "a", None, tools={})
    return adm, published


def test_noted_places_go_along_with_the_next_step_of_the_process(backend: Backend,
                                                                 monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(give_back_module, "GIVE_BACK_S", 60.0)  # the thread waits: only the next step gives back
    adm, published = admission(backend)
    assert [r.id for _, r in adm.admit("job_g", [record(0), record(1), record(2)])] == ["call_0", "call_1"]
    assert adm.ended("job_g", ["call_0"], []) == [] and adm.ended("job_g", ["call_1"], []) == []
    assert backend.store.admission_counts() == {f"q:{Q}": 2, "t:a": 2}  # noted, not given back yet
    # one step: both places given back, the parked call and the new one admitted (the parked one first)
    assert [r.id for _, r in adm.admit("job_g", [record(3)])] == ["call_2", "call_3"]
    assert backend.store.admission_counts() == {f"q:{Q}": 2, "t:a": 2}
    assert published == []  # what a step of the process admits is its to publish, not the thread's


def test_the_admission_thread_gives_noted_places_back_and_publishes_what_they_admit(backend: Backend):
    adm, published = admission(backend)
    assert [r.id for _, r in adm.admit("job_g", [record(n) for n in range(4)])] == ["call_0", "call_1"]
    assert adm.ended("job_g", ["call_0"], []) == [] and adm.ended("job_g", ["call_1"], []) == []
    wait_for(lambda: len(published) == 2, 10.0, "the parked calls to be published")
    assert sorted(published) == ["job_g/call_2", "job_g/call_3"]
    adm.ended("job_g", ["call_2"], [])
    adm.ended("job_g", ["call_3"], [])
    wait_for(lambda: not backend.store.admission_counts(), 10.0, "every place to be given back")
    assert len(published) == 2 and backend.store.parked_queues() == []


def test_a_group_of_a_quarter_of_the_prefetch_is_given_back_without_waiting(backend: Backend,
                                                                           monkeypatch: pytest.MonkeyPatch):
    """A burst of short calls frees places hundreds a second: the thread gives them back as soon as a quarter of the
    prefetch is noted (one step for the group), not only after its longest wait."""
    monkeypatch.setattr(give_back_module, "GIVE_BACK_S", 60.0)  # only a full group is given back before a minute
    adm, published = admission(backend, Settings(admission_window=2, admission_prefetch=8))
    assert [r.id for _, r in adm.admit("job_g", [record(n) for n in range(5)])] == ["call_0", "call_1"]
    adm.ended("job_g", ["call_0"], [])  # one place: half a group, it waits
    assert backend.store.admission_counts() == {f"q:{Q}": 2, "t:a": 2}
    adm.ended("job_g", ["call_1"], [])  # two: a quarter of the prefetch, given back now
    wait_for(lambda: len(published) == 2, 10.0, "the group to be given back")
    assert sorted(published) == ["job_g/call_2", "job_g/call_3"]
    adm.close()


def test_a_closed_admission_ends_its_thread_and_gives_back_what_it_noted(backend: Backend,
                                                                       monkeypatch: pytest.MonkeyPatch):
    """A runtime built and closed again and again (tests, embedded clients) leaves no giving-back thread behind: a
    process once held one per closed runtime (72 in one pytest worker, over a test's thread budget). The close
    returns once the thread made its last step: a process closes its store right after, and a step still running
    then failed (a warning with a traceback at a client's exit)."""
    monkeypatch.setattr(give_back_module, "GIVE_BACK_S", 60.0)  # the thread would wait: only the close gives back
    def admission_threads() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name == "agentq-admission"}

    adm, published = admission(backend)
    assert [r.id for _, r in adm.admit("job_g", [record(n) for n in range(3)])] == ["call_0", "call_1"]
    before = admission_threads()  # other tests' admissions (never closed) may have theirs
    adm.ended("job_g", ["call_0"], [])
    (thread,) = admission_threads() - before
    adm.close()
    assert not thread.is_alive()
    assert published == ["job_g/call_2"]  # what was noted was given back on the way out
    adm.ended("job_g", ["call_1"], [])  # after the close: given back at once, no thread started
    assert admission_threads() - before == set()
    assert backend.store.admission_counts() == {f"q:{Q}": 1, "t:a": 1}


def test_places_a_failed_step_took_are_given_back_once_the_store_answers(backend: Backend,
                                                                       monkeypatch: pytest.MonkeyPatch):
    """A store down or restarting when the thread gives places back (or when a step takes the noted ones along) keeps
    them: the thread tries again within a second rather than leaving them to the admission sweep (minutes)."""

    monkeypatch.setattr(give_back_module, "RETRY_S", (0.01, 0.05))
    adm, published = admission(backend)
    assert [r.id for _, r in adm.admit("job_g", [record(n) for n in range(4)])] == ["call_0", "call_1"]
    real, failures, store_down = backend.store.admit_calls, [], threading.Event()

    def down(*args, **kwargs):
        if store_down.is_set():
            failures.append(1)
            raise StoreUnavailableError("the store is restarting")
        return real(*args, **kwargs)

    monkeypatch.setattr(backend.store, "admit_calls", down)
    store_down.set()
    adm.ended("job_g", ["call_0"], [])
    with pytest.raises(StoreUnavailableError):  # a step of the process that fails keeps the noted places too
        adm.admit("job_g", [record(4)])
    adm.ended("job_g", ["call_1"], [])
    wait_for(lambda: len(failures) >= 3, 10.0, "the thread to try again while the store is down")
    store_down.clear()
    wait_for(lambda: len(published) == 2, 10.0, "the parked calls to be published once the store answers")
    assert sorted(published) == ["job_g/call_2", "job_g/call_3"]
    assert backend.store.admission_counts() == {f"q:{Q}": 2, "t:a": 2}  # call_2 and call_3 hold the two places


def announce(backend: Backend, worker_id: str, concurrency: int, processes: int | None = None) -> None:
    """A live worker serving the queue: `concurrency` slots run by `processes` (a prefork pool's: one per slot;
    a threads pool's: 1; None: not announced, as by an earlier version: one per slot)."""
    announcement = WorkerAnnouncement(worker_id, queues=(Q,), concurrency=concurrency,
                                      processes=concurrency if processes is None else processes)
    RedisFleet(backend.store).announce_worker(worker_id, announcement, ttl_s=3600)


@pytest.mark.parametrize(("workers", "group"), [
    ((), 4), (((2, 2),), 4), (((4, 4),), 3), (((2, 2), (2, 2)), 3), (((8, 8),), 2), (((16, 16),), 2),
    (((16, 16), (16, 16)), 1), (((32, 1),), 4), (((8, None),), 2)])
def test_the_group_leaves_at_least_half_of_every_window_in_flight(backend: Backend,
                                                                  workers: tuple[tuple[int, int | None], ...],
                                                                  group: int):
    """Every process serving a queue (a prefork child each, a threads pool's one) holds back up to a group less one:
    a group less one is at most a queue's window (its slots plus the prefetch, 16) over twice those processes, so
    together they hold back at most half of it; a quarter of the prefetch while few share it."""
    for n, (concurrency, processes) in enumerate(workers):
        announce(backend, f"w{n}", concurrency, processes)
    adm, _ = admission(backend, Settings())
    assert adm.group() == group
    window = sum(c for c, _ in workers) + 16
    holders = sum(c if p is None else p for c, p in workers)
    assert holders * (group - 1) <= window // 2


def test_a_fixed_window_is_shared_by_the_processes_serving_it(backend: Backend):
    announce(backend, "w0", 2)
    adm, _ = admission(backend, Settings(admission_window=10))
    assert adm.group() == 3  # 1 + 10 // (2 x 2)


def test_where_many_share_a_window_a_place_is_given_back_at_once(backend: Backend,
                                                                monkeypatch: pytest.MonkeyPatch):
    """With eight prefork children on a queue whose window is two places, a process gives back each place as its call
    ends (a group of one), not after the hold: held back by the children, the places would leave the queue's window
    empty until the hold ran out."""
    monkeypatch.setattr(give_back_module, "GIVE_BACK_S", 60.0)  # a larger group would wait a minute
    announce(backend, "w0", 8)
    adm, published = admission(backend, Settings(admission_window=2))
    assert [r.id for _, r in adm.admit("job_g", [record(n) for n in range(3)])] == ["call_0", "call_1"]
    adm.ended("job_g", ["call_0"], [])
    wait_for(lambda: published == ["job_g/call_2"], 10.0, "the place to be given back at once")
    adm.close()


def test_the_thread_wakes_for_a_group_s_first_place_and_once_it_is_full_not_for_each_place(
        monkeypatch: pytest.MonkeyPatch):
    """Each wake-up of the giving-back thread is a thread switch in the process that runs the calls: a place noted
    while a group fills wakes it only when it is the group's first or completes it."""
    monkeypatch.setattr(give_back_module, "GIVE_BACK_S", 60.0)  # only a full group ends the wait
    noted = give_back_module.Noted(enough=4)
    noted.enough = 4  # what the thread asks `enough` for before each group
    given: list[list[str]] = []
    noted.add(["p0"], lambda: given.append(noted.take()))  # the first place starts the thread and wakes it
    wakes: list[int] = []
    notify = noted._wake.notify

    def counted(n: int = 1) -> None:
        wakes.append(n)
        notify(n)

    monkeypatch.setattr(noted._wake, "notify", counted)
    try:
        for member in ("p1", "p2", "p3"):
            noted.add([member], lambda: given.append(noted.take()))
        wait_for(lambda: given == [["p0", "p1", "p2", "p3"]], 10.0, "the group to be given back")
        assert wakes == [1]  # p3 completed the group; p1 and p2 did not wake the thread
    finally:
        noted.close()

"""Schedules as pure functions (agentq/protocol/schedules.py): the checks of a schedule's body, its slots in its
time zone across daylight-saving changes, jitter and the catch-up window."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from agentq.protocol.schedules import ON_TIME_S, Schedule, parse_schedule, slot_job_id
from agentq.protocol.tenants import DEFAULT_TENANT

BERLIN = ZoneInfo("Europe/Berlin")
JOB: dict = {"calls": []}


def schedule(**fields) -> Schedule:
    parsed, problems = parse_schedule("report", {"job": JOB, **fields}, tenant=DEFAULT_TENANT)
    assert problems == [] and parsed is not None
    return parsed


def local(slots: list[int]) -> list[str]:
    return [datetime.fromtimestamp(s, BERLIN).strftime("%Y-%m-%d %H:%M %Z") for s in slots]


@pytest.mark.parametrize(("day", "change"), [((2026, 3, 28), "CET -> CEST"), ((2026, 10, 24), "CEST -> CET")])
def test_a_local_eight_oclock_fires_once_each_day_across_a_daylight_saving_change(day, change):
    every_day = schedule(cron="0 8 * * *", timezone="Europe/Berlin")
    start = datetime(*day, 0, 0, tzinfo=BERLIN).timestamp()
    slots = every_day.slots_after(start, 3)
    assert [s.split(" ")[0:2] for s in local(slots)] == [
        [f"{day[0]}-{day[1]:02}-{day[2] + i:02}", "08:00"] for i in range(3)], change
    # 08:00 local is 07:00 UTC in winter and 06:00 UTC in summer: the slots are 23 or 25 hours apart on the change
    gaps = {slots[1] - slots[0], slots[2] - slots[1]}
    assert gaps == ({23 * 3600, 24 * 3600} if change == "CET -> CEST" else {25 * 3600, 24 * 3600})


def test_a_local_time_the_spring_change_skips_fires_once_and_one_it_repeats_fires_once():
    night = schedule(cron="30 2 * * *", timezone="Europe/Berlin")
    spring = night.slots_after(datetime(2026, 3, 28, 12, 0, tzinfo=BERLIN).timestamp(), 2)
    assert local(spring) == ["2026-03-29 03:00 CEST", "2026-03-30 02:30 CEST"]  # 02:30 does not exist that night
    autumn = night.slots_after(datetime(2026, 10, 24, 12, 0, tzinfo=BERLIN).timestamp(), 2)
    assert local(autumn) == ["2026-10-25 02:30 CEST", "2026-10-26 02:30 CET"]  # the first 02:30 only


def test_weekday_mornings_skip_the_weekend():
    weekdays = schedule(cron="0 8 * * 1-5", timezone="Europe/Berlin")
    slots = weekdays.slots_after(datetime(2026, 11, 27, 9, 0, tzinfo=BERLIN).timestamp(), 2)  # a Friday
    assert local(slots) == ["2026-11-30 08:00 CET", "2026-12-01 08:00 CET"]


def test_every_n_seconds_is_aligned_on_the_epoch_so_every_process_computes_the_same_slots():
    every = schedule(every_s=2)
    assert every.slots_after(1000.5, 3) == [1002, 1004, 1006]
    assert every.slots_after(1001.0, 1) == [1002]
    assert every.slots_after(1002.0, 1) == [1004]


def test_jitter_is_the_same_for_a_slot_everywhere_and_within_its_bound():
    jittery = schedule(every_s=60, jitter_s=10)
    dues = [jittery.due_ms(slot) for slot in range(0, 6000, 60)]
    assert dues == [jittery.due_ms(slot) for slot in range(0, 6000, 60)]
    offsets = {due - slot * 1000 for due, slot in zip(dues, range(0, 6000, 60), strict=True)}
    assert all(0 <= o <= 10_000 for o in offsets) and len(offsets) > 10


def test_a_slot_is_missed_only_when_older_than_its_catch_up_window():
    plain, patient = schedule(every_s=2), schedule(every_s=2, catchup_window_s=30)
    assert not plain.missed(100, 100 + ON_TIME_S)  # late by a poll or a takeover: still on time
    assert plain.missed(100, 100 + ON_TIME_S + 0.5)
    assert not patient.missed(100, 129) and patient.missed(100, 131)


def test_a_slots_job_id_is_a_valid_job_id_derived_from_name_and_slot():
    from agentq.protocol.ids import job_id_problem

    assert slot_job_id("report", 1764403200) == "sched-report-1764403200"
    assert job_id_problem(slot_job_id("r" * 64, 99_999_999_999)) is None


def test_every_problem_of_a_schedule_is_named_with_its_pointer():
    body = {"cron": "61 * * * *", "every_s": -1, "timezone": "Mars/Olympus", "overlap": "sometimes",
            "catchup_window_s": -5, "jitter_s": "soon", "paused": "no", "colour": "red"}
    parsed, problems = parse_schedule("bad name!", body, tenant=DEFAULT_TENANT)
    assert parsed is None
    pointers = sorted(p.pointer for p in problems)
    assert pointers == sorted(["", "", "/cron", "/every_s", "/timezone", "/overlap", "/catchup_window_s",
                               "/jitter_s", "/paused", "/colour", "/job"])
    text = " ".join(p.message for p in problems)
    assert "Mars/Olympus" in text and "not both" in text and "does not parse" in text and "schedule name" in text


def test_a_schedule_needs_cron_or_every_s():
    _, problems = parse_schedule("report", {"job": JOB}, tenant=DEFAULT_TENANT)
    assert [(p.pointer, p.message) for p in problems] == [("", "give either cron or every_s")]


def test_the_stored_form_reads_back_the_same_schedule():
    given = schedule(cron="0 8 * * 1-5", timezone="Europe/Berlin", overlap="buffer_one", jitter_s=3)
    assert Schedule.from_dict(given.to_dict()) == given
    assert given.with_paused(True).paused and not given.paused

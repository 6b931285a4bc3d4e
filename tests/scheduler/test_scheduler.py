"""QueueScheduler against every database: one job per slot, competing schedulers,
restarts, snapshots, conflicts, the epoch, bad input, cron across daylight-saving
changes, catch-up, and what ``status()`` reads back."""
from __future__ import annotations

import logging
import threading
from datetime import datetime, timedelta, timezone
from typing import List

import pytest
from freezegun import freeze_time

from caravel_lite import InvalidField, JobState, QueueIdempotencyConflict, QueueScheduler
from caravel_lite.codec import encode
from caravel_lite.errors import UnknownJobType
from caravel_lite.testing import ManualClock
from tests.scheduler.jobs import (QUEUE, TENANT, Blob, Report, Tick, job_count, keys,
                                  make_queue, payloads)
from tests.support import wait_for

UTC = timezone.utc
T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
MIB = 1024 * 1024


def scheduler_at(db, clock, **kwargs) -> QueueScheduler:
    return QueueScheduler(make_queue(db, clock=clock), **kwargs)


def every_minute(scheduler: QueueScheduler, name: str = "tick", job=Tick(1), **kwargs):
    return scheduler.every(name, MINUTE, job, queue=QUEUE, tenant_id=TENANT, **kwargs)


def slot_of(key: str) -> int:
    return int(key.rsplit(":", 1)[1])


def test_two_competing_ticks_enqueue_one_job_and_a_repeat_enqueues_none(db, connect):
    clock = ManualClock(T0 + timedelta(seconds=30))
    schedulers = []
    for _ in range(2):
        scheduler = scheduler_at(connect(), clock)
        every_minute(scheduler)
        schedulers.append(scheduler)
    barrier = threading.Barrier(2)
    results: List[int] = []
    errors: List[BaseException] = []

    def tick(scheduler: QueueScheduler) -> None:
        try:
            barrier.wait(timeout=30)
            results.append(scheduler.run_once())
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            scheduler.queue.db.close()

    threads = [threading.Thread(target=tick, args=(s,)) for s in schedulers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    assert sorted(results) == [0, 1]
    assert keys(db) == [f"schedule:tick:60000:{(T0 - datetime(1970, 1, 1, tzinfo=UTC)) // MINUTE}"]
    assert [s.run_once() for s in schedulers] == [0, 0]  # a repeat enqueues none
    late = scheduler_at(db, clock)  # nor does a scheduler that starts within the slot
    every_minute(late)
    assert late.run_once() == 0
    assert job_count(db) == 1


def test_a_restart_after_five_hours_enqueues_one_job_not_five_hours_of_slots(db):
    clock = ManualClock(T0)
    first = scheduler_at(db, clock)
    every_minute(first)
    assert first.run_once() == 1
    clock.advance(timedelta(hours=5, seconds=20))  # the process was down
    restarted = scheduler_at(db, clock)
    every_minute(restarted)
    assert restarted.run_once() == 1
    assert restarted.run_once() == 0
    assert [slot_of(k) for k in keys(db)] == [slot_of(keys(db)[0]), slot_of(keys(db)[0]) + 300]
    # a process that stayed up but was stalled for five hours does not back-fill either
    clock.advance(timedelta(hours=5))
    assert first.run_once() == 1
    assert job_count(db) == 3


def test_the_snapshot_ignores_later_changes_to_the_job(db):
    clock = ManualClock(T0)
    scheduler = scheduler_at(db, clock)
    report = Report("daily", ["ops@example.com"])
    original = encode(report)
    every_minute(scheduler, "report", report)
    report.title = "changed"
    report.recipients.append("someone-else@example.com")
    assert scheduler.run_once() == 1
    clock.advance(MINUTE)
    assert scheduler.run_once() == 1
    assert payloads(db) == [original, original]


def test_a_changed_payload_for_an_enqueued_slot_conflicts_and_keeps_the_original(db):
    clock = ManualClock(T0)
    old = scheduler_at(db, clock)
    every_minute(old, "report", Report("v1"))
    assert old.run_once() == 1
    # A new deployment changes the job within the same slot.
    new = scheduler_at(db, clock)
    every_minute(new, "early", Tick(1))
    every_minute(new, "report", Report("v2"))
    every_minute(new, "late", Tick(2))
    with pytest.raises(QueueIdempotencyConflict):
        new.run_once()
    stored = sorted(k.split(":")[1] for k in keys(db))
    assert stored == ["early", "late", "report"]  # the conflict held up no other schedule
    assert encode(Report("v1")) in payloads(db)
    assert encode(Report("v2")) not in payloads(db)
    with pytest.raises(QueueIdempotencyConflict):  # the slot is tried again, not forgotten
        new.run_once()
    clock.advance(MINUTE)  # the next slot takes the new payload
    assert new.run_once() == 3
    assert encode(Report("v2")) in payloads(db)


def test_run_once_enqueues_the_catch_up_slots_besides_a_conflict_then_raises(db):
    """`scheduler --once` from an external cron: a changed payload in one slot held up
    that schedule's later slots and every schedule after it, at each run."""
    clock = ManualClock(T0)
    old = scheduler_at(db, clock)
    every_minute(old, "report", Report("v1"))
    assert old.run_once() == 1  # T0's slot, with the old payload
    clock.advance(timedelta(minutes=3))
    new = scheduler_at(db, clock)
    every_minute(new, "report", Report("v2"), catch_up=timedelta(minutes=5))
    every_minute(new, "billing", Tick(3))
    with pytest.raises(QueueIdempotencyConflict):
        new.run_once()
    first = (T0 - datetime(1970, 1, 1, tzinfo=UTC)) // MINUTE
    assert sorted(slot_of(k) - first for k in keys(db) if ":report:" in k) == [-2, -1, 0, 1, 2, 3]
    assert [slot_of(k) - first for k in keys(db) if ":billing:" in k] == [3]
    assert payloads(db).count(encode(Report("v1"))) == 1  # the original kept


def _run_until(scheduler: QueueScheduler, done, message: str) -> None:
    """``scheduler.run()`` on a thread until ``done()`` holds (or 10 s pass)."""
    stop = threading.Event()
    errors: List[BaseException] = []

    def main() -> None:
        try:
            scheduler.run(stop=stop)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            scheduler.queue.db.close()

    thread = threading.Thread(target=main)
    thread.start()
    try:
        wait_for(done, message=message)
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not errors and not thread.is_alive()


def test_run_logs_a_conflict_and_goes_on_with_the_other_schedules(db, connect, caplog):
    clock = ManualClock(T0)
    old = scheduler_at(db, clock)
    every_minute(old, "report", Report("v1"))
    old.run_once()
    new = scheduler_at(connect(), clock, poll_interval=timedelta(milliseconds=100))
    every_minute(new, "report", Report("v2"))
    every_minute(new, "late", Tick(2))
    caplog.set_level(logging.ERROR, logger="caravel_lite")
    _run_until(new, lambda: any(":late:" in k for k in keys(db)), "the later schedule's job")
    assert any("QueueIdempotencyConflict" in r.getMessage() for r in caplog.records)
    assert all("v2" not in r.getMessage() for r in caplog.records)  # never the payload


def test_run_skips_only_the_conflicting_slot_and_enqueues_the_later_catch_up_slots(
        db, connect, caplog):
    clock = ManualClock(T0)
    old = scheduler_at(db, clock)
    every_minute(old, "report", Report("v1"))
    assert old.run_once() == 1  # the slot of T0, with the old payload
    clock.advance(timedelta(minutes=3))
    new = scheduler_at(connect(), clock, poll_interval=timedelta(milliseconds=100))
    every_minute(new, "report", Report("v2"), catch_up=timedelta(minutes=5))
    caplog.set_level(logging.ERROR, logger="caravel_lite")
    t0_slot = (T0 - datetime(1970, 1, 1, tzinfo=UTC)) // MINUTE
    wanted = list(range(t0_slot - 2, t0_slot + 4))  # T0 - 2 min .. T0 + 3 min

    def enqueued() -> List[int]:
        return sorted(slot_of(k) for k in keys(db))
    _run_until(new, lambda: enqueued() == wanted, "the catch-up slots besides the conflict")
    conflicts = [r.getMessage() for r in caplog.records if "QueueIdempotencyConflict"
                 in r.getMessage()]
    assert len(conflicts) == 1 and f":{t0_slot}" in conflicts[0]  # logged once, by slot
    assert payloads(db).count(encode(Report("v1"))) == 1  # the original kept
    assert payloads(db).count(encode(Report("v2"))) == 5


class _AdvanceOnConflict(logging.Handler):
    """Moves ``clock`` on a minute when the scheduler logs a slot it could not enqueue:
    time passing while a pass is under way."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(logging.ERROR)
        self.clock = clock
        self.moved = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "not enqueued" in record.getMessage() and not self.moved:
            self.moved += 1
            self.clock.advance(MINUTE)


def test_run_marks_handled_at_the_instant_it_computed_the_due_slots_from(db, connect):
    clock = ManualClock(T0 + timedelta(seconds=59))
    old = scheduler_at(db, clock)
    every_minute(old, "report", Report("v1"))
    assert old.run_once() == 1
    new = scheduler_at(connect(), clock, poll_interval=timedelta(milliseconds=100))
    every_minute(new, "report", Report("v2"))
    mover = _AdvanceOnConflict(clock)
    log = logging.getLogger("caravel_lite")
    log.addHandler(mover)
    try:
        # The conflict of T0's slot moves the clock into the next minute during the
        # pass: that minute's slot is still due on the next pass.
        _run_until(new, lambda: job_count(db) == 2, "the slot that began during the pass")
    finally:
        log.removeHandler(mover)
    assert mover.moved == 1
    assert encode(Report("v2")) in payloads(db)


@pytest.mark.parametrize("instant,suffix", [
    (datetime(1969, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC), ":-1"),
    (datetime(1970, 1, 1, tzinfo=UTC), ":0")])
def test_keys_at_the_epoch_boundary(db, instant, suffix):
    # Through the queue's default clock, frozen.
    with freeze_time(instant, tick=False):
        queue = make_queue(db)
        scheduler = QueueScheduler(queue)
        scheduler.every("epoch", timedelta(seconds=1), Tick(1), queue=QUEUE, tenant_id=TENANT)
        assert scheduler.run_once() == 1
    assert keys(db) == [f"schedule:epoch:1000{suffix}"]


BAD_REGISTRATIONS = [
    ("name", dict(name="")), ("name", dict(name="A")), ("name", dict(name="a" * 65)),
    ("name", dict(name="a b")), ("name", dict(name=None)),
    ("queue", dict(queue="")), ("queue", dict(queue="Reports")), ("queue", dict(queue="q" * 65)),
    ("queue", dict(queue=None)),
    ("tenant_id", dict(tenant_id="")), ("tenant_id", dict(tenant_id="  ")),
    ("tenant_id", dict(tenant_id="t" * 129)), ("tenant_id", dict(tenant_id="a\nb")),
    ("tenant_id", dict(tenant_id=None)),
    ("interval", dict(interval=timedelta(0))), ("interval", dict(interval=timedelta(milliseconds=999))),
    ("interval", dict(interval=timedelta(days=366))),
    ("interval", dict(interval=timedelta(seconds=1, microseconds=1))),
    ("interval", dict(interval=5)),
    ("catch_up", dict(catch_up=timedelta(0))), ("catch_up", dict(catch_up=timedelta(hours=17))),
    ("job", dict(job=Blob("x" * MIB))),
]


@pytest.mark.parametrize("field,change", BAD_REGISTRATIONS,
                         ids=[f"{f}-{i}" for i, (f, _) in enumerate(BAD_REGISTRATIONS)])
def test_bad_registrations_are_refused_naming_the_field_and_write_nothing(db, field, change):
    scheduler = scheduler_at(db, ManualClock(T0))
    arguments = dict(name="tick", interval=MINUTE, job=Tick(1), queue=QUEUE, tenant_id=TENANT)
    arguments.update(change)
    with pytest.raises(InvalidField) as caught:
        scheduler.every(arguments.pop("name"), arguments.pop("interval"), arguments.pop("job"),
                        **arguments)
    assert caught.value.field == field
    assert isinstance(caught.value, ValueError)
    assert scheduler.schedules == []
    assert scheduler.run_once() == 0
    assert job_count(db) == 0


def test_other_refusals(db):
    scheduler = scheduler_at(db, ManualClock(T0))
    with pytest.raises(UnknownJobType):
        scheduler.every("odd", MINUTE, object(), queue=QUEUE, tenant_id=TENANT)
    every_minute(scheduler, "tick")
    with pytest.raises(InvalidField) as caught:  # a duplicate name, also across kinds
        scheduler.cron("tick", "* * * * *", Tick(2), queue=QUEUE, tenant_id=TENANT)
    assert caught.value.field == "name"
    for field, change in [("expr", dict(expr="61 * * * *")), ("timezone", dict(timezone="Nowhere/Else"))]:
        arguments = dict(expr="0 2 * * *", timezone="UTC")
        arguments.update(change)
        with pytest.raises(InvalidField) as caught:
            scheduler.cron("nightly", arguments["expr"], Tick(1), queue=QUEUE, tenant_id=TENANT,
                           timezone=arguments["timezone"])
        assert caught.value.field == field
    assert [s.name for s in scheduler.schedules] == ["tick"]
    for field, value in [("queue", object()), ("poll_interval", timedelta(milliseconds=99)),
                         ("poll_interval", timedelta(minutes=2))]:
        with pytest.raises(InvalidField) as caught:
            if field == "queue":
                QueueScheduler(value)
            else:
                QueueScheduler(scheduler.queue, poll_interval=value)
        assert caught.value.field == field
    assert job_count(db) == 0


def test_a_snapshot_of_exactly_one_mib_is_accepted_and_the_queue_limit_applies_at_enqueue(db):
    overhead = len(encode(Blob("")))
    at_limit = Blob("x" * (MIB - overhead))
    assert len(encode(at_limit)) == MIB
    roomy = QueueScheduler(make_queue(db, clock=ManualClock(T0), max_payload_bytes=MIB))
    roomy.every("big", MINUTE, at_limit, queue=QUEUE, tenant_id=TENANT)
    assert roomy.run_once() == 1
    small = scheduler_at(db, ManualClock(T0))  # the default 64 KiB limit
    small.every("big2", MINUTE, Blob("x" * 100_000), queue=QUEUE, tenant_id=TENANT)
    with pytest.raises(InvalidField) as caught:
        small.run_once()
    assert caught.value.field == "payload"
    assert job_count(db) == 1


# (zone, expression, start, expected enqueue instants over two days). Each range holds
# one daylight-saving change: a skipped local time runs once at the first valid instant
# after it (03:00 local), a repeated one runs once at its first occurrence.
DST_CASES = [
    ("Europe/Berlin", "30 2 * * *", datetime(2024, 3, 30, 12, tzinfo=UTC),
     ["2024-03-31T01:00:00Z", "2024-04-01T00:30:00Z"]),
    ("Europe/Berlin", "30 2 * * *", datetime(2024, 10, 26, 12, tzinfo=UTC),
     ["2024-10-27T00:30:00Z", "2024-10-28T01:30:00Z"]),
    ("America/New_York", "30 2 * * *", datetime(2024, 3, 9, 12, tzinfo=UTC),
     ["2024-03-10T07:00:00Z", "2024-03-11T06:30:00Z"]),
    ("America/New_York", "30 1 * * *", datetime(2024, 11, 2, 12, tzinfo=UTC),
     ["2024-11-03T05:30:00Z", "2024-11-04T06:30:00Z"]),
]


@pytest.mark.parametrize("zone,expr,start,expected", DST_CASES,
                         ids=["berlin-spring", "berlin-fall", "new-york-spring", "new-york-fall"])
def test_cron_across_daylight_saving_changes(db, zone, expr, start, expected):
    created = []
    with freeze_time(start, tick=False) as frozen:
        scheduler = QueueScheduler(make_queue(db))  # the queue's default clock, frozen
        scheduler.cron("nightly", expr, Tick(1), queue=QUEUE, tenant_id=TENANT, timezone=zone)
        now = start
        while now <= start + timedelta(days=2):
            created.append(scheduler.run_once())
            now += timedelta(minutes=5)
            frozen.move_to(now)
    assert sum(created) == 2
    assert keys(db) == sorted(f"schedule:nightly:cron:{stamp}" for stamp in expected)
    due = sorted(r[0] for r in db.execute_sql("SELECT available_at FROM caravel_jobs").fetchall())
    assert due == [int(datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp())
                   * 1000 for s in expected]  # enqueued at the occurrence, due at once


def test_a_cron_slot_that_passed_before_start_is_not_run_late(db):
    clock = ManualClock(datetime(2024, 5, 2, 0, 30, tzinfo=UTC))  # 02:30 in Berlin
    scheduler = scheduler_at(db, clock)
    scheduler.cron("nightly", "0 2 * * *", Tick(1), queue=QUEUE, tenant_id=TENANT,
                   timezone="Europe/Berlin")
    assert scheduler.run_once() == 0
    clock.set(datetime(2024, 5, 3, 0, 0, tzinfo=UTC))
    assert scheduler.run_once() == 1
    assert keys(db) == ["schedule:nightly:cron:2024-05-03T00:00:00Z"]


def test_catch_up_enqueues_missed_slots_within_its_window_only(db):
    clock = ManualClock(T0)
    first = scheduler_at(db, clock)
    every_minute(first, catch_up=timedelta(minutes=10))
    assert first.run_once() == 11  # T0 - 10 min .. T0, the window's ends included
    assert first.run_once() == 0
    clock.advance(timedelta(hours=5, seconds=30))
    restarted = scheduler_at(db, clock)
    every_minute(restarted, catch_up=timedelta(minutes=10))
    assert restarted.run_once() == 10  # the slots starting in the last ten minutes
    base = slot_of(keys(db)[0])
    stored = sorted(slot_of(k) for k in keys(db))
    assert stored == list(range(base, base + 11)) + list(range(base + 301, base + 311))


def test_cron_catch_up_after_downtime(db):
    clock = ManualClock(datetime(2024, 5, 1, 10, 30, tzinfo=UTC))
    scheduler = scheduler_at(db, clock)
    scheduler.cron("hourly", "0 * * * *", Tick(1), queue=QUEUE, tenant_id=TENANT,
                   catch_up=timedelta(hours=3))
    assert scheduler.run_once() == 3
    assert keys(db) == [f"schedule:hourly:cron:2024-05-01T{h:02d}:00:00Z" for h in (8, 9, 10)]


def test_status_reads_the_last_slot_from_the_database(db, connect):
    clock = ManualClock(datetime(2024, 5, 1, 12, 0, 30, tzinfo=UTC))
    scheduler = scheduler_at(db, clock)
    every_minute(scheduler, "tick")
    scheduler.cron("nightly", "0 2 * * *", Tick(2), queue=QUEUE, tenant_id=TENANT,
                   timezone="Europe/Berlin")
    assert scheduler.run_once() == 1
    clock.advance(timedelta(minutes=3))  # nothing ran since
    elsewhere = scheduler_at(connect(), clock)  # another process that enqueued nothing
    every_minute(elsewhere, "tick")
    elsewhere.cron("nightly", "0 2 * * *", Tick(2), queue=QUEUE, tenant_id=TENANT,
                   timezone="Europe/Berlin")
    tick, nightly = elsewhere.status()
    assert tick.last_slot.key == keys(db)[0] and tick.last_slot.at == datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    assert tick.last_job_state == JobState.PENDING.value
    assert tick.next_run == datetime(2024, 5, 1, 12, 4, tzinfo=UTC)
    assert tick.timezone == "UTC"
    assert nightly.last_slot is None
    assert nightly.next_run == datetime(2024, 5, 2, 0, 0, tzinfo=UTC)
    assert nightly.next_run_local.isoformat() == "2024-05-02T02:00:00+02:00"
    assert nightly.timezone == "Europe/Berlin"
    lease = scheduler.queue.claim(QUEUE)
    assert scheduler.queue.complete(lease)
    assert elsewhere.status()[0].last_job_state == JobState.COMPLETED.value
    elsewhere.queue.db.close()


def test_with_an_inline_queue_each_slot_runs_in_the_calling_thread(db):
    from caravel_lite import JobRegistry
    from caravel_lite.testing import InlineQueue
    seen: List[int] = []
    local = JobRegistry()
    local.register("scheduled.seen.v1", Tick, lambda job, ctx: seen.append(job.n))
    clock = ManualClock(T0)
    scheduler = QueueScheduler(InlineQueue(db, local, clock=clock))
    scheduler.every("inline", MINUTE, Tick(7), queue=QUEUE, tenant_id=TENANT)
    assert scheduler.run_once() == 1
    clock.advance(MINUTE)
    assert scheduler.run_once() == 1
    assert seen == [7, 7]
    assert sorted(set(r[0] for r in db.execute_sql("SELECT state FROM caravel_jobs").fetchall())) == [
        JobState.COMPLETED.value]


def _finish_all(queue) -> None:
    while True:
        lease = queue.claim(QUEUE)
        if lease is None:
            return
        assert queue.complete(lease)


def test_a_clock_that_steps_back_does_not_run_a_slot_pruned_at_min_prune_age(db):
    """An NTP step of under a second, back across a slot's start, after a prune at the
    age min_prune_age allows: the slot was handled, and is not enqueued again."""
    from caravel_lite import QueueAdmin
    clock = ManualClock(T0 + timedelta(milliseconds=100))
    scheduler = scheduler_at(db, clock)
    every_minute(scheduler)
    assert scheduler.run_once() == 1  # T0's slot
    _finish_all(scheduler.queue)
    clock.advance(MINUTE + timedelta(milliseconds=200))
    assert scheduler.run_once() == 1  # the next minute's
    _finish_all(scheduler.queue)
    admin = QueueAdmin(db, clock=clock)
    assert admin.prune(scheduler.min_prune_age(), scheduler=scheduler) == 1  # T0's job
    clock.set(T0 + timedelta(seconds=59, milliseconds=500))  # back into T0's minute
    assert scheduler.run_once() == 0
    clock.set(T0 + MINUTE + timedelta(seconds=1))  # and on again: nothing new either
    assert scheduler.run_once() == 0
    clock.advance(MINUTE)
    assert scheduler.run_once() == 1  # the minute after is enqueued as usual
    first = (T0 - datetime(1970, 1, 1, tzinfo=UTC)) // MINUTE
    assert [slot_of(k) - first for k in keys(db)] == [1, 2]


def test_the_retention_rule_pruning_within_the_catch_up_window_runs_slots_again(db):
    clock = ManualClock(T0)
    first = scheduler_at(db, clock)
    every_minute(first, catch_up=timedelta(minutes=10))
    assert first.run_once() == 11
    _finish_all(first.queue)
    clock.advance(timedelta(minutes=3))
    # Pruning keys younger than the window: a restarted scheduler enqueues them again.
    assert first.queue.prune(timedelta(minutes=2)) == 11
    restarted = scheduler_at(db, clock)
    every_minute(restarted, catch_up=timedelta(minutes=10))
    assert restarted.run_once() == 11
    t0_slot = (T0 - datetime(1970, 1, 1, tzinfo=UTC)) // MINUTE
    again = [slot_of(k) for k in keys(db) if slot_of(k) <= t0_slot]
    assert again == list(range(t0_slot - 7, t0_slot + 1))  # eight slots that had run, again


def test_the_retention_rule_pruning_after_the_window_runs_nothing_again(db):
    clock = ManualClock(T0)
    first = scheduler_at(db, clock)
    every_minute(first, catch_up=timedelta(minutes=10))
    assert first.run_once() == 11
    _finish_all(first.queue)
    clock.advance(timedelta(minutes=15))
    older_than = timedelta(minutes=11)  # longer than the catch-up window and the interval
    assert first.queue.prune(older_than) == 11
    restarted = scheduler_at(db, clock)
    every_minute(restarted, catch_up=timedelta(minutes=10))
    assert restarted.run_once() == 11  # T0 + 5 min .. T0 + 15 min: all new slots
    base = slot_of(keys(db)[0])
    assert [slot_of(k) for k in keys(db)] == list(range(base, base + 11))
    assert base == (T0 - datetime(1970, 1, 1, tzinfo=UTC)) // MINUTE + 5


def test_min_prune_age_is_the_longest_interval_or_catch_up_window(db):
    scheduler = scheduler_at(db, ManualClock(T0))
    assert scheduler.min_prune_age() == timedelta(0)
    every_minute(scheduler, "tick")
    assert scheduler.min_prune_age() == MINUTE
    scheduler.cron("nightly", "0 2 * * *", Tick(2), queue=QUEUE, tenant_id=TENANT)
    assert scheduler.min_prune_age() == MINUTE  # a cron slot without catch-up: none needed
    scheduler.cron("hourly", "0 * * * *", Tick(3), queue="other", tenant_id=TENANT,
                   catch_up=timedelta(hours=2))
    scheduler.every("weekly", timedelta(days=7), Tick(4), queue="third", tenant_id=TENANT)
    assert scheduler.min_prune_age() == timedelta(days=7)
    assert scheduler.min_prune_age([QUEUE, "other"]) == timedelta(hours=2)
    assert scheduler.min_prune_age([QUEUE]) == MINUTE
    assert scheduler.min_prune_age(["nowhere"]) == timedelta(0)


def test_admin_prune_with_the_scheduler_refuses_ages_that_let_a_cron_slot_run_again(db):
    """The report: a completed cron slot pruned after a minute was enqueued again."""
    from caravel_lite import QueueAdmin
    clock = ManualClock(datetime(2024, 5, 1, 12, 0, 30, tzinfo=UTC))

    def hourly() -> QueueScheduler:
        scheduler = scheduler_at(db, clock)
        scheduler.cron("hourly", "0 * * * *", Tick(1), queue=QUEUE, tenant_id=TENANT,
                       # as docs/how-to/schedules.md advises for restarts
                       catch_up=timedelta(minutes=5))
        return scheduler
    first = hourly()
    assert first.run_once() == 1
    _finish_all(first.queue)
    clock.advance(timedelta(minutes=2))
    admin = QueueAdmin(db, clock=clock)
    for older_than in (MINUTE, clock() - MINUTE):  # a timedelta and an instant alike
        with pytest.raises(InvalidField) as caught:
            admin.prune(older_than, scheduler=first)
        assert caught.value.field == "older_than"
        assert "0:01:00 is shorter than 0:05:00" in str(caught.value)
    with pytest.raises(InvalidField):
        admin.prune(MINUTE, queue=QUEUE, scheduler=first, dry_run=True)
    assert job_count(db) == 1  # nothing deleted
    assert admin.prune(MINUTE, queue="other", scheduler=first) == 0  # no schedule there
    assert admin.prune(timedelta(minutes=5), scheduler=first) == 0  # long enough
    # What the rule prevents: without it the slot's job goes and a restart makes it anew.
    assert admin.prune(MINUTE) == 1
    assert hourly().run_once() == 1
    assert keys(db) == ["schedule:hourly:cron:2024-05-01T12:00:00Z"]
    with pytest.raises(InvalidField) as caught:
        admin.prune(MINUTE, scheduler=object())
    assert caught.value.field == "scheduler"

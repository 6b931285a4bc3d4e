"""Issue #7, faults 6, 7 and 10, run in the test process with an injected clock:
acknowledgement lost after the handler committed, clock skew between two queues, and
a rolling upgrade from the previous schema revision."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import peewee
import pytest

from caravel_lite import (DatabaseQueue, Dispatch, Failure, JobState, QueueAdmin,
                          QueueOptions, QueueWorker, migrator)
from caravel_lite.dialect import open_database
from tests.faults import jobs, report
from tests.faults.jobs import QUEUE, TENANT, Work, audit

LEASE = timedelta(seconds=10)
RENEW = timedelta(seconds=3)


class Clock:
    def __init__(self, start: datetime, offset: timedelta = timedelta(0)) -> None:
        self.base = start
        self.offset = offset

    def __call__(self) -> datetime:
        return self.base + self.offset


def _options(**extra) -> QueueOptions:
    return QueueOptions(lease_duration=LEASE, lease_renewal_interval=RENEW,
                        retry_delay=timedelta(milliseconds=10), **extra)


class LosingAck(DatabaseQueue):
    """complete() fails like a lost connection, after the handler committed."""

    def complete(self, lease):
        raise peewee.OperationalError("connection lost while acknowledging (simulated)")


def test_acknowledgement_lost_reruns_without_a_second_effect(backend, fault_db):
    clock = Clock(datetime(2030, 1, 1, tzinfo=timezone.utc))
    losing = LosingAck(fault_db, jobs.registry, _options(), clock=clock)
    job_id = str(losing.enqueue(Work(5), Dispatch(queue=QUEUE, tenant_id=TENANT)).job_id)
    with pytest.raises(peewee.OperationalError):
        QueueWorker(losing).run_once(QUEUE)
    healthy = DatabaseQueue(fault_db, jobs.registry, _options(), clock=clock)
    assert healthy.claim(QUEUE) is None, "re-run before the lease expired"
    clock.base += LEASE
    assert QueueWorker(healthy).run_once(QUEUE)
    result = audit(fault_db, [job_id])
    result.assert_clean()
    assert result.executions == 2 and result.rerun == 1
    outcomes = sorted(r[0] for r in fault_db.execute_sql(
        f"SELECT outcome FROM {jobs.RUNS}").fetchall())
    assert outcomes == ["applied", "found"]
    report.add(backend, "jobs_processed", result.completed)


@pytest.mark.parametrize("skew_ms", [-(LEASE - RENEW).total_seconds() * 1000 + 1,
                                     -1000, 1000, (LEASE - RENEW).total_seconds() * 1000 - 1])
def test_clock_skew_below_the_boundary_never_steals_a_renewed_job(backend, fault_db,
                                                                   skew_ms):
    """Boundary: the holder renews every RENEW, so the lease reaches at least
    RENEW short of LEASE ahead of its own clock; another queue whose clock runs ahead
    by less than LEASE - RENEW never sees it expired. Both directions are checked."""
    start = datetime(2030, 1, 1, tzinfo=timezone.utc)
    holder_clock = Clock(start)
    other_clock = Clock(start, timedelta(milliseconds=skew_ms))
    holder = DatabaseQueue(fault_db, jobs.registry, _options(), clock=holder_clock)
    other = DatabaseQueue(fault_db, jobs.registry, _options(), clock=other_clock)
    holder.enqueue(Work(1), Dispatch(queue=QUEUE, tenant_id=TENANT))
    # The later clock must see the job as due: enqueue stamps "now" of the holder.
    lease = holder.claim(QUEUE) if skew_ms >= 0 else None
    if lease is None:
        holder_clock.base = start + timedelta(milliseconds=abs(skew_ms))
        other_clock.base = holder_clock.base
        lease = holder.claim(QUEUE)
    assert lease is not None
    for _ in range(20):  # a minute of renewals, each one RENEW apart
        for clock in (holder_clock, other_clock):
            clock.base += RENEW
        assert other.claim(QUEUE) is None, f"stolen under {skew_ms} ms of skew"
        lease = holder.renew(lease)
        assert lease is not None, "the holder lost a lease it kept renewing"
    assert holder.complete(lease)


def test_clock_skew_beyond_the_boundary_is_detected_by_the_fence(backend, fault_db):
    """Past the documented boundary another queue may take the job, but the holder's
    stale lease can then change nothing: its renewal and completion are refused."""
    start = datetime(2030, 1, 1, tzinfo=timezone.utc)
    holder_clock = Clock(start)
    other_clock = Clock(start, LEASE - RENEW + timedelta(milliseconds=1))
    holder = DatabaseQueue(fault_db, jobs.registry, _options(), clock=holder_clock)
    other = DatabaseQueue(fault_db, jobs.registry, _options(), clock=other_clock)
    holder.enqueue(Work(1), Dispatch(queue=QUEUE, tenant_id=TENANT))
    lease = holder.claim(QUEUE)
    holder_clock.base += RENEW
    other_clock.base += RENEW
    stolen = other.claim(QUEUE)
    assert stolen is not None and stolen.attempt == 2
    assert holder.renew(lease) is None
    assert not holder.complete(lease)
    assert other.complete(stolen)


def _insert_row(db, state: str, attempts: int, now_ms: int, **extra) -> str:
    import uuid
    job_id = str(uuid.uuid4())
    row = dict(id=job_id, queue=QUEUE, tenant_id=TENANT, wire_name=jobs.WIRE_NAME,
               payload='{"crash":false,"n":%d,"work_ms":0}' % attempts, priority=2,
               available_at=now_ms, max_attempts=3, state=state, enqueued_at=now_ms,
               attempts=attempts, renewals=0, replay_count=0, updated_at=now_ms)
    row.update(extra)
    columns = ", ".join(row)
    marks = ", ".join([db.param] * len(row))
    db.execute_sql(f"INSERT INTO caravel_jobs ({columns}) VALUES ({marks})",
                   tuple(row.values()))
    return job_id


def test_rolling_upgrade_from_the_previous_schema(backend, new_database):
    """Rows written under schema N-1 (0001_create_jobs only) in every state are handled
    correctly once the database is migrated to N."""
    db = open_database(new_database())
    db.connect()
    try:
        applied = migrator.runner(db).up("0001_create_jobs")
        assert applied == ["0001_create_jobs"]
        jobs.create_tables(db)
        jobs.use_database(db)
        now = datetime(2030, 1, 1, tzinfo=timezone.utc)
        now_ms = int(now.timestamp() * 1000)
        ids = {
            "pending": _insert_row(db, "pending", 0, now_ms),
            "retrying": _insert_row(db, "pending", 1, now_ms, last_failure="handler_failed"),
            "leased_expired": _insert_row(db, "leased", 1, now_ms, lease_token="a" * 32,
                                          lease_expires_at=now_ms - 1, claimed_at=now_ms),
            "leased_exhausted": _insert_row(db, "leased", 3, now_ms, lease_token="b" * 32,
                                            lease_expires_at=now_ms - 1, claimed_at=now_ms),
            "completed": _insert_row(db, "completed", 1, now_ms, finished_at=now_ms),
            "dead": _insert_row(db, "dead_letter", 3, now_ms, finished_at=now_ms,
                                last_failure="handler_failed"),
        }
        upgraded = migrator.migrate(db)
        assert upgraded and upgraded[0] == "0002_create_outbox"
        assert "0006_failure_history" in upgraded
        migrator.check_schema(db)
        # The operator views read the rows written before the failure history existed:
        # every one listed, the earlier category kept, an empty history.
        admin = QueueAdmin(db, clock=lambda: now)
        assert {str(job.job_id) for job in admin.jobs()} == set(ids.values())
        before = admin.job(ids["dead"])
        assert before.last_failure is Failure.HANDLER_FAILED and before.failures == ()
        assert admin.replay_many(queue=QUEUE, dry_run=True) == 1
        queue = DatabaseQueue(db, jobs.registry, _options(), clock=lambda: now)
        worker = QueueWorker(queue)
        while worker.run_once(QUEUE):
            pass
        state = {name: queue.status(i, queue=QUEUE, tenant_id=TENANT).state
                 for name, i in ids.items()}
        assert state == {"pending": JobState.COMPLETED, "retrying": JobState.COMPLETED,
                         "leased_expired": JobState.COMPLETED,
                         "leased_exhausted": JobState.DEAD_LETTER,
                         "completed": JobState.COMPLETED, "dead": JobState.DEAD_LETTER}
        assert queue.status(ids["leased_exhausted"], queue=QUEUE,
                            tenant_id=TENANT).last_failure is Failure.ATTEMPTS_EXHAUSTED
        assert queue.replay(ids["dead"], queue=QUEUE, tenant_id=TENANT)
        assert worker.run_once(QUEUE)
        done = [ids[k] for k in ("pending", "retrying", "leased_expired", "dead")]
        result = audit(db, done)
        result.assert_clean()
        report.add(backend, "jobs_processed", result.completed)
    finally:
        jobs.use_database(None)
        db.close()

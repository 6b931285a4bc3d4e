"""QueueAdmin's read side on every database: jobs (filters, newest first, keyset
pagination while jobs arrive, payload only on request), job, queues and stats."""
from __future__ import annotations

import uuid
from datetime import datetime, timedelta

import pytest

from caravel_lite import (Dispatch, Failure, InvalidField, JobState, Priority, QueueAdmin)
from caravel_lite.admin import JobPage, JobSummary, QueueStats
from tests.admin.seed import (QUEUES, STATE_OF, TENANTS, Mail, id_boundary, seed)


@pytest.fixture
def seeded(db):
    return seed(db)


@pytest.fixture
def admin(db, seeded):
    return QueueAdmin(db, clock=seeded.clock)


def _ids(page: JobPage):
    return [job.job_id for job in page]


def _newest_first(ids):
    # ids begin with their creation millisecond: text order is creation order.
    return sorted(ids, key=str, reverse=True)


def test_jobs_lists_every_tenant_newest_first_without_payloads(admin, seeded):
    page = admin.jobs(limit=100)
    assert isinstance(page, JobPage) and page.next_cursor is None
    assert _ids(page) == _newest_first(seeded.all)
    assert len(page) == len(QUEUES) * len(TENANTS) * 6
    assert {job.tenant_id for job in page} == set(TENANTS)
    assert all(isinstance(job, JobSummary) and job.payload is None for job in page)
    by_id = {job.job_id: job for job in page}
    for (queue_name, tenant, category), job_id in seeded.ids.items():
        job = by_id[job_id]
        assert (job.queue_name, job.tenant_id, job.state) == (queue_name, tenant,
                                                              STATE_OF[category])
    dead = by_id[seeded.ids[("mail", "tenant-a", "dead")]]
    assert dead.last_failure is Failure.HANDLER_FAILED and dead.finished_at is not None
    assert dead.wire_name == "test.mail.v1" and dead.priority is Priority.NORMAL
    assert by_id[seeded.ids[("mail", "tenant-a", "live")]].lease_expires_at > seeded.clock()


def test_payload_only_on_request(admin, seeded):
    page = admin.jobs(queue="mail", state="completed", include_payload=True)
    assert len(page) == 2 and all(job.payload.startswith('{"n":') for job in page)
    assert "payload" not in repr(page.jobs[0]) or "'{" not in repr(page.jobs[0])


@pytest.mark.parametrize("filters, match", [
    ({"queue": "mail"}, {"queue": "mail"}),
    ({"tenant_id": "tenant-b"}, {"tenant": "tenant-b"}),
    ({"queue": "reports", "tenant_id": "tenant-a"}, {"queue": "reports", "tenant": "tenant-a"}),
])
def test_jobs_filters_by_queue_and_tenant(admin, seeded, filters, match):
    assert _ids(admin.jobs(limit=100, **filters)) == _newest_first(seeded.where(**match))


def test_jobs_filters_by_state_wire_name_and_failure(admin, seeded):
    for category in ("completed", "dead"):
        state = STATE_OF[category]
        expected = _newest_first(seeded.where(category=category))
        assert _ids(admin.jobs(state=state)) == expected
        assert _ids(admin.jobs(state=state.value)) == expected  # the value's text too
    leased = seeded.where(category="live") + seeded.where(category="expired")
    assert _ids(admin.jobs(state=JobState.LEASED)) == _newest_first(leased)
    pending = seeded.where(category="ready") + seeded.where(category="delayed")
    assert _ids(admin.jobs(state="pending", tenant_id="tenant-a")) == _newest_first(
        [j for j in pending if j in seeded.where(tenant="tenant-a")])
    assert _ids(admin.jobs(wire_name="test.report.v1", limit=100)) == _newest_first(
        seeded.where(queue="reports"))
    assert _ids(admin.jobs(failure=Failure.HANDLER_FAILED)) == _newest_first(
        seeded.where(category="dead"))
    assert _ids(admin.jobs(queue="mail", failure="handler_failed")) == _newest_first(
        seeded.where(category="dead", queue="mail"))
    assert len(admin.jobs(failure=Failure.LEASE_EXPIRED)) == 0


def test_jobs_since_and_until_bound_the_creation_time(admin, seeded, db):
    boundary = id_boundary()
    later = [seeded.queue.enqueue(Mail(100 + n), Dispatch(queue="mail", tenant_id="tenant-a"))
             .job_id for n in range(3)]
    assert _ids(admin.jobs(since=boundary)) == _newest_first(later)
    assert _ids(admin.jobs(queue="mail", since=boundary)) == _newest_first(later)
    assert _ids(admin.jobs(until=boundary, limit=100)) == _newest_first(seeded.all)
    assert _ids(admin.jobs(state="pending", until=boundary, limit=100)) == _newest_first(
        seeded.where(category="ready") + seeded.where(category="delayed"))
    # A timedelta counts back from the admin's clock, which is in 2030: everything is
    # created within the last ten years of it.
    assert len(admin.jobs(since=timedelta(days=3650), limit=100)) == len(seeded.all) + 3


def test_pagination_misses_and_repeats_nothing_while_jobs_arrive(admin, seeded, backend):
    seen = []
    extra = []
    cursor = None
    while True:
        page = admin.jobs(limit=5, after=cursor)
        seen += _ids(page)
        for n in range(2):  # new jobs arrive between pages, in every filter's view
            extra.append(seeded.queue.enqueue(
                Mail(500 + len(extra)), Dispatch(queue="mail", tenant_id="tenant-a")).job_id)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert len(seen) == len(set(seen)), "a job was listed twice"
    assert set(seeded.all) <= set(seen), "a job was missed"
    assert set(seen) - set(seeded.all) <= set(extra)
    assert seen == _newest_first(seen)
    # The same with a filter merged across states.
    seen, cursor = [], None
    while True:
        page = admin.jobs(queue="reports", limit=4, after=cursor)
        seen += _ids(page)
        seeded.queue.enqueue(Mail(999), Dispatch(queue="reports", tenant_id="tenant-b"))
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    reports = seeded.where(queue="reports")
    assert seen[:len(reports)] == _newest_first(reports) and len(seen) == len(set(seen))


def test_job_shows_the_envelope_and_payload_only_on_request(admin, seeded):
    job_id = seeded.ids[("reports", "tenant-b", "dead")]
    detail = admin.job(job_id)
    assert detail.job_id == job_id and detail.state is JobState.DEAD_LETTER
    assert (detail.queue_name, detail.tenant_id) == ("reports", "tenant-b")
    assert detail.payload is None and detail.attempts == 1 and detail.claimed_at is not None
    assert detail.idempotency_key is None and detail.renewals == 0
    assert [f.category for f in detail.failures] == [Failure.HANDLER_FAILED]
    assert admin.job(str(job_id), include_payload=True).payload.startswith('{"n":')
    assert admin.job(uuid.uuid4()) is None
    with pytest.raises(InvalidField) as info:
        admin.job("not-an-id")
    assert info.value.field == "job_id"


def test_queues_lists_names_in_use(admin):
    assert admin.queues() == QUEUES


def test_stats_counts_every_category_per_queue(admin, seeded):
    stats = admin.stats()
    assert isinstance(stats, QueueStats) and stats.observed_at == seeded.clock()
    assert stats.since == seeded.clock() - timedelta(hours=1)
    assert [q.queue_name for q in stats.queues] == list(QUEUES)
    for summary in stats.queues:
        assert (summary.ready, summary.delayed, summary.leased, summary.expired,
                summary.dead_letter, summary.completed, summary.failed) == (2, 2, 2, 2, 2, 2, 2)
        ready = [j for j in seeded.where(queue=summary.queue_name, category="ready")]
        assert summary.oldest_ready_at == min(admin.job(j).available_at for j in ready)
        assert summary.oldest_ready_age == seeded.clock() - summary.oldest_ready_at
    assert sum(m.completed for m in stats.per_minute) == 4
    assert sum(m.failed for m in stats.per_minute) == 4
    assert sum(m.dead_lettered for m in stats.per_minute) == 4
    assert all(m.minute.second == 0 and m.minute.microsecond == 0 for m in stats.per_minute)
    # every finished job was claimed 40 ms after it was due
    assert stats.pickup_p50 == stats.pickup_p95 == timedelta(milliseconds=40)
    assert stats.pickup_sample == 8
    assert stats.tenants == ()


def test_stats_of_one_queue_by_tenant_and_window(admin, seeded):
    one = admin.stats(queue="mail", by_tenant=True)
    assert [q.queue_name for q in one.queues] == ["mail"]
    assert sum(m.completed for m in one.per_minute) == 2
    assert [(t.queue_name, t.tenant_id) for t in one.tenants] == [("mail", "tenant-a"),
                                                                 ("mail", "tenant-b")]
    for counts in one.tenants:
        assert (counts.ready, counts.delayed, counts.leased, counts.expired,
                counts.dead_letter) == (1, 1, 1, 1, 1)
    seeded.clock.advance(timedelta(hours=2))
    later = admin.stats()
    assert later.per_minute == () and later.pickup_p50 is None and later.pickup_sample == 0
    assert all(q.completed == 0 and q.failed == 0 and q.dead_letter == 2 for q in later.queues)
    assert all(q.expired == 4 - 0 - q.leased for q in later.queues)  # all leases ran out
    assert admin.stats(since=timedelta(days=1)).queues[0].completed == 2
    empty = admin.stats(queue="nothing-here")
    assert empty.queues[0].ready == 0 and empty.queues[0].oldest_ready_at is None


@pytest.mark.parametrize("call, field", [
    (lambda a: a.jobs(state="running"), "state"),
    (lambda a: a.jobs(failure="oops"), "failure"),
    (lambda a: a.jobs(limit=0), "limit"),
    (lambda a: a.jobs(limit=1001), "limit"),
    (lambda a: a.jobs(after="nope"), "after"),
    (lambda a: a.jobs(queue="Bad Queue"), "queue"),
    (lambda a: a.jobs(tenant_id=" "), "tenant_id"),
    (lambda a: a.jobs(since=datetime(2030, 1, 1)), "since"),
    (lambda a: a.jobs(until=timedelta(seconds=-1)), "until"),
    (lambda a: a.stats(queue="UPPER"), "queue"),
    (lambda a: a.stats(since="1h"), "since"),
])
def test_bad_arguments_name_the_field(admin, call, field):
    with pytest.raises(InvalidField) as info:
        call(admin)
    assert info.value.field == field


def test_constructor_checks_its_arguments(db):
    with pytest.raises(InvalidField):
        QueueAdmin("sqlite:///x.db")
    with pytest.raises(InvalidField):
        QueueAdmin(db, clock="now")

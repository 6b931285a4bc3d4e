"""QueueAdmin's actions on every database: replay_many (and its dry run), discard,
delete, prune in batches (also while a worker claims), paced by the dialect: the batch
size it uses unless given, and the pause it asks for after each batch (requested of a
recording sleep, never timed)."""
from __future__ import annotations

import dataclasses
import uuid
from datetime import timedelta

import pytest

from caravel_lite import Dispatch, Failure, InvalidField, JobState, QueueAdmin
from caravel_lite.admin import PruneProgress, retention
from caravel_lite.clock import now_micros
from caravel_lite.dialect import MARIADB, MYSQL, POSTGRES, SQLITE, PrunePacing
from tests.admin import races
from tests.admin.seed import Mail, make_queue, seed
from tests.contract.jobs import row_count
from tests.support import wait_for
from tests.worker.metrics import Metrics


@pytest.fixture
def seeded(db):
    return seed(db)


@pytest.fixture
def admin(db, seeded):
    return QueueAdmin(db, clock=seeded.clock)


def _states(admin, ids):
    return {job_id: admin.job(job_id).state for job_id in ids}


def test_replay_many_replays_matching_dead_letters_across_tenants(admin, seeded):
    dead = seeded.where(category="dead")
    assert admin.replay_many(queue="mail", dry_run=True) == 2
    assert set(_states(admin, dead).values()) == {JobState.DEAD_LETTER}
    assert admin.replay_many(queue="mail", failure="lease_expired") == 0
    assert admin.replay_many(queue="mail", failure=Failure.HANDLER_FAILED) == 2
    for job_id in dead:
        job = admin.job(job_id)
        if job.queue_name == "mail":
            assert (job.state, job.attempts, job.replay_count, job.last_failure,
                    job.finished_at) == (JobState.PENDING, 0, 1, None, None)
            # due now (floor of the clock's millisecond)
            assert seeded.clock() - timedelta(milliseconds=1) < job.available_at <= seeded.clock()
        else:
            assert job.state is JobState.DEAD_LETTER
    assert admin.replay_many(queue="mail") == 0  # no longer dead
    assert admin.replay_many(tenant_id="tenant-b") == 1  # reports' tenant-b
    assert admin.replay_many(state=None) == 1
    assert admin.replay_many() == 0
    with pytest.raises(InvalidField) as info:
        admin.replay_many(state=JobState.COMPLETED)
    assert info.value.field == "state"


def test_replay_many_works_in_batches(db, seeded, monkeypatch):
    import caravel_lite.admin as admin_module

    queue = make_queue(db, seeded.clock)
    extra = []
    for n in range(7):
        job_id = queue.enqueue(Mail(n), Dispatch(queue="bulk", tenant_id=f"t-{n % 3}")).job_id
        lease = queue.claim("bulk")
        assert queue.fail(lease, Failure.HANDLER_FAILED)
        extra.append(job_id)
    monkeypatch.setattr(admin_module, "ACTION_BATCH", 3)
    admin = QueueAdmin(db, clock=seeded.clock)
    assert admin.replay_many(queue="bulk", dry_run=True) == 7
    assert admin.replay_many(queue="bulk") == 7
    assert set(_states(admin, extra).values()) == {JobState.PENDING}


def test_discard_moves_only_pending_jobs_to_dead_letter(admin, seeded):
    for category in ("ready", "delayed"):
        job_id = seeded.ids[("mail", "tenant-b", category)]
        assert admin.discard(job_id) is True
        job = admin.job(job_id)
        assert job.state is JobState.DEAD_LETTER and job.last_failure is Failure.DISCARDED
        assert seeded.clock() - timedelta(milliseconds=1) < job.finished_at <= seeded.clock()
        assert admin.discard(job_id) is False
    for category in ("live", "expired", "completed", "dead"):
        job_id = seeded.ids[("mail", "tenant-b", category)]
        before = admin.job(job_id)
        assert admin.discard(job_id) is False
        assert admin.job(job_id) == before
    assert admin.discard(uuid.uuid4()) is False
    # a discarded job can be replayed like any dead letter
    assert admin.replay_many(failure=Failure.DISCARDED) == 2


def test_discard_counts_a_dead_letter_as_the_worker_does(db, seeded):
    metrics = Metrics()
    admin = QueueAdmin(db, clock=seeded.clock, telemetry=metrics.telemetry)
    assert admin.discard(seeded.ids[("mail", "tenant-a", "ready")]) is True
    assert admin.discard(seeded.ids[("reports", "tenant-b", "delayed")]) is True
    # refused discards count nothing
    assert admin.discard(seeded.ids[("mail", "tenant-a", "ready")]) is False
    assert admin.discard(seeded.ids[("mail", "tenant-a", "live")]) is False
    assert admin.discard(uuid.uuid4()) is False
    assert metrics.totals() == {("deadlettered", "discarded"): 2}
    assert _points(metrics, "deadlettered") == {("mail", "discarded"): 1,
                                                ("reports", "discarded"): 1}


def _points(metrics, name):
    data = metrics.reader.get_metrics_data()
    return {(p.attributes["queue"], p.attributes.get("failure")): p.value
            for resource in data.resource_metrics for scope in resource.scope_metrics
            for metric in scope.metrics if metric.name == f"caravel.queue.jobs.{name}"
            for p in metric.data.data_points}


def test_delete_any_tenant_but_never_a_leased_job(admin, seeded, db):
    for category in ("live", "expired"):
        job_id = seeded.ids[("reports", "tenant-a", category)]
        assert admin.delete(job_id) is False
        assert admin.job(job_id).state is JobState.LEASED
    for category in ("ready", "completed", "dead"):
        job_id = seeded.ids[("reports", "tenant-a", category)]
        assert admin.delete(job_id) is True
        assert admin.job(job_id) is None
        assert admin.delete(job_id) is False
    assert row_count(db, "caravel_failures") == 3  # the deleted dead letter's is gone


def test_prune_deletes_old_finished_jobs_in_batches(db, seeded, admin):
    queue = make_queue(db, seeded.clock)
    for n in range(25):
        queue.enqueue(Mail(n), Dispatch(queue="old", tenant_id="t"))
        lease = queue.claim("old")
        assert queue.complete(lease) if n % 5 else queue.fail(lease, Failure.HANDLER_FAILED)
    seeded.clock.advance(timedelta(days=8))
    pending = queue.enqueue(Mail(99), Dispatch(queue="old", tenant_id="t")).job_id
    seen = []
    assert admin.prune(timedelta(days=7), states=["completed"], queue="old", batch_size=6,
                       progress=seen.append) == 20
    assert seen[0] == PruneProgress(0, 20, 0)
    assert [p.deleted for p in seen[1:]] == [6, 12, 18, 20]
    assert seen[-1] == PruneProgress(20, 20, 4)
    assert admin.stats(queue="old").queues[0].dead_letter == 5
    assert admin.prune(timedelta(days=7), batch_size=2) == 5 + 8  # + the seed's finished
    assert {job.job_id for job in admin.jobs(limit=100)} >= {pending}
    assert all(job.state in (JobState.PENDING, JobState.LEASED)
               for job in admin.jobs(limit=100))
    assert row_count(db, "caravel_failures") == 0
    assert admin.prune(timedelta(0)) == 0


@pytest.mark.parametrize("call, field", [
    (lambda a: a.prune(timedelta(days=1), states=["pending"]), "states"),
    (lambda a: a.prune(timedelta(days=1), states=[]), "states"),
    (lambda a: a.prune(timedelta(days=-1)), "older_than"),
    (lambda a: a.prune("7d"), "older_than"),
    (lambda a: a.prune(timedelta(days=1), batch_size=0), "batch_size"),
    (lambda a: a.prune(timedelta(days=1), batch_size=10_001, dry_run=True), "batch_size"),
    (lambda a: a.prune(timedelta(days=1), queue="A"), "queue"),
    (lambda a: a.prune(timedelta(days=1), progress="yes"), "progress"),
    (lambda a: a.discard("x"), "job_id"),
    (lambda a: a.delete(42), "job_id"),
])
def test_bad_action_arguments_name_the_field_and_change_nothing(admin, db, call, field):
    before = row_count(db)
    with pytest.raises(InvalidField) as info:
        call(admin)
    assert info.value.field == field
    assert row_count(db) == before


def test_prune_while_a_worker_claims_never_deletes_pending_or_leased_jobs(db, connect,
                                                                          seeded):
    """A worker drains a queue on its own connection while prune deletes old history
    in small batches: every job enqueued is completed exactly once and none is lost;
    only old finished rows go."""
    clock = seeded.clock
    history = make_queue(db, clock)
    for n in range(60):
        history.enqueue(Mail(n), Dispatch(queue="busy", tenant_id="t"))
        assert history.complete(history.claim("busy"))
    clock.advance(timedelta(days=2))
    fresh = [history.enqueue(Mail(1000 + n), Dispatch(queue="busy", tenant_id="t")).job_id
             for n in range(40)]
    worker = races.WorkerThread(connect(), clock, "busy", max_attempts=3)
    admin = QueueAdmin(db, clock=clock)
    try:
        pruned = admin.prune(timedelta(days=1), batch_size=7)
        wait_for(lambda: len(worker.ran) >= len(fresh) or worker.errors, timeout=60,
                 message="the worker to drain the fresh jobs")
    finally:
        worker.stop()
    assert not worker.errors, worker.errors
    assert pruned == 60 + 4 + 4  # the old history and the seed's finished jobs
    for job_id in fresh:
        assert admin.job(job_id).state is JobState.COMPLETED
    for job_id in seeded.where(category="ready") + seeded.where(category="live"):
        assert admin.job(job_id) is not None


class Ticking:
    """A monotonic timer that moves ``tick`` seconds at every reading: each batch's
    transaction, read before and after, seems to take exactly ``tick``."""

    def __init__(self, tick):
        self.now = 0.0
        self.tick = tick

    def __call__(self):
        self.now += self.tick
        return self.now


def _old_history(db, clock, completed, dead, queue_name="old"):
    """``completed`` and ``dead`` finished jobs of ``queue_name``, then 8 days on."""
    queue = make_queue(db, clock)
    for n in range(completed + dead):
        queue.enqueue(Mail(n), Dispatch(queue=queue_name, tenant_id="t"))
        lease = queue.claim(queue_name)
        assert queue.complete(lease) if n < completed else queue.fail(
            lease, Failure.HANDLER_FAILED)
    clock.advance(timedelta(days=8))
    return retention.cutoff_ms(timedelta(days=7), now_micros(clock))


def test_prune_pacing_of_each_dialect():
    # One writer at a time: small batches, and a pause longer than the batch by more
    # than SQLite's busy handler can oversleep (2 ms), so that a claim that waited
    # for the batch wakes inside the pause.
    sqlite = SQLITE.prune_pacing
    assert sqlite.batch == 100
    for took in (0.0, 0.001, 0.004, 0.05):
        assert sqlite.pause(took) >= took + 0.002
    # Row locks: claims never wait for a batch's rows; larger batches, shorter pauses.
    for dialect in (POSTGRES, MARIADB, MYSQL, MARIADB.portable()):
        pacing = dialect.prune_pacing
        assert pacing.batch == 1000
        assert 0 < pacing.pause(0.05) < 0.05
    assert PrunePacing(10, 0.5, 0.001).pause(-1.0) == 0.001  # a timer going back


def test_prune_pauses_after_each_batch_for_as_long_as_the_pacing_asks(db, seeded):
    cutoff = _old_history(db, seeded.clock, completed=10, dead=3)
    pauses = []
    pruner = retention.Pruner(db, sleep=pauses.append, timer=Ticking(0.03))
    seen = []
    assert pruner.prune(cutoff, (JobState.COMPLETED, JobState.DEAD_LETTER), "old", 4,
                        progress=seen.append) == 13
    # completed 4, 4, 2, then the dead letters 3: a pause before every batch but the
    # first, none after the last (it is owed, for the worker to wait out).
    assert [p.deleted for p in seen[1:]] == [4, 8, 10, 13]
    assert pauses == [pruner.pacing.pause(0.03)] * 3
    assert pruner.last_pause == pruner.pacing.pause(0.03)
    assert pruner.prune(cutoff, (JobState.COMPLETED, JobState.DEAD_LETTER), "old", 4) == 0
    assert pauses == [pruner.pacing.pause(0.03)] * 3 and pruner.last_pause == 0.0


def test_prune_takes_the_dialects_batch_size_unless_given_one(db, seeded):
    cutoff = _old_history(db, seeded.clock, completed=8, dead=0)
    pauses = []
    pruner = retention.Pruner(db, sleep=pauses.append, timer=Ticking(0.01))
    assert pruner.pacing == pruner.dialect.prune_pacing
    pruner.pacing = dataclasses.replace(pruner.pacing, batch=3)
    seen = []
    assert pruner.prune(cutoff, [JobState.COMPLETED], "old", progress=seen.append,
                        max_batches=2) == 6
    assert [p.deleted for p in seen[1:]] == [3, 6]
    assert len(pauses) == 1  # none after the last batch
    seen.clear()
    assert pruner.prune(cutoff, [JobState.COMPLETED], "old", 5, progress=seen.append) == 2
    assert [p.deleted for p in seen[1:]] == [2]


def test_the_admins_prune_uses_the_dialects_batch_size_by_default(db, seeded, admin,
                                                                  monkeypatch):
    real = retention.dialect_of(db)
    small = dataclasses.replace(real, prune_pacing=PrunePacing(batch=4, share=0.0))
    monkeypatch.setattr(retention, "dialect_of", lambda _db: small)
    _old_history(db, seeded.clock, completed=10, dead=0)
    paced = QueueAdmin(db, clock=seeded.clock)
    seen = []
    assert paced.prune(timedelta(days=7), states=["completed"], queue="old",
                       progress=seen.append) == 10
    assert [p.deleted for p in seen[1:]] == [4, 8, 10]


def test_no_pause_inside_the_callers_own_transaction(db, seeded):
    cutoff = _old_history(db, seeded.clock, completed=5, dead=0)
    pauses = []
    pruner = retention.Pruner(db, sleep=pauses.append, timer=Ticking(0.01))
    with db.atomic():  # its locks stay held: pausing would only hold them longer
        assert pruner.prune(cutoff, (JobState.COMPLETED, JobState.DEAD_LETTER), "old", 2) == 5
    assert pauses == []
    assert db.execute_sql("SELECT COUNT(*) FROM caravel_jobs WHERE queue = " + db.param,
                          ("old",)).fetchone()[0] == 0


def test_replay_one_job_of_any_tenant(admin, seeded):
    dead = seeded.ids[("reports", "tenant-b", "dead")]
    assert admin.replay(dead) is True
    job = admin.job(dead)
    assert (job.state, job.attempts, job.replay_count) == (JobState.PENDING, 0, 1)
    assert admin.replay(dead) is False
    for category in ("completed", "live", "ready"):
        job_id = seeded.ids[("reports", "tenant-b", category)]
        before = admin.job(job_id)
        assert admin.replay(str(job_id)) is False
        assert admin.job(job_id) == before
    assert admin.replay(uuid.uuid4()) is False

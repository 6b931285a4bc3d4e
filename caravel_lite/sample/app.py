"""The sample application: its two databases, its idempotent handler and its queue.

The results table is keyed by job id, so a job that runs twice (a worker crashed after
saving its result but before acknowledging) finds its own row, checks that it matches
and is acknowledged without being counted again.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
import time
from datetime import timedelta
from typing import Any, Callable, Dict, Iterator, List, Optional, TypeVar
from urllib.parse import quote

import peewee

from caravel_lite import migrator
from caravel_lite.clock import floor_ms, now_micros, system_clock
from caravel_lite.dialect import dialect_of, open_database
from caravel_lite.options import QueueOptions
from caravel_lite.queue import DatabaseQueue
from caravel_lite.registry import JobRegistry
from caravel_lite.schema import HISTORY_TABLE
from caravel_lite.sample import (CRASH_EXIT_CODE, QUANTITIES, QUEUE, TALLY_WIRE_NAME,
                                 TENANT, WIRE_NAME, RecordQuantity, TallyQuantity)
from caravel_lite.sample.config import SampleConfig
from caravel_lite.values import Dispatch, EnqueueResult, JobContext, QueueCounts

RESULTS_TABLE = "sample_results"
# Distinct from the queue's own history table, so queue and results may share a database.
RESULTS_HISTORY_TABLE = "caravel_sample_migrations"
# The second handler's table lives in the queue's database (migrations/sample_queue).
TALLIES_TABLE = "sample_tallies"
TALLIES_MIGRATIONS = "sample_queue"
TALLIES_HISTORY_TABLE = "caravel_sample_queue_migrations"

T = TypeVar("T")


class SampleRejected(ValueError):
    """The handler refuses a job outside the sample's tenant, queue or quantities; the
    worker records HANDLER_FAILED."""


class NotMigrated(RuntimeError):
    """A database is missing or has pending migrations (the command exits 1)."""

    def __init__(self, pending: Dict[str, List[str]], detail: Optional[str] = None) -> None:
        self.pending = pending
        if detail is None:
            detail = "pending migrations: " + "; ".join(
                f"{part} {', '.join(scripts)}" for part, scripts in pending.items())
        super().__init__(f"the sample's databases are not migrated ({detail}); "
                         f"run `python -m caravel_lite.sample --migrate` first")


def results_model(db: peewee.Database) -> Any:  # a model class bound to db
    """The runtime model of the results table created by migrations/sample."""

    class Result(peewee.Model):
        job_id = peewee.CharField(max_length=36, primary_key=True)
        tenant_id = peewee.CharField(max_length=128)
        queue = peewee.CharField(max_length=64)
        quantity = peewee.IntegerField()
        recorded_at = peewee.BigIntegerField()

        class Meta:
            database = db
            table_name = RESULTS_TABLE

    return Result


def write_atomically(path: str, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it over ``path``,
    so a reader sees either nothing or the whole content."""
    directory = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".caravel-")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


@contextlib.contextmanager
def connected(db: peewee.Database) -> Iterator[peewee.Database]:
    """Use the calling thread's connection, opening (and afterwards closing) one only
    when there is none."""
    opened = db.is_closed()
    if opened:
        db.connect()
    try:
        yield db
    finally:
        if opened and not db.is_closed():
            db.close()


class SampleApp:
    """Everything one sample process needs. Opening it connects to nothing."""

    def __init__(self, config: SampleConfig) -> None:
        self.config = config
        if config.uses_files:
            # Overriding the database keeps unusual characters in the path out of a URL.
            self.queue_db = open_database("sqlite:///queue.db", database=config.queue_path)
            self.results_db = open_database("sqlite:///results.db",
                                            database=config.results_path)
        else:
            assert config.queue_url is not None and config.results_url is not None
            self.queue_db = open_database(config.queue_url)
            self.results_db = open_database(config.results_url)
        self.Result = results_model(self.results_db)
        self._queue: Optional[DatabaseQueue] = None

    # -- schema ------------------------------------------------------------------------

    def migrate(self) -> List[str]:
        """Apply the queue's and the results' pending migrations; returns their names."""
        with connected(self.queue_db):
            applied = migrator.migrate(self.queue_db)
            applied += migrator.runner(self.queue_db, TALLIES_MIGRATIONS,
                                       TALLIES_HISTORY_TABLE).up()
        with connected(self.results_db):
            applied += migrator.runner(self.results_db, migrator.SAMPLE_MIGRATIONS,
                                       RESULTS_HISTORY_TABLE).up()
        return applied

    def pending(self) -> Dict[str, List[str]]:
        """Pending migrations per database (empty when fully migrated). A missing SQLite
        file counts as all pending and is not created."""
        parts = (("queue", self.queue_db, migrator.QUEUE_MIGRATIONS, HISTORY_TABLE),
                 ("tallies", self.queue_db, TALLIES_MIGRATIONS, TALLIES_HISTORY_TABLE),
                 ("results", self.results_db, migrator.SAMPLE_MIGRATIONS,
                  RESULTS_HISTORY_TABLE))
        pending: Dict[str, List[str]] = {}
        for part, db, scripts, history in parts:
            if self.config.uses_files and not os.path.exists(db.database):
                names = [m.name for m in migrator.runner(db, scripts, history).migrations()]
            else:
                with connected(db):
                    names = migrator.pending_migrations(db, scripts, history)
            if names:
                pending[part] = names
        return pending

    def require_migrated(self) -> None:
        pending = self.pending()
        if pending:
            raise NotMigrated(pending)

    # -- the queue and its handler -------------------------------------------------------

    @property
    def queue(self) -> DatabaseQueue:
        if self._queue is None:
            registry = JobRegistry()
            registry.register(WIRE_NAME, RecordQuantity, self.record_quantity)
            registry.register(TALLY_WIRE_NAME, TallyQuantity, self.record_tally)
            options = QueueOptions(lease_duration=timedelta(seconds=self.config.lease_seconds))
            self._queue = DatabaseQueue(self.queue_db, registry, options)
        return self._queue

    def enqueue_demo(self) -> List[EnqueueResult]:
        """Quantities 1, 2 and 3 under keys demo-1..3: a repeat returns the same jobs."""
        with connected(self.queue_db):
            return [self.queue.enqueue(RecordQuantity(quantity),
                                       Dispatch(queue=QUEUE, tenant_id=TENANT,
                                                idempotency_key=f"demo-{quantity}"))
                    for quantity in QUANTITIES]

    def record_quantity(self, job: RecordQuantity, ctx: JobContext) -> None:
        """The handler: save the job's result once, keyed by its id.

        At least once delivery means this may run again for the same job; the second
        run finds the row, checks it describes the same work and returns without
        counting it again.
        """
        check_job(job, ctx)
        with connected(self.results_db):
            self._save_result(job, ctx)
        # The result is committed; what follows happens before the worker acknowledges.
        if self.config.crash_after_result:
            os._exit(CRASH_EXIT_CODE)  # simulate a crash: no cleanup, no acknowledgement
        if self.config.sigterm_ready is not None:
            self._hold_until_cancelled(ctx)

    def enqueue_tallies(self) -> List[EnqueueResult]:
        """Tally jobs for quantities 1, 2 and 3 under keys tally-1..3."""
        with connected(self.queue_db):
            return [self.queue.enqueue(TallyQuantity(quantity),
                                       Dispatch(queue=QUEUE, tenant_id=TENANT,
                                                idempotency_key=f"tally-{quantity}"))
                    for quantity in QUANTITIES]

    def record_tally(self, job: TallyQuantity, ctx: JobContext) -> None:
        """The second handler: add the quantity to the tallies, with no check for an
        earlier run. Its write and the job's completion commit together
        (``ctx.transaction()``, fenced by the lease): once committed the job never runs
        again, and a run that did not commit left nothing."""
        check_job(job, ctx)
        with ctx.transaction() as db:
            db.execute_sql(f"INSERT INTO {TALLIES_TABLE} (job_id, tenant_id, quantity, "
                           f"recorded_at) VALUES ({db.param}, {db.param}, {db.param}, "
                           f"{db.param})", (str(ctx.job_id), ctx.tenant_id, job.quantity,
                                            floor_ms(now_micros(system_clock))))
        if self.config.crash_after_result:  # committed: the job is completed already
            os._exit(CRASH_EXIT_CODE)

    def tally_report(self) -> Dict[str, int]:
        """Tallies recorded, their sum, and jobs recorded more than once (always 0)."""
        with connected(self.queue_db):
            events, total = self.queue_db.execute_sql(
                f"SELECT COUNT(*), COALESCE(SUM(quantity), 0) FROM {TALLIES_TABLE}").fetchone()
            doubled = self.queue_db.execute_sql(
                f"SELECT COUNT(*) FROM (SELECT job_id FROM {TALLIES_TABLE} GROUP BY job_id "
                f"HAVING COUNT(*) > 1) twice").fetchone()[0]
        return {"events": int(events), "total": int(total), "doubled": int(doubled)}

    def _save_result(self, job: RecordQuantity, ctx: JobContext) -> None:
        Result = self.Result
        job_id = str(ctx.job_id)
        for _ in range(2):
            try:
                with dialect_of(self.results_db).write_transaction(self.results_db):
                    row = Result.get_or_none(Result.job_id == job_id)
                    if row is None:
                        Result.create(job_id=job_id, tenant_id=ctx.tenant_id, queue=ctx.queue,
                                      quantity=job.quantity,
                                      recorded_at=floor_ms(now_micros(system_clock)))
                        return
            except peewee.IntegrityError:
                continue  # another run of the same job saved it first: check theirs
            if (row.tenant_id, row.queue, row.quantity) != (ctx.tenant_id, ctx.queue,
                                                            job.quantity):
                raise SampleRejected(f"job {job_id} already has a different result")
            return
        raise SampleRejected(f"job {job_id}: could not save or read its result")

    def _hold_until_cancelled(self, ctx: JobContext) -> None:
        """Smoke-test hook: announce that the result is saved, then wait for shutdown."""
        job_id = str(ctx.job_id)
        assert self.config.sigterm_ready is not None  # the caller checked
        write_atomically(self.config.sigterm_ready, job_id)
        # Short waits keep the main thread responsive to signals.
        while not ctx.cancelled.wait(0.1):
            pass
        if self.config.sigterm_cancelled is not None:
            write_atomically(self.config.sigterm_cancelled, job_id)
        ctx.raise_if_cancelled()  # stop without acknowledging

    # -- reading -------------------------------------------------------------------------

    def report(self) -> Dict[str, int]:
        """How many results are saved and the sum of their quantities."""
        Result = self.Result
        with connected(self.results_db):
            events, total = (Result.select(peewee.fn.COUNT(Result.job_id),
                                           peewee.fn.COALESCE(peewee.fn.SUM(Result.quantity), 0))
                             .tuples().get())
        return {"events": int(events), "total": int(total)}

    def counts(self) -> QueueCounts:
        """The sample tenant's counts in the sample's queue."""
        with connected(self.queue_db):
            return self.queue.counts(QUEUE, TENANT)


def check_job(job: object, ctx: JobContext) -> None:
    """Refuse anything but the sample's own tenant, queue and quantities."""
    if ctx.tenant_id != TENANT or ctx.queue != QUEUE:
        raise SampleRejected("the sample only handles its own tenant and queue")
    quantity = getattr(job, "quantity", None)
    if type(quantity) is not int or quantity not in QUANTITIES:
        raise SampleRejected("the sample only records quantities 1, 2 and 3")


def read_only_counts(config: SampleConfig) -> QueueCounts:
    """Queue counts without writing anything: on SQLite the file is opened read-only
    (a missing file is an error, never created); on a server the counts are read in a
    READ ONLY transaction. Only the sample's own tenant is counted: other tenants may
    share the queue. Raises :class:`NotMigrated` on an unmigrated database."""
    if config.uses_files:
        path = os.path.abspath(config.queue_path)
        if not os.path.isfile(path):
            raise NotMigrated({}, f"{path} does not exist")
        db = open_database("sqlite:///queue.db", database="file:" + quote(path) + "?mode=ro",
                           uri=True, pragmas={"journal_mode": None, "query_only": 1})
    else:
        assert config.queue_url is not None  # no directory: a server URL (config.py)
        db = open_database(config.queue_url)
    with connected(db):
        pending = migrator.pending_migrations(db)
        if pending:
            raise NotMigrated({"queue": pending})
        queue = DatabaseQueue(db, JobRegistry())
        if config.uses_files:
            return queue.counts(QUEUE, TENANT)
        db.execute_sql("START TRANSACTION READ ONLY")
        try:
            return queue.counts(QUEUE, TENANT)
        finally:
            db.execute_sql("ROLLBACK")


def wait_until(condition: Callable[[], T], timeout: float, interval: float = 0.1) -> T:
    """Poll ``condition`` until it returns something truthy; after ``timeout``, its last
    (falsy) value."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


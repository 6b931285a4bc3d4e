"""The schedules of the browser test's application, for ``caravel-lite dashboard
--scheduler tests.web.schedules_app:scheduler``: a scheduler over the database named
by ``CARAVEL_TEST_SCHEDULE_DATABASE`` (the test sets it)."""
from __future__ import annotations

import os
from datetime import timedelta

from caravel_lite import DatabaseQueue, QueueScheduler, open_database
from tests.web.seed import Mail, registry


def add_schedules(scheduler: QueueScheduler) -> QueueScheduler:
    scheduler.every("digest.hourly", timedelta(hours=1), Mail(1), queue="emails",
                    tenant_id="tenant-b")
    scheduler.cron("reports.nightly-summary-for-accounting", "0 2 * * *", Mail(2),
                   queue="reports", tenant_id="acct_7f3a9c0e8b7d4e11a3c5",
                   timezone="America/Argentina/Buenos_Aires", catch_up=timedelta(hours=6))
    return scheduler


def scheduler() -> QueueScheduler:
    db = open_database(os.environ["CARAVEL_TEST_SCHEDULE_DATABASE"])
    return add_schedules(QueueScheduler(DatabaseQueue(db, registry)))

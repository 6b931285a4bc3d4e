"""ctx.progress (stored at most once a second per job, none when unchanged) and the
opt-in recorded errors (issue 25): off by default, on with redaction, 1 KiB cap, a
short traceback without locals, from the command-line worker with --record-errors."""
from __future__ import annotations

import json
import signal

import pytest

from caravel_lite import (DatabaseQueue, Dispatch, Failure, InvalidField, JobContext,
                          QueueAdmin, QueueOptions, QueueWorker)
from caravel_lite import progress as progress_module
from caravel_lite.cli import operating
from caravel_lite.worker import renewals
from tests.cli import procs
from tests.control.app import QUEUE, READY_ENV, TENANT, Boom, Steps, registry
from tests.control.helpers import Running, enqueue, wait_ready
from tests.support import wait_for


def test_progress_values_are_checked(db):
    ctx = JobContext(job_id=__import__("uuid").uuid4(), queue=QUEUE, tenant_id=TENANT,
                     attempt=1)
    ctx.progress(3, 10)  # outside a worker: only checked
    for done, total, field in ((-1, None, "done"), (True, None, "done"), (1, 2.5, "total")):
        with pytest.raises(InvalidField) as info:
            ctx.progress(done, total)
        assert info.value.field == field


def test_progress_is_written_at_most_once_a_second_and_not_when_unchanged(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: now[0])
    report = progress_module.ProgressReport()
    assert report.due() is None
    report.report(1, 10)
    assert report.due() == (1, 10)
    report.report(2, 10)
    now[0] += 0.5
    assert report.due() is None  # within a second of the last write
    now[0] += 0.6
    assert report.due() == (2, 10)
    now[0] += 5
    assert report.due() is None  # unchanged
    report.report(2, 10)
    assert report.due() is None


def test_a_running_jobs_progress_is_shown(db_url, tmp_path, monkeypatch):
    monkeypatch.setenv(READY_ENV, str(tmp_path))
    writes = []
    real = renewals.write_progress
    monkeypatch.setattr(renewals, "write_progress",
                        lambda *args: writes.append(args[2:]) or real(*args))
    run = Running(db_url)
    admin = QueueAdmin(run.queue.db)
    try:
        job_id = enqueue(run.queue, Steps(count=200, seconds=1.6))
        wait_ready(tmp_path, job_id)
        detail = wait_for(lambda: (lambda d: d if d.progress_done else None)(admin.job(job_id)),
                          message="progress stored")
        assert detail.progress_total == 200 and detail.progress_at is not None
        listed = {j.job_id: j for j in admin.jobs(queue=QUEUE)}
        assert listed[job_id].progress_total == 200
        state_cell = operating.summary_row(listed[job_id])[3]  # the jobs table's STATE
        assert state_cell.startswith("leased ") and state_cell.endswith("/200")
        wait_for(lambda: admin.job(job_id).state.value == "completed", message="completed")
    finally:
        run.stop()
    assert 1 <= len(writes) <= 3  # 200 reports over 1.6 s: one write a second at most


def _fail_once(db, options, message="card 4111-1111 declined " + "x" * 3000):
    queue = DatabaseQueue(db, registry, options)
    job_id = queue.enqueue(Boom(message),
                           Dispatch(queue=QUEUE, tenant_id=TENANT)).job_id
    QueueWorker(queue).run_once(QUEUE)
    (record,) = QueueAdmin(db).job(job_id).failures
    assert record.category is Failure.HANDLER_FAILED and record.error_type == "ValueError"
    return record


def test_errors_are_not_recorded_by_default(db):
    record = _fail_once(db, QueueOptions())
    assert record.message is None and record.trace is None


def test_recorded_errors_are_redacted_capped_and_carry_no_locals(db, caplog):
    record = _fail_once(db, QueueOptions(
        record_errors=True, redact=lambda text: text.replace("4111-1111", "[card]")))
    assert record.message.startswith("card [card] declined xxx")
    assert len(record.message.encode()) == 1024
    lines = record.trace.splitlines()
    assert lines[-1].endswith("in boom") and "tests/control/app.py:" in lines[-1]
    assert "local-secret-value" not in record.trace
    assert "card [card] declined" in caplog.text  # the failure log line has it too
    assert "4111" not in caplog.text


def test_a_recorded_message_with_a_nul_character_is_stored(db):
    # PostgreSQL text cannot hold NUL: the failure's write was refused, the job left
    # leased, and every attempt failed the same way.
    record = _fail_once(db, QueueOptions(record_errors=True), "bad header b'\x00\x01'")
    assert record.message == "bad header b'\\x00\x01'"
    record = _fail_once(db, QueueOptions(describe_failure=str), "nul \x00")
    assert record.description == "nul \\x00"


def test_a_redactor_that_fails_stores_no_message(db):
    def broken(text):
        raise RuntimeError("no")
    record = _fail_once(db, QueueOptions(record_errors=True, redact=broken))
    assert record.message is None and record.trace is not None
    with pytest.raises(InvalidField) as info:
        QueueOptions(record_errors="yes")
    assert info.value.field == "record_errors"


def test_the_command_line_worker_records_errors_when_asked_and_show_prints_them(db, db_url):
    queue = DatabaseQueue(db, registry)
    job_id = queue.enqueue(Boom("smtp said no"), Dispatch(queue=QUEUE,
                                                          tenant_id=TENANT)).job_id
    worker = procs.start("worker", "tests.control.app:registry", "--queue", QUEUE,
                         "--database", db_url, "--record-errors")
    try:
        wait_for(lambda: QueueAdmin(db).job(job_id).failures, 30, message="a failure")
    finally:
        worker.send_signal(signal.SIGTERM)
        code, _, err = procs.finish(worker)
    assert code == 0, err
    assert "message: 'smtp said no'" in err  # the failure log line
    done = procs.run("show", str(job_id), "--database", db_url)
    assert done.returncode == 0
    assert "smtp said no" in done.stdout and "in boom" in done.stdout
    shown = json.loads(procs.run("show", str(job_id), "--database", db_url,
                                 "--json").stdout)
    assert shown["failures"][0]["message"] == "smtp said no"

"""Every log record of the library carries its facts as structured fields (``extra=``,
caravel_lite.logfields) besides its message, and none carries anything of a payload
(issue 28)."""
from __future__ import annotations

import ast
import logging
import pathlib
from dataclasses import dataclass
from datetime import timedelta

from caravel_lite import DatabaseQueue, Dispatch, JobContext, JobRegistry, QueueOptions
from caravel_lite import QueueWorker
from caravel_lite.logfields import FIELDS, fields, lease_fields
from caravel_lite.testing import ManualClock

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "caravel_lite"
LEVELS = {"debug", "info", "warning", "error", "exception", "critical"}
SECRET = "payload-secret-4"


def _log_calls():
    for path in sorted(PACKAGE.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in LEVELS and isinstance(node.func.value, ast.Name)
                    and node.func.value.id in ("logger", "log")):
                yield path.relative_to(PACKAGE.parent), node


def test_every_log_call_with_facts_in_its_message_passes_them_as_fields():
    """A call that formats values into its message (its arguments after the message)
    also passes them as ``extra=``; the others state no fact but their text."""
    calls = list(_log_calls())
    assert len(calls) > 50
    missing = [f"{path}:{node.lineno}" for path, node in calls
               if len(node.args) > 1 and not any(k.arg == "extra" for k in node.keywords)]
    assert missing == []


@dataclass(frozen=True)
class Note:
    text: str


def test_a_job_s_records_carry_its_fields_and_nothing_of_its_payload(db, caplog):
    clock = ManualClock()
    registry = JobRegistry()
    calls = []

    def handle(job: Note, ctx: JobContext) -> None:
        calls.append(ctx.attempt)
        if len(calls) == 1:
            raise ValueError(job.text)

    registry.register("tests.note.v1", Note, handle)
    queue = DatabaseQueue(db, registry, QueueOptions(max_attempts=2,
                                                     retry_delay=timedelta(seconds=1)),
                          clock=clock)
    caplog.set_level(logging.DEBUG, logger="caravel_lite")
    job_id = queue.enqueue(Note(SECRET), Dispatch(queue="logged", tenant_id="tenant-l")).job_id
    worker = QueueWorker(queue)
    assert worker.run_once("logged")
    clock.advance(timedelta(seconds=2))
    assert worker.run_once("logged")

    mine = [r for r in caplog.records if getattr(r, "job_id", None) == str(job_id)]
    enqueued, failed, completed = (
        next(r for r in mine if r.getMessage().startswith("enqueued")),
        next(r for r in mine if r.levelno == logging.WARNING),
        next(r for r in mine if "completed" in r.getMessage()))
    for record in (enqueued, failed, completed):
        assert (record.queue, record.tenant_id, record.wire_name, record.max_attempts) == (
            "logged", "tenant-l", "tests.note.v1", 2)
    assert (failed.attempt, failed.category, failed.error_type) == (1, "handler_failed",
                                                                    "ValueError")
    assert failed.next_attempt_at.startswith(clock().date().isoformat())
    assert completed.attempt == 2 and not hasattr(completed, "category")
    standard = set(vars(logging.makeLogRecord({})))
    for record in caplog.records:
        extra = {k: v for k, v in vars(record).items() if k not in standard}
        assert set(extra) <= set(FIELDS) | {"message", "asctime"}, record.getMessage()
        assert SECRET not in repr(extra) and SECRET not in record.getMessage()


def test_fields_leave_out_none_and_make_plain_values():
    assert fields(count=3, queue=None, category=None) == {"count": 3}


def test_a_lease_s_fields_are_gathered_only_when_a_record_is_made():
    class Exploding:
        @property
        def context(self):
            raise AssertionError("read before a record was made")

    quiet = logging.getLogger("tests.quiet")
    quiet.setLevel(logging.INFO)
    quiet.debug("not made", extra=lease_fields(Exploding()))

"""Sync handlers of jobs with a timeout: run apart from their slot, so that one which
ignores its cancellation is abandoned and the slot freed.

Python cannot stop a thread. A sync handler whose job has a ``timeout`` therefore runs
in a thread of its own while the slot's thread watches it: at the timeout the deadline
keeper sets ``ctx.cancelled``; a handler that then returns or raises within
:data:`GRACE` ends as any other, and one that does not is abandoned. Its attempt fails
with ``TIMED_OUT`` (written at once, fenced by the lease), its slot takes the next job,
and the abandoned thread runs on until the handler returns, holding what it holds (its
database connection, memory, locks, CPU); whatever it writes later through
``ctx.transaction()`` is refused (``LeaseLost``), anything else it does is not.

What it costs the jobs with a timeout: one thread started per attempt, and so one
database connection per attempt if the handler uses the database (closed when the
handler returns). Jobs without a timeout run on the slot's thread as before.
"""
from __future__ import annotations

import threading
import time
from datetime import datetime
from typing import Any, Callable, Dict, Optional

import peewee

from caravel_lite.observability import logger
from caravel_lite.worker.supervisor import SUPERVISOR_TICK, TIMED_OUT, JobControl
from caravel_lite.logfields import lease_fields

__all__ = ["run_bounded", "Abandoned", "GRACE"]

# Seconds a handler told of its timeout has to end on its own before it is abandoned.
GRACE = 1.0


class Abandoned(Exception):
    """The handler was still running GRACE seconds after its timeout (the failure
    history records this type as the attempt's error)."""


def run_bounded(call: Callable[[], None], control: JobControl,
                db: Optional[peewee.Database] = None,
                clock: Optional[Callable[[], datetime]] = None) -> None:
    """Run ``call`` in a thread of its own and return when it ends, raising what it
    raised; raise :class:`Abandoned` when it is still running :data:`GRACE` seconds
    after the job's timeout cancelled it, or after its timeout passed (by ``clock``,
    the queue's) when something else cancelled it first (its lease ran out, a stop):
    the timeout bounds the slot's time whatever the lease does."""
    done = threading.Event()
    box: Dict[str, BaseException] = {}

    def target() -> None:
        try:
            call()
        except BaseException as exc:  # handed to the slot's thread
            box["error"] = exc
        finally:
            done.set()
            _close(db)

    thread = threading.Thread(target=target, daemon=True,
                              name=f"caravel-timed-{control.lease.job_id}")
    thread.start()
    timed_out_at: Optional[float] = None
    while not done.wait(SUPERVISOR_TICK):
        if control.reason != TIMED_OUT and not _outlived(control, clock):
            continue
        now = time.monotonic()
        if timed_out_at is None:
            timed_out_at = now
        elif now - timed_out_at >= GRACE:
            logger.warning("job %s: handler still running %.1f s after its timeout; "
                           "abandoned (its thread runs on, the slot takes the next job)",
                           control.lease.job_id, GRACE,
                           extra=lease_fields(control.lease, reason="timed_out"))
            raise Abandoned(f"handler abandoned {GRACE} s after its timeout")
    error = box.get("error")
    if error is not None:
        raise error


def _outlived(control: JobControl, clock: Optional[Callable[[], datetime]]) -> bool:
    """Told to stop for another reason (the deadline keeper then no longer sets
    TIMED_OUT), and past its timeout."""
    return (control.reason is not None and clock is not None
            and control.timeout_at is not None and clock() >= control.timeout_at)


def _close(db: Optional[peewee.Database]) -> None:
    """Close the connection this thread opened (Peewee's are per thread)."""
    if db is None or db.is_closed():
        return
    try:
        db.close()
    except Exception:  # inside a transaction the handler left open, or already broken
        pass

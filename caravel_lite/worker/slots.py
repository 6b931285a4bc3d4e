"""The pool's side of the worker's slots, and the one way back to the loop.

The worker's loop owns every job it claimed until the job's outcome is written. It
hands a free slot a short run of prepared jobs (:class:`SlotRun`); the pool thread runs
them one after the other and reports to the loop through the run's :class:`Inbox`,
never by touching the loop's collections:

- ``FINISHED``: one job's outcome is decided (a handler returned or raised, or the job
  was too old to start);
- ``SLOT_FREE``: the pool thread is done with its run (an async job's slot ends with
  its ``FINISHED``).

A job in a run that the pool thread has not started yet is still the loop's to take
back (a stop): each job is started or handed back by whoever takes it first
(:meth:`Execution.take`). Handing a slot several short jobs at once is what keeps
the loop out of the way of fast jobs: one hand-off per run, not two per job
(``python -m bench.profile --path default``).
"""
from __future__ import annotations

import enum
import queue as stdqueue
import threading
import time
from typing import Optional, Sequence, Tuple

from caravel_lite.worker.execution import Execution, Runner
from caravel_lite.worker.settling import Settler
from caravel_lite.worker.supervisor import Supervisor
from caravel_lite.worker.wakeup import Wakeup

__all__ = ["Inbox", "Report", "SlotRun"]


class Report(enum.Enum):
    FINISHED = "finished"
    SLOT_FREE = "slot_free"


class Inbox:
    """The loop's inbox for one run: pool threads and the event loop put reports, the
    loop alone takes them. ``listening`` is raised by the loop around a wait that only
    a report can usefully end; otherwise a finished job does not wake it (it settles
    finished jobs on its next pass, within ``ACK_LINGER``)."""

    def __init__(self, wakeup: Wakeup) -> None:
        self.wakeup = wakeup
        self._reports: "stdqueue.SimpleQueue[Tuple[Report, Optional[Execution]]]" = (
            stdqueue.SimpleQueue())
        self.listening = False
        self.stopping = False  # raised by the loop when the run ends: start nothing more

    def finished(self, execution: Execution) -> None:
        self._reports.put((Report.FINISHED, execution))
        if execution.is_async or self.listening:
            self.wakeup.set()

    def slot_free(self) -> None:
        self._reports.put((Report.SLOT_FREE, None))
        self.wakeup.set()

    def take(self) -> Optional[Tuple[Report, Optional[Execution]]]:
        try:
            return self._reports.get_nowait()
        except stdqueue.Empty:
            return None

    def empty(self) -> bool:
        return self._reports.empty()


class SlotRun:
    """What a pool thread needs to run the jobs the loop hands it."""

    def __init__(self, runner: Runner, settler: Settler, supervisor: Supervisor,
                 inbox: Inbox, stop: threading.Event) -> None:
        self.runner = runner
        self.settler = settler
        self.supervisor = supervisor
        self.inbox = inbox
        self.stop = stop

    def run(self, executions: Sequence[Execution]) -> None:
        """Run ``executions`` in order on this pool thread. Before each: a stop leaves
        it (and the rest) to the loop; one the loop took back is skipped; one whose
        lease has grown too old is reported as such without running."""
        try:
            for execution in executions:
                if self.stop.is_set() or self.inbox.stopping:
                    return  # the loop hands the rest back
                if not execution.take():
                    continue
                old = self.settler.too_old(execution.lease)
                if old is not None:
                    execution.settlement = old
                    self.inbox.finished(execution)
                    continue
                self.start(execution)
                self.runner.run(execution)
        finally:
            self.inbox.slot_free()

    async def run_async(self, execution: Execution) -> None:
        """One async job, as a task of the worker's event loop; one whose lease has
        grown too old by the time the task begins is reported as such without running
        (the loop admitted it on its own judgement of the age, made earlier in its
        pass: time can pass there, a write of another job's failure, say)."""
        if not execution.take():
            return  # handed back by a stop before the task began
        old = self.settler.too_old(execution.lease)
        if old is not None:
            execution.settlement = old
            self.inbox.finished(execution)
            return
        self.start(execution)
        await self.runner.run_async(execution)

    def start(self, execution: Execution) -> None:
        execution.started_at = time.monotonic()
        self.supervisor.watch(execution.control, self.stop)


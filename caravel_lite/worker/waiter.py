"""Waiting, at no cost, until a job of the worker's queues may be claimable.

One :class:`Waiter` serves one running worker, whatever its concurrency and however many
queues it serves. ``wait(wakeup, timeout)`` returns True as soon as a job of one of its
queues may be claimable, False when ``timeout`` passes with nothing due or when the
:class:`Wakeup` is raised (a stop request, a finished handler). Wake-ups are hints: the
worker still claims through the normal fenced path, so a spurious one costs one empty
claim and a lost one at most ``timeout`` of latency, never a job.

A wait never writes. Whatever the change signal says, the waiter first *reads* whether
anything of its queues is due (one indexed statement: :func:`_probe_sql`, or where it
polls :func:`_due_now_sql`) and only then lets the worker claim, so commits that brought
nothing due (another table, another queue, a job for later) cost the idle worker a read
and never a write statement. Each wait also reads when the next delayed job of its
queues falls due and when their earliest lease expires, and wakes then; a wait that
ends at its timeout reads whether anything is due, and that read also gives the next
wait, begun at once, its next due time (:data:`DUE_READ_KEPT`). Times come from the
queue's clock.

How the waiter hears of changes is the dialect's ``change_signal``:

- ``"notify"`` (PostgreSQL): triggers NOTIFY :data:`CHANNEL` with ``"<queue> <due ms>"``
  (migrations 0003 and 0004). The waiter LISTENs on a dedicated connection and blocks in
  ``select()`` on that socket and on the wake-up pipe: no polling at all while idle. If
  the listener cannot be opened or fails, it falls back to reading at the poll rates
  (:data:`POLL_PROBE`, :data:`IDLE_POLL_PROBE`) and reopens it every
  :data:`RECONNECT_DELAY` seconds.
- ``"data_version"`` (SQLite on a file): ``PRAGMA data_version`` on a connection of the
  waiter's own, read every :data:`PROBE_INTERVAL` seconds (every
  :data:`IDLE_PROBE_INTERVAL` once idle for :data:`ACTIVE_FOR`); it changes whenever another
  connection commits and reads shared memory, never the tables. A change triggers the
  due read.
- ``"poll"`` (MariaDB/MySQL): a cheap read of whether anything is due now (two EXISTS)
  every :data:`POLL_PROBE` seconds (:data:`IDLE_POLL_PROBE` once idle for
  :data:`ACTIVE_FOR`), as there is no change signal, so an idle worker still picks a
  new job up within about that long.

The fast rates hold for :data:`ACTIVE_FOR` seconds after the worker last found work (a
wait that found a due job, or a claim that leased jobs: :meth:`Waiter.found_work`), and
for the first :data:`STARTING_FOR` seconds of a new waiter (a job enqueued just after a
worker starts, as in a deploy or a test, is picked up at once); a worker that has
found none since then probes at the idle rates, as its first claim already took
whatever was waiting.
"""
from __future__ import annotations

from typing import Any, Sequence, Union

from caravel_lite.worker.waiting.base import (ACTIVE_FOR, CHANNEL, DUE_MARGIN, DUE_READ_KEPT,
                                              IDLE_POLL_PROBE, IDLE_PROBE_INTERVAL,
                                              POLL_PROBE, PROBE_INTERVAL, RECONNECT_DELAY,
                                              STARTING_FOR, Waiter)
from caravel_lite.worker.waiting.data_version import DataVersionWaiter
from caravel_lite.worker.waiting.notify import NotifyWaiter
from caravel_lite.worker.waiting.polling import PollWaiter
from caravel_lite.worker.wakeup import Wakeup

__all__ = ["Wakeup", "Waiter", "PollWaiter", "DataVersionWaiter", "NotifyWaiter",
           "waiter_for", "CHANNEL", "ACTIVE_FOR", "DUE_MARGIN", "DUE_READ_KEPT",
           "IDLE_POLL_PROBE", "IDLE_PROBE_INTERVAL", "POLL_PROBE", "PROBE_INTERVAL",
           "RECONNECT_DELAY", "STARTING_FOR"]

_STRATEGIES = {"poll": PollWaiter, "data_version": DataVersionWaiter, "notify": NotifyWaiter}
_MEMORY = ("", ":memory:")


def waiter_for(queue: Any, queue_names: Union[str, Sequence[str]]) -> Waiter:
    """The best waiter the queue's database offers for ``queue_names``. Create it before
    the worker's first claim, so that nothing committed after that claim goes unseen;
    close it when the worker stops."""
    signal = queue.dialect.change_signal
    strategy = _STRATEGIES.get(signal)
    if strategy is None:
        raise ValueError(f"unknown change signal {signal!r}")
    if strategy is DataVersionWaiter and str(queue.db.database) in _MEMORY:
        # An in-memory database is private to its connection: no one else commits.
        strategy = PollWaiter
    return strategy(queue, queue_names)

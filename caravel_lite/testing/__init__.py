"""Helpers for testing applications that use caravel_lite (and for our own tests).

- :class:`ManualClock`: a clock that moves only when told to;
- :func:`drain`: run the due jobs of some queues through the real worker, moving a
  ManualClock through retry back-offs, and count the outcomes (:class:`DrainResult`);
- :func:`enqueued`, :func:`assert_enqueued`, :func:`assert_not_enqueued`: what is in a
  queue, decoded;
- :class:`InlineQueue`: enqueue runs the job at once, or when the caller's
  transaction commits;
- the pytest plugin :mod:`caravel_lite.testing.plugin` (loaded by pytest when
  caravel_lite is installed) with the ``caravel_db``, ``caravel_db_url``,
  ``caravel_clock`` and ``caravel_queue_factory`` fixtures.

Importing this package has no side effects and does not import pytest.
"""
from caravel_lite.testing.clock import ManualClock
from caravel_lite.testing.drain import DrainResult, drain
from caravel_lite.testing.inline import InlineQueue
from caravel_lite.testing.inspection import (EnqueuedJob, assert_enqueued,
                                             assert_not_enqueued, enqueued)

__all__ = ["ManualClock", "drain", "DrainResult", "enqueued", "EnqueuedJob",
           "assert_enqueued", "assert_not_enqueued", "InlineQueue"]

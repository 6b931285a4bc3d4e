"""The worker runtime, a small package with one piece per concern:

- :mod:`~caravel_lite.worker.runtime`: :class:`QueueWorker`, its settings, ``run`` and
  ``run_once``;
- :mod:`~caravel_lite.worker.loop`: one run: the loop thread, sole owner of the run's
  slots, waiting and running jobs and unwritten outcomes, and the run's one exit path
  (its database steps in :mod:`~caravel_lite.worker.ending`);
- :mod:`~caravel_lite.worker.slots`: the pool's side of a slot, and the inbox through
  which pool threads and the event loop report to the loop;
- :mod:`~caravel_lite.worker.planning`: how much to claim, and from which queue first;
- :mod:`~caravel_lite.worker.executor`: handler threads and the one event loop (per run);
- :mod:`~caravel_lite.worker.execution`: one job from decoding to its outcome;
- :mod:`~caravel_lite.worker.settling`: whether a leased job may start; outcome to write;
- :mod:`~caravel_lite.worker.acks`: fenced, batched acknowledgements;
- :mod:`~caravel_lite.worker.supervisor`: the registry of running jobs, watched by
  :mod:`~caravel_lite.worker.deadlines` (lease deadlines and stop, no database work) and
  :mod:`~caravel_lite.worker.renewals` (renewals and due acknowledgements);
- :mod:`~caravel_lite.worker.waiter`: idle waiting on the database's change signal, one
  strategy per signal in :mod:`caravel_lite.worker.waiting`;
- :mod:`~caravel_lite.worker.wakeup`: the loop's wake-up (an event and a pipe that agree);
- :mod:`~caravel_lite.worker.signals`: SIGTERM/SIGINT as a stop request.
"""
from caravel_lite.worker.runtime import QueueWorker
from caravel_lite.worker.signals import handle_signals

__all__ = ["QueueWorker", "handle_signals"]

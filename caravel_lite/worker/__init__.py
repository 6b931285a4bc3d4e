"""The worker runtime, a small package with one piece per concern:

- :mod:`~caravel_lite.worker.runtime`: :class:`QueueWorker`, the loop that claims jobs,
  hands them to the executor and writes their outcomes;
- :mod:`~caravel_lite.worker.planning`: how much to claim, and from which queue first;
- :mod:`~caravel_lite.worker.executor`: handler threads and the one event loop;
- :mod:`~caravel_lite.worker.execution`: one job from decoding to its outcome;
- :mod:`~caravel_lite.worker.acks`: fenced, batched acknowledgements;
- :mod:`~caravel_lite.worker.supervisor`: lease deadlines, renewals and shutdown;
- :mod:`~caravel_lite.worker.waiter`: idle waiting on the database's change signal;
- :mod:`~caravel_lite.worker.signals`: SIGTERM/SIGINT as a stop request.
"""
from caravel_lite.worker.runtime import QueueWorker
from caravel_lite.worker.signals import handle_signals

__all__ = ["QueueWorker", "handle_signals"]

"""The metric families of a scrape: each a small function from the scrape's
:class:`~caravel_lite.metrics.reading.Reading` to the families it yields, so that a
family is added (or left out) by naming its function in :data:`DEFAULT_FAMILIES`.

Names follow Prometheus conventions: a ``caravel_`` prefix, base units in the name
(``_seconds``), labels for dimensions. Every figure is a gauge: it is what the database
holds now, or over a window ending now, never a running count (a count read from rows
would go down when finished jobs are pruned; the in-process OpenTelemetry counters
``caravel.queue.jobs.*`` are the counters). No tenant label, except on
``caravel_jobs`` when the collector is built with ``tenant_label=True``.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, Sequence, Tuple

from prometheus_client.core import GaugeMetricFamily

from caravel_lite.metrics.reading import WINDOWS, Reading

Family = Callable[[Reading], Iterable[Any]]

# The job states caravel_jobs counts, as its ``state`` label says them: waiting and due,
# waiting for a later due time, leased, leased past its expiry (claimable again),
# dead letters. Completed jobs are the history (a scrape never counts it): see
# caravel_jobs_completed_recent.
STATES = ("ready", "delayed", "leased", "lease_expired", "dead_letter")


def jobs(reading: Reading) -> Iterable[Any]:
    """``caravel_jobs{queue,state}`` (with ``tenant_id`` when opted in)."""
    if reading.tenant_label:
        family = GaugeMetricFamily("caravel_jobs", "Jobs by queue, tenant and state now",
                                   labels=["queue", "tenant_id", "state"])
        for t in reading.tenants():
            for state, value in zip(STATES, (t.ready, t.delayed, t.leased, t.expired,
                                             t.dead_letter)):
                family.add_metric([t.queue_name, t.tenant_id, state], value)
    else:
        family = GaugeMetricFamily("caravel_jobs", "Jobs by queue and state now",
                                   labels=["queue", "state"])
        for q in reading.queues():
            for state, value in zip(STATES, (q.ready, q.delayed, q.leased, q.expired,
                                             q.dead_letter)):
                family.add_metric([q.queue_name, state], value)
    yield family


def oldest_ready_age(reading: Reading) -> Iterable[Any]:
    family = GaugeMetricFamily(
        "caravel_oldest_ready_job_age_seconds",
        "How long the oldest ready job of each queue has been due (0 when none is ready)",
        labels=["queue"], unit="seconds")
    for q in reading.queues():
        age = q.oldest_ready_age.total_seconds() if q.oldest_ready_age is not None else 0.0
        family.add_metric([q.queue_name], max(age, 0.0))
    yield family


def completed_recent(reading: Reading) -> Iterable[Any]:
    family = GaugeMetricFamily("caravel_jobs_completed_recent",
                               "Jobs completed in the last minute (window 1m) and hour (1h)",
                               labels=["queue", "window"])
    for queue_name, counts in sorted(reading.completed().items()):
        for window, value in zip(WINDOWS, counts):
            family.add_metric([queue_name, window], value)
    yield family


def failed_recent(reading: Reading) -> Iterable[Any]:
    family = GaugeMetricFamily(
        "caravel_attempts_failed_recent",
        "Attempts failed in the last minute (window 1m) and hour (1h), by failure category",
        labels=["queue", "category", "window"])
    for (queue_name, category), counts in sorted(reading.failed().items()):
        for window, value in zip(WINDOWS, counts):
            family.add_metric([queue_name, category, window], value)
    yield family


def pickup_latency(reading: Reading) -> Iterable[Any]:
    family = GaugeMetricFamily(
        "caravel_pickup_latency_seconds",
        "Time from a job's due time to its claim over the queue's most recent finished "
        "jobs of the last hour (at most 200 completed and 200 dead-lettered), by quantile",
        labels=["queue", "quantile"], unit="seconds")
    for name, (p50, p95) in sorted(reading.pickups().items()):
        family.add_metric([name, "0.5"], p50)
        family.add_metric([name, "0.95"], p95)
    yield family


def dead_lettered_recent(reading: Reading) -> Iterable[Any]:
    family = GaugeMetricFamily(
        "caravel_jobs_dead_lettered_recent",
        "Jobs dead-lettered in the last minute (window 1m) and hour (1h), by the failure "
        "category that ended them (the dead letters kept: caravel_jobs{state=dead_letter})",
        labels=["queue", "category", "window"])
    for (queue_name, category), counts in sorted(reading.dead_lettered().items()):
        for window, value in zip(WINDOWS, counts):
            family.add_metric([queue_name, category, window], value)
    yield family


def workers(reading: Reading) -> Iterable[Any]:
    """``caravel_workers{queue,state}``: the workers with a heartbeat row that serve each
    queue, ``alive`` or ``lost`` (no beat for 3 beats: gone or cut off, its leases
    left to expire)."""
    family = GaugeMetricFamily("caravel_workers", "Workers by queue served and heartbeat state",
                               labels=["queue", "state"])
    counts: Dict[Tuple[str, str], int] = {}
    for worker in reading.workers():
        state = "lost" if worker.lost else "alive"
        for queue in worker.queues:
            counts[(queue, state)] = counts.get((queue, state), 0) + 1
    for (queue, state), count in sorted(counts.items()):
        family.add_metric([queue, state], count)
    yield family


def read_duration(reading: Reading) -> Iterable[Any]:
    """Last, so that it measures the reads of the families before it."""
    yield GaugeMetricFamily("caravel_metrics_read_seconds",
                            "How long this scrape's reads of the queue database took",
                            value=reading.elapsed(), unit="seconds")


DEFAULT_FAMILIES: Sequence[Family] = (jobs, oldest_ready_age, completed_recent,
                                      failed_recent, dead_lettered_recent, pickup_latency,
                                      workers, read_duration)

"""OpenMetrics figures of the queue database for Prometheus (the optional extra
``metrics``: ``prometheus_client``).

- :class:`QueueMetrics`: a ``prometheus_client`` collector over a ``QueueAdmin`` (or a
  database); ``render()`` gives one scrape as OpenMetrics text.
- :class:`MetricsEndpoint`: ``/metrics`` as a WSGI application under the dashboard's
  authentication rules; ``caravel-lite metrics --bind HOST:PORT`` serves it. The
  dashboard answers ``/metrics`` too.
- :mod:`caravel_lite.metrics.families`: one small function per family; pass
  ``families=`` to choose them.
"""
from __future__ import annotations

from caravel_lite.metrics.collector import CONTENT_TYPE, QueueMetrics
from caravel_lite.metrics.endpoint import MetricsEndpoint, make_metrics_server
from caravel_lite.metrics.families import DEFAULT_FAMILIES

__all__ = ["QueueMetrics", "MetricsEndpoint", "make_metrics_server", "DEFAULT_FAMILIES",
           "CONTENT_TYPE"]

"""An in-memory OpenTelemetry reader and the totals of caravel_lite's counters."""
from __future__ import annotations

from collections import Counter
from typing import Optional, Tuple

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from caravel_lite.observability import Telemetry


class Metrics:
    """A Telemetry whose counters can be read back as ``{(name, failure): total}``."""

    def __init__(self) -> None:
        self.reader = InMemoryMetricReader()
        self.telemetry = Telemetry(meter_provider=MeterProvider(metric_readers=[self.reader]))

    def totals(self) -> Counter:
        totals: Counter = Counter()
        data = self.reader.get_metrics_data()
        for resource in (data.resource_metrics if data is not None else ()):
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.data.data_points:
                        key: Tuple[str, Optional[str]] = (
                            metric.name.removeprefix("caravel.queue.jobs."),
                            dict(point.attributes).get("failure"))
                        totals[key] += point.value
        return +totals

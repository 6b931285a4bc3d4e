"""``GET /metrics`` on the dashboard: the OpenMetrics text of caravel_lite.metrics (the
extra ``metrics``), behind the dashboard's own authentication gate, on the request's
connection (opened and closed per request: none is held between scrapes)."""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from caravel_lite.web.http import HttpError, Response

if TYPE_CHECKING:
    from caravel_lite.web.app import Page


def metrics(page: "Page", match: "re.Match[str]") -> Response:
    app: Any = page.app
    collector = getattr(app, "_metrics_collector", None)
    if collector is None:
        try:
            from caravel_lite.metrics import QueueMetrics
        except ImportError:
            raise HttpError(404, "metrics need the extra 'metrics' "
                                 "(pip install 'caravel_lite[metrics]')") from None
        collector = app._metrics_collector = QueueMetrics(page.admin, clock=app.clock)
    from caravel_lite.metrics import CONTENT_TYPE

    return Response(collector.render(), 200, CONTENT_TYPE, [("Cache-Control", "no-store")])

"""The dashboard's controls during an incident: pausing and resuming a queue (from the
overview), and the Workers page (each worker's heartbeat and the jobs it runs).
Cancelling jobs is one of the confirmed actions (:mod:`caravel_lite.web.actions`).
Every one goes through :class:`caravel_lite.QueueAdmin`, never SQL of its own."""
from __future__ import annotations

import re
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from caravel_lite.errors import InvalidField
from caravel_lite.validation import check_queue
from caravel_lite.web.http import Response

if TYPE_CHECKING:
    from caravel_lite.web.app import Page

__all__ = ["toggle", "workers"]


def toggle(page: "Page", match: "re.Match[str]") -> Response:
    """POST /actions/pause or /actions/resume with ``queue``: acts at once (both are
    undone by the other) and goes back to the overview with a notice."""
    action = match.group("action")
    name = page.request.form.get("queue") or ""
    try:
        check_queue(name, "queue")
    except InvalidField:
        raise InvalidField("queue", "name the queue to pause or resume") from None
    getattr(page.admin, action)(name)
    return Response.redirect(page.request.script_name + "/?"
                             + urlencode({"done": action, "count": 1}))


def workers(page: "Page", match: "re.Match[str]") -> Response:
    return page.render("workers.html", nav="workers", workers=page.admin.workers(),
                       now=page.now())

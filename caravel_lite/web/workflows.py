"""The dashboard's Workflows page: a queue's chains and batches, newest first, with
their jobs by state (a chain's ``held`` steps wait for the one before), what finished
and failed, and whether they closed. Read through :class:`caravel_lite.QueueAdmin`."""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

from caravel_lite.validation import check_queue
from caravel_lite.web.http import Response

if TYPE_CHECKING:
    from caravel_lite.web.app import Page

__all__ = ["workflows"]

SHOWN = 50


def workflows(page: "Page", match: "re.Match[str]") -> Response:
    """GET /workflows?queue=Q (the first queue holding jobs by default)."""
    queues = page.admin.queues()
    name = page.request.query.get("queue") or (queues[0] if queues else None)
    chains = batches = ()
    if name:
        check_queue(name, "queue")
        chains = page.admin.chains(name, limit=SHOWN).workflows
        batches = page.admin.batches(name, limit=SHOWN).workflows
    return page.render("workflows.html", nav="workflows", queue=name, queues=queues,
                       chains=chains, batches=batches, now=page.now())

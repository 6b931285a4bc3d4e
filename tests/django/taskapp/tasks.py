"""Tasks of the test project's app, found by the default discovery (``<app>.tasks``)."""
from __future__ import annotations

from typing import List

from caravel_lite.contrib.django.compat import task

ran: List[str] = []


@task
def note(text: str) -> str:
    ran.append(text)
    return text


def not_a_task(text: str) -> str:
    ran.append("not_a_task " + text)
    return text

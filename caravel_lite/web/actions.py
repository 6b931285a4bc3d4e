"""The dashboard's actions (POST): replay, discard and delete, for the jobs named in
the form or for every job that matches a filter.

Each action takes two POSTs: the first answers with a confirmation page that says how
many jobs it will touch, the second (``confirmed=1``) acts and redirects (303) back
with the number it actually touched. The authentication gate, the read-only switch and
the CSRF check run before any of this (app.py).
"""
from __future__ import annotations

import re
import uuid
from dataclasses import replace
from typing import TYPE_CHECKING, Any, List, Optional
from urllib.parse import parse_qsl, urlencode

from caravel_lite.errors import InvalidField
from caravel_lite.values import JobState
from caravel_lite.web.filters import JobFilter
from caravel_lite.web.http import Response

if TYPE_CHECKING:
    from caravel_lite.web.app import Page

# Bulk actions touch one kind of job each: replay and delete dead letters, discard
# pending jobs. (A filter can never widen "delete" to live jobs.)
BULK_STATE = {"replay": JobState.DEAD_LETTER, "delete": JobState.DEAD_LETTER,
              "discard": JobState.PENDING}
# Cancel takes the pending and leased jobs of a filter (or only those of its state).
CANCELLABLE = (JobState.PENDING.value, JobState.LEASED.value)
VERBS = {"replay": "Replay", "discard": "Discard", "delete": "Delete", "cancel": "Cancel"}
MAX_IDS = 1000
_NEXT = re.compile(r"/(jobs(/[0-9a-f-]{36})?|dead-letters|workers)?(\?[^#\s]*)?")


def _job_ids(page: "Page") -> List[uuid.UUID]:
    ids = [value for key, value in page.request.form.items() if key == "job_id"]
    if len(ids) > MAX_IDS:
        raise InvalidField("job_id", f"at most {MAX_IDS} jobs per request")
    try:
        # Each job once: the confirmation's count is of jobs, not of form fields.
        return list(dict.fromkeys(uuid.UUID(value) for value in ids))
    except ValueError:
        raise InvalidField("job_id", "must be job ids (UUIDs)") from None


def _next(page: "Page") -> str:
    """Where to go back to: one of the dashboard's own pages (never another site),
    without the notice of an earlier action."""
    target = page.request.form.get("next", "/")
    if not _NEXT.fullmatch(target):
        return "/"
    path, _, query = target.partition("?")
    kept = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True)
            if k not in ("done", "count")]
    return path + ("?" + urlencode(kept) if kept else "")


def _expected_state(page: "Page", action: str) -> Optional[JobState]:
    """The state the jobs named by id were shown in, which a delete checks again in
    its statement (replay and discard check theirs: dead letter, pending)."""
    if action != "delete":
        return None
    text = page.request.form.get("state")
    try:
        state = JobState(text)
    except ValueError:
        raise InvalidField("state", "the state the job was shown in is required") from None
    if state is JobState.LEASED:
        raise InvalidField("state", "a leased job is running and cannot be deleted")
    return state


def _bulk_filter(form: Any, action: str) -> JobFilter:
    job_filter = JobFilter.from_params(form)
    if action == "cancel":
        return job_filter if job_filter.state in CANCELLABLE else replace(job_filter, state=None)
    return job_filter.with_state(BULK_STATE[action])


def _one(page: "Page", action: str, job_id: uuid.UUID, state: Optional[JobState]) -> bool:
    if action == "delete":
        return bool(page.admin.delete(job_id, state=state))
    return bool(getattr(page.admin, action)(job_id))


def act(page: "Page", match: "re.Match[str]") -> Response:
    action = match.group("action")
    form = page.request.form
    confirmed = form.get("confirmed") == "1"
    ids = _job_ids(page)
    by_filter = form.get("scope") == "filter"
    if not ids and not by_filter:
        raise InvalidField("job_id", "name at least one job, or act on a filter")
    job_filter = _bulk_filter(form, action) if by_filter else None
    if job_filter is not None and not confirmed:
        # The range counted is the range acted on: a duration ("since 1h") becomes
        # the instant it means now, and the confirmation form carries that instant.
        job_filter = job_filter.pinned(page.now())
    kwargs = job_filter.admin_kwargs() if job_filter is not None else {}

    # By filter: one set-based call of the admin, whose statements check the state
    # and the filter again (a dead letter replayed meanwhile is not deleted).
    bulk = getattr(page.admin, f"{action}_many")
    expected = _expected_state(page, action) if job_filter is None else None
    if not confirmed:
        count = len(ids) if job_filter is None else bulk(dry_run=True, **kwargs)
        return page.render("confirm.html", nav="", action=action, verb=VERBS[action],
                           count=count, ids=ids, filter=job_filter, next=_next(page),
                           expected_state=expected.value if expected else None)

    if job_filter is None:
        done = sum(_one(page, action, job_id, expected) for job_id in ids)
    else:
        done = bulk(**kwargs)
    target = _next(page)
    separator = "&" if "?" in target else "?"
    return Response.redirect(page.request.script_name + target + separator
                             + urlencode({"done": action, "count": done}))

"""The dashboard's pages (GET): overview, jobs, one job, dead letters, schedules.
Every figure comes from the ``QueueAdmin`` (or ``QueueScheduler``) object."""
from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, List, Optional, Tuple

from caravel_lite.errors import InvalidField
from caravel_lite.values import JobState
from caravel_lite.web import charts
from caravel_lite.web.filters import JobFilter
from caravel_lite.web.history import DayHistory, Point, floor_minute
from caravel_lite.web.http import HttpError, Response

if TYPE_CHECKING:
    from caravel_lite.web.app import Page

HOUR = timedelta(hours=1)
HOUR_BUCKETS = 60                  # one-minute bars over the last hour
DAY_BUCKET = timedelta(minutes=30)  # half-hour bars over the last day
DAY_BUCKETS = 48
NOTICES = {"replay": "Replayed {count} job{s}.", "discard": "Discarded {count} job{s}.",
           "delete": "Deleted {count} job{s}.",
           "cancel": "Cancelled {count} job{s} (running ones end within a second or two).",
           "pause": "Queue paused: workers stop claiming from it within 2 s.",
           "resume": "Queue resumed: workers claim from it again within 2 s."}


def notice(page: "Page") -> Optional[str]:
    """The result of an action, named in the redirect's query (numbers only, so no
    text chosen by another site can be shown as ours)."""
    done = page.request.query.get("done")
    count = page.request.query.get("count")
    if done not in NOTICES or not count.isdigit():
        return None
    return NOTICES[done].format(count=int(count), s="" if int(count) == 1 else "s")


def overview_figures(admin: Any, history: DayHistory, now: datetime,
                     queue_name: Optional[str]) -> Tuple[Any, List[Point]]:
    """The last hour's ``QueueStats`` (from a whole minute) and the day's per-minute
    points, the earlier minutes from what ``history`` already read (history.py)."""
    stats = admin.stats(queue=queue_name, since=floor_minute(now - HOUR))
    points = history.points(queue_name, stats.observed_at, stats,
                            lambda start: admin.stats(queue=queue_name, since=start))
    return stats, points


def overview(page: "Page", match: "re.Match[str]") -> Response:
    queue_name = page.request.query.optional("queue")
    stats, per_minute = overview_figures(page.admin, page.app.history, page.now(), queue_name)
    now = stats.observed_at
    hour = charts.rebucket(per_minute, now, timedelta(minutes=1), HOUR_BUCKETS)
    day = charts.rebucket(per_minute, now, DAY_BUCKET, DAY_BUCKETS)
    ages = [row.oldest_ready_age for row in stats.queues if row.oldest_ready_age is not None]
    return page.render(
        "overview.html", nav="overview", stats=stats, queue_name=queue_name, now=now,
        paused=page.admin.paused(),
        oldest_ready_age=max(ages) if ages else None,
        limited_keys=page.admin.limited_keys(queue=queue_name),
        hour=hour, day=day, notice=notice(page),
        hour_chart=charts.bar_chart(hour, "Completed and failed per minute, last hour", 10),
        day_chart=charts.bar_chart(day, "Completed and failed per half hour, last day", 8))


@dataclass(frozen=True)
class _NoResult:
    jobs: Tuple[()] = ()
    next_cursor: None = None


def _listing(page: "Page", job_filter: JobFilter, template: str, nav: str) -> Response:
    now = page.now()
    after = page.request.query.optional("after")
    try:
        kwargs = job_filter.admin_kwargs()
        result = page.admin.jobs(limit=page.settings.page_size, after=after, **kwargs)
    except InvalidField as exc:
        # The filter form again, with the reason, so the field can be corrected.
        return page.render(template, status=400, nav=nav, filter=job_filter,
                           result=_NoResult(), after=None, states=list(JobState),
                           error=str(exc), now=now)
    return page.render(template, nav=nav, filter=job_filter, result=result, after=after,
                       states=list(JobState), notice=notice(page), now=now)


def jobs(page: "Page", match: "re.Match[str]") -> Response:
    return _listing(page, JobFilter.from_params(page.request.query), "jobs.html", "jobs")


def dead_letters(page: "Page", match: "re.Match[str]") -> Response:
    job_filter = JobFilter.from_params(page.request.query).with_state(JobState.DEAD_LETTER)
    return _listing(page, job_filter, "dead_letters.html", "dead_letters")


def job(page: "Page", match: "re.Match[str]") -> Response:
    try:
        job_id = uuid.UUID(match.group("job_id"))
    except ValueError:
        raise HttpError(404, "not found") from None
    show = page.settings.show_payloads
    detail = page.admin.job(job_id, include_payload=show)
    if detail is None:
        raise HttpError(404, "no such job")
    return page.render("job.html", nav="jobs", job=detail, show_payloads=show,
                       notice=notice(page))


def schedules(page: "Page", match: "re.Match[str]") -> Response:
    if page.scheduler is None:
        raise HttpError(404, "no scheduler configured for this dashboard")
    return page.render("schedules.html", nav="schedules", schedules=page.scheduler.status())

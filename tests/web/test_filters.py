"""Job filters from a query string (no database)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from caravel_lite.errors import InvalidField
from caravel_lite.values import Failure, JobState
from caravel_lite.web.filters import JobFilter, parse_instant
from caravel_lite.web.http import Params

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize("text, expected", [
    ("90s", timedelta(seconds=90)), ("15m", timedelta(minutes=15)),
    ("1h", timedelta(hours=1)), ("2d", timedelta(days=2)), ("1w", timedelta(days=7)),
    ("2029-12-31T10:00Z", datetime(2029, 12, 31, 10, tzinfo=timezone.utc)),
    ("2029-12-31T10:00", datetime(2029, 12, 31, 10, tzinfo=timezone.utc)),
    ("2029-12-31T10:00+02:00", datetime(2029, 12, 31, 8, tzinfo=timezone.utc)),
])
def test_parse_instant(text, expected):
    assert parse_instant("since", text) == expected


def test_parse_instant_names_the_field():
    with pytest.raises(InvalidField) as info:
        parse_instant("until", "yesterday")
    assert info.value.field == "until"


def test_filter_from_query_to_admin_arguments():
    params = Params.parse("queue=emails&state=dead_letter&tenant=%3Cb%3E&wire_name=mail.v1"
                          "&failure=handler_failed&since=1h&until=&after=x")
    job_filter = JobFilter.from_params(params)
    assert job_filter.admin_kwargs() == {
        "queue": "emails", "state": JobState.DEAD_LETTER, "tenant_id": "<b>",
        "wire_name": "mail.v1", "failure": Failure.HANDLER_FAILED,
        "since": timedelta(hours=1)}
    assert job_filter.params() == {"queue": "emails", "state": "dead_letter",
                                   "tenant": "<b>", "wire_name": "mail.v1",
                                   "failure": "handler_failed", "since": "1h"}


def test_the_wire_name_field_is_named_as_on_the_command_line():
    """``wire_name`` (``--wire-name``); a link made when it was called ``type`` still
    filters."""
    for query in ("wire_name=mail.v1", "type=mail.v1", "wire_name=mail.v1&type=other.v1"):
        job_filter = JobFilter.from_params(Params.parse(query))
        assert job_filter.admin_kwargs() == {"wire_name": "mail.v1"}, query
        assert job_filter.params() == {"wire_name": "mail.v1"}, query


@pytest.mark.parametrize("query, field", [("state=done", "state"), ("failure=oops", "failure"),
                                          ("since=soon", "since")])
def test_bad_filter_names_the_field(query, field):
    with pytest.raises(InvalidField) as info:
        JobFilter.from_params(Params.parse(query)).admin_kwargs()
    assert info.value.field == field


def test_forced_state_overrides_the_query():
    job_filter = JobFilter.from_params(Params.parse("state=pending")).with_state(JobState.DEAD_LETTER)
    assert job_filter.admin_kwargs()["state"] is JobState.DEAD_LETTER

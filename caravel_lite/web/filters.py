"""The job filters of the Jobs and Dead letters pages, read from a query string or a
form, as the keyword arguments of ``QueueAdmin.jobs`` and ``replay_many``.

The same filters as ``caravel-lite jobs``: queue, state, tenant, wire name, failure and a
time range. Times are a duration before now (``90s``, ``15m``, ``1h``, ``2d``, ``1w``)
or an ISO 8601 instant (UTC unless it says otherwise).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace
from datetime import datetime, timedelta, timezone
from typing import Dict, List, Optional, Tuple, Union

from caravel_lite.errors import InvalidField
from caravel_lite.values import Failure, JobState
from caravel_lite.web.http import Params

_DURATION = re.compile(r"^(\d+)\s*(s|m|h|d|w)$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
# Query-string names; the form field for the tenant is "tenant" as on the command line,
# the job type's "wire_name" (--wire-name). Links made before it was named so say "type".
_NAMES = {"queue_name": "queue", "state": "state", "tenant_id": "tenant",
          "wire_name": "wire_name", "failure": "failure", "since": "since", "until": "until"}
_FORMER_NAMES = {"wire_name": "type"}


def parse_instant(field: str, text: str) -> Union[timedelta, datetime]:
    """A duration (that long before now, as ``QueueAdmin`` reads a timedelta) or an
    ISO 8601 instant, as an aware datetime."""
    match = _DURATION.match(text.strip().lower())
    if match:
        return timedelta(seconds=int(match.group(1)) * _UNITS[match.group(2)])
    try:
        instant = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InvalidField(field, "must be a duration such as 15m, 1h, 2d or an ISO 8601 "
                                  "time such as 2026-01-31T12:00Z") from None
    return instant if instant.tzinfo else instant.replace(tzinfo=timezone.utc)


@dataclass(frozen=True)
class JobFilter:
    """What the user typed (kept as text, to redisplay it) and what it means."""

    queue_name: Optional[str] = None
    state: Optional[str] = None
    tenant_id: Optional[str] = None
    wire_name: Optional[str] = None
    failure: Optional[str] = None
    since: Optional[str] = None
    until: Optional[str] = None

    @classmethod
    def from_params(cls, params: Params) -> "JobFilter":
        values = {attr: params.optional(name) for attr, name in _NAMES.items()}
        for attr, former in _FORMER_NAMES.items():
            if values[attr] is None:
                values[attr] = params.optional(former)
        return cls(**values)

    def with_state(self, state: JobState) -> "JobFilter":
        return replace(self, state=state.value)

    def admin_kwargs(self) -> Dict[str, object]:
        """Keyword arguments for ``QueueAdmin.jobs``/``replay_many``; a bad value raises
        :class:`InvalidField` naming the query field."""
        kwargs: Dict[str, object] = {}
        if self.queue_name is not None:
            kwargs["queue"] = self.queue_name
        if self.state is not None:
            try:
                kwargs["state"] = JobState(self.state)
            except ValueError:
                raise InvalidField("state", "must be one of "
                                   + ", ".join(s.value for s in JobState)) from None
        if self.tenant_id is not None:
            kwargs["tenant_id"] = self.tenant_id
        if self.wire_name is not None:
            kwargs["wire_name"] = self.wire_name
        if self.failure is not None:
            try:
                kwargs["failure"] = Failure(self.failure)
            except ValueError:
                raise InvalidField("failure", "must be one of "
                                   + ", ".join(f.value for f in Failure)) from None
        if self.since is not None:
            kwargs["since"] = parse_instant("since", self.since)
        if self.until is not None:
            kwargs["until"] = parse_instant("until", self.until)
        return kwargs

    def params(self) -> Dict[str, str]:
        """The filter as query-string fields (only those set)."""
        return {_NAMES[f.name]: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) is not None}

    def hidden_fields(self) -> List[Tuple[str, str]]:
        return sorted(self.params().items())

    @property
    def empty(self) -> bool:
        return not self.params()

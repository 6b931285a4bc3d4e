"""What the operator commands (``queues``, ``jobs``, ``show``, ``replay``, ``discard``,
``delete``, ``prune``, ``stats``) share: opening a :class:`QueueAdmin` on a migrated
database, reading durations and instants, and printing human tables or one JSON object
per line. Every value read from the database goes through ``common.safe_text`` before it
reaches a terminal; JSON escapes control characters itself."""
from __future__ import annotations

import argparse
import dataclasses
import enum
import json
import re
import sys
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, TextIO, Union

from caravel_lite.admin import QueueAdmin
from caravel_lite.admin.lookup import prefix_bounds
from caravel_lite.cli import common
from caravel_lite.errors import InvalidField
from caravel_lite.migrator import check_schema
from caravel_lite.values import Failure, JobState

_DURATION = re.compile(r"(?P<n>\d+(?:\.\d+)?)\s*(?P<unit>ms|s|m|h|d|w)\Z")
_UNITS = {"ms": timedelta(milliseconds=1), "s": timedelta(seconds=1),
          "m": timedelta(minutes=1), "h": timedelta(hours=1), "d": timedelta(days=1),
          "w": timedelta(weeks=1)}


# The longest duration a flag takes: enough for any retention or look-back, and far
# enough from datetime's limits that "now" minus it is still a date (year 1 is not).
MAX_DURATION = timedelta(days=36500)


def acted_on(done: int, total: int, noun: str, verb: str, dry_run: bool) -> int:
    """The closing line of a command acting on ids one by one ("3 of 4 job(s)
    cancelled", on stderr), and its exit: OK when every id was acted on, else
    :class:`~caravel_lite.cli.common.CommandFailed` (exit 1)."""
    would = "would be " if dry_run else ""
    tail = " (dry run: nothing changed)" if dry_run else ""
    sys.stderr.write(f"{done} of {total} {noun}(s) {would}{verb}{tail}\n")
    if done < total:
        raise common.CommandFailed(f"{total - done} of {total} {noun}(s) not {verb}")
    return common.OK


def duration(text: str) -> timedelta:
    """``90s``, ``15m``, ``1h``, ``7d``, ``2w``, at most 36500d (argparse type: argparse
    names the flag in its refusal, exit 2)."""
    match = _DURATION.match(text.strip().lower())
    if match is None:
        raise argparse.ArgumentTypeError(
            f"expected a duration such as 30m, 1h or 7d, got {text!r}")
    unit, number = _UNITS[match.group("unit")], float(match.group("n"))
    # Compared before multiplying: timedelta * a huge float overflows.
    if number > MAX_DURATION / unit:
        raise argparse.ArgumentTypeError(
            f"{text.strip()!r} is out of range: at most {MAX_DURATION.days}d")
    return unit * number


def instant(text: str) -> Union[timedelta, datetime]:
    """A duration before now (``1h``), or an ISO-8601 date-time with its offset
    (``2030-01-01T00:00:00Z``) (argparse type)."""
    if _DURATION.match(text.strip().lower()):
        return duration(text)  # a duration, perhaps out of range: say so
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a duration (1h, 7d) or an ISO date-time with an offset, got {text!r}")
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no UTC offset (add Z or +00:00)")
    return value


def job_id(text: str) -> str:
    try:
        return str(uuid.UUID(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a job id: {text!r}") from None


def job_id_prefix(text: str) -> str:
    """A job id or its beginning (hex digits, hyphens allowed), as typed (argparse
    type); which job it names is looked up by the command. A whole id is taken in every
    form the other commands take (``{...}``, ``urn:uuid:...``)."""
    try:
        return str(uuid.UUID(text.strip()))
    except ValueError:
        pass  # not a whole id: perhaps its beginning
    try:
        prefix_bounds(text)
    except InvalidField:
        raise argparse.ArgumentTypeError(
            f"not a job id or the beginning of one: {text!r}") from None
    return text.strip().lower()


def choice_of(cls: type, aliases: Optional[Dict[str, Any]] = None) -> Callable[[str], Any]:
    """An argparse type accepting an enum's values (``dead_letter``) or names, and the
    ``aliases`` given (words the tables print, such as ``dead``)."""
    def parse(text: str) -> Any:
        key = text.strip().lower()
        if aliases and key in aliases:
            return aliases[key]
        for member in cls:  # type: ignore[attr-defined]
            if key in (member.value, member.name.lower()):
                return member
        names = ", ".join(m.value for m in cls)  # type: ignore[attr-defined]
        also = f" (or {', '.join(aliases)})" if aliases else ""
        raise argparse.ArgumentTypeError(f"expected one of {names}{also}, got {text!r}")
    parse.__name__ = cls.__name__
    return parse


# The queues table heads its dead letters DEAD: what a table prints is accepted back.
state_choice = choice_of(JobState, {"dead": JobState.DEAD_LETTER})
failure_choice = choice_of(Failure)


def add_database_and_json(parser: argparse.ArgumentParser) -> None:
    common.add_database_argument(parser)
    parser.add_argument("--json", action="store_true",
                        help="one JSON object per line instead of a table")


def add_filters(parser: argparse.ArgumentParser, state: bool = True) -> None:
    parser.add_argument("--queue", help="only this queue")
    if state:
        parser.add_argument("--state", type=state_choice,
                            help="pending, leased, completed, dead_letter (dead) or "
                                 "cancelled")
    parser.add_argument("--tenant", help="only this tenant id (exact)")
    parser.add_argument("--wire-name", help="only jobs of this wire name")
    parser.add_argument("--failure", type=failure_choice,
                        help="only jobs whose last failure is this category")
    parser.add_argument("--since", type=instant,
                        help="created since: a duration before now (1h, 7d) or an ISO time")
    parser.add_argument("--until", type=instant, help="created before (as --since)")


def filters_of(args: argparse.Namespace) -> Dict[str, Any]:
    return dict(queue=args.queue, tenant_id=args.tenant, wire_name=args.wire_name,
                failure=args.failure, since=args.since, until=args.until)


class AdminSession:
    """A QueueAdmin over the command's database, checked to be fully migrated; the
    connection is closed on exit. A SQLite file that is not there is never created."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.db = common.open_argument(args, existing=True)

    def __enter__(self) -> QueueAdmin:
        check_schema(self.db)
        return QueueAdmin(self.db)

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        common.close_quietly(self.db)
        if isinstance(exc, InvalidField):  # the API refused an argument: exit 2
            raise common.UsageError(str(exc)) from None


# -- output --------------------------------------------------------------------------------

def plain(value: Any) -> Any:
    """A value of the admin API as JSON data: ids and times as text (UTC, ISO 8601),
    enums by value, durations in seconds."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime):
        return value.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
    if isinstance(value, timedelta):
        return value.total_seconds()
    return value


def print_json(value: Any, out: Optional[TextIO] = None) -> None:
    (out or sys.stdout).write(json.dumps(plain(value), sort_keys=False) + "\n")


def print_count(args: argparse.Namespace, count: int, noun: str, verb: str) -> None:
    """The outcome of a command acting on every matching job: ``{verb: count, "dry_run":
    ...}`` with --json, else one line such as "3 job(s) pruned" (or "would be pruned",
    with --dry-run)."""
    if args.json:
        print_json({verb: count, "dry_run": args.dry_run})
    elif args.dry_run:
        print(f"{count} {noun} would be {verb} (dry run: nothing changed)")
    else:
        print(f"{count} {noun} {verb}")


def when(value: Optional[datetime]) -> str:
    return "-" if value is None else value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def age(value: Optional[timedelta]) -> str:
    """A short human duration: 450ms, 12s, 5m03s, 2h14m, 3d04h."""
    if value is None:
        return "-"
    ms = int(value.total_seconds() * 1000)
    if ms < 1000:
        return f"{ms}ms"
    s = ms // 1000
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]],
          out: Optional[TextIO] = None, right: Sequence[int] = ()) -> None:
    """Columns aligned with two spaces between them; every cell made terminal-safe."""
    out = out or sys.stdout
    cells = [[common.safe_text(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if i in right else v.ljust(w)
                         for i, (v, w) in enumerate(zip(values, widths))).rstrip()
    out.write(line(list(headers)) + "\n")
    for row in cells:
        out.write(line(row) + "\n")


BLOCKS = " ▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[int]) -> str:
    """One character per value, its height relative to the largest."""
    top = max(values, default=0)
    if top <= 0:
        return BLOCKS[1] * len(values) if values else ""
    return "".join(BLOCKS[max(1, round(v / top * 8))] if v else BLOCKS[1] for v in values)


def each_id(ids: Sequence[str]) -> Iterator[str]:
    seen = set()
    for ident in ids:
        if ident not in seen:
            seen.add(ident)
            yield ident


def summary_row(job: Any) -> List[Any]:
    return [job.job_id, job.queue_name, job.tenant_id, job.state.value + progress_of(job),
            job.wire_name,
            f"{job.attempts}/{job.max_attempts}",
            job.last_failure.value if job.last_failure else "-", when(job.enqueued_at)]


def progress_of(job: Any) -> str:
    """`` 40/100`` (or `` 40``) after a state, when the job reported progress."""
    done = getattr(job, "progress_done", None)
    if done is None:
        return ""
    total = getattr(job, "progress_total", None)
    return f" {done}/{total}" if total is not None else f" {done}"


SUMMARY_HEADERS = ("JOB", "QUEUE", "TENANT", "STATE", "WIRE NAME", "ATTEMPTS",
                   "LAST FAILURE", "CREATED (UTC)")


def limited_keys_table(keys: Sequence[Any], out: Optional[TextIO] = None) -> None:
    """The concurrency keys with jobs waiting behind their limit, after a blank line
    (nothing when none waits)."""
    if not keys:
        return
    (out or sys.stdout).write("\n")
    table(("QUEUE", "LIMITED KEY", "LEASED", "WAITING"),
          [(k.queue_name, k.key, k.leased, k.waiting) for k in keys], out, right=(2, 3))

"""Riding out a database outage, for the worker's loop and the outbox relay's.

A long-running process meeting a lost database has two honest choices: exit and let a
supervisor restart it (the Python API's default: errors propagate), or wait for the
database to come back. :class:`OutagePolicy` is the second, bounded:

- the first failure of an outage is logged once, at WARNING, with its error type (no
  message: it may hold a host or a user name); later ones at DEBUG;
- between attempts it sleeps a jittered back-off, 0.5 s doubling up to 10 s, cut short
  by a stop request;
- the process's connection is dropped, so the next statement opens a fresh one;
- it gives up, raising the last error, once ``max_outage`` passed without a successful
  statement, and at once on a fault that waiting cannot fix (the schema is not
  migrated, the server refuses the login: :meth:`Dialect.is_unfixable`) or an error
  that is not about the connection at all (a constraint, a bug: those propagate).

Each error is judged by the database that raised it: a loop over two databases (the
relay: the outbox on one, the queue on another) reads a PostgreSQL error as PostgreSQL
reports it even when the other database is SQLite. The policy derives each database's
classifier from the database object itself; no dialect is passed beside it.
"""
from __future__ import annotations

import random
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Callable, List, Optional, Sequence

import peewee

from caravel_lite.errors import InvalidField, SchemaNotReady
from caravel_lite.logfields import fields
from caravel_lite.observability import logger

if TYPE_CHECKING:
    from caravel_lite.error_codes import ErrorCodes

__all__ = ["OutagePolicy", "check_max_outage", "rides_out", "judged_by", "FIRST_PAUSE",
           "MAX_PAUSE"]

FIRST_PAUSE = 0.5
MAX_PAUSE = 10.0
# Longest outage budget accepted (a week): longer is surely a unit mistake.
MAX_OUTAGE = 7 * 24 * 3600.0


def check_max_outage(value: object) -> Optional[float]:
    """None (propagate errors) or seconds > 0, from a number or a timedelta."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, timedelta)):
        raise InvalidField("max_outage", "must be seconds (a number), a timedelta or None, "
                           f"got {type(value).__name__}")
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if not 0 < seconds <= MAX_OUTAGE:
        raise InvalidField("max_outage", f"must be more than 0 and at most a week, got {value}")
    return seconds


def classifiers(databases: Sequence[peewee.Database]) -> List["ErrorCodes"]:
    """Each database's error classifier, derived from the database object."""
    from caravel_lite.dialect import errors_of

    return [errors_of(db) for db in databases]


def judged_by(exc: BaseException, codes: Sequence["ErrorCodes"]) -> List["ErrorCodes"]:
    """The classifiers that judge ``exc``: the one of the database whose driver raised
    it; when no driver's is recognised (Peewee's own errors), all of them."""
    raisers = [c for c in codes if c.raised(exc)]
    return raisers[:1] or list(codes)


def rides_out(exc: BaseException, databases: Sequence[peewee.Database]) -> bool:
    """Whether waiting may fix ``exc``, raised by one of ``databases``: a lost or
    refused connection, a server starting up or shutting down, a lock that did not
    clear; not a missing schema, a refused login, nor an error in what was asked
    (constraints, SQL). Judged by the database that raised it (:func:`judged_by`)."""
    return _rides_out(exc, classifiers(databases))


def _rides_out(exc: BaseException, codes: Sequence["ErrorCodes"]) -> bool:
    if isinstance(exc, SchemaNotReady):
        return False
    if not isinstance(exc, (peewee.OperationalError, peewee.InterfaceError)):
        return False
    return not any(c.is_unfixable(exc) for c in judged_by(exc, codes))


class OutagePolicy:
    """Decides, after each failed pass of a loop, whether to wait and try again.

    ``databases``: the Peewee databases the loop uses (their connections in this thread
    are dropped after a failure); each error is judged by the one that raised it.
    ``wait(seconds)`` sleeps and returns True when a stop was requested meanwhile (the
    loop then ends normally).
    """

    def __init__(self, max_outage: float, databases: Sequence[peewee.Database],
                 *, what: str = "worker", monotonic: Callable[[], float] = time.monotonic,
                 rng: Optional[random.Random] = None) -> None:
        self.max_outage = max_outage
        self.databases = list(databases)
        self._codes = classifiers(self.databases)
        self.what = what
        self._monotonic = monotonic
        self._rng = rng or random.Random()
        self._since: Optional[float] = None  # when the current outage began
        self._pause = FIRST_PAUSE
        self.outages = 0  # outages ridden out so far (tests and logs)

    @property
    def in_outage(self) -> bool:
        return self._since is not None

    def succeeded(self) -> None:
        """A pass ran without a database error: any outage is over."""
        if self._since is not None:
            logger.warning("%s: database reachable again after %.1f s", self.what,
                           self._monotonic() - self._since, extra=fields(component=self.what))
            self._since = None
            self._pause = FIRST_PAUSE

    def failed(self, exc: BaseException, wait: Callable[[float], bool]) -> bool:
        """Handle the error of a failed pass: re-raise it when waiting cannot help or
        the budget is spent, else drop the connections and sleep the back-off. Returns
        True when a stop was requested during the sleep."""
        if not _rides_out(exc, self._codes):
            raise exc
        now = self._monotonic()
        if self._since is None:
            self._since = now
            self.outages += 1
            logger.warning("%s: database unavailable (%s); retrying for up to %.0f s",
                           self.what, type(exc).__name__, self.max_outage,
                           extra=fields(component=self.what, error_type=type(exc).__name__))
        else:
            logger.debug("%s: database still unavailable (%s)", self.what, type(exc).__name__,
                         extra=fields(component=self.what, error_type=type(exc).__name__))
        elapsed = now - self._since
        if elapsed >= self.max_outage:
            logger.error("%s: database unavailable for %.0f s (max_outage); giving up",
                         self.what, elapsed, extra=fields(component=self.what, error_type=type(exc).__name__))
            raise exc
        self._drop_connections()
        pause = min(self._pause, self.max_outage - elapsed)
        self._pause = min(self._pause * 2, MAX_PAUSE)
        # Jitter: several workers that lost one server do not come back in lock-step.
        return wait(pause * (0.5 + self._rng.random() / 2))

    def _drop_connections(self) -> None:
        for db in self.databases:
            if db.in_transaction():
                continue  # the caller's transaction: not ours to end
            try:
                db.close()
            except Exception:  # a broken connection may fail to close; it is reset anyway
                pass

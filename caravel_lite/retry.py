"""One retry policy: how often, and for how long, one call of the library repeats a
statement that met a lock conflict.

Which errors are worth repeating is the dialect's call
(:meth:`caravel_lite.dialect.Dialect.is_transient`). A dropped connection is not one:
the operation that lost its reply recovers by reading back what it owns
(:func:`recovering`). How many times and for how long is
decided here, once per public call (a claim, a renewal, an acknowledgement, an
enqueue): SQLite's busy handling in :func:`caravel_lite.dialect.open_database`'s
databases and the queue's repeat of a fenced statement draw on the same
:class:`CallBudget`, so two layers never multiply each other's retries.
"""
from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, TypeVar

import peewee

from caravel_lite.errors import CaravelError, DatabaseBusy

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """The retry budget of one call.

    - ``retries``: how many times a statement may be repeated after its first attempt,
      in all, whichever layer repeats it; 0 means never.
    - ``window``: seconds; no repeat starts later than this after the call began.
    - ``first_pause`` / ``pause_cap``: the randomised pause before a repeat starts at
      ``first_pause`` and doubles up to ``pause_cap`` (jitter: 0.5x to 1.5x).

    One call therefore blocks at most ``window`` + one lock wait (SQLite's
    ``busy_timeout``, the server's lock wait timeout) + 1.5 x ``pause_cap``
    (:meth:`worst_case`).
    """

    # The window, not the count, is what usually ends a default budget: as many
    # repeats as fit in 2 s (under a storm of writers with a short busy_timeout, a few
    # dozen), with the worst case below stated whatever the count.
    retries: int = 100
    window: float = 2.0
    first_pause: float = 0.002
    pause_cap: float = 0.05

    def worst_case(self, lock_wait: float) -> float:
        """The longest one call can block, in seconds, when each attempt can wait up to
        ``lock_wait`` seconds for a lock."""
        return self.window + lock_wait + 1.5 * self.pause_cap


DEFAULT_POLICY = RetryPolicy()


def policy_of(db: peewee.Database) -> RetryPolicy:
    """The policy a database was opened with (:func:`open_database` sets
    ``db.retry_policy``), else the default."""
    policy = getattr(db, "retry_policy", None)
    return policy if isinstance(policy, RetryPolicy) else DEFAULT_POLICY


class TransientCounter:
    """Counts transient errors retried, per process (read by tests and reports)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.value = 0

    def increment(self) -> None:
        with self._lock:
            self.value += 1


transient_retries = TransientCounter()


class CallBudget:
    """What one call has left of its policy: repeats and time."""

    def __init__(self, policy: RetryPolicy, started: Optional[float] = None) -> None:
        self.policy = policy
        self.started = time.monotonic() if started is None else started
        self.retries = 0
        self._pause = policy.first_pause

    @property
    def attempts(self) -> int:
        return self.retries + 1

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def spend(self) -> bool:
        """Pause and return True when one more attempt may start; False once the budget
        is used up (nothing is spent then)."""
        if self.retries >= self.policy.retries or self.elapsed() >= self.policy.window:
            return False
        self.retries += 1
        transient_retries.increment()
        time.sleep(self._pause * (0.5 + random.random()))
        self._pause = min(self._pause * 2, self.policy.pause_cap)
        return True

    def describe(self) -> str:
        return (f"after {self.attempts} attempt(s) over {self.elapsed() * 1000:.0f} ms "
                f"(the call's retry budget: {self.policy.retries} retries within "
                f"{self.policy.window:g} s)")


_active = threading.local()


class call_budget:
    """``with call_budget(db) as budget``: the budget of the call running on ``db`` in
    this thread, the one already open (a nested statement shares its caller's), else a
    fresh one for the duration, counted from ``started`` (a ``time.monotonic()`` reading
    taken when the call began) when given, else from now.

    A class rather than a generator context manager: every public call of the queue
    enters one, and each statement's retry layers enter it again, so on the enqueue
    path its cost is paid several times per job.
    """

    __slots__ = ("_db", "_started", "_budgets", "_owned")

    def __init__(self, db: peewee.Database, started: Optional[float] = None) -> None:
        self._db = db
        self._started = started

    def __enter__(self) -> CallBudget:
        budgets: Optional[Dict[int, CallBudget]] = getattr(_active, "budgets", None)
        if budgets is None:
            budgets = _active.budgets = {}
        self._budgets = budgets
        key = id(self._db)
        current = budgets.get(key)
        self._owned = current is None
        if current is None:
            current = budgets[key] = CallBudget(policy_of(self._db), self._started)
        return current

    def __exit__(self, *exc: Any) -> None:
        if self._owned:
            del self._budgets[id(self._db)]


def budgeted(method: Callable[..., T]) -> Callable[..., T]:
    """Run a method of an object with a ``db`` attribute as one call: every statement
    it runs (and every layer that repeats one) shares one budget."""
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> T:
        with call_budget(self.db):
            return method(self, *args, **kwargs)
    wrapper.__name__ = method.__name__
    wrapper.__qualname__ = method.__qualname__
    wrapper.__doc__ = method.__doc__
    wrapper.__wrapped__ = method  # type: ignore[attr-defined]
    return wrapper


def retrying(dialect: Any, db: peewee.Database, action: Callable[[], T],
             on_retry: Optional[Callable[[], None]] = None) -> T:
    """Run ``action`` (one statement, or one whole short transaction of the library's
    own), repeating it while the call's budget lasts when it met a transient lock
    conflict (which changed nothing); then raise :class:`DatabaseBusy` (still a
    ``peewee.OperationalError``), or any other error as it is.

    A dropped connection is never repeated here: whether the action was carried out is
    unknown, and only the operation knows how to find out (:func:`recovering`).

    Only outside the caller's transaction: inside one, a deadlock has already rolled
    the caller's work back and repeating our statement alone would be wrong, so the
    error is raised as it is.
    """
    with call_budget(db) as budget:
        while True:
            try:
                return action()
            except DatabaseBusy:
                raise  # its layer already spent this call's budget
            except (peewee.DatabaseError, peewee.InterfaceError) as exc:
                if db.in_transaction() or _deliberate(exc) or not dialect.is_transient(exc):
                    raise
                if not budget.spend():
                    raise DatabaseBusy(
                        f"lock conflict not resolved {budget.describe()}: "
                        f"{type(exc).__name__}: {exc}; the statement changed nothing "
                        f"and may be repeated") from exc
                if on_retry is not None:
                    on_retry()


def recovering(dialect: Any, db: peewee.Database, action: Callable[[], T],
               recover: Callable[[], T], *, statement: bool = False) -> T:
    """Run ``action`` as :func:`retrying` does (``statement``: a single statement, as
    :func:`retrying_statement`); when it fails because the connection dropped outside
    a transaction (its reply lost: the server may or may not have carried it out), run
    ``recover`` instead, on a new connection: once at once, then again as often as the
    call's budget allows while the connection keeps dropping.

    ``recover`` must find out what the lost action did by reading what it owns (the
    rows holding a claim's lease token, an enqueue's own job id) and finish the work
    from there, so that running it after a committed action, or again after itself,
    does nothing twice. Inside the caller's transaction the error is raised as it is:
    the transaction is lost and is the caller's to repeat; so is a statement a
    :func:`~caravel_lite.connections.bounded` block cut short (``StatementTimedOut``):
    the bound means "stop now", and what the statement did stays unknown to this call.
    """
    try:
        return retrying_statement(dialect, db, action) if statement \
            else retrying(dialect, db, action)
    except DatabaseBusy:
        raise
    except (peewee.OperationalError, peewee.InterfaceError) as exc:
        # A statement cut short by a bound (caravel_lite.connections.bounded) is not
        # recovered inside it: the bound says stop now, and the caller repeats.
        if db.in_transaction() or _deliberate(exc) or _timed_out(exc) \
                or not dialect.is_disconnect(exc):
            raise
        failure: BaseException = exc
    with call_budget(db) as budget:
        # The first recovery runs whatever is left of the budget (the lost statement
        # may have taken all of its window): without it what the action did would
        # stay unknown. Only a recovery that loses its own reply draws on the budget.
        first = True
        while True:
            if not first and not budget.spend():
                raise failure
            first = False
            try:
                return retrying(dialect, db, recover)
            except DatabaseBusy:
                raise
            except (peewee.OperationalError, peewee.InterfaceError) as exc:
                # A bound that fired during the recovery ends it too: repeating would
                # fail at once each time, past the bound, until the budget ran out.
                if db.in_transaction() or _timed_out(exc) or not dialect.is_disconnect(exc):
                    raise
                failure = exc


def retrying_statement(dialect: Any, db: peewee.Database, action: Callable[[], T]) -> T:
    """:func:`retrying` for an ``action`` that is a single statement. A database that
    repeats its own statements within the call's budget (``repeats_own_statements``:
    SQLite through :func:`caravel_lite.dialect.open_database`) already does for one
    statement all that :func:`retrying` would, so the statement runs directly there."""
    if getattr(db, "repeats_own_statements", False):
        return action()
    return retrying(dialect, db, action)


def _timed_out(exc: BaseException) -> bool:
    from caravel_lite.connections import StatementTimedOut  # imports caravel_lite.errors

    return isinstance(exc, StatementTimedOut)


def _deliberate(exc: BaseException) -> bool:
    """True when ``exc`` was raised while handling one of caravel_lite's own errors (a
    rollback failing after StatementTooLarge, say): that error decides, not a retry."""
    seen = exc.__cause__ or exc.__context__
    while seen is not None:
        if isinstance(seen, CaravelError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False

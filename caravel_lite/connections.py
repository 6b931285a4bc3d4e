"""What the connection layer knows of a server connection's socket, whatever the
driver: whether an idle connection is already known to be dead (so that it is replaced
before a statement is sent on it, never after), and how to make a statement that blocks
past a bound fail (:func:`bounded`).

Nothing here re-runs a statement: a statement that was sent and lost its reply is the
operation's to recover, by reading back what it owns (docs/RELIABILITY.md, lost
replies).
"""
from __future__ import annotations

import contextlib
import math
import os
import select
import socket
import threading
from typing import Any, Dict, Iterator, List, Optional

import peewee

from caravel_lite.errors import CaravelError, InvalidField

__all__ = ["StatementTimedOut", "bounded", "current_bound", "open_bounds", "fired_bound",
           "known_dead", "interrupt", "socket_fd", "set_tcp_timeouts", "Bound"]


class StatementTimedOut(CaravelError, peewee.OperationalError):
    """A statement ran past the bound of :func:`bounded`: its connection was shut down
    and is closed; a dropped connection, as far as recovery goes (the statement may or
    may not have committed on the server). Still a ``peewee.OperationalError``."""


def socket_fd(conn: Any) -> Optional[int]:
    """The file descriptor of a driver connection's socket (psycopg 2 and 3:
    ``fileno()``; PyMySQL: its ``_sock``), or None (closed, or SQLite: no socket)."""
    fileno = getattr(conn, "fileno", None)
    try:
        if callable(fileno):
            fd = fileno()
            return fd if isinstance(fd, int) and fd >= 0 else None
        sock = getattr(conn, "_sock", None)
        return sock.fileno() if sock is not None else None
    except Exception:  # a closed connection refuses fileno()
        return None


def known_dead(conn: Any, idle_messages: bytes) -> bool:
    """True when an idle connection (no transaction, no statement running) is known to
    be unusable before anything is sent on it: the driver marked it closed, or its
    socket already holds the end of the stream or a message that a live idle session
    never receives (``idle_messages``: the first bytes of the messages a server may
    send an idle session that stays alive; PostgreSQL's notifications, notices and
    parameter changes). A server that terminates a session (restart, kill, idle
    timeout) says so, or just closes its end, at that moment; one non-blocking poll
    finds it, where sending the statement first would leave unknown whether it ran."""
    if getattr(conn, "closed", False) or getattr(conn, "open", True) is False:
        return True  # psycopg: closed (or broken); PyMySQL: open is False
    fd = socket_fd(conn)
    if fd is None:
        return getattr(conn, "_sock", True) is None  # PyMySQL after a forced close
    try:
        readable, _, _ = select.select([fd], [], [], 0)
    except (OSError, ValueError):
        return True
    if not readable:
        return False
    probe = socket.socket(fileno=os.dup(fd))  # closing the duplicate leaves the driver's
    try:
        first = probe.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        probe.close()
    return not first or first[0] not in idle_messages


def set_tcp_timeouts(conn: Any, options: Dict[str, int]) -> None:
    """Set libpq's TCP options (``tcp_user_timeout`` in ms, ``keepalives_idle``,
    ``keepalives_interval`` in s, ``keepalives_count``) on a driver connection's socket,
    for a driver that takes none itself (PyMySQL): data unacknowledged that long, or
    that many unanswered probes of an idle connection, drop it."""
    fd = socket_fd(conn) if options else None
    if fd is None:
        return
    names = {"tcp_user_timeout": getattr(socket, "TCP_USER_TIMEOUT", None),
             "keepalives_idle": getattr(socket, "TCP_KEEPIDLE", None),
             "keepalives_interval": getattr(socket, "TCP_KEEPINTVL", None),
             "keepalives_count": getattr(socket, "TCP_KEEPCNT", None)}
    sock = socket.socket(fileno=os.dup(fd))
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for name, value in options.items():
            option = names.get(name)
            if option is not None:  # Linux's; other systems keep their defaults
                sock.setsockopt(socket.IPPROTO_TCP, option, int(value))
    finally:
        sock.close()  # the duplicate only; the driver still owns its descriptor


def interrupt(conn: Any) -> None:
    """Make whatever blocks on a server connection fail now, from another thread: its
    socket is shut down in both directions, so the blocked read sees the end of the
    stream at once, also when a black-holing network or proxy would never answer
    (where TCP's own timeouts never fire, the local end being acknowledged)."""
    fd = socket_fd(conn)
    if fd is None:
        return  # closed already: nothing blocks on it
    sock = socket.socket(fileno=os.dup(fd))
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already shut down
    finally:
        sock.close()  # the duplicate only; the driver still owns its descriptor


class Bound:
    """The bound of one :func:`bounded` block: the connection its thread sends on, and
    whether the watchdog fired."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._lock = threading.Lock()
        self._conn: Any = None
        self._over = False
        self.fired = False

    def watch(self, conn: Any) -> None:
        """The block's thread is about to send on ``conn``; interrupted at once if the
        bound already fired."""
        with self._lock:
            self._conn = conn
            fired = self.fired
        if fired:
            interrupt(conn)

    def fire(self) -> None:
        with self._lock:
            if self._over:
                return
            self.fired = True
            conn = self._conn
        if conn is not None:
            interrupt(conn)

    def end(self) -> None:
        with self._lock:
            self._over = True

    def error(self) -> StatementTimedOut:
        """What a statement of the block gets once the bound fired."""
        return StatementTimedOut(
            f"statement still blocked after the bound of {self.seconds:g} s "
            f"(caravel_lite.connections.bounded); its connection was shut down")


_active = threading.local()


def _stack(db: peewee.Database) -> List[Bound]:
    bounds: Optional[Dict[int, List[Bound]]] = getattr(_active, "bounds", None)
    if bounds is None:
        bounds = _active.bounds = {}
    return bounds.setdefault(id(db), [])


def current_bound(db: peewee.Database) -> Optional[Bound]:
    """The innermost :func:`bounded` block open on ``db`` in this thread, or None."""
    stack = open_bounds(db)
    return stack[-1] if stack else None


def open_bounds(db: peewee.Database) -> List[Bound]:
    """Every :func:`bounded` block open on ``db`` in this thread, outermost first."""
    bounds: Optional[Dict[int, List[Bound]]] = getattr(_active, "bounds", None)
    if not bounds:
        return []
    return bounds.get(id(db)) or []


def fired_bound(db: peewee.Database) -> Optional[Bound]:
    """The first open block on ``db`` in this thread whose bound fired, or None."""
    for bound in open_bounds(db):
        if bound.fired:
            return bound
    return None


@contextlib.contextmanager
def bounded(db: peewee.Database, seconds: float) -> Iterator[Bound]:
    """Bound how long the statements this thread runs on ``db`` inside the block may
    block, in all: ``seconds`` after the block began, a statement still waiting on the
    database fails, and so does any statement the block sends after that.

    The contract (what a worker's renewer relies on to stay within its lease margin):

    - A statement blocked at the bound fails with :class:`StatementTimedOut` (a
      ``peewee.OperationalError``, read as a dropped connection by every dialect's
      :meth:`~caravel_lite.dialect.Dialect.is_disconnect`), raised by the statement's
      own call in the block's thread, within a few milliseconds of the bound, whatever
      the network does: a watchdog thread shuts the connection's socket down (a
      partition that drops packets, a proxy that black-holes traffic, a server that
      stopped answering all end the same way). The PostgreSQL and MariaDB/MySQL
      databases of :func:`~caravel_lite.dialect.open_database` show the watchdog each
      connection they send on (:class:`~caravel_lite.sessions.Reconnect`); for any
      other server database the connection the thread holds when the block begins
      is watched (opened then if closed).
    - SQLite has no network to hang on: a statement there waits only for the write
      lock, at most ``busy_timeout`` per attempt within the call's retry budget
      (:meth:`caravel_lite.retry.RetryPolicy.worst_case`: 5 s + 2 s + 75 ms with
      :func:`~caravel_lite.dialect.open_database`'s settings), and the block is not
      watched; choose a lease margin above that worst case there.
    - Whether the interrupted statement committed on the server is unknown, as after
      any lost reply, and the operation does NOT recover inside the block (no new
      connection is opened, no read-back is sent, once the bound fired: any later
      statement of the block fails the same way at once). Bound only what may simply
      be repeated: a renewal is fenced by its lease, and its repeat after the bound
      renews or answers None. (A claim cut short may leave rows leased under its token
      until their lease expires; a key-less enqueue repeated may be written twice.)
    - The connection is closed when the block ends after the bound fired (outside a
      transaction; inside the caller's, its rollback fails and the dead connection is
      replaced at the next statement outside it), so the thread's next statement opens
      a fresh one.
    - Opening a connection inside the block is bounded by the connect timeout
      :func:`~caravel_lite.dialect.open_database` sets (``connect_timeout``), not by
      ``seconds``: no socket exists to shut down until the driver made one.
    - Blocks nest; every open block's bound is watched, so the earliest one ends the
      statement (an outer, shorter bound is kept inside a longer inner one). A block
      that ends before its bound costs one timer thread started and cancelled.
    """
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) \
            or not math.isfinite(seconds) or seconds <= 0:
        raise InvalidField("seconds", f"must be a number of seconds > 0, got {seconds!r}")
    bound = Bound(float(seconds))
    # A server database not from open_database shows the watchdog no connection (its
    # cursor() is Peewee's, which knows nothing of bounds): the one this thread holds
    # is watched, opened first if need be (Peewee never replaces it by itself), and
    # what a statement cut short raises is made StatementTimedOut here.
    unwatched = not isinstance(db, peewee.SqliteDatabase) \
        and not getattr(db, "watches_bounds", False)
    if unwatched:
        if db.is_closed() and not db.in_transaction():
            db.connect()
        if not db.is_closed():
            bound.watch(db.connection())
    stack = _stack(db)
    stack.append(bound)
    timer = threading.Timer(bound.seconds, bound.fire)
    timer.daemon = True
    timer.start()
    try:
        yield bound
    except (peewee.OperationalError, peewee.InterfaceError) as exc:
        if unwatched and bound.fired and not isinstance(exc, StatementTimedOut):
            raise bound.error() from exc
        raise
    finally:
        timer.cancel()
        bound.end()
        stack.remove(bound)
        if bound.fired and not db.in_transaction():
            discard_connection(db)


def discard_connection(db: peewee.Database) -> None:
    """Close this thread's connection to ``db`` (outside a transaction), quietly: it is
    dead or about to be, and a driver may refuse to close a dead one (Peewee forgets it
    either way), so that the next statement opens a new one."""
    if db.in_transaction() or db.is_closed():
        return
    try:
        db.close()
    except Exception:
        pass

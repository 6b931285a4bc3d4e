"""What every ``caravel-lite`` command shares, so that each command module stays a thin
layer over the library: the database flags and their environment defaults, loading
``MODULE:ATTR``, masking passwords, safe printing of database text, logging, and the
mapping of errors to exit codes.

Exit codes: 0 success; 1 a fault (the database failed or refused, the schema is not
migrated, the application's code raised); 2 bad arguments, including a database URL
that cannot work as written (unknown scheme, no database name, a bad port). Whether a
server exists or a password is right is only known by connecting, so those are faults
(1). Every failure is one line on stderr; ``--debug`` or ``CARAVEL_DEBUG=1`` adds the
traceback above it. Passwords of the URLs a command was given never reach stdout,
stderr or a log line, even when a driver's message quotes them.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import re
import sys
import threading
import traceback
from typing import TYPE_CHECKING, Any, Iterable, Iterator, List, Optional, Sequence, TextIO
from urllib.parse import unquote, urlsplit

import peewee

from caravel_lite.dialect import MissingDriver, open_database
from caravel_lite.errors import InvalidField, SchemaNotReady
from caravel_lite.migrator import check_schema
from caravel_lite.opening import database_file
from caravel_lite.outage import MAX_OUTAGE, check_max_outage
from caravel_lite.options import QueueOptions
from caravel_lite.queue import DatabaseQueue
from caravel_lite.registry import JobRegistry

DATABASE_ENV = "CARAVEL_DATABASE_URL"
APP_DATABASE_ENV = "CARAVEL_APP_DATABASE_URL"
DEBUG_ENV = "CARAVEL_DEBUG"

if TYPE_CHECKING:
    # What ``register(subparsers)`` receives (generic only in the type stubs).
    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]

OK = 0
FAULT = 1
USAGE = 2
INTERRUPTED = 130  # 128 + SIGINT, what shells report for a process stopped by Ctrl+C

MASK = "***"
MAX_MESSAGE = 400  # characters of one error line; driver messages can run on for pages


class UsageError(Exception):
    """Bad arguments or an unusable URL: exit 2 with this one-line message (``prog``:
    the parser that found it, when argparse did)."""

    def __init__(self, message: str, prog: Optional[str] = None) -> None:
        super().__init__(message)
        self.prog = prog


class CommandFailed(Exception):
    """The command ran and failed for a reason its message states: exit 1."""


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (argparse prints the usage first).
    Sub-command parsers inherit the class."""

    def error(self, message: str) -> Any:  # argparse's signature says NoReturn
        raise UsageError(f"{message} (see --help)", self.prog)


# -- passwords ----------------------------------------------------------------------------

# scheme://user:PASSWORD@ in any text; greedy up to the last "@" of the authority, as
# urlsplit reads it.
_URL_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s/@:]*:)[^\s/]*(?=@)")


class Masker:
    """Replaces the passwords of the URLs a command was given, wherever they appear, and
    the password part of any URL in the text, by ``***``."""

    def __init__(self) -> None:
        self._secrets: List[str] = []

    def add_url(self, url: str) -> None:
        try:
            password = urlsplit(url).password
        except ValueError:
            password = None
        if password is None:
            # An unparsable authority: mask whatever sits between "user:" and "@".
            match = re.match(r"[^:]*://[^/@:]*:([^/]*)@", url)
            password = match.group(1) if match else None
        if password:
            self.add_secret(password)
            self.add_secret(unquote(password))

    def add_secret(self, secret: object) -> None:
        """Mask ``secret`` (a password given some other way, e.g. in the connection
        parameters of an application's database object)."""
        if isinstance(secret, str) and secret and secret not in self._secrets:
            self._secrets.append(secret)
            self._secrets.sort(key=len, reverse=True)  # a longer secret first

    def __call__(self, text: str) -> str:
        text = _URL_PASSWORD.sub(lambda m: m.group("head") + MASK, text)
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        return text


class MaskedStream:
    """A text stream that masks what is written through it. Installed as sys.stdout and
    sys.stderr while a command runs, so that no line (a log record, a traceback, a
    warning) can bypass the masking."""

    def __init__(self, stream: TextIO, masker: Masker) -> None:
        self._stream = stream
        self._masker = masker

    def write(self, text: str) -> int:
        self._stream.write(self._masker(text))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:  # flush, isatty, fileno, encoding ...
        return getattr(self._stream, name)


def masker_of(args: argparse.Namespace) -> Masker:
    masker = getattr(args, "masker", None)
    if masker is None:  # a command module called directly by a test
        masker = args.masker = Masker()
    return masker


# -- databases ----------------------------------------------------------------------------

def add_database_argument(parser: argparse.ArgumentParser, flag: str = "--database",
                          env: str = DATABASE_ENV, what: str = "the queue database",
                          required: bool = True) -> None:
    """Add ``flag`` whose default is the environment variable ``env`` (read when the
    command runs; the help never prints its value, which may hold a password)."""
    suffix = "" if required else "; optional"
    parser.add_argument(flag, default=None, metavar="URL",
                        help=f"URL of {what}, e.g. sqlite:///queue.db or "
                             f"postgresql://user@host/db (default: ${env}{suffix})")


def database_url(args: argparse.Namespace, flag: str = "--database",
                 env: str = DATABASE_ENV, required: bool = True) -> Optional[str]:
    """The URL given by ``flag``, else by ``env``; registered for masking. Raises
    :class:`UsageError` when neither is set and the flag is required."""
    url: Optional[str] = getattr(args, flag.lstrip("-").replace("-", "_"))
    if url is None or not url.strip():
        url = os.environ.get(env, "").strip() or None
    if url is None:
        if required:
            raise UsageError(f"{flag} is required (or set {env})")
        return None
    masker_of(args).add_url(url)
    return str(url)


def open_url(url: str, flag: str = "--database", existing: bool = False) -> peewee.Database:
    """Open (without connecting) the database named by ``url``; an URL that cannot work
    as written (a SQLite URL Peewee misreads, a server whose driver is not installed)
    is a :class:`UsageError` naming the flag. ``existing``: a read-only command's
    database, which must already exist: a SQLite file that does not is never created
    and is a database fault, ``OperationalError: no such database file`` (exit 1)."""
    try:
        db = open_database(url)
    except MissingDriver as exc:
        raise UsageError(f"{flag}: {one_line(exc)}") from None
    except RuntimeError as exc:  # playhouse.db_url: unrecognized or unsupported scheme
        raise UsageError(f"{flag}: {one_line(exc).rstrip('.')}; use sqlite:///PATH, "
                         "postgresql://USER@HOST/DB or mysql://USER@HOST/DB") from None
    except (ValueError, TypeError) as exc:  # no database name, a bad port ...
        raise UsageError(f"{flag}: {one_line(exc)}") from None
    path = database_file(db) if existing else None
    if path is not None and not os.path.isfile(path):
        # What SQLite says of a file it cannot open, a database fault (exit 1), but
        # before SQLite would have created it.
        raise peewee.OperationalError(
            f"no such database file: {path} (create it with caravel-lite migrate "
            f"--database sqlite:///PATH)")
    return db


def open_argument(args: argparse.Namespace, flag: str = "--database",
                  env: str = DATABASE_ENV, existing: bool = False) -> peewee.Database:
    """``open_url(database_url(...))`` for a required database flag."""
    url = database_url(args, flag, env)
    assert url is not None
    return open_url(url, flag, existing)


@contextlib.contextmanager
def connected(args: argparse.Namespace, existing: bool = False) -> Iterator[peewee.Database]:
    """The command's ``--database``, connected for the block and closed after it
    (quietly: a failure to close does not hide the block's outcome). ``existing``: as
    :func:`open_url`'s, for a read-only command."""
    db = open_argument(args, existing=existing)
    try:
        with db.connection_context():
            yield db
    finally:
        close_quietly(db)


def close_quietly(*databases: Optional[peewee.Database]) -> None:
    """Close this thread's connections; a failure to close does not hide the outcome."""
    for db in databases:
        if db is not None and not db.is_closed():
            try:
                db.close()
            except Exception:  # the connection is already gone; nothing to release
                pass


def rides_out(queue: DatabaseQueue, exc: BaseException,
              others: Sequence[peewee.Database] = ()) -> bool:
    """Whether waiting could have fixed ``exc`` (a lost connection, not a refusal),
    judged by whichever of the queue's database and ``others`` raised it."""
    from caravel_lite.outage import rides_out as waiting_helps

    return waiting_helps(exc, [queue.db, *others])


DEFAULT_MAX_OUTAGE = 60.0


def add_max_outage_argument(parser: argparse.ArgumentParser,
                            what: str = "a database outage") -> None:
    """``--max-outage S`` of a long-running command (default 60; 0: no riding out)."""
    parser.add_argument("--max-outage", type=float, default=DEFAULT_MAX_OUTAGE, metavar="S",
                        help=f"ride out {what} for up to S seconds, then exit 1; 0 exits at "
                             f"the first database failure (default {DEFAULT_MAX_OUTAGE:g})")


def max_outage_of(args: argparse.Namespace) -> Optional[float]:
    """``--max-outage`` as the running loop takes it: None for 0 (the first failure ends
    the command), else seconds; what the loops refuse (a negative number, more than a
    week, nan) is a :class:`UsageError` before anything runs."""
    max_outage: float = args.max_outage
    if max_outage == 0:
        return None
    try:
        return check_max_outage(max_outage)
    except InvalidField:
        raise UsageError(f"--max-outage must be 0 or more seconds, at most a week "
                         f"({MAX_OUTAGE:g}), got {max_outage:g}") from None


def outage_fault(queue: DatabaseQueue, exc: BaseException, max_outage: Optional[float],
                 what: str, others: Sequence[peewee.Database] = ()) -> CommandFailed:
    """The one line for a database error that ended the ``what`` (worker, relay ...):
    an outage longer than ``--max-outage``, or a fault waiting could not fix (judged by
    whichever of the queue's database and ``others`` raised it)."""
    if max_outage is not None and rides_out(queue, exc, others):
        reason = "database unavailable for longer than --max-outage"
    else:
        reason = f"{what} faulted"
    return CommandFailed(f"{reason}: {described(exc)}")


def wait_for_schema(queue: DatabaseQueue, stop: threading.Event,
                    max_outage: Optional[float], what: str,
                    others: Sequence[peewee.Database] = ()) -> bool:
    """Check that the queue's database (and ``others``) are migrated before a long run.

    With ``max_outage`` a database that is away is waited for as the running loop
    would wait for it (one warning, jittered back-off, at most ``max_outage``); a
    refused login or a missing schema ends it at once. Returns False when ``stop`` was
    set meanwhile. Without ``max_outage`` the first error propagates."""
    from caravel_lite.outage import OutagePolicy

    databases = [queue.db, *others]
    policy = (OutagePolicy(max_outage, databases, what=what)
              if max_outage is not None else None)
    while not stop.is_set():
        try:
            for db in databases:
                check_schema(db)
        except Exception as exc:
            if policy is None:
                raise
            if policy.failed(exc, stop.wait):  # re-raises when waiting cannot help
                return False
            continue
        if policy is not None:
            policy.succeeded()
        return True
    return False


# -- MODULE:ATTR --------------------------------------------------------------------------

def load_target(spec: str, metavar: str = "MODULE:ATTR") -> Any:
    """Import ``MODULE:ATTR`` (ATTR may be dotted) and return the attribute. The current
    directory is importable, as it is for ``python -m``.

    A malformed spec, a module that does not exist or a missing attribute is a
    :class:`UsageError`; any other exception raised by the module while it is imported
    is the application's fault and propagates (exit 1)."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise UsageError(f"expected {metavar}, got {spec!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            raise UsageError(f"cannot import {module_name!r}: no module named "
                             f"{missing!r}") from None
        raise  # the module exists and imports something missing: its own fault
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise UsageError(f"module {module_name!r} has no attribute {attribute!r}") from None
    return target


def load_queue(args: argparse.Namespace, spec: str,
               options: Optional[QueueOptions] = None,
               option_flags: Sequence[str] = ()) -> DatabaseQueue:
    """The queue a worker or relay serves, from ``MODULE:ATTR`` naming

    - a :class:`JobRegistry`: a queue on ``--database`` (or ``$CARAVEL_DATABASE_URL``)
      with ``options`` (the defaults when None);
    - a :class:`DatabaseQueue`: the application's own queue, with its database, options
      and telemetry; ``--database`` and the flags in ``option_flags`` (those the caller
      saw given) are then refused, since they would be silently ignored;
    - a callable returning either (called once, without arguments).
    """
    target = load_target(spec)
    if callable(target) and not isinstance(target, (type, JobRegistry, DatabaseQueue)):
        target = target()  # a factory; a class is never instantiated on the user's behalf
    if isinstance(target, DatabaseQueue):
        clashing = (["--database"] if getattr(args, "database", None) else []) + list(option_flags)
        if clashing:
            raise UsageError(f"{spec} is a DatabaseQueue, which brings its own database and "
                             f"options: drop {', '.join(clashing)}")
        masker_of(args).add_secret(getattr(target.db, "connect_params", {}).get("password"))
        return target
    if isinstance(target, JobRegistry):
        db = open_argument(args)
        return DatabaseQueue(db, target, options)
    raise UsageError(f"{spec} is a {type(target).__name__}; expected a caravel_lite."
                     "JobRegistry, a DatabaseQueue or a callable returning one")


# -- text from the database ---------------------------------------------------------------

_SHORT_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def safe_text(value: object) -> str:
    """``value`` as text that is safe to print on a terminal. Every character Python
    does not count as printable is shown as an escape (``\\x1b``, ``\\n``,
    ``\\u202e``): control characters such as ESC and the C1 controls, format characters
    such as bidirectional overrides, line separators, spaces other than " ", surrogates
    and unassigned code points. A backslash is doubled so that an escape stays
    unambiguous. Use it for every value read from the database before printing it."""
    text = value if isinstance(value, str) else str(value)
    if text.isprintable() and "\\" not in text:
        return text  # the common case, without a per-character walk
    out = []
    for char in text:
        if char in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[char])
        elif not char.isprintable():
            code = ord(char)
            out.append(f"\\x{code:02x}" if code < 0x100 else
                       f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
        else:
            out.append(char)
    return "".join(out)


# -- logging ------------------------------------------------------------------------------

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def add_log_level_argument(parser: argparse.ArgumentParser, default: str = "INFO") -> None:
    parser.add_argument("--log-level", default=default, choices=LOG_LEVELS,
                        help=f"level of the caravel_lite logger (default {default})")


def configure_logging(level: str) -> None:
    """Log caravel_lite's records at ``level`` and every other logger's warnings to
    stderr (which :func:`main` has made masking), one line per record."""
    root = logging.getLogger()
    if not any(getattr(h, "caravel_cli", False) for h in root.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.caravel_cli = True  # type: ignore[attr-defined]
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
    if root.level == logging.NOTSET or root.level > logging.WARNING:
        root.setLevel(logging.WARNING)
    logging.getLogger("caravel_lite").setLevel(level)


def remove_logging() -> None:
    root = logging.getLogger()
    for handler in [h for h in root.handlers if getattr(h, "caravel_cli", False)]:
        root.removeHandler(handler)
    logging.getLogger("caravel_lite").setLevel(logging.NOTSET)


# -- errors and exit codes ----------------------------------------------------------------

def one_line(exc: BaseException) -> str:
    """The exception's message on one line, at most MAX_MESSAGE characters."""
    text = " ".join(str(exc).split())
    if len(text) > MAX_MESSAGE:
        text = text[:MAX_MESSAGE - 3] + "..."
    return text


def described(exc: BaseException) -> str:
    text = one_line(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def debug_requested(argv: List[str]) -> bool:
    return "--debug" in argv or os.environ.get(DEBUG_ENV, "").strip().lower() in (
        "1", "true", "yes", "on")


def exit_code_of(exc: BaseException, prog: str, debug: bool, err: TextIO) -> int:
    """Report ``exc`` as one line on ``err`` (after its traceback when ``debug``) and
    return the exit code it maps to."""
    if debug and not isinstance(exc, UsageError):
        traceback.print_exception(type(exc), exc, exc.__traceback__, file=err)
    if isinstance(exc, UsageError):
        code, message = USAGE, one_line(exc)
    elif isinstance(exc, (CommandFailed, SchemaNotReady)):
        code, message = FAULT, one_line(exc)
    elif isinstance(exc, KeyboardInterrupt):
        code, message = INTERRUPTED, "interrupted"
    elif isinstance(exc, (peewee.PeeweeException, OSError)):
        code, message = FAULT, f"database error: {described(exc)}"
    else:
        code, message = FAULT, described(exc)
    err.write(f"{prog}: {message}\n")
    err.flush()
    return code

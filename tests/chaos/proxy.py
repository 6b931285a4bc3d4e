"""A loopback TCP proxy between one process and a database server that injects the
faults of issue #22 on request, and counts what it injected by kind.

- ``drop_reply()``: the next request a client sends (past its connection's start-up
  exchange) is forwarded, and the server's reply is discarded; once the reply's first
  bytes arrive (so the server has run the statement, and committed it when it ran
  outside a transaction) the client's connection is reset and the server's closed.
- ``reset()``: one open connection (or all of them) reset: an RST to the client, the
  server's side closed.
- ``blackhole(seconds)``: nothing is forwarded either way, on open and new connections,
  and nothing is closed: a partition that drops packets. Forwarding resumes after it.
- ``refuse(seconds)``: every new connection is reset as soon as it is accepted (as a
  server that refuses it; closing the listener instead would free its port for
  another socket to take meanwhile); open connections carry on.

It knows nothing of the database protocols: a "request" is the first bytes a client
sends after the server last answered it. Windows of the faults that stop traffic
(blackhole, refuse) are kept in ``windows`` with their start and end (wall-clock
seconds), so an audit can tell which outcomes a fault could have held up.
"""
from __future__ import annotations

import enum
import random
import socket
import struct
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import List, Optional, Tuple
from urllib.parse import urlsplit, urlunsplit


class Fault(enum.Enum):
    DROP_REPLY = "drop_reply"
    RESET = "reset"
    BLACKHOLE = "blackhole"
    REFUSE = "refuse"


# A connection's first client messages are its start-up and login (PostgreSQL: the
# startup packet; MariaDB: the handshake response); a reply dropped there is a failed
# connect, not a lost statement reply, so drop_reply skips that many client sends.
STARTUP_SENDS = 2
# How often a stalled pump looks at the clock again.
STALL_TICK = 0.01


@dataclass(frozen=True)
class Window:
    """A stretch of time in which a fault stopped traffic through one proxy."""

    fault: Fault
    start: float
    end: float

    def overlaps(self, start: float, end: float) -> bool:
        return self.start < end and start < self.end


class _Pair:
    """One client connection and its server connection."""

    def __init__(self, client: socket.socket, server: socket.socket) -> None:
        self.client = client
        self.server = server
        self.client_sends = 0
        self.dropping = False  # the reply to the request in flight is to be discarded
        self.countdown: Optional[int] = None  # requests to let through before dropping
        self.drop_label = ""
        self.closed = False
        self.lock = threading.Lock()

    def reset(self) -> bool:
        """RST to the client, close the server's side; False if already closed."""
        with self.lock:
            if self.closed:
                return False
            self.closed = True
        try:
            # SO_LINGER with a zero timeout makes close() send an RST, as a dropped
            # connection looks to a client, instead of an orderly FIN.
            self.client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                   struct.pack("ii", 1, 0))
        except OSError:
            pass
        for sock in (self.client, self.server):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                sock.close()
            except OSError:
                pass
        return True

    def finish(self) -> None:
        """An orderly close of both sides (one of them ended)."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
        for sock in (self.client, self.server):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                sock.close()
            except OSError:
                pass


class ChaosProxy:
    """Forwards 127.0.0.1:``port`` to ``target``; see the module docstring."""

    def __init__(self, target: Tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self.counts: Counter = Counter()
        self.drops: Counter = Counter()  # dropped replies by what was asked for
        self.windows: List[Window] = []
        self._lock = threading.Lock()
        self._listener: Optional[socket.socket] = None
        self._pairs: List[_Pair] = []
        self._stalled_until = 0.0
        self._refusing_until = 0.0
        self._armed: Optional[Tuple[str, Optional[bytes], int]] = None
        self._closed = False

    # -- life ------------------------------------------------------------------------

    def start(self) -> "ChaosProxy":
        self._listen()
        return self

    def close(self) -> None:
        """Stop listening and reset every connection (nothing counted)."""
        with self._lock:
            self._closed = True
            listener, self._listener = self._listener, None
            pairs, self._pairs = self._pairs, []
        if listener is not None:
            listener.close()
        for pair in pairs:
            pair.reset()

    def through(self, url: str) -> str:
        """``url`` with its host and port replaced by the proxy's."""
        parts = urlsplit(url)
        credentials = parts.netloc.rpartition("@")[0]
        netloc = (credentials + "@" if credentials else "") + f"127.0.0.1:{self.port}"
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))

    def _listen(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        with self._lock:
            if self._closed:
                listener.close()
                return
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True,
                         name="chaos-accept").start()

    # -- faults ----------------------------------------------------------------------

    def drop_reply(self, match: Optional[bytes] = None, after: int = 0,
                   label: str = "any") -> None:
        """Discard a reply, then reset its connection (counted when it happens): the
        reply to the next request any connection sends (past its start-up) or, with
        ``match``, to the next request whose bytes contain it (SQL text travels as
        text in both servers' protocols); with ``after`` N, to the Nth request after
        that one on the same connection instead (the COMMIT of a short transaction,
        so that the reply is lost after the server committed)."""
        with self._lock:
            self._armed = (label, match, after)

    def reset(self, rng: random.Random, every: bool = False) -> int:
        """Reset one open connection chosen by ``rng`` (or all); returns how many."""
        with self._lock:
            pairs = [pair for pair in self._pairs if not pair.closed]
        if not every and pairs:
            pairs = [rng.choice(pairs)]
        done = sum(1 for pair in pairs if pair.reset())
        if done:
            with self._lock:
                self.counts[Fault.RESET.value] += done
        return done

    def blackhole(self, seconds: float) -> Window:
        now = time.time()
        window = Window(Fault.BLACKHOLE, now, now + seconds)
        with self._lock:
            self._stalled_until = max(self._stalled_until, window.end)
            self.windows.append(window)
            self.counts[Fault.BLACKHOLE.value] += 1
        return window

    def refuse(self, seconds: float) -> Window:
        now = time.time()
        window = Window(Fault.REFUSE, now, now + seconds)
        with self._lock:
            self._refusing_until = max(self._refusing_until, window.end)
            self.windows.append(window)
            self.counts[Fault.REFUSE.value] += 1
        return window

    # -- forwarding ------------------------------------------------------------------

    def _stall(self) -> None:
        while True:
            with self._lock:
                until = self._stalled_until
            if time.time() >= until:
                return
            time.sleep(min(STALL_TICK, max(until - time.time(), 0.0)))

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # the proxy is closed
            with self._lock:
                refusing = time.time() < self._refusing_until
            if refusing:
                _Pair(client, client).reset()
                continue
            threading.Thread(target=self._connect, args=(client,), daemon=True,
                             name="chaos-connect").start()

    def _connect(self, client: socket.socket) -> None:
        self._stall()  # a partition holds a new connection's handshake too
        try:
            server = socket.create_connection(self.target, timeout=5)
        except OSError:
            client.close()
            return
        server.settimeout(None)
        for sock in (client, server):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pair = _Pair(client, server)
        with self._lock:
            if self._closed:
                pair.reset()
                return
            self._pairs = [p for p in self._pairs if not p.closed] + [pair]
        threading.Thread(target=self._upstream, args=(pair,), daemon=True,
                         name="chaos-up").start()
        threading.Thread(target=self._downstream, args=(pair,), daemon=True,
                         name="chaos-down").start()

    def _upstream(self, pair: _Pair) -> None:
        """Client to server."""
        try:
            while True:
                data = pair.client.recv(65536)
                if not data:
                    break
                self._stall()
                with self._lock:
                    pair.client_sends += 1
                    self._arm(pair, data)
                pair.server.sendall(data)
        except OSError:
            pass
        finally:
            self._end(pair)

    def _arm(self, pair: _Pair, data: bytes) -> None:
        """Under the lock: whether the reply to ``data`` is the one to discard."""
        if pair.dropping:
            return
        if pair.countdown is not None:
            pair.countdown -= 1
            if pair.countdown <= 0:
                pair.countdown, pair.dropping = None, True
            return
        if self._armed is None or pair.client_sends <= STARTUP_SENDS:
            return
        label, match, after = self._armed
        if match is not None and match not in data:
            return
        self._armed = None
        pair.drop_label = label
        if after > 0:
            pair.countdown = after
        else:
            pair.dropping = True

    def _downstream(self, pair: _Pair) -> None:
        """Server to client; discards the reply a drop_reply chose, then resets."""
        try:
            while True:
                data = pair.server.recv(65536)
                if not data:
                    break
                self._stall()
                if pair.dropping:
                    if pair.reset():
                        with self._lock:
                            self.counts[Fault.DROP_REPLY.value] += 1
                            self.drops[pair.drop_label] += 1
                    return
                pair.client.sendall(data)
        except OSError:
            pass
        finally:
            self._end(pair)

    @staticmethod
    def _end(pair: _Pair) -> None:
        """One side ended: end the other (an orderly close, as the peer did)."""
        pair.finish()

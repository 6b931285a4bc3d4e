"""A loopback TCP proxy between a test's database object and its server that can lose
the reply of one chosen statement AFTER the server carried it out, or black-hole all
traffic (what a partition looks like through a proxy: the local end still acknowledges
every byte, so no TCP timeout ever fires).

- ``lose_reply_to(marker)``: the next request from the client that contains ``marker``
  (a piece of SQL text) is forwarded to the server; the server's whole reply is read
  and discarded (until it has been quiet for ``settle`` seconds, so the server finished
  the statement and its commit), then the client's connection is reset and the
  server's closed. The client sees a dropped connection; the server committed.
- ``black_hole()`` / ``restore()``: stop forwarding in both directions without closing
  anything; resume. ``black_hole_at(marker)``: black-hole from the next request that
  contains ``marker`` on (that request is held back too), so that a chosen statement,
  not the connect before it, is what blocks.
- ``reset_then_forward(marker, seconds)``: the client's connection is reset as soon as
  the next request containing ``marker`` comes, and the request reaches the server
  ``seconds`` later: the server carries it out after the client's read-back (a
  statement still on its way, or still running, when the connection dropped). With
  ``seconds=None`` it never reaches the server (a reset before the server ran it).

PostgreSQL connections should be opened with ``prepare_threshold=None``, so that every
statement's SQL text travels with it (psycopg 3 otherwise sends a prepared statement's
name only from its sixth run on).
"""
from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from typing import Any, Iterator, List, Optional, Tuple
from urllib.parse import urlsplit, urlunsplit


class LossyProxy:
    def __init__(self, target: Tuple[str, int], settle: float = 0.3) -> None:
        self.target = target
        self.settle = settle
        self._lock = threading.Lock()
        self._marker: Optional[bytes] = None
        self._hole_marker: Optional[bytes] = None
        self._late: Optional[Tuple[bytes, Optional[float]]] = None
        self._holed = threading.Event()
        self._open = threading.Event()
        self._open.set()
        self._sockets: List[socket.socket] = []
        self.lost: List[bytes] = []  # the markers whose reply was lost, in order
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, daemon=True).start()

    # -- controls ---------------------------------------------------------------------

    def lose_reply_to(self, marker: bytes) -> None:
        with self._lock:
            self._marker = marker

    def black_hole_at(self, marker: bytes) -> None:
        with self._lock:
            self._hole_marker = marker

    def reset_then_forward(self, marker: bytes, seconds: Optional[float]) -> None:
        with self._lock:
            self._late = (marker, seconds)

    @property
    def armed(self) -> bool:
        with self._lock:
            return self._marker is not None or self._late is not None

    def black_hole(self) -> None:
        self._holed.set()
        self._open.clear()

    def restore(self) -> None:
        self._holed.clear()
        self._open.set()

    def close(self) -> None:
        self._listener.close()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            _close(sock)

    def url(self, url: str) -> str:
        """``url`` with its host and port replaced by the proxy's."""
        parts = urlsplit(url)
        credentials = parts.netloc.rpartition("@")[0]
        netloc = (credentials + "@" if credentials else "") + f"127.0.0.1:{self.port}"
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))

    # -- forwarding -------------------------------------------------------------------

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                _close(client)
                continue
            server.settimeout(None)
            with self._lock:
                self._sockets += [client, server]
            pair = _Pair(client, server)
            threading.Thread(target=self._upstream, args=(pair,), daemon=True).start()
            threading.Thread(target=self._downstream, args=(pair,), daemon=True).start()

    def _upstream(self, pair: "_Pair") -> None:
        try:
            while True:
                data = pair.client.recv(65536)
                if not data:
                    break
                with self._lock:
                    if self._hole_marker is not None and self._hole_marker in data:
                        self._hole_marker = None
                        self.black_hole()
                self._open.wait()
                late = None
                with self._lock:
                    marker = self._marker
                    if marker is not None and marker in data:
                        self._marker = None
                        pair.losing = marker
                    if self._late is not None and self._late[0] in data:
                        late, self._late = self._late, None
                if late is not None:
                    self._forward_late(pair, data, late)
                    return
                pair.server.sendall(data)
        except OSError:
            pass
        finally:
            pair.end()

    def _downstream(self, pair: "_Pair") -> None:
        try:
            while True:
                data = pair.server.recv(65536)
                if not data:
                    break
                if pair.losing is not None:
                    self._discard_rest(pair)
                    return
                self._open.wait()
                pair.client.sendall(data)
        except OSError:
            pass
        finally:
            pair.end()

    def _forward_late(self, pair: "_Pair", data: bytes,
                      late: Tuple[bytes, Optional[float]]) -> None:
        """Reset the client at once; send ``data`` to the server ``late[1]`` seconds later
        (None: never), and close the server's side once it has had ``settle`` seconds
        to carry it out."""
        marker, seconds = late
        self.lost.append(marker)
        pair.reset_client()
        if seconds is None:
            _close(pair.server)
            return
        time.sleep(seconds)
        pair.server.sendall(data)
        time.sleep(self.settle)
        _close(pair.server)

    def _discard_rest(self, pair: "_Pair") -> None:
        """The server answered the marked request: read the rest of its answer, then
        reset the client (it never learns the outcome) and close the server's side."""
        pair.server.settimeout(self.settle)
        try:
            while pair.server.recv(65536):
                pass
        except OSError:
            pass  # quiet for ``settle`` seconds: the statement and its commit are done
        assert pair.losing is not None
        self.lost.append(pair.losing)
        pair.reset()


class _Pair:
    def __init__(self, client: socket.socket, server: socket.socket) -> None:
        self.client = client
        self.server = server
        self.losing: Optional[bytes] = None

    def reset(self) -> None:
        self.reset_client()
        self.end()
        _close(self.server)

    def reset_client(self) -> None:
        # SO_LINGER 0: the close is abortive (RST). The shutdown first wakes the other
        # pump thread, blocked in recv() on the same socket (a bare close would not).
        try:
            self.client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                   struct.pack("ii", 1, 0))
        except OSError:
            pass
        try:
            self.client.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        _close(self.client)

    def end(self) -> None:
        for sock in (self.client, self.server):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _close(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass


def server_address(url: str, default_port: int) -> Tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or default_port


DEFAULT_PORTS = {"postgres": 5432, "mysql": 3306}


@contextlib.contextmanager
def database_through_proxy(db_url: str, backend: str, **proxy_options: Any
                           ) -> Iterator[Tuple[LossyProxy, Any]]:
    """A proxy to the test database's server and a database object opened through it
    (PostgreSQL: no prepared statements, so every statement's text is on the wire);
    both closed after the block."""
    import peewee

    from caravel_lite import open_database

    proxy = LossyProxy(server_address(db_url, DEFAULT_PORTS[backend]), **proxy_options)
    extra = {"prepare_threshold": None} if backend == "postgres" else {}
    app_db = open_database(proxy.url(db_url), **extra)
    try:
        yield proxy, app_db
    finally:
        if not app_db.is_closed() and not app_db.in_transaction():
            try:
                app_db.close()
            except peewee.PeeweeException:
                pass
        proxy.close()

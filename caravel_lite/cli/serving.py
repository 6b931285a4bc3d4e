"""What the two serving commands (dashboard, metrics) share: the bind and its
authentication checked together, and a foreground server run until SIGTERM or Ctrl+C."""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Any, Optional, Tuple

from caravel_lite.cli import common
from caravel_lite.errors import InvalidField


def bind_and_auth(args: argparse.Namespace) -> Tuple[Any, Optional[Any]]:
    """``--bind`` and the authentication from the environment, refused together (a
    non-loopback bind needs authentication); the secrets are masked in any output."""
    from caravel_lite.access import auth_from_environ, check_bind, parse_bind

    try:
        bind = parse_bind(args.bind)
        auth = auth_from_environ(os.environ)
        check_bind(bind, auth)
    except InvalidField as exc:
        raise common.UsageError(str(exc)) from None
    if auth is not None:
        common.masker_of(args).add_secret(getattr(auth, "token", None))
        common.masker_of(args).add_secret(getattr(auth, "password", None))
    return bind, auth


def display_host(bind: Any) -> str:
    return f"[{bind.host}]" if ":" in bind.host else bind.host


def serve_until_stopped(server: Any, name: str) -> int:
    """Serve until SIGTERM or Ctrl+C, then close the server and say so on stderr."""
    stopping = threading.Event()

    def stop(signum: int, frame: Any) -> None:
        # shutdown() waits for serve_forever to return, so it runs in another thread.
        if not stopping.is_set():
            stopping.set()
            threading.Thread(target=server.shutdown, daemon=True).start()

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:  # Ctrl+C is how a foreground server is stopped
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.server_close()
    print(f"caravel-lite {name}: stopped", file=sys.stderr, flush=True)
    return common.OK

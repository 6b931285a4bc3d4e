"""``caravel-lite dashboard``: serve the web dashboard (the extra ``web``).

Binds to 127.0.0.1:8080 by default. Any other address is refused unless
authentication is configured in the environment: CARAVEL_DASHBOARD_TOKEN, or
CARAVEL_DASHBOARD_USER and CARAVEL_DASHBOARD_PASSWORD (never on the command line,
where other users can read it). Replay, discard and delete need that authentication
too, and --read-only removes them. Payloads are shown only with --show-payloads. The
dashboard shows every tenant's jobs.
"""
from __future__ import annotations

import argparse
from typing import Any

from caravel_lite.cli import common, serving
from caravel_lite.migrator import check_schema

DEFAULT_BIND = "127.0.0.1:8080"


def register(subparsers: common.Subparsers) -> None:
    cmd = subparsers.add_parser("dashboard", help="serve the web dashboard",
                                description=__doc__.replace("``", ""),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_database_argument(cmd)
    cmd.add_argument("--bind", default=DEFAULT_BIND, metavar="HOST:PORT",
                     help=f"address to listen on (default {DEFAULT_BIND}; port 0 picks a "
                          "free one; a non-loopback host needs authentication)")
    cmd.add_argument("--read-only", action="store_true",
                     help="show only: no replay, discard or delete")
    cmd.add_argument("--show-payloads", action="store_true",
                     help="show job payloads on the job page (hidden otherwise)")
    cmd.add_argument("--scheduler", metavar="MODULE:ATTR", default=None,
                     help="a QueueScheduler (or a callable returning one) whose schedules "
                          "the Schedules page shows")
    common.add_log_level_argument(cmd, default="WARNING")
    cmd.set_defaults(run=run)


def _web() -> Any:
    try:
        import caravel_lite.web as web
        import caravel_lite.web.server as server
    except ImportError as exc:
        raise common.CommandFailed(
            f"the dashboard needs the extra 'web' (pip install 'caravel_lite[web]'): "
            f"{common.one_line(exc)}") from None
    return web, server


def _scheduler(spec: str) -> Any:
    """The application's scheduler, for its schedules (its own queue and database)."""
    from caravel_lite import QueueScheduler

    target = common.load_target(spec)
    if callable(target) and not isinstance(target, (type, QueueScheduler)):
        target = target()
    if not isinstance(target, QueueScheduler):
        raise common.UsageError(f"{spec} is a {type(target).__name__}; expected a "
                                "caravel_lite.QueueScheduler or a callable returning one")
    return target


def run(args: argparse.Namespace) -> int:
    web, server_module = _web()
    bind, auth = serving.bind_and_auth(args)
    common.configure_logging(args.log_level)
    with common.connected(args) as db:
        check_schema(db)
    from caravel_lite import QueueAdmin
    scheduler = _scheduler(args.scheduler) if args.scheduler else None
    # Without authentication the loopback bind checked above is what keeps it local.
    settings = web.DashboardSettings(read_only=args.read_only,
                                     show_payloads=args.show_payloads, auth=auth)
    app = web.Dashboard(QueueAdmin(db), settings, scheduler=scheduler, bind=bind)
    app.warm()  # the day chart's history, read once before the first page asks for it
    try:
        server = server_module.make_dashboard_server(app, bind)
    except OSError as exc:
        raise common.CommandFailed(f"cannot listen on {bind}: {common.one_line(exc)}") from None
    host = serving.display_host(bind)
    mode = ("read-only" if args.read_only else
            "actions enabled" if auth is not None else
            "view only: set CARAVEL_DASHBOARD_TOKEN to enable actions")
    print(f"caravel-lite dashboard: serving http://{host}:{server.server_port}/ ({mode}; "
          f"payloads {'shown' if args.show_payloads else 'hidden'})", flush=True)
    return serving.serve_until_stopped(server, "dashboard")

"""``caravel-lite metrics``: serve the queue database's figures as OpenMetrics text at
/metrics for Prometheus (the extra ``metrics``).

Binds to 127.0.0.1:9464 by default. The dashboard's rules: any other address is
refused unless authentication is configured in the environment (CARAVEL_DASHBOARD_TOKEN,
or CARAVEL_DASHBOARD_USER and CARAVEL_DASHBOARD_PASSWORD; never on the command line),
and then every scrape must send it (Prometheus: ``authorization`` or ``basic_auth``
in the scrape config). Each scrape opens a connection and closes it; none is held in
between. --tenant-label splits caravel_jobs by tenant (one series per tenant and
state).
"""
from __future__ import annotations

import argparse
from typing import Any

from caravel_lite.cli import common, serving
from caravel_lite.migrator import check_schema

DEFAULT_BIND = "127.0.0.1:9464"


def register(subparsers: common.Subparsers) -> None:
    cmd = subparsers.add_parser("metrics", help="serve OpenMetrics at /metrics",
                                description=__doc__.replace("``", ""),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_database_argument(cmd)
    cmd.add_argument("--bind", default=DEFAULT_BIND, metavar="HOST:PORT",
                     help=f"address to listen on (default {DEFAULT_BIND}; port 0 picks a "
                          "free one; a non-loopback host needs authentication)")
    cmd.add_argument("--tenant-label", action="store_true",
                     help="label caravel_jobs by tenant too (mind the cardinality)")
    common.add_log_level_argument(cmd, default="WARNING")
    cmd.set_defaults(run=run)


def _metrics() -> Any:
    try:
        import caravel_lite.metrics as metrics
    except ImportError as exc:
        raise common.CommandFailed(
            f"metrics need the extra 'metrics' (pip install 'caravel_lite[metrics]'): "
            f"{common.one_line(exc)}") from None
    return metrics


def run(args: argparse.Namespace) -> int:
    metrics = _metrics()
    bind, auth = serving.bind_and_auth(args)
    common.configure_logging(args.log_level)
    with common.connected(args) as db:
        check_schema(db)
    from caravel_lite import QueueAdmin

    collector = metrics.QueueMetrics(QueueAdmin(db), tenant_label=args.tenant_label)
    app = metrics.MetricsEndpoint(collector, auth=auth, bind=bind)
    try:
        server = metrics.make_metrics_server(app, bind)
    except OSError as exc:
        raise common.CommandFailed(f"cannot listen on {bind}: {common.one_line(exc)}") from None
    host = serving.display_host(bind)
    print(f"caravel-lite metrics: serving http://{host}:{server.server_port}/metrics "
          f"({'authentication required' if auth is not None else 'loopback only'})",
          flush=True)
    return serving.serve_until_stopped(server, "metrics")

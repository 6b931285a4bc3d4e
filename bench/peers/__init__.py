"""Peer adapters: one module per queue (or raw driver), all behind :class:`Peer`.

``PEERS`` lists them in table order; ``bench.peers.load(key)`` imports one lazily so a
missing package only skips that peer.
"""
from __future__ import annotations

import importlib
from typing import Dict, Tuple

# key -> (module, class); the module is imported only when the peer is used.
PEERS: Dict[str, Tuple[str, str]] = {
    "caravel_lite": ("bench.peers.caravel", "CaravelPeer"),
    "caravel_lite-worker": ("bench.peers.caravel_worker", "CaravelWorkerPeer"),
    "caravel_lite-prefetch": ("bench.peers.caravel_worker", "CaravelPrefetchPeer"),
    "caravel_lite-async": ("bench.peers.caravel_worker", "CaravelAsyncPeer"),
    "caravel_lite-fair": ("bench.peers.caravel_flow", "FairPeer"),
    "caravel_lite-limited": ("bench.peers.caravel_flow", "LimitedPeer"),
    "caravel_lite-rate": ("bench.peers.caravel_flow", "RatePeer"),
    "huey-sqlite": ("bench.peers.huey_sqlite", "SqliteHueyPeer"),
    "huey-sql": ("bench.peers.huey_sql", "SqlHueyPeer"),
    "pgqueuer": ("bench.peers.pgqueuer_peer", "PgQueuerPeer"),
    "procrastinate": ("bench.peers.procrastinate_peer", "ProcrastinatePeer"),
    "celery": ("bench.peers.celery_peer", "CeleryPeer"),
    "raw-sqlite3": ("bench.peers.raw_sqlite", "RawSqlitePeer"),
    "raw-same-schema": ("bench.peers.raw_same_schema", "RawSameSchemaPeer"),
    "raw-psycopg": ("bench.peers.raw_psycopg", "RawPsycopgPeer"),
    "raw-pymysql": ("bench.peers.raw_pymysql", "RawPyMySQLPeer"),
}


def load(key: str):
    module, name = PEERS[key]
    return getattr(importlib.import_module(module), name)

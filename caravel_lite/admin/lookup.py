"""Finding jobs by the beginning of their id, as an operator copies it from a table.

Ids are UUIDs written in the canonical form (``0193a5e2-7c4f-7d11-8e02-...``), version 7:
their first twelve hex digits are the creation millisecond, so a short prefix names a
moment and a longer one a job. The jobs whose id begins with a prefix are one range of
the primary key: from the prefix padded with ``0`` to the prefix padded with ``f``,
both in the canonical form, so the lookup reads the index from where the range starts
and stops after ``limit`` rows, whatever the table's size.
"""
from __future__ import annotations

import re
import uuid
from typing import Tuple

import peewee

from caravel_lite import validation
from caravel_lite.errors import InvalidField
from caravel_lite.schema import JOBS_TABLE

_HEX = re.compile(r"[0-9a-f]{1,32}\Z")
MAX_MATCHES = 100


def _canonical(hex_digits: str) -> str:
    return str(uuid.UUID(hex=hex_digits))


def prefix_bounds(prefix: object) -> Tuple[str, str]:
    """The lowest and the highest canonical id beginning with ``prefix`` (1..32 hex
    digits, in either case, hyphens anywhere ignored); ``InvalidField("prefix")``
    otherwise."""
    if not isinstance(prefix, str):
        raise InvalidField("prefix", f"must be a str, got {type(prefix).__name__}")
    digits = prefix.strip().lower().replace("-", "")
    if not _HEX.match(digits):
        raise InvalidField("prefix", "must be the beginning of a job id: 1 to 32 hex "
                           "digits (hyphens allowed)")
    return _canonical(digits.ljust(32, "0")), _canonical(digits.ljust(32, "f"))


def ids_with_prefix(db: peewee.Database, prefix: object, limit: int) -> Tuple[uuid.UUID, ...]:
    """The ids of the jobs (any tenant) beginning with ``prefix``, in id order, at most
    ``limit`` (1..100) of them."""
    low, high = prefix_bounds(prefix)
    count = validation.check_int("limit", limit, 1, MAX_MATCHES)
    p = db.param
    rows = db.execute_sql(f"SELECT id FROM {JOBS_TABLE} WHERE id >= {p} AND id <= {p} "
                          f"ORDER BY id LIMIT {int(count)}", (low, high)).fetchall()
    return tuple(uuid.UUID(row[0]) for row in rows)

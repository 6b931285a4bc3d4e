"""Reading query plans: the only dialect-specific code of the contract suite.

Each entry of PLANS runs the database's EXPLAIN over a statement and reports what the
tests care about: which index drives the query, whether the table is scanned in full,
and whether the rows are sorted after reading (instead of coming in index order)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import peewee


@dataclass(frozen=True)
class Plan:
    index: Optional[str]   # the index the plan reads, if any
    full_scan: bool        # the whole table is read
    sorts: bool            # an explicit sort step (rows not read in index order)
    text: str              # the raw plan, for failure messages
    # Every index the plan reads, in plan order (a UNION ALL reads one per branch).
    indexes: Tuple[str, ...] = ()
    # An index read by skipping over the values of its leading column(s) that the
    # statement does not constrain: SQLite's "ANY(column)", MySQL's "skip scan". It
    # visits every distinct leading value, so its cost follows the whole index.
    skip_scan: bool = False


def _sqlite(db: peewee.Database, sql: str, params: Sequence) -> Plan:
    rows = db.execute_sql("EXPLAIN QUERY PLAN " + sql, params).fetchall()
    details = [r[-1] for r in rows]
    indexes: List[str] = []
    for detail in details:
        if " USING " in detail and "INDEX " in detail:
            indexes.append(detail.split("INDEX ", 1)[1].split(" ", 1)[0])
    return Plan(indexes[-1] if indexes else None,
                # (SCAN CONSTANT ROW: the one row of a SELECT without FROM, no table)
                any(d.startswith("SCAN ") and "INDEX" not in d and d != "SCAN CONSTANT ROW"
                    for d in details),
                any("TEMP B-TREE" in d for d in details),
                "\n".join(details), tuple(indexes),
                any("(ANY(" in d for d in details))


def _postgres(db: peewee.Database, sql: str, params: Sequence) -> Plan:
    lines = [r[0] for r in db.execute_sql("EXPLAIN " + sql, params).fetchall()]
    indexes: List[str] = []
    for line in lines:
        for marker in ("Index Scan using ", "Index Only Scan using ", "Bitmap Index Scan on ",
                       "Index Scan Backward using ", "Index Only Scan Backward using "):
            if marker in line:
                indexes.append(line.split(marker, 1)[1].split(" ", 1)[0])
    return Plan(indexes[-1] if indexes else None,
                any("Seq Scan" in line for line in lines),
                any(line.strip().startswith(("Sort ", "->  Sort ", "Incremental Sort"))
                    or "->  Sort" in line for line in lines),
                "\n".join(lines), tuple(indexes))


def _mysql(db: peewee.Database, sql: str, params: Sequence) -> Plan:
    cursor = db.execute_sql("EXPLAIN " + sql, params)
    names = [d[0].lower() for d in cursor.description]
    rows = [dict(zip(names, r)) for r in cursor.fetchall()]
    jobs = [r for r in rows if r.get("table") in ("caravel_jobs", "caravel_failures")]
    index = jobs[0]["key"] if jobs else None
    return Plan(index,
                any(r.get("type") == "ALL" for r in jobs),
                any("filesort" in (r.get("extra") or "").lower() for r in jobs),
                "\n".join(str(r) for r in rows),
                tuple(r["key"] for r in jobs if r.get("key")),
                any("skip scan" in (r.get("extra") or "").lower() for r in jobs))


def _mysql_rows_read(db: peewee.Database, sql: str, params: Sequence) -> Optional[int]:
    """Index entries and rows the storage engine handed to the server while the
    statement ran (this session's Handler_read_* counters)."""
    db.execute_sql("FLUSH STATUS")
    db.execute_sql(sql, params).fetchall()
    status = dict(db.execute_sql("SHOW SESSION STATUS LIKE 'Handler_read%%'").fetchall())
    return sum(int(status.get(name, 0)) for name in
               ("Handler_read_first", "Handler_read_key", "Handler_read_next",
                "Handler_read_prev", "Handler_read_rnd_next"))


# Runs a statement and counts what it read, where the database says (MariaDB/MySQL): a
# plan led by the right index can still walk far more of it than its rows (a seek on
# fewer key parts); None where no such counter is at hand.
ROWS_READ: Dict[str, Callable[[peewee.Database, str, Sequence], Optional[int]]] = {
    "sqlite": lambda db, sql, params: None,
    "postgres": lambda db, sql, params: None,
    "mysql": _mysql_rows_read,
}

PLANS: Dict[str, Callable[[peewee.Database, str, Sequence], Plan]] = {
    "sqlite": _sqlite,
    "postgres": _postgres,
    "mysql": _mysql,
}

# Refreshing the planner's statistics after bulk loading.
ANALYZE: Dict[str, str] = {
    "sqlite": "ANALYZE",
    "postgres": "ANALYZE caravel_jobs",
    "mysql": "ANALYZE TABLE caravel_jobs",
}

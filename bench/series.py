"""A row source first..n in each database's own SQL, to insert history in bulk."""
from __future__ import annotations


def series(kind: str, n: int, first: int = 1) -> str:
    """A FROM clause producing one integer column ``n`` with the values first..n."""
    n, first = int(n), int(first)
    if kind == "postgres":
        return f"generate_series({first}, {n}) AS s(n)"
    if kind == "mysql":
        # MariaDB's SEQUENCE engine: a virtual table seq_A_to_B with column seq.
        return f"(SELECT seq AS n FROM seq_{first}_to_{n}) AS s"
    return (f"(WITH RECURSIVE c(n) AS (SELECT {first} UNION ALL SELECT n + 1 FROM c "
            f"WHERE n < {n}) SELECT n FROM c) AS s")


def concat(kind: str, *parts: str) -> str:
    if kind == "mysql":
        return f"CONCAT({', '.join(parts)})"
    return " || ".join(parts)


def padded(kind: str, column: str, width: int = 10) -> str:
    """``column`` as text, zero-padded to ``width``: keys made of it sort in insertion
    order, so a bulk insert appends to the primary key's B-tree instead of splitting
    pages all over it."""
    if kind == "sqlite":
        return f"printf('%0{width}d', {column})"
    cast = "CHAR(20)" if kind == "mysql" else "VARCHAR(20)"
    return f"LPAD(CAST({column} AS {cast}), {width}, '0')"

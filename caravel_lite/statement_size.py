"""How large a statement is as a MariaDB/MySQL driver sends it, and cutting a batch of
rows into multi-row INSERTs below the server's ``max_allowed_packet`` (used by
:meth:`caravel_lite.dialect.Dialect.insert_rows` where the dialect has such a limit)."""
from __future__ import annotations

from typing import Any, Iterator, Optional, Sequence, Tuple

from caravel_lite.errors import StatementTooLarge

# Bytes of max_allowed_packet kept free for the packet's framing and what the size
# estimate of a row does not count exactly.
PACKET_MARGIN = 64 * 1024
# Characters the MariaDB/MySQL drivers escape with a backslash inside a string literal.
_ESCAPED = ("\\", "'", '"', "\n", "\r", "\x00", "\x1a")
# Below this many characters a text's size is bounded (4 bytes a character, each
# escaped) instead of measured.
_MEASURE_FROM = 256


def literal_size(value: Any) -> int:
    """Bytes a value takes as a literal in a statement text, as the MariaDB/MySQL
    drivers send it (a quoted, escaped UTF-8 string; a number; NULL): exact for long
    text, an upper bound for short text."""
    if isinstance(value, str):
        if len(value) < _MEASURE_FROM:
            return 8 * len(value) + 2
        return (len(value.encode("utf-8")) + sum(value.count(c) for c in _ESCAPED) + 2)
    if value is None:
        return 4
    return len(str(value))


def cut_rows(rows: Sequence[Sequence[Any]], chunk: int, max_bytes: Optional[int],
                fixed: int) -> Iterator[Tuple[Sequence[Sequence[Any]], int]]:
    """Cut ``rows`` into runs of at most ``chunk`` rows and, with ``max_bytes``, at
    most that many bytes (``fixed``: the statement text for one row, counted once);
    yields each run with its estimated size."""
    if max_bytes is None:
        for start in range(0, len(rows), chunk):
            yield rows[start:start + chunk], 0
        return
    start, size = 0, fixed
    for index, row in enumerate(rows):
        row_size = sum(literal_size(value) + 2 for value in row) + 4
        if fixed + row_size > max_bytes:
            raise StatementTooLarge(
                f"row {index} of the batch takes about {fixed + row_size} bytes as sent, "
                f"over the server's max_allowed_packet (read as {max_bytes + PACKET_MARGIN} "
                f"bytes, {PACKET_MARGIN} of them kept for framing); raise "
                f"max_allowed_packet or lower max_payload_bytes",
                max_bytes + PACKET_MARGIN, fixed + row_size)
        if index > start and (index - start >= chunk or size + row_size > max_bytes):
            yield rows[start:index], size
            start, size = index, fixed
        size += row_size
    if start < len(rows):
        yield rows[start:], size

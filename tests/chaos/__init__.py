"""Fault-injection runs of the whole worker (issue #22): a proxy that drops replies,
resets, black-holes and refuses connections, worker processes stopped by signals,
handlers that raise anything or block past their lease, and the invariants checked
at the end. See docs/RELIABILITY.md, "Fault-injection runs"."""

"""Migrations of the sample worker's results database (not part of the queue schema)."""

"""Migrations of the sample worker's own table in the queue database (its tallies)."""

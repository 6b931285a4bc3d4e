"""Integrations of caravel_lite with frameworks, each behind its own extra."""

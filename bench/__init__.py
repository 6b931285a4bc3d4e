"""Side-by-side benchmark of caravel_lite and the queues users would otherwise pick.

Run ``python -m bench --help``. Nothing here is imported by caravel_lite.
"""

"""``python -m caravel_lite``: the same command line as the ``caravel-lite`` script."""
import sys

from caravel_lite.cli import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m caravel_lite"))

import sys

from caravel_lite.cli import main

sys.exit(main())

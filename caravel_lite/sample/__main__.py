"""``python -m caravel_lite.sample FLAG``."""
from caravel_lite.sample.commands import main

raise SystemExit(main())

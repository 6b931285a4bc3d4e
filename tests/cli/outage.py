"""The outage a long-running command's ``--max-outage`` is tested against: its database
behind a TCP proxy the test cuts, a short outage ridden out by the same process, a
longer one ending it with exit 1 and one line saying so (#12.5, #12.6)."""
from __future__ import annotations

import subprocess
import time
from typing import Callable, TypeVar
from urllib.parse import urlsplit

from tests.cli import procs
from tests.cli.proxy import Proxy, through
from tests.support import wait_for

Work = TypeVar("Work")


def rides_out_then_gives_up(name: str, db_url: str, start: Callable[[str], subprocess.Popen],
                            add: Callable[[str], Work], done: Callable[[Work], bool]) -> None:
    """``start(url)`` runs ``caravel-lite NAME`` on ``url`` (``db_url`` through a proxy)
    with a --max-outage of a few seconds; ``add(key)`` gives it work, ``done(work)``
    says whether it has carried that out. Checks that work added during a short outage
    is carried out by the same process, and that an outage longer than the budget ends
    it with exit 1 and one line, without a traceback."""
    server = urlsplit(db_url)
    proxy = Proxy((server.hostname, server.port)).start()
    before = add("before")
    process = start(through(proxy, db_url))
    try:
        wait_for(lambda: done(before), timeout=30, message=f"the {name} to do its first work")
        proxy.cut()                     # a short outage, within the budget
        during = add("during")
        time.sleep(1.0)
        assert process.poll() is None, f"the {name} gave up within its outage budget"
        proxy.start()
        wait_for(lambda: done(during), timeout=40,
                 message=f"the same {name} to carry on after the outage")
        proxy.cut()                     # an outage longer than the budget
        code, _, err = procs.finish(process, timeout=60)
    finally:
        proxy.cut()
        if process.poll() is None:
            process.kill()
    assert code == 1, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith(
        f"caravel-lite {name}: database unavailable for longer than --max-outage"), err

"""The steps of a run's exit path (:meth:`caravel_lite.worker.loop.RunLoop.finish`) that
write to the database: each is attempted whatever the others did, and a further
interrupt ends the one write it hits, not the rest."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, List, Optional

from caravel_lite.logfields import fields
from caravel_lite.observability import logger
from caravel_lite.values import QueueLease
from caravel_lite.worker.acks import Acknowledgements

if TYPE_CHECKING:
    from caravel_lite.queue import DatabaseQueue

__all__ = ["ExitSteps", "hand_back", "release_claim"]


class ExitSteps:
    """What went wrong on the way out of a run: database errors, a further interrupt."""

    def __init__(self) -> None:
        self.errors: List[Exception] = []
        self.interrupt: Optional[BaseException] = None

    def attempt(self, step: Callable[[], None]) -> None:
        try:
            step()
        except Exception as exc:
            self.errors.append(exc)
        except (KeyboardInterrupt, SystemExit) as exc:
            self.interrupt = self.interrupt or exc


def release_claim(queue: DatabaseQueue, name: str, token: str) -> None:
    """Hand back what a claim the stop cut short leased under ``token``, if it committed."""
    released = queue.release_claim(name, token)
    if released:
        logger.info("%d job(s) of a claim the worker's stop cut short handed back",
                    released, extra=fields(queue=name, count=released))


def hand_back(acks: Acknowledgements, leases: List[QueueLease], out: ExitSteps) -> None:
    """Hand back each lease; a further interrupt ends the one write it hits (that job is
    taken again once its lease expires), not the hand-back of the others."""
    for index, lease in enumerate(leases):
        try:
            acks.release(lease)
        except Exception as exc:  # the database is away: the rest would fail too
            logger.warning("%d unstarted job(s) not handed back (%s); they are taken "
                           "again once their leases expire", len(leases) - index,
                           type(exc).__name__, extra=fields(count=len(leases) - index,
                                                            error_type=type(exc).__name__))
            raise
        except (KeyboardInterrupt, SystemExit) as exc:
            out.interrupt = out.interrupt or exc

"""One measured scenario: what ``--scenarios`` selects and how the table shows it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Tuple

from bench.peers.base import NotApplicable, Peer
from bench.settings import Settings
from bench.timing import Sample


@dataclass(frozen=True)
class Case:
    key: str
    family: str          # what --scenarios selects and Peer.scenarios filters
    title: str
    run: Callable[[Peer, Settings], Sample]
    rate: bool = True    # False: only the latency (or the value) is meaningful
    unit: Optional[str] = None   # the unit of Sample.value, when the case has one
    one_round: bool = False      # costly or slow-moving: one round whatever --rounds
    kinds: Optional[Tuple[str, ...]] = None  # databases it runs on (None: every one)


def needs(peer: Peer, method: str, reason: str) -> None:
    """NotApplicable unless the peer overrides ``method``."""
    if getattr(type(peer), method) is getattr(Peer, method):
        raise NotApplicable(reason)

"""The two checkouts a ``--baseline`` run compares: this one (the checkout the ``bench``
package runs from) and the baseline, an existing directory or a git worktree of a ref
made for the run in a temporary directory and removed afterwards.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Iterator

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # this checkout's root


@dataclass(frozen=True)
class Checkout:
    """A library checkout: its root (holding ``caravel_lite/`` and ``migrations/``) and
    how the report names it (the commit, and whether the library has local changes)."""

    root: str
    label: str


def _git(root: str, *args: str) -> str:
    return subprocess.run(["git", "-C", root, *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def describe(root: str) -> str:
    """The short commit of the checkout's HEAD, with ``+ local changes`` when the
    library or its migrations differ from it; the path when it is not a git checkout."""
    try:
        head = _git(root, "rev-parse", "--short", "HEAD")
        dirty = _git(root, "status", "--porcelain", "--", "caravel_lite", "migrations")
    except (OSError, subprocess.CalledProcessError):
        return root
    return head + (" + local changes" if dirty else "")


def _check_root(root: str, what: str) -> str:
    root = os.path.realpath(root)
    for needed in ("caravel_lite/__init__.py", "migrations"):
        if not os.path.exists(os.path.join(root, needed)):
            raise SystemExit(f"{what} {root} has no {needed}: not a caravel_lite checkout")
    return root


def this() -> Checkout:
    root = _check_root(HERE, "this checkout")
    return Checkout(root, describe(root))


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(f"stopped by signal {signum}")


@contextlib.contextmanager
def baseline(ref: str) -> Iterator[Checkout]:
    """The baseline named by ``ref``: an existing checkout directory as it is, or else
    a detached git worktree of the ref (made from this checkout's repository, removed
    with its directory when the block ends, whatever happens in it)."""
    if os.path.isdir(ref):
        root = _check_root(ref, "baseline")
        yield Checkout(root, describe(root))
        return
    try:
        commit = _git(HERE, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except subprocess.CalledProcessError:
        raise SystemExit(f"--baseline {ref}: neither a directory nor a git ref of "
                         f"this repository") from None
    parent = tempfile.mkdtemp(prefix="caravel_baseline_")
    root = os.path.join(parent, "checkout")
    # A plain `kill` would end the run without the clean-up below: it raises instead.
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        _git(HERE, "worktree", "add", "--detach", root, commit)
        yield Checkout(_check_root(root, "baseline"), describe(root))
    finally:
        signal.signal(signal.SIGTERM, previous)
        # Only this worktree is removed: a global `git worktree prune` would touch
        # the entries of every other checkout of the repository.
        with contextlib.suppress(OSError, subprocess.CalledProcessError):
            _git(HERE, "worktree", "remove", "--force", root)
        shutil.rmtree(parent, ignore_errors=True)

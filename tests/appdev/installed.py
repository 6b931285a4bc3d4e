"""A throwaway virtualenv with this checkout pip-installed in it, built offline.

The environment gets pytest, peewee and the build tools by linking the running
interpreter's own copies (each distribution's files and metadata) into its
site-packages, then ``pip install --no-deps --no-build-isolation --no-index`` of a copy
of the checkout (a copy, so that the build leaves nothing in the work tree). Nothing is
downloaded, and nothing of the running environment's own caravel_lite is visible.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Iterable, List, Set

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("caravel_lite", "migrations", "setup.cfg", "pyproject.toml", "README.md")
# What the environment needs besides caravel_lite, with their own requirements.
BORROWED = ("pytest", "peewee", "setuptools", "wheel")
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")


def _requirement_names(dist: metadata.Distribution) -> List[str]:
    from packaging.requirements import Requirement
    names = []
    for text in dist.requires or ():
        requirement = Requirement(text)
        marker = requirement.marker
        if marker is not None and not marker.evaluate({"extra": ""}):
            continue  # optional, or for another platform or Python
        names.append(requirement.name)
    return names


def _closure(roots: Iterable[str]) -> List[metadata.Distribution]:
    seen: Set[str] = set()
    found: List[metadata.Distribution] = []
    todo = list(roots)
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in seen:
            continue
        seen.add(name)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # e.g. a backport this Python does not need
        found.append(dist)
        todo.extend(_requirement_names(dist))
    return found


def _link_distribution(dist: metadata.Distribution, site: Path) -> None:
    base = Path(str(dist.locate_file("")))
    tops = {Path(str(f)).parts[0] for f in dist.files or () if not str(f).startswith("..")}
    for top in tops:
        target = site / top
        if not target.exists() and (base / top).exists():
            target.symlink_to(base / top)


def build(folder: Path) -> Path:
    """Make the environment in ``folder``; returns its python."""
    source = folder / "source"
    source.mkdir(parents=True)
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=IGNORED)
        else:
            shutil.copy2(path, source / name)
    venv = folder / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True).stdout.strip())
    for dist in _closure(BORROWED):
        _link_distribution(dist, site)
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("PYTHONPATH", None)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--no-deps", "--no-build-isolation", "--no-index", str(source)],
                   check=True, env=env, capture_output=True, text=True)
    return python



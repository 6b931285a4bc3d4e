"""The code examples of the documentation (docs/**/*.md and the README), as the test
suite runs them.

Every ```` ```python ```` block of a page is run, in order, in one namespace per page
(a later block may use what an earlier one defined), in a fresh directory, on SQLite.
A comment line right before a block changes what is done with it:

- ``<!-- example: skip REASON -->``: not run; the test reports the reason. For the few
  examples that need a server or a framework the suite does not install, or that run
  until they are stopped;
- ``<!-- example: file NAME -->``: the block is written to the file NAME in the page's
  directory (an application module the next blocks import or the shell runs);
- ``<!-- example: pytest -->``: the block is a test module of the reader's project: it
  is run by pytest with caravel_lite's plugin and must pass;
- ``<!-- example: shell -->`` before a ```` ```sh ```` block: its commands are run by
  bash in the page's directory and must exit 0 (other shell blocks are shown, not run).

A hidden block runs what a page leaves out (the imports, the job type an excerpt
uses) without showing it on the site::

    <!-- example: setup
    code
    -->
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

ROOT = Path(__file__).resolve().parents[2]

FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
DIRECTIVE = re.compile(
    r"<!-- example: (skip|file|pytest|shell)\b[ \t]*(.*?)[ \t]*-->[ \t]*\n\s*\Z")
SETUP = re.compile(r"^<!-- example: setup\n(.*?)^-->[ \t]*$", re.M | re.S)


@dataclass(frozen=True)
class Example:
    """One block of a page: what to do with it (``run``, ``setup``, ``skip``, ``file``,
    ``pytest``, ``shell``), its code and the page line its code starts on."""

    kind: str
    code: str
    line: int
    argument: str = ""


def pages() -> List[Path]:
    """Every page with examples: the README and the site's Markdown (not the hook's)."""
    found = [ROOT / "README.md"]
    found += sorted(p for p in (ROOT / "docs").rglob("*.md") if "hooks" not in p.parts)
    return found


def examples(text: str) -> List[Example]:
    found: List[tuple] = []
    for match in SETUP.finditer(text):
        found.append((match.start(), Example("setup", match.group(1),
                                              text.count("\n", 0, match.start(1)) + 1)))
    for match in FENCE.finditer(text):
        language, code = match.group(1), match.group(2)
        directive = DIRECTIVE.search(text[max(0, match.start() - 300):match.start()])
        kind: Optional[str] = directive.group(1) if directive else None
        argument = directive.group(2) if directive else ""
        line = text.count("\n", 0, match.start(2)) + 1
        if language == "python":
            kind = kind if kind in ("skip", "file", "pytest") else "run"
        elif language in ("sh", "bash", "console") and kind in ("shell", "skip"):
            pass
        else:
            continue  # output, configuration and shell lines shown for reading only
        if kind == "skip" and not argument:
            raise ValueError(f"line {line}: a skipped example needs a reason")
        found.append((match.start(), Example(kind, code, line, argument)))
    return [example for _, example in sorted(found, key=lambda item: item[0])]


def commands(text: str) -> List[List[str]]:
    """The arguments of every ``caravel-lite ...`` command a page's shell blocks show
    (after any ``VAR=value``; split at ``;`` and ``&&``; comments dropped), except those
    with placeholders (``[--json]``, ``01a2...``), which only a reader can fill in."""
    found = []
    for match in FENCE.finditer(text):
        if match.group(1) not in ("sh", "bash", "console"):
            continue
        for line in match.group(2).replace("\\\n", " ").splitlines():
            for part in re.split(r"\s*(?:;|&&)\s*", line.strip()):
                if "caravel-lite " not in part:
                    continue  # other programs' lines (pip, echo) may quote across ';'
                words = shlex.split(re.sub(r"(^|\s+)#.*$", "", part))
                while words and re.match(r"^[A-Z_]+=", words[0]):
                    words.pop(0)
                if words[:1] == ["caravel-lite"] and not any(
                        "[" in word or "..." in word for word in words):
                    found.append(words[1:])
    return found

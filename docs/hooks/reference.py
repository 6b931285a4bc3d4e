"""Reference sections generated from the code at build time (a mkdocs hook).

A page asks for one with a marker on a line of its own:

- ``<!-- generated: cli -->``: every command of ``caravel-lite``, its usage and every
  flag, read from the command line's own parser (``caravel_lite.cli.build_parser``),
  so the reference cannot drift from what the program accepts;
- ``<!-- generated: migrations -->``: the numbered scripts of ``migrations/`` with the
  first paragraph of each one's docstring;
- ``<!-- generated: modules -->``: the modules of ``caravel_lite`` with the first
  sentence of each one's docstring, for the architecture page.

It also leaves the test suite's example notes (``<!-- example: ... -->``) out of the
HTML, and shows the docstrings' reStructuredText cross-references (``:class:`X```) as
the names they refer to.

The functions are importable without mkdocs (tests/docs reads the same text).
"""
from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path
from typing import Any, Iterator, List, Tuple

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^<!-- generated: (\w+) -->$", re.M)


def _cell(text: str) -> str:
    """Table cells hold one line; pipes would end the cell, and usage's brackets
    (``[--since 1h]``) would read as Markdown links."""
    return " ".join(text.split()).replace("|", "\\|").replace("[", "\\[")


def subcommands(parser: argparse.ArgumentParser) -> List[Tuple[str, argparse.ArgumentParser, str]]:
    """(name, sub-parser, one-line help) in the order ``--help`` lists them."""
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
    return [(name, sub, helps.get(name, "")) for name, sub in action.choices.items()]


def _flag_rows(parser: argparse.ArgumentParser) -> Iterator[str]:
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if action.option_strings:
            name = ", ".join(f"`{flag}`" for flag in action.option_strings)
            if action.nargs != 0:
                metavar = action.metavar or action.dest.upper()
                name += f" `{metavar if isinstance(metavar, str) else ' '.join(metavar)}`"
        else:
            name = f"`{action.metavar or action.dest}`"
            if action.nargs in ("*", "+"):
                name += " (repeatable)"
        text = (action.help or "") if action.help != argparse.SUPPRESS else ""
        text = text.replace("%(default)s", str(action.default)).replace("%(prog)s", parser.prog)
        if isinstance(action, argparse._SubParsersAction):
            text = "the command: one of the sections below"
        notes = []
        if action.choices and not isinstance(action, argparse._SubParsersAction):
            notes.append("Choices: " + ", ".join(f"`{c}`" for c in action.choices) + ".")
        if action.required and action.option_strings:
            notes.append("Required.")
        if notes:
            text = " ".join([text.rstrip() + ("" if text.rstrip().endswith(".") else ".")] + notes)
        yield f"| {name} | {_cell(text)} |"


def cli_markdown() -> str:
    if str(ROOT) not in sys.path:  # this checkout's package, not another installed one
        sys.path.insert(0, str(ROOT))
    from caravel_lite.cli import build_parser

    parser = build_parser()
    out = ["Generated from `caravel_lite.cli.build_parser()` when the site is built.", "",
           "```text", parser.format_usage().strip(), "```", "",
           _cell(parser.description or ""), "", _cell(parser.epilog or ""), "",
           "| option | meaning |", "|---|---|"]
    out.extend(_flag_rows(parser))
    for name, sub, help_text in subcommands(parser):
        summary = _cell(help_text).rstrip(".")
        out += ["", f"## `{name}`", "", summary[:1].upper() + summary[1:] + ".", ""]
        if sub.description and sub.description != help_text:
            out += [_cell(sub.description), ""]
        out += ["```text", sub.format_usage().strip(), "```", "",
                "| argument | meaning |", "|---|---|"]
        out.extend(_flag_rows(sub))
        if sub.epilog:
            out += ["", _cell(sub.epilog)]
    return "\n".join(out)


def _docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""


def _summary(docstring: str, limit: int = 240) -> str:
    """A docstring's first sentence as Markdown: reStructuredText's roles and double
    backticks become code spans; a long sentence is cut at a word."""
    text = " ".join(docstring.split("\n\n")[0].split())
    text = re.sub(r":\w+:`~?(?:[\w.]+\.)?([\w]+)`", r"`\1`", text).replace("``", "`")
    first = re.split(r"(?<=\.)\s", text, maxsplit=1)[0]
    if len(first) > limit:
        first = first[:limit].rsplit(" ", 1)[0] + " ..."
        if first.count("`") % 2:
            first = first[:-4] + "` ..."
    return first


def migrations_markdown() -> str:
    rows = ["| script | what it does |", "|---|---|"]
    for path in sorted((ROOT / "migrations").glob("[0-9][0-9][0-9][0-9]_*.py")):
        rows.append(f"| `{path.name}` | {_cell(_summary(_docstring(path), limit=400))} |")
    return "\n".join(rows)


def modules_markdown() -> str:
    rows = ["| module | its one reason |", "|---|---|"]
    package = ROOT / "caravel_lite"
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(ROOT).with_suffix("")
        parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
        if any(part.startswith("_") for part in parts[1:]) or "migrations" in parts:
            continue
        rows.append(f"| `{'.'.join(parts)}` | {_cell(_summary(_docstring(path)))} |")
    return "\n".join(rows)


GENERATORS = {"cli": cli_markdown, "migrations": migrations_markdown,
              "modules": modules_markdown}


def expand(markdown: str) -> str:
    """The page's text with each marker replaced by what it names."""
    return MARKER.sub(lambda m: GENERATORS[m.group(1)](), markdown)


# The test suite's notes on a page's examples (tests/docs/examples.py: skip reasons,
# file names, hidden setup code) are for the suite, not for the site's HTML.
EXAMPLE_NOTE = re.compile(r"^<!-- example:.*?-->[ \t]*\n?", re.M | re.S)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return expand(EXAMPLE_NOTE.sub("", markdown))


# The docstrings cross-reference in reStructuredText (:class:`~caravel_lite.X`,
# :meth:`title <target>`), which mkdocstrings shows as written: the role's name before
# a code span. What a reader needs is the name.
ROLE = re.compile(r":(?:py:)?(?:class|meth|func|mod|attr|exc|data|obj):<code>(~?)([^<]*)</code>")


def _role_name(match: "re.Match[str]") -> str:
    short, target = match.group(1), match.group(2)
    titled = re.match(r"(.*?)\s*&lt;[^&]*&gt;$", target)
    if titled:
        return f"<code>{titled.group(1)}</code>"
    return f"<code>{target.rsplit('.', 1)[-1] if short else target}</code>"


def on_page_content(html: str, **kwargs: Any) -> str:
    return ROLE.sub(_role_name, html)

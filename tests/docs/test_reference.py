"""The reference covers what the code has: every public name, every command and flag,
every environment variable the package reads, every state and failure category; and
every command line the pages show is one the program accepts."""
from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import io
import re

import pytest

import caravel_lite
from caravel_lite import Failure, JobState, Priority
from caravel_lite.cli import build_parser
from caravel_lite.cli.common import UsageError

from tests.docs.examples import ROOT, commands, pages

DOCS = ROOT / "docs"


def page(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def load_hook():
    spec = importlib.util.spec_from_file_location("docs_reference_hook",
                                                  DOCS / "hooks" / "reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_public_name_is_documented_by_mkdocstrings_and_nothing_else():
    documented = re.findall(r"^::: caravel_lite\.(\w+)$", page("reference/api.md"), re.M)
    assert sorted(documented) == sorted(caravel_lite.__all__)
    assert len(documented) == len(set(documented)), "a name documented twice"


@pytest.mark.parametrize("package", ["testing", "web", "metrics"])
def test_every_public_name_of_the_helper_packages_is_documented(package):
    module = importlib.import_module(f"caravel_lite.{package}")
    documented = re.findall(rf"^::: caravel_lite\.{package}\.(\w+)$", page("reference/helpers.md"),
                            re.M)
    assert sorted(documented) == sorted(module.__all__)


def flags(parser: argparse.ArgumentParser) -> list:
    """Every option string but help's (-h/--help: argparse's own, on every command)."""
    return [flag for action in parser._actions for flag in action.option_strings
            if not isinstance(action, argparse._HelpAction)]


def test_the_command_reference_has_every_subcommand_and_flag_of_the_parser():
    hook = load_hook()
    generated = hook.expand(page("reference/cli.md"))
    parser = build_parser()
    commands = hook.subcommands(parser)
    assert len(commands) >= 20  # pause and resume come from one module
    for name, sub, _ in commands:
        section = generated.split(f"\n## `{name}`\n", 1)
        assert len(section) == 2, f"no section for {name}"
        body = section[1].split("\n## ", 1)[0]
        for flag in flags(sub):
            assert f"`{flag}" in body, f"{name}: {flag} missing"
        for action in sub._actions:
            if not action.option_strings:
                assert f"`{action.metavar or action.dest}`" in body, f"{name}: {action.dest}"
    for flag in flags(parser):
        assert f"`{flag}" in generated.split("\n## ", 1)[0]


def test_a_flag_added_to_the_parser_appears_in_the_generated_reference(monkeypatch):
    """The reference is read from the parser, not copied: a new flag shows at once."""
    import caravel_lite.cli as cli

    def with_extra_flag(prog: str = cli.PROG) -> argparse.ArgumentParser:
        parser = build_parser(prog)
        (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        action.choices["queues"].add_argument("--brand-new-flag",
                                              help="a flag the pages never saw")
        return parser

    monkeypatch.setattr(cli, "build_parser", with_extra_flag)
    assert "| `--brand-new-flag` `BRAND_NEW_FLAG` | a flag the pages never saw |" in (
        load_hook().cli_markdown())


def test_every_environment_variable_the_package_names_is_documented():
    named = set()
    for path in (ROOT / "caravel_lite").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        named |= set(re.findall(r"\bCARAVEL_[A-Z0-9_]*[A-Z0-9]\b", text))
    assert named, "the pattern found nothing"
    documented = page("reference/environment.md")
    assert sorted(name for name in named if f"`{name}`" not in documented) == []


@pytest.mark.parametrize("enum", [JobState, Failure, Priority], ids=lambda e: e.__name__)
def test_every_state_failure_and_priority_is_in_the_reference(enum):
    text = page("reference/enums.md").split(f"## `{enum.__name__}`", 1)[1].split("\n## ", 1)[0]
    for member in enum:
        assert f"| `{member.name}` | " in text, member
        stored = member.value if isinstance(member.value, str) else str(member.value)
        assert f"`{stored}`" in text or f"| {stored} |" in text, member


def test_every_migration_is_in_the_schema_reference():
    generated = load_hook().expand(page("reference/schema.md"))
    scripts = sorted(p.name for p in (ROOT / "migrations").glob("[0-9][0-9][0-9][0-9]_*.py"))
    assert scripts and all(f"| `{name}` |" in generated for name in scripts)


def test_every_command_the_pages_show_is_accepted_by_the_parser():
    shown = [(path, args) for path in pages() for args in commands(path.read_text("utf-8"))]
    assert len(shown) >= 20, "the pattern found too few commands"
    refused = []
    for path, args in shown:
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                build_parser().parse_args(args)
        except (SystemExit, UsageError) as refusal:
            refused.append(f"{path.relative_to(ROOT)}: caravel-lite {' '.join(args)}: {refusal}")
    assert refused == []

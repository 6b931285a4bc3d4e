"""The shared pieces of the command line, in process: masking, safe text, MODULE:ATTR,
one-line errors."""
from __future__ import annotations

import io
import logging

import pytest

from caravel_lite.cli import common, main


@pytest.mark.parametrize("url, secret", [
    ("postgresql://app:plain-secret@db/app", "plain-secret"),
    ("mysql://app:p%40ss%2Fw0rd@db:3306/app", "p@ss/w0rd"),
    ("postgresql+pool://app:with:colons@db/app", "with:colons"),
])
def test_a_registered_password_is_masked_anywhere_in_the_text(url, secret):
    masker = common.Masker()
    masker.add_url(url)
    quoted = f'FATAL: role "{secret}" and {url} and again {secret}'
    masked = masker(quoted)
    assert secret not in masked
    raw = url.split(":", 2)[2].split("@")[0]
    assert raw not in masked
    assert masked.count("***") >= 3


def test_any_url_password_is_masked_even_if_never_registered():
    masker = common.Masker()
    text = "could not reach mysql://root:topsecret@10.0.0.1:3306/db (timeout)"
    assert masker(text) == "could not reach mysql://root:***@10.0.0.1:3306/db (timeout)"
    assert masker("sqlite:///tmp/a:b@c.db") == "sqlite:///tmp/a:b@c.db"  # no authority


def test_masked_streams_cover_log_lines_and_prints(capsys):
    masker = common.Masker()
    masker.add_url("postgresql://u:log-secret@h/d")
    out = io.StringIO()
    stream = common.MaskedStream(out, masker)
    handler = logging.StreamHandler(stream)
    log = logging.getLogger("caravel_lite.test_mask")
    log.addHandler(handler)
    try:
        log.warning("connecting with %s", "log-secret")
    finally:
        log.removeHandler(handler)
    print("print log-secret", file=stream)
    assert "log-secret" not in out.getvalue() and out.getvalue().count("***") == 2


def test_main_masks_what_a_command_prints(monkeypatch, capsys):
    def noisy(args):
        print("stdout sees postgresql://u:run-secret@h/d and run-secret")
        logging.getLogger("caravel_lite").warning("log sees %s", "run-secret")
        raise RuntimeError("failed with run-secret")

    import caravel_lite.cli.check as check
    monkeypatch.setattr(check, "run", noisy)
    code = main(["check", "--database", "postgresql://u:run-secret@h/d"])
    out, err = capsys.readouterr()
    assert code == 1
    assert "run-secret" not in out + err
    assert err.strip().splitlines()[-1] == "caravel-lite check: RuntimeError: failed with ***"


@pytest.mark.parametrize("raw, shown", [
    ("tenant-a", "tenant-a"),
    ("\x1b[2Jwiped", "\\x1b[2Jwiped"),
    ("bell\x07", "bell\\x07"),
    ("line\nbreak\r", "line\\nbreak\\r"),
    ("c1\x9bcontrol", "c1\\x9bcontrol"),
    ("rtl\u202eoverride", "rtl\\u202eoverride"),
    ("sep\u2028line", "sep\\u2028line"),
    ("back\\slash", "back\\\\slash"),
    ("café ünïcode 日本", "café ünïcode 日本"),
    (42, "42"),
])
def test_safe_text_escapes_what_a_terminal_would_act_on(raw, shown):
    assert common.safe_text(raw) == shown


def test_safe_text_leaves_no_control_character():
    every = "".join(chr(c) for c in range(0x00, 0x300)) + "\u200b\u200e\u2066\ufeff\udc80"
    shown = common.safe_text(every)
    assert all(ch.isprintable() or ch == " " for ch in shown)
    assert "\x1b" not in shown and "\x9b" not in shown


def test_load_target_imports_from_the_current_directory(tmp_path, monkeypatch):
    (tmp_path / "cli_target_module.py").write_text("VALUE = {'answer': 42}\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", [p for p in __import__("sys").path if p not in ("", str(tmp_path))])
    assert common.load_target("cli_target_module:VALUE") == {"answer": 42}


def test_one_line_joins_and_caps_long_driver_messages():
    exc = RuntimeError("first line\n   second line\t" + "x" * 1000)
    text = common.one_line(exc)
    assert "\n" not in text and text.startswith("first line second line x")
    assert len(text) == common.MAX_MESSAGE and text.endswith("...")

"""Run one page's examples in this process's current directory (tests/docs starts it
as ``python -m tests.docs.run_page PAGE`` in a fresh directory, one process per page, so
that no page sees another's modules, logging or signal handlers).

Exits 0 when every example ran; otherwise prints which one failed (the traceback
names the page and its line) and exits 1."""
from __future__ import annotations

import os
import subprocess
import sys
import traceback
import types
from pathlib import Path

from tests.docs.examples import ROOT, examples

SHELL_STATE = ".docs-shell-env"


def run(page: Path) -> int:
    module = types.ModuleType("docs_example")
    module.__file__ = str(Path.cwd() / "docs_example.py")
    sys.modules[module.__name__] = module  # dataclasses and typing look their module up
    sys.path.insert(0, str(Path.cwd()))  # the files a page writes are importable
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(Path.cwd())]),
               PATH=os.pathsep.join([str(Path(sys.executable).parent),
                                     os.environ.get("PATH", "")]))
    name = str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else str(page)
    for example in examples(page.read_text(encoding="utf-8")):
        where = f"{name}, line {example.line}"
        if example.kind == "skip":
            print(f"skipped: {where}: {example.argument}")
            continue
        if example.kind == "file":
            Path(example.argument).write_text(example.code, encoding="utf-8")
            continue
        if example.kind in ("shell", "pytest"):
            if example.kind == "shell":
                # A page's shell blocks are one session: what one exports, the next sees.
                command = ["bash", "-euo", "pipefail", "-c",
                           f"[ -f {SHELL_STATE} ] && . ./{SHELL_STATE}\n{example.code}\n"
                           f"export -p | grep -v '^declare -[a-z]*r' > {SHELL_STATE}"]
            else:
                Path("test_docs_example.py").write_text(example.code, encoding="utf-8")
                command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "caravel_lite.testing.plugin", "test_docs_example.py"]
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
            if done.returncode != 0:
                print(f"FAILED: {where} ({example.kind}) exited {done.returncode}\n"
                      f"{done.stdout}{done.stderr}")
                return 1
            continue
        # Blank lines first, so that a traceback's line numbers are the page's.
        code = compile("\n" * (example.line - 1) + example.code, name, "exec")
        try:
            exec(code, module.__dict__)
        except BaseException:
            print(f"FAILED: {where}")
            traceback.print_exc(file=sys.stdout)
            return 1
    return 0


if __name__ == "__main__":
    status = run(ROOT / sys.argv[1])
    sys.stdout.flush()
    # An example may leave a worker's threads behind: the page is done either way.
    os._exit(status)

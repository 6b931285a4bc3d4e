"""What ``import caravel_lite`` costs a process that starts often (a cron job, a
script): Peewee and the exceptions, and no optional integration, even where it is
installed (OpenTelemetry, a driver Peewee did not import itself, prometheus_client,
Jinja2, cronsim, Django); a process that enqueues and runs jobs imports no part it
does not use (the admin package, the outbox, the scheduler, asyncio, Peewee's
migration runner). Every public name still resolves, from a fresh interpreter, and
type checkers see each one.

Each check runs in a fresh interpreter (this process has imported much more) and
reads its ``sys.modules``."""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections import Counter
from typing import List, Set, Tuple


import caravel_lite

# The directory holding the caravel_lite package under test, put first on the
# subprocess's path so that it imports this package and not another installed one.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(caravel_lite.__file__)))

OPTIONAL = ("opentelemetry", "psycopg", "psycopg2", "pymysql", "prometheus_client",
            "jinja2", "cronsim", "django")
DRIVERS = ("psycopg", "psycopg2", "pymysql")
# What a queue-and-worker process does not use unless it asks for it.
UNUSED_PARTS = ("asyncio", "caravel_lite.admin", "caravel_lite.outbox", "caravel_lite.relay",
                "caravel_lite.scheduler", "caravel_lite.cron", "playhouse.migrations",
                "playhouse.db_url")
WORKER_PROCESS = "from caravel_lite import DatabaseQueue, Dispatch, JobRegistry, QueueWorker"

# Peewee imports every driver it finds, at its own import (and psycopg imports asyncio):
# in the subprocess the drivers look absent, as in an installation without extras, and
# every attempt to import one is recorded. The other integrations stay importable, so
# that importing one is seen.
NO_DRIVERS = f"""
class _NoDrivers:
    tried = []

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {DRIVERS!r}:
            self.tried.append(name)
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, _NoDrivers())
"""


def run(code: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSTARTUP")}
    prelude = f"import sys; sys.path.insert(0, {ROOT!r})\n"
    done = subprocess.run([sys.executable, "-c", prelude + code], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def imports_of(code: str) -> Tuple[Set[str], List[str]]:
    """(the modules a fresh interpreter holds after running ``code``, the imports of a
    driver it tried), beyond those of ``import peewee`` (which tries each driver once)."""
    def after(source: str) -> Tuple[Set[str], "Counter[str]"]:
        found = json.loads(run(NO_DRIVERS + source + "\nimport json\n"
                               "print(json.dumps([sorted(sys.modules), _NoDrivers.tried]))"))
        return set(found[0]), Counter(found[1])

    modules, tried = after(code)
    peewee_modules, peewee_tried = after("import peewee")
    return modules - peewee_modules, sorted((tried - peewee_tried).elements())


def within(modules: Set[str], packages: Tuple[str, ...]) -> List[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in packages))


def test_import_caravel_lite_imports_no_optional_integration():
    added, tried = imports_of("import caravel_lite")
    assert within(added, OPTIONAL) == [] and tried == []
    assert within(added, ("caravel_lite",)) == ["caravel_lite", "caravel_lite.errors"]
    assert "typing" not in added  # Peewee does not import it either


def test_a_worker_process_imports_neither_integrations_nor_unused_parts():
    # The queue and worker import the tracing and metrics modules, which use
    # OpenTelemetry when it is installed: they look for it when first used, not at import.
    added, tried = imports_of(WORKER_PROCESS)
    assert within(added, OPTIONAL) == [] and tried == []
    assert within(added, UNUSED_PARTS) == []
    assert "caravel_lite.tracing" in added and "caravel_lite.observability" in added


def test_opentelemetry_is_looked_for_when_a_queue_is_built(tmp_path):
    # Where it is installed, the first queue finds it (and its spans and counters work:
    # tests/tracing); before that, nothing has imported it.
    # opentelemetry-api is in the test extra: missing, this fails rather than skips.
    import opentelemetry.trace  # noqa: F401
    code = (WORKER_PROCESS + "\nimport peewee\n"
            "before = 'opentelemetry' in sys.modules\n"
            f"DatabaseQueue(peewee.SqliteDatabase({str(tmp_path / 'q.db')!r}), JobRegistry())\n"
            "print(before, 'opentelemetry.trace' in sys.modules)")
    assert run(code).split() == ["False", "True"]


def test_every_public_name_resolves_in_a_fresh_interpreter():
    names = run("import caravel_lite; print(' '.join(caravel_lite.__all__))").split()
    assert sorted(names) == sorted(caravel_lite.__all__)
    code = ("import importlib\n"
            "import caravel_lite\n"
            "for name in caravel_lite.__all__:\n"
            "    exec(f'from caravel_lite import {name} as value', globals())\n"
            "    module = importlib.import_module(value.__module__)\n"
            "    assert getattr(caravel_lite, name) is value, name\n"
            "    assert name in dir(caravel_lite), name\n"
            "try:\n"
            "    caravel_lite.NoSuchName\n"
            "except AttributeError as exc:\n"
            "    print('refused', exc)\n")
    assert run(code).startswith("refused module 'caravel_lite' has no attribute 'NoSuchName'")
    star = run("from caravel_lite import *\nimport caravel_lite\n"
               "print(all(name in globals() for name in caravel_lite.__all__))")
    assert star.strip() == "True"


def test_every_module_imports_first():
    # With the package importing only its exceptions, the first module a program
    # imports is its own choice, no longer whatever caravel_lite/__init__.py imported
    # first: a cycle between modules (observability -> tracing -> schema -> dialect ->
    # sessions -> observability was one) fails for the module that enters it. Each
    # module and package of the top level is imported into an interpreter holding no
    # caravel_lite module (the entry point, the scripts and Django's app aside).
    code = ("import importlib, pkgutil\n"
            "import caravel_lite\n"
            "names = [m.name for m in pkgutil.iter_modules(caravel_lite.__path__, 'caravel_lite.')\n"
            "         if m.name.rsplit('.', 1)[1] not in ('__main__', 'contrib', 'migrations')]\n"
            "failed = []\n"
            "for name in names:\n"
            "    for loaded in [m for m in sys.modules if m.split('.')[0] == 'caravel_lite']:\n"
            "        del sys.modules[loaded]\n"
            "    try:\n"
            "        importlib.import_module(name)\n"
            "    except Exception as exc:\n"
            "        failed.append(f'{name}: {exc}')\n"
            "print(len(names))\n"
            "print('\\n'.join(failed))\n")
    count, *failed = run(code).strip().split("\n")
    assert int(count) > 50  # the modules were found
    assert failed == []


def test_every_lazy_name_is_imported_for_type_checkers_from_the_module_it_loads():
    # A name resolved by __getattr__ but missing from the TYPE_CHECKING imports would be
    # invisible to mypy (an error in every application importing it).
    tree = ast.parse(open(os.path.join(ROOT, "caravel_lite", "__init__.py")).read())
    eager = {alias.asname or alias.name: node.module for node in tree.body
             if isinstance(node, ast.ImportFrom) and node.module != "__future__"
             for alias in node.names}
    checking = next(node for node in tree.body if isinstance(node, ast.If)
                    and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
    typed = {alias.asname or alias.name: node.module for node in checking.body
             if isinstance(node, ast.ImportFrom) and node.module != "typing"
             for alias in node.names}
    assert set(eager) | set(typed) == set(caravel_lite.__all__)
    assert not set(eager) & set(typed)
    assert typed == caravel_lite._MODULES

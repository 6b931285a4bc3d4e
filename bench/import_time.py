"""What a cron job pays at every start: ``python -c "import caravel_lite"`` against
``python -c "import peewee"``, each a whole process (interpreter start-up included),
repeated and alternated, the median reported; and where the import's time goes, from
``python -X importtime``.

``import caravel_lite`` imports Peewee and the exceptions, each other public name on
first access (PEP 562). So that the figure does not hide what a job-running process
pays, the same run times :data:`WORKER`, the imports of a process that opens a
database, enqueues and runs jobs (a cron job calling ``run_once()``), and ``--profile``
shows where that import's time goes.

    python -m bench.import_time [--runs 20] [--root PATH] [--profile] [--top 15] [--installed]

Each command runs in a clean environment (no ``PYTHONPATH``) from the checkout's root,
so ``import caravel_lite`` finds that checkout's package first, as it would for a user
running a script there. The interpreter is, as the issue's target says, one with no
extras installed: a virtual environment made for the run holding peewee alone (linked
from this interpreter's installation), since peewee imports psycopg (which imports
asyncio) and PyMySQL when they are installed. ``--installed`` uses this interpreter
and whatever it has installed instead.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import tempfile
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Dict, Iterator, List, Sequence, Tuple

from bench import checkout

LIBRARY = "import caravel_lite"
PEEWEE = "import peewee"
WORKER = ("from caravel_lite import DatabaseQueue, Dispatch, JobRegistry, QueueWorker, "
          "open_database")


@dataclass(frozen=True)
class Command:
    label: str
    code: str
    cwd: str
    python: str = sys.executable


@contextlib.contextmanager
def bare_python() -> Iterator[str]:
    """The interpreter of a throw-away virtual environment holding peewee alone."""
    import peewee
    import playhouse

    parent = tempfile.mkdtemp(prefix="caravel_bare_")
    try:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", parent], check=True,
                       capture_output=True)
        python = os.path.join(parent, "bin", "python")
        site = subprocess.run([python, "-c", "import sysconfig; "
                               "print(sysconfig.get_paths()['purelib'])"], check=True,
                              capture_output=True, text=True).stdout.strip()
        os.symlink(peewee.__file__, os.path.join(site, "peewee.py"))
        os.symlink(list(playhouse.__path__)[0], os.path.join(site, "playhouse"))
        compile_all(site, python)
        yield python
    finally:
        shutil.rmtree(parent, ignore_errors=True)


@dataclass(frozen=True)
class Timing:
    """Whole-process wall times of one command, in seconds."""

    label: str
    code: str
    times: Tuple[float, ...]

    @property
    def median_ms(self) -> float:
        return statistics.median(self.times) * 1000

    @property
    def spread_ms(self) -> Tuple[float, float]:
        return min(self.times) * 1000, max(self.times) * 1000


def _environment() -> Dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSTARTUP")}


def compile_all(directory: str, python: str = sys.executable) -> None:
    """Write the byte code of every module under ``directory``, as an installation
    does: with PYTHONDONTWRITEBYTECODE set (it is on this machine), a checkout has none
    and every start would compile the whole library again."""
    subprocess.run([python, "-m", "compileall", "-q", directory], check=True,
                   capture_output=True)


def check(root: str, python: str = sys.executable) -> str:
    """The file ``import caravel_lite`` loads when run from ``root`` (it must be there)."""
    found = subprocess.run([python, "-c", LIBRARY + "; print(caravel_lite.__file__)"],
                           cwd=root, env=_environment(), check=True, capture_output=True,
                           text=True).stdout.strip()
    if not os.path.realpath(found).startswith(os.path.realpath(root) + os.sep):
        raise RuntimeError(f"import caravel_lite from {root} loaded {found}")
    return found


def _once(command: Command, env: Dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run([command.python, "-c", command.code], cwd=command.cwd, env=env,
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def measure(commands: Sequence[Command], runs: int) -> List[Timing]:
    """Each command ``runs`` times, in turns (the order rotating every turn, so that a
    slow moment of the machine falls on every command alike), after one warm-up each
    (the file system cache)."""
    env = _environment()
    for command in commands:
        _once(command, env)
    times: Dict[int, List[float]] = defaultdict(list)
    for turn in range(runs):
        for k in range(len(commands)):
            index = (k + turn) % len(commands)
            times[index].append(_once(commands[index], env))
    return [Timing(c.label, c.code, tuple(times[i])) for i, c in enumerate(commands)]


def profile(root: str, runs: int = 5, python: str = sys.executable,
            code: str = LIBRARY) -> List[Tuple[str, float, float]]:
    """``python -X importtime -c "import caravel_lite"`` (or ``code``) from ``root``,
    ``runs`` times:
    (module, median self µs, median cumulative µs) for every module imported."""
    selfs: Dict[str, List[int]] = defaultdict(list)
    cumulative: Dict[str, List[int]] = defaultdict(list)
    for rows in _traces(root, runs, python, code):
        for _, name, own, total in rows:
            selfs[name].append(own)
            cumulative[name].append(total)
    return [(name, statistics.median(selfs[name]), statistics.median(cumulative[name]))
            for name in selfs]


def _traces(root: str, runs: int, python: str,
            code: str) -> Iterator[List[Tuple[int, str, int, int]]]:
    """Each run's ``-X importtime`` lines: (depth, module, self µs, cumulative µs), in
    the order printed (a module after the modules it imported)."""
    for _ in range(runs):
        err = subprocess.run([python, "-X", "importtime", "-c", code], cwd=root,
                             env=_environment(), check=True, capture_output=True,
                             text=True).stderr
        rows = []
        for line in err.splitlines():
            if not line.startswith("import time:") or "self [us]" in line:
                continue
            own, total, name = line[len("import time:"):].split("|", 2)
            depth = (len(name) - len(name.lstrip())) // 2
            rows.append((depth, name.strip(), int(own), int(total)))
        yield rows


def imported_by_library(root: str, python: str, runs: int = 5,
                        code: str = LIBRARY) -> List[Tuple[str, float, List[str]]]:
    """What caravel_lite's modules import (running ``code``) from outside the library
    that ``import peewee`` alone does not: (the caravel_lite module importing it, median
    cumulative µs of those imports, their names, costliest first), costliest first."""
    theirs = {name for rows in _traces(root, 1, python, PEEWEE) for _, name, _, _ in rows}
    totals: Dict[str, List[float]] = defaultdict(list)
    names: Dict[str, Dict[str, int]] = defaultdict(dict)
    for rows in _traces(root, runs, python, code):
        run: Dict[str, float] = defaultdict(float)
        for i, (depth, name, _, total) in enumerate(rows):
            # The importer is the next line printed at a smaller depth.
            parent = next((r[1] for r in rows[i + 1:] if r[0] < depth), "")
            if (parent.startswith("caravel_lite") and not name.startswith("caravel_lite")
                    and name not in theirs):
                run[parent] += total
                names[parent][name] = total
        for parent, cost in run.items():
            totals[parent].append(cost)
    found = [(parent, statistics.median(values),
              sorted(names[parent], key=lambda n: -names[parent][n]))
             for parent, values in totals.items()]
    return sorted(found, key=lambda item: -item[1])


def _family(module: str) -> str:
    top = module.split(".")[0]
    if top in ("caravel_lite", "peewee", "playhouse"):
        return top
    return "standard library" if top in sys.stdlib_module_names else "other: " + top


def summary(rows: Sequence[Tuple[str, float, float]], top: int,
            peewee_rows: Sequence[Tuple[str, float, float]] = ()) -> List[str]:
    """Lines of text: self time by family (the library's own modules, peewee, the
    standard library), what ``import peewee`` does not import, the costliest modules
    by their own time, and caravel_lite's costliest subtrees."""
    total = sum(own for _, own, _ in rows)
    by_family: Dict[str, float] = defaultdict(float)
    for name, own, _ in rows:
        by_family[_family(name)] += own
    if peewee_rows:
        theirs = {name for name, _, _ in peewee_rows}
        extra = [row for row in rows if row[0] not in theirs]
        stdlib = [row for row in extra if _family(row[0]) == "standard library"]
        lines_extra = [f"beyond import peewee: {len(extra)} modules, "
                       f"{sum(r[1] for r in extra) / 1000:.1f} ms self; of them "
                       f"{len(stdlib)} of the standard library, "
                       f"{sum(r[1] for r in stdlib) / 1000:.1f} ms, costliest:"]
        lines_extra += [f"  {own / 1000:6.1f} ms self {cum / 1000:6.1f} ms cumulative  {name}"
                        for name, own, cum in sorted(stdlib, key=lambda r: -r[1])[:top]]
    else:
        lines_extra = []
    lines = [f"self time of every import: {total / 1000:.1f} ms (interpreter start-up "
             "not included)"]
    lines += [f"  {family}: {own / 1000:.1f} ms" for family, own in
              sorted(by_family.items(), key=lambda item: -item[1]) if own >= 200]
    lines += lines_extra
    lines.append(f"costliest modules by their own time (top {top}):")
    for name, own, cum in sorted(rows, key=lambda row: -row[1])[:top]:
        lines.append(f"  {own / 1000:6.1f} ms self {cum / 1000:6.1f} ms cumulative  {name}")
    lines.append(f"costliest caravel_lite modules with what they import (top {top}):")
    ours = [row for row in rows if row[0].startswith("caravel_lite")]
    for name, own, cum in sorted(ours, key=lambda row: -row[2])[:top]:
        lines.append(f"  {cum / 1000:6.1f} ms cumulative  {name}")
    return lines


def main(argv: Sequence[str] = ()) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.import_time", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--root", default=checkout.HERE, help="the checkout to import from")
    p.add_argument("--profile", action="store_true",
                   help="also show where the time of the worker process's import goes")
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--installed", action="store_true",
                   help="this interpreter with its packages, not one with peewee alone")
    args = p.parse_args(list(argv) or None)
    root = os.path.realpath(args.root)
    with contextlib.ExitStack() as stack:
        python = sys.executable if args.installed else stack.enter_context(bare_python())
        return _report(root, python, args)


def _report(root: str, python: str, args: argparse.Namespace) -> int:
    compile_all(os.path.join(root, "caravel_lite"), python)
    check(root, python)
    print("interpreter: " + (python if args.installed else
                             "a virtual environment holding peewee alone"))
    library, worker, peewee = measure([Command("caravel_lite", LIBRARY, root, python),
                                       Command("worker process", WORKER, root, python),
                                       Command("peewee", PEEWEE, root, python)], args.runs)
    for timing in (library, worker, peewee):
        low, high = timing.spread_ms
        print(f'python -c "{timing.code}": median {timing.median_ms:.1f} ms '
              f"({low:.1f}-{high:.1f}, {len(timing.times)} runs)")
    print(f"ratio: {library.median_ms / peewee.median_ms:.2f}x (target <= 1.5x)")
    print(f"worker process against import peewee: {worker.median_ms / peewee.median_ms:.2f}x "
          "(no target: what a process running jobs imports)")
    if args.profile:
        print(f"where the time of {WORKER!r} goes:")
        print("\n".join(summary(profile(root, python=python, code=WORKER), args.top,
                                 profile(root, python=python, code=PEEWEE))))
        print("imported by caravel_lite's modules, not by import peewee (cumulative):")
        for parent, total, names in imported_by_library(root, python, code=WORKER)[:args.top]:
            print(f"  {total / 1000:6.1f} ms  {parent}: {', '.join(names[:5])}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""A small sampling profiler over every thread of this process (pyinstrument follows
only the thread that started it, and a worker runs handlers, claims and
acknowledgements on threads of its own).

Every ``interval`` seconds a background thread reads ``sys._current_frames()`` and, per
thread, counts each function on the stack once (inclusive time) and the innermost one
(self time). The report lists the functions with the most samples per thread.
"""
from __future__ import annotations

import collections
import os
import sys
import threading
import time
from typing import Counter, Dict, List, Tuple


def _where(code) -> str:
    return f"{code.co_name} ({os.path.basename(code.co_filename)}:{code.co_firstlineno})"


class Sampler:
    def __init__(self, interval: float = 0.001) -> None:
        self.interval = interval
        self.samples: Dict[str, int] = collections.Counter()
        self.inclusive: Dict[str, Counter[str]] = collections.defaultdict(collections.Counter)
        self.own: Dict[str, Counter[str]] = collections.defaultdict(collections.Counter)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)

    def __enter__(self) -> "Sampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        me = threading.get_ident()
        while not self._stop.wait(self.interval):
            names = {t.ident: t.name for t in threading.enumerate()}
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                name = names.get(ident, str(ident))
                self.samples[name] += 1
                self.own[name][_where(frame.f_code)] += 1
                seen = set()
                while frame is not None:
                    where = _where(frame.f_code)
                    if where not in seen:
                        seen.add(where)
                        self.inclusive[name][where] += 1
                    frame = frame.f_back

    def report(self, top: int = 20) -> str:
        """Per busy thread: the functions with the most inclusive samples (those on
        every sample, the thread's entry frames, left out) and the most self samples.
        Threads that spent nearly every sample waiting on a lock or event are named
        only."""
        lines: List[str] = []
        for name, total in sorted(self.samples.items(), key=lambda kv: -kv[1]):
            own = self.own[name]
            waiting = sum(n for where, n in own.items() if where.startswith("wait ("))
            if waiting >= 0.95 * total:
                lines.append(f"thread {name}: {total} samples, idle (waiting) in "
                             f"{100 * waiting / total:.0f}%")
                continue
            lines.append(f"thread {name}: {total} samples; inclusive:")
            rows: List[Tuple[str, int]] = [
                (where, count) for where, count in self.inclusive[name].most_common()
                if count < total][:top]
            for where, count in rows:
                lines.append(f"  {100 * count / total:5.1f}%  {where}")
            lines.append("  self:")
            for where, count in own.most_common(top // 2):
                lines.append(f"  {100 * count / total:5.1f}%  {where}")
        return "\n".join(lines)

"""One :meth:`QueueWorker.run <caravel_lite.worker.runtime.QueueWorker.run>`: the loop
thread, sole owner of the run's state, and the run's one exit path.

The loop thread owns the slots, the jobs claimed and not yet started (``waiting``), the
jobs handed to a slot or the event loop and not yet reported (``running``) and their
outcomes until written. Pool threads and the event loop never change any of it: they
report through the run's :class:`~caravel_lite.worker.slots.Inbox`, which only the loop
reads. Every way a run ends (a stop, a fault, ``KeyboardInterrupt``, ``SystemExit``)
goes through :meth:`RunLoop.finish`.
"""
from __future__ import annotations

import functools
import random
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Callable, Deque, Dict, List, Optional, Tuple

from caravel_lite.logfields import fields
from caravel_lite.observability import Telemetry, logger
from caravel_lite.outage import OutagePolicy
from caravel_lite.values import QueueLease
from caravel_lite.worker.acks import Acknowledgements
from caravel_lite.worker.control import RunControl
from caravel_lite.worker.ending import ExitSteps, hand_back, release_claim
from caravel_lite.worker.execution import Execution, Outcome, Runner, Scope, Settlement
from caravel_lite.worker.executor import Executor
from caravel_lite.worker.planning import ClaimPlan
from caravel_lite.worker.retention import IdlePruning
from caravel_lite.worker.settling import Settler
from caravel_lite.worker.slots import Inbox, Report, SlotRun
from caravel_lite.worker.supervisor import CANCELLED, Supervisor
from caravel_lite.worker.wakeup import Wakeup
from caravel_lite.workflows.membership import MARKER

if TYPE_CHECKING:
    from caravel_lite.queue import DatabaseQueue
    from caravel_lite.worker.waiter import Waiter

__all__ = ["RunLoop", "ACK_LINGER", "CONTENDED_PAUSE", "RUN_BUDGET", "MAX_RUN"]

# With every slot busy, a completion waits at most this long for others to share its
# write (fast jobs: one statement for many; slow ones: written soon after they end).
ACK_LINGER = 0.05
# A claim that lost every race (another worker took the rows it saw) is repeated after
# a pause of at most this long, instead of waiting for a wake-up.
CONTENDED_PAUSE = 0.01
# A slot is handed about this many seconds of expected work at once (judged from
# recent handler durations; one job until one ended), at most MAX_RUN jobs and never
# more than its share of the waiting jobs: short jobs go on without a hand-off each,
# slow ones are handed one at a time, so no slot sits on work another could start.
RUN_BUDGET = 0.02
MAX_RUN = 64
# A job queued in a slot's run that has not started this long after it was handed over
# waits behind a handler that turned slow: while a slot is free and nothing else
# waits, the loop takes it back and hands it to a free slot (else it would wait out
# its lease there, and be dead-lettered unrun with its last attempt).
STUCK_IN_RUN = 0.2


class RunLoop:
    """The state and the loop of one run. Created by ``run``, used by its thread only."""

    def __init__(self, *, queue: DatabaseQueue, names: Tuple[str, ...], concurrency: int,
                 plan: ClaimPlan, acks: Acknowledgements, settler: Settler,
                 supervisor: Supervisor, scope: Optional[Scope], scope_gets_ctx: bool,
                 telemetry: Telemetry, poll_interval: float, shutdown_timeout: float,
                 pruning: Optional[IdlePruning], stop: threading.Event,
                 wakeup: Wakeup, policy: Optional[OutagePolicy]) -> None:
        self.queue = queue
        self.names = names
        self.concurrency = concurrency
        self.plan = plan
        self.acks = acks
        self.settler = settler
        self.supervisor = supervisor
        self.poll_interval = poll_interval
        self.shutdown_timeout = shutdown_timeout
        self.pruning = pruning
        self.stop = stop
        self.wakeup = wakeup
        self.policy = policy
        self.inbox = Inbox(wakeup)
        # A fresh executor per run: nothing a run left behind (a thread still inside a
        # handler abandoned at the shutdown timeout, the stop requests queued for its
        # threads) reaches the next run.
        self.executor = Executor(concurrency)
        self.runner = Runner(supervisor=supervisor, telemetry=telemetry,
                             clock=queue.clock, scope=scope, scope_gets_ctx=scope_gets_ctx,
                             executor=self.executor, finished=self.inbox.finished)
        self.slot = SlotRun(self.runner, settler, supervisor, self.inbox, stop)
        self.waiting: Deque[QueueLease] = deque()
        # The last claim round left due jobs behind a limit (ClaimBatch.held_back).
        self.held_back = False
        # A job of a chain or batch ended since the last claim: its outcome may make
        # another job due (the next step, a callback) without any signal a waiter
        # sees on a database without one (MariaDB polls), so claim again at once.
        self.ended_in_workflow = False
        self.running: Dict[int, Execution] = {}
        self.slots_taken = 0
        # A claim under way: (queue, token) from before it is sent until its leases
        # are in ``waiting``.
        self.claiming: Optional[Tuple[str, str]] = None
        # Reports taken from the inbox whose settling an interrupt cut short.
        self.unsettled: Deque[Tuple[QueueLease, Optional[Settlement]]] = deque()
        # Heartbeat, worker id and paused queues (caravel_lite.worker.control).
        self.control = RunControl(queue, names, concurrency)

    # -- the loop ------------------------------------------------------------------------

    def loop(self, waiter: Waiter) -> None:
        """Claim, start and settle until ``stop`` is set (then return) or a fault
        (raised, unless the outage policy rides it out)."""
        policy, stop, wakeup = self.policy, self.stop, self.wakeup
        empty = False  # the last claim found nothing: claim again once the waiter says so
        while True:
            try:
                wakeup.clear()
                running = len(self.running)
                self.take_reports()
                if self.held_back and len(self.running) < running:
                    empty = False  # a job of ours ended: the limit it held may let one in
                if self.ended_in_workflow:
                    self.ended_in_workflow = False
                    empty = False
                if stop.is_set():
                    return
                if self.claiming is not None:
                    self.hand_back_unanswered()
                if self.control.tick(self.slots_taken):
                    empty = False  # a queue was paused or resumed
                self.hand_back_stale()
                self.take_back_stuck()
                self.start_waiting()
                free = max(self.concurrency - self.slots_taken, 0)
                want = self.plan.want(free, len(self.waiting) + self.queued_in_slots())
                if want and not empty:
                    self.acks.flush()
                    claimed, contended = self.claim_round(want)
                    if policy is not None:
                        policy.succeeded()
                    if claimed:
                        waiter.found_work()
                        continue
                    if contended:  # lost every race: rows are due, try again at once
                        stop.wait(random.uniform(0, CONTENDED_PAUSE))
                        continue
                    empty = True
                if free > 0 and not self.waiting:
                    self.acks.flush()  # before going idle
                    if policy is not None:
                        policy.succeeded()
                    timeout = min(self.poll_interval, self.stuck_in())
                    if self.pruning is not None:
                        # At most one batch pruned; the wait for work that follows
                        # lasts until the next batch is due, the pause it asked for.
                        self.pruning.step(self.names)
                        timeout = self.pruning.wait_limit(timeout)
                    if self.listen(lambda: self.control.wait(waiter, wakeup, timeout)):
                        empty = False
                elif self.acks.waiting or not self.inbox.empty():
                    # Every slot busy: completions of fast jobs gather into one write;
                    # a job's completion is written at most ACK_LINGER after it
                    # finished, and a finished job does not wake this wait (Inbox), so
                    # a run of short jobs costs the loop one wake-up per linger.
                    if not wakeup.wait(min(ACK_LINGER, self.stale_in(),
                                           self.control.until_beat())):
                        self.take_reports()
                        self.acks.flush()
                        if policy is not None:
                            policy.succeeded()
                else:
                    timeout = min(self.poll_interval, self.stale_in(), self.control.until_beat())
                    self.listen(lambda: wakeup.wait(timeout))
            except Exception as exc:
                if policy is None:
                    raise
                if policy.failed(exc, stop.wait):
                    return
                empty = False

    def listen(self, wait: Callable[[], bool]) -> bool:
        """Run ``wait`` with every report waking it (raised before the last look at the
        inbox, so that none slips in between)."""
        self.inbox.listening = True
        try:
            if not self.inbox.empty():
                return False
            return wait()
        finally:
            self.inbox.listening = False

    def claim_round(self, limit: int) -> Tuple[int, bool]:
        """Lease up to ``limit`` jobs across the queues (see ``run`` for the order);
        returns how many, and whether some claim lost every race for due rows."""
        total, contended = 0, False
        self.held_back = False
        for name in self.plan.order(self.names):
            if total >= limit:
                break
            if self.control.paused(name):
                continue
            # The token is known before the claim is sent: an interrupt that lands
            # after the commit and before its leases are in ``waiting`` leaves the
            # exit path the token to hand the rows back by (finish).
            self.claiming = (name, self.control.token())
            batch = self.queue.claim_batch(name, limit - total, token=self.claiming[1])
            self.waiting.extend(batch.leases)
            self.claiming = None
            total += len(batch.leases)
            contended = contended or batch.contended
            self.held_back = self.held_back or batch.held_back
        return total, contended

    def hand_back_unanswered(self) -> None:
        """A claim that failed with a database error after its own read-back failed
        too (the database went away between the commit and the answer) may have leased
        rows under its token: hand them back before the next claim, attempt given back,
        rather than leave them leased, unseen, until their lease expires. A failure
        here leaves the token for the next pass (the outage policy waits between)."""
        assert self.claiming is not None
        release_claim(self.queue, *self.claiming)
        self.claiming = None

    def queued_in_slots(self) -> int:
        """About how many jobs handed to slots have not started yet."""
        return max(len(self.running) - self.slots_taken, 0)

    def unstarted(self) -> List[QueueLease]:
        """The leases of the jobs not started yet: waiting, or handed to a slot (or the
        event loop) that has not reached them (behind a long handler, say)."""
        return list(self.waiting) + [execution.lease for execution in self.running.values()
                                     if execution.started_at is None]

    def stale_in(self) -> float:
        """Seconds until the oldest unstarted job is too old to start (the loop's waits
        end then, so it is handed back in time)."""
        leases = self.unstarted()
        if not leases:
            return self.poll_interval
        oldest = min(lease.expires_at for lease in leases)
        left = oldest - self.settler.stale_margin - self.settler.clock()
        return max(float(left.total_seconds()), 0.0)

    def hand_back_stale(self) -> None:
        """Hand back the unstarted jobs grown too old to start: the waiting ones, and
        the ones a slot was handed but has not reached, which the loop takes back
        (:meth:`Execution.take`: the pool thread then skips them). Left in a slot's run
        behind a handler that outlives their lease, they were neither started nor
        handed back until their lease expired."""
        cutoff = self.settler.clock() + self.settler.stale_margin
        # Those of a paused queue too: a pause stops jobs starting, not only claims.
        # (The set read once: this runs on every pass of the loop.)
        paused = self.control.paused_names()
        stale = [lease for lease in self.waiting
                 if lease.expires_at <= cutoff or (paused and lease.context.queue in paused)]
        for lease in stale:
            self.waiting.remove(lease)
        for key, execution in list(self.running.items()):
            if (execution.started_at is None and (
                    execution.lease.expires_at <= cutoff
                    or (paused and execution.lease.context.queue in paused))
                    and execution.take()):
                del self.running[key]
                if execution.is_async:
                    self.slots_taken -= 1  # its task ends without a report
                stale.append(execution.lease)
        for lease in stale:
            self.settler.settle(lease, self.settler.too_old(lease)
                                or Settlement(Outcome.RELEASED), batch=True)

    def start_waiting(self) -> None:
        """Hand the waiting jobs, in claim order, to the slots: an async job to the
        event loop when a slot is free, sync ones in runs (:data:`RUN_BUDGET`). While
        runs are short, each slot also gets one run queued behind the one it runs, so
        that a pool thread goes on at once instead of waiting for the loop's next pass
        (the pool's threads still run at most ``concurrency`` jobs at once). Called
        right after :meth:`hand_back_stale` in the same pass: every waiting job is
        young enough to start (the slot judges it again when it reaches the job)."""
        registry = self.queue.registry
        while self.waiting:
            free = self.concurrency - self.slots_taken
            if free <= 0 and not (self.slots_taken < 2 * self.concurrency
                                  and self.runs_are_short()):
                return
            definition = registry.for_name(self.waiting[0].wire_name)
            if definition is not None and definition.is_async and free <= 0:
                return  # an async job needs a free slot; the ones after it wait too
            first = self.settler.admit(self.waiting.popleft(), batch=True,
                                       judged=True)
            if first is None:
                continue
            first.handed_at = time.monotonic()
            self.running[id(first)] = first
            self.slots_taken += 1
            if first.is_async:
                self.executor.spawn(functools.partial(self.slot.run_async, first))
                continue
            batch = [first]
            # A run queued ahead takes its share of the waiting jobs among all slots.
            length = self.run_length(free if free > 0 else self.concurrency)
            while len(batch) < length and self.waiting:
                definition = registry.for_name(self.waiting[0].wire_name)
                if definition is not None and definition.is_async:
                    break  # it takes a slot of its own
                execution = self.settler.admit(self.waiting.popleft(), batch=True,
                                                 judged=True)
                if execution is not None:
                    execution.handed_at = time.monotonic()
                    self.running[id(execution)] = execution
                    batch.append(execution)
            self.executor.submit(functools.partial(self.slot.run, batch))

    def queued_stuck(self) -> List[Execution]:
        """Jobs queued in slots' runs, not started, for longer than STUCK_IN_RUN. Not
        async ones: each has a slot of its own, held until its task reports, and a
        task taken back (its event loop blocked by another handler) would end without
        a report, leaking that slot for good; handed out again it would wait on the
        same loop."""
        cutoff = time.monotonic() - STUCK_IN_RUN
        return [execution for execution in self.running.values()
                if execution.handed_at is not None and execution.started_at is None
                and not execution.is_async and execution.handed_at <= cutoff]

    def take_back_stuck(self) -> None:
        """With a slot free and nothing waiting, take back the jobs stuck in a run
        behind a slow handler (whoever takes a job first starts or hands it back:
        :meth:`Execution.take`) to hand them out again, in claim order."""
        if self.slots_taken >= self.concurrency or self.waiting:
            return
        for execution in self.queued_stuck():
            if execution.take():
                del self.running[id(execution)]
                self.waiting.append(execution.control.lease)

    def stuck_in(self) -> float:
        """Seconds until a job queued in a run counts as stuck (the idle wait ends
        then, so that it is taken back in time)."""
        handed = [execution.handed_at for execution in self.running.values()
                  if execution.handed_at is not None and execution.started_at is None
                  and not execution.is_async]
        if not handed:
            return self.poll_interval
        return max(min(handed) + STUCK_IN_RUN - time.monotonic(), 0.0) + 0.001

    def runs_are_short(self) -> bool:
        average = self.plan.average
        return average is not None and RUN_BUDGET / max(average, 1e-6) >= 2

    def run_length(self, free: int) -> int:
        average = self.plan.average
        if average is None:
            return 1
        share = -(-(len(self.waiting) + 1) // free)
        return max(1, min(MAX_RUN, share, int(RUN_BUDGET / max(average, 1e-6))))

    def take_reports(self) -> None:
        """Settle every report in the inbox; the first write error is raised once all
        were taken (the acknowledgements keep what they could not write). A report
        whose settling an interrupt cut short (a second Ctrl+C during a stop, landing
        in its log line or its write) is kept and settled first by the next call: the
        exit path's, so a handler that returned is still acknowledged."""
        error: Optional[Exception] = None
        while self.unsettled:
            lease, settlement = self.unsettled[0]
            try:
                self.settler.settle(lease, settlement, batch=True)
            except Exception as exc:
                error = error or exc
            self.unsettled.popleft()
        while True:
            report = self.inbox.take()
            if report is None:
                break
            kind, execution = report
            if kind is Report.SLOT_FREE:
                self.slots_taken -= 1
                continue
            assert execution is not None
            self.running.pop(id(execution), None)
            if execution.is_async:
                self.slots_taken -= 1  # an async job's slot ends with it
            if execution.started_at is not None and execution.ended_at is not None:
                self.plan.record(execution.ended_at - execution.started_at)
            lease = execution.control.lease
            options = lease._job_options
            if options is not None and MARKER in options:
                self.ended_in_workflow = True
            kept = self.acks.waiting
            try:
                self.settler.settle(lease, execution.settlement, batch=True)
            except Exception as exc:
                error = error or exc
            except BaseException:
                # Kept here unless the acknowledgements kept its write (an interrupt
                # inside it): written twice, the fenced repeat would log it as lost.
                if self.acks.waiting == kept:
                    self.unsettled.append((lease, execution.settlement))
                raise
        if error is not None:
            raise error

    # -- the one exit path -----------------------------------------------------------------

    def finish(self, cause: Optional[BaseException]) -> None:
        """End the run, however it ends (``cause``: None for a stop, else what ended
        it). Hands back every job that did not start (waiting, or handed to a slot that
        had not reached it), tells running handlers to stop and waits for them up to
        ``shutdown_timeout`` (not at all after ``KeyboardInterrupt`` or ``SystemExit``),
        writes every outcome it holds, then ends the run's threads. A further interrupt
        on the way ends the step it hits (a wait, or one write), not the rest. Raises
        only when nothing else ended the run (the caller re-raises ``cause``): that
        further interrupt, else the first database error."""
        self.inbox.stopping = True
        self.inbox.listening = True  # from now on every report wakes the wait below
        self.settler.stopping = True
        out = ExitSteps()
        unstarted = list(self.waiting)
        self.waiting.clear()
        for key, execution in list(self.running.items()):
            if execution.take():  # not started, and now never will be
                del self.running[key]
                unstarted.append(execution.control.lease)
            else:
                execution.control.cancel(CANCELLED)
        out.attempt(lambda: hand_back(self.acks, unstarted, out))
        claiming, self.claiming = self.claiming, None
        if claiming is not None:  # ended during a claim: its rows, if it committed
            out.attempt(lambda: release_claim(self.queue, *claiming))
        patience = (0.0 if isinstance(cause, (KeyboardInterrupt, SystemExit))
                    else self.shutdown_timeout)
        out.attempt(lambda: self._wait_for_running(time.monotonic() + patience, out))
        out.attempt(self.take_reports)
        out.attempt(self.acks.flush)
        if self.running:
            logger.warning("%d handler(s) still running when the worker stopped (after "
                           "%.1f s); their jobs stay leased until their leases expire",
                           len(self.running), patience, extra=fields(count=len(self.running)))
            self.running.clear()
        self.slots_taken = 0
        out.attempt(self.supervisor.close)
        out.attempt(self.executor.close)
        out.attempt(self.control.close)
        if cause is not None:
            if out.errors:
                logger.warning("worker could not write all it held on the way out: %s",
                               type(out.errors[0]).__name__,
                               extra=fields(error_type=type(out.errors[0]).__name__))
            return
        if out.interrupt is not None:
            raise out.interrupt
        if out.errors:
            raise out.errors[0]

    def _wait_for_running(self, deadline: float, out: ExitSteps) -> None:
        """Settle reports as they come, writing each outcome then, until nothing runs,
        ``deadline`` passes or a further interrupt. Written as they come, not in one
        batch once the wait is over: a handler still running holds that batch for up to
        the shutdown timeout, and the interrupt that ends a stop's patience (a second
        Ctrl+C) would meet the completions of every job that returned meanwhile in the
        one write it cuts short."""
        while True:
            self.wakeup.clear()
            out.attempt(self.take_reports)
            if self.acks.waiting:
                out.attempt(self.acks.flush)
            remaining = deadline - time.monotonic()
            if not self.running or remaining <= 0 or out.interrupt is not None:
                return
            self.wakeup.wait(remaining)

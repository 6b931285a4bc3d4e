"""Chains and batches on the queue, mixed into :class:`caravel_lite.DatabaseQueue`:
``enqueue_chain``, ``enqueue_batch``, ``batch_status``, ``chain_status`` and
``cancel_chain``, and the hook by which a finishing job's transition carries its
workflow's follow-up (:mod:`caravel_lite.workflows.follow`).

A chain or batch is written in one transaction (the caller's, through a savepoint,
when one is open): its row, its jobs, and their order. A chain's first step is
PENDING and every later step HELD; a batch's members are PENDING and its callbacks
HELD. Job ids are chosen before anything is sent, so a lost reply is recovered by
reading back the workflow's row: found, it committed; not found, it is written again
under the same ids.
"""
from __future__ import annotations

import uuid
from typing import (TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple,
                    Union)

import peewee

from caravel_lite import validation
from caravel_lite.clock import floor_ms, from_ms
from caravel_lite.debounce import refuse_debounced
from caravel_lite.envelope import Envelope, prepare_envelope, stored_match
from caravel_lite.errors import InvalidField, QueueIdempotencyConflict
from caravel_lite.ids import new_id
from caravel_lite.logfields import fields
from caravel_lite.observability import logger
from caravel_lite.retry import budgeted, recovering
from caravel_lite.values import Dispatch, JobState, QueueLease
from caravel_lite.workflows.follow import FollowUps
from caravel_lite.workflows.membership import MARKER, Role, membership_of, with_membership
from caravel_lite.workflows.statements import WORKFLOW_COLUMNS
from caravel_lite.workflows.values import (BatchResult, BatchStatus, ChainResult,
                                           WorkflowKind, WorkflowSummary)

if TYPE_CHECKING:
    from caravel_lite.dialect import Dialect
    from caravel_lite.options import QueueOptions
    from caravel_lite.registry import JobRegistry

__all__ = ["WorkflowCalls", "MAX_JOBS"]

# The most jobs one chain or batch may hold (one transaction writes them all).
MAX_JOBS = 10_000
Item = Tuple[Any, Dispatch]
_HELD = JobState.HELD.value
_CANCELLED = JobState.CANCELLED.value


def _uuid(value: Optional[str]) -> Optional[uuid.UUID]:
    return None if value is None else uuid.UUID(str(value))


class WorkflowCalls:
    """The workflow half of DatabaseQueue (it provides db, dialect, registry, options,
    the enqueue helpers and the clock)."""

    db: peewee.Database
    dialect: Dialect
    registry: JobRegistry
    options: QueueOptions
    _followups: FollowUps  # built on first use

    if TYPE_CHECKING:  # DatabaseQueue's
        def _now_us(self) -> int: ...

        def _execute(self, sql: str, params: Sequence[Any]) -> Any: ...

        def _insert_rows(self, envelopes: Sequence[Envelope], new: Sequence[int],
                         new_rows: List[Tuple[Any, ...]], traced: bool) -> None: ...

        def cancel(self, job_id: Union[uuid.UUID, str], queue_name: str,
                   tenant_id: str) -> bool: ...

    @property
    def followups(self) -> FollowUps:
        followups = self.__dict__.get("_followups")
        if followups is None:
            followups = self._followups = FollowUps(self.db)
        return followups

    # -- the hook of every finishing transition ------------------------------------------

    def _then(self, lease: QueueLease, state: str,
              now_ms: int) -> Optional[Callable[[], None]]:
        """What must run in the transaction that moves ``lease``'s job to ``state``:
        None for a job outside any workflow (told from the options the claim read,
        without a statement), else its follow-up."""
        text = lease._job_options
        if text is None or MARKER not in text:
            return None
        member = membership_of(text)
        if member is None or not self.followups.applies(member, state):
            return None
        ident = lease._id_text()
        followups = self.followups
        return lambda: followups.after(member, ident, state, now_ms)

    # -- writing -------------------------------------------------------------------------

    def _prepare_items(self, items: object, field: str, now_us: int) -> List[Envelope]:
        if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
            raise InvalidField(field, "must be a sequence of (job, Dispatch) pairs")
        if not 1 <= len(items) <= MAX_JOBS:
            raise InvalidField(field, f"must hold 1-{MAX_JOBS} jobs, got {len(items)}")
        envelopes = [self._prepare_item(item, f"{field}[{index}]", now_us)
                     for index, item in enumerate(items)]
        refuse_debounced(envelopes, "a chain or batch")
        return envelopes

    def _prepare_item(self, item: object, field: str, now_us: int) -> Envelope:
        if not isinstance(item, tuple) or len(item) != 2:
            raise InvalidField(field, "must be a (job, Dispatch) pair")
        return prepare_envelope(self.registry, self.options, item[0], item[1], now_us)

    @staticmethod
    def _one_tenant(envelopes: Sequence[Envelope], field: str) -> None:
        tenants = {envelope.tenant_id for envelope in envelopes}
        if len(tenants) != 1:
            raise InvalidField(field, "every job of a chain or batch, callbacks included, "
                               "must belong to one tenant")

    @staticmethod
    def _no_keys(envelopes: Sequence[Envelope], field: str, first: int) -> None:
        for index, envelope in enumerate(envelopes[first:], first):
            if envelope.dedup_key is not None:
                raise InvalidField(field, f"item {index}: only a chain's first step may "
                                   f"have an idempotency key (it stands for the chain)")

    @budgeted
    def enqueue_chain(self, steps: Sequence[Item]) -> ChainResult:
        """Enqueue jobs that run one after another: step n+1 becomes claimable only
        when step n completes (in the transaction that completes it). A step that is
        dead-lettered, discarded or cancelled holds the steps after it in the HELD
        state (counted and listed as such) until it is replayed and completes, or the
        chain is cancelled (:meth:`cancel_chain`).

        Written in one transaction (the caller's, when one is open: then nothing of it
        exists unless the caller commits). Idempotent as a whole when the first step
        has an idempotency key: a repeat answers the existing chain's ids with
        ``already_enqueued=True`` and writes nothing (a different first job raises
        :class:`QueueIdempotencyConflict`); later steps may not have keys. Every step
        belongs to one tenant; bad input raises ``InvalidField`` and writes nothing."""
        now_us = self._now_us()
        envelopes = self._prepare_items(steps, "steps", now_us)
        self._one_tenant(envelopes, "steps")
        self._no_keys(envelopes, "steps", 1)
        chain_id = new_id()
        ids = [new_id() for _ in envelopes]
        marked = [envelope._replace(options=with_membership(
            envelope.options, str(chain_id), Role.STEP,
            str(ids[index + 1]) if index + 1 < len(ids) else None))
            for index, envelope in enumerate(envelopes)]
        first = marked[0]
        answer = ChainResult(chain_id, tuple(ids), False)

        def write() -> ChainResult:
            with self.dialect.write_transaction(self.db):
                if first.dedup_key is not None:
                    existing = self._existing_chain(first)
                    if existing is not None:
                        return existing
                self._write_workflow(WorkflowKind.CHAIN, chain_id, marked, ids,
                                     list(range(1, len(ids))), floor_ms(now_us), {})
            return answer

        result: ChainResult = self._written(chain_id, write, answer,
                                            first.dedup_key is not None)
        logger.debug("enqueued a chain of %d step(s) on queue %s", len(ids), first.queue,
                     extra=fields(chain_id=str(result.chain_id), count=len(ids),
                                  queue=first.queue))
        return result

    @budgeted
    def enqueue_batch(self, items: Sequence[Item], *, on_complete: Optional[Item] = None,
                      on_success: Optional[Item] = None,
                      on_failure: Optional[Item] = None) -> BatchResult:
        """Enqueue jobs that run independently, with callbacks decided by how they end.
        When every job of the batch is final (completed, dead-lettered, discarded or
        cancelled) exactly one ``on_complete`` job is enqueued, ``on_success`` only if
        all completed; ``on_failure`` once, at the first job that ends failed. The
        callbacks are written HELD with the batch and made due by the transaction
        that records the deciding transition, so no crash, retry or race makes two.
        A replayed job is not counted again (see :mod:`caravel_lite.workflows.follow`).

        Written in one transaction (the caller's, when one is open). Every job and
        callback belongs to one tenant and has no idempotency key; bad input raises
        ``InvalidField`` and writes nothing."""
        now_us = self._now_us()
        envelopes = self._prepare_items(items, "items", now_us)
        callbacks: Dict[str, Envelope] = {}
        for name, item in (("on_complete", on_complete), ("on_success", on_success),
                           ("on_failure", on_failure)):
            if item is not None:
                callbacks[name] = self._prepare_item(item, name, now_us)
        refuse_debounced(list(callbacks.values()), "a batch's callback")
        self._one_tenant(envelopes + list(callbacks.values()), "items")
        self._no_keys(envelopes + list(callbacks.values()), "items", 0)
        batch_id = new_id()
        ids = [new_id() for _ in envelopes]
        marked = [envelope._replace(options=with_membership(envelope.options, str(batch_id),
                                                            Role.MEMBER))
                  for envelope in envelopes]
        callback_ids: Dict[str, uuid.UUID] = {}
        for name, envelope in callbacks.items():
            callback_ids[name] = new_id()
            marked.append(envelope._replace(options=with_membership(
                envelope.options, str(batch_id), Role.CALLBACK)))
            ids.append(callback_ids[name])
        count = len(envelopes)

        def write() -> BatchResult:
            with self.dialect.write_transaction(self.db):
                self._write_workflow(WorkflowKind.BATCH, batch_id, marked, ids,
                                     list(range(count, len(ids))), floor_ms(now_us),
                                     {name: str(ident) for name, ident in callback_ids.items()},
                                     members=count)
            return answer

        answer = BatchResult(batch_id, tuple(ids[:count]), callback_ids.get("on_complete"),
                             callback_ids.get("on_success"), callback_ids.get("on_failure"))
        result: BatchResult = self._written(batch_id, write, answer, False)
        logger.debug("enqueued a batch of %d job(s) on queue %s", count, envelopes[0].queue,
                     extra=fields(batch_id=str(batch_id), count=count,
                                  queue=envelopes[0].queue))
        return result

    def _written(self, workflow_id: uuid.UUID, write: Callable[[], Any], answer: Any,
                 keyed: bool) -> Any:
        """Run ``write`` (recovering a lost reply by reading back the workflow's row);
        a keyed chain that lost its key's race to another writer is written again, and
        then answers the winner."""
        def recover() -> Any:
            found = self._execute(self.followups.sql.workflow_exists,
                                  (str(workflow_id),)).fetchone()
            return answer if found is not None else write()

        try:
            return recovering(self.dialect, self.db, write, recover)
        except peewee.IntegrityError:
            if not keyed or self.db.in_transaction():
                raise
            return recovering(self.dialect, self.db, write, recover)

    def _existing_chain(self, first: Envelope) -> Optional[ChainResult]:
        """The chain a used first-step key stands for (None: the key is unused)."""
        row = self._execute(
            f"SELECT id, wire_name, payload, job_options FROM caravel_jobs "
            f"WHERE dedup_key = {self.db.param}", (first.dedup_key,)).fetchone()
        if row is None:
            return None
        stored_match(first, row[:3], "used")
        member = membership_of(row[3])
        if member is None or member.role is not Role.STEP:
            raise QueueIdempotencyConflict("idempotency key already used for a job that "
                                           "is not a chain's first step", uuid.UUID(row[0]))
        ids = [uuid.UUID(r[0]) for r in self._execute(self.followups.sql.member_ids,
                                                      (member.workflow_id,)).fetchall()]
        return ChainResult(uuid.UUID(member.workflow_id), tuple(ids), True)

    def _write_workflow(self, kind: WorkflowKind, workflow_id: uuid.UUID,
                        envelopes: List[Envelope], ids: List[uuid.UUID], held: List[int],
                        now_ms: int, callbacks: Dict[str, str],
                        members: Optional[int] = None) -> None:
        """In the open transaction: the workflow's row, its jobs (``held`` among them
        HELD), and its members' order."""
        from caravel_lite.enqueue import _row  # the enqueue's own row shape

        sql = self.followups.sql
        count = len(envelopes) if members is None else members
        head = envelopes[0]
        self._execute(sql.insert_workflow, (
            str(workflow_id), kind.value, head.queue, head.tenant_id, count, 0, 0,
            callbacks.get("on_complete"), callbacks.get("on_success"),
            callbacks.get("on_failure"), now_ms))
        traced = head.trace_context is not None
        rows = [_row(ids[index], envelope, now_ms, traced)
                for index, envelope in enumerate(envelopes)]
        self._insert_rows(envelopes, range(len(envelopes)), rows, traced)
        for start in range(0, len(held), 200):
            part = [str(ids[index]) for index in held[start:start + 200]]
            self._execute(sql.hold(len(part)), part)
        for start in range(0, count, 200):
            positions = range(start, min(start + 200, count))
            params: List[Any] = []
            for position in positions:
                params += (str(workflow_id), position, str(ids[position]))
            self._execute(sql.insert_members(len(positions)), params)

    # -- reading and cancelling ----------------------------------------------------------

    def _summary(self, workflow_id: object, kind: WorkflowKind, queue_name: str,
                 tenant_id: str) -> Optional[WorkflowSummary]:
        ident = validation.check_uuid("workflow_id", workflow_id)
        validation.check_queue(queue_name, "queue_name")
        validation.check_identity("tenant_id", tenant_id)
        row = self._execute(self.followups.sql.summary, (ident,)).fetchone()
        # The tenant and queue compare exactly here too (a collation may not).
        if row is None or row[1] != kind.value or row[2] != queue_name \
                or row[3] != tenant_id:
            return None
        return summary_of(row, self.followups.sql.job_counts(self.db, ident))

    def batch_status(self, batch_id: Union[uuid.UUID, str], queue_name: str,
                     tenant_id: str) -> Optional[BatchStatus]:
        """The batch's jobs counted by state, how many were counted final and failed,
        its callbacks and whether it closed; None for an unknown id, another queue or
        another tenant (matched exactly)."""
        return self._summary(batch_id, WorkflowKind.BATCH, queue_name, tenant_id)

    def chain_status(self, chain_id: Union[uuid.UUID, str], queue_name: str,
                     tenant_id: str) -> Optional[WorkflowSummary]:
        """The chain's steps counted by state (``held``: waiting for the step before),
        how many completed, and whether all did; None as :meth:`batch_status`."""
        return self._summary(chain_id, WorkflowKind.CHAIN, queue_name, tenant_id)

    @budgeted
    def cancel_chain(self, chain_id: Union[uuid.UUID, str], queue_name: str,
                     tenant_id: str) -> int:
        """Cancel what is left of a chain: its HELD steps end CANCELLED, and its
        pending or running step is cancelled as :meth:`cancel` does (a running one
        gets a cancel request). Returns how many steps were cancelled or asked to
        stop; 0 for a finished chain, an unknown id, another queue or tenant. May be
        repeated."""
        if self._summary(chain_id, WorkflowKind.CHAIN, queue_name, tenant_id) is None:
            return 0
        ident = validation.check_uuid("chain_id", chain_id)
        sql = self.followups.sql
        now_ms = floor_ms(self._now_us())
        cancelled = 0
        step_ids = [str(r[0]) for r in self._execute(sql.member_ids, (ident,)).fetchall()]
        # Front to back, each step as live then as held: a step that completes while
        # this runs releases the next one, which is then cancelled as live.
        for step in step_ids:
            if self.cancel(step, queue_name, tenant_id):
                cancelled += 1
            cancelled += int(self._execute(sql.rule_out, (now_ms, now_ms, step)).rowcount)
        return cancelled


def summary_of(row: Sequence[Any], counts: Dict[str, int]) -> WorkflowSummary:
    """A workflow's row (WORKFLOW_COLUMNS) and its jobs' counts as a summary."""
    data = dict(zip(WORKFLOW_COLUMNS, row))
    closed = data["closed_at"]
    return WorkflowSummary(
        uuid.UUID(str(data["id"])), WorkflowKind(data["kind"]), str(data["queue"]),
        str(data["tenant_id"]), int(data["total"]), int(data["finished"]),
        int(data["failed"]), counts, from_ms(int(data["created_at"])),
        None if closed is None else from_ms(int(closed)), _uuid(data["on_complete"]),
        _uuid(data["on_success"]), _uuid(data["on_failure"]))

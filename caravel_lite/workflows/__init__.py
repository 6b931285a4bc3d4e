"""Chains, batches with callbacks (this package), debouncing (caravel_lite.debounce)
and uniqueness for a period (caravel_lite.envelope), on the queue's own guarantees:
idempotent enqueue and fenced transitions, with no trigger and no lock beyond the
rows a transition writes.

A chain's later steps and a batch's callbacks are job rows in the HELD state, written
with the chain or batch; the transition that makes one due (HELD to PENDING) runs in
the transaction of the transition that decides it and is fenced on HELD, so it happens
once. A job outside any workflow is told apart by the options its claim read, and
costs no statement more than before."""
from caravel_lite.workflows.values import (BatchResult, BatchStatus, ChainResult,
                                           WorkflowKind, WorkflowSummary)

__all__ = ["BatchResult", "BatchStatus", "ChainResult", "WorkflowKind", "WorkflowSummary"]

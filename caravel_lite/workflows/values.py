"""What the workflow calls answer (frozen values)."""
from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Dict, Optional, Tuple

__all__ = ["WorkflowKind", "ChainResult", "BatchResult", "BatchStatus", "WorkflowSummary"]


class WorkflowKind(str, enum.Enum):
    CHAIN = "chain"
    BATCH = "batch"


@dataclass(frozen=True)
class ChainResult:
    """``job_ids[i]`` is step i's job; ``already_enqueued``: the chain's first step's
    idempotency key had been used, and these are that chain's ids (nothing written)."""

    chain_id: uuid.UUID
    job_ids: Tuple[uuid.UUID, ...]
    already_enqueued: bool = False


@dataclass(frozen=True)
class BatchResult:
    """``job_ids[i]`` is item i's job; the callbacks' jobs (held until the batch decides
    them), None where no callback was given."""

    batch_id: uuid.UUID
    job_ids: Tuple[uuid.UUID, ...]
    on_complete: Optional[uuid.UUID] = None
    on_success: Optional[uuid.UUID] = None
    on_failure: Optional[uuid.UUID] = None


@dataclass(frozen=True)
class WorkflowSummary:
    """One chain or batch as the operator's views show it. ``counts``: its jobs by
    state (a batch's callbacks are not among them); ``finished``: how many were counted
    final (a chain: completed steps); ``failed``: how many of those failed (a batch);
    ``closed_at``: when the last one was counted, None while it is open."""

    workflow_id: uuid.UUID
    kind: WorkflowKind
    queue: str
    tenant_id: str
    total: int
    finished: int
    failed: int
    counts: Dict[str, int]
    created_at: datetime
    closed_at: Optional[datetime]
    on_complete: Optional[uuid.UUID] = None
    on_success: Optional[uuid.UUID] = None
    on_failure: Optional[uuid.UUID] = None


# What batch_status answers is the summary of one batch.
BatchStatus = WorkflowSummary

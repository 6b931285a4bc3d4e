"""Job types and the registry the outbox tests stage and relay (also importable by the
relay command line as ``tests.outbox.jobs:registry``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List

from caravel_lite import JobContext, JobRegistry

INVOICE = "billing.invoice.v1"
RECEIPT = "billing.receipt.v1"


@dataclass(frozen=True)
class SendInvoice:
    invoice_id: int
    note: str = ""


@dataclass(frozen=True)
class SendReceipt:
    receipt_id: int


# What the handler saw, per run: (invoice_id, tenant from the trusted context).
RAN: List[tuple] = []


def send_invoice(job: SendInvoice, ctx: JobContext) -> None:
    RAN.append((job.invoice_id, ctx.tenant_id))


def build_registry() -> JobRegistry:
    registry = JobRegistry()
    registry.register(INVOICE, SendInvoice, send_invoice)
    return registry


registry = build_registry()

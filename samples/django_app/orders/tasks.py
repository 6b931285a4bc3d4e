"""The shop's tasks: found by the Caravel backend because they are in an installed
app's ``tasks`` module, and only these may run."""
from __future__ import annotations

from typing import Any

from caravel_lite.contrib.django.compat import task

from orders.models import Order


@task
def send_confirmation(order_id: int) -> str:
    """Enqueued in the transaction that saves the order: it runs only if the order
    was committed."""
    Order.objects.filter(id=order_id).update(confirmed=True)
    return f"order {order_id} confirmed"


@task(takes_context=True)  # type: ignore[untyped-decorator,unused-ignore]
def ship(context: Any, order_id: int) -> int:
    """Knows which attempt it is (retried up to MAX_ATTEMPTS times)."""
    Order.objects.filter(id=order_id).update(shipped_on_attempt=context.attempt)
    return int(context.attempt)


@task
def remind(order_id: int) -> None:
    """Enqueued with run_after: a day later, say."""
    Order.objects.filter(id=order_id).update(reminded=True)


@task
async def audit(order_id: int) -> bool:
    """An async task: caravel_lite's worker runs it on its event loop."""
    return bool(await Order.objects.filter(id=order_id).aupdate(audited=True))

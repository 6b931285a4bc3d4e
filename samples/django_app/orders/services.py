"""What the shop's views would call."""
from __future__ import annotations

from datetime import timedelta
from typing import Any, Tuple

from django.db import transaction
from django.utils import timezone

from orders.models import Order
from orders.tasks import remind, send_confirmation


def place_order(item: str, quantity: int) -> Tuple[Any, Any]:
    """Save the order and enqueue its confirmation in one transaction: both are
    committed, or neither (an exception rolls back the job with the order)."""
    with transaction.atomic():
        order = Order.objects.create(item=item, quantity=quantity)
        result = send_confirmation.enqueue(order.id)
    return order, result


def remind_later(order: Any, after: timedelta = timedelta(days=1)) -> Any:
    return remind.using(run_after=timezone.now() + after).enqueue(order.id)

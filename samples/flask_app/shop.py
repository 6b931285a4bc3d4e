"""The shop's tables and jobs. Models are bound to a proxy that the web app and the
worker each point at their own Database object."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

import peewee

from caravel_lite import JobContext, JobRegistry, migrate

RECEIPTS = "receipts"  # the queue the receipt jobs go to
TENANT = "shop"  # one shop; a multi-tenant app would pass the customer's tenant

database = peewee.DatabaseProxy()
registry = JobRegistry()


class BaseModel(peewee.Model):
    class Meta:
        database = database


class Order(BaseModel):
    id = peewee.AutoField()
    item = peewee.CharField(max_length=100)
    email = peewee.CharField(max_length=200)

    class Meta:
        table_name = "shop_order"


class Receipt(BaseModel):
    id = peewee.AutoField()
    order = peewee.ForeignKeyField(Order, unique=True, backref="receipts")
    sent_at = peewee.DateTimeField()

    class Meta:
        table_name = "shop_receipt"


@dataclass(frozen=True)
class SendReceipt:
    order_id: int


@registry.job("shop.send-receipt.v1", SendReceipt)
def send_receipt(job: SendReceipt, ctx: JobContext) -> None:
    """Delivery is at least once: a repeat finds the receipt already recorded."""
    # One receipt per order (a unique column): a repeat inserts nothing.
    (Receipt.insert(order=job.order_id, sent_at=datetime.now(timezone.utc))
     .on_conflict_ignore().execute())
    # A real shop would send the e-mail here, after recording that it is being sent.


def init_db(db: peewee.Database) -> None:
    """Point the models at ``db`` and create what is missing: caravel_lite's tables
    through its migrations, the shop's own with Peewee."""
    database.initialize(db)
    migrate(db)
    db.create_tables([Order, Receipt], safe=True)

"""The sample's tests, run by Django's test runner: ``python manage.py test``.

TransactionTestCase, not TestCase: the worker reads the jobs on connections of its own,
which see only what was committed (a TestCase never commits)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from django.db import connection
from django.test import TransactionTestCase

from caravel_lite.contrib.django.compat import TaskResultStatus
from caravel_lite.contrib.django.testing import run_tasks

from orders.models import Order
from orders.services import place_order, remind_later
from orders.tasks import audit, ship


class Boom(Exception):
    pass


class OrderTasks(TransactionTestCase):  # type: ignore[misc]
    def test_an_order_and_its_confirmation_commit_together(self) -> None:
        order, result = place_order("kettle", 1)
        self.assertEqual(result.status, TaskResultStatus.READY)
        run_tasks()
        order.refresh_from_db()
        self.assertTrue(order.confirmed)
        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)

    def test_an_order_rolled_back_takes_its_confirmation_with_it(self) -> None:
        from django.db import transaction

        from orders.tasks import send_confirmation

        with self.assertRaises(Boom):
            with transaction.atomic():
                order = Order.objects.create(item="teapot", quantity=2)
                result = send_confirmation.enqueue(order.id)
                raise Boom
        self.assertFalse(Order.objects.exists())
        with self.assertRaises(Exception):
            result.refresh()  # TaskResultDoesNotExist: the job was never committed
        self.assertEqual(run_tasks().processed, 0)

    def test_a_task_taking_context_knows_its_attempt(self) -> None:
        order = Order.objects.create(item="cup", quantity=1)
        result = ship.enqueue(order.id)
        run_tasks()
        order.refresh_from_db()
        self.assertEqual(order.shipped_on_attempt, 1)
        result.refresh()
        self.assertEqual(result.attempts, 1)

    def test_a_deferred_task_waits_for_its_time(self) -> None:
        order = Order.objects.create(item="saucer", quantity=3)
        result = remind_later(order)
        run_tasks()
        order.refresh_from_db()
        self.assertFalse(order.reminded)
        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.READY)
        self.assertIsNotNone(result.task.run_after)

    def test_an_async_task_runs_on_the_workers_event_loop(self) -> None:
        order = Order.objects.create(item="spoon", quantity=4)
        audit.enqueue(order.id)
        run_tasks()
        order.refresh_from_db()
        self.assertTrue(order.audited)

    def test_manage_py_caravel_worker_runs_the_tasks(self) -> None:
        order, result = place_order("tray", 1)
        env = dict(os.environ, SAMPLE_DATABASE_NAME=str(connection.settings_dict["NAME"]))
        worker = subprocess.Popen(
            [sys.executable, "manage.py", "caravel_worker", "--poll-interval", "0.1",
             "--log-level", "WARNING"], cwd=Path(__file__).resolve().parent.parent, env=env)
        try:
            deadline = time.monotonic() + 30
            while not Order.objects.filter(id=order.id, confirmed=True).exists():
                self.assertIsNone(worker.poll(), "the worker ended early")
                self.assertLess(time.monotonic(), deadline, "the worker ran nothing in 30 s")
                time.sleep(0.05)
        finally:
            worker.send_signal(signal.SIGTERM)
            code = worker.wait(timeout=30)
        self.assertEqual(code, 0)
        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)

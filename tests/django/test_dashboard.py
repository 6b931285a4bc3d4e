"""The dashboard mounted in urls.py answers staff users only."""
from __future__ import annotations

import re

import pytest


@pytest.fixture
def client(django_backend):
    from django.test import Client

    return Client()


def _user(name, **flags):
    from django.contrib.auth.models import User

    User.objects.filter(username=name).delete()
    # No password (force_login needs none): hashing one takes a second.
    return User.objects.create_user(name, **flags)


def test_anonymous_and_non_staff_users_are_sent_to_the_login(client, django_backend):
    url = f"/ops/{django_backend.alias}/"
    answer = client.get(url)
    assert answer.status_code == 302 and "/admin/login/" in answer["Location"]
    client.force_login(_user("plain"))
    answer = client.get(url)
    assert answer.status_code == 302 and "/admin/login/" in answer["Location"]


def test_staff_users_see_the_pages_and_a_job(client, django_backend):
    from caravel_lite.contrib.django.contract import tasks

    result = tasks.add.using(backend=django_backend.alias).enqueue(1, 2)
    client.force_login(_user("staff", is_staff=True))
    base = f"/ops/{django_backend.alias}/"
    overview = client.get(base)
    assert overview.status_code == 200, overview.content[:300]
    assert b"caravel" in overview.content.lower()
    jobs = client.get(base + "jobs")
    assert jobs.status_code == 200 and result.id[:8].encode() in jobs.content
    # Links carry the mount point.
    assert f'href="{base}jobs'.encode() in overview.content
    assert client.get(base + f"jobs/{result.id}").status_code == 200


FORM = "application/x-www-form-urlencoded"


def test_a_staff_user_replays_a_failed_task_through_the_dashboards_form(client,
                                                                       django_backend):
    from urllib.parse import urlencode

    from caravel_lite.contrib.django import compat
    from caravel_lite.contrib.django.contract import tasks
    from caravel_lite.testing import drain

    result = tasks.fail.using(backend=django_backend.alias).enqueue("boom")
    drain(django_backend.queue(), "default")
    client.force_login(_user("staff", is_staff=True))
    base = f"/ops/{django_backend.alias}/"
    page = client.get(base + "dead-letters").content.decode()
    token = re.search(r'name="csrf" value="([^"]+)"', page).group(1)
    refused = client.post(base + "actions/replay", urlencode(
        {"job_id": result.id, "confirmed": "1"}), content_type=FORM)
    assert refused.status_code == 403  # no token: the dashboard's own CSRF check
    done = client.post(base + "actions/replay", urlencode(
        {"job_id": result.id, "confirmed": "1", "csrf": token}), content_type=FORM)
    assert done.status_code in (200, 303), done.content[:300]
    result.refresh()
    assert result.status == compat.TaskResultStatus.READY

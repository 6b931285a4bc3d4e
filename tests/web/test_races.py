"""The dashboard's "Delete all that match" racing another operator's replay, on every
database: the confirmed POST runs in a thread (the dashboard on its own connection)
while, the moment its first jobs are gone, a replay on another connection makes the
older half of the dead letters pending again. Not one of those replayed jobs may be
deleted (before the fix the dashboard listed ids and deleted them one by one, and
deleted every replayed job it had listed)."""
from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

from werkzeug.test import Client

from caravel_lite import QueueAdmin
from caravel_lite.testing import ManualClock
from caravel_lite.web import TokenAuth, wsgi_app
from tests.admin import races
from tests.web.conftest import AUTH, TOKEN, Browser
from tests.web.html import parse
from tests.web.seed import START

COUNT = 1500


def test_bulk_delete_racing_a_replay_keeps_every_replayed_job(db, connect, monkeypatch):
    import caravel_lite.admin as admin_module

    # Smaller batches make the delete last long enough to be caught going.
    monkeypatch.setattr(admin_module, "ACTION_BATCH", 25)
    clock = ManualClock(START)
    older = races.dead_letters(db, clock, COUNT)
    dashboard_db = connect()
    client = Browser(Client(wsgi_app(QueueAdmin(dashboard_db, clock=clock), clock=clock,
                                     auth=TokenAuth(TOKEN))), AUTH)
    page = client.page(f"/dead-letters?queue={races.RACE_QUEUE}")
    form = [f for f in page.find_all("form", action="/actions/delete")
            if f.find_all("input", name="scope")][0]
    confirmation = client.submit(form)
    assert confirmation.status_code == 200, confirmation.text
    confirm_page = parse(confirmation.data)
    assert confirm_page.find("p", class_="count").attrs["data-count"] == str(COUNT)
    confirm_form = confirm_page.find("form", class_="confirm")

    action = races.InThread(lambda: client.submit(confirm_form))
    race = races.replay_during(db, clock, COUNT, older, action.running)
    response = action.result()
    dashboard_db.close()
    assert response.status_code == 303, response.text
    deleted = int(parse_qs(urlsplit(response.headers["Location"]).query)["count"][0])
    races.check_outcome(db, COUNT, deleted, race)

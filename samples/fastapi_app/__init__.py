"""A FastAPI sign-up service: async endpoints, ``async def`` job handlers, and the
transactional outbox, because the queue lives in a database of its own.

Run it from the ``samples/`` folder::

    export APP_DATABASE_URL=sqlite:///app.db CARAVEL_DATABASE_URL=sqlite:///queue.db
    python -m fastapi_app init-db                   # both databases' tables
    uvicorn fastapi_app.main:app                    # the web app
    caravel-lite relay fastapi_app.signups:registry --app-database $APP_DATABASE_URL
    caravel-lite worker fastapi_app.signups:registry --queue welcome

A sign-up writes the customer and the intent to welcome them in one transaction on
the application database; the relay moves committed intents into the queue database;
the worker runs them. Its tests (``fastapi_app/tests``) use caravel_lite's pytest
fixtures and helpers.
"""

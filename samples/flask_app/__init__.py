"""A Flask shop that saves an order and its receipt job in one transaction.

Run it from the ``samples/`` folder (SHOP_DATABASE_URL names the database; the queue's
tables live in it too, so no outbox is needed)::

    export SHOP_DATABASE_URL=sqlite:///shop.db
    python -m flask_app init-db                     # the app's tables + caravel_lite's
    flask --app flask_app.wsgi run                  # the web app
    caravel-lite worker flask_app.worker:queue_from_env --queue receipts   # the worker

    curl -X POST localhost:5000/orders -H 'content-type: application/json' \\
         -d '{"item": "teapot", "email": "ada@example.com"}'

Its tests (``flask_app/tests``) use caravel_lite's pytest fixtures and helpers.
"""

"""caravel_lite's schema migrations, applied by ``caravel_lite.migrate`` through Peewee's
``playhouse.migrations`` runner. Each numbered script declares a frozen copy of the
tables as of its revision, so later changes to the library never rewrite history."""

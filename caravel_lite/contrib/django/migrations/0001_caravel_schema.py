"""caravel_lite's schema in the database of the Caravel backends that use this Django
database: ``manage.py migrate`` (and the test runner, which migrates its test
databases) applies it. caravel_lite keeps its own migration history, so this runs its
pending scripts; after an upgrade of caravel_lite, ``manage.py caravel_migrate`` applies
the new ones. Reversing it leaves the tables and their jobs in place."""
from django.db import migrations


def apply(apps, schema_editor):  # type: ignore[no-untyped-def]
    from caravel_lite.contrib.django.schema import migrate_alias

    migrate_alias(schema_editor.connection.alias)


class Migration(migrations.Migration):  # type: ignore[misc]
    # caravel_lite's migrator runs on a connection of its own and takes its own lock;
    # a transaction of Django's around it would hold nothing of it.
    atomic = False
    dependencies: list = []  # type: ignore[type-arg]
    operations = [migrations.RunPython(apply, migrations.RunPython.noop, elidable=False)]

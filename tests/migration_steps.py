"""Migrating the test database back and forward, for tests of what an upgrade does to existing rows."""

from django.db import connection
from django.db.migrations.executor import MigrationExecutor


def migrate_back(targets):
    """Migrate to `targets` ((app, migration or None) pairs); returns the historical apps there."""
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    executor.loader.build_graph()
    return executor.loader.project_state([node for node in targets if node[1]]).apps


def migrate_forward() -> None:
    """Apply every migration, as an existing database does on upgrade."""
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())

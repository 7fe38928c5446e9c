"""A database guard for DESIGN rule 1, on PostgreSQL: a bug that bypasses the services fails loudly.

- An open slice may not take a card over 1000 milli-GPU or over its memory (the
  trigger locks the card row first, so two writers cannot both pass the check).
- At commit, an open slice must belong to a request in an active state, and a
  request that left the active states must hold no open slice.
SQLite has no such triggers; there the services and the test-suite invariants hold the line.

First, on every database, the slices that earlier code left open on requests that had already
finished are closed (when the request ended, or when they began if later): the planner now counts
every open slice, so those would otherwise hold their cards for good.
"""

from django.db import migrations

ACTIVE = "('scheduled', 'running', 'migrating')"

FORWARD = f"""
CREATE FUNCTION allocation_capacity_guard() RETURNS trigger AS $$
DECLARE
    card_memory integer;
    held_milli bigint;
    held_memory bigint;
BEGIN
    SELECT memory_mib INTO card_memory FROM scheduler_app_gpu WHERE id = NEW.gpu_id FOR NO KEY UPDATE;
    SELECT COALESCE(SUM(milli), 0), COALESCE(SUM(gpu_memory_mib), 0) INTO held_milli, held_memory
        FROM scheduler_app_allocation WHERE gpu_id = NEW.gpu_id AND ended_at IS NULL;
    IF held_milli > 1000 OR held_memory > card_memory THEN
        RAISE EXCEPTION 'GPU % over-committed: % milli-GPU and % of % MiB in open slices',
            NEW.gpu_id, held_milli, held_memory, card_memory USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END $$ LANGUAGE plpgsql;

CREATE TRIGGER allocation_capacity_guard
    AFTER INSERT OR UPDATE OF milli, gpu_memory_mib, gpu_id, ended_at ON scheduler_app_allocation
    FOR EACH ROW WHEN (NEW.ended_at IS NULL) EXECUTE FUNCTION allocation_capacity_guard();

CREATE FUNCTION open_slice_needs_active_request() RETURNS trigger AS $$
BEGIN
    IF EXISTS (
        SELECT 1 FROM scheduler_app_allocation a JOIN scheduler_app_gpurequest r ON r.id = a.request_id
        WHERE a.id = NEW.id AND a.ended_at IS NULL AND r.state NOT IN {ACTIVE}
    ) THEN
        RAISE EXCEPTION 'open slice % belongs to request % that is not active', NEW.id, NEW.request_id
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END $$ LANGUAGE plpgsql;

CREATE CONSTRAINT TRIGGER open_slice_needs_active_request
    AFTER INSERT OR UPDATE ON scheduler_app_allocation DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.ended_at IS NULL) EXECUTE FUNCTION open_slice_needs_active_request();

CREATE FUNCTION inactive_request_holds_no_slice() RETURNS trigger AS $$
BEGIN
    IF EXISTS (
        SELECT 1 FROM scheduler_app_gpurequest r JOIN scheduler_app_allocation a ON a.request_id = r.id
        WHERE r.id = NEW.id AND a.ended_at IS NULL AND r.state NOT IN {ACTIVE}
    ) THEN
        RAISE EXCEPTION 'request % left the active states with open slices', NEW.id
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END $$ LANGUAGE plpgsql;

CREATE CONSTRAINT TRIGGER inactive_request_holds_no_slice
    AFTER UPDATE OF state ON scheduler_app_gpurequest DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.state NOT IN {ACTIVE}) EXECUTE FUNCTION inactive_request_holds_no_slice();
"""

BACKWARD = """
DROP TRIGGER inactive_request_holds_no_slice ON scheduler_app_gpurequest;
DROP FUNCTION inactive_request_holds_no_slice();
DROP TRIGGER open_slice_needs_active_request ON scheduler_app_allocation;
DROP FUNCTION open_slice_needs_active_request();
DROP TRIGGER allocation_capacity_guard ON scheduler_app_allocation;
DROP FUNCTION allocation_capacity_guard();
"""


def close_leaked_slices(apps, schema_editor):
    Allocation = apps.get_model("scheduler_app", "Allocation")
    leaked = Allocation.objects.filter(ended_at__isnull=True).exclude(
        request__state__in=["scheduled", "running", "migrating"]
    )
    for slice_ in leaked.select_related("request"):
        ended = slice_.request.ended_at or slice_.started_at
        slice_.ended_at = max(ended, slice_.started_at)
        slice_.save(update_fields=["ended_at"])


def on_postgresql(sql):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql, params=None)

    return run


class Migration(migrations.Migration):
    dependencies = [("scheduler_app", "0002_gpu_sample")]

    operations = [
        migrations.RunPython(close_leaked_slices, migrations.RunPython.noop),
        migrations.RunPython(on_postgresql(FORWARD), on_postgresql(BACKWARD)),
    ]

"""The capacity guard (0003) checks new slices once per INSERT statement, not once per row.

A pass inserts thousands of slices in one statement; checking each row (lock its card, add up the card's
open slices) took about 0.16 s of a 16,000-start pass. The statement's check locks the cards it touched,
in id order, and adds up their open slices once: the same rule (no card over 1000 milli-GPU or its
memory), the same serialisation of writers by the card's row lock. Updates keep the row check.
"""

from importlib import import_module

from django.db import migrations

on_postgresql = import_module("scheduler_app.migrations.0003_capacity_guard").on_postgresql

FORWARD = """
DROP TRIGGER allocation_capacity_guard ON scheduler_app_allocation;
CREATE TRIGGER allocation_capacity_guard
    AFTER UPDATE OF milli, gpu_memory_mib, gpu_id, ended_at ON scheduler_app_allocation
    FOR EACH ROW WHEN (NEW.ended_at IS NULL) EXECUTE FUNCTION allocation_capacity_guard();

CREATE FUNCTION new_slices_capacity_guard() RETURNS trigger AS $$
DECLARE
    over record;
BEGIN
    PERFORM 1 FROM scheduler_app_gpu
        WHERE id IN (SELECT gpu_id FROM new_slices WHERE ended_at IS NULL) ORDER BY id FOR NO KEY UPDATE;
    SELECT g.id, g.memory_mib, SUM(a.milli) AS milli, SUM(a.gpu_memory_mib) AS memory INTO over
        FROM scheduler_app_gpu g JOIN scheduler_app_allocation a ON a.gpu_id = g.id AND a.ended_at IS NULL
        WHERE g.id IN (SELECT gpu_id FROM new_slices WHERE ended_at IS NULL)
        GROUP BY g.id HAVING SUM(a.milli) > 1000 OR SUM(a.gpu_memory_mib) > g.memory_mib
        ORDER BY g.id LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'GPU % over-committed: % milli-GPU and % of % MiB in open slices',
            over.id, over.milli, over.memory, over.memory_mib USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END $$ LANGUAGE plpgsql;

CREATE TRIGGER new_slices_capacity_guard
    AFTER INSERT ON scheduler_app_allocation REFERENCING NEW TABLE AS new_slices
    FOR EACH STATEMENT EXECUTE FUNCTION new_slices_capacity_guard();
"""

BACKWARD = """
DROP TRIGGER new_slices_capacity_guard ON scheduler_app_allocation;
DROP FUNCTION new_slices_capacity_guard();
DROP TRIGGER allocation_capacity_guard ON scheduler_app_allocation;
CREATE TRIGGER allocation_capacity_guard
    AFTER INSERT OR UPDATE OF milli, gpu_memory_mib, gpu_id, ended_at ON scheduler_app_allocation
    FOR EACH ROW WHEN (NEW.ended_at IS NULL) EXECUTE FUNCTION allocation_capacity_guard();
"""


class Migration(migrations.Migration):
    dependencies = [("scheduler_app", "0022_consolidation")]

    operations = [migrations.RunPython(on_postgresql(FORWARD), on_postgresql(BACKWARD))]

"""Appending thousands of rows in one statement: the scheduling pass writes a slice and an event per start."""

import json
from collections.abc import Sequence

from django.db import connections, models, router


def insert_rows(model: type[models.Model], rows: Sequence[models.Model]) -> list[models.Model]:
    """`bulk_create` for rows built by code (defaults applied, nothing to validate); sets their pks.

    On PostgreSQL one `INSERT ... SELECT FROM unnest(column arrays)`: one parameter per column, not
    per value, and no per-value preparation in Python (Django's bulk_create spent about 2 s of an
    8,000-start pass preparing and quoting 16,000 rows). Elsewhere Django's bulk_create.
    """
    if not rows:
        return []
    connection = connections[router.db_for_write(model)]
    if connection.vendor != "postgresql":
        return model.objects.bulk_create(rows)
    meta = model._meta
    columns = [f for f in meta.concrete_fields if f is not meta.pk]
    quote = connection.ops.quote_name
    arrays, selected = [], []
    for field in columns:
        values = [field.pre_save(row, add=True) for row in rows]
        if isinstance(field, models.JSONField):
            arrays.append([json.dumps(v, cls=field.encoder) for v in values])
            selected.append(f"{quote(field.column)}::jsonb")
            continue
        arrays.append(values)
        selected.append(quote(field.column))
    names = ", ".join(quote(f.column) for f in columns)
    unnested = ", ".join(
        "%s::text[]" if isinstance(f, models.JSONField) else f"%s::{f.db_type(connection)}[]" for f in columns
    )
    sql = (
        f"INSERT INTO {quote(meta.db_table)} ({names}) "
        f"SELECT {', '.join(selected)} FROM unnest({unnested}) WITH ORDINALITY AS u({names}, ord) "
        f"ORDER BY ord "
        f"RETURNING {quote(meta.pk.column)}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, arrays)
        pks = [pk for (pk,) in cursor.fetchall()]
    for row, pk in zip(rows, pks, strict=True):
        row.pk = pk
        row._state.adding, row._state.db = False, connection.alias
    return list(rows)

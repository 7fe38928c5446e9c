"""Telemetry upkeep: raw samples rolled up into 1-minute and 1-hour buckets, and each kept only as long
as its retention setting says.

A rollup row holds sums (count, sum, sum of squares, min, max), so any coarser bucket or longer range
gets exact means and standard deviations by adding rows. Every bucket is recomputed whole from the
finer data with an upsert, so a rerun writes the same rows and a late batch lands in its minute as
long as it arrives within TELEMETRY_ROLLUP_LOOKBACK_S (later ones stay in the raw data only).
"""

import datetime as dt

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from telemetry.models import GpuRollup, GpuSample, NodeSample

MINUTE_S = 60
HOUR_S = 3600

_SUMS = (
    "samples",
    "util_sum",
    "util_sq_sum",
    "util_min",
    "util_max",
    "memory_sum",
    "memory_sq_sum",
    "memory_min",
    "memory_max",
    "power_sum",
    "temperature_sum",
)
_FROM_RAW = (
    "COUNT(*), SUM(gpu_util_percent), SUM(gpu_util_percent * gpu_util_percent), MIN(gpu_util_percent), "
    "MAX(gpu_util_percent), SUM(memory_used_mib), SUM(CAST(memory_used_mib AS BIGINT) * memory_used_mib), "
    "MIN(memory_used_mib), MAX(memory_used_mib), SUM(power_mw), SUM(temperature_c)"
)
_FROM_MINUTES = (
    "SUM(samples), SUM(util_sum), SUM(util_sq_sum), MIN(util_min), MAX(util_max), SUM(memory_sum), "
    "SUM(memory_sq_sum), MIN(memory_min), MAX(memory_max), SUM(power_sum), SUM(temperature_sum)"
)


def floor_to(moment: dt.datetime, resolution_s: int) -> dt.datetime:
    """The start of the `resolution_s` bucket holding `moment` (buckets start on the epoch's multiples)."""
    seconds = int(moment.timestamp()) // resolution_s * resolution_s
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC)


def roll_up(now: dt.datetime | None = None) -> dict[str, int]:
    """Recompute the minutes from `now - TELEMETRY_ROLLUP_LOOKBACK_S` on, then the hours holding them;
    returns the rows written per resolution."""
    now = now or timezone.now()
    first_minute = floor_to(now - dt.timedelta(seconds=settings.TELEMETRY_ROLLUP_LOOKBACK_S), MINUTE_S)
    first_hour = floor_to(first_minute, HOUR_S)
    with transaction.atomic():
        minutes = _upsert(MINUTE_S, GpuSample._meta.db_table, "sampled_at", _FROM_RAW, "", first_minute)
        hours = _upsert(
            HOUR_S,
            GpuRollup._meta.db_table,
            "bucket_start",
            _FROM_MINUTES,
            f"resolution_s = {MINUTE_S} AND ",
            first_hour,
        )
    return {"minute": minutes, "hour": hours}


def _upsert(
    resolution_s: int, source: str, time_column: str, sums: str, where: str, since: dt.datetime
) -> int:
    bucket = _bucket_sql(time_column, resolution_s)
    columns = ", ".join(_SUMS)
    updates = ", ".join(f"{name} = excluded.{name}" for name in _SUMS)
    sql = (
        f"INSERT INTO {GpuRollup._meta.db_table} (gpu_id, resolution_s, bucket_start, {columns}) "
        f"SELECT gpu_id, {resolution_s}, {bucket}, {sums} FROM {source} "
        f"WHERE {where}{time_column} >= %s GROUP BY gpu_id, {bucket} "
        f"ON CONFLICT (gpu_id, resolution_s, bucket_start) DO UPDATE SET {updates}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [connection.ops.adapt_datetimefield_value(since)])
        return cursor.rowcount


def _bucket_sql(column: str, resolution_s: int) -> str:
    unit = {MINUTE_S: "minute", HOUR_S: "hour"}[resolution_s]
    if connection.vendor == "postgresql":
        return f"date_trunc('{unit}', {column})"
    # SQLite keeps datetimes as 'YYYY-MM-DD HH:MM:SS[.ffffff]' text in UTC, as Django writes them. The
    # percent signs are doubled: the query goes through Django's %s parameter style (and, with DEBUG,
    # through `sql % params` for the query log).
    pattern = {MINUTE_S: "%%Y-%%m-%%d %%H:%%M:00", HOUR_S: "%%Y-%%m-%%d %%H:00:00"}[resolution_s]
    return f"strftime('{pattern}', {column})"


def prune(now: dt.datetime | None = None) -> dict[str, int]:
    """Delete raw samples, minute and hour rollups older than their retention; returns the rows deleted."""
    now = now or timezone.now()

    def before(seconds: int) -> dt.datetime:
        return now - dt.timedelta(seconds=seconds)

    raw_cutoff = before(settings.TELEMETRY_RAW_RETENTION_S)
    return {
        "raw": GpuSample.objects.filter(sampled_at__lt=raw_cutoff).delete()[0],
        "node": NodeSample.objects.filter(sampled_at__lt=raw_cutoff).delete()[0],
        "minute": GpuRollup.objects.filter(
            resolution_s=MINUTE_S, bucket_start__lt=before(settings.TELEMETRY_MINUTE_RETENTION_S)
        ).delete()[0],
        "hour": GpuRollup.objects.filter(
            resolution_s=HOUR_S, bucket_start__lt=before(settings.TELEMETRY_HOUR_RETENTION_S)
        ).delete()[0],
    }

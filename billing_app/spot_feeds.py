"""Spot price feeds: what moves a spot pool's price over time. Pure reads and arithmetic; the writes
are billing_app.services (set_spot_feed, advance_spot_feeds, upload_prices).

- occupancy: min_fraction of the model's on-demand price when the pool is idle, rising linearly to
  max_fraction when every card is fully allocated;
- replay: a recorded history (shared/prices/spot_history_<file>.csv, per-GPU spot price = instance
  spot price / gpu_count) of the pool's GPU model, its first instant mapped onto the feed's
  started_at, played replay_speedup times faster and looped;
- upload: the rows an operator uploaded (parse_price_upload validates them).
"""

import csv
import datetime as dt
import functools
import io
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db.models import Sum

from billing_app.models import SpotFeed
from billing_app.public_prices import model_key
from billing_app.services import parse_usd_per_gpu_hour
from infra.echo import echoed
from infra.times import BadTime, parse_time
from scheduler_app.constants import MILLI_PER_GPU
from scheduler_app.models import Allocation, Gpu, Pool

FEED_PRICE_QUANTUM = Decimal("0.0001")
REPLAY_FILES = ("gcp", "azure", "aws")
MAX_UPLOAD_ROWS = 10_000


def occupancy(pool: Pool) -> Decimal:
    """The share of the pool's cards allocated now, 0 to 1 (milli-GPU held / milli-GPU there)."""
    cards = Gpu.objects.filter(node__pool=pool).count()
    if not cards:
        return Decimal(0)
    held = Allocation.objects.committed().filter(gpu__node__pool=pool).aggregate(m=Sum("milli"))["m"] or 0
    return min(Decimal(1), Decimal(held) / (cards * MILLI_PER_GPU))


def occupancy_price(feed: SpotFeed, on_demand: Decimal, busy: Decimal) -> Decimal:
    """on_demand x (min + (max - min) x busy), to 4 decimal places: within the operator's bounds."""
    fraction = feed.min_fraction + (feed.max_fraction - feed.min_fraction) * busy
    return (on_demand * fraction).quantize(FEED_PRICE_QUANTUM)


@dataclass(frozen=True)
class ReplaySeries:
    """One recorded series: (seconds after its first instant, USD per GPU-hour) in time order, and the
    length of one loop (the span, plus the last gap so the last price plays too)."""

    key: str
    points: tuple[tuple[float, Decimal], ...]
    period_s: float


def replay_path(name: str) -> Path:
    return (settings.BASE_DIR / f"../shared/prices/spot_history_{name}.csv").resolve()


def replay_series(name: str, gpu_model: str, key: str = "") -> ReplaySeries | None:
    """The series of `gpu_model` in history file `name`: the one named by key, else the one that moves
    most (widest range relative to its lowest price; then most changes; then the first key by name);
    None when the file has no such series."""
    series = _read_history(str(replay_path(name)))
    mine = {k: v for k, v in series.items() if k[0] == model_key(gpu_model)}
    if key:
        mine = {k: v for k, v in mine.items() if k[1] == key}
    if not mine:
        return None
    (_, chosen), rows = min(mine.items(), key=lambda item: (-_swing(item[1]), -len(item[1]), item[0][1]))
    first = rows[0][0]
    points = tuple(((at - first).total_seconds(), price) for at, price in rows)
    last_gap = points[-1][0] - points[-2][0] if len(points) > 1 else 3600.0
    return ReplaySeries(chosen, points, points[-1][0] + last_gap)


def _swing(rows: list[tuple[dt.datetime, Decimal]]) -> Decimal:
    prices = [price for _, price in rows]
    return (max(prices) - min(prices)) / min(prices)


def replay_price(series: ReplaySeries, started_at: dt.datetime, speedup: int, now: dt.datetime) -> Decimal:
    """The recorded price playing at `now`: elapsed real time x speedup, modulo one loop."""
    position = max(0.0, (now - started_at).total_seconds() * speedup) % series.period_s
    price = series.points[0][1]
    for offset, value in series.points:
        if offset > position:
            break
        price = value
    return price


@functools.lru_cache(maxsize=8)
def _read_history(path: str) -> dict[tuple[str, str], list[tuple[dt.datetime, Decimal]]]:
    """(model key, cloud/region/zone/instance) -> [(instant, per-GPU spot price)] from a history file."""
    found: dict[tuple[str, str], list[tuple[dt.datetime, Decimal]]] = {}
    if not Path(path).is_file():
        return found
    with open(path, newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            spot, count = row.get("spot_usd_per_hour", "").strip(), row.get("gpu_count", "").strip()
            if not spot or not count.isdigit() or int(count) < 1 or Decimal(spot) <= 0:
                continue
            key = "/".join(row[c] for c in ("cloud", "region", "zone", "instance_type"))
            at = dt.datetime.fromisoformat(row["timestamp_utc"].replace("Z", "+00:00"))
            price = (Decimal(spot) / int(count)).quantize(FEED_PRICE_QUANTUM)
            found.setdefault((model_key(row["gpu_model"]), key), []).append((at, price))
    for key, rows in found.items():  # a row where only the on-demand price changed is no spot change
        rows.sort()
        found[key] = [r for i, r in enumerate(rows) if i == 0 or r[1] != rows[i - 1][1]]
    return found


@dataclass(frozen=True)
class UploadRow:
    line: int
    pool: Pool
    effective_from: dt.datetime
    usd_per_gpu_hour: Decimal


class PriceUploadError(Exception):
    """The file was refused: every problem found, one per line (nothing was written)."""

    def __init__(self, errors: list[str]):
        super().__init__("; ".join(errors))
        self.errors = errors


def parse_price_upload(text: str, now: dt.datetime, pool: Pool | None = None) -> list[UploadRow]:
    """Rows of an uploaded price file: columns effective_from (ISO 8601 with timezone), usd_per_gpu_hour,
    and pool (optional when the upload is for one pool). Every row is checked; PriceUploadError lists
    each bad row by line; spot pools only; no price may start in the past or twice at one instant."""
    reader = csv.DictReader(io.StringIO(text))
    try:
        columns = reader.fieldnames or []
    except csv.Error as error:
        raise PriceUploadError([_unreadable(reader, error)]) from None
    missing = [c for c in ("effective_from", "usd_per_gpu_hour") if c not in columns]
    if pool is None and "pool" not in columns:
        missing.append("pool")
    if missing:
        raise PriceUploadError([f"line 1: missing column(s) {', '.join(missing)} in the header."])
    pools = {p.name: p for p in Pool.objects.all()}
    rows, errors, seen = [], [], set()
    for row in _rows(reader, errors):
        line = reader.line_num
        if len(rows) + len(errors) >= MAX_UPLOAD_ROWS:
            errors.append(f"line {line}: more than {MAX_UPLOAD_ROWS} rows; split the file.")
            break
        problems = []
        if None in row or any(v is None for v in row.values()):
            errors.append(f"line {line}: wrong number of fields.")
            continue
        name = (row.get("pool") or "").strip() or (pool.name if pool else "")
        target = pools.get(name)
        if target is None:
            problems.append(f"no pool named {echoed(name)!r}")
        elif pool is not None and target != pool:
            problems.append(f"pool {echoed(name)!r} is not the pool this upload is for ({pool.name})")
        elif not target.is_spot():
            problems.append(f"pool {echoed(name)!r} is on-demand; feeds drive spot pools only")
        text_at = row["effective_from"].strip()
        try:
            at = parse_time(text_at)
        except BadTime as problem:
            at = None
            problems.append(f"effective_from {echoed(text_at)!r} {problem}")
        if at is not None and at < now:
            problems.append(
                f"effective_from {echoed(text_at)!r} is in the past: it would change what was billed"
            )
        try:
            price = parse_usd_per_gpu_hour(row["usd_per_gpu_hour"])
        except ValidationError as error:
            price = None
            problems.extend(error.message_dict["usd_per_gpu_hour"])
        if target is not None and at is not None:
            if (target.pk, at) in seen:
                problems.append(f"a second price for {target.name} at {text_at}")
            seen.add((target.pk, at))
        if problems:
            errors.append(f"line {line}: " + "; ".join(problems) + ".")
        else:
            rows.append(UploadRow(line, target, at, price))
    if errors:
        raise PriceUploadError(errors)
    if not rows:
        raise PriceUploadError(["line 2: the file has no price rows."])
    return rows


def _rows(reader: csv.DictReader, errors: list[str]):
    """The reader's rows, until one cannot be read (a field over csv's limit of 131,072 characters):
    that ends the file, with its line in `errors`."""
    try:
        yield from reader
    except csv.Error as error:
        errors.append(_unreadable(reader, error))


def _unreadable(reader: csv.DictReader, error: csv.Error) -> str:
    # csv counts a record's lines once it has read all of it: this one starts on the next line.
    return f"line {reader.line_num + 1}: not readable as CSV ({error})."

"""Medians of the public cloud GPU prices in shared/prices/cloud_gpu_prices.csv. Pure: no ORM.

Prices are USD per whole GPU-hour, read as Decimal straight from the file's text (never
through float). An empty price means the cloud does not publish one and is skipped.
"""

import csv
import re
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from pathlib import Path

from billing_app.constants import PRICE_QUANTUM

ON_DEMAND = "on-demand"
SPOT = "spot"
# The capacity type of a pool → the file's per-GPU price column.
PRICE_COLUMNS = {ON_DEMAND: "ondemand_usd_per_gpu_hour", SPOT: "spot_usd_per_gpu_hour"}
REQUIRED_COLUMNS = ("gpu_model", *PRICE_COLUMNS.values())


class PriceFileError(Exception):
    """The price file is missing or malformed; the message names the file and, where it can, the line."""


@dataclass(frozen=True)
class Median:
    """The median of `count` public per-GPU-hour prices (USD) of one GPU model and capacity type,
    rounded half-up to 6 decimal places (the catalog's precision)."""

    gpu_model: str
    capacity_type: str
    usd_per_gpu_hour: Decimal
    count: int


@dataclass
class PublicPrices:
    """What one read of the file found: the medians by (model key, capacity type) and row counts."""

    path: Path
    rows_read: int = 0
    rows_skipped: int = 0  # no GPU model, or neither price published
    medians: dict[tuple[str, str], Median] = field(default_factory=dict)

    def median_for(self, gpu_model: str, capacity_type: str) -> Median | None:
        return self.medians.get((model_key(gpu_model), capacity_type))


def model_key(gpu_model: str) -> str:
    """How GPU model names are matched: case and separators do not count (RTX-4090 is RTX4090)."""
    return re.sub(r"[^0-9A-Z]", "", gpu_model.upper())


def read_public_prices(path: Path | str) -> PublicPrices:
    """Read the whole file, then compute the medians; PriceFileError on any bad row (nothing is half-read)."""
    path = Path(path)
    if not path.is_file():
        raise PriceFileError(f"No price file at {path}.")
    found = PublicPrices(path=path)
    samples: dict[tuple[str, str], list[Decimal]] = defaultdict(list)
    names: dict[str, str] = {}
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise PriceFileError(f"{path}: missing column(s) {', '.join(missing)} in the header.")
            for row in reader:
                found.rows_read += 1
                line = reader.line_num
                if None in row or any(v is None for v in row.values()):
                    raise PriceFileError(f"{path}, line {line}: wrong number of fields.")
                model = row["gpu_model"].strip()
                prices = {
                    kind: _price(row[column], path, line, column) for kind, column in PRICE_COLUMNS.items()
                }
                if not model or all(p is None for p in prices.values()):
                    found.rows_skipped += 1
                    continue
                names.setdefault(model_key(model), model)
                for kind, price in prices.items():
                    if price is not None:
                        samples[(model_key(model), kind)].append(price)
    except UnicodeDecodeError as error:
        raise PriceFileError(f"{path}: not UTF-8 text ({error.reason}).") from None
    except csv.Error as error:
        raise PriceFileError(f"{path}: not valid CSV ({error}).") from None
    for (key, kind), values in samples.items():
        middle = statistics.median(values)  # Decimal in, Decimal out: the mean of the middle two
        found.medians[(key, kind)] = Median(
            names[key], kind, middle.quantize(PRICE_QUANTUM, rounding=ROUND_HALF_UP), len(values)
        )
    return found


def _price(text: str, path: Path, line: int, column: str) -> Decimal | None:
    text = text.strip()
    if not text:
        return None
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise PriceFileError(f"{path}, line {line}: {column} {text!r} is not a number.") from None
    if not value.is_finite() or value <= 0:
        raise PriceFileError(f"{path}, line {line}: {column} {text!r} is not a positive price.")
    return value

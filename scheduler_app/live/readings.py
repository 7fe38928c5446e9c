"""The cards' latest readings, as the live ticker shows them. The readings are telemetry's, and telemetry
sits above the scheduler (it reads nodes, cards and slices), so the scheduler does not import it:
telemetry registers its reader here when Django starts (telemetry.apps.TelemetryConfig.ready)."""

import datetime as dt
from collections.abc import Callable

from django.core.exceptions import ImproperlyConfigured
from django.db.models import Expression

# since -> {"util": …, "used_mib": …}: annotations of a Gpu queryset (OuterRef("pk") is the card), its
# newest reading taken at `since` or later, util in percent and memory used in MiB; None without one.
LatestReadings = Callable[[dt.datetime], dict[str, Expression]]

_reader: LatestReadings | None = None


def register_latest_readings(reader: LatestReadings) -> None:
    global _reader
    _reader = reader


def latest_readings(since: dt.datetime) -> dict[str, Expression]:
    if _reader is None:
        raise ImproperlyConfigured("Nothing reads the cards' readings: is telemetry in INSTALLED_APPS?")
    return _reader(since)

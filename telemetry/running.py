"""The running work the telemetry checks judge, and its cards' minute rollups joined on a window."""

from django.db.models import FilteredRelation, Q

from scheduler_app.choices import RequestState
from scheduler_app.models import Allocation
from telemetry.rollups import MINUTE_S


def running_segments():
    """The open slices of running requests (work being moved or not yet started is not judged)."""
    return Allocation.objects.committed().filter(request__state=RequestState.RUNNING)


def minute_rollups(since, until=None) -> FilteredRelation:
    """The segment's card's minute rollups from `since` on (before `until`), joined on that condition, so
    the database reads only those rows; a segment without any still comes out, with nulls."""
    condition = Q(gpu__rollups__resolution_s=MINUTE_S, gpu__rollups__bucket_start__gte=since)
    if until is not None:
        condition &= Q(gpu__rollups__bucket_start__lt=until)
    return FilteredRelation("gpu__rollups", condition=condition)

"""Reads that need more than one line, always scoped to what the user may see."""

from django.db.models import QuerySet

from scheduler_app.models import GpuRequest


def requests_visible_to(user) -> QuerySet[GpuRequest]:
    """Requests of the user's teams; operators (staff) see every team's."""
    if user.is_staff:
        return GpuRequest.objects.all()
    return GpuRequest.objects.filter(team__memberships__user=user)

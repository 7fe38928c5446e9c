"""Telemetry over a time range (?start=&end=) for a request and a team (their members), a pool
(anyone signed in: a cluster aggregate) and a card (operators: a card may hold several teams' work)."""

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api.permissions import IsOperator
from scheduler_app.api.serializers import (
    GpuTelemetrySerializer,
    RequestTelemetrySerializer,
    ShareTelemetrySerializer,
    TelemetryRangeSerializer,
)
from scheduler_app.models import Gpu, Pool
from scheduler_app.selectors import requests_visible_to
from scheduler_app.telemetry_series import gpu_series, pool_series, request_series, team_series
from teams.selectors import teams_visible_to

RANGE = [
    OpenApiParameter("start", str, description="ISO 8601 with a timezone; default an hour before end."),
    OpenApiParameter("end", str, description="ISO 8601 with a timezone; default now."),
]


class _TelemetryView(APIView):
    """Parse the range, find what it is about (404 when the user may not see it), answer its series.
    Each view names its response `shape` and its `series(request, start, end, **url_kwargs)`."""

    series_field = "points"

    def get(self, request, **kwargs):
        form = TelemetryRangeSerializer(data=request.query_params)
        form.is_valid(raise_exception=True)
        span = form.validated_data
        resolution, series = self.series(request, span["start"], span["end"], **kwargs)
        return Response(self.shape({"resolution_s": resolution, self.series_field: series, **span}).data)


@extend_schema_view(
    get=extend_schema(parameters=RANGE, responses=RequestTelemetrySerializer, tags=["telemetry"])
)
class RequestTelemetryView(_TelemetryView):
    """Each card the request held in the range, with that card's readings while it held it."""

    shape = RequestTelemetrySerializer
    series_field = "cards"

    def series(self, request, start, end, pk):
        return request_series(get_object_or_404(requests_visible_to(request.user), pk=pk), start, end)


@extend_schema_view(
    get=extend_schema(parameters=RANGE, responses=ShareTelemetrySerializer, tags=["telemetry"])
)
class TeamTelemetryView(_TelemetryView):
    """The team's GPUs held and busy over the range, each card counted by the team's share of it."""

    shape = ShareTelemetrySerializer

    def series(self, request, start, end, slug):
        return team_series(get_object_or_404(teams_visible_to(request.user), slug=slug), start, end)


@extend_schema_view(
    get=extend_schema(parameters=RANGE, responses=ShareTelemetrySerializer, tags=["telemetry"])
)
class PoolTelemetryView(_TelemetryView):
    """The pool's cards over the range, whoever held them."""

    shape = ShareTelemetrySerializer

    def series(self, request, start, end, name):
        return pool_series(get_object_or_404(Pool, name=name), start, end)


@extend_schema_view(get=extend_schema(parameters=RANGE, responses=GpuTelemetrySerializer, tags=["telemetry"]))
class GpuTelemetryView(_TelemetryView):
    """One card's readings over the range (operators)."""

    permission_classes = [IsOperator]
    shape = GpuTelemetrySerializer

    def series(self, request, start, end, pk):
        return gpu_series(get_object_or_404(Gpu, pk=pk).pk, start, end)

"""Telemetry over REST: the node agents' sample batches and usage reports in; a request's utilization
(its team's members); series over a time range (?start=&end=) for a request and a team (their
members), a pool (anyone signed in: a cluster aggregate) and a card (operators: a card may hold several
teams' work)."""

import datetime as dt

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import (
    OpenApiParameter,
    PolymorphicProxySerializer,
    extend_schema,
    extend_schema_view,
)
from rest_framework.response import Response
from rest_framework.views import APIView

from infra.api.throttling import PerNodeRateThrottle
from scheduler_app.api.agent_views import AgentView
from scheduler_app.api.authentication import NodeCredentialAuthentication
from scheduler_app.api.permissions import IsNodeAgent
from scheduler_app.models import Gpu, Pool
from scheduler_app.selectors import requests_visible_to
from teams.api.permissions import IsOperator
from teams.selectors import teams_visible_to
from telemetry.api.serializers import (
    GpuTelemetrySerializer,
    RequestTelemetrySerializer,
    SampleBatchAcceptedSerializer,
    SampleBatchSerializer,
    SampleMomentsSerializer,
    ShareTelemetrySerializer,
    TelemetryRangeSerializer,
    UsageAcceptedSerializer,
    UsageSerializer,
    UtilizationSerializer,
)
from telemetry.selectors import (
    gpu_series,
    pool_series,
    request_series,
    request_time_range,
    request_utilization,
    team_series,
)
from telemetry.services import SampleMoment, record_sample_moments, record_usage

RANGE = [
    OpenApiParameter("start", str, description="ISO 8601 with a timezone; default an hour before end."),
    OpenApiParameter("end", str, description="ISO 8601 with a timezone; default now."),
]
REQUEST_RANGE = [
    OpenApiParameter(
        "start", str, description="ISO 8601 with a timezone; default when the request's first slice began."
    ),
    OpenApiParameter(
        "end",
        str,
        description="ISO 8601 with a timezone; default when its last slice ended (now while held).",
    ),
]


class _TelemetryView(APIView):
    """Parse the range, find what it is about (404 when the user may not see it), answer its series.
    Each view names its response `shape`, its `subject(request, **url_kwargs)` and `series(subject, start,
    end)`; `own_range(subject)` may give the range to answer when the query names none."""

    series_field = "points"

    def get(self, request, **kwargs):
        subject = self.subject(request, **kwargs)
        form = TelemetryRangeSerializer(
            data=request.query_params, context={"default": self.own_range(subject)}
        )
        form.is_valid(raise_exception=True)
        span = form.validated_data
        resolution, series = self.series(subject, span["start"], span["end"])
        return Response(self.shape({"resolution_s": resolution, self.series_field: series, **span}).data)

    def own_range(self, subject) -> tuple[dt.datetime, dt.datetime] | None:
        return None


@extend_schema_view(
    get=extend_schema(parameters=REQUEST_RANGE, responses=RequestTelemetrySerializer, tags=["telemetry"])
)
class RequestTelemetryView(_TelemetryView):
    """Each card the request held in the range, with that card's readings while it held it; by default
    the range is the request's own: from its first slice's start to its last one's end."""

    shape = RequestTelemetrySerializer
    series_field = "cards"

    def subject(self, request, pk):
        return get_object_or_404(requests_visible_to(request.user), pk=pk)

    def own_range(self, subject):
        return request_time_range(subject)

    def series(self, subject, start, end):
        return request_series(subject, start, end)


@extend_schema_view(
    get=extend_schema(parameters=RANGE, responses=ShareTelemetrySerializer, tags=["telemetry"])
)
class TeamTelemetryView(_TelemetryView):
    """The team's GPUs held and busy over the range, each card counted by the team's share of it."""

    shape = ShareTelemetrySerializer

    def subject(self, request, slug):
        return get_object_or_404(teams_visible_to(request.user), slug=slug)

    def series(self, subject, start, end):
        return team_series(subject, start, end)


@extend_schema_view(
    get=extend_schema(parameters=RANGE, responses=ShareTelemetrySerializer, tags=["telemetry"])
)
class PoolTelemetryView(_TelemetryView):
    """The pool's cards over the range, whoever held them."""

    shape = ShareTelemetrySerializer

    def subject(self, request, name):
        return get_object_or_404(Pool, name=name)

    def series(self, subject, start, end):
        return pool_series(subject, start, end)


@extend_schema_view(get=extend_schema(parameters=RANGE, responses=GpuTelemetrySerializer, tags=["telemetry"]))
class GpuTelemetryView(_TelemetryView):
    """One card's readings over the range (operators)."""

    permission_classes = [IsOperator]
    shape = GpuTelemetrySerializer

    def subject(self, request, pk):
        return get_object_or_404(Gpu, pk=pk)

    def series(self, subject, start, end):
        return gpu_series(subject.pk, start, end)


class RequestUtilizationView(APIView):
    """Each segment of the request (its slice on one card, finished ones too): the card's readings in
    the slice's own time range, its last 15 minutes at most, downsampled to at most 60 points, with
    the latest and util mean and std-dev; the current load of the cards it holds now. Readings are
    the whole card's."""

    @extend_schema(responses=UtilizationSerializer, tags=["requests"])
    def get(self, request, pk):
        gpu_request = get_object_or_404(requests_visible_to(request.user), pk=pk)
        return Response(UtilizationSerializer(request_utilization(gpu_request)).data)


class GpuSampleIngestView(APIView):
    """A node agent posts its cards' readings taken at one moment; the batch is also its heartbeat.
    Takes only the node's agent credential (Bearer node_…), never a personal API token."""

    authentication_classes = [NodeCredentialAuthentication]
    permission_classes = [IsNodeAgent]
    throttle_classes = [PerNodeRateThrottle]

    @extend_schema(
        request=PolymorphicProxySerializer(
            "SampleBatchOrMoments",
            [SampleBatchSerializer, SampleMomentsSerializer],
            resource_type_field_name=None,
        ),
        responses=SampleBatchAcceptedSerializer,
        tags=["agent"],
    )
    def post(self, request):
        several = isinstance(request.data, dict) and "moments" in request.data
        batch = (SampleMomentsSerializer if several else SampleBatchSerializer)(data=request.data)
        batch.is_valid(raise_exception=True)
        node = request.auth
        moments = batch.validated_data["moments"] if several else [batch.validated_data]
        accepted = record_sample_moments(
            node,
            [SampleMoment(m["sampled_at"], m["gpus"], m.get("network_bytes_per_s")) for m in moments],
        )
        body = {"accepted": accepted, "node": node.name, "node_status": node.status}
        return Response(SampleBatchAcceptedSerializer(body).data)


class UsageView(AgentView):
    """The host's CPU and network and each job's own use of its cards, read at one moment; a heartbeat."""

    @extend_schema(request=UsageSerializer, responses=UsageAcceptedSerializer, tags=["agent"])
    def post(self, request):
        usage = self.parsed(UsageSerializer)
        accepted = record_usage(request.auth, usage["sampled_at"], host=usage["host"], slices=usage["slices"])
        return Response(UsageAcceptedSerializer({"accepted": accepted}).data)

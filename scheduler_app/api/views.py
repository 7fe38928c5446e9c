"""Requests and the cluster over REST: parse, authorize, call one service, serialize. A request's estimate,
which prices it, is billing's (billing_app.api.views.EstimateView)."""

from django.db import transaction
from django.db.models import Prefetch, prefetch_related_objects
from django.shortcuts import get_object_or_404
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.generics import GenericAPIView
from rest_framework.response import Response

from audit.models import Event
from infra.api.idempotency import idempotent
from scheduler_app.api.agent_serializers import LogQuerySerializer, LogTailSerializer
from scheduler_app.api.serializers import (
    AuditEventSerializer,
    ClusterSerializer,
    GpuRequestDetailSerializer,
    GpuRequestSerializer,
    MigLayoutSerializer,
    OperatorNodeSerializer,
    PoolChangeSerializer,
    PoolDetailSerializer,
    QuotaSerializer,
    ReasonSerializer,
    ReclaimSerializer,
    SetQuotaSerializer,
    SubmitSerializer,
)
from scheduler_app.choices import NodeStatus
from scheduler_app.filters import AuditEventFilter, ClusterNodeFilter, GpuRequestFilter
from scheduler_app.models import Allocation, GpuRequest, Node, Pool
from scheduler_app.selectors import (
    audit_events,
    cluster_picture,
    nodes_for_operators,
    quota_usage,
    request_log,
    requests_visible_to,
)
from scheduler_app.services.inventory import set_mig_layout, set_node_status, update_pool
from scheduler_app.services.migration import reclaim_node
from scheduler_app.services.quotas import set_team_quota
from scheduler_app.services.requests import cancel_request, release_request, submit_request
from teams.api.permissions import IsOperator
from teams.permissions import note_membership
from teams.selectors import team_for_submit, teams_visible_to


class GpuRequestViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    serializer_class = GpuRequestSerializer
    lookup_value_converter = "int"
    queryset = GpuRequest.objects.none()  # names the model for the schema; get_queryset scopes it
    filter_backends = [DjangoFilterBackend]
    filterset_class = GpuRequestFilter

    def get_queryset(self):
        return (
            requests_visible_to(self.request.user)
            .with_capacity()
            .select_related("team", "user", "pool")
            .prefetch_related(Prefetch("allocations", queryset=self._segments()))
            .order_by("-created_at", "-id")
        )

    @staticmethod
    def _segments():
        return Allocation.objects.select_related("gpu__node__pool").order_by("started_at", "id")

    @extend_schema(responses=GpuRequestDetailSerializer)
    def retrieve(self, request, *args, **kwargs):
        gpu_request = self.get_object()
        events = Event.objects.filter(content_type__model="gpurequest", object_id=gpu_request.pk)
        return Response(GpuRequestDetailSerializer(gpu_request, context={"events": events}).data)

    @extend_schema(request=SubmitSerializer, responses={201: GpuRequestSerializer})
    @idempotent
    def create(self, request):
        fields = _submitted(request)
        gpu_request = submit_request(
            user=request.user,
            team=team_for_submit(request.user, fields.pop("team")),
            pool_name=fields.pop("pool"),
            **fields,
        )
        # Answered from the saved row: a new request holds no slice yet, so nothing needs re-reading.
        return Response(self.get_serializer(gpu_request).data, status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=GpuRequestSerializer)
    @action(detail=True, methods=["post"])
    @idempotent
    def cancel(self, request, pk=None):
        with transaction.atomic():
            cancelled = cancel_request(self._target(), user=request.user, locked=True)
        return self._answer(cancelled)

    @extend_schema(request=None, responses=GpuRequestSerializer)
    @action(detail=True, methods=["post"])
    @idempotent
    def release(self, request, pk=None):
        with transaction.atomic():
            released = release_request(self._target(), user=request.user, locked=True)
        return self._answer(released)

    @extend_schema(
        responses=LogTailSerializer,
        parameters=[OpenApiParameter("after", int, description="Character offset already read (default 0).")],
    )
    @action(detail=True)
    def log(self, request, pk=None):
        """The job's output past `after`, as its node's agent shipped it; poll with `after=end` to tail it."""
        gpu_request = get_object_or_404(requests_visible_to(request.user), pk=pk)
        after = LogQuerySerializer(data=request.query_params)
        after.is_valid(raise_exception=True)
        tail = request_log(gpu_request, after.validated_data["after"])
        body = {**vars(tail), "state": gpu_request.state, "exit_code": gpu_request.exit_code}
        return Response(LogTailSerializer(body).data)

    def get_object(self):
        return get_object_or_404(self.get_queryset(), pk=self.kwargs["pk"])

    def _target(self) -> GpuRequest:
        """The request an action changes, locked in the caller's transaction; without its segments,
        which the answer reads only if needed."""
        user = self.request.user
        visible = requests_visible_to(user).with_capacity().select_related("team", "user", "pool")
        gpu_request = get_object_or_404(visible.select_for_update(of=("self",)), pk=self.kwargs["pk"])
        if not user.is_staff:  # found through the user's memberships: the permission check needs no query
            note_membership(user, gpu_request.team)
        return gpu_request

    def _answer(self, gpu_request: GpuRequest) -> Response:
        """The request after an action; only an active one holds slices worth reading back."""
        if gpu_request.is_active():
            prefetch_related_objects([gpu_request], Prefetch("allocations", queryset=self._segments()))
        return Response(self.get_serializer(gpu_request).data)


def _submitted(request) -> dict:
    serializer = SubmitSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    fields = dict(serializer.validated_data)
    fields.setdefault("team", "")
    return fields


class ClusterView(GenericAPIView):
    """Capacity per pool and the queue per team, then the nodes a page at a time (filtered by pool,
    node name, state) with their cards and slices; other teams' work shows only as used capacity."""

    queryset = Node.objects.none()  # names the model for the schema and the filter
    filter_backends = [DjangoFilterBackend]
    filterset_class = ClusterNodeFilter

    @extend_schema(
        responses=ClusterSerializer,
        parameters=[
            OpenApiParameter("pool", str, description="Only this pool's nodes (its name)."),
            OpenApiParameter("node", str, description="Only nodes whose name contains this."),
            OpenApiParameter("state", str, enum=NodeStatus.values, description="Only nodes in this state."),
            OpenApiParameter("page", int, description="Page of nodes, from 1."),
            OpenApiParameter("page_size", int, description="Nodes a page, 1..500 (50 if not given)."),
        ],
    )
    def get(self, request):
        nodes = self.filter_queryset(Node.objects.select_related("pool").order_by("name"))
        picture = cluster_picture(request.user, self.paginate_queryset(nodes))
        body = {
            "count": self.paginator.page.paginator.count,
            "next": self.paginator.get_next_link(),
            "previous": self.paginator.get_previous_link(),
            "pools": picture.pools,
            "queues": picture.queues,
            "results": picture.nodes,
        }
        return Response(ClusterSerializer(body).data)


class NodeViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """Operators: every node with its load (?name= for one); drain (no new work), undrain and reclaim
    (spot: its work checkpoints and moves), each logged."""

    serializer_class = OperatorNodeSerializer
    permission_classes = [IsOperator]
    lookup_value_converter = "int"

    def get_queryset(self):
        nodes = nodes_for_operators().prefetch_related("gpus").order_by("name")
        if name := self.request.query_params.get("name"):
            nodes = nodes.filter(name=name)
        return nodes

    @extend_schema(request=ReasonSerializer, responses=OperatorNodeSerializer)
    @action(detail=True, methods=["post"])
    def drain(self, request, pk=None):
        return self._set_status(request, pk, NodeStatus.DRAINING)

    @extend_schema(request=ReasonSerializer, responses=OperatorNodeSerializer)
    @action(detail=True, methods=["post"])
    def undrain(self, request, pk=None):
        return self._set_status(request, pk, NodeStatus.READY)

    @extend_schema(request=ReclaimSerializer, responses=OperatorNodeSerializer)
    @action(detail=True, methods=["post"])
    @idempotent
    def reclaim(self, request, pk=None):
        """Reclaim a spot node (as a cloud notice would): its work checkpoints, stops and moves."""
        form = ReclaimSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        reclaim_node(self.get_object(), source="operator", actor=request.user, **form.validated_data)
        return Response(self.get_serializer(self.get_queryset().get(pk=pk)).data)

    @extend_schema(request=MigLayoutSerializer, responses=OperatorNodeSerializer)
    @action(detail=True, methods=["post"], url_path="mig-layout")
    def mig_layout(self, request, pk=None):
        """Set one card's MIG layout (the node's pool must be in MIG mode; instances in use stay)."""
        form = MigLayoutSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        node = self.get_object()
        gpu = node.gpus.filter(index=form.validated_data["gpu_index"]).first()
        if gpu is None:
            raise ValidationError(
                {"gpu_index": [f"{node.name} has no GPU {form.validated_data['gpu_index']}."]}
            )
        set_mig_layout(gpu, form.validated_data["mig_layout"], actor=request.user)
        return Response(self.get_serializer(self.get_queryset().get(pk=pk)).data)

    def _set_status(self, request, pk, status):
        form = ReasonSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        set_node_status(self.get_object(), status, actor=request.user, reason=form.validated_data["reason"])
        return Response(self.get_serializer(self.get_queryset().get(pk=pk)).data)


class AuditEventViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """Operators: the audit log, newest first, filtered as the operator page filters it (?who=, ?what=,
    ?team=, ?since=, ?until=) and paged."""

    serializer_class = AuditEventSerializer
    permission_classes = [IsOperator]
    queryset = Event.objects.none()  # names the model for the schema; get_queryset reads the log
    filter_backends = [DjangoFilterBackend]
    filterset_class = AuditEventFilter

    def get_queryset(self):
        return audit_events()


class PoolViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """Pools anyone may list; operators change their granularity, description, MIG mode and
    consolidation switch."""

    serializer_class = PoolDetailSerializer
    queryset = Pool.objects.order_by("name")
    lookup_field = "name"
    lookup_value_converter = "slug"
    pagination_class = None

    @extend_schema(request=PoolChangeSerializer, responses=PoolDetailSerializer)
    def partial_update(self, request, name=None):
        form = PoolChangeSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        if not form.validated_data:
            raise ValidationError(
                {
                    "non_field_errors": [
                        "Give granularity_milli, description, mig_mode or consolidation to change."
                    ]
                }
            )
        pool = update_pool(self.get_object(), actor=request.user, **form.validated_data)
        return Response(self.get_serializer(pool).data)


class TeamQuotaViewSet(viewsets.ViewSet):
    """A team's quota per pool, under teams/{slug}/ beside teams.api.views.TeamViewSet: anyone in the
    team reads the use against it, operators set it."""

    lookup_field = "slug"
    lookup_value_converter = "slug"

    def _team(self, slug):
        return get_object_or_404(teams_visible_to(self.request.user).distinct(), slug=slug)

    @extend_schema(responses=QuotaSerializer(many=True))
    @action(detail=True)
    def quotas(self, request, slug=None):
        # The description this endpoint has had since it was TeamViewSet's; the schema keeps it.
        """Your teams, your role in each, and each team's quota use."""
        return Response(QuotaSerializer(quota_usage(self._team(slug)), many=True).data)

    @extend_schema(request=SetQuotaSerializer, responses=QuotaSerializer(many=True))
    @action(detail=True, methods=["put"], url_path="quotas/<slug:pool>")
    def set_quota(self, request, slug=None, pool=None):
        """Operators set the team's guaranteed milli-GPU in a pool."""
        team = self._team(slug)
        form = SetQuotaSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        pool = get_object_or_404(Pool, name=pool)
        set_team_quota(
            team=team, pool=pool, guaranteed_milli=form.validated_data["guaranteed_milli"], actor=request.user
        )
        return Response(QuotaSerializer(quota_usage(team), many=True).data)

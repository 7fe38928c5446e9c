"""The node agent's endpoints: each takes only the node's credential (Bearer node_…) and acts for that
node alone. Parse, call one service, answer."""

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from infra.api.throttling import PerNodeRateThrottle
from scheduler_app.api.agent_serializers import (
    CheckpointAnswerSerializer,
    CheckpointedSerializer,
    FinishedSerializer,
    HeartbeatSerializer,
    LogAnswerSerializer,
    LogChunkSerializer,
    MemoryExceededSerializer,
    ReclaimAnswerSerializer,
    ReclaimNoticeSerializer,
    RegisteredSerializer,
    RegisterSerializer,
    ReportAnswerSerializer,
    StartedSerializer,
    WorkSerializer,
)
from scheduler_app.api.authentication import NodeCredentialAuthentication
from scheduler_app.api.permissions import IsNodeAgent
from scheduler_app.selectors import node_work
from scheduler_app.services.agents import (
    append_log,
    record_checkpoint,
    report_finished,
    report_memory_exceeded,
    report_started,
)
from scheduler_app.services.inventory import record_heartbeat
from scheduler_app.services.migration import reclaim_node
from scheduler_app.services.node_health import register_agent


class AgentView(APIView):
    authentication_classes = [NodeCredentialAuthentication]
    permission_classes = [IsNodeAgent]
    throttle_classes = [PerNodeRateThrottle]

    def parsed(self, shape) -> dict:
        form = shape(data=self.request.data)
        form.is_valid(raise_exception=True)
        return form.validated_data


class RegisterView(AgentView):
    """Register or reconcile the node's cards from NVML and say how the agent isolates jobs; also a
    heartbeat, and with NODE_RETURN_TO_SERVICE the return of a node lost for its silence."""

    @extend_schema(request=RegisterSerializer, responses=RegisteredSerializer, tags=["agent"])
    def post(self, request):
        report = self.parsed(RegisterSerializer)
        node, changes = register_agent(request.auth, report["gpus"], report.get("isolation"))
        return Response(RegisteredSerializer({"node": node.name, "node_status": node.status, **changes}).data)


class HeartbeatView(AgentView):
    @extend_schema(request=None, responses=HeartbeatSerializer, tags=["agent"])
    def post(self, request):
        node = record_heartbeat(request.auth)
        return Response(HeartbeatSerializer({"node": node.name, "node_status": node.status}).data)


class WorkView(AgentView):
    """The requests the node must run now; one missing from the list must stop."""

    @extend_schema(responses=WorkSerializer(many=True), tags=["agent"])
    def get(self, request):
        return Response(WorkSerializer(node_work(request.auth), many=True).data)


def _answer(gpu_request) -> Response:
    return Response(ReportAnswerSerializer({"request_id": gpu_request.pk, "state": gpu_request.state}).data)


class StartedView(AgentView):
    @extend_schema(request=StartedSerializer, responses=ReportAnswerSerializer, tags=["agent"])
    def post(self, request, pk):
        return _answer(report_started(request.auth, pk, **self.parsed(StartedSerializer)))


class FinishedView(AgentView):
    @extend_schema(request=FinishedSerializer, responses=ReportAnswerSerializer, tags=["agent"])
    def post(self, request, pk):
        return _answer(report_finished(request.auth, pk, **self.parsed(FinishedSerializer)))


class LogView(AgentView):
    @extend_schema(request=LogChunkSerializer, responses=LogAnswerSerializer, tags=["agent"])
    def post(self, request, pk):
        chunk = self.parsed(LogChunkSerializer)
        end = append_log(request.auth, pk, chunk["offset"], chunk["text"])
        return Response(LogAnswerSerializer({"end": end}).data)


class MemoryExceededView(AgentView):
    """The watchdog stopped the job for using more GPU memory than its slice."""

    @extend_schema(request=MemoryExceededSerializer, responses=ReportAnswerSerializer, tags=["agent"])
    def post(self, request, pk):
        report = self.parsed(MemoryExceededSerializer)
        return _answer(report_memory_exceeded(request.auth, pk, **report))


class CheckpointedView(AgentView):
    """The job checkpointed (its agent saw `<checkpoint dir>/.checkpointed` change)."""

    @extend_schema(request=CheckpointedSerializer, responses=CheckpointAnswerSerializer, tags=["agent"])
    def post(self, request, pk):
        report = self.parsed(CheckpointedSerializer)
        gpu_request = record_checkpoint(request.auth, pk, **report)
        answer = {
            "request_id": gpu_request.pk,
            "state": gpu_request.state,
            "last_checkpoint_at": gpu_request.last_checkpoint_at,
        }
        return Response(CheckpointAnswerSerializer(answer).data)


class ReclaimNoticeView(AgentView):
    """The cloud provider announced it takes this (spot) node back: its work checkpoints and moves."""

    @extend_schema(request=ReclaimNoticeSerializer, responses=ReclaimAnswerSerializer, tags=["agent"])
    def post(self, request):
        notice = self.parsed(ReclaimNoticeSerializer)
        stopping = reclaim_node(request.auth, **notice)
        request.auth.refresh_from_db()
        answer = {"node": request.auth.name, "node_status": request.auth.status, "stopping": stopping}
        return Response(ReclaimAnswerSerializer(answer).data)

"""A pool's Slurm connection over REST, for operators: read it, connect or change it (PUT), disconnect it
(DELETE). Each call is one service of slurm_backend.services, which checks and logs it."""

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from scheduler_app.models import Pool
from slurm_backend.api.serializers import (
    ConnectSlurmSerializer,
    SlurmConnectedSerializer,
    SlurmConnectionSerializer,
)
from slurm_backend.models import SlurmConnection
from slurm_backend.services import connect_pool, disconnect_pool
from teams.api.permissions import IsOperator

POOL_NAME = OpenApiParameter("name", str, OpenApiParameter.PATH, description="The pool's name.")


class PoolSlurmView(APIView):
    permission_classes = [IsOperator]

    @extend_schema(responses=SlurmConnectionSerializer, parameters=[POOL_NAME])
    def get(self, request, name):
        """The pool's Slurm connection; 404 when the pool is not connected to Slurm."""
        connection = get_object_or_404(SlurmConnection.objects.select_related("pool"), pool__name=name)
        return Response(SlurmConnectionSerializer(connection).data)

    @extend_schema(request=ConnectSlurmSerializer, responses=SlurmConnectedSerializer, parameters=[POOL_NAME])
    def put(self, request, name):
        """Connect the pool to a Slurm partition (or change its connection): its nodes are imported and
        its backend becomes slurm. slurmrestd must answer and list nodes in the partition."""
        form = ConnectSlurmSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        pool = get_object_or_404(Pool, name=name)
        connection, problems = connect_pool(pool, actor=request.user, **form.validated_data)
        connection.problems = problems
        return Response(SlurmConnectedSerializer(connection).data)

    @extend_schema(responses={204: OpenApiResponse(description="Disconnected.")}, parameters=[POOL_NAME])
    def delete(self, request, name):
        """Give the pool back to the portal's own agents (only with no work on its cards)."""
        disconnect_pool(get_object_or_404(Pool, name=name), actor=request.user)
        return Response(status=204)

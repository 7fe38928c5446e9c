"""What-if replays of the cluster's history over REST, for operators: start one, follow it."""

from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from infra.api.idempotency import idempotent
from scheduler_app.api.serializers import WhatIfRunSerializer
from scheduler_app.models import WhatIfRun
from scheduler_app.services.whatif import start_what_if
from teams.api.permissions import IsOperator

RECENT_RUNS = 20


class WhatIfView(APIView):
    """POST a scenario ({start, end, policy, queue, quotas: [{team, pool, guaranteed_milli}], nodes:
    {pool: +/-n}, target_p95_s}) to queue a replay (202); GET the latest runs, newest first."""

    permission_classes = [IsOperator]

    @extend_schema(responses=WhatIfRunSerializer(many=True), tags=["what-if"])
    def get(self, request):
        runs = WhatIfRun.objects.select_related("created_by")[:RECENT_RUNS]
        return Response(WhatIfRunSerializer(runs, many=True).data)

    @extend_schema(request=OpenApiTypes.OBJECT, responses={202: WhatIfRunSerializer}, tags=["what-if"])
    @idempotent
    def post(self, request):
        run = start_what_if(actor=request.user, data=request.data)
        return Response(WhatIfRunSerializer(run).data, status=status.HTTP_202_ACCEPTED)


class WhatIfRunView(APIView):
    """One run: its progress while it runs, its result once done."""

    permission_classes = [IsOperator]

    @extend_schema(responses=WhatIfRunSerializer, tags=["what-if"])
    def get(self, request, pk):
        run = get_object_or_404(WhatIfRun.objects.select_related("created_by"), pk=pk)
        return Response(WhatIfRunSerializer(run).data)

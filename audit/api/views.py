"""Notices to the user's teams over REST: the newest first (?unread=1 for those the user still has to
read), dismiss (for oneself) and acknowledge (team admins, for the whole team). Another team's notice is
a 404."""

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from audit.api.serializers import NoticeSerializer
from audit.models import Notice
from audit.notices import acknowledge_notice, dismiss_notice, visible_notices


class NoticeViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    serializer_class = NoticeSerializer
    queryset = Notice.objects.none()  # names the model for the schema; get_queryset scopes it
    lookup_value_converter = "int"

    def get_queryset(self):
        notices = visible_notices(self.request.user).select_related("team", "acknowledged_by")
        if self.request.query_params.get("unread") == "1":
            notices = notices.unread_by(self.request.user)
        return notices

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "unread", str, description="1: only those you have not dismissed and nobody acknowledged."
            )
        ]
    )
    def list(self, request, *args, **kwargs):
        return super().list(request, *args, **kwargs)

    @extend_schema(request=None, responses=NoticeSerializer)
    @action(detail=True, methods=["post"])
    def dismiss(self, request, pk=None):
        """You have read it: it leaves your lists only."""
        dismiss_notice(self._notice(pk), user=request.user)
        return Response(NoticeSerializer(self._notice(pk)).data)

    @extend_schema(request=None, responses=NoticeSerializer)
    @action(detail=True, methods=["post"])
    def acknowledge(self, request, pk=None):
        """Team admins: dealt with for the team; it leaves every member's lists (logged as an Event)."""
        acknowledge_notice(self._notice(pk), user=request.user)
        return Response(NoticeSerializer(self._notice(pk)).data)

    def _notice(self, pk) -> Notice:
        return get_object_or_404(self.get_queryset(), pk=pk)

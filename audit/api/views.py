"""Notices to the user's teams over REST: the newest first (?unread=1 for those not dismissed), and
dismiss. Another team's notice is a 404."""

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from audit.api.serializers import NoticeSerializer
from audit.models import Notice
from audit.notices import dismiss_notice, visible_notices


class NoticeViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    serializer_class = NoticeSerializer
    queryset = Notice.objects.none()  # names the model for the schema; get_queryset scopes it
    lookup_value_converter = "int"

    def get_queryset(self):
        notices = visible_notices(self.request.user).select_related("team")
        if self.request.query_params.get("unread") == "1":
            notices = notices.unread()
        return notices

    @extend_schema(parameters=[OpenApiParameter("unread", str, description="1: only those not dismissed.")])
    def list(self, request, *args, **kwargs):
        return super().list(request, *args, **kwargs)

    @extend_schema(request=None, responses=NoticeSerializer)
    @action(detail=True, methods=["post"])
    def dismiss(self, request, pk=None):
        notice = dismiss_notice(get_object_or_404(self.get_queryset(), pk=pk), user=request.user)
        return Response(NoticeSerializer(notice).data)

"""Teams, quotas and personal API tokens over REST."""

from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action, api_view, permission_classes
from rest_framework.exceptions import NotFound
from rest_framework.response import Response

from portal.api.serializers import (
    ApiTokenSerializer,
    CreatedApiTokenSerializer,
    NewApiTokenSerializer,
    TeamSerializer,
)
from portal.models import ApiToken, Membership
from portal.services import create_api_token, revoke_api_token
from scheduler_app.api.serializers import QuotaSerializer
from scheduler_app.selectors import quota_usage


class TeamViewSet(viewsets.GenericViewSet):
    """Your teams, your role in each, and each team's quota use."""

    serializer_class = TeamSerializer
    lookup_field = "slug"
    lookup_value_converter = "slug"
    pagination_class = None

    def get_queryset(self):
        return Membership.objects.filter(user=self.request.user).select_related("team").order_by("team__name")

    def list(self, request):
        return Response(self.get_serializer(self.get_queryset(), many=True).data)

    @extend_schema(responses=QuotaSerializer(many=True))
    @action(detail=True)
    def quotas(self, request, slug=None):
        membership = get_object_or_404(self.get_queryset(), team__slug=slug)
        return Response(QuotaSerializer(quota_usage(membership.team), many=True).data)


class ApiTokenViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    serializer_class = ApiTokenSerializer
    lookup_value_converter = "int"

    def get_queryset(self):
        return ApiToken.objects.filter(user=self.request.user)

    @extend_schema(request=NewApiTokenSerializer, responses={201: CreatedApiTokenSerializer})
    def create(self, request):
        form = NewApiTokenSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        token, secret = create_api_token(
            request.user, name=form.validated_data["name"], expires_at=form.expiry(timezone.now())
        )
        token.token = secret
        return Response(CreatedApiTokenSerializer(token).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=ApiTokenSerializer)
    @action(detail=True, methods=["post"])
    def revoke(self, request, pk=None):
        token = revoke_api_token(get_object_or_404(self.get_queryset(), pk=pk), user=request.user)
        return Response(self.get_serializer(token).data)


@extend_schema(exclude=True)
@api_view(["GET", "POST", "PUT", "PATCH", "DELETE"])
@permission_classes([])
def not_found(request):
    raise NotFound("No such API endpoint; see /api/v1/docs/.")

"""Notification channels over REST: yours and your teams' (another team's is a 404); team admins manage a
team's, each user their own; a test message, pause and resume, a new webhook secret, the delivery log."""

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from notifications.api.serializers import (
    ChannelChangeSerializer,
    ChannelCreatedSerializer,
    ChannelSerializer,
    DeliverySerializer,
    NewChannelSerializer,
    SecretSerializer,
)
from notifications.models import Channel
from notifications.selectors import channels_visible_to, delivery_log
from notifications.services import (
    create_channel,
    delete_channel,
    pause_channel,
    resume_channel,
    rotate_secret,
    send_test,
    update_channel,
)
from teams.selectors import teams_visible_to


class ChannelViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    serializer_class = ChannelSerializer
    queryset = Channel.objects.none()  # names the model for the schema; get_queryset scopes it
    lookup_value_converter = "int"

    def get_queryset(self):
        return channels_visible_to(self.request.user)

    @extend_schema(request=NewChannelSerializer, responses={201: ChannelCreatedSerializer})
    def create(self, request):
        """Add a channel: a team's (its admins) or your own. A webhook's signing secret is answered once."""
        form = NewChannelSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        fields = dict(form.validated_data)
        slug = fields.pop("team", "")
        team = get_object_or_404(teams_visible_to(request.user).distinct(), slug=slug) if slug else None
        channel, secret = create_channel(request.user, team=team, **fields)
        channel.secret = secret
        return Response(ChannelCreatedSerializer(channel).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=ChannelChangeSerializer, responses=ChannelSerializer)
    def partial_update(self, request, pk=None):
        """Change its name, URL or address, or the event kinds it is sent."""
        form = ChannelChangeSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        channel = update_channel(self.get_object(), actor=request.user, **form.validated_data)
        return Response(ChannelSerializer(channel).data)

    @extend_schema(responses={204: None})
    def destroy(self, request, pk=None):
        delete_channel(self.get_object(), actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=None, responses={202: DeliverySerializer})
    @action(detail=True, methods=["post"])
    def test(self, request, pk=None):
        """Queue a test message; its delivery shows in the log."""
        delivery = send_test(self.get_object(), actor=request.user)
        return Response(DeliverySerializer(delivery).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=None, responses=ChannelSerializer)
    @action(detail=True, methods=["post"])
    def pause(self, request, pk=None):
        channel = pause_channel(self.get_object(), actor=request.user, reason=f"paused by {request.user}")
        return Response(ChannelSerializer(channel).data)

    @extend_schema(request=None, responses=ChannelSerializer)
    @action(detail=True, methods=["post"])
    def resume(self, request, pk=None):
        return Response(ChannelSerializer(resume_channel(self.get_object(), actor=request.user)).data)

    @extend_schema(request=None, responses=SecretSerializer)
    @action(detail=True, methods=["post"], url_path="rotate-secret")
    def rotate_secret(self, request, pk=None):
        """A new signing secret for a webhook, answered once; the old one signs nothing more."""
        return Response({"secret": rotate_secret(self.get_object(), actor=request.user)})

    @extend_schema(responses=DeliverySerializer(many=True))
    @action(detail=True, pagination_class=None)  # the newest LOG_LENGTH, as the schema says: a list
    def deliveries(self, request, pk=None):
        """The newest deliveries with each try's status (the delivery log)."""
        return Response(DeliverySerializer(delivery_log(self.get_object()), many=True).data)

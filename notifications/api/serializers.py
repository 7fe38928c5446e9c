from rest_framework import serializers

from infra.api.fields import StrictCharField, StrictChoiceField
from notifications.choices import ChannelKind
from notifications.constants import NAME_MAX_CHARS, URL_MAX_CHARS
from notifications.models import Channel, Delivery, DeliveryAttempt
from notifications.services import CHOOSABLE

EVENTS_HELP = f"The event kinds it is sent: {', '.join(CHOOSABLE)}; empty: all of them."


class ChannelSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
    user = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    target = serializers.CharField(
        read_only=True, help_text="Where it sends: the address, or the URL's scheme and host only."
    )
    paused = serializers.BooleanField(source="is_paused", read_only=True)
    events = serializers.ListField(child=serializers.CharField(), help_text=EVENTS_HELP)

    class Meta:
        model = Channel
        fields = [
            "id",
            "team",
            "user",
            "kind",
            "name",
            "target",
            "events",
            "paused",
            "paused_at",
            "paused_reason",
            "failed_deliveries",
            "created_at",
        ]


class ChannelCreatedSerializer(ChannelSerializer):
    secret = serializers.CharField(
        read_only=True,
        help_text="webhook: the signing secret, answered only now; keep it in the receiver.",
    )

    class Meta(ChannelSerializer.Meta):
        fields = [*ChannelSerializer.Meta.fields, "secret"]


class NewChannelSerializer(serializers.Serializer):
    team = StrictCharField(
        required=False, allow_blank=True, max_length=50, help_text="A team's slug; absent: your own channel."
    )
    kind = StrictChoiceField(choices=ChannelKind.choices)
    name = StrictCharField(max_length=NAME_MAX_CHARS)
    url = StrictCharField(required=False, allow_blank=True, max_length=URL_MAX_CHARS, trim_whitespace=False)
    email = StrictCharField(required=False, allow_blank=True, max_length=254)
    events = serializers.ListField(child=StrictCharField(max_length=32), required=False, max_length=20)


class ChannelChangeSerializer(serializers.Serializer):
    name = StrictCharField(required=False, max_length=NAME_MAX_CHARS)
    url = StrictCharField(required=False, max_length=URL_MAX_CHARS, trim_whitespace=False)
    email = StrictCharField(required=False, max_length=254)
    events = serializers.ListField(child=StrictCharField(max_length=32), required=False, max_length=20)


class SecretSerializer(serializers.Serializer):
    secret = serializers.CharField(read_only=True)


class AttemptSerializer(serializers.ModelSerializer):
    class Meta:
        model = DeliveryAttempt
        fields = ["number", "started_at", "duration_ms", "status_code", "ok", "error"]


class DeliverySerializer(serializers.ModelSerializer):
    tries = AttemptSerializer(many=True, read_only=True)

    class Meta:
        model = Delivery
        fields = [
            "id",
            "kind",
            "state",
            "attempts",
            "created_at",
            "next_attempt_at",
            "finished_at",
            "last_error",
            "tries",
        ]

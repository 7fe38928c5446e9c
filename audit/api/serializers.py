from rest_framework import serializers

from audit.models import Notice


class NoticeSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    open = serializers.SerializerMethodField(help_text="The condition still held at the last check.")
    dismissed_at = serializers.DateTimeField(
        read_only=True,
        allow_null=True,
        help_text="When you dismissed it, for yourself; null: not yet.",
    )
    acknowledged_by = serializers.SlugRelatedField(
        slug_field="username",
        read_only=True,
        allow_null=True,
        help_text="The team admin who acknowledged it for the whole team.",
    )

    class Meta:
        model = Notice
        fields = [
            "id",
            "team",
            "kind",
            "text",
            "data",
            "created_at",
            "dismissed_at",
            "acknowledged_at",
            "acknowledged_by",
            "resolved_at",
            "open",
        ]

    def get_open(self, notice: Notice) -> bool:
        return notice.resolved_at is None

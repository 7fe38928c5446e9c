from rest_framework import serializers

from audit.models import Notice


class NoticeSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    open = serializers.SerializerMethodField(help_text="The condition still held at the last check.")

    class Meta:
        model = Notice
        fields = ["id", "team", "kind", "text", "data", "created_at", "dismissed_at", "resolved_at", "open"]

    def get_open(self, notice: Notice) -> bool:
        return notice.resolved_at is None

from rest_framework import serializers

from infra.api.fields import StrictCharField, StrictIntegerField
from slurm_backend.models import SlurmConnection


class SlurmConnectionSerializer(serializers.ModelSerializer):
    """How the pool reaches its Slurm cluster, and how its last sync went. The token is never shown:
    `has_token` says whether one is stored."""

    pool = serializers.CharField(source="pool.name")
    has_token = serializers.SerializerMethodField()

    class Meta:
        model = SlurmConnection
        fields = [
            "pool",
            "url",
            "has_token",
            "partition",
            "output_dir",
            "card_memory_mib",
            "last_synced_at",
            "last_error",
        ]
        read_only_fields = fields

    def get_has_token(self, connection) -> bool:
        return bool(connection.token_encrypted)


class SlurmConnectedSerializer(SlurmConnectionSerializer):
    problems = serializers.ListField(
        child=serializers.CharField(),
        read_only=True,
        help_text="What the import of the partition's nodes found (a node without gpu gres, a name taken).",
    )

    class Meta(SlurmConnectionSerializer.Meta):
        fields = [*SlurmConnectionSerializer.Meta.fields, "problems"]


class ConnectSlurmSerializer(serializers.Serializer):
    url = StrictCharField(
        max_length=500, help_text="slurmrestd: unix:/path/to.sock (rest_auth/local) or http(s)://host:port."
    )
    token = StrictCharField(
        required=False,
        allow_blank=True,
        write_only=True,
        max_length=4000,
        help_text="The JWT for http(s) (scontrol token); never shown again. Left out: the stored one stays.",
    )
    partition = StrictCharField(max_length=64, help_text="The partition whose nodes are the pool's.")
    output_dir = StrictCharField(
        max_length=500,
        help_text="Where jobs write their output, on storage the Slurm nodes share with the portal.",
    )
    card_memory_mib = StrictIntegerField(
        min_value=1,
        max_value=10_000_000,
        required=False,
        help_text="Each card's memory (MiB); 81920 when left out.",
    )

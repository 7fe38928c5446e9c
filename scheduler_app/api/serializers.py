"""API shapes for requests, allocations, events and the cluster (a request's estimate, with its prices, is
billing's: billing_app.api). Serializers only check types and ranges; the services decide what is allowed."""

import copy
import datetime as dt

from django.conf import settings
from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from audit.models import Event
from infra.api.fields import (
    AwareDateTimeField,
    StrictBooleanField,
    StrictCharField,
    StrictChoiceField,
    StrictIntegerField,
    StrictSlugField,
)
from scheduler_app.choices import (
    BillingMode,
    CapacityType,
    CgroupVersion,
    IsolationMode,
    MigMode,
    TaskType,
)
from scheduler_app.constants import (
    MAX_GPUS_PER_REQUEST,
    MILLI_PER_GPU,
)
from scheduler_app.models import Allocation, GpuRequest, Node, Pool, WhatIfRun
from teams.constants import (
    ENV_NAME_MAX_CHARS,
    ENV_NAME_PATTERN,
    ENV_VALUE_MAX_CHARS,
    MAX_ENV_VARIABLES_PER_REQUEST,
)
from teams.environment import RESERVED


class FieldsBuiltOnce:
    """Builds a serializer class's fields once; each instance binds shallow copies of them.

    DRF builds every field again for each instance (a ModelSerializer introspects the model,
    declared fields are deep-copied): about 2 ms of CPU per GpuRequest answer. A serializer
    with a nested serializer field is left to DRF, as that child would be shared between instances.
    """

    def get_fields(self):
        built = type(self).__dict__.get("_fields_built_once")
        if built is None:
            fields = super().get_fields()
            if any(isinstance(field, serializers.BaseSerializer) for field in fields.values()):
                return fields
            built = type(self)._fields_built_once = fields
        return {name: copy.copy(field) for name, field in built.items()}


class AllocationSerializer(serializers.ModelSerializer):
    node = serializers.CharField(source="gpu.node.name")
    gpu_index = serializers.IntegerField(source="gpu.index")
    gpu_uuid = serializers.CharField(source="gpu.uuid")
    node_status = serializers.CharField(
        source="gpu.node.status", help_text="ready, draining, suspect, lost …"
    )
    node_last_heartbeat_at = serializers.DateTimeField(source="gpu.node.last_heartbeat_at", allow_null=True)
    pool = serializers.CharField(source="gpu.node.pool.name")
    capacity_type = serializers.ChoiceField(
        source="gpu.node.pool.capacity_type",
        choices=CapacityType.choices,
        help_text="What the segment runs on; billing_mode is what it is billed as.",
    )

    class Meta:
        model = Allocation
        fields = [
            "id",
            "node",
            "pool",
            "capacity_type",
            "gpu_index",
            "gpu_uuid",
            "node_status",
            "node_last_heartbeat_at",
            *Allocation.SEGMENT_FIELDS,
        ]


class EventSerializer(serializers.ModelSerializer):
    class Meta:
        model = Event
        fields = ["created_at", "actor_label", "from_state", "to_state", "reason"]


class AuditEventSerializer(serializers.ModelSerializer):
    """One change in the operators' audit log: who, when, what (the kind of subject, its id and name),
    the team concerned, the change in words and its structured details."""

    what = serializers.CharField(source="content_type.model", help_text="The kind of subject: node, pool...")
    subject = serializers.SerializerMethodField(help_text="The subject as people name it (empty: deleted).")
    team = serializers.SlugRelatedField(
        slug_field="slug", read_only=True, allow_null=True, help_text="null: no team's (a node, a pool...)."
    )
    change = serializers.CharField(
        help_text='E.g. "ready → draining" or "guaranteed_milli: 0 → 500 milli-GPU".'
    )

    class Meta:
        model = Event
        fields = [
            "id",
            "created_at",
            "actor_label",
            "what",
            "object_id",
            "subject",
            "team",
            "from_state",
            "to_state",
            "change",
            "reason",
            "data",
        ]

    def get_subject(self, event: Event) -> str:
        return str(event.subject) if event.subject is not None else ""


@extend_schema_field(
    {
        "type": "object",
        "additionalProperties": {"type": "string", "maxLength": ENV_VALUE_MAX_CHARS},
        "maxProperties": MAX_ENV_VARIABLES_PER_REQUEST,
        "description": "Environment variables for the job, NAME -> value: names "
        f"{ENV_NAME_PATTERN}, at most {ENV_NAME_MAX_CHARS} characters, not the ones the node agent sets "
        f"({RESERVED}). They win over the team's secrets of the same name.",
    }
)
class EnvironmentField(serializers.JSONField):
    """A JSON object of NAME -> value strings, checked by the submit service (teams.environment)
    so that the API, the pages and the SDK refuse the same things in the same words."""


class GpuRequestSerializer(FieldsBuiltOnce, serializers.ModelSerializer):
    team = serializers.CharField(source="team.slug")
    user = serializers.CharField(source="user.username")
    pool = serializers.CharField(source="pool.name", allow_null=True, default=None)
    share = serializers.CharField(source="share_label")
    environment = EnvironmentField(read_only=True)
    capacity_type = serializers.SerializerMethodField(
        help_text="The capacity type of the cards that run the work (ran it, once ended): spot work with "
        "on-demand fallback runs on on-demand capacity only when spot has no room; null before it ran."
    )
    billing_label = serializers.CharField(
        read_only=True,
        help_text="The billing mode, and the capacity that runs the work where they differ: "
        "'spot (running on on-demand: fallback)'.",
    )
    allocations = serializers.SerializerMethodField()

    class Meta:
        model = GpuRequest
        fields = [
            "id",
            "name",
            "team",
            "user",
            "task_type",
            "share",
            "gpu_milli",
            "num_gpus",
            "pool",
            "gpu_model",
            "gpu_memory_mib",
            "cpu_milli",
            "memory_mib",
            "billing_mode",
            "capacity_type",
            "billing_label",
            "allow_on_demand_fallback",
            "checkpoint_interval_s",
            "pinned",
            "priority",
            "max_duration_s",
            "command",
            "environment",
            "workload_key",
            "state",
            "pending_reason",
            "estimated_start_at",
            "created_at",
            "scheduled_at",
            "started_at",
            "ended_at",
            "allocations",
        ]

    @extend_schema_field(serializers.ChoiceField(choices=CapacityType.choices, allow_null=True))
    def get_capacity_type(self, request) -> str | None:
        return getattr(request, "capacity_type", None)  # GpuRequestQuerySet.with_capacity()

    def get_allocations(self, request) -> list[dict]:
        """Open segments: where the request runs now (only an active request holds any: DESIGN rule 1)."""
        if not request.is_active():
            return []
        return AllocationSerializer(
            [a for a in request.allocations.all() if a.ended_at is None], many=True
        ).data


class GpuRequestDetailSerializer(GpuRequestSerializer):
    segments = AllocationSerializer(source="allocations", many=True)
    events = serializers.SerializerMethodField()

    class Meta(GpuRequestSerializer.Meta):
        fields = [*GpuRequestSerializer.Meta.fields, "segments", "events"]

    def get_events(self, request) -> list[dict]:
        return EventSerializer(self.context["events"], many=True).data


class SubmitSerializer(FieldsBuiltOnce, serializers.Serializer):
    """What a user may ask for; `team` may be left out by members of one team only."""

    team = StrictSlugField(required=False, help_text="Team slug; optional when you are in one team.")
    name = StrictCharField(min_length=1, max_length=100)
    task_type = StrictChoiceField(choices=TaskType.choices, default=TaskType.TRAINING)
    gpu_milli = StrictIntegerField(min_value=1, max_value=MILLI_PER_GPU, help_text="Per card, 1..1000.")
    num_gpus = StrictIntegerField(min_value=1, max_value=MAX_GPUS_PER_REQUEST, default=1)
    pool = StrictSlugField(required=False, allow_blank=True, default="")
    gpu_model = StrictCharField(max_length=64, required=False, allow_blank=True, default="")
    gpu_memory_mib = StrictIntegerField(min_value=1, max_value=2**31 - 1, required=False, allow_null=True)
    cpu_milli = StrictIntegerField(min_value=0, max_value=2**31 - 1, default=1000)
    memory_mib = StrictIntegerField(min_value=0, max_value=2**31 - 1, default=4096)
    billing_mode = StrictChoiceField(choices=BillingMode.choices, default=BillingMode.ON_DEMAND)
    allow_on_demand_fallback = StrictBooleanField(default=False)
    checkpoint_interval_s = StrictIntegerField(
        min_value=1, max_value=2**31 - 1, required=False, allow_null=True
    )
    pinned = StrictBooleanField(
        default=False, help_text="Never move it to make room for other work (consolidation)."
    )
    priority = StrictIntegerField(min_value=-100, max_value=100, default=0)
    max_duration_s = StrictIntegerField(min_value=1, max_value=2**31 - 1, required=False, allow_null=True)
    command = StrictCharField(required=False, allow_blank=True, default="", max_length=10_000)
    environment = EnvironmentField(required=False, default=dict)
    workload_key = StrictCharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=200,
        help_text="Groups runs of one workload for the share recommendation; empty: the command.",
    )


class SliceSerializer(serializers.Serializer):
    milli = serializers.IntegerField()
    label = serializers.CharField(help_text="The request's name, or 'other team' for work you may not see.")
    request_id = serializers.IntegerField(allow_null=True)
    mig_instance = serializers.CharField(help_text="On a MIG card: the GPU instance held, profile@start.")


class MigSegmentSerializer(serializers.Serializer):
    instance = serializers.CharField(help_text="profile@start memory slice; empty: slices no instance takes.")
    slots = serializers.IntegerField(help_text="Memory slices (of 8).")
    used = serializers.SerializerMethodField()

    def get_used(self, segment) -> bool:
        return segment.slice is not None


class GpuSerializer(serializers.Serializer):
    index = serializers.IntegerField(source="gpu.index")
    uuid = serializers.CharField(source="gpu.uuid")
    model = serializers.CharField(source="gpu.model")
    memory_mib = serializers.IntegerField(source="gpu.memory_mib")
    allocated_milli = serializers.IntegerField(source="used_milli")
    foreign_milli = serializers.IntegerField(
        source="gpu.foreign_milli",
        help_text="Held by work outside the portal (another user's, or work its cluster manager ran "
        "there), as the node's backend sees it: never planned on.",
    )
    slices = SliceSerializer(many=True)
    mig_layout = serializers.CharField(source="gpu.mig_layout", help_text="MIG instances; empty outside MIG.")
    mig = MigSegmentSerializer(many=True, source="mig_segments", help_text="The MIG layout, left to right.")


class NodeIsolationSerializer(serializers.Serializer):
    """How the node's agent runs jobs, as it reported when it last registered."""

    mode = serializers.ChoiceField(
        choices=IsolationMode.choices,
        help_text="isolated: each job as its own Unix identity, in its own cgroup; unisolated "
        "(--no-isolation): jobs run as the agent's own user, without limits; unknown: an agent that "
        "does not report it.",
    )
    namespaces = serializers.BooleanField(
        allow_null=True, help_text="Jobs get their own mount, PID, IPC and UTS namespaces; null: unknown."
    )
    cgroup = serializers.ChoiceField(
        choices=CgroupVersion.choices,
        allow_null=True,
        help_text="The cgroup hierarchy of each job's limits; none: no limits; null: unknown.",
    )


class NodeSerializer(serializers.Serializer):
    name = serializers.CharField(source="node.name")
    pool = serializers.CharField(source="node.pool.name")
    status = serializers.CharField(source="node.status")
    last_heartbeat_at = serializers.DateTimeField(source="node.last_heartbeat_at", allow_null=True)
    isolation = NodeIsolationSerializer(source="node.isolation")
    gpus = GpuSerializer(many=True)


class PoolSerializer(serializers.Serializer):
    name = serializers.CharField(source="pool.name")
    gpu_model = serializers.CharField(source="pool.gpu_model")
    capacity_type = serializers.CharField(source="pool.capacity_type")
    granularity_milli = serializers.IntegerField(source="pool.granularity_milli")
    capacity_milli = serializers.IntegerField(source="total_milli")
    allocated_milli = serializers.IntegerField()
    foreign_milli = serializers.IntegerField(help_text="Held by work outside the portal, on any node.")
    free_milli = serializers.IntegerField(
        help_text="Free on ready nodes only, less what the portal's slices and work outside the portal "
        "hold: what new work can use."
    )


class TeamQueueSerializer(serializers.Serializer):
    team = serializers.CharField(source="team.slug")
    pending = serializers.IntegerField()
    names = serializers.ListField(
        child=serializers.CharField(),
        allow_null=True,
        help_text="Pending request names; null for teams you are not in.",
    )


class ClusterSerializer(serializers.Serializer):
    """Capacity per pool and the queue per team (the whole cluster), then one page of nodes."""

    count = serializers.IntegerField(help_text="Nodes matching the filters.")
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    pools = PoolSerializer(many=True)
    queues = TeamQueueSerializer(many=True)
    results = NodeSerializer(many=True, help_text="This page's nodes, by name, with their cards and slices.")


class QuotaSerializer(serializers.Serializer):
    pool = serializers.CharField()
    guaranteed_milli = serializers.IntegerField()
    used_milli = serializers.IntegerField()
    borrowed_milli = serializers.IntegerField()


def _flat(detail, prefix: str = "") -> dict:
    """{"gpus": [{}, {"uuid": ["…"]}]} → {"gpus[1].uuid": ["…"]}: one field name per place."""
    if isinstance(detail, dict):
        out = {}
        for key, value in detail.items():
            if isinstance(key, int):  # DRF keys a list's item errors by index
                name = f"{prefix}[{key}]"
            elif key == "non_field_errors" and prefix:
                name = prefix
            else:
                name = f"{prefix}.{key}" if prefix else key
            out |= _flat(value, name)
        return out
    if isinstance(detail, list) and any(isinstance(item, dict | list) for item in detail):
        out = {}
        for index, item in enumerate(detail):
            if item:
                out |= _flat(item, f"{prefix}[{index}]")
        return out
    return {prefix or "non_field_errors": detail}


class FlatErrors:
    """Errors of nested items named by place: `gpus[1].uuid`."""

    def to_internal_value(self, data):
        try:
            return super().to_internal_value(data)
        except serializers.ValidationError as error:
            raise serializers.ValidationError(_flat(error.detail)) from None


class SetQuotaSerializer(serializers.Serializer):
    guaranteed_milli = StrictIntegerField(
        min_value=0, max_value=2**31 - 1, help_text="0 removes the guarantee."
    )


class OperatorNodeSerializer(serializers.ModelSerializer):
    pool = serializers.CharField(source="pool.name")
    gpu_count = serializers.IntegerField()
    allocated_milli = serializers.IntegerField(allow_null=True)
    mig_mode = serializers.CharField(source="pool.mig_mode", help_text='The pool\'s MIG mode; "" is off.')
    mig_layouts = serializers.SerializerMethodField(help_text="Each card's MIG layout, by card index.")
    isolation = NodeIsolationSerializer()

    def get_mig_layouts(self, node) -> list[str]:
        return [gpu.mig_layout for gpu in sorted(node.gpus.all(), key=lambda g: g.index)]

    class Meta:
        model = Node
        fields = [
            "id",
            "name",
            "pool",
            "status",
            "last_heartbeat_at",
            "cpu_milli",
            "memory_mib",
            "gpu_count",
            "allocated_milli",
            "mig_mode",
            "mig_layouts",
            "isolation",
        ]


class ReasonSerializer(serializers.Serializer):
    reason = StrictCharField(max_length=300, required=False, allow_blank=True, default="")


class ReclaimSerializer(serializers.Serializer):
    """An operator's reclaim of a spot node: its work checkpoints and stops by the deadline (given, not
    past, or `grace_s` from now; default RECLAIM_DEFAULT_GRACE_S)."""

    deadline = AwareDateTimeField(required=False)
    grace_s = StrictIntegerField(min_value=0, max_value=24 * 3600, required=False)
    notice_id = StrictCharField(max_length=200, required=False, allow_blank=True, default="")

    def validate(self, data):
        if "deadline" in data and "grace_s" in data:
            raise serializers.ValidationError({"grace_s": "Give a deadline or a grace period, not both."})
        if "deadline" not in data:
            grace = data.pop("grace_s", settings.RECLAIM_DEFAULT_GRACE_S)
            data["deadline"] = timezone.now() + dt.timedelta(seconds=grace)
        elif data["deadline"] < timezone.now():
            raise serializers.ValidationError(
                {
                    "deadline": "This deadline has passed: give a later one, or none for "
                    f"{settings.RECLAIM_DEFAULT_GRACE_S} s from now (grace_s: 0 reclaims at once)."
                }
            )
        return data


class PoolDetailSerializer(serializers.ModelSerializer):
    class Meta:
        model = Pool
        fields = [
            "name",
            "gpu_model",
            "capacity_type",
            "granularity_milli",
            "description",
            "mig_mode",
            "backend",
            "consolidation",
        ]
        read_only_fields = ["name", "gpu_model", "capacity_type", "backend"]


class PoolChangeSerializer(serializers.Serializer):
    granularity_milli = StrictIntegerField(min_value=1, max_value=MILLI_PER_GPU, required=False)
    description = StrictCharField(max_length=200, required=False, allow_blank=True)
    mig_mode = StrictChoiceField(
        choices=MigMode.choices, required=False, help_text='"" (off), "fixed" or "dynamic".'
    )
    consolidation = StrictBooleanField(
        required=False, help_text="Whether running jobs may be moved at a checkpoint to make room."
    )


class MigLayoutSerializer(serializers.Serializer):
    gpu_index = StrictIntegerField(min_value=0, help_text="The card's index on the node.")
    mig_layout = StrictCharField(
        max_length=200, allow_blank=True, help_text="e.g. 3g.40gb@0,2g.20gb@4,1g.10gb@6; empty: none."
    )


class WhatIfRunSerializer(serializers.ModelSerializer):
    """A what-if run: its scenario, status and progress (0..100); result once succeeded (see
    scheduler_app.whatif.replay.run), error once failed."""

    created_by = serializers.CharField(source="created_by.username", read_only=True)

    class Meta:
        model = WhatIfRun
        fields = [
            "id",
            "status",
            "progress",
            "scenario",
            "result",
            "error",
            "created_by",
            "created_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields

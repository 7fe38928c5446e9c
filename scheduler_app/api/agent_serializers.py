"""API shapes of the node agent's protocol (agent/ speaks it through the SDK's NodeClient). Types and
ranges only; scheduler_app.services.agents decides what is allowed."""

from rest_framework import serializers

from infra.api.fields import (
    AwareDateTimeField,
    StrictBooleanField,
    StrictCharField,
    StrictChoiceField,
    StrictIntegerField,
)
from scheduler_app.api.serializers import FlatErrors
from scheduler_app.choices import CgroupVersion, IsolationMode
from scheduler_app.constants import LOG_CHUNK_MAX_CHARS, MAX_GPUS_PER_NODE
from scheduler_app.services.agents import MIG_MODES


class CardSerializer(serializers.Serializer):
    """One card as NVML reports it."""

    uuid = StrictCharField(max_length=64, help_text="nvmlDeviceGetUUID")
    model = StrictCharField(max_length=64, help_text="nvmlDeviceGetName")
    memory_mib = StrictIntegerField(
        min_value=1, max_value=2**31 - 1, help_text="nvmlDeviceGetMemoryInfo().total in MiB"
    )
    mig_mode = StrictChoiceField(choices=MIG_MODES, help_text="nvmlDeviceGetMigMode (current)")


class IsolationSerializer(serializers.Serializer):
    """How the agent runs jobs: exactly these three keys."""

    mode = StrictChoiceField(
        choices=[IsolationMode.ISOLATED, IsolationMode.UNISOLATED],
        help_text="isolated: each job as its own Unix identity, in its own cgroup; unisolated: "
        "--no-isolation, jobs run as the agent's own user without limits.",
    )
    namespaces = StrictBooleanField(
        help_text="Jobs run in their own mount, PID, IPC and UTS namespaces (bubblewrap is present)."
    )
    cgroup = StrictChoiceField(
        choices=CgroupVersion.values, help_text="The cgroup hierarchy of each job's limits; none: no limits."
    )

    def to_internal_value(self, data):
        if isinstance(data, dict) and not set(data) <= set(self.fields):
            raise serializers.ValidationError("Give exactly mode, namespaces and cgroup; nothing else.")
        return super().to_internal_value(data)


class RegisterSerializer(FlatErrors, serializers.Serializer):
    gpus = CardSerializer(many=True, max_length=MAX_GPUS_PER_NODE)
    isolation = IsolationSerializer(
        required=False, help_text="How the agent isolates jobs; omitted (an older agent): unknown."
    )


class RegisteredSerializer(serializers.Serializer):
    node = serializers.CharField()
    node_status = serializers.CharField()
    added = serializers.ListField(child=serializers.CharField())
    updated = serializers.ListField(child=serializers.CharField())
    missing = serializers.ListField(
        child=serializers.CharField(), help_text="Known cards NVML did not report."
    )
    cards = serializers.ListField(
        child=serializers.CharField(allow_blank=True),
        help_text="For each reported card, in order, the UUID to report its readings under: its own; on a "
        "Slurm node, that of Slurm's card of the same index (empty: Slurm has no such card).",
    )


class HeartbeatSerializer(serializers.Serializer):
    node = serializers.CharField()
    node_status = serializers.CharField()


class WorkCardSerializer(serializers.Serializer):
    uuid = serializers.CharField()
    milli = serializers.IntegerField(help_text="The slice of this card, in milli-GPU.")
    memory_mib = serializers.IntegerField(help_text="GPU memory the slice may use, in MiB.")
    mig_instance = serializers.CharField(
        allow_blank=True, help_text="On a MIG card: the GPU instance held whole (profile@start); else empty."
    )


class WorkSerializer(serializers.Serializer):
    request_id = serializers.IntegerField()
    name = serializers.CharField()
    team = serializers.CharField()
    state = serializers.CharField()
    generation = serializers.IntegerField(
        help_text="The run's fencing generation: report it back; a report of another run changes nothing."
    )
    task_type = serializers.CharField()
    command = serializers.CharField(allow_blank=True)
    checkpoint_dir = serializers.CharField()
    last_checkpoint_at = serializers.DateTimeField(allow_null=True, help_text="The last checkpoint reported.")
    stop_by = serializers.DateTimeField(
        allow_null=True,
        help_text="Set while the request is being moved: SIGTERM the job now, SIGKILL it at this time.",
    )
    log_offset = serializers.IntegerField(
        help_text="Where the stored log ends: a restarted job's output goes on there."
    )
    environment = serializers.DictField(
        child=serializers.CharField(),
        help_text="Variables the job gets, NAME -> value: its team's secrets and the request's own "
        "variables (these win over a secret of the same name). Secret values: never log them.",
    )
    user = serializers.CharField(help_text="The username of who submitted it.")
    unix_account = serializers.CharField(
        allow_blank=True,
        help_text="The existing Unix account to run the job as (the user's mapping, else the team's); "
        "empty: the agent's own identity for the team (gpp-<team>).",
    )
    cpu_milli = serializers.IntegerField(help_text="Host CPU for the job's cgroup, in milli-cores.")
    memory_mib = serializers.IntegerField(help_text="Host memory limit for the job's cgroup, in MiB.")
    gpus = WorkCardSerializer(many=True)


GENERATION_HELP = "The run's generation from the work list; omitted: whatever run is placed here."


class StartedSerializer(serializers.Serializer):
    generation = StrictIntegerField(
        min_value=0, required=False, allow_null=True, default=None, help_text=GENERATION_HELP
    )
    resumed_from = AwareDateTimeField(
        required=False,
        allow_null=True,
        default=None,
        help_text="The checkpoint the run found when it started (the marker file's mtime); null: none.",
    )


class CheckpointedSerializer(serializers.Serializer):
    at = AwareDateTimeField(help_text="When the job checkpointed (the marker file's mtime, with timezone).")
    ref = StrictCharField(
        max_length=500,
        required=False,
        default="",
        help_text="Where the data is; default: the checkpoint dir.",
    )
    generation = StrictIntegerField(
        min_value=0, required=False, allow_null=True, default=None, help_text=GENERATION_HELP
    )


class CheckpointAnswerSerializer(serializers.Serializer):
    request_id = serializers.IntegerField()
    state = serializers.CharField()
    last_checkpoint_at = serializers.DateTimeField(allow_null=True)


class ReclaimNoticeSerializer(serializers.Serializer):
    deadline = AwareDateTimeField(help_text="When the provider takes the node back.")
    source = StrictCharField(max_length=32, help_text="Who sent the notice: aws, gcp, azure, ...")
    notice_id = StrictCharField(max_length=200, required=False, default="", help_text="The provider's id.")


class ReclaimAnswerSerializer(serializers.Serializer):
    node = serializers.CharField()
    node_status = serializers.CharField()
    stopping = serializers.IntegerField(help_text="Requests told to checkpoint and stop by this notice.")


class FinishedSerializer(serializers.Serializer):
    exit_code = StrictIntegerField(help_text="The exit status; negative: killed by that signal.")
    generation = StrictIntegerField(
        min_value=0, required=False, allow_null=True, default=None, help_text=GENERATION_HELP
    )
    stopped_at = AwareDateTimeField(
        required=False, allow_null=True, default=None, help_text="When the process ended; null: now."
    )
    host_memory_exceeded_mib = StrictIntegerField(
        min_value=1,
        max_value=2**31 - 1,
        required=False,
        allow_null=True,
        default=None,
        help_text="Its cgroup's memory limit killed it: the limit enforced, in MiB. The request fails "
        "saying so, whatever the exit status.",
    )


class LogChunkSerializer(serializers.Serializer):
    offset = StrictIntegerField(min_value=0, help_text="Character offset of `text` in the job's output.")
    text = StrictCharField(max_length=LOG_CHUNK_MAX_CHARS, trim_whitespace=False)


class MemoryExceededSerializer(serializers.Serializer):
    uuid = StrictCharField(max_length=64)
    used_mib = StrictIntegerField(min_value=0)
    limit_mib = StrictIntegerField(min_value=0)


class ReportAnswerSerializer(serializers.Serializer):
    request_id = serializers.IntegerField()
    state = serializers.CharField(help_text="The request's state after the report.")


class LogAnswerSerializer(serializers.Serializer):
    end = serializers.IntegerField(help_text="The stored log's end offset.")


class LogTailSerializer(serializers.Serializer):
    start = serializers.IntegerField()
    end = serializers.IntegerField(help_text="Ask for what lies past this offset next (?after=end).")
    text = serializers.CharField(allow_blank=True)
    state = serializers.CharField()
    exit_code = serializers.IntegerField(allow_null=True)


class LogQuerySerializer(serializers.Serializer):
    after = serializers.IntegerField(min_value=0, default=0)

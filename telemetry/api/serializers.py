"""API shapes for telemetry: the node agents' sample batches and usage reports, a request's utilization,
and series over a time range. Serializers only check types and ranges; the services decide what is allowed."""

import datetime as dt

from django.utils import timezone
from rest_framework import serializers

from infra.api.fields import AwareDateTimeField, StrictCharField, StrictIntegerField
from scheduler_app.api.serializers import FlatErrors
from scheduler_app.choices import RequestState
from scheduler_app.constants import (
    MAX_GPUS_PER_NODE,
    MAX_GPUS_PER_SAMPLE_BATCH,
    MAX_MOMENTS_PER_SAMPLE_BATCH,
    MAX_NETWORK_BYTES_PER_S,
    MAX_POWER_MW,
    MAX_TEMPERATURE_C,
    TELEMETRY_MAX_RANGE_S,
)
from telemetry.models import GpuSample


class GpuReadingSerializer(serializers.Serializer):
    """One card's reading, in NVML's units."""

    uuid = StrictCharField(max_length=64, help_text="The card's UUID (nvmlDeviceGetUUID).")
    gpu_util_percent = StrictIntegerField(
        min_value=0, max_value=100, help_text="nvmlDeviceGetUtilizationRates().gpu"
    )
    memory_used_mib = StrictIntegerField(
        min_value=0, max_value=2**31 - 1, help_text="nvmlDeviceGetMemoryInfo().used in MiB"
    )
    power_mw = StrictIntegerField(
        min_value=0, max_value=MAX_POWER_MW, help_text="Milliwatts (nvmlDeviceGetPowerUsage)."
    )
    temperature_c = StrictIntegerField(
        min_value=0, max_value=MAX_TEMPERATURE_C, help_text="°C (nvmlDeviceGetTemperature, GPU sensor)."
    )


class SampleBatchSerializer(FlatErrors, serializers.Serializer):
    """The node's cards read at one moment. Errors name each place: `gpus[1].uuid`."""

    sampled_at = AwareDateTimeField(help_text="When the agent read the cards (node clock, with timezone).")
    gpus = GpuReadingSerializer(many=True, max_length=MAX_GPUS_PER_SAMPLE_BATCH)
    network_bytes_per_s = StrictIntegerField(
        required=False,
        min_value=0,
        max_value=MAX_NETWORK_BYTES_PER_S,
        help_text="Optional: the node's network throughput at that moment, bytes/s received + sent (psutil).",
    )


class SampleMomentsSerializer(FlatErrors, serializers.Serializer):
    """Several moments of one node in one request (an agent sending a few seconds at once, or catching
    up): errors name `moments[0].gpus[1].uuid`."""

    moments = SampleBatchSerializer(many=True, min_length=1, max_length=MAX_MOMENTS_PER_SAMPLE_BATCH)


class SampleBatchAcceptedSerializer(serializers.Serializer):
    accepted = serializers.IntegerField(
        help_text="Readings in the batch; a batch sent again stores nothing new."
    )
    node = serializers.CharField()
    node_status = serializers.CharField(help_text="The node's status after this heartbeat.")


class HostReadingSerializer(serializers.Serializer):
    cpu_percent = StrictIntegerField(min_value=0, max_value=100, help_text="psutil.cpu_percent, whole %.")
    net_rx_bytes_per_s = StrictIntegerField(min_value=0, max_value=2**62, help_text="Received, bytes/s.")
    net_tx_bytes_per_s = StrictIntegerField(min_value=0, max_value=2**62, help_text="Sent, bytes/s.")


class SliceReadingSerializer(serializers.Serializer):
    """A job's own processes on one of its cards (nvmlDeviceGetComputeRunningProcesses and
    nvmlDeviceGetProcessUtilization, summed over the job's processes)."""

    request_id = StrictIntegerField(min_value=1)
    uuid = StrictCharField(max_length=64)
    memory_used_mib = StrictIntegerField(min_value=0, max_value=2**31 - 1)
    sm_util_percent = StrictIntegerField(min_value=0, max_value=100, allow_null=True)


class UsageSerializer(FlatErrors, serializers.Serializer):
    sampled_at = AwareDateTimeField(help_text="When the agent read them (node clock, with timezone).")
    host = HostReadingSerializer()
    slices = SliceReadingSerializer(many=True, max_length=MAX_GPUS_PER_NODE * 8)


class UsageAcceptedSerializer(serializers.Serializer):
    accepted = serializers.IntegerField(help_text="Slice readings in the report.")


class TelemetryRangeSerializer(serializers.Serializer):
    """?start=&end= (ISO 8601 with a timezone): by default the subject's own range where it has one (the
    context's `default`: a request's life), else the last hour; at most TELEMETRY_MAX_RANGE_S."""

    start = AwareDateTimeField(required=False, help_text="Default: an hour before `end`.")
    end = AwareDateTimeField(required=False, help_text="Default: now.")

    def validate(self, data):
        own_start, own_end = self.context.get("default") or (None, None)
        end = data.get("end") or own_end or timezone.now()
        start = data.get("start")
        if start is None:
            start = own_start if own_start is not None and own_start < end else end - dt.timedelta(hours=1)
            start = max(start, end - dt.timedelta(seconds=TELEMETRY_MAX_RANGE_S))  # a long life: its end
        if start >= end:
            raise serializers.ValidationError({"start": "Give a start before the end."})
        if (end - start).total_seconds() > TELEMETRY_MAX_RANGE_S:
            raise serializers.ValidationError(
                {"start": f"Ask for at most {TELEMETRY_MAX_RANGE_S // 86400} days."}
            )
        return {"start": start, "end": end}


class TelemetryPointSerializer(serializers.Serializer):
    at = serializers.DateTimeField(help_text="Start of the bucket (the sample's time at raw resolution).")
    samples = serializers.IntegerField()
    util_mean = serializers.FloatField(help_text="GPU utilization, %.")
    util_stddev = serializers.FloatField(help_text="Population standard deviation within the bucket, %.")
    util_min = serializers.IntegerField()
    util_max = serializers.IntegerField()
    memory_mean_mib = serializers.FloatField()
    memory_max_mib = serializers.IntegerField()
    power_mean_w = serializers.FloatField()
    temperature_mean_c = serializers.FloatField()


class ShareSeriesPointSerializer(serializers.Serializer):
    at = serializers.DateTimeField(help_text="Start of the bucket.")
    cards = serializers.IntegerField(help_text="Cards that reported in the bucket.")
    held_gpus = serializers.FloatField(help_text="GPUs held (shares summed: 0.5 = half a card).")
    busy_gpus = serializers.FloatField(help_text="Held GPUs times their cards' mean utilization.")
    util_percent = serializers.FloatField(help_text="busy / held, %.")
    memory_used_mib = serializers.FloatField(help_text="Cards' mean memory used, weighted by share.")


class SegmentSeriesSerializer(serializers.Serializer):
    allocation = serializers.IntegerField(source="segment.pk", help_text="The segment's id.")
    node = serializers.CharField(source="segment.gpu.node.name")
    gpu_index = serializers.IntegerField(source="segment.gpu.index")
    gpu_uuid = serializers.CharField(source="segment.gpu.uuid")
    milli = serializers.IntegerField(source="segment.milli")
    memory_mib = serializers.IntegerField(source="segment.gpu.memory_mib", help_text="The card's memory.")
    started_at = serializers.DateTimeField(source="segment.started_at")
    ended_at = serializers.DateTimeField(source="segment.ended_at", allow_null=True)
    points = TelemetryPointSerializer(
        many=True, help_text="The whole card's readings while the request held it."
    )


# The range and resolution of an answer of card readings; each answer adds its series. A comment, not a
# docstring: the schema would give a docstring to each answer as its description.
class _CardReadingsSerializer(serializers.Serializer):
    resolution_s = serializers.IntegerField(help_text="Seconds per bucket: 1 (raw samples), 60 or 3600.")
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()


class RequestTelemetrySerializer(_CardReadingsSerializer):
    cards = SegmentSeriesSerializer(many=True)


class GpuTelemetrySerializer(_CardReadingsSerializer):
    points = TelemetryPointSerializer(many=True)


class ShareTelemetrySerializer(serializers.Serializer):
    resolution_s = serializers.IntegerField(help_text="Seconds per bucket: 60 or 3600.")
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    points = ShareSeriesPointSerializer(many=True)


class SampleSerializer(serializers.ModelSerializer):
    class Meta:
        model = GpuSample
        fields = ["sampled_at", "gpu_util_percent", "memory_used_mib", "power_mw", "temperature_c"]


class UtilizationPointSerializer(serializers.Serializer):
    at = serializers.DateTimeField(help_text="Start of the bucket.")
    samples = serializers.IntegerField()
    gpu_util_percent = serializers.FloatField(help_text="Mean over the bucket's samples.")
    memory_used_mib = serializers.IntegerField()
    power_mw = serializers.IntegerField()
    temperature_c = serializers.IntegerField()


class UtilizationSummarySerializer(serializers.Serializer):
    samples = serializers.IntegerField()
    mean_util_percent = serializers.FloatField(allow_null=True)
    util_stddev_percent = serializers.FloatField(allow_null=True, help_text="Population std-dev.")
    util_stddev_target_percent = serializers.IntegerField()
    util_steady = serializers.BooleanField(
        allow_null=True, help_text="Std-dev under the target; null without samples."
    )


class CardUtilizationSerializer(serializers.Serializer):
    node = serializers.CharField(source="segment.gpu.node.name")
    gpu_index = serializers.IntegerField(source="segment.gpu.index")
    gpu_uuid = serializers.CharField(source="segment.gpu.uuid")
    milli = serializers.IntegerField(source="segment.milli", help_text="The request's share of this card.")
    memory_mib = serializers.IntegerField(source="segment.gpu.memory_mib", help_text="The card's memory.")
    allocation = serializers.IntegerField(source="segment.pk", help_text="The segment's id.")
    started_at = serializers.DateTimeField(source="segment.started_at", help_text="When the slice began.")
    ended_at = serializers.DateTimeField(
        source="segment.ended_at", allow_null=True, help_text="When it ended; null while it is held."
    )
    window_start = serializers.DateTimeField(
        help_text="What series and summary cover starts here: the slice's start, or window_s before its end."
    )
    window_s = serializers.IntegerField(
        help_text="Seconds they cover, up to the slice's end (now while held): at most the last 15 minutes."
    )
    latest = SampleSerializer(
        allow_null=True,
        help_text="The card's latest sample while the slice held it, however old; null if none.",
    )
    series = UtilizationPointSerializer(many=True)
    summary = UtilizationSummarySerializer()


class CurrentLoadSerializer(serializers.Serializer):
    window_s = serializers.IntegerField(help_text="The last this many seconds.")
    cards_read = serializers.IntegerField(help_text="Cards with readings in that window.")
    gpu_util_percent = serializers.FloatField(
        allow_null=True, help_text="Mean over those cards of each card's mean util; null if none was read."
    )
    mem_util_percent = serializers.FloatField(
        allow_null=True, help_text="Mean over those cards of memory used as % of the card's memory."
    )


class UtilizationSerializer(serializers.Serializer):
    """Whole-card readings (every slice on the card counts) for each segment of the request (its slice on
    one card), within the segment's own time range: never a reading from before it started."""

    request_id = serializers.IntegerField(source="request.pk")
    state = serializers.ChoiceField(source="request.state", choices=RequestState.choices)
    generated_at = serializers.DateTimeField()
    window_start = serializers.DateTimeField(help_text="The earliest of the segments' window starts.")
    window_s = serializers.IntegerField(help_text="Seconds from window_start to the last segment's end.")
    gpus = CardUtilizationSerializer(source="cards", many=True)
    current = CurrentLoadSerializer(help_text="How busy the request's cards are now (the last minute).")

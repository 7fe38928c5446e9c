"""Telemetry from the node agents: card, host and per-slice readings, and the cards' rollups.

Units: util in whole percent, memory in MiB, power in milliwatts, temperature in °C, network in
bytes per second, times aware UTC. The tables keep the names they had in scheduler_app (db_table):
moving the models here changed no table.
"""

from django.db import models
from django.db.models import Q
from django.utils import timezone

from scheduler_app.constants import MAX_POWER_MW, MAX_TEMPERATURE_C


class GpuSample(models.Model):
    """One agent reading of a card: util 0..100 %, memory used in MiB, power in milliwatts, temperature °C.

    sampled_at is the node's clock (aware UTC), received_at the portal's. At most
    one row per card and sampled_at, so an agent may resend a batch safely.
    """

    gpu = models.ForeignKey("scheduler_app.Gpu", on_delete=models.CASCADE, related_name="samples")
    sampled_at = models.DateTimeField()
    gpu_util_percent = models.PositiveSmallIntegerField()
    memory_used_mib = models.PositiveIntegerField()
    power_mw = models.PositiveIntegerField(help_text="Milliwatts, as NVML reports them.")
    temperature_c = models.SmallIntegerField()
    received_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "scheduler_app_gpusample"
        ordering = ["gpu", "sampled_at"]
        # The unique constraint's index on (gpu, sampled_at) serves every card's reads: its recent
        # window and its latest sample. The sampled_at index serves the rollup's time range and pruning.
        indexes = [models.Index(fields=["sampled_at"], name="gpusample_sampled_at")]
        constraints = [
            models.UniqueConstraint(fields=["gpu", "sampled_at"], name="gpusample_one_per_gpu_and_time"),
            models.CheckConstraint(
                condition=Q(gpu_util_percent__gte=0, gpu_util_percent__lte=100),
                name="gpusample_util_0_to_100",
            ),
            models.CheckConstraint(condition=Q(memory_used_mib__gte=0), name="gpusample_memory_not_negative"),
            models.CheckConstraint(
                condition=Q(power_mw__gte=0, power_mw__lte=MAX_POWER_MW), name="gpusample_power_range"
            ),
            models.CheckConstraint(
                condition=Q(temperature_c__gte=0, temperature_c__lte=MAX_TEMPERATURE_C),
                name="gpusample_temperature_range",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.gpu} at {self.sampled_at:%Y-%m-%d %H:%M:%S}: {self.gpu_util_percent} %"


class NodeSample(models.Model):
    """A node's host at one moment, as its agent read it (psutil): CPU busy in whole percent, network
    throughput in bytes per second received and sent, and their sum (`network_bytes_per_s`, what the
    slow-network check reads; an agent may report only that, with its card readings). One row per
    node and sampled_at, like GpuSample; kept as long as raw GPU samples."""

    node = models.ForeignKey("scheduler_app.Node", on_delete=models.CASCADE, related_name="samples")
    sampled_at = models.DateTimeField()
    cpu_percent = models.PositiveSmallIntegerField(null=True, blank=True)
    net_rx_bytes_per_s = models.PositiveBigIntegerField(null=True, blank=True)
    net_tx_bytes_per_s = models.PositiveBigIntegerField(null=True, blank=True)
    network_bytes_per_s = models.PositiveBigIntegerField(null=True, blank=True)
    received_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "scheduler_app_nodesample"
        ordering = ["node", "sampled_at"]
        constraints = [
            models.UniqueConstraint(fields=["node", "sampled_at"], name="nodesample_one_per_node_and_time"),
            models.CheckConstraint(condition=Q(cpu_percent__lte=100), name="nodesample_cpu_0_to_100"),
        ]

    def __str__(self) -> str:
        return f"{self.node} at {self.sampled_at:%Y-%m-%d %H:%M:%S}"


class AllocationSample(models.Model):
    """One slice's own use of its card at one moment: the GPU memory (MiB) and SM utilization (whole %,
    null when NVML had no sample) of its job's processes there, as the node's agent attributed them."""

    allocation = models.ForeignKey(
        "scheduler_app.Allocation", on_delete=models.CASCADE, related_name="samples"
    )
    sampled_at = models.DateTimeField()
    memory_used_mib = models.PositiveIntegerField()
    sm_util_percent = models.PositiveSmallIntegerField(null=True, blank=True)
    received_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "scheduler_app_allocationsample"
        ordering = ["allocation", "sampled_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["allocation", "sampled_at"], name="allocationsample_one_per_slice_and_time"
            ),
            models.CheckConstraint(
                condition=Q(sm_util_percent__isnull=True) | Q(sm_util_percent__lte=100),
                name="allocationsample_util_0_to_100",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.allocation} at {self.sampled_at:%Y-%m-%d %H:%M:%S}"


class GpuRollup(models.Model):
    """A card's samples in one bucket of `resolution_s` seconds (60 or 3600) from bucket_start, as sums:

    mean = sum / samples, population variance = sum_sq / samples - mean². Util in %, memory in MiB,
    power in mW, temperature in °C. Recomputed whole from the finer data, so a rerun writes the same row.
    """

    gpu = models.ForeignKey("scheduler_app.Gpu", on_delete=models.CASCADE, related_name="rollups")
    resolution_s = models.PositiveIntegerField()
    bucket_start = models.DateTimeField()
    samples = models.PositiveIntegerField()
    util_sum = models.BigIntegerField()
    util_sq_sum = models.BigIntegerField()
    util_min = models.PositiveSmallIntegerField()
    util_max = models.PositiveSmallIntegerField()
    memory_sum = models.BigIntegerField()
    memory_sq_sum = models.BigIntegerField()
    memory_min = models.PositiveIntegerField()
    memory_max = models.PositiveIntegerField()
    power_sum = models.BigIntegerField()
    temperature_sum = models.BigIntegerField()

    class Meta:
        db_table = "scheduler_app_gpurollup"
        ordering = ["gpu", "resolution_s", "bucket_start"]
        constraints = [
            models.UniqueConstraint(
                fields=["gpu", "resolution_s", "bucket_start"], name="gpurollup_one_per_gpu_bucket"
            ),
            models.CheckConstraint(condition=Q(samples__gt=0), name="gpurollup_not_empty"),
        ]
        indexes = [models.Index(fields=["resolution_s", "bucket_start"])]

    def __str__(self) -> str:
        return f"{self.gpu} {self.resolution_s}s bucket at {self.bucket_start:%Y-%m-%d %H:%M}"

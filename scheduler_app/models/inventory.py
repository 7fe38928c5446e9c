"""Cluster inventory: pools, nodes, their cards, and the teams' guaranteed shares of pools.

Units: GPU share in milli-GPU (1..1000 per card), memory in MiB, CPU in milli-cores, times aware UTC.
"""

import re

from django.db import models
from django.db.models import F, Q, Sum

from scheduler_app.choices import (
    Backend,
    CapacityType,
    CgroupVersion,
    IsolationMode,
    MigMode,
    NodeStatus,
)
from scheduler_app.constants import (
    DEFAULT_GRANULARITY_MILLI,
    MILLI_PER_GPU,
)
from scheduler_app.core.mig import card_instances


class Pool(models.Model):
    """A set of nodes with one GPU model and capacity type; shares are cut in granularity_milli steps."""

    name = models.SlugField(max_length=64, unique=True)
    gpu_model = models.CharField(max_length=64)
    capacity_type = models.CharField(
        max_length=16, choices=CapacityType.choices, default=CapacityType.ON_DEMAND
    )
    granularity_milli = models.PositiveIntegerField(default=DEFAULT_GRANULARITY_MILLI)
    description = models.CharField(max_length=200, blank=True)
    mig_mode = models.CharField(
        max_length=16,
        choices=MigMode.choices,
        blank=True,
        default=MigMode.OFF,
        help_text="MIG: work gets whole GPU instances within the cards' geometry (core/mig.py).",
    )
    consolidation = models.BooleanField(
        default=True,
        help_text="Running jobs with a checkpoint interval may be moved at their next checkpoint to make "
        "room for a request the scattered free share cannot hold.",
    )
    backend = models.CharField(
        max_length=16,
        choices=Backend.choices,
        default=Backend.AGENT,
        help_text="Who runs the work on its nodes: their agents, or Slurm (the pool's Slurm connection).",
    )

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(granularity_milli__gte=1, granularity_milli__lte=MILLI_PER_GPU),
                name="pool_granularity_1_to_1000",
            ),
            models.CheckConstraint(
                condition=Q(capacity_type__in=CapacityType.values), name="pool_capacity_valid"
            ),
            models.CheckConstraint(condition=Q(mig_mode__in=MigMode.values), name="pool_mig_mode_valid"),
            models.CheckConstraint(condition=Q(backend__in=Backend.values), name="pool_backend_valid"),
        ]

    def __str__(self) -> str:
        return self.name

    def is_spot(self) -> bool:
        return self.capacity_type == CapacityType.SPOT

    def extra_description(self) -> str:
        """The description, unless it only repeats the GPU model and capacity type that pages show
        beside it anyway ("A100-80GB on-demand"): then ""."""

        def words(text: str) -> set[str]:
            return set(re.findall(r"[a-z0-9]+", text.lower()))

        said = words(f"{self.gpu_model} {self.capacity_type} {self.get_capacity_type_display()}")
        return "" if words(self.description) <= said else self.description


class Node(models.Model):
    """A GPU host in a pool; CPU in milli-cores, memory in MiB; the agent credential is kept hashed.

    `isolation_*` is how its agent runs jobs, as it last reported at registration (unknown: an agent
    that does not report it; namespaces null and cgroup blank then)."""

    name = models.CharField(max_length=128, unique=True)
    pool = models.ForeignKey(Pool, on_delete=models.PROTECT, related_name="nodes")
    status = models.CharField(max_length=16, choices=NodeStatus.choices, default=NodeStatus.READY)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    cpu_milli = models.PositiveIntegerField()
    memory_mib = models.PositiveBigIntegerField()
    agent_token_hash = models.CharField(max_length=64, blank=True, db_index=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    reclaim_notice_id = models.CharField(
        max_length=200,
        blank=True,
        help_text="The reclaim notice being served: the same notice again is a no-op.",
    )
    reclaim_deadline = models.DateTimeField(null=True, blank=True)
    isolation_mode = models.CharField(
        max_length=16, choices=IsolationMode.choices, default=IsolationMode.UNKNOWN, editable=False
    )
    isolation_namespaces = models.BooleanField(
        null=True, editable=False, help_text="Jobs get mount, PID, IPC and UTS namespaces (bubblewrap)."
    )
    isolation_cgroup = models.CharField(
        max_length=8, choices=CgroupVersion.choices, blank=True, editable=False
    )
    foreign_cpu_milli = models.PositiveIntegerField(
        default=0, editable=False, help_text="Held by work outside the portal, as the node's backend sees it."
    )
    foreign_memory_mib = models.PositiveBigIntegerField(
        default=0, editable=False, help_text="Held by work outside the portal, as the node's backend sees it."
    )

    class Meta:
        ordering = ["pool__name", "name"]
        constraints = [
            models.CheckConstraint(condition=Q(status__in=NodeStatus.values), name="node_status_valid"),
            models.CheckConstraint(
                condition=Q(isolation_mode__in=IsolationMode.values), name="node_isolation_mode_valid"
            ),
            models.CheckConstraint(
                condition=Q(isolation_cgroup__in=[*CgroupVersion.values, ""]),
                name="node_isolation_cgroup_valid",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def is_schedulable(self) -> bool:
        return self.status == NodeStatus.READY

    def isolation(self) -> dict:
        """As the agent reported it: {mode, namespaces, cgroup}; null namespaces and cgroup when unknown."""
        return {
            "mode": self.isolation_mode,
            "namespaces": self.isolation_namespaces,
            "cgroup": self.isolation_cgroup or None,
        }

    def isolation_label(self) -> str:
        """What the isolation means for a job here, in words, e.g. "isolated (cgroup v1, namespaces)"."""
        if self.isolation_mode == IsolationMode.UNISOLATED:
            return "unisolated: jobs run as the agent's own user, without limits (--no-isolation)"
        if self.isolation_mode == IsolationMode.UNKNOWN:
            return "unknown: the agent does not report it"
        has_cgroup = self.isolation_cgroup != CgroupVersion.NONE
        inside = [f"cgroup {self.isolation_cgroup}"] if has_cgroup else []
        inside += ["namespaces"] if self.isolation_namespaces else []
        missing = [] if self.isolation_namespaces else ["no namespaces (bubblewrap missing)"]
        missing += [] if has_cgroup else ["no cgroup: no CPU, memory or pids limits"]
        return "isolated" + (f" ({', '.join(inside)})" if inside else "") + "".join(f", {m}" for m in missing)

    def isolation_level(self) -> str:
        """For the pages' styling: "isolated", "partial" (isolated without namespaces or a cgroup),
        "unknown" or "unisolated"."""
        partial = not self.isolation_namespaces or self.isolation_cgroup == CgroupVersion.NONE
        if self.isolation_mode == IsolationMode.ISOLATED and partial:
            return "partial"
        return self.isolation_mode


class Gpu(models.Model):
    """One card of a node; memory in MiB."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=64, unique=True)
    model = models.CharField(max_length=64)
    memory_mib = models.PositiveIntegerField()
    mig_capable = models.BooleanField(default=False)
    mig_enabled = models.BooleanField(
        default=False, help_text="MIG mode on, as the node's agent last reported."
    )
    mig_layout = models.CharField(
        max_length=200,
        blank=True,
        help_text="In a MIG pool, the card's GPU instances, e.g. 3g.40gb@0,2g.20gb@4,1g.10gb@6 "
        "(profile@start memory slice). Fixed pools: set by operators; dynamic: by the scheduler.",
    )
    foreign_milli = models.PositiveIntegerField(
        default=0,
        editable=False,
        help_text="Held by work outside the portal (another user's, or one its backend ran), as the "
        "node's backend sees it: never planned on (services.inventory.record_foreign_use).",
    )
    foreign_memory_mib = models.PositiveIntegerField(
        default=0, editable=False, help_text="The GPU memory that outside work holds."
    )

    class Meta:
        ordering = ["node__name", "index"]
        constraints = [
            models.UniqueConstraint(fields=["node", "index"], name="gpu_unique_node_index"),
            models.CheckConstraint(condition=Q(memory_mib__gt=0), name="gpu_memory_positive"),
            models.CheckConstraint(
                condition=Q(foreign_milli__lte=MILLI_PER_GPU, foreign_memory_mib__lte=F("memory_mib")),
                name="gpu_foreign_within_card",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.node.name}/gpu{self.index}"

    def committed(self) -> tuple[int, int]:
        """(milli, memory MiB) held by this card's open allocation segments."""
        totals = self.allocations.committed().aggregate(milli=Sum("milli"), mem=Sum("gpu_memory_mib"))
        return totals["milli"] or 0, totals["mem"] or 0

    def free_milli(self) -> int:
        """What new work may still take: neither the portal's open slices nor outside work hold it."""
        return MILLI_PER_GPU - self.committed()[0] - self.foreign_milli

    def mig_instances(self) -> list:
        """The card's MIG layout as core instances (empty outside MIG pools); LayoutError when invalid."""
        return card_instances(self.mig_layout, self.memory_mib)


class TeamQuota(models.Model):
    """A team's guaranteed share of a pool in milli-GPU; use above it is borrowed and preemptible."""

    team = models.ForeignKey("teams.Team", on_delete=models.CASCADE, related_name="quotas")
    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="quotas")
    guaranteed_milli = models.PositiveIntegerField()

    class Meta:
        ordering = ["team__name", "pool__name"]
        constraints = [models.UniqueConstraint(fields=["team", "pool"], name="quota_unique_team_pool")]

    def __str__(self) -> str:
        return f"{self.team} on {self.pool}: {self.guaranteed_milli} milli-GPU"

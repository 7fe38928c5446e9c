"""GPU requests, their allocations (a request's slices of cards over time) and their job output.

Units: GPU share in milli-GPU (1..1000 per card), memory in MiB, CPU in milli-cores, durations in
seconds, times aware UTC.
"""

import signal
from datetime import datetime

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import connections, models
from django.db.models import OuterRef, Q, Subquery, Sum
from django.utils import timezone

from infra.bulk_insert import update_rows
from scheduler_app.choices import (
    BillingMode,
    RequestState,
    TaskType,
)
from scheduler_app.constants import (
    MAX_GPUS_PER_REQUEST,
    MILLI_PER_GPU,
)
from scheduler_app.core.shares import share_label
from scheduler_app.models.inventory import Gpu, Node, Pool
from scheduler_app.rules.lifecycle import ACTIVE_STATES, TERMINAL_STATES


class GpuRequestQuerySet(models.QuerySet):
    def with_capacity(self) -> "GpuRequestQuerySet":
        """Annotate `capacity_type`: the capacity type (spot, on-demand) of the pool its latest segment is
        on, the cards that run the work or last ran it (None before it first ran); what
        GpuRequest.billing_label reads. A subquery per row, in the same query."""
        latest = Allocation.objects.filter(request=OuterRef("pk")).order_by("-started_at", "-id")
        return self.annotate(capacity_type=Subquery(latest.values("gpu__node__pool__capacity_type")[:1]))

    def save_fields(self, rows: list["GpuRequest"], fields: list[str]) -> None:
        """Write these fields of these rows (already validated and locked by the caller) in one
        statement (`infra.bulk_insert.update_rows`): a busy pass rewrites ~15,000 waiting reasons."""
        update_rows(self.model, rows, fields, using=self.db)

    def explain_pending(self, reasons: dict[int, tuple[str, datetime | None]]) -> None:
        """Set {id: (pending reason, estimated start)} on those of these requests still pending whose
        values differ; a row another writer holds is skipped, not waited for (the next pass explains it
        again). On PostgreSQL one statement (a pass explains ~15,000 waiting requests on a busy
        cluster), which only reads and locks the rows it changes; elsewhere read, compare, write."""
        reasons = {pk: (reason[:300], estimate) for pk, (reason, estimate) in reasons.items()}
        connection = connections[self.db]
        if connection.vendor != "postgresql":
            rows = (
                self.select_for_update(skip_locked=True)
                .filter(pk__in=reasons, state=RequestState.PENDING)
                .order_by("pk")
                .only("state", "pending_reason", "estimated_start_at")
            )
            changed = [r for r in rows if (r.pending_reason, r.estimated_start_at) != reasons[r.pk]]
            for request in changed:
                request.pending_reason, request.estimated_start_at = reasons[request.pk]
            self.save_fields(changed, ["pending_reason", "estimated_start_at"])
            return
        table = connection.ops.quote_name(self.model._meta.db_table)
        with connection.cursor() as cursor:
            cursor.execute(
                f"""WITH new (id, reason, estimate) AS (
                        SELECT * FROM unnest(%s::bigint[], %s::varchar(300)[], %s::timestamptz[])),
                    locked AS (
                        SELECT r.id FROM {table} r JOIN new ON new.id = r.id
                        WHERE r.state = %s AND (r.pending_reason, r.estimated_start_at)
                              IS DISTINCT FROM (new.reason, new.estimate)
                        ORDER BY r.id FOR UPDATE OF r SKIP LOCKED)
                UPDATE {table} r SET pending_reason = new.reason, estimated_start_at = new.estimate
                FROM new JOIN locked ON locked.id = new.id WHERE r.id = new.id""",
                [
                    list(reasons),
                    [r for r, _ in reasons.values()],
                    [e for _, e in reasons.values()],
                    RequestState.PENDING,
                ],
            )


class GpuRequest(models.Model):
    """A team's ask for GPU capacity: gpu_milli per card (1..1000; exactly 1000 when num_gpus > 1).

    gpu_memory_mib is per card; null means in proportion to the share.
    """

    # Indexed by (team, state) below: an index of its own would only cost every write.
    team = models.ForeignKey("teams.Team", on_delete=models.PROTECT, related_name="requests", db_index=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="gpu_requests")
    name = models.CharField(max_length=100)
    task_type = models.CharField(max_length=16, choices=TaskType.choices, default=TaskType.TRAINING)
    pool = models.ForeignKey(Pool, on_delete=models.PROTECT, null=True, blank=True, related_name="requests")
    gpu_model = models.CharField(max_length=64, blank=True)
    gpu_milli = models.PositiveIntegerField(
        validators=[MinValueValidator(1), MaxValueValidator(MILLI_PER_GPU)], help_text="Per card, 1..1000."
    )
    num_gpus = models.PositiveSmallIntegerField(
        default=1, validators=[MinValueValidator(1), MaxValueValidator(MAX_GPUS_PER_REQUEST)]
    )
    gpu_memory_mib = models.PositiveIntegerField(null=True, blank=True, validators=[MinValueValidator(1)])
    cpu_milli = models.PositiveIntegerField(default=1000)
    memory_mib = models.PositiveIntegerField(default=4096)
    billing_mode = models.CharField(max_length=16, choices=BillingMode.choices, default=BillingMode.ON_DEMAND)
    allow_on_demand_fallback = models.BooleanField(default=False)
    checkpoint_interval_s = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)]
    )
    pinned = models.BooleanField(
        default=False, help_text="Never moved to make room for other work (consolidation)."
    )
    priority = models.SmallIntegerField(
        default=0, validators=[MinValueValidator(-100), MaxValueValidator(100)]
    )
    max_duration_s = models.PositiveIntegerField(null=True, blank=True, validators=[MinValueValidator(1)])
    command = models.TextField(blank=True)
    environment = models.JSONField(
        default=dict,
        blank=True,
        help_text="Variables the job gets, NAME -> value (teams.environment); they win over "
        "the team's secrets of the same name.",
    )
    workload_key = models.CharField(
        max_length=200,
        blank=True,
        help_text="Runs with the same key teach the cost/performance model; empty: the command.",
    )
    state = models.CharField(max_length=16, choices=RequestState.choices, default=RequestState.PENDING)
    pending_reason = models.CharField(max_length=300, blank=True)
    estimated_start_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)  # indexed by (created_at, id) below
    scheduled_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    exit_code = models.SmallIntegerField(
        null=True,
        blank=True,
        help_text="The job's exit status as its agent reported it; negative: killed by that signal.",
    )
    last_checkpoint_at = models.DateTimeField(
        null=True, blank=True, help_text="The job's last checkpoint, as its agent reported it."
    )
    checkpoint_ref = models.CharField(
        max_length=500,
        blank=True,
        help_text="Where the last checkpoint's data is: a shared path or a store key.",
    )
    stop_by = models.DateTimeField(
        null=True, blank=True, help_text="Migrating: the job checkpoints and stops by then (SIGKILL at it)."
    )
    stop_reason = models.CharField(max_length=300, blank=True, help_text="Why it is being stopped and moved.")
    release_when_stopped = models.BooleanField(
        default=False,
        help_text="Migrating: once stopped it ends released instead of being requeued (an idle stop).",
    )
    last_activity_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="The last terminal input or kernel run in it (services.sessions.record_activity), to "
        "ACTIVITY_RESOLUTION_S: one of what keeps interactive work from being idle.",
    )
    placements = models.PositiveIntegerField(
        default=0,
        help_text="Times placed: the generation of its current run, which fences stale agent reports.",
    )

    objects = GpuRequestQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["state", "created_at"]),
            models.Index(fields=["team", "state"]),
            # Newest first (the default order): the lists, and the workload mix every pass reads.
            models.Index(fields=["created_at", "id"]),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(gpu_milli__gte=1, gpu_milli__lte=MILLI_PER_GPU),
                name="request_gpu_milli_1_to_1000",
            ),
            models.CheckConstraint(
                condition=Q(num_gpus__gte=1, num_gpus__lte=MAX_GPUS_PER_REQUEST),
                name="request_num_gpus_range",
            ),
            models.CheckConstraint(
                condition=Q(num_gpus=1) | Q(gpu_milli=MILLI_PER_GPU),
                name="request_multi_gpu_takes_whole_cards",
            ),
            models.CheckConstraint(
                condition=Q(gpu_memory_mib__isnull=True) | Q(gpu_memory_mib__gt=0),
                name="request_gpu_memory_positive",
            ),
            models.CheckConstraint(
                condition=~Q(billing_mode=BillingMode.SPOT)
                | Q(checkpoint_interval_s__isnull=False, checkpoint_interval_s__gt=0),
                name="request_spot_needs_checkpoint_interval",
            ),
            models.CheckConstraint(
                condition=Q(max_duration_s__isnull=True) | Q(max_duration_s__gt=0),
                name="request_max_duration_positive",
            ),
            models.CheckConstraint(condition=Q(state__in=RequestState.values), name="request_state_valid"),
            models.CheckConstraint(
                condition=Q(task_type__in=TaskType.values), name="request_task_type_valid"
            ),
            models.CheckConstraint(
                condition=Q(billing_mode__in=BillingMode.values), name="request_billing_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.share_label()}, {self.state})"

    def clean(self):
        errors = {}
        if self.num_gpus and self.num_gpus > 1 and self.gpu_milli != MILLI_PER_GPU:
            errors["gpu_milli"] = "A request for more than one GPU takes whole cards: gpu_milli must be 1000."
        if self.billing_mode == BillingMode.SPOT:
            limit = settings.SPOT_MAX_CHECKPOINT_INTERVAL_S
            if not self.checkpoint_interval_s:
                errors["checkpoint_interval_s"] = "Spot work must declare a checkpoint interval."
            elif self.checkpoint_interval_s > limit:
                errors["checkpoint_interval_s"] = (
                    f"Spot work must checkpoint at least every {limit // 60} minutes."
                )
        if self.pool_id and self.pool.is_spot() and self.billing_mode != BillingMode.SPOT:
            errors["billing_mode"] = (
                f"Pool {self.pool.name} is spot capacity: choose spot billing or another pool."
            )
        if self.pool_id and not self.pool.is_spot() and self.billing_mode == BillingMode.SPOT:
            errors["billing_mode"] = (
                f"Pool {self.pool.name} is on-demand: choose on-demand billing, or leave the pool open "
                "and allow on-demand fallback."
            )
        if self.pool_id and self.gpu_model and self.pool.gpu_model != self.gpu_model:
            errors["gpu_model"] = (
                f"Pool {self.pool.name} has {self.pool.gpu_model} GPUs, not {self.gpu_model}."
            )
        if errors:
            raise ValidationError(errors)

    def total_milli(self) -> int:
        return self.gpu_milli * self.num_gpus

    def share_label(self) -> str:
        """'1/4 GPU', '0.3 GPU' or '2 GPUs' — how people say it."""
        return share_label(self.gpu_milli, self.num_gpus)

    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    def is_interactive(self) -> bool:
        """No command: the allocation is held for its team to work in (a terminal, `gpu-portal shell`,
        port-forward) until released, cancelled or past its max duration."""
        return not self.command.strip()

    def is_active(self) -> bool:
        return self.state in ACTIVE_STATES

    def billing_label(self) -> str:
        """The billing mode asked for, and the capacity type that runs the work (ran it, once ended) where
        that differs: 'spot (running on on-demand: fallback)'. Reads the `capacity_type` annotation of
        GpuRequestQuerySet.with_capacity(); without it, or while pending, the billing mode alone."""
        capacity = getattr(self, "capacity_type", None)
        if capacity is None or capacity == self.billing_mode or self.state == RequestState.PENDING:
            return self.billing_mode
        tense = "running on" if self.is_active() else "ran on"
        why = ": fallback" if self.billing_mode == BillingMode.SPOT and self.allow_on_demand_fallback else ""
        return f"{self.billing_mode} ({tense} {capacity}{why})"

    def exit_status_label(self) -> str:
        """The exit status as people read it, naming the signal that ended the process (a negative
        status, or 128 + the signal as shells report it): '143 (SIGTERM)'. Work its user released was
        stopped with SIGTERM on purpose, so its 143 says so rather than look like a crash."""
        if self.exit_code is None:
            return ""
        number = -self.exit_code if self.exit_code < 0 else self.exit_code - 128
        try:
            name = signal.Signals(number).name
        except ValueError:
            return str(self.exit_code)
        label = f"killed by {name}" if self.exit_code < 0 else f"{self.exit_code} ({name})"
        if self.state == RequestState.RELEASED:
            return f"{label}: stopped because its GPUs were released, not a failure"
        return label


class AllocationQuerySet(models.QuerySet):
    def committed(self) -> "AllocationQuerySet":
        """The open slices: what holds capacity. The one definition the planner, the apply step and
        the cluster picture share; only active requests hold any (DESIGN rule 1)."""
        return self.filter(ended_at__isnull=True)

    def committed_by_gpu(self, gpu_ids) -> dict[int, tuple[int, int]]:
        """Per card id: (milli-GPU, MiB) held by open slices; cards holding nothing are absent."""
        rows = (
            self.committed()
            .filter(gpu_id__in_array=list(gpu_ids))
            .values("gpu_id")
            .annotate(milli=Sum("milli"), mem=Sum("gpu_memory_mib"))
        )
        return {row["gpu_id"]: (row["milli"], row["mem"]) for row in rows}


class Allocation(models.Model):
    """One segment of a request on one card: milli-GPU and GPU memory (MiB) from started_at to ended_at.

    A migration or billing-mode change closes the segment and opens another, so
    each segment is billed at its own rate. Open segments (ended_at null) count
    against the card's capacity.
    """

    request = models.ForeignKey(GpuRequest, on_delete=models.PROTECT, related_name="allocations")
    # Indexed by (gpu, ended_at) below.
    gpu = models.ForeignKey(Gpu, on_delete=models.PROTECT, related_name="allocations", db_index=False)
    milli = models.PositiveIntegerField()
    gpu_memory_mib = models.PositiveIntegerField()
    billing_mode = models.CharField(max_length=16, choices=BillingMode.choices)
    mig_instance = models.CharField(
        max_length=32, blank=True, help_text="On a MIG card: the GPU instance held whole, profile@start."
    )
    mig_slots = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="The instance's memory slices (the database guard reads them)."
    )
    borrowed = models.BooleanField(default=False, help_text="Above the team's quota, so preemptible.")
    started_at = models.DateTimeField(default=timezone.now)
    ended_at = models.DateTimeField(null=True, blank=True)

    # The segment's own fields (not its card's or its request's), as the admin and the API list them.
    SEGMENT_FIELDS = ("milli", "gpu_memory_mib", "billing_mode", "borrowed", "started_at", "ended_at")

    objects = AllocationQuerySet.as_manager()

    class Meta:
        ordering = ["-started_at", "-id"]
        indexes = [models.Index(fields=["gpu", "ended_at"])]
        constraints = [
            models.CheckConstraint(
                condition=Q(milli__gte=1, milli__lte=MILLI_PER_GPU), name="allocation_milli_1_to_1000"
            ),
            models.CheckConstraint(
                condition=Q(ended_at__isnull=True) | Q(ended_at__gte=models.F("started_at")),
                name="allocation_ends_after_start",
            ),
            models.CheckConstraint(
                condition=Q(billing_mode__in=BillingMode.values), name="allocation_billing_valid"
            ),
            models.UniqueConstraint(
                fields=["request", "gpu"],
                condition=Q(ended_at__isnull=True),
                name="allocation_one_open_per_gpu",
            ),
            models.UniqueConstraint(
                fields=["gpu", "mig_instance"],
                condition=Q(ended_at__isnull=True) & ~Q(mig_instance=""),
                name="allocation_mig_instance_not_shared",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.request.name} on {self.gpu}: {self.milli} milli"

    def is_open(self) -> bool:
        return self.ended_at is None

    def is_preemptible(self) -> bool:
        return self.borrowed or self.billing_mode == BillingMode.SPOT


class LogChunk(models.Model):
    """A piece of a request's job output (stdout and stderr interleaved) as its node's agent shipped it.

    `offset` is the character offset of `text` in the job's output: a chunk sent again is
    stored once, and a reader tails the log by asking for what lies past an offset.
    """

    request = models.ForeignKey(GpuRequest, on_delete=models.CASCADE, related_name="log_chunks")
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+")
    offset = models.PositiveBigIntegerField()
    text = models.TextField()
    received_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["request", "offset"]
        constraints = [
            models.UniqueConstraint(fields=["request", "offset"], name="logchunk_one_per_request_offset"),
        ]

    def __str__(self) -> str:
        return f"log of request {self.request_id} at {self.offset}"

    def end(self) -> int:
        return self.offset + len(self.text)

"""A Slurm cluster behind a pool, its nodes as the portal last saw them in Slurm, and each run of a
request as a Slurm job. Times aware UTC; memory in MiB."""

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q

from slurm_backend.client import check_url
from teams import crypto


def validate_slurmrestd_url(url: str) -> None:
    try:
        check_url(url)
    except ValueError as error:
        raise ValidationError(str(error)) from None


class SlurmConnection(models.Model):
    """How the portal reaches the Slurm cluster that runs a pool's work: slurmrestd's URL
    (`unix:/path/to.sock`, rest_auth/local, or `http(s)://host:port` with a JWT kept encrypted like
    team secrets), the partition whose nodes are the pool's, and where the jobs' output lands (a
    directory the portal reads, on storage the Slurm nodes share with it)."""

    pool = models.OneToOneField(
        "scheduler_app.Pool", on_delete=models.CASCADE, primary_key=True, related_name="slurm"
    )
    url = models.CharField(max_length=500, validators=[validate_slurmrestd_url])
    token_encrypted = models.TextField(blank=True, editable=False)
    partition = models.CharField(max_length=64)
    output_dir = models.CharField(
        max_length=500, help_text="Where each job writes its output; the portal tails it for the log."
    )
    card_memory_mib = models.PositiveIntegerField(
        default=81920, help_text="Each card's memory: Slurm's gres does not say it."
    )
    sync_claimed_until = models.DateTimeField(null=True, blank=True, editable=False)
    last_synced_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_error = models.CharField(max_length=500, blank=True, editable=False)

    def __str__(self) -> str:
        return f"Slurm {self.url} partition {self.partition} for pool {self.pool_id}"

    def token(self) -> str:
        return crypto.decrypt(self.token_encrypted) if self.token_encrypted else ""

    def set_token(self, token: str) -> None:
        self.token_encrypted = crypto.encrypt(token) if token else ""


class SlurmTeamAccount(models.Model):
    """The Slurm account (sbatch --account) a team's jobs on this cluster are charged to."""

    connection = models.ForeignKey(SlurmConnection, on_delete=models.CASCADE, related_name="accounts")
    team = models.ForeignKey("teams.Team", on_delete=models.CASCADE, related_name="+")
    account = models.CharField(max_length=64)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["connection", "team"], name="slurm_one_account_per_team")
        ]

    def __str__(self) -> str:
        return f"{self.team} as Slurm account {self.account}"


class SlurmNode(models.Model):
    """A portal node that is a Slurm node: `status`, the node status Slurm's state last mapped to, so
    only a change in Slurm moves the portal's node (an operator's own drain stays); `gres`, the node's
    gres as last read (on a MIG node, what maps Slurm's gres indexes to its cards' instances)."""

    node = models.OneToOneField(
        "scheduler_app.Node", on_delete=models.CASCADE, primary_key=True, related_name="slurm"
    )
    connection = models.ForeignKey(SlurmConnection, on_delete=models.CASCADE, related_name="nodes")
    state = models.CharField(max_length=100, help_text="Slurm's state and flags, as last read.")
    status = models.CharField(max_length=16)
    gres = models.CharField(max_length=500, blank=True, help_text="Slurm's gres of the node, as last read.")

    def __str__(self) -> str:
        return f"{self.node_id}: {self.state}"


class SlurmJob(models.Model):
    """One run (`generation`) of a request as a Slurm job on one node. `cards`: the card indexes
    Slurm gave it ("0", "0,1"; on a MIG node card:instance, "1:1g.10gb@2"), read once it runs.
    The log: this run's output starts at character `log_base` of the request's log; `log_bytes` of
    the file and `log_chars` of text are shipped.
    `stop_sent_at`/`kill_sent_at`: when the portal asked Slurm to stop it (TERM) and to kill it."""

    connection = models.ForeignKey(SlurmConnection, on_delete=models.CASCADE, related_name="jobs")
    request = models.ForeignKey("scheduler_app.GpuRequest", on_delete=models.CASCADE, related_name="+")
    generation = models.PositiveIntegerField()
    node = models.ForeignKey("scheduler_app.Node", on_delete=models.CASCADE, related_name="+")
    job_id = models.PositiveBigIntegerField()
    state = models.CharField(max_length=32, default="PENDING")
    cards = models.CharField(max_length=100, blank=True)
    output_path = models.CharField(max_length=600)
    log_base = models.PositiveBigIntegerField(default=0)
    log_bytes = models.PositiveBigIntegerField(default=0)
    log_chars = models.PositiveBigIntegerField(default=0)
    submitted_at = models.DateTimeField()
    stop_sent_at = models.DateTimeField(null=True, blank=True)
    kill_sent_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["connection", "job_id"], name="slurm_job_unique_id"),
            models.UniqueConstraint(fields=["request", "generation"], name="slurm_job_one_per_run"),
            models.CheckConstraint(
                condition=Q(ended_at__isnull=True) | Q(ended_at__gte=models.F("submitted_at")),
                name="slurm_job_ends_after_submit",
            ),
        ]

    def __str__(self) -> str:
        return f"Slurm job {self.job_id}: request {self.request_id} run {self.generation}"

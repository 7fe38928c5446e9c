"""The portal's bills against Slurm's own record: each ended Slurm run's elapsed time in the portal's
segments (from its first segment's start to its last one's end: what it was billed for) beside the
elapsed time Slurm recorded for the job (its end less its start, in whole seconds).

Slurm's record is read from slurmrestd's /jobs, which lists an ended job for MinJobAge (300 s by
default) after its end, or, where the cluster keeps accounting (slurmdbd), from `sacct`, which keeps
them all. A run Slurm no longer knows is listed as unchecked. Reads only.
"""

import datetime as dt
import subprocess
from dataclasses import dataclass

from scheduler_app.models import Allocation
from slurm_backend.client import SlurmClient
from slurm_backend.models import SlurmConnection, SlurmJob

TOLERANCE_S = 1.0  # Slurm keeps whole seconds: a second either way is its rounding, not a billing error
SOURCES = ("rest", "sacct")


@dataclass(frozen=True)
class RunCheck:
    """One ended run: `portal_s` billed in its segments, `slurm_s` as Slurm recorded it (None: Slurm no
    longer knows the job); `stopped`: the portal stopped it (cancel, release, preemption, move)."""

    pool: str
    job_id: int
    request_id: int
    generation: int
    portal_s: float
    slurm_s: float | None
    stopped: bool

    def differs(self) -> bool:
        """Billed more than Slurm ran, or less; less is no difference for a run the portal stopped: its
        bill ends at the portal's stop, and the job's own shutdown after the signal is not billed."""
        if self.slurm_s is None:
            return False
        over = self.portal_s - self.slurm_s
        return over > TOLERANCE_S or (-over > TOLERANCE_S and not self.stopped)


def check_billing(since: dt.datetime, source: str = "rest") -> list[RunCheck]:
    """Every Slurm run that ended since `since`, its billed and its recorded elapsed time."""
    checks = []
    connections = SlurmConnection.objects.select_related("pool")
    for connection in connections:
        runs = list(
            SlurmJob.objects.filter(connection=connection, ended_at__gte=since).order_by("ended_at", "job_id")
        )
        if not runs:
            continue
        recorded = _from_sacct(runs) if source == "sacct" else _from_slurmrestd(connection)
        checks += [
            RunCheck(
                pool=connection.pool.name,
                job_id=run.job_id,
                request_id=run.request_id,
                generation=run.generation,
                portal_s=billed_seconds(run),
                slurm_s=recorded.get(run.job_id),
                stopped=run.stop_sent_at is not None,
            )
            for run in runs
        ]
    return checks


def billed_seconds(run: SlurmJob) -> float:
    """The run's time in the portal's segments: those of its request that overlap the Slurm job's life
    (a run's segments open at its placement, before the submission, move to Slurm's start when the sync
    sees it, and close when it stops, before or at the job's end; the run before ended and the next one
    starts outside it)."""
    segments = Allocation.objects.filter(
        request_id=run.request_id, ended_at__gt=run.submitted_at, started_at__lt=run.ended_at
    ).values_list("started_at", "ended_at")
    if not segments:
        return 0.0
    starts, ends = zip(*segments, strict=True)
    return (max(ends) - min(starts)).total_seconds()


def _from_slurmrestd(connection: SlurmConnection) -> dict[int, float]:
    client = SlurmClient(connection.url, connection.token())
    return {
        job["job_id"]: float(max(0, job["end_time"] - job["start_time"]))
        for job in client.jobs()
        if job.get("end_time") and job.get("start_time")
    }


def _from_sacct(runs: list[SlurmJob]) -> dict[int, float]:
    """sacct's ElapsedRaw of these jobs, from the accounting database of the cluster this host's
    slurm.conf names."""
    shown = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-o", "JobIDRaw,ElapsedRaw", "-j", ",".join(str(r.job_id) for r in runs)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return parse_sacct(shown)


def parse_sacct(text: str) -> dict[int, float]:
    """`sacct -X -n -P -o JobIDRaw,ElapsedRaw` lines ("123|5") as job id -> seconds."""
    elapsed = {}
    for line in text.splitlines():
        job_id, _, seconds = line.strip().partition("|")
        if job_id.isdigit() and seconds.isdigit():
            elapsed[int(job_id)] = float(seconds)
    return elapsed

"""One sync of a Slurm pool: the portal acting as each Slurm node's agent.

It reads what the agent reads (scheduler_app.selectors.node_work: what must run, and by omission what
must stop) and reports what the agent reports, through the same services (report_started,
report_finished, append_log; the nodes through the inventory's owners, slurm_backend.nodes). So the
lifecycle owner, metering, budgets and the live pages do not know Slurm is there: this module only
starts, watches, signals and stops Slurm jobs.
"""

import contextlib
import datetime as dt
import logging

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from scheduler_app.choices import Backend
from scheduler_app.models import GpuRequest, Node
from scheduler_app.rules.lifecycle import ACTIVE_STATES
from scheduler_app.selectors import node_work
from scheduler_app.services.agents import append_log, report_finished, report_started
from scheduler_app.services.migration import requeue_from_checkpoint
from scheduler_app.services.placement import follow_cards, follow_instances
from slurm_backend import checkpoints, jobs
from slurm_backend.client import SlurmClient, SlurmError, SlurmUnavailable
from slurm_backend.foreign import record_foreign
from slurm_backend.gres import card_indexes
from slurm_backend.models import SlurmConnection, SlurmJob, SlurmTeamAccount
from slurm_backend.nodes import SLURM, drain_reclaimed, mig_instances, sync_nodes
from slurm_backend.output import ship_output

log = logging.getLogger(__name__)

CLAIM_S = 60  # a sync holds its pool this long at most; another worker's sync of it waits until then
CANNOT_START = (
    126  # the status a run Slurm refused is reported with, as the agent reports one it cannot start
)
RAN = {"RUNNING", "COMPLETING", "COMPLETED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY"}
ENDED = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "OUT_OF_MEMORY",
    "NODE_FAIL",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
}
REQUEUED = {"NODE_FAIL", "PREEMPTED", "BOOT_FAIL"}  # not the job's doing: it runs again elsewhere


def client_for(connection: SlurmConnection) -> SlurmClient:
    return SlurmClient(connection.url, connection.token())


def sync_all() -> dict[str, str]:
    """Sync every Slurm pool; per pool "ok" or its error."""
    return {
        connection.pool.name: sync_pool(connection) or "ok"
        for connection in SlurmConnection.objects.select_related("pool").filter(pool__backend=Backend.SLURM)
    }


def sync_pool(connection: SlurmConnection, now: dt.datetime | None = None) -> str:
    """Read Slurm, follow its jobs, submit and stop what the work lists say; returns the problems
    found ("" none), also kept on the connection. Claimed first: one sync of a pool at a time."""
    now = now or timezone.now()
    if not _claim(connection, now):
        return "another sync of this pool is running"
    problems: list[str] = []
    try:
        client = client_for(connection)
        try:
            problems += sync_nodes(connection, client.nodes())
            problems += drain_reclaimed(connection)
            listed = {job["job_id"]: job for job in client.jobs()}
            problems += _follow(connection, listed, now)
            problems += _start_and_stop(connection, client, listed, now)
            record_foreign(connection, listed)  # after _start_and_stop: a job it adopted is the portal's
        except (SlurmUnavailable, SlurmError) as error:
            problems.append(str(error))
    finally:
        text = "; ".join(problems)[:500]
        SlurmConnection.objects.filter(pk=connection.pk).update(
            sync_claimed_until=None, last_synced_at=now, last_error=text
        )
    if problems:
        log.warning("Slurm pool %s: %s", connection.pool.name, text)
    return text


def follow_starts(now: dt.datetime | None = None) -> int:
    """Between syncs: ask Slurm after the jobs submitted in the last SLURM_START_WATCH_S that have not
    started, one by one (the whole list when many), and follow them as the sync does, so a request
    shows running soon after Slurm starts it. A pool being synced is left to its sync. Returns the
    jobs asked after."""
    now = now or timezone.now()
    since = now - dt.timedelta(seconds=settings.SLURM_START_WATCH_S)
    starting = SlurmJob.objects.filter(ended_at__isnull=True, submitted_at__gte=since).exclude(state__in=RAN)
    asked = 0
    for connection_id in set(starting.values_list("connection_id", flat=True)):
        connection = SlurmConnection.objects.select_related("pool").get(pk=connection_id)
        if not _claim(connection, now):
            continue
        try:
            rows = starting.filter(connection=connection)
            listed = _jobs(client_for(connection), [row.job_id for row in rows])
            asked += len(listed)
            _follow(connection, listed, now, rows.filter(job_id__in=listed))
        except (SlurmUnavailable, SlurmError) as error:  # the next sync says so, on the connection
            log.info("Slurm pool %s: following starts: %s", connection.pool.name, error)
        finally:
            SlurmConnection.objects.filter(pk=connection.pk).update(sync_claimed_until=None)
    return asked


ONE_BY_ONE = 20  # more jobs starting than this: one listing of all jobs costs less than a call each


def _jobs(client: SlurmClient, job_ids: list[int]) -> dict[int, dict]:
    """These jobs as Slurm describes them now, by id (one a job Slurm no longer knows is left out)."""
    if len(job_ids) > ONE_BY_ONE:
        wanted = set(job_ids)
        return {job["job_id"]: job for job in client.jobs() if job["job_id"] in wanted}
    found = {}
    for job_id in job_ids:
        with contextlib.suppress(SlurmError):
            found[job_id] = client.job(job_id)
    return found


def _claim(connection: SlurmConnection, now: dt.datetime) -> bool:
    """Hold the pool for one sync (CLAIM_S at most): False when another holds it."""
    claimed = SlurmConnection.objects.filter(pk=connection.pk).exclude(sync_claimed_until__gt=now)
    return bool(claimed.update(sync_claimed_until=now + dt.timedelta(seconds=CLAIM_S)))


def _follow(connection: SlurmConnection, listed: dict[int, dict], now: dt.datetime, rows=None) -> list[str]:
    """Report what each open job (of `rows`, by default all) did since the last sync: started, wrote,
    ended."""
    problems = []
    if rows is None:
        rows = SlurmJob.objects.filter(connection=connection, ended_at__isnull=True)
    for row in rows.select_related("node", "request__team"):
        job = listed.get(row.job_id)
        if job is None:  # Slurm forgets an ended job after MinJobAge: too long unseen
            _end(row, CANNOT_START, now, failed_because=f"Slurm no longer knows job {row.job_id}")
            problems.append(f"Slurm job {row.job_id} disappeared")
            continue
        state = job["job_state"]
        if state in RAN and row.state not in RAN:
            problems += _started(row, job)
        ship_output(row, row.node)
        if state in RAN:
            checkpoints.report_new(row.node, row.request, row.generation)
        if state in ENDED:
            _finished(row, job, now)
        elif state != row.state:
            SlurmJob.objects.filter(pk=row.pk).update(state=state)
    return problems


def _started(row: SlurmJob, job: dict) -> list[str]:
    """The run is running: the cards (MIG instances) Slurm gave it are recorded and, where Slurm picked
    others of the node than the portal planned, its slices follow them (_follow_choice); the request
    moves to running, billed from Slurm's start (it may have kept the job pending after the portal
    submitted it)."""
    indexes = card_indexes(job.get("gres_detail") or [])
    cards, refused = _follow_choice(row, indexes)
    SlurmJob.objects.filter(pk=row.pk).update(state="RUNNING", cards=cards)
    row.state, row.cards = "RUNNING", cards
    resumed = checkpoints.found(row.request)
    started = dt.datetime.fromtimestamp(job["start_time"], tz=dt.UTC) if job.get("start_time") else None
    report_started(
        row.node, row.request_id, generation=row.generation, resumed_from=resumed, started_at=started
    )
    return [f"Slurm job {row.job_id} runs on cards {cards} of {row.node.name}: {refused}"] if refused else []


def _follow_choice(row: SlurmJob, indexes: list[int]) -> tuple[str, str]:
    """(SlurmJob.cards, why the slices could not follow: "" when they did): the card indexes Slurm
    gave (placement.follow_cards), or on a MIG node the (card, instance) its gres indexes stand for
    (nodes.mig_instances, placement.follow_instances)."""
    if not indexes:
        return "", ""
    instances = mig_instances(row.connection, row.node, indexes)
    if instances is None:
        refused = follow_cards(row.node, row.request_id, row.generation, indexes, actor_name=SLURM)
        return ",".join(str(i) for i in indexes), refused
    cards = ",".join(f"{card}:{instance}" for card, instance in instances)
    refused = follow_instances(row.node, row.request_id, row.generation, instances, actor_name=SLURM)
    return cards, refused


def _exit_status(wait_status: int) -> int:
    """Slurm's exit_code is the wait status: the exit status, or minus the signal that killed it."""
    return -(wait_status & 0x7F) if wait_status & 0x7F else (wait_status >> 8) & 0xFF


def _finished(row: SlurmJob, job: dict, now: dt.datetime) -> None:
    state, status = job["job_state"], _exit_status(int(job.get("exit_code") or 0))
    ended = _end_time(row, job, now)
    why = job.get("state_reason") or ""
    if state in REQUEUED:
        _requeue(row, ended, f"Slurm ended the job: {state} ({why})")
        _close(row, state, now)
    elif state == "OUT_OF_MEMORY":
        request = GpuRequest.objects.only("memory_mib").get(pk=row.request_id)
        _end(row, status, ended, state=state, host_memory_exceeded_mib=request.memory_mib)
    elif state == "TIMEOUT":
        limit = job.get("time_limit")
        _end(row, status, ended, state=state, failed_because=f"killed at its time limit of {limit} min")
    elif state == "CANCELLED" and row.stop_sent_at is None:
        _end(row, status, ended, state=state, failed_because="cancelled in Slurm, outside the portal")
    elif state in ("COMPLETED", "CANCELLED") or (state == "FAILED" and status):
        _end(row, status, ended, state=state)
    else:
        _end(row, status, ended, state=state, failed_because=f"Slurm: {state} ({why})")


def _end_time(row: SlurmJob, job: dict, now: dt.datetime) -> dt.datetime:
    """When the job ended. Slurm keeps whole seconds: a job that ended in the second its TERM was sent
    ended after it (on it), not before the portal asked it to stop."""
    if not job.get("end_time"):
        return now
    ended = dt.datetime.fromtimestamp(job["end_time"], tz=dt.UTC)
    if row.stop_sent_at and ended <= row.stop_sent_at < ended + dt.timedelta(seconds=1):
        return row.stop_sent_at
    return ended


def _end(row: SlurmJob, status: int, ended: dt.datetime, *, state: str = "", **how) -> None:
    report_finished(row.node, row.request_id, status, generation=row.generation, stopped_at=ended, **how)
    _close(row, state or row.state, ended)


def _close(row: SlurmJob, state: str, ended: dt.datetime) -> None:
    SlurmJob.objects.filter(pk=row.pk).update(state=state, ended_at=max(ended, row.submitted_at))


def _requeue(row: SlurmJob, stopped_at: dt.datetime, reason: str) -> None:
    """Requeue the run from its checkpoint, if it is still the request's current run."""
    with transaction.atomic():
        current = (
            GpuRequest.objects.select_for_update()
            .filter(pk=row.request_id, placements=row.generation, state__in=ACTIVE_STATES)
            .exists()
        )
        if current:
            requeue_from_checkpoint([row.request_id], stopped_at=stopped_at, reason=reason, actor_name=SLURM)


def _start_and_stop(
    connection: SlurmConnection, client: SlurmClient, listed: dict[int, dict], now: dt.datetime
) -> list[str]:
    """Submit each run the work lists hold and Slurm has not; signal those being moved; stop the
    open jobs no list holds any more (cancelled, released, preempted, requeued)."""
    problems, wanted = [], set()
    runs = {(r.request_id, r.generation): r for r in SlurmJob.objects.filter(connection=connection)}
    by_name = {job["name"]: job for job in listed.values() if job["job_state"] not in ENDED}
    busy = Node.objects.filter(pool=connection.pool_id, gpus__allocations__ended_at__isnull=True).distinct()
    for node in busy:
        for work in node_work(node):
            key = (work["request_id"], work["generation"])
            wanted.add(key)
            row = runs.get(key)
            if row is None:
                problems += _submit(connection, client, node, work, by_name, now)
            elif work["stop_by"] and row.ended_at is None:
                _stop(client, row, now, kill_at=work["stop_by"])
    grace = dt.timedelta(seconds=settings.SLURM_STOP_GRACE_S)
    for key, row in runs.items():
        if key not in wanted and row.ended_at is None:
            _stop(client, row, now, kill_at=(row.stop_sent_at or now) + grace)
    return problems


def _submit(
    connection: SlurmConnection,
    client: SlurmClient,
    node: Node,
    work: dict,
    by_name: dict[str, dict],
    now: dt.datetime,
) -> list[str]:
    """Submit the run (or adopt the job a lost answer left in Slurm, found by its name). A refusal
    fails the request with Slurm's words, in its log too, as the agent fails a job it cannot start."""
    request = GpuRequest.objects.select_related("team").get(pk=work["request_id"])
    account = jobs.account_name(work, request.team.default_unix_account())
    name = jobs.job_name(request.pk, work["generation"])
    if found := by_name.get(name):
        job_id = found["job_id"]
    else:
        slurm_account = (
            SlurmTeamAccount.objects.filter(connection=connection, team=request.team_id)
            .values_list("account", flat=True)
            .first()
        )
        job = jobs.description(
            connection,
            node.name,
            work,
            account=account,
            slurm_account=slurm_account or "",
            max_duration_s=request.max_duration_s,
        )
        try:
            job_id = client.submit(job, jobs.script(work, account), as_user=account)
        except SlurmError as error:
            append_log(node, request.pk, work["log_offset"], f"GPU Portal: Slurm refused the job: {error}\n")
            report_finished(
                node,
                request.pk,
                CANNOT_START,
                generation=work["generation"],
                failed_because=f"Slurm refused the job: {error}"[:300],
            )
            return [f"request {request.pk}: {error}"]
    SlurmJob.objects.create(
        connection=connection,
        request=request,
        generation=work["generation"],
        node=node,
        job_id=job_id,
        output_path=jobs.output_path(connection, request.pk, work["generation"]),
        log_base=work["log_offset"],
        submitted_at=now,
    )
    return []


def _stop(client: SlurmClient, row: SlurmJob, now: dt.datetime, *, kill_at: dt.datetime) -> None:
    """SIGTERM once (the job may checkpoint), SIGKILL at `kill_at`; its end is read back like any."""
    try:
        if row.stop_sent_at is None:
            client.signal(row.job_id, "TERM")
            SlurmJob.objects.filter(pk=row.pk).update(stop_sent_at=now)
        elif row.kill_sent_at is None and now >= kill_at:
            client.signal(row.job_id, "KILL")
            SlurmJob.objects.filter(pk=row.pk).update(kill_sent_at=now)
    except SlurmError:  # it ended meanwhile: the next sync reads its end
        log.info("Slurm job %s: already gone when signalled", row.job_id)

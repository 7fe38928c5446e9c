"""The agent's loop: register the node's cards, then every round fetch the node's work, start and stop
jobs to match it, report what happened, ship their output, watch their GPU memory and send samples.

The portal answers every report idempotently, so a report that failed (the portal restarting, a
network blip) is simply sent again next round; jobs keep running meanwhile.
"""

import datetime as dt
import logging
import signal
import threading
import time
from collections import deque
from pathlib import Path
from typing import NamedTuple

from gpu_portal_sdk.errors import AuthenticationError, NotFoundError, PortalError, ValidationError

from agent.checkpoint_sync import CheckpointSyncError
from agent.host import host_meter
from agent.isolation import JobStartError
from agent.jobs import Job, checkpoint_time, mps_available, stop_stale_jobs
from agent.nvml import read_cards, read_processes, read_samples
from agent.sessions import SessionTunnel

log = logging.getLogger(__name__)

LOG_CHUNK_CHARS = 64 * 1024  # the portal's limit per log report
MAX_UNSENT_MOMENTS = 60  # the portal's limit per samples request: a longer outage keeps the last minute
STOPPED_FOR_MOVE = 128 + signal.SIGTERM  # the status reported for a run stopped at registration mid-move
CANNOT_START = 126  # the status reported for a job that could not be given its identity or cgroup


class Exit(NamedTuple):
    """A job's end, until the portal has taken the report: its status, its run, when the agent saw it
    end, and the host memory limit (MiB) its cgroup killed it for, if that is why."""

    code: int
    generation: int | None
    at: dt.datetime | None
    host_memory_exceeded_mib: int | None = None


class NodeAgent:
    """One node's agent. `client` is a gpu_portal_sdk.node.NodeClient, `nvml` what agent.nvml.load_nvml
    gave, `isolation` an agent.isolation.Isolation (how its jobs run: as whom, in which cgroup and
    namespaces); `grace_s` is how long a stopped job may take to checkpoint before SIGKILL.

    The cards are read every `sample_period_s` (the live pages' 1 Hz) and their readings sent together,
    one request for several moments, every `send_samples_every_s` (by default every round): at
    thousands of nodes, per-request costs dominate the portal's ingest.

    `fence_after_s`: cut off from the portal this long (no work list), the agent stops its jobs, so
    they are not still running when the portal declares the node lost and runs them elsewhere (keep
    it plus `grace_s` under the portal's NODE_LOST_AFTER_S). Their exits are not reported: if the
    portal did not move them meanwhile, they start again from their checkpoints once it answers.

    `monitor_only`: on a node whose jobs another cluster manager runs (Slurm), the agent only reports:
    the cards' readings and the host's use, never asking for work, starting, stopping or isolating a
    job (no `isolation`). Readings go under the names the portal's registration answer gives each card
    (on a Slurm node, Slurm's cards by index); a card it names "" is not reported.

    `cloud_notices` (an agent.cloud_notices.CloudNoticeWatcher) and `checkpoint_sync` (an
    agent.checkpoint_sync.CheckpointSync) are off when None. With the watcher, a reclaim notice the
    cloud gives this node is sent to the portal once (which moves the node's work); with the sync,
    each reported checkpoint is first copied to the stores (the copy's URL is its reference), and a
    job that had checkpointed elsewhere gets its newest copy before it starts here.
    """

    def __init__(
        self,
        client,
        nvml,
        *,
        isolation=None,
        monitor_only: bool = False,
        interval_s: float = 2.0,
        grace_s: float = 30.0,
        mps: bool | None = None,
        sample_period_s: float = 1.0,
        send_samples_every_s: float | None = None,
        fence_after_s: float | None = None,
        cloud_notices=None,
        checkpoint_sync=None,
        sessions: bool = False,
        lab_python: str | None = None,
    ):
        self.client = client
        self.nvml = nvml
        self.interval_s = interval_s
        self.grace_s = grace_s
        self.mps = mps_available() if mps is None else mps
        self.isolation = isolation
        self.monitor_only = monitor_only
        self.card_names: dict[str, str] = {}  # NVML's UUID -> the portal's name for the card ("": none)
        self.card_minors: dict[str, int] = {}  # card UUID -> its /dev/nvidia<minor>
        self.sample_period_s = sample_period_s
        self.send_samples_every_s = interval_s if send_samples_every_s is None else send_samples_every_s
        self.cloud_notices = cloud_notices
        self.checkpoint_sync = checkpoint_sync
        self._notice_sent: str | None = None  # the last reclaim notice the portal took
        self.unsent: deque[tuple[dt.datetime, list[dict]]] = deque(maxlen=MAX_UNSENT_MOMENTS)
        self._read_at = self._sent_at = float("-inf")
        self.jobs: dict[int, Job] = {}
        # Reports not sent yet, with their run's generation: {request: generation} and
        # {request: Exit}.
        self.unreported_starts: dict[int, tuple[int | None, dt.datetime | None]] = {}
        self.unreported_exits: dict[int, Exit] = {}
        self.registered = False
        self.registered_at: dt.datetime | None = None  # every earlier agent's job had stopped by then
        self.owner = ""  # "<node> at <portal>" once registered: marks the jobs this node's agents start
        self.refused = False  # the portal refused the credential
        self.overuse: dict[int, dict] = {}  # watchdog stops not yet reported
        self.placed: dict[int, int | None] = {}  # the last work list's requests here: {request: generation}
        self.host = host_meter(nvml)
        self.stopping = threading.Event()
        self.fence_after_s = fence_after_s
        self.fenced: set[int] = set()  # jobs stopped while cut off: their exits are not reported
        self._heard_at = time.monotonic()  # the last work list from the portal
        # Interactive sessions (agent.sessions), once registered; off for monitor-only agents.
        self.sessions = None
        if sessions and not monitor_only:
            self.sessions = SessionTunnel(client.url, client.credential, self.jobs.get, lab_python)

    def run(self) -> None:
        """Rounds until stop() is called; then the jobs are stopped with their grace period."""
        while not self.stopping.is_set():
            started = time.monotonic()
            self.round()
            self._read_until(started + self.interval_s)
        self.shutdown()

    def stop(self) -> None:
        self.stopping.set()

    def _read_until(self, next_round_at: float) -> None:
        """Between rounds: read the cards every sample_period_s; their readings go with a later round."""
        while not self.stopping.is_set():
            read_at = self._read_at + self.sample_period_s
            if read_at >= next_round_at:
                self.stopping.wait(max(0.0, next_round_at - time.monotonic()))
                return
            if self.stopping.wait(max(0.0, read_at - time.monotonic())):
                return
            self._read_cards()

    def _read_cards(self) -> None:
        self._read_at = time.monotonic()
        try:
            readings = read_samples(self.nvml)
        except self.nvml.NVMLError as error:
            log.error("reading the cards: NVML: %s", error)
            return
        self.unsent.append((dt.datetime.now(dt.UTC), readings))

    def round(self) -> None:
        """One pass over everything; each step's failure is logged and retried next round, except a
        refused credential (another was issued, or the node was removed): the agent stops."""
        steps = [
            self._watch_cloud,
            self._follow_work,
            self._watch_checkpoints,
            self._watch_usage,
            self._reap,
            self._ship_logs,
            self._sample,
        ]
        if self.monitor_only:
            steps = [self._watch_usage, self._sample]
        for step in steps if self.registered else [self._register]:
            try:
                step()
            except AuthenticationError as error:
                log.error("the portal refused this node's credential (%s): stopping", error.message)
                self.refused = True
                self.stop()
                return
            except PortalError as error:
                log.warning("%s: %s (%s)", step.__name__.strip("_"), error.message, error.code)
            except self.nvml.NVMLError as error:
                log.error("%s: NVML: %s", step.__name__.strip("_"), error)
        self._fence_if_cut_off()

    def _fence_if_cut_off(self) -> None:
        if self.fence_after_s is None or time.monotonic() - self._heard_at < self.fence_after_s:
            return
        for request_id, job in self.jobs.items():
            if request_id not in self.fenced:
                job.stop(self.grace_s, f"no word from the portal for {self.fence_after_s:g} s: fenced")
                self.fenced.add(request_id)

    def shutdown(self) -> None:
        """The agent is going away (the node is going down): stop every job with its grace period and
        ship its output, but report no exit. The portal still counts the work as running here: an
        agent that comes back starts it again from its checkpoint, and a node that stays away is
        declared lost and its work requeued."""
        if self.sessions is not None:
            self.sessions.stop()
        for job in self.jobs.values():
            job.stop(self.grace_s, "agent shutting down")
        deadline = time.monotonic() + self.grace_s + 5
        while self.jobs and time.monotonic() < deadline:
            for request_id, job in list(self.jobs.items()):
                job.enforce_stop()
                if job.finished():
                    job.close()
                    del self.jobs[request_id]
                    try:
                        self._ship(job)
                    except PortalError as error:
                        log.warning("request %s: its last output is lost: %s", request_id, error.message)
            time.sleep(0.1)

    # Steps

    def _register(self) -> None:
        if self.registered:
            return
        cards = read_cards(self.nvml)
        isolation = None if self.monitor_only else self.isolation.report()
        answer = self.client.register([card.registration() for card in cards], isolation=isolation)
        self.card_minors = {card.uuid: card.minor for card in cards}
        self.card_names = dict(zip((card.uuid for card in cards), answer["cards"], strict=True))
        log.info(
            "registered node %s: %d new cards, %d changed, not reported: %s",
            answer["node"],
            len(answer["added"]),
            len(answer["updated"]),
            ", ".join(answer["missing"]) or "none",
        )
        self.owner = f"{answer['node']} at {self.client.api_url}"
        if not self.monitor_only:
            # Fencing: jobs an earlier agent of this node left running are not ours to keep (the portal
            # may have moved their work); what is still placed here starts again from its checkpoint.
            stop_stale_jobs(self.owner, self.grace_s)
            if left := self.isolation.attach(answer["node"]):  # whatever escaped its session, its cgroup
                log.warning("ended %d job cgroup(s) an earlier agent left", left)
            if self.sessions is not None:
                self.sessions.start()
        self.registered_at = dt.datetime.now(dt.UTC)
        self.registered = True

    def _follow_work(self) -> None:
        """Start what the node should run and does not; stop what it runs and should not."""
        work = {item["request_id"]: item for item in self.client.work()}
        self._heard_at = time.monotonic()
        self.placed = {request_id: item.get("generation") for request_id, item in work.items()}
        for request_id, item in work.items():
            known = request_id in self.jobs or request_id in self.unreported_exits
            # A running request without a process here (the agent restarted) runs again, from its
            # checkpoint directory; a migrating one is being moved and is left alone.
            if not known and item["state"] in ("scheduled", "running"):
                self._start(item)
            elif not known and item["state"] == "migrating":
                self._report_left_behind(item)
        for request_id, job in self.jobs.items():
            if request_id not in work:
                job.stop(self.grace_s, "released, cancelled or moved by the portal")
            elif job.generation != work[request_id].get("generation"):
                # Placed again since this process started (the node was lost and came back): the old run
                # stops; the new one starts once it is gone, so the two never run at once.
                job.stop(self.grace_s, "a stale run: the portal placed the request again")
            elif work[request_id]["stop_by"]:
                deadline = dt.datetime.fromisoformat(work[request_id]["stop_by"])
                job.stop_by(deadline, f"being moved: checkpoint and stop by {deadline:%H:%M:%S} UTC")
        for request_id, (generation, resumed_from) in list(self.unreported_starts.items()):
            self.client.started(request_id, generation, resumed_from)
            del self.unreported_starts[request_id]

    def _report_left_behind(self, item: dict) -> None:
        """A request being moved that no job of this agent runs: an earlier agent of the node ran it and
        went away mid-move, and its job was stopped at registration (with its SIGTERM checkpoint). It
        has stopped for the move: report its checkpoint and its stop now, so the portal requeues it
        rather than waiting for the move's deadline."""
        request_id, generation = item["request_id"], item.get("generation")
        at = checkpoint_time(Path(item["checkpoint_dir"]))
        known_at = item.get("last_checkpoint_at")
        if at is not None and (known_at is None or at > dt.datetime.fromisoformat(known_at)):
            self._send_checkpoint(request_id, Path(item["checkpoint_dir"]), at, generation)
        log.info("request %s: left behind by an earlier agent mid-move: reported stopped", request_id)
        self.unreported_exits[request_id] = Exit(STOPPED_FOR_MOVE, generation, self.registered_at)

    def _watch_cloud(self) -> None:
        """Tell the portal of the cloud's reclaim notice for this node, once per notice."""
        if self.cloud_notices is None:
            return
        notice = self.cloud_notices.check()
        if notice is None or notice.notice_id == self._notice_sent:
            return
        log.warning("the cloud reclaims this node at %s (%s)", notice.deadline, notice.provider)
        self.client.reclaim_notice(notice.deadline, notice.provider, notice.notice_id)
        self._notice_sent = notice.notice_id

    def _start(self, item: dict) -> None:
        if self.checkpoint_sync is not None and item.get("last_checkpoint_at"):
            self._pull_checkpoint(item)
        minors = [self.card_minors[g["uuid"]] for g in item["gpus"] if g["uuid"] in self.card_minors]
        try:
            job = Job(item, mps=self.mps, isolation=self.isolation, owner=self.owner, card_minors=minors)
        except JobStartError as error:
            log.error("request %s: cannot start: %s", item["request_id"], error)
            self.client.log(
                item["request_id"], item.get("log_offset", 0), f"GPU Portal: cannot start: {error}\n"
            )
            self.unreported_exits[item["request_id"]] = Exit(CANNOT_START, item.get("generation"), None)
            return
        except OSError as error:
            log.error("request %s: cannot start %r: %s", item["request_id"], item["command"], error)
            self.unreported_exits[item["request_id"]] = Exit(127, item.get("generation"), None)
            return
        log.info("request %s: started pid %s: %s", item["request_id"], job.process.pid, item["command"])
        self.jobs[item["request_id"]] = job
        # The checkpoint the run starts from (its directory's marker), for the portal's resume rule.
        self.unreported_starts[item["request_id"]] = (job.generation, job.last_checkpoint())

    def _watch_checkpoints(self) -> None:
        """Report each job's new checkpoints (its marker file's mtime) to the portal."""
        for job in list(self.jobs.values()):
            if self._current(job):
                self._report_checkpoint(job)

    def _current(self, job: Job) -> bool:
        """The job is the run the portal placed here (not one it has moved or placed again since)."""
        return job.request_id in self.placed and self.placed[job.request_id] == job.generation

    def _pull_checkpoint(self, item: dict) -> None:
        key = sync_key(item["checkpoint_dir"])
        try:
            copy = self.checkpoint_sync.pull(key, item["checkpoint_dir"])
        except (CheckpointSyncError, OSError) as error:
            log.error("request %s: its checkpoint could not be fetched: %s", item["request_id"], error)
            return
        if copy is None:
            log.warning("request %s: no stored copy of its checkpoint %s", item["request_id"], key)

    def _report_checkpoint(self, job: Job) -> None:
        at = job.last_checkpoint()
        if at is None or (job.checkpoint_reported is not None and at <= job.checkpoint_reported):
            return
        self._send_checkpoint(job.request_id, job.checkpoint_dir, at, job.generation)
        job.checkpoint_reported = at

    def _send_checkpoint(self, request_id: int, checkpoint_dir: Path, at: dt.datetime, generation) -> None:
        """Copy the checkpoint to the stores (the copy's URL is its reference), then report it."""
        ref = ""
        if self.checkpoint_sync is not None:
            try:
                ref = self.checkpoint_sync.push(checkpoint_dir, sync_key(checkpoint_dir), at).url
            except (CheckpointSyncError, OSError) as error:
                log.error("request %s: checkpoint not copied (%s): reported as local", request_id, error)
        try:
            self.client.checkpointed(request_id, at, ref=ref, generation=generation)
        except NotFoundError:
            log.warning("request %s: no longer placed here; its checkpoint is not reported", request_id)

    def _watch_usage(self) -> None:
        """Attribute NVML's processes to the jobs that started them: report each job's memory and SM
        util per card with the host's CPU and network, and stop a job holding more GPU memory on a
        card than its slice gives it."""
        processes = read_processes(self.nvml)
        slices = []
        for request_id, job in self.jobs.items():
            pids = job.pids()
            for piece in job.slices:
                own = [p for p in processes if p.uuid == piece.uuid and p.pid in pids]
                used = sum(p.memory_mib for p in own)
                utils = [p.sm_util_percent for p in own if p.sm_util_percent is not None]
                slices.append(
                    {
                        "request_id": request_id,
                        "uuid": piece.uuid,
                        "memory_used_mib": used,
                        "sm_util_percent": min(100, sum(utils)) if utils else None,
                    }
                )
                if used > piece.memory_mib and job.stop_deadline is None:
                    job.stop(self.grace_s, f"{used} MiB of GPU memory on {piece.uuid} above its slice")
                    self.overuse[request_id] = {
                        "uuid": piece.uuid,
                        "used_mib": used,
                        "limit_mib": piece.memory_mib,
                    }
        self._report_overuse()
        # Only slices of the runs the last work list placed here: one released, moved or placed again
        # since has no open slice left to report on.
        current = {request_id for request_id, job in self.jobs.items() if self._current(job)}
        placed = [s for s in slices if s["request_id"] in current]
        self.client.usage(dt.datetime.now(dt.UTC), self.host.read(), placed)

    def _report_overuse(self) -> None:
        for request_id, overuse in list(self.overuse.items()):
            self.client.memory_exceeded(request_id, **overuse)
            del self.overuse[request_id]

    def _reap(self) -> None:
        for request_id, job in list(self.jobs.items()):
            job.watch_host_memory()
            job.enforce_stop()
            if job.finished():
                log.info("request %s: exited %s", request_id, job.exit_code)
                if self._current(job):  # its last checkpoint (written on SIGTERM) before its exit
                    self._report_checkpoint(job)
                self._ship(job)
                job.close()
                del self.jobs[request_id]
                if request_id in self.fenced:
                    self.fenced.discard(request_id)
                    continue  # stopped for being cut off: the portal decides whether it runs again
                memory = job.memory_limit_mib if job.host_memory_exceeded else None
                self.unreported_exits[request_id] = Exit(job.exit_code, job.generation, job.exited_at, memory)
        for request_id, ended in list(self.unreported_exits.items()):
            if request_id in self.unreported_starts or request_id in self.overuse:
                continue  # in the order it happened: started, stopped by the watchdog, exited
            try:
                self.client.finished(
                    request_id,
                    ended.code,
                    ended.generation,
                    ended.at,
                    host_memory_exceeded_mib=ended.host_memory_exceeded_mib,
                )
            except NotFoundError:
                log.warning("request %s: the portal has no such request on this node", request_id)
            del self.unreported_exits[request_id]

    def _ship_logs(self) -> None:
        for job in self.jobs.values():
            self._ship(job)

    def _ship(self, job: Job) -> None:
        while True:
            offset, text = job.unshipped(LOG_CHUNK_CHARS)
            if not text:
                return
            self.client.log(job.request_id, offset, text)
            job.mark_shipped(offset + len(text))

    def _sample(self) -> None:
        """Read the cards now and, when due, send every reading not sent yet in one request. A batch
        the portal refuses (400) is dropped rather than sent again forever; one that did not get
        through waits for a later round (the last MAX_UNSENT_MOMENTS moments are kept)."""
        self._read_cards()
        due = time.monotonic() - self._sent_at >= self.send_samples_every_s - self.interval_s / 2
        if not self.unsent or not due:
            return
        moments = [(at, self._named(readings)) for at, readings in self.unsent]
        try:
            self.client.sample_moments(moments)
        except ValidationError:
            log.warning("the portal refused %d moments of card readings: dropped", len(moments))
            self.unsent.clear()
            raise
        self.unsent.clear()
        self._sent_at = time.monotonic()

    def _named(self, readings: list[dict]) -> list[dict]:
        """The readings under the portal's names for the cards, without the cards it has none for."""
        named = [{**r, "uuid": self.card_names.get(r["uuid"], r["uuid"])} for r in readings]
        return [r for r in named if r["uuid"]]


def sync_key(checkpoint_dir) -> str:
    """A job's key in the checkpoint stores: its checkpoint directory's team and request parts."""
    path = Path(checkpoint_dir)
    return f"{path.parent.name}/{path.name}"

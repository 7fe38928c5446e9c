"""One allocation's command as a process on this node: its slice in the environment, its output
captured, and a stop that gives it a grace period to checkpoint before it is killed."""

import codecs
import contextlib
import datetime as dt
import logging
import math
import os
import pwd
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from agent.isolation import DEFAULT_PATH
from agent.isolation.files import write_file_in

log = logging.getLogger(__name__)

READ_BYTES = 16 * 1024
MAX_UNSHIPPED_CHARS = 2 * 1024 * 1024  # more than the portal keeps of a log (1 MiB)
MPS_PIPE_DEFAULT = "/tmp/nvidia-mps"
FROM_AGENT = ("LANG", "TZ")  # the only variables of the agent's own environment a job gets
OWNER_VARIABLE = "GPU_PORTAL_NODE_AGENT"  # in each job's environment: "<node> at <portal URL>"
# In the job's checkpoint directory: the job (or the SDK's checkpointed()) touches the marker after each
# checkpoint; the agent writes the stop file, holding the deadline (ISO 8601), before a SIGTERM to move it.
CHECKPOINT_MARKER = ".checkpointed"
STOP_BY_FILE = ".stop_by"


@dataclass(frozen=True)
class Slice:
    """The request's part of one card: milli-GPU and GPU memory in MiB; on a MIG card, the GPU
    instance it holds whole (``profile@start memory slice``)."""

    uuid: str
    milli: int
    memory_mib: int
    mig_instance: str = ""


def mps_pipe_directory() -> str:
    return os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or MPS_PIPE_DEFAULT


def mps_available(pipe_dir: str | None = None) -> bool:
    """An MPS control daemon runs here: its control tool is installed and its pipe is in place."""
    pipe = Path(pipe_dir or mps_pipe_directory())
    return shutil.which("nvidia-cuda-mps-control") is not None and (pipe / "control").exists()


def job_environment(
    work: dict,
    slices: list[Slice],
    *,
    mps: bool,
    identity=None,
    owner: str = "",
    path: str = DEFAULT_PATH,
    node_environment: dict | None = None,
) -> dict:
    """The job's whole environment, an allow-list: nothing of the agent's (or, in the embedded demo,
    the portal's) own environment reaches it but LANG and TZ.

    In order, each overriding the one before: PATH, HOME, USER and LOGNAME of the job's identity
    (`identity`, an agent.isolation.identity.Identity; the agent's own user when unisolated); LANG
    and TZ as the agent has them; the node's variables for every job (`node_environment`: the
    operator's --job-env); the request's own variables and its team's secrets (work["environment"]);
    then the slice's, which nothing overrides: its cards by UUID, its share, its checkpoint
    directory, the agent that started it (`owner`: node and portal, see stop_stale_jobs) and, with
    MPS, the limits the MPS server enforces (thread percentage from the share, pinned memory per card).
    """
    account = pwd.getpwuid(os.geteuid()) if identity is None else None
    env = {
        "PATH": path,
        "HOME": identity.home if identity else account.pw_dir,
        "USER": identity.name if identity else account.pw_name,
        "LOGNAME": identity.name if identity else account.pw_name,
        **{name: os.environ[name] for name in FROM_AGENT if name in os.environ},
        **(node_environment or {}),
        **(work.get("environment") or {}),
    }
    if owner:
        env[OWNER_VARIABLE] = owner
    milli = min(s.milli for s in slices)
    memory = min(s.memory_mib for s in slices)
    env.update(
        {
            "CUDA_VISIBLE_DEVICES": ",".join(s.uuid for s in slices),
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "GPU_PORTAL_REQUEST_ID": str(work["request_id"]),
            "GPU_PORTAL_TASK_TYPE": work["task_type"],
            "GPU_PORTAL_GPU_MILLI": str(milli),
            "GPU_PORTAL_GPU_MEMORY_MIB": str(memory),
            "GPU_PORTAL_CHECKPOINT_DIR": work["checkpoint_dir"],
            "PYTHONUNBUFFERED": "1",  # so a Python job's output ships as it is written
        }
    )
    if any(s.mig_instance for s in slices):
        # The instance is isolated in hardware: no MPS limits; the launcher binds to it by this.
        env["GPU_PORTAL_MIG_INSTANCES"] = ",".join(s.mig_instance for s in slices)
        return env
    if mps:
        env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(max(1, math.ceil(milli / 10)))
        # Device ordinals as the job sees them: CUDA_VISIBLE_DEVICES renumbers its cards from 0.
        env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = ",".join(
            f"{i}={s.memory_mib}M" for i, s in enumerate(slices)
        )
    return env


# A request without a command is an interactive allocation (like Slurm's salloc): the capacity is held,
# by a process with the slice's environment, until the user releases it (or the agent is gone).
# It reads a pipe the agent never writes: when the agent goes, the pipe closes and the hold ends.
HOLD = ["/bin/sh", "-c", "exec cat >/dev/null"]
HOLD_NOTE = "No command: the allocation is held for you until you release it.\n"
SHELL_SYNTAX = set(";&|<>()$`\\\"'*?[]#~=%{}\n")


def argv(command: str) -> list[str]:
    """A plain command runs as itself (its exit status and signals are the job's own); one that uses
    shell syntax runs under /bin/sh."""
    if SHELL_SYNTAX.isdisjoint(command):
        return command.split()
    return ["/bin/sh", "-c", command]


def checkpoint_time(checkpoint_dir: Path) -> dt.datetime | None:
    """When a run in `checkpoint_dir` last checkpointed: its marker file's mtime (None before any)."""
    try:  # the marker itself, never what a link there points to
        mtime = (checkpoint_dir / CHECKPOINT_MARKER).lstat().st_mtime
    except OSError:
        return None
    return dt.datetime.fromtimestamp(mtime, tz=dt.UTC)


class Job:
    """A running command in its sandbox (agent.isolation). Its output (stdout and stderr together)
    collects in memory until shipped. Raises agent.isolation.JobStartError when the job cannot be
    given its identity, directories or cgroup; it has then not started."""

    def __init__(self, work: dict, *, mps: bool, isolation, owner: str = "", card_minors=()):
        self.request_id: int = work["request_id"]
        self.generation: int | None = work.get("generation")  # which run of the request this is
        self.slices = [
            Slice(g["uuid"], g["milli"], g["memory_mib"], g.get("mig_instance", "")) for g in work["gpus"]
        ]
        self.memory_limit_mib: int | None = work.get("memory_mib")  # the host memory of its cgroup
        self.host_memory_exceeded = False  # the kernel killed it for its cgroup's memory limit
        self.checkpoint_reported: dt.datetime | None = None  # the last checkpoint time the portal took
        self.stop_deadline: float | None = None
        self.stop_reason = ""
        self.shipped = work.get("log_offset", 0)  # where the portal's log of the request ends
        self._pending = ""  # output from `shipped` on
        self._lock = threading.Lock()
        self.sandbox = isolation.sandbox(
            work, list(card_minors), mps_pipe=mps_pipe_directory() if mps else None
        )
        self.checkpoint_dir = self.sandbox.checkpoint
        with contextlib.suppress(FileNotFoundError):
            (self.checkpoint_dir / STOP_BY_FILE).unlink()  # an earlier run's stop
        command = work["command"].strip()
        if not command:
            self._append(HOLD_NOTE)
        environment = job_environment(
            work,
            self.slices,
            mps=mps,
            identity=self.sandbox.identity,
            owner=owner,
            path=isolation.path,
            node_environment=isolation.environment,
        )
        self.environment = environment  # what its sessions (agent.sessions) get too
        try:
            self.process = subprocess.Popen(
                self.sandbox.argv(argv(command) if command else HOLD),
                cwd=self.sandbox.workdir,
                env=environment,
                stdin=subprocess.DEVNULL if command else subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own session: it outlives an agent that is killed
                umask=0o077,
            )
        except OSError:
            self.sandbox.close()
            raise
        self.exited_at: dt.datetime | None = None  # when its output closed and its process ended
        self._reader = threading.Thread(target=self._read, name=f"job-{self.request_id}-output", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        stream = self.process.stdout
        while chunk := os.read(stream.fileno(), READ_BYTES):
            self._append(decoder.decode(chunk))
        self._append(decoder.decode(b"", final=True))
        stream.close()
        self.process.wait()
        self.exited_at = dt.datetime.now(dt.UTC)

    def _append(self, text: str) -> None:
        with self._lock:
            self._pending += text.replace("\x00", "\ufffd")  # the portal takes no NUL
            if len(self._pending) > MAX_UNSHIPPED_CHARS:  # the portal is away: keep the newest output
                dropped = len(self._pending) - MAX_UNSHIPPED_CHARS
                self._pending = self._pending[dropped:]
                self.shipped += dropped

    def unshipped(self, limit: int) -> tuple[int, str]:
        """(offset, text): at most `limit` characters of output the portal has not stored yet."""
        with self._lock:
            return self.shipped, self._pending[:limit]

    def mark_shipped(self, end: int) -> None:
        """The portal stored the output up to offset `end`: drop it from memory."""
        with self._lock:
            if end > self.shipped:
                self._pending = self._pending[end - self.shipped :]
                self.shipped = end

    def finished(self) -> bool:
        """The job has ended and its output is read; its exit status is `exit_code`. Once its main
        process has exited the job is over, as a Slurm job ends with its batch script: whatever it
        left running (in the background, or escaped with setsid) is killed."""
        if self.process.poll() is None:
            return False
        if self.sandbox.alive(self.process.pid):
            self.sandbox.kill(self.process.pid)
            return False
        return not self._reader.is_alive()

    def close(self) -> None:
        """The job is over: its cgroup and scratch directory go (the checkpoint directory stays)."""
        self.sandbox.close()

    @property
    def exit_code(self) -> int | None:
        code = self.process.returncode
        return None if code is None else self.sandbox.exit_code(code)

    def pids(self) -> set[int]:
        """The job's processes (what NVML may show on its cards): its cgroup's, or its process tree."""
        if self.sandbox.cgroup is not None:
            return self.sandbox.cgroup.pids()
        try:
            root = psutil.Process(self.process.pid)
            return {self.process.pid, *(child.pid for child in root.children(recursive=True))}
        except psutil.Error:
            return {self.process.pid}

    def last_checkpoint(self) -> dt.datetime | None:
        """When the job last checkpointed (None before its first checkpoint)."""
        return checkpoint_time(self.checkpoint_dir)

    def watch_host_memory(self) -> None:
        """The kernel killed a process of the job for its cgroup's memory limit: the job is over (as
        Kubernetes ends a container that ran out of memory); the rest of it is killed."""
        if not self.host_memory_exceeded and self.sandbox.oom_killed():
            self.host_memory_exceeded = True
            reason = f"exceeded its host memory limit ({self.memory_limit_mib} MiB)"
            log.warning("request %s: %s", self.request_id, reason)
            self._append(f"\nGPU Portal: stopped: {reason}\n")
            self.sandbox.kill(self.process.pid)

    def stop_by(self, deadline: dt.datetime, reason: str) -> None:
        """Checkpoint and stop by `deadline`: the deadline goes in the stop file, then SIGTERM with the
        time left; SIGKILL at the deadline."""
        if self.stop_deadline is not None:
            return
        identity = self.sandbox.identity
        try:
            write_file_in(self.checkpoint_dir, STOP_BY_FILE, deadline.isoformat(), identity and identity.uid)
        except OSError as error:
            log.warning("request %s: cannot write the stop file: %s", self.request_id, error)
        self.stop(max(0.0, (deadline - dt.datetime.now(dt.UTC)).total_seconds()), reason)

    def stop(self, grace_s: float, reason: str) -> None:
        """SIGTERM to every process of the job now, SIGKILL once `grace_s` has passed (`enforce_stop`)."""
        if self.stop_deadline is not None:
            return
        log.info("request %s: stopping (%s): SIGTERM, %s s grace", self.request_id, reason, grace_s)
        self.stop_reason = reason
        self.stop_deadline = time.monotonic() + grace_s
        self.sandbox.signal(self.process.pid, signal.SIGTERM)

    def enforce_stop(self) -> None:
        """Past the grace period, whatever of the job still runs is killed."""
        if self.stop_deadline is not None and time.monotonic() >= self.stop_deadline:
            self.process.poll()  # reap the leader, so a finished leader does not count as alive
            if self.sandbox.alive(self.process.pid):
                log.info("request %s: grace period over: SIGKILL", self.request_id)
                self.sandbox.kill(self.process.pid)


def running_requests(checkpoint_root: str) -> dict[int, set[str]]:
    """What this host runs for the portal whose checkpoints live under `checkpoint_root`: request id ->
    its runs ("session <id> on <card UUIDs>", one session per started job) among the live processes.
    A job's children share its session and environment, so two sessions for one request are two runs."""
    root = checkpoint_root.rstrip("/") + "/"
    running: dict[int, set[str]] = {}
    for process in psutil.process_iter(["pid", "status"]):
        try:
            if process.info["status"] == psutil.STATUS_ZOMBIE or process.name() == "bwrap":
                continue  # bubblewrap holds a job's namespaces; the job is what runs inside
            env = process.environ()
            session = os.getsid(process.info["pid"])
        except (psutil.Error, ProcessLookupError, PermissionError):
            continue
        if env.get("GPU_PORTAL_CHECKPOINT_DIR", "").startswith(root) and "GPU_PORTAL_REQUEST_ID" in env:
            run = f"session {session} on {env.get('CUDA_VISIBLE_DEVICES', '')}"
            running.setdefault(int(env["GPU_PORTAL_REQUEST_ID"]), set()).add(run)
    return running


def stop_stale_jobs(owner: str, grace_s: float) -> int:
    """Stop the jobs an earlier agent of this node and portal (`owner`, as job_environment writes it)
    started and left running (it was killed or crashed; its jobs, in sessions of their own, ran on):
    SIGTERM, SIGKILL after `grace_s`. Returns how many.

    Called before this agent starts anything, so every job found is stale: the portal may have moved
    its work elsewhere, and work still placed here is started again from its checkpoint."""
    groups = set()
    for process in psutil.process_iter():
        try:
            if process.environ().get(OWNER_VARIABLE) == owner:
                groups.add(os.getpgid(process.pid))
        except (psutil.Error, ProcessLookupError, PermissionError):
            continue
    for signum, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 0)):
        for group in groups:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signum)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and any(_group_exists(g) for g in groups):
            time.sleep(0.1)
    if groups:
        log.warning("stopped %d job(s) left running by an earlier agent: %s", len(groups), sorted(groups))
    return len(groups)


def _group_exists(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True

"""One allocation's command as a process on this node: its slice in the environment, its output
captured, and a stop that gives it a grace period to checkpoint before it is killed."""

import codecs
import contextlib
import datetime as dt
import logging
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

log = logging.getLogger(__name__)

READ_BYTES = 16 * 1024
MAX_UNSHIPPED_CHARS = 2 * 1024 * 1024  # more than the portal keeps of a log (1 MiB)
MPS_PIPE_DEFAULT = "/tmp/nvidia-mps"
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


def mps_available(pipe_dir: str | None = None) -> bool:
    """An MPS control daemon runs here: its control tool is installed and its pipe is in place."""
    pipe = Path(pipe_dir or os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or MPS_PIPE_DEFAULT)
    return shutil.which("nvidia-cuda-mps-control") is not None and (pipe / "control").exists()


def job_environment(
    work: dict, slices: list[Slice], *, mps: bool, base: dict | None = None, owner: str = ""
) -> dict:
    """The process's environment: its cards by UUID, its share, its checkpoint directory, the agent that
    started it (`owner`: node and portal, see stop_stale_jobs); with MPS, the limits the MPS server
    enforces (thread percentage from the share, pinned memory per card)."""
    env = dict(os.environ if base is None else base)
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
HOLD = [
    sys.executable,
    "-c",
    "import os, time\nagent = os.getppid()\nwhile os.getppid() == agent: time.sleep(1)",
]
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
    try:
        mtime = (checkpoint_dir / CHECKPOINT_MARKER).stat().st_mtime
    except OSError:
        return None
    return dt.datetime.fromtimestamp(mtime, tz=dt.UTC)


class Job:
    """A running command. Its output (stdout and stderr together) collects in memory until shipped."""

    def __init__(self, work: dict, *, mps: bool, workdir: str | None = None, owner: str = ""):
        self.request_id: int = work["request_id"]
        self.generation: int | None = work.get("generation")  # which run of the request this is
        self.slices = [
            Slice(g["uuid"], g["milli"], g["memory_mib"], g.get("mig_instance", "")) for g in work["gpus"]
        ]
        self.checkpoint_dir = Path(work["checkpoint_dir"])
        self.checkpoint_reported: dt.datetime | None = None  # the last checkpoint time the portal took
        self.stop_deadline: float | None = None
        self.stop_reason = ""
        self.shipped = work.get("log_offset", 0)  # where the portal's log of the request ends
        self._pending = ""  # output from `shipped` on
        self._lock = threading.Lock()
        try:
            self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
            (self.checkpoint_dir / STOP_BY_FILE).unlink(missing_ok=True)  # an earlier run's stop
        except OSError as error:
            log.warning(
                "request %s: no checkpoint dir %s: %s", self.request_id, work["checkpoint_dir"], error
            )
        command = work["command"].strip()
        if not command:
            self._append(HOLD_NOTE)
        self.process = subprocess.Popen(
            argv(command) if command else HOLD,
            cwd=workdir,
            env=job_environment(work, self.slices, mps=mps, owner=owner),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: a stop signals the whole job
        )
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
        """The job's processes are all gone and its output is read; its exit status is `exit_code`."""
        return self.process.poll() is not None and not self._group_alive() and not self._reader.is_alive()

    @property
    def exit_code(self) -> int | None:
        return self.process.returncode

    def pids(self) -> set[int]:
        """The job's process and everything it started (what NVML may show on its cards)."""
        try:
            root = psutil.Process(self.process.pid)
            return {self.process.pid, *(child.pid for child in root.children(recursive=True))}
        except psutil.Error:
            return {self.process.pid}

    def last_checkpoint(self) -> dt.datetime | None:
        """When the job last checkpointed (None before its first checkpoint)."""
        return checkpoint_time(self.checkpoint_dir)

    def stop_by(self, deadline: dt.datetime, reason: str) -> None:
        """Checkpoint and stop by `deadline`: the deadline goes in the stop file, then SIGTERM with the
        time left; SIGKILL at the deadline."""
        if self.stop_deadline is not None:
            return
        try:
            (self.checkpoint_dir / STOP_BY_FILE).write_text(deadline.isoformat())
        except OSError as error:
            log.warning("request %s: cannot write the stop file: %s", self.request_id, error)
        self.stop(max(0.0, (deadline - dt.datetime.now(dt.UTC)).total_seconds()), reason)

    def stop(self, grace_s: float, reason: str) -> None:
        """SIGTERM to the job's process group now, SIGKILL once `grace_s` has passed (`enforce_stop`)."""
        if self.stop_deadline is not None:
            return
        log.info("request %s: stopping (%s): SIGTERM, %s s grace", self.request_id, reason, grace_s)
        self.stop_reason = reason
        self.stop_deadline = time.monotonic() + grace_s
        self._signal(signal.SIGTERM)

    def enforce_stop(self) -> None:
        """Past the grace period, whatever of the job still runs is killed."""
        if self.stop_deadline is not None and time.monotonic() >= self.stop_deadline and self._group_alive():
            log.info("request %s: grace period over: SIGKILL", self.request_id)
            self._signal(signal.SIGKILL)

    def _group_alive(self) -> bool:
        self.process.poll()  # reap the leader, so a finished leader does not count as alive
        try:
            os.killpg(self.process.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def _signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):  # already gone
            os.killpg(self.process.pid, signum)


def running_requests(checkpoint_root: str) -> dict[int, set[str]]:
    """What this host runs for the portal whose checkpoints live under `checkpoint_root`: request id ->
    its runs ("session <id> on <card UUIDs>", one session per started job) among the live processes.
    A job's children share its session and environment, so two sessions for one request are two runs."""
    root = checkpoint_root.rstrip("/") + "/"
    running: dict[int, set[str]] = {}
    for process in psutil.process_iter(["pid", "status"]):
        try:
            if process.info["status"] == psutil.STATUS_ZOMBIE:
                continue
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

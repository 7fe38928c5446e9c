"""How a node runs its jobs apart from the agent and from each other (DESIGN: "a job is hostile
until proven otherwise").

Isolated (the default, which needs root): each job runs as its team's Unix identity (or the account
an operator mapped), in its own cgroup with its CPU weight, memory and pids limits, in private 0700
directories, and, where bubblewrap is installed, in its own mount, PID, IPC and UTS namespaces that
show it only its own directories, processes and cards. Unisolated (`--no-isolation`, for a
single-tenant node): the job runs as the agent's own user with none of that. Either way its
environment is an allow-list (agent.jobs.job_environment) and it runs in a work directory of its own.
"""

import contextlib
import os
import re
import shutil
import stat
from pathlib import Path

from agent.isolation.cgroups import CgroupError, Hierarchy, JobCgroup
from agent.isolation.files import private_directory
from agent.isolation.identity import Identities, Identity, IdentityError

DEFAULT_PIDS_MAX = 4096
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
NVIDIA_MAJOR = 195
# The NVIDIA control devices a CUDA process opens besides its cards (those not present are skipped).
NVIDIA_SHARED_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")
JOIN_AND_EXEC = 'while [ "$1" != -- ]; do echo $$ >"$1" || exit 125; shift; done; shift; exec "$@"'
SETPRIV = "/usr/bin/setpriv"


class IsolationUnavailable(Exception):
    """This host cannot isolate jobs: the message says why and what to do."""


class JobStartError(Exception):
    """The job could not be started as it must be: the message is for the job's log."""


class Isolation:
    """A node's way of running jobs; `work_root` holds each job's private work directory.

    `identities` None means unisolated. `hide`: more paths the namespaces replace by an empty
    directory (the embedded demo hides the portal's var directory). `path` and `environment`: the
    PATH and the variables every job on the node gets (the operator's --job-path and --job-env).
    """

    def __init__(
        self,
        *,
        work_root: str,
        identities: Identities | None = None,
        cgroups: Hierarchy | None = None,
        bwrap: str | None = None,
        hide: tuple[str, ...] = (),
        pids_max: int = DEFAULT_PIDS_MAX,
        path: str = DEFAULT_PATH,
        environment: dict | None = None,
    ):
        self.work_root = Path(work_root)
        self.path = path
        self.environment = dict(environment or {})
        self.identities = identities
        self.cgroups = cgroups
        self.bwrap = bwrap
        self.hide = tuple(Path(path) for path in hide)
        self.pids_max = pids_max
        self.node = ""

    @classmethod
    def detect(cls, *, work_root: str, identities: Identities, namespaces: bool = True, **options):
        """Full isolation on this host, or IsolationUnavailable saying what is missing."""
        if os.geteuid() != 0:
            raise IsolationUnavailable(
                "the agent must run as root to isolate jobs (it creates each team's Unix identity, "
                "cgroup and private directories); run it as root, or pass --no-isolation on a "
                "single-tenant node"
            )
        if not Path(SETPRIV).exists():
            raise IsolationUnavailable(f"{SETPRIV} is missing: install util-linux")
        cgroups = Hierarchy.detect()
        if cgroups is None:
            raise IsolationUnavailable(
                "no cgroup hierarchy with the cpu, memory and pids controllers is mounted under "
                "/sys/fs/cgroup; mount them, or pass --no-isolation on a single-tenant node"
            )
        bwrap = shutil.which("bwrap") if namespaces else None
        return cls(work_root=work_root, identities=identities, cgroups=cgroups, bwrap=bwrap, **options)

    @property
    def isolated(self) -> bool:
        return self.identities is not None

    def report(self) -> dict:
        """What the node tells the portal at registration (shown on its page and in the API)."""
        return {
            "mode": "isolated" if self.isolated else "unisolated",
            "namespaces": self.bwrap is not None,
            "cgroup": self.cgroups.describe() if self.cgroups else "none",
        }

    def attach(self, node: str) -> int:
        """This agent serves `node`: end what an earlier agent of it left in its cgroups (however the
        processes forked) and remove those cgroups. Returns how many there were."""
        self.node = re.sub(r"[^A-Za-z0-9._-]", "_", node)
        if self.cgroups is None:
            return 0
        stale = self.cgroups.stale_jobs(self.node)
        for cgroup in stale:
            cgroup.kill()
            cgroup.remove()
        return len(stale)

    def sandbox(self, work: dict, card_minors: list[int], *, mps_pipe: str | None = None) -> "Sandbox":
        """Everything one job needs before it starts: its identity, directories and cgroup."""
        request = f"request-{int(work['request_id'])}"
        workdir = self.work_root / _component(work.get("team", "")) / request
        checkpoint = Path(work["checkpoint_dir"])
        if not self.isolated:
            for directory in (workdir, checkpoint):
                directory.mkdir(parents=True, exist_ok=True)
            return Sandbox(self, None, workdir, checkpoint, None)
        try:
            identity = self.identities.for_work(work)
            private_directory(workdir, identity.uid, identity.gid)
            private_directory(checkpoint, identity.uid, identity.gid)
        except (IdentityError, OSError) as error:
            raise JobStartError(str(error)) from error
        cgroup = self.cgroups.job(self.node, f"{request}-g{work.get('generation') or 0}")
        devices = [(NVIDIA_MAJOR, minor) for minor in card_minors] + _shared_devices()
        try:
            cgroup.create(
                cpu_milli=work.get("cpu_milli") or 1000,
                memory_mib=work.get("memory_mib") or 4096,
                pids_max=self.pids_max,
                devices=devices,
            )
        except CgroupError as error:
            raise JobStartError(str(error)) from error
        return Sandbox(self, identity, workdir, checkpoint, cgroup, card_minors, mps_pipe)


class Sandbox:
    """One run of a job: who it runs as, where, in which cgroup; how to signal and end all of it."""

    def __init__(self, isolation, identity, workdir, checkpoint, cgroup, card_minors=(), mps_pipe=None):
        self.isolation = isolation
        self.identity: Identity | None = identity
        self.workdir: Path = workdir
        self.checkpoint: Path = checkpoint
        self.cgroup: JobCgroup | None = cgroup
        self.card_minors = list(card_minors)
        self.mps_pipe = mps_pipe

    def argv(self, command: list[str], cgroup: JobCgroup | None = None) -> list[str]:
        """The command as the job must run: join its cgroup (or `cgroup`, one inside it), enter its
        namespaces, drop to its identity (no capabilities, no way back: no_new_privs), then exec the
        command."""
        if self.identity is None:
            return command
        drop = [
            SETPRIV, f"--reuid={self.identity.uid}", f"--regid={self.identity.gid}", "--init-groups",
            "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--",
        ]  # fmt: skip
        inner = [*self._namespaces(), *drop, *command]
        join = (cgroup or self.cgroup).procs_files()
        return ["/bin/sh", "-c", JOIN_AND_EXEC, "sh", *join, "--", *inner]

    def inner_cgroup(self, name: str) -> JobCgroup | None:
        """A new cgroup inside the job's, for something started beside the job (an interactive
        session) that must end on its own with all it forked; None when unisolated."""
        if self.cgroup is None:
            return None
        cgroup = self.cgroup.child(re.sub(r"[^A-Za-z0-9._-]", "_", name))
        try:
            cgroup.create_child()
        except CgroupError as error:
            raise JobStartError(str(error)) from error
        return cgroup

    def _namespaces(self) -> list[str]:
        bwrap = self.isolation.bwrap
        if bwrap is None:
            return []
        args = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        args += ["--perms", "1777", "--tmpfs", "/tmp", "--perms", "1777", "--tmpfs", "/dev/shm"]
        for device in [*NVIDIA_SHARED_DEVICES, *(f"/dev/nvidia{minor}" for minor in self.card_minors)]:
            if Path(device).exists():
                args += ["--dev-bind", device, device]
        if Path("/dev/nvidia-caps").is_dir():  # MIG instances' access files
            args += ["--dev-bind", "/dev/nvidia-caps", "/dev/nvidia-caps"]
        hidden = {self.checkpoint.parent.parent, self.isolation.work_root, *self.isolation.hide}
        if self.isolation.identities is not None:
            hidden.add(self.isolation.identities.home_root)
        hidden = sorted((path for path in hidden if path.is_dir()), key=lambda p: len(p.parts))
        for path in hidden:
            args += ["--tmpfs", str(path)]
        own = [self.checkpoint, self.workdir, Path(self.identity.home)]
        if self.mps_pipe:
            own.append(Path(self.mps_pipe))
        # The jobs' PATH stays reachable where it lies in an emptied directory, read-only.
        shared = [Path(p) for p in self.isolation.path.split(":") if p and Path(p).is_absolute()]
        shared = [path for path in shared if any(root in path.parents for root in hidden)]
        for path, bind in [*((p, "--bind") for p in own), *((p, "--ro-bind") for p in shared)]:
            if not path.is_dir():
                continue
            # Its parents inside an emptied directory are made anew, passable as on the host.
            for parent in reversed(path.parents):
                if any(root in parent.parents for root in hidden):
                    args += ["--perms", "0711", "--dir", str(parent)]
            args += [bind, str(path), str(path)]
        args += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--new-session"]
        return [*args, "--chdir", str(self.workdir), "--"]

    @property
    def namespaced(self) -> bool:
        return self.identity is not None and self.isolation.bwrap is not None

    def signal(self, leader: int, signum: int) -> None:
        """Signal the whole job: every process in its cgroup, or its process group when unisolated."""
        if self.cgroup is not None:
            self.cgroup.signal(signum)
        else:
            _signal_group(leader, signum)

    def kill(self, leader: int) -> None:
        if self.cgroup is not None:
            self.cgroup.kill()
        else:
            _signal_group(leader, 9)

    def alive(self, leader: int) -> bool:
        """Any process of the job is left (in its cgroup; in its process group when unisolated)."""
        if self.cgroup is not None:
            return bool(self.cgroup.pids())
        try:
            os.killpg(leader, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def oom_killed(self) -> bool:
        return self.cgroup is not None and self.cgroup.oom_kills() > 0

    def exit_code(self, returncode: int) -> int:
        """The job's own exit status: bubblewrap reports a job killed by signal N as 128 + N, which is
        given back as -N, as without it."""
        if self.namespaced and 128 < returncode < 128 + 65:
            return 128 - returncode
        return returncode

    def close(self) -> None:
        """The job has ended: its cgroup and its scratch work directory go."""
        if self.cgroup is not None:
            self.cgroup.kill()
            self.cgroup.remove()
        shutil.rmtree(self.workdir, ignore_errors=True)  # fd-based: safe from links the job left


def _signal_group(leader: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(leader, signum)


def _shared_devices() -> list[tuple[int, int]]:
    found = []
    for device in NVIDIA_SHARED_DEVICES:
        try:
            status = os.stat(device)
        except FileNotFoundError:
            continue
        if stat.S_ISCHR(status.st_mode):
            found.append((os.major(status.st_rdev), os.minor(status.st_rdev)))
    return found


def _component(name: str) -> str:
    """A team slug as one path component."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name) or "_"

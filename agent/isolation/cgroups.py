"""Each job's own cgroup: its CPU weight from the request's cpu_milli, its memory limit from
memory_mib, a pids limit, and (cgroup v1's devices controller) only its own cards.

cgroup v2 where the unified hierarchy has the cpu, memory and pids controllers; otherwise the v1
controllers, each mounted on its own (as on a Debian host with a hybrid layout). Everything the job
forks stays in its cgroup, so a stop reaches every process however it forked (setsid, double fork).
"""

import contextlib
import os
import signal
import time
from pathlib import Path

ROOT_NAME = "gpu-portal"
NEEDED = ("cpu", "memory", "pids")
MIB = 1024 * 1024
# Character devices every job may open (cgroup v1 devices controller): null, zero, full, random,
# urandom, tty, ptmx and the pseudo-terminals.
BASIC_DEVICES = ("c 1:3 rwm", "c 1:5 rwm", "c 1:7 rwm", "c 1:8 rwm", "c 1:9 rwm", "c 5:0 rwm", "c 5:2 rwm",
                 "c 136:* rwm")  # fmt: skip
KILL_ROUNDS = 50


class CgroupError(Exception):
    """The job's cgroup could not be made or joined."""


def _mounts(mountinfo: str) -> list[tuple[str, str, set[str]]]:
    """(mount point, fs type, super options) of every cgroup mount."""
    found = []
    for line in Path(mountinfo).read_text().splitlines():
        fields = line.split()
        separator = fields.index("-")
        fstype, options = fields[separator + 1], fields[separator + 3]
        if fstype in ("cgroup", "cgroup2"):
            found.append((fields[4], fstype, set(options.split(","))))
    return found


class Hierarchy:
    """Where this host's job cgroups live: `version` 2 (one directory) or 1 (one per controller)."""

    def __init__(self, version: int, roots: dict[str, Path]):
        self.version = version
        self.roots = roots  # controller -> its mount point; v2: every controller -> the one mount

    @classmethod
    def detect(cls, mountinfo: str = "/proc/self/mountinfo") -> "Hierarchy | None":
        """v2 when the unified hierarchy has cpu, memory and pids; else v1 when all three are
        mounted; None when neither (the agent then refuses to isolate)."""
        mounts = _mounts(mountinfo)
        for point, fstype, _ in mounts:
            if fstype == "cgroup2":
                available = set(Path(point, "cgroup.controllers").read_text().split())
                if set(NEEDED) <= available:
                    return cls(2, {name: Path(point) for name in NEEDED})
        roots = {}
        for point, fstype, options in mounts:
            if fstype == "cgroup":
                for name in (*NEEDED, "freezer", "devices"):
                    if name in options:
                        roots.setdefault(name, Path(point))
        if set(NEEDED) <= set(roots):
            return cls(1, roots)
        return None

    def describe(self) -> str:
        return f"v{self.version}"

    def node_dirs(self, node: str) -> list[Path]:
        return sorted({root / ROOT_NAME / node for root in self.roots.values()})

    def job(self, node: str, name: str) -> "JobCgroup":
        return JobCgroup(self, {ctrl: root / ROOT_NAME / node / name for ctrl, root in self.roots.items()})

    def stale_jobs(self, node: str) -> list["JobCgroup"]:
        """The job cgroups an earlier agent of `node` left (it was killed, or crashed)."""
        names = set()
        for directory in self.node_dirs(node):
            if directory.is_dir():
                names |= {entry.name for entry in directory.iterdir() if entry.is_dir()}
        return [self.job(node, name) for name in sorted(names)]


class JobCgroup:
    """One job's cgroup, in every controller it uses."""

    def __init__(self, hierarchy: Hierarchy, paths: dict[str, Path]):
        self.hierarchy = hierarchy
        self.paths = paths
        self.main = paths["pids"]  # every controller holds the same processes: one is read

    def create(self, *, cpu_milli: int, memory_mib: int, pids_max: int, devices=None) -> None:
        """Make the cgroup with its limits. `devices`: (major, minor) of the cards the job may open,
        besides the basic devices (cgroup v1 only; None: no device rule)."""
        try:
            if self.hierarchy.version == 2:
                self._create_v2(cpu_milli, memory_mib, pids_max)
            else:
                self._create_v1(cpu_milli, memory_mib, pids_max, devices)
        except OSError as error:
            raise CgroupError(f"cannot make the job's cgroup {self.main}: {error}") from error

    def _create_v2(self, cpu_milli: int, memory_mib: int, pids_max: int) -> None:
        path = self.main
        enable = " ".join(f"+{name}" for name in NEEDED)
        for parent in (path.parents[2], path.parents[1], path.parent):  # the root, gpu-portal, the node
            parent.mkdir(exist_ok=True)
            _write(parent / "cgroup.subtree_control", enable)
        path.mkdir(exist_ok=True)
        _write(path / "cpu.weight", str(max(1, min(10000, cpu_milli * 100 // 1000))))
        _write(path / "memory.max", str(memory_mib * MIB))
        with contextlib.suppress(FileNotFoundError):  # no swap accounting: nothing to limit
            _write(path / "memory.swap.max", "0")
        _write(path / "memory.oom.group", "1")  # an out-of-memory kill ends the whole job
        _write(path / "pids.max", str(pids_max))

    def _create_v1(self, cpu_milli: int, memory_mib: int, pids_max: int, devices) -> None:
        for path in self.paths.values():
            path.mkdir(parents=True, exist_ok=True)
        _write(self.paths["cpu"] / "cpu.shares", str(max(2, cpu_milli * 1024 // 1000)))
        memory = self.paths["memory"]
        _write(memory / "memory.limit_in_bytes", str(memory_mib * MIB))
        if (memory / "memory.memsw.limit_in_bytes").exists():  # memory plus swap: no swapping past it
            _write(memory / "memory.memsw.limit_in_bytes", str(memory_mib * MIB))
        _write(self.paths["pids"] / "pids.max", str(pids_max))
        if "devices" in self.paths and devices is not None:
            rules = self.paths["devices"]
            _write(rules / "devices.deny", "a")
            for rule in (*BASIC_DEVICES, *(f"c {major}:{minor} rwm" for major, minor in devices)):
                _write(rules / "devices.allow", rule)

    def child(self, name: str) -> "JobCgroup":
        """A cgroup inside this one (an interactive session's, say): it counts against the job's
        limits and is reached by the job's stop, and can be ended on its own."""
        return JobCgroup(self.hierarchy, {ctrl: path / name for ctrl, path in self.paths.items()})

    def create_child(self) -> None:
        """Make this cgroup inside its job's: no limits of its own (the job's hold, hierarchically); on
        cgroup v1 its device rules are the job's (a child copies its parent's)."""
        try:
            for path in self.paths.values():
                path.mkdir(exist_ok=True)
        except OSError as error:
            raise CgroupError(f"cannot make the cgroup {self.main}: {error}") from error

    def procs_files(self) -> list[str]:
        """The files a process writes its pid to, to join the cgroup in every controller."""
        return sorted({str(path / "cgroup.procs") for path in self.paths.values()})

    def pids(self) -> set[int]:
        """Every process in the cgroup and in the cgroups inside it."""
        found = set()
        for directory in _tree(self.main):
            with contextlib.suppress(FileNotFoundError):
                found |= {int(pid) for pid in (directory / "cgroup.procs").read_text().split()}
        return found

    def oom_kills(self) -> int:
        """How many of the job's processes the kernel killed for its memory limit."""
        name = "memory.events" if self.hierarchy.version == 2 else "memory.oom_control"
        try:
            lines = (self.paths["memory"] / name).read_text().splitlines()
        except FileNotFoundError:
            return 0
        counts = dict(line.split() for line in lines if len(line.split()) == 2)
        return int(counts.get("oom_kill", 0))

    def signal(self, signum: int) -> None:
        """Signal every process of the job; the root-owned launcher (bubblewrap) is left to end with it."""
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError, FileNotFoundError):
                if os.stat(f"/proc/{pid}").st_uid != 0:
                    os.kill(pid, signum)

    def kill(self) -> None:
        """SIGKILL every process in the cgroup, the launcher too, frozen first where a freezer is, so
        that nothing forks in between."""
        if self.hierarchy.version == 2 and (self.main / "cgroup.kill").exists():
            _write(self.main / "cgroup.kill", "1")
            return
        freezer = self.paths.get("freezer")
        for _ in range(KILL_ROUNDS):
            pids = self.pids()
            if not pids:
                return
            if freezer is not None:
                _write(freezer / "freezer.state", "FROZEN")
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if freezer is not None:
                _write(freezer / "freezer.state", "THAWED")  # SIGKILL is acted on once thawed
            time.sleep(0.01)

    def remove(self) -> bool:
        """Remove the (empty) cgroup and those inside it; False while processes are still in them."""
        if self.pids():
            return False
        for path in sorted(self.paths.values(), reverse=True):
            for directory in reversed(_tree(path)):  # the innermost first
                with contextlib.suppress(FileNotFoundError):
                    directory.rmdir()
        return True


def _tree(path: Path) -> list[Path]:
    """`path` and every directory under it (the cgroups inside it), parents before their children."""
    found = [path]
    for directory in found:
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            found += sorted(entry for entry in directory.iterdir() if entry.is_dir())
    return found


def _write(path: Path, value: str) -> None:
    with open(path, "w") as control:
        control.write(value)

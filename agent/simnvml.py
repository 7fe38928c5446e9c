"""A simulated NVML with pynvml's function names, for machines without GPUs (the demo, the tests).

Like the real driver, it finds the processes on a card by itself: a process whose environment's
CUDA_VISIBLE_DEVICES names a simulated card's UUID runs on that card (the innermost one of a
process tree, as only the process that opens the device shows in NVML). Each process's memory and
utilization follow a noisy profile of its task type (GPU_PORTAL_TASK_TYPE in its environment),
scaled to its slice (GPU_PORTAL_GPU_MILLI, GPU_PORTAL_GPU_MEMORY_MIB); a process may instead claim
an exact amount of memory with `claim_memory` (what a demo job does to stand for its tensors).

The node's network is simulated with its cards (`SimulatedHost`): a GPU node running work moves its
data and gradients, which a demo host on loopback does not.

Only agent.nvml (and, for the host's network, agent.host) chooses between this module and the real
readings; nothing else in the agent knows.
"""

import os
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import psutil

from agent.host import HostMeter

MIB = 1024 * 1024
NVML_TEMPERATURE_GPU = 0
NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1
CLAIMS_DIR_ENV = "SIMNVML_CLAIMS_DIR"
PROC_SCAN_TTL_S = 0.5

# Per task type: (share of the slice's memory used, its noise), (share of the slice's compute used,
# its noise), ramp-up seconds. Training is steady and memory-heavy; inference is bursty and lighter.
PROFILES = {
    "training": ((0.70, 0.05), (0.92, 0.05), 4.0),
    "inference": ((0.35, 0.04), (0.45, 0.25), 1.0),
}
DEFAULT_PROFILE = ((0.50, 0.05), (0.60, 0.15), 2.0)
# Network bytes/s a job moves per whole card of its slice (data loading, gradient exchange,
# requests served), and what a node with any job on its cards moves besides (storage, collectives):
# a busy node reads well above the portal's default 500 MB/s floor, an idle one only its real traffic.
NETWORK_BYTES_PER_S_PER_CARD = {"training": 1_500_000_000, "inference": 400_000_000}
DEFAULT_NETWORK_BYTES_PER_S_PER_CARD = 800_000_000
BUSY_NODE_NETWORK_BYTES_PER_S = 600_000_000
RECEIVED_SHARE = 0.7  # of a job's traffic; the rest is sent
TDP_W = {"A100": 400, "H100": 700, "H200": 700, "4090": 450, "L4": 72}


class NVMLError(Exception):
    """pynvml's base error; `value` is the NVML return code."""

    def __init__(self, value: int = 999):
        super().__init__(f"NVML error {value}")
        self.value = value


class NVMLError_NotSupported(NVMLError):
    def __init__(self):
        super().__init__(3)


class NVMLError_NotFound(NVMLError):
    def __init__(self):
        super().__init__(6)


class NVMLError_Uninitialized(NVMLError):
    def __init__(self):
        super().__init__(1)


@dataclass(frozen=True)
class SimCard:
    """One simulated card: UUID, model name, memory in MiB; `mig` is None where MIG is not supported."""

    uuid: str
    name: str = "NVIDIA A100-SXM4-80GB"
    memory_mib: int = 81920
    mig: bool | None = False


@dataclass
class _Handle:
    card: SimCard
    temperature_c: float = 34.0
    last_read: float = field(default_factory=time.monotonic)


def claims_dir(env=os.environ, uid: int | None = None) -> str:
    """Where a process's claims go, as that process sees its file system: its SIMNVML_CLAIMS_DIR, or
    a folder of its user's in its temporary directory (a sandboxed job's is its own /tmp)."""
    uid = os.geteuid() if uid is None else uid
    return env.get(CLAIMS_DIR_ENV) or f"{env.get('TMPDIR') or '/tmp'}/simnvml-claims-{uid}"


def claim_memory(mib: int) -> None:
    """Say that this process now holds `mib` MiB on its simulated cards."""
    folder = Path(claims_dir())
    folder.mkdir(parents=True, exist_ok=True)
    (folder / str(os.getpid())).write_text(f"{int(mib)} {_start_ticks(Path('/proc'), os.getpid())}")


class SimulatedNvml:
    """One simulated host's cards, answering the pynvml calls the agent makes."""

    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_NotFound = NVMLError_NotFound
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU
    NVML_DEVICE_MIG_ENABLE = NVML_DEVICE_MIG_ENABLE

    def __init__(self, cards, *, seed: int | None = None, proc_root: str = "/proc"):
        self._handles = [_Handle(card) for card in cards]
        self._seed = seed
        self._proc_root = Path(proc_root)
        self._initialized = False
        self._lock = threading.Lock()

    # Library

    def nvmlInit(self) -> None:
        self._initialized = True

    def nvmlShutdown(self) -> None:
        self._initialized = False

    def nvmlSystemGetDriverVersion(self) -> str:
        return "simulated"

    def nvmlDeviceGetCount(self) -> int:
        self._check()
        return len(self._handles)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._check()
        if not 0 <= index < len(self._handles):
            raise NVMLError(2)
        return self._handles[index]

    # Card facts

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        return handle.card.uuid

    def nvmlDeviceGetName(self, handle: _Handle) -> str:
        return handle.card.name

    def nvmlDeviceGetMinorNumber(self, handle: _Handle) -> int:
        return self._handles.index(handle)  # /dev/nvidia<minor>, absent on a host without GPUs

    def nvmlDeviceGetMigMode(self, handle: _Handle) -> list[int]:
        if handle.card.mig is None:
            raise NVMLError_NotSupported()
        mode = NVML_DEVICE_MIG_ENABLE if handle.card.mig else NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    # Readings

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle, version=None) -> SimpleNamespace:
        total = handle.card.memory_mib * MIB
        used = min(total, sum(p.usedGpuMemory for p in self.nvmlDeviceGetComputeRunningProcesses(handle)))
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> SimpleNamespace:
        samples = self._process_samples(handle)
        gpu = min(100, round(sum(s.smUtil for s in samples)))
        memory = min(100, round(sum(s.memUtil for s in samples)))
        return SimpleNamespace(gpu=gpu, memory=memory)

    def nvmlDeviceGetPowerUsage(self, handle: _Handle) -> int:
        """Milliwatts: idle draw plus the rest of the card's TDP in proportion to its utilization."""
        tdp = next((watts for key, watts in TDP_W.items() if key in handle.card.name), 300)
        util = self.nvmlDeviceGetUtilizationRates(handle).gpu / 100
        idle = tdp * 0.15
        watts = idle + (tdp - idle) * util * self._noise(1.0, 0.03, handle.card.uuid, "power")
        return max(0, round(watts * 1000))

    def nvmlDeviceGetTemperature(self, handle: _Handle, sensor: int) -> int:
        """°C, moving towards 34 + 48 * utilization with the card's thermal lag."""
        target = 34 + 48 * self.nvmlDeviceGetUtilizationRates(handle).gpu / 100
        with self._lock:
            now = time.monotonic()
            step = min(1.0, (now - handle.last_read) / 10)
            handle.last_read = now
            handle.temperature_c += (target - handle.temperature_c) * step
            return round(handle.temperature_c)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: _Handle) -> list[SimpleNamespace]:
        return [
            SimpleNamespace(pid=pid, usedGpuMemory=self._memory_mib(handle, pid, env) * MIB)
            for pid, env in _processes_on(self._proc_root, handle.card.uuid)
        ]

    def nvmlDeviceGetProcessUtilization(self, handle: _Handle, last_seen_timestamp: int) -> list:
        samples = self._process_samples(handle)
        if not samples:
            raise NVMLError_NotFound()
        return samples

    # The simulation

    def _check(self) -> None:
        if not self._initialized:
            raise NVMLError_Uninitialized()

    def _process_samples(self, handle: _Handle) -> list[SimpleNamespace]:
        stamp = int(time.time() * 1_000_000)
        samples = []
        for pid, env in _processes_on(self._proc_root, handle.card.uuid):
            (_, _), (busy, noise), ramp_s = PROFILES.get(env.get("GPU_PORTAL_TASK_TYPE"), DEFAULT_PROFILE)
            share = _share(env)
            sm = 100 * share * _ramp(pid, ramp_s) * self._noise(busy, noise, pid, handle.card.uuid, "sm")
            mem = sm * 0.6 * self._noise(1.0, 0.1, pid, handle.card.uuid, "mem-util")
            samples.append(
                SimpleNamespace(
                    pid=pid, timeStamp=stamp, smUtil=round(sm), memUtil=round(mem), encUtil=0, decUtil=0
                )
            )
        return samples

    def host_meter(self) -> "SimulatedHost":
        """The host's meter for these cards: the real one's readings plus the simulated jobs' traffic."""
        return SimulatedHost(self)

    def network_bytes_per_s(self) -> int:
        """What this host's jobs move over the network now (not an NVML call: SimulatedHost reads it)."""
        jobs = {
            pid: env
            for handle in self._handles
            for pid, env in _processes_on(self._proc_root, handle.card.uuid)
        }
        if not jobs:
            return 0
        moved = BUSY_NODE_NETWORK_BYTES_PER_S * self._noise(1.0, 0.05, "network")
        for pid, env in jobs.items():
            rate = NETWORK_BYTES_PER_S_PER_CARD.get(
                env.get("GPU_PORTAL_TASK_TYPE"), DEFAULT_NETWORK_BYTES_PER_S_PER_CARD
            )
            cards = len(env["CUDA_VISIBLE_DEVICES"].split(","))
            moved += rate * _share(env) * cards * self._noise(1.0, 0.1, pid, "network")
        return round(moved)

    def _memory_mib(self, handle: _Handle, pid: int, env: dict) -> int:
        claimed = _claimed_mib(self._proc_root, pid, env)
        if claimed is not None:
            return min(claimed, handle.card.memory_mib)
        (used, noise), _, ramp_s = PROFILES.get(env.get("GPU_PORTAL_TASK_TYPE"), DEFAULT_PROFILE)
        limit = _int(env.get("GPU_PORTAL_GPU_MEMORY_MIB")) or round(handle.card.memory_mib * _share(env))
        return max(
            1, round(limit * _ramp(pid, ramp_s) * self._noise(used, noise, pid, handle.card.uuid, "memory"))
        )

    def _noise(self, mean: float, spread: float, *key) -> float:
        """Gaussian noise, the same for every read of one thing within one second (as NVML's sampling
        period makes readings stable), so a card's memory and its processes' agree."""
        rng = random.Random(f"{self._seed}-{'-'.join(map(str, key))}-{int(time.time())}")
        return max(0.0, min(1.0, rng.gauss(mean, spread)))


class SimulatedHost:
    """The host's readings as agent.host.HostMeter gives them, with the simulated jobs' network traffic
    added to the real one (CPU stays the real host's)."""

    def __init__(self, nvml: SimulatedNvml):
        self.nvml = nvml
        self.real = HostMeter()

    def read(self) -> dict:
        reading = self.real.read()
        moved = self.nvml.network_bytes_per_s()
        received = round(moved * RECEIVED_SHARE)
        reading["net_rx_bytes_per_s"] += received
        reading["net_tx_bytes_per_s"] += moved - received
        return reading


def _ramp(pid: int, ramp_s: float) -> float:
    """0.1 → 1 over the process's first `ramp_s` seconds: a job loads its model, then works."""
    try:
        age = time.time() - psutil.Process(pid).create_time()
    except psutil.Error:
        age = ramp_s
    return min(1.0, 0.1 + 0.9 * age / ramp_s)


def _share(env: dict) -> float:
    milli = _int(env.get("GPU_PORTAL_GPU_MILLI"))
    return min(1.0, milli / 1000) if milli else 1.0


def _int(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _claimed_mib(proc_root: Path, pid: int, env: dict) -> int | None:
    """The memory process `pid` claimed, read where it wrote it: through its own root (its mount
    namespace) under its own pid (its PID namespace's), as a driver sees a sandboxed process. A claim
    left by an earlier process of the same pid is not its own: the start times differ."""
    process = proc_root / str(pid)
    try:
        status = (process / "status").read_text()
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        own_pid = fields["NSpid"].split()[-1]
        uid = int(fields["Uid"].split()[1])
        path = f"{process}/root/{claims_dir(env, uid).lstrip('/')}/{own_pid}"
        mib, started = Path(path).read_text().split()
        return int(mib) if started == _start_ticks(proc_root, pid) else None
    except (OSError, KeyError, ValueError, IndexError):
        return None


def _start_ticks(proc_root: Path, pid: int) -> str:
    """The process's start time in clock ticks since boot (the same in every PID namespace)."""
    return (proc_root / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[19]


_scan_lock = threading.Lock()
_scan: dict = {"at": 0.0, "root": None, "found": []}


def _processes_on(proc_root: Path, uuid: str) -> list[tuple[int, dict]]:
    """(pid, environment) of the innermost processes whose CUDA_VISIBLE_DEVICES names `uuid`."""
    return [
        (pid, env) for pid, env in _gpu_processes(proc_root) if uuid in env["CUDA_VISIBLE_DEVICES"].split(",")
    ]


def _gpu_processes(proc_root: Path) -> list[tuple[int, dict]]:
    """Every readable process with CUDA_VISIBLE_DEVICES set, none of which is the parent of another;
    one scan of /proc serves every simulated host in this process for PROC_SCAN_TTL_S."""
    with _scan_lock:
        now = time.monotonic()
        if _scan["root"] == proc_root and now - _scan["at"] < PROC_SCAN_TTL_S:
            return _scan["found"]
        found, parents = {}, set()
        for entry in proc_root.iterdir() if proc_root.exists() else ():
            if not entry.name.isdigit():
                continue
            try:
                raw = (entry / "environ").read_bytes()
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            env = dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)
            if not env.get("CUDA_VISIBLE_DEVICES") or _is_zombie(stat):
                continue
            found[int(entry.name)] = env
            parents.add(int(stat.rsplit(")", 1)[1].split()[1]))
        result = sorted((pid, env) for pid, env in found.items() if pid not in parents)
        _scan.update(at=now, root=proc_root, found=result)
        return result


def _is_zombie(stat: str) -> bool:
    return stat.rsplit(")", 1)[1].split()[0] in {"Z", "X"}


# Module level: `from agent import simnvml as pynvml` works like the real module, on the cards last
# given to configure() (by default one simulated A100).
_default = SimulatedNvml([SimCard(uuid="GPU-00000000-0000-4000-8000-000000000000")])


def configure(cards, *, seed: int | None = None) -> SimulatedNvml:
    global _default
    _default = SimulatedNvml(cards, seed=seed)
    return _default


def __getattr__(name: str):
    if name.startswith("nvml"):
        return getattr(_default, name)
    raise AttributeError(name)

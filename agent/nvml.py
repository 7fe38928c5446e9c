"""Reading the node's GPUs through NVML: the one place that chooses the real driver (pynvml, from the
nvidia-ml-py package) or the simulated one (agent.simnvml), and the reads every other part uses.

Units as the portal takes them: memory in MiB, power in milliwatts, util and temperature whole.
"""

from dataclasses import dataclass

MIB = 1024 * 1024


def load_nvml(simulated_cards=None, *, seed: int | None = None):
    """pynvml, initialized; or, given simulated cards (agent.simnvml.SimCard), a simulated NVML on them."""
    if simulated_cards is not None:
        from agent.simnvml import SimulatedNvml

        nvml = SimulatedNvml(simulated_cards, seed=seed)
    else:
        import pynvml as nvml
    nvml.nvmlInit()
    return nvml


@dataclass(frozen=True)
class Card:
    index: int
    uuid: str
    model: str
    memory_mib: int
    mig_mode: str  # enabled, disabled or unsupported
    minor: int  # its device file: /dev/nvidia<minor>

    def registration(self) -> dict:
        return {
            "uuid": self.uuid,
            "model": self.model,
            "memory_mib": self.memory_mib,
            "mig_mode": self.mig_mode,
        }


@dataclass(frozen=True)
class GpuProcess:
    """A process NVML sees on a card: its GPU memory (MiB) and, when NVML has a recent sample, SM util %."""

    pid: int
    uuid: str
    memory_mib: int
    sm_util_percent: int | None


def read_cards(nvml) -> list[Card]:
    cards = []
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        cards.append(
            Card(
                index=index,
                uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                model=_text(nvml.nvmlDeviceGetName(handle)),
                memory_mib=nvml.nvmlDeviceGetMemoryInfo(handle).total // MIB,
                mig_mode=_mig_mode(nvml, handle),
                minor=nvml.nvmlDeviceGetMinorNumber(handle),
            )
        )
    return cards


def read_samples(nvml) -> list[dict]:
    """Each card's reading as the portal's sample ingest takes it."""
    readings = []
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        readings.append(
            {
                "uuid": _text(nvml.nvmlDeviceGetUUID(handle)),
                "gpu_util_percent": int(nvml.nvmlDeviceGetUtilizationRates(handle).gpu),
                "memory_used_mib": int(nvml.nvmlDeviceGetMemoryInfo(handle).used) // MIB,
                "power_mw": int(nvml.nvmlDeviceGetPowerUsage(handle)),
                "temperature_c": int(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)),
            }
        )
    return readings


def read_processes(nvml) -> list[GpuProcess]:
    """Every compute process on every card, with its memory and its latest SM utilization."""
    found = []
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        uuid = _text(nvml.nvmlDeviceGetUUID(handle))
        try:
            utils = {s.pid: int(s.smUtil) for s in nvml.nvmlDeviceGetProcessUtilization(handle, 0)}
        except nvml.NVMLError:  # NotFound: no sample yet; NotSupported on some cards
            utils = {}
        for process in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
            used = process.usedGpuMemory  # None where the driver cannot tell (NVML_VALUE_NOT_AVAILABLE)
            found.append(
                GpuProcess(
                    pid=int(process.pid),
                    uuid=uuid,
                    memory_mib=int(used or 0) // MIB,
                    sm_util_percent=utils.get(process.pid),
                )
            )
    return found


def _mig_mode(nvml, handle) -> str:
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(handle)
    except nvml.NVMLError_NotSupported:
        return "unsupported"
    return "enabled" if current == nvml.NVML_DEVICE_MIG_ENABLE else "disabled"


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)

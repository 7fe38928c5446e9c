"""The simulated NVML answers as pynvml does, and its cards follow the processes that run on them."""

import inspect
import os
import subprocess
import sys
import time

import psutil
import pynvml
import pytest

from agent import simnvml
from agent.host import HostMeter, host_meter
from agent.nvml import read_cards, read_processes, read_samples
from agent.simnvml import SimCard, SimulatedHost, SimulatedNvml
from tests.agent_fixtures import REPO
from tests.waiting import wait_until

CALLS = [
    "nvmlInit",
    "nvmlShutdown",
    "nvmlSystemGetDriverVersion",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetName",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetProcessUtilization",
]


@pytest.mark.parametrize("name", CALLS)
def test_each_call_has_pynvmls_name_and_arguments(name):
    real = list(inspect.signature(getattr(pynvml, name)).parameters)
    simulated = list(inspect.signature(getattr(SimulatedNvml, name)).parameters)[1:]  # less self

    assert len(simulated) == len(real)


def test_the_module_itself_stands_in_for_pynvml():
    simnvml.configure([SimCard(uuid="GPU-module-0", mig=True)])
    simnvml.nvmlInit()

    handle = simnvml.nvmlDeviceGetHandleByIndex(0)

    assert simnvml.nvmlDeviceGetUUID(handle) == "GPU-module-0"
    assert simnvml.nvmlDeviceGetMigMode(handle) == [1, 1]


def test_calls_before_init_fail_like_nvml():
    with pytest.raises(simnvml.NVMLError):
        SimulatedNvml([SimCard(uuid="GPU-x")]).nvmlDeviceGetCount()


def test_cards_report_mig_mode_or_its_absence():
    nvml = SimulatedNvml(
        [SimCard("GPU-a", mig=None), SimCard("GPU-b", mig=False), SimCard("GPU-c", mig=True)]
    )
    nvml.nvmlInit()

    assert [card.mig_mode for card in read_cards(nvml)] == ["unsupported", "disabled", "enabled"]


def test_an_idle_card_reads_zero_and_a_process_on_it_moves_util_memory_power(tmp_path):
    nvml = SimulatedNvml([SimCard("GPU-busy", "NVIDIA A100-SXM4-80GB"), SimCard("GPU-idle")], seed=1)
    nvml.nvmlInit()
    env = {
        **os.environ,
        "CUDA_VISIBLE_DEVICES": "GPU-busy",
        "GPU_PORTAL_TASK_TYPE": "training",
        "GPU_PORTAL_GPU_MILLI": "500",
        "GPU_PORTAL_GPU_MEMORY_MIB": "40960",
        "GPU_PORTAL_CHECKPOINT_DIR": str(tmp_path),  # not the repository's root
    }
    job = subprocess.Popen(
        [sys.executable, "-m", "agent.demo_job", "--seconds", "30"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    try:
        _, _, ramp_s = simnvml.PROFILES["training"]
        wait_until(lambda: job_age(job) >= ramp_s, what="the job past the training profile's ramp-up")
        meter = host_meter(nvml)
        while True:  # all reads within one second: the simulator's noise changes each second
            second = int(time.time())
            busy, idle = read_samples(nvml)
            (process,) = read_processes(nvml)
            host = meter.read()
            moved = nvml.network_bytes_per_s()
            if int(time.time()) == second:
                break
    finally:
        job.kill()
        job.wait()

    assert (idle["gpu_util_percent"], idle["memory_used_mib"]) == (0, 0)
    assert 30 <= busy["gpu_util_percent"] <= 55  # half a card, working hard
    assert 20000 <= busy["memory_used_mib"] <= 40960  # most of its slice, never past it here
    assert busy["power_mw"] > idle["power_mw"]
    assert (process.pid, process.uuid, process.memory_mib) == (job.pid, "GPU-busy", busy["memory_used_mib"])
    # The node moves data while the job runs: above the portal's default 500 MB/s floor, in and out.
    assert 1_000_000_000 <= moved <= 1_700_000_000  # 600 MB/s for a busy node + half a card's 1.5 GB/s
    assert host["net_rx_bytes_per_s"] + host["net_tx_bytes_per_s"] >= moved
    assert host["net_rx_bytes_per_s"] > host["net_tx_bytes_per_s"] > 0
    # The job has ended: from the simulator's next look at the processes, only the host's own traffic.
    wait_until(lambda: nvml.network_bytes_per_s() == 0, timeout_s=10, what="no job traffic")


def job_age(job: subprocess.Popen) -> float:
    """Seconds since the job started, as the simulator's ramp-up counts them."""
    return time.time() - psutil.Process(job.pid).create_time()


def test_the_host_meter_is_psutils_on_real_nvml_and_adds_the_jobs_traffic_on_simulated_cards():
    assert type(host_meter(pynvml)) is HostMeter
    assert type(host_meter(SimulatedNvml([SimCard("GPU-a")]))) is SimulatedHost

"""The node's host through psutil: CPU busy and network throughput since the previous reading."""

import time

import psutil


class HostMeter:
    """Each read() gives the CPU busy % and the bytes per second received and sent since the last one."""

    def __init__(self):
        psutil.cpu_percent(interval=None)  # the first call only starts psutil's own interval
        self._at = time.monotonic()
        self._net = psutil.net_io_counters()

    def read(self) -> dict:
        now, net = time.monotonic(), psutil.net_io_counters()
        elapsed = max(now - self._at, 1e-3)
        reading = {
            "cpu_percent": min(100, round(psutil.cpu_percent(interval=None))),
            "net_rx_bytes_per_s": max(0, round((net.bytes_recv - self._net.bytes_recv) / elapsed)),
            "net_tx_bytes_per_s": max(0, round((net.bytes_sent - self._net.bytes_sent) / elapsed)),
        }
        self._at, self._net = now, net
        return reading


def host_meter(nvml):
    """The meter for the host whose cards `nvml` reads: psutil's, or the one simulated cards bring
    along (agent.simnvml.SimulatedNvml.host_meter: psutil's plus the simulated jobs' traffic)."""
    own_meter = getattr(nvml, "host_meter", None)
    return own_meter() if own_meter else HostMeter()

"""CPU seconds used by process trees and PostgreSQL backends, read from /proc (Linux), so a benchmark
can say where a machine's cores went: per process kind, and per call when divided by the calls served."""

import os
from pathlib import Path

TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of one live process (its threads included); 0 when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S  # utime, stime


def tree_cpu(root: int) -> dict[int, float]:
    """CPU seconds of `root` and of every live descendant (an ASGI server's or Celery's pool), by pid."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(") ", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = {}, [root]
    while todo:
        pid = todo.pop()
        found[pid] = cpu_seconds(pid)
        todo.extend(children.get(pid, []))
    return found


class CpuMeter:
    """CPU used between start() and stop() per name. Each source returns {process id: CPU seconds so
    far} for the processes it covers now; a process that appears meanwhile counts whole, one that is
    gone at the end counts only if its source still reports it (e.g. a killed process's last reading)."""

    def __init__(self, sources: dict):
        self.sources = sources
        self.began: dict[str, dict[int, float]] = {}

    def start(self) -> None:
        self.began = {name: read() for name, read in self.sources.items()}

    def stop(self) -> dict[str, float]:
        used = {}
        for name, read in self.sources.items():
            before, now = self.began.get(name, {}), read()
            used[name] = round(sum(seconds - before.get(pid, 0.0) for pid, seconds in now.items()), 2)
        return used

"""Hostile jobs: what a job on a shared node may try, and whether it got through.

A scenario runs two victims of one team (jobs that keep data in their checkpoint directories, then
sleep) and one attacker job per attack of another team, all at once on one node, through a `Driver`
(the real agent's portal, or the embedded demo's API). Every job is a shell command: a team's
identity may not be able to run the test's own Python. `run_scenario` returns, per attack, what
happened ("contained", or "got through" with what was seen), to compare with a table.
"""

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

MEMORY_MIB = 64  # the memory attacker's host memory; it allocates twice as much
PIDS_MAX = 128  # the node's per-job pids limit in these scenarios
SLEEP_MARK = "4321"  # the victims sleep this long: found by it in the process list
VICTIM = f'echo victim-data > "$GPU_PORTAL_CHECKPOINT_DIR/data"; echo running; exec sleep {SLEEP_MARK}'
TERMINAL = {"succeeded", "failed", "cancelled", "preempted", "released"}
TIMEOUT_S = 90
STOP_TIMEOUT_S = 10  # the agent ends a stopped job within this (its grace period is 1 s)

ATTACKS = {
    "environment": "prints its environment",
    "protected-file": "reads the node credential file (the demo: the portal's database)",
    "checkpoint": "reads, writes or deletes another team's checkpoint directory",
    "signal": "signals another team's job",
    "memory": "allocates twice its memory_mib",
    "fork-bomb": "forks 10,000 processes",
    "escape": "escapes its stop with setsid and a double fork",
    "write-outside": "writes outside its directories",
    "proc-environ": "reads another job's /proc/<pid>/environ",
    "process-list": "sees other teams' processes",
}
# Where a job ends by itself, the attack is judged once it has; these keep running until released.
RUNS_UNTIL = {"fork-bomb": "forked", "escape": "escaped"}


@dataclass
class Target:
    """What the attacks aim at."""

    victim_dir: str  # the victim's checkpoint directory
    victim_pid: int  # the victim's sleep, as the host sees it
    signal_pid: int  # the other victim's, for the signal attack
    secrets: dict[str, str]  # name -> a secret value the agent or portal holds in its environment
    protected_file: str  # the node credential file, or the portal's database
    protected_marker: str  # a text only that file holds
    outside: list[str]  # paths a job must not be able to create
    pids_max: int = PIDS_MAX  # the node's per-job limit
    forks: int = 10_000  # an unisolated node runs fewer (enough to pass the limit), not to harm the host


def commands(target: Target) -> dict[str, tuple[str, int]]:
    """Each attack's shell command and its request's host memory (MiB)."""
    touches = "; ".join(f"touch {path} && echo created {path}" for path in target.outside)
    victim = target.victim_dir
    return {
        "environment": ("env; echo done", 512),
        "protected-file": (f"head -c 100 {target.protected_file}; echo; echo done", 512),
        "checkpoint": (f"cat {victim}/data; echo x > {victim}/pwned; rm -f {victim}/data; echo done", 512),
        "signal": (f"kill -KILL {target.signal_pid}; echo kill=$?; echo done", 512),
        "memory": (f"head -c {2 * MEMORY_MIB}M /dev/zero | tail >/dev/null && echo survived", MEMORY_MIB),
        # The inner shell forks until it is refused (which ends it), the outer one then reports.
        "fork-bomb": (
            f'sh -c "i=0; while [ \\$i -lt {target.forks} ]; do sleep 300 & i=\\$((i + 1)); done" 2>&-; '
            "echo forked; exec sleep 300",
            2048,  # room for the demo's 4,096 processes: the pids limit, not the memory, is under test
        ),
        "escape": ('setsid sh -c "sleep 300 & exit"; echo escaped; exec sleep 300', 512),
        "write-outside": (f"{touches}; echo done", 512),
        "proc-environ": (f"tr '\\0' '\\n' < /proc/{target.victim_pid}/environ | grep CHECK; echo done", 512),
        "process-list": ("ps -eo pid,user,args; echo done", 512),
    }


class Driver:
    """How a scenario reaches the portal: place a team's job, read its log and state, release it."""

    checkpoint_root: str

    def place(self, attacker: bool, command: str, memory_mib: int) -> int:
        raise NotImplementedError

    def log(self, request_id: int) -> str:
        raise NotImplementedError

    def state(self, request_id: int) -> tuple[str, list[str]]:
        """(its state, the reasons of its events)."""
        raise NotImplementedError

    def release(self, request_id: int) -> None:
        raise NotImplementedError

    def still_running(self) -> bool:
        """The agent (or the portal hosting it) is still up."""
        raise NotImplementedError


def run_scenario(driver: Driver, make_target) -> dict[str, str]:
    """Place the victims, then every attack at once; returns {attack: "contained" | "got through: …"}.
    `make_target(victim_dir, victim_pid, signal_pid)` -> Target."""
    victim, victim_pid, victim_dir = _start_victim(driver)
    signal_victim, signal_pid, _ = _start_victim(driver)
    victim_started = psutil.Process(victim_pid).create_time()
    target = make_target(victim_dir, victim_pid, signal_pid)
    # The simulated cards count every process naming them as a GPU user (the agent's GPU memory
    # watchdog would stop a job of many): these attacks are on the host, so they name none.
    placed = {name: driver.place(True, f"unset CUDA_VISIBLE_DEVICES; {command}", memory)
              for name, (command, memory) in commands(target).items()}  # fmt: skip
    for name, request_id in placed.items():
        if name in RUNS_UNTIL:
            wait_for(lambda r=request_id, n=name: RUNS_UNTIL[n] in driver.log(r), f"{name}: its job running")
        else:
            wait_for(lambda r=request_id: driver.state(r)[0] in TERMINAL, f"{name}: its job ended")
    forked = len(processes_of(placed["fork-bomb"], driver.checkpoint_root))
    for name in RUNS_UNTIL:
        driver.release(placed[name])
    escaped = _left_after_stop(placed["escape"], driver.checkpoint_root)
    assert driver.still_running(), "the agent died"
    alive = psutil.pid_exists(victim_pid) and psutil.Process(victim_pid).create_time() == victim_started
    assert alive, "a job of another team died: the other jobs must keep running"
    outcomes = _judge(placed, driver, target, forked, escaped)
    for request_id in (victim, signal_victim):
        if driver.state(request_id)[0] not in TERMINAL:  # a victim the signal got through to has ended
            driver.release(request_id)
    return outcomes


def _judge(placed: dict[str, int], driver: Driver, target: Target, forked: int, escaped: int) -> dict:
    def log(name):
        return driver.log(placed[name])

    def verdict(got_through, seen=""):
        return f"got through{': ' + str(seen) if seen else ''}" if got_through else "contained"

    leaked = [name for name, value in target.secrets.items() if value in log("environment")]
    victim = Path(target.victim_dir)
    touched = [
        what
        for what, happened in (
            ("read", "victim-data" in log("checkpoint")),
            ("wrote", (victim / "pwned").exists()),
            ("deleted", not (victim / "data").exists()),
        )
        if happened
    ]
    state, reasons = driver.state(placed["memory"])
    killed = state == "failed" and f"exceeded its host memory limit ({MEMORY_MIB} MiB)" in reasons
    created = [path for path in target.outside if Path(path).exists()]
    return {
        "environment": verdict(leaked, leaked),
        "protected-file": verdict(target.protected_marker in log("protected-file")),
        "checkpoint": verdict(touched, touched),
        "signal": verdict(not psutil.pid_exists(target.signal_pid)),
        "memory": verdict(not killed or "survived" in log("memory"), f"{state}, {reasons[-1:]}"),
        "fork-bomb": verdict(forked > target.pids_max, f"{forked} processes at once"),
        "escape": verdict(escaped, f"{escaped} left after the stop"),
        "write-outside": verdict(created, created),
        "proc-environ": verdict("request-" in log("proc-environ")),
        "process-list": verdict(f"sleep {SLEEP_MARK}" in log("process-list")),
    }


def processes_of(request_id: int, checkpoint_root: str) -> list[psutil.Process]:
    """The host's processes running for the request (by their environment), bubblewrap's excluded."""
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            env = process.environ()
            if (
                process.name() != "bwrap"
                and env.get("GPU_PORTAL_REQUEST_ID") == str(request_id)
                and env.get("GPU_PORTAL_CHECKPOINT_DIR", "").startswith(checkpoint_root)
            ):
                found.append(process)
    return found


def kill_leftovers(checkpoint_root: str) -> None:
    """Whatever a scenario left running under its checkpoint root (an unisolated node's escapees)."""
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error, ProcessLookupError):  # it may end meanwhile
            if process.environ().get("GPU_PORTAL_CHECKPOINT_DIR", "").startswith(checkpoint_root):
                os.kill(process.pid, signal.SIGKILL)


def _start_victim(driver: Driver) -> tuple[int, int, str]:
    """(request id, host pid of its sleep, its checkpoint directory) of a running victim."""
    request_id = driver.place(False, VICTIM, 256)

    def sleeping():
        for process in processes_of(request_id, driver.checkpoint_root):
            with contextlib.suppress(psutil.Error):
                if process.cmdline()[-1:] == [SLEEP_MARK]:
                    return process.pid, process.environ()["GPU_PORTAL_CHECKPOINT_DIR"]
        return None

    pid, directory = wait_for(sleeping, f"victim {request_id} sleeping")
    return request_id, pid, directory


def _left_after_stop(request_id: int, checkpoint_root: str) -> int:
    """How many of the released job's processes are still there once the agent has had time to stop
    it (none, as soon as it has, where the stop reaches everything)."""
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while (left := len(processes_of(request_id, checkpoint_root))) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def wait_for(condition, what: str, timeout_s: float = TIMEOUT_S):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if result := condition():
            return result
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout_s} s")

"""bench.cpu_usage: where a benchmark's CPU went, from /proc."""

import subprocess
import sys

from bench.cpu_usage import CpuMeter, cpu_seconds, tree_cpu

BURN = (
    "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\n"
    "print('burned', flush=True)\ntime.sleep(30)"
)


def test_a_tree_counts_its_children_and_the_meter_what_they_burned_meanwhile():
    meter = CpuMeter({"tree": lambda: tree_cpu(parent.pid)})
    parent = subprocess.Popen(
        [sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', {BURN!r}])"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        meter.start()
        assert parent.stdout.readline() == "burned\n"  # the child was born, burned 0.3 s of CPU, sleeps
        used = meter.stop()
        assert len(tree_cpu(parent.pid)) == 2
    finally:
        subprocess.run(["pkill", "-P", str(parent.pid)])
        parent.kill()
        parent.wait()
    assert 0.25 <= used["tree"] <= 1.5, used


def test_a_gone_process_reads_zero():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    assert cpu_seconds(process.pid) == 0.0

"""The placement core's compiled functions: loaded from numba's cache they decide as when just
compiled, `compile_all` compiles every signature a replay uses, and their sums are numpy's."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from scheduler_app.core.placement.compiled import COMPILED, compile_all
from scheduler_app.core.placement.gang_room import _pairwise_sum

ROOT = Path(__file__).resolve().parents[3]

REPLAY = """
import hashlib
from bench.trace import DEFAULT_NODES, DEFAULT_PODS, load_nodes, load_pods
from bench.trace_replay import arrival_order, shuffled_nodes
from scheduler_app.core.cluster import MILLI_PER_GPU
from scheduler_app.core.fragmentation import WorkloadMix
from scheduler_app.core.placement import Placer

pods = load_pods(DEFAULT_PODS)
nodes = shuffled_nodes(load_nodes(DEFAULT_NODES), 7)
order = arrival_order(pods, sum(len(n.gpus) for n in nodes) * MILLI_PER_GPU, 7)[:1500]
placer = Placer(nodes, "fgd-plus", WorkloadMix.from_requests(pods))
print(hashlib.sha1(repr([placer.place(pod) for pod in order]).encode()).hexdigest())
"""


def test_the_compiled_functions_loaded_from_the_cache_decide_as_when_compiled(tmp_path):
    # given an empty numba cache
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    # when a replay runs twice: compiling (and filling the cache), then loading from it
    runs = [
        subprocess.run([sys.executable, "-c", REPLAY], env=env, cwd=ROOT, capture_output=True, text=True)
        for _ in range(2)
    ]
    # then both end well (a function numba's cache cannot keep, such as a recursive one, crashes the
    # second) and place every pod alike
    assert [run.returncode for run in runs] == [0, 0], runs[1].stderr[-2000:]
    assert runs[0].stdout == runs[1].stdout and len(runs[0].stdout.strip()) == 40
    assert list(tmp_path.rglob("*.nbi")), "nothing was cached"


def test_after_compile_all_a_trace_replay_compiles_nothing_more():
    # given every compiled function compiled for what compile_all passes
    from bench.trace import DEFAULT_NODES, DEFAULT_PODS, load_nodes, load_pods
    from bench.trace_replay import arrival_order, shuffled_nodes
    from scheduler_app.core.cluster import MILLI_PER_GPU
    from scheduler_app.core.fragmentation import WorkloadMix
    from scheduler_app.core.placement import Placer

    compile_all()
    compiled = {f.py_func.__name__: list(f.signatures) for f in COMPILED}
    # when both fgd policies place part of the trace (one-card, inference, gangs, CPU-only, models)
    pods = load_pods(DEFAULT_PODS)
    nodes = shuffled_nodes(load_nodes(DEFAULT_NODES), 42)
    order = arrival_order(pods, sum(len(n.gpus) for n in nodes) * MILLI_PER_GPU, 42)[:2500]
    for policy in ("fgd-plus", "fgd"):
        placer = Placer(nodes, policy, WorkloadMix.from_requests(pods))
        placed = [placer.place(pod) for pod in order]
        assert sum(p is not None for p in placed) > 2000
    # then no call needed another compilation (a new signature costs seconds in a pass)
    assert {f.py_func.__name__: list(f.signatures) for f in COMPILED} == compiled
    assert all(len(signatures) == 1 for signatures in compiled.values())


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 16, 127, 128, 129, 300, 1031])
def test_the_pairwise_sum_adds_in_numpys_order(n):
    # given weights 1 / hosts, some dropped, as the gang room sums them
    rng = np.random.default_rng(n)
    rows = [np.where(rng.random(n) < 0.6, 1 / rng.integers(1, 60, size=n), 0.0) for _ in range(50)]
    # then each sum has numpy's bits
    assert [_pairwise_sum(row) for row in rows] == [row.sum() for row in rows]
    if n >= 16:  # where the order shows: a plain left-to-right sum differs somewhere
        assert any(_pairwise_sum(row) != sum(row.tolist()) for row in rows)

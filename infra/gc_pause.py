"""Pausing Python's cyclic garbage collector around one bounded burst of allocation.

A scheduling pass on a large cluster builds hundreds of thousands of short-lived objects (specs,
placements, rows, events) while the process already holds the stored pass state. Each of those
allocations counts toward the collector's thresholds, and its collections walk every young object
again and again, then the whole heap: about 1.8 s of a 16,000-start pass and a third of the pass
after one submit (`bench.db_pass`). The pass makes almost no reference cycles, and reference
counting frees the rest as before; what cycles it does make are collected once the pause ends.
"""

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_pauses = 0  # pauses open in this process (threads may overlap)
_was_enabled = False  # whether the collector ran before the first of them


@contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic collection inside the block (in any thread: the collector is per process); the
    collector runs again when the last open pause ends, if it ran before the first."""
    global _pauses, _was_enabled
    with _lock:
        if _pauses == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _lock:
            _pauses -= 1
            if _pauses == 0 and _was_enabled:
                gc.enable()

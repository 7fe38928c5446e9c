"""collector_paused: no cyclic collection inside, the collector as it was after the last open pause."""

import gc
import threading

import pytest

from infra.gc_pause import collector_paused


@pytest.fixture
def collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_the_collector_is_off_inside_and_on_again_after(collector_on):
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_overlapping_pauses_end_with_the_last(collector_on):
    inner_done, outer_may_end = threading.Event(), threading.Event()
    seen = []

    def other_thread():
        with collector_paused():
            inner_done.set()
            outer_may_end.wait(5)
        seen.append(gc.isenabled())  # another pause is still open

    with collector_paused():
        thread = threading.Thread(target=other_thread)
        thread.start()
        inner_done.wait(5)
        outer_may_end.set()
        thread.join(5)
        assert not gc.isenabled()
    assert seen == [False]
    assert gc.isenabled()


def test_a_collector_switched_off_before_stays_off(collector_on):
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()


def test_an_error_inside_still_ends_the_pause(collector_on):
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()

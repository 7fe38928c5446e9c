"""How a test waits: it polls a condition until a deadline, never sleeps a fixed time before an assert."""

import time

import pytest


def wait_until(condition, timeout_s=30.0, what="the condition", step_s=0.1) -> None:
    """Poll `condition()` every `step_s` until it is true; fail naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(step_s)
    pytest.fail(f"{what} not reached within {timeout_s} s")


def wait_until_steady(read, quiet_s, timeout_s=30.0, what="the value") -> None:
    """Poll `read()` until it returns the same value for `quiet_s` on end: a deliberate bounded wait for
    something that gives no signal when it is over (nothing more changes it within `quiet_s`)."""
    deadline = time.monotonic() + timeout_s
    value, since = read(), time.monotonic()
    while time.monotonic() < deadline:
        if time.monotonic() - since >= quiet_s:
            return
        time.sleep(min(0.05, quiet_s))
        if (now := read()) != value:
            value, since = now, time.monotonic()
    pytest.fail(f"{what} still changing after {timeout_s} s")

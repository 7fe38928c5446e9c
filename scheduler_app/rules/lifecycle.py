"""The request lifecycle of DESIGN.md, defined once.

pending → scheduled → running → (migrating → running)* → succeeded | failed | cancelled | preempted | released

A scheduled, running or migrating request can go back to pending: that is a
requeue (its node was lost, its spot capacity reclaimed, or it was preempted
to give capacity back to its owner), and it keeps its place in the log.
`preempted` is terminal: stopped by the platform and not requeued. `released` is terminal: ended by its
user while it ran (its GPUs released), as Slurm's CANCELLED differs from COMPLETED; work released before
it started is `cancelled`.
"""

from infra.conflicts import StateConflict
from scheduler_app.choices import RequestState as S

TRANSITIONS: dict[str, frozenset[str]] = {
    S.PENDING: frozenset({S.SCHEDULED, S.CANCELLED, S.FAILED}),
    S.SCHEDULED: frozenset({S.RUNNING, S.PENDING, S.CANCELLED, S.FAILED, S.PREEMPTED}),
    S.RUNNING: frozenset(
        {S.MIGRATING, S.PENDING, S.SUCCEEDED, S.FAILED, S.CANCELLED, S.PREEMPTED, S.RELEASED}
    ),
    # Released while it was being moved: the user is done with it.
    S.MIGRATING: frozenset(
        {S.RUNNING, S.PENDING, S.SUCCEEDED, S.FAILED, S.CANCELLED, S.PREEMPTED, S.RELEASED}
    ),
    S.SUCCEEDED: frozenset(),
    S.FAILED: frozenset(),
    S.CANCELLED: frozenset(),
    S.PREEMPTED: frozenset(),
    S.RELEASED: frozenset(),
}

TERMINAL_STATES = frozenset(state for state, targets in TRANSITIONS.items() if not targets)
ACTIVE_STATES = frozenset({S.SCHEDULED, S.RUNNING, S.MIGRATING})


def release_target(state: str) -> str | None:
    """Where releasing a request in `state` leads: work that never started ends cancelled, other active
    work (running, or migrating: being moved) released; None when it holds no GPU."""
    if state not in ACTIVE_STATES:
        return None
    return S.CANCELLED if state == S.SCHEDULED else S.RELEASED


class AlreadyEnded(StateConflict):
    """Asked to end (cancel, release) a request that has already ended: nothing to do and nothing written.
    Its own error code, so that a client may take it as done, as `scancel` does for work that has ended."""

    api_code = "already_ended"

    def __init__(self, request_id: int, state: str):
        # "has already succeeded / failed"; "is already cancelled / released / preempted".
        verb = "has" if state in (S.SUCCEEDED, S.FAILED) else "is"
        super().__init__(f"Request {request_id} {verb} already {state}.")
        self.state = state


class IllegalTransition(StateConflict):
    """A state change the lifecycle does not allow; nothing was written. Reported on the `state` field."""

    def __init__(self, from_state: str, to_state: str):
        allowed = ", ".join(sorted(TRANSITIONS[from_state])) or "none (terminal state)"
        super().__init__(
            f"A request cannot go from {from_state} to {to_state}; from {from_state}: {allowed}."
        )
        self.from_state = from_state
        self.to_state = to_state


def check_transition(from_state: str, to_state: str) -> None:
    if to_state not in TRANSITIONS:
        raise ValueError(f"Unknown request state {to_state!r}.")
    if to_state not in TRANSITIONS[from_state]:
        raise IllegalTransition(from_state, to_state)

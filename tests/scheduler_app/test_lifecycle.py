import itertools

import pytest
from django.contrib.contenttypes.models import ContentType

from audit.models import Event
from scheduler_app.choices import RequestState
from scheduler_app.models import Allocation, GpuRequest
from scheduler_app.rules.lifecycle import (
    ACTIVE_STATES,
    TRANSITIONS,
    IllegalTransition,
    StateConflict,
    check_transition,
)
from scheduler_app.services.placement import Slice, allocate
from scheduler_app.services.requests import submit_request
from scheduler_app.services.transitions import transition_request

S = RequestState
ALL_PAIRS = list(itertools.product(S.values, repeat=2))
# Only `place` schedules a request: it is the one writer of slices.
LEGAL = [(a, b) for a, b in ALL_PAIRS if b in TRANSITIONS[a] and b != S.SCHEDULED]
ILLEGAL = [(a, b) for a, b in ALL_PAIRS if b not in TRANSITIONS[a]]
# How the owner functions bring a request to each state.
PATHS = {
    S.PENDING: [],
    S.SCHEDULED: [S.SCHEDULED],
    S.RUNNING: [S.SCHEDULED, S.RUNNING],
    S.MIGRATING: [S.SCHEDULED, S.RUNNING, S.MIGRATING],
    S.SUCCEEDED: [S.SCHEDULED, S.RUNNING, S.SUCCEEDED],
    S.FAILED: [S.FAILED],
    S.CANCELLED: [S.CANCELLED],
    S.PREEMPTED: [S.SCHEDULED, S.PREEMPTED],
    S.RELEASED: [S.SCHEDULED, S.RUNNING, S.RELEASED],
}


def test_lifecycle_follows_design_order():
    assert TRANSITIONS[S.PENDING] >= {S.SCHEDULED}
    assert TRANSITIONS[S.SCHEDULED] >= {S.RUNNING}
    assert TRANSITIONS[S.RUNNING] >= {S.MIGRATING, S.SUCCEEDED}
    assert TRANSITIONS[S.MIGRATING] >= {S.RUNNING}
    for terminal in ("succeeded", "failed", "cancelled", "preempted", "released"):
        assert TRANSITIONS[terminal] == frozenset()


@pytest.fixture
def request_in(team, member, make_node):
    gpu = make_node().gpus.get(index=0)

    def make(state):
        request = submit_request(user=member, team=team, name="job", gpu_milli=250)
        for step in PATHS[state]:
            if step == S.SCHEDULED:
                allocate(request, [Slice(gpu.pk, 250, 1024)])
            else:
                transition_request(request, step, reason="setting up")
        return request

    return make


def _events_of(request):
    return Event.objects.filter(object_id=request.pk, content_type=ContentType.objects.get_for_model(request))


@pytest.mark.parametrize(("from_state", "to_state"), LEGAL)
def test_legal_transition_changes_state_and_logs_event(request_in, member, from_state, to_state):
    request = request_in(from_state)
    before = _events_of(request).count()

    transition_request(request, to_state, actor=member, reason="because")

    request.refresh_from_db()
    assert request.state == to_state
    [event] = _events_of(request).order_by("id")[before:]
    assert (event.from_state, event.to_state, event.actor, event.reason) == (
        from_state,
        to_state,
        member,
        "because",
    )


@pytest.mark.parametrize(("from_state", "to_state"), LEGAL)
def test_leaving_the_active_states_closes_the_slices_in_the_same_step(request_in, from_state, to_state):
    request = request_in(from_state)

    transition_request(request, to_state)

    still_open = Allocation.objects.committed().filter(request=request).count()
    assert still_open == (1 if to_state in ACTIVE_STATES else 0)


@pytest.mark.parametrize(("from_state", "to_state"), ILLEGAL)
def test_illegal_transition_raises_and_writes_nothing(request_in, from_state, to_state):
    request = request_in(from_state)
    before = Event.objects.count()

    with pytest.raises(IllegalTransition, match=f"cannot go from {from_state} to {to_state}"):
        transition_request(request, to_state)

    request.refresh_from_db()
    assert request.state == from_state
    assert Event.objects.count() == before


def test_only_placing_a_request_schedules_it(request_in):
    request = request_in(S.PENDING)

    with pytest.raises(StateConflict, match="placing it on cards"):
        transition_request(request, S.SCHEDULED)

    request.refresh_from_db()
    assert request.state == S.PENDING


def test_unknown_state_is_refused():
    with pytest.raises(ValueError, match="Unknown request state 'sleeping'"):
        check_transition(S.PENDING, "sleeping")


def test_terminal_transition_stamps_end_and_clears_pending_reason(request_in):
    request = request_in(S.PENDING)
    GpuRequest.objects.filter(pk=request.pk).update(pending_reason="no GPU free")

    transition_request(request, S.CANCELLED)

    assert request.ended_at is not None
    assert request.pending_reason == ""

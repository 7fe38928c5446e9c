import itertools

import pytest

from scheduler_app.choices import RequestState
from scheduler_app.lifecycle import TRANSITIONS, IllegalTransition, check_transition
from scheduler_app.models import Event, GpuRequest
from scheduler_app.services import transition_request

ALL_PAIRS = list(itertools.product(RequestState.values, repeat=2))
LEGAL = [(a, b) for a, b in ALL_PAIRS if b in TRANSITIONS[a]]
ILLEGAL = [(a, b) for a, b in ALL_PAIRS if b not in TRANSITIONS[a]]


def test_lifecycle_follows_design_order():
    assert TRANSITIONS[RequestState.PENDING] >= {RequestState.SCHEDULED}
    assert TRANSITIONS[RequestState.SCHEDULED] >= {RequestState.RUNNING}
    assert TRANSITIONS[RequestState.RUNNING] >= {RequestState.MIGRATING, RequestState.SUCCEEDED}
    assert TRANSITIONS[RequestState.MIGRATING] >= {RequestState.RUNNING}
    for terminal in ("succeeded", "failed", "cancelled", "preempted"):
        assert TRANSITIONS[terminal] == frozenset()


@pytest.fixture
def request_in(team, member):
    def make(state):
        return GpuRequest.objects.create(team=team, user=member, name="job", gpu_milli=250, state=state)

    return make


@pytest.mark.parametrize(("from_state", "to_state"), LEGAL)
def test_legal_transition_changes_state_and_logs_event(request_in, member, from_state, to_state):
    request = request_in(from_state)

    transition_request(request, to_state, actor=member, reason="because")

    request.refresh_from_db()
    assert request.state == to_state
    event = Event.objects.get(object_id=request.pk)
    assert (event.from_state, event.to_state, event.actor, event.reason) == (
        from_state,
        to_state,
        member,
        "because",
    )


@pytest.mark.parametrize(("from_state", "to_state"), ILLEGAL)
def test_illegal_transition_raises_and_writes_nothing(request_in, from_state, to_state):
    request = request_in(from_state)

    with pytest.raises(IllegalTransition, match=f"cannot go from {from_state} to {to_state}"):
        transition_request(request, to_state)

    request.refresh_from_db()
    assert request.state == from_state
    assert not Event.objects.filter(object_id=request.pk).exists()


def test_unknown_state_is_refused():
    with pytest.raises(ValueError, match="Unknown request state 'sleeping'"):
        check_transition(RequestState.PENDING, "sleeping")


def test_terminal_transition_stamps_end_and_clears_pending_reason(request_in):
    request = request_in(RequestState.PENDING)
    GpuRequest.objects.filter(pk=request.pk).update(pending_reason="no GPU free")

    transition_request(request, RequestState.CANCELLED)

    assert request.ended_at is not None
    assert request.pending_reason == ""

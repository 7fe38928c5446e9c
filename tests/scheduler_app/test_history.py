"""Recording work that already ran (services.history): terminal requests with closed slices and their
lifecycle's events, refused whole when a card would be over capacity at some moment."""

import datetime as dt

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from audit.models import Event
from scheduler_app.choices import RequestState
from scheduler_app.models import Allocation, GpuRequest
from scheduler_app.rules.invariants import over_committed_at_some_moment
from scheduler_app.services.history import PastRequest, PastSlice, record_past_requests

T0 = (timezone.now() - dt.timedelta(days=2)).replace(microsecond=0)


@pytest.fixture
def past(team, member, make_node):
    card = make_node(gpus=1).gpus.get()

    def make(name, start_h, end_h, milli=600, outcome=RequestState.SUCCEEDED):
        request = GpuRequest(team=team, user=member, name=name, gpu_milli=milli, created_at=T0)
        at = [T0 + dt.timedelta(hours=h) for h in (start_h, end_h)]
        return PastRequest(request, at[0], at[1], outcome, 0, (PastSlice(card.pk, milli, 1024),))

    return make


def test_back_to_back_runs_are_recorded_with_their_lifecycle(past):
    saved = record_past_requests([past("first", 0, 1), past("second", 1, 2)])

    assert [r.state for r in saved] == [RequestState.SUCCEEDED] * 2
    assert Allocation.objects.filter(ended_at__isnull=True).count() == 0
    steps = Event.objects.filter(object_id=saved[1].pk).order_by("created_at", "id")
    assert [e.to_state for e in steps] == ["pending", "scheduled", "running", "succeeded"]
    assert steps.last().created_at == T0 + dt.timedelta(hours=2)
    assert over_committed_at_some_moment() == []


def test_runs_that_would_overfill_a_card_at_some_moment_are_refused_whole(past):
    with pytest.raises(ValidationError) as refused:
        record_past_requests([past("first", 0, 2), past("second", 1, 3)])

    assert "1200 milli-GPU" in str(refused.value)
    assert not GpuRequest.objects.exists()
    assert not Event.objects.filter(content_type__model="gpurequest").exists()


def test_a_request_still_running_is_not_history(past):
    with pytest.raises(ValidationError):
        record_past_requests([past("live", 0, 1, outcome=RequestState.RUNNING)])

    assert not GpuRequest.objects.exists()

"""Adaptive adjustment: a running job whose utilization says a smaller share would do (or that is starved)
is offered a resize with a notice to its team; a member opts in; the scheduler finds the intent."""

import datetime as dt

import pytest

from audit.models import Event, Notice
from billing_app.choices import ResizeState
from billing_app.models import ResizeOffer
from billing_app.resizing import accept_resize, mark_resize_applied, offer_resizes, resizes_to_apply
from infra.conflicts import StateConflict
from scheduler_app.choices import RequestState
from scheduler_app.models import Allocation, GpuRequest
from scheduler_app.services.placement import Slice, allocate
from scheduler_app.services.requests import submit_request
from scheduler_app.services.transitions import transition_request
from teams.permissions import NotAllowed
from telemetry.upkeep import telemetry_upkeep as roll_up_and_check
from tests.telemetry.telemetry_helpers import plant

NOW = dt.datetime(2025, 3, 1, 12, 0, 30, tzinfo=dt.UTC)


@pytest.fixture(autouse=True)
def _settings(settings):
    settings.TELEMETRY_ROLLUP_LOOKBACK_S = 3 * 3600


def telemetry_upkeep(now):
    """The telemetry upkeep, then the resize offers on its rollups, as the workers run them."""
    roll_up_and_check(now)
    return offer_resizes(now)


@pytest.fixture
def node(make_node):
    return make_node("node-1", gpus=1)


def running(member, team, node, milli, util, name="train"):
    """A request holding `milli` of node-1's card for two hours, the card `util` % busy all along."""
    request = submit_request(user=member, team=team, name=name, gpu_milli=milli)
    allocate(request, [Slice(node.gpus.get().pk, milli, 4096)])
    transition_request(request, RequestState.RUNNING)
    started = NOW - dt.timedelta(hours=2)
    Allocation.objects.filter(request=request).update(started_at=started)
    GpuRequest.objects.filter(pk=request.pk).update(started_at=started)
    if util is not None:
        plant(node.gpus.get(), started, [util] * 120)
    return request


def test_a_full_card_kept_thirty_percent_busy_is_offered_half_with_one_notice(member, team, node):
    job = running(member, team, node, 1000, 30)

    telemetry_upkeep(NOW)
    telemetry_upkeep(NOW + dt.timedelta(seconds=60))  # a rerun offers nothing twice

    offer = ResizeOffer.objects.get()
    assert (offer.request, offer.from_milli, offer.to_milli, offer.state) == (job, 1000, 500, "offered")
    assert offer.busy_percent == 30 and offer.saving_percent == 50 and offer.slowdown_percent == 0
    notice = Notice.objects.get(kind="resize_offer")
    assert notice.team == team and notice.data["offer_id"] == offer.pk
    assert "0.5 of a card" in notice.text


def test_a_busy_full_card_an_idle_one_and_a_job_without_readings_are_offered_nothing(
    member, team, node, make_node
):
    running(member, team, node, 1000, 95)
    running(member, team, make_node("node-2", gpus=1), 500, None, name="silent")
    running(member, team, make_node("node-3", gpus=1), 1000, 2, name="idle")  # the idle check's

    assert telemetry_upkeep(NOW) == []
    assert not ResizeOffer.objects.exists()


def test_a_starved_half_card_alone_on_its_card_is_offered_more(member, team, node):
    running(member, team, node, 500, 97)

    (offer,) = telemetry_upkeep(NOW)

    assert (offer.from_milli, offer.to_milli) == (500, 625)
    assert offer.slowdown_percent < 0


def test_a_starved_looking_job_on_a_shared_card_is_offered_nothing(member, team, node):
    running(member, team, node, 500, 97)
    running(member, team, node, 250, None, name="neighbour")

    telemetry_upkeep(NOW)

    assert not ResizeOffer.objects.exists()


def test_an_offer_not_taken_is_withdrawn_when_the_condition_ends(member, team, node):
    job = running(member, team, node, 1000, 30)
    telemetry_upkeep(NOW)
    plant(node.gpus.get(), NOW, [95] * 70)  # the next hour it keeps the card busy

    telemetry_upkeep(NOW + dt.timedelta(minutes=70))

    assert ResizeOffer.objects.get(request=job).state == ResizeState.WITHDRAWN
    assert Notice.objects.get(kind="resize_offer").resolved_at is not None


def test_a_member_accepts_and_the_scheduler_finds_and_applies_the_intent(member, team, node):
    job = running(member, team, node, 1000, 30)
    telemetry_upkeep(NOW)
    offer = ResizeOffer.objects.get()

    accept_resize(offer, user=member, now=NOW)

    (intent,) = resizes_to_apply()
    assert (intent.pk, intent.request, intent.accepted_by, intent.to_milli) == (offer.pk, job, member, 500)
    event = Event.objects.get(object_id=job.pk, to_state="resize_accepted")
    assert event.data == {"offer_id": offer.pk, "from_milli": 1000, "to_milli": 500}
    with pytest.raises(StateConflict):
        accept_resize(offer, user=member)  # once
    telemetry_upkeep(NOW + dt.timedelta(minutes=1))
    assert ResizeOffer.objects.get().state == ResizeState.ACCEPTED  # an accepted one is not withdrawn

    mark_resize_applied(intent, now=NOW)
    assert not resizes_to_apply().exists()


def test_an_outsider_cannot_accept(member, team, node, outsider):
    running(member, team, node, 1000, 30)
    telemetry_upkeep(NOW)

    with pytest.raises(NotAllowed):
        accept_resize(ResizeOffer.objects.get(), user=outsider)
    assert ResizeOffer.objects.get().state == ResizeState.OFFERED


def test_over_the_api_a_member_lists_and_accepts_an_offer_and_an_outsider_sees_none(
    api_client, member, team, node, outsider
):
    job = running(member, team, node, 1000, 30)
    telemetry_upkeep(NOW)
    offer = ResizeOffer.objects.get()

    listed = (
        api_client(member).get(f"/api/v1/resize-offers/?request={job.pk}&state=offered").json()["results"]
    )
    assert [(o["id"], o["to_milli"], o["state"]) for o in listed] == [(offer.pk, 500, "offered")]
    assert api_client(outsider).get("/api/v1/resize-offers/").json()["results"] == []
    assert api_client(outsider).post(f"/api/v1/resize-offers/{offer.pk}/accept/").status_code == 404

    accepted = api_client(member).post(f"/api/v1/resize-offers/{offer.pk}/accept/")

    assert accepted.status_code == 200 and accepted.json()["state"] == "accepted"
    again = api_client(member).post(f"/api/v1/resize-offers/{offer.pk}/accept/")
    assert again.status_code == 409 and "state" in again.json()["error"]["fields"]
    bad = api_client(member).get("/api/v1/resize-offers/?state=maybe")
    assert bad.status_code == 400 and "state" in bad.json()["error"]["fields"]


def test_the_request_page_shows_the_offer_and_its_button_accepts_it(client, member, team, node, outsider):
    job = running(member, team, node, 1000, 30)
    telemetry_upkeep(NOW)
    offer = ResizeOffer.objects.get()
    client.force_login(member)

    page = client.get(f"/requests/{job.pk}/").content.decode()
    assert 'id="resize-offer"' in page and "Resize to 500 milli-GPU at the next checkpoint" in page

    client.post(f"/requests/{job.pk}/resize/{offer.pk}/accept/")

    offer.refresh_from_db()
    assert (offer.state, offer.accepted_by) == (ResizeState.ACCEPTED, member)
    page = client.get(f"/requests/{job.pk}/").content.decode()
    assert "Accepted by bob" in page and "Resize to 500" not in page
    client.force_login(outsider)
    assert client.post(f"/requests/{job.pk}/resize/{offer.pk}/accept/").status_code == 404

"""Who may cancel or release a request, asked once (scheduler_app.permissions) by services and pages."""

import pytest
from django.urls import reverse

from scheduler_app.choices import RequestState
from scheduler_app.permissions import can_cancel, can_release
from scheduler_app.services.placement import Slice, allocate
from scheduler_app.services.requests import cancel_request, release_request, submit_request
from scheduler_app.services.transitions import transition_request
from teams.permissions import NotAllowed

CANCEL = 'action="/requests/{pk}/cancel/"'


def pending_request(member, team):
    return submit_request(user=member, team=team, name="job", gpu_milli=250)


def running_request(member, team, node):
    request = pending_request(member, team)
    allocate(request, [Slice(node.gpus.get(index=0).id, 250, 10240)])
    return transition_request(request, RequestState.RUNNING)


def detail_page(client, user, request):
    client.force_login(user)
    return client.get(reverse("request_detail", args=[request.pk]))


def test_member_sees_cancel_on_a_pending_request_and_not_on_a_released_one(client, member, team, make_node):
    pending = pending_request(member, team)
    done = release_request(running_request(member, team, make_node()), user=member)
    assert done.state == RequestState.RELEASED

    assert CANCEL.format(pk=pending.pk) in detail_page(client, member, pending).text
    assert CANCEL.format(pk=done.pk) not in detail_page(client, member, done).text


def test_outsider_never_sees_cancel_and_operator_sees_none_on_requests_not_theirs(
    client, member, team, outsider, operator
):
    pending = pending_request(member, team)

    assert not can_cancel(outsider, pending)
    assert detail_page(client, outsider, pending).status_code == 404
    page = detail_page(client, operator, pending)  # operators see every request but act on none
    assert page.status_code == 200 and CANCEL.format(pk=pending.pk) not in page.text
    with pytest.raises(NotAllowed):
        cancel_request(pending, user=operator)


def test_release_follows_the_lifecycle_work_being_moved_can_be_released_pending_cannot(
    client, member, team, make_node
):
    running = running_request(member, team, make_node())
    assert can_release(member, running) and can_cancel(member, running)

    migrating = transition_request(running, RequestState.MIGRATING)

    assert can_release(member, migrating)  # migrating -> released: the user is done with work being moved
    assert f'action="/requests/{migrating.pk}/release/"' in detail_page(client, member, migrating).text
    assert can_cancel(member, migrating)
    pending = pending_request(member, team)
    assert not can_release(member, pending)
    assert f'action="/requests/{pending.pk}/release/"' not in detail_page(client, member, pending).text

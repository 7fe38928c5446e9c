"""How a page action reports its outcome on the next page (infra/messages.py)."""

import pytest
from django.contrib.messages import get_messages
from django.contrib.messages.storage.fallback import FallbackStorage
from django.core.exceptions import PermissionDenied, ValidationError
from django.test import RequestFactory

from infra.messages import told


def page_request():
    request = RequestFactory().post("/")
    request.session = {}
    request._messages = FallbackStorage(request)
    return request


def said(request) -> list[tuple[str, str]]:
    return [(m.level_tag, m.message) for m in get_messages(request)]


def test_an_action_that_went_through_says_done():
    request = page_request()

    with told(request, refused="Not done", done="Done."):
        pass

    assert said(request) == [("success", "Done.")]


def test_a_refusal_says_why_the_service_refused():
    request = page_request()

    with told(request, refused="Not done", done="Done."):
        raise ValidationError({"state": "It is already done."})
    with told(request, refused="Not done", done="Done."):
        raise PermissionDenied("Only its team may.")

    assert said(request) == [
        ("error", "Not done: It is already done."),
        ("error", "Not done: Only its team may."),
    ]


def test_what_is_not_among_the_refusals_propagates():
    request = page_request()

    with (
        pytest.raises(PermissionDenied),
        told(request, refused="Not done", done="Done.", refusals=ValidationError),
    ):
        raise PermissionDenied("Only team admins may.")

    assert said(request) == []

"""The 403, 404 and 500 pages look like the portal and lead back into it; a refusal is logged as a
line, not a traceback; a long value typed into a form comes back cut, not whole."""

import logging

from django.test import RequestFactory
from django.urls import reverse

from infra.api.errors import server_error

LONG = "u" * 10_240


def test_a_member_refused_an_operator_page_gets_the_portals_403_page(client, member):
    client.force_login(member)

    response = client.get(reverse("operator"))

    assert response.status_code == 403
    assert "403.html" in [t.name for t in response.templates]
    assert 'class="top"' in response.text  # the portal's header and navigation
    assert "Operator pages are for platform operators." in response.text
    assert f'href="{reverse("home")}"' in response.text


def test_a_refusal_is_logged_without_a_traceback(client, member, caplog):
    client.force_login(member)

    with caplog.at_level(logging.WARNING, logger="django.request"):
        client.get(reverse("operator"))

    refusals = [r for r in caplog.records if r.name == "django.request"]
    assert [r.getMessage() for r in refusals] == ["Forbidden (Permission denied): /operator/"]
    assert refusals[0].exc_info is None


def test_a_missing_page_gets_the_portals_404_page(client, member):
    client.force_login(member)

    response = client.get("/requests/999999/")

    assert response.status_code == 404
    assert "404.html" in [t.name for t in response.templates]
    assert 'class="top"' in response.text
    assert f'href="{reverse("requests")}"' in response.text


def test_a_server_error_gets_the_portals_500_page(db):
    response = server_error(RequestFactory().get("/requests/"))

    assert response.status_code == 500
    page = response.content.decode()
    assert 'class="top"' in page
    assert f'href="{reverse("home")}"' in page


def test_a_10_kb_username_is_not_echoed_back_whole_on_the_login_page(client, db):
    response = client.post(reverse("login"), {"username": LONG, "password": "nope"})

    assert response.status_code == 200
    assert "Please enter a correct username and password" in response.text
    assert LONG[:150] in response.text  # what the field allows is still there to correct
    assert LONG[:151] not in response.text


def test_a_form_echoes_a_long_value_cut_to_what_its_field_allows(client, member):
    client.force_login(member)

    response = client.post(reverse("tokens"), {"name": LONG, "days": "30"})

    assert response.status_code == 400
    assert LONG[:100] in response.text
    assert LONG[:101] not in response.text


def test_an_api_error_quotes_a_long_value_cut(api_client, member):
    response = api_client(member).post(
        "/api/v1/requests/",
        {"name": "job", "task_type": "training", "gpu_milli": 250, "pool": LONG},
        format="json",
    )

    assert response.status_code == 400
    message = response.json()["error"]["fields"]["pool"][0]
    assert message.startswith("No pool named 'uuu")
    assert len(message) < 120


def test_an_error_message_of_a_page_quotes_a_long_line_cut(client, operator):
    client.force_login(operator)
    line = LONG[:1000]

    response = client.post(
        reverse("operator_what_if"),
        {"start": "2026-01-01 00:00", "end": "2026-01-02 00:00", "quotas": line, "nodes": ""},
    )

    assert response.status_code == 400
    assert f"“{line[:40]}…”: write team-slug, pool and milli-GPU" in response.text

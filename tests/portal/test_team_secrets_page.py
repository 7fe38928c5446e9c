"""The team page's Secrets section: names and who last set them for the team, a form and delete buttons
for its admins; a value is never rendered, not even back into a form refused for an error."""

import re

import pytest
from django.urls import reverse

from teams.crypto import decrypt
from teams.models import TeamSecret
from teams.services import set_team_secret

VALUE = "sk-live-0123456789abcdef"


@pytest.fixture
def hf_token(team, team_admin):
    return set_team_secret(team, name="HF_TOKEN", value=VALUE, actor=team_admin)[0]


def test_a_member_sees_the_names_and_who_set_them_but_no_form(client, member, hf_token):
    client.force_login(member)

    page = client.get(reverse("team_detail", args=["vision"])).text

    section = page[page.index('id="secrets"') :]
    assert "<code>HF_TOKEN</code>" in section and "alice" in section
    assert VALUE not in page and hf_token.encrypted_value not in page
    assert "Add or replace a secret" not in section and "Delete" not in section


def test_a_team_admin_gets_a_password_field_that_browsers_do_not_fill(client, team_admin, hf_token):
    client.force_login(team_admin)

    page = client.get(reverse("team_detail", args=["vision"])).text

    (value_input,) = re.findall(r'<input[^>]*name="value"[^>]*>', page)
    assert 'type="password"' in value_input and 'autocomplete="off"' in value_input
    assert "value=" not in value_input.replace('name="value"', "")
    assert reverse("team_secret_delete", args=["vision", "HF_TOKEN"]) in page


def test_a_team_admin_adds_a_secret_from_the_page(client, team_admin):
    client.force_login(team_admin)

    response = client.post(reverse("team_secret_set", args=["vision"]), {"name": "HF_TOKEN", "value": VALUE})

    assert response.status_code == 302 and response.url == reverse("team_detail", args=["vision"])
    assert decrypt(TeamSecret.objects.get(name="HF_TOKEN").encrypted_value) == VALUE
    page = client.get(response.url).text
    assert "Secret HF_TOKEN added" in page and VALUE not in page


@pytest.mark.parametrize(
    ("name", "value", "field", "says"),
    [
        ("HF_TOKEN", "abc", "value", "at least 4 characters"),
        ("GPU_PORTAL_SECRET", VALUE, "name", "reserved: the node agent sets it for every job"),
        ("HF TOKEN", VALUE, "name", "is not a variable name"),
    ],
)
def test_a_refused_secret_shows_the_error_inline_and_never_renders_the_value(
    client, team_admin, name, value, field, says
):
    client.force_login(team_admin)

    response = client.post(reverse("team_secret_set", args=["vision"]), {"name": name, "value": value})

    assert response.status_code == 400
    block = response.text[response.text.index(f'id="field-{field}"') :]
    assert says in block[: block.index("</div>")]
    assert f'value="{value}"' not in response.text and VALUE not in response.text
    assert not TeamSecret.objects.exists()


def test_a_team_admin_deletes_a_secret_from_the_page(client, team_admin, hf_token):
    client.force_login(team_admin)

    response = client.post(reverse("team_secret_delete", args=["vision", "HF_TOKEN"]))

    assert response.status_code == 302
    assert not TeamSecret.objects.exists()


def test_a_member_cannot_set_or_delete_from_the_page(client, member, hf_token):
    client.force_login(member)

    set_answer = client.post(
        reverse("team_secret_set", args=["vision"]), {"name": "HF_TOKEN", "value": "mine!"}
    )
    delete_answer = client.post(reverse("team_secret_delete", args=["vision", "HF_TOKEN"]))

    assert (set_answer.status_code, delete_answer.status_code) == (403, 403)
    assert decrypt(TeamSecret.objects.get().encrypted_value) == VALUE


def test_an_outsider_gets_404_from_the_secret_pages(client, outsider, hf_token):
    client.force_login(outsider)

    set_answer = client.post(reverse("team_secret_set", args=["vision"]), {"name": "X_Y", "value": "theirs"})
    delete_answer = client.post(reverse("team_secret_delete", args=["vision", "HF_TOKEN"]))

    assert (set_answer.status_code, delete_answer.status_code) == (404, 404)
    assert list(TeamSecret.objects.values_list("name", flat=True)) == ["HF_TOKEN"]

"""Operators map a team, or a user, to an existing Unix account that their jobs run as on the nodes: a
POSIX user name, never root; every change is logged; nobody else may change it."""

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from audit.models import Event
from teams.models import Team, UserUnixAccount
from teams.permissions import NotAllowed
from teams.selectors import job_unix_account
from teams.services import set_team_unix_account, set_user_unix_account


def unix_account_events(subject) -> list[dict]:
    events = Event.objects.filter(content_type__model=subject._meta.model_name, object_id=subject.pk)
    return [data for data in events.order_by("id").values_list("data", flat=True) if "unix_account" in data]


@pytest.mark.parametrize("name", ["vision", "_svc", "ml-team_2", "a" * 32, "machine$", "gpp-vision"])
def test_an_operator_maps_a_team_to_a_posix_user_name(team, operator, name):
    set_team_unix_account(team, unix_account=name, actor=operator)

    assert Team.objects.get(pk=team.pk).unix_account == name


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("root", "Jobs never run as root"),
        ("a" * 33, "at most 32 characters"),
        ("Vision", "Not a Unix user name"),
        ("1team", "Not a Unix user name"),
        ("-team", "Not a Unix user name"),
        ("vi sion", "Not a Unix user name"),
        ("vision\n", "Not a Unix user name"),
        ("vi$ion", "Not a Unix user name"),
        ("../etc", "Not a Unix user name"),
        ("vision\x00", "Not a Unix user name"),
        ("\ud800", "Not a Unix user name"),
        ("ä", "Not a Unix user name"),
        ("x" * 100_000, "at most 32 characters"),
        (5, "as a string"),
        (None, "as a string"),
    ],
)
def test_a_name_that_is_not_an_unprivileged_posix_user_is_refused_and_changes_nothing(
    team, member, operator, name, says
):
    with pytest.raises(ValidationError) as team_refused:
        set_team_unix_account(team, unix_account=name, actor=operator)
    with pytest.raises(ValidationError) as user_refused:
        set_user_unix_account(member, unix_account=name, actor=operator)

    assert says in " ".join(team_refused.value.message_dict["unix_account"])
    assert says in " ".join(user_refused.value.message_dict["unix_account"])
    assert Team.objects.get(pk=team.pk).unix_account == ""
    assert not UserUnixAccount.objects.exists() and not Event.objects.exists()


@pytest.mark.parametrize("who", ["team_admin", "member", "outsider"])
def test_only_operators_map_unix_accounts(team, who, request):
    actor = request.getfixturevalue(who)

    with pytest.raises(NotAllowed):
        set_team_unix_account(team, unix_account="vision", actor=actor)
    with pytest.raises(NotAllowed):
        set_user_unix_account(actor, unix_account="mine", actor=actor)

    assert Team.objects.get(pk=team.pk).unix_account == "" and not UserUnixAccount.objects.exists()


def test_each_team_mapping_change_is_logged_once_with_from_and_to(team, operator):
    set_team_unix_account(team, unix_account="vision", actor=operator)
    set_team_unix_account(team, unix_account="vision", actor=operator)
    set_team_unix_account(team, unix_account="", actor=operator)

    assert unix_account_events(team) == [
        {"unix_account": {"from": None, "to": "vision"}},
        {"unix_account": {"from": "vision", "to": None}},
    ]
    assert Event.objects.filter(actor=operator).count() == 2


def test_a_user_mapping_is_set_changed_and_removed_each_logged_on_the_user(member, operator):
    assert set_user_unix_account(member, unix_account="bob", actor=operator) == "bob"
    set_user_unix_account(member, unix_account="bob", actor=operator)
    set_user_unix_account(member, unix_account="bob_ldap", actor=operator)
    assert UserUnixAccount.objects.get(user=member).unix_account == "bob_ldap"

    assert set_user_unix_account(member, unix_account="", actor=operator) == ""

    assert not UserUnixAccount.objects.exists()
    assert unix_account_events(member) == [
        {"unix_account": {"from": None, "to": "bob"}},
        {"unix_account": {"from": "bob", "to": "bob_ldap"}},
        {"unix_account": {"from": "bob_ldap", "to": None}},
    ]


def test_removing_a_mapping_a_user_does_not_have_changes_nothing(member, operator):
    set_user_unix_account(member, unix_account="", actor=operator)

    assert not UserUnixAccount.objects.exists() and not Event.objects.exists()


def test_a_job_runs_as_the_users_account_else_the_teams_else_the_agents_default(
    team, other_team, member, outsider, operator
):
    assert job_unix_account(member, team) == ""
    set_team_unix_account(team, unix_account="vision", actor=operator)
    set_user_unix_account(outsider, unix_account="mallory", actor=operator)

    assert job_unix_account(member, team) == "vision"
    assert job_unix_account(outsider, other_team) == job_unix_account(outsider, team) == "mallory"
    assert team.default_unix_account() == "gpp-vision"


def test_an_operator_maps_a_team_in_the_admin_and_it_is_logged(client, team, operator):
    client.force_login(operator)
    url = reverse("admin:teams_team_change", args=[team.pk])

    response = client.post(
        url, {"name": "Vision", "slug": "vision", "unix_account": "vision", **no_members()}
    )

    assert response.status_code == 302, response.text
    assert Team.objects.get(pk=team.pk).unix_account == "vision"
    assert unix_account_events(team) == [{"unix_account": {"from": None, "to": "vision"}}]


def test_the_admin_refuses_root_inline(client, team, operator):
    client.force_login(operator)
    url = reverse("admin:teams_team_change", args=[team.pk])

    response = client.post(url, {"name": "Vision", "slug": "vision", "unix_account": "root", **no_members()})

    assert response.status_code == 200 and "Jobs never run as root" in response.text
    assert Team.objects.get(pk=team.pk).unix_account == "" and not Event.objects.exists()


def test_an_operator_maps_changes_and_deletes_a_user_mapping_in_the_admin(client, member, operator):
    client.force_login(operator)

    added = client.post(
        reverse("admin:teams_userunixaccount_add"), {"user": member.pk, "unix_account": "bob"}
    )
    changed = client.post(
        reverse("admin:teams_userunixaccount_change", args=[member.pk]), {"unix_account": "bob_ldap"}
    )
    after_change = UserUnixAccount.objects.get(user=member).unix_account
    deleted = client.post(reverse("admin:teams_userunixaccount_delete", args=[member.pk]), {"post": "yes"})

    assert [r.status_code for r in (added, changed, deleted)] == [302, 302, 302]
    assert after_change == "bob_ldap" and not UserUnixAccount.objects.exists()
    assert [e["unix_account"]["to"] for e in unix_account_events(member)] == ["bob", "bob_ldap", None]


def no_members() -> dict:
    """The admin's membership inline, submitted empty."""
    return {
        "memberships-TOTAL_FORMS": "0",
        "memberships-INITIAL_FORMS": "0",
        "memberships-MIN_NUM_FORMS": "0",
        "memberships-MAX_NUM_FORMS": "1000",
    }

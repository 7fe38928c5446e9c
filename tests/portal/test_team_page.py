"""The team page: quota and use per pool, members; only team admins (and operators) change members."""

import pytest
from django.urls import reverse

from audit.models import Event
from scheduler_app.models import TeamQuota
from scheduler_app.services.placement import Slice, allocate
from scheduler_app.services.requests import submit_request
from teams.choices import Role
from teams.models import Membership


@pytest.fixture
def in_use(team, member, pool, make_node):
    """Vision: 2000 guaranteed on a100, holding 500 of its own and 250 borrowed."""
    TeamQuota.objects.create(team=team, pool=pool, guaranteed_milli=2000)
    gpu = make_node("node-1", gpus=1).gpus.get()
    own = submit_request(user=member, team=team, name="own", gpu_milli=500)
    lent = submit_request(user=member, team=team, name="lent", gpu_milli=250)
    allocate(own, [Slice(gpu.id, 500, 1024)])
    allocate(lent, [Slice(gpu.id, 250, 1024)], borrowed=True)


def test_member_sees_quota_use_borrowed_and_members_but_no_admin_controls(client, member, team_admin, in_use):
    client.force_login(member)

    response = client.get(reverse("team_detail", args=["vision"]))

    row = next(r for r in response.text.split("<tr>") if "<td>a100</td>" in r)
    assert [n in row for n in ("2000", "750", "250")] == [True, True, True]
    assert "alice" in response.text and "bob" in response.text
    assert "Add a member" not in response.text and "Remove" not in response.text


def test_team_admin_sees_admin_controls(client, team_admin, member):
    client.force_login(team_admin)

    response = client.get(reverse("team_detail", args=["vision"]))

    assert "Add a member" in response.text and "Remove" in response.text


def test_outsider_gets_404_for_another_team(client, outsider, team):
    client.force_login(outsider)

    assert client.get(reverse("team_detail", args=["vision"])).status_code == 404


def test_operator_sees_any_team(client, operator, team):
    client.force_login(operator)

    assert client.get(reverse("team_detail", args=["vision"])).status_code == 200


def test_teams_link_goes_straight_to_the_only_team(client, member):
    client.force_login(member)

    response = client.get(reverse("teams"))

    assert response.status_code == 302 and response.url == reverse("team_detail", args=["vision"])


def test_team_admin_adds_a_member(client, team, team_admin, outsider):
    client.force_login(team_admin)

    response = client.post(reverse("member_add", args=["vision"]), {"username": "mallory", "role": "member"})

    assert response.status_code == 302
    assert Membership.objects.filter(team=team, user=outsider, role=Role.MEMBER).exists()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"username": "nobody", "role": "member"}, "No user named &#x27;nobody&#x27;."),
        ({"username": "bob", "role": "member"}, "bob is already a member of Vision."),
        ({"username": "", "role": "member"}, "This field is required."),
        ({"username": "mallory", "role": "king"}, "Select a valid choice"),
    ],
)
def test_adding_a_member_with_bad_input_says_why_and_writes_nothing(
    client, team_admin, member, outsider, data, message
):
    client.force_login(team_admin)
    before = (Membership.objects.count(), Event.objects.count())

    response = client.post(reverse("member_add", args=["vision"]), data)

    assert response.status_code == 400
    assert message in response.text.split("Add a member")[1]
    assert (Membership.objects.count(), Event.objects.count()) == before


def test_member_cannot_add_members(client, member, outsider):
    client.force_login(member)

    response = client.post(reverse("member_add", args=["vision"]), {"username": "mallory", "role": "member"})

    assert response.status_code == 403
    assert not Membership.objects.filter(user=outsider, team__slug="vision").exists()


def test_outsider_cannot_touch_another_teams_members(client, outsider, member):
    client.force_login(outsider)
    membership = Membership.objects.get(user=member)

    add = client.post(reverse("member_add", args=["vision"]), {"username": "mallory", "role": "member"})
    remove = client.post(reverse("member_remove", args=["vision", membership.pk]))

    assert (add.status_code, remove.status_code) == (404, 404)
    assert Membership.objects.filter(pk=membership.pk).exists()


def test_team_admin_changes_a_role(client, team_admin, member):
    client.force_login(team_admin)
    membership = Membership.objects.get(user=member)

    response = client.post(
        reverse("member_role", args=["vision", membership.pk]), {"role": "team_admin"}, follow=True
    )

    membership.refresh_from_db()
    assert membership.role == Role.TEAM_ADMIN
    assert "bob is now team admin." in response.text


def test_the_last_team_admin_cannot_step_down(client, team_admin):
    client.force_login(team_admin)
    membership = Membership.objects.get(user=team_admin)

    response = client.post(
        reverse("member_role", args=["vision", membership.pk]), {"role": "member"}, follow=True
    )

    membership.refresh_from_db()
    assert membership.role == Role.TEAM_ADMIN
    assert "Role not changed: Vision must keep at least one team admin." in response.text


def test_member_cannot_change_roles(client, team_admin, member):
    client.force_login(member)
    membership = Membership.objects.get(user=member)

    response = client.post(reverse("member_role", args=["vision", membership.pk]), {"role": "team_admin"})

    assert response.status_code == 403
    membership.refresh_from_db()
    assert membership.role == Role.MEMBER


def test_team_admin_removes_a_member(client, team_admin, member):
    client.force_login(team_admin)
    membership = Membership.objects.get(user=member)

    response = client.post(reverse("member_remove", args=["vision", membership.pk]), follow=True)

    assert not Membership.objects.filter(pk=membership.pk).exists()
    assert "bob removed from Vision." in response.text


def test_member_cannot_remove_anyone(client, team_admin, member):
    client.force_login(member)
    membership = Membership.objects.get(user=team_admin)

    response = client.post(reverse("member_remove", args=["vision", membership.pk]))

    assert response.status_code == 403
    assert Membership.objects.filter(pk=membership.pk).exists()


def test_team_page_queries_do_not_grow_with_members(
    client, team, team_admin, django_user_model, django_assert_max_num_queries
):
    for i in range(15):
        team.memberships.create(user=django_user_model.objects.create_user(f"user{i}"))
    client.force_login(team_admin)

    # the secrets section: its list and who may change it; the notifications section: likewise
    with django_assert_max_num_queries(12):
        response = client.get(reverse("team_detail", args=["vision"]))

    assert response.text.count("<td>user") == 15


def test_members_see_who_their_teams_jobs_run_as_but_no_way_to_change_it(
    client, member, team_admin, operator
):
    from teams.services import set_team_unix_account, set_user_unix_account

    client.force_login(member)
    default = client.get(reverse("team_detail", args=["vision"])).text
    set_team_unix_account(member.teams.get(), unix_account="vision-svc", actor=operator)
    set_user_unix_account(team_admin, unix_account="alice_ldap", actor=operator)

    mapped = client.get(reverse("team_detail", args=["vision"])).text

    assert "<code>gpp-vision</code>, which each node's agent creates for the team" in default
    assert "<code>vision-svc</code>, mapped by an operator" in mapped
    rows = {r.split("</td>")[0].split("<td>")[-1]: r for r in mapped.split("<tr>")[2:]}
    assert "<code>alice_ldap</code>" in rows["alice"] and "<code>vision-svc</code>" in rows["bob"]
    assert "unix_account" not in mapped  # no form field to change it

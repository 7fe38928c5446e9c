import datetime as dt

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from audit.models import Event
from scheduler_app.models import TeamQuota
from scheduler_app.services.inventory import update_pool
from scheduler_app.services.quotas import set_team_quota
from teams.choices import Role
from teams.models import ApiToken, Membership
from teams.permissions import NotAllowed
from teams.services import (
    add_member,
    change_role,
    create_api_token,
    remove_member,
    revoke_api_token,
    user_for_api_token,
)


def test_team_admin_adds_a_member_with_an_event(team, team_admin, outsider):
    membership = add_member(team, username="mallory", actor=team_admin)

    assert membership.role == Role.MEMBER
    assert Event.objects.filter(team=team, actor=team_admin, reason="mallory added").exists()


def test_member_cannot_manage_the_team(team, member, outsider):
    with pytest.raises(NotAllowed):
        add_member(team, username="mallory", actor=member)
    assert not Membership.objects.filter(team=team, user=outsider).exists()


def test_adding_unknown_or_existing_user_names_the_field(team, team_admin, member):
    with pytest.raises(ValidationError, match="No user named 'ghost'"):
        add_member(team, username="ghost", actor=team_admin)
    with pytest.raises(ValidationError, match="already a member"):
        add_member(team, username="bob", actor=team_admin)


def test_team_keeps_at_least_one_admin(team, team_admin):
    admin_membership = Membership.objects.get(user=team_admin)
    with pytest.raises(ValidationError, match="at least one team admin"):
        change_role(admin_membership, role=Role.MEMBER, actor=team_admin)
    with pytest.raises(ValidationError, match="at least one team admin"):
        remove_member(admin_membership, actor=team_admin)
    assert Membership.objects.get(user=team_admin).role == Role.TEAM_ADMIN


def test_team_admin_promotes_and_removes(team, team_admin, member):
    membership = Membership.objects.get(user=member)
    change_role(membership, role=Role.TEAM_ADMIN, actor=team_admin)
    remove_member(Membership.objects.get(user=team_admin), actor=member)
    assert list(Membership.objects.values_list("user__username", "role")) == [("bob", "team_admin")]


def test_api_token_is_shown_once_stored_hashed_and_acts_as_its_user(member):
    token, secret = create_api_token(member, name="ci", expires_at=timezone.now() + dt.timedelta(days=30))

    assert secret.startswith("gpp_") and secret not in token.token_hash
    assert user_for_api_token(secret) == member
    assert user_for_api_token(secret + "x") is None
    token.refresh_from_db()
    assert token.last_used_at is not None


def test_revoked_or_expired_token_no_longer_works(member, outsider):
    token, secret = create_api_token(member, name="old", expires_at=timezone.now() + dt.timedelta(days=1))
    with pytest.raises(NotAllowed):
        revoke_api_token(token, user=outsider)
    assert user_for_api_token(secret) == member

    revoke_api_token(token, user=member)
    assert user_for_api_token(secret) is None

    expired, expired_secret = create_api_token(
        member, name="x", expires_at=timezone.now() + dt.timedelta(days=1)
    )
    ApiToken.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    assert user_for_api_token(expired_secret) is None


@pytest.mark.parametrize(
    ("name", "days", "field"), [("", 5, "name"), ("ok", -1, "expires_at"), ("ok", 400, "expires_at")]
)
def test_bad_token_input_names_the_field(member, name, days, field):
    with pytest.raises(ValidationError) as caught:
        create_api_token(member, name=name, expires_at=timezone.now() + dt.timedelta(days=days))
    assert field in caught.value.message_dict
    assert not ApiToken.objects.exists()


def test_only_operators_set_quotas_and_each_change_is_audited(team, pool, operator, team_admin):
    with pytest.raises(NotAllowed):
        set_team_quota(team=team, pool=pool, guaranteed_milli=4000, actor=team_admin)

    set_team_quota(team=team, pool=pool, guaranteed_milli=4000, actor=operator)
    set_team_quota(team=team, pool=pool, guaranteed_milli=2000, actor=operator)

    assert TeamQuota.objects.get().guaranteed_milli == 2000
    changes = list(Event.objects.filter(actor=operator).values_list("from_state", "to_state", "data"))
    assert changes == [
        ("", "updated", {"pool": "a100", "guaranteed_milli": {"from": 0, "to": 4000}}),
        ("", "updated", {"pool": "a100", "guaranteed_milli": {"from": 4000, "to": 2000}}),
    ]


def test_negative_quota_is_refused(team, pool, operator):
    with pytest.raises(ValidationError, match="cannot be negative"):
        set_team_quota(team=team, pool=pool, guaranteed_milli=-1, actor=operator)
    assert not TeamQuota.objects.exists()


def test_operator_updates_pool_granularity_with_audit(pool, operator, member):
    with pytest.raises(NotAllowed):
        update_pool(pool, actor=member, granularity_milli=250)
    with pytest.raises(ValidationError):
        update_pool(pool, actor=operator, granularity_milli=0)

    update_pool(pool, actor=operator, granularity_milli=250)

    pool.refresh_from_db()
    assert pool.granularity_milli == 250
    assert Event.objects.filter(actor=operator, reason="granularity_milli: 125 → 250").exists()

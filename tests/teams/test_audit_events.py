"""Teams' changes reach the event log through the recorder audit hands teams (teams.changes), in the
change's own transaction."""

import pytest

from audit.models import Event
from teams.choices import Role
from teams.models import Membership
from teams.services import add_member, change_role


def test_a_role_change_is_logged_on_the_membership_with_from_and_to(team, team_admin, member):
    membership = change_role(Membership.objects.get(user=member), role=Role.TEAM_ADMIN, actor=team_admin)

    event = Event.objects.get(content_type__model="membership", object_id=membership.pk)
    assert (event.from_state, event.to_state, event.team, event.actor, event.reason) == (
        Role.MEMBER,
        Role.TEAM_ADMIN,
        team,
        team_admin,
        "bob role",
    )


def test_a_change_whose_event_cannot_be_written_is_not_made(team, team_admin, outsider, monkeypatch):
    def refuse(*args, **kwargs):
        raise RuntimeError("the event log is away")

    monkeypatch.setattr("teams.changes._recorder", refuse)

    with pytest.raises(RuntimeError):
        add_member(team, username=outsider.username, actor=team_admin)

    assert not Membership.objects.filter(team=team, user=outsider).exists()

"""An existing database migrates in place when teams, membership and tokens move from portal to teams
and the event log from scheduler_app to audit (one step: the same migrations)."""

import datetime as dt

import pytest
from django.contrib.contenttypes.models import ContentType
from django.utils import timezone

from audit.models import Event
from scheduler_app.models import GpuRequest, TeamQuota
from teams.models import ApiToken, Membership, Team
from tests.migration_steps import migrate_back, migrate_forward

# The last migrations before the move, and the apps it added (unapplied entirely to go back).
BEFORE = [
    ("teams", None),
    ("audit", None),
    ("portal", "0002_api_tokens"),
    ("scheduler_app", "0004_pass_state"),
]


@pytest.fixture
def before_the_move(transactional_db):
    """Historical apps of a database from before the move; the database ends migrated forward again."""
    old = migrate_back(BEFORE)
    yield old
    migrate_forward()
    ContentType.objects.clear_cache()


def test_team_membership_and_token_survive_the_move(before_the_move):
    old = before_the_move
    user = old.get_model("auth", "User").objects.create(username="alice")
    team = old.get_model("portal", "Team").objects.create(name="Vision", slug="vision")
    old.get_model("portal", "Membership").objects.create(team=team, user=user, role="team_admin")
    old.get_model("portal", "ApiToken").objects.create(
        user=user,
        name="ci",
        prefix="gpp_abc",
        token_hash="h" * 64,
        expires_at=timezone.now() + dt.timedelta(days=1),
    )
    pool = old.get_model("scheduler_app", "Pool").objects.create(
        name="a100", gpu_model="A100-80GB", capacity_type="on-demand"
    )
    request = old.get_model("scheduler_app", "GpuRequest").objects.create(
        team=team, user=user, name="train", gpu_milli=500, num_gpus=1
    )
    old.get_model("scheduler_app", "TeamQuota").objects.create(team=team, pool=pool, guaranteed_milli=2000)

    migrate_forward()

    moved = Team.objects.get(pk=team.pk)
    assert moved.slug == "vision" and list(moved.members.values_list("username", flat=True)) == ["alice"]
    assert Membership.objects.get(team=moved).is_team_admin()
    assert ApiToken.objects.get().user.username == "alice"
    assert GpuRequest.objects.get(pk=request.pk).team == moved
    assert list(moved.requests.values_list("name", flat=True)) == ["train"]
    assert TeamQuota.objects.get().team == moved
    assert ContentType.objects.get_for_model(Team).app_label == "teams"


def test_events_survive_the_move_with_their_subjects(before_the_move):
    old = before_the_move
    types = old.get_model("contenttypes", "ContentType").objects
    user = old.get_model("auth", "User").objects.create(username="alice")
    team = old.get_model("portal", "Team").objects.create(name="Vision", slug="vision")
    membership = old.get_model("portal", "Membership").objects.create(team=team, user=user)
    request = old.get_model("scheduler_app", "GpuRequest").objects.create(
        team=team, user=user, name="train", gpu_milli=500, num_gpus=1
    )
    old_event = old.get_model("scheduler_app", "Event")
    old_event.objects.create(
        content_type=types.get_or_create(app_label="scheduler_app", model="gpurequest")[0],
        object_id=request.pk,
        team=team,
        actor=user,
        actor_label="alice",
        to_state="pending",
        reason="submitted",
    )
    old_event.objects.create(
        content_type=types.get_or_create(app_label="portal", model="membership")[0],
        object_id=membership.pk,
        team=team,
        actor_label="system",
        to_state="member",
        reason="alice added",
    )

    migrate_forward()

    submitted, added = Event.objects.order_by("id")
    assert (submitted.to_state, submitted.reason, submitted.actor.username) == (
        "pending",
        "submitted",
        "alice",
    )
    assert submitted.subject == GpuRequest.objects.get(pk=request.pk)
    assert submitted.team.slug == "vision" and submitted.data == {}
    assert added.subject == Membership.objects.get(pk=membership.pk)
    assert ContentType.objects.get_for_model(Event).app_label == "audit"

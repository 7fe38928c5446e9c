"""Team quotas: each team's guaranteed milli-GPU per pool, set by operators."""

from django.core.exceptions import ValidationError
from django.db import transaction

from audit.events import log_event
from scheduler_app.models import Pool, TeamQuota
from scheduler_app.passes.dispatch import schedule_soon
from teams.models import Team
from teams.permissions import can_operate, require


def set_team_quota(*, team: Team, pool: Pool, guaranteed_milli: int, actor) -> TeamQuota:
    """Operators set a team's guaranteed milli-GPU in a pool (0 removes the guarantee)."""
    require(can_operate(actor), "Only platform operators set quotas.")
    if guaranteed_milli < 0:
        raise ValidationError({"guaranteed_milli": "A quota cannot be negative."})
    with transaction.atomic():
        quota, _ = TeamQuota.objects.select_for_update().get_or_create(
            team=team, pool=pool, defaults={"guaranteed_milli": 0}
        )
        before, quota.guaranteed_milli = quota.guaranteed_milli, guaranteed_milli
        quota.save(update_fields=["guaranteed_milli"])
        log_event(
            quota,
            "updated",
            actor=actor,
            team=team,
            reason=f"quota on {pool.name} in milli-GPU",
            data={"pool": pool.name, "guaranteed_milli": {"from": before, "to": guaranteed_milli}},
        )
        schedule_soon()
    return quota

from django.contrib.auth import get_user_model

from audit.models import Event
from billing_app.models import Budget
from scheduler_app.demo import seed_demo
from scheduler_app.models import Gpu, GpuRequest, Node, Pool
from teams.models import Team


def counts():
    return [m.objects.count() for m in (Pool, Node, Gpu, Team, get_user_model(), GpuRequest, Event)]


def test_seed_demo_builds_the_demo_cluster(db):
    seed_demo()

    pools = {p.name: (p.gpu_model, p.capacity_type) for p in Pool.objects.all()}
    assert pools["a100-80gb"] == ("A100-80GB", "on-demand")
    assert pools["a100-80gb-spot"] == ("A100-80GB", "spot")
    assert pools["rtx4090"] == ("RTX-4090", "on-demand")
    assert Node.objects.count() >= 6
    assert all(node.gpus.count() >= 4 for node in Node.objects.all())
    assert Team.objects.count() == 2
    assert get_user_model().objects.filter(is_staff=True).count() == 1
    states = set(GpuRequest.objects.values_list("state", flat=True))
    assert {"pending", "scheduled", "running", "succeeded", "cancelled"} <= states


def test_seed_demo_is_idempotent(db):
    seed_demo()
    before = counts()

    seed_demo()

    assert counts() == before


def test_demo_passwords_log_in(db, client):
    seed_demo()
    from scheduler_app.demo import DEMO_PASSWORD

    assert client.login(username="alice", password=DEMO_PASSWORD)


def test_seed_demo_gives_vision_a_small_budget_so_alerts_fire_within_minutes(db):
    seed_demo()
    seed_demo()

    budget = Budget.objects.get()
    assert (budget.team.name, budget.user, budget.thresholds_percent) == ("Vision", None, [50, 80, 100])
    assert budget.monthly_usd < 1

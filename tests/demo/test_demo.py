import datetime as dt
import time

from django.contrib.auth import get_user_model
from django.contrib.contenttypes.models import ContentType
from django.db.models import Count
from django.utils import timezone

from audit.models import Event
from billing_app.invariants import billing_errors
from billing_app.metering import meter_usage
from demo import history as demo_history
from demo.seed import seed_demo
from scheduler_app.choices import RequestState
from scheduler_app.models import Allocation, Gpu, GpuRequest, Node, Pool
from scheduler_app.rules.invariants import over_committed_at_some_moment, violations
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
    from demo.seed import DEMO_PASSWORD

    assert client.login(username="alice", password=DEMO_PASSWORD)


def test_seed_demo_records_a_week_of_finished_requests_that_keep_every_rule(db, monkeypatch):
    monkeypatch.setattr(demo_history, "_WEEKS", {})  # simulate the week again, as a new process does
    started = time.perf_counter()
    seed_demo()
    seconds = time.perf_counter() - started
    now = timezone.now()

    history = GpuRequest.objects.filter(created_at__lt=now - dt.timedelta(hours=1))
    assert history.count() > 300
    assert now - history.order_by("created_at").first().created_at > dt.timedelta(days=7)
    assert set(history.values_list("state", flat=True)) == {RequestState.SUCCEEDED, RequestState.FAILED}
    assert not history.filter(ended_at__gt=now).exists()
    assert not Allocation.objects.filter(request__in=history, ended_at__isnull=True).exists()
    # each with its lifecycle in the log: submitted, placed, started, ended
    kind = ContentType.objects.get_for_model(GpuRequest)
    events = Event.objects.filter(content_type=kind, object_id__in=history.values("pk"))
    assert set(events.values("object_id").annotate(n=Count("id")).values_list("n", flat=True)) == {4}
    # within every card's capacity at every moment, and billed to the second
    assert over_committed_at_some_moment() == []
    meter_usage()
    assert billing_errors() == [] and violations() == []
    assert seconds < 10  # a fresh demo's first start: about 3 s here, most of it the week's simulation

import pytest
from django.urls import reverse

from audit.models import Event
from demo.seed import seed_demo
from scheduler_app.models import Allocation, Gpu, GpuRequest, Node, Pool, TeamQuota
from teams.models import Membership, Team

MODELS = [Team, Membership, Pool, Node, Gpu, TeamQuota, GpuRequest, Allocation, Event]


@pytest.fixture
def demo(db):
    seed_demo()


@pytest.fixture
def operator(demo, django_user_model):
    return django_user_model.objects.get(username="ops")


@pytest.fixture
def member(demo, django_user_model):
    return django_user_model.objects.get(username="bob")


@pytest.fixture
def team_admin(demo, django_user_model):
    return django_user_model.objects.get(username="alice")


def admin_urls():
    for model in MODELS:
        meta = model._meta
        yield reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist")
        first = model.objects.order_by("pk").first()
        yield reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[first.pk])


def test_admin_serves_every_model_list_and_detail_to_staff(demo, client, operator):
    client.force_login(operator)
    for url in admin_urls():
        response = client.get(url)
        assert response.status_code == 200, url


def test_admin_list_supports_search_and_filters(demo, client, operator):
    client.force_login(operator)
    response = client.get(
        reverse("admin:scheduler_app_gpurequest_changelist"), {"q": "resnet", "state": "running"}
    )
    assert response.status_code == 200
    assert "resnet50-imagenet" in response.text
    assert "bert-serving" not in response.text


@pytest.mark.parametrize("who", ["anonymous", "member", "team_admin"])
def test_admin_refuses_everyone_but_staff(demo, client, request, who):
    if who != "anonymous":
        client.force_login(request.getfixturevalue(who))
    for url in admin_urls():
        response = client.get(url)
        assert response.status_code == 302, url
        assert response.url.startswith(reverse("admin:login"))


def test_drain_action_logs_an_event_by_the_operator(demo, client, operator):
    client.force_login(operator)
    node = Node.objects.get(name="rtx4090-node-01")

    client.post(
        reverse("admin:scheduler_app_node_changelist"), {"action": "drain", "_selected_action": [node.pk]}
    )

    node.refresh_from_db()
    assert node.status == "draining"
    assert Event.objects.filter(object_id=node.pk, to_state="draining", actor=operator).exists()


def test_cancel_action_goes_through_the_lifecycle_owner(demo, client, operator):
    client.force_login(operator)
    running = GpuRequest.objects.get(name="resnet50-imagenet")
    finished = GpuRequest.objects.get(name="tokenizer-eval")

    client.post(
        reverse("admin:scheduler_app_gpurequest_changelist"),
        {"action": "cancel", "_selected_action": [running.pk, finished.pk]},
    )

    running.refresh_from_db()
    finished.refresh_from_db()
    assert (running.state, finished.state) == ("cancelled", "succeeded")
    assert not Allocation.objects.committed().filter(request=running).exists()
    assert Event.objects.filter(object_id=running.pk, to_state="cancelled", actor=operator).exists()


@pytest.mark.parametrize("model", [Event, Allocation])
def test_records_written_by_services_cannot_be_deleted_in_admin(demo, client, operator, model):
    client.force_login(operator)
    record = model.objects.first()
    meta = model._meta
    url = reverse(f"admin:{meta.app_label}_{meta.model_name}_delete", args=[record.pk])
    response = client.post(url, {"post": "yes"})
    assert response.status_code == 403
    assert model.objects.filter(pk=record.pk).exists()

"""The node agent's protocol (/api/v1/agent/…): node credential only, own work only, idempotent reports,
bad reports refused in the error envelope with nothing changed."""

import datetime as dt
import io

import pytest
import time_machine
from django.core.management import call_command
from rest_framework.test import APIClient

from audit.models import Event
from scheduler_app.models import Gpu, LogChunk
from scheduler_app.services.inventory import issue_agent_credential
from scheduler_app.services.placement import Slice, allocate
from scheduler_app.services.requests import release_request, submit_request

AGENT = "/api/v1/agent/"


def agent_client(node) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {issue_agent_credential(node)}")
    return client


@pytest.fixture
def node(make_node):
    return make_node("node-1", gpus=2)


@pytest.fixture
def other_node(make_node):
    return make_node("node-2", gpus=1)


@pytest.fixture
def agent(node):
    return agent_client(node)


@pytest.fixture
def placed(member, team, node):
    """A request of the member's team scheduled on node-1's first card: 250 milli, 20 GiB."""
    request = submit_request(user=member, team=team, name="train", gpu_milli=250, command="python train.py")
    allocate(request, [Slice(node.gpus.get(index=0).pk, 250, 20480)])
    request.refresh_from_db()
    return request


def events_of(request) -> list[str]:
    return list(
        Event.objects.filter(content_type__model="gpurequest", object_id=request.pk)
        .order_by("id")
        .values_list("to_state", flat=True)
    )


def card(uuid, memory_mib=81920, model="A100-80GB", mig_mode="disabled"):
    return {"uuid": uuid, "model": model, "memory_mib": memory_mib, "mig_mode": mig_mode}


def test_register_adds_new_cards_updates_known_ones_and_names_the_missing(agent, node):
    body = {"gpus": [card("GPU-node-1-0", mig_mode="enabled"), card("GPU-new", memory_mib=40960)]}

    response = agent.post(AGENT + "register/", body, format="json")

    assert response.status_code == 200, response.json()
    assert response.json() == {
        "node": "node-1",
        "node_status": "ready",
        "added": ["GPU-new"],
        "updated": ["GPU-node-1-0"],
        "missing": ["GPU-node-1-1"],
        "cards": ["GPU-node-1-0", "GPU-new"],
    }
    first = Gpu.objects.get(uuid="GPU-node-1-0")
    assert (first.mig_capable, first.mig_enabled) == (True, True)
    new = Gpu.objects.get(uuid="GPU-new")
    assert (new.node, new.index, new.memory_mib) == (node, 2, 40960)
    node.refresh_from_db()
    assert node.last_heartbeat_at is not None


def test_registering_the_same_cards_again_changes_nothing(agent, node):
    body = {"gpus": [card("GPU-node-1-0"), card("GPU-node-1-1")]}
    agent.post(AGENT + "register/", body, format="json")
    before = Event.objects.count()

    response = agent.post(AGENT + "register/", body, format="json")

    assert response.json()["added"] == response.json()["updated"] == response.json()["missing"] == []
    assert Event.objects.count() == before


def test_an_agent_on_a_slurm_node_changes_none_of_its_cards_and_learns_them_by_index(agent, node):
    node.pool.backend = "slurm"
    node.pool.save(update_fields=["backend"])
    before = list(Gpu.objects.filter(node=node).order_by("index").values_list("uuid", "memory_mib"))
    body = {"gpus": [card("GPU-nvml-a", memory_mib=16384), card("GPU-nvml-b"), card("GPU-nvml-c")]}

    response = agent.post(AGENT + "register/", body, format="json")

    assert response.status_code == 200, response.json()
    assert response.json() == {
        "node": "node-1",
        "node_status": "ready",
        "added": [],
        "updated": [],
        "missing": [],
        "cards": ["GPU-node-1-0", "GPU-node-1-1", ""],  # the third card: Slurm has none
    }
    assert list(Gpu.objects.filter(node=node).order_by("index").values_list("uuid", "memory_mib")) == before


@pytest.mark.parametrize(
    ("cards", "field", "says"),
    [
        ([card("GPU-node-2-0")], "gpus[0].uuid", "is a card of node node-2"),
        ([card("GPU-x"), card("GPU-x")], "gpus[1].uuid", "appears twice"),
        ([card("GPU-node-1-0", memory_mib=10000)], "gpus[0].memory_mib", "hold 20480 MiB"),
        ([card("GPU-x", memory_mib=0)], "gpus[0].memory_mib", "greater than or equal to 1"),
        ([card("GPU-x", mig_mode="maybe")], "gpus[0].mig_mode", "Give one of: enabled, disabled"),
        ([{"uuid": "GPU-x"}], "gpus[0].model", "required"),
        ([], "gpus", "at least one card"),
        ("all", "gpus", ""),
    ],
)
def test_a_bad_registration_is_refused_naming_the_place_and_changes_nothing(
    agent, node, other_node, placed, cards, field, says
):
    before = list(Gpu.objects.order_by("pk").values_list("uuid", "memory_mib", "node_id"))

    response = agent.post(AGENT + "register/", {"gpus": cards}, format="json")

    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert says in " ".join(error["fields"][field])
    assert list(Gpu.objects.order_by("pk").values_list("uuid", "memory_mib", "node_id")) == before


def test_work_lists_this_nodes_requests_with_command_share_memory_cards_and_checkpoint_dir(
    agent, placed, other_node, member, team, settings
):
    elsewhere = submit_request(user=member, team=team, name="other", gpu_milli=500)
    allocate(elsewhere, [Slice(other_node.gpus.get().pk, 500, 40960)])

    response = agent.get(AGENT + "work/")

    assert response.status_code == 200
    assert response.json() == [
        {
            "request_id": placed.pk,
            "name": "train",
            "team": team.slug,
            "state": "scheduled",
            "generation": 1,
            "task_type": "training",
            "command": "python train.py",
            "checkpoint_dir": f"{settings.CHECKPOINT_ROOT}/{team.slug}/request-{placed.pk}",
            "last_checkpoint_at": None,
            "stop_by": None,
            "log_offset": 0,
            "environment": {},
            "user": "bob",
            "unix_account": "",
            "cpu_milli": 1000,
            "memory_mib": 4096,
            "gpus": [{"uuid": "GPU-node-1-0", "milli": 250, "memory_mib": 20480, "mig_instance": ""}],
        }
    ]


def test_started_makes_it_running_and_a_repeat_changes_nothing(agent, placed):
    first = agent.post(AGENT + f"requests/{placed.pk}/started/")
    second = agent.post(AGENT + f"requests/{placed.pk}/started/")

    assert (first.status_code, second.status_code) == (200, 200)
    assert second.json() == {"request_id": placed.pk, "state": "running"}
    assert events_of(placed) == ["pending", "scheduled", "running"]


@pytest.mark.parametrize(("exit_code", "state"), [(0, "succeeded"), (3, "failed"), (-9, "failed")])
def test_finished_ends_it_by_exit_status_and_a_repeat_changes_nothing(agent, placed, exit_code, state):
    agent.post(AGENT + f"requests/{placed.pk}/started/")

    first = agent.post(AGENT + f"requests/{placed.pk}/finished/", {"exit_code": exit_code}, format="json")
    again = agent.post(AGENT + f"requests/{placed.pk}/finished/", {"exit_code": 1}, format="json")

    assert (first.status_code, again.status_code) == (200, 200)
    assert again.json()["state"] == state
    placed.refresh_from_db()
    assert (placed.state, placed.exit_code) == (state, exit_code)
    assert events_of(placed) == ["pending", "scheduled", "running", state]
    assert not placed.allocations.committed().exists()


def test_a_finished_job_is_billed_until_it_ended_not_until_the_report(agent, placed):
    """stopped_at: when the process ended; its slices close then (never before it started)."""
    with time_machine.travel(placed.scheduled_at + dt.timedelta(seconds=1), tick=False):
        agent.post(AGENT + f"requests/{placed.pk}/started/")
    ended = placed.scheduled_at + dt.timedelta(seconds=7)

    with time_machine.travel(ended + dt.timedelta(seconds=2), tick=False):
        response = agent.post(
            AGENT + f"requests/{placed.pk}/finished/",
            {"exit_code": 0, "stopped_at": ended.isoformat()},
            format="json",
        )

    assert response.status_code == 200
    placed.refresh_from_db()
    assert placed.ended_at == ended
    assert set(placed.allocations.values_list("ended_at", flat=True)) == {ended}


def test_finished_after_the_user_released_it_keeps_the_users_decision(agent, placed, member):
    agent.post(AGENT + f"requests/{placed.pk}/started/")
    release_request(placed, user=member)

    response = agent.post(AGENT + f"requests/{placed.pk}/finished/", {"exit_code": -15}, format="json")

    assert response.status_code == 200
    assert response.json()["state"] == "released"
    placed.refresh_from_db()
    assert (placed.state, placed.exit_code) == ("released", -15)


@pytest.mark.parametrize("bad", ["0", None, 1.5, True, 300, -300])
def test_a_bad_exit_status_is_refused_and_changes_nothing(agent, placed, bad):
    agent.post(AGENT + f"requests/{placed.pk}/started/")

    response = agent.post(AGENT + f"requests/{placed.pk}/finished/", {"exit_code": bad}, format="json")

    assert response.status_code == 400
    assert "exit_code" in response.json()["error"]["fields"]
    placed.refresh_from_db()
    assert placed.state == "running"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("started/", None),
        ("finished/", {"exit_code": 1}),
        ("log/", {"offset": 0, "text": "hijack"}),
        ("memory-exceeded/", {"uuid": "GPU-node-1-0", "used_mib": 1, "limit_mib": 0}),
    ],
)
def test_a_node_cannot_touch_another_nodes_request(other_node, placed, path, body):
    intruder = agent_client(other_node)

    response = intruder.post(AGENT + f"requests/{placed.pk}/{path}", body, format="json")

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    placed.refresh_from_db()
    assert placed.state == "scheduled"
    assert events_of(placed) == ["pending", "scheduled"]
    assert not LogChunk.objects.exists()


def test_a_personal_token_cannot_use_the_agent_endpoints(api_client, member, placed):
    response = api_client(member).post(AGENT + f"requests/{placed.pk}/started/")

    assert response.status_code == 401
    placed.refresh_from_db()
    assert placed.state == "scheduled"


def test_log_chunks_are_stored_once_and_tailed_by_the_team(agent, placed, api_client, member, outsider):
    url = AGENT + f"requests/{placed.pk}/log/"
    agent.post(url, {"offset": 0, "text": "epoch 1\n"}, format="json")
    agent.post(url, {"offset": 0, "text": "epoch 1\n"}, format="json")  # a retry
    answer = agent.post(url, {"offset": 8, "text": "epoch 2\n"}, format="json")

    assert answer.json() == {"end": 16}
    assert LogChunk.objects.count() == 2
    tail = api_client(member).get(f"/api/v1/requests/{placed.pk}/log/", {"after": 8}).json()
    assert tail == {"start": 8, "end": 16, "text": "epoch 2\n", "state": "scheduled", "exit_code": None}
    whole = api_client(member).get(f"/api/v1/requests/{placed.pk}/log/").json()
    assert whole["text"] == "epoch 1\nepoch 2\n"
    assert api_client(outsider).get(f"/api/v1/requests/{placed.pk}/log/").status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"offset": 0, "text": "x" * (64 * 1024 + 1)}, "text"),
        ({"offset": -1, "text": "x"}, "offset"),
        ({"offset": 0, "text": ""}, "text"),
        ({"offset": "0", "text": "x"}, "offset"),
        ({"offset": 0, "text": 5}, "text"),
    ],
)
def test_a_bad_log_report_is_refused_and_stores_nothing(agent, placed, body, field):
    response = agent.post(AGENT + f"requests/{placed.pk}/log/", body, format="json")

    assert response.status_code == 400
    assert field in response.json()["error"]["fields"]
    assert not LogChunk.objects.exists()


def test_the_log_keeps_its_newest_part(agent, placed, settings, monkeypatch):
    monkeypatch.setattr("scheduler_app.services.agents.LOG_MAX_CHARS_PER_REQUEST", 10)
    for offset, text in ((0, "aaaa"), (4, "bbbb"), (8, "cccc")):
        agent.post(AGENT + f"requests/{placed.pk}/log/", {"offset": offset, "text": text}, format="json")

    assert list(LogChunk.objects.values_list("text", flat=True)) == ["bbbb", "cccc"]


def test_the_watchdogs_report_fails_the_request_saying_what_it_used(agent, placed):
    agent.post(AGENT + f"requests/{placed.pk}/started/")
    body = {"uuid": "GPU-node-1-0", "used_mib": 30000, "limit_mib": 20480}

    response = agent.post(AGENT + f"requests/{placed.pk}/memory-exceeded/", body, format="json")
    exit_report = agent.post(AGENT + f"requests/{placed.pk}/finished/", {"exit_code": 0}, format="json")

    assert response.json() == {"request_id": placed.pk, "state": "failed"}
    event = Event.objects.filter(object_id=placed.pk, to_state="failed").get()
    assert event.reason == "stopped: used 30000 MiB of GPU memory above its slice of 20480 MiB"
    assert exit_report.json()["state"] == "failed"  # a clean exit after the stop changes nothing
    placed.refresh_from_db()
    assert placed.exit_code == 0


def test_the_watchdogs_report_must_name_a_card_of_the_request(agent, placed):
    body = {"uuid": "GPU-node-1-1", "used_mib": 30000, "limit_mib": 20480}

    response = agent.post(AGENT + f"requests/{placed.pk}/memory-exceeded/", body, format="json")

    assert response.status_code == 400
    assert "uuid" in response.json()["error"]["fields"]
    placed.refresh_from_db()
    assert placed.state == "scheduled"


def test_heartbeat_marks_the_node_heard(agent, node):
    response = agent.post(AGENT + "heartbeat/")

    assert response.json() == {"node": "node-1", "node_status": "ready"}
    node.refresh_from_db()
    assert node.last_heartbeat_at is not None


def test_an_operator_issues_a_new_credential_shown_once_and_the_old_one_stops(client, operator, node):
    old = agent_client(node)
    client.force_login(operator)

    page = client.post(f"/operator/nodes/{node.pk}/credential/")

    assert page.status_code == 200
    assert "no-store" in page["Cache-Control"]
    credential = page.context["credential"]
    assert credential.startswith("node_") and credential in page.content.decode()
    assert old.post(AGENT + "heartbeat/").status_code == 401
    fresh = APIClient()
    fresh.credentials(HTTP_AUTHORIZATION=f"Bearer {credential}")
    assert fresh.post(AGENT + "heartbeat/").status_code == 200
    assert credential not in client.get(f"/operator/nodes/{node.pk}/").content.decode()


def test_a_member_cannot_issue_a_node_credential(client, member, node, agent):
    client.force_login(member)

    assert client.post(f"/operator/nodes/{node.pk}/credential/").status_code == 403
    assert agent.post(AGENT + "heartbeat/").status_code == 200  # the credential in use still works


def test_register_node_command_prints_a_working_credential(pool):
    out, err = io.StringIO(), io.StringIO()

    call_command("register_node", "gpu-host-7", pool=pool.name, stdout=out, stderr=err)

    credential = out.getvalue().strip()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {credential}")
    response = client.post(AGENT + "register/", {"gpus": [card("GPU-h7-0")]}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["node"] == "gpu-host-7"
    assert "shown this once" in err.getvalue()

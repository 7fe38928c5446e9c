"""Operators connect a pool to Slurm from the API and the operator page, without the admin: the token is
written, never shown; bad input is a 400 naming the field and changes nothing; others are refused. The
connections that reach Slurm use the real test cluster (tests/slurm_backend/conftest.py)."""

import pytest
from django.contrib.contenttypes.models import ContentType
from django.urls import reverse

from audit.models import Event
from scheduler_app.models import Node, Pool
from scheduler_app.services.inventory import create_pool
from slurm_backend.models import SlurmConnection


@pytest.fixture
def fake_pool(db):
    return create_pool(name="fake", gpu_model="fake", capacity_type="on-demand")


def slurm_url(pool_name: str = "fake") -> str:
    return f"/api/v1/pools/{pool_name}/slurm/"


def events_of(pool: Pool) -> list[str]:
    on_pool = Event.objects.filter(content_type=ContentType.objects.get_for_model(Pool), object_id=pool.pk)
    return list(on_pool.order_by("pk").values_list("to_state", flat=True))


def test_an_operator_connects_a_pool_over_the_api_and_the_pool_shows_its_backend(
    api_client, operator, fake_pool, slurm_cluster, tmp_path
):
    client = api_client(operator)

    answer = client.put(
        slurm_url(),
        {
            "url": f"unix:{slurm_cluster['SLURM_REST_SOCKET']}",
            "partition": "gpu",
            "output_dir": str(tmp_path),
        },
        format="json",
    )

    assert answer.status_code == 200, answer.json()
    assert answer.json()["partition"] == "gpu" and answer.json()["problems"] == []
    assert answer.json()["has_token"] is False and "token" not in answer.json()
    assert sorted(Node.objects.filter(pool=fake_pool).values_list("name", flat=True)) == ["n1", "n2"]
    pool = next(p for p in client.get("/api/v1/pools/").json() if p["name"] == "fake")
    assert (pool["backend"], pool["granularity_milli"]) == ("slurm", 125)
    assert events_of(fake_pool)[-2:] == ["updated", "slurm connected"]

    gone = client.delete(slurm_url())

    assert gone.status_code == 204
    fake_pool.refresh_from_db()
    assert fake_pool.backend == "agent" and not SlurmConnection.objects.exists()
    assert events_of(fake_pool)[-1] == "slurm disconnected"
    assert client.get(slurm_url()).status_code == 404


def test_a_token_is_kept_encrypted_and_never_shown_again(api_client, operator, fake_pool, tmp_path):
    """Over http(s) slurmrestd needs the JWT; the one stored stays when a change leaves it out."""
    SlurmConnection.objects.create(
        pool=fake_pool, url="http://127.0.0.1:9/", partition="gpu", output_dir=str(tmp_path)
    )
    connection = SlurmConnection.objects.get()
    connection.set_token("eyJ.secret.jwt")
    connection.save()
    client = api_client(operator)

    shown = client.get(slurm_url())
    refused = client.put(
        slurm_url(),
        {"url": "http://127.0.0.1:9/", "partition": "gpu", "output_dir": str(tmp_path)},
        format="json",
    )

    assert shown.status_code == 200 and shown.json()["has_token"] is True
    assert "eyJ" not in shown.content.decode()
    # The stored token was used (no 400 on `token`): slurmrestd itself is not there.
    assert refused.status_code == 400 and set(refused.json()["error"]["fields"]) == {"url"}
    assert "eyJ" not in refused.content.decode()
    assert SlurmConnection.objects.get().token() == "eyJ.secret.jwt"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"url": "ftp://x", "partition": "gpu"}, "url"),
        ({"url": "unix:relative.sock", "partition": "gpu"}, "url"),
        ({"url": "unix:/nowhere/rest.sock", "partition": "gpu"}, "url"),  # slurmrestd cannot be reached
        ({"url": "https://slurm.example:6820", "partition": "gpu"}, "token"),
        ({"url": "unix:/nowhere/rest.sock", "partition": "gpu", "output_dir": "/no/such/dir"}, "output_dir"),
        ({"url": "unix:/nowhere/rest.sock", "partition": "gpu", "card_memory_mib": 0}, "card_memory_mib"),
        ({"url": "unix:/nowhere/rest.sock"}, "partition"),
    ],
)
def test_bad_connection_input_is_a_400_naming_the_field_and_changes_nothing(
    api_client, operator, fake_pool, tmp_path, body, field
):
    answer = api_client(operator).put(slurm_url(), {"output_dir": str(tmp_path), **body}, format="json")

    assert answer.status_code == 400
    assert field in answer.json()["error"]["fields"], answer.json()
    fake_pool.refresh_from_db()
    assert fake_pool.backend == "agent" and not SlurmConnection.objects.exists()
    assert "slurm connected" not in events_of(fake_pool)


def test_a_partition_slurm_does_not_list_is_a_400_on_partition(
    api_client, operator, fake_pool, slurm_cluster, tmp_path
):
    body = {
        "url": f"unix:{slurm_cluster['SLURM_REST_SOCKET']}",
        "partition": "nope",
        "output_dir": str(tmp_path),
    }

    answer = api_client(operator).put(slurm_url(), body, format="json")

    assert answer.status_code == 400 and set(answer.json()["error"]["fields"]) == {"partition"}
    assert not SlurmConnection.objects.exists() and not Node.objects.filter(pool=fake_pool).exists()


@pytest.mark.parametrize("user", ["team_admin", "member", "outsider"])
def test_only_operators_see_or_change_a_pools_slurm_connection(
    api_client, fake_pool, tmp_path, user, request
):
    client = api_client(request.getfixturevalue(user))
    body = {"url": "unix:/nowhere/rest.sock", "partition": "gpu", "output_dir": str(tmp_path)}

    assert client.get(slurm_url()).status_code == 403
    assert client.put(slurm_url(), body, format="json").status_code == 403
    assert client.delete(slurm_url()).status_code == 403
    assert client.get(reverse("operator_pool_slurm", args=[fake_pool.pk])).status_code in (302, 403)


def test_disconnecting_a_pool_not_on_slurm_is_a_400(api_client, operator, fake_pool):
    answer = api_client(operator).delete(slurm_url())

    assert answer.status_code == 400 and "pool" in answer.json()["error"]["fields"]


def test_an_operator_connects_a_pool_from_its_page(client, operator, fake_pool, slurm_cluster, tmp_path):
    client.force_login(operator)
    page = reverse("operator_pool_slurm", args=[fake_pool.pk])
    form = {
        "url": f"unix:{slurm_cluster['SLURM_REST_SOCKET']}",
        "token": "",
        "partition": "gpu",
        "output_dir": str(tmp_path),
        "card_memory_mib": "16384",
    }

    assert client.get(page).status_code == 200
    refused = client.post(page, {**form, "partition": "nope"})
    connected = client.post(page, form)

    assert refused.status_code == 400 and "Slurm lists no node in partition nope" in refused.content.decode()
    assert connected.status_code == 302
    fake_pool.refresh_from_db()
    assert fake_pool.backend == "slurm" and fake_pool.slurm.card_memory_mib == 16384
    shown = client.get(page).content.decode()
    assert "Disconnect from Slurm" in shown and "partition <strong>gpu</strong>" in shown
    pools = client.get(reverse("operator_pools")).content.decode()
    assert "Slurm (slurmrestd)" in pools

    assert client.post(reverse("operator_pool_slurm_disconnect", args=[fake_pool.pk])).status_code == 302
    fake_pool.refresh_from_db()
    assert fake_pool.backend == "agent"

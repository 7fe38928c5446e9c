"""The variables a request declares for its job: checked by the submit service (API, pages and SDK
alike), shown back to the team, refused with a specific message and nothing saved when wrong."""

import pytest
from django.core.exceptions import ValidationError

from scheduler_app.models import GpuRequest
from scheduler_app.services.requests import submit_request

URL = "/api/v1/requests/"
GOOD = {"name": "train", "task_type": "training", "gpu_milli": 250}


@pytest.fixture
def cluster(make_node):
    return make_node(gpus=2)


def test_a_submitted_environment_is_stored_and_shown_on_submit_and_detail(api_client, member, cluster):
    client = api_client(member)
    environment = {"WANDB_PROJECT": "vision", "_LR": " 3e-4 ", "EMPTY": ""}

    submitted = client.post(URL, GOOD | {"environment": environment}, format="json")

    assert submitted.status_code == 201, submitted.json()
    assert submitted.json()["environment"] == environment
    request = GpuRequest.objects.get()
    assert request.environment == environment
    assert client.get(f"{URL}{request.pk}/").json()["environment"] == environment


def test_a_request_without_an_environment_declares_none(api_client, member, cluster):
    response = api_client(member).post(URL, GOOD, format="json")

    assert response.json()["environment"] == {}
    assert GpuRequest.objects.get().environment == {}


@pytest.mark.parametrize(
    ("environment", "says"),
    [
        ({"1ST": "x"}, "'1ST' is not a variable name"),
        ({"MY-VAR": "x"}, "'MY-VAR' is not a variable name"),
        ({"": "x"}, "'' is not a variable name"),
        ({"A" * 129: "x"}, "a variable name has at most 128 characters"),
        ({f"V{i}": "x" for i in range(65)}, "At most 64 variables; this has 65."),
        ({"DATA": "x" * 4097}, "DATA: a value has at most 4096 characters (this one has 4097)."),
        ({"N": 5}, "N: a value must be a string."),
        ({"N": None}, "N: a value must be a string."),
        (["A=1"], "Give the environment as an object of NAME: value strings."),
        ("A=1", "Give the environment as an object of NAME: value strings."),
    ],
)
def test_a_bad_environment_gets_a_specific_400_and_nothing_is_saved(
    api_client, member, cluster, environment, says
):
    response = api_client(member).post(URL, GOOD | {"environment": environment}, format="json")

    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert says in " ".join(error["fields"]["environment"])
    assert not GpuRequest.objects.exists()


@pytest.mark.parametrize(
    "name",
    [
        "GPU_PORTAL_REQUEST_ID",
        "GPU_PORTAL_NODE_CREDENTIAL",
        "CUDA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
        "NVIDIA_VISIBLE_DEVICES",
        "HOME",
        "USER",
        "LOGNAME",
        "SIMNVML_CLAIMS_DIR",
    ],
)
def test_a_name_the_agent_sets_is_refused_saying_so(api_client, member, cluster, name):
    response = api_client(member).post(URL, GOOD | {"environment": {name: "x"}}, format="json")

    assert response.status_code == 400
    (message,) = response.json()["error"]["fields"]["environment"]
    assert message.startswith(f"{name} is reserved: the node agent sets it for every job")
    assert not GpuRequest.objects.exists()


def test_names_that_only_resemble_reserved_ones_are_allowed(api_client, member, cluster):
    environment = {"home": "x", "USERNAME": "x", "CUDA_CACHE_PATH": "x", "MY_GPU_PORTAL_X": "x"}

    response = api_client(member).post(URL, GOOD | {"environment": environment}, format="json")

    assert response.status_code == 201, response.json()


def test_the_service_refuses_a_nul_in_a_value_whatever_path_called_it(member, team, cluster):
    with pytest.raises(ValidationError) as refused:
        submit_request(user=member, team=team, name="x", gpu_milli=250, environment={"A": "x\x00y"})

    assert refused.value.message_dict == {"environment": ["A: a value cannot hold NUL characters."]}
    assert not GpuRequest.objects.exists()


def test_the_estimate_checks_the_environment_like_a_submit(api_client, member, cluster):
    client = api_client(member)

    good = client.post(f"{URL}estimate/", GOOD | {"environment": {"A": "1"}}, format="json")
    bad = client.post(f"{URL}estimate/", GOOD | {"environment": {"HOME": "/root"}}, format="json")

    assert good.status_code == 200, good.json()
    assert bad.status_code == 400
    assert "HOME is reserved" in bad.json()["error"]["fields"]["environment"][0]
    assert not GpuRequest.objects.exists()


def test_another_team_cannot_see_the_declared_variables(api_client, member, outsider, cluster):
    submitted = api_client(member).post(URL, GOOD | {"environment": {"A": "1"}}, format="json").json()

    assert api_client(outsider).get(f"{URL}{submitted['id']}/").status_code == 404
    assert api_client(outsider).get(URL).json()["results"] == []

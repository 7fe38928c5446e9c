"""GET /metrics: DCGM exporter names and labels from each card's latest sample, in the Prometheus text
format 0.0.4 (parsed strictly, line by line), for the bearer token or an operator only."""

import datetime as dt
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduler_app.models import Gpu
from scheduler_app.services.placement import Slice, allocate
from scheduler_app.services.requests import submit_request
from tests.telemetry.telemetry_helpers import plant

TOKEN = "metrics-secret-123"
METRIC_NAMES = [
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_GPU_TEMP",
]
NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL_VALUE = r'"(?:[^"\\\n]|\\\\|\\"|\\n)*"'
SAMPLE = re.compile(
    rf"^({NAME})\{{((?:[a-zA-Z_][a-zA-Z0-9_]*={LABEL_VALUE},)*[a-zA-Z_][a-zA-Z0-9_]*={LABEL_VALUE})\}} (\S+)$"
)
LABEL = re.compile(rf"([a-zA-Z_][a-zA-Z0-9_]*)=({LABEL_VALUE})")


def parse(text: str) -> dict[str, list[tuple[dict, float]]]:
    """The exposition, checked strictly: HELP then TYPE (gauge) once per metric before its samples, every
    line well formed, label values properly escaped; {metric: [(labels, value)]}."""
    assert text.endswith("\n")
    series: dict[str, list] = {}
    helped, typed, current = set(), set(), None
    for line in text[:-1].split("\n"):
        if line.startswith("# HELP "):
            name, _, help_text = line[len("# HELP ") :].partition(" ")
            assert re.fullmatch(NAME, name) and help_text and name not in helped, line
            helped.add(name)
            current = name
        elif line.startswith("# TYPE "):
            name, _, kind = line[len("# TYPE ") :].partition(" ")
            assert name == current and kind == "gauge" and name not in typed, line
            typed.add(name)
            series[name] = []
        else:
            match = SAMPLE.match(line)
            assert match, f"not a sample line: {line!r}"
            name, body, value = match.groups()
            assert name == current and name in typed, f"{name} before its HELP/TYPE"
            labels = {key: _unescape(raw[1:-1]) for key, raw in LABEL.findall(body)}
            assert ",".join(f"{k}={v}" for k, v in LABEL.findall(body)) == body
            series[name].append((labels, float(value)))
    return series


def _unescape(raw: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "\\": "\\", '"': '"'}[m.group(1)], raw)


@pytest.fixture(autouse=True)
def _token(settings):
    settings.METRICS_BEARER_TOKEN = TOKEN


@pytest.fixture
def cluster(make_node, member, team):
    """node-1: card 0 shared by two of the team's requests, card 1 free; node-2's card silent for an hour."""
    node = make_node("node-1", gpus=2, memory_mib=81920)
    odd = Gpu.objects.get(uuid="GPU-node-1-1")
    odd.model = 'A100 "SXM4"\\80GB\nrev'  # a model name that needs every escape
    odd.save()
    first = submit_request(user=member, team=team, name="one", gpu_milli=500)
    second = submit_request(user=member, team=team, name="two", gpu_milli=250)
    card0 = node.gpus.get(index=0)
    allocate(first, [Slice(card0.pk, 500, 8192)])
    allocate(second, [Slice(card0.pk, 250, 4096)])
    now = timezone.now()
    plant(
        card0,
        now - dt.timedelta(seconds=30),
        [10, 77],
        every_s=15,
        memory=30_000,
        power_mw=312_500,
        temperature=66,
    )
    plant(odd, now - dt.timedelta(seconds=5), [3], memory=1_000, power_mw=60_000, temperature=40)
    silent = make_node("node-2", gpus=1).gpus.get()
    plant(silent, now - dt.timedelta(hours=1), [99])
    return {"first": first, "second": second}


def scrape(client, **headers):
    return client.get("/metrics", **headers)


def test_the_latest_reading_of_each_card_under_dcgm_names_and_labels(client, cluster, team):
    response = scrape(client, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")

    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    metrics = parse(response.content.decode())
    assert list(metrics) == METRIC_NAMES
    util = metrics["DCGM_FI_DEV_GPU_UTIL"]
    shared = {
        "gpu": "0",
        "UUID": "GPU-node-1-0",
        "device": "nvidia0",
        "modelName": "A100-80GB",
        "Hostname": "node-1",
        "team": team.slug,
    }
    assert util == [
        (shared | {"allocation": str(cluster["first"].pk)}, 77.0),
        (shared | {"allocation": str(cluster["second"].pk)}, 77.0),
        (
            {
                "gpu": "1",
                "UUID": "GPU-node-1-1",
                "device": "nvidia1",
                "modelName": 'A100 "SXM4"\\80GB\nrev',
                "Hostname": "node-1",
                "team": "",
                "allocation": "",
            },
            3.0,
        ),
    ]
    assert [value for _, value in metrics["DCGM_FI_DEV_FB_USED"]] == [30_000, 30_000, 1_000]
    assert [value for _, value in metrics["DCGM_FI_DEV_FB_FREE"]] == [51_920, 51_920, 80_920]
    assert [value for _, value in metrics["DCGM_FI_DEV_POWER_USAGE"]] == [312.5, 312.5, 60.0]
    assert [value for _, value in metrics["DCGM_FI_DEV_GPU_TEMP"]] == [66, 66, 40]
    text = response.content.decode()
    assert 'modelName="A100 \\"SXM4\\"\\\\80GB\\nrev"' in text
    assert "node-2" not in text  # silent for an hour: no series


def test_an_operator_signed_in_may_scrape(client, cluster, operator):
    client.force_login(operator)

    response = scrape(client)

    assert response.status_code == 200
    assert len(parse(response.content.decode())["DCGM_FI_DEV_GPU_TEMP"]) == 3


@pytest.mark.parametrize("how", ["nothing", "wrong token", "member session", "user api token", "basic"])
def test_anyone_else_is_refused(client, api_client, cluster, member, how):
    headers = {}
    if how == "wrong token":
        headers["HTTP_AUTHORIZATION"] = "Bearer metrics-secret-124"
    elif how == "member session":
        client.force_login(member)
    elif how == "user api token":
        client = api_client(member)
    elif how == "basic":
        headers["HTTP_AUTHORIZATION"] = f"Basic {TOKEN}"

    response = scrape(client, **headers)

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Bearer"
    assert b"DCGM" not in response.content


def test_without_a_configured_token_only_operators_scrape(client, cluster, settings):
    settings.METRICS_BEARER_TOKEN = ""

    assert scrape(client, HTTP_AUTHORIZATION="Bearer ").status_code == 401


def test_an_empty_cluster_still_has_help_and_type_lines(client, db):
    metrics = parse(scrape(client, HTTP_AUTHORIZATION=f"Bearer {TOKEN}").content.decode())

    assert metrics == {name: [] for name in METRIC_NAMES}


def test_a_scrape_takes_the_same_queries_whatever_the_cluster_size(client, cluster, make_node):
    def queries_for_a_scrape() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert scrape(client, HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 200
        return len(captured)

    before = queries_for_a_scrape()
    for n in range(3):
        gpu = make_node(f"extra-{n}", gpus=4).gpus.first()
        plant(gpu, timezone.now() - dt.timedelta(seconds=10), [50])

    assert queries_for_a_scrape() == before

"""/operator/what-if/: operators start a replay from the form and land on its page; others get 403."""

import datetime as dt

import pytest

from scheduler_app.models import WhatIfRun
from tests.scheduler_app.whatif_helpers import T0, record_history

URL = "/operator/what-if/"


@pytest.fixture
def period(team, member, make_node, pool):
    return record_history(team, member, make_node("a100-1", gpus=1), pool)


def form(period, **changes):
    fields = {"start": period["start"][:19], "end": period["end"][:19], "policy": "fgd-plus", "queue": "fair"}
    return {**fields, "quotas": "", "nodes": "", "target_p95_s": "", **changes}


def test_members_cannot_open_the_what_if_page(client, member):
    client.force_login(member)

    assert client.get(URL).status_code == 403


def test_an_operator_starts_a_run_and_sees_its_page(period, client, operator):
    client.force_login(operator)

    answer = client.post(URL, form(period, nodes="a100 +2", quotas="vision a100 1000", target_p95_s="60"))

    run = WhatIfRun.objects.get()
    assert answer.status_code == 302 and answer["Location"] == f"{URL}{run.pk}/"
    assert run.scenario["nodes"] == {"a100": 2} and run.scenario["target_p95_s"] == 60
    assert run.scenario["quotas"] == [{"team": "vision", "pool": "a100", "guaranteed_milli": 1000}]
    page = client.get(answer["Location"]).content.decode()
    assert 'id="what-if-delays"' in page and f"/api/v1/what-if/{run.pk}/" in page


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"nodes": "a100 lots"}, "nodes"),
        ({"quotas": "vision a100"}, "quotas"),
        ({"nodes": "h100 +1"}, "nodes"),
    ],
)
def test_a_bad_form_shows_the_error_under_its_field_and_starts_nothing(
    period, client, operator, changes, field
):
    client.force_login(operator)

    answer = client.post(URL, form(period, **changes))

    assert answer.status_code == 400
    assert answer.context["form"].errors[field]
    assert not WhatIfRun.objects.exists()


def test_a_period_with_nothing_placed_is_refused_on_the_start_field(period, client, operator):
    client.force_login(operator)
    before = {
        "start": (T0 - dt.timedelta(hours=5)).isoformat(),
        "end": (T0 - dt.timedelta(hours=4)).isoformat(),
    }

    answer = client.post(URL, form(before))

    assert answer.status_code == 400 and answer.context["form"].errors["start"]
    assert not WhatIfRun.objects.exists()

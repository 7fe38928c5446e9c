"""The request form's price block: on-demand vs spot per hour for the chosen share, on the page and in
the estimate answer the form's script shows; and operators pricing pools on the pools page."""

import html

import pytest
from django.urls import reverse

from audit.models import Event
from billing_app.models import PoolPrice
from billing_app.selectors import price_in_force
from billing_app.services import set_pool_price
from scheduler_app.choices import CapacityType
from scheduler_app.services.inventory import create_pool


@pytest.fixture
def spot_pool(db):
    return create_pool(name="a100-spot", gpu_model="A100-80GB", capacity_type=CapacityType.SPOT)


@pytest.fixture
def priced(make_node, pool, spot_pool, operator):
    """One node in each A100 pool; on-demand 4.00 and spot 1.00 USD per GPU-hour."""
    make_node("node-od", gpus=2)
    make_node("node-spot", gpus=2, pool=spot_pool)
    set_pool_price(pool, "4.00", actor=operator)
    set_pool_price(spot_pool, "1.00", actor=operator)


def price_block(page: str) -> str:
    start = page.index('id="price"')
    return html.unescape(page[start : page.index("</section>", start)])


def test_the_request_page_shows_on_demand_and_spot_prices_for_the_share(client, member, priced):
    client.force_login(member)

    block = price_block(client.get(reverse("request_new")).text)

    assert "A100-80GB: on-demand $1.00/h · spot $0.25/h (save 75 %)" in block


def test_the_request_page_says_when_no_matching_pool_is_priced(client, member, make_node):
    make_node(gpus=2)
    client.force_login(member)

    block = price_block(client.get(reverse("request_new")).text)

    assert "For 1/4 GPU: no pool that matches is priced yet." in block
    assert "$" not in block


def estimate(client, team, **fields):
    body = {"team": team.slug, "gpu_milli": 250} | fields
    return client.post(reverse("api:request-estimate"), body, content_type="application/json").json()


def test_a_slice_price_shows_the_places_that_cents_would_lose(
    client, team, member, make_node, pool, operator
):
    make_node("node-od", gpus=2)
    set_pool_price(pool, "0.50", actor=operator)
    client.force_login(member)

    answer = estimate(client, team, gpu_milli=125)

    assert answer["price_lines"][0] == "For 1/8 GPU in a100 (A100-80GB): $0.0625/h"


def test_the_estimate_answer_prices_the_chosen_share(client, team, member, priced):
    client.force_login(member)

    answer = estimate(client, team, gpu_milli=1000, num_gpus=2)

    assert answer["price_lines"] == [
        "For 2 GPUs in a100 (A100-80GB): $8.00/h",
        "A100-80GB: on-demand $8.00/h · spot $2.00/h (save 75 %)",
    ]
    assert answer["price"] == {"usd_per_hour": "8.00", "pool": "a100", "gpu_model": "A100-80GB"}
    assert answer["prices"]["spot"]["usd_per_hour"] == "2.00"


def test_the_estimate_answer_prices_only_the_chosen_pool(client, team, member, priced):
    client.force_login(member)

    answer = estimate(client, team, pool="a100")

    assert answer["price_lines"] == [
        "For 1/4 GPU in a100 (A100-80GB): $1.00/h",
        "A100-80GB: on-demand $1.00/h · spot not priced",
    ]
    assert answer["prices"]["spot"] is None


# Operators price pools on the pools page


def test_the_pools_page_shows_each_pools_price_in_force(client, operator, pool, spot_pool):
    set_pool_price(pool, "4.5", actor=operator)
    client.force_login(operator)

    page = client.get(reverse("operator_pools")).text

    assert "$4.50" in page and "4.500000" not in page and "not priced" in page


def test_an_operator_sets_a_price_on_the_pools_page_and_it_is_audited(client, operator, pool):
    client.force_login(operator)

    response = client.post(
        reverse("operator_pools"),
        {"pool": pool.pk, "usd_per_gpu_hour": "3.25", "source": "vendor quote"},
        follow=True,
    )

    assert "a100 costs 3.250000 USD/GPU-h from" in response.text
    price = price_in_force(pool)
    assert (str(price.usd_per_gpu_hour), price.source, price.created_by) == (
        "3.250000",
        "vendor quote",
        operator,
    )
    event = Event.objects.get(content_type__model="pool", object_id=pool.pk)
    assert (event.to_state, event.actor_label) == ("priced", "ops")
    assert event.data["usd_per_gpu_hour"] == {"from": None, "to": "3.250000"}
    assert "3.250000 USD/GPU-h" in client.get(reverse("operator")).text


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("0", "A price must be more than 0 USD per GPU-hour."),
        ("abc", "Enter a number."),
        ("1.0000001", "At most 6"),
    ],
)
def test_a_bad_price_on_the_pools_page_is_shown_under_the_field(client, operator, pool, value, says):
    client.force_login(operator)

    response = client.post(reverse("operator_pools"), {"pool": pool.pk, "usd_per_gpu_hour": value})

    assert response.status_code == 400
    page = response.text
    field = page[page.index('id="field-usd_per_gpu_hour"') :]
    assert says in html.unescape(field[: field.index('id="field-effective_from"')])
    assert not PoolPrice.objects.exists()


@pytest.mark.parametrize("user", ["team_admin", "member"])
def test_non_staff_cannot_post_a_price(client, pool, user, request):
    client.force_login(request.getfixturevalue(user))

    response = client.post(reverse("operator_pools"), {"pool": pool.pk, "usd_per_gpu_hour": "1"})

    assert response.status_code == 403
    assert not PoolPrice.objects.exists()


def test_the_price_says_so_when_spot_costs_more(client, team, member, make_node, pool, spot_pool, operator):
    make_node("node-od", gpus=2)
    set_pool_price(pool, "4.00", actor=operator)
    set_pool_price(spot_pool, "5.00", actor=operator)
    client.force_login(member)

    answer = estimate(client, team)

    assert answer["price_lines"][-1] == "A100-80GB: on-demand $1.00/h · spot $1.25/h (spot costs 25 % more)"


def test_the_price_is_that_of_the_placement_and_spot_is_compared_on_the_same_model(
    client, team, member, priced, operator
):
    # The cheapest on-demand pool is RTX; a 2-GPU request only fits the A100 node, so it pays A100 rates,
    # and spot is compared with on-demand A100, never A100 spot against RTX on-demand.
    rtx = create_pool(name="rtx", gpu_model="RTX-4090", capacity_type=CapacityType.ON_DEMAND)
    set_pool_price(rtx, "0.40", actor=operator)
    client.force_login(member)

    answer = estimate(client, team, gpu_milli=1000, num_gpus=2)

    assert answer["starts_now"] and answer["pool"] == "a100"
    assert answer["price_lines"] == [
        "For 2 GPUs in a100 (A100-80GB): $8.00/h",
        "A100-80GB: on-demand $8.00/h · spot $2.00/h (save 75 %)",
        "RTX-4090: on-demand $0.80/h · spot not priced",
    ]
    assert answer["prices"]["on_demand"]["gpu_model"] == answer["prices"]["spot"]["gpu_model"] == "A100-80GB"


def test_the_form_reads_the_price_of_a_share_without_an_estimate(client, member, priced):
    client.force_login(member)

    answer = client.get(reverse("request_new_prices"), {"share": "125", "gpu_model": "A100-80GB"}).json()

    assert answer["price_lines"] == [
        "For 1/8 GPU, by GPU model:",
        "A100-80GB: on-demand $0.50/h · spot $0.125/h (save 75 %)",
    ]

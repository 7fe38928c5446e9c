"""The request form explains itself: refusals beside the fields they are about, a recommendation chart
that draws every priced model, and what an empty command means before anything is submitted."""

import pytest
from playwright.sync_api import expect

from billing_app.services import set_pool_price
from scheduler_app.choices import CapacityType
from scheduler_app.services.inventory import create_pool

pytestmark = pytest.mark.e2e


@pytest.fixture
def two_models(make_node, pool, operator, team, member):
    """A100 on-demand and spot, and an on-demand RTX 4090 pool, each with a node and a price."""
    spot = create_pool(name="a100-spot", gpu_model="A100-80GB", capacity_type=CapacityType.SPOT)
    rtx = create_pool(name="rtx", gpu_model="RTX-4090", capacity_type=CapacityType.ON_DEMAND)
    make_node("a100-1", gpus=2)
    make_node("a100-spot-1", gpus=2, pool=spot)
    make_node("rtx-1", gpus=2, pool=rtx, memory_mib=24576)
    set_pool_price(pool, "4.00", actor=operator)
    set_pool_price(spot, "1.00", actor=operator)
    set_pool_price(rtx, "0.80", actor=operator)


def open_form(live_server, browser, log_in):
    page = log_in(browser, "bob", "pw-bob-123")
    page.goto(f"{live_server.url}/requests/new/")
    expect(page.locator("#estimate-text")).to_contain_text("Would start now")
    return page


def test_spot_without_a_checkpoint_interval_is_explained_beside_the_field(
    two_models, live_server, browser, log_in, screenshot
):
    page = open_form(live_server, browser, log_in)

    page.check("#id_billing_mode_1")

    field = page.locator("#field-checkpoint_interval_min")
    expect(field.locator(".errorlist")).to_have_text("Spot work must declare a checkpoint interval.")
    expect(page.locator("#estimate-text")).to_have_text(
        "Not yet submittable: Checkpoint interval (minutes): Spot work must declare a checkpoint interval."
    )
    expect(page.locator("#estimate-text")).not_to_contain_text("[object Object]")
    screenshot(page, "request-form-spot-without-checkpoint")

    page.fill("#id_checkpoint_interval_min", "15")
    expect(page.locator("#estimate-text")).to_contain_text("Would start now on a100-spot-1")
    expect(field.locator(".errorlist")).to_have_count(0)


def test_each_invalid_field_gets_its_own_message(two_models, live_server, browser, log_in):
    page = open_form(live_server, browser, log_in)

    page.fill("#id_priority", "500")
    page.fill("#id_max_duration_h", "0")

    expect(page.locator("#field-priority .errorlist")).to_contain_text("100")
    expect(page.locator("#field-max_duration_h .errorlist")).to_be_visible()
    expect(page.locator("#field-priority")).to_have_class("field has-error")
    expect(page.locator("#estimate-text")).to_contain_text("Priority: ")
    expect(page.locator("#estimate-text")).to_contain_text("Max duration (hours): ")


def test_taking_a_spot_recommendation_asks_for_the_checkpoint_interval(
    two_models, live_server, browser, log_in, screenshot
):
    page = open_form(live_server, browser, log_in)
    page.select_option("#id_gpu_model", "A100-80GB")
    expect(page.locator("#recommend-apply")).to_contain_text("on spot")

    page.click("#recommend-apply")

    expect(page.locator("#id_billing_mode_1")).to_be_checked()
    expect(page.locator("#field-checkpoint_interval_min .errorlist")).to_have_text(
        "Spot work must declare a checkpoint interval."
    )
    expect(page.locator("#id_checkpoint_interval_min")).to_be_focused()
    expect(page.locator("#estimate-text")).not_to_contain_text("[object Object]")
    screenshot(page, "request-form-recommendation-taken")


MARKERS = "el => el.data.filter(t => t.mode === 'markers').reduce((n, t) => n + t.x.length, 0)"


def boxes_overlap(a, b) -> bool:
    return not (
        a["x"] + a["width"] <= b["x"]
        or b["x"] + b["width"] <= a["x"]
        or a["y"] + a["height"] <= b["y"]
        or b["y"] + b["height"] <= a["y"]
    )


def test_the_recommendation_for_any_model_charts_every_priced_model_readably(
    two_models, live_server, browser, log_in, screenshot
):
    page = open_form(live_server, browser, log_in)
    page.fill("#id_command", "python train.py")
    chart = page.locator("#recommend-chart")

    expect(page.locator("#recommend-text")).to_contain_text("costs least")
    expect(chart.locator(".legend")).to_contain_text("RTX-4090")
    assert chart.evaluate(MARKERS) > 0
    expect(chart.locator(".legend")).to_contain_text("A100-80GB spot")

    # The legend keeps clear of the x-axis title; the ticks read as durations and dollars.
    assert not boxes_overlap(chart.locator(".legend").bounding_box(), chart.locator(".xtitle").bounding_box())
    x_ticks = chart.locator(".xtick text").all_text_contents()
    assert x_ticks and all(t.endswith((" min", " h", " d")) for t in x_ticks), x_ticks
    y_ticks = chart.locator(".ytick text").all_text_contents()
    assert y_ticks and all(t.startswith("$") for t in y_ticks), y_ticks
    screenshot(page, "request-form-recommendation-any-model")


def test_taking_the_recommended_share_refreshes_the_price(two_models, live_server, browser, log_in):
    page = open_form(live_server, browser, log_in)
    page.select_option("#id_gpu_model", "A100-80GB")
    expect(page.locator("#price-lines")).to_contain_text("For 1/4 GPU")
    expect(page.locator("#recommend-apply")).to_have_text("Use 0.125 GPU on spot")

    page.click("#recommend-apply")

    expect(page.locator("#estimate-text")).to_contain_text("Not yet submittable")
    expect(page.locator("#price-lines")).to_contain_text("For 1/8 GPU")
    expect(page.locator("#price-lines")).not_to_contain_text("1/4 GPU")
    expect(page.locator("#price-lines")).to_contain_text("spot $0.125/h")


def test_the_form_says_before_submit_that_no_command_holds_the_gpu(two_models, live_server, browser, log_in):
    page = open_form(live_server, browser, log_in)
    note = page.locator("#no-command-note")

    expect(note).to_be_visible()
    expect(note).to_contain_text("No command: the GPU is held for you, and billed, until you release it")
    page.fill("#id_command", "python train.py")
    expect(note).to_be_hidden()
    page.fill("#id_command", "  ")
    expect(note).to_be_visible()

"""The cluster picture of a MIG pool in a browser: each GPU instance, its profile, used or free."""

import pytest
from playwright.sync_api import expect

from scheduler_app.choices import CapacityType
from scheduler_app.passes.run import run_scheduling_pass
from scheduler_app.services.inventory import create_pool, set_mig_layout, update_pool
from scheduler_app.services.requests import submit_request
from tests.e2e.conftest import ARTIFACTS as screenshot_dir

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def mig_pool_with_work(make_node, team, member, operator):
    """A fixed MIG pool of one A100-80GB card cut 3g/2g/1g, its 2g taken by a 1/4 request."""
    pool = create_pool(name="mig", gpu_model="A100-80GB", capacity_type=CapacityType.ON_DEMAND)
    update_pool(pool, actor=operator, mig_mode="fixed")
    gpu = make_node("mig-1", gpus=1, pool=pool).gpus.get()
    set_mig_layout(gpu, "3g.40gb@0,2g.20gb@4,1g.10gb@6", actor=operator)
    submit_request(user=member, team=team, name="notebook", gpu_milli=250, pool_name="mig")
    run_scheduling_pass()


def test_cluster_picture_shows_mig_instances_used_and_free(live_server, mig_pool_with_work, browser, log_in):
    page = log_in(browser, "bob", "pw-bob-123")
    page.goto(f"{live_server.url}/cluster/")
    page.locator("#pool-mig").evaluate("details => { details.open = true; }")

    used = page.locator('#pool-mig a.slice.mig[data-mig="2g.20gb@4"]')
    expect(used).to_be_visible()
    expect(used).to_have_attribute("data-request", "notebook")
    expect(used).to_have_text("2g.20gb@4")
    expect(page.locator("#pool-mig .mig-free")).to_have_text(["3g.40gb@0", "1g.10gb@6"])
    # Widths follow the instances' memory slices: the 3g takes half the card, the 1g an eighth.
    widths = page.locator("#pool-mig .mig-bar > *").evaluate_all("els => els.map(e => e.style.width)")
    assert widths == ["50%", "25%", "12.5%", "12.5%"]
    page.locator("#pool-mig").screenshot(path=screenshot_dir / "mig-cluster-picture.png")

"""Issue 10's acceptance in a browser, in the embedded default (`manage.py serve --simulated-agents`): an
operator reclaims a spot node from the portal, and the owner of a job on it watches, live on the page
that was open (no reload), the job checkpoint, move and continue from its checkpoint, with each segment
of the bill on its own line."""

import re

import pytest
from playwright.sync_api import expect

from demo.seed import DEMO_PASSWORD
from tests.e2e.conftest import log_in_at
from tests.embedded_portal import embedded_portal

pytestmark = pytest.mark.e2e

NOT_RELOADED = "window.stillTheSamePage === true"
JOB = "python -m agent.demo_job --seconds 600 --checkpoint-every 2"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    with embedded_portal(tmp_path_factory.mktemp("live-reclaim"), "--simulated-agents") as portal:
        yield portal


def test_an_operator_reclaims_a_spot_node_and_its_job_moves_and_continues_live(demo, browser, screenshot):
    # A member's spot job that may fall back to on-demand runs on spot capacity (the demo's 8-card spot
    # job holds one spot node, this one the other) and checkpoints every 2 s.
    owner = log_in_at(demo.url, browser, "bob", DEMO_PASSWORD)
    owner.goto(f"{demo.url}/requests/new/")
    owner.fill("input[name=name]", "spot-training")
    owner.check("input[name=billing_mode][value=spot]")
    owner.check("input[name=allow_on_demand_fallback]")
    owner.fill("input[name=checkpoint_interval_min]", "5")
    owner.fill("textarea[name=command]", JOB)
    owner.click("#request-form button[type=submit]")
    owner.wait_for_url(f"{demo.url}/requests/*/")
    owner.evaluate("window.stillTheSamePage = true")
    expect(owner.locator("#live-status")).to_have_text("● live")
    expect(owner.locator("#state")).to_have_text("Running", timeout=40_000)
    # The first checkpoint has a line of its own; from the second on they fold into one.
    checkpointed = re.compile(r"checkpointed (at|\d+ times)")
    expect(owner.locator("#timeline")).to_contain_text(checkpointed, timeout=30_000)
    first_card = owner.locator("#request-segments tbody tr").first.locator("td").first.inner_text()
    node = first_card.split("/")[0]
    assert node.startswith("a100-80gb-spot-node-")
    screenshot(owner, "reclaim-01-running-on-spot")

    # The operator reclaims that node from its page.
    operator = log_in_at(demo.url, browser, "ops", DEMO_PASSWORD)
    operator.on("dialog", lambda dialog: dialog.accept())
    operator.goto(f"{demo.url}/operator/nodes/")
    operator.locator("tr", has_text=node).locator("a.button").click()
    operator.fill("input[name=grace_s]", "30")
    operator.click("#reclaim button[type=submit]")
    expect(operator.locator("body")).to_contain_text(f"{node} reclaimed: 1 job(s) checkpoint and stop by")

    # The owner's page, never reloaded: the move, the work lost, the new segment, the job going on.
    timeline = owner.locator("#timeline")
    expect(timeline).to_contain_text("migrating", timeout=20_000)
    expect(timeline).to_contain_text(f"spot node {node} reclaimed (operator)")
    expect(timeline).to_contain_text("Work lost:", timeout=40_000)
    expect(owner.locator("#state")).to_have_text("Running", timeout=40_000)
    expect(owner.locator("#request-segments tbody tr")).to_have_count(2, timeout=20_000)
    expect(owner.locator("#job-log")).to_contain_text(re.compile(r"starting at step [1-9]"), timeout=30_000)
    rows = owner.locator("#request-segments tbody tr")
    assert not rows.nth(1).inner_text().startswith(node)  # it continues on another node (spot has no room
    # left: on on-demand capacity, its fallback)
    expect(rows.nth(0).locator(".segment-cost")).to_contain_text("$")
    expect(rows.nth(1).locator(".segment-cost")).to_contain_text("so far")
    assert owner.evaluate(NOT_RELOADED)
    screenshot(owner, "reclaim-02-moved-and-continuing")

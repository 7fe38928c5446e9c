"""Issue 38's browser acceptance, in the embedded default (`manage.py serve`, its Slurm sync every 2 s)
against the real Slurm test cluster: an operator connects a pool to the partition from its page, a
member requests a share of it from the request page, watches it run, its log stream in, and cancels it
from the page; the Slurm job is gone from squeue."""

import re

import pytest
from playwright.sync_api import expect

from agent.isolation.identity import Identities
from demo.seed import DEMO_PASSWORD
from tests.e2e.conftest import log_in_at
from tests.embedded_portal import embedded_portal
from tests.slurm_backend.conftest import slurm
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e

JOB = "for i in 1 2 3 4 5 6; do echo tick $i; sleep 1; done; sleep 300"


@pytest.fixture
def slurm_portal(tmp_path, slurm_cluster, no_slurm_jobs):
    """The demo in the embedded default with an empty pool "slurm" of fake cards; the team's default Unix
    account (gpp-vision) exists, as the Slurm nodes need it."""
    Identities().for_work({"team": "vision", "unix_account": ""})
    (tmp_path / "var").mkdir()
    with embedded_portal(tmp_path / "var", settings={"SLURM_STOP_GRACE_S": "3"}) as portal:
        portal.manage(
            "shell",
            "-c",
            "from scheduler_app.services.inventory import create_pool; "
            "create_pool(name='slurm', gpu_model='fake', capacity_type='on-demand')",
        )
        yield portal


def test_a_member_runs_a_request_on_a_slurm_pool_watches_its_log_and_cancels_it(
    slurm_portal, slurm_cluster, browser, screenshot, tmp_path
):
    # An operator connects the pool to the cluster's partition on its page.
    output = tmp_path / "slurm-output"
    output.mkdir()
    operator = log_in_at(slurm_portal.url, browser, "ops", DEMO_PASSWORD)
    operator.goto(f"{slurm_portal.url}/operator/pools/")
    operator.locator("tr", has_text="fake").get_by_role("link", name="Slurm…").click()
    operator.fill("input[name=url]", f"unix:{slurm_cluster['SLURM_REST_SOCKET']}")
    operator.fill("input[name=partition]", "gpu")
    operator.fill("input[name=output_dir]", str(output))
    operator.fill("input[name=card_memory_mib]", "16384")
    operator.click("main form button.primary")
    expect(operator.locator("body")).to_contain_text("Pool slurm runs on Slurm partition gpu.")
    expect(operator.locator("body")).to_contain_text("Disconnect from Slurm")
    screenshot(operator, "slurm-01-connected")

    # A member asks for a quarter of a card on it.
    member = log_in_at(slurm_portal.url, browser, "bob", DEMO_PASSWORD)
    member.goto(f"{slurm_portal.url}/requests/new/")
    member.fill("input[name=name]", "on-slurm")
    member.select_option("select[name=share]", "250")
    member.select_option("select[name=pool]", "slurm")
    member.fill("textarea[name=command]", JOB)
    member.click("#request-form button[type=submit]")
    member.wait_for_url(re.compile(r".*/requests/\d+/$"))
    request_id = member.url.rstrip("/").rsplit("/", 1)[1]

    # It runs as a Slurm job; its output streams onto the page, line by line.
    expect(member.locator("#state")).to_have_text("Running", timeout=40_000)
    log = member.locator("#job-log")
    expect(log).to_contain_text("tick 1", timeout=20_000)
    expect(log).not_to_contain_text("tick 6")  # still printing: it arrives while the page is open
    expect(log).to_contain_text("tick 6", timeout=20_000)
    job = f"portal-{request_id}-1"
    assert slurm(slurm_cluster, "squeue", "-h", "-n", job, "-o", "%T %b").split() == [
        "RUNNING",
        "gres:shard:2",
    ]
    screenshot(member, "slurm-02-running-with-its-log")

    # Cancelled from the page: the request is cancelled and Slurm's job is gone.
    member.once("dialog", lambda dialog: dialog.accept())
    member.click("button:has-text('Cancel')")
    expect(member.locator("#state")).to_have_text("Cancelled", timeout=20_000)
    wait_until(
        lambda: not slurm(slurm_cluster, "squeue", "-h", "-n", job), timeout_s=30, what="the Slurm job gone"
    )
    screenshot(member, "slurm-03-cancelled")

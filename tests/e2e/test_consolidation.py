"""Consolidation as its users read it: the waiting request says which move it waits for, and the moved
job's timeline says it was moved to make room, with the work lost."""

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from scheduler_app.models import GpuRequest, RoomPlan, TeamQuota
from scheduler_app.passes.run import run_scheduling_pass
from scheduler_app.services.agents import record_checkpoint, report_finished
from scheduler_app.services.requests import submit_request
from tests.scheduler_app.test_consolidation_pass import running

pytestmark = pytest.mark.e2e


def test_the_waiting_request_names_its_move_and_the_moved_jobs_timeline_says_why(
    make_node, pool, team, member, live_server, browser, log_in, screenshot, off_the_browser_thread
):
    def fragmented_cluster():
        TeamQuota.objects.create(team=team, pool=pool, guaranteed_milli=2000)
        n1, n2 = make_node("n1", gpus=1), make_node("n2", gpus=1)
        running(n1, 500, user=member, team=team, name="big")
        small = running(n2, 250, user=member, team=team, name="small")
        whole = submit_request(user=member, team=team, name="whole", gpu_milli=1000)
        run_scheduling_pass()
        return n2, small, whole

    n2, small, whole = off_the_browser_thread(fragmented_cluster)
    page = log_in(browser, "bob", "pw-bob-123")

    page.goto(f"{live_server.url}/requests/{whole.pk}/")
    waiting = page.locator("section.notice")
    why = f"waits for 1 running job ({small.pk}) to move at its next checkpoint, making room for it on n2"
    expect(waiting).to_contain_text(f"Waiting: {why}")
    ready_by = off_the_browser_thread(lambda: RoomPlan.objects.get().ready_by)
    expect(waiting).to_contain_text(f"Estimated start: {ready_by:%Y-%m-%d %H:%M} UTC")
    screenshot(page, "consolidation-waiting")

    def checkpoint_and_stop():
        at = timezone.now()
        record_checkpoint(n2, small.pk, at, now=at)
        report_finished(n2, small.pk, 143)
        run_scheduling_pass()
        return GpuRequest.objects.get(pk=whole.pk).state

    assert off_the_browser_thread(checkpoint_and_stop) == "scheduled"

    page.goto(f"{live_server.url}/requests/{small.pk}/")
    moved = page.locator("#timeline li.state-pending").last
    expect(moved).to_contain_text(
        f"moved to make room for request {whole.pk} (whole); resumes from its checkpoint"
    )
    expect(moved.locator(".work-lost")).to_contain_text("Work lost: none (since the checkpoint of")
    screenshot(page, "consolidation-moved")

    page.goto(f"{live_server.url}/requests/{whole.pk}/")
    expect(page.locator("#state")).to_have_text("Scheduled")

"""Request a GPU (form and live estimate), the request list, the detail page, cancel and release."""

import json

import pytest
from django.urls import reverse

from audit.models import Event
from scheduler_app.choices import CapacityType, RequestState
from scheduler_app.models import GpuRequest
from scheduler_app.passes.run import run_scheduling_pass
from scheduler_app.services.inventory import create_pool
from scheduler_app.services.placement import Slice, allocate
from scheduler_app.services.requests import release_request, submit_request
from scheduler_app.services.transitions import transition_request
from scheduler_app.views import requests as requests_views

FORM = {
    "name": "resnet",
    "task_type": "training",
    "share": "250",
    "pool": "",
    "gpu_model": "",
    "billing_mode": "on-demand",
    "priority": "0",
}


@pytest.fixture
def node(make_node):
    return make_node("node-1", gpus=4)


@pytest.fixture
def spot_pool(db):
    return create_pool(name="a100-spot", gpu_model="A100-80GB", capacity_type=CapacityType.SPOT)


def form_data(team, **changes):
    return FORM | {"team": str(team.pk)} | changes


def field_block(html: str, field: str) -> str:
    """The rendered group of one form field: label, widget, help and its errors."""
    start = html.index(f'id="field-{field}"')
    following = [html.find(end, start + 1) for end in ('<div class="field', "</form>")]
    return html[start : min(i for i in following if i > 0)]


def request_of(user, team, **fields):
    return submit_request(user=user, team=team, **({"name": "job", "gpu_milli": 250} | fields))


def scheduled(request, node):
    allocate(request, [Slice(node.gpus.get(index=0).id, request.gpu_milli, 10240)])
    request.refresh_from_db()
    return request


# --- the form ---------------------------------------------------------------------------------


def test_request_form_needs_login(client, db):
    response = client.get(reverse("request_new"))

    assert response.status_code == 302
    assert response.url.startswith(reverse("login"))


def test_form_offers_the_pools_and_gpu_models_that_exist(client, member, node, spot_pool):
    client.force_login(member)

    response = client.get(reverse("request_new"))

    assert response.status_code == 200
    assert 'value="a100-spot"' in response.text and 'value="a100"' in response.text
    assert '<option value="A100-80GB">A100-80GB</option>' in response.text
    assert "1/8 GPU" in response.text and "8 GPUs" in response.text
    assert 'id="price"' in response.text  # the place the billing issue fills with prices


def test_member_submits_a_quarter_gpu_and_lands_on_its_page(client, team, member, node):
    client.force_login(member)

    response = client.post(reverse("request_new"), form_data(team, command="python train.py"))

    request = GpuRequest.objects.get()
    assert response.status_code == 302 and response.url == reverse("request_detail", args=[request.pk])
    assert (request.gpu_milli, request.num_gpus, request.team, request.user) == (250, 1, team, member)
    assert request.state == RequestState.PENDING and request.command == "python train.py"


def test_the_environment_lines_become_the_requests_variables_shown_on_its_page(client, team, member, node):
    client.force_login(member)
    lines = "WANDB_PROJECT=vision\r\n\r\n  LR = 3e-4 \r\nURL=http://x/?a=b\r\n"

    client.post(reverse("request_new"), form_data(team, environment=lines))

    request = GpuRequest.objects.get()
    assert request.environment == {"WANDB_PROJECT": "vision", "LR": " 3e-4 ", "URL": "http://x/?a=b"}
    page = client.get(reverse("request_detail", args=[request.pk])).text
    assert "<code>WANDB_PROJECT=vision</code>" in page and "<code>URL=http://x/?a=b</code>" in page


def test_whole_cards_become_a_gang_of_full_gpus(client, team, member, node):
    client.force_login(member)

    client.post(reverse("request_new"), form_data(team, share="4000"))

    request = GpuRequest.objects.get()
    assert (request.gpu_milli, request.num_gpus) == (1000, 4)
    assert request.share_label() == "4 GPUs"


def test_spot_request_with_units_people_use_is_stored_in_seconds_and_mib(
    client, team, member, node, spot_pool
):
    client.force_login(member)

    client.post(
        reverse("request_new"),
        form_data(
            team,
            billing_mode="spot",
            pool="a100-spot",
            checkpoint_interval_min="15",
            gpu_memory_gib="20",
            max_duration_h="1.5",
            allow_on_demand_fallback="on",
        ),
    )

    request = GpuRequest.objects.get()
    assert request.pool == spot_pool and request.billing_mode == "spot"
    assert (request.checkpoint_interval_s, request.gpu_memory_mib, request.max_duration_s) == (
        900,
        20480,
        5400,
    )
    assert request.allow_on_demand_fallback


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"name": ""}, "name", "This field cannot be blank."),
        ({"share": "300"}, "share", "Select a valid choice"),
        (
            {"billing_mode": "spot"},
            "checkpoint_interval_min",
            "Spot work must declare a checkpoint interval.",
        ),
        (
            {"billing_mode": "spot", "checkpoint_interval_min": "31"},
            "checkpoint_interval_min",
            "Spot work must checkpoint at least every 30 minutes.",
        ),
        (
            {"billing_mode": "spot", "checkpoint_interval_min": "10", "pool": "a100"},
            "billing_mode",
            "is on-demand",
        ),
        ({"gpu_memory_gib": "200"}, "gpu_memory_gib", "No GPU has 204800 MiB; the largest has 81920 MiB."),
        ({"priority": "1000"}, "priority", "less than or equal to 100"),
        ({"max_duration_h": "0"}, "max_duration_h", "greater than or equal to 1"),
        ({"pool": "nowhere"}, "pool", "Select a valid choice"),
        ({"checkpoint_interval_min": "ten"}, "checkpoint_interval_min", "Enter a whole number."),
        (
            {"environment": "CUDA_VISIBLE_DEVICES=0,1"},
            "environment",
            "CUDA_VISIBLE_DEVICES is reserved: the node agent sets it for every job",
        ),
        ({"environment": "A=1\nB"}, "environment", "“B”: write NAME=value, one variable per line."),
        ({"environment": "A=1\nA=2"}, "environment", "A is given twice"),
        ({"environment": "9LIVES=1"}, "environment", "&#x27;9LIVES&#x27; is not a variable name"),
    ],
)
def test_bad_input_is_shown_at_its_field_and_writes_nothing(
    client, team, member, node, changes, field, message
):
    client.force_login(member)
    events_before = Event.objects.count()

    response = client.post(reverse("request_new"), form_data(team, **changes))

    assert response.status_code == 200
    assert message in field_block(response.text, field)
    assert not GpuRequest.objects.exists()
    assert Event.objects.count() == events_before


def test_member_cannot_submit_for_a_team_they_are_not_in(client, team, other_team, member, node):
    client.force_login(member)

    response = client.post(reverse("request_new"), form_data(other_team))

    assert "Select a valid choice" in field_block(response.text, "team")
    assert not GpuRequest.objects.exists()


def test_a_user_in_several_teams_chooses_the_team(client, team, other_team, member, node):
    other_team.memberships.create(user=member)
    client.force_login(member)

    response = client.get(reverse("request_new"))
    client.post(reverse("request_new"), form_data(other_team))

    assert '<select name="team"' in response.text
    assert GpuRequest.objects.get().team == other_team


def test_user_in_no_team_is_told_to_ask_for_one(client, operator):
    client.force_login(operator)

    response = client.get(reverse("request_new"))

    assert "You are in no team yet" in response.text
    assert '<form method="post" class="card request-form"' not in response.text


# --- the estimate: the form's script asks the API, with the session ------------------------------


def estimate(client, team, **fields):
    """What the form's script sends: the API's fields, the team by slug, the session's cookie."""
    body = {"team": team.slug, "gpu_milli": 250, "task_type": "training"} | fields
    return client.post(reverse("api:request-estimate"), body, content_type="application/json")


def test_estimate_says_where_the_request_would_run_now(client, team, member, node):
    client.force_login(member)

    answer = estimate(client, team, name="resnet").json()

    assert answer["starts_now"]
    assert answer["where"].startswith("node-1/gpu")
    assert answer["summary"].startswith(f"Would start now on {answer['where']} (pool a100), as the next")
    assert not GpuRequest.objects.exists()


def test_estimate_does_not_need_a_name_yet(client, team, member, node):
    client.force_login(member)

    response = estimate(client, team)

    assert response.status_code == 200 and response.json()["starts_now"]


def test_estimate_of_what_cannot_start_gives_the_reason(client, team, member, node):
    client.force_login(member)

    answer = estimate(client, team, gpu_milli=1000, num_gpus=8).json()

    assert not answer["starts_now"]
    assert "ahead of you" in answer["reason"] and answer["reason"] in answer["summary"]


def test_estimate_reports_the_services_field_errors_and_writes_nothing(client, team, member, node):
    client.force_login(member)
    events_before = Event.objects.count()

    response = estimate(client, team, billing_mode="spot")

    assert response.status_code == 400
    assert "checkpoint_interval_s" in str(response.json())
    assert not GpuRequest.objects.exists() and Event.objects.count() == events_before


def test_estimate_needs_login(client, db):
    assert client.post(reverse("api:request-estimate"), {}, content_type="application/json").status_code in (
        401,
        403,
    )


def test_the_page_only_estimate_route_is_gone(client, member):
    client.force_login(member)

    assert client.get("/requests/estimate/").status_code == 404


def test_the_form_asks_the_api_for_its_estimate(client, team, member, node):
    client.force_login(member)

    page = client.get(reverse("request_new")).text

    assert f'data-estimate-url="{reverse("api:request-estimate")}"' in page
    assert f'"{team.pk}": "{team.slug}"' in page  # the script names the team as the API does


# --- the list ---------------------------------------------------------------------------------


@pytest.fixture
def two_teams(team, other_team, member, outsider, node):
    mine = request_of(member, team, name="vision-train")
    request_of(member, team, name="vision-serve", task_type="inference")
    request_of(outsider, other_team, name="language-job")
    return mine


def test_list_shows_only_the_users_teams_requests(client, member, two_teams):
    client.force_login(member)

    response = client.get(reverse("requests"))

    assert "vision-train" in response.text and "vision-serve" in response.text
    assert "language-job" not in response.text


def test_outsider_sees_none_of_another_teams_requests(client, outsider, two_teams):
    client.force_login(outsider)

    response = client.get(reverse("requests"))

    assert "language-job" in response.text and "vision" not in response.text.split("<tbody>")[1]


def test_list_shows_gpu_pool_and_share_of_a_scheduled_request(client, member, node, two_teams):
    scheduled(two_teams, node)
    client.force_login(member)

    response = client.get(reverse("requests"))

    row = next(r for r in response.text.split("<tr>") if "vision-train" in r)
    assert "node-1/gpu0" in row and "a100" in row and "1/4 GPU" in row and "Scheduled" in row


@pytest.mark.parametrize(
    ("query", "shown", "hidden"),
    [
        ({"search": "serve"}, "vision-serve", "vision-train"),
        ({"task_type": "inference"}, "vision-serve", "vision-train"),
        ({"state": "cancelled"}, "vision-train", "vision-serve"),
    ],
)
def test_list_filters_by_name_task_and_state(client, member, two_teams, query, shown, hidden):
    transition_request(two_teams, RequestState.CANCELLED, actor=member)
    client.force_login(member)

    response = client.get(reverse("requests"), query)

    assert shown in response.text and hidden not in response.text


def test_list_filters_by_team(client, team, other_team, member, two_teams):
    other_team.memberships.create(user=member)
    client.force_login(member)

    response = client.get(reverse("requests"), {"team": other_team.slug})

    assert "language-job" in response.text and "vision-train" not in response.text


def test_list_form_sends_empty_fields_meaning_any(client, member, two_teams):
    client.force_login(member)

    response = client.get(reverse("requests"), {"search": "", "state": "", "team": "", "task_type": ""})

    assert "vision-train" in response.text and "vision-serve" in response.text
    assert "errorlist" not in response.text


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"state": "sleeping"}, "&#x27;sleeping&#x27; is not one of pending, scheduled,"),
        ({"task_type": "gaming"}, "&#x27;gaming&#x27; is not one of training, inference"),
        ({"team": "language"}, "&#x27;language&#x27; is none of your teams."),
    ],
)
def test_list_shows_a_bad_filter_inline_and_lists_nothing(client, member, two_teams, query, message):
    client.force_login(member)

    response = client.get(reverse("requests"), query)

    assert response.status_code == 200
    assert message in response.text
    assert "vision-train" not in response.text and "the filter above is not valid" in response.text


def test_operator_filters_the_list_by_any_team(client, operator, other_team, two_teams):
    client.force_login(operator)

    response = client.get(reverse("requests"), {"team": other_team.slug})

    assert "language-job" in response.text and "vision-train" not in response.text


def test_list_is_paginated(client, team, member, node):
    for i in range(30):
        request_of(member, team, name=f"job-{i:02d}")
    client.force_login(member)

    first = client.get(reverse("requests"))
    second = client.get(reverse("requests"), {"page": 2})

    assert "job-29" in first.text and "job-04" not in first.text
    assert "job-04" in second.text and "Page 2 of 2" in second.text


def test_list_queries_do_not_grow_with_the_rows(
    client, team, member, make_node, django_assert_max_num_queries
):
    node = make_node("big", gpus=8)
    for i in range(20):
        request = request_of(member, team, name=f"job-{i}", gpu_milli=125)
        allocate(request, [Slice(node.gpus.get(index=i % 8).id, 125, 1024)])
    client.force_login(member)

    with django_assert_max_num_queries(8):  # with the segments' times, for how long finished ones ran
        response = client.get(reverse("requests"))

    assert response.text.count("big/gpu") == 20


# --- the detail page and its actions ----------------------------------------------------------


def test_detail_shows_timeline_and_segments(client, member, node, two_teams):
    request = scheduled(two_teams, node)
    client.force_login(member)

    response = client.get(reverse("request_detail", args=[request.pk]))

    timeline = response.text.split('id="timeline"')[1].split("</ol>")[0]
    assert timeline.index("pending") < timeline.index("scheduled")
    assert "placed on node-1/gpu0" in timeline
    segments = response.text.split("Allocation segments")[1]
    assert "node-1/gpu0" in segments and "250 milli-GPU" in segments and "10240 MiB" in segments


def test_detail_badge_and_timeline_agree_when_a_pass_commits_between_the_reads(
    client, member, team, node, monkeypatch
):
    # Given a pending request, and a pass that commits just after the page reads the request row
    request = submit_request(user=member, team=team, name="racing", task_type="training", gpu_milli=250)
    real_events = requests_views.request_events
    passes = []

    def events_after_a_pass(gpu_request):
        if not passes:
            passes.append(run_scheduling_pass())
        return real_events(gpu_request)

    monkeypatch.setattr(requests_views, "request_events", events_after_a_pass)
    client.force_login(member)

    # When the detail page is drawn
    page = client.get(reverse("request_detail", args=[request.pk])).text

    # Then the badge shows the state the timeline ends in
    assert passes[0].started == 1
    badge = page.split('id="state">')[1].split("<")[0]
    steps = page.split('id="timeline"')[1].split("</ol>")[0]
    assert badge == "Scheduled" and "scheduled" in steps


def test_pending_request_shows_why_it_waits(client, member, two_teams):
    GpuRequest.objects.filter(pk=two_teams.pk).update(pending_reason="no GPU with 1/4 free in pool a100")
    client.force_login(member)

    response = client.get(reverse("request_detail", args=[two_teams.pk]))

    assert "no GPU with 1/4 free in pool a100" in response.text


def test_team_admin_sees_a_members_request(client, team_admin, two_teams):
    client.force_login(team_admin)

    assert client.get(reverse("request_detail", args=[two_teams.pk])).status_code == 200


def test_operator_sees_any_request(client, operator, two_teams):
    client.force_login(operator)

    assert client.get(reverse("request_detail", args=[two_teams.pk])).status_code == 200


def test_outsider_gets_404_for_another_teams_request(client, outsider, two_teams):
    client.force_login(outsider)

    assert client.get(reverse("request_detail", args=[two_teams.pk])).status_code == 404


def test_member_cancels_a_pending_request(client, member, two_teams):
    client.force_login(member)

    response = client.post(reverse("request_cancel", args=[two_teams.pk]), follow=True)

    two_teams.refresh_from_db()
    assert two_teams.state == RequestState.CANCELLED
    assert "vision-train cancelled." in response.text


def test_team_admin_cancels_a_members_scheduled_request_and_frees_the_gpu(
    client, team_admin, node, two_teams
):
    request = scheduled(two_teams, node)
    client.force_login(team_admin)

    client.post(reverse("request_cancel", args=[request.pk]))

    request.refresh_from_db()
    assert request.state == RequestState.CANCELLED
    assert not request.allocations.filter(ended_at__isnull=True).exists()


def test_outsider_cannot_cancel_or_release_and_gets_404(client, outsider, node, two_teams):
    request = scheduled(two_teams, node)
    client.force_login(outsider)

    cancel = client.post(reverse("request_cancel", args=[request.pk]))
    release = client.post(reverse("request_release", args=[request.pk]))

    assert (cancel.status_code, release.status_code) == (404, 404)
    request.refresh_from_db()
    assert request.state == RequestState.SCHEDULED


def test_cancel_needs_post(client, member, two_teams):
    client.force_login(member)

    response = client.get(reverse("request_cancel", args=[two_teams.pk]))

    assert response.status_code == 405
    two_teams.refresh_from_db()
    assert two_teams.state == RequestState.PENDING


def test_cancelling_a_finished_request_shows_the_services_refusal(client, member, two_teams):
    transition_request(two_teams, RequestState.CANCELLED, actor=member)
    client.force_login(member)

    response = client.post(reverse("request_cancel", args=[two_teams.pk]), follow=True)

    assert f"Not cancelled: Request {two_teams.pk} is already cancelled." in response.text


def test_operator_outside_the_team_is_refused_by_the_service(client, operator, two_teams):
    client.force_login(operator)

    response = client.post(reverse("request_cancel", args=[two_teams.pk]), follow=True)

    assert "Not cancelled: Only members of the request&#x27;s team can cancel it." in response.text
    two_teams.refresh_from_db()
    assert two_teams.state == RequestState.PENDING


def test_releasing_a_running_request_ends_it_released_not_succeeded(client, member, node, two_teams):
    request = scheduled(two_teams, node)
    transition_request(request, RequestState.RUNNING, actor_name="agent")
    client.force_login(member)

    response = client.post(reverse("request_release", args=[request.pk]), follow=True)

    request.refresh_from_db()
    assert request.state == RequestState.RELEASED
    assert "released; its GPUs are free again" in response.text
    assert '<span class="badge state-released" id="state">Released</span>' in response.text
    assert "state-succeeded" not in response.text


def test_a_released_jobs_sigterm_exit_status_says_it_was_stopped_on_release(client, member, node, two_teams):
    # given a running job its user released, whose agent then reported the SIGTERM exit status 143
    request = scheduled(two_teams, node)
    transition_request(request, RequestState.RUNNING, actor_name="agent")
    release_request(request, user=member)
    GpuRequest.objects.filter(pk=request.pk).update(exit_code=143)
    client.force_login(member)

    # when its page is read
    page = client.get(reverse("request_detail", args=[request.pk])).text

    # then the status names the signal and why it came, not a bare 143
    assert "143 (SIGTERM): stopped because its GPUs were released, not a failure" in page


def test_releasing_a_pending_request_is_refused_with_the_reason(client, member, two_teams):
    client.force_login(member)

    response = client.post(reverse("request_release", args=[two_teams.pk]), follow=True)

    assert "Not released: A pending request holds no GPU to release; cancel it instead." in response.text
    two_teams.refresh_from_db()
    assert two_teams.state == RequestState.PENDING


def test_detail_offers_only_the_actions_the_state_allows(client, member, node, two_teams):
    client.force_login(member)
    pending = client.get(reverse("request_detail", args=[two_teams.pk])).text
    scheduled(two_teams, node)
    active = client.get(reverse("request_detail", args=[two_teams.pk])).text

    def action(name):
        return f'action="{reverse(name, args=[two_teams.pk])}"'

    assert action("request_cancel") in pending
    assert action("request_release") not in pending
    assert action("request_release") in active


def _streams(response):
    script = response.text.split('id="live-streams" type="application/json">')[1]
    return json.loads(script.split("</script>")[0])


def test_pages_follow_the_viewers_own_live_streams(client, member, operator, outsider, team):
    request = submit_request(user=member, team=team, name="followed", gpu_milli=125)

    client.force_login(member)
    member_pages = [_streams(client.get(url)) for url in ("/requests/", f"/requests/{request.pk}/")]
    client.force_login(operator)
    operator_detail = _streams(client.get(f"/requests/{request.pk}/"))
    client.force_login(outsider)
    outsider_list = _streams(client.get("/requests/"))

    assert member_pages == [["/ws/teams/vision/events/"], ["/ws/teams/vision/events/"]]
    assert operator_detail == ["/ws/cluster/"]
    assert outsider_list == ["/ws/teams/language/events/"]


def test_a_request_that_never_held_a_gpu_says_so_instead_of_an_empty_chart(client, member, two_teams):
    client.force_login(member)
    client.post(reverse("request_cancel", args=[two_teams.pk]))

    page = client.get(reverse("request_detail", args=[two_teams.pk])).text

    assert "It never held a GPU: there is no utilization to show." in page
    assert 'id="util-chart"' not in page

"""How `gpu-portal` speaks when things are not plain success: a request that has already ended, bad
options, a reader that stops reading. Against the live portal."""

from gpu_portal_sdk.cli import main

from scheduler_app.choices import RequestState
from scheduler_app.scheduling import run_scheduling_pass
from scheduler_app.services.requests import cancel_request, submit_request
from scheduler_app.services.transitions import transition_request


def test_cancelling_a_cancelled_request_again_says_so_and_exits_0(as_user, member, team, cluster, capsys):
    # given a request its member cancelled
    request = submit_request(user=member, team=team, name="twice", task_type="training", gpu_milli=250)
    cancel_request(request, user=member)
    as_user(member)

    # when it is cancelled again from the CLI
    code = main(["cancel", str(request.pk)])

    # then it says so, once, as scancel treats work that has ended
    out, err = capsys.readouterr()
    assert (code, out, err) == (0, f"Request {request.pk} is already cancelled.\n", "")


def test_cancelling_or_releasing_finished_work_names_the_state_it_ended_in(
    as_user, member, team, cluster, capsys
):
    # given a request that ran and succeeded
    request = submit_request(user=member, team=team, name="done", task_type="training", gpu_milli=250)
    run_scheduling_pass()
    transition_request(request, RequestState.RUNNING, actor_name="agent")
    transition_request(request, RequestState.SUCCEEDED, actor_name="agent")
    as_user(member)

    # when it is cancelled, then released
    codes = [main(["cancel", str(request.pk)]), main(["release", str(request.pk)])]

    # then both exit 0 and say how it ended
    assert codes == [0, 0]
    assert capsys.readouterr().out == f"Request {request.pk} has already succeeded.\n" * 2

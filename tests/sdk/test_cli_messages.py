"""How `gpu-portal` speaks when things are not plain success: a request that has already ended, bad
options, a reader that stops reading. Against the live portal."""

import os
import subprocess
import sys

from gpu_portal_sdk.cli import main

from scheduler_app.choices import RequestState
from scheduler_app.passes.run import run_scheduling_pass
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


def test_a_bad_option_is_said_once_in_the_clis_own_terms(as_user, member, cluster, capsys):
    as_user(member)

    # when a share below zero is asked for, checked before anything is sent
    negative = main(["request", "--gpu", "-1"])
    said_negative = capsys.readouterr().err
    # and when the portal refuses options by its own field names (num_gpus, max_duration_s)
    refused = main(["request", "--gpu", "1", "--gpus", "0", "--max-duration", "0"])
    said_refused = capsys.readouterr().err

    # then each problem is said once, under the option's name, as a person would put it
    assert (negative, said_negative) == (
        5,
        "gpu-portal: --gpu: must be more than 0 (a share of a card, at least 0.001).\n",
    )
    assert refused == 5
    assert (
        said_refused
        == "gpu-portal: --gpus: must be at least 1.\ngpu-portal: --max-duration: must be at least 1.\n"
    )


def test_show_into_a_reader_that_stopped_reading_exits_quietly(
    live_server, transactional_db, token, member, team
):
    # given a request, and a pipe whose reader has gone (`gpu-portal show 13 | head -3` after head exits)
    request = submit_request(user=member, team=team, name="piped", task_type="training", gpu_milli=250)
    reader, writer = os.pipe()
    os.close(reader)

    # when the CLI writes the request into it
    argv = ["--url", live_server.url, "--token", token(member), "show", str(request.pk)]
    try:
        done = subprocess.run(
            [sys.executable, "-m", "gpu_portal_sdk", *argv], stdout=writer, stderr=subprocess.PIPE, timeout=60
        )
    finally:
        os.close(writer)

    # then it ends as a Unix tool killed by SIGPIPE reports (128 + 13), with no traceback
    assert (done.returncode, done.stderr.decode()) == (141, "")

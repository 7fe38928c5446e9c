"""The shares the portal offers: eighths of one card or whole cards, parsed from a form's choice."""

import pytest

from scheduler_app.core.shares import Share
from scheduler_app.forms import RequestForm


def test_choices_are_the_eighths_then_whole_cards_with_their_labels():
    choices = Share.choices()

    assert choices == [
        (125, "1/8 GPU"),
        (250, "1/4 GPU"),
        (375, "3/8 GPU"),
        (500, "1/2 GPU"),
        (625, "5/8 GPU"),
        (750, "3/4 GPU"),
        (875, "7/8 GPU"),
        (1000, "1 GPU"),
        (2000, "2 GPUs"),
        (4000, "4 GPUs"),
        (8000, "8 GPUs"),
    ]


@pytest.mark.parametrize(
    ("choice", "gpu_milli", "num_gpus", "label"),
    [
        ("125", 125, 1, "1/8 GPU"),
        (500, 500, 1, "1/2 GPU"),
        ("1000", 1000, 1, "1 GPU"),
        ("4000", 1000, 4, "4 GPUs"),
    ],
)
def test_parse_gives_the_share_per_card_and_the_card_count(choice, gpu_milli, num_gpus, label):
    share = Share.parse(choice)

    assert (share.gpu_milli, share.num_gpus, share.label) == (gpu_milli, num_gpus, label)
    assert share.total_milli == int(choice)


@pytest.mark.parametrize("choice", ["300", "0", "-250", "1500", "3000", "16000", "abc", "", 250.0, None])
def test_parse_refuses_what_the_portal_does_not_offer_saying_what_it_does(choice):
    with pytest.raises(ValueError, match="is not a share the portal offers: eighths of one card"):
        Share.parse(choice)


@pytest.mark.parametrize(("gpu_milli", "num_gpus"), [(500, 2), (1000, 3), (300, 1), (0, 1), (1000, 0)])
def test_a_share_the_portal_does_not_offer_cannot_be_made(gpu_milli, num_gpus):
    with pytest.raises(ValueError, match=f"{gpu_milli} milli-GPU on {num_gpus} card"):
        Share(gpu_milli, num_gpus)


def test_shares_are_values():
    assert Share.parse("2000") == Share(1000, 2)
    with pytest.raises(AttributeError):
        Share.parse("250").gpu_milli = 500


def test_form_options_carry_the_share_the_script_sends(member, team):
    html = str(RequestForm(user=member)["share"])

    assert '<option value="250" selected data-gpu-milli="250" data-num-gpus="1">1/4 GPU</option>' in html
    assert '<option value="4000" data-gpu-milli="1000" data-num-gpus="4">4 GPUs</option>' in html


def test_form_gives_the_services_the_share_per_card_and_the_count(member, team):
    form = RequestForm(
        {
            "team": team.pk,
            "task_type": "training",
            "share": "2000",
            "billing_mode": "on-demand",
            "priority": "0",
        },
        user=member,
    )

    assert form.is_valid(), form.errors
    assert (form.service_kwargs()["gpu_milli"], form.service_kwargs()["num_gpus"]) == (1000, 2)

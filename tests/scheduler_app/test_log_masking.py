"""A team's secrets never reach its stored job output: each occurrence is stored as `*` of the same
length (the agent's character offsets stay valid), also when it arrives split across pieces."""

from types import SimpleNamespace

import pytest

from scheduler_app.models import LogChunk
from scheduler_app.services.log_masking import mask_secrets
from scheduler_app.services.placement import Slice, allocate
from scheduler_app.services.requests import submit_request
from teams.services import set_team_secret
from tests.scheduler_app.test_agent_api import agent_client

SECRET = "hunter2-passphrase"
STARS = "*" * len(SECRET)


@pytest.fixture
def node(make_node):
    return make_node("node-1", gpus=1)


@pytest.fixture
def placed(member, team, node):
    request = submit_request(user=member, team=team, name="train", gpu_milli=250)
    allocate(request, [Slice(node.gpus.get().pk, 250, 20480)])
    return request


@pytest.fixture
def secret(team, team_admin):
    return set_team_secret(team, name="DB_PASSWORD", value=SECRET, actor=team_admin)[0]


@pytest.fixture
def ship(node, placed):
    """ship(offset, text) -> the log's end offset, as the agent's report answers it."""
    agent = agent_client(node)

    def send(offset, text):
        answer = agent.post(
            f"/api/v1/agent/requests/{placed.pk}/log/", {"offset": offset, "text": text}, format="json"
        )
        assert answer.status_code == 200, answer.json()
        return answer.json()["end"]

    return send


def stored(request) -> list[tuple[int, str]]:
    return list(LogChunk.objects.filter(request=request).order_by("offset").values_list("offset", "text"))


def test_a_secret_in_the_output_is_stored_as_stars_of_its_length(ship, placed, secret):
    end = ship(0, f"connecting with {SECRET} now\n")

    assert stored(placed) == [(0, f"connecting with {STARS} now\n")]
    assert end == len(f"connecting with {SECRET} now\n")


def test_a_secret_split_across_two_pieces_is_masked_in_both(ship, placed, secret, api_client, member):
    first = f"password={SECRET[:7]}"
    second = f"{SECRET[7:]} ok\n"

    ship(0, first)
    end = ship(len(first), second)

    assert stored(placed) == [(0, f"password={STARS[:7]}"), (len(first), f"{STARS[7:]} ok\n")]
    assert end == len(first) + len(second)
    tail = api_client(member).get(f"/api/v1/requests/{placed.pk}/log/").json()
    assert tail["text"] == f"password={STARS} ok\n" and SECRET not in tail["text"]


def test_a_secret_spread_over_several_small_pieces_is_masked_in_each(ship, placed, secret):
    pieces = ["> ", SECRET[:3], SECRET[3:9], SECRET[9:], " <"]
    offset = 0
    for piece in pieces:
        offset = ship(offset, piece)

    assert "".join(text for _, text in stored(placed)) == f"> {STARS} <"
    assert [offset for offset, _ in stored(placed)] == [0, 2, 5, 11, 2 + len(SECRET)]


def test_a_piece_sent_again_stays_masked(ship, placed, secret):
    ship(0, f"{SECRET}\n")
    ship(0, f"{SECRET}\n")  # the agent's retry after a lost answer

    assert stored(placed) == [(0, f"{STARS}\n")]


def test_another_teams_secret_is_not_masked(ship, placed, other_team, outsider):
    other_team.memberships.filter(user=outsider).update(role="team_admin")
    set_team_secret(other_team, name="THEIR_KEY", value=SECRET, actor=outsider)

    ship(0, f"{SECRET}\n")

    assert stored(placed) == [(0, f"{SECRET}\n")]


def test_every_secret_of_the_team_is_masked_overlapping_ones_included(ship, placed, team, team_admin):
    set_team_secret(team, name="A_KEY", value="abcdef", actor=team_admin)
    set_team_secret(team, name="B_KEY", value="defghi", actor=team_admin)

    ship(0, "xx abcdefghi yy abcdef zz")

    assert stored(placed) == [(0, "xx ********* yy ****** zz")]


def test_masking_reads_overlapping_pieces_and_gaps_as_the_output_they_hold():
    pieces = [
        SimpleNamespace(offset=0, text="ab-sec"),
        SimpleNamespace(offset=3, text="secret-tail"),  # overlaps the first piece
        SimpleNamespace(offset=40, text="ret"),  # after a gap: no occurrence runs across it
    ]

    changed = mask_secrets(pieces, ["secret"])

    assert [p.text for p in pieces] == ["ab-***", "******-tail", "ret"]
    assert changed == pieces[:2]

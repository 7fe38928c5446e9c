"""The submit path reads only what it does not already hold (bench.load measures what that buys)."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduler_app.services.requests import validated_request

SHARE = {"name": "train", "task_type": "training", "gpu_milli": 250}


def selects(captured) -> list[str]:
    return [q["sql"] for q in captured.captured_queries if q["sql"].lstrip().upper().startswith("SELECT")]


def test_validating_a_share_reads_only_the_membership_and_the_pool(team, member, pool, make_node):
    make_node()

    with CaptureQueriesContext(connection) as captured:
        validated_request(user=member, team=team, pool_name="a100", **SHARE)

    reads = selects(captured)
    assert len(reads) == 2, reads
    assert "portal_membership" in reads[0]
    assert "scheduler_app_pool" in reads[1]


@pytest.mark.parametrize("extra", [{"gpu_model": "A100-80GB"}, {"gpu_memory_mib": 40_000}])
def test_a_model_or_memory_ask_costs_one_look_at_the_cards(team, member, pool, make_node, extra):
    make_node()

    with CaptureQueriesContext(connection) as captured:
        validated_request(user=member, team=team, pool_name="a100", **SHARE, **extra)

    card_reads = [sql for sql in selects(captured) if "scheduler_app_gpu" in sql]
    assert len(card_reads) == 1, card_reads

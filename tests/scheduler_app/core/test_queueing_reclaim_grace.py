"""Reclaim grace: within-quota work waits for capacity that frees up by itself in time, not preempting."""

from scheduler_app.core.queueing import QueueMode, TeamQuota, plan_pass

from .test_queueing import node, request, running, started, waiting

POLICY = "first-fit"
QUOTAS = [TeamQuota("ml", "a100", 1000)]


def preempted(plan):
    return [p.allocation.request.id for p in plan.preemptions]


def borrowed_card(borrower_declared_s: int, owner_asks_at: float):
    """One card that "data" borrows from t=0, declared to end by `borrower_declared_s`; "ml" owns it by
    quota and asks for it at `owner_asks_at`. Returns (nodes, borrower allocation, owner request)."""
    nodes = [node()]
    borrower = running(
        nodes, request("borrower", team="data", max_duration_s=borrower_declared_s), borrowed=True
    )
    return nodes, borrower, request("owner", max_duration_s=600, submitted_at=owner_asks_at)


def test_owner_waits_for_a_borrower_that_ends_within_the_grace():
    # given "data" borrows the only card until t=300; "ml" owns it by quota and asks at t=100
    nodes, borrower, owner = borrowed_card(300, owner_asks_at=100)
    # when (grace 600 s: the card frees at 300, before 100 + 600)
    plan = plan_pass(nodes, [owner], [borrower], QUOTAS, now=100, policy=POLICY)
    # then nobody is preempted; the owner is promised the card when the borrower ends
    assert preempted(plan) == []
    assert waiting(plan) == ["owner"]
    assert [(r.request_id, r.start_at) for r in plan.reservations] == [("owner", 300)]


def test_owner_reclaims_when_the_borrower_would_outlast_the_grace():
    # given the borrower may run until t=3600
    nodes, borrower, owner = borrowed_card(3600, owner_asks_at=100)
    # when
    plan = plan_pass(nodes, [owner], [borrower], QUOTAS, now=100, policy=POLICY)
    # then it is reclaimed at once: waiting would break the quota's promise anyway
    assert preempted(plan) == ["borrower"]
    assert started(plan) == ["owner"]


def test_owner_reclaims_once_its_grace_has_run_out():
    # given the owner asked at t=0 and it is now t=700; the borrower's card frees at 800
    nodes, borrower, owner = borrowed_card(800, owner_asks_at=0)
    # when
    plan = plan_pass(nodes, [owner], [borrower], QUOTAS, now=700, policy=POLICY)
    # then
    assert preempted(plan) == ["borrower"]


def test_capacity_reserved_for_an_earlier_request_does_not_count_as_freeing_in_time():
    # given two borrowers on two cards: one ends at 300, the other at 3600; two owners ask at t=100
    nodes = [node(gpus=2)]
    soon = running(nodes, request("soon", team="data", max_duration_s=300), borrowed=True)
    late = running(nodes, request("late", team="data", max_duration_s=3600), cards=(1,), borrowed=True)
    owners = [
        request("owner1", max_duration_s=600, submitted_at=100),
        request("owner2", max_duration_s=600, submitted_at=101),
    ]
    quotas = [TeamQuota("ml", "a100", 2000)]
    # when
    plan = plan_pass(nodes, owners, [soon, late], quotas, now=101, policy=POLICY)
    # then the first owner waits for the card that frees at 300 and holds a reservation on it, so the
    # second cannot count on that card: it reclaims the one held until 3600
    assert preempted(plan) == ["late"]
    assert started(plan) == ["owner2"]
    assert [(r.request_id, r.start_at) for r in plan.reservations] == [("owner1", 300)]


def test_without_a_grace_the_owner_reclaims_at_once():
    # given the first case, with reclaim_grace_s=None
    nodes, borrower, owner = borrowed_card(300, owner_asks_at=100)
    # when
    plan = plan_pass(nodes, [owner], [borrower], QUOTAS, 100, POLICY, QueueMode(reclaim_grace_s=None))
    # then
    assert preempted(plan) == ["borrower"]

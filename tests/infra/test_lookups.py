"""`in_array`: selects what `in` selects, on a field and across a foreign key; on PostgreSQL as one
array parameter."""

from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduler_app.models import Allocation, GpuRequest
from scheduler_app.services.placement import Slice, allocate
from scheduler_app.services.requests import submit_request


def test_in_array_selects_what_in_selects(member, team, make_node):
    node = make_node("n1", gpus=2)
    cards = list(node.gpus.order_by("index"))
    jobs = [submit_request(user=member, team=team, name=f"job-{i}", gpu_milli=500) for i in range(3)]
    for job, card in zip(jobs, cards, strict=False):
        allocate(job, [Slice(card.pk, 500, 1024)])
    ids = [jobs[0].pk, jobs[2].pk, jobs[2].pk, None, 10**12]

    for values in (ids, [jobs[1].pk], [], [None]):
        expected = set(GpuRequest.objects.filter(pk__in=values).values_list("pk", flat=True))
        assert set(GpuRequest.objects.filter(pk__in_array=values).values_list("pk", flat=True)) == expected
    by_card = Allocation.objects.filter(gpu_id__in_array=[cards[1].pk])
    by_request = Allocation.objects.filter(request__in_array=[jobs[0].pk, jobs[1].pk])
    assert [a.request_id for a in by_card] == [jobs[1].pk]
    assert {a.request_id for a in by_request} == {jobs[0].pk, jobs[1].pk}
    # Values other than ints are prepared as `in` prepares them: instances, digits in text, a set.
    by_instance = Allocation.objects.filter(request__in_array=[jobs[0]])
    assert [a.request_id for a in by_instance] == [jobs[0].pk]
    assert list(GpuRequest.objects.filter(pk__in_array={str(jobs[1].pk)}).values_list("pk", flat=True)) == [
        jobs[1].pk
    ]


def test_on_postgresql_the_values_are_one_parameter_whatever_their_number(member, team):
    jobs = [submit_request(user=member, team=team, name=f"job-{i}", gpu_milli=500) for i in range(3)]

    with CaptureQueriesContext(connection) as statements:
        found = list(
            GpuRequest.objects.filter(pk__in_array=[j.pk for j in jobs]).values_list("pk", flat=True)
        )

    assert sorted(found) == sorted(j.pk for j in jobs)
    sql = statements[0]["sql"]
    assert ("= ANY(" in sql) == (connection.vendor == "postgresql")
    assert (" IN (" in sql) == (connection.vendor != "postgresql")

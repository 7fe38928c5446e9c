"""Request answers and submits reuse their serializer's fields, built once per class, each bound anew."""

from rest_framework import serializers

from scheduler_app.api.serializers import GpuRequestDetailSerializer, GpuRequestSerializer, SubmitSerializer
from scheduler_app.services.requests import submit_request

SHARE = {"name": "train", "task_type": "training", "gpu_milli": 250}


def test_a_request_answer_does_not_rebuild_its_fields(team, member, pool, monkeypatch):
    request = submit_request(user=member, team=team, pool_name="a100", **SHARE)
    first = GpuRequestSerializer(request).data
    assert SubmitSerializer(data=SHARE).is_valid()

    def no_rebuild(*args, **kwargs):
        raise AssertionError("a ModelSerializer field was built again")

    monkeypatch.setattr(serializers.ModelSerializer, "build_field", no_rebuild)
    monkeypatch.setattr(serializers.Field, "__deepcopy__", no_rebuild)

    assert GpuRequestSerializer(request).data == first
    assert SubmitSerializer(data=SHARE).is_valid()


def test_each_serializer_binds_its_own_copy_of_a_field(team, member, pool):
    request = submit_request(user=member, team=team, pool_name="a100", **SHARE)
    one, two = GpuRequestSerializer(request), GpuRequestSerializer(request)

    assert one.fields["name"] is not two.fields["name"]
    assert (one.fields["name"].parent, two.fields["name"].parent) == (one, two)
    assert one.fields["allocations"].method_name == "get_allocations"


def test_submit_errors_stay_with_their_own_submit():
    bad, good = SubmitSerializer(data={"name": "", "gpu_milli": 0}), SubmitSerializer(data=SHARE)

    assert not bad.is_valid()
    assert good.is_valid(), good.errors
    assert set(bad.errors) == {"name", "gpu_milli"}


def test_a_nested_serializer_is_still_built_per_answer(team, member, pool):
    request = submit_request(user=member, team=team, pool_name="a100", **SHARE)
    one = GpuRequestDetailSerializer(request, context={"events": []})
    two = GpuRequestDetailSerializer(request, context={"events": []})

    assert one.fields["segments"] is not two.fields["segments"]
    assert one.fields["segments"].child is not two.fields["segments"].child
    assert one.data["segments"] == []

import pytest

from bench.trace import DEFAULT_NODES, DEFAULT_PODS, load_nodes, load_pods
from bench.trace_replay import arrival_order, replay
from bench.variants import VARIANTS, Variant, build_variant, is_multi_gpu, is_sharing, write_pods

PODS = load_pods(DEFAULT_PODS)
NODES = load_nodes(DEFAULT_NODES)
GPU_PODS = [p for p in PODS if p.num_gpus]


def cpu_only_cpu(pods):
    return sum(p.cpu_milli for p in pods if not p.num_gpus)


def share(pods, kind):
    gpu = [p for p in pods if p.num_gpus]
    return sum(1 for p in gpu if kind(p)) / len(gpu)


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.name)
def test_a_variant_is_the_same_for_the_same_seed_and_names_pods_uniquely(variant):
    # when
    first = build_variant(PODS, NODES, variant, seed=7)
    again = build_variant(PODS, NODES, variant, seed=7)
    # then
    assert first == again
    assert len({p.id for p in first}) == len(first)


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v.kind != "default"], ids=lambda v: v.name)
def test_another_seed_draws_another_variant(variant):
    assert build_variant(PODS, NODES, variant, seed=1) != build_variant(PODS, NODES, variant, seed=2)


@pytest.mark.parametrize("multiple", [0.5, 2, 4])
def test_cpu_variant_scales_cpu_only_pods_total_cpu_and_keeps_gpu_pods(multiple):
    pods = build_variant(PODS, NODES, Variant("cpu", multiple), seed=3)
    # then: within one pod's CPU of the target, GPU pods untouched
    largest = max(p.cpu_milli for p in PODS if not p.num_gpus)
    assert abs(cpu_only_cpu(pods) - multiple * cpu_only_cpu(PODS)) <= largest
    assert [p for p in pods if p.num_gpus] == GPU_PODS


@pytest.mark.parametrize(("kind", "test"), [("share", is_sharing), ("multi", is_multi_gpu)])
@pytest.mark.parametrize("percent", [5, 20, 60])
def test_share_and_multi_variants_make_that_share_of_gpu_pods_of_their_kind(kind, test, percent):
    pods = build_variant(PODS, NODES, Variant(kind, percent), seed=3)
    gpu = [p for p in pods if p.num_gpus]
    # then: that share exactly (rounded to a pod), as many GPU pods, drawn from the trace's shapes
    assert round(share(pods, test) * len(gpu)) == round(len(GPU_PODS) * percent / 100)
    assert len(gpu) == len(GPU_PODS)
    shapes = {(p.cpu_milli, p.memory_mib, p.gpu_milli, p.num_gpus) for p in GPU_PODS}
    assert {(p.cpu_milli, p.memory_mib, p.gpu_milli, p.num_gpus) for p in gpu} <= shapes
    assert cpu_only_cpu(pods) == cpu_only_cpu(PODS)


@pytest.mark.parametrize("percent", [10, 33])
def test_spec_variant_pins_that_share_of_gpu_pods_to_a_model_some_node_can_host(percent):
    pods = build_variant(PODS, NODES, Variant("spec", percent), seed=3)
    gpu = [p for p in pods if p.num_gpus]
    pinned = [p for p in gpu if p.models]
    # then
    assert len(pinned) == round(len(GPU_PODS) * percent / 100)
    assert len({m for p in pinned for m in p.models}) > 1
    for pod in pinned:
        (model,) = pod.models
        assert any(
            n.gpus
            and n.gpus[0].model == model
            and len(n.gpus) >= pod.num_gpus
            and n.cpu_milli >= pod.cpu_milli
            for n in NODES
        )
    # and nothing else changed
    assert [(p.id, p.cpu_milli, p.gpu_milli, p.num_gpus) for p in pods] == [
        (p.id, p.cpu_milli, p.gpu_milli, p.num_gpus) for p in PODS
    ]


def test_variant_names_parse_back():
    assert [Variant.parse(v.name) for v in VARIANTS] == list(VARIANTS)
    with pytest.raises(ValueError, match="unknown variant"):
        Variant.parse("gpus-10")


def test_a_written_variant_loads_back_as_the_same_pods(tmp_path):
    pods = build_variant(PODS, NODES, Variant("spec", 20), seed=3)
    path = tmp_path / "spec-20.csv"
    write_pods(pods, path)
    assert load_pods(path) == pods


def test_replay_reports_where_the_first_pod_and_the_first_gang_failed(tmp_path):
    # given two nodes of one card each: whole-card pods a, b, c, and a 2-card gang g that fits nowhere
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,8000,65536,1,P100\nn2,8000,65536,1,P100\n")
    pods = tmp_path / "pods.csv"
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
        "a,1000,1024,1,1000,\nb,1000,1024,1,1000,\nc,1000,1024,1,1000,\ng,1000,1024,2,1000,\n"
    )
    order = arrival_order(load_pods(pods), 2000, seed=42)
    arrived, total = {}, 0
    for pod in order:
        total += pod.total_milli()
        arrived[pod.id] = 100 * total / 2000
    third_card = sorted(arrived[p] for p in "abc")[2]
    # when
    result = replay(nodes, pods, "best-fit", seed=42)
    # then
    assert result.first_gang_failure == pytest.approx(arrived["g"])
    assert result.first_failure == pytest.approx(min(arrived["g"], third_card))

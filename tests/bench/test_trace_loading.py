from bench.trace import load_nodes, load_pods
from bench.trace_replay import TUNE_RATIO, arrival_order, discrete_curve, shuffled_nodes

NODES = """sn,cpu_milli,memory_mib,gpu,model
node-a,64000,262144,2,P100
node-b,96000,786432,8,V100M32
"""

PODS = """name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos
pod-0,12000,16384,1,460,,LS
pod-1,88000,327680,8,1000,,Burstable
pod-2,4000,8192,0,0,,BE
pod-3,16000,32768,1,1000,V100M16|V100M32,LS
"""


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_nodes_load_with_their_cards(tmp_path):
    nodes = load_nodes(write(tmp_path, "nodes.csv", NODES))
    assert [(n.name, n.cpu_milli, len(n.gpus), n.gpus[0].model) for n in nodes] == [
        ("node-a", 64000, 2, "P100"),
        ("node-b", 96000, 8, "V100M32"),
    ]
    assert all(g.free_milli == 1000 for n in nodes for g in n.gpus)


def test_pods_load_with_shares_cpu_only_and_model_constraints(tmp_path):
    pods = load_pods(write(tmp_path, "pods.csv", PODS))
    assert [(p.id, p.gpu_milli, p.num_gpus, p.cpu_milli) for p in pods] == [
        ("pod-0", 460, 1, 12000),
        ("pod-1", 1000, 8, 88000),
        ("pod-2", 0, 0, 4000),
        ("pod-3", 1000, 1, 16000),
    ]
    assert pods[3].models == frozenset({"V100M16", "V100M32"})
    assert pods[0].models == frozenset()


def test_arrival_order_is_seeded_and_inflated_to_the_tune_ratio(tmp_path):
    pods = load_pods(write(tmp_path, "pods.csv", PODS))
    capacity = 10_000
    order = arrival_order(pods, capacity, seed=42)
    assert order == arrival_order(pods, capacity, seed=42)
    assert sorted(p.id for p in order[: len(pods)]) == sorted(p.id for p in pods)
    total = sum(p.total_milli() for p in order)
    assert total <= TUNE_RATIO * capacity
    assert total > TUNE_RATIO * capacity - 8_000


def test_node_order_is_shuffled_by_seed(tmp_path):
    nodes = load_nodes(write(tmp_path, "nodes.csv", NODES))
    names = [n.name for n in shuffled_nodes(nodes, 7)]
    assert names == [n.name for n in shuffled_nodes(nodes, 7)]
    assert sorted(names) == ["node-a", "node-b"]


def test_discrete_curve_averages_samples_by_rounded_arrival():
    curve = discrete_curve([(99.6, 90.0), (100.4, 92.0), (101.7, 93.0)])
    assert curve[100] == 91.0
    assert curve[99] == 91.0  # no sample rounds to 99: the +-1 window is used

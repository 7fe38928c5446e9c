"""Which cgroup hierarchy a host gives jobs, and what a job's cgroup holds, on hierarchies laid out in
a scratch folder as the kernel lays them out (cgroup v2 is not mounted with its controllers on the
test machines, where v1 runs the real jobs of tests/agent/test_isolation.py)."""

from pathlib import Path

from agent.isolation.cgroups import ROOT_NAME, Hierarchy

V2_HOST = "35 25 0:30 / {root} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
HYBRID_HOST = (
    "".join(
        f"{n} 25 0:{n} / {{root}}/{name} rw - cgroup cgroup rw,{name}\n"
        for n, name in enumerate(("cpu,cpuacct", "memory", "pids", "freezer", "devices"), start=40)
    )
    + "50 25 0:50 / {root}/unified rw - cgroup2 cgroup2 rw\n"
)


def host(tmp_path: Path, layout: str, controllers: str) -> Hierarchy | None:
    """The host's hierarchy as detected; `controllers`: what its cgroup2 mount offers."""
    root = tmp_path / "sys-fs-cgroup"
    unified = root / "unified" if layout == HYBRID_HOST else root
    unified.mkdir(parents=True)
    (unified / "cgroup.controllers").write_text(controllers)
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(layout.format(root=root))
    return Hierarchy.detect(str(mountinfo))


def test_a_unified_hierarchy_with_cpu_memory_and_pids_is_cgroup_v2(tmp_path):
    assert host(tmp_path, V2_HOST, "cpuset cpu io memory pids").describe() == "v2"


def test_a_hybrid_host_whose_unified_hierarchy_lacks_the_controllers_uses_v1(tmp_path):
    hierarchy = host(tmp_path, HYBRID_HOST, "hugetlb")

    assert hierarchy.describe() == "v1"
    assert {"cpu", "memory", "pids", "freezer", "devices"} <= set(hierarchy.roots)


def test_no_usable_hierarchy_is_none(tmp_path):
    assert host(tmp_path, V2_HOST, "hugetlb") is None


def test_a_v2_job_cgroup_gets_its_weight_memory_pids_and_whole_job_oom_kill(tmp_path):
    hierarchy = host(tmp_path, V2_HOST, "cpu memory pids")
    root = tmp_path / "sys-fs-cgroup"
    for parent in (root, root / ROOT_NAME, root / ROOT_NAME / "node-1"):
        parent.mkdir(exist_ok=True)
        (parent / "cgroup.subtree_control").touch()

    job = hierarchy.job("node-1", "request-7-g1")
    job.create(cpu_milli=2500, memory_mib=4096, pids_max=512)

    made = root / ROOT_NAME / "node-1" / "request-7-g1"
    assert (made / "cpu.weight").read_text() == "250"
    assert (made / "memory.max").read_text() == str(4096 * 1024 * 1024)
    assert (made / "memory.oom.group").read_text() == "1"
    assert (made / "pids.max").read_text() == "512"
    assert (root / ROOT_NAME / "cgroup.subtree_control").read_text() == "+cpu +memory +pids"
    assert job.procs_files() == [str(made / "cgroup.procs")]

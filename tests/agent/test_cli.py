"""`python -m agent` as an operator starts it: a process of its own, settings from flags or environment."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from agent.__main__ import main
from agent.simnvml import claims_dir
from scheduler_app.models import Gpu
from scheduler_app.services.inventory import issue_agent_credential, register_node
from tests.agent_fixtures import DEMO_JOB, REPO


def agent_process(*args, workdir, env=None):
    """`python -m agent run` as a single-tenant node (the isolation tests run it isolated)."""
    environment = {**os.environ, "PYTHONPATH": str(REPO / "sdk"), **(env or {})}  # this checkout's SDK
    unisolated = ["--no-isolation", "--workdir", str(workdir), "--job-env", f"PYTHONPATH={REPO}"]
    return subprocess.Popen(
        [sys.executable, "-m", "agent", *args, *unisolated],
        cwd=REPO,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def settings_env(url, credential, *, simulate):
    """The agent's settings as environment variables only."""
    return {
        "GPU_PORTAL_URL": url,
        "GPU_PORTAL_NODE_CREDENTIAL": credential,
        "GPU_PORTAL_SIMULATE": str(simulate),
    }


def wait_for(condition, timeout_s=30):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return False


def test_the_agent_runs_a_request_given_a_portal_and_a_credential_file(
    live_server, transactional_db, node, place, tmp_path
):
    credential = tmp_path / "credential"
    credential.write_text(issue_agent_credential(node) + "\n")
    cards = tmp_path / "cards.json"
    cards.write_text(
        json.dumps([{"uuid": g.uuid, "name": g.model, "memory_mib": g.memory_mib} for g in node.gpus.all()])
    )
    request = place(f"{DEMO_JOB} --seconds 1")

    agent = agent_process(
        "--portal",
        live_server.url,
        "--credential-file",
        str(credential),
        "--simulate-cards",
        str(cards),
        "--interval-s",
        "0.2",
        workdir=tmp_path / "work",
    )
    try:
        succeeded = wait_for(lambda: request.refresh_from_db() or request.state == "succeeded")
    finally:
        agent.send_signal(signal.SIGTERM)
        output, _ = agent.communicate(timeout=30)

    assert succeeded, output
    assert agent.returncode == 0, output
    assert f"request {request.pk}: exited 0" in output


def test_the_agent_takes_its_settings_from_the_environment(live_server, transactional_db, pool, tmp_path):
    node, credential = register_node(pool=pool, name="bare-node", cpu_milli=8000, memory_mib=65536, gpus=[])
    env = settings_env(live_server.url, credential, simulate=2)

    agent = agent_process("--interval-s", "0.2", env=env, workdir=tmp_path / "work")
    try:
        registered = wait_for(lambda: Gpu.objects.filter(node=node).count() == 2)
    finally:
        agent.send_signal(signal.SIGTERM)
        output, _ = agent.communicate(timeout=30)

    assert registered, output
    assert "registered node bare-node: 2 new cards" in output


def test_without_a_portal_or_credential_the_agent_says_what_to_give(capsys, monkeypatch):
    for name in ("GPU_PORTAL_URL", "GPU_PORTAL_NODE_CREDENTIAL", "GPU_PORTAL_NODE_CREDENTIAL_FILE"):
        monkeypatch.delenv(name, raising=False)

    assert main(["--simulate", "1"]) == 2
    assert "Give the portal's URL (--portal or GPU_PORTAL_URL)" in capsys.readouterr().err


def test_probe_prints_the_cards_memory_mig_mode_and_processes(capsys, tmp_path):
    cards = tmp_path / "cards.json"
    cards.write_text(
        json.dumps([{"uuid": "GPU-probe-0", "name": "NVIDIA H200", "memory_mib": 143771, "mig": None}])
    )
    job = subprocess.Popen(
        [sys.executable, "-m", "agent.demo_job", "--seconds", "30", "--gpu-memory-mib", "5000"],
        cwd=REPO,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": "GPU-probe-0", "GPU_PORTAL_CHECKPOINT_DIR": str(tmp_path)},
        stdout=subprocess.DEVNULL,
    )
    try:
        assert wait_for(lambda: (Path(claims_dir()) / str(job.pid)).exists())
        assert main(["probe", "--simulate-cards", str(cards)]) == 0
    finally:
        job.kill()
        job.wait()

    out = capsys.readouterr().out
    assert "GPU 0: NVIDIA H200  GPU-probe-0" in out
    assert "memory 143771 MiB, 5000 MiB used; MIG unsupported" in out
    assert f"pid {job.pid} on GPU-probe-0: 5000 MiB" in out


def test_without_nvml_the_agent_says_to_simulate(capsys):
    """This machine has no NVIDIA driver: pynvml cannot load its library."""
    assert main(["probe"]) == 2
    assert "run with --simulate N" in capsys.readouterr().err


def test_a_refused_credential_stops_the_agent_with_an_error(live_server, transactional_db, node, tmp_path):
    env = {
        "GPU_PORTAL_URL": live_server.url,
        "GPU_PORTAL_NODE_CREDENTIAL": "node_revoked",
        "GPU_PORTAL_SIMULATE": "1",
    }

    agent = agent_process("--interval-s", "0.2", env=env, workdir=tmp_path / "work")
    output, _ = agent.communicate(timeout=30)

    assert agent.returncode == 1
    assert "the portal refused this node's credential" in output


def started_agent(monkeypatch, *flags, env=None):
    """main() up to the agent's loop: the NodeAgent it built, its loop not run."""
    built = []
    monkeypatch.setattr("agent.node_agent.NodeAgent.run", lambda agent: built.append(agent))
    for name in ("GPU_PORTAL_CLOUD_NOTICES", "GPU_PORTAL_CHECKPOINT_STORE", "GPU_PORTAL_CHECKPOINT_BACKUP"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {"GPU_PORTAL_NODE_CREDENTIAL": "node_unused", **(env or {})}.items():
        monkeypatch.setenv(name, value)
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        code = main(["run", "--portal", "http://127.0.0.1:9", "--simulate", "1", *flags])
    finally:
        for signum, handler in handlers.items():  # main() points them at the agent
            signal.signal(signum, handler)
    return code, (built[0] if built else None)


def test_cloud_notices_and_checkpoint_copies_are_off_by_default(monkeypatch):
    code, agent = started_agent(monkeypatch)

    assert code == 0 and agent.cloud_notices is None and agent.checkpoint_sync is None


def test_the_agent_takes_its_cloud_and_checkpoint_store_flags(monkeypatch, tmp_path):
    code, agent = started_agent(
        monkeypatch,
        "--cloud-notices",
        "gcp",
        "--cloud-metadata-url",
        "http://127.0.0.1:9",
        "--checkpoint-store",
        f"file://{tmp_path}",
        "--checkpoint-backup",
        "s3://ckpt-backup/zone-b",
    )

    assert code == 0
    assert (agent.cloud_notices.provider, agent.cloud_notices.base_url) == ("gcp", "http://127.0.0.1:9")
    primary, backup = agent.checkpoint_sync.stores
    assert (primary.url, backup.url) == (tmp_path.as_uri(), "s3://ckpt-backup/zone-b")


def test_the_cloud_and_checkpoint_store_settings_also_come_from_the_environment(monkeypatch, tmp_path):
    env = {"GPU_PORTAL_CHECKPOINT_STORE": f"file://{tmp_path}", "GPU_PORTAL_CLOUD_NOTICES": "auto"}

    code, agent = started_agent(monkeypatch, env=env)

    assert code == 0
    assert agent.checkpoint_sync.stores[0].url == tmp_path.as_uri()
    assert agent.cloud_notices.provider == "auto"


def test_a_bad_checkpoint_store_url_stops_the_agent_with_the_reason(monkeypatch, capsys):
    code, agent = started_agent(monkeypatch, "--checkpoint-store", "gs://bucket/x")

    assert (code, agent) == (2, None)
    assert "a checkpoint store URL is file:///path or s3://bucket/prefix" in capsys.readouterr().err


def test_a_backup_without_a_primary_store_is_refused(monkeypatch, capsys):
    code, agent = started_agent(monkeypatch, "--checkpoint-backup", "s3://ckpt-backup/zone-b")

    assert (code, agent) == (2, None)
    assert "--checkpoint-backup needs --checkpoint-store" in capsys.readouterr().err


def test_an_isolated_agent_refuses_a_credential_file_others_can_read(capsys, tmp_path):
    credential = tmp_path / "credential"
    credential.write_text("node_secret")
    credential.chmod(0o644)

    code = main(
        ["run", "--portal", "http://127.0.0.1:9", "--simulate", "1", "--credential-file", str(credential)]
    )

    assert code == 2
    assert f"chmod 600 {credential}" in capsys.readouterr().err


def test_without_root_the_agent_refuses_to_isolate_and_names_the_way_out(capsys, monkeypatch):
    monkeypatch.setattr("os.geteuid", lambda: 1000)

    code, agent = started_agent(monkeypatch)

    assert (code, agent) == (2, None)
    error = capsys.readouterr().err
    assert "must run as root" in error and "--no-isolation" in error


def test_the_agent_tells_the_portal_how_it_isolates_its_jobs(monkeypatch):
    _, isolated = started_agent(monkeypatch)
    _, unisolated = started_agent(monkeypatch, "--no-isolation")

    assert isolated.isolation.report() == {"mode": "isolated", "namespaces": True, "cgroup": "v1"}
    assert unisolated.isolation.report() == {"mode": "unisolated", "namespaces": False, "cgroup": "none"}


def test_a_monitor_only_agent_starts_without_root_and_isolates_nothing(monkeypatch, tmp_path):
    monkeypatch.setattr("os.geteuid", lambda: 1000)

    code, agent = started_agent(monkeypatch, "--monitor-only")

    assert code == 0 and agent.monitor_only and agent.isolation is None


def test_a_monitor_only_agent_refuses_a_credential_file_others_can_read(capsys, tmp_path):
    credential = tmp_path / "credential"
    credential.write_text("node_secret")
    credential.chmod(0o640)

    flags = ["--portal", "http://127.0.0.1:9", "--simulate", "1", "--credential-file", str(credential)]

    code = main(["--monitor-only", *flags])

    assert code == 2
    assert f"chmod 600 {credential}" in capsys.readouterr().err

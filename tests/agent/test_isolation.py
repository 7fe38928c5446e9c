"""Hostile jobs on a shared node (tests.agent.hostile_jobs), on the real agent (`python -m agent`, as
root) and on the embedded demo: each attempt is refused or contained, and the invariant check passes
afterwards (tests/conftest.py). The same attacks on a node started with --no-isolation, and on one
without bubblewrap's namespaces, show which of them then get through: the difference is this file's
tables, not a sentence."""

import json
import os
import shutil
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import requests as http

from agent.isolation import DEFAULT_PIDS_MAX, NVIDIA_MAJOR, Isolation
from agent.isolation.identity import Identities
from agent.jobs import Job
from audit.models import Event
from scheduler_app.models import GpuRequest, LogChunk
from scheduler_app.services.inventory import issue_agent_credential
from scheduler_app.services.placement import Slice, allocate
from scheduler_app.services.requests import release_request, submit_request
from tests.agent.hostile_jobs import ATTACKS, PIDS_MAX, Driver, Target, kill_leftovers, run_scenario, wait_for
from tests.agent_fixtures import REPO
from tests.embedded_portal import embedded_portal

SCRATCH = Path("/var/tmp/gpu-portal-isolation-tests")  # the jobs' identities reach it, unlike /tmp/pytest-*
SECRET_KEY = "leak-sentinel-secret-key-0f9e"
# The test's thread places jobs while the live server answers the agent: on SQLite the two would share
# one connection (pytest-django's in-memory database), so these run on PostgreSQL.
REAL_AGENT = pytest.mark.postgres
CONTAINED = dict.fromkeys(ATTACKS, "contained")
WITHOUT_NAMESPACES = {**CONTAINED, "process-list": "got through"}
UNISOLATED = {**dict.fromkeys(ATTACKS, "got through"), "environment": "contained"}


@REAL_AGENT
def test_hostile_jobs_are_contained_on_an_isolated_node(hostile_node):
    assert_outcomes(hostile_node([]), CONTAINED)


@REAL_AGENT
def test_without_bubblewrap_a_job_still_cannot_reach_another_teams_data_but_sees_its_processes(hostile_node):
    assert_outcomes(hostile_node(["--no-namespaces"]), WITHOUT_NAMESPACES)


@REAL_AGENT
def test_with_no_isolation_every_attack_but_the_environment_gets_through(hostile_node):
    assert_outcomes(hostile_node(["--no-isolation"]), UNISOLATED)


def test_hostile_jobs_are_contained_in_the_embedded_demo(scratch):
    var = scratch / "var"
    var.mkdir()
    with embedded_portal(var, "--simulated-agents", settings={"SECRET_KEY": SECRET_KEY}) as portal:
        driver = DemoDriver(portal, var)
        outcomes = run_scenario(
            driver,
            lambda victim_dir, victim_pid, signal_pid: Target(
                victim_dir=victim_dir,
                victim_pid=victim_pid,
                signal_pid=signal_pid,
                secrets={"SECRET_KEY": SECRET_KEY},
                protected_file=str(var / "portal.sqlite3"),
                protected_marker="SQLite format 3",
                outside=[*outside_paths(), str(var / "x")],
                pids_max=DEFAULT_PIDS_MAX,
            ),
        )
        kill_leftovers(driver.checkpoint_root)
        broken = portal.manage(
            "shell", "-c", "from scheduler_app.rules.invariants import violations; print(violations())"
        )
    assert_outcomes(outcomes, CONTAINED)
    assert broken.split()[-1] == "[]", broken


def outside_paths() -> list[str]:
    """Files no job may create: in the system, and in the portal's checkout."""
    return [f"/etc/gppt-{uuid.uuid4().hex}", str(REPO / f"gppt-{uuid.uuid4().hex}")]


def assert_outcomes(outcomes: dict[str, str], expected: dict[str, str]) -> None:
    verdicts = {attack: outcome.split(":")[0] for attack, outcome in outcomes.items()}
    differences = {
        ATTACKS[attack]: f"{outcomes[attack]} (expected {expected[attack]})"
        for attack in ATTACKS
        if verdicts[attack] != expected[attack]
    }
    assert not differences, json.dumps(differences, indent=1)


@pytest.fixture
def scratch():
    """A folder the jobs' identities can reach (its parents passable), removed afterwards."""
    if os.geteuid() != 0:
        pytest.fail("the isolation tests run real jobs as other users: run them as root (CI does)")
    SCRATCH.mkdir(mode=0o711, exist_ok=True)
    folder = SCRATCH / uuid.uuid4().hex
    folder.mkdir(mode=0o711)
    yield folder
    kill_leftovers(str(folder))
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def hostile_node(
    live_server,
    sqlite_readers_take_no_table_locks,
    settings,
    scratch,
    tmp_path,
    make_node,
    team,
    member,
    other_team,
    outsider,
):
    """hostile_node(agent options) -> the outcomes of the attacks on a node whose real agent runs
    with those options, as root."""
    settings.CHECKPOINT_ROOT = str(scratch / "checkpoints")
    node = make_node("iso-node", gpus=4)
    credential = issue_agent_credential(node)
    secret = scratch / "credential"
    secret.write_text(credential)
    secret.chmod(0o600)
    cards = scratch / "cards.json"
    cards.write_text(json.dumps([{"uuid": g.uuid, "name": g.model} for g in node.gpus.all()]))
    sentinels = {
        "SECRET_KEY": SECRET_KEY,
        "GPU_PORTAL_NODE_CREDENTIAL": credential,
        "DATABASE_URL": "postgres://leak-sentinel-database/gpu_portal",
        "REDIS_URL": "redis://leak-sentinel-redis:6379/0",
    }
    agents = []

    def run(options: list[str]) -> dict[str, str]:
        argv = [
            sys.executable, "-m", "agent", "run", "--portal", live_server.url,
            "--credential-file", str(secret),
            "--simulate-cards", str(cards), "--interval-s", "0.2", "--grace-s", "1", "--mps", "off",
            "--workdir", str(scratch / "work"), "--home-root", str(scratch / "home"),
            "--identity-prefix", "gppt-", "--pids-max", str(PIDS_MAX), *options,
        ]  # fmt: skip
        log = (tmp_path / "agent.log").open("a")
        env = os.environ | sentinels
        agent = subprocess.Popen(argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        agents.append(agent)
        unisolated = "--no-isolation" in options
        driver = AgentDriver(node, {False: (team, member), True: (other_team, outsider)}, agent, scratch)
        return run_scenario(
            driver,
            lambda victim_dir, victim_pid, signal_pid: Target(
                victim_dir=victim_dir,
                victim_pid=victim_pid,
                signal_pid=signal_pid,
                secrets=sentinels,
                protected_file=str(secret),
                protected_marker=credential,
                outside=[*outside_paths(), str(scratch / "checkpoints" / "x"), str(scratch / "work" / "x")],
                forks=3 * PIDS_MAX if unisolated else 10_000,
            ),
        )

    yield run
    for agent in agents:
        agent.terminate()
        agent.wait(timeout=30)
    for leftover in [*Path("/etc").glob("gppt-*"), *REPO.glob("gppt-*")]:
        leftover.unlink()


class AgentDriver(Driver):
    """Jobs placed straight on the node's cards (no scheduling pass), read from the portal's rows."""

    def __init__(self, node, teams, agent, scratch):
        self.node, self.teams, self.agent = node, teams, agent
        self.checkpoint_root = str(scratch / "checkpoints")
        self.placed = 0

    def place(self, attacker, command, memory_mib):
        team, user = self.teams[attacker]
        request = submit_request(
            user=user, team=team, name="hostile" if attacker else "victim", gpu_milli=125,
            command=command, memory_mib=memory_mib,
        )  # fmt: skip
        gpu = self.node.gpus.get(index=self.placed % 4)
        self.placed += 1
        allocate(request, [Slice(gpu.pk, 125, 10240)])
        return request.pk

    def log(self, request_id):
        chunks = LogChunk.objects.filter(request_id=request_id).order_by("offset")
        return "".join(chunks.values_list("text", flat=True))

    def state(self, request_id):
        request = GpuRequest.objects.get(pk=request_id)
        reasons = Event.objects.filter(object_id=request_id, to_state__isnull=False).order_by("created_at")
        return request.state, list(reasons.values_list("reason", flat=True))

    def release(self, request_id):
        request = GpuRequest.objects.get(pk=request_id)
        release_request(request, user=request.user)

    def still_running(self):
        return self.agent.poll() is None


class DemoDriver(Driver):
    """Jobs submitted through the demo's API by its members (bob of Vision the victim, dave of
    Language the attacker), placed by its own scheduler, on its own agents."""

    def __init__(self, portal, var: Path):
        self.portal = portal
        self.checkpoint_root = str(var / "checkpoints")
        self.sessions = {attacker: self._session(user) for attacker, user in ((False, "bob"), (True, "dave"))}
        self.owner: dict[int, bool] = {}  # request -> whose it is (attacker or not)

    def _session(self, username: str) -> http.Session:
        secret = self.portal.manage("shell", "-c", TOKEN.format(username=username)).split()[-1]
        session = http.Session()
        session.headers["Authorization"] = f"Bearer {secret}"
        return session

    def _api(self, method: str, path: str, request_id: int, body=None):
        session = self.sessions[self.owner[request_id]]
        answer = session.request(method, f"{self.portal.url}/api/v1/requests/{path}", json=body, timeout=10)
        assert answer.ok, answer.text
        return answer.json()

    def place(self, attacker, command, memory_mib):
        body = {"name": "job", "gpu_milli": 125, "command": command, "memory_mib": memory_mib}
        answer = self.sessions[attacker].post(f"{self.portal.url}/api/v1/requests/", json=body, timeout=10)
        assert answer.ok, answer.text
        self.owner[answer.json()["id"]] = attacker
        return answer.json()["id"]

    def log(self, request_id):
        return self._api("GET", f"{request_id}/log/", request_id)["text"]

    def state(self, request_id):
        detail = self._api("GET", f"{request_id}/", request_id)
        return detail["state"], [event["reason"] for event in detail["events"] if event["to_state"]]

    def release(self, request_id):
        self._api("POST", f"{request_id}/release/", request_id)

    def still_running(self):
        return http.get(f"{self.portal.url}/healthz/live", timeout=5).ok


TOKEN = """import datetime as dt
from django.contrib.auth import get_user_model
from django.utils import timezone
from teams.services import create_api_token
user = get_user_model().objects.get(username="{username}")
print(create_api_token(user, name="isolation", expires_at=timezone.now() + dt.timedelta(hours=1))[1])
"""


def test_a_job_may_open_its_own_cards_device_and_no_other(scratch):
    """Two device files of the NVIDIA major, as a GPU node has them (no driver behind them here): the
    job's own card opens as far as the driver (no such device), the other is refused by its cgroup."""
    for minor in (0, 1):
        os.mknod(scratch / f"nvidia{minor}", 0o666 | stat.S_IFCHR, os.makedev(NVIDIA_MAJOR, minor))
        (scratch / f"nvidia{minor}").chmod(0o666)
    identities = Identities(prefix="gppt-", home_root=str(scratch / "home"))
    isolation = Isolation.detect(work_root=str(scratch / "work"), identities=identities, namespaces=False)
    isolation.attach("device-node")
    work = {
        "request_id": 1, "team": "vision", "task_type": "training", "generation": 1,
        "checkpoint_dir": str(scratch / "checkpoints" / "vision" / "request-1"),
        "gpus": [{"uuid": "GPU-a", "milli": 250, "memory_mib": 1000}],
        "command": f"sh -c 'cat {scratch}/nvidia0; cat {scratch}/nvidia1'",
    }  # fmt: skip

    job = Job(work, mps=False, isolation=isolation, card_minors=[0])
    wait_for(job.finished, "the job's end", timeout_s=30)
    job.close()

    _, output = job.unshipped(10_000)
    assert f"{scratch}/nvidia0: No such device or address" in output
    assert f"{scratch}/nvidia1: Operation not permitted" in output

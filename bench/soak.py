"""Soak: a simulated cluster under a stream of requests for 30 simulated hours, with random node
failures, checked all along by the after-fault rules (scheduler_app.rules.invariants).

    python -m bench.soak [--database-url postgres://postgres@127.0.0.1:5432/gpu_portal_bench_soak]
        [--nodes 25] [--gpus-per-node 8] [--hours 30] [--speedup 400] [--failures-per-hour 2]
        [--reclaims-per-hour 2] [--reclaim-grace-s 120] [--checkpoint-minutes 30] [--seed 1]

The cluster: `--nodes` nodes of `--gpus-per-node` cards (200 GPUs by default), each run by the real
node agent (agent.node_agent.NodeAgent) on simulated NVML, starting and stopping real processes.
The agents talk to the portal through the SDK and the portal's own API views, in this process
(InProcessTransport: no sockets, so 25 agents fit on two cores). One loop runs every agent's round,
the heartbeat watchdog, a scheduling pass and, now and then, metering, until the simulated hours
have passed.

Time is accelerated by `--speedup`: one real second stands for that many simulated seconds. Every
duration of the simulated world is divided by it: job lengths (30 min to 4 h: a `sleep` of 4.5 to
36 s at 400x), request arrivals (a Poisson stream asking for about 60 % of the cluster), failures and
the time a failed node stays away (2 to 8 h). The watchdog's thresholds stay in real seconds (suspect
after 20, lost after 40: 2.2 and 4.4 simulated hours at 400x), as the agents' rounds come a few real
seconds apart whatever the speedup. The portal's clock itself is not touched: its timestamps, and so
the ledger's seconds, are real seconds; billing is checked in them.

Failures, chosen at random (`--failures-per-hour`, simulated):
- crash: the node loses power: its jobs die, its agent is gone until the node is back;
- partition: the node drops off the network: its agent and jobs run on, unheard, until it is back;
- agent crash: the agent process dies and is restarted at once; its jobs ran on, orphaned.
A node the watchdog declared lost is returned to service by the operator when it is back.

Spot reclaims (`--reclaims-per-hour`, simulated): half the nodes are spot capacity and half the
requests are spot work that checkpoints every `--checkpoint-minutes` (simulated), and on SIGTERM for
`--term-checkpoint-share` of them (SOAK_JOB: its progress survives a move). A random spot node gets
a reclaim notice through scheduler_app.services.migration.reclaim_node with a deadline `--reclaim-
grace-s` ahead on the portal's clock (real seconds, like the watchdog's thresholds: AWS's two
minutes), its agent stops its work and the portal requeues it (spot work waits for spot capacity);
at the deadline, or once its work has left, the provider takes the node (whatever still runs there
dies) and a fresh spot node takes its place 30 min to 2 h (simulated) later.

Reports: requests lost, double runs (a request running twice where the portal can reach both
runs; runs on a partitioned node are counted apart: only the node itself could stop them before
it is heard again), over-committed GPUs, billing error in seconds (ledger against the slices),
moves that did not resume from their checkpoint, and per job a reclaim stopped (reclaim_figures):
the mean work lost (the requeue's `work_lost_s`: from its last checkpoint to its exit as its agent
saw it) against half the checkpoint interval, and the share requeued before the deadline.
"""

import json
import logging
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from contextlib import suppress

import requests

from bench.scratch_db import arguments, migrated_django, recreate_database

PORTAL = "http://soak.invalid"
UTILIZATION = 0.6  # the share of the cluster's GPU-hours the request stream asks for
SHARES = (250, 500, 1000)
JOB_HOURS = (0.5, 4.0)
DOWN_MINUTES = (120, 480)
RECLAIMED_AWAY_MINUTES = (30, 120)  # until the provider's replacement spot node is up
# The watchdog's thresholds in real seconds: the loop runs every agent's round in turn, a few seconds
# apart at 200 GPUs on two cores, so a heartbeat can be that late without any failure.
SUSPECT_AFTER_S, LOST_AFTER_S = 20, 40
METER_EVERY_S = 60.0  # real seconds: a run meters every open slice, the loop's dearest step
STEP_S = 0.5  # real seconds: one step of a spot job's work
# A spot job: $1 steps of $3 seconds in all, a checkpoint (its step, then the marker the agent watches)
# every $2 steps, and on SIGTERM when $4 is 1 (else SIGTERM loses the work since the last one); it
# starts from the step of its last checkpoint.
SOAK_JOB = """d="$GPU_PORTAL_CHECKPOINT_DIR"; mkdir -p "$d"
n=$(cat "$d/step" 2>/dev/null || echo 0)
save() { echo "$n" > "$d/step.partial" && mv "$d/step.partial" "$d/step" && touch "$d/.checkpointed"; }
if [ "$4" = 1 ]; then trap 'save; exit 143' TERM; else trap 'exit 143' TERM; fi
echo "starting at step $n"
while [ "$n" -lt "$1" ]; do
  sleep "$3" & wait $!
  n=$((n + 1))
  if [ $((n % $2)) -eq 0 ]; then save; fi
done
save
"""


def main() -> None:
    parser = arguments(__doc__, "gpu_portal_bench_soak")
    parser.add_argument("--nodes", type=int, default=25)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--hours", type=float, default=30.0, help="simulated hours of requests")
    parser.add_argument("--speedup", type=float, default=400.0, help="simulated seconds per real second")
    parser.add_argument(
        "--failures-per-hour", type=float, default=2.0, help="node failures per simulated hour"
    )
    parser.add_argument(
        "--reclaims-per-hour", type=float, default=0.5, help="spot reclaims per simulated hour"
    )
    parser.add_argument(
        "--reclaim-grace-s", type=float, default=120.0, help="a notice's deadline, portal seconds ahead"
    )
    parser.add_argument(
        "--checkpoint-minutes", type=float, default=30.0, help="spot jobs' checkpoint interval, simulated"
    )
    parser.add_argument(
        "--term-checkpoint-share",
        type=float,
        default=0.5,
        help="the share of spot jobs that checkpoint on SIGTERM (the rest lose the work since their last)",
    )
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    began = time.monotonic()
    recreate_database(args.database_url)
    migrated_django(args.database_url)
    soak = Soak(args)
    print(f"set up {args.nodes * args.gpus_per_node} GPUs in {time.monotonic() - began:.0f} s", flush=True)
    try:
        soak.run()
        report = soak.finish()
    finally:
        soak.stop_everything()
    report["wall_s"] = round(time.monotonic() - began)
    print(json.dumps(report, indent=2))


class Soak:
    def __init__(self, args):
        from django.conf import settings

        self.args = args
        self.rng = random.Random(args.seed)
        self.speedup = args.speedup
        self.checkpoints = tempfile.mkdtemp(prefix="soak-checkpoints-")
        settings.CHECKPOINT_ROOT = self.checkpoints
        settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "soak.invalid"]
        settings.NODE_SUSPECT_AFTER_S, settings.NODE_LOST_AFTER_S = SUSPECT_AFTER_S, LOST_AFTER_S
        logging.getLogger("agent").setLevel(logging.WARNING)
        settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_CLASSES": []}
        self.user, self.team, self.nodes = _cluster(args.nodes, args.gpus_per_node)
        self.agents = {node.pk: self._agent(node) for node in self.nodes}
        self.down: dict[int, tuple[str, float]] = {}  # node -> (failure, real time it is back)
        self.job_script = os.path.join(self.checkpoints, "soak_job.sh")
        with open(self.job_script, "w") as script:
            script.write(SOAK_JOB)
        self.checkpoint_steps = max(1, round(self.real_s(args.checkpoint_minutes / 60) / STEP_S))
        self.reclaiming: dict[int, float] = {}  # spot node -> real time its deadline passes
        self.reclaims = 0
        self.accepted: list[int] = []
        self.failures: Counter = Counter()
        self.double_runs: set[int] = set()
        self.partition_runs: set[int] = set()
        self.over_commits = 0
        self.samples = 0
        self.rounds = 0

    def _agent(self, node):
        from gpu_portal_sdk.node import NodeClient

        from agent.isolation import Isolation
        from agent.node_agent import NodeAgent
        from agent.nvml import load_nvml
        from demo.agents import simulated_cards
        from scheduler_app.services.inventory import issue_agent_credential

        client = NodeClient(PORTAL, issue_agent_credential(node), max_retries=0)
        client._http.session.mount(PORTAL, InProcessTransport())
        return NodeAgent(
            client,
            load_nvml(simulated_cards(node), seed=node.pk),
            isolation=Isolation(work_root=os.path.join(self.checkpoints, ".work")),
            interval_s=1.0,
            grace_s=0.5,
            mps=False,
            send_samples_every_s=5.0,
        )

    def sim_hours(self, real_s: float) -> float:
        return real_s * self.speedup / 3600

    def real_s(self, sim_hours: float) -> float:
        return sim_hours * 3600 / self.speedup

    def run(self) -> None:
        from billing_app.metering import meter_usage
        from scheduler_app.passes.run import run_scheduling_pass
        from scheduler_app.services.migration import watch_migrations
        from scheduler_app.services.node_health import check_heartbeats

        start = time.monotonic()
        end = start + self.real_s(self.args.hours)
        gpus = self.args.nodes * self.args.gpus_per_node
        mean_gpu_hours = sum(SHARES) / len(SHARES) / 1000 * sum(JOB_HOURS) / 2
        arrivals_per_hour = gpus * UTILIZATION / mean_gpu_hours
        next_arrival = start + self.rng.expovariate(arrivals_per_hour) * 3600 / self.speedup
        next_failure = start + self.rng.expovariate(self.args.failures_per_hour) * 3600 / self.speedup
        next_reclaim = start + self._gap(self.args.reclaims_per_hour)
        metered_at = start
        while (now := time.monotonic()) < end:
            while next_arrival <= now:
                self._submit()
                next_arrival += self.rng.expovariate(arrivals_per_hour) * 3600 / self.speedup
            if next_failure <= now:
                self._fail(self.rng.choice(self.nodes))
                next_failure += self.rng.expovariate(self.args.failures_per_hour) * 3600 / self.speedup
            while next_reclaim <= now:  # a round comes seconds apart: several notices may land in one
                self._reclaim(self.rng.choice(self.nodes[: len(self.nodes) // 2]))
                next_reclaim += self._gap(self.args.reclaims_per_hour)
            self._take_reclaimed(now)
            self._bring_back(now)
            for node_pk, agent in self.agents.items():
                if node_pk not in self.down:
                    agent.round()
            self.rounds += 1
            check_heartbeats()
            watch_migrations()
            run_scheduling_pass()
            self._sample()
            if now - metered_at >= METER_EVERY_S:
                meter_usage()
                metered_at = now
            if self.rounds % 20 == 0:
                print(
                    f"{self.sim_hours(now - start):5.1f} h simulated: {len(self.accepted)} requests, "
                    f"failures {dict(self.failures)}, reclaims {self.reclaims}, down {len(self.down)}",
                    flush=True,
                )

    def _gap(self, per_hour: float) -> float:
        """Real seconds to the next event of a Poisson stream of `per_hour` per simulated hour (never
        when 0)."""
        return self.rng.expovariate(per_hour) * 3600 / self.speedup if per_hour else float("inf")

    def _submit(self) -> None:
        """Half the requests are spot work that checkpoints (SOAK_JOB); the rest are on-demand sleeps."""
        from scheduler_app.choices import BillingMode
        from scheduler_app.services.requests import submit_request

        hours = self.rng.uniform(*JOB_HOURS)
        if self.rng.random() < 0.5:
            steps = max(1, round(self.real_s(hours) / STEP_S))
            on_term = int(self.rng.random() < self.args.term_checkpoint_share)
            kind = {
                "billing_mode": BillingMode.SPOT,
                "checkpoint_interval_s": max(1, round(self.checkpoint_steps * STEP_S)),
                "command": f"sh {self.job_script} {steps} {self.checkpoint_steps} {STEP_S} {on_term}",
            }
        else:
            kind = {"command": f"sleep {self.real_s(hours):.1f}"}
        request = submit_request(
            user=self.user,
            team=self.team,
            name=f"soak-{len(self.accepted)}",
            gpu_milli=self.rng.choice(SHARES),
            task_type=self.rng.choice(("training", "inference")),
            **kind,
        )
        self.accepted.append(request.pk)

    def _reclaim(self, node) -> None:
        """The provider's notice for a spot node that is up and not being reclaimed already."""
        import datetime as dt

        from django.utils import timezone

        from scheduler_app.choices import NodeStatus
        from scheduler_app.services.migration import reclaim_node

        if node.pk in self.down or node.pk in self.reclaiming:
            return
        node.refresh_from_db(fields=["status"])
        if node.status != NodeStatus.READY:
            return
        deadline = timezone.now() + dt.timedelta(seconds=self.args.reclaim_grace_s)
        reclaim_node(node, deadline=deadline, source="soak", notice_id=f"soak-{self.reclaims}")
        self.reclaims += 1
        self.reclaiming[node.pk] = time.monotonic() + self.args.reclaim_grace_s

    def _take_reclaimed(self, now: float) -> None:
        """The provider takes a reclaimed node at its deadline, or once its work has left (the portal has
        no use for it then): what still runs there dies, its agent is gone; a fresh spot node takes its
        place 30 min to 2 h (simulated) later."""
        from scheduler_app.models import Allocation

        for node_pk, deadline in list(self.reclaiming.items()):
            agent = self.agents[node_pk]
            emptied = (
                not agent.jobs and not Allocation.objects.committed().filter(gpu__node_id=node_pk).exists()
            )
            if deadline > now and not emptied:
                continue
            del self.reclaiming[node_pk]
            for job in agent.jobs.values():
                with suppress(ProcessLookupError):
                    os.killpg(job.process.pid, signal.SIGKILL)
            away = self.real_s(self.rng.uniform(*RECLAIMED_AWAY_MINUTES) / 60)
            self.down[node_pk] = ("reclaimed", now + away)

    def _fail(self, node) -> None:
        if node.pk in self.down or node.pk in self.reclaiming:
            return
        kind = self.rng.choice(("crash", "partition", "agent crash"))
        self.failures[kind] += 1
        agent = self.agents[node.pk]
        if kind == "agent crash":  # its jobs run on, orphaned; the restarted agent must deal with them
            self.agents[node.pk] = self._agent(node)
            return
        if kind == "crash":
            for job in agent.jobs.values():
                with suppress(ProcessLookupError):
                    os.killpg(job.process.pid, signal.SIGKILL)
        away = self.real_s(self.rng.uniform(*DOWN_MINUTES) / 60)
        self.down[node.pk] = (kind, time.monotonic() + away)

    def _bring_back(self, now: float) -> None:
        """Nodes whose time away is over come back (a crashed one with a fresh agent); one the watchdog
        declared lost is returned to service by the operator."""
        from scheduler_app.choices import NodeStatus
        from scheduler_app.services.inventory import set_node_status

        for node in self.nodes:
            kind, back_at = self.down.get(node.pk, ("", 0.0))
            if kind and back_at <= now:
                del self.down[node.pk]
                if kind in ("crash", "reclaimed"):
                    self.agents[node.pk] = self._agent(node)
            node.refresh_from_db(fields=["status"])
            away = node.pk in self.down or node.pk in self.reclaiming
            if node.status in (NodeStatus.LOST, NodeStatus.RECLAIMED) and not away:
                set_node_status(node, NodeStatus.READY, actor_name="soak operator", reason="node back")

    def _sample(self) -> None:
        """Over-committed cards, and requests running twice: on two reachable nodes (a double run), or
        also on a partitioned one (a stale run only the node itself could stop)."""
        from agent.jobs import running_requests
        from scheduler_app.rules.invariants import over_committed_gpus

        self.samples += 1
        self.over_commits = max(self.over_commits, len(over_committed_gpus()))
        away = {uuid for node in self.nodes if node.pk in self.down for uuid in self.uuids[node.pk]}
        for request_id, runs in running_requests(self.checkpoints).items():
            reachable = [run for run in runs if run.rsplit(" ", 1)[-1].split(",")[0] not in away]
            if len(reachable) > 1:
                self.double_runs.add(request_id)
            elif len(runs) > 1:
                self.partition_runs.add(request_id)

    @property
    def uuids(self) -> dict[int, set[str]]:
        if not hasattr(self, "_uuids"):
            self._uuids = {node.pk: set(node.gpus.values_list("uuid", flat=True)) for node in self.nodes}
        return self._uuids

    def finish(self) -> dict:
        """Stop the stream, bill everything up to now, and count what the after-fault rules find."""

        from audit.models import Event
        from billing_app.invariants import billing_error_seconds, settled_by
        from billing_app.metering import meter_usage
        from scheduler_app.choices import RequestState
        from scheduler_app.models import GpuRequest
        from scheduler_app.rules.invariants import after_fault, unresumed_moves

        for agent in self.agents.values():
            agent.grace_s = 0.2
            agent.shutdown()
        later = settled_by()
        meter_usage(later)
        broken = after_fault(accepted=self.accepted, now=later)
        states = Counter(GpuRequest.objects.filter(pk__in=self.accepted).values_list("state", flat=True))
        return {
            "gpus": self.args.nodes * self.args.gpus_per_node,
            "simulated_hours": self.args.hours,
            "speedup": self.speedup,
            "rounds": self.rounds,
            "real_s_per_round": round(self.real_s(self.args.hours) / max(1, self.rounds), 1),
            "requeued_by_node_loss": Event.objects.filter(
                to_state=RequestState.PENDING, reason__startswith="node ", reason__contains=" lost: "
            ).count(),
            "requests": len(self.accepted),
            "states": dict(states),
            "failures": dict(self.failures),
            "requests_lost": sum("is gone" in problem for problem in broken),
            "double_runs": len(self.double_runs),
            "stale_runs_on_partitioned_nodes": len(self.partition_runs),
            "over_committed_gpus_max": self.over_commits,
            "billing_error_s": str(billing_error_seconds(later)),
            "after_fault_violations": broken[:20],
            "finished": states.get(RequestState.SUCCEEDED, 0),
            "reclaims": self.reclaims,
            **reclaim_figures(self.args.reclaim_grace_s, self.checkpoint_steps * STEP_S),
            "runs_started_from_a_checkpoint": Event.objects.filter(
                to_state=RequestState.RUNNING, data__has_key="resumed_from"
            )
            .exclude(data__resumed_from=None)
            .count(),
            "moves_not_resumed_from_their_checkpoint": len(unresumed_moves()),
        }

    def stop_everything(self) -> None:
        from agent.jobs import running_requests

        for runs in running_requests(self.checkpoints).values():
            for run in runs:
                with suppress(ProcessLookupError):
                    os.killpg(int(run.split()[1]), signal.SIGKILL)
        shutil.rmtree(self.checkpoints, ignore_errors=True)


def reclaim_figures(grace_s: float, checkpoint_interval_s: float) -> dict:
    """From the requeue events of the soak's reclaims: the work lost per job a reclaim stopped (its
    `work_lost_s`) against half the checkpoint interval, and how many were requeued by their own stop
    before the deadline (not by the watchdog at it). A job that had already ended when the notice came
    (its exit not yet reported) is counted apart: it lost nothing to the reclaim."""
    import datetime as dt

    from audit.models import Event
    from scheduler_app.choices import RequestState
    from scheduler_app.services.migration import WATCHDOG

    moves = Event.objects.filter(
        to_state=RequestState.PENDING, reason__contains=" reclaimed (soak", data__has_key="work_lost_s"
    ).values_list("actor_label", "data")
    stopped, ended_before = [], 0
    for label, data in moves:
        noticed = dt.datetime.fromisoformat(data["stop_by"]) - dt.timedelta(seconds=grace_s)
        if dt.datetime.fromisoformat(data["stopped_at"]) < noticed:
            ended_before += 1
        else:
            stopped.append((label, data))
    lost_s = [data["work_lost_s"] for _, data in stopped]
    in_time = sum(data["before_deadline"] and label != WATCHDOG for label, data in stopped)
    return {
        "jobs_stopped_by_reclaims": len(stopped),
        "jobs_ended_before_the_notice_came": ended_before,
        "mean_work_lost_per_stopped_job_s": round(sum(lost_s) / len(lost_s), 2) if lost_s else None,
        "max_work_lost_s": max(lost_s, default=None),
        "half_the_checkpoint_interval_s": checkpoint_interval_s / 2,
        "stopped_jobs_requeued_before_the_deadline": f"{in_time} of {len(stopped)}",
    }


def _cluster(nodes: int, gpus_per_node: int):
    from django.contrib.auth import get_user_model

    from scheduler_app.choices import CapacityType
    from scheduler_app.services.inventory import create_pool, register_node
    from teams.choices import Role
    from teams.models import Membership, Team

    user = get_user_model().objects.create_user("soak")
    team = Team.objects.create(name="Soak", slug="soak")
    Membership.objects.create(team=team, user=user, role=Role.TEAM_ADMIN)
    spot = create_pool(name="a100-spot", gpu_model="A100-80GB", capacity_type=CapacityType.SPOT)
    on_demand = create_pool(name="a100", gpu_model="A100-80GB", capacity_type=CapacityType.ON_DEMAND)
    made = []
    for n in range(nodes):  # the first half spot capacity, the rest on-demand
        gpus = [
            {"uuid": f"GPU-soak-{n}-{i}", "model": "A100-80GB", "memory_mib": 81920}
            for i in range(gpus_per_node)
        ]
        node, _ = register_node(
            pool=spot if n < nodes // 2 else on_demand,
            name=f"soak-{n:03d}",
            cpu_milli=64_000,
            memory_mib=512 * 1024,
            gpus=gpus,
        )
        made.append(node)
    return user, team, made


class InProcessTransport(requests.adapters.BaseAdapter):
    """A `requests` transport adapter that hands each call to the portal's Django stack in this process
    (django.test.Client: the same URLs, authentication, views and serializers as over HTTP)."""

    def __init__(self):
        from django.test import Client

        super().__init__()
        self.client = Client(raise_request_exception=False)

    def send(self, request, **kwargs):
        from requests.structures import CaseInsensitiveDict

        path = request.path_url
        headers = {"Authorization": request.headers.get("Authorization", "")}
        answer = self.client.generic(
            request.method,
            path,
            request.body or b"",
            content_type="application/json",
            headers=headers,
            HTTP_HOST="soak.invalid",
        )
        response = requests.Response()
        response.status_code = answer.status_code
        response._content = answer.content
        response.headers = CaseInsensitiveDict(answer.headers)
        response.url = request.url
        response.reason = answer.reason_phrase
        response.request = request
        return response

    def close(self):
        pass


if __name__ == "__main__":
    sys.exit(main())

"""python -m agent [run] --portal URL --credential-file FILE   run the node agent (as root)
python -m agent probe                                       print what NVML reports here
python -m agent --monitor-only --portal URL --credential-file FILE   only report the cards' use (Slurm)

Settings also come from the environment: GPU_PORTAL_URL, GPU_PORTAL_NODE_CREDENTIAL or
GPU_PORTAL_NODE_CREDENTIAL_FILE, GPU_PORTAL_SIMULATE (a number of simulated GPUs) for
machines without GPUs, GPU_PORTAL_CLOUD_NOTICES, GPU_PORTAL_CHECKPOINT_STORE and
GPU_PORTAL_CHECKPOINT_BACKUP.
"""

import argparse
import json
import logging
import os
import re
import signal
import socket
import stat
import sys
import uuid
from pathlib import Path

from agent.checkpoint_sync import CheckpointSync, store_from_url
from agent.cloud_notices import PROVIDERS, CloudNoticeWatcher
from agent.isolation import DEFAULT_PATH, DEFAULT_PIDS_MAX, Isolation, IsolationUnavailable
from agent.isolation.identity import Identities
from agent.nvml import load_nvml, read_cards, read_processes, read_samples
from agent.simnvml import SimCard


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = argv[0] if argv and argv[0] in ("run", "probe") else "run"
    args = _parser(command).parse_args(argv[1:] if argv and argv[0] == command else argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(asctime)s %(levelname)s %(message)s"
    )
    try:
        nvml = load_nvml(_simulated_cards(args))
    except Exception as error:  # pynvml raises NVMLError_LibraryNotFound, DriverNotLoaded, ...
        print(
            f"Cannot read NVML: {error}. On a machine without GPUs, run with --simulate N.", file=sys.stderr
        )
        return 2
    if command == "probe":
        return probe(nvml)
    return run(args, nvml)


def _parser(command: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"python -m agent {command}", description=__doc__.splitlines()[0 if command == "run" else 1]
    )
    if command == "run":
        parser.add_argument(
            "--portal", default=os.environ.get("GPU_PORTAL_URL"), help="The portal's URL (GPU_PORTAL_URL)."
        )
        parser.add_argument(
            "--credential-file",
            default=os.environ.get("GPU_PORTAL_NODE_CREDENTIAL_FILE"),
            help="A file holding the node's credential (GPU_PORTAL_NODE_CREDENTIAL_FILE; "
            "or the credential itself in GPU_PORTAL_NODE_CREDENTIAL).",
        )
        parser.add_argument(
            "--interval-s", type=float, default=2.0, help="Seconds between rounds (default 2)."
        )
        parser.add_argument(
            "--grace-s",
            type=float,
            default=30.0,
            help="A stopped job's time to checkpoint before SIGKILL (default 30).",
        )
        parser.add_argument(
            "--mps",
            choices=("auto", "on", "off"),
            default="auto",
            help="Set NVIDIA MPS limits: auto when a daemon runs here.",
        )
        parser.add_argument(
            "--fence-after-s",
            type=float,
            default=240.0,
            help="Cut off from the portal this long, stop the jobs (they will run elsewhere); keep it plus "
            "--grace-s under the portal's NODE_LOST_AFTER_S (default 240; 0: never).",
        )
        parser.add_argument(
            "--monitor-only",
            action="store_true",
            help="Only report the cards' readings and the host's use: ask for no work, start, stop or "
            "isolate no job (a node whose jobs another cluster manager runs, e.g. Slurm; no root needed).",
        )
        parser.add_argument(
            "--no-sessions",
            action="store_true",
            help="Offer no interactive sessions (terminals, shell, port-forward, JupyterLab) in this node's "
            "allocations.",
        )
        parser.add_argument(
            "--lab-python",
            default=sys.executable,
            help="The Python with JupyterLab that an allocation's Lab runs on, as the job's identity: one "
            "its account may run (default: the agent's own).",
        )
        parser.add_argument(
            "--no-isolation",
            action="store_true",
            help="Run jobs as the agent's own user, with no cgroup and no namespaces: only for a "
            "single-tenant node (the portal shows the node as unisolated).",
        )
        parser.add_argument(
            "--no-namespaces",
            action="store_true",
            help="Isolate without bubblewrap's namespaces even where it is installed.",
        )
        parser.add_argument(
            "--workdir",
            default="/var/lib/gpu-portal/work",
            help="Where each job gets its private work directory (default /var/lib/gpu-portal/work).",
        )
        parser.add_argument(
            "--home-root",
            default="/var/lib/gpu-portal/home",
            help="Where the teams' own accounts get their homes (default /var/lib/gpu-portal/home).",
        )
        parser.add_argument(
            "--identity-prefix",
            default="gpp-",
            help="The start of each team's own account name: <prefix><team> (default gpp-).",
        )
        parser.add_argument(
            "--identity-map",
            type=Path,
            metavar="JSON",
            help='Existing accounts for teams or users: {"teams": {"vision": "vision-svc"}, '
            '"users": {"alice": "alice"}}; wins over the portal\'s mapping.',
        )
        parser.add_argument(
            "--job-path", default=DEFAULT_PATH, help=f"The PATH every job gets (default {DEFAULT_PATH})."
        )
        parser.add_argument(
            "--job-env",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="A variable every job on this node gets (repeat for more), e.g. CUDA_HOME=/usr/local/cuda.",
        )
        parser.add_argument(
            "--pids-max",
            type=int,
            default=DEFAULT_PIDS_MAX,
            help=f"Processes and threads a job may have at once (default {DEFAULT_PIDS_MAX}).",
        )
        parser.add_argument(
            "--sample-period-s", type=float, default=1.0, help="Seconds between card readings (default 1)."
        )
        parser.add_argument(
            "--send-samples-every-s",
            type=float,
            help="Send the readings in one request this often (default: every round; "
            "10 on a large cluster, where the portal's per-request cost dominates).",
        )
        parser.add_argument(
            "--cloud-notices",
            choices=("off", "auto", *PROVIDERS),
            default=os.environ.get("GPU_PORTAL_CLOUD_NOTICES", "off"),
            help="Poll this cloud's metadata endpoint for spot reclaim notices; auto: whichever "
            "answers (GPU_PORTAL_CLOUD_NOTICES; default off).",
        )
        parser.add_argument(
            "--cloud-metadata-url",
            metavar="URL",
            help="The metadata endpoint's base URL (default: the provider's own).",
        )
        parser.add_argument(
            "--checkpoint-store",
            metavar="URL",
            default=os.environ.get("GPU_PORTAL_CHECKPOINT_STORE"),
            help="Copy jobs' checkpoints to file:///shared/path or s3://bucket/prefix "
            "(GPU_PORTAL_CHECKPOINT_STORE; an S3-compatible service: AWS_ENDPOINT_URL_S3).",
        )
        parser.add_argument(
            "--checkpoint-backup",
            metavar="URL",
            default=os.environ.get("GPU_PORTAL_CHECKPOINT_BACKUP"),
            help="A second copy of every checkpoint, e.g. in another zone (GPU_PORTAL_CHECKPOINT_BACKUP).",
        )
    parser.add_argument(
        "--simulate",
        type=int,
        metavar="N",
        default=int(os.environ.get("GPU_PORTAL_SIMULATE") or 0) or None,
        help="Simulated NVML with N A100 cards instead of the real driver (GPU_PORTAL_SIMULATE).",
    )
    parser.add_argument(
        "--simulate-cards",
        type=Path,
        metavar="JSON",
        help='Simulated cards from a file: [{"uuid", "name", "memory_mib", "mig"}].',
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    return parser


def _simulated_cards(args) -> list[SimCard] | None:
    if args.simulate_cards:
        return [SimCard(**card) for card in json.loads(args.simulate_cards.read_text())]
    if args.simulate:
        host = socket.gethostname()
        return [
            SimCard(uuid=f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{host}.gpu{i}.sim')}")
            for i in range(args.simulate)
        ]
    return None


def probe(nvml) -> int:
    """What the agent would register and report, read through the same code path."""
    print(f"NVML driver {nvml.nvmlSystemGetDriverVersion()}")
    readings = {r["uuid"]: r for r in read_samples(nvml)}
    for card in read_cards(nvml):
        r = readings[card.uuid]
        print(f"GPU {card.index}: {card.model}  {card.uuid}")
        print(f"  memory {card.memory_mib} MiB, {r['memory_used_mib']} MiB used; MIG {card.mig_mode}")
        print(
            f"  util {r['gpu_util_percent']} %, power {r['power_mw'] / 1000:.1f} W, {r['temperature_c']} °C"
        )
    processes = read_processes(nvml)
    print(f"{len(processes)} compute processes" + (":" if processes else ""))
    for p in processes:
        util = "n/a" if p.sm_util_percent is None else f"{p.sm_util_percent} %"
        print(f"  pid {p.pid} on {p.uuid}: {p.memory_mib} MiB, SM util {util}")
    return 0


def run(args, nvml) -> int:
    from gpu_portal_sdk.node import NodeClient

    from agent.node_agent import NodeAgent

    try:
        isolation = None if args.monitor_only else _isolation(args)
        credential = _credential(args.credential_file, owner=_credential_owner(isolation))
    except (IsolationUnavailable, ValueError) as error:
        print(f"Cannot start: {error}.", file=sys.stderr)
        return 2
    if not args.portal or not credential:
        print(
            "Give the portal's URL (--portal or GPU_PORTAL_URL) and the node's credential "
            "(--credential-file, GPU_PORTAL_NODE_CREDENTIAL_FILE or GPU_PORTAL_NODE_CREDENTIAL).",
            file=sys.stderr,
        )
        return 2
    try:
        checkpoint_sync = _checkpoint_sync(args.checkpoint_store, args.checkpoint_backup)
    except ValueError as error:
        print(f"Checkpoint storage: {error}", file=sys.stderr)
        return 2
    cloud_notices = None
    if args.cloud_notices != "off":
        cloud_notices = CloudNoticeWatcher(args.cloud_notices, base_url=args.cloud_metadata_url)
    mps = {"auto": None, "on": True, "off": False}[args.mps]
    agent = NodeAgent(
        NodeClient(args.portal, credential),
        nvml,
        isolation=isolation,
        monitor_only=args.monitor_only,
        interval_s=args.interval_s,
        grace_s=args.grace_s,
        mps=mps,
        sample_period_s=args.sample_period_s,
        send_samples_every_s=args.send_samples_every_s,
        fence_after_s=args.fence_after_s or None,
        cloud_notices=cloud_notices,
        checkpoint_sync=checkpoint_sync,
        sessions=not args.no_sessions,
        lab_python=args.lab_python,
    )
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: agent.stop())
    agent.run()
    return 1 if agent.refused else 0


def _checkpoint_sync(store: str | None, backup: str | None) -> CheckpointSync | None:
    if not store:
        if backup:
            raise ValueError("--checkpoint-backup needs --checkpoint-store (the primary copy)")
        return None
    return CheckpointSync(store_from_url(store), backup=store_from_url(backup) if backup else None)


def _isolation(args) -> Isolation:
    environment = {}
    for item in args.job_env:
        name, equals, value = item.partition("=")
        if not equals or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"--job-env {item!r}: give NAME=VALUE")
        environment[name] = value
    options = {"work_root": args.workdir, "path": args.job_path, "environment": environment}
    if args.no_isolation:
        return Isolation(**options)
    mapping = json.loads(args.identity_map.read_text()) if args.identity_map else None
    identities = Identities(prefix=args.identity_prefix, home_root=args.home_root, mapping=mapping)
    return Isolation.detect(
        identities=identities, namespaces=not args.no_namespaces, pids_max=args.pids_max, **options
    )


def _credential_owner(isolation: Isolation | None) -> int | None:
    """Whose alone the credential file must be: root's on an isolated node, the agent's own where it only
    monitors (other users' jobs run there too); anyone's on a single-tenant node."""
    if isolation is None:
        return os.geteuid()
    return 0 if isolation.isolated else None


def _credential(path: str | None, *, owner: int | None) -> str:
    """The node's credential, from its file or the environment (then removed from it). Unless `owner` is
    None the file must be that user's alone: any job could otherwise act as the node."""
    if path:
        status = os.stat(path)
        if owner is not None and (status.st_uid != owner or status.st_mode & 0o077):
            mode = stat.filemode(status.st_mode)
            whose = "root" if owner == 0 else str(owner)
            raise ValueError(
                f"the credential file {path} must be {whose}'s and private ({mode}, uid {status.st_uid}): "
                f"chown {whose} {path}; chmod 600 {path}"
            )
        return Path(path).read_text().strip()
    return os.environ.pop("GPU_PORTAL_NODE_CREDENTIAL", "").strip()


if __name__ == "__main__":
    sys.exit(main())

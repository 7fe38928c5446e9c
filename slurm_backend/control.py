"""What slurmrestd v0.0.38 cannot do: drain a node. `scontrol` on the portal's host does it, against the
controller its SLURM_CONF (environment) names: right for a cluster whose controller the portal's host
reaches with Slurm's own authentication (a local cluster, or a login node with munge). A remote cluster
behind slurmrestd v0.0.39 or later takes the same as `POST /slurm/v0.0.39/node/{name}` with
`{"state": ["DRAIN"], "reason": ...}` and SlurmUser's JWT."""

import subprocess

from slurm_backend.client import SlurmError

TIMEOUT_S = 10


def drain_node(name: str, reason: str) -> None:
    """Drain `name` in Slurm: its running jobs go on, no new job starts there. SlurmError if refused."""
    try:
        done = subprocess.run(
            ["scontrol", "update", f"NodeName={name}", "State=DRAIN", f"Reason={reason[:200]}"],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise SlurmError(f"scontrol could not drain {name}: {error}") from None
    if done.returncode:
        raise SlurmError(f"scontrol could not drain {name}: {done.stderr.strip() or done.stdout.strip()}")

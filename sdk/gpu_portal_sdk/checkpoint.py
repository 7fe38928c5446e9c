"""checkpointed(): a job tells its node agent that a checkpoint is complete.

The agent gives each job a checkpoint directory in GPU_PORTAL_CHECKPOINT_DIR, on storage the next
node can read. After writing a checkpoint there, the job touches `.checkpointed`; its modification
time is the job's last checkpoint, which the agent reports, and what a migration resumes from.
"""

import os
from pathlib import Path

from gpu_portal_sdk.errors import ConfigurationError

CHECKPOINT_DIR_ENV = "GPU_PORTAL_CHECKPOINT_DIR"
CHECKPOINTED_FILE = ".checkpointed"


def checkpointed(path: str | os.PathLike | None = None) -> Path:
    """Mark the checkpoint in `path` (default: the job's checkpoint directory) as complete, now.
    Creates the directory if needed; returns the marker file's path."""
    if path is None:
        path = os.environ.get(CHECKPOINT_DIR_ENV)
        if not path:
            raise ConfigurationError(
                f"checkpointed(): not running as a GPU Portal job ({CHECKPOINT_DIR_ENV} is not set); "
                "give the checkpoint directory as the path."
            )
    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    marker = directory / CHECKPOINTED_FILE
    marker.touch()  # an existing marker gets the time now
    return marker

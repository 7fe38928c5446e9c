"""A stand-in workload for the demo and the tests: prints progress and holds simulated GPU memory.

With GPU_PORTAL_CHECKPOINT_DIR set (the agent sets it) it checkpoints as a real job should: its step
to `demo_job.step` there and `gpu_portal_sdk.checkpointed()` every --checkpoint-every seconds, and
again on SIGTERM before it exits (or, with --ignore-term, keeps going until killed). It starts from
the saved step, so a job moved to another node continues where its last checkpoint left it.

python -m agent.demo_job --seconds 60 [--checkpoint-every S] [--gpu-memory-mib N] [--exit-code N]
    [--ignore-term]
"""

import argparse
import os
import signal
import sys
import time
from pathlib import Path

from agent.simnvml import claim_memory

STEP_S = 0.5  # one step of work
PROGRESS_FILE = "demo_job.step"


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m agent.demo_job")
    parser.add_argument(
        "--seconds", type=float, default=60.0, help="How long the work takes, all runs together."
    )
    parser.add_argument(
        "--checkpoint-every", type=float, default=5.0, metavar="S", help="Seconds between checkpoints (5)."
    )
    parser.add_argument(
        "--gpu-memory-mib", type=int, help="Simulated GPU memory to hold (default: the task's profile)."
    )
    parser.add_argument("--exit-code", type=int, default=0)
    parser.add_argument(
        "--ignore-term", action="store_true", help="Keep working after SIGTERM (until SIGKILL)."
    )
    args = parser.parse_args()

    checkpoint_dir = os.environ.get("GPU_PORTAL_CHECKPOINT_DIR")
    progress = Path(checkpoint_dir) / PROGRESS_FILE if checkpoint_dir else None
    step = resume(progress)

    def save() -> None:
        if progress is not None:
            write_progress(progress, step)

    def on_term(signum, frame):
        print(f"SIGTERM received at step {step}: writing a checkpoint", flush=True)
        save()
        if not args.ignore_term:
            sys.exit(143)  # 128 + SIGTERM: stopped, not finished

    signal.signal(signal.SIGTERM, on_term)
    if args.gpu_memory_mib is not None:
        claim_memory(args.gpu_memory_mib)
    env = os.environ
    print(
        f"request {env.get('GPU_PORTAL_REQUEST_ID')} on {env.get('CUDA_VISIBLE_DEVICES')}: "
        f"{env.get('GPU_PORTAL_GPU_MILLI')} milli-GPU, {env.get('GPU_PORTAL_GPU_MEMORY_MIB')} MiB, "
        f"starting at step {step}",
        flush=True,
    )
    last_checkpoint = time.monotonic()
    while step < round(args.seconds / STEP_S):
        time.sleep(STEP_S)
        step += 1
        if step % 4 == 0:
            print(f"step {step}: loss {2.5 / (1 + step / 20):.4f}", flush=True)
        if progress is not None and time.monotonic() - last_checkpoint >= args.checkpoint_every:
            save()
            last_checkpoint = time.monotonic()
            print(f"checkpoint at step {step}", flush=True)
    save()
    print(f"done after {step} steps", flush=True)
    return args.exit_code


def resume(progress: Path | None) -> int:
    """The step of the last checkpoint, or 0 (none yet, or unreadable: said so)."""
    if progress is None or not progress.exists():
        return 0
    try:
        step = int(progress.read_text())
    except ValueError:
        print(f"unreadable checkpoint {progress}: starting from step 0", flush=True)
        return 0
    print(f"resumed from step {step}", flush=True)
    return step


def write_progress(progress: Path, step: int) -> None:
    """Replace the step atomically (a kill mid-write leaves the previous one), then mark it done."""
    # Imported here, not at the top: the SDK's import (~0.1 s) would delay the job's memory claim,
    # which the simulated NVML readings of a starting job are expected to show.
    from gpu_portal_sdk import checkpointed

    progress.parent.mkdir(parents=True, exist_ok=True)
    partial = progress.with_name(f".{progress.name}.partial")
    partial.write_text(str(step))
    os.replace(partial, progress)
    checkpointed(progress.parent)


if __name__ == "__main__":
    sys.exit(main())

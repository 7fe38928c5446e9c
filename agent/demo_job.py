"""A stand-in workload for the demo and the tests: prints progress, holds simulated GPU memory,
checkpoints every few seconds (its step, then a touch of the marker its agent watches), resumes from its
last checkpoint, and on SIGTERM checkpoints and exits (or, with --ignore-term, keeps going until killed).

python -m agent.demo_job --seconds 60 [--gpu-memory-mib N] [--exit-code N] [--ignore-term]
    [--checkpoint-every S]
"""

import argparse
import os
import signal
import sys
import time
from pathlib import Path

from agent.jobs import CHECKPOINT_MARKER
from agent.simnvml import claim_memory


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m agent.demo_job")
    parser.add_argument("--seconds", type=float, default=60.0, help="How long the work takes.")
    parser.add_argument(
        "--gpu-memory-mib", type=int, help="Simulated GPU memory to hold (default: the task's profile)."
    )
    parser.add_argument("--exit-code", type=int, default=0)
    parser.add_argument(
        "--ignore-term", action="store_true", help="Keep working after SIGTERM (until SIGKILL)."
    )
    parser.add_argument(
        "--checkpoint-every",
        type=float,
        default=5.0,
        help="Seconds between checkpoints (0: only on SIGTERM).",
    )
    args = parser.parse_args()

    directory = Path(os.environ.get("GPU_PORTAL_CHECKPOINT_DIR", "."))
    checkpoint = directory / "demo_job.step"
    step = int(checkpoint.read_text()) if checkpoint.exists() else 0

    def save() -> None:
        checkpoint.write_text(str(step))
        (directory / CHECKPOINT_MARKER).touch()

    def on_term(signum, frame):
        print(f"SIGTERM received at step {step}: writing a checkpoint", flush=True)
        save()
        if not args.ignore_term:
            sys.exit(143)

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
    started = saved = time.monotonic()
    while time.monotonic() - started < args.seconds:
        time.sleep(0.5)
        step += 1
        if step % 4 == 0:
            print(f"step {step}: loss {2.5 / (1 + step / 20):.4f}", flush=True)
        if args.checkpoint_every and time.monotonic() - saved >= args.checkpoint_every:
            save()
            saved = time.monotonic()
    save()
    print(f"done after {step} steps", flush=True)
    return args.exit_code


if __name__ == "__main__":
    sys.exit(main())

"""How a share reads, the one wording for pages, the API and the estimate."""

from scheduler_app.constants import MILLI_PER_GPU


def share_label(gpu_milli: int, num_gpus: int) -> str:
    """'1/4 GPU', '0.3 GPU' or '2 GPUs': how people say it."""
    if num_gpus > 1:
        return f"{num_gpus} GPUs"
    if gpu_milli == MILLI_PER_GPU:
        return "1 GPU"
    if gpu_milli % (MILLI_PER_GPU // 8) == 0:
        eighths = gpu_milli // (MILLI_PER_GPU // 8)
        for denominator in (2, 4, 8):
            if eighths * denominator % 8 == 0:
                return f"{eighths * denominator // 8}/{denominator} GPU"
    return f"{gpu_milli / MILLI_PER_GPU:g} GPU"

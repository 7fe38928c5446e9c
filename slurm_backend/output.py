"""A Slurm job's output file, tailed into the request's log through the agent's own append_log."""

from pathlib import Path

from scheduler_app.constants import LOG_CHUNK_MAX_CHARS
from scheduler_app.models import Node
from scheduler_app.services.agents import append_log
from slurm_backend.models import SlurmJob

READ_MAX_BYTES = 1024 * 1024  # per sync and job: a flood is shipped over several syncs


def complete_text(data: bytes) -> tuple[str, int]:
    """The text of `data` up to its last whole UTF-8 character, and the bytes that takes; invalid bytes
    inside become U+FFFD (as the agent reads output), NUL too (the log refuses it)."""
    for cut in range(4):
        end = len(data) - cut
        try:
            return data[:end].decode("utf-8").replace("\x00", "\ufffd"), end
        except UnicodeDecodeError as error:
            if error.start < end - 3:  # a bad byte inside, not a character cut at the end
                break
    return data.decode("utf-8", errors="replace").replace("\x00", "\ufffd"), len(data)


def ship_output(job: SlurmJob, node: Node) -> int:
    """Ship what the job wrote since the last call; returns the characters shipped. A file not there
    yet (the job has not started) ships nothing."""
    try:
        with Path(job.output_path).open("rb") as stream:
            stream.seek(job.log_bytes)
            data = stream.read(READ_MAX_BYTES)
    except FileNotFoundError:
        return 0
    text, used = complete_text(data)
    shipped = 0
    for start in range(0, len(text), LOG_CHUNK_MAX_CHARS):
        piece = text[start : start + LOG_CHUNK_MAX_CHARS]
        append_log(node, job.request_id, job.log_base + job.log_chars + shipped, piece)
        shipped += len(piece)
    if used:
        job.log_bytes += used
        job.log_chars += shipped
        SlurmJob.objects.filter(pk=job.pk).update(log_bytes=job.log_bytes, log_chars=job.log_chars)
    return shipped

"""The request page's timeline: checkpoints in a row fold into one line; everything else keeps its own."""

from audit.models import Event
from scheduler_app.selectors import CheckpointRun, fold_checkpoints


def events(*steps: str) -> list[Event]:
    return [
        Event(to_state=step, data={"at": f"2026-03-01T23:08:{i:02d}+00:00"} if step == "checkpoint" else {})
        for i, step in enumerate(steps)
    ]


def shape(timeline) -> list[str]:
    return [f"checkpointed x{e.count}" if isinstance(e, CheckpointRun) else e.to_state for e in timeline]


def test_checkpoints_in_a_row_fold_into_one_line_per_run_around_a_reclaim():
    log = events(
        "pending", "scheduled", "running", "checkpoint", "checkpoint", "checkpoint",
        "migrating", "pending", "scheduled", "running", "checkpoint", "checkpoint",
    )  # fmt: skip

    timeline = fold_checkpoints(log)

    assert shape(timeline) == [
        "pending", "scheduled", "running", "checkpointed x3",
        "migrating", "pending", "scheduled", "running", "checkpointed x2",
    ]  # fmt: skip
    assert timeline[3].last is log[5] and timeline[3].last_at == "2026-03-01T23:08:05+00:00"


def test_a_lone_checkpoint_keeps_its_own_line():
    log = events("running", "checkpoint", "billing_switched", "checkpoint")

    assert fold_checkpoints(log) == log

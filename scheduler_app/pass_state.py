"""Keeping what the last scheduling pass left, so an estimate need not plan a whole pass again.

The pass stores the core's post-plan state in one row at the end of its
transaction; an estimate loads it in one query and replays the few request
changes the event log shows since. Anything else changed since (a node, a pool,
a quota, a pass that did not apply all it planned) makes the state unusable and
the estimate falls back to a full dry run.
"""

import logging
import pickle

from django.contrib.contenttypes.models import ContentType
from django.db.models import Max

from audit.choices import NoticeKind
from audit.models import Event
from scheduler_app.choices import RequestState
from scheduler_app.cluster_state import WORKLOAD_WINDOW, ClusterSnapshot, request_spec
from scheduler_app.core.next_pass import NextPass, after_pass, replay
from scheduler_app.core.queueing import PassPlan
from scheduler_app.lifecycle import ACTIVE_STATES
from scheduler_app.models import GpuRequest, PassRecord, Pool

RECORD_PK = 1
log = logging.getLogger(__name__)

# The last state loaded in this process, by (ran_at, last_event_id), and the next pass planned on it with
# the changes since (by those changes): unpickling and planning are most of the work, and both hold until
# the next pass or change.
_loaded: dict = {}


def store_pass_state(snapshot: ClusterSnapshot, plan: PassPlan, result, now, policy: str) -> None:
    """Keep the post-plan state, or forget it when the pass could not apply its whole plan
    (`result`: the pass's PassResult, counting what it applied)."""
    if result.conflicts or result.preempted != len(plan.preemptions):
        PassRecord.objects.filter(pk=RECORD_PK).delete()
        return
    state = after_pass(
        snapshot.nodes,
        snapshot.pending,
        snapshot.running,
        snapshot.quotas,
        snapshot.recent,
        plan,
        now.timestamp(),
        policy,
        WORKLOAD_WINDOW,
    )
    PassRecord.objects.update_or_create(
        pk=RECORD_PK,
        defaults={
            "ran_at": now,
            "last_event_id": Event.objects.aggregate(last=Max("pk"))["last"] or 0,
            "state": pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL),
        },
    )


def next_pass() -> NextPass | None:
    """The next pass on the state the last one left, with the changes since; None when none is stored
    or it is out of date."""
    record = PassRecord.objects.filter(pk=RECORD_PK).defer("state").first()
    if record is None:
        return None
    key = (record.ran_at, record.last_event_id)
    if _loaded.get("key") != key:
        blob = bytes(PassRecord.objects.filter(pk=RECORD_PK).values_list("state", flat=True).get())
        _loaded.clear()
        try:
            state = pickle.loads(blob)
        except Exception:  # any unpickling failure: a renamed class, another layout, a damaged blob
            # Left by another version of the code: unusable until the next pass stores its own.
            log.warning("the stored pass state cannot be read; estimating with a full dry run")
            return None
        _loaded.update(key=key, state=state)
    changes = _changes_since(record.last_event_id)
    if changes is None:
        return None
    if _loaded.get("changes") != changes:
        submitted, withdrawn, ended = changes
        pools = list(Pool.objects.all())
        new = GpuRequest.objects.filter(pk__in=submitted, state=RequestState.PENDING).select_related(
            "team", "pool"
        )
        specs = sorted((request_spec(r, pools) for r in new), key=lambda s: (s.submitted_at, s.id))
        state = replay(_loaded["state"], [s for s in specs if s.pools], withdrawn, ended)
        _loaded.update(changes=changes, next_pass=NextPass(state))
    return _loaded["next_pass"]


def _changes_since(last_event_id: int) -> tuple[tuple[int, ...], frozenset[int], frozenset[int]] | None:
    """The requests submitted, withdrawn and ended since the pass (from the event log); None when
    anything else changed that the pass saw."""
    request_type = ContentType.objects.get_for_model(GpuRequest)
    scheduler_types = set(
        ContentType.objects.filter(app_label="scheduler_app").values_list("pk", flat=True)
    ) - {request_type.pk}
    submitted: dict[int, None] = {}
    withdrawn, ended = set(), set()
    changes = Event.objects.filter(pk__gt=last_event_id).order_by("pk")
    for kind, pk, before, after in changes.values_list(
        "content_type_id", "object_id", "from_state", "to_state"
    ):
        if after in NoticeKind.values:
            continue  # a telemetry finding (scheduler_app.derived_metrics) changes no state
        if kind in scheduler_types:
            return None  # a node, pool or quota changed: what the pass saw no longer holds
        if kind != request_type.pk:
            continue
        if not before and after == RequestState.PENDING:
            submitted[pk] = None
        elif before == RequestState.PENDING and after != RequestState.PENDING and after not in ACTIVE_STATES:
            if pk in submitted:
                del submitted[pk]
            else:
                withdrawn.add(pk)
        elif before in ACTIVE_STATES and after not in ACTIVE_STATES:
            ended.add(pk)
            if after == RequestState.PENDING:
                submitted[pk] = None
        elif not (before == RequestState.SCHEDULED and after == RequestState.RUNNING):
            return None  # placed or moved by someone else since
    return tuple(submitted), frozenset(withdrawn), frozenset(ended)

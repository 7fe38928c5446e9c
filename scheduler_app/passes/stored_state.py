"""Keeping what the last scheduling pass left, so an estimate need not plan a whole pass again.

The pass stores the core's post-plan state in one row at the end of its
transaction; an estimate loads it in one query and replays the few request
changes the event log shows since. Anything else changed since (a node, a pool,
a quota, a pass that did not apply all it planned) makes the state unusable and
the estimate falls back to a full dry run. The next pass starts from it the same
way (`snapshot_since_last_pass`), so a pass after a submit on a busy cluster
reads what changed, not the whole cluster.
"""

import logging
import pickle

from django.contrib.contenttypes.models import ContentType
from django.db import transaction
from django.db.models import Count, Max, Subquery
from django.utils import timezone

from audit.choices import NoticeKind
from audit.models import Event
from infra.bulk_insert import update_rows
from scheduler_app.choices import NodeStatus, RequestState
from scheduler_app.core.next_pass import NextPass, PassState, after_pass, replay
from scheduler_app.core.queueing import PassPlan
from scheduler_app.models import Gpu, GpuRequest, InteractiveSession, PassRecord, Pool
from scheduler_app.passes.cluster_state import (
    WORKLOAD_WINDOW,
    ClusterSnapshot,
    index_cards,
    no_pool,
    recent_specs,
    request_spec,
    request_specs,
)
from scheduler_app.rules.billing import billing
from scheduler_app.rules.lifecycle import ACTIVE_STATES

RECORD_PK = 1
# How many events before the newest one a stored pass saw are read again (see _changes_since): about
# ten seconds of a busy portal's submits, cancels and releases.
EVENT_LOOKBACK = 2000
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
        None if snapshot.budget_held else snapshot.unplaceable,
        snapshot.offline,
    )
    state.pools = _pools_key(Pool.objects.all())
    last_event_id = Event.objects.aggregate(last=Max("pk"))["last"] or 0
    record = PassRecord(
        pk=RECORD_PK,
        ran_at=now,
        last_event_id=last_event_id,
        state=pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL),
    )
    if PassRecord.objects.filter(pk=RECORD_PK).exists():
        # The state's megabytes as a binary parameter (update_rows), not quoted into the statement as
        # text: about 50 ms less of every pass on a large cluster.
        update_rows(PassRecord, [record], ["ran_at", "last_event_id", "state"])
    else:
        record.save(force_insert=True)
    # This process need not unpickle what it just stored, once it is committed (a rolled-back pass's
    # key may come again with other contents where ids are reused).
    transaction.on_commit(lambda: _keep_loaded((now, last_event_id), state))


def _keep_loaded(key: tuple, state: PassState) -> None:
    _loaded.clear()
    _loaded.update(key=key, state=state)


def snapshot_since_last_pass() -> ClusterSnapshot | None:
    """What `load_cluster_snapshot` would read now, built from the state the last pass stored and the
    requests the event log shows submitted, withdrawn or ended since; None (load the whole cluster)
    when none is stored, anything else changed (the pools included), a request came back to the queue,
    a budget holds work, work is checkpointing before it stops (its cards' deadlines are read by the
    full load only), or the pending requests do not add up (an event committed after a later one the
    pass saw)."""
    record = PassRecord.objects.filter(pk=RECORD_PK).defer("state").first()
    state = _stored_state(record, "loading the whole cluster") if record else None
    if state is None or state.unplaceable is None or billing().holds(timezone.now()):
        return None
    if GpuRequest.objects.filter(state=RequestState.MIGRATING).exists():
        return None
    changes = _changes_since(record, state)
    if changes is None:
        return None
    submitted, withdrawn, ended, pending_count = changes
    pools = list(Pool.objects.all())
    if _pools_key(pools) != state.pools:
        return None  # a pool was added or changed (not every such change is in the event log)
    new = GpuRequest.objects.filter(pk__in=submitted, state=RequestState.PENDING).order_by("created_at", "id")
    specs = request_specs(new, pools)
    state = replay(state, [s for s in specs if s.pools], withdrawn, ended)
    unplaceable = {pk: why for pk, why in state.unplaceable.items() if pk not in withdrawn}
    unplaceable |= {s.id: no_pool(s) for s in specs if not s.pools}
    if pending_count != len(state.waiting) + len(unplaceable):
        return None
    snapshot = ClusterSnapshot(
        nodes=state.nodes,
        offline=list(state.offline),
        pending=sorted(state.waiting, key=lambda r: (r.submitted_at, r.id)),
        running=state.running,
        quotas=state.quotas,
        pool_capacity={p.name: p.capacity_type for p in pools},
        unplaceable=unplaceable,
        recent=recent_specs(pools),  # read: it counts requests submitted and withdrawn since, and others
    )
    cards = Gpu.objects.filter(node__status=NodeStatus.READY).order_by("node_id", "index")
    by_node: dict[str, tuple[str, list[int]]] = {}
    for gpu_id, node, pool in cards.values_list("pk", "node__name", "node__pool__name"):
        by_node.setdefault(node, (pool, []))[1].append(gpu_id)
    index_cards(snapshot, ((node, pool, gpu_ids) for node, (pool, gpu_ids) in by_node.items()))
    return snapshot


def _pools_key(pools) -> tuple:
    """What of the pools decides which pools a request may use and how its share rounds."""
    return tuple(sorted((p.pk, p.name, p.capacity_type, p.granularity_milli) for p in pools))


def _stored_state(record: PassRecord, fallback: str) -> PassState | None:
    """The stored state of `record`, unpickled once per process and record; None when this code cannot
    read it (`fallback` says what is done instead)."""
    key = (record.ran_at, record.last_event_id)
    if _loaded.get("key") != key:
        blob = bytes(PassRecord.objects.filter(pk=RECORD_PK).values_list("state", flat=True).get())
        _loaded.clear()
        try:
            state = pickle.loads(blob)
        except Exception:  # any unpickling failure: a renamed class, another layout, a damaged blob
            # Left by another version of the code: unusable until the next pass stores its own.
            log.warning("the stored pass state cannot be read; %s", fallback)
            return None
        _loaded.update(key=key, state=state)
    return _loaded["state"]


def next_pass() -> NextPass | None:
    """The next pass on the state the last one left, with the changes since; None when none is stored
    or it is out of date."""
    record = PassRecord.objects.filter(pk=RECORD_PK).defer("state").first()
    if record is None or _stored_state(record, "estimating with a full dry run") is None:
        return None
    changes = _changes_since(record, _loaded["state"])
    if changes is None:
        return None
    changes = changes[:3]  # the pending count moves with every submit: it does not key the cache
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


def _changes_since(
    record: PassRecord, state: PassState
) -> tuple[tuple[int, ...], frozenset[int], frozenset[int], int] | None:
    """The requests submitted, withdrawn and ended since `state` was stored (`record`), from the event
    log, and how many requests are pending as those events stand; None when anything else changed
    that the pass saw.

    Writers commit out of id order, so an event may become visible after a later one the pass saw, or
    commit while the pass ran: the last EVENT_LOOKBACK events before the newest one the pass saw are
    read again, and each request's newest event is set against what the state holds (pending, running
    or neither), so a change already in the state is not applied twice."""
    request_type = ContentType.objects.get_for_model(GpuRequest)
    scheduler_types = set(
        ContentType.objects.filter(app_label="scheduler_app").values_list("pk", flat=True)
    ) - {
        request_type.pk,
        ContentType.objects.get_for_model(InteractiveSession).pk,
    }  # sessions move no capacity
    newest: dict[int, str] = {}  # request -> the state its newest event moved it to
    came_back: set[int] = set()  # requests back in the queue from active work
    # The requests pending now, counted in the same statement (the same snapshot) as the events read.
    pending = GpuRequest.objects.filter(state=RequestState.PENDING).order_by().values("state")
    changes = (
        Event.objects.filter(pk__gt=record.last_event_id - EVENT_LOOKBACK)
        .annotate(pending=Subquery(pending.annotate(n=Count("pk")).values("n")))
        .order_by("pk")
    )
    rows = list(
        changes.values_list(
            "pk", "content_type_id", "object_id", "from_state", "to_state", "created_at", "pending"
        )
    )
    # None: no request pending; no event read: counted on its own.
    pending_count = (
        (rows[0][-1] or 0) if rows else GpuRequest.objects.filter(state=RequestState.PENDING).count()
    )
    notices = frozenset(NoticeKind.values)  # (built again on each access: not in the loop)
    for pk, kind, object_id, before, after, created_at, _ in rows:
        if after in notices:
            continue  # a telemetry finding (telemetry.derived_metrics) changes no state
        if kind in scheduler_types:
            if pk > record.last_event_id or created_at >= record.ran_at:
                return None  # a node, pool or quota changed: what the pass saw no longer holds
            continue
        if kind != request_type.pk:
            continue
        newest[object_id] = after
        if before in ACTIVE_STATES and after == RequestState.PENDING:
            came_back.add(object_id)
    queued = {r.id for r in state.waiting} | set(state.unplaceable or ())
    running = {a.request.id for a in state.running}
    submitted, withdrawn, ended = [], set(), set()
    for request_id, now_in in newest.items():
        if now_in == RequestState.PENDING:
            if request_id in queued:
                continue
            if request_id in running or request_id in came_back:
                return None  # requeued: it keeps its place by age, and is not among the newest requests
            submitted.append(request_id)
        elif now_in in ACTIVE_STATES:
            if request_id not in running:
                return None  # placed or moved by someone else since
        elif request_id in queued:
            withdrawn.add(request_id)
        elif request_id in running:
            ended.add(request_id)
    return tuple(submitted), frozenset(withdrawn), frozenset(ended), pending_count

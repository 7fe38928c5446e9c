"""Where a request goes: placement policies over plain cluster state.

Two ways in:

* ``choose_placement(nodes, request, policy, workload)`` for a one-off decision;
* ``Placer(nodes, policy, workload)`` for a scheduling pass: it mirrors the
  nodes into numpy arrays once, then each ``place``/``release`` (or ``refresh``
  after the caller changed a node) touches one node, and per-request-shape
  scores are cached per node and per node state, so only the nodes changed
  since that shape was last seen, into a state not scored for it, are rescored.
  ``choose(request, views)`` judges some nodes as other states for one call
  (a reservation's guarded view).

Policies (``POLICIES``, by name):

* ``first-fit``: first node in the given order with room, lowest card indices.
* ``best-fit``: node left with the least free CPU + GPU (each normalised by the
  largest node), tightest cards; the simulator's BestFit.
* ``fgd``: Fragmentation Gradient Descent (Weng et al., ATC 2023): the node and
  card whose fragmentation (see ``fragmentation.py``) grows least.
* ``fgd-plus`` (``DEFAULT_POLICY``): first, do not take the last hosts of a
  scarce gang pinned to GPU models (no other model can stand in for them),
  nor, for a CPU-only request, of any scarce gang;
  then FGD's rank, then, among equally ranked choices: (1) do not take the
  last nodes able to host a rare gang (a multi-card shape at most a tenth of
  the nodes can still host, more when the mix asks for as much CPU per GPU as
  the cluster has: ``scarce_gang_share``);
  (2) a request free to use any model takes the model with the least demand
  pinned to it per free milli (``WorkloadMix.pinned``); (3) the least growth
  of host-aware fragmentation (idle cards count as usable only as far as the
  node's free CPU and memory can feed them), for a CPU-only request counted
  in eighths of a card and then the least free CPU; (4) pack (best-fit).
  Where the mix asks for more CPU per GPU than the cluster has (CPU runs out
  first: ``cpu_pressure`` above 1), a CPU-only request ranks by that count of
  eighths instead of FGD's rank, until every gang shape counts as scarce.
  Task-aware: training packs onto the fullest card; inference only considers
  cards nobody else uses, unless no such card fits anywhere, then it packs.

Every policy checks GPU share and card memory, host CPU and memory, the
request's GPU models and pools. Multi-GPU requests take whole cards on one
node. All choices are deterministic: remaining ties go to the earliest node
in the given order, then the lowest card index. Scores are exact (fixed-point
fragmentation), so a tie is a tie whatever batch the nodes were scored in.

Modules: ``index.py`` (``ClusterIndex``, the free-capacity index), ``fits.py`` (the checks on one
plain node), ``policy.py`` (the ``Policy`` base), one module per policy (``first_fit.py``,
``best_fit.py``, ``fgd.py``, ``fgd_plus.py`` with ``gang_room.py``), and ``placer.py`` (``Placer``,
``POLICIES``, ``choose_placement``, ``apply_placement``, ``release_placement``).
"""

from .best_fit import BestFit
from .fgd import Fgd
from .fgd_plus import FgdPlus, cpu_pressure, scarce_gang_share
from .first_fit import FirstFit, first_fit
from .fits import candidate_gpus, gpu_fits, node_admits
from .index import ClusterIndex
from .placer import (
    DEFAULT_POLICY,
    POLICIES,
    Placer,
    apply_placement,
    choose_placement,
    release_placement,
)
from .policy import Policy

__all__ = [
    "DEFAULT_POLICY",
    "POLICIES",
    "BestFit",
    "ClusterIndex",
    "Fgd",
    "FgdPlus",
    "FirstFit",
    "Placer",
    "Policy",
    "apply_placement",
    "candidate_gpus",
    "choose_placement",
    "cpu_pressure",
    "first_fit",
    "gpu_fits",
    "node_admits",
    "release_placement",
    "scarce_gang_share",
]

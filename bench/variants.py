"""Workload variants of a pod list, of the kinds the FGD paper evaluates (Weng et al., ATC 2023, sec. 6).

From one pod list (by default the Alibaba trace's ``openb_pod_list_default.csv``), each variant
changes one property of the mix and keeps the rest as it was:

* ``cpu-x{m}``: CPU-only pods whose total CPU is ``m`` times the original's (0.5 = half as much,
  4 = four times). Fewer: a seeded sample without replacement; more: all of them, then pods drawn
  with replacement. GPU pods unchanged.
* ``share-{p}``: ``p`` % of the GPU pods share a card (ask for under 1,000 milli; the trace has
  44 %). The number of GPU pods stays the same: sharing and whole-card pods are each drawn with
  replacement from the original ones of their kind. CPU-only pods unchanged.
* ``multi-{p}``: ``p`` % of the GPU pods are multi-GPU (gangs; the trace has 1 %), drawn the
  same way.
* ``spec-{p}``: ``p`` % of the GPU pods, chosen at random, are constrained to one GPU model (the
  trace has none; the paper's production cluster has about 33 %). The model is drawn in
  proportion to the cards of the nodes that could host the pod alone (CPU, memory, cards), so
  every constrained pod can run somewhere and popular models get most of them.

Every variant is a function of (pod list, nodes, kind, level, seed): the same seed builds the same
pods, in the same order, with the same names. Copies of a pod get the name ``{name}-v{k}``, so
names stay unique (the replay sorts by name). ``VARIANTS`` is the default set (12 with the
original); ``python -m bench.variants --out DIR`` writes them as pod CSVs in the trace's format.
"""

from __future__ import annotations

import argparse
import csv
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from scheduler_app.core.cluster import MILLI_PER_GPU, NodeState, RequestSpec

from .trace import DEFAULT_NODES, DEFAULT_PODS, load_nodes, load_pods


@dataclass(frozen=True)
class Variant:
    """One kind of change at one level (``level`` is a multiple for ``cpu``, a percentage otherwise)."""

    kind: str  # "default", "cpu", "share", "multi" or "spec"
    level: float = 0.0

    @property
    def name(self) -> str:
        if self.kind == "default":
            return "default"
        if self.kind == "cpu":
            return f"cpu-x{self.level:g}"
        return f"{self.kind}-{self.level:g}"

    @classmethod
    def parse(cls, text: str) -> Variant:
        """``default``, ``cpu-x2``, ``share-60``, ``multi-10``, ``spec-33``."""
        if text == "default":
            return cls("default")
        kind, _, level = text.partition("-")
        if kind not in BUILDERS or not level:
            raise ValueError(f"unknown variant {text!r}: default, cpu-xM, share-P, multi-P or spec-P")
        return cls(kind, float(level.removeprefix("x") if kind == "cpu" else level))


VARIANTS: tuple[Variant, ...] = (
    Variant("default"),
    Variant("cpu", 0.5),
    Variant("cpu", 2),
    Variant("cpu", 4),
    Variant("share", 60),
    Variant("share", 80),
    Variant("multi", 5),
    Variant("multi", 10),
    Variant("multi", 20),
    Variant("spec", 10),
    Variant("spec", 20),
    Variant("spec", 33),
)


def is_sharing(pod: RequestSpec) -> bool:
    return pod.num_gpus == 1 and pod.gpu_milli < MILLI_PER_GPU


def is_multi_gpu(pod: RequestSpec) -> bool:
    return pod.num_gpus > 1


def _copies(pods: Sequence[RequestSpec], picks: np.ndarray) -> list[RequestSpec]:
    """The picked pods (indices into `pods`), repeats renamed ``{name}-v{k}`` so names stay unique."""
    seen: dict[int, int] = {}
    out = []
    for i in picks.tolist():
        k = seen.get(i, 0)
        seen[i] = k + 1
        out.append(pods[i] if k == 0 else replace(pods[i], id=f"{pods[i].id}-v{k}"))
    return out


def _draw(pods: Sequence[RequestSpec], count: int, rng: np.random.Generator) -> list[RequestSpec]:
    """`count` of the pods: a sample without replacement if there are enough, else all plus draws."""
    if count <= len(pods):
        picks = np.sort(rng.choice(len(pods), size=count, replace=False))
    else:
        picks = np.concatenate([np.arange(len(pods)), rng.integers(len(pods), size=count - len(pods))])
    return _copies(pods, picks)


def _cpu(pods: list[RequestSpec], nodes: list[NodeState], multiple: float, rng) -> list[RequestSpec]:
    cpu_only = [p for p in pods if not p.num_gpus]
    target = multiple * sum(p.cpu_milli for p in cpu_only)
    if multiple <= 1:
        order = rng.permutation(len(cpu_only))
        total, keep = 0, []
        for i in order.tolist():
            if total + cpu_only[i].cpu_milli > target:
                continue
            keep.append(i)
            total += cpu_only[i].cpu_milli
        chosen = _copies(cpu_only, np.sort(np.array(keep, dtype=np.int64)))
    else:
        picks, total = list(range(len(cpu_only))), sum(p.cpu_milli for p in cpu_only)
        while total < target:
            i = int(rng.integers(len(cpu_only)))
            picks.append(i)
            total += cpu_only[i].cpu_milli
        chosen = _copies(cpu_only, np.array(picks, dtype=np.int64))
    return [p for p in pods if p.num_gpus] + chosen


def _mix_of(kind: Callable[[RequestSpec], bool]):
    """A builder making `percent` % of the GPU pods of `kind` (drawn from those), the rest of the others."""

    def build(pods: list[RequestSpec], nodes: list[NodeState], percent: float, rng) -> list[RequestSpec]:
        gpu = [p for p in pods if p.num_gpus]
        wanted = round(len(gpu) * percent / 100)
        chosen = _draw([p for p in gpu if kind(p)], wanted, rng)
        chosen += _draw([p for p in gpu if not kind(p)], len(gpu) - wanted, rng)
        return [p for p in pods if not p.num_gpus] + chosen

    return build


def _spec(pods: list[RequestSpec], nodes: list[NodeState], percent: float, rng) -> list[RequestSpec]:
    gpu_rows = [i for i, p in enumerate(pods) if p.num_gpus and not p.models]
    constrained = set(rng.choice(gpu_rows, size=round(len(gpu_rows) * percent / 100), replace=False).tolist())
    models = sorted({g.model for n in nodes for g in n.gpus})
    out = []
    for i, pod in enumerate(pods):
        if i in constrained:
            cards = np.array([_cards_for(pod, nodes, m) for m in models], dtype=np.float64)
            if cards.sum():
                model = models[int(rng.choice(len(models), p=cards / cards.sum()))]
                pod = replace(pod, models=frozenset({model}))
        out.append(pod)
    return out


def _cards_for(pod: RequestSpec, nodes: list[NodeState], model: str) -> int:
    """Cards of `model` on the nodes that could host the pod alone."""
    return sum(
        len(n.gpus)
        for n in nodes
        if n.gpus
        and n.gpus[0].model == model
        and len(n.gpus) >= pod.num_gpus
        and n.cpu_milli >= pod.cpu_milli
        and n.memory_mib >= pod.memory_mib
    )


BUILDERS = {"cpu": _cpu, "share": _mix_of(is_sharing), "multi": _mix_of(is_multi_gpu), "spec": _spec}


def build_variant(
    pods: Sequence[RequestSpec], nodes: Sequence[NodeState], variant: Variant, seed: int = 0
) -> list[RequestSpec]:
    """The variant of the pod list (see the module docstring); deterministic per seed."""
    pods = list(pods)
    if variant.kind == "default":
        return pods
    rng = np.random.default_rng([seed, sum(variant.name.encode())])
    return BUILDERS[variant.kind](pods, list(nodes), variant.level, rng)


def write_pods(pods: Sequence[RequestSpec], path: Path) -> None:
    """A pod CSV that ``bench.trace.load_pods`` reads back as the same requests."""
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec"])
        for p in pods:
            models = "|".join(sorted(p.models))
            out.writerow([p.id, p.cpu_milli, p.memory_mib, p.num_gpus, p.gpu_milli, models])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pods", type=Path, default=DEFAULT_PODS)
    parser.add_argument("--nodes", type=Path, default=DEFAULT_NODES)
    parser.add_argument("--variants", nargs="+", type=Variant.parse, default=list(VARIANTS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True, help="folder for {variant}.csv")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    pods, nodes = load_pods(args.pods), load_nodes(args.nodes)
    for variant in args.variants:
        path = args.out / f"{variant.name}.csv"
        write_pods(build_variant(pods, nodes, variant, args.seed), path)
        print(path)


if __name__ == "__main__":
    main()

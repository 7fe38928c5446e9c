"""Node states and a workload mix that exercise every branch of the fragmentation count."""

import numpy as np

from scheduler_app.core.fragmentation import Shape, WorkloadMix

MODELS = ["A100", "T4"]

# A model constraint, a gang, a CPU-only shape, and host memory (one shape asking for none).
MIX_WITH_MEMORY = WorkloadMix(
    (
        Shape(2_000, 1000, 1),
        Shape(6_000, 450, 1),
        Shape(3_000, 1000, 2),
        Shape(1_000, 0, 0),
        Shape(0, 300, 1, frozenset({"T4"})),
    ),
    (0.3, 0.3, 0.1, 0.2, 0.1),
    (8_000.0, 0.0, 12_000.0, 4_000.0, 2_000.0),
)


def random_states(rng, k: int):
    """(free CPU, free milli per card, card models, free memory) of k node states of up to 8 cards of
    MODELS: some mixing models, some with missing card slots."""
    gpu = rng.integers(0, 11, size=(k, 8)) * 100
    model = np.where(
        rng.random((k, 1)) < 0.7, rng.integers(0, 2, size=(k, 1)), rng.integers(0, 2, size=(k, 8))
    )
    cards = rng.integers(1, 9, size=k)
    missing = np.arange(8)[None, :] >= cards[:, None]
    gpu[missing], model[missing] = 0, -1
    return rng.integers(0, 20_000, size=k), gpu, model, rng.integers(0, 50_000, size=k)

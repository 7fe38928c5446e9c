"""DESIGN's rules, defined once: the request lifecycle (lifecycle.py) and the capacity rules as queries
(invariants.py) that the test suite, the benchmarks and operators check."""

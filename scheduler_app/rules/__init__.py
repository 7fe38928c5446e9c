"""DESIGN's rules, defined once: the request lifecycle (lifecycle.py), the capacity rules as queries
(invariants.py) that the test suite, the benchmarks and operators check, and what scheduling asks of
billing (billing.py), which billing_app registers."""

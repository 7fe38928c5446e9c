"""The scheduling pass's database side, around the pure core (scheduler_app.core):

- cluster_state.py: loading the database into the core's plain state.
- stored_state.py: keeping what the last pass left, for the next pass and the estimates.
- run.py: one pass: load, let the core decide, apply in one transaction (`run_scheduling_pass`).
- estimates.py: where and when a request would start: the next pass's own decision.
- dispatch.py: asking for a pass soon, and the embedded default's in-process schedule.
"""

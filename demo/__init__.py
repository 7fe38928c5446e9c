"""The embedded default's demo: its cluster and people (seed.py), their week of history (history.py)
and the node agents that run the demo's requests (agents.py)."""

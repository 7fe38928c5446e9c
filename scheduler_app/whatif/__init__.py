"""What-if on the cluster's own history: the replay itself (replay.py). Its runs are queued and kept
by services/whatif.py, served by api/whatif_views.py and views/operator.py."""

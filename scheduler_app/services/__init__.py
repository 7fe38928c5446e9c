"""Every write to the cluster, requests and allocations goes through a function in this package.

Each one validates first (a ValidationError naming the field; nothing written),
writes in one transaction, logs an Event and publishes the live update. Who owns what:

- requests.py: a user's requests: validated_request, submit_request, cancel_request, release_request.
- transitions.py: the request lifecycle owner: transition_request, transition_requests, requeue.
- placement.py: giving pending requests their slices: place, allocate (Slice, PlannedStart, Placed,
  OverCommitError).
- inventory.py: pools, nodes and agent credentials: create_pool, update_pool, register_node,
  issue_agent_credential, node_for_agent_token, set_node_status.
- quotas.py: team quotas: set_team_quota.
- history.py: recording work that already ran (the demo's week): record_past_requests, terminal
  requests with closed slices only, checked against every card's capacity at every moment.
- node_health.py: lost nodes lose no work: handle_node_loss, check_heartbeats, register_agent.
- log_masking.py: a team's secrets masked in its jobs' output (pure; agents.append_log stores it).
"""

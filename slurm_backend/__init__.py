"""The Slurm backend: a pool whose work Slurm runs, through slurmrestd.

The boundary every backend keeps: placement, the lifecycle owner, metering, budgets and the live
pages are the portal's and do not know which backend runs a pool. A backend stands where each node's
agent stands. It reads the node's work list (scheduler_app.selectors.node_work: what must run there,
with its cards and shares; what dropped out of it must stop; `stop_by`: checkpoint and stop by then)
and reports through the services the agent's API calls (scheduler_app.services.agents:
report_started, report_finished, append_log, record_checkpoint; the node through
scheduler_app.services.inventory and node_health). It only starts, watches, signals and stops work.

Here the portal plays that part for every node of a Slurm partition (sync.py, every
SLURM_SYNC_INTERVAL_S): each run becomes a batch job pinned to the node the portal chose, with
`shard:k` for a fraction or `gpu:n` for whole cards (jobs.py); Slurm's job states come back as those
reports; a stop is scancel's TERM, then KILL after the grace. The nodes and their gres are imported
and kept as Slurm lists them (nodes.py). A Kubernetes backend would be the same shape: a per-node
reconciler turning the work list into pods (HAMi's nvidia.com/gpumem and gpucores, KAI's gpu-fraction
annotation) and pod phases into the same reports.
"""

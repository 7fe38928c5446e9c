"""The scheduler's pages, one module per subject: requests, the cluster picture, the operator's pages
(nodes, pools, quotas, identities, what-if) and the Prometheus exposition; each view parses, authorizes,
calls one service and renders."""

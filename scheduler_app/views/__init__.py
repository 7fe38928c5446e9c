"""The scheduler's pages, one module per subject: requests, the cluster picture and the operator's pages
(nodes, pools, quotas, identities, what-if); each view parses, authorizes, calls one service and renders."""

"""The pages, one module per concept; each view parses, authorizes, calls one service and renders."""

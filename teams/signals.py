"""The signal teams sends. Teams sits below the event log (audit), so it announces each change its
services make and audit records it as an Event (audit.receivers); teams' own receivers, which keep the
API token cache fresh, are in teams.receivers."""

from django.dispatch import Signal

# Sent by teams.services inside the change's transaction, synchronously: a receiver's write commits or
# rolls back with the change. Arguments: subject (the row changed), to_state, and optionally from_state,
# actor, team, reason and data (JSON details, never a secret's value).
changed = Signal()

from django.conf import settings
from django.db import models
from django.utils import timezone


class IdempotencyKey(models.Model):
    """The answer to a write, kept under the Idempotency-Key its client sent, so that a repeat of the
    write gets the same answer instead of being done twice (infra.idempotency).

    Saved in the write's own transaction: a key is stored with its answer exactly when the write was
    applied. `status` and `body` are the HTTP answer (the JSON as sent); `request_hash` (SHA-256, hex)
    fingerprints the method, path and body it answered. Kept IDEMPOTENCY_KEY_TTL_S at least."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    request_hash = models.CharField(max_length=64)
    # None only inside the transaction that claimed the key, before its write answered.
    status = models.PositiveSmallIntegerField(null=True)
    body = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        db_table = "portal_idempotencykey"  # made by the portal app's migrations, before this app held it
        constraints = [models.UniqueConstraint(fields=["user", "key"], name="idempotency_key_once_per_user")]

    def __str__(self):
        return f"{self.key} ({self.status})"

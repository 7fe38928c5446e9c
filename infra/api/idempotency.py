"""The Idempotency-Key header on the API's writes (see infra.idempotency for how keys are kept).

A POST handler marked @idempotent takes the header: the first request with a key runs the handler
and keeps its answer with the write, in one transaction; a repeat with the same key and the same
method, path and body gets that answer again (status and body, with `Idempotent-Replayed: true`) and
writes nothing; the same key with another request is refused with 422. A duplicate sent while the
first is still running waits for it and gets its answer: Stripe answers 409 there, which would send
the client to retry what the portal can simply finish. Without the header a handler runs as before.
"""

import functools
import re

from django.db import transaction
from django.http import HttpResponse
from rest_framework.exceptions import ValidationError

from infra.api.errors import IDEMPOTENCY_KEY_HEADER as HEADER
from infra.api.errors import IdempotencyKeyReused
from infra.idempotency import KeyReused, answer_key, claim_key, request_hash

REPLAYED_HEADER = "Idempotent-Replayed"
# What clients generate (UUIDs, random tokens) fits: printable ASCII, as HTTP headers carry.
KEY_PATTERN = re.compile(r"[\x20-\x7e]{1,255}")
KEY_RULE = "At most 255 printable ASCII characters (a UUID, say), unique to each write you mean."


def idempotent(handler):
    """Mark a POST handler that takes an Idempotency-Key: see the module's docstring."""

    @functools.wraps(handler)
    def with_key(view, request, *args, **kwargs):
        key = request.headers.get(HEADER)
        if key is None or request.method != "POST":
            return handler(view, request, *args, **kwargs)
        if not KEY_PATTERN.fullmatch(key):
            raise ValidationError({HEADER: [KEY_RULE]})
        fingerprint = request_hash(request.method, request.get_full_path(), request.data)
        with transaction.atomic():
            try:
                claim, fresh = claim_key(request.user, key, fingerprint)
            except KeyReused:
                raise IdempotencyKeyReused() from None
            if not fresh:
                replay = HttpResponse(claim.body, status=claim.status, content_type="application/json")
                replay[REPLAYED_HEADER] = "true"
                return replay
            response = handler(view, request, *args, **kwargs)
            body = request.accepted_renderer.render(
                response.data, request.accepted_media_type, view.get_renderer_context()
            )
            answer_key(claim, response.status_code, body.decode())
        return response

    with_key.takes_idempotency_key = True  # read by infra.api.schema
    return with_key

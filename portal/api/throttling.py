import logging

from redis.exceptions import RedisError
from rest_framework.throttling import SimpleRateThrottle

from portal.tokens import hash_token

log = logging.getLogger(__name__)


class CountingThrottle(SimpleRateThrottle):
    """Counters live in the cache (Redis in production); when it is away, let the request through."""

    def allow_request(self, request, view):
        try:
            return super().allow_request(request, view)
        except RedisError as error:
            log.warning("cannot reach Redis for the API rate counters; not throttling: %s", error)
            return True


class PerTokenRateThrottle(CountingThrottle):
    """A budget per API token (or per session user): 429 with Retry-After when spent."""

    scope = "api"

    def get_cache_key(self, request, view):
        if not request.user or not request.user.is_authenticated:
            return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}
        if isinstance(request.auth, str):
            ident = f"token-{hash_token(request.auth)[:16]}"
        else:
            ident = f"user-{request.user.pk}"
        return self.cache_format % {"scope": self.scope, "ident": ident}


class PerNodeRateThrottle(CountingThrottle):
    """The same budget per node agent credential as per API token (the agent posts every few seconds)."""

    scope = "api"

    def get_cache_key(self, request, view):
        node_id = getattr(request.auth, "pk", None)
        ident = f"node-{node_id}" if node_id is not None else self.get_ident(request)
        return self.cache_format % {"scope": self.scope, "ident": ident}

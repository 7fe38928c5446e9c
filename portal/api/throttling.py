from rest_framework.throttling import SimpleRateThrottle

from portal.tokens import hash_token


class PerTokenRateThrottle(SimpleRateThrottle):
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


class PerNodeRateThrottle(SimpleRateThrottle):
    """The same budget per node agent credential as per API token (the agent posts every few seconds)."""

    scope = "api"

    def get_cache_key(self, request, view):
        node_id = getattr(request.auth, "pk", None)
        ident = f"node-{node_id}" if node_id is not None else self.get_ident(request)
        return self.cache_format % {"scope": self.scope, "ident": ident}

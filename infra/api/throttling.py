"""API budgets: `API_THROTTLE_RATE` requests per user (all its tokens and its session together)
and per node credential, counted atomically in the shared cache; 429 with Retry-After when spent."""

from rest_framework.throttling import SimpleRateThrottle

from infra import rate_limits


class FixedWindowThrottle(SimpleRateThrottle):
    """The scope's rate as a fixed-window counter per identity (infra.rate_limits); subclasses name
    the identity. Replaces DRF's request-history list, whose read-modify-write lost hits under load.
    While Redis is away each web process counts the same budget on its own (infra.rate_limits)."""

    scope = "api"

    def allow_request(self, request, view):
        key = self.get_cache_key(request, view)
        if self.rate is None or key is None:
            return True
        self.window = rate_limits.hit(key, self.duration, self.timer())
        return self.window.hits <= self.num_requests

    def wait(self):
        return self.window.retry_after_s


class PerUserRateThrottle(FixedWindowThrottle):
    """A budget per user, shared by all its API tokens and its session, so a new token buys no more;
    per client address for anonymous requests."""

    def get_cache_key(self, request, view):
        if request.user and request.user.is_authenticated:
            ident = f"user-{request.user.pk}"
        else:
            ident = f"address-{self.get_ident(request)}"
        return self.cache_format % {"scope": self.scope, "ident": ident}


class PerNodeRateThrottle(FixedWindowThrottle):
    """The same budget per node agent credential as per user (the agent posts every few seconds)."""

    def get_cache_key(self, request, view):
        node_id = getattr(request.auth, "pk", None)
        ident = f"node-{node_id}" if node_id is not None else f"address-{self.get_ident(request)}"
        return self.cache_format % {"scope": self.scope, "ident": ident}

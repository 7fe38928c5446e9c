from django.urls import path, re_path
from drf_spectacular.views import SpectacularSwaggerView
from rest_framework.routers import SimpleRouter

from audit.api.views import NoticeViewSet
from billing_app.api.views import (
    BudgetView,
    EstimateView,
    OperatorStatementsView,
    PoolPriceView,
    PriceHistoryView,
    PriceListView,
    PriceUploadView,
    QuoteView,
    RecommendView,
    ResizeOfferViewSet,
    SharePremiumView,
    SpotFeedView,
    StatementCsvView,
    StatementView,
    SwitchBillingView,
)
from notifications.api.views import ChannelViewSet
from portal.api.schema_view import SchemaView
from portal.api.views import not_found
from scheduler_app.api.agent_views import (
    CheckpointedView,
    FinishedView,
    HeartbeatView,
    LogView,
    MemoryExceededView,
    ReclaimNoticeView,
    RegisterView,
    StartedView,
    WorkView,
)
from scheduler_app.api.views import (
    AuditEventViewSet,
    ClusterView,
    GpuRequestViewSet,
    NodeViewSet,
    PoolViewSet,
    TeamQuotaViewSet,
)
from scheduler_app.api.whatif_views import WhatIfRunView, WhatIfView
from slurm_backend.api.views import PoolSlurmView
from teams.api.views import ApiTokenViewSet, TeamViewSet, UserUnixAccountView
from telemetry.api.views import (
    GpuSampleIngestView,
    GpuTelemetryView,
    PoolTelemetryView,
    RequestTelemetryView,
    RequestUtilizationView,
    TeamTelemetryView,
    UsageView,
)

router = SimpleRouter(use_regex_path=False)
router.register("requests", GpuRequestViewSet, basename="request")
router.register("teams", TeamViewSet, basename="team")
router.register("teams", TeamQuotaViewSet, basename="team-quota")  # teams/{slug}/quotas/: scheduling's
router.register("tokens", ApiTokenViewSet, basename="token")
router.register("nodes", NodeViewSet, basename="node")
router.register("audit", AuditEventViewSet, basename="audit-event")
router.register("pools", PoolViewSet, basename="pool")
router.register("notices", NoticeViewSet, basename="notice")
router.register("notification-channels", ChannelViewSet, basename="notification-channel")
router.register("resize-offers", ResizeOfferViewSet, basename="resize-offer")

urlpatterns = [
    path("requests/estimate/", EstimateView.as_view(), name="request-estimate"),
    path("requests/recommend/", RecommendView.as_view(), name="request-recommend"),
    *router.urls,
    path("cluster/", ClusterView.as_view(), name="cluster"),
    path("what-if/", WhatIfView.as_view(), name="what-if"),
    path("what-if/<int:pk>/", WhatIfRunView.as_view(), name="what-if-run"),
    path("prices/", PriceListView.as_view(), name="prices"),
    path("prices/history/", PriceHistoryView.as_view(), name="price-history"),
    path("prices/quote/", QuoteView.as_view(), name="price-quote"),
    path("prices/upload/", PriceUploadView.as_view(), name="price-upload"),
    path("prices/premiums/", SharePremiumView.as_view(), name="share-premiums"),
    path("pools/<slug:name>/spot-feed/", SpotFeedView.as_view(), name="pool-spot-feed"),
    path("pools/<slug:name>/price/", PoolPriceView.as_view(), name="pool-price"),
    path("pools/<slug:name>/slurm/", PoolSlurmView.as_view(), name="pool-slurm"),
    path("teams/<slug:slug>/statement/", StatementView.as_view(), name="team-statement"),
    path("teams/<slug:slug>/statement.csv", StatementCsvView.as_view(), name="team-statement-csv"),
    path("teams/<slug:slug>/budget/", BudgetView.as_view(), name="team-budget"),
    path("users/<str:username>/unix-account/", UserUnixAccountView.as_view(), name="user-unix-account"),
    path("statements/", OperatorStatementsView.as_view(), name="statements"),
    path("requests/<int:pk>/billing-mode/", SwitchBillingView.as_view(), name="request-billing-mode"),
    path("agent/samples/", GpuSampleIngestView.as_view(), name="agent-samples"),
    path("agent/register/", RegisterView.as_view(), name="agent-register"),
    path("agent/heartbeat/", HeartbeatView.as_view(), name="agent-heartbeat"),
    path("agent/work/", WorkView.as_view(), name="agent-work"),
    path("agent/usage/", UsageView.as_view(), name="agent-usage"),
    path("agent/requests/<int:pk>/started/", StartedView.as_view(), name="agent-started"),
    path("agent/requests/<int:pk>/finished/", FinishedView.as_view(), name="agent-finished"),
    path("agent/requests/<int:pk>/log/", LogView.as_view(), name="agent-log"),
    path("agent/requests/<int:pk>/checkpointed/", CheckpointedView.as_view(), name="agent-checkpointed"),
    path("agent/reclaim-notice/", ReclaimNoticeView.as_view(), name="agent-reclaim-notice"),
    path(
        "agent/requests/<int:pk>/memory-exceeded/", MemoryExceededView.as_view(), name="agent-memory-exceeded"
    ),
    path("requests/<int:pk>/utilization/", RequestUtilizationView.as_view(), name="request-utilization"),
    path("requests/<int:pk>/telemetry/", RequestTelemetryView.as_view(), name="request-telemetry"),
    path("teams/<slug:slug>/telemetry/", TeamTelemetryView.as_view(), name="team-telemetry"),
    path("pools/<slug:name>/telemetry/", PoolTelemetryView.as_view(), name="pool-telemetry"),
    path("gpus/<int:pk>/telemetry/", GpuTelemetryView.as_view(), name="gpu-telemetry"),
    path("schema/", SchemaView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api:schema"), name="docs"),
    re_path(r"^", not_found),  # any other path under /api/v1/ answers in the API's error format
]

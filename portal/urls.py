from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from portal import views
from portal.auth_forms import SignInForm

urlpatterns = [
    # First: the API (clients and node agents) serves most calls, and Django tries the patterns in order.
    path("api/v1/", include(("portal.api.urls", "api"))),
    path("", views.home, name="home"),
    path("accounts/login/", auth_views.LoginView.as_view(authentication_form=SignInForm), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/password/", auth_views.PasswordChangeView.as_view(), name="password_change"),
    path("accounts/password/done/", auth_views.PasswordChangeDoneView.as_view(), name="password_change_done"),
    path("healthz/live", views.health_live, name="health_live"),
    path("healthz/ready", views.health_ready, name="health_ready"),
    # Each app's pages, without a namespace: the URL names are the project's, as templates use them.
    path("", include("scheduler_app.urls")),
    path("", include("telemetry.urls")),
    path("", include("teams.urls")),
    path("", include("audit.urls")),
    path("", include("notifications.urls")),
    path("", include("billing_app.urls")),
    path("", include("slurm_backend.urls")),
    path("admin/", admin.site.urls),
]

handler400 = "infra.api.errors.bad_request"
handler500 = "infra.api.errors.server_error"
